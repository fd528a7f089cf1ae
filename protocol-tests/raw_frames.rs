//! Raw protocol frames: misuse a real client never produces, edge cases of each API, and every
//! advertised version answering with a response that decodes.

mod common;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder, TimestampType};
use sluice::api::SUPPORTED;

/// One record batch (magic 2) of `count` keyed records, timestamps from `timestamp`.
fn batch(count: usize, value_len: usize, timestamp: i64) -> Bytes {
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..count)
        .map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(vec![b'v'; value_len])),
                timestamp + i as i64,
            )
        })
        .collect();
    sluice::log::batch::encode_records(&records, Compression::None).unwrap()
}

async fn create(raw: &mut Raw, name: &str, partitions: i32, configs: &[(&str, &str)]) -> i16 {
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        );
    let resp = raw
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_topics(vec![t])
                .with_timeout_ms(5000),
        )
        .await;
    resp.topics[0].error_code
}

/// ApiVersions as clients send it: from v3 a software name and version matching Kafka's
/// `ApiVersionsRequest.isValid` pattern (empty ones get INVALID_REQUEST).
fn api_versions() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("sluice-raw-test"))
        .with_client_software_version(StrBytes::from_static_str("1.0"))
}

/// After each misuse the broker must still answer a fresh connection.
async fn still_serves(broker: &TestBroker) {
    let mut raw = Raw::connect(broker.addr).await;
    let resp = raw.call(3, &api_versions()).await;
    assert_eq!(resp.error_code, 0);
}

