//! `mc-scale`: AIPerf's trace synthesis (speedup and length multipliers) as a filter.
//!
//! Time and output-length scaling touch one record at a time and stream. The
//! prefix and prompt multipliers need to know which ids are shared anywhere in
//! the trace, so they read the input twice (`whole`: the ids
//! counted in one table, then the rows rewritten). The delta form
//! (`transform::delta`) and the samples (`transform::sample`) are jobs of
//! their own behind the same options.

use crate::blocks::{self, BlockSize, DEFAULT_BLOCK_SIZE};
use crate::error::{Error, RecordError, Result};
use crate::filter::{self, Ctx, Emit, IoArgs, Step};
use crate::options;
use crate::record::{self, Edit, Field, Number, Record};
use crate::transform::{delta, sample};

pub mod counts;
pub mod runs;
pub mod whole;

pub use counts::IdCounts;
use runs::IdRuns;

/// Rescale a Mooncake trace: arrival speed, shared-prefix length, unique-prompt
/// length and answer length (AIPerf's trace synthesis, as a filter).
///
/// Reads JSONL records on stdin (or --input) and writes them on stdout (or
/// --output). Only the changed values are rewritten; everything else in a line
/// is kept byte for byte, and with no options the output equals the input.
///
/// Shared ids are ids that occur at least twice in the whole input; a row's
/// core prefix is its leading run of shared ids, the rest is its unique
/// prompt. --speedup and --output-len-multiplier stream in constant memory.
/// --prefix-len-multiplier and --prompt-len-multiplier need the id counts of
/// the whole trace: the input is read twice (a pipe is copied to a temporary
/// file in $TMPDIR as it is read), in memory of the distinct ids only.
///
/// Two more jobs, each a run of its own: --to-delta / --from-delta convert
/// to and from Dynamo's `mooncake-delta` rows (a later turn carries only
/// its new input), and --sample-sessions / --sample-rows keep a seeded
/// fraction of the sessions, each whole, or of the rows without one.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    after_help = "Examples:
  mc-scale --speedup 2 < trace.jsonl > fast.jsonl
  mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5 < trace.jsonl | mc-analyze
  mc-scale --to-delta < trace.jsonl > dynamo-delta.jsonl
  mc-scale --sample-sessions 0.1 --seed 7 < trace.jsonl > tenth.jsonl"
)]
pub struct ScaleArgs {
    /// Replay R times faster: timestamps become trunc(t / R) (AIPerf's rule),
    /// delays and an agent graph's tool waits (`tool_wait_ms`) are divided
    /// by R (integer values truncated) unless --keep-delays; graph edges
    /// (`request_id`, `wait_for`, `branches`) are kept as they are.
    /// (AIPerf's name, --synthesis-speedup-ratio, is accepted too.)
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "R",
        alias = "synthesis-speedup-ratio",
        value_parser = options::positive
    )]
    pub speedup: f64,

    /// Leave `delay` and `tool_wait_ms` values unchanged under --speedup.
    #[arg(long)]
    pub keep_delays: bool,

    /// Cap every think time (`delay`) at MS, before --speedup divides it;
    /// the summary line counts the delays cut. (mc-analyze and mc-import
    /// name delays over an hour.)
    #[arg(long, value_name = "MS", value_parser = crate::delays::parse_max_delay)]
    pub max_delay: Option<f64>,

    /// Scale each row's shared prefix: P > 1 turns each prefix id h into
    /// h*k … h*k+k-1 (k = floor(P)) and adds private blocks for the fraction;
    /// P < 1 keeps the first max(1, floor(n*P)) prefix blocks.
    #[arg(
        long = "prefix-len-multiplier",
        default_value_t = 1.0,
        value_name = "P",
        alias = "synthesis-prefix-len-multiplier",
        value_parser = options::positive
    )]
    pub prefix_mult: f64,

    /// Scale each row's unique prompt to floor(len * Q) tokens, on fresh ids.
    #[arg(
        long = "prompt-len-multiplier",
        default_value_t = 1.0,
        value_name = "Q",
        alias = "synthesis-prompt-len-multiplier",
        value_parser = options::non_negative
    )]
    pub prompt_mult: f64,

    /// output_length becomes max(1, round_half_even(osl * O)).
    #[arg(
        long = "output-len-multiplier",
        default_value_t = 1.0,
        value_name = "O",
        value_parser = options::non_negative
    )]
    pub output_mult: f64,

    /// Tokens per hash id, or `auto` (the default): the one power of two
    /// every row allows (named on stderr; an error when the rows allow
    /// several or none). Used only by the prefix and prompt multipliers,
    /// which check every row against it.
    #[arg(long = "block-size", default_value = "auto", value_name = "B|auto")]
    pub block: BlockSize,

    /// Write Dynamo's `mooncake-delta` form: each later turn of a session
    /// carries only its new input (`input_length` the new tokens,
    /// `hash_ids` exactly ceil(new / B) ids), the ids of the blocks that
    /// held the previous answer in `context_ids` (Dynamo ignores it; it
    /// makes --from-delta give the same bytes back). A turn that does not
    /// extend its session's prompt and answer, or an agent-graph call, is
    /// an error naming its line. In order; memory O(sessions).
    #[arg(long, conflicts_with_all = SCALING)]
    pub to_delta: bool,

    /// Read Dynamo's `mooncake-delta` form back into full rows: a later
    /// turn's prompt is the previous prompt, its answer and the new
    /// tokens; its ids the previous prompt's full blocks, `context_ids`
    /// (fresh ids from 2^48 when absent) and the delta's ids. In order;
    /// memory O(the sessions' prompts' ids).
    #[arg(long, conflicts_with_all = SCALING, conflicts_with = "to_delta")]
    pub from_delta: bool,

    /// Keep a fraction F of sessions, each whole (never part of one),
    /// chosen by a seeded hash of its session_id: the same sessions in
    /// every file or shard sampled with the same --seed. Rows without a
    /// session_id are drawn one by one at the same rate (see
    /// --sample-rows). stderr names the sessions, rows and token share
    /// kept. Streams; the count of distinct sessions holds 8 bytes each.
    #[arg(long, value_name = "F", value_parser = options::fraction, conflicts_with_all = SCALING, conflicts_with_all = ["to_delta", "from_delta"])]
    pub sample_sessions: Option<f64>,

    /// Keep a fraction F of the rows without a session_id, each drawn by
    /// a seeded hash of its index (agent-graph calls without one are
    /// drawn together); sessions are kept whole at --sample-sessions (all
    /// of them without it).
    #[arg(long, value_name = "F", value_parser = options::fraction, conflicts_with_all = SCALING, conflicts_with_all = ["to_delta", "from_delta"])]
    pub sample_rows: Option<f64>,

    /// Seed of --sample-sessions and --sample-rows.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,

    /// The block size in use: `--block-size`, or the one detected.
    #[arg(skip = DEFAULT_BLOCK_SIZE)]
    pub block_size: u64,

    #[command(flatten)]
    pub io: IoArgs,
}

