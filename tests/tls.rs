//! mc-replay over https://, against TLS servers this file starts on
//! 127.0.0.1 (rustls' server side over std sockets, one thread per
//! connection), with a CA and server certificates made when the tests run.
//! The evented client is the default; `--http-client blocking` (ureq) is
//! checked to agree with it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};

use crate::replay::{kinds, replay, Mock, Run};

/// A test CA, and server certificates it signed.
struct Pki {
    /// The CA's certificate, as `--cacert` takes it.
    ca_pem: String,
    /// Names 127.0.0.1 (as an IP address SAN).
    for_ip: Certified,
    /// Names only `server.test`.
    for_other_name: Certified,
    /// For 127.0.0.1, but signed by a CA no one is told of.
    by_unknown_ca: Certified,
    /// Where `ca_pem` is written, for `--cacert`.
    ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

struct Certified {
    chain: Vec<CertificateDer<'static>>,
    key: Vec<u8>,
}

impl Certified {
    fn server_config(&self) -> Arc<ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), key)
            .unwrap();
        Arc::new(config)
    }
}

/// The test PKI, made once per test binary (key generation is the slow part).
fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let make_ca = |name: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, name);
            let key = KeyPair::generate().unwrap();
            let cert = p.self_signed(&key).unwrap();
            (cert, Issuer::new(p, key))
        };
        let leaf = |names: &[&str], issuer: &Issuer<'_, KeyPair>| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let p = CertificateParams::new(names).unwrap();
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, issuer).unwrap();
            Certified {
                chain: vec![cert.der().clone()],
                key: key.serialize_der(),
            }
        };
        let (ca_cert, ca) = make_ca("mctrace test CA");
        let (_, other_ca) = make_ca("a CA nobody trusts");
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        Pki {
            ca_pem: ca_cert.pem(),
            for_ip: leaf(&["127.0.0.1"], &ca),
            for_other_name: leaf(&["server.test"], &ca),
            by_unknown_ca: leaf(&["127.0.0.1"], &other_ca),
            ca_file,
            _dir: dir,
        }
    })
}

/// What the test server does with each connection.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers requests one after another on the connection (keep-alive):
    /// a chunked SSE stream, its first token `ttft` after the request, the
    /// next ones `itl` apart.
    Stream { ttft: Duration, itl: Duration },
    /// Answers with a close-delimited stream (no length, no chunks) and
    /// closes: with a close_notify, or only the TCP connection.
    CloseDelimited { close_notify: bool, tokens: usize },
    /// Answers the first request on each connection; a second request on
    /// it is read and the connection closed without a byte of answer.
    OnePerConnection,
    /// Accepts the TCP connection and says nothing (no handshake).
    Silent,
}

struct TlsServer {
    url: String,
    /// TCP connections accepted (mc-replay's check that the server is
    /// there, with --model, is one).
    accepts: Arc<AtomicU64>,
    /// Connections that carried a request (through a whole handshake).
    used: Arc<AtomicU64>,
}

impl TlsServer {
    fn start(cert: &Certified, behaviour: Behaviour) -> TlsServer {
        let config = cert.server_config();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let accepts = Arc::new(AtomicU64::new(0));
        let used = Arc::new(AtomicU64::new(0));
        let (counted, in_use) = (accepts.clone(), used.clone());
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let config = config.clone();
                let in_use = in_use.clone();
                std::thread::spawn(move || serve(tcp, config, behaviour, &in_use));
            }
        });
        TlsServer { url, accepts, used }
    }

    fn accepts(&self) -> u64 {
        self.accepts.load(Ordering::SeqCst)
    }

    fn connections_used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

