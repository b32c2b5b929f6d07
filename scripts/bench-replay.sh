#!/usr/bin/env bash
# Replay benchmark: can the client keep a fixed schedule, and what does it
# cost per request? mc-mock answers at once (zero latency); a fixed-schedule
# trace of tiny requests is replayed at several rates by mc-replay and, when
# they can run, by AIPerf 0.13.0 and GuideLLM 0.8.1 against the same mock in
# the same run ("peers" below).
#
# Reported per rate: achieved send rate, schedule lag p50/p99 as the client
# saw it (each tool's own figure: mc-replay's summary lag, send time minus
# due time; the peers' below) and as the server saw it
# (mc-mock's arrival log: arrival - (first arrival + timestamp), which needs
# no cooperation from the client, so it is measured the same way for every
# tool), client CPU (user+sys of the whole process tree) per request, and
# the TCP connections the client opened.
# Then an accuracy check: mock at 20 ms TTFT / 2 ms ITL, measured TTFT and ITL.
# Then long streams: mock at 20 ms TTFT / 10 ms ITL, 100-token answers, at the
# rates that keep STREAMS answers in flight (rate = streams / (TTFT + 100 ITL));
# per run: achieved rate, server-side lag p99, reported TTFT p50/p99 against
# the configured 20 ms, client CPU per streamed token, client peak RSS (the
# largest single process's, from getrusage) and the process tree's peak Pss
# (sampled every 0.5 s; Pss splits a page shared by forked workers among
# them, so the tree's sum is what it takes), failed requests, and the mock's
# CPU (µs per streamed token, and cores: its CPU seconds over the time from
# the first arrival to the last plus one answer's 20 ms + 100 ITL) and the
# share of its token events it wrote more than 1 ms late (its /metrics):
# two processes share the machine, so a mock that is the bottleneck shows
# here.
# After mc-replay's row, a "floor" row: examples/read_floor.rs keeps the
# same number of streams in flight (started 1/rate apart, each connection's
# next request sent when its answer ends, as many requests) and reads them
# as mc-replay's client does (readiness, one stamped recvmsg per ready
# socket, the same poll pause), doing nothing else with the bytes: its CPU
# per token is what reading each token as it comes costs on this machine
# (on loopback that includes the mock's side of the ACK each read sends),
# and "mc-replay over the floor" is mc-replay's own work per token.
#
# Peers. Each peer that runs gets a row after mc-replay's, against a fresh
# mock with the same options, the same number of requests at the same rate,
# and a line "mc-replay / PEER" with mc-replay's figure over the peer's for
# CPU (per request or per token) and server-side lag p99 (below 1: mc-replay
# spends less or keeps the schedule closer).
#   AIPerf 0.13.0: python3 -m venv /work/peers/aiperf &&
#     /work/peers/aiperf/bin/pip install aiperf==0.13.0
#   Run as `aiperf profile --endpoint-type chat --streaming --input-file TRACE
#   --custom-dataset-type mooncake_trace --fixed-schedule --extra-inputs
#   ignore_eos:true --tokenizer DIR --use-server-token-count` (the same trace
#   file as mc-replay). Read from OUT/profile_export_aiperf.json: client lag
#   = replay_sched_lag_p50/p99 (send time minus the row's timestamp, less the
#   smallest such value of the run); TTFT = time_to_first_token p50/p99
#   (first content chunk minus the request's start as its worker sent it);
#   tokens = total_output_tokens (the server's usage counts); failed =
#   error_request_count.
#   GuideLLM 0.8.1: python3 -m venv /work/peers/guidellm &&
#     /work/peers/guidellm/bin/pip install guidellm==0.8.1 (it pulls torch
#     with its CUDA wheels, about 6 GB; it runs on the CPU here)
#   Run as `guidellm run --config OUT/scenario.json --disable-console`, the
#   scenario: openai_http backend, /v1/chat/completions, streaming,
#   extras.body {"ignore_eos": true}; profile "constant" at the row's rate
#   (one request every 1/rate s, the schedule of the trace's timestamps);
#   constraint max_requests = the trace's rows; synthetic_text data, 8-token
#   prompts, 4 or 100 output tokens; the same tokenizer directory. Read from
#   OUT/benchmarks.json (benchmarks[0].metrics): client lag =
#   request_dispatch_delay p50/p99 of successful requests (request start
#   minus the time the profile targeted, not re-anchored); TTFT =
#   time_to_first_token_ms p50/p99 (first token minus request start); tokens
#   = output_token_count total of successful requests; failed = errored +
#   incomplete. Its validation polls GET /health before the run; the
#   server-side figures count completion requests only. (GuideLLM also has a
#   "replay" profile with "mooncake" data, but that wants hash_ids in every
#   row, which these traces do not have; the constant profile sends the same
#   schedule.)
# A peer's sent / achieved are the mock's count of its completion requests
# and (count - 1) / (last - first arrival). Its CPU is user+sys of the
# process tree it waits for, less a 20-row start-up run (as for mc-replay).
# A peer that is not installed, does not answer --version, has no tokenizer
# or whose start-up run fails is skipped with a printed note; a run cut off
# after PEER_TIMEOUT seconds (exit status 124) is printed with a note.
#
# Usage: scripts/bench-replay.sh [SECONDS_PER_RATE]   (default 5)
#   RATES="500 1000 2000 5000 10000"  BIN=dir (prebuilt binaries; default: build
#   target/release)  BASE_BIN=dir (older binaries: every mc-replay row is also
#   run with them, against the same mock, labelled `base`)
#   MOCK_BIN=dir (the mc-mock to serve every row; default: BIN's. Since
#   2026-11-25 mc-mock times a request's arrival by the kernel's stamp of
#   its last byte: MOCK_BIN=<older build> gives the server lag as measured
#   before, which included the mock's connection thread waking up)
#   STREAMS="1000 2000" (STREAMS=none skips the streaming runs; an item
#   N:ITL sets that row's ITL in ms, e.g. STREAMS="2000:20 1000:10")  ITL_MS=10
#   NICE=-10 (runs the mock and every client at that nice level: on a
#   machine shared with builds, to measure the tools rather than the queue
#   for a core; negative levels need root)
#   CLIENT_ARGS="--http-client blocking" (extra mc-replay options, new only)
#   MOCK_ARGS="--pacer-threads 2" (extra mc-mock options, every run)
#   AIPERF=/path/to/aiperf  (default: aiperf on PATH, else
#   /work/peers/aiperf/bin/aiperf or /work/aiperf-venv/bin/aiperf; AIPERF=none
#   skips it)  GUIDELLM=/path/to/guidellm (default: guidellm on PATH, else
#   /work/peers/guidellm/bin/guidellm; GUIDELLM=none skips it)
#   AIPERF_TOKENIZER=dir  (the peers need a local tokenizer; default: the
#   DeepSeek one in $MCTRACE_DATA or ../shared/data)  GUIDELLM_TOKENIZER=dir
#   (default: AIPerf's)  PEER_TIMEOUT=600 (seconds a peer's run may take)
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
read -r -a mock_args <<< "${MOCK_ARGS:-}"
# Every process under test runs through $prio (empty: as is).
prio=()
[[ -n "${NICE:-}" ]] && prio=(nice -n "$NICE")
work=${BENCH_DIR:-/tmp/mctrace-bench/replay}
mkdir -p "$work"
: > "$work/measure.log"

