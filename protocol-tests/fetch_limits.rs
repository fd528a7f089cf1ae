//! Fetch resource bounds: `fetch.max.bytes` caps what one Fetch makes the broker read and hold,
//! whatever the request claims, while KIP-74 progress and `partition_max_bytes` still hold and
//! real consumers still read everything.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::records::Compression;
use rdkafka::Message;
use sluice::api::fetch::VERSIONS;

const PARTITIONS: i32 = 8;
/// Each partition holds 16 batches of 16 records of 4000 bytes: about 1 MB.
const BATCHES: usize = 16;
const RECORDS_PER_BATCH: usize = 16;
const VALUE_BYTES: usize = 4000;
const ONE_MB: usize = 1 << 20;

/// One record batch (magic 2) of `count` keyed records.
fn batch(count: usize, value_len: usize) -> Bytes {
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..count)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(vec![b'v'; value_len])),
                1_000 + i as i64,
            )
        })
        .collect();
    sluice::log::batch::encode_records(&records, Compression::None).unwrap()
}

async fn create(raw: &mut Raw, name: &str, partitions: i32) {
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    let resp = raw
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_topics(vec![t])
                .with_timeout_ms(5000),
        )
        .await;
    assert_eq!(resp.topics[0].error_code, 0);
}

/// Appends `batches` copies of `records` to each of `partitions`, one batch per partition per
/// request.
async fn fill(raw: &mut Raw, name: &str, partitions: i32, batches: usize, records: &Bytes) {
    for _ in 0..batches {
        let data = (0..partitions)
            .map(|p| {
                PartitionProduceData::default()
                    .with_index(p)
                    .with_records(Some(records.clone()))
            })
            .collect();
        let req = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic(name))
                    .with_partition_data(data),
            ]);
        let resp = raw.call(9, &req).await;
        for p in &resp.responses[0].partition_responses {
            assert_eq!(p.error_code, 0, "produce to partition {}", p.index);
        }
    }
}

async fn topic_id(raw: &mut Raw, name: &str) -> uuid::Uuid {
    let meta = raw.call(12, &MetadataRequest::default().with_topics(None)).await;
    meta.topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name))
        .expect("topic in metadata")
        .topic_id
}

/// A fetch of every partition of `name` from the offsets given, at `version`.
#[allow(clippy::too_many_arguments)]
fn fetch(
    name: &str,
    id: uuid::Uuid,
    version: i16,
    offsets: &[i64],
    max_bytes: i32,
    partition_max_bytes: i32,
    min_bytes: i32,
    max_wait_ms: i32,
    isolation_level: i8,
) -> FetchRequest {
    let partitions = offsets
        .iter()
        .enumerate()
        .map(|(p, offset)| {
            FetchPartition::default()
                .with_partition(p as i32)
                .with_fetch_offset(*offset)
                .with_partition_max_bytes(partition_max_bytes)
                .with_current_leader_epoch(-1)
                .with_log_start_offset(-1)
        })
        .collect();
    let mut t = FetchTopic::default().with_partitions(partitions);
    if version >= 13 {
        t.topic_id = id;
    } else {
        t.topic = topic(name);
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_isolation_level(isolation_level)
        .with_session_epoch(-1)
        .with_topics(vec![t])
}

/// The sizes of the batches of one partition's records, checking they are whole.
fn batch_sizes(p: &PartitionData) -> Vec<usize> {
    assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
    let records = p.records.as_ref().expect("records");
    let mut sizes = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let length = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap());
        let size = 12 + usize::try_from(length).unwrap();
        assert!(at + size <= records.len(), "a partial batch was returned");
        sizes.push(size);
        at += size;
    }
    sizes
}

fn records_bytes(resp: &FetchResponse) -> Vec<usize> {
    assert_eq!(resp.error_code, 0);
    resp.responses[0]
        .partitions
        .iter()
        .map(|p| batch_sizes(p).iter().sum())
        .collect()
}

struct Filled {
    broker: TestBroker,
    raw: Raw,
    name: String,
    id: uuid::Uuid,
    batch_len: usize,
}

/// A broker with `settings` and a topic of 8 partitions each holding about 1 MB.
async fn filled(settings: &[(&str, &str)]) -> Filled {
    let broker = TestBroker::start(settings).await;
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("limits");
    create(&mut raw, &name, PARTITIONS).await;
    let records = batch(RECORDS_PER_BATCH, VALUE_BYTES);
    fill(&mut raw, &name, PARTITIONS, BATCHES, &records).await;
    let id = topic_id(&mut raw, &name).await;
    Filled {
        broker,
        raw,
        name,
        id,
        batch_len: records.len(),
    }
}