#[tokio::test]
async fn malformed_frames_close_only_their_connection() {
    let broker = TestBroker::start(&[("socket.request.max.bytes", "2097152")]).await;
    // A bystander connection opened before the misuse keeps working after it.
    let mut bystander = Raw::connect(broker.addr).await;

    // Truncated frame: the length promises more than arrives before the peer closes.
    let mut raw = Raw::connect(broker.addr).await;
    raw.send_bytes(&[0, 0, 0, 100, 0, 18, 0, 3]).await;
    raw.stream.shutdown().await.ok();
    drop(raw);
    still_serves(&broker).await;

    // Oversized length prefix: closed before the broker allocates it.
    let mut raw = Raw::connect(broker.addr).await;
    raw.send_bytes(&0x7fff_ffffi32.to_be_bytes()).await;
    assert!(raw.is_closed().await, "oversized frame closes the connection");
    still_serves(&broker).await;

    // Negative length prefix.
    let mut raw = Raw::connect(broker.addr).await;
    raw.send_bytes(&(-5i32).to_be_bytes()).await;
    assert!(raw.is_closed().await);

    // Unknown API key.
    let mut raw = Raw::connect(broker.addr).await;
    raw.send_bytes(&[0, 0, 0, 10, 0x27, 0x0f, 0, 0, 0, 0, 0, 1, 0xff, 0xff])
        .await;
    assert!(raw.is_closed().await, "unknown API key closes the connection");
    still_serves(&broker).await;

    // Unsupported version of a known API (Produce v2: magic 0/1 only, not served).
    let mut raw = Raw::connect(broker.addr).await;
    let frame = raw.encode(2, &MetadataRequest::default());
    let mut bytes = frame.to_vec();
    bytes[4..6].copy_from_slice(&0i16.to_be_bytes()); // key 0 = Produce
    raw.send_bytes(&bytes).await;
    assert!(raw.is_closed().await, "unsupported version closes the connection");

    // A body that does not parse for its version.
    let mut raw = Raw::connect(broker.addr).await;
    let frame = raw.encode(9, &MetadataRequest::default());
    let mut bytes = frame.to_vec();
    bytes.truncate(bytes.len() - 1);
    bytes.push(0xff);
    bytes.extend_from_slice(&[0xff; 3]);
    let len = (bytes.len() - 4) as i32;
    bytes[..4].copy_from_slice(&len.to_be_bytes());
    raw.send_bytes(&bytes).await;
    assert!(raw.is_closed().await, "a malformed body closes the connection");

    let resp = bystander.call(4, &api_versions()).await;
    assert_eq!(resp.error_code, 0);
    still_serves(&broker).await;
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn api_versions_v99_gets_the_kip511_fallback() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    // A v99 request whose body a v4 client would send; the broker answers v0.
    let mut frame = raw.encode(3, &api_versions()).to_vec();
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    raw.send_bytes(&frame).await;
    let mut body = raw.read_frame().await.expect("a v0 response, not a close");
    use kafka_protocol::protocol::Decodable;
    let header = ResponseHeader::decode(&mut body, 0).unwrap();
    assert_eq!(header.correlation_id, 1);
    let resp = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION");
    let own = resp
        .api_keys
        .iter()
        .find(|k| k.api_key == 18)
        .expect("ApiVersions range listed");
    assert_eq!((own.min_version, own.max_version), (0, 4));
    // The connection stays usable at a supported version.
    let resp = raw.call(4, &api_versions()).await;
    assert_eq!(resp.error_code, 0);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn api_versions_lists_exactly_the_supported_table() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    for version in 0..=4 {
        let resp = raw.call(version, &api_versions()).await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.api_keys.len(), SUPPORTED.len());
        for v in SUPPORTED {
            let k = resp.api_keys.iter().find(|k| k.api_key == v.key as i16).unwrap();
            assert_eq!((k.min_version, k.max_version), (v.min, v.max));
        }
    }
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn corrupt_and_oversized_batches_are_refused_and_leave_the_log_untouched() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(
        create(&mut raw, "guarded", 1, &[("max.message.bytes", "10000")]).await,
        0
    );

    let mut bad_crc = batch(3, 10, 1_000).to_vec();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0x01;
    let resp = raw
        .call(9, &produce_request("guarded", 0, Bytes::from(bad_crc), -1))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 2,
        "CORRUPT_MESSAGE"
    );

    let resp = raw
        .call(9, &produce_request("guarded", 0, batch(1, 20_000, 1_000), -1))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 10,
        "MESSAGE_TOO_LARGE"
    );

    let mut truncated = batch(3, 10, 1_000).to_vec();
    truncated.truncate(truncated.len() - 5);
    let resp = raw
        .call(9, &produce_request("guarded", 0, Bytes::from(truncated), -1))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 2,
        "CORRUPT_MESSAGE"
    );

    let mut magic1 = batch(1, 10, 1_000).to_vec();
    magic1[16] = 1;
    let resp = raw
        .call(9, &produce_request("guarded", 0, Bytes::from(magic1), -1))
        .await;
    assert_ne!(resp.responses[0].partition_responses[0].error_code, 0);

    assert_eq!(latest_offset(&mut raw, "guarded").await, 0, "nothing was appended");
    let resp = raw
        .call(9, &produce_request("guarded", 0, batch(3, 10, 1_000), -1))
        .await;
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset, p.log_start_offset), (0, 0, 0));
    assert_eq!(latest_offset(&mut raw, "guarded").await, 3);

    let resp = raw.call(9, &produce_request("nope", 0, batch(1, 1, 1), 1)).await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    let resp = raw
        .call(9, &produce_request("__consumer_offsets", 0, batch(1, 1, 1), 1))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 17,
        "no appends to internal topics"
    );
    let resp = raw
        .call(9, &produce_request("__transaction_state", 0, batch(1, 1, 1), 1))
        .await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 17,
        "no appends to internal topics"
    );
    let resp = raw.call(9, &produce_request("guarded", 0, batch(1, 1, 1), 2)).await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 21,
        "INVALID_REQUIRED_ACKS"
    );
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn fetch_returns_whole_batches_and_follows_kip74() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "batches", 1, &[]).await, 0);
    let first = batch(5, 1000, 1_000); // offsets 0..5, ~5 KB
    let second = batch(5, 10, 2_000); // offsets 5..10
    for b in [first.clone(), second.clone()] {
        let resp = raw.call(9, &produce_request("batches", 0, b, -1)).await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    }
    // From inside the first batch: the whole first batch comes back.
    let resp = raw.call(12, &fetch_request("batches", 2, 1 << 20, 1 << 20)).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset),
        (0, 10, 10, 0)
    );
    let mut records = p.records.clone().unwrap();
    let sets = RecordBatchDecoder::decode_all(&mut records).unwrap();
    assert_eq!(sets.len(), 2);
    assert_eq!(sets[0].records.first().unwrap().offset, 0);
    assert_eq!(sets[1].records.last().unwrap().offset, 9);

    // KIP-74: limits smaller than the first batch still return that batch whole, and only it.
    let resp = raw.call(12, &fetch_request("batches", 0, 100, 100)).await;
    let records = resp.responses[0].partitions[0].records.clone().unwrap();
    assert_eq!(records.len(), first.len());

    // At the end: empty, no error. Past the end: OFFSET_OUT_OF_RANGE with the offsets.
    let resp = raw.call(12, &fetch_request("batches", 10, 1 << 20, 1 << 20)).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!((p.error_code, p.records.as_ref().map(|r| r.len())), (0, Some(0)));
    let resp = raw.call(12, &fetch_request("batches", 11, 1 << 20, 1 << 20)).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark, p.log_start_offset), (1, 10, 0));
    let resp = raw.call(12, &fetch_request("missing", 0, 1 << 20, 1 << 20)).await;
    assert_eq!(resp.responses[0].partitions[0].error_code, 3);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn list_offsets_by_timestamp_and_max_timestamp() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "times", 1, &[]).await, 0);
    raw.call(9, &produce_request("times", 0, batch(3, 10, 1_000), -1)).await; // 1000..1002
    raw.call(9, &produce_request("times", 0, batch(3, 10, 5_000), -1)).await; // 5000..5002
    let lookup = |ts: i64| {
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic("times"))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(ts),
                    ]),
            ])
    };
    let cases = [
        (-2, 0, -1),
        (-1, 6, -1),
        (1_001, 1, 1_001),
        (3_000, 3, 5_000),
        (5_002, 5, 5_002),
        (-3, 5, 5_002),
    ];
    for (spec, offset, timestamp) in cases {
        let resp = raw.call(8, &lookup(spec)).await;
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.offset, p.timestamp),
            (0, offset, timestamp),
            "spec {spec}"
        );
    }
    let resp = raw.call(8, &lookup(9_000)).await;
    assert_eq!(
        resp.topics[0].partitions[0].offset, -1,
        "no record at or after the timestamp"
    );
    // KIP-405/1005 without tiered storage: earliest-local (-4, v8+) is the log start and
    // latest-tiered (-5, v9+) has no offset; below v9, -5 is not a spec (INVALID_REQUEST).
    let answer = |resp: &ListOffsetsResponse| {
        let p = &resp.topics[0].partitions[0];
        (p.error_code, p.offset, p.timestamp)
    };
    assert_eq!(answer(&raw.call(8, &lookup(-4)).await), (0, 0, -1), "earliest-local");
    assert_eq!(answer(&raw.call(10, &lookup(-5)).await), (0, -1, -1), "latest-tiered");
    assert_eq!(answer(&raw.call(8, &lookup(-5)).await).0, 42, "-5 in v8");
    // KIP-1023 (v11, Kafka 4.2): earliest-pending-upload (-6) has no offset without tiered
    // storage; below v11 it is not a spec.
    assert_eq!(
        answer(&raw.call(11, &lookup(-6)).await),
        (0, -1, -1),
        "earliest-pending-upload"
    );
    assert_eq!(answer(&raw.call(10, &lookup(-6)).await).0, 42, "-6 in v10");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn log_append_time_topics_stamp_the_broker_time() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(
        create(&mut raw, "stamped", 1, &[("message.timestamp.type", "LogAppendTime")]).await,
        0
    );
    let resp = raw.call(9, &produce_request("stamped", 0, batch(2, 10, 42), -1)).await;
    let append_time = resp.responses[0].partition_responses[0].log_append_time_ms;
    assert!(append_time > 1_600_000_000_000, "log_append_time_ms {append_time}");
    let resp = raw.call(12, &fetch_request("stamped", 0, 1 << 20, 1 << 20)).await;
    let records = resp.responses[0].partitions[0].records.clone().unwrap();
    // The batch's maxTimestamp (bytes 35..43) carries the append time for every record.
    let max_timestamp = i64::from_be_bytes(records[35..43].try_into().unwrap());
    assert_eq!(max_timestamp, append_time);
    let sets = RecordBatchDecoder::decode_all(&mut records.clone()).unwrap(); // checks the rewritten CRC
    assert!(
        sets[0]
            .records
            .iter()
            .all(|r| r.timestamp_type == TimestampType::LogAppend)
    );
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn metadata_auto_creates_only_when_enabled() {
    let broker = TestBroker::start(&[("num.partitions", "4")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let ask = |name: &str, allow: bool| {
        MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic(name)))]))
            .with_allow_auto_topic_creation(allow)
    };
    let resp = raw.call(12, &ask("auto", true)).await;
    let t = &resp.topics[0];
    assert_eq!((t.error_code, t.partitions.len()), (0, 4));
    assert!(!t.topic_id.is_nil());
    assert_eq!(resp.controller_id.0, 1);
    assert_eq!(resp.brokers[0].port, broker.addr.port() as i32);
    let resp = raw.call(12, &ask("not-allowed", false)).await;
    assert_eq!(resp.topics[0].error_code, 3);
    let resp = raw.call(12, &ask("bad name!", true)).await;
    assert_eq!(resp.topics[0].error_code, 17, "INVALID_TOPIC_EXCEPTION");
    broker.handle.shutdown().await;

    let broker = TestBroker::start(&[("auto.create.topics.enable", "false")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let resp = raw.call(12, &ask("auto", true)).await;
    assert_eq!(resp.topics[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn metadata_by_topic_id_ignores_the_names_beside_the_ids() {
    // Kafka's Java admin client (describeTopics by id, 4.x) sends each id with an empty name,
    // not a null one. Kafka's KafkaApis looks a request up by id as soon as one topic carries
    // a non-zero id: names are ignored, ids are looked up once each, and an unknown id is
    // UNKNOWN_TOPIC_ID (100) under that id with a null name.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "named", 2, &[]).await, 0);
    let id = topic_id(&mut raw, "named").await;
    let unknown = uuid::Uuid::new_v4();
    let by_id = |id: uuid::Uuid, name: &str| {
        MetadataRequestTopic::default()
            .with_topic_id(id)
            .with_name(Some(topic(name)))
    };
    let req = MetadataRequest::default()
        .with_topics(Some(vec![
            by_id(id, ""),
            by_id(unknown, "named"),
            by_id(id, "other"),
            by_id(uuid::Uuid::nil(), "named"),
        ]))
        .with_allow_auto_topic_creation(false);
    for version in [12, 13] {
        let resp = raw.call(version, &req).await;
        let got: Vec<_> = resp
            .topics
            .iter()
            .map(|t| (t.topic_id, t.name.as_ref().map(|n| n.0.to_string()), t.error_code))
            .collect();
        assert_eq!(
            got,
            vec![(id, Some("named".to_string()), 0), (unknown, None, 100)],
            "v{version}"
        );
        assert_eq!(resp.topics[0].partitions.len(), 2);
    }
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn create_and_delete_topics_validate_like_kafka() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "bad/name", 1, &[]).await, 17);
    assert_eq!(
        create(&mut raw, "conf", 1, &[("retention.ms", "soon")]).await,
        40,
        "INVALID_CONFIG"
    );
    assert_eq!(create(&mut raw, "conf", 1, &[("no.such.key", "1")]).await, 40);
    assert_eq!(create(&mut raw, "zero", 0, &[]).await, 37, "INVALID_PARTITIONS");
    let rf2 = CreatableTopic::default()
        .with_name(topic("rf2"))
        .with_num_partitions(1)
        .with_replication_factor(2);
    let resp = raw
        .call(7, &CreateTopicsRequest::default().with_topics(vec![rf2]))
        .await;
    assert_eq!(resp.topics[0].error_code, 38, "INVALID_REPLICATION_FACTOR");
    let dry = CreatableTopic::default()
        .with_name(topic("dry"))
        .with_num_partitions(2)
        .with_replication_factor(1);
    let resp = raw
        .call(
            7,
            &CreateTopicsRequest::default()
                .with_topics(vec![dry])
                .with_validate_only(true),
        )
        .await;
    assert_eq!((resp.topics[0].error_code, resp.topics[0].num_partitions), (0, 2));
    assert!(
        !broker.dir.path().join("dry-0").exists(),
        "validate_only creates nothing"
    );

    assert_eq!(create(&mut raw, "doomed", 2, &[]).await, 0);
    assert_eq!(create(&mut raw, "doomed", 2, &[]).await, 36, "TOPIC_ALREADY_EXISTS");
    raw.call(9, &produce_request("doomed", 0, batch(2, 10, 1), -1)).await;
    assert!(broker.dir.path().join("doomed-0").exists());
    let meta = raw.call(12, &MetadataRequest::default().with_topics(None)).await;
    let id = meta
        .topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some("doomed"))
        .unwrap()
        .topic_id;

    let resp = raw
        .call(
            6,
            &DeleteTopicsRequest::default().with_topics(vec![DeleteTopicState::default().with_topic_id(id)]),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert!(
        !broker.dir.path().join("doomed-0").exists(),
        "partition files are removed"
    );
    assert!(!broker.dir.path().join("doomed-1").exists());
    let resp = raw
        .call(
            6,
            &DeleteTopicsRequest::default().with_topics(vec![DeleteTopicState::default().with_topic_id(id)]),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 100, "UNKNOWN_TOPIC_ID");
    let resp = raw
        .call(
            5,
            &DeleteTopicsRequest::default().with_topic_names(vec![topic("doomed")]),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 3);

    // A re-created topic starts empty.
    assert_eq!(create(&mut raw, "doomed", 1, &[]).await, 0);
    assert_eq!(latest_offset(&mut raw, "doomed").await, 0);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn create_partitions_grows_a_topic() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "grow", 1, &[]).await, 0);
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    let grow = |count| {
        CreatePartitionsRequest::default().with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic("grow"))
                .with_count(count),
        ])
    };
    let resp = raw.call(3, &grow(3)).await;
    assert_eq!(resp.results[0].error_code, 0);
    let resp = raw.call(3, &grow(2)).await;
    assert_eq!(resp.results[0].error_code, 37, "INVALID_PARTITIONS");
    raw.call(9, &produce_request("grow", 0, batch(1, 1, 1), -1)).await;
    let mut p2 = produce_request("grow", 0, batch(1, 1, 1), -1);
    p2.topic_data[0].partition_data[0].index = 2;
    let resp = raw.call(9, &p2).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    broker.handle.shutdown().await;
}

