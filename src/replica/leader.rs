//! A partition's role on this node (issue 12): the leader tracks its followers' progress,
//! moves the high watermark to what every in-sync replica holds, and asks the controller for
//! ISR changes; a follower copies the leader (fetcher.rs) and serves no client.
//!
//! Kafka's `Partition` is the model: a follower's fetch offset is its log end offset; the
//! high watermark is the smallest log end offset in the ISR; a follower whose fetches have not
//! reached the leader's log end for `replica.lag.time.max.ms` leaves the ISR, one that has
//! caught up with the high watermark (and the leader's epoch) joins it. Both changes are
//! committed by the controller before they count (AlterPartition), so a leader cut off from
//! the quorum cannot shrink the ISR to itself and go on acknowledging alone.
//!
//! A follower sends its next fetch only once what it appended is fsynced (when acks=all waits
//! for fsync, `log.flush.interval.messages = 1`): its fetch offset says "held and durable
//! here". So the high watermark passes a batch only when every in-sync replica has it on disk,
//! and acks=all, which waits for the high watermark and the leader's own fsync, survives
//! losing every node's page cache at once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::{Partition, now_ms};
use crate::error::{Error, Result};
use crate::log::{FileRegion, LogSnapshot};

/// What this node is for a partition.
#[derive(Debug)]
pub(crate) enum Role {
    Leader(LeaderState),
    /// Following `leader` (-1: the partition has no leader now).
    Follower {
        leader: i32,
    },
}

impl Role {
    /// The only replica of itself, leading (a single node, or a partition just opened).
    pub(crate) fn sole(node: i32, _leader_epoch: i32, log_end: i64) -> Role {
        Role::Leader(LeaderState {
            replicas: vec![node],
            isr: vec![node],
            partition_epoch: 0,
            epoch_start_offset: log_end,
            followers: HashMap::new(),
            isr_change_pending: false,
            isr_joining: None,
        })
    }
}

/// The leader's view of its partition.
#[derive(Debug)]
pub(crate) struct LeaderState {
    replicas: Vec<i32>,
    isr: Vec<i32>,
    /// The registration's partition epoch this state was built from.
    partition_epoch: i32,
    /// The log end when this node became leader at its epoch: a follower joins the ISR only
    /// once it holds everything below it (Kafka's `leaderEpochStartOffsetOpt`).
    epoch_start_offset: i64,
    followers: HashMap<i32, FollowerProgress>,
    /// An ISR change was sent to the controller and is not yet back in the metadata.
    isr_change_pending: bool,
    /// The follower whose joining the ISR was sent to the controller: the high watermark
    /// counts it from then on (Kafka's maximal ISR, `PendingExpandIsr`). The controller may
    /// commit the ISR with it, and even complete a reassignment that makes it leader, before
    /// this leader hears back; what this leader acknowledges meanwhile must be on it too.
    isr_joining: Option<i32>,
}

/// What the leader knows of one follower (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy)]
pub struct FollowerProgress {
    /// Its log end offset as its last fetch said; -1 before its first fetch at this epoch.
    pub log_end: i64,
    /// When it last held everything the leader had (its fetch reached the leader's log end
    /// as of its previous fetch).
    pub last_caught_up_ms: i64,
    last_fetch_leader_end: i64,
    last_fetch_ms: i64,
}

impl FollowerProgress {
    fn unknown(now: i64) -> FollowerProgress {
        FollowerProgress {
            log_end: -1,
            last_caught_up_ms: now,
            last_fetch_leader_end: -1,
            last_fetch_ms: now,
        }
    }
}

/// What a follower's fetch changed on the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerFetch {
    /// The leader's high watermark after the fetch was counted.
    pub high_watermark: i64,
    /// An ISR with the follower added, when it caught up and is not in the ISR yet: the
    /// caller asks the controller (`Controller::alter_partition`).
    pub expand_isr: Option<IsrProposal>,
}

/// An ISR change a leader asks the controller for, with the leader state that asks: its
/// answer concerns that state only (a state rebuilt meanwhile has its own pending change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub isr: Vec<i32>,
    pub leader_epoch: i32,
    /// The partition epoch of the registration the asking state was built from.
    pub partition_epoch: i32,
}

impl Partition {
    fn role(&self) -> std::sync::MutexGuard<'_, Role> {
        self.role.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this node leads the partition (clients are served only then).
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// The in-sync replicas as this leader knows them (empty on a follower).
    pub fn isr(&self) -> Vec<i32> {
        match &*self.role() {
            Role::Leader(state) => state.isr.clone(),
            Role::Follower { .. } => Vec::new(),
        }
    }

