#!/usr/bin/env bash
# Instructions per byte of the streaming filters (issue 37): a measure that
# does not move with the machine or its load, unlike MB/s. Each filter runs
# under valgrind's cachegrind on one thread (`--line-buffered` keeps the
# loop in order on the main thread) over a 16 MB slice of the generated
# trace (`examples/gen_trace.rs --bytes 16M --seed 1`, the generator
# scripts/bench-filters.sh uses), and the count of executed instructions
# is divided by the slice's bytes.
#
#   scripts/bench-instr.sh                 the table, for target/$PROFILE
#   BASE_BIN=/path/to/old/target/release scripts/bench-instr.sh
#                                          ... next to the same commands in BASE_BIN
#   ANNOTATE=1 scripts/bench-instr.sh      ... and cachegrind's per-function
#                                          counts (cg_annotate) under each row
#
# PROFILE defaults to release (the figures in docs/benchmarks.md use it).
# `cat` is about 0.1 instructions per byte on the same slice.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
command -v valgrind > /dev/null || { echo "bench-instr.sh needs valgrind" >&2; exit 2; }
cargo build --profile "$profile" --quiet --bins --examples
bin=target/$profile
dir="${TMPDIR:-/tmp}/mctrace-bench"
mkdir -p "$dir"
slice="$dir/slice-16M.jsonl"
[ -s "$slice" ] || $bin/examples/gen_trace --bytes 16M --seed 1 > "$slice"
bytes=$(stat -c %s "$slice")

# count OUT CMD...: instructions executed on the slice (cachegrind's I refs).
count() {
  local out=$1; shift
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" "$@" \
    < "${input:-$slice}" 2>&1 >/dev/null | awk '/I *refs:/ { gsub(",", "", $NF); print $NF }'
}
per_byte() { awk -v n="$1" -v b="$bytes" 'BEGIN { printf "%.2f", n / b }'; }

printf '\nprofile: %s; %s (%d bytes, %d lines)\n\n' "$profile" "$slice" "$bytes" "$(wc -l < "$slice")"
if [ -n "${BASE_BIN:-}" ]; then
  printf 'baseline: %s\n\n| command | instructions/byte | before | now/before |\n|---|---:|---:|---:|\n' "$BASE_BIN"
else
  printf '| command | instructions/byte |\n|---|---:|\n'
fi
notes=()
row() { # LABEL TOOL [SUBCOMMAND] ARGS...
  local label=$1 tool=$2; shift 2
  # mc-merge takes its options after its subcommand.
  local sub=()
  case "${1:-}" in interleave | concat) sub=("$1"); shift ;; esac
  set -- "${sub[@]}" --line-buffered "$@"
  local out; out="$dir/cachegrind.$((${#notes[@]} + 1)).$tool.out"
  local now; now=$(count "$out" "$bin/$tool" "$@")
  notes+=("$out")
  if [ -z "${BASE_BIN:-}" ]; then
    printf '| `%s` | %s |\n' "$label" "$(per_byte "$now")"
    return
  fi
  local before; before=$(count /dev/null "$BASE_BIN/$tool" "$@")
  printf '| `%s` | %s | %s | %s |\n' "$label" "$(per_byte "$now")" "$(per_byte "$before")" \
    "$(awk -v a="$now" -v b="$before" 'BEGIN { printf "%.3f", a / b }')"
}

cat_now=$(per_byte "$(count /dev/null cat)")
if [ -n "${BASE_BIN:-}" ]; then
  printf '| `cat` | %s | %s | |\n' "$cat_now" "$cat_now"
else
  printf '| `cat` | %s |\n' "$cat_now"
fi
row "mc-cap --max-osl 512" mc-cap --max-osl 512
row "mc-scale --speedup 2" mc-scale --speedup 2
row "mc-roots --roots 4" mc-roots --roots 4
row "mc-cap --max-isl 8192 --max-osl 512" mc-cap --max-isl 8192 --max-osl 512
# mc-analyze on one thread (`--line-buffered`): every instruction of its
# reading and of its in-order id table, in the order it runs them.
row "mc-analyze --json" mc-analyze --json
row "mc-scale --sample-rows 0.1" mc-scale --sample-rows 0.1
# The prefix and prompt multipliers read the slice twice (ids counted,
# then rows rewritten): a file given as stdin is read again, not copied.
row "mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5" mc-scale \
  --prefix-len-multiplier 2 --prompt-len-multiplier 0.5
# Whole sessions need session ids, the delta form turns that extend their
# context: slices of their own, of about the same size, over their bytes.
input="$dir/slice-16M-sessions.jsonl"
[ -s "$input" ] || $bin/examples/gen_trace --bytes 16M --seed 1 --sessions > "$input"
bytes=$(stat -c %s "$input")
row "mc-scale --sample-sessions 0.1 (gen_trace --sessions)" mc-scale --sample-sessions 0.1
input="$dir/slice-gen-sessions.jsonl"
[ -s "$input" ] || $bin/mc-gen --seed 1 --block-size 512 sessions --sessions 9000 \
  --turns uniform:2:12 --new-tokens lognormal:1500:0.6 --osl uniform:1:700 > "$input" 2> /dev/null
bytes=$(stat -c %s "$input")
row "mc-scale --to-delta (mc-gen sessions, $((bytes / 1048576)) MB)" mc-scale --to-delta
[ -s "$input.delta" ] || $bin/mc-scale --to-delta < "$input" > "$input.delta" 2> /dev/null
input="$input.delta"; bytes=$(stat -c %s "$input")
row "mc-scale --from-delta (its delta rows)" mc-scale --from-delta
# mc-merge interleave of the slice with itself: per byte of its input (both
# files), each row's ids moved into its file's namespace.
input=/dev/null; bytes=$((2 * $(stat -c %s "$slice")))
row "mc-merge interleave SLICE SLICE (per input byte)" mc-merge interleave "$slice" "$slice"
echo
echo "(instructions executed, counted by valgrind's cachegrind with --cache-sim=no, over the slice's bytes)"
if [ -n "${ANNOTATE:-}" ]; then
  for out in "${notes[@]}"; do
    echo
    echo "== $out"
    cg_annotate "$out" 2>/dev/null | awk '/file:function/ { p = 1 } p && n++ < 24' 
  done
fi
