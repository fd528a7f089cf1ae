//! Sluice: a message broker that speaks the Apache Kafka wire protocol.
//!
//! `Broker::start` runs a broker in the current tokio runtime (the binary and the tests use it);
//! see DESIGN.md for the module map.

pub mod acl;
pub mod api;
pub mod blocking;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod crc;
pub mod error;
pub mod log;
pub mod meta_properties;
pub mod metrics;
pub mod quota;
pub mod replica;
pub mod sasl;
pub mod server;
pub mod share;
pub mod tls;
pub mod verbosity;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpSocket;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::Ctx;
use crate::cluster::raft::{MetadataQuorum, QuorumConfig};
use crate::cluster::{BrokerInfo, Controller, Endpoint, MetadataRecord};
use crate::config::{BrokerConfig, Listener};
use crate::coordinator::GroupCoordinator;
use crate::coordinator::transactions::TransactionCoordinator;
use crate::replica::ReplicaManager;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Storage(#[from] error::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    #[error("the metadata quorum: {0}")]
    Quorum(#[from] cluster::raft::QuorumError),
    #[error(transparent)]
    Meta(#[from] meta_properties::MetaError),
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
}

/// This broker as the metadata names it to clients and brokers: its advertised endpoints
/// (resolved by `Broker::start`) and rack.
fn this_broker(config: &BrokerConfig) -> BrokerInfo {
    let mut endpoints: Vec<Endpoint> = config
        .advertised_listeners
        .iter()
        .map(|l| Endpoint {
            name: l.name.clone(),
            host: l.host.clone(),
            port: i32::from(l.port),
        })
        .collect();
    if endpoints.is_empty() {
        let (host, port) = api::metadata::split_host_port(config.advertised());
        let name = config.client_listeners().swap_remove(0).0;
        endpoints.push(Endpoint { name, host, port });
    }
    BrokerInfo {
        id: config.node_id,
        endpoints,
        rack: config.broker_rack.clone(),
        fenced: false,
        log_dir_offline: false,
        cordoned: !config.cordoned_log_dirs.is_empty(),
    }
}

/// Starts this node's controller of the metadata quorum, forms the quorum if this node is
/// the one to (an empty log, the lowest voter id), then registers this broker: start-up waits
/// until a majority of the voters is up and has agreed on the registration, as a Kafka broker
/// waits for the controller quorum, so partitions open against up-to-date metadata.
///
/// `unclean_restart` (the static `log.flush.interval.messages`, after a stop without the clean
/// marker) goes with the registration: the controller then takes this broker out of the
/// eligible leader replicas it may not deserve (`MetadataImage::forget_unflushed_eligibility`).
async fn start_quorum(
    config: &BrokerConfig,
    this: BrokerInfo,
    unclean_restart: Option<i64>,
) -> Result<Controller, StartError> {
    let (quorum, _) = open_quorum(config, this.id).await?;
    let registration = this.registration(unclean_restart);
    let mut waited = 0u64;
    loop {
        match register(&quorum, &registration).await {
            Ok(()) => break,
            Err(e) => {
                waited += 1;
                if waited % 20 == 1 {
                    tracing::warn!(error = %e, "waiting for the metadata quorum to register this broker");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    tracing::info!(node_id = this.id, leader = ?quorum.leader(), "registered with the metadata quorum");
    Ok(Controller::with_quorum(quorum))
}

/// Starts this node's part of the metadata quorum: a voter on its controller listener (whose
/// bound address is returned), or for a broker-only node a learner that dials the leader.
async fn open_quorum(
    config: &BrokerConfig,
    node_id: i32,
) -> Result<(Arc<MetadataQuorum>, Option<SocketAddr>), StartError> {
    let listener = match (config.process_roles.controller, &config.controller_listen) {
        (true, Some(listen)) => {
            let listen_error = |source| StartError::Listen {
                addr: listen.clone(),
                source,
            };
            Some(
                bind(listen)
                    .await
                    .map_err(listen_error)?
                    .listen(LISTEN_BACKLOG)
                    .map_err(listen_error)?,
            )
        }
        _ => None,
    };
    // A dynamic quorum (KIP-853) starts from the voters `sluice format` recorded, if any;
    // afterwards its voters are in the log.
    let voters = match config.dynamic_quorum() {
        false => config
            .controller_quorum_voters
            .iter()
            .map(|(id, address)| (*id as u64, address.clone()))
            .collect(),
        true => cluster::raft::formatted_voters(&config.data_dir)?,
    };
    let election = config.controller_quorum_election_timeout_ms;
    let quorum_config = QuorumConfig {
        election_timeout_min_ms: election,
        election_timeout_max_ms: 2 * election,
        heartbeat_interval_ms: (election / 5).max(10),
        propose_timeout_ms: QUORUM_PROPOSE_TIMEOUT_MS,
        bootstrap_servers: config.controller_quorum_bootstrap_servers.clone(),
        controller_address: config
            .process_roles
            .controller
            .then(|| config.controller_address())
            .flatten(),
        security: Arc::new(cluster::raft::ControllerSecurity::new(config)?),
        ..Default::default()
    };
    let bound = listener.as_ref().and_then(|l| l.local_addr().ok());
    let quorum = MetadataQuorum::start(node_id as u64, &config.data_dir, voters, listener, quorum_config).await?;
    quorum.initialize().await?;
    Ok((Arc::new(quorum), bound))
}

/// A controller-only node (`process.roles=controller`): a voter of the metadata quorum with
/// only its controller listener. It registers no broker, hosts no partition and serves no
/// client; while it leads it does the leader's duties (fencing silent brokers).
async fn start_controller_only(config: BrokerConfig) -> Result<BrokerHandle, StartError> {
    log::checkpoint::create_dir_durably(&config.data_dir)?;
    meta_properties::check_node(&config.data_dir, config.node_id)?;
    let (quorum, bound) = open_quorum(&config, config.node_id).await?;
    let addr = bound.ok_or_else(|| StartError::Listen {
        addr: config.controller_listen.clone().unwrap_or_default(),
        source: std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no controller listener bound"),
    })?;
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "sluice controller started (process.roles=controller)");
    let config = Arc::new(config);
    let shutdown = CancellationToken::new();
    let duties = tokio::spawn(broker_lifecycle(quorum.clone(), config, None, shutdown.clone()));
    let quorum_handle = quorum.clone();
    let stopped = tokio::spawn(async move {
        let _ = duties.await;
        if let Err(e) = quorum.shutdown().await {
            tracing::warn!(error = %e, "stopping the metadata quorum");
        }
        tracing::info!("sluice controller stopped cleanly");
    });
    Ok(BrokerHandle {
        addr,
        metrics_addr: None,
        shutdown,
        stopped,
        lifecycle: None,
        quorum: Some(quorum_handle),
    })
}

/// How often a cluster node looks for partitions it leads whose storage started failing, to
/// hand them to another in-sync replica (`ReplicaManager::hand_over_failing`).
const HAND_OVER_CHECK: Duration = Duration::from_millis(250);

/// How long a metadata change waits for the quorum before the client gets REQUEST_TIMED_OUT
/// (below the clients' default request timeout of 30 s).
const QUORUM_PROPOSE_TIMEOUT_MS: u64 = 10_000;

/// Registers (or registers again) this broker and waits until this node has applied it.
async fn register(quorum: &MetadataQuorum, registration: &MetadataRecord) -> Result<(), error::Error> {
    let offset = quorum.submit(registration.clone()).await?;
    quorum.wait_applied(offset).await.map(drop)
}

/// A cluster node's broker side of the quorum (Kafka's BrokerLifecycleManager): heartbeats to
/// the leader every `broker.heartbeat.interval.ms`, registering again when the leader does not
/// know it; and, while this node leads the quorum, the leader's duties (fencing brokers past
/// `broker.session.timeout.ms`). Each heartbeat says whether `log_dir` is offline, and a
/// change is sent at once rather than at the next interval (KIP-858's `OfflineLogDirs`).
///
/// A controller-only node runs only the leader's duties: it is no broker.
async fn broker_lifecycle(
    quorum: Arc<MetadataQuorum>,
    config: Arc<BrokerConfig>,
    log_dir: Option<Arc<replica::log_dir::LogDirHealth>>,
    shutdown: CancellationToken,
) {
    let this = this_broker(&config);
    let session = Duration::from_millis(config.broker_session_timeout_ms);
    let heartbeat_every = Duration::from_millis(config.broker_heartbeat_interval_ms);
    let tick = heartbeat_every.min(Duration::from_millis(250));
    let mut leader_since = None;
    let mut last_heartbeat = tokio::time::Instant::now() - heartbeat_every;
    // The log directory's state as the leader last took it (a registration records it online).
    let mut reported_offline = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        quorum
            .leader_duties(
                session,
                (config.unclean_leader_election_enable, config.min_insync_replicas),
                config
                    .auto_leader_rebalance_enable
                    .then(|| Duration::from_secs(config.leader_imbalance_check_interval_seconds)),
                &mut leader_since,
            )
            .await;
        let offline = log_dir.as_ref().is_some_and(|d| d.is_offline());
        let changed = reported_offline != offline;
        if !config.process_roles.broker || (last_heartbeat.elapsed() < heartbeat_every && !changed) {
            continue;
        }
        last_heartbeat = tokio::time::Instant::now();
        // Bounded by the heartbeat interval: a heartbeat to a leader that stopped answering
        // (a paused process keeps accepting connections) must not hold back this node's own
        // leader duties, which fence that leader once this node leads the quorum.
        let beat = async {
            match quorum.heartbeat(this.id, offline).await {
                Ok(true) => reported_offline = offline,
                Ok(false) => {
                    reported_offline = false;
                    if let Err(e) = register(&quorum, &this.registration(None)).await {
                        tracing::warn!(error = %e, "registering this broker again");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "broker heartbeat"),
            }
        };
        if tokio::time::timeout(heartbeat_every.max(tick), beat).await.is_err() {
            tracing::debug!("broker heartbeat: no answer within the heartbeat interval");
        }
    }
}

/// How long a stopping broker tries to have the controller fence it (controlled shutdown)
/// before it stops anyway: a few of the quorum's elections.
const CONTROLLED_SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// A cluster node's broker lifecycle task, stopped before a controlled shutdown so that no
/// ordinary heartbeat can unfence the broker after it asked to be fenced.
struct Lifecycle {
    quorum: Arc<MetadataQuorum>,
    broker: i32,
    controlled_shutdown: bool,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// A running broker.
pub struct BrokerHandle {
    /// The address the listener is bound to (useful with port 0).
    pub addr: SocketAddr,
    /// The address `/metrics` is served on (`metrics.listen`), if any.
    pub metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    stopped: tokio::task::JoinHandle<()>,
    lifecycle: Option<Lifecycle>,
    /// A cluster node's metadata quorum member (`failed`).
    quorum: Option<Arc<MetadataQuorum>>,
}

impl BrokerHandle {
    /// Resolves when this node can no longer follow the cluster's metadata: its metadata log
    /// failed (a storage fault other than a full disk, which it waits out). The node should
    /// then stop, as Kafka halts a broker whose metadata log directory fails: serving an image
    /// frozen at the fault, it would go on believing it leads partitions that have moved.
    /// Never resolves on a single node (whose partitions and metadata report storage errors
    /// per request) or while the quorum runs.
    pub async fn failed(&self) -> String {
        match &self.quorum {
            Some(quorum) => quorum.failed().await,
            None => std::future::pending().await,
        }
    }

    /// Clean shutdown: in a cluster, have the controller fence this broker first
    /// (`controlled.shutdown.enable`, Kafka's controlled shutdown), then stop accepting, answer
    /// what is in flight, flush, write checkpoints.
    pub async fn shutdown(self) {
        if let Some(lifecycle) = self.lifecycle {
            lifecycle.stop.cancel();
            let _ = lifecycle.task.await;
            if lifecycle.controlled_shutdown {
                match lifecycle
                    .quorum
                    .controlled_shutdown(lifecycle.broker, CONTROLLED_SHUTDOWN_WAIT)
                    .await
                {
                    Ok(()) => tracing::info!(
                        broker = lifecycle.broker,
                        "controlled shutdown: the controller fenced this broker"
                    ),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "controlled shutdown failed; stopping anyway (broker.session.timeout.ms will fence this broker)"
                    ),
                }
            }
        }
        self.shutdown.cancel();
        let _ = self.stopped.await;
    }
}

/// This machine's host name (what Kafka advertises for a wildcard listener).
fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

pub struct Broker;

/// Pending connections the kernel queues before the broker accepts them (Linux caps it at
/// net.core.somaxconn).
const LISTEN_BACKLOG: u32 = 1024;

/// Binds `listen` (host:port, resolved) without listening yet; SO_REUSEADDR as tokio's
/// `TcpListener::bind` sets it, so a restarted broker can take its port back at once.
async fn bind(listen: &str) -> std::io::Result<TcpSocket> {
    let mut last = None;
    for addr in tokio::net::lookup_host(listen).await? {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return Ok(socket),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::AddrNotAvailable, "no address to bind")))
}

impl Broker {
    /// Recovers the data directory and starts serving.
    pub async fn start(mut config: BrokerConfig) -> Result<BrokerHandle, StartError> {
        config.check()?;
        if !config.process_roles.broker {
            return start_controller_only(config).await;
        }
        // Certificates and keys are read first: a bad one stops start-up before anything else.
        let mut tls_acceptors = std::collections::BTreeMap::new();
        let mut sasl_listeners = std::collections::BTreeMap::new();
        for (name, _) in config.client_listeners() {
            let protocol = config.security_protocol(&name);
            if matches!(protocol, Some(config::SSL_PROTOCOL | config::SASL_SSL)) {
                let tls = tls::listener(&config, &name, protocol == Some(config::SASL_SSL))?;
                tls_acceptors.insert(name.clone(), Arc::new(tls));
            }
            if matches!(protocol, Some(config::SASL_PLAINTEXT | config::SASL_SSL)) {
                sasl_listeners.insert(name.clone(), Arc::new(sasl::ListenerSasl::new(&config, &name)?));
            }
        }
        log::checkpoint::create_dir_durably(&config.data_dir)?;
        meta_properties::check_node(&config.data_dir, config.node_id)?;
        // Taken now: a stop from here on is unclean until the next clean stop marks it.
        let clean_start = meta_properties::take_clean_shutdown(&config.data_dir)?;
        // The port is taken now (its number is advertised), but connections are accepted only
        // once every partition is open and the coordinators are loaded, as Kafka starts its
        // acceptors last: a client connecting during recovery is refused and retries, instead
        // of waiting unanswered behind thousands of partitions being opened.
        let mut sockets = Vec::new();
        for (name, listen) in config.client_listeners() {
            let listen_error = |source| StartError::Listen {
                addr: listen.clone(),
                source,
            };
            let socket = bind(&listen).await.map_err(listen_error)?;
            let addr = socket.local_addr().map_err(listen_error)?;
            sockets.push((name, listen, socket, addr));
        }
        // Each listener is advertised at its `advertised.listeners` entry, else at its own
        // address. Clients cannot connect to 0.0.0.0: like Kafka, that advertises this host's
        // name instead (and with an ephemeral port, the real one).
        let advertised: Vec<Listener> = sockets
            .iter()
            .map(
                |(name, _, _, addr)| match config.advertised_listeners.iter().find(|l| l.name == *name) {
                    Some(entry) => entry.clone(),
                    None => Listener {
                        name: name.clone(),
                        host: if addr.ip().is_unspecified() {
                            local_hostname()
                        } else {
                            addr.ip().to_string()
                        },
                        port: addr.port(),
                    },
                },
            )
            .collect();
        config.advertise = advertised.first().map(|l| format!("{}:{}", l.host, l.port));
        config.advertised_listeners = advertised;
        let addr = sockets.first().map(|s| s.3).ok_or_else(|| StartError::Listen {
            addr: config.listen.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no listener for clients"),
        })?;
        let config = Arc::new(config);
        let this = this_broker(&config);
        let controller = Arc::new(if config.cluster_mode() {
            let unclean_restart = (!clean_start).then_some(config.log_flush_interval_messages);
            start_quorum(&config, this, unclean_restart).await?
        } else {
            Controller::open(&config.data_dir, this)?
        });
        // A single node is its own active controller: it writes what eligible leader replicas
        // need as a cluster's does (`MetadataQuorum::leader_duties`).
        if !config.cluster_mode() && controller.image().elr_enabled() {
            controller.ensure_elr_safety(config.min_insync_replicas).await?;
        }
        // A node that replayed another cluster's metadata stops here, before it serves this
        // directory's partitions as that cluster's.
        meta_properties::check_cluster(&config.data_dir, config.node_id, &controller.image().cluster_id)?;
        let replicas = Arc::new(ReplicaManager::new(config.clone()));
        replicas.set_controller(&controller);
        replicas.remove_stray_dirs();
        replicas
            .start_applier(controller.subscribe())
            .map_err(|e| error::Error::storage("start the replica-manager thread in", &config.data_dir, e))?;
        // The first apply also makes the stored dynamic broker configs (KIP-226) live, before
        // any partition opens: `config.live()` is what every part of the broker reads.
        if let Err(e) = replicas.catch_up(&controller.image()) {
            // Kafka starts with a failed log directory offline rather than not at all: those
            // partitions are reported without a leader, the rest are served.
            tracing::error!(error = %e, "some partitions are offline: their storage failed to open");
        }
        replicas.forget_high_watermark_hints();
        tracing::info!(%addr, advertised = config.advertised(), data_dir = %config.data_dir.display(), "sluice broker started");
        let coordinator = Arc::new(GroupCoordinator::new(
            config.clone(),
            controller.clone(),
            replicas.clone(),
        ));
        coordinator.load()?;
        // After the groups: finishing a transaction settles its offsets in them.
        let transactions = Arc::new(TransactionCoordinator::new(
            config.clone(),
            controller.clone(),
            replicas.clone(),
            coordinator.clone(),
        ));
        transactions.load()?;
        let controller_for_share = controller.clone();
        let ctx = Arc::new(Ctx {
            listener: Arc::from(sockets[0].0.as_str()),
            principal: Arc::from(sasl::ANONYMOUS),
            host: Arc::from(""),
            authorizer: Arc::new(acl::Authorizer::new(&config)),
            config: config.clone(),
            controller,
            replicas: replicas.clone(),
            coordinator: coordinator.clone(),
            transactions: transactions.clone(),
            metrics: replicas.metrics.clone(),
            quotas: Arc::new(quota::QuotaManager::new(quota::Windows {
                count: config.quota_window_num,
                span: std::time::Duration::from_secs(config.quota_window_size_seconds.into()),
            })),
            // Replaced per connection (`server::connection`).
            appends: Default::default(),
            share: share::ShareManager::new(config.clone(), controller_for_share, coordinator.clone()),
            connection: 0,
        });
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        // Credentials of `sluice format --add-scram`: recorded before the listeners open on a
        // single node; on a cluster once the quorum takes them (retried in the background).
        let scram = sasl::bootstrap::pending(&config.data_dir)?;
        if !scram.is_empty() {
            let cluster = ctx.controller.quorum().is_some();
            let apply = sasl::bootstrap::apply(
                ctx.controller.clone(),
                config.data_dir.clone(),
                scram,
                cluster,
                shutdown.child_token(),
            );
            match cluster {
                false => apply.await?,
                true => drop(tokio::spawn(apply)),
            }
        }
        let lifecycle = ctx.controller.quorum().map(|quorum| {
            let stop = shutdown.child_token();
            Lifecycle {
                quorum: quorum.clone(),
                broker: config.node_id,
                controlled_shutdown: config.controlled_shutdown_enable,
                stop: stop.clone(),
                task: tokio::spawn(broker_lifecycle(
                    quorum.clone(),
                    config.clone(),
                    Some(replicas.log_dir.clone()),
                    stop,
                )),
            }
        });
        if ctx.controller.image().cluster_id.is_empty() {
            // A new quorum records its id once its first leader is elected: meta.properties
            // gets it then.
            let mut images = ctx.controller.subscribe();
            let config = config.clone();
            tokio::spawn(async move {
                let id = match images.wait_for(|image| !image.cluster_id.is_empty()).await {
                    Ok(image) => image.cluster_id.clone(),
                    Err(_) => return,
                };
                let checked = tokio::task::spawn_blocking(move || {
                    meta_properties::check_cluster(&config.data_dir, config.node_id, &id)
                })
                .await;
                if let Ok(Err(e)) = checked {
                    tracing::error!(error = %e, "recording the cluster id");
                }
            });
        }
        tokio::spawn({
            // Log retention (Kafka's log.retention.check.interval.ms task).
            let shutdown = shutdown.clone();
            let interval = Duration::from_millis(config.log_retention_check_interval_ms);
            let replicas = replicas.clone();
            let controller = ctx.controller.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(interval) => {
                            let replicas = replicas.clone();
                            let image = controller.image();
                            let _ = tokio::task::spawn_blocking(move || replicas.apply_retention(&image)).await;
                        }
                    }
                }
            }
        });
        if config.log_cleaner_enable {
            // Log compaction (Kafka's LogCleaner thread), on a blocking thread;
            // `log.cleaner.backoff.ms` is dynamic, so it is read at each round.
            let shutdown = shutdown.clone();
            let config = config.clone();
            let replicas = replicas.clone();
            let controller = ctx.controller.clone();
            tokio::spawn(async move {
                loop {
                    let interval = Duration::from_millis(config.live().log_cleaner_backoff_ms);
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(interval) => {
                            let replicas = replicas.clone();
                            let image = controller.image();
                            let _ = tokio::task::spawn_blocking(move || replicas.clean_compacted(&image)).await;
                        }
                    }
                }
            });
        }
        if config.cluster_mode() {
            // Kafka's highwatermark-checkpoint task.
            let shutdown = shutdown.clone();
            let every = Duration::from_millis(config.replica_high_watermark_checkpoint_interval_ms);
            let replicas = replicas.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(every) => {}
                    }
                    let replicas = replicas.clone();
                    let _ = tokio::task::spawn_blocking(move || replicas.checkpoint_high_watermarks()).await;
                }
            });
        }
        tokio::spawn({
            // Kafka's isr-expiration task: every half `replica.lag.time.max.ms`, each leader
            // proposes dropping the followers that have not caught up for that long.
            let shutdown = shutdown.clone();
            let lag_ms = config.replica_lag_time_max_ms;
            let replicas = replicas.clone();
            async move {
                // A partition whose storage starts failing here is handed over within
                // HAND_OVER_CHECK rather than at the next pass.
                let every = Duration::from_millis((lag_ms / 2).max(10));
                let mut next_pass = tokio::time::Instant::now() + every;
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(HAND_OVER_CHECK.min(every)) => {}
                    }
                    replicas.hand_over_failing();
                    if replicas.log_dir.is_offline() {
                        let replicas = replicas.clone();
                        let _ = tokio::task::spawn_blocking(move || replicas.probe_log_dir()).await;
                    }
                    if tokio::time::Instant::now() >= next_pass {
                        next_pass = tokio::time::Instant::now() + every;
                        replicas.shrink_lagging_isrs(i64::try_from(lag_ms).unwrap_or(i64::MAX));
                    }
                }
            }
        });
        tokio::spawn({
            // Idle producer ids (Kafka's producer.id.expiration.check.interval.ms task);
            // `producer.id.expiration.ms` is dynamic, so it is read at each pass.
            let shutdown = shutdown.clone();
            let interval = Duration::from_millis(config.producer_id_expiration_check_interval_ms);
            let config = config.clone();
            let replicas = replicas.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(interval) => {
                            replicas.remove_expired_producers(config.live().producer_id_expiration_ms).await
                        }
                    }
                }
            }
        });
        tokio::spawn({
            // Coordinator failover (coordinator/loading.rs): every PARTITION_CHECK_INTERVAL, or
            // at once when a request finds its partition led here but not loaded, the
            // coordinators load the internal partitions this node now leads and drop those it
            // no longer leads; transactions found in Prepare* at a load (this pass's or a
            // request's) are then finished. Loads read whole partitions, so they run on a
            // blocking thread.
            let shutdown = shutdown.clone();
            let groups = coordinator.clone();
            let transactions = transactions.clone();
            async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(coordinator::loading::PARTITION_CHECK_INTERVAL) => {}
                        _ = groups.loading_wanted() => {}
                        _ = transactions.loading_wanted() => {}
                    }
                    let (g, t) = (groups.clone(), transactions.clone());
                    let _ = tokio::task::spawn_blocking(move || {
                        // Errors are logged per partition, which the next pass tries again.
                        let _ = g.sync_partitions();
                        let _ = t.sync_partitions();
                    })
                    .await;
                    if transactions.take_loaded() {
                        transactions.finish_unfinished().await;
                    }
                }
            }
        });
        tokio::spawn({
            // Transactions: those left in Prepare* (a restart, markers that failed) are
            // finished; those past transaction.timeout.ms aborted (Kafka's
            // transaction.abort.timed.out.transaction.cleanup.interval.ms task); transactional
            // ids idle past transactional.id.expiration.ms removed.
            let shutdown = shutdown.clone();
            let abort_interval =
                Duration::from_millis(config.transaction_abort_timed_out_transaction_cleanup_interval_ms);
            let expire_interval =
                Duration::from_millis(config.transaction_remove_expired_transaction_cleanup_interval_ms);
            async move {
                transactions.finish_unfinished().await;
                let mut abort = tokio::time::interval(abort_interval);
                let mut expire = tokio::time::interval(expire_interval);
                abort.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                expire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = abort.tick() => {
                            transactions.finish_unfinished().await;
                            transactions.abort_timed_out(replica::now_ms()).await;
                        }
                        _ = expire.tick() => transactions.expire_ids(replica::now_ms()).await,
                    }
                }
            }
        });
        tokio::spawn({
            let shutdown = shutdown.clone();
            let interval = Duration::from_millis(config.offsets_retention_check_interval_ms);
            async move {
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(interval) => coordinator.expire_offsets(tokio::time::Instant::now()).await,
                    }
                }
            }
        });
        let mut metrics_addr = None;
        if !config.metrics_listen.is_empty() {
            // Prometheus' endpoint (metrics/http.rs): bound like a listener, so a taken port
            // stops start-up with its address.
            let listen = config.metrics_listen.clone();
            let listen_error = |source| StartError::Listen {
                addr: listen.clone(),
                source,
            };
            let socket = bind(&listen).await.map_err(listen_error)?;
            let listener = socket.listen(LISTEN_BACKLOG).map_err(listen_error)?;
            metrics_addr = Some(listener.local_addr().map_err(listen_error)?);
            let state = Arc::new(metrics::State {
                replicas: replicas.clone(),
                coordinator: ctx.coordinator.clone(),
                share: ctx.share.clone(),
                controller: ctx.controller.clone(),
                node_id: config.node_id,
            });
            tracing::info!(addr = %listen, bound = ?metrics_addr, "serving Prometheus metrics at /metrics");
            tokio::spawn(metrics::http::serve(
                listener,
                ctx.metrics.clone(),
                state,
                shutdown.clone(),
            ));
        }
        let mut listeners = Vec::with_capacity(sockets.len());
        for (name, listen, socket, _) in sockets {
            let listener = socket
                .listen(LISTEN_BACKLOG)
                .map_err(|source| StartError::Listen { addr: listen, source })?;
            let tls = tls_acceptors.remove(&name);
            let sasl = sasl_listeners.remove(&name);
            let ctx = Arc::new(Ctx {
                listener: Arc::from(name.as_str()),
                ..(*ctx).clone()
            });
            listeners.push(server::Listening {
                listener,
                ctx,
                tls,
                sasl,
            });
        }
        let quorum = ctx.controller.quorum().cloned();
        let stopped = tokio::spawn({
            let shutdown = shutdown.clone();
            let quorum = quorum.clone();
            async move {
                server::serve(listeners, shutdown, tracker.clone()).await;
                tracker.close();
                let grace = Duration::from_millis(config.shutdown_timeout_ms);
                if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
                    tracing::warn!("connections still busy after shutdown.timeout.ms; closing anyway");
                }
                if replicas.close_all()
                    && let Err(e) = meta_properties::mark_clean_shutdown(&config.data_dir)
                {
                    tracing::warn!(error = %e, "marking the clean shutdown (the next start counts as unclean)");
                }
                if let Some(quorum) = quorum
                    && let Err(e) = quorum.shutdown().await
                {
                    tracing::warn!(error = %e, "stopping the metadata quorum");
                }
                tracing::info!("sluice broker stopped cleanly");
            }
        });
        Ok(BrokerHandle {
            addr,
            metrics_addr,
            shutdown,
            stopped,
            lifecycle,
            quorum,
        })
    }
}
