# Sourced by scripts/bench-replay.sh (not run on its own): finding the peer
# clients (AIPerf 0.13.0, GuideLLM 0.8.1), running them against the mock, and
# measuring a process tree. Uses the caller's $work, $port, $prio, $mock_log,
# $aiperf, $aiperf_tok, $guidellm, $guidellm_tok and $peer_timeout.

# peer_find NAME VALUE VENV_BIN...: the peer's executable, or nothing.
# VALUE is the user's setting (AIPERF / GUIDELLM): "none" skips, a path is
# used as is, empty looks on PATH and then in the usual venvs.
peer_find() {
    local name=$1 value=$2 v
    shift 2
    [[ "$value" == none ]] && return 0
    if [[ -n "$value" ]]; then echo "$value"; return 0; fi
    command -v "$name" && return 0
    for v in "$@"; do
        [[ -x "$v" ]] && { echo "$v"; return 0; }
    done
    return 0
}

# peer_check NAME EXE TOKENIZER: prints why the peer cannot run (nothing when
# it can): the executable must answer --version within 120 s (a venv whose
# install failed half-way does not) and the tokenizer must be a directory.
peer_check() {
    local ver
    if ! ver=$(timeout 120 "$2" --version 2>&1 | tail -1); then
        echo "$2 --version failed: $ver"
        return 0
    fi
    [[ -d "$3" ]] || echo "no tokenizer directory $3 (AIPERF_TOKENIZER / GUIDELLM_TOKENIZER)"
}

# tree_pss_kb PID: summed Pss (kB) of PID and all its descendants. Pss, not
# Rss: the peers fork workers that share pages, and Rss would count a shared
# page once per process. One ps and one awk per call (cheap enough to run
# every 0.5 s next to the client under test).
tree_pss_kb() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { kids[$2] = kids[$2] " " $1 }
        END {
            q[1] = root; n = 1
            for (i = 1; i <= n; i++) {
                m = split(kids[q[i]], a, " ")
                for (j = 1; j <= m; j++) q[++n] = a[j]
            }
            for (i = 1; i <= n; i++) {
                f = "/proc/" q[i] "/smaps_rollup"
                while ((getline line < f) > 0)
                    if (line ~ /^Pss:/) { split(line, w, " "); s += w[2] }
                close(f)
            }
            print s + 0
        }'
}

# measure OUT CMD...: runs CMD (through $prio) under /usr/bin/time, sampling
# its process tree's summed Pss every 0.5 s. Writes to OUT one line:
# "cpu_seconds max_rss_mb tree_peak_mb exit_status", where cpu_seconds is
# user+sys of CMD and every descendant it waited for (as for `time`),
# max_rss_mb the largest single process's peak RSS (getrusage) and
# tree_peak_mb the largest sampled sum of Pss over the tree. CMD's stdout
# and stderr go to $work/measure.log.
measure() {
    local out=$1 pid peak=0 kb
    shift
    /usr/bin/time -f '%U %S %M %x' -o "$work/mtime.txt" "${prio[@]}" "$@" \
        >> "$work/measure.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        kb=$(tree_pss_kb "$pid")
        (( kb > peak )) && peak=$kb
        sleep 0.5
    done
    wait "$pid" || true
    # time writes "Command exited with non-zero status N" (or "terminated by
    # signal") on a line before the format's line: read the last line.
    tail -1 "$work/mtime.txt" | awk -v p="$peak" '{ printf "%s %.1f %.1f %s\n", $1 + $2, $3 / 1024, p / 1024, $4 }' > "$out"
}

# arrivals_json: the mock log's completion requests (not /v1/models nor
# GuideLLM's /health polls) as a JSON array of arrival times in µs.
arrivals_json() {
    jq -s -c '[.[] | select(.event == "request" and (.path | test("completions"))) | .unix_us] | sort' "$mock_log"
}

# mock_counts: "requests achieved_rate" from the mock log: completion
# requests that arrived, and (requests - 1) / (last - first arrival).
mock_counts() {
    arrivals_json | jq -r 'length as $n | if $n > 1 then "\($n) \(($n - 1) / ((.[-1] - .[0]) / 1e6) | floor)" else "\($n) -" end'
}

# aiperf_cmd TRACE OUTDIR: sets cmd to the command line by which AIPerf
# replays the Mooncake trace on its timestamps (--fixed-schedule), streaming
# chat, ignore_eos like mc-replay
# (so the mock answers exactly output_length tokens), token counts from the
# server's usage, no UI, no /metrics scraping.
aiperf_cmd() {
    cmd=(timeout -k 10 "$peer_timeout" "$aiperf" profile --model mock-model --url "http://127.0.0.1:$port" \
        --endpoint-type chat --streaming --input-file "$1" \
        --custom-dataset-type mooncake_trace --fixed-schedule \
        --extra-inputs ignore_eos:true \
        --tokenizer "$aiperf_tok" --use-server-token-count \
        --ui-type none --no-server-metrics --no-gpu-telemetry \
        --output-artifact-dir "$2")
}