/// Every advertised version of every API answers with a response that decodes at that version.
#[tokio::test]
async fn every_advertised_version_answers() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "all-versions", 1, &[]).await, 0);
    raw.call(9, &produce_request("all-versions", 0, batch(2, 10, 1), -1))
        .await;
    let meta = raw.call(12, &MetadataRequest::default().with_topics(None)).await;
    let id = meta.topics[0].topic_id;
    for v in SUPPORTED {
        for version in v.min..=v.max {
            match v.key {
                ApiKey::ApiVersions => {
                    assert_eq!(raw.call(version, &api_versions()).await.error_code, 0)
                }
                ApiKey::Metadata => {
                    let topics = if version >= 1 { None } else { Some(vec![]) };
                    let resp = raw.call(version, &MetadataRequest::default().with_topics(topics)).await;
                    assert_eq!(resp.topics.len(), 1, "Metadata v{version}");
                }
                ApiKey::Produce => {
                    let mut req = produce_request("all-versions", 0, batch(1, 5, 1), -1);
                    if version >= 13 {
                        req.topic_data[0].topic_id = id;
                    }
                    let resp = raw.call(version, &req).await;
                    assert_eq!(
                        resp.responses[0].partition_responses[0].error_code, 0,
                        "Produce v{version}"
                    );
                }
                ApiKey::Fetch => {
                    let mut req = fetch_request("all-versions", 0, 1 << 20, 1 << 20);
                    if version >= 13 {
                        req.topics[0].topic_id = id;
                    }
                    let resp = raw.call(version, &req).await;
                    let p = &resp.responses[0].partitions[0];
                    assert_eq!(p.error_code, 0, "Fetch v{version}");
                    assert!(!p.records.as_ref().unwrap().is_empty(), "Fetch v{version}");
                }
                ApiKey::ListOffsets => {
                    let req = ListOffsetsRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_topics(vec![
                            ListOffsetsTopic::default()
                                .with_name(topic("all-versions"))
                                .with_partitions(vec![ListOffsetsPartition::default().with_timestamp(-1)]),
                        ]);
                    let resp = raw.call(version, &req).await;
                    assert_eq!(resp.topics[0].partitions[0].error_code, 0, "ListOffsets v{version}");
                }
                ApiKey::CreateTopics => {
                    let name = format!("created-v{version}");
                    let t = CreatableTopic::default()
                        .with_name(topic(&name))
                        .with_num_partitions(1)
                        .with_replication_factor(1);
                    let resp = raw
                        .call(version, &CreateTopicsRequest::default().with_topics(vec![t]))
                        .await;
                    assert_eq!(resp.topics[0].error_code, 0, "CreateTopics v{version}");
                }
                ApiKey::DeleteTopics => {
                    let name = format!("created-v{}", 2 + version - 1);
                    let req = if version >= 6 {
                        DeleteTopicsRequest::default()
                            .with_topics(vec![DeleteTopicState::default().with_name(Some(topic(&name)))])
                    } else {
                        DeleteTopicsRequest::default().with_topic_names(vec![topic(&name)])
                    };
                    let resp = raw.call(version, &req).await;
                    assert_eq!(resp.responses[0].error_code, 0, "DeleteTopics v{version}");
                }
                ApiKey::CreatePartitions => {
                    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
                    let req = CreatePartitionsRequest::default().with_topics(vec![
                        CreatePartitionsTopic::default()
                            .with_name(topic("all-versions"))
                            .with_count(2 + version as i32),
                    ]);
                    let resp = raw.call(version, &req).await;
                    assert_eq!(resp.results[0].error_code, 0, "CreatePartitions v{version}");
                }
                // Every version of these is exercised in group_frames.rs.
                ApiKey::FindCoordinator
                | ApiKey::JoinGroup
                | ApiKey::SyncGroup
                | ApiKey::Heartbeat
                | ApiKey::LeaveGroup
                | ApiKey::ListGroups
                | ApiKey::DescribeGroups
                | ApiKey::DeleteGroups
                | ApiKey::OffsetCommit
                | ApiKey::OffsetFetch
                | ApiKey::OffsetDelete
                | ApiKey::ConsumerGroupHeartbeat
                | ApiKey::ConsumerGroupDescribe => {}
                // Every version of these (1, or 0) is exercised in share_groups.rs.
                ApiKey::ShareGroupHeartbeat
                | ApiKey::ShareGroupDescribe
                | ApiKey::ShareFetch
                | ApiKey::ShareAcknowledge
                | ApiKey::DescribeShareGroupOffsets
                | ApiKey::AlterShareGroupOffsets
                | ApiKey::DeleteShareGroupOffsets => {}
                // Every version of these is exercised in configs.rs.
                ApiKey::DescribeConfigs
                | ApiKey::AlterConfigs
                | ApiKey::IncrementalAlterConfigs
                | ApiKey::ListConfigResources
                | ApiKey::DescribeCluster
                | ApiKey::DescribeLogDirs
                | ApiKey::AlterReplicaLogDirs => {}
                // Every version is exercised in retention.rs.
                ApiKey::DeleteRecords => {}
                // Every version is exercised in update_features_finalizes_levels_atomically_and_durably.
                ApiKey::UpdateFeatures => {}
                // Exercised in configs.rs (one node) and cluster_apis.rs (3 nodes).
                ApiKey::UnregisterBroker => {}
                // Every version of these is exercised in transactions.rs.
                ApiKey::InitProducerId
                | ApiKey::AddPartitionsToTxn
                | ApiKey::AddOffsetsToTxn
                | ApiKey::EndTxn
                | ApiKey::TxnOffsetCommit
                | ApiKey::DescribeTransactions
                | ApiKey::ListTransactions => {}
                // Exercised in idempotence.rs (v0 is its only version).
                ApiKey::DescribeProducers => {}
                // Every version is exercised in cluster_apis.rs.
                ApiKey::DescribeQuorum | ApiKey::DescribeTopicPartitions => {}
                // Broker to broker (v1 is its only version): sent by the transaction
                // coordinator in cluster_transactions.rs.
                ApiKey::WriteTxnMarkers => {}
                ApiKey::OffsetForLeaderEpoch => {
                    // One node leads at epoch 0: a known partition answers without error, an
                    // unknown topic UNKNOWN_TOPIC_OR_PARTITION (3). Epoch semantics are in
                    // cluster_replication.rs.
                    use kafka_protocol::messages::OffsetForLeaderEpochRequest;
                    use kafka_protocol::messages::offset_for_leader_epoch_request::{
                        OffsetForLeaderPartition, OffsetForLeaderTopic,
                    };
                    let ask = |name: &str| {
                        OffsetForLeaderEpochRequest::default().with_topics(vec![
                            OffsetForLeaderTopic::default()
                                .with_topic(topic(name))
                                .with_partitions(vec![
                                    OffsetForLeaderPartition::default()
                                        .with_partition(0)
                                        .with_current_leader_epoch(-1)
                                        .with_leader_epoch(0),
                                ]),
                        ])
                    };
                    let resp = raw.call(version, &ask("all-versions")).await;
                    let p = &resp.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "OffsetForLeaderEpoch v{version}: {resp:?}");
                    assert!(p.leader_epoch <= 0, "OffsetForLeaderEpoch v{version}: {resp:?}");
                    let resp = raw.call(version, &ask("no-such-topic")).await;
                    assert_eq!(
                        resp.topics[0].partitions[0].error_code, 3,
                        "OffsetForLeaderEpoch v{version}"
                    );
                }
                ApiKey::ElectLeaders => {
                    // One node: every partition is led by its preferred (only) replica, so a
                    // preferred election is ELECTION_NOT_NEEDED (84); moves are tested in
                    // cluster_replication.rs.
                    use kafka_protocol::messages::ElectLeadersRequest;
                    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
                    let req = ElectLeadersRequest::default()
                        .with_topic_partitions(Some(vec![
                            TopicPartitions::default()
                                .with_topic(topic("all-versions"))
                                .with_partitions(vec![0]),
                        ]))
                        .with_timeout_ms(5_000);
                    let resp = raw.call(version, &req).await;
                    assert_eq!(
                        resp.replica_election_results[0].partition_result[0].error_code, 84,
                        "ElectLeaders v{version}: {resp:?}"
                    );
                }
                ApiKey::AlterPartitionReassignments => {
                    // One node: cancelling nothing is NO_REASSIGNMENT_IN_PROGRESS (85), a broker
                    // never registered INVALID_REPLICA_ASSIGNMENT (39); moves are tested in
                    // cluster_reassignment.rs.
                    use kafka_protocol::messages::AlterPartitionReassignmentsRequest;
                    use kafka_protocol::messages::alter_partition_reassignments_request::{
                        ReassignablePartition, ReassignableTopic,
                    };
                    let req = AlterPartitionReassignmentsRequest::default()
                        .with_timeout_ms(5_000)
                        .with_topics(vec![
                            ReassignableTopic::default()
                                .with_name(topic("all-versions"))
                                .with_partitions(vec![
                                    ReassignablePartition::default().with_partition_index(0),
                                    ReassignablePartition::default()
                                        .with_partition_index(0)
                                        .with_replicas(Some(vec![BrokerId(99)])),
                                ]),
                        ]);
                    let resp = raw.call(version, &req).await;
                    let codes: Vec<i16> = resp.responses[0].partitions.iter().map(|p| p.error_code).collect();
                    assert_eq!(
                        (resp.error_code, codes),
                        (0, vec![85, 39]),
                        "AlterPartitionReassignments v{version}: {resp:?}"
                    );
                }
                ApiKey::ListPartitionReassignments => {
                    use kafka_protocol::messages::ListPartitionReassignmentsRequest;
                    let resp = raw
                        .call(
                            version,
                            &ListPartitionReassignmentsRequest::default().with_timeout_ms(5_000),
                        )
                        .await;
                    assert_eq!(
                        (resp.error_code, resp.topics.len()),
                        (0, 0),
                        "ListPartitionReassignments v{version}: {resp:?}"
                    );
                }
                ApiKey::AddRaftVoter | ApiKey::RemoveRaftVoter => {
                    // A single node's voters are static: UNSUPPORTED_VERSION (35), as Kafka
                    // answers at kraft.version 0; a dynamic quorum is in cluster_voters.rs.
                    use kafka_protocol::messages::add_raft_voter_request::Listener;
                    use kafka_protocol::messages::{AddRaftVoterRequest, RemoveRaftVoterRequest};
                    let code = match v.key {
                        ApiKey::AddRaftVoter => {
                            let req = AddRaftVoterRequest::default().with_voter_id(2).with_listeners(vec![
                                Listener::default()
                                    .with_name(StrBytes::from_static_str("CONTROLLER"))
                                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                                    .with_port(9093),
                            ]);
                            raw.call(version, &req).await.error_code
                        }
                        _ => {
                            let req = RemoveRaftVoterRequest::default().with_voter_id(1);
                            raw.call(version, &req).await.error_code
                        }
                    };
                    assert_eq!(code, 35, "{:?} v{version}", v.key);
                }
                // On a PLAINTEXT listener: ILLEGAL_SASL_STATE (34), the connection kept; the
                // SASL listener's answers are in sasl.rs.
                ApiKey::SaslHandshake => {
                    use kafka_protocol::messages::SaslHandshakeRequest;
                    let req = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
                    assert_eq!(raw.call(version, &req).await.error_code, 34, "SaslHandshake v{version}");
                }
                ApiKey::SaslAuthenticate => {
                    use kafka_protocol::messages::SaslAuthenticateRequest;
                    let req = SaslAuthenticateRequest::default();
                    assert_eq!(
                        raw.call(version, &req).await.error_code,
                        34,
                        "SaslAuthenticate v{version}"
                    );
                }
                // Answered on any listener; every error is in sasl.rs.
                ApiKey::DescribeUserScramCredentials => {
                    use kafka_protocol::messages::DescribeUserScramCredentialsRequest;
                    let resp = raw.call(version, &DescribeUserScramCredentialsRequest::default()).await;
                    assert_eq!((resp.error_code, resp.results.len()), (0, 0), "v{version}");
                }
                ApiKey::AlterUserScramCredentials => {
                    use kafka_protocol::messages::AlterUserScramCredentialsRequest;
                    let resp = raw.call(version, &AlterUserScramCredentialsRequest::default()).await;
                    assert!(resp.results.is_empty(), "v{version}");
                }
                // Without an authorizer: SECURITY_DISABLED (54); the rest is in acl.rs.
                ApiKey::DescribeAcls => {
                    use kafka_protocol::messages::DescribeAclsRequest;
                    let req = DescribeAclsRequest::default()
                        .with_resource_type_filter(1)
                        .with_pattern_type_filter(1)
                        .with_operation(1)
                        .with_permission_type(1);
                    assert_eq!(raw.call(version, &req).await.error_code, 54, "DescribeAcls v{version}");
                }
                ApiKey::CreateAcls => {
                    use kafka_protocol::messages::CreateAclsRequest;
                    use kafka_protocol::messages::create_acls_request::AclCreation;
                    let req = CreateAclsRequest::default().with_creations(vec![AclCreation::default()]);
                    let resp = raw.call(version, &req).await;
                    assert_eq!(resp.results[0].error_code, 54, "CreateAcls v{version}");
                }
                ApiKey::DeleteAcls => {
                    use kafka_protocol::messages::DeleteAclsRequest;
                    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
                    let req = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()]);
                    let resp = raw.call(version, &req).await;
                    assert_eq!(resp.filter_results[0].error_code, 54, "DeleteAcls v{version}");
                }
                // Every version: an empty describe, a refused alter (the rest is in quotas.rs).
                ApiKey::DescribeClientQuotas => {
                    use kafka_protocol::messages::DescribeClientQuotasRequest;
                    let resp = raw.call(version, &DescribeClientQuotasRequest::default()).await;
                    assert_eq!(resp.error_code, 0, "DescribeClientQuotas v{version}");
                    assert_eq!(resp.entries, Some(vec![]), "DescribeClientQuotas v{version}");
                }
                ApiKey::AlterClientQuotas => {
                    use kafka_protocol::messages::AlterClientQuotasRequest;
                    use kafka_protocol::messages::alter_client_quotas_request::EntryData;
                    let req = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()]);
                    let resp = raw.call(version, &req).await;
                    assert_eq!(resp.entries[0].error_code, 42, "AlterClientQuotas v{version}");
                }
                // On PLAINTEXT: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (64); the SASL answers are
                // in sasl.rs.
                ApiKey::CreateDelegationToken => {
                    use kafka_protocol::messages::CreateDelegationTokenRequest;
                    let resp = raw.call(version, &CreateDelegationTokenRequest::default()).await;
                    assert_eq!(resp.error_code, 64, "CreateDelegationToken v{version}");
                }
                ApiKey::RenewDelegationToken => {
                    use kafka_protocol::messages::RenewDelegationTokenRequest;
                    let resp = raw.call(version, &RenewDelegationTokenRequest::default()).await;
                    assert_eq!(resp.error_code, 64, "RenewDelegationToken v{version}");
                }
                ApiKey::ExpireDelegationToken => {
                    use kafka_protocol::messages::ExpireDelegationTokenRequest;
                    let resp = raw.call(version, &ExpireDelegationTokenRequest::default()).await;
                    assert_eq!(resp.error_code, 64, "ExpireDelegationToken v{version}");
                }
                ApiKey::DescribeDelegationToken => {
                    use kafka_protocol::messages::DescribeDelegationTokenRequest;
                    let resp = raw.call(version, &DescribeDelegationTokenRequest::default()).await;
                    assert_eq!(resp.error_code, 64, "DescribeDelegationToken v{version}");
                }
                other => panic!("{other:?} is advertised but no test sends every version of it"),
            }
        }
    }
    broker.handle.shutdown().await;
}

