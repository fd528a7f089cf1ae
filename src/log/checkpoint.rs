//! Small files beside the segments: the leader-epoch checkpoint (Kafka's
//! `LeaderEpochCheckpointFile` text format: a version line `0`, a count line, then one
//! `epoch startOffset` line per epoch), the recovery point (same framing, one offset line), and
//! the clean-shutdown marker. All are replaced atomically (temp file + rename).

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub(crate) const LEADER_EPOCH_FILE: &str = "leader-epoch-checkpoint";
pub(crate) const RECOVERY_POINT_FILE: &str = "recovery-point-offset-checkpoint";
/// The log start offset, raised by DeleteRecords and retention (Kafka keeps one such file per
/// log directory; one per partition directory keeps a partition self-contained).
pub(crate) const LOG_START_OFFSET_FILE: &str = "log-start-offset-checkpoint";
/// Written by `close` after everything is fsynced; present at open means no recovery is needed.
pub(crate) const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";
pub(crate) const TEMP_SUFFIX: &str = ".tmp";
const VERSION: &str = "0";

/// Replaces `path` with `contents` so that a reader sees the old or the new file, never a mix.
/// With `durable`, the new content and the rename survive a power loss once this returns.
pub(crate) fn write_atomically(path: &Path, contents: &[u8], durable: bool) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TEMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| Error::storage("create", &tmp, e))?;
    file.write_all(contents).map_err(|e| Error::storage("write", &tmp, e))?;
    if durable {
        file.sync_all().map_err(|e| Error::storage("fsync", &tmp, e))?;
    }
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| Error::storage("rename", &tmp, e))?;
    if let Some(dir) = path.parent()
        && durable
    {
        sync_dir(dir)?;
    }
    Ok(())
}

/// fsyncs a directory so that the names created, renamed or removed in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    open_dir(dir)?
        .sync_all()
        .map_err(|e| Error::storage("fsync directory", dir, e))
}

/// Creates `dir`, with its missing parents, and makes each new name durable (fsyncs the
/// directory holding it), so that a power loss cannot take away a directory whose files were
/// fsynced. An existing `dir` costs one `stat`.
pub(crate) fn create_dir_durably(dir: &Path) -> Result<()> {
    if dir.try_exists().map_err(|e| Error::storage("stat", dir, e))? {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dir_durably(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => sync_dir(parent.unwrap_or(Path::new("."))),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::storage("create directory", dir, e)),
    }
}

pub(crate) fn open_dir(dir: &Path) -> Result<File> {
    File::open(dir).map_err(|e| Error::storage("open directory", dir, e))
}

/// Reads a checkpoint's lines after checking its version and count, or None when absent.
fn read_lines(path: &Path) -> Result<Option<Vec<String>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::storage("read", path, e)),
    };
    let malformed = |why: &str| {
        Error::storage(
            "parse",
            path,
            std::io::Error::new(ErrorKind::InvalidData, why.to_owned()),
        )
    };
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some(VERSION) {
        return Err(malformed("unknown checkpoint version"));
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| malformed("bad entry count"))?;
    let entries: Vec<String> = lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_owned())
        .collect();
    if entries.len() != count {
        return Err(malformed("entry count does not match the entries"));
    }
    Ok(Some(entries))
}

fn parse_error(path: &Path, line: &str) -> Error {
    Error::storage(
        "parse",
        path,
        std::io::Error::new(ErrorKind::InvalidData, format!("bad checkpoint line {line:?}")),
    )
}

/// The recovery point saved by the last `mark_flushed`, or None when never saved. Written
/// without fsync (`write_recovery_point`), the file can be empty or torn after a power loss or
/// a failed disk (its rename reached the disk, its data did not): that reads as None too, and
/// recovery then validates the whole log instead of refusing to open it.
pub(crate) fn read_recovery_point(dir: &Path) -> Result<Option<i64>> {
    let path = dir.join(RECOVERY_POINT_FILE);
    match read_offset(&path) {
        Err(Error::Storage { source, .. }) if source.kind() == ErrorKind::InvalidData => {
            tracing::warn!(path = %path.display(), error = %source, "the recovery-point checkpoint is damaged; recovering the whole log");
            Ok(None)
        }
        read => read,
    }
}

/// The log start offset saved by the last `write_log_start_offset`, or None when never saved.
pub(crate) fn read_log_start_offset(dir: &Path) -> Result<Option<i64>> {
    read_offset(&dir.join(LOG_START_OFFSET_FILE))
}

/// Saves the log start offset, durably: it is written before the segments below it are
/// deleted, so that a crash in between finds them below the start (open drops them), and a
/// DeleteRecords acknowledged to a client is not undone by a power loss.
pub(crate) fn write_log_start_offset(dir: &Path, offset: i64) -> Result<()> {
    let text = format!("{VERSION}\n1\n{offset}\n");
    write_atomically(&dir.join(LOG_START_OFFSET_FILE), text.as_bytes(), true)
}

/// A checkpoint holding a single offset, or None when absent.
fn read_offset(path: &Path) -> Result<Option<i64>> {
    let Some(lines) = read_lines(path)? else {
        return Ok(None);
    };
    match lines.as_slice() {
        [line] => line.parse().map(Some).map_err(|_| parse_error(path, line)),
        _ => Err(parse_error(path, "")),
    }
}

/// Saves the recovery point. Not fsynced: losing it only makes the next recovery start from an
/// older point, which is slower but still correct.
pub(crate) fn write_recovery_point(dir: &Path, offset: i64, durable: bool) -> Result<()> {
    let text = format!("{VERSION}\n1\n{offset}\n");
    write_atomically(&dir.join(RECOVERY_POINT_FILE), text.as_bytes(), durable)
}

