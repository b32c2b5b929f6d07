//! The agent-graph fields of one row, read through the record scanner:
//! `request_id`, `wait_for`, `branches`, `tool_wait_ms`, `prefix_reset`
//! (docs/guide/agents.md). Each is checked for its type here; what needs
//! the whole trace (ids that exist, cycles, sessions) is checked by
//! [`super::Builder`].

use crate::error::RecordError;
use crate::record::{parse_number, shorten, write_str, Field, Number, Record};

/// A row's agent-graph fields; all empty for a plain Mooncake row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentFields {
    /// The call's id, unique within the file (an integer is read as its
    /// decimal text).
    pub request_id: Option<String>,
    /// Ids of calls of the same session this call waits for.
    pub wait_for: Vec<String>,
    /// Ids of calls of the same session that wait for this one (the
    /// inverse edge).
    pub branches: Vec<String>,
    /// Tool time before the call, ms (added to its release time).
    pub tool_wait_ms: Option<f64>,
    /// The call starts a fresh context (informational).
    pub prefix_reset: bool,
}

impl AgentFields {
    /// Reads and type-checks the fields; a row without any of them costs
    /// five span lookups and no allocation.
    pub fn read(rec: &Record<'_>) -> Result<AgentFields, RecordError> {
        let mut f = AgentFields::default();
        if let Some(raw) = present(rec, Field::RequestId) {
            f.request_id = Some(Self::read_id(raw)?);
        }
        f.wait_for = id_list(rec, Field::WaitFor)?;
        f.branches = id_list(rec, Field::Branches)?;
        f.tool_wait_ms = gap_ms(rec, Field::ToolWaitMs)?;
        if let Some(raw) = present(rec, Field::PrefixReset) {
            f.prefix_reset = match raw {
                b"true" => true,
                b"false" => false,
                _ => {
                    return Err(RecordError::field(
                        "prefix_reset",
                        format!("expected true or false, found {}", shorten(raw)),
                    ))
                }
            };
        }
        // The rows a call spawns wait for it: without an id of its own,
        // nothing could name it again (mc-merge, mc-cap rewrite ids).
        if !f.branches.is_empty() && f.request_id.is_none() {
            return Err(RecordError::field(
                "branches",
                "a call that spawns others needs its own `request_id`: add one, \
                 or list this call in the others' `wait_for` instead",
            ));
        }
        Ok(f)
    }

    /// [`AgentFields::read`] for a row that has any of the fields, `None`
    /// (nothing built, nothing to drop) for the plain row most traces hold
    /// only: mc-analyze reads every row through it.
    pub fn read_if_any(rec: &Record<'_>) -> Result<Option<AgentFields>, RecordError> {
        const FIELDS: [Field; 5] = [
            Field::RequestId,
            Field::WaitFor,
            Field::Branches,
            Field::ToolWaitMs,
            Field::PrefixReset,
        ];
        if !FIELDS.iter().any(|&f| rec.has(f)) {
            return Ok(None);
        }
        Self::read(rec).map(Some)
    }

    /// `request_id`'s value as text.
    fn read_id(raw: &[u8]) -> Result<String, RecordError> {
        id_text(raw).ok_or_else(|| {
            RecordError::field(
                "request_id",
                format!(
                    "expected a string (or an integer), found {}: write the id as a string",
                    shorten(raw)
                ),
            )
        })
    }

    /// True when the row takes part in a graph: it has an id or edges.
    pub fn is_graph_row(&self) -> bool {
        self.request_id.is_some() || !self.wait_for.is_empty() || !self.branches.is_empty()
    }
}

/// A field that is present and not `null`.
fn present<'a>(rec: &Record<'a>, f: Field) -> Option<&'a [u8]> {
    rec.raw(f).filter(|v| *v != b"null")
}

/// A gap in ms (`delay`, `tool_wait_ms`): a finite number ≥ 0. The scanner
/// already refuses numbers that overflow to infinity.
pub fn gap_ms(rec: &Record<'_>, f: Field) -> Result<Option<f64>, RecordError> {
    let Some(v) = rec.number(f)?.map(Number::as_f64) else {
        return Ok(None);
    };
    if !(v.is_finite() && v >= 0.0) {
        return Err(RecordError::field(
            f.name(),
            format!("{v} ms: a wait must be a finite number of ms at least 0"),
        ));
    }
    Ok(Some(v))
}

/// A request id as text: a JSON string decoded, or an integer's digits.
pub fn id_text(raw: &[u8]) -> Option<String> {
    match raw.first()? {
        b'"' => {
            let inner = &raw[1..raw.len() - 1];
            if inner.contains(&b'\\') {
                serde_json::from_slice::<String>(raw).ok()
            } else {
                // The scanner checked the line is UTF-8.
                std::str::from_utf8(inner).ok().map(str::to_string)
            }
        }
        _ => match parse_number(raw)? {
            Number::Int(_) | Number::UInt(_) => std::str::from_utf8(raw).ok().map(str::to_string),
            Number::Float(_) => None,
        },
    }
}

/// An array of request ids (`wait_for`, `branches`).
fn id_list(rec: &Record<'_>, f: Field) -> Result<Vec<String>, RecordError> {
    let Some(raw) = present(rec, f) else {
        return Ok(Vec::new());
    };
    let wrong = |what: &[u8]| {
        RecordError::field(
            f.name(),
            format!(
                "expected an array of request ids (strings), found {}",
                shorten(what)
            ),
        )
    };
    if raw[0] != b'[' {
        return Err(wrong(raw));
    }
    let values: Vec<serde_json::Value> = serde_json::from_slice(raw).map_err(|_| wrong(raw))?;
    values
        .iter()
        .map(|v| match v {
            serde_json::Value::String(s) => Ok(s.clone()),
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
            other => Err(wrong(other.to_string().as_bytes())),
        })
        .collect()
}

