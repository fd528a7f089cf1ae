//! The quorum's RPCs over TCP: openraft's AppendEntries, Vote and InstallSnapshot (chunked by
//! openraft: `snapshot_max_chunk_size`) between controllers.
//!
//! A frame is `[length u32, big endian][serde_json body]`; a request is `RequestFrame` (the
//! node it is meant for, so a peer configured with a wrong address is told so instead of
//! voting in the wrong cluster) and its answer a `Reply`, one at a time on a connection. A
//! length past `frame_bytes_max` or a body that does not parse closes the connection (a log
//! line, never a panic); every read and write is bounded by a timeout, a connection silent for
//! `idle_timeout` is closed, and at most `CONNECTIONS_MAX` are served at once.
//!
//! A broker-only node (a raft learner, KIP-595's observer) has no listener of its own: it dials
//! the leader's controller listener and sends `JoinAsLearner`; once accepted, the connection
//! turns around and the leader sends the learner's AppendEntries and InstallSnapshot over it
//! (`Links`), the learner answering as a server would. The learner dials again when the link
//! closes or carries nothing for `LearnerLink::idle` (the leader heartbeats every learner, so
//! silence means the leader changed or died), asking the voters in turn and following the
//! leader they name.
//!
//! In a dynamic quorum (KIP-853, `controller.quorum.bootstrap.servers`) the nodes dialed first
//! are the bootstrap servers, whose ids are unknown: a request to one is addressed to
//! `ANY_NODE`. A controller that is not a voter yet joins the same way but names its own
//! controller listener: the leader records it as a learner at that address and dials it like a
//! voter, and AddRaftVoter can then make it one.
//!
//! On a secured controller listener (`ControllerSecurity`), every connection starts with TLS
//! (SSL, SASL_SSL) and, on a SASL listener, with the dialling node's login: `SaslAuthenticate`
//! frames carrying the SASL exchange (`sasl::client` on one end, `sasl::Authenticator` on the
//! other); anything else before it completes closes the connection. With an authorizer, the
//! principal must hold CLUSTER_ACTION on the cluster (as Kafka's controller asks of Vote,
//! BeginQuorumEpoch, Fetch and BrokerHeartbeat); a learner's link, which the learner dialled,
//! is trusted in the other direction.
//!
//! The client side (`PeerClient`, one per target and replication stream, made by openraft
//! through `NetworkFactory`) keeps one connection and reconnects at the next RPC after any
//! error. A connection is taken out of the client for the time of a call, so a call that
//! openraft abandons midway (its own timeout) drops the connection with it rather than leaving
//! an unread reply for the next call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Core, HeartbeatReply, Refusal, TypeConfig};
use crate::acl::{Authorizer, Operation, ResourceType};
use crate::cluster::MetadataRecord;
use crate::cluster::peer::{DialSecurity, PeerStream};
use crate::config::{BrokerConfig, ConfigError, SASL_PLAINTEXT, SASL_SSL, SSL};
use crate::sasl::{Authenticator, ListenerSasl};

/// At most one warning per this interval for connections closed for want of a slot.
const REFUSED_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Connections a node serves at once: two per peer (replication and votes) in a quorum of a
/// handful of voters, with room for reconnections whose old half is not closed yet.
const CONNECTIONS_MAX: usize = 64;
/// How long one request may take to be handled by the local raft (an install of a snapshot's
/// last chunk parses and persists the whole snapshot).
const HANDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The controller listener's security, both ends.
#[derive(Debug)]
pub struct ControllerSecurity {
    /// How this node dials the controllers.
    dial: DialSecurity,
    /// How this node serves its controller listener (a controller).
    serve: ServeSecurity,
}

#[derive(Default)]
struct ServeSecurity {
    tls: Option<Arc<crate::tls::TlsListener>>,
    sasl: Option<Arc<ListenerSasl>>,
    authorizer: Option<Arc<Authorizer>>,
}

impl std::fmt::Debug for ServeSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeSecurity")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|s| &s.mechanisms))
            .field("authorizer", &self.authorizer.is_some())
            .finish()
    }
}

impl Default for ControllerSecurity {
    fn default() -> ControllerSecurity {
        ControllerSecurity {
            dial: DialSecurity::plaintext("CONTROLLER"),
            serve: ServeSecurity::default(),
        }
    }
}

impl ControllerSecurity {
    /// The controller listener of `config`: dialled by every node, served by a controller.
    pub fn new(config: &BrokerConfig) -> Result<ControllerSecurity, ConfigError> {
        let listener = config.controller_listener_name();
        let protocol = config.security_protocol(listener).unwrap_or_default();
        let sasl = matches!(protocol, SASL_PLAINTEXT | SASL_SSL);
        let mut serve = ServeSecurity::default();
        if config.process_roles.controller {
            if matches!(protocol, SSL | SASL_SSL) {
                serve.tls = Some(Arc::new(crate::tls::listener(config, listener, sasl).map_err(|e| {
                    ConfigError {
                        key: e.key.to_string(),
                        reason: e.to_string(),
                    }
                })?));
            }
            if sasl {
                serve.sasl = Some(Arc::new(ListenerSasl::new(config, listener)?));
            }
            let authorizer = Authorizer::new(config);
            serve.authorizer = authorizer.enabled().then(|| Arc::new(authorizer));
        }
        Ok(ControllerSecurity {
            dial: config.controller_dial()?,
            serve,
        })
    }
}

