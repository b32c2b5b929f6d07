#!/usr/bin/env bash
# mc-report's pages in headless Chromium (Debian's `chromium`: apt-get
# install chromium). With no arguments: makes the three kinds of page from
# the engine model in virtual time (one run with its trace, two runs
# compared, a sweep) and a page of a 10,000-request run; renders each to
# target/screenshots/KIND.png; opens each at #selftest, where the page's
# own script hovers the first point and checks the tooltip shows its value,
# drags to zoom and double-clicks back, hides and shows a legend entry and
# sorts a table, and writes the outcome (and when the charts were drawn)
# into the title, read back with --dump-dom. Exit 1 when a selftest fails.
#
#   scripts/screenshot.sh                      # the pages, their PNGs and selftests
#   DOC=1 scripts/screenshot.sh                # also docs/img/report.png (the README's)
#   scripts/screenshot.sh REPORT.html OUT.png [WIDTH [HEIGHT]]
#   PROFILE=dev scripts/screenshot.sh          # another cargo profile (default release)
#   NO_BUILD=1 scripts/screenshot.sh           # the binaries already built
set -euo pipefail
cd "$(dirname "$0")/.."

chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$chrome" ]; then
  echo "screenshot.sh: no chromium on PATH (apt-get install chromium)" >&2
  exit 69
fi

# --no-sandbox: Chromium refuses to run as root otherwise (containers); the
# network flags keep it from calling out at start (this machine has no
# network, and each refused connection costs time).
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
  --disable-background-networking --disable-component-update --disable-sync
  --hide-scrollbars)

shot() { # html png width height
  local profile
  profile=$(mktemp -d)
  "$chrome" "${flags[@]}" --user-data-dir="$profile" --window-size="$3,$4" \
    --screenshot="$(realpath -m "$2")" "file://$(realpath "$1")" 2>/dev/null >/dev/null
  rm -rf "$profile"
  echo "screenshot.sh: $2 (${3}x$4, $(stat -c %s "$2") bytes)"
}

failed=0
selftest() { # html
  local profile title
  profile=$(mktemp -d)
  title=$("$chrome" "${flags[@]}" --user-data-dir="$profile" --window-size=1360,2000 \
    --virtual-time-budget=10000 --dump-dom "file://$(realpath "$1")#selftest" 2>/dev/null |
    grep -o '<title>[^<]*' | sed 's/<title>//' || true)
  rm -rf "$profile"
  echo "screenshot.sh: $(basename "$1") ($(stat -c %s "$1") bytes): ${title:-no title}"
  case "$title" in "selftest ok"*) ;; *) failed=1 ;; esac
}

if [ $# -ge 2 ]; then
  shot "$1" "$2" "${3:-1360}" "${4:-2600}"
  exit 0
fi

profile=${PROFILE:-release}
[ -n "${NO_BUILD:-}" ] || cargo build --quiet --offline --profile "$profile" --bin mc-gen --bin mc-replay --bin mc-report
dir=$profile; [ "$profile" = dev ] && dir=debug
bin="${CARGO_TARGET_DIR:-target}/$dir"
out=target/screenshots
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A chat workload: sessions of several turns with shared prefixes.
"$bin/mc-gen" sessions --sessions 60 --session-rate 2 --turns uniform:2:6 --seed 7 > "$work/trace.jsonl" 2>/dev/null
"$bin/mc-replay" -i "$work/trace.jsonl" -o "$work/one.jsonl" 2>/dev/null
"$bin/mc-report" --label chat --html "$out/single.html" --trace "$work/trace.jsonl" "$work/one.jsonl" > /dev/null 2>&1
"$bin/mc-replay" --speedup 4 -i "$work/trace.jsonl" -o "$work/four.jsonl" 2>/dev/null
"$bin/mc-report" --compare --html "$out/compare.html" "$work/one.jsonl" "$work/four.jsonl" > /dev/null 2>&1
"$bin/mc-replay" --rate 2,4,8,16,32 -i "$work/trace.jsonl" --out-dir "$work/sweep" 2>/dev/null
"$bin/mc-report" --html "$out/sweep.html" "$work/sweep" > /dev/null 2>&1
# 10,000 requests: the page's size and drawing time.
"$bin/mc-gen" constant --qps 40 --num-requests 10000 --isl lognormal:512:0.5 --osl 64 --seed 7 > "$work/big-trace.jsonl" 2>/dev/null
"$bin/mc-replay" -i "$work/big-trace.jsonl" -o "$work/big.jsonl" 2>/dev/null
"$bin/mc-report" --html "$out/big.html" --trace "$work/big-trace.jsonl" "$work/big.jsonl" > /dev/null 2>&1
echo "screenshot.sh: the 10,000-request page holds $(wc -l < "$work/big.jsonl") result lines"

for kind in single compare sweep big; do
  selftest "$out/$kind.html"
done

# Drawing time of the 10,000-request page against an empty page that only
# reads the clock, alternating, five of each (this machine is shared: only
# the same-run medians mean anything).
drawn() { # html: ms from navigation start to the charts drawn
  local profile
  profile=$(mktemp -d)
  "$chrome" "${flags[@]}" --user-data-dir="$profile" --window-size=1360,2000 \
    --dump-dom "file://$(realpath "$1")#selftest" 2>/dev/null |
    grep -o 'drawn [0-9]* ms' | grep -o '[0-9]*' || echo 0
  rm -rf "$profile"
}
printf '<!DOCTYPE html><title>x</title><script>document.title = "drawn " + Math.round(performance.now()) + " ms";</script>\n' > "$work/empty.html"
big=() empty=()
for _ in 1 2 3 4 5; do
  big+=("$(drawn "$out/big.html")")
  empty+=("$(drawn "$work/empty.html")")
done
median() { printf '%s\n' "$@" | sort -n | sed -n 3p; }
echo "screenshot.sh: 10,000-request page drawn after ${big[*]} ms (median $(median "${big[@]}")); an empty page: ${empty[*]} ms (median $(median "${empty[@]}"))"
shot "$out/single.html" "$out/single.png" 1360 5200
shot "$out/compare.html" "$out/compare.png" 1360 4200
shot "$out/sweep.html" "$out/sweep.png" 1360 3600
if [ -n "${DOC:-}" ]; then
  # The README's picture: the top of the single-run page.
  mkdir -p docs/img
  shot "$out/single.html" docs/img/report.png 1320 1250
fi
exit "$failed"
