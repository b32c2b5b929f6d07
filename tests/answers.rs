//! Issue 36, "Secrets" and "Answers counted wrongly": raw-TCP servers
//! that answer each request with exact bytes, and what mc-replay's clients
//! make of them: URL credentials sent as Basic auth (not in `host`),
//! credentials never sent to another origin by a redirect, statuses
//! classed by their class, a JSON answer to a streaming request that is no
//! completion, tokens after `[DONE]`, a request sent twice, and interim
//! heads without end.

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::replay::{replay, Run};
use crate::util::read_request;

/// Every request a server read, in order, with the connection it came on.
type Seen = Arc<Mutex<Vec<(usize, Vec<String>)>>>;

/// A server that hands each request it reads to `answer` (the connection's
/// number, the request's n-th number overall, its head's lines) and writes
/// what it returns; `None` closes the connection instead.
fn server(
    answer: impl Fn(usize, usize, &[String]) -> Option<Vec<u8>> + Send + Sync + 'static,
) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let (answer, log) = (Arc::new(answer), seen.clone());
    std::thread::spawn(move || {
        for (conn_no, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { continue };
            let (answer, log) = (answer.clone(), log.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut w = conn;
                while let Some((head, _)) = read_request(&mut r) {
                    let n = {
                        let mut log = log.lock().unwrap();
                        log.push((conn_no, head.clone()));
                        log.len() - 1
                    };
                    match answer(conn_no, n, &head) {
                        Some(bytes) => {
                            if w.write_all(&bytes).is_err() {
                                return;
                            }
                        }
                        None => return,
                    }
                }
            });
        }
    });
    (addr, seen)
}

const ROLE: &str = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
const A: &str = r#"{"choices":[{"index":0,"delta":{"content":" a"}}]}"#;
const B_LAST: &str =
    r#"{"choices":[{"index":0,"delta":{"content":" b"},"finish_reason":"length"}]}"#;

/// A kept-alive `200` SSE answer of these events.
fn sse(events: &[&str]) -> Vec<u8> {
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Two tokens, as a row asking for 2 wants them.
fn two_tokens() -> Vec<u8> {
    sse(&[ROLE, A, B_LAST, "[DONE]"])
}

fn rows(n: usize, gap_ms: u64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{}\n",
                json!({"timestamp": i as u64 * gap_ms, "input_length": 4, "output_length": 2})
            )
        })
        .collect()
}

/// Runs mc-replay's `client` (`evented` or `blocking`) on one row.
fn run(url: &str, client: &str, extra: &[&str]) -> Run {
    let mut args = vec!["--model", "m", "--no-server-metrics", "--timeout", "5"];
    args.extend_from_slice(&["--http-client", client]);
    args.extend_from_slice(extra);
    replay(url, &args, &rows(1, 0))
}

/// The one result's error kind (`ok` when none).
fn kind(run: &Run) -> String {
    assert_eq!(run.results.len(), 1, "one result line: {}", run.stderr);
    run.results[0]
        .error
        .as_ref()
        .map_or("ok".to_string(), |e| e.kind.clone())
}

#[test]
fn url_credentials_go_in_basic_auth_and_never_in_host() {
    for client in ["evented", "blocking"] {
        let (addr, seen) = server(|_, _, _| Some(two_tokens()));
        let r = run(&format!("http://alice:S3CRETPW@{addr}"), client, &[]);
        assert_eq!(kind(&r), "ok", "{client}: {}", r.stderr);
        let seen = seen.lock().unwrap();
        let head = &seen[0].1;
        let header = |name: &str| {
            head.iter()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        assert_eq!(header("host"), addr, "{client}: {head:?}");
        // base64("alice:S3CRETPW"), as RFC 7617 and ureq make it.
        assert_eq!(
            header("authorization"),
            "Basic YWxpY2U6UzNDUkVUUFc=",
            "{client}: {head:?}"
        );
        assert!(
            !head.iter().any(|l| l.contains("S3CRETPW")),
            "{client}: the password in clear: {head:?}"
        );
    }
}

#[test]
fn a_json_answer_with_no_completion_to_a_streaming_request_did_not_stream() {
    for client in ["evented", "blocking"] {
        let (addr, _) = server(|_, _, _| {
            Some(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
                    .to_vec(),
            )
        });
        let r = run(&format!("http://{addr}"), client, &[]);
        assert_eq!(kind(&r), "not_streamed", "{client}: {}", r.stderr);
        let msg = &r.results[0].error.as_ref().unwrap().message;
        assert!(msg.contains("did not stream"), "{client}: {msg}");
    }
}

#[test]
fn tokens_after_done_are_not_counted() {
    for client in ["evented", "blocking"] {
        let (addr, _) = server(|_, _, _| Some(sse(&[ROLE, A, B_LAST, "[DONE]", A, A, A])));
        let r = run(&format!("http://{addr}"), client, &[]);
        assert_eq!(kind(&r), "ok", "{client}: {}", r.stderr);
        let res = &r.results[0];
        assert_eq!(
            (res.chunks, res.completion_tokens, res.itl_gaps_ms.len()),
            (2, Some(2), 1),
            "{client}"
        );
    }
}

#[test]
fn redirects_and_protocol_switches_are_not_server_errors() {
    for client in ["evented", "blocking"] {
        let (addr, _) = server(|_, _, _| {
            Some(
                b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:9/v1/chat/completions\r\n\
                  content-length: 0\r\n\r\n"
                    .to_vec(),
            )
        });
        let r = run(&format!("http://{addr}"), client, &[]);
        assert_eq!(kind(&r), "http_3xx", "{client}: {}", r.stderr);
    }
    // ureq reads a 101 as the start of another protocol; the evented
    // client reads it as the answer it is.
    let (addr, _) = server(|_, _, _| {
        Some(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
                .to_vec(),
        )
    });
    let r = run(&format!("http://{addr}"), "evented", &[]);
    assert_eq!(kind(&r), "http_1xx", "{}", r.stderr);
}

#[test]
fn a_request_sent_again_after_a_closed_keep_alive_connection_is_counted() {
    // The second request comes on the kept-alive connection; the server
    // reads it and closes without an answer, so the client sends it again
    // on a new connection: the server read 3 requests for 2 rows.
    let (addr, seen) = server(|_, n, _| (n != 1).then(two_tokens));
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let args = [
        "--model",
        "m",
        "--no-server-metrics",
        "--timeout",
        "5",
        "--summary",
        summary.to_str().unwrap(),
    ];
    let r = replay(&format!("http://{addr}"), &args, &rows(2, 300));
    assert_eq!(r.results.len(), 2, "{}", r.stderr);
    assert!(r.results.iter().all(|x| x.error.is_none()), "{}", r.stderr);
    let seen = seen.lock().unwrap();
    // (mc-replay's reachability check opens a connection of its own first.)
    let conns: Vec<usize> = seen.iter().map(|(c, _)| *c).collect();
    assert!(
        conns.len() == 3 && conns[0] == conns[1] && conns[2] != conns[1],
        "the second request on the first connection, then again on a new one: {conns:?}"
    );
    let mut resends: Vec<u64> = r.results.iter().map(|x| x.resends).collect();
    resends.sort_unstable();
    assert_eq!(resends, [0, 1]);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["requests"]["resends"], 1, "{s}");
    assert!(
        r.stderr.contains("1 requests were sent again"),
        "{}",
        r.stderr
    );
}

