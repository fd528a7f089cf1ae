//! The partitions this node hosts. A `Partition` owns the high watermark (what consumers may
//! read) and the durability wait of acks=all produces; every change to its log runs on its
//! writer (writer.rs: a shard thread fed by a bounded queue), so appends are serialized in
//! arrival order and their write syscalls never run on an async worker.
//!
//! On a single node the in-sync replica set is this node alone, so the high watermark is the log
//! end offset as soon as a batch is written (as in Kafka, visibility is about replication, not
//! fsync). Durability is separate: the durable offset says what has been fsynced. With
//! `log.flush.interval.messages = 1` (the default) an acks=all produce waits until its records
//! are below the durable offset; a background flusher fsyncs everything appended since its last
//! fsync in one call for all the requests that arrived meanwhile (group commit). Every
//! `log.flush.interval.ms` it also fsyncs whatever acks=0/1 writes left, bounding what a power
//! loss can take (a killed process loses nothing: the page cache survives it).

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod epoch_lookup;
pub mod fetcher;
mod follower_log;
pub mod hw_checkpoint;
pub mod leader;
pub mod log_dir;
pub mod produce_validation;
pub mod purgatory;
pub mod writer;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use crate::cluster::{ConfigLayer, MetadataImage};
use crate::config::BrokerConfig;
use crate::error::{Error, Result};
use crate::log::producer_state::{AbortedTxn, Marker, Origin, ProducerEntry};
use crate::log::{AppendInfo, FileRegion, Log, LogReader, LogSnapshot, ReadableBytes, ValidBatch};
use writer::{WRITER_QUEUE_JOBS, WRITER_SHARDS, Writer, WriterGone, Writers};

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A partition key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// What a read found.
pub struct PartitionRead<R = Bytes> {
    /// The batches read (`Bytes`), or located in their file (`Option<FileRegion>`).
    pub records: R,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// The first offset of the oldest open transaction, or the high watermark (LSO).
    pub last_stable_offset: i64,
    /// For a read_committed read: the aborted transactions overlapping the records returned.
    pub aborted: Option<Vec<AbortedTxn>>,
}

/// The offsets a client sees for a partition.
#[derive(Debug, Clone, Copy)]
pub struct PartitionOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    /// The last stable offset: what read_committed consumers may read up to.
    pub last_stable_offset: i64,
}

pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    /// The partition's leader epoch as this node last applied it from the metadata image
    /// (stamped on the batches this node writes as leader; fences requests of other epochs).
    leader_epoch: AtomicI32,
    dir: PathBuf,
    /// None once closed (topic deleted or broker stopping). Changed only by jobs on `writer`
    /// (and the flusher's `mark_flushed`); reads and the cleaner's prepare lock it too.
    log: Mutex<Option<Log>>,
    /// The shard thread that runs every change to `log`, in the order they were queued.
    writer: Writer,
    /// Snapshots of the log for reads, which never take `log`'s lock (log/snapshot.rs).
    reads: Arc<LogReader>,
    high_watermark: watch::Sender<i64>,
    /// The log end offset, moved after each write: what a follower's fetch waits on.
    log_end: watch::Sender<i64>,
    /// This node's role for the partition (leader with its followers' progress, or follower).
    role: Mutex<leader::Role>,
    /// Whether this node leads the partition: clients are served only then.
    leading: AtomicBool,
    /// This node's id (the leader's own entry in the ISR).
    node_id: i32,
    /// `min.insync.replicas` of the topic: acks=all needs that many in-sync replicas.
    min_insync_replicas: AtomicI32,
    /// Everything below this offset is fsynced.
    durable_offset: watch::Sender<i64>,
    /// Set by acks=all appends, taken by the flusher.
    flush_needed: Notify,
    /// True when acks=all waits for fsync (`log.flush.interval.messages = 1`); a dynamic
    /// broker config may change it.
    flush_before_ack: AtomicBool,
    /// `log.flush.interval.ms`: the flusher's period, read at each round.
    flush_interval_ms: AtomicU64,
    /// True while the flusher's fsync runs: an acks=all append made meanwhile starts its own
    /// bytes' write-back (`Writeback`) instead of leaving them all to the next fsync.
    fsync_running: AtomicBool,
    closing: AtomicBool,
    /// Set when an fsync failed: the partition stops acknowledging (Kafka takes the log dir
    /// offline: KAFKA_STORAGE_ERROR).
    failed: AtomicBool,
    /// Whether the last append failed on storage (a full disk): logged once when writes start
    /// failing and once when they succeed again, not at every refused produce.
    appends_failing: AtomicBool,
    /// Whether the bookkeeping after the last fsync (index entries, the recovery-point
    /// checkpoint) failed to write; logged the same way.
    checkpoints_failing: AtomicBool,
    /// Set when appends start failing on storage or an fsync fails: the leadership is to be
    /// handed over now (`ReplicaManager::hand_over_failing`), not at the next ISR pass.
    hand_over: AtomicBool,
    /// The largest append refused by storage since the last look (`hand_over_failing` takes
    /// it): how much a probe of the log directory must write.
    failed_write_bytes: std::sync::atomic::AtomicUsize,
}

/// How a partition starts on this node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opening {
    /// The leader epoch the metadata gives it.
    pub leader_epoch: i32,
    /// Whether other brokers hold replicas of it: it then serves nobody until the replica
    /// manager applies its registration.
    pub replicated: bool,
    /// Its high watermark before the restart, from the checkpoint (`hw_checkpoint.rs`): a
    /// replicated partition starts there (within its log) instead of at its log start.
    pub high_watermark: Option<i64>,
}

impl Partition {
    /// A partition over an open log; the caller starts its flusher (`run_flusher`).
    ///
    /// It starts as the only replica of itself, leading at `leader_epoch` (the single-node
    /// case); the replica manager then gives it its registration (`leader.rs`). A partition
    /// with other replicas starts its high watermark at its checkpointed one, else at the log
    /// start: what is above may not be on every in-sync replica, and the leader's followers
    /// (or, for a follower, its leader) move it up again.
    fn new(
        tp: TopicPartition,
        topic_id: Uuid,
        opening: Opening,
        dir: PathBuf,
        log: Log,
        live: &BrokerConfig,
        writer: Writer,
    ) -> Partition {
        let Opening {
            leader_epoch,
            replicated,
            high_watermark,
        } = opening;
        let end = log.log_end_offset();
        let start = log.log_start_offset();
        let first_high_watermark = match replicated {
            true => high_watermark.map_or(start, |hw| hw.min(end).max(start)),
            false => end,
        };
        let reads = log.reader();
        Partition {
            tp,
            topic_id,
            leader_epoch: AtomicI32::new(leader_epoch),
            dir,
            log: Mutex::new(Some(log)),
            writer,
            reads,
            high_watermark: watch::Sender::new(first_high_watermark),
            log_end: watch::Sender::new(end),
            // A replicated partition serves nobody until the replica manager applies its
            // registration.
            role: Mutex::new(if replicated {
                leader::Role::Follower { leader: -1 }
            } else {
                leader::Role::sole(live.node_id, leader_epoch, end)
            }),
            leading: AtomicBool::new(!replicated),
            node_id: live.node_id,
            min_insync_replicas: AtomicI32::new(live.min_insync_replicas),
            // Everything recovered from disk is durable.
            durable_offset: watch::Sender::new(end),
            flush_needed: Notify::new(),
            flush_before_ack: AtomicBool::new(live.log_flush_interval_messages <= 1),
            flush_interval_ms: AtomicU64::new(live.log_flush_interval_ms.max(1) as u64),
            fsync_running: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            appends_failing: AtomicBool::new(false),
            checkpoints_failing: AtomicBool::new(false),
            hand_over: AtomicBool::new(false),
            failed_write_bytes: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The topic's `min.insync.replicas` as this partition applies it.
    pub fn min_insync_replicas(&self) -> i32 {
        self.min_insync_replicas.load(Ordering::Acquire)
    }

    /// The partition's current leader epoch on this node.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Runs `op` on this partition's writer, after every change queued before it; waits for
    /// room in the writer's queue first (back-pressure on the caller).
    async fn write<T: Send + 'static>(
        self: &Arc<Self>,
        op: impl FnOnce(&Partition) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let me = self.clone();
        self.answered(self.writer.run(move || op(&me)).await)
    }

    /// `write` for callers on a blocking thread (retention, the cleaner, the replica manager).
    fn write_blocking<T: Send + 'static>(
        self: &Arc<Self>,
        op: impl FnOnce(&Partition) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let me = self.clone();
        self.answered(self.writer.run_blocking(move || op(&me)))
    }

