#!/usr/bin/env bash
# Regenerates the figures in docs/tools/mc-plot.md and mc-replay.md: the real Mooncake conversation trace
# (from $MCTRACE_DATA, default ../shared/data), a generated workload, and a
# rate sweep of a generated workload on the engine model.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${MCTRACE_DATA:-../shared/data}"
cargo build --quiet --bin mc-plot --bin mc-gen --bin mc-replay
bin=target/debug
mkdir -p docs/img
"$bin/mc-plot" --window-ms 60000 --svg docs/img/conversation-trace.svg \
  < "$data/mooncake/conversation_trace.jsonl"
"$bin/mc-gen" sessions --sessions 40 --session-rate 0.5 --system-prompt-tokens 1024 \
  --plot docs/img/generated-sessions.svg > /dev/null
# The sweep curve (docs/tools/mc-replay.md, "Sweeps"): 1000 requests of 4096 prompt tokens
# (half a shared prefix) and 256 output tokens, at each rate until the
# engine model saturates (virtual time: a few seconds).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/mc-gen" prefix --num-requests 1000 --osl 256 > "$tmp/prefix.jsonl" 2> /dev/null
"$bin/mc-replay" --rate 1,2,4,6,8,10,12,16,24,32 --out-dir "$tmp/sweep" \
  -i "$tmp/prefix.jsonl" 2> "$tmp/sweep.log"
tail -n 9 "$tmp/sweep.log"
"$bin/mc-plot" --sweep "$tmp/sweep" --svg docs/img/sweep-curve.svg
echo "wrote docs/img/conversation-trace.svg docs/img/generated-sessions.svg docs/img/sweep-curve.svg"
