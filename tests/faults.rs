//! Servers that break streams in every way a real one does, each answering
//! raw bytes: every fault gives exactly one result line, of the right kind,
//! and no cut stream passes as `ok`.

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use crate::util::read_request;

use serde_json::json;

use crate::replay::{replay, Run};

/// What the server does after writing its bytes.
#[derive(Clone, Copy)]
enum Then {
    Close,
    /// Close with SO_LINGER 0: the client sees a reset.
    Reset,
    /// Keep the connection open, silent, for this long.
    Stall(Duration),
}

/// A server that answers every POST with `bytes`, then does `then`.
fn serve(bytes: &'static str, then: Then) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || answer(conn, bytes, then));
        }
    });
    url
}

fn answer(conn: TcpStream, bytes: &str, then: Then) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    if read_request(&mut reader).is_none() {
        return;
    }
    let mut w = conn;
    let _ = w.write_all(bytes.as_bytes());
    let _ = w.flush();
    match then {
        Then::Close => {}
        Then::Reset => {
            let _ = socket_linger_zero(&w);
        }
        Then::Stall(d) => std::thread::sleep(d),
    }
}

/// SO_LINGER 0, so closing sends a reset (std has no setter for it).
fn socket_linger_zero(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Linger {
        on: i32,
        secs: i32,
    }
    extern "C" {
        fn setsockopt(fd: i32, level: i32, name: i32, val: *const Linger, len: u32) -> i32;
    }
    const SOL_SOCKET: i32 = 1;
    const SO_LINGER: i32 = 13;
    let l = Linger { on: 1, secs: 0 };
    // SAFETY: a valid fd and a pointer to a live struct of the given size.
    let rc = unsafe {
        setsockopt(
            s.as_raw_fd(),
            SOL_SOCKET,
            SO_LINGER,
            &l,
            std::mem::size_of::<Linger>() as u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

const ROLE: &str = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;

/// One row asking for exactly 2 tokens, one request at a time.
fn one_row() -> String {
    format!(
        "{}\n",
        json!({"timestamp": 0, "input_length": 4, "output_length": 2})
    )
}

/// `n` rows all due at once, each asking for exactly 2 tokens.
fn due_at_once(n: usize) -> String {
    one_row().repeat(n)
}

fn run(url: &str, extra: &[&str]) -> Run {
    let mut args = vec!["--model", "m", "--no-server-metrics", "--timeout", "2"];
    args.extend_from_slice(extra);
    replay(url, &args, &one_row())
}

/// The one result's error kind (`ok` when none), and the run.
fn kind_of(url: &str) -> (String, Run) {
    let run = run(url, &[]);
    assert_eq!(run.results.len(), 1, "one result line: {}", run.stderr);
    let k = run.results[0]
        .error
        .as_ref()
        .map_or("ok".to_string(), |e| e.kind.clone());
    (k, run)
}

#[test]
fn a_stream_cut_mid_chunk_is_incomplete() {
    // Chunk of 0x40 bytes announced, 10 sent, then the connection closes.
    let url = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n40\r\ndata: {\"ch",
        Then::Close,
    );
    assert_eq!(kind_of(&url).0, "incomplete");
}

#[test]
fn a_bad_chunk_size_is_not_ok() {
    let url = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nzz\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
        Then::Close,
    );
    let (k, run) = kind_of(&url);
    assert_ne!(k, "ok", "{:?}", run.results[0]);
}

#[test]
fn a_close_delimited_http_1_0_body_is_read_to_its_end() {
    // HTTP/1.0, no length, no chunking: the body ends where the connection
    // does. A whole stream is ok; one without [DONE] is incomplete.
    let whole = "HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"},\"finish_reason\":\"length\"}]}\n\n\
        data: [DONE]\n\n";
    let (k, run) = kind_of(&serve(whole, Then::Close));
    assert_eq!(k, "ok", "{}", run.stderr);
    assert_eq!(run.results[0].chunks, 2);
    assert!(!run.results[0].short);
    let cut = "HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n";
    let (k, run) = kind_of(&serve(cut, Then::Close));
    assert_eq!(k, "incomplete");
    assert_eq!(run.results[0].chunks, 1, "the token before the cut is kept");
    assert!(run.results[0].ttft_ms.is_some());
}

#[test]
fn a_reset_after_the_headers_is_incomplete() {
    let url = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        Then::Reset,
    );
    assert_eq!(kind_of(&url).0, "incomplete");
}

