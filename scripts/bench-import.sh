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
#   - mc-import --from weka on the kv-cache-tester sample's sessions from
#     $MCTRACE_DATA copied WEKA_COPIES times (skipped without MCTRACE_DATA);
#   - mc-import --from ragpulse on a RAGPulse-shaped trace with its
#     component files (skipped, with a message, while that importer is not
#     implemented); memory O(distinct blocks);
#   - mc-import --from otel on OTLP/JSON lines as the Collector's file
#     exporter writes them (a document a line, one agent trace each: a
#     call, 2-4 parallel calls, a tool, a joining call; every third trace
#     with two sub-agents), the attributes an instrumentation records
#     (model, provider, response id, server address); OTEL_SIZE (default
#     256M: the importer holds the input and its spans in memory, as a
#     trace's spans may come in any document);
#   - mc-import --from chat on a LiteLLM-shaped chat log (sessions of up to
#     8 turns over one shared system prompt, each line the whole history):
#     chat templating, tokenising (the real DeepSeek V4 tokenizer from
#     $MCTRACE_DATA, a DeepSeek-style template written here) and hashing;
#     skipped, with a message, without MCTRACE_DATA;
#   - mc-merge interleave (and concat) of two sorted Mooncake-shaped traces
#     (the issue's bound: under 64 MB peak RSS), and `interleave --sort`
#     (an external merge sort: runs of 64 MiB, bounded by a few runs).
#
#   scripts/bench-import.sh
#   SIZE=200M scripts/bench-import.sh          (a quicker look)
#   AZURE_SIZE=1G AIBRIX_SIZE=256M RAG_SIZE=256M MERGE_SIZE=1G PROFILE=release scripts/bench-import.sh
#   BIN=/path/to/old/target/release scripts/bench-import.sh   (another build, not rebuilt)
#   ONLY=chat CHAT_SIZE=100M scripts/bench-import.sh   (one section: azure, burstgpt, aibrix, weka, otel, ragpulse, chat, merge)
#   INSTR=1 PROFILE=release scripts/bench-import.sh    (instructions a byte, cachegrind: see below)
#
# SIZE (default 1G) is the default of the four per-input sizes (CHAT_SIZE,
# default 100M, is the chat log's: it is bound by the tokenizer); the merge
# reads two inputs of MERGE_SIZE each. Inputs are generated (awk and
# examples/gen_trace), cached in $TMPDIR/mctrace-bench, never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${SIZE:-1G}"
azure_size="${AZURE_SIZE:-$size}"
rag_size="${RAG_SIZE:-$size}"
aibrix_size="${AIBRIX_SIZE:-$size}"
otel_size="${OTEL_SIZE:-256M}"
merge_size="${MERGE_SIZE:-$size}"
chat_size="${CHAT_SIZE:-100M}"
only="${ONLY:-}"
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
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

