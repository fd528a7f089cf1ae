//! Followers copy their leaders (Kafka's `ReplicaFetcherThread`): one task per leader broker
//! fetches every partition this node follows there, with ordinary Fetch requests (v15,
//! `ReplicaState` naming this node), and appends what comes back exactly as the leader stored
//! it (`Partition::append_as_follower`).
//!
//! - **Joining a leader.** A partition that starts following (a new leader or a new epoch)
//!   first asks the leader where its own latest epoch ends (OffsetForLeaderEpoch, KIP-101) and
//!   cuts whatever it holds past that: the tail a deposed leader wrote and nobody else
//!   acknowledged.
//! - **Durable before counted.** When acks=all waits for fsync (`log.flush.interval.messages
//!   = 1`), the next fetch is sent only once what was appended is fsynced, so the fetch
//!   offset the leader records says "held and durable here", and the high watermark moves
//!   only over batches on disk on every in-sync replica.
//! - **The high watermark** comes with each answer; the follower takes it, capped at its own
//!   log end, and its log start follows the leader's up to that high watermark (retention
//!   and DeleteRecords on the leader reach the followers at their next fetch).
//! - **Errors.** FENCED_LEADER_EPOCH: this node's metadata is behind; the partition waits
//!   until the replica manager follows again at the new epoch. OFFSET_OUT_OF_RANGE below the
//!   leader's log start: the log restarts there (retention removed what it lacks); above the
//!   leader's end: it truncates again by epoch. Anything else (the leader's node down, not
//!   leader yet, UNKNOWN_LEADER_EPOCH) is retried after `replica.fetch.backoff.ms`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use super::{Partition, TopicPartition};
use crate::cluster::BrokerInfo;
use crate::cluster::broker_client::{BrokerClient, ClientLimits};
use crate::config::BrokerConfig;

/// The Fetch version followers send (ReplicaState, topic ids).
const FETCH_VERSION: i16 = 15;
/// The OffsetForLeaderEpoch version followers send (replica id, flexible).
const EPOCH_VERSION: i16 = 4;
/// Room for a fetch answer's framing beyond its records.
const RESPONSE_OVERHEAD_BYTES: usize = 1 << 20;

/// How followers fetch (from the broker's `replica.fetch.*` keys).
#[derive(Debug, Clone, Copy)]
struct Settings {
    wait_ms: i32,
    partition_max_bytes: i32,
    response_max_bytes: i32,
    backoff: Duration,
}

/// What a follower does next for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Ask the leader where this log's latest epoch ends and cut past it.
    Truncate,
    Fetch,
    /// Fenced: wait for the replica manager to follow again at a newer epoch.
    Stale,
}

/// One followed partition.
#[derive(Clone)]
struct Followed {
    partition: Arc<Partition>,
    leader_epoch: i32,
    step: Step,
    /// Not before this instant (after an error).
    retry_at: Option<Instant>,
}

/// The partitions followed at one leader, shared with its task.
struct LeaderLink {
    leader: Mutex<Arc<BrokerInfo>>,
    partitions: Mutex<HashMap<TopicPartition, Followed>>,
    changed: Notify,
}

