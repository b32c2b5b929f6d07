#!/usr/bin/env bash
# Throughput and peak memory of the trace filters on a generated 1 GB trace
# shaped like the Mooncake conversation trace, next to `cat` (the I/O limit)
# and `jq -c` doing the same transform, all measured in this one run.
#
#   scripts/bench-filters.sh [SIZE]     (SIZE default 1G; e.g. 200M for a quick look)
#
# jq is timed on a 64 MB slice (it runs at ~10 MB/s) and its MB/s compared.
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
[ -s "$trace" ] || $bin/examples/gen_trace --bytes "$size" --seed 1 > "$trace"
[ -s "$slice" ] || $bin/examples/gen_trace --bytes 64M --seed 1 > "$slice"
bytes=$(stat -c %s "$trace")
slice_bytes=$(stat -c %s "$slice")
cat "$trace" > /dev/null   # into the page cache

# run NAME BYTES INPUT CMD...: prints one table row; the command reads INPUT on stdin.
best_s=""; best_kb=""
measure() { # INPUT CMD... -> sets best_s (best of 3 wall seconds) and best_kb (peak RSS)
  local input=$1; shift
  best_s=999999; best_kb=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$dir/time" "$@" < "$input" > /dev/null
    read -r s kb < "$dir/time"
    best_s=$(awk -v a="$s" -v b="$best_s" 'BEGIN { print (a < b ? a : b) }')
    best_kb=$(( kb > best_kb ? kb : best_kb ))
  done
}
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.0f", b / 1048576 / s }'; }

measure "$trace" cat; cat_mbps=$(mbps "$bytes" "$best_s")
measure "$trace" sh -c 'cat | cat'; pipe_mbps=$(mbps "$bytes" "$best_s")

printf '\nprofile: %s; input: %s (%d MB, %d lines); cat: %s MB/s; cat | cat: %s MB/s\n\n' \
  "$profile" "$trace" $((bytes / 1048576)) "$(wc -l < "$trace")" "$cat_mbps" "$pipe_mbps"
printf '| command | MB/s | x cat | jq -c MB/s | x jq | peak RSS MB |\n|---|---:|---:|---:|---:|---:|\n'

row() { # LABEL JQ-PROGRAM|- CMD...
  local label=$1 jqprog=$2; shift 2
  measure "$trace" "$@"
  local m kb; m=$(mbps "$bytes" "$best_s"); kb=$best_kb
  local jq_m="n/a" ratio="n/a"
  if [ "$jqprog" != "-" ]; then
    /usr/bin/time -f "%e" -o "$dir/time" jq -c "$jqprog" < "$slice" > /dev/null
    jq_m=$(mbps "$slice_bytes" "$(cat "$dir/time")")
    ratio=$(awk -v a="$m" -v b="$jq_m" 'BEGIN { printf "%.0f", a / b }')
  fi
  printf '| `%s` | %s | %s | %s | %s | %d |\n' "$label" "$m" \
    "$(awk -v a="$m" -v b="$cat_mbps" 'BEGIN { printf "%.2f", a / b }')" "$jq_m" "$ratio" $((kb / 1024))
}

row "mc-cap --max-isl 8192 --max-osl 512" \
  'if .input_length > 8192 then .input_length = 8192 | .hash_ids |= .[:16] else . end | if .output_length > 512 then .output_length = 512 else . end' \
  $bin/mc-cap --max-isl 8192 --max-osl 512
row "mc-cap --max-osl 512" 'if .output_length > 512 then .output_length = 512 else . end' \
  $bin/mc-cap --max-osl 512
row "mc-scale --speedup 2" '.timestamp |= (. / 2 | floor)' $bin/mc-scale --speedup 2
row "mc-roots --roots 4" '.hash_ids |= map(. * 4 + 1)' $bin/mc-roots --roots 4
row "mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5" - \
  $bin/mc-scale --prefix-len-multiplier 2 --prompt-len-multiplier 0.5
echo
echo "(best of 3 runs; jq on a $((slice_bytes / 1048576)) MB slice of the same shape; mc-scale with"
echo " multipliers has no jq equivalent: it needs the id counts of the whole trace)"
