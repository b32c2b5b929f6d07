//! mc-mock: vLLM's wire format, keep-alive, the latency model, every fault,
//! and the request log. Each test starts its own server on a free port.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::util::MockServer;

/// A running mc-mock (the shared launcher), with this module's readers of
/// its log and its connections.
struct Mock(MockServer);

impl Mock {
    fn start(args: &[&str]) -> Mock {
        let server = MockServer::start(args);
        // Strictly: the line holds exactly these fields.
        let listening: Listening = serde_json::from_str(&server.listening).unwrap();
        assert_eq!(
            (listening.event.as_str(), listening.addr.as_str()),
            ("listening", server.addr.as_str())
        );
        Mock(server)
    }

    fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.0.log.read_line(&mut line).unwrap();
        assert!(line.ends_with('\n'), "no log line: {line:?}");
        line
    }

    /// The next request log line, read into the strict type.
    fn next_request(&mut self) -> RequestLog {
        let line = self.next_line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.0.url())
    }

    fn raw(&self) -> Raw {
        Raw::connect(&self.0.addr)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Listening {
    event: String,
    addr: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestLog {
    event: String,
    seq: u64,
    unix_us: u64,
    t_us: u64,
    method: String,
    path: String,
    x_trace_line: Option<String>,
    x_request_id: Option<String>,
    x_session_id: Option<String>,
    prompt_tokens: Option<u64>,
    max_tokens: Option<u64>,
}

/// HTTP by hand, to see the exact framing.
struct Raw {
    r: BufReader<TcpStream>,
}

struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A streamed body: each chunk's SSE payload (after `data: `) and when it
/// was read, and whether the body ended with the zero-length chunk.
struct Streamed {
    events: Vec<String>,
    times: Vec<Instant>,
    clean_end: bool,
}

impl Streamed {
    fn json(&self, i: usize) -> Value {
        serde_json::from_str(&self.events[i]).unwrap_or_else(|e| panic!("{e}: {}", self.events[i]))
    }
}

impl Raw {
    fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw {
            r: BufReader::new(s),
        }
    }

    fn send(&mut self, method: &str, path: &str, headers: &str, body: &str) {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n{headers}\r\n{body}",
            body.len()
        );
        self.r.get_mut().write_all(req.as_bytes()).unwrap();
    }

    fn post(&mut self, path: &str, body: &Value) {
        self.send("POST", path, "", &body.to_string());
    }

    fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        if !line.ends_with("\r\n") {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    fn head(&mut self) -> Head {
        let status_line = self.line().unwrap();
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let line = self.line().unwrap();
            if line.is_empty() {
                return Head { status, headers };
            }
            let (k, v) = line.split_once(':').unwrap();
            headers.push((k.to_string(), v.trim().to_string()));
        }
    }

    /// A `Content-Length` body.
    fn body(&mut self, head: &Head) -> String {
        let len: usize = head.header("content-length").unwrap().parse().unwrap();
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        String::from_utf8(body).unwrap()
    }

    /// One chunk of a chunked body; `None` for the zero-length last chunk.
    fn chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let size = usize::from_str_radix(&self.line()?, 16).unwrap();
        let mut data = vec![0; size + 2];
        self.r.read_exact(&mut data)?;
        assert!(data.ends_with(b"\r\n"));
        data.truncate(size);
        Ok((size > 0).then_some(data))
    }

    /// Reads a chunked SSE body to its end (or to a cut connection).
    /// Every chunk must be exactly one event.
    fn stream(&mut self) -> Streamed {
        let mut s = Streamed {
            events: vec![],
            times: vec![],
            clean_end: false,
        };
        loop {
            match self.chunk() {
                Ok(Some(data)) => {
                    let text = String::from_utf8(data).unwrap();
                    let payload = text
                        .strip_prefix("data: ")
                        .and_then(|t| t.strip_suffix("\n\n"))
                        .unwrap_or_else(|| panic!("not one SSE event: {text:?}"));
                    assert!(
                        !payload.contains('\n'),
                        "several events in a chunk: {text:?}"
                    );
                    s.events.push(payload.to_string());
                    s.times.push(Instant::now());
                }
                Ok(None) => {
                    s.clean_end = true;
                    return s;
                }
                Err(_) => return s,
            }
        }
    }

    /// Head then stream, checking the streaming headers.
    fn streamed(&mut self) -> Streamed {
        let head = self.head();
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-type"), Some("text/event-stream"));
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        self.stream()
    }

    /// Whether the server closed the connection (EOF, not a timeout).
    fn at_eof(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.r.read(&mut byte), Ok(0))
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// POSTs JSON with ureq: status, Retry-After, body.
fn post(mock: &Mock, path: &str, body: &Value) -> (u16, Option<String>, String) {
    let mut resp = agent()
        .post(mock.url(path))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.body_mut().read_to_string().unwrap();
    (resp.status().as_u16(), retry, text)
}

