//! Building one request from its row: the body and the headers. Pure (no
//! I/O, no clock), so what is sent is unit-tested here.

use serde_json::{json, Value};

use super::body::{self, BodyOptions, Prompt};
use super::prompt::Synth;
use crate::replay::outcome::RunId;
use crate::replay::trace::{Content, Turn};

/// What every request of a run shares.
#[derive(Debug, Clone)]
pub struct RequestBuilder {
    pub synth: Synth,
    pub body: BodyOptions,
    /// `--header` and the API key.
    pub headers: Vec<(String, String)>,
    pub run_id: RunId,
}

/// A request ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltRequest {
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

impl RequestBuilder {
    /// The request for `turn` (the `seq`-th sent). With `history`
    /// (`--turns delta`), the row's prompt is appended to the conversation
    /// and the whole conversation is sent.
    pub fn build(
        &self,
        turn: &Turn,
        session_id: Option<&str>,
        seq: u64,
        history: Option<&mut Vec<Value>>,
    ) -> BuiltRequest {
        let mut text = String::new();
        let prompt_text: &str = match &turn.content {
            Content::Synth => {
                self.synth.prompt(
                    turn.line,
                    turn.intended_input(self.synth.block_size()).unwrap_or(0),
                    &turn.hash_ids,
                    &mut text,
                );
                &text
            }
            Content::Text(t) => t,
            Content::Messages { .. } => "",
        };
        let mut out = Vec::new();
        match (history, &turn.content) {
            (Some(h), Content::Messages { messages, tools }) => {
                h.extend(messages.iter().cloned());
                body::write(
                    &self.body,
                    turn,
                    Prompt::Messages(h, tools.as_ref()),
                    &mut out,
                );
            }
            (Some(h), _) => {
                h.push(json!({"role": "user", "content": prompt_text}));
                body::write(&self.body, turn, Prompt::Messages(h, None), &mut out);
            }
            (None, Content::Messages { messages, tools }) => {
                body::write(
                    &self.body,
                    turn,
                    Prompt::Messages(messages, tools.as_ref()),
                    &mut out,
                );
            }
            (None, _) => body::write(&self.body, turn, Prompt::Text(prompt_text), &mut out),
        }
        let mut headers = Vec::with_capacity(self.headers.len() + 3);
        headers.push(("x-request-id".to_string(), self.run_id.request_uuid(seq)));
        if let Some(s) = session_id {
            headers.push(("x-session-id".to_string(), header_safe(s)));
        }
        headers.push(("x-trace-line".to_string(), turn.line.to_string()));
        headers.extend(self.headers.iter().cloned());
        BuiltRequest { body: out, headers }
    }
}

/// A header value from trace text: bytes outside printable ASCII (which
/// HTTP forbids or mangles) are percent-encoded, as is `%` itself, so any
/// session id reaches the server unambiguously.
pub fn header_safe(s: &str) -> String {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'%') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::http::body::Endpoint;
    use crate::replay::http::prompt::Vocab;

    fn builder() -> RequestBuilder {
        RequestBuilder {
            synth: Synth::new(Vocab::builtin(), 0, 4),
            body: BodyOptions {
                endpoint: Endpoint::Chat,
                model: "m".into(),
                exact_output: false,
                extra_body: None,
            },
            headers: vec![("authorization".into(), "Bearer k".into())],
            run_id: RunId(0x0123_4567_89ab_cdef),
        }
    }

    fn turn(content: Content, input_length: Option<u64>) -> Turn {
        Turn {
            line: 7,
            session: None,
            turn: 0,
            timestamp_ms: None,
            delay_ms: None,
            tool_wait_ms: 0.0,
            input_length,
            output_length: Some(2),
            hash_ids: Box::new([]),
            content,
            extra: None,
            call: None,
        }
    }

    fn parse(r: &BuiltRequest) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn request_uuid_is_v4_shaped_unique_and_reproducible() {
        let id = RunId(0x0123_4567_89ab_cdef);
        // Run id in the first half (version nibble forced to 4), the
        // sequence number in the second (variant bits 10).
        assert_eq!(id.request_uuid(0), "01234567-89ab-4def-8000-000000000000");
        assert_eq!(id.request_uuid(255), "01234567-89ab-4def-8000-0000000000ff");
        assert_eq!(id.request_id(255), "123456789abcdef-255");
        let u = id.request_uuid(u64::MAX);
        assert_eq!(u, "01234567-89ab-4def-bfff-ffffffffffff");
        assert_ne!(id.request_uuid(1), id.request_uuid(2));
    }

    #[test]
    fn headers_name_the_request_session_and_line() {
        let t = turn(Content::Text("hi".into()), None);
        let r = builder().build(&t, Some("會 a"), 3, None);
        assert_eq!(
            r.headers,
            vec![
                (
                    "x-request-id".into(),
                    "01234567-89ab-4def-8000-000000000003".into()
                ),
                ("x-session-id".into(), "%E6%9C%83 a".into()),
                ("x-trace-line".into(), "7".into()),
                ("authorization".into(), "Bearer k".into()),
            ]
        );
        assert_eq!(
            parse(&r)["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }

    #[test]
    fn synthetic_prompt_has_input_length_words() {
        let t = turn(Content::Synth, Some(5));
        let r = builder().build(&t, None, 0, None);
        let v = parse(&r);
        let text = v["messages"][0]["content"].as_str().unwrap();
        // The built-in vocabulary is one word per token.
        assert_eq!(text.split_whitespace().count(), 5, "{text}");
        assert_eq!(r.headers.len(), 3);
    }

    #[test]
    fn delta_history_grows_with_each_turn() {
        let b = builder();
        let mut h = vec![
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "content": "b"}),
        ];
        let t = turn(Content::Text("c".into()), None);
        let r = b.build(&t, None, 1, Some(&mut h));
        assert_eq!(h.len(), 3);
        assert_eq!(h[2], json!({"role": "user", "content": "c"}));
        assert_eq!(parse(&r)["messages"], Value::Array(h.clone()));
        let msgs = vec![json!({"role": "user", "content": "d"})];
        let t = turn(
            Content::Messages {
                messages: msgs,
                tools: None,
            },
            None,
        );
        b.build(&t, None, 2, Some(&mut h));
        assert_eq!(h.len(), 4);
    }

    #[test]
    fn header_values_are_printable_ascii() {
        assert_eq!(header_safe("conv_0 a"), "conv_0 a");
        assert_eq!(header_safe("会"), "%E4%BC%9A");
        assert_eq!(header_safe("a%b\n"), "a%25b%0A");
    }
}
