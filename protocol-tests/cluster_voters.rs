//! A dynamic metadata quorum (KIP-853) on three processes: `controller.quorum.bootstrap.servers`
//! instead of `controller.quorum.voters`. Node 1 is formatted `--standalone`, the one voter the
//! quorum starts with; nodes 2 and 3 start unformatted and follow the log as observers, until
//! AddRaftVoter (80) makes them voters; RemoveRaftVoter (81) turns a voter back into an
//! observer. Raw frames: rdkafka 0.39 has no call for either.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{Cluster, POLL_REQUEST_TIMEOUT, consume_all, create, produce_all, try_call};
use common::*;
use kafka_protocol::messages::add_raft_voter_request::Listener;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{
    AddRaftVoterRequest, DescribeClusterRequest, DescribeQuorumRequest, RemoveRaftVoterRequest,
};
use kafka_protocol::protocol::StrBytes;

const REQUEST_TIMED_OUT: i16 = 7;
const INVALID_REQUEST: i16 = 42;
const INCONSISTENT_CLUSTER_ID: i16 = 104;
const DUPLICATE_VOTER: i16 = 126;
const VOTER_NOT_FOUND: i16 = 127;
/// How long a change of voters may take to show in DescribeQuorum.
const QUORUM_WAIT: Duration = Duration::from_secs(30);
const CALL: Duration = Duration::from_secs(20);

/// The leader, the voters and the observers of the quorum, as DescribeQuorum v2 through node
/// `via` lists them.
#[derive(Debug, Clone, PartialEq)]
struct Quorum {
    leader: i32,
    voters: Vec<i32>,
    observers: Vec<i32>,
}

async fn quorum(cluster: &Cluster, via: i32) -> Result<Quorum, String> {
    let request = DescribeQuorumRequest::default().with_topics(vec![
        TopicData::default()
            .with_topic_name(topic("__cluster_metadata"))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
    ]);
    let resp = try_call(cluster.addr(via), 2, &request, POLL_REQUEST_TIMEOUT).await?;
    let p = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or("no partition")?;
    if p.error_code != 0 {
        return Err(format!("error {}", p.error_code));
    }
    let ids = |replicas: &[kafka_protocol::messages::describe_quorum_response::ReplicaState]| {
        let mut ids: Vec<i32> = replicas.iter().map(|r| r.replica_id.0).collect();
        ids.sort_unstable();
        ids
    };
    Ok(Quorum {
        leader: p.leader_id.0,
        voters: ids(&p.current_voters),
        observers: ids(&p.observers),
    })
}

