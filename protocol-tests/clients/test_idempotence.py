#!/usr/bin/env python3
"""Idempotent producers as applications configure them: a client's default, or
its one flag (KIP-98; Kafka's ProducerStateManager).

usage: test_idempotence.py HOST:PORT

- kafka-python 3.x's default KafkaProducer (no settings at all: 3.x turns
  enable_idempotence on by default, and silently turns it off again when the
  broker looks older than 0.11 or a setting conflicts; the test asserts it
  stayed on and that the producer got a producer id);
- confluent-kafka with enable.idempotence=True;
- aiokafka with enable_idempotence=True.

Each writes N keyed records to its own 3-partition topic. Then DescribeProducers
(through kafka-python's admin) must list that producer on every partition with
last_sequence = (records it wrote there) - 1: the batches really carried a
producer id and sequences, and the broker tracked them. Reading the topic back
gives exactly N records, each once, in send order per partition, at offsets
0..n-1.
"""
import asyncio
import sys
import time
import uuid
from collections import defaultdict

from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

ADDR = sys.argv[1]
N = 2000
PARTS = 3
KEYS = 30  # spread over every partition


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def records(tag):
    """[(key, value)]: value carries the send index."""
    return [(f"key-{i % KEYS}".encode(), f"{tag}-{i}".encode()) for i in range(N)]


def create_topic(admin, tag):
    topic = f"idem-{tag}-{uuid.uuid4().hex[:8]}"
    admin.create_topics({topic: {"num_partitions": PARTS, "replication_factor": 1}}, timeout_ms=10000)
    return topic


