//! One replay across many machines: `--shard I/N` replays only shard `I`
//! (0-based, `0 ≤ I < N`) of a plan every machine computes identically from
//! the trace alone, on the single run's schedule restricted to the shard.
//!
//! - Units: a session with all its turns (never split), or a row without
//!   a session. A unit's load is its rows' tokens (input asked for, as the
//!   prompt is built, plus output asked for).
//! - Assignment: longest processing time first. Units by load, heaviest
//!   first (ties: the earlier first row first), each to the shard with the
//!   least load so far (ties: fewer units, then the lower index).
//! - Schedule: a shard's part of the trace keeps the whole trace's zero and
//!   arrival sequence ([`Frame`]), so a row is due at the same time after
//!   the common start as in the single run; prompts depend on (hash ids,
//!   seed) only, so they are the single run's too.
//! - Digest: SHA-256 over the SHA-256 of the trace's bytes, a version tag,
//!   `N`, and every shard's row and token counts (little-endian u64s). Every
//!   shard writes it into its summary and result lines; mc-report merges
//!   only files that agree on it.
//! - `--start-at UNIX_MS`: every shard sleeps until that wall-clock instant
//!   and starts its clock there; one that cannot start within
//!   `--start-grace-ms` exits with [`crate::error::ExitCode::TempFail`] (75).
//!
//! [`emit`] writes the Slurm batch script and the Kubernetes Job.

pub mod emit;

use std::cell::RefCell;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::Read;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::outcome::RunId;
use super::schedule::first_timestamp;
use super::trace::{Frame, Session, Trace};
use crate::error::{Error, Result};
use crate::results::summary::ShardRun;

/// Most shards a plan may have (the one limit; defined with the others).
pub use crate::limits::MAX_SHARDS;

/// `--shard`: a fixed shard, or one taken from the scheduler's environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardArg {
    /// `I/N`, 0-based.
    Fixed { index: u32, count: u32 },
    /// `env`: `SLURM_PROCID`/`SLURM_NTASKS`, or `JOB_COMPLETION_INDEX`
    /// (Kubernetes Indexed Job) with `--shards N`.
    Env,
}

/// The value parser of `--shard`.
pub fn parse_shard(s: &str) -> std::result::Result<ShardArg, String> {
    if s == "env" {
        return Ok(ShardArg::Env);
    }
    let bad = || {
        format!(
            "`{s}` is not a shard: give I/N with 0 <= I < N <= {MAX_SHARDS} (0-based, e.g. 0/4), or `env`"
        )
    };
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let index: u32 = i.trim().parse().map_err(|_| bad())?;
    let count: u32 = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || count > MAX_SHARDS || index >= count {
        return Err(bad());
    }
    Ok(ShardArg::Fixed { index, count })
}