use tokio::io::AsyncWriteExt;

#[tokio::test]
async fn timestamps_outside_the_topic_bounds_are_refused() {
    // KIP-937: message.timestamp.before.max.ms and message.timestamp.after.max.ms.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let bounds = [
        ("message.timestamp.before.max.ms", "3600000"),
        ("message.timestamp.after.max.ms", "60000"),
    ];
    assert_eq!(create(&mut raw, "bounded", 1, &bounds).await, 0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let old = raw
        .call(9, &produce_request("bounded", 0, batch(2, 5, 1_000), -1))
        .await;
    let p = &old.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 32, "INVALID_TIMESTAMP");
    assert_eq!(p.record_errors[0].batch_index, 0);
    let future = raw
        .call(9, &produce_request("bounded", 0, batch(2, 5, now + 3_600_000), -1))
        .await;
    assert_eq!(future.responses[0].partition_responses[0].error_code, 32);
    let fine = raw.call(9, &produce_request("bounded", 0, batch(2, 5, now), -1)).await;
    let p = &fine.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 0), "nothing refused was appended");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn the_broker_recompresses_to_the_topic_compression_type() {
    // compression.type other than `producer`: batches are stored with the topic's codec, the
    // records byte for byte as produced.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    for (codec_name, codec) in [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), ("uncompressed", 0)] {
        let name = format!("squeezed-{codec_name}");
        assert_eq!(create(&mut raw, &name, 1, &[("compression.type", codec_name)]).await, 0);
        // Produced with another codec (or none) than the topic's.
        let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..50)
            .map(|i| {
                (
                    Some(Bytes::from(format!("k{i}"))),
                    Some(Bytes::from(vec![b'z'; 100])),
                    1_000 + i,
                )
            })
            .collect();
        let produced_codec = if codec == 4 {
            Compression::Lz4
        } else {
            Compression::Zstd
        };
        let produced = sluice::log::batch::encode_records(&records, produced_codec).unwrap();
        let resp = raw.call(9, &produce_request(&name, 0, produced, -1)).await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0, "{codec_name}");
        let resp = raw.call(12, &fetch_request(&name, 0, 1 << 20, 1 << 20)).await;
        let stored = resp.responses[0].partitions[0].records.clone().unwrap();
        let attributes = i16::from_be_bytes([stored[21], stored[22]]);
        assert_eq!(attributes & 7, codec, "stored with the topic's codec ({codec_name})");
        let sets = RecordBatchDecoder::decode_all(&mut stored.clone()).unwrap();
        let got: Vec<(Option<Bytes>, Option<Bytes>, i64)> = sets[0]
            .records
            .iter()
            .map(|r| (r.key.clone(), r.value.clone(), r.timestamp))
            .collect();
        assert_eq!(got, records, "records intact ({codec_name})");
    }
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn an_array_claiming_billions_of_elements_closes_only_its_connection() {
    // Kafka's generated readers: "Tried to allocate a collection of size N, but there are only
    // M bytes remaining". The decoder refuses the claim before allocating (vendor/kafka-protocol).
    let broker = TestBroker::start(&[]).await;
    // Metadata v1: topics array (int32 count) of 2^31 - 1 entries, then nothing.
    let mut raw = Raw::connect(broker.addr).await;
    let mut frame = vec![0, 0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 7, 0, 1, b'x'];
    frame.extend_from_slice(&i32::MAX.to_be_bytes());
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    raw.send_bytes(&frame).await;
    assert!(raw.is_closed().await);
    // Metadata v12 (flexible): a compact array of 2^32 - 2 entries.
    let mut raw = Raw::connect(broker.addr).await;
    let mut frame = vec![0, 0, 0, 0, 0, 3, 0, 12, 0, 0, 0, 8, 0, 1, b'x', 0];
    frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    raw.send_bytes(&frame).await;
    assert!(raw.is_closed().await);
    still_serves(&broker).await;
    broker.handle.shutdown().await;
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Produces `records` as one batch to partition 0 of `name` in every Produce version served,
/// returning each version's partition answer.
async fn produce_in_every_version(
    raw: &mut Raw,
    name: &str,
    records: &[(Option<Bytes>, Option<Bytes>, i64)],
) -> Vec<(i16, produce_response::PartitionProduceResponse)> {
    let batch = sluice::log::batch::encode_records(records, Compression::None).unwrap();
    let versions = sluice::api::produce::VERSIONS;
    let id = topic_id(raw, name).await;
    let mut answers = Vec::new();
    for version in versions.min..=versions.max {
        let mut req = produce_request(name, 0, batch.clone(), -1);
        if version >= 13 {
            req.topic_data[0].topic_id = id; // KIP-516: named by id only
        }
        let resp = raw.call(version, &req).await;
        answers.push((version, resp.responses[0].partition_responses[0].clone()));
    }
    answers
}

#[tokio::test]
async fn every_keyless_record_of_a_batch_is_named_in_a_compacted_topic() {
    // KIP-467, Kafka's LogValidator: every record failing validateKey is a RecordError named by
    // its index in the batch; the partition answers INVALID_RECORD. Produce v3-v7 have no
    // record_errors or error_message field (ignorable in ProduceResponse.json): the code alone.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(
        create(&mut raw, "named-keyless", 1, &[("cleanup.policy", "compact")]).await,
        0
    );
    let keyless = [3, 9, 17, 25, 33, 50, 61, 77, 88, 99];
    let now = now_ms();
    let records: Vec<_> = (0..100)
        .map(|i| {
            let key = (!keyless.contains(&i)).then(|| Bytes::from(format!("k{i}")));
            (key, Some(Bytes::from(format!("v{i}"))), now)
        })
        .collect();
    let text = "Compacted topic cannot accept message without key in topic partition named-keyless-0";
    for (version, p) in produce_in_every_version(&mut raw, "named-keyless", &records).await {
        assert_eq!((p.error_code, p.base_offset), (87, -1), "INVALID_RECORD in v{version}");
        if version < 8 {
            assert!(p.record_errors.is_empty(), "v{version}");
            assert_eq!(p.error_message, None, "v{version}");
            continue;
        }
        let named: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(named, keyless, "v{version}: exactly the keyless records");
        for e in &p.record_errors {
            assert_eq!(e.batch_index_error_message.as_deref(), Some(text), "v{version}");
        }
        let summary = p.error_message.as_deref().unwrap_or_default();
        assert!(
            summary.starts_with(
                "One or more records have been rejected due to 10 record errors in total, and only \
                 showing the first three errors at most: [RecordError(batchIndex=3, message='Compacted"
            ),
            "v{version}: {summary}"
        );
    }
    assert_eq!(latest_offset(&mut raw, "named-keyless").await, 0, "nothing appended");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn every_record_with_an_out_of_bounds_timestamp_is_named() {
    // KIP-467 and KIP-937, Kafka's LogValidator.validateTimestamp: every record outside
    // [now - before.max.ms, now + after.max.ms] is named; the partition answers INVALID_TIMESTAMP
    // with "One or more records have been rejected due to invalid timestamp".
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let bounds = [
        ("message.timestamp.before.max.ms", "3600000"),
        ("message.timestamp.after.max.ms", "60000"),
    ];
    assert_eq!(create(&mut raw, "named-timestamps", 1, &bounds).await, 0);
    let now = now_ms();
    let too_old = [0, 14, 42, 43, 98];
    let too_new = [7, 60];
    let records: Vec<_> = (0..100)
        .map(|i| {
            let timestamp = if too_old.contains(&i) {
                1_000 + i64::from(i)
            } else if too_new.contains(&i) {
                now + 7_200_000
            } else {
                now
            };
            (Some(Bytes::from(format!("k{i}"))), Some(Bytes::from("v")), timestamp)
        })
        .collect();
    let mut expected: Vec<i32> = too_old.iter().chain(&too_new).copied().collect();
    expected.sort_unstable();
    for (version, p) in produce_in_every_version(&mut raw, "named-timestamps", &records).await {
        assert_eq!(
            (p.error_code, p.base_offset),
            (32, -1),
            "INVALID_TIMESTAMP in v{version}"
        );
        if version < 8 {
            assert!(p.record_errors.is_empty(), "v{version}");
            assert_eq!(p.error_message, None, "v{version}");
            continue;
        }
        let named: Vec<i32> = p.record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(named, expected, "v{version}: exactly the out-of-bounds records");
        let first = p.record_errors[0]
            .batch_index_error_message
            .as_deref()
            .unwrap_or_default();
        assert!(
            first.starts_with(
                "Timestamp 1000 of message with offset 0 is out of range. The timestamp should be within ["
            ),
            "v{version}: {first}"
        );
        assert_eq!(
            p.error_message.as_deref(),
            Some("One or more records have been rejected due to invalid timestamp"),
            "v{version}"
        );
    }
    assert_eq!(latest_offset(&mut raw, "named-timestamps").await, 0, "nothing appended");
    broker.handle.shutdown().await;
}

/// The topic id of `name` (Metadata v12).
async fn topic_id(raw: &mut Raw, name: &str) -> uuid::Uuid {
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic(name)))]));
    let resp = raw.call(12, &req).await;
    assert_eq!(resp.topics[0].error_code, 0, "{name}");
    resp.topics[0].topic_id
}