/// The bounds of the quorum's connections.
#[derive(Debug, Clone)]
pub(super) struct NetworkLimits {
    /// The largest frame read or written; an AppendEntries that would exceed it is split.
    pub(super) frame_bytes_max: usize,
    /// Bound on each read or write of a frame, and on connecting.
    pub(super) io_timeout: Duration,
    /// A server connection with no request for this long is closed.
    pub(super) idle_timeout: Duration,
    pub(super) security: Arc<ControllerSecurity>,
}

/// The `to` of a request to a bootstrap server, whose id the sender does not know: whichever
/// node answers takes it.
pub(super) const ANY_NODE: u64 = u64::MAX;

/// A request: the node it is meant for and the RPC.
#[derive(Debug, Serialize, Deserialize)]
struct RequestFrame {
    to: u64,
    rpc: Rpc,
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Rpc {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// DescribeQuorum of a node whose leader has no Kafka listener (controller-only): the
    /// leader's metrics and committed index.
    LeaderMetrics,
    /// A broker-only node asks to follow the metadata log (a raft learner) and offers this
    /// connection for the leader's replication RPCs to it.
    JoinAsLearner {
        node: u64,
        /// A controller that is not a voter (KIP-853): its controller listener, where the
        /// leader dials it; the connection is not kept.
        #[serde(default)]
        address: Option<String>,
    },
    /// AddRaftVoter (KIP-853) forwarded to the leader: learner `node` becomes a voter.
    AddVoter {
        node: u64,
    },
    /// RemoveRaftVoter forwarded to the leader: voter `node` becomes a learner.
    RemoveVoter {
        node: u64,
    },
    /// A broker forwards a metadata change to the leader (Kafka forwards admin requests to
    /// the active controller).
    Propose(MetadataRecord),
    /// One client message of the dialling node's SASL login (the first one names the
    /// mechanism); answered `Reply::Sasl`.
    SaslAuthenticate {
        mechanism: String,
        token: Vec<u8>,
    },
    /// A broker tells the leader it is alive and how many metadata records it has applied
    /// (Kafka's BrokerHeartbeat with its metadata offset).
    BrokerHeartbeat {
        broker: i32,
        #[serde(default)]
        applied: i64,
        /// The broker is stopping and asks to be fenced now (Kafka's `WantShutDown`).
        #[serde(default)]
        shutting_down: bool,
        /// Its log directory failed (Kafka's `OfflineLogDirs`, KIP-858).
        #[serde(default)]
        log_dir_offline: bool,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Reply {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    Proposed(Result<i64, Refusal>),
    Heartbeat(Result<HeartbeatReply, Refusal>),
    /// The leader's metrics and committed index; None from a node that does not lead.
    LeaderMetrics(Option<Box<LeaderMetrics>>),
    /// `JoinAsLearner` accepted (the connection now carries the leader's RPCs), or refused by
    /// a node that does not lead, naming the leader it knows.
    Joined(Result<(), Option<u64>>),
    /// `JoinAsLearner` refused by a node that does not lead: the leader it knows, with its
    /// controller address when it knows one (a node dialed as a bootstrap server).
    JoinRefused {
        leader: Option<u64>,
        address: Option<String>,
    },
    /// `JoinAsLearner` to `ANY_NODE` accepted by the leader, which is node `leader`.
    JoinedBy {
        leader: u64,
    },
    /// The answer to `AddVoter` or `RemoveVoter`.
    VotersChanged(Result<(), Refusal>),
    /// The request named another node: this address is node `node`.
    WrongNode {
        node: u64,
    },
    /// The server's message of a SASL exchange, or why the login is refused (the connection
    /// then closes).
    Sasl(Result<Vec<u8>, String>),
}

/// Why a frame could not be read or written; the connection is closed after any of them.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameError {
    #[error("{op}: {source}")]
    Io { op: &'static str, source: std::io::Error },
    #[error("no {what} within {ms} ms")]
    TimedOut { what: &'static str, ms: u128 },
    #[error("a frame of {len} bytes exceeds the {max} bytes allowed")]
    TooLarge { len: usize, max: usize },
    #[error("malformed frame: {0}")]
    Malformed(serde_json::Error),
    #[error("the peer closed the connection")]
    Closed,
    /// A login refused, a request before one, or a principal without CLUSTER_ACTION.
    #[error("{0}")]
    Refused(String),
}

/// Connects to `address` (a controller listener) as node-to-node traffic: TCP, TLS, and this
/// node's SASL login when the listener is SASL, all within the I/O bound.
async fn dial(address: &str, to: u64, limits: &NetworkLimits) -> Result<PeerStream, FrameError> {
    let security = &limits.security.dial;
    let mut stream = security
        .connect_to(address, limits.io_timeout)
        .await
        .map_err(|source| FrameError::Io { op: "connect", source })?;
    let Some(login) = &security.sasl else {
        return Ok(stream);
    };
    let mut client = crate::sasl::client::SaslClient::new(login.clone());
    let mechanism = client.mechanism().name().to_string();
    let mut token = client.start();
    loop {
        let rpc = Rpc::SaslAuthenticate {
            mechanism: mechanism.clone(),
            token,
        };
        let frame = encode_frame(&RequestFrame { to, rpc }, limits.frame_bytes_max)?;
        write_frame(&mut stream, &frame, limits.io_timeout).await?;
        // A refusal comes after the server's failure delay.
        let reply = read_frame::<_, Reply>(
            &mut stream,
            limits.frame_bytes_max,
            HANDLE_TIMEOUT + limits.io_timeout,
            limits.io_timeout,
        )
        .await?
        .ok_or(FrameError::Closed)?;
        let server = match reply {
            Reply::Sasl(Ok(server)) => server,
            Reply::Sasl(Err(reason)) => {
                return Err(FrameError::Refused(format!(
                    "{address} refused this node's login: {reason}"
                )));
            }
            Reply::WrongNode { node } => {
                return Err(FrameError::Refused(format!("{address} is node {node}, not node {to}")));
            }
            _ => return Err(FrameError::Refused(format!("{address} answered the login out of turn"))),
        };
        match client
            .step(&server)
            .map_err(|reason| FrameError::Refused(format!("{address}: {reason}")))?
        {
            Some(next) => token = next,
            None => return Ok(stream),
        }
    }
}

/// What a served connection has shown of itself: its SASL login under way or done, and its
/// principal's right to talk to the quorum.
struct Access {
    sasl: Option<Authenticator>,
    /// Whether the SASL exchange has begun (its mechanism chosen).
    started: bool,
    /// The principal before SASL (`User:ANONYMOUS`, or a client certificate's).
    principal: String,
    host: String,
    authorizer: Option<Arc<Authorizer>>,
    authorized: bool,
}

impl Access {
    /// Trusted: a learner's link, dialled by this node.
    fn trusted() -> Access {
        Access {
            sasl: None,
            started: false,
            principal: String::new(),
            host: String::new(),
            authorizer: None,
            authorized: true,
        }
    }

    /// May a request other than the login be served? Refused: the connection closes.
    fn check(&mut self, core: &Core) -> Result<(), FrameError> {
        if self.authorized {
            return Ok(());
        }
        let principal = match &self.sasl {
            Some(auth) => match auth.session() {
                Some(session) => session.principal.clone(),
                None => return Err(FrameError::Refused("a request before SASL authentication".into())),
            },
            None => self.principal.clone(),
        };
        if let Some(authorizer) = &self.authorizer {
            let image = core.images.borrow().clone();
            if !authorizer.authorize(
                &image.acls,
                &principal,
                &self.host,
                Operation::ClusterAction,
                ResourceType::Cluster,
                crate::acl::CLUSTER_NAME,
            ) {
                return Err(FrameError::Refused(format!(
                    "{principal} may not talk to the quorum (it needs CLUSTER_ACTION on the cluster, or super.users)"
                )));
            }
        }
        self.authorized = true;
        Ok(())
    }

    /// One login message; the reply, and whether the connection goes on.
    async fn authenticate(&mut self, mechanism: &str, token: &[u8], core: &Core) -> (Reply, bool) {
        let Some(auth) = self.sasl.as_mut() else {
            return (
                Reply::Sasl(Err("this controller listener does not use SASL".into())),
                false,
            );
        };
        if !self.started {
            self.started = true;
            match auth.handshake(mechanism, 1) {
                crate::sasl::Handshake::Accepted => {}
                crate::sasl::Handshake::Unsupported(offered) => {
                    return (
                        Reply::Sasl(Err(format!(
                            "{mechanism} is not enabled here (it offers {})",
                            offered.join(", ")
                        ))),
                        false,
                    );
                }
                crate::sasl::Handshake::IllegalState(reason) => return (Reply::Sasl(Err(reason)), false),
            }
        }
        let image = core.images.borrow().clone();
        match auth.authenticate(token, &image, std::time::SystemTime::now()) {
            crate::sasl::Step::Challenge(challenge) => (Reply::Sasl(Ok(challenge)), true),
            crate::sasl::Step::Complete { response, .. } => (Reply::Sasl(Ok(response)), true),
            crate::sasl::Step::Failed(reason) => {
                // As on a client listener: a failed login is answered late, so guessing is slow.
                tokio::time::sleep(auth.settings().failure_delay).await;
                (Reply::Sasl(Err(reason)), false)
            }
            crate::sasl::Step::IllegalState(reason) => (Reply::Sasl(Err(reason)), false),
        }
    }
}

async fn bounded<T>(
    limit: Duration,
    what: &'static str,
    op: impl Future<Output = std::io::Result<T>>,
) -> Result<T, FrameError> {
    match timeout(limit, op).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(FrameError::Io { op: what, source }),
        Err(_) => Err(FrameError::TimedOut {
            what,
            ms: limit.as_millis(),
        }),
    }
}

/// Serializes a frame (length prefix included), refusing one past `max`.
fn encode_frame<T: Serialize>(value: &T, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut bytes = vec![0; 4];
    serde_json::to_writer(&mut bytes, value).map_err(FrameError::Malformed)?;
    let len = bytes.len() - 4;
    let claimed = u32::try_from(len)
        .ok()
        .filter(|_| len <= max)
        .ok_or(FrameError::TooLarge { len, max })?;
    bytes[..4].copy_from_slice(&claimed.to_be_bytes());
    Ok(bytes)
}

/// Reads the next frame: None at a clean end of stream before a frame starts. The wait for
/// the frame to start is bounded by `first_byte_timeout`, the rest by `io_timeout`.
async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
    max: usize,
    first_byte_timeout: Duration,
    io_timeout: Duration,
) -> Result<Option<T>, FrameError> {
    let mut length = [0u8; 4];
    if bounded(first_byte_timeout, "read a frame length", reader.read(&mut length[..1])).await? == 0 {
        return Ok(None);
    }
    bounded(io_timeout, "read a frame length", reader.read_exact(&mut length[1..])).await?;
    // The peer's claim: checked before allocating anything.
    let len = u32::from_be_bytes(length) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    let mut body = vec![0; len];
    bounded(io_timeout, "read a frame body", reader.read_exact(&mut body)).await?;
    serde_json::from_slice(&body).map(Some).map_err(FrameError::Malformed)
}

async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &[u8],
    io_timeout: Duration,
) -> Result<(), FrameError> {
    bounded(io_timeout, "write a frame", writer.write_all(frame)).await
}

/// The raft server of one node; stops with `shutdown`.
pub(super) struct RaftServer {
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl RaftServer {
    /// Serves openraft's RPCs to `raft` on `listener` until `shutdown`.
    pub(super) fn start(
        listener: TcpListener,
        node_id: u64,
        raft: Raft<TypeConfig>,
        core: Arc<Core>,
        limits: NetworkLimits,
    ) -> RaftServer {
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
        let (accept_cancel, accept_tasks) = (cancel.clone(), tasks.clone());
        tasks.spawn(async move {
            // Connections closed for want of a slot since the last warning: one warning per
            // interval, not one per connection (a peer whose calls time out against a node
            // stalled on a full disk reconnects hundreds of times a second).
            let (mut refused, mut warned_at) = (0u64, None::<std::time::Instant>);
            loop {
                let accepted = tokio::select! {
                    _ = accept_cancel.cancelled() => break,
                    accepted = listener.accept() => accepted,
                };
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: keep serving the others.
                        tracing::warn!(node_id, error = %e, "metadata quorum: accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    refused += 1;
                    if warned_at.is_none_or(|at| at.elapsed() >= REFUSED_WARNING_INTERVAL) {
                        tracing::warn!(node_id, %peer, max = CONNECTIONS_MAX, refused, "metadata quorum: too many connections; closing new ones");
                        (refused, warned_at) = (0, Some(std::time::Instant::now()));
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let (raft, core, cancel, limits) = (raft.clone(), core.clone(), accept_cancel.clone(), limits.clone());
                accept_tasks.spawn(async move {
                    let _slot = slot;
                    let Some((stream, access)) = open_served(stream, peer, &limits, &cancel).await else {
                        return;
                    };
                    match serve_connection(stream, access, node_id, &raft, &core, limits, &cancel).await {
                        Ok(()) | Err(FrameError::Closed) => {}
                        Err(e @ FrameError::TimedOut { .. }) => {
                            tracing::debug!(node_id, %peer, reason = %e, "metadata quorum: closing connection")
                        }
                        Err(e) => tracing::warn!(node_id, %peer, reason = %e, "metadata quorum: closing connection"),
                    }
                });
            }
        });
        tasks.close();
        RaftServer { cancel, tasks }
    }

    /// Serves openraft's RPCs to `raft` (a broker-only learner) over connections this node
    /// dials to the leader, found through `targets` (id → controller address: the voters, or
    /// the bootstrap servers under `ANY_NODE`), until `shutdown`.
    pub(super) fn start_learner(
        targets: Vec<(u64, String)>,
        node_id: u64,
        raft: Raft<TypeConfig>,
        core: Arc<Core>,
        limits: NetworkLimits,
        idle: Duration,
    ) -> RaftServer {
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let task_cancel = cancel.clone();
        tasks.spawn(async move {
            let mut dialer = Dialer::new(targets);
            // The link's reads wait `idle` for the next RPC instead of the server's idle bound.
            let link_limits = NetworkLimits {
                idle_timeout: idle,
                ..limits.clone()
            };
            while !task_cancel.is_cancelled() {
                let Some((target, address)) = dialer.pick(&raft) else { break };
                match join(&address, target, node_id, None, &limits).await {
                    Ok(Joined::Accepted(stream, leader)) => {
                        tracing::info!(node_id, leader, %address, "metadata quorum: following the leader as a learner");
                        core.set_linked_leader(Some(leader));
                        let outcome = serve_connection(
                            stream,
                            Access::trusted(),
                            node_id,
                            &raft,
                            &core,
                            link_limits.clone(),
                            &task_cancel,
                        )
                        .await;
                        core.set_linked_leader(None);
                        dialer.avoid = Some(leader);
                        tracing::debug!(node_id, leader, ?outcome, "metadata quorum: the link to the leader ended");
                        continue;
                    }
                    Ok(Joined::Refused(leader, leader_address)) => dialer.refused(target, leader, leader_address),
                    Err(e @ FrameError::Refused(_)) => {
                        tracing::warn!(node_id, voter = target, %address, error = %e, "metadata quorum: refused by a voter");
                        dialer.avoid = Some(target);
                    }
                    Err(e) => {
                        tracing::debug!(node_id, voter = target, %address, error = %e, "metadata quorum: cannot reach a voter");
                        dialer.avoid = Some(target);
                    }
                }
                tokio::select! {
                    _ = task_cancel.cancelled() => break,
                    _ = tokio::time::sleep(LEARNER_RETRY) => {}
                }
            }
        });
        tasks.close();
        RaftServer { cancel, tasks }
    }

    /// A controller of a dynamic quorum (KIP-853) that is not in the membership yet asks the
    /// leader, found through `targets`, to take it as a learner at `own_address` (its
    /// controller listener), until the membership holds it (as a learner or a voter); asks
    /// again whenever it is missing from the membership this node knows.
    pub(super) fn join_as_controller(
        &self,
        targets: Vec<(u64, String)>,
        node_id: u64,
        own_address: String,
        raft: Raft<TypeConfig>,
        limits: NetworkLimits,
    ) {
        let cancel = self.cancel.clone();
        self.tasks.spawn(async move {
            let mut dialer = Dialer::new(targets);
            while !cancel.is_cancelled() {
                let wait = if super::membership_node(&raft, node_id).is_some() {
                    CONTROLLER_JOIN_CHECK
                } else if let Some((target, address)) = dialer.pick(&raft) {
                    match join(&address, target, node_id, Some(own_address.clone()), &limits).await {
                        Ok(Joined::Accepted(_, leader)) => {
                            tracing::info!(node_id, leader, "metadata quorum: asked the leader to take this controller as an observer");
                            CONTROLLER_JOIN_CHECK
                        }
                        Ok(Joined::Refused(leader, leader_address)) => {
                            dialer.refused(target, leader, leader_address);
                            LEARNER_RETRY
                        }
                        Err(e) => {
                            tracing::debug!(node_id, %address, error = %e, "metadata quorum: cannot reach a controller");
                            dialer.avoid = Some(target);
                            LEARNER_RETRY
                        }
                    }
                } else {
                    break;
                };
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        });
    }

    /// Stops accepting, closes every connection and waits for their tasks.
    pub(super) async fn shutdown(&self) {
        self.cancel.cancel();
        self.tasks.wait().await;
    }
}

/// A connection accepted on the controller listener, made ready to serve: its TLS handshake
/// and principal (SSL), and its SASL state (SASL listeners). None: refused or shut down.
async fn open_served(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    limits: &NetworkLimits,
    cancel: &CancellationToken,
) -> Option<(PeerStream, Access)> {
    let serve = &limits.security.serve;
    let mut access = Access {
        sasl: serve.sasl.clone().map(Authenticator::new),
        started: false,
        principal: "User:ANONYMOUS".to_string(),
        host: crate::acl::host_of(peer.ip()),
        authorizer: serve.authorizer.clone(),
        authorized: serve.sasl.is_none() && serve.authorizer.is_none(),
    };
    let Some(tls) = &serve.tls else {
        return Some((PeerStream::Plain(stream), access));
    };
    let handshake = tokio::select! {
        _ = cancel.cancelled() => return None,
        done = timeout(crate::tls::HANDSHAKE_TIMEOUT, tls.acceptor.accept(stream)) => done,
    };
    let stream = match handshake {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            tracing::warn!(%peer, error = %e, "metadata quorum: TLS handshake failed; closing connection");
            return None;
        }
        Err(_) => {
            tracing::warn!(%peer, "metadata quorum: no TLS handshake within its time; closing connection");
            return None;
        }
    };
    match tls.principal(stream.get_ref().1) {
        Ok(None) => {}
        Ok(Some(principal)) => access.principal = principal,
        Err(subject) => {
            tracing::warn!(%peer, ?subject, "metadata quorum: no ssl.principal.mapping.rules rule applies to the certificate; closing connection");
            return None;
        }
    }
    Some((
        PeerStream::Tls(Box::new(tokio_rustls::TlsStream::Server(stream))),
        access,
    ))
}

/// Answers the requests of one connection in order until it closes, errs or `cancel`.
async fn serve_connection(
    mut stream: PeerStream,
    mut access: Access,
    node_id: u64,
    raft: &Raft<TypeConfig>,
    core: &Core,
    limits: NetworkLimits,
    cancel: &CancellationToken,
) -> Result<(), FrameError> {
    loop {
        let read = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            read = read_frame::<_, RequestFrame>(&mut stream, limits.frame_bytes_max, limits.idle_timeout, limits.io_timeout) => read,
        };
        let Some(request) = read? else {
            return Ok(());
        };
        if request.to != node_id && request.to != ANY_NODE {
            let frame = encode_frame(&Reply::WrongNode { node: node_id }, limits.frame_bytes_max)?;
            write_frame(&mut stream, &frame, limits.io_timeout).await?;
            tracing::warn!(
                node_id,
                to = request.to,
                "metadata quorum: a request for another node; check controller.quorum.voters"
            );
            return Ok(());
        }
        if let Rpc::SaslAuthenticate { mechanism, token } = &request.rpc {
            let (reply, goes_on) = access.authenticate(mechanism, token, core).await;
            let frame = encode_frame(&reply, limits.frame_bytes_max)?;
            write_frame(&mut stream, &frame, limits.io_timeout).await?;
            if !goes_on {
                return Err(FrameError::Refused("SASL login refused".into()));
            }
            continue;
        }
        access.check(core)?;
        if let Rpc::JoinAsLearner { node, address } = request.rpc {
            let (leader, leader_address) = {
                let metrics = raft.metrics();
                let metrics = metrics.borrow();
                let leader = metrics.current_leader;
                let address = leader
                    .and_then(|id| metrics.membership_config.membership().get_node(&id).cloned())
                    .map(|n| n.addr)
                    .filter(|addr| addr != LEARNER_ADDRESS);
                (leader, address)
            };
            if leader != Some(node_id) {
                let reply = match request.to {
                    ANY_NODE => Reply::JoinRefused {
                        leader,
                        address: leader_address,
                    },
                    _ => Reply::Joined(Err(leader)),
                };
                let frame = encode_frame(&reply, limits.frame_bytes_max)?;
                write_frame(&mut stream, &frame, limits.io_timeout).await?;
                return Ok(());
            }
            let reply = match request.to {
                ANY_NODE => Reply::JoinedBy { leader: node_id },
                _ => Reply::Joined(Ok(())),
            };
            let frame = encode_frame(&reply, limits.frame_bytes_max)?;
            write_frame(&mut stream, &frame, limits.io_timeout).await?;
            match address {
                // A controller: the leader dials its listener.
                Some(address) => core.accept_controller_learner(node, address),
                // From here the leader is the client of this connection.
                None => core.accept_learner(node, stream),
            }
            return Ok(());
        }
        let handled = async {
            match request.rpc {
                Rpc::AppendEntries(rpc) => Reply::AppendEntries(raft.append_entries(rpc).await),
                Rpc::Vote(rpc) => Reply::Vote(raft.vote(rpc).await),
                Rpc::InstallSnapshot(rpc) => Reply::InstallSnapshot(raft.install_snapshot(rpc).await),
                Rpc::Propose(record) => Reply::Proposed(core.propose_checked(record).await),
                Rpc::LeaderMetrics => Reply::LeaderMetrics(core.leader_metrics().await.map(Box::new)),
                // Answered above; a learner never receives it.
                Rpc::JoinAsLearner { .. } => Reply::Joined(Err(None)),
                Rpc::SaslAuthenticate { .. } => Reply::Sasl(Err("out of turn".into())),
                Rpc::AddVoter { node } => Reply::VotersChanged(core.change_voters(node, true).await),
                Rpc::RemoveVoter { node } => Reply::VotersChanged(core.change_voters(node, false).await),
                Rpc::BrokerHeartbeat {
                    broker,
                    applied,
                    shutting_down,
                    log_dir_offline,
                } => Reply::Heartbeat(core.heartbeat(broker, applied, shutting_down, log_dir_offline).await),
            }
        };
        let reply = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            reply = timeout(HANDLE_TIMEOUT, handled) => reply.map_err(|_| FrameError::TimedOut {
                what: "answer from the local raft",
                ms: HANDLE_TIMEOUT.as_millis(),
            })?,
        };
        let frame = encode_frame(&reply, limits.frame_bytes_max)?;
        write_frame(&mut stream, &frame, limits.io_timeout).await?;
    }
}

/// The leader's metrics and the index it knows committed.
pub(super) type LeaderMetrics = (openraft::RaftMetrics<u64, BasicNode>, Option<u64>);

/// How long a learner waits before dialing the next voter after a refusal or failure.
const LEARNER_RETRY: Duration = Duration::from_millis(200);
/// How often a controller of a dynamic quorum checks that the membership holds it.
const CONTROLLER_JOIN_CHECK: Duration = Duration::from_secs(1);

/// Which node a learner dials next to find the leader: the leader named last, else the one
/// its raft knows (unless that one just failed), else the next of `targets` in turn.
struct Dialer {
    targets: Vec<(u64, String)>,
    next: usize,
    hint: Option<(u64, Option<String>)>,
    /// The node last tried in vain or whose link just ended: this node's raft may still call
    /// it leader (nothing told it otherwise), so it is not dialed again at once.
    avoid: Option<u64>,
}

impl Dialer {
    fn new(targets: Vec<(u64, String)>) -> Dialer {
        Dialer {
            targets,
            next: 0,
            hint: None,
            avoid: None,
        }
    }