fn serve(tcp: TcpStream, config: Arc<ServerConfig>, behaviour: Behaviour, used: &AtomicU64) {
    if let Behaviour::Silent = behaviour {
        std::thread::sleep(Duration::from_secs(20));
        return;
    }
    let _ = tcp.set_nodelay(true);
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut r = BufReader::new(StreamOwned::new(conn, tcp));
    let mut served = 0;
    // Each loop is one request; a failed handshake or a closed connection
    // ends it (read_request gives None).
    while let Some((method, path)) = read_request(&mut r) {
        if served == 0 {
            used.fetch_add(1, Ordering::SeqCst);
        }
        let tls = r.get_mut();
        served += 1;
        if method == "GET" {
            let answer = if path.ends_with("/models") {
                let body = json!({"data": [{"id": "tls-model"}]}).to_string();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_string()
            };
            let _ = tls.write_all(answer.as_bytes());
            continue;
        }
        match behaviour {
            Behaviour::Stream { ttft, itl } => {
                if stream_chunked(tls, ttft, itl, 4).is_err() {
                    return;
                }
            }
            Behaviour::OnePerConnection if served > 1 => return,
            Behaviour::OnePerConnection => {
                if stream_chunked(tls, Duration::ZERO, Duration::ZERO, 4).is_err() {
                    return;
                }
            }
            Behaviour::CloseDelimited {
                close_notify,
                tokens,
            } => {
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                );
                out.push_str(&event(&role()));
                for i in 0..tokens {
                    out.push_str(&event(&token(i, 4)));
                }
                if tokens >= 4 {
                    out.push_str(&event(&usage(4)));
                    out.push_str("data: [DONE]\n\n");
                }
                let _ = tls.write_all(out.as_bytes());
                let _ = tls.flush();
                if close_notify {
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
                // Dropping closes the TCP connection; nothing more is sent.
                return;
            }
            Behaviour::Silent => return,
        }
    }
}

/// Reads one request (its method and path), the body skipped; `None` at EOF.
fn read_request(r: &mut BufReader<Tls>) -> Option<(String, String)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split(' ');
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut len = 0usize;
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((method, path))
}

fn event(json: &Value) -> String {
    format!("data: {json}\n\n")
}

fn role() -> Value {
    json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
}

fn token(i: usize, of: usize) -> Value {
    let finish = (i + 1 == of).then_some("length");
    json!({"choices": [{"index": 0, "delta": {"content": format!(" t{i}")}, "finish_reason": finish}]})
}

fn usage(n: usize) -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}})
}

/// A chunked SSE answer of `n` tokens, each event its own chunk and write.
fn stream_chunked(tls: &mut Tls, ttft: Duration, itl: Duration, n: usize) -> std::io::Result<()> {
    let chunk = |s: &str| format!("{:x}\r\n{s}\r\n", s.len());
    tls.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    )?;
    tls.write_all(chunk(&event(&role())).as_bytes())?;
    std::thread::sleep(ttft);
    for i in 0..n {
        if i > 0 {
            std::thread::sleep(itl);
        }
        tls.write_all(chunk(&event(&token(i, n))).as_bytes())?;
    }
    tls.write_all(chunk(&event(&usage(n))).as_bytes())?;
    tls.write_all(chunk("data: [DONE]\n\n").as_bytes())?;
    tls.write_all(b"0\r\n\r\n")?;
    tls.flush()
}

fn rows(timestamps_ms: &[u64]) -> String {
    timestamps_ms
        .iter()
        .map(|t| {
            format!(
                "{}\n",
                json!({"timestamp": t, "input_length": 4, "output_length": 4})
            )
        })
        .collect()
}

fn messages(run: &Run) -> Vec<String> {
    run.results
        .iter()
        .filter_map(|r| r.error.as_ref().map(|e| e.message.clone()))
        .collect()
}

/// The options every run here takes, and `extra`.
fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let ca = pki().ca_file.to_str().unwrap();
    let mut v = vec!["--model", "m", "--no-server-metrics", "--cacert", ca];
    v.extend_from_slice(extra);
    v
}

