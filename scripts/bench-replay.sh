#!/usr/bin/env bash
# Replay benchmark: can the client keep a fixed schedule, and what does it
# cost per request? mc-mock answers at once (zero latency); a fixed-schedule
# trace of tiny requests is replayed at several rates by mc-replay and, when
# installed, by AIPerf 0.13.0 against the same mock in the same run.
#
# Reported per rate: achieved send rate, schedule lag p50/p99 as the client
# saw it (mc-replay's summary) and as the server saw it (mc-mock's arrival
# log: arrival - (first arrival + timestamp), which needs no cooperation from
# the client, so it is measured the same way for both tools), and client CPU
# (user+sys of the whole process tree) per request.
# Then an accuracy check: mock at 20 ms TTFT / 2 ms ITL, measured TTFT and ITL.
# Then long streams: mock at 20 ms TTFT / 10 ms ITL, 100-token answers, at the
# rates that keep STREAMS answers in flight (rate = streams / (TTFT + 100 ITL));
# per run: achieved rate, server-side lag p99, reported TTFT p50 against the
# configured 20 ms, client CPU per streamed token, client peak RSS, and the
# mock's CPU (cores over the run, µs per streamed token): two processes share
# the machine, so a mock that is the bottleneck shows here.
#
# Usage: scripts/bench-replay.sh [SECONDS_PER_RATE]   (default 5)
#   RATES="500 1000 2000 5000 10000"  BIN=dir (prebuilt binaries; default: build
#   target/release)  BASE_BIN=dir (older binaries: every mc-replay row is also
#   run with them, against the same mock, labelled `base`)
#   STREAMS="1000 2000" (STREAMS=none skips the streaming runs; an item
#   N:ITL sets that row's ITL in ms, e.g. STREAMS="2000:20 1000:10")  ITL_MS=10
#   NICE=-10 (runs the mock and every client at that nice level: on a
#   machine shared with builds, to measure the tools rather than the queue
#   for a core; negative levels need root)
#   CLIENT_ARGS="--http-client blocking" (extra mc-replay options, new only)
#   AIPERF=/path/to/aiperf  (default: aiperf on PATH
#   or /work/aiperf-venv/bin/aiperf; AIPERF=none skips it)
#   AIPERF_TOKENIZER=dir  (AIPerf needs a local tokenizer; default: the
#   DeepSeek one in $MCTRACE_DATA or ../shared/data)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-5}
# RATES="" skips the tiny-request rows.
rates=${RATES-"500 1000 2000 5000 10000"}
streams=${STREAMS:-"1000 2000"}
itl=${ITL_MS:-10}
[[ "$streams" == none ]] && streams=""
base_bin=${BASE_BIN:-}
read -r -a client_args <<< "${CLIENT_ARGS:-}"
# Every process under test runs through $prio (empty: as is).
prio=()
[[ -n "${NICE:-}" ]] && prio=(nice -n "$NICE")
work=${BENCH_DIR:-/tmp/mctrace-bench/replay}
mkdir -p "$work"

# BIN=dir runs binaries built elsewhere (e.g. another commit, to compare).
bin=${BIN:-target/release}
[[ -z "${BIN:-}" ]] && cargo build --release --quiet --bin mc-replay --bin mc-mock

aiperf=${AIPERF:-}
if [[ -z "$aiperf" ]]; then
    aiperf=$(command -v aiperf || true)
    [[ -z "$aiperf" && -x /work/aiperf-venv/bin/aiperf ]] && aiperf=/work/aiperf-venv/bin/aiperf
fi
[[ "$aiperf" == none ]] && aiperf=""
data=${MCTRACE_DATA:-../shared/data}
aiperf_tok=${AIPERF_TOKENIZER:-$data/tokenizers/deepseek-v4}

mock_pid=""
cleanup() { [[ -n "$mock_pid" ]] && kill "$mock_pid" 2>/dev/null || true; }
trap cleanup EXIT

