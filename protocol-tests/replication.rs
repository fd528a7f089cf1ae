//! Replication under faults (issue 12), checked in the spirit of Jepsen's Kafka workload: on a
//! topic of 3 partitions, replication factor 3 over 3 nodes and `min.insync.replicas=2`,
//! several producers (idempotent ones among them) write unique values with acks=all while a
//! consumer group reads and a fault is injected; afterwards every partition is read twice from
//! its start to its high watermark and `common::checker` compares what producers were told
//! with what readers saw. Kafka's promise for acks=all with an ISR of at least
//! `min.insync.replicas` and no unclean leader election: an acknowledged write is held by every
//! ISR member, so it survives the loss of any one node and, since Sluice fsyncs before
//! acknowledging (`log.flush.interval.messages=1`), a crash or a power cut of all of them (the
//! page cache lost too: each node's volume shut down without flushing); it stays at the
//! offset it was acknowledged at (KIP-101 leader epochs let a returning replica truncate only
//! what was never committed), and a deposed leader's later writes are never read.
//!
//! Each fault is one test; `SLUICE_FAULT_TRIALS=N` runs it N times on a fresh cluster each
//! (default 1), printing one `TRIAL fault=... acknowledged=... lost=...` line per trial and
//! failing at the end if any trial broke a guarantee. `protocol-tests/faults.sh` runs many
//! trials and adds the lines up.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::checker::{History, Outcome, Pass, Report};
use common::cluster::{Cluster, POLL_REQUEST_TIMEOUT, PartitionView, partition_view_at, try_call};
use common::disk::{Ext4, Tmpfs, fill_up};
use common::docker::DockerCluster;
use common::*;
use kafka_protocol::messages::CreateTopicsRequest;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureRecord;
use rdkafka::{ClientConfig, ClientContext, Message, Offset};

const PARTITIONS: i32 = 3;
const REPLICATION_FACTOR: i16 = 3;
const MIN_INSYNC_REPLICAS: &str = "2";
/// Whether each producer is idempotent; the index is the producer's id.
const PRODUCERS: [bool; 3] = [true, false, true];
/// Each producer's pause between two values (about 100 values a second each).
const SEND_INTERVAL: Duration = Duration::from_millis(10);
/// The producers' `message.timeout.ms`: how long librdkafka retries a value before giving up.
const MESSAGE_TIMEOUT_MS: u64 = 30_000;
/// Load before the fault, so every partition has acknowledged data to lose.
const WARM_UP: Duration = Duration::from_secs(3);
/// Load after the fault is over, so the group has something new to read.
const TAIL: Duration = Duration::from_secs(5);
/// How long a fault's effect on the metadata (a new leader, a smaller ISR) may take to show:
/// `broker.session.timeout.ms` plus an election and some scheduling on a busy machine.
const FAULT_WAIT: Duration = Duration::from_secs(15);
/// How long a returning broker may take to be back in every partition's ISR.
const ISR_REJOIN_WAIT: Duration = Duration::from_secs(20);
/// How long the group may take, after the producers stopped, to read what they wrote.
const GROUP_CATCH_UP: Duration = Duration::from_secs(15);
/// How long one full read of the topic after the run may take.
const FINAL_READ_WAIT: Duration = Duration::from_secs(30);
/// Settings for the cluster beyond the harness's short timeouts. Keys the broker does not
/// know yet are left out (an unknown key fails start-up), so the trials run on the branch
/// where replication is being written and pick the keys up once they exist.
const CLUSTER_SETTINGS: &[(&str, &str)] = &[
    ("replica.lag.time.max.ms", "3000"),
    // Fewer partitions to create, place and (once replicated) follow on a 2-core machine.
    ("offsets.topic.num.partitions", "3"),
    ("offsets.topic.replication.factor", "3"),
];
/// How many examples of each anomaly a failing trial prints.
const EXAMPLES: usize = 5;

/// Producer id of the raw Produce request sent to a paused leader.
const ZOMBIE_PRODUCER: usize = 100;
/// How long that request waits for its answer, counted from the pause.
const ZOMBIE_PROBE_WAIT: Duration = Duration::from_secs(30);
const TOPIC_ALREADY_EXISTS: i16 = 36;

// ----- the checker, on hand-made histories -----

fn history_of(writes: &[(usize, &str, Outcome)]) -> History {
    let mut history = History::new();
    history.producer(0, true);
    history.producer(1, false);
    for (producer, value, outcome) in writes {
        history.write(*producer, *value, *outcome);
    }
    history
}

fn acked(partition: i32, offset: i64) -> Outcome {
    Outcome::Acked { partition, offset }
}

#[test]
fn checker_finds_nothing_in_a_clean_history() {
    let mut h = history_of(&[(0, "a", acked(0, 0)), (1, "b", acked(0, 1)), (1, "c", Outcome::Unknown)]);
    for pass in [Pass::During, Pass::After(1), Pass::After(2)] {
        h.read(pass, 0, 0, "a");
        h.read(pass, 0, 1, "b");
    }
    let report = h.check();
    assert_eq!((report.acknowledged, report.unknown, report.failed), (2, 1, 0));
    assert!(report.violations(EXAMPLES).is_empty(), "{report:?}");
    assert_eq!((report.reads, report.values_read), (6, 2));
}

#[test]
fn checker_counts_an_acknowledged_value_missing_after_the_run_as_lost() {
    // Read by the group during the run, gone from the log after it: still lost.
    let mut h = history_of(&[(0, "a", acked(0, 0)), (0, "b", acked(0, 1)), (0, "c", acked(1, 0))]);
    h.read(Pass::During, 0, 0, "a");
    h.read(Pass::During, 0, 1, "b");
    h.read(Pass::After(1), 0, 0, "a");
    let report = h.check();
    assert_eq!(report.lost, ["b", "c"]);
    assert!(
        report.divergent.is_empty() && report.duplicated.is_empty(),
        "{report:?}"
    );
}

#[test]
fn checker_counts_a_value_at_two_offsets_as_duplicated_and_tells_idempotent_producers_apart() {
    // A retry of a producer without idempotence may land twice (Kafka allows it); one of an
    // idempotent producer must not.
    let mut h = history_of(&[(0, "idem", acked(0, 0)), (1, "plain", acked(0, 1))]);
    h.read(Pass::After(1), 0, 0, "idem");
    h.read(Pass::After(1), 0, 1, "plain");
    h.read(Pass::After(1), 0, 2, "plain");
    h.read(Pass::After(1), 0, 3, "idem");
    let report = h.check();
    assert_eq!(
        report.duplicated,
        [
            ("idem".to_string(), vec![(0, 0), (0, 3)]),
            ("plain".to_string(), vec![(0, 1), (0, 2)])
        ]
    );
    assert_eq!(report.duplicated_idempotent, 1);
    assert!(report.lost.is_empty() && report.divergent.is_empty(), "{report:?}");
    assert_eq!(
        report.violations(EXAMPLES).len(),
        1,
        "{:?}",
        report.violations(EXAMPLES)
    );

    let mut plain_only = history_of(&[(1, "plain", acked(0, 0))]);
    plain_only.read(Pass::After(1), 0, 0, "plain");
    plain_only.read(Pass::After(1), 0, 1, "plain");
    let report = plain_only.check();
    assert_eq!(report.duplicated.len(), 1);
    assert!(
        report.violations(EXAMPLES).is_empty(),
        "a plain producer's duplicate is reported, not a violation"
    );
}

