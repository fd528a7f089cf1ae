//! Three controllers in-process on loopback ports, with short raft timers: elections, failover,
//! loss of the majority, restarts, snapshots, damaged files and garbage on the wire. Every test
//! is bounded (`TEST_TIMEOUT`); waits poll what the nodes report, never a fixed sleep.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use openraft::ServerState;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

use super::state_machine::tests::fingerprint;
use super::*;

const TEST_TIMEOUT: Duration = Duration::from_secs(20);
/// A leader must be agreed within this (a few election timeouts of 150-300 ms, with room for
/// a loaded 2-core machine).
const LEADER_WITHIN: Duration = Duration::from_secs(5);
const APPLIED_WITHIN: Duration = Duration::from_secs(10);

fn test_config() -> QuorumConfig {
    QuorumConfig {
        cluster_id: "raft-test".to_string(),
        election_timeout_min_ms: 150,
        election_timeout_max_ms: 300,
        heartbeat_interval_ms: 50,
        snapshot_logs_since_last: 1000,
        logs_kept_after_snapshot: 1000,
        propose_timeout_ms: 5000,
        io_timeout_ms: 1000,
        idle_timeout_ms: 10_000,
        frame_bytes_max: 16 << 20,
        bootstrap_servers: Vec::new(),
        controller_address: None,
        security: Default::default(),
    }
}

/// Runs a test body within `TEST_TIMEOUT`.
async fn bounded<F: Future<Output = ()>>(body: F) {
    tokio::time::timeout(TEST_TIMEOUT, body)
        .await
        .expect("the test ran past its time bound");
}

fn topic(i: u128) -> MetadataRecord {
    MetadataRecord::CreateTopic {
        name: format!("topic-{i}"),
        id: Uuid::from_u128(i + 1),
        partitions: 1,
        replication_factor: 1,
        configs: BTreeMap::new(),
        leader: 1,
        leader_epoch: 0,
        assignments: Vec::new(),
    }
}

/// Three nodes, each with its data directory and fixed address.
struct Cluster {
    config: QuorumConfig,
    dirs: BTreeMap<u64, TempDir>,
    addresses: BTreeMap<u64, String>,
    nodes: BTreeMap<u64, MetadataQuorum>,
}

impl Cluster {
    async fn start(config: QuorumConfig) -> Cluster {
        let mut listeners = BTreeMap::new();
        let mut addresses = BTreeMap::new();
        let mut dirs = BTreeMap::new();
        for id in 1..=3 {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addresses.insert(id, listener.local_addr().unwrap().to_string());
            listeners.insert(id, listener);
            dirs.insert(id, tempfile::tempdir().unwrap());
        }
        let mut cluster = Cluster {
            config,
            dirs,
            addresses,
            nodes: BTreeMap::new(),
        };
        for (id, listener) in listeners {
            cluster.start_node(id, listener).await;
        }
        cluster
    }

    fn dir(&self, id: u64) -> PathBuf {
        self.dirs[&id].path().to_path_buf()
    }

    async fn start_node(&mut self, id: u64, listener: TcpListener) {
        let node = MetadataQuorum::start(
            id,
            &self.dir(id),
            self.addresses.clone(),
            Some(listener),
            self.config.clone(),
        )
        .await
        .unwrap();
        // Every node calls it at every start, as the broker will: only node 1's first does anything.
        node.initialize().await.unwrap();
        self.nodes.insert(id, node);
    }

    async fn stop(&mut self, id: u64) {
        self.nodes.remove(&id).unwrap().shutdown().await.unwrap();
    }

    /// Starts node `id` again on its address, from its data directory.
    async fn restart(&mut self, id: u64) {
        let address = self.addresses[&id].clone();
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(&address).await {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("rebinding {address}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("cannot rebind {address}: {e}"),
            }
        };
        self.start_node(id, listener).await;
    }