#[test]
fn endless_interim_heads_end_at_the_head_limit_not_the_timeout() {
    // `100 Continue` without end: the answer fails once the interim heads
    // pass the head limit (64 KB), not at `--timeout`.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut w = conn;
                if read_request(&mut r).is_none() {
                    return;
                }
                let heads = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(64);
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(40) {
                    if w.write_all(&heads).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
    });
    let t = Instant::now();
    let r = replay(
        &format!("http://{addr}"),
        &["--model", "m", "--no-server-metrics", "--timeout", "30"],
        &rows(1, 0),
    );
    assert_eq!(kind(&r), "transport", "{}", r.stderr);
    let msg = &r.results[0].error.as_ref().unwrap().message;
    assert!(msg.contains("response head over"), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

/// A server at another origin that counts what reaches it and whether any
/// of it carried the run's key.
fn elsewhere() -> (String, Arc<AtomicUsize>, Seen) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let (addr, seen) = server(move |_, _, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        let body = r#"{"data":[{"id":"evil"}]}"#;
        Some(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    });
    (addr, hits, seen)
}

fn redirect_to(location: &str) -> Vec<u8> {
    format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n")
        .into_bytes()
}

#[test]
fn the_model_listing_and_the_scrape_send_no_credentials_to_another_origin() {
    let (other, hits, _) = elsewhere();
    let to_other = format!("http://{other}/v1/models");
    let (addr, _) = server(move |_, _, head| {
        let line = &head[0];
        if line.starts_with("GET /v1/models ") || line.starts_with("GET /metrics ") {
            Some(redirect_to(&to_other))
        } else {
            Some(two_tokens())
        }
    });
    let key = ["--api-key", "S3CRETKEY", "--header", "X-Api-Key: S3CRETHDR"];
    // The listing: refused, with the reason.
    let out = crate::util::tool("mc-replay")
        .args(["--url", &format!("http://{addr}"), "--timeout", "5"])
        .args(key)
        .args(["--no-server-metrics"])
        .write_stdin(rows(1, 0))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("another origin"), "{stderr}");
    // The scrape: noted, the run goes on.
    let out = crate::util::tool("mc-replay")
        .args(["--url", &format!("http://{addr}"), "--timeout", "5"])
        .args(key)
        .args(["--model", "m", "--server-metrics"])
        .write_stdin(rows(1, 0))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("another origin"), "{stderr}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a request reached the other origin"
    );
}

#[test]
fn a_redirect_within_the_origin_is_followed_with_the_headers() {
    let (addr, seen) = server(move |_, _, head| {
        let line = &head[0];
        if line.starts_with("GET /v1/models ") {
            Some(redirect_to("/v1/models/"))
        } else if line.starts_with("GET /v1/models/ ") {
            let body = r#"{"data":[{"id":"listed"}]}"#;
            Some(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes(),
            )
        } else {
            Some(two_tokens())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("s.json");
    let r = replay(
        &format!("http://{addr}"),
        &[
            "--header",
            "X-Api-Key: S3CRETHDR",
            "--no-server-metrics",
            "--timeout",
            "5",
            "--summary",
            summary.to_str().unwrap(),
        ],
        &rows(1, 0),
    );
    assert_eq!(kind(&r), "ok", "{}", r.stderr);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["run"]["model"], "listed", "{s}");
    let seen = seen.lock().unwrap();
    let followed = seen
        .iter()
        .find(|(_, h)| h[0].starts_with("GET /v1/models/ "))
        .expect("the redirect was followed");
    assert!(
        followed.1.iter().any(|l| l == "x-api-key: S3CRETHDR"),
        "{:?}",
        followed.1
    );
}
