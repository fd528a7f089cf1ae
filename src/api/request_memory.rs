//! What a request holds of `queued.max.request.bytes` until it is answered.
//!
//! The server's frame reader takes a request's charge in at most two steps: before reading the
//! body, from its API key and length (`charge`); after, for a Produce request, what its
//! partitions take once decoded and answered (`produce_extra`). A Produce request's records
//! stay slices of the frame, so its charge is its bytes plus a cost per topic, partition and
//! tagged field, counted by walking the frame without decoding it. A legitimate request, one
//! record batch per partition, pays little for them; a frame of thousands of partitions
//! without records (6 bytes each on the wire, about 100 in memory) pays all of it.

use std::mem::size_of;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};

use super::supported;

/// The most heap a decoded request may hold per byte of its frame, beyond a small constant: a
/// Metadata v1 topic named null is 2 bytes on the wire and about 72 in memory, and a `Vec`'s
/// growth can double that for a moment. `protocol-tests/fuzz.rs` checks every served API's
/// decoding against it.
pub const DECODED_BYTES_PER_BYTE: usize = 80;

/// What a request of API `key` and `len` bytes is charged before its body is read: what it may
/// take once decoded. A Produce request is charged its bytes (its records stay slices of the
/// frame; `produce_extra` adds the rest once the frame is read), as is a key that is not
/// served (it is refused undecoded); any other request `DECODED_BYTES_PER_BYTE` times its bytes.
pub fn charge(key: i16, len: usize) -> usize {
    match ApiKey::try_from(key) {
        Ok(ApiKey::Produce) | Err(_) => len,
        Ok(key) if supported(key).is_none() => len,
        Ok(_) => len.saturating_mul(DECODED_BYTES_PER_BYTE),
    }
}

/// An entry of a decoded `unknown_tagged_fields` map: its key and value, and as much again for
/// the B-tree's nodes, which may be half full.
const TAG_COST: usize = 2 * (size_of::<i32>() + size_of::<Bytes>());
/// A partition: decoded, answered, and the handler's state between (its result and the
/// append it waits on).
const PARTITION_COST: usize = size_of::<PartitionProduceData>() + size_of::<PartitionProduceResponse>() + 128;
const TOPIC_COST: usize = size_of::<TopicProduceData>() + size_of::<TopicProduceResponse>() + 64;

/// What a Produce frame (`body`: the frame after its length, header included) takes beyond its
/// bytes once decoded and answered: its topics, partitions and tagged fields, counted without
/// decoding it. A frame that ends or goes wrong part way is charged for what was counted up to
/// there, including the whole of the collection that was being read: the decoder reserves a
/// collection before reading its elements, and fails where this walk does.
pub fn produce_extra(body: &[u8]) -> usize {
    let mut walk = Walk { rest: body, extra: 0 };
    let _complete = walk.produce();
    walk.extra
}

struct Walk<'a> {
    rest: &'a [u8],
    extra: usize,
}

