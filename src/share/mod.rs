//! Share groups (KIP-932, "queues for Kafka"): the partition leader's side.
//!
//! `partition.rs` is the state of one share-partition (a group reading one topic partition):
//! which records are available, acquired by a member until a lock deadline, acknowledged or
//! archived, and the share-partition start offset (SPSO) below which every record is done.
//!
//! `ShareManager` holds those states for the partitions led here, loaded on first use from the
//! group's coordinator (`coordinator::GroupCoordinator::share_state`) or, for a partition the
//! group never read, started where the group's `share.auto.offset.reset` says. Every change
//! that the stored state must keep (acknowledgements, a start offset) is written back through
//! the coordinator before the request that made it is answered. Acquisitions are not written:
//! after a restart, a record that was acquired is delivered again.
//!
//! Share sessions (KIP-932's counterpart of fetch sessions) are kept per (group, member): the
//! partitions a member reads from this broker, and the epoch its next request must carry. A
//! session belongs to the connection that opened it; when that connection closes, its sessions
//! end and their members' acquired records are released at once.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod partition;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::watch;
use uuid::Uuid;

use crate::api::coordinator_routing::{Coordinator, KeyKind, locate};
use crate::cluster::broker_client::BrokerClient;
use crate::cluster::{Controller, MetadataImage};
use crate::config::BrokerConfig;
use crate::coordinator::GroupCoordinator;
use crate::coordinator::consumer::Tp;
use crate::replica::{Partition, now_ms};
use partition::{Acquired, Limits, Persisted, SharePartition};

/// `group.share.max.share.sessions`: share sessions one broker keeps.
pub const MAX_SHARE_SESSIONS: usize = 2_000;
/// How long a share-partition's leader keeps asking a coordinator that moved or is loading.
const COORDINATOR_WAIT: Duration = Duration::from_secs(3);
/// Bytes read from one partition for one ShareFetch at most.
const PARTITION_READ_BYTES: usize = 1 << 20;

/// Reads one ShareFetch makes of a partition at most while it finds only aborted records.
const ARCHIVING_READS: usize = 8;

type Key = (String, Uuid, i32);

/// One share-partition led here, loaded at a leader epoch of its partition.
struct Loaded {
    state: SharePartition,
    leader_epoch: i32,
    /// The coordinator's state epoch it was loaded at (writes carry it).
    state_epoch: i32,
    /// What the coordinator holds, so that unchanged state is not written again.
    stored: Persisted,
    /// The state's lock timeouts already added to the slot's count.
    published_lock_timeouts: u64,
}

#[derive(Default)]
struct Slot {
    /// Held across the coordinator's write, so that writes of one share-partition are ordered.
    loaded: tokio::sync::Mutex<Option<Loaded>>,
    /// Set when a member opened a session: the next use asks the coordinator whether the
    /// state epoch moved (an administrator's reset) before it trusts what is loaded.
    recheck: std::sync::atomic::AtomicBool,
    /// Offsets in the in-flight window, as of the last use (a metric).
    in_flight: AtomicU64,
    /// Records whose lock expired, over every state loaded here (a metric).
    lock_timeouts: AtomicU64,
}

