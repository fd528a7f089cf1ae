//! Log compaction through real clients: the latest value per key survives, tombstones go after
//! delete.retention.ms, reads during cleaning stay valid, kill -9 during cleaning leaves a
//! consistent log, and a full disk leaves the log whole until space is freed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::Message;
use rdkafka::producer::FutureRecord;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

const COMPACT: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("segment.bytes", "1048576"),
    ("min.cleanable.dirty.ratio", "0.01"),
    ("delete.retention.ms", "0"),
    // The active segment is never cleaned (as in Kafka); a young age limit lets the next append
    // roll it, so the tail of the log becomes cleanable.
    ("segment.ms", "100"),
];

async fn create(addr: std::net::SocketAddr, name: &str) {
    let mut raw = Raw::connect(addr).await;
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(
            COMPACT
                .iter()
                .map(|(k, v)| CreatableTopicConfig::default().with_name(s(k)).with_value(Some(s(v))))
                .collect(),
        );
    let resp = raw.call(7, &CreateTopicsRequest::default().with_topics(vec![t])).await;
    assert_eq!(resp.topics[0].error_code, 0);
}

/// Produces `n` records over `keys` keys (then tombstones for `tombstoned`, then filler on
/// other keys to close the segments holding them); returns the latest value per key.
async fn produce(
    bootstrap: &str,
    name: &str,
    n: usize,
    keys: usize,
    tombstoned: usize,
) -> BTreeMap<String, Option<String>> {
    let producer = producer(bootstrap, &[("linger.ms", "5")]);
    let mut latest = BTreeMap::new();
    let mut pending = Vec::new();
    // Local queue full: wait for deliveries, then send the same record again (bounded).
    macro_rules! send {
        ($record:expr) => {{
            let mut record = $record;
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                match producer.send_result(record) {
                    Ok(f) => break pending.push(f),
                    Err((e, back)) => {
                        assert!(std::time::Instant::now() < deadline, "queue still full: {e}");
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }};
    }
    for i in 0..n {
        let key = format!("key-{}", i % keys);
        let value = format!("value-{i}-{}", "x".repeat(50));
        send!(FutureRecord::to(name).key(&key).payload(&value).partition(0));
        latest.insert(key, Some(value));
    }
    for k in 0..tombstoned {
        let key = format!("key-{k}");
        send!(FutureRecord::<_, ()>::to(name).key(&key).partition(0));
        latest.insert(key, None);
    }
    for j in 0..1000 {
        let key = format!("filler-{}", j % 10);
        let value = format!("filler-{j}-{}", "y".repeat(50));
        send!(FutureRecord::to(name).key(&key).payload(&value).partition(0));
        latest.insert(key, Some(value));
    }
    for p in pending {
        p.await.unwrap().unwrap();
    }
    // One more record, once the active segment is old enough to roll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let value = "roller".to_string();
    producer
        .send(
            FutureRecord::to(name).key("roller").payload(&value).partition(0),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    latest.insert("roller".into(), Some(value));
    latest
}

/// Reads the whole partition: (offset, key, value) in order.
fn read_all(bootstrap: &str, name: &str, end: i64) -> Vec<(i64, String, Option<String>)> {
    let c = consumer(bootstrap, &[]);
    assign(&c, name, &[0], rdkafka::Offset::Beginning);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while out.last().is_none_or(|(o, _, _)| *o < end - 1) && Instant::now() < deadline {
        if let Some(m) = c.poll(Duration::from_millis(50)) {
            let m = m.expect("every fetch returns valid batches");
            let key = String::from_utf8(m.key().unwrap_or_default().to_vec()).unwrap();
            out.push((
                m.offset(),
                key,
                m.payload().map(|v| String::from_utf8(v.to_vec()).unwrap()),
            ));
        }
    }
    out
}

/// The last value read for each key must be the latest produced; offsets strictly increase.
/// A tombstoned key reads as its tombstone or not at all, except for a reader that went over
/// the log while the cleaner worked (`during_cleaning`): with `delete.retention.ms=0` the
/// tombstone may be removed between two of its fetches, after it read an older value (Kafka
/// promises tombstones only to a reader that reaches the end within delete.retention.ms).
fn check_latest(
    read: &[(i64, String, Option<String>)],
    latest: &BTreeMap<String, Option<String>>,
    during_cleaning: bool,
) {
    assert!(
        read.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets strictly increase (gaps are normal)"
    );
    let mut last: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for (_, k, v) in read {
        last.insert(k, v.as_deref());
    }
    for (key, value) in latest {
        match value {
            Some(v) => assert_eq!(last.get(key.as_str()), Some(&Some(v.as_str())), "latest value of {key}"),
            // A tombstoned key reads as its tombstone or not at all, never an older value.
            None if during_cleaning => {}
            None => assert!(matches!(last.get(key.as_str()), None | Some(None)), "{key} was deleted"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_the_latest_value_per_key_and_drops_tombstones() {
    let broker = TestBroker::start(&[("log.cleaner.backoff.ms", "100")]).await;
    create(broker.addr, "latest").await;
    // Issue 5's scale: 1M records over 1k keys, then tombstones for 10 of them.
    let latest = produce(&broker.bootstrap(), "latest", 1_000_000, 1_000, 10).await;
    let end = 1_000_000 + 10 + 1000 + 1;
    // A reader going over the log while the cleaner works always gets valid batches.
    let during = read_all(&broker.bootstrap(), "latest", end);
    check_latest(&during, &latest, true);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // Still while the cleaner works: a pass may drop a tombstone after this read went past
        // an older value of its key (seen on a slow machine), so only live keys are held exact.
        let read = read_all(&broker.bootstrap(), "latest", end);
        check_latest(&read, &latest, true);
        let tombstones_left = read.iter().filter(|(_, _, v)| v.is_none()).count();
        if read.len() < 5_000 && tombstones_left == 0 {
            eprintln!("{} of {end} records left after compaction", read.len());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not compacted: {} records, {tombstones_left} tombstones",
            read.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The tombstones are gone, and with them every older value of their keys (one pass drops
    // both): from here no read may see a deleted key at all.
    let last = read_all(&broker.bootstrap(), "latest", end);
    check_latest(&last, &latest, false);
    let keys: BTreeSet<String> = last.into_iter().map(|(_, k, _)| k).collect();
    assert!(
        (0..10).all(|k| !keys.contains(&format!("key-{k}"))),
        "tombstoned keys are gone"
    );
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_cleaning_leaves_a_consistent_log() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let broker = BrokerProcess::spawn(dir.path(), port, &[("log.cleaner.backoff.ms", "5")]);
    create(broker.addr, "crashy").await;
    let latest = produce(&broker.addr.to_string(), "crashy", 30_000, 300, 20).await;
    let end = 30_000 + 20 + 1000 + 1;
    broker.kill9();
    // Restart and kill again a few times while the cleaner runs, at different moments.
    for delay_ms in [30, 80, 150, 400] {
        let b = BrokerProcess::spawn(dir.path(), port, &[("log.cleaner.backoff.ms", "5")]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        b.kill9();
    }
    let broker = BrokerProcess::spawn(dir.path(), port, &[("log.cleaner.enable", "false")]);
    let read = read_all(&broker.addr.to_string(), "crashy", end);
    check_latest(&read, &latest, false);
    assert_eq!(read.last().map(|(o, _, _)| *o), Some(end - 1), "the log end survives");
    eprintln!("{} of {end} records left after crashes during cleaning", read.len());
}

/// Every record of partition 0 from a raw read_uncommitted Fetch loop: (offset, control, key,
/// value). Control records are the transaction markers.
async fn raw_records(addr: std::net::SocketAddr, name: &str) -> Vec<(i64, bool, String, Option<String>)> {
    use kafka_protocol::records::RecordBatchDecoder;
    let mut raw = Raw::connect(addr).await;
    let text = |b: &Option<bytes::Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
    let (mut next, mut out) = (0i64, Vec::new());
    for _ in 0..10_000 {
        let req = fetch_request(name, next, 1 << 20, 1 << 20);
        let resp = raw.call(12, &req).await;
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        if next >= p.high_watermark {
            return out;
        }
        let mut bytes = p.records.clone().unwrap_or_default();
        let mut batch_end = next;
        // Batches are parsed one by one: an empty one (a producer's last, kept by the cleaner)
        // has no record but moves the offset on.
        while bytes.len() >= 61 {
            let size = 12 + i32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
            let base = i64::from_be_bytes(bytes[0..8].try_into().unwrap());
            let last_delta = i32::from_be_bytes(bytes[23..27].try_into().unwrap());
            let mut one = bytes.split_to(size);
            for set in RecordBatchDecoder::decode_all(&mut one).unwrap() {
                for r in set.records {
                    if r.offset >= next {
                        out.push((r.offset, r.control, text(&r.key).unwrap_or_default(), text(&r.value)));
                    }
                }
            }
            batch_end = batch_end.max(base + i64::from(last_delta) + 1);
        }
        assert!(batch_end > next, "fetch at {next} made no progress");
        next = batch_end;
    }
    panic!("the partition did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_writes_compact_and_aborted_records_are_removed() {
    // A compacted topic written by a transactional producer (Kafka Streams changelogs,
    // `__consumer_offsets` with TxnOffsetCommit): the cleaner removes aborted records, compacts
    // committed ones, and removes markers whose transactions have nothing left.
    use rdkafka::producer::Producer;
    let broker = TestBroker::start(&[("log.cleaner.backoff.ms", "100")]).await;
    create(broker.addr, "txn-compacted").await;
    let producer = producer(
        &broker.bootstrap(),
        &[
            ("transactional.id", "compacting"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
        ],
    );
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    let mut latest = BTreeMap::new();
    for t in 0..20 {
        producer.begin_transaction().unwrap();
        let mut pending = Vec::new();
        for j in 0..200 {
            let key = format!("key-{}", j % 20);
            let value = format!("txn-{t}-{j}");
            let record = FutureRecord::to("txn-compacted").key(&key).payload(&value).partition(0);
            pending.push(producer.send_result(record).map_err(|(e, _)| e).unwrap());
            if t % 2 == 0 {
                latest.insert(key, value);
            }
        }
        for p in pending {
            p.await.unwrap().unwrap();
        }
        if t % 2 == 0 {
            producer.commit_transaction(timeout).unwrap();
        } else {
            producer.abort_transaction(timeout).unwrap();
        }
    }
    // A last transaction once the segment is old enough to roll: the rest becomes cleanable.
    tokio::time::sleep(Duration::from_millis(300)).await;
    producer.begin_transaction().unwrap();
    producer
        .send(
            FutureRecord::to("txn-compacted")
                .key("roller")
                .payload("roller")
                .partition(0),
            timeout,
        )
        .await
        .unwrap();
    producer.commit_transaction(timeout).unwrap();
    latest.insert("roller".into(), "roller".into());

    let deadline = Instant::now() + Duration::from_secs(60);
    let records = loop {
        let records = raw_records(broker.addr, "txn-compacted").await;
        let data = records.iter().filter(|r| !r.1).count();
        let markers = records.len() - data;
        // What stays: one record per key, the markers of the last committed transaction (all
        // its records are the latest) and of the roller's (in the active segment).
        if data == latest.len() && markers == 2 {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "not compacted: {data} records and {markers} markers of {} produced",
            20 * 200 + 1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(records.windows(2).all(|w| w[0].0 < w[1].0));
    let read: BTreeMap<String, String> = records
        .iter()
        .filter(|r| !r.1)
        .map(|r| (r.2.clone(), r.3.clone().unwrap()))
        .collect();
    assert_eq!(read, latest, "the latest committed value of each key, nothing aborted");

    // A read_committed consumer (librdkafka's default) reads the same through the markers.
    let consumer = consumer(&broker.bootstrap(), &[("isolation.level", "read_committed")]);
    assign(&consumer, "txn-compacted", &[0], rdkafka::Offset::Beginning);
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < latest.len() && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
            seen.insert(key, String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(seen, latest);
    broker.handle.shutdown().await;
}

/// The bytes of a partition directory's segment files (`.log`).
fn segment_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Names in `dir` left by an unfinished cleaning pass.
fn cleaning_leftovers(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cleaned") || n.ends_with(".swap"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleaner_on_a_full_disk_leaves_the_log_whole_and_compacts_once_space_is_freed() {
    // Kafka takes a log directory offline when the cleaner's write fails. Sluice's cleaner
    // writes its cleaned segments next to the log, then swaps them in: on a full disk the
    // write fails, the pass's files are deleted, the log is left as it was and served, and the
    // next pass after space is freed compacts it.
    use common::disk::{Tmpfs, fill_up};
    let Some(disk) = Tmpfs::mount(24) else {
        return;
    };
    let handle = start_in(disk.path(), &[("log.cleaner.enable", "false")]).await;
    create(handle.addr, "full").await;
    let latest = produce(&handle.addr.to_string(), "full", 40_000, 100, 10).await;
    let end = 40_000 + 10 + 1000 + 1;
    handle.shutdown().await;
    let partition = disk.path().join("full-0");
    let written = segment_bytes(&partition);
    assert!(written > 2 << 20, "{written} bytes: several segments to clean");

    // Full to the last page, also of what the start frees (old producer snapshots), before
    // the cleaner's first pass; it runs every 300 ms.
    let pad = disk.path().join("pad");
    fill_up(&pad);
    let cleaning = [("log.cleaner.backoff.ms", "300")];
    let handle = start_in(disk.path(), &cleaning).await;
    let pad_after_start = disk.path().join("pad-after-start");
    fill_up(&pad_after_start);
    let bootstrap = handle.addr.to_string();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        segment_bytes(&partition),
        written,
        "nothing could be cleaned on a full disk"
    );
    // A pass under way has its files; a failed one deletes them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cleaning_leftovers(&partition).is_empty() {
        assert!(
            Instant::now() < deadline,
            "failed passes leave {:?}",
            cleaning_leftovers(&partition)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let read = read_all(&bootstrap, "full", end);
    check_latest(&read, &latest, false);
    assert_eq!(read.len(), usize::try_from(end).unwrap(), "every record, none cleaned");

    // Space again: the next passes compact the log.
    std::fs::remove_file(&pad).unwrap();
    std::fs::remove_file(&pad_after_start).unwrap();
    let freed = Instant::now();
    let deadline = freed + Duration::from_secs(30);
    while segment_bytes(&partition) * 2 > written {
        assert!(
            Instant::now() < deadline,
            "the log was never compacted once space was freed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "compacted {written} to {} bytes, {:?} after space was freed",
        segment_bytes(&partition),
        freed.elapsed()
    );
    let read = read_all(&bootstrap, "full", end);
    check_latest(&read, &latest, true);
    handle.shutdown().await;
    let handle = start_in(disk.path(), &[("log.cleaner.enable", "false")]).await;
    let read = read_all(&handle.addr.to_string(), "full", end);
    check_latest(&read, &latest, false);
    assert!(read.len() < 2000, "{} records after compaction", read.len());
    handle.shutdown().await;
    assert_eq!(cleaning_leftovers(&partition), Vec::<String>::new());
}
