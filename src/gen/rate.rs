//! The rate-driven modes: `constant`, `synthetic` and `stat`. Each request
//! gets fresh hash ids (no sharing) covering its input length.

use std::path::PathBuf;

use super::arrival::{piecewise, Arrival};
use super::dist::{to_count, LengthDist};
use super::pattern::Pattern;
use super::rng::Rng;
use super::sink::{GenRequest, Sink};
use super::stat::{self, Scales, StatType};
use super::{blocks, Bound, Common, Ids};
use crate::error::{Error, Result};
use crate::options;

// Independent random streams of one seed.
const ARRIVALS: u64 = 1;
const LENGTHS: u64 = 2;
const CURVES: u64 = 3;

/// `--ramp-up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ramp {
    Linear,
    Exponential,
}

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen constant --qps 2.5 --duration-ms 60000 --isl lognormal:1024:0.6 | mc-analyze"
)]
pub struct ConstantArgs {
    /// Requests per second (fractions allowed); the final rate with --ramp-up.
    #[arg(long, value_name = "R", value_parser = options::positive)]
    pub qps: f64,

    #[command(flatten)]
    pub bound: Bound,

    /// Gaps: poisson, constant, or gamma:SHAPE (mean 1/rate; SHAPE < 1 is burstier).
    #[arg(long, default_value = "poisson", value_name = "KIND")]
    pub arrival: Arrival,

    /// Input length: N, const:N, uniform:A:B, normal:MEAN:STD, lognormal:MEDIAN:SIGMA
    /// (at least 1).
    #[arg(long, default_value = "1024", value_name = "DIST")]
    pub isl: LengthDist,

    /// Output length (same forms as --isl; at least 1).
    #[arg(long, default_value = "128", value_name = "DIST")]
    pub osl: LengthDist,

    /// Ramp the rate from --qps-start to --qps over the run (by time with
    /// --duration-ms, else by request count), as `vllm bench serve`.
    #[arg(long, value_enum, requires = "qps_start")]
    pub ramp_up: Option<Ramp>,

    /// The starting rate of --ramp-up.
    #[arg(long, value_name = "R", value_parser = options::positive)]
    pub qps_start: Option<f64>,
}

/// Writes one request with `isl` input tokens on fresh ids.
#[allow(clippy::too_many_arguments)]
fn emit_fresh(
    sink: &mut Sink,
    ids: &mut Ids,
    buf: &mut Vec<u64>,
    b: u64,
    t_ms: f64,
    isl: u64,
    osl: u64,
) -> Result<()> {
    for (name, v) in [("input length", isl), ("output length", osl)] {
        if v > crate::limits::MAX_ROW_TOKENS {
            return Err(Error::Usage(format!(
                "a generated {name} of {v} tokens is above the limit of {} tokens per row: \
                 lower the length options (--isl, --osl, the means, --input-scale, --output-scale)",
                crate::limits::MAX_ROW_TOKENS
            )));
        }
    }
    buf.clear();
    ids.push_fresh(blocks(isl, b), buf);
    let t = t_ms as u64;
    sink.emit(&GenRequest {
        timestamp: Some(t),
        at_ms: t,
        session_id: None,
        delay: None,
        input_length: isl,
        output_length: osl,
        hash_ids: buf,
        graph: None,
    })
}

pub fn constant(common: &Common, a: &ConstantArgs, sink: &mut Sink) -> Result<()> {
    let end_rate = a.qps;
    let (duration, n_max) = a.bound.limits()?;
    a.bound
        .check_rate(end_rate.max(a.qps_start.unwrap_or(0.0)), "--qps")?;
    let start_rate = match a.ramp_up {
        // clap: --ramp-up requires --qps-start, a positive number.
        Some(_) => a.qps_start.unwrap_or(end_rate),
        None => end_rate,
    };
    let rate_at = |t: f64, i: u64| -> f64 {
        let Some(ramp) = a.ramp_up else {
            return end_rate;
        };
        let progress = if duration.is_finite() {
            (t / duration).clamp(0.0, 1.0)
        } else {
            i as f64 / (n_max.saturating_sub(1)).max(1) as f64
        };
        match ramp {
            Ramp::Linear => start_rate + (end_rate - start_rate) * progress,
            Ramp::Exponential => start_rate * libm::pow(end_rate / start_rate, progress),
        }
    };
    let mut arrivals = Rng::new(common.seed, ARRIVALS);
    let mut lengths = Rng::new(common.seed, LENGTHS);
    let (mut ids, mut buf) = (Ids::default(), Vec::new());
    // The first request goes at 0, as a benchmark client starts.
    let mut t = 0.0;
    let mut i = 0;
    while t < duration && i < n_max {
        let isl = a.isl.sample(&mut lengths, 1);
        let osl = a.osl.sample(&mut lengths, 1);
        emit_fresh(sink, &mut ids, &mut buf, common.block_size, t, isl, osl)?;
        i += 1;
        t += a.arrival.gap_ms(&mut arrivals, rate_at(t, i));
        super::check_next_time(
            t,
            i < n_max && !(t >= duration && duration.is_finite()),
            "--qps",
        )?;
    }
    Ok(())
}

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen synthetic --traffic-pattern quick_rising --prompt-len-pattern severe_fluctuation --duration-ms 600000 --interval-ms 10000"
)]
pub struct SyntheticArgs {
    /// Requests-per-second pattern: quick_rising, slow_rising,
    /// slight_fluctuation, severe_fluctuation, constant, or a JSON config
    /// (file or inline) {"fluctuate", "mean", "noise", "period_len_ms", "only_rise"}.
    #[arg(long, value_name = "PATTERN")]
    pub traffic_pattern: String,