    /// The followers a consumer at `fetch_offset` could read from instead (Kafka's
    /// `findPreferredReadReplica` candidates): in the ISR, holding the offset (their log end
    /// at or past it), with their log end and when they last caught up. Empty on a follower.
    pub fn read_replica_candidates(&self, fetch_offset: i64) -> Vec<(i32, FollowerProgress)> {
        match &*self.role() {
            Role::Leader(state) => state
                .followers
                .iter()
                .filter(|(id, progress)| state.isr.contains(id) && progress.log_end >= fetch_offset)
                .map(|(id, progress)| (*id, *progress))
                .collect(),
            Role::Follower { .. } => Vec::new(),
        }
    }

    /// What the leader knows of `replica` (None on a follower or for a non-follower).
    pub fn follower_progress(&self, replica: i32) -> Option<FollowerProgress> {
        match &*self.role() {
            Role::Leader(state) => state.followers.get(&replica).copied(),
            Role::Follower { .. } => None,
        }
    }

    /// The leader this node follows (-1: none), or None when it leads.
    pub fn followed_leader(&self) -> Option<i32> {
        match &*self.role() {
            Role::Leader(_) => None,
            Role::Follower { leader } => Some(*leader),
        }
    }

    /// After a write (on the writer): the log end moved; on the leader the high watermark may
    /// follow.
    pub(super) fn appended(&self, log_end: i64) {
        self.log_end.send_replace(log_end);
        if let Role::Leader(state) = &*self.role() {
            self.advance_high_watermark(state, log_end);
        }
    }

    /// The smallest log end offset in the ISR (this node's included), if every follower in
    /// it has fetched at this epoch; the high watermark only moves up. It stays while the
    /// ISR (with a follower joining it) is smaller than `min.insync.replicas`, capped at the
    /// replica count (Kafka's strict min ISR rule since 3.7, KIP-966): then every record below
    /// it is on at least that many replicas, so a replica that left the ISR meanwhile holds
    /// all of it and may lead (the eligible leader replicas).
    fn advance_high_watermark(&self, state: &LeaderState, log_end: i64) {
        if self.under_min_isr(state) {
            return;
        }
        let mut hw = log_end;
        let maximal_isr = state.isr.iter().chain(&state.isr_joining);
        for replica in maximal_isr.filter(|r| **r != self.node_id) {
            match state.followers.get(replica) {
                Some(f) if f.log_end >= 0 => hw = hw.min(f.log_end),
                _ => return,
            }
        }
        self.high_watermark.send_if_modified(|current| {
            let moved = hw > *current;
            if moved {
                *current = hw;
            }
            moved
        });
    }

    /// Whether the ISR as the high watermark counts it (Kafka's maximal ISR: the committed
    /// one and a follower joining) is smaller than the effective `min.insync.replicas`, the
    /// topic's value capped at the replica count (Kafka's `isUnderMinIsr`).
    fn under_min_isr(&self, state: &LeaderState) -> bool {
        let joining = state.isr_joining.filter(|r| !state.isr.contains(r)).map_or(0, |_| 1);
        let maximal = state.isr.len() + joining;
        let min = usize::try_from(self.min_insync_replicas.load(Ordering::Acquire)).unwrap_or(0);
        maximal < min.min(state.replicas.len())
    }

    /// Whether this node leads with an ISR under the effective `min.insync.replicas`.
    pub fn is_under_min_isr(&self) -> bool {
        match &*self.role() {
            Role::Leader(state) => self.under_min_isr(state),
            Role::Follower { .. } => false,
        }
    }

    /// The topic's `min.insync.replicas` changed (or is applied again): acks=all and the high
    /// watermark judge against it from now on, and waiting acks=all produces judge again.
    pub fn set_min_insync_replicas(&self, min_isr: i32) {
        if self.min_insync_replicas.swap(min_isr, Ordering::AcqRel) == min_isr {
            return;
        }
        let log_end = *self.log_end.borrow();
        if let Role::Leader(state) = &*self.role() {
            self.advance_high_watermark(state, log_end);
        }
        self.high_watermark.send_modify(|_| {});
    }