#[test]
fn a_body_shorter_than_its_content_length_is_incomplete() {
    let url = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 500\r\n\r\ndata: [DONE]\n\n",
        Then::Close,
    );
    assert_eq!(kind_of(&url).0, "incomplete");
}

#[test]
fn a_stall_longer_than_the_timeout_is_a_timeout() {
    let url = serve(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        Then::Stall(Duration::from_secs(5)),
    );
    assert_eq!(kind_of(&url).0, "timeout");
}

/// llama-cpp-python's interrupted stream: the role chunk, `[DONE]`, and a
/// close without the chunked body's terminating chunk.
#[test]
fn llama_cpp_pythons_interrupted_stream_is_incomplete_and_explained() {
    let body: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\ndata: {ROLE}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n",
            ROLE.len() + 8
        )
        .into_boxed_str(),
    );
    let (k, run) = kind_of(&serve(body, Then::Close));
    assert_eq!(k, "incomplete", "{:?}", run.results[0]);
    assert_eq!(run.code, 1, "every request failed");
    // As the real server sends it (no last chunk), it is still counted as
    // a cut stream, with the likely cause named.
    let msg = &run.results[0].error.as_ref().unwrap().message;
    assert!(
        msg.starts_with("[DONE] arrived before any finish_reason"),
        "{msg}"
    );
    assert!(
        run.stderr.contains("--interrupt_requests False"),
        "{}",
        run.stderr
    );
    // Even with the body's end intact, [DONE] before a finish_reason is a
    // cut stream, and the summary names the likely cause.
    let whole: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\ndata: {ROLE}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n",
            ROLE.len() + 8
        )
        .into_boxed_str(),
    );
    let (k, run) = kind_of(&serve(whole, Then::Close));
    assert_eq!(k, "incomplete");
    let msg = &run.results[0].error.as_ref().unwrap().message;
    assert!(
        msg.starts_with("[DONE] arrived before any finish_reason"),
        "{msg}"
    );
    assert!(
        run.stderr.contains("the server cut 1 streams")
            && run.stderr.contains("--interrupt_requests False"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_normal_finish_short_of_the_exact_length_is_ok_and_short() {
    // One token and `finish_reason: stop` where two were asked for exactly.
    let url = serve(
        "HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n\
         data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},\"finish_reason\":\"stop\"}]}\n\n\
         data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1,\"total_tokens\":5}}\n\n\
         data: [DONE]\n\n",
        Then::Close,
    );
    let (k, run) = kind_of(&url);
    assert_eq!(k, "ok");
    assert!(run.results[0].short);
    assert!(
        run.stderr.contains("1 ok requests ended short") && run.stderr.contains("ignore_eos"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("output tokens: 2 requested, 1 received"),
        "{}",
        run.stderr
    );
    // Not asking for exact lengths, a short answer is just an answer.
    let run = run_plain(&url);
    assert!(!run.results[0].short);
}

fn run_plain(url: &str) -> Run {
    run(url, &["--no-exact-output"])
}

/// A server that quotes the request's credentials back: a 401 whose body
/// holds its `Authorization` and `X-Api-Key` headers, as some gateways do.
fn echoing_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let Some((headers, _)) = read_request(&mut reader) else {
                    return;
                };
                let quoted: Vec<String> = headers
                    .into_iter()
                    .filter(|l| {
                        let l = l.to_ascii_lowercase();
                        l.starts_with("authorization:") || l.starts_with("x-api-key:")
                    })
                    .collect();
                let msg = json!({"error": {"message": format!("denied: {}", quoted.join("; "))}})
                    .to_string();
                let mut w = conn;
                let _ = write!(
                    w,
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{msg}",
                    msg.len()
                );
            });
        }
    });
    url
}

