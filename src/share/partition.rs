//! One share-partition (KIP-932): the state a share group keeps for one topic partition at the
//! partition leader. Every offset below the start offset (SPSO) is done; each offset of the
//! in-flight window `[start_offset, end_offset)` is available, acquired by a member until a lock
//! deadline, acknowledged or archived, and carries its delivery count. A pure state machine: no
//! I/O and no clock reads (callers pass `now`); the window holds at most `max_in_flight` offsets.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Acknowledge type 0: the offset holds no record (a gap); it is archived.
pub const ACK_GAP: i8 = 0;
/// Acknowledge type 1: the record was processed; it is acknowledged.
pub const ACK_ACCEPT: i8 = 1;
/// Acknowledge type 2: the record is given back for another delivery (or archived at the limit).
pub const ACK_RELEASE: i8 = 2;
/// Acknowledge type 3: the record cannot be processed; it is archived.
pub const ACK_REJECT: i8 = 3;
/// Acknowledge type 4 (KIP-1222, ShareFetch and ShareAcknowledge v2): the record stays
/// acquired by the member, its lock running again for a whole lock duration.
pub const ACK_RENEW: i8 = 4;

/// Persisted delivery state of an offset that may be delivered (again).
pub const PERSISTED_AVAILABLE: i8 = 0;
/// Persisted delivery state of an acknowledged offset.
pub const PERSISTED_ACKNOWLEDGED: i8 = 2;
/// Persisted delivery state of an archived offset.
pub const PERSISTED_ARCHIVED: i8 = 4;

/// Kafka error code INVALID_REQUEST.
const INVALID_REQUEST: i16 = 42;
/// Kafka error code INVALID_RECORD_STATE.
const INVALID_RECORD_STATE: i16 = 121;

/// Lock duration used when `now + lock_duration` does not fit in an `Instant` (about a century).
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Bounds of one share-partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most offsets the in-flight window may span (`group.share.partition.max.record.locks`).
    pub max_in_flight: usize,
    /// Deliveries after which a released or expired record is archived
    /// (`group.share.delivery.count.limit`).
    pub delivery_limit: i16,
}

impl Default for Limits {
    /// Kafka's defaults: 2000 record locks, 5 deliveries.
    fn default() -> Self {
        Self {
            max_in_flight: 2000,
            delivery_limit: 5,
        }
    }
}

/// Where one in-flight offset stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryState {
    /// May be acquired (again) by any member.
    Available,
    /// Locked for `member` until `deadline`.
    Acquired {
        /// Member id holding the lock.
        member: String,
        /// When the lock expires and the offset becomes available again.
        deadline: Instant,
    },
    /// Processed by a member; never delivered again.
    Acknowledged,
    /// Rejected, a gap, or past the delivery limit; never delivered again.
    Archived,
}

impl DeliveryState {
    /// Acknowledged or archived: the start offset may move past it.
    fn is_done(&self) -> bool {
        matches!(self, DeliveryState::Acknowledged | DeliveryState::Archived)
    }
}

/// State and delivery count of one in-flight offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordState {
    /// Where the offset stands.
    pub state: DeliveryState,
    /// How many times the offset has been acquired.
    pub delivery_count: i16,
}

/// How many records one acquisition may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The request's MaxRecords (what is left of it).
    pub max_records: usize,
    /// Never more than `max_records` (KIP-1206's record-limit mode), rather than whole batches.
    pub exact: bool,
}

/// A range of offsets acquired by one `acquire` call, all with the same delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    /// First acquired offset.
    pub first_offset: i64,
    /// Last acquired offset (inclusive).
    pub last_offset: i64,
    /// Delivery count of every offset of the range, this delivery included.
    pub delivery_count: i16,
}

/// Why an acknowledgement was refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckError {
    /// Malformed: `first > last`, a negative offset, an unknown type, or a wrong types length.
    InvalidRequest,
    /// An offset of the range is outside the window or not acquired by the member.
    InvalidRecordState,
}

impl AckError {
    /// The Kafka error code: INVALID_REQUEST (42) or INVALID_RECORD_STATE (121).
    pub fn code(&self) -> i16 {
        match self {
            AckError::InvalidRequest => INVALID_REQUEST,
            AckError::InvalidRecordState => INVALID_RECORD_STATE,
        }
    }
}

/// The durable state of a share-partition (what the share coordinator stores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Persisted {
    /// The share-partition start offset (SPSO).
    pub start_offset: i64,
    /// States of the in-flight offsets, in ascending, non-overlapping ranges.
    pub batches: Vec<PersistedBatch>,
}

impl Persisted {
    /// Offsets at or past the start offset whose delivery is complete (acknowledged or
    /// archived): what KIP-1226's lag leaves out of the records between the start offset and
    /// the high watermark.
    pub fn delivery_complete_count(&self) -> i64 {
        self.batches
            .iter()
            .filter(|b| b.state == PERSISTED_ACKNOWLEDGED || b.state == PERSISTED_ARCHIVED)
            .map(|b| {
                let first = b.first_offset.max(self.start_offset);
                if b.last_offset < first {
                    0
                } else {
                    b.last_offset.saturating_sub(first).saturating_add(1)
                }
            })
            .fold(0i64, i64::saturating_add)
    }
}

/// A range of offsets sharing one persisted state and delivery count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistedBatch {
    /// First offset of the range.
    pub first_offset: i64,
    /// Last offset of the range (inclusive).
    pub last_offset: i64,
    /// `PERSISTED_AVAILABLE`, `PERSISTED_ACKNOWLEDGED` or `PERSISTED_ARCHIVED`.
    pub state: i8,
    /// Delivery count of every offset of the range.
    pub delivery_count: i16,
}

/// The state one share group keeps for one topic partition.
///
/// Invariants: `records` holds exactly the offsets `start_offset..end_offset`, at most
/// `limits.max_in_flight` of them (`restore` cuts a larger persisted window) unless the limit
/// was lowered since they entered, and the offset at `start_offset`, if any, is neither
/// acknowledged nor archived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharePartition {
    start_offset: i64,
    end_offset: i64,
    records: BTreeMap<i64, RecordState>,
    limits: Limits,
    /// Records whose lock expired, since this state was built (a metric).
    lock_timeouts: u64,
}

