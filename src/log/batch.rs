//! Record batch (magic 2) validation and header access. A batch is kept as the producer's
//! bytes; only baseOffset, partitionLeaderEpoch and (LogAppendTime) maxTimestamp are rewritten.
//!
//! Layout (big-endian, Kafka's `DefaultRecordBatch`): baseOffset i64 @0, batchLength i32 @8
//! (bytes after this field), partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17 (CRC32C of
//! the bytes from @21 to the end), attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp
//! i64 @27, maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51, baseSequence i32
//! @53, recordsCount i32 @57, records @61.
//!
//! Compressed records are decompressed in one place, `records_section`, into at most a bound the
//! caller passes (the topic's max.message.bytes on Produce and in the cleaner): a batch of a few
//! KB may claim gigabytes of records (issue 10).

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use crate::error::{Error, Result};

/// Bytes of the header every magic-2 batch starts with (Kafka's `RECORD_BATCH_OVERHEAD`).
pub const HEADER_LEN: usize = 61;
/// baseOffset and batchLength: the prefix that frames a batch (Kafka's `LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;

pub(crate) const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
pub(crate) const PARTITION_LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
pub(crate) const CRC: usize = 17;
pub(crate) const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
pub(crate) const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORDS_COUNT: usize = 57;

const _: () = assert!(RECORDS_COUNT + 4 == HEADER_LEN);
const _: () = assert!(LOG_OVERHEAD == BATCH_LENGTH + 4);

/// The one record format this broker stores.
pub const MAGIC_V2: i8 = 2;
/// Attributes bit 3: timestamps are the broker's append time.
pub(crate) const TIMESTAMP_TYPE_LOG_APPEND: i16 = 1 << 3;
pub(crate) const TRANSACTIONAL: i16 = 1 << 4;
pub(crate) const CONTROL: i16 = 1 << 5;
const COMPRESSION_MASK: i16 = 0x7;
/// zstd (4) is the highest codec Kafka defines; 5..7 are invalid.
const COMPRESSION_MAX: i16 = 4;
/// The smallest batchLength a magic-2 batch can have: its header without the framing prefix.
const MIN_BATCH_LENGTH: usize = HEADER_LEN - LOG_OVERHEAD;

/// A record batch that passed validation: magic 2, batchLength consistent with the bytes,
/// CRC32C correct, record count matching lastOffsetDelta + 1 (non-compacted input), size within
/// `max.message.bytes`. Only `validate_batches` makes one.
#[derive(Debug, Clone)]
pub struct ValidBatch {
    bytes: Bytes,
}

impl ValidBatch {
    /// The batch bytes as the producer sent them.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
    /// Number of offsets the batch occupies (lastOffsetDelta + 1).
    pub fn offset_count(&self) -> i64 {
        i64::from(be_i32(&self.bytes, LAST_OFFSET_DELTA)) + 1
    }
    pub fn max_timestamp(&self) -> i64 {
        be_i64(&self.bytes, MAX_TIMESTAMP)
    }
    /// The first timestamp of the batch (records carry deltas from it).
    pub fn base_timestamp(&self) -> i64 {
        be_i64(&self.bytes, BASE_TIMESTAMP)
    }
    /// The batch's baseOffset as the producer sent it (the log overwrites it on append).
    pub fn base_offset(&self) -> i64 {
        be_i64(&self.bytes, BASE_OFFSET)
    }
    pub fn records_count(&self) -> i32 {
        be_i32(&self.bytes, RECORDS_COUNT)
    }
    /// The epoch of the leader that wrote the batch (the log stamps it on append).
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(&self.bytes, PARTITION_LEADER_EPOCH)
    }
    pub fn attributes(&self) -> i16 {
        be_i16(&self.bytes, ATTRIBUTES)
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL != 0
    }
    pub fn producer_id(&self) -> i64 {
        be_i64(&self.bytes, PRODUCER_ID)
    }
    pub fn producer_epoch(&self) -> i16 {
        be_i16(&self.bytes, PRODUCER_EPOCH)
    }
    pub fn base_sequence(&self) -> i32 {
        be_i32(&self.bytes, BASE_SEQUENCE)
    }
    /// Total size in bytes (batchLength + 12).
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

/// Splits a Produce partition's `records` into validated batches. Fails (and nothing is
/// appended) when any batch is corrupt (`CorruptBatch`), not magic 2 (`UnsupportedMagic`), or
/// larger than `max_message_bytes` (`MessageTooLarge`). An empty input is `CorruptBatch`.
pub fn validate_batches(records: &Bytes, max_message_bytes: usize) -> Result<Vec<ValidBatch>> {
    validate_with(records, max_message_bytes, check)
}

/// `validate_batches` for the batches a compacted log's follower copies from its leader, as
/// Kafka's `LogValidator` checks replicated batches: framing, magic 2 and CRC32C as there,
/// but the record count only bounded by the offset range (`check_compacted`, what recovery
/// applies to cleaner output: the leader's cleaner left some offsets of a batch unused), and
/// no size bound (the leader accepted the batch).
pub(crate) fn validate_compacted_batches(records: &Bytes) -> Result<Vec<ValidBatch>> {
    validate_with(records, usize::MAX, check_compacted)
}

fn validate_with(
    records: &Bytes,
    max_message_bytes: usize,
    check: fn(&[u8]) -> Result<BatchHeader>,
) -> Result<Vec<ValidBatch>> {
    if records.is_empty() {
        return Err(Error::CorruptBatch("no record batch in the records field".into()));
    }
    let mut batches = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let rest = &records[pos..];
        let size = frame(rest, rest.len())?;
        // Kafka checks the size before the CRC (UnifiedLog.analyzeAndValidateRecords), so an
        // oversized batch is reported as such even when it is also corrupt.
        if size > max_message_bytes {
            return Err(Error::MessageTooLarge {
                size,
                max: max_message_bytes,
            });
        }
        check(&rest[..size])?;
        batches.push(ValidBatch {
            bytes: records.slice(pos..pos + size),
        });
        pos += size;
    }
    Ok(batches)
}

/// One past the last offset of the last whole batch in `records` (as read from the log), or
/// None when it holds no whole batch.
pub fn end_offset(records: &Bytes) -> Option<i64> {
    batches(records)
        .map_while(Result::ok)
        .last()
        .map(|(header, _)| header.last_offset() + 1)
}

/// The whole batches at the start of `records` (a read of the log), each with its header; see
/// `Batches`.
pub(crate) fn batches(records: &Bytes) -> Batches {
    Batches {
        records: records.clone(),
        pos: 0,
        failed: false,
    }
}

/// Iterator over the batches of a log read, yielding each batch's header and bytes (framing
/// prefix included). It ends at the end of the input or at a partial trailing batch (a read cut
/// by its byte budget ends inside a batch, as a Fetch response may). A batch whose framing is
/// impossible (negative length, shorter than a header) is a `CorruptBatch` error, after which it
/// ends. Only the framing is checked, not the CRC: the log checked that on append and recovery.
#[derive(Debug, Clone)]
pub(crate) struct Batches {
    records: Bytes,
    pos: usize,
    failed: bool,
}

