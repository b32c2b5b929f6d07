#!/usr/bin/env bash
# Builds the mctrace image (Dockerfile) without pulling a base image: the
# release binaries and exactly the shared libraries they link (ldd, with the
# dynamic loader) are staged in image-root/, then `FROM scratch` copies them.
# Uses podman, else docker. Prints the tag; `--smoke` also runs
# `mc-replay --version` and a 2-shard plan inside the image.
#
#   scripts/image.sh [--smoke]        # TAG=mctrace:dev to choose the tag
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
TAG=${TAG:-mctrace:$VERSION}
ENGINE=${ENGINE:-$(command -v podman || command -v docker || true)}
[[ -n $ENGINE ]] || { echo "image.sh: neither podman nor docker is installed" >&2; exit 1; }

cargo build --release --bins -q
ROOT=image-root
rm -rf "$ROOT"
mkdir -p "$ROOT/usr/local/bin" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"
BINS=$(sed -n 's/^name = "\(mc-[a-z-]*\|nat2mc\)"$/\1/p' Cargo.toml)
for b in $BINS; do
    cp "target/release/$b" "$ROOT/usr/local/bin/"
    # Every library it links, at the same path (the loader included).
    ldd "target/release/$b" | grep -o '/[^ ]*' | while read -r lib; do
        mkdir -p "$ROOT$(dirname "$lib")"
        cp -L "$lib" "$ROOT$lib"
    done
done
# rustls needs no system certificates (webpki roots are built in); the
# file is copied when present for tools that read it.
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    mkdir -p "$ROOT/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/"
fi
"$ENGINE" build -q -t "$TAG" -f Dockerfile . >&2
echo "$TAG"
if [[ ${1:-} == --smoke ]]; then
    trace='{"timestamp": 0, "input_length": 10, "output_length": 2}
{"timestamp": 5, "input_length": 20, "output_length": 2}'
    if "$ENGINE" run --rm "$TAG" mc-replay --version; then
        "$ENGINE" run --rm -i "$TAG" mc-replay --plan 2 <<< "$trace"
    elif [[ $ENGINE == *podman && $(id -u) == 0 ]]; then
        # A sandbox that cannot start containers (crun's setrlimit refused):
        # the image's own files, run under chroot, prove it complete.
        echo "image.sh: cannot run a container here; checking the image's files under chroot" >&2
        root=$("$ENGINE" image mount "$TAG")
        chroot "$root" /usr/local/bin/mc-replay --version
        chroot "$root" /usr/local/bin/mc-replay --plan 2 <<< "$trace"
        "$ENGINE" image unmount "$TAG" >/dev/null
    else
        exit 1
    fi
fi
