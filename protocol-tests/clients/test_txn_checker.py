#!/usr/bin/env python3
"""A transactional-workload checker in the spirit of Jepsen's Kafka workload
(Jepsen's kafka test: unique values, transactions aborted at random, checked
against what consumers read), with confluent-kafka.

usage: test_txn_checker.py HOST:PORT [SEED]
  environment (set by run.sh): SLUICE_BIN and SLUICE_SERVE_ARGS, for the
  second phase's broker of its own (see own_broker.py).

Transactional producers (threads, one transactional.id each) write unique
values to PARTS partitions, 1-5 values per transaction on partitions chosen at
random, and abort about 30 % of their transactions (flushed first, so the
aborted records are in the log). The random choices are seeded: the seed is
printed, and passing it again replays the same choices (thread interleaving
and fault timing differ).

Phase 1, on run.sh's broker: no faults, so no client error is allowed. A
read_committed consumer reads while the writers run, another after them.
Phase 2, on a broker of the test's own, killed -9 3 times while the writers run
(after a seeded number of finished transactions) and restarted on the same data
dir: writers handle errors as the transactional API asks (abort on an abortable
error, a new producer with the same transactional.id after a fatal one). A
transaction whose commit returned is committed, one whose abort returned is
aborted; one cut short by a fatal error is indeterminate (Jepsen's "info").

Checked, for every read_committed reader:
- every committed value is read exactly once, at the partition and offset its
  delivery report gave;
- no value of an aborted transaction is read; an indeterminate one at most once;
- offsets are strictly increasing per partition;
and, so that the above is not vacuous, a read_uncommitted reader finds every
acked aborted value in the log at its acked offset.
"""
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from own_broker import Broker

ADDR = sys.argv[1]
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else random.randrange(1 << 32)
PARTS = 4
ABORT_P = 0.3


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(f"{what} (seed {SEED})")


class Writer(threading.Thread):
    """One transactional.id writing `txns` transactions to `topic`. With
    faults=False any client error is recorded as a failure; with faults=True
    errors are handled as a transactional application must."""

    def __init__(self, addr, topic, w, txns, faults, progress):
        super().__init__(name=f"writer-{w}", daemon=True)
        self.addr, self.topic, self.w, self.txns, self.faults = addr, topic, w, txns, faults
        self.progress = progress  # shared Counter of finished transactions, under its lock
        self.rng = random.Random(SEED * 1000 + w + (500 if faults else 0))
        self.committed, self.aborted, self.indeterminate = set(), set(), set()
        self.acked = {}      # value -> (partition, offset)
        self.errors = []     # phase 1: any of these fails the test
        self.handled = Counter()  # phase 2: errors handled, by kind
        self.p = None

    def new_producer(self):
        # metadata.recovery.strategy=none: see txn_app.py (librdkafka issue 5511).
        self.p = Producer({"bootstrap.servers": self.addr, "transactional.id": f"{self.topic}-w{self.w}",
                           "linger.ms": 2, "reconnect.backoff.max.ms": 500,
                           "metadata.recovery.strategy": "none", "log.connection.close": False})
        self.retry(lambda: self.p.init_transactions(30))

    def on_delivery(self, err, m):
        if err is None:
            self.acked[m.value().decode()] = (m.partition(), m.offset())
        elif not self.faults:
            self.errors.append(f"delivery of {m.value()!r}: {err}")

    def retry(self, call):
        for attempt in range(20):
            try:
                return call()
            except KafkaException as e:
                if not e.args[0].retriable() or attempt == 19:
                    raise
                self.handled["retriable"] += 1

    def run(self):
        try:
            self.new_producer()
            for t in range(self.txns):
                self.one(t)
                with self.progress[1]:
                    self.progress[0]["txns"] += 1
                self.p.poll(0)
        except Exception as e:  # reported by the main thread
            self.errors.append(f"{type(e).__name__}: {e}")

    def one(self, t):
        values = [f"{self.w}-{t}-{j}" for j in range(self.rng.randint(1, 5))]
        parts = [self.rng.randrange(PARTS) for _ in values]
        abort = self.rng.random() < ABORT_P
        try:
            self.p.begin_transaction()
            for v, part in zip(values, parts):
                self.p.produce(self.topic, value=v.encode(), partition=part, on_delivery=self.on_delivery)
            if abort:
                self.p.flush(30)
                self.retry(lambda: self.p.abort_transaction(30))
                self.aborted.update(values)
            else:
                self.retry(lambda: self.p.commit_transaction(30))
                self.committed.update(values)
            return
        except KafkaException as e:
            err = e.args[0]
            if not self.faults:
                raise
            if err.txn_requires_abort():
                self.handled["abortable"] += 1
                try:
                    self.retry(lambda: self.p.abort_transaction(30))
                    self.aborted.update(values)
                    return
                except KafkaException as e2:
                    err = e2.args[0]
            # Fatal (or abort impossible): the outcome is unknown; a new
            # producer with the same transactional.id fences this one and
            # finishes (or aborts) its transaction.
            self.handled[f"fatal {err.name()}"] += 1
            self.indeterminate.update(values)
            self.new_producer()


