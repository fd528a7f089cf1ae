//! Client quotas (issue 14): AlterClientQuotas and DescribeClientQuotas as raw frames, with
//! the checks Kafka makes; the throttle time a client over its quota is answered with, and
//! its connection held back for it; and a real producer held to a 1 MB/s quota while another
//! client goes on at full speed.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DeliveryResult, ProducerContext, ThreadedProducer};

const INVALID_REQUEST: i16 = 42;
/// The client id of `Raw` connections.
const RAW_CLIENT: &str = "sluice-raw-test";

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// An entity of (type, name) parts; a None name is the default.
fn entity(parts: &[(&str, Option<&str>)]) -> Vec<EntityData> {
    parts
        .iter()
        .map(|(t, n)| EntityData::default().with_entity_type(s(t)).with_entity_name(n.map(s)))
        .collect()
}

fn set(key: &str, value: f64) -> OpData {
    OpData::default().with_key(s(key)).with_value(value)
}

fn remove(key: &str) -> OpData {
    OpData::default().with_key(s(key)).with_remove(true)
}

async fn alter(raw: &mut Raw, entries: Vec<EntryData>, validate_only: bool) -> Vec<i16> {
    let req = AlterClientQuotasRequest::default()
        .with_entries(entries)
        .with_validate_only(validate_only);
    let resp = raw.call(1, &req).await;
    resp.entries.iter().map(|e| e.error_code).collect()
}

fn entry(parts: &[(&str, Option<&str>)], ops: Vec<OpData>) -> EntryData {
    EntryData::default().with_entity(entity(parts)).with_ops(ops)
}

/// A component: match type 0 exact (with a name), 1 default, 2 any.
fn component(entity_type: &str, match_type: i8, name: Option<&str>) -> ComponentData {
    ComponentData::default()
        .with_entity_type(s(entity_type))
        .with_match_type(match_type)
        .with_match(name.map(s))
}

/// Each matching entity as sorted (type, name) parts, with its sorted key=value pairs.
type Described = Vec<(Vec<(String, Option<String>)>, Vec<(String, f64)>)>;

