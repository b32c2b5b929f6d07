#!/usr/bin/env bash
# mc-analyze on a day-sized generated trace: peak RSS against the input's
# size, and the statistics on a slice checked against an earlier build.
#
#   scripts/big-trace.sh [SIZE]        # SIZE default 20G (gen_trace's --bytes)
#
#   PROFILE=release       the build to run (default release)
#   MAX_RSS_RATIO=0.25    fail when peak RSS / input size is above this
#   REF_BIN=PATH          an earlier mc-analyze build: the JSON reports of
#                         both on the first SLICE of the trace must be
#                         byte-identical, or identical in every key the
#                         earlier build writes (keys it does not write yet
#                         are named, not compared); skipped with a notice
#                         when unset
#   REF_JSON=FILE         or the --json report an earlier build wrote for
#                         `gen_trace --bytes SLICE --seed 1`
#   SLICE=1G              the slice both builds must be able to hold (the
#                         same seed's first rows: gen_trace --bytes SLICE)
#   NO_BUILD=1            use the binaries already built
#   KEEP=1                keep the generated files (default: deleted)
#   DIR=...               where the files go (default $TMPDIR/mctrace-big)
#
# Check `df -h` first: the trace needs SIZE of disk, the slice SLICE more.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-20G}"
profile="${PROFILE:-release}"
ratio_max="${MAX_RSS_RATIO:-0.25}"
slice="${SLICE:-1G}"
dir="${DIR:-${TMPDIR:-/tmp}/mctrace-big}"
mkdir -p "$dir"
[ -n "${NO_BUILD:-}" ] || cargo build --profile "$profile" --quiet --bin mc-analyze --example gen_trace
bin=target/$profile
big="$dir/trace-$size.jsonl"
cleanup() { [ -n "${KEEP:-}" ] || rm -f "$big" "$dir/slice.jsonl" "$dir"/*.json; }
trap cleanup EXIT

echo "generating $size ..." >&2
t0=$(date +%s)
$bin/examples/gen_trace --bytes "$size" --seed 1 > "$big"
bytes=$(stat -c %s "$big")
echo "generated $((bytes / 1048576)) MB in $(( $(date +%s) - t0 )) s" >&2

/usr/bin/time -f "%e %U %S %M" -o "$dir/time" $bin/mc-analyze --json < "$big" > "$dir/big.json"
read -r secs user sys kb < "$dir/time"
cat "$big" > /dev/null
t0=$(date +%s%N)
cat "$big" > /dev/null
cat_s=$(awk -v ns=$(( $(date +%s%N) - t0 )) 'BEGIN { printf "%.2f", ns / 1e9 }')
rows=$(grep -o '"rows":[0-9]*' "$dir/big.json" | head -1 | cut -d: -f2)
awk -v b="$bytes" -v s="$secs" -v u="$user" -v y="$sys" -v k="$kb" -v c="$cat_s" -v r="$rows" -v m="$ratio_max" 'BEGIN {
  mb = b / 1048576
  printf "input %.0f MB, %d rows: %.1f s wall (%.0f MB/s; cat %.2f s), %.1f s CPU (%.0f MB/s), peak RSS %.0f MB = %.3f x the input (limit %s)\n",
    mb, r, s, mb / s, c, u + y, mb / (u + y), k / 1024, k * 1024 / b, m
  if (k * 1024 / b > m) { print "peak RSS above the limit" > "/dev/stderr"; exit 1 }
}' || status=$?

if [ -n "${REF_BIN:-}${REF_JSON:-}" ]; then
  # The same seed writes the same rows whatever --bytes says: the slice is
  # the big trace's first rows.
  $bin/examples/gen_trace --bytes "$slice" --seed 1 > "$dir/slice.jsonl"
  cmp -s "$dir/slice.jsonl" <(head -c "$(stat -c %s "$dir/slice.jsonl")" "$big") \
    || { echo "the slice is not the big trace's start" >&2; exit 1; }
  $bin/mc-analyze --json < "$dir/slice.jsonl" > "$dir/new.json"
  if [ -n "${REF_BIN:-}" ]; then
    "$REF_BIN" --json < "$dir/slice.jsonl" > "$dir/ref.json"
  else
    cp "$REF_JSON" "$dir/ref.json"
  fi
  # Keys an older reference does not write yet (a newer lint, say) cannot be
  # compared: they are dropped from the new report, and named, before the
  # second comparison.
  extra=$(jq -c --slurpfile r "$dir/ref.json" '[paths] - ($r[0] | [paths]) | map(select(length > 0))' "$dir/new.json")
  jq -S --slurpfile r "$dir/ref.json" \
    'reduce ([paths] - ($r[0] | [paths]) | sort | reverse)[] as $p (.; delpaths([$p]))' \
    "$dir/new.json" > "$dir/new-common.json"
  jq -S . "$dir/ref.json" > "$dir/ref-sorted.json"
  if cmp -s "$dir/new.json" "$dir/ref.json"; then
    echo "slice of $slice ($(stat -c %s "$dir/slice.jsonl") bytes): the report is byte-identical to the reference's"
  elif [ "$extra" != "[]" ] && cmp -s "$dir/new-common.json" "$dir/ref-sorted.json"; then
    echo "slice of $slice ($(stat -c %s "$dir/slice.jsonl") bytes): every statistic the reference reports is identical; keys it does not write, not compared: $extra"
  else
    echo "slice of $slice: the reports differ from the reference's" >&2
    diff <(tr ',' '\n' < "$dir/ref.json") <(tr ',' '\n' < "$dir/new.json") | head -20 >&2
    exit 1
  fi
else
  echo "(REF_BIN and REF_JSON unset: no comparison with an earlier build)" >&2
fi
exit "${status:-0}"
