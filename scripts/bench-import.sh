#!/usr/bin/env bash
# Throughput and peak memory of mc-import and mc-merge on generated inputs,
# next to `cat | cat` on the same files (the issue's reference for a
# streaming filter), all measured in this one run:
#   - mc-import --from azure on an Azure-2024-shaped CSV
#     (`TIMESTAMP,ContextTokens,GeneratedTokens`, timestamps like
#     `2024-05-10 00:00:00.0095530+00:00`, some without a fraction);
#   - mc-import --from burstgpt on a BurstGPT-shaped CSV (v1/v2 columns,
#     AZURE_SIZE);
#   - mc-import --from aibrix on an AIBrix-shaped JSONL workload (one
#     entry a line, one to three requests each, every other with a prompt);
#   - mc-import --from ragpulse on a RAGPulse-shaped trace with its
#     component files (skipped, with a message, while that importer is not
#     implemented); memory O(distinct blocks);
#   - mc-merge interleave (and concat) of two sorted Mooncake-shaped traces
#     (the issue's bound: under 64 MB peak RSS), and `interleave --sort`
#     (an external merge sort: runs of 64 MiB, bounded by a few runs).
#
#   scripts/bench-import.sh
#   SIZE=200M scripts/bench-import.sh          (a quicker look)
#   AZURE_SIZE=1G AIBRIX_SIZE=256M RAG_SIZE=256M MERGE_SIZE=1G PROFILE=release scripts/bench-import.sh
#   BIN=/path/to/old/target/release scripts/bench-import.sh   (another build, not rebuilt)
#
# SIZE (default 1G) is the default of the four per-input sizes; the merge
# reads two inputs of MERGE_SIZE each. Inputs are generated (awk and
# examples/gen_trace), cached in $TMPDIR/mctrace-bench, never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${SIZE:-1G}"
azure_size="${AZURE_SIZE:-$size}"
rag_size="${RAG_SIZE:-$size}"
aibrix_size="${AIBRIX_SIZE:-$size}"
merge_size="${MERGE_SIZE:-$size}"
dir="${TMPDIR:-/tmp}/mctrace-bench"
mkdir -p "$dir"
# PROFILE=release for the everyday build; the figures in the docs use `dist` (fat LTO).
profile="${PROFILE:-dist}"
if [ -n "${BIN:-}" ]; then
  bin=$BIN
  profile="$BIN"
else
  cargo build --profile "$profile" --quiet --bins --examples
  bin=target/$profile
fi
echo "binaries: $bin" >&2

bytes_of() { # 512M, 1G, 100K or a byte count
  awk -v s="$1" 'BEGIN { n = s + 0; u = substr(s, length(s));
    if (u == "K" || u == "k") n *= 1024; else if (u == "M" || u == "m") n *= 1048576;
    else if (u == "G" || u == "g") n *= 1073741824; printf "%d", n }'
}

# An Azure 2024 week: arrivals ~25 ms apart from 2024-05-10 00:00:00, 100 ns
# resolution, about one timestamp in 16 on a whole second without fraction.
gen_azure() { # BYTES
  awk -v limit="$1" 'BEGIN {
    srand(1); split("31 29 31 30 31 30 31 31 30 31 30 31", mdays, " ")
    print "TIMESTAMP,ContextTokens,GeneratedTokens"; bytes = 40
    t = 0   # in units of 100 ns since 2024-05-10 00:00:00
    while (bytes < limit) {
      t += int(rand() * 500000)
      if (rand() < 0.0625) t += (10000000 - t % 10000000) % 10000000
      s = int(t / 10000000); frac = t % 10000000
      day = 10 + int(s / 86400); mon = 5
      while (day > mdays[mon]) { day -= mdays[mon]; mon = mon % 12 + 1 }
      hh = int(s % 86400 / 3600); mm = int(s % 3600 / 60); ss = s % 60
      if (frac == 0) stamp = sprintf("2024-%02d-%02d %02d:%02d:%02d+00:00", mon, day, hh, mm, ss)
      else stamp = sprintf("2024-%02d-%02d %02d:%02d:%02d.%07d+00:00", mon, day, hh, mm, ss, frac)
      line = sprintf("%s,%d,%d", stamp, 100 + int(rand() * rand() * 8000), 1 + int(rand() * 700))
      print line; bytes += length(line) + 1
    }
  }'
}

