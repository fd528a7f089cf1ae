//! The group coordinator: classic consumer groups and committed offsets, with their state kept
//! in the internal compacted topic `__consumer_offsets` (created on first use, Kafka's record
//! formats, group → partition by Kafka's hash). The groups of a partition are loaded from it
//! when this node becomes its leader and dropped when it stops leading it (loading.rs: when a
//! load runs, and why requests meanwhile get NOT_COORDINATOR); start-up loads every partition
//! led here. Writes wait until every in-sync replica holds them (`wait_acknowledged`), so an
//! acknowledged commit survives the loss of the leader.
//!
//! Each group sits behind its own lock; the map of groups behind another, held only to find or
//! insert a group. Waits (JoinGroup until the join phase completes, SyncGroup until the leader's
//! assignment) are oneshot channels completed by other requests or by the group's timer task.
//! A timer task exists only while a group has a deadline (live members, a pending rebalance):
//! idle groups cost their memory and nothing else.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod consumer;
pub mod group;
pub mod loading;
pub mod records;
pub mod share;
pub mod transactions;
pub mod txn_records;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::Compression;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::cluster::{Controller, MetadataImage};
use crate::config::BrokerConfig;
use crate::error::Error;
use crate::log::batch::encode_records;
use crate::log::producer_state::Origin;
use crate::log::validate_batches;
use crate::replica::{Partition, ReplicaManager, now_ms};
use consumer::{ConsumerGroup, ConsumerGroupSnapshot, ConsumerLimits, HeartbeatIn, HeartbeatOut, TopicsView};
use group::{Group, GroupLimits, GroupState, JoinRequest, JoinResult, SyncResult};
use loading::{LOAD_ROUNDS_MAX, LoadedPartitions, Readiness};
use records::{CommittedOffset, OffsetsRecord, partition_for};
use share::{ShareGroup, ShareGroupSnapshot, ShareHeartbeatIn, ShareLimits};

use crate::share::partition::Persisted;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// A group and its committed offsets. A group speaks one protocol at a time: `consumer` is
/// Some for a KIP-848 group (its classic half then stays Empty), None for a classic group.
pub struct GroupEntry {
    pub group: Group,
    pub consumer: Option<ConsumerGroup>,
    /// The consumer group state last written to `__consumer_offsets`, so that only changes
    /// are written.
    persisted_consumer: Option<ConsumerGroupSnapshot>,
    /// A share group (KIP-932): Some while the group is one.
    pub share: Option<ShareGroup>,
    persisted_share: Option<ShareGroupSnapshot>,
    /// The group's share-partition states as last stored, by partition (`crate::share`).
    pub share_states: BTreeMap<consumer::Tp, StoredShareState>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// Offsets committed in open transactions (TxnOffsetCommit), by producer id: applied to
    /// `offsets` when the commit marker reaches the group's `__consumer_offsets` partition,
    /// dropped on abort (Kafka's `pendingTransactionalOffsetCommits`).
    pub pending_txn_offsets: BTreeMap<i64, PendingOffsets>,
    /// The log offset of the record behind each entry of `offsets`: when transactional and
    /// plain commits of a partition mix, the later record wins, whatever the marker's position
    /// (Kafka's `replayEndTransactionMarker`), live and on replay alike.
    committed_at: HashMap<(String, i32), i64>,
}

impl GroupEntry {
    fn new(group_id: &str, now: Instant) -> GroupEntry {
        GroupEntry {
            group: Group::new(group_id, now),
            consumer: None,
            persisted_consumer: None,
            share: None,
            persisted_share: None,
            share_states: BTreeMap::new(),
            offsets: BTreeMap::new(),
            pending_txn_offsets: BTreeMap::new(),
            committed_at: HashMap::new(),
        }
    }

    /// A producer's marker reached the group's partition: its transactional offsets are
    /// applied (commit) or dropped (abort); a plain commit of a partition written after the
    /// transactional one keeps winning.
    fn settle_txn(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending_txn_offsets.remove(&producer_id) else {
            return;
        };
        if !commit {
            return;
        }
        for (key, (value, at)) in pending {
            let newer = !self.offsets.contains_key(&key) || self.committed_at.get(&key).is_none_or(|c| at > *c);
            if newer {
                self.committed_at.insert(key.clone(), at);
                self.offsets.insert(key, value);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let consumer = self.consumer.as_ref().and_then(ConsumerGroup::next_deadline);
        let share = self.share.as_ref().and_then(ShareGroup::next_deadline);
        [self.group.next_deadline(), consumer, share]
            .into_iter()
            .flatten()
            .min()
    }

    /// True when no member of either protocol is in the group.
    pub fn has_no_members(&self) -> bool {
        self.group.is_empty()
            && self.consumer.as_ref().is_none_or(|c| c.members.is_empty())
            && self.share.as_ref().is_none_or(|s| s.members.is_empty())
    }

    /// Whether the group may become a share group: it is one, or it is an empty classic group
    /// with no committed offsets (as a group id no one used yet).
    fn may_be_share(&self) -> bool {
        self.share.is_some()
            || (self.consumer.is_none()
                && self.group.is_empty()
                && self.group.state == GroupState::Empty
                && self.offsets.is_empty())
    }

    /// "classic" or "consumer", as ListGroups v5 reports it.
    pub fn group_type(&self) -> &'static str {
        if self.share.is_some() {
            "share"
        } else if self.consumer.is_some() {
            "consumer"
        } else {
            "classic"
        }
    }

    /// The state name ListGroups reports.
    pub fn state_name(&self) -> &'static str {
        if let Some(s) = &self.share {
            return s.state_name();
        }
        match &self.consumer {
            Some(c) => c.state().name(),
            None => self.group.state.name(),
        }
    }
}

struct Slot {
    entry: Mutex<GroupEntry>,
    /// Wakes the timer task when a deadline may have moved earlier.
    wake: Notify,
    timer_running: AtomicBool,
    /// Set when the group's partition was unloaded (this node no longer leads it, or leads it
    /// at a new epoch and reloads it): the slot is out of the map, its timer stops, and nothing
    /// it holds is written any more, so it cannot bring back state the new coordinator owns.
    unloaded: AtomicBool,
}