#[test]
fn a_stream_over_https_is_measured_by_the_evented_client() {
    let server = TlsServer::start(
        &pki().for_ip,
        Behaviour::Stream {
            ttft: Duration::from_millis(80),
            itl: Duration::from_millis(20),
        },
    );
    let run = replay(
        &server.url,
        &args(&["--http-client", "evented"]),
        &rows(&[0]),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The evented client took it (no fallback), and says so in the summary.
    assert!(!run.stderr.contains("blocking client"), "{}", run.stderr);
    let r = &run.results[0];
    assert_eq!(r.status, "ok", "{r:?}");
    assert_eq!(r.target, "http");
    assert_eq!((r.chunks, r.completion_tokens), (4, Some(4)));
    assert!(!r.tokens_estimated);
    assert_eq!(r.finish_reason.as_deref(), Some("length"));
    // TTFT: the server's 80 ms after the request (plus the connection and
    // handshake, which the request's time includes).
    let ttft = r.ttft_ms.unwrap();
    assert!((79.0..300.0).contains(&ttft), "ttft {ttft}");
    // The tokens' gaps are the server's 20 ms, each from its own read.
    assert_eq!(r.itl_gaps_ms.len(), 3, "{r:?}");
    for g in &r.itl_gaps_ms {
        assert!((15.0..120.0).contains(g), "{:?}", r.itl_gaps_ms);
    }
}

#[test]
fn tls_connections_are_kept_alive_and_reused() {
    let server = TlsServer::start(
        &pki().for_ip,
        Behaviour::Stream {
            ttft: Duration::ZERO,
            itl: Duration::ZERO,
        },
    );
    // Sequential (the second is due long after the first ended): one
    // TCP connection, one handshake.
    let run = replay(
        &server.url,
        &args(&["--max-connections", "1"]),
        &rows(&[0, 300]),
    );
    assert_eq!(kinds(&run), ["ok", "ok"], "{}", run.stderr);
    assert_eq!(server.connections_used(), 1);
}

/// A kept-alive connection the server closes as the next request arrives
/// (before any byte of the answer): sent once more on a new connection,
/// over TLS as over plaintext.
#[test]
fn a_reused_tls_connection_found_closed_is_retried_once() {
    let server = TlsServer::start(&pki().for_ip, Behaviour::OnePerConnection);
    let run = replay(
        &server.url,
        &args(&["--max-connections", "1"]),
        &rows(&[0, 300]),
    );
    assert_eq!(kinds(&run), ["ok", "ok"], "{}", run.stderr);
    assert_eq!(server.connections_used(), 2);
}

/// Sends with a 100 ms pause between polls once 100 answers are in
/// flight: each token's time must be its read's arrival stamp, not the
/// time it was read or decrypted (which would put TTFT p50 at 100 ms plus
/// half the pause, ~150 ms). The first 120 requests (warm-up) open the
/// connections, so the measured ones carry no handshake. The bounds leave
/// room for a test server whose threads wait for a core.
#[test]
fn coalesced_tls_reads_keep_the_arrival_times() {
    let server = TlsServer::start(
        &pki().for_ip,
        Behaviour::Stream {
            ttft: Duration::from_millis(100),
            itl: Duration::from_millis(50),
        },
    );
    let n = 120u64;
    let times: Vec<u64> = (0..n)
        .map(|i| i / 3)
        .chain((0..n).map(|i| 2_000 + i / 3))
        .collect();
    crate::util::within_attempts(3, || {
        let before = server.connections_used();
        let run = replay(
            &server.url,
            &args(&[
                "--event-loops",
                "1",
                "--read-coalesce-us",
                "100000",
                "--max-connections",
                "120",
                "--warmup",
                "120",
            ]),
            &rows(&times),
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.results.len(), 240);
        assert!(
            run.results.iter().all(|r| r.status == "ok"),
            "{}",
            run.stderr
        );
        // Every measured request went on a kept-alive connection.
        let used = server.connections_used() - before;
        assert!(used <= n, "{used} connections");
        let measured: Vec<_> = run.results.iter().filter(|r| !r.warmup).collect();
        assert_eq!(measured.len(), n as usize);
        let p50 = |f: &dyn Fn(&&crate::replay::schema::RequestResult) -> f64| {
            let mut v: Vec<f64> = measured.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        if cfg!(target_os = "linux") {
            let ttft = p50(&|r| r.ttft_ms.unwrap());
            let e2e = p50(&|r| r.e2e_ms.unwrap());
            if !(99.0..125.0).contains(&ttft) || !(249.0..275.0).contains(&e2e) {
                return Err(format!("TTFT p50 {ttft} ms, e2e p50 {e2e} ms"));
            }
        }
        Ok(())
    });
}

/// Without --cacert the test CA is unknown: every request is one result
/// line of kind `transport` naming the cause and the fix, exit 1, with
/// either client; the same with a CA nobody was told of.
#[test]
fn an_unknown_ca_fails_the_handshake_as_a_transport_error() {
    let server = TlsServer::start(&pki().for_ip, Behaviour::OnePerConnection);
    for client in ["evented", "blocking"] {
        let run = replay(
            &server.url,
            &[
                "--model",
                "m",
                "--no-server-metrics",
                "--http-client",
                client,
            ],
            &rows(&[0, 10]),
        );
        assert_eq!(run.code, 1, "{client}: {}", run.stderr);
        assert_eq!(kinds(&run), ["transport", "transport"], "{client}");
        for m in messages(&run) {
            assert!(
                m.starts_with("TLS handshake failed: invalid peer certificate: UnknownIssuer")
                    && m.contains("--cacert"),
                "{client}: {m}"
            );
        }
        assert!(
            run.stderr.contains("every request failed"),
            "{}",
            run.stderr
        );
    }
    let stranger = TlsServer::start(&pki().by_unknown_ca, Behaviour::OnePerConnection);
    let run = replay(&stranger.url, &args(&[]), &rows(&[0]));
    assert_eq!(kinds(&run), ["transport"], "{}", run.stderr);
    assert!(
        messages(&run)[0].contains("UnknownIssuer"),
        "{:?}",
        messages(&run)
    );
}

#[test]
fn a_certificate_for_another_name_is_refused() {
    let server = TlsServer::start(&pki().for_other_name, Behaviour::OnePerConnection);
    for client in ["evented", "blocking"] {
        let run = replay(&server.url, &args(&["--http-client", client]), &rows(&[0]));
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert_eq!(kinds(&run), ["transport"], "{client}");
        let m = &messages(&run)[0];
        assert!(
            m.contains("certificate not valid for name") && m.contains("does not name the host"),
            "{client}: {m}"
        );
    }
}

/// A close-delimited stream cut mid-way by a TCP close without
/// close_notify: `incomplete`, with the tokens before the cut kept. The
/// whole stream ended the same way is `ok` (the stream's own [DONE] and
/// finish_reason say it is whole), as it is with a close_notify. The
/// blocking client (ureq) judges both alike.
#[test]
fn a_tls_stream_cut_without_close_notify_is_incomplete() {
    let cut = TlsServer::start(
        &pki().for_ip,
        Behaviour::CloseDelimited {
            close_notify: false,
            tokens: 2,
        },
    );
    for client in ["evented", "blocking"] {
        let run = replay(&cut.url, &args(&["--http-client", client]), &rows(&[0]));
        assert_eq!(kinds(&run), ["incomplete"], "{client}: {}", run.stderr);
        assert_eq!(run.results[0].chunks, 2);
        assert!(run.results[0].ttft_ms.is_some());
        assert_eq!(
            messages(&run),
            ["stream ended without [DONE] after 2 output events"]
        );
    }
    let whole = TlsServer::start(
        &pki().for_ip,
        Behaviour::CloseDelimited {
            close_notify: false,
            tokens: 4,
        },
    );
    let run = replay(
        &whole.url,
        &args(&["--http-client", "blocking"]),
        &rows(&[0]),
    );
    assert_eq!(kinds(&run), ["ok"], "blocking: {}", run.stderr);
    for close_notify in [false, true] {
        let whole = TlsServer::start(
            &pki().for_ip,
            Behaviour::CloseDelimited {
                close_notify,
                tokens: 4,
            },
        );
        let run = replay(&whole.url, &args(&[]), &rows(&[0]));
        assert_eq!(
            kinds(&run),
            ["ok"],
            "close_notify {close_notify}: {}",
            run.stderr
        );
        assert_eq!(run.results[0].chunks, 4);
    }
}

/// An https:// URL for a plaintext server (mc-mock): the handshake fails
/// as `transport`, and the message says what is likely wrong; both
/// clients say the same.
#[test]
fn a_plaintext_server_at_an_https_url_is_named() {
    let mock = Mock::start(&[]);
    let url = mock.url.replacen("http://", "https://", 1);
    for client in ["evented", "blocking"] {
        let run = replay(&url, &args(&["--http-client", client]), &rows(&[0]));
        assert_eq!(kinds(&run), ["transport"], "{client}: {}", run.stderr);
        let m = &messages(&run)[0];
        assert!(
            m.starts_with("TLS handshake failed") && m.contains("is its URL http://?"),
            "{client}: {m}"
        );
    }
}

/// A server that accepts and never answers the handshake: `--timeout`,
/// not a hang.
#[test]
fn a_silent_tls_server_times_out() {
    let server = TlsServer::start(&pki().for_ip, Behaviour::Silent);
    let started = std::time::Instant::now();
    let run = replay(&server.url, &args(&["--timeout", "1"]), &rows(&[0]));
    assert_eq!(kinds(&run), ["timeout"], "{}", run.stderr);
    assert!(started.elapsed() < Duration::from_secs(15));
}

/// The blocking client (ureq) trusts --cacert too, and so does the model
/// listing (no --model here) that both clients start with.
#[test]
fn the_blocking_client_and_the_model_listing_use_cacert() {
    let server = TlsServer::start(
        &pki().for_ip,
        Behaviour::Stream {
            ttft: Duration::from_millis(30),
            itl: Duration::from_millis(5),
        },
    );
    let ca = pki().ca_file.to_str().unwrap();
    let run = replay(
        &server.url,
        &[
            "--cacert",
            ca,
            "--http-client",
            "blocking",
            "--no-server-metrics",
        ],
        &rows(&[0, 10]),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(kinds(&run), ["ok", "ok"]);
    assert!(run.results.iter().all(|r| r.completion_tokens == Some(4)));
    // And the metrics scrape (a 404 here: noted, the run goes on).
    let run = replay(&server.url, &["--cacert", ca], &rows(&[0]));
    assert_eq!(kinds(&run), ["ok"], "{}", run.stderr);
    assert!(!run.stderr.contains("UnknownIssuer"), "{}", run.stderr);
}

#[test]
fn a_bad_cacert_is_a_usage_error_before_anything_is_sent() {
    let server = TlsServer::start(&pki().for_ip, Behaviour::OnePerConnection);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.pem");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let key_only = dir.path().join("key.pem");
    std::fs::write(
        &key_only,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    for (file, says) in [
        (&missing, "cannot read it"),
        (&empty, "no certificate in it"),
        (&key_only, "no certificate in it"),
    ] {
        let f = file.to_str().unwrap();
        let run = replay(&server.url, &["--model", "m", "--cacert", f], &rows(&[0]));
        assert_eq!(run.code, 2, "{f}: {}", run.stderr);
        assert!(run.results.is_empty());
        assert!(
            run.stderr.contains(&format!("--cacert {f}: {says}"))
                && run.stderr.contains("give a PEM file"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(server.accepts(), 0, "something was sent");
    // The CA file itself is fine.
    assert!(pki().ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    // Without a server there is nothing to trust.
    let ca = pki().ca_file.to_str().unwrap();
    let r = crate::util::run("mc-replay", &["--cacert", ca], &rows(&[0]));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r
        .stderr
        .contains("--cacert trusts an https:// server's CA: give --url"));
}

#[test]
fn help_shows_cacert_and_no_longer_says_the_evented_client_lacks_tls() {
    let help = crate::util::run_ok("mc-replay", &["--help"], "");
    assert!(help.contains("--cacert <FILE>"), "{help}");
    assert!(
        help.contains("--url https://gpu:8443 --cacert ca.pem"),
        "{help}"
    );
    assert!(!help.contains("no TLS"), "{help}");
}
