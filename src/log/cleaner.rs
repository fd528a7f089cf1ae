//! Log compaction (Kafka's `LogCleaner`): in the closed segments of a log, keep only the latest
//! record of each key, and drop tombstones (null values) once `delete.retention.ms` has passed.
//!
//! One pass (`Log::clean`, or `Log::clean_source` + `CleanSource::prepare_clean` then
//! `Log::commit_clean`): the long part reads a log snapshot (snapshot.rs) and needs no lock on
//! the log; the swap is the writer's step and refuses a plan the log changed under.
//! 1. The cleanable range: closed, fsynced segments from the log start up to the first one
//!    holding a batch newer than `min.compaction.lag.ms` (KIP-58) or reaching the last stable
//!    offset (every transaction below it has ended). Below the cleaner checkpoint
//!    it is clean, above dirty; nothing happens unless the dirty share of its bytes reaches
//!    `min.cleanable.dirty.ratio` or its oldest dirty batch is older than
//!    `max.compaction.lag.ms` (KIP-354).
//! 2. A map key → latest offset over the dirty part, keys stored as 128-bit keyed hashes
//!    (Kafka's `SkimpyOffsetMap`), in `key_map_bytes` at most: when it fills, the dirty range
//!    ends there and the rest waits for the next pass.
//! 3. Every segment from the log start to the end of that range is rewritten into
//!    `<base>.log.cleaned` (+ indexes), several into one while they fit in `segment.bytes`
//!    (Kafka's `groupSegmentsBySize`): a keyed record stays unless the map holds a later offset
//!    for its key; a tombstone in the clean part also goes once its batch is older than
//!    `delete.retention.ms`. Records keep their offsets; batches whose records all stay are
//!    copied unchanged, others re-encoded with their last offset kept, emptied ones dropped.
//!    Transactions (Kafka's `CleanedTransactionMetadata`): the aborted index tells which
//!    transactional batches were aborted; those are neither mapped nor kept, so a cleaned
//!    segment has no `.txnindex`. Committed ones compact like any other. A marker goes once no
//!    batch of its transaction is left, it is in the clean part, and `delete.retention.ms` has
//!    passed since it was written. Each producer's last data batch stays, emptied if need be
//!    (Kafka's RETAIN_EMPTY), so its epoch and sequence can be rebuilt from the log alone.
//! 4. The swap (Kafka's `.cleaned` / `.swap` protocol), safe under a crash at any point:
//!    `compacted_below` in `cleaner-offset-checkpoint` is raised first (recovery accepts offset
//!    gaps only below it), then `.cleaned` files become `.swap` (the `.log` last: its `.swap`
//!    decides the swap), the replaced segments are deleted, the `.swap` files take the final
//!    names, and `clean_end` is raised last. `Log::open` (through `finish_interrupted_swaps`)
//!    deletes `.cleaned` files, finishes a swap whose `.log.swap` exists (also deleting the
//!    segments it replaces) and rebuilds that segment's indexes.
//!
//! A cleaned segment may end before the next one's base offset (its last records compacted
//! away), or be empty; it still spans up to the next base.
//!
//! A compressed batch is decompressed into at most the topic's `max.message.bytes` (what
//! Produce lets in since issue 10). One whose records go past it (a decompression bomb written
//! before, or a batch stored before the topic became compacted or its limit was lowered) is
//! neither mapped nor filtered: it is copied as it is, its records all kept, so the pass costs
//! that bound in memory and loses nothing. Kafka's cleaner streams records one by one and has
//! no such case.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::io::{ErrorKind, IoSlice};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions};

use super::batch::{self, BatchHeader, HEADER_LEN};
use super::checkpoint;
use super::index::TIME_ENTRY_LEN;
use super::producer_state::{self, AbortedTxn};
use super::segment::{Segment, SegmentRef, file_name};
use super::{Log, LogConfig, LogSnapshot};
use crate::error::{Error, Result};

/// Where the cleaner records how far it got (one per partition directory, like the other
/// checkpoints here; Kafka keeps one per log directory).
pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// A cleaned segment being written; deleted at open (the swap was not decided).
const CLEANED_SUFFIX: &str = ".cleaned";
/// A cleaned segment whose swap was decided; finished at open.
const SWAP_SUFFIX: &str = ".swap";
/// A segment being deleted (retention); removed at open.
const DELETED_SUFFIX: &str = ".deleted";
/// The `.log` comes last: its rename is the step that decides (`.swap`) or ends a swap.
const EXTENSIONS: [&str; 3] = ["index", "timeindex", "log"];
/// Bytes of segment read at a time (a larger batch is read whole).
const READ_CHUNK_BYTES: usize = 1 << 20;
/// Bytes of cleaned batches buffered before a write.
const WRITE_BUFFER_BYTES: usize = 1 << 20;
/// Share of the key map's slots that may be used (Kafka's `log.cleaner.io.buffer.load.factor`
/// default): linear probing stays short, and a free slot always ends a probe.
const MAP_LOAD_PERCENT: usize = 90;

/// A compacted topic's cleaning settings, from its config over the broker defaults.
#[derive(Debug, Clone)]
pub struct CleanerConfig {
    /// `delete.retention.ms`: how long a tombstone stays once it reached the clean part.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment holding a batch younger than this is not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: clean regardless of the dirty ratio once the oldest dirty batch
    /// is older than this.
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: clean when dirty bytes / cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// This log's share of `log.cleaner.dedupe.buffer.size`: the key map's bytes.
    pub key_map_bytes: usize,
}

impl Default for CleanerConfig {
    /// Kafka's defaults (the whole 128 MiB dedupe buffer for one cleaner thread).
    fn default() -> Self {
        CleanerConfig {
            delete_retention_ms: 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            key_map_bytes: 128 << 20,
        }
    }
}

/// What one cleaning pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanStats {
    /// Segment bytes read: the dirty part twice (map, then rewrite), the clean part once.
    pub bytes_read: u64,
    /// Bytes of the cleaned segments.
    pub bytes_written: u64,
    /// Records dropped (older values of a key, expired tombstones).
    pub records_removed: u64,
    /// Segments rewritten.
    pub segments: usize,
    /// Keys in the map.
    pub map_entries: usize,
    /// 1 when this pass reached the end of the cleanable range; otherwise an estimate of the
    /// passes this one's dirty range needs in all (the map filled before its end).
    pub passes_needed: u32,
    /// The largest timestamp of the oldest batch in which this pass kept a tombstone, or a
    /// transaction marker it will remove once `delete.retention.ms` has passed.
    pub oldest_tombstone_ms: Option<i64>,
    /// Transaction markers removed (nothing of their transaction was left).
    pub markers_removed: u64,
}

/// Cleaned segments written beside the log by `prepare_clean`, waiting for `commit_clean` to
/// swap them in. Dropped uncommitted, it deletes its files.
pub struct CleanPlan {
    dir: PathBuf,
    groups: Vec<Group>,
    /// The cleaner checkpoint's `clean_end` once swapped: the end of the dirty range.
    clean_end: i64,
    stats: CleanStats,
    /// Set once the swap is decided: the files then belong to the log.
    decided: bool,
    /// `Log::truncations` of the source: a plan from before a truncation is refused.
    truncations: u64,
}

/// Old segments rewritten into one cleaned segment with the first one's base offset.
struct Group {
    /// Base offset, next offset and identity (`SharedSegment::id`) of each old segment.
    old: Vec<(i64, i64, u64)>,
}

impl Group {
    fn base_offset(&self) -> i64 {
        self.old.first().map_or(0, |s| s.0)
    }
    fn end(&self) -> i64 {
        self.old.last().map_or(0, |s| s.1)
    }
}

/// What a cleaning pass reads, taken from the log in one short step (`Log::clean_source`):
/// a snapshot of its segments and the writer-side facts of that moment. The pass itself
/// (`prepare_clean`) then runs without the log, while appends go on.
pub struct CleanSource {
    snapshot: Arc<LogSnapshot>,
    dir: PathBuf,
    config: LogConfig,
    /// Only fsynced segments are cleaned.
    recovery_point: i64,
    /// The pass stays below it: every transaction there has ended.
    first_unstable_offset: Option<i64>,
    /// The aborted transactions below the recovery point, as the producer state held them.
    aborted: Vec<AbortedTxn>,
    /// Each producer's last data batch, by its last offset (kept by the pass).
    last_data_offsets: HashMap<i64, i64>,
    /// `Log::truncations` when the source was taken.
    truncations: u64,
}

impl CleanSource {
    fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        producer_state::aborted_in(&self.aborted, from, upper)
    }
}

impl Drop for CleanPlan {
    fn drop(&mut self) {
        if self.decided {
            return;
        }
        for group in &self.groups {
            if let Err(e) = remove_suffixed(&self.dir, group.base_offset(), CLEANED_SUFFIX) {
                tracing::warn!("cannot delete an abandoned cleaned segment: {e}");
            }
        }
    }
}

impl Log {
    /// One cleaning pass (see the module doc), holding the log for its whole length. None when
    /// nothing is cleanable, or the dirty ratio is below `min_cleanable_dirty_ratio` and no
    /// dirty batch is older than `max_compaction_lag_ms`. Call again while it returns
    /// `passes_needed > 1`.
    pub fn clean(&mut self, config: &CleanerConfig, now_ms: i64) -> Result<Option<CleanStats>> {
        let Some(plan) = self.prepare_clean(config, now_ms)? else {
            return Ok(None);
        };
        self.commit_clean(plan)
    }

    /// What a pass needs of the log, taken at once (cheap: a snapshot and a few copies).
    pub fn clean_source(&self) -> CleanSource {
        CleanSource {
            snapshot: self.snapshot(),
            dir: self.dir.clone(),
            config: self.config.clone(),
            recovery_point: self.recovery_point,
            first_unstable_offset: self.first_unstable_offset(),
            aborted: self.aborted_transactions(i64::MIN, self.recovery_point),
            last_data_offsets: self.last_data_offsets(),
            truncations: self.truncations,
        }
    }

    /// `CleanSource::prepare_clean` on the log as it is now.
    pub fn prepare_clean(&self, config: &CleanerConfig, now_ms: i64) -> Result<Option<CleanPlan>> {
        self.clean_source().prepare_clean(config, now_ms)
    }
}

