//! Idempotent produce: duplicates, sequence gaps and stale epochs through raw frames in every
//! Produce version, DescribeProducers, producer state across restarts, and librdkafka's
//! idempotent producer (`enable.idempotence=true`) end to end.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::*;
use kafka_protocol::records::Compression;
use rdkafka::Message;
use rdkafka::consumer::Consumer;
use rdkafka::producer::FutureRecord;

const PRODUCE_VERSIONS: std::ops::RangeInclusive<i16> = 3..=12;

/// A batch of `count` records from producer `pid` at `epoch`, first sequence `seq`.
fn idempotent_batch(count: usize, pid: i64, epoch: i16, seq: i32) -> Bytes {
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..count)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(format!("v{seq}-{i}"))),
                1000,
            )
        })
        .collect();
    let mut b = sluice::log::batch::encode_records(&records, Compression::None)
        .unwrap()
        .to_vec();
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

async fn create(raw: &mut Raw, name: &str) {
    let req = CreateTopicsRequest::default().with_timeout_ms(5000).with_topics(vec![
        CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    let resp = raw.call(7, &req).await;
    assert_eq!(resp.topics[0].error_code, 0);
}

/// (error code, base offset) of the one partition produced to.
async fn send(raw: &mut Raw, version: i16, name: &str, records: Bytes) -> (i16, i64) {
    let resp = raw.call(version, &produce_request(name, 0, records, -1)).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

#[tokio::test]
async fn retries_gaps_and_stale_epochs_are_answered_like_kafka_in_every_version() {
    // Kafka: ProducerStateManager / ProducerAppendInfo.checkSequence and checkProducerEpoch.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    for version in PRODUCE_VERSIONS {
        let name = unique(&format!("idem-v{version}"));
        create(&mut raw, &name).await;
        let pid = 5000 + i64::from(version);
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(3, pid, 1, 0)).await,
            (0, 0)
        );
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(2, pid, 1, 3)).await,
            (0, 3)
        );
        // A retry of either of the last batches: its original offset, nothing appended.
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(3, pid, 1, 0)).await,
            (0, 0),
            "v{version}"
        );
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(2, pid, 1, 3)).await,
            (0, 3),
            "v{version}"
        );
        // A gap: OUT_OF_ORDER_SEQUENCE_NUMBER (45).
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(1, pid, 1, 9)).await.0,
            45,
            "v{version}"
        );
        // An older epoch: INVALID_PRODUCER_EPOCH (47).
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(1, pid, 0, 5)).await.0,
            47,
            "v{version}"
        );
        // A bumped epoch (KIP-360) restarts at sequence 0, and only there.
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(1, pid, 2, 7)).await.0,
            45,
            "v{version}"
        );
        assert_eq!(
            send(&mut raw, version, &name, idempotent_batch(1, pid, 2, 0)).await,
            (0, 5),
            "v{version}"
        );
        // The log holds exactly 6 records.
        let offsets = raw
            .call(
                1,
                &ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_topics(vec![
                        list_offsets_request::ListOffsetsTopic::default()
                            .with_name(topic(&name))
                            .with_partitions(vec![
                                list_offsets_request::ListOffsetsPartition::default()
                                    .with_partition_index(0)
                                    .with_timestamp(-1),
                            ]),
                    ]),
            )
            .await;
        assert_eq!(offsets.topics[0].partitions[0].offset, 6, "v{version}");
    }
}