# OTLP/JSON lines (the Collector's file exporter): one document a line, one
# agent trace each. Times are ns since 2025-11-27T08:00:00Z written as
# decimal strings ("1764" and 15 digits: awk's doubles are exact to 2^53).
gen_otel() { # BYTES
  awk -v limit="$1" '
  function ns(ms) { return sprintf("\"1764%015.0f\"", 230400000000000 + ms * 1000000) }
  function attr(k, v) { return sprintf("{\"key\":\"%s\",\"value\":{\"stringValue\":\"%s\"}}", k, v) }
  function iattr(k, v) { return sprintf("{\"key\":\"%s\",\"value\":{\"intValue\":\"%d\"}}", k, v) }
  function span(id, parent, name, op, s, e, attrs, kind) {
    nspans++
    return sprintf("{\"traceId\":\"%s\",\"spanId\":\"%s\",\"parentSpanId\":\"%s\",\"name\":\"%s\",\"kind\":%d,\"startTimeUnixNano\":%s,\"endTimeUnixNano\":%s,\"attributes\":[%s%s],\"status\":{}}",
      tid, id, parent, name, kind, ns(s), ns(e), attr("gen_ai.operation.name", op), attrs)
  }
  function chat(id, parent, s, e) {
    return span(id, parent, "chat gpt-4o", "chat", s, e, "," attr("gen_ai.provider.name", "openai") "," attr("gen_ai.request.model", "gpt-4o") "," attr("gen_ai.response.model", "gpt-4o-2024-08-06") "," attr("gen_ai.response.id", sprintf("chatcmpl-%08x%08x", k, ++resp)) "," attr("server.address", "api.openai.com") "," iattr("gen_ai.usage.input_tokens", 200 + int(rand() * 6000)) "," iattr("gen_ai.usage.output_tokens", 10 + int(rand() * 600)) "," attr("gen_ai.response.finish_reasons", "stop"), 3)
  }
  function sid(j) { return sprintf("%08x%08x", k, j) }
  function agent(id, parent, name, s, e) { return span(id, parent, "invoke_agent " name, "invoke_agent", s, e, "," attr("gen_ai.agent.name", name) "," attr("gen_ai.provider.name", "openai"), 1) }
  function tool(id, parent, name, s, e) { return span(id, parent, "execute_tool " name, "execute_tool", s, e, "," attr("gen_ai.tool.name", name) "," attr("gen_ai.tool.call.id", "call_" id), 1) }
  BEGIN { srand(4); bytes = 0; t = 0
    while (bytes < limit) {
      k++; t += int(rand() * 200); tid = sprintf("%08x%08x%08x%08x", k, 305419896, 2271560481, 4)
      root = sid(1); j = 1; s = t; e = s + 300 + int(rand() * 2000)
      spans = chat(sid(++j), root, s, e); first = sid(j); join = e
      n = 2 + int(rand() * 3)
      for (i = 0; i < n; i++) {
        cs = e + 50 + int(rand() * 200); ce = cs + 300 + int(rand() * 3000)
        spans = spans "," chat(sid(++j), root, cs, ce); if (ce > join) join = ce
      }
      if (k % 3 == 0) {
        for (a = 0; a < 2; a++) {
          as = join + 20; ae = as + 100; aid = sid(++j); inner = ""
          for (i = 0; i < 2; i++) { cs = ae + 10; ce = cs + 200 + int(rand() * 2000); inner = inner "," chat(sid(++j), aid, cs, ce); ae = ce }
          spans = spans "," agent(aid, root, "helper" a, as, ae + 5) inner; if (ae + 5 > join2) join2 = ae + 5
        }
        join = join2
      }
      ts = join + 10; te = ts + int(rand() * 1500)
      spans = spans "," tool(sid(++j), root, "search", ts, te)
      cs = te + 20; ce = cs + 300 + int(rand() * 2000)
      spans = spans "," chat(sid(++j), root, cs, ce)
      spans = agent(root, "", "planner", t, ce + 5) "," spans
      line = "{\"resourceSpans\":[{\"resource\":{\"attributes\":[" attr("service.name", "agent-app") "]},\"scopeSpans\":[{\"scope\":{\"name\":\"opentelemetry.instrumentation.openai_v2\",\"version\":\"2.1b0\"},\"spans\":[" spans "]}]}]}"
      print line; bytes += length(line) + 1; join2 = 0
    }
  }'
}