impl Slot {
    fn new(entry: GroupEntry) -> Slot {
        Slot {
            entry: Mutex::new(entry),
            wake: Notify::new(),
            timer_running: AtomicBool::new(false),
            unloaded: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GroupEntry> {
        self.entry.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_unloaded(&self) -> bool {
        self.unloaded.load(Ordering::Acquire)
    }

    /// Kafka's `onGroupUnloaded`: the group is Dead here, members waiting in JoinGroup or
    /// SyncGroup are told NOT_COORDINATOR (they find the new coordinator), the timer ends.
    fn unload(&self) {
        self.unloaded.store(true, Ordering::Release);
        self.lock().group.unload();
        self.wake.notify_one();
    }
}

/// A share-partition's state as its group's coordinator stores it. The state epoch moves when
/// an administrator resets the partition (AlterShareGroupOffsets, DeleteShareGroupOffsets):
/// a leader that loaded an older epoch is refused (FENCED_STATE_EPOCH) and loads it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredShareState {
    pub epoch: i32,
    /// None: not started (the group never read the partition, or it was reset to start
    /// again from `share.auto.offset.reset`).
    pub state: Option<Persisted>,
}

/// A producer's offsets in an open transaction, each with the log offset of its record.
pub type PendingOffsets = BTreeMap<(String, i32), (CommittedOffset, i64)>;

/// One partition's commit to make: (topic, partition, offset, leader epoch, metadata).
pub type CommitRequest = (String, i32, i64, i32, Option<String>);

/// A commit that passed the checks: its index among the request's, the partition, the value.
type Accepted = (usize, (String, i32), CommittedOffset);

pub struct GroupCoordinator {
    config: Arc<BrokerConfig>,
    controller: Arc<Controller>,
    replicas: Arc<ReplicaManager>,
    groups: Mutex<HashMap<String, Arc<Slot>>>,
    limits: GroupLimits,
    consumer_limits: ConsumerLimits,
    share_limits: ShareLimits,
    /// The partition leaders' side of share groups, told when a group's share-partition states
    /// are deleted or reset (set once at start, `set_share_manager`).
    share_manager: OnceLock<Weak<crate::share::ShareManager>>,
    /// The topics of the last metadata image a KIP-848 heartbeat saw, by image offset: built
    /// once per metadata change, not at every heartbeat (O(topics) each).
    topics_view: Mutex<Option<(i64, Arc<TopicsView>)>>,
    /// The `__consumer_offsets` partitions whose groups are loaded here, and at which epoch.
    loaded: LoadedPartitions,
}

impl GroupCoordinator {
    pub fn new(
        config: Arc<BrokerConfig>,
        controller: Arc<Controller>,
        replicas: Arc<ReplicaManager>,
    ) -> GroupCoordinator {
        let limits = GroupLimits {
            min_session_timeout: Duration::from_millis(config.group_min_session_timeout_ms),
            max_session_timeout: Duration::from_millis(config.group_max_session_timeout_ms),
            initial_rebalance_delay: Duration::from_millis(config.group_initial_rebalance_delay_ms),
            max_size: config.group_max_size,
        };
        let consumer_limits = ConsumerLimits {
            session_timeout: Duration::from_millis(config.group_consumer_session_timeout_ms),
            heartbeat_interval: Duration::from_millis(config.group_consumer_heartbeat_interval_ms),
            max_size: config.group_consumer_max_size,
            // The static default; `consumer_limits_of` reads the live one (a dynamic config).
            assignment_interval: Duration::from_millis(config.assignment_intervals.consumer.default_ms),
        };
        let share_limits = ShareLimits {
            session_timeout: Duration::from_millis(config.share.session_timeout_ms),
            heartbeat_interval: Duration::from_millis(config.share.heartbeat_interval_ms),
            max_size: usize::try_from(config.share.max_size).unwrap_or(usize::MAX),
            // The static default; `share_limits_of` reads the live one (a dynamic config).
            assignment_interval: Duration::from_millis(config.assignment_intervals.share.default_ms),
        };
        GroupCoordinator {
            share_limits,
            share_manager: OnceLock::new(),
            topics_view: Mutex::new(None),
            config,
            controller,
            replicas,
            groups: Mutex::new(HashMap::new()),
            loaded: LoadedPartitions::new(OFFSETS_TOPIC),
            limits,
            consumer_limits,
        }
    }

    /// The broker's `group.consumer.*` limits with the group's own configs (KIP-848 group
    /// configs, validated when set) over them.
    fn consumer_limits_of(&self, group_id: &str, image: &MetadataImage) -> ConsumerLimits {
        let ms = |key| group_config_ms(image, group_id, key);
        ConsumerLimits {
            session_timeout: ms("consumer.session.timeout.ms").unwrap_or(self.consumer_limits.session_timeout),
            heartbeat_interval: ms("consumer.heartbeat.interval.ms").unwrap_or(self.consumer_limits.heartbeat_interval),
            // The broker default may change at runtime (a dynamic broker config, as in Kafka).
            assignment_interval: ms("consumer.assignment.interval.ms")
                .unwrap_or_else(|| Duration::from_millis(self.config.live().assignment_intervals.consumer.default_ms)),
            ..self.consumer_limits
        }
    }

    /// The broker's `group.share.*` limits with the group's own `share.*` configs over them.
    fn share_limits_of(&self, group_id: &str, image: &MetadataImage) -> ShareLimits {
        let ms = |key| group_config_ms(image, group_id, key);
        ShareLimits {
            session_timeout: ms("share.session.timeout.ms").unwrap_or(self.share_limits.session_timeout),
            heartbeat_interval: ms("share.heartbeat.interval.ms").unwrap_or(self.share_limits.heartbeat_interval),
            assignment_interval: ms("share.assignment.interval.ms")
                .unwrap_or_else(|| Duration::from_millis(self.config.live().assignment_intervals.share.default_ms)),
            ..self.share_limits
        }
    }

    /// Set once at start: the share manager told about deleted or reset share-partitions.
    pub fn set_share_manager(&self, manager: &Arc<crate::share::ShareManager>) {
        let _ = self.share_manager.set(Arc::downgrade(manager));
    }

    fn share_manager(&self) -> Option<Arc<crate::share::ShareManager>> {
        self.share_manager.get().and_then(Weak::upgrade)
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Slot>>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slot(&self, group_id: &str) -> Option<Arc<Slot>> {
        self.map().get(group_id).cloned()
    }

    fn slot_or_create(&self, group_id: &str) -> Arc<Slot> {
        self.map()
            .entry(group_id.to_string())
            .or_insert_with(|| Arc::new(Slot::new(GroupEntry::new(group_id, Instant::now()))))
            .clone()
    }

    /// The topics of `image` as KIP-848 groups read them (name → id, partitions), shared by
    /// every heartbeat until the image changes.
    fn topics_view(&self, image: &MetadataImage) -> Arc<TopicsView> {
        let mut cached = self.topics_view.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((offset, view)) = cached.as_ref()
            && *offset == image.offset
        {
            return view.clone();
        }
        let view: Arc<TopicsView> = Arc::new(
            image
                .topics
                .values()
                .map(|t| (t.name.clone(), (t.id, t.partitions)))
                .collect(),
        );
        *cached = Some((image.offset, view.clone()));
        view
    }

    /// The partitions of `__consumer_offsets` groups are spread over: the topic's, once it
    /// exists (the same count every broker routes by), else the configured one.
    pub fn offsets_partition_count(&self) -> i32 {
        self.controller
            .image()
            .topic(OFFSETS_TOPIC)
            .map_or(self.config.offsets_topic_num_partitions, |t| t.partitions)
    }

    /// Creates `__consumer_offsets` on first use, as Kafka does, replicated
    /// `offsets.topic.replication.factor` times (capped: `internal_replication_factor`).
    pub fn ensure_offsets_topic(&self) -> Result<(), Error> {
        if let Some(topic) = self.controller.image().topic(OFFSETS_TOPIC) {
            // Another request may have created the topic and not yet opened its partitions.
            if self.replicas.get(OFFSETS_TOPIC, topic.partitions - 1).is_some() {
                return Ok(());
            }
            return self.replicas.catch_up(&self.controller.image());
        }
        // Held from the creation until the new partitions are marked loaded: a pass must not
        // load them meanwhile, which would drop the groups this node's requests create in them.
        let _pass = self.loaded.pass();
        let image = self.controller.image();
        let factor = internal_replication_factor(&image, self.config.offsets_topic_replication_factor);
        let configs = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
        let partitions = self.config.offsets_topic_num_partitions;
        match self.controller.create_topic(OFFSETS_TOPIC, partitions, factor, configs) {
            Ok(_) => {
                self.replicas.catch_up(&self.controller.image())?;
                self.loaded.mark_created(&self.replicas, partitions);
                Ok(())
            }
            // Created by another request meanwhile: loaded like any partition led here.
            Err(e) if e.is_topic_already_exists() => self.replicas.catch_up(&self.controller.image()),
            Err(e) => Err(e),
        }
    }

    /// Whether a request for the group may be served here now: its partition is led here and
    /// its groups are loaded at the current leader epoch, loaded by this call if the partition
    /// is small (loading.rs). False wakes the background pass.
    pub fn ready(self: &Arc<Self>, group_id: &str) -> bool {
        let partitions = self.offsets_partition_count();
        let p = partition_for(group_id, partitions);
        match self.loaded.check(&self.replicas, p) {
            Readiness::Loaded => true,
            Readiness::Wait => false,
            Readiness::LoadNow(partition, _claim) => {
                if let Err(e) = self.load_partition(p, &partition, partitions) {
                    tracing::warn!(partition = p, error = %e, "loading the groups of {OFFSETS_TOPIC}-{p}");
                }
                self.loaded.epoch(p) == Some(partition.leader_epoch())
            }
        }
    }

    /// Resolves when a request found its partition led here but not loaded.
    pub async fn loading_wanted(&self) {
        self.loaded.wanted().await;
    }

    /// Loads the groups of every `__consumer_offsets` partition led here (start-up).
    pub fn load(self: &Arc<Self>) -> Result<(), Error> {
        self.sync_partitions()
    }

    /// One failover pass (Kafka's `onElection` / `onResignation`): partitions no longer led
    /// here at their loaded epoch are unloaded, partitions led here at a new epoch loaded. The
    /// first load error is returned; the others are logged, and every failed partition is
    /// tried again by the next pass.
    pub fn sync_partitions(self: &Arc<Self>) -> Result<(), Error> {
        let _pass = self.loaded.pass();
        let partitions = self.controller.image().topic(OFFSETS_TOPIC).map_or(0, |t| t.partitions);
        let plan = self.loaded.plan(&self.replicas, partitions);
        for p in plan.unload {
            // A partition a request is loading now is left to the next pass.
            let Some(_claim) = self.loaded.claim(p) else { continue };
            let dropped = self.unload_partition(p, partitions);
            tracing::info!(
                partition = p,
                groups = dropped,
                "unloaded the groups of {OFFSETS_TOPIC}-{p}"
            );
        }
        let mut first_error = None;
        for (p, partition) in plan.load {
            let Some(_claim) = self.loaded.claim(p) else { continue };
            if self.loaded.epoch(p) == Some(partition.leader_epoch()) {
                continue; // a request loaded it meanwhile
            }
            if let Err(e) = self.load_partition(p, &partition, partitions) {
                tracing::warn!(partition = p, error = %e, "loading the groups of {OFFSETS_TOPIC}-{p}");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Drops the groups of partition `p` (of `partitions`) and marks it unloaded; answers how
    /// many went.
    fn unload_partition(&self, p: i32, partitions: i32) -> usize {
        let dropped: Vec<Arc<Slot>> = {
            let mut map = self.map();
            let ids: Vec<String> = map
                .keys()
                .filter(|id| partition_for(id, partitions) == p)
                .cloned()
                .collect();
            self.loaded.set(p, None);
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for slot in &dropped {
            slot.unload();
        }
        dropped.len()
    }

    /// Loads partition `p` (of `partitions`) at its current leader epoch (the caller holds
    /// its claim): anything left of it goes first, then its records from the log start to the log end are replayed into
    /// groups of its own, installed once the log end has not moved since the last read (a
    /// marker written meanwhile settles transactional offsets in the groups of the map, so
    /// it must be read, or find them installed). Group timers restart for groups with
    /// deadlines (members restored from their snapshots must heartbeat within their session).
    fn load_partition(self: &Arc<Self>, p: i32, partition: &Partition, partitions: i32) -> Result<(), Error> {
        let epoch = partition.leader_epoch();
        self.unload_partition(p, partitions);
        let mut groups: HashMap<String, GroupEntry> = HashMap::new();
        let mut records = 0usize;
        let mut next = partition.offsets()?.log_start_offset;
        for _ in 0..LOAD_ROUNDS_MAX {
            next = loading::replay(partition, next, |r| {
                records += 1;
                self.replay_record(&mut groups, p, r);
            })?;
            let (installed, strays) = {
                let mut map = self.map();
                if partition.offsets()?.log_end_offset > next {
                    continue;
                }
                if partition.leader_epoch() != epoch {
                    // Moved on while loading: the next pass loads the new epoch.
                    return Ok(());
                }
                // Requests in flight since the unload may have created groups of `p`: the
                // loaded state replaces them.
                let stray_ids: Vec<String> = map
                    .keys()
                    .filter(|id| partition_for(id, partitions) == p)
                    .cloned()
                    .collect();
                let strays: Vec<Arc<Slot>> = stray_ids.iter().filter_map(|id| map.remove(id)).collect();
                let installed: Vec<Arc<Slot>> = groups
                    .drain()
                    .map(|(id, entry)| {
                        let slot = Arc::new(Slot::new(entry));
                        map.insert(id, slot.clone());
                        slot
                    })
                    .collect();
                self.loaded.set(p, Some(epoch));
                (installed, strays)
            };
            for slot in &strays {
                slot.unload();
            }
            if records > 0 {
                tracing::info!(
                    partition = p,
                    epoch,
                    records,
                    groups = installed.len(),
                    "loaded the groups of {OFFSETS_TOPIC}-{p}"
                );
            }
            for slot in &installed {
                if slot.lock().next_deadline().is_some() {
                    self.ensure_timer(slot);
                }
            }
            return Ok(());
        }
        Err(Error::Storage {
            op: "load groups from",
            path: format!("{OFFSETS_TOPIC}-{p}").into(),
            source: std::io::Error::other(format!("the log end kept moving in {LOAD_ROUNDS_MAX} reads")),
        })
    }

    /// Applies one record of partition `p` read at load to `groups` (that partition's).
    fn replay_record(&self, groups: &mut HashMap<String, GroupEntry>, p: i32, r: &kafka_protocol::records::Record) {
        let now = Instant::now();
        let Some(key) = r.key.as_ref() else { return };
        if r.control {
            // A transaction marker: the key is (version i16, type i16), type 1 commit, 0
            // abort. It settles that producer's pending offsets in this partition's groups.
            if key.len() >= 4 {
                let commit = i16::from_be_bytes([key[2], key[3]]) == 1;
                for entry in groups.values_mut() {
                    entry.settle_txn(r.producer_id, commit);
                }
            }
            return;
        }
        let Some(record) = OffsetsRecord::decode(key, r.value.as_ref()) else {
            tracing::warn!(partition = p, offset = r.offset, "skipping an unreadable record");
            return;
        };
        match record {
            OffsetsRecord::Offset {
                group,
                topic,
                partition,
                value: Some(value),
            } if r.transactional => {
                // Pending until this producer's marker follows.
                groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(&group, now))
                    .pending_txn_offsets
                    .entry(r.producer_id)
                    .or_default()
                    .insert((topic, partition), (value, r.offset));
            }
            OffsetsRecord::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                let e = groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(&group, now));
                let key = (topic, partition);
                match value {
                    Some(v) => {
                        e.committed_at.insert(key.clone(), r.offset);
                        e.offsets.insert(key, v);
                    }
                    None => {
                        e.committed_at.remove(&key);
                        e.offsets.remove(&key);
                    }
                }
            }
            OffsetsRecord::Group {
                group,
                value: Some(snapshot),
            } => {
                let e = groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(&group, now));
                e.group = Group::restore(&group, snapshot, now);
                // A later classic record means the group was converted.
                e.consumer = None;
            }
            OffsetsRecord::Group { group, value: None } => {
                groups.remove(&group);
            }
            OffsetsRecord::ConsumerGroup {
                group,
                value: Some(snapshot),
            } => {
                let image = self.controller.image();
                let topics = self.topics_view(&image);
                let limits = self.consumer_limits_of(&group, &image);
                let e = groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(&group, now));
                e.group = Group::new(&group, now);
                e.persisted_consumer = Some(snapshot.clone());
                e.consumer = Some(ConsumerGroup::restore(&group, snapshot, &topics, &limits, now));
            }
            OffsetsRecord::ConsumerGroup { group, value: None } => {
                if let Some(e) = groups.get_mut(&group) {
                    e.consumer = None;
                    e.persisted_consumer = None;
                }
            }
            OffsetsRecord::ShareGroup {
                group,
                value: Some(snapshot),
            } => {
                let e = groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(&group, now));
                e.share = Some(ShareGroup::restore(&group, &snapshot));
                e.persisted_share = Some(snapshot);
            }
            OffsetsRecord::ShareGroup { group, value: None } => {
                if let Some(e) = groups.get_mut(&group) {
                    e.share = None;
                    e.persisted_share = None;
                    e.share_states.clear();
                }
            }
            OffsetsRecord::ShareState {
                group,
                topic_id,
                partition,
                value,
            } => {
                let e = groups
                    .entry(group.clone())
                    .or_insert_with(|| GroupEntry::new(&group, now));
                match value {
                    Some(stored) => e.share_states.insert((topic_id, partition), stored),
                    None => e.share_states.remove(&(topic_id, partition)),
                };
            }
        }
    }

    /// Appends records to the group's `__consumer_offsets` partition and waits until every
    /// in-sync replica holds them.
    async fn persist(&self, slot: &Slot, group_id: &str, records: &[OffsetsRecord]) -> Result<(), Error> {
        if records.is_empty() {
            return Ok(());
        }
        self.persist_at(slot, group_id, records).await.map(|_| ())
    }

    /// `persist`, answering the log offset of the first record (the others follow it).
    async fn persist_at(&self, slot: &Slot, group_id: &str, records: &[OffsetsRecord]) -> Result<i64, Error> {
        self.ensure_offsets_topic()?;
        let now = now_ms();
        let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = records
            .iter()
            .map(|r| {
                let (key, value) = r.encode();
                (Some(key), value, now)
            })
            .collect();
        let encoded = encode_records(&records, Compression::None)?;
        let batches = validate_batches(&encoded, usize::MAX)?;
        self.append_acknowledged(slot, group_id, batches, Origin::Client).await
    }

    /// The one write path of the group coordinator (Kafka's coordinators append with acks=-1):
    /// only for a group whose state is loaded at the partition's current epoch, refused before
    /// the write below `min.insync.replicas`, acknowledged once every in-sync replica holds it.
    /// A group unloaded while its write was in flight gets NOT_COORDINATOR (Kafka's append
    /// callbacks check the group is not Dead): the state it belonged to is gone, and the
    /// reloaded one may not have read the write. Answers the offset of the first record.
    async fn append_acknowledged(
        &self,
        slot: &Slot,
        group_id: &str,
        batches: Vec<crate::log::ValidBatch>,
        origin: Origin,
    ) -> Result<i64, Error> {
        let index = partition_for(group_id, self.offsets_partition_count());
        let not_here = || Error::NotLeader(format!("{OFFSETS_TOPIC}-{index} (its groups are not loaded here)"));
        if slot.is_unloaded() || !self.loaded.is_loaded(&self.replicas, index) {
            return Err(not_here());
        }
        let partition = self.replicas.get(OFFSETS_TOPIC, index).ok_or_else(not_here)?;
        partition.check_enough_replicas()?;
        let info = partition.append_from(batches, true, origin).await?;
        partition.wait_acknowledged(info.last_offset).await?;
        if slot.is_unloaded() {
            return Err(not_here());
        }
        Ok(info.base_offset)
    }

    async fn persist_group(&self, group_id: &str, slot: &Slot) {
        let snapshot = {
            let e = slot.lock();
            match e.group.state {
                GroupState::Stable | GroupState::Empty => e.group.snapshot(),
                _ => return,
            }
        };
        let record = OffsetsRecord::Group {
            group: group_id.to_string(),
            value: Some(snapshot),
        };
        if let Err(e) = self.persist(slot, group_id, &[record]).await {
            tracing::warn!(group = group_id, error = %e, "persisting group metadata");
        }
    }

    /// Keeps one timer task per group with deadlines; it ends when the group has none.
    fn ensure_timer(self: &Arc<Self>, slot: &Arc<Slot>) {
        if slot.timer_running.swap(true, Ordering::AcqRel) {
            slot.wake.notify_one();
            return;
        }
        let me = self.clone();
        let slot = slot.clone();
        tokio::spawn(async move {
            loop {
                if slot.is_unloaded() {
                    // Its partition moved: the new coordinator times the group's members.
                    slot.timer_running.store(false, Ordering::Release);
                    return;
                }
                let deadline = slot.lock().next_deadline();
                let Some(deadline) = deadline else {
                    slot.timer_running.store(false, Ordering::Release);
                    // A deadline set between our check and the store would have found the
                    // flag still up and only notified: check once more.
                    if slot.lock().next_deadline().is_some() && !slot.timer_running.swap(true, Ordering::AcqRel) {
                        continue;
                    }
                    return;
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {}
                    _ = slot.wake.notified() => continue,
                }
                let (changed, id) = {
                    let mut e = slot.lock();
                    let now = Instant::now();
                    let consumer_changed = e.consumer.as_mut().is_some_and(|c| c.expire(now));
                    let share_changed = match e.share.as_mut() {
                        Some(s) => {
                            let image = me.controller.image();
                            let interval = me.share_limits_of(&s.id, &image).assignment_interval;
                            s.expire(&me.topics_view(&image), interval, now)
                        }
                        None => false,
                    };
                    let changed = e.group.expire(&me.limits, now) || consumer_changed || share_changed;
                    (changed, e.group.id.clone())
                };
                if changed {
                    me.persist_group(&id, &slot).await;
                    if let Err(e) = me.persist_consumer(&id, &slot).await {
                        tracing::warn!(group = %id, error = %e, "persisting consumer group");
                    }
                    if let Err(e) = me.persist_share(&id, &slot).await {
                        tracing::warn!(group = %id, error = %e, "persisting share group");
                    }
                }
            }
        });
    }

    pub async fn join(self: &Arc<Self>, group_id: &str, req: JoinRequest) -> JoinResult {
        if group_id.is_empty() {
            return JoinResult {
                error: ResponseError::InvalidGroupId.code(),
                generation: -1,
                ..Default::default()
            };
        }
        if let Err(e) = self.ensure_offsets_topic() {
            tracing::warn!(error = %e, "creating {OFFSETS_TOPIC}");
            return JoinResult {
                error: ResponseError::CoordinatorNotAvailable.code(),
                generation: -1,
                ..Default::default()
            };
        }
        // Kafka refuses a member id it never handed out for a group it does not know.
        if !req.member_id.is_empty() && self.slot(group_id).is_none() {
            return JoinResult {
                error: ResponseError::UnknownMemberId.code(),
                generation: -1,
                member_id: req.member_id,
                ..Default::default()
            };
        }
        let slot = self.slot_or_create(group_id);
        let (tx, rx) = oneshot::channel();
        {
            let mut e = slot.lock();
            if e.share.is_some() {
                // Kafka: a group of another type is not converted.
                return JoinResult {
                    error: ResponseError::InconsistentGroupProtocol.code(),
                    generation: -1,
                    member_id: String::new(),
                    ..Default::default()
                };
            }
            if let Some(consumer) = &e.consumer {
                if !consumer.members.is_empty() {
                    // Kafka with online migration disabled: a classic member cannot join a
                    // consumer group that has members.
                    return JoinResult {
                        error: ResponseError::InconsistentGroupProtocol.code(),
                        generation: -1,
                        member_id: String::new(),
                        ..Default::default()
                    };
                }
                // An empty consumer group becomes a classic group (Kafka converts it too).
                e.consumer = None;
            }
            e.group.join(req, &self.limits, Instant::now(), tx);
        }
        self.ensure_timer(&slot);
        rx.await.unwrap_or(JoinResult {
            error: ResponseError::CoordinatorNotAvailable.code(),
            generation: -1,
            ..Default::default()
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        self: &Arc<Self>,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        let Some(slot) = self.slot(group_id) else {
            return SyncResult {
                error: ResponseError::UnknownMemberId.code(),
                ..Default::default()
            };
        };
        let (tx, rx) = oneshot::channel();
        // The assignment is stored in one `__consumer_offsets` record, which must fit in a
        // batch; Kafka answers an assignment that does not fit with UNKNOWN_SERVER_ERROR. Only
        // the leader's SyncGroup that passes the checks stores one, so only it can fail so.
        let assignment_bytes: usize = assignments.iter().map(|(m, a)| m.len() + a.len()).sum();
        let completed = {
            let mut e = slot.lock();
            if assignment_bytes > self.config.log.max_message_bytes
                && e.group
                    .sync_completes(member_id, instance_id, generation, protocol_type, protocol)
            {
                tracing::warn!(
                    group = group_id,
                    assignment_bytes,
                    "group assignment too large to store"
                );
                e.group.abort_sync(
                    member_id,
                    ResponseError::UnknownServerError,
                    &self.limits,
                    Instant::now(),
                    tx,
                );
                false
            } else {
                e.group.sync(
                    member_id,
                    instance_id,
                    generation,
                    protocol_type,
                    protocol,
                    assignments,
                    Instant::now(),
                    tx,
                )
            }
        };
        if completed {
            self.persist_group(group_id, &slot).await;
        }
        self.ensure_timer(&slot);
        rx.await.unwrap_or(SyncResult {
            error: ResponseError::CoordinatorNotAvailable.code(),
            ..Default::default()
        })
    }

    pub fn heartbeat(&self, group_id: &str, member_id: &str, instance_id: Option<&str>, generation: i32) -> i16 {
        match self.slot(group_id) {
            None => ResponseError::UnknownMemberId.code(),
            Some(slot) => slot
                .lock()
                .group
                .heartbeat(member_id, instance_id, generation, Instant::now()),
        }
    }

    /// LeaveGroup for each (member id, instance id); the group-level error when it is unknown.
    pub async fn leave(
        self: &Arc<Self>,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<i16>, i16> {
        let Some(slot) = self.slot(group_id) else {
            return Err(ResponseError::UnknownMemberId.code());
        };
        let codes: Vec<i16> = {
            let mut e = slot.lock();
            members
                .iter()
                .map(|(m, i)| e.group.leave(m, i.as_deref(), &self.limits, Instant::now()))
                .collect()
        };
        self.ensure_timer(&slot);
        self.persist_group(group_id, &slot).await;
        Ok(codes)
    }

    /// The partitions of `offsets` by topic id, as a consumer group's members hold them; a
    /// topic that does not exist gets the nil id, which no member holds.
    fn partition_ids(&self, offsets: &[CommitRequest]) -> Vec<consumer::Tp> {
        let image = self.controller.image();
        offsets
            .iter()
            .map(|(topic, partition, ..)| (image.topic(topic).map_or(uuid::Uuid::nil(), |t| t.id), *partition))
            .collect()
    }

    /// Checks each commit (known partition, metadata size) and builds the records of those
    /// accepted: one code per commit, the records, and (index, partition, value) per accepted
    /// commit. Shared by OffsetCommit and TxnOffsetCommit.
    fn offset_records(
        &self,
        group_id: &str,
        offsets: Vec<CommitRequest>,
    ) -> (Vec<i16>, Vec<OffsetsRecord>, Vec<Accepted>) {
        let image = self.controller.image();
        let mut codes = Vec::with_capacity(offsets.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        let now = now_ms();
        for (topic, partition, offset, leader_epoch, metadata) in offsets {
            let metadata = metadata.unwrap_or_default();
            let code = if image
                .topic(&topic)
                .is_none_or(|t| partition < 0 || partition >= t.partitions)
            {
                ResponseError::UnknownTopicOrPartition.code()
            } else if metadata.len() > self.config.offset_metadata_max_bytes {
                ResponseError::OffsetMetadataTooLarge.code()
            } else {
                let value = CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp: now,
                };
                records.push(OffsetsRecord::Offset {
                    group: group_id.to_string(),
                    topic: topic.clone(),
                    partition,
                    value: Some(value.clone()),
                });
                accepted.push((codes.len(), (topic, partition), value));
                0
            };
            codes.push(code);
        }
        (codes, records, accepted)
    }

    /// OffsetCommit at `version`: checks the member as Kafka's
    /// `OffsetMetadataManager.validateOffsetCommit` does, then makes the offsets durable before
    /// answering. Returns one code per requested partition, in order.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<CommitRequest>,
        version: i16,
    ) -> Vec<i16> {
        let all = |code: i16| vec![code; offsets.len()];
        if group_id.is_empty() {
            return all(ResponseError::InvalidGroupId.code());
        }
        let slot = match self.slot(group_id) {
            Some(slot) => slot,
            // Standalone consumers (generation -1) create the group by committing.
            None if generation < 0 => self.slot_or_create(group_id),
            // From v9 the answer serves both protocols; before, ILLEGAL_GENERATION as always.
            None if version >= 9 => return all(ResponseError::GroupIdNotFound.code()),
            None => return all(ResponseError::IllegalGeneration.code()),
        };
        {
            let mut e = slot.lock();
            if e.share.is_some() {
                // A share group has no committed offsets (Kafka: GroupIdNotFoundException).
                return all(ResponseError::GroupIdNotFound.code());
            }
            let valid = match &e.consumer {
                Some(c) => validate_consumer_commit(c, member_id, instance_id, generation, false, version, || {
                    self.partition_ids(&offsets)
                }),
                None => e.group.validate_commit(member_id, instance_id, generation, false),
            };
            if let Err(e) = valid {
                return all(e.code());
            }
            if e.consumer.is_none() {
                e.group.commit_keeps_session(member_id, Instant::now());
            }
        }
        let (mut codes, records, accepted) = self.offset_records(group_id, offsets);
        let persisted = if records.is_empty() {
            Ok(0)
        } else {
            self.persist_at(&slot, group_id, &records).await
        };
        match persisted {
            Ok(base) => {
                let mut e = slot.lock();
                for (at, (_, key, value)) in (base..).zip(accepted) {
                    e.committed_at.insert(key.clone(), at);
                    e.offsets.insert(key, value);
                }
            }
            Err(err) => {
                tracing::warn!(group = group_id, error = %err, "offset commit not durable");
                let code = replication_error_code(&err).unwrap_or_else(|| err.code());
                for (i, _, _) in accepted {
                    codes[i] = code;
                }
            }
        }
        codes
    }

    /// TxnOffsetCommit: checks the member as Kafka's `validateTransactionalOffsetCommit` does
    /// (v0-2 name no member: `member_id` "", `generation` -1, no instance id),
    /// then writes the offsets to the group's `__consumer_offsets` partition as a
    /// transactional batch of the producer. They stay pending (invisible to OffsetFetch) until
    /// `complete_txn`. Returns one code per requested partition, in order. The caller has
    /// checked that the partition is in the producer's transaction.
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_commit(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<CommitRequest>,
    ) -> Vec<i16> {
        let all = |code: i16| vec![code; offsets.len()];
        if group_id.is_empty() {
            return all(ResponseError::InvalidGroupId.code());
        }
        if self.ensure_offsets_topic().is_err() {
            return all(ResponseError::CoordinatorNotAvailable.code());
        }
        let slot = match self.slot(group_id) {
            Some(slot) => slot,
            // Kafka: a group that does not exist is created (a "simple" group) when the
            // commit carries no generation.
            None if generation < 0 => self.slot_or_create(group_id),
            None => return all(ResponseError::IllegalGeneration.code()),
        };
        {
            let e = slot.lock();
            if e.share.is_some() {
                return all(ResponseError::GroupIdNotFound.code());
            }
            let valid = match &e.consumer {
                Some(c) => validate_consumer_commit(c, member_id, instance_id, generation, true, 0, || {
                    self.partition_ids(&offsets)
                })
                // The TxnOffsetCommit API knows no STALE_MEMBER_EPOCH (Kafka's
                // `OffsetMetadataManager.validateTransactionalOffsetCommit`).
                .map_err(|e| match e {
                    ResponseError::StaleMemberEpoch => ResponseError::IllegalGeneration,
                    other => other,
                }),
                None => e.group.validate_commit(member_id, instance_id, generation, true),
            };
            if let Err(e) = valid {
                return all(e.code());
            }
        }
        let (mut codes, records, accepted) = self.offset_records(group_id, offsets);
        if records.is_empty() {
            return codes;
        }
        match self
            .persist_transactional(&slot, group_id, producer_id, producer_epoch, &records)
            .await
        {
            Ok(base) => {
                let mut e = slot.lock();
                let pending = e.pending_txn_offsets.entry(producer_id).or_default();
                for (at, (_, key, value)) in (base..).zip(accepted) {
                    pending.insert(key, (value, at));
                }
            }
            Err(err) => {
                tracing::warn!(group = group_id, producer_id, error = %err, "transactional offset commit not written");
                // Kafka's CoordinatorRuntime normalization of write errors.
                let code = replication_error_code(&err).unwrap_or_else(|| match err {
                    Error::ShuttingDown => ResponseError::NotCoordinator.code(),
                    Error::UnknownTopicOrPartition(_) => ResponseError::CoordinatorNotAvailable.code(),
                    Error::MessageTooLarge { .. } => ResponseError::UnknownServerError.code(),
                    other => other.code(),
                });
                for (i, _, _) in accepted {
                    codes[i] = code;
                }
            }
        }
        codes
    }

    /// Appends offset records as one transactional batch of `producer_id` (attributes bit 4,
    /// no sequence: Kafka's coordinator writes) and waits until every in-sync replica holds
    /// it; answers the log offset of the first record.
    async fn persist_transactional(
        &self,
        slot: &Slot,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        records: &[OffsetsRecord],
    ) -> Result<i64, Error> {
        let now = now_ms();
        let records: Vec<kafka_protocol::records::Record> = records
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (key, value) = r.encode();
                kafka_protocol::records::Record {
                    transactional: true,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id,
                    producer_epoch,
                    timestamp_type: kafka_protocol::records::TimestampType::Creation,
                    offset: i as i64,
                    // One batch with baseSequence -1 (the encoder splits batches where
                    // offset - sequence changes).
                    sequence: i as i32 - 1,
                    timestamp: now,
                    key: Some(key),
                    value,
                    headers: Default::default(),
                }
            })
            .collect();
        let mut buf = bytes::BytesMut::new();
        kafka_protocol::records::RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &kafka_protocol::records::RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .map_err(|e| Error::CorruptBatch(format!("encoding transactional offsets: {e}")))?;
        let batches = validate_batches(&buf.freeze(), usize::MAX)?;
        self.append_acknowledged(slot, group_id, batches, Origin::Coordinator)
            .await
    }

    /// Settles a producer's transactional offsets in the groups of one `__consumer_offsets`
    /// partition once its marker is written there (or read back at load): applied on commit,
    /// dropped on abort.
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        let partitions = self.offsets_partition_count();
        let slots: Vec<Arc<Slot>> = self.map().values().cloned().collect();
        for slot in slots {
            let mut e = slot.lock();
            if partition_for(&e.group.id, partitions) == partition {
                e.settle_txn(producer_id, commit);
            }
        }
    }

