//! Record batch (magic 2) validation and header access. A batch is kept as the producer's
//! bytes; only baseOffset, partitionLeaderEpoch and (LogAppendTime) maxTimestamp are rewritten.

use bytes::Bytes;

use crate::error::Result;

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
        todo!()
    }
    pub fn max_timestamp(&self) -> i64 {
        todo!()
    }
}

/// Splits a Produce partition's `records` into validated batches. Fails (and nothing is
/// appended) when any batch is corrupt (`CorruptBatch`), not magic 2 (`UnsupportedMagic`), or
/// larger than `max_message_bytes` (`MessageTooLarge`). An empty input is `CorruptBatch`.
pub fn validate_batches(_records: &Bytes, _max_message_bytes: usize) -> Result<Vec<ValidBatch>> {
    todo!()
}
