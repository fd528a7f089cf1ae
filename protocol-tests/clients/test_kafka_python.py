#!/usr/bin/env python3
"""kafka-python (pure Python) against a Sluice broker.

usage: test_kafka_python.py HOST:PORT

Same scenario as test_confluent.py through kafka-python's own protocol code:
KafkaAdminClient create/delete topics (incl. error codes), keyed produce with
acks=all, consumption by explicit assignment (group_id=None), ListOffsets via
beginning_offsets / end_offsets / offsets_for_times.

api_version is left to auto-detection (from ApiVersions): kafka-python then
picks each request's version from what the broker advertises, which is the
behaviour we want to exercise. enable_idempotence is off because the broker
does not serve InitProducerId yet (kafka-python 3 turns it on by default).
"""
import sys
import time
import uuid
from collections import defaultdict

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidTopicError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

ADDR = sys.argv[1]
N = 1000
PARTS = 3
TOPIC = f"kpy-{uuid.uuid4().hex[:8]}"
TS0 = int(time.time() * 1000) - 3_600_000  # explicit, increasing CreateTimes


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def messages():
    """(key, value, headers) x N: 50 distinct keys, headers on every 100th
    (duplicate names, an empty value), one null key, one null value."""
    out = []
    for i in range(N):
        key = f"key-{i % 50}".encode()
        value = f"value-{i}-".encode() + b"x" * (i % 37)
        headers = []
        if i % 100 == 7:
            headers = [("trace", f"t{i}".encode()), ("trace", b"second"), ("empty", b"")]
        if i == 500:
            key = None
        if i == 501:
            value = None
        out.append((key, value, headers))
    return out


def admin_checks(admin):
    admin.create_topics({TOPIC: {"num_partitions": PARTS, "replication_factor": 1}}, timeout_ms=10000)
    ok(f"CreateTopics {TOPIC} ({PARTS} partitions)")

    deadline = time.time() + 10
    while True:
        desc = admin.describe_topics([TOPIC])
        t = desc[0] if desc else None
        if t and t["error_code"] == 0 and len(t["partitions"]) == PARTS and \
                all(p["leader_id"] >= 0 for p in t["partitions"]):
            break
        expect(time.time() < deadline, f"topic not ready in metadata: {t}")
        time.sleep(0.2)
    expect(sorted(p["partition_index"] for p in t["partitions"]) == list(range(PARTS)),
           f"partition ids in {t}")
    cluster = admin.describe_cluster()
    expect(len(cluster["brokers"]) == 1, f"expected one broker: {cluster}")
    ok(f"Metadata: {PARTS} partitions with leaders, one broker")

    for bad in ("bad/name", "a" * 250, ".."):
        try:
            admin.create_topics({bad: {"num_partitions": 1, "replication_factor": 1}})
            raise AssertionError(f"invalid topic name {bad[:20]!r} was accepted")
        except InvalidTopicError:
            pass
    ok("CreateTopics rejects invalid names with InvalidTopicError")

    try:
        admin.create_topics({TOPIC: {"num_partitions": PARTS, "replication_factor": 1}})
        raise AssertionError("creating an existing topic succeeded")
    except TopicAlreadyExistsError:
        pass
    ok("CreateTopics on an existing topic gives TopicAlreadyExistsError")


def produce(msgs):
    p = KafkaProducer(bootstrap_servers=ADDR, acks="all", enable_idempotence=False, linger_ms=5)
    futures = [p.send(TOPIC, key=k, value=v, headers=h, timestamp_ms=TS0 + i)
               for i, (k, v, h) in enumerate(msgs)]
    p.flush(30)
    reports = []
    for i, f in enumerate(futures):
        md = f.get(timeout=30)  # raises the broker's error, if any
        reports.append((md.partition, md.offset))
    p.close()
    per = defaultdict(list)
    for part, off in reports:
        per[part].append(off)
    expect(sorted(per) == list(range(PARTS)), f"keys landed on partitions {sorted(per)}")
    for part, offs in per.items():
        expect(offs == list(range(len(offs))), f"partition {part}: acked offsets {offs[:10]}...")
    ok(f"produced {N} with acks=all; acked offsets 0..n-1 per partition "
       f"({', '.join(f'p{k}={len(v)}' for k, v in sorted(per.items()))})")
    return reports, per