    /// True when a transaction holds an uncommitted offset for this partition of the group
    /// (OffsetFetch `require_stable` answers UNSTABLE_OFFSET_COMMIT then, KIP-447).
    pub fn has_pending_txn_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        self.slot(group_id).is_some_and(|slot| {
            slot.lock()
                .pending_txn_offsets
                .values()
                .any(|p| p.contains_key(&(topic.to_string(), partition)))
        })
    }

    /// Committed offsets of a group: all, or those of the requested topics and partitions.
    pub fn fetch_offsets(&self, group_id: &str) -> BTreeMap<(String, i32), CommittedOffset> {
        self.slot(group_id)
            .map(|slot| slot.lock().offsets.clone())
            .unwrap_or_default()
    }

    /// (group id, protocol type, state name, group type) of every group.
    pub fn list(&self) -> Vec<(String, String, &'static str, &'static str)> {
        let slots: Vec<Arc<Slot>> = self.map().values().cloned().collect();
        let mut out: Vec<_> = slots
            .iter()
            .map(|s| {
                let e = s.lock();
                let protocol_type = match &e.consumer {
                    Some(_) => "consumer".to_string(),
                    None => e.group.protocol_type.clone().unwrap_or_default(),
                };
                (e.group.id.clone(), protocol_type, e.state_name(), e.group_type())
            })
            .filter(|(_, _, state, _)| *state != "Dead")
            .collect();
        out.sort();
        out
    }

    /// ConsumerGroupHeartbeat (KIP-848).
    pub async fn consumer_heartbeat(self: &Arc<Self>, group_id: &str, req: HeartbeatIn) -> HeartbeatOut {
        let fail = |code: ResponseError, message: String| HeartbeatOut {
            error: code.code(),
            message: Some(message),
            member_epoch: -1,
            ..Default::default()
        };
        if group_id.is_empty() {
            return fail(ResponseError::InvalidRequest, "the group id is empty".into());
        }
        if self.ensure_offsets_topic().is_err() {
            return fail(
                ResponseError::CoordinatorNotAvailable,
                "the offsets topic is not available".into(),
            );
        }
        let image = self.controller.image();
        let topics = self.topics_view(&image);
        let slot = self.slot_or_create(group_id);
        let out = {
            let mut e = slot.lock();
            if e.share.is_some() {
                return fail(
                    ResponseError::GroupIdNotFound,
                    format!("Group {group_id} is not a consumer group."),
                );
            }
            if e.consumer.is_none() {
                if !(e.group.is_empty() && e.group.state == GroupState::Empty) {
                    // Kafka: a classic group with members is not converted (online upgrade is
                    // not supported here).
                    return fail(
                        ResponseError::GroupIdNotFound,
                        format!("group {group_id} is not a consumer group"),
                    );
                }
                e.consumer = Some(ConsumerGroup::new(group_id, Instant::now()));
            }
            match e.consumer.as_mut() {
                Some(c) => c.heartbeat(req, &topics, &self.consumer_limits_of(group_id, &image), Instant::now()),
                None => fail(ResponseError::CoordinatorNotAvailable, "no group".into()),
            }
        };
        self.ensure_timer(&slot);
        // Kafka answers once the group's new state is written; a failed write fails the
        // heartbeat (the member retries).
        if out.error == 0
            && let Err(e) = self.persist_consumer(group_id, &slot).await
        {
            tracing::warn!(group = group_id, error = %e, "persisting consumer group");
            return fail(store_failure(&e), "the group state could not be stored".into());
        }
        out
    }

    /// Writes a KIP-848 group's snapshot when it changed since the last write.
    async fn persist_consumer(&self, group_id: &str, slot: &Slot) -> Result<(), Error> {
        self.persist_changed(
            group_id,
            slot,
            |e| e.consumer.as_ref().map(ConsumerGroup::snapshot),
            |e| &mut e.persisted_consumer,
            |group, value| OffsetsRecord::ConsumerGroup { group, value },
        )
        .await
    }

    /// Writes a group's snapshot (`current`) when it differs from the last one written
    /// (`stored`), as the record `record` makes of it.
    async fn persist_changed<S: Clone + PartialEq>(
        &self,
        group_id: &str,
        slot: &Slot,
        current: impl Fn(&GroupEntry) -> Option<S>,
        stored: impl Fn(&mut GroupEntry) -> &mut Option<S>,
        record: impl Fn(String, Option<S>) -> OffsetsRecord,
    ) -> Result<(), Error> {
        let snapshot = {
            let mut e = slot.lock();
            let Some(snapshot) = current(&e) else { return Ok(()) };
            if stored(&mut e).as_ref() == Some(&snapshot) {
                return Ok(());
            }
            snapshot
        };
        let written = record(group_id.to_string(), Some(snapshot.clone()));
        self.persist(slot, group_id, &[written]).await?;
        *stored(&mut slot.lock()) = Some(snapshot);
        Ok(())
    }

    /// ShareGroupHeartbeat (KIP-932), validated by `share::invalid_heartbeat`.
    pub async fn share_heartbeat(self: &Arc<Self>, group_id: &str, req: ShareHeartbeatIn) -> HeartbeatOut {
        let fail = |code: ResponseError, message: String| HeartbeatOut {
            error: code.code(),
            message: Some(message),
            member_epoch: -1,
            ..Default::default()
        };
        if self.ensure_offsets_topic().is_err() {
            return fail(
                ResponseError::CoordinatorNotAvailable,
                "the offsets topic is not available".into(),
            );
        }
        let image = self.controller.image();
        let topics = self.topics_view(&image);
        // Kafka creates a share group only when a member joins (epoch 0).
        let slot = match (self.slot(group_id), req.member_epoch) {
            (Some(slot), _) => slot,
            (None, 0) => self.slot_or_create(group_id),
            (None, _) => {
                return fail(
                    ResponseError::GroupIdNotFound,
                    format!("Share group {group_id} not found."),
                );
            }
        };
        let out = {
            let mut e = slot.lock();
            if !e.may_be_share() {
                return fail(
                    ResponseError::GroupIdNotFound,
                    format!("Group {group_id} is not a share group."),
                );
            }
            let limits = self.share_limits_of(group_id, &image);
            e.share
                .get_or_insert_with(|| ShareGroup::new(group_id))
                .heartbeat(req, &topics, &limits, Instant::now())
        };
        self.ensure_timer(&slot);
        if let Err(e) = self.persist_share(group_id, &slot).await {
            tracing::warn!(group = group_id, error = %e, "persisting share group");
            return fail(store_failure(&e), "the group state could not be stored".into());
        }
        out
    }

    /// Writes a share group's snapshot when it changed since the last write.
    async fn persist_share(&self, group_id: &str, slot: &Slot) -> Result<(), Error> {
        self.persist_changed(
            group_id,
            slot,
            |e| e.share.as_ref().map(ShareGroup::snapshot),
            |e| &mut e.persisted_share,
            |group, value| OffsetsRecord::ShareGroup { group, value },
        )
        .await
    }

    /// The stored state of a share-partition, for its leader to load (Kafka's
    /// ReadShareGroupState), with its state epoch: a state of None was never started. Only
    /// where the group's coordinator is (`NOT_COORDINATOR` elsewhere); `GROUP_ID_NOT_FOUND`
    /// when the group is not a share group.
    pub fn share_state(self: &Arc<Self>, group_id: &str, tp: consumer::Tp) -> Result<StoredShareState, i16> {
        let slot = self.share_slot(group_id)?;
        let e = slot.lock();
        Ok(e.share_states
            .get(&tp)
            .cloned()
            .unwrap_or(StoredShareState { epoch: 0, state: None }))
    }

    /// The slot of a share group served here.
    fn share_slot(self: &Arc<Self>, group_id: &str) -> Result<Arc<Slot>, i16> {
        if self.ensure_offsets_topic().is_err() {
            return Err(ResponseError::CoordinatorNotAvailable.code());
        }
        if !self.ready(group_id) {
            return Err(ResponseError::NotCoordinator.code());
        }
        let slot = self.slot(group_id).ok_or(ResponseError::GroupIdNotFound.code())?;
        if slot.lock().share.is_none() {
            return Err(ResponseError::GroupIdNotFound.code());
        }
        Ok(slot)
    }

    /// Stores a share-partition's state (Kafka's WriteShareGroupState, acks=all) for a leader
    /// that loaded it at `epoch`: refused with FENCED_STATE_EPOCH when the partition was reset
    /// since. Answered once every in-sync replica of the group's partition holds it.
    pub async fn write_share_state(
        self: &Arc<Self>,
        group_id: &str,
        tp: consumer::Tp,
        epoch: i32,
        state: Persisted,
    ) -> Result<(), i16> {
        let slot = self.share_slot(group_id)?;
        let stored_epoch = slot.lock().share_states.get(&tp).map_or(0, |s| s.epoch);
        if stored_epoch != epoch {
            return Err(ResponseError::FencedStateEpoch.code());
        }
        let stored = StoredShareState {
            epoch,
            state: Some(state),
        };
        self.store_share_states(group_id, &slot, vec![(tp, stored)]).await
    }

    /// Writes share-partition states and records them as stored.
    async fn store_share_states(
        &self,
        group_id: &str,
        slot: &Slot,
        states: Vec<(consumer::Tp, StoredShareState)>,
    ) -> Result<(), i16> {
        let records: Vec<OffsetsRecord> = states
            .iter()
            .map(|((topic_id, partition), stored)| OffsetsRecord::ShareState {
                group: group_id.to_string(),
                topic_id: *topic_id,
                partition: *partition,
                value: Some(stored.clone()),
            })
            .collect();
        match self.persist(slot, group_id, &records).await {
            Ok(()) => {
                let mut e = slot.lock();
                for (tp, stored) in states {
                    e.share_states.insert(tp, stored);
                }
                Ok(())
            }
            Err(e) => Err(match e {
                Error::NotLeader(_) => ResponseError::NotCoordinator.code(),
                e => replication_error_code(&e).unwrap_or_else(|| e.code()),
            }),
        }
    }

    /// The stored start offset of each share-partition of a group, with the offsets past it
    /// whose delivery is complete (DescribeShareGroupOffsets, the lag of KIP-1226): those
    /// named, or all it ever started when `partitions` is None. -1 and -1: not started.
    pub fn share_offsets(
        self: &Arc<Self>,
        group_id: &str,
        partitions: Option<&[consumer::Tp]>,
    ) -> Result<Vec<(consumer::Tp, i64, i64)>, i16> {
        let slot = self.share_slot(group_id)?;
        let e = slot.lock();
        let offsets = |s: Option<&StoredShareState>| {
            s.and_then(|s| s.state.as_ref())
                .map_or((-1, -1), |p| (p.start_offset, p.delivery_complete_count()))
        };
        let row = |tp: &consumer::Tp, s: Option<&StoredShareState>| {
            let (start, complete) = offsets(s);
            (*tp, start, complete)
        };
        Ok(match partitions {
            Some(tps) => tps.iter().map(|tp| row(tp, e.share_states.get(tp))).collect(),
            None => e
                .share_states
                .iter()
                .filter(|(_, s)| s.state.is_some())
                .map(|(tp, s)| row(tp, Some(s)))
                .collect(),
        })
    }

    /// Resets share-partitions of an empty share group (AlterShareGroupOffsets: a new start
    /// offset with nothing in flight; DeleteShareGroupOffsets: None, started again from
    /// `share.auto.offset.reset`), each at a new state epoch, so that leaders holding the old
    /// state load it again. A group that does not exist yet is created empty, as Kafka does
    /// for a reset before any member joined. NON_EMPTY_GROUP while it has members.
    pub async fn reset_share_offsets(
        self: &Arc<Self>,
        group_id: &str,
        resets: Vec<(consumer::Tp, Option<i64>)>,
        create: bool,
    ) -> Result<(), i16> {
        if create && self.ensure_offsets_topic().is_ok() && self.ready(group_id) {
            let slot = self.slot_or_create(group_id);
            let mut e = slot.lock();
            if e.share.is_none() && e.may_be_share() {
                e.share = Some(ShareGroup::new(group_id));
            }
        }
        let slot = self.share_slot(group_id)?;
        let states = {
            let e = slot.lock();
            if e.share.as_ref().is_some_and(|g| !g.members.is_empty()) {
                return Err(ResponseError::NonEmptyGroup.code());
            }
            resets
                .into_iter()
                .map(|(tp, start)| {
                    let epoch = e.share_states.get(&tp).map_or(0, |s| s.epoch).wrapping_add(1);
                    let state = start.map(|start_offset| Persisted {
                        start_offset,
                        batches: Vec::new(),
                    });
                    (tp, StoredShareState { epoch, state })
                })
                .collect()
        };
        if let Err(e) = self.persist_share(group_id, &slot).await {
            return Err(store_failure(&e).code());
        }
        self.store_share_states(group_id, &slot, states).await?;
        if let Some(manager) = self.share_manager() {
            manager.forget_group(group_id);
        }
        Ok(())
    }

    /// OffsetFetch v9: a consumer-group member fetching must be known, at its current epoch.
    pub fn validate_fetch_member(&self, group_id: &str, member_id: &str, epoch: i32) -> Result<(), i16> {
        let Some(slot) = self.slot(group_id) else {
            return Err(ResponseError::GroupIdNotFound.code());
        };
        let e = slot.lock();
        let Some(c) = &e.consumer else {
            return Err(ResponseError::GroupIdNotFound.code());
        };
        let member = c.members.get(member_id).ok_or(ResponseError::UnknownMemberId.code())?;
        if member.epoch != epoch {
            return Err(ResponseError::StaleMemberEpoch.code());
        }
        Ok(())
    }

    /// Runs `f` on a group's entry, if the group exists.
    pub fn with_group<T>(&self, group_id: &str, f: impl FnOnce(&GroupEntry) -> T) -> Option<T> {
        self.slot(group_id).map(|slot| f(&slot.lock()))
    }

    /// DeleteGroups for one group: only an empty group may go (NON_EMPTY_GROUP otherwise).
    pub async fn delete_group(&self, group_id: &str) -> i16 {
        let Some(slot) = self.slot(group_id) else {
            return ResponseError::GroupIdNotFound.code();
        };
        let records: Vec<OffsetsRecord> = {
            let mut e = slot.lock();
            if !e.has_no_members() || e.group.state != GroupState::Empty {
                return ResponseError::NonEmptyGroup.code();
            }
            e.group.kill();
            let mut records: Vec<OffsetsRecord> = e
                .offsets
                .keys()
                .map(|(t, p)| OffsetsRecord::Offset {
                    group: group_id.to_string(),
                    topic: t.clone(),
                    partition: *p,
                    value: None,
                })
                .collect();
            records.push(OffsetsRecord::Group {
                group: group_id.to_string(),
                value: None,
            });
            if e.consumer.take().is_some() {
                records.push(OffsetsRecord::ConsumerGroup {
                    group: group_id.to_string(),
                    value: None,
                });
            }
            for (topic_id, partition) in std::mem::take(&mut e.share_states).into_keys() {
                records.push(OffsetsRecord::ShareState {
                    group: group_id.to_string(),
                    topic_id,
                    partition,
                    value: None,
                });
            }
            if e.share.take().is_some() {
                records.push(OffsetsRecord::ShareGroup {
                    group: group_id.to_string(),
                    value: None,
                });
            }
            e.offsets.clear();
            records
        };
        self.map().remove(group_id);
        if let Some(manager) = self.share_manager() {
            manager.forget_group(group_id);
        }
        match self.persist(&slot, group_id, &records).await {
            Ok(()) => 0,
            Err(e) => replication_error_code(&e).unwrap_or_else(|| e.code()),
        }
    }

    /// OffsetDelete: removes committed offsets of partitions whose topic no member subscribes to.
    pub async fn delete_offsets(&self, group_id: &str, partitions: &[(String, i32)]) -> Result<Vec<i16>, i16> {
        let Some(slot) = self.slot(group_id) else {
            return Err(ResponseError::GroupIdNotFound.code());
        };
        let (codes, records) = {
            let mut e = slot.lock();
            if e.share.is_some() {
                return Err(ResponseError::GroupIdNotFound.code());
            }
            let subscribed = match &e.consumer {
                Some(c) => c.members.values().flat_map(|m| m.subscribed.iter().cloned()).collect(),
                None => {
                    if e.group.state != GroupState::Empty && e.group.protocol_type.as_deref() != Some("consumer") {
                        return Err(ResponseError::NonEmptyGroup.code());
                    }
                    e.group.subscribed_topics().unwrap_or_default()
                }
            };
            let mut codes = Vec::new();
            let mut records = Vec::new();
            for (topic, partition) in partitions {
                if subscribed.contains(topic) {
                    codes.push(ResponseError::GroupSubscribedToTopic.code());
                    continue;
                }
                if e.offsets.remove(&(topic.clone(), *partition)).is_some() {
                    records.push(OffsetsRecord::Offset {
                        group: group_id.to_string(),
                        topic: topic.clone(),
                        partition: *partition,
                        value: None,
                    });
                }
                codes.push(0);
            }
            (codes, records)
        };
        self.persist(&slot, group_id, &records)
            .await
            .map_err(|e| replication_error_code(&e).unwrap_or_else(|| e.code()))?;
        Ok(codes)
    }

    /// Offsets retention (`offsets.retention.minutes`): an empty group's offsets expire once
    /// the group has been empty that long (KIP-211). Runs from a periodic task.
    pub async fn expire_offsets(&self, now: Instant) {
        let retention = Duration::from_secs(self.config.offsets_retention_minutes.saturating_mul(60));
        let slots: Vec<Arc<Slot>> = self.map().values().cloned().collect();
        for slot in slots {
            let (id, records) = {
                let mut e = slot.lock();
                let empty_since = match &e.consumer {
                    Some(c) => c.empty_since.filter(|_| c.members.is_empty()),
                    None => e.group.empty_since.filter(|_| e.group.state == GroupState::Empty),
                };
                let expired = empty_since.is_some_and(|since| now.duration_since(since) >= retention);
                if !expired || e.offsets.is_empty() {
                    continue;
                }
                let id = e.group.id.clone();
                let records: Vec<OffsetsRecord> = std::mem::take(&mut e.offsets)
                    .into_keys()
                    .map(|(t, p)| OffsetsRecord::Offset {
                        group: id.clone(),
                        topic: t,
                        partition: p,
                        value: None,
                    })
                    .collect();
                (id, records)
            };
            tracing::info!(group = %id, partitions = records.len(), "offsets expired (offsets.retention.minutes)");
            if let Err(e) = self.persist(&slot, &id, &records).await {
                tracing::warn!(group = %id, error = %e, "writing offset expiry");
            }
        }
    }

    /// A deleted topic's committed offsets go from every group, tombstoned in
    /// `__consumer_offsets` (Kafka's `GroupCoordinator.onPartitionsDeleted`): a topic created
    /// again under the name starts without them.
    pub async fn on_topic_deleted(&self, topic: &str, topic_id: uuid::Uuid) {
        let slots: Vec<Arc<Slot>> = self.map().values().cloned().collect();
        if let Some(manager) = self.share_manager() {
            manager.forget_topic(topic_id);
        }
        for slot in slots {
            let (id, records) = {
                let mut e = slot.lock();
                // So do share groups' states of its partitions (Kafka's DeleteShareGroupState).
                let shared: Vec<consumer::Tp> =
                    e.share_states.keys().filter(|(t, _)| *t == topic_id).copied().collect();
                // Offsets of open transactions for the topic go too (Kafka's
                // `cleanupGroupMetadata`): their commit marker must not bring them back.
                for pending in e.pending_txn_offsets.values_mut() {
                    pending.retain(|(t, _), _| t != topic);
                }
                e.committed_at.retain(|(t, _), _| t != topic);
                let gone: Vec<(String, i32)> = e.offsets.keys().filter(|(t, _)| t == topic).cloned().collect();
                if gone.is_empty() && shared.is_empty() {
                    continue;
                }
                let id = e.group.id.clone();
                let mut records: Vec<OffsetsRecord> = gone
                    .into_iter()
                    .map(|key| {
                        e.offsets.remove(&key);
                        OffsetsRecord::Offset {
                            group: id.clone(),
                            topic: key.0,
                            partition: key.1,
                            value: None,
                        }
                    })
                    .collect();
                for (topic_id, partition) in shared {
                    e.share_states.remove(&(topic_id, partition));
                    records.push(OffsetsRecord::ShareState {
                        group: id.clone(),
                        topic_id,
                        partition,
                        value: None,
                    });
                }
                (id, records)
            };
            if let Err(e) = self.persist(&slot, &id, &records).await {
                tracing::warn!(group = %id, topic, error = %e, "removing a deleted topic's offsets");
            }
        }
    }
}