impl SharePartition {
    /// An empty share-partition whose window starts (and ends) at `start_offset`.
    pub fn new(start_offset: i64, limits: Limits) -> Self {
        Self {
            start_offset,
            end_offset: start_offset,
            records: BTreeMap::new(),
            limits,
            lock_timeouts: 0,
        }
    }

    /// The share-partition start offset (SPSO): every offset below it is done.
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// The share-partition end offset (SPEO, exclusive): offsets at or above it were never
    /// acquired.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The limits this share-partition was built with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The state of `offset` if it is in the window.
    pub fn record(&self, offset: i64) -> Option<&RecordState> {
        self.records.get(&offset)
    }

    /// Number of offsets currently acquired by some member.
    pub fn acquired_count(&self) -> usize {
        self.records
            .values()
            .filter(|r| matches!(r.state, DeliveryState::Acquired { .. }))
            .count()
    }

    /// The group's limits as they are now (KIP-1240's group configs, read at each use). A
    /// changed delivery limit (`share.delivery.count.limit`) applies from the next release or
    /// lock expiry, so a record already at or past a lowered limit is archived then, after the
    /// delivery in flight. A lowered window (`share.partition.max.record.locks`) takes no new
    /// offsets until it has drained below the limit; nothing in flight is taken back.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Records whose lock expired since this state was built or restored.
    pub fn lock_timeouts(&self) -> u64 {
        self.lock_timeouts
    }

    /// Number of offsets in the in-flight window (`end_offset - start_offset`).
    pub fn in_flight(&self) -> usize {
        self.records.len()
    }

