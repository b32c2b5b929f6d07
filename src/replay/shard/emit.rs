//! `--emit-slurm` and `--emit-k8s-job`: the job that runs every shard.

use crate::error::{Error, Result};

use super::super::ReplayArgs;

pub fn run(_args: &ReplayArgs) -> Result<()> {
    Err(Error::usage("not yet"))
}
