//! The log writers: a fixed set of shard threads (`log-writer-N`) that run every change to a
//! partition's log (appends, markers, DeleteRecords, retention, the cleaner's swap, producer
//! expiration, config changes, close), so the write syscalls never run on an async worker.
//!
//! A partition always maps to the same shard (a hash of its name), and a shard runs its jobs
//! one at a time in the order they were queued: the appends of a partition are serialized and
//! keep their arrival order, which assigns their offsets (DESIGN.md: one writer per partition).
//! A shard thread rather than a task per partition because the jobs block (write, rename,
//! unlink), and a fixed set keeps 10,000 partitions from needing 10,000 threads.
//!
//! A produce's append skips the hand-off when the shard is idle (`Writer::claim_if_idle`): the
//! connection's task runs it in the shard's place, holding the shard's run lock, so order is the
//! same as through the queue. Two thread hand-offs per request, and the move of the request's
//! bytes to another core's cache, cost more than a small append (issue 10: 0.86-0.91x the broker
//! CPU per GB, and acks=all p99 1.3-1.6 ms against 2.2-2.3 through the queue). Appends that
//! would roll a segment still go to the shard, and a claim during which the thread slept (the
//! kernel throttling writes, a lock) sends the next ones there for a growing back-off.
//!
//! Each shard is fed by a bounded channel (`WRITER_QUEUE_JOBS`): when it is full the caller
//! waits (an async producer's handler is suspended, a blocking caller blocks) instead of
//! queueing without bound. The queue counts jobs, not bytes: the bytes a queued append holds
//! are the request's, already bounded by the connection's in-flight byte permit.

use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::{Notify, mpsc, oneshot};

use super::TopicPartition;

/// Shard threads per broker: Kafka's `num.io.threads` default (the threads that run its
/// requests, appends included). More shards than cores still help when a write blocks on a
/// slow disk: only the partitions of that shard wait.
pub const WRITER_SHARDS: usize = 8;

/// Jobs queued per shard before callers wait (back-pressure).
pub const WRITER_QUEUE_JOBS: usize = 1024;

/// A change to run on a shard thread. It answers through a channel of its own.
type Job = Box<dyn FnOnce() + Send>;

/// The shard threads of one broker. Threads end once every `Writer` of theirs is dropped
/// (the partitions and this set), after running what was queued.
pub struct Writers {
    shards: Vec<(mpsc::Sender<Job>, Arc<Shard>)>,
}

/// Where claims are counted: the broker's `sluice_log_append_in_place_*` metrics.
#[derive(Clone)]
pub struct ClaimStats {
    /// How long each claim was held, in seconds.
    pub held: Histogram,
    /// Claims during which the thread slept.
    pub slept: Counter,
}

impl Default for ClaimStats {
    fn default() -> Self {
        ClaimStats {
            held: crate::metrics::append_in_place_histogram(),
            slept: Counter::default(),
        }
    }
}

/// What a shard's callers share with its thread to tell whether it is idle.
#[derive(Default)]
struct Shard {
    /// Jobs queued or running: counted before a job is sent and uncounted once it has run.
    pending: AtomicUsize,
    /// Held while a job runs, on the shard thread or on a caller's (`claim_if_idle`).
    running: Mutex<()>,
    /// Until when (ms on the broker's monotonic clock, `elapsed_ms`) callers may not run jobs
    /// in the shard's place: a claim during which the thread slept (the kernel throttled a
    /// write to let write-back catch up, say) sends the next appends back to the shard thread
    /// for a while (`backoff`).
    no_claims_until: AtomicU64,
    /// Claims in a row that slept, each doubling the back-off; a claim that did not resets it.
    slept_in_a_row: AtomicU32,
    /// Woken each time the shard has run everything queued (`pending` back to 0).
    idle: Notify,
    /// Where claims are counted.
    stats: ClaimStats,
}

/// How long after the first claim that slept the shard thread takes every job again; each
/// claim in a row that sleeps too doubles it, up to `BACKOFF_MAX`. A rare sleep (a page fault
/// that waited, a contended lock) costs little; a write the kernel throttles again and again
/// soon leaves the async workers alone.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The back-off after `n` claims in a row slept (n >= 1).
fn backoff(n: u32) -> Duration {
    BACKOFF_FIRST
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(BACKOFF_MAX)
}