    /// The leader every running node agrees on, once there is one.
    async fn leader(&self) -> u64 {
        let deadline = Instant::now() + LEADER_WITHIN;
        loop {
            let seen: BTreeSet<Option<u64>> = self.nodes.values().map(|n| n.leader()).collect();
            if let [Some(leader)] = seen.iter().copied().collect::<Vec<_>>()[..]
                && let Some(node) = self.nodes.get(&leader)
                && node.metrics().borrow().state == ServerState::Leader
            {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within {LEADER_WITHIN:?}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Proposes on the leader, following a leader change, until it commits.
    async fn propose(&self, record: MetadataRecord) -> i64 {
        let deadline = Instant::now() + APPLIED_WITHIN;
        loop {
            let leader = self.leader().await;
            match self.nodes[&leader].propose(record.clone()).await {
                Ok(offset) => return offset,
                Err(e @ QuorumError::NotLeader { .. }) if Instant::now() < deadline => eprintln!("retrying: {e}"),
                Err(e) => panic!("proposal on node {leader} failed: {e}"),
            }
        }
    }

    /// Waits until every running node has applied up to `offset`, and returns their images.
    async fn applied(&self, offset: i64) -> BTreeMap<u64, Arc<MetadataImage>> {
        let mut images = BTreeMap::new();
        for (id, node) in &self.nodes {
            let mut rx = node.images();
            let image = tokio::time::timeout(APPLIED_WITHIN, rx.wait_for(|image| image.offset >= offset))
                .await
                .unwrap_or_else(|_| panic!("node {id} did not apply up to {offset}: at {}", node.image().offset))
                .unwrap()
                .clone();
            images.insert(*id, image);
        }
        images
    }

    /// Waits until every running node has applied up to `offset` and checks they hold the
    /// same metadata; returns it.
    async fn same_images(&self, offset: i64) -> Arc<MetadataImage> {
        let images = self.applied(offset).await;
        let mut all = images.values();
        let first = all.next().unwrap().clone();
        assert_eq!(first.offset, offset, "no record applied twice or lost");
        for other in all {
            assert_eq!(fingerprint(other), fingerprint(&first));
        }
        first
    }

    async fn shutdown(mut self) {
        for id in self.nodes.keys().copied().collect::<Vec<_>>() {
            self.stop(id).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_one_leader_and_apply_the_same_records() {
    bounded(async {
        let cluster = Cluster::start(test_config()).await;
        let leader = cluster.leader().await;
        for i in 0..10 {
            assert_eq!(
                cluster.propose(topic(i)).await,
                i as i64 + 1,
                "the offset of the record's image"
            );
        }
        let image = cluster.same_images(10).await;
        assert_eq!(image.topics.len(), 10);
        assert_eq!(image.cluster_id, "raft-test");
        // Each node's image carries its own node id.
        for (id, node) in &cluster.nodes {
            assert_eq!(node.image().node_id, *id as i32);
            assert_eq!(node.voters(), BTreeSet::from([1, 2, 3]));
        }
        // A follower refuses, naming the leader and its address.
        let follower = cluster.nodes.keys().copied().find(|id| *id != leader).unwrap();
        match cluster.nodes[&follower].propose(topic(99)).await {
            Err(QuorumError::NotLeader {
                leader: Some(named),
                leader_address: Some(address),
                ..
            }) => {
                assert_eq!(named, leader);
                assert_eq!(address, cluster.addresses[&leader]);
            }
            other => panic!("a follower's proposal: {other:?}"),
        }
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_takes_over_when_the_leader_stops() {
    bounded(async {
        let mut cluster = Cluster::start(test_config()).await;
        let old = cluster.leader().await;
        cluster.propose(topic(0)).await;
        let stopped_at = Instant::now();
        cluster.stop(old).await;
        let new = cluster.leader().await;
        assert_ne!(new, old);
        eprintln!("new leader {new} after {:?}", stopped_at.elapsed());
        assert!(stopped_at.elapsed() < LEADER_WITHIN);
        assert_eq!(cluster.propose(topic(1)).await, 2);
        let image = cluster.same_images(2).await;
        assert!(image.topic("topic-0").is_some() && image.topic("topic-1").is_some());
        // The old leader comes back as a follower and catches up.
        cluster.restart(old).await;
        cluster.same_images(2).await;
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_majority_nothing_commits_until_a_node_returns() {
    bounded(async {
        let config = QuorumConfig {
            propose_timeout_ms: 1500,
            ..test_config()
        };
        let mut cluster = Cluster::start(config).await;
        let leader = cluster.leader().await;
        cluster.propose(topic(0)).await;
        let followers: Vec<u64> = cluster.nodes.keys().copied().filter(|id| *id != leader).collect();
        for id in &followers {
            cluster.stop(*id).await;
        }
        let started = Instant::now();
        let refused = cluster.nodes[&leader].propose(topic(1)).await;
        let waited = started.elapsed();
        eprintln!("without a majority, after {waited:?}: {refused:?}");
        match &refused {
            Err(e @ QuorumError::NotCommitted { .. }) => {
                assert!(e.to_string().contains("not committed within 1500 ms"), "{e}");
                assert_eq!(e.code(), 7, "REQUEST_TIMED_OUT");
            }
            // A leader that noticed it lost its majority may have stepped down meanwhile.
            Err(QuorumError::NotLeader { .. }) => {}
            other => panic!("a proposal without a majority: {other:?}"),
        }
        assert!(waited < Duration::from_secs(3), "bounded: {waited:?}");
        assert_eq!(
            cluster.nodes[&leader].image().offset,
            1,
            "nothing applied without a majority"
        );

        cluster.restart(followers[0]).await;
        // The pending record was in the leader's log, which the returning node cannot
        // outvote: it commits with the next one.
        cluster.propose(topic(2)).await;
        let image = cluster.same_images(3).await;
        for name in ["topic-0", "topic-1", "topic-2"] {
            assert!(image.topic(name).is_some(), "{name}");
        }
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_restart_keeps_every_record_once() {
    bounded(async {
        let mut cluster = Cluster::start(test_config()).await;
        for i in 0..20 {
            cluster.propose(topic(i)).await;
        }
        let before = fingerprint(&*cluster.same_images(20).await);
        for id in 1..=3 {
            cluster.stop(id).await;
        }
        for id in 1..=3 {
            cluster.restart(id).await;
        }
        cluster.leader().await;
        let after = cluster.same_images(20).await;
        assert_eq!(fingerprint(&after), before);
        assert_eq!(cluster.propose(topic(20)).await, 21);
        cluster.same_images(21).await;
        cluster.shutdown().await;
    })
    .await;
}

/// The entries of a node's log file, read without opening it as a store (the node runs).
fn log_file_indexes(dir: &Path) -> Vec<u64> {
    let bytes = std::fs::read(dir.join(RAFT_DIR).join("log")).unwrap();
    let mut indexes = Vec::new();
    let mut pos = 0;
    while let Some((body, len)) = disk::decode_frame(&bytes[pos..], usize::MAX) {
        let entry: Entry = serde_json::from_slice(body).unwrap();
        indexes.push(entry.log_id.index);
        pos += len;
    }
    indexes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_purge_the_log_and_catch_up_a_wiped_or_lagging_node() {
    bounded(async {
        let config = QuorumConfig {
            snapshot_logs_since_last: 10,
            logs_kept_after_snapshot: 0,
            ..test_config()
        };
        let mut cluster = Cluster::start(config).await;
        for i in 0..40 {
            cluster.propose(topic(i)).await;
        }
        let image = cluster.same_images(40).await;
        let leader = cluster.leader().await;
        // Snapshots were built and the log purged up to them, in memory and on disk.
        let deadline = Instant::now() + APPLIED_WITHIN;
        loop {
            let metrics = cluster.nodes[&leader].metrics().borrow().clone();
            if metrics.purged.is_some_and(|p| p.index >= 20) {
                break;
            }
            assert!(Instant::now() < deadline, "no purge: {metrics:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let on_disk = log_file_indexes(&cluster.dir(leader));
        assert!(
            on_disk.first().is_some_and(|first| *first > 20),
            "log file holds {on_disk:?}"
        );

        // A node wiped (same id, empty data dir) gets the snapshot, then the log after it.
        let wiped = cluster
            .nodes
            .keys()
            .copied()
            .find(|id| *id != 1 && *id != leader)
            .unwrap();
        cluster.stop(wiped).await;
        std::fs::remove_dir_all(cluster.dir(wiped).join(RAFT_DIR)).unwrap();
        cluster.restart(wiped).await;
        let caught_up = cluster.same_images(40).await;
        assert_eq!(fingerprint(&caught_up), fingerprint(&image));
        let installed = cluster.nodes[&wiped].metrics().borrow().snapshot;
        assert!(installed.is_some_and(|s| s.index >= 20), "installed {installed:?}");

        // A node stopped while the log moved past what it holds catches up the same way.
        cluster.stop(wiped).await;
        for i in 40..70 {
            cluster.propose(topic(i)).await;
        }
        cluster.restart(wiped).await;
        let image = cluster.same_images(70).await;
        assert_eq!(image.topics.len(), 70);
        let installed = cluster.nodes[&wiped].metrics().borrow().snapshot;
        assert!(installed.is_some_and(|s| s.index >= 50), "installed {installed:?}");

        // And everyone restarts from snapshot + log to the same image.
        for id in 1..=3 {
            cluster.stop(id).await;
        }
        for id in 1..=3 {
            cluster.restart(id).await;
        }
        cluster.leader().await;
        assert_eq!(fingerprint(&*cluster.same_images(70).await), fingerprint(&image));
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_log_ends_in_garbage_cuts_it_and_rejoins() {
    bounded(async {
        let mut cluster = Cluster::start(test_config()).await;
        for i in 0..5 {
            cluster.propose(topic(i)).await;
        }
        cluster.same_images(5).await;
        let leader = cluster.leader().await;
        let victim = cluster.nodes.keys().copied().find(|id| *id != leader).unwrap();
        cluster.stop(victim).await;
        let log = cluster.dir(victim).join(RAFT_DIR).join("log");
        let clean = std::fs::read(&log).unwrap();
        let mut torn = clean.clone();
        // A torn append: a frame header claiming more than was written, then noise.
        torn.extend_from_slice(&[0, 0, 1, 0, 0xca, 0xfe, 0xba, 0xbe, b'{', b'"']);
        std::fs::write(&log, &torn).unwrap();
        cluster.restart(victim).await;
        cluster.propose(topic(5)).await;
        cluster.same_images(6).await;
        let indexes = log_file_indexes(&cluster.dir(victim));
        assert!(indexes.windows(2).all(|w| w[1] == w[0] + 1), "contiguous: {indexes:?}");
        cluster.shutdown().await;
    })
    .await;
}

/// Sends `bytes` to `address` and returns once the server has closed the connection.
async fn send_garbage(address: &str, bytes: &[u8]) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The server may close before everything is written: that is an answer too.
    let _ = stream.write_all(bytes).await;
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the server kept a connection that sent {:?}",
        &bytes[..bytes.len().min(16)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_raft_port_closes_that_connection_only() {
    bounded(async {
        let cluster = Cluster::start(test_config()).await;
        cluster.propose(topic(0)).await;
        let seed = fastrand::u64(..);
        eprintln!("seed {seed}");
        let mut noise = fastrand::Rng::with_seed(seed);
        for address in cluster.addresses.values() {
            // A length far past the bound: refused before any allocation.
            send_garbage(address, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).await;
            // A plausible length, a body that is not JSON.
            let mut frame = 12u32.to_be_bytes().to_vec();
            frame.extend_from_slice(b"not json at all");
            send_garbage(address, &frame).await;
            // JSON of the wrong shape.
            let body = br#"{"to": 1, "rpc": {"Nonsense": [1, 2, 3]}}"#;
            let mut frame = (body.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(body);
            send_garbage(address, &frame).await;
            // Random bytes, whose first four make a length up to 64 KiB.
            let mut bytes: Vec<u8> = (0..4096).map(|_| noise.u8(..)).collect();
            bytes[0] = 0;
            bytes[1] = 0;
            send_garbage(address, &bytes).await;
        }
        // Every node still serves: a proposal commits everywhere.
        cluster.propose(topic(1)).await;
        cluster.same_images(2).await;
        cluster.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn start_refuses_a_node_that_is_not_a_voter() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let voters = BTreeMap::from([(1, "127.0.0.1:1".to_string())]);
    let refused = MetadataQuorum::start(2, dir.path(), voters, Some(listener), test_config()).await;
    assert!(matches!(refused, Err(QuorumError::Config(_))));
}

/// Builds the two stores on a fresh directory for openraft's storage suite.
struct StoresOnDisk;

impl openraft::testing::StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for StoresOnDisk {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().unwrap();
        let log = LogStore::open(dir.path()).unwrap();
        let state_machine = StateMachine::open(dir.path(), MetadataImage::default()).unwrap();
        Ok((dir, log, state_machine))
    }
}

/// Openraft's own conformance suite for `RaftLogStorage` and `RaftStateMachine` (log reads,
/// truncation, purge, vote, applied state, membership, snapshots).
#[test]
fn the_stores_pass_openraft_storage_suite() {
    openraft::testing::Suite::test_all(StoresOnDisk).unwrap();
}
