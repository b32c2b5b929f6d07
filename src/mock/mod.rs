//! `mc-mock`: a vLLM-like OpenAI-compatible test server. It answers chat and
//! text completions with made-up tokens on a configurable latency model,
//! injects faults on demand, and logs every request it receives as one JSON
//! line on stdout, so tests of a client (mc-replay) can check what was sent
//! and when.
//!
//! Module jobs: `http` serves HTTP/1.1, `request` reads a completion request,
//! `wire` shapes vLLM's JSON, `latency` times tokens, `faults` chooses and
//! describes injected failures; this file routes requests and writes the
//! answers and the log.

pub mod cache;
pub mod engine;
pub mod faults;
pub mod http;
pub mod latency;
pub mod metrics;
pub mod pacer;
pub mod request;
pub mod wire;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

use self::http::{Conn, Handler, HttpRequest, Method};
use crate::error::{Error, Result};
use faults::Faults;
use latency::{sleep_until, Latency};
use request::{Answer, Ask, Kind};
use wire::{Reply, WireUsage};

/// A vLLM-like OpenAI-compatible test server with made-up answers.
///
/// Serves POST /v1/chat/completions and /v1/completions (streaming or not,
/// in vLLM's exact format), GET /v1/models, GET /health and GET /metrics
/// (vLLM's Prometheus names: prefix-cache queries and hits in tokens,
/// requests running and waiting, KV-cache use, preemptions, and
/// `vllm:cache_config_info` with the block size; and its own
/// `mc_mock:token_send_delay_seconds`, a histogram of how late it wrote
/// each token event of a stream on the latency model (not --engine's), so
/// a benchmark can tell a slow mock from a slow client). Answers are
/// tokens " the", " of", " and", ... timed on absolute deadlines from the
/// request's arrival: token i is due at TTFT + i*ITL, with TTFT =
/// --ttft-ms + --ttft-per-1k-tokens-ms * prompt_tokens / 1000; a non-streaming
/// answer is sent when its last token is due. There is no tokenizer: prompt
/// tokens are whitespace-separated words of every message's content (text
/// parts of list contents too) or of the completions prompt (a prompt of
/// token ids counts its ids).
///
/// Answer length: with `ignore_eos: true`, exactly max_tokens (chat:
/// max_completion_tokens wins; 16 when neither is given), finish_reason
/// "length"; otherwise --eos-after kept within min_tokens..=max_tokens,
/// finish_reason "stop" when that is below max_tokens. A max_tokens above
/// 1048576 (the max_model_len in /v1/models; under --engine /v1/models
/// states the profile's max_model_len instead, the limit its engine
/// refuses a request by), a min_tokens above max_tokens, or a body that is
/// not JSON gets a 400.
///
/// Writes JSON lines on stdout, each flushed: first
/// {"event":"listening","addr":"HOST:PORT"}, then one line per request as it
/// arrives: {"event":"request","seq","unix_us","t_us","method","path",
/// "x_trace_line","x_request_id","x_session_id","prompt_tokens","max_tokens"}
/// (headers X-Trace-Line, X-Request-Id, X-Session-Id; null when absent).
/// Send stdout to a file or /dev/null when nothing reads it: a full pipe
/// would hold up the requests being logged.
///
/// Faults apply to completion requests only. --fail-rate picks which
/// requests get the faults (--status, --hang, --drop-after, --error-after,
/// --malformed-after); --no-usage applies to every request. Runs until killed.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-mock --port 8000 --ttft-ms 200 --ttft-per-1k-tokens-ms 50 --itl-ms 20
  mc-mock --port 0 --status 429 --retry-after 2 --fail-rate 0.1 --seed 3
  mc-mock --itl-ms 20 | jq -c 'select(.event == \"request\") | {seq, t_us, x_trace_line}'
  curl -N localhost:8000/v1/chat/completions -H 'content-type: application/json' \\
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,\"max_tokens\":4}'"
)]
pub struct MockArgs {
    /// Simulate an infinite prefix cache: usage reports as
    /// `prompt_tokens_details.cached_tokens` the prompt's leading blocks of
    /// --cache-block-size words that earlier requests already sent.
    #[arg(long)]
    pub prefix_cache: bool,