    /// The registration names this node leader at `leader_epoch` with `isr`. A new epoch
    /// starts with no follower progress known (followers' caught-up clocks start now, as in
    /// Kafka, so none leaves the ISR before it could fetch); an ISR change at the same epoch
    /// keeps it.
    pub fn become_leader(
        &self,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        min_isr: i32,
    ) {
        // Role changes hold the log's lock: writes check the role under it (client appends
        // need a leader, a follower's appends and truncations its epoch), so none lands on the
        // wrong side of a change.
        let _log = self.lock();
        self.min_insync_replicas.store(min_isr, Ordering::Release);
        let log_end = *self.log_end.borrow();
        let now = now_ms();
        let mut role = self.role();
        let same_epoch = matches!(&*role, Role::Leader(_)) && self.leader_epoch() == leader_epoch;
        let followers = match &mut *role {
            Role::Leader(state) if same_epoch => std::mem::take(&mut state.followers),
            _ => HashMap::new(),
        };
        let epoch_start_offset = match &*role {
            Role::Leader(state) if same_epoch => state.epoch_start_offset,
            _ => log_end,
        };
        let mut state = LeaderState {
            followers,
            replicas,
            isr,
            partition_epoch,
            epoch_start_offset,
            isr_change_pending: false,
            isr_joining: None,
        };
        for replica in state.replicas.iter().filter(|r| **r != self.node_id) {
            state
                .followers
                .entry(*replica)
                .or_insert_with(|| FollowerProgress::unknown(now));
        }
        state.followers.retain(|r, _| state.replicas.contains(r));
        self.leader_epoch.store(leader_epoch, Ordering::Release);
        self.advance_high_watermark(&state, log_end);
        *role = Role::Leader(state);
        drop(role);
        self.leading.store(true, Ordering::Release);
        // Waiting acks=all produces judge again against the new ISR.
        self.high_watermark.send_modify(|_| {});
    }

    /// The registration names another node leader (or none, -1) at `leader_epoch`: this node
    /// stops serving clients; acks=all produces still waiting fail with NOT_LEADER_OR_FOLLOWER.
    pub fn become_follower(&self, leader_epoch: i32, leader: i32, min_isr: i32) {
        let _log = self.lock(); // see `become_leader`
        self.min_insync_replicas.store(min_isr, Ordering::Release);
        self.leading.store(false, Ordering::Release);
        self.leader_epoch.store(leader_epoch, Ordering::Release);
        *self.role() = Role::Follower { leader };
        self.high_watermark.send_modify(|_| {});
    }

    /// The partition epoch of the registration this leader state was built from (None on a
    /// follower): the replica manager applies a registration only once.
    pub fn partition_epoch(&self) -> Option<i32> {
        match &*self.role() {
            Role::Leader(state) => Some(state.partition_epoch),
            Role::Follower { .. } => None,
        }
    }

    /// The leader's side of a fetch by follower `replica` at `fetch_offset` (its log end):
    /// records its progress and moves the high watermark (Kafka's
    /// `Partition.updateFollowerFetchState`). Errs NOT_LEADER_OR_FOLLOWER when this node does
    /// not lead or `replica` is not a replica of the partition. A follower is proposed for the
    /// ISR only when `eligible` (Kafka's `isReplicaIsrEligible`: the metadata does not show its
    /// broker fenced), since the controller would refuse it.
    pub fn follower_fetched(&self, replica: i32, fetch_offset: i64, eligible: bool) -> Result<FollowerFetch> {
        let now = now_ms();
        let log_end = *self.log_end.borrow();
        let mut role = self.role();
        let Role::Leader(state) = &mut *role else {
            return Err(Error::NotLeader(self.tp.to_string()));
        };
        let Some(progress) = state.followers.get_mut(&replica) else {
            return Err(Error::NotLeader(format!(
                "{} (broker {replica} is not a replica)",
                self.tp
            )));
        };
        if fetch_offset >= log_end {
            progress.last_caught_up_ms = now;
        } else if progress.last_fetch_leader_end >= 0 && fetch_offset >= progress.last_fetch_leader_end {
            progress.last_caught_up_ms = progress.last_fetch_ms;
        }
        progress.log_end = fetch_offset;
        progress.last_fetch_leader_end = log_end;
        progress.last_fetch_ms = now;
        self.advance_high_watermark(state, log_end);
        let hw = self.high_watermark();
        // Kafka's `isFollowerInSync` for expansion: caught up with the high watermark and
        // holding the leader's current epoch.
        let expand_isr = (eligible
            && !state.isr_change_pending
            && !state.isr.contains(&replica)
            && fetch_offset >= hw
            && fetch_offset >= state.epoch_start_offset)
            .then(|| {
                state.isr_change_pending = true;
                state.isr_joining = Some(replica);
                let mut isr = state.isr.clone();
                isr.push(replica);
                IsrProposal {
                    isr,
                    leader_epoch: self.leader_epoch(),
                    partition_epoch: state.partition_epoch,
                }
            });
        // A follower joining may lift the ISR to min ISR (`under_min_isr`).
        let hw = if expand_isr.is_some() {
            self.advance_high_watermark(state, log_end);
            self.high_watermark()
        } else {
            hw
        };
        Ok(FollowerFetch {
            high_watermark: hw,
            expand_isr,
        })
    }

