//! Leader epochs of a partition's log, as OffsetForLeaderEpoch (23) and a follower's
//! divergence check read them (Kafka's `LeaderEpochFileCache.endOffsetFor`).

use super::Partition;
use crate::error::Result;

impl Partition {
    /// The largest epoch ≤ `epoch` this log knows and the end offset of that epoch (the start
    /// offset of the next epoch, or the log end offset for the latest epoch); None when the log
    /// knows no such epoch (Kafka answers UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Result<Option<(i32, i64)>> {
        let _ = epoch;
        Ok(None)
    }

    /// The epoch of the last batch in the log (-1 when empty): a follower's `last_fetched_epoch`.
    pub fn latest_epoch(&self) -> Result<i32> {
        Ok(-1)
    }
}
