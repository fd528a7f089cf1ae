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
- A controller_mutation_rate (KIP-599) of 0.5 partitions/s (a bucket of 5.5) for the admin
  clients `py-admin` and `kp-admin`: kafka-python's create_topics (CreateTopics v7, strict)
  creates 20 partitions, then gets ThrottlingQuotaExceededError for one more; confluent-kafka's
  (librdkafka's v4, permissive) creates 20 and is told the throttle time for the 14.5 over.
"""
import sys
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonNewTopic
from kafka.errors import ThrottlingQuotaExceededError
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
    quota = lambda client_id, key, value: E(entity=[E.EntityData(entity_type="client-id", entity_name=client_id)],
                                            ops=[E.OpData(key=key, value=value, remove=False)])
    resp = send(Alter(entries=[quota(THROTTLED, "producer_byte_rate", RATE),
                               quota("py-admin", "controller_mutation_rate", 0.5),
                               quota("kp-admin", "controller_mutation_rate", 0.5)],
                      validate_only=False))
    codes = [e.error_code for e in resp.entries]
    if codes != [0, 0, 0]:
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


def mutation_quota():
    tag = uuid.uuid4().hex[:8]
    strict = KafkaAdminClient(bootstrap_servers=ADDR, client_id="kp-admin")
    strict.create_topics([KafkaPythonNewTopic(f"kp-{tag}-1", 20, 1)])
    try:
        strict.create_topics([KafkaPythonNewTopic(f"kp-{tag}-2", 1, 1)])
        fail("kafka-python: a CreateTopics past the mutation quota was not refused")
    except ThrottlingQuotaExceededError as e:
        print(f"kafka-python: refused past the mutation quota: {str(e)[-140:]}")
    strict.close()
    # (asked by another client: the throttled one waits out its throttle time first)
    other = KafkaAdminClient(bootstrap_servers=ADDR)
    if f"kp-{tag}-2" in other.list_topics() or f"kp-{tag}-1" not in other.list_topics():
        fail("kafka-python: the refused topic exists, or the first does not")
    other.close()
    throttles = []
    permissive = AdminClient({"bootstrap.servers": ADDR, "client.id": "py-admin",
                              "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    for f in permissive.create_topics([NewTopic(f"py-{tag}", 20, 1)]).values():
        f.result(30)
    permissive.poll(1)
    # 14.5 partitions over at 0.5/s: 29 s.
    if not throttles or not 25 <= max(throttles) <= 29:
        fail(f"confluent-kafka: throttle times {throttles}, expected about 29 s")
    print(f"confluent-kafka: created past the mutation quota, throttled {max(throttles)} s")


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
    mutation_quota()
    print("test_quotas: ok")


main()
