//! Consumer groups through librdkafka (the `rdkafka` crate): partition ownership, members that
//! close or die, committed offsets across moves and restarts, static membership (KIP-345),
//! cooperative-sticky (KIP-429), and the group admin APIs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::FutureRecord;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};

/// Settings for fast group tests: short sessions so dead members go quickly.
const BROKER: &[(&str, &str)] = &[
    ("group.min.session.timeout.ms", "1000"),
    ("group.initial.rebalance.delay.ms", "0"),
];

#[derive(Default)]
struct Observed {
    assignment: Mutex<BTreeSet<i32>>,
    rebalances: AtomicUsize,
    /// Set before the consumer is dropped: librdkafka 2.12 can deadlock when `assignment()` is
    /// called from the revoke callback that `close` runs (the op waits on the thread closing).
    closing: AtomicBool,
}

struct Ctx(Arc<Observed>);

impl ClientContext for Ctx {}

impl ConsumerContext for Ctx {
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        self.0.rebalances.fetch_add(1, Ordering::SeqCst);
        if self.0.closing.load(Ordering::SeqCst) {
            return;
        }
        if let Rebalance::Assign(_) | Rebalance::Revoke(_) = rebalance {
            let now: BTreeSet<i32> = consumer
                .assignment()
                .map(|tpl| tpl.elements().iter().map(|e| e.partition()).collect())
                .unwrap_or_default();
            *self.0.assignment.lock().unwrap() = now;
        }
    }
}

fn group_consumer(bootstrap: &str, group: &str, extra: &[(&str, &str)], observed: Arc<Observed>) -> BaseConsumer<Ctx> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    // KIP-848 members take their timeouts from the broker and refuse the classic settings.
    if !extra.contains(&("group.protocol", "consumer")) {
        c.set("session.timeout.ms", "6000").set("heartbeat.interval.ms", "500");
    }
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create_with_context(Ctx(observed)).unwrap()
}

