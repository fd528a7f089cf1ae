#!/usr/bin/env python3
"""confluent-kafka (librdkafka, bundled in the wheel) against a Sluice broker.

usage: test_confluent.py HOST:PORT

Admin (CreateTopics incl. error codes, DeleteTopics), keyed produce with
acks=all, non-group consumption by explicit assignment, ListOffsets through
watermarks / offsets_for_times / AdminClient.list_offsets; then consumer
groups: two members splitting a 4-partition topic with synchronous commits and
failover when one leaves, a new member resuming from the committed offsets,
and the group admin APIs (list/describe/delete groups, list/alter group
offsets); then topic configs (CreateTopics with configs, DescribeConfigs
sources and synonyms, IncrementalAlterConfigs SET/DELETE/APPEND/SUBTRACT and
validate_only, legacy AlterConfigs, INVALID_CONFIG naming the key for bad
values and unknown keys, a compacted topic refusing keyless records, read-only
broker configs), DescribeCluster, DeleteRecords and a lowered retention.ms
taking effect. Every step checks what the broker sent back; the first mismatch
raises and exits non-zero.

Producers keep librdkafka's defaults (not idempotent); test_idempotence.py and
test_transactions.py cover enable.idempotence and transactional.id.
"""
import sys
import time
import uuid
import warnings
from collections import defaultdict

from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions,
                             KafkaError, KafkaException, Producer, TopicPartition,
                             TIMESTAMP_CREATE_TIME)
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, NewTopic, OffsetSpec, ResourceType)

