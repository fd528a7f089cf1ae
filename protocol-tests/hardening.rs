//! Hardening (issue 10): client-supplied counts that would overflow, ApiVersions software names,
//! idle connections, `max.connections` slots and the open files limit, each as Kafka behaves.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_protocol::messages::create_partitions_request::{CreatePartitionsAssignment, CreatePartitionsTopic};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_REQUEST: i16 = 42;
const POLICY_VIOLATION: i16 = 44;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn new_topic(name: &str, partitions: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
}

async fn create_topics(raw: &mut Raw, topics: Vec<CreatableTopic>) -> CreateTopicsResponse {
    raw.call(
        7,
        &CreateTopicsRequest::default().with_topics(topics).with_timeout_ms(5000),
    )
    .await
}

async fn partition_count(raw: &mut Raw, name: &str) -> usize {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let req = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(topic(name)))]));
    let resp = raw.call(12, &req).await;
    resp.topics[0].partitions.len()
}

fn grow(name: &str, count: i32, assignments: Option<usize>, validate_only: bool) -> CreatePartitionsRequest {
    let assignments =
        assignments.map(|n| vec![CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)]); n]);
    CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic(name))
                .with_count(count)
                .with_assignments(assignments),
        ])
        .with_timeout_ms(5000)
        .with_validate_only(validate_only)
}

#[tokio::test]
async fn create_partitions_with_counts_that_would_overflow_answers_invalid_partitions() {
    // Kafka's ReplicationControlManager.createPartitions: a count not above the current one is
    // INVALID_PARTITIONS, checked before the assignments are counted against the increase.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(
        create_topics(&mut raw, vec![new_topic("two", 2)]).await.topics[0].error_code,
        0
    );
    for version in 0..=3 {
        for count in [i32::MIN, i32::MIN + 1, -1, 0, 1] {
            for assignments in [None, Some(0), Some(1), Some(3)] {
                for validate_only in [false, true] {
                    let resp = raw.call(version, &grow("two", count, assignments, validate_only)).await;
                    let result = &resp.results[0];
                    let case = format!("v{version} count {count} assignments {assignments:?}");
                    assert_eq!(result.error_code, INVALID_PARTITIONS, "{case}");
                    assert_eq!(
                        result.error_message.as_deref(),
                        Some(&*format!(
                            "The topic two currently has 2 partition(s); {count} would not be an increase."
                        )),
                        "{case}"
                    );
                }
            }
        }
        let resp = raw.call(version, &grow("two", 2, Some(1), false)).await;
        assert_eq!(resp.results[0].error_code, INVALID_PARTITIONS);
        assert_eq!(
            resp.results[0].error_message.as_deref(),
            Some("Topic already has 2 partition(s).")
        );
    }
    // The assignments are counted against the increase only once the count is valid.
    let resp = raw.call(3, &grow("two", 4, Some(1), false)).await;
    assert_eq!(resp.results[0].error_code, INVALID_REPLICA_ASSIGNMENT);
    assert_eq!(
        resp.results[0].error_message.as_deref(),
        Some("Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")
    );
    // An unknown topic is named as such, whatever its count.
    let resp = raw.call(3, &grow("absent", i32::MIN, Some(1), false)).await;
    assert_eq!(resp.results[0].error_code, UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(partition_count(&mut raw, "two").await, 2, "nothing changed");
    let resp = raw.call(3, &grow("two", 3, Some(1), false)).await;
    assert_eq!(resp.results[0].error_code, 0, "the connection still serves");
    assert_eq!(partition_count(&mut raw, "two").await, 3);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn requests_adding_more_than_ten_thousand_partitions_are_refused_whole() {
    // Kafka's ReplicationControlManager.validateTotalNumberOfPartitions (MAX_PARTITIONS_PER_BATCH
    // 10000): every topic of the request gets POLICY_VIOLATION, nothing is created.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let message = Some("Excessively large number of partitions per request.");
    let resp = create_topics(&mut raw, vec![new_topic("huge", i32::MAX), new_topic("small", 1)]).await;
    for t in &resp.topics {
        assert_eq!(t.error_code, POLICY_VIOLATION, "{:?}", t.name);
        assert_eq!(t.error_message.as_deref(), message);
        assert_eq!((t.num_partitions, t.replication_factor), (-1, -1));
    }
    // Two counts whose int sum wraps negative in Java are still too many here.
    let resp = create_topics(&mut raw, vec![new_topic("h1", i32::MAX), new_topic("h2", i32::MAX)]).await;
    assert!(resp.topics.iter().all(|t| t.error_code == POLICY_VIOLATION));
    let resp = create_topics(&mut raw, vec![new_topic("h3", 6_000), new_topic("h4", 4_001)]).await;
    assert!(resp.topics.iter().all(|t| t.error_code == POLICY_VIOLATION));
    // Assignments count as partitions; a negative count counts as none (it fails alone).
    let assigned = vec![CreatableReplicaAssignment::default().with_broker_ids(vec![BrokerId(1)]); 10_001];
    let manual = new_topic("manual", -1)
        .with_replication_factor(-1)
        .with_assignments(assigned);
    let resp = create_topics(&mut raw, vec![manual]).await;
    assert_eq!(resp.topics[0].error_code, POLICY_VIOLATION);
    let resp = create_topics(&mut raw, vec![new_topic("negative", i32::MIN), new_topic("fine", 2)]).await;
    assert_eq!(resp.topics[0].error_code, INVALID_PARTITIONS);
    assert_eq!(resp.topics[1].error_code, 0);

    for version in 0..=3 {
        for validate_only in [false, true] {
            let resp = raw.call(version, &grow("fine", i32::MAX, None, validate_only)).await;
            assert_eq!(resp.results[0].error_code, POLICY_VIOLATION, "v{version}");
            assert_eq!(resp.results[0].error_message.as_deref(), message);
        }
    }
    // 10,000 new partitions in a request are allowed (checked without creating them).
    let resp = raw.call(3, &grow("fine", 10_002, None, true)).await;
    assert_eq!(resp.results[0].error_code, 0);
    assert_eq!(partition_count(&mut raw, "fine").await, 2);
    broker.handle.shutdown().await;
}

fn api_versions(name: &str, version: &str) -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_string(name.to_string()))
        .with_client_software_version(StrBytes::from_string(version.to_string()))
}

