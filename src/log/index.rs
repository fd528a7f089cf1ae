//! A segment's sparse indexes, Kafka's `OffsetIndex` and `TimeIndex` formats: `.index` holds
//! 8-byte entries (relative offset u32, file position u32), `.timeindex` 12-byte entries
//! (timestamp i64, relative offset u32), all big-endian. Entries live in memory for lookups and
//! are appended to the file lazily (`persist`); the files hold exactly the entries written (no
//! preallocation). Indexes are never fsynced on the hot path: recovery rebuilds any index that
//! is missing or inconsistent. The file is opened only for the moment it is written or
//! fsynced (at a flush, a roll, a close), so indexes hold no file descriptor: a segment costs
//! one, its `.log`, as in Kafka, and 10,000 partitions fit a 20,000-descriptor limit.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};

pub(crate) const OFFSET_ENTRY_LEN: usize = 8;
pub(crate) const TIME_ENTRY_LEN: usize = 12;

/// One entry of a segment index file, with its fixed-size encoding.
pub(crate) trait Entry: Copy {
    const LEN: usize;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(b: &[u8]) -> Self;
}

/// `.index`: the batch whose last offset is `base + relative_offset` starts at `position`.
/// Kafka indexes a batch's last offset so that entries stay increasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// `.timeindex`: every record up to offset `base + relative_offset` has a timestamp at most
/// `timestamp`, and the batch ending there holds the maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

impl Entry for OffsetEntry {
    const LEN: usize = OFFSET_ENTRY_LEN;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        OffsetEntry {
            relative_offset: be_u32(&b[0..4]),
            position: be_u32(&b[4..8]),
        }
    }
}

impl Entry for TimeEntry {
    const LEN: usize = TIME_ENTRY_LEN;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.relative_offset.to_be_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        let mut ts = [0; 8];
        ts.copy_from_slice(&b[0..8]);
        TimeEntry {
            timestamp: i64::from_be_bytes(ts),
            relative_offset: be_u32(&b[8..12]),
        }
    }
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(b);
    u32::from_be_bytes(a)
}

/// An index's in-memory entries, shared by the writer (which pushes them) and the readers of
/// log snapshots (which search them). The lock is held only for a push or a binary search,
/// never across a file operation, so a reader never waits on the writer's syscalls.
pub(crate) type SharedEntries<E> = Arc<RwLock<Vec<E>>>;

/// Read access to shared entries; a poisoned lock still holds whole entries (pushes and
/// truncations do not panic midway), so its data is used as is.
pub(crate) fn read_entries<E>(entries: &RwLock<Vec<E>>) -> RwLockReadGuard<'_, Vec<E>> {
    entries.read().unwrap_or_else(|p| p.into_inner())
}

fn write_entries<E>(entries: &RwLock<Vec<E>>) -> RwLockWriteGuard<'_, Vec<E>> {
    entries.write().unwrap_or_else(|p| p.into_inner())
}

/// An index file and its entries.
pub(crate) struct Index<E: Entry> {
    path: PathBuf,
    entries: SharedEntries<E>,
    /// Entries already written to the file; the rest are pending.
    persisted: usize,
    /// Written since the last fsync (only `close` fsyncs indexes, to make a clean open trustable).
    dirty: bool,
}

pub(crate) type OffsetIndex = Index<OffsetEntry>;
pub(crate) type TimeIndex = Index<TimeEntry>;

impl<E: Entry> Index<E> {
    /// Opens the index file, creating it empty when `truncate` or absent. Returns the index and
    /// the entries found in the file, or None when the file was absent or its size is not a
    /// multiple of the entry size (the caller then rebuilds it).
    pub fn open(path: PathBuf, truncate: bool) -> Result<(Index<E>, Option<Vec<E>>)> {
        let existed = !truncate && path.exists();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(truncate)
            .open(&path)
            .map_err(|e| Error::storage("open index", &path, e))?;
        drop(file);
        let mut found = None;
        if existed {
            let bytes = std::fs::read(&path).map_err(|e| Error::storage("read index", &path, e))?;
            if bytes.len() % E::LEN == 0 {
                found = Some(bytes.chunks_exact(E::LEN).map(E::decode).collect());
            }
        }
        let index = Index {
            path,
            entries: Arc::new(RwLock::new(Vec::new())),
            persisted: 0,
            dirty: false,
        };
        Ok((index, found))
    }

    /// Adopts entries read from the file (already checked by the caller).
    pub fn load(&mut self, entries: Vec<E>) {
        self.persisted = entries.len();
        *write_entries(&self.entries) = entries;
    }

    /// The entries, for the readers of log snapshots.
    pub fn shared(&self) -> SharedEntries<E> {
        Arc::clone(&self.entries)
    }

