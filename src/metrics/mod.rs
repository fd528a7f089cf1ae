//! Prometheus metrics (issue 14): what the broker counts as it works, what it reads from its
//! state at each scrape, and `/metrics` on `metrics.listen` (`http.rs`).
//!
//! Names follow the Prometheus JMX exporter's mapping of Kafka's MBeans
//! (`kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t` becomes
//! `kafka_server_brokertopicmetrics_bytesin_total{topic="t"}`) and, for consumer lag, the
//! kafka-exporter's (`kafka_consumergroup_lag`), so dashboards made for those translate.
//! Kafka's rate meters are counters here (Prometheus takes the rate), its millisecond
//! histograms are histograms in seconds; what has no Kafka MBean is named `sluice_*`.
//!
//! Counting is a lock-free atomic add on a handle looked up in a family (a read lock on a
//! small map); what the broker already holds (partitions, groups, offsets) is read at the
//! scrape, so a broker nobody scrapes does no work for it.

pub mod error_codes;
pub mod http;
mod process;

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::LazyLock;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::coordinator::GroupCoordinator;
use crate::replica::ReplicaManager;

pub use error_codes::ErrorCodes;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    request: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    request: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Request time buckets: 0.1 ms to ~3.3 s, doubling.
fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
}

/// fsync buckets: 50 µs to ~1.6 s, doubling.
pub(crate) fn fsync_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// In-place append buckets: 10 µs to ~1.3 s, doubling.
pub(crate) fn append_in_place_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.0, 18))
}

