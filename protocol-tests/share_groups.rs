//! Share groups (KIP-932) through raw frames: ShareGroupHeartbeat, ShareGroupDescribe,
//! ShareFetch and ShareAcknowledge, with the record states Kafka gives (acquired, released,
//! accepted, rejected, a lock that expires, the delivery limit), share sessions and their
//! errors, and the state kept across a restart.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafka_protocol::messages::share_fetch_request::{AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use uuid::Uuid;

const GROUP_RESOURCE: i8 = 32;

/// Members joining back to back get their assignment at once: without it the second waits for
/// the group's 1 s assignment interval (KIP-1263), which these tests of other mechanics would
/// have to sleep through.
const ASSIGN_AT_ONCE: (&str, &str) = ("group.share.assignment.interval.ms", "0");

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A member id as Kafka's clients make them (`Uuid.randomUuid().toString()`: URL-safe base64).
fn member_id() -> String {
    use std::fmt::Write;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let mut n = 0u32;
        for (i, b) in chunk.iter().enumerate() {
            n |= u32::from(*b) << (16 - 8 * i);
        }
        for i in 0..=chunk.len() {
            let _ = write!(out, "{}", alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// `count` records in one batch, values `prefix-0`...
fn batch(prefix: &str, count: usize) -> Bytes {
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..count)
        .map(|i| (None, Some(Bytes::from(format!("{prefix}-{i}"))), 1_700_000_000_000i64))
        .collect();
    sluice::log::batch::encode_records(&records, Compression::None).unwrap()
}

async fn produce(raw: &mut Raw, name: &str, records: Bytes) {
    let resp = raw.call(9, &produce_request(name, 0, records, -1)).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
}

async fn create(raw: &mut Raw, name: &str, partitions: i32) -> Uuid {
    let resp = raw.call(7, &create_topic_request(name, partitions, 10_000)).await;
    assert_eq!(resp.topics[0].error_code, 0, "{:?}", resp.topics[0].error_message);
    resp.topics[0].topic_id
}

async fn set_group_config(raw: &mut Raw, group: &str, key: &str, value: &str) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(GROUP_RESOURCE)
            .with_resource_name(s(group))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(s(key))
                    .with_config_operation(0)
                    .with_value(Some(s(value))),
            ]),
    ]);
    raw.call(1, &req).await.responses[0].error_code
}

/// Sets each of `configs` on `group`, each accepted.
async fn configure(raw: &mut Raw, group: &str, configs: &[(&str, &str)]) {
    for (key, value) in configs {
        assert_eq!(set_group_config(raw, group, key, value).await, 0, "{key}={value}");
    }
}

fn heartbeat(group: &str, member: &str, epoch: i32, topics: Option<&[&str]>) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_subscribed_topic_names(topics.map(|t| t.iter().map(|n| topic(n)).collect()))
}

/// One partition's acknowledgement: (first, last, types).
type Ack = (i64, i64, Vec<i8>);

fn share_fetch(
    group: &str,
    member: &str,
    epoch: i32,
    topic_id: Uuid,
    acks: Vec<Ack>,
    wait_ms: i32,
) -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(500)
        .with_batch_size(500)
        .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(
            vec![
                FetchPartition::default().with_partition_index(0).with_acknowledgement_batches(
                    acks.into_iter()
                        .map(|(first, last, types)| {
                            AcknowledgementBatch::default()
                                .with_first_offset(first)
                                .with_last_offset(last)
                                .with_acknowledge_types(types)
                        })
                        .collect(),
                ),
            ],
        )])
}

fn share_ack(group: &str, member: &str, epoch: i32, topic_id: Uuid, acks: Vec<Ack>) -> ShareAcknowledgeRequest {
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(s(group))))
        .with_member_id(Some(s(member)))
        .with_share_session_epoch(epoch)
        .with_topics(vec![
            AcknowledgeTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![
                    AcknowledgePartition::default()
                        .with_partition_index(0)
                        .with_acknowledgement_batches(
                            acks.into_iter()
                                .map(|(first, last, types)| {
                                    AckBatch::default()
                                        .with_first_offset(first)
                                        .with_last_offset(last)
                                        .with_acknowledge_types(types)
                                })
                                .collect(),
                        ),
                ]),
        ])
}

/// The acquired ranges of partition 0 as (first, last, delivery count), and the values of the
/// records the answer carries.
fn acquired(resp: &ShareFetchResponse) -> (Vec<(i64, i64, i16)>, Vec<String>) {
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let Some(p) = resp.responses.first().and_then(|t| t.partitions.first()) else {
        return (Vec::new(), Vec::new());
    };
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
    let ranges = p
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    let mut values = Vec::new();
    if let Some(records) = &p.records {
        let mut bytes = records.clone();
        while !bytes.is_empty() {
            for r in kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes)
                .unwrap()
                .records
                .into_iter()
                .filter(|r| !r.control)
            {
                let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                values.push(format!("{}={value}", r.offset));
            }
        }
    }
    (ranges, values)
}

