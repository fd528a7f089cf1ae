#!/usr/bin/env python3
"""kafka-python (pure Python) against a Sluice broker.

usage: test_kafka_python.py HOST:PORT

First the broker version kafka-python infers from ApiVersions (4.3) and the
features it describes; then the scenario of test_confluent.py through
kafka-python's own protocol code: KafkaAdminClient create/delete topics (incl.
error codes), keyed produce with
acks=all, consumption by explicit assignment (group_id=None), ListOffsets via
beginning_offsets / end_offsets / offsets_for_times; then consumer groups:
a subscribed member consuming and committing, a second member splitting the
partitions, and the KafkaAdminClient group APIs (list/describe/delete groups,
list and delete group offsets); then topic configs (describe with sources and
synonyms, incremental and legacy alter, INVALID_CONFIG for bad values and
unknown keys, read-only broker configs), DescribeCluster, DescribeLogDirs,
DeleteRecords and a lowered retention.ms taking effect; then transactions
(commit, abort, send_offsets_to_transaction, read_committed).

api_version is left to auto-detection (from ApiVersions): kafka-python then
picks each request's version from what the broker advertises, which is the
behaviour we want to exercise. Producers keep kafka-python 3's defaults, so they
are idempotent (InitProducerId, sequence numbers); test_idempotence.py checks
that they really are.
"""
import sys
import threading
import time
import uuid
from collections import defaultdict

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import (GroupSubscribedToTopicError, InvalidConfigurationError, InvalidTopicError,
                          NoError, OffsetOutOfRangeError, TopicAlreadyExistsError,
                          UnknownTopicOrPartitionError)

ADDR = sys.argv[1]
N = 1000
PARTS = 3
TOPIC = f"kpy-{uuid.uuid4().hex[:8]}"
TS0 = int(time.time() * 1000) - 3_600_000  # explicit, increasing CreateTimes
# Consumer-group scenario: its own 4-partition topic and group.
GTOPIC = f"kpy-grp-{uuid.uuid4().hex[:8]}"
GROUP = f"kpy-group-{uuid.uuid4().hex[:8]}"
GPARTS = 4


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
    p = KafkaProducer(bootstrap_servers=ADDR, acks="all", linger_ms=5)
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


# --- consumer groups -----------------------------------------------------------

class Member(threading.Thread):
    """One group member: a KafkaConsumer subscribed to GTOPIC, polled on its
    own thread (a KafkaConsumer must not be shared between threads, and two
    members polled in turn from one thread would each block in JoinGroup
    waiting for the other). Commits synchronously after every non-empty poll.
    Records and the current assignment are published under a lock."""

    def __init__(self, name):
        super().__init__(name=name, daemon=True)
        self.records = []          # (partition, offset, value, assignment at the time)
        self.assigned = []
        self.error = None
        self.lock = threading.Lock()
        self.stop_evt = threading.Event()
        self.c = KafkaConsumer(bootstrap_servers=ADDR, group_id=GROUP, client_id=name,
                               session_timeout_ms=6000, heartbeat_interval_ms=500,
                               enable_auto_commit=False, auto_offset_reset="earliest")

    def run(self):
        try:
            self.c.subscribe([GTOPIC])
            while not self.stop_evt.is_set():
                batch = self.c.poll(timeout_ms=200)
                assigned = sorted(tp.partition for tp in self.c.assignment())
                with self.lock:
                    self.assigned = assigned
                    for tp, recs in batch.items():
                        self.records.extend((r.partition, r.offset, r.value, assigned) for r in recs)
                if batch:
                    self.c.commit()  # OffsetCommit of the positions, synchronous
        except Exception as e:  # reported by the main thread
            self.error = e
        finally:
            self.c.close()  # LeaveGroup

    def snapshot(self):
        expect(self.error is None, f"{self.name}: {self.error!r}")
        with self.lock:
            return list(self.assigned), list(self.records)

    def stop(self):
        self.stop_evt.set()
        self.join(15)
        expect(not self.is_alive(), f"{self.name} did not stop")
        expect(self.error is None, f"{self.name}: {self.error!r}")