fn post_json(mock: &Mock, path: &str, body: &Value) -> Value {
    let (status, _, text) = post(mock, path, body);
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// The words the mock answers with, in order.
const WORDS: [&str; 8] = [" the", " of", " and", " to", " in", " is", " it", " on"];

fn chat_body(max_tokens: u64, extra: Value) -> Value {
    let mut body = json!({
        "model": "mock-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "one two three"}]}
        ],
        "max_tokens": max_tokens,
    });
    merge(&mut body, extra);
    body
}

fn merge(body: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
}

/// The content of every content event of a chat stream (after the role chunk).
fn contents(s: &Streamed) -> Vec<Value> {
    (0..s.events.len())
        .filter(|&i| s.events[i] != "[DONE]")
        .map(|i| s.json(i))
        .filter(|v| v["choices"].as_array().is_some_and(|c| !c.is_empty()))
        .skip(1)
        .collect()
}

#[test]
fn chat_stream_is_vllms_event_sequence() {
    let mock = Mock::start(&["--model", "m1"]);
    let mut raw = mock.raw();
    let opts = json!({"stream": true, "ignore_eos": true,
                      "stream_options": {"include_usage": true}});
    raw.post("/v1/chat/completions", &chat_body(5, opts));
    let s = raw.streamed();
    assert!(s.clean_end);
    assert_eq!(s.events.len(), 1 + 5 + 1 + 1, "{:?}", s.events);

    let role = s.json(0);
    let id = role["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("chatcmpl-"), "{id}");
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(role["model"], "m1");
    assert!(role["created"].is_u64());
    assert_eq!(
        role["choices"],
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                "logprobs": null, "finish_reason": null}])
    );
    for (i, word) in WORDS.iter().take(5).enumerate() {
        let ev = s.json(1 + i);
        assert_eq!(ev["id"], id.as_str());
        assert_eq!(ev["object"], "chat.completion.chunk");
        let finish = if i == 4 { json!("length") } else { Value::Null };
        assert_eq!(
            ev["choices"],
            json!([{"index": 0, "delta": {"content": word},
                    "logprobs": null, "finish_reason": finish}])
        );
    }
    let usage = s.json(6);
    assert_eq!(usage["id"], id.as_str());
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 5, "total_tokens": 10, "completion_tokens": 5,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert_eq!(s.events[7], "[DONE]");
}

#[test]
fn completions_stream_has_no_role_chunk() {
    let mock = Mock::start(&[]);
    let mut raw = mock.raw();
    raw.post(
        "/v1/completions",
        &json!({"prompt": "a b c d", "max_tokens": 3, "ignore_eos": true, "stream": true,
                "stream_options": {"include_usage": true}}),
    );
    let s = raw.streamed();
    assert!(s.clean_end);
    assert_eq!(s.events.len(), 3 + 1 + 1);
    for (i, word) in WORDS.iter().take(3).enumerate() {
        let ev = s.json(i);
        assert!(ev["id"].as_str().unwrap().starts_with("cmpl-"));
        assert_eq!(ev["object"], "text_completion");
        let finish = if i == 2 { json!("length") } else { Value::Null };
        assert_eq!(
            ev["choices"],
            json!([{"index": 0, "text": word, "logprobs": null,
                    "finish_reason": finish, "stop_reason": null}])
        );
    }
    let usage = s.json(3);
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 4);
    assert_eq!(usage["usage"]["completion_tokens"], 3);
    assert_eq!(s.events[4], "[DONE]");

    // Without include_usage, no usage event.
    raw.post(
        "/v1/completions",
        &json!({"prompt": [1, 2], "max_tokens": 2, "ignore_eos": true, "stream": true}),
    );
    let s = raw.streamed();
    assert_eq!(s.events.len(), 2 + 1);
    assert_eq!(s.events[2], "[DONE]");
}

#[test]
fn non_streaming_bodies() {
    let mock = Mock::start(&[]);
    let chat = post_json(
        &mock,
        "/v1/chat/completions",
        &chat_body(3, json!({"ignore_eos": true})),
    );
    assert_eq!(chat["object"], "chat.completion");
    assert!(chat["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(chat["choices"][0]["message"]["role"], "assistant");
    assert_eq!(chat["choices"][0]["message"]["content"], " the of and");
    assert_eq!(chat["choices"][0]["finish_reason"], "length");
    assert_eq!(chat["usage"]["prompt_tokens"], 5);
    assert_eq!(chat["usage"]["completion_tokens"], 3);
    assert_eq!(chat["usage"]["total_tokens"], 8);

    let text = post_json(
        &mock,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 2, "ignore_eos": true}),
    );
    assert_eq!(text["object"], "text_completion");
    assert_eq!(text["choices"][0]["text"], " the of");
    assert_eq!(text["choices"][0]["finish_reason"], "length");
    assert_eq!(text["usage"]["completion_tokens"], 2);
}