/// A Produce request naming each topic by id only (v13), one partition per entry.
fn produce_by_id(entries: &[(uuid::Uuid, i32, Bytes)], acks: i16) -> ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let topics = entries
        .iter()
        .map(|(id, partition, records)| {
            TopicProduceData::default().with_topic_id(*id).with_partition_data(vec![
                PartitionProduceData::default()
                    .with_index(*partition)
                    .with_records(Some(records.clone())),
            ])
        })
        .collect();
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(topics)
}

/// A Fetch of one partition from `offset`, the topic named by id (v13+).
fn fetch_by_id(id: uuid::Uuid, partition: i32, offset: i64) -> FetchRequest {
    let mut req = fetch_request("", offset, 1 << 20, 1 << 20);
    req.topics[0].topic_id = id;
    req.topics[0].partitions[0].partition = partition;
    req
}

/// (topic id, partition, error code, base offset) of every partition answered, in order.
fn produce_answers(resp: &ProduceResponse) -> Vec<(uuid::Uuid, i32, i16, i64)> {
    resp.responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .map(move |p| (t.topic_id, p.index, p.error_code, p.base_offset))
        })
        .collect()
}

#[tokio::test]
async fn produce_v13_names_topics_by_id_and_answers_unknown_ids_with_unknown_topic_id() {
    // KIP-516, Kafka 4.1's ProduceRequest.json v13: "Version 13 replaces topic names with topic
    // IDs (KIP-516). May return UNKNOWN_TOPIC_ID error code." Kafka's KafkaApis resolves the id
    // through its metadata cache; a partition the topic lacks is UNKNOWN_TOPIC_OR_PARTITION.
    const UNKNOWN_TOPIC_ID: i16 = 100;
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "by-id", 2, &[]).await, 0);
    assert_eq!(create(&mut raw, "by-id-other", 1, &[]).await, 0);
    let id = topic_id(&mut raw, "by-id").await;
    let other = topic_id(&mut raw, "by-id-other").await;
    let unknown = uuid::Uuid::new_v4();
    let nil = uuid::Uuid::nil();
    let req = produce_by_id(
        &[
            (id, 1, batch(3, 5, 1)),
            (unknown, 0, batch(1, 5, 1)),
            (other, 0, batch(2, 5, 1)),
            (nil, 0, batch(1, 5, 1)),
        ],
        -1,
    );
    let resp = raw.call(13, &req).await;
    assert_eq!(
        produce_answers(&resp),
        vec![
            (id, 1, 0, 0),
            (unknown, 0, UNKNOWN_TOPIC_ID, -1),
            (other, 0, 0, 0),
            (nil, 0, UNKNOWN_TOPIC_ID, -1),
        ],
        "answered in request order, each topic named by its id"
    );
    let text = resp.responses[1].partition_responses[0].error_message.as_deref();
    assert_eq!(text, Some(format!("unknown topic id {unknown}").as_str()));

    let resp = raw.call(13, &produce_by_id(&[(id, 7, batch(1, 5, 1))], -1)).await;
    assert_eq!(
        produce_answers(&resp),
        vec![(id, 7, 3, -1)],
        "UNKNOWN_TOPIC_OR_PARTITION"
    );

    // The three records went to partition 1 of by-id, nowhere else (read back by id, Fetch v18).
    let resp = raw.call(18, &fetch_by_id(id, 1, 0)).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!((resp.responses[0].topic_id, p.error_code, p.high_watermark), (id, 0, 3));
    let sets = RecordBatchDecoder::decode_all(&mut p.records.clone().unwrap()).unwrap();
    assert_eq!(sets.iter().map(|s| s.records.len()).sum::<usize>(), 3);
    let resp = raw.call(18, &fetch_by_id(id, 0, 0)).await;
    assert_eq!(resp.responses[0].partitions[0].high_watermark, 0);

    // A topic deleted and created again under its name gets a new id: a producer still holding
    // the old one is refused instead of writing into the new topic (KIP-516's motivation).
    let delete = DeleteTopicsRequest::default()
        .with_topics(vec![DeleteTopicState::default().with_topic_id(id)])
        .with_timeout_ms(5000);
    assert_eq!(raw.call(6, &delete).await.responses[0].error_code, 0);
    assert_eq!(create(&mut raw, "by-id", 2, &[]).await, 0);
    let new_id = topic_id(&mut raw, "by-id").await;
    assert_ne!(new_id, id);
    let resp = raw.call(13, &produce_by_id(&[(id, 0, batch(1, 5, 1))], -1)).await;
    assert_eq!(produce_answers(&resp), vec![(id, 0, UNKNOWN_TOPIC_ID, -1)]);
    assert_eq!(
        latest_offset(&mut raw, "by-id").await,
        0,
        "nothing written by the old id"
    );
    let resp = raw.call(13, &produce_by_id(&[(new_id, 0, batch(2, 5, 1))], 1)).await;
    assert_eq!(produce_answers(&resp), vec![(new_id, 0, 0, 0)]);
    assert_eq!(latest_offset(&mut raw, "by-id").await, 2);
    broker.handle.shutdown().await;
}

