//! Reads without the log's lock (issue 11): a reader takes an immutable `LogSnapshot` (an `Arc`
//! clone) of the segment list and the log start offset, and reads the offsets that move on
//! every append from atomics the writer publishes after each write completes.
//!
//! - Structural changes (a roll, retention and DeleteRecords, the cleaner's swap, an open)
//!   publish a new snapshot. A reader holding an older one still reads correct bytes: a sealed
//!   segment never changes, and a deleted one (renamed `*.deleted`, then unlinked after
//!   `file.delete.delay.ms`) is still read through the descriptor the snapshot holds.
//! - The active segment's end (size and next offset, one atomic word) is stored with Release
//!   after its write returned and loaded with Acquire: a reader never sees a position beyond
//!   fully written bytes. A failed write is cut back before anything was published.
//! - Index entries are shared with the writer behind a lock held only for a push or a binary
//!   search, never across the write syscall; entries past the published end are ignored.
//! - read_committed needs the first unstable offset (an atomic) and the aborted transactions
//!   (a list the writer extends under a short lock). The writer publishes both after the
//!   batches are written and before the caller moves the high watermark, so a reader that
//!   loaded the high watermark first sees every transaction state up to it.
//!
//! Callers load the high watermark before the snapshot: everything below it is then in the
//! snapshot (the writer publishes the snapshot and ends before it moves the high watermark).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use super::batch::BatchHeader;
use super::producer_state::{self, AbortedTxn};
use super::segment::{FileRegion, SegmentRef, SharedSegment};
use super::{ReadableBytes, whole_batches_len};
use crate::error::{Error, Result};

/// No open transaction (`first_unstable_offset` is None).
const NO_UNSTABLE_OFFSET: i64 = i64::MAX;

/// The transaction state read_committed readers need, published by the writer.
pub(crate) struct TxnView {
    /// The first offset of the oldest open transaction, `NO_UNSTABLE_OFFSET` when none.
    first_unstable_offset: AtomicI64,
    /// Aborted transactions by increasing last offset (a mirror of the producer state's).
    aborted: RwLock<Vec<AbortedTxn>>,
}

impl TxnView {
    fn new() -> TxnView {
        TxnView {
            first_unstable_offset: AtomicI64::new(NO_UNSTABLE_OFFSET),
            aborted: RwLock::new(Vec::new()),
        }
    }

    /// Publishes the first unstable offset; after the aborted list it covers.
    pub fn set_first_unstable_offset(&self, offset: Option<i64>) {
        self.first_unstable_offset
            .store(offset.unwrap_or(NO_UNSTABLE_OFFSET), Ordering::Release);
    }

    /// Adds transactions an abort marker just completed (their last offsets follow the list's).
    pub fn extend_aborted(&self, aborted: &[AbortedTxn]) {
        if !aborted.is_empty() {
            self.aborted
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(aborted);
        }
    }

    /// Replaces the list (at open, or after the log start moved or the cleaner forgot some).
    pub fn replace_aborted(&self, aborted: &[AbortedTxn]) {
        let mut list = self.aborted.write().unwrap_or_else(|p| p.into_inner());
        list.clear();
        list.extend_from_slice(aborted);
    }

    fn first_unstable_offset(&self) -> Option<i64> {
        let offset = self.first_unstable_offset.load(Ordering::Acquire);
        (offset != NO_UNSTABLE_OFFSET).then_some(offset)
    }

    fn aborted_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let list = self.aborted.read().unwrap_or_else(|p| p.into_inner());
        producer_state::aborted_in(&list, from, upper)
    }
}

/// Where a log publishes its snapshots; readers hold an `Arc` of it and clone the current
/// snapshot for each read. Replaced only on structural changes, so the lock is uncontended.
pub struct LogReader {
    current: RwLock<Arc<LogSnapshot>>,
    txns: Arc<TxnView>,
}

