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

pub mod batch;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

pub use batch::{ValidBatch, validate_batches};

use crate::error::Result;

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
            file.sync_data().map_err(|e| crate::error::Error::storage("fsync", path, e))?;
        }
        Ok(())
    }
}

/// A partition's log. Not `Sync`-shared by itself: the caller wraps it in a lock.
pub struct Log {
    _dir: PathBuf,
}

impl Log {
    /// Opens (creating if absent) the log in `dir`, recovering it: the part after the recovery
    /// point is validated batch by batch (magic, lengths, CRC32C, offsets contiguous) and
    /// truncated at the first bad byte; missing or inconsistent indexes are rebuilt. After a
    /// clean `close` the open is fast (no scan).
    pub fn open(_dir: &Path, _config: LogConfig, _now_ms: i64) -> Result<Log> {
        todo!()
    }

    /// Appends validated batches, assigning offsets from the log end, stamping
    /// `partitionLeaderEpoch = leader_epoch` and for LogAppendTime `maxTimestamp = now_ms`
    /// (recomputing the CRC only then). Rolls segments by size, age and index fullness. Records
    /// a new leader epoch in the leader-epoch checkpoint. Writes to the page cache only.
    pub fn append(
        &mut self,
        _batches: Vec<ValidBatch>,
        _leader_epoch: i32,
        _now_ms: i64,
    ) -> Result<AppendInfo> {
        todo!()
    }

    /// The files to fsync to make everything appended so far durable.
    pub fn flush_handle(&self) -> FlushHandle {
        todo!()
    }

    /// Records that everything below `offset` is durable (after `FlushHandle::sync`), and
    /// checkpoints the recovery point.
    pub fn mark_flushed(&mut self, _offset: i64) -> Result<()> {
        todo!()
    }

    /// Whole batches from the one containing `offset` onward, ending before `max_offset`
    /// (exclusive; the caller passes its high watermark), at most `max_bytes` long except that
    /// the first batch is returned whole when `min_one_batch` (KIP-74). Empty when
    /// `offset == max_offset` or `offset == log end`. `OffsetOutOfRange` when `offset` is below
    /// the log start or above the log end.
    pub fn read(
        &self,
        _offset: i64,
        _max_offset: i64,
        _max_bytes: usize,
        _min_one_batch: bool,
    ) -> Result<Bytes> {
        todo!()
    }

    pub fn log_start_offset(&self) -> i64 {
        todo!()
    }

    pub fn log_end_offset(&self) -> i64 {
        todo!()
    }

    /// ListOffsets by timestamp: the offset and timestamp of the first record whose timestamp is
    /// at least `timestamp_ms` (through the time index), or None when there is none.
    pub fn offset_for_timestamp(&self, _timestamp_ms: i64) -> Result<Option<(i64, i64)>> {
        todo!()
    }

    /// ListOffsets max timestamp (-3): the largest timestamp in the log and the offset of the
    /// record that carries it, or None for an empty log.
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        todo!()
    }

    /// The latest leader epoch in the leader-epoch checkpoint (-1 when none).
    pub fn latest_epoch(&self) -> i32 {
        todo!()
    }

    /// Flushes, writes indexes and checkpoints, and marks the log cleanly closed so the next open
    /// skips recovery.
    pub fn close(self) -> Result<()> {
        todo!()
    }
}
