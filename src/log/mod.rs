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
mod index;
mod segment;

use std::fs::File;
use std::io::{ErrorKind, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

pub use batch::{ValidBatch, validate_batches};
pub use checkpoint::EpochEntry;

use batch::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use checkpoint::{CLEAN_SHUTDOWN_FILE, LeaderEpochCache, TEMP_SUFFIX};
use segment::Segment;

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
}

/// Files that must be fsynced for everything up to `flushed_offset` (exclusive) to be durable.
pub struct FlushHandle {
    files: Vec<(Arc<File>, PathBuf)>,
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
        Ok(())
    }
}

/// A partition's log. Not `Sync`-shared by itself: the caller wraps it in a lock.
pub struct Log {
    dir: PathBuf,
    /// The partition directory, fsynced with the segments when a roll created a file in it.
    dir_handle: Arc<File>,
    config: LogConfig,
    /// Older segments by increasing base offset, each continuing where the previous ends.
    segments: Vec<Segment>,
    /// The segment appends go to; it continues the last of `segments`.
    active: Segment,
    /// Everything below this offset is known to be fsynced; recovery validates from the segment
    /// holding it onward.
    recovery_point: i64,
    epochs: LeaderEpochCache,
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
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = marker.try_exists().map_err(|e| Error::storage("stat", &marker, e))?;
        let bases = list_segments(dir)?;
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
            if !trusted && segment.recover(&config)? {
                // Truncated: later segments would follow a hole.
                segments.push(segment);
                for &later in &bases[i + 1..] {
                    Segment::delete_files(dir, later)?;
                }
                break;
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
        let log = Log {
            dir: dir.to_path_buf(),
            dir_handle: Arc::new(checkpoint::open_dir(dir)?),
            config,
            segments,
            active,
            recovery_point,
            epochs,
        };
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
        if batches.is_empty() {
            return Err(Error::CorruptBatch("append of no record batch".into()));
        }
        let log_append_time = (self.config.timestamp_type == TimestampType::LogAppendTime).then_some(now_ms);
        let base_offset = self.log_end_offset();
        let mut headers = Vec::with_capacity(batches.len());
        let mut next_offset = base_offset;
        for b in &batches {
            headers.push(batch::stamped_header(b, next_offset, leader_epoch, log_append_time));
            next_offset += b.offset_count();
        }
        // As Kafka's UnifiedLog.append: the epoch is recorded before the data it covers.
        self.epochs.assign(leader_epoch, base_offset)?;

        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(2 * batches.len());
        let mut run_start = self.active.tail();
        for (b, stamped) in batches.iter().zip(&headers) {
            let header = BatchHeader::parse(stamped)?;
            if self
                .active
                .should_roll(header.size, header.last_offset(), now_ms, &self.config)
            {
                self.write_run(&mut slices, run_start)?;
                self.roll()?;
                run_start = self.active.tail();
            }
            self.active.account(&header, &self.config);
            self.active.note_append_time(now_ms);
            slices.push(IoSlice::new(stamped));
            slices.push(IoSlice::new(&b.bytes()[HEADER_LEN..]));
        }
        self.write_run(&mut slices, run_start)?;
        if self.active.pending_index_entries() >= INDEX_ENTRIES_PENDING_MAX {
            self.active.persist_indexes()?;
        }
        debug_assert_eq!(self.log_end_offset(), next_offset);
        Ok(AppendInfo {
            base_offset,
            last_offset: next_offset - 1,
            log_append_time_ms: log_append_time.unwrap_or(-1),
        })
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
        if new_names {
            files.push((Arc::clone(&self.dir_handle), self.dir.clone()));
        }
        FlushHandle {
            files,
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
    /// last batch through the offset index and a few header reads.
    pub fn read(&self, offset: i64, max_offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<Bytes> {
        let (log_start, log_end) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start || offset > log_end {
            return Err(Error::OffsetOutOfRange {
                asked: offset,
                log_start,
                log_end,
            });
        }
        if offset >= log_end || offset >= max_offset {
            return Ok(Bytes::new());
        }
        // An offset at the very end of a segment is served by the next one.
        let mut i = self.floor_segment(offset);
        let segment = loop {
            match self.segment_at(i) {
                Some(s) if s.next_offset > offset => break s,
                Some(_) => i += 1,
                None => return Ok(Bytes::new()),
            }
        };
        let Some((start, first)) = segment.find_batch(offset)? else {
            return Ok(Bytes::new());
        };
        if first.last_offset() >= max_offset {
            return Ok(Bytes::new());
        }
        let end = if max_offset < segment.next_offset {
            segment
                .find_batch(max_offset)?
                .map_or(segment.size, |(position, _)| position)
        } else {
            segment.size
        };
        let budget = if min_one_batch {
            max_bytes.max(first.size)
        } else {
            max_bytes
        };
        let len = usize::try_from(end - start).unwrap_or(usize::MAX).min(budget);
        if len < first.size {
            return Ok(Bytes::new());
        }
        let mut bytes = segment.read_at(start, len)?;
        bytes.truncate(whole_batches_len(&bytes));
        Ok(Bytes::from(bytes))
    }

    pub fn log_start_offset(&self) -> i64 {
        self.segments.first().map_or(self.active.base_offset, |s| s.base_offset)
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
        for segment in self.all_segments() {
            if segment.size == 0 || segment.max_timestamp < timestamp_ms {
                continue;
            }
            let mut from = segment.timestamp_scan_start(timestamp_ms);
            while let Some((position, header)) = segment.scan(from, |h| h.max_timestamp >= timestamp_ms)? {
                let bytes = segment.read_at(position, header.size)?;
                if let Some(found) = find_record(bytes, &header, |ts| ts >= timestamp_ms)? {
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
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let mut best: Option<&Segment> = None;
        for segment in self.all_segments() {
            if segment.size > 0
                && segment.max_timestamp >= 0
                && best.is_none_or(|b| segment.max_timestamp > b.max_timestamp)
            {
                best = Some(segment);
            }
        }
        let Some(segment) = best else { return Ok(None) };
        let target = segment.max_timestamp;
        if let Some((position, header)) = segment.find_batch(segment.offset_of_max_timestamp)? {
            let bytes = segment.read_at(position, header.size)?;
            if let Some((offset, _)) = find_record(bytes, &header, |ts| ts == target)? {
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
        let log_end_offset = self.log_end_offset();
        self.recovery_point = log_end_offset;
        checkpoint::write_recovery_point(&self.dir, log_end_offset, true)?;
        checkpoint::write_atomically(&self.dir.join(CLEAN_SHUTDOWN_FILE), b"", true)
    }

    /// Internal invariants, checked in debug builds.
    fn debug_check(&self) {
        let mut expected = self.log_start_offset();
        for segment in self.all_segments() {
            debug_assert_eq!(segment.base_offset, expected, "segments contiguous");
            expected = segment.next_offset;
        }
        debug_assert!(self.recovery_point <= self.log_end_offset());
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

/// The offset and timestamp of the first record of the batch `bytes` whose timestamp `matches`.
fn find_record(bytes: Vec<u8>, header: &BatchHeader, matches: impl Fn(i64) -> bool) -> Result<Option<(i64, i64)>> {
    if header.is_log_append_time() {
        // Kafka's DefaultRecordBatch gives every record of a LogAppendTime batch the batch's
        // maxTimestamp; the record deltas still hold the producer's times.
        let ts = header.max_timestamp;
        return Ok(matches(ts).then_some((header.base_offset, ts)));
    }
    let mut bytes = Bytes::from(bytes);
    let records = RecordBatchDecoder::decode(&mut bytes)
        .map_err(|e| Error::CorruptBatch(format!("cannot decode batch at offset {}: {e:#}", header.base_offset)))?;
    Ok(records
        .records
        .iter()
        .find(|r| matches(r.timestamp))
        .map(|r| (r.offset, r.timestamp)))
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
        if name.ends_with(TEMP_SUFFIX) {
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
                log_append_time_ms: -1
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
        assert!(synced.contains(&&dir.path().to_path_buf()));
        handle.sync().unwrap();
        log.mark_flushed(handle.flushed_offset).unwrap();
        assert!(log.flush_handle().files.is_empty());
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
}