#[test]
fn models_health_and_errors() {
    let mock = Mock::start(&["--model", "org/thing"]);
    let mut resp = agent().get(mock.url("/v1/models")).call().unwrap();
    let models: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(models["object"], "list");
    let card = &models["data"][0];
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    assert_eq!(card["id"], "org/thing");
    assert_eq!(card["object"], "model");
    assert_eq!(card["owned_by"], "mc-mock");
    assert_eq!(card["root"], "org/thing");
    assert_eq!(card["parent"], Value::Null);
    assert_eq!(card["max_model_len"], 1048576);
    assert!(card["created"].is_u64());

    let health = agent().get(mock.url("/health")).call().unwrap();
    assert_eq!(health.status().as_u16(), 200);

    let (status, _, body) = post(&mock, "/v1/nothing", &json!({}));
    assert_eq!(status, 404);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], 404);

    let wrong = agent().get(mock.url("/v1/completions")).call().unwrap();
    assert_eq!(wrong.status().as_u16(), 405);

    // Bad JSON: 400 with the error body, and the connection stays usable.
    let mut raw = mock.raw();
    raw.send("POST", "/v1/chat/completions", "", "{not json");
    let head = raw.head();
    assert_eq!(head.status, 400);
    let err: Value = serde_json::from_str(&raw.body(&head)).unwrap();
    assert_eq!(err["error"]["type"], "BadRequestError");
    assert_eq!(err["error"]["code"], 400);
    assert_eq!(err["error"]["param"], Value::Null);
    raw.send("GET", "/health", "", "");
    assert_eq!(raw.head().status, 200);
}