#[test]
fn checker_counts_an_offset_read_with_two_values_across_passes_as_divergent() {
    // The group read "x" at 0/5 during the run; after the run 0/5 holds "y": the log changed
    // below what was exposed to consumers (a truncation past the high watermark).
    let mut h = history_of(&[(1, "x", Outcome::Unknown), (1, "y", Outcome::Unknown)]);
    h.read(Pass::During, 0, 5, "x");
    h.read(Pass::After(1), 0, 5, "y");
    h.read(Pass::After(2), 0, 5, "y");
    let report = h.check();
    assert_eq!(report.divergent.len(), 1, "{report:?}");
    let d = &report.divergent[0];
    assert_eq!(d.position, (0, 5));
    assert_eq!(d.read, BTreeSet::from(["x".to_string(), "y".to_string()]));
    assert_eq!(d.acknowledged, None);
    assert!(report.lost.is_empty(), "nothing was acknowledged");

    // Two passes after the run that disagree are divergent just the same.
    let mut h = history_of(&[(1, "x", Outcome::Unknown), (1, "y", Outcome::Unknown)]);
    h.read(Pass::After(1), 2, 0, "x");
    h.read(Pass::After(2), 2, 0, "y");
    assert_eq!(h.check().divergent.len(), 1);
}

#[test]
fn checker_counts_an_acknowledged_offset_holding_another_value_as_divergent() {
    // "a" was acknowledged at 1/3, but 1/3 holds "z" and "a" is nowhere: lost and divergent.
    let mut h = history_of(&[(0, "a", acked(1, 3)), (1, "z", Outcome::Unknown)]);
    h.read(Pass::After(1), 1, 3, "z");
    h.read(Pass::After(2), 1, 3, "z");
    let report = h.check();
    assert_eq!(report.lost, ["a"]);
    assert_eq!(report.divergent.len(), 1, "{report:?}");
    assert_eq!(report.divergent[0].position, (1, 3));
    assert_eq!(report.divergent[0].acknowledged.as_deref(), Some("a"));
    assert_eq!(report.divergent[0].to_string(), r#"1/3: read {"z"}, acknowledged a"#);
}

#[test]
fn checker_counts_a_value_read_only_away_from_its_acknowledged_offset_as_divergent() {
    // Acknowledged at 0/7, read only at 0/9 (0/7 beyond what was read): not lost, but the
    // acknowledgement named the wrong offset.
    let mut h = history_of(&[(0, "a", acked(0, 7))]);
    h.read(Pass::After(1), 0, 9, "a");
    let report = h.check();
    assert!(report.lost.is_empty());
    assert_eq!(report.divergent.len(), 1, "{report:?}");
    assert_eq!(report.divergent[0].position, (0, 7));
    assert!(report.divergent[0].read.is_empty());
}

#[test]
fn checker_flags_values_nobody_wrote_or_whose_write_failed_but_not_unknown_ones() {
    let mut h = history_of(&[
        (1, "maybe", Outcome::Unknown),
        (1, "maybe-not", Outcome::Unknown),
        (1, "refused", Outcome::Failed),
    ]);
    h.read(Pass::After(1), 0, 0, "maybe");
    h.read(Pass::After(1), 0, 1, "refused");
    h.read(Pass::After(1), 0, 2, "stranger");
    let report = h.check();
    assert_eq!(report.unexpected, ["refused", "stranger"]);
    assert!(report.lost.is_empty() && report.divergent.is_empty(), "{report:?}");
    assert_eq!((report.unknown, report.failed), (2, 1));
}

#[test]
fn checker_summary_is_one_line_of_counts() {
    let mut h = history_of(&[(0, "a", acked(0, 0)), (0, "b", acked(0, 1)), (1, "c", Outcome::Unknown)]);
    h.read(Pass::After(1), 0, 0, "a");
    h.read(Pass::After(1), 0, 2, "a");
    let summary = h.check().summary();
    assert_eq!(
        summary,
        "acknowledged=2 lost=1 duplicated=1 duplicated_idempotent=1 divergent=0 unknown=1 failed=0 \
         unexpected=0 reads=2 values_read=1"
    );
    assert!(!summary.contains('\n'));
}

// ----- the workload -----

/// Where the trial is when a value is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Phase {
    Before = 0,
    Fault = 1,
    Healed = 2,
}

impl Phase {
    fn from_u8(n: u8) -> Phase {
        match n {
            0 => Phase::Before,
            1 => Phase::Fault,
            _ => Phase::Healed,
        }
    }
}

/// One value a producer sent, and what it was told.
#[derive(Debug)]
struct Sent {
    producer: usize,
    value: String,
    partition: i32,
    phase: Phase,
    outcome: Outcome,
    /// The error librdkafka reported, for the trial's diagnosis.
    error: Option<String>,
}

/// A group member's read.
#[derive(Debug, Clone)]
struct GroupRead {
    partition: i32,
    offset: i64,
    value: String,
}

/// What the group consumer saw; shared with its thread.
#[derive(Debug, Default)]
struct GroupLog {
    reads: Vec<GroupRead>,
    values: HashSet<String>,
    /// An offset at or below the last one read in the same partition, within one assignment
    /// (no rebalance between them): reported, not failed on.
    rewinds: Vec<String>,
    errors: BTreeMap<String, usize>,
}

/// Counts the group's rebalances, so a re-read after one is told from one within an
/// assignment.
struct GroupContext {
    rebalances: Arc<AtomicU64>,
}

impl ClientContext for GroupContext {}

impl ConsumerContext for GroupContext {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, _rebalance: &Rebalance<'_>) {
        self.rebalances.fetch_add(1, Ordering::SeqCst);
    }
}

/// The producers and the group consumer of one trial, running in the background.
struct Workload {
    phase: Arc<AtomicU8>,
    stop_producers: Arc<AtomicBool>,
    stop_group: Arc<AtomicBool>,
    producers: Vec<tokio::task::JoinHandle<Vec<Sent>>>,
    group: tokio::task::JoinHandle<()>,
    group_log: Arc<Mutex<GroupLog>>,
    rebalances: Arc<AtomicU64>,
}