    fn pick(&mut self, raft: &Raft<TypeConfig>) -> Option<(u64, String)> {
        let known = raft.metrics().borrow().current_leader;
        let candidate = self
            .hint
            .take()
            .or_else(|| known.filter(|id| Some(*id) != self.avoid).map(|id| (id, None)));
        if let Some((id, address)) = candidate {
            let address = address
                .or_else(|| self.targets.iter().find(|(t, _)| *t == id).map(|(_, a)| a.clone()))
                .or_else(|| {
                    super::membership_node(raft, id)
                        .map(|node| node.addr)
                        .filter(|addr| addr != LEARNER_ADDRESS)
                });
            if let Some(address) = address {
                return Some((id, address));
            }
        }
        if self.targets.is_empty() {
            return None;
        }
        self.next = (self.next + 1) % self.targets.len();
        self.targets.get(self.next).cloned()
    }

    /// `to` refused, naming `leader` (at `address`, when it said).
    fn refused(&mut self, to: u64, leader: Option<u64>, address: Option<String>) {
        self.avoid = Some(to);
        self.hint = leader.filter(|l| *l != to).map(|l| (l, address));
    }
}

/// What a node asked to take this one as a learner answered.
enum Joined {
    /// Accepted by the leader (its id): the connection to serve its RPCs on (a broker-only
    /// node's link; a controller is dialed at its own listener instead).
    Accepted(PeerStream, u64),
    /// Refused by a node that does not lead: the leader it knows, and that leader's address
    /// when it said it.
    Refused(Option<u64>, Option<String>),
}

/// Asks node `to` (`ANY_NODE`: a bootstrap server) at `address` to take this node (`node`) as
/// a learner, at `own_address` for a controller.
async fn join(
    address: &str,
    to: u64,
    node: u64,
    own_address: Option<String>,
    limits: &NetworkLimits,
) -> Result<Joined, FrameError> {
    let frame = encode_frame(
        &RequestFrame {
            to,
            rpc: Rpc::JoinAsLearner {
                node,
                address: own_address,
            },
        },
        limits.frame_bytes_max,
    )?;
    let mut stream = dial(address, to, limits).await?;
    write_frame(&mut stream, &frame, limits.io_timeout).await?;
    let reply = read_frame::<_, Reply>(
        &mut stream,
        limits.frame_bytes_max,
        limits.io_timeout,
        limits.io_timeout,
    )
    .await?
    .ok_or(FrameError::Closed)?;
    Ok(match reply {
        Reply::Joined(Ok(())) => Joined::Accepted(stream, to),
        Reply::JoinedBy { leader } => Joined::Accepted(stream, leader),
        Reply::Joined(Err(leader)) => Joined::Refused(leader, None),
        Reply::JoinRefused { leader, address } => Joined::Refused(leader, address),
        _ => Joined::Refused(None, None),
    })
}

/// The address a learner is recorded at in the membership: it has none (the leader reaches it
/// over the connection it dialed, `Links`).
pub(super) const LEARNER_ADDRESS: &str = "";

/// On the leader: the connection each learner dialed, taken by the learner's `PeerClient`.
pub(super) type Links = Arc<Mutex<HashMap<u64, PeerStream>>>;

/// One request to node `to` at `address` on a connection of its own (a broker's forwarded
/// proposal or heartbeat: rare, so not worth a pooled connection), bounded by `io_timeout` for
/// the connect and the writes and by the handling bound for the answer.
pub(super) async fn forward(address: &str, to: u64, rpc: Rpc, limits: &NetworkLimits) -> Result<Reply, FrameError> {
    let frame = encode_frame(&RequestFrame { to, rpc }, limits.frame_bytes_max)?;
    let mut stream = dial(address, to, limits).await?;
    write_frame(&mut stream, &frame, limits.io_timeout).await?;
    read_frame::<_, Reply>(
        &mut stream,
        limits.frame_bytes_max,
        HANDLE_TIMEOUT + limits.io_timeout,
        limits.io_timeout,
    )
    .await?
    .ok_or(FrameError::Closed)
}

/// Makes the clients openraft sends RPCs through.
pub(super) struct NetworkFactory {
    pub(super) limits: NetworkLimits,
    pub(super) links: Links,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            address: node.addr.clone(),
            stream: None,
            limits: self.limits.clone(),
            link: (node.addr == LEARNER_ADDRESS).then(|| self.links.clone()),
        }
    }
}

