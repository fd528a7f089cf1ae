//! Cluster roles (KIP-500/KIP-631's `process.roles`): controller-only voters that serve no
//! clients, broker-only nodes that follow the metadata log without voting (raft learners, the
//! observers of KIP-595), and the two together as Kafka's isolated mode.
//!
//! Each test starts its own cluster (`common::cluster`); a failing test prints the tail of
//! every node's log.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, POLL_REQUEST_TIMEOUT, Role, try_call};
use common::*;
use rdkafka::Message;
use rdkafka::producer::FutureRecord;

/// CreateTopics of `name` (RF 1) through node `via`, retried until `limit` (a new leader may
/// be being elected); a retry that finds the topic made counts.
async fn create_topic_within(cluster: &Cluster, via: i32, name: &str, partitions: i32, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut failures = Vec::new();
    loop {
        let request = create_topic_request(name, partitions, 5_000);
        match try_call(cluster.addr(via), 7, &request, Duration::from_secs(15)).await {
            Ok(resp) => match resp
                .topics
                .iter()
                .find(|t| t.name.0.as_str() == name)
                .map(|t| t.error_code)
            {
                Some(0) => return,
                // TOPIC_ALREADY_EXISTS after a try that timed out: that try made it.
                Some(36) if !failures.is_empty() => return,
                other => failures.push(format!("error {other:?}")),
            },
            Err(e) => failures.push(e),
        }
        assert!(
            Instant::now() < deadline,
            "CreateTopics {name} through node {via} did not succeed within {limit:?}: {failures:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The leader of each partition of `name` as node `id` lists it, once all have one.
async fn leaders_seen_by(cluster: &Cluster, id: i32, name: &str, partitions: i32) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = cluster.metadata(id, &[name]).await;
        if let Ok(resp) = &resp
            && let Some(t) = resp
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
            && t.error_code == 0
            && t.partitions.len() == partitions as usize
            && t.partitions.iter().all(|p| p.error_code == 0)
        {
            let by_index: BTreeMap<i32, i32> = t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id.0))
                .collect();
            return by_index.into_values().collect();
        }
        assert!(
            Instant::now() < deadline,
            "node {id} never listed {name} whole: {resp:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Produces `count` records through `bootstrap` (acks=all) and reads them all back.
async fn produce_and_consume(bootstrap: &str, name: &str, partitions: i32, count: usize) {
    let producer = producer(bootstrap, &[("linger.ms", "5")]);
    for i in 0..count {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::to(name).key(&value).payload(&value),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("record {i} of {name} through {bootstrap} not acknowledged: {e}"));
    }
    let bootstrap = bootstrap.to_string();
    let name = name.to_string();
    let read = tokio::task::spawn_blocking(move || {
        let consumer = consumer(&bootstrap, &[]);
        assign(
            &consumer,
            &name,
            &(0..partitions).collect::<Vec<_>>(),
            rdkafka::Offset::Beginning,
        );
        let mut values = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while values.len() < count && Instant::now() < deadline {
            if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                let m = m.expect("consume");
                values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
            }
        }
        values
    })
    .await
    .unwrap();
    assert_eq!(read.len(), count, "read back {read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_only_voters_and_broker_only_nodes_form_a_cluster() {
    // Kafka's isolated KRaft mode: three controllers (process.roles=controller) hold the
    // metadata quorum; two brokers (process.roles=broker) follow it and serve the clients.
    let roles = [
        Role::Controller,
        Role::Controller,
        Role::Controller,
        Role::Broker,
        Role::Broker,
    ];
    let mut cluster = Cluster::start_roles(&roles, &[]).await;
    // `start_roles` waited until both brokers list exactly the brokers: no controller.
    for id in [4, 5] {
        let brokers = cluster.brokers_seen_by(id).await.unwrap();
        assert_eq!(
            brokers.keys().copied().collect::<Vec<_>>(),
            [4, 5],
            "node {id} lists {brokers:?}"
        );
    }

    let name = unique("isolated");
    create_topic_within(&cluster, 4, &name, 6, Duration::from_secs(20)).await;
    let leaders = leaders_seen_by(&cluster, 5, &name, 6).await;
    assert!(
        leaders.iter().all(|l| [4, 5].contains(l)),
        "placed on a controller: {leaders:?}"
    );
    for id in [4, 5] {
        produce_and_consume(&cluster.addr(id).to_string(), &name, 6, 20).await;
    }

    // The active controller dies: another controller is elected and the brokers, which follow
    // the new leader, take admin requests again.
    let leader = cluster.controller().await;
    assert!(
        (1..=3).contains(&leader),
        "the active controller is a controller: {leader}"
    );
    cluster.kill(leader);
    let after = unique("after-leader");
    create_topic_within(&cluster, 5, &after, 2, Duration::from_secs(25)).await;
    let new_leader = cluster.controller().await;
    assert_ne!(new_leader, leader);
    leaders_seen_by(&cluster, 4, &after, 2).await;

    // A broker-only node restarted keeps its log and catches up with what it missed.
    cluster.kill(5);
    let missed = unique("missed");
    create_topic_within(&cluster, 4, &missed, 1, Duration::from_secs(20)).await;
    cluster.restart(5).await;
    leaders_seen_by(&cluster, 5, &missed, 1).await;
    produce_and_consume(&cluster.addr(5).to_string(), &missed, 1, 5).await;

    // DescribeQuorum through a broker names the controller-only leader.
    let quorum = try_call(cluster.addr(4), 1, &describe_quorum_request(), POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    let partition = &quorum.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{quorum:?}");
    assert_eq!(partition.leader_id.0, new_leader, "{quorum:?}");
    let voters: Vec<i32> = partition.current_voters.iter().map(|v| v.replica_id.0).collect();
    assert_eq!(voters, [1, 2, 3], "only the controllers vote: {quorum:?}");
    let mut observers: Vec<i32> = partition.observers.iter().map(|o| o.replica_id.0).collect();
    observers.sort_unstable();
    assert_eq!(observers, [4, 5], "the brokers observe: {quorum:?}");
}

fn describe_quorum_request() -> kafka_protocol::messages::DescribeQuorumRequest {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    kafka_protocol::messages::DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(topic("__cluster_metadata"))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_only_node_follows_a_new_leader_and_shuts_down_in_a_controlled_way() {
    // Three combined nodes and one broker-only node (a learner that dials the leader): when
    // the leader dies the learner finds the new one and goes on serving and forwarding; at
    // SIGTERM it has the controller fence it (controlled shutdown) long before its 60 s
    // session would run out, and it is listed again once restarted.
    let roles = [Role::Combined, Role::Combined, Role::Combined, Role::Broker];
    let mut cluster = Cluster::start_roles(
        &roles,
        &[
            ("broker.session.timeout.ms", "60000"),
            ("broker.heartbeat.interval.ms", "500"),
        ],
    )
    .await;
    let leader = cluster.controller().await;
    cluster.kill(leader);
    let name = unique("learner-follows");
    create_topic_within(&cluster, 4, &name, 3, Duration::from_secs(25)).await;
    let observer = cluster.running().into_iter().find(|&id| id != 4).unwrap();
    leaders_seen_by(&cluster, 4, &name, 3).await;
    leaders_seen_by(&cluster, observer, &name, 3).await;
    cluster.restart(leader).await;

    let stopped_at = Instant::now();
    cluster.terminate(4).await;
    loop {
        let seen = cluster.brokers_seen_by(observer).await;
        if let Ok(brokers) = &seen
            && !brokers.contains_key(&4)
        {
            break;
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(8),
            "node {observer} still lists node 4 after its SIGTERM: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.restart(4).await;
    leaders_seen_by(&cluster, 4, &name, 3).await;
}
