//! Server metrics for the fidelity check: `GET /metrics` (the Prometheus
//! text format) once before the run, every `--metrics-interval` during it
//! and once after. The known series ([`crate::prom::ServerStats`]) feed the
//! summary; every scrape, unknown series included, goes to `--metrics-out`
//! as one JSON line.
//!
//! A server without metrics is normal: when the scrape before the run fails
//! the rest are skipped, and no failing scrape ever fails the run (the
//! first failure is noted on stderr, once).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::prom::{self, ServerStats};
use crate::replay::http::redirect;
use crate::replay::http::tls::{self, CaCerts};
use crate::replay::redact::Redactor;

/// When a scrape was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Before,
    During,
    After,
}

/// One line of `--metrics-out`.
#[derive(Serialize)]
struct ScrapeLine<'a> {
    phase: Phase,
    /// Wall-clock time of the answer, ms since the Unix epoch (the
    /// summary's `run.start_unix_ms` is the run's zero).
    unix_ms: f64,
    url: &'a str,
    /// Why the scrape failed (then `samples` is empty).
    error: Option<&'a str>,
    /// The series the summary uses, summed over their labels.
    known: Option<&'a ServerStats>,
    /// Every sample as the server sent it; a value that is not a finite
    /// number is written as the text Prometheus uses (`+Inf`, `NaN`).
    samples: Vec<SampleOut<'a>>,
}

#[derive(Serialize)]
struct SampleOut<'a> {
    name: &'a str,
    labels: &'a BTreeMap<String, String>,
    value: Value,
}

/// Scrapes one URL; writes every scrape to `--metrics-out`.
pub struct Scraper {
    agent: ureq::Agent,
    url: String,
    /// The URL as written anywhere (its credentials hidden).
    shown: String,
    redactor: Redactor,
    headers: Vec<(String, String)>,
    out: Option<Arc<MetricsOut>>,
    /// The first failed scrape was noted on stderr.
    noted: AtomicBool,
}

/// `--metrics-out`: one file, shared by the scrapers of every server a run
/// watches (each line names its `url`).
pub struct MetricsOut {
    path: PathBuf,
    file: Mutex<std::io::BufWriter<std::fs::File>>,
    /// The first write failure was noted on stderr.
    noted: AtomicBool,
}

impl MetricsOut {
    /// Creates (truncates) the file.
    pub fn create(path: PathBuf) -> Result<Arc<MetricsOut>> {
        let file = std::fs::File::create(&path).map_err(|source| Error::Output {
            path: path.clone(),
            source,
        })?;
        Ok(Arc::new(MetricsOut {
            path,
            file: Mutex::new(std::io::BufWriter::new(file)),
            noted: AtomicBool::new(false),
        }))
    }

    /// Writes one line; a failure is noted on stderr once.
    fn write(&self, line: &ScrapeLine<'_>) {
        let mut out = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let written = serde_json::to_writer(&mut *out, line)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            if !self.noted.swap(true, Ordering::Relaxed) {
                eprintln!("mc-replay: note: {}: {e}", self.path.display());
            }
        }
    }
}

/// How long one scrape may take: a server that is slow to answer its
/// metrics must not hold up the run's end.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

