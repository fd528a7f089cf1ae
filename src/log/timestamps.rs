//! Lookups by timestamp: ListOffsets at a timestamp and the max-timestamp spec (-3), through
//! the time index, decoding the batch that holds the answer.

use bytes::Bytes;

use super::batch::{self, BatchHeader};
use super::segment::SegmentRef;
use super::{Log, LogSnapshot};
use crate::error::{Error, Result};

impl Log {
    /// `LogSnapshot::offset_for_timestamp` on the current snapshot.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>> {
        self.snapshot().offset_for_timestamp(timestamp_ms)
    }

    /// `LogSnapshot::max_timestamp` on the current snapshot.
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        self.snapshot().max_timestamp()
    }
}

impl LogSnapshot {
    /// ListOffsets by timestamp: the offset and timestamp of the first record whose timestamp is
    /// at least `timestamp_ms` (through the time index), or None when there is none.
    ///
    /// Returns `(offset, timestamp)`. Kafka's `UnifiedLog.fetchOffsetByTimestamp`: the first
    /// segment whose max timestamp reaches the target, then the first batch there whose
    /// maxTimestamp does, decoded to find the record.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>> {
        // Records below the log start are not served (Kafka's LogSegment.findOffsetByTimestamp
        // with `startingOffset = logStartOffset`).
        let log_start = self.log_start_offset();
        let segments = self.segments();
        for segment in segments.all() {
            if segment.size == 0 || segment.next_offset <= log_start || segment.max_timestamp < timestamp_ms {
                continue;
            }
            let mut from = segment.timestamp_scan_start(timestamp_ms);
            let wanted = |h: &BatchHeader| h.max_timestamp >= timestamp_ms && h.last_offset() >= log_start;
            while let Some((position, header)) = segment.scan(from, wanted)? {
                let bytes = segment.read_at(position, header.size)?;
                if let Some(found) = find_record(bytes, &header, log_start, |ts| ts >= timestamp_ms)? {
                    return Ok(Some(found));
                }
                // A producer's maxTimestamp above its records' timestamps: keep looking.
                from = position + header.size as u64;
            }
        }
        Ok(None)
    }

    /// ListOffsets max timestamp (-3): the largest timestamp in the log and the offset of the
    /// record that carries it, or None for an empty log.
    ///
    /// Returns `(timestamp, offset)`. As Kafka 4 (KIP-734, KAFKA-16310): the first record with
    /// the largest timestamp, found by decoding its batch; for LogAppendTime every record
    /// carries the batch's timestamp, so the first record of the batch.
    /// Only records at or above the log start count; the first segment, when it straddles the
    /// log start, is scanned batch by batch (its max timestamp may be a deleted record's).
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let log_start = self.log_start_offset();
        let segments = self.segments();
        let mut straddling = None;
        let mut best: Option<&SegmentRef> = None;
        for segment in segments.all() {
            if segment.size == 0 || segment.next_offset <= log_start {
                continue;
            }
            if segment.base_offset < log_start {
                straddling = max_timestamp_from(segment, log_start)?;
            } else if segment.max_timestamp >= 0 && best.is_none_or(|b| segment.max_timestamp > b.max_timestamp) {
                best = Some(segment);
            }
        }
        let Some(segment) = best else { return Ok(straddling) };
        let target = segment.max_timestamp;
        // The straddling segment holds earlier offsets: it wins ties.
        if let Some((ts, offset)) = straddling
            && ts >= target
        {
            return Ok(Some((ts, offset)));
        }
        if let Some((position, header)) = segment.find_batch(segment.offset_of_max_timestamp)? {
            let bytes = segment.read_at(position, header.size)?;
            if let Some((offset, _)) = find_record(bytes, &header, log_start, |ts| ts == target)? {
                return Ok(Some((target, offset)));
            }
        }
        Ok(Some((target, segment.offset_of_max_timestamp)))
    }
}

/// The offset and timestamp of the first record of the batch `bytes` at or after `from_offset`
/// whose timestamp `matches`.
fn find_record(
    bytes: Vec<u8>,
    header: &BatchHeader,
    from_offset: i64,
    matches: impl Fn(i64) -> bool,
) -> Result<Option<(i64, i64)>> {
    Ok(records_from(bytes, header, from_offset)?
        .into_iter()
        .find(|&(_, ts)| matches(ts)))
}

/// The (offset, timestamp) of each record of the batch `bytes` at or after `from_offset`.
fn records_from(bytes: Vec<u8>, header: &BatchHeader, from_offset: i64) -> Result<Vec<(i64, i64)>> {
    if header.is_log_append_time() {
        // Kafka's DefaultRecordBatch gives every record of a LogAppendTime batch the batch's
        // maxTimestamp; the record deltas still hold the producer's times.
        let ts = header.max_timestamp;
        return Ok((header.base_offset.max(from_offset)..=header.last_offset())
            .map(|offset| (offset, ts))
            .collect());
    }
    let bytes = Bytes::from(bytes);
    let records = batch::decode_records(&bytes)
        .map_err(|e| Error::CorruptBatch(format!("cannot decode batch at offset {}: {e:#}", header.base_offset)))?;
    Ok(records
        .records
        .iter()
        .filter(|r| r.offset >= from_offset)
        .map(|r| (r.offset, r.timestamp))
        .collect())
}