def produce_group(n, tag):
    """n records to GTOPIC over every partition; {(partition, offset): value}."""
    p = KafkaProducer(bootstrap_servers=ADDR, acks="all", linger_ms=5)
    futs = [(f"{tag}-{i}".encode(), p.send(GTOPIC, key=f"gk-{i % 40}".encode(), value=f"{tag}-{i}".encode()))
            for i in range(n)]
    p.flush(30)
    acked = {}
    for v, f in futs:
        md = f.get(timeout=30)
        acked[(md.partition, md.offset)] = v
    p.close()
    expect({part for part, _ in acked} == set(range(GPARTS)),
           f"group records landed on only {sorted({part for part, _ in acked})}")
    return acked


def wait_for(cond, what, timeout=30):
    deadline = time.time() + timeout
    while not cond():
        expect(time.time() < deadline, f"{what} (waited {timeout} s)")
        time.sleep(0.1)


def committed(probe):
    """Committed offsets of GROUP per partition, by OffsetFetch from a consumer
    that has the group id but never joins (committed() needs no membership)."""
    return {p: probe.committed(TopicPartition(GTOPIC, p)) for p in range(GPARTS)}


def end_offsets(probe):
    return {tp.partition: o for tp, o in
            probe.end_offsets([TopicPartition(GTOPIC, p) for p in range(GPARTS)]).items()}


def test_group_subscribe_consume_commit(admin, probe):
    """One member subscribes (group_id, JoinGroup/SyncGroup), gets all 4
    partitions, consumes every record once and commits; committed() then
    equals the end offsets."""
    admin.create_topics({GTOPIC: {"num_partitions": GPARTS, "replication_factor": 1}}, timeout_ms=10000)
    wait_for(lambda: len(probe.partitions_for_topic(GTOPIC) or ()) == GPARTS,
             f"{GTOPIC} not in metadata with {GPARTS} partitions")
    acked = produce_group(200, "first")
    m1 = Member("kpy-m1")
    m1.start()
    wait_for(lambda: len(m1.snapshot()[1]) >= len(acked),
             f"m1 consumed {len(m1.snapshot()[1])} of {len(acked)}")
    time.sleep(1)  # catch redeliveries
    assigned, recs = m1.snapshot()
    expect(assigned == list(range(GPARTS)), f"sole member should own all partitions: {assigned}")
    keys = [(p, o) for p, o, _, _ in recs]
    expect(len(keys) == len(set(keys)) == len(acked), f"m1 consumed {len(keys)} ({len(set(keys))} distinct)")
    expect({(p, o): v for p, o, v, _ in recs} == acked, "m1 consumed records differ from those produced")
    end = end_offsets(probe)
    wait_for(lambda: committed(probe) == end, f"committed {committed(probe)} != end offsets {end}", 10)
    ok(f"KafkaConsumer(group_id) subscribe: sole member owns {assigned}, consumed {len(acked)} "
       f"exactly once, committed = end offsets {end}")
    return m1, acked


def test_group_second_member_splits(probe, m1, first):
    """A second member joins: the 4 partitions are split between the two (each
    owned by exactly one), new records are consumed exactly once across both,
    and nothing committed before the rebalance is consumed again."""
    m2 = Member("kpy-m2")
    m2.start()

    def split():
        a1, a2 = m1.snapshot()[0], m2.snapshot()[0]
        return a1 and a2 and sorted(a1 + a2) == list(range(GPARTS))
    wait_for(split, f"partitions not split: m1 {m1.snapshot()[0]}, m2 {m2.snapshot()[0]}")
    a1, a2 = m1.snapshot()[0], m2.snapshot()[0]
    ok(f"second member joined: partitions split m1 {a1}, m2 {a2}")

    n1 = len(m1.snapshot()[1])
    acked = produce_group(100, "second")
    wait_for(lambda: len(m1.snapshot()[1]) - n1 + len(m2.snapshot()[1]) >= len(acked),
             f"new records consumed: m1 {len(m1.snapshot()[1]) - n1}, m2 {len(m2.snapshot()[1])} "
             f"of {len(acked)}")
    time.sleep(1)
    new = [(m, r) for m, rs in (("m1", m1.snapshot()[1][n1:]), ("m2", m2.snapshot()[1])) for r in rs]
    again = [(m, p, o) for m, (p, o, _, _) in new if (p, o) in first]
    expect(not again, f"committed records consumed again after the rebalance: {again[:5]}")
    keys = [(p, o) for _, (p, o, _, _) in new]
    expect(len(keys) == len(set(keys)), f"records consumed twice across the members: {len(keys) - len(set(keys))}")
    expect({(p, o): v for _, (p, o, v, _) in new} == acked, "consumed records differ from those produced")
    outside = [(m, p, asg) for m, (p, _, _, asg) in new if p not in asg]
    expect(not outside, f"records from partitions outside the member's assignment: {outside[:3]}")
    expect((m1.snapshot()[0], m2.snapshot()[0]) == (a1, a2),
           f"assignment changed: m1 {m1.snapshot()[0]}, m2 {m2.snapshot()[0]}")
    end = end_offsets(probe)
    wait_for(lambda: committed(probe) == end, f"committed {committed(probe)} != end offsets {end}", 10)
    by = {m: sum(1 for x, _ in new if x == m) for m in ("m1", "m2")}
    ok(f"{len(acked)} new records consumed exactly once across both (m1 {by['m1']}, m2 {by['m2']}), "
       f"none of the committed ones again; committed = end offsets {end}")
    return m2


