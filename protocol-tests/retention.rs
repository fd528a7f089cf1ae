//! Storage lifecycle through real clients and raw frames: retention by size and time while a
//! consumer reads, a consumer behind the log start resetting, DeleteRecords surviving restart,
//! and a lowered retention applied live.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::Message;
use rdkafka::producer::FutureRecord;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn create(raw: &mut Raw, name: &str, configs: &[(&str, &str)]) {
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| CreatableTopicConfig::default().with_name(s(k)).with_value(Some(s(v))))
                .collect(),
        );
    let resp = raw.call(7, &CreateTopicsRequest::default().with_topics(vec![t])).await;
    assert_eq!(resp.topics[0].error_code, 0);
}

async fn earliest(raw: &mut Raw, name: &str) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic(name))
                .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(-2)]),
        ]);
    raw.call(8, &req).await.topics[0].partitions[0].offset
}

async fn produce_n(bootstrap: &str, name: &str, from: usize, n: usize) {
    let producer = producer(bootstrap, &[("linger.ms", "0"), ("batch.num.messages", "1")]);
    for i in from..from + n {
        producer
            .send(
                FutureRecord::<(), _>::to(name)
                    .payload(&format!("{i:06}-{}", "x".repeat(200)))
                    .partition(0),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_deletes_old_segments_while_a_consumer_reads_and_a_late_one_resets() {
    let broker = TestBroker::start(&[("log.retention.check.interval.ms", "100")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    // ~250-byte batches, 2 KB segments, keep about 5 segments.
    create(
        &mut raw,
        "sized",
        &[("segment.bytes", "2048"), ("retention.bytes", "10240")],
    )
    .await;
    // A consumer follows the log from the start while it grows and retention trims it.
    let reader = consumer(&broker.bootstrap(), &[]);
    assign(&reader, "sized", &[0], rdkafka::Offset::Beginning);
    let mut seen = Vec::new();
    for round in 0..10 {
        produce_n(&broker.bootstrap(), "sized", round * 20, 20).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.len() < (round + 1) * 20 && Instant::now() < deadline {
            if let Some(m) = reader.poll(Duration::from_millis(20)) {
                let m = m.expect("no error while retention runs");
                seen.push(m.offset());
            }
        }
    }
    assert_eq!(
        seen,
        (0..200).collect::<Vec<i64>>(),
        "the live reader saw every record in order"
    );
    // Retention has run: the log start moved and old segment files are gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while earliest(&mut raw, "sized").await == 0 {
        assert!(Instant::now() < deadline, "retention never deleted anything");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Kafka's size rule keeps the log within retention.bytes plus one segment; the next pass
    // after the last produce gets it there.
    let log_size = || -> u64 {
        segment_files(&broker.dir.path().join("sized-0"))
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while log_size() > 10240 + 2048 {
        assert!(
            Instant::now() < deadline,
            "log size {} stays above retention.bytes plus one segment",
            log_size()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let start = earliest(&mut raw, "sized").await;
    // A consumer that asks for a deleted offset gets OFFSET_OUT_OF_RANGE and resets (earliest).
    let late = consumer(&broker.bootstrap(), &[("auto.offset.reset", "earliest")]);
    assign(&late, "sized", &[0], rdkafka::Offset::Offset(1));
    let first = loop {
        if let Some(m) = late.poll(Duration::from_millis(100)) {
            break m.expect("reset, not an error").offset();
        }
    };
    assert_eq!(first, start, "reset to the log start");
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_retention_ms_deletes_on_the_next_check() {
    let broker = TestBroker::start(&[("log.retention.check.interval.ms", "100")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "aging", &[("segment.bytes", "2048")]).await;
    produce_n(&broker.bootstrap(), "aging", 0, 60).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        earliest(&mut raw, "aging").await,
        0,
        "a week's retention keeps everything"
    );
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let lower = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("aging"))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("1"))),
            ]),
    ]);
    assert_eq!(raw.call(1, &lower).await.responses[0].error_code, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    // Kafka rolls the expired active segment too, once replicated: everything goes.
    while earliest(&mut raw, "aging").await < 60 {
        assert!(Instant::now() < deadline, "the lowered retention did not apply");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_low_watermark_and_survives_restart() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "trim", &[("segment.bytes", "2048")]).await;
    produce_n(&broker.bootstrap(), "trim", 0, 50).await;
    let delete = |offset: i64| {
        DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic("trim"))
                .with_partitions(vec![
                    DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(offset),
                ]),
        ])
    };
    for version in 0..=2 {
        let resp = raw.call(version, &delete(10 + version as i64)).await;
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.low_watermark),
            (0, 10 + version as i64),
            "DeleteRecords v{version}"
        );
    }
    let resp = raw.call(2, &delete(51)).await;
    assert_eq!(
        resp.topics[0].partitions[0].error_code, 1,
        "OFFSET_OUT_OF_RANGE above the high watermark"
    );
    let mut missing = delete(5);
    missing.topics[0].name = topic("nope");
    assert_eq!(raw.call(2, &missing).await.topics[0].partitions[0].error_code, 3);
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(earliest(&mut raw, "trim").await, 12, "the log start survives a restart");
    // Reading below it is out of range; from it, the records are intact.
    let c = consumer(&broker.bootstrap(), &[]);
    assign(&c, "trim", &[0], rdkafka::Offset::Offset(12));
    let m = loop {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            break m.unwrap().detach();
        }
    };
    assert_eq!(m.offset(), 12);
    assert!(String::from_utf8_lossy(m.payload().unwrap()).starts_with("000012-"));
    let resp = raw.call(2, &delete(-1)).await;
    assert_eq!(
        resp.topics[0].partitions[0].low_watermark, 50,
        "-1 means the high watermark"
    );
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_refuses_records_without_a_key() {
    // KIP-467: INVALID_RECORD, and with Produce v8+ the offending record is named.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "latest", &[("cleanup.policy", "compact")]).await;
    let producer = producer(&broker.bootstrap(), &[("message.timeout.ms", "5000"), ("retries", "0")]);
    let err = producer
        .send(
            FutureRecord::<(), _>::to("latest").payload("no key").partition(0),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.0.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::InvalidRecord),
        "{err:?}"
    );
    let ok = producer
        .send(
            FutureRecord::to("latest").key("k").payload("v").partition(0),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(ok.offset, 0, "the refused record took no offset");
    broker.handle.shutdown().await;
}