#[tokio::test]
async fn fetch_max_bytes_caps_a_request_claiming_i32_max_in_every_version() {
    // Kafka's KafkaApis.handleFetchRequest: Math.min(fetchRequest.maxBytes, config.fetchMaxBytes).
    let mut f = filled(&[("fetch.max.bytes", "1048576")]).await;
    let from_start = [0i64; PARTITIONS as usize];
    for version in VERSIONS.min..=VERSIONS.max {
        for isolation in [0, 1] {
            let req = fetch(&f.name, f.id, version, &from_start, i32::MAX, i32::MAX, 1, 0, isolation);
            let sizes = records_bytes(&f.raw.call(version, &req).await);
            let total: usize = sizes.iter().sum();
            let what = format!("Fetch v{version} isolation {isolation}: {sizes:?}");
            assert!(total <= ONE_MB + f.batch_len, "{what}");
            // The cap is filled with whole batches, starting with the first partition.
            assert!(total > ONE_MB - f.batch_len, "{what}");
            assert!(sizes[0] > 0, "{what}");
        }
    }
    f.broker.handle.shutdown().await;
}

#[tokio::test]
async fn a_first_batch_larger_than_fetch_max_bytes_is_still_returned_whole() {
    // KIP-74 / Kafka's ReplicaManager.readFromLog: the first batch of the first non-empty
    // partition comes whole (minOneMessage), and nothing else once the limit is used.
    let mut f = filled(&[("fetch.max.bytes", "1024")]).await;
    assert!(f.batch_len > 1024);
    let version = VERSIONS.max;
    // Partition 0 is read at its end: the first non-empty partition is partition 1.
    let mut offsets = [0i64; PARTITIONS as usize];
    offsets[0] = (BATCHES * RECORDS_PER_BATCH) as i64;
    for (max_bytes, partition_max_bytes) in [(i32::MAX, i32::MAX), (100, 100), (i32::MAX, 0)] {
        let req = fetch(
            &f.name,
            f.id,
            version,
            &offsets,
            max_bytes,
            partition_max_bytes,
            1,
            0,
            0,
        );
        let resp = f.raw.call(version, &req).await;
        let batches: Vec<Vec<usize>> = resp.responses[0].partitions.iter().map(batch_sizes).collect();
        let what = format!("max_bytes {max_bytes}, partition_max_bytes {partition_max_bytes}: {batches:?}");
        assert!(batches[0].is_empty(), "{what}");
        assert_eq!(batches[1], vec![f.batch_len], "{what}");
        assert!(batches[2..].iter().all(Vec::is_empty), "{what}");
    }
    f.broker.handle.shutdown().await;
}

#[tokio::test]
async fn partition_max_bytes_still_limits_each_partition_under_the_cap() {
    let mut f = filled(&[("fetch.max.bytes", "1048576")]).await;
    let from_start = [0i64; PARTITIONS as usize];
    let partition_max = 3 * f.batch_len + 100;
    for version in [VERSIONS.min, VERSIONS.max] {
        let req = fetch(
            &f.name,
            f.id,
            version,
            &from_start,
            i32::MAX,
            i32::try_from(partition_max).unwrap(),
            1,
            0,
            0,
        );
        let sizes = records_bytes(&f.raw.call(version, &req).await);
        let what = format!("Fetch v{version}: {sizes:?}");
        assert!(sizes.iter().all(|s| *s <= partition_max), "{what}");
        assert_eq!(sizes[0], 3 * f.batch_len, "{what}");
        // Partitions are served in order until the response cap is used.
        let full = ONE_MB / (3 * f.batch_len);
        assert!(sizes[..full].iter().all(|s| *s == 3 * f.batch_len), "{what}");
        assert!(sizes.iter().sum::<usize>() <= ONE_MB, "{what}");
    }
    f.broker.handle.shutdown().await;
}

