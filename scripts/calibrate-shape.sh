#!/usr/bin/env bash
# Issue 34's second scenario: a 256-wide server (mc-mock --engine with the
# built-in h100-llama3-8b profile) fitted on runs at 2, 4 and 8 req/s and
# held out at 12 and 16 req/s. mc-fit is told the shape except max seqs.
# Prints the fit (the max-seqs verdict, the held-out error by
# leave-one-run-out) and the predictions of the held-out runs by the fitted
# profile, by the fitted coefficients at max seqs 64 (what mc-fit picked
# before it stopped choosing limits the runs cannot tell apart), and by the
# true profile (the floor: wall-clock noise). Opt-in: about 6 minutes.
# REQUESTS (default 240) sizes the workload.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${CAL_DIR:-/tmp/mctrace-calibrate-shape}
rm -rf "$work"
mkdir -p "$work"
cargo build --release --quiet --bin mc-gen --bin mc-replay --bin mc-mock --bin mc-fit
bin=target/release

mock_pid=""
cleanup() { [[ -n "$mock_pid" ]] && kill "$mock_pid" 2>/dev/null || true; }
trap cleanup EXIT
"$bin/mc-mock" --port 0 --engine > "$work/mock.log" 2>/dev/null &
mock_pid=$!
for _ in $(seq 100); do [[ -s "$work/mock.log" ]] && break; sleep 0.05; done
url="http://$(head -1 "$work/mock.log" | jq -r .addr)"

# Independent requests (no sessions: a session waits for its answers, so
# its rate does not follow --rate), replayed open loop at each rate.
n=${REQUESTS:-240}
"$bin/mc-gen" constant --qps 1 --num-requests "$n" --isl uniform:500:3000 --osl uniform:100:500 \
    --block-size 16 --seed 1 > "$work/t.jsonl" 2>/dev/null
shape=(--engine-block-size 16 --kv-tokens 467000 --max-batched-tokens 2048)
seed=0
for rate in 2 4 8 12 16; do
    seed=$((seed + 1))
    # Each run its own --seed: a cold prefix cache, as the fit simulates.
    "$bin/mc-replay" --url "$url" --model m -i "$work/t.jsonl" --rate "$rate" --seed "$seed" \
        -o "$work/rate-$rate.jsonl" 2> "$work/rate-$rate.log" || { tail -5 "$work/rate-$rate.log"; exit 1; }
done

echo "== fit on rates 2, 4, 8"
time "$bin/mc-fit" --trace "$work/t.jsonl" "$work"/rate-{2,4,8}.jsonl -o "$work/fitted.json" "${shape[@]}"
jq '.max_seqs = 64' "$work/fitted.json" > "$work/fitted-64.json"
for held in 12 16; do
    for p in fitted fitted-64; do
        echo "== held out: rate $held, $p"
        "$bin/mc-fit" --trace "$work/t.jsonl" --predict "$work/$p.json" "$work/rate-$held.jsonl" "${shape[@]}"
    done
    echo "== held out: rate $held, the true profile (the floor)"
    "$bin/mc-fit" --trace "$work/t.jsonl" --predict h100-llama3-8b "$work/rate-$held.jsonl" "${shape[@]}"
done