#[test]
fn unreadable_requests_are_refused_and_closed() {
    let mock = Mock::start(&[]);
    // Chunked request bodies: 411.
    let mut raw = mock.raw();
    raw.r
        .get_mut()
        .write_all(b"POST /v1/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        .unwrap();
    assert_eq!(raw.head().status, 411);
    // A body over 256 MiB is refused before it is read.
    let mut raw = mock.raw();
    raw.r
        .get_mut()
        .write_all(b"POST /v1/completions HTTP/1.1\r\ncontent-length: 300000000\r\n\r\n{")
        .unwrap();
    let head = raw.head();
    assert_eq!(head.status, 413);
    assert_eq!(head.header("connection"), Some("close"));
    // Headers over 64 KiB.
    let mut raw = mock.raw();
    let big = format!(
        "GET /health HTTP/1.1\r\nx-big: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    raw.r.get_mut().write_all(big.as_bytes()).unwrap();
    // 431 (RFC 6585), as real servers answer an oversized head.
    assert_eq!(raw.head().status, 431);
}

/// Sends `bytes` on a fresh connection and expects `status`, a
/// `connection: close`, the body, then the end of the connection.
fn refused(mock: &Mock, bytes: &[u8], status: u16) {
    let mut raw = mock.raw();
    raw.r.get_mut().write_all(bytes).unwrap();
    let head = raw.head();
    let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
    assert_eq!(head.status, status, "{shown:?}");
    assert_eq!(head.header("connection"), Some("close"), "{shown:?}");
    raw.body(&head);
    assert!(raw.at_eof(), "{shown:?}");
}

#[test]
fn malformed_heads_get_400_and_the_connection_closed() {
    let mock = Mock::start(&[]);
    for bad in [
        // A header line without a colon.
        "GET /health HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n",
        "GET /health HTTP/1.1\r\nhost\r\n\r\n",
        // Obsolete line folding.
        "GET /health HTTP/1.1\r\nhost: x\r\n folded: y\r\n\r\n",
        "GET /health HTTP/1.1\r\n: no name\r\n\r\n",
        "GET /health HTTP/1.1\r\nx-trace-line: 1\x002\r\n\r\n",
        // Bad request lines.
        "GET /health\r\n\r\n",
        "GET  /health HTTP/1.1\r\n\r\n",
        "G@T /health HTTP/1.1\r\n\r\n",
        "GET /health HTTP/1.1 extra\r\n\r\n",
        // Content-Length that is not digits, or two that disagree.
        "POST /v1/completions HTTP/1.1\r\ncontent-length: +2\r\n\r\n{}",
        "POST /v1/completions HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
    ] {
        refused(&mock, bad.as_bytes(), 400);
    }
    // A TLS handshake sent to the plain port: refused at once, not after
    // waiting for a head that never ends.
    refused(&mock, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400);
    refused(&mock, b"GET /health HTTP/2.0\r\n\r\n", 505);
    // After a good request on a kept-alive connection, a bad one still
    // gets its 400 and the close.
    let mut raw = mock.raw();
    raw.send("GET", "/health", "", "");
    let head = raw.head();
    assert_eq!(head.status, 200);
    raw.body(&head);
    raw.r
        .get_mut()
        .write_all(b"GET /health HTTP/1.1\r\nbroken\r\n\r\n")
        .unwrap();
    let head = raw.head();
    assert_eq!(head.status, 400);
    assert_eq!(head.header("connection"), Some("close"));
    raw.body(&head);
    assert!(raw.at_eof());
}

#[test]
fn oversized_heads_get_431_and_the_connection_closed() {
    let mock = Mock::start(&[]);
    let line = |n: usize| format!("x-pad: {}\r\n", "a".repeat(n));
    // One header line past the 64 KiB head limit.
    let big = format!("GET /health HTTP/1.1\r\n{}\r\n", line(65 * 1024));
    refused(&mock, big.as_bytes(), 431);
    // Many small lines past the limit.
    let many = format!("GET /health HTTP/1.1\r\n{}\r\n", line(1000).repeat(70));
    refused(&mock, many.as_bytes(), 431);
    // More than 100 header lines.
    let count = format!("GET /health HTTP/1.1\r\n{}\r\n", "x-n: 1\r\n".repeat(101));
    refused(&mock, count.as_bytes(), 431);
    // Just under both limits: served, and the connection stays open.
    let mut raw = mock.raw();
    let fits = format!(
        "GET /health HTTP/1.1\r\nhost: x\r\n{}{}\r\n",
        "x-n: 1\r\n".repeat(98),
        line(60 * 1024)
    );
    raw.r.get_mut().write_all(fits.as_bytes()).unwrap();
    let head = raw.head();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("connection"), None);
}

#[test]
fn keep_alive_and_connection_close() {
    let mock = Mock::start(&[]);
    let mut raw = mock.raw();
    raw.post(
        "/v1/chat/completions",
        &chat_body(2, json!({"stream": true, "ignore_eos": true})),
    );
    let s = raw.streamed();
    assert!(s.clean_end);
    assert_eq!(s.events.last().unwrap(), "[DONE]");
    // The same connection serves the next request.
    raw.post(
        "/v1/completions",
        &json!({"prompt": "p", "max_tokens": 1, "ignore_eos": true}),
    );
    let head = raw.head();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("connection"), None);
    let body: Value = serde_json::from_str(&raw.body(&head)).unwrap();
    assert_eq!(body["choices"][0]["text"], " the");

    // `Connection: close` is honoured: answer, then EOF.
    raw.send("GET", "/health", "connection: close\r\n", "");
    let head = raw.head();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("connection"), Some("close"));
    assert!(raw.at_eof());
}

#[test]
fn answer_length_follows_eos_after_ignore_eos_and_min_tokens() {
    let mock = Mock::start(&["--eos-after", "3"]);
    let answer = |extra: Value| {
        let mut body = json!({"prompt": "p"});
        merge(&mut body, extra);
        let v = post_json(&mock, "/v1/completions", &body);
        (
            v["usage"]["completion_tokens"].as_u64().unwrap(),
            v["choices"][0]["finish_reason"]
                .as_str()
                .unwrap()
                .to_string(),
        )
    };
    assert_eq!(answer(json!({"max_tokens": 10})), (3, "stop".into()));
    assert_eq!(
        answer(json!({"max_tokens": 10, "ignore_eos": true})),
        (10, "length".into())
    );
    assert_eq!(
        answer(json!({"max_tokens": 10, "min_tokens": 5})),
        (5, "stop".into())
    );
    assert_eq!(answer(json!({"max_tokens": 2})), (2, "length".into()));
    assert_eq!(answer(json!({"ignore_eos": true})), (16, "length".into()));

    // Chat: max_completion_tokens wins over max_tokens.
    let v = post_json(
        &mock,
        "/v1/chat/completions",
        &chat_body(9, json!({"max_completion_tokens": 4, "ignore_eos": true})),
    );
    assert_eq!(v["usage"]["completion_tokens"], 4);

    // min_tokens above max_tokens is refused, as vLLM does.
    let (status, _, _) = post(
        &mock,
        "/v1/completions",
        &json!({"prompt": "p", "max_tokens": 2, "min_tokens": 3}),
    );
    assert_eq!(status, 400);

    // A 0-token chat stream: role chunk, then one empty final chunk.
    let mut raw = mock.raw();
    raw.post(
        "/v1/chat/completions",
        &chat_body(0, json!({"stream": true})),
    );
    let s = raw.streamed();
    assert_eq!(s.events.len(), 3, "{:?}", s.events);
    assert_eq!(s.json(1)["choices"][0]["delta"], json!({"content": ""}));
    assert_eq!(s.json(1)["choices"][0]["finish_reason"], "length");
    assert_eq!(s.events[2], "[DONE]");
}

