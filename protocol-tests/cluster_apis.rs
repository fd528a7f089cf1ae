//! DescribeQuorum (KIP-595/KIP-853) and DescribeTopicPartitions (KIP-966) as raw frames:
//! pagination and cursors against a single in-process node, the single node's quorum of one,
//! and a 3-process cluster's quorum seen from its leader and through a follower.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::cluster::{CONTROLLER_WAIT, Cluster, POLL_REQUEST_TIMEOUT, try_call};
use common::*;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use uuid::Uuid;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const INVALID_TOPIC_EXCEPTION: i16 = 17;
const INVALID_REQUEST: i16 = 42;
/// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS: every topic
/// operation, as Kafka reports them without an authorizer.
const TOPIC_OPERATIONS_ALL: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);

async fn create(raw: &mut Raw, name: &str, partitions: i32) {
    let request = common::create_topic_request(name, partitions, 5000);
    let resp = raw.call(7, &request).await;
    assert_eq!(resp.topics[0].error_code, 0, "creating {name}");
}

fn describe_partitions(names: &[&str], limit: i32, cursor: Option<(&str, i32)>) -> DescribeTopicPartitionsRequest {
    DescribeTopicPartitionsRequest::default()
        .with_topics(
            names
                .iter()
                .map(|name| TopicRequest::default().with_name(topic(name)))
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(name, partition)| {
            Cursor::default()
                .with_topic_name(topic(name))
                .with_partition_index(partition)
        }))
}

/// (topic, partition) pairs of one answer, and its next cursor.
type Page = (Vec<(String, i32)>, Option<(String, i32)>);

fn page_of(resp: &DescribeTopicPartitionsResponse) -> Page {
    let listed = resp
        .topics
        .iter()
        .flat_map(|t| {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            t.partitions.iter().map(move |p| (name.clone(), p.partition_index))
        })
        .collect();
    let next = resp
        .next_cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    (listed, next)
}

