//! What a run on a real server needs before its first request: the HTTP
//! agent, the model (`--model`, or the first the server lists), the prompt
//! builder (checked against `--tokenizer`), and the target itself.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::body::BodyOptions;
use super::client::Clock;
use super::evented::{Config, ConnCap, EventedTarget};
use super::prompt::{Synth, Vocab};
use super::request::RequestBuilder;
use super::tls::{self, CaCerts, Tls};
use super::wire::Endpoint;
use super::{HttpTarget, ServerTarget};
use crate::error::Result;
use crate::replay::error::{ModelsError, ReplayError};
use crate::replay::options::HttpClient;
use crate::replay::outcome::RunId;
use crate::replay::trace::{Content, Trace, Turn};

/// How a run on a server builds and sends its requests: the options, as
/// the plan (`replay::plan`) checked them.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    pub endpoint: super::body::Endpoint,
    /// `--model`; `None`: the first the server lists.
    pub model: Option<String>,
    pub api_key: Option<String>,
    /// `--header`s.
    pub headers: Vec<(String, String)>,
    pub extra_body: Option<serde_json::Map<String, Value>>,
    /// Not `--no-exact-output`.
    pub exact_output: bool,
    pub tokenizer: Option<String>,
    /// Per request.
    pub timeout: Duration,
    pub reset_prefix_cache: bool,
    pub http_client: HttpClient,
    /// `--max-connections`: `None` when not given (a cap grown on demand),
    /// 0 for none.
    pub max_connections: Option<usize>,
    /// 0: `default_loops`.
    pub event_loops: u64,
    pub read_coalesce: Duration,
    pub max_event_bytes: usize,
}

/// A server found and a run's requests ready to build; the target is
/// made last ([`Server::target`]), because its clock starts the run.
pub struct Server {
    pub model: String,
    pub run_id: RunId,
    /// `--url` as `…/v1`.
    pub base: String,
    /// `--header`s and the API key, for the metrics scrape too.
    pub headers: Vec<(String, String)>,
    builder: RequestBuilder,
    agent: ureq::Agent,
    cacert: Option<CaCerts>,
}

/// Resolves the model and prepares the run's requests for `url`;
/// `cacert`: `--cacert`'s roots, for every https:// connection.
pub fn connect(
    opts: &ServerOptions,
    trace: &Trace,
    block_size: u64,
    seed: u64,
    url: &str,
    cacert: Option<&CaCerts>,
) -> Result<Server> {
    let synth = synthesizer(trace, opts.tokenizer.as_deref(), block_size, seed)?;
    let agent = agent(opts.timeout, cacert);
    let base = base_url(url);
    let mut headers = opts.headers.clone();
    if let Some(key) = opts.api_key.as_deref().filter(|k| !k.is_empty()) {
        headers.push(("authorization".into(), format!("Bearer {key}")));
    }
    let model = match &opts.model {
        // With --model nothing else would reach the server before the
        // schedule starts: one connection now names a dead server at once.
        Some(m) => {
            check_reachable(url)?;
            m.clone()
        }
        None => discover_model(&models_agent(cacert), &base, &headers)?,
    };
    if opts.reset_prefix_cache {
        reset_prefix_cache(&models_agent(cacert), &base, &headers)?;
    }
    let run_id = RunId::from_clock();
    let builder = RequestBuilder {
        synth,
        body: BodyOptions {
            endpoint: opts.endpoint,
            model: model.clone(),
            exact_output: opts.exact_output,
            extra_body: opts.extra_body.clone(),
        },
        headers: headers.clone(),
        run_id,
    };
    Ok(Server {
        model,
        run_id,
        base,
        headers,
        builder,
        agent,
        cacert: cacert.cloned(),
    })
}

impl Server {
    /// The target; its clock (the run's zero) starts now. The evented
    /// client (http:// and https://) unless `--http-client blocking`.
    pub fn target(
        self,
        opts: &ServerOptions,
        trace: &Arc<Trace>,
        stop: Arc<AtomicBool>,
    ) -> Result<ServerTarget> {
        self.target_on(opts, trace, stop, None)
    }

    /// The request ids carry `id` (several servers of one run share the
    /// first's, `--url A,B,…`).
    pub fn set_run_id(&mut self, id: RunId) {
        self.run_id = id;
        self.builder.run_id = id;
    }

