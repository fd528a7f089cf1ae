//! Opening a log (Kafka's `LogLoader`): finishing interrupted compactions and deletions,
//! reading the recovery-point, log-start-offset and leader-epoch checkpoints, validating the
//! segments after the recovery point and truncating at the first bad byte, then rebuilding the
//! producer state from its latest snapshot and the batches after it.

use std::io::ErrorKind;
use std::path::Path;

use super::checkpoint::{self, CLEAN_SHUTDOWN_FILE, LeaderEpochCache, TEMP_SUFFIX};
use super::producer_state::{self, AbortedTxn, ProducerBatch, ProducerState};
use super::segment::{self, DELETED_SUFFIX, Segment};
use super::{Log, LogConfig, cleaner};
use crate::error::{Error, Result};

impl Log {
    /// Opens (creating if absent) the log in `dir`, recovering it: the part after the recovery
    /// point is validated batch by batch (magic, lengths, CRC32C, offsets contiguous) and
    /// truncated at the first bad byte; missing or inconsistent indexes are rebuilt. After a
    /// clean `close` the open is fast (no scan).
    ///
    /// Offset gaps and batches with fewer records than offsets are accepted below the
    /// cleaner's checkpoint (`compacted_below`: its own output) and, in a compacted log
    /// (`LogConfig::compact`), everywhere: a compacted follower appends its cleaned leader's
    /// log as it is (follower.rs), and cutting it at the first gap would lose what it
    /// acknowledged. That costs no torn-tail detection: a write cut short leaves a partial
    /// batch (framing fails) or bytes that were never a whole batch (CRC32C fails), and a
    /// batch whose offsets go backwards is still cut, as everything after it. Only a
    /// baseOffset damaged upwards with its CRC-covered part intact (the CRC starts after the
    /// baseOffset, as in Kafka) would pass as a gap, as it does in Kafka's recovery, which
    /// never checks contiguity; one beyond the segment's 32-bit offset range is cut.
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log> {
        let new_directory = !dir.try_exists().map_err(|e| Error::storage("stat", dir, e))?;
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
            // Below `compacted_below` the cleaner may have left offset gaps; a compacted log's
            // follower may have appended them anywhere (see above).
            let compacted = config.compact || base < compacted_below;
            if let Some(prev) = segments.last()
                && prev.next_offset != base
            {
                // Segments continue one another: a compacted one was extended to this base
                // below, so what is left is a gap in a log that may have none, or a segment
                // whose batches run past this base (offsets going backwards). What follows
                // cannot be served.
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
            let trusted = i < recover_from && segment.trust(loaded, bases.get(i + 1).copied(), compacted)?;
            if !trusted && segment.recover(&config, compacted)? {
                // Truncated: later segments would follow a hole.
                segments.push(segment);
                for &later in &bases[i + 1..] {
                    Segment::delete_files(dir, later)?;
                }
                break;
            }
            if compacted && let Some(&next) = bases.get(i + 1) {
                // A cleaned segment spans up to the next one even when its last offsets are
                // gone, as does a follower's segment rolled at a batch after a gap.
                segment.next_offset = segment.next_offset.max(next);
                segment.publish();
            }
            segments.push(segment);
        }
        let mut active = match segments.pop() {
            Some(segment) => segment,
            // A log emptied to start over at an offset (`truncate_fully_and_start_at`) that
            // stopped before its new segment existed starts at its checkpointed start.
            None => Segment::create(dir, checkpointed_start.unwrap_or(0).max(0), true)?,
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
        let sealed: Vec<_> = segments.iter().map(Segment::published).collect();
        let reader = std::sync::Arc::new(super::LogReader::new(&sealed, active.shared(), log_start_offset));
        let mut log = Log {
            reader,
            dir: dir.to_path_buf(),
            config,
            segments,
            active,
            recovery_point,
            recovery_point_written: None,
            log_start_offset,
            epochs,
            pending_deletes: Vec::new(),
            log_start_unsaved: false,
            producers: ProducerState::default(),
            truncations: 0,
            new_directory,
        };
        log.producers = log.load_producer_state()?;
        log.publish_txns();
        log.debug_check();
        Ok(log)
    }

    /// Rebuilds the producer state at open (Kafka's `LogLoader` / `rebuildProducerState`): the
    /// latest snapshot at or below the log end, then the batches after it. Aborted transactions
    /// come from the segments' `.txnindex` files, completed by what the replay finds.
    pub(super) fn load_producer_state(&mut self) -> Result<ProducerState> {
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
                let marker = if h.is_control() {
                    let bytes = segment.read_at(pos, h.size)?;
                    producer_state::read_marker(&bytes)
                } else {
                    None
                };
                if h.is_control() && marker.is_none() {
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
}

/// Base offsets of the segments in `dir`, increasing. Removes leftover temporary files of
/// interrupted checkpoint writes.
pub(super) fn list_segments(dir: &Path) -> Result<Vec<i64>> {
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
    use crate::log::EpochEntry;
    use crate::log::batch::HEADER_LEN;
    use crate::log::batch::tests::encode_batch;
    use crate::log::producer_state::Marker;
    use crate::log::test_support::*;
    use tempfile::TempDir;

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
    fn a_damaged_recovery_point_checkpoint_recovers_the_whole_log() {
        // Written without fsync, it can come back empty or torn after a power loss; the log
        // must open (validated from its first segment), not go offline.
        for damage in [&b""[..], b"0\n1\n", b"\xff\xfe\x00", b"7\n1\n12\n"] {
            let dir = TempDir::new().unwrap();
            let log = log_of_batches(dir.path(), 20, NOW);
            let end = log.log_end_offset();
            log.close().unwrap();
            std::fs::remove_file(dir.path().join(CLEAN_SHUTDOWN_FILE)).unwrap();
            std::fs::write(dir.path().join(checkpoint::RECOVERY_POINT_FILE), damage).unwrap();
            // A torn tail: the recovery runs and cuts it.
            let last = *bases_on_disk(dir.path()).last().unwrap();
            let segment = dir.path().join(format!("{last:020}.log"));
            let len = std::fs::metadata(&segment).unwrap().len();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&segment)
                .unwrap()
                .set_len(len - 5)
                .unwrap();
            let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
            assert!(log.log_end_offset() < end, "{damage:?}: the torn batch is cut");
            assert!(log.log_end_offset() >= end - 3, "{damage:?}: the rest stays");
        }
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
    fn a_transaction_version_2_marker_must_be_newer_than_the_producers_epoch() {
        // KIP-1228: the coordinator bumps the epoch before it writes version 2 markers.
        let dir = tempfile::tempdir().unwrap();
        let two = encode_batch(&[1, 2], 10);
        let commit = Marker {
            commit: true,
            coordinator_epoch: 0,
        };
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(from_producer(&two, 1, 4, 0, true), 0, NOW).unwrap(); // 0-1, epoch 4
        // A marker of the transaction's own epoch would end a transaction of that epoch: refused
        // under version 2 (47 INVALID_PRODUCER_EPOCH), as is an older one.
        assert_eq!(log.append_marker(1, 4, commit, 2, 0, NOW).unwrap_err().code(), 47);
        assert_eq!(log.append_marker(1, 3, commit, 2, 0, NOW).unwrap_err().code(), 47);
        assert_eq!(log.first_unstable_offset(), Some(0));
        let m = log.append_marker(1, 5, commit, 2, 0, NOW).unwrap(); // 2, the bumped epoch
        assert_eq!((m.base_offset, m.duplicate), (2, false));
        assert_eq!(log.first_unstable_offset(), None);
        // The same marker again (a retry whose answer was lost): nothing appended.
        let again = log.append_marker(1, 5, commit, 2, 0, NOW).unwrap();
        assert_eq!((again.last_offset, again.duplicate, log.log_end_offset()), (2, true, 3));
        // The next transaction, at epoch 5: a late copy of that marker must not end it.
        log.append(from_producer(&two, 1, 5, 0, true), 0, NOW).unwrap(); // 3-4
        assert_eq!(log.append_marker(1, 5, commit, 2, 0, NOW).unwrap_err().code(), 47);
        assert_eq!(log.first_unstable_offset(), Some(3));
        // Versions 0 and 1 take the producer's own epoch.
        assert_eq!(log.append_marker(1, 5, commit, 0, 0, NOW).unwrap().base_offset, 5);
        assert_eq!(log.first_unstable_offset(), None);
        // A retry is taken only from a coordinator not older than the one that wrote the marker.
        let newer = Marker {
            coordinator_epoch: 1,
            ..commit
        };
        log.append_marker(1, 6, newer, 2, 0, NOW).unwrap(); // 6, at coordinator epoch 1
        assert_eq!(log.append_marker(1, 6, commit, 2, 0, NOW).unwrap_err().code(), 47);
        assert!(log.append_marker(1, 6, newer, 2, 0, NOW).unwrap().duplicate);
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
            let m = log.append_marker(1, 0, abort, 0, 0, NOW).unwrap(); // 4
            assert_eq!(m.base_offset, 4);
            assert_eq!(log.first_unstable_offset(), Some(2));
            let aborted = log.aborted_transactions(0, 5);
            assert_eq!(
                (aborted[0].producer_id, aborted[0].first_offset, aborted[0].last_offset),
                (1, 0, 4)
            );
            // A marker from a fenced (older) epoch is refused.
            log.append(from_producer(&two, 3, 5, 0, true), 0, NOW).unwrap();
            assert_eq!(log.append_marker(3, 4, abort, 0, 0, NOW).unwrap_err().code(), 47);
        }
        // Crash: the txnindex entry is on disk; the open transaction of producer 2 is replayed.
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(log.aborted_transactions(0, 100).len(), 1);
        assert_eq!(log.first_unstable_offset(), Some(2));
        log.append_marker(2, 0, Marker { commit: true, ..abort }, 0, 0, NOW)
            .unwrap();
        log.append_marker(3, 5, abort, 0, 0, NOW).unwrap();
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
    /// `cargo test --release --lib log::recovery::tests::producer_state_recovery_time -- --ignored --nocapture`
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
