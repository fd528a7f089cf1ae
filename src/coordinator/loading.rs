//! Coordinator failover: which partitions of a coordinator's internal topic
//! (`__consumer_offsets`, `__transaction_state`) this node has loaded, at which leader epoch,
//! and the read that loads one (Kafka's `GroupCoordinator.onElection` / `onResignation`,
//! `TransactionStateManager.loadTransactionsForTxnTopicPartition` /
//! `removeTransactionsForTxnTopicPartition`).
//!
//! A coordinator serves a key only when the key's partition is led here *and* its state was
//! loaded at the partition's current leader epoch. A partition led here at an epoch not loaded
//! yet is loaded: whatever was left of it from an earlier leadership is dropped first (its
//! group timers stop, its waiters are told NOT_COORDINATOR), then the partition is read from
//! its log start to its log end, not its high watermark, as Kafka's loaders read (the new
//! leader's log is what the followers will be truncated to), and the state is installed in one
//! step. A partition no longer led here is unloaded the same way.
//!
//! When it runs:
//! - a background pass (`PARTITION_CHECK_INTERVAL`, started beside the other coordinator
//!   timers in lib.rs) compares every partition's leadership with what is loaded, loads and
//!   unloads, so a failover completes without waiting for a request;
//! - a request whose partition is led here but not loaded loads it itself, synchronously,
//!   when the partition holds at most `LOAD_ON_REQUEST_BYTES_MAX` (a new or lightly used
//!   partition: a read of the page cache that costs the request a few milliseconds), so the
//!   first request after a failover or a creation elsewhere is served. A larger partition
//!   must not hold an async worker for its whole read: the request is answered NOT_COORDINATOR
//!   and wakes the pass, which loads it on a blocking thread. NOT_COORDINATOR, not
//!   COORDINATOR_LOAD_IN_PROGRESS: every group and transaction API of every client version
//!   handles it (it looks the coordinator up again and retries), while Kafka itself maps
//!   LOAD_IN_PROGRESS per API (to REBALANCE_IN_PROGRESS for SyncGroup, to NONE for Heartbeat)
//!   because older clients do not expect it;
//! - start-up loads every partition led here before the listener opens, and a coordinator
//!   that creates its topic marks the new (empty) partitions loaded itself, so a single node
//!   never answers NOT_COORDINATOR.
//!
//! One load per partition at a time (`claim`), whoever runs it; a load is once per partition
//! and epoch, since a partition loaded at its current epoch is never loaded again. Writes and
//! loads cannot cross: a coordinator writes only while the key's partition is loaded at the
//! partition's current epoch, and a write whose state was unloaded while it was in flight is
//! answered NOT_COORDINATOR (Kafka's coordinator-epoch check in its append callbacks); the
//! install re-reads until the log end has not moved, under the lock that the markers'
//! settlement of transactional offsets takes too.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use kafka_protocol::records::Record;
use tokio::sync::Notify;

use crate::error::Error;
use crate::log::batch::{batches, decode_records};
use crate::replica::{Partition, ReplicaManager};

/// How often the background pass compares leadership with what is loaded: the longest a
/// failover waits for its load when no request asks for the partition meanwhile.
pub const PARTITION_CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// The largest partition (bytes of log) a request loads itself; larger ones are loaded by the
/// background pass while requests get NOT_COORDINATOR.
pub const LOAD_ON_REQUEST_BYTES_MAX: u64 = 1 << 20;

/// The bytes read from the log per step of a load.
const LOAD_READ_BYTES: usize = 1 << 20;

/// How many times a load reads on because the log end moved while it read (a marker settling
/// transactional offsets) before it gives up for this pass.
pub const LOAD_ROUNDS_MAX: usize = 16;

/// The partitions of one internal topic loaded here, each with the leader epoch it was
/// loaded at.
pub struct LoadedPartitions {
    topic: &'static str,
    epochs: Mutex<HashMap<i32, i32>>,
    /// Held by one load pass at a time (and by the creation of the topic).
    pass: Mutex<()>,
    /// Partitions being loaded or unloaded now (by the pass or a request): one at a time.
    busy: Mutex<HashSet<i32>>,
    /// Wakes the background pass: a request found its partition led here but not loaded.
    wanted: Notify,
}

/// A partition held for one load or unload; released when dropped.
pub struct Claim<'a> {
    loaded: &'a LoadedPartitions,
    p: i32,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut busy = self.loaded.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.remove(&self.p);
    }
}

