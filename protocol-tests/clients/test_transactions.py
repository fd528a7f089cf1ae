#!/usr/bin/env python3
"""Transactions through confluent-kafka's transactional API (KIP-98, KIP-447;
Kafka's TransactionCoordinator and LSO/aborted-transaction index), with a
consume-transform-produce application (txn_app.py) run as a subprocess.

usage: test_transactions.py HOST:PORT
  environment (set by run.sh): SLUICE_BIN, the broker binary, and
  SLUICE_SERVE_ARGS, the settings run.sh starts its broker with: the
  broker-restart test starts a broker of its own on a data dir of its own, so
  that killing it does not take the other tests' broker down.

- A read_committed consumer stops at the first open transaction (the LSO),
  even before committed records behind it, and once that transaction is
  aborted skips its records and sees the rest.
- The application killed (-9) mid-transaction: its successor with the same
  transactional.id aborts the open transaction; a second instance left hanging
  mid-transaction is fenced by the next one and its commit refused
  (PRODUCER_FENCED); the output read with isolation.level=read_committed holds
  each input record's result exactly once, no record of a transaction aborted
  on purpose or by fencing, and the group's committed offsets are the input's
  end.
- A transaction left open past its transaction.timeout.ms: the coordinator
  aborts it and bumps the epoch; read_committed readers move past it; the
  application's late commit is refused.
- The broker killed (-9) mid-transaction, and again at a moment the application
  does not choose: after each restart on the same data dir the application
  carries on (its transactions committed or aborted and redone) and the same
  exactly-once holds.
"""
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from own_broker import Broker

ADDR = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "txn_app.py")
PARTS = 3


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


# --- helpers ---------------------------------------------------------------------

def create_topics(addr, *names):
    admin = AdminClient({"bootstrap.servers": addr})
    fs = admin.create_topics([NewTopic(t, num_partitions=PARTS, replication_factor=1) for t in names],
                             operation_timeout=10)
    for f in fs.values():
        f.result(timeout=15)


def produce_input(addr, topic, first, n):
    """Records "in-<i>" for i in first..first+n-1, keyed over every partition."""
    p = Producer({"bootstrap.servers": addr, "enable.idempotence": True})
    errors = []
    for i in range(first, first + n):
        p.produce(topic, key=f"k{i % 20}".encode(), value=f"in-{i}".encode(),
                  on_delivery=lambda err, m: err and errors.append(err))
    expect(p.flush(30) == 0 and not errors, f"input produce: errors {errors[:3]}")