    /// Serve `POST /reset_prefix_cache` (empties --prefix-cache), as vLLM
    /// does only when started with VLLM_SERVER_DEV_MODE=1; without it the
    /// path is 404, as in vLLM.
    #[arg(long)]
    pub dev_mode: bool,

    /// Words per block of the simulated prefix cache.
    #[arg(long, default_value_t = 16, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub cache_block_size: u64,

    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1", value_name = "H")]
    pub host: String,

    /// Port to listen on; 0 picks a free one (see the first stdout line).
    #[arg(long, default_value_t = 8000, value_name = "P")]
    pub port: u16,

    /// Model name served (in /v1/models and in every response).
    #[arg(long, default_value = "mock-model", value_name = "NAME")]
    pub model: String,

    #[command(flatten)]
    pub latency: Latency,

    /// Answer length when the request does not set ignore_eos.
    #[arg(long, default_value_t = 64, value_name = "N")]
    pub eos_after: u64,

    #[command(flatten)]
    pub faults: Faults,

    /// Time answers with the engine model in real time instead of the
    /// latency flags: requests queue into one simulated vLLM-style engine
    /// (batching, prefix cache, preemption; see --engine-profile), tokens
    /// stream when their step ends, usage reports cached_tokens.
    #[arg(long, conflicts_with = "prefix_cache")]
    pub engine: bool,

    #[command(flatten)]
    pub engine_model: crate::engine::EngineArgs,

    /// Threads that send the tokens of streams without mid-stream faults
    /// on their deadlines (each stream on one of them, in turn).
    #[arg(long, default_value_t = pacer::DEFAULT_THREADS, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub pacer_threads: u16,

    /// Connections served at once (a thread each); more wait in the listen
    /// queue until one closes, as at a real server's connection limit.
    /// 0: as many as this system allows threads and file descriptors for
    /// (a fifth of vm.max_map_count, half of the open-file limit): past
    /// that a new thread cannot start and the process would abort.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_connections: usize,

    /// Close a kept-alive connection that has waited this long for its
    /// next request, as vLLM's server does after 5 s
    /// (VLLM_HTTP_TIMEOUT_KEEP_ALIVE); 0 never closes one.
    #[arg(long, default_value_t = 5.0, value_name = "S",
          value_parser = crate::options::non_negative_seconds)]
    pub keep_alive_timeout_s: f64,
}

impl MockArgs {
    /// Words per simulated cache block; 0 without --prefix-cache.
    pub fn cache_block(&self) -> u64 {
        if self.prefix_cache {
            self.cache_block_size
        } else {
            0
        }
    }
}

/// Serves until the process is killed; returns only if it cannot start.
/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-mock";

/// Connections the kernel queues for `accept` (capped by the system's
/// `somaxconn`, 4096 on current Linux).
const ACCEPT_QUEUE: i32 = 4096;

/// A listening socket on the first address `host` resolves to, with a
/// deep accept queue: std's 128 overflows when a client opens a thousand
/// connections within a second while the accept thread waits for a core,
/// and every dropped SYN costs its client a second.
fn listen(host: &str, port: u16) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    use std::net::ToSocketAddrs;
    let addr = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address found"))?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // As std does: a restarted mock may take its port back at once.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(ACCEPT_QUEUE)?;
    Ok(socket.into())
}