/// A batch of `count` records from producer `pid` at `epoch`, first sequence `seq`; with
/// `transactional` the batch's transactional bit is set.
fn producer_batch(count: usize, pid: i64, epoch: i16, seq: i32, transactional: bool) -> Bytes {
    let mut b = batch(count, 5, 1000).to_vec();
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    if transactional {
        let attributes = i16::from_be_bytes([b[21], b[22]]) | 0x10;
        b[21..23].copy_from_slice(&attributes.to_be_bytes());
    }
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

#[tokio::test]
async fn produce_v13_checks_producers_and_transactions_as_v12() {
    // v13 changes how a topic is named and nothing else: Kafka's ProducerStateManager checks
    // (duplicates answered with their first offset, sequence gaps, stale epochs) and KIP-890
    // part 2 (a transactional batch's partition added to its transaction by the broker) answer
    // as in v12.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let mut answers = Vec::new();
    for version in [12i16, 13] {
        let name = format!("producers-v{version}");
        assert_eq!(create(&mut raw, &name, 1, &[]).await, 0);
        let id = topic_id(&mut raw, &name).await;
        let request = |records: Bytes, transactional_id: Option<&str>| {
            let mut req = produce_request(&name, 0, records, -1);
            if version >= 13 {
                req.topic_data[0].topic_id = id;
            }
            req.transactional_id = transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.to_string())));
            req
        };
        let pid = 7000 + i64::from(version);
        let mut got = Vec::new();
        for (records, transactional_id) in [
            (producer_batch(3, pid, 0, 0, false), None),
            (producer_batch(3, pid, 0, 0, false), None), // a retry: its first offset again
            (producer_batch(2, pid, 0, 3, false), None),
            (producer_batch(1, pid, 0, 9, false), None),      // a gap
            (producer_batch(1, pid, 1, 0, false), None),      // a new epoch
            (producer_batch(1, pid, 0, 5, false), None),      // the old epoch
            (producer_batch(1, pid + 100, 0, 0, true), None), // transactional, no id
        ] {
            let resp = raw.call(version, &request(records, transactional_id)).await;
            let p = &resp.responses[0].partition_responses[0];
            got.push((p.error_code, p.base_offset));
        }
        // A transaction that does not hold the partition yet, then the same batch again.
        let txn_id = format!("txn-by-id-v{version}");
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(txn_id.clone()))))
            .with_transaction_timeout_ms(60_000);
        let init = raw.call(4, &init).await;
        assert_eq!(init.error_code, 0);
        let (txn_pid, txn_epoch) = (init.producer_id.0, init.producer_epoch);
        let txn_batch = producer_batch(2, txn_pid, txn_epoch, 0, true);
        let resp = raw.call(version, &request(txn_batch.clone(), Some(&txn_id))).await;
        let p = &resp.responses[0].partition_responses[0];
        got.push((p.error_code, p.base_offset));
        use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
        let add = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(txn_id.clone())))
            .with_v3_and_below_producer_id(ProducerId(txn_pid))
            .with_v3_and_below_producer_epoch(txn_epoch)
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(topic(&name))
                    .with_partitions(vec![0]),
            ]);
        let added = raw.call(3, &add).await;
        assert_eq!(
            added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            0
        );
        let resp = raw.call(version, &request(txn_batch, Some(&txn_id))).await;
        let p = &resp.responses[0].partition_responses[0];
        got.push((p.error_code, p.base_offset));
        answers.push(got);
    }
    let expected = vec![
        (0, 0),
        (0, 0),
        (0, 3),
        (45, -1), // OUT_OF_ORDER_SEQUENCE_NUMBER
        (0, 5),
        (47, -1), // INVALID_PRODUCER_EPOCH
        (53, -1), // TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (0, 6),   // not in the transaction: the broker adds it (transaction version 2)
        (0, 6),   // after the client's own AddPartitionsToTxn, a retry: its first offset
    ];
    assert_eq!(answers, vec![expected.clone(), expected], "v12, then v13");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn fetch_v18_answers_as_v17_whatever_high_watermark_a_request_carries() {
    // KIP-1166 (Kafka 4.1, Fetch v18): each partition may carry the high watermark its follower
    // knows (tag 1; absent = i64::MAX, -1 = unknown). Kafka reads it only in its KRaft quorum; a
    // consumer never sets it, and Sluice, without followers, ignores it.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "fetch-v18", 1, &[]).await, 0);
    let id = topic_id(&mut raw, "fetch-v18").await;
    for _ in 0..2 {
        let resp = raw.call(13, &produce_by_id(&[(id, 0, batch(4, 10, 1))], -1)).await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    }
    let answer = |resp: FetchResponse| {
        let p = resp.responses[0].partitions[0].clone();
        (
            resp.responses[0].topic_id,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            p.log_start_offset,
            p.records,
        )
    };
    let v17 = answer(raw.call(17, &fetch_by_id(id, 0, 0)).await);
    assert_eq!((v17.0, v17.1, v17.2), (id, 0, 8));
    assert!(!v17.5.as_ref().unwrap().is_empty());
    let plain = fetch_by_id(id, 0, 0);
    for high_watermark in [i64::MAX, -1, 0, 8, 100] {
        let mut req = fetch_by_id(id, 0, 0);
        req.topics[0].partitions[0].high_watermark = high_watermark;
        if high_watermark != i64::MAX {
            // The tagged field is on the wire (tag, size, 8 bytes).
            assert_eq!(raw.encode(18, &req).len(), raw.encode(18, &plain).len() + 10);
        }
        let v18 = answer(raw.call(18, &req).await);
        assert_eq!(v18, v17, "high watermark {high_watermark}");
    }
    // From the end of the log, with a follower's stale high watermark, it still waits for data
    // (min_bytes 1) and answers empty at max_wait_ms, as v17.
    let mut req = fetch_by_id(id, 0, 8);
    req.min_bytes = 1;
    req.max_wait_ms = 200;
    req.topics[0].partitions[0].high_watermark = 3;
    let started = std::time::Instant::now();
    let resp = raw.call(18, &req).await;
    assert!(started.elapsed() >= std::time::Duration::from_millis(150));
    let p = &resp.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 8));
    assert!(p.records.as_ref().unwrap().is_empty());
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn api_versions_reports_the_features_sluice_serves_as_kafka_shapes_them() {
    // KIP-584 features: tagged fields of ApiVersions v3+. Kafka's ApiVersionsResponse.Builder
    // leaves out below v4 a supported feature whose minimum is 0 (KAFKA-17492) and never lists
    // a finalized level 0. group.version 1: KIP-848 groups. transaction.version 2, as Kafka
    // 4.1: KIP-890 part 2 (Produce v12+ and TxnOffsetCommit v5 add their partitions to the
    // transaction, EndTxn v5 bumps the epoch).
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let finalized = vec![
        ("group.version".to_string(), 1, 1),
        ("transaction.version".to_string(), 2, 2),
        ("eligible.leader.replicas.version".to_string(), 1, 1),
        ("share.version".to_string(), 1, 1),
    ];
    let supported_v4 = vec![
        ("group.version".to_string(), 0, 1),
        ("transaction.version".to_string(), 0, 2),
        ("eligible.leader.replicas.version".to_string(), 0, 1),
        ("share.version".to_string(), 0, 1),
    ];
    for version in 0..=4 {
        let resp = raw.call(version, &api_versions()).await;
        assert_eq!(resp.error_code, 0);
        let supported: Vec<(String, i16, i16)> = resp
            .supported_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version, f.max_version))
            .collect();
        let got: Vec<(String, i16, i16)> = resp
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
            .collect();
        match version {
            0..=2 => {
                assert!(supported.is_empty() && got.is_empty(), "v{version}");
                assert_eq!(resp.finalized_features_epoch, -1, "v{version}: not in the response");
            }
            3 => {
                assert!(supported.is_empty(), "v3: every supported minimum is 0");
                assert_eq!(got, finalized);
                assert_eq!(resp.finalized_features_epoch, 4);
            }
            _ => {
                assert_eq!(supported, supported_v4);
                assert_eq!(got, finalized);
                assert_eq!(resp.finalized_features_epoch, 4);
            }
        }
    }
    assert_eq!(
        sluice::api::api_versions::FINALIZED_FEATURES_EPOCH,
        4,
        "the epoch the answers carry"
    );
    // An invalid v3+ request gets Kafka's error response: no API, no feature.
    let bad = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("-"))
        .with_client_software_version(StrBytes::from_static_str("1.0"));
    let resp = raw.call(4, &bad).await;
    assert_eq!(resp.error_code, 42);
    assert!(resp.supported_features.is_empty() && resp.finalized_features.is_empty());
    assert_eq!(resp.finalized_features_epoch, -1);
    broker.handle.shutdown().await;
}

