//! The metadata quorum: a raft group of controllers (openraft 0.9) that agrees on every
//! `MetadataRecord`, so each controller's `MetadataImage` is the same sequence of records
//! applied in the same order. It replaces the single-node metadata log when Sluice runs as a
//! cluster (issue 11); not wired into the broker yet.
//!
//! - `log_store`: the raft log, vote and purge point on disk under
//!   `<data_dir>/__cluster_metadata-raft/` (CRC32C frames, fsynced before an append counts).
//! - `state_machine`: the image, applied from committed entries and published on a `watch`,
//!   and its snapshots (the image as the records that rebuild it), which let openraft purge
//!   the log and catch up a follower that is behind the purged log.
//! - `network`: openraft's RPCs over TCP in length-prefixed serde_json frames, bounded.
//! - `disk`: the file primitives both stores share.
//!
//! `MetadataQuorum` is what the broker uses: `start` a node on its controller listener,
//! `initialize` the cluster once (the lowest voter id does it, on an empty log), `propose`
//! records (the leader only; followers answer with the leader), follow `images()`.
//!
//! A proposal is answered once the leader has applied it, so its image is published there
//! first; the followers publish it when they learn the commit (within a heartbeat). A
//! proposal that times out (no quorum) may still commit later: its outcome is unknown, as in
//! Kafka's controller when a write times out.

mod disk;
mod log_store;
mod network;
mod state_machine;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, Raft, RaftMetrics, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::{MetadataImage, MetadataRecord};
use log_store::LogStore;
use network::{NetworkFactory, NetworkLimits, RaftServer};
use state_machine::StateMachine;

openraft::declare_raft_types!(
    /// The quorum's types: nodes are u64 ids with their controller address, entries carry one
    /// metadata record, and applying one answers the image offset it produced.
    pub TypeConfig:
        D = MetadataRecord,
        R = i64,
        NodeId = u64,
        Node = BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

type LogId = openraft::LogId<u64>;
type Vote = openraft::Vote<u64>;
type Entry = openraft::Entry<TypeConfig>;
type StorageError = openraft::StorageError<u64>;
type StoredMembership = openraft::StoredMembership<u64, BasicNode>;
type SnapshotMeta = openraft::SnapshotMeta<u64, BasicNode>;

/// The directory of the quorum's files under the data directory.
pub const RAFT_DIR: &str = "__cluster_metadata-raft";
/// One metadata record, serialized; the single-node log has the same bound.
const RECORD_BYTES_MAX: usize = 1 << 20;
/// The snapshot is sent in chunks of this size (JSON of bytes: up to 4 bytes each on the wire).
const SNAPSHOT_CHUNK_BYTES: u64 = 1 << 20;

/// Settings of the quorum (Kafka's `controller.quorum.*` where one exists).
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// The cluster id every image carries.
    pub cluster_id: String,
    /// A follower that hears no leader for a random time in this range starts an election
    /// (Kafka's `controller.quorum.election.timeout.ms` is the lower bound).
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// The leader's heartbeat; also the bound openraft puts on one AppendEntries exchange.
    pub heartbeat_interval_ms: u64,
    /// A snapshot is built after this many entries since the last one.
    pub snapshot_logs_since_last: u64,
    /// Entries kept below the latest snapshot, so a briefly lagging follower catches up from
    /// the log rather than with a whole snapshot.
    pub logs_kept_after_snapshot: u64,
    /// How long `propose` waits for its record to commit (Kafka's `request.timeout.ms`
    /// plays this part for a forwarded admin request).
    pub propose_timeout_ms: u64,
    /// Bound on each read, write and connect of the quorum's connections.
    pub io_timeout_ms: u64,
    /// A server connection idle this long is closed.
    pub idle_timeout_ms: u64,
    /// The largest frame between controllers.
    pub frame_bytes_max: usize,
}

impl Default for QuorumConfig {
    fn default() -> Self {
        QuorumConfig {
            cluster_id: String::new(),
            election_timeout_min_ms: 1000,
            election_timeout_max_ms: 2000,
            heartbeat_interval_ms: 200,
            snapshot_logs_since_last: 10_000,
            logs_kept_after_snapshot: 1000,
            propose_timeout_ms: 30_000,
            io_timeout_ms: 5_000,
            idle_timeout_ms: 60_000,
            frame_bytes_max: 16 << 20,
        }
    }
}