# BurstGPT's shape (v1/v2 columns): seconds since the first day's midnight,
# about 2 arrivals a second, two models, one row in 50 failed (0 response
# tokens, dropped by the importer), Log Type Conversation or API log.
gen_burstgpt() { # BYTES
  awk -v limit="$1" 'BEGIN {
    srand(4); print "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"; bytes = 70
    t = 5
    while (bytes < limit) {
      t += int(rand() * 2)
      model = rand() < 0.7 ? "ChatGPT" : "GPT-4"
      req = 1 + int(rand() * rand() * 4000)
      resp = rand() < 0.02 ? 0 : 1 + int(rand() * 900)
      lt = rand() < 0.8 ? "Conversation log" : "API log"
      line = sprintf("%d,%s,%d,%d,%d,%s", t, model, req, resp, req + resp, lt)
      print line; bytes += length(line) + 1
    }
  }'
}

# AIBrix's JSONL shape (vllm-project/aibrix benchmarks/generator): one
# entry per dispatch time, 1-3 requests each, half with a prompt text.
gen_aibrix() { # BYTES
  awk -v limit="$1" 'BEGIN { srand(2); bytes = 0; t = 0; n = 0
    while (bytes < limit) {
      t += int(rand() * 50); k = 1 + int(rand() * 3); r = ""
      for (i = 0; i < k; i++) {
        n++; len = 20 + int(rand() * 4000)
        p = (rand() < 0.5) ? sprintf("\"prompt\": \"request %d: summarize the attached document\", ", n) : ""
        r = r (i ? ", " : "") sprintf("{%s\"prompt_length\": %d, \"output_length\": %d, \"session_id\": %d}", p, len, 1 + int(rand() * 700), int(n / 5))
      }
      line = sprintf("{\"timestamp\": %d, \"requests\": [%s]}", t, r)
      print line; bytes += length(line) + 1
    }
  }'
}

# RAGPulse's shape (see $MCTRACE_DATA/ragpulse/SOURCE.md): a trace whose
# hash_ids is an object of component id lists, string timestamps in whole
# seconds, a session_id; and the five component length files.
# Component lengths are functions of the id, so the trace's input_length can
# be their sum plus RAGPulse's 6-12 template tokens (the importer checks it).
gen_ragpulse() { # DIR BYTES
  local d=$1 limit=$2
  mkdir -p "$d"
  awk -v d="$d" 'BEGIN {
    for (i = 0; i < 64; i++) printf "{\"sys_prompt_id\": %d, \"token_length\": 512}\n", i > (d "/1_sys_prompt.jsonl")
    for (i = 1000; i < 21000; i++) printf "{\"passage_id\": %d, \"token_length\": %d}\n", i, 50 + (i * 7919) % 400 > (d "/2_passages.jsonl")
    for (i = 30000; i < 50000; i++) printf "{\"history_id\": %d, \"token_length\": %d}\n", i, 5 + (i * 104729) % 300 > (d "/3_history.jsonl")
    for (i = 60000; i < 80000; i++) printf "{\"user_input_id\": %d, \"token_length\": %d}\n", i, 3 + i % 60 > (d "/4_user_input.jsonl")
    for (i = 90000; i < 90500; i++) printf "{\"web_search_id\": %d, \"token_length\": 512}\n", i > (d "/5_web_search.jsonl")
  }'
  awk -v limit="$limit" 'BEGIN { srand(3); bytes = 0; t = 0; n = 0
    while (bytes < limit) {
      n++; t += int(rand() * 3)
      sys = sprintf("%d, %d, %d", int(rand() * 4), 4 + int(rand() * 20), 24 + int(rand() * 40)); len = 3 * 512
      p = ""; np = 3 + int(rand() * 6)
      for (i = 0; i < np; i++) { id = 1000 + int(rand() * 20000); p = p (i ? ", " : "") id; len += 50 + (id * 7919) % 400 }
      h = ""; if (rand() < 0.5) { id = 30000 + int(rand() * 20000); h = id; len += 5 + (id * 104729) % 300 }
      w = ""; if (rand() < 0.1) { id = 90000 + int(rand() * 500); w = id; len += 512 }
      u = 60000 + int(rand() * 20000); len += 3 + u % 60
      line = sprintf("{\"timestamp\": \"%d\", \"input_length\": %d, \"output_length\": %d, \"hash_ids\": {\"sys_prompt\": [%s], \"passages_ids\": [%s], \"history\": [%s], \"web_search\": [%s], \"user_input\": [%d]}, \"session_id\": \"%.0f-%06d\"}",
        t, len + 6 + int(rand() * 7), 20 + int(rand() * 400), sys, p, h, w, u, 1757476916000 + t, n % 100000)
      print line; bytes += length(line) + 1
    }
  }' > "$d/0_trace.jsonl"
}