#[tokio::test]
async fn api_versions_v3_with_an_invalid_software_name_or_version_is_an_invalid_request() {
    // Kafka's ApiVersionsRequest.isValid (v3+): both match [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?;
    // KafkaApis answers getErrorResponse(INVALID_REQUEST), which lists no API, and keeps the
    // connection.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let invalid = [
        ("", "1.0"),
        ("client", ""),
        ("-client", "1.0"),
        ("client", "1.0-"),
        ("my client", "1.0"),
        ("client", "1_0"),
    ];
    for version in 3..=4 {
        for (name, software_version) in invalid {
            let resp = raw.call(version, &api_versions(name, software_version)).await;
            assert_eq!(
                resp.error_code, INVALID_REQUEST,
                "v{version} {name:?} {software_version:?}"
            );
            assert!(resp.api_keys.is_empty(), "no API listed");
        }
        let resp = raw.call(version, &api_versions("librdkafka", "2.3.0")).await;
        assert_eq!(resp.error_code, 0);
        assert!(!resp.api_keys.is_empty());
    }
    // Before v3 the fields are not on the wire: nothing to check.
    for version in 0..=2 {
        let resp = raw.call(version, &api_versions("", "")).await;
        assert_eq!(resp.error_code, 0, "v{version}");
    }
    broker.handle.shutdown().await;
}

