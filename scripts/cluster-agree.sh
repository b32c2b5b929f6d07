#!/usr/bin/env bash
# Does the engine cluster in virtual time predict four real engines behind
# mc-replay's router? (issue 34 §2)
#
# Four `mc-mock --engine` processes on 127.0.0.1 (the engine model on the
# wall clock), a session workload with a shared system prompt (mc-gen
# sessions), replayed in real time through `--url a,b,c,d --router R`, and
# the same trace through `--engine-workers 4 --router R` in virtual time.
# Prints, for both: the cluster's prefix-cache hit rate (cached / prompt
# tokens as the workers reported them), TTFT p50 and p90, requests per
# worker, and the share of requests routed to the same worker in both
# runs; then the differences. Target: hit rate and TTFT p50 within 5%.
#
# Usage: scripts/cluster-agree.sh
#   ROUTER=prefix (or round-robin, least-loaded)  SESSIONS=200  RATE=8
#   SYSTEM=2048 (shared system-prompt tokens)  PROFILE=release
#   ENGINE_FLAGS="--t-fix-ms 20" (extra engine flags for both sides)
#   NO_BUILD=1 (use the binaries already in target/$PROFILE)
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${PROFILE:-release}
router=${ROUTER:-prefix}
sessions=${SESSIONS:-200}
rate=${RATE:-8}
system=${SYSTEM:-2048}
read -r -a engine_flags <<< "${ENGINE_FLAGS:-}"
work=$(mktemp -d -p "${TMPDIR:-/tmp}" mctrace-cluster-agree.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

[[ -n ${NO_BUILD:-} ]] ||
    cargo build --quiet --profile "$profile" --bin mc-gen --bin mc-replay --bin mc-mock
bin=target/$profile

"$bin/mc-gen" sessions --sessions "$sessions" --session-rate "$rate" \
    --system-prompt-tokens "$system" --block-size 16 --seed 7 > "$work/trace.jsonl" 2> /dev/null
echo "trace: mc-gen sessions --sessions $sessions --session-rate $rate --system-prompt-tokens $system" \
    "--block-size 16 ($(wc -l < "$work/trace.jsonl") rows); router: $router"

urls=()
for i in 0 1 2 3; do
    "$bin/mc-mock" --port 0 --engine "${engine_flags[@]}" > "$work/mock$i.log" 2> /dev/null &
    pids+=($!)
    for _ in $(seq 100); do [[ -s "$work/mock$i.log" ]] && break; sleep 0.05; done
    urls+=("http://$(head -1 "$work/mock$i.log" | jq -r .addr)")
done
list=$(IFS=,; echo "${urls[*]}")

"$bin/mc-replay" -i "$work/trace.jsonl" --url "$list" --router "$router" \
    --summary "$work/real.json" > "$work/real.jsonl" 2> "$work/real.err"
"$bin/mc-replay" -i "$work/trace.jsonl" --engine-workers 4 --router "$router" "${engine_flags[@]}" \
    --summary "$work/virt.json" > "$work/virt.jsonl" 2> "$work/virt.err"

row() { # summary.json
    jq -r '[(.router.hit_rate * 10000 | round / 100), .metrics.ttft.p50, .metrics.ttft.p90,
            (.router.workers | map(.routed) | join(","))] | @tsv' "$1"
}
same=$(jq -s -r 'map({key: (.line | tostring), value: .worker}) | from_entries' "$work/virt.jsonl" > "$work/virt.map"
       jq -r --slurpfile v "$work/virt.map" 'select($v[0][.line | tostring] == .worker) | .line' "$work/real.jsonl" | wc -l)
total=$(wc -l < "$work/real.jsonl")
printf '\n%-10s %8s %11s %11s  %s\n' run "hit %" "TTFT p50" "TTFT p90" "requests per worker"
paste <(echo real; echo virtual) <(row "$work/real.json"; row "$work/virt.json") |
    awk -F'\t' '{ printf "%-10s %8s %11.2f %11.2f  %s\n", $1, $2, $3, $4, $5 }'
paste <(row "$work/real.json") <(row "$work/virt.json") | awk -F'\t' -v same="$same" -v total="$total" '{
    dh = ($5 == 0 ? 0 : 100 * ($1 - $5) / $5); dt = ($6 == 0 ? 0 : 100 * ($2 - $6) / $6)
    printf "\nreal vs virtual: hit rate %+.2f%%, TTFT p50 %+.2f%% (target: both within 5%%: %s)\n",
        dh, dt, ((dh < 5 && dh > -5 && dt < 5 && dt > -5) ? "met" : "NOT met")
    printf "requests routed to the same worker in both runs: %d of %d\n", same, total
}'