#[test]
fn tokens_arrive_on_the_latency_model() {
    // 500 prompt words at 40 ms per 1k: TTFT = 80 + 20 = 100 ms; then 10 ms per token.
    let mock = Mock::start(&[
        "--ttft-ms",
        "80",
        "--ttft-per-1k-tokens-ms",
        "40",
        "--itl-ms",
        "10",
    ]);
    let prompt = vec!["w"; 500].join(" ");
    let body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 10,
                      "ignore_eos": true, "stream": true});
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;

    let mut raw = mock.raw();
    let sent = Instant::now();
    raw.post("/v1/chat/completions", &body);
    let s = raw.streamed();
    assert_eq!(s.events.len(), 1 + 10 + 1);
    let role = ms(s.times[0] - sent);
    let first = ms(s.times[1] - sent);
    let last = ms(s.times[10] - sent);
    assert!(
        role + 40.0 < first,
        "role chunk at {role} ms, first token at {first} ms"
    );
    assert!((100.0..250.0).contains(&first), "first token at {first} ms");
    assert!((190.0..340.0).contains(&last), "last token at {last} ms");

    // A whole response leaves when its last token is due.
    let mut body = body;
    body["stream"] = json!(false);
    let sent = Instant::now();
    raw.post("/v1/chat/completions", &body);
    let head = raw.head();
    let took = ms(sent.elapsed());
    raw.body(&head);
    assert!(
        (190.0..340.0).contains(&took),
        "whole response after {took} ms"
    );
}

#[test]
fn status_fault_with_retry_after() {
    let mock = Mock::start(&["--status", "500"]);
    let (status, retry, body) = post(&mock, "/v1/chat/completions", &chat_body(2, json!({})));
    assert_eq!(status, 500);
    assert_eq!(retry, None);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"error": {"message": "mc-mock injected error", "type": "InternalServerError",
                         "param": null, "code": 500}})
    );

    let mock = Mock::start(&["--status", "429", "--retry-after", "7"]);
    let (status, retry, body) = post(
        &mock,
        "/v1/completions",
        &json!({"prompt": "p", "stream": true}),
    );
    assert_eq!(status, 429);
    assert_eq!(retry.as_deref(), Some("7"));
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "RateLimitError");
    assert_eq!(body["error"]["code"], 429);
}

#[test]
fn fail_rate_picks_a_repeatable_mix() {
    let statuses = |seed: &str| {
        let mock = Mock::start(&["--status", "503", "--fail-rate", "0.5", "--seed", seed]);
        (0..40)
            .map(|_| {
                post(
                    &mock,
                    "/v1/completions",
                    &json!({"prompt": "p", "max_tokens": 1}),
                )
                .0
            })
            .collect::<Vec<u16>>()
    };
    let a = statuses("1");
    let failed = a.iter().filter(|&&s| s == 503).count();
    assert!(a.iter().all(|&s| s == 200 || s == 503), "{a:?}");
    assert!((8..=32).contains(&failed), "{failed} of 40 failed: {a:?}");
    assert_eq!(a, statuses("1"), "same seed, same choice");
}

#[test]
fn drop_after_cuts_the_stream() {
    let mock = Mock::start(&["--drop-after", "2"]);
    let mut raw = mock.raw();
    raw.post(
        "/v1/chat/completions",
        &chat_body(
            6,
            json!({"stream": true, "ignore_eos": true,
                             "stream_options": {"include_usage": true}}),
        ),
    );
    let s = raw.streamed();
    assert!(!s.clean_end, "the body must not end properly");
    assert_eq!(s.events.len(), 1 + 2, "{:?}", s.events);
    assert!(!s.events.iter().any(|e| e == "[DONE]"));
    assert_eq!(contents(&s).len(), 2);
}

#[test]
fn error_after_sends_an_error_event_then_done() {
    let mock = Mock::start(&["--error-after", "2"]);
    let mut raw = mock.raw();
    raw.post(
        "/v1/completions",
        &json!({"prompt": "p", "max_tokens": 6, "ignore_eos": true, "stream": true}),
    );
    let s = raw.streamed();
    assert!(s.clean_end);
    assert_eq!(s.events.len(), 2 + 1 + 1, "{:?}", s.events);
    assert_eq!(
        s.json(2),
        json!({"error": {"message": "mc-mock injected stream error",
                         "type": "InternalServerError", "param": null, "code": 500}})
    );
    assert_eq!(s.events[3], "[DONE]");
}