/// A member joins; a share session opens and the group starts at the log end (the default
/// `share.auto.offset.reset`, latest); records produced after that are acquired by one member,
/// another gets nothing until they are released, delivery counts go up with each delivery,
/// accepted and rejected records are done, and the state survives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_acquired_once_released_redelivered_and_kept_across_a_restart() {
    let broker = TestBroker::start(&[("metrics.listen", "127.0.0.1:0"), ASSIGN_AT_ONCE]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "queue", 1).await;
    produce(&mut raw, "queue", batch("before", 3)).await;

    let (a, b) = (member_id(), member_id());
    let joined = raw.call(1, &heartbeat("g", &a, 0, Some(&["queue"]))).await;
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    assert_eq!(joined.member_epoch, 1);
    let assignment = joined.assignment.expect("an assignment on joining");
    assert_eq!(assignment.topic_partitions[0].topic_id, t);
    assert_eq!(assignment.topic_partitions[0].partitions, vec![0]);
    let joined_b = raw.call(1, &heartbeat("g", &b, 0, Some(&["queue"]))).await;
    assert_eq!(joined_b.error_code, 0);
    // One partition, two members: both read it.
    assert_eq!(joined_b.assignment.unwrap().topic_partitions[0].partitions, vec![0]);

    // The first fetch starts the share-partition at the log end: the 3 records before it are
    // not delivered.
    let mut ra = Raw::connect(broker.addr).await;
    let mut rb = Raw::connect(broker.addr).await;
    let first = ra.call(1, &share_fetch("g", &a, 0, t, vec![], 0)).await;
    assert_eq!(acquired(&first).0, vec![]);
    assert!(first.acquisition_lock_timeout_ms == 30_000);
    let first_b = rb.call(1, &share_fetch("g", &b, 0, t, vec![], 0)).await;
    assert_eq!(acquired(&first_b).0, vec![]);

    produce(&mut raw, "queue", batch("x", 5)).await;
    produce(&mut raw, "queue", batch("y", 5)).await;
    // A waiting fetch is answered as the records come.
    let got = ra.call(1, &share_fetch("g", &a, 1, t, vec![], 5_000)).await;
    let (ranges, values) = acquired(&got);
    assert_eq!(ranges, vec![(3, 12, 1)]);
    assert_eq!(values.len(), 10);
    assert_eq!(values[0], "3=x-0");
    assert_eq!(values[9], "12=y-4");
    // b finds nothing free: the wait ends at its deadline, empty.
    let started = Instant::now();
    let none = rb.call(1, &share_fetch("g", &b, 1, t, vec![], 300)).await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(acquired(&none).0, vec![]);

    // a accepts 3..=7 and releases 8..=12 (one type per offset for the first five).
    let acks = vec![(3, 7, vec![1, 1, 1, 1, 1]), (8, 12, vec![2])];
    let released = ra.call(1, &share_fetch("g", &a, 2, t, acks, 0)).await;
    let p = &released.responses[0].partitions[0];
    assert_eq!(p.acknowledge_error_code, 0);
    // a's own fetch in the same request may take the released records back: it acknowledges
    // before it fetches, as Kafka does.
    let (again, _) = acquired(&released);
    assert_eq!(again, vec![(8, 12, 2)]);
    // a releases them once more; b gets them at their third delivery.
    let r = ra.call(1, &share_ack("g", &a, 3, t, vec![(8, 12, vec![2])])).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let got_b = rb.call(1, &share_fetch("g", &b, 2, t, vec![], 1_000)).await;
    let (ranges_b, values_b) = acquired(&got_b);
    assert_eq!(ranges_b, vec![(8, 12, 3)]);
    assert_eq!(values_b.first().map(String::as_str), Some("8=y-0"));
    // a may not acknowledge what b holds.
    let stolen = ra.call(1, &share_ack("g", &a, 4, t, vec![(8, 8, vec![1])])).await;
    assert_eq!(
        stolen.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );
    // b rejects 8..=9 and accepts the rest: every record is done.
    let done = rb
        .call(1, &share_ack("g", &b, 3, t, vec![(8, 9, vec![3]), (10, 12, vec![1])]))
        .await;
    assert_eq!(done.responses[0].partitions[0].error_code, 0);
    // Kafka's RecordAcknowledgementsPerSec by type, and the in-flight window (empty: every
    // record is done).
    let metrics = broker.handle.metrics_addr.expect("metrics.listen bound");
    let scraped = scrape::samples(&scrape::get(metrics, "/metrics", "text/plain").1);
    for (kind, count) in [("Accept", 8.0), ("Release", 10.0), ("Reject", 2.0)] {
        let series = format!("kafka_server_sharegroupmetrics_recordacknowledgements_total{{acktype=\"{kind}\"}}");
        assert_eq!(scrape::sample(&scraped, &series), count, "{series}");
    }
    let window = r#"kafka_server_sharepartitionmetrics_inflightmessagecount{group="g",topic="queue",partition="0"}"#;
    assert_eq!(scrape::sample(&scraped, window), 0.0);

    // Across a restart: the group's start offset is 13, nothing is delivered again.
    drop((ra, rb, raw));
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let c = member_id();
    assert_eq!(
        raw.call(1, &heartbeat("g", &c, 0, Some(&["queue"]))).await.error_code,
        0
    );
    let after = raw.call(1, &share_fetch("g", &c, 0, t, vec![], 0)).await;
    assert_eq!(acquired(&after).0, vec![]);
    produce(&mut raw, "queue", batch("z", 1)).await;
    let next = raw.call(1, &share_fetch("g", &c, 1, t, vec![], 2_000)).await;
    assert_eq!(acquired(&next), (vec![(13, 13, 1)], vec!["13=z-0".to_string()]));
}

/// `share.auto.offset.reset=earliest` reads from the log start; a lock that expires makes its
/// records available again, and a record delivered `share.delivery.count.limit` times (the
/// group's, over the broker's `group.share.delivery.count.limit`) is archived; a closed
/// connection releases its member's records at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_expire_the_delivery_limit_archives_and_a_closed_connection_releases() {
    let broker = TestBroker::start(&[
        ("group.share.delivery.count.limit", "3"),
        ("group.share.min.record.lock.duration.ms", "100"),
        ("metrics.listen", "127.0.0.1:0"),
    ])
    .await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q2", 1).await;
    produce(&mut raw, "q2", batch("r", 4)).await;
    // The group's own limit (KIP-1240) overrides the broker's 3.
    assert_eq!(
        set_group_config(&mut raw, "g2", "share.delivery.count.limit", "2").await,
        0
    );
    assert_eq!(
        set_group_config(&mut raw, "g2", "share.auto.offset.reset", "earliest").await,
        0
    );
    assert_eq!(
        set_group_config(&mut raw, "g2", "share.record.lock.duration.ms", "300").await,
        0
    );
    assert_eq!(
        set_group_config(&mut raw, "g2", "share.auto.offset.reset", "sometimes").await,
        ResponseError::InvalidConfig.code()
    );
    let a = member_id();
    assert_eq!(raw.call(1, &heartbeat("g2", &a, 0, Some(&["q2"]))).await.error_code, 0);
    let mut ra = Raw::connect(broker.addr).await;
    let got = ra.call(1, &share_fetch("g2", &a, 0, t, vec![], 1_000)).await;
    assert_eq!(got.acquisition_lock_timeout_ms, 300);
    assert_eq!(acquired(&got).0, vec![(0, 3, 1)]);
    // The lock expires: a waiting fetch wakes for it and takes the records again.
    let again = ra.call(1, &share_fetch("g2", &a, 1, t, vec![], 3_000)).await;
    assert_eq!(acquired(&again).0, vec![(0, 3, 2)]);
    // At the limit (2 deliveries), an expired lock archives the records: nothing is left.
    let none = ra.call(1, &share_fetch("g2", &a, 2, t, vec![], 800)).await;
    assert_eq!(acquired(&none).0, vec![]);

    // A closed connection: what its member held is free at once, long before the lock ends.
    assert_eq!(
        set_group_config(&mut raw, "g2", "share.record.lock.duration.ms", "60000").await,
        0
    );
    // Above Kafka's default group.share.max.record.lock.duration.ms (60 s): refused.
    assert_eq!(
        set_group_config(&mut raw, "g2", "share.record.lock.duration.ms", "60001").await,
        ResponseError::InvalidConfig.code()
    );
    produce(&mut raw, "q2", batch("s", 2)).await;
    let b = member_id();
    assert_eq!(raw.call(1, &heartbeat("g2", &b, 0, Some(&["q2"]))).await.error_code, 0);
    let got = ra.call(1, &share_fetch("g2", &a, 3, t, vec![], 1_000)).await;
    assert_eq!(acquired(&got).0, vec![(4, 5, 1)]);
    drop(ra);
    let mut rb = Raw::connect(broker.addr).await;
    let started = Instant::now();
    let got_b = rb.call(1, &share_fetch("g2", &b, 0, t, vec![], 5_000)).await;
    assert_eq!(acquired(&got_b).0, vec![(4, 5, 2)]);
    assert!(started.elapsed() < Duration::from_secs(4));
    // Kafka's SharePartitionMetrics: 4 records whose locks expired twice (the closed
    // connection's release is not a lock timeout), and b's 2 records in flight.
    let metrics = broker.handle.metrics_addr.expect("metrics.listen bound");
    let scraped = scrape::samples(&scrape::get(metrics, "/metrics", "text/plain").1);
    let labels = r#"{group="g2",topic="q2",partition="0"}"#;
    assert_eq!(
        scrape::sample(
            &scraped,
            &format!("kafka_server_sharepartitionmetrics_acquisitionlocktimeout_total{labels}")
        ),
        8.0
    );
    assert_eq!(
        scrape::sample(
            &scraped,
            &format!("kafka_server_sharepartitionmetrics_inflightmessagecount{labels}")
        ),
        2.0
    );
}

