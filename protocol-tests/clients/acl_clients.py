"""The clients test_acl.sh drives, one step per call: `acl_clients.py ADDR STEP [ARG...]`.

Each step prints one line saying what it saw and exits 0, or exits non-zero with the reason.
ACL admin calls use kafka-python's KafkaAdminClient (its create_acls / describe_acls /
delete_acls are what the check is about); producing, consuming and Metadata use confluent-kafka,
whose errors carry Kafka's codes. Every principal logs in with SASL/PLAIN as User:<name>, the
password being "<name>-secret" (the broker's JAAS line).

The bindings (Kafka 4.x / StandardAuthorizer semantics are what the expectations follow):
  ALLOW User:alice WRITE on TOPIC PREFIXED orders-       (implies DESCRIBE on orders-*)
  ALLOW User:alice READ  on GROUP LITERAL  g-alice       (implies DESCRIBE on the group)
  ALLOW User:alice READ  on TOPIC LITERAL  orders-1
  DENY  User:alice ALL   on TOPIC LITERAL  orders-secret (beats the prefixed ALLOW)
  ALLOW User:alice READ  on TOPIC LITERAL  private       (made to be deleted again)
bob has none; admin is a super user (super.users=User:admin) and has none either.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
import kafka.errors as KErrors
from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                         KafkaAdminClient, ResourcePattern, ResourcePatternFilter, ResourceType)

ADDR = sys.argv[1]
TOPICS = ["orders-1", "orders-secret", "private"]
TAF = KafkaError.TOPIC_AUTHORIZATION_FAILED
GAF = KafkaError.GROUP_AUTHORIZATION_FAILED

Op, Perm, Pat, RT = ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourceType


def acl(principal, op, perm, rtype, name, pattern):
    return ACL(principal=principal, host="*", operation=op, permission_type=perm,
               resource_pattern=ResourcePattern(rtype, name, pattern))


CREATED = [
    acl("User:alice", Op.WRITE, Perm.ALLOW, RT.TOPIC, "orders-", Pat.PREFIXED),
    acl("User:alice", Op.READ, Perm.ALLOW, RT.GROUP, "g-alice", Pat.LITERAL),
    acl("User:alice", Op.READ, Perm.ALLOW, RT.TOPIC, "orders-1", Pat.LITERAL),
    acl("User:alice", Op.ALL, Perm.DENY, RT.TOPIC, "orders-secret", Pat.LITERAL),
    acl("User:alice", Op.READ, Perm.ALLOW, RT.TOPIC, "private", Pat.LITERAL),
]
DELETED = CREATED[4]
KEPT = CREATED[:4]


def key(a):
    """A binding as a comparable tuple, with Kafka's names."""
    r = a.resource_pattern
    return (a.principal, a.host, a.operation.name, a.permission_type.name,
            r.resource_type.name, r.resource_name, r.pattern_type.name)


def keys(acls):
    return sorted(key(a) for a in acls)


def show(acls):
    return "; ".join(f"{k[3]} {k[0]} {k[2]} {k[4]}:{k[6]}:{k[5]}" for k in keys(acls))


def kadmin(user):
    return KafkaAdminClient(bootstrap_servers=ADDR, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username=user,
                            sasl_plain_password=f"{user}-secret", request_timeout_ms=10000,
                            bootstrap_timeout_ms=10000, client_id=f"acl-test-{user}")


def conf(user, **extra):
    c = {"bootstrap.servers": ADDR, "security.protocol": "SASL_PLAINTEXT",
         "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret",
         "client.id": f"acl-test-{user}"}
    c.update(extra)
    return c


def filt(principal=None, op=Op.ANY, perm=Perm.ANY, rtype=RT.ANY, name=None, pattern=Pat.ANY):
    return ACLFilter(principal=principal, host=None, operation=op, permission_type=perm,
                     resource_pattern=ResourcePatternFilter(rtype, name, pattern))


def describe(admin, f):
    acls, err = admin.describe_acls(f)
    assert err is KErrors.NoError, err
    return acls


def end_offsets():
    """topic -> end offset of partition 0 (ListOffsets LATEST), as the super user reads it."""
    a = AdminClient(conf("admin"))
    futures = a.list_offsets({TopicPartition(t, 0): OffsetSpec.latest() for t in TOPICS},
                             request_timeout=10)
    return {tp.topic: f.result().offset for tp, f in futures.items()}