    /// The file, opened for one write or fsync (closed when dropped).
    fn file(&self) -> Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)
            .map_err(|e| Error::storage("open index", &self.path, e))
    }

    /// Forgets all entries and empties the file, before a rebuild.
    pub fn clear(&mut self) -> Result<()> {
        write_entries(&self.entries).clear();
        self.persisted = 0;
        self.dirty = true;
        self.file()?
            .set_len(0)
            .map_err(|e| Error::storage("truncate index", &self.path, e))
    }

    pub fn len(&self) -> usize {
        read_entries(&self.entries).len()
    }

    pub fn last(&self) -> Option<E> {
        read_entries(&self.entries).last().copied()
    }

    pub fn push(&mut self, entry: E) {
        write_entries(&self.entries).push(entry);
    }

    /// Drops in-memory entries past `len` that were never persisted (undo of a failed append).
    pub fn truncate_pending(&mut self, len: usize) {
        write_entries(&self.entries).truncate(len.max(self.persisted));
    }

    /// Keeps the entries `keep` accepts, a prefix of them (a segment cut at a batch boundary
    /// keeps the entries below the cut), in memory and in the file.
    pub fn truncate_where(&mut self, keep: impl Fn(&E) -> bool) -> Result<()> {
        let len = {
            let mut entries = write_entries(&self.entries);
            let len = entries.partition_point(|e| keep(e));
            entries.truncate(len);
            len
        };
        if self.persisted > len {
            self.persisted = len;
            self.dirty = true;
            self.file()?
                .set_len((len * E::LEN) as u64)
                .map_err(|e| Error::storage("truncate index", &self.path, e))?;
        }
        Ok(())
    }

    /// Entries waiting to be written.
    pub fn pending(&self) -> usize {
        self.len() - self.persisted
    }

    /// Writes the pending entries at the end of the file in one write.
    pub fn persist(&mut self) -> Result<()> {
        // Encoded under the read lock, written without it.
        let (buf, len) = {
            let entries = read_entries(&self.entries);
            if self.persisted == entries.len() {
                return Ok(());
            }
            let mut buf = Vec::with_capacity((entries.len() - self.persisted) * E::LEN);
            for e in &entries[self.persisted..] {
                e.encode(&mut buf);
            }
            (buf, entries.len())
        };
        let at = (self.persisted * E::LEN) as u64;
        self.file()?
            .write_all_at(&buf, at)
            .map_err(|e| Error::storage("write index", &self.path, e))?;
        self.persisted = len;
        self.dirty = true;
        Ok(())
    }

    /// fsyncs the file if it was written since the last sync.
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            // fsync through a new descriptor covers what earlier ones wrote (same inode).
            self.file()?
                .sync_data()
                .map_err(|e| Error::storage("fsync index", &self.path, e))?;
            self.dirty = false;
        }
        Ok(())
    }
}

/// The file position to start scanning from for `relative_offset`: that of the greatest
/// entry at or below it, else the segment start. Entries at or past `size` (batches being
/// written, not yet published to readers) are ignored.
pub(crate) fn lookup_offset(entries: &[OffsetEntry], relative_offset: u32, size: u64) -> u32 {
    let below_size = entries.partition_point(|e| u64::from(e.position) < size);
    let n = entries[..below_size].partition_point(|e| e.relative_offset <= relative_offset);
    n.checked_sub(1).map_or(0, |i| entries[i].position)
}

/// The relative offset to start scanning from for the first record at or after `timestamp`:
/// the greatest entry strictly below it (every record up to that entry's offset is older than
/// `timestamp`), else None (scan from the segment start).
/// Kafka's `TimeIndex.lookup` takes the entry at or below, which can skip an earlier record
/// carrying exactly the target timestamp; strictly below cannot.
pub(crate) fn lookup_time_below(entries: &[TimeEntry], timestamp: i64) -> Option<u32> {
    let n = entries.partition_point(|e| e.timestamp < timestamp);
    n.checked_sub(1).map(|i| entries[i].relative_offset)
}

impl Index<OffsetEntry> {
    /// Entries read from disk are trusted only when increasing and inside the log file.
    pub fn is_consistent(entries: &[OffsetEntry], log_size: u64) -> bool {
        entries
            .windows(2)
            .all(|w| w[0].relative_offset < w[1].relative_offset && w[0].position < w[1].position)
            && entries.last().is_none_or(|e| u64::from(e.position) < log_size)
    }
}

impl Index<TimeEntry> {
    /// Appends an entry only when `timestamp` exceeds the last one indexed (Kafka's
    /// `TimeIndex.maybeAppend`), so timestamps in the file strictly increase.
    pub fn maybe_push(&mut self, timestamp: i64, relative_offset: u32) {
        let mut entries = write_entries(&self.entries);
        let last = entries.last().map_or(-1, |e| e.timestamp);
        if timestamp > last {
            entries.push(TimeEntry {
                timestamp,
                relative_offset,
            });
        }
    }

    pub fn is_consistent(entries: &[TimeEntry]) -> bool {
        entries
            .windows(2)
            .all(|w| w[0].timestamp < w[1].timestamp && w[0].relative_offset <= w[1].relative_offset)
    }
}