    /// The earliest lock deadline, if any offset is acquired.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.records
            .values()
            .filter_map(|r| match &r.state {
                DeliveryState::Acquired { deadline, .. } => Some(*deadline),
                _ => None,
            })
            .min()
    }

    /// Where the next fetch for this share-partition should read from, after expiring locks:
    /// the lowest available offset in the window, else `end_offset` when the window has room
    /// for new records, else `None` (window full and nothing to redeliver).
    pub fn next_fetch_offset(&mut self, now: Instant) -> Option<i64> {
        self.expire_locks(now);
        let available = self
            .records
            .iter()
            .find(|(_, r)| r.state == DeliveryState::Available)
            .map(|(offset, _)| *offset);
        match available {
            Some(offset) => Some(offset),
            None if self.has_room() => Some(self.end_offset),
            None => None,
        }
    }

    /// Acquires records for `member` from `batches`, the inclusive offset ranges of the record
    /// batches read from the log at the fetch offset, in order, after expiring locks.
    ///
    /// Available offsets of the window and new offsets at `end_offset` (while the window has
    /// room) are locked until `now + lock_duration`; other offsets are skipped. Stops once
    /// `max_records` were acquired: at a batch boundary (batches stay whole, Kafka's
    /// batch-optimized acquire mode) or, with `exact` (the record-limit mode of KIP-1206),
    /// at exactly `max_records`, mid-batch; and mid-batch when the window is full. Returns the
    /// acquired offsets merged into ranges of equal delivery count.
    pub fn acquire(
        &mut self,
        member: &str,
        batches: &[(i64, i64)],
        max_records: usize,
        lock_duration: Duration,
        now: Instant,
    ) -> Vec<Acquired> {
        let budget = Budget {
            max_records,
            exact: false,
        };
        self.acquire_archiving(member, batches, &[], budget, lock_duration, now)
    }

    /// `acquire`, except that the batches whose index `archive` marks true (a read_committed
    /// group's aborted transactions: Kafka's `filterAbortedTransactionalAcquiredRecords`) are
    /// never delivered: their available and new offsets are archived, and count for neither
    /// the budget nor the result.
    pub fn acquire_archiving(
        &mut self,
        member: &str,
        batches: &[(i64, i64)],
        archive: &[bool],
        budget: Budget,
        lock_duration: Duration,
        now: Instant,
    ) -> Vec<Acquired> {
        let Budget { max_records, exact } = budget;
        self.expire_locks(now);
        let deadline = lock_deadline(now, lock_duration);
        let acquired_state = || DeliveryState::Acquired {
            member: member.to_string(),
            deadline,
        };
        let mut out: Vec<Acquired> = Vec::new();
        let mut count = 0usize;
        'batches: for (index, &(first, last)) in batches.iter().enumerate() {
            if count >= max_records {
                break;
            }
            let lo = first.max(self.start_offset);
            if lo > last || lo > self.end_offset {
                // Entirely below the window, empty, or past a gap: nothing to acquire here.
                continue;
            }
            if archive.get(index).copied().unwrap_or(false) {
                if !self.archive_range(lo, last) {
                    break;
                }
                continue;
            }
            // Offsets already in the window: only the available ones are acquired.
            if lo < self.end_offset {
                let hi = last.min(self.end_offset - 1);
                for (&offset, rec) in self.records.range_mut(lo..=hi) {
                    if exact && count >= max_records {
                        break 'batches;
                    }
                    if rec.state == DeliveryState::Available {
                        rec.delivery_count = rec.delivery_count.saturating_add(1);
                        rec.state = acquired_state();
                        push_acquired(&mut out, offset, rec.delivery_count);
                        count += 1;
                    }
                }
            }
            // New offsets, from end_offset on, while the window has room.
            while self.end_offset <= last {
                if !self.has_room() || self.end_offset == i64::MAX || (exact && count >= max_records) {
                    break 'batches;
                }
                let offset = self.end_offset;
                self.records.insert(
                    offset,
                    RecordState {
                        state: acquired_state(),
                        delivery_count: 1,
                    },
                );
                self.end_offset = offset + 1;
                push_acquired(&mut out, offset, 1);
                count += 1;
            }
        }
        self.advance_start();
        out
    }

    /// Archives the available offsets of `lo..=last` in the window and adds the new ones past
    /// `end_offset` as archived, never delivered. Returns false once the window is full.
    fn archive_range(&mut self, lo: i64, last: i64) -> bool {
        if lo < self.end_offset {
            let hi = last.min(self.end_offset - 1);
            for rec in self.records.range_mut(lo..=hi).map(|(_, rec)| rec) {
                if rec.state == DeliveryState::Available {
                    rec.state = DeliveryState::Archived;
                }
            }
        }
        self.restore_range(last, &DeliveryState::Archived, 0)
    }

    /// Applies `member`'s acknowledgement of `first..=last`: `types` holds one Kafka
    /// acknowledge type for the whole range or one per offset. Locks are expired first; every
    /// offset must be in the window and acquired by `member`, or nothing changes. A renewed
    /// offset (`ACK_RENEW`) stays acquired, locked until `now + lock_duration`, its delivery
    /// count unchanged.
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        types: &[i8],
        lock_duration: Duration,
        now: Instant,
    ) -> Result<(), AckError> {
        if first < 0 || first > last {
            return Err(AckError::InvalidRequest);
        }
        // Computed in i128: no i64 overflow whatever the client sent.
        let span = i128::from(last) - i128::from(first) + 1;
        if types.is_empty() || (types.len() != 1 && types.len() as i128 != span) {
            return Err(AckError::InvalidRequest);
        }
        if types.iter().any(|t| !(ACK_GAP..=ACK_RENEW).contains(t)) {
            return Err(AckError::InvalidRequest);
        }
        self.expire_locks(now);
        // In the window, so the range spans at most `in_flight()` offsets.
        if first < self.start_offset || last >= self.end_offset {
            return Err(AckError::InvalidRecordState);
        }
        if !self.records.range(first..=last).all(|(_, r)| held_by(r, member)) {
            return Err(AckError::InvalidRecordState);
        }
        let limit = self.limits.delivery_limit;
        let deadline = lock_deadline(now, lock_duration);
        // `types` has length 1 (cycled) or exactly one entry per offset.
        for ((_, rec), &kind) in self.records.range_mut(first..=last).zip(types.iter().cycle()) {
            match kind {
                ACK_ACCEPT => rec.state = DeliveryState::Acknowledged,
                ACK_RELEASE => release(rec, limit),
                ACK_RENEW => {
                    if let DeliveryState::Acquired { deadline: d, .. } = &mut rec.state {
                        *d = deadline;
                    }
                }
                _ => rec.state = DeliveryState::Archived,
            }
        }
        self.advance_start();
        Ok(())
    }

    /// Releases every lock whose deadline is at or before `now`: the offset becomes available,
    /// or archived once its delivery count reached the limit. Returns whether anything changed.
    pub fn expire_locks(&mut self, now: Instant) -> bool {
        let limit = self.limits.delivery_limit;
        let mut changed = false;
        for rec in self.records.values_mut() {
            if matches!(rec.state, DeliveryState::Acquired { deadline, .. } if deadline <= now) {
                release(rec, limit);
                self.lock_timeouts += 1;
                changed = true;
            }
        }
        if changed {
            self.advance_start();
        }
        changed
    }

    /// Releases every offset acquired by `member` as if its lock expired (the member left or
    /// its share session closed). Returns whether anything changed.
    pub fn release_member(&mut self, member: &str) -> bool {
        let limit = self.limits.delivery_limit;
        let mut changed = false;
        for rec in self.records.values_mut() {
            if held_by(rec, member) {
                release(rec, limit);
                changed = true;
            }
        }
        if changed {
            self.advance_start();
        }
        changed
    }

    /// The log start moved up to `log_start` (retention or DeleteRecords): offsets below it are
    /// dropped from the window and the start offset follows.
    pub fn move_start(&mut self, log_start: i64) {
        if log_start <= self.start_offset {
            return;
        }
        self.records = self.records.split_off(&log_start);
        self.start_offset = log_start;
        self.end_offset = self.end_offset.max(log_start);
        self.advance_start();
    }

    /// Clears the window and puts start and end at `start_offset` (AlterShareGroupOffsets).
    pub fn reset(&mut self, start_offset: i64) {
        self.records.clear();
        self.start_offset = start_offset;
        self.end_offset = start_offset;
    }

    /// The durable state: the start offset and the window's states, consecutive offsets of
    /// equal state and delivery count merged. Acquired offsets are persisted as available.
    pub fn snapshot(&self) -> Persisted {
        let mut batches: Vec<PersistedBatch> = Vec::new();
        for (&offset, rec) in &self.records {
            let state = match rec.state {
                DeliveryState::Available | DeliveryState::Acquired { .. } => PERSISTED_AVAILABLE,
                DeliveryState::Acknowledged => PERSISTED_ACKNOWLEDGED,
                DeliveryState::Archived => PERSISTED_ARCHIVED,
            };
            match batches.last_mut() {
                Some(b)
                    if b.last_offset.checked_add(1) == Some(offset)
                        && b.state == state
                        && b.delivery_count == rec.delivery_count =>
                {
                    b.last_offset = offset;
                }
                _ => batches.push(PersistedBatch {
                    first_offset: offset,
                    last_offset: offset,
                    state,
                    delivery_count: rec.delivery_count,
                }),
            }
        }
        Persisted {
            start_offset: self.start_offset,
            batches,
        }
    }

    /// Rebuilds a share-partition from its durable state. Offsets the batches do not name
    /// between the start and the last batch are available with delivery count 0; batch parts
    /// below the start, or overlapping an earlier batch, are ignored; unknown states (and
    /// Kafka's acquired, 1) restore as available. Persisted state is not trusted to be small:
    /// done ranges at the start are skipped without iterating, and the window is cut at
    /// `max_in_flight` offsets (later offsets count as never acquired).
    pub fn restore(persisted: &Persisted, limits: Limits) -> SharePartition {
        let mut sp = SharePartition::new(persisted.start_offset, limits);
        for b in &persisted.batches {
            let state = match b.state {
                PERSISTED_ACKNOWLEDGED => DeliveryState::Acknowledged,
                PERSISTED_ARCHIVED => DeliveryState::Archived,
                _ => DeliveryState::Available,
            };
            let first = b.first_offset.max(sp.end_offset);
            if first > b.last_offset {
                continue;
            }
            if first > sp.end_offset && !sp.restore_range(first - 1, &DeliveryState::Available, 0) {
                break;
            }
            if !sp.restore_range(b.last_offset, &state, b.delivery_count.max(0)) {
                break;
            }
        }
        sp.advance_start();
        sp
    }

    /// Appends `end_offset..=last` in `state` (restoring a persisted window, or archiving). A
    /// done range on an empty window just moves start and end. Returns false once the window
    /// is full (restoring stops).
    fn restore_range(&mut self, last: i64, state: &DeliveryState, delivery_count: i16) -> bool {
        if self.records.is_empty() && state.is_done() {
            let next = last.saturating_add(1);
            self.start_offset = next;
            self.end_offset = next;
            return true;
        }
        while self.end_offset <= last {
            if !self.has_room() || self.end_offset == i64::MAX {
                return false;
            }
            let offset = self.end_offset;
            self.records.insert(
                offset,
                RecordState {
                    state: state.clone(),
                    delivery_count,
                },
            );
            self.end_offset = offset + 1;
        }
        true
    }

    /// Whether a new offset may join the window.
    fn has_room(&self) -> bool {
        self.records.len() < self.limits.max_in_flight
    }

    /// Moves the start offset past every done offset at the front of the window.
    fn advance_start(&mut self) {
        while let Some(entry) = self.records.first_entry() {
            if !entry.get().state.is_done() {
                break;
            }
            let offset = *entry.key();
            entry.remove();
            self.start_offset = offset.saturating_add(1);
        }
        if self.records.is_empty() {
            self.start_offset = self.end_offset;
        }
    }
}