impl LeaderLink {
    fn partitions(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, Followed>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every leader this node follows partitions of, with its fetch task.
pub struct Fetchers {
    node_id: i32,
    settings: Settings,
    client: Arc<BrokerClient>,
    links: Mutex<HashMap<i32, Arc<LeaderLink>>>,
}

impl Fetchers {
    pub fn new(config: &BrokerConfig) -> Fetchers {
        let settings = Settings {
            wait_ms: i32::try_from(config.replica_fetch_wait_max_ms).unwrap_or(i32::MAX),
            partition_max_bytes: config.replica_fetch_max_bytes,
            response_max_bytes: config.replica_fetch_response_max_bytes,
            backoff: Duration::from_millis(config.replica_fetch_backoff_ms),
        };
        let limits = ClientLimits {
            // The leader holds a fetch up to its wait, then answers.
            request_timeout: Duration::from_millis(config.replica_fetch_wait_max_ms + 10_000),
            response_bytes_max: usize::try_from(settings.response_max_bytes.max(settings.partition_max_bytes))
                .unwrap_or(usize::MAX)
                .saturating_add(RESPONSE_OVERHEAD_BYTES)
                .saturating_mul(2),
            ..ClientLimits::default()
        };
        Fetchers {
            node_id: config.node_id,
            settings,
            client: Arc::new(BrokerClient::for_config(config, limits)),
            links: Mutex::new(HashMap::new()),
        }
    }

    fn links(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Arc<LeaderLink>>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows `partition` at `leader` from `leader_epoch` on (moving it from any other
    /// leader); it truncates by epoch first. Spawns the leader's task on the current runtime
    /// when it is the first partition there.
    pub fn follow(&self, partition: Arc<Partition>, leader: Arc<BrokerInfo>, leader_epoch: i32) {
        self.unfollow(&partition.tp);
        let mut links = self.links();
        let link = links.entry(leader.id).or_insert_with(|| {
            let link = Arc::new(LeaderLink {
                leader: Mutex::new(leader.clone()),
                partitions: Mutex::new(HashMap::new()),
                changed: Notify::new(),
            });
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(run(
                        Arc::downgrade(&link),
                        self.client.clone(),
                        self.node_id,
                        self.settings,
                    ));
                }
                Err(e) => tracing::error!(leader = leader.id, error = %e, "no runtime for a replica fetcher"),
            }
            link
        });
        *link.leader.lock().unwrap_or_else(|p| p.into_inner()) = leader;
        link.partitions().insert(
            partition.tp.clone(),
            Followed {
                partition,
                leader_epoch,
                step: Step::Truncate,
                retry_at: None,
            },
        );
        link.changed.notify_one();
    }

    /// Stops fetching `tp` wherever it was fetched.
    pub fn unfollow(&self, tp: &TopicPartition) {
        for link in self.links().values() {
            if link.partitions().remove(tp).is_some() {
                link.changed.notify_one();
            }
        }
    }

    /// Stops every fetch task (broker shutdown): their links are dropped, so each task ends at
    /// its next turn.
    pub fn stop(&self) {
        for link in self.links().drain().map(|(_, link)| link) {
            link.partitions().clear();
            link.changed.notify_one();
        }
    }
}

/// One leader's fetch loop; it ends once the link is dropped (`Fetchers::stop`).
async fn run(link: std::sync::Weak<LeaderLink>, client: Arc<BrokerClient>, node_id: i32, settings: Settings) {
    loop {
        let Some(link) = link.upgrade() else { return };
        let leader = link.leader.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let now = Instant::now();
        let mut due: Vec<(TopicPartition, Followed)> = Vec::new();
        let mut next_retry: Option<Instant> = None;
        for (tp, f) in link.partitions().iter() {
            match f.retry_at {
                Some(at) if at > now => next_retry = Some(next_retry.map_or(at, |n| n.min(at))),
                _ if f.step == Step::Stale => {}
                _ => due.push((tp.clone(), f.clone())),
            }
        }
        if due.is_empty() {
            // The link is held while waiting, at most a second: `stop` notifies, and the
            // next turn finds it dropped.
            let until = next_retry.unwrap_or(now + Duration::from_secs(1));
            let _ = tokio::time::timeout_at(until, link.changed.notified()).await;
            continue;
        }
        let truncating: Vec<_> = due.iter().filter(|(_, f)| f.step == Step::Truncate).cloned().collect();
        if !truncating.is_empty() {
            truncate(&link, &client, &leader, node_id, settings, truncating).await;
            continue;
        }
        fetch(&link, &client, &leader, node_id, settings, due).await;
    }
}

/// Records the outcome for `tp`, unless it was moved or re-followed meanwhile (another epoch).
fn settle(link: &LeaderLink, tp: &TopicPartition, epoch: i32, step: Step, retry_at: Option<Instant>) {
    if let Some(f) = link.partitions().get_mut(tp)
        && f.leader_epoch == epoch
    {
        f.step = step;
        f.retry_at = retry_at;
    }
}

/// KIP-101: asks the leader where each partition's latest epoch ends, and cuts past it.
async fn truncate(
    link: &LeaderLink,
    client: &BrokerClient,
    leader: &BrokerInfo,
    node_id: i32,
    settings: Settings,
    due: Vec<(TopicPartition, Followed)>,
) {
    let retry = Some(Instant::now() + settings.backoff);
    let mut by_topic: HashMap<String, Vec<OffsetForLeaderPartition>> = HashMap::new();
    let mut latest = HashMap::new();
    for (tp, f) in &due {
        let epoch = f.partition.latest_epoch().unwrap_or(-1);
        latest.insert(tp.clone(), epoch);
        by_topic.entry(tp.topic.clone()).or_default().push(
            OffsetForLeaderPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(f.leader_epoch)
                .with_leader_epoch(epoch),
        );
    }
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(node_id))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetForLeaderTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response = match client.call(leader, EPOCH_VERSION, &request).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(leader = leader.id, error = %e, "follower: OffsetForLeaderEpoch failed");
            for (tp, f) in &due {
                settle(link, tp, f.leader_epoch, Step::Truncate, retry);
            }
            return;
        }
    };
    let mut answered = HashMap::new();
    for topic in response.topics {
        for p in topic.partitions {
            answered.insert(
                TopicPartition {
                    topic: topic.topic.0.to_string(),
                    partition: p.partition,
                },
                p,
            );
        }
    }
    for (tp, f) in due {
        let Some(answer) = answered.remove(&tp) else {
            settle(link, &tp, f.leader_epoch, Step::Truncate, retry);
            continue;
        };
        if answer.error_code == ResponseError::FencedLeaderEpoch.code() {
            settle(link, &tp, f.leader_epoch, Step::Stale, None);
            continue;
        }
        if answer.error_code != 0 {
            settle(link, &tp, f.leader_epoch, Step::Truncate, retry);
            continue;
        }
        let mine = latest.get(&tp).copied().unwrap_or(-1);
        match truncation_offset(&f.partition, mine, answer.leader_epoch, answer.end_offset) {
            Ok(Some(offset)) => {
                tracing::info!(partition = %tp, offset, leader = leader.id, "follower: truncating to the leader's log");
                if let Err(e) = f.partition.truncate_to(offset, f.leader_epoch).await {
                    tracing::warn!(partition = %tp, error = %e, "follower: truncation failed");
                    settle(link, &tp, f.leader_epoch, Step::Truncate, retry);
                    continue;
                }
                settle(link, &tp, f.leader_epoch, Step::Fetch, None);
            }
            Ok(None) => settle(link, &tp, f.leader_epoch, Step::Fetch, None),
            Err(e) => {
                tracing::warn!(partition = %tp, error = %e, "follower: reading its epochs failed");
                settle(link, &tp, f.leader_epoch, Step::Truncate, retry);
            }
        }
    }
}