impl Walk<'_> {
    fn produce(&mut self) -> Option<()> {
        let _key = self.take(2)?;
        let version = i16::from_be_bytes(self.take(2)?.try_into().ok()?);
        let versions = supported(ApiKey::Produce)?;
        if version < versions.min || version > versions.max {
            return None; // refused before decoding
        }
        let flexible = version >= 9;
        let _correlation_id = self.take(4)?;
        let client_id = i16::from_be_bytes(self.take(2)?.try_into().ok()?);
        self.take(usize::try_from(client_id).unwrap_or(0))?;
        if flexible {
            self.tags()?;
        }
        self.nullable_string(flexible)?; // transactional_id
        let _acks_and_timeout = self.take(2 + 4)?;
        let topics = self.count(flexible, TOPIC_COST)?;
        for _ in 0..topics {
            if version >= 13 {
                self.take(16)?; // topic_id
            } else {
                self.nullable_string(flexible)?; // name
            }
            let partitions = self.count(flexible, PARTITION_COST)?;
            for _ in 0..partitions {
                let _index = self.take(4)?;
                self.nullable_bytes(flexible)?; // records
                if flexible {
                    self.tags()?;
                }
            }
            if flexible {
                self.tags()?;
            }
        }
        if flexible {
            self.tags()?;
        }
        Some(())
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Some(taken)
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..35).step_by(7) {
            let byte = *self.take(1)?.first()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// An array's length, charged `cost` per element: a claim the frame cannot hold is refused
    /// by the decoder before it reserves anything.
    fn count(&mut self, flexible: bool, cost: usize) -> Option<usize> {
        let n = if flexible {
            usize::try_from(self.uvarint()?.checked_sub(1)?).ok()?
        } else {
            usize::try_from(i32::from_be_bytes(self.take(4)?.try_into().ok()?)).ok()?
        };
        if n > self.rest.len() {
            return None;
        }
        self.extra = self.extra.saturating_add(n.saturating_mul(cost));
        Some(n)
    }

    fn nullable_string(&mut self, flexible: bool) -> Option<()> {
        if flexible {
            self.nullable_bytes(true)
        } else {
            let len = i16::from_be_bytes(self.take(2)?.try_into().ok()?);
            self.take(usize::try_from(len).unwrap_or(0)).map(drop)
        }
    }

    fn nullable_bytes(&mut self, flexible: bool) -> Option<()> {
        let len = if flexible {
            usize::try_from(self.uvarint()?.saturating_sub(1)).ok()?
        } else {
            usize::try_from(i32::from_be_bytes(self.take(4)?.try_into().ok()?)).unwrap_or(0)
        };
        self.take(len).map(drop)
    }

    fn tags(&mut self) -> Option<()> {
        let n = usize::try_from(self.uvarint()?).ok()?;
        // Each tag reads at least two bytes; a claim of more is refused as it reads past the end.
        self.extra = self
            .extra
            .saturating_add(n.min(self.rest.len()).saturating_mul(TAG_COST));
        for _ in 0..n {
            let _tag = self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).ok()?;
            self.take(size)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ProduceRequest, RequestHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn frame(version: i16, request: &ProduceRequest) -> Vec<u8> {
        let mut buf = bytes::BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("c")))
            .encode(&mut buf, ApiKey::Produce.request_header_version(version))
            .unwrap();
        request.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    fn request(topics: usize, partitions: i32, records: Option<Bytes>) -> ProduceRequest {
        let topic = |t: usize| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(format!("t{t}"))))
                .with_topic_id(uuid::Uuid::from_u128(t as u128 + 1))
                .with_partition_data(
                    (0..partitions)
                        .map(|i| {
                            PartitionProduceData::default()
                                .with_index(i)
                                .with_records(records.clone())
                        })
                        .collect(),
                )
        };
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(1000)
            .with_topic_data((0..topics).map(topic).collect())
    }

    #[test]
    fn each_topic_and_partition_is_charged_in_every_version() {
        for version in [3, 8, 9, 12, 13] {
            let whole = frame(version, &request(3, 5, Some(Bytes::from(vec![1u8; 100]))));
            assert_eq!(
                produce_extra(&whole),
                3 * TOPIC_COST + 15 * PARTITION_COST,
                "v{version}"
            );
            // Cut short inside the last topic's partitions: its whole array is counted.
            let cut = &whole[..whole.len() - 2 * (100 + 4 + 4)];
            assert_eq!(produce_extra(cut), 3 * TOPIC_COST + 15 * PARTITION_COST, "v{version}");
        }
    }

    #[test]
    fn dense_frames_pay_for_what_they_decode_to_and_batches_little() {
        let dense = frame(9, &request(1, 20_000, None));
        assert!(produce_extra(&dense) >= 20_000 * PARTITION_COST);
        assert!(produce_extra(&dense) > 20 * dense.len());
        // 16 KiB per partition, as a client's batches are: the extra is a few percent.
        let batches = frame(9, &request(2, 10, Some(Bytes::from(vec![0u8; 16 * 1024]))));
        assert!(produce_extra(&batches) * 20 < batches.len());
    }

    #[test]
    fn tagged_fields_are_charged_and_other_frames_charge_nothing_more() {
        // Produce v9, one topic with no partitions and a request-level run of empty tags.
        let mut f = frame(9, &request(1, 0, None));
        let tags = 1000u16;
        f.pop(); // the request's empty tag section
        f.extend_from_slice(&[0xe8, 0x07]); // 1000 as an unsigned varint
        for t in 0..tags {
            f.extend_from_slice(&[(t % 100) as u8, 0]);
        }
        assert_eq!(produce_extra(&f), TOPIC_COST + usize::from(tags) * TAG_COST);
        // An unsupported version is refused undecoded, garbage charges what it claims at most.
        let mut v2 = frame(3, &request(1, 5, None));
        v2[2..4].copy_from_slice(&2i16.to_be_bytes());
        assert_eq!(produce_extra(&v2), 0);
        assert_eq!(produce_extra(&[0, 0]), 0);
        assert_eq!(produce_extra(&[]), 0);
    }
}