def produce(user, topic, values, **extra):
    """Produce values; returns [error code or None] per delivery report, in order."""
    reports = []
    p = Producer(conf(user, **dict({"acks": "all", "message.timeout.ms": 10000,
                                    "enable.idempotence": False}, **extra)))
    for v in values:
        p.produce(topic, v.encode(), on_delivery=lambda err, msg: reports.append(err))
    left = p.flush(15)
    assert left == 0, f"{left} records neither delivered nor failed"
    return [None if e is None else e.code() for e in reports]


def name(code):
    return "OK" if code is None else KafkaError(code).name()


def refused(user, topic, n=3):
    """The topic takes nothing from the user: every report TOPIC_AUTHORIZATION_FAILED, and the
    topic's end offset is the same before and after."""
    before = end_offsets()
    codes = produce(user, topic, [f"{user}-refused-{i}" for i in range(n)])
    assert codes == [TAF] * n, f"delivery reports {[name(c) for c in codes]}, expected {n} x TOPIC_AUTHORIZATION_FAILED"
    after = end_offsets()
    assert after == before, f"end offsets moved: {before} -> {after}"
    return f"{user} -> {topic}: {n} x TOPIC_AUTHORIZATION_FAILED, end offsets unchanged {after}"


def consume(user, group, topic, n, timeout=20):
    """n records from the beginning of topic (subscribed, in group); raises on a consumer error."""
    c = Consumer(conf(user, **{"group.id": group, "auto.offset.reset": "earliest",
                               "enable.auto.commit": False}))
    c.subscribe([topic])
    got, deadline = [], time.time() + timeout
    try:
        while len(got) < n and time.time() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value().decode())
        return c, got
    except BaseException:
        c.close()
        raise


# --- steps ---------------------------------------------------------------------------------

def step_create_acls():
    admin = kadmin("admin")
    res = admin.create_acls(CREATED)
    assert res["failed"] == [], f"failed: {res['failed']}"
    assert keys(res["succeeded"]) == keys(CREATED), res
    admin.close()
    print(f"admin created {len(CREATED)} bindings: {show(CREATED)}")


def step_describe(which):
    """ANY filter, then narrower ones; each returns exactly the bindings it should."""
    want = {"created": CREATED, "kept": KEPT}[which]
    admin = kadmin("admin")
    got = describe(admin, filt())
    assert keys(got) == keys(want), f"ANY filter returned [{show(got)}], expected [{show(want)}]"
    if which == "created":
        # LITERAL TOPIC bindings, any name: the three topic literals, not the PREFIXED one.
        got = describe(admin, filt(rtype=RT.TOPIC, pattern=Pat.LITERAL))
        assert keys(got) == keys([CREATED[2], CREATED[3], CREATED[4]]), f"TOPIC/LITERAL: [{show(got)}]"
        # MATCH on the resource TOPIC orders-1: every binding that applies to it, i.e. its
        # literal and the prefixed orders- (KIP-290), not orders-secret's.
        got = describe(admin, filt(rtype=RT.TOPIC, name="orders-1", pattern=Pat.MATCH))
        assert keys(got) == keys([CREATED[0], CREATED[2]]), f"TOPIC orders-1 MATCH: [{show(got)}]"
        # By permission and principal: alice's one DENY.
        got = describe(admin, filt(principal="User:alice", perm=Perm.DENY))
        assert keys(got) == keys([CREATED[3]]), f"User:alice DENY: [{show(got)}]"
        # A GROUP filter returns the group binding only; a principal with none returns nothing.
        got = describe(admin, filt(rtype=RT.GROUP))
        assert keys(got) == keys([CREATED[1]]), f"GROUP: [{show(got)}]"
        got = describe(admin, filt(principal="User:bob"))
        assert got == [], f"User:bob: [{show(got)}]"
        print("describe_acls: ANY filter returns the 5 bindings; TOPIC/LITERAL 3, TOPIC orders-1 "
              "MATCH 2 (literal + prefixed), alice's DENY 1, GROUP 1, User:bob 0")
    else:
        assert not any(key(a) == key(DELETED) for a in got)
        print(f"describe_acls (ANY): the {len(KEPT)} kept bindings, the deleted one gone: {show(got)}")
    admin.close()