impl LogReader {
    /// A reader over `segments` (the active one last).
    pub(crate) fn new(sealed: &[SegmentRef], active: &Arc<SharedSegment>, log_start_offset: i64) -> LogReader {
        let txns = Arc::new(TxnView::new());
        let snapshot = LogSnapshot {
            sealed: sealed.to_vec(),
            active: Arc::clone(active),
            log_start_offset,
            txns: Arc::clone(&txns),
        };
        LogReader {
            current: RwLock::new(Arc::new(snapshot)),
            txns,
        }
    }

    /// The current snapshot: cheap (an `Arc` clone under a read lock held for that alone).
    pub fn snapshot(&self) -> Arc<LogSnapshot> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Publishes a new segment list and log start (the writer, after a structural change).
    pub(crate) fn publish(&self, sealed: Vec<SegmentRef>, active: &Arc<SharedSegment>, log_start_offset: i64) {
        let snapshot = Arc::new(LogSnapshot {
            sealed,
            active: Arc::clone(active),
            log_start_offset,
            txns: Arc::clone(&self.txns),
        });
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = snapshot;
    }

    pub(crate) fn txns(&self) -> &TxnView {
        &self.txns
    }
}

/// An immutable view of a log: its sealed segments as they were when published, its active
/// segment (whose end is read from atomics at each use), its log start offset, and the live
/// transaction state.
pub struct LogSnapshot {
    sealed: Vec<SegmentRef>,
    active: Arc<SharedSegment>,
    log_start_offset: i64,
    txns: Arc<TxnView>,
}

/// The segments of a snapshot with the active one's end loaded once, so that one operation
/// sees one end throughout.
pub(crate) struct Segments<'a> {
    pub sealed: &'a [SegmentRef],
    pub active: SegmentRef,
}

impl Segments<'_> {
    pub fn all(&self) -> impl DoubleEndedIterator<Item = &SegmentRef> {
        self.sealed.iter().chain(std::iter::once(&self.active))
    }

    /// The segment at position `i` (the active one last).
    fn at(&self, i: usize) -> Option<&SegmentRef> {
        if i == self.sealed.len() {
            Some(&self.active)
        } else {
            self.sealed.get(i)
        }
    }

    /// Position of the segment with the greatest base offset at or below `offset`.
    fn floor(&self, offset: i64) -> usize {
        if offset >= self.active.base_offset {
            return self.sealed.len();
        }
        self.sealed
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }
}

