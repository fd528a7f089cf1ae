//! One segment: a `.log` file of concatenated batches starting at `base_offset`, with its
//! offset and time indexes (Kafka's `LogSegment`). The segment keeps the append-side state
//! (size, next offset, max timestamp) in memory; the log decides when to roll.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::LogConfig;
use super::batch::{self, BatchHeader, HEADER_LEN};
use super::index::{self, Index, OffsetEntry, OffsetIndex, SharedEntries, TimeEntry, TimeIndex, read_entries};
use crate::error::{Error, Result};

/// Bytes read at a time when scanning headers from an index position (about one index
/// interval, so a lookup costs one or two reads).
const SCAN_CHUNK_BYTES: usize = 4096;
/// Bytes read at a time when recovery validates whole batches.
const RECOVERY_CHUNK_BYTES: usize = 1 << 20;

/// Appended to the files of a segment being deleted (Kafka's `LogFileUtils.DELETED_FILE_SUFFIX`):
/// the rename takes the segment out of the log in one step; `Log::open` removes leftovers.
pub(crate) const DELETED_SUFFIX: &str = ".deleted";

pub(crate) fn file_name(base_offset: i64, extension: &str) -> String {
    format!("{base_offset:020}.{extension}")
}

/// Identities of `SharedSegment`s: a clean plan names the segments it replaces by them, so a
/// segment replaced since (by another pass, a recovery, a truncation) is never mistaken for
/// the one the plan read, even with the same offsets.
static NEXT_SEGMENT_ID: AtomicU64 = AtomicU64::new(1);

/// What a segment shares with the readers of log snapshots: its `.log` file, its index
/// entries and the end of what has been written, published after each write completes. A
/// reader holding it after the segment was deleted (renamed `*.deleted`, then unlinked) still
/// reads the file through its descriptor.
pub(crate) struct SharedSegment {
    pub base_offset: i64,
    pub id: u64,
    log: Arc<File>,
    log_path: PathBuf,
    /// The published end: the size in bytes (low 32 bits) and the next offset relative to the
    /// base offset (high 32 bits) of the batches fully written, stored with Release after the
    /// write returned. One word, so a reader never pairs a size with another write's offset.
    /// `should_roll` (and the cleaner's grouping) keep both within 32 bits.
    end: AtomicU64,
    /// The published (max timestamp, offset of max timestamp), -1 when none: ListOffsets only,
    /// so a lock held for two stores is cheaper than a scheme without one.
    times: Mutex<(i64, i64)>,
    offset_entries: SharedEntries<OffsetEntry>,
    time_entries: SharedEntries<TimeEntry>,
    /// How many times the segment was cut in place (a follower's truncation): a view taken
    /// before a cut may locate bytes that are gone or were written again since, so its reads
    /// fail rather than return them (`SegmentRef::unchanged`).
    truncations: AtomicU64,
}

impl SharedSegment {
    /// Publishes the segment's end (after its bytes are written).
    fn publish(&self, size: u64, next_offset: i64, max_timestamp: i64, offset_of_max_timestamp: i64) {
        // Saturating: a value past 32 bits would mean should_roll failed; a reader then sees
        // less, never bytes that are not written.
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        let relative = u32::try_from(next_offset - self.base_offset).unwrap_or(u32::MAX);
        {
            let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
            *times = (max_timestamp, offset_of_max_timestamp);
        }
        self.end
            .store((u64::from(relative) << 32) | u64::from(size), Ordering::Release);
    }

    /// The segment as published now: what a reader may look at.
    pub fn published(self: &Arc<Self>) -> SegmentRef {
        // The count before the end: a cut publishes its lower end before it counts itself, so
        // a view that sees the new count sees the new end too.
        let truncations = self.truncations.load(Ordering::SeqCst);
        let end = self.end.load(Ordering::Acquire);
        let (max_timestamp, offset_of_max_timestamp) = *self.times.lock().unwrap_or_else(|p| p.into_inner());
        SegmentRef {
            shared: Arc::clone(self),
            base_offset: self.base_offset,
            size: end & u64::from(u32::MAX),
            next_offset: self.base_offset + i64::from(u32::try_from(end >> 32).unwrap_or(u32::MAX)),
            max_timestamp,
            offset_of_max_timestamp,
            truncations,
        }
    }

    /// The header of the first batch whose last offset is at least `offset`, among the
    /// batches below `size`.
    fn find_batch(&self, size: u64, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let relative = u32::try_from(offset.saturating_sub(self.base_offset)).unwrap_or(u32::MAX);
        let from = u64::from(index::lookup_offset(
            &read_entries(&self.offset_entries),
            relative,
            size,
        ));
        self.scan(size, from, |h| h.last_offset() >= offset)
    }