/// The calling thread's voluntary context switches so far (`getrusage(RUSAGE_THREAD)`): how
/// many times it blocked.
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage writes into the zeroed struct it is given, which outlives the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is Linux's, which is all this crate targets.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut usage) };
    if done == 0 { usage.ru_nvcsw } else { i64::MAX }
}

/// Milliseconds since the first call: a cheap monotonic clock for `no_claims_until`.
fn elapsed_ms() -> u64 {
    static START: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);
    u64::try_from(START.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Writers {
    /// Starts `shards` threads, each with a queue of `queue_jobs`. A thread that cannot be
    /// spawned leaves its shard without a receiver: its partitions answer KAFKA_STORAGE_ERROR
    /// (the error is logged here) while the others work.
    pub fn start(shards: usize, queue_jobs: usize) -> Writers {
        Writers::start_counted(shards, queue_jobs, &ClaimStats::default())
    }

    /// `start`, with the claims counted in `stats`.
    pub fn start_counted(shards: usize, queue_jobs: usize, stats: &ClaimStats) -> Writers {
        let shards = (0..shards.max(1))
            .map(|n| {
                let (tx, rx) = mpsc::channel::<Job>(queue_jobs.max(1));
                let shard = Arc::new(Shard {
                    stats: stats.clone(),
                    ..Shard::default()
                });
                let state = shard.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("log-writer-{n}"))
                    .spawn(move || run_shard(rx, &state));
                if let Err(e) = spawned {
                    tracing::error!(shard = n, error = %e, "cannot start a log writer thread; its partitions are offline");
                }
                (tx, shard)
            })
            .collect();
        Writers { shards }
    }

    /// The writer of a partition: always the same shard for the same name.
    pub fn for_partition(&self, tp: &TopicPartition) -> Writer {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same shard in every run, which keeps a partition's
        // thread stable in profiles and logs.
        let mut h = std::hash::DefaultHasher::new();
        tp.hash(&mut h);
        let n = usize::try_from(h.finish() % self.shards.len() as u64).unwrap_or(0);
        let (jobs, shard) = &self.shards[n % self.shards.len()];
        Writer {
            jobs: jobs.clone(),
            shard: shard.clone(),
        }
    }
}

/// A handle on one shard's queue.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Job>,
    shard: Arc<Shard>,
}

/// The right to run a change on the caller's thread, in the shard's place: while it is held,
/// the shard runs no job, and jobs queued meanwhile run after it is dropped.
pub struct Claim<'a> {
    shard: &'a Shard,
    /// The thread's voluntary context switches when the claim was given.
    slept_before: i64,
    /// When the claim was given.
    since: Instant,
    _running: MutexGuard<'a, ()>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.shard.stats.held.observe(self.since.elapsed().as_secs_f64());
        // A voluntary switch is a sleep: blocked on the disk, a lock or the kernel's dirty-page
        // throttle. Being preempted (an involuntary one) is no reason to back off.
        if voluntary_switches() > self.slept_before {
            self.shard.stats.slept.inc();
            let n = self
                .shard
                .slept_in_a_row
                .fetch_add(1, Ordering::AcqRel)
                .saturating_add(1);
            let wait = u64::try_from(backoff(n).as_millis()).unwrap_or(u64::MAX);
            self.shard
                .no_claims_until
                .store(elapsed_ms().saturating_add(wait), Ordering::Release);
        } else {
            self.shard.slept_in_a_row.store(0, Ordering::Release);
        }
    }
}

/// Uncounts a job from `Shard::pending` when dropped, unless it was sent: a caller that stops
/// waiting for room in the queue leaves the count as it found it.
struct Unsent<'a>(Option<&'a Shard>);

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(shard) = self.0 {
            shard.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The result of a queued job, once the shard has run it.
pub struct Answer<T>(oneshot::Receiver<T>);

impl<T> Future for Answer<T> {
    type Output = Result<T, WriterGone>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.map_err(|_| WriterGone))
    }
}

/// The shard thread is gone, or the job died before answering.
#[derive(Debug, PartialEq, Eq)]
pub struct WriterGone;