#[test]
fn malformed_after_sends_a_bad_event_and_goes_on() {
    let mock = Mock::start(&["--malformed-after", "1"]);
    let mut raw = mock.raw();
    raw.post(
        "/v1/chat/completions",
        &chat_body(3, json!({"stream": true, "ignore_eos": true})),
    );
    let s = raw.streamed();
    assert!(s.clean_end);
    assert_eq!(s.events.len(), 1 + 1 + 1 + 2 + 1, "{:?}", s.events);
    assert_eq!(s.events[2], "{this is not json");
    assert_eq!(s.json(4)["choices"][0]["finish_reason"], "length");
    assert_eq!(s.events[5], "[DONE]");
}

#[test]
fn hang_never_answers() {
    let mut mock = Mock::start(&["--hang"]);
    let mut raw = mock.raw();
    raw.r
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    raw.post("/v1/completions", &json!({"prompt": "p", "max_tokens": 1}));
    let mut byte = [0u8; 1];
    let err = raw.r.read(&mut byte).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );
    // It did arrive.
    assert_eq!(mock.next_request().path, "/v1/completions");
}

#[test]
fn no_usage_sends_none() {
    let mock = Mock::start(&["--no-usage"]);
    let mut raw = mock.raw();
    raw.post(
        "/v1/chat/completions",
        &chat_body(
            2,
            json!({"stream": true, "ignore_eos": true,
                             "stream_options": {"include_usage": true}}),
        ),
    );
    let s = raw.streamed();
    assert_eq!(s.events.len(), 1 + 2 + 1, "{:?}", s.events);
    assert!(!s.events.iter().any(|e| e.contains("usage")));
    let whole = post_json(&mock, "/v1/completions", &json!({"prompt": "p"}));
    assert!(whole.get("usage").is_none(), "{whole}");
}

#[test]
fn every_request_is_logged_as_it_arrives() {
    let mut mock = Mock::start(&[]);
    let mut raw = mock.raw();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    raw.send(
        "POST",
        "/v1/chat/completions",
        "x-trace-line: 42\r\nx-request-id: r-1\r\nx-session-id: s-9\r\n",
        &chat_body(7, json!({"max_completion_tokens": 3})).to_string(),
    );
    let head = raw.head();
    raw.body(&head);
    raw.send("GET", "/v1/models", "", "");
    let head = raw.head();
    raw.body(&head);

    let first = mock.next_request();
    assert_eq!(first.event, "request");
    assert_eq!(first.seq, 0);
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.x_trace_line.as_deref(), Some("42"));
    assert_eq!(first.x_request_id.as_deref(), Some("r-1"));
    assert_eq!(first.x_session_id.as_deref(), Some("s-9"));
    assert_eq!(first.prompt_tokens, Some(5));
    assert_eq!(first.max_tokens, Some(3));
    assert!(first.unix_us >= before, "{} < {before}", first.unix_us);

    let second = mock.next_request();
    assert_eq!(second.seq, 1);
    assert_eq!(second.method, "GET");
    assert_eq!(second.path, "/v1/models");
    assert_eq!(second.x_trace_line, None);
    assert_eq!(second.prompt_tokens, None);
    assert!(second.t_us >= first.t_us);
    assert!(second.unix_us >= first.unix_us);
}

#[test]
fn messages_are_as_strict_as_vllm() {
    let mock = Mock::start(&[]);
    for (messages, want) in [
        (json!([]), "at least one message"),
        (json!([1, "x", null]), "messages[0]: expected an object"),
        (json!([{"content": "hi"}]), "`role` is required"),
    ] {
        let (status, _, text) = post(
            &mock,
            "/v1/chat/completions",
            &json!({"messages": messages, "max_tokens": 2}),
        );
        assert_eq!(status, 400, "{messages}: {text}");
        let err: Value = serde_json::from_str(&text).unwrap();
        let msg = err["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{messages}: {msg}");
    }
    let (status, _, text) = post(&mock, "/v1/chat/completions", &chat_body(2, json!({})));
    assert_eq!(status, 200, "{text}");
}

