#!/usr/bin/env bash
# nat2mc on a generated NAT-profiler-shaped file (default 512 MB, with
# LLM_NEW_TOKEN stream events like real ones): MB/s, calls/s, peak RSS and
# how many cores it kept busy ((user+sys)/wall).
#
#   scripts/bench-nat.sh [SIZE] [TOKENIZER]
#
# TOKENIZER defaults to $MCTRACE_DATA/tokenizers/deepseek-v4/tokenizer.json.
#
# Then nat2mc against the upstream converter (ai-dynamo/dynamo's
# benchmarks/nat_trace/convert.py) on the real profiler file
# ($MCTRACE_DATA/nat/react_mock_4req) and on a slice of the generated one
# (NAT_REF_SIZE, default 16M), best of 3 each, and the ratio. The upstream
# needs aiperf, which cannot be installed here: the reference is
# scripts/interop/nat_convert_reference.py, a re-implementation of its
# documented steps on the same HF `tokenizers` library (pip install
# tokenizers); skipped with a notice when python3 cannot import it.
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

# ---- against the upstream converter (its re-implementation)
if ! python3 -c "import tokenizers" 2> /dev/null; then
  echo; echo "skipping the upstream comparison: python3 cannot import tokenizers (pip install tokenizers)"
  exit 0
fi
real="${MCTRACE_DATA:-../shared/data}/nat/react_mock_4req/all_requests_profiler_traces.json"
ref_size="${NAT_REF_SIZE:-16M}"
small="$dir/nat-$ref_size.json"
[ -s "$small" ] || target/$profile/examples/gen_nat --bytes "$ref_size" > "$small"
best() { # CMD... -> best wall seconds of 3, peak RSS KB
  best_s=999999; best_kb=0
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$dir/time" "$@" > /dev/null 2>&1
    read -r s kb < "$dir/time"
    best_s=$(awk -v a="$s" -v b="$best_s" 'BEGIN { print (a < b ? a : b) }')
    best_kb=$(( kb > best_kb ? kb : best_kb ))
  done
}
echo
echo "| input | upstream (re-impl.) s | nat2mc s | x upstream | upstream RSS MB | nat2mc RSS MB |"
echo "|---|---:|---:|---:|---:|---:|"
for f in "$real" "$small"; do
  [ -s "$f" ] || { echo "| $f | missing | | | | |"; continue; }
  best python3 scripts/interop/nat_convert_reference.py --input-file "$f" --tokenizer "$tok" --output-file "$dir/nat-ref.jsonl"
  ref_s=$best_s; ref_kb=$best_kb
  best target/$profile/nat2mc --tokenizer "$tok" --input-file "$f" --output-file "$dir/nat-ours.jsonl" --force
  awk -v f="$(basename "$f") ($(($(stat -c %s "$f") / 1024)) KB)" -v r="$ref_s" -v o="$best_s" -v rk="$ref_kb" -v ok="$best_kb" 'BEGIN {
    printf "| %s | %.2f | %.2f | %.1f | %d | %d |\n", f, r, o, r / o, rk / 1024, ok / 1024 }'
done