    /// Scans batch headers from position `from` up to `size` and returns the first one `found`
    /// accepts, with its position.
    fn scan(
        &self,
        size: u64,
        from: u64,
        mut found: impl FnMut(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>> {
        let mut reader = ChunkReader::new(&self.log, &self.log_path, size, SCAN_CHUNK_BYTES);
        let mut pos = from;
        while pos < size {
            let Some(bytes) = reader.get(pos, HEADER_LEN)? else {
                return Err(self.corrupt(pos, "partial batch header"));
            };
            let header = BatchHeader::parse(bytes).map_err(|e| self.corrupt(pos, &e.to_string()))?;
            if found(&header) {
                return Ok(Some((pos, header)));
            }
            pos += header.size as u64;
        }
        Ok(None)
    }

    fn corrupt(&self, pos: u64, why: &str) -> Error {
        Error::CorruptBatch(format!("{} at position {pos}: {why}", self.log_path.display()))
    }

    /// Reads `len` bytes at `pos` into one buffer.
    fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.log
            .read_exact_at(&mut buf, pos)
            .map_err(|e| Error::storage("read", &self.log_path, e))?;
        Ok(buf)
    }

    /// Where to start scanning for the first record at or after `timestamp` among the batches
    /// below `size`: the batch of the last time index entry below it, else the segment start.
    fn timestamp_scan_start(&self, size: u64, timestamp: i64) -> u64 {
        index::lookup_time_below(&read_entries(&self.time_entries), timestamp).map_or(0, |relative| {
            u64::from(index::lookup_offset(
                &read_entries(&self.offset_entries),
                relative,
                size,
            ))
        })
    }
}

/// A segment as a reader sees it: its end as published when the view was taken. A sealed
/// segment's view never changes; the active one's is taken again for each read.
#[derive(Clone)]
pub(crate) struct SegmentRef {
    shared: Arc<SharedSegment>,
    pub base_offset: i64,
    /// Bytes of whole batches written; reads never look past it.
    pub size: u64,
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    /// `SharedSegment::truncations` when the view was taken.
    truncations: u64,
}

impl SegmentRef {
    /// The identity of the segment (see `NEXT_SEGMENT_ID`).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// See `Segment::find_batch`.
    pub fn find_batch(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        self.unchanged(self.shared.find_batch(self.size, offset))
    }

    /// See `Segment::scan`.
    pub fn scan(&self, from: u64, found: impl FnMut(&BatchHeader) -> bool) -> Result<Option<(u64, BatchHeader)>> {
        self.unchanged(self.shared.scan(self.size, from, found))
    }

    pub fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        self.unchanged(self.shared.read_at(pos, len))
    }

    /// See `Segment::timestamp_scan_start`.
    pub fn timestamp_scan_start(&self, timestamp: i64) -> u64 {
        self.shared.timestamp_scan_start(self.size, timestamp)
    }

    /// `result` of a read through this view, unless the segment was cut since the view was
    /// taken: the bytes it located may then be short, or another leader's batches written at
    /// the same positions, and a read that ends in such an error returns none of them. The
    /// count is loaded after the read: a read that saw the cut file saw it after the cut
    /// counted itself (`Segment::truncate_to` counts before `set_len`).
    fn unchanged<T>(&self, result: Result<T>) -> Result<T> {
        if self.shared.truncations.load(Ordering::SeqCst) != self.truncations {
            return Err(Error::TruncatedDuringRead {
                path: self.shared.log_path.clone(),
            });
        }
        result
    }
}

/// Bytes just written to a log file that an fsync will soon have to wait for: taken under the
/// log's lock (`Log::writeback_since`), started outside it.
pub struct Writeback {
    file: Arc<File>,
    from: u64,
    to: u64,
}

impl Writeback {
    /// The range's first file position.
    #[cfg(test)]
    pub fn from(&self) -> u64 {
        self.from
    }

    /// The file position after the range.
    #[cfg(test)]
    pub fn to(&self) -> u64 {
        self.to
    }

    /// Asks the kernel to start writing the range to disk now, without waiting for it
    /// (`sync_file_range` with SYNC_FILE_RANGE_WRITE only: pages already being written are
    /// skipped). An acks=all append that lands while the flusher's fsync runs would otherwise
    /// reach the disk only when the next fsync starts, after that one returns; started here,
    /// its pages are written while the first fsync waits on its journal commit, and the next
    /// fsync finds them done or in flight. It proves nothing and orders nothing, so it is best
    /// effort: an error here is the fsync's to report (the kernel records write-back errors
    /// for the next fsync of the file), and durability is still only what an fsync returned.
    pub fn start(&self) {
        use std::os::fd::AsRawFd;
        let (Ok(from), Ok(to)) = (libc::off64_t::try_from(self.from), libc::off64_t::try_from(self.to)) else {
            return;
        };
        // SAFETY: the descriptor is open (the Arc holds the file) for the call, which takes
        // no pointer: it only queues the range's dirty pages for writing.
        let started =
            unsafe { libc::sync_file_range(self.file.as_raw_fd(), from, to - from, libc::SYNC_FILE_RANGE_WRITE) };
        if started != 0 {
            tracing::trace!("sync_file_range: {}", std::io::Error::last_os_error());
        }
    }
}

/// Whole batches of one segment, located but not read: a Fetch answer whose bytes the
/// connection's writer sends straight from the file (`sendfile`, Kafka's `FileRecords.writeTo`)
/// or reads just before sending. The bytes are below the high watermark when located, so they
/// never change, and a deleted segment stays readable through the descriptor held here; only a
/// follower's truncation can cut them, which `unchanged` tells.
#[derive(Clone)]
pub struct FileRegion {
    segment: SegmentRef,
    pos: u64,
    len: usize,
    records: u64,
    end_offset: i64,
}

