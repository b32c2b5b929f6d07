//! Watching a real server during a run: [`scrape`] reads its Prometheus
//! metrics before, during and after; [`fidelity`] compares what it saw with
//! what the trace describes (the summary's `fidelity` section).

pub mod fidelity;
pub mod scrape;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::replay::http::tls::CaCerts;
use crate::replay::redact::Redactor;
use crate::results::fidelity::Fidelity;

/// How a run on a server watches it: the `Server metrics` options, as the
/// plan checked them.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// Not `--no-server-metrics`.
    pub scrape: bool,
    /// `--metrics-url`; `None`: `/metrics` at the server's root.
    pub url: Option<String>,
    /// `--metrics-out`.
    pub out: Option<PathBuf>,
    pub interval: Duration,
    /// `--server-block-size`.
    pub server_block_size: Option<u64>,
    /// `--kv-tokens`.
    pub kv_tokens: Option<u64>,
    /// `--fidelity-threshold`, in percentage points.
    pub threshold_pp: f64,
}

/// Whether, and how, a run watches its server.
pub enum Watch {
    /// The engine model: no server, no fidelity section.
    NoServer,
    /// `--no-server-metrics`: a fidelity section that says so.
    Off,
    /// Scraping the server's metrics (boxed: the scrape before, with its
    /// histograms, is large beside the other variants).
    Scrape(Box<scrape::Observer>),
    /// Several servers behind mc-replay's router (`--url A,B,…`): each
    /// watched on its own, in the order given (the result lines' `worker`).
    Each(Vec<Watch>),
}

/// What a finished watch found.
pub enum Found {
    /// The engine model: nothing to check.
    Nothing,
    /// The one server's fidelity section (boxed: large beside the others).
    One(Box<Fidelity>),
    /// One section per server, in the order given; each judges the
    /// requests the router sent that server.
    Each(Vec<Fidelity>),
}

/// One server to watch: its base URL and the headers it is sent.
pub struct Server<'a> {
    pub base: &'a str,
    pub headers: &'a [(String, String)],
}

impl Watch {
    /// Starts scraping `base`'s metrics unless the options turn it off.
    /// Called before the run's clock starts: the first scrape costs the
    /// schedule nothing.
    pub fn start(
        opts: &WatchOptions,
        redactor: &Redactor,
        base: &str,
        headers: &[(String, String)],
        cacert: Option<&CaCerts>,
    ) -> Result<Watch> {
        let out = Self::metrics_out(opts)?;
        let server = Server { base, headers };
        Self::start_one(opts, redactor, &server, opts.url.clone(), out, cacert)
    }

    /// Starts scraping each server's `/metrics` (at its root; the plan
    /// refuses `--metrics-url` with several servers), all into one
    /// `--metrics-out`.
    pub fn start_each(
        opts: &WatchOptions,
        redactor: &Redactor,
        servers: &[Server<'_>],
        cacert: Option<&CaCerts>,
    ) -> Result<Watch> {
        let out = Self::metrics_out(opts)?;
        let watches = servers
            .iter()
            .map(|s| Self::start_one(opts, redactor, s, None, out.clone(), cacert))
            .collect::<Result<Vec<_>>>()?;
        Ok(Watch::Each(watches))
    }

    fn metrics_out(opts: &WatchOptions) -> Result<Option<Arc<scrape::MetricsOut>>> {
        match &opts.out {
            Some(path) if opts.scrape => Ok(Some(scrape::MetricsOut::create(path.clone())?)),
            _ => Ok(None),
        }
    }

    fn start_one(
        opts: &WatchOptions,
        redactor: &Redactor,
        server: &Server<'_>,
        url: Option<String>,
        out: Option<Arc<scrape::MetricsOut>>,
        cacert: Option<&CaCerts>,
    ) -> Result<Watch> {
        if !opts.scrape {
            return Ok(Watch::Off);
        }
        let url = url.unwrap_or_else(|| scrape::metrics_url(server.base));
        let scraper =
            scrape::Scraper::new(url, server.headers.to_vec(), out, redactor.clone(), cacert)?;
        Ok(Watch::Scrape(Box::new(scrape::Observer::start(
            scraper,
            opts.interval,
        ))))
    }

    /// Ends the watch: the fidelity section(s) of the run.
    pub fn finish(self, inputs: &fidelity::Inputs<'_>) -> Found {
        match self {
            Watch::NoServer => Found::Nothing,
            Watch::Off => Found::One(Box::new(fidelity::assess(inputs, None))),
            Watch::Scrape(o) => Found::One(Box::new(fidelity::assess(inputs, Some(&o.finish())))),
            Watch::Each(watches) => Found::Each(
                watches
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, w)| {
                        // This server's requests only: its cache saw those.
                        let sent: Vec<_> = inputs
                            .sent
                            .iter()
                            .filter(|r| r.worker == Some(i as u32))
                            .copied()
                            .collect();
                        match w.finish(&fidelity::Inputs {
                            sent: &sent,
                            ..*inputs
                        }) {
                            Found::One(f) => Some(*f),
                            Found::Nothing | Found::Each(_) => None,
                        }
                    })
                    .collect(),
            ),
        }
    }
}
