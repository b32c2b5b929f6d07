#!/usr/bin/env bash
# The functions of src/ longer than MAX lines (default 80), longest first,
# and how many: the measure of "no function over 80 lines".
#
#   scripts/long-fns.sh [MAX]
#
# How it counts: a function is every line from its `fn` line (attributes
# and doc comments not counted) to its closing brace, both included; trait
# declarations without a body are not functions here. Test modules
# (`#[cfg(test)] mod NAME { ... }`) are left out: long tests are tables of
# cases. It relies on rustfmt's layout (CI checks `cargo fmt`): a block's
# closing brace is alone on a line at its opening line's indent.
set -euo pipefail
MAX="${1:-80}"
cd "$(dirname "$0")/.."
find src -name '*.rs' | sort | xargs awk -v MAX="$MAX" '
function indent_of(s) { sub(/[^ \t].*$/, "", s); return s }
FNR == 1 { open = 0; pending = 0; cfgtest = 0; skipping = 0 }
skipping { if ($0 == skip "}") skipping = 0; next }
/^[ \t]*#\[cfg\(test\)\]/ { cfgtest = 1; next }
cfgtest && /^[ \t]*#\[/ { next }
cfgtest {
    cfgtest = 0
    if ($0 ~ /^[ \t]*(pub )?mod [A-Za-z_0-9]+ \{[ \t]*$/) { skip = indent_of($0); skipping = 1; next }
}
{
    if (!open && !pending && match($0, /^[ \t]*(pub(\([a-z:]+\))? )?(const )?(async )?(unsafe )?(extern "C" )?fn [A-Za-z_0-9]+/)) {
        indent = indent_of($0)
        name = $0; sub(/^.*fn /, "", name); sub(/[^A-Za-z_0-9].*$/, "", name)
        start = FNR; pending = 1
    }
    if (pending) {
        if ($0 ~ /\{[ \t]*$/ || $0 ~ /\{[ \t]*\}[ \t]*$/) {
            pending = 0
            if ($0 ~ /\}[ \t]*$/) next
            open = 1; next
        }
        if ($0 ~ /;[ \t]*$/) { pending = 0 }
        next
    }
    if (open && $0 == indent "}") {
        open = 0
        n = FNR - start + 1
        if (n > MAX) printf "%d %s:%d %s\n", n, FILENAME, start, name
    }
}
' | sort -rn | awk '{ print } END { printf "%d functions over '"$MAX"' lines\n", NR }'
