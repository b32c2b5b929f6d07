#!/usr/bin/env bash
# Opt-in end-to-end check of a sharded replay under a real Slurm (single
# node): installs slurm-wlm when missing (needs root and Debian's
# packages), writes a one-node slurm.conf in a temporary folder, starts
# munged (unless one runs), slurmctld and slurmd, replays a generated
# session trace once as a single run and once as 4 shards (the script
# `mc-replay --emit-slurm` writes, submitted with `sbatch --wait`, its one
# task a node overridden by `--nodes 1 --ntasks-per-node 4 --overcommit`
# so the 4 tasks run on this machine's cores)
# against one mc-mock, merges the shards with mc-report and checks the
# merge against the single run. Stops every daemon it started by its PID.
#
#   scripts/slurm-e2e.sh            # builds the debug binaries first
#   BIN=target/release scripts/slurm-e2e.sh
#   KEEP=1 scripts/slurm-e2e.sh     # keep the temporary folder
set -euo pipefail

cd "$(dirname "$0")/.."
if [[ -z "${BIN:-}" ]]; then
    cargo build --bins -q
    BIN=target/debug
fi
BIN=$(cd "$BIN" && pwd)
SHARDS=${SHARDS:-4}

say() { echo "slurm-e2e: $*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null; then
    say "installing slurm-wlm"
    [[ $(id -u) == 0 ]] || fail "slurm-wlm is missing and this is not root: apt-get install slurm-wlm"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null
fi
for tool in jq munged; do command -v "$tool" >/dev/null || fail "$tool is missing"; done

D=$(mktemp -d /tmp/slurm-e2e.XXXXXX)
PIDS=()
MUNGED_STARTED=
cleanup() {
    local code=$? stopping=()
    for f in "$D/slurmd.pid" "$D/slurmctld.pid"; do
        [[ -s $f ]] && stopping+=("$(cat "$f")")
    done
    stopping+=("${PIDS[@]}")
    if [[ -n $MUNGED_STARTED && -s /run/munge/munged.pid ]]; then
        stopping+=("$(cat /run/munge/munged.pid)")
    fi
    for p in "${stopping[@]}"; do kill "$p" 2>/dev/null || true; done
    # Each by its PID, until it is gone (slurmctld saves its state first).
    for p in "${stopping[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    done
    say "stopped ${#stopping[@]} processes (PIDs ${stopping[*]})"
    if [[ -n ${KEEP:-} ]]; then say "kept $D"; else rm -rf "$D"; fi
    exit $code
}
trap cleanup EXIT

free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
    done
    fail "no free port"
}

HOST=$(hostname)
mkdir -p "$D/state" "$D/spool" "$D/results"
cat > "$D/slurm.conf" <<EOF
ClusterName=mce2e
SlurmctldHost=$HOST
AuthType=auth/munge
SlurmUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName=$HOST CPUs=$(nproc) RealMemory=2000 State=UNKNOWN
PartitionName=main Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$D/slurm.conf

if ! munge -n </dev/null >/dev/null 2>&1; then
    mkdir -p /run/munge
    chown munge:munge /run/munge 2>/dev/null || true
    # As its own user: munged refuses a log folder another user owns.
    runuser -u munge -- munged 2>/dev/null || munged --force
    MUNGED_STARTED=1
fi
slurmctld
slurmd
for _ in $(seq 30); do
    sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
    sleep 1
done
say "slurm up: $(sinfo -h -o '%P %D %t %c cpus' 2>&1)"

# One mc-mock; its request log tells what the server saw.
"$BIN/mc-mock" --port 0 --ttft-ms 20 --itl-ms 2 > "$D/mock.log" 2>"$D/mock.err" &
PIDS+=($!)
for _ in $(seq 50); do [[ -s $D/mock.log ]] && break; sleep 0.1; done
URL="http://$(head -1 "$D/mock.log" | jq -r .addr)"
say "mc-mock at $URL"

"$BIN/mc-gen" sessions --sessions 24 --session-rate 4 --turns 3 --new-tokens 200 --osl 16 \
    --block-size 64 --seed 7 > "$D/trace.jsonl" 2>/dev/null