pub fn run(args: &MockArgs) -> Result<()> {
    // The server owns its options for as long as it serves.
    let opts = args.clone();
    let opts_pacer_threads = opts.pacer_threads;
    let opts_max_connections = opts.max_connections;
    let opts_keep_alive = opts.keep_alive_timeout_s;
    opts.faults.validate().map_err(Error::usage)?;
    // The profile is checked before the socket is announced: a client
    // (or a script waiting for `listening`) must not see a server that is
    // about to refuse its own options.
    let params = opts
        .engine
        .then(|| opts.engine_model.params())
        .transpose()?;
    let listener = listen(&opts.host, opts.port)
        .with_context(|| format!("cannot listen on {}:{}", opts.host, opts.port))?;
    let addr = listener.local_addr()?;
    let log = Log::new(Box::new(io::stdout()));
    log.listening(addr);
    eprintln!("{TOOL}: serving {} on http://{addr}", opts.model);
    let mut server = Server::new(opts, log);
    if let Some(params) = params {
        eprintln!(
            "mc-mock: answers timed by the engine model {} in real time",
            params.profile.name
        );
        server.engine_block = params.block_size;
        server.max_model_len = params.max_model_len.unwrap_or(request::MAX_MODEL_LEN);
        server.engine = Some(engine::LiveEngine::start(params, server.start)?);
    }
    let pacers = pacer::Pacer::start(usize::from(opts_pacer_threads))
        .context("cannot start the pacer threads")?;
    server.pacer = Some(pacers);
    let cap = connection_cap(opts_max_connections);
    // Two descriptors a streaming connection (see `connection_cap`),
    // made room for now rather than by the accept thread mid-run.
    crate::oslimit::reserve_descriptors((cap.max as u64).saturating_mul(2).saturating_add(64));
    let idle = (opts_keep_alive > 0.0).then(|| std::time::Duration::from_secs_f64(opts_keep_alive));
    http::serve(listener, server, cap, idle)?;
    Ok(())
}

/// `--max-connections`, or (0) the most connection threads this system
/// allows: four memory maps a thread, with a fifth to spare for the heap
/// and the rest; two descriptors a streaming connection (its socket and
/// the pacer's duplicate), less a few for the process itself. Raises the
/// open-file soft limit to the hard one first.
fn connection_cap(asked: usize) -> http::Cap {
    let files = crate::oslimit::raise_open_files();
    if asked > 0 {
        return http::Cap {
            max: asked,
            why: "--max-connections",
        };
    }
    let by_maps = crate::oslimit::max_map_count().map(|n| n / 5);
    let by_files = files.map(|n| n.saturating_sub(64) / 2);
    let (max, why) = match (by_maps, by_files) {
        (Some(m), Some(f)) if f < m => (f, "half the open-file limit (ulimit -n)"),
        (Some(m), _) => (m, "a fifth of vm.max_map_count"),
        (None, Some(f)) => (f, "half the open-file limit (ulimit -n)"),
        (None, None) => (usize::MAX as u64, ""),
    };
    http::Cap {
        max: usize::try_from(max).unwrap_or(usize::MAX).max(16),
        why,
    }
}

/// The request log on stdout: JSON lines, each flushed as written.
struct Log {
    inner: Mutex<LogState>,
}

struct LogState {
    out: Box<dyn Write + Send>,
    /// Numbered under the lock, so `seq` increases down the log.
    next_seq: u64,
}

#[derive(Serialize)]
struct Listening {
    event: &'static str,
    addr: String,
}

#[derive(Serialize)]
struct RequestLine<'a> {
    event: &'static str,
    seq: u64,
    unix_us: u64,
    t_us: u64,
    method: &'a str,
    path: &'a str,
    x_trace_line: Option<&'a str>,
    x_request_id: Option<&'a str>,
    x_session_id: Option<&'a str>,
    prompt_tokens: Option<u64>,
    max_tokens: Option<u64>,
}

impl Log {
    fn new(out: Box<dyn Write + Send>) -> Self {
        Log {
            inner: Mutex::new(LogState { out, next_seq: 0 }),
        }
    }

