//! Watching a real server during a run: [`scrape`] reads its Prometheus
//! metrics before, during and after; [`fidelity`] compares what it saw with
//! what the trace describes (the summary's `fidelity` section).

pub mod fidelity;
pub mod scrape;

use std::time::Duration;

use crate::error::Result;
use crate::replay::http::tls::CaCerts;
use crate::replay::ReplayArgs;
use crate::results::fidelity::Fidelity;

/// Whether, and how, a run watches its server.
pub enum Watch {
    /// The engine model: no server, no fidelity section.
    NoServer,
    /// `--no-server-metrics`: a fidelity section that says so.
    Off,
    /// Scraping the server's metrics.
    Scrape(scrape::Observer),
}

impl Watch {
    /// Starts scraping `base`'s metrics unless the options turn it off.
    /// Called before the run's clock starts: the first scrape costs the
    /// schedule nothing.
    pub fn start(
        args: &ReplayArgs,
        base: &str,
        headers: &[(String, String)],
        cacert: Option<&CaCerts>,
    ) -> Result<Watch> {
        if args.no_server_metrics {
            return Ok(Watch::Off);
        }
        let url = args
            .metrics_url
            .clone()
            .unwrap_or_else(|| scrape::metrics_url(base));
        let scraper = scrape::Scraper::new(
            url,
            headers.to_vec(),
            args.metrics_out.clone(),
            crate::replay::redactor(args),
            cacert,
        )?;
        Ok(Watch::Scrape(scrape::Observer::start(
            scraper,
            Duration::from_secs_f64(args.metrics_interval),
        )))
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