impl Slot {
    /// Publishes the metrics of `loaded`, after a use.
    fn publish(&self, loaded: &mut Loaded) {
        self.in_flight.store(
            u64::try_from(loaded.state.in_flight()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let timeouts = loaded.state.lock_timeouts();
        self.lock_timeouts.fetch_add(
            timeouts.saturating_sub(loaded.published_lock_timeouts),
            Ordering::Relaxed,
        );
        loaded.published_lock_timeouts = timeouts;
    }
}

/// What the share groups' metrics show (`metrics::State`).
pub struct ShareMetrics {
    /// Records acknowledged as ACCEPT, RELEASE and REJECT, by this broker's share-partitions.
    pub acknowledged: [(&'static str, u64); 3],
    pub partitions: Vec<SharePartitionMetrics>,
}

/// One share-partition's metrics, Kafka's `SharePartitionMetrics`.
pub struct SharePartitionMetrics {
    pub group: String,
    pub topic_id: Uuid,
    pub partition: i32,
    pub in_flight: u64,
    pub lock_timeouts: u64,
}

struct Session {
    /// The epoch the member's next request must carry.
    epoch: i32,
    partitions: BTreeSet<Tp>,
    connection: u64,
}

/// What one partition of a ShareFetch got.
pub struct Fetched {
    /// The whole batches that hold the acquired records (the client delivers only those).
    pub records: Option<Bytes>,
    pub acquired: Vec<Acquired>,
}

/// Why a share-partition could not be served: a Kafka error code, with a message.
#[derive(Debug, Clone)]
pub struct ShareError {
    pub code: i16,
    pub message: Option<String>,
}

impl ShareError {
    fn code(code: i16) -> ShareError {
        ShareError { code, message: None }
    }
}

/// The per-request limits of a ShareFetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    pub max_bytes: usize,
    /// The records left to acquire, and whether batches may be split to keep to them.
    pub records: partition::Budget,
}

pub struct ShareManager {
    config: Arc<BrokerConfig>,
    controller: Arc<Controller>,
    coordinator: Arc<GroupCoordinator>,
    /// Calls the group's coordinator on another broker (ReadShareGroupState,
    /// WriteShareGroupState: between Sluice brokers only).
    brokers: BrokerClient,
    partitions: Mutex<HashMap<Key, Arc<Slot>>>,
    sessions: Mutex<HashMap<(String, String), Session>>,
    /// Moves when records become available again other than by new appends (a release, an
    /// expired lock, a closed session), to wake fetches waiting for records.
    released: Arc<watch::Sender<u64>>,
    next_connection: AtomicU64,
    /// Records acknowledged as ACCEPT, RELEASE, REJECT (Kafka's RecordAcknowledgementsPerSec).
    acknowledged: [AtomicU64; 3],
}

/// Ends a connection's share sessions when the connection ends (`server`).
pub struct ConnectionGuard {
    id: u64,
    manager: Arc<ShareManager>,
}

impl ConnectionGuard {
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.manager.connection_closed(self.id);
    }
}

impl ShareManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: Arc<Controller>,
        coordinator: Arc<GroupCoordinator>,
    ) -> Arc<ShareManager> {
        let manager = Arc::new(ShareManager {
            brokers: BrokerClient::for_config(&config, Default::default()),
            config,
            controller,
            coordinator,
            partitions: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            released: Arc::new(watch::channel(0).0),
            next_connection: AtomicU64::new(1),
            acknowledged: Default::default(),
        });
        manager.coordinator.set_share_manager(&manager);
        manager
    }

    /// A new connection's guard; its id names the connection's share sessions.
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        ConnectionGuard {
            id: self.next_connection.fetch_add(1, Ordering::Relaxed),
            manager: self.clone(),
        }
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<(String, String), Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn partitions(&self) -> MutexGuard<'_, HashMap<Key, Arc<Slot>>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a member's share session (epoch 0), replacing one it had: the partitions are the
    /// request's. SHARE_SESSION_LIMIT_REACHED when the broker holds its most.
    pub fn open_session(
        &self,
        group: &str,
        member: &str,
        partitions: BTreeSet<Tp>,
        connection: u64,
    ) -> Result<(), i16> {
        let mut sessions = self.sessions();
        let key = (group.to_string(), member.to_string());
        if !sessions.contains_key(&key) && sessions.len() >= MAX_SHARE_SESSIONS {
            return Err(ResponseError::ShareSessionLimitReached.code());
        }
        sessions.insert(
            key,
            Session {
                epoch: 1,
                partitions,
                connection,
            },
        );
        Ok(())
    }

    /// A request of an open session (epoch > 0): the epoch must be the session's; the
    /// request's partitions join it and the forgotten ones leave. Answers the session's
    /// partitions.
    pub fn update_session(
        &self,
        group: &str,
        member: &str,
        epoch: i32,
        add: &BTreeSet<Tp>,
        forget: &BTreeSet<Tp>,
    ) -> Result<BTreeSet<Tp>, i16> {
        let mut sessions = self.sessions();
        let session = sessions
            .get_mut(&(group.to_string(), member.to_string()))
            .ok_or(ResponseError::ShareSessionNotFound.code())?;
        if session.epoch != epoch {
            return Err(ResponseError::InvalidShareSessionEpoch.code());
        }
        session.epoch = next_epoch(epoch);
        session.partitions.extend(add.iter().copied());
        session.partitions.retain(|tp| !forget.contains(tp));
        Ok(session.partitions.clone())
    }

    /// Whether the member has an open session (a final request, epoch -1, needs one).
    pub fn has_session(&self, group: &str, member: &str) -> bool {
        self.sessions().contains_key(&(group.to_string(), member.to_string()))
    }