/// `now + lock_duration`, or as far as an `Instant` reaches.
fn lock_deadline(now: Instant, lock_duration: Duration) -> Instant {
    now.checked_add(lock_duration)
        .unwrap_or_else(|| now.checked_add(FAR_FUTURE).unwrap_or(now))
}

/// Whether `rec` is acquired by `member`.
fn held_by(rec: &RecordState, member: &str) -> bool {
    matches!(&rec.state, DeliveryState::Acquired { member: m, .. } if m == member)
}

/// Gives back a lock: available again, or archived once the delivery limit is reached.
fn release(rec: &mut RecordState, delivery_limit: i16) {
    rec.state = if rec.delivery_count >= delivery_limit {
        DeliveryState::Archived
    } else {
        DeliveryState::Available
    };
}

/// Adds `offset` to the acquired ranges, extending the last one when it is consecutive and has
/// the same delivery count.
fn push_acquired(out: &mut Vec<Acquired>, offset: i64, delivery_count: i16) {
    if let Some(last) = out.last_mut()
        && last.last_offset.checked_add(1) == Some(offset)
        && last.delivery_count == delivery_count
    {
        last.last_offset = offset;
        return;
    }
    out.push(Acquired {
        first_offset: offset,
        last_offset: offset,
        delivery_count,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: Duration = Duration::from_secs(30);

    fn limits(max_in_flight: usize, delivery_limit: i16) -> Limits {
        Limits {
            max_in_flight,
            delivery_limit,
        }
    }

    /// Kafka's batch-optimized budget of `max_records`.
    fn whole(max_records: usize) -> Budget {
        Budget {
            max_records,
            exact: false,
        }
    }

    fn acq(first_offset: i64, last_offset: i64, delivery_count: i16) -> Acquired {
        Acquired {
            first_offset,
            last_offset,
            delivery_count,
        }
    }

    fn pb(first_offset: i64, last_offset: i64, state: i8, delivery_count: i16) -> PersistedBatch {
        PersistedBatch {
            first_offset,
            last_offset,
            state,
            delivery_count,
        }
    }

    /// The window holds exactly start..end and its first offset is not done.
    fn check(sp: &SharePartition) {
        let keys: Vec<i64> = sp.records.keys().copied().collect();
        let expected: Vec<i64> = (sp.start_offset..sp.end_offset).collect();
        assert_eq!(keys, expected);
        assert!(sp.records.len() <= sp.limits.max_in_flight);
        if let Some(r) = sp.records.values().next() {
            assert!(!r.state.is_done());
        }
    }

    fn state(sp: &SharePartition, offset: i64) -> DeliveryState {
        sp.record(offset).map(|r| r.state.clone()).unwrap()
    }

    fn count(sp: &SharePartition, offset: i64) -> i16 {
        sp.record(offset).map(|r| r.delivery_count).unwrap()
    }

    #[test]
    fn acquires_new_records_and_stops_at_a_batch_boundary() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(100, Limits::default());
        assert_eq!(sp.next_fetch_offset(t0), Some(100));
        // The first batch starts below the fetch offset; 7 records stop after the second batch.
        let got = sp.acquire("m1", &[(95, 104), (105, 109), (110, 119)], 7, LOCK, t0);
        assert_eq!(got, vec![acq(100, 109, 1)]);
        assert_eq!((sp.start_offset(), sp.end_offset()), (100, 110));
        assert_eq!(sp.acquired_count(), 10);
        assert_eq!(sp.in_flight(), 10);
        assert_eq!(sp.next_deadline(), Some(t0 + LOCK));
        assert_eq!(
            state(&sp, 105),
            DeliveryState::Acquired {
                member: "m1".to_string(),
                deadline: t0 + LOCK
            }
        );
        assert_eq!(sp.next_fetch_offset(t0), Some(110));
        // Already acquired offsets are skipped; batches entirely below the start are ignored.
        let got = sp.acquire("m2", &[(50, 60), (105, 112)], 100, LOCK, t0);
        assert_eq!(got, vec![acq(110, 112, 1)]);
        assert_eq!(sp.end_offset(), 113);
        // A batch past end_offset (a gap) is not acquired.
        assert!(sp.acquire("m2", &[(120, 125)], 100, LOCK, t0).is_empty());
        // max_records 0 acquires nothing.
        assert!(sp.acquire("m2", &[(113, 115)], 0, LOCK, t0).is_empty());
        assert_eq!(sp.end_offset(), 113);
        check(&sp);
    }

    #[test]
    fn record_limit_mode_acquires_exactly_max_records() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        let exact = |max_records| Budget {
            max_records,
            exact: true,
        };
        // New records: 3 of a 10-record batch; the rest stays past the window.
        let got = sp.acquire_archiving("m1", &[(0, 9), (10, 19)], &[], exact(3), LOCK, t0);
        assert_eq!(got, vec![acq(0, 2, 1)]);
        assert_eq!((sp.start_offset(), sp.end_offset()), (0, 3));
        // Records already in the window: 2 of 3 released ones, then nothing past the budget.
        sp.acknowledge("m1", 0, 2, &[ACK_RELEASE], LOCK, t0).unwrap();
        let got = sp.acquire_archiving("m2", &[(0, 9)], &[], exact(2), LOCK, t0);
        assert_eq!(got, vec![acq(0, 1, 2)]);
        assert_eq!(sp.record(2).map(|r| &r.state), Some(&DeliveryState::Available));
        assert_eq!(sp.end_offset(), 3);
        // Across the window's end: the last released one and 4 new ones.
        let got = sp.acquire_archiving("m2", &[(0, 9)], &[], exact(5), LOCK, t0);
        assert_eq!(got, vec![acq(2, 2, 2), acq(3, 6, 1)]);
        assert_eq!(sp.end_offset(), 7);
        // The batch-optimized mode takes the rest of the batch.
        let got = sp.acquire_archiving("m2", &[(0, 9)], &[], whole(1), LOCK, t0);
        assert_eq!(got, vec![acq(7, 9, 1)]);
        check(&sp);
    }

    #[test]
    fn renew_restarts_the_lock_of_the_members_records() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 3)], 100, LOCK, t0);
        let later = t0 + LOCK / 2;
        // Renewed offsets stay acquired, locked a whole duration from now, the count unchanged.
        sp.acknowledge("m1", 0, 1, &[ACK_RENEW], LOCK, later).unwrap();
        let locked = |deadline| DeliveryState::Acquired {
            member: "m1".to_string(),
            deadline,
        };
        assert_eq!(state(&sp, 0), locked(later + LOCK));
        assert_eq!(state(&sp, 1), locked(later + LOCK));
        assert_eq!(state(&sp, 2), locked(t0 + LOCK));
        assert_eq!(count(&sp, 0), 1);
        // Past the first lock: 2 and 3 expired, 0 and 1 are still held.
        let after = t0 + LOCK;
        sp.expire_locks(after);
        assert_eq!(state(&sp, 2), DeliveryState::Available);
        assert_eq!(state(&sp, 0), locked(later + LOCK));
        // Mixed with other types, per offset.
        sp.acknowledge("m1", 0, 1, &[ACK_ACCEPT, ACK_RENEW], LOCK, after)
            .unwrap();
        // 0 acknowledged: the start offset moved past it.
        assert_eq!(sp.start_offset(), 1);
        assert_eq!(state(&sp, 1), locked(after + LOCK));
        // Another member's record, or one no longer acquired, cannot be renewed.
        let bad = Err(AckError::InvalidRecordState);
        assert_eq!(sp.acknowledge("m2", 1, 1, &[ACK_RENEW], LOCK, after), bad);
        assert_eq!(sp.acknowledge("m1", 2, 2, &[ACK_RENEW], LOCK, after), bad);
        assert_eq!(
            sp.acknowledge("m1", 1, 1, &[5], LOCK, after),
            Err(AckError::InvalidRequest)
        );
        check(&sp);
    }

    #[test]
    fn archived_batches_are_never_delivered_and_do_not_count() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        // An aborted transaction at the front: the start moves past it, and it does not count
        // against max_records (3 records are acquired after it).
        let got = sp.acquire_archiving(
            "m1",
            &[(0, 2), (3, 3), (4, 5)],
            &[true, false, false],
            whole(3),
            LOCK,
            t0,
        );
        assert_eq!(got, vec![acq(3, 5, 1)]);
        assert_eq!((sp.start_offset(), sp.end_offset()), (3, 6));
        check(&sp);
        // Between delivered records, an aborted batch stays archived in the window; released
        // records around it come back, it never does.
        let got = sp.acquire_archiving(
            "m1",
            &[(6, 6), (7, 9), (10, 10)],
            &[false, true, false],
            whole(100),
            LOCK,
            t0,
        );
        assert_eq!(got, vec![acq(6, 6, 1), acq(10, 10, 1)]);
        assert_eq!(state(&sp, 8), DeliveryState::Archived);
        assert_eq!(count(&sp, 8), 0);
        sp.acknowledge("m1", 3, 10, &[ACK_RELEASE], LOCK, t0).unwrap_err();
        sp.acknowledge("m1", 3, 6, &[ACK_RELEASE], LOCK, t0).unwrap();
        sp.acknowledge("m1", 10, 10, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!(sp.next_fetch_offset(t0), Some(3));
        let got = sp.acquire_archiving(
            "m2",
            &[(3, 3), (4, 5), (6, 6), (7, 9), (10, 10)],
            &[],
            whole(100),
            LOCK,
            t0,
        );
        assert_eq!(got, vec![acq(3, 6, 2), acq(10, 10, 2)]);
        // An available record in a batch marked for archiving is archived, not acquired.
        sp.acknowledge("m2", 3, 6, &[ACK_ACCEPT], LOCK, t0).unwrap();
        sp.acknowledge("m2", 10, 10, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert!(
            sp.acquire_archiving("m2", &[(10, 10)], &[true], whole(100), LOCK, t0)
                .is_empty()
        );
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (11, 11, 0));
        check(&sp);
        // A full window stops archiving as it stops acquiring.
        let mut sp = SharePartition::new(0, limits(4, 5));
        assert_eq!(sp.acquire("m1", &[(0, 0)], 100, LOCK, t0), vec![acq(0, 0, 1)]);
        assert!(
            sp.acquire_archiving("m1", &[(1, 9), (10, 10)], &[true, false], whole(100), LOCK, t0)
                .is_empty()
        );
        assert_eq!((sp.start_offset(), sp.end_offset()), (0, 4));
        check(&sp);
    }

    #[test]
    fn a_changed_delivery_limit_applies_at_the_next_release() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, limits(100, 5));
        sp.acquire("m1", &[(0, 1)], 100, LOCK, t0);
        sp.acknowledge("m1", 0, 1, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!(sp.acquire("m1", &[(0, 1)], 100, LOCK, t0), vec![acq(0, 1, 2)]);
        // Lowered below the deliveries made: the delivery in flight is the last one.
        sp.set_limits(limits(100, 2));
        sp.acknowledge("m1", 0, 0, &[ACK_RELEASE], LOCK, t0).unwrap();
        // Archived: the start offset moves past it.
        assert_eq!(sp.start_offset(), 1);
        // Raised again: the other record, released now, comes back.
        sp.set_limits(limits(100, 3));
        sp.acknowledge("m1", 1, 1, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!(state(&sp, 1), DeliveryState::Available);
        assert_eq!(sp.acquire("m1", &[(0, 1)], 100, LOCK, t0), vec![acq(1, 1, 3)]);
        check(&sp);
    }

    #[test]
    fn a_lowered_window_drains_before_new_offsets_enter() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, limits(6, 5));
        assert_eq!(sp.acquire("m1", &[(0, 9)], 100, LOCK, t0), vec![acq(0, 5, 1)]);
        // Lowered to 3 with 6 in flight: nothing is taken back, nothing new enters.
        sp.set_limits(limits(3, 5));
        assert_eq!(sp.in_flight(), 6);
        sp.acknowledge("m1", 0, 1, &[ACK_ACCEPT], LOCK, t0).unwrap();
        sp.acknowledge("m1", 2, 2, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!(sp.next_fetch_offset(t0), Some(2));
        // A released offset in the window may still be acquired again.
        assert_eq!(sp.acquire("m2", &[(0, 9)], 100, LOCK, t0), vec![acq(2, 2, 2)]);
        assert_eq!(sp.end_offset(), 6);
        // Drained to 2 in flight: one new offset fits under the new limit.
        sp.acknowledge("m1", 3, 4, &[ACK_ACCEPT], LOCK, t0).unwrap();
        sp.acknowledge("m2", 2, 2, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!(sp.in_flight(), 1);
        assert_eq!(sp.acquire("m2", &[(0, 9)], 100, LOCK, t0), vec![acq(6, 7, 1)]);
        assert_eq!(sp.in_flight(), 3);
        check(&sp);
        // Raised: the window takes more again.
        sp.set_limits(limits(5, 5));
        assert_eq!(sp.acquire("m2", &[(0, 9)], 100, LOCK, t0), vec![acq(8, 9, 1)]);
        check(&sp);
    }

    #[test]
    fn window_limit_stops_acquisition_mid_batch() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, limits(4, 5));
        assert_eq!(sp.acquire("m1", &[(0, 9)], 100, LOCK, t0), vec![acq(0, 3, 1)]);
        assert_eq!(sp.end_offset(), 4);
        assert_eq!(sp.next_fetch_offset(t0), None);
        assert!(sp.acquire("m1", &[(4, 9)], 100, LOCK, t0).is_empty());
        sp.acknowledge("m1", 0, 1, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!(sp.start_offset(), 2);
        assert_eq!(sp.next_fetch_offset(t0), Some(4));
        assert_eq!(sp.acquire("m1", &[(4, 9)], 100, LOCK, t0), vec![acq(4, 5, 1)]);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (2, 6, 4));
        check(&sp);
    }

    #[test]
    fn accept_advances_the_start_offset() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 9)], 100, LOCK, t0);
        sp.acknowledge("m1", 3, 5, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!(sp.start_offset(), 0);
        assert_eq!(state(&sp, 4), DeliveryState::Acknowledged);
        sp.acknowledge("m1", 0, 2, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!(sp.start_offset(), 6);
        assert_eq!(sp.in_flight(), 4);
        sp.acknowledge("m1", 6, 9, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (10, 10, 0));
        assert_eq!(sp.next_deadline(), None);
        check(&sp);
    }

    #[test]
    fn release_makes_records_available_again() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 4)], 100, LOCK, t0);
        sp.acknowledge("m1", 1, 2, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!(state(&sp, 1), DeliveryState::Available);
        assert_eq!(sp.acquired_count(), 3);
        assert_eq!(sp.next_fetch_offset(t0), Some(1));
        // Redelivered with delivery count 2, merged with new offsets only when counts match.
        let got = sp.acquire("m2", &[(0, 4), (5, 6)], 100, LOCK, t0);
        assert_eq!(got, vec![acq(1, 2, 2), acq(5, 6, 1)]);
        assert_eq!(count(&sp, 2), 2);
        assert!(matches!(state(&sp, 0), DeliveryState::Acquired { member, .. } if member == "m1"));
        assert!(matches!(state(&sp, 1), DeliveryState::Acquired { member, .. } if member == "m2"));
        check(&sp);
    }

    #[test]
    fn release_at_the_delivery_limit_archives() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, limits(100, 2));
        sp.acquire("m1", &[(0, 0)], 100, LOCK, t0);
        sp.acknowledge("m1", 0, 0, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!(sp.acquire("m1", &[(0, 0)], 100, LOCK, t0), vec![acq(0, 0, 2)]);
        sp.acknowledge("m1", 0, 0, &[ACK_RELEASE], LOCK, t0).unwrap();
        assert_eq!((sp.start_offset(), sp.end_offset()), (1, 1));
        check(&sp);
    }

    #[test]
    fn reject_and_gap_archive() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 3)], 100, LOCK, t0);
        sp.acknowledge("m1", 0, 0, &[ACK_REJECT], LOCK, t0).unwrap();
        sp.acknowledge("m1", 1, 1, &[ACK_GAP], LOCK, t0).unwrap();
        assert_eq!(sp.start_offset(), 2);
        assert!(sp.record(1).is_none());
        sp.acknowledge("m1", 3, 3, &[ACK_REJECT], LOCK, t0).unwrap();
        assert_eq!(state(&sp, 3), DeliveryState::Archived);
        assert_eq!(sp.start_offset(), 2);
        check(&sp);
    }

    #[test]
    fn per_offset_types() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 3)], 100, LOCK, t0);
        sp.acknowledge("m1", 0, 3, &[ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_GAP], LOCK, t0)
            .unwrap();
        assert_eq!(sp.start_offset(), 1);
        assert_eq!(state(&sp, 1), DeliveryState::Available);
        assert_eq!(count(&sp, 1), 1);
        assert_eq!(state(&sp, 2), DeliveryState::Archived);
        assert_eq!(state(&sp, 3), DeliveryState::Archived);
        assert_eq!(sp.next_fetch_offset(t0), Some(1));
        let snap = sp.snapshot();
        assert_eq!(snap.start_offset, 1);
        assert_eq!(
            snap.batches,
            vec![pb(1, 1, PERSISTED_AVAILABLE, 1), pb(2, 3, PERSISTED_ARCHIVED, 1)]
        );
        check(&sp);
    }

    #[test]
    fn lock_expiry_redelivers_until_the_delivery_limit() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, limits(100, 2));
        sp.acquire("m1", &[(0, 1)], 100, LOCK, t0);
        assert_eq!(sp.next_deadline(), Some(t0 + LOCK));
        assert!(!sp.expire_locks(t0 + Duration::from_secs(29)));
        assert_eq!(sp.acquired_count(), 2);
        let t1 = t0 + Duration::from_secs(31);
        assert_eq!(sp.next_fetch_offset(t1), Some(0));
        assert_eq!(sp.acquired_count(), 0);
        assert!(!sp.expire_locks(t1));
        assert_eq!(sp.acquire("m2", &[(0, 1)], 100, LOCK, t1), vec![acq(0, 1, 2)]);
        // The second delivery reached the limit: expiring archives and the start moves on.
        assert!(sp.expire_locks(t1 + LOCK));
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (2, 2, 0));
        // Two records expired twice each.
        assert_eq!(sp.lock_timeouts(), 4);
        check(&sp);
    }

    #[test]
    fn acknowledging_an_expired_lock_fails() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 1)], 100, LOCK, t0);
        let late = t0 + Duration::from_secs(31);
        assert_eq!(
            sp.acknowledge("m1", 0, 1, &[ACK_ACCEPT], LOCK, late),
            Err(AckError::InvalidRecordState)
        );
        assert_eq!(state(&sp, 0), DeliveryState::Available);
        // A lock is valid until its deadline is reached.
        sp.acquire("m1", &[(0, 1)], 100, LOCK, late);
        assert_eq!(
            sp.acknowledge("m1", 0, 1, &[ACK_ACCEPT], LOCK, late + LOCK),
            Err(AckError::InvalidRecordState)
        );
    }

    #[test]
    fn invalid_record_state_changes_nothing() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 4)], 100, LOCK, t0);
        sp.acknowledge("m1", 0, 0, &[ACK_RELEASE], LOCK, t0).unwrap();
        let before = sp.clone();
        let bad = Err(AckError::InvalidRecordState);
        // Another member's locks.
        assert_eq!(sp.acknowledge("m2", 1, 1, &[ACK_ACCEPT], LOCK, t0), bad);
        // An unacquired (available) offset in the range.
        assert_eq!(sp.acknowledge("m1", 0, 2, &[ACK_ACCEPT], LOCK, t0), bad);
        // Past the window.
        assert_eq!(sp.acknowledge("m1", 3, 7, &[ACK_ACCEPT], LOCK, t0), bad);
        assert_eq!(sp, before);
        // Below the start offset.
        sp.acquire("m1", &[(0, 0)], 100, LOCK, t0);
        sp.acknowledge("m1", 0, 1, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!(sp.start_offset(), 2);
        let before = sp.clone();
        assert_eq!(sp.acknowledge("m1", 1, 2, &[ACK_ACCEPT], LOCK, t0), bad);
        assert_eq!(sp, before);
        check(&sp);
    }

    #[test]
    fn malformed_acknowledgements() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 4)], 100, LOCK, t0);
        let before = sp.clone();
        let req = Err(AckError::InvalidRequest);
        assert_eq!(sp.acknowledge("m1", 3, 2, &[ACK_ACCEPT], LOCK, t0), req);
        assert_eq!(sp.acknowledge("m1", 0, 2, &[ACK_ACCEPT, ACK_ACCEPT], LOCK, t0), req);
        assert_eq!(sp.acknowledge("m1", 0, 2, &[], LOCK, t0), req);
        assert_eq!(sp.acknowledge("m1", 0, 0, &[7], LOCK, t0), req);
        assert_eq!(sp.acknowledge("m1", 0, 0, &[-1], LOCK, t0), req);
        assert_eq!(sp.acknowledge("m1", -1, 0, &[ACK_ACCEPT], LOCK, t0), req);
        assert_eq!(sp.acknowledge("m1", i64::MIN, i64::MAX, &[ACK_ACCEPT], LOCK, t0), req);
        assert_eq!(
            sp.acknowledge("m1", 0, i64::MAX, &[ACK_ACCEPT, ACK_ACCEPT], LOCK, t0),
            req
        );
        // Huge but well-formed: refused by the window check, without iterating.
        let state = Err(AckError::InvalidRecordState);
        assert_eq!(sp.acknowledge("m1", 0, i64::MAX, &[ACK_ACCEPT], LOCK, t0), state);
        assert_eq!(sp.acknowledge("m1", i64::MAX, i64::MAX, &[ACK_ACCEPT], LOCK, t0), state);
        assert_eq!(sp, before);
        assert_eq!(AckError::InvalidRequest.code(), 42);
        assert_eq!(AckError::InvalidRecordState.code(), 121);
    }

    #[test]
    fn release_member_releases_only_its_locks() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, limits(100, 1));
        sp.acquire("m1", &[(0, 2)], 100, LOCK, t0);
        sp.acquire("m2", &[(3, 4)], 100, LOCK, t0);
        assert!(sp.release_member("m2"));
        assert!(!sp.release_member("m2"));
        // Delivery limit 1: released offsets are archived, but 0..2 still hold the start.
        assert_eq!(state(&sp, 3), DeliveryState::Archived);
        assert_eq!((sp.start_offset(), sp.acquired_count()), (0, 3));
        assert!(sp.release_member("m1"));
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (5, 5, 0));

        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 1)], 100, LOCK, t0);
        assert!(sp.release_member("m1"));
        assert_eq!(state(&sp, 0), DeliveryState::Available);
        assert_eq!(sp.next_fetch_offset(t0), Some(0));
        check(&sp);
    }

    #[test]
    fn move_start_drops_offsets_below_the_log_start() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 9)], 100, LOCK, t0);
        sp.acknowledge("m1", 6, 6, &[ACK_ACCEPT], LOCK, t0).unwrap();
        sp.move_start(5);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (5, 10, 5));
        sp.move_start(3);
        assert_eq!(sp.start_offset(), 5);
        // The new start is followed by an acknowledged offset: the start moves past it.
        sp.acknowledge("m1", 5, 5, &[ACK_ACCEPT], LOCK, t0).unwrap();
        assert_eq!(sp.start_offset(), 7);
        sp.move_start(20);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (20, 20, 0));
        assert_eq!(sp.next_fetch_offset(t0), Some(20));
        check(&sp);
    }

    #[test]
    fn reset_clears_the_window() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(0, Limits::default());
        sp.acquire("m1", &[(0, 9)], 100, LOCK, t0);
        sp.reset(50);
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (50, 50, 0));
        assert_eq!(sp.acquired_count(), 0);
        sp.reset(3);
        assert_eq!(sp.next_fetch_offset(t0), Some(3));
        check(&sp);
    }

    #[test]
    fn snapshot_restore_round_trip() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(10, limits(100, 5));
        sp.acquire("m1", &[(10, 19)], 100, LOCK, t0);
        sp.acknowledge("m1", 10, 10, &[ACK_RELEASE], LOCK, t0).unwrap();
        sp.acquire("m2", &[(10, 10)], 100, LOCK, t0);
        sp.acknowledge("m1", 12, 13, &[ACK_ACCEPT], LOCK, t0).unwrap();
        sp.acknowledge("m1", 14, 14, &[ACK_REJECT], LOCK, t0).unwrap();
        sp.acknowledge("m1", 15, 15, &[ACK_RELEASE], LOCK, t0).unwrap();
        let snap = sp.snapshot();
        let expected = vec![
            pb(10, 10, PERSISTED_AVAILABLE, 2),
            pb(11, 11, PERSISTED_AVAILABLE, 1),
            pb(12, 13, PERSISTED_ACKNOWLEDGED, 1),
            pb(14, 14, PERSISTED_ARCHIVED, 1),
            pb(15, 19, PERSISTED_AVAILABLE, 1),
        ];
        assert_eq!(
            snap,
            Persisted {
                start_offset: 10,
                batches: expected
            }
        );
        let restored = SharePartition::restore(&snap, limits(100, 5));
        assert_eq!(restored.snapshot(), snap);
        assert_eq!((restored.start_offset(), restored.end_offset()), (10, 20));
        assert_eq!(restored.acquired_count(), 0);
        assert_eq!(state(&restored, 11), DeliveryState::Available);
        let mut restored = restored;
        assert_eq!(restored.next_fetch_offset(t0), Some(10));
        let got = restored.acquire("m3", &[(10, 19)], 100, LOCK, t0);
        assert_eq!(got, vec![acq(10, 10, 3), acq(11, 11, 2), acq(15, 19, 2)]);
        check(&restored);

        let empty = SharePartition::new(7, Limits::default()).snapshot();
        assert_eq!(
            empty,
            Persisted {
                start_offset: 7,
                batches: vec![]
            }
        );
        let sp = SharePartition::restore(&empty, Limits::default());
        assert_eq!((sp.start_offset(), sp.end_offset()), (7, 7));
    }

    #[test]
    fn delivery_complete_count_counts_done_offsets_from_the_start() {
        let persisted = Persisted {
            start_offset: 12,
            batches: vec![
                pb(10, 13, PERSISTED_ACKNOWLEDGED, 1),
                pb(14, 15, PERSISTED_AVAILABLE, 2),
                pb(16, 16, PERSISTED_ARCHIVED, 5),
                pb(17, 20, PERSISTED_ACKNOWLEDGED, 1),
            ],
        };
        // 12-13, 16 and 17-20.
        assert_eq!(persisted.delivery_complete_count(), 7);
        let hostile = Persisted {
            start_offset: 0,
            batches: vec![pb(0, i64::MAX, PERSISTED_ARCHIVED, 1), pb(5, 1, PERSISTED_ARCHIVED, 1)],
        };
        assert_eq!(hostile.delivery_complete_count(), i64::MAX);
    }

    #[test]
    fn restore_fills_holes_and_skips_below_the_start() {
        let persisted = Persisted {
            start_offset: 10,
            batches: vec![
                pb(5, 12, PERSISTED_ACKNOWLEDGED, 1),
                pb(15, 16, PERSISTED_ARCHIVED, 1),
                pb(20, 20, PERSISTED_AVAILABLE, 3),
            ],
        };
        let sp = SharePartition::restore(&persisted, Limits::default());
        assert_eq!((sp.start_offset(), sp.end_offset(), sp.in_flight()), (13, 21, 8));
        assert_eq!(count(&sp, 14), 0);
        assert_eq!(state(&sp, 17), DeliveryState::Available);
        let expected = vec![
            pb(13, 14, PERSISTED_AVAILABLE, 0),
            pb(15, 16, PERSISTED_ARCHIVED, 1),
            pb(17, 19, PERSISTED_AVAILABLE, 0),
            pb(20, 20, PERSISTED_AVAILABLE, 3),
        ];
        assert_eq!(
            sp.snapshot(),
            Persisted {
                start_offset: 13,
                batches: expected
            }
        );
        check(&sp);
    }

    #[test]
    fn restore_of_hostile_state_is_bounded() {
        // An enormous done range at the start is skipped without iterating.
        let done = Persisted {
            start_offset: 0,
            batches: vec![pb(0, i64::MAX - 1, PERSISTED_ACKNOWLEDGED, 1)],
        };
        let sp = SharePartition::restore(&done, Limits::default());
        assert_eq!(
            (sp.start_offset(), sp.end_offset(), sp.in_flight()),
            (i64::MAX, i64::MAX, 0)
        );
        // An enormous available range is cut at max_in_flight.
        let open = Persisted {
            start_offset: 0,
            batches: vec![pb(0, i64::MAX, PERSISTED_AVAILABLE, -3), pb(5, 9, 9, 1)],
        };
        let sp = SharePartition::restore(&open, limits(4, 5));
        assert_eq!((sp.start_offset(), sp.end_offset()), (0, 4));
        assert_eq!(sp.snapshot().batches, vec![pb(0, 3, PERSISTED_AVAILABLE, 0)]);
        check(&sp);
    }

    #[test]
    fn offsets_near_i64_max_do_not_overflow() {
        let t0 = Instant::now();
        let mut sp = SharePartition::new(i64::MAX - 2, Limits::default());
        let got = sp.acquire("m1", &[(i64::MAX - 2, i64::MAX)], 100, Duration::MAX, t0);
        assert_eq!(got, vec![acq(i64::MAX - 2, i64::MAX - 1, 1)]);
        assert_eq!(sp.end_offset(), i64::MAX);
        assert!(sp.next_deadline().is_some_and(|d| d > t0));
        sp.acknowledge("m1", i64::MAX - 2, i64::MAX - 1, &[ACK_ACCEPT], LOCK, t0)
            .unwrap();
        assert_eq!((sp.start_offset(), sp.end_offset()), (i64::MAX, i64::MAX));
        check(&sp);
    }
}
