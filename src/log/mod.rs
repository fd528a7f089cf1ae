//! One partition's durable log: segments of record batches stored as bytes, with Kafka's
//! on-disk layout (`<dir>/<20-digit base offset>.log`, `.index`, `.timeindex`), recovery of a
//! torn tail at open, and the leader-epoch checkpoint.
//!
//! This file holds `Log` and its core: append, read, roll, flush, close. The rest of `Log` is
//! split by concern: `recovery.rs` (`Log::open`: loading and recovering segments, checkpoints,
//! producer-state replay), `retention.rs` (retention passes, DeleteRecords, segment deletion),
//! `timestamps.rs` (ListOffsets by timestamp and max timestamp), `cleaner.rs` (compaction),
//! `follower.rs` (a follower's append and truncations), `snapshot.rs` (`LogSnapshot`: what
//! readers read without the log) and `config.rs` (`LogConfig`).
//!
//! The log knows nothing about the network or about who calls it; the caller (replica::Partition)
//! serializes appends and decides when data is visible (high watermark). Readers never take
//! the caller's lock: they read a `LogSnapshot` from the `LogReader` the log publishes to.
//!
//! Durability protocol: `append` writes to the page cache; `flush_handle` (cheap, under the
//! caller's lock) returns the files to fsync and the offset they cover; `FlushHandle::sync` runs
//! outside the lock (it blocks: run it on a blocking thread); `mark_flushed` records the result,
//! and writes the recovery point checkpoint. Many appends share one fsync (group commit).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod batch;
pub(crate) mod checkpoint;
/// Log compaction: `Log::clean` (and `prepare_clean` / `commit_clean`) live in cleaner.rs.
pub mod cleaner;
mod config;
/// A follower's log operations: `append_as_follower`, `truncate_to`,
/// `truncate_fully_and_start_at` live in follower.rs.
mod follower;
mod index;
pub mod producer_state;
mod recovery;
mod retention;
mod segment;
mod snapshot;
#[cfg(test)]
mod test_support;
mod timestamps;

use std::fs::File;
use std::io::IoSlice;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

pub use batch::{ValidBatch, validate_batches};
pub use checkpoint::EpochEntry;
pub use config::{LogConfig, TimestampType};
pub use retention::RetentionOutcome;
pub use segment::{FileRegion, Writeback};
pub use snapshot::{LogReader, LogSnapshot};

use batch::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use checkpoint::{CLEAN_SHUTDOWN_FILE, LeaderEpochCache};
use producer_state::{AbortedTxn, Marker, Origin, ProducerBatch, ProducerState, Verdict};
use segment::Segment;

use crate::error::{Error, Result};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset given to the first record of the first batch.
    pub base_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    /// The broker's time stamped on the batches for LogAppendTime topics, else -1.
    pub log_append_time_ms: i64,
    /// The batch was a producer's retry of one already in the log: nothing was appended and
    /// the offsets are the original batch's.
    pub duplicate: bool,
}

/// Files that must be fsynced for everything up to `flushed_offset` (exclusive) to be durable.
pub struct FlushHandle {
    files: Vec<(Arc<File>, PathBuf)>,
    /// The partition directory, when new segment names must be made durable, and the data
    /// directory after it when the partition directory itself is new: each opened only for
    /// that fsync, so a partition holds no descriptor on its directory.
    dirs: Vec<PathBuf>,
    /// The log end offset when the handle was taken.
    pub flushed_offset: i64,
    /// `Log::truncations` when the handle was taken (see `Log::still_covers`).
    truncations: u64,
}

impl FlushHandle {
    /// fsyncs the files (blocking). Errors name the file.
    pub fn sync(&self) -> Result<()> {
        for (file, path) in &self.files {
            file.sync_data()
                .map_err(|e| crate::error::Error::storage("fsync", path, e))?;
        }
        for dir in &self.dirs {
            checkpoint::sync_dir(dir)?;
        }
        Ok(())
    }
}

/// The end of a log's active segment at some moment (`Log::write_position`).
#[derive(Clone, Copy, Debug)]
pub struct WritePosition {
    segment_base_offset: i64,
    size: u64,
}

/// A partition's log. Not `Sync`-shared by itself: the caller wraps it in a lock.
pub struct Log {
    dir: PathBuf,
    /// The partition directory, fsynced with the segments when a roll created a file in it.
    config: LogConfig,
    /// Older segments by increasing base offset, each continuing where the previous ends.
    segments: Vec<Segment>,
    /// The segment appends go to; it continues the last of `segments`.
    active: Segment,
    /// Everything below this offset is known to be fsynced; recovery validates from the segment
    /// holding it onward.
    recovery_point: i64,
    /// When this process last wrote the recovery-point checkpoint.
    recovery_point_written: Option<std::time::Instant>,
    /// The first offset a client may read: the first segment's base offset, or above it after
    /// DeleteRecords (Kafka's `logStartOffset`); checkpointed in `log-start-offset-checkpoint`.
    log_start_offset: i64,
    epochs: LeaderEpochCache,
    /// Files of deleted segments, renamed `*.deleted`, and when they may be removed
    /// (`file.delete.delay.ms`); leftovers after a restart are removed at open.
    pending_deletes: Vec<(PathBuf, i64)>,
    /// Retention moved the log start but could not checkpoint it (a full disk): each pass tries
    /// again (a crash meanwhile is harmless: open raises the start to the first segment).
    log_start_unsaved: bool,
    /// Producer ids, epochs, sequences and open transactions (producer_state.rs).
    producers: ProducerState,
    /// Truncations since the log was opened (follower.rs): a flush handle or a clean plan
    /// taken before the latest one describes offsets that were cut, and maybe written again.
    truncations: u64,
    /// Open made the partition directory: its entry in the data directory is not durable
    /// until a flush syncs the data directory too (the first one that covers data does).
    new_directory: bool,
    /// Where readers take their snapshots (snapshot.rs): republished at every structural
    /// change, the active end and transaction state published after every write.
    reader: Arc<LogReader>,
}

/// Flush the in-memory index entries to their files once this many are pending, so that a
/// log nobody flushes still keeps its index files close to complete.
const INDEX_ENTRIES_PENDING_MAX: usize = 1024;