impl Workload {
    fn start(bootstrap: &str, topic: &str) -> Workload {
        let phase = Arc::new(AtomicU8::new(Phase::Before as u8));
        let stop_producers = Arc::new(AtomicBool::new(false));
        let stop_group = Arc::new(AtomicBool::new(false));
        let producers = PRODUCERS
            .iter()
            .enumerate()
            .map(|(id, &idempotent)| {
                tokio::spawn(produce(
                    bootstrap.to_string(),
                    topic.to_string(),
                    id,
                    idempotent,
                    phase.clone(),
                    stop_producers.clone(),
                ))
            })
            .collect();
        let group_log = Arc::new(Mutex::new(GroupLog::default()));
        let rebalances = Arc::new(AtomicU64::new(0));
        let group = {
            let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
            let (stop, log, rebalances) = (stop_group.clone(), group_log.clone(), rebalances.clone());
            tokio::task::spawn_blocking(move || consume_in_group(&bootstrap, &topic, &stop, &log, rebalances))
        };
        Workload {
            phase,
            stop_producers,
            stop_group,
            producers,
            group,
            group_log,
            rebalances,
        }
    }

    fn enter(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::SeqCst);
    }

    /// Stops sending and waits for every value's outcome (bounded by `message.timeout.ms`).
    async fn stop_producers(&mut self) -> Vec<Sent> {
        self.stop_producers.store(true, Ordering::SeqCst);
        let mut sent = Vec::new();
        for producer in self.producers.drain(..) {
            sent.extend(producer.await.expect("a producer task"));
        }
        sent
    }

    /// Lets the group read until it has every acknowledged value or `GROUP_CATCH_UP` passed,
    /// then stops it: what it read.
    async fn stop_group(self, acknowledged: &HashSet<&str>) -> (GroupLog, u64) {
        let deadline = Instant::now() + GROUP_CATCH_UP;
        while Instant::now() < deadline {
            let missing = {
                let log = self.group_log.lock().unwrap();
                acknowledged.iter().filter(|v| !log.values.contains(**v)).count()
            };
            if missing == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.stop_group.store(true, Ordering::SeqCst);
        self.group.await.expect("the group consumer thread");
        let log = std::mem::take(&mut *self.group_log.lock().unwrap());
        (log, self.rebalances.load(Ordering::SeqCst))
    }
}

/// One producer: a value every `SEND_INTERVAL` (`p{id}-{seq}`, to partition `seq % 3`) until
/// told to stop, then every outcome.
async fn produce(
    bootstrap: String,
    topic: String,
    id: usize,
    idempotent: bool,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
) -> Vec<Sent> {
    let message_timeout = MESSAGE_TIMEOUT_MS.to_string();
    let producer = producer(
        &bootstrap,
        &[
            ("enable.idempotence", if idempotent { "true" } else { "false" }),
            ("message.timeout.ms", message_timeout.as_str()),
            // A request to a paused broker is given up after this and retried elsewhere,
            // instead of after librdkafka's 60 s default.
            ("socket.timeout.ms", "10000"),
            ("linger.ms", "5"),
        ],
    );
    let mut pending = Vec::new();
    let mut sent = Vec::new();
    let mut seq: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let value = format!("p{id}-{seq}");
        let partition = i32::try_from(seq % u64::try_from(PARTITIONS).unwrap()).unwrap();
        let at = Phase::from_u8(phase.load(Ordering::SeqCst));
        let record = FutureRecord::<(), _>::to(&topic).partition(partition).payload(&value);
        match producer.send_result(record) {
            Ok(delivery) => pending.push((value, partition, at, delivery)),
            // Not queued, so never sent: certainly not written.
            Err((e, _)) => sent.push(Sent {
                producer: id,
                value,
                partition,
                phase: at,
                outcome: Outcome::Failed,
                error: Some(format!("not queued: {e}")),
            }),
        }
        seq += 1;
        tokio::time::sleep(SEND_INTERVAL).await;
    }
    // librdkafka settles every queued value within message.timeout.ms; the margin covers a
    // request already in flight when it expires.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(MESSAGE_TIMEOUT_MS) + Duration::from_secs(15);
    for (value, partition, at, delivery) in pending {
        let (outcome, error) = match tokio::time::timeout_at(deadline, delivery).await {
            Ok(Ok(Ok(d))) => (
                Outcome::Acked {
                    partition: d.partition,
                    offset: d.offset,
                },
                None,
            ),
            // librdkafka cannot tell "not written" from "maybe written" for a value it
            // retried (a timed-out request may have been appended), so every delivery error
            // is an unknown outcome.
            Ok(Ok(Err((e, _)))) => (Outcome::Unknown, Some(e.to_string())),
            Ok(Err(_canceled)) => (Outcome::Unknown, Some("delivery report canceled".to_string())),
            Err(_) => (Outcome::Unknown, Some("no delivery report in time".to_string())),
        };
        sent.push(Sent {
            producer: id,
            value,
            partition,
            phase: at,
            outcome,
            error,
        });
    }
    sent
}

/// A member of a consumer group on `topic` (auto-committing, from the earliest offset when
/// the group has none) until `stop`.
fn consume_in_group(
    bootstrap: &str,
    topic: &str,
    stop: &AtomicBool,
    log: &Mutex<GroupLog>,
    rebalances: Arc<AtomicU64>,
) {
    let group = unique("replication-group");
    let consumer: BaseConsumer<GroupContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "500")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        .set("socket.timeout.ms", "10000")
        .create_with_context(GroupContext {
            rebalances: rebalances.clone(),
        })
        .expect("group consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    // Partition → (rebalances seen when read, offset) of its last read.
    let mut last: BTreeMap<i32, (u64, i64)> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                let (partition, offset) = (m.partition(), m.offset());
                let generation = rebalances.load(Ordering::SeqCst);
                let mut log = log.lock().unwrap();
                if let Some(&(seen_generation, seen_offset)) = last.get(&partition)
                    && seen_generation == generation
                    && offset <= seen_offset
                {
                    log.rewinds
                        .push(format!("{partition}/{offset} after {partition}/{seen_offset}"));
                }
                last.insert(partition, (generation, offset));
                log.values.insert(value.clone());
                log.reads.push(GroupRead {
                    partition,
                    offset,
                    value,
                });
            }
            Some(Err(e)) => *log.lock().unwrap().errors.entry(e.to_string()).or_default() += 1,
        }
    }
}

