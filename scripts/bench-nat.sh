#!/usr/bin/env bash
# nat2mc on a generated NAT-profiler-shaped file (default 512 MB, with
# LLM_NEW_TOKEN stream events like real ones): MB/s, calls/s, peak RSS and
# how many cores it kept busy ((user+sys)/wall).
#
#   scripts/bench-nat.sh [SIZE] [TOKENIZER]
#
# TOKENIZER defaults to $MCTRACE_DATA/tokenizers/deepseek-v4/tokenizer.json.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-512M}"
tok="${2:-${MCTRACE_DATA:-../shared/data}/tokenizers/deepseek-v4/tokenizer.json}"
dir="${TMPDIR:-/tmp}/mctrace-bench"
mkdir -p "$dir"
# PROFILE=release for the everyday build; the figures in the docs use `dist` (fat LTO).
profile="${PROFILE:-dist}"
cargo build --profile "$profile" --quiet --bins --examples
echo "profile: $profile (target/$profile)" >&2
file="$dir/nat-$size.json"
[ -s "$file" ] || target/$profile/examples/gen_nat --bytes "$size" > "$file"
bytes=$(stat -c %s "$file")
cat "$file" > /dev/null
/usr/bin/time -f "%e %U %S %M" -o "$dir/time" target/$profile/nat2mc --tokenizer "$tok" < "$file" > "$dir/nat.jsonl" 2> "$dir/nat.err"
read -r wall user sys kb < "$dir/time"
calls=$(wc -l < "$dir/nat.jsonl")
tail -1 "$dir/nat.err"
echo
echo "| input | seconds | MB/s | calls/s | peak RSS MB | cores busy |"
echo "|---|---:|---:|---:|---:|---:|"
awk -v b="$bytes" -v w="$wall" -v u="$user" -v s="$sys" -v c="$calls" -v k="$kb" 'BEGIN {
  printf "| generated %d MB, %d calls | %.2f | %.0f | %.0f | %d | %.2f of %d |\n", b / 1048576, c, w, b / 1048576 / w, c / w, k / 1024, (u + s) / w, 2 }'