ADDR = sys.argv[1]
N = 1000
PARTS = 3
TOPIC = f"cfk-{uuid.uuid4().hex[:8]}"
# Consumer-group scenario: its own topic with 4 partitions, split by two members.
GTOPIC = f"cfk-grp-{uuid.uuid4().hex[:8]}"
GROUP = f"cfk-group-{uuid.uuid4().hex[:8]}"
GPARTS = 4
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
    p = Producer({"bootstrap.servers": ADDR, "acks": "all",
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
    # offsets and no commits this consumer never joins the group: plain
    # fetching, no coordinator involved (the group tests below cover that).
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


# --- consumer groups -----------------------------------------------------------

def group_consumer(client_id):
    # Short heartbeats so members notice a rebalance quickly; 6000 ms is the
    # broker's (and Kafka's) group.min.session.timeout.ms. No auto commit:
    # every commit below is explicit and synchronous.
    return Consumer({"bootstrap.servers": ADDR, "group.id": GROUP, "client.id": client_id,
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "allow.auto.create.topics": False})


def parts_of(c):
    return sorted(tp.partition for tp in c.assignment() if tp.topic == GTOPIC)


def group_topic(admin):
    admin.create_topics([NewTopic(GTOPIC, num_partitions=GPARTS, replication_factor=1)],
                        operation_timeout=10)[GTOPIC].result(timeout=15)
    deadline = time.time() + 10
    while True:
        t = admin.list_topics(timeout=10).topics.get(GTOPIC)
        if t is not None and t.error is None and len(t.partitions) == GPARTS:
            break
        expect(time.time() < deadline, f"group topic not ready in metadata: {t and t.partitions}")
        time.sleep(0.2)
    ok(f"CreateTopics {GTOPIC} ({GPARTS} partitions) for the group tests")


def produce_group(n, tag):
    """n records to GTOPIC, spread over every partition; {(partition, offset): value}."""
    p = Producer({"bootstrap.servers": ADDR, "acks": "all",
                  "linger.ms": 5, "allow.auto.create.topics": False})
    acked, errors = {}, []

    def cb(err, m):
        if err is not None:
            errors.append(err)
        else:
            acked[(m.partition(), m.offset())] = m.value()

    for i in range(n):
        p.produce(GTOPIC, key=f"gk-{i % 40}".encode(), value=f"{tag}-{i}".encode(), on_delivery=cb)
        p.poll(0)
    expect(p.flush(30) == 0, "group records still queued after flush(30)")
    expect(not errors and len(acked) == n, f"group produce: {len(acked)} acked, errors {errors[:3]}")
    expect({part for part, _ in acked} == set(range(GPARTS)),
           f"group records landed on only {sorted({part for part, _ in acked})}")
    return acked


def high_watermarks(c):
    return {p: c.get_watermark_offsets(TopicPartition(GTOPIC, p), timeout=10, cached=False)[1]
            for p in range(GPARTS)}


def committed_of(c):
    res = c.committed([TopicPartition(GTOPIC, p) for p in range(GPARTS)], timeout=10)
    for tp in res:
        expect(tp.error is None, f"committed() p{tp.partition}: {tp.error}")
    return {tp.partition: tp.offset for tp in res}


def test_group_two_members_split_and_failover():
    """Two members subscribe to one 4-partition topic: the partitions are split
    between them (each owned by exactly one), every record is consumed exactly
    once across both with synchronous commits, and when one member leaves the
    other takes over all partitions, resuming at the committed offsets."""
    c1, c2 = group_consumer("cfk-c1"), group_consumer("cfk-c2")
    c1.subscribe([GTOPIC])
    c2.subscribe([GTOPIC])
    # The topic is empty, so polling here only drives JoinGroup/SyncGroup.
    deadline = time.time() + 30
    while True:
        for c in (c1, c2):
            m = c.poll(0.2)
            expect(m is None or m.error() is None, f"poll while joining: {m and m.error()}")
            expect(m is None, "a record arrived from an empty topic")
        a1, a2 = parts_of(c1), parts_of(c2)
        if a1 and a2 and len(a1) + len(a2) == GPARTS:
            break
        expect(time.time() < deadline, f"group did not settle in 30 s: c1 {a1}, c2 {a2}")
    expect(not set(a1) & set(a2) and sorted(a1 + a2) == list(range(GPARTS)),
           f"partitions not split exactly once: c1 {a1}, c2 {a2}")
    ok(f"JoinGroup/SyncGroup: two members split {GPARTS} partitions: c1 {a1}, c2 {a2}")

    acked = produce_group(200, "first")
    seen = {}  # (partition, offset) -> consumer name
    dups = []
    deadline = time.time() + 30
    quiet_until = None
    while time.time() < deadline:
        for name, c in (("c1", c1), ("c2", c2)):
            m = c.poll(0.1)
            if m is None:
                continue
            expect(m.error() is None, f"{name}: consume error {m.error()}")
            expect(m.partition() in parts_of(c), f"{name} got p{m.partition()} outside its assignment")
            key = (m.partition(), m.offset())
            expect(acked.get(key) == m.value(), f"{name} p{key[0]}@{key[1]}: {m.value()!r} != {acked.get(key)!r}")
            if key in seen:
                dups.append((key, seen[key], name))
            seen[key] = name
            c.commit(asynchronous=False)  # OffsetCommit of this member's positions
        if len(seen) == len(acked):
            # Everything is in; keep polling a little to catch redeliveries.
            quiet_until = quiet_until or time.time() + 1.5
            if time.time() > quiet_until:
                break
    expect(len(seen) == len(acked), f"consumed {len(seen)} of {len(acked)} records in 30 s")
    expect(not dups, f"records consumed twice: {dups[:5]}")
    expect(parts_of(c1) == a1 and parts_of(c2) == a2,
           f"assignment changed while consuming: c1 {parts_of(c1)}, c2 {parts_of(c2)}")
    ok(f"{len(acked)} records consumed exactly once across both members "
       f"(c1 {sum(v == 'c1' for v in seen.values())}, c2 {sum(v == 'c2' for v in seen.values())}), "
       f"commit(asynchronous=False) after each")

    hw = high_watermarks(c1)
    for name, c in (("c1", c1), ("c2", c2)):
        got = committed_of(c)
        expect(got == hw, f"{name}.committed() {got} != end offsets {hw}")
    ok(f"OffsetFetch: committed() from either member = end offsets {hw}")

    c2.close()  # LeaveGroup: c1 must take over all partitions
    deadline = time.time() + 30
    while parts_of(c1) != list(range(GPARTS)):
        m = c1.poll(0.2)
        expect(m is None or m.error() is None, f"c1 poll during failover: {m and m.error()}")
        expect(m is None, f"c1 re-consumed p{m and m.partition()}@{m and m.offset()} after the failover "
               "(should resume at the committed offset)")
        expect(time.time() < deadline, f"after c2 left, c1 has {parts_of(c1)} after 30 s")
    end = time.time() + 2
    while time.time() < end:
        m = c1.poll(0.2)
        expect(m is None, f"c1 re-consumed p{m and m.partition()}@{m and m.offset()} after the failover")
    ok(f"LeaveGroup: after c2 closed, c1 owns all {GPARTS} partitions and resumes at the "
       "committed offsets (no redelivery)")
    return c1, acked


def test_group_resume_from_committed(c1, first):
    """A new member of the same group (after the old ones left) sees
    committed() = the old end offsets and consumes only what was produced
    after them."""
    before = committed_of(c1)
    c1.close()
    acked = produce_group(100, "second")
    c3 = group_consumer("cfk-c3")
    got = committed_of(c3)
    expect(got == before, f"new member: committed() {got} != {before} committed by the old members")
    c3.subscribe([GTOPIC])
    seen = {}
    deadline = time.time() + 30
    quiet_until = None
    while time.time() < deadline:
        m = c3.poll(0.2)
        if m is not None:
            expect(m.error() is None, f"c3: consume error {m.error()}")
            key = (m.partition(), m.offset())
            expect(key not in first, f"c3 re-consumed p{key[0]}@{key[1]} ({m.value()!r}), committed "
                   f"offset there is {before[key[0]]}")
            expect(key not in seen, f"c3 consumed p{key[0]}@{key[1]} twice")
            expect(acked.get(key) == m.value(), f"c3 p{key[0]}@{key[1]}: {m.value()!r} != {acked.get(key)!r}")
            seen[key] = m.value()
        if len(seen) == len(acked):
            quiet_until = quiet_until or time.time() + 1
            if time.time() > quiet_until:
                break
    expect(len(seen) == len(acked), f"c3 consumed {len(seen)} of the {len(acked)} new records in 30 s")
    expect(parts_of(c3) == list(range(GPARTS)), f"c3 alone should own all partitions: {parts_of(c3)}")
    for p in range(GPARTS):
        offs = sorted(o for part, o in seen if part == p)
        expect(not offs or offs[0] == before[p], f"p{p}: c3 started at {offs[0]}, committed {before[p]}")
    c3.commit(asynchronous=False)
    hw = high_watermarks(c3)
    expect(committed_of(c3) == hw, f"after commit: committed() {committed_of(c3)} != end offsets {hw}")
    ok(f"new member resumes after the committed offsets {before}: only the {len(acked)} new records; "
       f"its commit moves committed() to {hw}")
    return c3


def group_listing(admin, **kw):
    res = admin.list_consumer_groups(request_timeout=10, **kw).result(timeout=15)
    expect(not res.errors, f"list_consumer_groups({kw}): errors {res.errors}")
    return {g.group_id: g for g in res.valid}


def fetch_offsets(admin, partitions=None):
    req = ConsumerGroupTopicPartitions(GROUP, partitions)
    res = admin.list_consumer_group_offsets([req], request_timeout=10)[GROUP].result(timeout=15)
    expect(res.group_id == GROUP, f"list_consumer_group_offsets answered for {res.group_id}")
    for tp in res.topic_partitions:
        expect(tp.error is None, f"list_consumer_group_offsets {tp.topic}[{tp.partition}]: {tp.error}")
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == GTOPIC}


def test_group_admin(admin, c3):
    """AdminClient group APIs against a live group (one member, c3) and then
    the same group empty: ListGroups with state filters, DescribeGroups,
    OffsetFetch, DeleteGroups (NON_EMPTY_GROUP while live), OffsetCommit by
    the admin (alter offsets) on the empty group, deletion."""
    hw = high_watermarks(c3)
    broker_id = next(iter(admin.list_topics(timeout=10).brokers))

    groups = group_listing(admin)
    expect(GROUP in groups, f"list_consumer_groups: {GROUP} missing from {sorted(groups)}")
    g = groups[GROUP]
    expect(g.state == ConsumerGroupState.STABLE and g.is_simple_consumer_group is False,
           f"listing of {GROUP}: state {g.state}, simple {g.is_simple_consumer_group}")
    expect(GROUP in group_listing(admin, states={ConsumerGroupState.STABLE}),
           "list_consumer_groups(states={STABLE}) misses the live group")
    expect(GROUP not in group_listing(admin, states={ConsumerGroupState.EMPTY}),
           "list_consumer_groups(states={EMPTY}) lists the live group")
    ok("ListGroups: live group listed as Stable, consumer protocol; state filter Stable/Empty honoured")

    d = admin.describe_consumer_groups([GROUP], request_timeout=10)[GROUP].result(timeout=15)
    expect(d.group_id == GROUP and d.state == ConsumerGroupState.STABLE and not d.is_simple_consumer_group,
           f"describe: group {d.group_id} state {d.state} simple {d.is_simple_consumer_group}")
    expect(d.partition_assignor in ("range", "roundrobin"), f"describe: assignor {d.partition_assignor!r}")
    expect(d.coordinator is not None and d.coordinator.id == broker_id,
           f"describe: coordinator {d.coordinator} (broker is {broker_id})")
    expect(len(d.members) == 1, f"describe: {len(d.members)} members, expected 1: "
           f"{[m.client_id for m in d.members]}")
    m = d.members[0]
    expect(m.client_id == "cfk-c3" and m.member_id.startswith("cfk-c3") and m.host,
           f"describe member: client {m.client_id!r} member {m.member_id!r} host {m.host!r}")
    assigned = sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions)
    expect(assigned == [(GTOPIC, p) for p in range(GPARTS)], f"describe member assignment {assigned}")
    ok(f"DescribeGroups: Stable, assignor {d.partition_assignor}, coordinator {broker_id}, "
       f"one member {m.client_id} at {m.host} owning all {GPARTS} partitions")

    got = fetch_offsets(admin)
    expect(got == hw, f"list_consumer_group_offsets (all) {got} != {hw}")
    got = fetch_offsets(admin, [TopicPartition(GTOPIC, 1), TopicPartition(GTOPIC, 3)])
    expect(got == {1: hw[1], 3: hw[3]}, f"list_consumer_group_offsets (p1, p3) {got}")
    ok(f"OffsetFetch via admin: all partitions {hw}, and a chosen subset")

    try:
        admin.delete_consumer_groups([GROUP], request_timeout=10)[GROUP].result(timeout=15)
        raise AssertionError("delete_consumer_groups on a group with a live member succeeded")
    except KafkaException as e:
        expect(e.args[0].code() == KafkaError.NON_EMPTY_GROUP, f"expected NON_EMPTY_GROUP, got {e}")
    ok("DeleteGroups on a group with a member gives NON_EMPTY_GROUP")

    # An admin commit (generation -1, no member id) into a group with members
    # is refused per partition, like Kafka: UNKNOWN_MEMBER_ID.
    req = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(GTOPIC, 0, 1)])
    res = admin.alter_consumer_group_offsets([req], request_timeout=10)[GROUP].result(timeout=15)
    errs = [(tp.partition, tp.error and tp.error.code()) for tp in res.topic_partitions]
    expect(errs == [(0, KafkaError.UNKNOWN_MEMBER_ID)],
           f"alter_consumer_group_offsets on a live group: expected UNKNOWN_MEMBER_ID for p0, got {errs}")
    expect(fetch_offsets(admin) == hw, "a refused alter_consumer_group_offsets changed the offsets")
    ok("alter_consumer_group_offsets on a group with a member: UNKNOWN_MEMBER_ID, offsets unchanged")

    c3.close()
    d = admin.describe_consumer_groups([GROUP], request_timeout=10)[GROUP].result(timeout=15)
    expect(d.state == ConsumerGroupState.EMPTY and not d.members,
           f"after the last member left: state {d.state}, members {[x.client_id for x in d.members]}")
    expect(GROUP in group_listing(admin, states={ConsumerGroupState.EMPTY}),
           "list_consumer_groups(states={EMPTY}) misses the now empty group")
    expect(GROUP not in group_listing(admin, states={ConsumerGroupState.STABLE}),
           "list_consumer_groups(states={STABLE}) still lists the empty group")
    expect(fetch_offsets(admin) == hw, "committed offsets lost when the group became empty")
    ok("empty group: described Empty with no members, listed under the Empty filter, offsets kept")

    req = ConsumerGroupTopicPartitions(GROUP, [TopicPartition(GTOPIC, 0, 1), TopicPartition(GTOPIC, 2, 0)])
    res = admin.alter_consumer_group_offsets([req], request_timeout=10)[GROUP].result(timeout=15)
    expect(all(tp.error is None for tp in res.topic_partitions),
           f"alter_consumer_group_offsets: {[(tp.partition, tp.error) for tp in res.topic_partitions]}")
    want = {**hw, 0: 1, 2: 0}
    got = fetch_offsets(admin)
    expect(got == want, f"after alter_consumer_group_offsets: {got} != {want}")
    ok(f"alter_consumer_group_offsets (admin OffsetCommit on an empty group): offsets now {got}")

    admin.delete_consumer_groups([GROUP], request_timeout=10)[GROUP].result(timeout=15)
    expect(GROUP not in group_listing(admin), "deleted group still listed")
    got = fetch_offsets(admin, [TopicPartition(GTOPIC, p) for p in range(GPARTS)])
    expect(all(o < 0 for o in got.values()), f"deleted group still has committed offsets {got}")
    try:
        admin.delete_consumer_groups([GROUP], request_timeout=10)[GROUP].result(timeout=15)
        raise AssertionError("deleting an already deleted group succeeded")
    except KafkaException as e:
        expect(e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, f"expected GROUP_ID_NOT_FOUND, got {e}")
    ok("DeleteGroups on the empty group: gone from the listing, no committed offsets; "
       "deleting it again gives GROUP_ID_NOT_FOUND")

    admin.delete_topics([GTOPIC], operation_timeout=10)[GTOPIC].result(timeout=15)