impl Default for ScaleArgs {
    fn default() -> Self {
        ScaleArgs {
            speedup: 1.0,
            keep_delays: false,
            max_delay: None,
            prefix_mult: 1.0,
            prompt_mult: 1.0,
            output_mult: 1.0,
            block: BlockSize::Auto,
            to_delta: false,
            from_delta: false,
            sample_sessions: None,
            sample_rows: None,
            seed: 0,
            block_size: DEFAULT_BLOCK_SIZE,
            io: IoArgs::default(),
        }
    }
}

impl ScaleArgs {
    /// The prefix and prompt multipliers need the id counts of the whole trace.
    pub fn needs_whole_input(&self) -> bool {
        self.prefix_mult != 1.0 || self.prompt_mult != 1.0
    }
}

/// The tool's name, for its messages and `--version`.
pub const TOOL: &str = "mc-scale";

/// The rescaling options: a delta conversion or a sample is a run of its
/// own (chain runs in a pipe).
const SCALING: [&str; 6] = [
    "speedup",
    "keep_delays",
    "max_delay",
    "prefix_mult",
    "prompt_mult",
    "output_mult",
];

/// Runs `mc-scale` from `args.io` with `args`.
pub fn run(args: &ScaleArgs) -> Result<()> {
    let tool = TOOL;
    let io = &args.io;
    if args.to_delta || args.from_delta {
        let dir = if args.to_delta {
            delta::Direction::ToDelta
        } else {
            delta::Direction::FromDelta
        };
        let (_, _, step) =
            filter::run_filter_sized(tool, io, args.block, |b| delta::DeltaStep::new(dir, b))?;
        eprintln!("{tool}: {}", step.note());
        return Ok(());
    }
    if args.sample_sessions.is_some() || args.sample_rows.is_some() {
        let plan = sample::SamplePlan::new(args.sample_sessions, args.sample_rows, args.seed);
        let mut step = sample::SampleStep::new(plan);
        filter::run_steps(tool, io, &mut step)?;
        eprintln!("{tool}: {}", step.note());
        return Ok(());
    }
    if !args.needs_whole_input() {
        let mut scaler = RowScaler::new(args.clone());
        let counts = filter::run_steps(tool, io, &mut scaler)?;
        report_changes(tool, &counts);
        scaler.report_capped(tool);
        return Ok(());
    }

    whole::run(tool, args)
}