/// A group member on its own thread: consumes, commits each record synchronously, records
/// what it saw; stops (closing, so it leaves the group) when told.
struct Member {
    observed: Arc<Observed>,
    seen: Arc<Mutex<Vec<(i32, i64, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Member {
    fn start(bootstrap: &str, group: &str, topic: &str, extra: &[(&str, &str)]) -> Member {
        let observed = Arc::new(Observed::default());
        let consumer = group_consumer(bootstrap, group, extra, observed.clone());
        consumer.subscribe(&[topic]).unwrap();
        let seen: Arc<Mutex<Vec<(i32, i64, String)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop, observed_by_thread) = (seen.clone(), stop.clone(), observed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                        let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                        seen.lock().unwrap().push((m.partition(), m.offset(), value));
                        // Commit before anything else can revoke the partition: no record is
                        // lost across moves (it may be seen twice).
                        let _ = consumer.commit_message(&m, CommitMode::Sync);
                    }
                }
                observed_by_thread.closing.store(true, Ordering::SeqCst);
                drop(consumer); // closes: LeaveGroup
            })
        };
        Member {
            observed,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn assignment(&self) -> BTreeSet<i32> {
        self.observed.assignment.lock().unwrap().clone()
    }

    fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits until `check` holds, up to `limit`.
fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// True when the assignments partition 0..n exactly once.
fn partitions_exactly_once(assignments: &[BTreeSet<i32>], n: i32) -> bool {
    let mut all: Vec<i32> = assignments.iter().flatten().copied().collect();
    all.sort();
    all == (0..n).collect::<Vec<_>>()
}

async fn produce(bootstrap: &str, topic: &str, partitions: i32, per_partition: usize, tag: &str) {
    let producer = producer(bootstrap, &[("linger.ms", "5")]);
    let mut pending = Vec::new();
    for p in 0..partitions {
        for i in 0..per_partition {
            let value = format!("{tag}-{p}-{i}");
            pending.push(
                producer
                    .send_result(FutureRecord::<(), _>::to(topic).payload(&value).partition(p))
                    .unwrap(),
            );
        }
    }
    for f in pending {
        f.await.unwrap().unwrap();
    }
}

async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let r = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await;
    assert!(r.unwrap()[0].is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_six_partitions_and_survive_a_close_and_a_kill() {
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    let topic = unique("shared");
    create_topic(&bootstrap, &topic, 6).await;
    produce(&bootstrap, &topic, 6, 50, "before").await;

    let a = Member::start(&bootstrap, "g3", &topic, &[]);
    let b = Member::start(&bootstrap, "g3", &topic, &[]);
    // The third member is a separate process, killed later without leaving the group.
    let mut c = spawn_child_consumer(&bootstrap, "g3", &topic);
    let formed = wait_until(Duration::from_secs(60), "3 members owning 6 partitions", || {
        let (x, y, z) = (a.assignment(), b.assignment(), c.assignment());
        !x.is_empty() && !y.is_empty() && !z.is_empty() && partitions_exactly_once(&[x, y, z], 6)
    });
    eprintln!("3-member group formed in {formed:?}");

    // A member that closes leaves the group: its partitions move to the others within a
    // session timeout (here at once: LeaveGroup starts the rebalance).
    let b_seen = b.seen.clone();
    b.close();
    let moved = wait_until(Duration::from_secs(6), "b's partitions moved after its close", || {
        partitions_exactly_once(&[a.assignment(), c.assignment()], 6)
    });
    eprintln!("partitions moved {moved:?} after a member closed");

    // A member killed without leaving: its partitions move once its session expires (6 s).
    c.kill9();
    let moved = wait_until(Duration::from_secs(20), "the dead member's partitions moved", || {
        partitions_exactly_once(std::slice::from_ref(&a.assignment()), 6)
    });
    eprintln!("partitions moved {moved:?} after a member was killed (session.timeout.ms=6000)");
    assert!(
        moved >= Duration::from_secs(3),
        "moved before the session could have expired"
    );

    produce(&bootstrap, &topic, 6, 50, "after").await;
    // Every record produced, before and after the moves, is seen by some member.
    let expected: BTreeSet<String> = ["before", "after"]
        .iter()
        .flat_map(|tag| (0..6).flat_map(move |p| (0..50).map(move |i| format!("{tag}-{p}-{i}"))))
        .collect();
    let seen_by =
        |m: &Member| -> BTreeSet<String> { m.seen.lock().unwrap().iter().map(|(_, _, v)| v.clone()).collect() };
    let start = Instant::now();
    loop {
        // The killed child's last lines may still be in the pipe: read its record live.
        let mut all = seen_by(&a);
        all.extend(c.seen());
        all.extend(b_seen.lock().unwrap().iter().map(|(_, _, v)| v.clone()));
        let missing: Vec<&String> = expected.difference(&all).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} records never consumed, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    a.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_broker_restart() {
    let broker = TestBroker::start(BROKER).await;
    let topic = unique("resume");
    create_topic(&broker.bootstrap(), &topic, 2).await;
    produce(&broker.bootstrap(), &topic, 2, 10, "first").await;
    let m = Member::start(&broker.bootstrap(), "resumers", &topic, &[]);
    wait_until(Duration::from_secs(30), "20 records consumed", || {
        m.seen.lock().unwrap().len() >= 20
    });
    m.close();

    let broker = broker.restart(BROKER).await;
    produce(&broker.bootstrap(), &topic, 2, 5, "second").await;
    let m = Member::start(&broker.bootstrap(), "resumers", &topic, &[]);
    wait_until(Duration::from_secs(30), "10 new records consumed", || {
        m.seen.lock().unwrap().len() >= 10
    });
    std::thread::sleep(Duration::from_millis(500));
    let seen = m.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 10, "only the records after the committed offsets: {seen:?}");
    assert!(
        seen.iter()
            .all(|(_, offset, v)| v.starts_with("second") && *offset >= 10)
    );
    m.close();

    // The committed offsets are also visible to an admin query after the restart.
    let consumer = group_consumer(&broker.bootstrap(), "resumers", &[], Arc::default());
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&topic, 0);
    tpl.add_partition(&topic, 1);
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    for e in committed.elements() {
        assert_eq!(e.offset(), Offset::Offset(15), "partition {}", e.partition());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_static_member_gets_its_partitions_back_without_a_rebalance() {
    // KIP-345: group.instance.id lets a member come back within its session timeout without
    // the group rebalancing.
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    let topic = unique("static");
    create_topic(&bootstrap, &topic, 4).await;
    let stat = |id: &'static str| [("group.instance.id", id), ("session.timeout.ms", "30000")];
    let a = Member::start(&bootstrap, "statics", &topic, &stat("a"));
    let b = Member::start(&bootstrap, "statics", &topic, &stat("b"));
    wait_until(Duration::from_secs(60), "both static members assigned", || {
        !a.assignment().is_empty()
            && !b.assignment().is_empty()
            && partitions_exactly_once(&[a.assignment(), b.assignment()], 4)
    });
    let before = b.assignment();
    std::thread::sleep(Duration::from_secs(1));
    let a_rebalances = a.observed.rebalances.load(Ordering::SeqCst);
    // librdkafka does not send LeaveGroup for static members on close (KIP-345).
    b.close();
    let b2 = Member::start(&bootstrap, "statics", &topic, &stat("b"));
    wait_until(Duration::from_secs(30), "the restarted member assigned", || {
        !b2.assignment().is_empty()
    });
    assert_eq!(b2.assignment(), before, "same partitions back");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        a.observed.rebalances.load(Ordering::SeqCst),
        a_rebalances,
        "the other member saw no rebalance"
    );
    a.close();
    b2.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_members_rebalance_incrementally() {
    // KIP-429: client-side cooperative rebalancing through the classic protocol.
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    let topic = unique("coop");
    create_topic(&bootstrap, &topic, 6).await;
    let coop = [("partition.assignment.strategy", "cooperative-sticky")];
    let a = Member::start(&bootstrap, "coop", &topic, &coop);
    wait_until(Duration::from_secs(30), "a owns all", || a.assignment().len() == 6);
    let b = Member::start(&bootstrap, "coop", &topic, &coop);
    wait_until(Duration::from_secs(60), "a and b share", || {
        !b.assignment().is_empty() && partitions_exactly_once(&[a.assignment(), b.assignment()], 6)
    });
    let (x, y) = (a.assignment(), b.assignment());
    assert_eq!((x.len(), y.len()), (3, 3), "sticky balance");
    produce(&bootstrap, &topic, 6, 10, "coop").await;
    wait_until(Duration::from_secs(30), "all 60 consumed", || {
        a.seen.lock().unwrap().len() + b.seen.lock().unwrap().len() >= 60
    });
    b.close();
    wait_until(Duration::from_secs(30), "a owns all again", || {
        a.assignment().len() == 6
    });
    a.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_describe_and_delete_groups_through_librdkafka() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let broker = TestBroker::start(BROKER).await;
    let bootstrap = broker.bootstrap();
    let topic = unique("admin");
    create_topic(&bootstrap, &topic, 1).await;
    produce(&bootstrap, &topic, 1, 3, "x").await;
    let m = Member::start(&bootstrap, "described", &topic, &[("client.id", "describer")]);
    wait_until(Duration::from_secs(30), "consumed", || {
        m.seen.lock().unwrap().len() >= 3
    });
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let list = probe
        .fetch_group_list(Some("described"), Duration::from_secs(10))
        .unwrap();
    let g = &list.groups()[0];
    assert_eq!(
        (g.name(), g.state(), g.protocol_type(), g.protocol()),
        ("described", "Stable", "consumer", "range")
    );
    assert_eq!(g.members().len(), 1);
    assert_eq!(g.members()[0].client_id(), "describer");
    assert!(g.members()[0].assignment().is_some_and(|a| !a.is_empty()));
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    // A group with members cannot be deleted.
    let r = admin.delete_groups(&["described"], &AdminOptions::new()).await.unwrap();
    assert!(
        matches!(&r[0], Err((_, rdkafka::types::RDKafkaErrorCode::NonEmptyGroup))),
        "{r:?}"
    );
    m.close();
    let r = admin
        .delete_groups(&["described", "never-existed"], &AdminOptions::new())
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
    assert!(
        matches!(&r[1], Err((_, rdkafka::types::RDKafkaErrorCode::GroupIdNotFound))),
        "{r:?}"
    );
    let all = probe.fetch_group_list(None, Duration::from_secs(10)).unwrap();
    assert!(all.groups().iter().all(|g| g.name() != "described"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_members_share_partitions_through_consumer_group_heartbeat() {
    // KIP-848: librdkafka's group.protocol=consumer; the broker assigns (uniform by default).
    let settings = [
        ("group.consumer.min.heartbeat.interval.ms", "100"),
        ("group.consumer.heartbeat.interval.ms", "300"),
        ("group.consumer.min.session.timeout.ms", "1000"),
        ("group.consumer.session.timeout.ms", "6000"),
        ("group.min.session.timeout.ms", "1000"),
    ];
    let broker = TestBroker::start(&settings).await;
    let bootstrap = broker.bootstrap();
    let topic = unique("kip848");
    create_topic(&bootstrap, &topic, 4).await;
    produce(&bootstrap, &topic, 4, 25, "first").await;
    let next_gen = [("group.protocol", "consumer")];
    let a = Member::start(&bootstrap, "next-gen", &topic, &next_gen);
    wait_until(Duration::from_secs(30), "a owns all 4", || a.assignment().len() == 4);
    let b = Member::start(&bootstrap, "next-gen", &topic, &next_gen);
    let settled = wait_until(Duration::from_secs(30), "a and b split 4 partitions", || {
        let (x, y) = (a.assignment(), b.assignment());
        x.len() == 2 && y.len() == 2 && partitions_exactly_once(&[x, y], 4)
    });
    eprintln!("KIP-848 second member settled in {settled:?}");
    wait_until(Duration::from_secs(30), "the first 100 records consumed", || {
        let mut all: BTreeSet<String> = a.seen.lock().unwrap().iter().map(|(_, _, v)| v.clone()).collect();
        all.extend(b.seen.lock().unwrap().iter().map(|(_, _, v)| v.clone()));
        all.len() == 100
    });

    // The broker's view through ConsumerGroupDescribe.
    let mut raw = Raw::connect(broker.addr).await;
    let described = raw
        .call(
            1,
            &kafka_protocol::messages::ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![kafka_protocol::messages::GroupId("next-gen".to_string().into())]),
        )
        .await;
    let g = &described.groups[0];
    assert_eq!(
        (g.error_code, g.group_state.as_str(), g.assignor_name.as_str()),
        (0, "Stable", "uniform")
    );
    assert_eq!(g.members.len(), 2);
    assert!(
        g.members
            .iter()
            .all(|m| m.assignment.topic_partitions[0].partitions.len() == 2)
    );

    // A member that leaves hands its partitions back; committed offsets carry over.
    let b_seen = b.seen.clone();
    b.close();
    wait_until(Duration::from_secs(30), "a owns all 4 again", || {
        a.assignment().len() == 4
    });
    produce(&bootstrap, &topic, 4, 25, "second").await;
    wait_until(Duration::from_secs(30), "every record consumed", || {
        let mut all: BTreeSet<String> = a.seen.lock().unwrap().iter().map(|(_, _, v)| v.clone()).collect();
        all.extend(b_seen.lock().unwrap().iter().map(|(_, _, v)| v.clone()));
        all.len() == 200
    });
    a.close();
}

// ---- a consumer in a separate process, so it can be killed without leaving its group ----

struct ChildConsumer {
    child: std::process::Child,
    assignment: Arc<Mutex<BTreeSet<i32>>>,
    seen: Arc<Mutex<BTreeSet<String>>>,
}

impl ChildConsumer {
    fn assignment(&self) -> BTreeSet<i32> {
        self.assignment.lock().unwrap().clone()
    }
    fn seen(&self) -> BTreeSet<String> {
        self.seen.lock().unwrap().clone()
    }
    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.assignment.lock().unwrap().clear();
    }
}

impl Drop for ChildConsumer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_child_consumer(bootstrap: &str, group: &str, topic: &str) -> ChildConsumer {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_consumer_process", "--nocapture"])
        .env("SLUICE_CHILD_CONSUMER", format!("{bootstrap} {group} {topic}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let assignment: Arc<Mutex<BTreeSet<i32>>> = Arc::default();
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    {
        let (assignment, seen) = (assignment.clone(), seen.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(list) = line.strip_prefix("ASSIGNED ") {
                    *assignment.lock().unwrap() = list.split(',').filter_map(|p| p.parse().ok()).collect();
                } else if let Some(value) = line.strip_prefix("SEEN ") {
                    seen.lock().unwrap().insert(value.to_string());
                }
            }
        });
    }
    ChildConsumer {
        child,
        assignment,
        seen,
    }
}

/// Run only as the child of `spawn_child_consumer`: a group member reporting on stdout.
#[test]
#[ignore = "helper process for the group tests, not a test of its own"]
fn child_consumer_process() {
    let spec = std::env::var("SLUICE_CHILD_CONSUMER").expect("run by spawn_child_consumer");
    let parts: Vec<&str> = spec.split(' ').collect();
    let observed = Arc::new(Observed::default());
    let consumer = group_consumer(parts[0], parts[1], &[], observed.clone());
    consumer.subscribe(&[parts[2]]).unwrap();
    let mut reported = BTreeMap::new();
    loop {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            println!("SEEN {}", String::from_utf8_lossy(m.payload().unwrap_or_default()));
            let _ = consumer.commit_message(&m, CommitMode::Sync);
        }
        let now = observed.assignment.lock().unwrap().clone();
        if reported.get(&0) != Some(&now) {
            let list: Vec<String> = now.iter().map(i32::to_string).collect();
            println!("ASSIGNED {}", list.join(","));
            reported.insert(0, now);
        }
    }
}