    /// On the leader: the ISR without the followers that have not caught up for `lag_ms`
    /// (Kafka's `getOutOfSyncReplicas`), when there are any and no change is pending; the
    /// caller asks the controller. Marks the change pending.
    pub fn shrink_isr(&self, lag_ms: i64) -> Option<IsrProposal> {
        let now = now_ms();
        let log_end = *self.log_end.borrow();
        let mut role = self.role();
        let Role::Leader(state) = &mut *role else {
            return None;
        };
        if state.isr_change_pending {
            return None;
        }
        let out: Vec<i32> = state
            .isr
            .iter()
            .copied()
            .filter(|r| *r != self.node_id)
            .filter(|r| {
                state
                    .followers
                    .get(r)
                    .is_none_or(|f| f.log_end < log_end && now - f.last_caught_up_ms > lag_ms)
            })
            .collect();
        if out.is_empty() {
            return None;
        }
        state.isr_change_pending = true;
        Some(IsrProposal {
            isr: state.isr.iter().copied().filter(|r| !out.contains(r)).collect(),
            leader_epoch: self.leader_epoch(),
            partition_epoch: state.partition_epoch,
        })
    }

    /// The ISR change `proposal` is answered: `committed` names the partition epoch of the
    /// registration the controller answered with (None: refused or failed). When nothing
    /// newer than the asking state was committed, that state may try another change; a
    /// registration still to be applied keeps the change pending, and its follower counted
    /// for the high watermark, until `become_leader` applies it. A state rebuilt meanwhile
    /// is not the one that asked: the answer leaves it alone.
    pub fn isr_change_done(&self, proposal: &IsrProposal, committed: Option<i32>) {
        if let Role::Leader(state) = &mut *self.role()
            && state.partition_epoch == proposal.partition_epoch
            && committed.is_none_or(|epoch| epoch <= proposal.partition_epoch)
        {
            state.isr_change_pending = false;
            state.isr_joining = None;
        }
    }

    /// acks=all refuses before writing when the ISR is smaller than `min.insync.replicas`
    /// (NOT_ENOUGH_REPLICAS), or when this node no longer leads.
    pub fn check_enough_replicas(&self) -> Result<()> {
        let min = self.min_insync_replicas.load(Ordering::Acquire);
        match &*self.role() {
            Role::Follower { .. } => Err(Error::NotLeader(self.tp.to_string())),
            Role::Leader(state) if i64::try_from(state.isr.len()).unwrap_or(i64::MAX) < i64::from(min) => {
                Err(Error::NotEnoughReplicas {
                    partition: self.tp.to_string(),
                    isr: state.isr.len(),
                    min,
                })
            }
            Role::Leader(_) => Ok(()),
        }
    }