/// The one-line summary, when anything changed.
fn report_changes(tool: &str, counts: &filter::RowCounts) {
    if counts.any_change() {
        eprintln!("{tool}: {} of {} rows changed", counts.changed, counts.rows);
    }
}

/// Applies the per-row rules. Holds scratch buffers so rows allocate nothing.
pub struct RowScaler {
    opts: ScaleArgs,
    /// A row's core prefix (the multipliers).
    core: Vec<u64>,
    /// A row's new ids (the multipliers).
    runs: IdRuns,
    values: [Vec<u8>; 6],
    /// `--max-delay`: the delays cut so far.
    cap: Option<crate::delays::DelayCap>,
    /// `--speedup` is the only option that changes a row: a row with no
    /// wait to scale (`--keep-delays`, or no `delay` or `tool_wait_ms`)
    /// changes in its timestamp alone ([`RowScaler::timestamp_only`]).
    timestamp_alone: bool,
}

/// The streaming options (speedup, output length) are a function of the
/// row alone: chunks of rows scale on any thread.
impl Step for RowScaler {
    // Inlined into the loop, with the timestamp's path: as calls their
    // cost moved with how the release build placed unrelated code
    // (decision 0039, "2026-11-27, later").
    #[inline(always)]
    fn apply(
        &mut self,
        rec: &Record<'_>,
        _cx: &Ctx,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        // Here, before the call: `apply`'s own entry and exit (its edit
        // lists, six scratch buffers) cost a row more than this path
        // (cachegrind, decision 0039).
        if self.timestamp_alone && self.timestamp_only(rec, out)? {
            return Ok(Emit::Written);
        }
        RowScaler::apply(self, rec, None, out)
    }

    fn fork(&self) -> Self {
        RowScaler::new(self.opts.clone())
    }

    fn join(&mut self, fork: Self) {
        if let (Some(c), Some(f)) = (&mut self.cap, fork.cap) {
            c.capped += f.capped;
        }
    }
}

impl RowScaler {
    pub fn new(opts: ScaleArgs) -> Self {
        RowScaler {
            cap: opts.max_delay.map(crate::delays::DelayCap::new),
            timestamp_alone: opts.speedup != 1.0
                && opts.output_mult == 1.0
                && opts.max_delay.is_none(),
            opts,
            core: Vec::new(),
            runs: IdRuns::default(),
            values: Default::default(),
        }
    }

    /// `--max-delay`'s line on stderr: how many delays it cut.
    pub fn report_capped(&self, tool: &str) {
        if let Some(c) = &self.cap {
            eprintln!("{tool}: {}", c.note());
        }
    }

    /// Writes `rec` scaled into `out`. `prefix` is the whole-trace plan when
    /// the prefix or prompt multipliers are active.
    #[inline(never)]
    pub fn apply(
        &mut self,
        rec: &Record<'_>,
        prefix: Option<&mut PrefixPlan<'_>>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<Emit, RecordError> {
        if prefix.is_none() && self.timestamp_alone && self.timestamp_only(rec, out)? {
            return Ok(Emit::Written);
        }
        let [ts, delay, osl, ids_text, isl, tool_wait] = &mut self.values;
        let mut edits: [Option<(Field, &[u8])>; 6] = [None; 6];
        let o = &self.opts;

        if o.speedup != 1.0 {
            if let Some(t) = rec.number(Field::Timestamp)? {
                ts.clear();
                let scaled = speed_up_timestamp(t, o.speedup, "--speedup")?;
                record::write_number(scaled, ts);
                edits[0] = Some((Field::Timestamp, ts));
            }
        }
        let scale_delay = o.speedup != 1.0 && !o.keep_delays;
        if scale_delay || self.cap.is_some() {
            if let Some(d) = rec.number(Field::Delay)? {
                let capped = match &mut self.cap {
                    Some(c) if d.as_f64() > c.max_ms => {
                        c.apply(d.as_f64());
                        Some(capped_delay(d, c.max_ms))
                    }
                    _ => None,
                };
                let d = capped.unwrap_or(d);
                if scale_delay || capped.is_some() {
                    let d = if scale_delay {
                        speed_up_delay(d, o.speedup, "--speedup")?
                    } else {
                        d
                    };
                    delay.clear();
                    record::write_number(d, delay);
                    edits[1] = Some((Field::Delay, delay));
                }
            }
        }
        // A call's tool time shrinks with its think time, so a sped-up
        // agent keeps the shape of its waits (docs/guide/agents.md).
        // `has` first: most rows have no tool wait, and the lookup is a
        // call per row otherwise (cachegrind).
        if scale_delay && rec.has(Field::ToolWaitMs) && write_tool_wait(rec, o.speedup, tool_wait)?
        {
            edits[5] = Some((Field::ToolWaitMs, tool_wait));
        }
        if o.output_mult != 1.0 && write_output_length(rec, o.output_mult, osl)? {
            edits[2] = Some((Field::OutputLength, osl));
        }
        if let Some(plan) = prefix {
            let ids = (&mut self.core, &mut self.runs);
            if let Some(n) = rescale_prompt(rec, plan, o, ids, ids_text, isl)? {
                edits[3] = Some((Field::HashIds, &ids_text[..n]));
                edits[4] = Some((Field::InputLength, isl));
            }
        }

        // On the stack: a Vec here was an allocation and a free a row, 4%
        // of `--speedup 2`'s instructions (cachegrind,
        // docs/decisions/0029-ids-scanned-sixty-four-bytes.md).
        let mut list: [Edit<'_>; 6] = std::array::from_fn(|_| Edit {
            field: Field::Timestamp,
            value: &[],
        });
        let mut n = 0;
        for &(field, value) in edits.iter().flatten() {
            list[n] = Edit { field, value };
            n += 1;
        }
        if n == 0 {
            return Ok(Emit::Unchanged);
        }
        rec.write_edited(&mut list[..n], out);
        Ok(Emit::Written)
    }
}