impl CleanSource {
    /// The long part of a pass, on the snapshot: builds the key map and writes the cleaned
    /// segments. Needs no lock on the log: appends, reads and retention may go on before
    /// `Log::commit_clean`, which refuses the plan if the segments it read were replaced.
    pub fn prepare_clean(&self, config: &CleanerConfig, now_ms: i64) -> Result<Option<CleanPlan>> {
        let checkpointed = read_checkpoint(&self.dir)?;
        let segments = self.snapshot.segments();
        let sealed = segments.sealed;
        let log_start = sealed.first().map_or(segments.active.base_offset, |s| s.base_offset);
        let lag_horizon = now_ms.saturating_sub(config.min_compaction_lag_ms);
        // Only what is fsynced: a recovery never has to truncate a segment the cleaner wrote. And
        // only below the last stable offset (Kafka's `firstUnstableOffset` bound): every
        // transaction there has its outcome, so aborted batches are known by the aborted index.
        let stable_end = self.first_unstable_offset.unwrap_or(i64::MAX);
        let cleanable_len = sealed
            .iter()
            .take_while(|s| {
                s.max_timestamp <= lag_horizon && s.next_offset <= self.recovery_point && s.next_offset <= stable_end
            })
            .count();
        let cleanable = &sealed[..cleanable_len];
        let Some(cleanable_end) = cleanable.last().map(|s| s.next_offset) else {
            return Ok(None);
        };
        let mut first_dirty = checkpointed.clean_end;
        if first_dirty < log_start || first_dirty > segments.active.next_offset {
            // Segments deleted by retention, or a log truncated or recreated below it.
            first_dirty = log_start;
        }
        let tombstones_due = checkpointed.tombstone_ms != i64::MAX
            && checkpointed.tombstone_ms < now_ms.saturating_sub(config.delete_retention_ms);
        if first_dirty >= cleanable_end {
            return if tombstones_due {
                self.tombstone_pass(cleanable, first_dirty, config, now_ms)
            } else {
                Ok(None)
            };
        }
        let (mut clean_bytes, mut dirty_bytes) = (0u64, 0u64);
        for s in cleanable {
            if s.next_offset <= first_dirty {
                clean_bytes += s.size;
            } else {
                dirty_bytes += s.size;
            }
        }
        let ratio = dirty_bytes as f64 / (clean_bytes + dirty_bytes).max(1) as f64;
        if dirty_bytes == 0
            || ratio < config.min_cleanable_dirty_ratio && !max_lag_exceeded(cleanable, first_dirty, config, now_ms)?
        {
            return if tombstones_due {
                self.tombstone_pass(cleanable, first_dirty, config, now_ms)
            } else {
                Ok(None)
            };
        }

        let mut map = OffsetMap::new(config.key_map_bytes)?;
        let mut stats = CleanStats::default();
        let records_bytes_max = crate::log::batch::records_bytes_cap(self.config.max_message_bytes);
        let mut txns = Txns::new(self.aborted_transactions(first_dirty, cleanable_end));
        let (dirty_end, mapped_bytes) = build_map(
            cleanable,
            first_dirty,
            records_bytes_max,
            &mut map,
            &mut txns,
            &mut stats,
        )?;
        debug_assert!(first_dirty < dirty_end && dirty_end <= cleanable_end);
        let to_clean: Vec<&SegmentRef> = cleanable.iter().take_while(|s| s.base_offset < dirty_end).collect();
        let filter = Filter {
            map: &map,
            first_dirty,
            tombstone_horizon: now_ms.saturating_sub(config.delete_retention_ms),
            records_bytes_max,
            last_data_offsets: self.last_data_offsets.clone(),
        };
        let log_start = to_clean.first().map_or(first_dirty, |s| s.base_offset);
        let mut txns = Txns::new(self.aborted_transactions(log_start, dirty_end));
        let mut plan = CleanPlan {
            dir: self.dir.clone(),
            groups: Vec::new(),
            clean_end: dirty_end,
            stats,
            decided: false,
            truncations: self.truncations,
        };
        for group in group_by_size(&to_clean, &self.config) {
            plan.groups.push(Group {
                old: group.iter().map(|s| (s.base_offset, s.next_offset, s.id())).collect(),
            });
            write_cleaned(&self.dir, &group, &self.config, &filter, &mut txns, &mut plan.stats)?;
        }
        plan.stats.segments = to_clean.len();
        plan.stats.map_entries = map.len();
        plan.stats.passes_needed = if dirty_end >= cleanable_end {
            1
        } else {
            let per_pass = mapped_bytes.max(1);
            u32::try_from(dirty_bytes.div_ceil(per_pass)).unwrap_or(u32::MAX).max(2)
        };
        Ok(Some(plan))
    }

    /// A pass over the clean part only, with an empty key map: it drops the tombstones whose
    /// delete.retention.ms has passed and keeps everything else.
    fn tombstone_pass(
        &self,
        cleanable: &[SegmentRef],
        clean_end: i64,
        config: &CleanerConfig,
        now_ms: i64,
    ) -> Result<Option<CleanPlan>> {
        // An empty map: no record is shadowed, only expired tombstones go.
        let map = OffsetMap::new(1024)?;
        let to_clean: Vec<&SegmentRef> = cleanable.iter().take_while(|s| s.next_offset <= clean_end).collect();
        if to_clean.is_empty() {
            return Ok(None);
        }
        let filter = Filter {
            map: &map,
            first_dirty: clean_end,
            tombstone_horizon: now_ms.saturating_sub(config.delete_retention_ms),
            records_bytes_max: crate::log::batch::records_bytes_cap(self.config.max_message_bytes),
            last_data_offsets: self.last_data_offsets.clone(),
        };
        let log_start = to_clean.first().map_or(clean_end, |s| s.base_offset);
        let mut txns = Txns::new(self.aborted_transactions(log_start, clean_end));
        let mut plan = CleanPlan {
            dir: self.dir.clone(),
            groups: Vec::new(),
            clean_end,
            stats: CleanStats::default(),
            decided: false,
            truncations: self.truncations,
        };
        for group in group_by_size(&to_clean, &self.config) {
            plan.groups.push(Group {
                old: group.iter().map(|s| (s.base_offset, s.next_offset, s.id())).collect(),
            });
            write_cleaned(&self.dir, &group, &self.config, &filter, &mut txns, &mut plan.stats)?;
        }
        plan.stats.segments = to_clean.len();
        plan.stats.passes_needed = 1;
        Ok(Some(plan))
    }
}

impl Log {
    /// Swaps the cleaned segments of `plan` in (see the module doc for the crash-safe order).
    /// None, and the plan's files deleted, when the log no longer holds the very segments it
    /// read (retention, another pass's swap, a truncation in between): a plan made on a
    /// snapshot is stale then, and nothing changes.
    pub fn commit_clean(&mut self, plan: CleanPlan) -> Result<Option<CleanStats>> {
        self.commit_clean_with(plan, &mut || {})
    }

    /// `commit_clean`, calling `after_step` after each change on disk (tests stop there).
    fn commit_clean_with(&mut self, mut plan: CleanPlan, after_step: &mut dyn FnMut()) -> Result<Option<CleanStats>> {
        // As Kafka aborts cleaning before a truncation: a plan read before one kept producers'
        // last batches, aborted transactions and a recovery point that may not hold any more,
        // even for the segments the cut left alone.
        if plan.truncations != self.truncations {
            return Ok(None);
        }
        let Some(first) = self.segments_of(&plan) else {
            return Ok(None);
        };
        let dir = self.dir.clone();
        let mut checkpointed = read_checkpoint(&dir)?;
        let groups_end = plan.groups.last().map_or(0, Group::end);
        checkpointed.compacted_below = checkpointed.compacted_below.max(groups_end);
        write_checkpoint(&dir, checkpointed)?;
        after_step();
        for group in &plan.groups {
            for ext in EXTENSIONS {
                let name = file_name(group.base_offset(), ext);
                rename(&dir, &(name.clone() + CLEANED_SUFFIX), &(name + SWAP_SUFFIX))?;
                after_step();
            }
        }
        checkpoint::sync_dir(&dir)?;
        plan.decided = true;
        for group in &plan.groups {
            // A cleaned segment holds no record of an aborted transaction (the pass dropped
            // them all), so it has no `.txnindex`: an entry left for a transaction whose abort
            // marker went would hide the producer's later records from read_committed
            // consumers. Removed before the final rename, as `finish_interrupted_swaps` does.
            remove(&dir.join(file_name(group.base_offset(), "txnindex")))?;
            // Replaced segments go before the final rename: once no `.swap` is left, open has
            // nothing to tell which segments a cleaned one replaced.
            for &(base, _, _) in &group.old[1..] {
                Segment::delete_files(&dir, base)?;
                after_step();
            }
            for ext in EXTENSIONS {
                let name = file_name(group.base_offset(), ext);
                rename(&dir, &(name.clone() + SWAP_SUFFIX), &name)?;
                after_step();
            }
        }
        checkpoint::sync_dir(&dir)?;
        let mut cleaned = Vec::with_capacity(plan.groups.len());
        for group in &plan.groups {
            cleaned.push(open_cleaned(&dir, group.base_offset(), group.end(), &self.config)?);
        }
        checkpointed.clean_end = plan.clean_end;
        // Every segment of the clean part was rewritten by this pass: its tombstones are the
        // ones the pass kept.
        checkpointed.tombstone_ms = plan.stats.oldest_tombstone_ms.unwrap_or(i64::MAX);
        write_checkpoint(&dir, checkpointed)?;
        after_step();

        // The aborted transactions whose markers were in the cleaned range: their records are gone.
        self.producers.forget_aborted_below(groups_end);
        self.publish_txns();
        let replaced: usize = plan.groups.iter().map(|g| g.old.len()).sum();
        let after: Vec<Segment> = self.segments.drain(first + replaced..).collect();
        self.segments.truncate(first);
        self.segments.extend(cleaned);
        self.segments.extend(after);
        // Readers holding the previous snapshot go on reading the replaced segments through
        // their descriptors (the files are unlinked above).
        self.publish_snapshot();
        self.debug_check();
        Ok(Some(plan.stats.clone()))
    }

    /// The position in `segments` of the first segment `plan` replaces, when all the segments
    /// it replaces are still there, in order, and are the very segments it read (by identity:
    /// a segment cleaned again since may have the same offsets and other bytes).
    fn segments_of(&self, plan: &CleanPlan) -> Option<usize> {
        let first_base = plan.groups.first()?.base_offset();
        let first = self.segments.iter().position(|s| s.base_offset == first_base)?;
        let old = plan.groups.iter().flat_map(|g| g.old.iter().copied());
        let mut current = self.segments[first..].iter();
        for (base, next, id) in old {
            let s = current.next()?;
            if (s.base_offset, s.next_offset, s.shared().id) != (base, next, id) {
                return None;
            }
        }
        Some(first)
    }
}