# aiperf_figures OUTDIR: "lag_p50 lag_p99 ttft_p50 ttft_p99 output_tokens
# failed" from AIPerf's profile_export_aiperf.json (ms; "-" when absent).
# lag: AIPerf's replay_sched_lag_p50/p99 (send time minus the row's
# timestamp, less the smallest such value in the run). failed: requests it
# counted as errors ("-": it wrote nothing).
aiperf_figures() {
    local f="$1/profile_export_aiperf.json"
    # Without its summary (AIPerf writes none when every request failed),
    # count the failed records.
    if [[ ! -s "$f" ]]; then
        if [[ -s "$1/profile_export.jsonl" ]]; then
            echo "- - - - 0 $(jq -s '[.[] | select(.error != null)] | length' "$1/profile_export.jsonl")"
        else
            echo "- - - - 0 -"
        fi
        return 0
    fi
    jq -r 'def r: if . == null then "-" else (. * 100 | round / 100) end;
        "\(.replay_sched_lag_p50.avg | r) \(.replay_sched_lag_p99.avg | r) \(.time_to_first_token.p50 | r) \(.time_to_first_token.p99 | r) \(.total_output_tokens.avg // 0) \(.error_request_count.avg // 0)"' "$f"
}

# guidellm_cmd RATE N OUTPUT_TOKENS OUTDIR: writes OUTDIR/scenario.json and
# sets cmd to the command line that runs it: GuideLLM's constant profile (one
# request every 1/RATE s, in order) for N requests of synthetic 8-token
# prompts and OUTPUT_TOKENS-token answers, streaming chat with ignore_eos in
# the body (as mc-replay and AIPerf send it). The scenario goes in a file:
# the backend's extra body does not fit the command line's key=value form.
guidellm_cmd() {
    mkdir -p "$4"
    jq -n --arg target "http://127.0.0.1:$port" --argjson rate "$1" --argjson n "$2" \
        --argjson out "$3" --arg tok "$guidellm_tok" --arg path "$4/benchmarks.json" '
        { spec: {
            backend: { kind: "openai_http", target: $target, model: "mock-model",
                       request_format: "/v1/chat/completions",
                       extras: { body: { ignore_eos: true } } },
            profile: { kind: "constant", rate: $rate },
            constraints: [ { kind: "max_requests", count: $n } ],
            data: [ { kind: "synthetic_text", prompt_tokens: 8, output_tokens: $out } ],
            tokenizer: { kind: "huggingface_auto", model: $tok },
            outputs: [ { kind: "json", path: $path } ] } }' > "$4/scenario.json"
    cmd=(timeout -k 10 "$peer_timeout" "$guidellm" run --config "$4/scenario.json" --disable-console)
}

# guidellm_figures OUTDIR: "lag_p50 lag_p99 ttft_p50 ttft_p99 output_tokens
# failed" from GuideLLM's benchmarks.json (ms). lag: its
# request_dispatch_delay (request start minus the time the constant profile
# targeted, not re-anchored) over successful requests. failed: errored +
# incomplete requests.
guidellm_figures() {
    local f="$1/benchmarks.json"
    if [[ ! -s "$f" ]]; then echo "- - - - 0 -"; return 0; fi
    jq -r 'def r: if . == null then "-" else (. * 100 | round / 100) end;
        .benchmarks[0].metrics as $m
        | "\($m.request_dispatch_delay.successful.percentiles.p50 | if . == null then null else . * 1000 end | r) \($m.request_dispatch_delay.successful.percentiles.p99 | if . == null then null else . * 1000 end | r) \($m.time_to_first_token_ms.successful.percentiles.p50 | r) \($m.time_to_first_token_ms.successful.percentiles.p99 | r) \($m.output_token_count.successful.total_sum // 0 | floor) \($m.request_totals.errored + $m.request_totals.incomplete)"' "$f"
}

# peer_cmd PEER TRACE RATE N OUTPUT_TOKENS OUTDIR: sets cmd to one run of
# aiperf (on TRACE) or guidellm (at RATE for N requests); the run is cut off
# after $peer_timeout seconds (a peer that falls far behind takes long).
peer_cmd() {
    rm -rf "$6"
    case $1 in
        aiperf) aiperf_cmd "$2" "$6" ;;
        guidellm) guidellm_cmd "$3" "$4" "$5" "$6" ;;
    esac
}

# peer_errors PEER OUTDIR: the peer's failed requests by error, most common
# first, one "count error" per line (at most 3): AIPerf's per-request
# records (profile_export.jsonl, written even when every request failed),
# GuideLLM's errored requests.
peer_errors() {
    case $1 in
        aiperf) jq -r 'select(.error != null) | .error | "\(.code) \(.type) \(.message)"' "$2/profile_export.jsonl" 2>/dev/null ;;
        guidellm) jq -r '.benchmarks[0].requests.errored[]? | .info.error // "unknown"' "$2/benchmarks.json" 2>/dev/null ;;
    esac | cut -c1-120 | sort | uniq -c | sort -rn | head -3 || true
}

# peer_figures PEER OUTDIR: the peer's own figures (see aiperf_figures).
peer_figures() {
    "$1_figures" "$2"
}
