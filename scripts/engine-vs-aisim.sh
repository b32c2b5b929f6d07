#!/usr/bin/env bash
# mc-replay's engine model against Dynamo's simulator (aisimulate-core
# 0.13.0) under the same timing function (Dynamo's polynomial), on the same
# trace and engine shape: simulated duration, mean TTFT, mean TPOT and the
# prefix-cache hit rate at first admission, with the relative difference.
#
# aisimulate-core is built in its own project (scripts/aisim-compare, its
# own Cargo.toml and target dir), never by mctrace's build: the first run
# downloads it from crates.io and compiles about 150 crates (20-30 minutes
# on a busy 2-core machine).
#
# Usage: scripts/engine-vs-aisim.sh [TRACE]
#   default TRACE: $MCTRACE_DATA/mooncake/conversation_trace.jsonl
#   (MCTRACE_DATA defaults to ../shared/data)
#   PROFILE=release (mc-replay's build profile)
#   Engine shape (both sides): KV_TOKENS=467000 BLOCK=16 BUDGET=2048 SEQS=256
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${PROFILE:-release}
data=${MCTRACE_DATA:-../shared/data}
trace=${1:-$data/mooncake/conversation_trace.jsonl}
kv=${KV_TOKENS:-467000}
block=${BLOCK:-16}
budget=${BUDGET:-2048}
seqs=${SEQS:-256}
[[ -f "$trace" ]] || { echo "no trace at $trace (set MCTRACE_DATA or pass a path)" >&2; exit 66; }
work=$(mktemp -d -p "${TMPDIR:-/tmp}" mctrace-vs-aisim.XXXXXX)
trap 'rm -rf "$work"' EXIT

cargo build --quiet --profile "$profile" --bin mc-replay
(cd scripts/aisim-compare && cargo build --quiet --release)

target/"$profile"/mc-replay -i "$trace" --engine-profile dynamo-polynomial \
    --kv-tokens "$kv" --engine-block-size "$block" \
    --max-batched-tokens "$budget" --max-seqs "$seqs" \
    --summary "$work/ours.json" > /dev/null 2> "$work/ours.err"
scripts/aisim-compare/target/release/aisim-compare "$trace" \
    --kv-tokens "$kv" --block-size "$block" \
    --max-batched-tokens "$budget" --max-seqs "$seqs" \
    > "$work/aisim.json" 2> "$work/aisim.err"

# mc-replay's summary: the run's duration, TTFT and TPOT means, the engine
# section's hit rate and preemptions.
jq -r '[.duration_s, .metrics.ttft.mean, .metrics.tpot.mean, .engine.stats.hit_rate, .engine.stats.preemptions]
       | @tsv' "$work/ours.json" > "$work/ours.tsv"
jq -r '[.duration_s, .ttft_mean_ms, .tpot_mean_ms, .hit_rate, .readmissions] | @tsv' \
    "$work/aisim.json" > "$work/aisim.tsv"

echo "trace: $trace"
echo "shape: kv $kv tokens, blocks of $block, budget $budget, $seqs seqs; timing: Dynamo's polynomial"
paste "$work/ours.tsv" "$work/aisim.tsv" | awk -F'\t' '
function row(name, a, b, fmt) {
    printf "%-32s " fmt "  " fmt "  %+7.2f%%\n", name, a, b, (b == 0 ? 0 : 100 * (a - b) / b)
}
{
    printf "%-32s %14s  %14s  %8s\n", "", "mc-replay", "aisimulate", "diff"
    row("simulated duration (s)", $1, $6, "%14.1f")
    row("TTFT mean (ms)", $2, $7, "%14.0f")
    row("TPOT mean (ms)", $3, $8, "%14.2f")
    row("hit rate, first admission (%)", 100 * $4, 100 * $9, "%14.3f")
    printf "%-32s %14d  %14d\n", "preemptions / readmissions", $5, $10
}'