/// Reads every partition of `topic` from its start up to the high watermark it had when the
/// read began, with a fresh consumer outside any group: (partition, offset, value) in order,
/// or why it could not reach the end.
fn read_everything(bootstrap: &str, topic: &str) -> Result<Vec<(i32, i64, String)>, String> {
    let deadline = Instant::now() + FINAL_READ_WAIT;
    let consumer = consumer(bootstrap, &[("enable.partition.eof", "true")]);
    let mut high = BTreeMap::new();
    for partition in 0..PARTITIONS {
        loop {
            match consumer.fetch_watermarks(topic, partition, POLL_REQUEST_TIMEOUT) {
                Ok((_, h)) => {
                    high.insert(partition, h);
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("high watermark of {topic}/{partition}: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => {
                    return Err(format!(
                        "no high watermark for {topic}/{partition} within {FINAL_READ_WAIT:?}: {e}"
                    ));
                }
            }
        }
    }
    assign(
        &consumer,
        topic,
        &(0..PARTITIONS).collect::<Vec<_>>(),
        Offset::Beginning,
    );
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let mut reads = Vec::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    let done = |next: &BTreeMap<i32, i64>| next.iter().all(|(p, n)| *n >= high[p]);
    while !done(&next) {
        if Instant::now() >= deadline {
            return Err(format!(
                "read {topic} up to {next:?} of high watermarks {high:?} within {FINAL_READ_WAIT:?}; errors {errors:?}"
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                next.insert(m.partition(), m.offset() + 1);
                reads.push((m.partition(), m.offset(), value));
            }
            // At the end of what the leader serves: its position tells whether that is the
            // high watermark asked for (a gap in the offsets would otherwise stall the loop).
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                if let Ok(positions) = consumer.position()
                    && let Some(Offset::Offset(at)) = positions.find_partition(topic, partition).map(|e| e.offset())
                {
                    let slot = next.entry(partition).or_default();
                    *slot = (*slot).max(at);
                }
            }
            Some(Err(e)) => *errors.entry(e.to_string()).or_default() += 1,
        }
    }
    println!(
        "read {} records of {topic} up to the high watermarks {high:?}{}",
        reads.len(),
        if errors.is_empty() {
            String::new()
        } else {
            format!("; errors {errors:?}")
        }
    );
    Ok(reads)
}

// ----- the cluster side -----

/// The nodes of a trial: processes on loopback (`Cluster`) or containers (`DockerCluster`).
trait Nodes {
    /// Node `id`'s client address.
    fn addr(&self, id: i32) -> std::net::SocketAddr;
}

impl Nodes for Cluster {
    fn addr(&self, id: i32) -> std::net::SocketAddr {
        Cluster::addr(self, id)
    }
}

impl Nodes for DockerCluster {
    fn addr(&self, id: i32) -> std::net::SocketAddr {
        DockerCluster::addr(self, id)
    }
}

/// Polls the nodes `via` until every one of them lists `topic`/`partition` as `wanted` says
/// (described by `what`), within `limit`: the first node's view, or what each node last said.
/// Every node, not any: a node just back (continued, restarted) may still answer from the
/// metadata it had before.
async fn wait_partition(
    cluster: &impl Nodes,
    via: &[i32],
    topic: &str,
    partition: i32,
    what: &str,
    limit: Duration,
    wanted: impl Fn(&PartitionView) -> bool,
) -> Result<PartitionView, String> {
    let deadline = Instant::now() + limit;
    loop {
        let mut seen = BTreeMap::new();
        for &id in via {
            seen.insert(id, partition_view_at(cluster.addr(id), topic, partition).await);
        }
        if let Some(Ok(first)) = seen.values().next()
            && seen.values().all(|v| v.as_ref().is_ok_and(&wanted))
        {
            return Ok(first.clone());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{topic}/{partition}: nodes {via:?} did not all list {what} within {limit:?}; last answers {seen:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The running nodes that are not paused: the ones that answer.
fn answering(cluster: &Cluster) -> Vec<i32> {
    cluster
        .running()
        .into_iter()
        .filter(|id| !cluster.node(*id).is_paused())
        .collect()
}

/// `CLUSTER_SETTINGS` minus the keys this broker's configuration does not know yet.
fn cluster_settings() -> Vec<(&'static str, &'static str)> {
    CLUSTER_SETTINGS
        .iter()
        .copied()
        .filter(|(key, value)| {
            let known = sluice::config::BrokerConfig::default().set(key, value).is_ok();
            if !known {
                println!("the broker does not know {key} yet: started without {key}={value}");
            }
            known
        })
        .collect()
}

/// Creates `topic` (3 partitions, replication factor 3, min.insync.replicas=2) and waits
/// until the nodes `ids` list each partition with a leader and a full ISR: partition 0's view.
async fn create_replicated_topic(cluster: &impl Nodes, ids: &[i32], topic: &str) -> PartitionView {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(common::topic(topic))
                .with_num_partitions(PARTITIONS)
                .with_replication_factor(REPLICATION_FACTOR)
                .with_configs(vec![
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_static_str("min.insync.replicas"))
                        .with_value(Some(StrBytes::from_static_str(MIN_INSYNC_REPLICAS))),
                ]),
        ])
        .with_timeout_ms(10_000);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempts = Vec::new();
    loop {
        match try_call(cluster.addr(1), 7, &request, Duration::from_secs(15)).await {
            Ok(resp) if resp.topics[0].error_code == 0 => break,
            Ok(resp) if resp.topics[0].error_code == TOPIC_ALREADY_EXISTS && !attempts.is_empty() => break,
            other => attempts.push(format!("{other:?}")),
        }
        assert!(
            Instant::now() < deadline,
            "CreateTopics {topic} (RF {REPLICATION_FACTOR}): {attempts:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut views = Vec::new();
    for partition in 0..PARTITIONS {
        let view = wait_partition(
            cluster,
            ids,
            topic,
            partition,
            "a leader and all 3 replicas in sync",
            Duration::from_secs(20),
            |v| v.leader > 0 && v.replicas.len() == 3 && v.isr.len() == 3 && v.isr.contains(&v.leader),
        )
        .await
        .unwrap_or_else(|e| panic!("{e} (node logs follow)"));
        views.push(view);
    }
    println!("{topic}: {views:?}");
    views.swap_remove(0)
}

/// Waits until every answering node lists node `id` in the ISR of every partition of `topic`,
/// within `ISR_REJOIN_WAIT`.
async fn wait_back_in_isr(cluster: &Cluster, topic: &str, id: i32, violations: &mut Vec<String>) {
    wait_back_in_isr_of(cluster, &answering(cluster), topic, id, violations).await;
}

/// `wait_back_in_isr`, asking the nodes `via`.
async fn wait_back_in_isr_of(cluster: &impl Nodes, via: &[i32], topic: &str, id: i32, violations: &mut Vec<String>) {
    let started = Instant::now();
    let what = format!("node {id} back in the ISR");
    for partition in 0..PARTITIONS {
        let limit = ISR_REJOIN_WAIT.saturating_sub(started.elapsed());
        let rejoined = wait_partition(cluster, via, topic, partition, &what, limit, |v| v.isr.contains(&id));
        if let Err(e) = rejoined.await {
            violations.push(e);
            return;
        }
    }
    println!("node {id} back in every ISR of {topic} after {:?}", started.elapsed());
}

/// Checks the metadata once `gone` (partition 0's leader before at `before`) has stopped
/// serving: another node leads from the ISR at a higher leader epoch, and `gone` left the ISR.
async fn expect_new_leader(
    cluster: &Cluster,
    topic: &str,
    gone: i32,
    before: &PartitionView,
    violations: &mut Vec<String>,
) {
    let what = format!(
        "a leader other than node {gone}, in the ISR, without node {gone}, at a leader epoch above {}",
        before.leader_epoch
    );
    let started = Instant::now();
    match wait_partition(cluster, &answering(cluster), topic, 0, &what, FAULT_WAIT, |v| {
        v.leader > 0
            && v.leader != gone
            && v.isr.contains(&v.leader)
            && !v.isr.contains(&gone)
            && v.leader_epoch > before.leader_epoch
    })
    .await
    {
        Ok(view) => println!(
            "{topic}/0 after node {gone} left, {:?} later: {view:?}",
            started.elapsed()
        ),
        Err(e) => violations.push(e),
    }
}

// ----- the faults -----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// SIGKILL partition 0's leader, restart it once another leads.
    KillLeader,
    /// SIGSTOP partition 0's leader past its session, SIGCONT it once another leads.
    PauseLeader,
    /// SIGTERM each node in turn, restarting it and waiting for it to rejoin the ISR.
    RollingRestart,
    /// SIGKILL every node at once, then start them all.
    KillAll,
    /// Every node's disk loses what was not fsynced (a power cut: each data directory on its
    /// own ext4 volume, shut down without flushing its journal) and every node is killed at
    /// once; the volumes are mounted again and the nodes started.
    PowerCut,
    /// Partition 0's leader's disk fills up to the last page (each data directory on its own
    /// tmpfs), and is freed again once another node leads and the full one left the ISR.
    DiskFull,
}

/// The volumes a trial's nodes keep their data directories on: ext4 ones for a power cut,
/// tmpfs ones (by node) for a full disk.
#[derive(Default)]
struct Disks {
    ext4: Vec<Ext4>,
    tmpfs: BTreeMap<i32, Tmpfs>,
}

/// How long partition 0's leader's disk stays full once the others have taken over.
const FULL_FOR: Duration = Duration::from_secs(3);

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillLeader => "kill_leader",
            Fault::PauseLeader => "pause_leader",
            Fault::RollingRestart => "rolling_restart",
            Fault::KillAll => "kill_all",
            Fault::PowerCut => "power_cut",
            Fault::DiskFull => "disk_full",
        }
    }

    /// Injects the fault and returns once it is over (nodes back), pushing each metadata
    /// expectation that failed onto `violations`; the zombie probe's outcome, if one was sent.
    async fn inject(
        self,
        cluster: &mut Cluster,
        disks: &Disks,
        topic: &str,
        before: &PartitionView,
        violations: &mut Vec<String>,
    ) -> Option<Sent> {
        let leader = before.leader;
        match self {
            Fault::PowerCut => {
                println!("cutting the power of all nodes at once; {topic}/0 was {before:?}");
                for volume in &disks.ext4 {
                    volume.fail();
                }
                cluster.kill_all();
                for volume in &disks.ext4 {
                    volume.replace();
                }
                Fault::restarted(cluster, topic, before, violations).await;
                None
            }
            Fault::DiskFull => {
                println!("filling node {leader}'s disk, partition 0's leader's");
                let pad = disks.tmpfs[&leader].path().join("pad");
                fill_up(&pad);
                // Its next refused append takes its log directory offline: another node leads
                // and it leaves the ISR (it heartbeats on, so it is not fenced). Asked of the
                // other nodes: the full one's metadata log may be waiting for space (when it
                // leads the quorum, or is the one voter behind), its image then frozen.
                let others: Vec<i32> = answering(cluster).into_iter().filter(|id| *id != leader).collect();
                let what = format!("a leader other than node {leader}, in the ISR, without node {leader}");
                let started = Instant::now();
                match wait_partition(cluster, &others, topic, 0, &what, FAULT_WAIT, |v| {
                    v.leader > 0
                        && v.leader != leader
                        && v.isr.contains(&v.leader)
                        && !v.isr.contains(&leader)
                        && v.leader_epoch > before.leader_epoch
                })
                .await
                {
                    Ok(view) => println!("{topic}/0 {:?} after the disk filled: {view:?}", started.elapsed()),
                    Err(e) => violations.push(e),
                }
                // Nor does the full node claim the leadership from a frozen image.
                let what = format!("node {leader} not naming itself leader");
                if let Err(e) =
                    wait_partition(cluster, &[leader], topic, 0, &what, FAULT_WAIT, |v| v.leader != leader).await
                {
                    violations.push(e);
                }
                tokio::time::sleep(FULL_FOR).await;
                std::fs::remove_file(&pad).expect("free the disk");
                println!("node {leader}'s disk has space again");
                wait_back_in_isr(cluster, topic, leader, violations).await;
                None
            }
            Fault::KillLeader => {
                println!("killing node {leader}, partition 0's leader");
                cluster.kill(leader);
                expect_new_leader(cluster, topic, leader, before, violations).await;
                // Load on the new leader with one replica down: 2 in sync, min.insync.replicas.
                tokio::time::sleep(Duration::from_secs(2)).await;
                cluster.restart(leader).await;
                wait_back_in_isr(cluster, topic, leader, violations).await;
                None
            }
            Fault::PauseLeader => {
                println!("pausing node {leader}, partition 0's leader");
                cluster.pause(leader);
                // A Produce the frozen leader will find in its socket when it wakes, before it
                // can learn that it was deposed.
                let probe = tokio::spawn(zombie_probe(cluster.addr(leader), topic.to_string()));
                expect_new_leader(cluster, topic, leader, before, violations).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                cluster.resume(leader);
                let sent = probe.await.expect("the zombie probe");
                println!(
                    "the paused leader, woken, answered its probe with {:?} ({:?})",
                    sent.outcome, sent.error
                );
                wait_back_in_isr(cluster, topic, leader, violations).await;
                Some(sent)
            }
            Fault::RollingRestart => {
                for id in cluster.ids() {
                    let now = cluster
                        .partition_view(id, topic, 0)
                        .await
                        .unwrap_or_else(|_| before.clone());
                    println!("stopping node {id} (SIGTERM); {topic}/0 is {now:?}");
                    cluster.terminate(id).await;
                    if now.leader == id {
                        expect_new_leader(cluster, topic, id, &now, violations).await;
                    } else {
                        let what = format!("a running leader and node {id} out of the ISR");
                        if let Err(e) = wait_partition(cluster, &answering(cluster), topic, 0, &what, FAULT_WAIT, |v| {
                            v.leader > 0 && v.leader != id && v.isr.contains(&v.leader) && !v.isr.contains(&id)
                        })
                        .await
                        {
                            violations.push(e);
                        }
                    }
                    cluster.restart(id).await;
                    wait_back_in_isr(cluster, topic, id, violations).await;
                }
                None
            }
            Fault::KillAll => {
                println!("killing all nodes at once; {topic}/0 was {before:?}");
                cluster.kill_all();
                Fault::restarted(cluster, topic, before, violations).await;
                None
            }
        }
    }

    /// After every node stopped at once: starts them all, and waits for a leader from the ISR
    /// and for every node back in it.
    async fn restarted(cluster: &mut Cluster, topic: &str, before: &PartitionView, violations: &mut Vec<String>) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cluster.start_all().await;
        // A leader again, from the ISR. Whether the leader epoch moves on depends on the
        // controller noticing the crash: Kafka's controller does when a broker re-registers
        // after an unclean shutdown with eligible leader replicas on (KIP-966,
        // `handleBrokerUncleanShutdown`), not otherwise; only that it never falls is asked here.
        let what = format!(
            "a leader in the ISR at a leader epoch of at least {}",
            before.leader_epoch
        );
        match wait_partition(cluster, &answering(cluster), topic, 0, &what, FAULT_WAIT, |v| {
            v.leader > 0 && v.isr.contains(&v.leader) && v.leader_epoch >= before.leader_epoch
        })
        .await
        {
            Ok(view) => println!("{topic}/0 after the restart: {view:?}"),
            Err(e) => violations.push(e),
        }
        for id in cluster.ids() {
            wait_back_in_isr(cluster, topic, id, violations).await;
        }
    }
}