/// Why a quorum operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("node {node} is not the metadata leader; {}", leader_text(*.leader, .leader_address.as_deref()))]
    NotLeader {
        node: u64,
        leader: Option<u64>,
        leader_address: Option<String>,
    },
    #[error(
        "the metadata change was not committed within {waited_ms} ms (is a majority of the voters reachable? leader: {leader:?}); it may still commit"
    )]
    NotCommitted { waited_ms: u64, leader: Option<u64> },
    #[error("a metadata record of {size} bytes exceeds {max}")]
    RecordTooLarge { size: usize, max: usize },
    #[error("invalid metadata quorum configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Storage(#[from] crate::error::Error),
    /// The raft node stopped (a storage failure, or shut down).
    #[error("the metadata quorum stopped: {0}")]
    Stopped(String),
}

fn leader_text(leader: Option<u64>, address: Option<&str>) -> String {
    match (leader, address) {
        (Some(id), Some(address)) => format!("the leader is node {id} at {address}"),
        (Some(id), None) => format!("the leader is node {id}"),
        (None, _) => "no leader is known yet".to_string(),
    }
}

impl QuorumError {
    /// The Kafka error code a request that needed this change gets. No `_` arm: a new
    /// variant does not compile until someone picks its code.
    pub fn code(&self) -> i16 {
        match self {
            // Kafka's answer from a controller that is not active (the client retries).
            QuorumError::NotLeader { .. } => ResponseError::NotController.code(),
            QuorumError::NotCommitted { .. } => ResponseError::RequestTimedOut.code(),
            QuorumError::RecordTooLarge { .. } => ResponseError::InvalidRequest.code(),
            QuorumError::Config(_) | QuorumError::Stopped(_) => ResponseError::UnknownServerError.code(),
            QuorumError::Storage(e) => e.code(),
        }
    }
}

/// One controller of the metadata quorum.
pub struct MetadataQuorum {
    node_id: u64,
    voters: BTreeMap<u64, BasicNode>,
    raft: Raft<TypeConfig>,
    images: Arc<watch::Sender<Arc<MetadataImage>>>,
    server: RaftServer,
    propose_timeout_ms: u64,
}

impl MetadataQuorum {
    /// Opens node `node_id`'s raft files under `data_dir`, starts its raft and serves the
    /// other controllers on `listener`. `voters` (id → `host:port` of each controller
    /// listener, this node included) is the membership `initialize` records; after that the
    /// membership comes from the log.
    pub async fn start(
        node_id: u64,
        data_dir: &Path,
        voters: BTreeMap<u64, String>,
        listener: TcpListener,
        config: QuorumConfig,
    ) -> Result<MetadataQuorum, QuorumError> {
        if !voters.contains_key(&node_id) {
            return Err(QuorumError::Config(format!(
                "node {node_id} is not among the voters {:?}",
                voters.keys().collect::<Vec<_>>()
            )));
        }
        let image_node_id = i32::try_from(node_id)
            .map_err(|_| QuorumError::Config(format!("node id {node_id} does not fit Kafka's 32-bit node ids")))?;
        let raft_config = openraft::Config {
            cluster_name: "sluice-metadata".to_string(),
            election_timeout_min: config.election_timeout_min_ms,
            election_timeout_max: config.election_timeout_max_ms,
            heartbeat_interval: config.heartbeat_interval_ms,
            // The last chunk makes the follower parse and persist the whole snapshot.
            install_snapshot_timeout: config.io_timeout_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_logs_since_last),
            max_in_snapshot_log_to_keep: config.logs_kept_after_snapshot,
            snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
            ..Default::default()
        }
        .validate()
        .map_err(|e| QuorumError::Config(e.to_string()))?;
        let limits = NetworkLimits {
            frame_bytes_max: config.frame_bytes_max,
            io_timeout: Duration::from_millis(config.io_timeout_ms),
            idle_timeout: Duration::from_millis(config.idle_timeout_ms),
        };
        // Room for a snapshot chunk as JSON (up to 4 bytes per byte) and for one record.
        let frame_bytes_min = 4 * SNAPSHOT_CHUNK_BYTES as usize + (64 << 10);
        if config.frame_bytes_max < frame_bytes_min.max(2 * RECORD_BYTES_MAX) {
            return Err(QuorumError::Config(format!(
                "frame_bytes_max {} is below {}",
                config.frame_bytes_max,
                frame_bytes_min.max(2 * RECORD_BYTES_MAX)
            )));
        }

