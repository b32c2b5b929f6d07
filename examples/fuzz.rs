//! A mutation fuzzer on stable Rust (cargo-fuzz needs nightly): every
//! importer's record parser, mc-gen's distribution parser, mc-replay's SSE
//! splitter and classifier, both sides of HTTP (mc-replay's response
//! reader, the evented client's sans-IO exchange, and mc-mock's request
//! reader, each fed whole and in pieces), and the result-line reader, each fed inputs
//! mutated from a small seed corpus for a bounded time or number of
//! executions. A panic is a finding: the input is written to
//! `fuzz-crash-<target>.bin` and the run exits 1. Deterministic: the same
//! `--seed` replays the same inputs. Run by `scripts/fuzz.sh`.
//!
//! ```text
//! cargo run --release --example fuzz -- [--seconds S] [--execs N] [--seed N] [TARGET…]
//! ```

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser as _;
use mctrace::import::{self, ImportArgs, Importer, Sink};
use mctrace::jsonl::{OnError, Output};

/// xorshift64*: small, fixed, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens a mutation may splice in: the values that broke tools before.
const DICT: &[&[u8]] = &[
    b"18446744073709551615",
    b"18446744073709551616",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"99999999999",
    b"1e308",
    b"1e-300",
    b"-1",
    b"-0",
    b"0",
    b"NaN",
    b"inf",
    b"null",
    b"\"\"",
    b"[]",
    b"{}",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\n",
    b"\r\n",
    b"\xff",
    b"\xef\xbb\xbf",
    b"2023-02-29 00:00:00",
    b"+99:99",
    b"data: ",
    b"[DONE]",
    b"\n\n",
    b"\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n",
    b"transfer-encoding: chunked\r\n",
    b"content-length: ",
    b"connection: close\r\n",
    b"content-type: text/event-stream\r\n",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\n",
    b"expect: 100-continue\r\n",
];

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = input.len();
        match rng.below(8) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below(8.min(len - i));
                input.drain(i..i + n);
            }
            3 => {
                let i = rng.below(len + 1);
                let t = DICT[rng.below(DICT.len())];
                input.splice(i..i, t.iter().copied());
            }
            4 if len > 0 => {
                // Replace a run of digits with a dictionary token.
                let i = rng.below(len);
                let mut j = i;
                while j < len && input[j].is_ascii_digit() {
                    j += 1;
                }
                let t = DICT[rng.below(10)];
                input.splice(i..j.max(i + 1).min(len), t.iter().copied());
            }
            5 if len > 1 => {
                // Duplicate a chunk.
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let chunk: Vec<u8> = input[i..i + n].to_vec();
                let at = rng.below(input.len() + 1);
                input.splice(at..at, chunk);
            }
            6 => {
                let i = rng.below(len + 1);
                input.insert(i, b"0123456789.,:-e\"{}[]"[rng.below(20)]);
            }
            _ if len > 0 => {
                input.truncate(rng.below(len + 1));
            }
            _ => input.push(rng.next() as u8),
        }
    }
    input.truncate(4096);
}

/// What a target runs on each input.
type Run = Box<dyn FnMut(&[u8])>;

/// One target: its seeds and the function run on each input.
struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    run: Run,
}

/// Piece sizes for feeding `n` bytes in pieces, from `seed`: between 1
/// and 64 bytes, so every kind of boundary is met.
fn pieces(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    let mut left = n;
    while left > 0 {
        let k = (1 + rng.below(64)).min(left);
        out.push(k);
        left -= k;
    }
    out
}

