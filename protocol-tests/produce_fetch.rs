//! Produce and Fetch through librdkafka (the `rdkafka` crate): ordering, offsets, compression,
//! headers, large records, errors, and long-poll wake-ups.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;

async fn create_topic(bootstrap: &str, name: &str, partitions: i32) {
    create_topic_with(bootstrap, name, partitions, &[]).await;
}

async fn create_topic_with(bootstrap: &str, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let results = admin.create_topics(&[topic], &AdminOptions::new()).await.unwrap();
    assert!(results[0].is_ok(), "{results:?}");
}

/// (partition, offset, key, value) of a consumed record.
type Consumed = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>);

/// Reads until `count` messages arrived (or 60 s passed).
fn consume_n(consumer: &rdkafka::consumer::BaseConsumer, count: usize) -> Vec<Consumed> {
    let mut out = Vec::with_capacity(count);
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < count && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("consume without error");
            out.push((
                m.partition(),
                m.offset(),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_keyed_records_come_back_in_partition_order() {
    let broker = TestBroker::start(&[]).await;
    let topic = unique("keyed");
    create_topic(&broker.bootstrap(), &topic, 3).await;
    let producer = producer(&broker.bootstrap(), &[("linger.ms", "5")]);
    const N: usize = 100_000;
    let mut pending = Vec::with_capacity(N);
    for i in 0..N {
        let key = format!("key-{}", i % 1000);
        let value = format!("value-{i}");
        let partition = (i % 1000 % 3) as i32;
        let mut record = FutureRecord::to(&topic).key(&key).payload(&value).partition(partition);
        loop {
            match producer.send_result(record) {
                Ok(f) => {
                    pending.push((i, f));
                    break;
                }
                // Local queue full: let deliveries drain, then retry the same record.
                Err((_, back)) => {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
    // Every acknowledged record's offset, per partition, in production order.
    let mut acked: HashMap<i32, Vec<(i64, usize)>> = HashMap::new();
    for (i, f) in pending {
        let d = f.await.unwrap().expect("acks=all delivery");
        acked.entry(d.partition).or_default().push((d.offset, i));
    }
    for (p, offsets) in &acked {
        let expected: Vec<i64> = (0..offsets.len() as i64).collect();
        let got: Vec<i64> = offsets.iter().map(|(o, _)| *o).collect();
        assert_eq!(got, expected, "partition {p}: offsets are 0..n in production order");
    }
    let consumer = consumer(&broker.bootstrap(), &[]);
    assign(&consumer, &topic, &[0, 1, 2], rdkafka::Offset::Beginning);
    let got = consume_n(&consumer, N);
    assert_eq!(got.len(), N);
    let mut next: HashMap<i32, usize> = HashMap::new();
    for (p, offset, key, value) in got {
        let idx = next.entry(p).or_default();
        let (want_offset, i) = acked[&p][*idx];
        assert_eq!(offset, want_offset);
        assert_eq!(key.unwrap(), format!("key-{}", i % 1000).into_bytes());
        assert_eq!(value.unwrap(), format!("value-{i}").into_bytes());
        *idx += 1;
    }
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_compression_codec_round_trips() {
    let broker = TestBroker::start(&[]).await;
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = unique(codec);
        create_topic(&broker.bootstrap(), &topic, 1).await;
        let producer = producer(
            &broker.bootstrap(),
            &[("compression.codec", codec), ("linger.ms", "20")],
        );
        let values: Vec<String> = (0..500)
            .map(|i| format!("{codec} value {i} {}", "x".repeat(i % 50)))
            .collect();
        let sends: Vec<_> = values
            .iter()
            .map(|v| {
                producer
                    .send_result(FutureRecord::<(), _>::to(&topic).payload(v).partition(0))
                    .unwrap()
            })
            .collect();
        for s in sends {
            s.await.unwrap().expect("delivered");
        }
        let consumer = consumer(&broker.bootstrap(), &[]);
        assign(&consumer, &topic, &[0], rdkafka::Offset::Beginning);
        let got = consume_n(&consumer, values.len());
        let got: Vec<String> = got
            .into_iter()
            .map(|(_, _, _, v)| String::from_utf8(v.unwrap()).unwrap())
            .collect();
        assert_eq!(got, values, "{codec}");
    }
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_null_key_and_value_and_a_one_megabyte_record() {
    let broker = TestBroker::start(&[]).await;
    let topic = unique("shapes");
    create_topic(&broker.bootstrap(), &topic, 1).await;
    let producer = producer(&broker.bootstrap(), &[("message.max.bytes", "2000000")]);
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "h1",
            value: Some("v1"),
        })
        .insert(Header {
            key: "h2",
            value: None::<&str>,
        });
    let big = vec![7u8; 1_000_000];
    let to = Timeout::After(Duration::from_secs(30));
    producer
        .send(
            FutureRecord::to(&topic)
                .key("k")
                .payload("with headers")
                .headers(headers)
                .partition(0),
            to,
        )
        .await
        .unwrap();
    producer
        .send(FutureRecord::<(), _>::to(&topic).payload("null key").partition(0), to)
        .await
        .unwrap();
    producer
        .send(FutureRecord::<_, ()>::to(&topic).key("null value").partition(0), to)
        .await
        .unwrap();
    producer
        .send(FutureRecord::to(&topic).key("big").payload(&big).partition(0), to)
        .await
        .unwrap();

    let consumer = consumer(&broker.bootstrap(), &[("fetch.message.max.bytes", "1048576")]);
    assign(&consumer, &topic, &[0], rdkafka::Offset::Beginning);
    let mut msgs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while msgs.len() < 4 && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            msgs.push(m.unwrap().detach());
        }
    }
    assert_eq!(msgs.len(), 4);
    let h = msgs[0].headers().expect("headers");
    assert_eq!(h.count(), 2);
    assert_eq!((h.get(0).key, h.get(0).value), ("h1", Some(&b"v1"[..])));
    assert_eq!((h.get(1).key, h.get(1).value), ("h2", None));
    assert_eq!(msgs[1].key(), None);
    assert_eq!(msgs[1].payload(), Some(&b"null key"[..]));
    assert_eq!(msgs[2].key(), Some(&b"null value"[..]));
    assert_eq!(msgs[2].payload(), None);
    assert_eq!(msgs[3].payload().map(<[u8]>::len), Some(1_000_000));
    assert!(msgs[3].payload().unwrap().iter().all(|b| *b == 7));
    assert_eq!(msgs.iter().map(|m| m.offset()).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producing_to_a_missing_partition_fails_cleanly() {
    let broker = TestBroker::start(&[]).await;
    let topic = unique("two");
    create_topic(&broker.bootstrap(), &topic, 2).await;
    let producer = producer(&broker.bootstrap(), &[("message.timeout.ms", "3000")]);
    let to = Timeout::After(Duration::from_secs(10));
    let err = producer
        .send(FutureRecord::to(&topic).key("k").payload("v").partition(7), to)
        .await
        .unwrap_err();
    // librdkafka knows the partition count from metadata and fails the record locally.
    assert_eq!(
        err.0.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::UnknownPartition),
        "{err:?}"
    );
    // The broker keeps serving: the valid partition still works.
    let ok = producer
        .send(FutureRecord::to(&topic).key("k").payload("v").partition(1), to)
        .await
        .unwrap();
    assert_eq!((ok.partition, ok.offset), (1, 0));
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_consumer_is_woken_by_the_append_not_the_timeout() {
    let broker = TestBroker::start(&[]).await;
    let topic = unique("wake");
    create_topic(&broker.bootstrap(), &topic, 1).await;
    // The fetch waits up to 10 s for data: a record that arrives much sooner proves the
    // long-poll is woken by the append.
    let consumer = consumer(
        &broker.bootstrap(),
        &[("fetch.wait.max.ms", "10000"), ("fetch.min.bytes", "1")],
    );
    assign(&consumer, &topic, &[0], rdkafka::Offset::Beginning);
    // Let the consumer reach its long-poll.
    for _ in 0..20 {
        assert!(consumer.poll(Duration::from_millis(50)).is_none());
    }
    let producer = producer(&broker.bootstrap(), &[("linger.ms", "0")]);
    let sent = Instant::now();
    producer
        .send(
            FutureRecord::to(&topic).key("k").payload("now").partition(0),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let mut latency = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while latency.is_none() && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(1)) {
            assert_eq!(m.unwrap().payload(), Some(&b"now"[..]));
            latency = Some(sent.elapsed());
        }
    }
    let latency = latency.expect("the record arrived");
    eprintln!("produce->consume latency with a waiting fetch: {latency:?}");
    assert!(
        latency < Duration::from_secs(5),
        "the fetch was not woken by the append ({latency:?})"
    );
    broker.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_keyless_records_of_a_batch_fail_in_a_compacted_topic() {
    // KIP-467 as librdkafka (>= 2.4) applies it: with more than one RecordError in the answer,
    // the named records fail with INVALID_RECORD and the rest of the batch with
    // _INVALID_DIFFERENT_RECORD, which the application may send again (librdkafka does not).
    let broker = TestBroker::start(&[]).await;
    let topic = unique("compacted-keys");
    create_topic_with(&broker.bootstrap(), &topic, 1, &[("cleanup.policy", "compact")]).await;
    // A long linger puts the 100 records in one batch, so one answer names all 10.
    let producer = producer(&broker.bootstrap(), &[("linger.ms", "500")]);
    let keyless: Vec<usize> = (0..10).map(|i| i * 10 + 3).collect();
    let values: Vec<String> = (0..100).map(|i| format!("value-{i}")).collect();
    let keys: Vec<String> = (0..100).map(|i| format!("key-{i}")).collect();
    let send = |i: usize| {
        let record = FutureRecord::to(&topic).payload(&values[i]).partition(0);
        let record = if keyless.contains(&i) {
            record
        } else {
            record.key(&keys[i])
        };
        producer.send_result(record).map_err(|(e, _)| e).unwrap()
    };
    let pending: Vec<_> = (0..100).map(|i| (i, send(i))).collect();
    let mut refused = Vec::new();
    let mut bystanders = Vec::new();
    for (i, f) in pending {
        match f.await.unwrap() {
            Ok(d) => panic!("record {i} delivered at {} from a refused batch", d.offset),
            Err((e, _)) => match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::InvalidRecord) => refused.push(i),
                Some(RDKafkaErrorCode::InvalidDifferentRecord) => bystanders.push(i),
                other => panic!("record {i}: {other:?} ({e})"),
            },
        }
    }
    assert_eq!(refused, keyless, "exactly the keyless records fail with INVALID_RECORD");
    assert_eq!(bystanders.len(), 90);
    // Sent again, the 90 keyed records go in, in order, from offset 0.
    let again: Vec<_> = bystanders.iter().map(|&i| (i, send(i))).collect();
    for (n, (i, f)) in again.into_iter().enumerate() {
        let d = f.await.unwrap().unwrap_or_else(|(e, _)| panic!("record {i}: {e}"));
        assert_eq!((d.partition, d.offset), (0, n as i64));
    }
    let consumer = consumer(&broker.bootstrap(), &[]);
    assign(&consumer, &topic, &[0], rdkafka::Offset::Beginning);
    let got = consume_n(&consumer, 90);
    let want: Vec<_> = bystanders
        .iter()
        .map(|&i| (Some(keys[i].clone().into_bytes()), Some(values[i].clone().into_bytes())))
        .collect();
    let got: Vec<_> = got.into_iter().map(|(_, _, k, v)| (k, v)).collect();
    assert_eq!(got, want);
    broker.handle.shutdown().await;
}
