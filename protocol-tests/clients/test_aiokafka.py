#!/usr/bin/env python3
"""aiokafka (asyncio, pure-Python protocol) against a Sluice broker.

usage: test_aiokafka.py HOST:PORT

Same scenario as test_confluent.py: AIOKafkaAdminClient create/delete topics
(incl. error codes: aiokafka's admin returns the raw response, so the codes
are read from it), keyed produce with acks=all, consumption by explicit
assignment (group_id=None), ListOffsets via beginning_offsets / end_offsets /
offsets_for_times; then consumer groups: a subscribed member consuming and
committing, a second member splitting the partitions, the admin group
listing/description/offsets, and a new member resuming from the committed
offsets; then transactions (commit, abort, send_offsets_to_transaction,
read_committed). Producers keep aiokafka's defaults (not idempotent;
test_idempotence.py turns it on).
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
# Consumer-group scenario: its own 4-partition topic and group.
GTOPIC = f"aio-grp-{uuid.uuid4().hex[:8]}"
GROUP = f"aio-group-{uuid.uuid4().hex[:8]}"
GPARTS = 4

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
    p = AIOKafkaProducer(bootstrap_servers=ADDR, acks="all", linger_ms=5)
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


# --- consumer groups -----------------------------------------------------------

def group_consumer(name):
    # Commits are explicit; short heartbeats so a rebalance is noticed quickly
    # (6000 ms is the broker's and Kafka's group.min.session.timeout.ms).
    return AIOKafkaConsumer(bootstrap_servers=ADDR, group_id=GROUP, client_id=name,
                            session_timeout_ms=6000, heartbeat_interval_ms=500,
                            enable_auto_commit=False, auto_offset_reset="earliest")


class Member:
    """A started, subscribed AIOKafkaConsumer consumed by a task that records
    (partition, offset, value, assignment at the time) and commits after each
    non-empty batch."""

    def __init__(self, name):
        self.name = name
        self.c = group_consumer(name)
        self.records = []
        self.task = None

    async def start(self):
        await self.c.start()
        self.c.subscribe([GTOPIC])
        self.task = asyncio.create_task(self._run())

    async def _run(self):
        while True:
            batch = await self.c.getmany(timeout_ms=200)
            assigned = self.assigned()
            for tp, recs in batch.items():
                self.records.extend((r.partition, r.offset, r.value, assigned) for r in recs)
            if batch:
                await self.c.commit()  # OffsetCommit of the consumed positions

    def assigned(self):
        return sorted(tp.partition for tp in self.c.assignment() if tp.topic == GTOPIC)

    def check(self):
        if self.task.done():
            raise AssertionError(f"{self.name}: consume task ended: {self.task.exception()!r}")

    async def stop(self):
        self.check()
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        await self.c.stop()  # LeaveGroup


async def wait_for(cond, what, members=(), timeout=30):
    deadline = time.time() + timeout
    while not cond():
        for m in members:
            m.check()
        expect(time.time() < deadline, f"{what} (waited {timeout} s)")
        await asyncio.sleep(0.1)


async def produce_group(n, tag):
    """n records to GTOPIC over every partition; {(partition, offset): value}."""
    p = AIOKafkaProducer(bootstrap_servers=ADDR, acks="all", linger_ms=5)
    await p.start()
    try:
        vals = [f"{tag}-{i}".encode() for i in range(n)]
        futs = [await p.send(GTOPIC, key=f"gk-{i % 40}".encode(), value=v) for i, v in enumerate(vals)]
        mds = await asyncio.wait_for(asyncio.gather(*futs), 30)
    finally:
        await p.stop()
    acked = {(md.partition, md.offset): v for md, v in zip(mds, vals)}
    expect({part for part, _ in acked} == set(range(GPARTS)),
           f"group records landed on only {sorted({part for part, _ in acked})}")
    return acked


async def committed(c):
    return {p: await c.committed(TopicPartition(GTOPIC, p)) for p in range(GPARTS)}


async def end_offsets(c):
    res = await c.end_offsets([TopicPartition(GTOPIC, p) for p in range(GPARTS)])
    return {tp.partition: o for tp, o in res.items()}


async def test_group_subscribe_consume_commit(admin):
    """One member subscribes with a group_id, is assigned all 4 partitions,
    consumes every record once and commits: committed() = end offsets."""
    resp = await admin.create_topics([NewTopic(GTOPIC, num_partitions=GPARTS, replication_factor=1)],
                                     timeout_ms=10000)
    expect(codes(resp, "topic_errors") == {GTOPIC: NONE}, f"CreateTopics {GTOPIC}: {resp}")
    acked = await produce_group(200, "first")
    m1 = Member("aio-m1")
    await m1.start()
    await wait_for(lambda: len(m1.records) >= len(acked), f"m1 consumed {len(m1.records)} of {len(acked)}",
                   [m1])
    await asyncio.sleep(1)  # catch redeliveries
    expect(m1.assigned() == list(range(GPARTS)), f"sole member should own all partitions: {m1.assigned()}")
    keys = [(p, o) for p, o, _, _ in m1.records]
    expect(len(keys) == len(set(keys)) == len(acked), f"m1 consumed {len(keys)} ({len(set(keys))} distinct)")
    expect({(p, o): v for p, o, v, _ in m1.records} == acked, "m1's records differ from those produced")
    end = await end_offsets(m1.c)
    got = await committed(m1.c)
    expect(got == end, f"committed() {got} != end offsets {end}")
    ok(f"AIOKafkaConsumer(group_id) subscribe: sole member owns {m1.assigned()}, consumed "
       f"{len(acked)} exactly once, committed() = end offsets {end}")
    return m1, acked


async def test_group_second_member_splits(m1, first):
    """A second member joins: the partitions are split (each owned by exactly
    one), new records are consumed exactly once across both, and nothing
    committed before the rebalance is consumed again."""
    m2 = Member("aio-m2")
    await m2.start()

    def split():
        a1, a2 = m1.assigned(), m2.assigned()
        return a1 and a2 and sorted(a1 + a2) == list(range(GPARTS))
    await wait_for(split, f"partitions not split: m1 {m1.assigned()}, m2 {m2.assigned()}", [m1, m2])
    a1, a2 = m1.assigned(), m2.assigned()
    ok(f"second member joined: partitions split m1 {a1}, m2 {a2}")

    n1 = len(m1.records)
    acked = await produce_group(100, "second")
    await wait_for(lambda: len(m1.records) - n1 + len(m2.records) >= len(acked),
                   f"new records consumed: m1 {len(m1.records) - n1}, m2 {len(m2.records)} of {len(acked)}",
                   [m1, m2])
    await asyncio.sleep(1)
    new = [(m, r) for m, rs in (("m1", m1.records[n1:]), ("m2", m2.records)) for r in rs]
    again = [(m, p, o) for m, (p, o, _, _) in new if (p, o) in first]
    expect(not again, f"committed records consumed again after the rebalance: {again[:5]}")
    keys = [(p, o) for _, (p, o, _, _) in new]
    expect(len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} records consumed twice")
    expect({(p, o): v for _, (p, o, v, _) in new} == acked, "consumed records differ from those produced")
    outside = [(m, p, asg) for m, (p, _, _, asg) in new if p not in asg]
    expect(not outside, f"records from partitions outside the member's assignment: {outside[:3]}")
    expect((m1.assigned(), m2.assigned()) == (a1, a2), f"assignment changed: {m1.assigned()}, {m2.assigned()}")
    end = await end_offsets(m1.c)
    for m in (m1, m2):
        got = await committed(m.c)
        expect(got == end, f"{m.name}.committed() {got} != end offsets {end}")
    by = {m: sum(1 for x, _ in new if x == m) for m in ("m1", "m2")}
    ok(f"{len(acked)} new records consumed exactly once across both (m1 {by['m1']}, m2 {by['m2']}), "
       f"none of the committed ones again; committed() = {end} from both")
    return m2, acked


async def test_group_admin(admin, members):
    """AIOKafkaAdminClient: list_consumer_groups, describe_consumer_groups
    (raw DescribeGroups response), list_consumer_group_offsets."""
    groups = dict(await admin.list_consumer_groups())
    expect(groups.get(GROUP) == "consumer", f"list_consumer_groups: {GROUP} -> {groups.get(GROUP)!r}")
    (resp,) = await admin.describe_consumer_groups([GROUP])
    (g,) = resp.groups
    err, gid, state, ptype, proto, gmembers = g[:6]
    expect((err, gid, state, ptype) == (NONE, GROUP, "Stable", "consumer") and proto,
           f"describe_consumer_groups: {g[:5]}")
    expect(sorted(m[1] for m in gmembers) == sorted(m.name for m in members),
           f"described member client ids {[m[1] for m in gmembers]}")
    offs = await admin.list_consumer_group_offsets(GROUP)
    end = await end_offsets(members[0].c)
    got = {tp.partition: om.offset for tp, om in offs.items() if tp.topic == GTOPIC}
    expect(got == end, f"list_consumer_group_offsets {got} != end offsets {end}")
    ok(f"admin: group listed (consumer), described Stable/{proto} with members "
       f"{sorted(m.name for m in members)}, offsets {got}")


async def test_group_resume_from_committed(members, first_two):
    """Every member leaves; more records are produced; a new member of the
    same group starts at the committed offsets and sees only the new records."""
    for m in members:
        await m.stop()
    acked = await produce_group(60, "third")
    m3 = Member("aio-m3")
    await m3.c.start()
    before = await committed(m3.c)
    end_before = {p: max(o for q, o in first_two if q == p) + 1 for p in range(GPARTS)}
    expect(before == end_before, f"committed() before resuming {before} != {end_before}")
    m3.c.subscribe([GTOPIC])
    m3.task = asyncio.create_task(m3._run())
    await wait_for(lambda: len(m3.records) >= len(acked), f"m3 consumed {len(m3.records)} of {len(acked)}",
                   [m3])
    await asyncio.sleep(1)
    again = [(p, o) for p, o, _, _ in m3.records if (p, o) in first_two]
    expect(not again, f"new member re-consumed committed records: {again[:5]}")
    expect({(p, o): v for p, o, v, _ in m3.records} == acked and len(m3.records) == len(acked),
           f"new member consumed {len(m3.records)} records, not exactly the {len(acked)} new ones")
    for p in range(GPARTS):
        offs = sorted(o for q, o, _, _ in m3.records if q == p)
        expect(offs and offs[0] == before[p], f"p{p}: resumed at {offs[:1]}, committed {before[p]}")
    end = await end_offsets(m3.c)
    got = await committed(m3.c)
    expect(got == end, f"after consuming: committed() {got} != end offsets {end}")
    await m3.stop()
    ok(f"new member resumes at the committed offsets {before}: exactly the {len(acked)} new records, "
       f"commits move committed() to {end}")


async def test_transactions(admin):
    """A transactional producer: one transaction committed, one aborted, one committed with
    an offset for the group (send_offsets_to_transaction, KIP-98's AddOffsetsToTxn and
    TxnOffsetCommit). read_committed sees exactly the committed records, read_uncommitted
    all of them, and the group's committed offset is the one the transaction carried."""
    out, group = f"aio-txn-{uuid.uuid4().hex[:8]}", f"aio-txn-group-{uuid.uuid4().hex[:8]}"
    await admin.create_topics([NewTopic(out, 1, 1)])
    p = AIOKafkaProducer(bootstrap_servers=ADDR, transactional_id=f"aio-txn-{uuid.uuid4().hex[:8]}")
    await p.start()
    try:
        async with p.transaction():
            for i in range(5):
                await p.send(out, f"out-{i}".encode())
        await p.begin_transaction()
        for i in range(5, 10):
            await p.send(out, f"aborted-{i}".encode())
        await p.abort_transaction()
        async with p.transaction():
            for i in range(5, 10):
                await p.send(out, f"out-{i}".encode())
            await p.send_offsets_to_transaction({TopicPartition(out, 0): 7}, group)
    finally:
        await p.stop()

    async def read(isolation, want):
        c = AIOKafkaConsumer(bootstrap_servers=ADDR, isolation_level=isolation, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([TopicPartition(out, 0)])
            got, deadline = [], time.time() + 30
            while len(got) < want and time.time() < deadline:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    got.extend(r.value.decode() for r in recs)
            # Anything past `want` should not be there: one more fetch to see it.
            for recs in (await c.getmany(timeout_ms=1000)).values():
                got.extend(r.value.decode() for r in recs)
            return got
        finally:
            await c.stop()

    committed_values = await read("read_committed", 10)
    expect(committed_values == [f"out-{i}" for i in range(10)], f"read_committed read {committed_values}")
    expect(len(await read("read_uncommitted", 15)) == 15, "read_uncommitted sees the 5 aborted records too")
    offs = await admin.list_consumer_group_offsets(group)
    got = {tp.partition: om.offset for tp, om in offs.items()}
    expect(got == {0: 7}, f"the transaction's offset commit: {got}")
    ok("transactions: commit, abort, send_offsets_to_transaction; read_committed sees the 10 committed, "
       "read_uncommitted 15; the group's offset is 7")
    await admin.delete_topics([out], timeout_ms=10000)


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

        # Consumer groups.
        m1, first = await test_group_subscribe_consume_commit(admin)
        m2, second = await test_group_second_member_splits(m1, first)
        await test_group_admin(admin, [m1, m2])
        await test_group_resume_from_committed([m1, m2], {**first, **second})
        resp = await admin.delete_topics([GTOPIC], timeout_ms=10000)
        expect(codes(resp, "topic_error_codes") == {GTOPIC: NONE}, f"DeleteTopics {GTOPIC}: {resp}")

        await test_transactions(admin)
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
