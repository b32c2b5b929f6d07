//! A sweep's files: `sweep.json` (which values ran, where their results
//! and summaries are, why the sweep stopped) and `sweep.csv` (one row per
//! value), and [`Point`], what a sweep keeps of each run. mc-replay writes
//! them ([`write_index`]); mc-report and mc-plot read them ([`read`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::summary::Summary;
use super::tally::Stats;
use crate::error::{Error, Result};

/// The option a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    Rate,
    Concurrency,
    Speedup,
}

impl Param {
    /// The option's name, also the name in paths and in `sweep.json`.
    pub fn name(self) -> &'static str {
        match self {
            Param::Rate => "rate",
            Param::Concurrency => "concurrency",
            Param::Speedup => "speedup",
        }
    }

    pub fn from_name(s: &str) -> Option<Param> {
        [Param::Rate, Param::Concurrency, Param::Speedup]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// `rate-0.5`, `concurrency-16`, `speedup-2`: the shortest decimal that
/// reads back as the value, so names are stable and readable.
pub fn run_name(param: Param, value: f64) -> String {
    format!("{}-{value}", param.name())
}

/// What a sweep keeps of each run: one row of `sweep.csv`, and what the
/// stopping rule and the sweep curve read.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub value: f64,
    pub request_throughput: f64,
    pub output_token_throughput: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub lag_p99_ms: Option<f64>,
    /// Failed over sent (measured requests); 0 when none was sent.
    pub error_rate: f64,
}

impl Point {
    pub fn of(value: f64, s: &Summary) -> Point {
        let m = &s.metrics;
        let p50 = |st: &Option<Stats>| st.as_ref().map(|x| x.p50);
        let p99 = |st: &Option<Stats>| st.as_ref().map(|x| x.p99);
        Point {
            value,
            request_throughput: s.request_throughput,
            output_token_throughput: s.output_token_throughput,
            ttft_p50_ms: p50(&m.ttft),
            ttft_p99_ms: p99(&m.ttft),
            itl_p50_ms: p50(&m.itl),
            itl_p99_ms: p99(&m.itl),
            e2e_p50_ms: p50(&m.e2e),
            e2e_p99_ms: p99(&m.e2e),
            lag_p99_ms: p99(&m.lag),
            error_rate: if s.requests.sent > 0 {
                s.requests.failed as f64 / s.requests.sent as f64
            } else {
                0.0
            },
        }
    }
}

/// `sweep.json`. Paths are relative to the sweep's folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// `rate`, `concurrency` or `speedup`.
    pub parameter: String,
    /// The values run, in order.
    pub runs: Vec<SweepRun>,
    /// Set when the sweep ended before its last value.
    pub stopped: Option<Stopped>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepRun {
    pub value: f64,
    /// `NAME/results.jsonl`.
    pub results: String,
    /// `NAME/summary.json`.
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stopped {
    pub reason: String,
    /// The value after which the sweep stopped (it was run and written).
    pub value: f64,
}

const CSV_COLUMNS: &str = "request_throughput,output_token_throughput,ttft_p50_ms,ttft_p99_ms,\
itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,lag_p99_ms,error_rate";

/// `sweep.csv`: a header whose first column is the parameter's name, then
/// one row per value; a distribution no request measured is empty.
pub fn csv(param: Param, points: &[Point]) -> String {
    let mut s = format!("{},{CSV_COLUMNS}\n", param.name());
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{}",
            p.value,
            p.request_throughput,
            p.output_token_throughput,
            opt(p.ttft_p50_ms),
            opt(p.ttft_p99_ms),
            opt(p.itl_p50_ms),
            opt(p.itl_p99_ms),
            opt(p.e2e_p50_ms),
            opt(p.e2e_p99_ms),
            opt(p.lag_p99_ms),
            p.error_rate
        );
    }
    s
}

/// The sweep table's columns after the swept option's name (the terminal
/// table and mc-report's page).
pub const TABLE_COLUMNS: [&str; 10] = [
    "req/s",
    "out tok/s",
    "ttft p50",
    "ttft p99",
    "itl p50",
    "itl p99",
    "e2e p50",
    "e2e p99",
    "lag p99",
    "errors",
];

impl Point {
    /// The point's row of the sweep table: each figure as the table writes
    /// it, with the number it sorts by (`None`: no value).
    pub fn table_cells(&self) -> [(String, Option<f64>); 11] {
        let ms = |v: Option<f64>| (v.map_or("-".to_string(), |v| format!("{v:.1}")), v);
        [
            (self.value.to_string(), Some(self.value)),
            (
                format!("{:.2}", self.request_throughput),
                Some(self.request_throughput),
            ),
            (
                format!("{:.1}", self.output_token_throughput),
                Some(self.output_token_throughput),
            ),
            ms(self.ttft_p50_ms),
            ms(self.ttft_p99_ms),
            ms(self.itl_p50_ms),
            ms(self.itl_p99_ms),
            ms(self.e2e_p50_ms),
            ms(self.e2e_p99_ms),
            ms(self.lag_p99_ms),
            (
                format!("{:.1}%", self.error_rate * 100.0),
                Some(self.error_rate),
            ),
        ]
    }
}