impl Writer {
    /// When the shard has nothing queued or running, the right to run a change here and now
    /// instead of handing it to the shard thread (two thread hand-offs saved, the cost of a
    /// small append). Queue order holds: every job queued before has run, and one queued while
    /// the claim is held waits for it. The caller must keep what it runs short and must not
    /// block on it (no fsync, no roll): an async worker runs it. After a claim during which the
    /// thread slept, none is given for a while (`backoff`).
    pub fn claim_if_idle(&self) -> Option<Claim<'_>> {
        // A shard whose thread is gone runs nothing, here either.
        if self.shard.pending.load(Ordering::Acquire) != 0 || self.jobs.is_closed() {
            return None;
        }
        let until = self.shard.no_claims_until.load(Ordering::Acquire);
        if until != 0 && elapsed_ms() < until {
            return None;
        }
        let guard = match self.shard.running.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        // Counted before it is sent, so a job queued before this point is seen here.
        (self.shard.pending.load(Ordering::Acquire) == 0).then(|| Claim {
            shard: &self.shard,
            slept_before: voluntary_switches(),
            since: Instant::now(),
            _running: guard,
        })
    }

    /// `claim_if_idle`, or when the shard runs exactly one job, the claim once it is done. A
    /// connection that pipelines appends to one partition finds the writer busy with its own
    /// previous one: waiting for it keeps the appends on the connection's thread, where the
    /// request's bytes are still in cache, rather than handing all of them to the shard from
    /// then on. With more queued the caller queues behind them (None).
    pub async fn claim_soon(&self) -> Option<Claim<'_>> {
        if self.shard.pending.load(Ordering::Acquire) == 1 && !self.jobs.is_closed() {
            let idle = self.shard.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.shard.pending.load(Ordering::Acquire) != 0 {
                idle.await;
            }
        }
        self.claim_if_idle()
    }

    /// Runs `op` on the shard thread after every job queued before it, and returns its result.
    /// Waits for room in the queue first. Dropping the future after the job was queued does
    /// not cancel the job (a produce whose client went away is still written, as in Kafka).
    pub fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = Result<T, WriterGone>> + Send + 'static {
        let queued = self.queue(op);
        async move { queued.await?.await }
    }

    /// Queues `op` (waiting for room in the queue, as `run`) and returns once it is queued,
    /// with the wait for its result: the caller may go on, and what it queues later on this
    /// shard runs after `op`. A produce handler queues its appends this way, so the connection's
    /// next request is read while they are written.
    pub fn queue<T: Send + 'static>(
        &self,
        op: impl FnOnce() -> T + Send + 'static,
    ) -> impl Future<Output = Result<Answer<T>, WriterGone>> + Send + 'static {
        let jobs = self.jobs.clone();
        let shard = self.shard.clone();
        async move {
            let (tx, rx) = oneshot::channel();
            let job: Job = Box::new(move || {
                // The caller may have stopped waiting: nothing to do about it here.
                let _ = tx.send(op());
            });
            shard.pending.fetch_add(1, Ordering::AcqRel);
            let mut unsent = Unsent(Some(&shard));
            jobs.send(job).await.map_err(|_| WriterGone)?;
            // The shard thread uncounts it once it has run.
            unsent.0 = None;
            Ok(Answer(rx))
        }
    }

    /// `run` for callers on a blocking thread (the cleaner, retention, the replica manager):
    /// blocks this thread, never an async worker's budget of someone else.
    pub fn run_blocking<T: Send + 'static>(&self, op: impl FnOnce() -> T + Send + 'static) -> Result<T, WriterGone> {
        // futures' executor, not tokio's blocking_send: it works on any thread, including the
        // shutdown path that closes partitions from a runtime worker. The jobs never need the
        // runtime, so blocking here cannot deadlock on it. `unconstrained`: on a worker whose
        // task used up its cooperative budget, tokio's channels would answer Pending and defer
        // the wake-up until the task yields to the scheduler, which a blocked thread never does.
        futures::executor::block_on(tokio::task::unconstrained(self.run(op)))
    }
}