impl Scraper {
    pub fn new(
        url: String,
        headers: Vec<(String, String)>,
        out: Option<Arc<MetricsOut>>,
        redactor: Redactor,
        cacert: Option<&CaCerts>,
    ) -> Result<Self> {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(SCRAPE_TIMEOUT))
            // Followed here, within the origin only (`redirect`).
            .max_redirects(0)
            .user_agent(concat!("mc-replay/", env!("CARGO_PKG_VERSION")));
        let agent = tls::with_roots(config, cacert).build().new_agent();
        Ok(Scraper {
            agent,
            shown: redactor.redact(&url),
            redactor,
            url,
            headers,
            out,
            noted: AtomicBool::new(false),
        })
    }

    /// The URL as it may be shown (credentials hidden).
    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    /// One scrape: the known series, or why there are none. Written to
    /// `--metrics-out` either way; a failure is noted on stderr once.
    pub fn scrape(&self, phase: Phase) -> std::result::Result<ServerStats, String> {
        let got = self.fetch().map_err(|e| self.redactor.redact(&e));
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_micros() as f64 / 1000.0);
        let stats = got.as_ref().ok().map(ServerStats::from_scrape);
        self.write(ScrapeLine {
            phase,
            unix_ms,
            url: &self.shown,
            error: got.as_ref().err().map(String::as_str),
            known: stats.as_ref(),
            samples: got
                .as_ref()
                .map(|s| {
                    s.samples
                        .iter()
                        .map(|x| SampleOut {
                            name: &x.name,
                            labels: &x.labels,
                            value: number(x.value),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        });
        if let Some(st) = stats {
            return Ok(st);
        }
        let e = got.err().unwrap_or_default();
        if !self.noted.swap(true, Ordering::Relaxed) {
            eprintln!(
                "mc-replay: note: server metrics at {}: {e}; the run goes on \
                 (--no-server-metrics turns scraping off)",
                self.shown
            );
        }
        Err(e)
    }

    fn fetch(&self) -> std::result::Result<prom::Scrape, String> {
        let mut resp =
            redirect::get(&self.agent, &self.url, &self.headers).map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(format!("HTTP {status}"));
        }
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        prom::parse(&text).map_err(|e| e.to_string())
    }

    fn write(&self, line: ScrapeLine<'_>) {
        if let Some(out) = &self.out {
            out.write(&line);
        }
    }
}

/// A sample's value for JSON: a number, or Prometheus's text for the
/// values JSON has no number for.
fn number(v: f64) -> Value {
    serde_json::Number::from_f64(v)
        .map_or_else(|| Value::String(prom::format_value(v)), Value::Number)
}

/// The scrapes of one run, as [`super::fidelity`] reads them.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub url: String,
    pub before: Option<ServerStats>,
    pub after: Option<ServerStats>,
    /// The scrapes during the run that answered.
    pub during: Vec<ServerStats>,
    /// Scrapes that answered, in all three phases.
    pub scrapes: u64,
    /// Why there are no metrics (or fewer than asked for).
    pub note: Option<String>,
}

/// The scraping of one run: the scrape before it (taken when this is
/// started, before the run's clock starts, so it costs the schedule
/// nothing), a thread for the scrapes during it, and the scrape after.
pub struct Observer {
    scraper: Arc<Scraper>,
    before: std::result::Result<ServerStats, String>,
    periodic: Option<(Sender<()>, JoinHandle<Vec<ServerStats>>)>,
}

impl Observer {
    /// Scrapes once; when that answers, scrapes every `interval` on a
    /// thread of its own until [`Observer::finish`].
    pub fn start(scraper: Scraper, interval: Duration) -> Observer {
        let scraper = Arc::new(scraper);
        let before = scraper.scrape(Phase::Before);
        let periodic = before.is_ok().then(|| {
            let (tx, rx) = mpsc::channel::<()>();
            let s = scraper.clone();
            let handle = std::thread::spawn(move || {
                let mut during = Vec::new();
                // Woken early (or the sender dropped) when the run ends.
                while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                    if let Ok(st) = s.scrape(Phase::During) {
                        during.push(st);
                    }
                }
                during
            });
            (tx, handle)
        });
        Observer {
            scraper,
            before,
            periodic,
        }
    }

    /// Stops the scrapes during the run and scrapes once more.
    pub fn finish(self) -> Observed {
        let mut obs = Observed {
            url: self.scraper.shown_url().to_string(),
            ..Observed::default()
        };
        match self.before {
            Err(e) => obs.note = Some(e),
            Ok(st) => {
                obs.before = Some(st);
                obs.scrapes += 1;
                if let Some((tx, handle)) = self.periodic {
                    let _ = tx.send(());
                    obs.during = handle.join().unwrap_or_default();
                    obs.scrapes += obs.during.len() as u64;
                }
                match self.scraper.scrape(Phase::After) {
                    Ok(st) => {
                        obs.after = Some(st);
                        obs.scrapes += 1;
                    }
                    Err(e) => obs.note = Some(format!("the scrape after the run failed: {e}")),
                }
            }
        }
        obs
    }
}

/// `/metrics` at the root of the server `base` (`http://h:p/v1`) names.
pub fn metrics_url(base: &str) -> String {
    let root = base.strip_suffix("/v1").unwrap_or(base);
    format!("{root}/metrics")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_live_at_the_server_root() {
        assert_eq!(metrics_url("http://h:1/v1"), "http://h:1/metrics");
        assert_eq!(metrics_url("http://h:1/api"), "http://h:1/api/metrics");
    }

    #[test]
    fn values_json_has_no_number_for_are_text() {
        assert_eq!(number(2.5), serde_json::json!(2.5));
        assert_eq!(number(f64::INFINITY), serde_json::json!("+Inf"));
        assert_eq!(number(f64::NAN), serde_json::json!("NaN"));
    }
}