    /// The target on `clock`, one that already runs (several servers of
    /// one run share one clock: `--url A,B,…`), or `None`: a clock started
    /// once the descriptors are reserved.
    pub fn target_on(
        self,
        opts: &ServerOptions,
        trace: &Arc<Trace>,
        stop: Arc<AtomicBool>,
        clock: Option<Clock>,
    ) -> Result<ServerTarget> {
        // Thousands of requests in flight are thousands of sockets: the
        // hard limit, not a shell's default soft 1,024, is what caps them.
        crate::oslimit::raise_open_files();
        // A connection per request in flight at most: no more than the
        // trace's rows, or --max-connections. Grown now, before the clock
        // starts, not by a stalled event loop mid-run (`oslimit`).
        let cap = ConnCap::from_option(opts.max_connections, trace.turns.len());
        let most = cap
            .most()
            .map_or(trace.turns.len(), |n| n.min(trace.turns.len()));
        crate::oslimit::reserve_descriptors(most as u64 + 64);
        let url = format!("{}{}", self.base, opts.endpoint.path());
        let max_event_bytes = opts.max_event_bytes;
        // `--url` was checked to be http(s) with a host, so this parses.
        let evented = match opts.http_client {
            HttpClient::Blocking => None,
            HttpClient::Auto | HttpClient::Evented => Endpoint::parse(&url),
        };
        let clock = clock.unwrap_or(Clock {
            start: Instant::now(),
        });
        let Some(endpoint) = evented else {
            if opts.http_client != HttpClient::Blocking {
                eprintln!("mc-replay: {url} is not an http(s) URL the evented client can use; using the blocking client");
            }
            return Ok(ServerTarget::Blocking(HttpTarget::new(
                trace.clone(),
                self.builder,
                url,
                self.agent,
                clock,
                stop,
                max_event_bytes,
            )));
        };
        // Made once for the run: every connection's session shares it (and
        // its cache of sessions to resume).
        let tls = if endpoint.tls {
            let t = Tls::new(&endpoint.host, self.cacert.as_ref())
                .map_err(|e| ReplayError::Client(e.into()))?;
            Some(t)
        } else {
            None
        };
        let cfg = Config {
            tls,
            endpoint,
            user_agent: USER_AGENT.into(),
            timeout: opts.timeout,
            max_connections: cap,
            loops: match opts.event_loops {
                0 => default_loops(),
                n => n as usize,
            },
            max_event_bytes,
            coalesce: opts.read_coalesce,
        };
        let target = EventedTarget::new(trace.clone(), self.builder, cfg, clock, stop)
            .map_err(|e| ReplayError::Client(e.into()))?;
        Ok(ServerTarget::Evented(target))
    }
}

/// `user-agent` of every request.
const USER_AGENT: &str = concat!("mc-replay/", env!("CARGO_PKG_VERSION"));

/// Half the CPUs, between 1 and 4: the loops share the machine with the
/// scheduler, the result writer and, often, the server itself.
fn default_loops() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpus / 2).clamp(1, 4)
}

/// The prompt builder; with a tokenizer, its words are checked to be one
/// token each and sample prompts are re-encoded to the intended length.
pub fn synthesizer(
    trace: &Trace,
    tokenizer: Option<&str>,
    block_size: u64,
    seed: u64,
) -> Result<Synth> {
    let Some(spec) = tokenizer else {
        return Ok(Synth::new(Vocab::builtin(), seed, block_size));
    };
    eprintln!(
        "mc-replay: tokenizer {spec}: loading it and checking that prompts built for it \
         have their exact lengths (this may take a while)"
    );
    let resolved = crate::tokenizer::resolve(spec).map_err(|e| ReplayError::Tokenizer {
        spec: spec.to_string(),
        source: e.into(),
    })?;
    let vocab = Vocab::for_tokenizer(&resolved.tokenizer)?;
    let synth = Synth::new(vocab, seed, block_size);
    let check = prompt_check(trace, &synth, &resolved.tokenizer)?;
    eprintln!(
        "mc-replay: tokenizer {}: {} prompts re-encoded, largest difference {} tokens ({:.3}%)",
        resolved.source, check.prompts, check.max_abs, check.max_pct
    );
    if check.max_pct > 1.0 {
        return Err(ReplayError::TokenizerMismatch {
            pct: check.max_pct,
            line: check.worst_line,
        }
        .into());
    }
    Ok(synth)
}

struct PromptCheck {
    prompts: u64,
    max_abs: u64,
    max_pct: f64,
    worst_line: u64,
}

/// Re-encodes the built prompts of up to 64 rows (and at most about 2 M
/// tokens), including the longest row.
fn prompt_check(trace: &Trace, synth: &Synth, tok: &tokenizers::Tokenizer) -> Result<PromptCheck> {
    let mut rows: Vec<&Turn> = trace
        .turns
        .iter()
        .filter(|t| matches!(t.content, Content::Synth))
        .take(64)
        .collect();
    if let Some(longest) = trace
        .turns
        .iter()
        .filter(|t| matches!(t.content, Content::Synth))
        .max_by_key(|t| t.input_length)
    {
        rows.push(longest);
    }
    let mut c = PromptCheck {
        prompts: 0,
        max_abs: 0,
        max_pct: 0.0,
        worst_line: 0,
    };
    let mut budget: u64 = 2_000_000;
    let mut text = String::new();
    for t in rows {
        let want = t.intended_input(synth.block_size()).unwrap_or(0);
        if want == 0 || want > budget {
            continue;
        }
        budget -= want;
        text.clear();
        synth.prompt(t.line, want, &t.hash_ids, &mut text);
        let got = tok
            .encode(text.as_str(), false)
            .map_err(|source| ReplayError::Tokenize {
                line: t.line,
                source,
            })?
            .get_ids()
            .len() as u64;
        let abs = got.abs_diff(want);
        let pct = abs as f64 / want as f64 * 100.0;
        c.prompts += 1;
        if abs > c.max_abs || c.prompts == 1 {
            c.max_abs = c.max_abs.max(abs);
        }
        if pct > c.max_pct {
            c.max_pct = pct;
            c.worst_line = t.line;
        }
    }
    Ok(c)
}

