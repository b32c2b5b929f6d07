//! `mc-plot`: the figure of a workload. Per `--window-ms` window: requests
//! per second, input and output tokens per second, the per-request means of
//! both, and the prefix-cache hit rate of mc-analyze's causal model; ISL and
//! OSL histograms; a session timeline (one lane per session, a mark per
//! turn).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use crate::analyze::cache::RowByRow;
use crate::blocks::BlockSize;
use crate::error::{Error, RecordError, Result};
use crate::filter::{for_each_line, report_skipped, IoArgs, LookAhead};
use crate::jsonl::ErrorPolicy;
use crate::limits::{MAX_BINS, MAX_WINDOWS};
use crate::record::{Field, Record};

use super::fmt::{human, Unit};
use super::{figure_svg, histogram, Body, Panel, Series};

/// The figure's defaults, shared by mc-plot and `mc-gen --plot` so both
/// draw the same rows the same way.
pub const WINDOW_MS: f64 = 10_000.0;
pub const BINS: usize = 40;
pub const MAX_SESSIONS: usize = 60;

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-plot";

/// Draw the figure of a workload: requests/s, input and output tokens/s and
/// their per-request means per window, the prefix-cache hit rate per window
/// (mc-analyze's causal model), ISL/OSL histograms and a session timeline.
///
/// Reads a Mooncake trace on stdin (or --input) and writes one SVG document
/// to stdout (or --svg FILE). Memory grows with the number of rows.
///
/// With --sweep DIR, draws an mc-replay sweep instead (mc-replay --rate
/// 1,2,4 --out-dir DIR): TTFT p50/p99 against output throughput, and output
/// throughput against the swept value.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-plot < conversation_trace.jsonl > trace.svg
  mc-plot --window-ms 60000 --block-size 16 --svg trace.svg --input trace.jsonl
  mc-replay --rate 1,2,4,8 --out-dir sweep -i trace.jsonl && mc-plot --sweep sweep --svg curve.svg"
)]
pub struct PlotArgs {
    /// Width of a time window, in ms (rates are per second within it).
    #[arg(long, default_value_t = WINDOW_MS, value_name = "MS", value_parser = crate::options::positive)]
    pub window_ms: f64,

    /// Tokens per hash id, for the prefix-cache hit rate: `auto` (the
    /// size the first rows decide, named on stderr) or a number, which
    /// most rows with ids must fit (else exit 65 naming the rows' size).
    #[arg(long, default_value = "auto", value_name = "B|auto")]
    pub block_size: BlockSize,

    /// Model an LRU cache of this many blocks instead of an infinite one.
    #[arg(long, value_name = "C")]
    pub cache_blocks: Option<u64>,

    /// Bins of the ISL/OSL histograms.
    #[arg(long, default_value_t = BINS, value_name = "N")]
    pub bins: usize,

    /// At most this many session lanes in the timeline (the first ones).
    #[arg(long, default_value_t = MAX_SESSIONS, value_name = "N")]
    pub max_sessions: usize,

    /// Write the SVG here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,

    /// Draw the sweep in DIR (mc-replay --out-dir: sweep.json and each
    /// value's summary) instead of a trace: TTFT p50/p99 against output
    /// throughput, and output throughput against the swept value.
    #[arg(long, value_name = "DIR")]
    pub sweep: Option<PathBuf>,

    #[command(flatten)]
    pub io: IoArgs,
}

/// What the figure is drawn from: one entry per row, in file order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TraceData {
    /// Arrival time (ms): the timestamp, or for a later session turn the
    /// previous turn's time plus its delay (service time unknown).
    pub t_ms: Vec<f64>,
    pub isl: Vec<f64>,
    pub osl: Vec<f64>,
    pub hit_tokens: Vec<f64>,
    /// Turn times per session, sessions in order of first appearance.
    pub sessions: Vec<Vec<f64>>,
}

/// Per-window figures, windows `[k·w, (k+1)·w)` from the first arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Window start, seconds from the first arrival.
    pub start_s: f64,
    pub requests: u64,
    pub input_tokens: f64,
    pub output_tokens: f64,
    pub hit_tokens: f64,
}

