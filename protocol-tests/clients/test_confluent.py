#!/usr/bin/env python3
"""confluent-kafka (librdkafka, bundled in the wheel) against a Sluice broker.

usage: test_confluent.py HOST:PORT

Admin (CreateTopics incl. error codes, DeleteTopics), keyed produce with
acks=all, non-group consumption by explicit assignment, ListOffsets through
watermarks / offsets_for_times / AdminClient.list_offsets. Every step checks
what the broker sent back; the first mismatch raises and exits non-zero.

The broker has no consumer groups or InitProducerId yet, so: no group-based
subscribe, no commits, enable.idempotence=false.
"""
import sys
import time
import uuid
from collections import defaultdict

from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition, TIMESTAMP_CREATE_TIME)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

ADDR = sys.argv[1]
N = 1000
PARTS = 3
TOPIC = f"cfk-{uuid.uuid4().hex[:8]}"
# Explicit CreateTime timestamps, strictly increasing in produce order, so
# offsets_for_times has exactly one right answer per message.
TS0 = int(time.time() * 1000) - 3_600_000


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def messages():
    """The N messages: (key, value, headers). Keys repeat (50 distinct) so the
    partitioner spreads them over all partitions; a few carry headers; one has
    a null key, one a null value (a tombstone)."""
    out = []
    for i in range(N):
        key = f"key-{i % 50}".encode()
        value = f"value-{i}-".encode() + b"x" * (i % 37)
        headers = None
        if i % 100 == 7:
            # Duplicate header names and an empty value are legal and must survive.
            headers = [("trace", f"t{i}".encode()), ("trace", b"second"), ("empty", b"")]
        if i == 500:
            key = None
        if i == 501:
            value = None
        out.append((key, value, headers))
    return out


def admin_checks(admin):
    fs = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTS, replication_factor=1)],
                             operation_timeout=10)
    fs[TOPIC].result(timeout=15)
    ok(f"CreateTopics {TOPIC} ({PARTS} partitions)")

    # Metadata: our one broker, and the topic with PARTS partitions, each led by it.
    deadline = time.time() + 10
    while True:
        md = admin.list_topics(timeout=10)
        t = md.topics.get(TOPIC)
        if t is not None and t.error is None and len(t.partitions) == PARTS and \
                all(p.leader >= 0 for p in t.partitions.values()):
            break
        expect(time.time() < deadline, f"topic not ready in metadata: {t and t.partitions}")
        time.sleep(0.2)
    expect(len(md.brokers) == 1, f"expected one broker, got {md.brokers}")
    b = next(iter(md.brokers.values()))
    expect(f"{b.host}:{b.port}" == ADDR or b.port == int(ADDR.rsplit(':', 1)[1]),
           f"broker advertises {b.host}:{b.port}, we connected to {ADDR}")
    expect(sorted(t.partitions) == list(range(PARTS)), f"partition ids {sorted(t.partitions)}")
    expect(all(p.leader == b.id and list(p.replicas) == [b.id] and list(p.isrs) == [b.id]
               for p in t.partitions.values()), "leader/replicas/isr should be the one broker")
    ok("Metadata: one broker, leaders, replicas, ISR")

    for bad in ("bad/name", "a" * 250, ".."):
        try:
            admin.create_topics([NewTopic(bad, num_partitions=1, replication_factor=1)])[bad].result(timeout=15)
            raise AssertionError(f"invalid topic name {bad[:20]!r} was accepted")
        except KafkaException as e:
            code = e.args[0].code()
            expect(code == KafkaError.TOPIC_EXCEPTION,
                   f"invalid name {bad[:20]!r}: expected INVALID_TOPIC_EXCEPTION (17), got {e}")
    ok("CreateTopics rejects invalid names with INVALID_TOPIC_EXCEPTION")

    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTS, replication_factor=1)])[TOPIC].result(timeout=15)
        raise AssertionError("creating an existing topic succeeded")
    except KafkaException as e:
        expect(e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, f"expected TOPIC_ALREADY_EXISTS, got {e}")
    ok("CreateTopics on an existing topic gives TOPIC_ALREADY_EXISTS")


def produce(msgs):
    p = Producer({"bootstrap.servers": ADDR, "acks": "all", "enable.idempotence": False,
                  "linger.ms": 5, "allow.auto.create.topics": False})
    reports = [None] * len(msgs)
    errors = []

    def on_delivery(i):
        def cb(err, m):
            if err is not None:
                errors.append((i, err))
            else:
                reports[i] = (m.partition(), m.offset())
        return cb

    for i, (k, v, h) in enumerate(msgs):
        p.produce(TOPIC, key=k, value=v, headers=h, timestamp=TS0 + i, on_delivery=on_delivery(i))
        p.poll(0)
    left = p.flush(30)
    expect(left == 0, f"{left} messages still queued after flush(30)")
    expect(not errors, f"{len(errors)} delivery errors, first: {errors[:3]}")
    expect(all(r is not None for r in reports), "missing delivery reports")
    # Offsets the broker assigned: 0..n-1 per partition, in produce order.
    per = defaultdict(list)
    for i, (part, off) in enumerate(reports):
        per[part].append(off)
    expect(set(per) <= set(range(PARTS)), f"unexpected partitions {sorted(per)}")
    expect(len(per) == PARTS, f"keys landed on only {sorted(per)}")
    for part, offs in per.items():
        expect(offs == list(range(len(offs))),
               f"partition {part}: acked offsets not 0..n-1 in order: {offs[:10]}...")
    ok(f"produced {N} with acks=all; acked offsets 0..n-1 per partition "
       f"({', '.join(f'p{k}={len(v)}' for k, v in sorted(per.items()))})")
    return reports, per