# A LiteLLM StandardLoggingPayload log: sessions of 1-8 turns over one
# shared system prompt (about 300 words), users asking 5-60 words and
# answered in 20-300; each line holds the whole history so far, sessions
# interleaved (up to 64 open at once), a request every ~50 ms.
gen_chat() { # BYTES
  # Strings are joined, not sprintf-ed: mawk limits sprintf to 8 KiB.
  awk -v limit="$1" 'BEGIN { srand(4); bytes = 0; t = 1700000000; nw = 0; id = 0; q = "\""
    split("the of and to in is you that it he was for on are as with his they at be this have from or one had by word but not what all were we when your can said there use an each which she do how their if will up other about out many then them these so some her would make like him into time has look two more write go see number no way could people my than first water been call who oil its now find long down day did get come made may part", w, " ")
    for (i in w) nw++
    sys = ""; for (i = 0; i < 300; i++) sys = sys (i ? " " : "") w[1 + int(rand() * nw)]
    open = 0
    while (bytes < limit) {
      t += rand() * 0.1
      if (open < 64 && (open == 0 || rand() < 0.3)) {
        open++; hist[open] = "{" q "role" q ": " q "system" q ", " q "content" q ": " q sys q "}"; left[open] = 1 + int(rand() * 8)
      }
      k = 1 + int(rand() * open)
      u = ""; n = 5 + int(rand() * 55); for (i = 0; i < n; i++) u = u (i ? " " : "") w[1 + int(rand() * nw)]
      a = ""; n = 20 + int(rand() * 280); for (i = 0; i < n; i++) a = a (i ? " " : "") w[1 + int(rand() * nw)]
      hist[k] = hist[k] ", {" q "role" q ": " q "user" q ", " q "content" q ": " q u q "}"
      line = "{" q "id" q ": " q "c" (id++) q ", " q "call_type" q ": " q "acompletion" q ", " q "status" q ": " q "success" q \
        ", " q "startTime" q ": " sprintf("%.3f", t) ", " q "endTime" q ": " sprintf("%.3f", t + 2) ", " q "model" q ": " q "m" q \
        ", " q "messages" q ": [" hist[k] "], " q "response" q ": {" q "choices" q ": [{" q "message" q ": {" q "role" q ": " q "assistant" q \
        ", " q "content" q ": " q a q "}}]}, " q "prompt_tokens" q ": 0, " q "completion_tokens" q ": " n "}"
      print line; bytes += length(line) + 1
      hist[k] = hist[k] ", {" q "role" q ": " q "assistant" q ", " q "content" q ": " q a q "}"
      if (--left[k] == 0) { hist[k] = hist[open]; left[k] = left[open]; open-- }
    }
  }'
}

# DeepSeek's chat format (the V4 tokenizer_config.json has no template).
gen_chat_template() {
  printf '%s' "{% set ns = namespace(system='') %}{% for m in messages %}{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] %}{% endif %}{% endfor %}{{ bos_token }}{{ ns.system }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}"
}