def read_back(topic, tag, acked):
    """Read every partition to its end; check exactly N records, each index
    once, in send order per partition, offsets 0..n-1, matching the acks.
    Returns {partition: record count}."""
    c = KafkaConsumer(bootstrap_servers=ADDR, group_id=None, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(PARTS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    end = {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    got = defaultdict(list)
    deadline = time.time() + 30
    while any(len(got[p]) < end[p] for p in range(PARTS)) and time.time() < deadline:
        for tp, recs in c.poll(timeout_ms=500).items():
            got[tp.partition].extend(recs)
    c.close()
    total = sum(len(v) for v in got.values())
    expect(total == N and sum(end.values()) == N,
           f"{tag}: read {total} records, high watermarks {end} (sum {sum(end.values())}); sent {N}")
    seen = set()
    for p in range(PARTS):
        offs = [r.offset for r in got[p]]
        expect(offs == list(range(end[p])), f"{tag} p{p}: offsets {offs[:10]}... not 0..{end[p] - 1}")
        idx = [int(r.value.rsplit(b"-", 1)[1]) for r in got[p]]
        expect(idx == sorted(idx), f"{tag} p{p}: records out of send order: {idx[:20]}...")
        for r, i in zip(got[p], idx):
            expect(r.key == f"key-{i % KEYS}".encode(), f"{tag} p{p}@{r.offset}: key {r.key!r} for index {i}")
            expect(acked.get(i) == (p, r.offset),
                   f"{tag}: record {i} read at p{p}@{r.offset}, acked at {acked.get(i)}")
        seen.update(idx)
    expect(seen == set(range(N)), f"{tag}: indexes read != 0..{N - 1} (missing {sorted(set(range(N)) - seen)[:10]})")
    counts = {p: len(got[p]) for p in range(PARTS)}
    expect(all(counts.values()), f"{tag}: keys landed on only some partitions {counts}")
    return counts


def expect_producer_state(admin, topic, tag, counts, pid=None):
    """DescribeProducers: one active producer per partition, with a real
    producer id (the client's, when it tells us) and last_sequence = count - 1."""
    tps = [TopicPartition(topic, p) for p in range(PARTS)]
    states = admin.describe_producers(tps)
    pids = set()
    for tp in tps:
        active = states[tp].active_producers
        expect(len(active) == 1, f"{tag} p{tp.partition}: DescribeProducers lists {active}, expected one producer")
        ps = active[0]
        expect(ps.producer_id >= 0 and ps.producer_epoch >= 0, f"{tag} p{tp.partition}: {ps}")
        expect(ps.last_sequence == counts[tp.partition] - 1,
               f"{tag} p{tp.partition}: last_sequence {ps.last_sequence}, wrote {counts[tp.partition]} records")
        expect(ps.current_transaction_start_offset == -1, f"{tag} p{tp.partition}: open transaction? {ps}")
        pids.add(ps.producer_id)
    expect(len(pids) == 1, f"{tag}: different producer ids across partitions {pids}")
    if pid is not None:
        expect(pids == {pid}, f"{tag}: broker lists producer {pids}, the client holds {pid}")
    return pids.pop()


def test_kafka_python_default_producer_is_idempotent(admin):
    """kafka-python 3.x: KafkaProducer with nothing but bootstrap_servers."""
    topic = create_topic(admin, "kpy")
    p = KafkaProducer(bootstrap_servers=ADDR)
    expect(p.config["enable_idempotence"] is True,
           "kafka-python's default producer turned idempotence off (it does so for brokers it "
           f"takes for older than 0.11: api_version {p.config['api_version']})")
    futs = [(i, p.send(topic, key=k, value=v)) for i, (k, v) in enumerate(records("kpy"))]
    p.flush(30)
    acked = {}
    for i, f in futs:
        md = f.get(timeout=30)
        acked[i] = (md.partition, md.offset)
    pid_epoch = p._transaction_manager.producer_id_and_epoch
    p.close()
    expect(pid_epoch.producer_id >= 0, f"kafka-python producer has no producer id: {pid_epoch}")
    counts = read_back(topic, "kpy", acked)
    pid = expect_producer_state(admin, topic, "kpy", counts, pid_epoch.producer_id)
    ok(f"kafka-python default producer: producer id {pid} epoch {pid_epoch.epoch}; {N} records read back "
       f"once each, in order {counts}; DescribeProducers last_sequence = count - 1 per partition")
    return pid


def test_confluent_enable_idempotence(admin):
    """confluent-kafka (librdkafka) with enable.idempotence=True, nothing else."""
    topic = create_topic(admin, "cfk")
    p = Producer({"bootstrap.servers": ADDR, "enable.idempotence": True})
    acked, errors = {}, []

    def cb(i):
        def done(err, m):
            if err is not None:
                errors.append((i, err))
            else:
                acked[i] = (m.partition(), m.offset())
        return done

    for i, (k, v) in enumerate(records("cfk")):
        p.produce(topic, key=k, value=v, on_delivery=cb(i))
        p.poll(0)
    expect(p.flush(30) == 0, "confluent: records still queued after flush(30)")
    expect(not errors and len(acked) == N, f"confluent: {len(acked)} acked, errors {errors[:3]}")
    counts = read_back(topic, "cfk", acked)
    pid = expect_producer_state(admin, topic, "cfk", counts)
    ok(f"confluent-kafka enable.idempotence=True: producer id {pid}; {N} records read back once each, "
       f"in order {counts}; DescribeProducers last_sequence = count - 1 per partition")
    return pid


async def aiokafka_produce(topic):
    p = AIOKafkaProducer(bootstrap_servers=ADDR, enable_idempotence=True)
    await p.start()
    try:
        futs = [await p.send(topic, key=k, value=v) for k, v in records("aio")]
        mds = await asyncio.wait_for(asyncio.gather(*futs), 30)
        pid = p._txn_manager.producer_id
    finally:
        await p.stop()
    return {i: (md.partition, md.offset) for i, md in enumerate(mds)}, pid


def test_aiokafka_enable_idempotence(admin):
    """aiokafka with enable_idempotence=True, nothing else."""
    topic = create_topic(admin, "aio")
    acked, client_pid = asyncio.run(aiokafka_produce(topic))
    expect(client_pid is not None and client_pid >= 0, f"aiokafka producer has no producer id: {client_pid}")
    counts = read_back(topic, "aio", acked)
    pid = expect_producer_state(admin, topic, "aio", counts, client_pid)
    ok(f"aiokafka enable_idempotence=True: producer id {pid}; {N} records read back once each, "
       f"in order {counts}; DescribeProducers last_sequence = count - 1 per partition")
    return pid


def main():
    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    try:
        pids = [test_kafka_python_default_producer_is_idempotent(admin),
                test_confluent_enable_idempotence(admin),
                test_aiokafka_enable_idempotence(admin)]
        expect(len(set(pids)) == 3, f"producer ids reissued across producers: {pids}")
        ok(f"three producers, three distinct producer ids {pids}")
    finally:
        admin.close()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