    /// A writer job's result, or KAFKA_STORAGE_ERROR when the writer never answered.
    fn answered<T>(&self, answer: std::result::Result<Result<T>, WriterGone>) -> Result<T> {
        answer.unwrap_or_else(|WriterGone| Err(self.writer_gone()))
    }

    /// The writer thread is gone or its job died: the partition's storage is unusable
    /// (KAFKA_STORAGE_ERROR, as a failed write).
    fn writer_gone(&self) -> Error {
        Error::storage("write", &self.dir, std::io::Error::other("the log writer stopped"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Log>> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn with_log<T>(&self, f: impl FnOnce(&mut Log) -> Result<T>) -> Result<T> {
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::storage(
                "use",
                &self.dir,
                std::io::Error::other("an earlier fsync failed"),
            ));
        }
        match self.lock().as_mut() {
            Some(log) => f(log),
            None => Err(Error::UnknownTopicOrPartition(self.tp.to_string())),
        }
    }

    /// Appends batches on the partition's writer, visible to consumers once written; `durable`
    /// asks the flusher for an fsync soon (an acks=all produce will wait for it with
    /// `wait_durable`). Offsets follow the order appends reach the writer's queue: a caller
    /// awaiting each append (a connection's requests) keeps its own order.
    pub async fn append(self: &Arc<Self>, batches: Vec<ValidBatch>, durable: bool) -> Result<AppendInfo> {
        self.append_from(batches, durable, Origin::Client).await
    }

    /// `append` for batches the broker writes itself (`Origin::Coordinator`: transactional
    /// offset commits carry a producer id and epoch but no sequence).
    pub async fn append_from(
        self: &Arc<Self>,
        batches: Vec<ValidBatch>,
        durable: bool,
        origin: Origin,
    ) -> Result<AppendInfo> {
        self.write(move |p| p.append_now(batches, durable, origin)).await
    }

    /// `append` in two steps: returns once the append is queued on the partition's writer, with
    /// the wait for its result. Appends queued one after another get offsets in that order, so
    /// a connection may read its next request while this one is written. `ran` is dropped on
    /// the writer as soon as the append has run (or when it never will).
    pub async fn queue_append(
        self: &Arc<Self>,
        batches: Vec<ValidBatch>,
        durable: bool,
        ran: impl Send + 'static,
    ) -> impl Future<Output = Result<AppendInfo>> + Send + 'static {
        // An idle writer: append here, unless the append would roll a segment (a roll writes
        // and fsyncs files, which an async worker must not wait for).
        let batches = match self.writer.claim_soon().await {
            Some(_claim) => match self.append_here(batches, durable) {
                Ok(result) => return Either::Left(std::future::ready(result)),
                Err(batches) => batches,
            },
            None => batches,
        };
        Either::Right(self.queue_append_now(batches, durable, ran).await)
    }

    /// The append of `queue_append` on the caller's thread, when the active segment takes it
    /// without a roll; otherwise the batches are given back.
    fn append_here(
        &self,
        batches: Vec<ValidBatch>,
        durable: bool,
    ) -> std::result::Result<Result<AppendInfo>, Vec<ValidBatch>> {
        let fits = self
            .lock()
            .as_ref()
            .is_some_and(|log| log.takes_without_roll(&batches, now_ms()));
        if !fits {
            return Err(batches);
        }
        // No roll can come between: the claim keeps the writer's jobs out.
        Ok(self.append_now(batches, durable, Origin::Client))
    }

