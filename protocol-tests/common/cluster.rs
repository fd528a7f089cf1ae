//! A cluster of Sluice processes on loopback: every node both broker and controller (Kafka's
//! combined mode), voters of one metadata quorum, each with a data directory that outlives its
//! process so a node can be killed and started again on the same log, or paused (SIGSTOP) and
//! continued.
//!
//! Waits are bounded and panic with what each node last answered. A test that fails prints the
//! tail of each node's log (stdout and stderr, appended across restarts) when it drops its
//! `Cluster`; SLUICE_CLUSTER_LOG sets the nodes' RUST_LOG (default `info,openraft=warn`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DescribeClusterRequest, MetadataRequest, MetadataResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rdkafka::consumer::Consumer;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Raw, assign, consumer, producer, topic};

/// How long `start`, `restart` and `start_all` wait for every running node to list every
/// running broker.
pub const READY_WAIT: Duration = Duration::from_secs(30);
/// How long `controller` waits for the running nodes to agree on a running active controller.
pub const CONTROLLER_WAIT: Duration = Duration::from_secs(20);
/// How long `stop_all` waits for a node to exit after SIGTERM (its shutdown.timeout.ms is 10 s).
pub const STOP_WAIT: Duration = Duration::from_secs(30);
/// How long one request of a polling loop may take before it counts as unanswered.
pub const POLL_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of each node's log a failing test prints.
const LOG_LINES_ON_FAILURE: usize = 40;
/// Response frames above this are a broken peer, not something to allocate for.
const RESPONSE_BYTES_MAX: usize = 64 << 20;

/// Short failure detection so kills are noticed within a test's budget.
const TIMEOUTS: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("broker.heartbeat.interval.ms", "500"),
    ("controller.quorum.election.timeout.ms", "500"),
];

/// Settings every node gets besides the cluster form and `TIMEOUTS`: a group forms at once, and
/// nothing creates a topic by being asked about it (a topic a test finds must be one it made).
const DEFAULTS: &[(&str, &str)] = &[
    ("group.initial.rebalance.delay.ms", "0"),
    ("auto.create.topics.enable", "false"),
];

/// What a node is (`process.roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `broker,controller`: a voter that serves clients (Kafka's combined mode).
    Combined,
    /// `broker`: serves clients, follows the metadata log without voting.
    Broker,
    /// `controller`: a voter with only its controller listener.
    Controller,
}

impl Role {
    pub fn is_broker(self) -> bool {
        self != Role::Controller
    }

    pub fn is_voter(self) -> bool {
        self != Role::Broker
    }

    fn process_roles(self) -> &'static str {
        match self {
            Role::Combined => "broker,controller",
            Role::Broker => "broker",
            Role::Controller => "controller",
        }
    }
}

/// One node: its fixed ports and data directory, and its process while it runs.
pub struct Node {
    pub id: i32,
    pub role: Role,
    /// The PLAINTEXT listener, also the advertised address.
    pub addr: SocketAddr,
    pub controller_port: u16,
    /// The INTERNAL listener brokers dial each other on (`inter.broker.listener.name`), on
    /// 127.0.0.2, when the cluster was started by `start_split`.
    pub internal: Option<SocketAddr>,
    pub dir: tempfile::TempDir,
    log: PathBuf,
    child: Option<Child>,
    /// Stopped by SIGSTOP (`pause`) and not yet continued.
    paused: bool,
}

impl Node {
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

/// Sends `signal` to a child process of ours, not yet reaped.
fn signal(child: &Child, signal: libc::c_int, what: &str) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: plain kill(2) on our own child, not yet reaped (so its pid is not reused).
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "{what}: {}", std::io::Error::last_os_error());
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    settings: Vec<(String, String)>,
    logs: tempfile::TempDir,
    /// A dynamic quorum (KIP-853): every node finds it through the controllers'
    /// `controller.quorum.bootstrap.servers`; node 1 was formatted `--standalone`.
    dynamic: bool,
}

