//! The metadata quorum: a raft group of controllers (openraft 0.9) that agrees on every
//! `MetadataRecord`, so each controller's `MetadataImage` is the same sequence of records
//! applied in the same order. It replaces the single-node metadata log when Sluice runs as a
//! cluster (issue 11). Broker-only nodes are learners: they hold the log and apply it, never
//! vote, and reach the leader over a connection they dial (`network`).
//!
//! - `log_store`: the raft log, vote and purge point on disk under
//!   `<data_dir>/__cluster_metadata-raft/` (CRC32C frames, fsynced before an append counts).
//! - `state_machine`: the image, applied from committed entries and published on a `watch`,
//!   and its snapshots (the image as the records that rebuild it), which let openraft purge
//!   the log and catch up a follower that is behind the purged log.
//! - `network`: openraft's RPCs over TCP in length-prefixed serde_json frames, bounded.
//! - `disk`: the file primitives both stores share.
//!
//! `MetadataQuorum` is what the broker uses: `start` a node on its controller listener (a
//! learner without one),
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

pub use network::ControllerSecurity;
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
use network::{LEARNER_ADDRESS, Links, NetworkFactory, NetworkLimits, RaftServer};
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
/// A cluster id as Kafka makes them: 16 random bytes in URL-safe base64 without padding.
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits = uuid::Uuid::new_v4().as_u128();
    (0..22)
        .map(|i| ALPHABET[((bits >> (i * 6)) & 63) as usize] as char)
        .collect()
}

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
    /// A dynamic quorum (KIP-853, `controller.quorum.bootstrap.servers`): the controller
    /// addresses a node asks to join through. Empty: the voters are static (those `start`
    /// is given).
    pub bootstrap_servers: Vec<String>,
    /// In a dynamic quorum, where the other controllers dial this one (its controller
    /// listener); None for a broker-only node.
    pub controller_address: Option<String>,
    /// TLS and SASL of the controller listener, both ends (plaintext by default).
    pub security: Arc<network::ControllerSecurity>,
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
            bootstrap_servers: Vec::new(),
            controller_address: None,
            security: Arc::default(),
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

/// The voters a dynamic quorum's log starts with (KIP-853), as `sluice format` records them
/// under the raft directory: `{"voters": {"1": "host:port", ...}}`.
pub const BOOTSTRAP_VOTERS_FILE: &str = "bootstrap-voters.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct BootstrapVoters {
    voters: BTreeMap<u64, String>,
}

/// `sluice format` for a dynamic quorum (Kafka's `kafka-storage format --standalone`,
/// `--initial-controllers`, `--no-initial-controllers`): records the voters the quorum forms
/// with on first start (empty: this node joins a quorum that exists). Refused for a data
/// directory whose metadata log holds anything: its voters are in the log already.
pub fn format_voters(data_dir: &Path, voters: &BTreeMap<u64, String>) -> Result<(), QuorumError> {
    let dir = data_dir.join(RAFT_DIR);
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |e| QuorumError::Storage(crate::error::Error::storage(op, path, e))
    };
    std::fs::create_dir_all(&dir).map_err(io("create directory", &dir))?;
    let held: Vec<String> = std::fs::read_dir(&dir)
        .map_err(io("list", &dir))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != BOOTSTRAP_VOTERS_FILE)
        .collect();
    if !held.is_empty() {
        return Err(QuorumError::Config(format!(
            "{} already holds a metadata log ({}); its voters are in it",
            dir.display(),
            held.join(", ")
        )));
    }
    let body = serde_json::to_vec(&BootstrapVoters { voters: voters.clone() })
        .map_err(|e| QuorumError::Config(e.to_string()))?;
    disk::replace_file(&dir.join(BOOTSTRAP_VOTERS_FILE), &body, true)?;
    Ok(())
}

/// The voters `format_voters` recorded under `data_dir` (empty when it recorded none or was
/// not run: the node joins a quorum that exists).
pub fn formatted_voters(data_dir: &Path) -> Result<BTreeMap<u64, String>, QuorumError> {
    let path = data_dir.join(RAFT_DIR).join(BOOTSTRAP_VOTERS_FILE);
    match disk::read_if_exists(&path)? {
        None => Ok(BTreeMap::new()),
        Some(bytes) => serde_json::from_slice::<BootstrapVoters>(&bytes)
            .map(|b| b.voters)
            .map_err(|e| QuorumError::Storage(disk::corrupt(&path, e.to_string()))),
    }
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
    /// A dynamic quorum (KIP-853).
    dynamic: bool,
    voters: BTreeMap<u64, BasicNode>,
    raft: Raft<TypeConfig>,
    images: Arc<watch::Sender<Arc<MetadataImage>>>,
    server: RaftServer,
    propose_timeout_ms: u64,
    core: Arc<Core>,
    limits: NetworkLimits,
    /// When the last read barrier that succeeded began (`catch_up_with_leader`); held by the
    /// one barrier in progress, so concurrent ones share it.
    barrier: tokio::sync::Mutex<Option<tokio::time::Instant>>,
    /// The raft files' wait for space on a full disk, ended at shutdown.
    full_disk: disk::FullDiskWait,
}

