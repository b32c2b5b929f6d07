//! Watching a real server during a run: [`scrape`] reads its Prometheus
//! metrics before, during and after; [`fidelity`] compares what it saw with
//! what the trace describes (the summary's `fidelity` section).

pub mod fidelity;
pub mod scrape;

use std::path::PathBuf;
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
        if !opts.scrape {
            return Ok(Watch::Off);
        }
        let url = opts
            .url
            .clone()
            .unwrap_or_else(|| scrape::metrics_url(base));
        let scraper = scrape::Scraper::new(
            url,
            headers.to_vec(),
            opts.out.clone(),
            redactor.clone(),
            cacert,
        )?;
        Ok(Watch::Scrape(Box::new(scrape::Observer::start(
            scraper,
            opts.interval,
        ))))
    }

    /// Ends the watch: the fidelity section, if the run has one.
    pub fn finish(self, inputs: &fidelity::Inputs<'_>) -> Option<Fidelity> {
        let observed = match self {
            Watch::NoServer => return None,
            Watch::Off => None,
            Watch::Scrape(o) => Some(o.finish()),
        };
        Some(fidelity::assess(inputs, observed.as_ref()))
    }
}