ROWS=$(wc -l < "$D/trace.jsonl")
say "trace: $ROWS rows"
"$BIN/mc-replay" --plan "$SHARDS" -i "$D/trace.jsonl" 2>/dev/null | sed 's/^/  /' >&2

# The single run.
"$BIN/mc-replay" --url "$URL" -i "$D/trace.jsonl" -o "$D/single.jsonl" 2>"$D/single.err"
SINGLE_LOG_LINES=$(wc -l < "$D/mock.log")

# The sharded run, as a user would: emit, sbatch --wait, mc-report.
"$BIN/mc-replay" --url "$URL" -i "$D/trace.jsonl" --emit-slurm --shards "$SHARDS" \
    --results-dir "$D/results" --start-in 3 --job-name mc-e2e > "$D/run.sbatch" 2>/dev/null
# The script asks for one task a node (--nodes N --ntasks-per-node 1);
# this cluster is one node: options on sbatch's command line and in
# MC_SRUN_ARGS (after the script's own on srun) override that.
ONE_NODE="--nodes=1 --ntasks-per-node=$SHARDS --overcommit"
say "sbatch --wait ($ONE_NODE)"
MC_SRUN_ARGS=$ONE_NODE MC_REPLAY=$BIN/mc-replay \
    sbatch --wait $ONE_NODE --chdir "$D" "$D/run.sbatch" >&2 \
    || { cat "$D"/results/*.log >&2 || true; fail "the job failed"; }
grep -E '^mc-replay: (.* start at |shard |[0-9]+ requests)' "$D"/results/mc-e2e-*.log | sed 's/^/  job: /' >&2 || true
ls "$D/results" | sed 's/^/  results: /' >&2

"$BIN/mc-report" --json "$D"/results/shard-*.jsonl > "$D/merged.json" 2>"$D/merge.err" \
    || { cat "$D/merge.err" >&2; fail "mc-report refused the merge"; }
"$BIN/mc-report" --json "$D/single.jsonl" > "$D/single.json" 2>/dev/null
"$BIN/mc-report" "$D"/results/shard-*.jsonl 2>&1 | sed 's/^/  merged: /' >&2

# The checks: the merge is the single run in counts and token sums, and the
# server saw each row exactly once.
pick='[.requests.sent, .requests.ok, .requests.failed, .requests.not_sent, .tokens.input_intended, .tokens.output, .tokens.output_requested, .run.rows] | @csv'
M=$(jq -r "$pick" "$D/merged.json")
S=$(jq -r "$pick" "$D/single.json")
say "single run: sent,ok,failed,not_sent,input,output,output_requested,rows = $S"
say "merged:     sent,ok,failed,not_sent,input,output,output_requested,rows = $M"
[[ $M == "$S" ]] || fail "the merge differs from the single run"
[[ $(jq -r .requests.sent "$D/merged.json") == "$ROWS" ]] || fail "not every row was sent"
[[ $(jq -r .run.shard.count "$D/merged.json") == "$SHARDS" ]] || fail "no shard plan in the merge"
SEEN=$(tail -n +"$((SINGLE_LOG_LINES + 1))" "$D/mock.log" | jq -r 'select(.event == "request" and .x_trace_line != null) | .x_trace_line' | sort)
[[ $(wc -l <<< "$SEEN") == "$ROWS" ]] || fail "the server saw $(wc -l <<< "$SEEN") requests, not $ROWS"
[[ -z $(uniq -d <<< "$SEEN") ]] || fail "a row was sent twice"
HOSTS=$(cat "$D"/results/shard-*.summary.json | jq -r .run.shard.index | sort | tr '\n' ' ')
say "shard summaries: indices $HOSTS; started $(jq -r '.run.start_unix_ms' "$D"/results/shard-*.summary.json | sort -n | awk 'NR==1{a=$1} {b=$1} END{printf "within %.3f ms of each other", b-a}')"
say "OK: $SHARDS shards under Slurm = the single run ($ROWS rows, each sent once)"