/// `share.isolation.level=read_committed` (Kafka's `filterAbortedTransactionalAcquiredRecords`):
/// the group never gets an aborted transaction's records, and reads up to the last stable
/// offset, so an open transaction's records come once it commits. A read_uncommitted group
/// reads all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_groups_skip_aborted_transactions_and_wait_for_open_ones() {
    use rdkafka::producer::{FutureRecord, Producer};
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "txq", 1).await;
    for group in ["rc", "ru"] {
        assert_eq!(
            set_group_config(&mut raw, group, "share.auto.offset.reset", "earliest").await,
            0
        );
    }
    assert_eq!(
        set_group_config(&mut raw, "rc", "share.isolation.level", "serializable").await,
        ResponseError::InvalidConfig.code()
    );
    assert_eq!(
        set_group_config(&mut raw, "rc", "share.isolation.level", "read_committed").await,
        0
    );

    // Offsets: a-0..2 at 0..2 (commit marker 3), b-0..2 at 4..6 (abort marker 7), plain-0 at 8,
    // then c-0..2 at 9..11 in a transaction left open.
    let producer = producer(
        &broker.bootstrap(),
        &[
            ("transactional.id", "share-rc"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
        ],
    );
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    let send_all = async |prefix: &str| {
        for i in 0..3 {
            let value = format!("{prefix}-{i}");
            producer
                .send(FutureRecord::<(), _>::to("txq").payload(&value).partition(0), timeout)
                .await
                .unwrap();
        }
    };
    producer.begin_transaction().unwrap();
    send_all("a").await;
    producer.commit_transaction(timeout).unwrap();
    producer.begin_transaction().unwrap();
    send_all("b").await;
    producer.abort_transaction(timeout).unwrap();
    produce(&mut raw, "txq", batch("plain", 1)).await;
    producer.begin_transaction().unwrap();
    send_all("c").await;

    let (m, u) = (member_id(), member_id());
    assert_eq!(raw.call(1, &heartbeat("rc", &m, 0, Some(&["txq"]))).await.error_code, 0);
    assert_eq!(raw.call(1, &heartbeat("ru", &u, 0, Some(&["txq"]))).await.error_code, 0);
    let mut rm = Raw::connect(broker.addr).await;
    let mut ru = Raw::connect(broker.addr).await;

    // read_committed: the committed transaction and its marker, the aborted one never (its
    // marker is acquired, for the client to acknowledge as a gap), the plain record, and
    // nothing past the open transaction's first offset.
    let got = rm.call(1, &share_fetch("rc", &m, 0, t, vec![], 2_000)).await;
    let (ranges, values) = acquired(&got);
    assert_eq!(ranges, vec![(0, 3, 1), (7, 8, 1)]);
    assert_eq!(values, ["0=a-0", "1=a-1", "2=a-2", "8=plain-0"]);
    let acks = vec![(0, 2, vec![1]), (3, 3, vec![0]), (7, 7, vec![0]), (8, 8, vec![1])];
    let waited = rm.call(1, &share_fetch("rc", &m, 1, t, acks, 300)).await;
    assert_eq!(waited.responses[0].partitions[0].acknowledge_error_code, 0);
    assert_eq!(acquired(&waited).0, vec![]);

    // read_uncommitted (the default): everything written, the open transaction too.
    let all = ru.call(1, &share_fetch("ru", &u, 0, t, vec![], 2_000)).await;
    let (ranges, values) = acquired(&all);
    assert_eq!(ranges, vec![(0, 11, 1)]);
    assert_eq!(values.len(), 10);
    assert!(values.contains(&"5=b-1".to_string()) && values.contains(&"11=c-2".to_string()));

    // The commit moves the last stable offset: a waiting read_committed fetch gets the records
    // and the marker.
    let waiting = tokio::spawn(async move {
        let got = rm.call(1, &share_fetch("rc", &m, 2, t, vec![], 10_000)).await;
        (rm, m, got)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    producer.commit_transaction(timeout).unwrap();
    let (mut rm, m, got) = waiting.await.unwrap();
    let (ranges, values) = acquired(&got);
    assert_eq!(ranges, vec![(9, 12, 1)]);
    assert_eq!(values, ["9=c-0", "10=c-1", "11=c-2"]);
    // All done: the start offset passes the aborted transaction, archived, never delivered.
    let acks = vec![(9, 11, vec![1]), (12, 12, vec![0])];
    let last = rm.call(1, &share_fetch("rc", &m, 3, t, acks, 300)).await;
    assert_eq!(last.responses[0].partitions[0].acknowledge_error_code, 0);
    assert_eq!(acquired(&last).0, vec![]);
    let described = raw.call(0, &describe_offsets("rc", None)).await;
    assert_eq!(offsets_of(&described).unwrap(), vec![("txq".to_string(), 0, 13, 0)]);
}

/// Share sessions and malformed requests get Kafka's errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_malformed_requests_get_kafkas_errors() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q3", 1).await;
    let a = member_id();
    let code = |r: &ShareFetchResponse| r.error_code;
    // A group that is not a share group: GROUP_ID_NOT_FOUND for its partitions.
    let r = raw.call(1, &share_fetch("g3", &a, 0, t, vec![], 0)).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::GroupIdNotFound.code()
    );
    let r = raw
        .call(1, &share_fetch("g3", &a, -1, t, vec![], 0).with_topics(vec![]))
        .await;
    assert_eq!(code(&r), 0);
    assert_eq!(raw.call(1, &heartbeat("g3", &a, 0, Some(&["q3"]))).await.error_code, 0);
    // No session yet: SHARE_SESSION_NOT_FOUND for epochs other than 0.
    let r = raw.call(1, &share_fetch("g3", &a, 1, t, vec![], 0)).await;
    assert_eq!(code(&r), ResponseError::ShareSessionNotFound.code());
    let r = raw.call(1, &share_ack("g3", &a, 1, t, vec![(0, 0, vec![1])])).await;
    assert_eq!(r.error_code, ResponseError::ShareSessionNotFound.code());
    // Acknowledgements in the opening request: INVALID_REQUEST.
    let r = raw
        .call(1, &share_fetch("g3", &a, 0, t, vec![(0, 0, vec![1])], 0))
        .await;
    assert_eq!(code(&r), ResponseError::InvalidRequest.code());
    // ShareAcknowledge cannot open a session.
    let r = raw.call(1, &share_ack("g3", &a, 0, t, vec![(0, 0, vec![1])])).await;
    assert_eq!(r.error_code, ResponseError::InvalidShareSessionEpoch.code());
    // A member id that is not a Kafka Uuid.
    let r = raw.call(1, &share_fetch("g3", "not-a-uuid", 0, t, vec![], 0)).await;
    assert_eq!(code(&r), ResponseError::InvalidRequest.code());
    // Open, then a wrong epoch.
    let r = raw.call(1, &share_fetch("g3", &a, 0, t, vec![], 0)).await;
    assert_eq!(code(&r), 0);
    let r = raw.call(1, &share_fetch("g3", &a, 5, t, vec![], 0)).await;
    assert_eq!(code(&r), ResponseError::InvalidShareSessionEpoch.code());
    // Acknowledging offsets never acquired: INVALID_RECORD_STATE for that partition; a
    // malformed batch: INVALID_REQUEST.
    let r = raw
        .call(1, &share_fetch("g3", &a, 1, t, vec![(0, 0, vec![1])], 0))
        .await;
    assert_eq!(code(&r), 0);
    assert_eq!(
        r.responses[0].partitions[0].acknowledge_error_code,
        ResponseError::InvalidRecordState.code()
    );
    let r = raw
        .call(
            1,
            &share_fetch("g3", &a, 2, t, vec![(5, 0, vec![1]), (0, i64::MAX, vec![1])], 0),
        )
        .await;
    assert_eq!(
        r.responses[0].partitions[0].acknowledge_error_code,
        ResponseError::InvalidRequest.code()
    );
    // An unknown topic id, in a session of its own.
    let b = member_id();
    let r = raw.call(1, &share_fetch("g3", &b, 0, Uuid::new_v4(), vec![], 0)).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::UnknownTopicId.code()
    );
    // The final request closes the session; the next non-zero epoch finds none.
    let closing = share_fetch("g3", &a, -1, t, vec![], 0).with_topics(vec![]);
    let r = raw.call(1, &closing).await;
    assert_eq!(code(&r), 0);
    let r = raw.call(1, &share_fetch("g3", &a, 3, t, vec![], 0)).await;
    assert_eq!(code(&r), ResponseError::ShareSessionNotFound.code());
    // Forgetting a partition takes it out of the session: nothing more is answered for it.
    let r = raw.call(1, &share_fetch("g3", &a, 0, t, vec![], 0)).await;
    assert_eq!(code(&r), 0);
    let forget = share_fetch("g3", &a, 1, t, vec![], 0)
        .with_topics(vec![])
        .with_forgotten_topics_data(vec![
            ForgottenTopic::default().with_topic_id(t).with_partitions(vec![0]),
        ]);
    let r = raw.call(1, &forget).await;
    assert_eq!((code(&r), r.responses.len()), (0, 0));
}