impl RowScaler {
    /// `--speedup` on a row when the timestamp is the only value it
    /// changes (`timestamp_alone`, and no delay or tool wait to scale):
    /// the row written at once, the new timestamp between the line's bytes
    /// around it, as [`Record::write_edited`] writes a one-value edit;
    /// whether it was. `false` for any other row, which `apply` handles.
    /// The general path's edit lists, sort and scratch buffer were ~300
    /// instructions a row (cachegrind,
    /// docs/decisions/0039-filters-under-five-instructions-a-byte.md).
    #[inline(always)]
    fn timestamp_only(
        &self,
        rec: &Record<'_>,
        out: &mut Vec<u8>,
    ) -> std::result::Result<bool, RecordError> {
        let o = &self.opts;
        if !o.keep_delays && (rec.has(Field::Delay) || rec.has(Field::ToolWaitMs)) {
            return Ok(false);
        }
        // A timestamp of up to 8 digits (every one below 10^8 ms, 27
        // hours) read, scaled and written here, inlined; any other the
        // general way, in a call.
        let Some((span, t)) = rec.short_uint(Field::Timestamp) else {
            return timestamp_general(rec, o.speedup, out);
        };
        // `t` is below 10^8 (exact as `f64`) and the speedup positive:
        // the scaled value is at least 0.
        match scaled_time(t as f64, o.speedup, "--speedup")? {
            v @ 0.. => rec.write_with_uint(span, v as u64, out),
            v => write_timestamp(rec, span, Number::Int(v), out),
        }
        Ok(true)
    }
}

/// [`RowScaler::timestamp_only`] for any other timestamp (longer, a
/// fraction, an exponent), or `false` for a row without one.
#[inline(never)]
fn timestamp_general(
    rec: &Record<'_>,
    speedup: f64,
    out: &mut Vec<u8>,
) -> std::result::Result<bool, RecordError> {
    let (Some(span), Some(t)) = (rec.span(Field::Timestamp), rec.number(Field::Timestamp)?) else {
        return Ok(false);
    };
    let scaled = speed_up_timestamp(t, speedup, "--speedup")?;
    write_timestamp(rec, span, scaled, out);
    Ok(true)
}

/// `rec` with the timestamp at `span` replaced by `t`, as
/// [`Record::write_edited`] writes it.
#[inline(never)]
fn write_timestamp(rec: &Record<'_>, span: record::Span, t: Number, out: &mut Vec<u8>) {
    let line = rec.line();
    out.extend_from_slice(&line[..span.start]);
    record::write_number(t, out);
    out.extend_from_slice(&line[span.end..]);
}