/// What a request for a partition finds (`LoadedPartitions::check`).
pub enum Readiness<'a> {
    Loaded,
    /// The request loads the partition itself, holding its claim.
    LoadNow(Arc<Partition>, Claim<'a>),
    Wait,
}

/// What one pass must do to match the leadership the replica manager applied.
#[derive(Default)]
pub struct Plan {
    /// Partitions loaded here that this node no longer leads at the epoch they were loaded at.
    pub unload: Vec<i32>,
    /// Partitions led here at an epoch not loaded yet.
    pub load: Vec<(i32, Arc<Partition>)>,
}

impl LoadedPartitions {
    pub fn new(topic: &'static str) -> LoadedPartitions {
        LoadedPartitions {
            topic,
            epochs: Mutex::new(HashMap::new()),
            pass: Mutex::new(()),
            busy: Mutex::new(HashSet::new()),
            wanted: Notify::new(),
        }
    }

    fn epochs(&self) -> MutexGuard<'_, HashMap<i32, i32>> {
        self.epochs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serializes passes (and a topic's creation with them).
    ///
    /// The holder may be waiting for the metadata quorum (creating the topic, in
    /// `block_in_place`). A request handler that blocked its runtime worker on the lock
    /// meanwhile would hold back the tasks queued on that worker, which the quorum wait may
    /// need: two FindCoordinators racing to create `__consumer_offsets` hung a node (its raft
    /// RPCs unanswered too). So a contended wait on a worker hands the worker's tasks over
    /// first (`block_in_place`).
    pub fn pass(&self) -> MutexGuard<'_, ()> {
        match self.pass.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                crate::blocking::off_worker(|| self.pass.lock().unwrap_or_else(|p| p.into_inner()))
            }
        }
    }

    /// The leader epoch partition `p` was loaded at, if it is loaded.
    pub fn epoch(&self, p: i32) -> Option<i32> {
        self.epochs().get(&p).copied()
    }

    /// Records partition `p` as loaded at `epoch`, or (None) unloaded. Callers hold the lock
    /// of the state they installed or dropped, so that both change together.
    pub fn set(&self, p: i32, epoch: Option<i32>) {
        match epoch {
            Some(epoch) => self.epochs().insert(p, epoch),
            None => self.epochs().remove(&p),
        };
    }

    /// Whether partition `p` is led here at the epoch its state was loaded at. One led here
    /// but not loaded wakes the background pass.
    pub fn is_loaded(&self, replicas: &ReplicaManager, p: i32) -> bool {
        let Some(partition) = replicas.get(self.topic, p) else {
            return false;
        };
        let loaded = self.epoch(p) == Some(partition.leader_epoch());
        if !loaded {
            self.wanted.notify_one();
        }
        loaded
    }

    /// Claims partition `p` for a load or an unload; None while another holds it.
    pub fn claim(&self, p: i32) -> Option<Claim<'_>> {
        let newly = self.busy.lock().unwrap_or_else(|e| e.into_inner()).insert(p);
        // Lazily: a claim not taken must not run its drop, which releases the partition.
        newly.then(|| Claim { loaded: self, p })
    }

    /// What a request for partition `p` finds: loaded, to be loaded by the request itself
    /// (led here, not loaded, small, and claimed for it), or to wait for the pass (not led
    /// here, or too large, or being loaded: the pass is woken).
    pub fn check(&self, replicas: &ReplicaManager, p: i32) -> Readiness<'_> {
        let Some(partition) = replicas.get(self.topic, p) else {
            return Readiness::Wait;
        };
        if self.epoch(p) == Some(partition.leader_epoch()) {
            return Readiness::Loaded;
        }
        let small = partition
            .size_bytes()
            .is_ok_and(|bytes| bytes <= LOAD_ON_REQUEST_BYTES_MAX);
        if small && let Some(claim) = self.claim(p) {
            // Loaded meanwhile by whoever held the claim.
            if self.epoch(p) == Some(partition.leader_epoch()) {
                return Readiness::Loaded;
            }
            return Readiness::LoadNow(partition, claim);
        }
        self.wanted.notify_one();
        Readiness::Wait
    }

    /// Wakes the background pass.
    pub fn wake(&self) {
        self.wanted.notify_one();
    }

    /// Resolves when a request wants a partition loaded.
    pub async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// Marks every partition of the topic led here loaded at its current epoch, without
    /// reading: for a topic this node has just created, whose partitions hold nothing but
    /// what this node's coordinator wrote since, through its live state.
    pub fn mark_created(&self, replicas: &ReplicaManager, partitions: i32) {
        for p in 0..partitions {
            if let Some(partition) = replicas.get(self.topic, p) {
                self.set(p, Some(partition.leader_epoch()));
            }
        }
    }

    /// Compares the leadership applied now with what is loaded, for a topic of `partitions`
    /// (0 when it does not exist: everything loaded goes).
    pub fn plan(&self, replicas: &ReplicaManager, partitions: i32) -> Plan {
        let epochs = self.epochs().clone();
        let mut plan = Plan::default();
        for (p, epoch) in &epochs {
            let led_at = replicas
                .get(self.topic, *p)
                .filter(|_| *p < partitions)
                .map(|partition| partition.leader_epoch());
            if led_at != Some(*epoch) {
                plan.unload.push(*p);
            }
        }
        for p in 0..partitions {
            if let Some(partition) = replicas.get(self.topic, p)
                && epochs.get(&p) != Some(&partition.leader_epoch())
            {
                plan.load.push((p, partition));
            }
        }
        plan.unload.sort_unstable();
        plan
    }
}

