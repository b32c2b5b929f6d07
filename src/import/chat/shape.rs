//! The log lines `--from chat` reads, each recognised by its fields:
//!
//! - OpenAI Batch API input lines, `{"custom_id", "method", "url", "body":
//!   {"model", "messages" | "prompt", "tools"?...}}`: the requests.
//! - OpenAI Batch API output lines, `{"id", "custom_id", "response":
//!   {"status_code", "request_id", "body": chat.completion}, "error"}`:
//!   the answers, paired with the requests by `custom_id` (the output
//!   file's order is not the input's). The time is the completion's
//!   `created` (unix seconds), the output length its `usage`.
//! - LiteLLM's StandardLoggingPayload (`kwargs["standard_logging_object"]`,
//!   one JSON object a line as its logging callbacks write it): `messages`,
//!   `response` (the ModelResponse as a dict, or text), `completion_tokens`,
//!   `startTime` (unix seconds), `status` (`success`/`failure`),
//!   `model_parameters` (with the request's `tools`).
//!
//! A message whose `content` is a list of text parts is read as the parts'
//! text joined by newlines (as vLLM hands such content to a template that
//! expects a string); any other content is passed to the template as it is.

use serde_json::Value;

use crate::error::RecordError;

/// What a request sent: chat messages (rendered by the template) or a
/// completion prompt (tokenised as it is).
#[derive(Debug, Clone)]
pub enum Prompt {
    Chat {
        messages: Vec<Value>,
        tools: Option<Value>,
    },
    Text(String),
}

/// What the log says of a request's answer.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Unix seconds (the request's start, or the completion's creation).
    pub time_s: f64,
    /// `usage.completion_tokens` (LiteLLM: `completion_tokens`).
    pub completion_tokens: Option<u64>,
    /// The answer's text, when the log has it.
    pub answer: Option<String>,
    /// The request failed (an error, a status other than 200, `failure`).
    pub failed: bool,
}

/// One log line.
#[derive(Debug)]
pub enum Entry {
    /// A request with its outcome (LiteLLM).
    Whole { prompt: Prompt, outcome: Outcome },
    /// A batch input line.
    Input { custom_id: String, prompt: Prompt },
    /// A batch output line.
    Output { custom_id: String, outcome: Outcome },
}

fn field<T>(name: &str, msg: impl std::fmt::Display) -> Result<T, RecordError> {
    Err(RecordError::field(name, msg))
}

/// Reads one line.
pub fn read(line: &[u8]) -> Result<Entry, RecordError> {
    let v: Value = serde_json::from_slice(line).map_err(|e| super::super::json_error(&e))?;
    let Value::Object(mut o) = v else {
        return Err(RecordError::new(
            "not a JSON object: expected one log record a line",
        ));
    };
    if let Some(id) = o.get("custom_id") {
        let Some(custom_id) = id.as_str().map(str::to_string) else {
            return field(
                "custom_id",
                format!("{id} is not a string: write the request's id as a string"),
            );
        };
        if let Some(mut body) = o.remove("body") {
            let prompt = prompt_of(&mut body, "body.")?;
            return Ok(Entry::Input { custom_id, prompt });
        }
        if o.contains_key("response") || o.contains_key("error") {
            return Ok(Entry::Output {
                custom_id,
                outcome: batch_outcome(&o)?,
            });
        }
        return Err(RecordError::new(
            "a batch line with neither `body` (an input line) nor `response`/`error` (an output line)",
        ));
    }
    if o.contains_key("messages") && o.contains_key("startTime") {
        return litellm(o);
    }
    Err(RecordError::new(
        "not a chat log line: expected an OpenAI batch input line (`custom_id`, `body`), \
         a batch output line (`custom_id`, `response`) or a LiteLLM StandardLoggingPayload \
         (`messages`, `startTime`)",
    ))
}