impl TraceData {
    fn push(
        &mut self,
        rec: &Record<'_>,
        sessions: &mut HashMap<Vec<u8>, usize>,
        ids: &mut Vec<u64>,
        cache: &mut RowByRow,
    ) -> std::result::Result<(), RecordError> {
        let isl = rec.uint(Field::InputLength)?.unwrap_or(0) as f64;
        let osl = rec.uint(Field::OutputLength)?.unwrap_or(0) as f64;
        let ts = rec
            .number(Field::Timestamp)?
            .map(|n| crate::limits::time_ms("timestamp", n.as_f64()))
            .transpose()?;
        let delay = rec
            .number(Field::Delay)?
            .map(|n| crate::limits::time_ms("delay", n.as_f64()))
            .transpose()?
            .unwrap_or(0.0);
        let sid = rec.session_id()?;
        let prev = self.t_ms.last().copied().unwrap_or(0.0);
        let t = match sid {
            Some(s) => {
                let n = sessions.len();
                let lane = *sessions.entry(s.to_vec()).or_insert(n);
                if lane == self.sessions.len() {
                    self.sessions.push(Vec::new());
                }
                let last = self.sessions[lane].last().copied();
                let t = match (ts, last) {
                    (Some(t), _) => t,
                    (None, Some(l)) => l + delay,
                    (None, None) => prev,
                };
                self.sessions[lane].push(t);
                t
            }
            None => ts.unwrap_or(prev),
        };
        // A turn's time is its session's last time plus its delay: bounded too.
        crate::limits::time_ms("delay", t)?;
        ids.clear();
        rec.hash_ids_into(ids)?;
        self.hit_tokens.push(cache.row(ids, isl));
        self.t_ms.push(t);
        self.isl.push(isl);
        self.osl.push(osl);
        Ok(())
    }

    /// Refuses a figure of more than `limits::MAX_WINDOWS` windows (the
    /// trace's span over `window_ms`), naming the `--window-ms` that fits.
    pub fn check_windows(&self, window_ms: f64) -> Result<()> {
        let Some(t0) = self.t_ms.iter().copied().reduce(f64::min) else {
            return Ok(());
        };
        let t1 = self.t_ms.iter().copied().fold(t0, f64::max);
        let n = (t1 - t0) / window_ms;
        if n.is_nan() || n >= MAX_WINDOWS as f64 {
            return Err(Error::usage(format!(
                "--window-ms {window_ms}: the trace spans {:.0} ms, {n:e} windows, above the limit \
                 of {MAX_WINDOWS}; give --window-ms {} or more",
                t1 - t0,
                ((t1 - t0) / MAX_WINDOWS as f64).floor() + 1.0
            )));
        }
        Ok(())
    }

    /// The rows grouped into windows of `window_ms`.
    pub fn windows(&self, window_ms: f64) -> Vec<Window> {
        let Some(t0) = self.t_ms.iter().copied().reduce(f64::min) else {
            return Vec::new();
        };
        let t1 = self.t_ms.iter().copied().fold(t0, f64::max);
        // `check_windows` refused more before; the cap keeps this total.
        let n = (((t1 - t0) / window_ms).floor() as usize).min(MAX_WINDOWS as usize - 1) + 1;
        let mut w: Vec<Window> = (0..n)
            .map(|k| Window {
                start_s: k as f64 * window_ms / 1000.0,
                requests: 0,
                input_tokens: 0.0,
                output_tokens: 0.0,
                hit_tokens: 0.0,
            })
            .collect();
        for i in 0..self.t_ms.len() {
            let k = (((self.t_ms[i] - t0) / window_ms) as usize).min(n - 1);
            w[k].requests += 1;
            w[k].input_tokens += self.isl[i];
            w[k].output_tokens += self.osl[i];
            w[k].hit_tokens += self.hit_tokens[i];
        }
        w
    }
}

/// Gathers a figure's data row by row, for a tool that plots what it
/// writes (`mc-gen --plot`).
pub struct Collector {
    data: TraceData,
    sessions: HashMap<Vec<u8>, usize>,
    ids: Vec<u64>,
    cache: RowByRow,
}