# --- configs, cluster, DeleteRecords, retention ----------------------------------

CTOPIC = f"cfk-cfg-{uuid.uuid4().hex[:8]}"  # configs set, described, altered
DTOPIC = f"cfk-del-{uuid.uuid4().hex[:8]}"  # DeleteRecords and retention.ms


def topic_configs(admin, topic=CTOPIC):
    r = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([r], request_timeout=10)[r].result(timeout=15)


def incremental_alter(admin, entries, topic=CTOPIC, **kw):
    """IncrementalAlterConfigs of [(key, op, value)] on one resource; None or the KafkaError."""
    r = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, op, v in entries])
    try:
        admin.incremental_alter_configs([r], request_timeout=10, **kw)[r].result(timeout=15)
        return None
    except KafkaException as e:
        return e.args[0]


def expect_config(cfg, key, value, source):
    e = cfg.get(key)
    expect(e is not None, f"describe_configs: {key} missing (got {sorted(cfg)[:10]}...)")
    expect((e.value, e.source, e.is_default, e.is_read_only) ==
           (value, source.value, source == ConfigSource.DEFAULT_CONFIG, False),
           f"{key}: value {e.value!r} source {ConfigSource(e.source).name} default {e.is_default} "
           f"read-only {e.is_read_only}; expected {value!r} {source.name}, writable")
    return e