/// Kafka 4.2's ShareFetch and ShareAcknowledge v2 and DescribeShareGroupOffsets v1: the
/// record-limit acquire mode (KIP-1206) takes no more than MaxRecords, splitting a batch, where
/// the batch-optimized one keeps batches whole; RENEW (KIP-1222) keeps records acquired, their
/// locks running again; a renew-only ShareFetch fetches nothing; malformed v2 requests and
/// RENEW at v1 get INVALID_REQUEST; `share.renew.acknowledge.enable=false` refuses renewals;
/// the lag (KIP-1226) leaves out what was acknowledged past the start offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_modes_lock_renewal_and_the_lag() {
    let broker = TestBroker::start(&[("group.share.min.record.lock.duration.ms", "100")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q5", 1).await;
    configure(
        &mut raw,
        "g5",
        &[
            ("share.auto.offset.reset", "earliest"),
            ("share.record.lock.duration.ms", "3000"),
        ],
    )
    .await;
    produce(&mut raw, "q5", batch("m", 10)).await;
    let (a, b) = (member_id(), member_id());
    for m in [&a, &b] {
        assert_eq!(raw.call(1, &heartbeat("g5", m, 0, Some(&["q5"]))).await.error_code, 0);
    }
    let mut ra = Raw::connect(broker.addr).await;
    let mut rb = Raw::connect(broker.addr).await;
    let record_limit = |epoch: i32, max: i32| {
        share_fetch("g5", &a, epoch, t, vec![], 2_000)
            .with_max_records(max)
            .with_share_acquire_mode(1)
    };
    // Record-limit: 3 of the 10-record batch. The whole batch comes back; only 3 are acquired.
    let got = ra.call(2, &record_limit(0, 3)).await;
    assert_eq!(got.acquisition_lock_timeout_ms, 3_000);
    let (ranges, values) = acquired(&got);
    assert_eq!(ranges, vec![(0, 2, 1)]);
    assert_eq!(values.len(), 10);
    // Batch-optimized (v2's mode 0, and v1): MaxRecords 1 takes the rest of the batch.
    let got = ra
        .call(2, &share_fetch("g5", &a, 1, t, vec![], 0).with_max_records(1))
        .await;
    assert_eq!(acquired(&got).0, vec![(3, 9, 1)]);
    let locked_at = Instant::now();

    // Malformed v2 requests: a renew-only ShareFetch that asks for records, an unknown mode.
    let r = ra
        .call(2, &share_fetch("g5", &a, 2, t, vec![], 0).with_is_renew_ack(true))
        .await;
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    let r = ra
        .call(2, &share_fetch("g5", &a, 2, t, vec![], 0).with_share_acquire_mode(7))
        .await;
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    // RENEW at v1: INVALID_REQUEST for the partition, nothing renewed.
    let r = ra.call(1, &share_ack("g5", &a, 2, t, vec![(0, 2, vec![4])])).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRequest.code()
    );
    let r = ra.call(1, &share_fetch("g5", &a, 3, t, vec![(0, 2, vec![4])], 0)).await;
    assert_eq!(
        r.responses[0].partitions[0].acknowledge_error_code,
        ResponseError::InvalidRequest.code()
    );

    // Halfway through the lock, a renew-only ShareFetch renews 0..=2: answered at once with
    // nothing acquired. A ShareAcknowledge v2 renews 3..=4 and says how long the lock is.
    tokio::time::sleep(Duration::from_millis(1_500).saturating_sub(locked_at.elapsed())).await;
    let renew_only = share_fetch("g5", &a, 4, t, vec![(0, 2, vec![4])], 0)
        .with_is_renew_ack(true)
        .with_min_bytes(0)
        .with_max_bytes(0)
        .with_max_records(0);
    let r = ra.call(2, &renew_only).await;
    assert_eq!(r.error_code, 0);
    let p = &r.responses[0].partitions[0];
    assert_eq!((p.acknowledge_error_code, p.acquired_records.len()), (0, 0));
    let r = ra
        .call(
            2,
            &share_ack("g5", &a, 5, t, vec![(3, 4, vec![4])]).with_is_renew_ack(true),
        )
        .await;
    assert_eq!((r.error_code, r.responses[0].partitions[0].error_code), (0, 0));
    assert_eq!(r.acquisition_lock_timeout_ms, 3_000);
    // Past the first lock, before the renewed ones end: b gets 5..=9 only, at their second
    // delivery. a still holds 0..=4 and accepts them.
    tokio::time::sleep(Duration::from_millis(3_300).saturating_sub(locked_at.elapsed())).await;
    let got = rb.call(2, &share_fetch("g5", &b, 0, t, vec![], 2_000)).await;
    assert_eq!(acquired(&got).0, vec![(5, 9, 2)]);
    assert!(
        locked_at.elapsed() < Duration::from_millis(4_400),
        "too slow to tell renewed locks"
    );
    // b may not renew what a holds; a accepts 0..=1 and renews 2..=4 in one batch, per offset.
    let r = rb.call(2, &share_ack("g5", &b, 1, t, vec![(0, 1, vec![4])])).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );
    let r = ra
        .call(2, &share_ack("g5", &a, 6, t, vec![(0, 4, vec![1, 1, 4, 4, 4])]))
        .await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    // b accepts 5..=9: the lag is 10 - 2 (the start offset) - 5 (accepted past it) = 3.
    let r = rb.call(2, &share_ack("g5", &b, 2, t, vec![(5, 9, vec![1])])).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let d = raw.call(1, &describe_offsets("g5", Some(vec![("q5", vec![0])]))).await;
    let p = &d.groups[0].topics[0].partitions[0];
    assert_eq!((p.start_offset, p.lag, p.error_code), (2, 3, 0));
    // v0 has no lag; a partition the group never read has none either.
    let d = raw.call(0, &describe_offsets("g5", Some(vec![("q5", vec![0])]))).await;
    assert_eq!(d.groups[0].topics[0].partitions[0].lag, -1);
    create(&mut raw, "q6", 1).await;
    let d = raw.call(1, &describe_offsets("g5", Some(vec![("q6", vec![0])]))).await;
    let p = &d.groups[0].topics[0].partitions[0];
    assert_eq!((p.start_offset, p.lag), (-1, -1));

    // A group that turned renewals off: INVALID_RECORD_STATE, the records still a's.
    assert_eq!(
        set_group_config(&mut raw, "g5", "share.renew.acknowledge.enable", "false").await,
        0
    );
    let r = ra
        .call(
            2,
            &share_ack("g5", &a, 7, t, vec![(2, 4, vec![4])]).with_is_renew_ack(true),
        )
        .await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::InvalidRecordState.code()
    );
    let r = ra.call(2, &share_ack("g5", &a, 8, t, vec![(2, 4, vec![1])])).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let d = raw.call(1, &describe_offsets("g5", None)).await;
    let p = &d.groups[0].topics[0].partitions[0];
    assert_eq!((p.start_offset, p.lag), (10, 0));
    assert_eq!(
        set_group_config(&mut raw, "g5", "share.renew.acknowledge.enable", "maybe").await,
        ResponseError::InvalidConfig.code()
    );
}