# Starts mc-mock with the given options; sets $port and $mock_log.
start_mock() {
    cleanup
    mock_log="$work/mock.log"
    "${prio[@]}" "$bin/mc-mock" --port 0 "$@" > "$mock_log" 2>/dev/null &
    mock_pid=$!
    # A loaded machine can take seconds to start it: wait up to 30 s.
    for _ in $(seq 600); do
        [[ -s "$mock_log" ]] && break
        sleep 0.05
    done
    port=$(head -1 "$mock_log" | jq -r .addr | cut -d: -f2)
    if [[ -z "$port" ]]; then
        echo "mc-mock did not start (mc-mock $*)" >&2
        exit 1
    fi
}

# Fixed-schedule trace: N rows, evenly spaced, 8-token prompts, 4-token answers.
make_trace() { # rate n file
    awk -v r="$1" -v n="$2" 'BEGIN { for (i = 0; i < n; i++)
        printf "{\"timestamp\":%.3f,\"input_length\":8,\"output_length\":4}\n", i * 1000 / r }' > "$3"
}

# Server-side lag from the mock log (µs arrivals) and the trace, p50 p99 in ms:
# each arrival's offset from the first, minus its timestamp, less the smallest
# such value (so a tool is not charged for its fixed start-up offset).
server_lag() { # trace log
    jq -s -r --slurpfile t "$1" '
        [.[] | select(.event == "request" and .path != "/v1/models") | .unix_us] | sort as $a
        | ($t | map(.timestamp)) as $ts
        | [range(0; [$a | length, ($ts | length)] | min) | ($a[.] - $a[0]) / 1000 - $ts[.]]
        | (min // 0) as $m | map(. - $m)
        | sort as $l | ($l | length) as $n
        | if $n == 0 then "- -" else
          "\($l[($n * 0.5 | floor)] * 100 | round / 100) \($l[(($n - 1) * 0.99 | floor)] * 100 | round / 100)" end' "$2"
}

cpu_of() { # command...: runs it; prints its user+sys CPU seconds (with all
    # the children it waited for) to fd 3. Its stderr goes to $work/stderr.log.
    local TIMEFORMAT='%U %S'
    # nice runs programs, not shell functions (run_aiperf): those run as is.
    local p=("${prio[@]}")
    [[ "$(type -t "$1")" == function ]] && p=()
    { time "${p[@]}" "$@" 2>>"$work/stderr.log"; } 2> "$work/time.txt"
    awk '{ print $1 + $2 }' "$work/time.txt" >&3
}

# The mc-replay binaries to compare: ours, and BASE_BIN's when given.
replays=("mc-replay:$bin/mc-replay")
[[ -n "$base_bin" ]] && replays+=("base:$base_bin/mc-replay")
# The options of one of them (the base may predate the new ones).
replay_args() {
    if [[ "$1" == mc-replay && ${#client_args[@]} -gt 0 ]]; then printf '%s\n' "${client_args[@]}"; fi
}

# Fixed start-up cost (process start, imports, first connection), measured
# on a 20-row run and subtracted, so cpu/req is the marginal cost.
make_trace 100 20 "$work/base.jsonl"
declare -A base_cpu
for r in "${replays[@]}"; do
    label=${r%%:*}; exe=${r#*:}
    mapfile -t extra < <(replay_args "$label")
    start_mock
    base_cpu[$label]=$( { cpu_of "$exe" --url "http://127.0.0.1:$port" --model mock-model \
        "${extra[@]}" -i "$work/base.jsonl" -o /dev/null; } 3>&1 )
done
base_ours=${base_cpu[mc-replay]}
base_aiperf=0
run_aiperf() { # trace outdir
    "$aiperf" profile --model mock-model --url "http://127.0.0.1:$port" \
        --endpoint-type chat --streaming --input-file "$1" \
        --custom-dataset-type mooncake_trace --fixed-schedule \
        --tokenizer "$aiperf_tok" --use-server-token-count \
        --ui-type none --no-server-metrics --no-gpu-telemetry \
        --output-artifact-dir "$2" > "$work/aiperf.log" 2>&1 || true
}
if [[ -n "$aiperf" ]]; then
    start_mock
    rm -rf "$work/aiperf-base"
    base_aiperf=$( { cpu_of run_aiperf "$work/base.jsonl" "$work/aiperf-base"; } 3>&1 )
fi
echo "start-up CPU (20-row run): mc-replay ${base_ours} s, base ${base_cpu[base]:--} s, aiperf ${base_aiperf} s"

printf '\n%-9s %-7s %9s %9s %9s %10s %10s %10s %8s\n' tool rate sent achieved "lag p50" "lag p99" "srv p50" "srv p99" "cpu/req"
printf '%-9s %-7s %9s %9s %9s %10s %10s %10s %8s\n' "" "req/s" "" "req/s" "ms" "ms" "ms" "ms" "ms"
for rate in $rates; do
    n=$(( rate * secs ))
    trace="$work/fixed-$rate.jsonl"
    make_trace "$rate" "$n" "$trace"

    for r in "${replays[@]}"; do
        label=${r%%:*}; exe=${r#*:}
        mapfile -t extra < <(replay_args "$label")
        start_mock
        cpu=$( { cpu_of "$exe" --url "http://127.0.0.1:$port" --model mock-model "${extra[@]}" \
            --summary "$work/summary.json" -i "$trace" -o "$work/results.jsonl"; } 3>&1 )
        read -r sent achieved p50 p99 < <(jq -r '"\(.requests.sent) \(.send_rate | floor) \(.metrics.lag.p50) \(.metrics.lag.p99)"' "$work/summary.json")
        read -r s50 s99 < <(server_lag "$trace" "$mock_log")
        printf '%-9s %-7s %9s %9s %9s %10s %10s %10s %8.3f\n' "$label" "$rate" "$sent" "$achieved" "$p50" "$p99" "$s50" "$s99" \
            "$(echo "$cpu ${base_cpu[$label]} $sent" | awk '{ print ($1 - $2) * 1000 / ($3 - 20) }')"
        failed=$(jq -r '.requests.failed' "$work/summary.json")
        # A run whose requests failed measures nothing: say so next to its row.
        [[ "$failed" != 0 ]] && echo "  WARNING: $failed requests failed at $rate req/s (see $work/results.jsonl)"
    done

    if [[ -n "$aiperf" ]]; then
        start_mock
        out="$work/aiperf-$rate"
        rm -rf "$out"
        cpu=$( { cpu_of run_aiperf "$trace" "$out"; } 3>&1 )
        got=$(jq -s '[.[] | select(.event == "request" and .path != "/v1/models")] | length' "$mock_log")
        read -r s50 s99 < <(server_lag "$trace" "$mock_log")
        if [[ "$got" -gt 1 ]]; then
            span=$(jq -s '[.[] | select(.event == "request" and .path != "/v1/models") | .unix_us] | (max - min) / 1e6' "$mock_log")
            achieved=$(echo "$got $span" | awk '{ printf "%d", ($1 - 1) / $2 }')
        else
            achieved="-"
        fi
        printf '%-9s %-7s %9s %9s %9s %10s %10s %10s %8.3f\n' aiperf "$rate" "$got" "$achieved" - - "$s50" "$s99" \
            "$(echo "$cpu $base_aiperf ${got:-0}" | awk '{ print ($3 > 20 ? ($1 - $2) * 1000 / ($3 - 20) : 0) }')"
    fi
done

# Accuracy: does the client measure what the server did?
start_mock --ttft-ms 20 --itl-ms 2
trace="$work/accuracy.jsonl"
awk 'BEGIN { for (i = 0; i < 200; i++) printf "{\"timestamp\":%d,\"input_length\":64,\"output_length\":64}\n", i * 10 }' > "$trace"
"$bin/mc-replay" --url "http://127.0.0.1:$port" --model mock-model --summary "$work/acc.json" \
    -i "$trace" -o /dev/null 2>/dev/null
echo
echo "accuracy (mock: TTFT 20 ms, ITL 2 ms; 200 requests of 64 tokens at 100 req/s):"
jq -r '"  TTFT p50 \(.metrics.ttft.p50) ms, p99 \(.metrics.ttft.p99) ms; ITL mean \(.metrics.itl.mean) ms, p50 \(.metrics.itl.p50) ms; TPOT mean \(.metrics.tpot.mean) ms"' "$work/acc.json"

# Long streams: can the client hold STREAMS answers in flight without
# measuring itself? Each row: 100-token answers at 20 ms TTFT, 10 ms ITL.
[[ -z "$streams" ]] && exit 0
echo
echo "long streams (mock: TTFT 20 ms, 100-token answers; ${secs} s of arrivals per row):"
printf '%-9s %7s %4s %7s %9s %9s %9s %10s %10s %10s %9s %9s %8s %9s %9s\n' tool streams ITL rate sent achieved "clnt p99" "srv p99" "TTFT p50" "TTFT p99" "cpu/tok" "peak RSS" failed "mock cpu" "mock/tok"
printf '%-9s %7s %4s %7s %9s %9s %9s %10s %10s %10s %9s %9s %8s %9s %9s\n' "" "" ms "req/s" "" "req/s" ms ms ms ms "µs" MB "" cores "µs"
for item in $streams; do
    n_streams=${item%%:*}
    itl=${ITL_MS:-10}
    [[ "$item" == *:* ]] && itl=${item#*:}
    # rate = streams / (TTFT + 100 ITL)
    rate=$(( n_streams * 1000 / (20 + 100 * itl) ))
    n=$(( rate * secs ))
    trace="$work/streams-$n_streams-$itl.jsonl"
    awk -v r="$rate" -v n="$n" 'BEGIN { for (i = 0; i < n; i++)
        printf "{\"timestamp\":%.3f,\"input_length\":8,\"output_length\":100}\n", i * 1000 / r }' > "$trace"
    for r in "${replays[@]}"; do
        label=${r%%:*}; exe=${r#*:}
        mapfile -t extra < <(replay_args "$label")
        start_mock --ttft-ms 20 --itl-ms "$itl"
        # The mock's CPU over the run (clock ticks): is the server the bottleneck?
        m0=$(awk '{ print $14 + $15 }' "/proc/$mock_pid/stat"); w0=$(date +%s.%N)
        /usr/bin/time -f '%U %S %M' -o "$work/rtime.txt" "${prio[@]}" "$exe" --url "http://127.0.0.1:$port" \
            --model mock-model "${extra[@]}" --summary "$work/streams.json" -i "$trace" \
            -o /dev/null 2>>"$work/stderr.log" || true
        m1=$(awk '{ print $14 + $15 }' "/proc/$mock_pid/stat"); w1=$(date +%s.%N)
        mock_cores=$(echo "$m0 $m1 $w0 $w1 $(getconf CLK_TCK)" | awk '{ printf "%.2f", ($2 - $1) / $5 / ($4 - $3) }')
        mock_secs=$(echo "$m0 $m1 $(getconf CLK_TCK)" | awk '{ print ($2 - $1) / $3 }')
        read -r cpu rss < <(awk '{ print $1 + $2, $3 / 1024 }' "$work/rtime.txt")
        read -r sent achieved c99 t50 t99 tokens failed < <(jq -r '"\(.requests.sent) \(.send_rate | floor) \(.metrics.lag.p99) \(.metrics.ttft.p50) \(.metrics.ttft.p99) \(.tokens.output) \(.requests.failed)"' "$work/streams.json")
        read -r _ s99 < <(server_lag "$trace" "$mock_log")
        printf '%-9s %7s %4s %7s %9s %9s %9s %10s %10s %10s %9.2f %9.0f %8s %9s %9.2f\n' "$label" "$n_streams" "$itl" "$rate" "$sent" "$achieved" "$c99" "$s99" "$t50" "$t99" \
            "$(echo "$cpu ${base_cpu[$label]} $tokens" | awk '{ print ($3 > 0 ? ($1 - $2) * 1e6 / $3 : 0) }')" "$rss" "$failed" "$mock_cores" \
            "$(echo "$mock_secs $tokens" | awk '{ print ($2 > 0 ? $1 * 1e6 / $2 : 0) }')"
    done
done