async fn describe(raw: &mut Raw, components: Vec<ComponentData>, strict: bool) -> Result<Described, i16> {
    let req = DescribeClientQuotasRequest::default()
        .with_components(components)
        .with_strict(strict);
    let resp = raw.call(1, &req).await;
    if resp.error_code != 0 {
        assert!(resp.error_message.is_some(), "an error says why");
        return Err(resp.error_code);
    }
    let mut out: Described = resp
        .entries
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let mut parts: Vec<_> = e
                .entity
                .iter()
                .map(|p| (p.entity_type.to_string(), p.entity_name.as_ref().map(|n| n.to_string())))
                .collect();
            parts.sort();
            let mut values: Vec<_> = e.values.iter().map(|v| (v.key.to_string(), v.value)).collect();
            values.sort_by(|a, b| a.0.cmp(&b.0));
            (parts, values)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn part(t: &str, n: Option<&str>) -> (String, Option<String>) {
    (t.to_string(), n.map(str::to_string))
}

#[tokio::test]
async fn quotas_are_altered_and_described_as_kafka_checks_them_and_survive_a_restart() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let codes = alter(
        &mut raw,
        vec![
            entry(
                &[("user", Some("alice")), ("client-id", None)],
                vec![set("producer_byte_rate", 1024.0)],
            ),
            entry(
                &[("client-id", Some("app"))],
                vec![set("consumer_byte_rate", 2048.0), set("request_percentage", 50.5)],
            ),
        ],
        false,
    )
    .await;
    assert_eq!(codes, vec![0, 0]);
    // Checked, not stored.
    let codes = alter(
        &mut raw,
        vec![entry(&[("user", Some("bob"))], vec![set("producer_byte_rate", 1.0)])],
        true,
    )
    .await;
    assert_eq!(codes, vec![0]);
    // Refused as Kafka refuses them: an unknown key, a fractional byte rate, the IP entity
    // (not enforced here), a repeated entity type, an empty entity.
    let codes = alter(
        &mut raw,
        vec![
            entry(&[("user", Some("carol"))], vec![set("no_such_quota", 1.0)]),
            entry(&[("user", Some("carol"))], vec![set("producer_byte_rate", 1.5)]),
            entry(&[("ip", Some("10.0.0.1"))], vec![set("connection_creation_rate", 5.0)]),
            entry(
                &[("user", Some("a")), ("user", Some("b"))],
                vec![set("producer_byte_rate", 5.0)],
            ),
            entry(&[], vec![set("producer_byte_rate", 5.0)]),
        ],
        false,
    )
    .await;
    assert_eq!(codes, vec![INVALID_REQUEST; 5]);

    let alice = vec![part("client-id", None), part("user", Some("alice"))];
    let app = vec![part("client-id", Some("app"))];
    let all = describe(&mut raw, vec![], false).await.unwrap();
    assert_eq!(
        all,
        vec![
            (alice.clone(), vec![("producer_byte_rate".into(), 1024.0)]),
            (
                app.clone(),
                vec![
                    ("consumer_byte_rate".into(), 2048.0),
                    ("request_percentage".into(), 50.5)
                ]
            ),
        ]
    );
    // user=alice exactly; the default client id; any client id, strictly (alone).
    let only_alice = describe(&mut raw, vec![component("user", 0, Some("alice"))], false)
        .await
        .unwrap();
    assert_eq!(only_alice.iter().map(|e| &e.0).collect::<Vec<_>>(), vec![&alice]);
    let default_client = describe(&mut raw, vec![component("client-id", 1, None)], false)
        .await
        .unwrap();
    assert_eq!(default_client.iter().map(|e| &e.0).collect::<Vec<_>>(), vec![&alice]);
    let strict = describe(&mut raw, vec![component("client-id", 2, None)], true)
        .await
        .unwrap();
    assert_eq!(strict.iter().map(|e| &e.0).collect::<Vec<_>>(), vec![&app]);
    assert_eq!(
        describe(&mut raw, vec![component("user", 0, Some("bob"))], false).await,
        Ok(vec![])
    );
    // A bad filter is INVALID_REQUEST for the whole request.
    assert_eq!(
        describe(&mut raw, vec![component("user", 7, None)], false).await,
        Err(INVALID_REQUEST)
    );
    assert_eq!(
        describe(
            &mut raw,
            vec![component("user", 2, None), component("user", 1, None)],
            false
        )
        .await,
        Err(INVALID_REQUEST)
    );

    // Removing a key leaves the entity's others; removing the last drops the entity.
    let codes = alter(
        &mut raw,
        vec![
            entry(&[("client-id", Some("app"))], vec![remove("request_percentage")]),
            entry(
                &[("user", Some("alice")), ("client-id", None)],
                vec![remove("producer_byte_rate")],
            ),
        ],
        false,
    )
    .await;
    assert_eq!(codes, vec![0, 0]);
    let expected = vec![(app.clone(), vec![("consumer_byte_rate".to_string(), 2048.0)])];
    assert_eq!(describe(&mut raw, vec![], false).await.unwrap(), expected);

    // In the metadata log: the same after a restart.
    drop(raw);
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(describe(&mut raw, vec![], false).await.unwrap(), expected);
}

/// One batch of `count` records of `value_len` bytes each.
fn batch(count: usize, value_len: usize) -> Bytes {
    let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..count)
        .map(|i| (None, Some(Bytes::from(vec![b'q'; value_len])), 1_000 + i as i64))
        .collect();
    sluice::log::batch::encode_records(&records, Compression::None).unwrap()
}

async fn create(raw: &mut Raw, name: &str) {
    let resp = raw.call(7, &create_topic_request(name, 1, 5000)).await;
    assert_eq!(resp.topics[0].error_code, 0);
}

/// Rates over 2 samples of 1 s: the minimum window is 1 s and no throttle exceeds 2 s.
const SHORT_WINDOWS: [(&str, &str); 2] = [("quota.window.num", "2"), ("quota.window.size.seconds", "1")];

#[tokio::test]
async fn a_produce_over_its_quota_is_answered_with_its_throttle_time_and_its_connection_waits() {
    let broker = TestBroker::start(&SHORT_WINDOWS).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "throttled").await;
    let codes = alter(
        &mut raw,
        vec![entry(
            &[("client-id", Some(RAW_CLIENT))],
            vec![set("producer_byte_rate", 10_000.0)],
        )],
        false,
    )
    .await;
    assert_eq!(codes, vec![0]);
    // About 12,000 bytes against 1,000 B/s over the rate's first 10 s: 1,200 B/s, so
    // (1,200 - 1,000) / 1,000 × 10 s = 2 s.
    let resp = raw
        .call(9, &produce_request("throttled", 0, batch(10, 1_150), -1))
        .await;
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "a throttled produce is still appended");
    assert!(
        (1_000..=2_000).contains(&resp.throttle_time_ms),
        "throttle_time_ms {}",
        resp.throttle_time_ms
    );
    // The connection is not read until the throttle time has passed (KIP-219): the next
    // request's answer cannot come sooner.
    let asked = Instant::now();
    let _ = raw.call(3, &ApiVersionsRequest::default()).await;
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(resp.throttle_time_ms as u64 * 3 / 4),
        "answered after {waited:?}, throttle time {} ms",
        resp.throttle_time_ms
    );
    // Another client id has no quota: never throttled, never held back.
    let other = TestBroker::start(&[]).await; // (a fresh broker shows a quota-free client)
    let mut free = Raw::connect(other.addr).await;
    create(&mut free, "free").await;
    let resp = free.call(9, &produce_request("free", 0, batch(10, 1_150), -1)).await;
    assert_eq!(resp.throttle_time_ms, 0);
}