def test_group_admin(admin, probe, members):
    """KafkaAdminClient group APIs: list_groups (+ state filter), describe_groups,
    list_group_offsets, delete_group_offsets (OffsetDelete: refused while a
    member subscribes to the topic, then allowed), delete_groups
    (NonEmptyGroupError while live, OK when empty, then gone)."""
    end = end_offsets(probe)
    listed = {g["group_id"]: g for g in admin.list_groups()}
    expect(GROUP in listed, f"list_groups: {GROUP} missing from {sorted(listed)}")
    g = listed[GROUP]
    expect(g.get("protocol_type") == "consumer" and g.get("group_state", "Stable") == "Stable",
           f"list_groups entry {g}")
    stable = [x["group_id"] for x in admin.list_groups(states_filter=["Stable"])]
    empty = [x["group_id"] for x in admin.list_groups(states_filter=["Empty"])]
    expect(GROUP in stable and GROUP not in empty, f"state filter: Stable {stable}, Empty {empty}")
    ok("ListGroups: live group listed (consumer protocol, Stable); states_filter honoured")

    d = admin.describe_groups([GROUP])[GROUP]
    expect(d["error"] is None and d["group_state"] == "Stable" and d["protocol_type"] == "consumer"
           and d["protocol_data"] in ("range", "roundrobin", "sticky"), f"describe_groups: {d}")
    ms = {m["client_id"]: m for m in d["members"]}
    expect(sorted(ms) == sorted(x.name for x in members), f"describe_groups members {sorted(ms)}")
    owned = []
    for x in members:
        m = ms[x.name]
        expect(m["member_id"].startswith(x.name) and m["client_host"], f"member {m}")
        expect(m["member_metadata"]["topics"] == [GTOPIC], f"member subscription {m['member_metadata']}")
        parts = [p for a in m["member_assignment"]["assigned_partitions"] if a["topic"] == GTOPIC
                 for p in a["partitions"]]
        expect(sorted(parts) == x.snapshot()[0], f"{x.name}: described assignment {parts}, "
               f"consumer has {x.snapshot()[0]}")
        owned += parts
    expect(sorted(owned) == list(range(GPARTS)), f"described assignments overlap or miss: {owned}")
    ok(f"DescribeGroups: Stable, {d['protocol_data']}, members {sorted(ms)} with their "
       "subscriptions and disjoint assignments")

    offs = admin.list_group_offsets({GROUP: None})[GROUP]
    expect({tp.partition: om.offset for tp, om in offs.items() if tp.topic == GTOPIC} == end,
           f"list_group_offsets {offs} != end offsets {end}")
    ok(f"list_group_offsets (OffsetFetch, all partitions) = {end}")

    res = admin.delete_groups([GROUP])
    expect(res == {GROUP: "NonEmptyGroupError"}, f"delete_groups on a live group: {res}")
    tp0 = TopicPartition(GTOPIC, 0)
    res = admin.delete_group_offsets(GROUP, [tp0])
    expect(res == {tp0: GroupSubscribedToTopicError}, f"delete_group_offsets on a subscribed topic: {res}")
    ok("live group: delete_groups gives NonEmptyGroupError, delete_group_offsets gives "
       "GroupSubscribedToTopicError")

    for x in members:
        x.stop()
    d = admin.describe_groups([GROUP])[GROUP]
    expect(d["group_state"] == "Empty" and not d["members"], f"after both left: {d}")
    expect(GROUP in [x["group_id"] for x in admin.list_groups(states_filter=["Empty"])],
           "list_groups(states_filter=Empty) misses the now empty group")
    res = admin.delete_group_offsets(GROUP, [tp0])
    expect(res == {tp0: NoError}, f"delete_group_offsets on the empty group: {res}")
    offs = admin.list_group_offsets({GROUP: None})[GROUP]
    left = {tp.partition: om.offset for tp, om in offs.items() if tp.topic == GTOPIC}
    expect(left == {p: o for p, o in end.items() if p != 0}, f"after OffsetDelete of p0: {left}")
    ok(f"empty group: described Empty; delete_group_offsets (OffsetDelete) removed p0, left {left}")

    res = admin.delete_groups([GROUP])
    expect(res == {GROUP: "OK"}, f"delete_groups on the empty group: {res}")
    expect(GROUP not in [x["group_id"] for x in admin.list_groups()], "deleted group still listed")
    res = admin.delete_groups([GROUP])
    expect(res == {GROUP: "GroupIdNotFoundError"}, f"deleting a deleted group: {res}")
    ok("delete_groups on the empty group: OK, gone from list_groups; again: GroupIdNotFoundError")
    admin.delete_topics([GTOPIC], timeout_ms=10000)

