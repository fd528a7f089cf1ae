#!/usr/bin/env python3
"""A consume-transform-produce application with confluent-kafka's transactional
API, run as a subprocess by test_transactions.py (it is not a test itself).

usage: txn_app.py HOST:PORT INPUT OUTPUT GROUP TRANSACTIONAL_ID [options]
  --batch N          records per transaction (default 20)
  --abort-every K    abort every K-th transaction on purpose, then redo its input
                     (0: never)
  --hang-at K        in the K-th transaction, after its records are flushed to the
                     output and its offsets added, print HANG and wait for a line on
                     stdin before committing (the test kills the app, the broker, or
                     fences the app meanwhile)
  --txn-timeout-ms T transaction.timeout.ms (default librdkafka's 60000)

For each input record "in-<i>" it writes "out-<i>|c" with the same key to
OUTPUT, and commits the input offsets in the same transaction
(send_offsets_to_transaction), the exactly-once pattern of KIP-98/KIP-447.
Transactions aborted on purpose write "out-<i>|a" instead, so a reader can tell
an aborted record that leaked from a duplicate.

It reads INPUT by assignment (all partitions), not by subscription: a killed
predecessor would otherwise hold up the group for its session timeout. Group
offsets still go through the transaction (generation -1, as Kafka allows for
assigned consumers), and fencing rests on the transactional id alone.

stdout, one line each: READY, COMMIT <txn> <records>, ABORT <txn> <records>,
HANG <txn> <records>, DONE <records committed by this process>, FENCED <error>.
Exits 0 when its position reaches INPUT's end, 4 when fenced, 3 on any other
fatal error.
"""
import argparse
import sys

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

ap = argparse.ArgumentParser()
ap.add_argument("addr")
ap.add_argument("input")
ap.add_argument("output")
ap.add_argument("group")
ap.add_argument("txn_id")
ap.add_argument("--batch", type=int, default=20)
ap.add_argument("--abort-every", type=int, default=0)
ap.add_argument("--hang-at", type=int, default=0)
ap.add_argument("--txn-timeout-ms", type=int, default=60000)
args = ap.parse_args()


def say(line):
    print(line, flush=True)


def fenced(e):
    err = e.args[0]
    return err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def main():
    # metadata.recovery.strategy=none: with every broker down (ours is the only
    # one, killed by the test) librdkafka >= 2.10 otherwise "re-bootstraps" and
    # decommissions the broker it had cached as group coordinator, after which
    # send_offsets_to_transaction waits forever for that broker to come back
    # (librdkafka issues 5511 and 5456: its timeout is not applied).
    # reconnect.backoff.max.ms=1000: reconnect promptly after a broker restart.
    common = {"bootstrap.servers": args.addr, "reconnect.backoff.max.ms": 1000,
              "metadata.recovery.strategy": "none"}
    p = Producer({**common, "transactional.id": args.txn_id,
                  "transaction.timeout.ms": args.txn_timeout_ms})
    c = Consumer({**common, "group.id": args.group, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    # Fences any predecessor with this transactional id and aborts its open
    # transaction before we read the committed offsets (which it may have touched).
    p.init_transactions(60)
    parts = sorted(c.list_topics(args.input, timeout=10).topics[args.input].partitions)
    committed = c.committed([TopicPartition(args.input, q) for q in parts], timeout=30)
    pos = {tp.partition: max(tp.offset, 0) for tp in committed}
    c.assign([TopicPartition(args.input, q, pos[q]) for q in parts])
    say("READY")

    txn = 0
    done = 0
    while True:
        msgs = c.consume(num_messages=args.batch, timeout=0.5)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            end = {q: c.get_watermark_offsets(TopicPartition(args.input, q), timeout=10, cached=False)[1]
                   for q in parts}
            if all(pos[q] >= end[q] for q in parts):
                say(f"DONE {done}")
                return 0
            continue
        txn += 1
        start = dict(pos)
        aborting = args.abort_every and txn % args.abort_every == 0
        tag = "a" if aborting else "c"
        try:
            p.begin_transaction()
            for m in msgs:
                i = m.value().decode().split("-", 1)[1]
                p.produce(args.output, key=m.key(), value=f"out-{i}|{tag}".encode())
                pos[m.partition()] = m.offset() + 1
            retry(lambda: p.send_offsets_to_transaction(
                [TopicPartition(args.input, q, pos[q]) for q in parts], c.consumer_group_metadata(), 30))
            if txn == args.hang_at:
                p.flush(30)
                say(f"HANG {txn} {len(msgs)}")
                sys.stdin.readline()
            if aborting:
                p.flush(30)  # so that the aborted records are in the log, for readers to skip
                p.abort_transaction(30)
            else:
                retry(lambda: p.commit_transaction(30))
                done += len(msgs)
                say(f"COMMIT {txn} {len(msgs)}")
                continue
            say(f"ABORT {txn} {len(msgs)}")
        except KafkaException as e:
            if not e.args[0].txn_requires_abort():
                raise
            # An abortable error (say, the broker restarted under us): abort and
            # redo this input, as the transactional API asks.
            say(f"ABORT {txn} {len(msgs)} after {e.args[0]}")
            retry(lambda: p.abort_transaction(30))
        pos = start
        c.assign([TopicPartition(args.input, q, pos[q]) for q in parts])


def retry(call):
    """call(), again while it fails with a retriable error (at most 10 tries)."""
    for attempt in range(10):
        try:
            return call()
        except KafkaException as e:
            if not e.args[0].retriable() or attempt == 9:
                raise


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KafkaException as e:
        if fenced(e):
            say(f"FENCED {e.args[0]}")
            sys.exit(4)
        say(f"FATAL {e.args[0]}")
        sys.exit(3)