#[tokio::test]
async fn a_fetch_over_its_quota_is_answered_empty_with_its_throttle_time() {
    let broker = TestBroker::start(&SHORT_WINDOWS).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "watched").await;
    let resp = raw.call(9, &produce_request("watched", 0, batch(1, 3_900), -1)).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    let codes = alter(
        &mut raw,
        vec![entry(
            &[("client-id", Some(RAW_CLIENT))],
            vec![set("consumer_byte_rate", 10_000.0)],
        )],
        false,
    )
    .await;
    assert_eq!(codes, vec![0]);
    // Each fetch reads the ~4,000-byte batch: 4,000 then 8,000 bytes in the rate's first
    // second are within 10,000 B/s; the third would make 12,000, so it is answered empty
    // (and not counted) with the 1.2 s until 12,000 bytes would be within the quota.
    for _ in 0..2 {
        let resp = raw.call(12, &fetch_request("watched", 0, 1 << 20, 1 << 20)).await;
        assert_eq!(resp.throttle_time_ms, 0);
        let records = resp.responses[0].partitions[0].records.as_ref().map_or(0, |r| r.len());
        assert!(records > 3_900, "records: {records} bytes");
    }
    let resp = raw.call(12, &fetch_request("watched", 0, 1 << 20, 1 << 20)).await;
    assert!(resp.responses.is_empty(), "a throttled fetch carries no data");
    assert!(
        (800..=2_000).contains(&resp.throttle_time_ms),
        "throttle_time_ms {}",
        resp.throttle_time_ms
    );
}

/// Each delivered record's time and size.
#[derive(Default, Clone)]
struct Deliveries(Arc<Mutex<Vec<(Instant, usize)>>>);

impl rdkafka::ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        use rdkafka::Message;
        if let Ok(m) = result {
            let len = m.payload().map_or(0, <[u8]>::len);
            self.0.lock().unwrap().push((Instant::now(), len));
        }
    }
}

/// Produces `value_len`-byte records as fast as the client lets it for `run`; answers what
/// was delivered.
fn produce_for(bootstrap: &str, client_id: &str, topic: &str, run: Duration) -> Vec<(Instant, usize)> {
    let deliveries = Deliveries::default();
    let producer: ThreadedProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("client.id", client_id)
        .set("acks", "all")
        // Batches of 64 KB, so what is in flight when the throttle starts is small beside
        // the 10 MB measured.
        .set("batch.size", "65536")
        .set("linger.ms", "5")
        .create_with_context(deliveries.clone())
        .expect("producer");
    let value = vec![b'x'; 10_000];
    let start = Instant::now();
    while start.elapsed() < run {
        match producer.send(BaseRecord::<(), [u8]>::to(topic).payload(&value[..])) {
            Ok(()) => {}
            Err((_, _)) => std::thread::sleep(Duration::from_millis(5)), // queue full
        }
    }
    // What is still queued is not counted: the producer is dropped without waiting.
    let out = deliveries.0.lock().unwrap().clone();
    drop(producer);
    out
}