def expect_invalid_config(err, key, what):
    expect(err is not None, f"{what} was accepted")
    expect(err.code() == KafkaError.INVALID_CONFIG and key in err.str(),
           f"{what}: expected INVALID_CONFIG (40) naming {key!r}, got {err.name()} ({err.code()}): {err.str()!r}")


def test_topic_configs(admin):
    """Topic configs through the admin client: set at CreateTopics, described
    with their source (DYNAMIC_TOPIC_CONFIG for set ones, DEFAULT_CONFIG
    otherwise) and synonyms; IncrementalAlterConfigs SET, APPEND, DELETE,
    SUBTRACT and validate_only; legacy AlterConfigs replacing the whole set;
    invalid values and unknown keys refused with INVALID_CONFIG naming the key,
    atomically, the stored values unchanged; a compacted topic refusing
    keyless records; broker configs described read-only and refused for alter."""
    admin.create_topics([NewTopic(CTOPIC, num_partitions=1, replication_factor=1, config={
        "retention.ms": "3600000", "cleanup.policy": "delete", "segment.ms": "86400000"})],
        operation_timeout=10)[CTOPIC].result(timeout=15)
    cfg = topic_configs(admin)
    e = expect_config(cfg, "retention.ms", "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "cleanup.policy", "delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "segment.ms", "86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "retention.bytes", "-1", ConfigSource.DEFAULT_CONFIG)
    expect_config(cfg, "max.message.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)
    # librdkafka always asks for synonyms: the topic's own value first, then the
    # broker-level default it overrides (log.retention.*).
    syn = [(s.name, s.source) for s in e.synonyms.values()]
    expect(len(syn) >= 2 and syn[0] == ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
           and all(n.startswith("log.retention.") for n, _ in syn[1:])
           and syn[-1][1] == ConfigSource.DEFAULT_CONFIG.value, f"retention.ms synonyms {syn}")
    ok(f"CreateTopics with configs; DescribeConfigs: set keys DYNAMIC_TOPIC_CONFIG, others "
       f"DEFAULT_CONFIG ({len(cfg)} keys); retention.ms synonyms {[n for n, _ in syn]}")

    err = incremental_alter(admin, [("retention.ms", AlterConfigOpType.SET, "7200000"),
                                    ("cleanup.policy", AlterConfigOpType.APPEND, "compact"),
                                    ("segment.ms", AlterConfigOpType.DELETE, None)])
    expect(err is None, f"incremental_alter_configs SET/APPEND/DELETE: {err}")
    cfg = topic_configs(admin)
    expect_config(cfg, "retention.ms", "7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "cleanup.policy", "delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "segment.ms", "604800000", ConfigSource.DEFAULT_CONFIG)
    ok("IncrementalAlterConfigs: SET retention.ms, APPEND compact to cleanup.policy, "
       "DELETE segment.ms (back to DEFAULT_CONFIG 604800000)")

    err = incremental_alter(admin, [("retention.ms", AlterConfigOpType.SET, "1")], validate_only=True)
    expect(err is None, f"validate_only SET: {err}")
    expect_config(topic_configs(admin), "retention.ms", "7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    ok("IncrementalAlterConfigs validate_only: accepted, nothing stored")

    err = incremental_alter(admin, [("retention.ms", AlterConfigOpType.SET, "soon")])
    expect_invalid_config(err, "retention.ms", "retention.ms=soon")
    err = incremental_alter(admin, [("no.such.config", AlterConfigOpType.SET, "1")])
    expect_invalid_config(err, "no.such.config", "unknown key no.such.config")
    # One bad entry spoils the whole resource: the valid SET beside it is not applied.
    err = incremental_alter(admin, [("retention.ms", AlterConfigOpType.SET, "1000"),
                                    ("cleanup.policy", AlterConfigOpType.SET, "sometimes")])
    expect_invalid_config(err, "cleanup.policy", "cleanup.policy=sometimes")
    err = incremental_alter(admin, [("retention.ms", AlterConfigOpType.SET, "soon")], validate_only=True)
    expect_invalid_config(err, "retention.ms", "validate_only retention.ms=soon")
    cfg = topic_configs(admin)
    expect_config(cfg, "retention.ms", "7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "cleanup.policy", "delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect("no.such.config" not in cfg, "the refused unknown key was stored")
    ok(f"invalid value, unknown key, a bad entry beside a good one, validate_only: INVALID_CONFIG "
       f"naming the key ({err.str()!r}); stored values unchanged")

    err = incremental_alter(admin, [("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")])
    expect(err is None, f"incremental_alter_configs SUBTRACT: {err}")
    expect_config(topic_configs(admin), "cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    ok("IncrementalAlterConfigs SUBTRACT delete from cleanup.policy: now compact")

    p = Producer({"bootstrap.servers": ADDR, "acks": "all",
                  "allow.auto.create.topics": False, "message.send.max.retries": 0})
    results = []
    # Separate batches: a keyless record fails its whole batch (as in Kafka).
    for what, key in (("keyed", b"k"), ("keyless", None)):
        p.produce(CTOPIC, key=key, value=what.encode(), on_delivery=lambda err, m, w=what: results.append((w, err)))
        expect(p.flush(30) == 0, "compacted-topic records still queued after flush(30)")
    got = {what: err and err.code() for what, err in results}
    expect(got == {"keyed": None, "keyless": KafkaError.INVALID_RECORD},
           f"compacted topic: expected keyed ok, keyless INVALID_RECORD (87); got {results}")
    ok("compacted topic: keyed record accepted, keyless record refused with INVALID_RECORD")

    # Legacy AlterConfigs replaces the whole set: keys not named go back to their
    # defaults. (The binding deprecates it; brokers and other clients still use it.)
    warnings.filterwarnings("ignore", "alter_configs has been deprecated", DeprecationWarning)
    r = ConfigResource(ResourceType.TOPIC, CTOPIC, set_config={"retention.ms": "86400000"})
    admin.alter_configs([r], request_timeout=10)[r].result(timeout=15)
    cfg = topic_configs(admin)
    expect_config(cfg, "retention.ms", "86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    expect_config(cfg, "cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG)
    r = ConfigResource(ResourceType.TOPIC, CTOPIC, set_config={"retention.ms": "soon"})
    try:
        admin.alter_configs([r], request_timeout=10)[r].result(timeout=15)
        err = None
    except KafkaException as e:
        err = e.args[0]
    expect_invalid_config(err, "retention.ms", "legacy AlterConfigs retention.ms=soon")
    expect_config(topic_configs(admin), "retention.ms", "86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    ok("legacy AlterConfigs: replaces the set (cleanup.policy back to DEFAULT_CONFIG); "
       "retention.ms=soon refused with INVALID_CONFIG, value unchanged")

    b = ConfigResource(ResourceType.BROKER, "1")
    bcfg = admin.describe_configs([b], request_timeout=10)[b].result(timeout=15)
    e = bcfg.get("num.partitions")
    # run.sh sets num.partitions=3 on the command line: a static broker config.
    expect(e is not None and e.value == "3" and e.is_read_only
           and e.source == ConfigSource.STATIC_BROKER_CONFIG.value,
           f"broker num.partitions: {e and (e.value, ConfigSource(e.source).name, e.is_read_only)}")
    expect("log.retention.ms" in bcfg and not bcfg["log.retention.ms"].is_read_only,
           f"broker log.retention.ms (dynamic, KIP-226): {bcfg.get('log.retention.ms')}")
    b = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("num.partitions", "5", incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([b], request_timeout=10)[b].result(timeout=15)
        err = None
    except KafkaException as e:
        err = e.args[0]
    # Kafka's DynamicBrokerConfig.validateConfigs, answered INVALID_REQUEST (KAFKA-13609).
    expect(err is not None and err.code() == KafkaError.INVALID_REQUEST
           and "Cannot update these configs dynamically: Set(num.partitions)" in err.str(),
           f"altering broker num.partitions: {err and (err.name(), err.str())}")
    # A dynamic broker config: set for broker 1, described as DYNAMIC_BROKER_CONFIG, removed.
    b = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([b], request_timeout=10)[b].result(timeout=15)
    b = ConfigResource(ResourceType.BROKER, "1")
    e = admin.describe_configs([b], request_timeout=10)[b].result(timeout=15).get("log.retention.ms")
    expect(e is not None and e.value == "3600000" and e.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value,
           f"broker log.retention.ms after SET: {e and (e.value, ConfigSource(e.source).name)}")
    b = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([b], request_timeout=10)[b].result(timeout=15)
    ok(f"broker 1 configs ({len(bcfg)} keys): num.partitions=3 STATIC_BROKER_CONFIG read-only, "
       "altering it refused with INVALID_REQUEST; log.retention.ms set and removed dynamically")
    admin.delete_topics([CTOPIC], operation_timeout=10)[CTOPIC].result(timeout=15)


def test_describe_cluster_delete_records_retention(admin):
    """DescribeCluster (cluster id, the one broker, controller); DeleteRecords
    moves the low watermark, a fetch below it is OFFSET_OUT_OF_RANGE (reset to
    the new start, or an error with auto.offset.reset=error), a target past the
    high watermark is refused, -1 means the high watermark; lowering
    retention.ms through IncrementalAlterConfigs deletes the expired segments
    (the active one is rolled) within seconds."""
    md = admin.list_topics(timeout=10)
    broker_id = next(iter(md.brokers))
    c = admin.describe_cluster(request_timeout=10).result(timeout=15)
    expect(c.cluster_id and c.cluster_id == md.cluster_id, f"cluster id {c.cluster_id!r}, metadata {md.cluster_id!r}")
    expect(len(c.nodes) == 1 and c.nodes[0].id == broker_id and c.nodes[0].port == int(ADDR.rsplit(':', 1)[1]),
           f"describe_cluster nodes {[(n.id, n.host, n.port) for n in c.nodes]}")
    expect(c.controller is not None and c.controller.id == broker_id, f"controller {c.controller}")
    ok(f"describe_cluster: cluster id {c.cluster_id}, one broker {broker_id}, which is the controller")

    admin.create_topics([NewTopic(DTOPIC, num_partitions=1, replication_factor=1,
                                  config={"segment.bytes": "1024"})],
                        operation_timeout=10)[DTOPIC].result(timeout=15)
    n = 200
    p = Producer({"bootstrap.servers": ADDR, "acks": "all",
                  "linger.ms": 5, "allow.auto.create.topics": False})
    errors = []
    for i in range(n):
        p.produce(DTOPIC, key=f"k{i}".encode(), value=f"v{i}-".encode() + b"x" * 40,
                  on_delivery=lambda err, m: err and errors.append(err))
        p.poll(0)
    expect(p.flush(30) == 0 and not errors, f"produce to {DTOPIC}: errors {errors[:3]}")
    tp = TopicPartition(DTOPIC, 0)
    probe = Consumer({"bootstrap.servers": ADDR, "group.id": f"unused-{DTOPIC}",
                      "enable.auto.commit": False})
    expect(probe.get_watermark_offsets(tp, timeout=10, cached=False) == (0, n), "watermarks before delete")

    res = admin.delete_records([TopicPartition(DTOPIC, 0, 50)], request_timeout=10)
    low = next(iter(res.values())).result(timeout=15).low_watermark
    expect(low == 50, f"delete_records(50): low watermark {low}")
    wm = probe.get_watermark_offsets(tp, timeout=10, cached=False)
    expect(wm == (50, n), f"watermarks after delete_records(50): {wm}")
    ok(f"delete_records before offset 50: low watermark 50, watermarks {wm}")

    for reset in ("earliest", "error"):
        c = Consumer({"bootstrap.servers": ADDR, "group.id": f"unused-{DTOPIC}", "enable.auto.commit": False,
                      "auto.offset.reset": reset})
        c.assign([TopicPartition(DTOPIC, 0, 10)])
        m = c.poll(10)
        c.close()
        if reset == "earliest":
            expect(m is not None and m.error() is None and m.offset() == 50,
                   f"fetch at 10 with auto.offset.reset=earliest: {m and (m.error(), m.offset())}, expected offset 50")
        else:
            expect(m is not None and m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET
                   and "out of range" in m.error().str().lower(),
                   f"fetch at 10 with auto.offset.reset=error: {m and (m.error(), m.offset())}")
    ok("fetching offset 10 (deleted): reset to 50 with earliest, OFFSET_OUT_OF_RANGE error with reset=error")

    try:
        next(iter(admin.delete_records([TopicPartition(DTOPIC, 0, n + 10)],
                                       request_timeout=10).values())).result(timeout=15)
        raise AssertionError("delete_records past the high watermark succeeded")
    except KafkaException as e:
        expect(e.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE, f"delete_records past the end: {e}")
    expect(probe.get_watermark_offsets(tp, timeout=10, cached=False) == (50, n), "a refused delete moved the start")
    ok("delete_records past the high watermark: OFFSET_OUT_OF_RANGE, nothing deleted")

    err = incremental_alter(admin, [("retention.ms", AlterConfigOpType.SET, "1000")], topic=DTOPIC)
    expect(err is None, f"SET retention.ms=1000: {err}")
    t0 = time.time()
    deadline = t0 + 20
    while True:
        wm = probe.get_watermark_offsets(tp, timeout=10, cached=False)
        if wm == (n, n):
            break
        expect(time.time() < deadline, f"retention.ms=1000: watermarks still {wm} after 20 s (want ({n}, {n}))")
        time.sleep(0.2)
    ok(f"retention.ms lowered to 1000: all {n} records expired, earliest offset = high watermark {n} "
       f"after {time.time() - t0:.1f} s")

    low = next(iter(admin.delete_records([TopicPartition(DTOPIC, 0, -1)], request_timeout=10)
                    .values())).result(timeout=15).low_watermark
    expect(low == n, f"delete_records(-1) on an emptied partition: low watermark {low}")
    probe.close()
    admin.delete_topics([DTOPIC], operation_timeout=10)[DTOPIC].result(timeout=15)

    # librdkafka answers describe_cluster(include_authorized_operations=True)
    # from Metadata v8-10 include_cluster_authorized_operations; Kafka without an
    # authorizer returns every cluster operation there.
    c = admin.describe_cluster(include_authorized_operations=True, request_timeout=10).result(timeout=15)
    ops = {o.name for o in c.authorized_operations or ()}
    expect({"DESCRIBE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"} <= ops,
           f"describe_cluster(include_authorized_operations=True): authorized_operations "
           f"{c.authorized_operations} (Metadata include_cluster_authorized_operations not answered)")
    ok(f"describe_cluster(include_authorized_operations=True): {sorted(ops)}")


def main():
    admin = AdminClient({"bootstrap.servers": ADDR})
    admin_checks(admin)
    msgs = messages()
    reports, per = produce(msgs)
    c, got = consume(msgs, reports, per)
    list_offsets(c, admin, got)
    c.close()
    delete(admin)

    # Consumer groups.
    group_topic(admin)
    survivor, first = test_group_two_members_split_and_failover()
    c3 = test_group_resume_from_committed(survivor, first)
    test_group_admin(admin, c3)

    # Configs, cluster description, DeleteRecords, retention.
    test_topic_configs(admin)
    test_describe_cluster_delete_records_retention(admin)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        # A wrong answer from the broker: say what, without a traceback.
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