# --- configs, cluster, DeleteRecords, retention ----------------------------------

CTOPIC = f"kpy-cfg-{uuid.uuid4().hex[:8]}"  # configs set, described, altered
DTOPIC = f"kpy-del-{uuid.uuid4().hex[:8]}"  # DescribeLogDirs, DeleteRecords, retention.ms


def topic_configs(admin, topic=CTOPIC, keys=None):
    """{key: entry} of one topic, every key (config_filter='all'), with synonyms."""
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, keys)],
                                 include_synonyms=True, config_filter="all")
    return res["topic"][topic]


def alter(admin, configs, topic=CTOPIC, **kw):
    """alter_configs of one topic resource; the per-resource result ('OK' or the error text)."""
    return admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)], **kw)["topic"][topic]


def expect_config(cfg, key, value, source):
    e = cfg.get(key)
    expect(e is not None, f"describe_configs: {key} missing")
    expect((e["value"], e["config_source"], e["read_only"]) == (value, source, False),
           f"{key}: {e}; expected value {value!r}, {source}, writable")
    return e


def expect_invalid_config(res, key, what):
    # kafka-python renders a resource's error as "[Error 40] InvalidConfigurationError: <message>"
    expect(res.startswith(f"[Error {InvalidConfigurationError.errno}] InvalidConfigurationError")
           and key in res.split(":", 1)[-1],
           f"{what}: expected INVALID_CONFIG (40) with a message naming {key!r}, got {res!r}")