def read(addr, topic, isolation, ends, stop=None, timeout=60, live_count=None):
    """[(partition, offset, value)] from offset 0 of every partition; reads until
    stop is set (if given) and every partition has reported its end at or after
    ends[p] (ends: filled in once the writers are done)."""
    c = Consumer({"bootstrap.servers": addr, "group.id": f"checker-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "reconnect.backoff.max.ms": 500,
                  "metadata.recovery.strategy": "none", "log.connection.close": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    out = []
    at_end = {}
    deadline = time.time() + timeout
    try:
        while True:
            if stop is None or stop.is_set():
                if all(at_end.get(p, -1) >= ends[p] for p in range(PARTS)):
                    return out
            expect(time.time() < deadline, f"{isolation} reader: not at the end after {timeout} s "
                   f"(at {at_end}, end {ends or '?'})")
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                # A broker restart shows up as transport errors; the consumer reconnects.
                expect(m.error().code() in (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT,
                                            KafkaError._ALL_BROKERS_DOWN),
                       f"{isolation} reader: {m.error()}")
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end[m.partition()] = m.offset()
                continue
            out.append((m.partition(), m.offset(), m.value().decode()))
            if live_count is not None and not (stop and stop.is_set()):
                live_count[0] = len(out)
    finally:
        c.close()


def check(name, reads, committed, aborted, indeterminate, acked):
    per = defaultdict(list)
    for p, o, _ in reads:
        per[p].append(o)
    for p, offs in per.items():
        bad = [(a, b) for a, b in zip(offs, offs[1:]) if b <= a]
        expect(not bad, f"{name}: offsets not strictly increasing on partition {p}: {bad[:5]}")
    counts = Counter(v for _, _, v in reads)
    leaked = sorted(v for v in counts if v in aborted)
    expect(not leaked, f"{name}: read {len(leaked)} values of aborted transactions: {leaked[:10]}")
    unknown = sorted(v for v in counts if v not in committed and v not in aborted and v not in indeterminate)
    expect(not unknown, f"{name}: read values nobody wrote: {unknown[:10]}")
    dups = {v: n for v, n in counts.items() if n > 1}
    expect(not dups, f"{name}: {len(dups)} values read more than once: {list(dups.items())[:10]}")
    missing = sorted(committed - set(counts))
    expect(not missing, f"{name}: {len(missing)} committed values never read: {missing[:10]}")
    moved = [(v, (p, o), acked.get(v)) for p, o, v in reads if v in committed and acked.get(v) != (p, o)]
    expect(not moved, f"{name}: values read elsewhere than acked (value, read, acked): {moved[:5]}")
    return sum(1 for v in counts if v in indeterminate)


def workload(label, addr, writers_n, txns, faults, kill_at=(), broker=None):
    """Runs the writers and a concurrent read_committed reader; kills and restarts
    `broker` when the finished-transaction count reaches each of kill_at. Then
    checks the readers. Returns a summary line."""
    topic = f"jepsen-{uuid.uuid4().hex[:8]}"
    quiet = {"bootstrap.servers": addr, "log.connection.close": False}
    admin = AdminClient(quiet)
    admin.create_topics([NewTopic(topic, num_partitions=PARTS, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)
    progress = (Counter(), threading.Lock())
    writers = [Writer(addr, topic, w, txns, faults, progress) for w in range(writers_n)]
    done = threading.Event()
    ends = {}
    live, live_count = {}, [0]

    def live_reader():
        try:
            live["reads"] = read(addr, topic, "read_committed", ends, stop=done, timeout=120,
                                 live_count=live_count)
        except Exception as e:
            live["error"] = e

    reader = threading.Thread(target=live_reader, daemon=True)
    t0 = time.time()
    reader.start()
    for w in writers:
        w.start()
    kills = []
    for k in kill_at:
        while True:
            with progress[1]:
                n = progress[0]["txns"]
            if n >= k or not any(w.is_alive() for w in writers):
                break
            expect(time.time() < t0 + 90, f"{label}: writers stuck at {n} transactions")
            time.sleep(0.01)
        broker.kill9_and_restart()
        kills.append(n)
    for w in writers:
        w.join(max(1, t0 + 120 - time.time()))
        expect(not w.is_alive(), f"{label}: {w.name} still running after 120 s")
    wall = time.time() - t0
    errors = [e for w in writers for e in w.errors]
    expect(not errors, f"{label}: writer errors: {errors[:5]}")
    probe = Consumer({**quiet, "group.id": f"probe-{topic}"})
    ends.update({p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                 for p in range(PARTS)})
    probe.close()
    done.set()

    committed = set().union(*(w.committed for w in writers))
    aborted = set().union(*(w.aborted for w in writers))
    indeterminate = set().union(*(w.indeterminate for w in writers))
    acked = {v: pa for w in writers for v, pa in w.acked.items()}
    handled = sum((w.handled for w in writers), Counter())
    expect(not (committed & aborted), f"{label}: a value both committed and aborted")
    expect(committed <= set(acked), f"{label}: committed values without a delivery report: "
           f"{sorted(committed - set(acked))[:5]}")
    ok(f"{label}: {writers_n * txns} transactions in {wall:.1f} s: {len(committed)} values committed, "
       f"{len(aborted)} aborted, {len(indeterminate)} indeterminate"
       + (f"; broker killed -9 after {kills} transactions; client errors handled {dict(handled)}"
          if kill_at else "") + f"; end offsets {ends}")

    reader.join(120)
    expect(not reader.is_alive(), f"{label}: concurrent reader still running")
    expect("error" not in live, f"{label}: concurrent reader: {live.get('error')}")
    ind_live = check(f"{label}: concurrent read_committed reader", live["reads"], committed, aborted,
                     indeterminate, acked)
    after = read(addr, topic, "read_committed", ends)
    ind_after = check(f"{label}: read_committed reader after the writes", after, committed, aborted,
                      indeterminate, acked)
    expect(sorted(after) == sorted(live["reads"]),
           f"{label}: the concurrent and the later reader read different records")
    ok(f"{label}: two read_committed readers ({live_count[0]} of {len(live['reads'])} records read "
       f"before the writers' end offsets were known): each committed value once at its acked offset, "
       f"no aborted value, {ind_after} of {len(indeterminate)} indeterminate values read (once), "
       "offsets increasing")

    raw = read(addr, topic, "read_uncommitted", ends)
    raw_at = {v: (p, o) for p, o, v in raw}
    acked_aborted = [v for v in aborted if v in acked]
    in_log = [v for v in acked_aborted if raw_at.get(v) == acked[v]]
    expect(acked_aborted and len(in_log) == len(acked_aborted),
           f"{label}: read_uncommitted finds {len(in_log)} of {len(acked_aborted)} acked aborted values "
           "at their acked offsets")
    ok(f"{label}: read_uncommitted finds all {len(acked_aborted)} acked aborted values in the log "
       f"(so read_committed skipped them); {ind_live} indeterminate read by the concurrent reader")


def main():
    print(f"  seed {SEED}", flush=True)
    # Phase 1: run.sh's broker, no faults.
    workload("no faults", ADDR, writers_n=6, txns=400, faults=False)
    # Phase 2: a broker of our own, killed -9 three times at seeded points.
    rng = random.Random(SEED)
    kill_at = [rng.randint(50, 250)]
    for _ in range(2):
        kill_at.append(kill_at[-1] + rng.randint(150, 350))
    broker = Broker("sluice-jepsen-")
    try:
        workload("broker killed", broker.addr, writers_n=4, txns=300, faults=True,
                 kill_at=kill_at, broker=broker)
    except AssertionError:
        print(f"  broker log ({broker.log.name}), last lines:\n{broker.log_tail()}", flush=True)
        raise
    finally:
        broker.stop()


if __name__ == "__main__":
    # run.sh's timeout ends us with SIGTERM: still stop the broker we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("  FAILED: terminated (SIGTERM)"))
    try:
        main()
    except AssertionError as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