fn agent(timeout: Duration, cacert: Option<&CaCerts>) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        // A completion is not sent on to where a redirect points (it is
        // `http_3xx`, as in the evented client), nor are its credentials.
        .max_redirects(0)
        // One idle connection per worker, so every request reuses one.
        .max_idle_connections(100_000)
        .max_idle_connections_per_host(100_000)
        .user_agent(USER_AGENT);
    tls::with_roots(config, cacert).build().new_agent()
}

/// How long connecting to the server, and the whole model listing, may
/// take: a server that accepts and never answers is named in seconds, not
/// after `--timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const MODELS_TIMEOUT: Duration = Duration::from_secs(10);

fn models_agent(cacert: Option<&CaCerts>) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_global(Some(MODELS_TIMEOUT))
        // Followed in `discover_model`, within the origin only (`redirect`).
        .max_redirects(0)
        .user_agent(concat!("mc-replay/", env!("CARGO_PKG_VERSION")));
    tls::with_roots(config, cacert).build().new_agent()
}

/// One TCP connection to `url`'s host and port (within
/// [`CONNECT_TIMEOUT`]): the server is there, or the error says why not.
fn check_reachable(url: &str) -> Result<()> {
    use std::net::{TcpStream, ToSocketAddrs};
    let down = |addr: &str, cause: String| -> crate::error::Error {
        ReplayError::ServerDown {
            addr: addr.to_string(),
            cause,
        }
        .into()
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e| down(url, format!("not a URL: {e}")))?;
    let Some(host) = uri.host() else {
        return Err(down(url, "no host".into()));
    };
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addr = format!("{host}:{port}");
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| down(&addr, format!("cannot resolve {host}: {e}")))?
        .collect();
    let mut last = String::from("no address");
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(down(&addr, last))
}

/// `--url` without a trailing `/`, ending in `/v1`.
pub fn base_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let url = url
        .strip_suffix("/chat/completions")
        .or_else(|| url.strip_suffix("/completions"))
        .unwrap_or(url);
    if url.ends_with("/v1") {
        url.to_string()
    } else {
        format!("{url}/v1")
    }
}

/// `--reset-prefix-cache`: vLLM's `POST /reset_prefix_cache` (at the
/// server's root, beside `/v1`), before the run's first request.
fn reset_prefix_cache(agent: &ureq::Agent, base: &str, headers: &[(String, String)]) -> Result<()> {
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let url = format!("{root}/reset_prefix_cache");
    let mut req = agent.post(&url);
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    match req.send_empty() {
        Ok(resp) if resp.status().is_success() => {
            eprintln!(
                "mc-replay: prefix cache reset (POST {url}: {})",
                resp.status().as_u16()
            );
            Ok(())
        }
        Ok(resp) => Err(ReplayError::ResetPrefixCache {
            url,
            cause: format!("HTTP {}", resp.status().as_u16()),
        }
        .into()),
        Err(e) => Err(ReplayError::ResetPrefixCache {
            url,
            cause: e.to_string(),
        }
        .into()),
    }
}

/// The first model the server lists.
fn discover_model(agent: &ureq::Agent, base: &str, headers: &[(String, String)]) -> Result<String> {
    let url = format!("{base}/models");
    let found = (|| -> Result<String, ModelsError> {
        let mut resp = super::redirect::get(agent, &url, headers)?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(ModelsError::Status(format!("HTTP {status}")));
        }
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string()?)?;
        v.get("data")
            .and_then(|d| d.as_array())
            .and_then(|d| d.first())
            .and_then(|m| m.get("id"))
            .and_then(|id| id.as_str())
            .map(str::to_string)
            .ok_or(ModelsError::NoModel)
    })();
    found.map_err(|source| ReplayError::ListModels { url, source }.into())
}

#[cfg(test)]
mod tests {
    use super::base_url;

    #[test]
    fn base_url_forms() {
        for u in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
            "http://h:1/v1/chat/completions",
            "http://h:1/v1/completions",
        ] {
            assert_eq!(base_url(u), "http://h:1/v1", "{u}");
        }
    }
}
