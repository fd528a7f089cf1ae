//! Moving replicas on three processes (KIP-455): AlterPartitionReassignments (45) and
//! ListPartitionReassignments (46) as Kafka's `ReplicationControlManager` serves them. A
//! reassignment gives the partition the union of its target and its current replicas; the
//! replicas joining fetch as followers; the ISR change that brings the last of them in sync
//! completes it (the replicas become the target, a leader that leaves hands over at a new
//! epoch, and the brokers left out delete their copy). Records acknowledged with acks=all
//! while it runs are never lost. rdkafka 0.39 has no reassignment admin call, so the requests
//! are raw frames.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, PartitionView, consume_all, create, produce_all, try_call, wait_view};
use common::*;
use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::list_partition_reassignments_response::OngoingTopicReassignment;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest,
};
use rdkafka::producer::FutureRecord;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const REQUEST_TIMED_OUT: i16 = 7;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

/// A follower that stops fetching leaves the ISR within 3 s.
const SETTINGS: &[(&str, &str)] = &[("replica.lag.time.max.ms", "3000")];
/// How long a request to the cluster may take.
const CALL: Duration = Duration::from_secs(15);
/// The most records a background producer sends (its loop is bounded even if never stopped).
const PRODUCED_MAX: usize = 50_000;
/// Records a background producer keeps in flight.
const IN_FLIGHT: usize = 16;

/// An AlterPartitionReassignments of partitions of one topic: `(partition, target)`, a target
/// of None cancelling.
fn alter(name: &str, partitions: &[(i32, Option<Vec<i32>>)]) -> AlterPartitionReassignmentsRequest {
    AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            ReassignableTopic::default().with_name(topic(name)).with_partitions(
                partitions
                    .iter()
                    .map(|(index, target)| {
                        ReassignablePartition::default()
                            .with_partition_index(*index)
                            .with_replicas(target.as_ref().map(|t| t.iter().map(|&b| BrokerId(b)).collect()))
                    })
                    .collect(),
            ),
        ])
}

/// Sends `request` (AlterPartitionReassignments `version`) to a running node: the one that
/// gets it commits through the controller, whichever it is.
async fn send_alter(
    cluster: &Cluster,
    version: i16,
    request: &AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let via = *cluster.running().last().unwrap();
    try_call(cluster.addr(via), version, request, CALL)
        .await
        .unwrap_or_else(|e| panic!("AlterPartitionReassignments via node {via}: {e}"))
}

/// Each partition's error code in an AlterPartitionReassignments answer, in order.
fn codes(resp: &AlterPartitionReassignmentsResponse) -> Vec<i16> {
    resp.responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

/// ListPartitionReassignments from node `via`: of every topic (None) or of those named.
async fn list(cluster: &Cluster, via: i32, topics: Option<&[(&str, &[i32])]>) -> Vec<OngoingTopicReassignment> {
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(topics.map(|topics| {
            topics
                .iter()
                .map(|(name, partitions)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic(name))
                        .with_partition_indexes(partitions.to_vec())
                })
                .collect()
        }));
    let resp = try_call(cluster.addr(via), 0, &request, CALL).await.unwrap();
    assert_eq!(resp.error_code, 0, "{resp:?}");
    resp.topics
}

/// The ongoing reassignment of `name`-0 a listing shows: (replicas, adding, removing).
fn listed(topics: &[OngoingTopicReassignment], name: &str) -> Option<(Vec<i32>, Vec<i32>, Vec<i32>)> {
    let ids = |list: &[BrokerId]| list.iter().map(|b| b.0).collect::<Vec<_>>();
    let t = topics.iter().find(|t| t.name.0.as_str() == name)?;
    let p = t.partitions.iter().find(|p| p.partition_index == 0)?;
    Some((ids(&p.replicas), ids(&p.adding_replicas), ids(&p.removing_replicas)))
}

/// A producer writing "v0", "v1", ... to partition 0 of a topic with acks=all (idempotent),
/// `IN_FLIGHT` records at a time, until stopped: what it got acknowledged, by offset.
struct Load {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<(i64, String)>>,
}