#[tokio::test]
async fn min_bytes_above_the_cap_is_capped_so_the_fetch_answers_at_once() {
    // Kafka's KafkaApis: fetchMinBytes = Math.min(fetchRequest.minBytes, fetchMaxBytes); the
    // DelayedFetch then counts the bytes on disk (8 MB here) and completes at once.
    let mut f = filled(&[("fetch.max.bytes", "1048576")]).await;
    let from_start = [0i64; PARTITIONS as usize];
    let req = fetch(
        &f.name,
        f.id,
        VERSIONS.max,
        &from_start,
        i32::MAX,
        i32::MAX,
        i32::MAX,
        20_000,
        0,
    );
    let started = Instant::now();
    let sizes = records_bytes(&f.raw.call(VERSIONS.max, &req).await);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited {:?}",
        started.elapsed()
    );
    assert!(sizes.iter().sum::<usize>() <= ONE_MB);
    f.broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_fetch_counts_new_bytes_until_min_bytes() {
    // Kafka's DelayedFetch.tryComplete: each append is measured (positions, not a re-read)
    // and the fetch answers once min_bytes are there, with all of them.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("waiting");
    create(&mut raw, &name, 1).await;
    let id = topic_id(&mut raw, &name).await;
    let small = batch(10, 5_000); // ~50 KB
    let min_bytes = i32::try_from(small.len() + small.len() / 2).unwrap();
    let mut waiter = Raw::connect(broker.addr).await;
    let version = VERSIONS.max;
    let req = fetch(&name, id, version, &[0], i32::MAX, i32::MAX, min_bytes, 30_000, 0);
    let started = Instant::now();
    let pending = tokio::spawn(async move { waiter.call(version, &req).await });
    fill(&mut raw, &name, 1, 1, &small).await;
    // One batch is below min_bytes: the fetch keeps waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "answered below min_bytes");
    fill(&mut raw, &name, 1, 1, &small).await;
    let resp = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("answered once min_bytes arrived")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(batch_sizes(&resp.responses[0].partitions[0]), vec![small.len(); 2]);
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_with_default_settings_reads_everything_under_a_low_cap() {
    let f = filled(&[("fetch.max.bytes", "1048576")]).await;
    let consumer = consumer(&f.broker.bootstrap(), &[]);
    assign(
        &consumer,
        &f.name,
        &(0..PARTITIONS).collect::<Vec<_>>(),
        rdkafka::Offset::Beginning,
    );
    let expected = PARTITIONS as usize * BATCHES * RECORDS_PER_BATCH;
    let got = tokio::task::spawn_blocking(move || {
        let mut next = vec![0i64; PARTITIONS as usize];
        let mut count = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while count < expected && Instant::now() < deadline {
            if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                let m = m.expect("consume without error");
                let p = usize::try_from(m.partition()).unwrap();
                assert_eq!(m.offset(), next[p], "partition {p} in order, no gaps");
                assert_eq!(m.payload().map(<[u8]>::len), Some(VALUE_BYTES));
                next[p] += 1;
                count += 1;
            }
        }
        next
    })
    .await
    .unwrap();
    assert_eq!(got, vec![(BATCHES * RECORDS_PER_BATCH) as i64; PARTITIONS as usize]);
    f.broker.handle.shutdown().await;
}

/// The broker process's peak resident set (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> usize {
    let kb = proc_status_kib(&pid.to_string(), "VmHWM").unwrap();
    usize::try_from(kb).unwrap() * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_claiming_i32_max_keep_the_broker_memory_bounded() {
    // 8 partitions of 8 MB each: a Fetch claiming i32::MAX everywhere would make an uncapped
    // broker read 64 MB (and encode as much again) per request.
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::spawn(dir.path(), free_port(), &[("fetch.max.bytes", "1048576")]);
    let pid = broker.child.id();
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("memory");
    create(&mut raw, &name, PARTITIONS).await;
    let records = batch(RECORDS_PER_BATCH, VALUE_BYTES);
    fill(&mut raw, &name, PARTITIONS, 8 * BATCHES, &records).await;
    let id = topic_id(&mut raw, &name).await;
    // Linux resets the peak to the current resident set on "5" (proc(5), clear_refs); where it
    // cannot, the peak so far (producing) is the baseline.
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
    let before = peak_rss(pid);
    let mut fetchers = Vec::new();
    for c in 0..4 {
        let mut raw = Raw::connect(broker.addr).await;
        let name = name.clone();
        fetchers.push(tokio::spawn(async move {
            let from_start = [0i64; PARTITIONS as usize];
            let mut largest = 0;
            for round in 0..3 {
                let version = if (c + round) % 2 == 0 {
                    VERSIONS.max
                } else {
                    VERSIONS.min
                };
                let isolation = (round % 2) as i8;
                let req = fetch(&name, id, version, &from_start, i32::MAX, i32::MAX, 1, 0, isolation);
                let sizes = records_bytes(&raw.call(version, &req).await);
                largest = largest.max(sizes.iter().sum::<usize>());
            }
            largest
        }));
    }
    let mut largest = 0;
    for f in fetchers {
        largest = largest.max(f.await.unwrap());
    }
    let grown = peak_rss(pid).saturating_sub(before);
    // Four concurrent 1 MB fetches (read, then encoded) stay well below one uncapped read.
    assert!(grown < 32 * ONE_MB, "peak resident set grew by {} MB", grown / ONE_MB);
    assert!(largest > 0 && largest <= ONE_MB, "largest response: {largest} bytes");
    broker.kill9();
}
