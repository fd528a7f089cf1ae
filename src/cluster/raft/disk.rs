//! The quorum's file primitives: CRC32C-checked frames (`[length u32][crc32c u32][body]`, big
//! endian, the framing of the single-node `metadata.log`) and whole-file replacement that a
//! kill -9 or a power loss leaves either old or new, never mixed.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub(super) const FRAME_HEADER_BYTES: usize = 8;
// Suffix of a file being written before it is renamed over the real one; one left behind by a
// crash is garbage and is removed at open.
pub(super) use crate::log::checkpoint::TEMP_SUFFIX;

/// Appends the frame of `body` to `out`.
pub(super) fn encode_frame(body: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let len = u32::try_from(body.len())
        .map_err(|_| Error::InvalidRequest(format!("a frame of {} bytes is too large", body.len())))?;
    out.reserve(FRAME_HEADER_BYTES + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    out.extend_from_slice(body);
    Ok(())
}

/// The body of the frame at the start of `bytes` and the frame's whole length, or None when the
/// frame is incomplete, claims more than `body_bytes_max` or fails its CRC: a torn write.
pub(super) fn decode_frame(bytes: &[u8], body_bytes_max: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(..FRAME_HEADER_BYTES)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let len = usize::try_from(len).ok().filter(|len| *len <= body_bytes_max)?;
    let body = bytes.get(FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len)?;
    (crc32c::crc32c(body) == crc).then_some((body, FRAME_HEADER_BYTES + len))
}

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
    fn a_frame_round_trips_and_any_cut_or_flip_is_refused() {
        let mut bytes = Vec::new();
        encode_frame(b"hello raft", &mut bytes).unwrap();
        assert_eq!(decode_frame(&bytes, 1024), Some((&b"hello raft"[..], bytes.len())));
        for cut in 0..bytes.len() {
            assert_eq!(decode_frame(&bytes[..cut], 1024), None, "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert_eq!(decode_frame(&flipped, 1024), None, "flip at {at}");
        }
        // A claimed length past the bound is refused before anything is read.
        assert_eq!(decode_frame(&bytes, 4), None);
    }

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