        let dir = data_dir.join(RAFT_DIR);
        let base = MetadataImage {
            cluster_id: config.cluster_id.clone(),
            node_id: image_node_id,
            ..Default::default()
        };
        let (log_store, state_machine) = tokio::task::spawn_blocking(move || {
            let log_store = LogStore::open(&dir)?;
            let state_machine = StateMachine::open(&dir, base)?;
            Ok::<_, crate::error::Error>((log_store, state_machine))
        })
        .await
        .map_err(|e| QuorumError::Stopped(format!("opening the raft files: {e}")))??;
        let images = state_machine.images();
        let raft = Raft::new(
            node_id,
            Arc::new(raft_config),
            NetworkFactory { limits },
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| QuorumError::Stopped(e.to_string()))?;
        let server = RaftServer::start(listener, node_id, raft.clone(), limits);
        Ok(MetadataQuorum {
            node_id,
            voters: voters.into_iter().map(|(id, addr)| (id, BasicNode { addr })).collect(),
            raft,
            images,
            server,
            propose_timeout_ms: config.propose_timeout_ms,
        })
    }

    /// Forms the cluster with the configured voters, if this node is the lowest voter id and
    /// has never been part of it (an empty log and no vote). Every other call does nothing, so
    /// each node may call it at every start. The lowest id alone decides, so two nodes never
    /// form two clusters; it must be up for the first formation.
    pub async fn initialize(&self) -> Result<(), QuorumError> {
        if self.voters.keys().next() != Some(&self.node_id) {
            return Ok(());
        }
        match self.raft.initialize(self.voters.clone()).await {
            Ok(()) => Ok(()),
            // Already initialized, or already voted/holding logs: a member already.
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotInMembers(e))) => Err(QuorumError::Config(e.to_string())),
            Err(RaftError::Fatal(e)) => Err(QuorumError::Stopped(e.to_string())),
        }
    }

    /// Commits `record` through the quorum and returns the image offset it produced, once
    /// this node (the leader) has applied it. On a follower: `NotLeader`, naming the leader.
    pub async fn propose(&self, record: MetadataRecord) -> Result<i64, QuorumError> {
        let size = serde_json::to_vec(&record).map(|json| json.len()).unwrap_or(usize::MAX);
        if size > RECORD_BYTES_MAX {
            return Err(QuorumError::RecordTooLarge {
                size,
                max: RECORD_BYTES_MAX,
            });
        }
        let wait = Duration::from_millis(self.propose_timeout_ms);
        match tokio::time::timeout(wait, self.raft.client_write(record)).await {
            Ok(Ok(response)) => Ok(response.data),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => Err(QuorumError::NotLeader {
                node: self.node_id,
                leader: forward.leader_id,
                leader_address: forward.leader_node.map(|node| node.addr),
            }),
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                Err(QuorumError::Stopped(e.to_string()))
            }
            Ok(Err(RaftError::Fatal(e))) => Err(QuorumError::Stopped(e.to_string())),
            Err(_) => Err(QuorumError::NotCommitted {
                waited_ms: self.propose_timeout_ms,
                leader: self.leader(),
            }),
        }
    }

    /// Every image applied from now on (the current one is marked unseen: the subscriber sees
    /// it first), as `Controller::subscribe`.
    pub fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        let mut images = self.images.subscribe();
        images.mark_changed();
        images
    }

    /// The current image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.images.borrow().clone()
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The voters of the current membership.
    pub fn voters(&self) -> BTreeSet<u64> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    /// Openraft's metrics (term, leader, last log and applied ids, and on the leader each
    /// voter's replicated log id: DescribeQuorum's lag), updated as they change.
    pub fn metrics(&self) -> watch::Receiver<RaftMetrics<u64, BasicNode>> {
        self.raft.metrics()
    }

    /// Stops serving the other controllers, then stops the raft node. Everything it
    /// acknowledged is on disk already.
    pub async fn shutdown(self) -> Result<(), QuorumError> {
        self.server.shutdown().await;
        self.raft
            .shutdown()
            .await
            .map_err(|e| QuorumError::Stopped(format!("shutting down: {e}")))
    }
}
