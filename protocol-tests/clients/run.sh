#!/usr/bin/env bash
# Real Kafka clients against a real Sluice process: the compatibility check that
# unit tests cannot give (each client has its own idea of the protocol).
#
#   protocol-tests/clients/run.sh [TEST...]     TEST: confluent kafka_python aiokafka kcat
#                                               idempotence transactions txn_checker
#                                               quixstreams sarama java ssl sasl acl
#                                               quotas (default: all)
# Environment:
#   SLUICE_BIN=target/release/sluice   the broker binary (build it first:
#                                      cargo build --release)
#   SLUICE_VENV=.venv                  virtualenv for the Python clients
#                                      (created and filled on first use; Quix
#                                      Streams gets its own, $SLUICE_VENV/quix)
#   SLUICE_KEEP=1                      keep the data dir and broker log
#
# Prints PASS/FAIL per test and a summary line; exits non-zero on any failure.
# Paths are relative to the repository root.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"
BIN=${SLUICE_BIN:-target/release/sluice}
VENV=${SLUICE_VENV:-.venv}
TESTS=("$@")
((${#TESTS[@]})) || TESTS=(confluent kafka_python aiokafka kcat idempotence transactions txn_checker quixstreams sarama java ssl sasl acl quotas)

# Exact versions, so a client release cannot change the result behind our
# back; bump deliberately. (confluent-kafka bundles its own librdkafka.)
PIP_PKGS=(confluent-kafka==2.16.1 kafka-python==3.0.12 aiokafka==0.14.0)
# Quix Streams requires confluent-kafka < 2.13, so it lives in a virtualenv of
# its own inside $VENV; pinned with the confluent-kafka it resolves to.
QUIX_PKGS=(quixstreams==3.28.1 confluent-kafka==2.12.2)

[[ -x $BIN ]] || { echo "run.sh: no broker binary at $BIN (cargo build --release)" >&2; exit 2; }

# --- Python clients ----------------------------------------------------------
if [[ ! -x $VENV/bin/python ]]; then
    echo "run.sh: creating virtualenv $VENV"
    python3 -m venv "$VENV"
fi
# pip is quiet and quick when everything is already at the pinned version.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}"
QUIX_VENV=$VENV/quix
if [[ " ${TESTS[*]} " == *" quixstreams "* ]]; then
    [[ -x $QUIX_VENV/bin/python ]] || python3 -m venv "$QUIX_VENV"
    "$QUIX_VENV/bin/python" -m pip install -q --disable-pip-version-check "${QUIX_PKGS[@]}"
fi

# --- broker ------------------------------------------------------------------
WORK=$(mktemp -d /tmp/sluice-clients.XXXXXX)
BROKER_PID=
cleanup() {
    if [[ -n $BROKER_PID ]] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    if [[ ${SLUICE_KEEP:-0} == 1 ]]; then
        echo "run.sh: kept $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Ask the kernel for a free port. Another process could take it before the
# broker binds, but on a test machine that race is rare, and the broker
# exiting at once shows up below as "did not start".
PORT=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$PORT
LOG=$WORK/broker.log
# auto.create.topics.enable stays at its default: the tests create topics
# explicitly through the admin APIs and must not be rescued by auto-creation
# (kcat's test relies on auto-creation and says so).
# group.initial.rebalance.delay.ms=0: a new group's first rebalance completes
# at once instead of waiting (Kafka's default 3000 ms) for more members, so the
# consumer-group tests settle quickly. group.min.session.timeout.ms stays at
# Kafka's 6000, which the tests' session timeouts respect.
# log.retention.check.interval.ms / log.cleaner.backoff.ms=200 (Kafka: 300000 /
# 15000): a lowered retention.ms or a compaction takes effect within the tests'
# waits instead of minutes later.
# transaction.abort.timed.out.transaction.cleanup.interval.ms=500 (Kafka: 10000):
# a transaction past its transaction.timeout.ms is aborted within half a second
# (the Quix Streams test waits on that after killing its application).
SERVE_ARGS=(--set num.partitions=3 --set group.initial.rebalance.delay.ms=0
    --set log.retention.check.interval.ms=200 --set log.cleaner.backoff.ms=200
    --set transaction.abort.timed.out.transaction.cleanup.interval.ms=500)
"$BIN" serve --listen "$ADDR" --data-dir "$WORK/data" "${SERVE_ARGS[@]}" >"$LOG" 2>&1 &
BROKER_PID=$!
# For tests that start (and kill -9) a broker of their own, with the same settings.
export SLUICE_BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
export SLUICE_SERVE_ARGS="${SERVE_ARGS[*]}"
export SLUICE_QUIX_PYTHON=$QUIX_VENV/bin/python
export SLUICE_PYTHON=$(cd "$VENV/bin" && pwd)/python

# Ready = accepts TCP connections (the log line alone would not prove the
# socket is bound to the address we chose).
ready=0
for _ in $(seq 100); do
    if ! kill -0 "$BROKER_PID" 2>/dev/null; then break; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then ready=1; break; fi
    sleep 0.1
done
if ((!ready)); then
    echo "run.sh: broker did not start on $ADDR; its log:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
fi
echo "run.sh: broker $BIN on $ADDR (pid $BROKER_PID, data $WORK/data)"

# --- tests -------------------------------------------------------------------
run_one() { # name -> exit status of the test
    case $1 in
        confluent | kafka_python | aiokafka | idempotence | transactions | txn_checker | quixstreams | quotas | sarama)
            timeout 180 "$VENV/bin/python" "$HERE/test_$1.py" "$ADDR" ;;
        kcat)
            timeout 180 bash "$HERE/test_kcat.sh" "$ADDR" ;;
        java) # Apache Kafka's Java client: this broker, then a three-node cluster of its own
            timeout 600 bash "$HERE/test_java.sh" "$ADDR" ;;
        ssl) # its own broker, with TLS listeners
            timeout 180 bash "$HERE/test_ssl.sh" ;;
        sasl) # its own broker, with SASL_PLAINTEXT and SASL_SSL listeners
            timeout 240 bash "$HERE/test_sasl.sh" ;;
        acl) # its own broker, SASL_PLAINTEXT with the StandardAuthorizer; restarts it
            timeout 240 bash "$HERE/test_acl.sh" ;;
        *)
            echo "unknown test $1" >&2; return 2 ;;
    esac
}

pass=0 fail=0 failed=()
for t in "${TESTS[@]}"; do
    echo "--- $t"
    rc=0
    run_one "$t" 2>&1 | sed 's/^/    /' || rc=$?
    # A test that took the broker down fails, and so would everything after it.
    if ((rc == 0)) && ! kill -0 "$BROKER_PID" 2>/dev/null; then
        echo "    broker process died during the test"
        rc=1
    fi
    if ((rc == 0)); then
        echo "PASS $t"; pass=$((pass + 1))
    else
        echo "FAIL $t (exit $rc)"; fail=$((fail + 1)); failed+=("$t")
    fi
done

# Broker-side panics or errors explain client failures; show them.
if grep -qiE 'panick|ERROR|WARN' "$LOG"; then
    echo "--- broker log: errors/panics/warnings"
    grep -iE -A3 'panick|ERROR|WARN' "$LOG" | head -n 40 | sed 's/^/    /'
fi
if ! kill -0 "$BROKER_PID" 2>/dev/null; then
    echo "--- broker exited early; last lines of its log:"
    tail -n 20 "$LOG" | sed 's/^/    /'
fi

echo "$pass passed, $fail failed"
((fail == 0)) || { echo "failed: ${failed[*]}"; exit 1; }