/// Writes `rec`'s `tool_wait_ms` sped up by `speedup` into `buf`; whether
/// there was one. This and the next two stay out of `apply`: inlined, they
/// made its common path (`--speedup` alone) cost more (cachegrind).
#[inline(never)]
fn write_tool_wait(
    rec: &Record<'_>,
    speedup: f64,
    buf: &mut Vec<u8>,
) -> std::result::Result<bool, RecordError> {
    let Some(w) = rec.number(Field::ToolWaitMs)? else {
        return Ok(false);
    };
    buf.clear();
    let w = speed_up_wait("tool_wait_ms", w, speedup, "--speedup")?;
    record::write_number(w, buf);
    Ok(true)
}

/// Writes `rec`'s `output_length` times `mult` (at least 1) into `buf`;
/// whether there was one.
#[inline(never)]
fn write_output_length(
    rec: &Record<'_>,
    mult: f64,
    buf: &mut Vec<u8>,
) -> std::result::Result<bool, RecordError> {
    let Some(n) = rec.uint(Field::OutputLength)? else {
        return Ok(false);
    };
    buf.clear();
    let scaled = (n as f64 * mult).round_ties_even().max(1.0);
    let scaled = whole("output_length", scaled, "--output-len-multiplier")?;
    record::write_number(Number::Int(scaled), buf);
    Ok(true)
}

/// Rescales `rec`'s prompt by `plan`: its new `hash_ids` into `ids_text`
/// (the first bytes of it: their length is returned) and `input_length`
/// into `isl` (`core` and `runs` are scratch: the row's core prefix and
/// its new ids); `None` when the row has no ids to rescale.
///
/// Only the core prefix is read from the array (the first pass checked
/// every row, and the scanner's shape has the count of ids): the ids after
/// it are dropped unread.
#[inline(never)]
fn rescale_prompt(
    rec: &Record<'_>,
    plan: &mut PrefixPlan<'_>,
    o: &ScaleArgs,
    (core, runs): (&mut Vec<u64>, &mut IdRuns),
    ids_text: &mut Vec<u8>,
    isl: &mut Vec<u8>,
) -> std::result::Result<Option<usize>, RecordError> {
    let (Some(shape), Some(raw)) = (rec.hash_ids_shape()?, rec.raw(Field::HashIds)) else {
        return Ok(None);
    };
    if shape.count == 0 {
        return Ok(None);
    }
    let len = rec.uint(Field::InputLength)?.ok_or_else(|| {
        RecordError::field("input_length", "missing; it is needed to rescale hash_ids")
    })?;
    core.clear();
    if shape.longest_digits <= 19 {
        let counts = plan.counts;
        runs::ids_while(raw, |h| {
            let shared = counts.is_shared(h);
            if shared {
                core.push(h);
            }
            shared
        });
    } else {
        // An id of 20 digits may not fit 64 bits: the decoder says so.
        rec.hash_ids_into(core)?;
        let shared = core
            .iter()
            .take_while(|&&h| plan.counts.is_shared(h))
            .count();
        core.truncate(shared);
    }
    let new_len = plan.rescale_row(core, shape.count as u64, len, o, runs)?;
    let n = runs.write_into(raw, ids_text);
    isl.clear();
    record::write_number(Number::UInt(new_len), isl);
    Ok(Some(n))
}

/// The time rule of `--speedup R` (shared with mc-merge's `--scale-rate`):
/// a timestamp becomes `trunc(t / R)` (AIPerf's `int(t / R)`), an integer
/// always. `option` names the flag in the error when the result is too
/// large to write exactly.
pub fn speed_up_timestamp(
    t: Number,
    r: f64,
    option: &str,
) -> std::result::Result<Number, RecordError> {
    scaled_time(t.as_f64(), r, option).map(Number::Int)
}

/// [`speed_up_timestamp`]'s rule on the value as `f64`: `trunc(t / r)`.
#[inline(always)]
fn scaled_time(t: f64, r: f64, option: &str) -> std::result::Result<i64, RecordError> {
    let v = t / r;
    // What `whole` gives, without the call to libm's `trunc` (no SSE4.1
    // in the x86_64 baseline): in this range `as` truncates toward zero.
    if v.abs() <= MAX_EXACT_INT {
        return Ok(v as i64);
    }
    whole_timestamp(v, option)
}

/// [`scaled_time`] past 2^53: an error, out of its inlined path.
#[cold]
#[inline(never)]
fn whole_timestamp(v: f64, option: &str) -> std::result::Result<i64, RecordError> {
    whole("timestamp", v, option)
}

/// `--max-delay MS` on a delay over it: an integer delay stays an integer
/// when the cap is one.
fn capped_delay(d: Number, max_ms: f64) -> Number {
    match d {
        Number::Int(_) | Number::UInt(_) if max_ms.fract() == 0.0 && max_ms <= i64::MAX as f64 => {
            Number::Int(max_ms as i64)
        }
        _ => Number::Float(max_ms),
    }
}

