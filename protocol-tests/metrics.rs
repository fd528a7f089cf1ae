//! Prometheus metrics (issue 14): `/metrics` on `metrics.listen` counts what real clients did,
//! Debian's `promtool check metrics` accepts the exposition, and a real Prometheus scraping a
//! broker process answers a PromQL query for consumer lag with the lag the test made.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::scrape::{get, sample, samples};
use common::*;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, metadata_request::MetadataRequestTopic};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureRecord;

async fn produce(bootstrap: &str, topic: &str, n: usize) {
    let producer = producer(bootstrap, &[]);
    for i in 0..n {
        let value = format!("value-{i}");
        producer
            .send(
                FutureRecord::<(), _>::to(topic).partition(0).payload(&value),
                Duration::from_secs(30),
            )
            .await
            .expect("produce");
    }
}

/// Commits `offset` for partition 0 of `topic` in `group` (a simple consumer's commit, as
/// kafka-consumer-groups' reset does), then reads it back.
fn commit(bootstrap: &str, group: &str, topic: &str, offset: i64) {
    let consumer: BaseConsumer = consumer(bootstrap, &[("group.id", group)]);
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset))
        .unwrap();
    consumer.commit(&tpl, CommitMode::Sync).expect("commit");
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed");
    let back = committed.find_partition(topic, 0).expect("partition 0").offset();
    assert_eq!(back, rdkafka::Offset::Offset(offset));
}

fn promtool_accepts(exposition: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; .ci/run installs it)");
    promtool.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_clients_did_and_promtool_accepts_them() {
    let broker = TestBroker::start(&[("metrics.listen", "127.0.0.1:0")]).await;
    let metrics = broker.handle.metrics_addr.expect("metrics.listen bound");
    let bootstrap = broker.bootstrap();
    let topic = unique("metered");
    let group = unique("lagging");
    produce(&bootstrap, &topic, 10).await;
    // Read all ten as a consumer: bytes and messages out.
    let reader = consumer(&bootstrap, &[]);
    assign(&reader, &topic, &[0], rdkafka::Offset::Beginning);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut read = 0;
    while read < 10 {
        assert!(Instant::now() < deadline, "read {read} of 10");
        if let Some(m) = reader.poll(Duration::from_millis(200)) {
            m.expect("fetch").payload().expect("a value");
            read += 1;
        }
    }
    commit(&bootstrap, &group, &topic, 4);
    // Metadata for a topic that does not exist, without auto-creation: an error to count.
    let mut raw = Raw::connect(broker.addr).await;
    let missing = unique("missing");
    let resp: MetadataResponse = raw
        .call(
            9,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(common::topic(&missing))),
                ]))
                .with_allow_auto_topic_creation(false),
        )
        .await;
    assert_eq!(resp.topics[0].error_code, 3);

    let (head, body) = get(metrics, "/metrics", "*/*");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let all = samples(&body);
    let t = format!("topic=\"{topic}\"");
    assert_eq!(
        sample(
            &all,
            &format!("kafka_server_brokertopicmetrics_messagesin_total{{{t}}}")
        ),
        10.0
    );
    assert!(sample(&all, &format!("kafka_server_brokertopicmetrics_bytesin_total{{{t}}}")) > 10.0 * 7.0);
    assert_eq!(
        sample(
            &all,
            &format!("kafka_server_brokertopicmetrics_messagesout_total{{{t}}}")
        ),
        10.0
    );
    assert!(sample(&all, &format!("kafka_server_brokertopicmetrics_bytesout_total{{{t}}}")) > 0.0);
    assert!(sample(&all, "kafka_network_requestmetrics_requests_total{request=\"Produce\"}") >= 10.0);
    assert!(
        sample(
            &all,
            "kafka_network_requestmetrics_totaltime_seconds_count{request=\"Produce\"}"
        ) >= 10.0
    );
    assert!(
        sample(
            &all,
            "kafka_network_requestmetrics_localtime_seconds_sum{request=\"Produce\"}"
        ) > 0.0
    );
    assert!(
        sample(
            &all,
            "kafka_network_requestmetrics_errors_total{request=\"Metadata\",error=\"UNKNOWN_TOPIC_OR_PARTITION\"}"
        ) >= 1.0
    );
    assert!(
        sample(
            &all,
            "kafka_network_requestmetrics_errors_total{request=\"Produce\",error=\"NONE\"}"
        ) >= 10.0
    );
    // The raw connection at least is open.
    assert!(
        sample(
            &all,
            "kafka_server_socket_server_metrics_connections{listener=\"PLAINTEXT\"}"
        ) >= 1.0
    );
    let p0 = format!("{t},partition=\"0\"");
    assert!(sample(&all, &format!("kafka_log_log_size{{{p0}}}")) > 0.0);
    assert_eq!(sample(&all, &format!("kafka_log_log_logendoffset{{{p0}}}")), 10.0);
    assert_eq!(
        sample(&all, &format!("kafka_topic_partition_current_offset{{{p0}}}")),
        10.0
    );
    let g = format!("consumergroup=\"{group}\",{p0}");
    assert_eq!(sample(&all, &format!("kafka_consumergroup_current_offset{{{g}}}")), 4.0);
    assert_eq!(sample(&all, &format!("kafka_consumergroup_lag{{{g}}}")), 6.0);
    assert!(sample(&all, "kafka_coordinator_group_groups{state=\"Empty\"}") >= 1.0);
    assert!(sample(&all, "kafka_log_logflushstats_logflush_seconds_count") >= 1.0);
    // The producer's first append finds its partition's writer idle and runs in place.
    assert!(sample(&all, "sluice_log_append_in_place_seconds_count") >= 1.0);
    // Present (sample panics otherwise), whether or not that append slept.
    assert!(sample(&all, "sluice_log_append_in_place_slept_total") >= 0.0);
    assert!(sample(&all, "kafka_server_replicamanager_leadercount") >= 1.0);
    assert_eq!(
        sample(&all, "kafka_server_replicamanager_underreplicatedpartitions"),
        0.0
    );
    assert!(sample(&all, "process_resident_memory_bytes") > 1e6);
    assert!(sample(&all, "process_open_fds") > 0.0);
    promtool_accepts(&body);

    // Prometheus asks for OpenMetrics and gets it; other paths are not found.
    let (head, body) = get(
        metrics,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"));
    assert!(body.contains("# TYPE kafka_server_brokertopicmetrics_bytesin counter"));
    let (head, _) = get(metrics, "/", "*/*");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    drop(reader);
    broker.handle.shutdown().await;
}

