//! `mc-replay`: sends a trace's requests to an OpenAI-compatible server (or
//! the engine model) on the trace's schedule and measures what it did.
//!
//! The rooms, in the order a run goes through them (each calls only the
//! rooms after it; `tests/architecture.rs` holds the order):
//! - [`options`]: the command line (plain clap, nothing per run), consumed
//!   by [`plan`]: every usage, output and data check, then one
//!   [`plan::Run`] per sweep value and every setting a run reads (nothing
//!   later reads the options); [`trace`] loads and checks the rows.
//! - [`drive`]: one run on one target ([`drive::execute`], and the exit
//!   policy, [`drive::verdict`]): [`schedule`] decides when
//!   each request is sent and drives a [`target::Target`]: [`http`] (a real
//!   server: request building, the client, the stream reader) or
//!   [`engine_target`] (the engine model in virtual time).
//! - [`recorder`]: each request's [`outcome`] becomes its result line
//!   ([`crate::results::line`]) and feeds the tally; [`progress`] is the
//!   status line.
//! - [`observe`]: the server's metrics around the run, and the fidelity
//!   section.
//! - [`sweep`]: the runs of a `--rate`/`--concurrency`/`--speedup` list,
//!   its stopping rule and its files; [`shard::emit`]: the job that runs
//!   every shard. Both call [`drive`] or [`plan`], never this module.
//!
//! The summary, the result line and the sweep files are
//! [`crate::results`]: mc-report and mc-plot read them there.

pub mod drive;
pub mod engine_target;
pub mod error;
pub mod http;
pub mod observe;
pub mod options;
pub mod outcome;
pub mod plan;
pub mod progress;
pub mod recorder;
pub mod redact;
pub mod routed;
pub mod schedule;
pub mod shard;
pub mod sweep;
pub mod target;
pub mod trace;

use std::ffi::OsString;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::Result;
pub use options::{ArrivalKind, ReplayArgs, Turns};
use plan::Task;

/// The whole tool: its task (a job, a shard plan, or a replay); for a
/// replay the signals, the plan, its run or sweep, and the verdict (every
/// request failing, or a server that went away, is a failed run).
pub fn run(args: ReplayArgs) -> Result<()> {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = match plan::task(args, &argv)? {
        Task::Emit(job) => return shard::emit::run(&job),
        Task::ShowShards { source, count } => {
            let (trace, block_size, sha) = plan::load_hashed(&source, true)?;
            let p = shard::plan(&trace, block_size, count, sha);
            print!("{}", shard::table(&trace, &p, &source.name));
            return Ok(());
        }
        Task::Replay(args) => args,
    };
    let stop = Arc::new(AtomicBool::new(false));
    drive::install_signals(stop.clone())?;
    let plan = plan::plan(*args)?;
    let ran = if plan.sweep.is_some() {
        sweep::run(&plan, stop)
    } else {
        drive::execute(&plan, &plan.runs[0], stop).and_then(|s| drive::verdict(&s))
    };
    ran.map_err(|e| plan.redactor.error(e))
}
