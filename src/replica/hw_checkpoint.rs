//! The high-watermark checkpoint (Kafka's `replication-offset-checkpoint`): each replicated
//! partition's high watermark, written for the whole data directory every
//! `replica.high.watermark.checkpoint.interval.ms` and at a clean stop, and read once at
//! start.
//!
//! Without it a replicated partition would start with its high watermark at its log start,
//! until every in-sync replica had fetched at the new epoch (seconds after a whole cluster
//! restarts, a session timeout when one replica stays down). Meanwhile ListOffsets(latest)
//! would answer the log start, and a consumer with librdkafka's default
//! `auto.offset.reset=latest` would start there and read the whole log again.
//!
//! The value read is a hint: it was a high watermark once, so everything below it was on
//! every in-sync replica; it is capped at the log's end (a power cut can take what this node
//! had not fsynced) and raised to the log start. The file is written without fsync (a lost
//! or damaged file reads as empty: the partitions start at their log start, as before) and
//! names each topic by id as well, so a topic deleted and created again under the same name
//! never takes the old one's value.
//!
//! Format (text, Kafka's checkpoint framing with the topic id added): a version line `1`, a
//! count line, then `topic partition high-watermark topic-id` per partition.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use uuid::Uuid;

use super::TopicPartition;

pub const FILE: &str = "replication-offset-checkpoint";
const VERSION: &str = "1";

/// The high watermarks recorded, by partition: (topic id, high watermark).
pub type Entries = HashMap<TopicPartition, (Uuid, i64)>;

/// Reads the checkpoint in `dir`; absent, unreadable or damaged: empty (with a warning for
/// the last two).
pub fn read(dir: &Path) -> Entries {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Entries::new(),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "high-watermark checkpoint unreadable; replicated partitions start at their log start");
            return Entries::new();
        }
    };
    match parse(&text) {
        Some(entries) => entries,
        None => {
            tracing::warn!(file = %path.display(), "high-watermark checkpoint damaged; replicated partitions start at their log start");
            Entries::new()
        }
    }
}

fn parse(text: &str) -> Option<Entries> {
    let mut lines = text.lines();
    if lines.next()? != VERSION {
        return None;
    }
    let count: usize = lines.next()?.parse().ok()?;
    let mut entries = Entries::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let mut fields = lines.next()?.split(' ');
        let topic = fields.next()?.to_string();
        let partition: i32 = fields.next()?.parse().ok()?;
        let hw: i64 = fields.next()?.parse().ok()?;
        let id: Uuid = fields.next()?.parse().ok()?;
        if fields.next().is_some() || topic.is_empty() || hw < 0 {
            return None;
        }
        entries.insert(TopicPartition { topic, partition }, (id, hw));
    }
    lines.next().is_none().then_some(entries)
}

/// Replaces the checkpoint in `dir` with `entries` (a temp file renamed over it; no fsync:
/// see the module's comment).
pub fn write(dir: &Path, entries: &[(TopicPartition, Uuid, i64)]) -> std::io::Result<()> {
    let mut text = String::with_capacity(16 + entries.len() * 64);
    text.push_str(VERSION);
    text.push('\n');
    text.push_str(&entries.len().to_string());
    text.push('\n');
    for (tp, id, hw) in entries {
        text.push_str(&format!("{} {} {} {}\n", tp.topic, tp.partition, hw, id));
    }
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    drop(file);
    std::fs::rename(&tmp, dir.join(FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    #[test]
    fn written_entries_read_back_and_a_damaged_file_reads_as_empty() {
        let dir = tempfile::TempDir::new().unwrap();
        assert!(read(dir.path()).is_empty(), "no file yet");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        write(dir.path(), &[(tp("orders", 0), a, 42), (tp("orders.v2", 3), b, 0)]).unwrap();
        let entries = read(dir.path());
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[&tp("orders", 0)], (a, 42));
        assert_eq!(entries[&tp("orders.v2", 3)], (b, 0));
        assert!(!dir.path().join(format!("{FILE}.tmp")).exists());

        for damaged in [
            "",
            "0\n1\norders 0 42\n",
            "1\n2\norders 0 42 00000000-0000-0000-0000-000000000000\n",
            "1\n1\norders 0 -5 00000000-0000-0000-0000-000000000000\n",
            "1\n1\norders x 5 00000000-0000-0000-0000-000000000000\n",
            "1\n0\nextra\n",
            "1\n99999999999999999999\n",
        ] {
            std::fs::write(dir.path().join(FILE), damaged).unwrap();
            assert!(read(dir.path()).is_empty(), "{damaged:?}");
        }
    }
}
