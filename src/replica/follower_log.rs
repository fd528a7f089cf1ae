//! What a follower does to its copy of a partition's log (issue 12): append the leader's
//! batches as they are, and cut a divergent tail. Each runs on the partition's writer, after
//! the changes queued before it, and moves the partition's watches as the log moved: the log
//! end (what the leader's view of this follower is built from), and after a truncation the
//! high watermark and the durable offset, which come down with the log (the one case where
//! they go down).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{Partition, now_ms};
use crate::error::Result;
use crate::log::AppendInfo;

impl Partition {
    /// Appends record batches fetched from the leader exactly as the leader stored them: their
    /// base offsets, partition leader epochs, producer ids, sequences and timestamps are kept.
    /// `records` is the records field of a fetch response (whole batches, possibly ending in a
    /// partial one, which is dropped). Returns None when nothing was appended. A batch that
    /// does not start at the log end is `UnexpectedAppendOffset` (in a compacted topic, one
    /// that starts below it: its leader's cleaner leaves offset gaps), a corrupt one
    /// `CorruptBatch`; nothing is appended then (`Log::append_as_follower`).
    ///
    /// The flusher is woken as for an acks=all append when acks=all waits for fsync: the
    /// follower's next fetch says its log end is durable here (leader.rs).
    ///
    /// `leader_epoch` is the epoch the records were fetched at: when this node no longer
    /// follows at that epoch (it leads now, or follows a newer leader) nothing is written,
    /// checked under the log's lock, which role changes take too (Kafka's
    /// `leaderIsrUpdateLock`): a fetch answered by a deposed leader never lands in the log of
    /// the replica that replaced it.
    ///
    /// When the writer is idle and the append lands in the active segment alone
    /// (`Log::follower_takes_without_roll`), it runs here, on the fetcher's thread, where the
    /// fetched bytes are still in cache, as a Produce append does (`queue_append`).
    pub async fn append_as_follower(self: &Arc<Self>, records: Bytes, leader_epoch: i32) -> Result<Option<AppendInfo>> {
        if let Some(_claim) = self.writer.claim_soon().await {
            let fits = self
                .lock()
                .as_ref()
                .is_some_and(|log| log.follower_takes_without_roll(&records, now_ms()));
            if fits {
                // No roll can come between: the claim keeps the writer's jobs out.
                return self.append_as_follower_now(records, leader_epoch);
            }
        }
        self.write(move |p| p.append_as_follower_now(records, leader_epoch))
            .await
    }

    /// The append of `append_as_follower`, under the writer's claim or on its thread.
    fn append_as_follower_now(&self, records: Bytes, leader_epoch: i32) -> Result<Option<AppendInfo>> {
        let bytes = records.len();
        let appended = self.with_log(|log| {
            self.check_following_at(leader_epoch)?;
            let info = log.append_as_follower(records, now_ms())?;
            if info.is_some() {
                self.appended(log.log_end_offset());
            }
            Ok(info)
        });
        self.note_append(&appended, bytes);
        let info = appended?;
        if info.is_some() && self.flush_before_ack.load(Ordering::Acquire) {
            self.flush_needed.notify_one();
        }
        Ok(info)
    }

    /// Cuts the log so that it ends at `offset` or below, at a batch boundary (no-op when it
    /// already ends there or below; see `Log::truncate_to`). The log end, the high watermark
    /// and the durable offset come down to the new end.
    pub async fn truncate_to(self: &Arc<Self>, offset: i64, leader_epoch: i32) -> Result<()> {
        self.write(move |p| {
            p.truncating(|log| log.truncate_to(offset), offset, leader_epoch)?;
            Ok(())
        })
        .await
    }

