//! KIP-848 consumer groups beyond the basics: static members (instance ids, the temporary leave
//! with epoch -2 and the takeover by a new incarnation) and regular-expression subscriptions
//! resolved by the coordinator, through raw ConsumerGroupHeartbeat frames in every version served
//! and through librdkafka (`group.protocol=consumer`).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as OwnedPartitions;
use kafka_protocol::messages::consumer_group_heartbeat_response::Assignment;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message};
use uuid::Uuid;

const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_INSTANCE_ID: i16 = 82;
const UNRELEASED_INSTANCE_ID: i16 = 111;
const FENCED_MEMBER_EPOCH: i16 = 110;
const INVALID_REGULAR_EXPRESSION: i16 = 128;

/// Short KIP-848 heartbeats and sessions, so that clients notice changes quickly.
const BROKER: &[(&str, &str)] = &[
    ("group.consumer.min.heartbeat.interval.ms", "100"),
    ("group.consumer.heartbeat.interval.ms", "300"),
    ("group.consumer.min.session.timeout.ms", "1000"),
    ("group.consumer.session.timeout.ms", "6000"),
    ("group.min.session.timeout.ms", "1000"),
    // A client asking for a deleted topic must not create it again.
    ("auto.create.topics.enable", "false"),
    // Raw members joining back to back get their targets at once, not after the 1 s
    // assignment interval (KIP-1263, tested in group_frames.rs).
    ("group.consumer.assignment.interval.ms", "0"),
];

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client")
}

async fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    let r = admin(bootstrap)
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

async fn delete_topic(bootstrap: &str, name: &str) {
    let r = admin(bootstrap)
        .delete_topics(&[name], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

/// A joining heartbeat (epoch 0) of `member` (empty: the broker names it, v0 only).
fn join(group: &str, member: &str, instance: Option<&str>) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(0)
        .with_instance_id(instance.map(s))
        .with_rebalance_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![]))
}

/// A heartbeat at `epoch` reporting `owned`.
fn beat(group: &str, member: &str, epoch: i32, owned: &Assignment) -> ConsumerGroupHeartbeatRequest {
    let owned = owned
        .topic_partitions
        .iter()
        .map(|t| {
            OwnedPartitions::default()
                .with_topic_id(t.topic_id)
                .with_partitions(t.partitions.clone())
        })
        .collect();
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(Some(owned))
}

/// (topic id, partition) pairs of an assignment.
fn partitions(assignment: &Assignment) -> BTreeSet<(Uuid, i32)> {
    assignment
        .topic_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect()
}

async fn describe(raw: &mut Raw, group: &str) -> ConsumerGroupDescribeResponse {
    raw.call(
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]),
    )
    .await
}

/// The topic ids of `names`, from Metadata.
async fn topic_ids(raw: &mut Raw, names: &[&str]) -> Vec<Uuid> {
    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let wanted = names
        .iter()
        .map(|n| MetadataRequestTopic::default().with_name(Some(topic(n))))
        .collect();
    let resp = raw
        .call(12, &MetadataRequest::default().with_topics(Some(wanted)))
        .await;
    names
        .iter()
        .map(|n| {
            resp.topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|t| t.0.as_str() == *n))
                .map(|t| t.topic_id)
                .unwrap_or_else(|| panic!("no topic {n}"))
        })
        .collect()
}

