//! The raft log of the metadata quorum, on disk under `<data_dir>/__cluster_metadata-raft/`:
//!
//! - `log`: the entries, appended as CRC32C frames of serde_json (`disk::encode_frame`), each
//!   batch fsynced before openraft is told it is flushed. Open cuts a torn or corrupt tail (a
//!   crash mid-append) and refuses a file whose valid entries are not contiguous.
//! - `vote`: the last vote, replaced atomically and durably before `save_vote` returns.
//! - `purged`: the last purged log id, replaced durably *before* the log file is rewritten
//!   without the purged entries, so a crash between the two leaves entries that open skips.
//! - `committed`: the last committed log id, a hint only (replaced without fsync): at restart
//!   openraft re-applies the log up to it at once instead of waiting for a leader. Open keeps
//!   it only if the log still holds that entry (or it is purged), so a stale or torn value costs
//!   nothing but that wait.
//!
//! Every file operation runs off the async workers (`spawn_blocking`). Readers (openraft's
//! replication tasks) share the entries in memory; the file belongs to the one writer. The
//! log is short: a snapshot is built every `snapshot_logs_since_last` entries and the log is
//! purged up to it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, OptionalSend, RaftLogReader, StorageIOError};

use super::disk;
use super::{Entry, LogId, StorageError, TypeConfig, Vote};
use crate::error::{Error, Result};

const LOG_FILE: &str = "log";
const VOTE_FILE: &str = "vote";
const PURGED_FILE: &str = "purged";
const COMMITTED_FILE: &str = "committed";
/// One entry holds one metadata record (bounded by `super::RECORD_BYTES_MAX`) or a membership:
/// a longer frame can only be corruption.
const ENTRY_BYTES_MAX: usize = 4 << 20;

/// The entries in memory, shared by the writer and openraft's log readers.
type Entries = Arc<Mutex<BTreeMap<u64, Entry>>>;

/// The log storage openraft drives (`RaftLogStorage`): one per node.
pub(crate) struct LogStore {
    dir: PathBuf,
    entries: Entries,
    /// The log file; behind a lock only so that blocking tasks can borrow it.
    file: Arc<Mutex<LogFile>>,
    vote: Option<Vote>,
    committed: Option<LogId>,
    last_purged: Option<LogId>,
    /// Writes refused by a full disk wait for space instead of stopping the raft.
    full_disk: disk::FullDiskWait,
}

/// A reader of the log, one per replication task.
#[derive(Clone)]
pub(crate) struct LogReader {
    entries: Entries,
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, cutting a torn tail. Blocking.
    pub(crate) fn open(dir: &Path) -> Result<LogStore> {
        crate::log::checkpoint::create_dir_durably(dir)?;
        for name in [LOG_FILE, VOTE_FILE, PURGED_FILE, COMMITTED_FILE] {
            disk::remove_stale_temp(&dir.join(name))?;
        }
        let vote = read_json::<Vote>(&dir.join(VOTE_FILE))?;
        let last_purged = read_json::<LogId>(&dir.join(PURGED_FILE))?;
        let (file, entries) = LogFile::open(&dir.join(LOG_FILE), last_purged)?;
        // A hint: kept only if it names an entry this log holds or has purged.
        let committed = read_json::<LogId>(&dir.join(COMMITTED_FILE))
            .ok()
            .flatten()
            .filter(|c| entries.get(&c.index).is_some_and(|e| e.log_id == *c) || Some(*c) <= last_purged)
            .max(last_purged);
        Ok(LogStore {
            dir: dir.to_path_buf(),
            entries: Arc::new(Mutex::new(entries)),
            file: Arc::new(Mutex::new(file)),
            vote,
            committed,
            last_purged,
            full_disk: disk::FullDiskWait::default(),
        })
    }

    fn last_log_id(&self) -> Option<LogId> {
        let entries = lock(&self.entries);
        entries.last_key_value().map(|(_, e)| e.log_id).or(self.last_purged)
    }

    /// The wait for space of this store's writes (the quorum stops it at shutdown).
    pub(crate) fn full_disk_wait(&self) -> disk::FullDiskWait {
        self.full_disk.clone()
    }

    /// Runs `op` on the log file on a blocking thread, again after a refusal for want of space
    /// (`disk::FullDiskWait`).
    async fn with_file<T: Send + 'static>(
        &self,
        op: impl Fn(&mut LogFile) -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let file = self.file.clone();
        self.full_disk.run(&self.dir, move || op(&mut lock(&file))).await
    }

    /// Writes a small JSON file, again after a refusal for want of space.
    async fn write_json_file<T: serde::Serialize + Send + Sync + 'static>(
        &self,
        name: &str,
        value: T,
        durable: bool,
    ) -> Result<()> {
        let path = self.dir.join(name);
        self.full_disk
            .run(&self.dir, move || write_json(&path, &value, durable))
            .await
    }
}

