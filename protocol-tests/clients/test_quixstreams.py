#!/usr/bin/env python3
"""Quix Streams with processing_guarantee="exactly-once" (Kafka transactions
under a stream processor, with its state kept in a changelog topic).

usage: test_quixstreams.py HOST:PORT
  environment (set by run.sh): SLUICE_QUIX_PYTHON, a Python with quixstreams
  installed (Quix pins an older confluent-kafka than the other tests, so it has
  a virtualenv of its own).

quix_app.py counts input records per key (RocksDB state, changelog topic) and
writes each record's running count to an output topic. The test kills it (-9)
twice while it is in the middle of its input: the first successor keeps the
local state directory, the second starts with it deleted, so its counts must
come back from the changelog topic. The output, read with read_committed, must
then hold each input record exactly once with exactly the count it had in input
order: record i of key k carries n = 1 + (records of k before i).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ADDR = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "quix_app.py")
QUIX_PYTHON = os.environ.get("SLUICE_QUIX_PYTHON", sys.executable)
PARTS = 3
N = 1500
KEYS = 10
TAG = uuid.uuid4().hex[:8]
INPUT, OUTPUT, GROUP = f"quix-in-{TAG}", f"quix-out-{TAG}", f"quix-{TAG}"


def ok(what):
    print(f"  ok: {what}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


class QuixApp:
    started = []  # killed at exit, whatever happened

    def __init__(self, state_dir, log):
        QuixApp.started.append(self)
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([QUIX_PYTHON, APP, ADDR, INPUT, OUTPUT, GROUP, state_dir],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.terminate()  # Quix stops cleanly on SIGTERM
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("quix app did not stop within 30 s of SIGTERM")


class Reader:
    """A consumer of OUTPUT from offset 0, polled on demand."""

    def __init__(self, isolation):
        self.c = Consumer({"bootstrap.servers": ADDR, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                           "isolation.level": isolation, "enable.auto.commit": False,
                           "enable.partition.eof": True})
        self.c.assign([TopicPartition(OUTPUT, p, 0) for p in range(PARTS)])
        self.records = []
        self.eof = set()

    def poll(self, seconds):
        """Poll for about `seconds`; returns the record count."""
        end = time.time() + seconds
        while time.time() < end:
            m = self.c.poll(0.2)
            if m is None:
                continue
            if m.error():
                expect(m.error().code() == KafkaError._PARTITION_EOF, f"output read: {m.error()}")
                self.eof.add(m.partition())
                continue
            self.eof.discard(m.partition())
            self.records.append((m.key().decode(), json.loads(m.value())))
        return len(self.records)

    def wait_for(self, n, timeout, app, what):
        deadline = time.time() + timeout
        while self.poll(0.5) < n:
            expect(app.proc.poll() is None, f"quix app exited ({app.proc.returncode}) while {what}; "
                   f"see its log")
            expect(time.time() < deadline, f"{what}: {len(self.records)} of {n} output records "
                   f"after {timeout} s")

    def close(self):
        self.c.close()


def main():
    # run.sh's timeout ends us with SIGTERM: still stop the apps we started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("  FAILED: terminated (SIGTERM)"))
    work = tempfile.mkdtemp(prefix="sluice-quix-")
    state_dir, log = os.path.join(work, "state"), os.path.join(work, "app.log")
    try:
        run(state_dir, log)
    except AssertionError:
        with open(log, errors="replace") as f:
            print("  quix app log, last lines:\n" + "".join("    " + line for line in f.readlines()[-25:]),
                  flush=True)
        raise
    finally:
        for app in QuixApp.started:
            if app.proc.poll() is None:
                app.kill9()
        shutil.rmtree(work, ignore_errors=True)


def run(state_dir, log):
    admin = AdminClient({"bootstrap.servers": ADDR})
    for f in admin.create_topics([NewTopic(t, num_partitions=PARTS, replication_factor=1)
                                  for t in (INPUT, OUTPUT)], operation_timeout=10).values():
        f.result(timeout=15)
    p = Producer({"bootstrap.servers": ADDR, "enable.idempotence": True})
    for i in range(N):
        p.produce(INPUT, key=f"k{i % KEYS}".encode(), value=str(i).encode())
    expect(p.flush(30) == 0, "input still queued after flush(30)")

    # Progress is watched through read_uncommitted (records of the open
    # transaction included): the kills land while a transaction is open.
    live = Reader("read_uncommitted")
    app = QuixApp(state_dir, log)
    live.wait_for(300, 60, app, "first run")
    app.kill9()
    first = live.poll(0)
    ok(f"quix app killed -9 after writing {first} output records (uncommitted ones included)")

    app = QuixApp(state_dir, log)
    live.wait_for(first + 300, 60, app, "second run (local state kept)")
    app.kill9()
    second = live.poll(0)
    shutil.rmtree(state_dir)
    ok(f"successor killed -9 after {second} output records in all; local state dir deleted")

    committed = Reader("read_committed")
    app = QuixApp(state_dir, log)
    committed.wait_for(N, 90, app, "third run (state from the changelog)")
    code = app.stop()
    expect(code == 0, f"quix app exit code {code} after SIGTERM")
    committed.poll(1)  # anything past N shows up here as a duplicate
    committed.close()
    live.poll(1)
    live.close()

    # Exactly once, with exact counts.
    expected_n = {}
    seen = Counter()
    for i in range(N):
        seen[i % KEYS] += 1
        expected_n[i] = seen[i % KEYS]
    got = Counter(v["i"] for _, v in committed.records)
    dups = {i: c for i, c in got.items() if c > 1}
    missing = sorted(set(range(N)) - set(got))
    expect(not dups and not missing and len(committed.records) == N,
           f"read_committed output: {len(committed.records)} records for {N} inputs; duplicated "
           f"{list(dups.items())[:5]} ({len(dups)}), missing {missing[:5]} ({len(missing)})")
    wrong = [(k, v, expected_n[v["i"]]) for k, v in committed.records
             if v["n"] != expected_n[v["i"]] or k != f"k{v['i'] % KEYS}"]
    expect(not wrong, f"{len(wrong)} records with a wrong count (key, record, expected n): {wrong[:5]}")
    finals = {}
    for k, v in committed.records:
        finals[k] = max(finals.get(k, 0), v["n"])
    expect(finals == {f"k{j}": N // KEYS for j in range(KEYS)}, f"final counts {finals}")
    hidden = len(live.records) - N
    topics = admin.list_topics(timeout=10).topics
    changelogs = sorted(t for t in topics if t.startswith("changelog") and GROUP in t)
    expect(changelogs, f"no changelog topic for group {GROUP} among {sorted(topics)[:20]}")
    ok(f"read_committed output: each of {N} inputs exactly once with its exact running count "
       f"(final {N // KEYS} per key); {hidden} records of aborted transactions hidden; "
       f"state restored from {changelogs[0]}")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
