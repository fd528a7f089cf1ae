#!/usr/bin/env bash
# Debian's stock kcat against a Sluice broker.
#
#   protocol-tests/clients/test_kcat.sh HOST:PORT
#
# Why stock kcat: it links Debian's librdkafka1 2.0.2, an old librdkafka that
# many deployed tools still use. Versions before 2.2.0 misparse unknown
# KIP-482 tagged fields in responses (they skip one byte too few; fixed
# upstream by confluentinc/librdkafka PR 4278), so this test fails if the
# broker puts tagged fields into a response such a client reads, e.g.
# ApiVersions v3. Real Kafka works with these clients, so must we.
#
# Topics here are auto-created by Metadata (the broker's num.partitions; run.sh
# starts it with 3), because kcat has no admin commands.
set -euo pipefail

ADDR=$1
PORT=${ADDR##*:}
if ! command -v kcat >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null 2>&1 || {
        apt-get update -q >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null
    }
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SUF=$$-$RANDOM

fail() {
    echo "  FAILED: $*"
    exit 1
}
ok() { echo "  ok: $*"; }
# kcat with a bound on every call (it would wait forever on a broker that never
# answers) and the client's own errors kept for the failure message.
kc() { timeout 30 kcat -b "$ADDR" "$@" 2>>"$TMP/stderr"; }
show_err() { tail -n 5 "$TMP/stderr" | sed 's/^/    kcat: /'; }

echo "  info: $(kcat -V 2>&1 | grep -i 'librdkafka' | head -n1)"

# 1. Metadata. Ask for one topic so it is auto-created with the broker's
#    num.partitions, then check the listing names our broker and that topic.
T1=kcat-order-$SUF
kc -L -t "$T1" >/dev/null || { show_err; fail "kcat -L -t $T1 (auto-create) failed"; }
for _ in $(seq 50); do
    kc -L >"$TMP/list" || { show_err; fail "kcat -L failed"; }
    grep -q "topic \"$T1\" with 3 partitions" "$TMP/list" && break
    sleep 0.2
done
grep -q '^ 1 brokers:' "$TMP/list" || fail "kcat -L: expected exactly one broker: $(cat "$TMP/list")"
grep -Eq "^  broker [0-9]+ at [^ ]+:$PORT( \(controller\))?\$" "$TMP/list" ||
    fail "kcat -L: broker not listed at port $PORT: $(head -n 5 "$TMP/list")"
grep -q "topic \"$T1\" with 3 partitions" "$TMP/list" ||
    fail "kcat -L: topic $T1 not listed with 3 partitions: $(cat "$TMP/list")"
leaders=$(grep -c 'partition [0-2], leader [0-9]' "$TMP/list" || true)
((leaders >= 3)) || fail "kcat -L: partitions without a leader: $(grep partition "$TMP/list")"
ok "kcat -L lists the broker at :$PORT and $T1 with 3 partitions and leaders"

# 2. Exact round trip on one partition: same lines, same order.
for i in $(seq 1 100); do printf 'key-%d:value %d with spaces, and: a colon\n' "$i" "$i"; done >"$TMP/in"
kc -P -t "$T1" -p 0 -K: <"$TMP/in" || { show_err; fail "kcat -P -p 0 failed"; }
kc -C -t "$T1" -p 0 -e -o beginning -f '%k:%s\n' >"$TMP/out" || { show_err; fail "kcat -C -p 0 failed"; }
cmp -s "$TMP/in" "$TMP/out" ||
    fail "partition 0 round trip differs: $(diff "$TMP/in" "$TMP/out" | head -n 6)"
kc -C -t "$T1" -p 0 -e -o beginning -f '%o\n' >"$TMP/offs" || { show_err; fail "kcat -C offsets failed"; }
cmp -s <(seq 0 99) "$TMP/offs" || fail "partition 0 offsets are not 0..99: $(head -n 3 "$TMP/offs" | tr '\n' ' ')"
ok "100 keyed lines to partition 0 come back identical, offsets 0..99"

# 3. Keyed lines through kcat's partitioner over 3 partitions: every line comes
#    back exactly once, each partition keeps produce order, a key never
#    appears on two partitions.
T2=kcat-keys-$SUF
for i in $(seq 1 100); do printf 'k%d:v%d\n' "$((i % 10))" "$i"; done >"$TMP/in2"
kc -P -t "$T2" -K: <"$TMP/in2" || { show_err; fail "kcat -P (partitioner) failed"; }
: >"$TMP/all"
for p in 0 1 2; do
    kc -C -t "$T2" -p "$p" -e -o beginning -f '%k:%s\n' >"$TMP/p$p" || { show_err; fail "kcat -C -p $p failed"; }
    # Produce order within the partition = the input filtered to its lines.
    grep -Fxf "$TMP/p$p" "$TMP/in2" >"$TMP/want$p" || true
    cmp -s "$TMP/want$p" "$TMP/p$p" || fail "partition $p out of order: $(diff "$TMP/want$p" "$TMP/p$p" | head -n 4)"
    cut -d: -f1 "$TMP/p$p" | sort -u | sed "s/\$/ $p/" >>"$TMP/keys"
    cat "$TMP/p$p" >>"$TMP/all"
done
cmp -s <(sort "$TMP/in2") <(sort "$TMP/all") ||
    fail "3-partition round trip differs (sorted): $(diff <(sort "$TMP/in2") <(sort "$TMP/all") | head -n 6)"
dups=$(cut -d' ' -f1 "$TMP/keys" | sort | uniq -d)
[[ -z $dups ]] || fail "keys on more than one partition: $dups"
# Consuming all partitions at once (no -p) must reach the end of each and stop.
kc -C -t "$T2" -e -o beginning -f '%k:%s\n' >"$TMP/allp" || { show_err; fail "kcat -C (all partitions) failed"; }
cmp -s <(sort "$TMP/in2") <(sort "$TMP/allp") || fail "kcat -C over all partitions differs"
ok "100 keyed lines over 3 partitions: complete, per-partition order, stable key->partition"

# 4. Headers and a null value (kcat -Z sends an empty value as NULL).
printf 'hk:\n' | kc -P -t "$T1" -p 1 -K: -Z -H trace=abc -H empty= ||
    { show_err; fail "kcat -P with headers failed"; }
kc -C -t "$T1" -p 1 -e -o beginning -f '%k|%S|%h\n' >"$TMP/h" || { show_err; fail "kcat -C headers failed"; }
[[ $(cat "$TMP/h") == 'hk|-1|trace=abc,empty=' ]] ||
    fail "headers/null value round trip: got '$(cat "$TMP/h")', want 'hk|-1|trace=abc,empty='"
ok "headers and a null value survive"
