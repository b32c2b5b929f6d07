//! `prefix`: shared system prompts. Each of G groups has a prefix of whole
//! blocks; a request's prompt is its group's prefix blocks followed by
//! private blocks, sized so the prefix is the share R of the prompt. A
//! prefix cache then serves about R of all input tokens (less the first
//! request of each group), which is what mc-analyze reports as the hit rate.

use super::arrival::Arrival;
use super::dist::LengthDist;
use super::rng::{Rng, Zipf};
use super::sink::{GenRequest, Sink};
use super::{Bound, Common, Ids};
use crate::error::{Error, Result};
use crate::options;

#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  mc-gen prefix --prefix-groups 16 --prefix-tokens 4096 --share-ratio 0.7 --num-requests 10000 | mc-analyze"
)]
pub struct PrefixArgs {
    /// Requests per second.
    #[arg(long, default_value_t = 10.0, value_name = "R", value_parser = options::positive)]
    pub qps: f64,

    #[command(flatten)]
    pub bound: Bound,

    /// Gaps: poisson, constant, or gamma:SHAPE.
    #[arg(long, default_value = "poisson", value_name = "KIND")]
    pub arrival: Arrival,

    /// Number of distinct shared prefixes (system prompts).
    #[arg(long, default_value_t = 8, value_name = "G")]
    pub prefix_groups: usize,

    /// Tokens of each group's prefix, drawn once per group (N or a
    /// distribution as for --isl); rounded down to whole blocks, since only
    /// whole blocks can be shared.
    #[arg(long, default_value = "2048", value_name = "DIST")]
    pub prefix_tokens: LengthDist,

    /// Share of each prompt that is its group's prefix (0 < R <= 1): the
    /// prompt is prefix / R tokens long.
    #[arg(long, default_value_t = 0.5, value_name = "R", value_parser = options::share)]
    pub share_ratio: f64,

    /// Choose groups by Zipf with exponent S (default: uniformly).
    #[arg(long, value_name = "S")]
    pub zipf: Option<f64>,

    /// Output length.
    #[arg(long, default_value = "128", value_name = "DIST")]
    pub osl: LengthDist,
}

/// Most prefix groups (each holds its ids in memory).
const MAX_GROUPS: usize = 1_000_000;

pub fn run(common: &Common, a: &PrefixArgs, sink: &mut Sink) -> Result<()> {
    if a.prefix_groups == 0 {
        return Err(Error::Usage("--prefix-groups must be at least 1".into()));
    }
    if a.prefix_groups > MAX_GROUPS {
        return Err(Error::Usage(format!(
            "--prefix-groups {} is above the limit of {MAX_GROUPS}",
            a.prefix_groups
        )));
    }
    let (duration, n_max) = a.bound.limits()?;
    a.bound.check_rate(a.qps, "--qps")?;
    let b = common.block_size;
    let mut group_rng = Rng::new(common.seed, 10);
    // Whole blocks per group prefix.
    let group_blocks: Vec<u64> = (0..a.prefix_groups)
        .map(|_| a.prefix_tokens.sample(&mut group_rng, 0) / b)
        .collect();
    if group_blocks.iter().all(|&n| n == 0) {
        return Err(Error::Usage(format!(
            "--prefix-tokens is below one block ({b} tokens): nothing can be shared"
        )));
    }
    let zipf = a.zipf.map(|s| Zipf::new(a.prefix_groups, s));
    let mut group_ids: Vec<Option<Vec<u64>>> = vec![None; a.prefix_groups];
    let mut ids = Ids::default();
    let mut arrivals = Rng::new(common.seed, 1);
    let mut choice = Rng::new(common.seed, 11);
    let mut lengths = Rng::new(common.seed, 2);
    let mut buf = Vec::new();
    let (mut t, mut i) = (0.0, 0);
    while t < duration && i < n_max {
        let g = match &zipf {
            Some(z) => z.sample(&mut choice),
            None => choice.below(a.prefix_groups as u64) as usize,
        };
        // A group's ids are named when first used (first-use numbering).
        let prefix = group_ids[g].get_or_insert_with(|| {
            let mut v = Vec::new();
            ids.push_fresh(group_blocks[g], &mut v);
            v
        });
        let shared = prefix.len() as u64 * b;
        let isl = ((shared as f64 / a.share_ratio).round() as u64).max(shared);
        crate::limits::tokens("input_length", isl).map_err(|e| {
            Error::Usage(format!(
                "--prefix-tokens / --share-ratio: {e}; raise --share-ratio or shorten the prefix"
            ))
        })?;
        buf.clear();
        buf.extend_from_slice(prefix);
        ids.push_fresh((isl - shared).div_ceil(b), &mut buf);
        let osl = a.osl.sample(&mut lengths, 1);
        let ts = t as u64;
        sink.emit(&GenRequest {
            timestamp: Some(ts),
            at_ms: ts,
            session_id: None,
            delay: None,
            input_length: isl,
            output_length: osl,
            hash_ids: &buf,
            graph: None,
        })?;
        i += 1;
        t += a.arrival.gap_ms(&mut arrivals, a.qps);
        super::check_next_time(
            t,
            i < n_max && !(t >= duration && duration.is_finite()),
            "--qps",
        )?;
    }
    Ok(())
}
