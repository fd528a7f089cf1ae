//! Removing the oldest data: retention passes (`retention.ms`, `retention.bytes`),
//! DeleteRecords (raising the log start offset), and deleting segments, at once or after
//! `file.delete.delay.ms` as `*.deleted` files.

use std::io::ErrorKind;

use super::Log;
use super::checkpoint;
use super::segment::{self, Segment};
use crate::error::{Error, Result};

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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Log {
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
        if self.log_start_unsaved && self.persist_log_start().is_ok() {
            self.log_start_unsaved = false;
        }
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
        if count > self.segments.len()
            && let Err(e) = self.roll()
        {
            // A full disk can refuse the roll's new files: the closed segments still go, which
            // frees the space the next pass rolls with.
            tracing::warn!(dir = %self.dir.display(), error = %e, "retention: rolling the active segment failed; deleting the closed ones");
            return self.delete_oldest(self.segments.len());
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
    ///
    /// The log start moves in memory first, then the files go, then it is checkpointed: on a
    /// full disk the checkpoint (a new file) can be written only once the segments are gone,
    /// and retention is what frees the disk. A crash before the checkpoint loses nothing:
    /// open raises the log start to the first segment on disk. A checkpoint that still fails
    /// is logged and tried again at each pass (`log_start_unsaved`); it is written even when a
    /// segment's files could not be removed, so that open does not take the start back down to
    /// them (DeleteRecords, whose start may lie inside a
    /// segment, checkpoints before it deletes: `raise_log_start_offset`).
    fn delete_oldest(&mut self, count: usize) -> Result<(usize, u64)> {
        let count = count.min(self.segments.len());
        if count == 0 {
            return Ok((0, 0));
        }
        let first_kept = self
            .segment_at(count)
            .map_or(self.active.base_offset, |s| s.base_offset);
        let moved = self.move_log_start(first_kept);
        // Out of the segment list first, so that no lookup can reach a segment whose files are
        // going; if a deletion fails, the rest stay on disk below the log start, and the next
        // open deletes them.
        let deleted: Vec<Segment> = self.segments.drain(..count).collect();
        self.publish_snapshot();
        let bytes = deleted.iter().map(|s| s.size).sum();
        let removed = self.remove_segments(deleted, "retention");
        // Checkpointed even when a file stayed: open must not take the start back down to it.
        if moved {
            let persisted = self.persist_log_start();
            if let Err(e) = &persisted {
                tracing::warn!(dir = %self.dir.display(), error = %e, "retention: the new log start offset is not checkpointed yet; trying again at each pass");
            }
            self.log_start_unsaved = persisted.is_err();
        }
        removed?;
        Ok((count, bytes))
    }

    /// Deletes segments already out of the segment list and the published snapshot.
    pub(super) fn remove_segments(&mut self, segments: Vec<Segment>, reason: &'static str) -> Result<()> {
        for segment in segments {
            tracing::info!(
                dir = %self.dir.display(),
                base_offset = segment.base_offset,
                next_offset = segment.next_offset,
                bytes = segment.size,
                reason,
                "deleting segment"
            );
            let base_offset = segment.base_offset;
            drop(segment);
            self.remove_segment_files(base_offset)?;
        }
        Ok(())
    }

    /// Takes the files of the segment at `base_offset` out of the directory (Kafka's
    /// `.deleted` renames, see `segment::remove_files`): removed now, or after
    /// `file.delete.delay.ms`. Readers of older snapshots go on reading them through their
    /// open descriptors.
    pub(super) fn remove_segment_files(&mut self, base_offset: i64) -> Result<()> {
        if self.config.file_delete_delay_ms <= 0 {
            return segment::remove_files(&self.dir, base_offset);
        }
        let due = now_ms().saturating_add(self.config.file_delete_delay_ms);
        for path in segment::rename_deleted(&self.dir, base_offset)? {
            self.pending_deletes.push((path, due));
        }
        Ok(())
    }

    /// Raises the log start offset (never lowers it): checkpoint first, then memory and the
    /// leader-epoch cache (Kafka's `maybeIncrementLogStartOffset`).
    fn raise_log_start_offset(&mut self, offset: i64) -> Result<()> {
        if offset <= self.log_start_offset {
            return Ok(());
        }
        checkpoint::write_log_start_offset(&self.dir, offset)?;
        self.move_log_start(offset);
        self.epochs.truncate_from_start(offset)
    }

    /// Raises the log start offset in memory (never lowers it) and publishes it; true when it
    /// moved. The caller checkpoints it.
    fn move_log_start(&mut self, offset: i64) -> bool {
        if offset <= self.log_start_offset {
            return false;
        }
        debug_assert!(offset <= self.log_end_offset(), "log start beyond the log end");
        self.log_start_offset = offset;
        // Producers stay (their ids expire by producer.id.expiration.ms, as in Kafka); the
        // aborted transactions of removed segments go.
        self.producers.on_log_start_moved(offset);
        self.publish_txns();
        self.publish_snapshot();
        true
    }

    /// Checkpoints the log start offset, and drops the leader epochs wholly below it.
    fn persist_log_start(&mut self) -> Result<()> {
        checkpoint::write_log_start_offset(&self.dir, self.log_start_offset)?;
        self.epochs.truncate_from_start(self.log_start_offset)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::log::test_support::*;
    use crate::log::{EpochEntry, LogConfig};
    use tempfile::TempDir;

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
    fn retention_frees_a_full_disk_before_it_checkpoints_the_new_log_start() {
        // On a full disk the log-start checkpoint (a new file) cannot be written until the
        // segments are gone: retention deletes them first, checkpoints at a later pass, and a
        // reopen before that finds the start at the first segment left.
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 30, 0);
        let bases = bases_on_disk(dir.path());
        let n = bases.len();
        let sizes: Vec<u64> = segment_files(dir.path(), "log")
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect();
        let last_three: u64 = sizes[n - 3..].iter().sum();
        // A directory where the checkpoint's temporary file goes: every write of it fails.
        let blocker = dir.path().join("log-start-offset-checkpoint.tmp");
        std::fs::create_dir(&blocker).unwrap();
        let outcome = log.apply_retention(-1, last_three as i64, 90, NOW).unwrap();
        assert_eq!(outcome.deleted_segments, n - 3);
        assert_eq!(bases_on_disk(dir.path()), bases[n - 3..]);
        assert_eq!(log.log_start_offset(), bases[n - 3]);
        assert_eq!(checkpoint::read_log_start_offset(dir.path()).unwrap(), None);
        std::fs::remove_dir(&blocker).unwrap();
        log.apply_retention(-1, last_three as i64, 90, NOW).unwrap();
        assert_eq!(
            checkpoint::read_log_start_offset(dir.path()).unwrap(),
            Some(bases[n - 3])
        );
        // Without the checkpoint, a reopen starts at the first segment on disk all the same.
        std::fs::remove_file(dir.path().join("log-start-offset-checkpoint")).unwrap();
        drop(log);
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(log.log_start_offset(), bases[n - 3]);
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
}