    fn listening(&self, addr: SocketAddr) {
        let line = Listening {
            event: "listening",
            addr: addr.to_string(),
        };
        let mut state = self.lock();
        write_line(&mut state.out, &line);
    }

    /// Logs a request that has arrived; returns its sequence number.
    fn request(&self, req: &HttpRequest, start: Instant, ask: Option<&Ask>) -> u64 {
        let unix_us = req
            .arrival_wall
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| micros(d.as_micros()));
        let t_us = micros(req.arrival.saturating_duration_since(start).as_micros());
        let mut state = self.lock();
        let seq = state.next_seq;
        state.next_seq += 1;
        let line = RequestLine {
            event: "request",
            seq,
            unix_us,
            t_us,
            method: req.method.as_str(),
            path: &req.target,
            x_trace_line: req.header("x-trace-line"),
            x_request_id: req.header("x-request-id"),
            x_session_id: req.header("x-session-id"),
            prompt_tokens: ask.map(|a| a.prompt_tokens),
            max_tokens: ask.and_then(|a| a.max_tokens),
        };
        write_line(&mut state.out, &line);
        seq
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogState> {
        // A thread that panicked mid-write leaves at worst a torn line; the
        // log is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Writes one JSON line and flushes; errors are ignored because a closed
/// stdout must not stop the server.
fn write_line<T: Serialize>(out: &mut Box<dyn Write + Send>, value: &T) {
    if let Ok(mut line) = serde_json::to_vec(value) {
        line.push(b'\n');
        let _ = out.write_all(&line).and_then(|()| out.flush());
    }
}

fn micros(us: u128) -> u64 {
    u64::try_from(us).unwrap_or(u64::MAX)
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Where a request goes; a completion request's body is read on the way.
enum Route {
    Models,
    ResetPrefixCache,
    Health,
    Metrics,
    Complete(Kind, Result<Ask, String>),
    NotFound,
    WrongMethod(&'static str),
}

fn route(req: &HttpRequest, cache_block: u64) -> Route {
    let (allowed, kind) = match req.path() {
        "/v1/models" => (Method::GET, None),
        "/health" => (Method::GET, None),
        "/metrics" => (Method::GET, None),
        "/v1/chat/completions" => (Method::POST, Some(Kind::Chat)),
        "/v1/completions" => (Method::POST, Some(Kind::Completion)),
        "/reset_prefix_cache" => (Method::POST, None),
        _ => return Route::NotFound,
    };
    if req.method != allowed {
        // The `Allow` header's value.
        return Route::WrongMethod(if allowed == Method::GET {
            "GET"
        } else {
            "POST"
        });
    }
    match kind {
        Some(kind) => Route::Complete(kind, request::parse(kind, &req.body, cache_block)),
        None if req.path() == "/health" => Route::Health,
        None if req.path() == "/metrics" => Route::Metrics,
        None if req.path() == "/reset_prefix_cache" => Route::ResetPrefixCache,
        None => Route::Models,
    }
}

struct Server {
    opts: MockArgs,
    start: Instant,
    started: SystemTime,
    /// Makes response ids differ between runs.
    nonce: u64,
    log: Log,
    cache: cache::PrefixCache,
    /// `/metrics` of the latency model (`--engine` has the engine's).
    counters: metrics::Counters,
    /// `--engine`: the shared engine model, and its block size in words.
    engine: Option<std::sync::Arc<engine::LiveEngine>>,
    engine_block: u64,
    /// The context length /v1/models states: under `--engine` the
    /// profile's `max_model_len` (the limit the engine refuses requests
    /// by; a client sizes its prompts by what this says), else the mock's
    /// own bound.
    max_model_len: u64,
    /// Sends the tokens of plain streams (see `pacer`); without it every
    /// stream is sent by its connection thread.
    pacer: Option<pacer::Pacer>,
    /// How late the connection threads wrote the token events they sent.
    send_delay: metrics::SendDelay,
}

impl Server {
    fn new(opts: MockArgs, log: Log) -> Self {
        let opts_cache_block = opts.cache_block();
        let started = SystemTime::now();
        let nonce = started
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Server {
            opts,
            start: Instant::now(),
            started,
            nonce,
            log,
            cache: cache::PrefixCache::new(opts_cache_block),
            counters: metrics::Counters::default(),
            engine: None,
            engine_block: 0,
            max_model_len: request::MAX_MODEL_LEN,
            pacer: None,
            send_delay: metrics::SendDelay::default(),
        }
    }

    /// Words per hashed prompt block: the engine's block, the simulated
    /// cache's, or 0 (no hashing).
    fn hash_block(&self) -> u64 {
        if self.engine.is_some() {
            self.engine_block
        } else {
            self.opts.cache_block()
        }
    }

    /// The Prometheus exposition of the cache and queue now.
    fn metrics(&self) -> String {
        let created = self
            .started
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let (cache, load) = match &self.engine {
            Some(e) => {
                let l = e.load();
                let cache = metrics::CacheConfig {
                    block_size: self.engine_block,
                    prefix_caching: true,
                    kv_blocks: Some(l.kv_blocks),
                };
                let load = metrics::Load {
                    queries: l.queried_tokens,
                    hits: l.cached_tokens,
                    running: l.running,
                    waiting: l.waiting,
                    kv_usage: l.kv_usage,
                    preemptions: l.preemptions,
                };
                (cache, load)
            }
            None => {
                let cache = metrics::CacheConfig {
                    block_size: self.opts.cache_block_size,
                    prefix_caching: self.opts.prefix_cache,
                    kv_blocks: None,
                };
                (cache, self.counters.load())
            }
        };
        let mut out = metrics::render(&self.opts.model, cache, load, created);
        if let Some(e) = &self.engine {
            e.render_histograms(&mut out, &self.opts.model, created);
        }
        let pacers = self.pacer.iter().flat_map(pacer::Pacer::delays);
        metrics::render_send_delay(&mut out, pacers.chain([&self.send_delay]));
        out
    }

    fn error(&self, conn: &mut Conn, status: u16, message: &str) -> io::Result<()> {
        self.error_with(conn, status, message, &[])
    }

    fn error_with(
        &self,
        conn: &mut Conn,
        status: u16,
        message: &str,
        headers: &[(&str, &str)],
    ) -> io::Result<()> {
        let body = wire::error_body(message, status)?;
        conn.respond(status, Some("application/json"), headers, &body)
    }

    fn complete(
        &self,
        conn: &mut Conn,
        req: &HttpRequest,
        kind: Kind,
        ask: &Ask,
        seq: u64,
    ) -> io::Result<()> {
        let answer = match ask.answer(self.opts.eos_after) {
            Ok(a) => a,
            Err(msg) => return self.error(conn, 400, &msg),
        };
        let faults = &self.opts.faults;
        let faulty = faults.hits(seq);
        if faulty {
            if let Some(status) = faults.status {
                let retry = faults.retry_after.to_string();
                let headers: &[(&str, &str)] = if status == 429 {
                    &[("retry-after", &retry)]
                } else {
                    &[]
                };
                return self.error_with(conn, status, "mc-mock injected error", headers);
            }
            if faults.hang {
                conn.wait_for_close();
                return Ok(());
            }
        }
        let running = std::cell::RefCell::new(Some(self.counters.running()));
        // Looked up (and the prompt's blocks stored) as the request arrives.
        let cached = self.cache.cached_tokens(&ask.prefix_hashes);
        if self.opts.prefix_cache {
            // As vLLM: only a cache that is on counts its lookups.
            self.counters.lookup(ask.prompt_tokens, cached);
        }
        let ticket = match &self.engine {
            None => None,
            Some(e) => {
                match e.submit(
                    req.arrival,
                    ask.prefix_hashes.clone(),
                    ask.prompt_tokens,
                    ask.max_tokens.unwrap_or(answer.tokens),
                    answer.tokens,
                ) {
                    Ok(t) => Some(std::cell::RefCell::new(t)),
                    Err(msg) => return self.error(conn, 400, &msg),
                }
            }
        };
        let reply = Reply::new(
            kind,
            self.nonce ^ seq,
            unix_secs(req.arrival_wall),
            &self.opts.model,
        );
        let job = Job {
            reply,
            ask,
            answer,
            arrival: req.arrival,
            latency: &self.opts.latency,
            faults: if faulty { Some(faults) } else { None },
            usage: !faults.no_usage,
            cached,
            ticket,
            running,
            pacer: self.pacer.as_ref(),
            send_delay: &self.send_delay,
        };
        if ask.stream {
            job.stream(conn)
        } else {
            job.whole(conn)
        }
    }
}

impl Handler for Server {
    fn request(&self, conn: &mut Conn, req: HttpRequest) -> io::Result<()> {
        let route = route(&req, self.hash_block());
        let ask = match &route {
            Route::Complete(_, Ok(ask)) => Some(ask),
            _ => None,
        };
        let seq = self.log.request(&req, self.start, ask);
        match route {
            Route::Models => {
                let body = wire::models(
                    &self.opts.model,
                    unix_secs(self.started),
                    self.max_model_len,
                )?;
                conn.respond(200, Some("application/json"), &[], &body)
            }
            Route::Health => conn.respond(200, None, &[], b""),
            Route::ResetPrefixCache if !self.opts.dev_mode => self.error(conn, 404, "Not Found"),
            Route::ResetPrefixCache if self.engine.is_some() => {
                self.error(conn, 501, "mc-mock --engine cannot reset its prefix cache")
            }
            Route::ResetPrefixCache => {
                self.cache.clear();
                conn.respond(200, None, &[], b"")
            }
            Route::Metrics => conn.respond(
                200,
                Some("text/plain; version=0.0.4; charset=utf-8"),
                &[],
                self.metrics().as_bytes(),
            ),
            Route::NotFound => self.error(conn, 404, "Not Found"),
            Route::WrongMethod(allowed) => {
                self.error_with(conn, 405, "Method Not Allowed", &[("allow", allowed)])
            }
            Route::Complete(kind, Ok(ask)) => self.complete(conn, &req, kind, &ask, seq),
            Route::Complete(_, Err(msg)) => self.error(conn, 400, &msg),
        }
    }

    fn reject(&self, conn: &mut Conn, status: u16, message: &str) -> io::Result<()> {
        self.error(conn, status, message)
    }
}

/// One completion being answered.
struct Job<'a> {
    reply: Reply<'a>,
    ask: &'a Ask,
    answer: Answer,
    arrival: Instant,
    latency: &'a Latency,
    /// The faults, when this request was chosen for them.
    faults: Option<&'a Faults>,
    usage: bool,
    /// Prompt tokens the prefix cache already held.
    cached: u64,
    /// `--engine`: the request's place in the engine, which times it.
    ticket: Option<std::cell::RefCell<engine::Ticket>>,
    /// Counts the request as running until its last token is made. As in
    /// vLLM, it leaves the running set before its last bytes are sent, so
    /// a client that scrapes `/metrics` after its answer sees it gone.
    running: std::cell::RefCell<Option<metrics::Running>>,
    pacer: Option<&'a pacer::Pacer>,
    /// Where a connection thread notes how late it wrote a token event.
    send_delay: &'a metrics::SendDelay,
}

/// What a stream does after its faults had their say.
enum Flow {
    Go,
    /// End properly now: `[DONE]` and the end of the body.
    Done,
    /// The connection was cut.
    Cut,
}

impl Job<'_> {
    /// The last token is made: the request leaves the running gauge.
    fn finished(&self) {
        self.running.borrow_mut().take();
    }

    fn deadline(&self, i: u64) -> Instant {
        self.latency
            .deadline(self.arrival, self.ask.prompt_tokens, i)
    }

    /// Waits until output event `i` is due: its latency-model deadline,
    /// or (`--engine`) the end of the step that made the token.
    fn pace(&self, i: u64) {
        match &self.ticket {
            Some(t) => t.borrow_mut().wait_token(i),
            None => sleep_until(self.deadline(i)),
        }
    }

    fn usage(&self) -> Option<WireUsage> {
        let cached = match &self.ticket {
            Some(t) => t.borrow_mut().cached(),
            None => self.cached,
        };
        self.usage
            .then(|| WireUsage::new(self.ask.prompt_tokens, self.answer.tokens, cached))
    }

    /// The SSE stream: role chunk at once (chat), one event per token on its
    /// deadline, finish reason on the last, usage if asked, `[DONE]`.
    fn stream(&self, conn: &mut Conn) -> io::Result<()> {
        let mut out = conn.start_stream(200, "text/event-stream")?;
        if self.reply.kind == Kind::Chat {
            out.send(&wire::sse(&self.reply.role_chunk()?))?;
        }
        let n = self.answer.tokens;
        let finish = self.answer.finish.as_str();
        // A 0-token answer still needs an event to carry its finish reason.
        let events = n.max(1);
        // `faults` is set for every chosen request, even with no fault
        // that acts mid-stream: those streams are plain too.
        let plain = !self.faults.is_some_and(Faults::any_in_stream) && self.ticket.is_none();
        if let Some(pacer) = self.pacer.filter(|_| plain) {
            return self.paced(pacer, out);
        }
        for i in 0..events {
            self.pace(i);
            match self.inject(&mut out, i)? {
                Flow::Go => {}
                Flow::Done => return end(out),
                Flow::Cut => return Ok(()),
            }
            let text = if n == 0 { "" } else { wire::token_text(i) };
            let last = (i + 1 == events).then_some(finish);
            if last.is_some() {
                self.finished();
            }
            let chunk = wire::sse(&self.reply.token_chunk(text, last)?);
            if self.ticket.is_none() {
                let late = Instant::now().saturating_duration_since(self.deadline(i));
                self.send_delay.record(late.as_micros() as u64);
            }
            out.send(&chunk)?;
        }
        if n > 0 {
            match self.inject(&mut out, n)? {
                Flow::Go => {}
                Flow::Done => return end(out),
                Flow::Cut => return Ok(()),
            }
        }
        if self.ask.include_usage {
            if let Some(usage) = self.usage() {
                out.send(&wire::sse(&self.reply.usage_chunk(usage)?))?;
            }
        }
        end(out)
    }

    /// The token events of a stream without faults, on the latency model's
    /// deadlines, sent by the pacer: the same bytes as the loop in
    /// [`Job::stream`], framed here once (tokens repeat every
    /// [`wire::TOKEN_CYCLE`]), the last event with the usage, `[DONE]` and
    /// the body's end in one write.
    fn paced(&self, pacer: &pacer::Pacer, mut out: http::Stream<'_>) -> io::Result<()> {
        let n = self.answer.tokens;
        let events = n.max(1);
        let mut cycle = Vec::new();
        for i in 0..(events - 1).min(wire::TOKEN_CYCLE) {
            cycle.push(out.frame(&wire::sse(
                &self.reply.token_chunk(wire::token_text(i), None)?,
            )));
        }
        let text = if n == 0 {
            ""
        } else {
            wire::token_text(events - 1)
        };
        let finish = Some(self.answer.finish.as_str());
        let mut last = out.frame(&wire::sse(&self.reply.token_chunk(text, finish)?));
        if self.ask.include_usage {
            if let Some(usage) = self.usage() {
                last.extend(out.frame(&wire::sse(&self.reply.usage_chunk(usage)?)));
            }
        }
        last.extend(out.frame(wire::DONE));
        last.extend_from_slice(out.end_frame());
        if self.deadline(events - 1) <= Instant::now() {
            // All of it is due (a zero-latency mock): one write from here.
            // Handing it to a pacer would only add two thread switches,
            // and at 10,000 requests a second the waiting connection
            // threads piled up by thousands.
            self.finished();
            let now = Instant::now();
            for i in 0..events {
                let late = now.saturating_duration_since(self.deadline(i));
                self.send_delay.record(late.as_micros() as u64);
            }
            let mut all = Vec::new();
            for i in 0..events - 1 {
                all.extend_from_slice(&cycle[(i % wire::TOKEN_CYCLE) as usize]);
            }
            all.extend_from_slice(&last);
            return out.send_framed(&all);
        }
        pacer.stream(pacer::Paced {
            sock: out.socket()?,
            latency: *self.latency,
            arrival: self.arrival,
            prompt_tokens: self.ask.prompt_tokens,
            events,
            cycle,
            last,
            running: self.running.borrow_mut().take(),
        })
    }

    /// Sends the stream faults due after `count` tokens.
    fn inject(&self, out: &mut http::Stream<'_>, count: u64) -> io::Result<Flow> {
        let Some(faults) = self.faults else {
            return Ok(Flow::Go);
        };
        let due = faults.at(count);
        if due.malformed {
            out.send(wire::MALFORMED)?;
        }
        if due.error {
            let body = wire::error_body("mc-mock injected stream error", 500)?;
            out.send(&wire::sse(&body))?;
            return Ok(Flow::Done);
        }
        if due.drop {
            out.abort();
            return Ok(Flow::Cut);
        }
        Ok(Flow::Go)
    }

    /// A non-streaming response, sent when its last token is due.
    fn whole(&self, conn: &mut Conn) -> io::Result<()> {
        let n = self.answer.tokens;
        let last = n.max(1) - 1;
        if let Some(drop_after) = self.faults.and_then(|f| f.drop_after) {
            if drop_after <= n {
                self.pace(drop_after.min(last));
                conn.abort();
                return Ok(());
            }
        }
        self.pace(last);
        self.finished();
        let body = self.reply.full(
            &wire::answer_text(n),
            self.answer.finish.as_str(),
            self.usage(),
        )?;
        conn.respond(200, Some("application/json"), &[], &body)
    }
}

/// `[DONE]`, then the end of the chunked body.
fn end(mut out: http::Stream<'_>) -> io::Result<()> {
    out.send(wire::DONE)?;
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str, body: &str) -> HttpRequest {
        HttpRequest {
            method: method.parse().unwrap(),
            target: target.into(),
            headers: self::http::HeaderMap::new(),
            body: body.into(),
            arrival: Instant::now(),
            arrival_wall: SystemTime::now(),
        }
    }

    #[test]
    fn routes() {
        assert!(matches!(
            route(&req("GET", "/v1/models?x", ""), 0),
            Route::Models
        ));
        assert!(matches!(
            route(&req("GET", "/health", ""), 0),
            Route::Health
        ));
        assert!(matches!(
            route(&req("GET", "/metrics", ""), 0),
            Route::Metrics
        ));
        assert!(matches!(
            route(&req("GET", "/v1/completions", ""), 0),
            Route::WrongMethod("POST")
        ));
        assert!(matches!(
            route(&req("POST", "/nope", ""), 0),
            Route::NotFound
        ));
        assert!(matches!(
            route(&req("POST", "/v1/chat/completions", "{"), 0),
            Route::Complete(Kind::Chat, Err(_))
        ));
    }

    #[test]
    fn log_lines_count_up_and_survive_a_closed_writer() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
        }
        let log = Log::new(Box::new(Closed));
        let req = req("GET", "/health", "");
        assert_eq!(log.request(&req, Instant::now(), None), 0);
        assert_eq!(log.request(&req, Instant::now(), None), 1);
    }
}
