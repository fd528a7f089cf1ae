//! Helpers shared by the log's unit tests (`Log` built on a temporary directory).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use bytes::Bytes;
use tempfile::TempDir;

use super::batch::{self, ValidBatch, validate_batches};
use super::{Log, LogConfig};
use crate::log::batch::tests::encode_batch;

pub(super) const NOW: i64 = 1_700_000_000_000;

pub(super) fn valid(bytes: Bytes) -> Vec<ValidBatch> {
    validate_batches(&bytes, 1 << 20).unwrap()
}

/// A batch of `n` records with timestamps `ts0, ts0 + 1, ...` and 100-byte values.
pub(super) fn batch(n: usize, ts0: i64) -> Vec<ValidBatch> {
    let ts: Vec<i64> = (0..n as i64).map(|i| ts0 + i).collect();
    valid(encode_batch(&ts, 100))
}

pub(super) fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 2_000,
        index_interval_bytes: 300,
        ..LogConfig::default()
    }
}

/// The batches of a read, as (base offset, last offset).
pub(super) fn ranges(bytes: &Bytes) -> Vec<(i64, i64)> {
    validate_batches(bytes, usize::MAX)
        .unwrap()
        .iter()
        .map(|b| (b.base_offset(), b.base_offset() + b.offset_count() - 1))
        .collect()
}

pub(super) fn segment_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

pub(super) fn copy_dir(from: &Path) -> TempDir {
    let to = TempDir::new().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
    }
    to
}

/// The base offsets of the segment files on disk.
pub(super) fn bases_on_disk(dir: &Path) -> Vec<i64> {
    segment_files(dir, "log")
        .iter()
        .map(|p| p.file_stem().unwrap().to_str().unwrap().parse().unwrap())
        .collect()
}

/// A log of `n` batches of 3 records with timestamps from `ts0`, in 2 kB segments.
pub(super) fn log_of_batches(dir: &Path, n: i64, ts0: i64) -> Log {
    let mut log = Log::open(dir, small_segments(), NOW).unwrap();
    for i in 0..n {
        log.append(batch(3, ts0 + i), 0, NOW).unwrap();
    }
    log
}

pub(super) fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut found = segment_files(dir, "deleted");
    found.extend(segment_files(dir, "tmp"));
    found
}

/// `bytes` (one batch) as written by producer `pid` with `epoch`, from sequence `seq`.
pub(super) fn from_producer(bytes: &Bytes, pid: i64, epoch: i16, seq: i32, transactional: bool) -> Vec<ValidBatch> {
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