    /// Empties the log and restarts it at `offset` (a follower behind the leader's log start):
    /// log start, log end, high watermark and durable offset are all `offset` afterwards.
    pub async fn truncate_fully_and_start_at(self: &Arc<Self>, offset: i64, leader_epoch: i32) -> Result<()> {
        self.write(move |p| {
            p.truncating(|log| log.truncate_fully_and_start_at(offset), offset, leader_epoch)?;
            p.log_end.send_replace(offset);
            p.high_watermark.send_replace(offset);
            p.durable_offset.send_replace(offset);
            Ok(())
        })
        .await
    }

    /// This node follows the partition at `leader_epoch` (call under the log's lock).
    fn check_following_at(&self, leader_epoch: i32) -> Result<()> {
        if self.is_leader() {
            return Err(crate::error::Error::NotLeader(format!(
                "{} (a follower's write on the leader)",
                self.tp
            )));
        }
        let epoch = self.leader_epoch();
        if epoch != leader_epoch {
            return Err(crate::error::Error::FencedLeaderEpoch {
                asked: leader_epoch,
                current: epoch,
            });
        }
        Ok(())
    }

    /// Runs a truncation of the log that ends at or below `bound`, on the writer, and lowers
    /// the watches to the log's new end; returns it. Under the log's lock, so the flusher's
    /// bookkeeping of an fsync that started before the cut is not mixed with it (it is void,
    /// `Log::still_covers`). The high watermark comes down to `bound` first: readers load it
    /// before their snapshot, so those that start meanwhile stay below the cut.
    ///
    /// A failure midway leaves the log's memory and files in a state only `Log::open` is
    /// trusted to sort out: the partition stops serving (as after a failed fsync), to be
    /// recovered when it is opened again (Kafka takes the log directory offline).
    fn truncating(
        &self,
        truncate: impl FnOnce(&mut crate::log::Log) -> Result<()>,
        bound: i64,
        leader_epoch: i32,
    ) -> Result<i64> {
        let mut cut_failed = false;
        let result = self.with_log(|log| {
            // Only a follower at the epoch it truncates for cuts its log (see
            // `append_as_follower`).
            self.check_following_at(leader_epoch)?;
            lower(&self.high_watermark, bound);
            if let Err(e) = truncate(log) {
                cut_failed = true;
                return Err(e);
            }
            let end = log.log_end_offset();
            self.log_end.send_replace(end);
            lower(&self.high_watermark, end);
            lower(&self.durable_offset, end);
            Ok(end)
        });
        if cut_failed {
            tracing::error!(partition = %self.tp, "truncation failed; the partition stops serving");
            self.failed.store(true, Ordering::Release);
            self.hand_over.store(true, Ordering::Release);
            // Waiters on durability learn it now.
            self.durable_offset.send_modify(|_| {});
        }
        result
    }
}

/// Moves a watch down to `to` when it is above (and wakes its receivers only then).
fn lower(watch: &tokio::sync::watch::Sender<i64>, to: i64) {
    watch.send_if_modified(|current| {
        let above = *current > to;
        if above {
            *current = to;
        }
        above
    });
}

