//! The JSON the mock sends, shaped and ordered as vLLM's (ARCHITECTURE.md §2, wire formats).
//!
//! Structs rather than `json!` so keys keep vLLM's order (serde_json's
//! `Value` would sort them).

use std::io;

use serde::Serialize;

use crate::hash::splitmix64;

use super::faults;
use super::request::Kind;

/// The end of every stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";
/// The `--malformed-after` event.
pub const MALFORMED: &[u8] = b"data: {this is not json\n\n";

/// The answer's tokens cycle through these common words, each one token in
/// any real tokenizer, so a client that re-tokenizes the text counts right.
const WORDS: [&str; 8] = [" the", " of", " and", " to", " in", " is", " it", " on"];

/// Token `i`'s text is token `i % TOKEN_CYCLE`'s: a stream's token events
/// repeat with this period (the pacer frames each of them once).
pub const TOKEN_CYCLE: u64 = WORDS.len() as u64;

/// The text of token `i` of an answer.
pub fn token_text(i: u64) -> &'static str {
    WORDS[(i % WORDS.len() as u64) as usize]
}

/// The text of an answer of `n` tokens.
pub fn answer_text(n: u64) -> String {
    (0..n).map(token_text).collect()
}

/// `data: <json>\n\n`
pub fn sse(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WireUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
    pub completion_tokens: u64,
    pub prompt_tokens_details: PromptDetails,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PromptDetails {
    pub cached_tokens: u64,
}

impl WireUsage {
    pub fn new(prompt: u64, completion: u64, cached: u64) -> Self {
        WireUsage {
            prompt_tokens: prompt,
            total_tokens: prompt.saturating_add(completion),
            completion_tokens: completion,
            prompt_tokens_details: PromptDetails {
                cached_tokens: cached,
            },
        }
    }
}

/// The frame shared by chunks and whole responses.
#[derive(Serialize)]
struct Envelope<'a, C> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<WireUsage>,
}

#[derive(Serialize)]
struct DeltaChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: (),
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    content: &'a str,
}

#[derive(Serialize)]
struct TextChoice<'a> {
    index: u32,
    text: &'a str,
    logprobs: (),
    finish_reason: Option<&'a str>,
    stop_reason: (),
}

#[derive(Serialize)]
struct MessageChoice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: (),
    finish_reason: &'a str,
    stop_reason: (),
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

/// One response's identity: every chunk of a stream repeats it.
pub struct Reply<'a> {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: &'a str,
}

impl<'a> Reply<'a> {
    /// `id_bits` picks the id; vLLM's are random hex.
    pub fn new(kind: Kind, id_bits: u64, created: u64, model: &'a str) -> Self {
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        };
        let hi = splitmix64(id_bits);
        let lo = splitmix64(hi);
        Reply {
            kind,
            id: format!("{prefix}-{hi:016x}{lo:016x}"),
            created,
            model,
        }
    }

    fn envelope<C>(
        &self,
        object: &'static str,
        choices: C,
        usage: Option<WireUsage>,
    ) -> Envelope<'_, C> {
        Envelope {
            id: &self.id,
            object,
            created: self.created,
            model: self.model,
            choices,
            usage,
        }
    }

    fn chunk_object(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        }
    }

    /// Chat's first event: the role, no token.
    pub fn role_chunk(&self) -> io::Result<Vec<u8>> {
        let choice = DeltaChoice {
            index: 0,
            delta: Delta {
                role: Some("assistant"),
                content: "",
            },
            logprobs: (),
            finish_reason: None,
        };
        json(&self.envelope(self.chunk_object(), [choice], None))
    }

    /// One token's event; the last one carries the finish reason.
    pub fn token_chunk(&self, text: &str, finish: Option<&str>) -> io::Result<Vec<u8>> {
        match self.kind {
            Kind::Chat => {
                let choice = DeltaChoice {
                    index: 0,
                    delta: Delta {
                        role: None,
                        content: text,
                    },
                    logprobs: (),
                    finish_reason: finish,
                };
                json(&self.envelope(self.chunk_object(), [choice], None))
            }
            Kind::Completion => {
                let choice = TextChoice {
                    index: 0,
                    text,
                    logprobs: (),
                    finish_reason: finish,
                    stop_reason: (),
                };
                json(&self.envelope(self.chunk_object(), [choice], None))
            }
        }
    }

    /// The usage event: no choices.
    pub fn usage_chunk(&self, usage: WireUsage) -> io::Result<Vec<u8>> {
        let none: [(); 0] = [];
        json(&self.envelope(self.chunk_object(), none, Some(usage)))
    }

    /// A whole non-streaming response.
    pub fn full(&self, text: &str, finish: &str, usage: Option<WireUsage>) -> io::Result<Vec<u8>> {
        match self.kind {
            Kind::Chat => {
                let choice = MessageChoice {
                    index: 0,
                    message: Message {
                        role: "assistant",
                        content: text,
                    },
                    logprobs: (),
                    finish_reason: finish,
                    stop_reason: (),
                };
                json(&self.envelope("chat.completion", [choice], usage))
            }
            Kind::Completion => {
                let choice = TextChoice {
                    index: 0,
                    text,
                    logprobs: (),
                    finish_reason: Some(finish),
                    stop_reason: (),
                };
                json(&self.envelope("text_completion", [choice], usage))
            }
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: (),
    code: u16,
}

/// `{"error":{"message","type","param","code"}}`, as vLLM sends it both as
/// an error response and as a stream event.
pub fn error_body(message: &str, status: u16) -> io::Result<Vec<u8>> {
    json(&ErrorBody {
        error: ErrorDetail {
            message,
            kind: faults::error_type(status),
            param: (),
            code: status,
        },
    })
}

#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: [ModelCard<'a>; 1],
}

#[derive(Serialize)]
struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    root: &'a str,
    parent: (),
    max_model_len: u64,
}

/// `GET /v1/models`: the one model served.
pub fn models(model: &str, created: u64, max_model_len: u64) -> io::Result<Vec<u8>> {
    json(&ModelList {
        object: "list",
        data: [ModelCard {
            id: model,
            object: "model",
            created,
            owned_by: "mc-mock",
            root: model,
            parent: (),
            max_model_len,
        }],
    })
}

fn json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    Ok(serde_json::to_vec(value)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: io::Result<Vec<u8>>) -> String {
        String::from_utf8(v.unwrap()).unwrap()
    }

    #[test]
    fn chat_chunks_have_vllms_shape_and_key_order() {
        let r = Reply {
            kind: Kind::Chat,
            id: "chatcmpl-1".into(),
            created: 5,
            model: "m",
        };
        assert_eq!(
            s(r.role_chunk()),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#
        );
        assert_eq!(
            s(r.token_chunk(" the", Some("length"))),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"m","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":"length"}]}"#
        );
        assert_eq!(
            s(r.usage_chunk(WireUsage::new(3, 4, 0))),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"m","choices":[],"usage":{"prompt_tokens":3,"total_tokens":7,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}"#
        );
    }

    #[test]
    fn completion_chunk_and_error_body() {
        let r = Reply::new(Kind::Completion, 1, 5, "m");
        assert!(r.id.starts_with("cmpl-") && r.id.len() == 5 + 32);
        let chunk = s(r.token_chunk(" of", None));
        assert!(chunk.ends_with(
            r#""choices":[{"index":0,"text":" of","logprobs":null,"finish_reason":null,"stop_reason":null}]}"#
        ));
        assert_eq!(
            s(error_body("x", 429)),
            r#"{"error":{"message":"x","type":"RateLimitError","param":null,"code":429}}"#
        );
    }
}
