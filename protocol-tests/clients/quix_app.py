#!/usr/bin/env python3
"""A Quix Streams application, run as a subprocess by test_quixstreams.py (it is
not a test itself): counts records per key with Quix's RocksDB state, whose
changelog topic Quix keeps in Kafka, under processing_guarantee="exactly-once".

usage: quix_app.py HOST:PORT INPUT OUTPUT GROUP STATE_DIR

For each input record (key k, value "<i>") it writes {"i": i, "n": n} with key k
to OUTPUT, n being the count of k's records so far, this one included. Each
record takes a few milliseconds, so that a test can kill the application
while it is in the middle of its input (and of a transaction).
"""
import sys
import time

from quixstreams import Application

addr, inp, out, group, state_dir = sys.argv[1:6]

app = Application(
    broker_address=addr,
    consumer_group=group,
    processing_guarantee="exactly-once",
    auto_offset_reset="earliest",
    state_dir=state_dir,
    commit_interval=0.5,
    # A successor joins the group as soon as the killed member's session ends
    # (6 s is the broker's group.min.session.timeout.ms), not librdkafka's 45 s.
    consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
    # Quix gives each instance a random transactional.id, so nothing fences a
    # killed instance: its open transaction holds the output's LSO (and so
    # read_committed readers) until the coordinator aborts it after
    # transaction.timeout.ms (librdkafka's default: 60 s).
    producer_extra_config={"transaction.timeout.ms": 5000},
    loglevel="INFO",
)
input_topic = app.topic(inp, key_deserializer="str", value_deserializer="str")
output_topic = app.topic(out, key_serializer="str", value_serializer="json")


def count(value, state):
    time.sleep(0.003)
    n = state.get("n", 0) + 1
    state.set("n", n)
    return {"i": int(value), "n": n}


app.dataframe(input_topic).apply(count, stateful=True).to_topic(output_topic)
app.run()