/// Waits until `deadline` for the broker to close `stream`; when it was seen closed.
async fn closed_by(stream: &mut TcpStream, deadline: Instant) -> Option<Instant> {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(Instant::now()),
            Ok(Ok(_)) => continue, // a response still on its way
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn connections_idle_past_connections_max_idle_ms_are_closed_even_mid_frame() {
    // Kafka's connections.max.idle.ms (Selector idle expiry): counted from the last byte, so a
    // peer that sends part of a length prefix and goes silent is closed too.
    let broker = TestBroker::start(&[("connections.max.idle.ms", "500")]).await;
    let idle = Duration::from_millis(500);
    let bound = Duration::from_secs(10);

    let mut half_length = TcpStream::connect(broker.addr).await.unwrap();
    let mut half_body = TcpStream::connect(broker.addr).await.unwrap();
    let mut silent = TcpStream::connect(broker.addr).await.unwrap();
    let sent = Instant::now();
    half_length.write_all(&[0, 0]).await.unwrap();
    half_body.write_all(&[0, 0, 0, 100, 0, 18]).await.unwrap();
    for (what, stream) in [
        ("half a length", &mut half_length),
        ("half a body", &mut half_body),
        ("nothing", &mut silent),
    ] {
        let closed = closed_by(stream, sent + bound).await;
        let closed = closed.unwrap_or_else(|| panic!("a connection that sent {what} still open after {bound:?}"));
        // The broker's clock started at or after `sent` (connect) or just before it (accept).
        assert!(
            closed >= sent + idle - Duration::from_millis(100),
            "{what}: closed before the idle time"
        );
    }

    // A connection sending a request every 200 ms for 2 s stays open throughout.
    let mut active = Raw::connect(broker.addr).await;
    for _ in 0..10 {
        assert_eq!(active.call(3, &api_versions("sluice-test", "1.0")).await.error_code, 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(active.call(3, &api_versions("sluice-test", "1.0")).await.error_code, 0);
    // Then, silent, it is closed as well.
    let answered = Instant::now();
    let closed = closed_by(&mut active.stream, answered + bound)
        .await
        .expect("closed once silent");
    assert!(closed >= answered + idle - Duration::from_millis(100));
    broker.handle.shutdown().await;
}

/// Connects and asks ApiVersions v0: the connection when answered; None when closed, refused
/// or unanswered.
async fn served(addr: std::net::SocketAddr) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    // length 10: api key 18, version 0, correlation id 1, client id "" (length 0)
    stream
        .write_all(&[0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0, 0])
        .await
        .ok()?;
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut len))
        .await
        .ok()?
        .ok()?;
    let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(len)).ok()?];
    stream.read_exact(&mut body).await.ok()?;
    (body.get(4..6) == Some(&[0, 0][..])).then_some(stream)
}

/// A served connection, retried (bounded) while slots of closed connections come back.
async fn served_soon(addr: std::net::SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(stream) = served(addr).await {
            return stream;
        }
        assert!(
            Instant::now() < deadline,
            "no max.connections slot came back within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Peers that reset, mid-frame or not, give their slot back. A connection task that panics
/// or is aborted cannot be provoked from the network; server's unit tests cover that path.
#[tokio::test]
async fn max_connections_slots_come_back_when_connections_end_abruptly() {
    let broker = TestBroker::start(&[("max.connections", "2")]).await;
    for round in 0..3 {
        let mut held = vec![served_soon(broker.addr).await, served_soon(broker.addr).await];
        assert!(
            served(broker.addr).await.is_none(),
            "round {round}: a third connection is refused"
        );
        // One leaves mid-frame, both by a reset (linger 0).
        held[0].write_all(&[0, 0, 0, 50, 0]).await.unwrap();
        for stream in held {
            let stream = stream.into_std().unwrap();
            socket_linger_zero(&stream);
            drop(stream);
        }
    }
    served_soon(broker.addr).await;
    broker.handle.shutdown().await;
}

/// `max.connections` is dynamic (KIP-226): raised through IncrementalAlterConfigs on the
/// cluster-default BROKER resource, the next connection is admitted; lowered, open connections
/// stay and new ones are refused.
#[tokio::test]
async fn max_connections_changes_at_runtime() {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let broker = TestBroker::start(&[("max.connections", "2")]).await;
    let set = |value: &str| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str(""))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("max.connections"))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(value.to_string()))),
                ]),
        ])
    };
    let mut admin = Raw::connect(broker.addr).await;
    let _second = served_soon(broker.addr).await;
    assert!(
        served(broker.addr).await.is_none(),
        "a third connection is refused at 2"
    );
    let resp = admin.call(1, &set("3")).await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    let _third = served_soon(broker.addr).await;
    let resp = admin.call(1, &set("1")).await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert!(
        served(broker.addr).await.is_none(),
        "lowered: a new connection is refused"
    );
    let resp = admin.call(1, &set("3")).await;
    assert_eq!(resp.responses[0].error_code, 0, "the admin connection still works");
    broker.handle.shutdown().await;
}