    /// ShareAcknowledge's session check (Kafka's `acknowledgeSessionUpdate`): epoch 0 is
    /// refused, -1 needs a session, any other must be the session's and moves it on.
    pub fn acknowledge_session(&self, group: &str, member: &str, epoch: i32) -> Result<(), i16> {
        if epoch == 0 {
            return Err(ResponseError::InvalidShareSessionEpoch.code());
        }
        let mut sessions = self.sessions();
        let session = sessions
            .get_mut(&(group.to_string(), member.to_string()))
            .ok_or(ResponseError::ShareSessionNotFound.code())?;
        if epoch == -1 {
            return Ok(());
        }
        if session.epoch != epoch {
            return Err(ResponseError::InvalidShareSessionEpoch.code());
        }
        session.epoch = next_epoch(epoch);
        Ok(())
    }

    /// Ends a member's session (a final request, after its acknowledgements): the records it
    /// holds in the session's partitions are released.
    pub fn close_session(&self, group: &str, member: &str) {
        let removed = self.sessions().remove(&(group.to_string(), member.to_string()));
        if let Some(session) = removed {
            self.release(group, member, &session.partitions);
        }
    }

    fn connection_closed(&self, connection: u64) {
        let ended: Vec<((String, String), Session)> = {
            let mut sessions = self.sessions();
            let keys: Vec<(String, String)> = sessions
                .iter()
                .filter(|(_, s)| s.connection == connection)
                .map(|(k, _)| k.clone())
                .collect();
            keys.into_iter()
                .filter_map(|k| sessions.remove(&k).map(|s| (k, s)))
                .collect()
        };
        for ((group, member), session) in ended {
            self.release(&group, &member, &session.partitions);
        }
    }