/// Whether the oldest dirty batch is older than `max.compaction.lag.ms` (KIP-354, which Kafka
/// measures on the first batch of the first dirty segment).
fn max_lag_exceeded(cleanable: &[SegmentRef], first_dirty: i64, config: &CleanerConfig, now_ms: i64) -> Result<bool> {
    if config.max_compaction_lag_ms == i64::MAX {
        return Ok(false);
    }
    for s in cleanable.iter().filter(|s| s.next_offset > first_dirty) {
        if let Some((_, header)) = s.find_batch(first_dirty.max(s.base_offset))? {
            return Ok(now_ms.saturating_sub(header.max_timestamp) > config.max_compaction_lag_ms);
        }
    }
    Ok(false)
}

/// Pass 1: maps each key of the dirty part (from `first_dirty`) to its latest offset. Returns
/// where the dirty range ends (the first record that did not fit, else the end of `cleanable`)
/// and the dirty bytes it covered. A batch whose records decompress past `records_bytes_max`
/// maps nothing: pass 2 keeps it whole, and older values of its keys stay too.
fn build_map(
    cleanable: &[SegmentRef],
    first_dirty: i64,
    records_bytes_max: usize,
    map: &mut OffsetMap,
    txns: &mut Txns,
    stats: &mut CleanStats,
) -> Result<(i64, u64)> {
    let mut mapped_bytes = 0;
    for s in cleanable.iter().filter(|s| s.next_offset > first_dirty) {
        // find_batch takes offsets of the segment only.
        let start = match s.find_batch(first_dirty.max(s.base_offset))? {
            Some((position, _)) => position,
            None => continue,
        };
        let mut cursor = BatchCursor::new(s, start);
        while let Some((header, bytes)) = cursor.next()? {
            stats.bytes_read += header.size as u64;
            mapped_bytes += header.size as u64;
            // Markers carry no key, and an aborted record must not shadow an older committed
            // value (Kafka skips aborted batches here too).
            if header.is_control() {
                // A marker ends its producer's transaction (the producer id is the same in the
                // next one).
                txns.marker(&header);
                continue;
            }
            if txns.data(&header) == TxnKind::Aborted {
                continue;
            }
            let Some(set) = decode(&header, &bytes, records_bytes_max)? else {
                continue;
            };
            for r in set.records {
                if r.offset < first_dirty {
                    continue;
                }
                if let Some(key) = &r.key
                    && !map.put(map.hash(key), r.offset)
                {
                    return Ok((r.offset, mapped_bytes));
                }
            }
        }
    }
    let end = cleanable.last().map_or(first_dirty, |s| s.next_offset);
    Ok((end, mapped_bytes))
}

/// Splits consecutive segments into groups that fit in one segment: `segment.bytes`, 32-bit
/// relative offsets, and index room (Kafka's `LogCleaner.groupSegmentsBySize`).
fn group_by_size<'a>(segments: &[&'a SegmentRef], config: &LogConfig) -> Vec<Vec<&'a SegmentRef>> {
    let index_entries_max = config.segment_index_bytes / TIME_ENTRY_LEN as u64;
    let mut groups: Vec<Vec<&SegmentRef>> = Vec::new();
    let mut size = 0u64;
    for &s in segments {
        let fits = groups.last().and_then(|g| g.first()).is_some_and(|first| {
            let size = size + s.size;
            size <= config.segment_bytes
                && s.next_offset - 1 - first.base_offset <= i64::from(i32::MAX)
                && size / (config.index_interval_bytes + 1) < index_entries_max
        });
        match groups.last_mut() {
            Some(group) if fits => {
                group.push(s);
                size += s.size;
            }
            _ => {
                groups.push(vec![s]);
                size = s.size;
            }
        }
    }
    groups
}

/// Pass 2 for one group: writes `<base>.log.cleaned` and its indexes, fsynced.
fn write_cleaned(
    dir: &Path,
    group: &[&SegmentRef],
    config: &LogConfig,
    filter: &Filter<'_>,
    txns: &mut Txns,
    stats: &mut CleanStats,
) -> Result<()> {
    let base = group.first().map_or(0, |s| s.base_offset);
    // Leftovers of a plan abandoned in this process (open removes those of a crash).
    remove_suffixed(dir, base, CLEANED_SUFFIX)?;
    let mut out = Segment::create_suffixed(dir, base, false, CLEANED_SUFFIX)?;
    let mut pending: Vec<u8> = Vec::with_capacity(WRITE_BUFFER_BYTES);
    let mut pending_from = 0;
    for s in group {
        let mut cursor = BatchCursor::new(s, 0);
        while let Some((header, bytes)) = cursor.next()? {
            stats.bytes_read += header.size as u64;
            let (header, bytes) = match filter.batch(&header, bytes, txns, stats)? {
                Kept::All(bytes) => (header, bytes),
                Kept::Some(bytes) => (batch::check_compacted(&bytes)?, bytes),
                Kept::None => continue,
            };
            // Offsets of dropped batches are gone: the segment continues at this batch.
            out.skip_to(header.base_offset);
            out.account(&header, config);
            pending.extend_from_slice(&bytes);
            if pending.len() >= WRITE_BUFFER_BYTES {
                out.write_all(&mut [IoSlice::new(&pending)], pending_from)?;
                pending.clear();
                pending_from = out.size;
            }
        }
    }
    if !pending.is_empty() {
        out.write_all(&mut [IoSlice::new(&pending)], pending_from)?;
    }
    out.seal()?;
    out.sync_indexes()?;
    let (file, path) = out.log_file();
    file.sync_all().map_err(|e| Error::storage("fsync", &path, e))?;
    stats.bytes_written += out.size;
    Ok(())
}

/// What survives of a batch.
enum Kept {
    /// Every record: the batch's bytes as they were.
    All(Bytes),
    /// Some records, re-encoded.
    Some(Bytes),
    None,
}

/// The record-level decision of pass 2.
struct Filter<'a> {
    map: &'a OffsetMap,
    /// Below it the log is clean: a tombstone there has been seen by a pass already.
    first_dirty: i64,
    /// Tombstones in batches older than this go (`now - delete.retention.ms`).
    tombstone_horizon: i64,
    /// The topic's max.message.bytes: a batch whose records decompress past it is kept whole.
    records_bytes_max: usize,
    /// Each producer's last data batch (its last offset): kept, emptied if need be, so that
    /// the producer's sequence and epoch stay readable from the log (Kafka's RETAIN_EMPTY).
    last_data_offsets: HashMap<i64, i64>,
}

impl Filter<'_> {
    fn batch(&self, header: &BatchHeader, bytes: Bytes, txns: &mut Txns, stats: &mut CleanStats) -> Result<Kept> {
        if header.is_control() {
            // Copied unread: check what is copied, as a recovery would.
            batch::check_compacted(&bytes)?;
            return Ok(self.marker(header, bytes, txns, stats));
        }
        let kind = txns.data(header);
        let original = bytes.clone();
        let kept = if kind == TxnKind::Aborted {
            // A read_committed consumer never sees these; nobody else needs them either.
            batch::check_compacted(&bytes)?;
            stats.records_removed += u64::try_from(batch::record_count(&bytes)).unwrap_or(0);
            Kept::None
        } else {
            self.records(header, bytes, stats)?
        };
        let kept = match kept {
            Kept::None if self.last_data_offsets.get(&header.producer_id) == Some(&header.last_offset()) => {
                Kept::Some(batch::empty_of(&original))
            }
            other => other,
        };
        if kind != TxnKind::NotTransactional && !matches!(kept, Kept::None) {
            txns.kept(header.producer_id);
        }
        Ok(kept)
    }

    fn records(&self, header: &BatchHeader, bytes: Bytes, stats: &mut CleanStats) -> Result<Kept> {
        let Some(set) = decode(header, &bytes, self.records_bytes_max)? else {
            // Copied unread, as a control batch: its CRC is checked, its records all kept.
            batch::check_compacted(&bytes)?;
            return Ok(Kept::All(bytes));
        };
        let drop_tombstones = header.max_timestamp < self.tombstone_horizon;
        let keep: Vec<bool> = set.records.iter().map(|r| self.keep(r, drop_tombstones)).collect();
        let kept = keep.iter().filter(|&&k| k).count();
        stats.records_removed += (set.records.len() - kept) as u64;
        if set
            .records
            .iter()
            .zip(&keep)
            .any(|(r, k)| *k && r.key.is_some() && r.value.is_none())
        {
            let oldest = stats
                .oldest_tombstone_ms
                .map_or(header.max_timestamp, |t| t.min(header.max_timestamp));
            stats.oldest_tombstone_ms = Some(oldest);
        }
        if kept == set.records.len() {
            return Ok(Kept::All(bytes));
        }
        if kept == 0 {
            return Ok(Kept::None);
        }
        // The producer's baseSequence: record sequences are baseSequence + offset delta.
        let base_sequence = set.records.first().map_or(-1, |r| {
            r.sequence.wrapping_sub(offset_delta(r.offset, header.base_offset))
        });
        let mut records: Vec<Record> = set
            .records
            .into_iter()
            .zip(keep)
            .filter_map(|(r, k)| k.then_some(r))
            .collect();
        let first_offset = records.first().map_or(header.base_offset, |r| r.offset);
        if base_sequence == kafka_protocol::records::NO_SEQUENCE {
            // The encoder derives baseSequence from the first record and groups records while
            // offset - sequence is constant: keep -1 and one batch.
            for r in &mut records {
                r.sequence = offset_delta(r.offset, first_offset).wrapping_sub(1);
            }
        }
        let mut out = BytesMut::with_capacity(bytes.len());
        RecordBatchEncoder::encode(
            &mut out,
            &records,
            &RecordEncodeOptions {
                version: batch::MAGIC_V2,
                compression: set.compression,
            },
        )
        .map_err(|e| corrupt(header, e))?;
        if header.is_log_append_time() {
            // The encoder writes CreateTime and the records' own maximum.
            let attributes = batch::be_i16(&out, batch::ATTRIBUTES) | batch::TIMESTAMP_TYPE_LOG_APPEND;
            out[batch::ATTRIBUTES..batch::ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
            out[batch::MAX_TIMESTAMP..batch::MAX_TIMESTAMP + 8].copy_from_slice(&header.max_timestamp.to_be_bytes());
        }
        // The batch keeps its last offset, as Kafka's cleaner does (`overrideLastOffset`): the
        // producer's last sequence is base sequence + lastOffsetDelta.
        let rewritten = batch::BatchHeader::parse(&out)?;
        if rewritten.size != out.len() {
            return Err(corrupt(header, "re-encoding split the batch"));
        }
        batch::set_last_offset_delta(&mut out, offset_delta(header.last_offset(), rewritten.base_offset));
        Ok(Kept::Some(out.freeze()))
    }

    fn keep(&self, r: &Record, drop_tombstones: bool) -> bool {
        // A record without a key cannot be on a compacted topic (produce rejects it); keep it.
        let Some(key) = &r.key else { return true };
        if self.map.get(self.map.hash(key)).is_some_and(|latest| r.offset < latest) {
            return false;
        }
        !(r.value.is_none() && drop_tombstones && r.offset < self.first_dirty)
    }
}