/// Locks a mutex; a panic elsewhere while holding it leaves data this module only ever changes
/// whole (a map of entries, a file whose tail open would cut), so the guard is taken anyway.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads a small JSON file written by `write_json`, or None when absent.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let Some(bytes) = disk::read_if_exists(path)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| disk::corrupt(path, e.to_string()))
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T, durable: bool) -> Result<()> {
    let bytes = serde_json::to_vec(value).map_err(|e| disk::corrupt(path, e.to_string()))?;
    disk::replace_file(path, &bytes, durable)
}

fn read_entries<RB: RangeBounds<u64>>(entries: &Entries, range: RB) -> Vec<Entry> {
    lock(entries).range(range).map(|(_, e)| e.clone()).collect()
}

/// The append-only file of entries and where each entry's frame starts.
struct LogFile {
    path: PathBuf,
    file: File,
    /// Index → position of its frame: truncation cuts the file there.
    positions: BTreeMap<u64, u64>,
    /// Length of the valid file.
    end: u64,
}

impl LogFile {
    /// Opens the file, cuts a torn tail and returns the entries after `last_purged`.
    fn open(path: &Path, last_purged: Option<LogId>) -> Result<(LogFile, BTreeMap<u64, Entry>)> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| Error::storage("open", path, e))?;
        if let Some(dir) = path.parent() {
            // The file may have just been created: make its name durable.
            disk::sync_dir(dir)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::storage("read", path, e))?;
        let mut entries = BTreeMap::new();
        let mut positions = BTreeMap::new();
        let mut pos = 0usize;
        let mut previous: Option<u64> = None;
        while let Some((body, frame_len)) = disk::decode_frame(&bytes[pos..], ENTRY_BYTES_MAX) {
            // A frame whose CRC holds but whose JSON does not parse was written by a different
            // program: refuse it rather than cut what may be committed entries.
            let entry: Entry =
                serde_json::from_slice(body).map_err(|e| disk::corrupt(path, format!("entry at byte {pos}: {e}")))?;
            let index = entry.log_id.index;
            if previous.is_some_and(|p| p + 1 != index) {
                return Err(disk::corrupt(
                    path,
                    format!("entry {index} at byte {pos} does not follow entry {previous:?}"),
                ));
            }
            previous = Some(index);
            positions.insert(index, pos as u64);
            if last_purged.is_none_or(|p| index > p.index) {
                entries.insert(index, entry);
            }
            pos += frame_len;
        }
        if let (Some(purged), Some((first, _))) = (last_purged, entries.first_key_value())
            && *first != purged.index + 1
        {
            return Err(disk::corrupt(
                path,
                format!("the first entry {first} does not follow the purged {}", purged.index),
            ));
        }
        if pos < bytes.len() {
            tracing::warn!(path = %path.display(), valid = pos, len = bytes.len(), "cutting a torn metadata raft log tail");
            file.set_len(pos as u64)
                .map_err(|e| Error::storage("truncate", path, e))?;
            file.sync_all().map_err(|e| Error::storage("fsync", path, e))?;
        }
        let log = LogFile {
            path: path.to_path_buf(),
            file,
            positions,
            end: pos as u64,
        };
        Ok((log, entries))
    }

    /// Appends the frames (index, bytes) and fsyncs them.
    fn append(&mut self, frames: &[(u64, Vec<u8>)]) -> Result<()> {
        let mut bytes = Vec::new();
        let mut positions = Vec::with_capacity(frames.len());
        for (index, frame) in frames {
            positions.push((*index, self.end + bytes.len() as u64));
            bytes.extend_from_slice(frame);
        }
        let written = self
            .file
            .write_all(&bytes)
            .map_err(|e| Error::storage("write", &self.path, e))
            .and_then(|()| {
                self.file
                    .sync_data()
                    .map_err(|e| Error::storage("fsync", &self.path, e))
            });
        if let Err(e) = written {
            // A write cut short (a full disk) leaves part of a frame: cut it, so that the
            // file ends at its last whole frame and a retry appends there.
            if let Err(cut) = self.file.set_len(self.end) {
                tracing::error!(file = %self.path.display(), "cannot cut a failed write: {cut}");
            }
            return Err(e);
        }
        self.end += bytes.len() as u64;
        self.positions.extend(positions);
        Ok(())
    }

    /// Cuts the entries from `index` on, durably.
    fn truncate(&mut self, index: u64) -> Result<()> {
        let Some(&at) = self.positions.get(&index) else {
            return Ok(()); // nothing at or after it is in the file
        };
        self.file
            .set_len(at)
            .map_err(|e| Error::storage("truncate", &self.path, e))?;
        self.file
            .sync_all()
            .map_err(|e| Error::storage("fsync", &self.path, e))?;
        self.positions.split_off(&index);
        self.end = at;
        Ok(())
    }

    /// Rewrites the file without the entries up to `index` (the caller has made the purge
    /// durable first): a temp file holding the rest is fsynced and renamed over the log.
    fn rewrite_after(&mut self, index: u64) -> Result<()> {
        // Nothing changes here before the new file is in place: a failed rewrite (a full disk)
        // is tried again on the same state.
        let from = self.positions.range(index + 1..).next().map_or(self.end, |(_, p)| *p);
        let mut rest = Vec::new();
        self.file
            .seek(SeekFrom::Start(from))
            .and_then(|_| (&self.file).take(self.end - from).read_to_end(&mut rest))
            .map_err(|e| Error::storage("read", &self.path, e))?;
        disk::replace_file(&self.path, &rest, true)?;
        self.file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| Error::storage("open", &self.path, e))?;
        let keep = self.positions.split_off(&(index + 1));
        self.positions = keep.into_iter().map(|(i, p)| (i, p - from)).collect();
        self.end -= from;
        Ok(())
    }
}