#[test]
fn secrets_are_hidden_in_everything_mc_replay_writes() {
    let addr = echoing_server();
    let dir = tempfile::tempdir().unwrap();
    let secrets = ["S3CRETPW", "S3CRETKEY", "S3CRETHDR", "YWxpY2U6UzNDUkVUUFc="];
    for (case, url) in [
        ("plain", format!("http://{addr}")),
        ("userinfo", format!("http://alice:S3CRETPW@{addr}")),
    ] {
        let d = dir.path().join(case);
        std::fs::create_dir(&d).unwrap();
        let out = crate::util::tool("mc-replay")
            .current_dir(&d)
            .args(["--url", &url, "--model", "m", "--api-key", "S3CRETKEY"])
            .args(["--header", "X-Api-Key: S3CRETHDR", "--timeout", "5"])
            .args([
                "--summary",
                "s.json",
                "--metrics-out",
                "m.jsonl",
                "-o",
                "r.jsonl",
            ])
            .args(["--metrics-interval", "0.05"])
            .write_stdin(one_row())
            .output()
            .unwrap();
        let mut written = vec![
            ("stdout", String::from_utf8_lossy(&out.stdout).into_owned()),
            ("stderr", String::from_utf8_lossy(&out.stderr).into_owned()),
        ];
        for f in ["s.json", "m.jsonl", "r.jsonl", "r.summary.json"] {
            written.push((f, std::fs::read_to_string(d.join(f)).unwrap_or_default()));
        }
        for (name, text) in &written {
            for s in secrets {
                assert!(!text.contains(s), "{case}: {s} in {name}:\n{text}");
            }
        }
        let results = &written[4].1;
        if case == "plain" {
            // The server quoted the key back, and the result says so, hidden.
            assert!(
                results.contains("denied: ") && results.contains("***"),
                "{case}: {results}"
            );
        }
        let summary = &written[2].1;
        assert!(!summary.is_empty(), "{case}: no summary");
    }
}

#[test]
fn an_event_over_max_event_bytes_fails_as_bad_sse() {
    // One event of 3,000 bytes that never ends, then the connection stays.
    let body: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000\r\n\r\ndata: {}",
            "x".repeat(3000)
        )
        .into_boxed_str(),
    );
    let url = serve(body, Then::Stall(Duration::from_secs(3)));
    for client in ["evented", "blocking"] {
        let run = run(
            &url,
            &["--max-event-bytes", "1000", "--http-client", client],
        );
        assert_eq!(run.results.len(), 1, "{client}: {}", run.stderr);
        let e = run.results[0].error.as_ref().unwrap();
        assert_eq!(e.kind, "bad_sse", "{client}: {e:?}");
        assert!(e.message.contains("--max-event-bytes"), "{client}: {e:?}");
        // Refused at once, not at the timeout.
        assert!(run.results[0].e2e_ms.unwrap_or(0.0) < 1500.0, "{client}");
    }
}