    /// Releases what `member` holds in `partitions` (in memory: an acquired record is stored
    /// as available already). A share-partition in use by a request is released by a task
    /// once that request lets it go.
    fn release(&self, group: &str, member: &str, partitions: &BTreeSet<Tp>) {
        let mut any = false;
        let limits = group_settings(&self.config, &self.controller.image(), group).limits;
        for (topic_id, partition) in partitions {
            let slot = self
                .partitions()
                .get(&(group.to_string(), *topic_id, *partition))
                .cloned();
            let Some(slot) = slot else { continue };
            let busy = match slot.loaded.try_lock() {
                Ok(mut loaded) => {
                    if let Some(l) = loaded.as_mut() {
                        l.state.set_limits(limits);
                        any |= l.state.release_member(member);
                        slot.publish(l);
                    }
                    false
                }
                Err(_) => true,
            };
            // In use by a request: released by a task once the request lets it go.
            if busy && let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (member, released) = (member.to_string(), self.released.clone());
                runtime.spawn(async move {
                    let mut loaded = slot.loaded.lock().await;
                    if let Some(l) = loaded.as_mut() {
                        l.state.set_limits(limits);
                        if l.state.release_member(&member) {
                            released.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        slot.publish(l);
                    }
                });
            }
        }
        if any {
            self.released.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The group's share-partitions are gone (the group was deleted) or reset: they are
    /// loaded again from the coordinator on next use.
    pub fn forget_group(&self, group: &str) {
        self.partitions().retain(|(g, _, _), _| g != group);
    }

    /// A member opened a share session: its partitions' next use asks the coordinator whether
    /// the state was reset since it was loaded (AlterShareGroupOffsets or
    /// DeleteShareGroupOffsets on another node, only while the group is empty), so that a reset
    /// is seen before anything is delivered.
    pub fn refresh(&self, group: &str, partitions: &BTreeSet<Tp>) {
        for (topic_id, partition) in partitions {
            if let Some(slot) = self.partitions().get(&(group.to_string(), *topic_id, *partition)) {
                slot.recheck.store(true, Ordering::Release);
            }
        }
    }

    /// A deleted topic's share-partitions are dropped (a topic created again under its name
    /// has another id).
    pub fn forget_topic(&self, topic_id: Uuid) {
        self.partitions().retain(|(_, t, _), _| *t != topic_id);
        for session in self.sessions().values_mut() {
            session.partitions.retain(|(t, _)| *t != topic_id);
        }
    }

    /// Counts an accepted acknowledgement of `first..=last` by type (gaps are not counted, as
    /// in Kafka).
    fn count_acknowledged(&self, first: i64, last: i64, types: &[i8]) {
        let add = |kind: i8, n: u64| {
            let index = match kind {
                partition::ACK_ACCEPT => 0,
                partition::ACK_RELEASE => 1,
                partition::ACK_REJECT => 2,
                _ => return,
            };
            self.acknowledged[index].fetch_add(n, Ordering::Relaxed);
        };
        match types {
            [kind] => add(
                *kind,
                u64::try_from(last.saturating_sub(first)).map_or(0, |n| n.saturating_add(1)),
            ),
            _ => types.iter().for_each(|kind| add(*kind, 1)),
        }
    }

    /// The share groups' metrics: acknowledgements by type, and each share-partition used
    /// here.
    pub fn metrics(&self) -> ShareMetrics {
        let acknowledged = ["Accept", "Release", "Reject"];
        let partitions = self
            .partitions()
            .iter()
            .map(|((group, topic_id, partition), slot)| SharePartitionMetrics {
                group: group.clone(),
                topic_id: *topic_id,
                partition: *partition,
                in_flight: slot.in_flight.load(Ordering::Relaxed),
                lock_timeouts: slot.lock_timeouts.load(Ordering::Relaxed),
            })
            .collect();
        ShareMetrics {
            acknowledged: std::array::from_fn(|i| (acknowledged[i], self.acknowledged[i].load(Ordering::Relaxed))),
            partitions,
        }
    }

    /// The client this broker calls other brokers with (for the share-partition state, and the
    /// high watermarks of DescribeShareGroupOffsets).
    pub fn brokers(&self) -> &BrokerClient {
        &self.brokers
    }

    /// A receiver that moves when records are released (see `released`).
    pub fn released(&self) -> watch::Receiver<u64> {
        self.released.subscribe()
    }

    fn slot(&self, group: &str, tp: Tp) -> Arc<Slot> {
        self.partitions()
            .entry((group.to_string(), tp.0, tp.1))
            .or_default()
            .clone()
    }

    /// The share-partition's state, loaded (or started) if it is not, or if the partition's
    /// leader epoch moved since (another leader may have changed the stored state).
    async fn load<'a>(
        &self,
        slot: &'a Slot,
        group: &str,
        partition: &Arc<Partition>,
    ) -> Result<tokio::sync::MutexGuard<'a, Option<Loaded>>, ShareError> {
        let mut guard = slot.loaded.lock().await;
        let epoch = partition.leader_epoch();
        let recheck = slot.recheck.swap(false, Ordering::AcqRel);
        if !recheck && guard.as_ref().is_some_and(|l| l.leader_epoch == epoch) {
            return Ok(guard);
        }
        let tp = (partition.topic_id, partition.tp.partition);
        let image = self.controller.image();
        let limits = group_settings(&self.config, &image, group).limits;
        let (state_epoch, stored) = self.read_state(group, tp).await.map_err(ShareError::code)?;
        if guard
            .as_ref()
            .is_some_and(|l| l.leader_epoch == epoch && l.state_epoch == state_epoch)
        {
            // Not reset: what is held here (acquisitions, delivery counts) is newer.
            return Ok(guard);
        }
        let offsets = partition.offsets().map_err(|e| ShareError::code(e.code()))?;
        let loaded = match stored {
            Some(stored) => {
                // Restored within the largest window a group may have had, so that a window
                // lowered since (`share.partition.max.record.locks`) keeps what it holds.
                let widest = Limits {
                    max_in_flight: limits.max_in_flight.max(widest_window(&self.config)),
                    ..limits
                };
                let mut state = SharePartition::restore(&stored, widest);
                state.set_limits(limits);
                state.move_start(offsets.log_start_offset);
                Loaded {
                    state,
                    leader_epoch: epoch,
                    state_epoch,
                    stored,
                    published_lock_timeouts: 0,
                }
            }
            None => {
                // Kafka's `share.auto.offset.reset`, read when the group first reads the
                // partition; the start is stored at once, so that it does not move later.
                let start = start_offset(&image, group, partition)?;
                let state = SharePartition::new(start, limits);
                let stored = state.snapshot();
                self.write_state(group, tp, state_epoch, stored.clone())
                    .await
                    .map_err(ShareError::code)?;
                Loaded {
                    state,
                    leader_epoch: epoch,
                    state_epoch,
                    stored,
                    published_lock_timeouts: 0,
                }
            }
        };
        *guard = Some(loaded);
        Ok(guard)
    }