# BIN=dir runs binaries built elsewhere (e.g. another commit, to compare).
bin=${BIN:-target/release}
[[ -z "${BIN:-}" ]] && cargo build --release --quiet --bin mc-replay --bin mc-mock --example read_floor
# The streams' floor (examples/read_floor.rs): FLOOR=path, else BIN's.
floor=${FLOOR:-$bin/examples/read_floor}

# The peers (see the header): which of them run.
# shellcheck source=scripts/bench-replay/peers.sh
source scripts/bench-replay/peers.sh
peer_timeout=${PEER_TIMEOUT:-600}
data=${MCTRACE_DATA:-../shared/data}
aiperf_tok=${AIPERF_TOKENIZER:-$data/tokenizers/deepseek-v4}
guidellm_tok=${GUIDELLM_TOKENIZER:-$aiperf_tok}
aiperf=$(peer_find aiperf "${AIPERF:-}" /work/peers/aiperf/bin/aiperf /work/aiperf-venv/bin/aiperf)
guidellm=$(peer_find guidellm "${GUIDELLM:-}" /work/peers/guidellm/bin/guidellm)
peers=()
for p in aiperf guidellm; do
    exe=${!p}
    tok_var=${p}_tok
    setting=${p^^}
    if [[ -z "$exe" ]]; then
        if [[ "${!setting:-}" == none ]]; then
            echo "note: $p skipped ($setting=none)"
        else
            echo "note: $p skipped: not on PATH nor in /work/peers/$p (install it in a venv, see the header, or set $setting=path)"
        fi
        continue
    fi
    why=$(peer_check "$p" "$exe" "${!tok_var}")
    if [[ -n "$why" ]]; then
        echo "note: $p skipped: $why"
        continue
    fi
    peers+=("$p")
    echo "$p: $exe, version $(timeout 120 "$exe" --version 2>&1 | tail -1 | awk '{ print $NF }')"