/// A seed from the input's bytes (FNV-1a): the same input, the same pieces.
fn seed_of(input: &[u8]) -> u64 {
    input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The evented client's exchange fed `input` in pieces of these sizes,
/// every piece at the same time: the outcome, every field, as text.
fn http_response(input: &[u8], sizes: &[usize]) -> String {
    use mctrace::replay::http::evented::exchange::{End, Exchange, Reading};
    use mctrace::replay::http::inflight::Live;
    use mctrace::replay::outcome::Outcome;
    let live = Live::default();
    let how = Reading {
        live: &live,
        keep_text: true,
        max_event_bytes: 1024,
    };
    let mut ex = Exchange::new(b"POST / HTTP/1.1\r\n\r\n".to_vec(), Outcome::default());
    let n = ex.unwritten().len();
    ex.wrote(n);
    let mut end = None;
    let mut at = 0;
    for &k in sizes {
        end = ex.receive(&input[at..at + k], 10, &how);
        at += k;
        if end.is_some() {
            break;
        }
    }
    let end = end.or_else(|| ex.eof()).unwrap_or(End::Body {
        end: mctrace::replay::http::stream::BodyEnd::Clean,
        reuse: false,
    });
    let now = ex.ended_at().unwrap_or(1000);
    format!("{:?}", ex.conclude(end, now, &live))
}

/// mc-mock's request reader fed `input` in pieces of these sizes: each
/// request it read (method, target, framing, body) and why it stopped.
fn mock_requests(input: &[u8], sizes: &[usize]) -> Vec<String> {
    use mctrace::mock::http::{framing, take_head};
    let mut out = Vec::new();
    let mut buf = Vec::new();
    // A request whose body is still coming: its line, and the bytes due.
    let mut body: Option<(String, usize)> = None;
    let mut at = 0;
    for &k in sizes {
        buf.extend_from_slice(&input[at..at + k]);
        at += k;
        loop {
            if let Some((line, due)) = body.take() {
                if buf.len() < due {
                    body = Some((line, due));
                    break;
                }
                let b: Vec<u8> = buf.drain(..due).collect();
                out.push(format!("{line} body {b:?}"));
                continue;
            }
            match take_head(&mut buf) {
                Ok(None) => break,
                Ok(Some((n, head))) => {
                    buf.drain(..n);
                    match framing(&head) {
                        Ok(f) => {
                            let line =
                                format!("{} {} {:?} {f:?}", head.method, head.target, head.headers);
                            // A body longer than the input can hold never
                            // completes; `take` in Conn reads it as it comes.
                            body = Some((line, usize::try_from(f.body_len).unwrap_or(usize::MAX)));
                        }
                        Err(e) => {
                            out.push(format!("refused: {e:?}"));
                            return out;
                        }
                    }
                }
                Err(e) => {
                    out.push(format!("refused: {e:?}"));
                    return out;
                }
            }
        }
    }
    if let Some((line, due)) = body {
        out.push(format!("{line} cut with {due} body bytes due"));
    }
    out
}

fn sink() -> Sink {
    // In order: a chunked loop's threads for each 4 KB input would cost
    // more than the parse (`tests/chunked_import.rs` checks the two agree).
    Sink::new(
        Output::from_writer(Box::new(std::io::sink())),
        OnError::Skip,
        true,
    )
}

/// A fresh importer every `RENEW` inputs (their per-run state stays small).
const RENEW: u64 = 10_000;

fn importer_target(
    name: &'static str,
    args: Vec<String>,
    seeds: Vec<&str>,
    make: fn(&ImportArgs) -> Box<dyn Importer>,
) -> Target {
    let args = ImportArgs::try_parse_from(args).expect("fuzz: importer arguments");
    let mut imp = make(&args);
    let mut n = 0u64;
    Target {
        name,
        seeds: seeds.into_iter().map(|s| s.as_bytes().to_vec()).collect(),
        run: Box::new(move |input| {
            n += 1;
            let mut s = sink();
            let _ = imp.file(Box::new(Cursor::new(input.to_vec())), 0, &mut s);
            if n.is_multiple_of(RENEW) {
                // `finish` (the end of an import) once in a while, then afresh.
                let _ = imp.finish(&mut s);
                imp = make(&args);
            }
        }),
    }
}

fn targets(dir: &std::path::Path) -> Vec<Target> {
    let a = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let comps = dir.to_string_lossy().into_owned();
    let rag = dir.join("0_trace.jsonl").to_string_lossy().into_owned();
    vec![
        importer_target(
            "azure",
            a(&["mc-import", "--from", "azure", "--synth-hash-ids"]),
            vec![
                "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319600,3180,8\n",
                "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2024-05-10 00:00:00+00:00,10,1\r\n2024-05-10 00:00:00.5+00:00,20,2\r\n",
            ],
            |x| Box::new(import::azure::Azure::new(x)),
        ),
        importer_target(
            "burstgpt",
            a(&["mc-import", "--from", "burstgpt", "--synth-hash-ids"]),
            vec![
                "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45.5,GPT-4,1087,0,1087,API log\n",
                "Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,\"s,1\",ChatGPT,1,2,3,Conversation log\n",
            ],
            |x| Box::new(import::burstgpt::BurstGpt::new(x)),
        ),
        importer_target(
            "aibrix",
            a(&["mc-import", "--from", "aibrix"]),
            vec![
                "{\"timestamp\": 0, \"requests\": [{\"prompt\": \"hi\", \"prompt_length\": 1, \"output_length\": 5, \"session_id\": 1}]}\n",
                "{\"timestamp\": 1500, \"requests\": [{\"prompt_length\": 100, \"output_length\": null}]}\n",
            ],
            |x| Box::new(import::aibrix::Aibrix::new(x)),
        ),
        importer_target(
            "ragpulse",
            a(&["mc-import", "--from", "ragpulse", "--components", &comps, &rag]),
            vec![
                "{\"timestamp\": \"82\", \"input_length\": 1064, \"output_length\": 9, \"hash_ids\": {\"sys_prompt\": [100, 101], \"passages_ids\": [0, 1], \"history\": [200], \"web_search\": [], \"user_input\": [300]}, \"session_id\": \"a\"}\n",
                "{\"timestamp\": 5.25, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": {\"user_input\": [301]}}\n",
            ],
            |x| Box::new(import::ragpulse::RagPulse::new(x)),
        ),
        importer_target(
            "weka",
            a(&["mc-import", "--from", "weka"]),
            vec![
                "{\"id\": \"s\", \"block_size\": 4, \"hash_id_scope\": \"local\", \"requests\": [\
                 {\"t\": 0.0, \"type\": \"n\", \"in\": 9, \"out\": 2, \"hash_ids\": [1, 2], \"think_time\": 0.0},\
                 {\"t\": 10.5, \"type\": \"subagent\", \"agent_id\": \"a1\", \"requests\": [\
                 {\"t\": 0.0, \"in\": 8, \"out\": 1, \"hash_ids\": [50, 51]}]},\
                 {\"t\": 20.0, \"in\": 13, \"out\": 3, \"hash_ids\": [1, 2, 3], \"api_time\": 1.5}]}",
            ],
            |x| Box::new(import::weka::Weka::new(x)),
        ),
        Target {
            name: "nat",
            seeds: vec![br#"[{"payload": {"event_type": "LLM_START", "event_timestamp": 1.5, "UUID": "u1", "metadata": {"chat_inputs": [{"content": "hi", "role": "user"}]}}, "parent_id": "root", "function_ancestry": {"function_id": "f"}}, {"payload": {"event_type": "LLM_END", "event_timestamp": 2.0, "UUID": "u1", "usage_info": {"token_usage": {"prompt_tokens": 3, "completion_tokens": 4}}}}]"#.to_vec()],
            run: Box::new(|input| {
                let mut split = mctrace::nat::reader::ArraySplitter::new(Cursor::new(input.to_vec()));
                while let Ok(Some(Ok(e))) = split.next_element() {
                    let _ = serde_json::from_slice::<mctrace::nat::reader::NatRequest>(&e.bytes);
                }
            }),
        },
        Target {
            name: "gen-dist",
            seeds: ["1024", "const:7", "uniform:1:5", "normal:512:64", "lognormal:1000:0.8", "poisson", "gamma:0.5", "constant"]
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect(),
            run: Box::new(|input| {
                let Ok(s) = std::str::from_utf8(input) else { return };
                if let Ok(d) = s.parse::<mctrace::gen::dist::LengthDist>() {
                    let mut r = mctrace::gen::rng::Rng::new(1, 2);
                    for _ in 0..4 {
                        let v = d.sample(&mut r, 1);
                        assert!(v <= mctrace::limits::MAX_ROW_TOKENS, "{s}: draw {v}");
                    }
                    let _ = d.mean();
                }
                if let Ok(a) = s.parse::<mctrace::gen::arrival::Arrival>() {
                    let mut r = mctrace::gen::rng::Rng::new(1, 3);
                    let _ = a.gap_ms(&mut r, 1.0);
                }
            }),
        },
        Target {
            name: "sse",
            seeds: vec![
                b"data: {\"choices\": [{\"delta\": {\"role\": \"assistant\", \"content\": \"\"}}]}\n\ndata: {\"choices\": [{\"delta\": {\"content\": \"hi\"}, \"finish_reason\": null}]}\r\n\r\n: keep-alive\n\ndata: {\"choices\": [], \"usage\": {\"prompt_tokens\": 3, \"completion_tokens\": 1, \"prompt_tokens_details\": {\"cached_tokens\": 1}}}\n\ndata: [DONE]\n\n".to_vec(),
                b"data: {\"error\": {\"message\": \"x\", \"code\": 500}}\n\ndata: [DONE]\n\n".to_vec(),
                // A stream's token chunks, alike but for the token: what the
                // memo's template reads.
                b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},\"finish_reason\":null}]}\n\n\
                  data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"},\"finish_reason\":null}]}\n\n\
                  data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\\"q\"},\"finish_reason\":null}]}\n\n\
                  data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xc3\xa9\"},\"finish_reason\":null}]}\n\n\
                  data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\".\"},\"finish_reason\":\"length\"}]}\n\n".to_vec(),
                b"data: {\"object\": \"text_completion\", \"choices\": [{\"text\": \"a\", \"finish_reason\": \"length\"}]}\n\n".to_vec(),
            ],
            run: Box::new(|input| {
                use mctrace::replay::http::sse::{classify, classify_with, EventSplitter, Memo};
                // Fed whole and in pieces: the same events either way.
                let mut whole = Vec::new();
                let mut sp = EventSplitter::default();
                // An event over the size cap is an error either way.
                let whole_ok = sp.feed(input, &mut |e| whole.push(e.to_vec())).is_ok();
                sp.finish(&mut |e| whole.push(e.to_vec()));
                let mut pieces = Vec::new();
                let mut sp = EventSplitter::default();
                let cut = input.len() / 3;
                let mut pieces_ok = true;
                for part in [&input[..cut], &input[cut..]] {
                    for chunk in part.chunks(7) {
                        pieces_ok &= sp.feed(chunk, &mut |e| pieces.push(e.to_vec())).is_ok();
                    }
                }
                sp.finish(&mut |e| pieces.push(e.to_vec()));
                assert_eq!(whole_ok, pieces_ok, "the size cap depends on the read sizes");
                if whole_ok {
                    assert_eq!(whole, pieces, "splitting depends on the read sizes");
                }
                // Each event read on its own, and as the next of one stream
                // (what the stream's memo and template remember): the same.
                let (mut usage, mut usage_memo, mut memo) = (None, None, Memo::default());
                for e in &whole {
                    let alone = classify(e, &mut usage);
                    let next = classify_with(e, &mut usage_memo, &mut memo);
                    assert_eq!(alone, next, "the memo changes what an event says");
                }
            }),
        },
        Target {
            name: "http-response",
            seeds: [
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n\
                 3a;x=1\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n\r\n\
                 51\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"},\"finish_reason\":\"length\"}]}\n\n\r\n\
                 e\r\ndata: [DONE]\n\n\r\n0\r\nx-trailer: 1\r\n\r\n",
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 86\r\n\r\n\
                 data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}\r\n\r\n: ping\n\ndata: [DONE]\n\n",
                "HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n",
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 75\r\n\r\n\
                 {\"choices\":[{\"index\":0,\"message\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}",
                "HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\ncontent-type: application/json\r\ncontent-length: 33\r\n\r\n{\"error\":{\"message\":\"slow down\"}}",
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: /x\r\ncontent-length: 0\r\n\r\n",
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n",
            ]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect(),
            run: Box::new(|input| {
                // Fed whole, and in pieces: the same outcome either way (the
                // pieces arrive at the same time, so the times agree too).
                let whole = http_response(input, &[input.len()]);
                let split = http_response(input, &pieces(input.len(), seed_of(input)));
                assert_eq!(whole, split, "the outcome depends on the read sizes");
            }),
        },
        Target {
            name: "mock-request",
            seeds: [
                "POST /v1/chat/completions HTTP/1.1\r\nhost: h\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}\
                 GET /metrics HTTP/1.1\r\nhost: h\r\n\r\n",
                "\r\n\r\nPOST / HTTP/1.0\r\nconnection: keep-alive\r\nexpect: 100-continue\r\ncontent-length: 5\r\n\r\nhello",
                "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
                "POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab",
                "GET / HTTP/2\r\n\r\n",
            ]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect(),
            run: Box::new(|input| {
                let whole = mock_requests(input, &[input.len()]);
                let split = mock_requests(input, &pieces(input.len(), seed_of(input)));
                assert_eq!(whole, split, "the requests depend on the read sizes");
            }),
        },
        Target {
            name: "result-line",
            seeds: vec![br#"{"line": 1, "session_id": null, "turn": 0, "request_id": "r-1", "x_request_id": "00000000-0000-4000-8000-000000000001", "target": "engine", "warmup": false, "status": "ok", "http_status": 200, "error": null, "t_sched_ms": 0.0, "t_send_ms": 0.1, "t_first_ms": 5.0, "t_last_ms": 9.0, "t_end_ms": 9.5, "lag_ms": 0.1, "ttft_ms": 4.9, "e2e_ms": 8.9, "tpot_ms": 1.0, "sched_latency_ms": 9.0, "chunks": 5, "itl_ms": null, "itl_gaps_ms": [1.0, 1.0], "input_tokens": 10, "prompt_tokens": 10, "cached_tokens": 0, "output_tokens": 5, "completion_tokens": 5, "tokens_estimated": false, "finish_reason": "length", "short": false}"#.to_vec()],
            run: Box::new(|input| {
                let _ = serde_json::from_slice::<mctrace::results::line::RequestResult>(input);
            }),
        },
    ]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seconds, mut execs, mut seed) = (60u64, 1_000_000u64, 1u64);
    let mut only: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        let mut num = |what: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("fuzz: {what} needs a number"))
        };
        match a.as_str() {
            "--seconds" => seconds = num("--seconds"),
            "--execs" => execs = num("--execs"),
            "--seed" => seed = num("--seed"),
            name => only.push(name.to_string()),
        }
    }
    // The RAGPulse component files, in a folder of their own.
    let dir: PathBuf = std::env::temp_dir().join(format!("mctrace-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("fuzz: temp folder");
    for (name, text) in [
        ("1_sys_prompt.jsonl", "{\"sys_prompt_id\": 100, \"token_length\": 512}\n{\"sys_prompt_id\": 101, \"token_length\": 100}\n"),
        ("2_passages.jsonl", "{\"passage_id\": 0, \"token_length\": 400}\n{\"passage_id\": 1, \"token_length\": 30}\n"),
        ("3_history.jsonl", "{\"history_id\": 200, \"token_length\": 11}\n"),
        ("4_user_input.jsonl", "{\"user_input_id\": 300, \"token_length\": 5}\n{\"user_input_id\": 301, \"token_length\": 7}\n"),
        ("5_web_search.jsonl", ""),
        ("0_trace.jsonl", ""),
    ] {
        std::fs::write(dir.join(name), text).expect("fuzz: component file");
    }
    std::panic::set_hook(Box::new(|_| {}));
    let mut failed = false;
    for mut t in targets(&dir) {
        if !only.is_empty() && !only.iter().any(|o| o == t.name) {
            continue;
        }
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut corpus = t.seeds.clone();
        let started = Instant::now();
        let limit = Duration::from_secs(seconds);
        let mut n = 0u64;
        let mut input = Vec::new();
        while n < execs && (n & 1023 != 0 || started.elapsed() < limit) {
            input.clear();
            input.extend_from_slice(&corpus[rng.below(corpus.len())]);
            mutate(&mut rng, &mut input);
            n += 1;
            let run = &mut t.run;
            if catch_unwind(AssertUnwindSafe(|| run(&input))).is_err() {
                let path = format!("fuzz-crash-{}.bin", t.name);
                let _ = std::fs::write(&path, &input);
                println!(
                    "{}: PANIC after {n} executions (seed {seed}); input in {path}: {:?}",
                    t.name,
                    String::from_utf8_lossy(&input)
                );
                failed = true;
                break;
            }
            // Keep some mutants as new starting points (bounded corpus).
            if rng.below(64) == 0 {
                if corpus.len() < 256 {
                    corpus.push(input.clone());
                } else {
                    let k = t.seeds.len() + rng.below(corpus.len() - t.seeds.len());
                    corpus[k] = input.clone();
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{:<12} {n:>10} executions in {secs:>6.1} s ({:>8.0}/s){}",
            t.name,
            n as f64 / secs.max(1e-9),
            if failed { "  FAILED" } else { "" }
        );
        if failed {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::process::exit(i32::from(failed));
}