#[tokio::test]
async fn describe_producers_lists_epoch_and_last_sequence_and_survives_a_restart() {
    let broker = TestBroker::start(&[]).await;
    let name = unique("describe-producers");
    {
        let mut raw = Raw::connect(broker.addr).await;
        create(&mut raw, &name).await;
        assert_eq!(send(&mut raw, 9, &name, idempotent_batch(4, 77, 3, 0)).await, (0, 0));
    }
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let req = DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default()
            .with_name(topic(&name))
            .with_partition_indexes(vec![0, 5]),
    ]);
    let resp = raw.call(0, &req).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.active_producers.len(), 1);
    let producer = &p.active_producers[0];
    assert_eq!(
        (producer.producer_id.0, producer.producer_epoch, producer.last_sequence),
        (77, 3, 3)
    );
    assert_eq!(producer.current_txn_start_offset, -1);
    // Partition 5 does not exist.
    assert_eq!(resp.topics[0].partitions[1].error_code, 3);
    // After the restart the last batch is still recognised as a duplicate.
    assert_eq!(send(&mut raw, 9, &name, idempotent_batch(4, 77, 3, 0)).await, (0, 0));
    assert_eq!(send(&mut raw, 9, &name, idempotent_batch(1, 77, 3, 4)).await, (0, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_idempotent_producer_writes_every_record_once_in_order() {
    let broker = TestBroker::start(&[]).await;
    let name = unique("idem-rdkafka");
    let producer = producer(
        &broker.bootstrap(),
        &[("enable.idempotence", "true"), ("linger.ms", "5")],
    );
    let total = 20_000usize;
    let mut pending = Vec::with_capacity(total);
    for i in 0..total {
        let value = format!("{i}");
        let key = format!("k{}", i % 3);
        pending.push(
            producer
                .send_result(FutureRecord::to(&name).key(&key).payload(&value).partition(0))
                .map_err(|(e, _)| e)
                .unwrap(),
        );
    }
    for p in pending {
        p.await.unwrap().unwrap();
    }
    let consumer = consumer(&broker.bootstrap(), &[]);
    assign(&consumer, &name, &[0], rdkafka::Offset::Beginning);
    let mut next = 0usize;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while next < total && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            let value: usize = std::str::from_utf8(m.payload().unwrap()).unwrap().parse().unwrap();
            assert_eq!(value, next, "records out of order or duplicated");
            assert_eq!(m.offset(), next as i64);
            next += 1;
        }
    }
    assert_eq!(next, total);
    consumer.unsubscribe();
}

#[tokio::test]
async fn a_control_batch_from_a_client_is_refused() {
    // Kafka's LogValidator: "Clients are not allowed to write control records".
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("client-marker");
    create(&mut raw, &name).await;
    let marker = sluice::log::producer_state::encode_marker(
        9,
        0,
        sluice::log::producer_state::Marker {
            commit: true,
            coordinator_epoch: 0,
        },
        1000,
    );
    // Without the transactional bit, so that the transactional-id check (which Kafka makes
    // first: TRANSACTIONAL_ID_AUTHORIZATION_FAILED) does not answer instead.
    let mut b = marker.to_vec();
    let attributes = i16::from_be_bytes([b[21], b[22]]) & !0x10;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let marker = Bytes::from(b);
    for version in PRODUCE_VERSIONS {
        assert_eq!(send(&mut raw, version, &name, marker.clone()).await.0, 87, "v{version}");
    }
    // Nothing was appended.
    assert_eq!(send(&mut raw, 9, &name, idempotent_batch(1, 9, 0, 0)).await, (0, 0));
}

#[tokio::test]
async fn idle_producers_expire_after_producer_id_expiration_ms() {
    // Kafka's producer.id.expiration.ms: a producer idle that long (counted from its last
    // batch's timestamp) is forgotten; its next write may use any sequence.
    let broker = TestBroker::start(&[
        ("producer.id.expiration.ms", "60000"),
        ("producer.id.expiration.check.interval.ms", "50"),
    ])
    .await;
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("expire-producers");
    create(&mut raw, &name).await;
    // Timestamps of 1970: long idle. A second producer writes with the current time.
    assert_eq!(send(&mut raw, 9, &name, idempotent_batch(1, 1, 0, 0)).await, (0, 0));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut fresh = idempotent_batch(1, 2, 0, 0).to_vec();
    fresh[27..35].copy_from_slice(&now.to_be_bytes());
    fresh[35..43].copy_from_slice(&now.to_be_bytes());
    let crc = crc32c::crc32c(&fresh[21..]);
    fresh[17..21].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(send(&mut raw, 9, &name, Bytes::from(fresh)).await, (0, 1));
    let describe = DescribeProducersRequest::default().with_topics(vec![
        TopicRequest::default()
            .with_name(topic(&name))
            .with_partition_indexes(vec![0]),
    ]);
    let mut ids = Vec::new();
    for _ in 0..200 {
        let resp = raw.call(0, &describe).await;
        ids = resp.topics[0].partitions[0]
            .active_producers
            .iter()
            .map(|p| p.producer_id.0)
            .collect();
        if ids == vec![2] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ids, vec![2], "producer 1 expired, producer 2 kept");
    // The expired producer goes on at any sequence (Kafka accepts an unknown producer).
    assert_eq!(send(&mut raw, 9, &name, idempotent_batch(1, 1, 0, 7)).await, (0, 2));
}