    /// Waits until the batches up to `last_offset` are acknowledged for acks=all: durable here
    /// (by the flush policy) and below the high watermark, i.e. held by every in-sync replica
    /// (each fsyncs before it fetches again). Errs NOT_LEADER_OR_FOLLOWER when the leadership
    /// moves meanwhile (the write may or may not survive: the client retries), and
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is then below `min.insync.replicas`.
    pub async fn wait_acknowledged(&self, last_offset: i64) -> Result<()> {
        let epoch = self.leader_epoch();
        self.wait_durable(last_offset).await?;
        let mut hw = self.high_watermark.subscribe();
        let lost = || !self.is_leader() || self.leader_epoch() != epoch;
        let reached = loop {
            let at = *hw.borrow_and_update();
            if at > last_offset || lost() || self.failed.load(Ordering::Acquire) {
                break true;
            }
            // Under min ISR the high watermark stays (`advance_high_watermark`): answer now,
            // as Kafka would once the request timed out. The client retries.
            if self.is_under_min_isr() {
                let isr = self.isr().len();
                return Err(Error::NotEnoughReplicasAfterAppend {
                    partition: self.tp.to_string(),
                    isr,
                    min: self.min_insync_replicas.load(Ordering::Acquire),
                });
            }
            if hw.changed().await.is_err() {
                break false;
            }
        };
        if !reached || self.failed.load(Ordering::Acquire) {
            return Err(Error::storage(
                "replicate",
                &self.dir,
                std::io::Error::other("the partition failed or closed"),
            ));
        }
        if lost() {
            return Err(Error::NotLeader(self.tp.to_string()));
        }
        let min = self.min_insync_replicas.load(Ordering::Acquire);
        let isr = self.isr().len();
        if i64::try_from(isr).unwrap_or(i64::MAX) < i64::from(min) {
            return Err(Error::NotEnoughReplicasAfterAppend {
                partition: self.tp.to_string(),
                isr,
                min,
            });
        }
        Ok(())
    }

    /// The log end offset (what a follower's fetch waits on), and a receiver of its moves.
    pub fn log_end_watch(&self) -> tokio::sync::watch::Receiver<i64> {
        self.log_end.subscribe()
    }
}

impl Partition {
    /// KIP-320 fencing of a request's `current_leader_epoch` (-1: the requester does not know
    /// it): a newer epoch than this node's means its metadata is behind (UNKNOWN_LEADER_EPOCH,
    /// retriable), an older one that the requester's is (FENCED_LEADER_EPOCH).
    pub fn check_current_leader_epoch(&self, current: i32) -> Result<()> {
        let epoch = self.leader_epoch();
        if current < 0 || current == epoch {
            return Ok(());
        }
        if current > epoch {
            return Err(Error::UnknownLeaderEpoch {
                asked: current,
                current: epoch,
            });
        }
        Err(Error::FencedLeaderEpoch {
            asked: current,
            current: epoch,
        })
    }

