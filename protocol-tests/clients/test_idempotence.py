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

Then the same three producers write to a broker of the test's own
(own_broker.py; run.sh exports SLUICE_BIN and SLUICE_SERVE_ARGS) that is killed
-9 twice while they write (when a quarter and a half of their records are
acked) and restarted on the same data dir: the producers retry what was in
flight, and the broker, its producer state rebuilt from the log, must take
every record exactly once, in order (a retried batch that had reached the log
answered with its first offset, not appended again). confluent-kafka gets
batch.num.messages=200 there, so that its requests are small enough for the
kills to find some in flight.
"""
import asyncio
import signal
import sys
import threading
import time
import uuid
from collections import defaultdict

from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from own_broker import Broker

ADDR = sys.argv[1]
N = 2000
PARTS = 3
KEYS = 30  # spread over every partition


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def records(tag, n=N):
    """[(key, value)]: value carries the send index."""
    return [(f"key-{i % KEYS}".encode(), f"{tag}-{i}".encode()) for i in range(n)]


def create_topic(admin, tag):
    topic = f"idem-{tag}-{uuid.uuid4().hex[:8]}"
    admin.create_topics({topic: {"num_partitions": PARTS, "replication_factor": 1}}, timeout_ms=10000)
    return topic


def read_back(topic, tag, acked, addr=ADDR, n=N):
    """Read every partition to its end; check exactly n records, each index
    once, in send order per partition, offsets 0..n-1, matching the acks.
    Returns {partition: record count}."""
    c = KafkaConsumer(bootstrap_servers=addr, group_id=None, enable_auto_commit=False)
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
    expect(total == n and sum(end.values()) == n,
           f"{tag}: read {total} records, high watermarks {end} (sum {sum(end.values())}); sent {n}")
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
    expect(seen == set(range(n)), f"{tag}: indexes read != 0..{n - 1} (missing {sorted(set(range(n)) - seen)[:10]})")
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


NK = 30000  # records per producer in the kill -9 test: enough to be mid-stream at the kills


class Killer(threading.Thread):
    """Kills -9 and restarts `broker` when acked() reaches NK/4, and again at NK/2:
    the producer has batches in flight or queued each time."""

    def __init__(self, broker, acked):
        super().__init__(daemon=True)
        self.broker, self.acked, self.at, self.error = broker, acked, [], None
        self.start()

    def run(self):
        try:
            deadline = time.time() + 60
            for mark in (NK // 4, NK // 2):
                while self.acked() < mark:
                    if time.time() > deadline:
                        raise AssertionError(f"producer stuck at {self.acked()} acks")
                    time.sleep(0.001)
                self.broker.kill9_and_restart()
                self.at.append(self.acked())
        except Exception as e:
            self.error = e

    def finish(self, tag):
        self.join(60)
        expect(not self.is_alive() and self.error is None, f"{tag}: broker killer: {self.error}")
        expect(self.at[1] < NK, f"{tag}: the kills came too late (at {self.at} acks of {NK}): "
               "nothing was left in flight")
        return self.at


def test_producers_survive_broker_kill9_without_duplicates():
    """Each client's idempotent producer (as above) against a broker of the
    test's own, killed -9 and restarted twice while the producer writes NK
    records: all NK read back once each, in order, at the acked offsets;
    DescribeProducers after the restarts lists one producer per partition with
    last_sequence = count - 1."""
    broker = Broker("sluice-idem-")
    admin = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.addr)
        recs = records("kill", NK)

        def verify(tag, topic, acked, at, what):
            expect(len(acked) == NK, f"{tag}: {len(acked)} of {NK} acked")
            counts = read_back(topic, tag, acked, broker.addr, NK)
            expect_producer_state(admin, topic, tag, counts)
            ok(f"{what}, broker killed -9 and restarted at {at[0]} and {at[1]} acks: {NK} records once "
               f"each, in order, at their acked offsets {counts}")

        # kafka-python, default settings.
        topic = create_topic(admin, "kpy-kill")
        p = KafkaProducer(bootstrap_servers=broker.addr)
        acked = {}
        killer = Killer(broker, lambda: len(acked))
        futs = []
        for i, (k, v) in enumerate(recs):
            f = p.send(topic, key=k, value=v)
            f.add_callback(lambda md, i=i: acked.__setitem__(i, (md.partition, md.offset)))
            futs.append(f)
        p.flush(60)
        for f in futs:
            f.get(timeout=60)
        p.close()
        verify("kpy-kill", topic, acked, killer.finish("kafka-python"), "kafka-python default producer")

        # confluent-kafka, enable.idempotence=True.
        topic = create_topic(admin, "cfk-kill")
        # metadata.recovery.strategy=none: see txn_app.py (librdkafka issue 5511).
        # batch.num.messages=200 (librdkafka: 10000): many requests, so that the
        # kills find some in flight rather than the whole topic in one.
        p = Producer({"bootstrap.servers": broker.addr, "enable.idempotence": True,
                      "batch.num.messages": 200, "reconnect.backoff.max.ms": 500,
                      "metadata.recovery.strategy": "none", "log.connection.close": False})
        acked, errors = {}, []
        killer = Killer(broker, lambda: len(acked))

        def cb(i):
            def done(err, m):
                if err is not None:
                    errors.append((i, err))
                else:
                    acked[i] = (m.partition(), m.offset())
            return done

        for i, (k, v) in enumerate(recs):
            p.produce(topic, key=k, value=v, on_delivery=cb(i))
            p.poll(0)
        expect(p.flush(60) == 0, "confluent: records still queued after flush(60)")
        expect(not errors, f"confluent: delivery errors {errors[:3]}")
        verify("cfk-kill", topic, acked, killer.finish("confluent"), "confluent-kafka enable.idempotence=True")

        # aiokafka, enable_idempotence=True. The killer thread only reads len(acked).
        topic = create_topic(admin, "aio-kill")

        async def aio():
            p = AIOKafkaProducer(bootstrap_servers=broker.addr, enable_idempotence=True)
            await p.start()
            acked = {}
            killer = Killer(broker, lambda: len(acked))

            def done(i, f):
                if f.exception() is None:
                    acked[i] = (f.result().partition, f.result().offset)

            try:
                futs = []
                for i, (k, v) in enumerate(recs):
                    f = await p.send(topic, key=k, value=v)
                    f.add_done_callback(lambda f, i=i: done(i, f))
                    futs.append(f)
                await asyncio.wait_for(asyncio.gather(*futs), 60)
            finally:
                await p.stop()
            return acked, killer

        acked, killer = asyncio.run(aio())
        verify("aio-kill", topic, acked, killer.finish("aiokafka"), "aiokafka enable_idempotence=True")
    except AssertionError:
        print(f"  broker log ({broker.log.name}), last lines:\n{broker.log_tail()}", flush=True)
        raise
    finally:
        if admin is not None:
            admin.close()
        broker.stop()


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
    test_producers_survive_broker_kill9_without_duplicates()


if __name__ == "__main__":
    # run.sh's timeout ends us with SIGTERM: still stop the broker we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("  FAILED: terminated (SIGTERM)"))
    try:
        main()
    except AssertionError as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