def test_topic_configs(admin):
    """Topic configs through KafkaAdminClient: set at CreateTopics, described
    with sources and synonyms; alter_configs through IncrementalAlterConfigs
    (kafka-python 3 picks it when the broker advertises it: SET, APPEND,
    DELETE, SUBTRACT, validate_only) and through legacy AlterConfigs
    (incremental=False); invalid values and unknown keys refused with
    INVALID_CONFIG naming the key, values unchanged; broker configs described
    read-only and refused for alter."""
    admin.create_topics([NewTopic(CTOPIC, 1, 1, topic_configs={
        "retention.ms": "3600000", "cleanup.policy": "delete", "segment.ms": "86400000"})], timeout_ms=10000)
    cfg = topic_configs(admin)
    e = expect_config(cfg, "retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "cleanup.policy", "delete", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "segment.ms", "86400000", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "retention.bytes", "-1", "DEFAULT_CONFIG")
    expect_config(cfg, "max.message.bytes", "1048588", "DEFAULT_CONFIG")
    expect(e["config_type"] == "LONG", f"retention.ms type {e['config_type']}")
    syn = [(s["name"], s["source"]) for s in e["synonyms"]]
    expect(len(syn) >= 2 and syn[0] == ("retention.ms", "DYNAMIC_TOPIC_CONFIG")
           and all(n.startswith("log.retention.") for n, _ in syn[1:]) and syn[-1][1] == "DEFAULT_CONFIG",
           f"retention.ms synonyms {syn}")
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, CTOPIC)])["topic"][CTOPIC]
    expect(sorted(modified) == ["cleanup.policy", "retention.ms", "segment.ms"],
           f"describe_configs (default filter: modified only) {sorted(modified)}")
    only = topic_configs(admin, keys=["retention.ms", "retention.bytes"])
    expect(sorted(only) == ["retention.bytes", "retention.ms"], f"describe_configs of two keys: {sorted(only)}")
    ok(f"CreateTopics with configs; DescribeConfigs: set keys DYNAMIC_TOPIC_CONFIG, others "
       f"DEFAULT_CONFIG ({len(cfg)} keys), synonyms {[n for n, _ in syn]}, modified filter, key subset")

    # incremental=None: kafka-python uses IncrementalAlterConfigs when ApiVersions lists
    # it; APPEND and DELETE would raise ValueError on the legacy path.
    res = alter(admin, {"retention.ms": "7200000", "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
                        "segment.ms": (AlterConfigOp.DELETE, None)})
    expect(res == "OK", f"alter_configs SET/APPEND/DELETE: {res}")
    cfg = topic_configs(admin)
    expect_config(cfg, "retention.ms", "7200000", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "cleanup.policy", "delete,compact", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "segment.ms", "604800000", "DEFAULT_CONFIG")
    res = alter(admin, {"cleanup.policy": (AlterConfigOp.SUBTRACT, "delete")})
    expect(res == "OK", f"alter_configs SUBTRACT: {res}")
    expect_config(topic_configs(admin), "cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG")
    res = alter(admin, {"retention.ms": "1"}, validate_only=True)
    expect(res == "OK", f"validate_only: {res}")
    expect_config(topic_configs(admin), "retention.ms", "7200000", "DYNAMIC_TOPIC_CONFIG")
    ok("alter_configs (IncrementalAlterConfigs): SET retention.ms, APPEND/SUBTRACT cleanup.policy, "
       "DELETE segment.ms back to DEFAULT_CONFIG; validate_only stores nothing")

    # kafka-python fills in the other modified keys itself before a legacy AlterConfigs
    # (which resets omitted keys), so cleanup.policy must survive.
    res = alter(admin, {"retention.ms": "86400000"}, incremental=False)
    expect(res == "OK", f"legacy alter_configs: {res}")
    cfg = topic_configs(admin)
    expect_config(cfg, "retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG")
    ok("alter_configs(incremental=False) (AlterConfigs): retention.ms set, cleanup.policy kept")

    bad = [({"retention.ms": "soon"}, "retention.ms", {}),
           ({"retention.ms": "soon"}, "retention.ms", {"incremental": False}),
           ({"retention.ms": "soon"}, "retention.ms", {"validate_only": True}),
           ({"no.such.config": "1"}, "no.such.config", {"raise_on_unknown": False}),
           ({"no.such.config": "1"}, "no.such.config", {"raise_on_unknown": False, "incremental": False}),
           ({"retention.ms": "1000", "cleanup.policy": "sometimes"}, "cleanup.policy", {})]
    for configs, key, kw in bad:
        res = alter(admin, configs, **kw)
        expect_invalid_config(res, key, f"alter_configs {configs} {kw}")
    cfg = topic_configs(admin)
    expect_config(cfg, "retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG")
    expect_config(cfg, "cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG")
    expect("no.such.config" not in cfg, "the refused unknown key was stored")
    try:
        alter(admin, {"no.such.config": "1"})
        raise AssertionError("alter_configs with an unknown key passed kafka-python's own check")
    except ValueError:
        pass  # kafka-python checks keys against describe_configs (dynamic) first
    ok(f"invalid value / unknown key (incremental, legacy, validate_only, a bad entry beside a good one): "
       f"{res!r}; stored values unchanged")

    res = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")],
                                 include_synonyms=True, config_filter="all")["broker"]["1"]
    e = res.get("num.partitions")
    expect(e is not None and e["value"] == "3" and e["read_only"] and e["config_source"] == "STATIC_BROKER_CONFIG",
           f"broker num.partitions: {e}")
    res2 = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {"num.partitions": "5"})],
                               raise_on_unknown=False)["broker"]["1"]
    # Kafka's DynamicBrokerConfig.validateConfigs, answered INVALID_REQUEST (KAFKA-13609).
    expect("Error 42" in str(res2) and "Cannot update these configs dynamically: Set(num.partitions)" in str(res2),
           f"altering broker num.partitions: expected INVALID_REQUEST (42), got {res2!r}")
    ok(f"broker 1 configs ({len(res)} keys): num.partitions=3 STATIC_BROKER_CONFIG read-only; "
       f"alter refused: {res2!r}")
    # Eligible leader replicas are on (Kafka 4.1's default): one min.insync.replicas for the
    # whole cluster, the static value written as the cluster default; a broker's own is refused.
    expect_config(topic_configs(admin), "min.insync.replicas", "1", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    res3 = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "1", {"min.insync.replicas": "2"})],
                               raise_on_unknown=False)["broker"]["1"]
    expect("Error 40" in str(res3)
           and "Broker-level min.insync.replicas cannot be altered while ELR is enabled." in str(res3),
           f"a broker-level min.insync.replicas: expected INVALID_CONFIG (40), got {res3!r}")
    ok(f"min.insync.replicas=1 DYNAMIC_DEFAULT_BROKER_CONFIG; broker-level refused: {res3!r}")
    admin.delete_topics([CTOPIC], timeout_ms=10000)


