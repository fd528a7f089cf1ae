//! The record formats of `__transaction_state`, as Kafka writes them, so the topic reads like
//! Kafka's to anyone who knows it: the key is a version (0) then `TransactionLogKey` v0 (the
//! transactional id); the value is a version then `TransactionLogValue` v0 (classic encoding)
//! or v1 (flexible, with the tagged fields PreviousProducerId (0), NextProducerId (1) and
//! ClientTransactionVersion (2)). Kafka 4 writes v1; both are read. A null value is a tombstone:
//! the transactional id expired (`transactional.id.expiration.ms`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// One transactional id's state as stored (Kafka's `TxnTransitMetadata` written by
/// `TransactionLog.valueToBytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    /// The producer id before the last rotation (tag 0), or -1.
    pub previous_producer_id: i64,
    /// The producer id handed out but not yet in use (tag 1, transaction version 2), or -1.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    /// Kafka's `TransactionState.id`: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
    /// 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence.
    pub transaction_status: i8,
    /// Partitions in the transaction, by topic; None is written for Empty (Kafka writes null).
    pub transaction_partitions: Option<Vec<(String, Vec<i32>)>>,
    pub transaction_last_update_timestamp_ms: i64,
    pub transaction_start_timestamp_ms: i64,
    /// The transaction version the client used (tag 2): 0 or 1 for KIP-890 part 1, 2 for part 2.
    pub client_transaction_version: i16,
}

/// The value version Sluice writes (Kafka 4's).
pub const VALUE_VERSION: i16 = 1;

/// Why a stored record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("__transaction_state record: {0}")]
pub struct DecodeError(pub &'static str);

type Decoded<T> = Result<T, DecodeError>;

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(0);
    put_string(&mut b, transactional_id);
    b.freeze()
}

pub fn decode_key(key: &[u8]) -> Decoded<String> {
    let mut r = Reader(key);
    match r.i16()? {
        0 => r.string(),
        _ => Err(DecodeError("unknown key version")),
    }
}

/// Encodes a value in `version` (0 or 1; Sluice writes `VALUE_VERSION`).
pub fn encode_value(v: &TxnLogValue, version: i16) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(version);
    let flexible = version >= 1;
    b.put_i64(v.producer_id);
    b.put_i16(v.producer_epoch);
    b.put_i32(v.transaction_timeout_ms);
    b.put_i8(v.transaction_status);
    match &v.transaction_partitions {
        None if flexible => put_uvarint(&mut b, 0),
        None => b.put_i32(-1),
        Some(topics) => {
            put_len(&mut b, topics.len(), flexible);
            for (topic, partitions) in topics {
                if flexible {
                    put_compact_string(&mut b, topic);
                } else {
                    put_string(&mut b, topic);
                }
                put_len(&mut b, partitions.len(), flexible);
                for p in partitions {
                    b.put_i32(*p);
                }
                if flexible {
                    put_uvarint(&mut b, 0); // no tagged fields in the partition entry
                }
            }
        }
    }
    b.put_i64(v.transaction_last_update_timestamp_ms);
    b.put_i64(v.transaction_start_timestamp_ms);
    if flexible {
        // Tagged fields are written only when they differ from their default, as Kafka's
        // generated serializer does.
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if v.previous_producer_id != -1 {
            tags.push((0, v.previous_producer_id.to_be_bytes().to_vec()));
        }
        if v.next_producer_id != -1 {
            tags.push((1, v.next_producer_id.to_be_bytes().to_vec()));
        }
        if v.client_transaction_version != 0 {
            tags.push((2, v.client_transaction_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut b, tags.len() as u32);
        for (tag, data) in tags {
            put_uvarint(&mut b, tag);
            put_uvarint(&mut b, data.len() as u32);
            b.put_slice(&data);
        }
    }
    b.freeze()
}

pub fn decode_value(value: &[u8]) -> Decoded<TxnLogValue> {
    let mut r = Reader(value);
    let version = r.i16()?;
    if !(0..=1).contains(&version) {
        return Err(DecodeError("unknown value version"));
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let transaction_timeout_ms = r.i32()?;
    let transaction_status = r.i8()?;
    let transaction_partitions = match r.len(flexible)? {
        None => None,
        Some(n) => {
            let mut topics = Vec::new();
            for _ in 0..n {
                let topic = if flexible { r.compact_string()? } else { r.string()? };
                let count = r.len(flexible)?.ok_or(DecodeError("null partition list"))?;
                let mut partitions = Vec::new();
                for _ in 0..count {
                    partitions.push(r.i32()?);
                }
                if flexible {
                    r.skip_tags()?;
                }
                topics.push((topic, partitions));
            }
            Some(topics)
        }
    };
    let mut v = TxnLogValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        transaction_timeout_ms,
        transaction_status,
        transaction_partitions,
        transaction_last_update_timestamp_ms: r.i64()?,
        transaction_start_timestamp_ms: r.i64()?,
        client_transaction_version: 0,
    };
    if flexible {
        let count = r.uvarint()?;
        for _ in 0..count {
            let tag = r.uvarint()?;
            let size = r.uvarint()? as usize;
            let data = r.take(size)?;
            let mut d = Reader(data);
            match tag {
                0 => v.previous_producer_id = d.i64()?,
                1 => v.next_producer_id = d.i64()?,
                2 => v.client_transaction_version = d.i16()?,
                _ => {} // a later version's field: ignored, as Kafka does
            }
        }
    }
    Ok(v)
}

fn put_string(b: &mut BytesMut, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    b.put_i16(bytes.len() as i16);
    b.put_slice(bytes);
}

fn put_compact_string(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u32 + 1);
    b.put_slice(s.as_bytes());
}

