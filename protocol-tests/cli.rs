//! The admin CLI (issue 14): the real `sluice` binary run as a subprocess against an
//! in-process broker, its answers checked in both forms (tables, `--format json`) and
//! cross-checked with rdkafka where a real client sees the effect (records, committed
//! offsets). Exit codes: 0 done, 1 a Kafka error, 2 usage, 3 no connection.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use rdkafka::Message;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

/// Runs `sluice ARGS -b BROKER` with `stdin` piped in, off the runtime's threads.
async fn sluice(broker: &str, args: &[&str], stdin: &str) -> Output {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.extend(["-b".to_string(), broker.to_string()]);
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(&all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
        drop(input);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a command that must succeed and returns its stdout.
async fn ok(broker: &str, args: &[&str]) -> String {
    let out = sluice(broker, args, "").await;
    assert_eq!(out.status.code(), Some(0), "sluice {args:?}: {}", stderr(&out));
    stdout(&out)
}

async fn json(broker: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let text = ok(broker, &all).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// The group's committed offset of `topic`-`partition`, as rdkafka reads it (OffsetFetch).
fn committed(bootstrap: &str, group: &str, topic: &str, partition: i32) -> Option<i64> {
    let consumer = consumer(bootstrap, &[("group.id", group)]);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let got = consumer.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    match got.find_partition(topic, partition).unwrap().offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_listed_described_altered_and_deleted() {
    let broker = TestBroker::start(&[]).await;
    let b = broker.bootstrap();
    let created = ok(
        &b,
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "cleanup.policy=compact",
        ],
    )
    .await;
    assert!(created.contains("created topic orders (3 partitions"), "{created}");

    // Kafka's error name on one line, exit 1.
    let again = sluice(&b, &["topic", "create", "orders", "--partitions", "3"], "").await;
    assert_eq!(again.status.code(), Some(1));
    let line = stderr(&again);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.starts_with("sluice: topic create orders: TOPIC_ALREADY_EXISTS"),
        "{line}"
    );

    let listed = ok(&b, &["topic", "list"]).await;
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["orders", "3"]),
        "{listed}"
    );
    let listed = json(&b, &["topic", "list"]).await;
    assert!(
        listed["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "orders" && t["partitions"] == 3)
    );

    let described = json(&b, &["topic", "describe", "orders"]).await;
    let topic = &described["topics"][0];
    assert_eq!(topic["name"], "orders");
    assert_eq!(topic["partitions"].as_array().unwrap().len(), 3);
    assert_eq!(topic["partitions"][2]["leader"], 1);
    assert_eq!(topic["partitions"][2]["replicas"], serde_json::json!([1]));
    assert_eq!(topic["partitions"][2]["isr"], serde_json::json!([1]));
    // Eligible leader replicas (KIP-966, DescribeTopicPartitions): none with the ISR full.
    assert_eq!(topic["partitions"][2]["elr"], serde_json::json!([]));
    assert_eq!(topic["partitions"][2]["last_known_elr"], serde_json::json!([]));
    assert_eq!(topic["configs"]["cleanup.policy"], "compact");

    ok(&b, &["topic", "add-partitions", "orders", "--partitions", "5"]).await;
    ok(
        &b,
        &[
            "topic",
            "alter-config",
            "orders",
            "--set",
            "retention.ms=12345",
            "--delete",
            "cleanup.policy",
        ],
    )
    .await;
    let text = ok(&b, &["topic", "describe", "orders"]).await;
    assert!(text.contains("PartitionCount: 5"), "{text}");
    assert!(
        text.contains("PARTITION  LEADER  REPLICAS  ISR  ELR  LAST-KNOWN-ELR\n"),
        "{text}"
    );
    assert!(text.contains("Configs: retention.ms=12345\n"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .count(),
        5,
        "{text}"
    );
    let described = json(&b, &["topic", "describe", "orders"]).await;
    assert_eq!(
        described["topics"][0]["configs"],
        serde_json::json!({"retention.ms": "12345"})
    );

    let missing = sluice(&b, &["topic", "describe", "nope"], "").await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        stderr(&missing)
    );

    ok(&b, &["topic", "delete", "orders"]).await;
    let listed = json(&b, &["topic", "list"]).await;
    assert!(
        !listed["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "orders"),
        "{listed}"
    );

    let cluster = json(&b, &["cluster", "describe"]).await;
    assert!(!cluster["cluster_id"].as_str().unwrap().is_empty(), "{cluster}");
    assert_eq!(cluster["controller"], 1);
    assert_eq!(cluster["brokers"][0]["port"], broker.addr.port());
    let text = ok(&b, &["cluster", "describe"]).await;
    assert!(text.starts_with("Cluster ID: "), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_produced_are_consumed_back_by_sluice_and_rdkafka() {
    let broker = TestBroker::start(&[]).await;
    let b = broker.bootstrap();
    ok(&b, &["topic", "create", "lines", "--partitions", "2"]).await;
    let lines: Vec<String> = (0..10).map(|i| format!("line {i}")).collect();
    let input = lines.join("\n") + "\n";
    let out = sluice(&b, &["produce", "-t", "lines", "-p", "1"], &input).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "produced 10 records to lines");

    let consumed = ok(&b, &["consume", "-t", "lines", "--from-beginning", "-n", "10"]).await;
    assert_eq!(consumed.lines().collect::<Vec<_>>(), lines);
    let consumed = ok(
        &b,
        &["consume", "-t", "lines", "-p", "1", "--offset", "7", "--exit-at-end"],
    )
    .await;
    assert_eq!(consumed.lines().collect::<Vec<_>>(), lines[7..]);
    // Nothing after the end: --exit-at-end from the latest offset prints nothing.
    assert_eq!(ok(&b, &["consume", "-t", "lines", "--exit-at-end"]).await, "");

    let rd = consumer(&b, &[]);
    assign(&rd, "lines", &[1], Offset::Beginning);
    let mut seen = Vec::new();
    while seen.len() < 10 {
        if let Some(m) = rd.poll(Duration::from_secs(10)) {
            seen.push(String::from_utf8(m.unwrap().payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(seen, lines);

    // Keys split at the separator go to Kafka's murmur2 partition, as rdkafka's Java-compatible
    // partitioner sends them.
    let keyed = ok(
        &b,
        &[
            "consume",
            "-t",
            "lines",
            "--from-beginning",
            "--exit-at-end",
            "--format",
            "json",
        ],
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&keyed).unwrap()["records"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
    let out = sluice(
        &b,
        &["produce", "-t", "lines", "--key-separator", ":"],
        "k1:v1\nk2:v2\n",
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let records = json(
        &b,
        &[
            "consume",
            "-t",
            "lines",
            "--from-beginning",
            "--exit-at-end",
            "--print-key",
        ],
    )
    .await;
    let mut keyed: Vec<(String, String, i64)> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["key"].is_null())
        .map(|r| {
            (
                r["key"].as_str().unwrap().to_string(),
                r["value"].as_str().unwrap().to_string(),
                r["partition"].as_i64().unwrap(),
            )
        })
        .collect();
    keyed.sort();
    let producer = producer(&b, &[("partitioner", "murmur2")]);
    for (key, value, partition) in &keyed {
        let delivered = producer
            .send(
                rdkafka::producer::FutureRecord::to("lines").key(key).payload(value),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        assert_eq!(i64::from(delivered.partition), *partition, "{key}");
    }
    assert_eq!(
        keyed.iter().map(|k| (k.0.as_str(), k.1.as_str())).collect::<Vec<_>>(),
        [("k1", "v1"), ("k2", "v2")]
    );
    let text = ok(
        &b,
        &[
            "consume",
            "-t",
            "lines",
            "-p",
            &keyed[0].2.to_string(),
            "--from-beginning",
            "--exit-at-end",
            "--print-key",
        ],
    )
    .await;
    assert!(text.contains("k1\tv1\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_lag_and_offset_resets_dry_run_first() {
    let broker = TestBroker::start(&[]).await;
    let b = broker.bootstrap();
    ok(&b, &["topic", "create", "events", "--partitions", "2"]).await;
    let input: String = (0..10).map(|i| format!("e{i}\n")).collect();
    assert_eq!(
        sluice(&b, &["produce", "-t", "events", "-p", "0"], &input)
            .await
            .status
            .code(),
        Some(0)
    );

    // A consumer of group "cg" reads 6 records and commits (rdkafka, assign mode).
    {
        let rd = consumer(&b, &[("group.id", "cg")]);
        assign(&rd, "events", &[0], Offset::Beginning);
        let mut read = 0;
        while read < 6 {
            if let Some(m) = rd.poll(Duration::from_secs(10)) {
                m.unwrap();
                read += 1;
            }
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("events", 0, Offset::Offset(6)).unwrap();
        rd.commit(&tpl, CommitMode::Sync).unwrap();
    }
    assert_eq!(committed(&b, "cg", "events", 0), Some(6));

    let described = json(&b, &["group", "describe", "cg"]).await;
    let row = described["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["partition"] == 0)
        .unwrap()
        .clone();
    assert_eq!(
        (
            row["committed_offset"].clone(),
            row["log_end_offset"].clone(),
            row["lag"].clone()
        ),
        (6.into(), 10.into(), 4.into())
    );
    let text = ok(&b, &["group", "describe", "cg"]).await;
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().take(6).collect::<Vec<_>>() == ["cg", "events", "0", "6", "10", "4"]),
        "{text}"
    );
    assert!(ok(&b, &["group", "list"]).await.lines().any(|l| l.starts_with("cg ")));

    // Dry run by default: the plan, nothing committed.
    let plan = json(
        &b,
        &["group", "reset-offsets", "cg", "--topic", "events:0", "--to-earliest"],
    )
    .await;
    assert_eq!(plan["executed"], false);
    assert_eq!(plan["partitions"][0]["new_offset"], 0);
    assert_eq!(committed(&b, "cg", "events", 0), Some(6));
    let text = ok(
        &b,
        &["group", "reset-offsets", "cg", "--topic", "events", "--to-earliest"],
    )
    .await;
    assert!(text.contains("dry run"), "{text}");
    assert_eq!(committed(&b, "cg", "events", 0), Some(6));

    let reset = |args: &'static [&'static str]| {
        let b = b.clone();
        async move {
            let mut all = vec!["group", "reset-offsets", "cg", "--execute"];
            all.extend_from_slice(args);
            ok(&b, &all).await
        }
    };
    reset(&["--topic", "events:0", "--to-earliest"]).await;
    assert_eq!(committed(&b, "cg", "events", 0), Some(0));
    reset(&["--topic", "events:0", "--to-latest"]).await;
    assert_eq!(committed(&b, "cg", "events", 0), Some(10));
    reset(&["--all-topics", "--shift-by", "-2"]).await;
    assert_eq!(committed(&b, "cg", "events", 0), Some(8));
    reset(&["--topic", "events:0", "--to-datetime", "1970-01-01T00:00:00.000"]).await;
    assert_eq!(committed(&b, "cg", "events", 0), Some(0));
    reset(&["--topic", "events:0", "--shift-by", "3"]).await;
    assert_eq!(committed(&b, "cg", "events", 0), Some(3));
    // No record at or after a time in the future: the log end, as Kafka's tool.
    reset(&["--topic", "events:0", "--to-datetime", "2999-01-01T00:00:00Z"]).await;
    assert_eq!(committed(&b, "cg", "events", 0), Some(10));

    ok(&b, &["group", "delete", "cg"]).await;
    let gone = sluice(&b, &["group", "describe", "cg"], "").await;
    assert_eq!(gone.status.code(), Some(1), "{}", stdout(&gone));
    assert!(stderr(&gone).contains("GROUP_ID_NOT_FOUND"), "{}", stderr(&gone));
}

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_created_listed_and_deleted_over_sasl_plain() {
    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let _broker = TestBroker::start(&[
        ("listeners", &listeners),
        ("sasl.enabled.mechanisms", "PLAIN"),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:admin"),
    ])
    .await;
    let b = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin.properties");
    std::fs::write(
        &admin,
        format!(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={}\n",
            JAAS.replace(" user_admin=\"admin-secret\" user_alice=\"alice-secret\"", "")
        ),
    )
    .unwrap();
    let config = admin.to_str().unwrap();
    let created = json(
        &b,
        &[
            "acl",
            "create",
            "--command-config",
            config,
            "--principal",
            "User:alice",
            "--operation",
            "READ",
            "--operation",
            "DESCRIBE",
            "--topic",
            "orders",
        ],
    )
    .await;
    assert_eq!(created["created"].as_array().unwrap().len(), 2);
    let listed = json(&b, &["acl", "list", "--command-config", config]).await;
    let mut operations: Vec<&str> = listed["acls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["operation"].as_str().unwrap())
        .collect();
    operations.sort();
    assert_eq!(operations, ["DESCRIBE", "READ"]);
    assert_eq!(listed["acls"][0]["principal"], "User:alice");
    assert_eq!(listed["acls"][0]["host"], "*");
    assert_eq!(listed["acls"][0]["resource_type"], "TOPIC");
    assert_eq!(listed["acls"][0]["permission"], "ALLOW");
    let text = ok(&b, &["acl", "list", "--command-config", config, "--topic", "orders"]).await;
    assert_eq!(text.lines().count(), 3, "{text}");

    // alice may not create ACLs: CLUSTER_AUTHORIZATION_FAILED, exit 1.
    let alice = dir.path().join("alice.properties");
    std::fs::write(
        &alice,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=alice\nsasl.password=alice-secret\n",
    )
    .unwrap();
    let refused = sluice(
        &b,
        &[
            "acl",
            "create",
            "--command-config",
            alice.to_str().unwrap(),
            "--principal",
            "User:alice",
            "--operation",
            "ALL",
            "--cluster",
        ],
        "",
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("CLUSTER_AUTHORIZATION_FAILED"),
        "{}",
        stderr(&refused)
    );
    // A wrong password: the login is refused, exit 1.
    let wrong = dir.path().join("wrong.properties");
    std::fs::write(
        &wrong,
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=alice\nsasl.password=nope\n",
    )
    .unwrap();
    let refused = sluice(&b, &["topic", "list", "--command-config", wrong.to_str().unwrap()], "").await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("SASL_AUTHENTICATION_FAILED"),
        "{}",
        stderr(&refused)
    );

    let deleted = json(
        &b,
        &[
            "acl",
            "delete",
            "--command-config",
            config,
            "--principal",
            "User:alice",
            "--topic",
            "orders",
        ],
    )
    .await;
    assert_eq!(deleted["deleted"].as_array().unwrap().len(), 2);
    let listed = json(&b, &["acl", "list", "--command-config", config]).await;
    assert_eq!(listed["acls"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_exits_3_and_bad_usage_exits_2() {
    let closed = format!("127.0.0.1:{}", free_port());
    let out = sluice(&closed, &["topic", "list"], "").await;
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).starts_with("sluice: topic list: "), "{}", stderr(&out));
    let out = sluice(&closed, &["group", "reset-offsets", "g", "--all-topics"], "").await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_members_shows_them_and_is_not_reset() {
    // Kafka's ConsumerGroupCommand resets only inactive groups; DeleteGroups refuses a group
    // with members (NON_EMPTY_GROUP).
    let broker = TestBroker::start(&[("group.initial.rebalance.delay.ms", "0")]).await;
    let b = broker.bootstrap();
    ok(&b, &["topic", "create", "live", "--partitions", "1"]).await;
    assert_eq!(
        sluice(&b, &["produce", "-t", "live"], "a\nb\nc\n").await.status.code(),
        Some(0)
    );
    let member = consumer(&b, &[("group.id", "active"), ("client.id", "cli-test-member")]);
    member.subscribe(&["live"]).unwrap();
    loop {
        if let Some(m) = member.poll(Duration::from_secs(10)) {
            m.unwrap();
            break;
        }
    }
    let described = json(&b, &["group", "describe", "active"]).await;
    assert_eq!(described["state"], "Stable", "{described}");
    assert_eq!(described["members"], 1);
    assert_eq!(
        described["partitions"][0]["client_id"], "cli-test-member",
        "{described}"
    );

    for execute in [false, true] {
        let mut args = vec!["group", "reset-offsets", "active", "--topic", "live", "--to-earliest"];
        if execute {
            args.push("--execute");
        }
        let refused = sluice(&b, &args, "").await;
        assert_eq!(refused.status.code(), Some(1));
        assert_eq!(
            stderr(&refused).trim(),
            "sluice: group reset-offsets active: Assignments can only be reset if the group 'active' is inactive, \
             but the current state is Stable."
        );
    }
    let refused = sluice(&b, &["group", "delete", "active"], "").await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("NON_EMPTY_GROUP"), "{}", stderr(&refused));
    drop(member);
}

/// A share group (KIP-932): `group list` names its type, `group describe` shows its start
/// offset, the log end, the lag as the broker counts it (DescribeShareGroupOffsets v1) and its
/// member (ShareGroupDescribe, DescribeShareGroupOffsets),
/// `group reset-offsets` moves its start offset once it is empty (AlterShareGroupOffsets), and
/// `group delete` deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_is_listed_and_described() {
    use kafka_protocol::messages::share_fetch_request::{AcknowledgementBatch, FetchPartition, FetchTopic};
    use kafka_protocol::messages::{GroupId, ShareFetchRequest, ShareGroupHeartbeatRequest};
    use kafka_protocol::protocol::StrBytes;
    let broker = TestBroker::start(&[]).await;
    let b = broker.bootstrap();
    ok(&b, &["topic", "create", "jobs", "--partitions", "1"]).await;
    let text = |s: &str| StrBytes::from_string(s.to_string());
    let member = "sluiceCliShareMember00";
    let mut raw = Raw::connect(broker.addr).await;
    let joined = raw
        .call(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(text("workers")))
                .with_member_id(text(member))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![topic("jobs")])),
        )
        .await;
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let topic_id = joined.assignment.expect("an assignment").topic_partitions[0].topic_id;
    let fetch = |epoch: i32, acks: Vec<AcknowledgementBatch>| {
        ShareFetchRequest::default()
            .with_group_id(Some(GroupId(text("workers"))))
            .with_member_id(Some(text(member)))
            .with_share_session_epoch(epoch)
            .with_max_wait_ms(2_000)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(2)
            .with_batch_size(2)
            .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(
                vec![
                FetchPartition::default().with_partition_index(0).with_acknowledgement_batches(acks),
            ],
            )])
    };
    // The group starts at the log end (share.auto.offset.reset latest): the first fetch opens
    // the session there, then five records come, one per line.
    raw.call(1, &fetch(0, vec![])).await;
    assert_eq!(
        sluice(&b, &["produce", "-t", "jobs", "-p", "0"], "a\nb\nc\nd\ne\n")
            .await
            .status
            .code(),
        Some(0)
    );
    let mut acquired = Vec::new();
    let mut epoch = 1;
    while epoch < 10 {
        let got = raw.call(1, &fetch(epoch, vec![])).await;
        epoch += 1;
        acquired.extend(
            got.responses[0].partitions[0]
                .acquired_records
                .iter()
                .map(|a| (a.first_offset, a.last_offset)),
        );
        if acquired.iter().any(|(first, _)| *first == 0) {
            break;
        }
    }
    let (first, last) = *acquired
        .iter()
        .find(|(first, _)| *first == 0)
        .expect("offset 0 acquired");
    // Accept all but the first: the start offset stays, and the lag (DescribeShareGroupOffsets
    // v1, KIP-1226) leaves out the accepted ones.
    assert!(last > first, "one batch of 5 records: acquired {acquired:?}");
    let accept = |from: i64, to: i64| {
        AcknowledgementBatch::default()
            .with_first_offset(from)
            .with_last_offset(to)
            .with_acknowledge_types(vec![1])
    };
    let acked = raw.call(1, &fetch(epoch, vec![accept(first + 1, last)])).await;
    assert_eq!(acked.responses[0].partitions[0].acknowledge_error_code, 0);
    let described = json(&b, &["group", "describe", "workers"]).await;
    let p = &described["partitions"][0];
    assert_eq!(
        (p["start_offset"].clone(), p["lag"].clone()),
        (first.into(), (5 - first - (last - first)).into()),
        "{described}"
    );
    // Then the first: the start offset moves past them all.
    let acked = raw.call(1, &fetch(epoch + 1, vec![accept(first, first)])).await;
    assert_eq!(acked.responses[0].partitions[0].acknowledge_error_code, 0);
    let start = last + 1;

    let listed = json(&b, &["group", "list"]).await;
    let row = listed["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == "workers")
        .cloned();
    let row = row.unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(
        (row["type"].clone(), row["state"].clone()),
        ("share".into(), "Stable".into())
    );
    let described = json(&b, &["group", "describe", "workers"]).await;
    assert_eq!(described["type"], "share", "{described}");
    assert_eq!(described["members"][0]["member_id"], member, "{described}");
    let p = &described["partitions"][0];
    assert_eq!(
        (
            p["topic"].clone(),
            p["start_offset"].clone(),
            p["log_end_offset"].clone(),
            p["lag"].clone()
        ),
        ("jobs".into(), start.into(), 5.into(), (5 - start).into()),
        "{described}"
    );
    let text_out = ok(&b, &["group", "describe", "workers"]).await;
    let expected = [
        "workers",
        "jobs",
        "0",
        &start.to_string(),
        "5",
        &(5 - start).to_string(),
        "1",
    ];
    assert!(
        text_out
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == expected),
        "{text_out}"
    );
    // A member is in: NON_EMPTY_GROUP. Once it leaves (epoch -1), the group goes.
    let refused = sluice(&b, &["group", "delete", "workers"], "").await;
    assert!(stderr(&refused).contains("NON_EMPTY_GROUP"), "{}", stderr(&refused));
    let left = raw
        .call(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(text("workers")))
                .with_member_id(text(member))
                .with_member_epoch(-1),
        )
        .await;
    assert_eq!(left.error_code, 0);
    // reset-offsets moves an empty share group's start offset (AlterShareGroupOffsets): a dry
    // run first, then --execute.
    let plan = json(
        &b,
        &["group", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest"],
    )
    .await;
    let row = &plan["partitions"][0];
    assert_eq!(
        (
            row["current_offset"].clone(),
            row["new_offset"].clone(),
            plan["executed"].clone()
        ),
        (start.into(), 0.into(), false.into()),
        "{plan}"
    );
    ok(
        &b,
        &[
            "group",
            "reset-offsets",
            "workers",
            "--all-topics",
            "--shift-by",
            "-1",
            "--execute",
        ],
    )
    .await;
    let described = json(&b, &["group", "describe", "workers"]).await;
    assert_eq!(described["partitions"][0]["start_offset"], start - 1, "{described}");
    ok(&b, &["group", "delete", "workers"]).await;
    let gone = sluice(&b, &["group", "describe", "workers"], "").await;
    assert_eq!(gone.status.code(), Some(1), "{}", stdout(&gone));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_logins_from_the_command_config() {
    use kafka_protocol::messages::AlterUserScramCredentialsRequest;
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
    use kafka_protocol::protocol::StrBytes;
    use sluice::sasl::scram::ScramMechanism;
    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let broker = TestBroker::start(&[
        ("listeners", &listeners),
        ("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"),
    ])
    .await;
    // bob's credentials, set over the PLAINTEXT listener (no authorizer).
    let upsertion = |mechanism: ScramMechanism, password: &str| {
        let salt = b"salt-of-bob".to_vec();
        ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_static_str("bob"))
            .with_mechanism(mechanism.wire())
            .with_iterations(4096)
            .with_salted_password(bytes::Bytes::from(mechanism.salted_password(
                password.as_bytes(),
                &salt,
                4096,
            )))
            .with_salt(bytes::Bytes::from(salt))
    };
    let mut raw = Raw::connect(broker.addr).await;
    let alter = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
        upsertion(ScramMechanism::Sha256, "bob-256"),
        upsertion(ScramMechanism::Sha512, "bob-512"),
    ]);
    let answer = raw.call(0, &alter).await;
    assert!(answer.results.iter().all(|r| r.error_code == 0), "{answer:?}");

    let b = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    for (mechanism, password, code) in [
        ("SCRAM-SHA-256", "bob-256", 0),
        ("SCRAM-SHA-512", "bob-512", 0),
        ("SCRAM-SHA-512", "bob-256", 1),
    ] {
        let file = dir.path().join("bob.properties");
        std::fs::write(
            &file,
            format!("security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.username=bob\nsasl.password={password}\n"),
        )
        .unwrap();
        let out = sluice(
            &b,
            &["cluster", "describe", "--command-config", file.to_str().unwrap()],
            "",
        )
        .await;
        assert_eq!(out.status.code(), Some(code), "{mechanism}: {}", stderr(&out));
        if code == 1 {
            assert!(stderr(&out).contains("SASL_AUTHENTICATION_FAILED"), "{}", stderr(&out));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_with_a_ca_pem_from_the_command_config() {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, "cli test CA");
    let ca = params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "broker");
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let keystore = dir.path().join("broker.pem");
    std::fs::write(&keystore, format!("{}{}{}", key.serialize_pem(), cert.pem(), ca.pem())).unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();

    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{port}");
    let location = keystore.display().to_string();
    let _broker = TestBroker::start(&[
        ("listeners", &listeners),
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", &location),
    ])
    .await;
    let b = format!("127.0.0.1:{port}");
    let props = dir.path().join("ssl.properties");
    std::fs::write(
        &props,
        format!("security.protocol=SSL\nssl.truststore.location={}\n", ca_file.display()),
    )
    .unwrap();
    let config = props.to_str().unwrap();
    let cluster = json(&b, &["cluster", "describe", "--command-config", config]).await;
    assert_eq!(cluster["brokers"][0]["port"], port, "{cluster}");
    ok(
        &b,
        &[
            "topic",
            "create",
            "secure",
            "--partitions",
            "1",
            "--command-config",
            config,
        ],
    )
    .await;
    let out = sluice(&b, &["produce", "-t", "secure", "--command-config", config], "x\ny\n").await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let consumed = ok(
        &b,
        &[
            "consume",
            "-t",
            "secure",
            "--from-beginning",
            "-e",
            "--command-config",
            config,
        ],
    )
    .await;
    assert_eq!(consumed, "x\ny\n");
    // Without the CA the broker's certificate is not trusted: no connection, exit 3.
    let plain = dir.path().join("no-ca.properties");
    std::fs::write(
        &plain,
        "security.protocol=SSL\nssl.truststore.location=/nonexistent.pem\n",
    )
    .unwrap();
    let out = sluice(&b, &["topic", "list", "--command-config", plain.to_str().unwrap()], "").await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unreadable truststore is a usage error: {}",
        stderr(&out)
    );
    let other_ca = dir.path().join("other-ca.pem");
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    std::fs::write(&other_ca, params.self_signed(&other_key).unwrap().pem()).unwrap();
    std::fs::write(
        &plain,
        format!(
            "security.protocol=SSL\nssl.truststore.location={}\n",
            other_ca.display()
        ),
    )
    .unwrap();
    let out = sluice(&b, &["topic", "list", "--command-config", plain.to_str().unwrap()], "").await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reach_each_partitions_leader_in_a_cluster() {
    // Produce, Fetch and ListOffsets go to each partition's leader (Metadata), group requests
    // to the coordinator (FindCoordinator): with one replica per partition on three brokers,
    // any other routing is refused with NOT_LEADER_OR_FOLLOWER or NOT_COORDINATOR.
    let cluster = common::cluster::Cluster::start(3).await;
    let b = cluster.bootstrap();
    ok(
        &b,
        &[
            "topic",
            "create",
            "spread",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
        ],
    )
    .await;
    let described = json(&b, &["topic", "describe", "spread"]).await;
    let leaders: std::collections::BTreeSet<i64> = described["topics"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["leader"].as_i64().unwrap())
        .collect();
    assert!(leaders.len() > 1, "partitions led by more than one broker: {described}");
    let brokers = json(&b, &["cluster", "describe"]).await;
    assert_eq!(brokers["brokers"].as_array().unwrap().len(), 3, "{brokers}");
    for p in 0..3 {
        let input: String = (0..4).map(|i| format!("p{p}-{i}\n")).collect();
        let out = sluice(&b, &["produce", "-t", "spread", "-p", &p.to_string()], &input).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let mut consumed: Vec<String> = ok(
        &b,
        &[
            "consume",
            "-t",
            "spread",
            "--from-beginning",
            "-e",
            "--group",
            "spreaders",
        ],
    )
    .await
    .lines()
    .map(str::to_string)
    .collect();
    consumed.sort();
    let mut expected: Vec<String> = (0..3).flat_map(|p| (0..4).map(move |i| format!("p{p}-{i}"))).collect();
    expected.sort();
    assert_eq!(consumed, expected);
    // consume --group committed its positions at the coordinator.
    let described = json(&b, &["group", "describe", "spreaders"]).await;
    for row in described["partitions"].as_array().unwrap() {
        assert_eq!(
            (row["committed_offset"].clone(), row["lag"].clone()),
            (4.into(), 0.into()),
            "{described}"
        );
    }
    ok(
        &b,
        &[
            "group",
            "reset-offsets",
            "spreaders",
            "--all-topics",
            "--shift-by",
            "-1",
            "--execute",
        ],
    )
    .await;
    let described = json(&b, &["group", "describe", "spreaders"]).await;
    assert!(
        described["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["lag"] == 1),
        "{described}"
    );
}

/// `sluice feature` (kafka-features.sh) and `sluice cluster unregister` (kafka-cluster.sh):
/// levels described, a dry run that changes nothing, a downgrade and an upgrade seen in the
/// next describe, a refused change as one Kafka error line with exit 1, and an unknown
/// broker id refused the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn features_are_described_and_changed_and_brokers_unregistered() {
    let broker = TestBroker::start(&[]).await;
    let b = broker.bootstrap();
    let level = |doc: &Value, name: &str| -> i64 {
        doc["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {doc}"))["finalized"]
            .as_i64()
            .unwrap()
    };
    let before = json(&b, &["feature", "describe"]).await;
    assert_eq!(level(&before, "transaction.version"), 2);
    assert_eq!(level(&before, "group.version"), 1);
    assert_eq!(level(&before, "share.version"), 1);
    assert_eq!(level(&before, "eligible.leader.replicas.version"), 1);
    assert_eq!(before["epoch"], 4);
    let text = ok(&b, &["feature", "describe"]).await;
    assert!(text.starts_with("FEATURE"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["transaction.version", "0", "2", "2", "4"]),
        "{text}"
    );

    let dry = ok(
        &b,
        &[
            "feature",
            "downgrade",
            "--feature",
            "transaction.version=1",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(dry, "transaction.version can be downgraded to 1.\n");
    assert_eq!(
        level(&json(&b, &["feature", "describe"]).await, "transaction.version"),
        2
    );
    let done = ok(&b, &["feature", "downgrade", "--feature", "transaction.version=1"]).await;
    assert_eq!(done, "transaction.version was downgraded to 1.\n");
    let after = json(&b, &["feature", "describe"]).await;
    assert_eq!(level(&after, "transaction.version"), 1);
    assert!(after["epoch"].as_i64().unwrap() > 4, "{after}");
    assert_eq!(
        ok(&b, &["feature", "disable", "--feature", "group.version"]).await,
        "group.version was disabled.\n"
    );
    assert_eq!(level(&json(&b, &["feature", "describe"]).await, "group.version"), 0);

    // Refused: one line naming Kafka's error, exit 1, nothing changed.
    let out = sluice(&b, &["feature", "upgrade", "--feature", "transaction.version=3"], "").await;
    assert_eq!(out.status.code(), Some(1));
    let line = stderr(&out);
    assert!(
        line.starts_with("sluice: feature upgrade: INVALID_UPDATE_VERSION: "),
        "{line}"
    );
    assert!(line.contains("only supports versions 0-2"), "{line}");
    let out = sluice(&b, &["feature", "upgrade", "--feature", "transaction.version"], "").await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let up = ok(
        &b,
        &[
            "feature",
            "upgrade",
            "--feature",
            "transaction.version=2",
            "--feature",
            "group.version=1",
        ],
    )
    .await;
    assert_eq!(
        up,
        "transaction.version was upgraded to 2.\ngroup.version was upgraded to 1.\n"
    );
    let last = json(&b, &["feature", "describe"]).await;
    assert_eq!(
        (level(&last, "transaction.version"), level(&last, "group.version")),
        (2, 1)
    );

    let out = sluice(&b, &["cluster", "unregister", "--id", "7"], "").await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "sluice: cluster unregister 7: BROKER_ID_NOT_REGISTERED: Broker ID 7 is not currently registered\n"
    );
    assert_eq!(
        ok(&b, &["cluster", "unregister", "--id", "1"]).await,
        "Broker 1 is no longer registered.\n"
    );
    broker.handle.shutdown().await;
}