impl Load {
    fn start(cluster: &Cluster, name: &str) -> Load {
        let producer = producer(
            &cluster.bootstrap(),
            &[
                ("acks", "all"),
                ("enable.idempotence", "true"),
                ("linger.ms", "5"),
                ("message.timeout.ms", "30000"),
            ],
        );
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let (name, stopping, count) = (name.to_string(), stop.clone(), acknowledged.clone());
        let task = tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut next = 0;
            while !stopping.load(Ordering::Acquire) && next < PRODUCED_MAX {
                let values: Vec<String> = (next..next + IN_FLIGHT).map(|i| format!("v{i}")).collect();
                next += IN_FLIGHT;
                let sends: Vec<_> = values
                    .iter()
                    .map(|value| {
                        producer.send(
                            FutureRecord::<(), _>::to(&name).partition(0).payload(value),
                            Duration::from_secs(30),
                        )
                    })
                    .collect();
                for (value, delivered) in values.iter().zip(futures::future::join_all(sends).await) {
                    match delivered {
                        Ok(delivery) => acked.push((delivery.offset, value.clone())),
                        Err((e, _)) => panic!("acks=all produce of {value} failed: {e}"),
                    }
                }
                count.store(acked.len(), Ordering::Release);
            }
            acked
        });
        Load {
            stop,
            acknowledged,
            task,
        }
    }

    /// Waits until at least `count` records are acknowledged.
    async fn wait_acknowledged(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.acknowledged.load(Ordering::Acquire) < count {
            assert!(
                !self.task.is_finished(),
                "the producer stopped early (node logs follow)"
            );
            assert!(Instant::now() < deadline, "fewer than {count} records acknowledged");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops producing: every record acknowledged, by offset.
    async fn stop(self) -> Vec<(i64, String)> {
        self.stop.store(true, Ordering::Release);
        self.task.await.expect("the producer task panicked")
    }
}

/// Every acknowledged record is read back from `name`-0 at the offset it was acknowledged at.
fn assert_all_readable(cluster: &Cluster, name: &str, acked: &[(i64, String)]) {
    let last = acked.iter().map(|(o, _)| *o).max().expect("records were acknowledged");
    let read: std::collections::BTreeMap<i64, String> = consume_all(cluster, name, usize::try_from(last + 1).unwrap())
        .into_iter()
        .collect();
    let lost: Vec<&(i64, String)> = acked.iter().filter(|(o, v)| read.get(o) != Some(v)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged records not read back, first {:?} (read {} records)",
        lost.len(),
        acked.len(),
        lost.first(),
        read.len()
    );
}

/// A three-node cluster and a new topic named after `prefix`, of one partition on one
/// replica, once it is led: the cluster, the topic and its partition as listed.
async fn cluster_with_topic(prefix: &str) -> (Cluster, String, PartitionView) {
    let cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique(prefix);
    create(&cluster, &name, 1, 1, &[]).await;
    let view = wait_view(&cluster, &name, 0, "led", |v| v.leader > 0).await;
    (cluster, name, view)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_replication_factor_under_acks_all_loses_nothing() {
    // KIP-455: a target of three replicas where there was one adds two followers outside the
    // ISR; once both are in sync the controller completes the reassignment, and every record
    // acknowledged meanwhile is on the new replicas, so the old leader can go.
    let (mut cluster, name, before) = cluster_with_topic("grow").await;
    let leader = before.leader;
    let load = Load::start(&cluster, &name);
    load.wait_acknowledged(300).await;

    let mut target = vec![leader];
    target.extend(cluster.ids().into_iter().filter(|id| *id != leader));
    let resp = send_alter(&cluster, 0, &alter(&name, &[(0, Some(target.clone()))])).await;
    assert_eq!((resp.error_code, codes(&resp)), (0, vec![0]), "{resp:?}");
    let grown = wait_view(&cluster, &name, 0, "on three replicas, all in sync", |v| {
        v.replicas == target && v.isr.len() == 3
    })
    .await;
    assert_eq!(grown.leader, leader, "the leader stays: it is in the target");
    grow_partitions(&cluster, &name).await;
    assert_eq!(
        list(&cluster, leader, None)
            .await
            .iter()
            .find(|t| t.name.0.as_str() == name),
        None
    );
    let acknowledged = load.acknowledged.load(Ordering::Acquire);
    load.wait_acknowledged(acknowledged + 300).await;
    let acked = load.stop().await;

    // The old leader dies: a new replica leads, holding every acknowledged record.
    cluster.kill(leader);
    wait_view(&cluster, &name, 0, "led by a new replica", |v| {
        v.leader > 0 && v.leader != leader
    })
    .await;
    assert_all_readable(&cluster, &name, &acked);
}

/// A second partition for `name`, whose partition 0 a reassignment took from one replica to
/// three: it gets three replicas too (Kafka's createPartitions reads the factor from the
/// last partition, not from the topic's creation); a manual assignment of one replica no
/// longer fits (INVALID_REPLICA_ASSIGNMENT).
async fn grow_partitions(cluster: &Cluster, name: &str) {
    use kafka_protocol::messages::CreatePartitionsRequest;
    use kafka_protocol::messages::create_partitions_request::{CreatePartitionsAssignment, CreatePartitionsTopic};
    let grow = |assignments| {
        CreatePartitionsRequest::default()
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(topic(name))
                    .with_count(2)
                    .with_assignments(assignments),
            ])
            .with_timeout_ms(10_000)
    };
    let one = Some(vec![
        CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)]),
    ]);
    let resp = try_call(cluster.addr(1), 3, &grow(one), CALL).await.unwrap();
    assert_eq!(resp.results[0].error_code, INVALID_REPLICA_ASSIGNMENT, "{resp:?}");
    let resp = try_call(cluster.addr(1), 3, &grow(None), CALL).await.unwrap();
    assert_eq!(resp.results[0].error_code, 0, "{resp:?}");
    let added = wait_view(cluster, name, 1, "created", |v| v.leader > 0).await;
    assert_eq!(added.replicas.len(), 3, "{added:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_partition_to_another_broker_under_acks_all_loses_nothing() {
    // KIP-455: [A] to [C]. C fetches outside the ISR meanwhile (replicas [C, A], adding [C],
    // removing [A]); C joining the ISR completes the move: C leads at a new epoch and A stops
    // and deletes its copy.
    let (cluster, name, before) = cluster_with_topic("move").await;
    let from = before.leader;
    let to = *cluster.ids().iter().find(|id| **id != from).unwrap();
    let load = Load::start(&cluster, &name);
    load.wait_acknowledged(300).await;

    let resp = send_alter(&cluster, 1, &alter(&name, &[(0, Some(vec![to]))])).await;
    assert_eq!((resp.error_code, codes(&resp)), (0, vec![0]), "{resp:?}");
    let moved = wait_view(&cluster, &name, 0, "moved", |v: &PartitionView| {
        v.replicas == vec![to] && v.leader == to
    })
    .await;
    assert_eq!(moved.isr, vec![to]);
    assert!(moved.leader_epoch > before.leader_epoch, "{before:?} then {moved:?}");
    let acknowledged = load.acknowledged.load(Ordering::Acquire);
    load.wait_acknowledged(acknowledged + 300).await;
    let acked = load.stop().await;
    assert_all_readable(&cluster, &name, &acked);

    // The broker it left deletes its copy (renamed aside, then removed).
    wait_deleted(&cluster, from, &name).await;
    assert!(list(&cluster, to, None).await.is_empty());
}