#[test]
fn metrics_count_the_prefix_cache_in_tokens_as_vllm() {
    let mock = Mock::start(&["--prefix-cache", "--cache-block-size", "2", "--model", "m"]);
    let metrics = || {
        let mut resp = agent().get(mock.url("/metrics")).call().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let kind = resp
            .headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap();
        assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
        resp.body_mut().read_to_string().unwrap()
    };
    let text = metrics();
    // vLLM's exposition: HELP and TYPE under the family name, `_total` samples.
    assert!(text.contains(
        "# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.\n\
         # TYPE vllm:prefix_cache_queries counter\n\
         vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 0.0\n"
    ));
    let prompt = |p: &str| json!({"prompt": p, "max_tokens": 1});
    // 5 words, blocks of 2: [a b][c d] kept, the fifth word is a partial block.
    post_json(&mock, "/v1/completions", &prompt("a b c d e"));
    // 7 words: [a b][c d] found = 4 tokens; [x y] kept.
    post_json(&mock, "/v1/completions", &prompt("a b c d x y z"));
    let st = mctrace::prom::ServerStats::from_scrape(&mctrace::prom::parse(&metrics()).unwrap());
    // Queried 5 + 7 = 12 prompt tokens, found 0 + 4.
    assert_eq!(st.prefix_queries, Some(12.0));
    assert_eq!(st.prefix_hits, Some(4.0));
    assert_eq!((st.running, st.waiting), (Some(0.0), Some(0.0)));
    assert_eq!(st.block_size, Some(2));
    assert_eq!(st.prefix_caching, Some(true));
    assert_eq!(st.engine, Some(mctrace::prom::Engine::Vllm));

    // Without --prefix-cache, vLLM looks nothing up and counts nothing.
    let off = Mock::start(&[]);
    post_json(&off, "/v1/completions", &prompt("a b c d e"));
    let text = agent()
        .get(off.url("/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let st = mctrace::prom::ServerStats::from_scrape(&mctrace::prom::parse(&text).unwrap());
    assert_eq!((st.prefix_queries, st.prefix_hits), (Some(0.0), Some(0.0)));
    assert_eq!(st.prefix_caching, Some(false));
}

/// The events of one stream with the per-response id and time blanked.
fn stream_events(mock: &Mock, path: &str, body: &Value) -> (Vec<Value>, Duration) {
    let mut raw = mock.raw();
    let sent = Instant::now();
    raw.post(path, body);
    let s = raw.streamed();
    assert!(s.clean_end, "{:?}", s.events);
    let took = s.times.last().unwrap().duration_since(sent);
    let events = s
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if e == "[DONE]" {
                return json!("[DONE]");
            }
            let mut v = s.json(i);
            v["id"] = json!("-");
            v["created"] = json!(0);
            v
        })
        .collect();
    (events, took)
}

/// Three mocks whose streams are written three ways: zero latency, at
/// once by the connection thread; with latency, by the pacer threads;
/// with a mid-stream fault that never comes due (fewer than 1,000
/// tokens), by the connection thread's loop.
fn three_writers() -> (Mock, Mock, Mock) {
    let latency = ["--ttft-ms", "2", "--itl-ms", "1"];
    let looped = [&latency[..], &["--malformed-after", "1000"]].concat();
    (
        Mock::start(&[]),
        Mock::start(&latency),
        Mock::start(&looped),
    )
}

#[test]
fn paced_streams_send_the_same_events_as_a_connection_thread() {
    let (direct, paced, looped) = three_writers();
    let opts = json!({"stream": true, "ignore_eos": true,
                      "stream_options": {"include_usage": true}});
    let completion = json!({"prompt": "a b c", "max_tokens": 11, "stream": true,
                            "stream_options": {"include_usage": true}});
    for (path, body) in [
        ("/v1/chat/completions", chat_body(11, opts.clone())),
        ("/v1/chat/completions", chat_body(1, opts)),
        ("/v1/completions", completion),
    ] {
        let (want, _) = stream_events(&looped, path, &body);
        let (got, took) = stream_events(&paced, path, &body);
        assert_eq!(got, want, "{path} {body}");
        let (fast, _) = stream_events(&direct, path, &body);
        assert_eq!(fast, want, "{path} {body}");
        // The last token is due 2 ms + (n - 1) ms after arrival; the pacer
        // sends at most 0.1 ms early.
        let n = body["max_tokens"].as_u64().unwrap();
        let due = Duration::from_micros(2000 + (n - 1) * 1000 - 100);
        assert!(took >= due, "{path}: {took:?} < {due:?}");
    }
}

/// `/metrics` says how late the mock wrote its token events, whichever
/// thread wrote them: every token event of a stream counted once, in
/// cumulative buckets that end at `+Inf` with the count.
#[test]
fn metrics_count_every_token_events_send_delay() {
    let (direct, paced, looped) = three_writers();
    let body = chat_body(11, json!({"stream": true, "ignore_eos": true}));
    for mock in [&direct, &paced, &looped] {
        for _ in 0..2 {
            stream_events(mock, "/v1/chat/completions", &body);
        }
        let text = agent()
            .get(mock.url("/metrics"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        assert!(
            text.contains("# TYPE mc_mock:token_send_delay_seconds histogram\n"),
            "{text}"
        );
        let scrape = mctrace::prom::parse(&text).unwrap();
        let named = |n: &'static str| scrape.samples.iter().filter(move |s| s.name == n);
        let count = named("mc_mock:token_send_delay_seconds_count")
            .next()
            .unwrap()
            .value;
        assert_eq!(count, 22.0, "{text}");
        let buckets: Vec<(String, f64)> = named("mc_mock:token_send_delay_seconds_bucket")
            .map(|s| (s.labels["le"].clone(), s.value))
            .collect();
        assert_eq!(buckets.len(), 10, "{text}");
        assert_eq!(buckets[0].0, "0.0001");
        assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), 22.0));
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{text}");
        let sum = named("mc_mock:token_send_delay_seconds_sum")
            .next()
            .unwrap()
            .value;
        assert!(sum >= 0.0, "{text}");
    }
}

