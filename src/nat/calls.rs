//! From one request's events to its LLM calls: LLM_START and LLM_END paired
//! by UUID, the prompt text taken from the START's chat messages, the token
//! counts from the END's usage, ordered by END time.

use std::collections::HashMap;

use super::reader::{Content, Message, NatRequest, Part, Payload};

/// One LLM call of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub uuid: String,
    pub model: Option<String>,
    /// LLM_START and LLM_END times, epoch seconds.
    pub start: Option<f64>,
    pub end: Option<f64>,
    /// The non-empty message contents joined with "\n": the text hashed.
    pub text: String,
    /// (OpenAI role, text) of each non-empty message, for `--messages`.
    pub messages: Vec<(String, String)>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: u64,
}

/// Why a call was left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// An LLM_START without its LLM_END, or the reverse.
    Unmatched,
    /// The messages hold no text.
    EmptyText,
    /// LLM_START has `metadata: null`.
    NoMetadata,
    /// LLM_END has no `usage_info` or no `token_usage`.
    NoUsage,
}

#[derive(Debug, Default)]
pub struct Extracted {
    pub calls: Vec<Call>,
    /// (UUID, reason) of every call left out.
    pub skipped: Vec<(String, SkipReason)>,
    /// TOOL_START/TOOL_END spans paired by UUID, epoch seconds: the tool
    /// time between calls (`tool_wait_ms`).
    pub tools: Vec<(f64, f64)>,
}

fn seconds(v: &Option<serde_json::Value>) -> Option<f64> {
    match v.as_ref()? {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn content_text(c: &Content) -> String {
    match c {
        Content::Text(s) => s.clone(),
        Content::Parts(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Part::Object { text } => text.clone(),
                Part::Text(s) => Some(s.clone()),
                Part::Other(_) => None,
            })
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Content::Other(_) => String::new(),
    }
}

/// LangChain message types to OpenAI roles.
fn openai_role(role: Option<&str>, kind: Option<&str>) -> String {
    if let Some(r) = role {
        return r.to_string();
    }
    match kind.unwrap_or("human") {
        "system" => "system",
        "human" | "user" => "user",
        "ai" | "assistant" | "AIMessageChunk" => "assistant",
        "tool" | "function" => "tool",
        other => other,
    }
    .to_string()
}

/// The text and the (role, text) messages of a START's chat inputs.
pub fn prompt(inputs: &[Message]) -> (String, Vec<(String, String)>) {
    let mut messages = Vec::new();
    for m in inputs {
        let (role, text) = match m {
            Message::Object {
                role,
                kind,
                content,
            } => (
                openai_role(role.as_deref(), kind.as_deref()),
                content.as_ref().map(content_text).unwrap_or_default(),
            ),
            Message::Text(s) => ("user".to_string(), s.clone()),
            Message::Other(_) => continue,
        };
        if !text.is_empty() {
            messages.push((role, text));
        }
    }
    let text = messages
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    (text, messages)
}

struct Start<'a> {
    payload: &'a Payload,
    used: bool,
}

/// The request's tool spans: each TOOL_END with the TOOL_START of its UUID
/// (an unpaired one has no span to give).
fn tool_spans(steps: &[&Payload]) -> Vec<(f64, f64)> {
    let mut starts: HashMap<&str, f64> = HashMap::new();
    for p in steps {
        if let (Some("TOOL_START"), Some(uuid), Some(t)) = (
            p.event_type.as_deref(),
            p.uuid.as_deref(),
            seconds(&p.event_timestamp),
        ) {
            starts.insert(uuid, t);
        }
    }
    steps
        .iter()
        .filter_map(|p| {
            let (Some("TOOL_END"), Some(uuid)) = (p.event_type.as_deref(), p.uuid.as_deref())
            else {
                return None;
            };
            Some((*starts.get(uuid)?, seconds(&p.event_timestamp)?))
        })
        .collect()
}

pub fn extract(req: &NatRequest) -> Extracted {
    let mut out = Extracted::default();
    let steps: Vec<&Payload> = req
        .intermediate_steps
        .iter()
        .flatten()
        .filter_map(|s| s.payload.as_ref())
        .collect();
    let mut starts: HashMap<&str, Start<'_>> = HashMap::new();
    for p in &steps {
        if let (Some("LLM_START"), Some(uuid)) = (p.event_type.as_deref(), p.uuid.as_deref()) {
            starts.insert(
                uuid,
                Start {
                    payload: p,
                    used: false,
                },
            );
        }
    }
    for p in &steps {
        let (Some("LLM_END"), Some(uuid)) = (p.event_type.as_deref(), p.uuid.as_deref()) else {
            continue;
        };
        let Some(start) = starts.get_mut(uuid) else {
            out.skipped.push((uuid.to_string(), SkipReason::Unmatched));
            continue;
        };
        start.used = true;
        let Some(meta) = start.payload.metadata.as_ref() else {
            out.skipped.push((uuid.to_string(), SkipReason::NoMetadata));
            continue;
        };
        let Some(usage) = p.usage_info.as_ref().and_then(|u| u.token_usage.as_ref()) else {
            out.skipped.push((uuid.to_string(), SkipReason::NoUsage));
            continue;
        };
        let (text, messages) = prompt(meta.chat_inputs.as_deref().unwrap_or_default());
        if text.is_empty() {
            out.skipped.push((uuid.to_string(), SkipReason::EmptyText));
            continue;
        }
        out.calls.push(Call {
            uuid: uuid.to_string(),
            model: start.payload.name.clone().or_else(|| p.name.clone()),
            start: seconds(&start.payload.event_timestamp),
            end: seconds(&p.event_timestamp),
            text,
            messages,
            prompt_tokens: usage.prompt_tokens.map(|t| t.max(0.0) as u64),
            completion_tokens: usage.completion_tokens.map_or(0, |t| t.max(0.0) as u64),
        });
    }
    out.tools = tool_spans(&steps);
    let mut unmatched: Vec<&str> = starts
        .iter()
        .filter(|(_, s)| !s.used)
        .map(|(u, _)| *u)
        .collect();
    unmatched.sort_unstable();
    out.skipped.extend(
        unmatched
            .into_iter()
            .map(|u| (u.to_string(), SkipReason::Unmatched)),
    );
    // Calls in the order they finished (stable for equal or missing times).
    out.calls.sort_by(|a, b| {
        a.end
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.end.unwrap_or(f64::INFINITY))
    });
    out
}