/// A group's own in-flight window (`share.partition.max.record.locks`, Kafka 4.3, KIP-1240),
/// within the broker's `group.share.min/max.partition.max.record.locks`: it stops acquisition
/// mid-batch; raised, the window takes more at once; lowered below what is in flight, nothing
/// is taken back and nothing new enters until the window drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_record_lock_limit_bounds_its_window_live() {
    let broker = TestBroker::start(&[("group.share.min.partition.max.record.locks", "2")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q7", 1).await;
    configure(
        &mut raw,
        "g7",
        &[
            ("share.auto.offset.reset", "earliest"),
            ("share.partition.max.record.locks", "3"),
        ],
    )
    .await;
    assert_eq!(
        set_group_config(&mut raw, "g7", "share.partition.max.record.locks", "1").await,
        ResponseError::InvalidConfig.code()
    );
    produce(&mut raw, "q7", batch("w", 10)).await;
    let a = member_id();
    assert_eq!(raw.call(1, &heartbeat("g7", &a, 0, Some(&["q7"]))).await.error_code, 0);
    let mut ra = Raw::connect(broker.addr).await;
    let got = ra.call(1, &share_fetch("g7", &a, 0, t, vec![], 2_000)).await;
    assert_eq!(acquired(&got).0, vec![(0, 2, 1)]);
    // Raised to 5: two more.
    assert_eq!(
        set_group_config(&mut raw, "g7", "share.partition.max.record.locks", "5").await,
        0
    );
    let got = ra.call(1, &share_fetch("g7", &a, 1, t, vec![], 0)).await;
    assert_eq!(acquired(&got).0, vec![(3, 4, 1)]);
    // Lowered to 2 with 5 in flight: nothing new, even after 3 are accepted (2 left).
    assert_eq!(
        set_group_config(&mut raw, "g7", "share.partition.max.record.locks", "2").await,
        0
    );
    let got = ra.call(1, &share_fetch("g7", &a, 2, t, vec![(0, 2, vec![1])], 0)).await;
    assert_eq!(acquired(&got).0, vec![]);
    // Drained to 1: one more enters.
    let got = ra.call(1, &share_fetch("g7", &a, 3, t, vec![(3, 3, vec![1])], 0)).await;
    assert_eq!(acquired(&got).0, vec![(5, 5, 1)]);
}

/// Heartbeat errors, ShareGroupDescribe, ListGroups, a group of another type, and the feature
/// turned off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_describe_and_the_feature_gate() {
    let broker = TestBroker::start(&[ASSIGN_AT_ONCE]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q4", 3).await;
    let (a, b) = (member_id(), member_id());
    let hb = raw.call(1, &heartbeat("g4", &a, 0, Some(&["q4"]))).await;
    assert_eq!(hb.assignment.unwrap().topic_partitions[0].partitions, vec![0, 1, 2]);
    let hb_b = raw.call(1, &heartbeat("g4", &b, 0, Some(&["q4"]))).await;
    assert_eq!(hb_b.member_epoch, 2);
    let a_now = raw.call(1, &heartbeat("g4", &a, 1, None)).await;
    assert_eq!(a_now.member_epoch, 2);
    let mine = a_now.assignment.unwrap().topic_partitions[0].partitions.len();
    let theirs = hb_b.assignment.unwrap().topic_partitions[0].partitions.len();
    assert_eq!(mine + theirs, 3);
    // Malformed, unknown, fenced.
    let r = raw.call(1, &heartbeat("g4", &member_id(), 0, None)).await;
    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
    assert_eq!(
        r.error_message.as_deref(),
        Some("SubscribedTopicNames must be set in first request.")
    );
    let r = raw.call(1, &heartbeat("g4", &member_id(), 3, None)).await;
    assert_eq!(r.error_code, ResponseError::UnknownMemberId.code());
    let r = raw.call(1, &heartbeat("g4", &a, 7, None)).await;
    assert_eq!(r.error_code, ResponseError::FencedMemberEpoch.code());
    let r = raw.call(1, &heartbeat("nope", &a, 1, None)).await;
    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());

    // Described as Kafka does.
    let d = raw
        .call(
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("g4")), GroupId(s("absent"))]),
        )
        .await;
    let g = &d.groups[0];
    assert_eq!(g.error_code, 0);
    assert_eq!(
        (g.group_state.as_str(), g.group_epoch, g.assignor_name.as_str()),
        ("Stable", 2, "simple")
    );
    assert_eq!(g.members.len(), 2);
    let assigned: usize = g
        .members
        .iter()
        .map(|m| {
            m.assignment
                .topic_partitions
                .iter()
                .map(|tp| tp.partitions.len())
                .sum::<usize>()
        })
        .sum();
    assert_eq!(assigned, 3);
    assert_eq!(g.members[0].assignment.topic_partitions[0].topic_name.as_str(), "q4");
    assert_eq!(g.members[0].assignment.topic_partitions[0].topic_id, t);
    assert_eq!(d.groups[1].error_code, ResponseError::GroupIdNotFound.code());
    // ListGroups v5 shows the type.
    let l = raw
        .call(5, &ListGroupsRequest::default().with_types_filter(vec![s("share")]))
        .await;
    let listed: Vec<(String, String)> = l
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.group_type.to_string()))
        .collect();
    assert_eq!(listed, vec![("g4".to_string(), "share".to_string())]);
    // A share group cannot be joined as a classic group, nor the reverse.
    let left = raw.call(1, &heartbeat("g4", &a, -1, None)).await;
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    // The feature off: every share API answers UNSUPPORTED_VERSION.
    let off = UpdateFeaturesRequest::default().with_feature_updates(vec![
        kafka_protocol::messages::update_features_request::FeatureUpdateKey::default()
            .with_feature(s("share.version"))
            .with_max_version_level(0)
            .with_upgrade_type(2),
    ]);
    let r = raw.call(1, &off).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let r = raw.call(1, &heartbeat("g4", &b, 2, None)).await;
    assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());
    let r = raw.call(1, &share_fetch("g4", &b, 0, t, vec![], 0)).await;
    assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());
    let r = raw.call(1, &share_ack("g4", &b, 1, t, vec![])).await;
    assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());
    let d = raw
        .call(
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("g4"))]),
        )
        .await;
    assert_eq!(d.groups[0].error_code, ResponseError::UnsupportedVersion.code());
}

