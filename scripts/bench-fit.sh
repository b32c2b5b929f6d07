#!/usr/bin/env bash
# The fit's target (issue 34): against mc-mock --engine with a hidden
# profile, 20 random profiles drawn by a seeded script from plausible ranges,
# held-out TTFT/ITL/E2E p50 and means within 5%, p99 within 10%, in at least
# 18 of 20.
#
#   scripts/bench-fit.sh                 # 20 profiles, seed 34
#   N=3 SEED=7 scripts/bench-fit.sh      # fewer, another draw
#   MODE=virtual scripts/bench-fit.sh    # the engine model with the hidden
#                                        # profile as the server, in virtual
#                                        # time: the fit alone, no wall clock
#   REFIT=1 scripts/bench-fit.sh         # fit the runs of the last bench again
#                                        # (BENCH_DIR kept; after a change to mc-fit)
#   FIT_FLAGS=--server-histograms ...    # fit to the server's request-phase
#                                        # histograms (off by default)
#
# Per profile: mc-mock --engine --engine-profile hidden.json on the wall
# clock; the designed calibration workload (mc-gen calibrate, at the
# profile's context limit and concurrency) replayed against it in real time;
# mc-fit on that one run, told the server's shape as a user who knows their
# server would be (KV tokens, block size, step budget, max seqs), not its
# coefficients; held out: a session workload (2 turns, shared history) at
# another rate, predicted with the fitted profile, and with the hidden
# profile itself (the wall clock's noise: the floor any fit can reach).
# Prints one line per profile and the count meeting the targets, with the
# load average (2 cores shared with other builds blur the wall clock), then
# the fitted profile against the hidden one on the same held-out sends in
# virtual time (what the fit got wrong, the wall clock's noise taken out).
#   RT=1 ...                             # mc-mock and mc-replay under SCHED_FIFO
#                                        # (`chrt -f 10`, needs root): on a loaded
#                                        # machine nice does not protect them
#                                        # (kernel autogroups rank nice only within
#                                        # a session); with it the hidden profile's
#                                        # own error stayed within 3% at load 16-25
#   FIT_FLAGS='--model serving' ...      # the serving step model: the real-time
#                                        # mock's HTTP exchange is a per-request
#                                        # cost outside the step (decision 0044)
# Opt-in (not in .ci/run): about 1.5 minutes a profile in real time.
# On 2026-11-27, RT=1 at load 16-25: 15 of 20 with the roofline fit, 18 of
# 20 with FIT_FLAGS='--model serving' (the same runs refitted, REFIT=1).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-20}
seed=${SEED:-34}
mode=${MODE:-real}
work=${BENCH_DIR:-/tmp/mctrace-bench-fit-$mode}
if [[ -z "${REFIT:-}" ]]; then
    rm -rf "$work"
fi
mkdir -p "$work"
cargo build --release --quiet --bin mc-gen --bin mc-replay --bin mc-mock --bin mc-fit
bin=$PWD/target/release

mock_pid=""
cleanup() { [[ -n "$mock_pid" ]] && kill "$mock_pid" 2>/dev/null || true; }
trap cleanup EXIT

# The profiles: log-uniform coefficients over GPU- to CPU-like machines,
# the shape from the usual choices.
python3 - "$n" "$seed" "$work" <<'EOF'
import json, math, random, sys
n, seed, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(seed)
def logu(lo, hi):
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))
for i in range(1, n + 1):
    p = {
        "name": f"hidden-{i}", "model": "roofline",
        "t_fix_ms": round(logu(0.05, 1.0), 4),
        "c_seq_ms": round(logu(0.002, 0.1), 5),
        "t_w_ms": round(logu(3.0, 30.0), 3),
        "c_lin_ms": round(logu(0.005, 0.1), 5),
        "k_ms": float(f"{logu(2e-7, 5e-6):.3g}"),
        "c_kv_ms": float(f"{logu(1e-5, 5e-4):.3g}"),
        "block_size": 16,
        "max_batched_tokens": rng.choice([1024, 2048, 4096]),
        "max_seqs": rng.choice([16, 32, 64]),
        "max_model_len": rng.choice([4096, 8192]),
    }
    # Room for the widest decode batch and the longest prompt at once.
    p["kv_tokens"] = rng.choice([65536, 131072, 200000])
    with open(f"{work}/hidden-{i}.json", "w") as f:
        json.dump(p, f)
EOF

field() { jq -r ".$2" "$1"; }
rt=(env)
[[ -n "${RT:-}" ]] && rt=(chrt -f 10)
replay_seed=0
replay() { # URL|hidden.json TRACE OUT
    replay_seed=$((replay_seed + 1))
    local target=(--url "$1" --model m)
    [[ "$mode" == virtual ]] && target=(--engine-profile "$1")
    "${rt[@]}" "$bin/mc-replay" "${target[@]}" -i "$2" -o "$3" --seed "$replay_seed" 2> "$3.log" \
        || { tail -5 "$3.log"; exit 1; }
}