fn put_len(b: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(b, len as u32 + 1);
    } else {
        b.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
    }
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// Reads fields, checking every length against the bytes present.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Decoded<&'a [u8]> {
        if self.0.len() < n {
            return Err(DecodeError("truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn i8(&mut self) -> Decoded<i8> {
        Ok(self.take(1)?.get_i8())
    }
    fn i16(&mut self) -> Decoded<i16> {
        Ok(self.take(2)?.get_i16())
    }
    fn i32(&mut self) -> Decoded<i32> {
        Ok(self.take(4)?.get_i32())
    }
    fn i64(&mut self) -> Decoded<i64> {
        Ok(self.take(8)?.get_i64())
    }
    fn uvarint(&mut self) -> Decoded<u32> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            v |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint too long"))
    }
    fn string(&mut self) -> Decoded<String> {
        let len = usize::try_from(self.i16()?).map_err(|_| DecodeError("null string"))?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError("string not UTF-8"))
    }
    fn compact_string(&mut self) -> Decoded<String> {
        let len = (self.uvarint()? as usize)
            .checked_sub(1)
            .ok_or(DecodeError("null string"))?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError("string not UTF-8"))
    }
    /// An array length: None for null. Checked against the bytes left (each element takes at
    /// least one byte) before the caller loops on it.
    fn len(&mut self, flexible: bool) -> Decoded<Option<usize>> {
        let n = if flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i32()? {
                -1 => return Ok(None),
                n => usize::try_from(n).map_err(|_| DecodeError("negative length"))?,
            }
        };
        if n > self.0.len() {
            return Err(DecodeError("array longer than the record"));
        }
        Ok(Some(n))
    }
    fn skip_tags(&mut self) -> Decoded<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TxnLogValue {
        TxnLogValue {
            producer_id: 4000,
            previous_producer_id: 3999,
            next_producer_id: -1,
            producer_epoch: 7,
            transaction_timeout_ms: 60_000,
            transaction_status: 1,
            transaction_partitions: Some(vec![
                ("orders".into(), vec![0, 2]),
                ("__consumer_offsets".into(), vec![17]),
            ]),
            transaction_last_update_timestamp_ms: 1_700_000_000_123,
            transaction_start_timestamp_ms: 1_700_000_000_000,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn values_round_trip_in_both_versions() {
        for version in [0, 1] {
            let mut v = sample();
            if version == 0 {
                v.previous_producer_id = -1; // not in v0
            }
            assert_eq!(decode_value(&encode_value(&v, version)).unwrap(), v, "v{version}");
            let empty = TxnLogValue {
                transaction_status: 0,
                transaction_partitions: None,
                ..v.clone()
            };
            assert_eq!(
                decode_value(&encode_value(&empty, version)).unwrap(),
                empty,
                "v{version}"
            );
        }
        let tagged = TxnLogValue {
            next_producer_id: 5000,
            client_transaction_version: 2,
            ..sample()
        };
        assert_eq!(decode_value(&encode_value(&tagged, 1)).unwrap(), tagged);
    }

    #[test]
    fn v1_layout_matches_kafkas_flexible_encoding() {
        // TransactionLogValue v1: fixed fields, compact arrays (length + 1), then tagged fields
        // only when not default (PreviousProducerId is tag 0).
        let v = TxnLogValue {
            transaction_partitions: Some(vec![("t".into(), vec![3])]),
            ..sample()
        };
        let b = encode_value(&v, 1);
        let mut expected = vec![0, 1];
        expected.extend(4000i64.to_be_bytes());
        expected.extend(7i16.to_be_bytes());
        expected.extend(60_000i32.to_be_bytes());
        expected.push(1);
        expected.extend([2, 2, b't', 2, 0, 0, 0, 3, 0]);
        expected.extend(1_700_000_000_123i64.to_be_bytes());
        expected.extend(1_700_000_000_000i64.to_be_bytes());
        expected.extend([1, 0, 8]);
        expected.extend(3999i64.to_be_bytes());
        assert_eq!(&b[..], &expected[..]);
    }

    #[test]
    fn keys_round_trip_and_carry_version_zero() {
        let k = encode_key("my-txn");
        assert_eq!(&k[..4], &[0, 0, 0, 6]);
        assert_eq!(decode_key(&k).unwrap(), "my-txn");
        assert!(decode_key(&[0, 1, 0, 0]).is_err());
    }

    #[test]
    fn truncated_or_lying_values_are_errors_not_panics() {
        let b = encode_value(&sample(), 1);
        for cut in 0..b.len() {
            assert!(decode_value(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut lying = encode_value(&sample(), 0).to_vec();
        // The partition array's length (after version, pid, epoch, timeout, status).
        lying[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value(&lying).is_err());
    }
}
