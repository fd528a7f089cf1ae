#!/usr/bin/env python3
"""Commit latency of transactions of 1,000 records (issue 8's figure), through confluent-kafka.

    protocol-tests/bench/txn_commit_latency.py HOST:PORT [TRANSACTIONS]

Per transaction: begin, produce 1,000 records of 100 B to one partition, then time
commit_transaction() alone (flush of the records included, as an application sees it).
Prints p50 / p99 / max in ms over TRANSACTIONS (default 200) after 5 warm-up transactions.
"""
import statistics
import sys
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    addr = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    topic = f"txn-latency-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": addr})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    p = Producer({"bootstrap.servers": addr, "transactional.id": f"lat-{uuid.uuid4().hex}", "linger.ms": 5})
    p.init_transactions(30)
    value = b"x" * 100
    samples = []
    for i in range(count + 5):
        p.begin_transaction()
        for _ in range(1000):
            p.produce(topic, value, partition=0)
        t0 = time.perf_counter()
        p.commit_transaction(30)
        if i >= 5:
            samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    print(f"{count} transactions of 1000 x 100 B: commit p50 {statistics.median(samples):.2f} ms, "
          f"p99 {p99:.2f} ms, max {samples[-1]:.2f} ms")


if __name__ == "__main__":
    main()