/// A Prometheus server from Debian's package, killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn scraping(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: sluice\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's prometheus package; .ci/run installs it)");
        Prometheus { child, addr, _dir: dir }
    }

    /// The answer to an instant query; None while Prometheus is not up.
    fn answer(&self, promql: &str) -> Option<serde_json::Value> {
        let encoded: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        std::net::TcpStream::connect(self.addr).ok()?; // not up yet
        let (_, body) = get(self.addr, &format!("/api/v1/query?query={encoded}"), "application/json");
        // Chunked or not, the JSON object is the body's outermost braces.
        let json = &body[body.find('{')?..=body.rfind('}')?];
        serde_json::from_str(json).ok()
    }

    /// The value of an instant query's only series, once it has one.
    fn query(&self, promql: &str) -> Option<String> {
        let answer = self.answer(promql)?;
        let result = answer["data"]["result"].as_array()?;
        let [series] = result.as_slice() else { return None };
        series["value"][1].as_str().map(str::to_string)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_broker_and_answers_a_lag_query() {
    // `sluice serve --set metrics.listen=HOST:PORT`, as the README's Monitoring section says.
    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let broker = BrokerProcess::spawn(dir.path(), free_port(), &[("metrics.listen", &metrics.to_string())]);
    let bootstrap = broker.addr.to_string();
    let topic = unique("scraped");
    let group = unique("scraped-group");
    produce(&bootstrap, &topic, 10).await;
    commit(&bootstrap, &group, &topic, 7);
    let prometheus = Prometheus::scraping(metrics);
    let promql = format!("sum(kafka_consumergroup_lag{{consumergroup=\"{group}\",topic=\"{topic}\"}})");
    let deadline = Instant::now() + Duration::from_secs(90);
    let lag = loop {
        if let Some(value) = prometheus.query(&promql) {
            break value;
        }
        assert!(Instant::now() < deadline, "Prometheus never had {promql}");
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(lag, "3", "10 records, 7 committed");
    // And a rate over the producer's bytes: Prometheus parsed the counters as counters.
    let bytes = format!("kafka_server_brokertopicmetrics_bytesin_total{{topic=\"{topic}\"}}");
    let value = prometheus.query(&bytes).expect("bytes in scraped");
    assert!(value.parse::<f64>().unwrap() > 0.0, "{value}");
    // The lag as the dashboard computes it across brokers: the partition leader's high
    // watermark minus the coordinator's committed offset.
    let across = format!(
        "max by (topic, partition) (kafka_topic_partition_current_offset{{topic=\"{topic}\"}}) - on (topic, partition) group_right max by (consumergroup, topic, partition) (kafka_consumergroup_current_offset{{consumergroup=\"{group}\"}})"
    );
    assert_eq!(prometheus.query(&across).as_deref(), Some("3"));
    // Every query of the shipped Grafana dashboard parses and evaluates.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docker/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$job", ".*");
            let answer = prometheus.answer(&expr).expect("Prometheus answers");
            assert_eq!(answer["status"], "success", "{expr}: {answer}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} dashboard queries");
    drop(prometheus);
    drop(broker);
}