def test_log_dirs_delete_records_retention(admin):
    """DescribeCluster; DescribeLogDirs (the data dir, partition sizes, disk
    totals); DeleteRecords moves the start offset, a fetch below it resets to
    it (or raises OffsetOutOfRangeError with auto_offset_reset='none'), a
    target past the end is refused; lowering retention.ms through
    alter_configs deletes expired segments within seconds."""
    c = admin.describe_cluster()
    expect(c["cluster_id"] and len(c["brokers"]) == 1 and c["controller_id"] == c["brokers"][0]["broker_id"]
           and c["brokers"][0]["port"] == int(ADDR.rsplit(':', 1)[1]), f"describe_cluster {c}")
    expect({"DESCRIBE", "ALTER_CONFIGS"} <= set(c.get("authorized_operations") or ()), f"describe_cluster {c}")
    ok(f"describe_cluster (DescribeCluster): cluster id {c['cluster_id']}, broker {c['controller_id']} "
       f"is the controller, operations {c['authorized_operations']}")

    admin.create_topics([NewTopic(DTOPIC, 2, 1, topic_configs={"segment.bytes": "1024"})], timeout_ms=10000)
    n = 200
    p = KafkaProducer(bootstrap_servers=ADDR, acks="all", linger_ms=5)
    for f in [p.send(DTOPIC, key=f"k{i}".encode(), value=f"v{i}-".encode() + b"x" * 40, partition=0)
              for i in range(n)]:
        f.get(timeout=30)
    p.close()
    tp = TopicPartition(DTOPIC, 0)

    dirs = admin.describe_log_dirs([DTOPIC])
    expect(len(dirs) == 1 and len(dirs[0]["log_dirs"]) == 1, f"describe_log_dirs: {dirs}")
    d = dirs[0]["log_dirs"][0]
    sizes = {(t["name"], x["partition_index"]): x["partition_size"] for t in d["topics"] for x in t["partitions"]}
    expect(d["error_code"] == 0 and d["log_dir"] and set(sizes) == {(DTOPIC, 0), (DTOPIC, 1)},
           f"describe_log_dirs entry {d}")
    expect(sizes[(DTOPIC, 0)] > n * 40 and sizes[(DTOPIC, 1)] == 0, f"partition sizes {sizes}")
    expect(d.get("total_bytes", 1) > 0 and 0 <= d.get("usable_bytes", 0) <= d.get("total_bytes", 1),
           f"describe_log_dirs totals {d}")
    ok(f"describe_log_dirs: one dir {d['log_dir']}, p0 {sizes[(DTOPIC, 0)]} bytes, empty p1 0 bytes")

    probe = KafkaConsumer(bootstrap_servers=ADDR, group_id=None)
    res = admin.delete_records({tp: 50})
    expect(res[tp]["low_watermark"] == 50 and res[tp]["error_code"] == 0, f"delete_records(50): {res}")
    expect((probe.beginning_offsets([tp])[tp], probe.end_offsets([tp])[tp]) == (50, n),
           "beginning/end offsets after delete_records(50)")
    ok(f"delete_records before offset 50: low watermark 50, end {n}")

    c = KafkaConsumer(bootstrap_servers=ADDR, group_id=None, auto_offset_reset="earliest")
    c.assign([tp])
    c.seek(tp, 10)
    recs = []
    deadline = time.time() + 15
    while not recs and time.time() < deadline:
        recs = c.poll(timeout_ms=500).get(tp, [])
    c.close()
    expect(recs and recs[0].offset == 50, f"fetch at 10 with auto_offset_reset=earliest: first offset "
           f"{recs and recs[0].offset}, expected 50")
    c = KafkaConsumer(bootstrap_servers=ADDR, group_id=None, auto_offset_reset="none")
    c.assign([tp])
    c.seek(tp, 10)
    raised = None
    deadline = time.time() + 15
    while raised is None and time.time() < deadline:
        try:
            got = c.poll(timeout_ms=500)
            expect(not got, f"fetch at 10 (deleted) returned records {got}")
        except OffsetOutOfRangeError as e:
            raised = e
    c.close()
    expect(raised is not None, "fetch at 10 with auto_offset_reset='none': no OffsetOutOfRangeError in 15 s")
    ok("fetching offset 10 (deleted): reset to 50 with earliest; OffsetOutOfRangeError with 'none'")

    try:
        admin.delete_records({tp: n + 10})
        raise AssertionError("delete_records past the end succeeded")
    except OffsetOutOfRangeError:
        pass
    expect(probe.beginning_offsets([tp])[tp] == 50, "a refused delete_records moved the start")
    ok("delete_records past the end: OffsetOutOfRangeError, nothing deleted")

    res = alter(admin, {"retention.ms": "1000"}, topic=DTOPIC)
    expect(res == "OK", f"alter_configs retention.ms=1000: {res}")
    t0 = time.time()
    wait_for(lambda: probe.beginning_offsets([tp])[tp] == n,
             f"retention.ms=1000: beginning offset {probe.beginning_offsets([tp])[tp]}, want {n}", 20)
    expect(probe.end_offsets([tp])[tp] == n, "end offset changed by retention")
    dirs = admin.describe_log_dirs({DTOPIC: [0]})
    size = dirs[0]["log_dirs"][0]["topics"][0]["partitions"][0]["partition_size"]
    ok(f"retention.ms lowered to 1000: beginning offset moved to the end ({n}) after "
       f"{time.time() - t0:.1f} s; p0 now {size} bytes")
    probe.close()
    admin.delete_topics([DTOPIC], timeout_ms=10000)