/// This process's shard `(index, count)`: `--shard I/N`, or under `env`
/// the scheduler's variables (`get` reads the environment; tests pass
/// their own).
pub fn resolve(
    arg: ShardArg,
    shards: Option<u32>,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(u32, u32)> {
    let (index, count) = match arg {
        ShardArg::Fixed { index, count } => {
            if shards.is_some_and(|n| n != count) {
                return Err(Error::usage(format!(
                    "--shard {index}/{count} and --shards {} disagree (give one)",
                    shards.unwrap_or(0)
                )));
            }
            (index, count)
        }
        ShardArg::Env => {
            let num = |name: &str| -> Result<Option<u32>> {
                match get(name) {
                    None => Ok(None),
                    Some(v) => v.trim().parse().map(Some).map_err(|_| {
                        Error::usage(format!("--shard env: {name}={v:?} is not a whole number"))
                    }),
                }
            };
            if let Some(i) = num("SLURM_PROCID")? {
                let n = match (num("SLURM_NTASKS")?, shards) {
                    (Some(n), Some(s)) if n != s => {
                        return Err(Error::usage(format!(
                            "--shard env: SLURM_NTASKS={n} but --shards {s} (run one task per shard)"
                        )))
                    }
                    (Some(n), _) | (None, Some(n)) => n,
                    (None, None) => {
                        return Err(Error::usage(
                            "--shard env: SLURM_PROCID is set but SLURM_NTASKS is not (give --shards N)",
                        ))
                    }
                };
                (i, n)
            } else if let Some(i) = num("JOB_COMPLETION_INDEX")? {
                let n = shards.ok_or_else(|| {
                    Error::usage(
                        "--shard env: JOB_COMPLETION_INDEX is set: give --shards N (the Job's completions)",
                    )
                })?;
                (i, n)
            } else {
                return Err(Error::usage(
                    "--shard env: neither SLURM_PROCID (srun) nor JOB_COMPLETION_INDEX \
                     (a Kubernetes Indexed Job) is set; give --shard I/N",
                ));
            }
        }
    };
    if count == 0 || count > MAX_SHARDS || index >= count {
        return Err(Error::usage(format!(
            "--shard: shard {index} of {count} does not exist (0 <= I < N <= {MAX_SHARDS})"
        )));
    }
    Ok((index, count))
}

/// A reader that hashes every byte it hands over (the trace's SHA-256).
pub struct Hashing<R> {
    inner: R,
    hash: Rc<RefCell<Sha256>>,
}

impl<R: Read> Hashing<R> {
    /// The reader, and the handle to read the hash from when it is done.
    pub fn new(inner: R) -> (Hashing<R>, Rc<RefCell<Sha256>>) {
        let hash = Rc::new(RefCell::new(Sha256::new()));
        (
            Hashing {
                inner,
                hash: hash.clone(),
            },
            hash,
        )
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.borrow_mut().update(&buf[..n]);
        Ok(n)
    }
}

/// The hash so far, as bytes.
pub fn finish(hash: &Rc<RefCell<Sha256>>) -> [u8; 32] {
    let h = hash.borrow().clone().finalize();
    let mut out = [0u8; 32];
    out.copy_from_slice(&h);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every shard's part of a trace.
#[derive(Debug, Clone)]
pub struct ShardPlan {
    pub count: u32,
    /// The shard of each row, by row index.
    pub row_shard: Vec<u32>,
    /// Per shard: sessions (units with a session), rows, tokens.
    pub sessions: Vec<u64>,
    pub rows: Vec<u64>,
    pub tokens: Vec<u64>,
    /// SHA-256 of the trace's bytes (hex).
    pub trace_sha256: String,
    /// The plan's digest (hex), see the module's doc.
    pub digest: String,
}

/// The tokens a row asks for: its prompt as built plus its output.
fn row_tokens(t: &super::trace::Turn, block_size: u64) -> u64 {
    t.intended_input(block_size)
        .unwrap_or(0)
        .saturating_add(t.output_length.unwrap_or(0))
}

/// The units of a trace, in file order of their first rows: (rows, load,
/// is a session).
fn units(trace: &Trace, block_size: u64) -> Vec<(Vec<usize>, u64, bool)> {
    let mut out = Vec::new();
    for (i, t) in trace.turns.iter().enumerate() {
        match t.session {
            None => out.push((vec![i], row_tokens(t, block_size), false)),
            Some(s) if t.turn == 0 => {
                let rows = trace.sessions[s].turns.clone();
                let load = rows
                    .iter()
                    .map(|&r| row_tokens(&trace.turns[r], block_size))
                    .fold(0u64, u64::saturating_add);
                out.push((rows, load, true));
            }
            Some(_) => {}
        }
    }
    out
}

/// The plan of `count` shards for `trace` (whose bytes hash to
/// `trace_sha256`).
pub fn plan(trace: &Trace, block_size: u64, count: u32, trace_sha256: [u8; 32]) -> ShardPlan {
    let units = units(trace, block_size);
    let mut order: Vec<usize> = (0..units.len()).collect();
    // Heaviest first; equal loads in file order (a stable sort).
    order.sort_by(|&a, &b| units[b].1.cmp(&units[a].1));
    let n = count as usize;
    let mut heap: BinaryHeap<std::cmp::Reverse<(u64, u64, u32)>> =
        (0..count).map(|i| std::cmp::Reverse((0, 0, i))).collect();
    let mut row_shard = vec![0u32; trace.turns.len()];
    let (mut sessions, mut rows, mut tokens) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
    for u in order {
        let Some(std::cmp::Reverse((load, k, s))) = heap.pop() else {
            break;
        };
        let (unit_rows, unit_load, is_session) = &units[u];
        for &r in unit_rows {
            row_shard[r] = s;
        }
        let si = s as usize;
        sessions[si] += u64::from(*is_session);
        rows[si] += unit_rows.len() as u64;
        tokens[si] = tokens[si].saturating_add(*unit_load);
        heap.push(std::cmp::Reverse((
            load.saturating_add(*unit_load),
            k + 1,
            s,
        )));
    }
    let mut h = Sha256::new();
    h.update(trace_sha256);
    h.update(b"mctrace shard plan v1");
    h.update(u64::from(count).to_le_bytes());
    for i in 0..n {
        h.update(rows[i].to_le_bytes());
        h.update(tokens[i].to_le_bytes());
    }
    ShardPlan {
        count,
        row_shard,
        sessions,
        rows,
        tokens,
        trace_sha256: hex(&trace_sha256),
        digest: hex(&h.finalize()),
    }
}

impl ShardPlan {
    /// What shard `index`'s summary says about the plan.
    pub fn run(&self, index: Option<u32>, start_at_unix_ms: Option<u64>) -> ShardRun {
        ShardRun {
            index,
            count: self.count,
            plan_digest: self.digest.clone(),
            rows: self.rows.clone(),
            tokens: self.tokens.clone(),
            start_at_unix_ms,
        }
    }
}

/// Shard `index`'s part of `trace`: its rows in file order, its sessions
/// whole, on the whole trace's schedule ([`Frame`]).
pub fn restrict(trace: &Trace, plan: &ShardPlan, index: u32) -> Trace {
    let mut part = Trace {
        frame: Some(Frame {
            zero_ms: first_timestamp(trace),
            start_rank: Vec::new(),
        }),
        ..Trace::default()
    };
    let mut session_map: BTreeMap<usize, usize> = BTreeMap::new();
    let mut rank = 0u64;
    // A graph call's edges name rows of its own session, which is whole
    // in this part: they are renumbered to the part's rows.
    let mut new_row = vec![u32::MAX; trace.turns.len()];
    for (i, t) in trace.turns.iter().enumerate() {
        let start = t.turn == 0;
        if plan.row_shard[i] == index {
            new_row[i] = part.turns.len() as u32;
            let mut t = t.clone();
            if let Some(s) = t.session {
                let next = part.sessions.len();
                let ns = *session_map.entry(s).or_insert(next);
                if ns == next {
                    part.sessions.push(Session {
                        id: trace.sessions[s].id.clone(),
                        turns: Vec::new(),
                    });
                }
                part.sessions[ns].turns.push(part.turns.len());
                t.session = Some(ns);
            }
            if start {
                if let Some(f) = part.frame.as_mut() {
                    f.start_rank.push(rank);
                }
            }
            part.turns.push(t);
        }
        if start {
            rank += 1;
        }
    }
    for t in &mut part.turns {
        if let Some(c) = t.call.as_mut() {
            for r in c.deps.iter_mut().chain(c.dependents.iter_mut()) {
                *r = new_row[*r as usize];
            }
        }
    }
    part
}

/// Arrivals per 1 s window of timestamps (at speedup 1): the trace's
/// busiest window, and each shard's count in it and at its own peak.
fn peaks(trace: &Trace, plan: &ShardPlan) -> Option<(u64, Vec<u64>, Vec<u64>)> {
    let t0 = first_timestamp(trace)?;
    let n = plan.count as usize;
    let mut windows: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (i, t) in trace.turns.iter().enumerate() {
        let Some(ts) = t.timestamp_ms else { continue };
        let w = ((ts - t0).max(0.0) / 1000.0) as u64;
        windows.entry(w).or_insert_with(|| vec![0; n])[plan.row_shard[i] as usize] += 1;
    }
    let (_, busiest) = windows.iter().max_by(|a, b| {
        a.1.iter()
            .sum::<u64>()
            .cmp(&b.1.iter().sum())
            .then(b.0.cmp(a.0))
    })?;
    let peak = busiest.iter().sum();
    let own = (0..n)
        .map(|s| windows.values().map(|c| c[s]).max().unwrap_or(0))
        .collect();
    Some((peak, busiest.clone(), own))
}

/// `--plan N`: the plan as a table (nothing is sent).
pub fn table(trace: &Trace, plan: &ShardPlan, input: &str) -> String {
    use std::fmt::Write as _;
    let total_tokens: u64 = plan.tokens.iter().sum();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "plan: {} shards of {input}: {} rows, {} sessions, {} tokens",
        plan.count,
        trace.turns.len(),
        trace.sessions.len(),
        total_tokens
    );
    let _ = writeln!(s, "trace sha256 {}", plan.trace_sha256);
    let _ = writeln!(s, "plan digest  {}", plan.digest);
    let peaks = peaks(trace, plan);
    let _ = writeln!(
        s,
        "{:>5} {:>9} {:>8} {:>12} {:>8} {:>11} {:>10}",
        "shard", "sessions", "rows", "tokens", "tokens%", "peak share", "own peak/s"
    );
    for i in 0..plan.count as usize {
        let share = |x: u64, of: u64| {
            if of > 0 {
                format!("{:.2}%", 100.0 * x as f64 / of as f64)
            } else {
                "-".into()
            }
        };
        let (peak_share, own) = match &peaks {
            Some((peak, busiest, own)) => (share(busiest[i], *peak), own[i].to_string()),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "{:>5} {:>9} {:>8} {:>12} {:>8} {:>11} {:>10}",
            i,
            plan.sessions[i],
            plan.rows[i],
            plan.tokens[i],
            share(plan.tokens[i], total_tokens),
            peak_share,
            own
        );
    }
    let max = plan.tokens.iter().copied().max().unwrap_or(0);
    let mean = total_tokens as f64 / f64::from(plan.count.max(1));
    if mean > 0.0 {
        let _ = writeln!(
            s,
            "largest shard's tokens: {:.2}% of the mean",
            100.0 * max as f64 / mean
        );
    }
    if let Some((peak, _, _)) = peaks {
        let _ = writeln!(
            s,
            "the trace's peak: {peak} rows in one second (peak share: each shard's part of that second)"
        );
    }
    s
}

/// Milliseconds since the Unix epoch, now.
pub fn now_unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Fails with exit code 75 when `--start-at` is more than the grace past.
pub fn check_not_late(start_at: u64, grace_ms: u64, what: &str) -> Result<()> {
    let late = now_unix_ms() - start_at as f64;
    if late > grace_ms as f64 {
        return Err(Error::TempFail(format!(
            "{what} is {late:.0} ms late: it could not start within --start-grace-ms {grace_ms} of \
             --start-at {start_at} (give a later --start-at, a larger --start-grace-ms, or start \
             the shards sooner); nothing was sent"
        )));
    }
    Ok(())
}

/// `--start-at` before anything waits for it: not late past the grace
/// (exit 75), at most `MAX_SECONDS` ahead (as `--timeout` is: an instant
/// years away is a typo, in s or µs instead of ms, and would wait silently
/// forever), and a wait of more than a second is said with its UTC time.
pub fn check_start_at(start_at: u64, grace_ms: u64, what: &str) -> Result<()> {
    check_not_late(start_at, grace_ms, what)?;
    let ahead_s = (start_at as f64 - now_unix_ms()) / 1000.0;
    if ahead_s > crate::options::MAX_SECONDS {
        return Err(Error::usage(format!(
            "--start-at {start_at} is {ahead_s:.0} s from now, more than the limit of {} s \
             (about 11.6 days): it is ms since the Unix epoch (now {:.0})",
            crate::options::MAX_SECONDS,
            now_unix_ms()
        )));
    }
    if ahead_s > 1.0 {
        eprintln!(
            "mc-replay: {what} waits {ahead_s:.1} s for --start-at {start_at} ({})",
            crate::results::summary::utc_iso8601(start_at / 1000)
        );
    }
    Ok(())
}

/// Sleeps until `--start-at` (the schedule's zero), then returns how late
/// the start is in ms (a shard past the grace fails with exit code 75).
/// A stop signal while waiting returns at once.
pub fn wait_for_start(start_at: u64, grace_ms: u64, what: &str, stop: &AtomicBool) -> Result<f64> {
    check_not_late(start_at, grace_ms, what)?;
    let target = start_at as f64;
    loop {
        let left = target - now_unix_ms();
        if left <= 0.0 || stop.load(Ordering::Relaxed) {
            break;
        }
        if left > 2.0 {
            // Coarse sleeps, short enough to notice a stop.
            std::thread::sleep(Duration::from_secs_f64(((left - 1.5) / 1000.0).min(0.1)));
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(now_unix_ms() - target)
}

/// A shard's run id: the same base for every shard of a plan started at
/// the same `--start-at` (else the process's own), with the shard index in
/// bits 16–31, so request ids (`RUN-SEQ`) and `x-request-id` UUIDs never
/// collide across shards.
pub fn run_id(base: RunId, index: u32, digest: &str, start_at: Option<u64>) -> RunId {
    let common = match start_at {
        Some(s) => {
            let d = u64::from_str_radix(digest.get(..16).unwrap_or("0"), 16).unwrap_or(0);
            crate::hash::splitmix64(d ^ s)
        }
        None => base.0,
    };
    RunId((common & !0xFFFF_0000) | (u64::from(index & 0xFFFF) << 16))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::{ErrorPolicy, LineReader, OnError};

    fn trace(jsonl: &str) -> Trace {
        let mut r = LineReader::new(jsonl.as_bytes(), 1 << 20);
        crate::replay::trace::load(&mut r, &mut ErrorPolicy::new(OnError::Fail)).unwrap()
    }

    #[test]
    fn shard_values() {
        assert_eq!(
            parse_shard("1/4"),
            Ok(ShardArg::Fixed { index: 1, count: 4 })
        );
        assert_eq!(parse_shard("env"), Ok(ShardArg::Env));
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3", "0/70000"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_shards() {
        let slurm = |k: &str| match k {
            "SLURM_PROCID" => Some("2".to_string()),
            "SLURM_NTASKS" => Some("4".to_string()),
            _ => None,
        };
        assert_eq!(resolve(ShardArg::Env, None, &slurm).unwrap(), (2, 4));
        assert!(resolve(ShardArg::Env, Some(3), &slurm).is_err());
        let k8s = |k: &str| (k == "JOB_COMPLETION_INDEX").then(|| "7".to_string());
        assert_eq!(resolve(ShardArg::Env, Some(8), &k8s).unwrap(), (7, 8));
        assert!(resolve(ShardArg::Env, None, &k8s).is_err());
        assert!(resolve(ShardArg::Env, Some(7), &k8s).is_err());
        assert!(resolve(ShardArg::Env, Some(7), &|_| None).is_err());
    }

    #[test]
    fn a_graph_task_stays_whole_and_its_edges_name_the_same_calls() {
        // Six tasks of a root, two branches and a join, interleaved in the
        // file, and rows without a session between them.
        let mut s = String::new();
        for i in 0..6u64 {
            s.push_str(&format!(
                "{{\"timestamp\":{},\"session_id\":\"g{i}\",\"request_id\":\"{i}r\",\"branches\":[\"{i}a\",\"{i}b\"],\"input_length\":{}}}\n\
                 {{\"timestamp\":{},\"input_length\":5}}\n",
                i * 100,
                50 + 30 * i,
                i * 100 + 1
            ));
        }
        for i in 0..6u64 {
            s.push_str(&format!(
                "{{\"session_id\":\"g{i}\",\"request_id\":\"{i}j\",\"wait_for\":[\"{i}a\",\"{i}b\"],\"input_length\":9}}\n\
                 {{\"session_id\":\"g{i}\",\"request_id\":\"{i}a\",\"input_length\":9}}\n\
                 {{\"session_id\":\"g{i}\",\"request_id\":\"{i}b\",\"input_length\":9}}\n"
            ));
        }
        let t = trace(&s);
        let p = plan(&t, 16, 3, [0; 32]);
        // The edges of a call, by id.
        let edges = |t: &Trace, r: usize| -> (Vec<String>, Vec<String>) {
            let c = t.turns[r].call.as_deref().unwrap();
            let ids = |rows: &[u32]| -> Vec<String> {
                rows.iter()
                    .map(|&d| {
                        t.turns[d as usize]
                            .call
                            .as_ref()
                            .unwrap()
                            .id
                            .as_deref()
                            .unwrap()
                            .to_string()
                    })
                    .collect()
            };
            (ids(&c.deps), ids(&c.dependents))
        };
        let mut calls = 0;
        for i in 0..3 {
            let part = restrict(&t, &p, i);
            for (r, turn) in part.turns.iter().enumerate() {
                let Some(c) = &turn.call else { continue };
                calls += 1;
                // The same row of the whole trace has the same edges.
                let whole = t.turns.iter().position(|w| w.line == turn.line).unwrap();
                assert_eq!(edges(&part, r), edges(&t, whole), "{:?}", c.id);
            }
            for sess in &part.sessions {
                assert_eq!(sess.turns.len(), 4, "{:?}", sess.id);
            }
        }
        assert_eq!(calls, 24);
    }

    #[test]
    fn sessions_whole_balanced_and_deterministic() {
        let mut s = String::new();
        for i in 0..40u64 {
            let sid = i % 10;
            s.push_str(&format!(
                "{{\"timestamp\":{},\"session_id\":\"s{sid}\",\"input_length\":{},\"output_length\":{}}}\n",
                i * 100,
                100 + 37 * i % 500,
                10 + i % 7
            ));
            s.push_str(&format!(
                "{{\"timestamp\":{},\"input_length\":{}}}\n",
                i * 100 + 50,
                40 + i
            ));
        }
        let t = trace(&s);
        let p = plan(&t, 16, 4, [0; 32]);
        let q = plan(&t, 16, 4, [0; 32]);
        assert_eq!(p.row_shard, q.row_shard);
        assert_eq!(p.digest, q.digest);
        for sess in &t.sessions {
            let first = p.row_shard[sess.turns[0]];
            assert!(sess.turns.iter().all(|&r| p.row_shard[r] == first));
        }
        assert_eq!(p.rows.iter().sum::<u64>(), 80);
        let max = *p.tokens.iter().max().unwrap() as f64;
        let mean = p.tokens.iter().sum::<u64>() as f64 / 4.0;
        assert!(max / mean < 1.1, "{:?}", p.tokens);
        // Another trace hash, another digest.
        assert_ne!(plan(&t, 16, 4, [1; 32]).digest, p.digest);
        // The parts keep the whole trace's zero and arrival ranks.
        let mut seen = 0;
        for i in 0..4 {
            let part = restrict(&t, &p, i);
            seen += part.turns.len();
            let f = part.frame.as_ref().unwrap();
            assert_eq!(f.zero_ms, Some(0.0));
            assert_eq!(f.start_rank.len(), part.starts().count());
        }
        assert_eq!(seen, 80);
    }

    #[test]
    fn zero_token_rows_still_spread() {
        let t = trace(&"{\"text_input\":\"hi\"}\n".repeat(8));
        let p = plan(&t, 16, 4, [0; 32]);
        assert_eq!(p.rows, vec![2, 2, 2, 2]);
    }

    #[test]
    fn run_ids_differ_by_shard_only() {
        let a = run_id(RunId(0x1234_5678_9abc_def0), 0, "00ff", Some(5));
        let b = run_id(RunId(0x0fed_cba9_8765_4321), 1, "00ff", Some(5));
        assert_ne!(a, b);
        assert_eq!(a.0 & !0xFFFF_0000, b.0 & !0xFFFF_0000);
        assert_ne!(a.request_uuid(3), b.request_uuid(3));
    }
}