    /// Acquires records of one partition for `member`: reads from the share-partition's next
    /// fetch offset and locks what it may.
    pub async fn fetch(
        &self,
        group: &str,
        member: &str,
        partition: &Arc<Partition>,
        limits: FetchLimits,
    ) -> Result<Fetched, ShareError> {
        let tp = (partition.topic_id, partition.tp.partition);
        let slot = self.slot(group, tp);
        let mut guard = self.load(&slot, group, partition).await?;
        let Some(loaded) = guard.as_mut() else {
            return Err(ShareError::code(ResponseError::UnknownServerError.code()));
        };
        let fetched = self.acquire(loaded, group, member, partition, limits);
        slot.publish(loaded);
        fetched
    }

    /// `fetch` on the loaded share-partition.
    fn acquire(
        &self,
        loaded: &mut Loaded,
        group: &str,
        member: &str,
        partition: &Arc<Partition>,
        limits: FetchLimits,
    ) -> Result<Fetched, ShareError> {
        let settings = group_settings(&self.config, &self.controller.image(), group);
        loaded.state.set_limits(settings.limits);
        let offsets = partition.offsets().map_err(|e| ShareError::code(e.code()))?;
        loaded.state.move_start(offsets.log_start_offset);
        // A read_committed group reads up to the last stable offset, and never gets the
        // records of an aborted transaction (the share consumer cannot drop them itself: a
        // ShareFetch response has no aborted-transactions list).
        let limit = if settings.read_committed {
            offsets.last_stable_offset
        } else {
            offsets.high_watermark
        };
        // Reads again (a few times) when a read found only aborted records, which moved the
        // window without acquiring anything.
        for _ in 0..ARCHIVING_READS {
            let now = Instant::now();
            let Some(from) = loaded.state.next_fetch_offset(now) else {
                break;
            };
            if from >= limit || limits.records.max_records == 0 {
                break;
            }
            let read = partition
                .read_with(
                    from,
                    limits.max_bytes.min(PARTITION_READ_BYTES),
                    true,
                    settings.read_committed,
                )
                .map_err(|e| ShareError::code(e.code()))?;
            let batches: Vec<(crate::log::batch::BatchHeader, Bytes)> = crate::log::batch::batches(&read.records)
                .map_while(Result::ok)
                .collect();
            if batches.is_empty() {
                break;
            }
            // Offsets a batch does not hold (removed by compaction) go with the next batch, so
            // the window moves past them: the client acknowledges them as gaps.
            let mut ranges = Vec::with_capacity(batches.len());
            let mut next = from;
            for (header, _) in &batches {
                let last = header.last_offset();
                ranges.push((header.base_offset.min(next), last));
                next = next.max(last.saturating_add(1));
            }
            let aborted = read.aborted.unwrap_or_default();
            let archive: Vec<bool> = batches
                .iter()
                .map(|(header, _)| {
                    header.is_transactional()
                        && !header.is_control()
                        && aborted.iter().any(|txn| {
                            txn.producer_id == header.producer_id
                                && txn.first_offset <= header.base_offset
                                && header.last_offset() < txn.last_offset
                        })
                })
                .collect();
            let acquired =
                loaded
                    .state
                    .acquire_archiving(member, &ranges, &archive, limits.records, settings.lock_duration, now);
            tracing::debug!(group, member, partition = %partition.tp, from, ?ranges, ?archive, ?acquired, "acquired");
            if acquired.is_empty() {
                if archive.contains(&true) {
                    continue;
                }
                break;
            }
            // Only the batches that hold an acquired record go back.
            let mut records = bytes::BytesMut::new();
            for ((first, last), (_, bytes)) in ranges.iter().zip(&batches) {
                if acquired
                    .iter()
                    .any(|a| a.first_offset <= *last && a.last_offset >= *first)
                {
                    records.extend_from_slice(bytes);
                }
            }
            return Ok(Fetched {
                records: Some(records.freeze()),
                acquired,
            });
        }
        Ok(Fetched {
            records: None,
            acquired: Vec::new(),
        })
    }