impl LogSnapshot {
    pub(crate) fn segments(&self) -> Segments<'_> {
        Segments {
            sealed: &self.sealed,
            active: self.active.published(),
        }
    }

    /// The first offset a client may read (see `Log::log_start_offset`).
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The offset after the last batch fully written (may run ahead of the caller's high
    /// watermark while an append is being published).
    pub fn log_end_offset(&self) -> i64 {
        self.active.published().next_offset
    }

    /// The first offset of the oldest open transaction, now.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.txns.first_unstable_offset()
    }

    /// Aborted transactions overlapping `[from, upper)`, for a read_committed fetch.
    pub fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.txns.aborted_between(from, upper)
    }

    /// Total bytes of the segments' batches (DescribeLogDirs, `retention.bytes`).
    pub fn size_bytes(&self) -> u64 {
        self.segments().all().map(|s| s.size).sum()
    }

    /// See `Log::read`.
    pub fn read(&self, offset: i64, max_offset: i64, max_bytes: usize, min_one_batch: bool) -> Result<Bytes> {
        let segments = self.segments();
        match self.locate_read(&segments, offset, max_offset)? {
            Some(found) => found.read(max_bytes, min_one_batch),
            None => Ok(Bytes::new()),
        }
    }

    /// The batches `read` would return, located in their segment file but not read (see
    /// `FileRegion`); None where `read` returns no bytes.
    pub fn read_region(
        &self,
        offset: i64,
        max_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<Option<FileRegion>> {
        let segments = self.segments();
        match self.locate_read(&segments, offset, max_offset)? {
            Some(found) => {
                let end = found.end.unwrap_or(found.segment.size);
                found.segment.region(found.start, end, max_bytes, min_one_batch)
            }
            None => Ok(None),
        }
    }

    /// See `Log::readable_bytes`.
    pub fn readable_bytes(&self, offset: i64, max_offset: i64) -> Result<ReadableBytes> {
        let segments = self.segments();
        let Some(found) = self.locate_read(&segments, offset, max_offset)? else {
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
    fn locate_read<'a>(
        &self,
        segments: &'a Segments<'_>,
        offset: i64,
        max_offset: i64,
    ) -> Result<Option<ReadStart<'a>>> {
        let (log_start, log_end) = (self.log_start_offset, segments.active.next_offset);
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
        let mut i = segments.floor(offset);
        let (segment, start, first) = loop {
            match segments.at(i) {
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
        } else if i == segments.sealed.len() {
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
}

/// The start of a read: its segment, the position and header of its first batch, and where
/// it ends in that segment (None: past it, see `locate_read`).
struct ReadStart<'a> {
    segment: &'a SegmentRef,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::AtomicBool;

    use tempfile::TempDir;

    use super::*;
    use crate::log::test_support::*;
    use crate::log::{Log, LogConfig};

    /// Every batch of `snapshot` from its log start to its end, as a consumer walks it.
    fn walk(snapshot: &LogSnapshot) -> Vec<(i64, i64)> {
        let (mut from, end) = (snapshot.log_start_offset(), snapshot.log_end_offset());
        let mut seen = Vec::new();
        while from < end {
            let got = ranges(&snapshot.read(from, end, 1 << 20, true).unwrap());
            assert!(!got.is_empty(), "stuck at {from} of {end}");
            from = got.last().unwrap().1 + 1;
            seen.extend(got);
        }
        seen
    }

    /// A located region holds exactly the bytes `read` returns, for every start offset, end
    /// offset and byte budget, across segment boundaries; its records count and end offset are
    /// the batches'.
    #[test]
    fn a_region_locates_the_bytes_a_read_returns() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..60i64 {
            let records = 1 + usize::try_from(i % 4).unwrap();
            log.append(batch(records, i), 0, NOW).unwrap();
        }
        assert!(log.segments.len() > 2, "the test needs several segments");
        let snapshot = log.snapshot();
        let end = snapshot.log_end_offset();
        let (mut regions, mut empty) = (0, 0);
        for from in 0..end {
            for upper in [from + 1, from + 7, end] {
                for budget in [1usize, 100, 150, 400, 1 << 20] {
                    for min_one in [false, true] {
                        let bytes = snapshot.read(from, upper, budget, min_one).unwrap();
                        let region = snapshot.read_region(from, upper, budget, min_one).unwrap();
                        let Some(region) = region else {
                            assert!(bytes.is_empty(), "{from}..{upper} budget {budget}: no region");
                            empty += 1;
                            continue;
                        };
                        regions += 1;
                        assert_eq!(
                            region.read().unwrap(),
                            bytes.to_vec(),
                            "{from}..{upper} budget {budget}"
                        );
                        assert!(region.unchanged());
                        let batches = ranges(&bytes);
                        assert_eq!(region.end_offset(), batches.last().unwrap().1 + 1);
                        let count: i64 = batches.iter().map(|(a, b)| b - a + 1).sum();
                        assert_eq!(region.records(), u64::try_from(count).unwrap());
                    }
                }
            }
        }
        assert!(regions > 100 && empty > 10, "{regions} regions, {empty} empty reads");
    }

    #[test]
    fn a_reader_concurrent_with_appends_and_rolls_never_sees_a_partial_batch() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        let reader = log.reader();
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                for i in 0..3_000i64 {
                    let records = 1 + usize::try_from(i % 3).unwrap();
                    log.append(batch(records, i), 0, NOW).unwrap();
                }
                done.store(true, Ordering::SeqCst);
                log
            })
        };
        let (mut from, mut reads, mut batches) = (0, 0u64, 0u64);
        while !done.load(Ordering::SeqCst) || reads < 100 {
            let snapshot = reader.snapshot();
            let end = snapshot.log_end_offset();
            // `ranges` validates every batch (framing and CRC32C): a torn one fails here.
            let bytes = snapshot.read(from, end, 1 << 20, true).unwrap();
            let got = if bytes.is_empty() { Vec::new() } else { ranges(&bytes) };
            if let Some(&(first, _)) = got.first() {
                assert!(first <= from, "the batch holding {from} starts at {first}");
            }
            for w in got.windows(2) {
                assert_eq!(w[1].0, w[0].1 + 1, "batches contiguous");
            }
            if let Some(&(_, last)) = got.last() {
                assert!(last < end, "read past the published end {end}: {last}");
                from = last + 1;
            }
            batches += got.len() as u64;
            reads += 1;
            // Now and then walk again from the start, over segments rolled meanwhile.
            if reads % 64 == 0 {
                from = 0;
            }
        }
        let log = writer.join().unwrap();
        assert!(batches > 0, "the reader saw nothing in {reads} reads");
        let all = walk(&log.snapshot());
        assert_eq!(all.len(), 3_000);
        assert!(log.segments.len() > 10, "the test needs rolls: {}", log.segments.len());
    }

    #[test]
    fn a_reader_holding_an_old_snapshot_reads_across_retention_and_delete_records() {
        let dir = TempDir::new().unwrap();
        // Deleted files are unlinked at once: only the snapshot's descriptors keep them.
        let config = LogConfig {
            file_delete_delay_ms: 0,
            ..small_segments()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        for i in 0..40 {
            log.append(batch(3, i), 0, NOW).unwrap();
        }
        let old = log.snapshot();
        let before = walk(&old);
        let size = old.size_bytes();
        assert_eq!(before.len(), 40);

        assert_eq!(log.delete_records_before(60).unwrap(), 60);
        assert!(bases_on_disk(dir.path())[0] > 0, "segments below 60 are gone from disk");
        assert!(matches!(
            log.snapshot().read(0, 120, 1 << 20, true),
            Err(Error::OffsetOutOfRange { log_start: 60, .. })
        ));
        assert_eq!(walk(&old), before, "the old snapshot still reads the deleted segments");

        // Time retention takes every segment, the active one rolled first.
        let outcome = log.apply_retention(1, -1, 120, NOW).unwrap();
        assert!(outcome.deleted_segments > 0);
        assert_eq!(log.snapshot().log_start_offset(), 120);
        assert!(walk(&log.snapshot()).is_empty());
        assert_eq!(walk(&old), before);
        assert_eq!(old.size_bytes(), size);
        assert_eq!(log.snapshot().size_bytes(), 0);
    }

    #[test]
    fn read_committed_state_is_published_with_the_append() {
        // The first unstable offset and the aborted list reach readers without the log.
        use crate::log::batch::tests::encode_batch;
        use crate::log::producer_state::Marker;
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        let reader = log.reader();
        log.append(batch(2, 0), 0, NOW).unwrap();
        let txn = encode_batch(&[1, 2, 3], 10);
        log.append(from_producer(&txn, 9, 0, 0, true), 0, NOW).unwrap();
        assert_eq!(reader.snapshot().first_unstable_offset(), Some(2));
        let marker = Marker {
            commit: false,
            coordinator_epoch: 0,
        };
        log.append_marker(9, 0, marker, 0, 0, NOW).unwrap();
        let snapshot = reader.snapshot();
        assert_eq!(snapshot.first_unstable_offset(), None);
        assert_eq!(snapshot.aborted_transactions(0, 6), log.aborted_transactions(0, 6));
        assert_eq!(snapshot.aborted_transactions(0, 6).len(), 1);
    }
}