/// Where a follower whose latest epoch is `mine` cuts its log, given the leader's answer
/// (`leader_epoch`, `end_offset`) for it (Kafka's `LeaderEpochFileCache` rules): None when
/// nothing is cut. The leader answers the largest epoch it knows at or below `mine`: if it is
/// `mine`, the follower keeps what is below the leader's end of it; if it is older, the
/// follower keeps what is below the smaller of both ends of that older epoch. A leader that
/// knows no such epoch (-1) leaves the follower its high watermark.
fn truncation_offset(
    partition: &Partition,
    mine: i32,
    leader_epoch: i32,
    end_offset: i64,
) -> crate::error::Result<Option<i64>> {
    let log_end = partition.offsets()?.log_end_offset;
    if mine < 0 || log_end == 0 {
        return Ok(None);
    }
    let keep = if leader_epoch < 0 || end_offset < 0 {
        partition.high_watermark()
    } else if leader_epoch == mine {
        end_offset
    } else {
        match partition.end_offset_for_epoch(leader_epoch)? {
            Some((_, my_end)) => my_end.min(end_offset),
            None => partition.high_watermark().min(end_offset),
        }
    };
    Ok((keep < log_end).then_some(keep))
}

/// One Fetch for every due partition; appends, waits for durability, takes the high
/// watermark.
async fn fetch(
    link: &LeaderLink,
    client: &BrokerClient,
    leader: &BrokerInfo,
    node_id: i32,
    settings: Settings,
    due: Vec<(TopicPartition, Followed)>,
) {
    let retry = Some(Instant::now() + settings.backoff);
    let mut by_topic: HashMap<Uuid, Vec<FetchPartition>> = HashMap::new();
    let mut by_id: HashMap<(Uuid, i32), (TopicPartition, Followed)> = HashMap::new();
    for (tp, f) in due {
        let Ok(offsets) = f.partition.offsets() else {
            continue;
        };
        by_topic.entry(f.partition.topic_id).or_default().push(
            FetchPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(f.leader_epoch)
                .with_fetch_offset(offsets.log_end_offset)
                .with_last_fetched_epoch(f.partition.latest_epoch().unwrap_or(-1))
                .with_log_start_offset(offsets.log_start_offset)
                .with_partition_max_bytes(settings.partition_max_bytes),
        );
        by_id.insert((f.partition.topic_id, tp.partition), (tp, f));
    }
    if by_id.is_empty() {
        tokio::time::sleep(settings.backoff).await;
        return;
    }
    let request = FetchRequest::default()
        .with_replica_state(ReplicaState::default().with_replica_id(BrokerId(node_id)))
        .with_max_wait_ms(settings.wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(settings.response_max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(id, partitions)| FetchTopic::default().with_topic_id(id).with_partitions(partitions))
                .collect(),
        );
    let response = match client.call(leader, FETCH_VERSION, &request).await {
        Ok(response) if response.error_code == 0 => response,
        Ok(response) => {
            tracing::debug!(
                leader = leader.id,
                code = response.error_code,
                "follower: fetch refused"
            );
            for (tp, f) in by_id.values() {
                settle(link, tp, f.leader_epoch, Step::Fetch, retry);
            }
            return;
        }
        Err(e) => {
            tracing::debug!(leader = leader.id, error = %e, "follower: fetch failed");
            for (tp, f) in by_id.values() {
                settle(link, tp, f.leader_epoch, Step::Fetch, retry);
            }
            return;
        }
    };
    for topic in response.responses {
        for data in topic.partitions {
            let Some((tp, f)) = by_id.remove(&(topic.topic_id, data.partition_index)) else {
                continue;
            };
            let step = apply(&tp, &f, data).await;
            match step {
                Ok(step) => settle(link, &tp, f.leader_epoch, step, None),
                Err(()) => settle(link, &tp, f.leader_epoch, Step::Fetch, retry),
            }
        }
    }
}

