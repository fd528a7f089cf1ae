//! The purgatory: requests that wait on a partition's progress (Kafka's `DelayedOperation`s).
//!
//! - `DelayedProduce`: an acks=all produce, answered once each partition it wrote has its
//!   batch durable here and below the high watermark, i.e. on every in-sync replica (one
//!   node: the ISR is itself), or with REQUEST_TIMED_OUT at its deadline.
//! - `DelayedFetch`: a fetch waiting for `min_bytes`, answered as soon as enough bytes are
//!   readable, a partition fails, or its deadline passes.
//!
//! Both are keyed by partition: they subscribe to the partition's `watch`es, which the append
//! path moves after each write (high watermark) and the flusher after each fsync (durable
//! offset). Nothing polls or sleeps. A waiting fetch re-judges only the partition that moved,
//! from file positions (`Partition::readable_bytes`), never by reading records; the handler
//! reads once, when the wait ends.

use std::sync::Arc;

use futures::future::select_all;
use tokio::sync::watch;
use tokio::time::Instant;

use super::Partition;
use crate::error::Error;
use crate::log::ReadableBytes;

/// An acks=all produce waiting for its partitions' batches to become durable.
#[derive(Default)]
pub struct DelayedProduce {
    waits: Vec<(Arc<Partition>, i64)>,
}

impl DelayedProduce {
    /// Waits, later, until `partition` holds everything up to `last_offset` durably.
    pub fn watch(&mut self, partition: Arc<Partition>, last_offset: i64) {
        self.waits.push((partition, last_offset));
    }

    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }

    /// One result per `watch`, in order: Ok, the partition's error, or `Err(None)` when the
    /// deadline passed first (REQUEST_TIMED_OUT).
    pub async fn complete(self, deadline: Instant) -> Vec<Result<(), Option<Error>>> {
        let mut results = Vec::with_capacity(self.waits.len());
        // One deadline for the whole request (Kafka's `timeout_ms`): waiting on the partitions
        // one after the other costs no more than waiting on all at once.
        for (partition, last_offset) in self.waits {
            let done = tokio::time::timeout_at(deadline, partition.wait_acknowledged(last_offset)).await;
            results.push(match done {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(Some(e)),
                Err(_elapsed) => Err(None),
            });
        }
        results
    }
}

/// One partition a fetch waits on.
struct Watched {
    partition: Arc<Partition>,
    fetch_offset: i64,
    /// The request's `partition_max_bytes`: no partition counts for more than this.
    max_bytes: u64,
    high_watermark: watch::Receiver<i64>,
    /// What the last judgement found readable (capped at `max_bytes`).
    readable: u64,
}

/// How a judgement of one partition came out.
enum Judged {
    Bytes(u64),
    /// Answer now: the partition failed, was closed, or the read starts in an older segment
    /// (Kafka's DelayedFetch cases A-F).
    AnswerNow,
}

/// A fetch waiting until `min_bytes` are readable over its partitions (Kafka's
/// `DelayedFetch`). Create it and `watch` the partitions before the handler's first read, so
/// an append between that read and the wait is not missed.
pub struct DelayedFetch {
    watched: Vec<Watched>,
    min_bytes: u64,
    read_committed: bool,
}

/// Why a waiting fetch ended; the handler reads and answers in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchWake {
    /// Enough bytes, or a partition that must be answered now.
    Ready,
    Deadline,
    /// A partition closed (deleted, or the broker stopping): the read answers its error.
    Closed,
}

impl DelayedFetch {
    pub fn new(min_bytes: usize, read_committed: bool) -> DelayedFetch {
        DelayedFetch {
            watched: Vec::new(),
            min_bytes: u64::try_from(min_bytes).unwrap_or(u64::MAX),
            read_committed,
        }
    }