/// Heartbeats as `member` (reporting what it owns) until its assignment is `want`; returns the
/// last answer. A member is told to revoke before it is given more, so this may take a few
/// rounds.
async fn beat_until(
    raw: &mut Raw,
    version: i16,
    group: &str,
    member: &str,
    mut epoch: i32,
    mut owned: Assignment,
    want: &BTreeSet<(Uuid, i32)>,
) -> (ConsumerGroupHeartbeatResponse, Assignment) {
    for _ in 0..10 {
        let resp = raw.call(version, &beat(group, member, epoch, &owned)).await;
        assert_eq!(resp.error_code, 0, "{resp:?}");
        epoch = resp.member_epoch;
        if let Some(a) = &resp.assignment {
            owned = a.clone();
        }
        if partitions(&owned) == *want {
            return (resp, owned);
        }
    }
    panic!("{member} never got {want:?}; it owns {:?}", partitions(&owned));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_keeps_its_instance_id_until_it_leaves_and_its_successor_keeps_its_partitions() {
    // GroupMetadataManager (Kafka 4): UNRELEASED_INSTANCE_ID while the holder lives
    // (`throwIfInstanceIdIsUnreleased`); a leave with epoch -2 keeps the member and its
    // partitions (`consumerGroupStaticMemberGroupLeave`); a new member id with the same instance
    // id takes them over without a rebalance (`getOrMaybeSubscribeStaticConsumerGroupMember`).
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    create_topic(&bootstrap, "static-t", 3).await;
    let mut raw = Raw::connect(broker.addr).await;
    for version in [0i16, 1] {
        let group = format!("static-v{version}");
        // v0 lets the broker name members; v1 members name themselves (KIP-1082).
        let own_id = |name: &str| {
            if version == 0 {
                String::new()
            } else {
                format!("{name}-{version}")
            }
        };
        let subscribe =
            |req: ConsumerGroupHeartbeatRequest| req.with_subscribed_topic_names(Some(vec![topic("static-t")]));
        let a = raw
            .call(version, &subscribe(join(&group, &own_id("a"), Some("inst"))))
            .await;
        assert_eq!((a.error_code, a.member_epoch), (0, 1), "v{version}: {a:?}");
        let a_id = a.member_id.clone().unwrap().to_string();
        let a_owned = a.assignment.clone().unwrap();
        assert_eq!(partitions(&a_owned).len(), 3);

        // The instance id is held by a live member.
        let refused = raw
            .call(version, &subscribe(join(&group, &own_id("b"), Some("inst"))))
            .await;
        assert_eq!(refused.error_code, UNRELEASED_INSTANCE_ID, "v{version}: {refused:?}");
        // A heartbeat naming the instance id under another member id is fenced.
        let mut other = beat(&group, "someone-else", 1, &a_owned);
        other.instance_id = Some(s("inst"));
        assert_eq!(raw.call(version, &other).await.error_code, FENCED_INSTANCE_ID);
        let mut unknown = beat(&group, &a_id, 1, &a_owned);
        unknown.instance_id = Some(s("nobody"));
        assert_eq!(raw.call(version, &unknown).await.error_code, UNKNOWN_MEMBER_ID);

        // A temporary leave: the member stays, at epoch -2, holding its partitions.
        let mut leave = beat(&group, &a_id, -2, &a_owned);
        leave.instance_id = Some(s("inst"));
        let left = raw.call(version, &leave).await;
        assert_eq!((left.error_code, left.member_epoch), (0, -2));
        let d = describe(&mut raw, &group).await;
        let g = &d.groups[0];
        assert_eq!((g.error_code, g.group_epoch, g.members.len()), (0, 1, 1));
        assert_eq!(g.members[0].member_epoch, -2);
        assert_eq!(g.members[0].assignment.topic_partitions[0].partitions.len(), 3);
        // Gone members cannot come back at their old epoch.
        let mut stale = beat(&group, &a_id, 1, &a_owned);
        stale.instance_id = Some(s("inst"));
        assert_eq!(raw.call(version, &stale).await.error_code, FENCED_MEMBER_EPOCH);

        // The successor takes over: same epoch, same partitions, no new group epoch.
        let b = raw
            .call(version, &subscribe(join(&group, &own_id("b"), Some("inst"))))
            .await;
        assert_eq!((b.error_code, b.member_epoch), (0, 1), "v{version}: {b:?}");
        let b_id = b.member_id.clone().unwrap().to_string();
        assert_ne!(b_id, a_id);
        assert_eq!(partitions(&b.assignment.unwrap()), partitions(&a_owned));
        let d = describe(&mut raw, &group).await;
        let g = &d.groups[0];
        assert_eq!(
            (g.group_epoch, g.group_state.as_str(), g.members.len()),
            (1, "Stable", 1)
        );
        assert_eq!(g.members[0].member_id.as_str(), b_id);
        assert_eq!(g.members[0].instance_id.as_deref(), Some("inst"));
    }

    // The temporary leave survives a broker restart: the member is still away and its
    // successor still takes its partitions over.
    let mut leave = beat("static-v1", "b-1", -2, &Assignment::default());
    leave.instance_id = Some(s("inst"));
    assert_eq!(raw.call(1, &leave).await.error_code, 0);
    let broker = broker.restart(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    let d = describe(&mut raw, "static-v1").await;
    assert_eq!(d.groups[0].members[0].member_epoch, -2);
    let c = raw
        .call(
            1,
            &join("static-v1", "c-1", Some("inst")).with_subscribed_topic_names(Some(vec![topic("static-t")])),
        )
        .await;
    assert_eq!((c.error_code, c.member_epoch), (0, 1), "{c:?}");
    assert_eq!(partitions(&c.assignment.unwrap()).len(), 3);
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regex_subscription_is_resolved_by_the_broker_and_follows_topic_changes() {
    // KIP-848 SubscribedTopicRegex (ConsumerGroupHeartbeat v1+; v0 has no such field): RE2
    // syntax, whole topic names (Kafka resolves with `Pattern.matcher(topic).matches()`),
    // resolved again when topics are created or deleted; INVALID_REGULAR_EXPRESSION for a
    // pattern that does not compile.
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    create_topic(&bootstrap, "rx-a", 2).await;
    create_topic(&bootstrap, "rx", 1).await;
    create_topic(&bootstrap, "other", 1).await;
    let mut raw = Raw::connect(broker.addr).await;
    let ids = topic_ids(&mut raw, &["rx-a", "rx", "other"]).await;
    let (rx_a, rx, other) = (ids[0], ids[1], ids[2]);

    for bad in ["(", "rx-[", "a)|(b"] {
        let resp = raw
            .call(1, &join("rx-g", "m", None).with_subscribed_topic_regex(Some(s(bad))))
            .await;
        assert_eq!(resp.error_code, INVALID_REGULAR_EXPRESSION, "{bad}: {resp:?}");
    }
    assert_eq!(describe(&mut raw, "rx-g").await.groups[0].members.len(), 0);

    // `rx-.*` matches rx-a but not rx; names and a regex together are a union.
    let joined = raw
        .call(
            1,
            &join("rx-g", "m", None)
                .with_subscribed_topic_regex(Some(s("rx-.*")))
                .with_subscribed_topic_names(Some(vec![topic("other")])),
        )
        .await;
    assert_eq!(joined.error_code, 0, "{joined:?}");
    let owned = joined.assignment.clone().unwrap();
    assert_eq!(partitions(&owned), BTreeSet::from([(rx_a, 0), (rx_a, 1), (other, 0)]));
    assert!(!partitions(&owned).iter().any(|(t, _)| *t == rx));
    let d = describe(&mut raw, "rx-g").await;
    let m = &d.groups[0].members[0];
    assert_eq!(m.subscribed_topic_regex.as_deref(), Some("rx-.*"));
    assert_eq!(m.subscribed_topic_names, vec![topic("other")]);

    // A matching topic created later joins the subscription (new group epoch)...
    create_topic(&bootstrap, "rx-b", 1).await;
    let rx_b = topic_ids(&mut raw, &["rx-b"]).await[0];
    let want = BTreeSet::from([(rx_a, 0), (rx_a, 1), (rx_b, 0), (other, 0)]);
    let (grown, owned) = beat_until(&mut raw, 1, "rx-g", "m", joined.member_epoch, owned, &want).await;
    assert!(grown.member_epoch > joined.member_epoch);
    // ...and a deleted one leaves it.
    delete_topic(&bootstrap, "rx-a").await;
    let want = BTreeSet::from([(rx_b, 0), (other, 0)]);
    let (shrunk, owned) = beat_until(&mut raw, 1, "rx-g", "m", grown.member_epoch, owned, &want).await;
    // The partitions of rx-a are revoked first, at the old epoch; acknowledging that moves the
    // member to the new one.
    let acked = raw.call(1, &beat("rx-g", "m", shrunk.member_epoch, &owned)).await;
    assert_eq!(acked.error_code, 0);
    assert!(acked.member_epoch > grown.member_epoch, "{acked:?}");
    broker.handle.shutdown().await;
}

/// Polls `consumer` until `done` holds of what it received (topic names), for at most `limit`.
fn poll_until(
    consumer: &BaseConsumer,
    limit: Duration,
    what: &str,
    seen: &mut BTreeSet<String>,
    mut done: impl FnMut(&BaseConsumer, &BTreeSet<String>) -> bool,
) {
    let start = Instant::now();
    while !done(consumer, seen) {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}; seen {seen:?}"
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            seen.insert(m.topic().to_string());
        }
    }
}

fn kip848_consumer(bootstrap: &str, group: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", "consumer")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "500");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().expect("consumer")
}

fn assigned_topics(consumer: &BaseConsumer) -> BTreeSet<String> {
    consumer
        .assignment()
        .map(|tpl| tpl.elements().iter().map(|e| e.topic().to_string()).collect())
        .unwrap_or_default()
}

async fn produce_one(bootstrap: &str, topic: &str) {
    let p = producer(bootstrap, &[]);
    p.send(FutureRecord::<(), _>::to(topic).payload("x"), Duration::from_secs(10))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_regex_subscription_follows_topics_created_and_deleted() {
    // librdkafka with group.protocol=consumer sends `^...` subscriptions as
    // SubscribedTopicRegex and leaves the matching to the broker (RE2/J in Kafka).
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    let prefix = format!("rxp{}", Uuid::new_v4().simple());
    let (a, b, unrelated) = (format!("{prefix}-a"), format!("{prefix}-b"), unique("unrelated"));
    create_topic(&bootstrap, &a, 2).await;
    create_topic(&bootstrap, &unrelated, 1).await;
    produce_one(&bootstrap, &a).await;
    produce_one(&bootstrap, &unrelated).await;

    let consumer = kip848_consumer(&bootstrap, "regex-group", &[]);
    consumer.subscribe(&[&format!("^{prefix}.*")]).unwrap();
    let mut seen = BTreeSet::new();
    poll_until(
        &consumer,
        Duration::from_secs(30),
        "a record of a",
        &mut seen,
        |_, seen| seen.contains(&a),
    );

    // A matching topic created after the subscription is assigned and consumed.
    create_topic(&bootstrap, &b, 1).await;
    produce_one(&bootstrap, &b).await;
    poll_until(
        &consumer,
        Duration::from_secs(30),
        "a record of b",
        &mut seen,
        |_, seen| seen.contains(&b),
    );
    assert!(!seen.contains(&unrelated), "{seen:?}");

    // A deleted one is taken away.
    delete_topic(&bootstrap, &a).await;
    poll_until(&consumer, Duration::from_secs(30), "a unassigned", &mut seen, |c, _| {
        let now = assigned_topics(c);
        !now.contains(&a) && now.contains(&b)
    });
    let mut raw = Raw::connect(broker.addr).await;
    let d = describe(&mut raw, "regex-group").await;
    let m = &d.groups[0].members[0];
    // librdkafka sends its regex subscriptions as one alternation of parenthesised patterns.
    assert_eq!(
        m.subscribed_topic_regex.as_deref(),
        Some(format!("(^{prefix}.*)").as_str())
    );
    drop(consumer);
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_refuses_a_second_consumer_with_a_live_instance_id_and_hands_over_after_close() {
    // The second consumer's join gets UNRELEASED_INSTANCE_ID, fatal for librdkafka; once the
    // first closes (a static member leaves with epoch -2), a new consumer with the instance id
    // takes its partitions over.
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    let t = unique("static");
    create_topic(&bootstrap, &t, 2).await;
    let instance = [("group.instance.id", "static-1")];
    let first = kip848_consumer(&bootstrap, "static-group", &instance);
    first.subscribe(&[&t]).unwrap();
    let mut seen = BTreeSet::new();
    poll_until(&first, Duration::from_secs(30), "first owns 2", &mut seen, |c, _| {
        c.assignment().map(|a| a.count()).unwrap_or(0) == 2
    });

    let second = kip848_consumer(&bootstrap, "static-group", &instance);
    second.subscribe(&[&t]).unwrap();
    let start = Instant::now();
    let mut consumer_error = None;
    let fatal = loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "second consumer never refused (errors: {consumer_error:?})"
        );
        // Keep the first one alive meanwhile.
        let _ = first.poll(Duration::from_millis(20));
        if let Some(Err(e)) = second.poll(Duration::from_millis(50)) {
            consumer_error = Some(e);
        }
        if let (Some(fatal), Some(_)) = (second.client().fatal_error(), &consumer_error) {
            break fatal;
        }
    };
    assert_eq!(fatal.0, RDKafkaErrorCode::UnreleasedInstanceId, "{fatal:?}");
    assert!(
        matches!(
            consumer_error,
            Some(KafkaError::MessageConsumptionFatal(_) | KafkaError::MessageConsumption(_))
        ),
        "{consumer_error:?}"
    );
    assert_eq!(first.assignment().unwrap().count(), 2, "the first keeps its partitions");
    drop(second);

    // The first leaves temporarily (epoch -2 on close); its successor gets both partitions.
    drop(first);
    let mut raw = Raw::connect(broker.addr).await;
    let d = describe(&mut raw, "static-group").await;
    let away = &d.groups[0].members;
    assert_eq!(away.len(), 1);
    assert_eq!(
        away[0].member_epoch, -2,
        "librdkafka closes a static member with epoch -2"
    );
    assert_eq!(away[0].assignment.topic_partitions[0].partitions.len(), 2, "still held");
    let third = kip848_consumer(&bootstrap, "static-group", &instance);
    third.subscribe(&[&t]).unwrap();
    poll_until(
        &third,
        Duration::from_secs(30),
        "the successor owns 2",
        &mut seen,
        |c, _| c.assignment().map(|a| a.count()).unwrap_or(0) == 2,
    );
    let d = describe(&mut raw, "static-group").await;
    assert_eq!(
        d.groups[0].members.len(),
        1,
        "the successor replaced the member that left"
    );
    assert_eq!(d.groups[0].group_epoch, 1, "without a rebalance");
    drop(third);
    broker.handle.shutdown().await;
}