def step_delete_one():
    admin = kadmin("admin")
    exact = ACLFilter(principal=DELETED.principal, host=DELETED.host, operation=DELETED.operation,
                      permission_type=DELETED.permission_type,
                      resource_pattern=ResourcePatternFilter(RT.TOPIC, "private", Pat.LITERAL))
    nothing = filt(principal="User:nobody")
    res = admin.delete_acls([exact, nothing])
    assert len(res) == 2, res
    (_, matched, err), (_, matched2, err2) = res
    assert err is KErrors.NoError and err2 is KErrors.NoError, (err, err2)
    assert keys(matched) == keys([DELETED]), f"delete returned [{show(matched)}], expected [{show([DELETED])}]"
    assert matched2 == [], f"a filter matching nothing deleted [{show(matched2)}]"
    admin.close()
    print(f"delete_acls returned the one binding it deleted ({show(matched)}); a filter matching nothing returned none")


def step_not_super():
    """alice is no super user and has no ALTER/DESCRIBE on the cluster: the ACL APIs refuse her."""
    admin = kadmin("alice")
    try:
        admin.describe_acls(filt())
        raise SystemExit("alice's describe_acls succeeded")
    except KErrors.ClusterAuthorizationFailedError:
        pass
    res = admin.create_acls([acl("User:alice", Op.ALL, Perm.ALLOW, RT.TOPIC, "private", Pat.LITERAL)])
    assert res["succeeded"] == [] and res["failed"] == [KErrors.ClusterAuthorizationFailedError], res
    res = admin.delete_acls([filt()])
    assert res[0][2] is KErrors.ClusterAuthorizationFailedError and res[0][1] == [], res
    admin.close()
    print("alice's describe_acls / create_acls / delete_acls: CLUSTER_AUTHORIZATION_FAILED")


def step_admin_topics():
    """The super user needs no binding: creates the topics, produces to each, consumes one."""
    a = AdminClient(conf("admin"))
    for t, f in a.create_topics([NewTopic(t, 1, 1) for t in TOPICS], request_timeout=15).items():
        f.result()
    for _ in range(50):  # the topics have leaders before anyone produces
        md = a.list_topics(timeout=10).topics
        if all(t in md and md[t].error is None and md[t].partitions for t in TOPICS):
            break
        time.sleep(0.1)
    for t in TOPICS:
        codes = produce("admin", t, [f"admin-{i}" for i in range(3)])
        assert codes == [None] * 3, f"admin -> {t}: {[name(c) for c in codes]}"
    c, got = consume("admin", "g-admin", "orders-1", 3)
    c.close()
    assert got == [f"admin-{i}" for i in range(3)], got
    print(f"admin created {TOPICS}, produced 3 records to each and consumed orders-1 in group g-admin; "
          f"end offsets {end_offsets()}")


def step_bob_produce():
    print(refused("bob", "orders-1"))


def step_alice_produce(n):
    n = int(n)
    before = end_offsets()["orders-1"]
    codes = produce("alice", "orders-1", [f"alice-{before + i}" for i in range(n)])
    assert codes == [None] * n, f"alice -> orders-1: {[name(c) for c in codes]}"
    after = end_offsets()["orders-1"]
    assert after == before + n, f"orders-1 end offset {before} -> {after}, expected +{n}"
    print(f"alice -> orders-1 (PREFIXED WRITE orders-): {n} record{'s' if n != 1 else ''} delivered, end offset {before} -> {after}")


def step_alice_idempotent():
    """KIP-679: an idempotent producer's InitProducerId needs IDEMPOTENT_WRITE on the cluster or
    WRITE on some topic; alice's prefixed WRITE is that."""
    before = end_offsets()["orders-1"]
    codes = produce("alice", "orders-1", [f"alice-{before}"], **{"enable.idempotence": True})
    assert codes == [None], f"idempotent alice -> orders-1: {[name(c) for c in codes]}"
    print("alice's idempotent producer (InitProducerId on WRITE of a topic, KIP-679) delivered to orders-1")


def step_alice_secret():
    print(refused("alice", "orders-secret") + " (DENY ALL beats the PREFIXED ALLOW)")