impl Log {
    /// Appends validated batches, assigning offsets from the log end, stamping
    /// `partitionLeaderEpoch = leader_epoch` and for LogAppendTime `maxTimestamp = now_ms`
    /// (recomputing the CRC only then). Rolls segments by size, age and index fullness. Records
    /// a new leader epoch in the leader-epoch checkpoint. Writes to the page cache only.
    ///
    /// The batches of one call are written with one `writev` per segment they land in (the
    /// stamped headers and the producer's bodies, not copied). When a write fails the active
    /// segment is cut back to its previous end; batches already written to a segment rolled
    /// earlier in the same call stay (the error tells the caller to take the log offline).
    pub fn append(&mut self, batches: Vec<ValidBatch>, leader_epoch: i32, now_ms: i64) -> Result<AppendInfo> {
        self.append_from(batches, leader_epoch, now_ms, Origin::Client)
    }

    /// `append` for a given origin: a client's batches are checked against the producer state
    /// (sequences, epochs, transactions); a retried batch is answered with its original offsets
    /// and not written again. The coordinator's batches are checked for epochs only.
    pub fn append_from(
        &mut self,
        batches: Vec<ValidBatch>,
        leader_epoch: i32,
        now_ms: i64,
        origin: Origin,
    ) -> Result<AppendInfo> {
        if batches.is_empty() {
            return Err(Error::CorruptBatch("append of no record batch".into()));
        }
        let log_append_time = (self.config.timestamp_type == TimestampType::LogAppendTime).then_some(now_ms);
        let base_offset = self.log_end_offset();
        let mut stamped = Vec::with_capacity(batches.len());
        let mut headers = Vec::with_capacity(batches.len());
        let mut producer_batches = Vec::with_capacity(batches.len());
        let mut next_offset = base_offset;
        for b in &batches {
            let header_bytes = batch::stamped_header(b, next_offset, leader_epoch, log_append_time);
            let header = BatchHeader::parse(&header_bytes)?;
            let marker = if b.is_control() {
                // Kafka's LogValidator: clients may not write control records (markers come
                // from the transaction coordinator only).
                if origin == Origin::Client {
                    return Err(Error::InvalidRecord("clients may not write control batches".into()));
                }
                producer_state::read_marker(b.bytes())
            } else {
                None
            };
            producer_batches.push(ProducerBatch::from_header(&header, marker));
            headers.push(header);
            stamped.push(header_bytes);
            next_offset += b.offset_count();
        }
        if let Verdict::Duplicate {
            first_offset,
            last_offset,
        } = self.producers.check(&producer_batches, origin)?
        {
            return Ok(AppendInfo {
                base_offset: first_offset,
                last_offset,
                log_append_time_ms: -1,
                duplicate: true,
            });
        }
        // As Kafka's UnifiedLog.append: the epoch is recorded before the data it covers.
        self.epochs.assign(leader_epoch, base_offset)?;
        // The stamped headers and the producer's bodies, not copied.
        let parts: Vec<[&[u8]; 2]> = batches
            .iter()
            .zip(&stamped)
            .map(|(b, header)| [&header[..], &b.bytes()[HEADER_LEN..]])
            .collect();
        self.write_batches(&headers, &parts, &producer_batches, now_ms)?;
        debug_assert_eq!(self.log_end_offset(), next_offset);
        Ok(AppendInfo {
            base_offset,
            last_offset: next_offset - 1,
            log_append_time_ms: log_append_time.unwrap_or(-1),
            duplicate: false,
        })
    }