/// The delay rule of `--speedup R`: an integer delay becomes `trunc(d / R)`,
/// a fractional one `d / R`, so a session's think time shrinks with its
/// arrivals.
pub fn speed_up_delay(d: Number, r: f64, option: &str) -> std::result::Result<Number, RecordError> {
    speed_up_wait("delay", d, r, option)
}

/// The same rule for any wait of field `field` (`delay`, `tool_wait_ms`).
pub fn speed_up_wait(
    field: &str,
    d: Number,
    r: f64,
    option: &str,
) -> std::result::Result<Number, RecordError> {
    match d {
        Number::Int(_) | Number::UInt(_) => whole(field, d.as_f64() / r, option).map(Number::Int),
        Number::Float(f) => match f / r {
            v if v.is_finite() => Ok(Number::Float(v)),
            v => Err(too_big(field, v, option)),
        },
    }
}

/// Most tokens a rescaled row may hold: the one row limit of every tool
/// (`limits::MAX_ROW_TOKENS`).
pub use crate::limits::MAX_ROW_TOKENS;

/// Largest integer a scaled value may become: JSON readers that parse
/// numbers as doubles (jq, Python's json for floats, JavaScript) keep
/// integers exact up to 2^53.
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// `v` truncated to an integer, or an error naming the field and the option
/// when it is too large to write exactly (never a silent clamp).
fn whole(field: &str, v: f64, option: &str) -> std::result::Result<i64, RecordError> {
    let t = v.trunc();
    if t.is_finite() && t.abs() <= MAX_EXACT_INT {
        Ok(t as i64)
    } else {
        Err(too_big(field, v, option))
    }
}

fn too_big(field: &str, v: f64, option: &str) -> RecordError {
    RecordError::field(
        field,
        format!("scaled to {v:.3e}, too large to write exactly (above 2^53); check {option}"),
    )
}

/// The whole-trace facts the prefix and prompt multipliers need, and the
/// counter of fresh ids.
pub struct PrefixPlan<'c> {
    counts: &'c IdCounts,
    /// `floor(P)` when P > 1, else 1: each core-prefix id h becomes `h*k .. h*k+k-1`.
    k: u64,
    /// Next fresh id: above every input id and every stretched id.
    next_fresh: u64,
}

impl<'c> PrefixPlan<'c> {
    pub fn new(counts: &'c IdCounts, prefix_mult: f64) -> Result<Self> {
        let k = if prefix_mult > 1.0 {
            prefix_mult.floor() as u64
        } else {
            1
        };
        let (max_id, max_shared) = (counts.max_id(), counts.max_shared());
        let above_input = max_id.map_or(Some(0), |m| m.checked_add(1));
        let above_stretched =
            max_shared.map_or(Some(0), |m| m.checked_add(1).and_then(|m| m.checked_mul(k)));
        let next_fresh = above_input
            .zip(above_stretched)
            .map(|(a, b)| a.max(b))
            .ok_or_else(|| {
                // The ids are the data: the largest one leaves no room for
                // new ids above it (exit 65; the caller names its line).
                let id = match above_input {
                    None => max_id.unwrap_or(0),
                    Some(_) => max_shared.unwrap_or(0),
                };
                Error::Input(if k > 1 {
                    format!(
                        "--prefix-len-multiplier {prefix_mult}: hash id {id} times {k} does not \
                         fit 64 bits; renumber the ids (mc-roots --roots 1 numbers them from 0) \
                         or use a smaller multiplier"
                    )
                } else {
                    format!(
                        "hash id {id} leaves no room above it for the new ids the rescaling \
                         needs (64 bits); renumber the ids (mc-roots --roots 1 numbers them from 0)"
                    )
                })
            })?;
        Ok(PrefixPlan {
            counts,
            k,
            next_fresh,
        })
    }

    fn fresh(&mut self, n: u64, out: &mut IdRuns) -> std::result::Result<(), RecordError> {
        let end = self
            .next_fresh
            .checked_add(n)
            .ok_or_else(|| RecordError::field("hash_ids", "fresh ids would overflow 64 bits"))?;
        out.push_run(self.next_fresh, n);
        self.next_fresh = end;
        Ok(())
    }