/// The request in `body` (a batch line's body, or a LiteLLM payload): its
/// `messages` or `prompt`; `at` prefixes the field names in errors.
fn prompt_of(body: &mut Value, at: &str) -> Result<Prompt, RecordError> {
    if let Some(m) = body.get_mut("messages").map(Value::take) {
        let tools = body
            .get_mut("tools")
            .map(Value::take)
            .filter(|t| !t.is_null());
        return messages(m, tools, at);
    }
    match body.get("prompt") {
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(other) => field(
            &format!("{at}prompt"),
            format!(
                "{} is not a string: one prompt a request (a list of prompts is a batch of requests; split it)",
                kind(other)
            ),
        ),
        None => field(
            &format!("{at}messages"),
            "missing: a request needs `messages` (chat) or `prompt` (completion)",
        ),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Chat messages, checked and with text-part lists joined.
fn messages(m: Value, tools: Option<Value>, at: &str) -> Result<Prompt, RecordError> {
    let name = format!("{at}messages");
    let list = match m {
        Value::Array(list) if !list.is_empty() => list,
        Value::Array(_) => return field(&name, "an empty list: a request has at least one message"),
        Value::String(s) => return Ok(Prompt::Text(s)),
        other => {
            return field(
                &name,
                format!("{} is not a list of messages: write [{{\"role\": \"user\", \"content\": \"...\"}}]", kind(&other)),
            )
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for (k, mut msg) in list.into_iter().enumerate() {
        let Some(obj) = msg.as_object_mut() else {
            return field(
                &format!("{name}[{k}]"),
                format!(
                    "{} is not a message: write {{\"role\": ..., \"content\": ...}}",
                    kind(&msg)
                ),
            );
        };
        if !obj.get("role").is_some_and(Value::is_string) {
            return field(
                &format!("{name}[{k}].role"),
                "missing or not a string: every message names its role (system, user, assistant, tool)",
            );
        }
        if let Some(Value::Array(parts)) = obj.get("content") {
            let text: Option<Vec<&str>> = parts
                .iter()
                .map(|p| {
                    (p.get("type").and_then(Value::as_str) == Some("text"))
                        .then(|| p.get("text").and_then(Value::as_str))
                        .flatten()
                })
                .collect();
            if let Some(text) = text {
                let joined = text.join("\n");
                obj.insert("content".into(), Value::String(joined));
            }
        }
        out.push(msg);
    }
    Ok(Prompt::Chat {
        messages: out,
        tools,
    })
}

/// The answer text of a chat.completion (or text_completion) body.
fn answer_text(body: &Value) -> Option<String> {
    let choice = body.get("choices")?.get(0)?;
    choice
        .get("message")
        .and_then(|m| m.get("content"))
        .or_else(|| choice.get("text"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn usage_tokens(v: Option<&Value>, name: &str) -> Result<Option<u64>, RecordError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_u64() {
            Some(n) => crate::limits::tokens(name, n).map(Some),
            None => field(
                name,
                format!("{x} is not a token count: write an integer >= 0"),
            ),
        },
    }
}

fn seconds(v: Option<&Value>, name: &str) -> Result<f64, RecordError> {
    match v.and_then(Value::as_f64) {
        Some(t) if t.is_finite() && t >= 0.0 => {
            crate::limits::time_ms(name, t * 1000.0)?;
            Ok(t)
        }
        _ => field(
            name,
            format!(
                "{} is not a time: expected unix seconds (a number >= 0)",
                v.map_or("missing".to_string(), |x| x.to_string())
            ),
        ),
    }
}

/// A batch output line's outcome.
fn batch_outcome(o: &serde_json::Map<String, Value>) -> Result<Outcome, RecordError> {
    let resp = o.get("response").filter(|r| !r.is_null());
    let error = o.get("error").filter(|e| !e.is_null());
    let status = resp
        .and_then(|r| r.get("status_code"))
        .and_then(Value::as_u64);
    let body = resp.and_then(|r| r.get("body"));
    if error.is_some() || status.is_some_and(|s| s != 200) || body.is_none() {
        // A failed request: kept only to be counted; its time is unknown.
        return Ok(Outcome {
            failed: true,
            ..Outcome::default()
        });
    }
    let body = body.unwrap_or(&Value::Null);
    Ok(Outcome {
        time_s: seconds(body.get("created"), "response.body.created")?,
        completion_tokens: usage_tokens(
            body.get("usage").and_then(|u| u.get("completion_tokens")),
            "response.body.usage.completion_tokens",
        )?,
        answer: answer_text(body),
        failed: false,
    })
}

/// A LiteLLM StandardLoggingPayload.
fn litellm(mut o: serde_json::Map<String, Value>) -> Result<Entry, RecordError> {
    let time_s = seconds(o.get("startTime"), "startTime")?;
    let failed = o.get("status").and_then(Value::as_str) == Some("failure");
    let completion_tokens = usage_tokens(o.get("completion_tokens"), "completion_tokens")?;
    let answer = match o.get("response") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(r @ Value::Object(_)) => answer_text(r),
        _ => None,
    };
    let tools = o
        .get_mut("model_parameters")
        .and_then(|p| p.get_mut("tools"))
        .map(Value::take)
        .filter(|t| !t.is_null());
    let m = o.remove("messages").unwrap_or(Value::Null);
    let prompt = match m {
        Value::Null => return field("messages", "null: the payload has no request messages (was the proxy run with message logging turned off?)"),
        m => messages(m, tools, "")?,
    };
    Ok(Entry::Whole {
        prompt,
        outcome: Outcome {
            time_s,
            // A zero count on a failure is LiteLLM's default, not a length.
            completion_tokens: completion_tokens.filter(|_| !failed),
            answer,
            failed,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_by_its_fields() {
        let e = read(br#"{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}}"#).unwrap();
        let Entry::Input {
            custom_id,
            prompt: Prompt::Chat { messages, tools },
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!(custom_id, "r1");
        assert_eq!(messages[0]["content"], "a\nb");
        assert!(tools.is_none());
        let e = read(br#"{"id": "batch_req_1", "custom_id": "r1", "response": {"status_code": 200, "request_id": "x", "body": {"created": 1711652795, "choices": [{"message": {"role": "assistant", "content": "hi"}}], "usage": {"prompt_tokens": 9, "completion_tokens": 7}}}, "error": null}"#).unwrap();
        let Entry::Output { outcome, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            (
                outcome.time_s,
                outcome.completion_tokens,
                outcome.answer.as_deref(),
                outcome.failed
            ),
            (1711652795.0, Some(7), Some("hi"), false)
        );
        let e = read(br#"{"id": "b", "custom_id": "r2", "response": null, "error": {"code": "x", "message": "y"}}"#).unwrap();
        assert!(matches!(
            e,
            Entry::Output {
                outcome: Outcome { failed: true, .. },
                ..
            }
        ));
        let e = read(br#"{"id": "c", "status": "success", "startTime": 1700000000.25, "messages": [{"role": "user", "content": "q"}], "response": {"choices": [{"message": {"content": "a"}}]}, "completion_tokens": 3, "model_parameters": {"tools": [{"type": "function"}]}}"#).unwrap();
        let Entry::Whole {
            prompt: Prompt::Chat { tools, .. },
            outcome,
        } = e
        else {
            panic!("{e:?}")
        };
        assert!(tools.is_some());
        assert_eq!(
            (outcome.time_s, outcome.completion_tokens),
            (1700000000.25, Some(3))
        );
    }

    #[test]
    fn bad_lines_name_the_field_and_the_fix() {
        let err = |s: &str| read(s.as_bytes()).unwrap_err().0;
        assert!(err(r#"{"custom_id": "a", "body": {"model": "m"}}"#)
            .contains("field `body.messages`: missing"));
        assert!(err(r#"{"startTime": 1, "messages": [{"content": "x"}]}"#)
            .contains("field `messages[0].role`"));
        assert!(err(r#"{"startTime": -1, "messages": []}"#).contains("field `startTime`"));
        assert!(err(r#"{"a": 1}"#).contains("not a chat log line"));
        assert!(err(r#"[1]"#).contains("not a JSON object"));
        assert!(err(r#"{"custom_id": "a", "response": {"status_code": 200, "body": {"created": 1, "usage": {"completion_tokens": -2}}}}"#).contains("field `response.body.usage.completion_tokens`"));
    }
}