/// What one broker counts. Cheap to clone handles out of; shared by `Arc`.
pub struct Metrics {
    registry: Registry,
    bytes_in: Family<TopicLabels, Counter>,
    messages_in: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
    messages_out: Family<TopicLabels, Counter>,
    replication_bytes_out: Family<TopicLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    queue_time: HistogramFamily<RequestLabels>,
    local_time: HistogramFamily<RequestLabels>,
    send_time: HistogramFamily<RequestLabels>,
    total_time: HistogramFamily<RequestLabels>,
    connections: Family<ListenerLabels, Gauge>,
    connections_created: Family<ListenerLabels, Counter>,
    /// The log flush time (Kafka's LogFlushRateAndTimeMs), in seconds.
    pub fsync: Histogram,
    /// How long async workers held a partition's writer to append in place
    /// (`replica::writer::Claim`), in seconds: the writes that ran on the network side.
    pub append_in_place: Histogram,
    /// In-place appends during which the worker's thread slept (each starts a back-off).
    pub append_in_place_slept: Counter,
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    pub retention_segments_deleted: Counter,
    pub retention_bytes_deleted: Counter,
    pub cleaner_passes: Counter,
    pub cleaner_bytes_read: Counter,
    pub cleaner_bytes_written: Counter,
    pub cleaner_records_removed: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let metrics = Metrics {
            registry: Registry::default(),
            bytes_in: Family::default(),
            messages_in: Family::default(),
            bytes_out: Family::default(),
            messages_out: Family::default(),
            replication_bytes_out: Family::default(),
            requests: Family::default(),
            errors: Family::default(),
            queue_time: Family::new_with_constructor(request_histogram),
            local_time: Family::new_with_constructor(request_histogram),
            send_time: Family::new_with_constructor(request_histogram),
            total_time: Family::new_with_constructor(request_histogram),
            connections: Family::default(),
            connections_created: Family::default(),
            fsync: fsync_histogram(),
            append_in_place: append_in_place_histogram(),
            append_in_place_slept: Counter::default(),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            retention_segments_deleted: Counter::default(),
            retention_bytes_deleted: Counter::default(),
            cleaner_passes: Counter::default(),
            cleaner_bytes_read: Counter::default(),
            cleaner_bytes_written: Counter::default(),
            cleaner_records_removed: Counter::default(),
        };
        let mut registry = Registry::default();
        let r = &mut registry;
        r.register(
            "kafka_server_brokertopicmetrics_bytesin",
            "Record batch bytes appended by producers, per topic (BytesInPerSec)",
            metrics.bytes_in.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_messagesin",
            "Records appended by producers, per topic (MessagesInPerSec)",
            metrics.messages_in.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_bytesout",
            "Record batch bytes sent to consumers, per topic (BytesOutPerSec)",
            metrics.bytes_out.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Record batch bytes sent to follower replicas, per topic (ReplicationBytesOutPerSec)",
            metrics.replication_bytes_out.clone(),
        );
        r.register(
            "kafka_server_brokertopicmetrics_messagesout",
            "Records sent to consumers, per topic",
            metrics.messages_out.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API (RequestsPerSec)",
            metrics.requests.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses, per API and error, NONE included (ErrorsPerSec)",
            metrics.errors.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_requestqueuetime_seconds",
            "From the request read whole to its handling begun (RequestQueueTimeMs)",
            metrics.queue_time.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_localtime_seconds",
            "From handling begun to the response ready, replication waits included (LocalTimeMs + RemoteTimeMs)",
            metrics.local_time.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_responsesendtime_seconds",
            "From the response ready to it written to the socket (ResponseQueueTimeMs + ResponseSendTimeMs)",
            metrics.send_time.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_totaltime_seconds",
            "From the request read whole to its response written (TotalTimeMs)",
            metrics.total_time.clone(),
        );
        r.register(
            "kafka_server_socket_server_metrics_connections",
            "Open client connections, per listener",
            metrics.connections.clone(),
        );
        r.register(
            "kafka_server_socket_server_metrics_connection_creation",
            "Client connections accepted, per listener",
            metrics.connections_created.clone(),
        );
        r.register(
            "kafka_log_logflushstats_logflush_seconds",
            "Time of one partition's fsync (LogFlushRateAndTimeMs)",
            metrics.fsync.clone(),
        );
        r.register(
            "sluice_log_append_in_place_seconds",
            "Time an async worker held a partition's writer to append a Produce request, or a follower's fetched batches, itself instead of handing it to the log-writer thread: write(2) run on the network side, which should stay in microseconds",
            metrics.append_in_place.clone(),
        );
        r.register(
            "sluice_log_append_in_place_slept",
            "In-place appends during which the worker thread slept (the disk, dirty-page throttling, a lock); each sends the shard's next appends to its log-writer thread for a back-off",
            metrics.append_in_place_slept.clone(),
        );
        r.register(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks committed for partitions this broker leads (IsrShrinksPerSec)",
            metrics.isr_shrinks.clone(),
        );
        r.register(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions committed for partitions this broker leads (IsrExpandsPerSec)",
            metrics.isr_expands.clone(),
        );
        r.register(
            "sluice_log_retention_deleted_segments",
            "Segments deleted by retention (retention.ms, retention.bytes)",
            metrics.retention_segments_deleted.clone(),
        );
        r.register(
            "sluice_log_retention_deleted_bytes",
            "Bytes of segments deleted by retention",
            metrics.retention_bytes_deleted.clone(),
        );
        r.register(
            "sluice_log_cleaner_passes",
            "Compaction passes that rewrote a partition's segments",
            metrics.cleaner_passes.clone(),
        );
        r.register(
            "sluice_log_cleaner_read_bytes",
            "Bytes the log cleaner read",
            metrics.cleaner_bytes_read.clone(),
        );
        r.register(
            "sluice_log_cleaner_written_bytes",
            "Bytes the log cleaner wrote",
            metrics.cleaner_bytes_written.clone(),
        );
        r.register(
            "sluice_log_cleaner_removed_records",
            "Records compaction removed (superseded values and expired tombstones)",
            metrics.cleaner_records_removed.clone(),
        );
        Metrics { registry, ..metrics }
    }

    /// A producer's batches appended to `topic`.
    pub fn produced(&self, topic: &str, bytes: u64, records: u64) {
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        self.bytes_in.get_or_create(&labels).inc_by(bytes);
        self.messages_in.get_or_create(&labels).inc_by(records);
    }

    /// Batches of `topic` sent in a Fetch response, to a consumer or a follower replica
    /// (counted apart, as Kafka's BrokerTopicStats does).
    pub fn fetched(&self, topic: &str, bytes: u64, records: u64, follower: bool) {
        if bytes == 0 {
            return;
        }
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        if follower {
            self.replication_bytes_out.get_or_create(&labels).inc_by(bytes);
            return;
        }
        self.bytes_out.get_or_create(&labels).inc_by(bytes);
        self.messages_out.get_or_create(&labels).inc_by(records);
    }

    /// The records a Fetch response carries, per topic (named by id from v13).
    pub fn fetch_response(
        &self,
        image: &crate::cluster::MetadataImage,
        follower: bool,
        response: &kafka_protocol::messages::FetchResponse,
        regions: &crate::api::spliced::Regions,
    ) {
        for topic in &response.responses {
            let name = match topic.topic.0.is_empty() {
                false => topic.topic.0.as_str(),
                true => match image.topic_by_id(&topic.topic_id) {
                    Some(t) => t.name.as_str(),
                    None => continue,
                },
            };
            for p in &topic.partitions {
                if let Some(records) = &p.records {
                    let (bytes, count) = match regions.get(records) {
                        Some(region) => (region.len() as u64, region.records()),
                        None => batch_totals(records),
                    };
                    self.fetched(name, bytes, count, follower);
                }
            }
        }
    }

    /// Each error code of a response to `key`.
    pub fn response_errors(&self, key: ApiKey, response: &dyn ErrorCodes) {
        let request = api_name(key);
        response.error_codes(&mut |code| {
            self.errors
                .get_or_create(&ErrorLabels {
                    request,
                    error: error_name(code),
                })
                .inc();
        });
    }

    /// One request's times, once its response is written.
    pub fn request_done(&self, key: ApiKey, times: RequestTimes) {
        let labels = RequestLabels { request: api_name(key) };
        self.requests.get_or_create(&labels).inc();
        self.queue_time
            .get_or_create(&labels)
            .observe(times.queue.as_secs_f64());
        self.local_time
            .get_or_create(&labels)
            .observe(times.local.as_secs_f64());
        self.send_time.get_or_create(&labels).observe(times.send.as_secs_f64());
        self.total_time
            .get_or_create(&labels)
            .observe((times.queue + times.local + times.send).as_secs_f64());
    }

    /// A connection accepted on `listener`, counted open until the guard drops.
    pub fn connection_opened(self: &Arc<Self>, listener: &str) -> ConnectionGauge {
        let labels = ListenerLabels {
            listener: listener.to_string(),
        };
        self.connections_created.get_or_create(&labels).inc();
        let gauge = self.connections.get_or_create(&labels).clone();
        gauge.inc();
        ConnectionGauge { gauge }
    }

    /// The whole exposition: the counters, then what is read from the broker's state now.
    pub fn render(&self, state: &State) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let mut now = Registry::default();
        state.collect(&mut now);
        process::collect(&mut now);
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &now);
        let _ = encode_eof(&mut out);
        out
    }
}