    /// Prompt-length pattern (same forms); default: --isl.
    #[arg(long, value_name = "PATTERN")]
    pub prompt_len_pattern: Option<String>,

    /// Completion-length pattern (same forms); default: --osl.
    #[arg(long, value_name = "PATTERN")]
    pub completion_len_pattern: Option<String>,

    /// Mean of a traffic preset (requests per second).
    #[arg(long, default_value_t = 6.0, value_name = "R")]
    pub traffic_mean: f64,

    /// Mean of a prompt-length preset (tokens).
    #[arg(long, default_value_t = 1024.0, value_name = "N")]
    pub prompt_len_mean: f64,

    /// Mean of a completion-length preset (tokens).
    #[arg(long, default_value_t = 1024.0, value_name = "N")]
    pub completion_len_mean: f64,

    /// Input length when no prompt-length pattern is given.
    #[arg(long, default_value = "1024", value_name = "DIST")]
    pub isl: LengthDist,

    /// Output length when no completion-length pattern is given.
    #[arg(long, default_value = "128", value_name = "DIST")]
    pub osl: LengthDist,

    /// Length of the run.
    #[arg(long, default_value_t = 60_000, value_name = "MS")]
    pub duration_ms: u64,

    /// One pattern step (the rate and lengths are constant within it).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub interval_ms: u64,

    /// Gaps within a step: poisson, constant, or gamma:SHAPE.
    #[arg(long, default_value = "poisson", value_name = "KIND")]
    pub arrival: Arrival,
}

pub fn synthetic(common: &Common, a: &SyntheticArgs, sink: &mut Sink) -> Result<()> {
    if a.interval_ms == 0 || a.duration_ms == 0 {
        return Err(Error::Usage(
            "--interval-ms and --duration-ms must be at least 1".into(),
        ));
    }
    let d = a.duration_ms as f64;
    // AIBrix's step count: duration // interval + 1.
    let steps = a.duration_ms / a.interval_ms + 1;
    if steps > crate::limits::MAX_WINDOWS {
        return Err(Error::Usage(format!(
            "--duration-ms {} / --interval-ms {} gives {steps} windows, above the limit of {}; \
             raise --interval-ms",
            a.duration_ms,
            a.interval_ms,
            crate::limits::MAX_WINDOWS
        )));
    }
    let steps = steps as usize;
    let mut curves = Rng::new(common.seed, CURVES);
    let rates =
        Pattern::parse(&a.traffic_pattern, a.traffic_mean, d)?.curve(steps, 0.0, &mut curves);
    let isl_curve = match &a.prompt_len_pattern {
        Some(p) => Some(Pattern::parse(p, a.prompt_len_mean, d)?.curve(steps, 1.0, &mut curves)),
        None => None,
    };
    let osl_curve = match &a.completion_len_pattern {
        Some(p) => {
            Some(Pattern::parse(p, a.completion_len_mean, d)?.curve(steps, 1.0, &mut curves))
        }
        None => None,
    };
    let mut arrivals = Rng::new(common.seed, ARRIVALS);
    let mut lengths = Rng::new(common.seed, LENGTHS);
    let (mut ids, mut buf) = (Ids::default(), Vec::new());
    let b = common.block_size;
    piecewise(
        &rates,
        a.interval_ms as f64,
        a.arrival,
        &mut arrivals,
        |t, w| {
            if t >= d {
                return Ok(false);
            }
            let isl = match &isl_curve {
                Some(c) => to_count(c[w]),
                None => a.isl.sample(&mut lengths, 1),
            };
            let osl = match &osl_curve {
                Some(c) => to_count(c[w]),
                None => a.osl.sample(&mut lengths, 1),
            };
            emit_fresh(sink, &mut ids, &mut buf, b, t, isl, osl)?;
            Ok(true)
        },
    )
}

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen stat --traffic-file qps.csv --prompt-len-file in.csv --completion-len-file out.csv --qps-scale 2"
)]
pub struct StatArgs {
    /// Which Grafana export layout the files have.
    #[arg(long, value_enum, default_value_t = StatType::Maas)]
    pub stat_type: StatType,

