//! Streaming the NAT profiler file: a JSON array of requests, read one
//! request at a time (memory bounded by the largest request, not the file),
//! keeping only the fields the conversion needs.

use std::cell::RefCell;
use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
pub struct Request {
    #[serde(default)]
    pub request_number: Option<serde_json::Value>,
    #[serde(default)]
    pub intermediate_steps: Option<Vec<Step>>,
}

#[derive(Debug, Deserialize)]
pub struct Step {
    #[serde(default)]
    pub payload: Option<Payload>,
}

#[derive(Debug, Deserialize)]
pub struct Payload {
    #[serde(default)]
    pub event_type: Option<String>,
    #[serde(default, rename = "UUID")]
    pub uuid: Option<String>,
    /// Epoch seconds; a number (older files may hold a numeric string).
    #[serde(default)]
    pub event_timestamp: Option<serde_json::Value>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(default)]
    pub usage_info: Option<UsageInfo>,
}

#[derive(Debug, Deserialize)]
pub struct Metadata {
    #[serde(default)]
    pub chat_inputs: Option<Vec<Message>>,
}

/// A chat message: OpenAI style (`role`) or LangChain style (`type`), or a bare string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Message {
    Object {
        #[serde(default)]
        role: Option<String>,
        #[serde(default, rename = "type")]
        kind: Option<String>,
        #[serde(default)]
        content: Option<Content>,
    },
    Text(String),
    Other(IgnoredAny),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
    Other(IgnoredAny),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Part {
    Object {
        #[serde(default)]
        text: Option<String>,
    },
    Text(String),
    Other(IgnoredAny),
}

#[derive(Debug, Deserialize)]
pub struct UsageInfo {
    #[serde(default)]
    pub token_usage: Option<TokenUsage>,
}

#[derive(Debug, Deserialize)]
pub struct TokenUsage {
    #[serde(default)]
    pub prompt_tokens: Option<f64>,
    #[serde(default)]
    pub completion_tokens: Option<f64>,
}

/// How the array ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Complete,
    /// The file stops inside the array (a run killed mid-write): every
    /// request before the cut was delivered.
    Truncated,
}

/// Calls `f` with each request of the array in `src`, in order.
pub fn for_each_request<R: Read>(src: R, f: impl FnMut(Request) -> Result<()>) -> Result<End> {
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 20, src));
    let failure = RefCell::new(None);
    let seed = Requests {
        f: RefCell::new(f),
        failure: &failure,
    };
    let parsed = de::Deserializer::deserialize_seq(&mut de, seed).and_then(|()| de.end());
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    match parsed {
        Ok(()) => Ok(End::Complete),
        Err(e) if e.is_eof() => Ok(End::Truncated),
        Err(e) if e.is_io() => Err(Error::Io(std::io::Error::other(e.to_string()))),
        Err(e) => Err(Error::Input(format!("invalid profiler trace: {e}"))),
    }
}

struct Requests<'a, F> {
    f: RefCell<F>,
    /// The callback's own error, kept aside while serde unwinds.
    failure: &'a RefCell<Option<Error>>,
}

impl<'de, F: FnMut(Request) -> Result<()>> DeserializeSeed<'de> for Requests<'_, F> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, F: FnMut(Request) -> Result<()>> Visitor<'de> for Requests<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of profiler requests")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(req) = seq.next_element::<Request>()? {
            if let Err(e) = (self.f.borrow_mut())(req) {
                *self.failure.borrow_mut() = Some(e);
                return Err(de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(text: &str) -> (Vec<i64>, Result<End>) {
        let mut seen = Vec::new();
        let end = for_each_request(text.as_bytes(), |r| {
            seen.push(r.request_number.and_then(|v| v.as_i64()).unwrap_or(-1));
            Ok(())
        });
        (seen, end)
    }

    #[test]
    fn reads_requests_in_order() {
        let (seen, end) = numbers(
            r#"[{"request_number": 0, "intermediate_steps": []}, {"request_number": 1, "x": {"y": [1]}}]"#,
        );
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(end.unwrap(), End::Complete);
    }

    #[test]
    fn a_cut_file_keeps_every_complete_request() {
        let (seen, end) = numbers(
            r#"[{"request_number": 0}, {"request_number": 1}, {"request_number": 2, "intermediate_steps": [{"pay"#,
        );
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(end.unwrap(), End::Truncated);
        // Cut right after a complete request's comma.
        let (seen, end) = numbers(r#"[{"request_number": 0}, {"request_number": 1},"#);
        assert_eq!(seen, vec![0, 1]);
        assert_eq!(end.unwrap(), End::Truncated);
    }

    #[test]
    fn broken_json_is_an_input_error() {
        let (_, end) = numbers(r#"[{"request_number": 0} {"#);
        assert!(matches!(end, Err(Error::Input(_))));
        let (_, end) = numbers(r#"{"request_number": 0}"#);
        assert!(matches!(end, Err(Error::Input(_))));
    }

    #[test]
    fn messages_of_every_shape() {
        let (seen, end) = numbers(
            r#"[{"request_number": 5, "intermediate_steps": [{"payload": {"event_type": "LLM_START", "metadata": {"chat_inputs": [
                {"type": "human", "content": "hi"}, {"role": "user", "content": [{"type": "text", "text": "a"}, "b", 3]}, "bare", 7, {"content": null}
            ]}}}, {"payload": {"metadata": null, "usage_info": null}}, {"payload": null}]}]"#,
        );
        assert_eq!(seen, vec![5]);
        assert_eq!(end.unwrap(), End::Complete);
    }
}