/// A group's own config `key` (milliseconds), if it set one.
fn group_config_ms(image: &MetadataImage, group_id: &str, key: &str) -> Option<Duration> {
    image
        .group_configs
        .get(group_id)?
        .get(key)?
        .parse::<u64>()
        .ok()
        .map(Duration::from_millis)
}

/// What a member is told when its group's new state could not be written: the partition moved
/// (or its groups were unloaded), so it finds the new coordinator, which has the group's last
/// stored state; or the coordinator is not available now.
fn store_failure(e: &Error) -> ResponseError {
    match e {
        Error::NotLeader(_) | Error::Storage { .. } => ResponseError::NotCoordinator,
        _ => ResponseError::CoordinatorNotAvailable,
    }
}

/// The replication failures of a coordinator write as Kafka's coordinators answer them
/// (`GroupMetadataManager.storeOffsets`, `TransactionStateManager.appendTransactionToLog`,
/// `CoordinatorRuntime`): the partition led elsewhere now, or its state unloaded here, or its
/// storage failing (KAFKA_STORAGE_ERROR: a full disk), is NOT_COORDINATOR, so the client looks
/// the coordinator up again; too few in-sync replicas, before or after the append, is
/// COORDINATOR_NOT_AVAILABLE, which it retries. None for the other errors, which each caller
/// maps.
pub(crate) fn replication_error_code(err: &Error) -> Option<i16> {
    match err {
        Error::NotLeader(_) | Error::Storage { .. } => Some(ResponseError::NotCoordinator.code()),
        Error::NotEnoughReplicas { .. } | Error::NotEnoughReplicasAfterAppend { .. } => {
            Some(ResponseError::CoordinatorNotAvailable.code())
        }
        _ => None,
    }
}