    /// Request rates per window (maas: Time,Total,Success,4xx Error[,5xx
    /// Error], Success is the rate; cloudide: Time in epoch ms and one rate column).
    #[arg(long, value_name = "CSV")]
    pub traffic_file: PathBuf,

    /// Prompt lengths (maas: Time,P50,P70,P90,P99; cloudide: the byte file
    /// with recv_bytes… and sent_bytes… columns).
    #[arg(long, value_name = "CSV")]
    pub prompt_len_file: PathBuf,

    /// Completion lengths (maas: Time,P50,P70,P95,P99; unused by cloudide).
    #[arg(long, value_name = "CSV")]
    pub completion_len_file: Option<PathBuf>,

    /// Divide every rate by this.
    #[arg(long, default_value_t = 1.0, value_name = "X", value_parser = options::positive)]
    pub qps_scale: f64,

    /// Divide every prompt length by this.
    #[arg(long, default_value_t = 1.0, value_name = "X", value_parser = options::positive)]
    pub input_scale: f64,

    /// Divide every completion length by this.
    #[arg(long, default_value_t = 1.0, value_name = "X", value_parser = options::positive)]
    pub output_scale: f64,

    /// Stop at this time (default: the end of the last window).
    #[arg(long, value_name = "MS")]
    pub duration_ms: Option<u64>,

    /// Gaps within a window: poisson, constant, or gamma:SHAPE.
    #[arg(long, default_value = "poisson", value_name = "KIND")]
    pub arrival: Arrival,
}

pub fn stat(common: &Common, a: &StatArgs, sink: &mut Sink) -> Result<()> {
    let scales = Scales {
        qps: a.qps_scale,
        input: a.input_scale,
        output: a.output_scale,
    };
    let (windows, window_ms) = stat::read(
        a.stat_type,
        &a.traffic_file,
        &a.prompt_len_file,
        a.completion_len_file.as_deref(),
        scales,
    )?;
    if window_ms <= 0.0 {
        return Err(Error::Input(format!(
            "{}: the rows share one Time; windows need distinct times",
            a.traffic_file.display()
        )));
    }
    // Windows on a regular grid from the first one; a gap in the export is
    // a window without requests.
    let n = (windows.last().map_or(0.0, |w| w.start_ms) / window_ms).round() + 1.0;
    if n.is_nan() || n > crate::limits::MAX_WINDOWS as f64 {
        return Err(Error::Input(format!(
            "{}: the rows span {n:e} windows of {window_ms} ms, above the limit of {} (check the Time column)",
            a.traffic_file.display(),
            crate::limits::MAX_WINDOWS
        )));
    }
    let n = n as usize;
    let mut rates = vec![0.0; n];
    let mut which = vec![usize::MAX; n];
    for (k, w) in windows.iter().enumerate() {
        let slot = (w.start_ms / window_ms).round() as usize;
        if slot < n {
            rates[slot] = w.rate;
            which[slot] = k;
        }
    }
    let end = a.duration_ms.map_or(f64::INFINITY, |d| d as f64);
    let mut arrivals = Rng::new(common.seed, ARRIVALS);
    let mut lengths = Rng::new(common.seed, LENGTHS);
    let (mut ids, mut buf) = (Ids::default(), Vec::new());
    let b = common.block_size;
    piecewise(&rates, window_ms, a.arrival, &mut arrivals, |t, slot| {
        if t >= end {
            return Ok(false);
        }
        let w = &windows[which[slot]];
        let isl = to_count(lengths.lognormal(w.input.mu, w.input.sigma)).max(1);
        let osl = to_count(lengths.lognormal(w.output.mu, w.output.sigma)).max(1);
        emit_fresh(sink, &mut ids, &mut buf, b, t, isl, osl)?;
        Ok(true)
    })
}
