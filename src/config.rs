//! Broker configuration: every key has a default, a parser that validates it, and Kafka's name
//! where Kafka has the same setting. The embedded default is `BrokerConfig::default()`;
//! `config.yaml` documents the same keys. Unknown or invalid keys fail start-up naming the key.
//!
//! Keys Kafka lets an operator change at runtime (KIP-226 dynamic broker configs, `dynamic` in
//! `BROKER_KEYS`) may also be set through AlterConfigs on a BROKER resource: a cluster-wide
//! default layer (empty resource name) and this broker's own layer (its node id), stored in the
//! metadata log. Precedence is Kafka's: this broker's dynamic value, the cluster default, the
//! static value (config file, flags), the default. `BrokerConfig::live` is the config as it
//! applies now; the struct's own fields stay the static settings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::log::{LogConfig, TimestampType};

/// An invalid or unknown configuration key.
#[derive(Debug, thiserror::Error)]
#[error("config key {key}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

/// `replica.selector.class`: Kafka's two `ReplicaSelector` implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// `LeaderSelector`: always the leader (as if unset).
    Leader,
    /// `RackAwareReplicaSelector`: a replica in the consumer's rack, else the leader.
    RackAware,
}

impl ReplicaSelector {
    const LEADER: &'static str = "org.apache.kafka.common.replica.LeaderSelector";
    const RACK_AWARE: &'static str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

    pub fn class_name(self) -> &'static str {
        match self {
            ReplicaSelector::Leader => Self::LEADER,
            ReplicaSelector::RackAware => Self::RACK_AWARE,
        }
    }

    fn parse(key: &str, value: &str) -> Result<Option<ReplicaSelector>, ConfigError> {
        match value.trim() {
            "" => Ok(None),
            Self::LEADER => Ok(Some(ReplicaSelector::Leader)),
            Self::RACK_AWARE => Ok(Some(ReplicaSelector::RackAware)),
            other => Err(invalid(
                key,
                format!(
                    "class {other} could not be found; Sluice serves {} and {}",
                    Self::RACK_AWARE,
                    Self::LEADER
                ),
            )),
        }
    }
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `node.id`: this broker's id in metadata responses.
    pub node_id: i32,
    /// The address the broker binds for clients: its first client listener's (the PLAINTEXT
    /// entry of `listeners` if there is one, an empty host made `0.0.0.0`), or set directly
    /// when `listeners` is not given.
    pub listen: String,
    /// The address clients of that listener are told to connect to: its entry of
    /// `advertised.listeners` (defaults to `listen`).
    pub advertise: Option<String>,
    /// `listeners` as given (`NAME://HOST:PORT,...`), empty when the key was not set. `listen`
    /// and `controller_listen` are resolved from it and `controller.listener.names` whenever
    /// either is set, so the keys may come in any order; `check` refuses what does not fit.
    pub listeners: Vec<Listener>,
    /// `advertised.listeners` as given; `advertise` is the first client listener's entry.
    pub advertised_listeners: Vec<Listener>,
    /// `listener.security.protocol.map`: each listener name's security protocol (Kafka's
    /// default maps PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL to themselves). PLAINTEXT and
    /// SSL (`crate::tls`) are served; SASL is not yet.
    pub listener_security_protocol_map: BTreeMap<String, String>,
    /// The address the quorum binds (voters connect to it): the entry of `listeners` named in
    /// `controller.listener.names`, an empty host made `0.0.0.0`.
    pub controller_listen: Option<String>,
    /// `process.roles`: what this node is: a broker-only node follows the metadata log as a
    /// learner, a controller-only node votes and serves no clients.
    pub process_roles: ProcessRoles,
    /// `controller.listener.names`: the names of the listeners that serve the quorum, not
    /// clients (upper-cased, as Kafka's `ListenerName.normalised`).
    pub controller_listener_names: Vec<String>,
    /// `controller.quorum.voters`: node id to `HOST:PORT` of its controller listener. Empty: a
    /// single node, its own controller with a local metadata log.
    pub controller_quorum_voters: BTreeMap<i32, String>,
    /// `controller.quorum.bootstrap.servers`: the controllers a node finds a dynamic quorum
    /// through (KIP-853), whose voters live in the metadata log (formed by `sluice format
    /// --standalone` or `--initial-controllers`, changed by AddRaftVoter and RemoveRaftVoter).
    pub controller_quorum_bootstrap_servers: Vec<String>,
    /// The TLS keys (`SSL_KEYS`) as set, and their per-listener overrides
    /// (`listener.name.<listener, lower case>.<key>`, Kafka's form): the SSL listeners'
    /// certificates, keys, truststores and client authentication (`crate::tls`).
    pub ssl: BTreeMap<String, String>,
    /// The SASL keys as set (`sasl.enabled.mechanisms`, and the per-listener forms
    /// `listener.name.<listener>.sasl.enabled.mechanisms` and
    /// `listener.name.<listener>.<mechanism>.sasl.jaas.config`): SASL listeners' mechanisms
    /// and JAAS lines (`crate::sasl`).
    pub sasl: BTreeMap<String, String>,
    /// `connections.max.reauth.ms` (KIP-368): a SASL session's longest life; 0: no limit.
    pub connections_max_reauth_ms: u64,
    /// `connection.failed.authentication.delay.ms`: how long a failed authentication waits
    /// before its answer and the close.
    pub connection_failed_authentication_delay_ms: u64,
    /// `sasl.server.max.receive.size`: the largest frame before SASL authentication completes.
    pub sasl_server_max_receive_size: usize,
    /// `sasl.mechanism.inter.broker.protocol`: how this node logs in to another broker's SASL
    /// inter-broker listener (Kafka's default GSSAPI is not served: set it when that listener
    /// is SASL).
    pub sasl_mechanism_inter_broker_protocol: String,
    /// `sasl.mechanism.controller.protocol`: how this node logs in to a SASL controller
    /// listener (PLAIN: SCRAM credentials live in the metadata log the controllers serve).
    pub sasl_mechanism_controller_protocol: String,
    /// `metrics.listen`: HOST:PORT of the Prometheus `/metrics` endpoint; empty: none.
    pub metrics_listen: String,
    /// `quota.window.num`: how many samples a client quota's rate is kept over (Kafka: 11).
    pub quota_window_num: u32,
    /// `quota.window.size.seconds`: each sample's span (Kafka: 1).
    pub quota_window_size_seconds: u32,
    /// `authorizer.class.name`: empty for none (every request allowed), else one of
    /// `acl::AUTHORIZER_CLASS_NAMES`, which turns on ACLs.
    pub authorizer_class_name: String,
    /// `super.users`: principals (`User:admin`) the authorizer allows everything,
    /// semicolon-separated as in Kafka.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`: a resource no ACL names is open to everyone
    /// (default false: closed).
    pub allow_everyone_if_no_acl_found: bool,
    /// `controller.quorum.election.timeout.ms`: how long a voter waits without hearing from a
    /// leader before it starts an election.
    pub controller_quorum_election_timeout_ms: u64,
    /// `broker.session.timeout.ms`: a broker whose heartbeats stop this long is fenced by the
    /// controller.
    pub broker_session_timeout_ms: u64,
    /// `replica.lag.time.max.ms`: a follower that has not caught up with its leader for this
    /// long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// `auto.leader.rebalance.enable`: the controller moves partitions back to their
    /// preferred (first) replica when it is in sync.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`: how often it looks.
    pub leader_imbalance_check_interval_seconds: u64,
    /// `replica.fetch.wait.max.ms`: how long a follower's fetch waits at the leader for data.
    pub replica_fetch_wait_max_ms: u64,
    /// `replica.fetch.max.bytes`: bytes a follower asks per partition (one larger batch still
    /// comes whole).
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: bytes a follower asks per fetch.
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: how long a follower waits after a failed fetch.
    pub replica_fetch_backoff_ms: u64,
    /// `replica.high.watermark.checkpoint.interval.ms`: how often a cluster node writes its
    /// partitions' high watermarks (`replica::hw_checkpoint`).
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// `broker.heartbeat.interval.ms`: how often a broker heartbeats to the controller.
    pub broker_heartbeat_interval_ms: u64,
    /// `controlled.shutdown.enable`: a cluster broker asks the controller to fence it before it
    /// stops, so clients and placement leave it at once rather than after its session.
    pub controlled_shutdown_enable: bool,
    /// `broker.rack`: this broker's rack, for rack-aware replica placement; none by default.
    pub broker_rack: Option<String>,
    /// `replica.selector.class` (KIP-392): how a leader picks the replica a consumer should
    /// fetch from. None (Kafka's default): the leader always; `RackAwareReplicaSelector`: a
    /// replica in the consumer's rack (`client.rack`).
    pub replica_selector: Option<ReplicaSelector>,
    /// `inter.broker.listener.name`: the listener brokers use to reach each other (its
    /// advertised endpoint is the one followers and transaction markers dial).
    pub inter_broker_listener_name: String,
    /// `log.dirs`: where partitions and the metadata log live.
    pub data_dir: PathBuf,
    /// `cordoned.log.dirs` (Kafka 4.3, KIP-1066): the log directories that take no new
    /// replicas, each `log.dirs`'s one or `*`; set statically here, or per broker dynamically
    /// (the metadata image's broker layer, which overrides this).
    pub cordoned_log_dirs: Vec<String>,
    /// `num.partitions`: partitions of an auto-created topic or a CreateTopics asking for -1.
    pub num_partitions: i32,
    /// `default.replication.factor`.
    pub default_replication_factor: i16,
    /// `auto.create.topics.enable`: Metadata creates unknown topics it is asked about.
    pub auto_create_topics_enable: bool,
    /// `socket.request.max.bytes`: a request frame larger than this closes the connection.
    pub socket_request_max_bytes: usize,
    /// `max.connections`: further connections are refused (accepted and closed) past this.
    pub max_connections: usize,
    /// `queued.max.requests`: requests (pipelined) in flight per connection before the broker
    /// stops reading from it (back-pressure).
    pub queued_max_requests: usize,
    /// `queued.max.request.bytes`: request bytes all connections together may hold (read and
    /// not yet answered); past it connections stop reading until some are answered. -1: no
    /// bound (Kafka's default); Sluice's default bounds it at 1 GiB.
    pub queued_max_request_bytes: i64,
    /// `connections.max.idle.ms`: a connection with nothing read or written for this long, and
    /// no request in flight, is closed (also in the middle of a frame); -1 for never.
    pub connections_max_idle_ms: i64,
    /// `fetch.max.bytes`: the most record bytes one Fetch response holds (and the broker reads
    /// for it), whatever the request's `max_bytes` claims; the first batch of the first
    /// non-empty partition is returned whole even when larger (KIP-74), so consumers progress.
    pub fetch_max_bytes: usize,
    /// `log.flush.interval.messages`: 1 (the default) makes acks=all wait until its records are
    /// fsynced, with fsyncs grouped across requests; any larger value acknowledges acks=all once
    /// written. Every partition is also fsynced every `log.flush.interval.ms`.
    pub log_flush_interval_messages: i64,
    /// `log.flush.interval.ms`: the background fsync period when not flushing every message.
    pub log_flush_interval_ms: i64,
    /// Topic defaults (`log.segment.bytes`, `log.roll.ms`, `message.max.bytes`, ...).
    pub log: LogConfig,
    /// `log.retention.ms`, `log.retention.bytes`: stored for topics; enforced by the retention
    /// task (not yet built: see compat-matrix.md).
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    /// `log.retention.check.interval.ms`: how often retention looks for segments to delete.
    pub log_retention_check_interval_ms: u64,
    /// `log.cleaner.enable`: whether compacted topics are cleaned.
    pub log_cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`: the pause between cleaning rounds.
    pub log_cleaner_backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: memory for the key map of one cleaning pass; a log
    /// with more distinct keys is cleaned in several passes.
    pub log_cleaner_dedupe_buffer_size: usize,
    /// `shutdown.timeout.ms`: how long a clean shutdown waits for requests in flight.
    pub shutdown_timeout_ms: u64,
    /// `group.min.session.timeout.ms`, `group.max.session.timeout.ms`: the session timeouts a
    /// JoinGroup may ask for (INVALID_SESSION_TIMEOUT outside).
    pub group_min_session_timeout_ms: u64,
    pub group_max_session_timeout_ms: u64,
    /// `group.initial.rebalance.delay.ms`: how long a group forming from empty waits for more
    /// members before its first generation.
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.max.size`: members per group (GROUP_MAX_SIZE_REACHED beyond).
    pub group_max_size: usize,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets` when it is created.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor`: replicas of each `__consumer_offsets` partition
    /// when it is created, capped at the live brokers then (Kafka refuses to create it).
    pub offsets_topic_replication_factor: i16,
    /// `offset.metadata.max.bytes`: the largest commit metadata string.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes`: how long an empty group's offsets are kept.
    pub offsets_retention_minutes: u64,
    /// `offsets.retention.check.interval.ms`: how often expired offsets are looked for.
    pub offsets_retention_check_interval_ms: u64,
    /// `group.consumer.session.timeout.ms`: a KIP-848 member silent this long leaves.
    pub group_consumer_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms`: how often KIP-848 members are told to heartbeat.
    pub group_consumer_heartbeat_interval_ms: u64,
    /// `group.consumer.max.size`: members per KIP-848 group.
    pub group_consumer_max_size: usize,
    /// `group.consumer.min.session.timeout.ms` / `max`: the bounds of a group's
    /// `consumer.session.timeout.ms` (and of the broker default above).
    pub group_consumer_min_session_timeout_ms: u64,
    pub group_consumer_max_session_timeout_ms: u64,
    /// `group.consumer.min.heartbeat.interval.ms` / `max`: the bounds of a group's
    /// `consumer.heartbeat.interval.ms`.
    pub group_consumer_min_heartbeat_interval_ms: u64,
    pub group_consumer_max_heartbeat_interval_ms: u64,
    /// `group.share.*`: share groups (KIP-932).
    pub share: ShareSettings,
    /// `group.{consumer,share}.{,min.,max.}assignment.interval.ms` (Kafka 4.3, KIP-1263).
    pub assignment_intervals: AssignmentIntervals,
    /// `producer.id.expiration.ms`: a producer id idle this long (no write, no open
    /// transaction) is forgotten by a partition; its next write may use any sequence.
    pub producer_id_expiration_ms: i64,
    /// `producer.id.expiration.check.interval.ms`: how often idle producer ids are looked for.
    pub producer_id_expiration_check_interval_ms: u64,
    /// `transaction.state.log.num.partitions`: partitions of `__transaction_state` when created.
    pub transaction_state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor`: replicas of each `__transaction_state`
    /// partition when it is created, capped at the live brokers then (Kafka refuses to create it).
    pub transaction_state_log_replication_factor: i16,
    /// `transaction.state.log.min.isr`: the `min.insync.replicas` of `__transaction_state`,
    /// capped at the replication factor it is created with.
    pub transaction_state_log_min_isr: i32,
    /// `transaction.max.timeout.ms`: the largest `transaction.timeout.ms` a producer may ask for
    /// (INVALID_TRANSACTION_TIMEOUT beyond).
    pub transaction_max_timeout_ms: i64,
    /// `transactional.id.expiration.ms`: a transactional id idle this long is forgotten.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often transactions
    /// past their timeout are looked for (and aborted).
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how often expired
    /// transactional ids are looked for.
    pub transaction_remove_expired_transaction_cleanup_interval_ms: u64,
    /// `log.cleanup.policy`: the default `cleanup.policy` of topics (delete, compact or both).
    pub log_cleanup_policy: String,
    /// `compression.type`: the default final codec of topics (`producer` keeps the producer's).
    pub compression_type: String,
    /// `log.cleaner.delete.retention.ms`: the default `delete.retention.ms` (tombstones).
    pub log_cleaner_delete_retention_ms: i64,
    /// `log.cleaner.min.compaction.lag.ms`, `log.cleaner.max.compaction.lag.ms`: the default
    /// `min.compaction.lag.ms` and `max.compaction.lag.ms`.
    pub log_cleaner_min_compaction_lag_ms: i64,
    pub log_cleaner_max_compaction_lag_ms: i64,
    /// `log.cleaner.min.cleanable.ratio`: the default `min.cleanable.dirty.ratio`.
    pub log_cleaner_min_cleanable_ratio: f64,
    /// `log.message.timestamp.before.max.ms`, `log.message.timestamp.after.max.ms`: how far
    /// a CreateTime timestamp may lie behind or ahead of the broker's clock (KIP-937).
    pub log_message_timestamp_before_max_ms: i64,
    pub log_message_timestamp_after_max_ms: i64,
    /// `min.insync.replicas`: the default of topics (stored for replication).
    pub min_insync_replicas: i32,
    /// `unclean.leader.election.enable`: the default of topics (stored for replication).
    pub unclean_leader_election_enable: bool,
    /// The keys an operator set (config file, flags): DescribeConfigs shows them as
    /// STATIC_BROKER_CONFIG, the rest as DEFAULT_CONFIG (Kafka's `originals`).
    pub static_keys: BTreeSet<String>,
    /// The dynamic layers and the config they make, shared by every clone of this config.
    pub dynamic: DynamicConfigs,
}

/// `process.roles`: Kafka's broker and controller roles of a node (KRaft).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessRoles {
    pub broker: bool,
    pub controller: bool,
}

impl std::fmt::Display for ProcessRoles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.broker, self.controller) {
            (true, true) => f.write_str("broker,controller"),
            (true, false) => f.write_str("broker"),
            (false, true) => f.write_str("controller"),
            (false, false) => Ok(()), // refused by `set`
        }
    }
}

/// The default client listener's name, the default `inter.broker.listener.name`, and the
/// security protocol without TLS or SASL.
const PLAINTEXT: &str = "PLAINTEXT";
/// Kafka's SecurityProtocol.SSL: TLS without SASL.
pub const SSL: &str = "SSL";
pub const SSL_PROTOCOL: &str = SSL;
/// Kafka's SecurityProtocol.SASL_PLAINTEXT and SASL_SSL: SASL authentication, without and
/// with TLS.
pub const SASL_PLAINTEXT: &str = "SASL_PLAINTEXT";
pub const SASL_SSL: &str = "SASL_SSL";

/// Kafka's security protocols (`SecurityProtocol`).
const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// Kafka's default `listener.security.protocol.map`: each protocol's name maps to itself.
fn default_security_protocol_map() -> BTreeMap<String, String> {
    SECURITY_PROTOCOLS
        .iter()
        .map(|p| (p.to_string(), p.to_string()))
        .collect()
}

/// One entry of `listeners` or `advertised.listeners`: Kafka's `NAME://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// PLAINTEXT or a name in `controller.listener.names`, upper-cased (`ListenerName.normalised`).
    pub name: String,
    /// As written: possibly empty (every interface), an IPv6 address in brackets.
    pub host: String,
    pub port: u16,
}

impl Listener {
    /// The address to bind: an empty host is every interface, as in Kafka.
    pub fn bind_address(&self) -> String {
        let host = if self.host.is_empty() { "0.0.0.0" } else { &self.host };
        format!("{host}:{}", self.port)
    }
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.name, self.host, self.port)
    }
}

/// The dynamic broker configs applied now, and the effective config they make: one cell
/// shared by the clones of a `BrokerConfig`, so every holder of the broker's config sees a
/// change at once. Empty until a dynamic config is applied.
#[derive(Clone, Default)]
pub struct DynamicConfigs(Arc<RwLock<Option<Arc<Layered>>>>);

/// The static config overlaid with the dynamic layers.
pub struct Layered {
    cluster_default: BTreeMap<String, String>,
    this_broker: BTreeMap<String, String>,
    config: BrokerConfig,
}