impl Collector {
    pub fn new(block_size: u64, cache_blocks: Option<u64>) -> Collector {
        Collector {
            data: TraceData::default(),
            sessions: HashMap::new(),
            ids: Vec::new(),
            cache: RowByRow::new(block_size, cache_blocks),
        }
    }

    /// Adds one record (a JSON line without its `\n`).
    pub fn add(&mut self, line: &[u8]) -> std::result::Result<(), RecordError> {
        let rec = Record::parse(line)?;
        self.data
            .push(&rec, &mut self.sessions, &mut self.ids, &mut self.cache)
    }

    pub fn data(&self) -> &TraceData {
        &self.data
    }
}

/// Draws `data` with the default layout: two panels a row.
pub fn figure(
    data: &TraceData,
    window_ms: f64,
    bins: usize,
    max_sessions: usize,
) -> Result<String> {
    data.check_windows(window_ms)?;
    let panels = panels(data, window_ms, bins.min(MAX_BINS), max_sessions);
    figure_svg(&panels, 2, (640, 360)).map_err(|e| Error::Other(e.into()))
}

/// A trace read for its figure.
#[derive(Debug)]
pub struct TraceRead {
    pub data: TraceData,
    /// The block size the hit rate was computed at.
    pub block_size: u64,
    /// Rows in the file (drawn or not).
    pub rows: u64,
    /// The line number of each row drawn (in `data`'s order).
    pub lines: Vec<u64>,
}

/// Reads a trace into what the figure needs: every row, or with `keep`
/// only the rows whose line numbers it holds (mc-report draws the rows a
/// run replayed). The first rows (as many as a filter's look-ahead,
/// `filter::LOOKAHEAD_ROWS` or `LOOKAHEAD_BYTES`) decide the block size
/// before any hit is counted.
pub fn read(
    tool: &str,
    io: &IoArgs,
    size: BlockSize,
    cache_blocks: Option<u64>,
    keep: Option<&HashSet<u64>>,
) -> Result<TraceRead> {
    let mut reader = io.reader()?;
    let mut policy = ErrorPolicy::new(io.on_error);
    let ahead = LookAhead::read(&mut reader, &mut policy, size)?;
    let block_size = ahead.block_size(tool, size)?;
    let mut data = TraceData::default();
    let mut sessions = HashMap::new();
    let mut ids = Vec::new();
    let mut cache = RowByRow::new(block_size, cache_blocks);
    let mut rows = 0u64;
    let mut lines = Vec::new();
    let mut one = |no: u64, bytes: &[u8], policy: &mut ErrorPolicy| -> Result<()> {
        rows += 1;
        if keep.is_some_and(|k| !k.contains(&no)) {
            return Ok(());
        }
        match Record::parse(bytes).and_then(|r| data.push(&r, &mut sessions, &mut ids, &mut cache))
        {
            Ok(()) => {
                lines.push(no);
                Ok(())
            }
            Err(e) => policy.record(no, e),
        }
    };
    for (no, bytes) in ahead.lines() {
        one(no, bytes, &mut policy)?;
    }
    for_each_line(&mut reader, &mut policy, |no, bytes, policy| {
        one(no, bytes, policy)
    })?;
    report_skipped(tool, &policy);
    Ok(TraceRead {
        data,
        block_size,
        rows,
        lines,
    })
}

fn line(name: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: name.into(),
        points,
        dots: false,
        style: super::Style::default(),
    }
}

/// The panels of a trace's figure.
pub fn panels(data: &TraceData, window_ms: f64, bins: usize, max_sessions: usize) -> Vec<Panel> {
    let mut out = window_panels(data, window_ms);
    for (title, x_label, lengths) in [
        ("Input length histogram", "input tokens", &data.isl),
        ("Output length histogram", "output tokens", &data.osl),
    ] {
        out.push(Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: "requests".into(),
            x_unit: Unit::Plain,
            y_unit: Unit::Plain,
            body: histogram(lengths, bins),
        });
    }
    if !data.sessions.is_empty() {
        out.push(sessions_panel(data, max_sessions));
    }
    out
}