/// Bytes delivered in [from, from + span).
fn bytes_in(deliveries: &[(Instant, usize)], from: Instant, span: Duration) -> usize {
    deliveries
        .iter()
        .filter(|(at, _)| *at >= from && *at < from + span)
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_megabyte_quota_holds_a_producer_within_ten_percent_and_others_are_unaffected() {
    const QUOTA: f64 = 1_048_576.0;
    let broker = TestBroker::start(&[("num.partitions", "1")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "slow").await;
    create(&mut raw, "fast").await;
    let codes = alter(
        &mut raw,
        vec![entry(
            &[("client-id", Some("slow-producer"))],
            vec![set("producer_byte_rate", QUOTA)],
        )],
        false,
    )
    .await;
    assert_eq!(codes, vec![0]);
    let bootstrap = broker.bootstrap();
    let run = Duration::from_secs(16);
    let slow = tokio::task::spawn_blocking({
        let b = bootstrap.clone();
        move || produce_for(&b, "slow-producer", "slow", run)
    });
    let fast = tokio::task::spawn_blocking(move || produce_for(&bootstrap, "fast-producer", "fast", run));
    let (slow, fast) = (slow.await.unwrap(), fast.await.unwrap());
    let first = slow.first().expect("the throttled producer delivered something").0;
    // Past the first seconds (Kafka's rate starts as if 10 s had passed, so a new client may
    // burst through its first 10 s of quota), over 10 s: within 10 % of the quota.
    let window = Duration::from_secs(10);
    let measured = bytes_in(&slow, first + Duration::from_secs(4), window) as f64 / window.as_secs_f64();
    let ratio = measured / QUOTA;
    let from_start = bytes_in(&slow, first, window) as f64 / window.as_secs_f64() / QUOTA;
    let per_second: Vec<usize> = (0..16)
        .map(|k| bytes_in(&slow, first + Duration::from_secs(k), Duration::from_secs(1)) / 1000)
        .collect();
    eprintln!("kB per second: {per_second:?}");
    eprintln!("first 10 s: {from_start:.3} of the quota");
    eprintln!("throttled producer: {measured:.0} B/s over 10 s, {ratio:.3} of its quota");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{measured:.0} B/s against a quota of {QUOTA} B/s"
    );
    // The other client, with no quota, is not held to it.
    let fast_first = fast.first().expect("the free producer delivered something").0;
    let fast_rate = bytes_in(&fast, fast_first + Duration::from_secs(4), window) as f64 / window.as_secs_f64();
    eprintln!("free producer: {fast_rate:.0} B/s");
    assert!(fast_rate > 2.0 * QUOTA, "the free producer: {fast_rate:.0} B/s");
}

#[tokio::test]
async fn a_request_quota_holds_back_a_client_that_uses_more_handler_time() {
    let broker = TestBroker::start(&SHORT_WINDOWS).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "busy").await;
    // 0.001 % of a thread is 10 µs of handler time per second: a few Metadata requests are
    // over it, and each one over it holds the connection back (at most 2 s here).
    let codes = alter(
        &mut raw,
        vec![entry(
            &[("client-id", Some(RAW_CLIENT))],
            vec![set("request_percentage", 0.001)],
        )],
        false,
    )
    .await;
    assert_eq!(codes, vec![0]);
    let started = Instant::now();
    for _ in 0..3 {
        let resp = raw.call(12, &MetadataRequest::default().with_topics(None)).await;
        assert!(
            resp.topics
                .iter()
                .any(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "busy"))
        );
    }
    let held = started.elapsed();
    assert!(held >= Duration::from_secs(1), "3 requests answered within {held:?}");
    // Another broker's client without a quota is answered at once (no lower bound to meet).
    let other = TestBroker::start(&SHORT_WINDOWS).await;
    let mut free = Raw::connect(other.addr).await;
    let started = Instant::now();
    for _ in 0..3 {
        free.call(12, &MetadataRequest::default().with_topics(None)).await;
    }
    eprintln!("quota-held: {held:?}; free: {:?}", started.elapsed());
}

const THROTTLING_QUOTA_EXCEEDED: i16 = 89;

/// The throttle time a mutation quota of `rate` partitions per second gives after `debt`
/// partitions more than the bucket held, in ms, with up to 5 s already refilled.
fn owed(debt: f64, rate: f64) -> std::ops::RangeInclusive<i32> {
    let ms = |d: f64| (d / rate * 1000.0).round() as i32;
    ms(debt - 5.0 * rate)..=ms(debt)
}