/// Both clients give every fault the same kind.
#[test]
fn both_clients_judge_faults_alike() {
    let chunked =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let cases: Vec<(&'static str, Then)> = vec![
        (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n40\r\ndata: {\"ch",
            Then::Close,
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 500\r\n\r\ndata: [DONE]\n\n",
            Then::Close,
        ),
        (chunked, Then::Reset),
        (
            "HTTP/1.0 503 Service Unavailable\r\ncontent-type: application/json\r\n\r\n{\"error\":{\"message\":\"busy\"}}",
            Then::Close,
        ),
        (
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\ncontent-length: 0\r\n\r\n",
            Then::Close,
        ),
        (
            "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"a b\"},\"finish_reason\":\"length\"}]}",
            Then::Close,
        ),
        ("garbage\r\n\r\n", Then::Close),
        ("", Then::Close),
    ];
    for (bytes, then) in cases {
        let url = serve(bytes, then);
        let kinds: Vec<(String, Option<String>)> = ["evented", "blocking"]
            .iter()
            .map(|c| {
                let run = run(&url, &["--http-client", c]);
                assert_eq!(run.results.len(), 1, "{c}: {}", run.stderr);
                let e = run.results[0].error.as_ref();
                (
                    e.map_or("ok".to_string(), |e| e.kind.clone()),
                    e.map(|e| e.message.clone()),
                )
            })
            .collect();
        assert_eq!(kinds[0].0, kinds[1].0, "{bytes:?}: {kinds:?}");
    }
}

/// A keep-alive server that counts its connections: every request gets a
/// whole two-token stream on the same connection.
fn keep_alive_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let counted = counted.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut w = conn;
                // Connections that carry a request (mc-replay's check that
                // the server is there opens one that carries none).
                let mut first = true;
                loop {
                    if read_request(&mut reader).is_none() {
                        return;
                    }
                    if std::mem::take(&mut first) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    let events = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n\
                        data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" b\"},\"finish_reason\":\"length\"}]}\n\n\
                        data: [DONE]\n\n";
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{events}\r\n0\r\n\r\n",
                        events.len()
                    );
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, conns)
}

#[test]
fn connections_are_kept_alive_and_capped() {
    use std::sync::atomic::Ordering;
    // One request at a time: one connection carries all of them. Closed
    // loop (`--concurrency 1`), not a 20 ms schedule: on a loaded machine
    // an answer can take longer than the gap, and a second connection for
    // an overlapping request would be right.
    let (url, conns) = keep_alive_server();
    let rows: String = (0..5)
        .map(|_| format!("{}\n", json!({"input_length": 4, "output_length": 2})))
        .collect();
    let r = replay(
        &url,
        &["--model", "m", "--no-server-metrics", "--concurrency", "1"],
        &rows,
    );
    assert_eq!(r.results.len(), 5, "{}", r.stderr);
    assert!(
        r.results.iter().all(|x| x.error.is_none()),
        "{:?}",
        r.results
    );
    assert_eq!(conns.load(Ordering::SeqCst), 1);
    // Eight due at once under --max-connections 2: two connections, the
    // rest wait their turn.
    let (url, conns) = keep_alive_server();
    let rows = due_at_once(8);
    let r = replay(
        &url,
        &[
            "--model",
            "m",
            "--no-server-metrics",
            "--max-connections",
            "2",
        ],
        &rows,
    );
    assert_eq!(r.results.len(), 8, "{}", r.stderr);
    assert!(
        r.results.iter().all(|x| x.error.is_none()),
        "{:?}",
        r.results
    );
    assert!(conns.load(Ordering::SeqCst) <= 2);
}

/// With the client's open-file limit below the requests in flight, the
/// requests past it wait for a connection to free and are all answered:
/// the limit is the client's, not a failure of the server. `sh`'s `ulimit
/// -n` lowers the hard limit too, so mc-replay cannot raise it away.
#[cfg(target_os = "linux")]
#[test]
fn the_clients_open_file_limit_makes_requests_wait_not_fail() {
    use crate::util::MockServer;
    // Long enough that all 80 are due while the first ones are answered.
    let mock = MockServer::start(&["--ttft-ms", "300", "--itl-ms", "1"]);
    let rows = due_at_once(80);
    let exe = assert_cmd::cargo::cargo_bin("mc-replay");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 48 && exec "$0" "$@""#)
        .arg(&exe)
        .args(["--url", &mock.url(), "--model", "m", "--no-server-metrics"])
        // No cap: the default one stays under the open-file limit.
        .args(["--max-connections", "0"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(rows.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 80, "{stderr}");
    let failed: Vec<_> = results.iter().filter(|r| !r["error"].is_null()).collect();
    assert!(failed.is_empty(), "{failed:?}\n{stderr}");
    assert!(
        stderr.contains("out of file descriptors (ulimit -n 48)")
            && stderr.contains("wait for a free connection"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