/// SO_LINGER 0: closing sends a reset instead of a FIN.
fn socket_linger_zero(stream: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::linger>()).unwrap();
    // SAFETY: a valid socket descriptor and a linger struct that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            len,
        )
    };
    assert_eq!(rc, 0, "setsockopt SO_LINGER");
}

/// Linux: the soft limit is read from /proc, and lowered for the child before it starts.
#[cfg(target_os = "linux")]
#[test]
fn the_broker_raises_its_open_files_soft_limit_to_the_hard_limit() {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    fn open_files(limits: &str) -> (String, String) {
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .expect("Max open files");
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields[3].to_string(), fields[4].to_string())
    }
    let hard = open_files(&std::fs::read_to_string("/proc/self/limits").unwrap()).1;
    let soft_for_child: libc::rlim_t = 256;
    if hard != "unlimited" && hard.parse::<libc::rlim_t>().unwrap() <= soft_for_child {
        eprintln!("hard open files limit {hard}: nothing to raise, skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: only setrlimit (async-signal-safe) runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = soft_for_child;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn sluice");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "broker did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let mut log = String::new();
    child.stdout.take().unwrap().read_to_string(&mut log).unwrap();
    assert_eq!(
        open_files(&limits),
        (hard.clone(), hard.clone()),
        "soft limit raised to the hard one"
    );
    let line = log
        .lines()
        .find(|l| l.contains("RLIMIT_NOFILE"))
        .expect("the limits are logged");
    assert!(
        line.contains(&format!("soft={hard}")) && line.contains(&format!("hard={hard}")),
        "{line}"
    );
    assert!(line.contains(&format!("was={soft_for_child}")), "{line}");
}

#[tokio::test]
async fn a_data_directory_written_by_another_node_id_is_refused_at_start() {
    // Kafka's meta.properties: a directory remembers its node and cluster, so a broker started
    // with another node.id does not serve partitions recorded as led by a node that is gone.
    let broker = TestBroker::start(&[("node.id", "1")]).await;
    let dir = broker.dir;
    broker.handle.shutdown().await;
    let meta = std::fs::read_to_string(dir.path().join("meta.properties")).unwrap();
    assert!(meta.lines().any(|l| l == "node.id=1"), "{meta}");
    assert!(
        meta.lines()
            .any(|l| l.starts_with("cluster.id=") && l.len() > "cluster.id=".len()),
        "{meta}"
    );

    let mut config = sluice::config::BrokerConfig::default();
    config.set("listeners", "127.0.0.1:0").unwrap();
    config.set("log.dirs", dir.path().to_str().unwrap()).unwrap();
    config.set("node.id", "2").unwrap();
    let refused = sluice::Broker::start(config).await.err().expect("node 2 refused");
    let text = refused.to_string();
    assert!(
        text.contains("belongs to node 1") && text.contains("node.id is 2"),
        "{text}"
    );
    // The same node starts again.
    let again = start_in(dir.path(), &[("node.id", "1")]).await;
    again.shutdown().await;
}
