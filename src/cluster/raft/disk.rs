//! The quorum's file primitives: CRC32C-checked frames (`cluster::frame`, the framing of the
//! single-node `metadata.log`) and whole-file replacement that a kill -9 or a power loss leaves
//! either old or new, never mixed.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub(super) use crate::cluster::frame::{decode_frame, encode_frame};

// Suffix of a file being written before it is renamed over the real one; one left behind by a
// crash is garbage and is removed at open.
pub(super) use crate::log::checkpoint::TEMP_SUFFIX;

/// Replaces `path` by `contents`: a temp file (`temp_path`) written, renamed over it, and with
/// `durable` the file and the directory fsynced, so the new content survives a power loss once
/// this returns. Either way a reader sees the old file or the new one, never a mix. The log's
/// checkpoints use the same primitive.
pub(super) fn replace_file(path: &Path, contents: &[u8], durable: bool) -> Result<()> {
    crate::log::checkpoint::write_atomically(path, contents, durable)
}

/// The temp file `replace_file` writes before renaming it over `path`.
pub(super) fn temp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TEMP_SUFFIX);
    PathBuf::from(tmp)
}

/// Reads a whole file, or None when it does not exist.
pub(super) fn read_if_exists(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::storage("read", path, e)),
    }
}

/// Removes a temp file a crash left behind (its rename never happened, so it holds nothing the
/// real file lacks).
pub(super) fn remove_stale_temp(path: &Path) -> Result<()> {
    let tmp = temp_path(path);
    match std::fs::remove_file(&tmp) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::storage("remove", &tmp, e)),
    }
}

pub(super) use crate::log::checkpoint::sync_dir;

/// An error for a file whose content is not what this module writes.
pub(super) fn corrupt(path: &Path, why: impl Into<String>) -> Error {
    Error::storage(
        "parse",
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidData, why.into()),
    )
}

/// Whether `e` is a write refused for want of space (ENOSPC, or EDQUOT for a quota): one that
/// succeeds again once space is freed.
pub(super) fn is_disk_full(e: &Error) -> bool {
    matches!(e, Error::Storage { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
}

/// How long a write refused by a full disk waits before it is tried again.
const FULL_DISK_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits out a full disk for the raft files. Openraft takes every storage error as fatal and
/// stops the node's raft for good, which would leave the broker serving a metadata image that
/// never moves again; so a write refused for want of space is tried again every second (the
/// node stalls, as a paused one does, and the others elect a leader without it) until it
/// succeeds or the node stops. Any other error is returned at once.
#[derive(Clone)]
pub(crate) struct FullDiskWait {
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// How many writes are waiting for space now: while any is, this node's raft is stalled
    /// and its metadata image may be behind the quorum's (`MetadataQuorum::stalled`).
    waiting: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    retry: std::time::Duration,
}

impl Default for FullDiskWait {
    fn default() -> FullDiskWait {
        FullDiskWait {
            stopping: std::sync::Arc::default(),
            waiting: std::sync::Arc::default(),
            retry: FULL_DISK_RETRY,
        }
    }
}

impl FullDiskWait {
    /// Whether a write is waiting for space now.
    pub(crate) fn is_waiting(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Acquire) > 0
    }

    /// The node stops: writes still waiting fail with their error.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Runs the blocking write `op` on a blocking thread until it does not fail on a full disk.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        dir: &Path,
        op: impl Fn() -> Result<T> + Send + Sync + 'static,
    ) -> Result<T> {
        let op = std::sync::Arc::new(op);
        let mut waited = false;
        // Counts this write among those waiting, until it ends or is dropped.
        let mut counted = None;
        loop {
            let attempt = op.clone();
            let result = tokio::task::spawn_blocking(move || attempt())
                .await
                .map_err(|e| Error::storage("join", dir, std::io::Error::other(e)))
                .and_then(|r| r);
            match result {
                Err(e) if is_disk_full(&e) && !self.stopping.load(std::sync::atomic::Ordering::Acquire) => {
                    if !waited {
                        tracing::error!(error = %e, "metadata quorum: the disk is full; this node's raft waits until the write succeeds");
                        waited = true;
                        counted = Some(Waiting::new(&self.waiting));
                    }
                    tokio::time::sleep(self.retry).await;
                }
                result => {
                    drop(counted);
                    if waited && result.is_ok() {
                        tracing::info!(dir = %dir.display(), "metadata quorum: written again after the full disk");
                    }
                    return result;
                }
            }
        }
    }
}

/// One write counted as waiting for space; uncounted when dropped.
struct Waiting(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Waiting {
    fn new(count: &std::sync::Arc<std::sync::atomic::AtomicUsize>) -> Waiting {
        count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Waiting(count.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn replace_file_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vote");
        replace_file(&path, b"one", true).unwrap();
        replace_file(&path, b"two", true).unwrap();
        assert_eq!(read_if_exists(&path).unwrap(), Some(b"two".to_vec()));
        assert!(!temp_path(&path).exists());
        assert_eq!(read_if_exists(&dir.path().join("absent")).unwrap(), None);
    }

    fn refused(errno: i32) -> Error {
        Error::storage("write", "f", std::io::Error::from_raw_os_error(errno))
    }

    #[tokio::test]
    async fn a_write_refused_by_a_full_disk_is_tried_again_until_it_succeeds_or_the_node_stops() {
        let dir = Path::new("raft");
        let wait = FullDiskWait {
            retry: std::time::Duration::from_millis(10),
            ..FullDiskWait::default()
        };
        // Full three times, then written.
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = tries.clone();
        let written = wait
            .run(dir, move || match counted.fetch_add(1, Ordering::SeqCst) {
                0..3 => Err(refused(libc::ENOSPC)),
                n => Ok(n),
            })
            .await
            .unwrap();
        assert_eq!(written, 3);
        assert!(!wait.is_waiting(), "no longer stalled once written");
        // Any other error is returned at once.
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = tries.clone();
        let failed = wait
            .run(dir, move || {
                counted.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(refused(libc::EIO))
            })
            .await
            .unwrap_err();
        assert!(!is_disk_full(&failed));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
        // A stopped node gives up on a full disk too, with its error.
        let waiting = {
            let wait = wait.clone();
            tokio::spawn(async move {
                wait.run(Path::new("raft"), || Err::<(), _>(refused(libc::EDQUOT)))
                    .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        assert!(wait.is_waiting(), "the raft is stalled meanwhile");
        wait.stop();
        let given_up = waiting.await.unwrap().unwrap_err();
        assert!(is_disk_full(&given_up));
        assert!(!wait.is_waiting());
    }
}