def consume(msgs, reports, per):
    c = KafkaConsumer(bootstrap_servers=ADDR, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    got = defaultdict(list)
    deadline = time.time() + 30
    while sum(map(len, got.values())) < N and time.time() < deadline:
        for tp, recs in c.poll(timeout_ms=1000).items():
            got[tp.partition].extend(recs)
    by_report = {r: i for i, r in enumerate(reports)}
    for part in range(PARTS):
        offs = [r.offset for r in got[part]]
        expect(offs == list(range(len(per[part]))), f"partition {part}: consumed offsets {offs[:10]}... "
               f"({len(offs)} of {len(per[part])})")
        for r in got[part]:
            i = by_report[(part, r.offset)]
            k, v, h = msgs[i]
            where = f"p{part}@{r.offset}"
            expect(r.key == k, f"{where}: key {r.key!r} != {k!r}")
            expect(r.value == v, f"{where}: value {r.value!r} != {v!r}")
            expect(list(r.headers) == h, f"{where}: headers {r.headers} != {h}")
            expect((r.timestamp_type, r.timestamp) == (0, TS0 + i),
                   f"{where}: timestamp {r.timestamp_type}/{r.timestamp} != CreateTime {TS0 + i}")
    ok(f"consumed {N} by assignment: offsets, order, keys, values, headers, null key/value, timestamps")
    return c, got


def list_offsets(c, got):
    tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
    begin = c.beginning_offsets(tps)
    end = c.end_offsets(tps)
    expect({tp.partition: o for tp, o in begin.items()} == {p: 0 for p in range(PARTS)},
           f"beginning_offsets {begin}")
    expect({tp.partition: o for tp, o in end.items()} == {p: len(got[p]) for p in range(PARTS)},
           f"end_offsets {end}")
    ok("beginning_offsets / end_offsets")

    query, want = {}, {}
    for p in range(PARTS):
        r = got[p][len(got[p]) // 2]
        query[TopicPartition(TOPIC, p)] = r.timestamp
        want[p] = (r.offset, r.timestamp)
    res = c.offsets_for_times(query)
    for tp, ot in res.items():
        expect(ot is not None and (ot.offset, ot.timestamp) == want[tp.partition],
               f"offsets_for_times p{tp.partition}: {ot} != {want[tp.partition]}")
    res = c.offsets_for_times({tp: TS0 - 1000 for tp in tps})
    expect(all(ot is not None and ot.offset == 0 for ot in res.values()), f"before all: {res}")
    res = c.offsets_for_times({tp: TS0 + 10 * N for tp in tps})
    expect(all(ot is None for ot in res.values()), f"after all should be None: {res}")
    ok("offsets_for_times (exact, before all, after all)")


def delete(admin):
    admin.delete_topics([TOPIC], timeout_ms=10000)
    deadline = time.time() + 10
    while TOPIC in admin.list_topics():
        expect(time.time() < deadline, "deleted topic still listed after 10 s")
        time.sleep(0.2)
    ok("DeleteTopics; topic gone from list_topics")
    try:
        admin.delete_topics([TOPIC])
        raise AssertionError("deleting a deleted topic succeeded")
    except UnknownTopicOrPartitionError:
        pass
    ok("DeleteTopics on a missing topic gives UnknownTopicOrPartitionError")


def main():
    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    print(f"  info: kafka-python detected broker version {admin._manager.broker_version}", flush=True)
    admin_checks(admin)
    msgs = messages()
    reports, per = produce(msgs)
    c, got = consume(msgs, reports, per)
    list_offsets(c, got)
    c.close()
    delete(admin)
    admin.close()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        # A wrong answer from the broker: say what, without a traceback.
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