/// The sweep's table for stderr: one line per value run.
pub fn table(param: Param, points: &[Point], stopped: Option<&Stopped>) -> String {
    const WIDTHS: [usize; 11] = [12, 9, 11, 10, 10, 9, 9, 10, 10, 9, 8];
    let mut s = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = String>| {
        for (i, (c, w)) in cells.zip(WIDTHS).enumerate() {
            let _ = if i == 0 {
                write!(s, "{c:<w$}")
            } else {
                write!(s, "{c:>w$}")
            };
        }
        s.push('\n');
    };
    line(&mut std::iter::once(param.name().to_string()).chain(TABLE_COLUMNS.map(String::from)));
    for p in points {
        line(&mut p.table_cells().into_iter().map(|(text, _)| text));
    }
    if let Some(st) = stopped {
        let _ = writeln!(
            s,
            "stopped after {} {}: {}",
            param.name(),
            st.value,
            st.reason
        );
    }
    s
}

/// A file under the sweep's folder (relative path with `/`).
pub fn under(dir: &Path, rel: &str) -> PathBuf {
    rel.split('/')
        .fold(dir.to_path_buf(), |p, part| p.join(part))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Output {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `sweep.json` and `sweep.csv` for the runs so far.
pub fn write_index(
    dir: &Path,
    param: Param,
    points: &[Point],
    stopped: Option<&Stopped>,
) -> Result<()> {
    let file = SweepFile {
        parameter: param.name().into(),
        runs: points
            .iter()
            .map(|p| {
                let name = run_name(param, p.value);
                SweepRun {
                    value: p.value,
                    results: format!("{name}/results.jsonl"),
                    summary: format!("{name}/summary.json"),
                }
            })
            .collect(),
        stopped: stopped.cloned(),
    };
    let mut json = serde_json::to_vec_pretty(&file).map_err(|e| Error::Other(e.into()))?;
    json.push(b'\n');
    write(&dir.join("sweep.json"), &json)?;
    write(&dir.join("sweep.csv"), csv(param, points).as_bytes())
}

/// Reads a sweep's folder back: its parameter and one point per run (from
/// each run's summary.json), in sweep order.
pub fn read(dir: &Path) -> Result<(Param, Vec<Point>, Option<Stopped>)> {
    let file = read_index(dir)?;
    let param = Param::from_name(&file.parameter).ok_or_else(|| {
        Error::Input(format!(
            "{}: parameter `{}` is not rate, concurrency or speedup",
            dir.join("sweep.json").display(),
            file.parameter
        ))
    })?;
    let mut points = Vec::with_capacity(file.runs.len());
    for r in &file.runs {
        let s = super::summary::read(&under(dir, &r.summary))?;
        points.push(Point::of(r.value, &s));
    }
    Ok((param, points, file.stopped))
}

/// Reads a sweep folder's `sweep.json`.
pub fn read_index(dir: &Path) -> Result<SweepFile> {
    let index = dir.join("sweep.json");
    let bytes = std::fs::read(&index).map_err(|source| Error::NoInput {
        path: index.clone(),
        source,
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::Input(format!("{}: not a sweep.json: {e}", index.display())))
}

/// A point for tests: value, output tok/s, TTFT p99, lag p99, error rate.
#[cfg(test)]
pub fn sample_point(value: f64, tok_s: f64, ttft_p99: f64, lag_p99: f64, errors: f64) -> Point {
    Point {
        value,
        request_throughput: tok_s / 100.0,
        output_token_throughput: tok_s,
        ttft_p50_ms: Some(ttft_p99 / 2.0),
        ttft_p99_ms: Some(ttft_p99),
        itl_p50_ms: Some(10.0),
        itl_p99_ms: Some(20.0),
        e2e_p50_ms: Some(1000.0),
        e2e_p99_ms: Some(2000.0),
        lag_p99_ms: Some(lag_p99),
        error_rate: errors,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_table_lines_up_by_hand() {
        let p = Point {
            value: 2.0,
            request_throughput: 1.234,
            output_token_throughput: 56.78,
            ttft_p50_ms: Some(20.04),
            ttft_p99_ms: None,
            itl_p50_ms: Some(5.0),
            itl_p99_ms: Some(9.96),
            e2e_p50_ms: Some(100.0),
            e2e_p99_ms: Some(1234.56),
            lag_p99_ms: Some(0.0),
            error_rate: 0.125,
        };
        // Widths 12 (left), 9, 11, 10, 10, 9, 9, 10, 10, 9, 8 (right).
        let want = "rate            req/s  out tok/s  ttft p50  ttft p99  itl p50  itl p99   e2e p50   e2e p99  lag p99  errors\n\
                    2                1.23       56.8      20.0         -      5.0     10.0     100.0    1234.6      0.0   12.5%\n";
        assert_eq!(table(Param::Rate, &[p], None), want);
    }
    use super::*;

    use super::sample_point as pt;

    #[test]
    fn names_are_short_decimals() {
        assert_eq!(run_name(Param::Rate, 0.5), "rate-0.5");
        assert_eq!(run_name(Param::Rate, 2.0), "rate-2");
        assert_eq!(run_name(Param::Concurrency, 16.0), "concurrency-16");
        assert_eq!(run_name(Param::Speedup, 1.25), "speedup-1.25");
        assert_eq!(run_name(Param::Rate, 1e-6), "rate-0.000001");
    }

    #[test]
    fn csv_rows_and_empty_cells() {
        let mut p = pt(0.5, 100.0, 40.0, 0.25, 0.0);
        p.itl_p50_ms = None;
        p.itl_p99_ms = None;
        assert_eq!(
            csv(Param::Rate, &[p]),
            "rate,request_throughput,output_token_throughput,ttft_p50_ms,ttft_p99_ms,\
             itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,lag_p99_ms,error_rate\n\
             0.5,1,100,20,40,,,1000,2000,0.25,0\n"
        );
    }
}
