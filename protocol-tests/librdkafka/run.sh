#!/usr/bin/env bash
# Run librdkafka 2.0.2's own regression tests (Debian's source package, built by build.sh)
# against a Sluice broker that this script starts and stops.
#
#   protocol-tests/librdkafka/run.sh TEST...
#
# TEST: a number (12 or 0012), a range (30-41), a group from expected.txt (basic, offsets,
# groups, compression, admin, idempotence, transactions, security, multibroker, kafka-cli),
# `expected` (every test expected.txt expects to pass) or `all` (every test in expected.txt).
#
# Prints `PASS|FAIL|SKIP NNNN name` per test (with the time, and for FAIL/SKIP the reason and,
# when expected.txt says the test is pending, why), then `N passed, M failed, K skipped`.
# Exit status: 1 if a test that expected.txt expects to pass did not pass, 2 on a usage or
# start-up error, else 0 (pending tests may fail).
#
# Environment (all optional):
#   SLUICE_BIN=target/release/sluice  broker binary (relative to the repository root)
#   SLUICE_NODES=1                    3: a cluster of 3 nodes (each broker and controller)
#   SLUICE_SET="k=v ..."              extra broker settings, each passed as --set k=v
#   SLUICE_SECURITY=plaintext         sasl_plaintext: one node whose only listener is
#                                     SASL_PLAINTEXT (PLAIN and SCRAM, users from the JAAS
#                                     line), with the authorizer on (StandardAuthorizer,
#                                     allow.everyone.if.no.acl.found=true); test.conf logs in
#                                     with PLAIN (what trivup writes for a SASL cluster);
#                                     ssl: one SSL listener with ssl.client.auth=required,
#                                     test.conf and trivup's SSL_* variables pointing at a CA
#                                     and a client certificate made here by openssl (PEM, DER,
#                                     PKCS#12; key password-protected) for 0097;
#                                     sasl_oauthbearer: SASL_PLAINTEXT with OAUTHBEARER, clients
#                                     fetching their token by OIDC from oidc_server.py (trivup's
#                                     VALID_/INVALID_/EXPIRED_TOKEN_OIDC_URL) for 0126, which
#                                     needs 3 nodes (replication factor 3) and a test-runner
#                                     built with libcurl (build.sh with RDK_CURL=1)
#                                     expected.txt's expectation `sasl`, `ssl` or
#                                     `sasl_oauthbearer` passes in that mode and skips in others
#   SLUICE_LOG=info                   the broker's RUST_LOG (e.g. debug); its log is split per
#                                     test into NNNN.broker.log next to the test's NNNN.log
#   RDK_BUILD_DIR=/tmp/sluice-rdk     build.sh's directory
#   RDK_OUT=DIR                       where test.conf, the logs and results.tsv go (default:
#                                     RDK_BUILD_DIR/runs/<time>); RDK_BUILD_DIR/last-run
#                                     points at the newest one (matrix.sh reads it)
#   RDK_TIMEOUT=180                   seconds one test may take before it is killed (the
#                                     slowest passing test takes ~65 s on 2 cores)
#   RDK_PARALLEL=2                    tests run at once against the broker(s); the longest
#                                     (by last-results.md) start first, and those SOLO
#                                     names below run alone. With more than 1, a
#                                     test's NNNN.broker.log also holds the lines of the
#                                     tests that ran beside it
#   RDK_BUDGET=1800                   seconds the whole run may take: once used up, the
#                                     remaining tests are not started and count as FAIL
#                                     (0: no limit). `expected` takes ~13 min on 2 cores
#   RDK_QUICK=auto                    auto: quick mode (test-runner -Q: fewer messages) except
#                                     for the tests whose quick mode drops scenarios, not just
#                                     messages (QUICK_DROPS_CASES below); 1: -Q always; 0: never
#   TEST_KAFKA_VERSION=3.9.0          Kafka version the tests take the broker to be (see below)
#   TEST_SCENARIO=default             `noautocreate` runs 0107, 0111 and two 0045 cases; start
#                                     the broker with SLUICE_SET=auto.create.topics.enable=false
#   RDK_CONF="k=v\n..."               extra test.conf lines (client properties, test.* keys)
#   RDK_ARGS="..."                    extra test-runner arguments (e.g. -E: no sockem tests)
#   TEST_DEBUG=broker,protocol        librdkafka debug contexts into the per-test logs
#
# TEST_KAFKA_VERSION: the suite never uses it to choose protocol versions (librdkafka reads
# ApiVersions); it only skips tests above/below a version and picks expectations. The
# newest version 2.0.2's suite distinguishes is 3.1 (0126); anything >= 3.1 gives identical
# behaviour. Sluice targets Kafka 4.x semantics, so we claim the last 3.x release, 3.9.0:
# every version-gated case runs (0081's group-offset admin tests from 2.4, 0103's KIP-360
# expectations from 2.5, kafka-topics.sh --bootstrap-server from 3.0).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
EXPECTED=$HERE/expected.txt
BUILD_DIR=${RDK_BUILD_DIR:-/tmp/sluice-rdk}
BIN=${SLUICE_BIN:-target/release/sluice}
[[ $BIN == /* ]] || BIN=$ROOT/$BIN
TIMEOUT=${RDK_TIMEOUT:-180}
BUDGET=${RDK_BUDGET:-1800}
QUICK=${RDK_QUICK:-auto}
PARALLEL=${RDK_PARALLEL:-2}
[[ $PARALLEL =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: RDK_PARALLEL must be a positive number" >&2; exit 2; }
KVER=${TEST_KAFKA_VERSION:-3.9.0}
SCENARIO=${TEST_SCENARIO:-default}
# Tests whose quick mode skips whole sub-tests (SUB_TEST() rather than SUB_TEST_QUICK(), or
# an early return), not only message counts: they always run in full mode.
# Tests that run with no other beside them when RDK_PARALLEL > 1: bound to timings that another
# test's load can push over (0102's max.poll.interval phase failed in the first parallel run,
# beside other group tests; 0049, 0055, 0059, 0061 and 0086 are the timing-bound ones retried
# below).
SOLO=" 0049 0055 0059 0061 0086 0102 "
QUICK_DROPS_CASES=" 0018 0019 0022 0026 0030 0045 0055 0061 0081 0082 0094 0098 0102 0103 0113 0122 0126 0132 0137 "

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
die() { echo "run.sh: $*" >&2; exit 2; }
(($#)) || usage
[[ $1 == -h || $1 == --help ]] && usage
[[ -f $EXPECTED ]] || die "missing $EXPECTED"

TESTS_DIR=$(ls -d "$BUILD_DIR"/librdkafka-*/tests 2>/dev/null | sort -V | tail -n1)
[[ -n $TESTS_DIR && -x $TESTS_DIR/test-runner ]] ||
    die "no test-runner under $BUILD_DIR: run protocol-tests/librdkafka/build.sh first"
SRC_DIR=$(dirname "$TESTS_DIR")
[[ -x $BIN ]] || die "no broker binary at $BIN (cargo build --release)"

# --- which tests ------------------------------------------------------------------------
# expected.txt rows: NNNN name group expectation [reason...]; '#' starts a comment.
rows() { sed 's/#.*//' "$EXPECTED" | awk 'NF >= 4'; }
field() { rows | awk -v t="$1" -v f="$2" '$1 == t { print $f; exit }'; }
# `cluster`: must pass against a cluster (SLUICE_NODES > 1), pending on one node (the test
# needs several brokers, e.g. replication factor 3).
expectation_of() {
    local e
    e=$(field "$1" 4)
    if [[ $e == cluster ]]; then
        if ((${SLUICE_NODES:-1} > 1)); then e=pass; else e=pending; fi
    fi
    # A mode's own tests: `sasl` is sasl_plaintext's.
    case $e in
        sasl | ssl | sasl_oauthbearer)
            [[ $e == sasl ]] && e=sasl_plaintext
            if [[ ${SLUICE_SECURITY:-plaintext} == "$e" ]]; then e=pass; else e=skip; fi ;;
    esac
    echo "$e"
}
reason_of() { rows | awk -v t="$1" '$1 == t { $1 = $2 = $3 = $4 = ""; sub(/^ +/, ""); print; exit }'; }
expand() {
    local a=$1 lo hi
    case $a in
        expected) rows | awk -v n="${SLUICE_NODES:-1}" -v s="${SLUICE_SECURITY:-plaintext}" \
            '$4 == "pass" || ($4 == "cluster" && n > 1) || ($4 == "sasl" && s == "sasl_plaintext") || ($4 == s && s != "plaintext") { print $1 }' ;;
        all) rows | awk '{ print $1 }' ;;
        *[!0-9-]*) rows | awk -v g="$a" '$3 == g { print $1 }' | grep . || die "unknown group: $a" ;;
        *-*)
            lo=$((10#${a%-*})) hi=$((10#${a#*-}))
            ls "$TESTS_DIR" | sed -n 's/^\([0-9]\{4\}\)-.*\.cp\{0,2\}$/\1/p' | sort -u |
                while read -r t; do ((10#$t >= lo && 10#$t <= hi)) && echo "$t"; done ;;
        *) printf '%04d\n' "$((10#$a))" ;;
    esac
}
LIST=()
for a in "$@"; do
    out=$(expand "$a") || exit 2
    for t in $out; do
        [[ " ${LIST[*]} " == *" $t "* ]] || LIST+=("$t")
    done
done
((${#LIST[@]})) || die "no tests selected"

# --- output directory, broker -------------------------------------------------------------
OUT=${RDK_OUT:-$BUILD_DIR/runs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
ln -sfn "$OUT" "$BUILD_DIR/last-run"
DATA=$(mktemp -d "${TMPDIR:-/tmp}/sluice-rdk-data.XXXXXX")
BLOG=$OUT/broker.log
# SLUICE_NODES=3: a cluster of that many nodes on loopback, each broker and controller (the
# KRaft form of the README), instead of one broker; every node logs to broker.log.
NODES=${SLUICE_NODES:-1}
SECURITY=${SLUICE_SECURITY:-plaintext}
case $SECURITY in
    plaintext) ;;
    sasl_plaintext | ssl)
        ((NODES == 1)) || { echo "run.sh: SLUICE_SECURITY=$SECURITY needs one node" >&2; exit 2; } ;;
    # On several nodes the brokers replicate over a PLAINTEXT listener of their own (INTERNAL).
    sasl_oauthbearer) ;;
    *) echo "run.sh: SLUICE_SECURITY is plaintext, sasl_plaintext, ssl or sasl_oauthbearer, not $SECURITY" >&2; exit 2 ;;
esac
# ssl: a CA, the broker's PEM keystore (localhost, 127.0.0.1) and a client certificate in the
# encodings 0097 loads, with trivup's variable names; kept with the run's logs. Certificates
# are X.509 v3 (extensions given): rustls, like browsers, refuses v1 ones.
PKI=$OUT/pki SSL_PASSWORD=use_strong_password
declare -a SSL_ENV=()
make_pki() {
    mkdir -p "$PKI"
    local o=(-days 30)
    (
        cd "$PKI" || exit 1
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem "${o[@]}" -subj /CN=sluice-rdk-ca 2>/dev/null &&
        openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem "${o[@]}" -subj /CN=sluice-rdk-other-ca 2>/dev/null &&
        cat ca.pem other-ca.pem >all-cas.pem &&
        openssl x509 -in ca.pem -outform DER -out ca.der &&
        openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj /CN=localhost 2>/dev/null &&
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >broker.ext &&
        openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.crt "${o[@]}" -extfile broker.ext 2>/dev/null &&
        cat broker.key broker.crt >broker-keystore.pem &&
        openssl req -newkey rsa:2048 -keyout client.key -passout "pass:$SSL_PASSWORD" -out client.csr -subj /CN=client 2>/dev/null &&
        printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >client.ext &&
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem "${o[@]}" -extfile client.ext 2>/dev/null &&
        openssl x509 -in client.pem -outform DER -out client.der &&
        openssl pkey -in client.key -passin "pass:$SSL_PASSWORD" -outform DER -out client.key.der &&
        openssl pkcs12 -export -in client.pem -inkey client.key -certfile ca.pem -passin "pass:$SSL_PASSWORD" \
            -passout "pass:$SSL_PASSWORD" -out client.p12
    ) || { echo "run.sh: openssl could not make the test certificates (in $PKI)" >&2; exit 2; }
    SSL_ENV=(SSL_ca_pem="$PKI/ca.pem" SSL_ca_der="$PKI/ca.der" SSL_all_cas_pem="$PKI/all-cas.pem"
             SSL_pub_pem="$PKI/client.pem" SSL_pub_der="$PKI/client.der"
             SSL_priv_pem="$PKI/client.key" SSL_priv_der="$PKI/client.key.der"
             SSL_pkcs="$PKI/client.p12" SSL_password="$SSL_PASSWORD")
}
[[ $SECURITY == ssl ]] && make_pki
# sasl_oauthbearer: the token endpoint, for as long as the run.
OIDC_PID= OIDC_URL=
declare -a OIDC_ENV=()
if [[ $SECURITY == sasl_oauthbearer ]]; then
    python3 "$HERE/oidc_server.py" "$OUT/oidc.port" 2>>"$OUT/oidc.log" &
    OIDC_PID=$!
    for _ in $(seq 50); do [[ -s $OUT/oidc.port ]] && break; sleep 0.1; done
    [[ -s $OUT/oidc.port ]] || { echo "run.sh: oidc_server.py did not start (see $OUT/oidc.log)" >&2; exit 2; }
    OIDC_URL=http://127.0.0.1:$(cat "$OUT/oidc.port")
    OIDC_ENV=(VALID_OIDC_URL="$OIDC_URL/valid" INVALID_OIDC_URL="$OIDC_URL/invalid"
              EXPIRED_TOKEN_OIDC_URL="$OIDC_URL/expired")
fi
SASL_USER=testuser SASL_PASSWORD=testpass
declare -a NODE_PIDS=()
BROKER_PID=   # the first node's: the tests' "is the broker alive" check
stop_broker() {
    local pid
    for pid in "${NODE_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${NODE_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    NODE_PIDS=()
    BROKER_PID=
}
trap 'stop_broker; [[ -z ${OIDC_PID:-} ]] || kill "$OIDC_PID" 2>/dev/null; rm -rf "$DATA"' EXIT
trap 'exit 130' INT TERM

# All ports from one process, each socket held until every one is bound: ports picked one at a
# time (bind, close, bind again) can repeat, and two listeners of one node then collide.
free_ports() {
    python3 -c 'import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in held))' "$1"
}
read -ra ALL_PORTS <<<"$(free_ports $((3 * NODES)))"
((${#ALL_PORTS[@]} == 3 * NODES)) || { echo "run.sh: could not pick $((3 * NODES)) free ports" >&2; exit 2; }
PORTS=("${ALL_PORTS[@]:0:NODES}")
CPORTS=("${ALL_PORTS[@]:NODES:NODES}")
IPORTS=("${ALL_PORTS[@]:2*NODES:NODES}")
OAUTH_JAAS="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
BROKERS=$(printf '127.0.0.1:%s,' "${PORTS[@]}"); BROKERS=${BROKERS%,}
VOTERS=
for ((n = 1; n <= NODES; n++)); do VOTERS+="$n@127.0.0.1:${CPORTS[n-1]},"; done
VOTERS=${VOTERS%,}
# The broker upstream's tests run against: trivup's KafkaBrokerApp with tests/scenarios/
# default.json (num_partitions 4, auto-create on; replication factor 3 needs more brokers).
# trivup leaves group.initial.rebalance.delay.ms at Kafka's default, 3000, and the suite is
# written for it (librdkafka's own mock cluster copies it: "First join ... Same as
# group.initial.rebalance.delay.ms on the broker", src/rdkafka_mock_cgrp.c), so we pin 3000
# rather than 0: a first JoinGroup waits 3 s for more members, as the tests' timeouts expect.
# SLUICE_SET comes after these, so it can override them.
SETS=(--set num.partitions=4 --set auto.create.topics.enable=true
      --set group.initial.rebalance.delay.ms=3000)
for kv in ${SLUICE_SET:-}; do SETS+=(--set "$kv"); done
start_broker() {
    stop_broker
    echo "== $(date -u +%FT%TZ) starting $NODES x $BIN on $BROKERS ${SETS[*]}" >>"$BLOG"
    local n args
    for ((n = 1; n <= NODES; n++)); do
        if [[ $SECURITY == sasl_plaintext ]]; then
            args=(--set "listeners=SASL_PLAINTEXT://$BROKERS"
                  --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
                  --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"$SASL_USER\" password=\"$SASL_PASSWORD\" user_$SASL_USER=\"$SASL_PASSWORD\";"
                  --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
                  --set allow.everyone.if.no.acl.found=true)
        elif [[ $SECURITY == ssl ]]; then
            args=(--set "listeners=SSL://$BROKERS" --set "ssl.keystore.location=$PKI/broker-keystore.pem"
                  --set "ssl.truststore.location=$PKI/ca.pem" --set ssl.client.auth=required)
        elif [[ $SECURITY == sasl_oauthbearer ]] && ((NODES == 1)); then
            args=(--set "listeners=SASL_PLAINTEXT://$BROKERS" --set sasl.enabled.mechanisms=OAUTHBEARER
                  --set "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=$OAUTH_JAAS")
        elif [[ $SECURITY == sasl_oauthbearer ]]; then
            # shellcheck disable=SC2054 # the commas are inside one --set value
            args=(--node-id "$n" --set process.roles=broker,controller
                  --set "listeners=SASL_PLAINTEXT://127.0.0.1:${PORTS[n-1]},INTERNAL://127.0.0.1:${IPORTS[n-1]},CONTROLLER://127.0.0.1:${CPORTS[n-1]}"
                  --set "advertised.listeners=SASL_PLAINTEXT://127.0.0.1:${PORTS[n-1]},INTERNAL://127.0.0.1:${IPORTS[n-1]}"
                  --set listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
                  --set inter.broker.listener.name=INTERNAL --set sasl.enabled.mechanisms=OAUTHBEARER
                  --set "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=$OAUTH_JAAS"
                  --set controller.listener.names=CONTROLLER --set "controller.quorum.voters=$VOTERS")
        elif ((NODES == 1)); then
            args=(--listen "$BROKERS")
        else
            # shellcheck disable=SC2054 # the commas are inside one --set value
            args=(--node-id "$n" --set process.roles=broker,controller
                  --set "listeners=PLAINTEXT://127.0.0.1:${PORTS[n-1]},CONTROLLER://127.0.0.1:${CPORTS[n-1]}"
                  --set "advertised.listeners=PLAINTEXT://127.0.0.1:${PORTS[n-1]}"
                  --set controller.listener.names=CONTROLLER --set "controller.quorum.voters=$VOTERS"
                  # Each node in a rack of its own, named as trivup names them (0101
                  # fetch-from-follower gives its consumer the client.rack RACK<id>).
                  --set "broker.rack=RACK$n"
                  --set replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector)
        fi
        RUST_LOG=${SLUICE_LOG:-${RUST_LOG:-info}} \
            "$BIN" serve "${args[@]}" --data-dir "$DATA/n$n" "${SETS[@]}" >>"$BLOG" 2>&1 &
        NODE_PIDS+=($!)
    done
    BROKER_PID=${NODE_PIDS[0]}
    local port up
    for _ in $(seq 300); do
        up=0
        for port in "${PORTS[@]}"; do
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && up=$((up + 1))
        done
        ((up == NODES)) && return 0
        for pid in "${NODE_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || break 2; done
        sleep 0.1
    done
    echo "run.sh: the broker did not start; end of $BLOG:" >&2
    tail -n 20 "$BLOG" >&2
    exit 2
}
start_broker

# What trivup (upstream's harness) writes, plus RDK_CONF.
{
    echo "bootstrap.servers=$BROKERS"
    if [[ $SECURITY == sasl_plaintext ]]; then
        echo "security.protocol=SASL_PLAINTEXT"
        echo "sasl.mechanism=PLAIN"
        echo "sasl.username=$SASL_USER"
        echo "sasl.password=$SASL_PASSWORD"
    elif [[ $SECURITY == ssl ]]; then
        echo "security.protocol=SSL"
        echo "ssl.ca.location=$PKI/ca.pem"
        echo "ssl.certificate.location=$PKI/client.pem"
        echo "ssl.key.location=$PKI/client.key"
        echo "ssl.key.password=$SSL_PASSWORD"
    elif [[ $SECURITY == sasl_oauthbearer ]]; then
        # Lower case: 0126 looks for "sasl" in it with strstr().
        echo "security.protocol=sasl_plaintext"
        echo "sasl.mechanism=OAUTHBEARER"
        echo "sasl.oauthbearer.method=oidc"
        echo "sasl.oauthbearer.client.id=sluice-rdk"
        echo "sasl.oauthbearer.client.secret=sluice-rdk-secret"
        echo "sasl.oauthbearer.scope=test"
        echo "sasl.oauthbearer.token.endpoint.url=$OIDC_URL/valid"
    else
        echo "security.protocol=PLAINTEXT"
    fi
    [[ -z ${RDK_CONF:-} ]] || printf '%b\n' "$RDK_CONF"
} >"$OUT/test.conf"

{
    echo "date=$(date -u +%FT%TZ)"
    echo "sluice=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "librdkafka=$(basename "$SRC_DIR" | sed 's/^librdkafka-//')"
    echo "kafka_version=$KVER"
    echo "scenario=$SCENARIO"
    echo "security=$SECURITY"
    echo "quick=$QUICK"
    echo "args=$*"
} >"$OUT/run.info"
echo "# librdkafka $(basename "$SRC_DIR" | sed 's/^librdkafka-//') tests against $BIN at $BROKERS;" \
     "TEST_KAFKA_VERSION=$KVER, scenario $SCENARIO, quick mode $QUICK; logs: $OUT"

# --- one test-runner per test, RDK_PARALLEL at a time ----------------------------------------
strip_colors() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g; s/\x1b(B//g'; }
RES=$OUT/results.tsv
printf 'test\tname\tresult\texpected\tseconds\treason\n' >"$RES"
RUN_START=$SECONDS
# run_one TEST: runs it (retrying once where noted below), prints its PASS/FAIL/SKIP line and
# appends its row to results.tsv. Runs in a subshell of its own when RDK_PARALLEL > 1.
# test_source TEST: sets src (its .c/.cpp file, empty if none) and name (e.g. produce_consume).
test_source() {
    src=$(ls "$TESTS_DIR/$1"-*.c "$TESTS_DIR/$1"-*.cpp 2>/dev/null | head -n1)
    name=${src##*/}; name=${name#*-}; name=${name%.c*}
}
run_one() {
    local t=$1 src name exp log attempt args blog_from t0 rc secs summary firstfail reason res note
    test_source "$t"
    exp=$(expectation_of "$t"); exp=${exp:-unlisted}
    log=$OUT/$t.log
    if [[ -z $src ]]; then
        echo "FAIL $t (no such test)"
        printf '%s\t\tFAIL\t%s\t0\tno such test\n' "$t" "$exp" >>"$RES"; return
    fi
    attempt=0
    while :; do
    attempt=$((attempt + 1))
    args=(-p1 -L)
    case $QUICK in
        1) args+=(-Q) ;;
        auto) [[ $QUICK_DROPS_CASES == *" $t "* ]] || args+=(-Q) ;;
    esac
    # shellcheck disable=SC2206
    [[ -z ${RDK_ARGS:-} ]] || args+=($RDK_ARGS)
    blog_from=$(stat -c %s "$BLOG")
    echo "== $(date -u +%FT%TZ) test $t" >>"$BLOG"
    t0=$(date +%s.%N)
    { (
        cd "$TESTS_DIR" || exit 99
        exec env -u CI -u KAFKA_VERSION -u KAFKA_PATH "${SSL_ENV[@]}" "${OIDC_ENV[@]}" \
            TESTS="$t" RDKAFKA_TEST_CONF="$OUT/test.conf" TEST_KAFKA_VERSION="$KVER" \
            TEST_SCENARIO="$SCENARIO" BROKERS="$BROKERS" TEST_REPORT="$OUT/$t.json" \
            LD_LIBRARY_PATH="$SRC_DIR/src:$SRC_DIR/src-cpp" \
            timeout -k 10 "$TIMEOUT" ./test-runner "${args[@]}"
    ) </dev/null >"$log" 2>&1; } 2>/dev/null    # 2>/dev/null: no "Aborted" job notices
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    tail -c +"$((blog_from + 1))" "$BLOG" | strip_colors >"$OUT/$t.broker.log"

    # test-runner's summary rows: "| 0012_produce_consume | PASSED | 2.0s | reason"
    summary=$(strip_colors <"$log" | awk -F'|' -v t="$t" '
        $2 ~ "^ *" t "_" && NF >= 5 {
            n = $2; s = $3; r = $5; gsub(/ /, "", n); gsub(/ /, "", s); sub(/^ +/, "", r)
            print n "\t" s "\t" r }')
    firstfail=$(strip_colors <"$log" | awk '/^### Test ".*" failed at /{ getline m; print m; exit }')
    reason=
    if grep -qP '\t(FAILED|RUNNING)\t' <<<"$summary"; then
        res=FAIL
        reason=$(awk -F'\t' '$2 == "FAILED" || $2 == "RUNNING" { print $1 ": " ($3 != "" ? $3 : "did not finish"); exit }' <<<"$summary")
    elif awk -v s="$secs" -v t="$TIMEOUT" 'BEGIN { exit !(s >= t) }'; then
        res=FAIL reason="killed after ${TIMEOUT}s (RDK_TIMEOUT)${firstfail:+; first failure: $firstfail}"
    elif ((rc != 0)); then
        res=FAIL reason=${firstfail:-"test-runner exited with status $rc"}
        ((rc > 128)) && reason="$reason (test-runner killed by signal $((rc - 128)))"
    elif grep -qP '\tPASSED\t' <<<"$summary"; then
        res=PASS
    elif [[ -n $summary ]]; then
        res=SKIP reason=$(awk -F'\t' '$3 != "" { print $3; exit }' <<<"$summary")
        [[ -n $reason ]] || reason="test-runner skipped it silently (another TEST_SCENARIO, or local only)"
        [[ $reason == *"negative test flags"* ]] &&
            reason="flagged by test.c as a known issue, local or sockem test: $reason"
    else
        res=SKIP reason="not run in scenario $SCENARIO, or a local-only test"
    fi
    kill -0 "$BROKER_PID" 2>/dev/null || {
        res=FAIL reason="the broker exited during the test (see $OUT/$t.broker.log)${reason:+; $reason}"
    }
    # A test that ran out of its own time limit gets one more try, reported as such: some of
    # librdkafka's tests are timing-bound (0059 spends 9-10 s of its 10 s limit in
    # librdkafka 2.0.2's 1 s fetcher wake-ups after each seek, whatever the broker does;
    # 0049's 10 s consumer_poll() limit after its 10 s network outage covers librdkafka's
    # reconnect backoff, which has doubled to 3-10 s with jitter by then, plus the 3 s initial
    # rebalance delay of the rejoin: 5 s in most runs, over 10 s in about one in twenty).
    # 0061 compares each statistics event's consumer_lag_stored with the lag the application
    # computed after its last consume(); an event generated just before the offset was stored
    # but served after reads one more (seen once in a loaded full run; 3 of 3 alone pass). The
    # retry meets the same timing: on 2026-12-05 both attempts of one full run got their first
    # message 1 ms after a stats tick and failed, so expected.txt now keeps 0061 out of the gate.
    # 0055 bounds each case's average produce latency by linger.ms + 5 ms and counts broker
    # wake-ups in a 100 ms statistics callback; acks=all waits for the fsync (1-8 ms on this
    # disk under load): 8 of 8 passed on 2026-12-03/04 (6 alone, 2 in three-node runs);
    # 2 of 9 failed on a loaded machine before.
    # 0086's remote case expects its first ProduceRequest to carry messages 0-9 (batch.num.messages
    # 10, linger.ms 500) and purges while it is in flight; in about one run in twelve librdkafka
    # sends message 0 alone, and 1-9 are purged from the queue instead. The broker only answers
    # Metadata and the stalled request: the same rate against the build before the writer and
    # snapshot-read changes (1 failure in 12 runs each).
    # 0102 (run alone) waits 1 s at a time for each rebalance event of its two static members
    # around a max.poll.interval.ms exit; when the coordinator's session-expiry rebalance lands
    # between two of those waits, the surviving member sees a revoke where it expected none.
    # On 2026-12-06 it failed 2 of 4 runs against the static release build (once in the test
    # command) and passed 8 of 8 against plain release builds, 4 of them of the build before
    # share groups; it failed once in an early parallel run before.
    if [[ $res == FAIL && $attempt == 1 && ($reason == *"timed out"* || $reason == *"() timeout"* ||
        ($t == 0102 && $reason == *"Expected rebalance event"*) ||
        ($t == 0061 && $reason == *"Stats consumer_lag"*) ||
        ($t == 0055 && ($reason == *"is outside range"* || $reason == *"wakeups out of range"*)) ||
        ($t == 0086 && $reason == *"Purged in queue"*)) ]]; then
        echo "RETRY $t $name (${secs}s): $reason"
        continue
    fi
    break
    done
    note=
    case $exp in
        pass) [[ $res == PASS ]] || note=" [expected to pass; log: $log]" ;;
        pending) if [[ $res == PASS ]]; then note=" [pending in expected.txt: now passes]"
                 else note=" [pending: $(reason_of "$t")]"; fi ;;
        skip) [[ $res == SKIP ]] || note=" [expected.txt: skip]" ;;
        unlisted) note=" [not in expected.txt]" ;;
    esac
    if [[ $res == PASS ]]; then
        echo "PASS $t $name (${secs}s)$note"
    else
        echo "$res $t $name (${secs}s): $reason$note"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$name" "$res" "$exp" "$secs" "$(tr '\t\n' '  ' <<<"$reason")" >>"$RES"
}

# With RDK_PARALLEL > 1 the longest tests (seconds in last-results.md) start first, so that
# none of them is left running alone at the end.
if ((PARALLEL > 1)); then
    mapfile -t LIST < <(for t in "${LIST[@]}"; do
        s=$(awk -F'|' -v t="$t" '$2 ~ "^ *" t " *$" { if (match($5, /[0-9.]+ s\)/)) print substr($5, RSTART, RLENGTH - 3); exit }' \
            "$HERE/last-results.md" 2>/dev/null)
        echo "${s:-0} $t"
    done | sort -s -k1,1 -g -r | awk '{ print $2 }')
fi
declare -a JOBS=()   # the running tests' subshells (the broker nodes are jobs too: not `wait`)
reap() {
    local pid live=()
    for pid in "${JOBS[@]}"; do kill -0 "$pid" 2>/dev/null && live+=("$pid"); done
    JOBS=("${live[@]}")
}
for t in "${LIST[@]}"; do
    if ((BUDGET > 0 && SECONDS - RUN_START >= BUDGET)); then
        test_source "$t"
        reason="not started: the run used up RDK_BUDGET (${BUDGET}s)"
        echo "FAIL $t $name: $reason"
        printf '%s\t%s\tFAIL\t%s\t0\t%s\n' "$t" "$name" "$(expectation_of "$t")" "$reason" >>"$RES"; continue
    fi
    # A broker that died (reported as a failure of the test it died in) is restarted once the
    # tests still running against it have ended.
    alive=1
    for pid in "${NODE_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || alive=0; done
    if ((!alive)); then
        ((${#JOBS[@]} == 0)) || wait "${JOBS[@]}"
        JOBS=()
        start_broker
    fi
    if ((PARALLEL > 1)) && [[ $SOLO == *" $t "* ]]; then
        ((${#JOBS[@]} == 0)) || wait "${JOBS[@]}"
        JOBS=()
        run_one "$t"
    elif ((PARALLEL > 1)); then
        reap
        while ((${#JOBS[@]} >= PARALLEL)); do wait -n "${JOBS[@]}"; reap; done
        run_one "$t" &
        JOBS+=($!)
    else
        run_one "$t"
    fi
done
((${#JOBS[@]} == 0)) || wait "${JOBS[@]}"

# The tallies, from results.tsv (the tests may have run in subshells).
read -r passed failed skipped < <(awk -F'\t' 'NR > 1 { n[$3]++ } END { print n["PASS"] + 0, n["FAIL"] + 0, n["SKIP"] + 0 }' "$RES")
mapfile -t BAD < <(awk -F'\t' 'NR > 1 && $4 == "pass" && $3 != "PASS" { print $1 }' "$RES" | sort)
mapfile -t NEWPASS < <(awk -F'\t' 'NR > 1 && $4 == "pending" && $3 == "PASS" { print $1 }' "$RES" | sort)
echo "$passed passed, $failed failed, $skipped skipped in $((SECONDS - RUN_START))s"
((${#NEWPASS[@]} == 0)) || echo "pending in expected.txt but passed (update it): ${NEWPASS[*]}"
if ((${#BAD[@]})); then
    echo "expected to pass but did not: ${BAD[*]}"
    exit 1
fi
exit 0