/// Why the quorum's leader refused a proposal or a heartbeat (sent back over the wire to a
/// broker that forwarded it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) enum Refusal {
    /// This node is not the leader (any more): ask the leader.
    NotLeader,
    /// The record was computed against an older image: compute it again.
    Stale(String),
    /// Refused for good, with the Kafka error code the client gets.
    Final { code: i16, message: String },
}

impl Refusal {
    fn from_error(e: crate::error::Error) -> Refusal {
        match e {
            crate::error::Error::Stale(message) => Refusal::Stale(message),
            e => Refusal::Final {
                code: e.code(),
                message: e.to_string(),
            },
        }
    }

    fn from_quorum(e: QuorumError) -> Refusal {
        match e {
            QuorumError::NotLeader { .. } => Refusal::NotLeader,
            e => Refusal::Final {
                code: e.code(),
                message: e.to_string(),
            },
        }
    }
}

/// What a broker's heartbeat is answered.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct HeartbeatReply {
    /// False: the leader does not know the broker (it must register again).
    registered: bool,
}

/// The part of a quorum node that the RPC server shares: proposals checked on the leader and
/// the brokers' heartbeats.
pub(super) struct Core {
    node_id: u64,
    raft: Raft<TypeConfig>,
    images: Arc<watch::Sender<Arc<MetadataImage>>>,
    /// Serializes checked proposals on the leader, so a check cannot race another commit.
    propose_lock: tokio::sync::Mutex<()>,
    propose_timeout_ms: u64,
    /// On the leader: when each broker was last heard from.
    heartbeats: std::sync::Mutex<std::collections::HashMap<i32, std::time::Instant>>,
    /// On the leader: the image offset a fenced broker must reach before it is unfenced.
    fenced_at: std::sync::Mutex<std::collections::HashMap<i32, i64>>,
    /// On the leader: the connections learners dialed, for their replication.
    links: Links,
    /// On a learner: the leader its link is to (known before its raft learns of a leader).
    linked_leader: std::sync::Mutex<Option<u64>>,
    /// `unclean.leader.election.enable` of this node's configuration, for topics without an
    /// override (set by `leader_duties`).
    unclean_default: std::sync::atomic::AtomicBool,
    /// `min.insync.replicas` of this node's configuration likewise: the ELR follows it.
    min_isr_default: std::sync::atomic::AtomicI32,
    /// When the leader last ran the preferred-leader elections (`auto.leader.rebalance.enable`).
    last_rebalance: std::sync::Mutex<Option<std::time::Instant>>,
}

/// Node `node` of the membership `raft` knows (voter or learner), with its address.
pub(super) fn membership_node(raft: &Raft<TypeConfig>, node: u64) -> Option<BasicNode> {
    raft.metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&node)
        .cloned()
}