impl Filter<'_> {
    /// A control batch: a transaction marker goes once nothing of its transaction is left in
    /// the log, it has been in the clean part, and `delete.retention.ms` has passed since it
    /// was written (a consumer part-way through the transaction still finds it).
    fn marker(&self, header: &BatchHeader, bytes: Bytes, txns: &mut Txns, stats: &mut CleanStats) -> Kept {
        if super::producer_state::read_marker(&bytes).is_none() {
            txns.reach(header.last_offset());
            return Kept::All(bytes);
        }
        if !txns.marker(header) {
            return Kept::All(bytes);
        }
        if header.base_offset < self.first_dirty && header.max_timestamp < self.tombstone_horizon {
            stats.markers_removed += 1;
            return Kept::None;
        }
        // Due later: a tombstone pass removes it (the checkpoint's tombstone time).
        let oldest = stats
            .oldest_tombstone_ms
            .map_or(header.max_timestamp, |t| t.min(header.max_timestamp));
        stats.oldest_tombstone_ms = Some(oldest);
        Kept::All(bytes)
    }
}

/// What a data batch is to the transactions of the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnKind {
    NotTransactional,
    Committed,
    Aborted,
}

/// The transactions a pass meets, in log order (Kafka's `CleanedTransactionMetadata`). Below
/// the last stable offset every transaction has ended, so a transactional batch is aborted
/// exactly when the aborted index has its producer's transaction open at that offset.
struct Txns {
    /// Aborted transactions not reached yet, by decreasing first offset.
    pending: Vec<AbortedTxn>,
    /// Producers inside an aborted transaction.
    aborted: HashSet<i64>,
    /// Producers inside a transaction, and whether a batch of it was kept (an aborted one's
    /// only as the producer's emptied last batch).
    open: HashMap<i64, bool>,
}

impl Txns {
    fn new(mut aborted: Vec<AbortedTxn>) -> Txns {
        aborted.sort_by_key(|a| std::cmp::Reverse(a.first_offset));
        Txns {
            pending: aborted,
            aborted: HashSet::new(),
            open: HashMap::new(),
        }
    }

    /// Opens the aborted transactions that start at or before `offset`.
    fn reach(&mut self, offset: i64) {
        while let Some(a) = self.pending.last()
            && a.first_offset <= offset
        {
            self.aborted.insert(a.producer_id);
            self.pending.pop();
        }
    }

    fn data(&mut self, header: &BatchHeader) -> TxnKind {
        self.reach(header.last_offset());
        if !header.is_transactional() {
            return TxnKind::NotTransactional;
        }
        self.open.entry(header.producer_id).or_insert(false);
        if self.aborted.contains(&header.producer_id) {
            TxnKind::Aborted
        } else {
            TxnKind::Committed
        }
    }

    /// A batch of the producer's transaction stays in the log.
    fn kept(&mut self, producer_id: i64) {
        if let Some(kept) = self.open.get_mut(&producer_id) {
            *kept = true;
        }
    }

    /// Ends the producer's transaction at its marker: whether nothing of it is left in the
    /// log. A marker whose transaction kept a batch stays: replaying the log without it would
    /// leave that transaction open and hold the last stable offset back forever.
    fn marker(&mut self, header: &BatchHeader) -> bool {
        self.reach(header.last_offset());
        self.aborted.remove(&header.producer_id);
        !self.open.remove(&header.producer_id).unwrap_or(false)
    }
}

/// The records of a batch, or None when they decompress past `records_bytes_max` (logged: the
/// batch is kept whole, pass after pass).
fn decode(
    header: &BatchHeader,
    bytes: &Bytes,
    records_bytes_max: usize,
) -> Result<Option<kafka_protocol::records::RecordSet>> {
    match batch::decode_records_within(bytes, records_bytes_max) {
        Ok(set) => Ok(Some(set)),
        Err(Error::RecordsTooLarge { max }) => {
            tracing::warn!(
                offset = header.base_offset,
                max,
                "cleaner keeps a batch whose records decompress past max.message.bytes"
            );
            Ok(None)
        }
        Err(e) => Err(corrupt(header, e)),
    }
}

fn corrupt(header: &BatchHeader, e: impl std::fmt::Display) -> Error {
    Error::CorruptBatch(format!("cleaner, batch at offset {}: {e:#}", header.base_offset))
}

/// A record's offset delta in its batch; batches span less than 2^31 offsets.
fn offset_delta(offset: i64, base_offset: i64) -> i32 {
    i32::try_from(offset - base_offset).unwrap_or(i32::MAX)
}

/// The batches of a segment from a position on, read a chunk at a time.
struct BatchCursor<'a> {
    segment: &'a SegmentRef,
    pos: u64,
    chunk: Bytes,
    chunk_start: u64,
}

impl<'a> BatchCursor<'a> {
    fn new(segment: &'a SegmentRef, pos: u64) -> Self {
        BatchCursor {
            segment,
            pos,
            chunk: Bytes::new(),
            chunk_start: pos,
        }
    }

    fn next(&mut self) -> Result<Option<(BatchHeader, Bytes)>> {
        let size = self.segment.size;
        if self.pos >= size {
            return Ok(None);
        }
        let remaining = size - self.pos;
        if remaining < HEADER_LEN as u64 {
            return Err(Error::CorruptBatch(format!(
                "segment {} ends in a partial batch header at {}",
                self.segment.base_offset, self.pos
            )));
        }
        let header = BatchHeader::parse(self.get(HEADER_LEN)?)?;
        if header.size as u64 > remaining {
            return Err(Error::CorruptBatch(format!(
                "segment {}: batch at {} runs past the end",
                self.segment.base_offset, self.pos
            )));
        }
        self.get(header.size)?;
        let from = usize::try_from(self.pos - self.chunk_start).unwrap_or(usize::MAX);
        let bytes = self.chunk.slice(from..from + header.size);
        self.pos += header.size as u64;
        Ok(Some((header, bytes)))
    }

    /// The `len` bytes at the position (within the segment), reading a new chunk if needed.
    fn get(&mut self, len: usize) -> Result<&[u8]> {
        let chunk_end = self.chunk_start + self.chunk.len() as u64;
        if self.pos < self.chunk_start || self.pos + len as u64 > chunk_end {
            let want = (len.max(READ_CHUNK_BYTES) as u64).min(self.segment.size - self.pos);
            let want = usize::try_from(want).unwrap_or(usize::MAX);
            self.chunk = Bytes::from(self.segment.read_at(self.pos, want)?);
            self.chunk_start = self.pos;
        }
        let from = usize::try_from(self.pos - self.chunk_start).unwrap_or(usize::MAX);
        Ok(&self.chunk[from..from + len])
    }
}

/// Key → latest offset in a fixed table of `key_map_bytes` (Kafka's `SkimpyOffsetMap`): keys
/// are 128-bit hashes (two SipHash-1-3 with random keys, so a producer cannot craft keys that
/// collide), open addressing with linear probing.
struct OffsetMap {
    /// `[hash0, hash1, offset]`; all zero is a free slot (no key hashes to zero).
    slots: Vec<[u64; 3]>,
    entries: usize,
    entries_max: usize,
    hashers: [RandomState; 2],
}

impl OffsetMap {
    fn new(bytes: usize) -> Result<OffsetMap> {
        let slots = bytes / size_of::<[u64; 3]>();
        let entries_max = slots * MAP_LOAD_PERCENT / 100;
        if entries_max == 0 {
            return Err(Error::InvalidConfig {
                key: "log.cleaner.dedupe.buffer.size".into(),
                reason: format!("{bytes} bytes of key map hold no key"),
            });
        }
        Ok(OffsetMap {
            // Zeroed memory: pages are touched only as keys land in them.
            slots: vec![[0; 3]; slots],
            entries: 0,
            entries_max,
            hashers: [RandomState::new(), RandomState::new()],
        })
    }

    fn hash(&self, key: &[u8]) -> [u64; 2] {
        let h = [self.hashers[0].hash_one(key), self.hashers[1].hash_one(key)];
        if h == [0, 0] { [0, 1] } else { h }
    }

    fn first_slot(&self, h: [u64; 2]) -> usize {
        // Multiply-shift range reduction: uniform over the slots, no modulo.
        usize::try_from((u128::from(h[0]) * self.slots.len() as u128) >> 64).unwrap_or(0)
    }

    /// Records `offset` as the latest of key `h`; false when the map is full and `h` new.
    fn put(&mut self, h: [u64; 2], offset: i64) -> bool {
        let mut i = self.first_slot(h);
        loop {
            let slot = &mut self.slots[i];
            if slot[..2] == h {
                slot[2] = offset as u64;
                return true;
            }
            if slot[..2] == [0, 0] {
                if self.entries >= self.entries_max {
                    return false;
                }
                *slot = [h[0], h[1], offset as u64];
                self.entries += 1;
                return true;
            }
            i = if i + 1 == self.slots.len() { 0 } else { i + 1 };
        }
    }

    fn get(&self, h: [u64; 2]) -> Option<i64> {
        let mut i = self.first_slot(h);
        loop {
            let slot = &self.slots[i];
            if slot[..2] == h {
                return Some(slot[2] as i64);
            }
            if slot[..2] == [0, 0] {
                return None;
            }
            i = if i + 1 == self.slots.len() { 0 } else { i + 1 };
        }
    }

    fn len(&self) -> usize {
        self.entries
    }
}

/// The cleaner checkpoint of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CleanerCheckpoint {
    /// Below it the log is clean (Kafka's cleaner offset checkpoint).
    clean_end: i64,
    /// Segments with a base offset below it may hold offset gaps; raised before a swap is
    /// decided so that recovery accepts its segments.
    compacted_below: i64,
    /// The largest timestamp of the oldest batch holding a tombstone in the clean part
    /// (i64::MAX when there is none): once it is older than delete.retention.ms, a pass runs
    /// even without new data, so tombstones do not outlive their retention on an idle topic
    /// (Kafka's KIP-534 delete horizon serves the same end).
    tombstone_ms: i64,
}

impl Default for CleanerCheckpoint {
    fn default() -> Self {
        CleanerCheckpoint {
            clean_end: 0,
            compacted_below: 0,
            tombstone_ms: i64::MAX,
        }
    }
}