# ---- INSTR=1: instructions per input byte (cachegrind) instead of wall
# time: azure, burstgpt and aibrix on INSTR_SIZE slices (default 4M) of the
# generators above, weka on the real kv-cache-tester sample files
# ($MCTRACE_DATA/kv-cache-tester-sample, copied INSTR_WEKA_COPIES times,
# default 4; skipped without MCTRACE_DATA). Counts do not move with the
# machine's load, unlike the walls below. Each tool's profile goes to
# $dir/instr/<name>.annotate (cg_annotate, the top functions).
#   INSTR=1 PROFILE=release scripts/bench-import.sh
#   INSTR=1 ONLY=weka MCTRACE_DATA=../shared/data PROFILE=release scripts/bench-import.sh
if [ -n "${INSTR:-}" ]; then
  islice="${INSTR_SIZE:-4M}"
  idir="$dir/instr"; mkdir -p "$idir"
  printf '\nprofile: %s, slices of %s\n\n' "$profile" "$islice"
  printf '| command | input bytes | output bytes | instructions | per input byte | per output byte |\n|---|---:|---:|---:|---:|---:|\n'
  instr() { # NAME INPUT CMD... (the input on stdin; INPUT - for none)
    local name=$1 input=$2; shift 2
    local src=$input; [ "$input" = - ] && src=/dev/null
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$idir/$name.out" \
      "$@" < "$src" > "$idir/$name.rows.jsonl" 2> "$idir/$name.err" || { cat "$idir/$name.err" >&2; exit 1; }
    local ir inb outb
    ir=$(awk '/^summary:/ { print $2 }' "$idir/$name.out")
    if [ "$input" = - ]; then inb=$INSTR_IN; else inb=$(stat -c %s "$input"); fi
    outb=$(stat -c %s "$idir/$name.rows.jsonl")
    cg_annotate "$idir/$name.out" 2>/dev/null | head -60 > "$idir/$name.annotate" || true
    printf '| `%s` | %d | %d | %d | %.1f | %.1f |\n' "$name" "$inb" "$outb" "$ir" \
      "$(awk -v a="$ir" -v b="$inb" 'BEGIN { print a / b }')" "$(awk -v a="$ir" -v b="$outb" 'BEGIN { print a / b }')"
  }
  if want azure; then
    [ -s "$idir/azure-$islice.csv" ] || gen_azure "$(bytes_of "$islice")" > "$idir/azure-$islice.csv"
    instr azure "$idir/azure-$islice.csv" $bin/mc-import --from azure
    instr azure-synth "$idir/azure-$islice.csv" $bin/mc-import --from azure --synth-hash-ids
  fi
  if want burstgpt; then
    [ -s "$idir/burstgpt-$islice.csv" ] || gen_burstgpt "$(bytes_of "$islice")" > "$idir/burstgpt-$islice.csv"
    instr burstgpt "$idir/burstgpt-$islice.csv" $bin/mc-import --from burstgpt
  fi
  if want aibrix; then
    [ -s "$idir/aibrix-$islice.jsonl" ] || gen_aibrix "$(bytes_of "$islice")" > "$idir/aibrix-$islice.jsonl"
    instr aibrix "$idir/aibrix-$islice.jsonl" $bin/mc-import --from aibrix
  fi
  if want weka; then
    wsrc="${MCTRACE_DATA:-}/kv-cache-tester-sample"
    if [ -n "${MCTRACE_DATA:-}" ] && [ -d "$wsrc" ]; then
      rm -rf "$idir/weka"; mkdir -p "$idir/weka"
      for c in $(seq 1 "${INSTR_WEKA_COPIES:-4}"); do
        for f in "$wsrc"/trace_*.json; do cp "$f" "$idir/weka/c$c-$(basename "$f")"; done
      done
      INSTR_IN=$(cat "$idir"/weka/*.json | wc -c)
      instr weka - $bin/mc-import --from weka "$idir"/weka/*.json
    else
      echo "skipping weka: set MCTRACE_DATA (the ../shared/data folder with kv-cache-tester-sample)" >&2
    fi
  fi
  printf '\n(valgrind --tool=cachegrind --cache-sim=no; every thread counted; profiles in %s)\n' "$idir"
  exit 0
fi

best_s=""; best_kb=""; best_cpu=""
measure() { # INPUT CMD... -> best_s (best of 3 wall seconds), best_cpu (its user + sys) and best_kb (largest peak RSS)
  local input=$1; shift
  best_s=999999; best_kb=0; best_cpu=0
  for _ in 1 2 3; do
    # The tools' summary lines go to a file, so the table stays readable.
    if ! /usr/bin/time -f "%e %M %U %S" -o "$dir/time" "$@" < "$input" > /dev/null 2> "$dir/stderr"; then
      cat "$dir/stderr" >&2; exit 1
    fi
    read -r s kb user sys < "$dir/time"
    if awk -v a="$s" -v b="$best_s" 'BEGIN { exit !(a < b) }'; then
      best_s=$s; best_cpu=$(awk -v u="$user" -v y="$sys" 'BEGIN { printf "%.2f", u + y }')
    fi
    best_kb=$(( kb > best_kb ? kb : best_kb ))
  done
}
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s < 0.005) s = 0.005; printf "%.0f", b / 1048576 / s }'; }
row() { # LABEL BYTES CAT_MBPS -- after measure
  local m; m=$(mbps "$2" "$best_s")
  printf '| `%s` | %d | %s | %s | %s | %s | %d |\n' "$1" $(($2 / 1048576)) "$best_s" "$best_cpu" "$m" \
    "$(awk -v a="$m" -v b="$3" 'BEGIN { printf "%.2f", a / b }')" $((best_kb / 1024))
}

# ---- inputs
azure="$dir/azure-2024-$azure_size.csv"
want azure && { [ -s "$azure" ] || gen_azure "$(bytes_of "$azure_size")" > "$azure"; }
burstgpt="$dir/burstgpt-$azure_size.csv"
want burstgpt && { [ -s "$burstgpt" ] || gen_burstgpt "$(bytes_of "$azure_size")" > "$burstgpt"; }
aibrix="$dir/aibrix-$aibrix_size.jsonl"
want aibrix && { [ -s "$aibrix" ] || gen_aibrix "$(bytes_of "$aibrix_size")" > "$aibrix"; }
otel="$dir/otel-$otel_size.jsonl"
want otel && { [ -s "$otel" ] || gen_otel "$(bytes_of "$otel_size")" > "$otel"; }
merge_a="$dir/trace-$merge_size.jsonl"
merge_b="$dir/trace-$merge_size-seed2.jsonl"
if want merge; then
  [ -s "$merge_a" ] || $bin/examples/gen_trace --bytes "$merge_size" --seed 1 > "$merge_a"
  [ -s "$merge_b" ] || $bin/examples/gen_trace --bytes "$merge_size" --seed 2 > "$merge_b"
fi
chat="$dir/chat-litellm-$chat_size.jsonl"
data="${MCTRACE_DATA:-}"
chat_tok="$data/tokenizers/deepseek-v4"
chat_ok=0
if want chat; then
  if [ -n "$data" ] && [ -s "$chat_tok/tokenizer.json" ]; then
    chat_ok=1
    [ -s "$chat" ] || gen_chat "$(bytes_of "$chat_size")" > "$chat"
    gen_chat_template > "$dir/deepseek.jinja"
  else
    echo "skipping chat: set MCTRACE_DATA (the ../shared/data folder with tokenizers/deepseek-v4)" >&2
  fi
fi

# Is the RAGPulse importer there? Ask it on a tiny generated sample first.
rag_ok=1
want ragpulse || rag_ok=0
[ $rag_ok = 1 ] && gen_ragpulse "$dir/ragpulse-probe" 4096
if [ $rag_ok = 1 ] && ! $bin/mc-import --from ragpulse --components "$dir/ragpulse-probe" \
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
printf '| command | input MB | best s | its user + sys s | MB/s | x cat or cat pipe | peak RSS MB |\n|---|---:|---:|---:|---:|---:|---:|\n'

# ---- azure
if want azure; then
bytes=$(stat -c %s "$azure")
cat "$azure" > /dev/null
measure "$azure" cat; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat (azure csv)" "$bytes" "$cat_mbps"
measure "$azure" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (azure csv)" "$bytes" "$cat_mbps"
measure "$azure" $bin/mc-import --from azure; row "mc-import --from azure" "$bytes" "$cat_mbps"
measure "$azure" $bin/mc-import --from azure --float-timestamps
row "mc-import --from azure --float-timestamps" "$bytes" "$cat_mbps"
fi

# ---- burstgpt (AZURE_SIZE)
if want burstgpt; then
bytes=$(stat -c %s "$burstgpt")
cat "$burstgpt" > /dev/null
measure "$burstgpt" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (burstgpt csv)" "$bytes" "$cat_mbps"
measure "$burstgpt" $bin/mc-import --from burstgpt; row "mc-import --from burstgpt" "$bytes" "$cat_mbps"
fi

# ---- aibrix
if want aibrix; then
bytes=$(stat -c %s "$aibrix")
cat "$aibrix" > /dev/null
measure "$aibrix" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (aibrix jsonl)" "$bytes" "$cat_mbps"
measure "$aibrix" $bin/mc-import --from aibrix; row "mc-import --from aibrix" "$bytes" "$cat_mbps"
measure "$aibrix" $bin/mc-import --from aibrix --no-text; row "mc-import --from aibrix --no-text" "$bytes" "$cat_mbps"
fi

# ---- otel
if want otel; then
bytes=$(stat -c %s "$otel")
cat "$otel" > /dev/null
measure "$otel" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s"); row "cat | cat (otlp json lines)" "$bytes" "$cat_mbps"
measure "$otel" $bin/mc-import --from otel; row "mc-import --from otel" "$bytes" "$cat_mbps"
fi

# ---- weka: the kv-cache-tester sample's session files from $MCTRACE_DATA,
# copied WEKA_COPIES times (default 33: about 75 MB), one document a file
if want weka; then
  wsrc="${MCTRACE_DATA:-}/kv-cache-tester-sample"
  if [ -n "${MCTRACE_DATA:-}" ] && [ -d "$wsrc" ]; then
    wdir="$dir/weka-${WEKA_COPIES:-33}"
    if [ ! -d "$wdir" ]; then
      mkdir -p "$wdir"
      for c in $(seq 1 "${WEKA_COPIES:-33}"); do
        for f in "$wsrc"/trace_*.json; do cp "$f" "$wdir/c$c-$(basename "$f")"; done
      done
    fi
    bytes=$(cat "$wdir"/*.json | wc -c)
    measure /dev/null sh -c 'cat "$@" | cat' sh "$wdir"/*.json; cat_mbps=$(mbps "$bytes" "$best_s")
    row "cat files | cat (weka sessions)" "$bytes" "$cat_mbps"
    measure /dev/null $bin/mc-import --from weka "$wdir"/*.json
    row "mc-import --from weka" "$bytes" "$cat_mbps"
  else
    echo "skipping weka: set MCTRACE_DATA (the ../shared/data folder with kv-cache-tester-sample)" >&2
  fi
fi

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
elif want ragpulse; then
  echo "| \`mc-import --from ragpulse\` | - | - | skipped: not implemented | - | - |"
fi

# ---- chat: templating, tokenising, hashing
if [ $chat_ok = 1 ]; then
  bytes=$(stat -c %s "$chat")
  cat "$chat" > /dev/null
  measure "$chat" sh -c 'cat | cat'; cat_mbps=$(mbps "$bytes" "$best_s")
  row "cat | cat (chat log)" "$bytes" "$cat_mbps"
  measure "$chat" $bin/mc-import --from chat --tokenizer "$chat_tok" --chat-template "$dir/deepseek.jinja"
  row "mc-import --from chat" "$bytes" "$cat_mbps"
  grep "chat:" "$dir/stderr" >&2
fi

# ---- merge: two sorted traces
interleave_kb=0; sort_kb=0
if want merge; then
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
fi

echo
echo "(best of 3 runs, with that run's CPU seconds; peak RSS is the largest of the 3; the ratios of the tools are against"
echo " the \`cat | cat\` row above them; MB/s counts input bytes)"
want merge && echo "(merge inputs: two gen_trace files of $merge_size with seeds 1 and 2, sorted by timestamp)"
printf 'load average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
if [ $((sort_kb / 1024)) -ge 256 ]; then
  echo "FAIL: mc-merge interleave --sort peaked at $((sort_kb / 1024)) MB, above 256 MB (4 runs of 64 MiB)" >&2
  exit 1
fi
if [ $((interleave_kb / 1024)) -ge 64 ]; then
  echo "FAIL: mc-merge interleave peaked at $((interleave_kb / 1024)) MB, above the 64 MB bound" >&2
  exit 1
fi
