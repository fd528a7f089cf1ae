//! Leader epochs of a partition's log, as OffsetForLeaderEpoch (23) and a follower's
//! divergence check read them (Kafka's `LeaderEpochFileCache.endOffsetFor`).

use super::Partition;
use crate::error::Result;

impl Partition {
    /// The largest epoch ≤ `epoch` this log knows and the end offset of that epoch (the start
    /// offset of the next epoch, or the log end offset for the latest epoch); None when the log
    /// knows no such epoch (Kafka answers UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
    ///
    /// As Kafka's code (not its comment), an epoch below the first one the log knows is
    /// answered with that epoch and the first one's start offset: the log start moved past
    /// the older epochs, and a follower truncating there can copy on from the leader's start.
    /// None for -1, an epoch above the latest, or a log that knows no epoch.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Result<Option<(i32, i64)>> {
        self.with_log(|log| Ok(log.end_offset_for_epoch(epoch)))
    }

    /// The epoch of the last batch in the log (-1 when empty): a follower's `last_fetched_epoch`.
    pub fn latest_epoch(&self) -> Result<i32> {
        self.with_log(|log| Ok(log.latest_epoch()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use crate::replica::follower_log::tests::{follower_partition, leader_bytes};
    use crate::replica::writer::Writers;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn end_offset_for_epoch_answers_as_kafkas_leader_epoch_cache() {
        // Kafka's LeaderEpochFileCache.endOffsetFor.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        assert_eq!(p.end_offset_for_epoch(0).unwrap(), None, "no epoch known yet");
        assert_eq!(p.latest_epoch().unwrap(), -1);
        // Epochs 1 (offsets 0..4), 3 (4..8), 4 (8..12); none for 0 and 2.
        p.append_as_follower(leader_bytes(&[1, 1, 3, 3, 4, 4]), 1)
            .await
            .unwrap();
        assert_eq!(p.latest_epoch().unwrap(), 4);
        // The latest epoch ends at the log end.
        assert_eq!(p.end_offset_for_epoch(4).unwrap(), Some((4, 12)));
        // An older one where the next starts.
        assert_eq!(p.end_offset_for_epoch(1).unwrap(), Some((1, 4)));
        assert_eq!(p.end_offset_for_epoch(3).unwrap(), Some((3, 8)));
        // An epoch in a gap: the largest epoch below it, ending where the next one starts.
        assert_eq!(p.end_offset_for_epoch(2).unwrap(), Some((1, 4)));
        // Below the first epoch known: itself, ending where the first one starts.
        assert_eq!(p.end_offset_for_epoch(0).unwrap(), Some((0, 0)));
        // Undefined, or above the latest: nothing (UNDEFINED_EPOCH_OFFSET).
        assert_eq!(p.end_offset_for_epoch(-1).unwrap(), None);
        assert_eq!(p.end_offset_for_epoch(5).unwrap(), None);
        // Truncation takes the epochs above the new end with it.
        p.truncate_to(6, 1).await.unwrap();
        assert_eq!(p.latest_epoch().unwrap(), 3);
        assert_eq!(p.end_offset_for_epoch(3).unwrap(), Some((3, 6)));
        assert_eq!(p.end_offset_for_epoch(4).unwrap(), None);
    }
}
