//! Durability: every acknowledged acks=all record survives kill -9 of the broker process, and a
//! log tail torn while the broker was stopped is truncated at restart.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
