#!/usr/bin/env python3
"""Client quotas through real clients (issue 14).

usage: test_quotas.py HOST:PORT

- kafka-python's own AlterClientQuotas and DescribeClientQuotas encodings (its admin client has
  no quota methods, so the requests go through its protocol classes and its connection to the
  controller): a producer_byte_rate of 100 KB/s for client id `py-throttled`, then described
  back by an exact filter.
- confluent-kafka producers with that client id and with another: the throttled one is told a
  throttle time (librdkafka's throttle_cb, from throttle_time_ms in its Produce responses),
  the other never; both deliver every record.
"""
import sys
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest as Alter
from kafka.protocol.admin import DescribeClientQuotasRequest as Describe

ADDR = sys.argv[1]
THROTTLED = "py-throttled"
RATE = 100_000.0


def fail(reason):
    print(f"test_quotas: FAIL: {reason}")
    sys.exit(1)


def alter_and_describe():
    admin = KafkaAdminClient(bootstrap_servers=ADDR)
    send = lambda req: admin._manager.run(admin._send_request_to_controller, req)
    E = Alter.EntryData
    resp = send(Alter(entries=[E(entity=[E.EntityData(entity_type="client-id", entity_name=THROTTLED)],
                                 ops=[E.OpData(key="producer_byte_rate", value=RATE, remove=False)])],
                      validate_only=False))
    codes = [e.error_code for e in resp.entries]
    if codes != [0]:
        fail(f"AlterClientQuotas answered {codes}")
    resp = send(Describe(components=[Describe.ComponentData(entity_type="client-id", match_type=0,
                                                            match=THROTTLED)], strict=False))
    seen = [([(p.entity_type, p.entity_name) for p in e.entity], [(v.key, v.value) for v in e.values])
            for e in resp.entries]
    if resp.error_code != 0 or seen != [([("client-id", THROTTLED)], [("producer_byte_rate", RATE)])]:
        fail(f"DescribeClientQuotas answered {resp.error_code} {seen}")
    admin.close()
    print(f"kafka-python: quota set and described: {seen}")


def produce(client_id, topic, count, size):
    throttles = []
    delivered = []
    p = Producer({"bootstrap.servers": ADDR, "client.id": client_id, "linger.ms": 5,
                  "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    value = b"q" * size
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda err, msg: delivered.append(err))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(60)
    if left or any(e is not None for e in delivered) or len(delivered) != count:
        fail(f"{client_id}: {len(delivered)} of {count} delivered, {left} left, errors "
             f"{[e for e in delivered if e is not None][:3]}")
    return throttles


def main():
    alter_and_describe()
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": ADDR})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    # 1.2 MB against 100 KB/s: over the 1 MB a new client may send in its first 10 s.
    throttles = produce(THROTTLED, topic, 1200, 1000)
    if not throttles or max(throttles) <= 0:
        fail(f"the throttled producer was told no throttle time: {throttles}")
    free = produce("py-free", topic, 1200, 1000)
    if any(t > 0 for t in free):
        fail(f"the producer without a quota was throttled: {free}")
    print(f"confluent-kafka: throttled {len(throttles)} times (longest {max(throttles)} s); "
          f"the other client never")
    print("test_quotas: ok")


main()