/// The largest timestamp among the records of `segment` at or after `from_offset` and the first
/// record carrying it, as `(timestamp, offset)`: the batch holding `from_offset` is decoded,
/// later batches are compared by their headers' maxTimestamp.
fn max_timestamp_from(segment: &SegmentRef, from_offset: i64) -> Result<Option<(i64, i64)>> {
    let Some((position, first)) = segment.find_batch(from_offset)? else {
        return Ok(None);
    };
    let mut best = None::<(i64, i64)>;
    for (offset, ts) in records_from(segment.read_at(position, first.size)?, &first, from_offset)? {
        if ts >= 0 && best.is_none_or(|(b, _)| ts > b) {
            best = Some((ts, offset));
        }
    }
    // Later batches win only with a strictly larger timestamp: ties go to the earlier record.
    let mut floor = best.map_or(-1, |(ts, _)| ts);
    let mut best_later = None;
    let mut from = position + first.size as u64;
    while let Some((at, header)) = segment.scan(from, |h| h.max_timestamp > floor)? {
        from = at + header.size as u64;
        floor = header.max_timestamp;
        best_later = Some((at, header));
    }
    if let Some((at, header)) = best_later {
        let target = header.max_timestamp;
        let bytes = segment.read_at(at, header.size)?;
        let found = find_record(bytes, &header, from_offset, |ts| ts == target)?;
        return Ok(Some(
            found.map_or((target, header.last_offset()), |(offset, ts)| (ts, offset)),
        ));
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::log::LogConfig;
    use crate::log::batch::tests::{encode_batch, encode_batch_with};
    use crate::log::test_support::*;
    use kafka_protocol::records::Compression;
    use tempfile::TempDir;

    #[test]
    fn offset_for_timestamp_finds_the_first_record_at_or_after_the_target() {
        // Kafka's UnifiedLog.fetchOffsetByTimestamp: first record with timestamp >= target.
        let dir = TempDir::new().unwrap();
        let config = LogConfig {
            index_interval_bytes: 200,
            ..small_segments()
        };
        let mut log = Log::open(dir.path(), config, NOW).unwrap();
        for i in 0..30 {
            // Timestamps 100*i + {0, 10, 20}; out of order within a batch in one of them.
            let ts = if i == 7 {
                vec![720, 700, 710]
            } else {
                vec![100 * i, 100 * i + 10, 100 * i + 20]
            };
            log.append(valid(encode_batch(&ts, 100)), 0, NOW).unwrap();
        }
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 0)));
        assert_eq!(log.offset_for_timestamp(5).unwrap(), Some((1, 10)));
        assert_eq!(log.offset_for_timestamp(1_505).unwrap(), Some((46, 1_510)));
        assert_eq!(log.offset_for_timestamp(2_900).unwrap(), Some((87, 2_900)));
        assert_eq!(log.offset_for_timestamp(715).unwrap(), Some((21, 720)));
        assert_eq!(log.offset_for_timestamp(2_921).unwrap(), None);
        for target in (0..2_920).step_by(37) {
            let (offset, ts) = log.offset_for_timestamp(target).unwrap().unwrap();
            assert!(ts >= target);
            // No earlier record qualifies (timestamps are monotonic except in batch 7).
            if !(700..=720).contains(&target) {
                let prev = offset - 1;
                if prev >= 0 {
                    let prev_ts = if (21..24).contains(&prev) {
                        [720, 700, 710][(prev - 21) as usize]
                    } else {
                        100 * (prev / 3) + 10 * (prev % 3)
                    };
                    assert!(prev_ts < target, "target {target}: {offset} but {prev} has {prev_ts}");
                }
            }
        }
    }

    #[test]
    fn offset_for_timestamp_decodes_compressed_batches() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(valid(encode_batch_with(&[1, 2, 3], 50, Compression::Gzip)), 0, NOW)
            .unwrap();
        log.append(valid(encode_batch_with(&[4, 9, 5], 50, Compression::Lz4)), 0, NOW)
            .unwrap();
        assert_eq!(log.offset_for_timestamp(2).unwrap(), Some((1, 2)));
        assert_eq!(log.offset_for_timestamp(6).unwrap(), Some((4, 9)));
        assert_eq!(log.max_timestamp().unwrap(), Some((9, 4)));
    }

    #[test]
    fn max_timestamp_names_the_first_record_carrying_it() {
        // Kafka 4 (KAFKA-16310): the offset of the record with the max timestamp, first on ties.
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), small_segments(), NOW).unwrap();
        for i in 0..10 {
            log.append(valid(encode_batch(&[i, 50 + i, i], 100)), 0, NOW).unwrap();
        }
        log.append(valid(encode_batch(&[3, 90, 90], 100)), 0, NOW).unwrap();
        for i in 0..10 {
            log.append(valid(encode_batch(&[i, 90, i], 100)), 0, NOW).unwrap();
        }
        assert!(segment_files(dir.path(), "log").len() > 1);
        assert_eq!(log.max_timestamp().unwrap(), Some((90, 31)));
    }

    #[test]
    fn max_timestamp_ignores_records_below_the_log_start() {
        let dir = TempDir::new().unwrap();
        let mut log = Log::open(dir.path(), LogConfig::default(), NOW).unwrap();
        log.append(valid(encode_batch(&[100, 500, 100], 100)), 0, NOW).unwrap();
        log.append(valid(encode_batch(&[200, 300, 300], 100)), 0, NOW).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), Some((500, 1)));
        log.delete_records_before(2).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), Some((300, 4)));
        assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((2, 100)));
        log.delete_records_before(5).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), Some((300, 5)));
        log.delete_records_before(6).unwrap();
        assert_eq!(log.max_timestamp().unwrap(), None);
        assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    }
}