impl Core {
    /// On the leader: learner `node` dialed in and offers `stream` for its replication. A node
    /// not yet in the membership is added as a learner (openraft's `add_learner`, a membership
    /// change committed by the voters alone); a restarted learner is a member already.
    pub(super) fn accept_learner(&self, node: u64, stream: crate::cluster::peer::PeerStream) {
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node, stream);
        if membership_node(&self.raft, node).is_some() {
            return;
        }
        let raft = self.raft.clone();
        tokio::spawn(async move {
            let learner = BasicNode {
                addr: LEARNER_ADDRESS.to_string(),
            };
            match raft.add_learner(node, learner, false).await {
                Ok(_) => tracing::info!(learner = node, "metadata quorum: added a broker-only node as a learner"),
                // Another membership change in progress, or leadership lost: the learner
                // dials again when its link stays silent, and is added then.
                Err(e) => tracing::warn!(learner = node, error = %e, "metadata quorum: adding a learner failed"),
            }
        });
    }

    /// On the leader: controller `node` of a dynamic quorum (KIP-853) asks to follow the log
    /// at its controller listener `address`; a node not in the membership is added as a
    /// learner there (AddRaftVoter can then make it a voter). A member already is left alone.
    pub(super) fn accept_controller_learner(&self, node: u64, address: String) {
        match membership_node(&self.raft, node) {
            Some(known) if known.addr == address => return,
            Some(known) => {
                tracing::warn!(node, recorded = %known.addr, asked = %address, "metadata quorum: a member asked to join at another address; keeping the recorded one");
                return;
            }
            None => {}
        }
        let raft = self.raft.clone();
        tokio::spawn(async move {
            match raft.add_learner(node, BasicNode { addr: address.clone() }, false).await {
                Ok(_) => tracing::info!(learner = node, %address, "metadata quorum: added a controller as an observer"),
                Err(e) => {
                    tracing::warn!(learner = node, error = %e, "metadata quorum: adding a controller as an observer failed")
                }
            }
        });
    }

    /// On the leader: AddRaftVoter (`add`) or RemoveRaftVoter of `node` (KIP-853), committed
    /// as openraft membership changes (a joint configuration, then the new one). A node to add
    /// must follow the log as a learner at a controller address, and have caught up with what
    /// the leader has committed (within the propose timeout); a removed voter stays a learner,
    /// as a removed Kafka voter that keeps running goes on fetching as an observer.
    pub(super) async fn change_voters(&self, node: u64, add: bool) -> Result<(), Refusal> {
        let refuse = |code: ResponseError, message: String| Refusal::Final {
            code: code.code(),
            message,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.propose_timeout_ms);
        let _turn = self.propose_lock.lock().await;
        loop {
            let metrics = self.raft.metrics().borrow().clone();
            if metrics.current_leader != Some(self.node_id) {
                return Err(Refusal::NotLeader);
            }
            let membership = metrics.membership_config.membership();
            let voters: BTreeSet<u64> = membership.voter_ids().collect();
            if add {
                if voters.contains(&node) {
                    return Err(refuse(
                        ResponseError::DuplicateVoter,
                        format!("node {node} is a voter already"),
                    ));
                }
                match membership.get_node(&node) {
                    None => {
                        return Err(refuse(
                            ResponseError::RequestTimedOut,
                            format!(
                                "node {node} does not follow the metadata log: start it as a controller with \
                                 controller.quorum.bootstrap.servers, then ask again"
                            ),
                        ));
                    }
                    Some(learner) if learner.addr == LEARNER_ADDRESS => {
                        return Err(refuse(
                            ResponseError::InvalidRequest,
                            format!("node {node} is a broker-only node: it has no controller listener"),
                        ));
                    }
                    Some(_) => {}
                }
                let committed = self
                    .raft
                    .with_raft_state(|state| state.committed.as_ref().map(|id| id.index))
                    .await
                    .ok()
                    .flatten();
                let matched = metrics
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&node).copied().flatten())
                    .map(|id| id.index);
                if matched < committed {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(refuse(
                            ResponseError::RequestTimedOut,
                            format!(
                                "node {node} has not caught up with the metadata log (at {matched:?} of {committed:?})"
                            ),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            } else {
                if !voters.contains(&node) {
                    return Err(refuse(
                        ResponseError::VoterNotFound,
                        format!("node {node} is not a voter"),
                    ));
                }
                if voters.len() == 1 {
                    return Err(refuse(
                        ResponseError::InvalidRequest,
                        format!("node {node} is the only voter; the quorum cannot lose its last one"),
                    ));
                }
            }
            let change = match add {
                true => openraft::ChangeMembers::AddVoterIds(BTreeSet::from([node])),
                false => openraft::ChangeMembers::RemoveVoters(BTreeSet::from([node])),
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            return match tokio::time::timeout(left, self.raft.change_membership(change, true)).await {
                Ok(Ok(_)) => {
                    tracing::info!(node, add, "metadata quorum: voters changed");
                    Ok(())
                }
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => Err(Refusal::NotLeader),
                Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
                    Err(refuse(ResponseError::RequestTimedOut, e.to_string()))
                }
                Ok(Err(RaftError::Fatal(e))) => Err(Refusal::from_quorum(QuorumError::Stopped(e.to_string()))),
                Err(_) => Err(refuse(
                    ResponseError::RequestTimedOut,
                    format!(
                        "the change of voters was not committed within {} ms; it may still commit",
                        self.propose_timeout_ms
                    ),
                )),
            };
        }
    }

    /// On the leader: its metrics and committed index (DescribeQuorum); None elsewhere.
    pub(super) async fn leader_metrics(&self) -> Option<(RaftMetrics<u64, BasicNode>, Option<u64>)> {
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.node_id) {
            return None;
        }
        let committed = self
            .raft
            .with_raft_state(|state| state.committed.as_ref().map(|id| id.index))
            .await
            .ok()
            .flatten();
        Some((metrics, committed))
    }

    pub(super) fn set_linked_leader(&self, leader: Option<u64>) {
        *self.linked_leader.lock().unwrap_or_else(|p| p.into_inner()) = leader;
    }

    async fn propose(&self, record: MetadataRecord) -> Result<i64, QuorumError> {
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
                leader: self.raft.metrics().borrow().current_leader,
            }),
        }
    }

    /// On the leader: checks `record` against the leader's image (every committed record
    /// applied first) and proposes it; checks and commits are serialized.
    pub(super) async fn propose_checked(&self, record: MetadataRecord) -> Result<i64, Refusal> {
        // propose_derived checks it.
        self.propose_derived(move |_| Ok(Some(record)))
            .await
            // Always Some: the record is given, not derived.
            .map(|offset| offset.unwrap_or_default())
    }

    /// On the leader: computes a record from the leader's image (every committed record
    /// applied first), if `derive` finds one owed, checks it and proposes it, serialized with
    /// every other check and commit: no change commits between the image `derive` reads and
    /// its record (a record that replaces a whole config layer loses no concurrent change).
    /// None when nothing was owed.
    pub(super) async fn propose_derived(
        &self,
        derive: impl FnOnce(&MetadataImage) -> crate::error::Result<Option<MetadataRecord>>,
    ) -> Result<Option<i64>, Refusal> {
        let wait = Duration::from_millis(self.propose_timeout_ms);
        let _turn = self.propose_lock.lock().await;
        match tokio::time::timeout(wait, self.raft.ensure_linearizable()).await {
            Ok(Ok(_)) => {}
            Ok(Err(RaftError::APIError(_))) => return Err(Refusal::NotLeader),
            Ok(Err(RaftError::Fatal(e))) => return Err(Refusal::from_quorum(QuorumError::Stopped(e.to_string()))),
            Err(_) => {
                return Err(Refusal::from_quorum(QuorumError::NotCommitted {
                    waited_ms: self.propose_timeout_ms,
                    leader: self.raft.metrics().borrow().current_leader,
                }));
            }
        }
        let image = self.images.borrow().clone();
        let Some(record) = derive(&image).map_err(Refusal::from_error)? else {
            return Ok(None);
        };
        image.check(&record).map_err(Refusal::from_error)?;
        self.propose(record).await.map(Some).map_err(Refusal::from_quorum)
    }

    /// On the leader: commits the elections the image owes (`MetadataImage::elections`), if
    /// any: after a broker is fenced or unfenced, and at every tick of the leader's duties
    /// (a new leader finishes what its predecessor had not).
    pub(super) async fn elect(&self) {
        let unclean = self.unclean_default.load(std::sync::atomic::Ordering::Relaxed);
        let min_isr = self.min_isr_default.load(std::sync::atomic::Ordering::Relaxed);
        let changes = self.images.borrow().elections(unclean, min_isr);
        if changes.is_empty() {
            return;
        }
        let count = changes.len();
        match self.propose_checked(MetadataRecord::ChangePartitions { changes }).await {
            Ok(_) => tracing::info!(partitions = count, "metadata quorum: leaders elected"),
            // A stale plan is computed again at the next tick.
            Err(e) => tracing::debug!(?e, "metadata quorum: electing leaders"),
        }
    }

    /// On the leader: broker `broker` is alive and has applied `applied` metadata records. A
    /// fenced broker is unfenced once it has caught up with the metadata as it stood when the
    /// leader first saw it fenced (Kafka unfences a broker whose metadata offset reached the
    /// controller's at its registration), so it never serves from an image that predates
    /// changes made while it was away.
    ///
    /// `shutting_down`: the broker stops (Kafka's `WantShutDown`); it is fenced at once, and
    /// when it comes back it is unfenced by the same catch-up rule.
    ///
    /// `log_dir_offline`: the broker's log directory failed (Kafka's `OfflineLogDirs`,
    /// KIP-858); a change is recorded (`SetBrokerLogDirOffline`) and the elections it calls
    /// for made at once, so its leaderships move and it leaves the ISRs it does not lead.
    pub(super) async fn heartbeat(
        &self,
        broker: i32,
        applied: i64,
        shutting_down: bool,
        log_dir_offline: bool,
    ) -> Result<HeartbeatReply, Refusal> {
        if self.raft.metrics().borrow().current_leader != Some(self.node_id) {
            return Err(Refusal::NotLeader);
        }
        let Some(info) = self.images.borrow().brokers.get(&broker).cloned() else {
            return Ok(HeartbeatReply { registered: false });
        };
        if shutting_down {
            self.heartbeats
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&broker);
            if !info.fenced {
                tracing::info!(
                    broker,
                    "metadata quorum: fencing a broker that shuts down (controlled shutdown)"
                );
                let offset = self
                    .propose_checked(MetadataRecord::SetBrokerFenced {
                        id: broker,
                        fenced: true,
                    })
                    .await?;
                self.fenced_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(broker, offset);
                // Its leaderships move now, before the broker stops (controlled shutdown).
                self.elect().await;
            }
            return Ok(HeartbeatReply { registered: true });
        }
        self.heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(broker, std::time::Instant::now());
        if info.log_dir_offline != log_dir_offline {
            match log_dir_offline {
                true => tracing::warn!(
                    broker,
                    "metadata quorum: a broker's log directory is offline; its replicas leave the ISRs and their leaderships move"
                ),
                false => tracing::info!(broker, "metadata quorum: a broker's log directory is online again"),
            }
            self.propose_checked(MetadataRecord::SetBrokerLogDirOffline {
                id: broker,
                offline: log_dir_offline,
            })
            .await?;
            self.elect().await;
        }
        if info.fenced {
            let needed = *self
                .fenced_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(broker)
                .or_insert_with(|| self.images.borrow().offset);
            if applied < needed {
                tracing::debug!(
                    broker,
                    applied,
                    needed,
                    "metadata quorum: a fenced broker is still catching up"
                );
                return Ok(HeartbeatReply { registered: true });
            }
            self.fenced_at.lock().unwrap_or_else(|p| p.into_inner()).remove(&broker);
            tracing::info!(
                broker,
                "metadata quorum: unfencing a broker that heartbeats again, caught up"
            );
            self.propose_checked(MetadataRecord::SetBrokerFenced {
                id: broker,
                fenced: false,
            })
            .await?;
            // Partitions left without a leader may get this one back.
            self.elect().await;
        }
        Ok(HeartbeatReply { registered: true })
    }
}