impl FileRegion {
    /// Bytes of the batches.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The records count of the batches, from their headers.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The offset after the last batch.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The log file and the position of the first batch in it.
    pub fn file(&self) -> (&File, u64) {
        (&self.segment.shared.log, self.pos)
    }

    /// False once the segment was cut in place since the region was located: bytes sent from
    /// it since then may not be the ones located.
    pub fn unchanged(&self) -> bool {
        self.segment.shared.truncations.load(Ordering::SeqCst) == self.segment.truncations
    }

    /// The bytes, read now (for a connection that cannot send from the file).
    pub fn read(&self) -> Result<Vec<u8>> {
        self.segment.read_at(self.pos, self.len)
    }

    /// The error to report when sending from the file failed or found it cut.
    pub fn failed(&self, e: std::io::Error) -> Error {
        Error::storage("send", &self.segment.shared.log_path, e)
    }
}

impl SegmentRef {
    /// The whole batches from position `start` (where a batch begins) up to `end`, at most
    /// `max_bytes` of them, or the first batch alone when it is larger and `min_one_batch`:
    /// found by walking the batch headers, without reading the records. None when not even
    /// one batch fits.
    pub fn region(&self, start: u64, end: u64, max_bytes: usize, min_one_batch: bool) -> Result<Option<FileRegion>> {
        let end = end.min(self.size);
        let budget = u64::try_from(max_bytes).unwrap_or(u64::MAX);
        let limit = start.saturating_add(budget).min(end);
        let (mut at, mut records, mut end_offset) = (start, 0u64, None);
        self.scan(start, |h| {
            let next = at + h.size as u64;
            let fits = next <= limit || (min_one_batch && at == start && next <= end);
            if fits {
                at = next;
                records += u64::try_from(h.records_count).unwrap_or(0);
                end_offset = Some(h.last_offset() + 1);
            }
            !fits || at >= end
        })?;
        Ok(end_offset.map(|end_offset| FileRegion {
            segment: self.clone(),
            pos: start,
            len: usize::try_from(at - start).unwrap_or(usize::MAX),
            records,
            end_offset,
        }))
    }
}

pub(crate) struct Segment {
    pub base_offset: i64,
    /// The file, the index entries and the published end, shared with snapshot readers.
    shared: Arc<SharedSegment>,
    /// Bytes of valid batches accounted so far (ahead of the published end while a write is
    /// in progress); the writer's reads never look past it.
    pub size: u64,
    /// The offset after the last batch (the base offset when empty).
    pub next_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Largest batch maxTimestamp, -1 when none.
    pub max_timestamp: i64,
    /// Last offset of the first batch carrying `max_timestamp` (Kafka's
    /// `shallowOffsetOfMaxTimestamp`); the record itself is found by decoding that batch.
    pub offset_of_max_timestamp: i64,
    bytes_since_last_index_entry: u64,
    /// When the first batch was appended in this process (open time for a reopened segment):
    /// `segment.ms` counts from it.
    first_append_ms: Option<i64>,
    /// Created by a roll in this process: its directory entry is not yet known to be durable.
    pub created_by_roll: bool,
}

/// Allocation past a file's length that `release_reserved` leaves alone: file systems round
/// a file's blocks up to their own block size (ext4 4 KiB, XFS up to 64 KiB).
const RESERVED_SLACK_BYTES: u64 = 64 << 10;

/// The append-side state before an append, to undo it when the write fails.
#[derive(Clone, Copy)]
pub(crate) struct Tail {
    size: u64,
    next_offset: i64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    bytes_since_last_index_entry: u64,
    first_append_ms: Option<i64>,
    offset_entries: usize,
    time_entries: usize,
}

impl Tail {
    /// The segment size when the tail was taken.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// What `Segment::open` found of the indexes on disk.
pub(crate) struct LoadedIndexes {
    offsets: Option<Vec<OffsetEntry>>,
    times: Option<Vec<TimeEntry>>,
}

/// Reads a file through a reusable buffer so that consecutive small lookups (batch headers)
/// cost one read per chunk, not one per batch.
struct ChunkReader<'a> {
    file: &'a File,
    path: &'a Path,
    /// Reads never go past this position.
    end: u64,
    chunk: usize,
    buf: Vec<u8>,
    buf_start: u64,
}

impl<'a> ChunkReader<'a> {
    fn new(file: &'a File, path: &'a Path, end: u64, chunk: usize) -> Self {
        ChunkReader {
            file,
            path,
            end,
            chunk,
            buf: Vec::new(),
            buf_start: 0,
        }
    }

    /// The `len` bytes at `pos`, or None when they extend past the end.
    fn get(&mut self, pos: u64, len: usize) -> Result<Option<&[u8]>> {
        let Some(end) = pos.checked_add(len as u64).filter(|&e| e <= self.end) else {
            return Ok(None);
        };
        let buffered_end = self.buf_start + self.buf.len() as u64;
        if pos < self.buf_start || end > buffered_end {
            let want = (len.max(self.chunk) as u64).min(self.end - pos);
            self.buf.resize(want as usize, 0);
            self.file
                .read_exact_at(&mut self.buf, pos)
                .map_err(|e| Error::storage("read", self.path, e))?;
            self.buf_start = pos;
        }
        let from = (pos - self.buf_start) as usize;
        Ok(Some(&self.buf[from..from + len]))
    }

