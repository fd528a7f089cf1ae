//! A follower's log operations (Kafka's `UnifiedLog.appendAsFollower`, `truncateTo` and
//! `truncateFullyAndStartAt`): appending the leader's batches exactly as the leader stored
//! them, and cutting a tail that diverged from the leader's log.
//!
//! A compacted log's leader cleans its log: what it serves has offset gaps and batches with
//! fewer records than offsets. Its follower stores them so (the gaps lie inside its segments,
//! which span up to the next one as cleaned segments do) and `Log::open` keeps them
//! (recovery.rs); a log that is not compacted has neither, and a follower of one refuses them.
//!
//! A truncation must leave, whenever the process stops, a directory that `Log::open`
//! recovers to a prefix of the log it cut (or the empty log it starts over with). So the
//! checkpoints a cut would make wrong are lowered first, durably: the recovery point (open
//! then validates the cut segment and everything written after it, never trusting data
//! written after the cut as already fsynced), the log start offset and the cleaner's
//! checkpoint. Then segments go from the top down, so what is left is a prefix; the segment
//! holding the new end is cut and fsynced; only then are the leader epochs and producer
//! snapshots above the new end dropped (open drops those past its log end too, so a crash
//! before that is harmless, while dropping them before the data would describe a shorter log
//! than the one a crash could leave).
//!
//! Readers holding an older snapshot keep reading deleted segments through their open files;
//! a read of the segment that was cut in place fails instead of returning bytes that may be
//! gone or rewritten (`SegmentRef::unchanged`). A flush handle or a clean plan taken before a
//! truncation is void (`Log::truncations`).

use bytes::Bytes;

use super::batch::{self, BatchHeader, HEADER_LEN};
use super::checkpoint;
use super::producer_state::{self, ProducerBatch, ProducerState};
use super::segment::Segment;
use super::{AppendInfo, Log, cleaner, validate_batches};
use crate::error::{Error, Result};

impl Log {
    /// Appends the records of a fetch response from the leader exactly as the leader stored
    /// them: base offsets, partition leader epochs, timestamps and CRCs are kept, the bytes
    /// written as they came. A partial batch at the end (the leader's read stops at a byte
    /// limit) is left out; None when no whole batch is left.
    ///
    /// Every batch is validated first (framing, magic 2, CRC32C: `CorruptBatch`,
    /// `UnsupportedMagic`), with no `max.message.bytes` bound (the leader accepted it, as
    /// Kafka's follower ignores the record size), and must start where the one before it, or
    /// the log, ends (`UnexpectedAppendOffset`); nothing is written unless all pass. Each new
    /// leader epoch is recorded at its first batch before the data (Kafka's
    /// `maybeAssignEpochStartOffset`), and producer state follows the batches with no
    /// sequence or epoch check (Kafka's `AppendOrigin.REPLICATION`: the leader checked them),
    /// markers included: aborted transactions go to the `.txnindex` as on the leader.
    ///
    /// A compacted log (`LogConfig::compact`) copies a leader whose cleaner ran, as Kafka's
    /// `UnifiedLog.appendAsFollower` does: a batch may start above where the one before it
    /// ends, and the first one above the log end (the log end lay in offsets the leader's
    /// cleaner removed: it jumps), offsets only increasing; and a batch may hold fewer records
    /// than offsets (checked as recovery checks cleaner output, `batch::check_compacted`).
    /// `Log::open` keeps such a log as written (recovery.rs).
    pub fn append_as_follower(&mut self, records: Bytes, now_ms: i64) -> Result<Option<AppendInfo>> {
        let whole = whole_batches_prefix(&records)?;
        if whole == 0 {
            return Ok(None);
        }
        let compacted = self.config.compact;
        let batches = if compacted {
            batch::validate_compacted_batches(&records.slice(..whole))?
        } else {
            validate_batches(&records.slice(..whole), usize::MAX)?
        };
        let mut headers: Vec<BatchHeader> = Vec::with_capacity(batches.len());
        let mut producer_batches = Vec::with_capacity(batches.len());
        let mut next_offset = self.log_end_offset();
        for b in &batches {
            let header = BatchHeader::parse(b.bytes())?;
            let continues = header.base_offset == next_offset || (compacted && header.base_offset > next_offset);
            if !continues {
                return Err(Error::UnexpectedAppendOffset {
                    first_offset: header.base_offset,
                    last_offset: header.last_offset(),
                    expected: next_offset,
                });
            }
            // Only a gap lets the leader's header choose offsets: they must stay representable.
            next_offset = header.checked_next_offset().ok_or_else(|| {
                Error::CorruptBatch(format!(
                    "batch at offset {} with lastOffsetDelta {} runs past the largest offset",
                    header.base_offset, header.last_offset_delta
                ))
            })?;
            producer_batches.push(replicated_producer_batch(&header, b.bytes()));
            headers.push(header);
        }
        for (b, header) in batches.iter().zip(&headers) {
            // A no-op unless the epoch is new (LeaderEpochCache::assign).
            self.epochs.assign(b.partition_leader_epoch(), header.base_offset)?;
        }
        let parts: Vec<[&[u8]; 2]> = batches
            .iter()
            .map(|b| {
                let bytes = b.bytes();
                [&bytes[..HEADER_LEN], &bytes[HEADER_LEN..]]
            })
            .collect();
        let base_offset = headers.first().map_or(next_offset, |h| h.base_offset);
        self.write_batches(&headers, &parts, &producer_batches, now_ms)?;
        debug_assert_eq!(self.log_end_offset(), next_offset);
        self.debug_check();
        Ok(Some(AppendInfo {
            base_offset,
            last_offset: next_offset - 1,
            log_append_time_ms: -1,
            duplicate: false,
        }))
    }

    /// Whether `append_as_follower(records)`, run now, would write only into the active
    /// segment: no roll, and no leader epoch but the latest (recording one writes and fsyncs
    /// the epoch checkpoint). Conservative as `takes_without_roll`: framing read from the
    /// headers only (a batch the append would refuse counts as not taken), each batch one
    /// index entry.
    pub fn follower_takes_without_roll(&self, records: &Bytes, now_ms: i64) -> bool {
        let latest_epoch = self.epochs.latest_epoch();
        let (mut bytes, mut count, mut next_offset) = (0u64, 0usize, self.log_end_offset());
        for found in batch::batches(records) {
            let Ok((header, whole)) = found else {
                return false;
            };
            let Some(next) = header.checked_next_offset() else {
                return false;
            };
            let epoch = batch::be_i32(&whole, batch::PARTITION_LEADER_EPOCH);
            if epoch >= 0 && epoch != latest_epoch {
                return false;
            }
            bytes += header.size as u64;
            count += 1;
            next_offset = next_offset.max(next);
        }
        self.active
            .takes_without_roll(bytes, count, next_offset, now_ms, &self.config)
    }

