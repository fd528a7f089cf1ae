#!/usr/bin/env python3
"""Sarama, the Go client (Debian's golang-github-shopify-sarama-dev 1.22), with its
idempotent producer: a third implementation of KIP-98 beside librdkafka's and the Python
clients', on the oldest versions Kafka 4 still serves (Produce v3, InitProducerId v0,
Fetch v4, JoinGroup v1, OffsetCommit v2, OffsetFetch v1).

usage: test_sarama.py HOST:PORT

Builds sarama/main.go (GOPATH mode, offline: Debian's Go sources), which creates a topic,
writes 20,000 records with Producer.Idempotent, reads them back through a consumer group and
checks its committed offsets (see main.go). Then DescribeProducers (kafka-python's admin)
must list one producer on every partition with last_sequence = (records written there) - 1:
Sarama's batches carried a producer id and sequences, and the broker tracked them.
"""
import os
import subprocess
import sys
import tempfile
import uuid

from kafka import KafkaAdminClient

# The same check as for the other idempotent producers (one producer per partition, its
# last_sequence = records written there - 1, no open transaction).
from test_idempotence import expect, expect_producer_state

ADDR = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def build(out):
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOFLAGS="")
    env.setdefault("GOCACHE", os.path.join(tempfile.gettempdir(), "sluice-go-cache"))
    r = subprocess.run(["go", "build", "-o", out, "main.go"], cwd=os.path.join(HERE, "sarama"),
                       env=env, capture_output=True, text=True, timeout=170)
    # cgo warns about a deprecated zstd function; only the exit status matters.
    expect(r.returncode == 0, f"go build: {r.stderr[-2000:]}")


def main():
    topic = f"sarama-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "sarama-test")
        build(exe)
        r = subprocess.run([exe, ADDR, topic], capture_output=True, text=True, timeout=150)
    sys.stdout.write("".join(f"  {line}\n" for line in r.stdout.splitlines()))
    expect(r.returncode == 0, f"sarama test: {r.stderr.strip()}")
    last = r.stdout.splitlines()[-1].split()
    expect(last[0] == "records", f"no record counts in {last}")
    counts = {int(p): int(n) for p, n in (kv.split("=") for kv in last[1:])}
    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    try:
        pid = expect_producer_state(admin, topic, "sarama", counts)
        print(f"  ok: DescribeProducers: producer {pid} on every partition, "
              f"last_sequence = records - 1 {counts}", flush=True)
        admin.delete_topics([topic], timeout_ms=10000)
    finally:
        admin.close()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"  FAILED: {e}", flush=True)
        sys.exit(1)
