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
use super::segment::{SegmentRef, SharedSegment};
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