/// The broker binary: SLUICE_BIN, else the one cargo built for this test.
pub fn sluice_bin() -> PathBuf {
    std::env::var_os("SLUICE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sluice")))
}

/// Ports handed out in this test process, so clusters of tests running at once never share one.
static PORTS_TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Waits for `child` to exit until `deadline`, then kills it: its exit status, or None when it
/// had to be killed.
async fn exit_by(child: &mut Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `count` distinct free loopback ports. Taken below Linux's ephemeral range (32768+), where an
/// outgoing connection's source port could otherwise take a killed node's port before it
/// restarts; each is checked free by binding it (all held at once, then released).
pub fn free_ports(count: usize) -> Vec<u16> {
    let mut taken = PORTS_TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    let mut held = Vec::with_capacity(count);
    let mut attempts = 0;
    while held.len() < count {
        attempts += 1;
        let candidate = if attempts < 1000 {
            fastrand::u16(15_000..32_000)
        } else {
            0
        };
        if taken.contains(&candidate) {
            continue;
        }
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", candidate)) {
            let port = listener.local_addr().unwrap().port();
            if taken.insert(port) {
                held.push((port, listener));
            }
        }
    }
    held.into_iter().map(|(port, _)| port).collect()
}

/// Sends one request on a new connection and decodes the answer; every failure (refused,
/// closed, no answer within `timeout`, undecodable) is an `Err` saying which, for polling loops
/// that must outlive a node being down.
pub async fn try_call<R>(addr: SocketAddr, version: i16, request: &R, timeout: Duration) -> Result<R::Response, String>
where
    R: Request + Encodable,
    R::Response: Decodable + HeaderVersion,
{
    let exchange = async {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let mut raw = Raw {
            stream,
            correlation_id: 0,
            response_timeout: timeout,
        };
        let frame = raw.encode(version, request);
        raw.stream
            .write_all(&frame)
            .await
            .map_err(|e| format!("write to {addr}: {e}"))?;
        let mut len = [0u8; 4];
        raw.stream
            .read_exact(&mut len)
            .await
            .map_err(|e| format!("{addr} closed the connection: {e}"))?;
        let len = usize::try_from(i32::from_be_bytes(len))
            .ok()
            .filter(|len| *len <= RESPONSE_BYTES_MAX)
            .ok_or_else(|| format!("{addr} sent a frame length of {len:?}"))?;
        let mut body = vec![0u8; len];
        raw.stream
            .read_exact(&mut body)
            .await
            .map_err(|e| format!("{addr} closed mid-response: {e}"))?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| format!("response header from {addr}: {e}"))?;
        if header.correlation_id != raw.correlation_id {
            return Err(format!(
                "{addr} answered correlation id {} to {}",
                header.correlation_id, raw.correlation_id
            ));
        }
        R::Response::decode(&mut body, version).map_err(|e| format!("response from {addr}: {e}"))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer from {addr} within {timeout:?}")))
}

/// Metadata v12 of `topics` (empty: brokers only), never creating a topic.
pub fn metadata_request(topics: &[&str]) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|name| MetadataRequestTopic::default().with_name(Some(topic(name))))
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
}

/// ListOffsets latest (-1) of one partition.
pub fn list_latest(name: &str, partition: i32) -> kafka_protocol::messages::ListOffsetsRequest {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    kafka_protocol::messages::ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default().with_name(topic(name)).with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(-1),
            ]),
        ])
}

/// A partition as Metadata lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionView {
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas on a broker that is fenced or whose log directory is offline.
    pub offline: Vec<i32>,
}

impl Cluster {
    /// Node `via`'s Metadata of `topic`/`partition`.
    pub async fn partition_view(&self, via: i32, topic: &str, partition: i32) -> Result<PartitionView, String> {
        partition_view_at(self.addr(via), topic, partition).await
    }
}