use kafka_protocol::error::ResponseError;

/// Calls `addr` until `ok` holds of the answer (a cluster settles after starts and kills).
/// One ShareFetch of `member`'s session after a kill: the answer once neither the request nor
/// the partition has an error, else None after a pause, with the session to open again (the
/// coordinator or the leader has not settled yet).
async fn settled_fetch(
    at: &mut Raw,
    group: &str,
    member: &str,
    epoch: &mut i32,
    t: Uuid,
) -> Option<ShareFetchResponse> {
    let resp = at.call(1, &share_fetch(group, member, *epoch, t, vec![], 1_000)).await;
    let p = resp.responses.first().and_then(|t| t.partitions.first());
    if resp.error_code != 0 || p.is_some_and(|p| p.error_code != 0) {
        *epoch = 0;
        tokio::time::sleep(Duration::from_millis(200)).await;
        return None;
    }
    *epoch += 1;
    Some(resp)
}

async fn call_until<R, F>(addr: std::net::SocketAddr, version: i16, request: &R, what: &str, ok: F) -> R::Response
where
    R: kafka_protocol::protocol::Request + kafka_protocol::protocol::Encodable + Clone,
    R::Response: std::fmt::Debug,
    F: Fn(&R::Response) -> bool,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = common::cluster::try_call(addr, version, request, Duration::from_secs(10)).await;
        if let Ok(resp) = &answer
            && ok(resp)
        {
            return answer.unwrap();
        }
        assert!(Instant::now() < deadline, "{what}: {answer:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Three nodes: the partition's leader keeps the share-partition's state with the group's
/// coordinator on another node (WriteShareGroupState between brokers); when the leader is
/// killed, the new leader reads that state and delivers only what was not acknowledged, one
/// delivery later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_lives_with_the_coordinator_and_survives_the_leaders_kill() {
    use common::cluster::{Cluster, create as create_in, produce_all, wait_view};
    let mut cluster = Cluster::start(3).await;
    create_in(&cluster, "sq", 1, 3, &[]).await;
    let view = wait_view(&cluster, "sq", 0, "led with 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3
    })
    .await;
    let leader = view.leader;
    let md = cluster.metadata(leader, &["sq"]).await.unwrap();
    let t = md.topics[0].topic_id;
    // A group whose coordinator is not the partition's leader.
    let mut chosen = None;
    for i in 0..16 {
        let group = format!("sg-{i}");
        let find = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s(&group)]);
        let resp = call_until(cluster.addr(leader), 4, &find, "FindCoordinator", |r| {
            r.coordinators.first().is_some_and(|c| c.error_code == 0)
        })
        .await;
        let coordinator = resp.coordinators[0].node_id.0;
        if coordinator != leader {
            chosen = Some((group, coordinator));
            break;
        }
    }
    let (group, coordinator) = chosen.expect("a group coordinated away from the leader");
    let configure = {
        use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(GROUP_RESOURCE)
                .with_resource_name(s(&group))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(s("share.auto.offset.reset"))
                        .with_config_operation(0)
                        .with_value(Some(s("earliest"))),
                ]),
        ])
    };
    call_until(cluster.addr(coordinator), 1, &configure, "group config", |r| {
        r.responses[0].error_code == 0
    })
    .await;
    let a = member_id();
    let join = heartbeat(&group, &a, 0, Some(&["sq"]));
    call_until(cluster.addr(coordinator), 1, &join, "join", |r| r.error_code == 0).await;
    produce_all(&cluster, "sq", 0, 5).await;

    let mut at_leader = Raw::connect(cluster.addr(leader)).await;
    let got = at_leader.call(1, &share_fetch(&group, &a, 0, t, vec![], 5_000)).await;
    assert_eq!(acquired(&got).0, vec![(0, 4, 1)]);
    let acked = at_leader
        .call(1, &share_ack(&group, &a, 1, t, vec![(0, 2, vec![1]), (3, 4, vec![2])]))
        .await;
    assert_eq!(acked.responses[0].partitions[0].error_code, 0);
    // The coordinator holds the state: start offset 3.
    let read = ReadShareGroupStateRequest::default()
        .with_group_id(s(&group))
        .with_topics(vec![
            kafka_protocol::messages::read_share_group_state_request::ReadStateData::default()
                .with_topic_id(t)
                .with_partitions(vec![
                    kafka_protocol::messages::read_share_group_state_request::PartitionData::default()
                        .with_partition(0)
                        .with_leader_epoch(-1),
                ]),
        ]);
    let state = call_until(cluster.addr(coordinator), 0, &read, "ReadShareGroupState", |r| {
        r.results[0].partitions[0].error_code == 0
    })
    .await;
    assert_eq!(state.results[0].partitions[0].start_offset, 3);
    // The lag at the coordinator (v1, KIP-1226), from the high watermark it asks the leader on
    // another node: 5 - 3, nothing past the start offset acknowledged yet.
    let described = call_until(
        cluster.addr(coordinator),
        1,
        &describe_offsets(&group, Some(vec![("sq", vec![0])])),
        "DescribeShareGroupOffsets",
        |r| r.groups[0].error_code == 0,
    )
    .await;
    let p = &described.groups[0].topics[0].partitions[0];
    assert_eq!((p.start_offset, p.lag, p.error_code), (3, 2, 0));
    // Not advertised: ApiVersions does not list it.
    let versions = at_leader.call(2, &ApiVersionsRequest::default()).await;
    assert!(versions.api_keys.iter().all(|k| k.api_key != 84 && k.api_key != 85));
    assert!(versions.api_keys.iter().any(|k| k.api_key == 78));

    drop(at_leader);
    cluster.kill(leader);
    let next = wait_view(&cluster, "sq", 0, "led by another node", |v| {
        v.leader > 0 && v.leader != leader
    })
    .await;
    // One session at the new leader. Its high watermark reaches 5 once the killed node left
    // the ISR; until then offset 4 is not readable there.
    let mut at = Raw::connect(cluster.addr(next.leader)).await;
    let mut epoch = 0;
    let mut offsets: Vec<(i64, i16)> = Vec::new();
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while offsets.len() < 2 {
        assert!(Instant::now() < deadline, "the new leader delivered {offsets:?}");
        let Some(resp) = settled_fetch(&mut at, &group, &a, &mut epoch, t).await else {
            continue;
        };
        let (ranges, got) = acquired(&resp);
        offsets.extend(
            ranges
                .iter()
                .flat_map(|&(first, last, count)| (first..=last).map(move |o| (o, count))),
        );
        values.extend(got);
    }
    // 3 and 4 again, each at its second delivery; nothing acknowledged comes back.
    assert_eq!(offsets, vec![(3, 2), (4, 2)]);
    assert_eq!(values, vec!["3=v3".to_string(), "4=v4".to_string()]);
    let r = at
        .call(1, &share_ack(&group, &a, epoch, t, vec![(3, 4, vec![1])]))
        .await;
    assert_eq!((r.error_code, r.responses[0].partitions[0].error_code), (0, 0));
    drop(at);

    // The killed node back, then the group's coordinator killed: another node loads the group
    // and its share-partition states from __consumer_offsets. The member, unknown there, joins
    // again; nothing acknowledged is delivered again, and a new record is.
    cluster.restart(leader).await;
    if coordinator == next.leader {
        // Keep a leader for the partition while the coordinator is down.
        wait_view(&cluster, "sq", 0, "3 in sync", |v| v.isr.len() == 3).await;
    }
    cluster.kill(coordinator);
    let find = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s(&group)]);
    let alive = cluster.running()[0];
    let found = call_until(cluster.addr(alive), 4, &find, "a new coordinator", |r| {
        r.coordinators
            .first()
            .is_some_and(|c| c.error_code == 0 && c.node_id.0 != coordinator)
    })
    .await;
    let new_coordinator = found.coordinators[0].node_id.0;
    let stale = heartbeat(&group, &a, 1, None);
    let r = call_until(cluster.addr(new_coordinator), 1, &stale, "the stale heartbeat", |r| {
        r.error_code == ResponseError::UnknownMemberId.code()
    })
    .await;
    assert_eq!(r.member_epoch, -1);
    call_until(cluster.addr(new_coordinator), 1, &join, "joining again", |r| {
        r.error_code == 0
    })
    .await;
    produce_all(&cluster, "sq", 5, 1).await;
    let view = wait_view(&cluster, "sq", 0, "led", |v| v.leader > 0 && v.leader != coordinator).await;
    let mut at = Raw::connect(cluster.addr(view.leader)).await;
    let mut epoch = 0;
    let mut delivered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered.is_empty() {
        assert!(
            Instant::now() < deadline,
            "nothing delivered after the coordinator's kill"
        );
        let Some(resp) = settled_fetch(&mut at, &group, &a, &mut epoch, t).await else {
            continue;
        };
        delivered = acquired(&resp).1;
    }
    assert_eq!(delivered, vec!["5=v5".to_string()]);
}

