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

#[cfg(test)]
mod tests {
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
}