/// One partition's answer: appended (and durable when acks=all needs it), or what to do next.
async fn apply(
    tp: &TopicPartition,
    f: &Followed,
    data: kafka_protocol::messages::fetch_response::PartitionData,
) -> Result<Step, ()> {
    let code = data.error_code;
    if code == ResponseError::FencedLeaderEpoch.code() {
        return Ok(Step::Stale);
    }
    if code == ResponseError::OffsetOutOfRange.code() {
        let Ok(offsets) = f.partition.offsets() else {
            return Err(());
        };
        if data.log_start_offset >= 0 && offsets.log_end_offset < data.log_start_offset {
            tracing::info!(partition = %tp, start = data.log_start_offset, "follower: behind the leader's log start, restarting there");
            return match f
                .partition
                .truncate_fully_and_start_at(data.log_start_offset, f.leader_epoch)
                .await
            {
                Ok(()) => Ok(Step::Fetch),
                Err(e) => {
                    tracing::warn!(partition = %tp, error = %e, "follower: restarting the log failed");
                    Err(())
                }
            };
        }
        return Ok(Step::Truncate);
    }
    if code != 0 {
        tracing::debug!(partition = %tp, code, "follower: fetch answered an error");
        return Err(());
    }
    if let Some(records) = data.records.filter(|r| !r.is_empty()) {
        match f.partition.append_as_follower(records, f.leader_epoch).await {
            Ok(Some(info)) => {
                // Counted by the leader only once durable here (see the module doc).
                if let Err(e) = f.partition.wait_durable(info.last_offset).await {
                    tracing::warn!(partition = %tp, error = %e, "follower: fsync failed");
                    return Err(());
                }
            }
            Ok(None) => {}
            // A full disk (logged by the partition when it starts and stops): fetched again
            // after the backoff, not truncated.
            Err(crate::error::Error::Storage { .. }) => return Err(()),
            Err(e) => {
                // A batch that does not continue this log: find where it diverges again.
                tracing::warn!(partition = %tp, error = %e, "follower: append failed");
                return Ok(Step::Truncate);
            }
        }
    }
    f.partition.advance_follower_high_watermark(data.high_watermark);
    // The leader's log start moved (retention, DeleteRecords): this copy follows up to its
    // own high watermark (Kafka's `maybeIncrementLogStartOffset` on followers).
    if let Ok(offsets) = f.partition.offsets() {
        let target = data.log_start_offset.min(offsets.high_watermark);
        if target > offsets.log_start_offset
            && let Err(e) = f.partition.delete_records(target).await
        {
            tracing::debug!(partition = %tp, target, error = %e, "follower: moving the log start");
        }
    }
    Ok(Step::Fetch)
}