/// Writes `field` (`request_id`, `wait_for` or `branches`) of `rec` with
/// every id prefixed by `prefix` (mc-merge's per-file namespace, `f{t}:`),
/// ids as JSON strings; a list keeps its spacing (`["a","b"]` stays
/// compact). Returns false, writing nothing, when the field is absent or
/// null.
pub fn write_prefixed(
    rec: &Record<'_>,
    field: Field,
    prefix: &str,
    out: &mut Vec<u8>,
) -> Result<bool, RecordError> {
    let Some(raw) = present(rec, field) else {
        return Ok(false);
    };
    let prefixed = |id: &str| format!("{prefix}{id}");
    if field == Field::RequestId {
        let f = AgentFields::read_id(raw)?;
        write_str(&prefixed(&f), out);
        return Ok(true);
    }
    let ids = id_list(rec, field)?;
    let compact = raw.contains(&b',') && !raw.windows(2).any(|w| w == b", ");
    out.push(b'[');
    for (k, id) in ids.iter().enumerate() {
        if k > 0 {
            out.extend_from_slice(if compact { b"," } else { b", " });
        }
        write_str(&prefixed(id), out);
    }
    out.push(b']');
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Result<AgentFields, String> {
        AgentFields::read(&Record::parse(line.as_bytes()).unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_every_field() {
        let f = read(
            r#"{"request_id": "a\"1", "wait_for": ["x", 7], "branches": ["y"], "tool_wait_ms": 2.5, "prefix_reset": true}"#,
        )
        .unwrap();
        assert_eq!(f.request_id.as_deref(), Some("a\"1"));
        assert_eq!(f.wait_for, vec!["x", "7"]);
        assert_eq!(f.branches, vec!["y"]);
        assert_eq!(f.tool_wait_ms, Some(2.5));
        assert!(f.prefix_reset);
        assert!(f.is_graph_row());
        // A number is read as its decimal text.
        assert_eq!(
            read(r#"{"request_id": 12}"#).unwrap().request_id.as_deref(),
            Some("12")
        );
        let plain_rec = Record::parse(br#"{"timestamp": 1, "delay": 3}"#).unwrap();
        assert_eq!(AgentFields::read_if_any(&plain_rec).unwrap(), None);
        let null_rec = Record::parse(br#"{"prefix_reset": null}"#).unwrap();
        assert_eq!(
            AgentFields::read_if_any(&null_rec).unwrap(),
            Some(AgentFields::default())
        );
        let plain = read(r#"{"timestamp": 1, "delay": 3}"#).unwrap();
        assert_eq!(plain, AgentFields::default());
        assert!(!plain.is_graph_row());
        // wait_for without an id: a leaf nobody waits for.
        assert!(read(r#"{"wait_for": ["x"]}"#).unwrap().is_graph_row());
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = read(r#"{"request_id": 1.5}"#).unwrap_err();
        assert!(
            e.starts_with("field `request_id`: expected a string"),
            "{e}"
        );
        let e = read(r#"{"request_id": ["a"]}"#).unwrap_err();
        assert!(e.starts_with("field `request_id`"), "{e}");
        let e = read(r#"{"wait_for": "a"}"#).unwrap_err();
        assert_eq!(
            e,
            r#"field `wait_for`: expected an array of request ids (strings), found "a""#
        );
        let e = read(r#"{"request_id": "r", "branches": [null]}"#).unwrap_err();
        assert_eq!(
            e,
            "field `branches`: expected an array of request ids (strings), found null"
        );
        let e = read(r#"{"wait_for": [1.5]}"#).unwrap_err();
        assert!(e.starts_with("field `wait_for`"), "{e}");
        let e = read(r#"{"prefix_reset": 1}"#).unwrap_err();
        assert_eq!(e, "field `prefix_reset`: expected true or false, found 1");
        let e = read(r#"{"tool_wait_ms": "3"}"#).unwrap_err();
        assert!(
            e.starts_with("field `tool_wait_ms`: expected a number"),
            "{e}"
        );
    }

    #[test]
    fn waits_must_be_finite_and_not_negative() {
        let e = read(r#"{"tool_wait_ms": -1}"#).unwrap_err();
        assert_eq!(
            e,
            "field `tool_wait_ms`: -1 ms: a wait must be a finite number of ms at least 0"
        );
        // 1e999 overflows to infinity: refused as not a number at all.
        assert!(read(r#"{"tool_wait_ms": 1e999}"#).is_err());
        let rec = Record::parse(br#"{"delay": -0.5}"#).unwrap();
        assert!(gap_ms(&rec, Field::Delay).is_err());
    }

    #[test]
    fn branches_need_an_id_of_their_own() {
        let e = read(r#"{"branches": ["b"]}"#).unwrap_err();
        assert!(
            e.starts_with("field `branches`: a call that spawns others needs its own `request_id`"),
            "{e}"
        );
    }

    #[test]
    fn ids_get_a_prefix_and_lists_keep_their_spacing() {
        let rec = Record::parse(
            br#"{"request_id": 7, "wait_for": ["a","b\"c"], "branches": ["x", "y"]}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        for f in [
            Field::RequestId,
            Field::WaitFor,
            Field::Branches,
            Field::Delay,
        ] {
            if write_prefixed(&rec, f, "f1:", &mut out).unwrap() {
                out.push(b' ');
            }
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#""f1:7" ["f1:a","f1:b\"c"] ["f1:x", "f1:y"] "#
        );
    }
}
