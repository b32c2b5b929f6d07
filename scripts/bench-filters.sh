#!/usr/bin/env bash
# Throughput and peak memory of the trace filters on a generated 1 GB trace
# shaped like the Mooncake conversation trace, next to `cat | cat` (the
# pipe's limit: the issue's target is 1.0x of it), `cat` and `jq -c` doing
# the same transform, all measured in this one run.
#
#   scripts/bench-filters.sh [SIZE]     (SIZE default 1G; e.g. 200M for a quick look)
#
# jq is timed on a 64 MB slice (it runs at ~10 MB/s) and its MB/s compared.
#
# Besides wall-clock MB/s, each row gives CPU MB/s (input bytes over user +
# system seconds): on a shared, loaded machine wall time mostly measures the
# neighbours, CPU time much less so.
#
#   BASE_BIN=/path/to/old/target/release scripts/bench-filters.sh
#
# also runs the same commands with the binaries in BASE_BIN, alternating
# old and new run by run so both see the same load, and prints the ratio
# (the house issue's before/after check).
#
#   MEASURE=instructions BASE_BIN=... scripts/bench-filters.sh
#
# counts the instructions each command executes on the 64 MB slice, under
# valgrind's cachegrind, instead of timing it. The count does not depend on
# the neighbours, so on a shared machine it is the before/after check that
# gives the same answer twice (times there swing by 15-30% run to run). It
# does not see cache misses or branch mispredictions: a change that moves
# those needs the timed comparison on a quiet machine.
#
# The per-tool table of issue 37 (instructions per byte on one thread,
# `--line-buffered`, a 16 MB slice, with cachegrind's per-function
# counts on request) is scripts/bench-instr.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-1G}"
dir="${TMPDIR:-/tmp}/mctrace-bench"
mkdir -p "$dir"
# PROFILE=release for the everyday build; the figures in the docs use `dist` (fat LTO).
profile="${PROFILE:-dist}"
cargo build --profile "$profile" --quiet --bins --examples
echo "profile: $profile (target/$profile)" >&2
bin=target/$profile
trace="$dir/trace-$size.jsonl"
slice="$dir/slice-64M.jsonl"
[ -s "$slice" ] || $bin/examples/gen_trace --bytes 64M --seed 1 > "$slice"
slice_bytes=$(stat -c %s "$slice")
if [ "${MEASURE:-time}" != instructions ]; then
  [ -s "$trace" ] || $bin/examples/gen_trace --bytes "$size" --seed 1 > "$trace"
  bytes=$(stat -c %s "$trace")
  cat "$trace" > /dev/null   # into the page cache
fi

best_s=""; best_cpu=""; best_kb=""
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }
once() { # INPUT CMD... -> s, cpu, kb of one run
  local input=$1; shift
  /usr/bin/time -f "%e %U %S %M" -o "$dir/time" "$@" < "$input" > /dev/null
  read -r s u sy kb < "$dir/time"
  cpu=$(awk -v u="$u" -v s="$sy" 'BEGIN { print u + s }')
}
measure() { # INPUT CMD... -> best_s, best_cpu (best of 3) and best_kb (peak RSS)
  local input=$1; shift
  best_s=999999; best_cpu=999999; best_kb=0
  for _ in 1 2 3; do
    once "$input" "$@"
    best_s=$(min "$s" "$best_s"); best_cpu=$(min "$cpu" "$best_cpu")
    best_kb=$(( kb > best_kb ? kb : best_kb ))
  done
}
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.0f", b / 1048576 / s }'; }

# instructions CMD...: instructions executed on the slice (cachegrind's I refs).
instructions() {
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" \
    < "$slice" 2>&1 >/dev/null | awk '/I *refs:/ { gsub(",", "", $NF); print $NF }'
}
if [ "${MEASURE:-time}" = instructions ]; then
  command -v valgrind > /dev/null || { echo "MEASURE=instructions needs valgrind" >&2; exit 2; }
  printf '\nprofile: %s; instructions on %s (%d MB)\n\n' "$profile" "$slice" $((slice_bytes / 1048576))
  if [ -n "${BASE_BIN:-}" ]; then
    printf 'baseline: %s\n\n| command | instructions/byte | before | now/before |\n|---|---:|---:|---:|\n' "$BASE_BIN"
  else
    printf '| command | instructions/byte |\n|---|---:|\n'
  fi