/// A Produce (acks=all) of one value to partition 0 sent to a paused leader: its outcome. The
/// value is written nowhere but there, after the others elected a new leader, so no answer but
/// success can leave it in the log: anything else counts as certainly failed, and reading it
/// later is an anomaly.
async fn zombie_probe(addr: std::net::SocketAddr, topic: String) -> Sent {
    let value = "zombie-0".to_string();
    let record = (
        None,
        Some(Bytes::from(value.clone())),
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap(),
    );
    let batch = sluice::log::batch::encode_records(&[record], Compression::None).expect("a batch");
    let request = produce_request(&topic, 0, batch, -1);
    // The Produce timeout is 10 s: the answer comes within that of the node waking up.
    let answer = try_call(addr, 9, &request, ZOMBIE_PROBE_WAIT).await;
    let (outcome, error) = match answer {
        Ok(resp) => {
            let p = &resp.responses[0].partition_responses[0];
            match p.error_code {
                0 => (
                    Outcome::Acked {
                        partition: 0,
                        offset: p.base_offset,
                    },
                    None,
                ),
                code => (Outcome::Failed, Some(format!("error {code}"))),
            }
        }
        Err(e) => (Outcome::Failed, Some(e)),
    };
    Sent {
        producer: ZOMBIE_PRODUCER,
        value,
        partition: 0,
        phase: Phase::Fault,
        outcome,
        error,
    }
}