impl std::fmt::Debug for DynamicConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (cluster_default, this_broker) = self.layers();
        f.debug_struct("DynamicConfigs")
            .field("cluster_default", &cluster_default)
            .field("this_broker", &this_broker)
            .finish()
    }
}

impl DynamicConfigs {
    fn current(&self) -> Option<Arc<Layered>> {
        match self.0.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The cluster-wide default layer and this broker's layer as applied now.
    pub fn layers(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        self.current()
            .map(|l| (l.cluster_default.clone(), l.this_broker.clone()))
            .unwrap_or_default()
    }
}

/// A broker config as it applies now (see `BrokerConfig::live`).
pub enum Live<'a> {
    /// No dynamic config applies: the static config itself.
    Static(&'a BrokerConfig),
    /// The static config overlaid with the dynamic layers.
    Dynamic(Arc<Layered>),
}

impl std::ops::Deref for Live<'_> {
    type Target = BrokerConfig;
    fn deref(&self) -> &BrokerConfig {
        match self {
            Live::Static(config) => config,
            Live::Dynamic(layered) => &layered.config,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            node_id: 1,
            listen: "127.0.0.1:9092".into(),
            advertise: None,
            listeners: Vec::new(),
            advertised_listeners: Vec::new(),
            listener_security_protocol_map: default_security_protocol_map(),
            controller_listen: None,
            process_roles: ProcessRoles {
                broker: true,
                controller: true,
            },
            controller_listener_names: vec!["CONTROLLER".into()],
            controller_quorum_voters: BTreeMap::new(),
            controller_quorum_bootstrap_servers: Vec::new(),
            ssl: BTreeMap::new(),
            sasl: BTreeMap::new(),
            connections_max_reauth_ms: 0,
            connection_failed_authentication_delay_ms: 100,
            sasl_server_max_receive_size: 524_288,
            sasl_mechanism_inter_broker_protocol: crate::sasl::DEFAULT_MECHANISMS.into(),
            sasl_mechanism_controller_protocol: crate::sasl::DEFAULT_MECHANISMS.into(),
            metrics_listen: String::new(),
            quota_window_num: 11,
            quota_window_size_seconds: 1,
            authorizer_class_name: String::new(),
            super_users: Vec::new(),
            allow_everyone_if_no_acl_found: false,
            controller_quorum_election_timeout_ms: 1000,
            broker_session_timeout_ms: 9000,
            replica_lag_time_max_ms: 30_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_seconds: 300,
            replica_fetch_wait_max_ms: 500,
            replica_fetch_max_bytes: 1 << 20,
            replica_fetch_response_max_bytes: 10 << 20,
            replica_fetch_backoff_ms: 1000,
            replica_high_watermark_checkpoint_interval_ms: 5000,
            broker_heartbeat_interval_ms: 2000,
            controlled_shutdown_enable: true,
            broker_rack: None,
            replica_selector: None,
            inter_broker_listener_name: PLAINTEXT.into(),
            data_dir: PathBuf::from("./data"),
            cordoned_log_dirs: Vec::new(),
            num_partitions: 1,
            default_replication_factor: 1,
            auto_create_topics_enable: true,
            socket_request_max_bytes: 104_857_600,
            max_connections: 10_000,
            queued_max_requests: 500,
            queued_max_request_bytes: 1 << 30,
            connections_max_idle_ms: 600_000,
            fetch_max_bytes: 57_671_680,
            log_flush_interval_messages: 1,
            log_flush_interval_ms: 1000,
            log: LogConfig::default(),
            log_retention_ms: 7 * 24 * 3600 * 1000,
            log_retention_bytes: -1,
            log_retention_check_interval_ms: 300_000,
            log_cleaner_enable: true,
            log_cleaner_backoff_ms: 15_000,
            log_cleaner_dedupe_buffer_size: 128 * 1024 * 1024,
            shutdown_timeout_ms: 10_000,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_max_size: 1_000_000,
            offsets_topic_num_partitions: 50,
            offsets_topic_replication_factor: 3,
            offset_metadata_max_bytes: 4096,
            offsets_retention_minutes: 10_080,
            offsets_retention_check_interval_ms: 600_000,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            group_consumer_max_size: 1_000_000,
            group_consumer_min_session_timeout_ms: 45_000,
            group_consumer_max_session_timeout_ms: 60_000,
            group_consumer_min_heartbeat_interval_ms: 5_000,
            group_consumer_max_heartbeat_interval_ms: 15_000,
            share: ShareSettings::default(),
            assignment_intervals: AssignmentIntervals::default(),
            producer_id_expiration_ms: 86_400_000,
            producer_id_expiration_check_interval_ms: 600_000,
            transaction_state_log_num_partitions: 50,
            transaction_state_log_replication_factor: 3,
            transaction_state_log_min_isr: 2,
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            transaction_remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            log_cleanup_policy: "delete".into(),
            compression_type: "producer".into(),
            log_cleaner_delete_retention_ms: 86_400_000,
            log_cleaner_min_compaction_lag_ms: 0,
            log_cleaner_max_compaction_lag_ms: i64::MAX,
            log_cleaner_min_cleanable_ratio: 0.5,
            log_message_timestamp_before_max_ms: i64::MAX,
            log_message_timestamp_after_max_ms: i64::MAX,
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            static_keys: BTreeSet::new(),
            dynamic: DynamicConfigs::default(),
        }
    }
}

fn parse_int<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError> {
    value
        .trim()
        .parse::<T>()
        .map_err(|_| invalid(key, format!("{value:?} is not a valid integer")))
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, format!("{value:?} is not true or false"))),
    }
}

fn at_least<T: PartialOrd + std::fmt::Display>(key: &str, v: T, min: T) -> Result<T, ConfigError> {
    if v < min {
        Err(invalid(key, format!("{v} is below the minimum {min}")))
    } else {
        Ok(v)
    }
}

/// Splits Kafka's `HOST:PORT`: the host possibly empty, an IPv6 address in brackets (as
/// Kafka's `Utils.getHost`; unbracketed colons would make the port ambiguous).
fn split_host_port(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let port = port.parse::<u16>().ok()?;
    let valid = match host.strip_prefix('[') {
        Some(bracketed) => bracketed
            .strip_suffix(']')
            .is_some_and(|ip| ip.contains(':') && ip.chars().all(|c| c.is_ascii_alphanumeric() || ":.%".contains(c))),
        None => host.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c)),
    };
    valid.then_some((host, port))
}

/// A comma-separated list with blanks around and between entries dropped (Kafka's
/// `Utils.parseCsvList`).
fn csv(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|v| !v.is_empty())
}

/// A listener name, upper-cased as Kafka's `ListenerName.normalised`.
fn listener_name(key: &str, name: &str) -> Result<String, ConfigError> {
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-".contains(c)) {
        return Err(invalid(key, format!("{name:?} is not a listener name")));
    }
    Ok(name.to_ascii_uppercase())
}

/// Kafka's `NAME://HOST:PORT,...`; a bare `HOST:PORT` (the `--listen` flag) is PLAINTEXT.
/// Names are checked against `controller.listener.names` by `check`, which may be set later.
fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, ConfigError> {
    let mut listeners: Vec<Listener> = Vec::new();
    for entry in csv(value) {
        let (name, address) = match entry.split_once("://") {
            Some((name, address)) => (listener_name(key, name)?, address),
            None => (PLAINTEXT.to_string(), entry),
        };
        let (host, port) =
            split_host_port(address).ok_or_else(|| invalid(key, format!("{entry:?} is not NAME://HOST:PORT")))?;
        if listeners.iter().any(|l| l.name == name) {
            return Err(invalid(key, format!("listener name {name} appears twice")));
        }
        listeners.push(Listener {
            name,
            host: host.to_string(),
            port,
        });
    }
    Ok(listeners)
}

/// `process.roles`: `broker`, `controller` or both, in any order.
fn parse_process_roles(key: &str, value: &str) -> Result<ProcessRoles, ConfigError> {
    let mut roles = ProcessRoles {
        broker: false,
        controller: false,
    };
    for role in csv(value) {
        match role {
            "broker" => roles.broker = true,
            "controller" => roles.controller = true,
            _ => return Err(invalid(key, format!("{role:?} is not broker or controller"))),
        }
    }
    if !roles.broker && !roles.controller {
        return Err(invalid(key, "must name broker, controller or both"));
    }
    Ok(roles)
}

/// A host peers connect to: not empty, not a wildcard (Kafka's `QuorumConfig` requires
/// routable voter addresses).
fn routable(host: &str) -> bool {
    !matches!(host, "" | "0.0.0.0" | "[::]")
}

/// The TLS keys an SSL listener reads (Kafka's `SslConfigs` names), each also accepted as
/// `listener.name.<listener>.<key>` for one listener. Only PEM keystores and truststores.
pub const SSL_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.truststore.password",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules",
];

/// Kafka's GSSAPI (Kerberos) broker keys and their defaults: accepted, and settable through
/// AlterConfigs as Kafka's dynamic listener configs are (librdkafka's admin test sets one), but
/// of no effect: GSSAPI is not served.
const KERBEROS_KEYS: &[(&str, &str)] = &[
    ("sasl.kerberos.service.name", ""),
    ("sasl.kerberos.kinit.cmd", "/usr/bin/kinit"),
    ("sasl.kerberos.min.time.before.relogin", "60000"),
    ("sasl.kerberos.ticket.renew.jitter", "0.05"),
    ("sasl.kerberos.ticket.renew.window.factor", "0.8"),
    ("sasl.kerberos.principal.to.local.rules", "DEFAULT"),
];

/// Whether `key` is a SASL key kept in `BrokerConfig::sasl`: `sasl.enabled.mechanisms`,
/// `listener.name.<listener>.sasl.enabled.mechanisms` or
/// `listener.name.<listener>.<mechanism>.sasl.jaas.config`.
fn is_sasl_key(key: &str) -> bool {
    if key == "sasl.enabled.mechanisms" || KERBEROS_KEYS.iter().any(|(k, _)| *k == key) {
        return true;
    }
    let Some(rest) = key.strip_prefix("listener.name.") else {
        return false;
    };
    match rest.split_once('.') {
        Some((_, "sasl.enabled.mechanisms")) => true,
        Some((_, rest)) => rest
            .strip_suffix(".sasl.jaas.config")
            .is_some_and(|m| crate::sasl::Mechanism::from_name(&m.to_ascii_uppercase()).is_some()),
        None => false,
    }
}

/// `listener.name.<listener>.[<mechanism>.]<name>`, lower-cased as Kafka's
/// `ListenerName.saslMechanismConfigPrefix`.
fn sasl_key(listener: &str, mechanism: Option<&str>, name: &str) -> String {
    match mechanism {
        Some(m) => format!(
            "listener.name.{}.{}.{name}",
            listener.to_ascii_lowercase(),
            m.to_ascii_lowercase()
        ),
        None => format!("listener.name.{}.{name}", listener.to_ascii_lowercase()),
    }
}

/// The `SSL_KEYS` name of `key`: itself, or what follows a `listener.name.<listener>.` prefix.
fn ssl_key_name(key: &str) -> Option<&'static str> {
    let name = match key.strip_prefix("listener.name.") {
        Some(rest) => rest.split_once('.').map(|(_, name)| name)?,
        None => key,
    };
    SSL_KEYS.iter().copied().find(|k| *k == name)
}