def read_all(addr, topic, isolation, timeout=30):
    """Every record of topic from offset 0 to the end (the LSO for
    read_committed, the high watermark otherwise): {partition: [(offset, value)]}."""
    c = Consumer({"bootstrap.servers": addr, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    got = defaultdict(list)
    eof = set()
    deadline = time.time() + timeout
    while len(eof) < PARTS:
        expect(time.time() < deadline, f"{isolation} read of {topic}: no end of partitions "
               f"{sorted(set(range(PARTS)) - eof)} in {timeout} s")
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            expect(m.error().code() == KafkaError._PARTITION_EOF, f"{isolation} read: {m.error()}")
            eof.add(m.partition())
            continue
        eof.discard(m.partition())
        got[m.partition()].append((m.offset(), m.value().decode()))
    c.close()
    return got


class App:
    """txn_app.py as a subprocess; its stdout lines are collected by a thread."""
    started = []  # killed at exit, whatever happened

    def __init__(self, addr, inp, out, group, txn_id, *opts):
        App.started.append(self)
        self.name = f"app({' '.join(opts) or 'plain'})"
        self.proc = subprocess.Popen([sys.executable, APP, addr, inp, out, group, txn_id, *opts],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self.q.put(line)
        self.q.put(None)

    def wait_for(self, prefix, timeout=60):
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            expect(left > 0, f"{self.name}: no {prefix!r} line in {timeout} s; output: {self.lines[-15:]}")
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"{self.name} exited ({self.proc.wait()}) before {prefix!r}; "
                                     f"output: {self.lines[-15:]}")
            if line.startswith(prefix):
                return line

    def resume(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def exit_code(self, timeout=60):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.name} still running after {timeout} s; output: {self.lines[-15:]}")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def count(self, word):
        """Records in this app's COMMIT or ABORT lines."""
        return sum(int(line.split()[2]) for line in self.lines if line.startswith(word + " "))


def committed_offsets(addr, group, topic):
    c = Consumer({"bootstrap.servers": addr, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    res = c.committed([TopicPartition(topic, p) for p in range(PARTS)], timeout=30)
    c.close()
    return {tp.partition: tp.offset for tp in res}


def expect_exactly_once(addr, inp, out, group, n, aborted_min):
    """The output under read_committed: "out-<i>|c" for every i < n exactly once,
    nothing else, offsets increasing; read_uncommitted shows at least
    aborted_min records that read_committed hid; the group's offsets are the
    input's end."""
    rc = read_all(addr, out, "read_committed")
    ru = read_all(addr, out, "read_uncommitted")
    values = [v for recs in rc.values() for _, v in recs]
    for p, recs in rc.items():
        offs = [o for o, _ in recs]
        expect(offs == sorted(set(offs)), f"read_committed p{p}: offsets not strictly increasing {offs[:20]}")
    leaked = [v for v in values if not v.endswith("|c")]
    expect(not leaked, f"read_committed returned {len(leaked)} records of transactions aborted on purpose: "
           f"{leaked[:5]}")
    counts = Counter(int(v[4:-2]) for v in values)
    dups = {i: k for i, k in counts.items() if k > 1}
    missing = sorted(set(range(n)) - set(counts))
    extra = sorted(set(counts) - set(range(n)))
    expect(not dups and not missing and not extra,
           f"output not exactly once: {len(values)} records for {n} inputs; duplicated {dict(list(dups.items())[:5])} "
           f"({len(dups)}), missing {missing[:5]} ({len(missing)}), unknown {extra[:5]}")
    total_ru = sum(len(v) for v in ru.values())
    hidden = total_ru - len(values)
    expect(hidden >= aborted_min, f"read_uncommitted has {total_ru} records, read_committed {len(values)}: "
           f"expected at least {aborted_min} aborted records in the log")
    ends = read_all(addr, inp, "read_uncommitted")
    want = {p: (recs[-1][0] + 1 if recs else 0) for p, recs in ends.items()}
    want.update({p: 0 for p in range(PARTS) if p not in want})
    got = committed_offsets(addr, group, inp)
    expect(got == want, f"group {group} committed {got}, input ends at {want}")
    return len(values), hidden


# --- tests ------------------------------------------------------------------------

def test_read_committed_stops_at_an_open_transaction_and_skips_it_once_aborted():
    """One partition: P1 opens a transaction and writes "open"; P2 then commits
    "after". read_committed sees neither (the LSO is at "open"), read_uncommitted
    both. P1 aborts: read_committed sees "after" only."""
    topic = f"txn-lso-{uuid.uuid4().hex[:8]}"
    create_topics(ADDR, topic)
    base = {"bootstrap.servers": ADDR}
    p1 = Producer({**base, "transactional.id": f"lso-1-{topic}"})
    p2 = Producer({**base, "transactional.id": f"lso-2-{topic}"})
    p1.init_transactions(30)
    p2.init_transactions(30)
    p2.begin_transaction()
    p2.produce(topic, value=b"before", partition=0)
    p2.commit_transaction(30)
    p1.begin_transaction()
    p1.produce(topic, value=b"open", partition=0)
    p1.flush(30)
    p2.begin_transaction()
    p2.produce(topic, value=b"after", partition=0)
    p2.commit_transaction(30)

    def values(isolation):
        return [v for _, v in read_all(ADDR, topic, isolation)[0]]

    rc, ru = values("read_committed"), values("read_uncommitted")
    expect(ru == ["before", "open", "after"], f"read_uncommitted with a transaction open: {ru}")
    expect(rc == ["before"], f"read_committed with a transaction open before 'after': {rc} "
           f"(expected to stop at the LSO, the open transaction's first offset)")
    p1.abort_transaction(30)
    rc = values("read_committed")
    expect(rc == ["before", "after"], f"read_committed after the abort: {rc}")
    ok("read_committed stops at an open transaction (sees 'before', not 'open' nor the committed 'after' "
       "behind it); after the abort it skips 'open' and sees 'after'")


def test_app_killed_mid_transaction_successor_fences_and_output_is_exactly_once():
    """App 1 is killed -9 while its 3rd transaction is open (records flushed,
    offsets added); app 2 (same transactional.id) takes over and hangs in its
    2nd; app 3 fences app 2 and runs to the end; app 2, resumed, is refused.
    Every 4th transaction of each app is aborted on purpose and redone."""
    tag = uuid.uuid4().hex[:8]
    inp, out, group, tid = f"txn-in-{tag}", f"txn-out-{tag}", f"txn-app-{tag}", f"txn-app-{tag}"
    n = 400
    create_topics(ADDR, inp, out)
    produce_input(ADDR, inp, 0, n)

    a1 = App(ADDR, inp, out, group, tid, "--abort-every", "4", "--hang-at", "3")
    hang1 = int(a1.wait_for("HANG").split()[2])
    committed = a1.count("COMMIT")
    rc = read_all(ADDR, out, "read_committed")
    ru = read_all(ADDR, out, "read_uncommitted")
    n_rc, n_ru = sum(map(len, rc.values())), sum(map(len, ru.values()))
    expect(n_rc == committed, f"read_committed sees {n_rc} records with transaction 3 open; "
           f"the app committed {committed} before it")
    expect(n_ru == committed + hang1, f"read_uncommitted sees {n_ru}: expected {committed} committed "
           f"+ {hang1} of the open transaction")
    a1.kill9()
    ok(f"app 1 killed -9 in its transaction 3 ({committed} records committed before it; the open "
       f"transaction's {hang1} records visible only to read_uncommitted)")

    a2 = App(ADDR, inp, out, group, tid, "--abort-every", "4", "--hang-at", "2")
    hang2 = int(a2.wait_for("HANG").split()[2])
    a3 = App(ADDR, inp, out, group, tid, "--abort-every", "4")
    done = a3.wait_for("DONE", timeout=90)
    expect(a3.exit_code() == 0, f"app 3 exit code; output {a3.lines[-10:]}")
    a2.resume()
    code = a2.exit_code()
    fenced = [line for line in a2.lines if line.startswith("FENCED")]
    expect(code == 4 and fenced, f"app 2 (fenced by app 3) resumed and committed: exit {code}, "
           f"output {a2.lines[-5:]}; expected FENCED and exit 4")
    ok(f"app 2 hung in a transaction; app 3 (same transactional.id) ran to the end ({done}); "
       f"app 2's commit then refused: {fenced[0]}")

    aborted = a1.count("ABORT") + a2.count("ABORT") + a3.count("ABORT")
    n_out, hidden = expect_exactly_once(ADDR, inp, out, group, n, aborted + hang1 + hang2)
    expect(hidden == aborted + hang1 + hang2, f"read_uncommitted shows {hidden} records more than "
           f"read_committed; aborted: {aborted} on purpose + {hang1} + {hang2} of the fenced transactions")
    ok(f"read_committed output: each of {n} inputs exactly once ({n_out} records); {hidden} records "
       f"hidden (aborted on purpose: {aborted}, app 1's and app 2's open transactions: {hang1 + hang2}); "
       "group offsets at the input's end")

    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    try:
        d = admin.describe_transactions([tid])[tid]
    finally:
        admin.close()
    expect(d.state.value in ("CompleteCommit", "Empty") and d.producer_epoch >= 2 and not d.topic_partitions,
           f"describe_transactions({tid}): {d}")
    ok(f"DescribeTransactions: {d.state.value}, producer {d.producer_id} epoch {d.producer_epoch} "
       "(bumped by each successor)")


def test_transaction_left_open_past_its_timeout_is_aborted_by_the_coordinator():
    """transaction.timeout.ms=3000 and the app hangs in its 2nd transaction: the
    coordinator aborts it (DescribeTransactions: CompleteAbort, the epoch bumped),
    read_committed readers move past it, the app's late commit does not
    succeed, and the input is still processed exactly once."""
    tag = uuid.uuid4().hex[:8]
    inp, out, group, tid = f"txn-in-{tag}", f"txn-out-{tag}", f"txn-to-{tag}", f"txn-to-{tag}"
    n = 100
    create_topics(ADDR, inp, out)
    produce_input(ADDR, inp, 0, n)
    a1 = App(ADDR, inp, out, group, tid, "--hang-at", "2", "--txn-timeout-ms", "3000")
    hung = int(a1.wait_for("HANG").split()[2])
    t0 = time.time()
    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    try:
        first = admin.describe_transactions([tid])[tid]
        expect(first.state.value == "Ongoing", f"describe_transactions while hung: {first}")
        deadline = t0 + 30
        while True:
            d = admin.describe_transactions([tid])[tid]
            if d.state.value == "CompleteAbort":
                break
            expect(time.time() < deadline, f"transaction not aborted 30 s after it was left open "
                   f"(timeout 3 s): {d}")
            time.sleep(0.1)
    finally:
        admin.close()
    waited = time.time() - t0
    expect(d.producer_epoch > first.producer_epoch, f"epoch not bumped by the abort: {first} -> {d}")
    committed = a1.count("COMMIT")
    rc = sum(map(len, read_all(ADDR, out, "read_committed").values()))
    expect(rc == committed, f"read_committed sees {rc} records after the timeout abort; {committed} committed")
    ok(f"transaction left open (timeout 3000 ms) aborted by the coordinator after {waited:.1f} s: "
       f"CompleteAbort, epoch {first.producer_epoch} -> {d.producer_epoch}; read_committed past it "
       f"({rc} records)")

    a1.resume()
    code = a1.exit_code()
    expect(not any(line.startswith("COMMIT 2 ") for line in a1.lines),
           f"the timed-out transaction committed after its abort: {a1.lines[-5:]}")
    outcome = next((line for line in a1.lines if line.startswith(("ABORT 2 ", "FENCED"))), a1.lines[-1:])
    if code != 0:  # fenced for good: a successor finishes the input
        a2 = App(ADDR, inp, out, group, tid)
        a2.wait_for("DONE")
        expect(a2.exit_code() == 0, f"successor exit code; output {a2.lines[-10:]}")
    n_out, hidden = expect_exactly_once(ADDR, inp, out, group, n, hung)
    ok(f"the app's late commit refused ({outcome}, exit {code}); {n} inputs exactly once, "
       f"{hidden} aborted records hidden")


def test_broker_killed_mid_transaction_exactly_once_after_restart():
    """A broker of the test's own is killed -9 while the app's 3rd transaction
    is open, and restarted on the same data dir and port; the app resumes and
    runs to the end. Then more input, and the broker killed -9 again after the
    app's 3rd commit, wherever the app is. Every 5th transaction is aborted on
    purpose."""
    broker = Broker("sluice-txn-")
    try:
        tag = uuid.uuid4().hex[:8]
        inp, out, group, tid = f"txn-in-{tag}", f"txn-out-{tag}", f"txn-b-{tag}", f"txn-b-{tag}"
        n = 300
        create_topics(broker.addr, inp, out)
        produce_input(broker.addr, inp, 0, n)

        a1 = App(broker.addr, inp, out, group, tid, "--abort-every", "5", "--hang-at", "3")
        a1.wait_for("HANG")
        broker.kill9_and_restart()
        a1.resume()
        a1.wait_for("DONE", timeout=90)
        expect(a1.exit_code() == 0, f"app exit code after the broker restart; output {a1.lines[-10:]}")
        after = [line for line in a1.lines if line.startswith(("COMMIT 3 ", "ABORT 3 "))]
        n_out, hidden = expect_exactly_once(broker.addr, inp, out, group, n, a1.count("ABORT"))
        ok(f"broker killed -9 with the app's transaction 3 open, restarted; the app went on ({after[0]}) "
           f"to the end: {n} inputs exactly once under read_committed, {hidden} aborted records hidden")

        # Again, at a point the app does not choose: after its 3rd commit on new input.
        produce_input(broker.addr, inp, n, n)
        a2 = App(broker.addr, inp, out, group, tid, "--abort-every", "5")
        a2.wait_for("COMMIT 3 ")
        broker.kill9_and_restart()
        a2.wait_for("DONE", timeout=90)
        expect(a2.exit_code() == 0, f"app exit code after the 2nd broker restart; output {a2.lines[-10:]}")
        n_out, hidden = expect_exactly_once(broker.addr, inp, out, group, 2 * n,
                                            a1.count("ABORT") + a2.count("ABORT"))
        errs = [line for line in a2.lines if line.startswith("ABORT ") and " after " in line]
        ok(f"broker killed -9 again while the app was running, restarted: the app went on to the end "
           f"({len(errs)} transactions aborted by errors: {errs[:2]}); {2 * n} inputs exactly once")
    except AssertionError:
        print(f"  broker log ({broker.log.name}), last lines:\n{broker.log_tail()}", flush=True)
        raise
    finally:
        broker.stop()


def main():
    # run.sh's timeout ends us with SIGTERM: still stop the apps and the broker we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("  FAILED: terminated (SIGTERM)"))
    try:
        tests()
    finally:
        for app in App.started:
            if app.proc.poll() is None:
                app.kill9()


def tests():
    test_read_committed_stops_at_an_open_transaction_and_skips_it_once_aborted()
    test_app_killed_mid_transaction_successor_fences_and_output_is_exactly_once()
    test_transaction_left_open_past_its_timeout_is_aborted_by_the_coordinator()
    test_broker_killed_mid_transaction_exactly_once_after_restart()


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, KafkaException) as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
