//! Producer state of one partition (Kafka's `ProducerStateManager` and `ProducerAppendInfo`):
//! for each producer id, its epoch and the sequence ranges and offsets of its last five batches,
//! which make idempotent produce possible (a retried batch is found and answered with its
//! original offsets), and the transactions open on this partition, which give the last stable
//! offset (LSO) and the aborted-transaction index read_committed consumers need.
//!
//! The state is derived from the log only: `Log::open` loads the latest `<offset>.snapshot`
//! (Kafka's file layout) and replays the batches after it, so a replica that holds the log holds
//! the state. Snapshots are written when a segment rolls and at clean shutdown.
//!
//! Aborted transactions are kept in memory (sorted by their last offset, which is the order the
//! abort markers are written in) and in a `.txnindex` file beside the segment that holds the
//! abort marker, in Kafka's 34-byte entry layout.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::{self, BatchHeader, HEADER_LEN};
use super::checkpoint::{TEMP_SUFFIX, sync_dir};
use super::segment::file_name;
use crate::error::{Error, Result};

/// A batch without a producer (Kafka's `RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;
/// Batches remembered per producer for duplicate detection (Kafka's
/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`, and the clients' max in-flight requests).
pub const BATCHES_KEPT: usize = 5;

/// Version 2 keeps every batch duplicate detection remembers; version 1 (Kafka's layout, still
/// read) kept only the last one, so after a restart a leader could not recognise a retry of
/// any earlier in-flight batch and answered it OUT_OF_ORDER_SEQUENCE_NUMBER, which is fatal
/// to librdkafka's idempotent producer (seen in rolling restarts: the node that wrote the
/// batches stopped before acknowledging them, and led again after the producer's retries).
const SNAPSHOT_VERSION: i16 = 2;
const SNAPSHOT_VERSION_LAST_BATCH_ONLY: i16 = 1;
/// version i16, crc u32, entry count i32.
const SNAPSHOT_HEADER_LEN: usize = 10;
/// producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch,
/// current transaction first offset; version 2 follows it with a count (u8) and the batches
/// before the last one (`SNAPSHOT_BATCH_LEN` each, oldest first).
const SNAPSHOT_ENTRY_LEN: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
/// first sequence, last sequence, first offset, last offset, timestamp.
const SNAPSHOT_BATCH_LEN: usize = 4 + 4 + 8 + 8 + 8;
const TXN_INDEX_ENTRY_LEN: usize = 34;

/// One batch a producer wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub timestamp: i64,
}

/// What a partition knows of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub epoch: i16,
    /// The last batches, oldest first, at most `BATCHES_KEPT`, all of `epoch`.
    pub batches: VecDeque<BatchMeta>,
    /// The coordinator epoch of the last transaction marker.
    pub coordinator_epoch: i32,
    /// The max timestamp of the producer's last batch (expiration counts from it, as Kafka).
    pub last_timestamp: i64,
    /// The first offset of the producer's open transaction on this partition.
    pub current_txn_first_offset: Option<i64>,
}

impl ProducerEntry {
    fn empty() -> ProducerEntry {
        ProducerEntry {
            epoch: NO_PRODUCER_EPOCH,
            batches: VecDeque::new(),
            coordinator_epoch: -1,
            last_timestamp: -1,
            current_txn_first_offset: None,
        }
    }

    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(NO_SEQUENCE, |b| b.last_seq)
    }

    pub fn last_offset(&self) -> i64 {
        self.batches.back().map_or(-1, |b| b.last_offset)
    }

    fn add_batch(&mut self, epoch: i16, meta: BatchMeta) {
        if epoch != self.epoch {
            // A new epoch starts the sequence over: older batches can no longer be duplicates.
            self.batches.clear();
            self.epoch = epoch;
        }
        if self.batches.len() == BATCHES_KEPT {
            self.batches.pop_front();
        }
        self.batches.push_back(meta);
        self.last_timestamp = meta.timestamp;
    }

    fn duplicate_of(&self, epoch: i16, first_seq: i32, last_seq: i32) -> Option<BatchMeta> {
        if epoch != self.epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
            .copied()
    }
}

/// An aborted transaction on this partition: a read_committed consumer drops the producer's
/// records in `[first_offset, last_offset]` (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The offset of the abort marker.
    pub last_offset: i64,
    /// The LSO once this transaction completed.
    pub last_stable_offset: i64,
}

/// A batch's producer fields, as `check` and `apply` need them.
#[derive(Debug, Clone, Copy)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub transactional: bool,
    /// For a control batch: the marker it carries.
    pub marker: Option<Marker>,
}

impl ProducerBatch {
    pub(crate) fn from_header(header: &BatchHeader, marker: Option<Marker>) -> ProducerBatch {
        ProducerBatch {
            producer_id: header.producer_id,
            epoch: header.producer_epoch,
            base_seq: header.base_sequence,
            first_offset: header.base_offset,
            last_offset: header.last_offset(),
            max_timestamp: header.max_timestamp,
            transactional: header.is_transactional(),
            marker,
        }
    }

    fn last_seq(&self) -> i32 {
        // A trusted file (after a clean shutdown) may still hold a damaged header: the span is
        // taken as it is, in 64 bits, so no header makes this overflow.
        wrap_sequence(i64::from(self.base_seq) + (self.last_offset - self.first_offset))
    }
}

/// A transaction marker (the record of a control batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// What an append must do about its producers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Append,
    /// A retry of a batch already in the log: answer with its offsets, append nothing.
    Duplicate {
        first_offset: i64,
        last_offset: i64,
    },
}

/// Where the append comes from: a client's produce is validated; the broker's own writes
/// (replay at recovery, later replication) are applied as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Client,
    Coordinator,
    Replay,
}

/// Sequence numbers wrap at i32::MAX to 0 (Kafka's `DefaultRecordBatch.incrementSequence`).
/// For valid input it is that function; any input, a damaged one included, gives a sequence in
/// `0..=i32::MAX` without overflowing.
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    wrap_sequence(i64::from(sequence) + i64::from(increment))
}

fn wrap_sequence(sequence: i64) -> i32 {
    // i32::MAX + 1 sequences, 0..=i32::MAX; the result always fits.
    sequence.rem_euclid(i64::from(i32::MAX) + 1) as i32
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// The producer state of one partition.
#[derive(Debug, Default)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions by first offset (the smallest bounds the LSO).
    ongoing: BTreeMap<i64, i64>,
    /// Aborted transactions by increasing last offset.
    aborted: Vec<AbortedTxn>,
}

impl ProducerState {
    pub fn producers(&self) -> &HashMap<i64, ProducerEntry> {
        &self.producers
    }

    pub fn producer(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// The first offset of the oldest open transaction, if any.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// Checks a client's batches (with the offsets they would get) against the state, without
    /// changing it: the first error refuses the whole append; a retried batch is reported as a
    /// duplicate (Kafka's `UnifiedLog.analyzeAndValidateProducerState`).
    pub fn check(&self, batches: &[ProducerBatch], origin: Origin) -> Result<Verdict> {
        // Several batches of one producer in one request are checked one after the other.
        let mut staged: HashMap<i64, ProducerEntry> = HashMap::new();
        for b in batches {
            if b.producer_id == NO_PRODUCER_ID {
                if b.transactional {
                    return Err(Error::InvalidRecord(
                        "a transactional batch without a producer id".into(),
                    ));
                }
                continue;
            }
            let current = staged
                .get(&b.producer_id)
                .or_else(|| self.producers.get(&b.producer_id))
                .cloned()
                .unwrap_or_else(ProducerEntry::empty);
            if b.marker.is_none()
                && origin == Origin::Client
                && let Some(found) = current.duplicate_of(b.epoch, b.base_seq, b.last_seq())
            {
                return Ok(Verdict::Duplicate {
                    first_offset: found.first_offset,
                    last_offset: found.last_offset,
                });
            }
            let mut next = current.clone();
            check_one(&current, b, origin)?;
            apply_one(&mut next, b);
            staged.insert(b.producer_id, next);
        }
        Ok(Verdict::Append)
    }

    /// Records batches written to the log (checked before by `check`, or replayed). Returns the
    /// transactions an abort marker among them completed, for the transaction index.
    pub fn apply(&mut self, batches: &[ProducerBatch]) -> Vec<AbortedTxn> {
        let mut aborted = Vec::new();
        for b in batches {
            if b.producer_id == NO_PRODUCER_ID {
                continue;
            }
            let entry = self.producers.entry(b.producer_id).or_insert_with(ProducerEntry::empty);
            let open_before = entry.current_txn_first_offset;
            apply_one(entry, b);
            let open_after = entry.current_txn_first_offset;
            match (open_before, open_after) {
                (None, Some(first)) => {
                    self.ongoing.insert(first, b.producer_id);
                }
                (Some(first), None) => {
                    self.ongoing.remove(&first);
                    if b.marker.is_some_and(|m| !m.commit) {
                        let last_stable_offset = self.first_unstable_offset().unwrap_or(b.last_offset + 1);
                        aborted.push(AbortedTxn {
                            producer_id: b.producer_id,
                            first_offset: first,
                            last_offset: b.last_offset,
                            last_stable_offset,
                        });
                    }
                }
                _ => {}
            }
        }
        self.aborted.extend_from_slice(&aborted);
        aborted
    }

    /// The aborted transactions a read_committed fetch of `[from, upper)` must tell the client
    /// about (Kafka's `collectAbortedTransactions`).
    pub fn aborted_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        aborted_in(&self.aborted, from, upper)
    }

    /// Removes producers idle for `expiration_ms` with no open transaction (Kafka's
    /// `removeExpiredProducers`, `producer.id.expiration.ms`). Returns how many went.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Forgets aborted transactions wholly below the log start (their segments are gone).
    pub fn on_log_start_moved(&mut self, log_start_offset: i64) {
        self.aborted.retain(|a| a.last_offset >= log_start_offset);
    }

    /// Forgets aborted transactions whose markers are below `offset`: the cleaner removed
    /// their records.
    pub fn forget_aborted_below(&mut self, offset: i64) {
        self.aborted.retain(|a| a.last_offset >= offset);
    }

    /// Adds aborted transactions read from `.txnindex` files at open.
    pub fn load_aborted(&mut self, mut entries: Vec<AbortedTxn>) {
        entries.sort_by_key(|a| (a.last_offset, a.producer_id, a.first_offset));
        entries.dedup();
        self.aborted = entries;
    }

    pub fn last_aborted_offset(&self) -> i64 {
        self.aborted.last().map_or(-1, |a| a.last_offset)
    }

    /// The snapshot file's bytes (Kafka's `ProducerStateManager.writeSnapshot` layout: version
    /// i16, crc32c u32 of the rest, then the entries; each producer's last batch only).
    pub fn encode_snapshot(&self) -> Bytes {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        let mut body = BytesMut::with_capacity(4 + ids.len() * SNAPSHOT_ENTRY_LEN);
        body.put_i32(ids.len() as i32);
        for id in ids {
            let e = &self.producers[id];
            let last = e.batches.back();
            body.put_i64(*id);
            body.put_i16(e.epoch);
            body.put_i32(last.map_or(NO_SEQUENCE, |b| b.last_seq));
            body.put_i64(last.map_or(-1, |b| b.last_offset));
            body.put_i32(last.map_or(0, |b| (b.last_offset - b.first_offset) as i32));
            body.put_i64(e.last_timestamp);
            body.put_i32(e.coordinator_epoch);
            body.put_i64(e.current_txn_first_offset.unwrap_or(-1));
            let earlier = e.batches.len().saturating_sub(1).min(BATCHES_KEPT - 1);
            body.put_u8(earlier as u8);
            for b in e.batches.iter().take(earlier) {
                body.put_i32(b.first_seq);
                body.put_i32(b.last_seq);
                body.put_i64(b.first_offset);
                body.put_i64(b.last_offset);
                body.put_i64(b.timestamp);
            }
        }
        let mut out = BytesMut::with_capacity(6 + body.len());
        out.put_i16(SNAPSHOT_VERSION);
        out.put_u32(crate::crc::crc32c(&body));
        out.put_slice(&body);
        out.freeze()
    }

    /// Producer state from a snapshot file's bytes (aborted transactions come from the
    /// `.txnindex` files instead).
    pub fn decode_snapshot(bytes: &[u8], path: &Path) -> Result<ProducerState> {
        let corrupt = |why: &str| Error::CorruptBatch(format!("producer snapshot {}: {why}", path.display()));
        if bytes.len() < SNAPSHOT_HEADER_LEN {
            return Err(corrupt("shorter than its header"));
        }
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != SNAPSHOT_VERSION && version != SNAPSHOT_VERSION_LAST_BATCH_ONLY {
            return Err(corrupt(&format!("version {version}")));
        }
        let crc = u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
        if crate::crc::crc32c(&bytes[6..]) != crc {
            return Err(corrupt("CRC mismatch"));
        }
        let count = i32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
        let count = usize::try_from(count).map_err(|_| corrupt("negative entry count"))?;
        let mut rest = &bytes[SNAPSHOT_HEADER_LEN..];
        if version == SNAPSHOT_VERSION_LAST_BATCH_ONLY && rest.len() != count.saturating_mul(SNAPSHOT_ENTRY_LEN) {
            return Err(corrupt("length does not match the entry count"));
        }
        let mut state = ProducerState::default();
        for _ in 0..count {
            let Some((e, after)) = rest.split_at_checked(SNAPSHOT_ENTRY_LEN) else {
                return Err(corrupt("an entry runs past the end"));
            };
            rest = after;
            // Version 2: the batches before the last one.
            let mut earlier = Vec::new();
            if version == SNAPSHOT_VERSION {
                let Some((&n, after)) = rest.split_first() else {
                    return Err(corrupt("an entry's batch count runs past the end"));
                };
                if usize::from(n) >= BATCHES_KEPT {
                    return Err(corrupt(&format!("{n} earlier batches, more than are kept")));
                }
                let Some((batches, after)) = after.split_at_checked(usize::from(n) * SNAPSHOT_BATCH_LEN) else {
                    return Err(corrupt("an entry's batches run past the end"));
                };
                rest = after;
                for b in batches.chunks_exact(SNAPSHOT_BATCH_LEN) {
                    let i64_at = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap_or_default());
                    let i32_at = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap_or_default());
                    earlier.push(BatchMeta {
                        first_seq: i32_at(0),
                        last_seq: i32_at(4),
                        first_offset: i64_at(8),
                        last_offset: i64_at(16),
                        timestamp: i64_at(24),
                    });
                }
            }
            let i64_at = |at: usize| i64::from_be_bytes(e[at..at + 8].try_into().unwrap_or_default());
            let i32_at = |at: usize| i32::from_be_bytes(e[at..at + 4].try_into().unwrap_or_default());
            let producer_id = i64_at(0);
            let epoch = i16::from_be_bytes([e[8], e[9]]);
            let last_seq = i32_at(10);
            let last_offset = i64_at(14);
            let offset_delta = i32_at(22);
            let timestamp = i64_at(26);
            let coordinator_epoch = i32_at(34);
            let txn_first = i64_at(38);
            let mut entry = ProducerEntry::empty();
            entry.epoch = epoch;
            entry.coordinator_epoch = coordinator_epoch;
            entry.last_timestamp = timestamp;
            entry.batches.extend(earlier);
            if last_offset >= 0 {
                entry.batches.push_back(BatchMeta {
                    first_seq: last_seq.wrapping_sub(offset_delta).max(0),
                    last_seq,
                    first_offset: last_offset - i64::from(offset_delta),
                    last_offset,
                    timestamp,
                });
            }
            if txn_first >= 0 {
                entry.current_txn_first_offset = Some(txn_first);
                state.ongoing.insert(txn_first, producer_id);
            }
            state.producers.insert(producer_id, entry);
        }
        if !rest.is_empty() {
            return Err(corrupt("bytes after the last entry"));
        }
        Ok(state)
    }

    /// Drops what lies at or after `offset` (a log truncated by recovery): producers whose last
    /// batch is gone are forgotten, as are transactions opened there.
    pub fn truncate_to(&mut self, offset: i64) {
        self.producers.retain(|_, e| {
            e.batches.retain(|b| b.last_offset < offset);
            !e.batches.is_empty() || e.current_txn_first_offset.is_some_and(|f| f < offset)
        });
        for e in self.producers.values_mut() {
            if e.current_txn_first_offset.is_some_and(|f| f >= offset) {
                e.current_txn_first_offset = None;
            }
        }
        self.ongoing.retain(|first, _| *first < offset);
        self.aborted.retain(|a| a.last_offset < offset);
    }
}

/// The transactions of `aborted` (by increasing last offset) overlapping `[from, upper)`.
pub(crate) fn aborted_in(aborted: &[AbortedTxn], from: i64, upper: i64) -> Vec<AbortedTxn> {
    let start = aborted.partition_point(|a| a.last_offset < from);
    aborted[start..]
        .iter()
        .filter(|a| a.first_offset < upper)
        .copied()
        .collect()
}

fn check_one(current: &ProducerEntry, b: &ProducerBatch, origin: Origin) -> Result<()> {
    if origin == Origin::Replay {
        return Ok(());
    }
    if let Some(marker) = b.marker {
        // Markers come from the coordinator with the producer's current epoch or, after a
        // fence, a newer one (Kafka's `appendEndTxnMarker`, transaction version 0/1).
        if b.epoch < current.epoch {
            return Err(Error::InvalidProducerEpoch {
                producer_id: b.producer_id,
                epoch: b.epoch,
                current: current.epoch,
            });
        }
        if current.coordinator_epoch > marker.coordinator_epoch {
            return Err(Error::TransactionCoordinatorFenced {
                producer_id: b.producer_id,
                coordinator_epoch: marker.coordinator_epoch,
                current: current.coordinator_epoch,
            });
        }
        return Ok(());
    }
    if b.epoch < current.epoch {
        // Since Kafka 2.7 a stale epoch on produce is INVALID_PRODUCER_EPOCH (retriable by
        // aborting), not PRODUCER_FENCED (ProducerAppendInfo.checkProducerEpoch).
        return Err(Error::InvalidProducerEpoch {
            producer_id: b.producer_id,
            epoch: b.epoch,
            current: current.epoch,
        });
    }
    if origin == Origin::Client {
        if b.base_seq < 0 {
            return Err(Error::InvalidRecord(format!(
                "batch of producer {} has no sequence number",
                b.producer_id
            )));
        }
        if b.epoch != current.epoch {
            // A new epoch (KIP-360 bump, or a new producer) starts at sequence 0; a producer the
            // partition does not know (its state expired, or its records were deleted) may go
            // on with any sequence, as in Kafka.
            if b.base_seq != 0 && current.epoch != NO_PRODUCER_EPOCH {
                return Err(Error::OutOfOrderSequence {
                    producer_id: b.producer_id,
                    sequence: b.base_seq,
                    expected: 0,
                });
            }
        } else if !current.batches.is_empty() && !in_sequence(current.last_seq(), b.base_seq) {
            return Err(Error::OutOfOrderSequence {
                producer_id: b.producer_id,
                sequence: b.base_seq,
                expected: increment_sequence(current.last_seq(), 1),
            });
        }
    }
    if current.current_txn_first_offset.is_some() && !b.transactional {
        return Err(Error::InvalidTxnState(format!(
            "non-transactional write by producer {} while its transaction is open",
            b.producer_id
        )));
    }
    Ok(())
}

fn apply_one(entry: &mut ProducerEntry, b: &ProducerBatch) {
    match b.marker {
        Some(marker) => {
            if b.epoch > entry.epoch {
                entry.batches.clear();
                entry.epoch = b.epoch;
            }
            entry.coordinator_epoch = marker.coordinator_epoch;
            entry.current_txn_first_offset = None;
            entry.last_timestamp = entry.last_timestamp.max(b.max_timestamp);
        }
        None => {
            // A batch without a sequence (Kafka's coordinator writes) keeps the epoch only.
            if b.base_seq >= 0 {
                entry.add_batch(
                    b.epoch,
                    BatchMeta {
                        first_seq: b.base_seq,
                        last_seq: b.last_seq(),
                        first_offset: b.first_offset,
                        last_offset: b.last_offset,
                        timestamp: b.max_timestamp,
                    },
                );
            } else {
                if b.epoch != entry.epoch {
                    entry.batches.clear();
                }
                entry.epoch = b.epoch;
                entry.last_timestamp = b.max_timestamp;
            }
            if b.transactional && entry.current_txn_first_offset.is_none() {
                entry.current_txn_first_offset = Some(b.first_offset);
            }
        }
    }
}

/// The marker a control batch carries: its first record's key is `version i16, type i16`
/// (0 abort, 1 commit) and its value `version i16, coordinator epoch i32` (Kafka's
/// `EndTransactionMarker`). None for other control records or an unreadable batch.
pub fn read_marker(batch: &[u8]) -> Option<Marker> {
    let mut at = HEADER_LEN;
    let _length = read_varint(batch, &mut at)?;
    at += 1; // attributes
    let _timestamp_delta = read_varint(batch, &mut at)?;
    let _offset_delta = read_varint(batch, &mut at)?;
    let key_len = read_varint(batch, &mut at)?;
    if key_len < 4 {
        return None;
    }
    let key = batch.get(at..at + key_len as usize)?;
    let kind = i16::from_be_bytes([key[2], key[3]]);
    at += key_len as usize;
    let value_len = read_varint(batch, &mut at)?;
    let coordinator_epoch = if value_len >= 6 {
        let v = batch.get(at..at + 6)?;
        i32::from_be_bytes([v[2], v[3], v[4], v[5]])
    } else {
        -1
    };
    match kind {
        0 => Some(Marker {
            commit: false,
            coordinator_epoch,
        }),
        1 => Some(Marker {
            commit: true,
            coordinator_epoch,
        }),
        _ => None,
    }
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

fn put_varint(buf: &mut BytesMut, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// A control batch holding one transaction marker (Kafka's `MemoryRecords.withEndTransactionMarker`):
/// transactional and control attributes, the producer's id and epoch, no sequence.
pub fn encode_marker(producer_id: i64, epoch: i16, marker: Marker, timestamp: i64) -> Bytes {
    let mut record = BytesMut::with_capacity(32);
    record.put_u8(0); // attributes
    put_varint(&mut record, 0); // timestamp delta
    put_varint(&mut record, 0); // offset delta
    put_varint(&mut record, 4);
    record.put_i16(0); // key version
    record.put_i16(i16::from(marker.commit));
    put_varint(&mut record, 6);
    record.put_i16(0); // value version
    record.put_i32(marker.coordinator_epoch);
    put_varint(&mut record, 0); // headers
    let mut out = BytesMut::with_capacity(HEADER_LEN + 1 + record.len());
    out.put_i64(0); // base offset, set by the log
    out.put_i32(0); // batch length, below
    out.put_i32(-1); // partition leader epoch, set by the log
    out.put_i8(batch::MAGIC_V2);
    out.put_u32(0); // crc, below
    out.put_i16(batch::TRANSACTIONAL | batch::CONTROL);
    out.put_i32(0); // last offset delta
    out.put_i64(timestamp);
    out.put_i64(timestamp);
    out.put_i64(producer_id);
    out.put_i16(epoch);
    out.put_i32(NO_SEQUENCE);
    out.put_i32(1);
    put_varint(&mut out, record.len() as i64);
    out.put_slice(&record);
    let length = (out.len() - batch::LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crate::crc::crc32c(&out[batch::ATTRIBUTES..]);
    out[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}

// ---- files -------------------------------------------------------------------------------

fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(file_name(offset, "snapshot"))
}

/// The offsets of the snapshot files in `dir`, increasing.
pub fn list_snapshots(dir: &Path) -> Result<Vec<i64>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::storage("list", dir, e))?;
    let mut offsets = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::storage("list", dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".snapshot")
            && stem.len() == 20
            && let Ok(offset) = stem.parse::<i64>()
        {
            offsets.push(offset);
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

/// Writes the state as `<offset>.snapshot` (through a temporary file and a rename, so a crash
/// leaves the old snapshot or the new one, never half of one).
pub fn write_snapshot(dir: &Path, offset: i64, state: &ProducerState) -> Result<()> {
    let path = snapshot_path(dir, offset);
    let mut temp = path.clone().into_os_string();
    temp.push(TEMP_SUFFIX);
    let temp = PathBuf::from(temp);
    let bytes = state.encode_snapshot();
    let mut file = std::fs::File::create(&temp).map_err(|e| Error::storage("create", &temp, e))?;
    file.write_all(&bytes).map_err(|e| Error::storage("write", &temp, e))?;
    file.sync_data().map_err(|e| Error::storage("fsync", &temp, e))?;
    std::fs::rename(&temp, &path).map_err(|e| Error::storage("rename", &temp, e))?;
    sync_dir(dir)
}

pub fn read_snapshot(dir: &Path, offset: i64) -> Result<ProducerState> {
    let path = snapshot_path(dir, offset);
    let bytes = std::fs::read(&path).map_err(|e| Error::storage("read", &path, e))?;
    ProducerState::decode_snapshot(&bytes, &path)
}

pub fn delete_snapshot(dir: &Path, offset: i64) -> Result<()> {
    let path = snapshot_path(dir, offset);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::storage("delete", &path, e)),
        _ => Ok(()),
    }
}

/// Appends an aborted transaction to the `.txnindex` of the segment at `segment_base`.
pub fn append_txn_index(dir: &Path, segment_base: i64, txn: &AbortedTxn) -> Result<()> {
    let path = dir.join(file_name(segment_base, "txnindex"));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::storage("open", &path, e))?;
    file.write_all(&encode_txn_index(std::slice::from_ref(txn)))
        .map_err(|e| Error::storage("write", &path, e))
}

/// Kafka's `.txnindex` entries: version i16, producer id, first offset, last offset, LSO.
fn encode_txn_index(entries: &[AbortedTxn]) -> BytesMut {
    let mut out = BytesMut::with_capacity(entries.len() * TXN_INDEX_ENTRY_LEN);
    for txn in entries {
        out.put_i16(0);
        out.put_i64(txn.producer_id);
        out.put_i64(txn.first_offset);
        out.put_i64(txn.last_offset);
        out.put_i64(txn.last_stable_offset);
    }
    out
}

/// The aborted transactions in the `.txnindex` of the segment at `segment_base` (a torn last
/// entry is ignored).
pub fn read_txn_index(dir: &Path, segment_base: i64) -> Result<Vec<AbortedTxn>> {
    let path = dir.join(file_name(segment_base, "txnindex"));
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::storage("read", &path, e)),
    };
    Ok(bytes
        .chunks_exact(TXN_INDEX_ENTRY_LEN)
        .map(|e| {
            let at = |i: usize| i64::from_be_bytes(e[i..i + 8].try_into().unwrap_or_default());
            AbortedTxn {
                producer_id: at(2),
                first_offset: at(10),
                last_offset: at(18),
                last_stable_offset: at(26),
            }
        })
        .collect())
}

/// Rewrites the `.txnindex` of a segment with `entries` (recovery or a truncation cut the
/// segment short), replacing the file in one rename: a crash leaves the old entries or the
/// new ones, never a file without the entries that stay (which would show aborted records
/// to read_committed consumers).
pub fn rewrite_txn_index(dir: &Path, segment_base: i64, entries: &[AbortedTxn]) -> Result<()> {
    let path = dir.join(file_name(segment_base, "txnindex"));
    if entries.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::storage("delete", &path, e)),
            _ => Ok(()),
        };
    }
    super::checkpoint::write_atomically(&path, &encode_txn_index(entries), true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn data(pid: i64, epoch: i16, seq: i32, first: i64, count: i64) -> ProducerBatch {
        ProducerBatch {
            producer_id: pid,
            epoch,
            base_seq: seq,
            first_offset: first,
            last_offset: first + count - 1,
            max_timestamp: 1000 + first,
            transactional: false,
            marker: None,
        }
    }

    fn txn(pid: i64, epoch: i16, seq: i32, first: i64, count: i64) -> ProducerBatch {
        ProducerBatch {
            transactional: true,
            ..data(pid, epoch, seq, first, count)
        }
    }

    fn marker(pid: i64, epoch: i16, offset: i64, commit: bool) -> ProducerBatch {
        ProducerBatch {
            producer_id: pid,
            epoch,
            base_seq: NO_SEQUENCE,
            first_offset: offset,
            last_offset: offset,
            max_timestamp: 5000,
            transactional: true,
            marker: Some(Marker {
                commit,
                coordinator_epoch: 0,
            }),
        }
    }

    fn appended(state: &mut ProducerState, b: ProducerBatch) {
        assert_eq!(state.check(&[b], Origin::Client).unwrap(), Verdict::Append);
        state.apply(&[b]);
    }

    #[test]
    fn a_retried_batch_among_the_last_five_is_a_duplicate_with_its_original_offsets() {
        // Kafka: ProducerStateEntry.findDuplicateBatch over the last 5 batches.
        let mut s = ProducerState::default();
        for i in 0..6 {
            appended(&mut s, data(7, 0, i * 10, i64::from(i) * 10, 10));
        }
        let retry = data(7, 0, 10, 999, 10);
        assert_eq!(
            s.check(&[retry], Origin::Client).unwrap(),
            Verdict::Duplicate {
                first_offset: 10,
                last_offset: 19
            }
        );
        // The first batch fell out of the five: its retry is out of order, not a duplicate.
        let too_old = data(7, 0, 0, 999, 10);
        assert!(matches!(
            s.check(&[too_old], Origin::Client),
            Err(Error::OutOfOrderSequence { expected: 60, .. })
        ));
    }

    #[test]
    fn a_sequence_gap_is_out_of_order_and_a_stale_epoch_is_refused() {
        let mut s = ProducerState::default();
        appended(&mut s, data(1, 3, 0, 0, 5));
        assert!(matches!(
            s.check(&[data(1, 3, 6, 5, 1)], Origin::Client),
            Err(Error::OutOfOrderSequence { .. })
        ));
        assert!(matches!(
            s.check(&[data(1, 2, 5, 5, 1)], Origin::Client),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        // KIP-360: a bumped epoch starts over at 0, and only at 0.
        assert!(matches!(
            s.check(&[data(1, 4, 5, 5, 1)], Origin::Client),
            Err(Error::OutOfOrderSequence { .. })
        ));
        appended(&mut s, data(1, 4, 0, 5, 1));
        assert_eq!(s.producer(1).unwrap().epoch, 4);
    }

    #[test]
    fn an_unknown_producer_may_continue_at_any_sequence() {
        // Kafka accepts any sequence when it has no epoch for the producer (state expired or
        // records removed by retention).
        let s = ProducerState::default();
        assert_eq!(
            s.check(&[data(9, 0, 4711, 0, 1)], Origin::Client).unwrap(),
            Verdict::Append
        );
    }

    #[test]
    fn sequences_wrap_at_i32_max() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 7), 12);
        // Damaged headers must not overflow.
        assert_eq!(increment_sequence(0, -1), i32::MAX);
        assert_eq!(increment_sequence(i32::MIN, i32::MIN), 0);
        assert_eq!(increment_sequence(i32::MAX, i32::MAX), i32::MAX - 1);
        let mut s = ProducerState::default();
        appended(&mut s, data(1, 0, i32::MAX - 4, 0, 5));
        assert_eq!(s.producer(1).unwrap().last_seq(), i32::MAX);
        appended(&mut s, data(1, 0, 0, 5, 1));
        assert!(matches!(
            s.check(&[data(1, 0, 2, 6, 1)], Origin::Client),
            Err(Error::OutOfOrderSequence { .. })
        ));
    }

    #[test]
    fn transactions_bound_the_lso_and_aborts_are_indexed() {
        let mut s = ProducerState::default();
        appended(&mut s, txn(1, 0, 0, 10, 2));
        appended(&mut s, txn(2, 0, 0, 12, 2));
        assert_eq!(s.first_unstable_offset(), Some(10));
        // A non-transactional write while the transaction is open is refused.
        assert!(matches!(
            s.check(&[data(1, 0, 2, 14, 1)], Origin::Client),
            Err(Error::InvalidTxnState(_))
        ));
        let aborted = s.apply(&[marker(1, 0, 14, false)]);
        assert_eq!(
            aborted,
            vec![AbortedTxn {
                producer_id: 1,
                first_offset: 10,
                last_offset: 14,
                last_stable_offset: 12
            }]
        );
        assert_eq!(s.first_unstable_offset(), Some(12));
        assert!(s.apply(&[marker(2, 0, 15, true)]).is_empty());
        assert_eq!(s.first_unstable_offset(), None);
        assert_eq!(s.aborted_between(0, 100).len(), 1);
        assert_eq!(s.aborted_between(15, 100).len(), 0);
        assert_eq!(s.aborted_between(0, 10).len(), 0);
        // A marker with an older epoch than the producer's is refused; a fence bumps it.
        appended(&mut s, data(3, 5, 0, 16, 1));
        assert!(matches!(
            s.check(&[marker(3, 4, 17, false)], Origin::Coordinator),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        s.apply(&[marker(3, 6, 17, false)]);
        assert_eq!(s.producer(3).unwrap().epoch, 6);
    }

    #[test]
    fn snapshots_round_trip_and_detect_corruption() {
        let mut s = ProducerState::default();
        appended(&mut s, data(1, 2, 0, 0, 3));
        appended(&mut s, txn(2, 0, 7, 3, 2));
        let bytes = s.encode_snapshot();
        let back = ProducerState::decode_snapshot(&bytes, Path::new("x")).unwrap();
        assert_eq!(back.producer(1).unwrap().last_seq(), 2);
        assert_eq!(back.producer(1).unwrap().epoch, 2);
        assert_eq!(back.producer(2).unwrap().current_txn_first_offset, Some(3));
        assert_eq!(back.first_unstable_offset(), Some(3));
        // The last batch is still found as a duplicate after a reload.
        assert_eq!(
            back.check(&[data(1, 2, 0, 9, 3)], Origin::Client).unwrap(),
            Verdict::Duplicate {
                first_offset: 0,
                last_offset: 2
            }
        );
        let mut broken = bytes.to_vec();
        let last = broken.len() - 1;
        broken[last] ^= 1;
        assert!(ProducerState::decode_snapshot(&broken, Path::new("x")).is_err());
    }

    #[test]
    fn a_reloaded_snapshot_still_finds_every_kept_batch_as_a_duplicate() {
        // Six batches of three records: the last five are kept, and after a reload a retry of
        // any of them is a duplicate (version 1 snapshots knew only the last one, so a retry
        // of an earlier in-flight batch was OUT_OF_ORDER_SEQUENCE_NUMBER).
        let mut s = ProducerState::default();
        for i in 0..6 {
            appended(&mut s, data(1, 0, 3 * i, i64::from(3 * i), 3));
        }
        let back = ProducerState::decode_snapshot(&s.encode_snapshot(), Path::new("x")).unwrap();
        assert_eq!(back.producer(1), s.producer(1));
        for i in 1..6 {
            assert_eq!(
                back.check(&[data(1, 0, 3 * i, 99, 3)], Origin::Client).unwrap(),
                Verdict::Duplicate {
                    first_offset: i64::from(3 * i),
                    last_offset: i64::from(3 * i + 2)
                },
                "batch {i}"
            );
        }
        assert!(matches!(
            back.check(&[data(1, 0, 0, 99, 3)], Origin::Client),
            Err(Error::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            back.check(&[data(1, 0, 18, 18, 3)], Origin::Client).unwrap(),
            Verdict::Append
        );

        // A version 1 snapshot (one entry: the last batch only) still reads.
        let mut entry = BytesMut::new();
        entry.put_i32(1);
        entry.put_i64(7); // producer id
        entry.put_i16(0); // epoch
        entry.put_i32(17); // last sequence
        entry.put_i64(17); // last offset
        entry.put_i32(2); // offset delta
        entry.put_i64(1000); // timestamp
        entry.put_i32(-1); // coordinator epoch
        entry.put_i64(-1); // no open transaction
        let mut v1 = BytesMut::new();
        v1.put_i16(1);
        v1.put_u32(crc32c::crc32c(&entry));
        v1.put_slice(&entry);
        let old = ProducerState::decode_snapshot(&v1, Path::new("x")).unwrap();
        assert_eq!(old.producer(7).unwrap().batches.len(), 1);
        assert_eq!(old.producer(7).unwrap().last_seq(), 17);
        // Trailing bytes, or a batch count past what is kept, are corruption.
        let mut long = s.encode_snapshot().to_vec();
        long.push(0);
        let crc = crc32c::crc32c(&long[6..]);
        long[2..6].copy_from_slice(&crc.to_be_bytes());
        assert!(ProducerState::decode_snapshot(&long, Path::new("x")).is_err());
    }

    #[test]
    fn expiration_keeps_producers_with_open_transactions() {
        let mut s = ProducerState::default();
        appended(&mut s, data(1, 0, 0, 0, 1));
        appended(&mut s, txn(2, 0, 0, 1, 1));
        assert_eq!(s.remove_expired(1000 + 10_000, 5_000), 1);
        assert!(s.producer(1).is_none());
        assert!(s.producer(2).is_some());
    }

    #[test]
    fn a_marker_batch_encodes_and_reads_back() {
        let bytes = encode_marker(
            42,
            3,
            Marker {
                commit: true,
                coordinator_epoch: 7,
            },
            1234,
        );
        let valid = batch::validate_batches(&bytes, usize::MAX).unwrap();
        assert!(valid[0].is_control() && valid[0].is_transactional());
        assert_eq!(valid[0].producer_id(), 42);
        assert_eq!(
            read_marker(&bytes),
            Some(Marker {
                commit: true,
                coordinator_epoch: 7
            })
        );
    }

    #[test]
    fn the_txn_index_round_trips_in_34_byte_entries() {
        let dir = tempfile::tempdir().unwrap();
        let a = AbortedTxn {
            producer_id: 1,
            first_offset: 2,
            last_offset: 3,
            last_stable_offset: 4,
        };
        append_txn_index(dir.path(), 0, &a).unwrap();
        append_txn_index(dir.path(), 0, &a).unwrap();
        let len = std::fs::metadata(dir.path().join(file_name(0, "txnindex")))
            .unwrap()
            .len();
        assert_eq!(len, 68);
        assert_eq!(read_txn_index(dir.path(), 0).unwrap(), vec![a, a]);
    }
}
