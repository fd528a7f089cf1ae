//! One partition's durable log: segments of record batches stored as bytes, with Kafka's
//! on-disk layout (`<dir>/<20-digit base offset>.log`, `.index`, `.timeindex`), recovery of a
//! torn tail at open, and the leader-epoch checkpoint.
//!
//! The log knows nothing about the network or about who calls it; the caller (replica::Partition)
//! serializes appends and decides when data is visible (high watermark).
//!
//! Durability protocol: `append` writes to the page cache; `flush_handle` (cheap, under the
//! caller's lock) returns the files to fsync and the offset they cover; `FlushHandle::sync` runs
//! outside the lock (it blocks: run it on a blocking thread); `mark_flushed` records the result,
//! and writes the recovery point checkpoint. Many appends share one fsync (group commit).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod batch;
mod checkpoint;
/// Log compaction: `Log::clean` (and `prepare_clean` / `commit_clean`) live in cleaner.rs.
pub mod cleaner;
mod index;
pub mod producer_state;
mod segment;

use std::fs::File;
use std::io::{ErrorKind, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

pub use batch::{ValidBatch, validate_batches};
pub use checkpoint::EpochEntry;

use batch::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use checkpoint::{CLEAN_SHUTDOWN_FILE, LeaderEpochCache, TEMP_SUFFIX};
use producer_state::{AbortedTxn, Marker, Origin, ProducerBatch, ProducerState, Verdict};
use segment::{DELETED_SUFFIX, Segment};

use crate::error::{Error, Result};

/// How a topic stamps record timestamps (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The settings of one log, from the topic's config over the broker defaults.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// `segment.bytes`: roll to a new segment when the active one would exceed this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is older than this.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes of log between two offset index entries.
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`: an index (8-byte entries) never grows past this; roll when full.
    pub segment_index_bytes: u64,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`.
    pub timestamp_type: TimestampType,
    /// `file.delete.delay.ms`: how long a deleted segment's files stay (as `*.deleted`) before
    /// they are removed.
    pub file_delete_delay_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            file_delete_delay_ms: 60_000,
        }
    }
}

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
    /// The partition directory, when new segment names must be made durable: opened only for
    /// that fsync, so a partition holds no descriptor on its directory.
    dir: Option<PathBuf>,
    /// The log end offset when the handle was taken.
    pub flushed_offset: i64,
}

impl FlushHandle {
    /// fsyncs the files (blocking). Errors name the file.
    pub fn sync(&self) -> Result<()> {
        for (file, path) in &self.files {
            file.sync_data()
                .map_err(|e| crate::error::Error::storage("fsync", path, e))?;
        }
        if let Some(dir) = &self.dir {
            checkpoint::sync_dir(dir)?;
        }
        Ok(())
    }
}

/// What one `apply_retention` pass deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    /// Segments deleted (a rolled active segment counts once).
    pub deleted_segments: usize,
    /// Bytes of batches in the deleted segments.
    pub deleted_bytes: u64,
    /// The log start offset after the pass.
    pub log_start_offset: i64,
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
    /// The first offset a client may read: the first segment's base offset, or above it after
    /// DeleteRecords (Kafka's `logStartOffset`); checkpointed in `log-start-offset-checkpoint`.
    log_start_offset: i64,
    epochs: LeaderEpochCache,
    /// Files of deleted segments, renamed `*.deleted`, and when they may be removed
    /// (`file.delete.delay.ms`); leftovers after a restart are removed at open.
    pending_deletes: Vec<(PathBuf, i64)>,
    /// Producer ids, epochs, sequences and open transactions (producer_state.rs).
    producers: ProducerState,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Flush the in-memory index entries to their files once this many are pending, so that a
/// log nobody flushes still keeps its index files close to complete.
const INDEX_ENTRIES_PENDING_MAX: usize = 1024;