/// The panels over time, one point a window: request and token rates,
/// mean lengths, the prefix-cache hit rate.
fn window_panels(data: &TraceData, window_ms: f64) -> Vec<Panel> {
    let w = data.windows(window_ms);
    let per_s = 1000.0 / window_ms;
    let each = |f: &dyn Fn(&Window) -> f64| -> Vec<(f64, f64)> {
        w.iter().map(|x| (x.start_s, f(x))).collect()
    };
    let mean = |a: f64, n: u64| if n > 0 { a / n as f64 } else { 0.0 };
    let secs = format!("time, {} windows", human(window_ms, Unit::Ms, 6));
    let panel = |title: &str, y: &str, y_unit: Unit, body: Body| Panel {
        title: title.into(),
        x_label: secs.clone(),
        y_label: y.into(),
        x_unit: Unit::S,
        y_unit,
        body,
    };
    vec![
        panel(
            "Requests per second",
            "req/s",
            Unit::Plain,
            Body::Lines(vec![line("req/s", each(&|x| x.requests as f64 * per_s))]),
        ),
        panel(
            "Tokens per second",
            "tok/s",
            Unit::Plain,
            Body::Lines(vec![
                line("input", each(&|x| x.input_tokens * per_s)),
                line("output", each(&|x| x.output_tokens * per_s)),
            ]),
        ),
        panel(
            "Mean tokens per request",
            "tokens",
            Unit::Plain,
            Body::Lines(vec![
                line("input", each(&|x| mean(x.input_tokens, x.requests))),
                line("output", each(&|x| mean(x.output_tokens, x.requests))),
            ]),
        ),
        panel(
            "Prefix-cache hit rate (causal model)",
            "hit tokens / input tokens",
            Unit::Share,
            Body::Lines(vec![line(
                "hit rate",
                each(&|x| {
                    if x.input_tokens > 0.0 {
                        x.hit_tokens / x.input_tokens
                    } else {
                        0.0
                    }
                }),
            )]),
        ),
    ]
}

/// The first `max_sessions` sessions' arrivals, one lane each.
fn sessions_panel(data: &TraceData, max_sessions: usize) -> Panel {
    let t0 = data.t_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let lanes = data
        .sessions
        .iter()
        .take(max_sessions)
        .map(|s| s.iter().map(|t| (t - t0) / 1000.0).collect())
        .collect();
    Panel {
        title: format!(
            "Sessions (first {} of {}; later turns at delay after the previous arrival)",
            data.sessions.len().min(max_sessions),
            data.sessions.len()
        ),
        x_label: "time".into(),
        y_label: "session".into(),
        x_unit: Unit::S,
        y_unit: Unit::Plain,
        body: Body::Timeline(lanes),
    }
}

/// Runs `mc-plot`: the trace on `args.io`, the SVG to `--svg` or stdout.
pub fn run(args: &PlotArgs) -> Result<()> {
    let io = &args.io;
    // Before anything is read or created: the figure never replaces the input.
    // With --sweep, every file of the sweep folder is an input.
    let mut inputs: Vec<PathBuf> = vec![io.input().map_or_else(|| "-".into(), PathBuf::from)];
    if let Some(dir) = &args.sweep {
        if let Ok(entries) = std::fs::read_dir(dir) {
            inputs.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        }
    }
    let inputs: Vec<&std::path::Path> = inputs.iter().map(|p| p.as_path()).collect();
    for out in [&args.svg, &io.output] {
        crate::jsonl::refuse_input_as_output(out.as_deref(), &inputs)?;
    }
    if let Some(dir) = &args.sweep {
        let (svg, about) = super::sweep::figure(dir)?;
        write_svg(io, args, &svg)?;
        eprintln!("{about}");
        return Ok(());
    }
    if args.bins == 0 || args.bins > MAX_BINS {
        return Err(Error::usage(format!(
            "--bins {}: expected 1 to {MAX_BINS}",
            args.bins
        )));
    }
    let data = read(TOOL, io, args.block_size, args.cache_blocks, None)?.data;
    if data.t_ms.is_empty() {
        return Err(Error::Input(
            "no records in the input: nothing to plot".into(),
        ));
    }
    data.check_windows(args.window_ms)?;
    let panels = panels(&data, args.window_ms, args.bins, args.max_sessions);
    let svg = figure_svg(&panels, 2, (640, 360)).map_err(|e| Error::Other(e.into()))?;
    write_svg(io, args, &svg)?;
    eprintln!(
        "{TOOL}: {} rows, {} sessions, {} panels",
        data.t_ms.len(),
        data.sessions.len(),
        panels.len()
    );
    Ok(())
}