/// What a TLS key may hold: only the PEM store type, no passwords (an encrypted key or a
/// password-protected store is refused at start-up rather than half understood).
fn check_ssl_value(key: &str, name: &str, value: &str) -> Result<(), ConfigError> {
    let value = value.trim();
    match name {
        "ssl.keystore.type" | "ssl.truststore.type" if !value.eq_ignore_ascii_case("PEM") && !value.is_empty() => {
            Err(invalid(
                key,
                format!("{value}: only PEM stores are served (ssl.keystore.type=PEM)"),
            ))
        }
        "ssl.key.password" | "ssl.keystore.password" | "ssl.truststore.password" if !value.is_empty() => Err(invalid(
            key,
            "encrypted keys and password-protected stores are not served: give an unencrypted PEM key",
        )),
        "ssl.client.auth" if !matches!(value, "required" | "requested" | "none" | "") => {
            Err(invalid(key, format!("{value:?} is not required, requested or none")))
        }
        "ssl.enabled.protocols" | "ssl.protocol" => {
            for protocol in csv(value) {
                if !matches!(protocol, "TLSv1.2" | "TLSv1.3" | "TLS") {
                    return Err(invalid(key, format!("{protocol}: only TLSv1.2 and TLSv1.3 are served")));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `controller.quorum.voters`: Kafka's `ID@HOST:PORT,...` (`QuorumConfig.parseVoterConnections`).
pub fn parse_voters(key: &str, value: &str) -> Result<BTreeMap<i32, String>, ConfigError> {
    let mut voters = BTreeMap::new();
    for entry in csv(value) {
        let malformed = || invalid(key, format!("{entry:?} is not ID@HOST:PORT"));
        let (id, address) = entry.split_once('@').ok_or_else(malformed)?;
        let id = id
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| invalid(key, format!("{entry:?}: the voter id must be an integer >= 0")))?;
        let (host, port) = split_host_port(address.trim())
            .filter(|(_, port)| *port > 0)
            .ok_or_else(malformed)?;
        if !routable(host) {
            return Err(invalid(
                key,
                format!("{entry:?}: voters connect to it, so it needs a routable host"),
            ));
        }
        if voters.insert(id, format!("{host}:{port}")).is_some() {
            return Err(invalid(key, format!("voter id {id} appears twice")));
        }
    }
    Ok(voters)
}

pub fn parse_timestamp_type(key: &str, value: &str) -> Result<TimestampType, ConfigError> {
    match value.trim() {
        "CreateTime" => Ok(TimestampType::CreateTime),
        "LogAppendTime" => Ok(TimestampType::LogAppendTime),
        _ => Err(invalid(key, format!("{value:?} is not CreateTime or LogAppendTime"))),
    }
}

/// A broker key: its Kafka type, whether Kafka lets it change at runtime, and what it does.
#[derive(Debug, Clone, Copy)]
pub struct BrokerKey {
    pub name: &'static str,
    pub kind: ConfigType,
    /// In Kafka's `DynamicBrokerConfig.AllDynamicConfigs` (and applied live here): settable
    /// through AlterConfigs on a BROKER resource. The others are read-only there.
    pub dynamic: bool,
    pub doc: &'static str,
}

const fn broker_key(name: &'static str, kind: ConfigType, dynamic: bool, doc: &'static str) -> BrokerKey {
    BrokerKey {
        name,
        kind,
        dynamic,
        doc,
    }
}

/// Every key `set` accepts, in the order DescribeConfigs lists them. `dynamic` follows Kafka
/// 4.1: `DynamicLogConfig.ReconfigurableConfigs` (the broker synonyms of topic configs),
/// `LogCleaner.RECONFIGURABLE_CONFIGS`, `DynamicProducerStateManagerConfig` and
/// `DynamicListenerConfig`'s `max.connections` (the listener reads it at each accept).
pub const BROKER_KEYS: &[BrokerKey] = &[
    broker_key("node.id", ConfigType::Int, false, "This broker's id in metadata."),
    broker_key(
        "listeners",
        ConfigType::String,
        false,
        "NAME://HOST:PORT,...: listeners for clients and brokers (each in listener.security.protocol.map), a controller listener for the quorum.",
    ),
    broker_key(
        "advertised.listeners",
        ConfigType::String,
        false,
        "NAME://HOST:PORT,...: the address clients of each listener are told to connect to.",
    ),
    broker_key(
        "process.roles",
        ConfigType::List,
        false,
        "broker, controller or both (KRaft): broker-only nodes follow the metadata log without voting, controller-only nodes vote and serve no clients.",
    ),
    broker_key(
        "controller.listener.names",
        ConfigType::String,
        false,
        "Names of the listeners that serve the metadata quorum, not clients.",
    ),
    broker_key(
        "controller.quorum.voters",
        ConfigType::List,
        false,
        "ID@HOST:PORT of every voter of the metadata quorum; empty: a single node, its own controller.",
    ),
    broker_key(
        "controller.quorum.bootstrap.servers",
        ConfigType::List,
        false,
        "HOST:PORT of controllers to find a dynamic quorum through (KIP-853); its voters live in the metadata log (sluice format --standalone, AddRaftVoter, RemoveRaftVoter).",
    ),
    broker_key(
        "controller.quorum.election.timeout.ms",
        ConfigType::Int,
        false,
        "How long a voter waits without a leader before it starts an election.",
    ),
    broker_key(
        "broker.session.timeout.ms",
        ConfigType::Int,
        false,
        "A broker whose heartbeats stop this long is fenced by the controller.",
    ),
    broker_key(
        "replica.lag.time.max.ms",
        ConfigType::Long,
        false,
        "A follower that has not caught up with its leader for this long leaves the ISR.",
    ),
    broker_key(
        "auto.leader.rebalance.enable",
        ConfigType::Boolean,
        false,
        "The controller moves partitions back to their preferred (first) replica once it is in sync.",
    ),
    broker_key(
        "leader.imbalance.check.interval.seconds",
        ConfigType::Long,
        false,
        "How often the controller looks for partitions away from their preferred replica.",
    ),
    broker_key(
        "replica.fetch.wait.max.ms",
        ConfigType::Int,
        false,
        "How long a follower's fetch waits at the leader for new data.",
    ),
    broker_key(
        "replica.fetch.max.bytes",
        ConfigType::Int,
        false,
        "Bytes a follower fetches per partition (a larger first batch still comes whole).",
    ),
    broker_key(
        "replica.fetch.response.max.bytes",
        ConfigType::Int,
        false,
        "Bytes a follower fetches per request.",
    ),
    broker_key(
        "replica.fetch.backoff.ms",
        ConfigType::Int,
        false,
        "How long a follower waits after a failed fetch.",
    ),
    broker_key(
        "replica.high.watermark.checkpoint.interval.ms",
        ConfigType::Long,
        false,
        "How often the partitions' high watermarks are written to disk, so that a restarted node starts from them.",
    ),
    broker_key(
        "broker.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "How often a broker heartbeats to the controller.",
    ),
    broker_key(
        "controlled.shutdown.enable",
        ConfigType::Boolean,
        false,
        "A cluster broker asks the controller to fence it before it stops.",
    ),
    broker_key(
        "broker.rack",
        ConfigType::String,
        false,
        "This broker's rack, for rack-aware replica placement.",
    ),
    broker_key(
        "replica.selector.class",
        ConfigType::Class,
        false,
        "KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector lets consumers with a client.rack fetch from a replica in their rack; unset, they fetch from the leader.",
    ),
    broker_key(
        "inter.broker.listener.name",
        ConfigType::String,
        false,
        "The listener brokers use to reach each other (followers, transaction markers): its advertised endpoint.",
    ),
    broker_key(
        "listener.security.protocol.map",
        ConfigType::String,
        false,
        "LISTENER_NAME:SECURITY_PROTOCOL,...: each listener's protocol; PLAINTEXT and SSL are served.",
    ),
    broker_key(
        "log.dirs",
        ConfigType::String,
        false,
        "The directory holding partitions and the metadata log.",
    ),
    broker_key(
        "cordoned.log.dirs",
        ConfigType::List,
        true,
        "Log directories that take no new replicas (KIP-1066): entries of log.dirs, or * for all. Per broker only.",
    ),
    broker_key(
        "num.partitions",
        ConfigType::Int,
        false,
        "Partitions of auto-created topics and of CreateTopics asking for -1.",
    ),
    broker_key(
        "default.replication.factor",
        ConfigType::Int,
        false,
        "The replication factor of auto-created topics.",
    ),
    broker_key(
        "auto.create.topics.enable",
        ConfigType::Boolean,
        false,
        "Whether Metadata creates the unknown topics it is asked about.",
    ),
    broker_key(
        "socket.request.max.bytes",
        ConfigType::Int,
        false,
        "A request frame larger than this closes the connection.",
    ),
    broker_key(
        "max.connections",
        ConfigType::Int,
        true,
        "Connections beyond this are closed on accept.",
    ),
    broker_key(
        "queued.max.requests",
        ConfigType::Int,
        false,
        "Pipelined requests per connection before the broker stops reading from it.",
    ),
    broker_key(
        "queued.max.request.bytes",
        ConfigType::Long,
        false,
        "Request bytes all connections together may hold before reading pauses; -1 for no bound.",
    ),
    broker_key(
        "connections.max.idle.ms",
        ConfigType::Long,
        false,
        "A connection silent this long is closed; -1 for never.",
    ),
    broker_key(
        "sasl.enabled.mechanisms",
        ConfigType::List,
        false,
        "The SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.",
    ),
    broker_key(
        "sasl.kerberos.service.name",
        ConfigType::String,
        true,
        "GSSAPI (Kerberos): accepted as Kafka does, of no effect (GSSAPI is not served).",
    ),
    broker_key(
        "sasl.kerberos.kinit.cmd",
        ConfigType::String,
        true,
        "GSSAPI (Kerberos): accepted as Kafka does, of no effect (GSSAPI is not served).",
    ),
    broker_key(
        "sasl.kerberos.min.time.before.relogin",
        ConfigType::Long,
        true,
        "GSSAPI (Kerberos): accepted as Kafka does, of no effect (GSSAPI is not served).",
    ),
    broker_key(
        "sasl.kerberos.ticket.renew.jitter",
        ConfigType::Double,
        true,
        "GSSAPI (Kerberos): accepted as Kafka does, of no effect (GSSAPI is not served).",
    ),
    broker_key(
        "sasl.kerberos.ticket.renew.window.factor",
        ConfigType::Double,
        true,
        "GSSAPI (Kerberos): accepted as Kafka does, of no effect (GSSAPI is not served).",
    ),
    broker_key(
        "sasl.kerberos.principal.to.local.rules",
        ConfigType::List,
        true,
        "GSSAPI (Kerberos): accepted as Kafka does, of no effect (GSSAPI is not served).",
    ),
    broker_key(
        "connections.max.reauth.ms",
        ConfigType::Long,
        false,
        "A SASL session's longest life before the client must re-authenticate (KIP-368); 0: no limit.",
    ),
    broker_key(
        "connection.failed.authentication.delay.ms",
        ConfigType::Int,
        false,
        "How long a failed authentication waits before its answer and the close.",
    ),
    broker_key(
        "sasl.server.max.receive.size",
        ConfigType::Int,
        false,
        "The largest request frame before SASL authentication completes.",
    ),
    broker_key(
        "sasl.mechanism.inter.broker.protocol",
        ConfigType::String,
        false,
        "How brokers log in to each other on a SASL inter-broker listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
    ),
    broker_key(
        "metrics.listen",
        ConfigType::String,
        false,
        "HOST:PORT of the Prometheus /metrics endpoint (HTTP); empty serves none.",
    ),
    broker_key(
        "quota.window.num",
        ConfigType::Int,
        false,
        "The number of samples a client quota's rate is measured over.",
    ),
    broker_key(
        "quota.window.size.seconds",
        ConfigType::Int,
        false,
        "The time span of each sample of a client quota's rate.",
    ),
    broker_key(
        "sasl.mechanism.controller.protocol",
        ConfigType::String,
        false,
        "How nodes log in to a SASL controller listener: PLAIN.",
    ),
    broker_key(
        "authorizer.class.name",
        ConfigType::String,
        false,
        "The authorizer: empty for none, or org.apache.kafka.metadata.authorizer.StandardAuthorizer for ACLs.",
    ),
    broker_key(
        "super.users",
        ConfigType::List,
        false,
        "Principals the authorizer allows everything, separated by ';' (User:admin;User:ops).",
    ),
    broker_key(
        "allow.everyone.if.no.acl.found",
        ConfigType::Boolean,
        false,
        "With the authorizer on: a resource no ACL names is open to everyone.",
    ),
    broker_key(
        "fetch.max.bytes",
        ConfigType::Int,
        false,
        "The most record bytes one Fetch response holds.",
    ),
    broker_key(
        "log.flush.interval.messages",
        ConfigType::Long,
        true,
        "1: acks=all waits for fsync (grouped across requests); larger: acks=all is acknowledged once written.",
    ),
    broker_key(
        "log.flush.interval.ms",
        ConfigType::Long,
        true,
        "The period of the background fsync of every partition.",
    ),
    broker_key(
        "log.flush.offset.checkpoint.interval.ms",
        ConfigType::Int,
        false,
        "How often each partition's recovery point is checkpointed (crash recovery re-validates what follows it).",
    ),
    broker_key(
        "log.segment.bytes",
        ConfigType::Int,
        true,
        "Segment size at which a log rolls (topic default).",
    ),
    broker_key(
        "log.roll.ms",
        ConfigType::Long,
        true,
        "Segment age at which a log rolls (topic default).",
    ),
    broker_key(
        "log.index.interval.bytes",
        ConfigType::Int,
        true,
        "Bytes of log between two offset index entries (topic default).",
    ),
    broker_key(
        "log.index.size.max.bytes",
        ConfigType::Int,
        true,
        "Index size at which a log rolls (topic default).",
    ),
    broker_key(
        "message.max.bytes",
        ConfigType::Int,
        true,
        "The largest record batch accepted (topic default).",
    ),
    broker_key(
        "log.message.timestamp.type",
        ConfigType::String,
        true,
        "CreateTime or LogAppendTime (topic default).",
    ),
    broker_key(
        "log.message.timestamp.before.max.ms",
        ConfigType::Long,
        true,
        "How far in the past a CreateTime timestamp may be (topic default).",
    ),
    broker_key(
        "log.message.timestamp.after.max.ms",
        ConfigType::Long,
        true,
        "How far in the future a CreateTime timestamp may be (topic default).",
    ),
    broker_key(
        "log.retention.ms",
        ConfigType::Long,
        true,
        "Age after which segments are deleted; -1 for none (topic default).",
    ),
    broker_key(
        "log.retention.bytes",
        ConfigType::Long,
        true,
        "Size above which the oldest segments are deleted; -1 for none (topic default).",
    ),
    broker_key(
        "log.retention.check.interval.ms",
        ConfigType::Long,
        false,
        "How often retention looks for segments to delete.",
    ),
    broker_key(
        "log.segment.delete.delay.ms",
        ConfigType::Long,
        true,
        "Delay before a deleted segment's files are removed (topic default).",
    ),
    broker_key(
        "log.cleanup.policy",
        ConfigType::List,
        true,
        "delete, compact, or both (topic default).",
    ),
    broker_key(
        "compression.type",
        ConfigType::String,
        true,
        "Final compression of batches; producer keeps the producer's codec (topic default).",
    ),
    broker_key(
        "min.insync.replicas",
        ConfigType::Int,
        true,
        "Replicas that must acknowledge an acks=all write (topic default, stored for replication).",
    ),
    broker_key(
        "unclean.leader.election.enable",
        ConfigType::Boolean,
        true,
        "Whether a replica outside the ISR may lead (topic default, stored for replication).",
    ),
    broker_key(
        "log.cleaner.enable",
        ConfigType::Boolean,
        false,
        "Whether compacted topics are cleaned.",
    ),
    broker_key(
        "log.cleaner.backoff.ms",
        ConfigType::Long,
        true,
        "The pause between cleaning rounds.",
    ),
    broker_key(
        "log.cleaner.dedupe.buffer.size",
        ConfigType::Long,
        true,
        "Key map memory of one cleaning pass; more keys are cleaned in several passes.",
    ),
    broker_key(
        "log.cleaner.delete.retention.ms",
        ConfigType::Long,
        true,
        "How long tombstones stay once compaction reached them (topic default).",
    ),
    broker_key(
        "log.cleaner.min.compaction.lag.ms",
        ConfigType::Long,
        true,
        "The shortest a record stays uncompacted (topic default).",
    ),
    broker_key(
        "log.cleaner.max.compaction.lag.ms",
        ConfigType::Long,
        true,
        "The longest a record may stay uncompacted (topic default).",
    ),
    broker_key(
        "log.cleaner.min.cleanable.ratio",
        ConfigType::Double,
        true,
        "Dirty share of a log above which compaction runs (topic default).",
    ),
    broker_key(
        "shutdown.timeout.ms",
        ConfigType::Long,
        false,
        "How long a clean shutdown waits for requests in flight.",
    ),
    broker_key(
        "group.min.session.timeout.ms",
        ConfigType::Int,
        false,
        "The shortest session timeout a JoinGroup may ask for.",
    ),
    broker_key(
        "group.max.session.timeout.ms",
        ConfigType::Int,
        false,
        "The longest session timeout a JoinGroup may ask for.",
    ),
    broker_key(
        "group.initial.rebalance.delay.ms",
        ConfigType::Int,
        false,
        "How long a group forming from empty waits for more members.",
    ),
    broker_key("group.max.size", ConfigType::Int, false, "Members per classic group."),
    broker_key(
        "offsets.topic.num.partitions",
        ConfigType::Int,
        false,
        "Partitions of __consumer_offsets when it is created.",
    ),
    broker_key(
        "offsets.topic.replication.factor",
        ConfigType::Short,
        false,
        "Replicas of __consumer_offsets when it is created (at most the live brokers).",
    ),
    broker_key(
        "offset.metadata.max.bytes",
        ConfigType::Int,
        false,
        "The largest commit metadata string.",
    ),
    broker_key(
        "offsets.retention.minutes",
        ConfigType::Int,
        false,
        "How long an empty group's committed offsets are kept.",
    ),
    broker_key(
        "offsets.retention.check.interval.ms",
        ConfigType::Long,
        false,
        "How often expired offsets are looked for.",
    ),
    broker_key(
        "group.consumer.session.timeout.ms",
        ConfigType::Int,
        false,
        "A KIP-848 member silent this long leaves its group.",
    ),
    broker_key(
        "group.consumer.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "How often KIP-848 members are told to heartbeat.",
    ),
    broker_key(
        "group.consumer.max.size",
        ConfigType::Int,
        false,
        "Members per KIP-848 group.",
    ),
    broker_key(
        "group.consumer.min.session.timeout.ms",
        ConfigType::Int,
        false,
        "The lowest consumer.session.timeout.ms a group may have.",
    ),
    broker_key(
        "group.consumer.max.session.timeout.ms",
        ConfigType::Int,
        false,
        "The highest consumer.session.timeout.ms a group may have.",
    ),
    broker_key(
        "group.consumer.min.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "The lowest consumer.heartbeat.interval.ms a group may have.",
    ),
    broker_key(
        "group.consumer.max.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "The highest consumer.heartbeat.interval.ms a group may have.",
    ),
    broker_key(
        "group.consumer.assignment.interval.ms",
        ConfigType::Int,
        true,
        "The least time between two target assignments of a KIP-848 group (KIP-1263).",
    ),
    broker_key(
        "group.consumer.min.assignment.interval.ms",
        ConfigType::Int,
        false,
        "The lowest consumer.assignment.interval.ms a group may have.",
    ),
    broker_key(
        "group.consumer.max.assignment.interval.ms",
        ConfigType::Int,
        false,
        "The highest consumer.assignment.interval.ms a group may have.",
    ),
    broker_key(
        "group.share.session.timeout.ms",
        ConfigType::Int,
        false,
        "A share group member silent this long leaves its group.",
    ),
    broker_key(
        "group.share.min.session.timeout.ms",
        ConfigType::Int,
        false,
        "The lowest share.session.timeout.ms a group may have.",
    ),
    broker_key(
        "group.share.max.session.timeout.ms",
        ConfigType::Int,
        false,
        "The highest share.session.timeout.ms a group may have.",
    ),
    broker_key(
        "group.share.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "How often share group members are told to heartbeat.",
    ),
    broker_key(
        "group.share.min.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "The lowest share.heartbeat.interval.ms a group may have.",
    ),
    broker_key(
        "group.share.max.heartbeat.interval.ms",
        ConfigType::Int,
        false,
        "The highest share.heartbeat.interval.ms a group may have.",
    ),
    broker_key(
        "group.share.record.lock.duration.ms",
        ConfigType::Int,
        false,
        "How long a share group member holds the records it acquired.",
    ),
    broker_key(
        "group.share.min.record.lock.duration.ms",
        ConfigType::Int,
        false,
        "The lowest share.record.lock.duration.ms a group may have.",
    ),
    broker_key(
        "group.share.max.record.lock.duration.ms",
        ConfigType::Int,
        false,
        "The highest share.record.lock.duration.ms a group may have.",
    ),
    broker_key(
        "group.share.delivery.count.limit",
        ConfigType::Int,
        false,
        "Deliveries of a record to share group members before it is archived.",
    ),
    broker_key(
        "group.share.min.delivery.count.limit",
        ConfigType::Int,
        false,
        "The lowest share.delivery.count.limit a group may have.",
    ),
    broker_key(
        "group.share.max.delivery.count.limit",
        ConfigType::Int,
        false,
        "The highest share.delivery.count.limit a group may have.",
    ),
    broker_key(
        "group.share.max.size",
        ConfigType::Int,
        false,
        "Members per share group.",
    ),
    broker_key(
        "group.share.partition.max.record.locks",
        ConfigType::Int,
        false,
        "Records of one partition a share group may have in flight.",
    ),
    broker_key(
        "group.share.min.partition.max.record.locks",
        ConfigType::Int,
        false,
        "The lowest share.partition.max.record.locks a group may have.",
    ),
    broker_key(
        "group.share.max.partition.max.record.locks",
        ConfigType::Int,
        false,
        "The highest share.partition.max.record.locks a group may have.",
    ),
    broker_key(
        "group.share.assignment.interval.ms",
        ConfigType::Int,
        true,
        "The least time between two target assignments of a share group (KIP-1263).",
    ),
    broker_key(
        "group.share.min.assignment.interval.ms",
        ConfigType::Int,
        false,
        "The lowest share.assignment.interval.ms a group may have.",
    ),
    broker_key(
        "group.share.max.assignment.interval.ms",
        ConfigType::Int,
        false,
        "The highest share.assignment.interval.ms a group may have.",
    ),
    broker_key(
        "producer.id.expiration.ms",
        ConfigType::Int,
        true,
        "A producer id idle this long is forgotten by a partition.",
    ),
    broker_key(
        "producer.id.expiration.check.interval.ms",
        ConfigType::Int,
        false,
        "How often idle producer ids are looked for.",
    ),
    broker_key(
        "transaction.state.log.num.partitions",
        ConfigType::Int,
        false,
        "Partitions of __transaction_state when it is created.",
    ),
    broker_key(
        "transaction.state.log.replication.factor",
        ConfigType::Short,
        false,
        "Replicas of __transaction_state when it is created (at most the live brokers).",
    ),
    broker_key(
        "transaction.state.log.min.isr",
        ConfigType::Int,
        false,
        "min.insync.replicas of __transaction_state (at most its replication factor).",
    ),
    broker_key(
        "transaction.max.timeout.ms",
        ConfigType::Int,
        false,
        "The largest transaction.timeout.ms a producer may ask for.",
    ),
    broker_key(
        "transactional.id.expiration.ms",
        ConfigType::Int,
        false,
        "A transactional id idle this long is forgotten.",
    ),
    broker_key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        ConfigType::Int,
        false,
        "How often transactions past their timeout are aborted.",
    ),
    broker_key(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        ConfigType::Int,
        false,
        "How often expired transactional ids are removed.",
    ),
];

impl BrokerConfig {
    /// The key's entry in `BROKER_KEYS`.
    pub fn key_info(name: &str) -> Option<&'static BrokerKey> {
        BROKER_KEYS.iter().find(|k| k.name == name)
    }

    /// The textual value of a broker key, as DescribeConfigs shows it.
    pub fn get(&self, key: &str) -> Option<String> {
        if let Some(value) = self.share.get(key) {
            return Some(value.to_string());
        }
        if let Some(value) = self.assignment_intervals.get(key) {
            return Some(value.to_string());
        }
        let ts = |t: TimestampType| match t {
            TimestampType::CreateTime => "CreateTime".to_string(),
            TimestampType::LogAppendTime => "LogAppendTime".to_string(),
        };
        Some(match key {
            "node.id" => self.node_id.to_string(),
            "listeners" => self.listeners_text(),
            "process.roles" => self.process_roles.to_string(),
            "controller.listener.names" => self.controller_listener_names.join(","),
            "controller.quorum.voters" => {
                let voters: Vec<String> = self
                    .controller_quorum_voters
                    .iter()
                    .map(|(id, address)| format!("{id}@{address}"))
                    .collect();
                voters.join(",")
            }
            "controller.quorum.bootstrap.servers" => self.controller_quorum_bootstrap_servers.join(","),
            "controller.quorum.election.timeout.ms" => self.controller_quorum_election_timeout_ms.to_string(),
            "broker.session.timeout.ms" => self.broker_session_timeout_ms.to_string(),
            "replica.lag.time.max.ms" => self.replica_lag_time_max_ms.to_string(),
            "auto.leader.rebalance.enable" => self.auto_leader_rebalance_enable.to_string(),
            "leader.imbalance.check.interval.seconds" => self.leader_imbalance_check_interval_seconds.to_string(),
            "replica.fetch.wait.max.ms" => self.replica_fetch_wait_max_ms.to_string(),
            "replica.fetch.max.bytes" => self.replica_fetch_max_bytes.to_string(),
            "replica.fetch.response.max.bytes" => self.replica_fetch_response_max_bytes.to_string(),
            "replica.fetch.backoff.ms" => self.replica_fetch_backoff_ms.to_string(),
            "replica.high.watermark.checkpoint.interval.ms" => {
                self.replica_high_watermark_checkpoint_interval_ms.to_string()
            }
            "broker.heartbeat.interval.ms" => self.broker_heartbeat_interval_ms.to_string(),
            "controlled.shutdown.enable" => self.controlled_shutdown_enable.to_string(),
            "broker.rack" => self.broker_rack.clone().unwrap_or_default(),
            "replica.selector.class" => self
                .replica_selector
                .map(ReplicaSelector::class_name)
                .unwrap_or_default()
                .to_string(),
            "inter.broker.listener.name" => self.inter_broker_listener_name.clone(),
            "advertised.listeners" => {
                if self.advertised_listeners.is_empty() {
                    let first = self.first_client_listener().map_or(PLAINTEXT, |l| &l.name);
                    format!("{first}://{}", self.advertised())
                } else {
                    let entries: Vec<String> = self.advertised_listeners.iter().map(Listener::to_string).collect();
                    entries.join(",")
                }
            }
            "listener.security.protocol.map" => {
                let entries: Vec<String> = self
                    .listener_security_protocol_map
                    .iter()
                    .map(|(name, p)| format!("{name}:{p}"))
                    .collect();
                entries.join(",")
            }
            "log.dirs" => self.data_dir.display().to_string(),
            "cordoned.log.dirs" => self.cordoned_log_dirs.join(","),
            "num.partitions" => self.num_partitions.to_string(),
            "default.replication.factor" => self.default_replication_factor.to_string(),
            "auto.create.topics.enable" => self.auto_create_topics_enable.to_string(),
            "socket.request.max.bytes" => self.socket_request_max_bytes.to_string(),
            "max.connections" => self.max_connections.to_string(),
            "queued.max.requests" => self.queued_max_requests.to_string(),
            "queued.max.request.bytes" => self.queued_max_request_bytes.to_string(),
            "connections.max.idle.ms" => self.connections_max_idle_ms.to_string(),
            k if k.starts_with("sasl.kerberos.") => KERBEROS_KEYS
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(name, default)| self.sasl.get(*name).cloned().unwrap_or_else(|| default.to_string()))?,
            "sasl.enabled.mechanisms" => self
                .sasl
                .get("sasl.enabled.mechanisms")
                .cloned()
                .unwrap_or_else(|| crate::sasl::DEFAULT_MECHANISMS.to_string()),
            "connections.max.reauth.ms" => self.connections_max_reauth_ms.to_string(),
            "connection.failed.authentication.delay.ms" => self.connection_failed_authentication_delay_ms.to_string(),
            "sasl.server.max.receive.size" => self.sasl_server_max_receive_size.to_string(),
            "sasl.mechanism.inter.broker.protocol" => self.sasl_mechanism_inter_broker_protocol.clone(),
            "sasl.mechanism.controller.protocol" => self.sasl_mechanism_controller_protocol.clone(),
            "metrics.listen" => self.metrics_listen.clone(),
            "quota.window.num" => self.quota_window_num.to_string(),
            "quota.window.size.seconds" => self.quota_window_size_seconds.to_string(),
            "authorizer.class.name" => self.authorizer_class_name.clone(),
            "super.users" => self.super_users.join(";"),
            "allow.everyone.if.no.acl.found" => self.allow_everyone_if_no_acl_found.to_string(),
            "fetch.max.bytes" => self.fetch_max_bytes.to_string(),
            "log.flush.interval.messages" => self.log_flush_interval_messages.to_string(),
            "log.flush.interval.ms" => self.log_flush_interval_ms.to_string(),
            "log.flush.offset.checkpoint.interval.ms" => self.log.recovery_point_checkpoint_ms.to_string(),
            "log.segment.bytes" => self.log.segment_bytes.to_string(),
            "log.roll.ms" => self.log.segment_ms.to_string(),
            "log.index.interval.bytes" => self.log.index_interval_bytes.to_string(),
            "log.index.size.max.bytes" => self.log.segment_index_bytes.to_string(),
            "message.max.bytes" => self.log.max_message_bytes.to_string(),
            "log.message.timestamp.type" => ts(self.log.timestamp_type),
            "log.retention.ms" => self.log_retention_ms.to_string(),
            "log.retention.bytes" => self.log_retention_bytes.to_string(),
            "log.retention.check.interval.ms" => self.log_retention_check_interval_ms.to_string(),
            "log.cleaner.enable" => self.log_cleaner_enable.to_string(),
            "log.cleaner.backoff.ms" => self.log_cleaner_backoff_ms.to_string(),
            "log.cleaner.dedupe.buffer.size" => self.log_cleaner_dedupe_buffer_size.to_string(),
            "shutdown.timeout.ms" => self.shutdown_timeout_ms.to_string(),
            "group.min.session.timeout.ms" => self.group_min_session_timeout_ms.to_string(),
            "group.max.session.timeout.ms" => self.group_max_session_timeout_ms.to_string(),
            "group.initial.rebalance.delay.ms" => self.group_initial_rebalance_delay_ms.to_string(),
            "group.max.size" => self.group_max_size.to_string(),
            "offsets.topic.num.partitions" => self.offsets_topic_num_partitions.to_string(),
            "offsets.topic.replication.factor" => self.offsets_topic_replication_factor.to_string(),
            "offset.metadata.max.bytes" => self.offset_metadata_max_bytes.to_string(),
            "offsets.retention.minutes" => self.offsets_retention_minutes.to_string(),
            "offsets.retention.check.interval.ms" => self.offsets_retention_check_interval_ms.to_string(),
            "group.consumer.session.timeout.ms" => self.group_consumer_session_timeout_ms.to_string(),
            "group.consumer.heartbeat.interval.ms" => self.group_consumer_heartbeat_interval_ms.to_string(),
            "group.consumer.max.size" => self.group_consumer_max_size.to_string(),
            "group.consumer.min.session.timeout.ms" => self.group_consumer_min_session_timeout_ms.to_string(),
            "group.consumer.max.session.timeout.ms" => self.group_consumer_max_session_timeout_ms.to_string(),
            "group.consumer.min.heartbeat.interval.ms" => self.group_consumer_min_heartbeat_interval_ms.to_string(),
            "group.consumer.max.heartbeat.interval.ms" => self.group_consumer_max_heartbeat_interval_ms.to_string(),
            "producer.id.expiration.ms" => self.producer_id_expiration_ms.to_string(),
            "producer.id.expiration.check.interval.ms" => self.producer_id_expiration_check_interval_ms.to_string(),
            "transaction.state.log.num.partitions" => self.transaction_state_log_num_partitions.to_string(),
            "transaction.state.log.replication.factor" => self.transaction_state_log_replication_factor.to_string(),
            "transaction.state.log.min.isr" => self.transaction_state_log_min_isr.to_string(),
            "transaction.max.timeout.ms" => self.transaction_max_timeout_ms.to_string(),
            "transactional.id.expiration.ms" => self.transactional_id_expiration_ms.to_string(),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms" => self
                .transaction_abort_timed_out_transaction_cleanup_interval_ms
                .to_string(),
            "transaction.remove.expired.transaction.cleanup.interval.ms" => self
                .transaction_remove_expired_transaction_cleanup_interval_ms
                .to_string(),
            "log.segment.delete.delay.ms" => self.log.file_delete_delay_ms.to_string(),
            "log.cleanup.policy" => self.log_cleanup_policy.clone(),
            "compression.type" => self.compression_type.clone(),
            "log.cleaner.delete.retention.ms" => self.log_cleaner_delete_retention_ms.to_string(),
            "log.cleaner.min.compaction.lag.ms" => self.log_cleaner_min_compaction_lag_ms.to_string(),
            "log.cleaner.max.compaction.lag.ms" => self.log_cleaner_max_compaction_lag_ms.to_string(),
            "log.cleaner.min.cleanable.ratio" => self.log_cleaner_min_cleanable_ratio.to_string(),
            "log.message.timestamp.before.max.ms" => self.log_message_timestamp_before_max_ms.to_string(),
            "log.message.timestamp.after.max.ms" => self.log_message_timestamp_after_max_ms.to_string(),
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            "unclean.leader.election.enable" => self.unclean_leader_election_enable.to_string(),
            _ => return None,
        })
    }

    /// Sets one key from its textual value, validating it, as the operator's (config file or
    /// flag): DescribeConfigs reports it as STATIC_BROKER_CONFIG.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.assign(key, value)?;
        let key = if key == "log.dir" { "log.dirs" } else { key };
        self.static_keys.insert(key.to_string());
        Ok(())
    }

    /// Sets one key from its textual value, validating it.
    fn assign(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        // The broker synonyms of topic keys are checked by the topic key's rules.
        let as_topic_key = |value: &str| -> Result<String, ConfigError> {
            let topic_key = TOPIC_KEYS.iter().find(|k| k.broker_key == key).map_or(key, |k| k.name);
            validate_topic_config(topic_key, value).map_err(|e| invalid(key, e.reason))?;
            Ok(value.trim().to_string())
        };
        if let Some(slot) = self.share.slot(key) {
            *slot = at_least(key, parse_int(key, value)?, 1)?;
            return Ok(());
        }
        if let Some(slot) = self.assignment_intervals.slot(key) {
            *slot = at_least(key, parse_int(key, value)?, 0)?;
            return Ok(());
        }
        match key {
            "log.segment.delete.delay.ms" => self.log.file_delete_delay_ms = at_least(key, parse_int(key, value)?, 0)?,
            "log.cleanup.policy" => self.log_cleanup_policy = as_topic_key(value)?,
            "compression.type" => self.compression_type = as_topic_key(value)?,
            "log.cleaner.delete.retention.ms" => {
                self.log_cleaner_delete_retention_ms = at_least(key, parse_int(key, value)?, 0)?
            }
            "log.cleaner.min.compaction.lag.ms" => {
                self.log_cleaner_min_compaction_lag_ms = at_least(key, parse_int(key, value)?, 0)?
            }
            "log.cleaner.max.compaction.lag.ms" => {
                self.log_cleaner_max_compaction_lag_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "log.cleaner.min.cleanable.ratio" => {
                self.log_cleaner_min_cleanable_ratio = as_topic_key(value)?
                    .parse()
                    .map_err(|_| invalid(key, format!("{value:?} is not a number")))?
            }
            "log.message.timestamp.before.max.ms" => {
                self.log_message_timestamp_before_max_ms = at_least(key, parse_int(key, value)?, 0)?
            }
            "log.message.timestamp.after.max.ms" => {
                self.log_message_timestamp_after_max_ms = at_least(key, parse_int(key, value)?, 0)?
            }
            "min.insync.replicas" => self.min_insync_replicas = at_least(key, parse_int(key, value)?, 1)?,
            "unclean.leader.election.enable" => self.unclean_leader_election_enable = parse_bool(key, value)?,
            "node.id" => self.node_id = at_least(key, parse_int(key, value)?, 0)?,
            "listeners" => {
                let listeners = parse_listeners(key, value)?;
                if listeners.is_empty() {
                    return Err(invalid(key, "must name at least one listener"));
                }
                self.listeners = listeners;
                self.resolve_listeners();
            }
            "advertised.listeners" => {
                // Empty: advertise the listener itself, as Kafka does when the key is unset.
                let advertised = parse_listeners(key, value)?;
                // Kafka's KafkaConfig refuses the wildcard; an empty host (Kafka: this host's
                // name) is refused too, rather than advertised as it stands.
                if let Some(l) = advertised.iter().find(|l| !routable(&l.host)) {
                    return Err(invalid(
                        key,
                        format!("{l}: clients connect to it, so it needs a routable host"),
                    ));
                }
                self.advertised_listeners = advertised;
                self.resolve_listeners();
            }
            "listener.security.protocol.map" => {
                let mut map = BTreeMap::new();
                for entry in csv(value) {
                    let (name, protocol) = entry
                        .split_once(':')
                        .ok_or_else(|| invalid(key, format!("{entry:?} is not LISTENER_NAME:SECURITY_PROTOCOL")))?;
                    let protocol = protocol.trim().to_ascii_uppercase();
                    if !SECURITY_PROTOCOLS.contains(&protocol.as_str()) {
                        return Err(invalid(key, format!("{protocol:?} is not a security protocol")));
                    }
                    if map.insert(listener_name(key, name)?, protocol).is_some() {
                        return Err(invalid(key, format!("listener {name} appears twice")));
                    }
                }
                self.listener_security_protocol_map = map;
            }
            "process.roles" => self.process_roles = parse_process_roles(key, value)?,
            "controller.listener.names" => {
                let mut names: Vec<String> = Vec::new();
                for name in csv(value) {
                    let name = listener_name(key, name)?;
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                if names.is_empty() {
                    return Err(invalid(key, "must name at least one listener"));
                }
                self.controller_listener_names = names;
                self.resolve_listeners();
            }
            "controller.quorum.voters" => self.controller_quorum_voters = parse_voters(key, value)?,
            "controller.quorum.bootstrap.servers" => {
                let mut servers = Vec::new();
                for server in csv(value) {
                    if split_host_port(server).is_none_or(|(host, _)| !routable(host)) {
                        return Err(invalid(key, format!("{server:?} is not HOST:PORT")));
                    }
                    servers.push(server.to_string());
                }
                self.controller_quorum_bootstrap_servers = servers;
            }
            "controller.quorum.election.timeout.ms" => {
                self.controller_quorum_election_timeout_ms = at_least(key, parse_int(key, value)?, 10)?
            }
            "broker.session.timeout.ms" => self.broker_session_timeout_ms = at_least(key, parse_int(key, value)?, 1)?,
            "replica.lag.time.max.ms" => self.replica_lag_time_max_ms = at_least(key, parse_int(key, value)?, 1)?,
            "auto.leader.rebalance.enable" => self.auto_leader_rebalance_enable = parse_bool(key, value)?,
            "leader.imbalance.check.interval.seconds" => {
                self.leader_imbalance_check_interval_seconds = at_least(key, parse_int(key, value)?, 1)?
            }
            "replica.fetch.wait.max.ms" => self.replica_fetch_wait_max_ms = at_least(key, parse_int(key, value)?, 0)?,
            "replica.fetch.max.bytes" => self.replica_fetch_max_bytes = at_least(key, parse_int(key, value)?, 0)?,
            "replica.fetch.response.max.bytes" => {
                self.replica_fetch_response_max_bytes = at_least(key, parse_int(key, value)?, 0)?
            }
            "replica.fetch.backoff.ms" => self.replica_fetch_backoff_ms = at_least(key, parse_int(key, value)?, 0)?,
            "replica.high.watermark.checkpoint.interval.ms" => {
                self.replica_high_watermark_checkpoint_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "broker.heartbeat.interval.ms" => {
                self.broker_heartbeat_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "broker.rack" => self.broker_rack = Some(value.trim().to_string()).filter(|rack| !rack.is_empty()),
            "replica.selector.class" => self.replica_selector = ReplicaSelector::parse(key, value)?,
            "inter.broker.listener.name" => self.inter_broker_listener_name = listener_name(key, value)?,
            "log.dirs" | "log.dir" => {
                if value.trim().is_empty() || value.contains(',') {
                    return Err(invalid(key, "exactly one data directory is supported"));
                }
                self.data_dir = PathBuf::from(value.trim());
            }
            "num.partitions" => self.num_partitions = at_least(key, parse_int(key, value)?, 1)?,
            "default.replication.factor" => self.default_replication_factor = at_least(key, parse_int(key, value)?, 1)?,
            "auto.create.topics.enable" => self.auto_create_topics_enable = parse_bool(key, value)?,
            "socket.request.max.bytes" => self.socket_request_max_bytes = at_least(key, parse_int(key, value)?, 1024)?,
            "max.connections" => self.max_connections = at_least(key, parse_int(key, value)?, 1)?,
            // Checked against `log.dirs` once every key is set (`check`).
            "cordoned.log.dirs" => {
                self.cordoned_log_dirs = value
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "queued.max.requests" => self.queued_max_requests = at_least(key, parse_int(key, value)?, 1)?,
            "queued.max.request.bytes" => self.queued_max_request_bytes = at_least(key, parse_int(key, value)?, -1)?,
            "connections.max.idle.ms" => {
                // Kafka's Selector: negative disables idle expiry; 0 would close every
                // connection between two reads.
                let ms: i64 = parse_int(key, value)?;
                self.connections_max_idle_ms = if ms < 0 { -1 } else { at_least(key, ms, 1)? };
            }
            // Kafka's ServerConfigs: at least 1024.
            "fetch.max.bytes" => self.fetch_max_bytes = at_least(key, parse_int(key, value)?, 1024)?,
            "log.flush.interval.messages" => {
                self.log_flush_interval_messages = at_least(key, parse_int(key, value)?, 1)?
            }
            "log.flush.interval.ms" => self.log_flush_interval_ms = at_least(key, parse_int(key, value)?, 1)?,
            "log.flush.offset.checkpoint.interval.ms" => {
                self.log.recovery_point_checkpoint_ms = at_least(key, parse_int(key, value)?, 0)?
            }
            "log.segment.bytes" => self.log.segment_bytes = at_least(key, parse_int(key, value)?, 14)?,
            "log.roll.ms" => self.log.segment_ms = at_least(key, parse_int(key, value)?, 1)?,
            "log.index.interval.bytes" => self.log.index_interval_bytes = at_least(key, parse_int(key, value)?, 0)?,
            "log.index.size.max.bytes" => self.log.segment_index_bytes = at_least(key, parse_int(key, value)?, 8)?,
            "message.max.bytes" => self.log.max_message_bytes = at_least(key, parse_int(key, value)?, 0)?,
            "log.message.timestamp.type" => self.log.timestamp_type = parse_timestamp_type(key, value)?,
            "log.retention.ms" => self.log_retention_ms = at_least(key, parse_int(key, value)?, -1)?,
            "log.retention.bytes" => self.log_retention_bytes = at_least(key, parse_int(key, value)?, -1)?,
            "log.retention.check.interval.ms" => {
                self.log_retention_check_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "log.cleaner.enable" => self.log_cleaner_enable = parse_bool(key, value)?,
            "controlled.shutdown.enable" => self.controlled_shutdown_enable = parse_bool(key, value)?,
            "log.cleaner.backoff.ms" => self.log_cleaner_backoff_ms = at_least(key, parse_int(key, value)?, 1)?,
            "log.cleaner.dedupe.buffer.size" => {
                self.log_cleaner_dedupe_buffer_size = at_least(key, parse_int(key, value)?, 1024 * 1024)?
            }
            "shutdown.timeout.ms" => self.shutdown_timeout_ms = parse_int(key, value)?,
            "group.min.session.timeout.ms" => self.group_min_session_timeout_ms = parse_int(key, value)?,
            "group.max.session.timeout.ms" => self.group_max_session_timeout_ms = parse_int(key, value)?,
            "group.initial.rebalance.delay.ms" => self.group_initial_rebalance_delay_ms = parse_int(key, value)?,
            "group.max.size" => self.group_max_size = at_least(key, parse_int(key, value)?, 1)?,
            "offsets.topic.num.partitions" => {
                self.offsets_topic_num_partitions = at_least(key, parse_int(key, value)?, 1)?
            }
            "offsets.topic.replication.factor" => {
                self.offsets_topic_replication_factor = at_least(key, parse_int(key, value)?, 1)?
            }
            "offset.metadata.max.bytes" => self.offset_metadata_max_bytes = parse_int(key, value)?,
            "offsets.retention.minutes" => self.offsets_retention_minutes = at_least(key, parse_int(key, value)?, 1)?,
            "offsets.retention.check.interval.ms" => {
                self.offsets_retention_check_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "group.consumer.session.timeout.ms" => {
                self.group_consumer_session_timeout_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "group.consumer.heartbeat.interval.ms" => {
                self.group_consumer_heartbeat_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "group.consumer.max.size" => self.group_consumer_max_size = at_least(key, parse_int(key, value)?, 1)?,
            "group.consumer.min.session.timeout.ms" => {
                self.group_consumer_min_session_timeout_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "group.consumer.max.session.timeout.ms" => {
                self.group_consumer_max_session_timeout_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "group.consumer.min.heartbeat.interval.ms" => {
                self.group_consumer_min_heartbeat_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "group.consumer.max.heartbeat.interval.ms" => {
                self.group_consumer_max_heartbeat_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "producer.id.expiration.ms" => self.producer_id_expiration_ms = at_least(key, parse_int(key, value)?, 1)?,
            "producer.id.expiration.check.interval.ms" => {
                self.producer_id_expiration_check_interval_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "transaction.state.log.num.partitions" => {
                self.transaction_state_log_num_partitions = at_least(key, parse_int(key, value)?, 1)?
            }
            "transaction.state.log.replication.factor" => {
                self.transaction_state_log_replication_factor = at_least(key, parse_int(key, value)?, 1)?
            }
            "transaction.state.log.min.isr" => {
                self.transaction_state_log_min_isr = at_least(key, parse_int(key, value)?, 1)?
            }
            "transaction.max.timeout.ms" => self.transaction_max_timeout_ms = at_least(key, parse_int(key, value)?, 1)?,
            "transactional.id.expiration.ms" => {
                self.transactional_id_expiration_ms = at_least(key, parse_int(key, value)?, 1)?
            }
            "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                self.transaction_abort_timed_out_transaction_cleanup_interval_ms =
                    at_least(key, parse_int(key, value)?, 1)?
            }
            "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                self.transaction_remove_expired_transaction_cleanup_interval_ms =
                    at_least(key, parse_int(key, value)?, 1)?
            }
            "connections.max.reauth.ms" => self.connections_max_reauth_ms = parse_int(key, value)?,
            "connection.failed.authentication.delay.ms" => {
                self.connection_failed_authentication_delay_ms = parse_int(key, value)?
            }
            "sasl.server.max.receive.size" => {
                self.sasl_server_max_receive_size = at_least(key, parse_int(key, value)?, 1)?
            }
            "sasl.mechanism.inter.broker.protocol" => {
                self.sasl_mechanism_inter_broker_protocol = value.trim().to_string()
            }
            "sasl.mechanism.controller.protocol" => self.sasl_mechanism_controller_protocol = value.trim().to_string(),
            "metrics.listen" => self.metrics_listen = value.trim().to_string(),
            "quota.window.num" => self.quota_window_num = at_least(key, parse_int(key, value)?, 2)?,
            "quota.window.size.seconds" => self.quota_window_size_seconds = at_least(key, parse_int(key, value)?, 1)?,
            "authorizer.class.name" => {
                let name = value.trim();
                if !name.is_empty() && !crate::acl::AUTHORIZER_CLASS_NAMES.contains(&name) {
                    return Err(invalid(
                        key,
                        format!(
                            "{name} is not an authorizer Sluice has; use {} (ACLs in the metadata log) or leave it empty",
                            crate::acl::AUTHORIZER_CLASS_NAMES[0]
                        ),
                    ));
                }
                self.authorizer_class_name = name.to_string();
            }
            "super.users" => {
                let mut users = Vec::new();
                for user in value.split(';').map(str::trim).filter(|u| !u.is_empty()) {
                    match user.split_once(':') {
                        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => users.push(user.to_string()),
                        _ => {
                            return Err(invalid(
                                key,
                                format!("{user} is not a principal: write it as User:<name>, separated by ';'"),
                            ));
                        }
                    }
                }
                self.super_users = users;
            }
            "allow.everyone.if.no.acl.found" => self.allow_everyone_if_no_acl_found = parse_bool(key, value)?,
            "sasl.jaas.config" => {
                return Err(invalid(
                    key,
                    "a broker reads listener.name.<listener>.<mechanism>.sasl.jaas.config, \
                     e.g. listener.name.sasl_plaintext.plain.sasl.jaas.config",
                ));
            }
            _ if is_sasl_key(key) => {
                self.sasl.insert(key.to_string(), value.trim().to_string());
            }
            _ if ssl_key_name(key).is_some() => {
                let name = ssl_key_name(key).unwrap_or_default();
                check_ssl_value(key, name, value)?;
                self.ssl.insert(key.to_string(), value.to_string());
            }
            _ => return Err(invalid(key, "unknown key")),
        }
        Ok(())
    }

    /// TLS key `name` (one of `SSL_KEYS`) for listener `listener`: its
    /// `listener.name.<listener>.` override, else the broker-wide value (Kafka's
    /// `ListenerName.configPrefix`), None when neither is set.
    pub fn ssl_setting(&self, listener: &str, name: &str) -> Option<&str> {
        let prefixed = format!("listener.name.{}.{name}", listener.to_ascii_lowercase());
        self.ssl
            .get(&prefixed)
            .or_else(|| self.ssl.get(name))
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// Whether this node checks a TLS peer's certificate against the name it dialled, on
    /// listener `listener`: `ssl.endpoint.identification.algorithm` is `https` (Kafka's
    /// default), not set empty.
    pub fn ssl_endpoint_identification(&self, listener: &str) -> bool {
        let key = "ssl.endpoint.identification.algorithm";
        let prefixed = format!("listener.name.{}.{key}", listener.to_ascii_lowercase());
        self.ssl
            .get(&prefixed)
            .or_else(|| self.ssl.get(key))
            .is_none_or(|v| !v.trim().is_empty())
    }

    /// SASL key `name` for listener `listener` (and `mechanism`, for `sasl.jaas.config`): its
    /// `listener.name.<listener>.[<mechanism>.]` form, else (`sasl.enabled.mechanisms`) the
    /// broker-wide value.
    pub fn sasl_setting(&self, listener: &str, mechanism: Option<&str>, name: &str) -> Option<&str> {
        self.sasl
            .get(&sasl_key(listener, mechanism, name))
            .or_else(|| self.sasl.get(name))
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// The key that gives `sasl_setting` its value (for error messages): the listener's form
    /// when it is set or when there is no broker-wide one.
    pub fn sasl_key_set(&self, listener: &str, mechanism: Option<&str>, name: &str) -> String {
        let prefixed = sasl_key(listener, mechanism, name);
        if self.sasl.contains_key(&prefixed) || mechanism.is_some() {
            prefixed
        } else {
            name.to_string()
        }
    }

    /// The security protocol of listener `name` (`listener.security.protocol.map`; a
    /// controller listener without an entry is PLAINTEXT).
    pub fn security_protocol(&self, name: &str) -> Option<&str> {
        match self.listener_security_protocol_map.get(name) {
            Some(protocol) => Some(protocol.as_str()),
            None if self.is_controller_listener(name) => Some(PLAINTEXT),
            None => None,
        }
    }

    /// Reads a YAML file holding a flat map of keys to scalar values.
    pub fn load(path: &Path) -> Result<BrokerConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid("--config", format!("cannot read {}: {e}", path.display())))?;
        let map: BTreeMap<String, serde_yaml::Value> = serde_yaml::from_str(&text)
            .map_err(|e| invalid("--config", format!("{} is not a YAML map: {e}", path.display())))?;
        let mut config = BrokerConfig::default();
        for (key, value) in map {
            let text = match value {
                serde_yaml::Value::String(s) => s,
                serde_yaml::Value::Number(n) => n.to_string(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                _ => return Err(invalid(&key, "value must be a string, number or boolean")),
            };
            config.set(&key, &text)?;
        }
        Ok(config)
    }

    /// The address clients are told to use.
    pub fn advertised(&self) -> &str {
        self.advertise.as_deref().unwrap_or(&self.listen)
    }

    /// Whether this node is one of several voters of a metadata quorum
    /// (`controller.quorum.voters` set), rather than a single node that is its own controller.
    pub fn cluster_mode(&self) -> bool {
        !self.controller_quorum_voters.is_empty() || self.dynamic_quorum()
    }

    /// A dynamic quorum (KIP-853): `controller.quorum.bootstrap.servers` is set.
    pub fn dynamic_quorum(&self) -> bool {
        !self.controller_quorum_bootstrap_servers.is_empty()
    }

    /// Where the other controllers dial this one in a dynamic quorum: its controller listener,
    /// whose host `check` makes routable there.
    pub fn controller_address(&self) -> Option<String> {
        self.controller_listen.clone()
    }

    /// The listener that `listen` and `advertise` describe: the PLAINTEXT entry of `listeners`
    /// if there is one, else its first listener that is not a controller listener.
    fn first_client_listener(&self) -> Option<&Listener> {
        let mut clients = self.listeners.iter().filter(|l| !self.is_controller_listener(&l.name));
        let first = clients.clone().next();
        clients.find(|l| l.name == PLAINTEXT).or(first)
    }

    /// The listeners that serve clients and other brokers, as (name, address to bind), the
    /// first client listener first (bound at `listen`). Without `listeners`: PLAINTEXT at
    /// `listen`.
    pub fn client_listeners(&self) -> Vec<(String, String)> {
        let Some(first) = self.first_client_listener() else {
            return vec![(PLAINTEXT.to_string(), self.listen.clone())];
        };
        let mut out = vec![(first.name.clone(), self.listen.clone())];
        for listener in &self.listeners {
            if listener.name != first.name && !self.is_controller_listener(&listener.name) {
                out.push((listener.name.clone(), listener.bind_address()));
            }
        }
        out
    }

    /// Refuses a listener without a security protocol, or with one not served yet. A controller
    /// listener missing from the map is PLAINTEXT, as Kafka's KRaft mode takes it.
    fn check_security_protocol(&self, name: &str) -> Result<(), ConfigError> {
        let Some(protocol) = self.security_protocol(name) else {
            return Err(invalid(
                "listener.security.protocol.map",
                format!("listener {name} has no security protocol (add {name}:PLAINTEXT)"),
            ));
        };
        if protocol == PLAINTEXT {
            return Ok(());
        }
        if matches!(protocol, SSL | SASL_SSL) {
            let has_keystore = self.ssl_setting(name, "ssl.keystore.location").is_some()
                || self.ssl_setting(name, "ssl.keystore.certificate.chain").is_some();
            if !has_keystore {
                return Err(invalid(
                    "ssl.keystore.location",
                    format!(
                        "listener {name} is {protocol}: set ssl.keystore.location (a PEM file with the key and its \
                         certificate chain) or ssl.keystore.certificate.chain and ssl.keystore.key \
                         (or their listener.name.{}. overrides)",
                        name.to_ascii_lowercase()
                    ),
                ));
            }
            if self.ssl_setting(name, "ssl.client.auth").is_some_and(|a| a != "none")
                && self.ssl_setting(name, "ssl.truststore.location").is_none()
                && self.ssl_setting(name, "ssl.truststore.certificates").is_none()
            {
                return Err(invalid(
                    "ssl.client.auth",
                    format!(
                        "listener {name} authenticates clients: set ssl.truststore.location or ssl.truststore.certificates"
                    ),
                ));
            }
        }
        if matches!(protocol, SASL_PLAINTEXT | SASL_SSL) {
            crate::sasl::ListenerSasl::new(self, name)?;
        }
        Ok(())
    }

    /// The controller listener's name (the first of `controller.listener.names`).
    pub fn controller_listener_name(&self) -> &str {
        self.controller_listener_names
            .first()
            .map_or("CONTROLLER", String::as_str)
    }

    /// How this node dials the controllers' listener. SCRAM cannot log in there: its
    /// credentials live in the metadata log the controllers serve (Kafka refuses it too).
    pub fn controller_dial(&self) -> Result<crate::cluster::peer::DialSecurity, ConfigError> {
        let key = "sasl.mechanism.controller.protocol";
        let listener = self.controller_listener_name();
        if matches!(self.security_protocol(listener), Some(SASL_PLAINTEXT | SASL_SSL))
            && self.sasl_mechanism_controller_protocol.starts_with("SCRAM-")
        {
            return Err(invalid(
                key,
                format!(
                    "{}: SCRAM credentials live in the metadata log the controllers serve, so nodes cannot log in \
                     to the controller listener with them; use PLAIN",
                    self.sasl_mechanism_controller_protocol
                ),
            ));
        }
        crate::cluster::peer::DialSecurity::new(self, listener, key, &self.sasl_mechanism_controller_protocol)
    }

    fn is_controller_listener(&self, name: &str) -> bool {
        self.controller_listener_names.iter().any(|n| n == name)
    }

    /// Derives `listen` and `controller_listen` from `listeners` and `controller.listener.names`,
    /// called when either is set: their order in a file or on the command line does not matter.
    fn resolve_listeners(&mut self) {
        if let Some(first) = self.first_client_listener() {
            self.listen = first.bind_address();
        }
        let first_name = self.first_client_listener().map_or(PLAINTEXT, |l| &l.name).to_string();
        self.advertise = self
            .advertised_listeners
            .iter()
            .find(|l| l.name == first_name)
            .map(|l| format!("{}:{}", l.host, l.port));
        self.controller_listen = self
            .listeners
            .iter()
            .find(|l| self.is_controller_listener(&l.name))
            .map(Listener::bind_address);
    }

    /// `listeners` as DescribeConfigs shows it: every listener as given, the first client
    /// listener as `listen` holds it (which `--listen` may have set without `listeners`).
    fn listeners_text(&self) -> String {
        let first = self.first_client_listener().map_or(PLAINTEXT, |l| &l.name);
        let mut text: Vec<String> = Vec::new();
        let mut first_shown = false;
        for listener in &self.listeners {
            if listener.name == first {
                first_shown = true;
                if listener.bind_address() != self.listen {
                    text.push(format!("{first}://{}", self.listen));
                    continue;
                }
            }
            text.push(listener.to_string());
        }
        if !first_shown {
            text.insert(0, format!("{first}://{}", self.listen));
        }
        text.join(",")
    }

    /// The relations between the KRaft keys and the listeners (Kafka's `KafkaConfig`
    /// validation), for the one shape served so far: every node broker and controller, one
    /// PLAINTEXT listener for clients and brokers, one controller listener for the quorum.
    fn check_quorum(&self) -> Result<(), ConfigError> {
        if !self.controller_quorum_bootstrap_servers.is_empty() && !self.controller_quorum_voters.is_empty() {
            return Err(invalid(
                "controller.quorum.bootstrap.servers",
                "set either controller.quorum.voters (static voters) or controller.quorum.bootstrap.servers \
                 (a dynamic quorum, KIP-853), not both",
            ));
        }
        let roles = self.process_roles;
        let combined = roles.broker && roles.controller;
        if !combined && !self.cluster_mode() {
            // Kafka's KafkaConfig: a node with one role needs the quorum it is part of.
            return Err(invalid(
                "process.roles",
                format!("process.roles={roles} needs controller.quorum.voters (a single node is broker,controller)"),
            ));
        }
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms {
            return Err(invalid(
                "broker.heartbeat.interval.ms",
                "must be below broker.session.timeout.ms",
            ));
        }
        if self.is_controller_listener(&self.inter_broker_listener_name) {
            return Err(invalid(
                "controller.listener.names",
                format!(
                    "must not contain inter.broker.listener.name ({})",
                    self.inter_broker_listener_name
                ),
            ));
        }
        let mut controller_listeners = 0;
        for listener in &self.listeners {
            if self.is_controller_listener(&listener.name) {
                controller_listeners += 1;
            }
            self.check_security_protocol(&listener.name)?;
        }
        if controller_listeners > 1 {
            return Err(invalid("listeners", "only one controller listener is supported"));
        }
        let client_listener = self.listeners.iter().find(|l| !self.is_controller_listener(&l.name));
        if roles.broker && !self.listeners.is_empty() && client_listener.is_none() {
            return Err(invalid(
                "listeners",
                "must include a listener for clients (one not named in controller.listener.names)",
            ));
        }
        if !roles.broker
            && let Some(listener) = client_listener
        {
            // Kafka's KafkaConfig: a controller-only node listens for the quorum only.
            return Err(invalid(
                "listeners",
                format!(
                    "process.roles=controller: must contain only the controller listener, not {}",
                    listener.name
                ),
            ));
        }
        if !roles.broker && !self.advertised_listeners.is_empty() {
            return Err(invalid(
                "advertised.listeners",
                "process.roles=controller: must be empty (a controller-only node serves no clients)",
            ));
        }
        for listener in &self.advertised_listeners {
            if self.is_controller_listener(&listener.name) {
                // Kafka's KafkaConfig: clients reach brokers through advertised listeners,
                // never the controllers.
                return Err(invalid(
                    "advertised.listeners",
                    format!("must not contain the controller listener ({})", listener.name),
                ));
            }
            // Kafka's KafkaConfig: the advertised listener names are among the listeners'.
            if !self.client_listeners().iter().any(|(name, _)| *name == listener.name) {
                return Err(invalid(
                    "advertised.listeners",
                    format!("listener {} is not one of the listeners", listener.name),
                ));
            }
        }
        // A single node dials no other broker: its default (PLAINTEXT) need not be a listener,
        // so `listeners=SASL_PLAINTEXT://...` alone serves. One set explicitly must be.
        let inter_broker_needed = self.cluster_mode() || self.static_keys.contains("inter.broker.listener.name");
        if roles.broker
            && inter_broker_needed
            && !self
                .client_listeners()
                .iter()
                .any(|(name, _)| *name == self.inter_broker_listener_name)
        {
            // Kafka's KafkaConfig: other brokers dial this one at that listener's advertised
            // endpoint, so it must be one.
            return Err(invalid(
                "inter.broker.listener.name",
                format!(
                    "{} is not one of the listeners for clients and brokers ({})",
                    self.inter_broker_listener_name,
                    self.client_listeners()
                        .iter()
                        .map(|(name, _)| name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        if !self.cluster_mode() {
            // A single node is its own controller; a controller listener is allowed and unused.
            return Ok(());
        }
        // The listeners this node dials: the others' inter-broker listener (a broker) and the
        // controllers' listener (every node), each with its TLS keys and SASL login.
        if roles.broker {
            crate::cluster::peer::DialSecurity::inter_broker(self)?;
        }
        self.controller_dial()?;
        if !roles.controller {
            // Kafka's KafkaConfig: a broker-only node is no voter. It reaches the voters at
            // their entries and has no controller listener of its own (it dials the leader,
            // which replicates to it over that connection).
            if self.controller_quorum_voters.contains_key(&self.node_id) {
                return Err(invalid(
                    "controller.quorum.voters",
                    format!(
                        "process.roles=broker: node.id {} must not be one of the voters",
                        self.node_id
                    ),
                ));
            }
            if let Some(listener) = self.listeners.iter().find(|l| self.is_controller_listener(&l.name)) {
                return Err(invalid(
                    "listeners",
                    format!(
                        "process.roles=broker: must not contain a controller listener ({}); \
                         a broker-only node dials the controllers",
                        listener.name
                    ),
                ));
            }
            return Ok(());
        }
        if self.dynamic_quorum() {
            // KIP-853: the voters are in the log; the others dial this node at its controller
            // listener, so that needs a host they can reach.
            let Some(controller_listen) = &self.controller_listen else {
                return Err(invalid(
                    "listeners",
                    "listeners must include a listener named in controller.listener.names (CONTROLLER://host:port)",
                ));
            };
            if split_host_port(controller_listen).is_none_or(|(host, _)| !routable(host)) {
                return Err(invalid(
                    "listeners",
                    format!(
                        "the controller listener {controller_listen} needs a host the other controllers can dial \
                         (controller.quorum.bootstrap.servers: they reach it there)"
                    ),
                ));
            }
            return Ok(());
        }
        let Some(own_voter) = self.controller_quorum_voters.get(&self.node_id) else {
            return Err(invalid(
                "node.id",
                format!(
                    "node.id {} is not in controller.quorum.voters (process.roles={roles} makes it a voter)",
                    self.node_id
                ),
            ));
        };
        let Some(controller_listen) = &self.controller_listen else {
            return Err(invalid(
                "listeners",
                "listeners must include a listener named in controller.listener.names (CONTROLLER://host:port)",
            ));
        };
        // Kafka's KafkaConfig: the voters reach this node at its own entry, so that is where
        // its controller listener must be.
        let port = |address: &str| split_host_port(address).map(|(_, port)| port);
        if port(controller_listen) != port(own_voter) {
            return Err(invalid(
                "listeners",
                format!(
                    "the controller listener {controller_listen} and this node's entry {}@{own_voter} in \
                     controller.quorum.voters must have the same port",
                    self.node_id
                ),
            ));
        }
        Ok(())
    }

    /// Checks relations between keys, naming them.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.check_quorum()?;
        // Kafka's DynamicLogConfig.validateCordonedLogDirs.
        if let Some(dir) = self
            .cordoned_log_dirs
            .iter()
            .find(|d| d.as_str() != CORDON_ALL && !same_dir(Path::new(d.as_str()), &self.data_dir))
        {
            return Err(invalid(
                "cordoned.log.dirs",
                format!(
                    "Invalid entry in cordoned.log.dirs: {dir}. All cordoned log dirs must be entries of log.dirs or log.dir."
                ),
            ));
        }
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms {
            return Err(invalid(
                "group.min.session.timeout.ms",
                "must not exceed group.max.session.timeout.ms",
            ));
        }
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms {
            return Err(invalid(
                "group.consumer.heartbeat.interval.ms",
                "must be below group.consumer.session.timeout.ms",
            ));
        }
        // Kafka's GroupCoordinatorConfig: the broker defaults lie within the bounds that
        // per-group configs are held to.
        let bounded = [
            (
                "group.consumer.session.timeout.ms",
                self.group_consumer_session_timeout_ms,
                "group.consumer.min.session.timeout.ms",
                self.group_consumer_min_session_timeout_ms,
                "group.consumer.max.session.timeout.ms",
                self.group_consumer_max_session_timeout_ms,
            ),
            (
                "group.consumer.heartbeat.interval.ms",
                self.group_consumer_heartbeat_interval_ms,
                "group.consumer.min.heartbeat.interval.ms",
                self.group_consumer_min_heartbeat_interval_ms,
                "group.consumer.max.heartbeat.interval.ms",
                self.group_consumer_max_heartbeat_interval_ms,
            ),
        ];
        if self.share.heartbeat_interval_ms >= self.share.session_timeout_ms {
            return Err(invalid(
                "group.share.heartbeat.interval.ms",
                "must be below group.share.session.timeout.ms",
            ));
        }
        for (key, value, min_key, min, max_key, max) in bounded
            .into_iter()
            .chain(self.share.broker_bounds())
            .chain(self.assignment_intervals.broker_bounds())
        {
            if min > max {
                return Err(invalid(min_key, format!("must not exceed {max_key}")));
            }
            if value < min {
                return Err(invalid(key, format!("must be at least {min_key} ({min})")));
            }
            if value > max {
                return Err(invalid(key, format!("must be at most {max_key} ({max})")));
            }
        }
        // Kafka's KafkaConfig: a bound below one request could never admit the largest one.
        if self.queued_max_request_bytes >= 0
            && (self.queued_max_request_bytes as u64) < self.socket_request_max_bytes as u64
        {
            return Err(invalid(
                "queued.max.request.bytes",
                "must be -1 or at least socket.request.max.bytes",
            ));
        }
        if self.log.max_message_bytes > self.socket_request_max_bytes {
            return Err(invalid(
                "message.max.bytes",
                "must not exceed socket.request.max.bytes (a batch must fit in a request)",
            ));
        }
        Ok(())
    }
}

/// Kafka's config value types (DescribeConfigs v3+ `config_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    /// A Java class name (Kafka's CLASS).
    Class = 8,
}

/// A topic-level key (Kafka's name): its broker-level synonym, its type and what it does.
#[derive(Debug, Clone, Copy)]
pub struct TopicKey {
    pub name: &'static str,
    pub broker_key: &'static str,
    pub kind: ConfigType,
    pub doc: &'static str,
}

const fn key(name: &'static str, broker_key: &'static str, kind: ConfigType, doc: &'static str) -> TopicKey {
    TopicKey {
        name,
        broker_key,
        kind,
        doc,
    }
}

/// Every topic key CreateTopics, AlterConfigs and IncrementalAlterConfigs accept; DescribeConfigs
/// lists them all. compat-matrix.md says which ones change behaviour and which are only stored.
pub const TOPIC_KEYS: &[TopicKey] = &[
    key(
        "cleanup.policy",
        "log.cleanup.policy",
        ConfigType::List,
        "delete (retention), compact (keep the latest value per key), or both.",
    ),
    key(
        "compression.type",
        "compression.type",
        ConfigType::String,
        "Final compression of the topic's batches; producer keeps the producer's codec.",
    ),
    key(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        ConfigType::Long,
        "How long tombstones stay after compaction reached them.",
    ),
    key(
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        ConfigType::Long,
        "Delay before a deleted segment's files are removed.",
    ),
    key(
        "flush.messages",
        "log.flush.interval.messages",
        ConfigType::Long,
        "Messages between forced fsyncs (stored; the broker-wide policy applies).",
    ),
    key(
        "flush.ms",
        "log.flush.interval.ms",
        ConfigType::Long,
        "Time between forced fsyncs (stored; the broker-wide policy applies).",
    ),
    key(
        "index.interval.bytes",
        "log.index.interval.bytes",
        ConfigType::Int,
        "Bytes of log between two offset index entries.",
    ),
    key(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        ConfigType::Long,
        "The longest a record may stay uncompacted.",
    ),
    key(
        "max.message.bytes",
        "message.max.bytes",
        ConfigType::Int,
        "The largest record batch the topic accepts.",
    ),
    key(
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        ConfigType::Long,
        "How far in the future a CreateTime timestamp may be.",
    ),
    key(
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        ConfigType::Long,
        "How far in the past a CreateTime timestamp may be.",
    ),
    key(
        "message.timestamp.type",
        "log.message.timestamp.type",
        ConfigType::String,
        "CreateTime (the producer's) or LogAppendTime (the broker's).",
    ),
    key(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        ConfigType::Double,
        "Dirty share of the log above which compaction runs.",
    ),
    key(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        ConfigType::Long,
        "The shortest a record stays uncompacted.",
    ),
    key(
        "min.insync.replicas",
        "min.insync.replicas",
        ConfigType::Int,
        "Replicas that must acknowledge an acks=all write (stored for replication).",
    ),
    key(
        "retention.bytes",
        "log.retention.bytes",
        ConfigType::Long,
        "Size above which the oldest segments are deleted; -1 for none.",
    ),
    key(
        "retention.ms",
        "log.retention.ms",
        ConfigType::Long,
        "Age after which segments are deleted; -1 for none.",
    ),
    key(
        "segment.bytes",
        "log.segment.bytes",
        ConfigType::Int,
        "Segment size at which the log rolls.",
    ),
    key(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        ConfigType::Int,
        "Index size at which the log rolls.",
    ),
    key(
        "segment.ms",
        "log.roll.ms",
        ConfigType::Long,
        "Segment age at which the log rolls.",
    ),
    key(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        ConfigType::Boolean,
        "Whether a replica outside the ISR may lead (stored for replication).",
    ),
];

pub fn topic_key(name: &str) -> Option<&'static TopicKey> {
    TOPIC_KEYS.iter().find(|k| k.name == name)
}

/// The default of a group key without a broker synonym.
pub fn group_key_default(name: &str) -> Option<String> {
    match name {
        "share.auto.offset.reset" => Some("latest".to_string()),
        "share.isolation.level" => Some("read_uncommitted".to_string()),
        "share.renew.acknowledge.enable" => Some("true".to_string()),
        _ => None,
    }
}

/// One group type's assignment interval (KIP-1263): the broker default and the bounds of a
/// group's own value, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalSetting {
    pub default_ms: u64,
    pub min_ms: u64,
    pub max_ms: u64,
}

/// `group.consumer.*` and `group.share.*` `assignment.interval.ms` with their `min.`/`max.`
/// bounds: Kafka 4.3's names and defaults (1 s, between 0 and 15 s). A group computes a new
/// target assignment at most once per interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignmentIntervals {
    pub consumer: IntervalSetting,
    pub share: IntervalSetting,
}

impl Default for AssignmentIntervals {
    fn default() -> AssignmentIntervals {
        let kafka = IntervalSetting {
            default_ms: 1_000,
            min_ms: 0,
            max_ms: 15_000,
        };
        AssignmentIntervals {
            consumer: kafka,
            share: kafka,
        }
    }
}

impl AssignmentIntervals {
    /// The setting a broker key names.
    fn slot(&mut self, key: &str) -> Option<&mut u64> {
        let (group, rest) = if let Some(rest) = key.strip_prefix("group.consumer.") {
            (&mut self.consumer, rest)
        } else {
            (&mut self.share, key.strip_prefix("group.share.")?)
        };
        Some(match rest {
            "assignment.interval.ms" => &mut group.default_ms,
            "min.assignment.interval.ms" => &mut group.min_ms,
            "max.assignment.interval.ms" => &mut group.max_ms,
            _ => return None,
        })
    }

    fn get(&self, key: &str) -> Option<u64> {
        let mut copy = *self;
        copy.slot(key).map(|v| *v)
    }

    /// A group's `consumer.assignment.interval.ms` or `share.assignment.interval.ms` (`key`)
    /// of `value`, with the broker keys bounding it.
    fn bound(&self, key: &'static str, value: u64) -> Bound {
        let (setting, min_key, max_key) = if key.starts_with("consumer.") || key.starts_with("group.consumer.") {
            (
                self.consumer,
                "group.consumer.min.assignment.interval.ms",
                "group.consumer.max.assignment.interval.ms",
            )
        } else {
            (
                self.share,
                "group.share.min.assignment.interval.ms",
                "group.share.max.assignment.interval.ms",
            )
        };
        (key, value, min_key, setting.min_ms, max_key, setting.max_ms)
    }

    /// The broker's own defaults, within their bounds (checked at start).
    fn broker_bounds(&self) -> [Bound; 2] {
        [
            self.bound("group.consumer.assignment.interval.ms", self.consumer.default_ms),
            self.bound("group.share.assignment.interval.ms", self.share.default_ms),
        ]
    }
}

/// `group.share.*`, Kafka 4.1's names and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSettings {
    pub session_timeout_ms: u64,
    pub min_session_timeout_ms: u64,
    pub max_session_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub min_heartbeat_interval_ms: u64,
    pub max_heartbeat_interval_ms: u64,
    pub record_lock_duration_ms: u64,
    pub min_record_lock_duration_ms: u64,
    pub max_record_lock_duration_ms: u64,
    pub delivery_count_limit: u64,
    pub min_delivery_count_limit: u64,
    pub max_delivery_count_limit: u64,
    pub max_size: u64,
    pub partition_max_record_locks: u64,
    pub min_partition_max_record_locks: u64,
    pub max_partition_max_record_locks: u64,
}

impl Default for ShareSettings {
    fn default() -> ShareSettings {
        ShareSettings {
            session_timeout_ms: 45_000,
            min_session_timeout_ms: 45_000,
            max_session_timeout_ms: 60_000,
            heartbeat_interval_ms: 5_000,
            min_heartbeat_interval_ms: 5_000,
            max_heartbeat_interval_ms: 15_000,
            record_lock_duration_ms: 30_000,
            min_record_lock_duration_ms: 15_000,
            max_record_lock_duration_ms: 60_000,
            delivery_count_limit: 5,
            min_delivery_count_limit: 2,
            max_delivery_count_limit: 10,
            max_size: 200,
            partition_max_record_locks: 2_000,
            min_partition_max_record_locks: 100,
            max_partition_max_record_locks: 4_000,
        }
    }
}

impl ShareSettings {
    /// The setting a `group.share.*` key names.
    fn slot(&mut self, key: &str) -> Option<&mut u64> {
        Some(match key.strip_prefix("group.share.")? {
            "session.timeout.ms" => &mut self.session_timeout_ms,
            "min.session.timeout.ms" => &mut self.min_session_timeout_ms,
            "max.session.timeout.ms" => &mut self.max_session_timeout_ms,
            "heartbeat.interval.ms" => &mut self.heartbeat_interval_ms,
            "min.heartbeat.interval.ms" => &mut self.min_heartbeat_interval_ms,
            "max.heartbeat.interval.ms" => &mut self.max_heartbeat_interval_ms,
            "record.lock.duration.ms" => &mut self.record_lock_duration_ms,
            "min.record.lock.duration.ms" => &mut self.min_record_lock_duration_ms,
            "max.record.lock.duration.ms" => &mut self.max_record_lock_duration_ms,
            "delivery.count.limit" => &mut self.delivery_count_limit,
            "min.delivery.count.limit" => &mut self.min_delivery_count_limit,
            "max.delivery.count.limit" => &mut self.max_delivery_count_limit,
            "max.size" => &mut self.max_size,
            "partition.max.record.locks" => &mut self.partition_max_record_locks,
            "min.partition.max.record.locks" => &mut self.min_partition_max_record_locks,
            "max.partition.max.record.locks" => &mut self.max_partition_max_record_locks,
            _ => return None,
        })
    }

    fn get(&self, key: &str) -> Option<u64> {
        let mut copy = *self;
        copy.slot(key).map(|v| *v)
    }

    /// The session timeout, heartbeat interval, lock duration, delivery count limit and
    /// in-flight window as `keys` name them (the group's keys or the broker's), each with the
    /// broker keys bounding it.
    fn bounds(&self, keys: [&'static str; 5], values: [u64; 5]) -> [Bound; 5] {
        [
            (
                keys[0],
                values[0],
                "group.share.min.session.timeout.ms",
                self.min_session_timeout_ms,
                "group.share.max.session.timeout.ms",
                self.max_session_timeout_ms,
            ),
            (
                keys[1],
                values[1],
                "group.share.min.heartbeat.interval.ms",
                self.min_heartbeat_interval_ms,
                "group.share.max.heartbeat.interval.ms",
                self.max_heartbeat_interval_ms,
            ),
            (
                keys[2],
                values[2],
                "group.share.min.record.lock.duration.ms",
                self.min_record_lock_duration_ms,
                "group.share.max.record.lock.duration.ms",
                self.max_record_lock_duration_ms,
            ),
            (
                keys[3],
                values[3],
                "group.share.min.delivery.count.limit",
                self.min_delivery_count_limit,
                "group.share.max.delivery.count.limit",
                self.max_delivery_count_limit,
            ),
            (
                keys[4],
                values[4],
                "group.share.min.partition.max.record.locks",
                self.min_partition_max_record_locks,
                "group.share.max.partition.max.record.locks",
                self.max_partition_max_record_locks,
            ),
        ]
    }

    /// The broker's own defaults, within their bounds (checked at start).
    fn broker_bounds(&self) -> [Bound; 5] {
        self.bounds(
            [
                "group.share.session.timeout.ms",
                "group.share.heartbeat.interval.ms",
                "group.share.record.lock.duration.ms",
                "group.share.delivery.count.limit",
                "group.share.partition.max.record.locks",
            ],
            [
                self.session_timeout_ms,
                self.heartbeat_interval_ms,
                self.record_lock_duration_ms,
                self.delivery_count_limit,
                self.partition_max_record_locks,
            ],
        )
    }
}

/// Whether two paths name one directory: equal as written, or once both are resolved.
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// `cordoned.log.dirs`'s entry for every log directory of the broker.
pub const CORDON_ALL: &str = "*";

/// Broker keys that only a broker's own layer may set, not the cluster-wide default (Kafka's
/// `DynamicBrokerConfig.PER_BROKER_CONFIGS`).
pub const PER_BROKER_KEYS: &[&str] = &["cordoned.log.dirs"];

/// The group-level keys (KIP-848 and KIP-932 dynamic group configs, ConfigResource type GROUP):
/// each overrides its broker synonym for one group. All are ints but `share.auto.offset.reset`,
/// `share.isolation.level` and `share.renew.acknowledge.enable` (a boolean), which have no broker synonym (`group_key_default`).
pub const GROUP_KEYS: &[TopicKey] = &[
    key(
        "consumer.session.timeout.ms",
        "group.consumer.session.timeout.ms",
        ConfigType::Int,
        "The timeout to detect client failures when using the consumer group protocol.",
    ),
    key(
        "consumer.heartbeat.interval.ms",
        "group.consumer.heartbeat.interval.ms",
        ConfigType::Int,
        "The heartbeat interval given to the members of a consumer group.",
    ),
    key(
        "share.session.timeout.ms",
        "group.share.session.timeout.ms",
        ConfigType::Int,
        "The timeout to detect client failures when using the share group protocol.",
    ),
    key(
        "share.heartbeat.interval.ms",
        "group.share.heartbeat.interval.ms",
        ConfigType::Int,
        "The heartbeat interval given to the members of a share group.",
    ),
    key(
        "share.record.lock.duration.ms",
        "group.share.record.lock.duration.ms",
        ConfigType::Int,
        "The record acquisition lock duration in milliseconds for share groups.",
    ),
    key(
        "share.delivery.count.limit",
        "group.share.delivery.count.limit",
        ConfigType::Int,
        "The maximum number of delivery attempts for a record delivered to a share group.",
    ),
    key(
        "share.partition.max.record.locks",
        "group.share.partition.max.record.locks",
        ConfigType::Int,
        "Share-group record lock limit per share-partition.",
    ),
    key(
        "consumer.assignment.interval.ms",
        "group.consumer.assignment.interval.ms",
        ConfigType::Int,
        "The interval between assignment updates for a consumer group.",
    ),
    key(
        "share.assignment.interval.ms",
        "group.share.assignment.interval.ms",
        ConfigType::Int,
        "The interval between assignment updates for a share group.",
    ),
    key(
        "share.auto.offset.reset",
        "",
        ConfigType::String,
        "Where a share group starts reading a partition it never read: latest, earliest or by_duration:<ISO-8601 duration>.",
    ),
    key(
        "share.isolation.level",
        "",
        ConfigType::String,
        "Controls how to read records written transactionally: read_committed delivers only committed transactional records, read_uncommitted all of them.",
    ),
    key(
        "share.renew.acknowledge.enable",
        "",
        ConfigType::Boolean,
        "Whether the renew acknowledge type is enabled for the share group.",
    ),
];

impl BrokerConfig {
    /// Checks a group's complete override set as Kafka's `GroupConfig.validate` does: known
    /// names, positive ints, each value within the broker's `group.consumer.min/max.*` bounds
    /// (overrides merged over the broker defaults), and the session timeout above the
    /// heartbeat interval.
    pub fn validate_group_configs(&self, configs: &BTreeMap<String, String>) -> Result<(), ConfigError> {
        let mut session = self.group_consumer_session_timeout_ms;
        let mut heartbeat = self.group_consumer_heartbeat_interval_ms;
        let mut share_session = self.share.session_timeout_ms;
        let mut share_heartbeat = self.share.heartbeat_interval_ms;
        let mut share_lock = self.share.record_lock_duration_ms;
        let mut share_deliveries = self.share.delivery_count_limit;
        let mut share_locks = self.share.partition_max_record_locks;
        for (key, value) in configs {
            if key == "share.auto.offset.reset" {
                let valid = value == "latest"
                    || value == "earliest"
                    || value
                        .strip_prefix("by_duration:")
                        .is_some_and(|d| crate::share::parse_duration_ms(d).is_some());
                if !valid {
                    return Err(invalid(key, format!("Invalid value {value} for configuration {key}")));
                }
                continue;
            }
            if key == "share.isolation.level" {
                if value != "read_committed" && value != "read_uncommitted" {
                    return Err(invalid(
                        key,
                        format!(
                            "Invalid value {value} for configuration {key}: String must be one of: read_committed, read_uncommitted"
                        ),
                    ));
                }
                continue;
            }
            if key == "share.renew.acknowledge.enable" {
                parse_bool(key, value)?;
                continue;
            }
            if let Some(key) = ["consumer.assignment.interval.ms", "share.assignment.interval.ms"]
                .into_iter()
                .find(|k| *k == key.as_str())
            {
                let v = at_least(key, parse_int::<i32>(key, value)?, 0)?;
                check_bounds(&[self.assignment_intervals.bound(key, u64::try_from(v).unwrap_or(0))])?;
                continue;
            }
            let v = at_least(key, parse_int::<i32>(key, value)?, 1)?;
            let v = u64::try_from(v).unwrap_or(1);
            match key.as_str() {
                "consumer.session.timeout.ms" => session = v,
                "consumer.heartbeat.interval.ms" => heartbeat = v,
                "share.session.timeout.ms" => share_session = v,
                "share.heartbeat.interval.ms" => share_heartbeat = v,
                "share.record.lock.duration.ms" => share_lock = v,
                "share.delivery.count.limit" => share_deliveries = v,
                "share.partition.max.record.locks" => share_locks = v,
                _ => return Err(invalid(key, "unknown group config")),
            }
        }
        check_bounds(&self.share.bounds(
            [
                "share.session.timeout.ms",
                "share.heartbeat.interval.ms",
                "share.record.lock.duration.ms",
                "share.delivery.count.limit",
                "share.partition.max.record.locks",
            ],
            [
                share_session,
                share_heartbeat,
                share_lock,
                share_deliveries,
                share_locks,
            ],
        ))?;
        if share_session <= share_heartbeat {
            return Err(invalid(
                "share.session.timeout.ms",
                "must be greater than share.heartbeat.interval.ms",
            ));
        }
        let checks = [
            (
                "consumer.heartbeat.interval.ms",
                heartbeat,
                "group.consumer.min.heartbeat.interval.ms",
                self.group_consumer_min_heartbeat_interval_ms,
                "group.consumer.max.heartbeat.interval.ms",
                self.group_consumer_max_heartbeat_interval_ms,
            ),
            (
                "consumer.session.timeout.ms",
                session,
                "group.consumer.min.session.timeout.ms",
                self.group_consumer_min_session_timeout_ms,
                "group.consumer.max.session.timeout.ms",
                self.group_consumer_max_session_timeout_ms,
            ),
        ];
        check_bounds(&checks)?;
        if session <= heartbeat {
            return Err(invalid(
                "consumer.session.timeout.ms",
                "must be greater than consumer.heartbeat.interval.ms",
            ));
        }
        Ok(())
    }
}

/// A group key's value within the broker keys that bound it: (key, value, min key, min, max
/// key, max), as Kafka's `GroupConfig.validate` words a refusal.
type Bound = (&'static str, u64, &'static str, u64, &'static str, u64);

fn check_bounds(checks: &[Bound]) -> Result<(), ConfigError> {
    for &(key, value, min_key, min, max_key, max) in checks {
        if value < min {
            return Err(invalid(
                key,
                format!("must be greater than or equal to {min_key} ({min})"),
            ));
        }
        if value > max {
            return Err(invalid(key, format!("must be less than or equal to {max_key} ({max})")));
        }
    }
    Ok(())
}

/// Validates one topic key and value as Kafka would (`InvalidConfigurationException` names it).
pub fn validate_topic_config(key: &str, value: &str) -> Result<(), ConfigError> {
    let int = |min: i64| -> Result<(), ConfigError> { at_least(key, parse_int::<i64>(key, value)?, min).map(|_| ()) };
    match key {
        "segment.bytes" => int(14),
        "segment.ms" | "flush.ms" | "flush.messages" => int(1),
        "index.interval.bytes" | "delete.retention.ms" | "min.compaction.lag.ms" | "file.delete.delay.ms" => int(0),
        "segment.index.bytes" => int(8),
        "max.message.bytes" => int(0),
        "max.compaction.lag.ms" => int(1),
        "message.timestamp.before.max.ms" | "message.timestamp.after.max.ms" => int(0),
        "retention.ms" | "retention.bytes" => int(-1),
        "min.insync.replicas" => int(1),
        "message.timestamp.type" => parse_timestamp_type(key, value).map(|_| ()),
        "unclean.leader.election.enable" => parse_bool(key, value).map(|_| ()),
        "cleanup.policy" => {
            let ok = value.split(',').map(str::trim).all(|p| p == "delete" || p == "compact");
            if ok && !value.trim().is_empty() {
                Ok(())
            } else {
                Err(invalid(key, format!("{value:?} is not a list of delete, compact")))
            }
        }
        "compression.type" => match value.trim() {
            "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd" => Ok(()),
            _ => Err(invalid(key, format!("{value:?} is not a compression type"))),
        },
        "min.cleanable.dirty.ratio" => match value.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(()),
            _ => Err(invalid(key, format!("{value:?} is not a number in [0, 1]"))),
        },
        _ => Err(invalid(key, "unknown topic config")),
    }
}

impl BrokerConfig {
    /// This broker's settings as they apply now: the static ones overlaid with the dynamic
    /// layers last applied (`apply_dynamic`). Cheap: a read lock and a reference count.
    pub fn live(&self) -> Live<'_> {
        match self.dynamic.current() {
            Some(layered) => Live::Dynamic(layered),
            None => Live::Static(self),
        }
    }

    /// This config (the static one) overlaid with dynamic layers: the cluster-wide default,
    /// then this broker's own (Kafka's `DynamicBrokerConfig.updateCurrentConfig` order). Every
    /// key must be a dynamic one with a valid value, and the result must pass `check`.
    pub fn with_dynamic(
        &self,
        cluster_default: &BTreeMap<String, String>,
        this_broker: &BTreeMap<String, String>,
    ) -> Result<BrokerConfig, ConfigError> {
        let mut next = self.clone();
        next.dynamic = DynamicConfigs::default();
        for (key, value) in cluster_default.iter().chain(this_broker) {
            match BrokerConfig::key_info(key) {
                Some(k) if k.dynamic => next.assign(key, value)?,
                Some(_) => return Err(invalid(key, "cannot be updated dynamically")),
                None => return Err(invalid(key, "unknown broker config")),
            }
        }
        next.check()?;
        Ok(next)
    }

    /// Makes the dynamic layers live (start-up, and every change in the metadata image).
    /// Returns whether anything changed. Layers were validated before they were stored; one
    /// that no longer validates (a static setting changed under it) is logged and its invalid
    /// keys ignored, as Kafka's `DynamicBrokerConfig.fromPersistentProps` does.
    pub fn apply_dynamic(
        &self,
        cluster_default: &BTreeMap<String, String>,
        this_broker: &BTreeMap<String, String>,
    ) -> bool {
        if self.dynamic.layers() == (cluster_default.clone(), this_broker.clone()) {
            return false;
        }
        if cluster_default.is_empty() && this_broker.is_empty() {
            *self.dynamic.0.write().unwrap_or_else(|p| p.into_inner()) = None;
            return true;
        }
        let config = match self.with_dynamic(cluster_default, this_broker) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(error = %e, "dynamic broker configs do not apply; ignoring the invalid ones");
                let usable = |layer: &BTreeMap<String, String>| -> BTreeMap<String, String> {
                    layer
                        .iter()
                        .filter(|(k, v)| {
                            let one = BTreeMap::from([((*k).clone(), (*v).clone())]);
                            self.with_dynamic(&one, &BTreeMap::new()).is_ok()
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                };
                match self.with_dynamic(&usable(cluster_default), &usable(this_broker)) {
                    Ok(config) => config,
                    Err(e) => {
                        tracing::error!(error = %e, "dynamic broker configs ignored");
                        return false;
                    }
                }
            }
        };
        let layered = Layered {
            cluster_default: cluster_default.clone(),
            this_broker: this_broker.clone(),
            config,
        };
        let mut cell = self.dynamic.0.write().unwrap_or_else(|p| p.into_inner());
        *cell = Some(Arc::new(layered));
        true
    }

    /// The broker default of a topic key, as text (its broker synonym's live value).
    pub fn topic_default(&self, key: &str) -> Option<String> {
        let k = topic_key(key)?;
        self.live().get(k.broker_key)
    }

    /// The compaction settings of a topic, or None when its policy does not compact.
    pub fn topic_cleaner_config(
        &self,
        overrides: &BTreeMap<String, String>,
    ) -> Option<crate::log::cleaner::CleanerConfig> {
        let live = self.live();
        let get = |k: &str| {
            overrides
                .get(k)
                .cloned()
                .or_else(|| live.topic_default(k))
                .unwrap_or_default()
        };
        if !compacts(&get("cleanup.policy")) {
            return None;
        }
        let defaults = crate::log::cleaner::CleanerConfig::default();
        let int = |k: &str, d: i64| get(k).trim().parse::<i64>().unwrap_or(d);
        Some(crate::log::cleaner::CleanerConfig {
            delete_retention_ms: int("delete.retention.ms", defaults.delete_retention_ms),
            min_compaction_lag_ms: int("min.compaction.lag.ms", defaults.min_compaction_lag_ms),
            max_compaction_lag_ms: int("max.compaction.lag.ms", defaults.max_compaction_lag_ms),
            min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio")
                .trim()
                .parse()
                .unwrap_or(defaults.min_cleanable_dirty_ratio),
            key_map_bytes: live.log_cleaner_dedupe_buffer_size,
        })
    }

    /// The log settings of a topic: its overrides over the broker defaults as they apply now.
    /// The overrides were validated when stored; a value that no longer parses falls back to
    /// the default.
    pub fn topic_log_config(&self, overrides: &BTreeMap<String, String>) -> LogConfig {
        let live = self.live();
        let mut log = live.log.clone();
        let get = |k: &str| overrides.get(k).map(|v| v.trim());
        // The cleaner's rule (`topic_cleaner_config`), so the log accepts the offset gaps of
        // exactly the topics whose leaders clean them.
        log.compact = compacts(
            &overrides
                .get("cleanup.policy")
                .cloned()
                .or_else(|| live.topic_default("cleanup.policy"))
                .unwrap_or_default(),
        );
        if let Some(v) = get("segment.bytes").and_then(|v| v.parse().ok()) {
            log.segment_bytes = v;
        }
        if let Some(v) = get("segment.ms").and_then(|v| v.parse().ok()) {
            log.segment_ms = v;
        }
        if let Some(v) = get("index.interval.bytes").and_then(|v| v.parse().ok()) {
            log.index_interval_bytes = v;
        }
        if let Some(v) = get("segment.index.bytes").and_then(|v| v.parse().ok()) {
            log.segment_index_bytes = v;
        }
        if let Some(v) = get("max.message.bytes").and_then(|v| v.parse().ok()) {
            log.max_message_bytes = v;
        }
        if let Some(v) = get("file.delete.delay.ms").and_then(|v| v.parse().ok()) {
            log.file_delete_delay_ms = v;
        }
        if let Some(v) = get("message.timestamp.type").and_then(|v| parse_timestamp_type("", v).ok()) {
            log.timestamp_type = v;
        }
        log
    }
}

/// Whether a `cleanup.policy` value (a list: delete, compact or both) compacts.
fn compacts(policy: &str) -> bool {
    policy.split(',').any(|p| p.trim() == "compact")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let err = BrokerConfig::default().set("no.such.key", "1").unwrap_err();
        assert_eq!(err.key, "no.such.key");
    }

    #[test]
    fn queued_request_bytes_must_admit_the_largest_request() {
        let mut c = BrokerConfig::default();
        c.set("queued.max.request.bytes", "1000").unwrap();
        assert_eq!(c.check().unwrap_err().key, "queued.max.request.bytes");
        c.set("queued.max.request.bytes", "-1").unwrap();
        assert!(c.check().is_ok(), "-1: no bound, as Kafka");
        assert!(c.set("queued.max.request.bytes", "-2").is_err());
    }

    #[test]
    fn invalid_values_are_rejected_with_the_key() {
        let mut c = BrokerConfig::default();
        assert_eq!(c.set("num.partitions", "zero").unwrap_err().key, "num.partitions");
        assert_eq!(c.set("num.partitions", "0").unwrap_err().key, "num.partitions");
        assert!(c.set("auto.create.topics.enable", "yes").is_err());
        // An SSL or SASL_SSL listener needs its keystore.
        c.set("listeners", "SSL://h:1").unwrap();
        c.set("inter.broker.listener.name", "SSL").unwrap();
        assert_eq!(c.check().unwrap_err().key, "ssl.keystore.location");
        c.set("listeners", "SASL_SSL://h:1").unwrap();
        c.set("inter.broker.listener.name", "SASL_SSL").unwrap();
        assert_eq!(c.check().unwrap_err().key, "ssl.keystore.location");
        c.set("inter.broker.listener.name", "PLAINTEXT").unwrap();
        c.set("listeners", "PLAINTEXT://0.0.0.0:19092").unwrap();
        assert_eq!(c.listen, "0.0.0.0:19092");
    }

    #[test]
    fn every_listed_key_is_settable() {
        // The list feeds docs and error messages; it must agree with `set`.
        let samples = [
            ("listeners", "PLAINTEXT://h:1"),
            ("advertised.listeners", "PLAINTEXT://h:1"),
            ("log.dirs", "/tmp/x"),
            ("process.roles", "broker,controller"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", "1@h:1,2@h:2"),
            ("controller.quorum.bootstrap.servers", "h:1,h:2"),
            ("broker.rack", "rack-a"),
            ("inter.broker.listener.name", "PLAINTEXT"),
            ("authorizer.class.name", crate::acl::AUTHORIZER_CLASS_NAMES[0]),
            ("super.users", "User:admin;User:ops"),
            ("allow.everyone.if.no.acl.found", "true"),
            (
                "replica.selector.class",
                "org.apache.kafka.common.replica.RackAwareReplicaSelector",
            ),
        ];
        for key in BROKER_KEYS.iter().map(|k| k.name) {
            let value = samples.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            let value = value.unwrap_or(match key {
                "auto.create.topics.enable"
                | "log.cleaner.enable"
                | "unclean.leader.election.enable"
                | "auto.leader.rebalance.enable"
                | "controlled.shutdown.enable" => "true",
                "log.cleaner.dedupe.buffer.size" => "16777216",
                "group.consumer.heartbeat.interval.ms" => "1000",
                "log.message.timestamp.type" => "LogAppendTime",
                "log.cleanup.policy" => "compact,delete",
                "compression.type" => "zstd",
                "log.cleaner.min.cleanable.ratio" => "0.75",
                "listener.security.protocol.map" => "INTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "inter.broker.listener.name" => "INTERNAL",
                _ => "2048",
            });
            let mut c = BrokerConfig::default();
            c.set(key, value).unwrap();
            assert_eq!(c.get(key).as_deref(), Some(value), "{key} reads back");
            assert!(c.static_keys.contains(key));
        }
    }

    #[test]
    fn replica_selector_class_names_kafkas_two_selectors() {
        let mut c = BrokerConfig::default();
        assert_eq!(c.replica_selector, None);
        c.set(
            "replica.selector.class",
            "org.apache.kafka.common.replica.LeaderSelector",
        )
        .unwrap();
        assert_eq!(c.replica_selector, Some(ReplicaSelector::Leader));
        let refused = c.set("replica.selector.class", "com.example.Nearest").unwrap_err();
        assert!(
            refused.to_string().contains("com.example.Nearest could not be found"),
            "{refused}"
        );
        c.set("replica.selector.class", "").unwrap();
        assert_eq!(c.replica_selector, None);
    }

    /// The keys main.rs makes of `--node-id 1 --data-dir d1 --set ...`, in that order.
    fn from_flags(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        let mut c = BrokerConfig::default();
        c.set("log.dirs", "d1")?;
        c.set("node.id", "1")?;
        for (key, value) in pairs {
            c.set(key, value)?;
        }
        c.check()?;
        Ok(c)
    }

    const CLUSTER: &[(&str, &str)] = &[
        ("process.roles", "broker,controller"),
        ("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
        ("advertised.listeners", "PLAINTEXT://127.0.0.1:9092"),
        ("controller.listener.names", "CONTROLLER"),
        (
            "controller.quorum.voters",
            "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293",
        ),
    ];

    /// The cluster flags with one key replaced (or added).
    fn cluster_with(key: &str, value: &str) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = CLUSTER
            .iter()
            .filter(|(k, _)| *k != key)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pairs.push((key.to_string(), value.to_string()));
        pairs
    }

    fn refused(pairs: &[(String, String)]) -> ConfigError {
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        from_flags(&pairs).unwrap_err()
    }

    #[test]
    fn a_three_voter_cluster_node_from_flags_passes_check() {
        // Kafka's KRaft combined mode (KafkaConfig, QuorumConfig): node 1 of voters 1, 2, 3.
        let c = from_flags(CLUSTER).unwrap();
        assert!(c.cluster_mode());
        assert_eq!(
            c.process_roles,
            ProcessRoles {
                broker: true,
                controller: true
            }
        );
        assert_eq!(c.node_id, 1);
        assert_eq!(c.data_dir, PathBuf::from("d1"));
        assert_eq!(c.listen, "127.0.0.1:9092");
        assert_eq!(c.controller_listen.as_deref(), Some("127.0.0.1:9093"));
        assert_eq!(c.advertised(), "127.0.0.1:9092");
        assert_eq!(c.controller_listener_names, vec!["CONTROLLER".to_string()]);
        let voters: Vec<(i32, &str)> = c
            .controller_quorum_voters
            .iter()
            .map(|(id, a)| (*id, a.as_str()))
            .collect();
        assert_eq!(
            voters,
            vec![(1, "127.0.0.1:9093"), (2, "127.0.0.1:9193"), (3, "127.0.0.1:9293")]
        );
        assert_eq!(c.controller_quorum_election_timeout_ms, 1000);
        assert_eq!(c.broker_session_timeout_ms, 9000);
        assert_eq!(c.broker_heartbeat_interval_ms, 2000);
        assert_eq!(c.broker_rack, None);
        assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
    }

    #[test]
    fn the_controller_listener_resolves_whatever_order_the_keys_come_in() {
        let listeners = ("listeners", "PLAINTEXT://:9092, CTRL://10.0.0.1:9093");
        let names = ("controller.listener.names", "ctrl");
        let voters = ("controller.quorum.voters", "1@10.0.0.1:9093");
        for pairs in [
            [listeners, names, voters],
            [names, listeners, voters],
            [voters, listeners, names],
        ] {
            let c = from_flags(&pairs).unwrap();
            assert_eq!(c.controller_listen.as_deref(), Some("10.0.0.1:9093"), "{pairs:?}");
            assert_eq!(c.listen, "0.0.0.0:9092", "an empty host binds every interface");
            assert_eq!(c.controller_listener_names, vec!["CTRL".to_string()]);
        }
        // Before controller.listener.names arrives, CTRL is just a listener with no protocol.
        let mut c = BrokerConfig::default();
        c.set(listeners.0, listeners.1).unwrap();
        assert_eq!(c.controller_listen, None);
        assert_eq!(c.check().unwrap_err().key, "listener.security.protocol.map");
        c.set(names.0, names.1).unwrap();
        assert!(c.check().is_ok());
    }

    #[test]
    fn brokers_reach_each_other_on_their_own_listener() {
        // The docker-compose shape: clients outside on PLAINTEXT (advertised at the host's
        // published port), brokers inside on INTERNAL (advertised at the container's name).
        let c = from_flags(&[
            ("node.id", "1"),
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093,INTERNAL://:9094"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            ),
            (
                "advertised.listeners",
                "PLAINTEXT://localhost:19092,INTERNAL://node1:9094",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", "1@node1:9093,2@node2:9093,3@node3:9093"),
        ])
        .unwrap();
        assert_eq!(
            c.client_listeners(),
            vec![
                ("PLAINTEXT".to_string(), "0.0.0.0:9092".to_string()),
                ("INTERNAL".to_string(), "0.0.0.0:9094".to_string()),
            ]
        );
        assert_eq!(c.advertised(), "localhost:19092");
        assert_eq!(
            c.get("advertised.listeners").as_deref(),
            Some("PLAINTEXT://localhost:19092,INTERNAL://node1:9094")
        );
        assert_eq!(c.controller_listen.as_deref(), Some("0.0.0.0:9093"));
        // Listeners need not be called PLAINTEXT: the first client listener is the primary.
        let c = from_flags(&[
            ("listeners", "EXTERNAL://127.0.0.1:9192,INTERNAL://127.0.0.1:9194"),
            (
                "listener.security.protocol.map",
                "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT",
            ),
            ("inter.broker.listener.name", "internal"),
        ])
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:9192");
        assert_eq!(
            c.client_listeners()[1],
            ("INTERNAL".to_string(), "127.0.0.1:9194".to_string())
        );
        // Without inter.broker.listener.name, PLAINTEXT is the inter-broker listener: a single
        // node dials no broker, so it need not exist there (`listeners=SASL_PLAINTEXT://...`
        // alone serves); named explicitly, it must be a listener, as Kafka checks.
        from_flags(&[
            ("listeners", "EXTERNAL://127.0.0.1:9192"),
            ("listener.security.protocol.map", "EXTERNAL:PLAINTEXT"),
        ])
        .unwrap();
        let err = from_flags(&[
            ("listeners", "EXTERNAL://127.0.0.1:9192"),
            ("listener.security.protocol.map", "EXTERNAL:PLAINTEXT"),
            ("inter.broker.listener.name", "PLAINTEXT"),
        ])
        .unwrap_err();
        assert_eq!(err.key, "inter.broker.listener.name", "{err}");
    }

    #[test]
    fn the_listeners_read_back_as_given() {
        let mut c = BrokerConfig::default();
        assert_eq!(c.get("listeners").as_deref(), Some("PLAINTEXT://127.0.0.1:9092"));
        let all = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093";
        c.set("listeners", all).unwrap();
        assert_eq!(c.get("listeners").as_deref(), Some(all));
        let reread = {
            let mut again = BrokerConfig::default();
            again.set("listeners", &c.get("listeners").unwrap()).unwrap();
            again
        };
        assert_eq!(reread.listeners, c.listeners);
        let spaced = " controller://[::1]:9093 , PLAINTEXT://:9092 ";
        c.set("listeners", spaced).unwrap();
        assert_eq!(
            c.get("listeners").as_deref(),
            Some("CONTROLLER://[::1]:9093,PLAINTEXT://:9092")
        );
        assert_eq!(c.controller_listen.as_deref(), Some("[::1]:9093"));
        // `--listen` sets the PLAINTEXT address: a bare HOST:PORT, or `listen` itself.
        c.set("listeners", "127.0.0.1:0").unwrap();
        assert_eq!(c.listen, "127.0.0.1:0");
        assert_eq!(c.get("listeners").as_deref(), Some("PLAINTEXT://127.0.0.1:0"));
        assert_eq!(c.controller_listen, None);
        c.set("listeners", all).unwrap();
        c.listen = "0.0.0.0:19092".into();
        assert_eq!(
            c.get("listeners").as_deref(),
            Some("PLAINTEXT://0.0.0.0:19092,CONTROLLER://127.0.0.1:9093")
        );
        assert!(c.check().is_ok());
    }

    fn with(changes: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = CLUSTER
            .iter()
            .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pairs.extend(changes.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        pairs
    }

    #[test]
    fn broker_only_and_controller_only_nodes_are_checked_like_kafka() {
        // Kafka's KafkaConfig: a broker-only node is no voter (and here has no controller
        // listener: it dials the controllers); a controller-only node is a voter with only its
        // controller listener.
        let voters = (
            "controller.quorum.voters",
            "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293",
        );
        let broker = [
            ("node.id", "4"),
            ("process.roles", "broker"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            voters,
        ];
        let c = from_flags(
            &with(&broker)
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert!(c.cluster_mode() && c.process_roles.broker && !c.process_roles.controller);
        let mut with_controller = broker;
        with_controller[2] = ("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9393");
        let err = refused(&with(&with_controller));
        assert_eq!(err.key, "listeners", "{err}");
        assert!(
            err.to_string().contains("must not contain a controller listener"),
            "{err}"
        );

        let controller = [
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://127.0.0.1:9093"),
            ("advertised.listeners", ""),
            voters,
        ];
        let c = from_flags(
            &with(&controller)
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert!(c.cluster_mode() && !c.process_roles.broker && c.process_roles.controller);
        let mut not_voter = controller.to_vec();
        not_voter.push(("node.id", "4"));
        let err = refused(&with(&not_voter));
        assert_eq!(err.key, "node.id", "{err}");
        let mut advertised = controller;
        advertised[2] = ("advertised.listeners", "PLAINTEXT://127.0.0.1:9092");
        assert_eq!(refused(&with(&advertised)).key, "advertised.listeners");
        // One role needs a quorum.
        let err = from_flags(&[("process.roles", "broker")]).unwrap_err();
        assert_eq!(err.key, "process.roles", "{err}");
    }

    #[test]
    fn process_roles_is_an_order_free_list() {
        let mut c = BrokerConfig::default();
        for value in ["controller,broker", " broker , controller ", "broker,controller,broker"] {
            c.set("process.roles", value).unwrap();
            assert_eq!(
                c.get("process.roles").as_deref(),
                Some("broker,controller"),
                "{value:?}"
            );
        }
        for value in ["", " , ", "broker,zookeeper", "Broker"] {
            assert_eq!(
                c.set("process.roles", value).unwrap_err().key,
                "process.roles",
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_single_node_may_name_an_unused_controller_listener() {
        let c = from_flags(&[("listeners", "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093")]).unwrap();
        assert!(!c.cluster_mode());
        assert_eq!(c.controller_listen.as_deref(), Some("127.0.0.1:9093"));
        assert!(BrokerConfig::default().check().is_ok());
        assert!(!BrokerConfig::default().cluster_mode());
    }

    #[test]
    fn cluster_mode_refuses_what_is_not_served_yet_naming_the_key() {
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                "process.roles",
                "broker",
                "controller.quorum.voters",
                "node.id 1 must not be one of the voters",
            ),
            (
                "process.roles",
                "controller",
                "listeners",
                "only the controller listener, not PLAINTEXT",
            ),
            (
                "node.id",
                "4",
                "node.id",
                "node.id 4 is not in controller.quorum.voters",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092",
                "listeners",
                "listeners must include a listener named in controller.listener.names",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9094",
                "listeners",
                "same port",
            ),
            (
                "advertised.listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                "advertised.listeners",
                "must not contain the controller listener",
            ),
            (
                "controller.quorum.bootstrap.servers",
                "127.0.0.1:9093",
                "controller.quorum.bootstrap.servers",
                "KIP-853",
            ),
            (
                "broker.heartbeat.interval.ms",
                "9000",
                "broker.heartbeat.interval.ms",
                "below",
            ),
            (
                "controller.listener.names",
                "CONTROLLER,PLAINTEXT",
                "controller.listener.names",
                "inter.broker.listener.name",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,INTERNAL://127.0.0.1:9094",
                "listener.security.protocol.map",
                "INTERNAL has no security protocol",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094",
                "ssl.keystore.location",
                "listener SASL_SSL is SASL_SSL: set ssl.keystore.location",
            ),
            (
                "listeners",
                "CONTROLLER://127.0.0.1:9093",
                "listeners",
                "must include a listener for clients",
            ),
            (
                "inter.broker.listener.name",
                "INTERNAL",
                "inter.broker.listener.name",
                "INTERNAL is not one of the listeners",
            ),
            (
                "advertised.listeners",
                "OUTSIDE://broker.example:9092",
                "advertised.listeners",
                "OUTSIDE is not one of the listeners",
            ),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,C2://127.0.0.1:9094",
                "listeners",
                "one controller listener",
            ),
        ];
        for (key, value, named, says) in cases {
            let err = if value.contains("C2://") {
                let mut pairs = cluster_with(key, value);
                pairs.push(("controller.listener.names".into(), "CONTROLLER,C2".into()));
                refused(&pairs)
            } else {
                refused(&cluster_with(key, value))
            };
            assert_eq!(err.key, *named, "{key}={value}: {err}");
            assert!(err.to_string().contains(says), "{key}={value}: {err}");
        }
        // The same node without voters is a single node: everything above it allows.
        assert!(from_flags(&[("node.id", "4"), ("listeners", "PLAINTEXT://127.0.0.1:9092")]).is_ok());
    }

    #[test]
    fn a_dynamic_quorum_needs_a_dialable_controller_listener_and_no_static_voters() {
        let dynamic = |listeners: &str, extra: &[(&str, &str)]| {
            let mut pairs = vec![
                ("process.roles", "broker,controller"),
                ("listeners", listeners),
                ("controller.listener.names", "CONTROLLER"),
                ("controller.quorum.bootstrap.servers", "127.0.0.1:9093,127.0.0.1:9193"),
            ];
            pairs.extend_from_slice(extra);
            from_flags(&pairs)
        };
        let c = dynamic("PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093", &[]).unwrap();
        assert!(c.cluster_mode() && c.dynamic_quorum());
        assert_eq!(c.controller_address().as_deref(), Some("127.0.0.1:9093"));
        // Any node id: the voters are in the log, not in the configuration.
        assert!(
            dynamic(
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
                &[("node.id", "7")]
            )
            .is_ok()
        );
        let err = dynamic("PLAINTEXT://127.0.0.1:9092,CONTROLLER://0.0.0.0:9093", &[]).unwrap_err();
        assert!(
            err.to_string().contains("needs a host the other controllers can dial"),
            "{err}"
        );
        let err = dynamic("PLAINTEXT://127.0.0.1:9092", &[]).unwrap_err();
        assert!(err.to_string().contains("controller.listener.names"), "{err}");
        let err = dynamic(
            "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            &[("controller.quorum.voters", "1@127.0.0.1:9093")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
        // A broker-only node finds the quorum through the same servers.
        let broker = from_flags(&[
            ("process.roles", "broker"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.bootstrap.servers", "127.0.0.1:9093"),
        ])
        .unwrap();
        assert!(broker.cluster_mode() && broker.controller_address().is_none());
    }

    #[test]
    fn ssl_keys_are_kept_per_listener_and_what_is_not_served_is_refused() {
        let c = from_flags(&[
            ("listeners", "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093"),
            ("ssl.keystore.location", "/etc/broker.pem"),
            ("listener.name.ssl.ssl.client.auth", "required"),
            ("listener.name.ssl.ssl.truststore.location", "/etc/ca.pem"),
        ])
        .unwrap();
        assert_eq!(c.security_protocol("SSL"), Some("SSL"));
        assert_eq!(c.ssl_setting("SSL", "ssl.keystore.location"), Some("/etc/broker.pem"));
        assert_eq!(c.ssl_setting("SSL", "ssl.client.auth"), Some("required"));
        assert_eq!(
            c.ssl_setting("PLAINTEXT", "ssl.client.auth"),
            None,
            "an override is for its listener"
        );
        let refused = |pairs: &[(&str, &str)], says: &str| {
            let mut all = vec![("listeners", "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093")];
            all.extend_from_slice(pairs);
            let err = from_flags(&all).unwrap_err().to_string();
            assert!(err.contains(says), "{pairs:?}: {err}");
        };
        refused(&[], "ssl.keystore.location");
        refused(
            &[("ssl.keystore.location", "k"), ("ssl.key.password", "x")],
            "encrypted keys",
        );
        refused(&[("ssl.keystore.type", "PKCS12")], "only PEM");
        refused(
            &[("ssl.keystore.location", "k"), ("ssl.client.auth", "sometimes")],
            "required, requested or none",
        );
        refused(
            &[("ssl.keystore.location", "k"), ("ssl.enabled.protocols", "TLSv1.1")],
            "TLSv1.2 and TLSv1.3",
        );
        refused(
            &[("ssl.keystore.location", "k"), ("ssl.client.auth", "required")],
            "truststore",
        );
        refused(
            &[("listener.name.ssl.ssl.keystore.password", "x")],
            "password-protected",
        );
        refused(&[("listener.name.ssl.no.such.key", "x")], "unknown key");
    }

    #[test]
    fn malformed_kraft_values_are_refused_naming_the_key() {
        let cases: &[(&str, &str)] = &[
            ("controller.quorum.voters", "1@127.0.0.1"),
            ("controller.quorum.voters", "1@127.0.0.1:0"),
            ("controller.quorum.voters", "127.0.0.1:9093"),
            ("controller.quorum.voters", "-1@127.0.0.1:9093"),
            ("controller.quorum.voters", "x@127.0.0.1:9093"),
            ("controller.quorum.voters", "1@h:9093,1@k:9093"),
            ("controller.quorum.voters", "1@::1:9093"),
            ("controller.quorum.voters", "1@0.0.0.0:9093"),
            ("controller.quorum.voters", "1@:9093"),
            ("controller.quorum.bootstrap.servers", "h"),
            ("listeners", "PLAINTEXT://h:1,PLAINTEXT://h:2"),
            ("listeners", "PLAINTEXT://h:1,plaintext://h:2"),
            ("listeners", "PLAINTEXT://::1:9092"),
            ("listeners", "PLAINTEXT://h"),
            ("listeners", "PLAINTEXT://h:99999"),
            ("listeners", "://h:1"),
            ("listeners", ""),
            ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092"),
            ("advertised.listeners", "PLAINTEXT://:9092"),
            ("controller.listener.names", " , "),
            ("controller.listener.names", "A B"),
            ("controller.quorum.election.timeout.ms", "9"),
            ("broker.session.timeout.ms", "0"),
            ("broker.heartbeat.interval.ms", "-1"),
            ("inter.broker.listener.name", "A B"),
            ("listener.security.protocol.map", "PLAINTEXT"),
            ("listener.security.protocol.map", "INTERNAL:TLS"),
            ("listener.security.protocol.map", "A:PLAINTEXT,a:SSL"),
        ];
        for (key, value) in cases {
            let err = BrokerConfig::default().set(key, value).unwrap_err();
            assert_eq!(err.key, *key, "{key}={value:?}: {err}");
        }
        let mut c = BrokerConfig::default();
        c.set("controller.quorum.voters", "0@[::1]:9093, 2@broker-2.example:9093")
            .unwrap();
        assert_eq!(
            c.get("controller.quorum.voters").as_deref(),
            Some("0@[::1]:9093,2@broker-2.example:9093")
        );
        c.set("controller.quorum.voters", "").unwrap();
        assert!(!c.cluster_mode(), "empty: back to a single node");
        c.set("broker.rack", " ").unwrap();
        assert_eq!(c.broker_rack, None);
        c.set("inter.broker.listener.name", "plaintext").unwrap();
        assert_eq!(c.inter_broker_listener_name, "PLAINTEXT");
        c.set("advertised.listeners", "broker.example:9092").unwrap();
        assert_eq!(c.advertise.as_deref(), Some("broker.example:9092"));
        c.set("advertised.listeners", "").unwrap();
        assert_eq!(c.advertise, None, "empty: advertise the listener");
    }

    #[test]
    fn every_key_can_be_described() {
        let c = BrokerConfig::default();
        for key in BROKER_KEYS.iter().map(|k| k.name) {
            assert!(c.get(key).is_some(), "{key}");
        }
        for k in TOPIC_KEYS {
            assert!(c.topic_default(k.name).is_some(), "{}", k.name);
            assert!(
                validate_topic_config(k.name, &c.topic_default(k.name).unwrap()).is_ok(),
                "{}",
                k.name
            );
        }
    }

    fn layer(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_topics_log_is_compacted_exactly_when_the_cleaner_cleans_it() {
        // Kafka's LogConfig.compact: cleanup.policy lists compact, from the topic or the
        // broker's log.cleanup.policy.
        let mut c = BrokerConfig::default();
        for (policy, compact) in [("delete", false), ("compact", true), ("delete, compact", true)] {
            let topic = layer(&[("cleanup.policy", policy)]);
            assert_eq!(c.topic_log_config(&topic).compact, compact, "{policy}");
            assert_eq!(c.topic_cleaner_config(&topic).is_some(), compact, "{policy}");
        }
        assert!(!c.topic_log_config(&BTreeMap::new()).compact);
        c.set("log.cleanup.policy", "compact").unwrap();
        assert!(c.topic_log_config(&BTreeMap::new()).compact);
        assert!(!c.topic_log_config(&layer(&[("cleanup.policy", "delete")])).compact);
    }

    #[test]
    fn dynamic_layers_apply_in_kafkas_precedence_to_every_clone() {
        // KIP-226 (DynamicBrokerConfig): this broker's value > cluster default > static > default.
        let mut c = BrokerConfig::default();
        c.set("log.retention.ms", "1000").unwrap();
        c.set("log.segment.bytes", "4096").unwrap();
        let clone = c.clone();
        let cluster = layer(&[("log.retention.ms", "2000"), ("message.max.bytes", "5000")]);
        let own = layer(&[("message.max.bytes", "6000")]);
        assert!(c.apply_dynamic(&cluster, &own));
        assert!(!c.apply_dynamic(&cluster, &own), "nothing changed");
        let live = clone.live();
        assert_eq!(live.log_retention_ms, 2000);
        assert_eq!(live.log.max_message_bytes, 6000);
        assert_eq!(live.log.segment_bytes, 4096, "static where no layer sets it");
        assert_eq!(c.log_retention_ms, 1000, "the static fields stay");
        assert_eq!(c.topic_default("retention.ms").as_deref(), Some("2000"));
        assert_eq!(c.topic_log_config(&BTreeMap::new()).max_message_bytes, 6000);
        let overridden = layer(&[("max.message.bytes", "7000")]);
        assert_eq!(
            c.topic_log_config(&overridden).max_message_bytes,
            7000,
            "a topic override wins"
        );
        assert!(c.apply_dynamic(&BTreeMap::new(), &BTreeMap::new()));
        assert_eq!(clone.live().log_retention_ms, 1000);
    }

    #[test]
    fn only_dynamic_keys_with_valid_values_make_a_layer() {
        let c = BrokerConfig::default();
        let none = BTreeMap::new();
        assert_eq!(
            c.with_dynamic(&layer(&[("num.partitions", "3")]), &none)
                .unwrap_err()
                .key,
            "num.partitions"
        );
        assert_eq!(
            c.with_dynamic(&layer(&[("no.such", "3")]), &none).unwrap_err().key,
            "no.such"
        );
        assert_eq!(
            c.with_dynamic(&layer(&[("log.retention.ms", "soon")]), &none)
                .unwrap_err()
                .key,
            "log.retention.ms"
        );
        assert_eq!(
            c.with_dynamic(&layer(&[("log.cleanup.policy", "shred")]), &none)
                .unwrap_err()
                .key,
            "log.cleanup.policy"
        );
        // Relations are checked on the result.
        let too_big = layer(&[("message.max.bytes", "200000000")]);
        assert_eq!(c.with_dynamic(&too_big, &none).unwrap_err().key, "message.max.bytes");
        // A stored layer that no longer applies keeps its valid keys (Kafka logs and ignores).
        let stored = layer(&[("log.retention.ms", "5"), ("message.max.bytes", "200000000")]);
        assert!(c.apply_dynamic(&stored, &none));
        assert_eq!(c.live().log_retention_ms, 5);
        assert_eq!(
            c.live().log.max_message_bytes,
            BrokerConfig::default().log.max_message_bytes
        );
    }

    #[test]
    fn the_documented_config_file_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.yaml");
        let c = BrokerConfig::load(&path).unwrap();
        assert_eq!(c.listen, BrokerConfig::default().listen);
        assert_eq!(c.num_partitions, BrokerConfig::default().num_partitions);
        // The file documents every key with its default, and DescribeConfigs knows each one.
        let defaults = BrokerConfig::default();
        for k in BROKER_KEYS.iter().filter(|k| k.name != "advertised.listeners") {
            assert!(c.static_keys.contains(k.name), "{} is not in config.yaml", k.name);
            assert_eq!(c.get(k.name), defaults.get(k.name), "{}", k.name);
        }
        for key in &c.static_keys {
            assert!(
                BrokerConfig::key_info(key).is_some(),
                "{key} is missing from BROKER_KEYS"
            );
        }
    }
}