best_s=""; best_kb=""
measure() { # INPUT CMD... -> best_s (best of 3 wall seconds) and best_kb (largest peak RSS)
  local input=$1; shift
  best_s=999999; best_kb=0
  for _ in 1 2 3; do
    # The tools' summary lines go to a file, so the table stays readable.
    if ! /usr/bin/time -f "%e %M" -o "$dir/time" "$@" < "$input" > /dev/null 2> "$dir/stderr"; then
      cat "$dir/stderr" >&2; exit 1
    fi
    read -r s kb < "$dir/time"
    best_s=$(awk -v a="$s" -v b="$best_s" 'BEGIN { print (a < b ? a : b) }')
    best_kb=$(( kb > best_kb ? kb : best_kb ))
  done
}
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.0f", b / 1048576 / s }'; }
row() { # LABEL BYTES CAT_MBPS -- after measure
  local m; m=$(mbps "$2" "$best_s")
  printf '| `%s` | %d | %s | %s | %s | %d |\n' "$1" $(($2 / 1048576)) "$best_s" "$m" \
    "$(awk -v a="$m" -v b="$3" 'BEGIN { printf "%.2f", a / b }')" $((best_kb / 1024))
}

# ---- inputs
azure="$dir/azure-2024-$azure_size.csv"
[ -s "$azure" ] || gen_azure "$(bytes_of "$azure_size")" > "$azure"
burstgpt="$dir/burstgpt-$azure_size.csv"
[ -s "$burstgpt" ] || gen_burstgpt "$(bytes_of "$azure_size")" > "$burstgpt"
aibrix="$dir/aibrix-$aibrix_size.jsonl"
[ -s "$aibrix" ] || gen_aibrix "$(bytes_of "$aibrix_size")" > "$aibrix"
merge_a="$dir/trace-$merge_size.jsonl"
merge_b="$dir/trace-$merge_size-seed2.jsonl"
[ -s "$merge_a" ] || $bin/examples/gen_trace --bytes "$merge_size" --seed 1 > "$merge_a"
[ -s "$merge_b" ] || $bin/examples/gen_trace --bytes "$merge_size" --seed 2 > "$merge_b"

# Is the RAGPulse importer there? Ask it on a tiny generated sample first.
rag_ok=1
gen_ragpulse "$dir/ragpulse-probe" 4096
if ! $bin/mc-import --from ragpulse --components "$dir/ragpulse-probe" \
    "$dir/ragpulse-probe/0_trace.jsonl" > /dev/null 2> "$dir/probe.err"; then
  if grep -q "not implemented" "$dir/probe.err"; then
    rag_ok=0
    echo "skipping ragpulse: $(cat "$dir/probe.err")" >&2
  else
    cat "$dir/probe.err" >&2; exit 1
  fi
fi
rag="$dir/ragpulse-$rag_size"
if [ $rag_ok = 1 ] && [ ! -s "$rag/0_trace.jsonl" ]; then
  gen_ragpulse "$rag" "$(bytes_of "$rag_size")"
fi

printf '\nprofile: %s\n\n' "$profile"
printf 'load average: %s\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '| command | input MB | best s | MB/s | x cat or cat pipe | peak RSS MB |\n|---|---:|---:|---:|---:|---:|\n'

# ---- azure
bytes=$(stat -c %s "$azure")
cat "$azure" > /dev/null
measure "$azure" cat; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat (azure csv)" "$bytes" "$cat_mbps"
measure "$azure" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (azure csv)" "$bytes" "$cat_mbps"
measure "$azure" $bin/mc-import --from azure; row "mc-import --from azure" "$bytes" "$cat_mbps"
measure "$azure" $bin/mc-import --from azure --float-timestamps
row "mc-import --from azure --float-timestamps" "$bytes" "$cat_mbps"

