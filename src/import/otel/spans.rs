//! OTLP/JSON trace exports read into checked [`Span`]s.
//!
//! The file shape is OTLP's JSON encoding of `ExportTraceServiceRequest`:
//! `{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ...,
//! "spans": [...]}]}]}`, one such document per file or one per line (the
//! OpenTelemetry Collector's file exporter). A span has `traceId`,
//! `spanId`, `parentSpanId` (hex strings), `name`, `startTimeUnixNano` and
//! `endTimeUnixNano` (decimal strings in OTLP/JSON; a number is accepted)
//! and `attributes` (`[{"key", "value": {"stringValue" | "intValue" |
//! ...}}]`, `intValue` again a decimal string). The protobuf field names
//! (`trace_id`, ...) are accepted as aliases, as protobuf's JSON mapping
//! accepts them.
//!
//! What the GenAI attributes mean follows the OpenTelemetry semantic
//! conventions for generative AI, v1.37.0 (docs/gen-ai/gen-ai-spans.md and
//! gen-ai-agent-spans.md): `gen_ai.operation.name` says what a span is
//! ([`Kind`]), `gen_ai.usage.input_tokens`/`output_tokens` an LLM call's
//! token counts, `gen_ai.conversation.id` the conversation it belongs to.
//! The names before v1.28 (`gen_ai.usage.prompt_tokens`/
//! `completion_tokens`) are read when the current ones are absent.

use std::borrow::Cow;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::error::RecordError;

/// What a span is, by its `gen_ai.operation.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `chat`, `text_completion`, `generate_content`: an LLM call, a row.
    Call { input: u64, output: u64 },
    /// `invoke_agent`: an agent (its calls are one agent's timeline).
    Agent,
    /// `execute_tool`: tool time between calls.
    Tool,
    /// Any other span (another GenAI operation such as `embeddings` or
    /// `create_agent`, or no GenAI operation at all): kept for the parent
    /// links that pass through it.
    Other { genai: bool },
}

/// One span, checked: the times of a call, agent or tool span are present
/// and in order, a call's token counts are whole and within the limits.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace: Box<str>,
    pub id: Box<str>,
    pub parent: Option<Box<str>>,
    pub name: Box<str>,
    /// ns since the epoch; 0 for an `Other` span (not read).
    pub start_ns: u64,
    pub end_ns: u64,
    pub kind: Kind,
    pub conversation: Option<Box<str>>,
    /// The input line of the span's document (its first line).
    pub line: u64,
    /// The input it was read from (its place among the inputs).
    pub file: usize,
}

/// One OTLP/JSON document.
#[derive(Deserialize)]
pub struct Doc<'a> {
    #[serde(rename = "resourceSpans", alias = "resource_spans", default, borrow)]
    resource_spans: Vec<ResourceSpans<'a>>,
}

#[derive(Deserialize)]
struct ResourceSpans<'a> {
    #[serde(rename = "scopeSpans", alias = "scope_spans", default, borrow)]
    scope_spans: Vec<ScopeSpans<'a>>,
}

#[derive(Deserialize)]
struct ScopeSpans<'a> {
    #[serde(default, borrow)]
    spans: Vec<RawSpan<'a>>,
}

/// A span as written: every field optional, so that a missing one is named
/// with its span rather than as a parse error of the whole document.
#[derive(Deserialize)]
struct RawSpan<'a> {
    #[serde(rename = "traceId", alias = "trace_id", default, borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(rename = "spanId", alias = "span_id", default, borrow)]
    span_id: Option<Cow<'a, str>>,
    #[serde(rename = "parentSpanId", alias = "parent_span_id", default, borrow)]
    parent_span_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(rename = "startTimeUnixNano", alias = "start_time_unix_nano", default)]
    start: Option<Int>,
    #[serde(rename = "endTimeUnixNano", alias = "end_time_unix_nano", default)]
    end: Option<Int>,
    #[serde(default, borrow)]
    attributes: Vec<KeyValue<'a>>,
}

