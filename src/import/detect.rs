//! `--from auto`: the format from the first bytes of the input.

use super::Format;
use crate::error::{Error, Result};

/// The format of an input starting with `head`, and the clue that decided it.
pub fn detect(head: &[u8]) -> Result<(Format, &'static str)> {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let body = head.trim_ascii_start();
    let has = |needle: &[u8]| memchr::memmem::find(body, needle).is_some();
    match body.first() {
        None => Err(Error::Input(
            "--from auto: the input is empty; name the format with --from".into(),
        )),
        Some(b'{') if has(b"\"resourceSpans\"") || has(b"\"resource_spans\"") => {
            Ok((Format::Otel, "OTLP/JSON trace export (resourceSpans)"))
        }
        Some(b'{') if has(b"\"custom_id\"") => {
            Ok((Format::Chat, "lines with custom_id (an OpenAI batch file)"))
        }
        Some(b'{') if has(b"\"startTime\"") && has(b"\"messages\"") => {
            Ok((Format::Chat, "lines with messages and startTime (LiteLLM's StandardLoggingPayload)"))
        }
        Some(b'[') if has(b"\"intermediate_steps\"") || has(b"\"request_number\"") => {
            Ok((Format::Nat, "a JSON array of profiler requests"))
        }
        Some(b'[') if has(b"\"requests\"") => Ok((Format::Aibrix, "a JSON array of {timestamp, requests}")),
        Some(b'{') if has(b"\"block_size\"") && has(b"\"requests\"") => {
            Ok((Format::Weka, "a session object with block_size and requests"))
        }
        Some(b'{') if has(b"\"requests\"") => Ok((Format::Aibrix, "JSON lines of {timestamp, requests}")),
        Some(b'{') if ragpulse_ids(body) => Ok((Format::Ragpulse, "hash_ids is an object of component lists")),
        Some(b'{') if has(b"\"request_id\"") || has(b"\"not_before_ms\"") => {
            Ok((Format::Dynamo, "rows with request_id (Dynamo's agentic Mooncake rows)"))
        }
        Some(b'{') | Some(b'[') => Err(Error::Input(
            "--from auto: JSON, but not a format mc-import knows (Mooncake rows need no import); name it with --from".into(),
        )),
        Some(_) => {
            let first = body.split(|&b| b == b'\n').next().unwrap_or_default();
            let first = String::from_utf8_lossy(first).to_ascii_lowercase();
            if first.starts_with("timestamp,contexttokens") {
                Ok((Format::Azure, "the Azure CSV header"))
            } else if first.contains("request tokens") && first.contains("response tokens") {
                Ok((Format::Burstgpt, "the BurstGPT CSV header"))
            } else {
                Err(Error::Input(format!(
                    "--from auto: unknown format (first line `{}`); name it with --from",
                    first.chars().take(60).collect::<String>().trim_end()
                )))
            }
        }
    }
}

/// `"hash_ids"` followed by `:` and `{` (an object, as RAGPulse writes it).
fn ragpulse_ids(body: &[u8]) -> bool {
    let key = b"\"hash_ids\"";
    let Some(at) = memchr::memmem::find(body, key) else {
        return false;
    };
    let rest = body[at + key.len()..].trim_ascii_start();
    rest.strip_prefix(b":")
        .is_some_and(|r| r.trim_ascii_start().first() == Some(&b'{'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(s: &str) -> Option<Format> {
        detect(s.as_bytes()).ok().map(|(f, _)| f)
    }

    #[test]
    fn each_format_by_its_first_bytes() {
        assert_eq!(
            fmt("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023"),
            Some(Format::Azure)
        );
        assert_eq!(
            fmt("\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens\n"),
            Some(Format::Azure)
        );
        assert_eq!(
            fmt("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"),
            Some(Format::Burstgpt)
        );
        assert_eq!(
            fmt("{\"timestamp\": 1, \"requests\": []}\n"),
            Some(Format::Aibrix)
        );
        assert_eq!(
            fmt("[{\"timestamp\": 1, \"requests\": []}]"),
            Some(Format::Aibrix)
        );
        assert_eq!(
            fmt("{\"timestamp\": \"82\", \"hash_ids\": {\"sys_prompt\": []}}"),
            Some(Format::Ragpulse)
        );
        assert_eq!(
            fmt("{\"id\":\"t\",\"block_size\":64,\"requests\":[]}"),
            Some(Format::Weka)
        );
        assert_eq!(fmt("[\n  {\n    \"request_number\": 0,"), Some(Format::Nat));
        // BurstGPT v3: new columns, in any order, with a BOM and CRLF.
        assert_eq!(
            fmt("\u{feff}Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type,Elapsed time\r\n0.5,s,ChatGPT,1,1,2,API log\r\n"),
            Some(Format::Burstgpt)
        );
        // AIBrix's indented JSON array (its save_workload without --jsonl).
        assert_eq!(
            fmt("[\n    {\n        \"timestamp\": 0,\n        \"requests\": [\n            {\n                \"prompt\": \"a\","),
            Some(Format::Aibrix)
        );
        // A real RAGPulse line, and an indented WEKA session.
        assert_eq!(
            fmt("{\"timestamp\": \"82\", \"input_length\": 3112, \"output_length\": 192, \"hash_ids\": {\"sys_prompt\": [8302, 14332, 15199], \"passages_ids\": [7398]}, \"session_id\": \"x\"}\n"),
            Some(Format::Ragpulse)
        );
        assert_eq!(
            fmt("{\n  \"id\": \"trace_0001\",\n  \"models\": [\"m\"],\n  \"block_size\": 64,\n  \"hash_id_scope\": \"local\",\n  \"requests\": [\n    {\"t\": 0.0"),
            Some(Format::Weka)
        );
        assert_eq!(fmt("{\"timestamp\": 0, \"hash_ids\": [1]}"), None);
        assert_eq!(
            fmt("{\"request_id\": \"a\", \"session_id\": \"s\", \"input_length\": 3, \"wait_for\": []}"),
            Some(Format::Dynamo)
        );
        // An OTLP/JSON export, even when a span's attributes hold a
        // "requests" or "request_id" key.
        assert_eq!(
            fmt("{\"resourceSpans\": [{\"scopeSpans\": [{\"spans\": [{\"attributes\": [{\"key\": \"request_id\"}, {\"key\": \"requests\"}]}]}]}]}"),
            Some(Format::Otel)
        );
        assert_eq!(
            fmt("{\"custom_id\": \"r1\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": {}}\n"),
            Some(Format::Chat)
        );
        assert_eq!(
            fmt("{\"id\": \"x\", \"startTime\": 1.5, \"messages\": []}\n"),
            Some(Format::Chat)
        );
        assert_eq!(fmt("a,b\n"), None);
        assert_eq!(fmt(""), None);
    }
}