/// The Metadata of `topic`/`partition` that the broker at `addr` answers.
pub async fn partition_view_at(addr: SocketAddr, topic: &str, partition: i32) -> Result<PartitionView, String> {
    let resp: MetadataResponse = try_call(addr, 12, &metadata_request(&[topic]), POLL_REQUEST_TIMEOUT).await?;
    let t = resp
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .ok_or("topic not in the answer")?;
    if t.error_code != 0 {
        return Err(format!("topic error {}", t.error_code));
    }
    let p = t
        .partitions
        .iter()
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| format!("partition {partition} not listed"))?;
    Ok(PartitionView {
        leader: p.leader_id.0,
        leader_epoch: p.leader_epoch,
        replicas: p.replica_nodes.iter().map(|r| r.0).collect(),
        isr: p.isr_nodes.iter().map(|r| r.0).collect(),
        offline: p.offline_replicas.iter().map(|r| r.0).collect(),
    })
}

impl Cluster {
    /// Starts `n` nodes and waits until each lists all `n` brokers at their advertised ports.
    pub async fn start(n: usize) -> Cluster {
        Cluster::start_with(n, &[]).await
    }

    /// `start` with extra `--set` settings for every node (they win over the defaults; `{id}`
    /// in a value stands for each node's id).
    pub async fn start_with(n: usize, extra: &[(&str, &str)]) -> Cluster {
        Cluster::start_roles(&vec![Role::Combined; n], extra).await
    }

    /// Starts one node per entry of `roles` (ids 1, 2, ... in that order), the voters being
    /// the nodes with the controller role, and waits until every broker lists every broker.
    pub async fn start_roles(roles: &[Role], extra: &[(&str, &str)]) -> Cluster {
        Cluster::start_nodes(roles, extra, false).await
    }

    /// `start_with`, each node also listening on INTERNAL at 127.0.0.2 (advertised there), the
    /// listener brokers dial each other on; clients get PLAINTEXT at 127.0.0.1.
    pub async fn start_split(n: usize, extra: &[(&str, &str)]) -> Cluster {
        Cluster::start_nodes(&vec![Role::Combined; n], extra, true).await
    }

    /// `n` combined nodes of a dynamic quorum (KIP-853): node 1 formatted `--standalone`, the
    /// voter the quorum starts with; the others started unformatted with the bootstrap servers,
    /// so they follow the log as observers until AddRaftVoter makes them voters. Waits until
    /// every node lists every broker.
    pub async fn start_dynamic(n: usize, extra: &[(&str, &str)]) -> Cluster {
        Cluster::start_nodes_of(&vec![Role::Combined; n], extra, false, true, &[]).await
    }

    /// `start_split`, every node's data directory prepared first by `sluice format` with `how`
    /// (`--add-scram ...`).
    pub async fn start_split_formatted(n: usize, extra: &[(&str, &str)], how: &[&str]) -> Cluster {
        Cluster::start_nodes_of(&vec![Role::Combined; n], extra, true, false, how).await
    }

    async fn start_nodes(roles: &[Role], extra: &[(&str, &str)], split: bool) -> Cluster {
        Cluster::start_nodes_of(roles, extra, split, false, &[]).await
    }

    async fn start_nodes_of(
        roles: &[Role],
        extra: &[(&str, &str)],
        split: bool,
        dynamic: bool,
        format_all: &[&str],
    ) -> Cluster {
        let n = roles.len();
        assert!(roles.iter().any(|r| r.is_voter()), "a cluster needs a voter");
        let ports = free_ports(3 * n);
        let logs = tempfile::tempdir().expect("log dir");
        let nodes = (0..n)
            .map(|i| {
                let id = i32::try_from(i + 1).unwrap();
                Node {
                    id,
                    role: roles[i],
                    addr: SocketAddr::from(([127, 0, 0, 1], ports[3 * i])),
                    controller_port: ports[3 * i + 1],
                    internal: split.then(|| SocketAddr::from(([127, 0, 0, 2], ports[3 * i + 2]))),
                    dir: tempfile::tempdir().expect("data dir"),
                    log: logs.path().join(format!("node{id}.log")),
                    child: None,
                    paused: false,
                }
            })
            .collect();
        let settings = TIMEOUTS
            .iter()
            .chain(DEFAULTS)
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut cluster = Cluster {
            nodes,
            settings,
            logs,
            dynamic,
        };
        if dynamic {
            cluster.format(1, &["--standalone"]);
        }
        if !format_all.is_empty() {
            for id in cluster.ids() {
                cluster.format(id, format_all);
            }
        }
        for id in cluster.ids() {
            cluster.spawn(id);
        }
        cluster.wait_ready().await;
        cluster
    }