/// UpdateFeatures (57), as Kafka 4.1's controller answers it: atomic (the first refusal,
/// INVALID_UPDATE_VERSION with Kafka's message, changes nothing), validate_only writes
/// nothing, a change shows in ApiVersions at once with a higher epoch and survives a restart;
/// group.version 0 turns ConsumerGroupHeartbeat and ConsumerGroupDescribe off
/// (UNSUPPORTED_VERSION), and 1 turns them on again.
#[tokio::test]
async fn update_features_finalizes_levels_atomically_and_durably() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, UpdateFeaturesRequest,
    };
    const INVALID_UPDATE_VERSION: i16 = 95;
    let update = |changes: &[(&str, i16, i8)]| {
        UpdateFeaturesRequest::default()
            .with_timeout_ms(10_000)
            .with_feature_updates(
                changes
                    .iter()
                    .map(|(name, level, kind)| {
                        FeatureUpdateKey::default()
                            .with_feature(StrBytes::from_string(name.to_string()))
                            .with_max_version_level(*level)
                            .with_upgrade_type(*kind)
                    })
                    .collect(),
            )
    };
    async fn features(raw: &mut Raw) -> (Vec<(String, i16)>, i64) {
        let resp = raw.call(4, &api_versions()).await;
        let levels = resp
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect();
        (levels, resp.finalized_features_epoch)
    }
    let defaults = vec![
        ("group.version".to_string(), 1),
        ("transaction.version".to_string(), 2),
        ("eligible.leader.replicas.version".to_string(), 1),
        ("share.version".to_string(), 1),
    ];
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(features(&mut raw).await, (defaults.clone(), 4));

    // Refusals, each failing the whole request; the valid update beside them is not applied.
    const SAFE: i8 = 2;
    for (changes, why) in [
        (
            vec![("group.version", 0, SAFE), ("transaction.version", 3, 1)],
            "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2",
        ),
        (
            vec![("metadata.version", 27, 1)],
            "Invalid update version 27 for feature metadata.version. Local controller 1 does not support this feature.",
        ),
        (
            vec![("transaction.version", 1, 1)],
            "Invalid update version 1 for feature transaction.version. Can't downgrade the version of this feature \
             without setting the upgrade type to either safe or unsafe downgrade.",
        ),
        (
            vec![("transaction.version", 1, 7)],
            "Invalid update version 1 for feature transaction.version. The controller does not support the given \
             upgrade type.",
        ),
    ] {
        for version in 1..=2 {
            let resp = raw.call(version, &update(&changes)).await;
            assert_eq!(resp.error_code, INVALID_UPDATE_VERSION, "v{version} {changes:?}");
            assert_eq!(
                resp.error_message.as_deref(),
                Some(
                    format!("The update failed for all features since the following feature had an error: {why}")
                        .as_str()
                )
            );
            assert!(resp.results.is_empty(), "no per-feature results on failure");
        }
    }
    // v0: a downgrade needs allow_downgrade.
    let mut v0 = update(&[("group.version", 0, 1)]);
    assert_eq!(raw.call(0, &v0).await.error_code, INVALID_UPDATE_VERSION);
    // validate_only (v1+) checks and changes nothing.
    let resp = raw
        .call(1, &update(&[("group.version", 0, SAFE)]).with_validate_only(true))
        .await;
    assert_eq!((resp.error_code, resp.results.len()), (0, 1));
    assert_eq!(
        features(&mut raw).await,
        (defaults.clone(), 4),
        "validate_only changed nothing"
    );

    // group.version 0 (v0, allow_downgrade): the KIP-848 protocol is off, and ApiVersions no
    // longer lists it as finalized, at a higher epoch.
    v0.feature_updates[0].allow_downgrade = true;
    let resp = raw.call(0, &v0).await;
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let names: Vec<(String, i16)> = resp
        .results
        .iter()
        .map(|r| (r.feature.to_string(), r.error_code))
        .collect();
    assert_eq!(names, vec![("group.version".to_string(), 0)], "v0 lists each feature");
    let (levels, epoch) = features(&mut raw).await;
    assert_eq!(
        levels,
        vec![
            ("transaction.version".to_string(), 2),
            ("eligible.leader.replicas.version".to_string(), 1),
            ("share.version".to_string(), 1)
        ]
    );
    assert!(epoch > 4, "the epoch grows: {epoch}");
    let heartbeat = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str("off")))
        .with_member_id(StrBytes::from_static_str("m-1"))
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic("t")]));
    let resp = raw.call(1, &heartbeat).await;
    assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION: {resp:?}");
    let describe =
        ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(StrBytes::from_static_str("off"))]);
    let resp = raw.call(1, &describe).await;
    assert_eq!(resp.groups[0].error_code, 35);

    // transaction.version 1 (v2: no per-feature results), then a restart keeps both levels
    // and the epoch.
    let resp = raw.call(2, &update(&[("transaction.version", 1, SAFE)])).await;
    assert_eq!((resp.error_code, resp.results.len()), (0, 0));
    let (levels, later) = features(&mut raw).await;
    let lowered = vec![
        ("transaction.version".to_string(), 1),
        ("eligible.leader.replicas.version".to_string(), 1),
        ("share.version".to_string(), 1),
    ];
    assert_eq!(levels, lowered);
    assert!(later > epoch, "{later} after {epoch}");
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(features(&mut raw).await, (lowered, later));

    // Both back up (an upgrade to a level between is fine); the protocol is on again.
    let resp = raw
        .call(1, &update(&[("group.version", 1, 1), ("transaction.version", 2, 1)]))
        .await;
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let (levels, last) = features(&mut raw).await;
    assert_eq!(levels, defaults);
    assert!(last > later);
    let resp = raw.call(1, &heartbeat).await;
    assert_eq!((resp.error_code, resp.member_epoch), (0, 1), "{resp:?}");
    broker.handle.shutdown().await;
}