def consume(msgs, reports, per):
    # The Python binding insists on a group.id, but with assign() at explicit
    # offsets and no commits librdkafka never needs the group coordinator
    # (which the broker does not serve yet): fetching works without it.
    c = Consumer({"bootstrap.servers": ADDR, "group.id": f"unused-{TOPIC}",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "enable.partition.eof": True, "allow.auto.create.topics": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTS)])  # offset 0 == beginning
    got = defaultdict(list)
    eof = set()
    deadline = time.time() + 30
    while len(eof) < PARTS and time.time() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            expect(m.error().code() == KafkaError._PARTITION_EOF, f"consume error: {m.error()}")
            # EOF counts only once everything that was acked is in.
            if len(got[m.partition()]) == len(per[m.partition()]):
                eof.add(m.partition())
            continue
        got[m.partition()].append(m)
    expect(len(eof) == PARTS, f"did not reach the end of every partition in 30 s: "
           f"{ {p: len(v) for p, v in got.items()} } of { {p: len(v) for p, v in per.items()} }")
    by_report = {r: i for i, r in enumerate(reports)}
    total = 0
    for part in range(PARTS):
        offs = [m.offset() for m in got[part]]
        expect(offs == list(range(len(per[part]))), f"partition {part}: offsets {offs[:10]}...")
        for m in got[part]:
            i = by_report[(part, m.offset())]
            k, v, h = msgs[i]
            expect(m.key() == k, f"p{part}@{m.offset()}: key {m.key()!r} != {k!r}")
            expect(m.value() == v, f"p{part}@{m.offset()}: value {m.value()!r} != {v!r}")
            expect((m.headers() or None) == h, f"p{part}@{m.offset()}: headers {m.headers()} != {h}")
            expect(m.timestamp() == (TIMESTAMP_CREATE_TIME, TS0 + i),
                   f"p{part}@{m.offset()}: timestamp {m.timestamp()} != CreateTime {TS0 + i}")
            total += 1
    expect(total == N, f"consumed {total}, produced {N}")
    ok(f"consumed {N} by assignment: offsets, order, keys, values, headers, null key/value, timestamps")
    return c, got


def list_offsets(c, admin, got):
    for part in range(PARTS):
        n = len(got[part])
        lo, hi = c.get_watermark_offsets(TopicPartition(TOPIC, part), timeout=10, cached=False)
        expect((lo, hi) == (0, n), f"p{part}: watermarks {(lo, hi)} != (0, {n})")
    ok("get_watermark_offsets (ListOffsets earliest/latest)")

    # One lookup per partition: the middle message's own timestamp must map to
    # its own offset; one before everything to 0; one after everything to -1 (end).
    queries, want = [], {}
    for part in range(PARTS):
        m = got[part][len(got[part]) // 2]
        queries.append(TopicPartition(TOPIC, part, m.timestamp()[1]))
        want[part] = m.offset()
    res = c.offsets_for_times(queries, timeout=10)
    for tp in res:
        expect(tp.error is None and tp.offset == want[tp.partition],
               f"offsets_for_times p{tp.partition}: {tp.offset} (err {tp.error}) != {want[tp.partition]}")
    res = c.offsets_for_times([TopicPartition(TOPIC, p, TS0 - 1000) for p in range(PARTS)], timeout=10)
    expect([tp.offset for tp in res] == [0] * PARTS, f"offsets_for_times(before all) {res}")
    res = c.offsets_for_times([TopicPartition(TOPIC, p, TS0 + 10 * N) for p in range(PARTS)], timeout=10)
    expect([tp.offset for tp in res] == [-1] * PARTS, f"offsets_for_times(after all) {res}")
    ok("offsets_for_times (ListOffsets by timestamp: exact, before all, after all)")

    specs = {TopicPartition(TOPIC, p): OffsetSpec.earliest() for p in range(PARTS)}
    res = {tp.partition: f.result(timeout=15).offset for tp, f in admin.list_offsets(specs).items()}
    expect(res == {p: 0 for p in range(PARTS)}, f"AdminClient.list_offsets earliest {res}")
    specs = {TopicPartition(TOPIC, p): OffsetSpec.latest() for p in range(PARTS)}
    res = {tp.partition: f.result(timeout=15).offset for tp, f in admin.list_offsets(specs).items()}
    expect(res == {p: len(got[p]) for p in range(PARTS)}, f"AdminClient.list_offsets latest {res}")
    ok("AdminClient.list_offsets earliest/latest")


def delete(admin):
    admin.delete_topics([TOPIC], operation_timeout=10)[TOPIC].result(timeout=15)
    deadline = time.time() + 10
    while TOPIC in admin.list_topics(timeout=10).topics:
        expect(time.time() < deadline, "deleted topic still listed after 10 s")
        time.sleep(0.2)
    ok("DeleteTopics; topic gone from metadata")
    try:
        admin.delete_topics([TOPIC])[TOPIC].result(timeout=15)
        raise AssertionError("deleting a deleted topic succeeded")
    except KafkaException as e:
        expect(e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART,
               f"expected UNKNOWN_TOPIC_OR_PARTITION, got {e}")
    ok("DeleteTopics on a missing topic gives UNKNOWN_TOPIC_OR_PARTITION")


def main():
    admin = AdminClient({"bootstrap.servers": ADDR})
    admin_checks(admin)
    msgs = messages()
    reports, per = produce(msgs)
    c, got = consume(msgs, reports, per)
    list_offsets(c, admin, got)
    c.close()
    delete(admin)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        # A wrong answer from the broker: say what, without a traceback.
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