// ----- one trial -----

/// What one trial found.
struct TrialResult {
    line: String,
    violations: Vec<String>,
}

async fn trial(fault: Fault, number: usize, of: usize) -> Option<TrialResult> {
    let started = Instant::now();
    let mut cluster = Cluster::start_with(3, &cluster_settings()).await;
    // A power cut or a full disk needs each node's data directory on a volume of its own
    // (SKIP where this process may not mount one).
    let mut disks = Disks::default();
    if matches!(fault, Fault::PowerCut | Fault::DiskFull) {
        cluster.stop_all().await;
        for id in cluster.ids() {
            let dir = cluster.node(id).dir.path().to_path_buf();
            match fault {
                Fault::PowerCut => disks.ext4.push(Ext4::mount_over(&dir, 256)?),
                _ => drop(disks.tmpfs.insert(id, Tmpfs::mount_over(&dir, 256)?)),
            }
        }
        cluster.start_all().await;
    }
    let topic = unique(fault.name());
    let before = create_replicated_topic(&cluster, &cluster.running(), &topic).await;
    let mut violations = Vec::new();

    let workload = Workload::start(&cluster.bootstrap(), &topic);
    tokio::time::sleep(WARM_UP).await;
    workload.enter(Phase::Fault);
    let fault_at = Instant::now();
    let probe = fault
        .inject(&mut cluster, &disks, &topic, &before, &mut violations)
        .await;
    let fault_lasted = fault_at.elapsed();
    let ended = (workload, probe, violations);
    let result = judge(
        fault.name(),
        (number, of),
        (started, fault_lasted),
        ended,
        &cluster.bootstrap(),
        &topic,
        &|| cluster.logs_tail(40),
    )
    .await;
    drop(cluster);
    drop(disks);
    Some(result)
}