def broker_version_and_features(admin):
    """kafka-python infers the broker's release from the ApiVersions table
    (infer_broker_version_from_api_versions: DescribeLogDirs v5, KIP-1066, means
    4.3; ListOffsets v11 4.2, Produce v13 4.1) and reads the
    KIP-584 features of ApiVersions v3+ (describe_features): Sluice's are
    group.version 1 (KIP-848 groups) and transaction.version 2 (KIP-890 part 2),
    and eligible.leader.replicas.version 1 (KIP-966), as Kafka 4.1 finalizes
    them, and share.version 1 (KIP-932 share groups), as
    Kafka 4.2 does (see src/api/api_versions.rs)."""
    version = admin._manager.broker_version
    print(f"  info: kafka-python detected broker version {version}", flush=True)
    expect(version == (4, 3), f"kafka-python infers Kafka 4.3 from ApiVersions, not {version}")
    ok("broker version inferred as 4.3")
    features = admin.describe_features()
    expected = {
        "group.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 4},
        "transaction.version": {"supported": (0, 2), "finalized": (2, 2), "finalized_epoch": 4},
        "eligible.leader.replicas.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 4},
        "share.version": {"supported": (0, 1), "finalized": (1, 1), "finalized_epoch": 4},
    }
    expect(features == expected, f"describe_features: {features}")
    ok("features: group.version 1, transaction.version 2, eligible.leader.replicas.version 1, share.version 1 (epoch 4)")