    /// Fills `new_ids` with the core prefix `core_ids` (`prefix_tokens`
    /// tokens) stretched or cut by --prefix-len-multiplier, and returns its
    /// new token count.
    fn rescale_prefix(
        &mut self,
        core_ids: &[u64],
        prefix_tokens: u64,
        partial_tail: bool,
        o: &ScaleArgs,
        new_ids: &mut IdRuns,
    ) -> std::result::Result<u64, RecordError> {
        let b = o.block_size;
        let core = core_ids.len() as u64;
        let p = o.prefix_mult;
        if p > 1.0 {
            let k = self.k;
            for &h in core_ids {
                // Below `next_fresh`, which is (max shared + 1) * k.
                let base = h
                    .checked_mul(k)
                    .ok_or_else(|| RecordError::field("hash_ids", "id too large to stretch"))?;
                new_ids.push_run(base, k);
            }
            if partial_tail {
                // The last stretched id carries the partial tail. Fresh ids for
                // the fractional part of P would have to follow it and break
                // the block rule, so such rows are stretched by floor(P) only.
                Ok((new_ids.len() - 1) * b + (prefix_tokens - (core - 1) * b))
            } else {
                let target = (core as f64 * p).ceil() as u64;
                let extra = target.saturating_sub(core * k);
                self.fresh(extra, new_ids)?;
                Ok(new_ids.len() * b)
            }
        } else if p < 1.0 {
            // AIPerf keeps max(1, floor(n*P)) blocks; a row without a shared
            // prefix keeps none (AIPerf would grow it by one block).
            let keep = if core == 0 {
                0
            } else {
                ((core as f64 * p).floor() as u64).max(1)
            };
            for &h in &core_ids[..keep as usize] {
                new_ids.push_run(h, 1);
            }
            Ok(if keep == core {
                prefix_tokens
            } else {
                keep * b
            })
        } else {
            for &h in core_ids {
                new_ids.push_run(h, 1);
            }
            Ok(prefix_tokens)
        }
    }

    /// Rescales one row's prompt of `n` ids and `len` tokens: fills
    /// `new_ids` and returns the new input length.
    ///
    /// The row's core prefix `core_ids` is its leading run of shared ids
    /// (the caller reads them); its tokens are `min(len, core*B)`, so a row
    /// whose every block is shared and whose last block is partial keeps
    /// that partial tail (AIPerf aborts on such rows).
    fn rescale_row(
        &mut self,
        core_ids: &[u64],
        n: u64,
        len: u64,
        o: &ScaleArgs,
        new_ids: &mut IdRuns,
    ) -> std::result::Result<u64, RecordError> {
        let b = o.block_size;
        if len <= (n - 1).saturating_mul(b) {
            return Err(RecordError::field(
                "input_length",
                format!(
                    "{len} tokens cannot fill {n} hash ids at block size {b} (check --block-size)"
                ),
            ));
        }
        let core = core_ids.len() as u64;
        let prefix_tokens = len.min(core * b);
        // The core prefix ends in a partial block only when it is the whole row.
        let partial_tail = core > 0 && prefix_tokens < core * b;
        let prompt_tokens = len - prefix_tokens;

        // Bound the row before allocating its ids: a multiplier (or a
        // length) from input must not grow memory without limit.
        let new_prompt_tokens = (prompt_tokens as f64 * o.prompt_mult).floor();
        let stretched = (core as f64 * o.prefix_mult.max(1.0)).ceil() * b as f64;
        if new_prompt_tokens + stretched > MAX_ROW_TOKENS as f64 {
            return Err(RecordError::field(
                "input_length",
                format!(
                    "{len} tokens would become about {:.3e}, above the limit of {MAX_ROW_TOKENS} \
                     tokens a row (check --prefix-len-multiplier and --prompt-len-multiplier)",
                    new_prompt_tokens + stretched
                ),
            ));
        }
        let new_prompt_tokens = new_prompt_tokens as u64;

        new_ids.clear();
        let new_prefix_tokens =
            self.rescale_prefix(core_ids, prefix_tokens, partial_tail, o, new_ids)?;

        // AIPerf's int(prompt_len * Q), then fresh ids private to the row.
        self.fresh(blocks::blocks_for(new_prompt_tokens, b), new_ids)?;
        Ok(new_prefix_tokens + new_prompt_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_for<'c>(counts: &'c mut IdCounts, rows: &[&[u64]], p: f64) -> PrefixPlan<'c> {
        for r in rows {
            for &h in *r {
                counts.add(h);
            }
        }
        PrefixPlan::new(counts, p).unwrap()
    }