impl MetadataQuorum {
    /// Opens node `node_id`'s raft files under `data_dir`, starts its raft and serves the
    /// other controllers on `listener`. `voters` (id → `host:port` of each controller
    /// listener, this node included) is the membership `initialize` records; after that the
    /// membership comes from the log.
    ///
    /// `listener` None: a broker-only node, a learner that is not among the voters and dials
    /// the leader instead of being dialed (see `network`).
    ///
    /// A dynamic quorum (`config.bootstrap_servers`, KIP-853): `voters` are those the node was
    /// formatted with (`sluice format`; empty for a node that joins later), the membership
    /// afterwards lives in the log only, and a controller missing from it asks the leader,
    /// found through the bootstrap servers, to take it as a learner.
    pub async fn start(
        node_id: u64,
        data_dir: &Path,
        voters: BTreeMap<u64, String>,
        listener: Option<TcpListener>,
        config: QuorumConfig,
    ) -> Result<MetadataQuorum, QuorumError> {
        let dynamic = !config.bootstrap_servers.is_empty();
        if !dynamic && listener.is_some() != voters.contains_key(&node_id) {
            return Err(QuorumError::Config(format!(
                "node {node_id} is {} the voters {:?}, and has {} controller listener",
                if voters.contains_key(&node_id) {
                    "among"
                } else {
                    "not among"
                },
                voters.keys().collect::<Vec<_>>(),
                if listener.is_some() { "a" } else { "no" },
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
            security: config.security.clone(),
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
            let mut state_machine = StateMachine::open(&dir, base)?;
            state_machine.wait_out_full_disk(log_store.full_disk_wait());
            Ok::<_, crate::error::Error>((log_store, state_machine))
        })
        .await
        .map_err(|e| QuorumError::Stopped(format!("opening the raft files: {e}")))??;
        let full_disk = log_store.full_disk_wait();
        let images = state_machine.images();
        let links: Links = Arc::default();
        let raft = Raft::new(
            node_id,
            Arc::new(raft_config),
            NetworkFactory {
                limits: limits.clone(),
                links: links.clone(),
            },
            log_store,
            state_machine,
        )
        .await
        .map_err(|e| QuorumError::Stopped(e.to_string()))?;
        let core = Arc::new(Core {
            node_id,
            raft: raft.clone(),
            images: images.clone(),
            propose_lock: tokio::sync::Mutex::new(()),
            propose_timeout_ms: config.propose_timeout_ms,
            heartbeats: std::sync::Mutex::new(std::collections::HashMap::new()),
            fenced_at: std::sync::Mutex::new(std::collections::HashMap::new()),
            unclean_default: std::sync::atomic::AtomicBool::new(false),
            min_isr_default: std::sync::atomic::AtomicI32::new(1),
            last_rebalance: std::sync::Mutex::new(None),
            links,
            linked_leader: std::sync::Mutex::new(None),
        });
        // Where a learner finds the leader: the static voters, or the bootstrap servers.
        let targets: Vec<(u64, String)> = match dynamic {
            false => voters.iter().map(|(id, addr)| (*id, addr.clone())).collect(),
            true => config
                .bootstrap_servers
                .iter()
                .map(|addr| (network::ANY_NODE, addr.clone()))
                .collect(),
        };
        let server = match listener {
            Some(listener) => {
                let server = RaftServer::start(listener, node_id, raft.clone(), core.clone(), limits.clone());
                if dynamic {
                    let own = config.controller_address.clone().ok_or_else(|| {
                        QuorumError::Config("a controller of a dynamic quorum needs its controller address".into())
                    })?;
                    server.join_as_controller(targets, node_id, own, raft.clone(), limits.clone());
                }
                server
            }
            None => {
                // The leader heartbeats its learners every heartbeat interval: a link silent
                // for a few election timeouts leads nowhere any more.
                let idle = Duration::from_millis(3 * config.election_timeout_max_ms);
                RaftServer::start_learner(targets, node_id, raft.clone(), core.clone(), limits.clone(), idle)
            }
        };
        Ok(MetadataQuorum {
            node_id,
            dynamic,
            voters: voters.into_iter().map(|(id, addr)| (id, BasicNode { addr })).collect(),
            raft,
            images,
            server,
            barrier: tokio::sync::Mutex::new(None),
            full_disk,
            propose_timeout_ms: config.propose_timeout_ms,
            core,
            limits,
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
    /// Unchecked: `submit` is what the broker uses.
    pub async fn propose(&self, record: MetadataRecord) -> Result<i64, QuorumError> {
        self.core.propose(record).await
    }

    /// Commits `record` through the quorum's leader, wherever it is: proposed here when this
    /// node leads, else sent to the leader, which checks it against its image
    /// (`MetadataImage::check`) and proposes it. Waits for a leader (an election) up to the
    /// propose timeout. Returns the image offset that holds the record.
    pub async fn submit(&self, record: MetadataRecord) -> Result<i64, crate::error::Error> {
        self.at_leader(
            || self.core.propose_checked(record.clone()),
            || network::Rpc::Propose(record.clone()),
            |reply| match reply {
                network::Reply::Proposed(outcome) => Some(outcome),
                _ => None,
            },
            "accepted the change",
        )
        .await
    }

    /// AddRaftVoter (`add`) or RemoveRaftVoter of `node` (KIP-853), done by the leader
    /// wherever it is (`Core::change_voters`), waiting for a leader up to the propose timeout.
    pub async fn change_voters(&self, node: u64, add: bool) -> Result<(), crate::error::Error> {
        self.at_leader(
            || self.core.change_voters(node, add),
            || match add {
                true => network::Rpc::AddVoter { node },
                false => network::Rpc::RemoveVoter { node },
            },
            |reply| match reply {
                network::Reply::VotersChanged(outcome) => Some(outcome),
                _ => None,
            },
            "changed the voters",
        )
        .await
    }

    /// Has the leader do something: `local` when this node leads, else `rpc` sent to the
    /// leader, whose reply `answer` reads (None: not the expected reply). A node that does not
    /// lead, or cannot be reached, is asked again (the leader may be moving) until the propose
    /// timeout; `done` says what no leader did, for the timeout's message.
    async fn at_leader<T, F: Future<Output = Result<T, Refusal>>>(
        &self,
        local: impl Fn() -> F,
        rpc: impl Fn() -> network::Rpc,
        answer: impl Fn(network::Reply) -> Option<Result<T, Refusal>>,
        done: &str,
    ) -> Result<T, crate::error::Error> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.propose_timeout_ms);
        loop {
            let outcome = match self.leader_address() {
                Some((leader, _)) if leader == self.node_id => local().await,
                Some((leader, address)) => match network::forward(&address, leader, rpc(), &self.limits).await {
                    Ok(reply) => answer(reply).unwrap_or(Err(Refusal::NotLeader)),
                    Err(e) => {
                        tracing::debug!(leader, %address, error = %e, "metadata quorum: asking the leader failed");
                        Err(Refusal::NotLeader)
                    }
                },
                None => Err(Refusal::NotLeader),
            };
            match outcome {
                Ok(value) => return Ok(value),
                Err(Refusal::NotLeader) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(Refusal::NotLeader) => {
                    return Err(crate::error::Error::Controller {
                        code: ResponseError::RequestTimedOut.code(),
                        message: format!(
                            "no metadata quorum leader {done} within {} ms: is a majority of the voters up?",
                            self.propose_timeout_ms
                        ),
                    });
                }
                Err(Refusal::Stale(message)) => return Err(crate::error::Error::Stale(message)),
                Err(Refusal::Final { code, message }) => return Err(crate::error::Error::Controller { code, message }),
            }
        }
    }

    /// Whether the voters come from the log alone (KIP-853): AddRaftVoter and RemoveRaftVoter
    /// are served.
    pub fn is_dynamic(&self) -> bool {
        self.dynamic
    }

    /// Runs `work` (a wait for the quorum) to completion from synchronous code on a
    /// multi-threaded runtime's thread: the handlers call the controller synchronously, so the
    /// wait is bridged with `block_in_place`, which hands this thread's other tasks to another.
    pub fn block_on<T>(&self, work: impl Future<Output = T>) -> Result<T, crate::error::Error> {
        let unusable = |why: &str| crate::error::Error::Controller {
            code: ResponseError::UnknownServerError.code(),
            message: format!("a metadata change cannot be made from here: {why}"),
        };
        let handle = tokio::runtime::Handle::try_current().map_err(|_| unusable("no tokio runtime"))?;
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            return Err(unusable("a current-thread runtime cannot wait for the quorum"));
        }
        Ok(tokio::task::block_in_place(|| handle.block_on(work)))
    }

    /// Waits until this node's image holds `offset` records.
    pub async fn wait_applied(&self, offset: i64) -> Result<Arc<MetadataImage>, crate::error::Error> {
        let mut images = self.images.subscribe();
        let wait = Duration::from_millis(self.propose_timeout_ms);
        match tokio::time::timeout(wait, images.wait_for(|image| image.offset >= offset)).await {
            Ok(Ok(image)) => Ok(image.clone()),
            _ => Err(crate::error::Error::Controller {
                code: ResponseError::RequestTimedOut.code(),
                message: format!(
                    "this node did not learn metadata offset {offset} within {} ms",
                    self.propose_timeout_ms
                ),
            }),
        }
    }

    /// The leader this node knows of, with its controller address.
    /// A learner that has not heard from the leader yet knows it from its link.
    fn leader_address(&self) -> Option<(u64, String)> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let leader = metrics
            .current_leader
            .or_else(|| *self.core.linked_leader.lock().unwrap_or_else(|p| p.into_inner()))?;
        let address = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|node| node.addr.clone())
            .filter(|addr| addr != LEARNER_ADDRESS)
            .or_else(|| self.voters.get(&leader).map(|node| node.addr.clone()))?;
        Some((leader, address))
    }

