#!/usr/bin/env bash
# Connections under load (issue 37): mc-replay replays N tiny requests
# (8 prompt tokens, 4 output tokens) at RATE req/s against mc-mock, and
# this prints, per run, the connects the client made, the sockets to the
# mock's port left in TIME_WAIT right after the run, schedule lag p50/p99,
# and the load average. Every connection leaves one socket in TIME_WAIT
# (on the side that closed first: the client at its exit, the mock after
# its 5 s keep-alive timeout), so the TIME_WAIT count on the mock's port
# is the connects of that run, counted by the kernel, for a build that
# does not report them too. ActiveOpens (/proc/net/snmp) is not used: it
# counts every connect in the network namespace, other processes' too.
#
#   scripts/bench-replay-conns.sh                 (20,000 at 10,000 req/s, 3 runs)
#   RATE=5000 N=10000 TTFT_MS=50 RUNS=2 scripts/bench-replay-conns.sh
#   BIN=/tmp/old-build scripts/bench-replay-conns.sh   (another build)
#   EXTRA="--max-connections 0" scripts/bench-replay-conns.sh  (options for mc-replay)
#
# Each run gets a fresh mock on a free port. Ports left in TIME_WAIT by
# earlier runs stay in the kernel's port search for 60 s: PAUSE=S seconds
# between runs (default 0), and the whole table's TIME_WAIT count
# (`ss -tan state time-wait`, as the issue measured it) is printed too.
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${RATE:-10000}"
n="${N:-20000}"
runs="${RUNS:-3}"
ttft="${TTFT_MS:-0}"
pause="${PAUSE:-0}"
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --release --quiet --bin mc-replay --bin mc-mock
  bin=target/release
fi
work=$(mktemp -d)
mock_pid=""
cleanup() { [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null; wait 2>/dev/null || true; }
trap 'cleanup; rm -rf "$work"' EXIT
awk -v r="$rate" -v n="$n" 'BEGIN { for (i = 0; i < n; i++)
  printf "{\"timestamp\":%.3f,\"input_length\":8,\"output_length\":4}\n", i * 1000 / r }' > "$work/trace.jsonl"
tw_port() { ss -Htan state time-wait "( sport = :$1 or dport = :$1 )" | wc -l; }
echo "binaries: $bin; $n requests at $rate req/s, mock TTFT $ttft ms; mc-replay ${EXTRA:-}"
printf '%-4s %9s %9s %12s %10s %10s %12s %s\n' run connects per-req "TIME_WAIT" "lag p50" "lag p99" "TW all" "load (1 min)"
for i in $(seq "$runs"); do
  "$bin/mc-mock" --port 0 --ttft-ms "$ttft" > "$work/mock.log" 2>/dev/null &
  mock_pid=$!
  for _ in $(seq 600); do [ -s "$work/mock.log" ] && break; sleep 0.05; done
  port=$(head -1 "$work/mock.log" | sed 's/.*:\([0-9]*\)".*/\1/')
  load=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2086
  "$bin/mc-replay" "$work/trace.jsonl" --url "http://127.0.0.1:$port" --model m \
    --no-server-metrics -o /dev/null --summary "$work/s.json" ${EXTRA:-} 2> "$work/err" || true
  tw=$(tw_port "$port")
  all=$(ss -Htan state time-wait | wc -l)
  kill "$mock_pid" 2>/dev/null; wait "$mock_pid" 2>/dev/null || true; mock_pid=""
  read -r connects per p50 p99 < <(jq -r '[(.connections.connects // "-"), (.connections.per_request // "-"),
     .metrics.lag.p50, .metrics.lag.p99] | @tsv' "$work/s.json")
  printf '%-4s %9s %9s %12s %10.2f %10.2f %12s %s\n' "$i" "$connects" "$per" "$tw" "$p50" "$p99" "$all" "$load"
  [ "$pause" != 0 ] && sleep "$pause"
done