    /// Up to `len` bytes at `pos` (fewer at the end).
    fn get_prefix(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let len = (len as u64).min(self.end.saturating_sub(pos)) as usize;
        Ok(self.get(pos, len)?.unwrap_or_default())
    }
}

impl Segment {
    /// Creates a new empty segment (a roll, or the first segment of a new log).
    pub fn create(dir: &Path, base_offset: i64, created_by_roll: bool) -> Result<Segment> {
        Segment::create_suffixed(dir, base_offset, created_by_roll, "")
    }

    /// Creates a new empty segment whose three file names end with `suffix` (the cleaner's
    /// `.cleaned` segments, renamed into place once complete).
    pub fn create_suffixed(dir: &Path, base_offset: i64, created_by_roll: bool, suffix: &str) -> Result<Segment> {
        let log_path = dir.join(file_name(base_offset, "log") + suffix);
        let log = open_log(&log_path)?;
        let len = log.metadata().map_err(|e| Error::storage("stat", &log_path, e))?.len();
        if len != 0 {
            // A leftover file with this base offset and data means the log is not what we think.
            return Err(Error::storage(
                "create segment",
                &log_path,
                std::io::Error::new(ErrorKind::AlreadyExists, "segment exists with data"),
            ));
        }
        let (offset_index, _) = Index::open(dir.join(file_name(base_offset, "index") + suffix), true)?;
        let (time_index, _) = Index::open(dir.join(file_name(base_offset, "timeindex") + suffix), true)?;
        Ok(Segment::empty(
            base_offset,
            log,
            log_path,
            offset_index,
            time_index,
            created_by_roll,
        ))
    }

    /// A segment of no known batch yet: what `create` makes and `open` starts from.
    fn empty(
        base_offset: i64,
        log: File,
        log_path: PathBuf,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        created_by_roll: bool,
    ) -> Segment {
        let shared = Arc::new(SharedSegment {
            base_offset,
            id: NEXT_SEGMENT_ID.fetch_add(1, Ordering::Relaxed),
            log: Arc::new(log),
            log_path,
            end: AtomicU64::new(0),
            times: Mutex::new((-1, -1)),
            offset_entries: offset_index.shared(),
            time_entries: time_index.shared(),
            truncations: AtomicU64::new(0),
        });
        Segment {
            base_offset,
            shared,
            size: 0,
            next_offset: base_offset,
            offset_index,
            time_index,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            bytes_since_last_index_entry: 0,
            first_append_ms: None,
            created_by_roll,
        }
    }