/// Waits until node `id`'s data directory holds nothing of `name`-0.
async fn wait_deleted(cluster: &Cluster, id: i32, name: &str) {
    let dir = cluster.node(id).dir.path().to_path_buf();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("{name}-0")))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "node {id} still has {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_while_its_replica_moved_away_deletes_it_when_it_returns() {
    // The returning broker's copy goes, whether it learns of the move while catching up on
    // the metadata (the usual case here), or finds it already in its own metadata log at
    // start-up, having crashed before deleting (Kafka's stray logs, KIP-858).
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("stray");
    create(&cluster, &name, 1, 2, &[]).await;
    let v = wait_view(&cluster, &name, 0, "both in sync", |v| v.leader > 0 && v.isr.len() == 2).await;
    let follower = *v.replicas.iter().find(|r| **r != v.leader).unwrap();
    let other = *cluster.ids().iter().find(|id| !v.replicas.contains(id)).unwrap();
    produce_all(&cluster, &name, 0, 20).await;
    cluster.kill(follower);
    let target = vec![v.leader, other];
    let resp = send_alter(&cluster, 0, &alter(&name, &[(0, Some(target.clone()))])).await;
    assert_eq!(codes(&resp), vec![0], "{resp:?}");
    wait_view(&cluster, &name, 0, "moved off the stopped broker", |w| {
        w.replicas == target && w.isr.len() == 2
    })
    .await;
    assert!(
        std::fs::read_dir(cluster.node(follower).dir.path())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&format!("{name}-0"))),
        "the stopped broker still has its copy"
    );
    cluster.restart(follower).await;
    wait_deleted(&cluster, follower, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reassignment_is_listed_refused_as_kafka_does_and_cancelled() {
    // A target naming a registered broker that is down stays in progress (its replica never
    // catches up): ListPartitionReassignments shows it, a cancel reverts it (Kafka's
    // `PartitionReassignmentRevert`). The refusals are Kafka's codes for each case.
    let (mut cluster, name, before) = cluster_with_topic("cancel").await;
    let leader = before.leader;
    let down = *cluster.ids().iter().find(|id| **id != leader).unwrap();
    let other = *cluster.ids().iter().find(|id| **id != leader && **id != down).unwrap();

    // Refusals first (nothing changes): unknown topic and partition, an empty target, a
    // broker twice, one never registered, a cancel of nothing, a deadline already passed.
    let resp = send_alter(&cluster, 0, &alter(&unique("absent"), &[(0, Some(vec![leader]))])).await;
    assert_eq!(codes(&resp), vec![UNKNOWN_TOPIC_OR_PARTITION], "{resp:?}");
    let resp = send_alter(
        &cluster,
        0,
        &alter(
            &name,
            &[
                (7, Some(vec![leader])),
                (0, Some(vec![])),
                (0, Some(vec![leader, leader])),
                (0, Some(vec![99])),
                (0, None),
            ],
        ),
    )
    .await;
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert_eq!(
        codes(&resp),
        vec![
            UNKNOWN_TOPIC_OR_PARTITION,
            INVALID_REPLICA_ASSIGNMENT,
            INVALID_REPLICA_ASSIGNMENT,
            INVALID_REPLICA_ASSIGNMENT,
            NO_REASSIGNMENT_IN_PROGRESS
        ],
        "{resp:?}"
    );
    let resp = send_alter(&cluster, 0, &alter(&name, &[(0, Some(vec![other]))]).with_timeout_ms(0)).await;
    assert_eq!(
        (resp.error_code, codes(&resp)),
        (REQUEST_TIMED_OUT, vec![REQUEST_TIMED_OUT]),
        "{resp:?}"
    );
    // v1 with the factor locked (KIP-860): another size is refused, the same size is not.
    let locked = |target: Vec<i32>| alter(&name, &[(0, Some(target))]).with_allow_replication_factor_change(false);
    let resp = send_alter(&cluster, 1, &locked(vec![leader, down])).await;
    assert_eq!(codes(&resp), vec![INVALID_REPLICATION_FACTOR], "{resp:?}");
    assert!(!resp.allow_replication_factor_change, "echoed: {resp:?}");
    let resp = send_alter(&cluster, 1, &locked(vec![leader])).await;
    assert_eq!(codes(&resp), vec![0], "the same replicas: nothing to do: {resp:?}");
    assert!(list(&cluster, leader, None).await.is_empty());

    // The broker to add is down (fenced, still registered): the reassignment stays open.
    cluster.kill(down);
    let resp = send_alter(&cluster, 0, &alter(&name, &[(0, Some(vec![leader, down]))])).await;
    assert_eq!(codes(&resp), vec![0], "{resp:?}");
    let growing = wait_view(&cluster, &name, 0, "reassigning", |v| v.replicas == vec![leader, down]).await;
    assert_eq!(
        (growing.leader, growing.isr.clone()),
        (leader, vec![leader]),
        "{growing:?}"
    );
    let expected = Some((vec![leader, down], vec![down], vec![]));
    for via in cluster.running() {
        assert_eq!(listed(&list(&cluster, via, None).await, &name), expected, "node {via}");
    }
    let named = list(
        &cluster,
        leader,
        Some(&[(name.as_str(), &[0, 5]), ("no-such-topic", &[0])]),
    )
    .await;
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(listed(&named, &name), expected);
    assert!(list(&cluster, leader, Some(&[(name.as_str(), &[5])])).await.is_empty());
    // Locked to the factor of the target under way (two), one replica is refused.
    let resp = send_alter(&cluster, 1, &locked(vec![other])).await;
    assert_eq!(codes(&resp), vec![INVALID_REPLICATION_FACTOR], "{resp:?}");

    // Cancelled: back to the replicas before, the broker being added dropped.
    let resp = send_alter(&cluster, 0, &alter(&name, &[(0, None)])).await;
    assert_eq!(codes(&resp), vec![0], "{resp:?}");
    let reverted = wait_view(&cluster, &name, 0, "reverted", |v| v.replicas == vec![leader]).await;
    assert_eq!((reverted.leader, reverted.isr), (leader, vec![leader]));
    assert!(
        list(&cluster, leader, None)
            .await
            .iter()
            .all(|t| t.name.0.as_str() != name)
    );
    let resp = send_alter(&cluster, 0, &alter(&name, &[(0, None)])).await;
    assert_eq!(codes(&resp), vec![NO_REASSIGNMENT_IN_PROGRESS], "{resp:?}");
}
