//! The single-node metadata log: `<data>/__cluster_metadata-0/metadata.log`, a sequence of
//! frames `[length u32][crc32c u32][JSON record]`, fsynced on every append (changes are rare and
//! must not be lost). A torn or corrupt tail (a crash mid-append) is truncated at replay.
//! `meta.properties` beside it holds the cluster id, as Kafka's does.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::MetadataRecord;
use super::frame::{decode_frame, encode_frame};
use crate::error::{Error, Result};

/// A metadata record is small; a larger length can only be corruption.
const RECORD_BYTES_MAX: usize = 1 << 20;

pub struct MetadataLog {
    file: File,
    path: PathBuf,
}

impl MetadataLog {
    /// Opens or creates the log in `dir`, returning it with its records and the cluster id.
    pub fn open(dir: &Path) -> Result<(MetadataLog, Vec<MetadataRecord>, String)> {
        crate::log::checkpoint::create_dir_durably(dir)?;
        let cluster_id = cluster_id(dir)?;
        let path = dir.join("metadata.log");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| Error::storage("open", &path, e))?;
        // The file may have just been created: its name must be durable before the first
        // record fsynced into it is counted as committed.
        crate::log::checkpoint::sync_dir(dir)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::storage("read", &path, e))?;
        let (records, valid_len) = parse(&bytes);
        if valid_len < bytes.len() {
            tracing::warn!(path = %path.display(), valid_len, len = bytes.len(), "truncating torn metadata log tail");
            file.set_len(valid_len as u64)
                .map_err(|e| Error::storage("truncate", &path, e))?;
            file.sync_all().map_err(|e| Error::storage("fsync", &path, e))?;
        }
        Ok((MetadataLog { file, path }, records, cluster_id))
    }

    /// Appends one record and fsyncs it.
    pub fn append(&mut self, record: &MetadataRecord) -> Result<()> {
        let json = serde_json::to_vec(record).map_err(|e| Error::InvalidRequest(e.to_string()))?;
        let mut frame = Vec::new();
        encode_frame(&json, &mut frame)?;
        self.file
            .write_all(&frame)
            .map_err(|e| Error::storage("write", &self.path, e))?;
        self.file
            .sync_data()
            .map_err(|e| Error::storage("fsync", &self.path, e))
    }
}

/// Parses frames until the first incomplete or corrupt one; returns the records and the length
/// of the valid prefix.
fn parse(bytes: &[u8]) -> (Vec<MetadataRecord>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    while let Some((body, frame_len)) = decode_frame(&bytes[pos..], RECORD_BYTES_MAX) {
        let Ok(record) = serde_json::from_slice(body) else {
            break;
        };
        records.push(record);
        pos += frame_len;
    }
    (records, pos)
}

/// Reads `cluster.id` from meta.properties, creating it on first start.
fn cluster_id(dir: &Path) -> Result<String> {
    let path = dir.join("meta.properties");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            for line in text.lines() {
                if let Some(id) = line.strip_prefix("cluster.id=") {
                    return Ok(id.trim().to_string());
                }
            }
            Err(Error::storage(
                "read cluster.id from",
                &path,
                std::io::Error::other("no cluster.id line"),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Kafka's cluster ids are base64url-encoded UUIDs (22 characters); ours are plain
            // hex, which clients treat as an opaque string.
            let id = uuid::Uuid::new_v4().simple().to_string();
            let tmp = dir.join("meta.properties.tmp");
            let text = format!("version=1\ncluster.id={id}\n");
            std::fs::write(&tmp, text).map_err(|e| Error::storage("write", &tmp, e))?;
            File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::storage("fsync", &tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| Error::storage("rename", &path, e))?;
            Ok(id)
        }
        Err(e) => Err(Error::storage("read", &path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_tail_is_truncated_wherever_it_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = MetadataLog::open(dir.path()).unwrap();
        let a = MetadataRecord::DeleteTopic {
            id: uuid::Uuid::new_v4(),
        };
        let b = MetadataRecord::CreatePartitions {
            id: uuid::Uuid::new_v4(),
            partitions: 7,
            assignments: Vec::new(),
        };
        log.append(&a).unwrap();
        let first_len = std::fs::metadata(dir.path().join("metadata.log")).unwrap().len();
        log.append(&b).unwrap();
        drop(log);
        let full = std::fs::read(dir.path().join("metadata.log")).unwrap();
        for cut in first_len as usize..full.len() {
            std::fs::write(dir.path().join("metadata.log"), &full[..cut]).unwrap();
            let (_, records, _) = MetadataLog::open(dir.path()).unwrap();
            assert_eq!(records, vec![a.clone()], "cut at {cut}");
        }
        // A flipped byte in the last record is caught by the CRC.
        let mut flipped = full.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0x55;
        std::fs::write(dir.path().join("metadata.log"), &flipped).unwrap();
        let (_, records, _) = MetadataLog::open(dir.path()).unwrap();
        assert_eq!(records, vec![a]);
    }
}