/// One leader epoch and the first offset written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// Kafka's `LeaderEpochFileCache`: epochs in increasing order with increasing start offsets,
/// saved (fsynced; it changes only on leader changes) on every change.
pub(crate) struct LeaderEpochCache {
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn load(dir: &Path) -> Result<LeaderEpochCache> {
        let path = dir.join(LEADER_EPOCH_FILE);
        let mut entries = Vec::new();
        for line in read_lines(&path)?.unwrap_or_default() {
            let mut fields = line.split_whitespace();
            let epoch = fields.next().and_then(|f| f.parse().ok());
            let start_offset = fields.next().and_then(|f| f.parse().ok());
            match (epoch, start_offset, fields.next()) {
                (Some(epoch), Some(start_offset), None) => entries.push(EpochEntry { epoch, start_offset }),
                _ => return Err(parse_error(&path, &line)),
            }
        }
        Ok(LeaderEpochCache { path, entries })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> i32 {
        self.entries.last().map_or(-1, |e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, as Kafka's `LeaderEpochFileCache.assign`:
    /// nothing when it is already the latest epoch; otherwise entries that conflict with it
    /// (an epoch not below it, or a start offset not below its start) are replaced.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<()> {
        if epoch < 0 {
            return Ok(());
        }
        if let Some(last) = self.entries.last()
            && last.epoch == epoch
            && last.start_offset <= start_offset
        {
            return Ok(());
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry { epoch, start_offset });
        self.save()
    }

    /// Drops the epochs that start at or after `end_offset` (Kafka's `truncateFromEnd`), after
    /// the log was cut there.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<()> {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        if self.entries.len() != before {
            self.save()
        } else {
            Ok(())
        }
    }

    /// Drops the epochs that end at or before `start_offset` and moves the start of the epoch
    /// holding it up to it (Kafka's `LeaderEpochFileCache.truncateFromStart`), after the log
    /// start offset was raised.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<()> {
        let covered = self.entries.partition_point(|e| e.start_offset <= start_offset);
        let Some(holding) = covered.checked_sub(1).map(|i| self.entries[i]) else {
            return Ok(());
        };
        if covered == 1 && holding.start_offset == start_offset {
            return Ok(());
        }
        self.entries.drain(..covered);
        self.entries.insert(
            0,
            EpochEntry {
                epoch: holding.epoch,
                start_offset,
            },
        );
        self.save()
    }

    /// Forgets every epoch (Kafka's `clearAndFlush`): the log was emptied and starts over.
    pub fn clear(&mut self) -> Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        self.entries.clear();
        self.save()
    }

    /// The largest epoch at or below `epoch` and where it ends (Kafka's
    /// `LeaderEpochFileCache.endOffsetFor`, whose code this follows where its comment differs):
    /// the latest epoch ends at `log_end_offset`; another ends where the next epoch after
    /// `epoch` starts; an epoch below the first one known is answered with itself and the
    /// first one's start (what came before was removed from the log, and a follower can
    /// still copy from there). None (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) for an undefined
    /// epoch, an empty cache, or an epoch above the latest.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let latest = self.entries.last()?;
        if epoch < 0 {
            return None;
        }
        if epoch == latest.epoch {
            return Some((epoch, log_end_offset));
        }
        let higher = self.entries.partition_point(|e| e.epoch <= epoch);
        let next = self.entries.get(higher)?;
        let found = higher.checked_sub(1).map_or(epoch, |i| self.entries[i].epoch);
        Some((found, next.start_offset))
    }

    fn save(&self) -> Result<()> {
        let mut text = format!("{VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        write_atomically(&self.path, text.as_bytes(), true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn end_offset_for_follows_kafkas_leader_epoch_cache() {
        // Kafka's LeaderEpochFileCache.endOffsetFor, with the log start past epoch 2's start.
        let dir = tempfile::TempDir::new().unwrap();
        let mut cache = LeaderEpochCache::load(dir.path()).unwrap();
        assert_eq!(cache.end_offset_for(0, 0), None, "an empty cache knows no epoch");
        cache.assign(2, 0).unwrap();
        cache.assign(4, 30).unwrap();
        cache.assign(7, 55).unwrap();
        cache.truncate_from_start(10).unwrap();
        assert_eq!(
            cache.end_offset_for(7, 80),
            Some((7, 80)),
            "the latest ends at the log end"
        );
        assert_eq!(cache.end_offset_for(4, 80), Some((4, 55)));
        assert_eq!(cache.end_offset_for(2, 80), Some((2, 30)));
        assert_eq!(cache.end_offset_for(5, 80), Some((4, 55)), "in a gap: the epoch below");
        assert_eq!(cache.end_offset_for(1, 80), Some((1, 10)), "below the first: its start");
        assert_eq!(cache.end_offset_for(8, 80), None, "above the latest");
        assert_eq!(cache.end_offset_for(-1, 80), None, "UNDEFINED_EPOCH");
    }

    #[test]
    fn a_cleared_cache_stays_empty_after_a_reload() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut cache = LeaderEpochCache::load(dir.path()).unwrap();
        cache.assign(3, 0).unwrap();
        cache.clear().unwrap();
        assert!(cache.entries().is_empty());
        assert_eq!(cache.latest_epoch(), -1);
        let reloaded = LeaderEpochCache::load(dir.path()).unwrap();
        assert!(reloaded.entries().is_empty());
        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_FILE)).unwrap();
        assert_eq!(text, "0\n0\n");
    }
}