impl Log {
    /// Opens (creating if absent) the log in `dir`, recovering it: the part after the recovery
    /// point is validated batch by batch (magic, lengths, CRC32C, offsets contiguous) and
    /// truncated at the first bad byte; missing or inconsistent indexes are rebuilt. After a
    /// clean `close` the open is fast (no scan).
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log> {
        std::fs::create_dir_all(dir).map_err(|e| Error::storage("create directory", dir, e))?;
        // Log compaction: finish a decided segment swap, drop an undecided one (cleaner.rs).
        let compacted_below = cleaner::finish_interrupted_swaps(dir)?;
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = marker.try_exists().map_err(|e| Error::storage("stat", &marker, e))?;
        let mut bases = list_segments(dir)?;
        let checkpointed_start = checkpoint::read_log_start_offset(dir)?;
        if let Some(start) = checkpointed_start {
            // Segments wholly below the checkpointed start (written before any deletion) were
            // being deleted when the process stopped: finish, before the gap check below takes
            // a deletion the disk persisted out of order for a hole in the log.
            let below = bases.windows(2).take_while(|w| w[1] <= start).count();
            for &base in &bases[..below] {
                segment::remove_files(dir, base)?;
            }
            bases.drain(..below);
        }
        let checkpointed = checkpoint::read_recovery_point(dir)?;
        let mut epochs = LeaderEpochCache::load(dir)?;

        // Without a clean shutdown, only what precedes the recovery point's segment is known to
        // be on disk (Kafka's LogLoader recovers from the segment holding the recovery point).
        let recover_from = if clean {
            bases.len()
        } else {
            let point = checkpointed.unwrap_or(0);
            bases.partition_point(|&b| b <= point).saturating_sub(1)
        };
        let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
        for (i, &base) in bases.iter().enumerate() {
            if let Some(prev) = segments.last()
                && prev.next_offset != base
            {
                // Offsets are contiguous across segments: what follows a gap cannot be served.
                tracing::warn!(
                    dir = %dir.display(),
                    expected = prev.next_offset,
                    found = base,
                    "recovery drops segments after an offset gap"
                );
                for &later in &bases[i..] {
                    Segment::delete_files(dir, later)?;
                }
                break;
            }
            let (mut segment, loaded) = Segment::open(dir, base)?;
            let trusted = i < recover_from && segment.trust(loaded, bases.get(i + 1).copied())?;
            // Below `compacted_below` the cleaner may have left offset gaps.
            let compacted = base < compacted_below;
            if !trusted && segment.recover(&config, compacted)? {
                // Truncated: later segments would follow a hole.
                segments.push(segment);
                for &later in &bases[i + 1..] {
                    Segment::delete_files(dir, later)?;
                }
                break;
            }
            if compacted && let Some(&next) = bases.get(i + 1) {
                // A cleaned segment spans up to the next one even when its last offsets are gone.
                segment.next_offset = segment.next_offset.max(next);
            }
            segments.push(segment);
        }
        let mut active = match segments.pop() {
            Some(segment) => segment,
            None => Segment::create(dir, 0, true)?,
        };
        active.start_roll_clock(now_ms);
        let log_end_offset = active.next_offset;
        // Kafka's LogLoader does the same: an epoch cannot start past the end of the log.
        epochs.truncate_from_end(log_end_offset)?;
        let first_base = segments.first().map_or(active.base_offset, |s| s.base_offset);
        // As Kafka's LogLoader: the start is at least the first segment's base; a log cut back
        // by recovery below a checkpointed start ends where it ends.
        let log_start_offset = checkpointed_start
            .unwrap_or(first_base)
            .max(first_base)
            .min(log_end_offset);
        epochs.truncate_from_start(log_start_offset)?;

        if clean {
            // The marker must be gone for good before anything is appended, or a crash after
            // this open would be mistaken for a clean shutdown.
            std::fs::remove_file(&marker).map_err(|e| Error::storage("delete", &marker, e))?;
            checkpoint::sync_dir(dir)?;
        }
        let recovery_point = if clean {
            log_end_offset
        } else {
            checkpointed.unwrap_or(0).min(log_end_offset)
        };
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments,
            active,
            recovery_point,
            log_start_offset,
            epochs,
            pending_deletes: Vec::new(),
            producers: ProducerState::default(),
        };
        log.producers = log.load_producer_state()?;
        log.debug_check();
        Ok(log)
    }

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
        let mut headers = Vec::with_capacity(batches.len());
        let mut producer_batches = Vec::with_capacity(batches.len());
        let mut next_offset = base_offset;
        for b in &batches {
            let stamped = batch::stamped_header(b, next_offset, leader_epoch, log_append_time);
            let header = BatchHeader::parse(&stamped)?;
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
            headers.push(stamped);
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
        // Producer state follows the batches written: before a roll (whose snapshot must hold
        // everything below the new segment) and after the last write.
        let mut applied = 0;
        // As Kafka's UnifiedLog.append: the epoch is recorded before the data it covers.
        self.epochs.assign(leader_epoch, base_offset)?;

        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * batches.len());
        let mut run_start = self.active.tail();
        for (i, (b, stamped)) in batches.iter().zip(&headers).enumerate() {
            let header = BatchHeader::parse(stamped)?;
            if self
                .active
                .should_roll(header.size, header.last_offset(), now_ms, &self.config)
            {
                self.write_run(&mut slices, run_start)?;
                self.apply_producers(&producer_batches[applied..i])?;
                applied = i;
                self.roll()?;
                run_start = self.active.tail();
            }
            self.active.account(&header, &self.config);
            self.active.note_append_time(now_ms);
            slices.push(IoSlice::new(stamped));
            slices.push(IoSlice::new(&b.bytes()[HEADER_LEN..]));
        }
        self.write_run(&mut slices, run_start)?;
        self.apply_producers(&producer_batches[applied..])?;
        if self.active.pending_index_entries() >= INDEX_ENTRIES_PENDING_MAX {
            self.active.persist_indexes()?;
        }
        debug_assert_eq!(self.log_end_offset(), next_offset);
        Ok(AppendInfo {
            base_offset,
            last_offset: next_offset - 1,
            log_append_time_ms: log_append_time.unwrap_or(-1),
            duplicate: false,
        })
    }

    /// Records written batches in the producer state; aborted transactions they complete go to
    /// the active segment's `.txnindex`.
    fn apply_producers(&mut self, batches: &[ProducerBatch]) -> Result<()> {
        if batches.iter().all(|b| b.producer_id == producer_state::NO_PRODUCER_ID) {
            return Ok(());
        }
        for txn in self.producers.apply(batches) {
            producer_state::append_txn_index(&self.dir, self.active.base_offset, &txn)?;
        }
        Ok(())
    }

    /// Appends a transaction marker for `producer_id` (Kafka's WriteTxnMarkers at the
    /// partition): a control batch that ends the producer's transaction here. A marker with an
    /// epoch older than the producer's is refused (INVALID_PRODUCER_EPOCH).
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo> {
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

    /// The producer state (DescribeProducers).
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// Forgets producers idle for `expiration_ms` (`producer.id.expiration.ms`).
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.remove_expired(now_ms, expiration_ms)
    }

    /// Rebuilds the producer state at open (Kafka's `LogLoader` / `rebuildProducerState`): the
    /// latest snapshot at or below the log end, then the batches after it. Aborted transactions
    /// come from the segments' `.txnindex` files, completed by what the replay finds.
    fn load_producer_state(&mut self) -> Result<ProducerState> {
        let log_end = self.log_end_offset();
        let mut snapshots = producer_state::list_snapshots(&self.dir)?;
        // Snapshots past the log end describe batches a recovery cut away.
        while let Some(&last) = snapshots.last()
            && last > log_end
        {
            producer_state::delete_snapshot(&self.dir, last)?;
            snapshots.pop();
        }
        let mut state = ProducerState::default();
        let mut replay_from = self.log_start_offset;
        while let Some(&offset) = snapshots.last() {
            match producer_state::read_snapshot(&self.dir, offset) {
                Ok(loaded) => {
                    state = loaded;
                    replay_from = replay_from.max(offset);
                    break;
                }
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), offset, error = %e, "ignoring a damaged producer snapshot");
                    producer_state::delete_snapshot(&self.dir, offset)?;
                    snapshots.pop();
                }
            }
        }
        // Aborted transactions on record, minus those a recovery truncated.
        let mut aborted = Vec::new();
        let bases: Vec<i64> = self.all_segments().map(|s| s.base_offset).collect();
        for base in bases {
            let entries = producer_state::read_txn_index(&self.dir, base)?;
            let kept: Vec<AbortedTxn> = entries.iter().copied().filter(|a| a.last_offset < log_end).collect();
            if kept.len() != entries.len() {
                producer_state::rewrite_txn_index(&self.dir, base, &kept)?;
            }
            aborted.extend(kept);
        }
        let indexed_up_to = aborted.iter().map(|a| a.last_offset).max().unwrap_or(-1);
        let mut replayed = 0u64;
        let mut found = Vec::new();
        let first = self.floor_segment(replay_from);
        for i in first..=self.segments.len() {
            let Some(segment) = self.segment_at(i) else { break };
            if segment.next_offset <= replay_from {
                continue;
            }
            let mut headers = Vec::new();
            let start = if segment.base_offset < replay_from {
                segment.find_batch(replay_from)?.map_or(segment.size, |(pos, _)| pos)
            } else {
                0
            };
            let mut pos = start;
            segment.scan(start, |h| {
                if h.last_offset() >= replay_from && h.producer_id != producer_state::NO_PRODUCER_ID {
                    headers.push((pos, *h));
                }
                pos += h.size as u64;
                false
            })?;
            let mut batches = Vec::with_capacity(headers.len());
            for (pos, h) in headers {
                let marker = if h.attributes & batch::CONTROL != 0 {
                    let bytes = segment.read_at(pos, h.size)?;
                    producer_state::read_marker(&bytes)
                } else {
                    None
                };
                if h.attributes & batch::CONTROL != 0 && marker.is_none() {
                    continue;
                }
                batches.push(ProducerBatch::from_header(&h, marker));
            }
            replayed += batches.len() as u64;
            let base = segment.base_offset;
            for txn in state.apply(&batches) {
                if txn.last_offset > indexed_up_to {
                    found.push((base, txn));
                }
            }
        }
        for (base, txn) in &found {
            producer_state::append_txn_index(&self.dir, *base, txn)?;
            aborted.push(*txn);
        }
        state.load_aborted(aborted);
        if replayed > 0 {
            tracing::debug!(dir = %self.dir.display(), from = replay_from, batches = replayed, "producer state rebuilt");
        }
        Ok(state)
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

    /// Seals the active segment and starts a new one at the log end.
    fn roll(&mut self) -> Result<()> {
        self.active.seal()?;
        // Recovery replays from the newest snapshot: one per segment keeps the replay to the
        // active segment (Kafka snapshots at every roll too).
        self.snapshot_producers()?;
        let next = Segment::create(&self.dir, self.active.next_offset, true)?;
        let sealed = std::mem::replace(&mut self.active, next);
        self.segments.push(sealed);
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
            // has covered yet (a flush that covered data in it would have synced the directory).
            new_names |= segment.created_by_roll;
        }
        files.reverse();
        FlushHandle {
            files,
            dir: new_names.then(|| self.dir.clone()),
            flushed_offset: self.log_end_offset(),
        }
    }

    /// Records that everything below `offset` is durable (after `FlushHandle::sync`), and
    /// checkpoints the recovery point.
    pub fn mark_flushed(&mut self, offset: i64) -> Result<()> {
        let offset = offset.min(self.log_end_offset());
        if offset <= self.recovery_point {
            return Ok(());
        }
        self.recovery_point = offset;
        self.active.persist_indexes()?;
        checkpoint::write_recovery_point(&self.dir, offset, false)
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
    /// beyond `max_bytes` is bounded by its own length as stored.
    pub fn read(&self, offset: i64, max_offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<Bytes> {
        match self.locate_read(offset, max_offset)? {
            Some(found) => found.read(max_bytes, min_one_batch),
            None => Ok(Bytes::new()),
        }
    }

    /// How many bytes a `read(offset, max_offset, ..)` would find, from file positions alone
    /// (Kafka's `DelayedFetch.tryComplete`, which a fetch waiting for `min_bytes` asks at each
    /// high watermark move instead of reading the records again): the bytes between the batch
    /// holding `offset` and the one holding `max_offset` (or the segment end) when both are in
    /// one segment. Errors as `read`.
    pub fn readable_bytes(&self, offset: i64, max_offset: i64) -> Result<ReadableBytes> {
        let Some(found) = self.locate_read(offset, max_offset)? else {
            return Ok(ReadableBytes::Within(0));
        };
        Ok(match found.end {
            Some(end) => ReadableBytes::Within(end.saturating_sub(found.start)),
            None => ReadableBytes::OlderSegment,
        })
    }

    /// Where a read from `offset` up to `max_offset` starts and ends; None when it finds
    /// nothing. The end is None when `max_offset` lies past the segment holding `offset` and
    /// that segment is not the last (Kafka's "fetch offset on an older segment").
    fn locate_read(&self, offset: i64, max_offset: i64) -> Result<Option<ReadStart<'_>>> {
        let (log_start, log_end) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start || offset > log_end {
            return Err(Error::OffsetOutOfRange {
                asked: offset,
                log_start,
                log_end,
            });
        }
        if offset >= log_end || offset >= max_offset {
            return Ok(None);
        }
        // An offset at the very end of a segment is served by the next one.
        let mut i = self.floor_segment(offset);
        let (segment, start, first) = loop {
            match self.segment_at(i) {
                Some(s) if s.next_offset > offset => {
                    // A compacted segment may have lost its last offsets: go on to the next.
                    if let Some((start, first)) = s.find_batch(offset.max(s.base_offset))? {
                        break (s, start, first);
                    }
                    i += 1;
                }
                Some(_) => i += 1,
                None => return Ok(None),
            }
        };
        if first.last_offset() >= max_offset {
            return Ok(None);
        }
        let end = if max_offset < segment.next_offset {
            Some(
                segment
                    .find_batch(max_offset)?
                    .map_or(segment.size, |(position, _)| position),
            )
        } else if i == self.segments.len() {
            // The active segment: `max_offset` is its end.
            Some(segment.size)
        } else {
            None
        };
        Ok(Some(ReadStart {
            segment,
            start,
            first,
            end,
        }))
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

    /// DeleteRecords (Kafka's `UnifiedLog.maybeIncrementLogStartOffset`): raises the log start
    /// offset to `offset` (never lowers it), checkpointed durably before anything is deleted,
    /// then deletes the closed segments wholly below it. Returns the new log start offset (the
    /// partition's low watermark).
    ///
    /// The caller resolves -1 to the high watermark and rejects an offset above the high
    /// watermark (Kafka answers OffsetOutOfRange); here an offset below 0 or above the log end
    /// is `OffsetOutOfRange`. The active segment is never deleted, even when `offset` is the
    /// log end: its batches stay on disk, unreadable, until a roll closes it and the next
    /// `apply_retention` deletes it as wholly below the log start.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        let log_end = self.log_end_offset();
        if offset < 0 || offset > log_end {
            return Err(Error::OffsetOutOfRange {
                asked: offset,
                log_start: self.log_start_offset,
                log_end,
            });
        }
        self.raise_log_start_offset(offset)?;
        let start = self.log_start_offset;
        let below = self.segments.partition_point(|s| s.next_offset <= start);
        self.delete_oldest(below)?;
        self.debug_check();
        Ok(self.log_start_offset)
    }

    /// One retention pass (Kafka's `UnifiedLog.deleteOldSegments` for `cleanup.policy=delete`),
    /// oldest segment first, each rule stopping at the first segment it keeps:
    /// segments wholly below the log start offset; then `retention.bytes` (-1: no limit) while
    /// the log minus the segment still holds at least that many bytes; then `retention.ms`
    /// (-1: no limit) when the segment's largest timestamp is more than that before `now_ms`.
    ///
    /// As in Kafka, a segment goes only when it ends at or below `high_watermark` (data not yet
    /// replicated is kept), and the active segment, when a rule takes it and it is not empty,
    /// is rolled first so that it can go too (the log then holds one empty segment at its end).
    /// The log start offset moves up to the first remaining segment, checkpointed.
    pub fn apply_retention(
        &mut self,
        retention_ms: i64,
        retention_bytes: i64,
        high_watermark: i64,
        now_ms: i64,
    ) -> Result<RetentionOutcome> {
        self.remove_due_deletes(now_ms);
        let mut outcome = RetentionOutcome::default();
        let mut add = |(segments, bytes): (usize, u64)| {
            outcome.deleted_segments += segments;
            outcome.deleted_bytes += bytes;
        };
        let start = self.log_start_offset;
        let below_start = self.deletable_prefix(high_watermark, |_, next_base| {
            Ok(next_base.is_some_and(|next| next <= start))
        })?;
        add(self.delete_prefix(below_start)?);

        if let Ok(retention_bytes) = u64::try_from(retention_bytes) {
            let size = self.size_bytes();
            if size >= retention_bytes {
                let mut excess = size - retention_bytes;
                let over_size = self.deletable_prefix(high_watermark, |segment, _| {
                    let fits = excess >= segment.size;
                    if fits {
                        excess -= segment.size;
                    }
                    Ok(fits)
                })?;
                add(self.delete_prefix(over_size)?);
            }
        }

        if retention_ms >= 0 {
            let too_old = self.deletable_prefix(high_watermark, |segment, _| {
                Ok(now_ms.saturating_sub(segment.largest_timestamp()?) > retention_ms)
            })?;
            add(self.delete_prefix(too_old)?);
        }
        outcome.log_start_offset = self.log_start_offset;
        self.debug_check();
        Ok(outcome)
    }

    /// How many segments from the oldest (the active one included, last) `deletable` takes in a
    /// row (Kafka's `LocalLog.deletableSegments` with `UnifiedLog`'s high watermark bound).
    /// `deletable` gets the segment and the next one's base offset (None for the active one).
    fn deletable_prefix(
        &self,
        high_watermark: i64,
        mut deletable: impl FnMut(&Segment, Option<i64>) -> Result<bool>,
    ) -> Result<usize> {
        let mut count = 0;
        for (i, segment) in self.all_segments().enumerate() {
            let next_base = self.segment_at(i + 1).map(|s| s.base_offset);
            let end = next_base.unwrap_or_else(|| self.log_end_offset());
            // The predicate runs only for segments below the high watermark: the size rule
            // counts the bytes of the segments it takes.
            if high_watermark < end || !deletable(segment, next_base)? {
                break;
            }
            if next_base.is_none() && segment.size == 0 {
                break; // the empty active segment stays: a log always has one
            }
            count += 1;
        }
        Ok(count)
    }

    /// Deletes the `count` oldest segments, rolling first when that includes the active one.
    /// Returns the segments and bytes deleted.
    fn delete_prefix(&mut self, count: usize) -> Result<(usize, u64)> {
        if count > self.segments.len() {
            self.roll()?;
        }
        self.delete_oldest(count)
    }

    /// Removes the `*.deleted` files whose `file.delete.delay.ms` has passed.
    fn remove_due_deletes(&mut self, now_ms: i64) {
        self.pending_deletes.retain(|(path, due)| {
            if *due > now_ms {
                return true;
            }
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != ErrorKind::NotFound => {
                    tracing::warn!(path = %path.display(), error = %e, "removing a deleted segment file");
                    true
                }
                _ => false,
            }
        });
    }

    /// Deletes the `count` oldest closed segments, after raising the log start offset to the
    /// first one kept.
    fn delete_oldest(&mut self, count: usize) -> Result<(usize, u64)> {
        let count = count.min(self.segments.len());
        if count == 0 {
            return Ok((0, 0));
        }
        let first_kept = self
            .segment_at(count)
            .map_or(self.active.base_offset, |s| s.base_offset);
        self.raise_log_start_offset(first_kept)?;
        // Out of the segment list first, so that no lookup can reach a segment whose files are
        // going; if a deletion fails, the rest stay on disk below the log start, and the next
        // open deletes them.
        let deleted: Vec<Segment> = self.segments.drain(..count).collect();
        let bytes = deleted.iter().map(|s| s.size).sum();
        for segment in deleted {
            tracing::info!(
                dir = %self.dir.display(),
                base_offset = segment.base_offset,
                next_offset = segment.next_offset,
                bytes = segment.size,
                "deleting segment"
            );
            if self.config.file_delete_delay_ms <= 0 {
                segment.delete(&self.dir)?;
            } else {
                let due = now_ms().saturating_add(self.config.file_delete_delay_ms);
                for path in segment.delete_later(&self.dir)? {
                    self.pending_deletes.push((path, due));
                }
            }
        }
        Ok((count, bytes))
    }

    /// Raises the log start offset (never lowers it): checkpoint first, then memory and the
    /// leader-epoch cache (Kafka's `maybeIncrementLogStartOffset`).
    fn raise_log_start_offset(&mut self, offset: i64) -> Result<()> {
        if offset <= self.log_start_offset {
            return Ok(());
        }
        debug_assert!(offset <= self.log_end_offset(), "log start beyond the log end");
        checkpoint::write_log_start_offset(&self.dir, offset)?;
        self.log_start_offset = offset;
        // Producers stay (their ids expire by producer.id.expiration.ms, as in Kafka); the
        // aborted transactions of removed segments go.
        self.producers.on_log_start_moved(offset);
        self.epochs.truncate_from_start(offset)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active.next_offset
    }

    /// ListOffsets by timestamp: the offset and timestamp of the first record whose timestamp is
    /// at least `timestamp_ms` (through the time index), or None when there is none.
    ///
    /// Returns `(offset, timestamp)`. Kafka's `UnifiedLog.fetchOffsetByTimestamp`: the first
    /// segment whose max timestamp reaches the target, then the first batch there whose
    /// maxTimestamp does, decoded to find the record.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>> {
        // Records below the log start are not served (Kafka's LogSegment.findOffsetByTimestamp
        // with `startingOffset = logStartOffset`).
        let log_start = self.log_start_offset;
        for segment in self.all_segments() {
            if segment.size == 0 || segment.next_offset <= log_start || segment.max_timestamp < timestamp_ms {
                continue;
            }
            let mut from = segment.timestamp_scan_start(timestamp_ms);
            let wanted = |h: &BatchHeader| h.max_timestamp >= timestamp_ms && h.last_offset() >= log_start;
            while let Some((position, header)) = segment.scan(from, wanted)? {
                let bytes = segment.read_at(position, header.size)?;
                if let Some(found) = find_record(bytes, &header, log_start, |ts| ts >= timestamp_ms)? {
                    return Ok(Some(found));
                }
                // A producer's maxTimestamp above its records' timestamps: keep looking.
                from = position + header.size as u64;
            }
        }
        Ok(None)
    }

    /// ListOffsets max timestamp (-3): the largest timestamp in the log and the offset of the
    /// record that carries it, or None for an empty log.
    ///
    /// Returns `(timestamp, offset)`. As Kafka 4 (KIP-734, KAFKA-16310): the first record with
    /// the largest timestamp, found by decoding its batch; for LogAppendTime every record
    /// carries the batch's timestamp, so the first record of the batch.
    /// Only records at or above the log start count; the first segment, when it straddles the
    /// log start, is scanned batch by batch (its max timestamp may be a deleted record's).
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let log_start = self.log_start_offset;
        let mut straddling = None;
        let mut best: Option<&Segment> = None;
        for segment in self.all_segments() {
            if segment.size == 0 || segment.next_offset <= log_start {
                continue;
            }
            if segment.base_offset < log_start {
                straddling = max_timestamp_from(segment, log_start)?;
            } else if segment.max_timestamp >= 0 && best.is_none_or(|b| segment.max_timestamp > b.max_timestamp) {
                best = Some(segment);
            }
        }
        let Some(segment) = best else { return Ok(straddling) };
        let target = segment.max_timestamp;
        // The straddling segment holds earlier offsets: it wins ties.
        if let Some((ts, offset)) = straddling
            && ts >= target
        {
            return Ok(Some((ts, offset)));
        }
        if let Some((position, header)) = segment.find_batch(segment.offset_of_max_timestamp)? {
            let bytes = segment.read_at(position, header.size)?;
            if let Some((offset, _)) = find_record(bytes, &header, log_start, |ts| ts == target)? {
                return Ok(Some((target, offset)));
            }
        }
        Ok(Some((target, segment.offset_of_max_timestamp)))
    }

    /// The latest leader epoch in the leader-epoch checkpoint (-1 when none).
    pub fn latest_epoch(&self) -> i32 {
        self.epochs.latest_epoch()
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
            debug_assert_eq!(segment.base_offset, expected, "segments contiguous");
            expected = segment.next_offset;
        }
        debug_assert!(self.recovery_point <= self.log_end_offset());
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