#[derive(Deserialize)]
struct KeyValue<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default, borrow)]
    value: AnyValue<'a>,
}

/// An attribute's value; the kinds no GenAI attribute read here has
/// (`arrayValue`, `kvlistValue`, `bytesValue`) are skipped.
#[derive(Deserialize, Default)]
struct AnyValue<'a> {
    #[serde(rename = "stringValue", alias = "string_value", default, borrow)]
    string: Option<Cow<'a, str>>,
    #[serde(rename = "intValue", alias = "int_value", default)]
    int: Option<Int>,
    #[serde(rename = "doubleValue", alias = "double_value", default)]
    double: Option<f64>,
}

/// An integer as OTLP/JSON writes it (a decimal string) or as some
/// exporters do (a number); anything else is kept as its text, so the
/// error names the span and the attribute instead of failing the document.
#[derive(Debug, Clone, PartialEq)]
enum Int {
    Value(i128),
    Bad(String),
}

impl<'de> Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Int, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Int;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer, or a decimal string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
                Ok(Int::Value(v.into()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
                Ok(Int::Value(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Int, E> {
                Ok(Int::Bad(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Int, E> {
                Ok(match v.parse::<i128>() {
                    Ok(n) => Int::Value(n),
                    Err(_) => Int::Bad(format!("{v:?}")),
                })
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Int, E> {
                Ok(Int::Bad(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The GenAI operations that are LLM calls (v1.37.0's well-known values
/// of `gen_ai.operation.name` for inference).
const CALL_OPERATIONS: [&str; 3] = ["chat", "text_completion", "generate_content"];

/// The attributes read, by name.
#[derive(Default)]
struct Attributes<'s, 'a> {
    operation: Option<&'s AnyValue<'a>>,
    input: Option<(&'static str, &'s AnyValue<'a>)>,
    output: Option<(&'static str, &'s AnyValue<'a>)>,
    conversation: Option<&'s AnyValue<'a>>,
}

impl<'s, 'a> Attributes<'s, 'a> {
    fn of(list: &'s [KeyValue<'a>]) -> Self {
        let mut a = Attributes::default();
        // The current names win over the old ones, whatever their order.
        for kv in list {
            let v = &kv.value;
            match kv.key.as_ref() {
                "gen_ai.operation.name" => a.operation = Some(v),
                "gen_ai.usage.input_tokens" => a.input = Some(("gen_ai.usage.input_tokens", v)),
                "gen_ai.usage.output_tokens" => a.output = Some(("gen_ai.usage.output_tokens", v)),
                "gen_ai.usage.prompt_tokens" if a.input.is_none() => {
                    a.input = Some(("gen_ai.usage.prompt_tokens", v))
                }
                "gen_ai.usage.completion_tokens" if a.output.is_none() => {
                    a.output = Some(("gen_ai.usage.completion_tokens", v))
                }
                "gen_ai.conversation.id" => a.conversation = Some(v),
                _ => {}
            }
        }
        a
    }
}

/// The line of byte `at` in `body`, counting from `line0` at `from`.
fn line_of(body: &[u8], from: usize, line0: u64, at: usize) -> u64 {
    line0 + memchr::memchr_iter(b'\n', &body[from..at.min(body.len())]).count() as u64
}

/// Where a document is in its input: its bytes, where it starts and the
/// line it starts on (spans are found in it to name their lines).
pub struct Place<'b> {
    pub body: &'b [u8],
    pub start: usize,
    pub end: usize,
    pub line: u64,
}

impl Place<'_> {
    /// The line of the span with id `id` (its first mention in the
    /// document), else the document's first line. Only errors ask.
    pub fn line_of_span(&self, id: Option<&str>) -> u64 {
        let doc = &self.body[self.start..self.end.min(self.body.len())];
        let Some(id) = id else {
            return self.line;
        };
        let quoted = format!("\"{id}\"");
        // The id as the value of `spanId` (not as another span's parent).
        let is_key = |at: usize| {
            let before = doc[..at].trim_ascii_end();
            before.strip_suffix(b":").is_some_and(|b| {
                let b = b.trim_ascii_end();
                b.ends_with(b"\"spanId\"") || b.ends_with(b"\"span_id\"")
            })
        };
        memchr::memmem::find_iter(doc, quoted.as_bytes())
            .find(|&at| is_key(at))
            .map_or(self.line, |at| {
                line_of(self.body, self.start, self.line, self.start + at)
            })
    }
}

/// A span that failed its checks: its line and what is wrong.
pub struct Fault {
    pub line: u64,
    pub err: RecordError,
}

impl Doc<'_> {
    /// Every span of the document, checked, in document order: `Ok` spans
    /// and the faults of the others (each names its span).
    pub fn spans(&self, at: &Place<'_>) -> Vec<Result<Span, Fault>> {
        self.resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|raw| match raw.check() {
                // The document's line: finding each span's own line would
                // search the document once per span.
                Ok(span) => Ok(Span {
                    line: at.line,
                    ..span
                }),
                Err(err) => Err(Fault {
                    line: at.line_of_span(raw.span_id.as_deref()),
                    err,
                }),
            })
            .collect()
    }
}

impl RawSpan<'_> {
    /// The span named in messages: its id, name and trace.
    fn named(&self) -> String {
        format!(
            "span `{}` (`{}`) of trace `{}`",
            self.span_id.as_deref().unwrap_or("?"),
            self.name.as_deref().unwrap_or(""),
            self.trace_id.as_deref().unwrap_or("?"),
        )
    }

    /// The span's fault: `msg` about `field`, naming the span.
    fn fault(&self, field: &str, msg: String) -> RecordError {
        RecordError::new(format!("{}: field `{field}`: {msg}", self.named()))
    }

    fn check(&self) -> Result<Span, RecordError> {
        let trace = self.id(&self.trace_id, "traceId")?;
        let id = self.id(&self.span_id, "spanId")?;
        let parent = self
            .parent_span_id
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(Box::<str>::from);
        let attrs = Attributes::of(&self.attributes);
        let kind = self.kind(&attrs)?;
        let (start_ns, end_ns) = if matches!(kind, Kind::Other { .. }) {
            (0, 0)
        } else {
            self.times()?
        };
        let conversation = attrs
            .conversation
            .and_then(|v| v.string.as_deref())
            .filter(|c| !c.is_empty())
            .map(Box::<str>::from);
        Ok(Span {
            trace,
            id,
            parent,
            name: self.name.as_deref().unwrap_or("").into(),
            start_ns,
            end_ns,
            kind,
            conversation,
            line: 0,
            file: 0,
        })
    }

    /// The trace or span id in `v`, which every span needs.
    fn id(&self, v: &Option<Cow<'_, str>>, field: &str) -> Result<Box<str>, RecordError> {
        match v.as_deref() {
            Some(s) if !s.is_empty() => Ok(Box::<str>::from(s)),
            _ => Err(self.fault(
                field,
                "missing: every span needs its trace and span ids".into(),
            )),
        }
    }

    /// What the span is, from `gen_ai.operation.name`: an LLM call (with
    /// its token counts), an agent, a tool, or anything else.
    fn kind(&self, attrs: &Attributes<'_, '_>) -> Result<Kind, RecordError> {
        let operation = attrs.operation.and_then(|v| v.string.as_deref());
        Ok(match operation {
            Some(op) if CALL_OPERATIONS.contains(&op) => Kind::Call {
                input: self.tokens(op, attrs.input, "gen_ai.usage.input_tokens")?,
                output: self.tokens(op, attrs.output, "gen_ai.usage.output_tokens")?,
            },
            Some("invoke_agent") => Kind::Agent,
            Some("execute_tool") => Kind::Tool,
            _ => Kind::Other {
                genai: operation.is_some(),
            },
        })
    }

    /// An LLM call's (`op`) token count: the attribute `a` found for `name`
    /// (under its current or old name), a whole number within the limits.
    fn tokens(
        &self,
        op: &str,
        a: Option<(&'static str, &AnyValue<'_>)>,
        name: &str,
    ) -> Result<u64, RecordError> {
        let Some((field, v)) = a else {
            return Err(self.fault(
                name,
                format!(
                    "missing: an LLM call (`{op}`) needs its token counts; export \
                     the spans with usage recorded, or leave the call out \
                     (--on-error skip)"
                ),
            ));
        };
        let n = whole(v).map_err(|found| {
            self.fault(
                field,
                format!("expected an intValue (a whole number of tokens), found {found}"),
            )
        })?;
        let n = u64::try_from(n)
            .map_err(|_| self.fault(field, format!("{n} tokens: a count is at least 0")))?;
        // The limit's message names the field already.
        crate::limits::tokens(field, n)
            .map_err(|e| RecordError::new(format!("{}: {e}", self.named())))
    }

    /// A call's, agent's or tool's start and end, in ns since the epoch; the
    /// end not before the start.
    fn times(&self) -> Result<(u64, u64), RecordError> {
        let start = self.time(&self.start, "startTimeUnixNano")?;
        let end = self.time(&self.end, "endTimeUnixNano")?;
        if end < start {
            return Err(self.fault(
                "endTimeUnixNano",
                format!("{end} is before startTimeUnixNano {start}: a span ends after it starts"),
            ));
        }
        Ok((start, end))
    }

    fn time(&self, v: &Option<Int>, field: &str) -> Result<u64, RecordError> {
        match v {
            Some(Int::Value(n)) if *n > 0 && *n <= u64::MAX as i128 => Ok(*n as u64),
            Some(Int::Value(n)) => {
                Err(self.fault(field, format!("{n}: expected ns since the epoch, above 0")))
            }
            Some(Int::Bad(text)) => Err(self.fault(
                field,
                format!("expected ns since the epoch as a decimal string, found {text}"),
            )),
            None => Err(self.fault(
                field,
                "missing: a call, agent or tool span needs its start and end times".into(),
            )),
        }
    }
}

/// An attribute's whole number: an `intValue`, or a `doubleValue` with no
/// fraction (some SDKs record counts as doubles); else the value's text.
fn whole(v: &AnyValue<'_>) -> Result<i128, String> {
    match (&v.int, v.double, &v.string) {
        (Some(Int::Value(n)), _, _) => Ok(*n),
        (Some(Int::Bad(text)), _, _) => Err(text.clone()),
        (None, Some(d), _) if d.fract() == 0.0 && d.abs() < 1e18 => Ok(d as i128),
        (None, Some(d), _) => Err(d.to_string()),
        (None, None, Some(s)) => Err(format!("the stringValue {s:?}")),
        (None, None, None) => Err("no value".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(doc: &str) -> Vec<Result<Span, String>> {
        let d: Doc<'_> = serde_json::from_str(doc).unwrap();
        let at = Place {
            body: doc.as_bytes(),
            start: 0,
            end: doc.len(),
            line: 1,
        };
        d.spans(&at)
            .into_iter()
            .map(|r| r.map_err(|f| format!("line {}: {}", f.line, f.err)))
            .collect()
    }

    fn doc(span: &str) -> String {
        format!("{{\"resourceSpans\": [{{\"scopeSpans\": [{{\"spans\": [\n{span}\n]}}]}}]}}")
    }

    #[test]
    fn a_chat_span_with_usage_is_a_call() {
        let s = spans(&doc(
            r#"{"traceId": "t", "spanId": "s", "parentSpanId": "", "name": "chat m",
                "startTimeUnixNano": "1000", "endTimeUnixNano": 2000,
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                               {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
                               {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 3}},
                               {"key": "gen_ai.conversation.id", "value": {"stringValue": "c"}},
                               {"key": "gen_ai.input.messages", "value": {"arrayValue": {"values": []}}}]}"#,
        ));
        let s = s[0].as_ref().unwrap();
        assert_eq!(
            s.kind,
            Kind::Call {
                input: 12,
                output: 3
            }
        );
        assert_eq!((s.start_ns, s.end_ns), (1000, 2000));
        assert_eq!(s.parent, None);
        assert_eq!(s.conversation.as_deref(), Some("c"));
    }

    #[test]
    fn old_usage_names_are_read_and_the_current_ones_win() {
        let s = spans(&doc(
            r#"{"traceId": "t", "spanId": "s", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "text_completion"}},
                               {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "7"}},
                               {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "99"}},
                               {"key": "gen_ai.usage.completion_tokens", "value": {"doubleValue": 4.0}}]}"#,
        ));
        assert_eq!(
            s[0].as_ref().unwrap().kind,
            Kind::Call {
                input: 7,
                output: 4
            }
        );
    }

    #[test]
    fn faults_name_the_span_its_line_and_the_field() {
        let no_usage = spans(&doc(
            r#"{"traceId": "t", "spanId": "s1", "name": "chat m", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                               {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "7"}}]}"#,
        ));
        let e = no_usage[0].as_ref().unwrap_err();
        assert!(
            e.starts_with(
                "line 2: span `s1` (`chat m`) of trace `t`: field `gen_ai.usage.output_tokens`: missing"
            ),
            "{e}"
        );
        let bad_int = spans(&doc(
            r#"{"traceId": "t", "spanId": "s1", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                               {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12.5"}}]}"#,
        ));
        let e = bad_int[0].as_ref().unwrap_err();
        assert!(
            e.contains("field `gen_ai.usage.input_tokens`: expected an intValue (a whole number of tokens), found \"12.5\""),
            "{e}"
        );
        let huge = spans(&doc(
            r#"{"traceId": "t", "spanId": "s1", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                               {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "1000000000000000"}}]}"#,
        ));
        let e = huge[0].as_ref().unwrap_err();
        assert!(
            e.contains("of trace `t`: field `gen_ai.usage.input_tokens`: 1000000000000000 tokens is above the limit"),
            "{e}"
        );
        assert_eq!(e.matches("gen_ai.usage.input_tokens").count(), 1, "{e}");
        let backwards = spans(&doc(
            r#"{"traceId": "t", "spanId": "s1", "startTimeUnixNano": "5", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}]}"#,
        ));
        let e = backwards[0].as_ref().unwrap_err();
        assert!(
            e.contains("field `endTimeUnixNano`: 2 is before startTimeUnixNano 5"),
            "{e}"
        );
        let no_time = spans(&doc(
            r#"{"traceId": "t", "spanId": "s1", "endTimeUnixNano": "2",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}}]}"#,
        ));
        assert!(no_time[0]
            .as_ref()
            .unwrap_err()
            .contains("field `startTimeUnixNano`: missing"));
        let no_id = spans(&doc(r#"{"traceId": "t"}"#));
        assert!(no_id[0]
            .as_ref()
            .unwrap_err()
            .contains("span `?` (``) of trace `t`: field `spanId`: missing"));
    }

    #[test]
    fn other_spans_need_no_times() {
        let s = spans(&doc(r#"{"traceId": "t", "spanId": "h", "name": "GET /",
                "attributes": [{"key": "http.method", "value": {"stringValue": "GET"}}]},
               {"traceId": "t", "spanId": "e", "name": "embeddings m",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "embeddings"}}]}"#));
        assert_eq!(s[0].as_ref().unwrap().kind, Kind::Other { genai: false });
        assert_eq!(s[1].as_ref().unwrap().kind, Kind::Other { genai: true });
    }
}
