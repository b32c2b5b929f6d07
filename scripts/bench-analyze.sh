#!/usr/bin/env bash
# mc-analyze against AIPerf 0.13.0 `analyze-trace` on the real conversation
# trace, and alone on a generated 1 GB trace: MB/s, the same run's `cat`
# (x cat: our time over cat's), CPU MB/s (input over user + system time:
# the figure the neighbours on a shared machine move least), and peak RSS
# over the input's size.
#
#   scripts/bench-analyze.sh [DATA_DIR] [SIZE]
#
# BIG_ONLY=1 skips the conversation trace and AIPerf.
# DATA_DIR defaults to $MCTRACE_DATA or ../shared/data. AIPerf is looked for
# as `aiperf` on PATH or $AIPERF (e.g. AIPERF=/work/aiperf-venv/bin/aiperf);
# without it its rows are skipped with a notice.
set -euo pipefail
cd "$(dirname "$0")/.."
data="${1:-${MCTRACE_DATA:-../shared/data}}"
size="${2:-1G}"
dir="${TMPDIR:-/tmp}/mctrace-bench"
mkdir -p "$dir"
# PROFILE=release for the everyday build; the figures in the docs use `dist` (fat LTO).
profile="${PROFILE:-dist}"
cargo build --profile "$profile" --quiet --bins --examples
echo "profile: $profile (target/$profile)" >&2
bin=target/$profile
aiperf="${AIPERF:-$(command -v aiperf || true)}"
conv="$data/mooncake/conversation_trace.jsonl"
big="$dir/trace-$size.jsonl"
[ -s "$big" ] || $bin/examples/gen_trace --bytes "$size" --seed 1 > "$big"

time_of() { # CMD... -> "seconds peak_kb cpu_seconds"
  /usr/bin/time -f "%e %M %U %S" -o "$dir/time" "$@" > /dev/null 2>&1
  awk '{ printf "%s %s %.2f\n", $1, $2, $3 + $4 }' "$dir/time"
}
best() { # N CMD... -> best (by wall time) "seconds peak_kb cpu_seconds" of N runs
  local n=$1; shift; local b=""
  for _ in $(seq "$n"); do
    r=$(time_of "$@")
    if [ -z "$b" ] || awk -v a="${r%% *}" -v c="${b%% *}" 'BEGIN { exit !(a < c) }'; then b=$r; fi
  done
  echo "$b"
}

bb=$(stat -c %s "$big")
if [ -n "${BIG_ONLY:-}" ]; then
  cat "$big" > /dev/null
  read -r cs _ _ <<< "$(best 3 sh -c "cat '$big'")"
  read -r bs bk bc <<< "$(best 3 sh -c "$bin/mc-analyze < '$big'")"
  echo "| input | tool | seconds | MB/s | x cat | CPU MB/s | peak RSS MB | RSS / input |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  awk -v b="$bb" -v s="$bs" -v c="$cs" -v u="$bc" -v k="$bk" 'BEGIN {
    mb = b / 1048576; if (c < 0.01) c = 0.01
    printf "| generated %d MB | mc-analyze | %s | %.0f | %.0f | %.0f | %d | %.2f |\n", mb, s, mb / s, s / c, mb / u, k / 1024, k * 1024 / b
  }'
  echo
  echo "(best of 3 by wall time; cat best of 3 in the same run: $cs s; peak RSS from /usr/bin/time)"
  exit 0
fi

echo "| input | tool | seconds | MB/s | peak RSS MB | x AIPerf |"
echo "|---|---|---:|---:|---:|---:|"
cb=$(stat -c %s "$conv")
read -r _ mk _ <<< "$(best 1 sh -c "$bin/mc-analyze < '$conv'")"
# One run is near the 10 ms resolution of time(1): average 20 runs instead.
t0=$(date +%s%N)
for _ in $(seq 20); do "$bin/mc-analyze" < "$conv" > /dev/null; done
ms=$(awk -v ns=$(( $(date +%s%N) - t0 )) 'BEGIN { printf "%.4f", ns / 20 / 1e9 }')
if [ -n "$aiperf" ]; then
  read -r as ak _ <<< "$(best 2 "$aiperf" analyze-trace "$conv")"
  echo "| conversation_trace.jsonl ($((cb / 1024)) KB) | AIPerf 0.13.0 analyze-trace | $as | $(awk -v b="$cb" -v s="$as" 'BEGIN { printf "%.1f", b / 1048576 / s }') | $((ak / 1024)) | 1 |"
  ratio=$(awk -v a="$as" -v m="$ms" 'BEGIN { if (m < 0.005) m = 0.005; printf "%.0f", a / m }')
else
  echo "(AIPerf not found: set AIPERF=/path/to/aiperf to compare)" >&2
  ratio="n/a"
fi
echo "| conversation_trace.jsonl ($((cb / 1024)) KB) | mc-analyze | $ms | $(awk -v b="$cb" -v s="$ms" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.0f", b / 1048576 / s }') | $((mk / 1024)) | $ratio |"
cat "$big" > /dev/null
read -r cs _ _ <<< "$(best 3 sh -c "cat '$big'")"
read -r bs bk bc <<< "$(best 3 sh -c "$bin/mc-analyze < '$big'")"
echo "| generated $((bb / 1048576)) MB | mc-analyze | $bs | $(awk -v b="$bb" -v s="$bs" 'BEGIN { printf "%.0f", b / 1048576 / s }') | $((bk / 1024)) | |"
echo
awk -v b="$bb" -v s="$bs" -v c="$cs" -v u="$bc" -v k="$bk" 'BEGIN {
  mb = b / 1048576; if (c < 0.01) c = 0.01
  printf "generated %d MB: %.0f MB/s, %.0f x cat (cat %s s), CPU %.0f MB/s, peak RSS / input %.2f\n", mb, mb / s, s / c, c, mb / u, k * 1024 / b
}'
echo "(mc-analyze on the conversation trace: mean of 20 runs; 1 GB: best of 3, cat best of 3 in the same run; AIPerf best of 2; peak RSS from /usr/bin/time; 'x AIPerf' is AIPerf's time over ours)"