/// Keeps a connection counted in `connection_count` while it lives.
pub struct ConnectionGauge {
    gauge: Gauge,
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Where a request's time went (Kafka's RequestChannel times, grouped as we measure them).
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestTimes {
    pub queue: Duration,
    pub local: Duration,
    pub send: Duration,
}

/// What the scrape reads from the broker: its partitions, its groups, its metadata.
pub struct State {
    pub replicas: Arc<ReplicaManager>,
    pub coordinator: Arc<GroupCoordinator>,
    pub share: Arc<crate::share::ShareManager>,
    pub controller: Arc<crate::cluster::Controller>,
    pub node_id: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    consumergroup: String,
    topic: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AckTypeLabels {
    acktype: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SharePartitionLabels {
    group: String,
    topic: String,
    partition: String,
}

impl State {
    fn collect(&self, r: &mut Registry) {
        let image = self.controller.image();
        let partitions = self.replicas.all();
        let (mut leaders, mut under_replicated, mut under_min_isr) = (0i64, 0i64, 0i64);
        let size: Family<PartitionLabels, Gauge> = Family::default();
        let log_end: Family<PartitionLabels, Gauge> = Family::default();
        let log_start: Family<PartitionLabels, Gauge> = Family::default();
        let high_watermark: Family<PartitionLabels, Gauge> = Family::default();
        let mut high_watermarks = std::collections::HashMap::new();
        for p in &partitions {
            let labels = PartitionLabels {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition.to_string(),
            };
            if let Ok(bytes) = p.size_bytes() {
                size.get_or_create(&labels)
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            if let Ok(offsets) = p.offsets() {
                log_end.get_or_create(&labels).set(offsets.log_end_offset);
                log_start.get_or_create(&labels).set(offsets.log_start_offset);
                if p.is_leader() {
                    high_watermark.get_or_create(&labels).set(offsets.high_watermark);
                    high_watermarks.insert((p.tp.topic.clone(), p.tp.partition), offsets.high_watermark);
                }
            }
            if p.is_leader() {
                leaders += 1;
                let replicas = image.topic(&p.tp.topic).map_or(1, |t| t.replicas(p.tp.partition).len());
                let isr = p.isr().len().max(1);
                if isr < replicas {
                    under_replicated += 1;
                }
                if i32::try_from(isr).unwrap_or(i32::MAX) < p.min_insync_replicas() {
                    under_min_isr += 1;
                }
            }
        }
        let offline = image
            .topics
            .values()
            .map(|t| (0..t.partitions).filter(|&p| t.leader(p) < 0).count())
            .sum::<usize>();
        let gauge = |r: &mut Registry, name: &str, help: &str, value: i64| {
            let g: Gauge = Gauge::default();
            g.set(value);
            r.register(name, help, g);
        };
        gauge(
            r,
            "kafka_server_replicamanager_partitioncount",
            "Partitions with a replica on this broker",
            partitions.len() as i64,
        );
        gauge(
            r,
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads",
            leaders,
        );
        gauge(
            r,
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set",
            under_replicated,
        );
        gauge(
            r,
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions this broker leads whose ISR is below min.insync.replicas",
            under_min_isr,
        );
        gauge(
            r,
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions of the cluster without a leader, as this broker's metadata has them",
            offline as i64,
        );
        gauge(
            r,
            "kafka_log_logmanager_offlinelogdirectorycount",
            "This broker's log directories that are offline after a storage error (0 or 1)",
            i64::from(self.replicas.log_dir.is_offline()),
        );
        gauge(
            r,
            "kafka_controller_kafkacontroller_globaltopiccount",
            "Topics in the cluster",
            image.topics.len() as i64,
        );
        gauge(
            r,
            "sluice_broker_info",
            "This broker's node id as the value (for joining with node labels)",
            i64::from(self.node_id),
        );
        r.register("kafka_log_log_size", "Bytes of a partition's log on this broker", size);
        r.register(
            "kafka_log_log_logendoffset",
            "A partition's log end offset on this broker",
            log_end,
        );
        r.register(
            "kafka_log_log_logstartoffset",
            "A partition's log start offset on this broker",
            log_start,
        );
        r.register(
            "kafka_topic_partition_current_offset",
            "High watermark of each partition this broker leads (kafka-exporter's name)",
            high_watermark,
        );

        let groups: Family<StateLabels, Gauge> = Family::default();
        for state in [
            "PreparingRebalance",
            "CompletingRebalance",
            "Stable",
            "Empty",
            "Assigning",
            "Reconciling",
        ] {
            let _ = groups.get_or_create(&StateLabels { state: state.into() });
        }
        let committed: Family<LagLabels, Gauge> = Family::default();
        let lag: Family<LagLabels, Gauge> = Family::default();
        for (group, _, state, _) in self.coordinator.list() {
            groups.get_or_create(&StateLabels { state: state.into() }).inc();
            for ((topic, partition), offset) in self.coordinator.fetch_offsets(&group) {
                let labels = LagLabels {
                    consumergroup: group.clone(),
                    topic: topic.clone(),
                    partition: partition.to_string(),
                };
                committed.get_or_create(&labels).set(offset.offset);
                // Lag where this broker leads the partition too (its high watermark is known
                // here); a broker that does not reports the committed offset only.
                if let Some(hw) = high_watermarks.get(&(topic, partition)) {
                    lag.get_or_create(&labels).set((hw - offset.offset).max(0));
                }
            }
        }
        r.register(
            "kafka_coordinator_group_groups",
            "Consumer groups this broker coordinates, per state",
            groups,
        );
        r.register(
            "kafka_consumergroup_current_offset",
            "A group's committed offset (kafka-exporter's name)",
            committed,
        );
        r.register(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset (kafka-exporter's name)",
            lag,
        );
        self.collect_share(r, &image);
    }

    /// Kafka's `ShareGroupMetrics` and `SharePartitionMetrics`, for the share-partitions led
    /// here.
    fn collect_share(&self, r: &mut Registry, image: &crate::cluster::MetadataImage) {
        let share = self.share.metrics();
        let acknowledged: Family<AckTypeLabels, Counter> = Family::default();
        for (kind, count) in share.acknowledged {
            acknowledged
                .get_or_create(&AckTypeLabels { acktype: kind.into() })
                .inc_by(count);
        }
        r.register(
            "kafka_server_sharegroupmetrics_recordacknowledgements",
            "Records share consumers acknowledged here, by type (Accept, Release, Reject)",
            acknowledged,
        );
        let in_flight: Family<SharePartitionLabels, Gauge> = Family::default();
        let lock_timeouts: Family<SharePartitionLabels, Counter> = Family::default();
        for p in share.partitions {
            let Some(topic) = image.topic_by_id(&p.topic_id) else {
                continue;
            };
            let labels = SharePartitionLabels {
                group: p.group,
                topic: topic.name.clone(),
                partition: p.partition.to_string(),
            };
            in_flight
                .get_or_create(&labels)
                .set(i64::try_from(p.in_flight).unwrap_or(i64::MAX));
            lock_timeouts.get_or_create(&labels).inc_by(p.lock_timeouts);
        }
        r.register(
            "kafka_server_sharepartitionmetrics_inflightmessagecount",
            "Offsets in a share-partition's in-flight window (acquired, available again, or done past the start offset)",
            in_flight,
        );
        r.register(
            "kafka_server_sharepartitionmetrics_acquisitionlocktimeout",
            "Records of a share-partition whose acquisition lock expired (counted when the share-partition is next used)",
            lock_timeouts,
        );
    }
}

/// Kafka's request names (`request="Produce"`), one static string per API key.
fn api_name(key: ApiKey) -> &'static str {
    static NAMES: LazyLock<Vec<(i16, &'static str)>> = LazyLock::new(|| {
        ApiKey::iter()
            .map(|k| (k as i16, &*Box::leak(format!("{k:?}").into_boxed_str())))
            .collect()
    });
    NAMES
        .iter()
        .find(|(k, _)| *k == key as i16)
        .map_or("Unknown", |(_, name)| name)
}

/// Kafka's error names (`error="UNKNOWN_TOPIC_OR_PARTITION"`), from kafka-protocol's variants.
pub fn error_name(code: i16) -> &'static str {
    static NAMES: LazyLock<std::collections::HashMap<i16, &'static str>> = LazyLock::new(|| {
        (-1..=200)
            .filter_map(|code| {
                let name = match code {
                    0 => "NONE".to_string(),
                    _ => screaming_snake(&format!(
                        "{:?}",
                        kafka_protocol::error::ResponseError::try_from_code(code)?
                    )),
                };
                Some((code, &*Box::leak(name.into_boxed_str())))
            })
            .collect()
    });
    NAMES.get(&code).copied().unwrap_or("UNKNOWN_SERVER_ERROR")
}

