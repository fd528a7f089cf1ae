#!/usr/bin/env bash
# The project's whole test command (README, .ci/run): formatting, lints, unit and protocol tests
# through librdkafka and raw frames, then the other real clients (kcat, Python) against the
# broker binary. Prints the wall time of each stage.
set -euo pipefail
cd "$(dirname "$0")/.."

stage() {
    local name=$1
    shift
    local start=$SECONDS
    echo "=== $name"
    "$@"
    echo "=== $name: $((SECONDS - start)) s"
}

# librdkafka's test suite is built (apt-get, then C) while the Rust stages run: its log is shown
# only if it fails, and its stage waits for it. A second build with libcurl (Debian builds it
# without) serves the OIDC test, 0126.
RDK_BUILD_LOG=$(mktemp "${TMPDIR:-/tmp}/sluice-rdk-build.XXXXXX")
RDK_CURL_DIR=${RDK_CURL_DIR:-/tmp/sluice-rdk-curl}
{ protocol-tests/librdkafka/build.sh && RDK_CURL=1 RDK_BUILD_DIR=$RDK_CURL_DIR protocol-tests/librdkafka/build.sh; } \
    >"$RDK_BUILD_LOG" 2>&1 &
RDK_BUILD_PID=$!
REL=target/static/x86_64-unknown-linux-gnu/release/sluice
librdkafka_suite() {
    wait "$RDK_BUILD_PID" || { cat "$RDK_BUILD_LOG" >&2; return 1; }
    docker/build.sh --binary >/dev/null
    SLUICE_BIN=$REL protocol-tests/librdkafka/run.sh expected
}

stage "cargo fmt --check" cargo fmt --all -- --check
stage "cargo clippy" cargo clippy --all-targets -- -D warnings
# Two test threads: the protocol tests each start brokers and clients of their own.
stage "cargo test" cargo test -- --test-threads=2
stage "other clients (kcat, Python)" env SLUICE_BIN=target/debug/sluice protocol-tests/clients/run.sh
# librdkafka 2.0.2's own test suite (Debian's source package): every test expected to pass,
# two at a time (RDK_PARALLEL), against the static release binary the Docker image is made of
# (one release build serves both).
stage "librdkafka test suite" librdkafka_suite
# Its security group and a test of each capability over SASL_PLAINTEXT (PLAIN) with the
# authorizer on: 0135 changes credentials after a failed login.
stage "librdkafka tests over SASL with ACLs" env SLUICE_SECURITY=sasl_plaintext SLUICE_BIN=$REL protocol-tests/librdkafka/run.sh security 0001 0012 0029 0040 0090 0099 0129
# Over mutual TLS (0097 loads the client certificate as PEM, DER and PKCS#12), and over
# SASL/OAUTHBEARER with OIDC tokens on three nodes (0126, on the libcurl build).
stage "librdkafka tests over mutual TLS" env SLUICE_SECURITY=ssl SLUICE_BIN=$REL protocol-tests/librdkafka/run.sh security 0001 0012 0040
stage "librdkafka tests over OAUTHBEARER (OIDC), 3 nodes" env SLUICE_NODES=3 SLUICE_SECURITY=sasl_oauthbearer RDK_BUILD_DIR=$RDK_CURL_DIR SLUICE_BIN=$REL protocol-tests/librdkafka/run.sh security 0001 0012
# The same suite's non-group tests against three nodes (each broker and controller): routing,
# coordinators and transaction markers across brokers (the whole expected set passes there
# too, in ~15 min: SLUICE_NODES=3 run.sh expected).
stage "librdkafka test suite, 3-node cluster" env SLUICE_NODES=3 SLUICE_BIN=$REL protocol-tests/librdkafka/run.sh basic admin idempotence transactions 0101
# Skips itself (with a message) where no Docker engine answers.
stage "docker image and compose" protocol-tests/docker/test.sh
# The same image as a three-node cluster (docker/cluster.yml); skips itself likewise.
stage "docker cluster" env SLUICE_TEST_SKIP_BUILD=1 protocol-tests/docker/cluster.sh
echo "all tests passed"
