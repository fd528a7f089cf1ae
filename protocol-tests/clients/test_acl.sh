#!/usr/bin/env bash
# ACLs through real clients, with Kafka 4.x (StandardAuthorizer) semantics, against a broker of
# its own: one SASL_PLAINTEXT listener, PLAIN users admin/alice/bob from the JAAS line,
# authorizer.class.name=StandardAuthorizer, super.users=User:admin, and
# allow.everyone.if.no.acl.found at its default (false: no binding, no access).
# The clients' steps are in acl_clients.py (its docstring lists the bindings). Checks:
#  1. kafka-python's KafkaAdminClient as admin: create_acls of 5 bindings (a PREFIXED WRITE,
#     a GROUP READ, LITERAL READs, a DENY ALL); describe_acls with an ANY filter and narrower ones
#     (LITERAL, MATCH, by permission, by type, by principal) returns exactly what each should;
#     delete_acls of one binding returns it, and describing again shows it gone. alice, not a
#     super user, is refused all three calls (CLUSTER_AUTHORIZATION_FAILED).
#  2. the super user needs no binding: admin creates orders-1, orders-secret, private, produces
#     to each and consumes in a group.
#  3. bob (no binding) producing to orders-1: TOPIC_AUTHORIZATION_FAILED, nothing appended.
#  4. alice (PREFIXED WRITE orders-) produces to orders-1, also idempotently (KIP-679); to
#     orders-secret the DENY wins: TOPIC_AUTHORIZATION_FAILED, nothing appended.
#  5. bob consuming orders-1 in g-bob: GROUP_AUTHORIZATION_FAILED, no record; alice consumes in
#     g-alice and commits; her commit for private (no READ there) is TOPIC_AUTHORIZATION_FAILED.
#     (Fetch itself is not seen here: a client that may not describe a topic never learns its
#     leader, so librdkafka and kafka-python never send the Fetch; protocol-tests/acl.rs sends
#     one in raw frames.)
#  6. Metadata leaks nothing: bob's lists no topic, alice's only orders-1; a topic one may not
#     describe is TOPIC_AUTHORIZATION_FAILED whether it exists or not.
#  7. the bindings survive a restart (after SIGTERM, then after kill -9) on the same data dir:
#     describe_acls returns them and they are still enforced.
# Producing, consuming and Metadata use confluent-kafka, whose errors carry Kafka's codes.
#
#   protocol-tests/clients/test_acl.sh          (SLUICE_BIN, SLUICE_PYTHON from run.sh)
set -euo pipefail

NAME=acl
CLIENTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/acl_clients.py
source "$(dirname "${BASH_SOURCE[0]}")/broker_common.sh"

P=$(port)
ADDR=127.0.0.1:$P
JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
# The issue's command line, plus one partition per topic (the offsets checked are partition 0's)
# and no initial rebalance delay (the consumer groups settle at once).
start_broker() {
    "$BIN" serve --data-dir "$TMP/data" \
        --set "listeners=SASL_PLAINTEXT://$ADDR" \
        --set sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 \
        --set "listener.name.sasl_plaintext.plain.sasl.jaas.config=$JAAS" \
        --set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
        --set super.users=User:admin \
        --set num.partitions=1 --set group.initial.rebalance.delay.ms=0 >>"$TMP/broker.log" 2>&1 &
    PID=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$P") 2>/dev/null && return 0
        kill -0 "$PID" 2>/dev/null || fail "the broker did not start"
        sleep 0.1
    done
    fail "the broker did not listen on $ADDR within 10 s"
}
# stop_broker SIGNAL: the broker exits within 10 s of it (SIGTERM: a clean shutdown). The
# shell's "Killed" / "Terminated" notice for its job is kept out of the output.
stop_broker() {
    local gone=0
    {
        kill "-$1" "$PID"
        for _ in $(seq 100); do
            kill -0 "$PID" || { gone=1; break; }
            sleep 0.1
        done
        ((gone)) && wait "$PID"
    } 2>/dev/null || true
    ((gone)) || fail "the broker did not exit within 10 s of SIG$1"
    PID=
}
# step NAME [ARG...]: one acl_clients.py step, bounded; its last line of output is the ok line.
# A failure shows the step's exception and librdkafka's last log line (those start with %).
n=0
step() {
    n=$((n + 1))
    local out=step$n.out err=step$n.err rc=0
    timeout 40 "$PY" "$CLIENTS" "$ADDR" "$@" >"$out" 2>"$err" || rc=$?
    if ((rc)); then
        local last why log
        last=$(tail -n 1 "$out")
        why=$(grep -v -e '^ ' -e '^%' -e '^Traceback' "$err" | tail -n 2) || true
        log=$(grep '^%' "$err" | tail -n 1) || true
        ((rc == 124)) && why="timed out after 40 s${why:+; $why}"
        fail "$*:${last:+ $last}${why:+ $why}${log:+ (librdkafka: $log)}"
    fi
    ok "$(tail -n 1 "$out")"
}

start_broker
ok "broker with SASL_PLAINTEXT $ADDR and the StandardAuthorizer, super.users=User:admin"

# --- 1. the ACL admin calls (kafka-python) ---------------------------------------------------
step create-acls
step describe created
step delete-one
step describe kept
step not-super

# --- 2. the super user -------------------------------------------------------------------------
step admin-topics

# --- 3./4. producing -------------------------------------------------------------------------------
step bob-produce
step alice-produce 2
step alice-idempotent
step alice-secret

# --- 5. consuming and committing -------------------------------------------------------------------
step bob-consume
step alice-consume

# --- 6. Metadata -------------------------------------------------------------------------------
step metadata

# --- 7. restarts -------------------------------------------------------------------------------
# A clean shutdown, then a crash: the bindings are in the metadata log either way.
for sig in TERM KILL; do
    stop_broker "$sig"
    start_broker
    ok "broker restarted on the same data dir and port after SIG$sig"
    step describe kept
    step alice-produce 1
    step bob-produce
done
kill -0 "$PID" 2>/dev/null || fail "the broker died"