for i in $(seq "$n"); do
    d="$work/p$i"
    mkdir -p "$d"
    hidden="$work/hidden-$i.json"
    len=$(field "$hidden" max_model_len)
    seqs=$(field "$hidden" max_seqs)
    shape=(--engine-block-size 16 --kv-tokens "$(field "$hidden" kv_tokens)"
        --max-batched-tokens "$(field "$hidden" max_batched_tokens)" --max-seqs "$seqs")
    [[ -n "${REFIT:-}" ]] || "$bin/mc-gen" calibrate --max-model-len "$len" --max-seqs "$seqs" --rates 2,4,8 \
        --rate-requests 24 --gap-ms 100 --block-size 16 --seed "$i" > "$d/design.jsonl" 2>/dev/null
    [[ -n "${REFIT:-}" ]] || "$bin/mc-gen" sessions --sessions 30 --session-rate 1.5 --turns 2 \
        --new-tokens lognormal:400:0.5 --osl lognormal:64:0.5 --think-time-ms lognormal:2000:0.5 \
        --block-size 16 --seed "$((i + 1000))" > "$d/heldout.jsonl" 2>/dev/null
    t0=$(date +%s)
    if [[ -n "${REFIT:-}" ]]; then
        :
    elif [[ "$mode" == virtual ]]; then
        replay "$hidden" "$d/design.jsonl" "$d/design-run.jsonl"
        replay "$hidden" "$d/heldout.jsonl" "$d/heldout-run.jsonl"
    else
        "${rt[@]}" "$bin/mc-mock" --port 0 --engine --engine-profile "$hidden" > "$d/mock.log" 2>/dev/null &
        mock_pid=$!
        for _ in $(seq 200); do [[ -s "$d/mock.log" ]] && break; sleep 0.05; done
        url="http://$(head -1 "$d/mock.log" | jq -r .addr)"
        replay "$url" "$d/design.jsonl" "$d/design-run.jsonl"
        replay "$url" "$d/heldout.jsonl" "$d/heldout-run.jsonl"
        kill "$mock_pid"
        wait "$mock_pid" 2>/dev/null || true
        mock_pid=""
    fi
    t1=$(date +%s)
    # shellcheck disable=SC2086 # FIT_FLAGS: words, or nothing
    "$bin/mc-fit" ${FIT_FLAGS:-} --trace "$d/design.jsonl" "$d/design-run.jsonl" -o "$d/fitted.json" "${shape[@]}" \
        2> "$d/fit.log"
    "$bin/mc-fit" --trace "$d/heldout.jsonl" --predict "$d/fitted.json" "$d/heldout-run.jsonl" \
        "${shape[@]}" 2> "$d/predict.txt"
    "$bin/mc-fit" --trace "$d/heldout.jsonl" --predict "$hidden" "$d/heldout-run.jsonl" \
        "${shape[@]}" 2> "$d/truth.txt"
    t2=$(date +%s)
    echo "profile $i: runs $((t1 - t0)) s, fit $((t2 - t1)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done

python3 - "$n" "$work" <<'EOF'
import json, re, sys
n, work = int(sys.argv[1]), sys.argv[2]
MEDIAN_MEAN = ["TTFT mean", "TTFT p50", "ITL mean", "ITL p50", "E2E mean", "E2E p50"]
TAIL = ["TTFT p99", "ITL p99", "E2E p99"]
def table(path):
    out = {}
    for line in open(path):
        m = re.match(r"^(\S+ \S+) \((ms)\)\s+\S+\s+\S+\s+([+-]\d+\.\d)%$", line.rstrip())
        if m:
            out[m.group(1)] = float(m.group(3))
    return out
cols = MEDIAN_MEAN + TAIL
print("profile " + " ".join(f"{c:>9}" for c in cols) + "  target  unidentified  (noise: the hidden profile's own worst p50/mean, p99)")
met = 0
for i in range(1, n + 1):
    d = f"{work}/p{i}"
    fit, truth = table(f"{d}/predict.txt"), table(f"{d}/truth.txt")
    ok = all(abs(fit.get(c, 1e9)) <= 5 for c in MEDIAN_MEAN) and all(abs(fit.get(c, 1e9)) <= 10 for c in TAIL)
    met += ok
    log = open(f"{d}/fit.log").read()
    unid = sorted(set(re.findall(r"warning: (?:the runs cannot identify |)(\w+_ms)(?: not identified| \()", log)))
    noise = (max(abs(truth.get(c, 0)) for c in MEDIAN_MEAN), max(abs(truth.get(c, 0)) for c in TAIL))
    print(f"{i:>7} " + " ".join(f"{fit.get(c, float('nan')):>+8.1f}%" for c in cols)
          + f"  {'met' if ok else 'MISSED':>6}  {','.join(unid) or '-':<12}  ({noise[0]:.1f}%, {noise[1]:.1f}%)")
print(f"targets met (p50 and means within 5%, p99 within 10%): {met} of {n}")
# The fit alone: the fitted profile's prediction against the hidden
# profile's, both simulating the same held-out sends (no wall clock).
def predicted(path):
    out = {}
    for line in open(path):
        m = re.match(r"^(\S+ \S+) \((ms)\)\s+\S+\s+(\S+)\s+[+-]\d+\.\d%$", line.rstrip())
        if m:
            out[m.group(1)] = float(m.group(3))
    return out
print("fitted against hidden on the same sends (virtual time, no wall clock):")
print("profile " + " ".join(f"{c:>9}" for c in cols) + "  target")
met_v = 0
for i in range(1, n + 1):
    d = f"{work}/p{i}"
    f, t = predicted(f"{d}/predict.txt"), predicted(f"{d}/truth.txt")
    e = {c: (f[c] / t[c] - 1) * 100 for c in cols if c in f and c in t and t[c] > 0}
    ok = all(abs(e.get(c, 1e9)) <= 5 for c in MEDIAN_MEAN) and all(abs(e.get(c, 1e9)) <= 10 for c in TAIL)
    met_v += ok
    print(f"{i:>7} " + " ".join(f"{e.get(c, float('nan')):>+8.1f}%" for c in cols) + f"  {'met' if ok else 'MISSED':>6}")
print(f"fitted within the targets of the hidden profile's own prediction: {met_v} of {n}")
EOF
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
