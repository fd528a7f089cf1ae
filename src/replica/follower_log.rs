//! What a follower does to its copy of a partition's log (issue 12): append the leader's
//! batches as they are, and cut a divergent tail.

use std::sync::Arc;

use bytes::Bytes;

use super::Partition;
use crate::error::{Error, Result};
use crate::log::AppendInfo;

impl Partition {
    /// Appends record batches fetched from the leader exactly as the leader stored them: their
    /// base offsets, partition leader epochs, producer ids, sequences and timestamps are kept.
    /// `records` is the records field of a fetch response (whole batches, possibly ending in a
    /// partial one, which is dropped). Returns None when nothing was appended.
    pub async fn append_as_follower(self: &Arc<Self>, records: Bytes) -> Result<Option<AppendInfo>> {
        let _ = records;
        Err(Error::storage(
            "append as follower",
            &self.dir,
            std::io::Error::other("not built yet"),
        ))
    }

    /// Cuts the log so that it ends at `offset` (no-op when it already ends there or below).
    pub async fn truncate_to(self: &Arc<Self>, offset: i64) -> Result<()> {
        let _ = offset;
        Err(Error::storage(
            "truncate",
            &self.dir,
            std::io::Error::other("not built yet"),
        ))
    }

    /// Empties the log and restarts it at `offset` (a follower behind the leader's log start).
    pub async fn truncate_fully_and_start_at(self: &Arc<Self>, offset: i64) -> Result<()> {
        let _ = offset;
        Err(Error::storage(
            "truncate",
            &self.dir,
            std::io::Error::other("not built yet"),
        ))
    }
}
