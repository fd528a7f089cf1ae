#!/usr/bin/env bash
# Build librdkafka's own regression-test runner (tests/test-runner) from Debian's
# source package, so protocol-tests/librdkafka/run.sh can point it at Sluice.
#
#   protocol-tests/librdkafka/build.sh            # build dir: $RDK_BUILD_DIR or /tmp/sluice-rdk
#
# Environment:
#   RDK_BUILD_DIR=/tmp/sluice-rdk   where the source is unpacked and built (keep it outside
#                                   the repository: nothing of librdkafka is committed)
#   RDK_VERSION=2.0.2-1             Debian source version (default: what apt picks; bookworm
#                                   has 2.0.2, which expected.txt describes)
#   RDK_JOBS=N                      make -j (default: number of cores)
#   RDK_CURL=1                      build with libcurl (libcurl4-openssl-dev), for OIDC
#                                   (sasl.oauthbearer.method=oidc, test 0126). Debian's own
#                                   package is built without it, so the default is not to;
#                                   use a build dir of its own (RDK_BUILD_DIR=/tmp/sluice-rdk-curl)
#
# Needs root (apt-get). The source comes from `apt-get source librdkafka`, with Debian's
# own patches applied and nothing else: the test-runner is the one a Debian user builds.
# deb-src entries are added if apt has none. Idempotent: a second run only re-runs make,
# which does nothing (a few seconds). Prints the directory holding test-runner last.
set -euo pipefail

BUILD_DIR=${RDK_BUILD_DIR:-/tmp/sluice-rdk}
JOBS=${RDK_JOBS:-$(nproc)}
# Build dependencies of the library and the tests (rapidjson: 0053's stats schema check).
DEPS=(dpkg-dev build-essential pkg-config python3 zlib1g-dev libssl-dev libsasl2-dev
      libzstd-dev liblz4-dev rapidjson-dev)
CURL=(--disable-curl)
if [[ ${RDK_CURL:-} == 1 ]]; then DEPS+=(libcurl4-openssl-dev); CURL=(--enable-curl); fi

mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
LOG=$BUILD_DIR/build.log
echo "== build.sh $(date -u +%FT%TZ)" >>"$LOG"

fail() { echo "build.sh: $*" >&2; exit 1; }
# quiet CMD...: output goes to the log, which is shown (its end) only on failure.
quiet() {
    "$@" >>"$LOG" 2>&1 || {
        echo "build.sh: failed: $* (last lines of $LOG:)" >&2
        tail -n 30 "$LOG" >&2
        exit 1
    }
}
[[ $(id -u) == 0 ]] && AS_ROOT=() || AS_ROOT=(sudo)
export DEBIAN_FRONTEND=noninteractive

# --- 1. build dependencies ------------------------------------------------------------
need=()
for p in "${DEPS[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || need+=("$p")
done
if ((${#need[@]})); then
    echo "build.sh: installing ${need[*]}" >&2
    quiet "${AS_ROOT[@]}" apt-get update
    quiet "${AS_ROOT[@]}" apt-get install -y --no-install-recommends "${need[@]}"
fi

# --- 2. source package ----------------------------------------------------------------
src_tree() { { ls -d "$BUILD_DIR"/librdkafka-[0-9]*/ 2>/dev/null || true; } | sed "s:/\$::" | sort -V | tail -n1; }
SRC=$(src_tree)
if [[ -z $SRC || ! -f $SRC/.sluice-unpacked ]]; then
    [[ -z $SRC ]] || rm -rf "$SRC"           # left over from an interrupted unpack
    spec=librdkafka${RDK_VERSION:+=$RDK_VERSION}
    if ! apt-get source --print-uris "$spec" 2>/dev/null | grep -q "\.dsc'"; then
        # No deb-src: add one deb-src stanza per deb822 file (or one deb-src line per
        # classic `deb` line), in a file of our own, leaving the existing ones untouched.
        echo "build.sh: enabling deb-src entries (/etc/apt/sources.list.d/sluice-deb-src.*)" >&2
        for f in /etc/apt/sources.list.d/*.sources; do
            [[ -f $f && $f != */sluice-deb-src.sources ]] || continue
            awk 'BEGIN{RS=""; ORS="\n\n"}
                 /(^|\n)Types:[^\n]*deb([ \n]|$)/ && !/deb-src/ && /URIs:[^\n]*debian/ {
                     sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f"
        done | "${AS_ROOT[@]}" tee /etc/apt/sources.list.d/sluice-deb-src.sources >/dev/null
        # (a machine may have no sources.list at all: cat's failure must not end the script)
        { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
            sed -n 's/^deb \(.*debian.*\)$/deb-src \1/p' |
            "${AS_ROOT[@]}" tee /etc/apt/sources.list.d/sluice-deb-src.list >/dev/null
        quiet "${AS_ROOT[@]}" apt-get update
    fi
    # dpkg-source unpacks and applies Debian's patches; as root apt warns that the
    # download is unsandboxed, which is harmless.
    (cd "$BUILD_DIR" && quiet apt-get source "$spec")
    SRC=$(src_tree)
    [[ -n $SRC && -f $SRC/configure ]] || fail "apt-get source produced no librdkafka tree"
    touch "$SRC/.sluice-unpacked"
fi
ver=${SRC##*/librdkafka-}
[[ $ver == 2.0.2 ]] || echo "build.sh: warning: librdkafka $ver; expected.txt is for 2.0.2" >&2

# --- 3. configure, library, test-runner ----------------------------------------------
cd "$SRC"
# --no-download: only system libraries (no bundled copies fetched from the network).
# No libcurl (as Debian builds it) unless RDK_CURL=1: only OIDC (0126) uses it.
[[ -f Makefile.config ]] || quiet ./configure --no-download "${CURL[@]}" --prefix=/usr/local
quiet make -j"$JOBS" libs
# `make -C tests` would also run the whole suite against localhost:9092: `build` only builds
# (test-runner, and the interceptor plugin that 0066 loads).
quiet make -j"$JOBS" -C tests build
[[ -x tests/test-runner ]] || fail "tests/test-runner was not built (see $LOG)"
echo "$SRC/tests"