    /// Applies a member's acknowledgements of one partition, in order, and stores the result
    /// before answering. The first refused batch stops the rest and names the error.
    pub async fn acknowledge(
        &self,
        group: &str,
        member: &str,
        partition: &Arc<Partition>,
        batches: &[(i64, i64, Vec<i8>)],
    ) -> Result<(), ShareError> {
        let tp = (partition.topic_id, partition.tp.partition);
        let slot = self.slot(group, tp);
        let mut guard = self.load(&slot, group, partition).await?;
        let Some(loaded) = guard.as_mut() else {
            return Err(ShareError::code(ResponseError::UnknownServerError.code()));
        };
        let now = Instant::now();
        let settings = group_settings(&self.config, &self.controller.image(), group);
        loaded.state.set_limits(settings.limits);
        tracing::debug!(group, member, partition = %partition.tp, ?batches, "acknowledgements");
        let mut refused = None;
        let mut released = false;
        for (first, last, types) in batches {
            // A group with `share.renew.acknowledge.enable=false` refuses renewals.
            let outcome = if !settings.renew_enabled && types.contains(&partition::ACK_RENEW) {
                Err(partition::AckError::InvalidRecordState)
            } else {
                loaded
                    .state
                    .acknowledge(member, *first, *last, types, settings.lock_duration, now)
            };
            match outcome {
                Ok(()) => {
                    released |= types.contains(&partition::ACK_RELEASE);
                    self.count_acknowledged(*first, *last, types);
                }
                Err(e) => {
                    tracing::debug!(
                        group,
                        member,
                        partition = %partition.tp,
                        first,
                        last,
                        ?types,
                        start = loaded.state.start_offset(),
                        end = loaded.state.end_offset(),
                        error = ?e,
                        "acknowledgement refused"
                    );
                    refused = Some(ShareError::code(e.code()));
                    break;
                }
            }
        }
        let snapshot = loaded.state.snapshot();
        if snapshot != loaded.stored {
            if let Err(code) = self.write_state(group, tp, loaded.state_epoch, snapshot.clone()).await {
                // What the coordinator holds is not known now (the group may be gone): the
                // state is read from it again on next use.
                *guard = None;
                return Err(ShareError::code(code));
            }
            loaded.stored = snapshot;
        }
        slot.publish(loaded);
        drop(guard);
        if released {
            self.released.send_modify(|n| *n = n.wrapping_add(1));
        }
        refused.map_or(Ok(()), Err)
    }

    /// The stored state of a share-partition, from the group's coordinator: this broker's
    /// (a local call) or another's (ReadShareGroupState). A coordinator that moved or is
    /// loading is asked again, for a few seconds.
    async fn read_state(&self, group: &str, tp: Tp) -> Result<(i32, Option<Persisted>), i16> {
        use kafka_protocol::messages::ReadShareGroupStateRequest;
        use kafka_protocol::messages::read_share_group_state_request::{PartitionData, ReadStateData};
        let request = ReadShareGroupStateRequest::default()
            .with_group_id(kafka_protocol::protocol::StrBytes::from_string(group.to_string()))
            .with_topics(vec![ReadStateData::default().with_topic_id(tp.0).with_partitions(
                vec![PartitionData::default().with_partition(tp.1).with_leader_epoch(-1)],
            )]);
        self.with_coordinator(group, |broker| {
            let request = request.clone();
            async move {
                let Some(broker) = broker else {
                    return self.coordinator.share_state(group, tp).map(|s| (s.epoch, s.state));
                };
                let response = self.brokers.call(&broker, 0, &request).await.map_err(|e| e.code())?;
                let result = response
                    .results
                    .iter()
                    .filter(|r| r.topic_id == tp.0)
                    .flat_map(|r| r.partitions.iter())
                    .find(|p| p.partition == tp.1)
                    .ok_or(ResponseError::UnknownServerError.code())?;
                if result.error_code != 0 {
                    return Err(result.error_code);
                }
                Ok((
                    result.state_epoch,
                    state_from_wire(
                        result.start_offset,
                        result
                            .state_batches
                            .iter()
                            .map(|b| (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)),
                    ),
                ))
            }
        })
        .await
    }