/// The start of a read: its segment, the position and header of its first batch, and where
/// it ends in that segment (None: past it, see `locate_read`).
struct ReadStart<'a> {
    segment: &'a Segment,
    start: u64,
    first: BatchHeader,
    end: Option<u64>,
}

impl ReadStart<'_> {
    /// Reads whole batches up to the end (or the segment end), at most `max_bytes` except for
    /// the first batch when `min_one_batch`.
    fn read(&self, max_bytes: usize, min_one_batch: bool) -> Result<Bytes> {
        let end = self.end.unwrap_or(self.segment.size);
        let budget = if min_one_batch {
            max_bytes.max(self.first.size)
        } else {
            max_bytes
        };
        let len = usize::try_from(end.saturating_sub(self.start))
            .unwrap_or(usize::MAX)
            .min(budget);
        if len < self.first.size {
            return Ok(Bytes::new());
        }
        let mut bytes = self.segment.read_at(self.start, len)?;
        bytes.truncate(whole_batches_len(&bytes));
        Ok(Bytes::from(bytes))
    }
}

/// The length of the longest prefix of `bytes` made of whole batches (a read cut by
/// `max_bytes` ends inside a batch).
fn whole_batches_len(bytes: &[u8]) -> usize {
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

/// The offset and timestamp of the first record of the batch `bytes` at or after `from_offset`
/// whose timestamp `matches`.
fn find_record(
    bytes: Vec<u8>,
    header: &BatchHeader,
    from_offset: i64,
    matches: impl Fn(i64) -> bool,
) -> Result<Option<(i64, i64)>> {
    Ok(records_from(bytes, header, from_offset)?
        .into_iter()
        .find(|&(_, ts)| matches(ts)))
}

/// The (offset, timestamp) of each record of the batch `bytes` at or after `from_offset`.
fn records_from(bytes: Vec<u8>, header: &BatchHeader, from_offset: i64) -> Result<Vec<(i64, i64)>> {
    if header.is_log_append_time() {
        // Kafka's DefaultRecordBatch gives every record of a LogAppendTime batch the batch's
        // maxTimestamp; the record deltas still hold the producer's times.
        let ts = header.max_timestamp;
        return Ok((header.base_offset.max(from_offset)..=header.last_offset())
            .map(|offset| (offset, ts))
            .collect());
    }
    let bytes = Bytes::from(bytes);
    let records = batch::decode_records(&bytes)
        .map_err(|e| Error::CorruptBatch(format!("cannot decode batch at offset {}: {e:#}", header.base_offset)))?;
    Ok(records
        .records
        .iter()
        .filter(|r| r.offset >= from_offset)
        .map(|r| (r.offset, r.timestamp))
        .collect())
}

/// The largest timestamp among the records of `segment` at or after `from_offset` and the first
/// record carrying it, as `(timestamp, offset)`: the batch holding `from_offset` is decoded,
/// later batches are compared by their headers' maxTimestamp.
fn max_timestamp_from(segment: &Segment, from_offset: i64) -> Result<Option<(i64, i64)>> {
    let Some((position, first)) = segment.find_batch(from_offset)? else {
        return Ok(None);
    };
    let mut best = None::<(i64, i64)>;
    for (offset, ts) in records_from(segment.read_at(position, first.size)?, &first, from_offset)? {
        if ts >= 0 && best.is_none_or(|(b, _)| ts > b) {
            best = Some((ts, offset));
        }
    }
    // Later batches win only with a strictly larger timestamp: ties go to the earlier record.
    let mut floor = best.map_or(-1, |(ts, _)| ts);
    let mut best_later = None;
    let mut from = position + first.size as u64;
    while let Some((at, header)) = segment.scan(from, |h| h.max_timestamp > floor)? {
        from = at + header.size as u64;
        floor = header.max_timestamp;
        best_later = Some((at, header));
    }
    if let Some((at, header)) = best_later {
        let target = header.max_timestamp;
        let bytes = segment.read_at(at, header.size)?;
        let found = find_record(bytes, &header, from_offset, |ts| ts == target)?;
        return Ok(Some(
            found.map_or((target, header.last_offset()), |(offset, ts)| (ts, offset)),
        ));
    }
    Ok(best)
}

/// Base offsets of the segments in `dir`, increasing. Removes leftover temporary files of
/// interrupted checkpoint writes.
fn list_segments(dir: &Path) -> Result<Vec<i64>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::storage("list", dir, e))?;
    let mut bases = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::storage("list", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Interrupted checkpoint writes and segment deletions.
        if name.ends_with(TEMP_SUFFIX) || name.ends_with(DELETED_SUFFIX) {
            let path = entry.path();
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != ErrorKind::NotFound => {
                    return Err(Error::storage("delete", &path, e));
                }
                _ => {}
            }
            continue;
        }
        if let Some(stem) = name.strip_suffix(".log")
            && stem.len() == 20
            && stem.bytes().all(|b| b.is_ascii_digit())
            && let Ok(base) = stem.parse::<i64>()
        {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::log::batch::tests::{encode_batch, encode_batch_with};
    use kafka_protocol::records::Compression;
    use tempfile::TempDir;

    const NOW: i64 = 1_700_000_000_000;

    fn valid(bytes: Bytes) -> Vec<ValidBatch> {
        validate_batches(&bytes, 1 << 20).unwrap()
    }

    /// A batch of `n` records with timestamps `ts0, ts0 + 1, ...` and 100-byte values.
    fn batch(n: usize, ts0: i64) -> Vec<ValidBatch> {
        let ts: Vec<i64> = (0..n as i64).map(|i| ts0 + i).collect();
        valid(encode_batch(&ts, 100))
    }

    fn small_segments() -> LogConfig {
        LogConfig {
            segment_bytes: 2_000,
            index_interval_bytes: 300,
            ..LogConfig::default()
        }
    }

    /// The batches of a read, as (base offset, last offset).
    fn ranges(bytes: &Bytes) -> Vec<(i64, i64)> {
        validate_batches(bytes, usize::MAX)
            .unwrap()
            .iter()
            .map(|b| (b.base_offset(), b.base_offset() + b.offset_count() - 1))
            .collect()
    }

    fn segment_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        files.sort();
        files
    }

    fn copy_dir(from: &Path) -> TempDir {
        let to = TempDir::new().unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
        }
        to
    }

    #[test]
    fn an_empty_directory_opens_as_an_empty_log_at_offset_zero() {
        let dir = TempDir::new().unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        assert!(dir.path().join("00000000000000000000.log").exists());
        assert_eq!(log.read(0, 0, 1000, true).unwrap().len(), 0);
        assert_eq!(log.latest_epoch(), -1);
        assert_eq!(log.max_timestamp().unwrap(), None);
        assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
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

    /// Builds a log of three batches in one segment and leaves it without a clean close.
    fn three_batch_log() -> (TempDir, Vec<u64>) {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        let mut ends = vec![0];
        for i in 0..3 {
            log.append(batch(2, i), 1, NOW).unwrap();
            ends.push(log.active.size);
        }
        let handle = log.flush_handle();
        handle.sync().unwrap();
        // The recovery point covers the first batch only: the tail must be validated.
        log.mark_flushed(2).unwrap();
        drop(log); // a crash: no clean-shutdown marker
        (dir, ends)
    }

    #[test]
    fn recovery_drops_a_torn_last_batch_wherever_it_was_cut() {
        let (dir, ends) = three_batch_log();
        for cut in ends[2]..ends[3] {
            let copy = copy_dir(dir.path());
            let segment = copy.path().join("00000000000000000000.log");
            std::fs::OpenOptions::new()
                .write(true)
                .open(&segment)
                .unwrap()
                .set_len(cut)
                .unwrap();
            let mut log = Log::open(copy.path(), LogConfig::default(), NOW).unwrap();
            assert_eq!(log.log_end_offset(), 4, "cut at {cut}"); // batches 0 and 1 survive
            assert_eq!(std::fs::metadata(&segment).unwrap().len(), ends[2]);
            let info = log.append(batch(1, 9), 1, NOW).unwrap();
            assert_eq!(info.base_offset, 4);
            let all = log.read(0, 5, 1 << 20, true).unwrap();
            assert_eq!(ranges(&all), vec![(0, 1), (2, 3), (4, 4)]);
        }
    }

    #[test]
    fn recovery_truncates_a_last_batch_with_a_flipped_byte() {
        let (dir, ends) = three_batch_log();
        // Every byte but the partitionLeaderEpoch, which no check covers (as in Kafka: the CRC
        // starts after it so the broker can stamp it); a flipped baseOffset breaks contiguity.
        let epoch_bytes = ends[2] + 12..ends[2] + 16;
        for at in (ends[2]..ends[3]).filter(|at| !epoch_bytes.contains(at)) {
            let copy = copy_dir(dir.path());
            let segment = copy.path().join("00000000000000000000.log");
            let mut bytes = std::fs::read(&segment).unwrap();
            bytes[at as usize] ^= 0x40;
            std::fs::write(&segment, &bytes).unwrap();
            let log = Log::open(copy.path(), LogConfig::default(), NOW).unwrap();
            assert_eq!(log.log_end_offset(), 4, "flip at {at}");
            assert_eq!(ranges(&log.read(0, 4, 1 << 20, true).unwrap()), vec![(0, 1), (2, 3)]);
        }
    }

    #[test]
    fn recovery_drops_segments_after_a_truncated_one() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..20 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        drop(log);
        let logs = segment_files(dir.path(), "log");
        assert!(logs.len() >= 3);
        // Corrupt the first byte of the second segment's records.
        let mut bytes = std::fs::read(&logs[1]).unwrap();
        bytes[HEADER_LEN] ^= 0xff;
        std::fs::write(&logs[1], &bytes).unwrap();
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let second_base: i64 = logs[1].file_stem().unwrap().to_str().unwrap().parse().unwrap();
        assert_eq!(log.log_end_offset(), second_base);
        assert_eq!(segment_files(dir.path(), "log").len(), 2);
    }

    #[test]
    fn a_deleted_index_is_rebuilt_and_reads_still_work() {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            index_interval_bytes: 300,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
        for i in 0..20 {
            log.append(batch(3, i * 10), 0, NOW).unwrap();
        }
        log.close().unwrap();
        let index = dir.path().join("00000000000000000000.index");
        let before = std::fs::read(&index).unwrap();
        assert!(!before.is_empty());
        std::fs::remove_file(&index).unwrap();
        // A torn index (not a whole number of entries) is rebuilt too.
        let timeindex = dir.path().join("00000000000000000000.timeindex");
        let t = std::fs::read(&timeindex).unwrap();
        std::fs::write(&timeindex, &t[..t.len() - 5]).unwrap();

        let log = Log::open(dir.path(), config, NOW).unwrap();
        assert_eq!(log.log_end_offset(), 60);
        assert_eq!(std::fs::read(&index).unwrap(), before);
        assert_eq!(std::fs::metadata(&timeindex).unwrap().len() % 12, 0);
        for offset in 0..60 {
            let got = ranges(&log.read(offset, 60, 1, true).unwrap());
            assert_eq!(got[0].0, offset / 3 * 3);
        }
        assert_eq!(log.offset_for_timestamp(101).unwrap(), Some((31, 101)));
    }

    #[test]
    fn a_clean_close_then_reopen_keeps_the_log_without_recovery() {
        let dir = TempDir::new().unwrap();
        let config = small_segments();
        let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
        for i in 0..30 {
            log.append(batch(3, 1_000 + i), 2, NOW).unwrap();
        }
        let before = log.read(0, 90, 1 << 20, true).unwrap();
        let max = log.max_timestamp().unwrap();
        log.close().unwrap();
        assert!(dir.path().join(CLEAN_SHUTDOWN_FILE).exists());

        let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
        assert!(!dir.path().join(CLEAN_SHUTDOWN_FILE).exists());
        assert_eq!(log.log_end_offset(), 90);
        assert_eq!(log.recovery_point(), 90);
        assert_eq!(log.read(0, 90, 1 << 20, true).unwrap(), before);
        assert_eq!(log.max_timestamp().unwrap(), max);
        assert_eq!(log.append(batch(1, 5_000), 2, NOW).unwrap().base_offset, 90);
        drop(log);
        // Not closed this time: recovery from the checkpointed recovery point finds the same log.
        let log = Log::open(dir.path(), config, NOW).unwrap();
        assert_eq!(log.log_end_offset(), 91);
        assert_eq!(log.max_timestamp().unwrap(), Some((5_000, 90)));
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
        assert_eq!(handle.dir.as_deref(), Some(dir.path()));
        handle.sync().unwrap();
        log.mark_flushed(handle.flushed_offset).unwrap();
        let after = log.flush_handle();
        assert!(after.files.is_empty() && after.dir.is_none());
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
    fn offset_for_timestamp_finds_the_first_record_at_or_after_the_target() {
        // Kafka's UnifiedLog.fetchOffsetByTimestamp: first record with timestamp >= target.
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            index_interval_bytes: 200,
            ..small_segments()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        for i in 0..30 {
            // Timestamps 100*i + {0, 10, 20}; out of order within a batch in one of them.
            let ts = if i == 7 {
                vec![720, 700, 710]
            } else {
                vec![100 * i, 100 * i + 10, 100 * i + 20]
            };
            log.append(valid(encode_batch(&ts, 100)), 0, NOW).unwrap();
        }
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 0)));
        assert_eq!(log.offset_for_timestamp(5).unwrap(), Some((1, 10)));
        assert_eq!(log.offset_for_timestamp(1_505).unwrap(), Some((46, 1_510)));
        assert_eq!(log.offset_for_timestamp(2_900).unwrap(), Some((87, 2_900)));
        assert_eq!(log.offset_for_timestamp(715).unwrap(), Some((21, 720)));
        assert_eq!(log.offset_for_timestamp(2_921).unwrap(), None);
        for target in (0..2_920).step_by(37) {
            let (offset, ts) = log.offset_for_timestamp(target).unwrap().unwrap();
            assert!(ts >= target);
            // No earlier record qualifies (timestamps are monotonic except in batch 7).
            if !(700..=720).contains(&target) {
                let prev = offset - 1;
                if prev >= 0 {
                    let prev_ts = if (21..24).contains(&prev) {
                        [720, 700, 710][(prev - 21) as usize]
                    } else {
                        100 * (prev / 3) + 10 * (prev % 3)
                    };
                    assert!(prev_ts < target, "target {target}: {offset} but {prev} has {prev_ts}");
                }
            }
        }
    }

    #[test]
    fn offset_for_timestamp_decodes_compressed_batches() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(valid(encode_batch_with(&[1, 2, 3], 50, Compression::Gzip)), 0, NOW)
            .unwrap();
        log.append(valid(encode_batch_with(&[4, 9, 5], 50, Compression::Lz4)), 0, NOW)
            .unwrap();
        assert_eq!(log.offset_for_timestamp(2).unwrap(), Some((1, 2)));
        assert_eq!(log.offset_for_timestamp(6).unwrap(), Some((4, 9)));
        assert_eq!(log.max_timestamp().unwrap(), Some((9, 4)));
    }

    #[test]
    fn max_timestamp_names_the_first_record_carrying_it() {
        // Kafka 4 (KAFKA-16310): the offset of the record with the max timestamp, first on ties.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..10 {
            log.append(valid(encode_batch(&[i, 50 + i, i], 100)), 0, NOW).unwrap();
        }
        log.append(valid(encode_batch(&[3, 90, 90], 100)), 0, NOW).unwrap();
        for i in 0..10 {
            log.append(valid(encode_batch(&[i, 90, i], 100)), 0, NOW).unwrap();
        }
        assert!(segment_files(dir.path(), "log").len() > 1);
        assert_eq!(log.max_timestamp().unwrap(), Some((90, 31)));
    }

    #[test]
    fn the_leader_epoch_checkpoint_survives_reopen_and_follows_truncation() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(batch(2, 0), 0, NOW).unwrap();
        log.append(batch(2, 0), 0, NOW).unwrap();
        log.append(batch(2, 0), 3, NOW).unwrap();
        let end_of_epoch_zero = log.active.size;
        log.append(batch(2, 0), 4, NOW).unwrap();
        assert_eq!(log.latest_epoch(), 4);
        log.close().unwrap();
        let text = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(text, "0\n3\n0 0\n3 4\n4 6\n");

        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(log.latest_epoch(), 4);
        drop(log);
        // A crash that loses epoch 3's and 4's batches takes their epochs with them.
        std::fs::remove_file(dir.path().join(CLEAN_SHUTDOWN_FILE)).ok();
        std::fs::remove_file(dir.path().join(checkpoint::RECOVERY_POINT_FILE)).unwrap();
        let segment = dir.path().join("00000000000000000000.log");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .unwrap()
            .set_len(end_of_epoch_zero - 3)
            .unwrap();
        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(log.log_end_offset(), 4);
        assert_eq!(log.latest_epoch(), 0);
        assert_eq!(
            log.leader_epochs(),
            &[EpochEntry {
                epoch: 0,
                start_offset: 0
            }]
        );
    }

    /// The base offsets of the segment files on disk.
    fn bases_on_disk(dir: &Path) -> Vec<i64> {
        segment_files(dir, "log")
            .iter()
            .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
            .collect()
    }

    /// A log of `n` batches of 3 records with timestamps from `ts0`, in 2 kB segments.
    fn log_of_batches(dir: &Path, n: i64, ts0: i64) -> Log {
        let mut log = Log::open(dir, small_segments(), NOW).unwrap();
        for i in 0..n {
            log.append(batch(3, ts0 + i), 0, NOW).unwrap();
        }
        log
    }

    fn leftovers(dir: &Path) -> Vec<PathBuf> {
        let mut found = segment_files(dir, "deleted");
        found.extend(segment_files(dir, "tmp"));
        found
    }

    #[test]
    fn delete_records_moves_the_log_start_and_survives_reopen() {
        // Kafka's UnifiedLog.maybeIncrementLogStartOffset: the start only moves up.
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, 0);
        assert_eq!(log.delete_records_before(10).unwrap(), 10);
        assert_eq!(log.log_start_offset(), 10);
        assert_eq!(log.delete_records_before(4).unwrap(), 10);
        assert_eq!(log.delete_records_before(10).unwrap(), 10);
        // The batch holding the log start is served whole (records 9..=11).
        assert_eq!(ranges(&log.read(10, 60, 1, true).unwrap()), vec![(9, 11)]);
        assert!(matches!(
            log.delete_records_before(61),
            Err(Error::OffsetOutOfRange {
                asked: 61,
                log_start: 10,
                log_end: 60
            })
        ));
        assert!(matches!(
            log.delete_records_before(-2),
            Err(Error::OffsetOutOfRange { .. })
        ));
        drop(log); // a crash
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(log.log_start_offset(), 10);
        assert_eq!(log.delete_records_before(60).unwrap(), 60);
        log.close().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (60, 60));
        assert_eq!(log.read(60, 60, 1 << 20, true).unwrap().len(), 0);
        assert_eq!(log.append(batch(1, 0), 0, NOW).unwrap().base_offset, 60);
        assert_eq!(ranges(&log.read(60, 61, 1 << 20, true).unwrap()), vec![(60, 60)]);
    }

    #[test]
    fn reading_below_the_log_start_is_offset_out_of_range() {
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, 1_000);
        log.delete_records_before(10).unwrap();
        for offset in [0, 5, 9] {
            assert!(
                matches!(
                    log.read(offset, 60, 1 << 20, true),
                    Err(Error::OffsetOutOfRange { log_start: 10, .. })
                ),
                "offset {offset}"
            );
        }
        // Timestamps below the start's record resolve to the log start, not a deleted record.
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((10, 1_004)));
        assert_eq!(log.offset_for_timestamp(1_004).unwrap(), Some((10, 1_004)));
        assert_eq!(log.offset_for_timestamp(1_005).unwrap(), Some((11, 1_005)));
    }

    #[test]
    fn max_timestamp_ignores_records_below_the_log_start() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(valid(encode_batch(&[100, 500, 100], 100)), 0, NOW).unwrap();
        log.append(valid(encode_batch(&[200, 300, 300], 100)), 0, NOW).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), Some((500, 1)));
        log.delete_records_before(2).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), Some((300, 4)));
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((2, 100)));
        log.delete_records_before(5).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), Some((300, 5)));
        log.delete_records_before(6).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), None);
        assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    }

    #[test]
    fn segments_wholly_below_the_log_start_are_removed_from_disk() {
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, 0);
        let bases = bases_on_disk(dir.path());
        assert!(bases.len() >= 4, "{bases:?}");
        // Inside the second segment: only the first goes.
        log.delete_records_before(bases[1] + 1).unwrap();
        assert_eq!(bases_on_disk(dir.path()), bases[1..]);
        assert_eq!(segment_files(dir.path(), "index").len(), bases.len() - 1);
        assert_eq!(segment_files(dir.path(), "timeindex").len(), bases.len() - 1);
        // Exactly at the third segment's base: the second ends there and goes too.
        log.delete_records_before(bases[2]).unwrap();
        assert_eq!(bases_on_disk(dir.path()), bases[2..]);
        // At the log end: every closed segment goes, the active one stays.
        log.delete_records_before(60).unwrap();
        assert_eq!(bases_on_disk(dir.path()), vec![*bases.last().unwrap()]);
        // The files wait as *.deleted for file.delete.delay.ms (Kafka's), then go.
        let waiting = leftovers(dir.path());
        assert!(!waiting.is_empty());
        assert!(
            waiting.iter().all(|p| p.to_string_lossy().ends_with(".deleted")),
            "{waiting:?}"
        );
        log.remove_due_deletes(now_ms() + 59_000);
        assert_eq!(leftovers(dir.path()).len(), waiting.len(), "not before the delay");
        log.remove_due_deletes(now_ms() + 61_000);
        assert!(leftovers(dir.path()).is_empty());
        assert_eq!(
            log.size_bytes(),
            std::fs::metadata(&segment_files(dir.path(), "log")[0]).unwrap().len()
        );
    }

    #[test]
    fn delete_records_moves_the_first_leader_epoch_up_to_the_log_start() {
        // Kafka's LeaderEpochFileCache.truncateFromStart.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(batch(3, 0), 0, NOW).unwrap();
        log.append(batch(3, 0), 2, NOW).unwrap();
        log.append(batch(3, 0), 5, NOW).unwrap();
        log.delete_records_before(4).unwrap();
        let entry = |epoch, start_offset| EpochEntry { epoch, start_offset };
        assert_eq!(log.leader_epochs(), &[entry(2, 4), entry(5, 6)]);
        log.delete_records_before(6).unwrap();
        assert_eq!(log.leader_epochs(), &[entry(5, 6)]);
        log.delete_records_before(8).unwrap();
        drop(log);
        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(log.leader_epochs(), &[entry(5, 8)]);
    }

    #[test]
    fn retention_by_time_deletes_only_closed_segments_past_retention() {
        // Kafka's UnifiedLog.deleteRetentionMsBreachedSegments: largest timestamp older than
        // now - retention.ms, oldest first, stopping at the first segment kept.
        let dir = TempDir::new().unwrap();
        let old = NOW - 100_000;
        let mut log = log_of_batches(dir.path(), 12, old);
        let old_bases = bases_on_disk(dir.path());
        for i in 0..12 {
            log.append(batch(3, NOW - 1_000 + i), 0, NOW).unwrap();
        }
        let bases = bases_on_disk(dir.path());
        // The segment holding both old and new batches is kept: its largest timestamp is new.
        let straddling = old_bases.len() - 1;
        let outcome = log.apply_retention(50_000, -1, log.log_end_offset(), NOW).unwrap();
        assert_eq!(outcome.deleted_segments, straddling);
        assert_eq!(outcome.log_start_offset, bases[straddling]);
        assert_eq!(bases_on_disk(dir.path()), bases[straddling..]);
        assert_eq!(log.log_start_offset(), bases[straddling]);
        // -1 is no time limit.
        let nothing = log
            .apply_retention(-1, -1, log.log_end_offset(), NOW + 1_000_000)
            .unwrap();
        assert_eq!(nothing.deleted_segments, 0);
        assert_eq!(bases_on_disk(dir.path()), bases[straddling..]);
    }

    #[test]
    fn retention_by_time_rolls_an_expired_active_segment_once_replicated() {
        // Kafka's UnifiedLog.deleteSegments rolls when every segment is deletable.
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 12, NOW - 100_000);
        let segments = bases_on_disk(dir.path()).len();
        let size = log.size_bytes();
        // Not all replicated: the segments above the high watermark and the active one stay.
        let kept = log.apply_retention(50_000, -1, 20, NOW).unwrap();
        assert!(kept.log_start_offset <= 20 && kept.deleted_segments < segments);
        assert_eq!(log.log_end_offset(), 36);

        let outcome = log.apply_retention(50_000, -1, 36, NOW).unwrap();
        assert_eq!(kept.deleted_segments + outcome.deleted_segments, segments);
        assert_eq!(kept.deleted_bytes + outcome.deleted_bytes, size);
        assert_eq!(outcome.log_start_offset, 36);
        assert_eq!(bases_on_disk(dir.path()), vec![36]);
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset(), log.size_bytes()),
            (36, 36, 0)
        );
        // The empty active segment is never deleted, and appends continue at the log end.
        assert_eq!(log.apply_retention(0, 0, 36, NOW).unwrap().deleted_segments, 0);
        assert_eq!(log.append(batch(1, NOW), 0, NOW).unwrap().base_offset, 36);
        drop(log);
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (36, 37));
    }

    #[test]
    fn retention_by_size_keeps_the_newest_segments_that_fit() {
        // Kafka's UnifiedLog.deleteRetentionSizeBreachedSegments: delete while the log minus
        // the segment still holds at least retention.bytes.
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 30, 0);
        let bases = bases_on_disk(dir.path());
        let sizes: Vec<u64> = segment_files(dir.path(), "log")
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        assert_eq!(log.size_bytes(), sizes.iter().sum::<u64>());
        let n = sizes.len();
        // Exactly the last three segments: all older ones go.
        let last_three: u64 = sizes[n - 3..].iter().sum();
        let outcome = log.apply_retention(-1, last_three as i64, 90, NOW).unwrap();
        assert_eq!(outcome.deleted_segments, n - 3);
        assert_eq!(outcome.deleted_bytes, sizes[..n - 3].iter().sum::<u64>());
        assert_eq!(bases_on_disk(dir.path()), bases[n - 3..]);
        assert_eq!(log.log_start_offset(), bases[n - 3]);
        // One byte more than the last two: the third from last must stay.
        let outcome = log
            .apply_retention(-1, (sizes[n - 2] + sizes[n - 1] + 1) as i64, 90, NOW)
            .unwrap();
        assert_eq!(outcome.deleted_segments, 0);
        // Retention below the active segment's size takes every closed segment only.
        let outcome = log.apply_retention(-1, 1, 90, NOW).unwrap();
        assert_eq!(outcome.deleted_segments, 2);
        assert_eq!(bases_on_disk(dir.path()), vec![bases[n - 1]]);
        assert_eq!(log.size_bytes(), sizes[n - 1]);
    }

    #[test]
    fn retention_never_deletes_past_the_high_watermark() {
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, NOW - 100_000);
        let bases = bases_on_disk(dir.path());
        let outcome = log.apply_retention(0, 0, bases[1], NOW).unwrap();
        assert_eq!(outcome.deleted_segments, 1); // only the first segment ends at or below it
        assert_eq!(bases_on_disk(dir.path()), bases[1..]);
        let outcome = log.apply_retention(0, 0, bases[2] - 1, NOW).unwrap();
        assert_eq!(outcome.deleted_segments, 0);
    }

    #[test]
    fn retention_deletes_segments_left_below_the_log_start() {
        // Kafka's UnifiedLog.deleteLogStartOffsetBreachedSegments.
        let dir = TempDir::new().unwrap();
        let log = log_of_batches(dir.path(), 20, NOW);
        let bases = bases_on_disk(dir.path());
        drop(log);
        checkpoint::write_log_start_offset(dir.path(), bases[2] + 1).unwrap();
        // Open drops the segments wholly below the checkpointed start.
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(bases_on_disk(dir.path()), bases[2..]);
        assert_eq!(log.log_start_offset(), bases[2] + 1);
        let outcome = log.apply_retention(-1, -1, 60, NOW).unwrap();
        assert_eq!(outcome.deleted_segments, 0);
        log.delete_records_before(bases[3]).unwrap();
        assert_eq!(bases_on_disk(dir.path()), bases[3..]);
    }

    #[test]
    fn the_log_start_offset_checkpoint_survives_reopen_and_is_clamped_to_the_log() {
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, NOW - 100_000);
        let bases = bases_on_disk(dir.path());
        let outcome = log.apply_retention(-1, 1, 30, NOW).unwrap();
        assert!(outcome.deleted_segments > 0);
        let start = outcome.log_start_offset;
        let text = std::fs::read_to_string(dir.path().join(checkpoint::LOG_START_OFFSET_FILE)).unwrap();
        assert_eq!(text, format!("0\n1\n{start}\n"));
        log.close().unwrap();
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(log.log_start_offset(), start);
        drop(log);
        // A start past the log end (the tail was lost) ends at the log end; one below the first
        // segment (an older checkpoint) starts at the first segment.
        checkpoint::write_log_start_offset(dir.path(), 1_000).unwrap();
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(log.log_start_offset(), 60);
        drop(log);
        checkpoint::write_log_start_offset(dir.path(), 0).unwrap();
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert!(bases.contains(&log.log_start_offset()) && log.log_start_offset() > 0);
        assert_eq!(log.log_start_offset(), bases_on_disk(dir.path())[0]);
    }

    #[test]
    fn leftover_deleted_files_are_removed_at_open() {
        let dir = TempDir::new().unwrap();
        let log = log_of_batches(dir.path(), 20, NOW);
        drop(log);
        for name in [
            "00000000000000000000.log.deleted",
            "00000000000000000000.index.deleted",
            "00000000000000000003.timeindex.deleted",
        ] {
            std::fs::write(dir.path().join(name), b"junk").unwrap();
        }
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert!(leftovers(dir.path()).is_empty(), "{:?}", leftovers(dir.path()));
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 60));
    }

    /// A log of 20 batches whose start checkpoint was raised to the third segment's base, as a
    /// deletion writes it before touching any segment file, then left without a clean close.
    fn log_mid_deletion() -> (TempDir, Vec<i64>) {
        let dir = TempDir::new().unwrap();
        let log = log_of_batches(dir.path(), 20, NOW);
        let bases = bases_on_disk(dir.path());
        drop(log);
        checkpoint::write_log_start_offset(dir.path(), bases[2]).unwrap();
        (dir, bases)
    }

    fn rename_to_deleted(dir: &Path, base: i64, ext: &str) {
        let from = dir.join(segment::file_name(base, ext));
        std::fs::rename(&from, dir.join(format!("{}.deleted", segment::file_name(base, ext)))).unwrap();
    }

    #[test]
    fn a_deletion_cut_short_by_a_crash_recovers_consistently() {
        let (dir, bases) = log_mid_deletion();
        let reference = Log::open(copy_dir(dir.path()).path(), small_segments(), NOW)
            .unwrap()
            .read(bases[2], 60, 1 << 20, true)
            .unwrap();
        // What the crash left: a name and how to make it from a copy of the log.
        type CrashState = (&'static str, fn(&Path, &[i64]));
        let states: [CrashState; 4] = [
            ("checkpoint written, nothing renamed", |_, _| {}),
            ("first segment's indexes renamed", |dir, bases| {
                rename_to_deleted(dir, bases[0], "index");
                rename_to_deleted(dir, bases[0], "timeindex");
            }),
            ("first segment renamed, second's index renamed", |dir, bases| {
                for ext in ["index", "timeindex", "log"] {
                    rename_to_deleted(dir, bases[0], ext);
                }
                rename_to_deleted(dir, bases[1], "index");
            }),
            // The disk persisted the second segment's removal but not the first's: not a hole.
            ("second segment removed before the first", |dir, bases| {
                segment::remove_files(dir, bases[1]).unwrap();
            }),
        ];
        for (state, make) in states {
            let copy = copy_dir(dir.path());
            make(copy.path(), &bases);
            let mut log = Log::open(copy.path(), small_segments(), NOW).unwrap();
            assert_eq!(bases_on_disk(copy.path()), bases[2..], "{state}");
            assert!(leftovers(copy.path()).is_empty(), "{state}");
            assert_eq!(
                (log.log_start_offset(), log.log_end_offset()),
                (bases[2], 60),
                "{state}"
            );
            assert_eq!(log.read(bases[2], 60, 1 << 20, true).unwrap(), reference, "{state}");
            assert_eq!(log.append(batch(1, 0), 0, NOW).unwrap().base_offset, 60, "{state}");
        }
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

    /// `bytes` (one batch) as written by producer `pid` with `epoch`, from sequence `seq`.
    fn from_producer(bytes: &Bytes, pid: i64, epoch: i16, seq: i32, transactional: bool) -> Vec<ValidBatch> {
        let mut b = bytes.to_vec();
        b[43..51].copy_from_slice(&pid.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&seq.to_be_bytes());
        if transactional {
            let attributes = i16::from_be_bytes([b[21], b[22]]) | batch::TRANSACTIONAL;
            b[21..23].copy_from_slice(&attributes.to_be_bytes());
        }
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        valid(Bytes::from(b))
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

    #[test]
    fn producer_state_survives_a_clean_close_and_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let config = small_segments();
        let one = encode_batch(&[1], 100);
        {
            let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
            for seq in 0..60 {
                log.append(from_producer(&one, 3, 1, seq, false), 0, NOW).unwrap();
            }
            assert!(log.segments.len() > 1, "the test needs rolls (snapshots)");
            log.close().unwrap();
        }
        assert!(!producer_state::list_snapshots(dir.path()).unwrap().is_empty());
        {
            let mut log = Log::open(dir.path(), config.clone(), NOW).unwrap();
            assert_eq!(log.producer_state().producer(3).unwrap().last_seq(), 59);
            let retry = log.append(from_producer(&one, 3, 1, 59, false), 0, NOW).unwrap();
            assert!(retry.duplicate);
            for seq in 60..65 {
                log.append(from_producer(&one, 3, 1, seq, false), 0, NOW).unwrap();
            }
            // No close: a crash. The reopen replays the batches after the newest snapshot.
        }
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        assert_eq!(log.producer_state().producer(3).unwrap().last_seq(), 64);
        assert_eq!(log.producer_state().producer(3).unwrap().epoch, 1);
        let stale = log.append(from_producer(&one, 3, 0, 65, false), 0, NOW).unwrap_err();
        assert_eq!(stale.code(), 47); // INVALID_PRODUCER_EPOCH
    }

    #[test]
    fn aborted_transactions_are_indexed_and_rebuilt_after_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let two = encode_batch(&[1, 2], 10);
        let abort = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        {
            let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
            log.append(from_producer(&two, 1, 0, 0, true), 0, NOW).unwrap(); // 0-1
            log.append(from_producer(&two, 2, 0, 0, true), 0, NOW).unwrap(); // 2-3
            assert_eq!(log.first_unstable_offset(), Some(0));
            let m = log.append_marker(1, 0, abort, 0, NOW).unwrap(); // 4
            assert_eq!(m.base_offset, 4);
            assert_eq!(log.first_unstable_offset(), Some(2));
            let aborted = log.aborted_transactions(0, 5);
            assert_eq!(
                (aborted[0].producer_id, aborted[0].first_offset, aborted[0].last_offset),
                (1, 0, 4)
            );
            // A marker from a fenced (older) epoch is refused.
            log.append(from_producer(&two, 3, 5, 0, true), 0, NOW).unwrap();
            assert_eq!(log.append_marker(3, 4, abort, 0, NOW).unwrap_err().code(), 47);
        }
        // Crash: the txnindex entry is on disk; the open transaction of producer 2 is replayed.
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(log.aborted_transactions(0, 100).len(), 1);
        assert_eq!(log.first_unstable_offset(), Some(2));
        log.append_marker(2, 0, Marker { commit: true, ..abort }, 0, NOW)
            .unwrap();
        log.append_marker(3, 5, abort, 0, NOW).unwrap();
        assert_eq!(log.first_unstable_offset(), None);
        assert_eq!(log.aborted_transactions(0, 100).len(), 2);
        log.close().unwrap();
        // The txnindex file has two entries; a clean reopen loads them.
        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(log.aborted_transactions(0, 100).len(), 2);
        assert_eq!(log.aborted_transactions(6, 100).len(), 1);
    }

    /// Issue 8's figure: recovery time of a partition with 10,000 live producer ids, from the
    /// snapshot of a clean shutdown and by replaying the log after a crash. Run by hand:
    /// `cargo test --release --lib log::tests::producer_state_recovery_time -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn producer_state_recovery_time() {
        let dir = tempfile::tempdir().unwrap();
        let one = encode_batch(&[1], 100);
        let producers = 10_000i64;
        {
            let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
            for round in 0..3 {
                for pid in 0..producers {
                    log.append(from_producer(&one, pid, 0, round, false), 0, NOW).unwrap();
                }
            }
            log.close().unwrap();
        }
        let start = std::time::Instant::now();
        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        let from_snapshot = start.elapsed();
        assert_eq!(log.producer_state().producers().len(), producers as usize);
        drop(log); // no close: the next open is a crash recovery
        std::fs::remove_file(dir.path().join(producer_state_snapshot_name(30_000))).unwrap();
        let start = std::time::Instant::now();
        let log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        let replayed = start.elapsed();
        assert_eq!(log.producer_state().producers().len(), producers as usize);
        println!(
            "10,000 producers, 30,000 batches: open from snapshot {:?}, open by replay after a crash {:?}",
            from_snapshot, replayed
        );
    }

    fn producer_state_snapshot_name(offset: i64) -> String {
        segment::file_name(offset, "snapshot")
    }
}