/// Format: a version line `0`, a count line `1`, then `clean_end compacted_below [tombstone_ms]`.
fn read_checkpoint(dir: &Path) -> Result<CleanerCheckpoint> {
    let path = dir.join(CLEANER_CHECKPOINT_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(CleanerCheckpoint::default()),
        Err(e) => return Err(Error::storage("read", &path, e)),
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let offsets: Option<Vec<i64>> = match lines.as_slice() {
        ["0", "1", entry] => entry.split_whitespace().map(|f| f.parse().ok()).collect(),
        _ => None,
    };
    match offsets.as_deref() {
        Some(&[clean_end, compacted_below]) => Ok(CleanerCheckpoint {
            clean_end,
            compacted_below,
            tombstone_ms: i64::MAX,
        }),
        Some(&[clean_end, compacted_below, tombstone_ms]) => Ok(CleanerCheckpoint {
            clean_end,
            compacted_below,
            tombstone_ms,
        }),
        _ => Err(Error::storage(
            "parse",
            &path,
            std::io::Error::new(ErrorKind::InvalidData, format!("bad cleaner checkpoint {text:?}")),
        )),
    }
}

/// Lowers the cleaner checkpoint to a log cut at `log_end_offset` (Kafka's
/// `LogCleanerManager.maybeTruncateCheckpoint`): what is written again above it is dirty, and
/// segments starting there or above hold no offset gap.
pub(crate) fn truncate_checkpoint(dir: &Path, log_end_offset: i64) -> Result<()> {
    let checkpointed = read_checkpoint(dir)?;
    let lowered = CleanerCheckpoint {
        clean_end: checkpointed.clean_end.min(log_end_offset),
        compacted_below: checkpointed.compacted_below.min(log_end_offset),
        ..checkpointed
    };
    if lowered == checkpointed {
        return Ok(());
    }
    write_checkpoint(dir, lowered)
}

fn write_checkpoint(dir: &Path, c: CleanerCheckpoint) -> Result<()> {
    let text = format!("0\n1\n{} {} {}\n", c.clean_end, c.compacted_below, c.tombstone_ms);
    checkpoint::write_atomically(&dir.join(CLEANER_CHECKPOINT_FILE), text.as_bytes(), true)
}

/// Called by `Log::open` before it lists segments: deletes `.cleaned` and `.deleted` files,
/// finishes every swap whose `.log.swap` exists (deleting the segments it replaced, and its
/// indexes, which may be the replaced segment's: recovery rebuilds them), removes other
/// `.swap` files. Returns the offset below which segments may hold offset gaps.
pub(crate) fn finish_interrupted_swaps(dir: &Path) -> Result<i64> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::storage("list", dir, e))? {
        let entry = entry.map_err(|e| Error::storage("list", dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    let mut changed = false;
    for name in names
        .iter()
        .filter(|n| n.ends_with(CLEANED_SUFFIX) || n.ends_with(DELETED_SUFFIX))
    {
        remove(&dir.join(name))?;
        changed = true;
    }
    let swapped_logs = names.iter().filter_map(|n| {
        let stem = n.strip_suffix(SWAP_SUFFIX)?.strip_suffix(".log")?;
        (stem.len() == 20).then(|| stem.parse::<i64>().ok()).flatten()
    });
    for base in swapped_logs {
        for ext in ["index", "timeindex", "txnindex"] {
            let name = file_name(base, ext);
            remove(&dir.join(&name))?;
            remove(&dir.join(name + SWAP_SUFFIX))?;
        }
        let name = file_name(base, "log");
        let swap = dir.join(name.clone() + SWAP_SUFFIX);
        if let Some(last) = last_offset(&swap)? {
            for other in super::recovery::list_segments(dir)? {
                if base < other && other <= last {
                    Segment::delete_files(dir, other)?;
                }
            }
        }
        rename(dir, &(name.clone() + SWAP_SUFFIX), &name)?;
        changed = true;
        tracing::info!(dir = %dir.display(), base, "finished a segment swap of the log cleaner");
    }
    for name in names.iter().filter(|n| n.ends_with(SWAP_SUFFIX) && !n.contains(".log")) {
        remove(&dir.join(name))?;
        changed = true;
    }
    if changed {
        checkpoint::sync_dir(dir)?;
    }
    Ok(read_checkpoint(dir)?.compacted_below)
}

/// The last offset of the last batch of a `.swap` segment (written whole and fsynced before it
/// got that name), or None when empty.
fn last_offset(path: &Path) -> Result<Option<i64>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| Error::storage("open", path, e))?;
    let len = file.metadata().map_err(|e| Error::storage("stat", path, e))?.len();
    let mut header = [0u8; HEADER_LEN];
    let (mut pos, mut last) = (0u64, None);
    while pos + HEADER_LEN as u64 <= len {
        file.read_exact_at(&mut header, pos)
            .map_err(|e| Error::storage("read", path, e))?;
        let Ok(h) = BatchHeader::parse(&header) else { break };
        last = Some(h.last_offset());
        pos += h.size as u64;
    }
    Ok(last)
}

/// Opens a segment the cleaner just wrote (its indexes on disk; recovery if they do not add up).
fn open_cleaned(dir: &Path, base: i64, end: i64, config: &LogConfig) -> Result<Segment> {
    let (mut segment, loaded) = Segment::open(dir, base)?;
    if !segment.trust(loaded, Some(end), true)? {
        segment.recover(config, true)?;
        segment.next_offset = segment.next_offset.max(end);
        segment.publish();
    }
    Ok(segment)
}

fn rename(dir: &Path, from: &str, to: &str) -> Result<()> {
    let from = dir.join(from);
    std::fs::rename(&from, dir.join(to)).map_err(|e| Error::storage("rename", &from, e))
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::storage("delete", path, e)),
        _ => Ok(()),
    }
}