/// The end of a trial, once its fault is over: the workload runs on for `TAIL` and stops, the
/// topic is read back twice through `bootstrap`, and the history is checked. The trial's line
/// and every violation (`violations` holds those found before); the nodes' `logs` are printed
/// when there is one.
async fn judge(
    fault: &str,
    (number, of): (usize, usize),
    (started, fault_lasted): (Instant, Duration),
    (mut workload, probe, mut violations): (Workload, Option<Sent>, Vec<String>),
    bootstrap: &str,
    topic: &str,
    logs: &dyn Fn() -> String,
) -> TrialResult {
    workload.enter(Phase::Healed);
    tokio::time::sleep(TAIL).await;
    let mut sent = workload.stop_producers().await;
    sent.extend(probe);
    let acknowledged: HashSet<&str> = sent
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::Acked { .. }))
        .map(|s| s.value.as_str())
        .collect();
    let (group, rebalances) = workload.stop_group(&acknowledged).await;

    let mut history = History::new();
    for (id, &idempotent) in PRODUCERS.iter().enumerate() {
        history.producer(id, idempotent);
    }
    history.producer(ZOMBIE_PRODUCER, false);
    for s in &sent {
        history.write(s.producer, s.value.clone(), s.outcome);
    }
    for r in &group.reads {
        history.read(Pass::During, r.partition, r.offset, r.value.clone());
    }
    for pass in 1..=2 {
        let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
        match tokio::task::spawn_blocking(move || read_everything(&bootstrap, &topic))
            .await
            .unwrap()
        {
            Ok(reads) => {
                for (partition, offset, value) in reads {
                    history.read(Pass::After(pass), partition, offset, value);
                }
            }
            Err(e) => violations.push(format!("read after the run, pass {pass}: {e}")),
        }
    }
    let report = history.check();
    violations.extend(report.violations(EXAMPLES));
    violations.extend(workload_violations(&sent, &group, &report));

    let group_missing = acknowledged.iter().filter(|v| !group.values.contains(**v)).count();
    let line = format!(
        "TRIAL fault={} trial={number}/{of} {} group_reads={} group_missing={group_missing} group_rewinds={} \
         group_rebalances={rebalances} fault_s={:.1} seconds={:.1} violations={}",
        fault,
        report.summary(),
        group.reads.len(),
        group.rewinds.len(),
        fault_lasted.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        violations.len(),
    );
    let mut errors: BTreeMap<(usize, &str), usize> = BTreeMap::new();
    for s in &sent {
        if let Some(e) = &s.error {
            *errors.entry((s.producer, e.as_str())).or_default() += 1;
        }
    }
    if !errors.is_empty() {
        println!("producer errors (producer, error) → count: {errors:?}");
    }
    if !group.errors.is_empty() {
        println!("group consumer errors: {:?}", group.errors);
    }
    if !group.rewinds.is_empty() {
        println!(
            "the group read offsets again within one assignment: {:?}",
            &group.rewinds[..group.rewinds.len().min(EXAMPLES)]
        );
    }
    if !violations.is_empty() {
        eprintln!("{}", logs());
    }
    TrialResult { line, violations }
}

/// The workload's own expectations: every producer got acknowledgements before the fault and
/// after it (a cluster that acknowledges nothing loses nothing), and the group read values
/// sent after the fault on every partition (it kept consuming).
fn workload_violations(sent: &[Sent], group: &GroupLog, report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let elsewhere: Vec<String> = sent
        .iter()
        .filter_map(|s| match s.outcome {
            Outcome::Acked { partition, offset } if partition != s.partition => Some(format!(
                "{} sent to {}, acknowledged at {partition}/{offset}",
                s.value, s.partition
            )),
            _ => None,
        })
        .collect();
    if !elsewhere.is_empty() {
        out.push(format!(
            "{} value(s) acknowledged on another partition than the one they were sent to, e.g. {:?}",
            elsewhere.len(),
            &elsewhere[..elsewhere.len().min(EXAMPLES)]
        ));
    }
    for (id, &idempotent) in PRODUCERS.iter().enumerate() {
        for phase in [Phase::Before, Phase::Healed] {
            let ours: Vec<&Sent> = sent.iter().filter(|s| s.producer == id && s.phase == phase).collect();
            let acked = ours
                .iter()
                .filter(|s| matches!(s.outcome, Outcome::Acked { .. }))
                .count();
            if acked == 0 {
                let first_error = ours.iter().find_map(|s| s.error.as_deref());
                out.push(format!(
                    "producer {id} (idempotent: {idempotent}): none of its {} values sent {phase:?} the fault was \
                     acknowledged; first error: {first_error:?}",
                    ours.len()
                ));
            }
        }
    }
    let healed: HashSet<&str> = sent
        .iter()
        .filter(|s| s.phase == Phase::Healed)
        .map(|s| s.value.as_str())
        .collect();
    let continued: BTreeSet<i32> = group
        .reads
        .iter()
        .filter(|r| healed.contains(r.value.as_str()))
        .map(|r| r.partition)
        .collect();
    let stalled: Vec<i32> = (0..PARTITIONS).filter(|p| !continued.contains(p)).collect();
    if !stalled.is_empty() {
        out.push(format!(
            "the group read nothing sent after the fault on partitions {stalled:?} ({} reads in all, errors {:?}; \
             {} values acknowledged)",
            group.reads.len(),
            group.errors,
            report.acknowledged
        ));
    }
    out
}

/// `SLUICE_FAULT_TRIALS`, default 1.
fn trials() -> usize {
    match std::env::var("SLUICE_FAULT_TRIALS") {
        Ok(n) => n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .unwrap_or_else(|| panic!("SLUICE_FAULT_TRIALS must be a positive whole number, not {n:?}")),
        Err(_) => 1,
    }
}

/// Runs `SLUICE_FAULT_TRIALS` trials of `fault`, each on its own cluster, and fails if any
/// broke a guarantee.
async fn run_trials(fault: Fault) {
    run_trials_of(fault.name(), async |number, of| trial(fault, number, of).await).await;
}

