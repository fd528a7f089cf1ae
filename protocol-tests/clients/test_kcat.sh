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
#
# Last, consumer groups through kcat -G (balanced consumer): two members split
# a topic's partitions and consume it exactly once, commits on close let a new
# member resume, and kcat -L still works afterwards.
set -euo pipefail

ADDR=$1
PORT=${ADDR##*:}
if ! command -v kcat >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null 2>&1 || {
        apt-get update -q >/dev/null 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null
    }
fi
TMP=$(mktemp -d /tmp/sluice-kcat.XXXXXX)
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

# 5. Balanced consumer groups (kcat -G: librdkafka's KafkaConsumer, classic
#    protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
#    OffsetFetch, LeaveGroup). kcat -G does not stop at the end of the
#    partitions unless -e is given, so the long-running members below are
#    bounded by `timeout` and stopped with SIGTERM, on which kcat closes the
#    consumer: a final offset commit and LeaveGroup.
T3=kcat-group-$SUF
G3=kcat-grp-$SUF
kc -L -t "$T3" >/dev/null || { show_err; fail "kcat -L -t $T3 (auto-create) failed"; }
# Last rebalance line of a member's stderr -> its partitions, or nothing if
# its last event was a revoke (or no rebalance yet).
assigned_of() {
    local last
    last=$(grep ' rebalanced ' "$1" | tail -n 1 || true)
    [[ $last == *"assigned:"* ]] || return 0
    grep -o "$T3 \[[0-9]*\]" <<<"$last" | grep -o '[0-9]*\]' | tr -d ']' | sort -n | tr '\n' ' '
}
member() { # name: start a member in the background, pid in $TMP/name.pid
    timeout 60 kcat -b "$ADDR" -G "$G3" -u -X auto.offset.reset=earliest -X heartbeat.interval.ms=500 \
        -f '%p %o %s\n' "$T3" >"$TMP/$1.out" 2>"$TMP/$1.err" &
    echo $! >"$TMP/$1.pid"
}
stop_member() { # name: SIGTERM through timeout to kcat, which closes cleanly
    local pid
    pid=$(cat "$TMP/$1.pid")
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
member m1
member m2
split=
for _ in $(seq 300); do
    a1=$(assigned_of "$TMP/m1.err") a2=$(assigned_of "$TMP/m2.err")
    if [[ -n $a1 && -n $a2 ]] && [[ $(echo $a1 $a2 | tr ' ' '\n' | sort -n | tr '\n' ' ') == "0 1 2 " ]]; then
        split=1
        break
    fi
    sleep 0.1
done
[[ -n $split ]] || {
    stop_member m1; stop_member m2
    fail "kcat -G: two members did not split $T3's 3 partitions in 30 s: m1 [$a1] m2 [$a2];" \
        "m1: $(tail -n 3 "$TMP/m1.err" | tr '\n' ' ') m2: $(tail -n 3 "$TMP/m2.err" | tr '\n' ' ')"
}
ok "kcat -G: two members split the 3 partitions: m1 [${a1% }], m2 [${a2% }]"

for i in $(seq 1 90); do printf 'g%d:v%d\n' "$((i % 9))" "$i"; done >"$TMP/in3"
kc -P -t "$T3" -K: <"$TMP/in3" || { show_err; fail "kcat -P to $T3 failed"; }
for _ in $(seq 300); do
    (($(cat "$TMP/m1.out" "$TMP/m2.out" | wc -l) >= 90)) && break
    sleep 0.1
done
sleep 1 # time for any redelivery to show up
stop_member m1
stop_member m2
n=$(cat "$TMP/m1.out" "$TMP/m2.out" | wc -l)
((n == 90)) || fail "kcat -G: the two members consumed $n lines, produced 90"
cmp -s <(cut -d: -f2 "$TMP/in3" | sort) <(cat "$TMP/m1.out" "$TMP/m2.out" | cut -d' ' -f3 | sort) ||
    fail "kcat -G: consumed values differ from those produced"
dup=$(cat "$TMP/m1.out" "$TMP/m2.out" | cut -d' ' -f1,2 | sort | uniq -d | head -n 3)
[[ -z $dup ]] || fail "kcat -G: partition/offset consumed twice: $dup"
for m in m1 m2; do
    want=$(if [[ $m == m1 ]]; then echo "$a1"; else echo "$a2"; fi)
    got=$(cut -d' ' -f1 "$TMP/$m.out" | sort -un | tr '\n' ' ')
    for p in $got; do
        [[ " $want" == *" $p "* ]] || fail "kcat -G: $m consumed partition $p outside its assignment [$want]"
    done
done
ok "kcat -G: 90 lines consumed exactly once across both members, each from its own partitions"

# The members committed on close: the group resumes after what they consumed.
# (No -o here: in -G mode kcat's -o overrides the committed offsets.)
for i in $(seq 91 120); do printf 'g%d:v%d\n' "$((i % 9))" "$i"; done >"$TMP/in4"
kc -P -t "$T3" -K: <"$TMP/in4" || { show_err; fail "kcat -P to $T3 failed"; }
kc -G "$G3" -e -X auto.offset.reset=earliest -f '%s\n' "$T3" >"$TMP/out4" ||
    { show_err; fail "kcat -G -e (resume) failed"; }
cmp -s <(cut -d: -f2 "$TMP/in4" | sort) <(sort "$TMP/out4") ||
    fail "kcat -G resume: expected exactly the 30 new lines, got $(wc -l <"$TMP/out4"):" \
        "$(head -n 3 "$TMP/out4" | tr '\n' ' ')"
kc -G "$G3" -e -X auto.offset.reset=earliest -f '%s\n' "$T3" >"$TMP/out5" ||
    { show_err; fail "kcat -G -e (nothing left) failed"; }
[[ ! -s $TMP/out5 ]] || fail "kcat -G: a member after everything was committed got $(wc -l <"$TMP/out5") lines"
ok "kcat -G -e: a new member resumes at the committed offsets (only the 30 new lines), then nothing"

# Metadata still fine with the group machinery (and its offsets topic) in place.
kc -L >"$TMP/list2" || { show_err; fail "kcat -L after the group tests failed"; }
grep -q '^ 1 brokers:' "$TMP/list2" && grep -q "topic \"$T3\" with 3 partitions" "$TMP/list2" ||
    fail "kcat -L after the group tests: $(head -n 5 "$TMP/list2")"
ok "kcat -L still lists the broker and $T3"