    /// Stores a share-partition's state with the group's coordinator (a local call, or
    /// WriteShareGroupState), asking again for a few seconds while the coordinator moves.
    async fn write_state(&self, group: &str, tp: Tp, state_epoch: i32, state: Persisted) -> Result<(), i16> {
        use kafka_protocol::messages::WriteShareGroupStateRequest;
        use kafka_protocol::messages::write_share_group_state_request::{PartitionData, StateBatch, WriteStateData};
        let request = WriteShareGroupStateRequest::default()
            .with_group_id(kafka_protocol::protocol::StrBytes::from_string(group.to_string()))
            .with_topics(vec![WriteStateData::default().with_topic_id(tp.0).with_partitions(
                vec![
                PartitionData::default()
                    .with_partition(tp.1)
                    .with_state_epoch(state_epoch)
                    .with_leader_epoch(-1)
                    .with_start_offset(state.start_offset)
                    .with_state_batches(
                        state
                            .batches
                            .iter()
                            .map(|b| {
                                StateBatch::default()
                                    .with_first_offset(b.first_offset)
                                    .with_last_offset(b.last_offset)
                                    .with_delivery_state(b.state)
                                    .with_delivery_count(b.delivery_count)
                            })
                            .collect(),
                    ),
            ],
            )]);
        self.with_coordinator(group, |broker| {
            let request = request.clone();
            let state = state.clone();
            async move {
                let Some(broker) = broker else {
                    return self.coordinator.write_share_state(group, tp, state_epoch, state).await;
                };
                let response = self.brokers.call(&broker, 0, &request).await.map_err(|e| e.code())?;
                let code = response
                    .results
                    .iter()
                    .filter(|r| r.topic_id == tp.0)
                    .flat_map(|r| r.partitions.iter())
                    .find(|p| p.partition == tp.1)
                    .map_or(ResponseError::UnknownServerError.code(), |p| p.error_code);
                if code == 0 { Ok(()) } else { Err(code) }
            }
        })
        .await
    }