impl Iterator for Batches {
    type Item = Result<(BatchHeader, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.records.get(self.pos..)?;
        if self.failed || rest.len() < LOG_OVERHEAD {
            return None;
        }
        let parsed = batch_size(rest).and_then(|size| {
            if size > rest.len() {
                return Ok(None);
            }
            if size < HEADER_LEN {
                return Err(Error::CorruptBatch(format!(
                    "batch of {size} bytes is below the header"
                )));
            }
            BatchHeader::parse(&rest[..size]).map(Some)
        });
        match parsed {
            Ok(Some(header)) => {
                let bytes = self.records.slice(self.pos..self.pos + header.size);
                self.pos += header.size;
                Some(Ok((header, bytes)))
            }
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The header fields the log needs to index, scan and locate batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub base_offset: i64,
    /// Total bytes of the batch, framing prefix included.
    pub size: usize,
    pub last_offset_delta: i32,
    pub max_timestamp: i64,
    pub attributes: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// The records count field (not checked against the records: `check` does that).
    pub records_count: i32,
}

impl BatchHeader {
    /// Reads the header fields from the first `HEADER_LEN` bytes of `header`, checking only what
    /// scanning needs (a plausible length); full validation is `frame` + `check`.
    pub fn parse(header: &[u8]) -> Result<BatchHeader> {
        if header.len() < HEADER_LEN {
            return Err(Error::CorruptBatch(format!(
                "partial batch header: {} of {HEADER_LEN} bytes",
                header.len()
            )));
        }
        let size = batch_size(header)?;
        if size < HEADER_LEN {
            return Err(Error::CorruptBatch(format!(
                "batch of {size} bytes is below the header"
            )));
        }
        Ok(BatchHeader {
            base_offset: be_i64(header, BASE_OFFSET),
            size,
            last_offset_delta: be_i32(header, LAST_OFFSET_DELTA),
            max_timestamp: be_i64(header, MAX_TIMESTAMP),
            attributes: be_i16(header, ATTRIBUTES),
            producer_id: be_i64(header, PRODUCER_ID),
            producer_epoch: be_i16(header, PRODUCER_EPOCH),
            base_sequence: be_i32(header, BASE_SEQUENCE),
            records_count: be_i32(header, RECORDS_COUNT),
        })
    }

    /// The batch's last offset, saturating: a header read from a damaged file below the
    /// recovery point (which recovery does not validate) may claim offsets past `i64::MAX`, and
    /// a read that scans it must not panic (`checked_next_offset` tells such a batch apart).
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }

    /// The offset after the batch, None when its offsets are negative or do not fit in an
    /// `i64` with it. A batch whose base offset is not the expected one (a gap a cleaner left,
    /// or a damaged header) is checked with this before `last_offset` is trusted.
    pub fn checked_next_offset(&self) -> Option<i64> {
        if self.base_offset < 0 || self.last_offset_delta < 0 {
            return None;
        }
        self.base_offset
            .checked_add(i64::from(self.last_offset_delta))?
            .checked_add(1)
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_LOG_APPEND != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL != 0
    }
}

/// The total size of the batch starting at `prefix` (which holds at least its framing prefix).
fn batch_size(prefix: &[u8]) -> Result<usize> {
    let length = be_i32(prefix, BATCH_LENGTH);
    usize::try_from(length)
        .ok()
        .and_then(|l| l.checked_add(LOG_OVERHEAD))
        .ok_or_else(|| Error::CorruptBatch(format!("negative batch length {length}")))
}

/// Frames the batch at the start of `prefix` (its first bytes, up to the whole rest of the
/// input) when `available` bytes remain in the input from its start: returns its total size
/// after checking that it is complete and magic 2. The order mirrors Kafka's
/// `ByteBufferLogInputStream`: framing first, then magic, so a v0/v1 message set (shorter than
/// a v2 header) is reported as an unsupported format rather than as corrupt.
pub(crate) fn frame(prefix: &[u8], available: usize) -> Result<usize> {
    if prefix.len() <= MAGIC || available <= MAGIC {
        return Err(Error::CorruptBatch(format!(
            "partial batch: {available} trailing bytes"
        )));
    }
    let size = batch_size(prefix)?;
    if size <= MAGIC {
        return Err(Error::CorruptBatch(format!("batch of {size} bytes is too small")));
    }
    if size > available {
        return Err(Error::CorruptBatch(format!(
            "partial batch: {size} bytes announced, {available} present"
        )));
    }
    let magic = i8::from_be_bytes([prefix[MAGIC]]);
    if magic != MAGIC_V2 {
        return Err(Error::UnsupportedMagic(magic));
    }
    if size - LOG_OVERHEAD < MIN_BATCH_LENGTH {
        return Err(Error::CorruptBatch(format!(
            "batch length {} below the minimum {MIN_BATCH_LENGTH}",
            size - LOG_OVERHEAD
        )));
    }
    Ok(size)
}

/// Checks one framed magic-2 batch (exactly its bytes): CRC32C, compression codec, and a record
/// count equal to lastOffsetDelta + 1 (Kafka's LogValidator rejects any other count).
pub(crate) fn check(batch: &[u8]) -> Result<BatchHeader> {
    let header = check_compacted(batch)?;
    let count = be_i32(batch, RECORDS_COUNT);
    if i64::from(count) != i64::from(header.last_offset_delta) + 1 {
        return Err(Error::CorruptBatch(format!(
            "record count {count} does not match lastOffsetDelta {}",
            header.last_offset_delta
        )));
    }
    Ok(header)
}

/// `check` for a batch the log cleaner rewrote (Kafka's `MemoryRecords.filterTo` output): its
/// records may leave offsets of its range unused, so the count is only bounded by the range.
pub(crate) fn check_compacted(batch: &[u8]) -> Result<BatchHeader> {
    let header = BatchHeader::parse(batch)?;
    if header.size != batch.len() {
        return Err(Error::CorruptBatch(format!(
            "batch length says {} bytes, {} framed",
            header.size,
            batch.len()
        )));
    }
    let stored = be_u32(batch, CRC);
    let computed = crate::crc::crc32c(&batch[ATTRIBUTES..]);
    if stored != computed {
        return Err(Error::CorruptBatch(format!(
            "CRC32C mismatch: stored {stored:#010x}, computed {computed:#010x}"
        )));
    }
    let compression = header.attributes & COMPRESSION_MASK;
    if compression > COMPRESSION_MAX {
        return Err(Error::CorruptBatch(format!("unknown compression codec {compression}")));
    }
    let count = be_i32(batch, RECORDS_COUNT);
    // A batch must own at least one offset, else the offsets after it would repeat.
    if header.last_offset_delta < 0 || count < 0 || i64::from(count) > i64::from(header.last_offset_delta) + 1 {
        return Err(Error::CorruptBatch(format!(
            "record count {count} does not match lastOffsetDelta {}",
            header.last_offset_delta
        )));
    }
    Ok(header)
}

/// The number of records a framed batch says it holds.
pub(crate) fn record_count(batch: &[u8]) -> i32 {
    be_i32(batch, RECORDS_COUNT)
}

/// A batch with the header of `batch` and no records (Kafka's `writeEmptyHeader`, which the
/// cleaner uses to keep a producer's last batch once its records are gone): the same offsets,
/// producer fields, flags and timestamps, uncompressed.
pub(crate) fn empty_of(batch: &[u8]) -> Bytes {
    let mut out = BytesMut::from(&batch[..HEADER_LEN]);
    let length = i32::try_from(HEADER_LEN - LOG_OVERHEAD).unwrap_or(i32::MAX);
    out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    let attributes = be_i16(&out, ATTRIBUTES) & !COMPRESSION_MASK;
    out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    out[RECORDS_COUNT..HEADER_LEN].copy_from_slice(&0i32.to_be_bytes());
    seal_crc(&mut out);
    out.freeze()
}

/// Sets a batch's lastOffsetDelta (Kafka's cleaner keeps a rewritten batch's last offset, so
/// that the producer's last sequence stays readable from the log) and its CRC.
pub(crate) fn set_last_offset_delta(batch: &mut [u8], delta: i32) {
    batch[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&delta.to_be_bytes());
    seal_crc(batch);
}

/// Recomputes the CRC32C of a batch whose fields after the CRC changed.
pub(crate) fn seal_crc(batch: &mut [u8]) {
    let crc = crate::crc::crc32c(&batch[ATTRIBUTES..]);
    batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

// Field readers. Callers hold at least `HEADER_LEN` bytes (a framed batch or a header read),
// so the ranges are in bounds.
pub(crate) fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}
pub(crate) fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}
pub(crate) fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}
pub(crate) fn be_i16(b: &[u8], at: usize) -> i16 {
    let mut a = [0; 2];
    a.copy_from_slice(&b[at..at + 2]);
    i16::from_be_bytes(a)
}

