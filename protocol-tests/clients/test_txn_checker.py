#!/usr/bin/env python3
"""A transactional-workload checker in the spirit of Jepsen's Kafka workload
(Jepsen's kafka test: unique values, transactions aborted at random, checked
against what consumers read), with confluent-kafka.

usage: test_txn_checker.py HOST:PORT [SEED]

WRITERS transactional producers (threads, one transactional.id each) write
unique values to PARTS partitions, 1-5 values per transaction on partitions
chosen at random, and abort about 30 % of their transactions (flushed first, so
the aborted records are in the log). The random choices are seeded: the seed is
printed, and passing it again replays the same choices (thread interleaving
differs). Two read_committed consumers read the topic: one while the writers
run, one after. Checked, for each of them:
- every committed value is read exactly once, at the partition and offset its
  delivery report gave;
- no value of an aborted transaction is read;
- offsets are strictly increasing per partition;
and, so that the above is not vacuous, a read_uncommitted consumer finds every
aborted value in the log at its acked offset.
"""
import random
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ADDR = sys.argv[1]
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else random.randrange(1 << 32)
WRITERS = 6
TXNS = 400         # per writer
PARTS = 4
ABORT_P = 0.3
TOPIC = f"jepsen-{uuid.uuid4().hex[:8]}"


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(f"{what} (seed {SEED})")


class Writer(threading.Thread):
    def __init__(self, w):
        super().__init__(name=f"writer-{w}", daemon=True)
        self.w = w
        self.rng = random.Random(SEED * 1000 + w)
        self.committed, self.aborted = set(), set()
        self.acked = {}      # value -> (partition, offset)
        self.errors = []
        self.p = Producer({"bootstrap.servers": ADDR, "transactional.id": f"{TOPIC}-w{w}",
                           "linger.ms": 2})

    def on_delivery(self, err, m):
        if err is not None:
            self.errors.append(f"delivery of {m.value()!r}: {err}")
        else:
            self.acked[m.value().decode()] = (m.partition(), m.offset())

    def run(self):
        try:
            self.p.init_transactions(30)
            for t in range(TXNS):
                values = [f"{self.w}-{t}-{j}" for j in range(self.rng.randint(1, 5))]
                abort = self.rng.random() < ABORT_P
                self.p.begin_transaction()
                for v in values:
                    self.p.produce(TOPIC, value=v.encode(), partition=self.rng.randrange(PARTS),
                                   on_delivery=self.on_delivery)
                if abort:
                    self.p.flush(30)
                    self.p.abort_transaction(30)
                    self.aborted.update(values)
                else:
                    self.p.commit_transaction(30)
                    self.committed.update(values)
                self.p.poll(0)
        except Exception as e:  # checked by the main thread
            self.errors.append(f"{type(e).__name__}: {e}")


live_count = [0]  # records the concurrent reader had read when the writers finished