    /// Opens an existing segment. Its state is unknown until `trust` or `recover`.
    pub fn open(dir: &Path, base_offset: i64) -> Result<(Segment, LoadedIndexes)> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let log = open_log(&log_path)?;
        let (offset_index, offsets) = Index::open(dir.join(file_name(base_offset, "index")), false)?;
        let (time_index, times) = Index::open(dir.join(file_name(base_offset, "timeindex")), false)?;
        let segment = Segment::empty(base_offset, log, log_path, offset_index, time_index, false);
        Ok((segment, LoadedIndexes { offsets, times }))
    }

    pub fn log_file(&self) -> (Arc<File>, PathBuf) {
        (Arc::clone(&self.shared.log), self.shared.log_path.clone())
    }

    /// The bytes written from file position `from` to the segment's end, for `Writeback::start`;
    /// None when there are none.
    pub fn writeback_from(&self, from: u64) -> Option<Writeback> {
        (self.size > from).then(|| Writeback {
            file: Arc::clone(&self.shared.log),
            from,
            to: self.size,
        })
    }

    /// Makes everything accounted so far visible to readers. Called once the bytes are written
    /// (a write, a recovery, an adjusted end at open), never between accounting and writing.
    pub fn publish(&self) {
        self.shared.publish(
            self.size,
            self.next_offset,
            self.max_timestamp,
            self.offset_of_max_timestamp,
        );
    }

    /// The segment as readers see it.
    pub fn published(&self) -> SegmentRef {
        self.shared.published()
    }

    /// What readers share of the segment.
    pub fn shared(&self) -> &Arc<SharedSegment> {
        &self.shared
    }

    fn file_len(&self) -> Result<u64> {
        Ok(self
            .shared
            .log
            .metadata()
            .map_err(|e| Error::storage("stat", &self.shared.log_path, e))?
            .len())
    }

    /// Adopts the files as they are (after a clean shutdown, or before the recovery point):
    /// the indexes from disk, the size from the file, the next offset from `next_base` or,
    /// for the last segment, a header scan after the last index entry. Returns false when
    /// something does not add up; the caller then recovers the segment. In a `compacted`
    /// segment the first batch may start above the base offset (offsets a cleaner removed).
    pub fn trust(&mut self, loaded: LoadedIndexes, next_base: Option<i64>, compacted: bool) -> Result<bool> {
        let size = self.file_len()?;
        let (Some(offsets), Some(times)) = (loaded.offsets, loaded.times) else {
            return Ok(false);
        };
        if !OffsetIndex::is_consistent(&offsets, size) || !TimeIndex::is_consistent(&times) {
            return Ok(false);
        }
        let start = offsets.last().map_or(0, |e| u64::from(e.position));
        let next_offset = match next_base {
            Some(next) => next,
            None => {
                let mut reader = ChunkReader::new(&self.shared.log, &self.shared.log_path, size, SCAN_CHUNK_BYTES);
                let mut pos = start;
                let mut next = self.base_offset;
                while pos < size {
                    let Some(header) = reader.get(pos, HEADER_LEN)? else {
                        return Ok(false);
                    };
                    let Ok(h) = BatchHeader::parse(header) else {
                        return Ok(false);
                    };
                    // Offsets only grow: a header that goes backwards (damaged, though the
                    // shutdown was clean) sends the segment to a full recovery.
                    let Some(after) = self.fitting_next_offset(&h) else {
                        return Ok(false);
                    };
                    if pos + h.size as u64 > size
                        || (pos == 0 && !compacted && h.base_offset != self.base_offset)
                        || h.base_offset < next
                    {
                        return Ok(false);
                    }
                    pos += h.size as u64;
                    next = after;
                }
                if let Some(e) = offsets.last()
                    && self.base_offset + i64::from(e.relative_offset) >= next
                {
                    return Ok(false);
                }
                next
            }
        };
        if let Some(t) = times.last() {
            if self.base_offset + i64::from(t.relative_offset) >= next_offset {
                return Ok(false);
            }
            self.max_timestamp = t.timestamp;
            self.offset_of_max_timestamp = self.base_offset + i64::from(t.relative_offset);
        }
        self.size = size;
        self.next_offset = next_offset;
        self.bytes_since_last_index_entry = size - start;
        self.offset_index.load(offsets);
        self.time_index.load(times);
        self.publish();
        Ok(true)
    }

    /// Validates every batch (framing, magic, CRC32C, record count, offsets contiguous from the
    /// base offset, within the segment's 32-bit relative range), truncates the file at the
    /// first bad byte and rebuilds both indexes. Returns whether anything was truncated. A
    /// `compacted` segment (a cleaner's output, or a compacted log's follower copy of its
    /// leader's) may have offset gaps before and between batches and fewer records than
    /// offsets in a batch; its offsets must still increase.
    pub fn recover(&mut self, config: &LogConfig, compacted: bool) -> Result<bool> {
        let file_len = self.file_len()?;
        self.offset_index.clear()?;
        self.time_index.clear()?;
        self.size = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.bytes_since_last_index_entry = 0;
        let log = Arc::clone(&self.shared.log);
        let log_path = self.shared.log_path.clone();
        let mut reader = ChunkReader::new(&log, &log_path, file_len, RECOVERY_CHUNK_BYTES);
        let mut pos = 0u64;
        let mut bad = None;
        while pos < file_len {
            let available = usize::try_from(file_len - pos).unwrap_or(usize::MAX);
            let framed = batch::frame(reader.get_prefix(pos, HEADER_LEN)?, available);
            let checked = match framed {
                Ok(size) => match reader.get(pos, size)? {
                    Some(bytes) if compacted => batch::check_compacted(bytes),
                    Some(bytes) => batch::check(bytes),
                    None => Err(Error::CorruptBatch("batch past the end of the file".into())),
                },
                Err(e) => Err(e),
            };
            let header = match checked {
                Ok(h) if h.base_offset < self.next_offset || (!compacted && h.base_offset > self.next_offset) => {
                    bad = Some(format!(
                        "batch at offset {} where {} was expected",
                        h.base_offset, self.next_offset
                    ));
                    break;
                }
                // No writer puts a batch there (rolls and the cleaner's grouping keep every
                // offset of a segment within i32 of its base): a damaged baseOffset, which the
                // CRC does not cover.
                Ok(h) if self.fitting_next_offset(&h).is_none() => {
                    bad = Some(format!(
                        "batch at offset {} outside the segment's offset range",
                        h.base_offset
                    ));
                    break;
                }
                Ok(h) => {
                    self.skip_to(h.base_offset);
                    h
                }
                Err(e) => {
                    bad = Some(e.to_string());
                    break;
                }
            };
            self.account(&header, config);
            pos += header.size as u64;
        }
        if let Some(why) = &bad {
            tracing::warn!(
                segment = %log_path.display(),
                position = pos,
                dropped_bytes = file_len - pos,
                "recovery truncates the segment: {why}"
            );
            log.set_len(pos).map_err(|e| Error::storage("truncate", &log_path, e))?;
        }
        self.bytes_since_last_index_entry = pos - self.offset_index.last().map_or(0, |e| u64::from(e.position));
        self.persist_indexes()?;
        self.publish();
        Ok(bad.is_some())
    }

    /// Where a cut of the segment at `offset` falls: the position of the first batch whose
    /// last offset is at least `offset` (the segment's size when there is none), and the
    /// offset after the batches before it, which is the segment's next offset after the cut.
    pub fn cut_point(&self, offset: i64) -> Result<(u64, i64)> {
        if offset <= self.base_offset {
            return Ok((0, self.base_offset));
        }
        // An index entry names the position of the batch ending at its offset: the greatest
        // entry below `offset` is a batch that stays, so the scan starts on a kept batch.
        let from = index::lookup_offset(
            &read_entries(&self.shared.offset_entries),
            self.relative(offset - 1),
            self.size,
        );
        let mut kept_end = self.base_offset;
        let found = self.scan(u64::from(from), |h| {
            if h.last_offset() >= offset {
                return true;
            }
            kept_end = h.last_offset() + 1;
            false
        })?;
        Ok((found.map_or(self.size, |(position, _)| position), kept_end))
    }

    /// Cuts the segment before the first batch whose last offset is at least `offset`, so a
    /// batch holding `offset` goes whole (Kafka's `LogSegment.truncateTo`), with the index
    /// entries of what goes; the max timestamp is found again from the time index and the
    /// headers after its last entry (Kafka's `readLargestTimestamp`). Returns whether anything
    /// changed.
    ///
    /// The file is cut in place and fsynced before this returns: the epoch and producer
    /// checkpoints the caller lowers next must not describe a shorter log than a power loss
    /// could bring back. Readers are told first: the lower end is published, then the cut is
    /// counted (views taken before fail their reads, see `SegmentRef::unchanged`), then the
    /// file is cut.
    pub fn truncate_to(&mut self, offset: i64) -> Result<bool> {
        let (position, next_offset) = self.cut_point(offset)?;
        if position == self.size && next_offset == self.next_offset {
            return Ok(false);
        }
        self.size = position;
        self.next_offset = next_offset;
        self.offset_index.truncate_where(|e| u64::from(e.position) < position)?;
        let base_offset = self.base_offset;
        self.time_index
            .truncate_where(|e| base_offset + i64::from(e.relative_offset) < next_offset)?;
        let (mut max_timestamp, mut offset_of_max_timestamp) = self
            .time_index
            .last()
            .map_or((-1, -1), |t| (t.timestamp, base_offset + i64::from(t.relative_offset)));
        // Every batch up to the last time entry's is at most its timestamp: scan the rest.
        let from = if offset_of_max_timestamp >= 0 {
            self.find_batch(offset_of_max_timestamp)?.map_or(self.size, |(p, _)| p)
        } else {
            0
        };
        self.scan(from, |h| {
            if h.max_timestamp > max_timestamp {
                max_timestamp = h.max_timestamp;
                offset_of_max_timestamp = h.last_offset();
            }
            false
        })?;
        self.max_timestamp = max_timestamp;
        self.offset_of_max_timestamp = offset_of_max_timestamp;
        self.bytes_since_last_index_entry = position - self.offset_index.last().map_or(0, |e| u64::from(e.position));
        if position == 0 {
            // Kafka restarts an emptied segment's roll clock.
            self.first_append_ms = None;
        }
        self.publish();
        self.shared.truncations.fetch_add(1, Ordering::SeqCst);
        let log = &self.shared.log;
        let log_path = &self.shared.log_path;
        log.set_len(position)
            .map_err(|e| Error::storage("truncate", log_path, e))?;
        log.sync_data().map_err(|e| Error::storage("fsync", log_path, e))?;
        Ok(true)
    }

    pub fn tail(&self) -> Tail {
        Tail {
            size: self.size,
            next_offset: self.next_offset,
            max_timestamp: self.max_timestamp,
            offset_of_max_timestamp: self.offset_of_max_timestamp,
            bytes_since_last_index_entry: self.bytes_since_last_index_entry,
            first_append_ms: self.first_append_ms,
            offset_entries: self.offset_index.len(),
            time_entries: self.time_index.len(),
        }
    }

    /// Undoes the accounting done since `tail` was taken (the write failed).
    pub fn restore(&mut self, tail: Tail) {
        self.size = tail.size;
        self.next_offset = tail.next_offset;
        self.max_timestamp = tail.max_timestamp;
        self.offset_of_max_timestamp = tail.offset_of_max_timestamp;
        self.bytes_since_last_index_entry = tail.bytes_since_last_index_entry;
        self.first_append_ms = tail.first_append_ms;
        self.offset_index.truncate_pending(tail.offset_entries);
        self.time_index.truncate_pending(tail.time_entries);
    }

    /// Whether a batch of `batch_size` bytes ending at `last_offset` must go to a new segment
    /// (Kafka's `LogSegment.shouldRoll`). An empty segment always takes the batch.
    pub fn should_roll(&self, batch_size: usize, last_offset: i64, now_ms: i64, config: &LogConfig) -> bool {
        if self.size == 0 {
            return false;
        }
        self.size + batch_size as u64 > config.segment_bytes
            || self.first_append_ms.is_some_and(|t| now_ms.saturating_sub(t) > config.segment_ms)
            || self.offset_index.len() as u64 >= config.segment_index_bytes / super::index::OFFSET_ENTRY_LEN as u64
            || self.time_index.len() as u64 >= config.segment_index_bytes / super::index::TIME_ENTRY_LEN as u64
            // Relative offsets in the indexes are 32-bit; Kafka keeps them within i32.
            || last_offset - self.base_offset > i64::from(i32::MAX)
            || self.size + batch_size as u64 > u64::from(u32::MAX)
    }

    /// Whether `batches` batches of `bytes` in all, ending before `next_offset`, fit this
    /// segment without any of them rolling it (`should_roll` false for each), counting one
    /// entry per batch in each index.
    pub fn takes_without_roll(
        &self,
        bytes: u64,
        batches: usize,
        next_offset: i64,
        now_ms: i64,
        config: &LogConfig,
    ) -> bool {
        let size = self.size.saturating_add(bytes);
        let entries = |index_len: usize, entry_len: usize| {
            (index_len.saturating_add(batches) as u64) < config.segment_index_bytes / entry_len as u64
        };
        size <= config.segment_bytes
            && size <= u64::from(u32::MAX)
            && self
                .first_append_ms
                .is_none_or(|t| now_ms.saturating_sub(t) <= config.segment_ms)
            && entries(self.offset_index.len(), super::index::OFFSET_ENTRY_LEN)
            && entries(self.time_index.len(), super::index::TIME_ENTRY_LEN)
            && next_offset.saturating_sub(1).saturating_sub(self.base_offset) <= i64::from(i32::MAX)
    }

    /// Moves the next offset up to `offset`, the base offset of a batch that follows offsets
    /// a log cleaner removed (its own, or on a follower its leader's): the segment then spans
    /// them, as a cleaned segment spans up to the next one. Called before `account`, once
    /// every batch accounted before is written (`publish` may follow at any time).
    pub fn skip_to(&mut self, offset: i64) {
        debug_assert!(offset >= self.next_offset, "offsets only increase");
        self.next_offset = self.next_offset.max(offset);
    }

    /// The offset after `header`'s batch when it fits this segment: its offsets at or above
    /// the base offset and within i32 of it (the indexes' relative offsets are 32-bit), and
    /// representable. None for a batch no writer would place here.
    fn fitting_next_offset(&self, header: &BatchHeader) -> Option<i64> {
        let next = header.checked_next_offset()?;
        (header.base_offset >= self.base_offset && next - 1 - self.base_offset <= i64::from(i32::MAX)).then_some(next)
    }

    /// Accounts for a batch placed at the current end: indexes, max timestamp, size, next offset.
    /// Mirrors Kafka's `LogSegment.append`: an index entry for the batch's last offset at the
    /// batch's position once more than `index.interval.bytes` were written since the last one.
    /// A batch after a gap is preceded by `skip_to`.
    pub fn account(&mut self, header: &BatchHeader, config: &LogConfig) {
        debug_assert_eq!(header.base_offset, self.next_offset, "offsets must be contiguous");
        debug_assert!(
            header.last_offset() - self.base_offset <= i64::from(i32::MAX),
            "offsets within i32 of the segment's base"
        );
        let last_offset = header.last_offset();
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
        if self.bytes_since_last_index_entry > config.index_interval_bytes {
            self.offset_index.push(OffsetEntry {
                relative_offset: self.relative(last_offset),
                // should_roll keeps segments below 4 GiB.
                position: u32::try_from(self.size).unwrap_or(u32::MAX),
            });
            let relative_max = self.relative(self.offset_of_max_timestamp);
            self.time_index.maybe_push(self.max_timestamp, relative_max);
            self.bytes_since_last_index_entry = 0;
        }
        self.size += header.size as u64;
        self.bytes_since_last_index_entry += header.size as u64;
        self.next_offset = last_offset + 1;
    }

    pub fn note_append_time(&mut self, now_ms: i64) {
        self.first_append_ms.get_or_insert(now_ms);
    }

    /// Starts the `segment.ms` clock of a reopened, non-empty active segment.
    pub fn start_roll_clock(&mut self, now_ms: i64) {
        if self.size > 0 {
            self.first_append_ms = Some(now_ms);
        }
    }

    fn relative(&self, offset: i64) -> u32 {
        // should_roll keeps every offset of the segment within i32 of its base.
        u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX)
    }

    /// Writes `slices` at the end of the log file, all or nothing as far as the log can tell:
    /// on failure the file is cut back to `cut_to` (its size before the write) so that the next
    /// append does not land after a torn batch. The batches must be accounted already: once
    /// written they are published to readers (the end moves only after the bytes are in).
    pub fn write_all(&self, slices: &mut [IoSlice<'_>], cut_to: u64) -> Result<()> {
        let mut slices = slices;
        IoSlice::advance_slices(&mut slices, 0);
        while !slices.is_empty() {
            // The file is opened in append mode: each writev lands at the end of the file.
            match (&*self.shared.log).write_vectored(slices) {
                Ok(0) => {
                    let e = std::io::Error::from(ErrorKind::WriteZero);
                    return Err(self.undo_write(e, cut_to));
                }
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.undo_write(e, cut_to)),
            }
        }
        self.publish();
        Ok(())
    }

    /// Gives back blocks allocated past the end of the file, which builds before 1f25b49 reserved
    /// ahead of an active segment's appends (`fallocate` FALLOC_FL_KEEP_SIZE): ext4 and XFS free
    /// a file's blocks past its length when it is truncated to that length. Only when the
    /// file's length is the segment's size and its blocks pass that length rounded up to
    /// `RESERVED_SLACK_BYTES`, so no byte is ever cut here and an ordinary file costs one `stat`.
    fn release_reserved(&self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let log = &self.shared.log;
        let meta = log
            .metadata()
            .map_err(|e| Error::storage("stat", &self.shared.log_path, e))?;
        let allocated = meta.blocks().saturating_mul(512);
        if meta.len() == self.size && allocated > meta.len().next_multiple_of(RESERVED_SLACK_BYTES) {
            log.set_len(meta.len())
                .map_err(|e| Error::storage("truncate", &self.shared.log_path, e))?;
        }
        Ok(())
    }

    /// Cuts a failed write back. Readers never saw its bytes: the end is published only after
    /// a write completes.
    fn undo_write(&self, e: std::io::Error, cut_to: u64) -> Error {
        if let Err(cut) = self.shared.log.set_len(cut_to) {
            tracing::error!(segment = %self.shared.log_path.display(), "cannot cut a failed write: {cut}");
        }
        Error::storage("append", &self.shared.log_path, e)
    }

    /// Seals the segment when it stops being active: a final time index entry for its max
    /// timestamp (Kafka's `onBecomeInactiveSegment`), so a later open reads the max from the
    /// index, and all entries written out.
    pub fn seal(&mut self) -> Result<()> {
        if self.max_timestamp >= 0 {
            let relative_max = self.relative(self.offset_of_max_timestamp);
            self.time_index.maybe_push(self.max_timestamp, relative_max);
        }
        self.release_reserved()?;
        self.persist_indexes()
    }

    pub fn persist_indexes(&mut self) -> Result<()> {
        self.offset_index.persist()?;
        self.time_index.persist()
    }

    pub fn pending_index_entries(&self) -> usize {
        self.offset_index.pending() + self.time_index.pending()
    }

    pub fn sync_indexes(&mut self) -> Result<()> {
        self.offset_index.sync()?;
        self.time_index.sync()
    }

    /// The header of the first batch whose last offset is at least `offset`, found from the
    /// offset index and a header scan, or None when the segment ends before.
    pub fn find_batch(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        self.shared.find_batch(self.size, offset)
    }

    /// Scans batch headers from position `from` and returns the first one `found` accepts,
    /// with its position.
    pub fn scan(&self, from: u64, found: impl FnMut(&BatchHeader) -> bool) -> Result<Option<(u64, BatchHeader)>> {
        self.shared.scan(self.size, from, found)
    }

    /// Reads `len` bytes at `pos` into one buffer.
    pub fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        self.shared.read_at(pos, len)
    }

    /// The segment's largest timestamp for time retention: its max timestamp, or the log
    /// file's modification time when no batch carries one (Kafka's `LogSegment.largestTimestamp`).
    pub fn largest_timestamp(&self) -> Result<i64> {
        if self.max_timestamp >= 0 {
            return Ok(self.max_timestamp);
        }
        let modified = self
            .shared
            .log
            .metadata()
            .and_then(|m| m.modified())
            .map_err(|e| Error::storage("stat", &self.shared.log_path, e))?;
        let since_epoch = modified.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    /// Deletes the files of the segment with `base_offset` in `dir` (recovery dropping
    /// segments after a truncation).
    pub fn delete_files(dir: &Path, base_offset: i64) -> Result<()> {
        for ext in ["log", "index", "timeindex", "txnindex"] {
            let path = dir.join(file_name(base_offset, ext));
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != ErrorKind::NotFound => {
                    return Err(Error::storage("delete", &path, e));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Renames the files of the segment with `base_offset` to `*.deleted` (indexes first, the `.log`
/// last), then removes them. Files already gone are skipped. A crash anywhere leaves either the
/// whole `.log` (its missing indexes are rebuilt at open) or no `.log` at all, never an index
/// without its log; `Log::open` removes the `*.deleted` leftovers. Open descriptors (a
/// `FlushHandle` being synced, a reader's snapshot) keep working on the unlinked files.
pub(crate) fn remove_files(dir: &Path, base_offset: i64) -> Result<()> {
    for path in rename_deleted(dir, base_offset)? {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => return Err(Error::storage("delete", &path, e)),
            _ => {}
        }
    }
    Ok(())
}

/// Renames the files of the segment with `base_offset` to `*.deleted` (indexes first, the
/// `.log` last) and returns the new paths.
pub(crate) fn rename_deleted(dir: &Path, base_offset: i64) -> Result<Vec<PathBuf>> {
    let mut renamed = Vec::with_capacity(4);
    for ext in ["txnindex", "index", "timeindex", "log"] {
        let path = dir.join(file_name(base_offset, ext));
        let mut deleted = path.clone().into_os_string();
        deleted.push(DELETED_SUFFIX);
        let deleted = PathBuf::from(deleted);
        match std::fs::rename(&path, &deleted) {
            Ok(()) => renamed.push(deleted),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(Error::storage("rename", &path, e)),
        }
    }
    Ok(renamed)
}

fn open_log(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Error::storage("open segment", path, e))
}