done

mock_pid=""
# Stops the mock and waits for it: a mock still logging its last requests
# would write into the next run's log.
cleanup() {
    if [[ -n "$mock_pid" ]]; then
        kill "$mock_pid" 2>/dev/null || true
        wait "$mock_pid" 2>/dev/null || true
        mock_pid=""
    fi
}
trap cleanup EXIT

# Starts mc-mock with the given options; sets $port and $mock_log.
start_mock() {
    cleanup
    mock_log="$work/mock.log"
    # The shell truncates the log in the child, some time after the fork: the
    # wait below must not find the last mock's log there and read its port.
    rm -f "$mock_log"
    "${prio[@]}" "${MOCK_BIN:-$bin}/mc-mock" --port 0 "$@" "${mock_args[@]}" > "$mock_log" 2>/dev/null &
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

# Server-side lag from the mock log (µs arrivals of completion requests, not
# /v1/models nor GuideLLM's /health polls) and the trace, p50 p99 in ms:
# each arrival's offset from the first, minus its timestamp, less the smallest
# such value (so a tool is not charged for its fixed start-up offset).
server_lag() { # trace log
    jq -s -r --slurpfile t "$1" '
        [.[] | select(.event == "request" and (.path | test("completions"))) | .unix_us] | sort as $a
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
    { time "${prio[@]}" "$@" 2>>"$work/stderr.log"; } 2> "$work/time.txt"
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
# The peers' start-up run: the same 20 rows (GuideLLM: 20 requests at 100
# req/s). A peer whose start-up run fails is dropped here, with a note.
declare -A peer_base
ok_peers=()
for p in "${peers[@]}"; do
    start_mock
    peer_cmd "$p" "$work/base.jsonl" 100 20 4 "$work/$p-base"
    measure "$work/m.txt" "${cmd[@]}"
    read -r cpu _ _ rc < "$work/m.txt"
    read -r got _ < <(mock_counts)
    if [[ "$rc" != 0 || "$got" != 20 ]]; then
        echo "note: $p skipped: its 20-row start-up run exited with status $rc after $got requests (see $work/measure.log)"
        continue
    fi
    peer_base[$p]=$cpu
    ok_peers+=("$p")
done
peers=("${ok_peers[@]}")
startup="mc-replay ${base_ours} s, base ${base_cpu[base]:--} s"
for p in "${peers[@]}"; do startup+=", $p ${peer_base[$p]} s"; done
echo "start-up CPU (20-row run): $startup"

# peer_notes: after a peer's row, what went wrong in its run: its exit status,
# its failed requests and their errors, requests it did not send.
# Uses p, rc, failed, got, n, rate, out.
peer_notes() {
    if [[ "$rc" != 0 ]]; then
        echo "  NOTE: $p exited with status $rc (124: cut off after $peer_timeout s; see $work/measure.log)"
    fi
    if [[ "$failed" != 0 ]]; then
        echo "  WARNING: $p counted $failed failed requests at $rate req/s (see $out):"
        peer_errors "$p" "$out" | sed 's/^/    /'
    fi
    if [[ "$got" != "$n" ]]; then echo "  NOTE: $p sent $got of $n requests"; fi
}

# ratio A B: A / B to 3 significant digits, "-" when either is not a positive number.
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3g", a / b; else printf "-" }'
}

# TCP connections this network namespace opened (Linux: `ActiveOpens` in
# /proc/net/snmp; mc-mock's side is passive, so over one run it is the
# client's connects, its look at the server before the run included). A client that falls behind
# opens one per late request while the answers that would free one sit
# unread (docs/ARCHITECTURE.md §5, `Loop::reclaim`).
active_opens() {
    awk '/^Tcp:/ { if (seen) print $6; seen = 1 }' /proc/net/snmp 2>/dev/null || echo 0
}
printf '\n%-9s %-7s %9s %9s %9s %10s %10s %10s %8s %7s\n' tool rate sent achieved "lag p50" "lag p99" "srv p50" "srv p99" "cpu/req" conns
printf '%-9s %-7s %9s %9s %9s %10s %10s %10s %8s %7s\n' "" "req/s" "" "req/s" "ms" "ms" "ms" "ms" "ms" ""
for rate in $rates; do
    n=$(( rate * secs ))
    trace="$work/fixed-$rate.jsonl"
    make_trace "$rate" "$n" "$trace"
    ours_cpu=""; ours_s99=""

    for r in "${replays[@]}"; do
        label=${r%%:*}; exe=${r#*:}
        mapfile -t extra < <(replay_args "$label")
        start_mock
        rm -f "$work/summary.json"
        opens=$(active_opens)
        cpu=$( { cpu_of "$exe" --url "http://127.0.0.1:$port" --model mock-model "${extra[@]}" \
            --summary "$work/summary.json" -i "$trace" -o "$work/results.jsonl" || true; } 3>&1 )
        opens=$(( $(active_opens) - opens ))
        if [[ ! -s "$work/summary.json" ]]; then
            echo "$label $rate: no summary, the run failed (see $work/stderr.log)"
            continue
        fi
        read -r sent achieved p50 p99 < <(jq -r '"\(.requests.sent) \(.send_rate | floor) \(.metrics.lag.p50) \(.metrics.lag.p99)"' "$work/summary.json")
        read -r s50 s99 < <(server_lag "$trace" "$mock_log")
        per_req=$(echo "$cpu ${base_cpu[$label]} $sent" | awk '{ printf "%.3f", ($1 - $2) * 1000 / ($3 - 20) }')
        printf '%-9s %-7s %9s %9s %9s %10s %10s %10s %8s %7s\n' "$label" "$rate" "$sent" "$achieved" "$p50" "$p99" "$s50" "$s99" "$per_req" "$opens"
        # mc-replay's figures, for the peers' ratios.
        [[ "$label" == mc-replay ]] && { ours_cpu=$per_req; ours_s99=$s99; }
        failed=$(jq -r '.requests.failed' "$work/summary.json")
        # A run whose requests failed measures nothing: say so next to its row.
        [[ "$failed" != 0 ]] && echo "  WARNING: $failed requests failed at $rate req/s (see $work/results.jsonl)"
    done

    for p in "${peers[@]}"; do
        start_mock
        out="$work/$p-$rate"
        peer_cmd "$p" "$trace" "$rate" "$n" 4 "$out"
        opens=$(active_opens)
        measure "$work/m.txt" "${cmd[@]}"
        opens=$(( $(active_opens) - opens ))
        read -r cpu _ _ rc < "$work/m.txt"
        read -r got achieved < <(mock_counts)
        read -r l50 l99 _ _ _ failed < <(peer_figures "$p" "$out")
        read -r s50 s99 < <(server_lag "$trace" "$mock_log")
        per_req=$(echo "$cpu ${peer_base[$p]} $got" | awk '{ if ($3 > 20) printf "%.3f", ($1 - $2) * 1000 / ($3 - 20); else printf "-" }')
        printf '%-9s %-7s %9s %9s %9s %10s %10s %10s %8s %7s\n' "$p" "$rate" "$got" "$achieved" "$l50" "$l99" "$s50" "$s99" "$per_req" "$opens"
        echo "  mc-replay / $p: cpu/req $(ratio "$ours_cpu" "$per_req"), srv lag p99 $(ratio "$ours_s99" "$s99")"
        peer_notes
    done
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
fmt='%-9s %7s %4s %7s %9s %9s %9s %10s %10s %10s %9s %9s %9s %8s %9s %9s %9s\n'
# shellcheck disable=SC2059
printf "$fmt" tool streams ITL rate sent achieved "clnt p99" "srv p99" "TTFT p50" "TTFT p99" "cpu/tok" "peak RSS" "tree Pss" failed "mock cpu" "mock/tok" "mock late"
# shellcheck disable=SC2059
printf "$fmt" "" "" ms "req/s" "" "req/s" ms ms ms ms "µs" MB MB "" cores "µs" ">1 ms"
# The mock's CPU over a run (clock ticks of /proc/PID/stat): is the server
# the bottleneck? mock_cpu_start before the client, mock_cpu_end after it
# sets mock_secs (CPU seconds) and mock_cores: mock_secs over the time it
# had streams to serve, from the first completion request's arrival to the
# last one's plus one answer (TTFT + 100 ITL), so that a peer's seconds of
# start-up, when the mock idles, do not dilute it.
mock_cpu_start() {
    m0=$(awk '{ print $14 + $15 }' "/proc/$mock_pid/stat")
}
mock_cpu_end() {
    local m1 span
    mock_late=$(mock_late_share)
    m1=$(awk '{ print $14 + $15 }' "/proc/$mock_pid/stat")
    mock_secs=$(echo "$m0 $m1 $(getconf CLK_TCK)" | awk '{ print ($2 - $1) / $3 }')
    span=$(arrivals_json | jq -r 'if length > 0 then (.[-1] - .[0]) / 1e6 else 0 end')
    mock_cores=$(echo "$mock_secs $span $itl" | awk '{ printf "%.2f", $1 / ($2 + (20 + 100 * $3) / 1000) }')
}
# mock_late_share: the share of token events mc-mock wrote more than 1 ms
# after their deadline (its /metrics histogram since it started), in %:
# a TTFT or ITL tail with none is the client's, with many the mock's.
mock_late_share() {
    curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null | awk '
        $1 == "mc_mock:token_send_delay_seconds_bucket{le=\"0.001\"}" { on_time = $2 }
        $1 == "mc_mock:token_send_delay_seconds_count" { n = $2 }
        END { if (n > 0) printf "%.2f%%", (n - on_time) * 100 / n; else printf "-" }'
}
# stream_row LABEL SENT ACHIEVED CLIENT_P99 SERVER_P99 TTFT_P50 TTFT_P99
#   CPU BASE_CPU TOKENS RSS TREE FAILED: prints one row; sets per_tok.
stream_row() {
    per_tok=$(echo "$8 $9 ${10}" | awk '{ if ($3 > 0) printf "%.2f", ($1 - $2) * 1e6 / $3; else printf "-" }')
    # shellcheck disable=SC2059
    printf "$fmt" "$1" "$n_streams" "$itl" "$rate" "$2" "$3" "$4" "$5" "$6" "$7" "$per_tok" \
        "$(printf %.0f "${11}")" "$(printf %.0f "${12}")" "${13}" "$mock_cores" \
        "$(echo "$mock_secs ${10}" | awk '{ if ($2 > 0) printf "%.2f", $1 * 1e6 / $2; else printf "-" }')" \
        "$mock_late"
}
for item in $streams; do
    n_streams=${item%%:*}
    itl=${ITL_MS:-10}
    [[ "$item" == *:* ]] && itl=${item#*:}
    # rate = streams / (TTFT + 100 ITL)
    rate=$(( n_streams * 1000 / (20 + 100 * itl) ))
    n=$(( rate * secs ))
    trace="$work/streams-$n_streams-$itl.jsonl"
    ours_tok=""; ours_s99=""
    awk -v r="$rate" -v n="$n" 'BEGIN { for (i = 0; i < n; i++)
        printf "{\"timestamp\":%.3f,\"input_length\":8,\"output_length\":100}\n", i * 1000 / r }' > "$trace"
    for r in "${replays[@]}"; do
        label=${r%%:*}; exe=${r#*:}
        mapfile -t extra < <(replay_args "$label")
        start_mock --ttft-ms 20 --itl-ms "$itl"
        mock_cpu_start
        rm -f "$work/streams.json"
        measure "$work/m.txt" "$exe" --url "http://127.0.0.1:$port" --model mock-model "${extra[@]}" \
            --summary "$work/streams.json" -i "$trace" -o /dev/null
        mock_cpu_end
        if [[ ! -s "$work/streams.json" ]]; then
            echo "$label $n_streams:$itl: no summary, the run failed (see $work/measure.log)"
            continue
        fi
        read -r cpu rss tree _ < "$work/m.txt"
        read -r sent achieved c99 t50 t99 tokens failed < <(jq -r '"\(.requests.sent) \(.send_rate | floor) \(.metrics.lag.p99) \(.metrics.ttft.p50) \(.metrics.ttft.p99) \(.tokens.output) \(.requests.failed)"' "$work/streams.json")
        read -r _ s99 < <(server_lag "$trace" "$mock_log")
        stream_row "$label" "$sent" "$achieved" "$c99" "$s99" "$t50" "$t99" "$cpu" "${base_cpu[$label]}" "$tokens" "$rss" "$tree" "$failed"
        [[ "$label" == mc-replay ]] && { ours_tok=$per_tok; ours_s99=$s99; }
    done
    # The floor: the same streams read as mc-replay reads them and nothing
    # more done with them (examples/read_floor.rs), against a fresh mock.
    if [[ -x "$floor" ]]; then
        start_mock --ttft-ms 20 --itl-ms "$itl"
        mock_cpu_start
        measure "$work/m.txt" "$floor" "http://127.0.0.1:$port" "$n_streams" "$rate" "$n" 100
        mock_cpu_end
        read -r cpu rss tree rc < "$work/m.txt"
        read -r got tokens < <(grep '^{"requests"' "$work/measure.log" | tail -1 | jq -r '"\(.requests) \(.tokens)"')
        stream_row floor "$got" - - - - - "$cpu" 0 "$tokens" "$rss" "$tree" "$(( n - got ))"
        [[ "$rc" != 0 ]] && echo "  WARNING: the floor run failed (exit $rc; see $work/measure.log)"
        echo "  mc-replay over the floor: $(echo "$ours_tok $per_tok" | awk '{ if ($1 + 0 > 0 && $2 + 0 > 0) printf "%.2f µs a token", $1 - $2; else printf "-" }')"
    else
        echo "  note: no floor row ($floor not built: cargo build --release --example read_floor)"
    fi
    for p in "${peers[@]}"; do
        start_mock --ttft-ms 20 --itl-ms "$itl"
        out="$work/$p-streams-$n_streams-$itl"
        peer_cmd "$p" "$trace" "$rate" "$n" 100 "$out"
        mock_cpu_start
        measure "$work/m.txt" "${cmd[@]}"
        mock_cpu_end
        read -r cpu rss tree rc < "$work/m.txt"
        read -r got achieved < <(mock_counts)
        read -r _ l99 t50 t99 tokens failed < <(peer_figures "$p" "$out")
        read -r _ s99 < <(server_lag "$trace" "$mock_log")
        stream_row "$p" "$got" "$achieved" "$l99" "$s99" "$t50" "$t99" "$cpu" "${peer_base[$p]}" "$tokens" "$rss" "$tree" "$failed"
        echo "  mc-replay / $p: cpu/tok $(ratio "$ours_tok" "$per_tok"), srv lag p99 $(ratio "$ours_s99" "$s99")"
        peer_notes
    done
done