# ---- burstgpt (AZURE_SIZE)
bytes=$(stat -c %s "$burstgpt")
cat "$burstgpt" > /dev/null
measure "$burstgpt" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (burstgpt csv)" "$bytes" "$cat_mbps"
measure "$burstgpt" $bin/mc-import --from burstgpt; row "mc-import --from burstgpt" "$bytes" "$cat_mbps"

# ---- aibrix
bytes=$(stat -c %s "$aibrix")
cat "$aibrix" > /dev/null
measure "$aibrix" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (aibrix jsonl)" "$bytes" "$cat_mbps"
measure "$aibrix" $bin/mc-import --from aibrix; row "mc-import --from aibrix" "$bytes" "$cat_mbps"
measure "$aibrix" $bin/mc-import --from aibrix --no-text; row "mc-import --from aibrix --no-text" "$bytes" "$cat_mbps"

# ---- ragpulse
if [ $rag_ok = 1 ]; then
  bytes=$(stat -c %s "$rag/0_trace.jsonl")
  cat "$rag/0_trace.jsonl" > /dev/null
  measure "$rag/0_trace.jsonl" cat; cat_mbps=$(mbps "$bytes" "$best_s")
  row "cat (ragpulse trace)" "$bytes" "$cat_mbps"
  measure "$rag/0_trace.jsonl" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s")
  row "cat | cat (ragpulse trace)" "$bytes" "$cat_mbps"
  measure /dev/null $bin/mc-import --from ragpulse --components "$rag" "$rag/0_trace.jsonl"
  row "mc-import --from ragpulse" "$bytes" "$cat_mbps"
else
  echo "| \`mc-import --from ragpulse\` | - | - | skipped: not implemented | - | - |"
fi

# ---- merge: two sorted traces
bytes=$(( $(stat -c %s "$merge_a") + $(stat -c %s "$merge_b") ))
cat "$merge_a" "$merge_b" > /dev/null
measure /dev/null cat "$merge_a" "$merge_b"; cat_mbps=$(mbps "$bytes" "$best_s")
row "cat A B" "$bytes" "$cat_mbps"
measure /dev/null sh -c 'cat "$0" "$1" | cat' "$merge_a" "$merge_b"; cat_mbps=$(mbps "$bytes" "$best_s")
row "cat A B | cat" "$bytes" "$cat_mbps"
measure /dev/null $bin/mc-merge interleave "$merge_a" "$merge_b"
row "mc-merge interleave A B" "$bytes" "$cat_mbps"
interleave_kb=$best_kb
measure /dev/null $bin/mc-merge interleave --shared-ids "$merge_a" "$merge_b"
row "mc-merge interleave --shared-ids A B" "$bytes" "$cat_mbps"
measure /dev/null $bin/mc-merge concat "$merge_a" "$merge_b"
row "mc-merge concat A B (B read twice)" "$bytes" "$cat_mbps"
# --sort: an external merge sort per file (runs of 64 MiB spilled to $TMPDIR)
measure /dev/null $bin/mc-merge interleave --sort "$merge_a" "$merge_b"
row "mc-merge interleave --sort A B" "$bytes" "$cat_mbps"
sort_kb=$best_kb

echo
echo "(best of 3 runs; peak RSS is the largest of the 3; the ratios of the tools are against"
echo " the \`cat | cat\` row above them; merge inputs: two gen_trace files of $merge_size with"
echo " seeds 1 and 2, sorted by timestamp; MB/s counts input bytes)"
printf 'load average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
if [ $((sort_kb / 1024)) -ge 256 ]; then
  echo "FAIL: mc-merge interleave --sort peaked at $((sort_kb / 1024)) MB, above 256 MB (4 runs of 64 MiB)" >&2
  exit 1
fi
if [ $((interleave_kb / 1024)) -ge 64 ]; then
  echo "FAIL: mc-merge interleave peaked at $((interleave_kb / 1024)) MB, above the 64 MB bound" >&2
  exit 1
fi