fn pairs(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_topic_partitions_pages_one_partition_at_a_time_along_the_cursor() {
    // Kafka's DescribeTopicPartitionsRequestHandler and KRaftMetadataCache
    // .getTopicMetadataForDescribeTopicResponse: sorted names, a cursor at the first
    // partition left out, then at the next topic's partition 0 when a topic ends the page.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "pages-b", 2).await;
    create(&mut raw, "pages-a", 3).await;

    // Named out of order: answered in name order.
    let names = ["pages-b", "pages-a"];
    let mut cursor: Option<(String, i32)> = None;
    let mut walked = Vec::new();
    let mut pages = Vec::new();
    loop {
        let request = describe_partitions(&names, 1, cursor.as_ref().map(|(t, p)| (t.as_str(), *p)));
        let resp = raw.call(0, &request).await;
        let (listed, next) = page_of(&resp);
        pages.push((listed.clone(), next.clone()));
        walked.extend(listed);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages.len() <= 10, "the cursor does not end: {pages:?}");
    }
    let expected: Vec<Page> = vec![
        (pairs(&[("pages-a", 0)]), Some(("pages-a".into(), 1))),
        (pairs(&[("pages-a", 1)]), Some(("pages-a".into(), 2))),
        // The limit is used up with the topic's last partition: the cursor moves to the next
        // topic's partition 0.
        (pairs(&[("pages-a", 2)]), Some(("pages-b".into(), 0))),
        (pairs(&[("pages-b", 0)]), Some(("pages-b".into(), 1))),
        (pairs(&[("pages-b", 1)]), None),
    ];
    assert_eq!(pages, expected);

    // A page that fits everything: each partition described as Metadata describes it.
    let resp = raw.call(0, &describe_partitions(&names, 100, None)).await;
    assert_eq!(resp.next_cursor, None);
    let metadata = raw
        .call(
            12,
            &MetadataRequest::default().with_topics(Some(
                names
                    .iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(topic(n))))
                    .collect(),
            )),
        )
        .await;
    assert_eq!(resp.topics.len(), 2);
    for t in &resp.topics {
        let name = t.name.as_ref().unwrap();
        let meta = metadata.topics.iter().find(|m| m.name.as_ref() == Some(name)).unwrap();
        assert_eq!(t.error_code, 0);
        assert_eq!(t.topic_id, meta.topic_id);
        assert_ne!(t.topic_id, Uuid::nil());
        assert!(!t.is_internal);
        assert_eq!(t.topic_authorized_operations, TOPIC_OPERATIONS_ALL);
        assert_eq!(t.partitions.len(), meta.partitions.len());
        for (p, m) in t.partitions.iter().zip(&meta.partitions) {
            assert_eq!(p.error_code, 0);
            assert_eq!(p.partition_index, m.partition_index);
            assert_eq!(p.leader_id, m.leader_id);
            assert_eq!(p.leader_id, metadata.brokers[0].node_id);
            assert_eq!(p.leader_epoch, m.leader_epoch);
            assert_eq!(p.replica_nodes, m.replica_nodes);
            assert_eq!(p.isr_nodes, m.isr_nodes);
            assert_eq!(p.offline_replicas, m.offline_replicas);
            assert_eq!(p.eligible_leader_replicas, Some(vec![]));
            assert_eq!(p.last_known_elr, Some(vec![]));
        }
    }
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_topic_partitions_without_names_walks_every_topic_in_name_order() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "all-c", 1).await;
    create(&mut raw, "all-a", 3).await;
    create(&mut raw, "all-b", 2).await;
    let mut cursor: Option<(String, i32)> = None;
    let mut walked = Vec::new();
    for _ in 0..100 {
        let request = describe_partitions(&[], 2, cursor.as_ref().map(|(t, p)| (t.as_str(), *p)));
        let resp = raw.call(0, &request).await;
        assert!(resp.topics.iter().all(|t| t.error_code == 0));
        let (listed, next) = page_of(&resp);
        assert!(listed.len() <= 2, "a page over the limit: {listed:?}");
        walked.extend(listed);
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(cursor, None, "the cursor does not end");
    // Only ours: the broker may hold internal topics too (they sort first, and are walked).
    let ours: Vec<(String, i32)> = walked.into_iter().filter(|(t, _)| t.starts_with("all-")).collect();
    assert_eq!(
        ours,
        pairs(&[
            ("all-a", 0),
            ("all-a", 1),
            ("all-a", 2),
            ("all-b", 0),
            ("all-b", 1),
            ("all-c", 0)
        ])
    );
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_topic_partitions_reports_unknown_topics_and_creates_none() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "known", 1).await;
    let resp = raw
        .call(0, &describe_partitions(&["known", "never-made", "bad/name"], 10, None))
        .await;
    let answers: Vec<(String, i16, Uuid, usize)> = resp
        .topics
        .iter()
        .map(|t| {
            let name = t.name.as_ref().unwrap().0.to_string();
            (name, t.error_code, t.topic_id, t.partitions.len())
        })
        .collect();
    let known_id = resp.topics.iter().find(|t| t.error_code == 0).unwrap().topic_id;
    assert_eq!(
        answers,
        vec![
            ("bad/name".into(), INVALID_TOPIC_EXCEPTION, Uuid::nil(), 0),
            ("known".into(), 0, known_id, 1),
            ("never-made".into(), UNKNOWN_TOPIC_OR_PARTITION, Uuid::nil(), 0),
        ]
    );
    assert_eq!(resp.next_cursor, None);
    // Auto-creation is on (the default), yet asking did not create it.
    let metadata = raw
        .call(
            12,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(topic("never-made"))),
                ]))
                .with_allow_auto_topic_creation(false),
        )
        .await;
    assert_eq!(metadata.topics[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);

    // A cursor naming a topic the request does not: INVALID_REQUEST for every topic asked.
    let resp = raw
        .call(
            0,
            &describe_partitions(&["known", "never-made"], 10, Some(("other", 0))),
        )
        .await;
    let codes: Vec<(String, i16)> = resp
        .topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            ("known".into(), INVALID_REQUEST),
            ("never-made".into(), INVALID_REQUEST)
        ]
    );
    assert!(
        resp.topics
            .iter()
            .all(|t| t.partitions.is_empty() && t.topic_id == Uuid::nil())
    );
    broker.handle.shutdown().await;
}

