//! hyper's HTTP/1.1 client on one tokio thread, sending the streaming
//! requests `scripts/bench-replay.sh` sends in its streams rows: REQUESTS
//! chat completions, one every 1 / RATE s on an open-loop schedule, each
//! asking for exactly TOKENS streamed tokens, over kept-alive connections
//! (a new one whenever none is idle, as mc-replay does with
//! `--max-connections 0`). One thread, as mc-replay runs one event loop on
//! a 2-core machine.
//!
//! It does with the answer what a minimal client must: reads every frame
//! as it arrives, counts the `data: {` events (role, tokens, usage) and
//! notes when the first token event came. No SSE or JSON parsing, no
//! result lines: so its CPU a token is hyper's and tokio's cost of
//! delivering the bytes, to set beside `examples/read_floor.rs` (the same
//! with mio and nothing else) and mc-replay (everything).
//!
//!   hyper-compare http://127.0.0.1:PORT RATE REQUESTS TOKENS
//!
//! Prints one JSON line: requests, ok, events, wall seconds, the achieved
//! send rate, schedule lag p99 and TTFT p50 / p99 in ms.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p) as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [url, rate, requests, tokens] = &a[..] else {
        eprintln!("usage: hyper-compare http://HOST:PORT RATE REQUESTS TOKENS");
        std::process::exit(2);
    };
    let rate: f64 = rate.parse().expect("RATE");
    let n: usize = requests.parse().expect("REQUESTS");
    let tokens: u64 = tokens.parse().expect("TOKENS");
    let uri: hyper::Uri = format!("{}/v1/chat/completions", url.trim_end_matches('/'))
        .parse()
        .expect("URL");
    let body = Bytes::from(format!(
        "{{\"model\":\"mock-model\",\"messages\":[{{\"role\":\"user\",\"content\":\"w w w w w w w w\"}}],\
         \"stream\":true,\"max_tokens\":{tokens},\"min_tokens\":{tokens},\"ignore_eos\":true}}"
    ));
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(usize::MAX)
        .build_http();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    let mut lags = Vec::with_capacity(n);
    let mut last_send = Duration::ZERO;
    for i in 0..n {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(due.into()).await;
        let now = Instant::now();
        lags.push((now - due).as_secs_f64() * 1e3);
        last_send = now - start;
        let (client, uri, body) = (client.clone(), uri.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let req = Request::post(uri)
                .header("content-type", "application/json")
                .body(Full::new(body))
                .expect("request");
            let sent = Instant::now();
            let resp = client.request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let finder = memchr::memmem::Finder::new(b"data: {");
            let mut body = resp.into_body();
            let (mut events, mut ttft) = (0u64, None);
            while let Some(frame) = body.frame().await {
                let frame = frame.ok()?;
                if let Some(data) = frame.data_ref() {
                    events += finder.find_iter(data).count() as u64;
                    // The first event is the role chunk; the next is a token.
                    if ttft.is_none() && events >= 2 {
                        ttft = Some(sent.elapsed().as_secs_f64() * 1e3);
                    }
                }
            }
            Some((events, ttft))
        }));
    }
    let (mut ok, mut events, mut ttfts) = (0usize, 0u64, Vec::new());
    for t in tasks {
        if let Ok(Some((e, ttft))) = t.await {
            ok += 1;
            events += e;
            ttfts.extend(ttft);
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let achieved = if last_send.is_zero() {
        0.0
    } else {
        (n - 1) as f64 / last_send.as_secs_f64()
    };
    println!(
        "{{\"requests\":{n},\"ok\":{ok},\"events\":{events},\"wall_s\":{wall:.3},\"achieved_rps\":{achieved:.1},\
         \"lag_p99_ms\":{:.3},\"ttft_p50_ms\":{:.2},\"ttft_p99_ms\":{:.2}}}",
        pct(&mut lags, 0.99),
        pct(&mut ttfts.clone(), 0.5),
        pct(&mut ttfts, 0.99)
    );
}