def step_bob_consume():
    """bob has no binding on g-bob: FindCoordinator / JoinGroup answer GROUP_AUTHORIZATION_FAILED,
    which librdkafka hands to poll(). (Metadata for orders-1 may also answer
    TOPIC_AUTHORIZATION_FAILED; that is allowed alongside.) He must get no record."""
    errors = []
    c = Consumer(conf("bob", **{"group.id": "g-bob", "auto.offset.reset": "earliest",
                                "error_cb": lambda e: errors.append(e)}))
    c.subscribe(["orders-1"])
    deadline = time.time() + 15
    try:
        while time.time() < deadline and not any(e.code() == GAF for e in errors):
            m = c.poll(0.2)
            if m is None:
                continue
            if not m.error():
                raise SystemExit(f"bob consumed a record from orders-1: {m.value()!r}")
            errors.append(m.error())
    finally:
        c.close()
    codes = sorted({e.name() for e in errors})
    assert any(e.code() == GAF for e in errors), f"no GROUP_AUTHORIZATION_FAILED within 15 s; errors: {codes}"
    allowed = {GAF, TAF}
    other = [str(e) for e in errors if e.code() not in allowed]
    assert not other, f"other errors besides the authorization ones: {other}"
    print(f"bob consuming orders-1 in g-bob: no record, errors {codes}")


def step_alice_consume():
    """READ on g-alice and on orders-1: alice reads everything there (admin's 3, her own), commits,
    and reads the commit back. A commit for private (her READ on it was deleted) is refused
    with TOPIC_AUTHORIZATION_FAILED for that partition."""
    high = end_offsets()["orders-1"]
    c, got = consume("alice", "g-alice", "orders-1", high)
    try:
        want = [f"admin-{i}" for i in range(3)] + [f"alice-{i}" for i in range(3, high)]
        assert got == want, f"read {got}, expected {want}"
        res = c.commit(asynchronous=False)
        assert [(tp.topic, tp.partition, tp.offset, tp.error) for tp in res] == [("orders-1", 0, high, None)], res
        com = c.committed([TopicPartition("orders-1", 0)], timeout=10)
        assert com[0].error is None and com[0].offset == high, com
        try:
            res = c.commit(offsets=[TopicPartition("private", 0, 1)], asynchronous=False)
            errs = [tp.error for tp in res]
        except KafkaException as e:
            errs = [e.args[0]]
        codes = [None if e is None else e.code() for e in errs]
        assert codes == [TAF], f"commit for private: {[name(x) for x in codes]}, expected TOPIC_AUTHORIZATION_FAILED"
    finally:
        c.close()
    print(f"alice consumed orders-1's {high} records in g-alice and committed offset {high} (read back); "
          "her commit for private: TOPIC_AUTHORIZATION_FAILED")


def step_metadata():
    """Metadata lists only what the principal may DESCRIBE; a topic it may not describe is answered
    TOPIC_AUTHORIZATION_FAILED whether or not it exists (so existence does not leak), and is not
    auto-created."""
    bob = AdminClient(conf("bob"))
    md = bob.list_topics(timeout=10)
    assert md.brokers, "bob's Metadata has no brokers"
    assert list(md.topics) == [], f"bob's Metadata lists {sorted(md.topics)}"
    for t in ["private", "no-such-topic"]:
        md = bob.list_topics(topic=t, timeout=10)
        e = md.topics[t].error if t in md.topics else None
        assert e is not None and e.code() == TAF, f"bob's Metadata for {t}: {e}"
    alice = AdminClient(conf("alice"))
    md = alice.list_topics(timeout=10)
    assert sorted(md.topics) == ["orders-1"], f"alice's Metadata lists {sorted(md.topics)}"
    md = alice.list_topics(topic="orders-secret", timeout=10)
    e = md.topics["orders-secret"].error
    assert e is not None and e.code() == TAF, f"alice's Metadata for orders-secret: {e}"
    admin = AdminClient(conf("admin")).list_topics(timeout=10).topics
    assert "no-such-topic" not in admin, "bob's Metadata request auto-created no-such-topic"
    assert set(TOPICS) <= set(admin), sorted(admin)
    print("bob's Metadata lists no topic, and private / no-such-topic are both TOPIC_AUTHORIZATION_FAILED "
          "(not created); alice's lists only orders-1, orders-secret is TOPIC_AUTHORIZATION_FAILED")


STEPS = {n[len("step_"):].replace("_", "-"): f for n, f in globals().items() if n.startswith("step_")}

if __name__ == "__main__":
    STEPS[sys.argv[2]](*sys.argv[3:])