else
  measure "$trace" cat; cat_mbps=$(mbps "$bytes" "$best_s")
  measure "$trace" sh -c 'cat | cat'; pipe_mbps=$(mbps "$bytes" "$best_s")
  printf '\nprofile: %s; input: %s (%d MB, %d lines); cat: %s MB/s; cat | cat: %s MB/s\n\n' \
    "$profile" "$trace" $((bytes / 1048576)) "$(wc -l < "$trace")" "$cat_mbps" "$pipe_mbps"
  if [ -n "${BASE_BIN:-}" ]; then
    printf 'baseline: %s\n\n' "$BASE_BIN"
    printf '| command | MB/s | CPU MB/s | before MB/s | before CPU MB/s | CPU now/before | peak RSS MB |\n|---|---:|---:|---:|---:|---:|---:|\n'
  else
    printf '| command | MB/s | CPU MB/s | x cat\\|cat | jq -c MB/s | x jq | peak RSS MB |\n|---|---:|---:|---:|---:|---:|---:|\n'
  fi
fi

# before/after: old and new alternate, best of 3 each.
compare() { # LABEL CMD... (the command's first word is a path under $bin)
  local label=$1; shift
  local tool=${1#"$bin"/}; shift
  local ns=999999 nc=999999 os=999999 oc=999999 peak=0
  for _ in 1 2 3; do
    once "$trace" "$bin/$tool" "$@"; ns=$(min "$s" "$ns"); nc=$(min "$cpu" "$nc")
    peak=$(( kb > peak ? kb : peak ))
    once "$trace" "$BASE_BIN/$tool" "$@"; os=$(min "$s" "$os"); oc=$(min "$cpu" "$oc")
  done
  printf '| `%s` | %s | %s | %s | %s | %s | %d |\n' "$label" \
    "$(mbps "$bytes" "$ns")" "$(mbps "$bytes" "$nc")" "$(mbps "$bytes" "$os")" "$(mbps "$bytes" "$oc")" \
    "$(awk -v a="$oc" -v b="$nc" 'BEGIN { printf "%.2f", a / b }')" $((peak / 1024))
}

# instruction counts, now and (with BASE_BIN) before.
count() { # LABEL CMD... (the command's first word is a path under $bin)
  local label=$1; shift
  local tool=${1#"$bin"/}; shift
  local now; now=$(instructions "$bin/$tool" "$@")
  if [ -z "${BASE_BIN:-}" ]; then
    printf '| `%s` | %s |\n' "$label" "$(awk -v n="$now" -v b="$slice_bytes" 'BEGIN { printf "%.2f", n / b }')"
    return
  fi
  local before; before=$(instructions "$BASE_BIN/$tool" "$@")
  printf '| `%s` | %s | %s | %s |\n' "$label" \
    "$(awk -v n="$now" -v b="$slice_bytes" 'BEGIN { printf "%.2f", n / b }')" \
    "$(awk -v n="$before" -v b="$slice_bytes" 'BEGIN { printf "%.2f", n / b }')" \
    "$(awk -v a="$now" -v b="$before" 'BEGIN { printf "%.3f", a / b }')"
}

# run LABEL JQ-PROGRAM|- CMD...: prints one table row; the command reads the trace on stdin.
row() { # LABEL JQ-PROGRAM|- CMD...
  local label=$1 jqprog=$2; shift 2
  if [ "${MEASURE:-time}" = instructions ]; then count "$label" "$@"; return; fi
  if [ -n "${BASE_BIN:-}" ]; then compare "$label" "$@"; return; fi
  measure "$trace" "$@"
  local m c kb; m=$(mbps "$bytes" "$best_s"); c=$(mbps "$bytes" "$best_cpu"); kb=$best_kb
  local jq_m="n/a" ratio="n/a"
  if [ "$jqprog" != "-" ]; then
    /usr/bin/time -f "%e" -o "$dir/time" jq -c "$jqprog" < "$slice" > /dev/null
    jq_m=$(mbps "$slice_bytes" "$(cat "$dir/time")")
    ratio=$(awk -v a="$m" -v b="$jq_m" 'BEGIN { printf "%.0f", a / b }')
  fi
  printf '| `%s` | %s | %s | %s | %s | %s | %d |\n' "$label" "$m" "$c" \
    "$(awk -v a="$m" -v b="$pipe_mbps" 'BEGIN { printf "%.2f", a / b }')" "$jq_m" "$ratio" $((kb / 1024))
}

row "mc-cap --max-isl 8192 --max-osl 512" \
  'if .input_length > 8192 then .input_length = 8192 | .hash_ids |= .[:16] else . end | if .output_length > 512 then .output_length = 512 else . end' \
  $bin/mc-cap --max-isl 8192 --max-osl 512
row "mc-cap --max-osl 512" 'if .output_length > 512 then .output_length = 512 else . end' \
  $bin/mc-cap --max-osl 512
row "mc-scale --speedup 2" '.timestamp |= (. / 2 | floor)' $bin/mc-scale --speedup 2
row "mc-scale --output-len-multiplier 0.5" '.output_length |= ([(. * 0.5 | round), 1] | max)' \
  $bin/mc-scale --output-len-multiplier 0.5
row "mc-roots --roots 4" '.hash_ids |= map(. * 4 + 1)' $bin/mc-roots --roots 4
row "mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5" - \
  $bin/mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5
# The same from a pipe: the first pass copies it to a temporary file in
# $TMPDIR (timed runs only: the comparisons need a binary under $bin first).
if [ "${MEASURE:-time}" != instructions ] && [ -z "${BASE_BIN:-}" ]; then
  row "cat | mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5" - \
    sh -c "cat | $bin/mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5"
fi
# Sampling: rows without a session_id (this trace's), each drawn in order
# by its index; then whole sessions, on the same shape with a session_id on
# every row (gen_trace --sessions), drawn by any thread; and the delta form
# on mc-gen's sessions (turns that extend their context, as --to-delta
# needs; about SIZE too).
row "mc-scale --sample-rows 0.1" - $bin/mc-scale --sample-rows 0.1
# mc-merge interleave of two halves of the trace (so SIZE bytes in all, as
# the other rows): ids into each file's namespace, the k-way merge by time.
# Instructions per input byte on the slice with itself.
if [ "${MEASURE:-time}" = instructions ]; then
  now=$(valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    "$bin/mc-merge" interleave "$slice" "$slice" < /dev/null 2>&1 >/dev/null | awk '/I *refs:/ { gsub(",", "", $NF); print $NF }')
  printf '| `mc-merge interleave SLICE SLICE` (per input byte) | %s |\n' \
    "$(awk -v n="$now" -v b="$slice_bytes" 'BEGIN { printf "%.2f", n / b / 2 }')"
elif [ -z "${BASE_BIN:-}" ]; then
  half=$(( $(wc -l < "$trace") / 2 ))
  [ -s "$trace.a" ] || head -n "$half" "$trace" > "$trace.a"
  [ -s "$trace.b" ] || tail -n +"$((half + 1))" "$trace" > "$trace.b"
  measure /dev/null "$bin/mc-merge" interleave "$trace.a" "$trace.b"
  m=$(mbps "$bytes" "$best_s"); c=$(mbps "$bytes" "$best_cpu")
  printf '| `mc-merge interleave A B` (the trace in two halves) | %s | %s | %s | n/a | n/a | %d |\n' "$m" "$c" \
    "$(awk -v a="$m" -v b="$pipe_mbps" 'BEGIN { printf "%.2f", a / b }')" $((best_kb / 1024))
fi
if [ "${MEASURE:-time}" != instructions ] && [ -z "${BASE_BIN:-}" ]; then
  full_trace=$trace full_bytes=$bytes
  trace="$dir/sessions-$size.jsonl"
  [ -s "$trace" ] || $bin/examples/gen_trace --bytes "$size" --seed 1 --sessions > "$trace"
  bytes=$(stat -c %s "$trace"); cat "$trace" > /dev/null
  row "mc-scale --sample-sessions 0.1 (gen_trace --sessions)" - $bin/mc-scale --sample-sessions 0.1
  trace="$dir/gen-sessions-$size.jsonl"
  [ -s "$trace" ] || $bin/mc-gen --seed 1 --block-size 512 sessions --sessions "$(numfmt --from=iec "$size" | awk '{ printf "%d", $1 / 1800 }')" \
    --turns uniform:2:12 --new-tokens lognormal:1500:0.6 --osl uniform:1:700 > "$trace" 2> /dev/null
  bytes=$(stat -c %s "$trace"); cat "$trace" > /dev/null
  row "mc-scale --to-delta (mc-gen sessions, $((bytes / 1048576)) MB)" - $bin/mc-scale --to-delta
  [ -s "$trace.delta" ] || $bin/mc-scale --to-delta < "$trace" > "$trace.delta" 2> /dev/null
  trace="$trace.delta"; bytes=$(stat -c %s "$trace"); cat "$trace" > /dev/null
  row "mc-scale --from-delta (its delta rows, $((bytes / 1048576)) MB)" - $bin/mc-scale --from-delta
  trace=$full_trace bytes=$full_bytes
fi
echo
if [ "${MEASURE:-time}" = instructions ]; then
  echo "(instructions executed, counted by valgrind's cachegrind, over the slice's bytes)"
  exit 0
fi
echo "(best of 3 runs; jq on a $((slice_bytes / 1048576)) MB slice of the same shape; mc-scale with"
echo " multipliers has no jq equivalent: it needs the id counts of the whole trace)"