    /// Writes batches at the log end, each stored as the bytes of its `parts` (header, body),
    /// with one `writev` per segment they land in; rolls segments by size, age and index
    /// fullness (Kafka's `LogSegment.shouldRoll`) and records the producers of what was
    /// written. `headers` and `producer_batches` describe the batches as stored, in order and
    /// with offsets increasing from the log end: contiguous, except in a compacted log's
    /// follower copy of a cleaned leader log, where a batch may start above the offset after
    /// the one before it (or above the log end). The log end then moves up to the batch first
    /// (`Segment::skip_to`, as the cleaner's output does), so the removed offsets lie in the
    /// segment before it; a roll there starts the new segment at the batch (Kafka's roll at
    /// the batch's first offset), and a batch too far above the active segment's base for its
    /// 32-bit relative offsets rolls too, over empty segments of at most i32::MAX offsets
    /// when the gap is wider.
    ///
    /// Producer state follows the batches written: it is applied before a roll (whose snapshot
    /// must hold everything below the new segment) and after the last write. When a write
    /// fails the active segment is cut back to its previous end; batches already written to a
    /// segment rolled earlier in the same call stay.
    fn write_batches(
        &mut self,
        headers: &[BatchHeader],
        parts: &[[&[u8]; 2]],
        producer_batches: &[ProducerBatch],
        now_ms: i64,
    ) -> Result<()> {
        debug_assert!(headers.len() == parts.len() && parts.len() == producer_batches.len());
        let mut applied = 0;
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * parts.len());
        let mut run_start = self.active.tail();
        for (i, (header, [head, body])) in headers.iter().zip(parts).enumerate() {
            loop {
                // An empty segment takes any batch (`should_roll`), unless it is too far.
                let too_far = header.last_offset() - self.active.base_offset > i64::from(i32::MAX);
                if !too_far
                    && !self
                        .active
                        .should_roll(header.size, header.last_offset(), now_ms, &self.config)
                {
                    break;
                }
                self.write_run(&mut slices, run_start)?;
                self.apply_producers(&producer_batches[applied..i])?;
                applied = i;
                let span_end = self.active.base_offset + i64::from(i32::MAX);
                let roll_at = header.base_offset.min(span_end).max(self.active.next_offset);
                self.active.skip_to(roll_at);
                self.roll()?;
                run_start = self.active.tail();
            }
            self.active.skip_to(header.base_offset);
            self.active.account(header, &self.config);
            self.active.note_append_time(now_ms);
            slices.push(IoSlice::new(head));
            slices.push(IoSlice::new(body));
        }
        self.write_run(&mut slices, run_start)?;
        self.apply_producers(&producer_batches[applied..])?;
        if self.active.pending_index_entries() >= INDEX_ENTRIES_PENDING_MAX {
            // The batches are written: an index write failing (a full disk) must not refuse
            // them. The entries stay pending for the next write or flush (`mark_flushed`).
            if let Err(e) = self.active.persist_indexes() {
                tracing::debug!(dir = %self.dir.display(), error = %e, "index entries not written yet");
            }
        }
        Ok(())
    }

    /// Records written batches in the producer state; aborted transactions they complete go to
    /// the active segment's `.txnindex`.
    fn apply_producers(&mut self, batches: &[ProducerBatch]) -> Result<()> {
        if batches.iter().all(|b| b.producer_id == producer_state::NO_PRODUCER_ID) {
            return Ok(());
        }
        let aborted = self.producers.apply(batches);
        for txn in &aborted {
            producer_state::append_txn_index(&self.dir, self.active.base_offset, txn)?;
        }
        // The aborted list before the first unstable offset: a reader that sees a transaction
        // ended sees its abort too.
        let txns = self.reader.txns();
        txns.extend_aborted(&aborted);
        txns.set_first_unstable_offset(self.producers.first_unstable_offset());
        Ok(())
    }

    /// Where readers take snapshots of this log (the caller keeps it to read without the log).
    pub fn reader(&self) -> Arc<LogReader> {
        Arc::clone(&self.reader)
    }

    /// The current snapshot for reading.
    pub fn snapshot(&self) -> Arc<LogSnapshot> {
        self.reader.snapshot()
    }

    /// Publishes the segment list and log start as they are now (after a structural change).
    fn publish_snapshot(&self) {
        let sealed = self.segments.iter().map(Segment::published).collect();
        self.reader.publish(sealed, self.active.shared(), self.log_start_offset);
    }

    /// Publishes the whole transaction state (after it changed other than by an append).
    fn publish_txns(&self) {
        let txns = self.reader.txns();
        txns.replace_aborted(&self.producers.aborted_between(i64::MIN, i64::MAX));
        txns.set_first_unstable_offset(self.producers.first_unstable_offset());
    }

    /// Appends a transaction marker for `producer_id` (Kafka's WriteTxnMarkers at the
    /// partition): a control batch that ends the producer's transaction here. A marker with an
    /// epoch older than the producer's is refused (INVALID_PRODUCER_EPOCH).
    ///
    /// `transaction_version` is the transaction's (KIP-1228). Under version 2 the coordinator
    /// bumps the epoch before it writes the markers, so a marker must be newer than the epoch
    /// the producer has here (Kafka's `checkProducerEpoch` for TV2): one of the producer's
    /// current epoch would end a newer transaction of that epoch, and is refused with
    /// INVALID_PRODUCER_EPOCH. Unlike Kafka, a marker of the current epoch while the producer
    /// has no transaction open here is taken as a retry of one already written (its answer
    /// lost, or its wait for the in-sync replicas failed): nothing is appended, and the answer
    /// waits for the log as it is, so the coordinator's retry ends the transaction instead of
    /// failing it forever. Versions 0 and 1 accept the producer's epoch or newer.
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
        transaction_version: i8,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        if transaction_version >= 2
            && let Some(current) = self.producers.producers().get(&producer_id)
            && producer_epoch <= current.epoch
        {
            // A retry only from a coordinator not older than the last marker's: a deposed one
            // is refused, as before.
            if producer_epoch == current.epoch
                && current.current_txn_first_offset.is_none()
                && marker.coordinator_epoch >= current.coordinator_epoch
            {
                let last_offset = self.log_end_offset() - 1;
                return Ok(AppendInfo {
                    base_offset: last_offset,
                    last_offset,
                    log_append_time_ms: -1,
                    duplicate: true,
                });
            }
            return Err(Error::InvalidProducerEpoch {
                producer_id,
                epoch: producer_epoch,
                current: current.epoch,
            });
        }
        let bytes = producer_state::encode_marker(producer_id, producer_epoch, marker, now_ms);
        let batches = validate_batches(&bytes, usize::MAX)?;
        self.append_from(batches, leader_epoch, now_ms, Origin::Coordinator)
    }

    /// The first offset of the oldest open transaction (the LSO is this or the high
    /// watermark, whichever is lower).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.producers.first_unstable_offset()
    }

    /// Aborted transactions overlapping `[from, upper)`, for a read_committed fetch.
    pub fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.producers.aborted_between(from, upper)
    }

    /// Each producer's last data batch, by its last offset (the cleaner keeps those).
    pub(crate) fn last_data_offsets(&self) -> std::collections::HashMap<i64, i64> {
        self.producers
            .producers()
            .iter()
            .filter(|(_, e)| e.last_offset() >= 0)
            .map(|(&id, e)| (id, e.last_offset()))
            .collect()
    }

    /// The producer state (DescribeProducers).
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// Forgets producers idle for `expiration_ms` (`producer.id.expiration.ms`).
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.remove_expired(now_ms, expiration_ms)
    }

    /// Writes a producer snapshot at the log end and removes those below the log start (the
    /// newest is always kept).
    fn snapshot_producers(&mut self) -> Result<()> {
        let end = self.log_end_offset();
        producer_state::write_snapshot(&self.dir, end, &self.producers)?;
        let snapshots = producer_state::list_snapshots(&self.dir)?;
        for &offset in snapshots.iter().rev().skip(1) {
            if offset < self.log_start_offset {
                producer_state::delete_snapshot(&self.dir, offset)?;
            }
        }
        Ok(())
    }

    /// Writes the batches accounted to the active segment since `run_start`, or undoes that
    /// accounting when the write fails.
    fn write_run(&mut self, slices: &mut Vec<IoSlice<'_>>, run_start: segment::Tail) -> Result<()> {
        if slices.is_empty() {
            return Ok(());
        }
        let written = self.active.write_all(slices, run_start.size());
        slices.clear();
        if written.is_err() {
            self.active.restore(run_start);
        }
        written
    }

    /// Seals the active segment and starts a new one at the log end. Everything accounted to
    /// the active segment must be written.
    fn roll(&mut self) -> Result<()> {
        self.active.seal()?;
        // Its end as sealed: a follower's append may have moved it up over a gap since the
        // last write published it.
        self.active.publish();
        // Recovery replays from the newest snapshot: one per segment keeps the replay to the
        // active segment (Kafka snapshots at every roll too).
        self.snapshot_producers()?;
        let next = Segment::create(&self.dir, self.active.next_offset, true)?;
        let sealed = std::mem::replace(&mut self.active, next);
        self.segments.push(sealed);
        self.publish_snapshot();
        Ok(())
    }

    fn all_segments(&self) -> impl DoubleEndedIterator<Item = &Segment> {
        self.segments.iter().chain(std::iter::once(&self.active))
    }

    /// The segment at position `i` of the segment list (the active one last).
    fn segment_at(&self, i: usize) -> Option<&Segment> {
        if i == self.segments.len() {
            Some(&self.active)
        } else {
            self.segments.get(i)
        }
    }

    /// Position in the segment list of the segment with the greatest base offset at or below
    /// `offset`.
    fn floor_segment(&self, offset: i64) -> usize {
        if offset >= self.active.base_offset {
            return self.segments.len();
        }
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }

    /// The files to fsync to make everything appended so far durable.
    pub fn flush_handle(&self) -> FlushHandle {
        let mut files = Vec::new();
        let mut new_names = false;
        // Segments hold increasing offsets: only the last few can hold unflushed data.
        let unflushed = self
            .all_segments()
            .rev()
            .take_while(|s| s.next_offset > self.recovery_point || s.base_offset >= self.recovery_point);
        for segment in unflushed {
            if segment.next_offset > self.recovery_point {
                files.push(segment.log_file());
            }
            // A segment created at or after the recovery point has a directory entry no flush
            // has covered yet (a flush that covered data in it synced the directory). Below the
            // recovery point its name is durable: the active segment is not synced again at
            // every flush once its first data is.
            new_names |= segment.created_by_roll && segment.base_offset >= self.recovery_point;
        }
        files.reverse();
        let mut dirs = Vec::new();
        if new_names {
            dirs.push(self.dir.clone());
        }
        if self.new_directory
            && let Some(parent) = self.dir.parent()
        {
            dirs.push(parent.to_path_buf());
        }
        FlushHandle {
            files,
            dirs,
            flushed_offset: self.log_end_offset(),
            truncations: self.truncations,
        }
    }

    /// Whether everything `handle` names is still this log: after a truncation since it was
    /// taken, its fsync may have run before the offsets it names were written again, so it
    /// proves nothing about them (the caller neither moves its durable offset nor calls
    /// `mark_flushed` with it; the next handle covers the log as it is).
    pub fn still_covers(&self, handle: &FlushHandle) -> bool {
        handle.truncations == self.truncations
    }

    /// Records that everything below `offset` is durable (after `FlushHandle::sync`), and
    /// checkpoints the recovery point.
    pub fn mark_flushed(&mut self, offset: i64) -> Result<()> {
        let offset = offset.min(self.log_end_offset());
        if offset <= self.recovery_point {
            return Ok(());
        }
        // The handle that got this far synced the data directory if the partition's was new.
        self.new_directory = false;
        self.recovery_point = offset;
        self.active.persist_indexes()?;
        // Checkpointed every `log.flush.offset.checkpoint.interval.ms` (Kafka's LogManager
        // does the same), not at every fsync: each write is a new file and a rename.
        let due = self
            .recovery_point_written
            .is_none_or(|at| at.elapsed().as_millis() >= u128::from(self.config.recovery_point_checkpoint_ms));
        if due {
            checkpoint::write_recovery_point(&self.dir, offset, false)?;
            self.recovery_point_written = Some(std::time::Instant::now());
        }
        Ok(())
    }

    /// The offset below which everything is known to be fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// Whole batches from the one containing `offset` onward, ending before `max_offset`
    /// (exclusive; the caller passes its high watermark), at most `max_bytes` long except that
    /// the first batch is returned whole when `min_one_batch` (KIP-74). Empty when
    /// `offset == max_offset` or `offset == log end`. `OffsetOutOfRange` when `offset` is below
    /// the log start or above the log end.
    ///
    /// The bytes come from one segment, read with one `pread` after locating the first and the
    /// last batch through the offset index and a few header reads. The buffer is sized from
    /// those file positions, never from `max_bytes` alone: a caller's limit (a client's claim)
    /// costs no memory beyond what the segment holds below `max_offset`, and the KIP-74 batch
    /// beyond `max_bytes` is bounded by its own length as stored. Served by the current
    /// snapshot (`LogSnapshot::read`), as readers without the log do.
    pub fn read(&self, offset: i64, max_offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<Bytes> {
        self.snapshot().read(offset, max_offset, max_bytes, min_one_batch)
    }

    /// How many bytes a `read(offset, max_offset, ..)` would find, from file positions alone
    /// (Kafka's `DelayedFetch.tryComplete`, which a fetch waiting for `min_bytes` asks at each
    /// high watermark move instead of reading the records again): the bytes between the batch
    /// holding `offset` and the one holding `max_offset` (or the segment end) when both are in
    /// one segment. Errors as `read`.
    pub fn readable_bytes(&self, offset: i64, max_offset: i64) -> Result<ReadableBytes> {
        self.snapshot().readable_bytes(offset, max_offset)
    }

    /// The first offset a client may read (Kafka's log start offset); below it reads are
    /// `OffsetOutOfRange`. The first batch may start below it (after DeleteRecords inside a
    /// batch): it is returned whole, and clients skip the records before their fetch offset.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// Total bytes of the segments' batches (DescribeLogDirs, `retention.bytes`).
    pub fn size_bytes(&self) -> u64 {
        self.all_segments().map(|s| s.size).sum()
    }

    /// Applies changed topic settings (segment size and age, index interval and size, max
    /// message bytes, timestamp type); they take effect from the next append or roll.
    pub fn update_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active.next_offset
    }

    /// Whether `batches`, appended now, would all land in the active segment without a roll
    /// (conservative: each batch counted as one entry in both indexes).
    pub fn takes_without_roll(&self, batches: &[ValidBatch], now_ms: i64) -> bool {
        let bytes: u64 = batches.iter().map(|b| b.bytes().len() as u64).sum();
        let offsets: i64 = batches.iter().map(ValidBatch::offset_count).sum();
        self.active.takes_without_roll(
            bytes,
            batches.len(),
            self.log_end_offset().saturating_add(offsets),
            now_ms,
            &self.config,
        )
    }

    /// Where appends go now: the active segment and its size, for `writeback_since`.
    pub fn write_position(&self) -> WritePosition {
        WritePosition {
            segment_base_offset: self.active.base_offset,
            size: self.active.size,
        }
    }

    /// The bytes appended to the active segment since `mark` (from its start if it rolled
    /// since; a rolled segment's tail is left to the fsync), for early write-back.
    pub fn writeback_since(&self, mark: WritePosition) -> Option<segment::Writeback> {
        let from = if mark.segment_base_offset == self.active.base_offset {
            mark.size
        } else {
            0
        };
        self.active.writeback_from(from)
    }

    /// The latest leader epoch in the leader-epoch checkpoint (-1 when none).
    pub fn latest_epoch(&self) -> i32 {
        self.epochs.latest_epoch()
    }

    /// The largest epoch at or below `epoch` this log knows and that epoch's end offset, as
    /// OffsetForLeaderEpoch answers it (see `LeaderEpochCache::end_offset_for`); None when
    /// there is no such epoch.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// The leader-epoch checkpoint's entries (epoch and its first offset), oldest first.
    pub fn leader_epochs(&self) -> &[EpochEntry] {
        self.epochs.entries()
    }

    /// Flushes, writes indexes and checkpoints, and marks the log cleanly closed so the next open
    /// skips recovery.
    pub fn close(mut self) -> Result<()> {
        self.active.seal()?;
        for segment in self.segments.iter_mut().chain(std::iter::once(&mut self.active)) {
            segment.persist_indexes()?;
            segment.sync_indexes()?;
        }
        self.flush_handle().sync()?;
        self.snapshot_producers()?;
        let log_end_offset = self.log_end_offset();
        self.recovery_point = log_end_offset;
        checkpoint::write_recovery_point(&self.dir, log_end_offset, true)?;
        checkpoint::write_atomically(&self.dir.join(CLEAN_SHUTDOWN_FILE), b"", true)
    }

    /// Internal invariants, checked in debug builds.
    fn debug_check(&self) {
        let mut expected = self.segments.first().map_or(self.active.base_offset, |s| s.base_offset);
        debug_assert!(expected <= self.log_start_offset, "log start below the first segment");
        debug_assert!(
            self.log_start_offset <= self.log_end_offset(),
            "log start past the log end"
        );
        for segment in self.all_segments() {
            // Offset gaps (a compacted log's) lie inside segments: each spans up to the next.
            debug_assert_eq!(segment.base_offset, expected, "segments contiguous");
            debug_assert!(
                segment.next_offset - segment.base_offset <= i64::from(i32::MAX) + 1,
                "a segment spans what its 32-bit relative offsets reach"
            );
            expected = segment.next_offset;
        }
        debug_assert!(self.recovery_point <= self.log_end_offset());
        // Readers see the segment list and log start the writer has.
        let snapshot = self.snapshot();
        let published: Vec<(u64, i64, i64)> = snapshot
            .segments()
            .all()
            .map(|s| (s.id(), s.base_offset, s.next_offset))
            .collect();
        let own: Vec<(u64, i64, i64)> = self
            .all_segments()
            .map(|s| (s.shared().id, s.base_offset, s.next_offset))
            .collect();
        debug_assert_eq!(published, own, "the published snapshot follows the segments");
        debug_assert_eq!(snapshot.log_start_offset(), self.log_start_offset);
    }
}

