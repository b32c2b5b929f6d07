#!/usr/bin/env bash
# Calibrate the engine model against a running llama-cpp-python server with
# the designed workload (mc-gen calibrate), and state its error on runs it
# was not fitted to: another rate and another workload (issue 34's target:
# held-out p50 and means within 10%, p99 within 20%). The held-out session
# workload is replayed twice at the same pace, so the server's own
# run-to-run variance is measured beside the fit's error.
#
#   scripts/calibrate-llamacpp.sh URL
#
# URL: a llama-cpp-python server already started, as ../shared/REAL-SERVERS.md
# installs it (scripts/interop.sh llama does), queueing rather than cutting
# the stream in flight, on one thread and its own core:
#   setsid nice -n -10 taskset -c 1 python -m llama_cpp.server --model gemma-270m.gguf \
#       --port P --n_ctx 4096 --n_threads 1 --n_threads_batch 1 \
#       --interrupt_requests False --model_alias gemma-3-270m
#   echo -10 > /proc/SERVER_PID/autogroup
# With the kernel's autogroups on (/proc/sys/kernel/sched_autogroup_enabled),
# nice ranks processes only within their session: against other sessions'
# builds the server at nice -10 got 14% of its core (a 304-token prompt in
# 14 s, 2 s of it on the CPU); its own session with the autogroup at -10,
# 90% (3 s). n_threads_batch defaults to 2: two spinning threads on one core.
# Run this script the same way (setsid, its autogroup at -10) on a shared
# machine; mc-replay runs on core 0, at nice -10 where allowed.
#
# The server's shape, given to mc-fit: it runs one sequence at a time
# (max seqs 1) in a context of 4,096 tokens (KV 4,096 tokens), prefilling a
# prompt in batches of n_batch 512 tokens. Override with N_CTX, BATCH, BLOCK.
# The rate ladder stays below what one request at a time on one core
# serves (about 0.5 requests/s of the design's short requests), so the
# queue stays seconds, not hours: RATES (default 0.15,0.3), RATE_REQUESTS.
#
# The completions endpoint: llama-cpp-python 0.3.36 has no chat template
# for Gemma 3 (it falls back to llama-2's) and its chat answers end at once,
# empty. llama.cpp ignores min_tokens and ignore_eos; so the answers are as
# long as the trace asks, the end-of-text and end-of-turn tokens are banned
# through logit_bias (Gemma 3's ids 1 and 106; EOS_BIAS overrides the JSON).
# SERVER_LOG=FILE (the server's stderr, verbose as it is by default): each
# run's prompt tokens reused from the previous request (llama.cpp's
# "prefix-match hit") and the server's own prompt and decode times, from
# the lines the run added to the log.
# Opt-in, not in .ci/run: about 14 minutes a run (2026-11-27, decision 0045).
set -euo pipefail
cd "$(dirname "$0")/.."
url=${1:?usage: scripts/calibrate-llamacpp.sh URL}
ctx=${N_CTX:-4096}
batch=${BATCH:-512}
block=${BLOCK:-16}
work=${CAL_DIR:-/tmp/mctrace-calibrate-llamacpp}
rm -rf "$work"
mkdir -p "$work"
cargo build --release --quiet --bin mc-gen --bin mc-replay --bin mc-fit --bin mc-report
bin=target/release
shape=(--engine-block-size "$block" --kv-tokens "$ctx" --max-batched-tokens "$batch" --max-seqs 1
    --engine-prefix-cache "${PREFIX_CACHE:-last-prompt}")
bias=${EOS_BIAS:-'{"logit_bias":{"1":-100,"106":-100}}'}

# The client on core 0, at nice -10 when allowed, so the server's core is its own.
client=(taskset -c 0)
if nice -n -10 true 2> /dev/null; then client=(nice -n -10 taskset -c 0); fi

# The design at the server's limits: one sequence, and prompts up to
# DESIGN_LEN (2,048: the longest held-out prompt is 1.5k tokens, and each
# prompt token costs this server about 7 ms, so climbing to 4,096 would
# add more than a minute). Short rate-ladder requests: about 2 s each alone, so
# the top rate is most of the server's capacity.
"$bin/mc-gen" calibrate --max-model-len "${DESIGN_LEN:-2048}" --max-seqs 1 --rates "${RATES:-0.15,0.3}" \
    --rate-requests "${RATE_REQUESTS:-12}" --rate-isl lognormal:128:0.6 --rate-osl lognormal:32:0.5 \
    --decode-osl 64 --block-size 16 --seed 1 > "$work/design.jsonl"