fn write_error(e: Error) -> StorageError {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> std::result::Result<Vec<Entry>, StorageError> {
        Ok(read_entries(&self.entries, range))
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> std::result::Result<Vec<Entry>, StorageError> {
        Ok(read_entries(&self.entries, range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> std::result::Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState {
            last_purged_log_id: self.last_purged,
            last_log_id: self.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            entries: self.entries.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> std::result::Result<(), StorageError> {
        self.write_json_file(VOTE_FILE, *vote, true)
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)))?;
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> std::result::Result<Option<Vote>, StorageError> {
        Ok(self.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> std::result::Result<(), StorageError> {
        if committed <= self.committed {
            return Ok(());
        }
        self.committed = committed;
        let path = self.dir.join(COMMITTED_FILE);
        // Not fsynced: a hint whose loss only delays re-applying at restart (module doc). So
        // one that cannot be written (a full disk) is left for the next one.
        let written = tokio::task::spawn_blocking(move || write_json(&path, &committed, false))
            .await
            .map_err(|e| Error::storage("join", &self.dir, std::io::Error::other(e)))
            .and_then(|r| r);
        if let Err(e) = written {
            tracing::debug!(error = %e, "metadata quorum: the committed hint was not written");
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> std::result::Result<Option<LogId>, StorageError> {
        Ok(self.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> std::result::Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut frames = Vec::new();
        let mut appended = Vec::new();
        for entry in entries {
            let json = serde_json::to_vec(&entry).map_err(|e| StorageIOError::write_logs(AnyError::new(&e)))?;
            // Open would take a longer frame for a torn one and cut it: never write one.
            if json.len() > ENTRY_BYTES_MAX {
                let path = self.dir.join(LOG_FILE);
                let why = format!(
                    "entry {} of {} bytes exceeds {ENTRY_BYTES_MAX}",
                    entry.log_id.index,
                    json.len()
                );
                let refused = std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
                return Err(write_error(Error::storage("append to", path, refused)));
            }
            let mut frame = Vec::new();
            disk::encode_frame(&json, &mut frame).map_err(write_error)?;
            frames.push((entry.log_id.index, frame));
            appended.push(entry);
        }
        // Readable at once (openraft's contract); reported flushed only after the fsync.
        lock(&self.entries).extend(appended.into_iter().map(|e| (e.log_id.index, e)));
        let written = self.with_file(move |file| file.append(&frames)).await;
        match written {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = std::io::Error::other(e.to_string());
                callback.log_io_completed(Err(err));
                Err(write_error(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> std::result::Result<(), StorageError> {
        let index = log_id.index;
        self.with_file(move |file| file.truncate(index))
            .await
            .map_err(write_error)?;
        lock(&self.entries).split_off(&index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> std::result::Result<(), StorageError> {
        if Some(log_id) <= self.last_purged {
            return Ok(());
        }
        // Durable first: a crash before the rewrite leaves entries that open skips.
        self.write_json_file(PURGED_FILE, log_id, true)
            .await
            .map_err(write_error)?;
        self.last_purged = Some(log_id);
        {
            let mut entries = lock(&self.entries);
            let rest = entries.split_off(&(log_id.index + 1));
            *entries = rest;
        }
        let index = log_id.index;
        self.with_file(move |file| file.rewrite_after(index))
            .await
            .map_err(write_error)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use openraft::storage::RaftLogStorageExt;
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::cluster::MetadataRecord;

    pub(in crate::cluster::raft) fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(MetadataRecord::ProducerIds {
                next_producer_id: index as i64 * 1000,
            }),
        }
    }

    fn indexes(entries: &[Entry]) -> Vec<u64> {
        entries.iter().map(|e| e.log_id.index).collect()
    }

    async fn all(store: &mut LogStore) -> Vec<u64> {
        indexes(&store.try_get_log_entries(..).await.unwrap())
    }

    #[tokio::test]
    async fn entries_vote_and_purge_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        store.blocking_append((1..=10).map(|i| entry(1, i))).await.unwrap();
        let vote = Vote::new(3, 2);
        store.save_vote(&vote).await.unwrap();
        store.purge(entry(1, 4).log_id).await.unwrap();
        store.truncate(entry(1, 9).log_id).await.unwrap();
        store.blocking_append([entry(2, 9)]).await.unwrap();
        drop(store);

        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(all(&mut store).await, vec![5, 6, 7, 8, 9]);
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(entry(1, 4).log_id));
        assert_eq!(state.last_log_id, Some(entry(2, 9).log_id));
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        // Purging past the last entry (a snapshot installed) leaves an empty log that goes on
        // after the purged id.
        store.purge(entry(3, 20).log_id).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert!(all(&mut store).await.is_empty());
        assert_eq!(
            store.get_log_state().await.unwrap().last_log_id,
            Some(entry(3, 20).log_id)
        );
        store.blocking_append([entry(3, 21)]).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(all(&mut store).await, vec![21]);
    }

    #[tokio::test]
    async fn a_crash_between_purge_and_rewrite_skips_the_purged_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        store.blocking_append((1..=5).map(|i| entry(1, i))).await.unwrap();
        drop(store);
        // The purge record made durable, the log not rewritten yet (and a temp file left).
        write_json(&dir.path().join(PURGED_FILE), &entry(1, 2).log_id, true).unwrap();
        std::fs::write(disk::temp_path(&dir.path().join(LOG_FILE)), b"half a rewrite").unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(all(&mut store).await, vec![3, 4, 5]);
        // The next purge rewrites the file; truncation still finds its positions.
        store.purge(entry(1, 3).log_id).await.unwrap();
        store.truncate(entry(1, 5).log_id).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(all(&mut store).await, vec![4]);
    }

    #[tokio::test]
    async fn a_torn_or_corrupt_tail_is_cut_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        let mut store = LogStore::open(dir.path()).unwrap();
        store.blocking_append((1..=3).map(|i| entry(1, i))).await.unwrap();
        let three_entries = std::fs::metadata(&path).unwrap().len() as usize;
        store.blocking_append([entry(1, 4)]).await.unwrap();
        drop(store);
        let full = std::fs::read(&path).unwrap();

        // Garbage after the last entry: cut, every entry kept, and appends go on after them.
        let mut garbage = full.clone();
        garbage.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 9, 1, 2, 3]);
        std::fs::write(&path, &garbage).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(all(&mut store).await, vec![1, 2, 3, 4]);
        assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, full.len());
        store.blocking_append([entry(1, 5)]).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(all(&mut store).await, vec![1, 2, 3, 4, 5]);
        drop(store);

        // The last entry cut anywhere, or one of its bytes flipped: entries 1..=3 survive.
        for cut in three_entries..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let mut store = LogStore::open(dir.path()).unwrap();
            assert_eq!(all(&mut store).await, vec![1, 2, 3], "cut at {cut}");
        }
        for at in three_entries..full.len() {
            let mut flipped = full.clone();
            flipped[at] ^= 0x20;
            std::fs::write(&path, &flipped).unwrap();
            let mut store = LogStore::open(dir.path()).unwrap();
            assert_eq!(all(&mut store).await, vec![1, 2, 3], "flip at {at}");
        }
    }

    #[tokio::test]
    async fn a_stale_committed_hint_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        store.blocking_append((1..=3).map(|i| entry(1, i))).await.unwrap();
        store.save_committed(Some(entry(1, 3).log_id)).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), Some(entry(1, 3).log_id));
        // The entry it names is gone (cut as a torn tail, or truncated): the hint goes too.
        store.truncate(entry(1, 3).log_id).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_committed().await.unwrap(), None);
    }
}