/// A shard thread: runs jobs in queue order until every sender is gone.
fn run_shard(mut rx: mpsc::Receiver<Job>, shard: &Shard) {
    // `blocking_recv` returns at once while jobs are queued, so a burst is drained in one
    // wake-up; the thread parks only when the queue is empty.
    while let Some(job) = rx.blocking_recv() {
        let running = shard.running.lock().unwrap_or_else(|p| p.into_inner());
        // A job that panics drops its answer channel (the caller gets WriterGone, mapped to
        // KAFKA_STORAGE_ERROR); the shard goes on serving its other partitions.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("a log writer job panicked");
        }
        drop(running);
        if shard.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            shard.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::path::Path;
    use std::sync::Arc;

    use bytes::Bytes;
    use futures::FutureExt;
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::log::batch::encode_records;
    use crate::log::{Log, LogConfig, validate_batches};
    use crate::replica::Partition;

    fn partition(dir: &Path, writers: &Writers) -> Arc<Partition> {
        partition_with(dir, LogConfig::default(), writers)
    }

    fn partition_with(dir: &Path, config: LogConfig, writers: &Writers) -> Arc<Partition> {
        let tp = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        let log = Log::open(dir, config, crate::replica::now_ms()).unwrap();
        let writer = writers.for_partition(&tp);
        let partition = Arc::new(Partition::new(
            tp,
            uuid::Uuid::new_v4(),
            crate::replica::Opening {
                leader_epoch: 0,
                replicated: false,
                high_watermark: None,
            },
            dir.to_path_buf(),
            log,
            &BrokerConfig::default(),
            writer,
        ));
        tokio::spawn(partition.clone().run_flusher(crate::metrics::fsync_histogram()));
        partition
    }

    fn batch(value: &str) -> Vec<crate::log::ValidBatch> {
        let records = vec![(None, Some(Bytes::copy_from_slice(value.as_bytes())), 0)];
        validate_batches(&encode_records(&records, Compression::None).unwrap(), usize::MAX).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_get_contiguous_offsets_in_each_tasks_order() {
        // Many tasks append to one partition at once: each task's batches land in the order
        // it sent them, every offset is given once, and the log holds each batch at the
        // offset its append answered.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(2, 4);
        let p = partition(dir.path(), &writers);
        let (tasks, each) = (16, 50);
        let mut handles = Vec::new();
        for task in 0..tasks {
            let p = p.clone();
            handles.push(tokio::spawn(async move {
                let mut offsets = Vec::new();
                for i in 0..each {
                    let info = p.append(batch(&format!("{task}:{i}")), false).await.unwrap();
                    offsets.push(info.base_offset);
                }
                offsets
            }));
        }
        let mut written = vec![None; tasks * each];
        for (task, handle) in handles.into_iter().enumerate() {
            let offsets = handle.await.unwrap();
            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "task {task}: {offsets:?}");
            for (i, offset) in offsets.into_iter().enumerate() {
                let slot = &mut written[usize::try_from(offset).unwrap()];
                assert!(slot.is_none(), "offset {offset} given twice");
                *slot = Some(format!("{task}:{i}"));
            }
        }
        assert_eq!(p.high_watermark(), i64::try_from(tasks * each).unwrap());
        let read = p.read(0, usize::MAX, true).unwrap().records;
        let mut stored = Vec::new();
        for framed in crate::log::batch::batches(&read) {
            let (_, bytes) = framed.unwrap();
            stored.extend(crate::log::batch::decode_records(&bytes).unwrap().records);
        }
        assert_eq!(stored.len(), tasks * each);
        for (offset, record) in stored.iter().enumerate() {
            assert_eq!(record.offset, i64::try_from(offset).unwrap());
            let value = String::from_utf8(record.value.clone().unwrap().to_vec()).unwrap();
            assert_eq!(Some(value), written[offset], "offset {offset}");
        }
    }

    /// A partition whose segments roll every 4 KiB.
    fn small_segments(dir: &Path, writers: &Writers) -> Arc<Partition> {
        let config = LogConfig {
            segment_bytes: 4 << 10,
            ..LogConfig::default()
        };
        partition_with(dir, config, writers)
    }

    fn keyed_batch(key: &str, value: &str) -> Vec<crate::log::ValidBatch> {
        let records = vec![(
            Some(Bytes::from(key.to_owned())),
            Some(Bytes::from(value.to_owned())),
            0,
        )];
        validate_batches(&encode_records(&records, Compression::None).unwrap(), usize::MAX).unwrap()
    }

    /// Every record readable below the high watermark, as (offset, key, value).
    fn read_all(p: &Partition) -> Vec<(i64, String, String)> {
        let text = |b: &Option<Bytes>| String::from_utf8(b.clone().unwrap().to_vec()).unwrap();
        let mut rows = Vec::new();
        let mut next = 0;
        while next < p.high_watermark() {
            let read = p.read(next, 1 << 20, true).unwrap().records;
            for framed in crate::log::batch::batches(&read) {
                let (header, bytes) = framed.unwrap();
                next = header.last_offset() + 1;
                for r in crate::log::batch::decode_records(&bytes).unwrap().records {
                    rows.push((r.offset, text(&r.key), text(&r.value)));
                }
            }
        }
        rows
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_clean_commits_on_the_writer_after_the_appends_made_since_its_prepare() {
        // Kafka's cleaner swaps segments while producers go on appending: the appends queued
        // between the prepare and the commit keep their offsets and records.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 16);
        let p = small_segments(dir.path(), &writers);
        let keyed = |i: usize| keyed_batch(&format!("k{}", i % 20), &format!("v{i}"));
        let mut last = 0;
        for i in 0..400 {
            last = p.append(keyed(i), true).await.unwrap().last_offset;
        }
        p.wait_durable(last).await.unwrap();
        let cleaner = crate::log::cleaner::CleanerConfig {
            min_cleanable_dirty_ratio: 0.0,
            ..Default::default()
        };
        let plan = p
            .lock()
            .as_ref()
            .unwrap()
            .prepare_clean(&cleaner, crate::replica::now_ms())
            .unwrap()
            .expect("sealed, fsynced segments to clean");
        for i in 400..800 {
            p.append(keyed(i), false).await.unwrap();
        }
        let stats = p
            .write(move |p| p.with_log(|log| log.commit_clean(plan)))
            .await
            .unwrap();
        assert!(stats.as_ref().is_some_and(|s| s.records_removed > 0), "{stats:?}");
        let rows = read_all(&p);
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "offsets increase");
        let after: Vec<_> = rows.iter().filter(|r| r.0 >= 400).cloned().collect();
        let expected: Vec<_> = (400..800)
            .map(|i| (i64::from(i), format!("k{}", i % 20), format!("v{i}")))
            .collect();
        assert_eq!(after, expected);
        assert!(rows.len() < 800, "nothing was compacted");
        assert_eq!(p.high_watermark(), 800);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_blocking_close_from_a_worker_out_of_budget_does_not_hang() {
        // The broker's shutdown closes partitions from a runtime task: a task that used up
        // tokio's cooperative budget must still get the writer's answer.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = partition(dir.path(), &writers);
        p.append(batch("before"), true).await.unwrap();
        let task = tokio::spawn(async move {
            let (tx, mut rx) = mpsc::channel(1);
            while tokio::task::coop::has_budget_remaining() {
                tx.send(()).await.unwrap();
                rx.recv().await.unwrap();
            }
            p.close()
        });
        let closed = tokio::time::timeout(std::time::Duration::from_secs(20), task).await;
        closed.expect("close hung").unwrap().unwrap();
    }

    /// Waits until the shard counts `n` jobs queued or running; panics after 10 s.
    async fn wait_pending(writer: &Writer, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while writer.shard.pending.load(Ordering::Acquire) != n {
            assert!(std::time::Instant::now() < deadline, "never {n} jobs pending");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_shard_lets_the_caller_run_in_its_place_and_keeps_queue_order() {
        let stats = ClaimStats::default();
        let writers = Writers::start_counted(1, 1, &stats);
        let writer = writers.for_partition(&TopicPartition {
            topic: "t".into(),
            partition: 0,
        });
        assert!(writer.claim_if_idle().is_some(), "nothing queued or running");

        // While a job runs, and while one is queued behind it, the shard is not idle.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::spawn(writer.run(move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        }));
        started_rx.recv().unwrap();
        assert!(writer.claim_if_idle().is_none(), "a job is running");
        let queued = tokio::spawn(writer.run(|| 1));
        wait_pending(&writer, 2).await;
        // A caller that gives up waiting for room in the full queue leaves no count behind.
        let mut gave_up = Box::pin(writer.run(|| 2));
        assert!((&mut gave_up).now_or_never().is_none(), "queued past the bound");
        drop(gave_up);
        release_tx.send(()).unwrap();
        held.await.unwrap().unwrap();
        assert_eq!(queued.await.unwrap(), Ok(1));
        // The shard uncounts a job just after it answered.
        wait_pending(&writer, 0).await;
        assert!(writer.claim_if_idle().is_some(), "idle again once all has run");

        // A job queued while the claim is held runs after the claimant's work.
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let claim = writer.claim_if_idle().unwrap();
        let theirs = order.clone();
        let queued = tokio::spawn(writer.run(move || theirs.lock().unwrap().push("queued")));
        wait_pending(&writer, 1).await;
        // The shard thread has the job or is about to take it: give it time to (wrongly) run.
        std::thread::sleep(std::time::Duration::from_millis(20));
        order.lock().unwrap().push("here");
        drop(claim);
        queued.await.unwrap().unwrap();
        assert_eq!(*order.lock().unwrap(), ["here", "queued"]);
        // That claim slept: the shard takes the next jobs itself a while.
        assert!(writer.claim_if_idle().is_none(), "no back-off after a claim that slept");
        assert_eq!(writer.shard.slept_in_a_row.load(Ordering::Acquire), 1);
        // Counted: three claims (two given back at once, one held across a 20 ms sleep), one
        // of which slept.
        let (count, sum) = observed(&stats.held);
        assert_eq!(count, 3);
        assert!(sum >= 0.02, "the held claim's 20 ms: {sum}");
        assert_eq!(stats.slept.get(), 1);
    }

    /// A histogram's count and sum, from its text exposition.
    fn observed(histogram: &Histogram) -> (u64, f64) {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("h", "h", histogram.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_string()
        };
        (value("h_count").parse().unwrap(), value("h_sum").parse().unwrap())
    }

    #[test]
    fn each_claim_in_a_row_that_sleeps_doubles_the_back_off_up_to_its_bound() {
        assert_eq!(backoff(1), BACKOFF_FIRST);
        assert_eq!(backoff(2), BACKOFF_FIRST * 2);
        assert_eq!(backoff(4), BACKOFF_FIRST * 8);
        assert_eq!(backoff(12), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_appends_run_here_when_the_writer_is_idle_and_roll_on_the_writer() {
        // Small segments: some appends roll, which only the writer thread does.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 16);
        let p = small_segments(dir.path(), &writers);
        let batch = |value: &str| keyed_batch("k", value);
        // An idle writer and room in the segment: answered without the writer thread.
        let first = p.queue_append(batch("v0"), false, ()).await;
        assert_eq!(first.now_or_never().expect("appended here").unwrap().base_offset, 0);
        let mut answers = Vec::new();
        for i in 1..300 {
            answers.push(p.queue_append(batch(&format!("v{i}")), i % 2 == 0, ()).await);
        }
        for (i, answer) in answers.into_iter().enumerate() {
            assert_eq!(answer.await.unwrap().base_offset, i64::try_from(i + 1).unwrap());
        }
        let rows = read_all(&p);
        let values: Vec<_> = rows.iter().map(|r| r.2.clone()).collect();
        let expected: Vec<_> = (0..300).map(|i| format!("v{i}")).collect();
        assert_eq!(values, expected);
        assert!(rows.iter().enumerate().all(|(i, r)| r.0 == i64::try_from(i).unwrap()));
        let segments = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"))
            .count();
        assert!(segments > 2, "{segments} segments: the appends never rolled");
        p.wait_durable(298).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_makes_the_caller_wait_instead_of_growing() {
        let writers = Writers::start(1, 2);
        let writer = writers.for_partition(&TopicPartition {
            topic: "t".into(),
            partition: 0,
        });
        // Hold the shard thread inside a job until released.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let held = writer.run(move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        let held = tokio::spawn(held);
        started_rx.recv().unwrap();
        // Two jobs fill the queue; the third cannot even be queued.
        let queued: Vec<_> = (0..2).map(|i| tokio::spawn(writer.run(move || i))).collect();
        let mut third = Box::pin(writer.run(|| 2));
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!((&mut third).now_or_never().is_none(), "queued past the bound");
        release_tx.send(()).unwrap();
        held.await.unwrap().unwrap();
        for (i, job) in queued.into_iter().enumerate() {
            assert_eq!(job.await.unwrap(), Ok(i));
        }
        assert_eq!(third.await, Ok(2));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_that_cannot_be_written_after_an_fsync_does_not_fail_the_partition() {
        // A full disk can refuse the recovery-point checkpoint while the segment still takes
        // data (the active segment's reserved blocks): the fsync succeeded, so the partition
        // keeps acknowledging, and the checkpoint is written once it can be.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = partition(dir.path(), &writers);
        let checkpoint = dir.path().join("recovery-point-offset-checkpoint");
        // A directory where the checkpoint's temporary file goes: every write of it fails.
        let blocker = dir.path().join("recovery-point-offset-checkpoint.tmp");
        std::fs::create_dir(&blocker).unwrap();
        for value in ["one", "two", "three"] {
            let info = p.append(batch(value), true).await.unwrap();
            p.wait_durable(info.last_offset).await.unwrap();
        }
        // The acknowledgement comes before the round's checkpoint: wait for that round to end
        // (its write refused) before the blocker goes, or it could write the checkpoint.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while p.fsync_running.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < deadline, "the flush round never ended");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!(!checkpoint.exists());
        std::fs::remove_dir(&blocker).unwrap();
        let info = p.append(batch("four"), true).await.unwrap();
        p.wait_durable(info.last_offset).await.unwrap();
        // Written just after the acknowledgement.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while crate::log::checkpoint::read_recovery_point(dir.path()).unwrap() != Some(4) {
            assert!(std::time::Instant::now() < deadline, "the checkpoint was never written");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replicated_partition_starts_at_its_checkpointed_high_watermark_within_its_log() {
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = partition(dir.path(), &writers);
        for i in 0..5 {
            let info = p.append(batch(&format!("r{i}")), true).await.unwrap();
            p.wait_durable(info.last_offset).await.unwrap();
        }
        p.close().unwrap();
        drop(p);
        let tp = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        let open = |high_watermark: Option<i64>| {
            let log = Log::open(dir.path(), LogConfig::default(), crate::replica::now_ms()).unwrap();
            let p = Arc::new(Partition::new(
                tp.clone(),
                uuid::Uuid::new_v4(),
                crate::replica::Opening {
                    leader_epoch: 0,
                    replicated: true,
                    high_watermark,
                },
                dir.path().to_path_buf(),
                log,
                &BrokerConfig::default(),
                writers.for_partition(&tp),
            ));
            let hw = p.high_watermark();
            p.close().unwrap();
            hw
        };
        // The hint, capped at the log end (a power cut can shorten the log); none: the start.
        assert_eq!(open(Some(3)), 3);
        assert_eq!(open(Some(99)), 5);
        assert_eq!(open(None), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partition_whose_fsync_failed_is_not_marked_clean_when_closed() {
        // A later fsync can succeed after pages were lost (fsyncgate): a clean-shutdown marker
        // would make the next start skip the recovery that finds the loss.
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = partition(dir.path(), &writers);
        let info = p.append(batch("one"), true).await.unwrap();
        p.wait_durable(info.last_offset).await.unwrap();
        p.failed.store(true, Ordering::Release);
        let refused = p.close().unwrap_err();
        assert_eq!(refused.code(), 56, "{refused}"); // KAFKA_STORAGE_ERROR
        assert!(!dir.path().join(crate::log::checkpoint::CLEAN_SHUTDOWN_FILE).exists());

        let dir = tempfile::TempDir::new().unwrap();
        let p = partition(dir.path(), &writers);
        p.append(batch("one"), true).await.unwrap();
        p.close().unwrap();
        assert!(dir.path().join(crate::log::checkpoint::CLEAN_SHUTDOWN_FILE).exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_partition_or_a_lost_writer_answers_an_error_not_a_hang() {
        let dir = tempfile::TempDir::new().unwrap();
        let writers = Writers::start(1, 4);
        let p = partition(dir.path(), &writers);
        p.append(batch("before"), true).await.unwrap();
        p.close().unwrap();
        let closed = p.append(batch("after"), true).await.unwrap_err();
        assert_eq!(closed.code(), 3, "{closed}"); // UNKNOWN_TOPIC_OR_PARTITION
        let marker = p.write_txn_marker(7, 0, 0, true, 0).await.unwrap_err();
        assert_eq!(marker.code(), 3, "{marker}");

        // A shard whose thread is gone: KAFKA_STORAGE_ERROR.
        let (tx, rx) = mpsc::channel::<Job>(1);
        drop(rx);
        let dead = Writers {
            shards: vec![(tx, Arc::new(Shard::default()))],
        };
        let dir = tempfile::TempDir::new().unwrap();
        let p = partition(dir.path(), &dead);
        let lost = p.append(batch("x"), true).await.unwrap_err();
        assert_eq!(lost.code(), 56, "{lost}");
        // A job that panics answers the same, and the shard goes on.
        let writer = writers.for_partition(&p.tp);
        assert_eq!(writer.run(|| panic!("injected")).await, Err(WriterGone));
        assert_eq!(writer.run(|| 1).await, Ok(1));
    }
}
