//! Durability: every acknowledged acks=all record survives kill -9 of the broker process, and a
//! log tail torn while the broker was stopped is truncated at restart.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::disk::{Tmpfs, fill_up, read_numbered, send_numbered};
use common::*;
use rdkafka::Message;
use rdkafka::producer::FutureRecord;

fn send_signal(child: &std::process::Child, signal: i32) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: plain kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0);
}

/// Reads partition 0 of `topic` from the beginning until `count` records or 30 s.
fn read_all(bootstrap: &str, topic: &str, count: usize) -> Vec<(i64, Vec<u8>)> {
    let consumer = consumer(bootstrap, &[]);
    assign(&consumer, topic, &[0], rdkafka::Offset::Beginning);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < count && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            out.push((m.offset(), m.payload().unwrap_or_default().to_vec()));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let broker = BrokerProcess::spawn(dir.path(), port, &[]);
    let bootstrap = broker.addr.to_string();
    let topic = "survivor";
    let producer = producer(
        &bootstrap,
        &[("linger.ms", "1"), ("message.timeout.ms", "5000"), ("retries", "0")],
    );
    let acked: Arc<Mutex<BTreeMap<i64, String>>> = Arc::default();

    // Produce continuously; stop the broker with SIGKILL once a few thousand are acknowledged.
    let producing = {
        let acked = acked.clone();
        let producer = producer.clone();
        tokio::spawn(async move {
            let mut inflight = Vec::new();
            for i in 0.. {
                let value = format!("record-{i}");
                match producer.send_result(FutureRecord::<(), _>::to(topic).payload(&value).partition(0)) {
                    Ok(f) => inflight.push((value, f)),
                    Err(_) => break,
                }
                if inflight.len() >= 200 {
                    for (value, f) in inflight.drain(..) {
                        match f.await {
                            Ok(Ok(d)) => {
                                acked.lock().unwrap().insert(d.offset, value);
                            }
                            _ => return,
                        }
                    }
                }
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 5_000 {
        assert!(Instant::now() < deadline, "production too slow");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    broker.kill9();
    let _ = tokio::time::timeout(Duration::from_secs(30), producing).await;
    let acked = acked.lock().unwrap().clone();
    eprintln!("{} records acknowledged before kill -9", acked.len());

    let broker = BrokerProcess::spawn(dir.path(), port, &[]);
    let got = read_all(&broker.addr.to_string(), topic, acked.len());
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert!(offsets.windows(2).all(|w| w[1] == w[0] + 1), "offsets are contiguous");
    assert_eq!(offsets.first(), Some(&0));
    let by_offset: BTreeMap<i64, Vec<u8>> = got.into_iter().collect();
    for (offset, value) in &acked {
        assert_eq!(
            by_offset.get(offset).map(Vec::as_slice),
            Some(value.as_bytes()),
            "acknowledged offset {offset}"
        );
    }
    // Production resumes after the recovered end.
    let producer = common::producer(&broker.addr.to_string(), &[]);
    let d = producer
        .send(
            FutureRecord::<(), _>::to(topic).payload("after").partition(0),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(d.offset >= acked.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_cut_mid_batch_is_truncated_at_restart() {
    for clean_stop in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut broker = BrokerProcess::spawn(dir.path(), port, &[]);
        let bootstrap = broker.addr.to_string();
        let producer = producer(&bootstrap, &[("linger.ms", "0")]);
        for i in 0..10 {
            producer
                .send(
                    FutureRecord::<(), _>::to("torn").payload(&format!("v{i}")).partition(0),
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
        }
        if clean_stop {
            send_signal(&broker.child, libc::SIGTERM);
            assert!(broker.child.wait().unwrap().success(), "SIGTERM exits cleanly");
        } else {
            broker.kill9();
        }
        // Cut the last batch in half, as a crash in the middle of a write would.
        let segment = segment_files(&dir.path().join("torn-0")).pop().unwrap();
        let len = std::fs::metadata(&segment).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&segment).unwrap();
        file.set_len(len - 20).unwrap();
        drop(file);

        let broker = BrokerProcess::spawn(dir.path(), port, &[]);
        let bootstrap = broker.addr.to_string();
        let got = read_all(&bootstrap, "torn", 9);
        let values: Vec<String> = got.iter().map(|(_, v)| String::from_utf8(v.clone()).unwrap()).collect();
        assert_eq!(
            values,
            (0..9).map(|i| format!("v{i}")).collect::<Vec<_>>(),
            "clean_stop={clean_stop}"
        );
        let producer = common::producer(&bootstrap, &[]);
        let d = producer
            .send(
                FutureRecord::<(), _>::to("torn").payload("again").partition(0),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(d.offset, 9, "the torn batch's offset is reused");
        let got = read_all(&bootstrap, "torn", 10);
        assert_eq!(got.last().map(|(o, v)| (*o, v.clone())), Some((9, b"again".to_vec())));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_and_data_survive_a_clean_restart() {
    let broker = TestBroker::start(&[("num.partitions", "2")]).await;
    let producer = producer(&broker.bootstrap(), &[]);
    for p in 0..2 {
        producer
            .send(
                FutureRecord::to("kept").key("k").payload(&format!("p{p}")).partition(p),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    drop(producer);
    let broker = broker.restart(&[]).await;
    let consumer = consumer(&broker.bootstrap(), &[]);
    assign(&consumer, "kept", &[0, 1], rdkafka::Offset::Beginning);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 2 && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            got.push((m.partition(), m.offset(), m.payload().unwrap().to_vec()));
        }
    }
    got.sort();
    assert_eq!(got, vec![(0, 0, b"p0".to_vec()), (1, 0, b"p1".to_vec())]);
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_what_was_acknowledged_and_recovers_when_grown() {
    let Some(disk) = Tmpfs::mount(12) else {
        return;
    };
    let data = disk.path().join("data");
    // Small segments: the disk fills across rolls. One offsets partition: little to create.
    // The recovery-point checkpoint after every fsync: a full disk refuses it while a small
    // append still fits in a segment's last page.
    let settings = [
        ("log.segment.bytes", "1048576"),
        ("offsets.topic.num.partitions", "1"),
        ("log.flush.offset.checkpoint.interval.ms", "0"),
        ("metrics.listen", "127.0.0.1:0"),
    ];
    let broker = start_in(&data, &settings).await;
    let bootstrap = broker.addr.to_string();
    // Kafka's OfflineLogDirectoryCount: 1 from the first refused write until space is back.
    let offline_dirs = |broker: &sluice::BrokerHandle| {
        let (_, body) = common::scrape::get(broker.metrics_addr.expect("metrics.listen"), "/metrics", "text/plain");
        common::scrape::sample(
            &common::scrape::samples(&body),
            "kafka_log_logmanager_offlinelogdirectorycount",
        )
    };
    assert_eq!(offline_dirs(&broker), 0.0);
    use rdkafka::consumer::Consumer;
    let commit = |bootstrap: &str, offset: i64| {
        let group = consumer(bootstrap, &[("group.id", "through-full")]);
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset("full", 0, rdkafka::Offset::Offset(offset))
            .unwrap();
        group.commit(&tpl, rdkafka::consumer::CommitMode::Sync)
    };
    // The Java client's default: an idempotent producer, acks=all.
    let producer = producer(
        &bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "4000"),
        ],
    );
    // 20 MiB into 12: the tail is refused with KAFKA_STORAGE_ERROR, which the client retries
    // until its message timeout.
    let (mut acked, failed) = send_numbered(&producer, "full", 0, 1).await;
    assert!(failed.is_empty(), "{failed:?}");
    commit(&bootstrap, 1).unwrap();
    let (rest, failed) = send_numbered(&producer, "full", 1, 1999).await;
    acked.extend(rest);
    assert!(
        !acked.is_empty() && !failed.is_empty(),
        "acked {} failed {}",
        acked.len(),
        failed.len()
    );
    assert!(
        failed
            .iter()
            .all(|e| e.contains("timed out") || e.contains("Disk error")),
        "{:?}",
        &failed[..failed.len().min(3)]
    );
    // What was acknowledged is there, once each, and reads go on while the disk is full.
    let check = |bootstrap: &str, acked: &[(i64, usize)]| {
        let stored = read_numbered(bootstrap, "full", acked.len());
        let mut numbers: Vec<usize> = stored.iter().map(|(_, n)| *n).collect();
        numbers.sort();
        numbers.dedup();
        assert_eq!(numbers.len(), stored.len(), "a record stored twice");
        for a in acked {
            assert!(stored.contains(a), "acknowledged {a:?} missing");
        }
        stored.len()
    };
    check(&bootstrap, &acked);
    assert_eq!(offline_dirs(&broker), 1.0);
    // A commit while the disk is full to the last page: its record may still fit in the
    // offsets segment's last page, while the checkpoint after its fsync cannot be written; or it
    // is refused (NOT_COORDINATOR, which the client retries until its timeout). Either way the
    // group works again below.
    let pad = disk.path().join("pad");
    fill_up(&pad);
    let _ = commit(&bootstrap, 2);
    std::fs::remove_file(&pad).unwrap();
    drop(producer);

    // More room, without a restart: the same partitions take writes again, and the group
    // commits.
    disk.resize(48);
    let deadline = Instant::now() + Duration::from_secs(20);
    while offline_dirs(&broker) != 0.0 {
        assert!(Instant::now() < deadline, "the log directory never came back online");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = acked.len().max(check(&bootstrap, &acked));
    let producer = common::producer(
        &bootstrap,
        &[("enable.idempotence", "true"), ("message.timeout.ms", "20000")],
    );
    let (more, failed) = send_numbered(&producer, "full", 2000, 200).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    assert_eq!(more.first().map(|(offset, _)| *offset), Some(before as i64));
    commit(&bootstrap, 7).unwrap();
    drop(producer);

    // Full again, with a file of someone else's: a clean stop, and a start on the full disk
    // finds everything acknowledged, before and after.
    fill_up(&pad);
    broker.shutdown().await;
    let broker = start_in(&data, &settings).await;
    let bootstrap = broker.addr.to_string();
    let all: Vec<(i64, usize)> = acked.iter().chain(&more).copied().collect();
    check(&bootstrap, &all);
    let group = consumer(&bootstrap, &[("group.id", "through-full")]);
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition("full", 0);
    let committed = group.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    assert_eq!(
        committed.find_partition("full", 0).unwrap().offset(),
        rdkafka::Offset::Offset(7)
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_on_a_full_disk_restarts_with_every_acknowledged_record() {
    // Recovery after kill -9 fsyncs what it validated and checkpoints the recovery point; on a
    // full disk that checkpoint cannot be written, which must not keep the partition offline.
    let Some(disk) = Tmpfs::mount(12) else {
        return;
    };
    let data = disk.path().join("data");
    let port = free_port();
    let settings = [("log.segment.bytes", "4194304"), ("offsets.topic.num.partitions", "1")];
    let broker = BrokerProcess::spawn(&data, port, &settings);
    let bootstrap = broker.addr.to_string();
    let producer = producer(
        &bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "4000"),
        ],
    );
    let (acked, failed) = send_numbered(&producer, "killed", 0, 1500).await;
    assert!(
        !acked.is_empty() && !failed.is_empty(),
        "acked {} failed {}",
        acked.len(),
        failed.len()
    );
    fill_up(&disk.path().join("pad"));
    drop(producer);
    broker.kill9();

    let broker = BrokerProcess::spawn(&data, port, &settings);
    let stored = read_numbered(&broker.addr.to_string(), "killed", acked.len());
    for a in &acked {
        assert!(stored.contains(a), "acknowledged {a:?} missing after the restart");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_acknowledged_before_the_disk_fails_is_on_it_when_it_comes_back() {
    // A device that fails keeps only what reached it: ext4 shut down without flushing its
    // journal is a power cut for that filesystem alone. Every acknowledged record (acks=all:
    // fsynced first), across segment rolls, must be on it; meanwhile the broker refuses writes
    // without crashing, and stops cleanly.
    use common::disk::Ext4;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let Some(disk) = Ext4::mount_over(&data, 256) else {
        return;
    };
    let port = free_port();
    let settings = [("log.segment.bytes", "1048576"), ("offsets.topic.num.partitions", "1")];
    let mut broker = BrokerProcess::spawn(&data, port, &settings);
    let bootstrap = broker.addr.to_string();
    let producer = producer(
        &bootstrap,
        &[
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "10000"),
        ],
    );
    let sending = tokio::spawn({
        let producer = producer.clone();
        async move { send_numbered(&producer, "failing", 0, 3000).await }
    });
    // The disk fails once a few segments are written, with most records still to come.
    let partition = data.join("failing-0");
    let deadline = Instant::now() + Duration::from_secs(60);
    while dir_bytes(&partition) < 4 << 20 {
        assert!(Instant::now() < deadline, "the broker never wrote 4 MiB");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    disk.fail();
    let (acked, failed) = sending.await.unwrap();
    assert!(
        !acked.is_empty() && !failed.is_empty(),
        "acked {} failed {}",
        acked.len(),
        failed.len()
    );
    assert!(broker.child.try_wait().unwrap().is_none(), "the broker crashed");
    // Its fsync failed: the partition is reported offline (no leader, an offline replica),
    // not led, so clients wait for it instead of sending there.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = common::cluster::partition_view_at(broker.addr, "failing", 0).await;
        if view.as_ref().is_ok_and(|v| v.leader == -1 && v.offline == [1]) {
            break;
        }
        assert!(Instant::now() < deadline, "still led: {view:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(producer);
    send_signal(&broker.child, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(60);
    while broker.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the broker did not stop after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    disk.replace();
    let broker = BrokerProcess::spawn(&data, port, &settings);
    let stored = read_numbered(&broker.addr.to_string(), "failing", acked.len());
    let numbers: std::collections::HashSet<usize> = stored.iter().map(|(_, n)| *n).collect();
    assert_eq!(numbers.len(), stored.len(), "a record stored twice");
    for a in &acked {
        assert!(
            stored.contains(a),
            "acknowledged {a:?} missing after the disk came back"
        );
    }
    eprintln!(
        "{} records acknowledged before the disk failed, {} stored",
        acked.len(),
        stored.len()
    );
}

/// The bytes of the files in `dir` (0 while it does not exist).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum())
        .unwrap_or(0)
}