    /// Cuts the log so that it ends at or below `offset`, at a batch boundary: a batch holding
    /// `offset` goes whole (Kafka's `LogSegment.truncateTo`). Nothing happens when the log
    /// ends at or below `offset`; when `offset` is at or below the first segment's base
    /// offset nothing stays, and the log starts over at `offset`
    /// (`truncate_fully_and_start_at`, as Kafka's `UnifiedLog.truncateTo`).
    ///
    /// Segments above go (readers of older snapshots keep theirs), the one holding the new
    /// end is cut, and with them the leader epochs, producer snapshots, `.txnindex` entries
    /// and aborted transactions above the new end; producer state is rebuilt from the newest
    /// snapshot at or below it. The recovery point comes down to the new end, and so does the
    /// log start offset if it was above. Crash-safe in the order described in the module doc.
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        self.truncate_to_with(offset, &mut || {})
    }

    /// `truncate_to`, calling `after_step` after each change on disk (tests stop there).
    fn truncate_to_with(&mut self, offset: i64, after_step: &mut dyn FnMut()) -> Result<()> {
        if offset >= self.log_end_offset() {
            return Ok(());
        }
        let first_base = self.segments.first().map_or(self.active.base_offset, |s| s.base_offset);
        if offset <= first_base {
            return self.truncate_fully_and_start_at_with(offset, after_step);
        }
        let holding = self.floor_segment(offset);
        let new_end = match self.segment_at(holding) {
            Some(segment) => segment.cut_point(offset)?.1,
            None => return Err(self.no_segment_holds(offset)),
        };
        tracing::info!(dir = %self.dir.display(), offset, log_end_offset = self.log_end_offset(), new_end, "truncating the log");
        self.truncations += 1;
        self.lower_checkpoints(new_end, after_step)?;
        if self.log_start_offset > new_end {
            checkpoint::write_log_start_offset(&self.dir, new_end)?;
            self.log_start_offset = new_end;
            after_step();
        }

        // The segment holding the new end becomes the active one; those above go, the top
        // first, so that what a crash leaves is a prefix of the log.
        let mut above: Vec<Segment> = Vec::new();
        if holding < self.segments.len() {
            let mut drained: Vec<Segment> = self.segments.drain(holding..).collect();
            let kept = drained.remove(0);
            above = drained;
            above.push(std::mem::replace(&mut self.active, kept));
        }
        self.publish_snapshot();
        while let Some(segment) = above.pop() {
            self.remove_segments(vec![segment], "truncation")?;
            after_step();
        }
        self.active.truncate_to(offset)?;
        after_step();
        debug_assert_eq!(self.log_end_offset(), new_end);

        self.epochs.truncate_from_end(new_end)?;
        after_step();
        let mut removed = false;
        for snapshot in producer_state::list_snapshots(&self.dir)? {
            if snapshot > new_end {
                producer_state::delete_snapshot(&self.dir, snapshot)?;
                removed = true;
            }
        }
        // Removed snapshots and segments stay removed before anything is written again: a
        // snapshot above the new end found after a crash would describe other batches.
        checkpoint::sync_dir(&self.dir)?;
        if removed {
            after_step();
        }
        // The newest snapshot at or below the new end and a replay of what follows it; the
        // `.txnindex` entries above the new end are dropped on the way (as after a recovery).
        self.producers = self.load_producer_state()?;
        self.publish_txns();
        after_step();
        self.publish_snapshot();
        self.debug_check();
        Ok(())
    }

    /// Deletes every segment and starts an empty log at `offset`: log start and log end
    /// offsets, and the recovery point, are `offset` (Kafka's
    /// `UnifiedLog.truncateFullyAndStartAt`, for a follower whose log end is below its
    /// leader's log start). Producer state, its snapshots and the leader epochs are emptied;
    /// the checkpoints are written so that a reopen finds the same log. A crash midway leaves
    /// a prefix of the old log, or this empty log.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        self.truncate_fully_and_start_at_with(offset, &mut || {})
    }

    /// `truncate_fully_and_start_at`, calling `after_step` after each change on disk.
    fn truncate_fully_and_start_at_with(&mut self, offset: i64, after_step: &mut dyn FnMut()) -> Result<()> {
        if offset < 0 {
            return Err(Error::OffsetOutOfRange {
                asked: offset,
                log_start: self.log_start_offset,
                log_end: self.log_end_offset(),
            });
        }
        tracing::info!(dir = %self.dir.display(), offset, log_end_offset = self.log_end_offset(), "emptying the log to start at an offset");
        self.truncations += 1;
        self.lower_checkpoints(offset, after_step)?;
        // Snapshots first: a crash while the segments go must not leave one describing
        // batches that are gone while an older prefix of them remains.
        for snapshot in producer_state::list_snapshots(&self.dir)? {
            producer_state::delete_snapshot(&self.dir, snapshot)?;
        }
        checkpoint::sync_dir(&self.dir)?;
        after_step();
        // The top first, so that what a crash leaves is a prefix; the files go while the
        // segments are still held (the active one has no replacement yet).
        let bases: Vec<i64> = self.all_segments().map(|s| s.base_offset).collect();
        for &base in bases.iter().rev() {
            self.remove_segment_files(base)?;
            after_step();
        }
        let fresh = Segment::create(&self.dir, offset, true)?;
        after_step();
        let old_active = std::mem::replace(&mut self.active, fresh);
        let old: Vec<Segment> = self.segments.drain(..).chain(std::iter::once(old_active)).collect();
        tracing::info!(dir = %self.dir.display(), segments = old.len(), "deleted every segment");
        drop(old);
        self.log_start_offset = offset;
        self.publish_snapshot();

        self.epochs.clear()?;
        after_step();
        self.producers = ProducerState::default();
        self.publish_txns();
        // Written last: until then a crash leaves a prefix of the old log under its old start
        // (open clamps it to the new segment's base), and durable before anything is appended:
        // a start above the new segment would make open delete what follows.
        checkpoint::write_log_start_offset(&self.dir, offset)?;
        after_step();
        self.recovery_point = offset;
        checkpoint::write_recovery_point(&self.dir, offset, true)?;
        self.recovery_point_written = Some(std::time::Instant::now());
        after_step();
        self.debug_check();
        Ok(())
    }

    /// Lowers, durably, what a cut at `new_end` would make claim too much: the recovery point
    /// (data written after the cut is not fsynced yet) and the cleaner checkpoint.
    fn lower_checkpoints(&mut self, new_end: i64, after_step: &mut dyn FnMut()) -> Result<()> {
        if self.recovery_point > new_end {
            checkpoint::write_recovery_point(&self.dir, new_end, true)?;
            self.recovery_point = new_end;
            self.recovery_point_written = Some(std::time::Instant::now());
            after_step();
        }
        cleaner::truncate_checkpoint(&self.dir, new_end)?;
        after_step();
        Ok(())
    }

    fn no_segment_holds(&self, offset: i64) -> Error {
        Error::storage(
            "truncate",
            &self.dir,
            std::io::Error::other(format!("no segment holds offset {offset}")),
        )
    }
}

/// The length of the whole batches at the start of a fetch response's records. A partial last
/// batch (the leader's read stopped at its byte limit) is left out; a batch whose framing is
/// impossible is `CorruptBatch`, not the end of the records.
fn whole_batches_prefix(records: &Bytes) -> Result<usize> {
    let mut len = 0;
    for found in batch::batches(records) {
        let (header, _) = found?;
        len += header.size;
    }
    Ok(len)
}

