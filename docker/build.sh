#!/usr/bin/env bash
# Builds the sluice:latest image without pulling anything: a statically linked sluice binary and
# are built on the host, then copied into a FROM scratch image
# (docker/Dockerfile). Needs Rust (x86_64-unknown-linux-gnu), gcc with static glibc (libc6-dev),
# and a Docker engine. Usage: docker/build.sh [IMAGE_TAG]   (default sluice:latest)
#        docker/build.sh --binary   only builds the static binary and prints its path (no Docker
#                                   needed): the test command runs librdkafka's suite on it, so
#                                   the image reuses that build instead of a second release build
#
# The static build uses its own target dir (target/static), so it leaves the normal build's
# cache alone. Override with SLUICE_STATIC_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
binary_only=
if [[ ${1:-} == --binary ]]; then binary_only=1; shift; fi
image="${1:-${SLUICE_IMAGE:-sluice:latest}}"
triple=x86_64-unknown-linux-gnu
target_dir="${SLUICE_STATIC_TARGET_DIR:-target/static}"
ctx="$target_dir/image-context"

echo "== static sluice binary ($target_dir)" >&2
start=$(date +%s)
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --bin sluice --target "$triple" --target-dir "$target_dir"
bin="$target_dir/$triple/release/sluice"
echo "   cargo build: $(($(date +%s) - start))s" >&2

mkdir -p "$ctx"

# A dynamically linked binary cannot run in a scratch image: refuse it here, not at `docker run`.
for f in "$bin"; do
    if command -v file >/dev/null; then
        desc=$(file -b "$f")
        case "$desc" in
            *"statically linked"* | *"static-pie linked"*) ;;
            *) echo "build.sh: $f is not static: $desc" >&2; exit 1 ;;
        esac
    fi
    deps=$(ldd "$f" 2>&1 || true)
    case "$deps" in
        *"statically linked"* | *"not a dynamic executable"*) ;;
        *) echo "build.sh: $f has dynamic dependencies:" >&2; echo "$deps" >&2; exit 1 ;;
    esac
done

if [[ -n $binary_only ]]; then
    echo "$bin"
    exit 0
fi

echo "== image $image"
cp "$bin" "$ctx/sluice"
strip "$ctx/sluice" 2>/dev/null || true
cp docker/Dockerfile docker/nsswitch.conf "$ctx/"
rm -rf "$ctx/data" && mkdir "$ctx/data"
# Docker CLIs without the buildx plugin refuse BuildKit; the classic builder handles this file.
if ! docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=0
fi
# Quiet unless it fails (the classic builder also prints a deprecation notice on every run).
if ! out=$(docker build -q -t "$image" "$ctx" 2>&1); then
    echo "$out" >&2
    exit 1
fi
docker image ls "$image" --format 'built {{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}'
