//! Cluster mode: three processes, each broker and controller of one raft metadata quorum
//! (Kafka's KRaft combined mode, KIP-500/KIP-631). Partitions are placed across the brokers,
//! each served by its leader only (NOT_LEADER_OR_FOLLOWER elsewhere, as Kafka's ReplicaManager
//! answers), metadata changes go through the quorum leader whichever node receives them, and
//! the quorum survives losing its leader but refuses changes without a majority.
//!
//! Each test starts its own cluster (`common::cluster`); a failing test prints the tail of
//! every node's log.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{Cluster, POLL_REQUEST_TIMEOUT, list_latest, try_call};
use common::*;
use kafka_protocol::messages::BrokerId;
use kafka_protocol::records::Compression;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;
use rdkafka::{ClientConfig, Message, Offset};
use uuid::Uuid;

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const TOPIC_ALREADY_EXISTS: i16 = 36;

/// Records by (partition, offset): (key, value).
type Records = BTreeMap<(i32, i64), (String, String)>;

/// A topic as a node lists it.
#[derive(Debug, Clone, PartialEq)]
struct TopicView {
    id: Uuid,
    /// The leader of each partition, by partition index.
    leaders: Vec<i32>,
}

/// CreateTopics of `name` (RF 1) sent to node `via` only; Err carries the code and message.
async fn create_topic(
    cluster: &Cluster,
    via: i32,
    name: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<(), String> {
    let request = common::create_topic_request(name, partitions, 5_000);
    let resp = try_call(cluster.addr(via), 7, &request, timeout).await?;
    let result = resp
        .topics
        .iter()
        .find(|t| t.name.0.as_str() == name)
        .ok_or_else(|| format!("CreateTopics answer without {name}: {resp:?}"))?;
    match result.error_code {
        0 => Ok(()),
        code => Err(format!("error {code} ({:?})", result.error_message)),
    }
}

/// Retries `create_topic` through node `via` until it succeeds or `limit` passes. An attempt
/// that went unanswered or timed out may still have committed, so TOPIC_ALREADY_EXISTS after a
/// failed attempt counts as created.
async fn create_topic_within(cluster: &Cluster, via: i32, name: &str, partitions: i32, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut failures = Vec::new();
    loop {
        match create_topic(cluster, via, name, partitions, Duration::from_secs(15)).await {
            Ok(()) => return,
            Err(e) if !failures.is_empty() && e.starts_with(&format!("error {TOPIC_ALREADY_EXISTS} ")) => return,
            Err(e) => failures.push(e),
        }
        assert!(
            Instant::now() < deadline,
            "CreateTopics {name} through node {via} did not succeed within {limit:?}: {failures:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until every running node lists `name` with `partitions` partitions, each led by a
/// running node, all nodes agreeing; returns that view.
async fn topic_everywhere(cluster: &Cluster, name: &str, partitions: i32) -> TopicView {
    let limit = Duration::from_secs(20);
    let deadline = Instant::now() + limit;
    loop {
        let running = cluster.running();
        let mut views = BTreeMap::new();
        for &id in &running {
            views.insert(id, view_from(cluster, id, name, partitions).await);
        }
        let first = views.values().next().cloned().unwrap_or(Err("no node runs".into()));
        if let Ok(view) = &first
            && views.values().all(|v| v.as_ref() == Ok(view))
            && view.leaders.iter().all(|l| running.contains(l))
        {
            return view.clone();
        }
        cluster.assert_still_running();
        assert!(
            Instant::now() < deadline,
            "nodes {running:?} did not agree on {name} with {partitions} partitions led by running nodes \
             within {limit:?}: {views:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What node `id` says of `name`, if it lists it whole and without errors.
async fn view_from(cluster: &Cluster, id: i32, name: &str, partitions: i32) -> Result<TopicView, String> {
    let resp = cluster.metadata(id, &[name]).await?;
    let t = resp
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
        .ok_or("topic not in the answer")?;
    if t.error_code != 0 {
        return Err(format!("topic error {}", t.error_code));
    }
    let mut parts: Vec<_> = t.partitions.iter().collect();
    parts.sort_by_key(|p| p.partition_index);
    let indexes: Vec<i32> = parts.iter().map(|p| p.partition_index).collect();
    if indexes != (0..partitions).collect::<Vec<_>>() {
        return Err(format!("partitions {indexes:?}"));
    }
    let mut leaders = Vec::new();
    for p in parts {
        if p.error_code != 0 {
            return Err(format!("partition {} error {}", p.partition_index, p.error_code));
        }
        // A new partition is led by its first replica.
        let replicas: Vec<i32> = p.replica_nodes.iter().map(|r| r.0).collect();
        if replicas.first() != Some(&p.leader_id.0) {
            return Err(format!(
                "partition {} led by {} with replicas {replicas:?}",
                p.partition_index, p.leader_id.0
            ));
        }
        leaders.push(p.leader_id.0);
    }
    Ok(TopicView {
        id: t.topic_id,
        leaders,
    })
}

/// Produces `count` keyed records (`k{i}` => `{tag}-{i}`) through every node with acks=all;
/// every one must be acknowledged.
async fn produce_keyed(bootstrap: &str, name: &str, count: usize, tag: &str) -> Records {
    let producer = producer(bootstrap, &[("linger.ms", "5")]);
    let mut pending = Vec::with_capacity(count);
    for i in 0..count {
        let (key, value) = (format!("k{i}"), format!("{tag}-{i}"));
        let delivery = producer
            .send_result(FutureRecord::to(name).key(&key).payload(&value))
            .map_err(|(e, _)| e)
            .expect("queue a record");
        pending.push((key, value, delivery));
    }
    let mut records = Records::new();
    for (key, value, delivery) in pending {
        match delivery.await.expect("delivery report") {
            Ok(d) => {
                let earlier = records.insert((d.partition, d.offset), (key.clone(), value));
                assert!(
                    earlier.is_none(),
                    "two records acknowledged at {}/{}",
                    d.partition,
                    d.offset
                );
            }
            Err((e, _)) => panic!("{key} of {name} not acknowledged: {e}"),
        }
    }
    records
}

/// Adds one consumed message to `records`; a second message at the same position is a
/// duplicate, counted in `duplicates`.
fn collect(m: &rdkafka::message::BorrowedMessage<'_>, records: &mut Records, duplicates: &mut Vec<(i32, i64)>) {
    let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
    let entry = (text(m.key()), text(m.payload()));
    if records.insert((m.partition(), m.offset()), entry).is_some() {
        duplicates.push((m.partition(), m.offset()));
    }
}

/// Reads `partitions` of `name` from the beginning until `expected` records, then one more
/// second for anything beyond them (bounded at 30 s in all).
fn consume_assigned(bootstrap: &str, name: &str, partitions: i32, expected: usize) -> (Records, Vec<(i32, i64)>) {
    let consumer = consumer(bootstrap, &[]);
    assign(&consumer, name, &(0..partitions).collect::<Vec<_>>(), Offset::Beginning);
    poll_until(&consumer, expected)
}

fn poll_until(consumer: &BaseConsumer, expected: usize) -> (Records, Vec<(i32, i64)>) {
    let (mut records, mut duplicates) = (Records::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while records.len() < expected && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            collect(&m.expect("consume"), &mut records, &mut duplicates);
        }
    }
    // Whatever arrives after the last expected record is a duplicate or a stray.
    let settle = Instant::now() + Duration::from_secs(1);
    while Instant::now() < settle {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            collect(&m.expect("consume"), &mut records, &mut duplicates);
        }
    }
    (records, duplicates)
}

/// The log end offset of each partition of `name`, asked of its leader.
async fn end_offsets(cluster: &Cluster, name: &str, view: &TopicView) -> Vec<i64> {
    let mut ends = Vec::new();
    for (partition, &leader) in (0..).zip(&view.leaders) {
        let resp = try_call(
            cluster.addr(leader),
            7,
            &list_latest(name, partition),
            POLL_REQUEST_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("ListOffsets of {name}/{partition} from its leader {leader}: {e}"));
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            p.error_code, 0,
            "ListOffsets of {name}/{partition} from its leader {leader}"
        );
        ends.push(p.offset);
    }
    ends
}

/// The number of records of each partition in `records`.
fn counts_per_partition(records: &Records, partitions: i32) -> Vec<i64> {
    (0..partitions)
        .map(|p| i64::try_from(records.keys().filter(|(rp, _)| *rp == p).count()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_spread_and_served_through_every_broker() {
    // KIP-631: any broker takes CreateTopics and forwards it to the active controller, which
    // places the partitions across the registered brokers (Kafka's StripedReplicaPlacer).
    let cluster = Cluster::start(3).await;
    let name = unique("spread");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", cluster.addr(2).to_string())
        .create()
        .expect("admin client");
    // librdkafka sends admin requests to the controller it learns of unless told a broker.
    let options = AdminOptions::new()
        .broker_id(2)
        .request_timeout(Some(Duration::from_secs(15)));
    let created = admin
        .create_topics(&[NewTopic::new(&name, 6, TopicReplication::Fixed(1))], &options)
        .await
        .expect("CreateTopics through node 2");
    assert!(created[0].is_ok(), "CreateTopics through node 2: {created:?}");

    let view = topic_everywhere(&cluster, &name, 6).await;
    let leaders: BTreeSet<i32> = view.leaders.iter().copied().collect();
    assert_eq!(
        leaders,
        BTreeSet::from([1, 2, 3]),
        "6 partitions on 3 brokers should have leaders on all of them: {:?}",
        view.leaders
    );

    let produced = produce_keyed(&cluster.bootstrap(), &name, 300, "spread").await;
    assert_eq!(produced.len(), 300);
    let used: BTreeSet<i32> = produced.keys().map(|(p, _)| *p).collect();
    assert_eq!(used.len(), 6, "300 keys should reach all 6 partitions: {used:?}");
    let ends = end_offsets(&cluster, &name, &view).await;
    assert_eq!(
        ends,
        counts_per_partition(&produced, 6),
        "log end offsets at the leaders"
    );

    // A subscribed consumer: its group coordinator is one of the nodes, found via FindCoordinator.
    let (bootstrap, topic_name, group) = (cluster.bootstrap(), name.clone(), unique("spread-group"));
    let (consumed, duplicates, committed) = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .create()
            .expect("group consumer");
        consumer.subscribe(&[&topic_name]).expect("subscribe");
        let (records, duplicates) = poll_until(&consumer, 300);
        consumer.commit_consumer_state(CommitMode::Sync).expect("commit");
        let committed: BTreeMap<i32, Offset> = consumer
            .committed(Duration::from_secs(10))
            .expect("committed offsets")
            .elements()
            .iter()
            .map(|e| (e.partition(), e.offset()))
            .collect();
        (records, duplicates, committed)
    })
    .await
    .unwrap();
    assert!(duplicates.is_empty(), "delivered more than once: {duplicates:?}");
    assert_eq!(consumed.len(), produced.len(), "records consumed by the group");
    assert_eq!(consumed, produced, "consumed records differ from the acknowledged ones");
    let expected: BTreeMap<i32, Offset> = (0..6).zip(ends.iter().map(|e| Offset::Offset(*e))).collect();
    assert_eq!(
        committed, expected,
        "the group's committed offsets, read back from its coordinator"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_on_another_node_gets_not_leader_or_follower() {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    use kafka_protocol::messages::{AlterReplicaLogDirsRequest, DescribeLogDirsRequest};
    const REPLICA_NOT_AVAILABLE: i16 = 9;
    // Kafka's ReplicaManager: a broker that is not a partition's leader answers Produce,
    // ListOffsets and Fetch for it with NOT_LEADER_OR_FOLLOWER, so clients refresh metadata.
    let cluster = Cluster::start(3).await;
    let name = unique("elsewhere");
    create_topic_within(&cluster, 1, &name, 3, Duration::from_secs(20)).await;
    let view = topic_everywhere(&cluster, &name, 3).await;
    let batch = |partition: i32| {
        let record = (
            Some(Bytes::from("key")),
            Some(Bytes::from(format!("on {partition}"))),
            1_000,
        );
        sluice::log::batch::encode_records(&[record], Compression::None).unwrap()
    };

    let mut checked = 0;
    for (partition, &leader) in (0..).zip(&view.leaders) {
        for other in cluster.ids().into_iter().filter(|id| *id != leader) {
            let at = |what: &str| format!("{what} of {name}/{partition} (leader {leader}) sent to node {other}");
            let addr = cluster.addr(other);
            let produce = produce_request(&name, partition, batch(partition), -1);
            let resp = try_call(addr, 9, &produce, POLL_REQUEST_TIMEOUT).await.unwrap();
            let p = &resp.responses[0].partition_responses[0];
            assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER, "{}", at("Produce"));
            // KIP-951 (Produce v10+): the refusal names the leader and lists its endpoint.
            let resp = try_call(addr, 10, &produce, POLL_REQUEST_TIMEOUT).await.unwrap();
            let p = &resp.responses[0].partition_responses[0];
            assert_eq!(
                (p.error_code, p.current_leader.leader_id.0),
                (NOT_LEADER_OR_FOLLOWER, leader),
                "{}",
                at("Produce v10")
            );
            let endpoints: Vec<(i32, i32)> = resp.node_endpoints.iter().map(|e| (e.node_id.0, e.port)).collect();
            assert_eq!(
                endpoints,
                vec![(leader, i32::from(cluster.addr(leader).port()))],
                "{}",
                at("Produce v10")
            );

            let resp = try_call(addr, 7, &list_latest(&name, partition), POLL_REQUEST_TIMEOUT)
                .await
                .unwrap();
            let p = &resp.topics[0].partitions[0];
            assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER, "{}", at("ListOffsets"));

            let mut fetch = fetch_request(&name, 0, 1 << 20, 1 << 20);
            fetch.topics[0].partitions[0].partition = partition;
            let resp = try_call(addr, 12, &fetch, POLL_REQUEST_TIMEOUT).await.unwrap();
            let p = &resp.responses[0].partitions[0];
            assert_eq!(
                (p.error_code, p.current_leader.leader_id.0),
                (NOT_LEADER_OR_FOLLOWER, leader),
                "{}",
                at("Fetch (KIP-951 current leader)")
            );
            // AlterReplicaLogDirs into this node's own log directory: it holds no replica to
            // move, REPLICA_NOT_AVAILABLE as Kafka keeps for this API; the leader's is moved.
            for (node, expected) in [(other, REPLICA_NOT_AVAILABLE), (leader, 0)] {
                let dirs = DescribeLogDirsRequest::default().with_topics(Some(vec![]));
                let resp = try_call(cluster.addr(node), 4, &dirs, POLL_REQUEST_TIMEOUT)
                    .await
                    .unwrap();
                let dir = resp.results[0].log_dir.clone();
                let req = AlterReplicaLogDirsRequest::default().with_dirs(vec![
                    AlterReplicaLogDir::default().with_path(dir).with_topics(vec![
                        AlterReplicaLogDirTopic::default()
                            .with_name(topic(&name))
                            .with_partitions(vec![partition]),
                    ]),
                ]);
                let resp = try_call(cluster.addr(node), 2, &req, POLL_REQUEST_TIMEOUT)
                    .await
                    .unwrap();
                let code = resp.results[0].partitions[0].error_code;
                assert_eq!(code, expected, "{} at node {node}", at("AlterReplicaLogDirs"));
            }
            checked += 1;
        }

        // The leader itself serves the partition: the refusals above were about leadership.
        let addr = cluster.addr(leader);
        let produce = produce_request(&name, partition, batch(partition), -1);
        let resp = try_call(addr, 9, &produce, POLL_REQUEST_TIMEOUT).await.unwrap();
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(
            (p.error_code, p.base_offset),
            (0, 0),
            "Produce to {name}/{partition} at its leader {leader}"
        );
        let resp = try_call(addr, 7, &list_latest(&name, partition), POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.offset),
            (0, 1),
            "ListOffsets of {name}/{partition} at its leader {leader}: one record, none from the refused produces"
        );
    }
    assert_eq!(checked, 6, "3 partitions, each refused by the 2 nodes not leading it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_survives_its_leader() {
    // Raft (KIP-595): when the leader dies the remaining majority elects another, and metadata
    // changes go on through it; the old leader rejoins as a follower and catches up.
    let mut cluster = Cluster::start(3).await;
    let old = cluster.controller().await;
    cluster.kill(old);
    let new = cluster.controller().await;
    assert_ne!(new, old, "the killed controller is still reported active");

    // Through the survivor that is not the controller, so the request is forwarded.
    let via = cluster.running().into_iter().find(|id| *id != new).unwrap();
    let name = unique("after-failover");
    create_topic_within(&cluster, via, &name, 3, Duration::from_secs(20)).await;
    // Partitions placed on the killed node have no running leader yet; the survivors must
    // still agree on the topic itself.
    for id in cluster.running() {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let resp = cluster.metadata(id, &[&name]).await;
            let listed = resp
                .as_ref()
                .is_ok_and(|r| r.topics.iter().any(|t| t.error_code == 0 && t.partitions.len() == 3));
            if listed {
                break;
            }
            assert!(Instant::now() < deadline, "node {id} does not list {name}: {resp:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    cluster.restart(old).await;
    let view = topic_everywhere(&cluster, &name, 3).await;
    println!("{name} after failover from {old} to {new}: leaders {:?}", view.leaders);
    // Every partition, wherever it was placed, takes and serves records.
    let produced = produce_keyed(&cluster.bootstrap(), &name, 60, "failover").await;
    let (consumed, duplicates) = {
        let (bootstrap, name) = (cluster.bootstrap(), name.clone());
        tokio::task::spawn_blocking(move || consume_assigned(&bootstrap, &name, 3, 60))
            .await
            .unwrap()
    };
    assert!(duplicates.is_empty(), "{duplicates:?}");
    assert_eq!(consumed, produced);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_majority_refuses_metadata_changes_then_recovers() {
    // Raft commits only what a majority stores: a controller alone of three cannot create a
    // topic, and answers with an error rather than hanging; once a second voter is back the
    // quorum commits again.
    let mut cluster = Cluster::start(3).await;
    let survivor = cluster.controller().await;
    let others: Vec<i32> = cluster.ids().into_iter().filter(|id| *id != survivor).collect();
    for &id in &others {
        cluster.kill(id);
    }

    let lonely = unique("lonely");
    let started = Instant::now();
    let refused = create_topic(&cluster, survivor, &lonely, 1, Duration::from_secs(15)).await;
    println!(
        "CreateTopics on node {survivor} without a majority, after {:?}: {refused:?}",
        started.elapsed()
    );
    assert!(
        refused.as_ref().is_err_and(|e| e.starts_with("error ")),
        "without a majority CreateTopics must be answered with an error within 15 s, got {refused:?}"
    );

    cluster.restart(others[0]).await;
    // A new name: the refused proposal may still commit now that there is a majority.
    let recovered = unique("recovered");
    create_topic_within(&cluster, survivor, &recovered, 2, Duration::from_secs(30)).await;
    let view = topic_everywhere(&cluster, &recovered, 2).await;
    println!(
        "{recovered} on nodes {:?}: leaders {:?}",
        cluster.running(),
        view.leaders
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_survives_a_full_cluster_restart() {
    // The quorum's log and snapshots are on disk (fsynced before an append counts), so a cluster
    // stopped whole comes back with every topic, id, placement and record.
    let mut cluster = Cluster::start(3).await;
    let topics = [(unique("restart-a"), 3, 90), (unique("restart-b"), 2, 40)];
    let mut before = Vec::new();
    for (name, partitions, count) in &topics {
        create_topic_within(&cluster, 3, name, *partitions, Duration::from_secs(20)).await;
        let view = topic_everywhere(&cluster, name, *partitions).await;
        let produced = produce_keyed(&cluster.bootstrap(), name, *count, name).await;
        let ends = end_offsets(&cluster, name, &view).await;
        assert_eq!(
            ends,
            counts_per_partition(&produced, *partitions),
            "{name} before the restart"
        );
        before.push((view, produced));
    }

    cluster.stop_all().await;
    cluster.start_all().await;

    for ((name, partitions, count), (view_before, produced)) in topics.iter().zip(&before) {
        let view = topic_everywhere(&cluster, name, *partitions).await;
        assert_eq!(
            &view, view_before,
            "{name}: id and leaders (RF 1: fixed) after the restart"
        );
        let ends = end_offsets(&cluster, name, &view).await;
        assert_eq!(
            ends,
            counts_per_partition(produced, *partitions),
            "{name} after the restart"
        );
        let (consumed, duplicates) = {
            let (bootstrap, name, partitions, count) = (cluster.bootstrap(), name.clone(), *partitions, *count);
            tokio::task::spawn_blocking(move || consume_assigned(&bootstrap, &name, partitions, count))
                .await
                .unwrap()
        };
        assert!(duplicates.is_empty(), "{name}: {duplicates:?}");
        assert_eq!(&consumed, produced, "{name}: records after the restart");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_broker_is_fenced_and_unfenced_when_it_returns() {
    // Kafka's BrokerHeartbeatManager: a broker silent past broker.session.timeout.ms (3 s
    // here) is fenced: Metadata no longer lists it and its partitions have no leader
    // (LEADER_NOT_AVAILABLE); it is unfenced once it heartbeats again, caught up.
    let mut cluster = Cluster::start(3).await;
    let name = unique("fenced");
    create_topic_within(&cluster, 1, &name, 6, Duration::from_secs(20)).await;
    let view = topic_everywhere(&cluster, &name, 6).await;
    let gone = cluster.controller().await % 3 + 1;
    let on_gone: Vec<i32> = (0..)
        .zip(&view.leaders)
        .filter(|(_, l)| **l == gone)
        .map(|(p, _)| p)
        .collect();
    assert!(
        !on_gone.is_empty(),
        "placement left node {gone} without a partition: {:?}",
        view.leaders
    );
    cluster.kill(gone);
    let observer = cluster.running()[0];

    let state = |resp: &kafka_protocol::messages::MetadataResponse| {
        let listed = resp.brokers.iter().any(|b| b.node_id.0 == gone);
        let partitions: Vec<(i32, i16, i32)> = resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter(|p| on_gone.contains(&p.partition_index))
            .map(|p| (p.partition_index, p.error_code, p.leader_id.0))
            .collect();
        (listed, partitions)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = cluster.metadata(observer, &[&name]).await;
        if let Ok(resp) = &resp {
            let (listed, partitions) = state(resp);
            if !listed && partitions.iter().all(|&(_, code, leader)| (code, leader) == (5, -1)) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "node {gone} was never fenced: {resp:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    cluster.restart(gone).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = cluster.metadata(observer, &[&name]).await;
        if let Ok(resp) = &resp {
            let (listed, partitions) = state(resp);
            if listed && partitions.iter().all(|&(_, code, leader)| (code, leader) == (0, gone)) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "node {gone} was never unfenced: {resp:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_stopped_by_sigterm_is_fenced_at_once() {
    // Kafka's controlled shutdown (controlled.shutdown.enable, BrokerHeartbeat WantShutDown):
    // a stopping broker has the controller fence it before it stops, so the others stop
    // listing it and placement skips it at once, not after broker.session.timeout.ms (60 s
    // here, far beyond the test's waits). Restarted, it is unfenced once caught up.
    let mut cluster = Cluster::start_with(
        3,
        &[
            ("broker.session.timeout.ms", "60000"),
            ("broker.heartbeat.interval.ms", "500"),
        ],
    )
    .await;
    let controller = cluster.controller().await;
    let gone = controller % 3 + 1;
    let observer = cluster.ids().into_iter().find(|&id| id != gone).unwrap();
    let stopped_at = Instant::now();
    cluster.terminate(gone).await;
    let deadline = stopped_at + Duration::from_secs(8);
    loop {
        let seen = cluster.brokers_seen_by(observer).await;
        if let Ok(brokers) = &seen
            && !brokers.contains_key(&gone)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {observer} still lists node {gone} {:?} after its SIGTERM: {seen:?}",
            stopped_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let name = unique("after-shutdown");
    create_topic_within(&cluster, observer, &name, 6, Duration::from_secs(20)).await;
    let view = view_from(&cluster, observer, &name, 6).await.expect("the new topic");
    assert!(
        !view.leaders.contains(&gone),
        "a partition was placed on the stopped node {gone}: {:?}",
        view.leaders
    );

    // `restart` waits until every running node lists every running broker again.
    cluster.restart(gone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_replica_assignments_place_partitions_where_asked() {
    // kafka-topics --replica-assignment: CreateTopics and CreatePartitions with explicit
    // replicas put each partition on the brokers named, the first leading; a broker that is
    // not live, or named twice, is INVALID_REPLICA_ASSIGNMENT (39).
    use kafka_protocol::messages::create_partitions_request::{CreatePartitionsAssignment, CreatePartitionsTopic};
    use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
    use kafka_protocol::messages::{CreatePartitionsRequest, CreateTopicsRequest};
    let cluster = Cluster::start(3).await;
    let create = |name: &str, replicas: &[&[i32]]| {
        CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(topic(name))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_assignments(
                        (0..)
                            .zip(replicas)
                            .map(|(p, r)| {
                                CreatableReplicaAssignment::default()
                                    .with_partition_index(p)
                                    .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
                            })
                            .collect(),
                    ),
            ])
            .with_timeout_ms(10_000)
    };
    let via = cluster.addr(2);
    let name = unique("assigned");
    let resp = try_call(via, 5, &create(&name, &[&[3], &[1], &[2], &[3]]), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    let view = topic_everywhere(&cluster, &name, 4).await;
    assert_eq!(view.leaders, vec![3, 1, 2, 3]);

    let grow = CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic(&name))
                .with_count(6)
                .with_assignments(Some(vec![
                    CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)]),
                    CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)]),
                ])),
        ])
        .with_timeout_ms(10_000);
    let resp = try_call(via, 3, &grow, POLL_REQUEST_TIMEOUT).await.unwrap();
    assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
    let view = topic_everywhere(&cluster, &name, 6).await;
    assert_eq!(view.leaders, vec![3, 1, 2, 3, 1, 1]);

    let two = unique("two-replicas");
    let resp = try_call(via, 5, &create(&two, &[&[2, 1]]), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    assert_eq!(topic_everywhere(&cluster, &two, 1).await.leaders, vec![2]);

    for (replicas, code) in [(&[&[9][..]][..], 39), (&[&[1, 1][..]][..], 39)] {
        let other = unique("refused");
        let resp = try_call(via, 5, &create(&other, replicas), POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(resp.topics[0].error_code, code, "{replicas:?}: {resp:?}");
    }
}