/// What a read would find, judged from file positions (`Log::readable_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadableBytes {
    /// This many bytes of whole batches, before any byte limit.
    Within(u64),
    /// The read starts in an older segment than its end: a fetch waiting for more answers at
    /// once (Kafka's `DelayedFetch` case F), as a read returns one segment's tail at most.
    OlderSegment,
}

/// The length of the longest prefix of `bytes` made of whole batches (a read cut by
/// `max_bytes` ends inside a batch).
pub(crate) fn whole_batches_len(bytes: &[u8]) -> usize {
    let mut pos = 0;
    while bytes.len() - pos >= LOG_OVERHEAD {
        let length = batch::be_i32(bytes, pos + 8);
        let Some(size) = usize::try_from(length).ok().map(|l| l + LOG_OVERHEAD) else {
            break;
        };
        if size > bytes.len() - pos {
            break;
        }
        pos += size;
    }
    pos
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::log::batch::tests::encode_batch;
    use crate::log::test_support::*;
    use std::path::Path;
    use tempfile::TempDir;

    /// Appends allocate nothing past the file's length (no `fallocate` ahead of them, which
    /// blocked on a busy ext4 journal); blocks that an older build reserved past the end of the
    /// active segment are given back at the roll, and the log reopens with exactly what was
    /// written.
    #[test]
    fn appends_reserve_no_blocks_ahead_and_a_roll_gives_back_an_older_reservation() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            segment_bytes: 300_000,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
        let first = dir.path().join(segment::file_name(0, "log"));
        let allocated = |path: &Path| {
            let meta = std::fs::metadata(path).unwrap();
            (meta.len(), meta.blocks() * 512)
        };
        let mut i = 0;
        while log.size_bytes() < 200_000 {
            log.append(batch(10, i), 0, NOW).unwrap();
            i += 1;
        }
        let (len, blocks) = allocated(&first);
        assert_eq!(len, log.size_bytes(), "the file's length is the bytes written");
        assert!(
            blocks <= len.next_multiple_of(64 << 10),
            "{blocks} bytes allocated for {len} written"
        );
        // What a build that reserved ahead left behind: 4 MiB past the end.
        let file = std::fs::OpenOptions::new().write(true).open(&first).unwrap();
        let reserved = i64::try_from(len).unwrap();
        // SAFETY: the descriptor is open for the call.
        let done = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, reserved, 4 << 20) };
        assert_eq!(done, 0, "fallocate: {}", std::io::Error::last_os_error());
        let (len, blocks) = allocated(&first);
        assert!(blocks >= len + (4 << 20), "{blocks} bytes allocated for {len}");
        while log.segments.is_empty() {
            log.append(batch(10, i), 0, NOW).unwrap();
            i += 1;
        }
        let (len, blocks) = allocated(&first);
        assert!(
            blocks <= len.next_multiple_of(64 << 10),
            "{blocks} bytes still allocated for {len} after the roll"
        );
        let end = log.log_end_offset();
        let all = log.read(0, end, usize::MAX, true).unwrap();
        log.close().unwrap();
        let log = Log::open(dir.path(), config, NOW).unwrap();
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(log.read(0, end, usize::MAX, true).unwrap(), all);
    }

    /// `takes_without_roll` answers for the appends a caller may run off the writer thread: when
    /// it says yes, the append rolls no segment, whichever limit (size, age, index entries) is
    /// near; and it says yes for most appends, no only near a limit.
    #[test]
    fn takes_without_roll_is_true_only_for_appends_that_do_not_roll() {
        let configs = [
            LogConfig {
                segment_bytes: 3_000,
                ..LogConfig::default()
            },
            LogConfig {
                index_interval_bytes: 1,
                segment_index_bytes: 8 * 40,
                ..LogConfig::default()
            },
            LogConfig {
                segment_ms: 50,
                ..LogConfig::default()
            },
        ];
        for config in configs {
            let dir = TempDir::new().unwrap();
            let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
            let (mut yes, mut no) = (0, 0);
            for i in 0..200_i64 {
                // One to three batches of one to four records, time moving 7 ms per append.
                let now = NOW + 7 * i;
                let mut batches = batch(usize::try_from(i % 4 + 1).unwrap(), now);
                for _ in 0..i % 3 {
                    batches.extend(batch(1, now));
                }
                let takes = log.takes_without_roll(&batches, now);
                let segments = log.segments.len();
                log.append(batches, 0, now).unwrap();
                if takes {
                    assert_eq!(log.segments.len(), segments, "append {i} rolled ({config:?})");
                    yes += 1;
                } else {
                    no += 1;
                }
            }
            assert!(log.segments.len() > 3, "{config:?}: too few rolls to tell");
            assert!(yes > 2 * no, "{config:?}: {yes} yes, {no} no");
        }
    }

    #[test]
    fn append_then_read_round_trips_with_assigned_offsets() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        let first = log.append(batch(3, 10), 5, NOW).unwrap();
        assert_eq!(
            first,
            AppendInfo {
                base_offset: 0,
                last_offset: 2,
                log_append_time_ms: -1,
                duplicate: false
            }
        );
        // Two batches in one call: one write, offsets continue.
        let mut two = batch(2, 20);
        two.extend(batch(4, 30));
        let second = log.append(two, 5, NOW).unwrap();
        assert_eq!((second.base_offset, second.last_offset), (3, 8));
        assert_eq!(log.log_end_offset(), 9);

        let all = log.read(0, 9, 1 << 20, false).unwrap();
        assert_eq!(ranges(&all), vec![(0, 2), (3, 4), (5, 8)]);
        // The stored batches carry the leader epoch and stay valid (CRC untouched).
        for b in validate_batches(&all, usize::MAX).unwrap() {
            assert_eq!(batch::be_i32(b.bytes(), batch::PARTITION_LEADER_EPOCH), 5);
        }
        assert_eq!(log.read(9, 9, 1 << 20, true).unwrap().len(), 0);
        assert!(matches!(
            log.read(10, 10, 100, true),
            Err(Error::OffsetOutOfRange { asked: 10, .. })
        ));
        assert!(matches!(
            log.read(-1, 10, 100, true),
            Err(Error::OffsetOutOfRange { .. })
        ));
    }

    #[test]
    fn reading_from_the_middle_of_a_batch_returns_the_whole_batch() {
        // Kafka returns the batch holding the fetch offset; the client skips earlier records.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(batch(5, 0), 0, NOW).unwrap();
        log.append(batch(5, 0), 0, NOW).unwrap();
        assert_eq!(ranges(&log.read(3, 10, 1 << 20, false).unwrap()), vec![(0, 4), (5, 9)]);
        assert_eq!(ranges(&log.read(7, 10, 1 << 20, false).unwrap()), vec![(5, 9)]);
    }

    #[test]
    fn read_honours_max_bytes_and_min_one_batch() {
        // KIP-74: the first batch is returned whole even past max_bytes when asked to.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        for _ in 0..4 {
            log.append(batch(2, 0), 0, NOW).unwrap();
        }
        let size = log.read(0, 8, 1 << 20, false).unwrap().len() / 4;
        assert_eq!(ranges(&log.read(0, 8, 2 * size, false).unwrap()), vec![(0, 1), (2, 3)]);
        assert_eq!(
            ranges(&log.read(0, 8, 2 * size + size / 2, false).unwrap()),
            vec![(0, 1), (2, 3)]
        );
        assert_eq!(ranges(&log.read(2, 8, 10, true).unwrap()), vec![(2, 3)]);
        assert_eq!(log.read(2, 8, 10, false).unwrap().len(), 0);
        assert_eq!(ranges(&log.read(2, 8, size, false).unwrap()), vec![(2, 3)]);
    }

    #[test]
    fn read_stops_before_max_offset() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        for _ in 0..4 {
            log.append(batch(2, 0), 0, NOW).unwrap();
        }
        assert_eq!(ranges(&log.read(0, 4, 1 << 20, true).unwrap()), vec![(0, 1), (2, 3)]);
        // A batch straddling the bound is left out entirely (its last offset is not below it).
        assert_eq!(ranges(&log.read(0, 5, 1 << 20, true).unwrap()), vec![(0, 1), (2, 3)]);
        assert_eq!(log.read(4, 5, 1 << 20, true).unwrap().len(), 0);
        assert_eq!(log.read(4, 4, 1 << 20, true).unwrap().len(), 0);
    }

    #[test]
    fn readable_bytes_measures_what_a_read_would_find_without_reading_it() {
        // Kafka's DelayedFetch.tryComplete: the position difference within one segment; a
        // fetch offset on an older segment than the bound answers at once (case F).
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..40 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        assert!(segment_files(dir.path(), "log").len() > 2);
        let end = log.log_end_offset();
        let active_base = log.active.base_offset;
        // In the active segment: exactly the bytes a read with no byte limit returns.
        for from in [active_base, active_base + 1, end - 3] {
            for bound in [end, end - 3] {
                let read = log.read(from, bound, usize::MAX, false).unwrap();
                let within = u64::try_from(read.len()).unwrap();
                assert_eq!(log.readable_bytes(from, bound).unwrap(), ReadableBytes::Within(within));
            }
        }
        // In an older segment: within it when the bound is too, else OlderSegment.
        let first_end = log.segments[0].next_offset;
        let read = log.read(0, first_end - 3, usize::MAX, false).unwrap();
        assert_eq!(
            log.readable_bytes(0, first_end - 3).unwrap(),
            ReadableBytes::Within(u64::try_from(read.len()).unwrap())
        );
        assert_eq!(log.readable_bytes(0, end).unwrap(), ReadableBytes::OlderSegment);
        // Nothing to read, and the same errors as read.
        assert_eq!(log.readable_bytes(end, end).unwrap(), ReadableBytes::Within(0));
        assert_eq!(log.readable_bytes(3, 3).unwrap(), ReadableBytes::Within(0));
        assert!(matches!(
            log.readable_bytes(end + 1, end),
            Err(Error::OffsetOutOfRange { .. })
        ));
    }

    #[test]
    fn segments_roll_by_size_and_reads_walk_across_them() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..40 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        let logs = segment_files(dir.path(), "log");
        assert!(logs.len() > 3, "{logs:?}");
        for path in &logs {
            assert!(std::fs::metadata(path).unwrap().len() <= 2_000);
        }
        assert_eq!(log.log_end_offset(), 120);
        // Every offset is readable, and a consumer walking forward sees every batch once.
        let mut next = 0;
        let mut seen = Vec::new();
        while next < 120 {
            let bytes = log.read(next, 120, 1 << 20, true).unwrap();
            let got = ranges(&bytes);
            assert!(!got.is_empty(), "stuck at {next}");
            next = got.last().unwrap().1 + 1;
            seen.extend(got);
        }
        assert_eq!(seen, (0..40).map(|i| (3 * i, 3 * i + 2)).collect::<Vec<_>>());
        for offset in 0..120 {
            let got = ranges(&log.read(offset, 120, 1, true).unwrap());
            assert_eq!(got, vec![(offset / 3 * 3, offset / 3 * 3 + 2)], "offset {offset}");
        }
        // Index files hold whole entries only.
        for path in segment_files(dir.path(), "index") {
            assert_eq!(std::fs::metadata(&path).unwrap().len() % 8, 0);
        }
    }

    /// Descriptors this process holds on files under `dir` (other tests run in parallel, so
    /// only the directory's own files are counted).
    fn open_files_under(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .collect()
    }

    #[test]
    fn a_segment_holds_one_descriptor_across_rolls_flushes_and_reopens() {
        let dir = TempDir::new().unwrap();
        let dir_path = dir.path().canonicalize().unwrap();
        let mut log = Log::open(&dir_path, small_segments(), NOW).unwrap();
        for i in 0..40 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        let sealed = log.segments.len();
        assert!(sealed > 3, "{sealed} sealed segments");
        let fds = open_files_under(&dir_path);
        let on = |ext: &str| fds.iter().filter(|p| p.extension().is_some_and(|e| e == ext)).count();
        assert_eq!(on("log"), sealed + 1, "one .log per segment: {fds:?}");
        assert_eq!(on("index") + on("timeindex"), 0, "indexes hold no descriptor: {fds:?}");
        log.flush_handle().sync().unwrap();
        log.mark_flushed(log.log_end_offset()).unwrap();
        let fds = open_files_under(&dir_path);
        assert_eq!(fds.len(), sealed + 1, "nor after a flush: {fds:?}");
        // Lookups use the in-memory entries; a clean reopen keeps the bound.
        assert_eq!(ranges(&log.read(4, 120, 1, true).unwrap()), vec![(3, 5)]);
        log.close().unwrap();
        let log = Log::open(&dir_path, small_segments(), NOW).unwrap();
        let fds = open_files_under(&dir_path);
        assert_eq!(fds.len(), sealed + 1, "after reopen, one per segment: {fds:?}");
        assert_eq!(ranges(&log.read(61, 120, 1, true).unwrap()), vec![(60, 62)]);
    }

    /// Early write-back covers exactly the bytes an append wrote to the active segment, and
    /// the new segment from its start when the append rolled.
    #[test]
    fn writeback_covers_the_bytes_appended_since_the_mark() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let mark = log.write_position();
        assert!(log.writeback_since(mark).is_none(), "nothing appended");
        log.append(batch(3, 0), 0, NOW).unwrap();
        let after_first = log.write_position();
        let first = log.writeback_since(mark).unwrap();
        assert_eq!((first.from(), first.to()), (0, after_first.size));
        first.start();
        log.append(batch(3, 1), 0, NOW).unwrap();
        let second = log.writeback_since(after_first).unwrap();
        assert_eq!(
            (second.from(), second.to()),
            (after_first.size, log.write_position().size)
        );
        second.start();
        // Appends until one lands in a new segment (segments of 2,000 bytes).
        let mut mark = log.write_position();
        while log.write_position().segment_base_offset == mark.segment_base_offset {
            mark = log.write_position();
            log.append(batch(3, 2), 0, NOW).unwrap();
        }
        let rolled = log.writeback_since(mark).unwrap();
        assert_eq!((rolled.from(), rolled.to()), (0, log.write_position().size));
        rolled.start();
        // Write-back asks for nothing to be durable: the fsync still decides.
        assert_eq!(log.recovery_point(), 0);
    }

    #[test]
    fn segments_roll_by_age_and_by_index_fullness() {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            segment_ms: 1_000,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        log.append(batch(1, 0), 0, NOW).unwrap();
        log.append(batch(1, 0), 0, NOW + 1_000).unwrap();
        assert_eq!(segment_files(dir.path(), "log").len(), 1);
        log.append(batch(1, 0), 0, NOW + 1_001).unwrap();
        assert_eq!(segment_files(dir.path(), "log").len(), 2);

        let dir = TempDir::new().unwrap();
        // Room for three offset index entries and two time index entries per segment: the
        // time index fills first (each batch raises the max timestamp).
        let config = LogConfig {
            index_interval_bytes: 1,
            segment_index_bytes: 24,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        for i in 0..6 {
            log.append(batch(1, i), 0, NOW).unwrap();
        }
        assert_eq!(segment_files(dir.path(), "log").len(), 2);
        assert_eq!(ranges(&log.read(4, 6, 1 << 20, true).unwrap()), vec![(4, 4), (5, 5)]);
    }

    #[test]
    fn flush_handle_covers_segments_rolled_since_the_last_flush() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        log.append(batch(3, 0), 0, NOW).unwrap();
        let handle = log.flush_handle();
        assert_eq!(handle.flushed_offset, 3);
        handle.sync().unwrap();
        log.mark_flushed(handle.flushed_offset).unwrap();
        assert_eq!(log.recovery_point(), 3);
        assert_eq!(checkpoint::read_recovery_point(dir.path()).unwrap(), Some(3));
        assert!(log.flush_handle().files.is_empty());

        for i in 0..20 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        let handle = log.flush_handle();
        let logs_written = segment_files(dir.path(), "log");
        let synced: Vec<&PathBuf> = handle.files.iter().map(|(_, p)| p).collect();
        // Every segment file (all written since the flush) and the directory (new names).
        for path in &logs_written {
            assert!(synced.contains(&path), "{path:?} missing from {synced:?}");
        }
        assert_eq!(handle.dirs, [dir.path()]);
        handle.sync().unwrap();
        log.mark_flushed(handle.flushed_offset).unwrap();
        let after = log.flush_handle();
        assert!(after.files.is_empty() && after.dirs.is_empty());
    }

    #[test]
    fn the_first_flush_of_a_new_partition_directory_makes_its_name_durable() {
        // The partition directory's entry in the data directory, like a segment's name, must
        // be on disk before a record in it is acknowledged as durable.
        let data = TempDir::new().unwrap();
        let dir = data.path().join("t-0");
        let mut log = Log::open(&dir, small_segments(), NOW).unwrap();
        assert_eq!(log.flush_handle().dirs, [dir.as_path(), data.path()], "before any data");
        log.append(batch(3, 0), 0, NOW).unwrap();
        let first = log.flush_handle();
        assert_eq!(first.dirs, [dir.as_path(), data.path()]);
        first.sync().unwrap();
        log.mark_flushed(first.flushed_offset).unwrap();
        log.append(batch(3, 1), 0, NOW).unwrap();
        assert!(log.flush_handle().dirs.is_empty(), "synced once");
        drop(log);
        // Reopened, the directory exists: nothing to make durable but what is written next.
        let log = Log::open(&dir, small_segments(), NOW).unwrap();
        assert!(log.flush_handle().dirs.is_empty());
    }

    #[test]
    fn the_recovery_point_is_checkpointed_by_interval_and_the_directory_synced_once_per_new_segment() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let flush = |log: &mut Log| {
            let handle = log.flush_handle();
            handle.sync().unwrap();
            log.mark_flushed(handle.flushed_offset).unwrap();
            handle
        };
        log.append(batch(3, 0), 0, NOW).unwrap();
        let first = flush(&mut log);
        assert_eq!(first.dirs, [dir.path()], "the new segment's name");
        assert_eq!(
            checkpoint::read_recovery_point(dir.path()).unwrap(),
            Some(3),
            "first flush"
        );
        // Within the interval (60 s by default) the checkpoint is not rewritten, and the active
        // segment, whose name the first flush made durable, needs no directory fsync.
        log.append(batch(3, 1), 0, NOW).unwrap();
        let second = flush(&mut log);
        assert!(second.dirs.is_empty(), "no directory fsync for data in a known segment");
        assert_eq!(log.recovery_point(), 6);
        assert_eq!(
            checkpoint::read_recovery_point(dir.path()).unwrap(),
            Some(3),
            "not yet due"
        );
        // A roll creates a name again; an interval of 0 checkpoints at every flush.
        log.update_config(LogConfig {
            recovery_point_checkpoint_ms: 0,
            ..small_segments()
        });
        for i in 2..20 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        let third = flush(&mut log);
        assert_eq!(third.dirs, [dir.path()], "segments rolled since");
        assert_eq!(checkpoint::read_recovery_point(dir.path()).unwrap(), Some(60));
        // A clean close writes it whatever the interval.
        log.append(batch(3, 20), 0, NOW).unwrap();
        log.close().unwrap();
        assert_eq!(checkpoint::read_recovery_point(dir.path()).unwrap(), Some(63));
    }

    #[test]
    fn log_append_time_stamps_max_timestamp_and_keeps_the_crc_valid() {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        let info = log.append(batch(3, 10), 0, NOW + 5).unwrap();
        assert_eq!(info.log_append_time_ms, NOW + 5);
        let bytes = log.read(0, 3, 1 << 20, true).unwrap();
        let stored = validate_batches(&bytes, usize::MAX).unwrap(); // checks the CRC
        assert_eq!(stored[0].max_timestamp(), NOW + 5);
        assert_ne!(stored[0].attributes() & batch::TIMESTAMP_TYPE_LOG_APPEND, 0);
        assert_eq!(log.max_timestamp().unwrap(), Some((NOW + 5, 0)));
        assert_eq!(log.offset_for_timestamp(NOW).unwrap(), Some((0, NOW + 5)));
        assert_eq!(log.offset_for_timestamp(NOW + 6).unwrap(), None);
    }

    #[test]
    fn update_config_takes_effect_at_the_next_append() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        for i in 0..10 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        assert_eq!(bases_on_disk(dir.path()), vec![0]);
        log.update_config(small_segments());
        log.append(batch(3, 0), 0, NOW).unwrap();
        assert_eq!(bases_on_disk(dir.path()), vec![0, 30]);
    }

    #[test]
    fn whole_batches_len_stops_at_a_partial_batch() {
        let a = encode_batch(&[1, 2], 10);
        let mut two = a.to_vec();
        two.extend_from_slice(&a);
        assert_eq!(whole_batches_len(&two), two.len());
        assert_eq!(whole_batches_len(&two[..two.len() - 1]), a.len());
        assert_eq!(whole_batches_len(&two[..a.len() + 5]), a.len());
        assert_eq!(whole_batches_len(&two[..3]), 0);
    }

    #[test]
    fn a_retried_idempotent_batch_is_not_appended_again() {
        // Kafka: UnifiedLog.analyzeAndValidateProducerState finds the duplicate batch.
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        let three = encode_batch(&[1, 2, 3], 10);
        let first = log.append(from_producer(&three, 7, 0, 0, false), 0, NOW).unwrap();
        let second = log.append(from_producer(&three, 7, 0, 3, false), 0, NOW).unwrap();
        assert_eq!((first.base_offset, second.base_offset), (0, 3));
        let retry = log.append(from_producer(&three, 7, 0, 0, false), 0, NOW).unwrap();
        assert!(retry.duplicate);
        assert_eq!((retry.base_offset, retry.last_offset), (0, 2));
        assert_eq!(log.log_end_offset(), 6);
        let gap = log.append(from_producer(&three, 7, 0, 9, false), 0, NOW).unwrap_err();
        assert_eq!(gap.code(), 45); // OUT_OF_ORDER_SEQUENCE_NUMBER
        assert_eq!(log.log_end_offset(), 6);
    }
}
