#!/usr/bin/env bash
# Rows per second and peak memory of `mc-gen constant` and `mc-gen prefix`
# writing ROWS rows (default 10 million), next to `cat` moving the same
# bytes (a saved copy of each output, read from the page cache), all
# measured in this one run. Target: 2 M rows/s in constant memory.
#
#   scripts/bench-gen.sh [ROWS]            (PROFILE=release for a quick look; default dist)
set -euo pipefail
cd "$(dirname "$0")/.."
rows="${1:-10000000}"
profile="${PROFILE:-dist}"
dir=$(mktemp -d "${TMPDIR:-/tmp}/mctrace-bench-gen.XXXXXX")
trap 'rm -rf "$dir"' EXIT
cargo build --profile "$profile" --quiet --bin mc-gen
bin="target/$profile/mc-gen"
[ "$profile" = dev ] && bin=target/debug/mc-gen

best_s=""; best_kb=""
measure() { # CMD... (stdout to /dev/null) -> best_s (best of 3 wall seconds), best_kb (peak RSS)
  best_s=999999; best_kb=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$dir/time" "$@" > /dev/null 2>"$dir/err" || { cat "$dir/err"; exit 1; }
    read -r s kb < <(tail -1 "$dir/time")
    best_s=$(awk -v a="$s" -v b="$best_s" 'BEGIN { print (a < b ? a : b) }')
    best_kb=$(( kb > best_kb ? kb : best_kb ))
  done
}
per_s() { awk -v n="$1" -v s="$2" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.2f", n / s / 1e6 }'; }

printf '\n%s rows, profile %s\n\n' "$rows" "$profile"
printf '| command | M rows/s | MB/s | cat of the same bytes MB/s | x cat | peak RSS MB |\n|---|---:|---:|---:|---:|---:|\n'
row() { # LABEL ARGS...
  local label=$1; shift
  "$bin" "$@" --num-requests "$rows" > "$dir/out.jsonl" 2>/dev/null
  local bytes; bytes=$(stat -c %s "$dir/out.jsonl")
  measure cat "$dir/out.jsonl"; local cat_s=$best_s
  measure "$bin" "$@" --num-requests "$rows"
  local mb cat_mb
  mb=$(awk -v b="$bytes" -v s="$best_s" 'BEGIN { printf "%.0f", b / 1048576 / s }')
  cat_mb=$(awk -v b="$bytes" -v s="$cat_s" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.0f", b / 1048576 / s }')
  printf '| `mc-gen %s` | %s | %s | %s | %s | %d |\n' "$label" "$(per_s "$rows" "$best_s")" "$mb" "$cat_mb" \
    "$(awk -v a="$mb" -v b="$cat_mb" 'BEGIN { printf "%.2f", a / b }')" $((best_kb / 1024))
  rm -f "$dir/out.jsonl"
}
row "constant --qps 100" constant --qps 100
row "constant --qps 100 --isl lognormal:1024:0.8 --osl lognormal:128:0.5" \
  constant --qps 100 --isl lognormal:1024:0.8 --osl lognormal:128:0.5
row "prefix --qps 100 --zipf 1.1" prefix --qps 100 --zipf 1.1
echo
echo "(best of 3 runs to /dev/null; cat reads a saved copy of the same output from the page cache)"