    /// `plan.rescale_row` on a whole row: its core prefix read as the
    /// second pass reads it; the new length and the new ids.
    fn rescale(
        plan: &mut PrefixPlan<'_>,
        row: &[u64],
        len: u64,
        o: &ScaleArgs,
    ) -> std::result::Result<(u64, Vec<u64>), RecordError> {
        let mut text = Vec::new();
        record::write_id_array(row, &mut text);
        let mut core = Vec::new();
        let counts = plan.counts;
        runs::ids_while(&text, |h| {
            let shared = counts.is_shared(h);
            if shared {
                core.push(h);
            }
            shared
        });
        let mut out = IdRuns::default();
        let new_len = plan.rescale_row(&core, row.len() as u64, len, o, &mut out)?;
        Ok((new_len, out.iter().collect()))
    }

    fn opts(p: f64, q: f64, b: u64) -> ScaleArgs {
        ScaleArgs {
            prefix_mult: p,
            prompt_mult: q,
            block_size: b,
            ..Default::default()
        }
    }

    // Block size 10 throughout; rows A = [0,1,2] len 25 and B = [0,1,3] len 30
    // share the core prefix [0,1] (20 tokens).
    #[test]
    fn prefix_doubling_interleaves_shared_ids() {
        let mut c = IdCounts::default();
        let rows: [&[u64]; 2] = [&[0, 1, 2], &[0, 1, 3]];
        let mut plan = plan_for(&mut c, &rows, 2.0);
        let o = opts(2.0, 1.0, 10);
        // Core [0,1] -> [0,1,2,3] (40 tokens); unique prompt 25-20 = 5 tokens
        // -> one fresh id. Fresh ids start above max(max id 3, (1+1)*2) = 4.
        assert_eq!(
            rescale(&mut plan, rows[0], 25, &o).unwrap(),
            (45, vec![0, 1, 2, 3, 4])
        );
        assert_eq!(
            rescale(&mut plan, rows[1], 30, &o).unwrap(),
            (50, vec![0, 1, 2, 3, 5])
        );
    }

    #[test]
    fn fractional_prefix_adds_private_ids() {
        let mut c = IdCounts::default();
        let rows: [&[u64]; 2] = [&[0, 1, 2], &[0, 1, 3]];
        let mut plan = plan_for(&mut c, &rows, 1.5);
        let o = opts(1.5, 1.0, 10);
        // k = 1; target ceil(2*1.5) = 3 blocks: [0, 1, fresh 4]; prompt 5 -> fresh 5.
        assert_eq!(
            rescale(&mut plan, rows[0], 25, &o).unwrap(),
            (35, vec![0, 1, 4, 5])
        );
    }

    #[test]
    fn squeeze_keeps_at_least_one_block_but_never_grows() {
        let mut c = IdCounts::default();
        let rows: [&[u64]; 3] = [&[0, 1, 2], &[0, 1, 3], &[7, 8]];
        let mut plan = plan_for(&mut c, &rows, 0.4);
        let o = opts(0.4, 1.0, 10);
        // floor(2*0.4) = 0 -> keep 1 block [0] (10 tokens) + prompt 5 -> fresh 9.
        assert_eq!(
            rescale(&mut plan, rows[0], 25, &o).unwrap(),
            (15, vec![0, 9])
        );
        // No shared prefix: AIPerf would add a phantom block; we keep 12 tokens.
        assert_eq!(
            rescale(&mut plan, rows[2], 12, &o).unwrap(),
            (12, vec![10, 11])
        );
    }

    #[test]
    fn all_shared_row_with_partial_tail_keeps_it() {
        // [0,1] appears twice, both rows 15 tokens: AIPerf aborts with
        // input_len (15) < prefix_len (20).
        let mut c = IdCounts::default();
        let rows: [&[u64]; 2] = [&[0, 1], &[0, 1]];
        let mut plan = plan_for(&mut c, &rows, 1.0);
        assert_eq!(
            rescale(&mut plan, rows[0], 15, &opts(1.0, 0.5, 10)).unwrap(),
            (15, vec![0, 1])
        );
        // P = 2: [0,1,2,3], the last carrying the 5-token tail: 3*10 + 5.
        let mut c = IdCounts::default();
        let mut plan = plan_for(&mut c, &rows, 2.5);
        assert_eq!(
            rescale(&mut plan, rows[0], 15, &opts(2.5, 1.0, 10)).unwrap(),
            (35, vec![0, 1, 2, 3])
        );
    }

    #[test]
    fn broken_rows_are_errors() {
        let mut c = IdCounts::default();
        let rows: [&[u64]; 1] = [&[0, 1, 2]];
        let mut plan = plan_for(&mut c, &rows, 2.0);
        let err = rescale(&mut plan, rows[0], 20, &opts(2.0, 1.0, 10)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "field `input_length`: 20 tokens cannot fill 3 hash ids at block size 10 (check --block-size)"
        );
    }
}