fn describe_quorum(partition: i32) -> DescribeQuorumRequest {
    DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(topic("__cluster_metadata"))
            .with_partitions(vec![PartitionData::default().with_partition_index(partition)]),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_is_a_quorum_of_one_whose_high_watermark_counts_metadata_records() {
    // KafkaRaftClient.handleDescribeQuorumRequest / RaftUtil.singletonDescribeQuorumResponse.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let node_id = raw.call(12, &MetadataRequest::default()).await.brokers[0].node_id;

    let before = raw.call(2, &describe_quorum(0)).await;
    create(&mut raw, "one-more-record", 1).await;
    let started = common_now_ms();
    let resp = raw.call(2, &describe_quorum(0)).await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].topic_name.0.as_str(), "__cluster_metadata");
    let p = &resp.topics[0].partitions[0];
    let hw_before = before.topics[0].partitions[0].high_watermark;
    assert_eq!((p.partition_index, p.error_code), (0, 0));
    assert_eq!((p.leader_id, p.leader_epoch), (node_id, 1));
    // The topic is one metadata record.
    assert_eq!(p.high_watermark, hw_before + 1);
    assert_eq!(p.current_voters.len(), 1);
    let me = &p.current_voters[0];
    assert_eq!(me.replica_id, node_id);
    assert_eq!(me.log_end_offset, p.high_watermark);
    assert_eq!(me.replica_directory_id, Uuid::nil());
    assert!(me.last_fetch_timestamp >= started && me.last_caught_up_timestamp >= started);
    assert!(p.observers.is_empty());
    // No controller listener on a single node: the voter is listed without one.
    assert_eq!(resp.nodes.len(), 1);
    assert_eq!(resp.nodes[0].node_id, node_id);
    assert!(resp.nodes[0].listeners.is_empty());

    // Every version answers; v0 has no timestamps, v0-1 no nodes.
    for version in 0..=1 {
        let resp = raw.call(version, &describe_quorum(0)).await;
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.leader_id, p.high_watermark),
            (0, node_id, hw_before + 1)
        );
        assert!(resp.nodes.is_empty());
        let fetched = p.current_voters[0].last_fetch_timestamp;
        assert_eq!(fetched >= started, version == 1, "v{version}: {fetched}");
    }

    // Anything but partition 0 of the metadata log alone: UNKNOWN_TOPIC_OR_PARTITION for each
    // partition asked.
    let resp = raw.call(2, &describe_quorum(1)).await;
    assert_eq!(resp.topics[0].partitions[0].partition_index, 1);
    assert_eq!(resp.topics[0].partitions[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    let resp = raw.call(2, &DescribeQuorumRequest::default()).await;
    assert_eq!((resp.error_code, resp.topics.len()), (0, 0));
    broker.handle.shutdown().await;
}

fn common_now_ms() -> i64 {
    // A millisecond of slack for clocks read on different threads.
    sluice::replica::now_ms() - 1
}

/// Asks every running node until each answers without error and names `leader`, or the
/// wait runs out (an election may move the leader between the two questions).
async fn quorum_from_every_node(cluster: &Cluster) -> (i32, Vec<(i32, DescribeQuorumResponse)>) {
    let deadline = Instant::now() + CONTROLLER_WAIT;
    loop {
        let leader = cluster.controller().await;
        let mut answers = Vec::new();
        let mut problems = Vec::new();
        for id in cluster.running() {
            match try_call(cluster.addr(id), 2, &describe_quorum(0), POLL_REQUEST_TIMEOUT).await {
                Ok(resp) => {
                    let p = &resp.topics[0].partitions[0];
                    if p.error_code != 0 || p.leader_id.0 != leader {
                        problems.push(format!("node {id}: error {} leader {}", p.error_code, p.leader_id.0));
                    }
                    answers.push((id, resp));
                }
                Err(e) => problems.push(format!("node {id}: {e}")),
            }
        }
        if problems.is_empty() {
            return (leader, answers);
        }
        assert!(
            Instant::now() < deadline,
            "the nodes did not all describe leader {leader}: {problems:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_quorum_is_described_by_its_leader_and_through_its_followers() {
    let cluster = Cluster::start(3).await;
    let (leader, answers) = quorum_from_every_node(&cluster).await;
    let from_leader = &answers.iter().find(|(id, _)| *id == leader).unwrap().1;
    let p = &from_leader.topics[0].partitions[0];
    assert_eq!(from_leader.topics[0].topic_name.0.as_str(), "__cluster_metadata");
    assert_eq!(p.leader_id.0, leader);
    assert!(p.leader_epoch >= 1, "epoch {}", p.leader_epoch);
    // Brokers registered through the quorum: something is committed.
    assert!(p.high_watermark > 0, "high watermark {}", p.high_watermark);
    let voters: BTreeSet<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
    assert_eq!(voters, BTreeSet::from([1, 2, 3]));
    assert!(p.observers.is_empty());
    // Committed means held by a majority: at least 2 voters have the high watermark.
    let holding = p
        .current_voters
        .iter()
        .filter(|v| v.log_end_offset >= p.high_watermark)
        .count();
    assert!(
        holding >= 2,
        "{:?} at high watermark {}",
        p.current_voters,
        p.high_watermark
    );
    let me = p.current_voters.iter().find(|v| v.replica_id.0 == leader).unwrap();
    assert!(me.last_fetch_timestamp > 0 && me.last_caught_up_timestamp > 0);
    // v2: each voter's CONTROLLER listener, at the port the voters were configured with.
    let mut nodes: Vec<(i32, String, u16)> = from_leader
        .nodes
        .iter()
        .flat_map(|n| {
            n.listeners
                .iter()
                .map(move |l| (n.node_id.0, l.name.to_string(), l.port))
        })
        .collect();
    nodes.sort();
    let expected: Vec<(i32, String, u16)> = cluster
        .nodes
        .iter()
        .map(|n| (n.id, "CONTROLLER".to_string(), n.controller_port))
        .collect();
    assert_eq!(nodes, expected);
    // The followers forwarded to the leader: the same quorum, the same voters.
    for (id, resp) in &answers {
        let q = &resp.topics[0].partitions[0];
        assert_eq!((q.leader_id.0, q.leader_epoch), (leader, p.leader_epoch), "node {id}");
        let seen: BTreeSet<i32> = q.current_voters.iter().map(|v| v.replica_id.0).collect();
        assert_eq!(seen, voters, "node {id}");
        assert_eq!(resp.nodes.len(), 3, "node {id}");
    }
    // Asked by another node, a follower answers as Kafka's controller does when it does not
    // lead (it never forwards twice), naming the leader.
    let follower = cluster.running().into_iter().find(|id| *id != leader).unwrap();
    let mut forwarded = describe_quorum(0);
    forwarded
        .unknown_tagged_fields
        .insert(sluice::api::describe_quorum::FORWARDED_TAG, bytes::Bytes::new());
    let resp = try_call(cluster.addr(follower), 2, &forwarded, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    let q = &resp.topics[0].partitions[0];
    assert_eq!(q.error_code, NOT_LEADER_OR_FOLLOWER);
    assert_eq!((q.leader_id.0, q.leader_epoch), (leader, p.leader_epoch));
    assert!(q.current_voters.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producer_ids_are_unique_across_brokers_and_block_refills() {
    // Each broker hands out ids from blocks of 1,000 recorded through the quorum. 1,200
    // InitProducerIds per broker, 8 connections each at once, make every broker refill its
    // block while others wait: no id is handed out twice, none fails, none waits for a
    // timeout (a refill holding the runtime's threads would stall the quorum's own traffic).
    let mut cluster = Cluster::start(3).await;
    let mut tasks = Vec::new();
    for id in cluster.ids() {
        for _ in 0..8 {
            let addr = cluster.addr(id);
            tasks.push(tokio::spawn(async move {
                let mut raw = Raw::connect(addr).await;
                let mut ids = Vec::new();
                for _ in 0..150 {
                    let request = InitProducerIdRequest::default()
                        .with_transactional_id(None)
                        .with_transaction_timeout_ms(60_000)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1);
                    let resp = raw.call(4, &request).await;
                    assert_eq!(resp.error_code, 0, "InitProducerId through node at {addr}");
                    ids.push(resp.producer_id.0);
                }
                ids
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let unique: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 3 * 8 * 150);
    assert_eq!(unique.len(), all.len(), "a producer id was handed out twice");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_created_on_one_node_are_enforced_by_every_node_and_survive_a_restart() {
    // ACL bindings are metadata records: created through one node, each node's authorizer sees
    // them once it applies the record. allow.everyone.if.no.acl.found keeps the rest open, so
    // the brokers' own requests (follower fetches need CLUSTER_ACTION, which no ACL names) go
    // on, and the clients here (User:ANONYMOUS on PLAINTEXT) lose only what an ACL names.
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::protocol::StrBytes;
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    let mut cluster = Cluster::start_with(
        3,
        &[
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("allow.everyone.if.no.acl.found", "true"),
        ],
    )
    .await;
    let (open, secret) = (unique("acl-open"), unique("acl-secret"));
    common::cluster::create(&cluster, &open, 1, 3, &[]).await;
    common::cluster::create(&cluster, &secret, 1, 3, &[]).await;
    let binding = AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(secret.clone()))
        .with_resource_pattern_type(3)
        .with_principal(StrBytes::from_static_str("User:alice"))
        .with_host(StrBytes::from_static_str("*"))
        .with_operation(3)
        .with_permission_type(3);
    let created = try_call(
        cluster.addr(1),
        3,
        &CreateAclsRequest::default().with_creations(vec![binding]),
        CONTROLLER_WAIT,
    )
    .await
    .unwrap();
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    // Every node: the named topic is closed to ANONYMOUS, the other still open.
    // (open's code, secret's code) in a Metadata answer of the node at `addr`.
    async fn codes(addr: std::net::SocketAddr, open: &str, secret: &str) -> Option<(i16, i16)> {
        let req = common::cluster::metadata_request(&[open, secret]);
        let resp = try_call(addr, 12, &req, POLL_REQUEST_TIMEOUT).await.ok()?;
        let code = |name: &str| {
            resp.topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
                .map(|t| t.error_code)
        };
        Some((code(open)?, code(secret)?))
    }
    for id in cluster.ids() {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let codes = codes(cluster.addr(id), &open, &secret).await;
            if codes == Some((0, TOPIC_AUTHORIZATION_FAILED)) {
                break;
            }
            assert!(Instant::now() < deadline, "node {id} answers {codes:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The open topic still replicates: an acks=all produce needs all three in sync.
    let producer = producer(&cluster.bootstrap(), &[("acks", "all")]);
    producer
        .send(
            rdkafka::producer::FutureRecord::<(), _>::to(&open).payload("v"),
            Duration::from_secs(15),
        )
        .await
        .expect("acks=all produce to the open topic");
    // A node restarted rebuilds the bindings from the metadata log.
    cluster.kill(3);
    cluster.restart(3).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let codes = codes(cluster.addr(3), &open, &secret).await;
        if codes == Some((0, TOPIC_AUTHORIZATION_FAILED)) {
            break;
        }
        assert!(Instant::now() < deadline, "restarted node 3 answers {codes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let described = try_call(
        cluster.addr(3),
        3,
        &DescribeAclsRequest::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(1)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(1)
            .with_permission_type(1),
        POLL_REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(
        (described.error_code, described.resources.len()),
        (0, 1),
        "{described:?}"
    );
    assert_eq!(described.resources[0].resource_name.as_str(), secret);
    cluster.stop_all().await;
}

/// UpdateFeatures through a node that does not lead the quorum: the level is written to the
/// metadata log, so every node reports it, at the same `finalized_features_epoch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_levels_updated_through_a_follower_are_reported_by_every_node() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::protocol::StrBytes;
    let api_versions = || {
        ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("sluice-tests"))
            .with_client_software_version(StrBytes::from_static_str("1.0"))
    };
    let cluster = Cluster::start(3).await;
    let leader = cluster.controller().await;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    let downgrade = UpdateFeaturesRequest::default().with_feature_updates(vec![
        FeatureUpdateKey::default()
            .with_feature(StrBytes::from_static_str("transaction.version"))
            .with_max_version_level(1)
            .with_upgrade_type(2),
    ]);
    let resp = try_call(cluster.addr(follower), 1, &downgrade, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let deadline = Instant::now() + CONTROLLER_WAIT;
    loop {
        let mut seen = Vec::new();
        for id in cluster.ids() {
            if let Ok(resp) = try_call(cluster.addr(id), 4, &api_versions(), POLL_REQUEST_TIMEOUT).await {
                let levels: Vec<(String, i16)> = resp
                    .finalized_features
                    .iter()
                    .map(|f| (f.name.to_string(), f.max_version_level))
                    .collect();
                seen.push((levels, resp.finalized_features_epoch));
            }
        }
        let expected = vec![
            ("group.version".to_string(), 1),
            ("transaction.version".to_string(), 1),
            ("eligible.leader.replicas.version".to_string(), 1),
            ("share.version".to_string(), 1),
        ];
        if seen.len() == 3 && seen.iter().all(|s| s.0 == expected && s.1 == seen[0].1) {
            assert!(seen[0].1 > 4, "{seen:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the nodes never agreed: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// UnregisterBroker (`kafka-cluster.sh unregister`): a dead broker's registration is removed
/// through any node, so no node lists it any more, even among the fenced; asked again, the id
/// is BROKER_ID_NOT_REGISTERED. A broker still running registers again at its next heartbeat,
/// and the dead one does when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregistered_broker_is_forgotten_until_it_registers_again() {
    use kafka_protocol::messages::UnregisterBrokerRequest;
    let mut cluster = Cluster::start(3).await;
    let gone = cluster.controller().await % 3 + 1;
    cluster.kill(gone);
    let running = cluster.running();
    // Every running node's brokers, fenced included: (id, fenced).
    async fn listed(cluster: &Cluster, nodes: &[i32]) -> Vec<Vec<(i32, bool)>> {
        let req = DescribeClusterRequest::default().with_include_fenced_brokers(true);
        let mut all = Vec::new();
        for id in nodes {
            let brokers = match try_call(cluster.addr(*id), 2, &req, POLL_REQUEST_TIMEOUT).await {
                Ok(resp) => resp.brokers.iter().map(|b| (b.broker_id.0, b.is_fenced)).collect(),
                Err(_) => Vec::new(),
            };
            all.push(brokers);
        }
        all
    }
    async fn until(cluster: &Cluster, nodes: &[i32], what: &str, ok: impl Fn(&[(i32, bool)]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let seen = listed(cluster, nodes).await;
            if seen.iter().all(|b| ok(b)) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {seen:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    until(&cluster, &running, "the killed broker fenced", |b| {
        b.contains(&(gone, true))
    })
    .await;
    let unregister = |id: i32| UnregisterBrokerRequest::default().with_broker_id(BrokerId(id));
    let resp = try_call(cluster.addr(running[0]), 0, &unregister(gone), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.error_code, 0, "{resp:?}");
    until(&cluster, &running, "the unregistered broker gone", |b| {
        b.len() == 2 && !b.iter().any(|(id, _)| *id == gone)
    })
    .await;
    let resp = try_call(cluster.addr(running[1]), 0, &unregister(gone), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        (resp.error_code, resp.error_message.as_deref()),
        (
            102,
            Some(format!("Broker ID {gone} is not currently registered").as_str())
        ),
        "BROKER_ID_NOT_REGISTERED"
    );
    // A running broker unregistered registers again by itself.
    let resp = try_call(
        cluster.addr(running[0]),
        0,
        &unregister(running[1]),
        POLL_REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(resp.error_code, 0, "{resp:?}");
    until(&cluster, &running, "the running broker registered again", |b| {
        b.contains(&(running[1], false))
    })
    .await;
    // The dead one too, when it returns.
    cluster.restart(gone).await;
    until(&cluster, &cluster.ids(), "the returning broker registered", |b| {
        b.len() == 3 && b.iter().all(|(_, fenced)| !fenced)
    })
    .await;
}

/// KIP-1066 on three nodes: a broker whose log directory is cordoned (`cordoned.log.dirs=*`,
/// set through IncrementalAlterConfigs at that broker) gets no replica of a new topic, placed
/// through any node; a replication factor that would need it is INVALID_REPLICATION_FACTOR;
/// uncordoned, it takes replicas again. Only its own DescribeLogDirs (v5) says it is cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_broker_gets_no_replica_of_a_new_topic() {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::protocol::StrBytes;
    let cluster = Cluster::start(3).await;
    cluster.wait_ready().await;
    let cordoned = 2;
    let set = |value: Option<&str>| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str("2"))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("cordoned.log.dirs"))
                        .with_config_operation(if value.is_some() { 0 } else { 1 })
                        .with_value(value.map(|v| StrBytes::from_string(v.to_string()))),
                ]),
        ])
    };
    let resp = try_call(cluster.addr(cordoned), 1, &set(Some("*")), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    // Each node's view: only the cordoned one reports its directory cordoned.
    for id in cluster.ids() {
        let dirs = DescribeLogDirsRequest::default().with_topics(None);
        let resp = try_call(cluster.addr(id), 5, &dirs, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(resp.results[0].is_cordoned, id == cordoned, "node {id}");
    }
    // Created through another node, once it has applied the change (within a few tries).
    let create = |name: &str, rf: i16| {
        let mut req = common::create_topic_request(name, 6, 10_000);
        req.topics[0].replication_factor = rf;
        req
    };
    let via = if cordoned == 1 { 3 } else { 1 };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = try_call(cluster.addr(via), 7, &create("wide", 3), POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let t = &resp.topics[0];
        if t.error_code == 38 {
            assert!(
                t.error_message.as_deref().is_some_and(|m| m.contains("cordoned")),
                "{:?}",
                t.error_message
            );
            break;
        }
        // Not yet applied there: the topic was created; delete it and try again.
        assert_eq!(t.error_code, 0, "{:?}", t.error_message);
        let delete = DeleteTopicsRequest::default().with_topic_names(vec![topic("wide")]);
        try_call(cluster.addr(via), 4, &delete, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        assert!(Instant::now() < deadline, "the cordon never reached node {via}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let resp = try_call(cluster.addr(via), 7, &create("narrow", 2), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0].error_message);
    let md = cluster.metadata(via, &["narrow"]).await.unwrap();
    let hosts: BTreeSet<i32> = md.topics[0]
        .partitions
        .iter()
        .flat_map(|p| p.replica_nodes.iter().map(|b| b.0))
        .collect();
    assert_eq!(
        hosts,
        BTreeSet::from([1, 2, 3])
            .difference(&BTreeSet::from([cordoned]))
            .copied()
            .collect()
    );
    // Uncordoned: a topic on all three.
    let resp = try_call(cluster.addr(cordoned), 1, &set(None), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.responses[0].error_code, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let resp = try_call(cluster.addr(via), 7, &create("wide", 3), POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        if resp.topics[0].error_code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", resp.topics[0].error_message);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
