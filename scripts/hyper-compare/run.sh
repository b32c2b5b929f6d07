#!/usr/bin/env bash
# hyper's client beside mc-replay and the read floor, on bench-replay.sh's
# streams row: STREAMS answers in flight from a fresh mc-mock (TTFT 20 ms,
# ITL_MS per token, 100-token answers), SECS seconds of arrivals at
# rate = STREAMS / (TTFT + 100 ITL). RUNS rounds, the three clients
# alternating within each; CPU is user + sys of the client's process
# (/usr/bin/time), divided by the tokens asked for.
#
#   BIN=target/release scripts/hyper-compare/run.sh      # from the repository root
#
# BIN holds mc-replay, mc-mock and examples/read_floor (cargo build
# --release --bin mc-replay --bin mc-mock --example read_floor); the hyper
# client is built here (its own Cargo.lock, not part of mctrace's build).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${BIN:-target/release}
streams=${STREAMS:-1000}; itl=${ITL_MS:-10}; secs=${SECS:-5}; runs=${RUNS:-3}
rate=$(( streams * 1000 / (20 + 100 * itl) )); n=$(( rate * secs )); tokens=$(( n * 100 ))
(cd scripts/hyper-compare && cargo build --release --locked --quiet)
hyper=scripts/hyper-compare/target/release/hyper-compare
work=$(mktemp -d); mock_pid=""
cleanup() {
    if [[ -n "$mock_pid" ]]; then kill "$mock_pid" 2>/dev/null || true; wait "$mock_pid" 2>/dev/null || true; fi
    mock_pid=""
}
trap 'cleanup; rm -rf "$work"' EXIT
awk -v r="$rate" -v n="$n" 'BEGIN { for (i = 0; i < n; i++)
    printf "{\"timestamp\":%.3f,\"input_length\":8,\"output_length\":100}\n", i * 1000 / r }' > "$work/trace.jsonl"
start_mock() {
    cleanup; rm -f "$work/mock.log"
    "$bin/mc-mock" --port 0 --ttft-ms 20 --itl-ms "$itl" > "$work/mock.log" 2>/dev/null &
    mock_pid=$!
    for _ in $(seq 600); do [[ -s "$work/mock.log" ]] && break; sleep 0.05; done
    url="http://$(head -1 "$work/mock.log" | sed -n 's/.*"addr":"\([^"]*\)".*/\1/p')"
}
# Runs "$@" under /usr/bin/time; prints "cpu_s rss_kb" and leaves stdout in $work/out.
timed() {
    /usr/bin/time -f "%U %S %M" -o "$work/time" "$@" > "$work/out" 2> "$work/err" || { echo "failed: $*" >&2; cat "$work/err" >&2; }
    awk '{ printf "%.3f %d\n", $1 + $2, $3 }' "$work/time"
}
echo "streams $streams, ITL $itl ms, rate $rate req/s, $n requests, $tokens tokens; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-10s %4s %9s %9s %10s %10s %8s\n" client run achieved ok "TTFT p50" "µs/token" "RSS MB"
for run in $(seq "$runs"); do
    start_mock
    read -r cpu rss < <(timed "$bin/mc-replay" --url "$url" --model mock-model --summary "$work/s.json" -i "$work/trace.jsonl" -o /dev/null)
    read -r ach ok t50 < <(jq -r '"\(.send_rate | floor) \(.requests.ok) \(.metrics.ttft.p50)"' "$work/s.json")
    printf "%-10s %4s %9s %9s %10s %10.2f %8d\n" mc-replay "$run" "$ach" "$ok" "$t50" "$(echo "$cpu $tokens" | awk '{print $1 * 1e6 / $2}')" $(( rss / 1024 ))
    start_mock
    read -r cpu rss < <(timed "$bin/examples/read_floor" "$url" "$streams" "$rate" "$n" 100)
    printf "%-10s %4s %9s %9s %10s %10.2f %8d\n" floor "$run" - "$(jq -r .requests "$work/out")" - "$(echo "$cpu $tokens" | awk '{print $1 * 1e6 / $2}')" $(( rss / 1024 ))
    start_mock
    read -r cpu rss < <(timed "$hyper" "$url" "$rate" "$n" 100)
    read -r ach ok t50 < <(jq -r '"\(.achieved_rps | floor) \(.ok) \(.ttft_p50_ms)"' "$work/out")
    printf "%-10s %4s %9s %9s %10s %10.2f %8d\n" hyper "$run" "$ach" "$ok" "$t50" "$(echo "$cpu $tokens" | awk '{print $1 * 1e6 / $2}')" $(( rss / 1024 ))
done