    /// A follower's read (Kafka's `FetchIsolation.LOG_END`): from `offset` up to this
    /// leader's log end, not its high watermark, so that the followers can bring it up.
    pub fn read_for_follower(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<super::PartitionRead> {
        self.follower_read_through(offset, |log, end| log.read(offset, end, max_bytes, min_one_batch))
    }

    /// `read_for_follower`, with the batches located in their segment file rather than read
    /// (a replica fetch is sent by sendfile as a consumer's is): None where it reads nothing.
    pub fn read_region_for_follower(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<super::PartitionRead<Option<FileRegion>>> {
        self.follower_read_through(offset, |log, end| {
            log.read_region(offset, end, max_bytes, min_one_batch)
        })
    }

    /// The offsets of a follower's read from `offset`, which must be within the log, with the
    /// records as `read` finds them below the log end.
    fn follower_read_through<R: Default>(
        &self,
        offset: i64,
        read: impl FnOnce(&LogSnapshot, i64) -> Result<R>,
    ) -> Result<super::PartitionRead<R>> {
        let hw = self.high_watermark();
        let log = self.snapshot()?;
        let log_start_offset = log.log_start_offset();
        let log_end_offset = log.log_end_offset();
        if offset < log_start_offset || offset > log_end_offset {
            return Err(Error::OffsetOutOfRange {
                asked: offset,
                log_start: log_start_offset,
                log_end: log_end_offset,
            });
        }
        let records = if offset == log_end_offset {
            R::default()
        } else {
            read(&log, log_end_offset)?
        };
        Ok(super::PartitionRead {
            records,
            high_watermark: hw,
            log_start_offset,
            last_stable_offset: super::last_stable_offset(&log, hw),
            aborted: None,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::super::follower_log::tests::{follower_partition, leader_bytes};
    use super::super::writer::Writers;
    use crate::error::Error;
    use crate::log::validate_batches;

    /// Appends `records` records, in batches of 2 at leader epoch 2; the last one's offset.
    async fn append_at_epoch_2(p: &std::sync::Arc<super::Partition>, records: usize) -> i64 {
        let epochs = vec![2; records / 2];
        let batches = validate_batches(&leader_bytes(&epochs), usize::MAX).unwrap();
        p.append(batches, false).await.unwrap().last_offset
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_asked_into_the_isr_holds_the_high_watermark_back_at_once() {
        // Kafka's maximal ISR (PendingExpandIsr): the controller may commit the expansion,
        // and complete a reassignment that makes the follower leader, before this leader
        // hears back; what it acknowledges meanwhile must be on that follower.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        let append = |records: usize| append_at_epoch_2(&p, records);
        // Node 1 leads alone in the ISR; 3 is a replica being added.
        p.become_leader(2, 1, vec![1, 3], vec![1], 1);
        append(2).await;
        assert_eq!(p.high_watermark(), 2, "the ISR is the leader alone");
        let fenced = p.follower_fetched(3, 2, false).unwrap();
        assert!(fenced.expand_isr.is_none(), "a fenced follower is not proposed");
        let proposal = p.follower_fetched(3, 2, true).unwrap().expand_isr.unwrap();
        assert_eq!((proposal.isr.clone(), proposal.partition_epoch), (vec![1, 3], 1));
        append(2).await;
        assert_eq!(p.high_watermark(), 2, "3 holds only 2 records");
        p.follower_fetched(3, 3, true).unwrap();
        assert_eq!(p.high_watermark(), 3);
        // The answer for a state rebuilt since changes nothing; a refusal for this one stops
        // counting 3.
        let older = super::IsrProposal {
            partition_epoch: 0,
            ..proposal.clone()
        };
        p.isr_change_done(&older, None);
        append(2).await;
        assert_eq!(p.high_watermark(), 3, "still waiting on 3");
        p.isr_change_done(&proposal, None);
        append(2).await;
        assert_eq!(p.high_watermark(), 8, "the ISR is the leader alone again");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_high_watermark_stays_while_the_isr_is_under_min_isr() {
        // Kafka's strict min ISR rule (KIP-966): what is below the high watermark is on at
        // least min(min.insync.replicas, replicas) replicas.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        let append = |records: usize| append_at_epoch_2(&p, records);
        // Replicas 1 and 3, min ISR 2, 3 out of the ISR: acks=1 records stay invisible.
        p.become_leader(2, 1, vec![1, 3], vec![1], 2);
        assert!(p.is_under_min_isr());
        let last = append(2).await;
        assert_eq!(p.high_watermark(), 0, "under min ISR");
        let waiting = p.wait_acknowledged(last).await;
        assert!(
            matches!(waiting, Err(Error::NotEnoughReplicasAfterAppend { isr: 1, min: 2, .. })),
            "{waiting:?}"
        );
        // 3 catches up and is asked into the ISR: the maximal ISR counts it at once.
        p.follower_fetched(3, 2, true).unwrap().expand_isr.unwrap();
        assert!(!p.is_under_min_isr());
        assert_eq!(p.high_watermark(), 2);
        // min.insync.replicas above the replica count is capped at it (Kafka's
        // `effectiveMinIsr`), and a lowered one applies at once.
        p.become_leader(2, 2, vec![1, 3], vec![1], 3);
        append(2).await;
        assert_eq!(p.high_watermark(), 2, "3 was refused: under min ISR again");
        p.set_min_insync_replicas(1);
        assert_eq!(p.high_watermark(), 4, "the leader alone is enough now");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_region_is_what_a_follower_read_finds_up_to_the_log_end() {
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        // Node 1 leads with 3 in the ISR: what 3 has not fetched is above the high watermark.
        p.become_leader(2, 1, vec![1, 3], vec![1, 3], 1);
        for _ in 0..3 {
            let batches = validate_batches(&leader_bytes(&[2; 4]), usize::MAX).unwrap();
            p.append(batches, false).await.unwrap();
        }
        let end = p.offsets().unwrap().log_end_offset;
        assert_eq!((p.high_watermark(), end), (0, 24), "4 batches of 2 records, 3 times");
        for offset in 0..=end {
            for budget in [1, 100, 1 << 20] {
                let read = p.read_for_follower(offset, budget, true).unwrap();
                let region = p.read_region_for_follower(offset, budget, true).unwrap();
                let bytes = region.records.map(|r| r.read().unwrap()).unwrap_or_default();
                assert_eq!(bytes, read.records.to_vec(), "offset {offset}, budget {budget}");
                assert_eq!(offset == end, bytes.is_empty(), "offset {offset}");
                assert_eq!(
                    (region.high_watermark, region.log_start_offset),
                    (read.high_watermark, read.log_start_offset)
                );
            }
        }
        assert!(matches!(
            p.read_region_for_follower(end + 1, 100, true),
            Err(crate::error::Error::OffsetOutOfRange { log_end: 24, .. })
        ));
    }
}