def read(isolation, stop=None, ends=None, timeout=60):
    """[(partition, offset, value)] from offset 0 of every partition; reads until
    stop is set (if given) and every partition has reported its end at or after
    ends[p] (a callable giving them, once known)."""
    c = Consumer({"bootstrap.servers": ADDR, "group.id": f"checker-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTS)])
    out = []
    at_end = {}
    deadline = time.time() + timeout
    try:
        while True:
            if stop is None or stop.is_set():
                e = ends()
                if all(at_end.get(p, -1) >= e[p] for p in range(PARTS)):
                    return out
            expect(time.time() < deadline, f"{isolation} reader: not at the end after {timeout} s "
                   f"(at {at_end}, end {ends() if stop is None or stop.is_set() else '?'})")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                expect(m.error().code() == KafkaError._PARTITION_EOF, f"{isolation} reader: {m.error()}")
                at_end[m.partition()] = m.offset()
                continue
            out.append((m.partition(), m.offset(), m.value().decode()))
            if stop is not None and not stop.is_set():
                live_count[0] = len(out)
    finally:
        c.close()


def check(name, reads, committed, aborted, acked):
    per = defaultdict(list)
    for p, o, _ in reads:
        per[p].append(o)
    for p, offs in per.items():
        bad = [(a, b) for a, b in zip(offs, offs[1:]) if b <= a]
        expect(not bad, f"{name}: offsets not strictly increasing on partition {p}: {bad[:5]}")
    counts = Counter(v for _, _, v in reads)
    leaked = sorted(v for v in counts if v in aborted)
    expect(not leaked, f"{name}: read {len(leaked)} values of aborted transactions: {leaked[:10]}")
    unknown = sorted(v for v in counts if v not in committed and v not in aborted)
    expect(not unknown, f"{name}: read values nobody wrote: {unknown[:10]}")
    dups = {v: n for v, n in counts.items() if n > 1}
    expect(not dups, f"{name}: {len(dups)} committed values read more than once: {list(dups.items())[:10]}")
    missing = sorted(committed - set(counts))
    expect(not missing, f"{name}: {len(missing)} committed values never read: {missing[:10]}")
    moved = [(v, (p, o), acked[v]) for p, o, v in reads if acked.get(v) != (p, o)]
    expect(not moved, f"{name}: values read elsewhere than acked (value, read, acked): {moved[:5]}")


def main():
    print(f"  seed {SEED} ({WRITERS} writers x {TXNS} transactions, abort p={ABORT_P}, "
          f"{PARTS} partitions)", flush=True)
    admin = AdminClient({"bootstrap.servers": ADDR})
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTS, replication_factor=1)],
                        operation_timeout=10)[TOPIC].result(timeout=15)

    writers = [Writer(w) for w in range(WRITERS)]
    done = threading.Event()
    final = {}
    live = {}

    def ends():
        return final

    def live_reader():
        try:
            live["reads"] = read("read_committed", stop=done, ends=ends, timeout=90)
        except Exception as e:
            live["error"] = e

    reader = threading.Thread(target=live_reader, daemon=True)
    t0 = time.time()
    reader.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join(90)
        expect(not w.is_alive(), f"{w.name} still running after 90 s")
    wall = time.time() - t0
    errors = [e for w in writers for e in w.errors]
    expect(not errors, f"writer errors: {errors[:5]}")
    probe = Consumer({"bootstrap.servers": ADDR, "group.id": f"probe-{TOPIC}"})
    final.update({p: probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1]
                  for p in range(PARTS)})
    probe.close()
    done.set()

    committed = set().union(*(w.committed for w in writers))
    aborted = set().union(*(w.aborted for w in writers))
    acked = {v: pa for w in writers for v, pa in w.acked.items()}
    n_txn_abort = sum(len({v.rsplit("-", 1)[0] for v in w.aborted}) for w in writers)
    expect(not (committed & aborted), "a value both committed and aborted")
    expect(committed <= set(acked), f"committed values without a delivery report: "
           f"{sorted(committed - set(acked))[:5]}")
    ok(f"{WRITERS * TXNS} transactions in {wall:.1f} s: {WRITERS * TXNS - n_txn_abort} committed "
       f"({len(committed)} values), {n_txn_abort} aborted ({len(aborted)} values); end offsets {final}")

    reader.join(90)
    expect(not reader.is_alive(), "concurrent reader still running")
    expect("error" not in live, f"concurrent reader: {live.get('error')}")
    check("concurrent read_committed reader", live["reads"], committed, aborted, acked)
    ok(f"concurrent read_committed reader: {len(live['reads'])} values ({live_count[0]} of them "
       "read before the writers' end offsets were known), each committed value once at its "
       "acked offset, no aborted value, offsets increasing")

    after = read("read_committed", ends=ends)
    check("read_committed reader after the writes", after, committed, aborted, acked)
    ok(f"read_committed reader after the writes: the same ({len(after)} values)")

    raw = read("read_uncommitted", ends=ends)
    raw_at = {v: (p, o) for p, o, v in raw}
    in_log = [v for v in aborted if v in raw_at and raw_at[v] == acked.get(v)]
    expect(len(in_log) == len(aborted), f"read_uncommitted finds {len(in_log)} of {len(aborted)} aborted "
           "values at their acked offsets")
    expect(len(raw) == len(committed) + len(aborted), f"read_uncommitted: {len(raw)} records, "
           f"written {len(committed)} + {len(aborted)}")
    ok(f"read_uncommitted: all {len(aborted)} aborted values are in the log (so read_committed skipped them)")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