#[cfg(test)]
pub(super) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::Path;
    use std::time::Duration;

    use bytes::Bytes;
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::error::Error;
    use crate::log::batch::encode_records;
    use crate::log::{Log, LogConfig, validate_batches};
    use crate::replica::TopicPartition;
    use crate::replica::writer::Writers;

    /// A partition with other replicas, following (the replica manager's start for them).
    pub(crate) fn follower_partition(dir: &Path, writers: &Writers) -> Arc<Partition> {
        follower_partition_with(dir, writers, LogConfig::default())
    }

    /// `follower_partition` with its topic's log settings.
    fn follower_partition_with(dir: &Path, writers: &Writers, config: LogConfig) -> Arc<Partition> {
        let tp = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        let log = Log::open(dir, config, now_ms()).unwrap();
        let partition = Arc::new(Partition::new(
            tp.clone(),
            uuid::Uuid::new_v4(),
            crate::replica::Opening {
                leader_epoch: 0,
                replicated: true,
                high_watermark: None,
            },
            dir.to_path_buf(),
            log,
            &BrokerConfig::default(),
            writers.for_partition(&tp),
        ));
        partition.become_follower(1, 2, 1);
        tokio::spawn(partition.clone().run_flusher(crate::metrics::fsync_histogram()));
        partition
    }

    /// What a leader's log holds after one batch of two records per entry of `epochs`, each
    /// written in that leader epoch.
    pub(crate) fn leader_bytes(epochs: &[i32]) -> Bytes {
        let dir = tempfile::TempDir::new().unwrap();
        let mut leader = Log::open(dir.path(), LogConfig::default(), now_ms()).unwrap();
        for &epoch in epochs {
            let records = vec![
                (None, Some(Bytes::from_static(b"a")), 1),
                (None, Some(Bytes::from_static(b"b")), 2),
            ];
            let batches = validate_batches(&encode_records(&records, Compression::None).unwrap(), usize::MAX).unwrap();
            leader.append(batches, epoch, now_ms()).unwrap();
        }
        leader.read(0, leader.log_end_offset(), usize::MAX, true).unwrap()
    }

    async fn wait_for(watch: &tokio::sync::watch::Sender<i64>, value: i64) {
        let mut rx = watch.subscribe();
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|v| *v == value))
            .await
            .expect("the watch never got there")
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_on_the_wrong_side_of_a_role_change_are_refused() {
        // Kafka's leaderIsrUpdateLock: a fetch answered by a deposed leader must not land in
        // the log of the replica that replaced it, nor truncate it; and a client's append
        // queued before this node stopped leading must not land on the follower.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        p.append_as_follower(leader_bytes(&[1, 1]), 1).await.unwrap().unwrap();
        // A newer epoch followed meanwhile: the old epoch's fetch is fenced.
        p.become_follower(2, 3, 1);
        assert!(matches!(
            p.append_as_follower(leader_bytes(&[1]), 1).await,
            Err(Error::FencedLeaderEpoch { asked: 1, current: 2 })
        ));
        // This node leads now: no follower write at all, at any epoch.
        p.become_leader(3, 1, vec![1, 2, 3], vec![1], 1);
        assert!(matches!(
            p.append_as_follower(leader_bytes(&[1]), 3).await,
            Err(Error::NotLeader(_))
        ));
        assert!(matches!(p.truncate_to(0, 3).await, Err(Error::NotLeader(_))));
        assert_eq!(p.offsets().unwrap().log_end_offset, 4, "nothing cut, nothing added");
        // And once it follows again, a client's append is refused.
        p.become_follower(4, 2, 1);
        let batches = crate::log::validate_batches(&leader_bytes(&[1]), usize::MAX).unwrap();
        assert!(matches!(p.append(batches, false).await, Err(Error::NotLeader(_))));
        assert_eq!(p.offsets().unwrap().log_end_offset, 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_append_moves_the_log_end_and_is_fsynced_soon() {
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        let bytes = leader_bytes(&[1, 1, 2]);
        let info = p.append_as_follower(bytes.clone(), 1).await.unwrap().unwrap();
        assert_eq!((info.base_offset, info.last_offset), (0, 5));
        assert_eq!(*p.log_end_watch().borrow(), 6);
        // A follower's high watermark is its leader's to give.
        assert_eq!(p.high_watermark(), 0);
        // acks=all waits for fsync by default: the flusher was woken.
        assert!(p.flush_before_ack.load(Ordering::Acquire));
        wait_for(&p.durable_offset, 6).await;
        // A partial batch alone appends nothing and moves nothing.
        assert_eq!(p.append_as_follower(bytes.slice(..10), 1).await.unwrap(), None);
        assert_eq!(*p.log_end_watch().borrow(), 6);
        // Refused batches leave the partition serving.
        assert!(matches!(
            p.append_as_follower(bytes.clone(), 1).await,
            Err(Error::UnexpectedAppendOffset { expected: 6, .. })
        ));
        p.advance_follower_high_watermark(6);
        assert_eq!(p.offsets().unwrap().high_watermark, 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn truncation_brings_the_log_end_high_watermark_and_durable_offset_down() {
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = follower_partition(dir.path(), &writers);
        p.append_as_follower(leader_bytes(&[1, 1, 2, 2, 3]), 1).await.unwrap();
        wait_for(&p.durable_offset, 10).await;
        p.advance_follower_high_watermark(10);
        let mut hw = p.subscribe();
        hw.borrow_and_update();
        // Inside the batch 6..=7: it goes whole.
        p.truncate_to(7, 1).await.unwrap();
        assert_eq!(*p.log_end_watch().borrow(), 6);
        assert_eq!(p.high_watermark(), 6);
        assert_eq!(*p.durable_offset.borrow(), 6);
        assert!(
            hw.has_changed().unwrap(),
            "readers waiting on the high watermark hear of it"
        );
        assert_eq!(p.offsets().unwrap().log_end_offset, 6);
        // Above the end: nothing moves.
        p.truncate_to(50, 1).await.unwrap();
        assert_eq!((*p.log_end_watch().borrow(), p.high_watermark()), (6, 6));
        // The leader's batches from there on; the durable offset follows the fsync again.
        let info = p.append_as_follower(leader_bytes(&[1, 1, 2, 4]), 1).await;
        assert!(matches!(
            info,
            Err(Error::UnexpectedAppendOffset { first_offset: 0, .. })
        ));
        let rest = leader_bytes(&[1, 1, 2, 4, 4]);
        let kept: usize = validate_batches(&rest, usize::MAX).unwrap()[..3]
            .iter()
            .map(|b| b.size())
            .sum();
        let tail = rest.slice(kept..);
        p.append_as_follower(tail, 1).await.unwrap().unwrap();
        wait_for(&p.durable_offset, 10).await;
        assert_eq!(p.latest_epoch().unwrap(), 4);
        // Starting over above the log: everything is at the new start.
        p.truncate_fully_and_start_at(100, 1).await.unwrap();
        assert_eq!(*p.log_end_watch().borrow(), 100);
        assert_eq!(p.high_watermark(), 100);
        assert_eq!(*p.durable_offset.borrow(), 100);
        let offsets = p.offsets().unwrap();
        assert_eq!((offsets.log_start_offset, offsets.log_end_offset), (100, 100));
        assert_eq!(p.latest_epoch().unwrap(), -1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compacted_follower_appends_across_offsets_its_leaders_cleaner_removed() {
        // cleanup.policy=compact: the leader's cleaner left offset gaps, before the first
        // batch fetched and between batches (Kafka's appendAsFollower only asks offsets to
        // increase). The log end jumps, and the watches follow it.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let config = LogConfig {
            compact: true,
            ..LogConfig::default()
        };
        let p = follower_partition_with(dir.path(), &writers, config);
        let mut bytes = leader_bytes(&[1, 1, 2]).to_vec();
        let sizes: Vec<usize> = validate_batches(&Bytes::from(bytes.clone()), usize::MAX)
            .unwrap()
            .iter()
            .map(|b| b.size())
            .collect();
        let mut pos = 0;
        for (size, base) in sizes.iter().zip([4i64, 10, 20]) {
            bytes[pos..pos + 8].copy_from_slice(&base.to_be_bytes()); // not covered by the CRC
            pos += size;
        }
        let info = p.append_as_follower(Bytes::from(bytes), 1).await.unwrap().unwrap();
        assert_eq!((info.base_offset, info.last_offset), (4, 21));
        assert_eq!(*p.log_end_watch().borrow(), 22);
        wait_for(&p.durable_offset, 22).await;
        p.advance_follower_high_watermark(22);
        assert_eq!(p.offsets().unwrap().high_watermark, 22);
        // Offsets still only increase.
        assert!(matches!(
            p.append_as_follower(leader_bytes(&[2]), 1).await,
            Err(Error::UnexpectedAppendOffset { expected: 22, .. })
        ));
    }
}