    pub fn watch(&mut self, partition: Arc<Partition>, fetch_offset: i64, partition_max_bytes: i32) {
        let high_watermark = partition.subscribe();
        self.watched.push(Watched {
            partition,
            fetch_offset,
            max_bytes: u64::try_from(partition_max_bytes).unwrap_or(0),
            high_watermark,
            readable: 0,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.watched.is_empty()
    }

    fn judge(&self, w: &Watched) -> Judged {
        match w.partition.readable_bytes(w.fetch_offset, self.read_committed) {
            Err(_) | Ok(ReadableBytes::OlderSegment) => Judged::AnswerNow,
            Ok(ReadableBytes::Within(bytes)) => Judged::Bytes(bytes.min(w.max_bytes)),
        }
    }

    fn enough(&self) -> bool {
        let total = self.watched.iter().fold(0u64, |sum, w| sum.saturating_add(w.readable));
        total >= self.min_bytes
    }

    /// Waits until the fetch can be answered or `deadline` passes. Every partition is judged
    /// once at the start (Kafka's `tryCompleteElseWatch`: the bytes on disk may reach
    /// `min_bytes` although the handler's read, cut at `max_bytes`, did not); after that only a
    /// partition whose high watermark moved is judged again.
    pub async fn complete(mut self, deadline: Instant) -> FetchWake {
        for i in 0..self.watched.len() {
            match self.judge(&self.watched[i]) {
                Judged::AnswerNow => return FetchWake::Ready,
                Judged::Bytes(bytes) => self.watched[i].readable = bytes,
            }
        }
        loop {
            if self.enough() {
                return FetchWake::Ready;
            }
            if self.watched.is_empty() {
                return FetchWake::Deadline;
            }
            let changed = select_all(self.watched.iter_mut().map(|w| Box::pin(w.high_watermark.changed())));
            let moved = match tokio::time::timeout_at(deadline, changed).await {
                Err(_elapsed) => return FetchWake::Deadline,
                Ok((Err(_closed), _, _)) => return FetchWake::Closed,
                Ok((Ok(()), index, _)) => index,
            };
            match self.judge(&self.watched[moved]) {
                Judged::AnswerNow => return FetchWake::Ready,
                Judged::Bytes(bytes) => self.watched[moved].readable = bytes,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::cluster::Controller;
    use crate::log::ValidBatch;
    use crate::log::batch::tests::encode_batch;
    use crate::log::batch::validate_batches;
    use crate::replica::ReplicaManager;

    /// A one-partition topic on a fresh broker, and its partition.
    fn partition(dir: &std::path::Path) -> (Arc<Controller>, Arc<ReplicaManager>, Arc<Partition>) {
        let (controller, replicas) = crate::replica::tests::setup(dir);
        controller.create_topic("t", 1, 1, BTreeMap::new()).unwrap();
        replicas.catch_up(&controller.image()).unwrap();
        let p = replicas.get("t", 0).unwrap();
        (controller, replicas, p)
    }

    /// One batch of `records` records with 100-byte values (about 100 bytes each on disk).
    fn batch(records: usize) -> Vec<ValidBatch> {
        let timestamps: Vec<i64> = (0..records as i64).map(|i| 1_700_000_000_000 + i).collect();
        validate_batches(&encode_batch(&timestamps, 100), 1 << 20).unwrap()
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_fetch_is_answered_once_appends_reach_min_bytes() {
        let dir = tempfile::TempDir::new().unwrap();
        let (_c, _r, p) = partition(dir.path());
        // About 1,000 bytes wanted: one small batch is not enough, the second one is.
        let mut delayed = DelayedFetch::new(1_000, false);
        delayed.watch(p.clone(), 0, 1 << 20);
        let waiting = tokio::spawn(delayed.complete(far()));
        p.append(batch(2), false).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "answered before min_bytes were readable");
        p.append(batch(20), false).await.unwrap();
        assert_eq!(waiting.await.unwrap(), FetchWake::Ready);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_fetch_counts_at_most_partition_max_bytes() {
        let dir = tempfile::TempDir::new().unwrap();
        let (_c, _r, p) = partition(dir.path());
        p.append(batch(50), false).await.unwrap();
        // 5,000 bytes are readable, but the partition counts for 100 at most: the wait ends at
        // its deadline, as in Kafka's DelayedFetch.
        let mut delayed = DelayedFetch::new(1_000, false);
        delayed.watch(p.clone(), 0, 100);
        let deadline = Instant::now() + Duration::from_millis(200);
        assert_eq!(delayed.complete(deadline).await, FetchWake::Deadline);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fetch_past_the_log_end_is_answered_at_once() {
        let dir = tempfile::TempDir::new().unwrap();
        let (_c, _r, p) = partition(dir.path());
        // An offset beyond the log end is an error the read must answer now.
        let mut delayed = DelayedFetch::new(1_000, false);
        delayed.watch(p.clone(), 5, 1 << 20);
        assert_eq!(delayed.complete(far()).await, FetchWake::Ready);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delayed_produce_completes_when_its_batches_are_durable() {
        let dir = tempfile::TempDir::new().unwrap();
        let (_c, _r, p) = partition(dir.path());
        let info = p.append(batch(3), true).await.unwrap();
        let mut delayed = DelayedProduce::default();
        delayed.watch(p.clone(), info.last_offset);
        let results = delayed.complete(far()).await;
        assert!(matches!(results.as_slice(), [Ok(())]), "{results:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delayed_produce_on_a_closed_partition_gets_an_error() {
        let dir = tempfile::TempDir::new().unwrap();
        let (_c, _r, p) = partition(dir.path());
        let info = p.append(batch(3), false).await.unwrap();
        p.close().unwrap();
        // Closing flushed the log, so what was written is durable; a later offset never will be.
        let mut delayed = DelayedProduce::default();
        delayed.watch(p.clone(), info.last_offset + 10);
        let results = delayed.complete(Instant::now() + Duration::from_millis(300)).await;
        assert!(matches!(results.as_slice(), [Err(_)]), "{results:?}");
    }
}