/// Reads `partition` from `from` up to its log end, handing each record to `apply` in log
/// order; returns the offset after the last batch read. A compacted batch may hold none of its
/// offsets, so the batch headers, not the records, move the read on.
pub fn replay(partition: &Partition, from: i64, mut apply: impl FnMut(&Record)) -> Result<i64, Error> {
    let tp = &partition.tp;
    let mut next = from;
    loop {
        let read = partition.read_for_follower(next, LOAD_READ_BYTES, true)?;
        if read.records.is_empty() {
            return Ok(next);
        }
        let before = next;
        for framed in batches(&read.records) {
            let (header, batch) = framed.map_err(|e| Error::CorruptBatch(format!("{tp} after {next}: {e}")))?;
            next = next.max(header.last_offset() + 1);
            let set = decode_records(&batch)
                .map_err(|e| Error::CorruptBatch(format!("{tp} at {}: {e}", header.base_offset)))?;
            for record in &set.records {
                apply(record);
            }
        }
        if next == before {
            return Ok(next); // nothing whole readable: never loop
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::replica::tests::setup;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partition_is_loaded_at_one_epoch_and_planned_again_at_the_next() {
        // Kafka's onElection/onResignation: a partition led here at a new epoch is loaded
        // again; one no longer led here is unloaded.
        let dir = tempfile::tempdir().unwrap();
        let (controller, replicas) = setup(dir.path());
        controller.create_topic("internal", 2, 1, BTreeMap::new()).unwrap();
        replicas.catch_up(&controller.image()).unwrap();
        let loaded = LoadedPartitions::new("internal");
        let plan = loaded.plan(&replicas, 2);
        assert_eq!(plan.load.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![0, 1]);
        assert!(plan.unload.is_empty());
        assert!(!loaded.is_loaded(&replicas, 0));

        loaded.mark_created(&replicas, 2);
        assert!(loaded.is_loaded(&replicas, 0));
        assert!(loaded.plan(&replicas, 2).load.is_empty());

        let p0 = replicas.hosted("internal", 0).unwrap();
        let epoch = p0.leader_epoch();
        p0.become_follower(epoch + 1, 2, 1);
        let plan = loaded.plan(&replicas, 2);
        assert_eq!((plan.unload, plan.load.len()), (vec![0], 0), "resigned");
        assert!(!loaded.is_loaded(&replicas, 0));

        p0.become_leader(epoch + 2, 1, vec![1], vec![1], 1);
        let plan = loaded.plan(&replicas, 2);
        assert_eq!(plan.unload, vec![0], "what the old epoch loaded goes first");
        assert_eq!(plan.load.iter().map(|(p, _)| *p).collect::<Vec<_>>(), vec![0]);
        // One load at a time per partition; a small one is the request's to load.
        let claim = loaded.claim(0).unwrap();
        assert!(loaded.claim(0).is_none() && loaded.claim(1).is_some());
        assert!(
            matches!(loaded.check(&replicas, 0), Readiness::Wait),
            "claimed by another"
        );
        drop(claim);
        assert!(matches!(loaded.check(&replicas, 0), Readiness::LoadNow(..)));
        assert!(matches!(loaded.check(&replicas, 1), Readiness::Loaded));
        // A topic gone (0 partitions) unloads everything.
        assert_eq!(loaded.plan(&replicas, 0).unload, vec![0, 1]);
    }
}
