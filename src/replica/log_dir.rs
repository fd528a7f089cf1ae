//! Whether this node's log directory works (Kafka's `LogDirFailureChannel`, and the
//! `OfflineLogDirs` of its broker heartbeat, KIP-858).
//!
//! The first storage error of any partition (an append refused by the disk, a failed fsync or
//! truncation) takes the directory offline. A cluster node reports it in its next heartbeat,
//! which it sends at once; the controller then moves the node's leaderships to other in-sync
//! replicas, takes the node out of the ISRs it does not lead, and refuses to let it back in
//! (INELIGIBLE_REPLICA), so acks=all never waits for a replica that cannot write.
//!
//! Kafka keeps a failed directory offline until the broker restarts (and halts a broker whose
//! only directory failed). Sluice takes writes again once a full disk has space: while offline
//! it probes the directory (`probe`: a file as large as the largest append it refused, written,
//! fsynced and removed), and reports it online when a probe succeeds and no partition's fsync has failed (after a failed fsync the
//! page cache's state is unknown: that partition and the directory stay offline until a
//! restart). A directory that fails again soon after coming back is probed less often each
//! time, so a disk with a little space does not flap the ISRs.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The file a probe writes, in the data directory.
pub const PROBE_FILE: &str = ".log-dir-probe";
/// The least a probe writes: more than a page, so that a disk with a few blocks left does not
/// pass it. A probe writes as much as the largest append refused meanwhile (a full disk may
/// still take a small write and refuse a producer's batch), up to `PROBE_MAX_BYTES`.
const PROBE_BYTES: usize = 64 * 1024;
const PROBE_MAX_BYTES: usize = 64 << 20;
/// The first wait between probes while offline; doubled each time the directory fails again
/// within `STABLE` of coming back, up to `PROBE_MAX`.
const PROBE_MIN: Duration = Duration::from_secs(1);
const PROBE_MAX: Duration = Duration::from_secs(60);
const STABLE: Duration = Duration::from_secs(60);

/// The health of the log directory, shared by the replica manager (which sees the failures
/// and probes) and the broker's heartbeat (which reports it).
pub struct LogDirHealth {
    dir: PathBuf,
    offline: AtomicBool,
    timing: Mutex<Timing>,
}

struct Timing {
    /// The wait before the next probe.
    backoff: Duration,
    /// When the next probe is due (while offline).
    next_probe: Instant,
    /// When the directory last came back online.
    online_since: Option<Instant>,
    /// The largest write refused since it went offline.
    needed: usize,
}

impl LogDirHealth {
    /// The health of `dir`, online; a probe file left by a crash during a probe is removed
    /// (it can be large).
    pub fn new(dir: &Path) -> LogDirHealth {
        let _ = std::fs::remove_file(dir.join(PROBE_FILE));
        LogDirHealth {
            dir: dir.to_path_buf(),
            offline: AtomicBool::new(false),
            timing: Mutex::new(Timing {
                backoff: PROBE_MIN,
                next_probe: Instant::now(),
                online_since: None,
                needed: 0,
            }),
        }
    }

