#!/usr/bin/env bash
# Regenerates the README's figures: the real Mooncake conversation trace
# (from $MCTRACE_DATA, default ../shared/data) and a generated workload.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${MCTRACE_DATA:-../shared/data}"
cargo build --quiet --bin mc-plot --bin mc-gen
bin=target/debug
mkdir -p docs/img
"$bin/mc-plot" --window-ms 60000 --svg docs/img/conversation-trace.svg \
  < "$data/mooncake/conversation_trace.jsonl"
"$bin/mc-gen" sessions --sessions 40 --session-rate 0.5 --system-prompt-tokens 1024 \
  --plot docs/img/generated-sessions.svg > /dev/null
echo "wrote docs/img/conversation-trace.svg docs/img/generated-sessions.svg"
