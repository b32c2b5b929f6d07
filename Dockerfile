# mctrace's tools in a minimal image (the shards of `mc-replay
# --emit-k8s-job` run `mc-replay` from it). Built by scripts/image.sh, which
# stages the release binaries and the shared libraries they link (ldd) into
# image-root/ first, so the build pulls no base image:
#
#   scripts/image.sh                 # podman or docker; tags mctrace:VERSION
#
# To build elsewhere from source instead, any Rust image works: `cargo build
# --release` there and copy target/release/mc-* to /usr/local/bin.
FROM scratch
COPY image-root/ /
ENV PATH=/usr/local/bin
USER 65534:65534
WORKDIR /tmp
ENTRYPOINT []
CMD ["mc-replay", "--help"]