/// Runs `SLUICE_FAULT_TRIALS` trials with `one` and fails if any broke a guarantee; a trial
/// that returns None could not run here (says why it skipped).
async fn run_trials_of(name: &str, one: impl AsyncFn(usize, usize) -> Option<TrialResult>) {
    let of = trials();
    let mut failed = Vec::new();
    for number in 1..=of {
        let Some(result) = one(number, of).await else {
            return;
        };
        println!("{}", result.line);
        if !result.violations.is_empty() {
            eprintln!("trial {number}/{of} of {name}:\n  {}", result.violations.join("\n  "));
            failed.push((number, result.violations));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {of} trial(s) of {name} broke a guarantee: {failed:#?}",
        failed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_loses_no_acknowledged_write_and_the_group_goes_on() {
    // Kafka's ReplicaManager/Partition with acks=all: a write is acknowledged once every ISR
    // member has it, so when the leader dies (fenced after broker.session.timeout.ms) the
    // controller elects another from the ISR (KRaft's PartitionChangeBuilder) holding it.
    run_trials(Fault::KillLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_is_replaced_and_its_writes_as_a_zombie_never_surface() {
    // A leader frozen past its session is fenced and replaced at a higher leader epoch; when it
    // wakes it cannot acknowledge (its followers fetch from the new leader, so its high
    // watermark cannot pass what they hold) and, back as a follower, truncates what it
    // appended alone (KIP-101, OffsetsForLeaderEpoch / Fetch diverging epochs of KIP-595).
    run_trials(Fault::PauseLeader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_no_acknowledged_write() {
    // Kafka's controlled shutdown (KIP-631 BrokerHeartbeat WantShutDown): a stopping broker's
    // leaderships move to other ISR members before it stops, and it rejoins the ISR once it
    // has caught up after its restart.
    run_trials(Fault::RollingRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_every_node_at_once_loses_no_acknowledged_write() {
    // acks=all with log.flush.interval.messages=1: every ISR member has fsynced a write before
    // it is acknowledged (followers fetch again only once what they appended is durable), so
    // a power cut of the whole cluster loses nothing acknowledged.
    run_trials(Fault::KillAll).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_of_every_node_loses_no_acknowledged_write() {
    // kill_all keeps the page cache, which a power cut does not: here every node's disk keeps
    // only what reached it. With log.flush.interval.messages=1 every ISR member fsyncs a write
    // (and the group's offsets) before it is acknowledged, so nothing acknowledged is lost.
    run_trials(Fault::PowerCut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fills_under_load_loses_no_acknowledged_write() {
    // Kafka takes a log directory that fails offline (KIP-858; its only one halts the
    // broker). Sluice's full node reports its directory offline, hands its leaderships over,
    // leaves the ISRs while refusing writes, and rejoins once a probe write succeeds; the
    // checker finds every acknowledged write once and the group misses nothing.
    run_trials(Fault::DiskFull).await;
}

// ----- a network partition, on the docker cluster -----

/// How long the cut-off leader stays cut off once the majority has elected another: long
/// enough for its clients to keep trying it.
const CUT_OFF_FOR: Duration = Duration::from_secs(3);

/// One trial of the partition fault on `DockerCluster` (None when no image is given): partition
/// 0's leader loses the other brokers and the quorum (`docker network disconnect` of the
/// internal network) while the workload's clients, on the host, still reach it.
async fn partition_trial(number: usize, of: usize) -> Option<TrialResult> {
    let started = Instant::now();
    let cluster = DockerCluster::up().await?;
    let ids = cluster.ids();
    let topic = unique("cut_leader");
    let before = create_replicated_topic(&cluster, &ids, &topic).await;
    let leader = before.leader;
    let majority: Vec<i32> = ids.iter().copied().filter(|&id| id != leader).collect();
    let mut violations = Vec::new();

    let workload = Workload::start(&cluster.bootstrap(), &topic);
    tokio::time::sleep(WARM_UP).await;
    workload.enter(Phase::Fault);
    let fault_at = Instant::now();
    println!("cutting node {leader}, partition 0's leader, off from the cluster; {topic}/0 was {before:?}");
    cluster.cut(leader);
    // A write its clients still send it: with its followers gone and the controller out of
    // reach it can neither advance its high watermark nor commit a smaller ISR, so acks=all
    // must not be acknowledged; the record stays in its log alone until it rejoins.
    let probe = tokio::spawn(zombie_probe(cluster.addr(leader), topic.clone()));
    let what = format!(
        "a leader other than node {leader}, without it in the ISR, at a leader epoch above {}",
        before.leader_epoch
    );
    match wait_partition(&cluster, &majority, &topic, 0, &what, FAULT_WAIT, |v| {
        v.leader > 0 && v.leader != leader && !v.isr.contains(&leader) && v.leader_epoch > before.leader_epoch
    })
    .await
    {
        Ok(view) => println!(
            "the majority {majority:?} elected, {:?} after the cut: {view:?}",
            fault_at.elapsed()
        ),
        Err(e) => violations.push(e),
    }
    tokio::time::sleep(CUT_OFF_FOR).await;
    let sent = probe.await.expect("the probe");
    println!(
        "the cut-off leader answered its acks=all probe with {:?} ({:?})",
        sent.outcome, sent.error
    );
    if matches!(sent.outcome, Outcome::Acked { .. }) {
        violations.push(format!(
            "node {leader}, cut off from its followers and the controller, acknowledged an acks=all write"
        ));
    }
    cluster.heal(leader);
    println!("node {leader} connected again");
    wait_back_in_isr_of(&cluster, &ids, &topic, leader, &mut violations).await;
    // Back in the ISR it truncated what it wrote alone (KIP-101); make it lead again, so the
    // reads after the run come from its log and would show the probe's record had it not.
    if before.replicas.first() == Some(&leader) {
        elect_preferred(&cluster, &topic, leader, &mut violations).await;
    } else {
        println!("node {leader} is not the preferred replica of {topic}/0: no election back");
    }
    let fault_lasted = fault_at.elapsed();
    let ended = (workload, Some(sent), violations);
    let logs = || cluster.logs_tail(40);
    Some(
        judge(
            "cut_leader",
            (number, of),
            (started, fault_lasted),
            ended,
            &cluster.bootstrap(),
            &topic,
            &logs,
        )
        .await,
    )
}

/// A preferred-leader election (ElectLeaders) of `topic`/0, waiting until node `preferred`
/// leads it everywhere.
async fn elect_preferred(cluster: &DockerCluster, topic: &str, preferred: i32, violations: &mut Vec<String>) {
    use kafka_protocol::messages::ElectLeadersRequest;
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    let request = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_topic_partitions(Some(vec![
            TopicPartitions::default()
                .with_topic(common::topic(topic))
                .with_partitions(vec![0]),
        ]))
        .with_timeout_ms(10_000);
    // Back in the ISR is not yet live at the controller: until its heartbeats have unfenced it
    // the election answers PREFERRED_LEADER_NOT_AVAILABLE (80), and is asked again.
    let deadline = Instant::now() + FAULT_WAIT;
    loop {
        let answer = try_call(cluster.addr(preferred), 2, &request, Duration::from_secs(15)).await;
        let code = answer.as_ref().ok().and_then(|resp| {
            let result = resp.replica_election_results.first()?.partition_result.first()?;
            Some(if resp.error_code != 0 {
                resp.error_code
            } else {
                result.error_code
            })
        });
        println!("ElectLeaders (preferred) of {topic}/0: {answer:?}");
        // 0: elected; 84 ELECTION_NOT_NEEDED: it leads already.
        if matches!(code, Some(0 | 84)) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let what = format!("node {preferred} leading again");
    match wait_partition(cluster, &cluster.ids(), topic, 0, &what, FAULT_WAIT, |v| {
        v.leader == preferred
    })
    .await
    {
        Ok(view) => println!("{topic}/0 after the election: {view:?}"),
        Err(e) => violations.push(e),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_cluster_acknowledges_nothing_and_truncates_when_healed() {
    // Kafka's fencing by the controller: the cut-off leader's session expires, the majority's
    // controller elects another ISR member at a higher leader epoch, and the old leader, unable
    // to reach the controller, can commit no ISR without its followers, so its high watermark
    // stands still and acks=all waits (then times out). Healed, it learns the new epoch,
    // truncates its divergent tail and catches up (KIP-101).
    run_trials_of("cut_leader", async |number, of| {
        let result = partition_trial(number, of).await;
        if result.is_none() {
            println!("SKIP: SLUICE_DOCKER_IMAGE is not set (protocol-tests/docker/cluster.sh runs this test)");
        }
        result
    })
    .await;
}