    /// Every node's id, running or not.
    pub fn ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// The ids of the nodes whose process runs.
    pub fn running(&self) -> Vec<i32> {
        self.nodes.iter().filter(|n| n.is_running()).map(|n| n.id).collect()
    }

    /// The ids of the running nodes that are brokers (those clients can reach).
    pub fn running_brokers(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.role.is_broker())
            .map(|n| n.id)
            .collect()
    }

    pub fn node(&self, id: i32) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    fn node_mut(&mut self, id: i32) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    pub fn addr(&self, id: i32) -> SocketAddr {
        self.node(id).addr
    }

    /// Every broker's client address, running or not: "127.0.0.1:P1,127.0.0.1:P2,...".
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.role.is_broker())
            .map(|n| n.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `1@127.0.0.1:C1,2@127.0.0.1:C2,...`
    fn voters(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.role.is_voter())
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `127.0.0.1:C1,127.0.0.1:C2,...`: every voter's controller listener.
    fn bootstrap_controllers(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.role.is_voter())
            .map(|n| format!("127.0.0.1:{}", n.controller_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs `sluice format` for node `id` with `how` (`--standalone`, ...), on the settings it
    /// is served with.
    pub fn format(&self, id: i32, how: &[&str]) {
        let (ok, said) = self.try_format(id, how);
        assert!(ok, "sluice format {how:?} of node {id}: {said}");
    }

    /// `format`, returning whether it succeeded and what it printed.
    pub fn try_format(&self, id: i32, how: &[&str]) -> (bool, String) {
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("format").args(self.node_args(id)).args(how);
        let out = cmd.output().expect("run sluice format");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    }

    /// The arguments node `id` is served with (after `serve`).
    fn node_args(&self, id: i32) -> Vec<String> {
        let node = self.node(id);
        let (port, controller_port) = (node.addr.port(), node.controller_port);
        let mut listeners = match node.role {
            Role::Combined => format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"),
            Role::Broker => format!("PLAINTEXT://127.0.0.1:{port}"),
            Role::Controller => format!("CONTROLLER://127.0.0.1:{controller_port}"),
        };
        let mut advertised = format!("PLAINTEXT://127.0.0.1:{port}");
        let mut split = Vec::new();
        if let Some(internal) = node.internal {
            listeners.push_str(&format!(",INTERNAL://{internal}"));
            advertised.push_str(&format!(",INTERNAL://{internal}"));
            split.push("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT".to_string());
            split.push("inter.broker.listener.name=INTERNAL".to_string());
        }
        let mut args: Vec<String> = vec![
            "--node-id".into(),
            id.to_string(),
            "--data-dir".into(),
            node.dir.path().display().to_string(),
        ];
        let mut set = |setting: String| {
            args.push("--set".into());
            args.push(setting);
        };
        set(format!("process.roles={}", node.role.process_roles()));
        set(format!("listeners={listeners}"));
        if node.role.is_broker() {
            set(format!("advertised.listeners={advertised}"));
        }
        for setting in split {
            set(setting);
        }
        set("controller.listener.names=CONTROLLER".into());
        match self.dynamic {
            false => set(format!("controller.quorum.voters={}", self.voters())),
            true => set(format!(
                "controller.quorum.bootstrap.servers={}",
                self.bootstrap_controllers()
            )),
        }
        // `{id}` in a value is the node's id (`broker.rack=rack-{id}`).
        for (k, v) in &self.settings {
            set(format!("{k}={}", v.replace("{id}", &id.to_string())));
        }
        args
    }

    fn spawn(&mut self, id: i32) {
        let args = self.node_args(id);
        let node = self.node_mut(id);
        assert!(node.child.is_none(), "node {id} is already running");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .expect("node log file");
        let stderr = log.try_clone().expect("node log file");
        mark(&log, &format!("node {id} started by the test"));
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("serve").args(args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .env("NO_COLOR", "1")
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_CLUSTER_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
            );
        node.child = Some(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", sluice_bin().display())),
        );
    }

    /// SIGKILL: no shutdown, the data directory stays as the crash left it.
    pub fn kill(&mut self, id: i32) {
        let node = self.node_mut(id);
        let mut child = node.child.take().unwrap_or_else(|| panic!("node {id} is not running"));
        node.paused = false;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        self.mark_log(id, "killed (SIGKILL) by the test");
    }

    /// SIGKILL to every running node before reaping any (a power cut, not one crash after
    /// another): no node sees another go first.
    pub fn kill_all(&mut self) {
        let mut killed = Vec::new();
        for node in &mut self.nodes {
            if let Some(child) = node.child.take() {
                signal(&child, libc::SIGKILL, &format!("SIGKILL to node {}", node.id));
                node.paused = false;
                killed.push((node.id, child));
            }
        }
        for (id, mut child) in killed {
            child.wait().expect("reap");
            self.mark_log(id, "killed (SIGKILL, all nodes at once) by the test");
        }
    }

    /// SIGSTOP: the process freezes with its sockets open (the kernel still accepts
    /// connections and buffers requests for it), as under a long GC pause or a VM stall, so
    /// it misses its heartbeats and comes back believing what it believed before.
    /// `wait_ready` and `controller` expect no paused node: they ask every running one.
    pub fn pause(&mut self, id: i32) {
        let node = self.node_mut(id);
        let child = node
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        assert!(!node.paused, "node {id} is already paused");
        signal(child, libc::SIGSTOP, &format!("SIGSTOP to node {id}"));
        // kill(2) returns once the signal is sent, while the node's threads may still run for
        // a moment: a request sent now could still be served before they stop (a "zombie"
        // write would be acknowledged by the followers). Wait until every thread is stopped.
        wait_stopped(child.id(), id);
        node.paused = true;
        self.mark_log(id, "paused (SIGSTOP) by the test");
    }

    /// SIGCONT to a node `pause` stopped.
    pub fn resume(&mut self, id: i32) {
        let node = self.node_mut(id);
        let child = node
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        assert!(node.paused, "node {id} is not paused");
        signal(child, libc::SIGCONT, &format!("SIGCONT to node {id}"));
        node.paused = false;
        self.mark_log(id, "resumed (SIGCONT) by the test");
    }

    /// SIGTERM to node `id` (a clean, controlled shutdown), then waits for it to exit 0.
    pub async fn terminate(&mut self, id: i32) {
        let node = self.node_mut(id);
        let mut child = node.child.take().unwrap_or_else(|| panic!("node {id} is not running"));
        signal(&child, libc::SIGTERM, &format!("SIGTERM to node {id}"));
        // A stopped process keeps the SIGTERM pending until it is continued.
        if std::mem::take(&mut node.paused) {
            signal(&child, libc::SIGCONT, &format!("SIGCONT to node {id}"));
        }
        self.mark_log(id, "sent SIGTERM by the test");
        let deadline = Instant::now() + STOP_WAIT;
        let status = exit_by(&mut child, deadline).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "node {id} did not exit cleanly after SIGTERM: {status:?}"
        );
    }

    /// Waits up to `within` for node `id` to exit by itself (a node that stops on a fault); its
    /// exit status, or None when it still runs (it is left running).
    pub async fn wait_exit(&mut self, id: i32, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            let node = self.node_mut(id);
            let child = node
                .child
                .as_mut()
                .unwrap_or_else(|| panic!("node {id} is not running"));
            if let Some(status) = child.try_wait().expect("wait") {
                node.child = None;
                self.mark_log(id, &format!("exited by itself ({status})"));
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A line in node `id`'s log, so its tail shows what the test did to it.
    fn mark_log(&self, id: i32, what: &str) {
        if let Ok(log) = OpenOptions::new().append(true).open(&self.node(id).log) {
            mark(&log, &format!("node {id} {what}"));
        }
    }

    /// Starts a stopped node again on its ports and data directory, then waits until every
    /// running node lists every running broker.
    pub async fn restart(&mut self, id: i32) {
        self.spawn(id);
        self.wait_ready().await;
    }

    /// SIGTERM to every running node at once (as `docker compose stop` does), then waits for
    /// each to exit; a node that does not exit 0 within `STOP_WAIT` fails the test.
    pub async fn stop_all(&mut self) {
        let mut stopping = Vec::new();
        for node in &mut self.nodes {
            if let Some(child) = node.child.take() {
                signal(&child, libc::SIGTERM, &format!("SIGTERM to node {}", node.id));
                if std::mem::take(&mut node.paused) {
                    signal(&child, libc::SIGCONT, &format!("SIGCONT to node {}", node.id));
                }
                if let Ok(log) = OpenOptions::new().append(true).open(&node.log) {
                    mark(&log, &format!("node {} sent SIGTERM by the test", node.id));
                }
                stopping.push((node.id, child));
            }
        }
        let deadline = Instant::now() + STOP_WAIT;
        let mut failures = Vec::new();
        for (id, mut child) in stopping {
            let status = exit_by(&mut child, deadline).await;
            match status {
                Some(status) if status.success() => {}
                Some(status) => failures.push(format!("node {id} exited with {status}")),
                None => failures.push(format!("node {id} still ran {STOP_WAIT:?} after SIGTERM")),
            }
        }
        assert!(
            failures.is_empty(),
            "unclean shutdown: {} (node logs follow)",
            failures.join("; ")
        );
    }

    /// Starts the stopped nodes `ids` together (a majority of voters must be up before any
    /// node serves), then waits as `restart` does.
    pub async fn restart_some(&mut self, ids: &[i32]) {
        for &id in ids {
            self.spawn(id);
        }
        self.wait_ready().await;
    }

    /// Starts every stopped node, then waits as `restart` does.
    pub async fn start_all(&mut self) {
        for id in self.ids() {
            if !self.node(id).is_running() {
                self.spawn(id);
            }
        }
        self.wait_ready().await;
    }

    /// The ids and ports of the brokers that node `id` lists in Metadata.
    pub async fn brokers_seen_by(&self, id: i32) -> Result<BTreeMap<i32, i32>, String> {
        let resp = self.metadata(id, &[]).await?;
        Ok(resp.brokers.iter().map(|b| (b.node_id.0, b.port)).collect())
    }

    /// Metadata of `topics` from node `id`.
    pub async fn metadata(&self, id: i32, topics: &[&str]) -> Result<MetadataResponse, String> {
        try_call(self.addr(id), 12, &metadata_request(topics), POLL_REQUEST_TIMEOUT).await
    }

    /// Waits until every running node lists every running broker at the port it advertises
    /// (brokers still listed while their session has not yet expired are tolerated).
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let running = self.running_brokers();
            let mut waiting = Vec::new();
            for &id in &running {
                match self.brokers_seen_by(id).await {
                    Ok(brokers) => {
                        let wrong: Vec<i32> = running
                            .iter()
                            .copied()
                            .filter(|b| brokers.get(b) != Some(&i32::from(self.addr(*b).port())))
                            .collect();
                        if !wrong.is_empty() {
                            waiting.push(format!(
                                "node {id} lists brokers (id: port) {brokers:?}, missing {wrong:?}"
                            ));
                        }
                    }
                    Err(e) => waiting.push(format!("node {id}: {e}")),
                }
            }
            if waiting.is_empty() {
                return;
            }
            self.assert_still_running();
            assert!(
                Instant::now() < deadline,
                "nodes {running:?} did not all list each other within {READY_WAIT:?} (node logs follow):\n  {}",
                waiting.join("\n  ")
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The active controller as node `id` reports it (DescribeCluster's controller_id; -1 or
    /// an error while it knows none).
    pub async fn controller_seen_by(&self, id: i32) -> Result<i32, String> {
        let resp = try_call(
            self.addr(id),
            0,
            &DescribeClusterRequest::default(),
            POLL_REQUEST_TIMEOUT,
        )
        .await?;
        if resp.error_code != 0 {
            return Err(format!("node {id}: DescribeCluster error {}", resp.error_code));
        }
        Ok(resp.controller_id.0)
    }

    /// Waits until every running node reports the same active controller, itself running.
    pub async fn controller(&self) -> i32 {
        let deadline = Instant::now() + CONTROLLER_WAIT;
        loop {
            let running = self.running();
            let mut seen = BTreeMap::new();
            for id in self.running_brokers() {
                seen.insert(id, self.controller_seen_by(id).await);
            }
            let agreed: BTreeSet<_> = seen.values().filter_map(|c| c.as_ref().ok()).collect();
            if seen.values().all(Result::is_ok) && agreed.len() == 1 {
                let controller = **agreed.first().unwrap();
                if running.contains(&controller) {
                    return controller;
                }
            }
            self.assert_still_running();
            assert!(
                Instant::now() < deadline,
                "running nodes {running:?} did not agree on a running controller within \
                 {CONTROLLER_WAIT:?}: {seen:?} (node logs follow)"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Fails at once, with the logs, when a node meant to run has exited. Reads the process
    /// state from /proc (a zombie is one that exited) since `Child::try_wait` needs `&mut`.
    pub fn assert_still_running(&self) {
        let exited: Vec<i32> = self
            .nodes
            .iter()
            .filter(|n| {
                n.child.as_ref().is_some_and(|child| {
                    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
                    let state = stat.rsplit(')').next().and_then(|s| s.split_whitespace().next());
                    matches!(state, None | Some("Z" | "X"))
                })
            })
            .map(|n| n.id)
            .collect();
        assert!(exited.is_empty(), "nodes {exited:?} exited (node logs follow)");
    }

    /// The last `lines` lines of each node's log, for failure messages.
    pub fn logs_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let text = std::fs::read_to_string(&node.log).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let state = if node.paused {
                "paused by the test"
            } else if node.is_running() {
                "started"
            } else {
                "stopped by the test"
            };
            out.push_str(&format!("--- node {} ({state}), last {lines} log lines:\n", node.id));
            for line in &all[all.len().saturating_sub(lines)..] {
                let cut: String = line.chars().take(400).collect();
                out.push_str(&cut);
                out.push('\n');
            }
        }
        out
    }

    /// Where the node logs are (removed with the cluster).
    pub fn log_dir(&self) -> PathBuf {
        self.logs.path().to_path_buf()
    }
}

/// Creates `name` with `partitions` partitions of `replication_factor` replicas and `configs`,
/// retrying until it is created (or was by an attempt that timed out), each attempt through the
/// next running broker, as a client moves on from a node that does not answer (a node whose
/// metadata quorum member waits on a full disk answers no metadata change).
pub async fn create(cluster: &Cluster, name: &str, partitions: i32, replication_factor: i16, configs: &[(&str, &str)]) {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(topic(name))
                .with_num_partitions(partitions)
                .with_replication_factor(replication_factor)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                ),
        ])
        .with_timeout_ms(10_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failures = Vec::new();
    for attempt in 0.. {
        let brokers = cluster.running_brokers();
        let via = brokers[attempt % brokers.len()];
        match try_call(cluster.addr(via), 7, &request, Duration::from_secs(15)).await {
            Ok(resp) if resp.topics[0].error_code == 0 => return,
            Ok(resp) if resp.topics[0].error_code == 36 && !failures.is_empty() => return,
            Ok(resp) => failures.push(format!("{:?}", resp.topics[0])),
            Err(e) => failures.push(e),
        }
        assert!(Instant::now() < deadline, "CreateTopics {name}: {failures:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until every running broker lists partition `partition` of `name` alike and `ok` holds
/// of it; returns that view. (A controller-only node serves no Metadata.)
pub async fn wait_view(
    cluster: &Cluster,
    name: &str,
    partition: i32,
    what: &str,
    ok: impl Fn(&PartitionView) -> bool,
) -> PartitionView {
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let mut views = BTreeMap::new();
        for id in cluster.running_brokers() {
            views.insert(id, cluster.partition_view(id, name, partition).await);
        }
        let first = views.values().next().cloned();
        if let Some(Ok(v)) = &first
            && views.values().all(|w| w.as_ref() == Ok(v))
            && ok(v)
        {
            return v.clone();
        }
        cluster.assert_still_running();
        assert!(
            Instant::now() < deadline,
            "{name}-{partition}: not {what} within {limit:?}: {views:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Produces `count` records "v{from}".."v{from+count-1}" with acks=all, each awaited, and
/// returns their offsets.
pub async fn produce_all(cluster: &Cluster, name: &str, from: usize, count: usize) -> Vec<i64> {
    let producer = producer(
        &cluster.bootstrap(),
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "30000"),
        ],
    );
    let mut offsets = Vec::with_capacity(count);
    for i in from..from + count {
        let value = format!("v{i}");
        let delivered = producer
            .send(
                FutureRecord::<(), _>::to(name).partition(0).payload(&value),
                Duration::from_secs(30),
            )
            .await;
        match delivered {
            Ok(delivery) => offsets.push(delivery.offset),
            Err((e, _)) => panic!("acks=all produce of {value} failed: {e} (node logs follow)"),
        }
    }
    offsets
}

/// Every value of partition 0 of `name`, in offset order, read through librdkafka from the
/// start to the high watermark, which must reach `expected` values.
pub fn consume_all(cluster: &Cluster, name: &str, expected: usize) -> Vec<(i64, String)> {
    let consumer = consumer(&cluster.bootstrap(), &[]);
    assign(&consumer, name, &[0], Offset::Beginning);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while seen.len() < expected && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => seen.push((
                m.offset(),
                String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string(),
            )),
            Some(Err(e)) => eprintln!("consumer: {e}"),
            None => {}
        }
    }
    consumer.unassign().ok();
    seen
}

/// The values `v0..v{n-1}`, each at the offset it was acknowledged at.
pub fn expected_values(offsets: &[i64]) -> Vec<(i64, String)> {
    offsets.iter().enumerate().map(|(i, o)| (*o, format!("v{i}"))).collect()
}

/// Appends `what` to a node log as a line of its own.
fn mark(mut log: &std::fs::File, what: &str) {
    use std::io::Write;
    let _ = writeln!(log, "=== {what}");
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs_tail(LOG_LINES_ON_FAILURE));
        }
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Waits (at most 5 s) until every thread of process `pid` is stopped: state `T` in
/// `/proc/PID/task/TID/stat`, the character after the command name's closing parenthesis.
fn wait_stopped(pid: u32, node: i32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the node's threads");
        let running: Vec<String> = tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                let state = stat.rfind(')').and_then(|i| stat[i + 1..].trim_start().chars().next());
                !matches!(state, Some('T' | 't'))
            })
            .collect();
        if running.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {node}: threads still running 5 s after SIGSTOP: {running:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}