/// Waits until DescribeQuorum through `via` shows a quorum of which `ok` holds.
async fn wait_quorum(cluster: &Cluster, via: i32, what: &str, ok: impl Fn(&Quorum) -> bool) -> Quorum {
    let deadline = Instant::now() + QUORUM_WAIT;
    loop {
        let seen = quorum(cluster, via).await;
        if let Ok(q) = &seen
            && ok(q)
        {
            return q.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the quorum through node {via} never showed {what}: last {seen:?}\n{}",
            cluster.logs_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn cluster_id(cluster: &Cluster, via: i32) -> String {
    let resp = try_call(cluster.addr(via), 0, &DescribeClusterRequest::default(), CALL)
        .await
        .unwrap();
    resp.cluster_id.to_string()
}

/// AddRaftVoter of node `id` sent to node `via`: its error code and message.
async fn add_voter(cluster: &Cluster, via: i32, id: i32, cluster_id: &str) -> (i16, Option<String>) {
    // A node the cluster does not have gets a port nothing listens on.
    let port = match cluster.ids().contains(&id) {
        true => cluster.node(id).controller_port,
        false => 1,
    };
    let request = AddRaftVoterRequest::default()
        .with_cluster_id(Some(StrBytes::from_string(cluster_id.to_string())))
        .with_timeout_ms(10_000)
        .with_voter_id(id)
        .with_listeners(vec![
            Listener::default()
                .with_name(StrBytes::from_static_str("CONTROLLER"))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(port),
        ]);
    let resp = try_call(cluster.addr(via), 0, &request, CALL).await.unwrap();
    (resp.error_code, resp.error_message.map(|m| m.to_string()))
}

/// RemoveRaftVoter of node `id` sent to node `via`: its error code and message.
async fn remove_voter(cluster: &Cluster, via: i32, id: i32, cluster_id: &str) -> (i16, Option<String>) {
    let request = RemoveRaftVoterRequest::default()
        .with_cluster_id(Some(StrBytes::from_string(cluster_id.to_string())))
        .with_voter_id(id);
    let resp = try_call(cluster.addr(via), 0, &request, CALL).await.unwrap();
    (resp.error_code, resp.error_message.map(|m| m.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_quorum_grows_from_one_voter_fails_over_and_shrinks() {
    let mut cluster = Cluster::start_dynamic(3, &[]).await;
    let q = wait_quorum(&cluster, 2, "node 1 voting, 2 and 3 observing", |q| {
        q.voters == [1] && q.observers == [2, 3]
    })
    .await;
    assert_eq!(q.leader, 1);
    let id = cluster_id(&cluster, 3).await;
    // A data directory that holds a metadata log is formatted already (Kafka's
    // kafka-storage format refuses it too); format needs a way to say who votes.
    let (ok, said) = cluster.try_format(1, &["--standalone"]);
    assert!(!ok && said.contains("already holds a metadata log"), "{said}");
    let (ok, said) = cluster.try_format(2, &[]);
    assert!(
        !ok && said.contains("--standalone, --initial-controllers or --no-initial-controllers"),
        "{said}"
    );

    // Kafka's refusals.
    assert_eq!(add_voter(&cluster, 2, 1, &id).await.0, DUPLICATE_VOTER);
    let (code, message) = add_voter(&cluster, 2, 9, &id).await;
    assert_eq!(code, REQUEST_TIMED_OUT, "node 9 follows nothing: {message:?}");
    assert_eq!(
        add_voter(&cluster, 2, 2, "another-cluster").await.0,
        INCONSISTENT_CLUSTER_ID
    );
    assert_eq!(remove_voter(&cluster, 2, 3, &id).await.0, VOTER_NOT_FOUND);
    assert_eq!(
        remove_voter(&cluster, 3, 1, &id).await.0,
        INVALID_REQUEST,
        "the last voter"
    );

    // Growing, through the leader and forwarded by an observer.
    assert_eq!(add_voter(&cluster, 1, 2, &id).await, (0, None));
    assert_eq!(add_voter(&cluster, 3, 3, &id).await, (0, None));
    for via in cluster.ids() {
        wait_quorum(&cluster, via, "three voters", |q| {
            q.voters == [1, 2, 3] && q.observers.is_empty()
        })
        .await;
    }
    let name = unique("dynamic");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "2")]).await;
    let offsets = produce_all(&cluster, &name, 0, 100).await;
    assert_eq!(offsets.len(), 100);

    // The first voter dies: the two it added elect a leader between them, and metadata
    // changes go on.
    cluster.kill(1);
    let q = wait_quorum(&cluster, 2, "a new leader", |q| [2, 3].contains(&q.leader)).await;
    assert_eq!(q.voters, [1, 2, 3], "a dead voter is still a voter");
    let second = unique("dynamic-after");
    create(&cluster, &second, 1, 2, &[]).await;
    cluster.restart(1).await;
    wait_quorum(&cluster, 1, "node 1 back as a voter", |q| q.voters == [1, 2, 3]).await;

    // Shrinking: a removed voter that keeps running follows the log as an observer, and may
    // be added again.
    let via = q.leader;
    assert_eq!(remove_voter(&cluster, via, 3, &id).await, (0, None));
    wait_quorum(&cluster, 1, "node 3 observing", |q| {
        q.voters == [1, 2] && q.observers == [3]
    })
    .await;
    let third = unique("dynamic-two-voters");
    create(&cluster, &third, 1, 3, &[]).await;
    assert_eq!(add_voter(&cluster, 1, 3, &id).await, (0, None));
    wait_quorum(&cluster, 3, "three voters again", |q| {
        q.voters == [1, 2, 3] && q.observers.is_empty()
    })
    .await;

    // A voter removed while it is down comes back believing it votes (its log predates the
    // removal); the leader's replication tells it otherwise, and it observes.
    cluster.kill(3);
    let q = wait_quorum(&cluster, 1, "a leader", |q| [1, 2].contains(&q.leader)).await;
    assert_eq!(remove_voter(&cluster, q.leader, 3, &id).await, (0, None));
    cluster.restart(3).await;
    wait_quorum(&cluster, 3, "node 3 observing again", |q| {
        q.voters == [1, 2] && q.observers == [3]
    })
    .await;
    let fourth = unique("dynamic-after-removal");
    create(&cluster, &fourth, 1, 3, &[]).await;

    let read = consume_all(&cluster, &name, 100);
    assert_eq!(read.len(), 100, "every acks=all record read back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_quorum_refuses_voter_changes_with_unsupported_version() {
    // kraft.version 0 in Kafka: the voters come from controller.quorum.voters.
    const UNSUPPORTED_VERSION: i16 = 35;
    let cluster = Cluster::start(3).await;
    let id = cluster_id(&cluster, 1).await;
    assert_eq!(add_voter(&cluster, 1, 2, &id).await.0, UNSUPPORTED_VERSION);
    assert_eq!(remove_voter(&cluster, 2, 3, &id).await.0, UNSUPPORTED_VERSION);
}