/// `UnknownTopicOrPartition` → `UNKNOWN_TOPIC_OR_PARTITION`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        let _ = write!(out, "{}", c.to_ascii_uppercase());
    }
    out
}

/// The bytes of records a Fetch response carries.
pub fn response_record_bytes(
    response: &kafka_protocol::messages::FetchResponse,
    regions: &crate::api::spliced::Regions,
) -> usize {
    let partitions = response.responses.iter().flat_map(|t| &t.partitions);
    partitions
        .filter_map(|p| p.records.as_ref())
        .map(|r| regions.len_of(r))
        .sum()
}

/// Record count and bytes of the batches in `records` (a Fetch partition's records field),
/// read from each batch header (records count at byte 57, v2 magic) without decoding.
pub fn batch_totals(records: &[u8]) -> (u64, u64) {
    let mut count = 0u64;
    let mut at = 0usize;
    while let Some(header) = records.get(at..at + 61) {
        let len = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let Ok(len) = usize::try_from(len) else { break };
        if records.len() < at + 12 + len {
            break; // a partial batch at the end of a fetch
        }
        count += u64::from(u32::from_be_bytes([header[57], header[58], header[59], header[60]]));
        at += 12 + len;
    }
    (records.len() as u64, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(api_name(ApiKey::Produce), "Produce");
        assert_eq!(api_name(ApiKey::OffsetCommit), "OffsetCommit");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
    }

    #[test]
    fn counters_render_under_the_jmx_exporter_names() {
        let m = Metrics::new();
        m.produced("orders", 100, 3);
        m.produced("orders", 50, 1);
        m.request_done(ApiKey::Produce, RequestTimes::default());
        let mut out = String::new();
        encode_registry(&mut out, &m.registry).unwrap();
        assert!(
            out.contains("kafka_server_brokertopicmetrics_bytesin_total{topic=\"orders\"} 150"),
            "{out}"
        );
        assert!(out.contains("kafka_server_brokertopicmetrics_messagesin_total{topic=\"orders\"} 4"));
        assert!(out.contains("kafka_network_requestmetrics_requests_total{request=\"Produce\"} 1"));
    }
}
