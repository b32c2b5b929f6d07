#!/bin/sh
# Fuzz every importer's record parser (azure, burstgpt, aibrix, ragpulse,
# weka, nat), mc-gen's distribution parser, mc-replay's SSE splitter and
# classifier, both sides of HTTP (http-response: the evented client's
# sans-IO exchange; mock-request: mc-mock's request reader; each fed whole
# and in pieces, which must read the same), and the result-line reader,
# for a bounded time: at most
# EXECS executions or SECONDS seconds per target (defaults 1,000,000 and
# 120), under `ulimit -v 4000000` so an unbounded allocation is a finding
# too. Not part of .ci/run (it takes minutes).
#
# cargo-fuzz needs a nightly toolchain; this uses a mutation loop on stable
# instead (examples/fuzz.rs), in a debug build so arithmetic overflow
# panics. A panic writes the input to fuzz-crash-<target>.bin and exits 1;
# the same SEED replays the same inputs.
#
#   scripts/fuzz.sh [SECONDS] [EXECS] [SEED] [TARGET…]
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-120}
execs=${2:-1000000}
seed=${3:-1}
[ $# -ge 3 ] && shift 3 || shift $#
cargo build --quiet --example fuzz
log=$(mktemp)
status=0
(
    ulimit -v 4000000
    exec target/debug/examples/fuzz --seconds "$seconds" --execs "$execs" --seed "$seed" "$@"
) 2>"$log" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ]; then
    echo "fuzz: the fuzzer died with status $status (134: an allocation failed under the memory limit); last stderr:" >&2
    tail -n 20 "$log" >&2
fi
rm -f "$log"
exit "$status"
