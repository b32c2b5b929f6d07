//! The JSON body of one request.

use serde_json::{json, Map, Value};

use crate::replay::trace::{Content, Turn};

/// Which OpenAI endpoint requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Endpoint {
    /// `/v1/chat/completions` with `messages`.
    Chat,
    /// `/v1/completions` with `prompt`.
    Completions,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/chat/completions",
            Endpoint::Completions => "/completions",
        }
    }
}

/// What every request body shares.
#[derive(Debug, Clone)]
pub struct BodyOptions {
    pub endpoint: Endpoint,
    pub model: String,
    /// Ask for exactly `output_length` tokens (`min_tokens`, `ignore_eos`).
    pub exact_output: bool,
    /// `--extra-body`, merged before the row's own `extra`.
    pub extra_body: Option<Map<String, Value>>,
}

/// The prompt of one request, already resolved from the row.
pub enum Prompt<'a> {
    /// Text: one user message for chat, the prompt for completions.
    Text(&'a str),
    /// Chat messages (and tools) as they will be sent.
    Messages(&'a [Value], Option<&'a Value>),
}

/// Writes the body for `turn` with `prompt` into `out`.
pub fn write(opts: &BodyOptions, turn: &Turn, prompt: Prompt<'_>, out: &mut Vec<u8>) {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(opts.model.clone()));
    match (opts.endpoint, prompt) {
        (Endpoint::Chat, Prompt::Text(text)) => {
            body.insert(
                "messages".into(),
                json!([{"role": "user", "content": text}]),
            );
        }
        (Endpoint::Chat, Prompt::Messages(messages, tools)) => {
            body.insert("messages".into(), Value::Array(messages.to_vec()));
            if let Some(t) = tools {
                body.insert("tools".into(), t.clone());
            }
        }
        (Endpoint::Completions, Prompt::Text(text)) => {
            body.insert("prompt".into(), Value::String(text.to_string()));
        }
        // Refused when the trace is loaded (messages need the chat endpoint).
        (Endpoint::Completions, Prompt::Messages(..)) => {}
    }
    if let Some(n) = turn.output_length {
        body.insert("max_tokens".into(), n.into());
        if opts.endpoint == Endpoint::Chat {
            body.insert("max_completion_tokens".into(), n.into());
        }
        if opts.exact_output {
            body.insert("min_tokens".into(), n.into());
            body.insert("ignore_eos".into(), true.into());
        }
    }
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({"include_usage": true}));
    for extra in [opts.extra_body.as_ref(), turn.extra.as_ref()]
        .into_iter()
        .flatten()
    {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    // Writing a `Map` of `Value`s into a Vec cannot fail.
    let _ = serde_json::to_writer(out, &Value::Object(body));
}

/// True when the row's prompt is literal messages.
pub fn needs_chat(turn: &Turn) -> bool {
    matches!(turn.content, Content::Messages { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(out: Option<u64>, extra: Option<Value>) -> Turn {
        Turn {
            line: 1,
            session: None,
            turn: 0,
            timestamp_ms: None,
            delay_ms: None,
            tool_wait_ms: 0.0,
            input_length: Some(3),
            output_length: out,
            hash_ids: Box::new([]),
            content: Content::Synth,
            extra: extra.and_then(|e| e.as_object().cloned()),
            call: None,
        }
    }

    fn opts(endpoint: Endpoint, exact: bool) -> BodyOptions {
        BodyOptions {
            endpoint,
            model: "m".into(),
            exact_output: exact,
            extra_body: None,
        }
    }

    fn body(o: &BodyOptions, t: &Turn, p: Prompt<'_>) -> Value {
        let mut v = Vec::new();
        write(o, t, p, &mut v);
        serde_json::from_slice(&v).unwrap()
    }

    #[test]
    fn chat_body_asks_for_exact_length_and_usage() {
        let b = body(
            &opts(Endpoint::Chat, true),
            &turn(Some(5), None),
            Prompt::Text(" a b"),
        );
        assert_eq!(
            b,
            json!({"model":"m","messages":[{"role":"user","content":" a b"}],
                   "max_tokens":5,"max_completion_tokens":5,"min_tokens":5,"ignore_eos":true,
                   "stream":true,"stream_options":{"include_usage":true}})
        );
    }

    #[test]
    fn completions_body_and_no_exact_output() {
        let b = body(
            &opts(Endpoint::Completions, false),
            &turn(Some(2), None),
            Prompt::Text("x"),
        );
        assert_eq!(
            b,
            json!({"model":"m","prompt":"x","max_tokens":2,"stream":true,
                   "stream_options":{"include_usage":true}})
        );
    }

    #[test]
    fn extra_overrides_in_order() {
        let mut o = opts(Endpoint::Chat, true);
        o.extra_body = Some(
            json!({"temperature": 0.5, "top_p": 0.9})
                .as_object()
                .unwrap()
                .clone(),
        );
        let t = turn(
            None,
            Some(json!({"temperature": 0, "stream": true, "seed": 3})),
        );
        let b = body(&o, &t, Prompt::Text("x"));
        assert_eq!(b["temperature"], json!(0));
        assert_eq!(b["top_p"], json!(0.9));
        assert_eq!(b["seed"], json!(3));
        assert!(b.get("max_tokens").is_none());
    }

    #[test]
    fn messages_and_tools_verbatim() {
        let msgs = vec![
            json!({"role":"system","content":"s"}),
            json!({"role":"user","content":[{"type":"text","text":"u"}]}),
        ];
        let tools = json!([{"type":"function","function":{"name":"f"}}]);
        let b = body(
            &opts(Endpoint::Chat, false),
            &turn(None, None),
            Prompt::Messages(&msgs, Some(&tools)),
        );
        assert_eq!(b["messages"], Value::Array(msgs));
        assert_eq!(b["tools"], tools);
    }
}