/// A replicated batch's producer fields. A control batch other than a transaction marker
/// changes no producer (as at replay, recovery.rs).
fn replicated_producer_batch(header: &BatchHeader, bytes: &[u8]) -> ProducerBatch {
    if header.attributes & batch::CONTROL == 0 {
        return ProducerBatch::from_header(header, None);
    }
    let marker = producer_state::read_marker(bytes);
    let mut producer_batch = ProducerBatch::from_header(header, marker);
    if marker.is_none() {
        producer_batch.producer_id = producer_state::NO_PRODUCER_ID;
    }
    producer_batch
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::Path;

    use tempfile::TempDir;

    use super::*;
    use crate::log::batch::tests::encode_batch;
    use crate::log::producer_state::Marker;
    use crate::log::segment;
    use crate::log::test_support::*;
    use crate::log::{EpochEntry, LogConfig};

    const ABORT: Marker = Marker {
        commit: false,
        coordinator_epoch: 0,
    };

    /// A leader's log of 24 batches of 3 records in small segments, in epochs 0, 2 and 5
    /// (8 batches each); producer 7 writes idempotently, producer 9 a transaction it aborts
    /// in epoch 2 and another it leaves open in epoch 5.
    fn leader_log(dir: &Path) -> Log {
        let mut log = Log::open(dir, small_segments(), NOW).unwrap();
        let three = encode_batch(&[1, 2, 3], 100);
        let mut seq = 0;
        for (epoch, round) in [(0, 0), (2, 1), (5, 2)] {
            for i in 0..8 {
                let batches = match i {
                    1 | 4 => {
                        seq += 3;
                        from_producer(&three, 7, 0, seq - 3, false)
                    }
                    2 if round > 0 => from_producer(&three, 9, 0, 10 + (round - 1) * 3, true),
                    _ => batch(3, NOW + i64::from(round) * 10 + i),
                };
                log.append(batches, epoch, NOW).unwrap();
                if i == 5 && round == 1 {
                    log.append_marker(9, 0, ABORT, 0, epoch, NOW).unwrap();
                }
            }
        }
        log
    }

    /// The batches of `log` from `from` to `to` (batch boundaries), across segments.
    fn bytes_between(log: &Log, from: i64, to: i64) -> Bytes {
        let mut out = Vec::new();
        let mut next = from;
        while next < to {
            let read = log.read(next, to, usize::MAX, true).unwrap();
            // A compacted log may hold no batch between `next` and `to`.
            let Some(end) = batch::end_offset(&read) else { break };
            next = end;
            out.extend_from_slice(&read);
        }
        Bytes::from(out)
    }

    fn all_bytes(log: &Log) -> Bytes {
        bytes_between(log, log.log_start_offset(), log.log_end_offset())
    }

    /// Copies `leader` into `follower` as a fetcher would: reads of at most `max_bytes` from
    /// the follower's log end (a read may end in a partial batch, left out).
    fn replicate(leader: &Log, follower: &mut Log, max_bytes: usize) {
        while follower.log_end_offset() < leader.log_end_offset() {
            let from = follower.log_end_offset();
            let read = leader
                .snapshot()
                .read(from, leader.log_end_offset(), max_bytes, true)
                .unwrap();
            follower.append_as_follower(read, NOW).unwrap().unwrap();
        }
    }

    /// `follower_takes_without_roll` answers for the follower appends a fetcher runs off the
    /// writer thread: when it says yes, the append rolls no segment and records no leader
    /// epoch (either writes and fsyncs files); it says no at each new epoch and near a roll,
    /// and yes for most appends.
    #[test]
    fn follower_takes_without_roll_only_when_the_append_rolls_nothing_and_keeps_the_epoch() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        for max_bytes in [1, 250] {
            let dir = TempDir::new().unwrap();
            let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
            let (mut yes, mut no) = (0, 0);
            while follower.log_end_offset() < leader.log_end_offset() {
                let read = leader
                    .snapshot()
                    .read(follower.log_end_offset(), leader.log_end_offset(), max_bytes, true)
                    .unwrap();
                let takes = follower.follower_takes_without_roll(&read, NOW);
                let segments = follower.segments.len();
                let epochs = follower.leader_epochs().to_vec();
                follower.append_as_follower(read, NOW).unwrap().unwrap();
                if takes {
                    assert_eq!(follower.segments.len(), segments, "max_bytes {max_bytes}: rolled");
                    assert_eq!(follower.leader_epochs(), epochs, "max_bytes {max_bytes}: new epoch");
                    yes += 1;
                } else {
                    no += 1;
                }
            }
            assert_eq!(all_bytes(&follower), all_bytes(&leader));
            assert!(follower.segments.len() > 1, "max_bytes {max_bytes}: no roll to tell");
            // Epochs 0, 2 and 5 each begin with an append that records it.
            assert!(no >= 3, "max_bytes {max_bytes}: {no} no");
            assert!(yes > no, "max_bytes {max_bytes}: {yes} yes, {no} no");
        }
        // Framing that the append would refuse is not taken here either.
        let dir = TempDir::new().unwrap();
        let follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert!(!follower.follower_takes_without_roll(&Bytes::from(vec![0xff; 80]), NOW));
    }

    /// What a producer's state amounts to after a reload (a snapshot keeps the last batch).
    fn producer_summary(log: &Log) -> Vec<(i64, i16, i32, i64, Option<i64>)> {
        let mut all: Vec<_> = log
            .producer_state()
            .producers()
            .iter()
            .map(|(id, e)| (*id, e.epoch, e.last_seq(), e.last_offset(), e.current_txn_first_offset))
            .collect();
        all.sort_unstable();
        all
    }

    /// A follower log built by appending `bytes` to an empty log.
    fn follower_of(dir: &Path, bytes: Bytes) -> Log {
        let mut log = Log::open(dir, small_segments(), NOW).unwrap();
        if !bytes.is_empty() {
            log.append_as_follower(bytes, NOW).unwrap();
        }
        log
    }

    #[test]
    fn append_as_follower_stores_the_leaders_batches_byte_for_byte() {
        // Kafka's UnifiedLog.appendAsFollower: offsets, epochs, timestamps and CRCs as the
        // leader wrote them, whatever the fetch sizes.
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let expected = all_bytes(&leader);
        for max_bytes in [usize::MAX, 1_000, 1] {
            let dir = TempDir::new().unwrap();
            let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
            replicate(&leader, &mut follower, max_bytes);
            assert_eq!(all_bytes(&follower), expected, "fetches of {max_bytes} bytes");
            assert_eq!(follower.leader_epochs(), leader.leader_epochs());
            assert!(follower.segments.len() > 1, "the test needs rolls");
            for b in validate_batches(&all_bytes(&follower), usize::MAX).unwrap() {
                assert!([0, 2, 5].contains(&b.partition_leader_epoch()));
            }
            // Reads through the follower's own indexes find every batch.
            for offset in (0..follower.log_end_offset()).step_by(7) {
                let got = ranges(&follower.read(offset, follower.log_end_offset(), 1, true).unwrap());
                assert!(got[0].0 <= offset && offset <= got[0].1, "offset {offset}: {got:?}");
            }
        }
    }

    #[test]
    fn append_as_follower_records_each_new_leader_epoch_at_its_first_batch() {
        let dir = TempDir::new().unwrap();
        let mut leader = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        for epoch in [1, 1, 3, 4, 4] {
            leader.append(batch(2, NOW), epoch, NOW).unwrap();
        }
        let follower_dir = TempDir::new().unwrap();
        let follower = follower_of(follower_dir.path(), all_bytes(&leader));
        let entry = |epoch, start_offset| EpochEntry { epoch, start_offset };
        assert_eq!(follower.leader_epochs(), &[entry(1, 0), entry(3, 4), entry(4, 6)]);
        assert_eq!(follower.latest_epoch(), 4);
        // Saved: a reopen knows them.
        follower.close().unwrap();
        let follower = Log::open(follower_dir.path(), LogConfig::default(), NOW).unwrap();
        assert_eq!(follower.leader_epochs(), &[entry(1, 0), entry(3, 4), entry(4, 6)]);
    }

    #[test]
    fn append_as_follower_refuses_batches_not_starting_at_the_log_end() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        // Above the log end: a gap.
        let later = leader.read(6, 9, usize::MAX, true).unwrap();
        assert!(matches!(
            follower.append_as_follower(later, NOW),
            Err(Error::UnexpectedAppendOffset {
                first_offset: 6,
                last_offset: 8,
                expected: 0
            })
        ));
        assert_eq!(follower.log_end_offset(), 0);
        follower
            .append_as_follower(leader.read(0, 6, usize::MAX, true).unwrap(), NOW)
            .unwrap();
        // Below it: already held (Kafka's UnexpectedAppendOffsetException).
        let again = leader.read(3, 9, usize::MAX, true).unwrap();
        assert!(matches!(
            follower.append_as_follower(again, NOW),
            Err(Error::UnexpectedAppendOffset {
                first_offset: 3,
                expected: 6,
                ..
            })
        ));
        // A gap between two batches of one fetch: nothing of it is written.
        let mut gapped = leader.read(6, 9, usize::MAX, true).unwrap().to_vec();
        gapped.extend_from_slice(&leader.read(12, 15, usize::MAX, true).unwrap());
        assert!(matches!(
            follower.append_as_follower(Bytes::from(gapped), NOW),
            Err(Error::UnexpectedAppendOffset {
                first_offset: 12,
                expected: 9,
                ..
            })
        ));
        assert_eq!(follower.log_end_offset(), 6);
        assert_eq!(all_bytes(&follower), leader.read(0, 6, usize::MAX, true).unwrap());
    }

    #[test]
    fn append_as_follower_refuses_a_corrupt_batch_and_writes_nothing() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let good = leader.read(0, 9, usize::MAX, true).unwrap();
        let second = ranges(&good).len() / 2;
        let second_start: usize = validate_batches(&good, usize::MAX).unwrap()[..second]
            .iter()
            .map(|b| b.size())
            .sum();
        // A flipped record byte of a later batch: its CRC32C fails.
        let mut flipped = good.to_vec();
        flipped[second_start + HEADER_LEN + 3] ^= 0x40;
        assert!(matches!(
            follower.append_as_follower(Bytes::from(flipped), NOW),
            Err(Error::CorruptBatch(_))
        ));
        // A negative length is corrupt, not the end of the records.
        let mut negative = good.to_vec();
        negative[second_start + 8..second_start + 12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            follower.append_as_follower(Bytes::from(negative), NOW),
            Err(Error::CorruptBatch(_))
        ));
        assert_eq!(follower.log_end_offset(), 0);
        assert_eq!(follower.size_bytes(), 0);
        assert!(follower.leader_epochs().is_empty());
        follower.append_as_follower(good.clone(), NOW).unwrap();
        assert_eq!(all_bytes(&follower), good);
    }

    #[test]
    fn append_as_follower_drops_a_trailing_partial_batch() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let two = leader.read(0, 6, usize::MAX, true).unwrap();
        let first_len = validate_batches(&two, usize::MAX).unwrap()[0].size();
        for cut in [two.len() - 1, first_len + 12, first_len + 1] {
            let dir = TempDir::new().unwrap();
            let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
            let info = follower.append_as_follower(two.slice(..cut), NOW).unwrap().unwrap();
            assert_eq!((info.base_offset, info.last_offset), (0, 2), "cut at {cut}");
            assert_eq!(all_bytes(&follower), two.slice(..first_len));
        }
        // Nothing whole: nothing appended, no error.
        assert_eq!(
            follower.append_as_follower(two.slice(..first_len - 1), NOW).unwrap(),
            None
        );
        assert_eq!(follower.append_as_follower(two.slice(..5), NOW).unwrap(), None);
        assert_eq!(follower.append_as_follower(Bytes::new(), NOW).unwrap(), None);
        assert_eq!(follower.log_end_offset(), 0);
    }

    #[test]
    fn follower_appended_sequences_make_a_clients_retry_a_duplicate() {
        // Kafka's AppendOrigin.REPLICATION updates producer state unchecked, so a follower that
        // becomes leader still finds a producer's retried batch.
        let leader_dir = TempDir::new().unwrap();
        let mut leader = Log::open(leader_dir.path(), LogConfig::default(), NOW).unwrap();
        let three = encode_batch(&[1, 2, 3], 10);
        for seq in [0, 3, 6] {
            leader.append(from_producer(&three, 42, 2, seq, false), 1, NOW).unwrap();
        }
        let dir = TempDir::new().unwrap();
        let mut follower = follower_of(dir.path(), all_bytes(&leader));
        assert_eq!(follower.producer_state().producer(42).unwrap().last_seq(), 8);
        assert_eq!(follower.producer_state().producer(42).unwrap().epoch, 2);
        let retry = follower.append(from_producer(&three, 42, 2, 3, false), 3, NOW).unwrap();
        assert!(retry.duplicate);
        assert_eq!((retry.base_offset, retry.last_offset), (3, 5));
        let gap = follower
            .append(from_producer(&three, 42, 2, 12, false), 3, NOW)
            .unwrap_err();
        assert_eq!(gap.code(), 45); // OUT_OF_ORDER_SEQUENCE_NUMBER
        let next = follower.append(from_producer(&three, 42, 2, 9, false), 3, NOW).unwrap();
        assert_eq!((next.base_offset, next.duplicate), (9, false));
    }

    #[test]
    fn follower_markers_complete_transactions_and_index_the_aborted_ones() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        replicate(&leader, &mut follower, 500);
        let end = leader.log_end_offset();
        let aborted = leader.aborted_transactions(0, end);
        assert_eq!(aborted.len(), 1);
        assert_eq!(follower.aborted_transactions(0, end), aborted);
        assert_eq!(follower.first_unstable_offset(), leader.first_unstable_offset());
        assert!(follower.first_unstable_offset().is_some());
        assert_eq!(producer_summary(&follower), producer_summary(&leader));
        // Published to readers, and in the .txnindex: a crash keeps it.
        let snapshot = follower.snapshot();
        assert_eq!(snapshot.aborted_transactions(0, end), aborted);
        assert_eq!(snapshot.first_unstable_offset(), leader.first_unstable_offset());
        drop(follower);
        let follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(follower.aborted_transactions(0, end), aborted);
        assert_eq!(follower.first_unstable_offset(), leader.first_unstable_offset());
    }

    /// The follower's state after `truncate_to` equals that of a log holding only the kept
    /// prefix: bytes, epochs, producers, transactions.
    fn assert_same_log(got: &Log, expected: &Log, context: &str) {
        assert_eq!(got.log_end_offset(), expected.log_end_offset(), "{context}");
        assert_eq!(all_bytes(got), all_bytes(expected), "{context}");
        assert_eq!(got.leader_epochs(), expected.leader_epochs(), "{context}");
        assert_eq!(producer_summary(got), producer_summary(expected), "{context}");
        assert_eq!(
            got.first_unstable_offset(),
            expected.first_unstable_offset(),
            "{context}"
        );
        let end = expected.log_end_offset();
        assert_eq!(
            got.aborted_transactions(0, end),
            expected.aborted_transactions(0, end),
            "{context}"
        );
    }

    #[test]
    fn truncate_to_cuts_across_segments_and_the_log_goes_on_from_the_new_end() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let end = leader.log_end_offset();
        let bytes = all_bytes(&leader);
        // Batches end at multiples of 3 (plus the marker): every batch boundary, and offsets
        // inside batches (the batch holding one goes whole).
        let batch_ends: Vec<i64> = ranges(&bytes).iter().map(|r| r.1 + 1).collect();
        for offset in (1..end).step_by(2).chain([end - 1]) {
            let dir = TempDir::new().unwrap();
            let mut follower = follower_of(dir.path(), bytes.clone());
            let segments_before = follower.segments.len();
            follower.truncate_to(offset).unwrap();
            let kept = batch_ends.iter().copied().filter(|&e| e <= offset).max().unwrap_or(0);
            assert_eq!(follower.log_end_offset(), kept, "truncate_to({offset})");
            let reference_dir = TempDir::new().unwrap();
            let reference = follower_of(reference_dir.path(), bytes_between(&leader, 0, kept));
            assert_same_log(&follower, &reference, &format!("truncate_to({offset})"));
            assert!(follower.segments.len() <= segments_before);
            assert_eq!(bases_on_disk(dir.path()).len(), follower.segments.len() + 1);
            assert!(follower.recovery_point() <= kept);
            // The leader's batches from the new end follow; the copy is the leader's again.
            replicate(&leader, &mut follower, 700);
            assert_eq!(all_bytes(&follower), bytes, "after truncate_to({offset})");
            assert_same_log(&follower, &leader, &format!("caught up after truncate_to({offset})"));
        }
    }

    #[test]
    fn truncate_to_inside_the_active_segment_and_above_the_end() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        for i in 0..6 {
            log.append(batch(3, NOW + i), i32::try_from(i).unwrap() / 2, NOW)
                .unwrap();
        }
        let before = all_bytes(&log);
        // At or above the end: nothing changes.
        log.truncate_to(18).unwrap();
        log.truncate_to(100).unwrap();
        assert_eq!(all_bytes(&log), before);
        // Inside the batch 9..=11: it goes whole; epoch 2 (from 12) goes with it.
        log.truncate_to(10).unwrap();
        assert_eq!(log.log_end_offset(), 9);
        assert_eq!(all_bytes(&log), before.slice(..before.len() / 2));
        let entry = |epoch, start_offset| EpochEntry { epoch, start_offset };
        assert_eq!(log.leader_epochs(), &[entry(0, 0), entry(1, 6)]);
        assert_eq!(log.max_timestamp().unwrap(), Some((NOW + 2 + 2, 8)));
        assert_eq!(log.offset_for_timestamp(NOW + 4).unwrap(), Some((8, NOW + 4)));
        assert_eq!(log.offset_for_timestamp(NOW + 5).unwrap(), None);
        // The file is cut, and appends go on at the new end.
        let segment = dir.path().join("00000000000000000000.log");
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), log.size_bytes());
        let info = log.append(batch(2, NOW + 50), 7, NOW).unwrap();
        assert_eq!((info.base_offset, info.last_offset), (9, 10));
        assert_eq!(log.leader_epochs(), &[entry(0, 0), entry(1, 6), entry(7, 9)]);
        assert_eq!(log.max_timestamp().unwrap(), Some((NOW + 51, 10)));
        // Down to the first segment's base: the log starts over there.
        log.truncate_to(0).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        assert!(log.leader_epochs().is_empty());
    }

    #[test]
    fn a_reopen_after_truncation_finds_the_truncated_log() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let bytes = all_bytes(&leader);
        for clean in [true, false] {
            let dir = TempDir::new().unwrap();
            let mut follower = follower_of(dir.path(), bytes.clone());
            // Inside the second epoch, just past the abort marker.
            let offset = 44;
            follower.truncate_to(offset).unwrap();
            let reference_dir = TempDir::new().unwrap();
            let reference = follower_of(
                reference_dir.path(),
                bytes_between(&leader, 0, follower.log_end_offset()),
            );
            assert_same_log(&follower, &reference, "before reopen");
            if clean {
                follower.close().unwrap();
            } else {
                drop(follower);
            }
            let reopened = Log::open(dir.path(), small_segments(), NOW).unwrap();
            assert_same_log(&reopened, &reference, &format!("reopened (clean close: {clean})"));
        }
    }

    #[test]
    fn truncate_to_lowers_the_log_start_when_the_new_end_is_below_it() {
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, NOW);
        log.delete_records_before(10).unwrap();
        let first_base = bases_on_disk(dir.path())[0];
        assert!(first_base < 9, "the test needs the batch 9..=11 above the first base");
        log.truncate_to(10).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (9, 9));
        drop(log);
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (9, 9));
    }

    #[test]
    fn truncate_fully_and_start_at_empties_the_log_and_appends_go_on_there() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = follower_of(dir.path(), bytes_between(&leader, 0, 30));
        follower.truncate_fully_and_start_at(36).unwrap();
        assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (36, 36));
        assert_eq!(follower.recovery_point(), 36);
        assert!(follower.leader_epochs().is_empty());
        assert!(follower.producer_state().producers().is_empty());
        assert_eq!(follower.first_unstable_offset(), None);
        assert_eq!(follower.aborted_transactions(0, 100), Vec::new());
        assert_eq!(bases_on_disk(dir.path()), vec![36]);
        assert!(producer_state::list_snapshots(dir.path()).unwrap().is_empty());
        assert!(matches!(
            follower.read(0, 36, 1000, true),
            Err(Error::OffsetOutOfRange { log_start: 36, .. })
        ));
        // A reopen (crash or clean) finds the same empty log.
        drop(follower);
        let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (36, 36));
        assert_eq!(follower.recovery_point(), 36);
        assert!(follower.leader_epochs().is_empty());
        // The leader's batches from 36 on.
        replicate(&leader, &mut follower, 600);
        assert_eq!(
            all_bytes(&follower),
            bytes_between(&leader, 36, leader.log_end_offset())
        );
        assert_eq!(
            follower.leader_epochs(),
            &[
                EpochEntry {
                    epoch: 2,
                    start_offset: 36
                },
                leader.leader_epochs()[2]
            ]
        );
        follower.close().unwrap();
        let follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!(follower.log_start_offset(), 36);
        assert_eq!(follower.log_end_offset(), leader.log_end_offset());
        // Below the old log as well.
        let dir = TempDir::new().unwrap();
        let mut log = log_of_batches(dir.path(), 20, NOW);
        log.delete_records_before(30).unwrap();
        log.truncate_fully_and_start_at(4).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 4));
        assert_eq!(log.append(batch(1, NOW), 0, NOW).unwrap().base_offset, 4);
        drop(log);
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 5));
    }

    /// Every directory `op` leaves after one of its steps, as a crash there would.
    fn crash_states(dir: &Path, op: impl FnOnce(&mut dyn FnMut())) -> Vec<TempDir> {
        let mut states = Vec::new();
        op(&mut || states.push(copy_dir(dir)));
        states
    }

    #[test]
    fn a_crash_at_any_step_of_a_truncation_leaves_a_prefix_of_the_log() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let bytes = all_bytes(&leader);
        let dir = TempDir::new().unwrap();
        let mut follower = follower_of(dir.path(), bytes.clone());
        // The recovery point high, so the crash states test that it came down first.
        follower.flush_handle().sync().unwrap();
        follower.mark_flushed(follower.log_end_offset()).unwrap();
        let offset = 20;
        let states = crash_states(dir.path(), |after_step| {
            follower.truncate_to_with(offset, after_step).unwrap();
        });
        let new_end = follower.log_end_offset();
        assert!(states.len() > 4, "{} steps", states.len());
        for (step, state) in states.iter().enumerate() {
            let mut log = Log::open(state.path(), small_segments(), NOW).unwrap();
            let end = log.log_end_offset();
            assert!(end >= new_end, "step {step}: {end}");
            let prefix = bytes_between(&leader, 0, end);
            assert_eq!(all_bytes(&log), prefix, "step {step}");
            assert!(log.recovery_point() <= end, "step {step}");
            let reference_dir = TempDir::new().unwrap();
            let reference = follower_of(reference_dir.path(), prefix);
            assert_same_log(&log, &reference, &format!("step {step}"));
            // Truncating again from there reaches the same log, which goes on.
            log.truncate_to(offset).unwrap();
            assert_eq!(log.log_end_offset(), new_end, "step {step}");
            replicate(&leader, &mut log, usize::MAX);
            assert_eq!(all_bytes(&log), bytes, "step {step}");
        }
    }

    #[test]
    fn what_is_written_after_a_truncation_is_validated_by_the_next_recovery() {
        // The recovery point came down with the log: segments written again after the cut are
        // not trusted as fsynced, so a torn one is found and cut at open.
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = follower_of(dir.path(), all_bytes(&leader));
        follower.flush_handle().sync().unwrap();
        follower.mark_flushed(follower.log_end_offset()).unwrap();
        follower.truncate_to(20).unwrap();
        let new_end = follower.log_end_offset();
        replicate(&leader, &mut follower, usize::MAX);
        let bases = bases_on_disk(dir.path());
        let torn = bases.iter().copied().find(|&b| b > new_end).unwrap();
        assert_ne!(Some(&torn), bases.last(), "the test needs a segment after the torn one");
        drop(follower); // a crash, nothing fsynced since the truncation
        let path = dir.path().join(segment::file_name(torn, "log"));
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        let log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let end = log.log_end_offset();
        assert!(new_end <= end && end < leader.log_end_offset(), "{end}");
        assert_eq!(all_bytes(&log), bytes_between(&leader, 0, end));
    }

    #[test]
    fn a_crash_at_any_step_of_a_full_truncation_leaves_a_prefix_or_the_empty_log() {
        let leader_dir = TempDir::new().unwrap();
        let leader = leader_log(leader_dir.path());
        let dir = TempDir::new().unwrap();
        let mut follower = follower_of(dir.path(), bytes_between(&leader, 0, 30));
        let states = crash_states(dir.path(), |after_step| {
            follower.truncate_fully_and_start_at_with(48, after_step).unwrap();
        });
        assert!(states.len() > 4, "{} steps", states.len());
        for (step, state) in states.iter().enumerate() {
            let log = Log::open(state.path(), small_segments(), NOW).unwrap();
            let (start, end) = (log.log_start_offset(), log.log_end_offset());
            if end == 48 {
                assert_eq!(start, 48, "step {step}");
                assert_eq!(log.size_bytes(), 0, "step {step}");
                continue;
            }
            // A prefix of the old log (possibly empty), from its old start.
            assert!(end <= 30, "step {step}: {end}");
            let prefix = bytes_between(&leader, 0, end);
            assert_eq!(all_bytes(&log), prefix, "step {step}");
            assert_eq!(start, 0, "step {step}");
            let reference_dir = TempDir::new().unwrap();
            assert_same_log(
                &log,
                &follower_of(reference_dir.path(), prefix),
                &format!("step {step}"),
            );
        }
        let last = Log::open(states.last().unwrap().path(), small_segments(), NOW).unwrap();
        assert_eq!((last.log_start_offset(), last.log_end_offset()), (48, 48));
    }

    #[test]
    fn a_snapshot_taken_before_a_truncation_fails_its_reads_of_the_cut_segment() {
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            file_delete_delay_ms: 0,
            ..small_segments()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        for i in 0..40 {
            log.append(batch(3, NOW + i), 0, NOW).unwrap();
        }
        let old = log.snapshot();
        let cut = &log.segments[log.floor_segment(50)];
        let (cut_base, cut_next) = (cut.base_offset, cut.next_offset);
        assert!(
            cut_base > 0 && cut_next < 120,
            "the test needs segments below and above"
        );
        let first_segment = old.read(0, 120, usize::MAX, true).unwrap();
        log.truncate_to(50).unwrap();
        // Another leader's batches where the cut ones were.
        for i in 0..20 {
            log.append(batch(1, NOW + 1000 + i), 3, NOW).unwrap();
        }
        // Below the cut segment: the old view still reads.
        assert_eq!(old.read(0, 120, usize::MAX, true).unwrap(), first_segment);
        // The cut segment: an error, never the new bytes nor a torn batch.
        for offset in [cut_base, 50, cut_next - 1] {
            assert!(
                matches!(
                    old.read(offset, 120, usize::MAX, true),
                    Err(Error::TruncatedDuringRead { .. })
                ),
                "offset {offset}"
            );
        }
        assert_eq!(
            Error::TruncatedDuringRead {
                path: dir.path().into()
            }
            .code(),
            6
        );
        // Segments deleted whole are still read through their files.
        assert_eq!(
            ranges(&old.read(cut_next, 120, usize::MAX, true).unwrap())[0].0,
            cut_next
        );
        assert_eq!(ranges(&old.read(117, 120, usize::MAX, true).unwrap()), vec![(117, 119)]);
        // The new view reads the new log.
        assert_eq!(ranges(&log.read(48, 70, usize::MAX, true).unwrap())[0], (48, 48));
    }

    #[test]
    fn a_flush_handle_taken_before_a_truncation_no_longer_covers_the_log() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..20 {
            log.append(batch(3, NOW + i), 0, NOW).unwrap();
        }
        let handle = log.flush_handle();
        assert!(log.still_covers(&handle));
        log.truncate_to(30).unwrap();
        assert!(!log.still_covers(&handle), "its fsync may predate what is written next");
        assert!(log.still_covers(&log.flush_handle()));
    }

    // A compacted log's follower (LogConfig::compact): the leader's cleaner left offset gaps
    // and batches with fewer records than offsets.

    fn compacted() -> LogConfig {
        LogConfig {
            compact: true,
            ..small_segments()
        }
    }

    /// A compacted leader's log after its cleaner ran. 60 batches of 10 keyed records in
    /// epochs 0, 3 and 4 (20 batches each): batches 1, 5, 9, ... start with 5 records of
    /// unique keys, which stay (cleaned batches with fewer records than offsets); every other
    /// record's key is written again later, so the other batches go whole (offset gaps, the
    /// first one from offset 0) but the one holding each key's last value. Batch 30 is
    /// producer 7's only one, kept with no record (Kafka's RETAIN_EMPTY). Then a dirty tail
    /// of 6 plain batches in epoch 6.
    fn cleaned_leader_log(dir: &Path) -> Log {
        let mut log = Log::open(dir, compacted(), NOW).unwrap();
        let old = NOW - 100_000;
        for j in 0..60usize {
            let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..10)
                .map(|r| {
                    let i = j * 10 + r;
                    let key = if j % 4 == 1 && r < 5 {
                        format!("unique-{i}")
                    } else {
                        format!("k{}", i % 7)
                    };
                    (
                        Some(Bytes::from(key)),
                        Some(Bytes::from(format!("v{i}"))),
                        old + i as i64,
                    )
                })
                .collect();
            let bytes = batch::encode_records(&records, kafka_protocol::records::Compression::None).unwrap();
            let batches = if j == 30 {
                from_producer(&bytes, 7, 0, 0, false)
            } else {
                validate_batches(&bytes, usize::MAX).unwrap()
            };
            log.append(batches, [0, 3, 4][j / 20], NOW).unwrap();
        }
        log.roll().unwrap();
        let handle = log.flush_handle();
        handle.sync().unwrap();
        log.mark_flushed(handle.flushed_offset).unwrap();
        let cleaner = cleaner::CleanerConfig {
            delete_retention_ms: 1_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.0,
            key_map_bytes: 1 << 20,
        };
        let stats = log.clean(&cleaner, NOW).unwrap().unwrap();
        assert!(stats.records_removed > 400, "{stats:?}");
        for i in 0..6 {
            log.append(batch(3, NOW + i), 6, NOW).unwrap();
        }
        log
    }

    /// Every batch of a read: its header and record count (no CRC check: `check_compacted`
    /// is what the follower applies).
    fn batches_of(bytes: &Bytes) -> Vec<(BatchHeader, i32)> {
        batch::batches(bytes)
            .map(|found| {
                let (header, bytes) = found.unwrap();
                batch::check_compacted(&bytes).unwrap();
                (header, batch::record_count(&bytes))
            })
            .collect()
    }

    /// The leader epochs a follower records from `bytes`: each new epoch at its first batch.
    fn epochs_of(bytes: &Bytes) -> Vec<EpochEntry> {
        let mut entries: Vec<EpochEntry> = Vec::new();
        for found in batch::batches(bytes) {
            let (header, bytes) = found.unwrap();
            let epoch = batch::be_i32(&bytes, batch::PARTITION_LEADER_EPOCH);
            if entries.last().is_none_or(|e| e.epoch != epoch) {
                entries.push(EpochEntry {
                    epoch,
                    start_offset: header.base_offset,
                });
            }
        }
        entries
    }

    /// A compacted follower built by appending `bytes` to an empty log.
    fn compacted_follower_of(dir: &Path, bytes: Bytes) -> Log {
        let mut log = Log::open(dir, compacted(), NOW).unwrap();
        if !bytes.is_empty() {
            log.append_as_follower(bytes, NOW).unwrap();
        }
        log
    }

    /// What a reader finds from each offset of `log` (the first batch of a one-byte read).
    fn first_batch_from_each_offset(log: &Log) -> Vec<Option<(i64, i64)>> {
        (log.log_start_offset()..log.log_end_offset())
            .map(|offset| {
                let read = log.read(offset, log.log_end_offset(), 1, true).unwrap();
                batches_of(&read).first().map(|(h, _)| (h.base_offset, h.last_offset()))
            })
            .collect()
    }

    #[test]
    fn a_cleaned_leader_log_has_gaps_and_batches_with_fewer_records_than_offsets() {
        // What the other tests rely on.
        let dir = TempDir::new().unwrap();
        let leader = cleaned_leader_log(dir.path());
        let found = batches_of(&all_bytes(&leader));
        assert!(found[0].0.base_offset > 0, "a gap at the log start");
        let gaps = found
            .windows(2)
            .filter(|w| w[1].0.base_offset > w[0].0.last_offset() + 1)
            .count();
        assert!(gaps > 10, "{gaps} gaps");
        let partial = found
            .iter()
            .filter(|(h, count)| i64::from(*count) < i64::from(h.last_offset_delta) + 1)
            .count();
        assert!(partial > 10, "{partial} cleaned batches");
        assert!(found.iter().any(|(h, count)| *count == 0 && h.producer_id == 7));
        assert!(validate_batches(&all_bytes(&leader), usize::MAX).is_err());
    }

    #[test]
    fn a_compacted_follower_copies_a_cleaned_leader_log_byte_for_byte() {
        // Kafka's UnifiedLog.appendAsFollower only asks offsets to increase, and its
        // LogValidator skips the record count of replicated batches.
        let leader_dir = TempDir::new().unwrap();
        let leader = cleaned_leader_log(leader_dir.path());
        let expected = all_bytes(&leader);
        let leader_reads = first_batch_from_each_offset(&leader);
        for max_bytes in [usize::MAX, 1_000, 1] {
            let dir = TempDir::new().unwrap();
            let mut follower = Log::open(dir.path(), compacted(), NOW).unwrap();
            replicate(&leader, &mut follower, max_bytes);
            let context = format!("fetches of {max_bytes} bytes");
            assert_eq!(follower.log_end_offset(), leader.log_end_offset(), "{context}");
            assert_eq!(all_bytes(&follower), expected, "{context}");
            assert!(follower.segments.len() > 1, "the test needs rolls");
            // Each epoch starts at its first batch left (the leader's cache may name an
            // offset its cleaner removed since, as in Kafka).
            assert_eq!(follower.leader_epochs(), epochs_of(&expected), "{context}");
            assert_eq!(producer_summary(&follower), producer_summary(&leader), "{context}");
            // Every offset, gaps included, is served by the batch the leader serves.
            assert_eq!(first_batch_from_each_offset(&follower), leader_reads, "{context}");
            assert_eq!(follower.snapshot().log_end_offset(), leader.log_end_offset());
            // Offsets still only increase: what the follower holds is refused again.
            let again = leader.read(300, leader.log_end_offset(), usize::MAX, true).unwrap();
            assert!(matches!(
                follower.append_as_follower(again, NOW),
                Err(Error::UnexpectedAppendOffset { .. })
            ));
            // It goes on from there.
            let later = Bytes::from(leader_batch(2, leader.log_end_offset() + 10, 7));
            let next = follower.append_as_follower(later, NOW).unwrap().unwrap();
            assert_eq!(next.base_offset, leader.log_end_offset() + 10, "{context}");
            assert_eq!(follower.log_end_offset(), leader.log_end_offset() + 12);
            assert_eq!(follower.latest_epoch(), 7);
        }
    }

    #[test]
    fn a_compacted_follower_keeps_its_copy_across_a_crash_and_a_clean_close() {
        let leader_dir = TempDir::new().unwrap();
        let leader = cleaned_leader_log(leader_dir.path());
        let expected = all_bytes(&leader);
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), compacted(), NOW).unwrap();
        replicate(&leader, &mut follower, 700);
        let reads = first_batch_from_each_offset(&follower);
        let producers = producer_summary(&follower);
        drop(follower); // a crash: no clean-shutdown marker, nothing flushed
        assert!(!dir.path().join(checkpoint::CLEAN_SHUTDOWN_FILE).exists());
        // Today's recovery of a log that is not compacted would cut it at the first gap.
        let strict = Log::open(copy_dir(dir.path()).path(), small_segments(), NOW).unwrap();
        assert!(strict.log_end_offset() < leader.log_end_offset());
        for clean in [false, true] {
            let follower = Log::open(dir.path(), compacted(), NOW).unwrap();
            let context = format!("reopened after a clean close: {clean}");
            assert_eq!(follower.log_end_offset(), leader.log_end_offset(), "{context}");
            assert_eq!(all_bytes(&follower), expected, "{context}");
            assert_eq!(follower.leader_epochs(), epochs_of(&expected), "{context}");
            assert_eq!(producer_summary(&follower), producers, "{context}");
            assert_eq!(first_batch_from_each_offset(&follower), reads, "{context}");
            follower.close().unwrap();
        }
        // Even with every index gone and no recovery point: every segment is validated.
        for path in segment_files(dir.path(), "index")
            .into_iter()
            .chain(segment_files(dir.path(), "timeindex"))
        {
            std::fs::remove_file(path).unwrap();
        }
        std::fs::remove_file(dir.path().join(checkpoint::CLEAN_SHUTDOWN_FILE)).unwrap();
        std::fs::remove_file(dir.path().join(checkpoint::RECOVERY_POINT_FILE)).unwrap();
        let follower = Log::open(dir.path(), compacted(), NOW).unwrap();
        assert_eq!(all_bytes(&follower), expected);
        assert_eq!(first_batch_from_each_offset(&follower), reads);
    }

    #[test]
    fn a_follower_of_a_log_that_is_not_compacted_still_refuses_gaps_and_cleaned_batches() {
        let leader_dir = TempDir::new().unwrap();
        let leader = cleaned_leader_log(leader_dir.path());
        let found = batches_of(&all_bytes(&leader));
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), small_segments(), NOW).unwrap();
        // A cleaned batch: its record count is checked.
        let (partial, _) = found
            .iter()
            .find(|(h, count)| i64::from(*count) < i64::from(h.last_offset_delta) + 1)
            .unwrap();
        let read = leader
            .read(partial.base_offset, leader.log_end_offset(), 1, true)
            .unwrap();
        assert!(matches!(
            follower.append_as_follower(read, NOW),
            Err(Error::CorruptBatch(_))
        ));
        // A whole batch above the log end, or after a gap: refused.
        let (whole, _) = found
            .iter()
            .find(|(h, count)| i64::from(*count) == i64::from(h.last_offset_delta) + 1)
            .unwrap();
        assert!(whole.base_offset > 0);
        let read = leader
            .read(whole.base_offset, leader.log_end_offset(), 1, true)
            .unwrap();
        assert!(matches!(
            follower.append_as_follower(read, NOW),
            Err(Error::UnexpectedAppendOffset { expected: 0, .. })
        ));
        assert_eq!((follower.log_end_offset(), follower.size_bytes()), (0, 0));
        assert!(follower.leader_epochs().is_empty());
    }

    /// The position of every batch in a segment file, and the file's length.
    fn batch_positions(path: &Path) -> (Vec<(u64, BatchHeader)>, u64) {
        let bytes = Bytes::from(std::fs::read(path).unwrap());
        let mut pos = 0u64;
        let mut out = Vec::new();
        for found in batch::batches(&bytes) {
            let (header, _) = found.unwrap();
            out.push((pos, header));
            pos += header.size as u64;
        }
        (out, bytes.len() as u64)
    }

    #[test]
    fn a_torn_tail_after_gapped_batches_is_still_cut_at_open() {
        let leader_dir = TempDir::new().unwrap();
        let leader = cleaned_leader_log(leader_dir.path());
        // The follower's copy ends with the cleaned part: its last batch follows a gap.
        let cleaned_end = batches_of(&all_bytes(&leader))
            .iter()
            .map(|(h, _)| h.last_offset() + 1)
            .find(|&end| end == 600)
            .unwrap();
        let dir = TempDir::new().unwrap();
        let follower = compacted_follower_of(dir.path(), bytes_between(&leader, 0, cleaned_end));
        drop(follower); // a crash, nothing flushed: every segment is recovered
        let last_base = *bases_on_disk(dir.path()).last().unwrap();
        let path = dir.path().join(segment::file_name(last_base, "log"));
        let (positions, len) = batch_positions(&path);
        assert!(positions.len() >= 3, "the test needs batches before the torn one");
        let (last_pos, last) = *positions.last().unwrap();
        let before_last = positions[positions.len() - 2].1;
        assert!(
            last.base_offset > before_last.last_offset() + 1,
            "the torn batch follows a gap"
        );
        let kept = before_last.last_offset() + 1;
        let check = |state: &TempDir, what: &str| {
            let mut log = Log::open(state.path(), compacted(), NOW).unwrap();
            assert_eq!(log.log_end_offset(), kept, "{what}");
            assert_eq!(all_bytes(&log), bytes_between(&leader, 0, kept), "{what}");
            assert_eq!(
                std::fs::metadata(state.path().join(segment::file_name(last_base, "log")))
                    .unwrap()
                    .len(),
                last_pos,
                "{what}"
            );
            // The leader's batches from there: the copy is whole again.
            replicate(&leader, &mut log, usize::MAX);
            assert_eq!(all_bytes(&log), all_bytes(&leader), "{what}");
        };
        // Cut anywhere in the last batch: framing fails.
        for cut in (last_pos..len).step_by(7) {
            let state = copy_dir(dir.path());
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(state.path().join(segment::file_name(last_base, "log")))
                .unwrap();
            file.set_len(cut).unwrap();
            check(&state, &format!("cut at {cut}"));
        }
        let rewrite = |at: u64, bytes: &[u8], what: &str| {
            let state = copy_dir(dir.path());
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(state.path().join(segment::file_name(last_base, "log")))
                .unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, at).unwrap();
            check(&state, what);
        };
        // A flipped byte anywhere the CRC covers: CRC32C fails.
        let contents = std::fs::read(&path).unwrap();
        for at in [last_pos + 21, last_pos + HEADER_LEN as u64 - 1, len - 1] {
            let flipped = [contents[at as usize] ^ 0x10];
            rewrite(at, &flipped, &format!("byte {at} flipped"));
        }
        // A base offset that goes backwards, at or below the batch before: cut.
        for base in [before_last.base_offset, before_last.last_offset(), last_base - 1] {
            rewrite(last_pos, &base.to_be_bytes(), &format!("base offset {base}"));
        }
    }

    #[test]
    fn truncate_to_cuts_a_compacted_follower_at_a_batch_boundary_and_it_catches_up_again() {
        // Kafka's LogSegment.truncateTo: the batch holding the offset goes whole, wherever the
        // offset lies: in a batch, in a batch's unused offsets, or in a gap.
        let leader_dir = TempDir::new().unwrap();
        let leader = cleaned_leader_log(leader_dir.path());
        let bytes = all_bytes(&leader);
        let found = batches_of(&bytes);
        let end = leader.log_end_offset();
        for offset in (1..end).step_by(11).chain([end - 1]) {
            let dir = TempDir::new().unwrap();
            let mut follower = compacted_follower_of(dir.path(), bytes.clone());
            follower.truncate_to(offset).unwrap();
            let context = format!("truncate_to({offset})");
            let new_end = follower.log_end_offset();
            // Whole batches below the offset stay, and nothing else.
            let kept: Vec<&(BatchHeader, i32)> = found.iter().filter(|(h, _)| h.last_offset() < offset).collect();
            let kept_end = kept.last().map_or(0, |(h, _)| h.last_offset() + 1);
            assert!(kept_end <= new_end && new_end <= offset, "{context}: {new_end}");
            assert_eq!(all_bytes(&follower), bytes_between(&leader, 0, kept_end), "{context}");
            assert!(follower.recovery_point() <= new_end, "{context}");
            assert!(
                follower.leader_epochs().iter().all(|e| e.start_offset < new_end),
                "{context}"
            );
            let kept_bytes = bytes_between(&leader, 0, kept_end);
            assert_eq!(follower.leader_epochs(), epochs_of(&kept_bytes), "{context}");
            // A crash then finds the same log.
            drop(follower);
            let mut follower = Log::open(dir.path(), compacted(), NOW).unwrap();
            assert_eq!(follower.log_end_offset(), new_end, "{context}: reopened");
            assert_eq!(all_bytes(&follower), kept_bytes, "{context}: reopened");
            // The leader's batches from the new end: the copy is the leader's again.
            replicate(&leader, &mut follower, 900);
            assert_eq!(all_bytes(&follower), bytes, "{context}: caught up");
            assert_eq!(follower.leader_epochs(), epochs_of(&bytes), "{context}: caught up");
            assert_eq!(producer_summary(&follower), producer_summary(&leader), "{context}");
        }
    }

    /// A batch of `n` records stored by a leader at `base_offset` in `epoch`.
    fn leader_batch(n: usize, base_offset: i64, epoch: i32) -> Vec<u8> {
        let mut bytes = encode_batch(&vec![NOW; n], 10).to_vec();
        // Neither field is covered by the CRC.
        bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes[12..16].copy_from_slice(&epoch.to_be_bytes());
        bytes
    }

    #[test]
    fn a_gap_wider_than_a_segment_can_index_spans_empty_segments() {
        // A segment's relative offsets are 32-bit: the follower rolls over segments of at most
        // i32::MAX offsets until the batch after the gap is within reach of one.
        let far = 5_000_000_000;
        let mut records = leader_batch(3, 0, 1);
        records.extend(leader_batch(3, 3, 1));
        records.extend(leader_batch(3, far, 2));
        records.extend(leader_batch(3, far + 10, 2));
        let records = Bytes::from(records);
        let dir = TempDir::new().unwrap();
        let mut follower = Log::open(dir.path(), compacted(), NOW).unwrap();
        let info = follower.append_as_follower(records.clone(), NOW).unwrap().unwrap();
        assert_eq!((info.base_offset, info.last_offset), (0, far + 12));
        assert_eq!(follower.log_end_offset(), far + 13);
        // 0..=5 and the start of the gap, an empty segment, and one that holds `far` on.
        let bases = bases_on_disk(dir.path());
        assert_eq!(bases.len(), 3, "{bases:?}");
        for w in bases.windows(2).chain([[bases[2], far + 13].as_slice()]) {
            assert!(w[1] - w[0] <= i64::from(i32::MAX) + 1, "{bases:?}");
        }
        let check = |log: &Log, what: &str| {
            assert_eq!(all_bytes(log), records, "{what}");
            for (offset, first) in [(0, 0), (4, 3), (6, far), (far / 2, far), (far + 3, far + 10)] {
                let read = log.read(offset, log.log_end_offset(), 1, true).unwrap();
                assert_eq!(batches_of(&read)[0].0.base_offset, first, "{what}: from {offset}");
            }
            let entry = |epoch, start_offset| EpochEntry { epoch, start_offset };
            assert_eq!(log.leader_epochs(), &[entry(1, 0), entry(2, far)], "{what}");
        };
        check(&follower, "appended");
        drop(follower);
        let follower = Log::open(dir.path(), compacted(), NOW).unwrap();
        check(&follower, "after a crash");
        follower.close().unwrap();
        let mut follower = Log::open(dir.path(), compacted(), NOW).unwrap();
        check(&follower, "after a clean close");
        // Cut back into the gap: the batches below stay, and the log goes on.
        follower.truncate_to(far / 2).unwrap();
        assert!(follower.log_end_offset() <= far / 2);
        assert_eq!(all_bytes(&follower), records.slice(..2 * records.len() / 4));
        follower
            .append_as_follower(records.slice(2 * records.len() / 4..), NOW)
            .unwrap();
        check(&follower, "caught up after a truncation");
        // Offsets past the largest one are corrupt, not an overflow.
        let at_the_end = Bytes::from(leader_batch(3, i64::MAX - 1, 2));
        assert!(matches!(
            follower.append_as_follower(at_the_end, NOW),
            Err(Error::CorruptBatch(_))
        ));
    }
}