    /// `queue_append` through the writer's queue.
    async fn queue_append_now(
        self: &Arc<Self>,
        batches: Vec<ValidBatch>,
        durable: bool,
        ran: impl Send + 'static,
    ) -> impl Future<Output = Result<AppendInfo>> + Send + 'static {
        let me = self.clone();
        let queued = self
            .writer
            .queue(move || {
                let result = me.append_now(batches, durable, Origin::Client);
                drop(ran);
                result
            })
            .await;
        let me = self.clone();
        async move {
            let answer = match queued {
                Ok(answer) => answer.await,
                Err(gone) => Err(gone),
            };
            me.answered(answer)
        }
    }

    /// The append itself, on the writer thread: write, then publish the high watermark, then
    /// ask for the fsync (the durable offset moves only once it returns).
    fn append_now(&self, batches: Vec<ValidBatch>, durable: bool, origin: Origin) -> Result<AppendInfo> {
        let waits_for_fsync = durable && self.flush_before_ack.load(Ordering::Acquire);
        let bytes = batches.iter().map(|b| b.bytes().len()).sum();
        let appended = self.with_log(|log| {
            // Under the log's lock, which role changes take: nothing is appended once this
            // node stopped leading, whenever the request found it leading.
            if !self.is_leader() {
                return Err(Error::NotLeader(self.tp.to_string()));
            }
            let mark = log.write_position();
            let info = log.append_from(batches, self.leader_epoch(), now_ms(), origin)?;
            let mut writeback = None;
            if !info.duplicate {
                self.appended(log.log_end_offset());
                // An idle flusher starts its fsync at once, which writes these bytes itself.
                if waits_for_fsync && self.fsync_running.load(Ordering::Acquire) {
                    writeback = log.writeback_since(mark);
                }
            }
            Ok((info, writeback))
        });
        self.note_append(&appended, bytes);
        let (info, writeback) = appended?;
        if let Some(writeback) = writeback {
            writeback.start();
        }
        if waits_for_fsync && !info.duplicate {
            self.flush_needed.notify_one();
        }
        Ok(info)
    }

    /// Whether this partition's storage fails: its last append was refused by it, or an
    /// fsync failed.
    pub fn storage_failing(&self) -> bool {
        self.appends_failing.load(Ordering::Acquire) || self.failed.load(Ordering::Acquire)
    }

    /// Logs the start and the end of a run of appends refused by storage (a full disk answers
    /// every produce with KAFKA_STORAGE_ERROR until space is freed, and a follower fetches
    /// again after its backoff; each write that fails is cut back, so the log stays whole and
    /// takes writes again once it can).
    ///
    /// `bytes`: what the append wrote; the log directory comes back online only once a probe
    /// of that size succeeds (`log_dir.rs`).
    pub(super) fn note_append<T>(&self, result: &Result<T>, bytes: usize) {
        match result {
            Err(e @ Error::Storage { .. }) => {
                self.failed_write_bytes.fetch_max(bytes, Ordering::AcqRel);
                if e.is_device_failure() && !self.failed.swap(true, Ordering::AcqRel) {
                    // A failed device, not a full disk: the partition stops until a restart,
                    // as after a failed fsync (what it holds cannot be trusted to be written).
                    tracing::error!(partition = %self.tp, error = %e, "the device failed under an append; the partition stops until a restart");
                    self.hand_over.store(true, Ordering::Release);
                    self.durable_offset.send_modify(|_| {});
                }
                if flip(&self.appends_failing, true) {
                    self.hand_over.store(true, Ordering::Release);
                    tracing::error!(partition = %self.tp, error = %e, "appends fail on storage; refused (KAFKA_STORAGE_ERROR) until they succeed");
                }
            }
            Ok(_) => {
                if flip(&self.appends_failing, false) {
                    tracing::info!(partition = %self.tp, "appends succeed again");
                }
            }
            Err(_) => {}
        }
    }

    /// Writes a transaction marker (commit or abort) for `producer_id`: the control batch that
    /// ends its transaction on this partition and moves the last stable offset. The caller
    /// waits with `wait_durable(info.last_offset)` before it counts the marker as written.
    pub async fn write_txn_marker(
        self: &Arc<Self>,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
        transaction_version: i8,
    ) -> Result<AppendInfo> {
        let marker = Marker {
            commit,
            coordinator_epoch,
        };
        self.write(move |p| {
            let info = p.with_log(|log| {
                if !p.is_leader() {
                    return Err(Error::NotLeader(p.tp.to_string()));
                }
                let info = log.append_marker(
                    producer_id,
                    producer_epoch,
                    marker,
                    transaction_version,
                    p.leader_epoch(),
                    now_ms(),
                )?;
                if !info.duplicate {
                    p.appended(log.log_end_offset());
                }
                Ok(info)
            })?;
            if p.flush_before_ack.load(Ordering::Acquire) {
                p.flush_needed.notify_one();
            }
            Ok(info)
        })
        .await
    }

    /// The producers this partition knows, by id (DescribeProducers).
    pub fn producers(&self) -> Result<Vec<(i64, ProducerEntry)>> {
        self.with_log(|log| {
            let mut all: Vec<(i64, ProducerEntry)> = log
                .producer_state()
                .producers()
                .iter()
                .map(|(id, e)| (*id, e.clone()))
                .collect();
            all.sort_by_key(|(id, _)| *id);
            Ok(all)
        })
    }

    /// Whether `producer_id` at `producer_epoch` has written to this partition in a transaction
    /// not yet ended by a marker (Kafka's `hasOngoingTransaction`): its later batches in that
    /// transaction need no KIP-890 verification.
    pub fn has_ongoing_transaction(&self, producer_id: i64, producer_epoch: i16) -> bool {
        self.with_log(|log| {
            Ok(log
                .producer_state()
                .producers()
                .get(&producer_id)
                .is_some_and(|e| e.epoch == producer_epoch && e.current_txn_first_offset.is_some()))
        })
        .unwrap_or(false)
    }

    /// Forgets producers idle for `expiration_ms`.
    pub async fn remove_expired_producers(self: &Arc<Self>, expiration_ms: i64) -> Result<usize> {
        self.write(move |p| p.with_log(|log| Ok(log.remove_expired_producers(now_ms(), expiration_ms))))
            .await
    }

    /// Waits until `offset` is durable by the flush policy (acks=all).
    pub async fn wait_durable(&self, offset: i64) -> Result<()> {
        if !self.flush_before_ack.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut rx = self.durable_offset.subscribe();
        let wait = rx.wait_for(|durable| *durable > offset || self.failed.load(Ordering::Acquire));
        match wait.await {
            Ok(_) if !self.failed.load(Ordering::Acquire) => Ok(()),
            _ => Err(Error::storage(
                "flush",
                &self.dir,
                std::io::Error::other("the log could not be made durable"),
            )),
        }
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// A follower learns the high watermark from its leader's fetch answers: it is what the
    /// leader said, capped at this log's end (a follower may lag its leader). It never goes
    /// back, except through truncation.
    pub fn advance_follower_high_watermark(&self, leader_high_watermark: i64) {
        let Ok(offsets) = self.offsets() else {
            return;
        };
        let hw = leader_high_watermark.min(offsets.log_end_offset);
        self.high_watermark.send_if_modified(|current| {
            if hw > *current {
                *current = hw;
                true
            } else {
                false
            }
        });
    }

    /// A receiver that wakes when the high watermark moves (long-poll fetch).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// The log as readers see it now, without the log's lock. Callers load the high
    /// watermark first: the snapshot then holds everything below it.
    fn snapshot(&self) -> Result<Arc<LogSnapshot>> {
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::storage(
                "use",
                &self.dir,
                std::io::Error::other("an earlier fsync failed"),
            ));
        }
        if self.closing.load(Ordering::Acquire) {
            return Err(Error::UnknownTopicOrPartition(self.tp.to_string()));
        }
        Ok(self.reads.snapshot())
    }

    pub fn offsets(&self) -> Result<PartitionOffsets> {
        let hw = self.high_watermark();
        let log = self.snapshot()?;
        Ok(PartitionOffsets {
            log_start_offset: log.log_start_offset(),
            high_watermark: hw,
            // May run ahead of the high watermark while an append is being published.
            log_end_offset: log.log_end_offset(),
            last_stable_offset: last_stable_offset(&log, hw),
        })
    }

    /// Reads committed data (below the high watermark) from `offset`.
    pub fn read(&self, offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<PartitionRead> {
        self.read_with(offset, max_bytes, min_one_batch, false)
    }

    /// Reads from `offset` up to the high watermark, or for `read_committed` up to the last
    /// stable offset, with the aborted transactions the returned records overlap (Kafka's
    /// READ_COMMITTED fetch: the consumer drops those transactions' records itself). Reads a
    /// snapshot: never waits on appends, fsyncs or the cleaner.
    pub fn read_with(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        read_committed: bool,
    ) -> Result<PartitionRead> {
        self.read_through(
            offset,
            read_committed,
            |log, limit| log.read(offset, limit, max_bytes, min_one_batch),
            crate::log::batch::end_offset,
        )
    }

    /// `read_with`, with the batches located in their segment file rather than read (see
    /// `FileRegion`): None where `read_with` returns no bytes.
    pub fn read_region_with(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        read_committed: bool,
    ) -> Result<PartitionRead<Option<FileRegion>>> {
        self.read_through(
            offset,
            read_committed,
            |log, limit| log.read_region(offset, limit, max_bytes, min_one_batch),
            |region| region.as_ref().map(FileRegion::end_offset),
        )
    }

    /// The offsets and limits of a consumer's read, with the records as `read` finds them
    /// below the limit and `end_of` the offset after the last of them.
    fn read_through<R: Default>(
        &self,
        offset: i64,
        read_committed: bool,
        read: impl FnOnce(&LogSnapshot, i64) -> Result<R>,
        end_of: impl FnOnce(&R) -> Option<i64>,
    ) -> Result<PartitionRead<R>> {
        let hw = self.high_watermark();
        let log = self.snapshot()?;
        let log_start_offset = log.log_start_offset();
        let log_end_offset = log.log_end_offset();
        let lso = last_stable_offset(&log, hw);
        let limit = if read_committed { lso } else { hw };
        // Between the limit and the log end the offset exists but is not yet readable:
        // Kafka answers with no records and no error.
        let records = if offset >= limit && offset <= log_end_offset && offset >= log_start_offset {
            R::default()
        } else {
            read(&log, limit)?
        };
        let aborted = read_committed.then(|| match end_of(&records) {
            Some(upper) => log.aborted_transactions(offset, upper),
            None => Vec::new(),
        });
        Ok(PartitionRead {
            records,
            high_watermark: hw,
            log_start_offset,
            last_stable_offset: lso,
            aborted,
        })
    }

    /// How many bytes `read_with(offset, .., read_committed)` would find now, judged from file
    /// positions without reading records (see `Log::readable_bytes`): what a fetch waiting for
    /// `min_bytes` checks each time the high watermark moves.
    pub fn readable_bytes(&self, offset: i64, read_committed: bool) -> Result<ReadableBytes> {
        let hw = self.high_watermark();
        let log = self.snapshot()?;
        let limit = if read_committed {
            last_stable_offset(&log, hw)
        } else {
            hw
        };
        log.readable_bytes(offset, limit)
    }

    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>> {
        let hw = self.high_watermark();
        Ok(self
            .snapshot()?
            .offset_for_timestamp(timestamp_ms)?
            .filter(|(o, _)| *o < hw))
    }

    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let hw = self.high_watermark();
        Ok(self.snapshot()?.max_timestamp()?.filter(|(_, o)| *o < hw))
    }

    /// Bytes of log on disk (DescribeLogDirs).
    pub fn size_bytes(&self) -> Result<u64> {
        Ok(self.snapshot()?.size_bytes())
    }

    /// DeleteRecords: moves the log start offset to `offset` (-1: the high watermark) and
    /// returns the new low watermark. Offsets above the high watermark are out of range.
    pub async fn delete_records(self: &Arc<Self>, offset: i64) -> Result<i64> {
        self.write(move |p| {
            // Read on the writer: the high watermark of every append queued before this.
            let hw = p.high_watermark();
            let target = if offset == -1 { hw } else { offset };
            p.with_log(|log| {
                if target < 0 || target > hw {
                    return Err(Error::OffsetOutOfRange {
                        asked: offset,
                        log_start: log.log_start_offset(),
                        log_end: hw,
                    });
                }
                log.delete_records_before(target)
            })
        })
        .await
    }

    /// One retention pass (Kafka's `deleteOldSegments`): time and size limits of the topic.
    /// Runs on the writer; blocks the calling (blocking) thread until done.
    pub fn apply_retention(
        self: &Arc<Self>,
        retention_ms: i64,
        retention_bytes: i64,
    ) -> Result<crate::log::RetentionOutcome> {
        self.write_blocking(move |p| {
            let hw = p.high_watermark();
            p.with_log(|log| log.apply_retention(retention_ms, retention_bytes, hw, now_ms()))
        })
    }

    /// One compaction round, in two steps: the prepare (key map, cleaned segments written
    /// beside the log) on the calling blocking thread, then the swap on the writer, after
    /// the appends queued meanwhile. `commit_clean` refuses a plan whose segments changed in
    /// between (retention, DeleteRecords): the pass is then lost, not the data.
    pub fn clean(
        self: &Arc<Self>,
        config: &crate::log::cleaner::CleanerConfig,
    ) -> Result<Option<crate::log::cleaner::CleanStats>> {
        // The long part runs on a snapshot, holding no lock: appends and reads go on, and the
        // writer's commit refuses the plan if the segments it read were replaced meanwhile.
        let source = self.with_log(|log| Ok(log.clean_source()))?;
        let Some(plan) = source.prepare_clean(config, now_ms())? else {
            return Ok(None);
        };
        self.write_blocking(move |p| p.with_log(|log| log.commit_clean(plan)))
    }

    /// New settings for the log, effective from the next append or roll (the next job on the
    /// writer). Blocks the calling thread (the replica manager's) until applied.
    pub fn update_config(self: &Arc<Self>, config: crate::log::LogConfig) {
        let applied = self.write_blocking(move |p| {
            if let Some(log) = p.lock().as_mut() {
                log.update_config(config);
            }
            Ok(())
        });
        if let Err(e) = applied {
            tracing::warn!(partition = %self.tp, error = %e, "new log config not applied");
        }
    }

    /// The broker's flush policy (`log.flush.interval.messages`, `log.flush.interval.ms`),
    /// effective from the next append and the next flusher round.
    fn update_flush_policy(&self, config: &BrokerConfig) {
        self.flush_before_ack
            .store(config.log_flush_interval_messages <= 1, Ordering::Release);
        self.flush_interval_ms
            .store(config.log_flush_interval_ms.max(1) as u64, Ordering::Release);
        // A waiting flusher picks the new period up now rather than after the old one.
        self.flush_needed.notify_one();
    }

    /// Flushes and closes the log, on the writer after the changes queued before it; later
    /// calls get UNKNOWN_TOPIC_OR_PARTITION. Blocks the calling thread until closed.
    pub fn close(self: &Arc<Self>) -> Result<()> {
        self.closing.store(true, Ordering::Release);
        self.flush_needed.notify_one();
        match self.write_blocking(|p| p.close_now()) {
            // No writer to run it: close here rather than leave the log unflushed.
            Err(Error::Storage { .. }) if self.lock().is_some() => self.close_now(),
            result => result,
        }
    }

    fn close_now(&self) -> Result<()> {
        let log = self.lock().take();
        match log {
            // After a failed fsync the kernel may have dropped pages it could not write, and a
            // later fsync succeeds all the same (fsyncgate): the log is not marked cleanly
            // closed, so the next start recovers it from its recovery point.
            Some(_) if self.failed.load(Ordering::Acquire) => Err(Error::storage(
                "close",
                &self.dir,
                std::io::Error::other("an earlier fsync failed; left for recovery at the next start"),
            )),
            Some(log) => {
                let end = log.log_end_offset();
                let result = log.close();
                if result.is_ok() {
                    self.high_watermark.send_if_modified(|hw| {
                        let moved = *hw < end;
                        *hw = (*hw).max(end);
                        moved
                    });
                    // `Log::close` fsyncs everything: acks=all waiters of the last appends
                    // (the flusher has stopped) are released rather than left waiting.
                    self.durable_offset.send_if_modified(|durable| {
                        let moved = *durable < end;
                        *durable = (*durable).max(end);
                        moved
                    });
                }
                result
            }
            None => Ok(()),
        }
    }

    /// One fsync round: everything appended before it started becomes durable and visible.
    /// An error means the fsync failed. The bookkeeping after it (index entries, the
    /// recovery-point checkpoint) failing, on a full disk, is logged and done again at the
    /// next round: the data is durable either way, and a crash before the checkpoint only
    /// makes recovery validate more.
    fn flush_once(&self) -> Result<()> {
        let handle = match self.lock().as_ref() {
            Some(log) => log.flush_handle(),
            None => return Ok(()),
        };
        handle.sync()?;
        let flushed = handle.flushed_offset;
        let mut guard = self.lock();
        let Some(log) = guard.as_mut() else {
            return Ok(());
        };
        // A truncation (follower_log.rs) ran during the fsync: the offsets the handle names
        // may have been written again after it synced. The next round covers the log as it
        // is; the truncation lowered the durable offset under this same lock.
        if !log.still_covers(&handle) {
            return Ok(());
        }
        // Durable from here: acknowledge first, then record the recovery point (a checkpoint
        // file written through a rename, which acks=all waiters need not wait for; a crash
        // before it only makes the next recovery validate more).
        self.durable_offset.send_if_modified(|durable| {
            let moved = *durable < flushed;
            *durable = (*durable).max(flushed);
            moved
        });
        match log.mark_flushed(flushed) {
            Ok(()) => {
                if flip(&self.checkpoints_failing, false) {
                    tracing::info!(partition = %self.tp, "checkpoints written again");
                }
            }
            Err(e) => {
                if flip(&self.checkpoints_failing, true) {
                    tracing::warn!(partition = %self.tp, error = %e, "writing the index or recovery-point checkpoint failed after an fsync; trying again at the next one");
                }
            }
        }
        Ok(())
    }

    /// The flusher: one per partition, fsyncing on a blocking thread so appends continue
    /// meanwhile; appends made during an fsync are covered by the next one.
    async fn run_flusher(self: Arc<Self>, fsync: prometheus_client::metrics::histogram::Histogram) {
        loop {
            let interval = Duration::from_millis(self.flush_interval_ms.load(Ordering::Acquire));
            tokio::select! {
                _ = self.flush_needed.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
            if self.closing.load(Ordering::Acquire) {
                return;
            }
            if *self.durable_offset.borrow() >= *self.log_end.borrow() {
                continue; // nothing new since the last fsync
            }
            let me = self.clone();
            let fsync = fsync.clone();
            self.fsync_running.store(true, Ordering::Release);
            let result = tokio::task::spawn_blocking(move || {
                let start = std::time::Instant::now();
                let flushed = me.flush_once();
                fsync.observe(start.elapsed().as_secs_f64());
                flushed
            })
            .await;
            self.fsync_running.store(false, Ordering::Release);
            let failure = match result {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(reason) = failure {
                tracing::error!(partition = %self.tp, %reason, "fsync failed; the partition stops accepting writes");
                self.failed.store(true, Ordering::Release);
                self.hand_over.store(true, Ordering::Release);
                self.durable_offset.send_modify(|_| {});
                return;
            }
        }
    }
}

/// Sets `flag` to `to`; true when that changed it (the start or the end of a run of failures,
/// each logged once). A flag already at `to` costs one load, as on every successful append.
fn flip(flag: &AtomicBool, to: bool) -> bool {
    flag.load(Ordering::Acquire) != to && flag.swap(to, Ordering::AcqRel) != to
}

/// The LSO: the first offset of the oldest open transaction, never above the high watermark.
fn last_stable_offset(log: &LogSnapshot, high_watermark: i64) -> i64 {
    log.first_unstable_offset()
        .map_or(high_watermark, |first| first.min(high_watermark))
}

/// All partitions hosted here, kept in step with the metadata image.
pub struct ReplicaManager {
    config: Arc<BrokerConfig>,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Serializes `apply_image`: two requests applying the same change must not both open (or
    /// both delete) a partition's files. Holds what was applied last.
    applying: Mutex<Applied>,
    /// Partitions the image has whose storage failed to open: reported offline (no leader),
    /// never served.
    offline: RwLock<HashSet<TopicPartition>>,
    /// How far the published images are applied; `progressed` wakes whoever waits for it.
    progress: Mutex<Progress>,
    progressed: Condvar,
    /// The offset of the last image applied, for async waiters (`applied`).
    applied: watch::Sender<Option<i64>>,
    /// Set by `close_all`: nothing is applied any more.
    stopped: AtomicBool,
    /// The log writer threads every partition's changes run on.
    writers: Writers,
    /// The controller, for the ISR changes leaders ask for (set once at start).
    controller: std::sync::OnceLock<std::sync::Weak<crate::cluster::Controller>>,
    /// The fetch tasks of the partitions this node follows, one per leader (fetcher.rs).
    fetchers: fetcher::Fetchers,
    /// The broker's metrics: fsyncs, ISR changes, retention and cleaning are counted here.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Whether the log directory works, as the broker's heartbeat reports it (log_dir.rs).
    pub log_dir: Arc<log_dir::LogDirHealth>,
    /// The high watermarks checkpointed before this start, taken by the partitions as they
    /// open, then forgotten (`forget_high_watermark_hints`).
    hw_hints: Mutex<hw_checkpoint::Entries>,
    /// What the last high-watermark checkpoint wrote: an unchanged one is not written again.
    hw_written: Mutex<Vec<(TopicPartition, Uuid, i64)>>,
    /// Whether the last high-watermark checkpoint failed to write (logged once per run).
    hw_checkpoint_failing: AtomicBool,
}

/// The replica manager's progress through the published images.
#[derive(Default)]
struct Progress {
    /// The offset of the last image applied; None before the first.
    applied: Option<i64>,
    /// Recent applies that failed: the image offsets each covered, and the first error.
    failures: std::collections::VecDeque<(std::ops::RangeInclusive<i64>, String)>,
}

/// Failed applies remembered for the requests waiting on them.
const FAILURES_KEPT: usize = 64;
/// How long a request waits for its image to be applied before it gives up.
const APPLY_WAIT: Duration = Duration::from_secs(60);

/// The topics as last applied: the next image is compared with it (a persistent-map diff
/// that skips shared structure), so applying a change costs the change, not the whole image.
#[derive(Default)]
struct Applied {
    topics: imbl::OrdMap<String, Arc<crate::cluster::TopicInfo>>,
    /// The dynamic broker config layers (cluster default, this broker's) last applied.
    broker_configs: Option<(ConfigLayer, ConfigLayer)>,
}

impl ReplicaManager {
    pub fn new(config: Arc<BrokerConfig>) -> ReplicaManager {
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let claims = writer::ClaimStats {
            held: metrics.append_in_place.clone(),
            slept: metrics.append_in_place_slept.clone(),
        };
        ReplicaManager {
            partitions: RwLock::new(HashMap::new()),
            applying: Mutex::new(Applied::default()),
            offline: RwLock::new(HashSet::new()),
            progress: Mutex::new(Progress::default()),
            progressed: Condvar::new(),
            applied: watch::Sender::new(None),
            stopped: AtomicBool::new(false),
            writers: Writers::start_counted(WRITER_SHARDS, WRITER_QUEUE_JOBS, &claims),
            controller: std::sync::OnceLock::new(),
            fetchers: fetcher::Fetchers::new(&config),
            metrics,
            log_dir: Arc::new(log_dir::LogDirHealth::new(&config.data_dir)),
            hw_hints: Mutex::new(match config.cluster_mode() {
                true => hw_checkpoint::read(&config.data_dir),
                false => hw_checkpoint::Entries::new(),
            }),
            hw_written: Mutex::new(Vec::new()),
            hw_checkpoint_failing: AtomicBool::new(false),
            config,
        }
    }

    /// The controller leaders send their ISR changes to.
    pub fn set_controller(&self, controller: &Arc<crate::cluster::Controller>) {
        let _ = self.controller.set(Arc::downgrade(controller));
    }

    /// Starts the replica-manager thread: the one place that applies the metadata images the
    /// controller publishes (the latest one when several were published meanwhile). A thread
    /// of its own, not a tokio task: requests wait for it from synchronous code (`catch_up`),
    /// and must not be able to starve it of workers. It ends when the controller is dropped
    /// or the replica manager closes.
    pub fn start_applier(self: &Arc<Self>, mut images: watch::Receiver<Arc<MetadataImage>>) -> std::io::Result<()> {
        let replicas = Arc::downgrade(self);
        // Opening a partition spawns its flusher task on the broker's runtime.
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        std::thread::Builder::new()
            .name("replica-manager".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                while futures::executor::block_on(images.changed()).is_ok() {
                    let image = images.borrow_and_update().clone();
                    let Some(replicas) = replicas.upgrade() else { return };
                    if replicas.stopped.load(Ordering::Acquire) {
                        return;
                    }
                    replicas.apply_published(&image);
                }
            })
            .map(drop)
    }

    /// Applies one published image and records the outcome for `catch_up`.
    fn apply_published(&self, image: &MetadataImage) {
        let from = self.progress.lock().unwrap_or_else(|p| p.into_inner()).applied;
        if from.is_some_and(|applied| applied >= image.offset) {
            return;
        }
        let result = self.apply_image(image);
        let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = result {
            let first = from.map_or(i64::MIN, |applied| applied + 1);
            progress.failures.push_back((first..=image.offset, e.to_string()));
            if progress.failures.len() > FAILURES_KEPT {
                progress.failures.pop_front();
            }
        }
        progress.applied = Some(image.offset);
        self.progressed.notify_all();
        self.applied.send_replace(Some(image.offset));
    }

    /// Whether `image` (or a later one) is applied: every partition it names is open here or
    /// marked offline.
    pub fn has_applied(&self, image: &MetadataImage) -> bool {
        self.applied.borrow().is_some_and(|applied| applied >= image.offset)
    }

    /// `catch_up` for async callers, up to `within`: whether `image` (or a later one) was
    /// applied, successfully or not, in time.
    pub async fn applied(&self, image: &MetadataImage, within: Duration) -> bool {
        let mut applied = self.applied.subscribe();
        let reached = applied.wait_for(|applied| applied.is_some_and(|applied| applied >= image.offset));
        matches!(tokio::time::timeout(within, reached).await, Ok(Ok(_)))
    }

    /// Waits until the replica manager has applied `image` (or a later one): the partitions it
    /// names are open, and its configs live. The error of the apply that covered it, if any
    /// (the partitions that failed are offline).
    /// An apply can take seconds (thousands of partitions to open): a wait for one is made off
    /// the caller's runtime worker (`blocking::off_worker`).
    pub fn catch_up(&self, image: &MetadataImage) -> Result<()> {
        let wait = || {
            let deadline = std::time::Instant::now() + APPLY_WAIT;
            let mut progress = self.progress.lock().unwrap_or_else(|p| p.into_inner());
            while progress.applied.is_none_or(|applied| applied < image.offset) {
                let now = std::time::Instant::now();
                if now >= deadline || self.stopped.load(Ordering::Acquire) {
                    return Err(self.not_applied(format!("metadata image {} was not applied", image.offset)));
                }
                progress = self
                    .progressed
                    .wait_timeout(progress, (deadline - now).min(Duration::from_millis(100)))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Ok(progress)
        };
        let progress = match self.has_applied(image) {
            true => self.progress.lock().unwrap_or_else(|p| p.into_inner()),
            false => crate::blocking::off_worker(wait)?,
        };
        match progress
            .failures
            .iter()
            .find(|(offsets, _)| offsets.contains(&image.offset))
        {
            Some((_, message)) => Err(self.not_applied(message.clone())),
            None => Ok(()),
        }
    }

    fn not_applied(&self, message: String) -> Error {
        Error::Storage {
            op: "apply metadata in",
            path: self.config.data_dir.clone(),
            source: std::io::Error::other(message),
        }
    }

    /// The partition if this node leads it: what client requests are served from (a follower
    /// answers NOT_LEADER_OR_FOLLOWER through `api::absent_partition`).
    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.hosted(topic, partition).filter(|p| p.is_leader())
    }

    /// The partition if this node holds a replica of it, leader or follower.
    pub fn hosted(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let key = TopicPartition {
            topic: topic.to_string(),
            partition,
        };
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned()
    }

    fn partition_dir(&self, tp: &TopicPartition) -> PathBuf {
        self.config.data_dir.join(tp.to_string())
    }

    /// Opens the partitions the image has and this node lacks, closes and deletes those it no
    /// longer has, and applies config changes live. Runs at start-up and after every metadata
    /// change; only topics that changed since the last call are visited, unless the dynamic
    /// broker configs changed: those become the live broker config first (so partitions open
    /// with them), then reach every partition's log (Kafka's `DynamicLogConfig.reconfigure`).
    /// A partition whose storage fails to open is marked offline and the others still open;
    /// the first such error is returned.
    fn apply_image(&self, image: &MetadataImage) -> Result<()> {
        use imbl::ordmap::DiffItem;
        let mut applied = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        let layers = image.broker_config_layers(self.config.node_id);
        // On the first apply no partition is open yet: those opening below get the live config.
        let first = applied.broker_configs.is_none();
        let broker_configs_changed = applied.broker_configs.as_ref() != Some(&layers);
        if broker_configs_changed {
            self.config.apply_dynamic(&layers.0, &layers.1);
        }
        let mut first_error = None;
        let mut note = |e: Error| {
            if first_error.is_none() {
                first_error = Some(e);
            }
        };
        for change in applied.topics.diff(&image.topics) {
            match change {
                DiffItem::Add(_, topic) => {
                    for partition in 0..topic.partitions {
                        self.open_partition(topic, partition).unwrap_or_else(&mut note);
                    }
                }
                DiffItem::Remove(_, topic) => self.remove_partitions(topic, 0),
                DiffItem::Update {
                    old: (_, old),
                    new: (_, new),
                } => {
                    if old.id != new.id {
                        // Deleted and re-created under the same name.
                        self.remove_partitions(old, 0);
                        for partition in 0..new.partitions {
                            self.open_partition(new, partition).unwrap_or_else(&mut note);
                        }
                        continue;
                    }
                    // Reassignments (KIP-455): a partition whose replicas now include this node
                    // opens here (and follows its leader below); one whose replicas no longer
                    // do stops, and its log goes.
                    let me = self.config.node_id;
                    for partition in 0..old.partitions.min(new.partitions) {
                        if old.replicas(partition) == new.replicas(partition) {
                            continue;
                        }
                        match (old.hosts(partition, me), new.hosts(partition, me)) {
                            (false, true) => self.open_partition(new, partition).unwrap_or_else(&mut note),
                            (true, false) => self.remove_moved_partition(new, partition),
                            _ => {}
                        }
                    }
                    if old.configs != new.configs {
                        // Config changes (AlterConfigs) take effect live.
                        let config = self.config.topic_log_config(&new.configs);
                        for partition in 0..old.partitions.min(new.partitions) {
                            if let Some(existing) = self.hosted(&new.name, partition) {
                                existing.update_config(config.clone());
                            }
                        }
                    }
                    for partition in old.partitions..new.partitions {
                        self.open_partition(new, partition).unwrap_or_else(&mut note);
                    }
                    if new.partitions < old.partitions {
                        self.remove_partitions(old, new.partitions);
                    }
                }
            }
        }
        for change in applied.topics.diff(&image.topics) {
            match change {
                DiffItem::Add(_, topic) | DiffItem::Update { new: (_, topic), .. } => self.apply_roles(topic, image),
                DiffItem::Remove(_, topic) => {
                    for partition in 0..topic.partitions {
                        self.unfollow(&TopicPartition {
                            topic: topic.name.clone(),
                            partition,
                        });
                    }
                }
            }
        }
        applied.topics = image.topics.clone();
        if first {
            self.remove_unhosted_dirs(image);
        }
        if broker_configs_changed && !first {
            self.reconfigure_all(image);
        }
        applied.broker_configs = Some(layers);
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Gives each hosted partition of `topic` its role from the partition's registration:
    /// leader (with the ISR and replicas) or follower of the leader named
    /// (docs/design/replication.md). A registration already applied is skipped.
    fn apply_roles(&self, topic: &crate::cluster::TopicInfo, image: &MetadataImage) {
        let min_isr = topic
            .configs
            .get("min.insync.replicas")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| self.config.live().min_insync_replicas);
        for partition in 0..topic.partitions {
            let Some(p) = self.hosted(&topic.name, partition).filter(|p| p.topic_id == topic.id) else {
                continue;
            };
            let registration = topic.registration(partition);
            if registration.leader == self.config.node_id {
                if p.is_leader()
                    && p.leader_epoch() == registration.leader_epoch
                    && p.partition_epoch() == Some(registration.partition_epoch)
                {
                    // The topic's configs may have changed alone.
                    p.set_min_insync_replicas(min_isr);
                    continue;
                }
                self.unfollow(&p.tp);
                p.become_leader(
                    registration.leader_epoch,
                    registration.partition_epoch,
                    topic.replicas(partition).to_vec(),
                    registration.isr,
                    min_isr,
                );
            } else {
                if p.followed_leader() == Some(registration.leader) && p.leader_epoch() == registration.leader_epoch {
                    continue;
                }
                p.become_follower(registration.leader_epoch, registration.leader, min_isr);
                match image.brokers.get(&registration.leader) {
                    Some(leader) => self.follow(&p, leader.clone(), registration.leader_epoch),
                    None => self.unfollow(&p.tp),
                }
            }
        }
    }

    /// Starts (or moves) the fetching of `partition` from `leader`.
    fn follow(&self, partition: &Arc<Partition>, leader: Arc<crate::cluster::BrokerInfo>, leader_epoch: i32) {
        tracing::info!(partition = %partition.tp, leader = leader.id, leader_epoch, "following");
        self.fetchers.follow(partition.clone(), leader, leader_epoch);
    }

    /// Stops fetching `tp` (this node leads it now, or no longer hosts it).
    fn unfollow(&self, tp: &TopicPartition) {
        self.fetchers.unfollow(tp);
    }

    /// Asks the controller for the ISR change `proposal` of `partition`, which this node
    /// leads (a task: the answer comes back as a new metadata image, applied by
    /// `apply_roles`).
    pub fn propose_isr(&self, partition: Arc<Partition>, proposal: leader::IsrProposal) {
        let Some(controller) = self.controller.get().and_then(std::sync::Weak::upgrade) else {
            partition.isr_change_done(&proposal, None);
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            partition.isr_change_done(&proposal, None);
            return;
        };
        // A follower that is fenced or whose log directory is offline would be refused
        // (INELIGIBLE_REPLICA): not asked at every fetch it makes meanwhile.
        if let Some(ineligible) = controller
            .image()
            .ineligible_isr_member(&partition.isr(), &proposal.isr)
        {
            tracing::debug!(partition = %partition.tp, follower = ineligible, "caught up, but not eligible for the ISR");
            partition.isr_change_done(&proposal, None);
            return;
        }
        let isr_before = partition.isr().len();
        let metrics = self.metrics.clone();
        runtime.spawn(async move {
            let isr = proposal.isr.clone();
            tracing::info!(partition = %partition.tp, ?isr, "asking the controller for an ISR change");
            let result = controller
                .alter_partition(partition.topic_id, partition.tp.partition, proposal.leader_epoch, isr)
                .await;
            match result {
                Ok(registration) => {
                    match proposal.isr.len().cmp(&isr_before) {
                        std::cmp::Ordering::Less => metrics.isr_shrinks.inc(),
                        std::cmp::Ordering::Greater => metrics.isr_expands.inc(),
                        std::cmp::Ordering::Equal => 0,
                    };
                    partition.isr_change_done(&proposal, Some(registration.partition_epoch))
                }
                Err(e) => {
                    tracing::warn!(partition = %partition.tp, error = %e, "ISR change not committed");
                    partition.isr_change_done(&proposal, None);
                }
            }
        });
    }

    /// One pass of Kafka's ISR expiration: each partition this node leads drops the followers
    /// that have not caught up for `lag_ms` (through the controller). A partition led here
    /// whose storage fails is handed to another in-sync replica (`resign`).
    pub fn shrink_lagging_isrs(&self, lag_ms: i64) {
        for p in self.all() {
            if p.storage_failing() && p.is_leader() && p.isr().len() > 1 {
                self.resign(p.clone());
            }
            if let Some(proposal) = p.shrink_isr(lag_ms) {
                self.propose_isr(p, proposal);
            }
        }
    }

    /// Hands over at once the partitions led here whose storage started failing since the last
    /// call (the ISR pass repeats it for those that still fail, every `replica.lag.time.max.ms`
    /// / 2), and takes the log directory offline at the first such failure (log_dir.rs); a
    /// partition whose fsync or truncation failed is reported offline. Cheap when nothing
    /// failed: one load per partition.
    pub fn hand_over_failing(&self) {
        let mut failed = None;
        for p in self.all() {
            if p.hand_over.load(Ordering::Acquire) && p.hand_over.swap(false, Ordering::AcqRel) {
                let bytes = p.failed_write_bytes.swap(0, Ordering::AcqRel);
                failed = Some(failed.unwrap_or(0).max(bytes));
                if p.failed.load(Ordering::Acquire) {
                    // It serves nothing until a restart: reported offline from now on, as
                    // one that failed to open (Metadata: no leader, an offline replica).
                    tracing::error!(partition = %p.tp, "partition offline until a restart: its storage failed");
                    self.offline
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(p.tp.clone());
                }
                if p.is_leader() && p.isr().len() > 1 {
                    self.resign(p);
                }
            } else if p.failed_write_bytes.load(Ordering::Relaxed) > 0 {
                // Refused again while already failing: the probe grows to the largest.
                let bytes = p.failed_write_bytes.swap(0, Ordering::AcqRel);
                failed = Some(failed.unwrap_or(0).max(bytes));
            }
        }
        if let Some(bytes) = failed {
            self.log_dir.failed(std::time::Instant::now(), bytes);
        }
    }

    /// While the log directory is offline, probes it when a probe is due (blocking: it writes
    /// and fsyncs). It comes back online when the probe succeeds and no partition's fsync has
    /// failed; the partitions then forget their failed appends, so a leader here is not handed
    /// over again for a failure that has passed.
    pub fn probe_log_dir(&self) {
        let now = std::time::Instant::now();
        if !self.log_dir.probe_due(now) {
            return;
        }
        if let Some(p) = self.all().into_iter().find(|p| p.failed.load(Ordering::Acquire)) {
            let why = format!("an fsync of partition {} failed: offline until a restart", p.tp);
            self.log_dir.probed(Err(std::io::Error::other(why)), now);
            return;
        }
        let result = self.log_dir.probe();
        let online = result.is_ok();
        self.log_dir.probed(result, std::time::Instant::now());
        if online {
            for p in self.all() {
                if flip(&p.appends_failing, false) {
                    tracing::info!(partition = %p.tp, "the log directory is back: appends are tried again");
                }
            }
        }
    }

    /// Asks the controller to move the leadership of `partition`, whose appends fail on
    /// storage here, to another in-sync replica (`Controller::resign_leadership`); the new
    /// registration comes back as a metadata image, as for ISR changes.
    fn resign(&self, partition: Arc<Partition>) {
        let Some(controller) = self.controller.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let epoch = partition.leader_epoch();
            match controller
                .resign_leadership(partition.topic_id, partition.tp.partition, epoch)
                .await
            {
                Ok(Some(registration)) => tracing::warn!(
                    partition = %partition.tp,
                    leader = registration.leader,
                    leader_epoch = registration.leader_epoch,
                    "storage fails here: the leadership moved to another in-sync replica"
                ),
                Ok(None) => tracing::debug!(partition = %partition.tp, "storage fails here, and no other in-sync replica is live"),
                Err(e) => tracing::debug!(partition = %partition.tp, error = %e, "handing the leadership over failed"),
            }
        });
    }

    /// Gives every hosted partition the live broker defaults under its topic's overrides, and
    /// the live flush policy: one lock and one config copy per partition, the config computed
    /// once per topic.
    fn reconfigure_all(&self, image: &MetadataImage) {
        let live = self.config.live();
        let mut by_topic: HashMap<String, crate::log::LogConfig> = HashMap::new();
        for p in self.all() {
            let Some(topic) = image.topic(&p.tp.topic) else {
                continue;
            };
            let config = by_topic
                .entry(p.tp.topic.clone())
                .or_insert_with(|| self.config.topic_log_config(&topic.configs))
                .clone();
            p.update_config(config);
            p.update_flush_policy(&live);
        }
    }

    /// Closes partitions `from..` of `topic` and deletes their files.
    fn remove_partitions(&self, topic: &crate::cluster::TopicInfo, from: i32) {
        for partition in from..topic.partitions {
            self.remove_partition(topic, partition);
        }
    }

    /// Closes one partition of `topic` and deletes its files.
    fn remove_partition(&self, topic: &crate::cluster::TopicInfo, partition: i32) {
        let tp = TopicPartition {
            topic: topic.name.clone(),
            partition,
        };
        self.offline.write().unwrap_or_else(|p| p.into_inner()).remove(&tp);
        let removed = self.partitions.write().unwrap_or_else(|p| p.into_inner()).remove(&tp);
        match removed {
            Some(p) if p.topic_id == topic.id => {
                if let Err(e) = p.close() {
                    tracing::warn!(partition = %p.tp, error = %e, "closing a deleted partition");
                }
                remove_partition_dir(&p.dir);
            }
            // Opened for a newer incarnation of the name: not ours to delete.
            Some(p) => {
                self.partitions.write().unwrap_or_else(|p| p.into_inner()).insert(tp, p);
            }
            // Never opened (offline): its files, if any, go too.
            None => {
                let dir = self.partition_dir(&tp);
                if dir.exists() {
                    remove_partition_dir(&dir);
                }
            }
        }
    }

    /// A partition a completed (or cancelled) reassignment took off this node (Kafka's
    /// `StopReplica` with deletion): it stops leading first, at the registration's epoch, so
    /// acks=all produces still waiting answer NOT_LEADER_OR_FOLLOWER (the close's fsync
    /// would otherwise release them as acknowledged, though the new replicas may lack
    /// them); then its fetching stops, its log closes and its directory is deleted.
    fn remove_moved_partition(&self, topic: &crate::cluster::TopicInfo, partition: i32) {
        if let Some(p) = self.hosted(&topic.name, partition).filter(|p| p.topic_id == topic.id) {
            let registration = topic.registration(partition);
            let min_isr = p.min_insync_replicas.load(Ordering::Acquire);
            p.become_follower(registration.leader_epoch, registration.leader, min_isr);
            self.unfollow(&p.tp);
            tracing::info!(partition = %p.tp, "reassigned away: stopping and deleting the replica");
        }
        self.remove_partition(topic, partition);
    }

    /// Opens (or creates) one partition's log; on failure the partition is marked offline.
    fn open_partition(&self, topic: &crate::cluster::TopicInfo, partition: i32) -> Result<()> {
        if !topic.hosts(partition, self.config.node_id) {
            // Another broker's partition: nothing of it lives here.
            return Ok(());
        }
        let tp = TopicPartition {
            topic: topic.name.clone(),
            partition,
        };
        if self
            .hosted(&tp.topic, tp.partition)
            .is_some_and(|p| p.topic_id == topic.id)
        {
            return Ok(());
        }
        let dir = self.partition_dir(&tp);
        let opened = Log::open(&dir, self.config.topic_log_config(&topic.configs), now_ms()).and_then(|mut log| {
            let end = log.log_end_offset();
            if log.recovery_point() < end {
                // Recovered data after a crash may still be only in the page cache: make it
                // durable before consumers can see it (the high watermark starts at the end).
                log.flush_handle().sync()?;
                // The checkpoint after it may not fit on a full disk: the data is durable, and
                // the next flush writes it (until then a crash only makes recovery validate more).
                if let Err(e) = log.mark_flushed(end) {
                    tracing::warn!(partition = %tp, error = %e, "recovered; the recovery point is not checkpointed yet");
                }
            }
            Ok(log)
        });
        let log = match opened {
            Ok(log) => log,
            Err(e) => {
                tracing::error!(partition = %tp, error = %e, "partition offline: its storage failed to open");
                self.offline.write().unwrap_or_else(|p| p.into_inner()).insert(tp);
                return Err(e);
            }
        };
        self.offline.write().unwrap_or_else(|p| p.into_inner()).remove(&tp);
        let writer = self.writers.for_partition(&tp);
        let partition = Arc::new(Partition::new(
            tp.clone(),
            topic.id,
            Opening {
                leader_epoch: topic.partition_leader_epoch(partition),
                replicated: topic.replicas(partition).len() > 1,
                high_watermark: self
                    .hw_hints
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&tp)
                    .filter(|(id, _)| *id == topic.id)
                    .map(|(_, hw)| hw),
            },
            dir,
            log,
            &self.config.live(),
            writer,
        ));
        tokio::spawn(partition.clone().run_flusher(self.metrics.fsync.clone()));
        self.partitions
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tp, partition);
        Ok(())
    }

    /// Whether any of a topic's first `partitions` partitions failed to open here.
    pub fn topic_is_offline(&self, topic: &str, partitions: i32) -> bool {
        (0..partitions).any(|p| self.is_offline(topic, p))
    }

    /// Whether a partition of the image failed to open here (reported without a leader).
    pub fn is_offline(&self, topic: &str, partition: i32) -> bool {
        let offline = self.offline.read().unwrap_or_else(|p| p.into_inner());
        !offline.is_empty()
            && offline.contains(&TopicPartition {
                topic: topic.to_string(),
                partition,
            })
    }

    /// Removes directories left by a deletion that a crash interrupted.
    pub fn remove_stray_dirs(&self) {
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().ends_with("-delete") {
                remove_partition_dir(&entry.path());
            }
        }
    }

    /// At start-up, once the image is applied: deletes the logs of partitions the metadata
    /// places on other brokers only (Kafka's stray logs, KIP-858), left by a reassignment
    /// that took them away while this node was down. A directory whose topic the image does
    /// not know is left alone (it is not a partition's, or the metadata cannot tell).
    fn remove_unhosted_dirs(&self, image: &MetadataImage) {
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((topic, partition)) = name.rsplit_once('-') else {
                continue;
            };
            let (Ok(partition), Some(info)) = (partition.parse::<i32>(), image.topic(topic)) else {
                continue;
            };
            if (0..info.partitions).contains(&partition)
                && !info.hosts(partition, self.config.node_id)
                && self.hosted(topic, partition).is_none()
                && entry.path().is_dir()
            {
                tracing::info!(dir = %entry.path().display(), "deleting the log of a partition reassigned away while this node was down");
                remove_partition_dir(&entry.path());
            }
        }
    }

    /// Every hosted partition.
    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// One retention pass over every partition, with each topic's `retention.ms`,
    /// `retention.bytes` and `cleanup.policy` (compact-only topics keep old segments).
    pub fn apply_retention(&self, image: &MetadataImage) {
        for p in self.all() {
            let Some(topic) = image.topic(&p.tp.topic) else {
                continue;
            };
            let get = |key: &str| {
                topic
                    .configs
                    .get(key)
                    .cloned()
                    .or_else(|| self.config.topic_default(key))
            };
            let deletes = get("cleanup.policy").is_none_or(|policy| policy.split(',').any(|x| x.trim() == "delete"));
            let (ms, bytes) = if deletes {
                let parse = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
                (parse("retention.ms"), parse("retention.bytes"))
            } else {
                (-1, -1)
            };
            match p.apply_retention(ms, bytes) {
                Ok(outcome) if outcome.deleted_segments > 0 => {
                    self.metrics
                        .retention_segments_deleted
                        .inc_by(outcome.deleted_segments as u64);
                    self.metrics.retention_bytes_deleted.inc_by(outcome.deleted_bytes);
                    tracing::info!(
                        partition = %p.tp,
                        segments = outcome.deleted_segments,
                        bytes = outcome.deleted_bytes,
                        log_start_offset = outcome.log_start_offset,
                        "retention deleted segments"
                    )
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(partition = %p.tp, error = %e, "retention pass failed"),
            }
        }
    }

    /// One cleaning round over every partition of a compacted topic (Kafka's LogCleaner).
    pub fn clean_compacted(&self, image: &MetadataImage) {
        for p in self.all() {
            let Some(topic) = image.topic(&p.tp.topic) else {
                continue;
            };
            let Some(config) = self.config.topic_cleaner_config(&topic.configs) else {
                continue;
            };
            // Several passes when the key map cannot hold every key at once.
            for _ in 0..16 {
                match p.clean(&config) {
                    Ok(Some(stats)) => {
                        self.metrics.cleaner_passes.inc();
                        self.metrics.cleaner_bytes_read.inc_by(stats.bytes_read);
                        self.metrics.cleaner_bytes_written.inc_by(stats.bytes_written);
                        self.metrics.cleaner_records_removed.inc_by(stats.records_removed);
                        tracing::info!(
                            partition = %p.tp,
                            read = stats.bytes_read,
                            written = stats.bytes_written,
                            removed = stats.records_removed,
                            "compacted"
                        );
                        if stats.passes_needed <= 1 {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(partition = %p.tp, error = %e, "cleaning failed");
                        break;
                    }
                }
            }
        }
    }

    /// Forgets, in every partition, producers idle for `producer.id.expiration.ms`.
    pub async fn remove_expired_producers(&self, expiration_ms: i64) {
        for p in self.all() {
            match p.remove_expired_producers(expiration_ms).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(partition = %p.tp, producers = n, "expired producer ids"),
                Err(e) => tracing::warn!(partition = %p.tp, error = %e, "expiring producer ids"),
            }
        }
    }

    /// The checkpointed high watermarks not taken by a partition at start are forgotten:
    /// a partition opened later (a reassignment) starts at its log start.
    pub fn forget_high_watermark_hints(&self) {
        self.hw_hints.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Writes the high-watermark checkpoint of a cluster node (`hw_checkpoint.rs`): every
    /// hosted partition's high watermark, when any moved since the last one. Blocking.
    pub fn checkpoint_high_watermarks(&self) {
        // Not while the log directory is offline: the write would fail (a full disk) at every
        // interval, and the file is a hint; the next one after the directory is back writes it.
        if !self.config.cluster_mode() || self.log_dir.is_offline() {
            return;
        }
        let mut entries: Vec<(TopicPartition, Uuid, i64)> = self
            .all()
            .iter()
            .map(|p| (p.tp.clone(), p.topic_id, p.high_watermark()))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut written = self.hw_written.lock().unwrap_or_else(|p| p.into_inner());
        if *written == entries {
            return;
        }
        match hw_checkpoint::write(&self.config.data_dir, &entries) {
            Ok(()) => {
                *written = entries;
                if flip(&self.hw_checkpoint_failing, false) {
                    tracing::info!("the high-watermark checkpoint is written again");
                }
            }
            // Once per run of failures (a full disk fails it at every interval).
            Err(e) if flip(&self.hw_checkpoint_failing, true) => {
                tracing::warn!(error = %e, "writing the high-watermark checkpoint failed; retried every interval")
            }
            Err(e) => tracing::debug!(error = %e, "writing the high-watermark checkpoint"),
        }
    }

    /// Closes every partition (flush, index and checkpoint writes) for a clean shutdown.
    /// Whether every partition closed cleanly (flushed, its clean-shutdown marker written).
    pub fn close_all(&self) -> bool {
        // No apply after this one: an apply in progress finishes first (it holds the lock).
        let _applying = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        self.stopped.store(true, Ordering::Release);
        self.fetchers.stop();
        self.progressed.notify_all();
        self.checkpoint_high_watermarks();
        let all: Vec<Arc<Partition>> = self
            .partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut clean = true;
        for p in all {
            if let Err(e) = p.close() {
                tracing::error!(partition = %p.tp, error = %e, "closing partition");
                clean = false;
            }
        }
        clean
    }
}

/// Deletes a partition directory the way Kafka does: rename it aside first (so a crash never
/// leaves a half-deleted log under the live name), then remove it.
fn remove_partition_dir(dir: &Path) {
    let aside = if dir.to_string_lossy().ends_with("-delete") {
        dir.to_path_buf()
    } else {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        dir.with_file_name(format!("{name}.{}-delete", Uuid::new_v4().simple()))
    };
    if aside != dir
        && let Err(e) = std::fs::rename(dir, &aside)
    {
        tracing::warn!(dir = %dir.display(), error = %e, "renaming a deleted partition aside");
        return;
    }
    if let Err(e) = std::fs::remove_dir_all(&aside) {
        tracing::warn!(dir = %aside.display(), error = %e, "removing a deleted partition");
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::Controller;

    pub(crate) fn setup(dir: &Path) -> (Arc<Controller>, Arc<ReplicaManager>) {
        let config = Arc::new(BrokerConfig {
            data_dir: dir.to_path_buf(),
            ..BrokerConfig::default()
        });
        let controller =
            Arc::new(Controller::open(dir, crate::cluster::BrokerInfo::new(1, "localhost", 9092)).unwrap());
        let replicas = Arc::new(ReplicaManager::new(config));
        replicas.start_applier(controller.subscribe()).unwrap();
        (controller, replicas)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_replica_manager_applies_every_published_image_by_itself() {
        // Issue 11's seam: whoever commits a change, the replica manager's thread applies it,
        // as it will apply what a quorum commits.
        let dir = tempfile::TempDir::new().unwrap();
        let (controller, replicas) = setup(dir.path());
        controller.create_topic("t", 3, 1, BTreeMap::new()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (0..3).any(|p| replicas.get("t", p).is_none()) {
            assert!(std::time::Instant::now() < deadline, "the partitions were never opened");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // catch_up waits for a given image; deleting the topic removes its files.
        let id = controller.image().topic("t").unwrap().id;
        controller.delete_topic(id).unwrap();
        replicas.catch_up(&controller.image()).unwrap();
        assert!(replicas.get("t", 0).is_none());
        assert!(!dir.path().join("t-0").exists());
    }

    /// A request waiting for an image must not hold back the runtime worker it runs on: with a
    /// single worker, the task that commits the image is queued behind the waiter, and a
    /// blocked worker would leave it there until the wait gave up (60 s, an error).
    #[test]
    fn a_wait_for_an_image_leaves_the_runtime_worker_to_other_tasks() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let dir = tempfile::TempDir::new().unwrap();
            let (controller, replicas) = setup(dir.path());
            let mut next = (*controller.image()).clone();
            next.offset += 1;
            let waiter = tokio::spawn(async move {
                tokio::spawn(async move { controller.create_topic("t", 1, 1, BTreeMap::new()).unwrap() });
                replicas.catch_up(&next).map(|()| replicas.get("t", 0).is_some())
            });
            assert!(matches!(waiter.await.unwrap(), Ok(true)), "the image was never applied");
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn catch_up_reports_the_storage_error_of_its_image() {
        let dir = tempfile::TempDir::new().unwrap();
        let (controller, replicas) = setup(dir.path());
        // A file where the partition's directory must go: the partition cannot open.
        std::fs::write(dir.path().join("blocked-0"), b"").unwrap();
        controller.create_topic("blocked", 1, 1, BTreeMap::new()).unwrap();
        let error = replicas.catch_up(&controller.image()).unwrap_err();
        assert!(matches!(error, Error::Storage { .. }), "{error}");
        assert!(replicas.topic_is_offline("blocked", 1));
        // A later image that opens fine is not blamed for it.
        controller.create_topic("fine", 1, 1, BTreeMap::new()).unwrap();
        replicas.catch_up(&controller.image()).unwrap();
        // After close_all nothing more is applied, and waiting says so instead of hanging.
        replicas.close_all();
        controller.create_topic("late", 1, 1, BTreeMap::new()).unwrap();
        assert!(replicas.catch_up(&controller.image()).is_err());
        assert!(replicas.get("late", 0).is_none());
    }
}