/// The client of one peer.
pub(super) struct PeerClient {
    target: u64,
    address: String,
    stream: Option<PeerStream>,
    limits: NetworkLimits,
    /// For a learner: where the connection it dialed is found (it has no address).
    link: Option<Links>,
}

/// Why an RPC failed on our side of the wire.
#[derive(Debug, thiserror::Error)]
enum CallError {
    /// Not connected: openraft backs off before the next try.
    #[error("cannot connect to {address}: {source}")]
    Unreachable { address: String, source: FrameError },
    /// Connected, then the exchange failed: openraft may retry at once (on a new connection).
    #[error("RPC to {address} failed: {source}")]
    Network { address: String, source: FrameError },
    #[error("{address} is node {node}, not node {target}")]
    WrongNode { address: String, node: u64, target: u64 },
    #[error("{address} answered a {asked} request with another kind of reply")]
    UnexpectedReply { address: String, asked: &'static str },
    /// The request itself exceeds `frame_bytes_max`.
    #[error(transparent)]
    TooLarge(FrameError),
}

impl CallError {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<u64, BasicNode, E> {
        match self {
            CallError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&self)),
            _ => RPCError::Network(NetworkError::new(&self)),
        }
    }
}

impl PeerClient {
    /// Sends one request and reads its reply, all within `ttl`.
    async fn call(&mut self, rpc: Rpc, ttl: Duration) -> Result<Reply, CallError> {
        let asked = match rpc {
            Rpc::AppendEntries(_) => "AppendEntries",
            Rpc::Vote(_) => "Vote",
            Rpc::InstallSnapshot(_) => "InstallSnapshot",
            Rpc::Propose(_) => "Propose",
            Rpc::JoinAsLearner { .. } => "JoinAsLearner",
            Rpc::AddVoter { .. } => "AddVoter",
            Rpc::RemoveVoter { .. } => "RemoveVoter",
            Rpc::LeaderMetrics => "LeaderMetrics",
            Rpc::BrokerHeartbeat { .. } => "BrokerHeartbeat",
            Rpc::SaslAuthenticate { .. } => "SaslAuthenticate",
        };
        let request = RequestFrame { to: self.target, rpc };
        let frame = encode_frame(&request, self.limits.frame_bytes_max).map_err(CallError::TooLarge)?;
        let limits = self.limits.clone();
        let address = self.address.clone();
        let network = |source| CallError::Network {
            address: address.clone(),
            source,
        };
        if let Some(links) = &self.link {
            // A learner's newest connection replaces the one held (it dialed again).
            if let Some(fresh) = links.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.target) {
                self.stream = Some(fresh);
            }
            if self.stream.is_none() {
                return Err(CallError::Unreachable {
                    address: format!("learner {}", self.target),
                    source: FrameError::Closed,
                });
            }
        }
        let exchange = async {
            let mut stream = match self.stream.take() {
                Some(stream) => stream,
                None => {
                    dial(address.as_str(), self.target, &limits)
                        .await
                        .map_err(|source| CallError::Unreachable {
                            address: address.clone(),
                            source,
                        })?
                }
            };
            write_frame(&mut stream, &frame, limits.io_timeout)
                .await
                .map_err(network)?;
            let reply = read_frame::<_, Reply>(
                &mut stream,
                limits.frame_bytes_max,
                limits.io_timeout,
                limits.io_timeout,
            )
            .await
            .map_err(network)?
            .ok_or_else(|| network(FrameError::Closed))?;
            Ok((stream, reply))
        };
        let (stream, reply) = timeout(ttl, exchange).await.map_err(|_| CallError::Network {
            address: self.address.clone(),
            source: FrameError::TimedOut {
                what: "reply",
                ms: ttl.as_millis(),
            },
        })??;
        let expected = matches!(
            (&reply, asked),
            (Reply::AppendEntries(_), "AppendEntries")
                | (Reply::Vote(_), "Vote")
                | (Reply::InstallSnapshot(_), "InstallSnapshot")
        );
        if !expected {
            // The connection is dropped with `stream`: this peer is not the one we want.
            return Err(match reply {
                Reply::WrongNode { node } => CallError::WrongNode {
                    address: self.address.clone(),
                    node,
                    target: self.target,
                },
                _ => CallError::UnexpectedReply {
                    address: self.address.clone(),
                    asked,
                },
            });
        }
        // Only a completed exchange leaves the connection reusable.
        self.stream = Some(stream);
        Ok(reply)
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let entries = rpc.entries.len() as u64;
        match self.call(Rpc::AppendEntries(rpc), option.hard_ttl()).await {
            Ok(Reply::AppendEntries(Ok(response))) => Ok(response),
            Ok(Reply::AppendEntries(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            // Openraft resends fewer entries at once (one that alone is too large is unreachable).
            Err(CallError::TooLarge(e)) => Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((entries / 2).max(1)).with_source_error(&e),
            )),
            Err(e) => Err(e.into_rpc()),
            Ok(_) => Err(unexpected(&self.address, "AppendEntries")),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        match self.call(Rpc::Vote(rpc), option.hard_ttl()).await {
            Ok(Reply::Vote(Ok(response))) => Ok(response),
            Ok(Reply::Vote(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Err(e) => Err(e.into_rpc()),
            Ok(_) => Err(unexpected(&self.address, "Vote")),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        match self.call(Rpc::InstallSnapshot(rpc), option.hard_ttl()).await {
            Ok(Reply::InstallSnapshot(Ok(response))) => Ok(response),
            Ok(Reply::InstallSnapshot(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Err(e) => Err(e.into_rpc()),
            Ok(_) => Err(unexpected(&self.address, "InstallSnapshot")),
        }
    }
}

fn unexpected<E: std::error::Error>(address: &str, asked: &'static str) -> RPCError<u64, BasicNode, E> {
    CallError::UnexpectedReply {
        address: address.to_string(),
        asked,
    }
    .into_rpc()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(1);

    async fn read(bytes: &[u8], max: usize) -> Result<Option<serde_json::Value>, FrameError> {
        let mut reader = bytes;
        read_frame(&mut reader, max, LIMIT, LIMIT).await
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_errors() {
        let frame = encode_frame(&serde_json::json!({"a": [1, 2]}), 100).unwrap();
        assert_eq!(read(&frame, 100).await.unwrap(), Some(serde_json::json!({"a": [1, 2]})));
        assert!(read(&[], 100).await.unwrap().is_none(), "a clean end of stream");
        // A length past the bound is refused before its body is read or allocated.
        assert!(matches!(
            read(&[0xff, 0xff, 0xff, 0xff], 100).await,
            Err(FrameError::TooLarge { len: 0xffff_ffff, .. })
        ));
        // Cut anywhere after the first byte: an error, not a hang (the reader sees EOF).
        for cut in 1..frame.len() {
            assert!(read(&frame[..cut], 100).await.is_err(), "cut at {cut}");
        }
        let mut garbage = vec![0, 0, 0, 3];
        garbage.extend_from_slice(b"{{{");
        assert!(matches!(read(&garbage, 100).await, Err(FrameError::Malformed(_))));
        assert!(matches!(
            encode_frame(&"x".repeat(200), 100),
            Err(FrameError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_silent_peer_times_out() {
        let (mut client, _server) = tokio::io::duplex(64);
        let started = std::time::Instant::now();
        let read = read_frame::<_, serde_json::Value>(&mut client, 100, Duration::from_millis(50), LIMIT).await;
        assert!(matches!(read, Err(FrameError::TimedOut { .. })));
        assert!(started.elapsed() < LIMIT);
    }
}
