//! What a completion request asks for: streaming, usage, lengths, and the
//! prompt's size, and from that the answer the mock gives.
//!
//! The mock has no tokenizer: a prompt token is a whitespace-separated word
//! (a token id in a completions prompt given as ids).

use crate::hash::Fnv1a;
use serde_json::{Map, Value};

/// vLLM's completions default, used for chat too.
pub const DEFAULT_MAX_TOKENS: u64 = 16;

/// The context length the mock claims in /v1/models. A longer answer is
/// refused, as vLLM would, which also bounds the memory a request can make
/// the mock spend.
pub const MAX_MODEL_LEN: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/completions`
    Completion,
}

/// The fields of a request body the mock acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub stream: bool,
    pub include_usage: bool,
    pub prompt_tokens: u64,
    /// With a prefix cache: the hash of the prompt's word prefix at the end
    /// of each full cache block, in order.
    pub prefix_hashes: Vec<u64>,
    /// As requested (chat: `max_completion_tokens` wins over `max_tokens`).
    pub max_tokens: Option<u64>,
    pub min_tokens: u64,
    pub ignore_eos: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// The answer's length and why it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub tokens: u64,
    pub finish: Finish,
}

/// Reads a request body; the error is the message for a 400.
/// Reads a request body; the error is the message for a 400. With
/// `cache_block` > 0, also hashes the prompt's word prefixes per block.
pub fn parse(kind: Kind, body: &[u8], cache_block: u64) -> Result<Ask, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| "the body must be a JSON object".to_string())?;
    let max_tokens = match kind {
        Kind::Chat => match count(obj, "max_completion_tokens")? {
            Some(n) => Some(n),
            None => count(obj, "max_tokens")?,
        },
        Kind::Completion => count(obj, "max_tokens")?,
    };
    let include_usage = match obj.get("stream_options") {
        Some(Value::Object(o)) => flag(o, "include_usage")?,
        None | Some(Value::Null) => false,
        Some(_) => return Err("`stream_options` must be an object".into()),
    };
    if kind == Kind::Chat {
        check_messages(obj.get("messages"))?;
    }
    let mut words = Words::new(cache_block);
    match kind {
        Kind::Chat => obj
            .get("messages")
            .map_or((), |m| chat_words(m, &mut words)),
        Kind::Completion => obj
            .get("prompt")
            .map_or((), |p| prompt_words(p, &mut words)),
    }
    let prompt_tokens = words.count;
    let prefix_hashes = words.hashes;
    Ok(Ask {
        stream: flag(obj, "stream")?,
        include_usage,
        prompt_tokens,
        prefix_hashes,
        max_tokens,
        min_tokens: count(obj, "min_tokens")?.unwrap_or(0),
        ignore_eos: flag(obj, "ignore_eos")?,
    })
}

impl Ask {
    /// How long the answer is: with `ignore_eos` exactly the maximum;
    /// otherwise the model "meets EOS" after `eos_after` tokens, kept within
    /// `min_tokens..=max_tokens`.
    pub fn answer(&self, eos_after: u64) -> Result<Answer, String> {
        let max = self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if max > MAX_MODEL_LEN {
            return Err(format!(
                "max_tokens ({max}) is longer than the model's context length ({MAX_MODEL_LEN})"
            ));
        }
        if self.min_tokens > max {
            // vLLM refuses this too.
            return Err(format!(
                "min_tokens ({}) must be less than or equal to max_tokens ({max})",
                self.min_tokens
            ));
        }
        if self.ignore_eos {
            return Ok(Answer {
                tokens: max,
                finish: Finish::Length,
            });
        }
        let tokens = eos_after.clamp(self.min_tokens, max);
        let finish = if tokens < max {
            Finish::Stop
        } else {
            Finish::Length
        };
        Ok(Answer { tokens, finish })
    }
}

fn count(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer")),
    }
}

fn flag(obj: &Map<String, Value>, key: &str) -> Result<bool, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(format!("`{key}` must be true or false")),
    }
}

/// Counts prompt words (the mock's tokens) and, for the prefix cache,
/// hashes the word sequence so far at every `block` words (FNV-1a over the
/// words, so each hash names the whole prefix up to its block).
struct Words {
    count: u64,
    block: u64,
    prefix: Fnv1a,
    hashes: Vec<u64>,
}

impl Words {
    fn new(block: u64) -> Self {
        Words {
            count: 0,
            block,
            prefix: Fnv1a::new(0),
            hashes: Vec::new(),
        }
    }

    fn add(&mut self, text: &str) {
        for w in text.split_whitespace() {
            self.count += 1;
            if self.block == 0 {
                continue;
            }
            self.prefix.write(w.as_bytes());
            self.prefix.write(b" ");
            if self.count.is_multiple_of(self.block) {
                self.hashes.push(self.prefix.finish());
            }
        }
    }
}

/// The roles vLLM's chat template accepts.
const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// As strict as vLLM's request validation: `messages` is a non-empty list
/// of objects, each with a known `role` and a `content` that is a string, a
/// list of parts (objects with a `type`), or null. A mock that accepts what
/// real servers refuse would hide client bugs.
fn check_messages(messages: Option<&Value>) -> Result<(), String> {
    let list = match messages {
        None | Some(Value::Null) => return Err("`messages` is required".into()),
        Some(Value::Array(l)) => l,
        Some(_) => return Err("`messages` must be a list".into()),
    };
    if list.is_empty() {
        return Err("`messages` must hold at least one message".into());
    }
    for (i, m) in list.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(format!("messages[{i}]: expected an object, not {m}"));
        };
        match m.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {}
            Some(r) => return Err(format!("messages[{i}].role: unknown role {r}")),
            None => return Err(format!("messages[{i}]: `role` is required")),
        }
        match m.get("content") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(Value::Array(parts)) => {
                if let Some(j) = parts
                    .iter()
                    .position(|p| !p.get("type").is_some_and(Value::is_string))
                {
                    return Err(format!(
                        "messages[{i}].content[{j}]: expected an object with a `type`"
                    ));
                }
            }
            Some(c) => {
                return Err(format!(
                    "messages[{i}].content: expected a string or a list of parts, not {c}"
                ))
            }
        }
    }
    Ok(())
}

/// Words in every message's `content`: a string, or a list of parts whose
/// `text` strings count (images and the like count nothing).
fn chat_words(messages: &Value, words: &mut Words) {
    let Value::Array(messages) = messages else {
        return;
    };
    for m in messages {
        match m.get("content") {
            Some(Value::String(s)) => words.add(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(Value::String(s)) = p.get("text") {
                        words.add(s);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A completions prompt: a string (its words), a token id (one), or a list
/// of either, nested for batches.
fn prompt_words(prompt: &Value, words: &mut Words) {
    match prompt {
        Value::String(s) => words.add(s),
        Value::Number(n) => words.add(&n.to_string()),
        Value::Array(items) => items.iter().for_each(|i| prompt_words(i, words)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_checked_as_vllm_does() {
        let err = |body: &str| parse(Kind::Chat, body.as_bytes(), 0).unwrap_err();
        assert_eq!(
            err(r#"{"messages":[]}"#),
            "`messages` must hold at least one message"
        );
        assert_eq!(
            err(r#"{"messages":[1,"x",null]}"#),
            "messages[0]: expected an object, not 1"
        );
        assert_eq!(err(r#"{}"#), "`messages` is required");
        assert_eq!(err(r#"{"messages":{}}"#), "`messages` must be a list");
        assert_eq!(
            err(r#"{"messages":[{"content":"x"}]}"#),
            "messages[0]: `role` is required"
        );
        assert_eq!(
            err(r#"{"messages":[{"role":"robot","content":"x"}]}"#),
            "messages[0].role: unknown role \"robot\""
        );
        assert_eq!(
            err(r#"{"messages":[{"role":"user","content":5}]}"#),
            "messages[0].content: expected a string or a list of parts, not 5"
        );
        assert_eq!(
            err(r#"{"messages":[{"role":"user","content":[{"text":"a"}]}]}"#),
            "messages[0].content[0]: expected an object with a `type`"
        );
        // Completions take a prompt, not messages.
        assert!(parse(Kind::Completion, br#"{"prompt":"a"}"#, 0).is_ok());
        assert!(parse(
            Kind::Chat,
            br#"{"messages":[{"role":"assistant","content":null,"tool_calls":[]},{"role":"user","content":[{"type":"text","text":"a"}]}]}"#,
            0
        )
        .is_ok());
    }

    fn chat(body: &str) -> Ask {
        parse(Kind::Chat, body.as_bytes(), 0).unwrap()
    }

    #[test]
    fn counts_chat_words_in_strings_and_text_parts() {
        let a = chat(
            r#"{"messages":[{"role":"system","content":"be  brief"},
                {"role":"user","content":[{"type":"text","text":"one two three"},
                                          {"type":"image_url","image_url":{"url":"x y"}}]},
                {"role":"assistant","content":null}]}"#,
        );
        assert_eq!(a.prompt_tokens, 5);
    }

    #[test]
    fn counts_completion_prompts_of_every_shape() {
        let p = |s: &str| {
            parse(
                Kind::Completion,
                format!(r#"{{"prompt":{s}}}"#).as_bytes(),
                0,
            )
            .unwrap()
            .prompt_tokens
        };
        assert_eq!(p(r#""a b c""#), 3);
        assert_eq!(p(r#"["a b", "c"]"#), 3);
        assert_eq!(p("[1, 2, 3, 4]"), 4);
        assert_eq!(p("[[1, 2], [3]]"), 3);
    }

    #[test]
    fn max_completion_tokens_wins_in_chat_only() {
        let body = r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7}"#;
        assert_eq!(chat(body).max_tokens, Some(7));
        let c = parse(Kind::Completion, body.as_bytes(), 0).unwrap();
        assert_eq!(c.max_tokens, Some(5));
    }

    #[test]
    fn answer_lengths() {
        let ask = |max, min, ignore| Ask {
            stream: false,
            include_usage: false,
            prompt_tokens: 0,
            prefix_hashes: Vec::new(),
            max_tokens: max,
            min_tokens: min,
            ignore_eos: ignore,
        };
        let a = |t, f| {
            Ok(Answer {
                tokens: t,
                finish: f,
            })
        };
        assert_eq!(ask(Some(100), 0, false).answer(64), a(64, Finish::Stop));
        assert_eq!(ask(Some(10), 0, false).answer(64), a(10, Finish::Length));
        assert_eq!(ask(Some(100), 80, false).answer(64), a(80, Finish::Stop));
        assert_eq!(ask(Some(100), 0, true).answer(64), a(100, Finish::Length));
        assert_eq!(ask(None, 0, true).answer(64), a(16, Finish::Length));
        assert_eq!(ask(Some(0), 0, false).answer(64), a(0, Finish::Length));
        assert!(ask(Some(5), 6, false).answer(64).is_err());
        assert!(ask(Some(MAX_MODEL_LEN + 1), 0, true).answer(64).is_err());
    }

    #[test]
    fn bad_bodies_are_errors() {
        for bad in [
            "{",
            "[]",
            r#"{"max_tokens":-1}"#,
            r#"{"max_tokens":"5"}"#,
            r#"{"stream":"yes"}"#,
        ] {
            assert!(parse(Kind::Chat, bad.as_bytes(), 0).is_err(), "{bad}");
        }
    }
}