#[tokio::test]
async fn a_controller_mutation_quota_refuses_strict_versions_and_throttles_older_ones() {
    // KIP-599: `controller_mutation_rate` partitions per second, in a token bucket that holds
    // the rate × the whole quota window (2 × 1 s here). Strict versions (CreateTopics v6+,
    // DeleteTopics v5+, CreatePartitions v3+) take any mutation while the bucket is not below
    // zero, then refuse with THROTTLING_QUOTA_EXCEEDED; older ones are always served and throttled.
    // At 0.01 partitions/s the bucket hardly refills while the test runs; each step uses a
    // connection of its own, since a throttled one is not read until its time has passed.
    const RATE: f64 = 0.01;
    let broker = TestBroker::start(&SHORT_WINDOWS).await;
    let mut raw = Raw::connect(broker.addr).await;
    // A DOUBLE, as Kafka's: a fraction is accepted, unlike the byte rates.
    let codes = alter(
        &mut raw,
        vec![entry(
            &[("client-id", Some(RAW_CLIENT))],
            vec![set("controller_mutation_rate", RATE)],
        )],
        false,
    )
    .await;
    assert_eq!(codes, vec![0]);
    let described = describe(&mut raw, vec![], false).await.unwrap();
    assert!(
        format!("{described:?}").contains("controller_mutation_rate"),
        "{described:?}"
    );

    // The bucket holds 0.02: three partitions are taken (it is not below zero yet), unthrottled.
    let resp = raw.call(7, &create_topic_request("mut-a", 3, 5000)).await;
    assert_eq!((resp.topics[0].error_code, resp.throttle_time_ms), (0, 0));
    // Now it is: v7 is refused, with the time until it is back at zero; nothing is created.
    let mut second = Raw::connect(broker.addr).await;
    let resp = second.call(7, &create_topic_request("mut-b", 1, 5000)).await;
    let t = &resp.topics[0];
    assert_eq!(t.error_code, THROTTLING_QUOTA_EXCEEDED);
    assert_eq!(
        t.error_message.as_deref(),
        Some("The throttling quota has been exceeded.")
    );
    assert!(
        owed(2.98, RATE).contains(&resp.throttle_time_ms),
        "{}",
        resp.throttle_time_ms
    );
    // validate_only is refused the same way (Kafka's controller takes the quota for it too).
    let mut check = Raw::connect(broker.addr).await;
    let resp = check
        .call(7, &create_topic_request("mut-b", 1, 5000).with_validate_only(true))
        .await;
    assert_eq!(resp.topics[0].error_code, THROTTLING_QUOTA_EXCEEDED);
    // v5 (permissive) creates it and throttles the client for it.
    let mut old = Raw::connect(broker.addr).await;
    let resp = old.call(5, &create_topic_request("mut-b", 1, 5000)).await;
    assert_eq!(resp.topics[0].error_code, 0);
    assert!(
        owed(3.98, RATE).contains(&resp.throttle_time_ms),
        "{}",
        resp.throttle_time_ms
    );

    // CreatePartitions: v3 refused, v2 served and throttled.
    let grow = |name: &str, count: i32| {
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
        CreatePartitionsRequest::default()
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(TopicName(s(name)))
                    .with_count(count),
            ])
            .with_timeout_ms(5000)
    };
    let mut conn = Raw::connect(broker.addr).await;
    let resp = conn.call(3, &grow("mut-a", 5)).await;
    assert_eq!(resp.results[0].error_code, THROTTLING_QUOTA_EXCEEDED);
    let mut conn = Raw::connect(broker.addr).await;
    let resp = conn.call(2, &grow("mut-a", 5)).await;
    assert_eq!(resp.results[0].error_code, 0);
    assert!(
        owed(5.98, RATE).contains(&resp.throttle_time_ms),
        "{}",
        resp.throttle_time_ms
    );

    // DeleteTopics: v6 refused, v4 served and throttled (5 partitions more).
    let delete = |name: &str| DeleteTopicsRequest::default().with_topic_names(vec![TopicName(s(name))]);
    let mut conn = Raw::connect(broker.addr).await;
    let by_id = DeleteTopicsRequest::default().with_topics(vec![
        kafka_protocol::messages::delete_topics_request::DeleteTopicState::default()
            .with_name(Some(TopicName(s("mut-a")))),
    ]);
    let resp = conn.call(6, &by_id).await;
    assert_eq!(resp.responses[0].error_code, THROTTLING_QUOTA_EXCEEDED);
    let mut conn = Raw::connect(broker.addr).await;
    let resp = conn.call(4, &delete("mut-a")).await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert!(
        owed(10.98, RATE).contains(&resp.throttle_time_ms),
        "{}",
        resp.throttle_time_ms
    );
    // The refused requests changed nothing: mut-a went only with the v4 delete, mut-b has one
    // partition.
    let mut conn = Raw::connect(broker.addr).await;
    let meta = conn.call(12, &MetadataRequest::default().with_topics(None)).await;
    let partitions: Vec<(String, usize)> = meta
        .topics
        .iter()
        .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.partitions.len()))
        .collect();
    assert_eq!(partitions, vec![("mut-b".to_string(), 1)]);

    // Another client id has no quota: rdkafka's admin ("rdkafka") creates at once.
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new("mut-free", 20, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create_topics");
    assert!(results[0].is_ok(), "{results:?}");
}
