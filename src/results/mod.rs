//! A run's results as a shared format: what mc-replay writes and what
//! mc-report, mc-plot and any later reader take back, with no reader
//! reaching into the replay.
//!
//! - [`line`](mod@line): the result line, one JSON object per request (schema,
//!   writing, reading).
//! - [`tally`]: the distributions a summary is made of, fed from result
//!   lines only.
//! - [`summary`]: the run's summary (table, JSON, CSV), the run
//!   description inside it, and [`summary::summarize`].
//! - [`fidelity`]: the summary's fidelity section as data.
//! - [`tasks`]: the summary's task section (agent graphs), from result
//!   lines.
//! - [`sweep`]: `sweep.json`, `sweep.csv`, and what a sweep keeps of each
//!   run.

pub mod fidelity;
pub mod line;
pub mod summary;
pub mod sweep;
pub mod tally;
pub mod tasks;

pub use line::{ErrorKind, RequestResult};
pub use summary::{Ending, RunInfo, Summary};
pub use tally::{Slo, Stats, Tally};