/// Sends `GET /health` on `c`.
fn ask_health(mut c: &TcpStream) {
    c.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
}

/// The first 12 bytes of the answer on `c` (its status line's start),
/// waiting up to 10 s.
fn status_of(mut c: &TcpStream) -> [u8; 12] {
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 12];
    c.read_exact(&mut head).unwrap();
    head
}

#[test]
fn connections_past_max_connections_wait_for_one_to_close() {
    let mock = Mock::start(&["--max-connections", "2"]);
    let first = TcpStream::connect(&mock.0.addr).unwrap();
    let second = TcpStream::connect(&mock.0.addr).unwrap();
    // Both served: each answers a request (and stays open).
    for c in [&first, &second] {
        ask_health(c);
        assert_eq!(&status_of(c), b"HTTP/1.1 200");
    }
    // The third connects (the kernel's listen queue) but is not served...
    let mut third = TcpStream::connect(&mock.0.addr).unwrap();
    ask_health(&third);
    third
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut head = [0u8; 12];
    let waited = third.read(&mut head);
    assert!(
        matches!(&waited, Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)),
        "answered past the cap: {waited:?}"
    );
    // ...until one of the two closes.
    drop(first);
    assert_eq!(&status_of(&third), b"HTTP/1.1 200");
    drop(second);
}

#[test]
fn an_idle_connection_is_closed_after_the_keep_alive_timeout_and_frees_its_place() {
    // One place, held by a client that keeps its connection idle: the
    // second is served once the first times out (a client's idle pool
    // cannot hold a full server forever).
    let mock = Mock::start(&["--max-connections", "1", "--keep-alive-timeout-s", "0.3"]);
    let mut idle = TcpStream::connect(&mock.0.addr).unwrap();
    ask_health(&idle);
    assert_eq!(&status_of(&idle), b"HTTP/1.1 200");
    let waiting = TcpStream::connect(&mock.0.addr).unwrap();
    ask_health(&waiting);
    let t0 = Instant::now();
    // The idle one ends with the server's FIN (after the rest of its answer).
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
    let closed_after = t0.elapsed();
    assert!(
        closed_after >= Duration::from_millis(200),
        "closed before the timeout: {closed_after:?}"
    );
    assert_eq!(&status_of(&waiting), b"HTTP/1.1 200");
}

#[test]
fn a_bad_engine_profile_is_refused_before_listening() {
    // Issue 36: mc-mock --engine printed `listening` (and a client
    // connected) before it refused its own profile.
    let out = crate::util::tool("mc-mock")
        .args([
            "--port",
            "0",
            "--engine",
            "--engine-profile",
            "no-such-profile",
        ])
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(!stderr.contains("serving"), "{stderr}");
    assert!(stderr.contains("no-such-profile"), "{stderr}");
}

/// Under `--engine`, /v1/models states the profile's context limit (the
/// one its engine refuses requests by), not the latency model's 1,048,576:
/// the built-in profile's Llama-3.1-8B 131,072, a file's own, or the flag.
#[test]
fn the_engines_models_card_states_the_profiles_context_limit() {
    let len = |args: &[&str]| -> Value {
        let mock = Mock::start(args);
        let mut resp = agent().get(mock.url("/v1/models")).call().unwrap();
        let models: Value =
            serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        models["data"][0]["max_model_len"].clone()
    };
    assert_eq!(len(&["--engine"]), 131072);
    assert_eq!(len(&["--engine", "--max-model-len", "4096"]), 4096);
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.json");
    std::fs::write(
        &profile,
        r#"{"model": "roofline", "t_fix_ms": 0.1, "c_seq_ms": 0.01, "t_w_ms": 5,
 "c_lin_ms": 0.02, "k_ms": 1e-6, "c_kv_ms": 1e-5, "max_model_len": 32768}"#,
    )
    .unwrap();
    assert_eq!(
        len(&["--engine", "--engine-profile", profile.to_str().unwrap()]),
        32768
    );
    assert_eq!(len(&[]), 1048576);
}
