#!/usr/bin/env bash
# Calibrate the engine model against a server and state its error on runs it
# was not fitted to.
#
#   scripts/calibrate.sh mock            # mc-mock --engine with coefficients mc-fit is not told
#   scripts/calibrate.sh URL [MC-FIT OPTIONS...]
#                                        # a real server, e.g. vLLM CPU:
#   scripts/calibrate.sh http://127.0.0.1:8000 --engine-block-size 128 --kv-tokens 262144 \
#       --max-batched-tokens 2048 --max-seqs 128
#
# Calibration set: a session workload (mc-gen sessions) replayed at its own
# pace and twice as fast. Held out: the same workload four times as fast, and
# another workload (shorter sessions, longer prompts). Prints mc-fit's fit
# and, per held-out run, predicted against measured with the error of each
# metric. Opt-in (not in .ci/run): a run against a server takes minutes.
# REPLAY_ARGS adds options to every mc-replay (e.g. "--tokenizer DIR").
# SESSIONS (default 40) and OTHER_SESSIONS (default 60) size the two
# workloads: a server that runs one request at a time (llama-cpp-python)
# takes about 8 minutes a run at the defaults; smaller sets fit less well.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/calibrate.sh mock|URL [mc-fit options]}
shift
work=${CAL_DIR:-/tmp/mctrace-calibrate}
rm -rf "$work"
mkdir -p "$work"
cargo build --release --quiet --bin mc-gen --bin mc-replay --bin mc-mock --bin mc-fit
bin=target/release

mock_pid=""
cleanup() { [[ -n "$mock_pid" ]] && kill "$mock_pid" 2>/dev/null || true; }
trap cleanup EXIT

fit_opts=("$@")
if [[ "$target" == mock ]]; then
    # The "server": the engine model on the wall clock, with a profile the
    # fit is not told (a slower, CPU-like machine than the built-in H100).
    cat > "$work/hidden.json" <<'EOF'
{"name": "hidden", "model": "roofline", "t_fix_ms": 0.5, "c_seq_ms": 0.02,
 "t_w_ms": 12.0, "c_lin_ms": 0.05, "k_ms": 2e-6, "c_kv_ms": 1e-4,
 "kv_tokens": 200000, "block_size": 16, "max_batched_tokens": 2048, "max_seqs": 64}
EOF
    "$bin/mc-mock" --port 0 --engine --engine-profile "$work/hidden.json" > "$work/mock.log" 2>/dev/null &
    mock_pid=$!
    for _ in $(seq 100); do [[ -s "$work/mock.log" ]] && break; sleep 0.05; done
    url="http://$(head -1 "$work/mock.log" | jq -r .addr)"
    fit_opts+=(--engine-block-size 16 --kv-tokens 200000 --max-batched-tokens 2048)
    echo "server: mc-mock --engine with hidden coefficients: $(tr -d '\n' < "$work/hidden.json")"
else
    url=$target
    echo "server: $url"
fi

"$bin/mc-gen" sessions --sessions "${SESSIONS:-40}" --session-rate 2 --turns 3 --new-tokens 300 --osl 64 \
    --block-size 16 --seed 1 > "$work/sessions.jsonl" 2>/dev/null
"$bin/mc-gen" sessions --sessions "${OTHER_SESSIONS:-60}" --session-rate 3 --turns 2 --system-prompt-tokens 1024 \
    --new-tokens 600 --osl 32 --block-size 16 --seed 2 > "$work/other.jsonl" 2>/dev/null

# Each run its own --seed: its prompts share no blocks with an earlier run's,
# so every run meets a cold prefix cache, as the fit's simulation assumes.
seed=0
replay() { # TRACE SPEEDUP OUT
    seed=$((seed + 1))
    "$bin/mc-replay" --url "$url" --model "${MODEL:-m}" -i "$1" --speedup "$2" -o "$3" --seed "$seed" \
        ${REPLAY_ARGS:-} 2> "$3.log" || { tail -5 "$3.log"; exit 1; }
}
for s in 1 2 4; do replay "$work/sessions.jsonl" "$s" "$work/sessions-x$s.jsonl"; done
replay "$work/other.jsonl" 1 "$work/other-x1.jsonl"

echo "== fit on sessions x1, x2"
"$bin/mc-fit" --trace "$work/sessions.jsonl" "$work/sessions-x1.jsonl" "$work/sessions-x2.jsonl" \
    -o "$work/fitted.json" "${fit_opts[@]}"
echo "== held out: sessions x4"
"$bin/mc-fit" --trace "$work/sessions.jsonl" --predict "$work/fitted.json" \
    "$work/sessions-x4.jsonl" "${fit_opts[@]}"
echo "== held out: another workload (1k-token system prompt, 2 turns)"
"$bin/mc-fit" --trace "$work/other.jsonl" --predict "$work/fitted.json" \
    "$work/other-x1.jsonl" "${fit_opts[@]}"
if [[ "$target" == mock ]]; then
    echo "== the hidden profile itself on the held-out run (the floor: wall-clock noise)"
    "$bin/mc-fit" --trace "$work/sessions.jsonl" --predict "$work/hidden.json" \
        "$work/sessions-x4.jsonl" "${fit_opts[@]}"
fi
