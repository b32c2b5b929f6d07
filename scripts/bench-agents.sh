#!/usr/bin/env bash
# Agent-graph replay benchmark (docs/guide/agents.md, "Replay"): a graph of
# TASKS tasks x 8 calls (r spawns a, b, c; j waits for the three; k and l
# wait for j; m waits for k and l; with think and tool time between) is
# replayed by mc-replay against mc-mock, and checked from what the server
# saw (mc-mock's request log: arrival time and x-trace-line per request):
#
# - violations: calls that arrived before a call they wait for could have
#   ended at the server plus their own think and tool time. mc-mock's
#   latency model sends the last token at arrival + TTFT + (tokens - 1) x
#   ITL, and its pacer sends a token at most 0.1 ms before that (EARLY in
#   src/mock/pacer.rs): the earliest end is that minus 0.1 ms. Arrivals
#   earlier than the model's time but within the 0.1 ms are counted apart;
# - sibling spread: per set of calls one end releases (a, b, c; k, l), the
#   last arrival minus the first, p50/p99/max;
# - schedule lag p50/p99 as mc-replay saw it (its summary);
# then the same graph on the engine model (no --url, virtual time): its
# wall time (target: under 1 s with the release build).
#
# Usage: scripts/bench-agents.sh     TASKS=10000 EVERY_MS=2 (task spacing)
set -euo pipefail
cd "$(dirname "$0")/.."

tasks=${TASKS:-10000}
every=${EVERY_MS:-2}
ttft=20
itl=2
work=$(mktemp -d -p "${TMPDIR:-/tmp}" mctrace-bench-agents.XXXXXX)
mock_pid=""
cleanup() {
    if [[ -n "$mock_pid" ]]; then kill "$mock_pid" 2> /dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
cargo build --quiet --release --bin mc-replay --bin mc-mock
bin=target/release
echo "release build; $(nproc) cores; $(date -u +%FT%TZ); $tasks tasks x 8 calls, one every $every ms"

python3 - "$tasks" "$every" > "$work/graph.jsonl" << 'EOF'
import json, sys
tasks, every = int(sys.argv[1]), float(sys.argv[2])
# (call, wait_for, branches, delay, tool_wait_ms)
task = [("r", [], ["a", "b", "c"], 0, 0), ("a", [], [], 0, 5), ("b", [], [], 0, 5),
        ("c", [], [], 0, 5), ("j", ["a", "b", "c"], [], 10, 0), ("k", ["j"], [], 0, 0),
        ("l", ["j"], [], 0, 0), ("m", ["k", "l"], [], 2, 3)]
for i in range(tasks):
    for k, (c, wait, br, delay, tool) in enumerate(task):
        row = {"session_id": f"task-{i}", "request_id": f"t{i}.{c}",
               "input_length": 16 + k, "output_length": 4}
        if k == 0:
            row["timestamp"] = 1000 + i * every
        if wait:
            row["wait_for"] = [f"t{i}.{w}" for w in wait]
        if br:
            row["branches"] = [f"t{i}.{b}" for b in br]
        if delay:
            row["delay"] = delay
        if tool:
            row["tool_wait_ms"] = tool
        print(json.dumps(row))
EOF

"$bin/mc-mock" --port 0 --ttft-ms "$ttft" --itl-ms "$itl" > "$work/mock.log" 2> /dev/null &
mock_pid=$!
for _ in $(seq 100); do
    [[ -s "$work/mock.log" ]] && break
    sleep 0.05
done
addr=$(head -1 "$work/mock.log" | jq -r .addr)
start=$(date +%s.%N)
"$bin/mc-replay" --url "http://$addr" -i "$work/graph.jsonl" \
    --summary "$work/summary.json" > "$work/results.jsonl" 2> "$work/replay.err"
end=$(date +%s.%N)
kill "$mock_pid"
wait "$mock_pid" 2> /dev/null || true
mock_pid=""
echo "mc-replay against mc-mock: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s wall"
grep -E "requests|^tasks" "$work/replay.err" || true
jq -r '"client schedule lag ms: p50 \(.metrics.lag.p50) p99 \(.metrics.lag.p99) max \(.metrics.lag.max)"' "$work/summary.json"

python3 - "$work/graph.jsonl" "$work/mock.log" "$ttft" "$itl" << 'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ttft, itl = float(sys.argv[3]), float(sys.argv[4])
seen = {}
for l in open(sys.argv[2]):
    v = json.loads(l)
    if v.get("event") != "request" or v.get("x_trace_line") is None:
        continue
    line = int(v["x_trace_line"])
    toks = max(v.get("max_tokens") or 1, 1)
    seen[line] = (v["t_us"], v["t_us"] + (ttft + itl * (toks - 1)) * 1000)
by_id = {r["request_id"]: i + 1 for i, r in enumerate(rows)}
deps = {i + 1: [by_id[w] for w in r.get("wait_for", [])] for i, r in enumerate(rows)}
for i, r in enumerate(rows):
    for b in r.get("branches", []):
        deps[by_id[b]].append(i + 1)
missing = len(rows) - len(seen)
EARLY = 100  # us: mc-mock's pacer sends at most this early
violations, worst, within_early = 0, 0.0, 0
kids = {}
for line, ds in deps.items():
    if not ds or line not in seen:
        continue
    r = rows[line - 1]
    gap = (r.get("delay", 0) + r.get("tool_wait_ms", 0)) * 1000
    ready = max(seen[d][1] for d in ds if d in seen) + gap
    # 1 us: the log's arrival times are whole us.
    if seen[line][0] + 1 < ready - EARLY:
        violations += 1
        worst = max(worst, ready - EARLY - seen[line][0])
    elif seen[line][0] + 1 < ready:
        within_early += 1
    if len(ds) == 1:
        kids.setdefault(ds[0], []).append(line)
spreads = sorted((max(seen[k][0] for k in ks) - min(seen[k][0] for k in ks)) / 1000
                 for ks in kids.values() if len(ks) > 1 and all(k in seen for k in ks))
pick = lambda q: spreads[round((len(spreads) - 1) * q)]
print(f"server saw {len(seen)} of {len(rows)} calls ({missing} missing)")
print(f"dependency violations at the server: {violations}"
      + (f" (worst {worst / 1000:.3f} ms early)" if violations else "")
      + f"; {within_early} calls arrived within the pacer's 0.1 ms before the model's end")
print(f"sibling spread at the server ({len(spreads)} sets): p50 {pick(0.5):.3f} ms, "
      f"p99 {pick(0.99):.3f} ms, max {spreads[-1]:.3f} ms")
EOF

# The engine model: the same graph in virtual time, best of 3 wall times.
best=""
for _ in 1 2 3; do
    s=$(date +%s.%N)
    "$bin/mc-replay" -i "$work/graph.jsonl" > /dev/null 2> "$work/engine.err"
    e=$(date +%s.%N)
    t=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.3f", b - a }')
    if [[ -z "$best" ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t; fi
done
echo "engine model, same graph: best wall $best s (target < 1 s)"
grep -E "^tasks|simulated duration" "$work/engine.err" || true