/// Removes the three files of segment `base` with `suffix`, if present.
fn remove_suffixed(dir: &Path, base: i64, suffix: &str) -> Result<()> {
    for ext in EXTENSIONS {
        remove(&dir.join(file_name(base, ext) + suffix))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::collections::{BTreeMap, BTreeSet};

    use kafka_protocol::records::{Compression, TimestampType as RecordTimestampType};
    use tempfile::TempDir;

    use super::*;
    use crate::log::{TimestampType, ValidBatch, validate_batches};

    const NOW: i64 = 1_700_000_000_000;

    /// One record as read back: offset, key, value (None for a tombstone).
    type Row = (i64, Option<Bytes>, Option<Bytes>);

    fn config() -> CleanerConfig {
        CleanerConfig {
            delete_retention_ms: 1_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.0,
            key_map_bytes: 1 << 20,
        }
    }

    fn log_config() -> LogConfig {
        LogConfig {
            segment_bytes: 16 << 10,
            index_interval_bytes: 1_000,
            ..LogConfig::default()
        }
    }

    /// Record `i` of a batch: a plain one (no producer), keyed, `None` value a tombstone.
    fn record(i: usize, key: &str, value: Option<&str>, ts: i64) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: RecordTimestampType::Creation,
            offset: i as i64,
            sequence: i as i32 - 1,
            timestamp: ts,
            key: Some(Bytes::from(key.to_string())),
            value: value.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
        }
    }

    /// `records` as one validated batch.
    fn encode(records: &[Record], compression: Compression) -> Vec<ValidBatch> {
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, records, &options).unwrap();
        validate_batches(&buf.freeze(), 1 << 20).unwrap()
    }

    /// A batch of keyed records (`None` value: a tombstone), timestamps `ts`.
    fn keyed(records: &[(String, Option<String>)], ts: i64, compression: Compression) -> Vec<ValidBatch> {
        let records: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, (k, v))| record(i, k, v.as_deref(), ts))
            .collect();
        encode(&records, compression)
    }

    /// Appends records `from..from + count` in batches of 10: record `i` has key
    /// `k{i % keys}` and value `v{i}-xxx...`.
    fn append_records(log: &mut Log, from: usize, count: usize, keys: usize, ts: i64, compression: Compression) {
        append_keyed(log, from, count, |i| format!("k{}", i % keys), ts, compression);
    }

    /// `append_records` with record `i`'s key from `key(i)`.
    fn append_keyed(
        log: &mut Log,
        from: usize,
        count: usize,
        key: impl Fn(usize) -> String,
        ts: i64,
        compression: Compression,
    ) {
        for chunk in (from..from + count).collect::<Vec<_>>().chunks(10) {
            let records: Vec<(String, Option<String>)> = chunk
                .iter()
                .map(|&i| (key(i), Some(format!("v{i}-{}", "x".repeat(20)))))
                .collect();
            log.append(keyed(&records, ts, compression), 0, ts).unwrap();
        }
    }

    /// Closes the active segment and makes everything durable (the cleaner only takes fsynced,
    /// closed segments).
    fn roll_and_flush(log: &mut Log) {
        log.roll().unwrap();
        flush(log);
    }

    fn flush(log: &mut Log) {
        let handle = log.flush_handle();
        handle.sync().unwrap();
        log.mark_flushed(handle.flushed_offset).unwrap();
    }

    /// The batches of a read, checked as recovery checks a compacted segment.
    fn headers(bytes: &Bytes) -> Vec<(usize, BatchHeader)> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let size = BatchHeader::parse(&bytes[pos..]).unwrap().size;
            out.push((pos, batch::check_compacted(&bytes[pos..pos + size]).unwrap()));
            pos += size;
        }
        out
    }

    /// Every record of the log, read as a consumer would (fetch from the next offset).
    fn rows(log: &Log) -> Vec<Row> {
        let (mut next, end) = (log.log_start_offset(), log.log_end_offset());
        let mut out: Vec<Row> = Vec::new();
        while next < end {
            let bytes = log.read(next, end, 64 << 10, true).unwrap();
            assert!(!bytes.is_empty(), "read stuck at {next} of {end}");
            for (pos, header) in headers(&bytes) {
                let bytes = bytes.slice(pos..pos + header.size);
                for r in batch::decode_records(&bytes).unwrap().records {
                    assert!(r.offset >= header.base_offset && r.offset <= header.last_offset());
                    if r.offset >= next {
                        out.push((r.offset, r.key, r.value));
                    }
                }
                next = header.last_offset() + 1;
            }
        }
        for w in out.windows(2) {
            assert!(w[0].0 < w[1].0, "offsets repeat or go back: {} then {}", w[0].0, w[1].0);
        }
        out
    }

    /// The latest row of each key.
    fn latest(rows: &[Row]) -> Vec<Row> {
        let mut by_key: BTreeMap<Option<Bytes>, Row> = BTreeMap::new();
        for r in rows {
            by_key.insert(r.1.clone(), r.clone());
        }
        let mut out: Vec<Row> = by_key.into_values().collect();
        out.sort_by_key(|r| r.0);
        out
    }

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        let names = file_names(dir).into_iter();
        names
            .filter(|n| n.ends_with(CLEANED_SUFFIX) || n.ends_with(SWAP_SUFFIX))
            .collect()
    }

    fn copy_dir(from: &Path) -> TempDir {
        let to = TempDir::new().unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.path().join(entry.file_name())).unwrap();
        }
        to
    }

    /// 10k records over 100 keys in several closed segments.
    fn ten_thousand_records() -> (TempDir, Log, Vec<Row>) {
        ten_thousand_records_keyed(|i| format!("k{}", i % 100))
    }

    /// 10k records over 100 keys, 25 of them in each quarter of the log: a map of 27 keys
    /// covers about a quarter per pass.
    fn ten_thousand_records_in_key_ranges() -> (TempDir, Log, Vec<Row>) {
        ten_thousand_records_keyed(|i| format!("k{}", i / 2_500 * 25 + i % 25))
    }

    fn ten_thousand_records_keyed(key: impl Fn(usize) -> String) -> (TempDir, Log, Vec<Row>) {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        append_keyed(&mut log, 0, 10_000, key, NOW, Compression::None);
        roll_and_flush(&mut log);
        let before = rows(&log);
        assert_eq!(before.len(), 10_000);
        assert!(log.segments.len() > 10, "{} segments", log.segments.len());
        (dir, log, before)
    }

    /// A batch of producer `producer_id`'s transaction (epoch 0): keyed records, sequences from
    /// `seq`.
    fn txn_batch(producer_id: i64, seq: i32, records: &[(&str, &str)], ts: i64) -> Vec<ValidBatch> {
        let records: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, (k, v))| Record {
                transactional: true,
                producer_id,
                producer_epoch: 0,
                sequence: seq + i as i32,
                ..record(i, k, Some(v), ts)
            })
            .collect();
        encode(&records, Compression::None)
    }

    /// Ends producer `producer_id`'s transaction; returns the marker's offset.
    fn end_txn(log: &mut Log, producer_id: i64, commit: bool, ts: i64) -> i64 {
        let marker = crate::log::producer_state::Marker {
            commit,
            coordinator_epoch: 0,
        };
        log.append_marker(producer_id, 0, marker, 0, 0, ts).unwrap().base_offset
    }

    /// Every batch of the log: its header and records (a marker's one record included).
    fn batches(log: &Log) -> Vec<(BatchHeader, Vec<Record>)> {
        let (mut next, end) = (log.log_start_offset(), log.log_end_offset());
        let mut out = Vec::new();
        while next < end {
            let bytes = log.read(next, end, 64 << 10, true).unwrap();
            assert!(!bytes.is_empty(), "read stuck at {next} of {end}");
            for (pos, header) in headers(&bytes) {
                if header.last_offset() < next {
                    continue;
                }
                let records = batch::decode_records(&bytes.slice(pos..pos + header.size))
                    .unwrap()
                    .records;
                next = header.last_offset() + 1;
                out.push((header, records));
            }
        }
        out
    }

    /// (key, value) of every data record, as read_uncommitted reads them.
    fn values(log: &Log) -> Vec<(String, String)> {
        let text = |b: &Option<Bytes>| String::from_utf8(b.clone().unwrap_or_default().to_vec()).unwrap();
        batches(log)
            .into_iter()
            .filter(|(h, _)| h.attributes & batch::CONTROL == 0)
            .flat_map(|(_, records)| records)
            .map(|r| (text(&r.key), text(&r.value)))
            .collect()
    }

    fn markers(log: &Log) -> usize {
        batches(log)
            .iter()
            .filter(|(h, _)| h.attributes & batch::CONTROL != 0)
            .count()
    }

    #[test]
    fn aborted_records_go_committed_ones_compact_and_markers_go_last() {
        // Kafka's cleaner on a transactional log: aborted batches are removed, committed ones
        // compact like any other, a marker goes once nothing of its transaction is left and
        // delete.retention.ms has passed, and each producer's last batch stays (emptied).
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        let old: Vec<(String, Option<String>)> = (0..10).map(|k| (format!("k{k}"), Some("old".into()))).collect();
        log.append(keyed(&old, NOW, Compression::None), 0, NOW).unwrap();
        // Producer 7 commits k0..k4; producer 8 aborts k5..k9 and a key of its own.
        let committed: Vec<(String, String)> = (0..5).map(|k| (format!("k{k}"), "committed".into())).collect();
        let pairs: Vec<(&str, &str)> = committed.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        log.append(txn_batch(7, 0, &pairs[..3], NOW), 0, NOW).unwrap();
        let aborted: Vec<(String, String)> = (5..10).map(|k| (format!("k{k}"), "aborted".into())).collect();
        let aborted_pairs: Vec<(&str, &str)> = aborted.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        log.append(txn_batch(8, 0, &aborted_pairs, NOW), 0, NOW).unwrap();
        log.append(txn_batch(7, 3, &pairs[3..], NOW), 0, NOW).unwrap();
        log.append(txn_batch(8, 5, &[("only-aborted", "aborted")], NOW), 0, NOW)
            .unwrap();
        end_txn(&mut log, 7, true, NOW);
        end_txn(&mut log, 8, false, NOW);
        roll_and_flush(&mut log);
        // Producer 7's second transaction overwrites k0 and k1; later plain records k0..k4.
        log.append(
            txn_batch(7, 5, &[("k0", "committed-2"), ("k1", "committed-2")], NOW),
            0,
            NOW,
        )
        .unwrap();
        end_txn(&mut log, 7, true, NOW);
        roll_and_flush(&mut log);
        assert_eq!(log.aborted_transactions(0, i64::MAX).len(), 1);
        let before = values(&log);
        assert_eq!(before.len(), 10 + 5 + 6 + 2);

        let stats = log.clean(&config(), NOW + 10).unwrap().unwrap();
        let mut after = values(&log);
        after.sort();
        let mut expected: Vec<(String, String)> =
            vec![("k0".into(), "committed-2".into()), ("k1".into(), "committed-2".into())];
        expected.extend((2..5).map(|k| (format!("k{k}"), "committed".into())));
        expected.extend((5..10).map(|k| (format!("k{k}"), "old".into())));
        expected.sort();
        assert_eq!(after, expected, "{stats:?}");
        assert_eq!(
            stats.records_removed,
            6 + 5 + 2,
            "aborted, and shadowed old and committed"
        );
        // The aborted transaction's records are gone, and with them its index entry.
        assert!(log.aborted_transactions(0, i64::MAX).is_empty());
        // Producer 8's last batch stays as an empty batch, so its abort marker stays too.
        let all = batches(&log);
        let empty: Vec<&BatchHeader> = all.iter().filter(|(_, r)| r.is_empty()).map(|(h, _)| h).collect();
        assert_eq!(empty.len(), 1, "{all:?}");
        assert_eq!((empty[0].producer_id, empty[0].base_sequence), (8, 5));
        assert_eq!(markers(&log), 3, "markers stay until delete.retention.ms");

        // Past delete.retention.ms, the commit marker of producer 7's first transaction goes
        // once no batch of it is left: its k0, k1 were shadowed, k2..k4 remain, so it stays.
        log.clean(&config(), NOW + 5_000).unwrap();
        assert_eq!(markers(&log), 3);
        // Plain records shadow the rest of the first transaction: its marker goes.
        let newer: Vec<(String, Option<String>)> = (2..5).map(|k| (format!("k{k}"), Some("new".into()))).collect();
        log.append(keyed(&newer, NOW + 5_000, Compression::None), 0, NOW + 5_000)
            .unwrap();
        roll_and_flush(&mut log);
        let stats = log.clean(&config(), NOW + 5_010).unwrap().unwrap();
        assert_eq!(stats.markers_removed, 1, "{stats:?}");
        assert_eq!(
            markers(&log),
            2,
            "the abort marker (producer 8's empty batch) and the last commit"
        );

        // Producer 10 aborts, then commits: its aborted batch is not its last, so it goes at
        // once, and its abort marker is due delete.retention.ms later. A pass over the clean
        // part alone (nothing new is written) removes it then.
        log.append(txn_batch(10, 0, &[("k9", "aborted")], NOW + 6_000), 0, NOW + 6_000)
            .unwrap();
        end_txn(&mut log, 10, false, NOW + 6_000);
        log.append(txn_batch(10, 1, &[("k9", "committed-10")], NOW + 6_000), 0, NOW + 6_000)
            .unwrap();
        end_txn(&mut log, 10, true, NOW + 6_000);
        roll_and_flush(&mut log);
        log.clean(&config(), NOW + 6_010).unwrap().unwrap();
        assert_eq!(markers(&log), 4);
        // The same producer id aborted, then committed: the committed record shadows k9's
        // older value, the aborted one shadows nothing.
        let now = values(&log);
        assert!(!now.contains(&("k9".into(), "aborted".into())));
        assert!(now.contains(&("k9".into(), "committed-10".into())) && !now.contains(&("k9".into(), "old".into())));
        assert!(log.clean(&config(), NOW + 6_500).unwrap().is_none(), "not due yet");
        let stats = log.clean(&config(), NOW + 7_100).unwrap().unwrap();
        assert_eq!(stats.markers_removed, 1, "{stats:?}");
        assert_eq!(markers(&log), 3);
        // A reopen finds the same log, no aborted transaction, and a stable LSO.
        let kept = values(&log);
        drop(log);
        let log = Log::open(dir.path(), log_config(), NOW).unwrap();
        assert_eq!(values(&log), kept);
        assert!(log.aborted_transactions(0, i64::MAX).is_empty());
        assert_eq!(log.first_unstable_offset(), None);
        assert!(!file_names(dir.path()).iter().any(|n| n.ends_with(".txnindex")));
    }

    #[test]
    fn an_open_transaction_bounds_what_is_cleaned() {
        // Kafka cleans only below the first unstable offset: an open transaction's records
        // may yet be aborted.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        append_records(&mut log, 0, 100, 10, NOW, Compression::None);
        roll_and_flush(&mut log);
        log.append(txn_batch(9, 0, &[("k0", "open")], NOW), 0, NOW).unwrap();
        roll_and_flush(&mut log);
        append_records(&mut log, 100, 100, 10, NOW, Compression::None);
        roll_and_flush(&mut log);
        let unstable = log.first_unstable_offset().unwrap();
        log.clean(&config(), NOW + 10).unwrap().unwrap();
        // Only the first segment was cleaned: 10 keys left there, everything after untouched.
        let rows = rows(&log);
        assert_eq!(rows.iter().filter(|r| r.0 < unstable).count(), 10);
        assert_eq!(rows.iter().filter(|r| r.0 > unstable).count(), 100);
        // Once it commits, the rest is cleanable (the committed record shadows nothing newer).
        end_txn(&mut log, 9, true, NOW + 20);
        roll_and_flush(&mut log);
        log.clean(&config(), NOW + 30).unwrap().unwrap();
        assert_eq!(values(&log).len(), 10);
    }

    #[test]
    fn cleaning_keeps_only_the_latest_record_of_each_key_at_its_offset() {
        // Kafka's LogCleaner: the latest value per key survives, with its original offset.
        let (dir, mut log, before) = ten_thousand_records();
        let segments_before = log.segments.len();
        let stats = log.clean(&config(), NOW).unwrap().unwrap();
        assert_eq!(stats.records_removed, 9_900);
        assert_eq!(stats.map_entries, 100);
        assert_eq!(stats.passes_needed, 1);
        assert_eq!(stats.segments, segments_before);
        assert!(stats.bytes_written < stats.bytes_read / 50, "{stats:?}");
        let after = rows(&log);
        assert_eq!(after, latest(&before));
        assert_eq!(after.first().unwrap().0, 9_900);
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 10_000));
        // Segments are grouped by their size before cleaning (Kafka's groupSegmentsBySize): the
        // first pass leaves empty ones...
        assert_eq!(log.segments.len(), segments_before);
        // ...every offset stays readable: a fetch in a compacted range gets the next batch...
        for offset in [0, 1, 5_000, 9_899, 9_900, 9_999] {
            let bytes = log.read(offset, 10_000, 1 << 20, true).unwrap();
            let first = BatchHeader::parse(&bytes).unwrap();
            assert!(first.last_offset() >= offset && first.base_offset >= 9_900, "{offset}");
        }
        assert_eq!(log.clean(&config(), NOW).unwrap(), None, "nothing dirty");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        // ...and the next pass merges them.
        append_records(&mut log, 10_000, 10, 100, NOW, Compression::None);
        roll_and_flush(&mut log);
        let expected = latest(&rows(&log));
        log.clean(&config(), NOW).unwrap().unwrap();
        assert_eq!(log.segments.len(), 1);
        assert_eq!(rows(&log), expected);

        // The cleaned log survives a reopen, with and without a clean shutdown.
        drop(log);
        let log = Log::open(dir.path(), log_config(), NOW).unwrap();
        assert_eq!(rows(&log), expected);
        log.close().unwrap();
        let log = Log::open(dir.path(), log_config(), NOW).unwrap();
        assert_eq!(rows(&log), expected);
        // Even with every index lost: recovery accepts the compacted segments' offset gaps.
        drop(log);
        for name in file_names(dir.path()) {
            if name.ends_with("index") {
                std::fs::remove_file(dir.path().join(name)).unwrap();
            }
        }
        std::fs::remove_file(dir.path().join(checkpoint::RECOVERY_POINT_FILE)).unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        assert_eq!(rows(&log), expected);
        let next = keyed(&[("k1".into(), Some("new".into()))], NOW, Compression::None);
        assert_eq!(log.append(next, 0, NOW).unwrap().base_offset, 10_010);
    }

    #[test]
    fn a_small_key_map_cleans_in_passes_to_the_same_result() {
        let (_dir, mut log, before) = ten_thousand_records_in_key_ranges();
        let small = CleanerConfig {
            key_map_bytes: 24 * 30, // 27 keys
            ..config()
        };
        let mut passes = 0;
        while let Some(stats) = log.clean(&small, NOW).unwrap() {
            assert!(stats.map_entries <= 27);
            passes += 1;
            assert!(passes < 100);
        }
        assert!((4..=6).contains(&passes), "{passes} passes");
        assert_eq!(rows(&log), latest(&before));
        assert!(OffsetMap::new(10).is_err());
    }

    #[test]
    fn tombstones_stay_for_delete_retention_ms_after_reaching_the_clean_part() {
        // Kafka's delete.retention.ms: consumers get time to see a delete before it goes.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        append_records(&mut log, 0, 100, 10, NOW, Compression::None);
        let deletes: Vec<(String, Option<String>)> = (0..3).map(|k| (format!("k{k}"), None)).collect();
        log.append(keyed(&deletes, NOW + 10, Compression::None), 0, NOW + 10)
            .unwrap();
        roll_and_flush(&mut log);
        let tombstones = |log: &Log| rows(log).iter().filter(|r| r.2.is_none()).count();

        log.clean(&config(), NOW + 5_000).unwrap().unwrap();
        // Dirty when cleaned: kept, and the values they delete are gone.
        assert_eq!(tombstones(&log), 3);
        assert_eq!(rows(&log).len(), 10);

        // k0..k2 come back with new values: their tombstones are superseded.
        append_records(&mut log, 100, 10, 10, NOW + 500, Compression::None);
        roll_and_flush(&mut log);
        log.clean(&config(), NOW + 900).unwrap().unwrap();
        assert_eq!(tombstones(&log), 0);

        let deletes: Vec<(String, Option<String>)> = (5..7).map(|k| (format!("k{k}"), None)).collect();
        log.append(keyed(&deletes, NOW + 1_000, Compression::None), 0, NOW + 1_000)
            .unwrap();
        roll_and_flush(&mut log);
        log.clean(&config(), NOW + 1_500).unwrap().unwrap();
        assert_eq!(tombstones(&log), 2);
        append_records(&mut log, 200, 1, 10, NOW + 1_600, Compression::None);
        roll_and_flush(&mut log);
        log.clean(&config(), NOW + 1_700).unwrap().unwrap();
        assert_eq!(tombstones(&log), 2, "clean part, younger than delete.retention.ms");
        append_records(&mut log, 201, 1, 10, NOW + 2_000, Compression::None);
        roll_and_flush(&mut log);
        log.clean(&config(), NOW + 2_001).unwrap().unwrap();
        assert_eq!(tombstones(&log), 0, "clean part, older than delete.retention.ms");
        let keys: Vec<Bytes> = rows(&log).into_iter().filter_map(|r| r.1).collect();
        assert!(!keys.contains(&Bytes::from("k5")) && !keys.contains(&Bytes::from("k6")));
        assert_eq!(keys.len(), 8);
    }

    #[test]
    fn min_compaction_lag_keeps_recent_segments_dirty() {
        // KIP-58: a segment holding a record younger than min.compaction.lag.ms is not cleaned.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        append_records(&mut log, 0, 1_000, 10, NOW, Compression::None);
        roll_and_flush(&mut log);
        let old_end = log.log_end_offset();
        append_records(&mut log, 1_000, 1_000, 10, NOW + 60_000, Compression::None);
        roll_and_flush(&mut log);
        let lagged = CleanerConfig {
            min_compaction_lag_ms: 30_000,
            ..config()
        };
        log.clean(&lagged, NOW + 60_000).unwrap().unwrap();
        let (old, recent): (Vec<Row>, Vec<Row>) = rows(&log).into_iter().partition(|r| r.0 < old_end);
        assert_eq!(old.len(), 10);
        assert_eq!(recent.len(), 1_000, "recent segments untouched");
        assert_eq!(log.clean(&lagged, NOW + 60_000).unwrap(), None);
        // Once old enough, they are cleaned too.
        log.clean(&lagged, NOW + 100_000).unwrap().unwrap();
        assert_eq!(rows(&log).len(), 10);
    }

    #[test]
    fn the_dirty_ratio_and_max_compaction_lag_decide_whether_to_clean() {
        let (_dir, mut log, _) = ten_thousand_records();
        log.clean(&config(), NOW).unwrap().unwrap();
        // A little dirty data on a clean log: below the ratio, nothing happens...
        append_records(&mut log, 10_000, 10, 100, NOW, Compression::None);
        roll_and_flush(&mut log);
        let strict = CleanerConfig {
            min_cleanable_dirty_ratio: 0.5,
            max_compaction_lag_ms: 60_000,
            ..config()
        };
        assert_eq!(log.clean(&strict, NOW + 1_000).unwrap(), None);
        // ...until it is older than max.compaction.lag.ms (KIP-354).
        assert!(log.clean(&strict, NOW + 61_000).unwrap().is_some());
    }

    #[test]
    fn compressed_batches_compact_and_keep_their_codec_and_timestamp_type() {
        for compression in [Compression::Gzip, Compression::Zstd] {
            let dir = TempDir::new().unwrap();
            let append_time = LogConfig {
                timestamp_type: TimestampType::LogAppendTime,
                ..log_config()
            };
            let mut log = Log::open(dir.path(), append_time, NOW).unwrap();
            // Batches of 10 over 15 keys: the batch of offsets 280..289 keeps 285..289.
            append_records(&mut log, 0, 300, 15, NOW - 5, compression);
            roll_and_flush(&mut log);
            let before = rows(&log);
            let stats = log.clean(&config(), NOW + 10).unwrap().unwrap();
            assert_eq!(stats.records_removed, 285);
            assert_eq!(rows(&log), latest(&before), "{compression:?}");
            let bytes = log.read(0, 300, 1 << 20, true).unwrap();
            let batches = headers(&bytes);
            assert_eq!(batches.len(), 2);
            for (pos, h) in &batches {
                assert_eq!(h.attributes & 0x7, compression as i16);
                assert!(h.is_log_append_time());
                assert_eq!(h.max_timestamp, NOW - 5, "the broker's append time stays");
                assert_eq!(batch::be_i32(&bytes[*pos..], 53), -1, "baseSequence");
            }
            assert_eq!((batches[0].1.base_offset, batches[0].1.last_offset()), (285, 289));
        }
    }

    #[test]
    fn a_batch_decompressing_past_max_message_bytes_is_kept_whole_at_the_cost_of_the_bound() {
        // Issue 10: a zstd batch of a few KB whose one record holds 256 MiB of zeros, stored
        // before Produce bounded decompression. The cleaner reads at most max.message.bytes of
        // it, keeps it as it is, and cleans the rest of the log around it.
        use crate::log::batch::bombs;
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        let value = |v: &str| Some(v.to_string());
        log.append(
            keyed(
                &[("k0".into(), value("old")), ("k1".into(), value("old"))],
                NOW,
                Compression::Zstd,
            ),
            0,
            NOW,
        )
        .unwrap();
        let bomb = bombs::batch(4, &bombs::huge_value(b"k0", 256 << 20));
        log.append(validate_batches(&bomb, 1 << 20).unwrap(), 0, NOW).unwrap();
        log.append(keyed(&[("k1".into(), value("new"))], NOW, Compression::Zstd), 0, NOW)
            .unwrap();
        roll_and_flush(&mut log);

        let before = bombs::vm_hwm_kib();
        log.clean(&config(), NOW).unwrap().unwrap();
        let grown_kib = bombs::vm_hwm_kib() - before;
        assert!(grown_kib < 96 << 10, "peak resident set grew by {grown_kib} KiB");

        let bytes = log.read(0, log.log_end_offset(), 1 << 20, true).unwrap();
        let batches = headers(&bytes);
        let bases: Vec<i64> = batches.iter().map(|(_, h)| h.base_offset).collect();
        assert_eq!(bases, [0, 2, 3], "every batch keeps a record");
        // The bomb as produced, but for the baseOffset the log gave it.
        let (pos, h) = batches[1];
        let mut stored = BytesMut::from(&bomb[..]);
        stored[..8].copy_from_slice(&2i64.to_be_bytes());
        assert!(bytes.slice(pos..pos + h.size) == stored, "the bomb is copied unchanged");
        // k0's old value stays (the bomb maps nothing); k1's goes (its new value is mapped).
        let first = batch::decode_records(&bytes.slice(..batches[0].1.size))
            .unwrap()
            .records;
        let kept: Vec<_> = first.iter().map(|r| (r.offset, r.key.clone().unwrap())).collect();
        assert_eq!(kept, [(0, Bytes::from("k0"))]);
    }

    #[test]
    fn the_active_segment_is_never_touched() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        append_records(&mut log, 0, 1_000, 10, NOW, Compression::None);
        flush(&mut log);
        assert!(!log.segments.is_empty());
        let active = dir.path().join(file_name(log.active.base_offset, "log"));
        let active_bytes = std::fs::read(&active).unwrap();
        assert!(!active_bytes.is_empty());
        log.clean(&config(), NOW).unwrap().unwrap();
        assert_eq!(std::fs::read(&active).unwrap(), active_bytes);
        let active_base = log.active.base_offset;
        let active_rows = rows(&log).into_iter().filter(|r| r.0 >= active_base).count();
        assert!(active_rows > 10, "duplicates in the active segment stay");
        // An active segment alone is never cleanable.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), log_config(), NOW).unwrap();
        append_records(&mut log, 0, 50, 5, NOW, Compression::None);
        flush(&mut log);
        assert_eq!(log.clean(&config(), NOW).unwrap(), None);
    }

    #[test]
    fn a_crash_at_any_step_of_the_swap_leaves_a_consistent_log() {
        // Kafka's LogLoader: `.cleaned` files are dropped, `.swap` ones finished. Several passes,
        // so that later ones swap groups of small cleaned segments into one.
        let (dir, mut log, before) = ten_thousand_records_in_key_ranges();
        let expected = latest(&before);
        let before: BTreeSet<Row> = before.into_iter().collect();
        let small = CleanerConfig {
            key_map_bytes: 24 * 60, // 54 keys: two quarters per pass
            ..config()
        };
        let mut grouped = false;
        for round in 0.. {
            let plan = log.prepare_clean(&small, NOW).unwrap().unwrap();
            grouped |= plan.groups.iter().any(|g| g.old.len() > 1);
            let mut states = vec![copy_dir(dir.path())];
            let stats = log
                .commit_clean_with(plan, &mut || states.push(copy_dir(dir.path())))
                .unwrap()
                .unwrap();
            let cleaned: BTreeSet<Row> = rows(&log).into_iter().collect();
            for (step, state) in states.iter().enumerate() {
                let at = format!("round {round} step {step}");
                let reopened = Log::open(state.path(), log_config(), NOW).unwrap();
                let got: BTreeSet<Row> = rows(&reopened).into_iter().collect();
                // Offsets once each (rows), nothing invented, nothing lost beyond compaction.
                assert!(got.is_subset(&before), "{at}");
                assert!(got.is_superset(&cleaned), "{at}");
                assert_eq!(reopened.log_end_offset(), 10_000, "{at}");
                assert_eq!(leftovers(state.path()), Vec::<String>::new(), "{at}");
                // And cleaning carries on from there to the same result.
                drop(reopened);
                let mut reopened = Log::open(state.path(), log_config(), NOW).unwrap();
                while reopened.clean(&config(), NOW).unwrap().is_some() {}
                assert_eq!(rows(&reopened), expected, "{at}");
            }
            if stats.passes_needed == 1 {
                break;
            }
        }
        assert!(grouped);
        assert_eq!(rows(&log), expected);
    }

    #[test]
    fn a_plan_dropped_or_outdated_leaves_no_files() {
        let (dir, mut log, before) = ten_thousand_records();
        let plan = log.prepare_clean(&config(), NOW).unwrap().unwrap();
        assert!(file_names(dir.path()).iter().any(|n| n.ends_with(CLEANED_SUFFIX)));
        drop(plan);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(rows(&log), before);
        // The log changed between prepare and commit: the plan is not applied.
        let plan = log.prepare_clean(&config(), NOW).unwrap().unwrap();
        let first = log.segments.remove(0);
        assert_eq!(log.commit_clean(plan).unwrap(), None);
        log.segments.insert(0, first);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(rows(&log), before);
    }

    #[test]
    fn a_plan_made_on_a_snapshot_the_log_changed_under_is_refused() {
        // Unique keys: a pass keeps every record, so the segments it swaps in have the offsets
        // of those it read; only their identity tells that a plan read replaced segments.
        let (dir, mut log, before) = ten_thousand_records_keyed(|i| format!("u{i}"));
        let offsets = |log: &Log| {
            log.segments
                .iter()
                .map(|s| (s.base_offset, s.next_offset))
                .collect::<Vec<_>>()
        };
        let was = offsets(&log);
        let stale = log.clean_source().prepare_clean(&config(), NOW).unwrap().unwrap();
        // Another pass swaps first (its files replace the stale plan's `.cleaned` ones).
        log.clean(&config(), NOW).unwrap().unwrap();
        assert_eq!(offsets(&log), was, "a pass keeping everything keeps the offsets");
        assert_eq!(log.commit_clean(stale).unwrap(), None);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(rows(&log), before);

        // Retention between prepare and commit: the plan read segments that are gone.
        append_keyed(
            &mut log,
            10_000,
            2_000,
            |i| format!("u{}", i % 10),
            NOW,
            Compression::None,
        );
        roll_and_flush(&mut log);
        let source = log.clean_source();
        let second = log.segments[1].base_offset;
        log.delete_records_before(second).unwrap();
        let plan = source.prepare_clean(&config(), NOW).unwrap().unwrap();
        assert_eq!(log.commit_clean(plan).unwrap(), None);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        let kept: Vec<Row> = rows(&log);
        assert_eq!(kept.first().map(|r| r.0), Some(second));
        assert_eq!(kept.len(), 12_000 - usize::try_from(second).unwrap());
        // The writer's next pass, on a fresh snapshot, goes through.
        assert!(log.clean(&config(), NOW).unwrap().is_some());
    }

    #[test]
    fn a_truncation_refuses_older_plans_and_lowers_the_checkpoint() {
        // Kafka aborts cleaning around a truncation and truncates the cleaner checkpoint
        // (LogManager.truncateTo, LogCleanerManager.maybeTruncateCheckpoint).
        let (dir, mut log, _) = ten_thousand_records();
        log.clean(&config(), NOW).unwrap().unwrap();
        append_records(&mut log, 10_000, 2_000, 100, NOW, Compression::None);
        roll_and_flush(&mut log);
        append_records(&mut log, 12_000, 50, 100, NOW, Compression::None);
        let stale = log.prepare_clean(&config(), NOW).unwrap().unwrap();
        // A cut inside the active segment leaves every segment the plan read as it was.
        let sealed: Vec<u64> = log.segments.iter().map(|s| s.shared().id).collect();
        log.truncate_to(12_020).unwrap();
        assert_eq!(log.segments.iter().map(|s| s.shared().id).collect::<Vec<_>>(), sealed);
        let before = rows(&log);
        assert_eq!(log.commit_clean(stale).unwrap(), None);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(rows(&log), before);
        assert!(
            log.clean(&config(), NOW).unwrap().is_some(),
            "a fresh plan goes through"
        );
        // Below the clean part: the checkpoint comes down with the log.
        assert!(read_checkpoint(dir.path()).unwrap().clean_end > 2_000);
        log.truncate_to(2_000).unwrap();
        // Compaction left nothing below 2,000 in the first segment: it ends where the last
        // batch kept ends (here its base), not inside the gap.
        let end = log.log_end_offset();
        assert!(end <= 2_000, "{end}");
        let checkpointed = read_checkpoint(dir.path()).unwrap();
        assert!(
            checkpointed.clean_end <= end && checkpointed.compacted_below <= end,
            "{checkpointed:?}"
        );
        let kept = rows(&log);
        drop(log);
        let log = Log::open(dir.path(), log_config(), NOW).unwrap();
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(rows(&log), kept);
    }

    /// Throughput and memory: 1M records over 1k keys, 100-byte values. Run with
    /// `cargo test --release --lib log::cleaner::tests::cleaning_throughput -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cleaning_throughput() {
        fn vm_hwm_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        let dir = TempDir::new().unwrap();
        let big = LogConfig {
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let mut log = Log::open(dir.path(), big, NOW).unwrap();
        let value = "x".repeat(100);
        for b in 0..10_000 {
            let records: Vec<(String, Option<String>)> = (0..100)
                .map(|i| (format!("key-{}", (b * 100 + i) % 1_000), Some(value.clone())))
                .collect();
            log.append(keyed(&records, NOW, Compression::None), 0, NOW).unwrap();
        }
        roll_and_flush(&mut log);
        let log_bytes: u64 = log.segments.iter().map(|s| s.size).sum();
        let hwm_before = vm_hwm_kib();
        let cleaner = CleanerConfig {
            key_map_bytes: 16 << 20,
            ..config()
        };
        let started = std::time::Instant::now();
        let stats = log.clean(&cleaner, NOW).unwrap().unwrap();
        let elapsed = started.elapsed();
        let hwm_after = vm_hwm_kib();
        let mb = log_bytes as f64 / 1e6;
        println!(
            "cleaned {mb:.1} MB ({} segments) in {:.3} s: {:.0} MB/s of log; read {:.1} MB, wrote {:.3} MB, \
             removed {} records, {} keys in a {} MiB map; VmHWM {hwm_before} -> {hwm_after} KiB (+{} KiB)",
            stats.segments,
            elapsed.as_secs_f64(),
            mb / elapsed.as_secs_f64(),
            stats.bytes_read as f64 / 1e6,
            stats.bytes_written as f64 / 1e6,
            stats.records_removed,
            stats.map_entries,
            cleaner.key_map_bytes >> 20,
            hwm_after - hwm_before,
        );
        assert_eq!(stats.records_removed, 999_000);
    }
}