    /// Runs `call` against the group's coordinator (None: this broker), again while the
    /// answer says the coordinator moved or is not ready, for at most `COORDINATOR_WAIT`.
    async fn with_coordinator<T, F, Fut>(&self, group: &str, call: F) -> Result<T, i16>
    where
        F: Fn(Option<Arc<crate::cluster::BrokerInfo>>) -> Fut,
        Fut: std::future::Future<Output = Result<T, i16>>,
    {
        let retriable = [
            ResponseError::NotCoordinator.code(),
            ResponseError::CoordinatorNotAvailable.code(),
            ResponseError::CoordinatorLoadInProgress.code(),
            ResponseError::NetworkException.code(),
            ResponseError::RequestTimedOut.code(),
        ];
        let deadline = Instant::now() + COORDINATOR_WAIT;
        loop {
            let image = self.controller.image();
            let outcome = match locate(&image, KeyKind::Group, group) {
                Coordinator::NotCreated => call(None).await,
                Coordinator::Broker(b) if b.id == self.config.node_id => call(None).await,
                Coordinator::Broker(b) => call(Some(b)).await,
                Coordinator::Unavailable => Err(ResponseError::CoordinatorNotAvailable.code()),
            };
            match outcome {
                Err(code) if retriable.contains(&code) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    /// The earliest acquisition lock of the group's share-partitions in `tps`, for a waiting
    /// fetch to wake at (its records then become available again).
    pub fn next_lock_deadline(&self, group: &str, tps: &[Tp]) -> Option<Instant> {
        tps.iter()
            .filter_map(|tp| self.partitions().get(&(group.to_string(), tp.0, tp.1)).cloned())
            .filter_map(|slot| {
                slot.loaded
                    .try_lock()
                    .ok()
                    .and_then(|l| l.as_ref().and_then(|l| l.state.next_deadline()))
            })
            .min()
    }
}

/// A stored state as ReadShareGroupState carries it: a start offset of -1 is a partition the
/// group never read.
pub fn state_from_wire(start_offset: i64, batches: impl Iterator<Item = (i64, i64, i8, i16)>) -> Option<Persisted> {
    (start_offset >= 0).then(|| Persisted {
        start_offset,
        batches: batches
            .map(
                |(first_offset, last_offset, state, delivery_count)| partition::PersistedBatch {
                    first_offset,
                    last_offset,
                    state,
                    delivery_count,
                },
            )
            .collect(),
    })
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

/// A share group's settings: the group's `share.*` configs over the broker's defaults.
#[derive(Debug, Clone, Copy)]
pub struct GroupSettings {
    pub lock_duration: Duration,
    /// `share.isolation.level=read_committed`.
    pub read_committed: bool,
    /// The group's `share.partition.max.record.locks` and `share.delivery.count.limit`
    /// (KIP-1240), each over its broker default.
    pub limits: Limits,
    /// `share.renew.acknowledge.enable` (Kafka 4.3, default true): whether members may renew
    /// their locks (the RENEW acknowledge type of KIP-1222).
    pub renew_enabled: bool,
}

/// The largest in-flight window any group may have: the broker's default and the top of the
/// range a group's `share.partition.max.record.locks` may take.
fn widest_window(config: &BrokerConfig) -> usize {
    let widest = config
        .share
        .partition_max_record_locks
        .max(config.share.max_partition_max_record_locks);
    usize::try_from(widest).unwrap_or(usize::MAX)
}

pub fn group_settings(config: &BrokerConfig, image: &MetadataImage, group: &str) -> GroupSettings {
    let configs = image.group_configs.get(group);
    let lock_ms = configs
        .and_then(|c| c.get("share.record.lock.duration.ms"))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(config.share.record_lock_duration_ms);
    let deliveries = configs
        .and_then(|c| c.get("share.delivery.count.limit"))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(config.share.delivery_count_limit);
    let record_locks = configs
        .and_then(|c| c.get("share.partition.max.record.locks"))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(config.share.partition_max_record_locks);
    GroupSettings {
        lock_duration: Duration::from_millis(lock_ms),
        read_committed: configs
            .and_then(|c| c.get("share.isolation.level"))
            .is_some_and(|v| v == "read_committed"),
        limits: Limits {
            max_in_flight: usize::try_from(record_locks).unwrap_or(usize::MAX),
            delivery_limit: i16::try_from(deliveries).unwrap_or(i16::MAX),
        },
        renew_enabled: !configs
            .and_then(|c| c.get("share.renew.acknowledge.enable"))
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("false")),
    }
}

/// Where a group starts reading a partition it never read: Kafka's `share.auto.offset.reset`,
/// `latest` (the default: the high watermark), `earliest` (the log start), or
/// `by_duration:<ISO-8601 duration>` (the first record at most that old, else the high
/// watermark).
fn start_offset(image: &MetadataImage, group: &str, partition: &Arc<Partition>) -> Result<i64, ShareError> {
    let offsets = partition.offsets().map_err(|e| ShareError::code(e.code()))?;
    let reset = image
        .group_configs
        .get(group)
        .and_then(|c| c.get("share.auto.offset.reset"))
        .map_or("latest", String::as_str);
    if reset == "earliest" {
        return Ok(offsets.log_start_offset);
    }
    if let Some(duration) = reset.strip_prefix("by_duration:")
        && let Some(ms) = parse_duration_ms(duration)
    {
        let at = now_ms().saturating_sub(ms);
        let found = partition
            .offset_for_timestamp(at)
            .map_err(|e| ShareError::code(e.code()))?;
        return Ok(found.map_or(offsets.high_watermark, |(offset, _)| offset));
    }
    Ok(offsets.high_watermark)
}

/// An ISO-8601 duration as Java's `Duration.parse` reads it (`PnDTnHnMn.nS`), in
/// milliseconds; None when it is not one or is negative.
pub fn parse_duration_ms(text: &str) -> Option<i64> {
    let rest = text.strip_prefix('P').or_else(|| text.strip_prefix('p'))?;
    let (days, time) = match rest.find(['T', 't']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut ms: i64 = 0;
    let mut any = false;
    if !days.is_empty() {
        let n = days.strip_suffix(['D', 'd'])?.parse::<i64>().ok()?;
        ms = ms.checked_add(n.checked_mul(86_400_000)?)?;
        any = true;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, scale) in [('H', 3_600_000f64), ('M', 60_000f64), ('S', 1_000f64)] {
            let lower = unit.to_ascii_lowercase();
            if let Some(i) = time.find([unit, lower]) {
                let n = time[..i].parse::<f64>().ok()?;
                if !n.is_finite() {
                    return None;
                }
                let part = n * scale;
                if part.abs() > i64::MAX as f64 / 2.0 {
                    return None;
                }
                ms = ms.checked_add(part as i64)?;
                time = &time[i + 1..];
                any = true;
            }
        }
        if !time.is_empty() {
            return None;
        }
    }
    (any && ms >= 0).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_durations_parse_as_java_reads_them() {
        assert_eq!(parse_duration_ms("PT1H"), Some(3_600_000));
        assert_eq!(parse_duration_ms("P1D"), Some(86_400_000));
        assert_eq!(
            parse_duration_ms("P1DT2H3M4.5S"),
            Some(86_400_000 + 7_200_000 + 180_000 + 4_500)
        );
        assert_eq!(parse_duration_ms("PT0.25S"), Some(250));
        for bad in ["", "P", "PT", "1H", "PT1X", "P-1D", "PT1H2", "PTNaNS"] {
            assert_eq!(parse_duration_ms(bad), None, "{bad}");
        }
    }
}