# Held out: two-turn sessions (the second turn resends the first), at their
# own pace twice and at twice the pace; and another workload: a 1k-token
# system prompt shared by every conversation.
"$bin/mc-gen" sessions --sessions "${SESSIONS:-12}" --session-rate 0.1 --turns 2 \
    --new-tokens lognormal:150:0.5 --osl 32 --block-size 16 --seed 2 > "$work/sessions.jsonl"
"$bin/mc-gen" sessions --sessions "${OTHER_SESSIONS:-10}" --session-rate 0.08 --turns 2 \
    --system-prompt-tokens 1024 --new-tokens 200 --osl 24 --block-size 16 --seed 3 > "$work/other.jsonl"

# The server's view of one run: the log lines from FROM on.
server_view() { # FROM LABEL
    [[ -n ${SERVER_LOG:-} ]] || return 0
    tail -n +"$1" "$SERVER_LOG" | awk -v run="$2" '
        /prefix-match hit/ { hit += $2; rest += $6 }
        /prompt eval time/ { pm += $6; pt += $9; np++ }
        /[^t] eval time/ { dm += $5; dt += $8 }
        END { printf "server log, %s: %d prompts, %d tokens reused of %d (%.1f%%); prompt eval %.1f ms/token; decode %.2f ms/token\n",
              run, np, hit, hit + rest, 100 * hit / (hit + rest + 1e-9), pm / (pt + 1e-9), dm / (dt + 1e-9) }'
}
# Each run its own --seed: no run's prompts share a prefix with an earlier
# one's (llama.cpp keeps the last prompt), as the fit's simulation assumes.
# The engine model keeps every prompt its KV holds, llama.cpp only the last:
# on 2026-11-27 that was most of the held-out TTFT error (decision 0045).
seed=0
replay() { # TRACE SPEEDUP OUT
    seed=$((seed + 1))
    local from=1
    [[ -n ${SERVER_LOG:-} ]] && from=$(($(wc -l < "$SERVER_LOG") + 1))
    "${client[@]}" "$bin/mc-replay" --url "$url" --model "${MODEL:-gemma-3-270m}" -i "$1" --endpoint completions \
        --speedup "$2" -o "$3" --seed "$seed" --extra-body "$bias" --timeout 3600 \
        2> "$3.log" || { tail -5 "$3.log"; exit 1; }
    server_view "$from" "$(basename "$3" .jsonl)"
}
replay "$work/design.jsonl" 1 "$work/design-run.jsonl"
replay "$work/sessions.jsonl" 1 "$work/sessions-x1.jsonl"
replay "$work/sessions.jsonl" 1 "$work/sessions-x1b.jsonl"
replay "$work/sessions.jsonl" 2 "$work/sessions-x2.jsonl"
replay "$work/other.jsonl" 1 "$work/other-x1.jsonl"

echo "== fit on the designed run"
"$bin/mc-fit" --trace "$work/design.jsonl" "$work/design-run.jsonl" -o "$work/fitted.json" \
    --max-model-len "$ctx" "${shape[@]}"
for run in sessions-x1 sessions-x1b sessions-x2; do
    echo "== held out: $run"
    "$bin/mc-fit" --trace "$work/sessions.jsonl" --predict "$work/fitted.json" "$work/$run.jsonl" "${shape[@]}"
done
echo "== the server against itself: sessions x1 run twice (change of the second against the first)"
"$bin/mc-report" --compare "$work/sessions-x1.jsonl" "$work/sessions-x1b.jsonl" 2>&1 |
    grep -E '^(metric|(ttft|itl|e2e)_(mean|p50|p99)_ms|output_token)' || true
echo "== held out: another workload (1k-token system prompt)"
"$bin/mc-fit" --trace "$work/other.jsonl" --predict "$work/fitted.json" "$work/other-x1.jsonl" "${shape[@]}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
