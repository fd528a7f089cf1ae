//! Group coordinator measurements, reported not asserted (run with
//! `cargo test --release --test group_bench -- --ignored --nocapture`):
//! - how long a 3-member group takes to rebalance when its third member arrives, classic and
//!   KIP-848, median of several runs;
//! - what an idle group costs in broker memory.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientConfig, ClientContext};

struct Ctx(Arc<Mutex<BTreeSet<i32>>>);
impl ClientContext for Ctx {}
impl ConsumerContext for Ctx {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        let now = consumer
            .assignment()
            .map(|t| t.elements().iter().map(|e| e.partition()).collect())
            .unwrap_or_default();
        *self.0.lock().unwrap() = now;
    }
}

fn member(
    bootstrap: &str,
    group: &str,
    topic: &str,
    protocol: &str,
) -> (
    Arc<Mutex<BTreeSet<i32>>>,
    std::thread::JoinHandle<()>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("group.protocol", protocol);
    if protocol == "classic" {
        c.set("session.timeout.ms", "6000").set("heartbeat.interval.ms", "100");
    }
    let consumer: BaseConsumer<Ctx> = c.create_with_context(Ctx(seen.clone())).unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let t = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::SeqCst) {
            let _ = consumer.poll(Duration::from_millis(5));
        }
    });
    (seen, t, stop)
}

fn split_exactly(sets: &[&Arc<Mutex<BTreeSet<i32>>>], n: i32) -> bool {
    let mut all: Vec<i32> = sets
        .iter()
        .flat_map(|s| s.lock().unwrap().iter().copied().collect::<Vec<_>>())
        .collect();
    all.sort();
    sets.iter().all(|s| !s.lock().unwrap().is_empty()) && all == (0..n).collect::<Vec<_>>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, run by hand"]
async fn bench_three_member_rebalance() {
    for protocol in ["classic", "consumer"] {
        let broker = TestBroker::start(&[
            ("group.initial.rebalance.delay.ms", "0"),
            ("group.min.session.timeout.ms", "1000"),
            ("group.consumer.min.heartbeat.interval.ms", "100"),
            ("group.consumer.heartbeat.interval.ms", "100"),
            ("num.partitions", "4"),
        ])
        .await;
        let bootstrap = broker.bootstrap();
        let mut times = Vec::new();
        for run in 0..5 {
            let topic = format!("rebalance-{protocol}-{run}");
            let group = format!("g-{protocol}-{run}");
            // Created through Metadata auto-creation with 4 partitions.
            let p = producer(&bootstrap, &[]);
            let _ = rdkafka::producer::Producer::client(&p).fetch_metadata(Some(&topic), Duration::from_secs(5));
            let (a, ta, sa) = member(&bootstrap, &group, &topic, protocol);
            let (b, tb, sb) = member(&bootstrap, &group, &topic, protocol);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !split_exactly(&[&a, &b], 4) {
                assert!(
                    Instant::now() < deadline,
                    "{protocol} run {run}: two members never split 4 partitions"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let start = Instant::now();
            let (c, tc, sc) = member(&bootstrap, &group, &topic, protocol);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !split_exactly(&[&a, &b, &c], 4) {
                // A rebalance that never completes is a failure, not a 30 s measurement.
                assert!(
                    Instant::now() < deadline,
                    "{protocol} run {run}: the rebalance to 3 members never completed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            times.push(start.elapsed());
            for (s, t) in [(sa, ta), (sb, tb), (sc, tc)] {
                s.store(true, std::sync::atomic::Ordering::SeqCst);
                t.join().unwrap();
            }
        }
        times.sort();
        eprintln!(
            "{protocol}: third member joining a 2-member group, until all 3 own their partitions: median {:?} (runs {:?})",
            times[times.len() / 2],
            times
        );
        broker.handle.shutdown().await;
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, run by hand"]
async fn bench_idle_group_memory() {
    let broker = TestBroker::start(&[("group.initial.rebalance.delay.ms", "0"), ("num.partitions", "1")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let s = |t: &str| StrBytes::from_string(t.to_string());
    raw.call(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(topic("t"))),
        ])),
    )
    .await;
    // Warm up: the offsets topic and its partitions exist before measuring.
    raw.call(3, &FindCoordinatorRequest::default().with_key(s("warm")))
        .await;
    const N: usize = 5000;
    let before = rss_bytes();
    for i in 0..N {
        let group = GroupId(s(&format!("idle-{i}")));
        // JoinGroup v3 (no member-id round trip), SyncGroup, commit, LeaveGroup: an Empty group
        // with one committed offset, as a consumer leaves behind.
        let join = raw
            .call(
                3,
                &JoinGroupRequest::default()
                    .with_group_id(group.clone())
                    .with_session_timeout_ms(10_000)
                    .with_rebalance_timeout_ms(10_000)
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![
                        JoinGroupRequestProtocol::default()
                            .with_name(s("range"))
                            .with_metadata(bytes::Bytes::from_static(b"meta")),
                    ]),
            )
            .await;
        let member = join.member_id.clone();
        raw.call(
            3,
            &SyncGroupRequest::default()
                .with_group_id(group.clone())
                .with_generation_id(join.generation_id)
                .with_member_id(member.clone())
                .with_assignments(vec![
                    SyncGroupRequestAssignment::default()
                        .with_member_id(member.clone())
                        .with_assignment(bytes::Bytes::from_static(b"assignment")),
                ]),
        )
        .await;
        raw.call(
            8,
            &OffsetCommitRequest::default()
                .with_group_id(group.clone())
                .with_generation_id_or_member_epoch(join.generation_id)
                .with_member_id(member.clone())
                .with_topics(vec![
                    OffsetCommitRequestTopic::default()
                        .with_name(topic("t"))
                        .with_partitions(vec![
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(42)
                                .with_committed_metadata(Some(s(""))),
                        ]),
                ]),
        )
        .await;
        raw.call(
            2,
            &LeaveGroupRequest::default().with_group_id(group).with_member_id(member),
        )
        .await;
    }
    // Let timers of the now empty groups wind down.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_bytes();
    let listed = raw.call(3, &ListGroupsRequest::default()).await;
    assert!(listed.groups.len() >= N);
    eprintln!(
        "{N} idle groups (Empty, one committed offset each): RSS grew {} KiB, {} bytes per group (RSS of the test process, which runs the broker in-process and a raw client)",
        after.saturating_sub(before) / 1024,
        after.saturating_sub(before) / N as u64
    );
    broker.handle.shutdown().await;
}
