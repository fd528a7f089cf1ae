#!/usr/bin/env python3
"""aiokafka (asyncio, pure-Python protocol) against a Sluice broker.

usage: test_aiokafka.py HOST:PORT

Same scenario as test_confluent.py: AIOKafkaAdminClient create/delete topics
(incl. error codes: aiokafka's admin returns the raw response, so the codes
are read from it), keyed produce with acks=all, consumption by explicit
assignment (group_id=None), ListOffsets via beginning_offsets / end_offsets /
offsets_for_times. enable_idempotence stays off (no InitProducerId yet).
"""
import asyncio
import sys
import time
import uuid
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

ADDR = sys.argv[1]
N = 1000
PARTS = 3
TOPIC = f"aio-{uuid.uuid4().hex[:8]}"
TS0 = int(time.time() * 1000) - 3_600_000  # explicit, increasing CreateTimes

# Kafka error codes the checks expect.
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, TOPIC_ALREADY_EXISTS = 0, 3, 17, 36


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
        headers = None
        if i % 100 == 7:
            headers = [("trace", f"t{i}".encode()), ("trace", b"second"), ("empty", b"")]
        if i == 500:
            key = None
        if i == 501:
            value = None
        out.append((key, value, headers))
    return out


def codes(resp, field):
    """{topic: error_code} from a CreateTopics/DeleteTopics response of any version."""
    return {entry[0]: entry[1] for entry in getattr(resp, field)}


async def admin_checks(admin):
    resp = await admin.create_topics([NewTopic(TOPIC, num_partitions=PARTS, replication_factor=1)],
                                     timeout_ms=10000)
    expect(codes(resp, "topic_errors") == {TOPIC: NONE}, f"CreateTopics: {resp}")
    ok(f"CreateTopics {TOPIC} ({PARTS} partitions)")

    deadline = time.time() + 10
    while True:
        t = (await admin.describe_topics([TOPIC]))[0]
        if t["error_code"] == 0 and len(t["partitions"]) == PARTS and \
                all(p["leader"] >= 0 for p in t["partitions"]):
            break
        expect(time.time() < deadline, f"topic not ready in metadata: {t}")
        await asyncio.sleep(0.2)
    expect(sorted(p["partition"] for p in t["partitions"]) == list(range(PARTS)), f"partitions in {t}")
    cluster = await admin.describe_cluster()
    expect(len(cluster["brokers"]) == 1, f"expected one broker: {cluster}")
    ok(f"Metadata: {PARTS} partitions with leaders, one broker")

    for bad in ("bad/name", "a" * 250, ".."):
        resp = await admin.create_topics([NewTopic(bad, num_partitions=1, replication_factor=1)])
        expect(codes(resp, "topic_errors") == {bad: INVALID_TOPIC},
               f"invalid name {bad[:20]!r}: expected INVALID_TOPIC_EXCEPTION (17): {resp}")
    ok("CreateTopics rejects invalid names with INVALID_TOPIC_EXCEPTION")

    resp = await admin.create_topics([NewTopic(TOPIC, num_partitions=PARTS, replication_factor=1)])
    expect(codes(resp, "topic_errors") == {TOPIC: TOPIC_ALREADY_EXISTS},
           f"existing topic: expected TOPIC_ALREADY_EXISTS (36): {resp}")
    ok("CreateTopics on an existing topic gives TOPIC_ALREADY_EXISTS")


async def produce(msgs):
    p = AIOKafkaProducer(bootstrap_servers=ADDR, acks="all", enable_idempotence=False, linger_ms=5)
    await p.start()
    try:
        # send() only enqueues; gathering the futures afterwards lets the
        # producer batch like a real application would.
        futs = [await p.send(TOPIC, key=k, value=v, headers=h, timestamp_ms=TS0 + i)
                for i, (k, v, h) in enumerate(msgs)]
        mds = await asyncio.wait_for(asyncio.gather(*futs), 30)
    finally:
        await p.stop()
    reports = [(md.partition, md.offset) for md in mds]
    per = defaultdict(list)
    for part, off in reports:
        per[part].append(off)
    expect(sorted(per) == list(range(PARTS)), f"keys landed on partitions {sorted(per)}")
    for part, offs in per.items():
        expect(offs == list(range(len(offs))), f"partition {part}: acked offsets {offs[:10]}...")
    ok(f"produced {N} with acks=all; acked offsets 0..n-1 per partition "
       f"({', '.join(f'p{k}={len(v)}' for k, v in sorted(per.items()))})")
    return reports, per


async def consume(c, msgs, reports, per):
    tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
    c.assign(tps)
    await c.seek_to_beginning(*tps)
    got = defaultdict(list)
    deadline = time.time() + 30
    while sum(map(len, got.values())) < N and time.time() < deadline:
        for tp, recs in (await c.getmany(timeout_ms=1000)).items():
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
            expect(list(r.headers) == (h or []), f"{where}: headers {r.headers} != {h}")
            expect((r.timestamp_type, r.timestamp) == (0, TS0 + i),
                   f"{where}: timestamp {r.timestamp_type}/{r.timestamp} != CreateTime {TS0 + i}")
    ok(f"consumed {N} by assignment: offsets, order, keys, values, headers, null key/value, timestamps")
    return got


async def list_offsets(c, got):
    tps = [TopicPartition(TOPIC, p) for p in range(PARTS)]
    begin = await c.beginning_offsets(tps)
    end = await c.end_offsets(tps)
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
    res = await c.offsets_for_times(query)
    for tp, ot in res.items():
        expect(ot is not None and (ot.offset, ot.timestamp) == want[tp.partition],
               f"offsets_for_times p{tp.partition}: {ot} != {want[tp.partition]}")
    res = await c.offsets_for_times({tp: TS0 - 1000 for tp in tps})
    expect(all(ot is not None and ot.offset == 0 for ot in res.values()), f"before all: {res}")
    res = await c.offsets_for_times({tp: TS0 + 10 * N for tp in tps})
    expect(all(ot is None for ot in res.values()), f"after all should be None: {res}")
    ok("offsets_for_times (exact, before all, after all)")


async def delete(admin):
    resp = await admin.delete_topics([TOPIC], timeout_ms=10000)
    expect(codes(resp, "topic_error_codes") == {TOPIC: NONE}, f"DeleteTopics: {resp}")
    deadline = time.time() + 10
    while TOPIC in await admin.list_topics():
        expect(time.time() < deadline, "deleted topic still listed after 10 s")
        await asyncio.sleep(0.2)
    ok("DeleteTopics; topic gone from list_topics")
    resp = await admin.delete_topics([TOPIC])
    expect(codes(resp, "topic_error_codes") == {TOPIC: UNKNOWN_TOPIC_OR_PARTITION},
           f"deleting a missing topic: expected UNKNOWN_TOPIC_OR_PARTITION (3): {resp}")
    ok("DeleteTopics on a missing topic gives UNKNOWN_TOPIC_OR_PARTITION")


async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=ADDR)
    await admin.start()
    c = AIOKafkaConsumer(bootstrap_servers=ADDR, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest")
    try:
        await admin_checks(admin)
        msgs = messages()
        reports, per = await produce(msgs)
        await c.start()
        got = await consume(c, msgs, reports, per)
        await list_offsets(c, got)
        await c.stop()
        await delete(admin)
    finally:
        await c.stop()
        await admin.close()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        # A wrong answer from the broker: say what, without a traceback.
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
