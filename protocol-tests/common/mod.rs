//! Shared test helpers: brokers in-process or as processes on ephemeral loopback ports, real
//! clients (`rdkafka`) configured against them, and a raw-frame client for misuse.
#![allow(dead_code)] // each test binary uses a different subset
pub mod checker;
pub mod cluster;
pub mod disk;
pub mod docker;
pub mod scrape;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use sluice::config::BrokerConfig;
use sluice::{Broker, BrokerHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A broker running in this process, with its own data directory.
pub struct TestBroker {
    pub handle: BrokerHandle,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl TestBroker {
    pub async fn start(settings: &[(&str, &str)]) -> TestBroker {
        let dir = tempfile::tempdir().expect("temp dir");
        let handle = start_in(dir.path(), settings).await;
        TestBroker {
            addr: handle.addr,
            handle,
            dir,
        }
    }

    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    /// Stops cleanly and starts again on the same data directory (a new port).
    pub async fn restart(self, settings: &[(&str, &str)]) -> TestBroker {
        let TestBroker { handle, dir, .. } = self;
        handle.shutdown().await;
        let handle = start_in(dir.path(), settings).await;
        TestBroker {
            addr: handle.addr,
            handle,
            dir,
        }
    }
}

pub async fn start_in(dir: &Path, settings: &[(&str, &str)]) -> BrokerHandle {
    let mut config = BrokerConfig::default();
    config.set("listeners", "127.0.0.1:0").unwrap();
    config.set("log.dirs", dir.to_str().unwrap()).unwrap();
    for (k, v) in settings {
        config.set(k, v).unwrap_or_else(|e| panic!("{e}"));
    }
    Broker::start(config).await.expect("broker starts")
}

/// A broker as a separate process (for kill -9).
pub struct BrokerProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

/// A free loopback port for a broker to listen on. Taken below Linux's ephemeral range, as the
/// cluster's are (`cluster::free_ports`): a port the kernel handed out for `:0` could be taken
/// as another test's outgoing source port before the broker binds it (seen once in CI:
/// "Address already in use").
pub fn free_port() -> u16 {
    cluster::free_ports(1)[0]
}

impl BrokerProcess {
    pub fn spawn(dir: &Path, port: u16, settings: &[(&str, &str)]) -> BrokerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .env("RUST_LOG", "warn");
        for (k, v) in settings {
            cmd.arg("--set").arg(format!("{k}={v}"));
        }
        let child = cmd.spawn().expect("spawn sluice");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "broker process did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        BrokerProcess { child, addr }
    }

    pub fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> FutureProducer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("message.timeout.ms", "30000")
        .set("enable.idempotence", "false")
        .set("acks", "all");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().expect("producer")
}

/// A consumer without a group, for explicit assignment.
pub fn consumer(bootstrap: &str, extra: &[(&str, &str)]) -> BaseConsumer {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        // librdkafka needs a group id for assign(); no group protocol is used (no subscribe,
        // no commits), so it never needs a coordinator.
        .set("group.id", "sluice-tests-assign-only");
    for (k, v) in extra {
        c.set(*k, *v);
    }
    c.create().expect("consumer")
}

/// Assigns `partitions` of `topic` from `offset`.
pub fn assign(consumer: &BaseConsumer, topic: &str, partitions: &[i32], offset: rdkafka::Offset) {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition_offset(topic, *p, offset).unwrap();
    }
    consumer.assign(&tpl).unwrap();
}

/// A raw Kafka protocol connection for frames real clients would never send.
pub struct Raw {
    pub stream: TcpStream,
    correlation_id: i32,
    /// How long `read_frame` waits for a response (30 s unless a test expects slow work).
    pub response_timeout: Duration,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw {
            stream: TcpStream::connect(addr).await.expect("connect"),
            correlation_id: 0,
            response_timeout: Duration::from_secs(30),
        }
    }

    /// Encodes a request at `version` with a proper header.
    pub fn encode<R: Request + Encodable>(&mut self, version: i16, request: &R) -> Bytes {
        self.correlation_id += 1;
        let key = ApiKey::try_from(R::KEY).unwrap();
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("sluice-raw-test")));
        let mut body = BytesMut::new();
        header.encode(&mut body, key.request_header_version(version)).unwrap();
        request.encode(&mut body, version).unwrap();
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(body.len() as i32);
        frame.extend_from_slice(&body);
        frame.freeze()
    }

    /// The correlation id `encode` gave its last frame.
    pub fn last_correlation_id(&self) -> i32 {
        self.correlation_id
    }

    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads one response frame; None when the broker closed the connection.
    pub async fn read_frame(&mut self) -> Option<Bytes> {
        let mut len = [0u8; 4];
        let read = tokio::time::timeout(self.response_timeout, self.stream.read_exact(&mut len)).await;
        match read {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return None,
            Err(_) => panic!("no response and no close within {:?}", self.response_timeout),
        }
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).await.ok()?;
        Some(Bytes::from(body))
    }

    /// Sends a request and decodes its response (header version from the response type).
    pub async fn call<R: Request + Encodable>(&mut self, version: i16, request: &R) -> R::Response
    where
        R::Response: Decodable + HeaderVersion,
    {
        let frame = self.encode(version, request);
        self.send_bytes(&frame).await;
        let mut body = self.read_frame().await.expect("a response");
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation_id);
        let response = R::Response::decode(&mut body, version).unwrap();
        assert_eq!(body.remaining(), 0, "trailing bytes in the response");
        response
    }

    /// True when the broker has closed this connection.
    pub async fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

pub fn topic(name: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(name.to_string()))
}

/// A unique topic name per test.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// The segment files of a partition directory, sorted.
pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

/// A Produce request of one batch set to one partition.
pub fn produce_request(
    topic_name: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    kafka_protocol::messages::ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic(topic_name))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ])
}

/// The log end offset of partition 0 of `name` (ListOffsets latest).
pub async fn latest_offset(raw: &mut Raw, name: &str) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = kafka_protocol::messages::ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default().with_name(topic(name)).with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1),
            ]),
        ]);
    let resp = raw.call(10, &req).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    resp.topics[0].partitions[0].offset
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`, ...), for `pid` or "self"; None when
/// the process or the field is gone.
pub fn proc_status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let value = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    value.split_whitespace().next()?.parse().ok()
}

/// A Fetch of partition 0 of `topic_name` from `offset` (read_uncommitted; add
/// `.with_isolation_level(1)` for read_committed), answered at once.
pub fn fetch_request(
    topic_name: &str,
    offset: i64,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> kafka_protocol::messages::FetchRequest {
    kafka_protocol::messages::FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![
            kafka_protocol::messages::fetch_request::FetchTopic::default()
                .with_topic(topic(topic_name))
                .with_partitions(vec![
                    kafka_protocol::messages::fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(partition_max_bytes)
                        .with_current_leader_epoch(-1)
                        .with_log_start_offset(-1),
                ]),
        ])
}

/// A CreateTopics request for one topic of `partitions` partitions, replication factor 1.
pub fn create_topic_request(
    name: &str,
    partitions: i32,
    timeout_ms: i32,
) -> kafka_protocol::messages::CreateTopicsRequest {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    kafka_protocol::messages::CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_string(name.to_string()),
                ))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ])
        .with_timeout_ms(timeout_ms)
}