    /// This node's id as a Kafka broker id.
    /// `min.insync.replicas` of this node's static configuration (set by `leader_duties`).
    pub fn min_isr_default(&self) -> i32 {
        self.core.min_isr_default.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn broker_id(&self) -> i32 {
        i32::try_from(self.node_id).unwrap_or(-1)
    }

    /// The channel this node's images are published on (the `Controller` publishes the same).
    pub(crate) fn image_sender(&self) -> Arc<watch::Sender<Arc<MetadataImage>>> {
        self.images.clone()
    }

    /// Tells the leader that broker `broker` (this node) is alive, and whether its log
    /// directory is offline; false when the leader does not know it (it must register).
    pub async fn heartbeat(&self, broker: i32, log_dir_offline: bool) -> Result<bool, crate::error::Error> {
        self.send_heartbeat(broker, false, log_dir_offline).await
    }

    /// Controlled shutdown (Kafka's BrokerHeartbeat with `WantShutDown`): asks the leader to
    /// fence broker `broker` (this node) now, retrying through elections until `wait` has
    /// passed. An error says the quorum could not be reached in time; the caller stops anyway
    /// and the session timeout fences it later.
    pub async fn controlled_shutdown(&self, broker: i32, wait: Duration) -> Result<(), crate::error::Error> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let attempt = tokio::time::timeout_at(deadline, self.send_heartbeat(broker, true, false)).await;
            match attempt {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) if tokio::time::Instant::now() + Duration::from_millis(100) < deadline => {
                    tracing::debug!(error = %e, "controlled shutdown: retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(crate::error::Error::Controller {
                        code: ResponseError::RequestTimedOut.code(),
                        message: format!(
                            "no metadata quorum leader fenced this broker within {} ms",
                            wait.as_millis()
                        ),
                    });
                }
            }
        }
    }

    async fn send_heartbeat(
        &self,
        broker: i32,
        shutting_down: bool,
        log_dir_offline: bool,
    ) -> Result<bool, crate::error::Error> {
        let applied = self.image().offset;
        let outcome = match self.leader_address() {
            Some((leader, _)) if leader == self.node_id => {
                self.core
                    .heartbeat(broker, applied, shutting_down, log_dir_offline)
                    .await
            }
            Some((leader, address)) => {
                let rpc = network::Rpc::BrokerHeartbeat {
                    broker,
                    applied,
                    shutting_down,
                    log_dir_offline,
                };
                match network::forward(&address, leader, rpc, &self.limits).await {
                    Ok(network::Reply::Heartbeat(outcome)) => outcome,
                    Ok(_) | Err(_) => Err(Refusal::NotLeader),
                }
            }
            None => Err(Refusal::NotLeader),
        };
        match outcome {
            Ok(reply) => Ok(reply.registered),
            Err(Refusal::NotLeader) => Err(crate::error::Error::Controller {
                code: ResponseError::NotController.code(),
                message: "no metadata quorum leader reachable".into(),
            }),
            Err(Refusal::Stale(message)) => Err(crate::error::Error::Stale(message)),
            Err(Refusal::Final { code, message }) => Err(crate::error::Error::Controller { code, message }),
        }
    }

    /// On the leader, once per call: fences the brokers not heard from for `session_timeout`
    /// (counting from when this node became leader, so a new leader gives every broker a full
    /// session), and records a cluster id if none was agreed yet.
    pub async fn leader_duties(
        &self,
        session_timeout: Duration,
        (unclean_default, min_isr_default): (bool, i32),
        rebalance: Option<Duration>,
        leader_since: &mut Option<std::time::Instant>,
    ) {
        self.core
            .unclean_default
            .store(unclean_default, std::sync::atomic::Ordering::Relaxed);
        self.core
            .min_isr_default
            .store(min_isr_default, std::sync::atomic::Ordering::Relaxed);
        let leading = self.leader() == Some(self.node_id);
        if !leading {
            *leader_since = None;
            return;
        }
        let now = std::time::Instant::now();
        if leader_since.is_none() {
            tracing::info!(
                node_id = self.node_id,
                "this node leads the metadata quorum (the active controller)"
            );
        }
        let since = *leader_since.get_or_insert(now);
        let image = self.image();
        if image.cluster_id.is_empty() {
            let id = new_cluster_id();
            if let Err(e) = self.core.propose_checked(MetadataRecord::SetClusterId { id }).await {
                tracing::debug!(?e, "metadata quorum: recording the cluster id");
            }
        }
        // A new cluster finalizes eligible leader replicas, and an older one's log may lack
        // the configs they need: the active controller writes them (Kafka's bootstrap and
        // feature upgrade do, `maybeGenerateElrSafetyRecords`).
        if image.elr_enabled() {
            for node in image.elr_safety_targets() {
                // Computed again under the proposal lock: the record replaces the whole layer.
                let owed = |latest: &MetadataImage| {
                    Ok((latest.elr_enabled() && latest.elr_safety_targets().contains(&node))
                        .then(|| latest.elr_safety_record(node, min_isr_default)))
                };
                match self.core.propose_derived(owed).await {
                    Ok(Some(_)) => {}
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::debug!(
                            ?e,
                            "metadata quorum: making the broker configs safe for eligible leader replicas"
                        );
                        break;
                    }
                }
                tracing::info!(
                    layer = node.map_or("cluster default".to_string(), |n| format!("broker {n}")),
                    "eligible leader replicas: min.insync.replicas is set once, for the whole cluster"
                );
            }
        }
        let late: Vec<i32> = {
            let heard = self.core.heartbeats.lock().unwrap_or_else(|p| p.into_inner());
            image
                .live_brokers()
                .filter(|b| {
                    let last = heard.get(&b.id).copied().unwrap_or(since).max(since);
                    now.duration_since(last) > session_timeout
                })
                .map(|b| b.id)
                .collect()
        };
        for id in late {
            tracing::warn!(
                broker = id,
                timeout_ms = session_timeout.as_millis() as u64,
                "metadata quorum: fencing a broker that missed its session timeout"
            );
            match self
                .core
                .propose_checked(MetadataRecord::SetBrokerFenced { id, fenced: true })
                .await
            {
                Ok(offset) => {
                    self.core
                        .fenced_at
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id, offset);
                }
                Err(e) => tracing::warn!(broker = id, ?e, "metadata quorum: fencing failed"),
            }
        }
        self.core.elect().await;
        // `auto.leader.rebalance.enable`: every `leader.imbalance.check.interval.seconds`
        // (counted from this node's election) partitions go back to their preferred leader.
        if let Some(every) = rebalance {
            let due = {
                let mut last = self.core.last_rebalance.lock().unwrap_or_else(|p| p.into_inner());
                let due = last.map_or(now.duration_since(since) >= every, |at| now.duration_since(at) >= every);
                if due {
                    *last = Some(now);
                }
                due
            };
            if due {
                let min_isr = self.min_isr_default();
                let changes = self.image().preferred_elections(min_isr);
                if !changes.is_empty() {
                    let count = changes.len();
                    match self
                        .core
                        .propose_checked(MetadataRecord::ChangePartitions { changes })
                        .await
                    {
                        Ok(_) => tracing::info!(partitions = count, "metadata quorum: preferred leaders restored"),
                        Err(e) => tracing::debug!(?e, "metadata quorum: preferred leader elections"),
                    }
                }
            }
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
    /// Whether this node's raft is stalled: a write of its raft files waits for space on a
    /// full disk. Its image may then be behind the quorum's (it applies nothing new).
    pub fn stalled(&self) -> bool {
        self.full_disk.is_waiting()
    }

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

    /// Resolves once this node's raft has stopped on a fault: a storage error other than a full
    /// disk (EIO from a failing device, a read-only remount), or a panic in openraft's core. It
    /// then applies nothing more, so this node's image stays as it was at the fault. Never
    /// resolves while the raft runs, nor after `shutdown`.
    pub async fn failed(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            {
                let state = &metrics.borrow_and_update().running_state;
                match state {
                    Ok(()) | Err(openraft::error::Fatal::Stopped) => {}
                    Err(fault) => return fault.to_string(),
                }
            }
            if metrics.changed().await.is_err() {
                // The core is gone without a fault on record: a normal stop.
                return std::future::pending().await;
            }
        }
    }

    /// Stops serving the other controllers, then stops the raft node. Everything it
    /// acknowledged is on disk already.
    pub async fn shutdown(&self) -> Result<(), QuorumError> {
        // A write waiting out a full disk gives up, or the raft could not stop.
        self.full_disk.stop();
        self.server.shutdown().await;
        self.raft
            .shutdown()
            .await
            .map_err(|e| QuorumError::Stopped(format!("shutting down: {e}")))
    }

    /// The leader's metrics and committed index, asked over the controller listener when
    /// another node leads (a controller-only leader has no Kafka listener to forward to).
    pub async fn leader_metrics(&self) -> Option<(RaftMetrics<u64, BasicNode>, Option<u64>)> {
        match self.leader_address() {
            Some((leader, _)) if leader == self.node_id => self.core.leader_metrics().await,
            Some((leader, address)) => {
                match network::forward(&address, leader, network::Rpc::LeaderMetrics, &self.limits).await {
                    Ok(network::Reply::LeaderMetrics(view)) => view.map(|boxed| *boxed),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::debug!(leader, %address, error = %e, "metadata quorum: asking the leader for its metrics");
                        None
                    }
                }
            }
            None => None,
        }
    }

    /// A read barrier: waits (up to `within`) until this node has applied every entry the
    /// leader had committed when asked, and returns the image then. Learning a commit takes
    /// a replication round trip, so another node may answer Metadata with a topic this node's
    /// image does not hold yet; a request naming it waits here instead of being refused. None
    /// when the leader cannot be asked or this node does not catch up in time.
    pub async fn catch_up_with_leader(&self, within: Duration) -> Option<Arc<MetadataImage>> {
        let arrived = tokio::time::Instant::now();
        let barrier = async {
            let mut last = self.barrier.lock().await;
            // One that began after this call did, and succeeded, covers it.
            if last.is_some_and(|began| began >= arrived) {
                return Some(());
            }
            let began = tokio::time::Instant::now();
            let committed = match self.leader_address() {
                Some((leader, _)) if leader == self.node_id => self.committed_index().await,
                Some(_) => self.leader_metrics().await.and_then(|(_, committed)| committed),
                None => None,
            }?;
            self.raft
                .wait(None)
                .applied_index_at_least(Some(committed), "read barrier")
                .await
                .ok()?;
            *last = Some(began);
            Some(())
        };
        match tokio::time::timeout(within, barrier).await {
            Ok(Some(())) => Some(self.image()),
            _ => None,
        }
    }

    /// The index of the last entry this node knows committed (None before the first commit or
    /// once the raft node stopped): on the leader, DescribeQuorum's high watermark.
    pub async fn committed_index(&self) -> Option<u64> {
        self.raft
            .with_raft_state(|state| state.committed.as_ref().map(|id| id.index))
            .await
            .ok()
            .flatten()
    }
}
