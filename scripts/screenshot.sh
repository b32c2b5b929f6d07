#!/usr/bin/env bash
# A PNG of an mc-report HTML page, rendered by headless Chromium (when one
# is installed: `apt-get install chromium`).
#
#   scripts/screenshot.sh REPORT.html OUT.png [WIDTH [HEIGHT]]
#   scripts/screenshot.sh            # docs/img/report.png from a real run:
#                                    # examples/sample.jsonl at --speedup 8
#                                    # against mc-mock --engine
set -euo pipefail
cd "$(dirname "$0")/.."

chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$chrome" ]; then
  echo "screenshot.sh: no chromium on PATH (apt-get install chromium)" >&2
  exit 69
fi

shot() { # html png width height
  # --no-sandbox: Chromium refuses to run as root otherwise (containers).
  "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size="$3,$4" --screenshot="$(realpath -m "$2")" "file://$(realpath "$1")" 2>/dev/null
  echo "screenshot.sh: wrote $2 (${3}x$4)"
}

if [ $# -ge 2 ]; then
  shot "$1" "$2" "${3:-1360}" "${4:-2600}"
  exit 0
fi

cargo build --quiet --bin mc-mock --bin mc-replay --bin mc-scale --bin mc-report
bin="${CARGO_TARGET_DIR:-target}/debug"
work=$(mktemp -d)
trap 'kill "$mock" 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin/mc-mock" --port 0 --engine > "$work/mock.log" 2>/dev/null &
mock=$!
for _ in $(seq 50); do [ -s "$work/mock.log" ] && break; sleep 0.1; done
addr=$(head -1 "$work/mock.log" | sed 's/.*"addr":"\([^"]*\)".*/\1/')
"$bin/mc-scale" --speedup 8 < examples/sample.jsonl > "$work/trace.jsonl"
"$bin/mc-replay" --url "http://$addr" -i "$work/trace.jsonl" -o "$work/results.jsonl" 2>/dev/null
"$bin/mc-report" --label sample-x8-engine --html "$work/report.html" --trace "$work/trace.jsonl" "$work/results.jsonl" > /dev/null
mkdir -p docs/img
shot "$work/report.html" docs/img/report.png 1360 "${HEIGHT:-4900}"