def test_transactions(admin):
    """A transactional producer (KIP-98) consuming, transforming and producing: one
    transaction aborted, two committed, the second with the input's offsets
    (send_offsets_to_transaction with the consumer's group metadata, KIP-447). A
    read_committed consumer sees exactly the committed records, read_uncommitted all of
    them, and the group's committed offset is the one the transaction carried."""
    topic, out = f"kpy-txn-in-{uuid.uuid4().hex[:8]}", f"kpy-txn-out-{uuid.uuid4().hex[:8]}"
    group = f"kpy-txn-group-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(t, 1, 1) for t in (topic, out)])
    src = KafkaProducer(bootstrap_servers=ADDR)
    for i in range(10):
        src.send(topic, f"in-{i}".encode())
    src.flush()
    src.close()
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=ADDR, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    c.assign([tp])
    inputs = []
    deadline = time.time() + 30
    while len(inputs) < 10 and time.time() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            inputs.extend(recs)
    expect(len(inputs) == 10, f"read {len(inputs)} of 10 inputs")
    p = KafkaProducer(bootstrap_servers=ADDR, transactional_id=f"kpy-txn-{uuid.uuid4().hex[:8]}")
    p.init_transactions()
    p.begin_transaction()
    for r in inputs[:5]:
        p.send(out, b"out-" + r.value)
    p.commit_transaction()
    p.begin_transaction()
    for r in inputs[5:]:
        p.send(out, b"aborted-" + r.value)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    for r in inputs[5:]:
        p.send(out, b"out-" + r.value)
    p.send_offsets_to_transaction({tp: OffsetAndMetadata(10, "", -1)}, c.group_metadata())
    p.commit_transaction()
    p.close()
    c.close()

    def read(isolation, want):
        rc = KafkaConsumer(bootstrap_servers=ADDR, isolation_level=isolation, auto_offset_reset="earliest")
        rc.assign([TopicPartition(out, 0)])
        got, deadline = [], time.time() + 30
        while len(got) < want and time.time() < deadline:
            for recs in rc.poll(timeout_ms=200).values():
                got.extend(r.value.decode() for r in recs)
        # Anything past `want` is a record that should not be there: one more poll to see it.
        for recs in rc.poll(timeout_ms=1000).values():
            got.extend(r.value.decode() for r in recs)
        rc.close()
        return got

    committed_values = read("read_committed", 10)
    expect(committed_values == [f"out-in-{i}" for i in range(10)], f"read_committed read {committed_values}")
    expect(len(read("read_uncommitted", 15)) == 15, "read_uncommitted sees the 5 aborted records too")
    offsets = admin.list_group_offsets({group: None})[group]
    expect(offsets.get(tp) is not None and offsets[tp].offset == 10, f"the transaction's offset commit: {offsets}")
    ok("transactions: commit, abort, send_offsets_to_transaction with the consumer's group metadata; "
       "read_committed sees the 10 committed, read_uncommitted 15; the group's offset is 10")
    admin.delete_topics([topic, out])


def main():
    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    broker_version_and_features(admin)
    admin_checks(admin)
    msgs = messages()
    reports, per = produce(msgs)
    c, got = consume(msgs, reports, per)
    list_offsets(c, got)
    c.close()
    delete(admin)

    # Consumer groups.
    probe = KafkaConsumer(bootstrap_servers=ADDR, group_id=GROUP, enable_auto_commit=False)
    m1, first = test_group_subscribe_consume_commit(admin, probe)
    m2 = test_group_second_member_splits(probe, m1, first)
    test_group_admin(admin, probe, [m1, m2])
    probe.close()

    # Configs, cluster description, log dirs, DeleteRecords, retention.
    test_topic_configs(admin)
    test_log_dirs_delete_records_retention(admin)
    test_transactions(admin)
    admin.close()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        # A wrong answer from the broker: say what, without a traceback.
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