/// The SVG to `--svg FILE` or stdout.
fn write_svg(io: &IoArgs, args: &PlotArgs, svg: &str) -> Result<()> {
    match &args.svg {
        Some(p) => std::fs::write(p, svg).map_err(|source| Error::Output {
            path: p.clone(),
            source,
        }),
        None => {
            let mut out = io.writer()?;
            out.write_line(svg.as_bytes())?;
            out.flush()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(rows: &[&str]) -> TraceData {
        let mut d = TraceData::default();
        let mut s = HashMap::new();
        let mut ids = Vec::new();
        let mut c = RowByRow::new(2, None);
        for r in rows {
            d.push(
                &Record::parse(r.as_bytes()).unwrap(),
                &mut s,
                &mut ids,
                &mut c,
            )
            .unwrap();
        }
        d
    }

    #[test]
    fn windows_counted_by_hand() {
        let d = data(&[
            r#"{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, 2]}"#,
            r#"{"timestamp": 999, "input_length": 3, "output_length": 3, "hash_ids": [1, 3]}"#,
            r#"{"timestamp": 1000, "input_length": 2, "output_length": 5, "hash_ids": [1]}"#,
            r#"{"timestamp": 2500, "input_length": 6, "output_length": 7, "hash_ids": [1, 2, 4]}"#,
        ]);
        // Hits with blocks of 2: row 2 reuses block 1 (2 tokens), row 3
        // block 1 (2), row 4 blocks 1 and 2 (4).
        assert_eq!(d.hit_tokens, vec![0.0, 2.0, 2.0, 4.0]);
        let w = d.windows(1000.0);
        assert_eq!(w.len(), 3);
        assert_eq!(
            w.iter().map(|x| x.requests).collect::<Vec<_>>(),
            vec![2, 1, 1]
        );
        assert_eq!(w[0].input_tokens, 7.0);
        assert_eq!(w[0].output_tokens, 4.0);
        assert_eq!(w[0].hit_tokens, 2.0);
        assert_eq!((w[2].start_s, w[2].input_tokens), (2.0, 6.0));
        // Requests per second at 1 s windows is the count itself; the hit
        // rate of window 0 is 2 / 7.
        let p = panels(&d, 1000.0, 4, 10);
        let Body::Lines(rps) = &p[0].body else {
            panic!()
        };
        assert_eq!(rps[0].points, vec![(0.0, 2.0), (1.0, 1.0), (2.0, 1.0)]);
        let Body::Lines(hit) = &p[3].body else {
            panic!()
        };
        assert_eq!(hit[0].points[0], (0.0, 2.0 / 7.0));
        // No sessions, no timeline.
        assert_eq!(p.len(), 6);
    }

    #[test]
    fn session_turns_follow_their_delays() {
        let d = data(&[
            r#"{"session_id": "a", "timestamp": 100, "input_length": 1}"#,
            r#"{"session_id": "b", "timestamp": 200, "input_length": 1}"#,
            r#"{"session_id": "a", "delay": 50, "input_length": 1}"#,
            r#"{"session_id": "a", "delay": 25, "input_length": 1}"#,
        ]);
        assert_eq!(d.sessions, vec![vec![100.0, 150.0, 175.0], vec![200.0]]);
        let p = panels(&d, 100.0, 4, 10);
        let Body::Timeline(lanes) = &p[6].body else {
            panic!()
        };
        assert_eq!(lanes[0], vec![0.0, 0.05, 0.075]);
    }
}