/// Kafka's `ProduceRequest.validateRecords`, per partition: exactly one batch (INVALID_RECORD
/// for two, nothing appended) and no zstd before Produce v7 (UNSUPPORTED_COMPRESSION_TYPE).
#[tokio::test]
async fn produce_takes_exactly_one_batch_per_partition_and_zstd_from_v7() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(create(&mut raw, "one-batch", 1, &[]).await, 0);
    let two = [batch(2, 10, 1), batch(3, 10, 1)].concat();
    for version in 3..=12 {
        let resp = raw
            .call(version, &produce_request("one-batch", 0, Bytes::from(two.clone()), -1))
            .await;
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 87, "v{version}: INVALID_RECORD");
        if version >= 8 {
            assert!(
                p.error_message
                    .as_deref()
                    .unwrap_or("")
                    .contains("exactly one record batch"),
                "{:?}",
                p.error_message
            );
        }
    }
    assert_eq!(latest_offset(&mut raw, "one-batch").await, 0, "nothing appended");
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = vec![(Some(Bytes::from("k")), Some(Bytes::from("v")), 1)];
    let zstd = sluice::log::batch::encode_records(&records, Compression::Zstd).unwrap();
    for version in 3..=6 {
        let resp = raw
            .call(version, &produce_request("one-batch", 0, zstd.clone(), -1))
            .await;
        assert_eq!(
            resp.responses[0].partition_responses[0].error_code, 76,
            "v{version}: UNSUPPORTED_COMPRESSION_TYPE"
        );
    }
    assert_eq!(latest_offset(&mut raw, "one-batch").await, 0);
    let resp = raw.call(7, &produce_request("one-batch", 0, zstd, -1)).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0, "zstd from v7");
    assert_eq!(latest_offset(&mut raw, "one-batch").await, 1);
}

/// Decodes a response frame read with `Raw::read_frame`, checking its correlation id.
fn decode_as<R: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion>(
    mut body: Bytes,
    version: i16,
    correlation_id: i32,
) -> R {
    use bytes::Buf;
    use kafka_protocol::protocol::Decodable;
    let header = ResponseHeader::decode(&mut body, R::header_version(version)).unwrap();
    assert_eq!(
        header.correlation_id, correlation_id,
        "answers come back in request order"
    );
    let response = R::decode(&mut body, version).unwrap();
    assert_eq!(body.remaining(), 0);
    response
}

#[tokio::test]
async fn pipelined_produces_take_effect_in_order_before_the_next_other_request() {
    // A producer's pipelined requests are read while earlier ones are still written (the
    // appends are queued on the partition's writer). Offsets still follow request order, and a
    // request of another kind sent right behind them, without waiting for their answers, sees
    // everything they wrote, as if the connection's requests ran one at a time (Kafka's order).
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("pipelined");
    assert_eq!(create(&mut raw, &name, 1, &[]).await, 0);
    const REQUESTS: i64 = 40;
    const RECORDS: i64 = 100;
    // 40 requests of 100 records of 4 KiB (16 MB), sent in one write, then ListOffsets and a
    // Fetch of the last batch.
    let records = batch(RECORDS as usize, 4096, 1_000);
    let mut frames = Vec::new();
    for _ in 0..REQUESTS {
        frames.extend_from_slice(&raw.encode(9, &produce_request(&name, 0, records.clone(), 1)));
    }
    let first_produce = raw.last_correlation_id() - REQUESTS as i32 + 1;
    let list = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(topic(&name))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ]),
        ]);
    frames.extend_from_slice(&raw.encode(7, &list));
    let list_id = raw.last_correlation_id();
    let last = (REQUESTS - 1) * RECORDS;
    frames.extend_from_slice(&raw.encode(11, &fetch_request(&name, last, 1 << 20, 1 << 20)));
    let fetch_id = raw.last_correlation_id();
    raw.send_bytes(&frames).await;

    for i in 0..REQUESTS {
        let body = raw.read_frame().await.expect("a produce answer");
        let resp: ProduceResponse = decode_as(body, 9, first_produce + i as i32);
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(p.error_code, 0);
        assert_eq!(
            p.base_offset,
            i * RECORDS,
            "request {i} got its offsets in request order"
        );
    }
    let body = raw.read_frame().await.expect("a ListOffsets answer");
    let resp: ListOffsetsResponse = decode_as(body, 7, list_id);
    assert_eq!(
        resp.topics[0].partitions[0].offset,
        REQUESTS * RECORDS,
        "ListOffsets saw every produce before it"
    );
    let body = raw.read_frame().await.expect("a Fetch answer");
    let resp: FetchResponse = decode_as(body, 11, fetch_id);
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, REQUESTS * RECORDS);
    let mut fetched = p.records.clone().expect("the last batch");
    let batches = RecordBatchDecoder::decode_all(&mut fetched).unwrap();
    assert_eq!(batches[0].records[0].offset, last, "Fetch read the last produce");
}