/// Copies the header of `batch` with the fields the broker owns rewritten: baseOffset,
/// partitionLeaderEpoch, and for LogAppendTime the timestamp type and maxTimestamp, with the
/// CRC recomputed (it covers attributes and maxTimestamp, not baseOffset or the epoch).
pub(crate) fn stamped_header(
    batch: &ValidBatch,
    base_offset: i64,
    leader_epoch: i32,
    log_append_time_ms: Option<i64>,
) -> [u8; HEADER_LEN] {
    let bytes = batch.bytes();
    let mut header = [0; HEADER_LEN];
    header.copy_from_slice(&bytes[..HEADER_LEN]);
    header[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    header[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(now_ms) = log_append_time_ms {
        let attributes = be_i16(&header, ATTRIBUTES) | TIMESTAMP_TYPE_LOG_APPEND;
        header[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
        header[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
        let crc = crate::crc::crc32c_of_parts(&[&header[ATTRIBUTES..], &bytes[HEADER_LEN..]]);
        header[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    }
    header
}

/// The compression codec in a batch's attributes (bits 0-2): 0 none, 1 gzip, 2 snappy,
/// 3 lz4, 4 zstd.
pub fn codec(batch: &ValidBatch) -> i16 {
    batch.attributes() & 0x07
}

/// Re-compresses a batch's records with `codec` (the topic's `compression.type`), keeping every
/// record byte as the producer wrote it: only the records section is decompressed (at most
/// `max_message_bytes` of it) and compressed again, then the header's codec bits, length and CRC
/// are rewritten. The records are walked first, as Kafka's `LogValidator` iterates them before
/// recompressing: records that do not fit, or bytes left after them, are `CorruptBatch`;
/// records past `max_message_bytes`, `RecordsTooLarge`.
pub fn recompress(batch: &ValidBatch, codec: i16, max_message_bytes: usize) -> Result<ValidBatch> {
    use bytes::BufMut;
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let bytes = batch.bytes();
    let section = records_section(bytes, max_message_bytes)?;
    let used = walk_records(bytes, &section, max_message_bytes, |_| {})?;
    nothing_left(&section, used)?;
    let raw = section.raw;
    let mut out = BytesMut::with_capacity(HEADER_LEN + raw.len());
    out.put_slice(&bytes[..HEADER_LEN]);
    let put = |b: &mut BytesMut| -> anyhow::Result<()> {
        b.put_slice(&raw);
        Ok(())
    };
    match codec {
        0 => out.put_slice(&raw),
        1 => Gzip::compress(&mut out, put).map_err(|e| Error::CorruptBatch(format!("gzip: {e}")))?,
        2 => Snappy::compress(&mut out, put).map_err(|e| Error::CorruptBatch(format!("snappy: {e}")))?,
        3 => Lz4::compress(&mut out, put).map_err(|e| Error::CorruptBatch(format!("lz4: {e}")))?,
        4 => Zstd::compress(&mut out, put).map_err(|e| Error::CorruptBatch(format!("zstd: {e}")))?,
        other => return Err(Error::CorruptBatch(format!("unknown compression codec {other}"))),
    }
    let batch_length = i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| Error::MessageTooLarge {
        size: out.len(),
        max: max_message_bytes,
    })?;
    out[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = (be_i16(&out, ATTRIBUTES) & !0x07) | codec;
    out[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crate::crc::crc32c(&out[ATTRIBUTES..]);
    out[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    let mut batches = validate_batches(&out.freeze(), max_message_bytes)?;
    batches
        .pop()
        .ok_or_else(|| Error::CorruptBatch("recompression produced no batch".into()))
}

/// Bytes of the smallest record: its length, attributes, timestamp and offset deltas, key and
/// value lengths (-1, null) and header count, one byte each.
const RECORD_BYTES_MIN: usize = 7;

/// The bound on a batch's decompressed records for readers of the log that are not given their
/// topic's max.message.bytes ([`decode_records`]: ListOffsets by timestamp, coordinator loads):
/// eight times Kafka's default max.message.bytes, room for the compression ratios of real data
/// in a default-sized batch. A reader holds at most this, plus its decoded records.
pub const STORED_RECORDS_BYTES_MAX: usize = 8 << 20;

/// How far a batch's records may decompress relative to the topic's `max.message.bytes` (which
/// bounds the batch as sent, compressed): 32 times, 32 MiB by default. Kafka streams records and
/// has no such bound; a ratio of 32 admits what real producers send (text compresses 5-20x,
/// and librdkafka's `batch.size` bounds a batch at 1 MB before compression) while a bomb of
/// gigabytes costs at most this much memory for the moment it is checked.
pub const DECOMPRESSION_RATIO_MAX: usize = 32;

/// The decompressed-size bound for a topic whose `max.message.bytes` is `max_message_bytes`.
pub fn records_bytes_cap(max_message_bytes: usize) -> usize {
    max_message_bytes.saturating_mul(DECOMPRESSION_RATIO_MAX)
}

/// snappy-java's stream header (`SnappyOutputStream`), which Kafka's snappy batches start with.
/// Without it the section is one raw snappy block, as `SnappyInputStream` falls back to.
const XERIAL_MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

/// The records section of a batch, decompressed up to a bound.
struct Section {
    /// The records' bytes, at most the bound.
    raw: Bytes,
    /// The records go on past the bound: `raw` holds their first bytes only (up to the bound
    /// for a stream; snappy blocks are decompressed whole or not at all).
    truncated: bool,
}

/// The records section of a framed batch, decompressed: the one place where a batch is
/// decompressed, streaming into at most `records_bytes_max` bytes, so that a few KB of zstd or
/// gzip claiming gigabytes cost that bound and no more. An uncompressed section is the batch's
/// own bytes. A header count that alone needs more than the bound (`RECORD_BYTES_MIN` a record)
/// is `RecordsTooLarge` before anything is decompressed.
fn records_section(bytes: &Bytes, records_bytes_max: usize) -> Result<Section> {
    if bytes.len() < HEADER_LEN {
        return Err(Error::CorruptBatch("partial batch header".into()));
    }
    let section = bytes.slice(HEADER_LEN..);
    let codec = be_i16(bytes, ATTRIBUTES) & COMPRESSION_MASK;
    if codec == 0 {
        return Ok(Section {
            raw: section,
            truncated: false,
        });
    }
    // A negative count is refused by `check`; the walk refuses it for unchecked input.
    let count = usize::try_from(be_i32(bytes, RECORDS_COUNT)).unwrap_or(0);
    if count > records_bytes_max / RECORD_BYTES_MIN {
        return Err(Error::RecordsTooLarge { max: records_bytes_max });
    }
    // Kafka's codecs (CompressionType): gzip streams may hold several members (Java's
    // GZIPInputStream reads on), zstd several frames (zstd-jni's stream reads on), lz4 is the
    // frame format.
    let decompressed = match codec {
        1 => read_capped(flate2::read::MultiGzDecoder::new(&section[..]), records_bytes_max),
        2 => return snappy_capped(&section, records_bytes_max),
        3 => lz4::Decoder::new(&section[..]).and_then(|d| read_capped(d, records_bytes_max)),
        4 => zstd::stream::read::Decoder::with_buffer(&section[..]).and_then(|d| read_capped(d, records_bytes_max)),
        other => return Err(Error::CorruptBatch(format!("unknown compression codec {other}"))),
    };
    decompressed.map_err(|e| Error::CorruptBatch(format!("cannot decompress: {e}")))
}

/// Reads `decoder` to its end or to `records_bytes_max` bytes, whichever comes first.
fn read_capped(mut decoder: impl std::io::Read, records_bytes_max: usize) -> std::io::Result<Section> {
    use std::io::Read;
    let mut raw = Vec::new();
    let bound = u64::try_from(records_bytes_max).unwrap_or(u64::MAX);
    (&mut decoder).take(bound).read_to_end(&mut raw)?;
    // One byte more tells a stream that ends at the bound from one that goes on.
    let truncated = raw.len() == records_bytes_max && decoder.read(&mut [0u8; 1])? > 0;
    Ok(Section {
        raw: Bytes::from(raw),
        truncated,
    })
}

/// `read_capped` for snappy, which has no streaming decoder in Kafka's framing: snappy-java's
/// blocks (a 4-byte length each) or one raw block. A block's decompressed length is read from its
/// header before anything is allocated; one claiming more than the bound is not decompressed.
fn snappy_capped(section: &[u8], records_bytes_max: usize) -> Result<Section> {
    let corrupt = |e: snap::Error| Error::CorruptBatch(format!("cannot decompress: snappy: {e}"));
    let mut decoder = snap::raw::Decoder::new();
    let mut raw = Vec::new();
    let (framed, mut rest) = match section.strip_prefix(XERIAL_MAGIC.as_slice()) {
        Some(blocks) => (true, blocks),
        None => (false, section),
    };
    while !rest.is_empty() {
        let block = if framed {
            let len = rest
                .first_chunk::<4>()
                .and_then(|l| usize::try_from(u32::from_be_bytes(*l)).ok())
                .filter(|l| l.checked_add(4).is_some_and(|end| end <= rest.len()))
                .ok_or_else(|| Error::CorruptBatch("cannot decompress: snappy: partial block".into()))?;
            let block = &rest[4..4 + len];
            rest = &rest[4 + len..];
            block
        } else {
            std::mem::take(&mut rest)
        };
        let len = snap::raw::decompress_len(block).map_err(corrupt)?;
        let room = records_bytes_max - raw.len();
        if len > records_bytes_max {
            return Ok(Section {
                raw: Bytes::from(raw),
                truncated: true,
            });
        }
        if len <= room {
            let at = raw.len();
            raw.resize(at + len, 0);
            decoder.decompress(block, &mut raw[at..]).map_err(corrupt)?;
        } else {
            let mut last = vec![0; len];
            decoder.decompress(block, &mut last).map_err(corrupt)?;
            raw.extend_from_slice(&last[..room]);
            return Ok(Section {
                raw: Bytes::from(raw),
                truncated: true,
            });
        }
    }
    Ok(Section {
        raw: Bytes::from(raw),
        truncated: false,
    })
}

/// Kafka's record iterators (`DefaultRecordBatch.RecordIterator`) refuse a batch with bytes left
/// after its declared records: InvalidRecordException, "records still remaining".
fn nothing_left(section: &Section, used: usize) -> Result<()> {
    if section.truncated || used < section.raw.len() {
        return Err(Error::CorruptBatch(
            "Incorrect declared batch size, records still remaining in file".into(),
        ));
    }
    Ok(())
}

/// Reads an unsigned varint (protobuf style), at most 10 bytes.
fn read_uvarint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Reads a zigzag varint.
fn read_varint(b: &[u8], at: &mut usize) -> Option<i64> {
    read_uvarint(b, at).map(|v| ((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// What validation reads of one record, straight from the batch bytes: no copy, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordFields {
    /// The batch's baseTimestamp plus the record's delta.
    pub timestamp: i64,
    /// The batch's baseOffset plus the record's delta: the offset as the producer numbered it.
    pub offset: i64,
    /// False for a null key (length -1); an empty key is a key, as in Kafka's `Record.hasKey`.
    pub has_key: bool,
}

/// Calls `each` with the fields of every record of a produced batch (any codec), in order, after
/// the bounds checks of [`decode_records`]: the records section is decompressed once, into at
/// most `records_bytes_max` bytes (the topic's max.message.bytes), and no record is
/// materialised. Records past that bound are `RecordsTooLarge`; a record that does not fit, or
/// bytes left after the declared count (Kafka's record iterator), `CorruptBatch`.
pub fn scan_records(bytes: &Bytes, records_bytes_max: usize, each: impl FnMut(RecordFields)) -> Result<()> {
    let section = records_section(bytes, records_bytes_max)?;
    let used = walk_records(bytes, &section, records_bytes_max, each)?;
    nothing_left(&section, used)
}

/// Walks the `recordsCount` records of `section` (the decompressed records section of the batch
/// `bytes`), checking every length and count against the bytes that hold them, and returns the
/// bytes they take. A record cut by the bound is `RecordsTooLarge`, any other that does not fit
/// `CorruptBatch`.
fn walk_records(
    bytes: &[u8],
    section: &Section,
    records_bytes_max: usize,
    mut each: impl FnMut(RecordFields),
) -> Result<usize> {
    let raw = &section.raw[..];
    let (base_offset, base_timestamp) = (be_i64(bytes, BASE_OFFSET), be_i64(bytes, BASE_TIMESTAMP));
    let count = be_i32(bytes, RECORDS_COUNT);
    let bad = |what: &str| {
        if section.truncated {
            Error::RecordsTooLarge { max: records_bytes_max }
        } else {
            Error::CorruptBatch(format!("record {what} does not fit in the batch"))
        }
    };
    let mut at = 0usize;
    for _ in 0..count.max(0) {
        if at == raw.len() && !section.truncated {
            // Kafka's DefaultRecordBatch text for fewer records than the header counts.
            return Err(Error::CorruptBatch(
                "Incorrect declared batch size, premature EOF reached".into(),
            ));
        }
        let len = read_varint(raw, &mut at).ok_or_else(|| bad("length"))?;
        let len = usize::try_from(len).map_err(|_| bad("length"))?;
        let end = at
            .checked_add(len)
            .filter(|e| *e <= raw.len())
            .ok_or_else(|| bad("length"))?;
        let record = &raw[..end];
        let mut p = at + 1; // attributes
        let timestamp_delta = read_varint(record, &mut p).ok_or_else(|| bad("timestamp"))?;
        let offset_delta = read_varint(record, &mut p).ok_or_else(|| bad("offset delta"))?;
        // Key then value: a length (-1 for null) and that many bytes.
        let mut lengths = [0i64; 2];
        for (field, length) in ["key", "value"].into_iter().zip(&mut lengths) {
            *length = read_varint(record, &mut p).ok_or_else(|| bad(field))?;
            if *length >= 0 {
                p = p
                    .checked_add(usize::try_from(*length).map_err(|_| bad(field))?)
                    .filter(|q| *q <= end)
                    .ok_or_else(|| bad(field))?;
            }
        }
        let headers = read_varint(record, &mut p).ok_or_else(|| bad("header count"))?;
        // Each header takes at least two bytes (two lengths).
        if headers < 0 || headers as u64 > (end.saturating_sub(p) / 2) as u64 {
            return Err(bad("header count"));
        }
        // Kafka's DefaultRecord adds the deltas in Java's wrapping arithmetic.
        each(RecordFields {
            timestamp: base_timestamp.wrapping_add(timestamp_delta),
            offset: base_offset.wrapping_add(offset_delta),
            has_key: lengths[0] >= 0,
        });
        at = end;
    }
    Ok(at)
}

/// Decodes the records of a framed batch already in a log (any codec), decompressing at most
/// [`STORED_RECORDS_BYTES_MAX`] bytes: [`decode_records_within`] with that bound.
pub fn decode_records(bytes: &Bytes) -> Result<kafka_protocol::records::RecordSet> {
    decode_records_within(bytes, STORED_RECORDS_BYTES_MAX)
}

/// Decodes the records of a framed batch (any codec) after checking that every length and
/// count in them fits in the bytes that hold them, decompressing at most `records_bytes_max`
/// bytes (`RecordsTooLarge` past it). kafka-protocol's decoder allocates what a count claims
/// before reading: one record claiming 2^30 headers costs it 3 s and 2 GB. A batch only needs a
/// valid CRC to be stored, so every decode of stored or produced records goes through here, and
/// the decoder is handed the section decompressed here rather than decompressing it again.
/// Bytes after the declared records are ignored, as kafka-protocol does: a stored batch stays
/// readable.
pub fn decode_records_within(bytes: &Bytes, records_bytes_max: usize) -> Result<kafka_protocol::records::RecordSet> {
    let section = records_section(bytes, records_bytes_max)?;
    walk_records(bytes, &section, records_bytes_max, |_| {})?;
    let raw = section.raw;
    kafka_protocol::records::RecordBatchDecoder::decode_with_custom_compression(
        &mut bytes.clone(),
        Some(|_: &mut Bytes, _: Compression| Ok(raw.clone())),
    )
    .map_err(|e| Error::CorruptBatch(format!("cannot decode records: {e:#}")))
}

/// Encodes records the broker writes itself (group state, offsets) as one non-idempotent
/// batch: (key, value, timestamp) each, offsets 0.. (assigned again at append).
pub fn encode_records(records: &[(Option<Bytes>, Option<Bytes>, i64)], compression: Compression) -> Result<Bytes> {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value, timestamp))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch when offset - sequence changes; this keeps one
            // batch with baseSequence -1 (no idempotence).
            sequence: i as i32 - 1,
            timestamp: *timestamp,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: MAGIC_V2,
            compression,
        },
    )
    .map_err(|e| Error::CorruptBatch(format!("encoding records: {e}")))?;
    Ok(buf.freeze())
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::Compression;

    /// A header read from a damaged segment below the recovery point may claim offsets past
    /// `i64::MAX` (found by `fuzz.sh`: a read that scanned it panicked with overflow checks on).
    #[test]
    fn a_header_whose_offsets_pass_i64_max_saturates_and_has_no_next_offset() {
        let mut header = encode_batch(&[1, 2, 3], 10).to_vec();
        header[..8].copy_from_slice(&(i64::MAX - 1).to_be_bytes());
        let parsed = BatchHeader::parse(&header).unwrap();
        assert_eq!(parsed.last_offset_delta, 2);
        assert_eq!(parsed.last_offset(), i64::MAX);
        assert_eq!(parsed.checked_next_offset(), None);
        header[..8].copy_from_slice(&7i64.to_be_bytes());
        let parsed = BatchHeader::parse(&header).unwrap();
        assert_eq!((parsed.last_offset(), parsed.checked_next_offset()), (9, Some(10)));
    }

    /// Encodes one batch of `count` records with timestamps `timestamps[i]` (or `ts0 + i`).
    pub(crate) fn encode_batch(timestamps: &[i64], value_len: usize) -> Bytes {
        encode_batch_with(timestamps, value_len, Compression::None)
    }

    pub(crate) fn encode_batch_with(timestamps: &[i64], value_len: usize, compression: Compression) -> Bytes {
        let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = timestamps
            .iter()
            .map(|&ts| (None, Some(Bytes::from(vec![b'v'; value_len])), ts))
            .collect();
        encode_records(&records, compression).unwrap()
    }

    fn concat(parts: &[&Bytes]) -> Bytes {
        let mut all = BytesMut::new();
        for p in parts {
            all.extend_from_slice(p);
        }
        all.freeze()
    }

    #[test]
    fn splits_concatenated_batches_without_copying() {
        let a = encode_batch(&[1, 2, 3], 10);
        let b = encode_batch(&[4], 10);
        let all = concat(&[&a, &b]);
        let batches = validate_batches(&all, 1 << 20).unwrap();
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].offset_count(), 3);
        assert_eq!(batches[0].max_timestamp(), 3);
        assert_eq!(batches[1].offset_count(), 1);
        assert_eq!(batches[1].bytes(), &b);
        // Zero-copy: the batch is a view into the request's buffer.
        assert_eq!(batches[1].bytes().as_ptr(), all[a.len()..].as_ptr());
    }

    #[test]
    fn rejects_a_flipped_byte_by_crc() {
        let good = encode_batch(&[1, 2], 10);
        for at in ATTRIBUTES..good.len() {
            let mut bad = BytesMut::from(&good[..]);
            bad[at] ^= 0x01;
            let err = validate_batches(&bad.freeze(), 1 << 20).unwrap_err();
            assert!(matches!(err, Error::CorruptBatch(_)), "flip at {at}: {err}");
        }
    }

    #[test]
    fn rejects_other_magic_before_crc() {
        let good = encode_batch(&[1], 10);
        for magic in [0u8, 1, 3] {
            let mut bad = BytesMut::from(&good[..]);
            bad[MAGIC] = magic;
            let err = validate_batches(&bad.freeze(), 1 << 20).unwrap_err();
            assert!(matches!(err, Error::UnsupportedMagic(m) if m == magic as i8), "{err}");
        }
        // A v1 message (shorter than a v2 header) is still reported by magic.
        let mut v1 = vec![0u8; 34];
        v1[8..12].copy_from_slice(&22i32.to_be_bytes());
        v1[MAGIC] = 1;
        let err = validate_batches(&Bytes::from(v1), 1 << 20).unwrap_err();
        assert!(matches!(err, Error::UnsupportedMagic(1)), "{err}");
    }

    #[test]
    fn rejects_truncated_input_and_trailing_garbage() {
        let good = encode_batch(&[1, 2], 10);
        for cut in 1..good.len() {
            let err = validate_batches(&good.slice(..cut), 1 << 20).unwrap_err();
            assert!(matches!(err, Error::CorruptBatch(_)), "cut at {cut}: {err}");
        }
        let garbage = concat(&[&good, &Bytes::from_static(&[0, 0, 0])]);
        assert!(matches!(
            validate_batches(&garbage, 1 << 20),
            Err(Error::CorruptBatch(_))
        ));
        assert!(matches!(
            validate_batches(&Bytes::new(), 1 << 20),
            Err(Error::CorruptBatch(_))
        ));
    }

    #[test]
    fn rejects_a_batch_over_max_message_bytes() {
        let good = encode_batch(&[1, 2], 100);
        let err = validate_batches(&good, good.len() - 1).unwrap_err();
        assert!(matches!(err, Error::MessageTooLarge { size, .. } if size == good.len()));
        assert!(validate_batches(&good, good.len()).is_ok());
    }

    #[test]
    fn rejects_a_record_count_that_disagrees_with_last_offset_delta() {
        let good = encode_batch(&[1, 2], 10);
        let mut bad = BytesMut::from(&good[..]);
        bad[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&3i32.to_be_bytes());
        let crc = crc32c::crc32c(&bad[ATTRIBUTES..]);
        bad[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let err = validate_batches(&bad.freeze(), 1 << 20).unwrap_err();
        assert!(matches!(err, Error::CorruptBatch(_)), "{err}");
    }

    #[test]
    fn batches_yields_each_whole_batch_and_stops_at_a_partial_one() {
        let a = encode_batch(&[1, 2, 3], 10);
        let b = encode_batch(&[4], 10);
        let all = concat(&[&a, &b]);
        let whole: Vec<_> = batches(&all).map(Result::unwrap).collect();
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].0.size, a.len());
        assert_eq!(whole[0].0.last_offset_delta, 2);
        assert_eq!(whole[0].1, a);
        assert_eq!(whole[1].1, b);
        assert_eq!(whole[1].1.as_ptr(), all[a.len()..].as_ptr()); // a view, not a copy
        // A read cut anywhere inside the second batch (its prefix included) yields the first only.
        for cut in a.len() + 1..all.len() {
            let got: Vec<_> = batches(&all.slice(..cut)).map(Result::unwrap).collect();
            assert_eq!(got.len(), 1, "cut at {cut}");
            assert_eq!(got[0].1, a, "cut at {cut}");
        }
        for cut in 0..a.len() {
            assert_eq!(batches(&all.slice(..cut)).count(), 0, "cut at {cut}");
        }
    }

    #[test]
    fn batches_of_empty_input_is_empty() {
        assert_eq!(batches(&Bytes::new()).count(), 0);
    }

    #[test]
    fn batches_reads_a_control_batch_header() {
        use crate::log::producer_state::{Marker, encode_marker};
        let data = encode_batch(&[1], 10);
        let marker = encode_marker(
            77,
            3,
            Marker {
                commit: true,
                coordinator_epoch: 5,
            },
            9,
        );
        let all = concat(&[&data, &marker]);
        let whole: Vec<_> = batches(&all).map(Result::unwrap).collect();
        assert_eq!(whole.len(), 2);
        assert_eq!(whole[0].0.attributes & CONTROL, 0);
        let (header, bytes) = &whole[1];
        assert_eq!(header.attributes & (CONTROL | TRANSACTIONAL), CONTROL | TRANSACTIONAL);
        assert_eq!((header.producer_id, header.producer_epoch), (77, 3));
        assert_eq!(bytes, &marker);
        let set = decode_records(bytes).unwrap();
        assert_eq!(set.records.len(), 1);
        assert!(set.records[0].control);
        assert_eq!(set.records[0].key.as_deref(), Some(&[0u8, 0, 0, 1][..])); // version 0, commit
    }

    #[test]
    fn batches_refuses_impossible_framing_then_ends() {
        let good = encode_batch(&[1], 10);
        for length in [-1i32, 0, (MIN_BATCH_LENGTH - 1) as i32] {
            let mut bad = BytesMut::from(&good[..]);
            bad[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
            let all = concat(&[&good, &bad.freeze(), &good]);
            let mut it = batches(&all);
            assert_eq!(it.next().unwrap().unwrap().1, good);
            let err = it.next().unwrap().unwrap_err();
            assert!(matches!(err, Error::CorruptBatch(_)), "length {length}: {err}");
            assert!(it.next().is_none(), "length {length}");
        }
    }

    #[test]
    fn stamping_log_append_time_keeps_the_crc_valid() {
        let good = encode_batch(&[1, 2], 10);
        let batch = validate_batches(&good, 1 << 20).unwrap().remove(0);
        let header = stamped_header(&batch, 42, 7, Some(9_999));
        let stamped = concat(&[&Bytes::copy_from_slice(&header), &good.slice(HEADER_LEN..)]);
        let h = check(&stamped).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.max_timestamp, 9_999);
        assert!(h.is_log_append_time());
        assert_eq!(be_i32(&stamped, PARTITION_LEADER_EPOCH), 7);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod decode_tests {
    use super::*;

    /// A batch of one record claiming `headers` headers, with a correct CRC.
    fn claiming_headers(headers: u64) -> Bytes {
        let mut body = vec![0u8, 0, 0, 1, 1]; // attributes, ts delta, offset delta, null key, null value
        let mut v = headers << 1;
        while v >= 0x80 {
            body.push((v as u8) | 0x80);
            v >>= 7;
        }
        body.push(v as u8);
        let mut batch = vec![0u8; HEADER_LEN];
        batch[16] = 2;
        batch[57..61].copy_from_slice(&1i32.to_be_bytes());
        batch.push((body.len() as u8) << 1);
        batch.extend_from_slice(&body);
        let len = (batch.len() - LOG_OVERHEAD) as i32;
        batch[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
        batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(batch)
    }

    #[test]
    fn a_header_count_beyond_the_record_is_refused_before_decoding() {
        let start = std::time::Instant::now();
        assert!(matches!(
            decode_records(&claiming_headers(1 << 30)),
            Err(Error::CorruptBatch(_))
        ));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(1),
            "refused without allocating"
        );
        // A record with no headers decodes.
        assert_eq!(decode_records(&claiming_headers(0)).unwrap().records.len(), 1);
    }

    #[test]
    fn scanning_reads_each_record_without_decoding_it() {
        let records = [
            (None, Some(Bytes::from("v")), 1_000),
            (Some(Bytes::new()), None, 990),
            (Some(Bytes::from("k")), Some(Bytes::from("v")), -1),
        ];
        for codec in [Compression::None, Compression::Zstd] {
            let mut seen = Vec::new();
            scan_records(&encode_records(&records, codec).unwrap(), 1 << 20, |r| seen.push(r)).unwrap();
            let want: Vec<_> = [(1_000, 0, false), (990, 1, true), (-1, 2, true)]
                .into_iter()
                .map(|(timestamp, offset, has_key)| RecordFields {
                    timestamp,
                    offset,
                    has_key,
                })
                .collect();
            assert_eq!(seen, want, "an empty key is a key ({codec:?})");
        }
        assert!(matches!(
            scan_records(&claiming_headers(1 << 30), 1 << 20, |_| {}),
            Err(Error::CorruptBatch(_))
        ));
    }

    #[test]
    fn compressed_batches_decode_through_the_check() {
        let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..20)
            .map(|i| (Some(Bytes::from(format!("k{i}"))), Some(Bytes::from("v")), i))
            .collect();
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = encode_records(&records, codec).unwrap();
            assert_eq!(decode_records(&batch).unwrap().records.len(), 20, "{codec:?}");
        }
    }
}

/// Decompression bombs of every codec, built through each codec's streaming encoder so that a
/// test holds only the compressed bytes; the cleaner's tests use them too.
#[cfg(test)]
pub(crate) mod bombs {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::io::Read;

    use super::*;

    /// Kafka's codec ids: gzip, snappy, lz4, zstd.
    pub(crate) const CODECS: [i16; 4] = [1, 2, 3, 4];
    /// snappy-java's block size (`SnappyOutputStream.DEFAULT_BLOCK_SIZE`).
    const SNAPPY_BLOCK: usize = 32 << 10;

    /// The uncompressed records section of a batch: `prefix`, `zeros` zero bytes, `suffix`,
    /// holding `count` records by the header.
    pub(crate) struct Records {
        prefix: Vec<u8>,
        zeros: u64,
        suffix: Vec<u8>,
        count: i32,
    }

    impl Records {
        fn reader(&self) -> impl Read + '_ {
            (&self.prefix[..])
                .chain(std::io::repeat(0).take(self.zeros))
                .chain(&self.suffix[..])
        }
    }

    fn put_varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    /// One record, keyed `key`, whose value is `zeros` zero bytes: well formed, only large.
    pub(crate) fn huge_value(key: &[u8], zeros: u64) -> Records {
        let mut head = vec![0u8, 0, 0]; // attributes, timestamp delta, offset delta
        put_varint(&mut head, key.len() as i64);
        head.extend_from_slice(key);
        put_varint(&mut head, zeros as i64);
        let suffix = vec![0u8]; // no headers
        let mut prefix = Vec::new();
        put_varint(&mut prefix, (head.len() as u64 + zeros + 1) as i64);
        prefix.extend_from_slice(&head);
        Records {
            prefix,
            zeros,
            suffix,
            count: 1,
        }
    }

    /// One small keyed record, then `zeros` zero bytes no record accounts for.
    pub(crate) fn trailing_zeros(zeros: u64) -> Records {
        let mut record = huge_value(b"k", 1);
        record.prefix.push(0); // the value's one byte
        record.prefix.append(&mut record.suffix);
        Records {
            prefix: record.prefix,
            zeros,
            suffix: Vec::new(),
            count: 1,
        }
    }

    /// `records` compressed with `codec`, streamed through its encoder.
    pub(crate) fn compress(codec: i16, records: &Records) -> Vec<u8> {
        let mut input = records.reader();
        match codec {
            1 => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::copy(&mut input, &mut e).unwrap();
                e.finish().unwrap()
            }
            2 => {
                // snappy-java's framing: its header, then (length, block) per 32 KiB.
                let mut out = XERIAL_MAGIC.to_vec();
                let mut encoder = snap::raw::Encoder::new();
                let mut block = Vec::with_capacity(SNAPPY_BLOCK);
                loop {
                    block.clear();
                    (&mut input).take(SNAPPY_BLOCK as u64).read_to_end(&mut block).unwrap();
                    if block.is_empty() {
                        break out;
                    }
                    let compressed = encoder.compress_vec(&block).unwrap();
                    out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
                    out.extend_from_slice(&compressed);
                }
            }
            3 => {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
                std::io::copy(&mut input, &mut e).unwrap();
                let (out, done) = e.finish();
                done.unwrap();
                out
            }
            4 => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
                std::io::copy(&mut input, &mut e).unwrap();
                e.finish().unwrap()
            }
            other => panic!("codec {other}"),
        }
    }

    /// A framed batch (CRC32C correct) of `count` records whose records section is `section`,
    /// compressed with `codec`.
    pub(crate) fn framed(codec: i16, count: i32, section: &[u8]) -> Bytes {
        let mut batch = vec![0u8; HEADER_LEN];
        batch[MAGIC] = MAGIC_V2 as u8;
        batch[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&codec.to_be_bytes());
        batch[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&(count - 1).to_be_bytes());
        batch[PRODUCER_ID..PRODUCER_ID + 8].copy_from_slice(&(-1i64).to_be_bytes());
        batch[PRODUCER_EPOCH..PRODUCER_EPOCH + 2].copy_from_slice(&(-1i16).to_be_bytes());
        batch[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(-1i32).to_be_bytes());
        batch[RECORDS_COUNT..RECORDS_COUNT + 4].copy_from_slice(&count.to_be_bytes());
        batch.extend_from_slice(section);
        let length = (batch.len() - LOG_OVERHEAD) as i32;
        batch[BATCH_LENGTH..BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&batch[ATTRIBUTES..]);
        batch[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(batch)
    }

    /// `records` as one batch compressed with `codec`.
    pub(crate) fn batch(codec: i16, records: &Records) -> Bytes {
        framed(codec, records.count, &compress(codec, records))
    }

    /// The peak resident set of this process, in KiB.
    pub(crate) fn vm_hwm_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

#[cfg(test)]
mod bomb_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::bombs::*;
    use super::*;

    /// The bound of these tests: records past it are refused.
    const BOUND: usize = 1 << 20;
    /// A bomb's zeros: 64 times the bound.
    const ZEROS: u64 = 64 << 20;

    fn compression(codec: i16) -> Compression {
        match codec {
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            _ => Compression::Zstd,
        }
    }

    #[test]
    fn each_codec_decompresses_up_to_the_bound_and_stops_there() {
        let records: Vec<(Option<Bytes>, Option<Bytes>, i64)> = (0..200)
            .map(|i| {
                (
                    Some(Bytes::from(format!("k{i}"))),
                    Some(Bytes::from(vec![b'v'; 100])),
                    i,
                )
            })
            .collect();
        let plain = encode_records(&records, Compression::None).unwrap().slice(HEADER_LEN..);
        for codec in CODECS {
            let batch = encode_records(&records, compression(codec)).unwrap();
            let whole = records_section(&batch, plain.len()).unwrap();
            assert!(
                whole.raw == plain && !whole.truncated,
                "codec {codec}: exactly the bound"
            );
            let cut = records_section(&batch, plain.len() - 1).unwrap();
            assert!(
                cut.truncated && plain.starts_with(&cut.raw),
                "codec {codec}: the first bytes"
            );
            // Streams stop at the bound; a snappy block is decompressed whole or not at all.
            let kept = if codec == 2 { 0 } else { plain.len() - 1 };
            assert_eq!(cut.raw.len(), kept, "codec {codec}");
            assert_eq!(decode_records_within(&batch, plain.len()).unwrap().records.len(), 200);
            let err = decode_records_within(&batch, plain.len() - 1).unwrap_err();
            assert!(
                matches!(err, Error::RecordsTooLarge { max } if max == plain.len() - 1),
                "{err}"
            );
        }
    }

    #[test]
    fn a_bomb_is_refused_as_too_large_on_every_path_whatever_its_codec() {
        // One record whose value is 64 MiB of zeros: a few KB compressed. Each path stops at the
        // bound instead of holding the 64 MiB.
        for codec in CODECS {
            let bomb = batch(codec, &huge_value(b"k", ZEROS));
            assert!(bomb.len() < 8 << 20, "codec {codec}: {} bytes", bomb.len());
            let section = records_section(&bomb, BOUND).unwrap();
            assert!(section.truncated && section.raw.len() <= BOUND, "codec {codec}");
            let valid = validate_batches(&bomb, 8 << 20).unwrap().remove(0);
            let too_large = |e: Error| matches!(e, Error::RecordsTooLarge { max: BOUND });
            assert!(
                too_large(scan_records(&bomb, BOUND, |_| {}).unwrap_err()),
                "codec {codec}: scan"
            );
            assert!(
                too_large(decode_records_within(&bomb, BOUND).unwrap_err()),
                "codec {codec}: decode"
            );
            let other = if codec == 4 { 1 } else { 4 };
            assert!(
                too_large(recompress(&valid, other, BOUND).unwrap_err()),
                "codec {codec}: recompress"
            );
            assert!(
                too_large(recompress(&valid, 0, BOUND).unwrap_err()),
                "codec {codec}: to none"
            );
        }
    }

    #[test]
    fn bytes_after_the_declared_records_are_refused_on_produce_as_kafka_does() {
        // Kafka's DefaultRecordBatch.RecordIterator: "Incorrect declared batch size, records still
        // remaining in file" (InvalidRecordException), after the declared records, whether the
        // rest is a few bytes or a bomb cut at the bound.
        for zeros in [3, ZEROS] {
            for codec in CODECS {
                let bomb = batch(codec, &trailing_zeros(zeros));
                let err = scan_records(&bomb, BOUND, |_| {}).unwrap_err();
                assert!(
                    matches!(&err, Error::CorruptBatch(t) if t.contains("records still remaining")),
                    "codec {codec}, {zeros} zeros: {err}"
                );
                let valid = validate_batches(&bomb, 8 << 20).unwrap().remove(0);
                assert!(matches!(recompress(&valid, 0, BOUND), Err(Error::CorruptBatch(_))));
                // A stored batch stays readable: its declared records, as kafka-protocol reads.
                assert_eq!(decode_records_within(&bomb, BOUND).unwrap().records.len(), 1);
            }
        }
    }

    #[test]
    fn fewer_records_than_declared_is_kafkas_premature_eof() {
        let records = trailing_zeros(0);
        for codec in CODECS {
            let short = framed(codec, 2, &compress(codec, &records));
            let err = scan_records(&short, BOUND, |_| {}).unwrap_err();
            assert!(
                matches!(&err, Error::CorruptBatch(t) if t.contains("premature EOF")),
                "codec {codec}: {err}"
            );
        }
    }

    #[test]
    fn a_record_count_beyond_the_bound_is_refused_before_decompressing() {
        // Garbage that no codec decompresses: refused by the count alone, so never read.
        let claims = |count: i32| framed(4, count, &[0xde, 0xad, 0xbe, 0xef]);
        let most = i32::try_from(BOUND / RECORD_BYTES_MIN).unwrap();
        for count in [most + 1, i32::MAX] {
            let err = scan_records(&claims(count), BOUND, |_| {}).unwrap_err();
            assert!(matches!(err, Error::RecordsTooLarge { max: BOUND }), "{count}: {err}");
        }
        // At the limit the count is plausible: the section is read, and is not zstd.
        let err = scan_records(&claims(most), BOUND, |_| {}).unwrap_err();
        assert!(
            matches!(&err, Error::CorruptBatch(t) if t.contains("decompress")),
            "{err}"
        );
    }

    #[test]
    fn a_snappy_block_claiming_gigabytes_allocates_nothing() {
        // A raw snappy block's header claims its length: 4 GiB - 1 here, in 8 bytes.
        let raw = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x00, 0x00];
        let mut framed_block = XERIAL_MAGIC.to_vec();
        framed_block.extend_from_slice(&(raw.len() as u32).to_be_bytes());
        framed_block.extend_from_slice(&raw);
        for section in [&raw[..], &framed_block[..]] {
            let bomb = framed(2, 1, section);
            let cut = records_section(&bomb, BOUND).unwrap();
            assert!(cut.truncated && cut.raw.is_empty());
            assert!(matches!(
                scan_records(&bomb, BOUND, |_| {}),
                Err(Error::RecordsTooLarge { max: BOUND })
            ));
        }
    }
}