/// The replication factor of an internal topic this node creates: the configured one
/// (`offsets.topic.replication.factor`, `transaction.state.log.replication.factor`) capped at
/// the live registered brokers that take new replicas (not cordoned). Kafka refuses instead (the topic is not created, and the
/// coordinator is not available, until enough brokers are up); capping keeps a single node,
/// with Kafka's default of 3, working, at the cost of a topic replicated less than asked when
/// it is created while brokers are missing (raise it later by reassignment).
pub(crate) fn internal_replication_factor(image: &MetadataImage, configured: i16) -> i16 {
    let live = i16::try_from(image.placeable_brokers().count()).unwrap_or(i16::MAX);
    configured.min(live).max(1)
}

/// OffsetCommit (or, `transactional`, TxnOffsetCommit) checks for a KIP-848 group, in the
/// order of Kafka's `ConsumerGroup.validateOffsetCommit` (4.3): a commit without epoch while the
/// group has no members; a transactional commit naming nobody (TxnOffsetCommit v0-2); then the
/// member, the API version, the epoch, which may be older than the member's for partitions it
/// has held since (KIP-1251, `ConsumerGroup::may_commit`). Every member here speaks the consumer
/// protocol (classic members cannot join a consumer group), so a plain commit needs OffsetCommit
/// v9 and a refused epoch is STALE_MEMBER_EPOCH, never the ILLEGAL_GENERATION of a classic
/// member. `partitions` gives those committed, by topic id (a topic that does not exist: nil),
/// asked only for an older epoch.
#[allow(clippy::too_many_arguments)]
fn validate_consumer_commit(
    group: &ConsumerGroup,
    member_id: &str,
    instance_id: Option<&str>,
    epoch: i32,
    transactional: bool,
    version: i16,
    partitions: impl FnOnce() -> Vec<consumer::Tp>,
) -> Result<(), ResponseError> {
    if epoch < 0 && group.members.is_empty() {
        return Ok(());
    }
    if transactional && epoch == -1 && member_id.is_empty() && instance_id.is_none() {
        return Ok(());
    }
    let member = group.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?;
    if !transactional && version < 9 {
        return Err(ResponseError::UnsupportedVersion);
    }
    if epoch != member.epoch && !ConsumerGroup::may_commit(member, epoch, &partitions()) {
        return Err(ResponseError::StaleMemberEpoch);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn coordinator(dir: &std::path::Path) -> Arc<GroupCoordinator> {
        let config = Arc::new(BrokerConfig {
            data_dir: dir.to_path_buf(),
            offsets_topic_num_partitions: 3,
            ..BrokerConfig::default()
        });
        let controller =
            Arc::new(Controller::open(dir, crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap());
        let replicas = Arc::new(ReplicaManager::new(config.clone()));
        replicas.start_applier(controller.subscribe()).unwrap();
        replicas.catch_up(&controller.image()).unwrap();
        if controller.image().topic("t").is_none() {
            controller.create_topic("t", 2, 1, BTreeMap::new()).unwrap();
        }
        replicas.catch_up(&controller.image()).unwrap();
        let c = Arc::new(GroupCoordinator::new(config, controller, replicas));
        c.load().unwrap();
        c
    }

    #[test]
    fn a_write_refused_by_storage_sends_the_client_to_look_the_coordinator_up_again() {
        // Kafka's coordinators (`CoordinatorRuntime`, `TransactionStateManager`): a failed
        // write to the partition (a full disk) is NOT_COORDINATOR, as a lost leadership is;
        // too few replicas is COORDINATOR_NOT_AVAILABLE.
        let full = Error::storage("append", "p", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(
            replication_error_code(&full),
            Some(ResponseError::NotCoordinator.code())
        );
        assert_eq!(store_failure(&full), ResponseError::NotCoordinator);
        let moved = Error::NotLeader("p".into());
        assert_eq!(
            replication_error_code(&moved),
            Some(ResponseError::NotCoordinator.code())
        );
        let few = Error::NotEnoughReplicas {
            partition: "p".into(),
            isr: 1,
            min: 2,
        };
        assert_eq!(
            replication_error_code(&few),
            Some(ResponseError::CoordinatorNotAvailable.code())
        );
        assert_eq!(replication_error_code(&Error::ShuttingDown), None);
    }

    #[tokio::test]
    async fn transactional_offsets_wait_for_their_marker_live_and_on_replay() {
        // KIP-98 (Kafka's pendingTransactionalOffsetCommits): a TxnOffsetCommit is applied when
        // the commit marker reaches the group's partition, dropped on abort; a reload replays
        // the same rule from the batches and markers in __consumer_offsets.
        let dir = tempfile::tempdir().unwrap();
        let c = coordinator(dir.path()).await;
        let offsets_partition = partition_for("g", 3);
        let commit = |offset| vec![("t".to_string(), 0, offset, -1, Some("m".to_string()))];
        assert_eq!(c.txn_commit("g", 7, 0, "", None, -1, commit(5)).await, vec![0]);
        assert_eq!(c.txn_commit("other", 8, 0, "", None, -1, commit(6)).await, vec![0]);
        assert!(c.fetch_offsets("g").is_empty(), "pending until the marker");
        assert!(c.has_pending_txn_offset("g", "t", 0));
        // A marker elsewhere, or for another producer, changes nothing.
        c.complete_txn((offsets_partition + 1) % 3, 7, true);
        c.complete_txn(offsets_partition, 9, true);
        assert!(c.fetch_offsets("g").is_empty());
        let partition = c.replicas.get(OFFSETS_TOPIC, offsets_partition).unwrap();
        let info = partition.write_txn_marker(7, 0, 0, true, 0).await.unwrap();
        partition.wait_durable(info.last_offset).await.unwrap();
        c.complete_txn(offsets_partition, 7, true);
        assert_eq!(
            c.fetch_offsets("g").get(&("t".to_string(), 0)).map(|o| o.offset),
            Some(5)
        );
        // An aborted one is dropped.
        assert_eq!(c.txn_commit("g", 7, 0, "", None, -1, commit(9)).await, vec![0]);
        let info = partition.write_txn_marker(7, 0, 0, false, 0).await.unwrap();
        partition.wait_durable(info.last_offset).await.unwrap();
        c.complete_txn(offsets_partition, 7, false);
        assert_eq!(c.fetch_offsets("g")[&("t".to_string(), 0)].offset, 5);
        assert!(!c.has_pending_txn_offset("g", "t", 0));

        // Mixed with a plain commit, the later record wins, whichever the marker follows.
        assert_eq!(c.txn_commit("g", 7, 0, "", None, -1, commit(20)).await, vec![0]);
        assert_eq!(c.commit("g", "", None, -1, commit(30), 9).await, vec![0]);
        let info = partition.write_txn_marker(7, 0, 0, true, 0).await.unwrap();
        partition.wait_durable(info.last_offset).await.unwrap();
        c.complete_txn(offsets_partition, 7, true);
        assert_eq!(
            c.fetch_offsets("g")[&("t".to_string(), 0)].offset,
            30,
            "the plain commit came later"
        );
        assert_eq!(c.commit("g", "", None, -1, commit(40), 9).await, vec![0]);
        assert_eq!(c.txn_commit("g", 7, 0, "", None, -1, commit(50)).await, vec![0]);
        let info = partition.write_txn_marker(7, 0, 0, true, 0).await.unwrap();
        partition.wait_durable(info.last_offset).await.unwrap();
        c.complete_txn(offsets_partition, 7, true);
        assert_eq!(c.fetch_offsets("g")[&("t".to_string(), 0)].offset, 50);
        assert_eq!(c.txn_commit("g", 7, 0, "", None, -1, commit(60)).await, vec![0]);
        assert_eq!(c.commit("g", "", None, -1, commit(70), 9).await, vec![0]);
        let info = partition.write_txn_marker(7, 0, 0, true, 0).await.unwrap();
        partition.wait_durable(info.last_offset).await.unwrap();
        c.complete_txn(offsets_partition, 7, true);
        assert_eq!(c.fetch_offsets("g")[&("t".to_string(), 0)].offset, 70);

        drop((c, partition));
        let c = coordinator(dir.path()).await;
        assert_eq!(
            c.fetch_offsets("g")[&("t".to_string(), 0)].offset,
            70,
            "replayed as it happened: aborted and older records lose"
        );
        assert!(c.fetch_offsets("other").is_empty(), "no marker yet");
        assert!(c.has_pending_txn_offset("other", "t", 0));
    }

    #[tokio::test]
    async fn offsets_of_an_empty_group_expire_after_retention_and_stay_expired() {
        // KIP-211: offsets.retention.minutes counts from when the group became empty.
        let dir = tempfile::tempdir().unwrap();
        let c = coordinator(dir.path()).await;
        let codes = c
            .commit("solo", "", None, -1, vec![("t".into(), 0, 5, -1, None)], 9)
            .await;
        assert_eq!(codes, vec![0]);
        let kept = c
            .commit("busy", "", None, -1, vec![("t".into(), 1, 9, -1, Some("m".into()))], 9)
            .await;
        assert_eq!(kept, vec![0]);
        // Give "busy" a member: its offsets must survive retention.
        let (tx, _rx) = oneshot::channel();
        let join = JoinRequest {
            member_id: String::new(),
            instance_id: Some("i".into()),
            client_id: "c".into(),
            client_host: "/h".into(),
            session_timeout: Duration::from_secs(600),
            rebalance_timeout: Duration::from_secs(600),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
            require_known_member_id: false,
        };
        c.slot("busy")
            .unwrap()
            .lock()
            .group
            .join(join, &c.limits, Instant::now(), tx);
        assert!(!c.slot("busy").unwrap().lock().group.members.is_empty());

        let week = Duration::from_secs(7 * 24 * 3600);
        c.expire_offsets(Instant::now() + week - Duration::from_secs(60)).await;
        assert_eq!(c.fetch_offsets("solo").len(), 1, "not yet");
        c.expire_offsets(Instant::now() + week + Duration::from_secs(60)).await;
        assert!(c.fetch_offsets("solo").is_empty(), "expired");
        assert_eq!(
            c.fetch_offsets("busy").len(),
            1,
            "a group with members keeps its offsets"
        );

        // The expiry was written to __consumer_offsets: a reload does not bring them back.
        drop(c);
        let c = coordinator(dir.path()).await;
        assert!(c.fetch_offsets("solo").is_empty());
        let busy = c.fetch_offsets("busy");
        assert_eq!(
            busy.get(&("t".to_string(), 1)).map(|o| (o.offset, o.metadata.as_str())),
            Some((9, "m"))
        );
    }

    #[tokio::test]
    async fn a_deleted_topic_loses_its_committed_and_pending_offsets() {
        // Kafka's onPartitionsDeleted: committed offsets of the topic are tombstoned in every
        // group, and offsets of open transactions for it are dropped.
        let dir = tempfile::tempdir().unwrap();
        let c = coordinator(dir.path()).await;
        if c.controller.image().topic("kept").is_none() {
            c.controller.create_topic("kept", 1, 1, BTreeMap::new()).unwrap();
        }
        c.replicas.catch_up(&c.controller.image()).unwrap();
        let commit = |topic: &str, offset| vec![(topic.to_string(), 0, offset, -1, None)];
        assert_eq!(c.commit("g", "", None, -1, commit("t", 5), 9).await, vec![0]);
        assert_eq!(c.commit("g", "", None, -1, commit("kept", 6), 9).await, vec![0]);
        assert_eq!(c.txn_commit("h", 7, 0, "", None, -1, commit("t", 8)).await, vec![0]);
        c.on_topic_deleted("t", uuid::Uuid::nil()).await;
        assert!(!c.fetch_offsets("g").contains_key(&("t".to_string(), 0)));
        assert_eq!(c.fetch_offsets("g")[&("kept".to_string(), 0)].offset, 6);
        assert!(!c.has_pending_txn_offset("h", "t", 0));
        // The tombstones are durable: a reload finds the same.
        drop(c);
        let c = coordinator(dir.path()).await;
        assert!(!c.fetch_offsets("g").contains_key(&("t".to_string(), 0)));
        assert_eq!(c.fetch_offsets("g")[&("kept".to_string(), 0)].offset, 6);
    }

    /// A group id whose `__consumer_offsets` partition (of 3) is not `p`'s.
    fn group_outside(p: i32) -> String {
        (0..)
            .map(|i| format!("other-{i}"))
            .find(|g| partition_for(g, 3) != p)
            .unwrap()
    }

    #[tokio::test]
    async fn a_partitions_groups_go_with_its_leadership_and_come_back_at_a_new_epoch() {
        // Kafka's GroupCoordinator.onResignation / onElection: the groups of a partition this
        // node stops leading are dropped; leading it again at a new epoch loads them from the
        // log, offsets included. Other partitions' groups are untouched.
        let dir = tempfile::tempdir().unwrap();
        let c = coordinator(dir.path()).await;
        let p = partition_for("g", 3);
        let other = group_outside(p);
        let commit = |offset| vec![("t".to_string(), 0, offset, -1, None)];
        assert_eq!(c.commit("g", "", None, -1, commit(5), 9).await, vec![0]);
        assert_eq!(c.commit(&other, "", None, -1, commit(6), 9).await, vec![0]);
        assert!(c.loaded.is_loaded(&c.replicas, p), "created here, so loaded");

        let partition = c.replicas.hosted(OFFSETS_TOPIC, p).unwrap();
        let epoch = partition.leader_epoch();
        partition.become_follower(epoch + 1, 2, 1);
        assert!(!c.ready("g"), "no longer led here");
        c.sync_partitions().unwrap();
        assert!(c.fetch_offsets("g").is_empty(), "unloaded");
        assert_eq!(c.fetch_offsets(&other)[&("t".to_string(), 0)].offset, 6);
        // Nothing is written for a partition not loaded (the group it creates is a stray).
        let not_coordinator = ResponseError::NotCoordinator.code();
        assert_eq!(c.commit("g", "", None, -1, commit(7), 9).await, vec![not_coordinator]);

        partition.become_leader(epoch + 2, 1, vec![1], vec![1], 1);
        assert!(!c.loaded.is_loaded(&c.replicas, p), "led again, not loaded yet");
        c.sync_partitions().unwrap();
        assert!(c.loaded.is_loaded(&c.replicas, p));
        assert_eq!(
            c.fetch_offsets("g")[&("t".to_string(), 0)].offset,
            5,
            "reloaded from the log; the refused commit left nothing"
        );
        assert_eq!(c.commit("g", "", None, -1, commit(8), 9).await, vec![0]);
        assert_eq!(c.fetch_offsets("g")[&("t".to_string(), 0)].offset, 8);
    }

    #[tokio::test]
    async fn the_first_request_after_a_failover_loads_a_small_partition_itself() {
        // loading.rs: a partition of at most LOAD_ON_REQUEST_BYTES_MAX is loaded by the request
        // that finds it led here but not loaded, rather than refused until the pass runs.
        let dir = tempfile::tempdir().unwrap();
        let c = coordinator(dir.path()).await;
        let commit = |offset| vec![("t".to_string(), 1, offset, -1, None)];
        assert_eq!(c.commit("g", "", None, -1, commit(5), 9).await, vec![0]);
        let p = partition_for("g", 3);
        let partition = c.replicas.hosted(OFFSETS_TOPIC, p).unwrap();
        let epoch = partition.leader_epoch();
        partition.become_follower(epoch + 1, 2, 1);
        c.sync_partitions().unwrap();
        assert!(c.fetch_offsets("g").is_empty());
        partition.become_leader(epoch + 2, 1, vec![1], vec![1], 1);
        assert!(c.ready("g"), "loaded by the request");
        assert_eq!(c.loaded.epoch(p), Some(epoch + 2));
        assert_eq!(c.fetch_offsets("g")[&("t".to_string(), 1)].offset, 5);
    }

    #[tokio::test]
    async fn an_unloaded_group_answers_its_waiters_and_writes_nothing_more() {
        // Kafka's onGroupUnloaded: members waiting in JoinGroup get NOT_COORDINATOR, and the
        // dropped group (its timer included) can no longer write to __consumer_offsets, even
        // once this node leads the partition again.
        let dir = tempfile::tempdir().unwrap();
        let c = coordinator(dir.path()).await;
        c.ensure_offsets_topic().unwrap();
        let p = partition_for("g", 3);
        let slot = c.slot_or_create("g");
        let (tx, rx) = oneshot::channel();
        let join = JoinRequest {
            member_id: String::new(),
            instance_id: Some("i".into()),
            client_id: "c".into(),
            client_host: "/h".into(),
            session_timeout: Duration::from_secs(600),
            rebalance_timeout: Duration::from_secs(600),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
            require_known_member_id: false,
        };
        slot.lock().group.join(join, &c.limits, Instant::now(), tx);
        c.ensure_timer(&slot);

        let partition = c.replicas.hosted(OFFSETS_TOPIC, p).unwrap();
        let epoch = partition.leader_epoch();
        partition.become_follower(epoch + 1, 2, 1);
        c.sync_partitions().unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(answer.error, ResponseError::NotCoordinator.code());
        assert!(slot.is_unloaded() && c.slot("g").is_none());

        partition.become_leader(epoch + 2, 1, vec![1], vec![1], 1);
        c.sync_partitions().unwrap();
        let end = partition.offsets().unwrap().log_end_offset;
        let record = OffsetsRecord::Group {
            group: "g".into(),
            value: Some(Group::new("g", Instant::now()).snapshot()),
        };
        let refused = c.persist(&slot, "g", &[record]).await.unwrap_err();
        assert!(matches!(refused, Error::NotLeader(_)), "{refused}");
        assert_eq!(partition.offsets().unwrap().log_end_offset, end, "nothing written");
        // The timer saw the flag and ended.
        tokio::time::timeout(Duration::from_secs(10), async {
            while slot.timer_running.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
    }

    #[test]
    fn internal_topics_replicate_at_most_as_many_times_as_there_are_live_brokers() {
        // Kafka refuses to create __consumer_offsets with fewer brokers than
        // offsets.topic.replication.factor (default 3); Sluice caps the factor, so one node
        // with Kafka's defaults creates it with one replica.
        let mut image = MetadataImage::default();
        let broker = |id, fenced| {
            Arc::new(crate::cluster::BrokerInfo {
                fenced,
                ..crate::cluster::BrokerInfo::new(id, "localhost", 9092)
            })
        };
        image.brokers.insert(1, broker(1, false));
        assert_eq!(internal_replication_factor(&image, 3), 1);
        image.brokers.insert(2, broker(2, false));
        image.brokers.insert(3, broker(3, true));
        assert_eq!(
            internal_replication_factor(&image, 3),
            2,
            "a fenced broker does not count"
        );
        image.brokers.insert(4, broker(4, false));
        assert_eq!(internal_replication_factor(&image, 3), 3);
        assert_eq!(internal_replication_factor(&image, 1), 1);
    }
}