    /// Whether the directory is offline (reported so in the broker's heartbeat).
    pub fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }

    /// A partition's storage failed, refusing a write of `bytes` (0: not a write): the
    /// directory goes offline, if it was not already.
    pub fn failed(&self, now: Instant, bytes: usize) {
        let mut timing = self.timing.lock().unwrap_or_else(|p| p.into_inner());
        timing.needed = timing.needed.max(bytes);
        if self.offline.swap(true, Ordering::AcqRel) {
            return;
        }
        timing.backoff = match timing.online_since {
            Some(since) if now.duration_since(since) < STABLE => (timing.backoff * 2).min(PROBE_MAX),
            _ => PROBE_MIN,
        };
        timing.next_probe = now + timing.backoff;
        tracing::error!(
            dir = %self.dir.display(),
            probe_in_ms = timing.backoff.as_millis() as u64,
            "the log directory is offline: its replicas leave the ISRs and hand over their leaderships"
        );
    }

    /// How much the next probe writes.
    fn probe_bytes(&self) -> usize {
        let needed = self.timing.lock().unwrap_or_else(|p| p.into_inner()).needed;
        needed.clamp(PROBE_BYTES, PROBE_MAX_BYTES)
    }

    /// Whether a probe is due now (offline, and its wait has passed).
    pub fn probe_due(&self, now: Instant) -> bool {
        self.is_offline() && now >= self.timing.lock().unwrap_or_else(|p| p.into_inner()).next_probe
    }

    /// The outcome of a probe: on success the directory is online again; on failure the next
    /// probe waits as long again.
    pub fn probed(&self, result: std::io::Result<()>, now: Instant) {
        let mut timing = self.timing.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) => {
                timing.online_since = Some(now);
                timing.needed = 0;
                if self.offline.swap(false, Ordering::AcqRel) {
                    tracing::info!(dir = %self.dir.display(), "the log directory takes writes again: online");
                }
            }
            Err(e) => {
                timing.next_probe = now + timing.backoff;
                tracing::debug!(dir = %self.dir.display(), error = %e, "the log directory is still offline");
            }
        }
    }

    /// A probe: writes, fsyncs and removes a file in the directory (blocking), as large as
    /// the largest write refused since the directory went offline.
    pub fn probe(&self) -> std::io::Result<()> {
        use std::io::Write;
        let bytes = self.probe_bytes();
        let path = self.dir.join(PROBE_FILE);
        let written = (|| {
            let mut file = std::fs::File::create(&path)?;
            let block = [0u8; PROBE_BYTES];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(block.len());
                file.write_all(&block[..n])?;
                left -= n;
            }
            file.sync_all()
        })();
        let removed = std::fs::remove_file(&path);
        written?;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_goes_offline_at_a_failure_and_online_at_a_good_probe() {
        let dir = tempfile::TempDir::new().unwrap();
        let health = LogDirHealth::new(dir.path());
        let t0 = Instant::now();
        assert!(!health.is_offline() && !health.probe_due(t0));
        health.failed(t0, 0);
        assert!(health.is_offline());
        assert!(!health.probe_due(t0), "the first probe waits");
        assert!(health.probe_due(t0 + PROBE_MIN));
        health.probed(Err(std::io::Error::other("full")), t0 + PROBE_MIN);
        assert!(health.is_offline() && !health.probe_due(t0 + PROBE_MIN));
        let t1 = t0 + 2 * PROBE_MIN;
        health.probed(health.probe(), t1);
        assert!(!health.is_offline());
        assert!(!dir.path().join(PROBE_FILE).exists(), "the probe cleans up");

        // Failing again soon after: the probes back off; after a stable minute they do not.
        health.failed(t1 + Duration::from_secs(1), 0);
        assert!(!health.probe_due(t1 + Duration::from_secs(2)));
        assert!(health.probe_due(t1 + Duration::from_secs(3)));
        health.probed(Ok(()), t1 + Duration::from_secs(3));
        let later = t1 + Duration::from_secs(3) + STABLE;
        health.failed(later, 0);
        assert!(health.probe_due(later + PROBE_MIN));
    }

    #[test]
    fn a_probe_writes_as_much_as_the_largest_refused_write() {
        let dir = tempfile::TempDir::new().unwrap();
        let health = LogDirHealth::new(dir.path());
        let now = Instant::now();
        health.failed(now, 1000);
        assert_eq!(health.probe_bytes(), PROBE_BYTES);
        health.failed(now, 1 << 20);
        health.failed(now, 300_000);
        assert_eq!(health.probe_bytes(), 1 << 20);
        health.failed(now, usize::MAX);
        assert_eq!(health.probe_bytes(), PROBE_MAX_BYTES);
        health.probed(Ok(()), now);
        health.failed(now, 10);
        assert_eq!(health.probe_bytes(), PROBE_BYTES, "forgotten once online");
    }

    #[test]
    fn a_probe_file_left_by_a_crash_is_removed_at_start() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join(PROBE_FILE), [0u8; 100]).unwrap();
        let _health = LogDirHealth::new(dir.path());
        assert!(!dir.path().join(PROBE_FILE).exists());
    }

    #[test]
    fn a_probe_of_a_directory_that_cannot_be_written_fails() {
        let dir = tempfile::TempDir::new().unwrap();
        let health = LogDirHealth::new(&dir.path().join("gone"));
        assert!(health.probe().is_err());
    }
}