fn describe_offsets(group: &str, topics: Option<Vec<(&str, Vec<i32>)>>) -> DescribeShareGroupOffsetsRequest {
    use kafka_protocol::messages::describe_share_group_offsets_request::{
        DescribeShareGroupOffsetsRequestGroup, DescribeShareGroupOffsetsRequestTopic,
    };
    DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(topics.map(|ts| {
                ts.into_iter()
                    .map(|(name, partitions)| {
                        DescribeShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(topic(name))
                            .with_partitions(partitions)
                    })
                    .collect()
            })),
    ])
}

/// The group's (topic, partition, start offset) rows, or its error.
fn offsets_of(resp: &DescribeShareGroupOffsetsResponse) -> Result<Vec<(String, i32, i64, i16)>, i16> {
    let g = &resp.groups[0];
    if g.error_code != 0 {
        return Err(g.error_code);
    }
    Ok(g.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.topic_name.to_string(),
                    p.partition_index,
                    p.start_offset,
                    p.error_code,
                )
            })
        })
        .collect())
}

fn alter_offsets(group: &str, name: &str, offsets: &[(i32, i64)]) -> AlterShareGroupOffsetsRequest {
    use kafka_protocol::messages::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
    };
    AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(vec![
            AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(topic(name))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(p, o)| {
                            AlterShareGroupOffsetsRequestPartition::default()
                                .with_partition_index(*p)
                                .with_start_offset(*o)
                        })
                        .collect(),
                ),
        ])
}

/// DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets: a reset
/// before any member joined creates the group and decides where it starts; resets are refused
/// while members are in; a deleted partition starts again from `share.auto.offset.reset`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_offsets_are_described_reset_and_deleted() {
    use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q5", 2).await;
    produce(&mut raw, "q5", batch("a", 5)).await;
    // No such group yet.
    let r = raw.call(0, &describe_offsets("g5", None)).await;
    assert_eq!(offsets_of(&r), Err(ResponseError::GroupIdNotFound.code()));
    // A reset before any member: the group is created, empty, and starts at offset 2.
    let r = raw.call(0, &alter_offsets("g5", "q5", &[(0, 2), (9, 0)])).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let codes: Vec<(i32, i16)> = r.responses[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect();
    assert_eq!(codes, vec![(0, 0), (9, ResponseError::UnknownTopicOrPartition.code())]);
    assert_eq!(r.responses[0].topic_id, t);
    let r = raw.call(0, &alter_offsets("g5", "nowhere", &[(0, 0)])).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let r = raw.call(0, &describe_offsets("g5", None)).await;
    assert_eq!(offsets_of(&r), Ok(vec![("q5".to_string(), 0, 2, 0)]));
    let r = raw
        .call(0, &describe_offsets("g5", Some(vec![("q5", vec![0, 1])])))
        .await;
    assert_eq!(
        offsets_of(&r),
        Ok(vec![("q5".to_string(), 0, 2, 0), ("q5".to_string(), 1, -1, 0)])
    );

    let a = member_id();
    assert_eq!(raw.call(1, &heartbeat("g5", &a, 0, Some(&["q5"]))).await.error_code, 0);
    let mut ra = Raw::connect(broker.addr).await;
    let got = ra.call(1, &share_fetch("g5", &a, 0, t, vec![], 2_000)).await;
    assert_eq!(acquired(&got).0, vec![(2, 4, 1)]);
    // Members are in: no reset.
    let r = raw.call(0, &alter_offsets("g5", "q5", &[(0, 0)])).await;
    assert_eq!(r.error_code, ResponseError::NonEmptyGroup.code());
    let delete = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(s("g5")))
        .with_topics(vec![
            DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(topic("q5")),
        ]);
    assert_eq!(
        raw.call(0, &delete).await.error_code,
        ResponseError::NonEmptyGroup.code()
    );
    let r = ra.call(1, &share_ack("g5", &a, 1, t, vec![(2, 4, vec![1])])).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    let r = raw.call(0, &describe_offsets("g5", Some(vec![("q5", vec![0])]))).await;
    assert_eq!(offsets_of(&r), Ok(vec![("q5".to_string(), 0, 5, 0)]));

    // Empty again: the offsets are deleted; the next read starts at the log end (latest).
    assert_eq!(raw.call(1, &heartbeat("g5", &a, -1, None)).await.error_code, 0);
    let r = raw.call(0, &delete).await;
    assert_eq!((r.error_code, r.responses[0].error_code), (0, 0), "{r:?}");
    let r = raw.call(0, &describe_offsets("g5", None)).await;
    assert_eq!(offsets_of(&r), Ok(vec![]));
    produce(&mut raw, "q5", batch("b", 2)).await;
    assert_eq!(raw.call(1, &heartbeat("g5", &a, 0, Some(&["q5"]))).await.error_code, 0);
    let none = ra.call(1, &share_fetch("g5", &a, 0, t, vec![], 0)).await;
    assert_eq!(acquired(&none).0, vec![]);
    produce(&mut raw, "q5", batch("c", 1)).await;
    let got = ra.call(1, &share_fetch("g5", &a, 1, t, vec![], 2_000)).await;
    assert_eq!(acquired(&got), (vec![(7, 7, 1)], vec!["7=c-0".to_string()]));
    let r = raw.call(0, &describe_offsets("g5", None)).await;
    assert_eq!(offsets_of(&r), Ok(vec![("q5".to_string(), 0, 7, 0)]));
    // A deleted topic's share-partition states go with it (Kafka's DeleteShareGroupState).
    let deleted = raw
        .call(
            5,
            &DeleteTopicsRequest::default()
                .with_topic_names(vec![topic("q5")])
                .with_timeout_ms(10_000),
        )
        .await;
    assert_eq!(deleted.responses[0].error_code, 0);
    let r = raw.call(0, &describe_offsets("g5", None)).await;
    assert_eq!(offsets_of(&r), Ok(vec![]));
}

/// The classic group APIs on a share group's id: JoinGroup gets INCONSISTENT_GROUP_PROTOCOL,
/// ConsumerGroupHeartbeat, OffsetCommit and DescribeGroups GROUP_ID_NOT_FOUND, and a share
/// heartbeat for a classic group's id GROUP_ID_NOT_FOUND; DeleteGroups removes a share group
/// and its stored states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_is_not_a_consumer_group() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = create(&mut raw, "q6", 1).await;
    let a = member_id();
    assert_eq!(raw.call(1, &heartbeat("g6", &a, 0, Some(&["q6"]))).await.error_code, 0);
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("g6")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default().with_name(s("range"))]);
    assert_eq!(
        raw.call(9, &join).await.error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    let cg = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("g6")))
        .with_member_id(s(&member_id()))
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic("q6")]));
    assert_eq!(raw.call(1, &cg).await.error_code, ResponseError::GroupIdNotFound.code());
    let commit = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("g6")))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic("q6"))
                .with_partitions(vec![OffsetCommitRequestPartition::default().with_committed_offset(1)]),
        ]);
    let r = raw.call(8, &commit).await;
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ResponseError::GroupIdNotFound.code()
    );
    let d = raw
        .call(5, &DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g6"))]))
        .await;
    assert_eq!(d.groups[0].group_state.as_str(), "Dead", "v5: not a classic group");
    // A classic group's id refuses share members.
    let commit_other = commit.clone().with_group_id(GroupId(s("classic-g")));
    assert_eq!(raw.call(8, &commit_other).await.topics[0].partitions[0].error_code, 0);
    let r = raw
        .call(1, &heartbeat("classic-g", &member_id(), 0, Some(&["q6"])))
        .await;
    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
    // Deleting: not while a member is in; then the group and its states go.
    let mut ra = Raw::connect(broker.addr).await;
    let r = ra.call(1, &share_fetch("g6", &a, 0, t, vec![], 0)).await;
    assert_eq!(r.error_code, 0);
    let delete = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g6"))]);
    assert_eq!(
        raw.call(2, &delete).await.results[0].error_code,
        ResponseError::NonEmptyGroup.code()
    );
    assert_eq!(raw.call(1, &heartbeat("g6", &a, -1, None)).await.error_code, 0);
    assert_eq!(raw.call(2, &delete).await.results[0].error_code, 0);
    let r = raw.call(0, &describe_offsets("g6", None)).await;
    assert_eq!(offsets_of(&r), Err(ResponseError::GroupIdNotFound.code()));
}
