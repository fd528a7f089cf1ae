//! Responses whose records are sent from the log files (Kafka's zero-copy fetch,
//! `FileRecords.writeTo`): a consumer's Fetch locates each partition's batches (`FileRegion`)
//! instead of reading them, and the connection's writer sends them with `sendfile(2)` on a
//! plaintext TCP socket, or reads them just before writing on a TLS one. The broker then never
//! holds the records in memory, and on plaintext never copies them at all.
//!
//! The response is encoded by the generated encoder as any other, with a zero-length
//! placeholder in each such records field: a slice of `PLACEHOLDERS`, whose address names the
//! region. The encoding buffer (`SpliceBuf`) recognises a placeholder when it is written,
//! rewrites the length prefix just before it to the region's length, and cuts the frame
//! there. Records are the only field of a Fetch response that is not a count or a tagged
//! field, so no other length in the frame depends on them but the frame's own prefix.

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Encodable, HeaderVersion};

use super::Reject;
use crate::log::FileRegion;

/// At most this many regions in one response; later partitions' records are read at once.
const MAX_REGIONS: usize = 4096;

/// Zero-length slices of this array are the placeholders: the one at index i stands for the
/// response's region i.
static PLACEHOLDERS: [u8; MAX_REGIONS] = [0; MAX_REGIONS];

/// The regions of one response, in the order their placeholders were handed out.
#[derive(Default)]
pub struct Regions {
    list: Vec<FileRegion>,
}

impl Regions {
    /// The records field that stands for `region`; `Err(region)` when the response holds
    /// `MAX_REGIONS` already.
    pub fn placeholder(&mut self, region: FileRegion) -> Result<Bytes, FileRegion> {
        let index = self.list.len();
        if index >= MAX_REGIONS {
            return Err(region);
        }
        self.list.push(region);
        Ok(Bytes::from_static(&PLACEHOLDERS[index..index]))
    }

    /// The region a records field stands for, None for records held in memory.
    pub fn get(&self, records: &[u8]) -> Option<&FileRegion> {
        index_of(records).and_then(|i| self.list.get(i))
    }

    /// Bytes of `records`, or of the region it stands for.
    pub fn len_of(&self, records: &[u8]) -> usize {
        self.get(records).map_or(records.len(), FileRegion::len)
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

fn index_of(records: &[u8]) -> Option<usize> {
    let base = PLACEHOLDERS.as_ptr() as usize;
    let at = records.as_ptr() as usize;
    (records.is_empty() && at >= base && at < base + MAX_REGIONS).then(|| at - base)
}

/// A response frame in pieces: encoded bytes, and regions sent from their files.
pub enum Piece {
    Bytes(Bytes),
    File(FileRegion),
}

pub struct Spliced {
    pub pieces: Vec<Piece>,
}

impl Spliced {
    /// The frame's bytes, length prefix included.
    pub fn len(&self) -> usize {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Bytes(b) => b.len(),
                Piece::File(r) => r.len(),
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole frame in memory, the regions read now (tests, and what a TLS writer sends).
    pub fn read_all(&self) -> crate::error::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len());
        for piece in &self.pieces {
            match piece {
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::File(r) => out.extend_from_slice(&r.read()?),
            }
        }
        Ok(out)
    }
}

/// Frames `body` as `api::frame` does, each placeholder replaced by its region.
pub fn frame<R: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    body: &R,
    regions: Regions,
) -> Result<Spliced, Reject> {
    // Flexible versions have response header v1, and write bytes with a varint length.
    let header_version = R::header_version(version);
    let mut buf = SpliceBuf {
        out: BytesMut::with_capacity(256),
        flexible: header_version >= 1,
        regions: &regions.list,
        cuts: Vec::new(),
        failed: None,
    };
    buf.out.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, header_version)
        .and_then(|()| body.encode(&mut buf, version))
        .map_err(|e| Reject::Encode(e.to_string()))?;
    let SpliceBuf {
        mut out, cuts, failed, ..
    } = buf;
    if let Some(why) = failed {
        return Err(Reject::Encode(why));
    }
    let records: usize = cuts.iter().map(|&(_, i)| regions.list[i].len()).sum();
    let len = i32::try_from(out.len() - 4 + records).map_err(|_| Reject::Encode("response over 2 GiB".into()))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    let mut slots: Vec<Option<FileRegion>> = regions.list.into_iter().map(Some).collect();
    let mut pieces = Vec::with_capacity(2 * cuts.len() + 1);
    let mut taken = 0;
    for (at, index) in cuts {
        let head = out.split_to(at - taken);
        taken = at;
        if !head.is_empty() {
            pieces.push(Piece::Bytes(head.freeze()));
        }
        let region = slots[index]
            .take()
            .ok_or_else(|| Reject::Encode(format!("records region {index} encoded twice")))?;
        pieces.push(Piece::File(region));
    }
    if !out.is_empty() {
        pieces.push(Piece::Bytes(out.freeze()));
    }
    Ok(Spliced { pieces })
}

/// The encoding buffer: bytes as `BytesMut`, and where each placeholder was met.
struct SpliceBuf<'a> {
    out: BytesMut,
    flexible: bool,
    regions: &'a [FileRegion],
    /// (position in `out`, region index), in increasing position.
    cuts: Vec<(usize, usize)>,
    failed: Option<String>,
}

impl SpliceBuf<'_> {
    /// The length prefix the encoder wrote for an empty records field is rewritten to the
    /// region's length: an unsigned varint of length + 1 (flexible versions), else an i32.
    fn splice(&mut self, index: usize) {
        let Some(region) = self.regions.get(index) else {
            self.failed = Some(format!("placeholder {index} has no region"));
            return;
        };
        let len = region.len();
        if self.flexible {
            let (Some(&1), Ok(n)) = (self.out.last(), u32::try_from(len + 1)) else {
                self.failed = Some("records placeholder without its empty varint length".into());
                return;
            };
            self.out.truncate(self.out.len() - 1);
            put_unsigned_varint(&mut self.out, n);
        } else {
            let at = self.out.len().saturating_sub(4);
            let (true, Ok(n)) = (self.out.len() >= 4 && self.out[at..] == [0; 4], i32::try_from(len)) else {
                self.failed = Some("records placeholder without its empty i32 length".into());
                return;
            };
            self.out.truncate(at);
            self.out.put_i32(n);
        }
        self.cuts.push((self.out.len(), index));
    }
}

fn put_unsigned_varint(out: &mut BytesMut, mut n: u32) {
    while n >= 0x80 {
        out.put_u8((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.put_u8(n as u8);
}

// SAFETY: every method delegates to `BytesMut`'s implementation, whose contract this keeps;
// `put_slice` only adds the placeholder check before delegating.
unsafe impl BufMut for SpliceBuf<'_> {
    fn remaining_mut(&self) -> usize {
        self.out.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of `chunk_mut`, which is `out`'s.
        unsafe { self.out.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.out.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        match index_of(src) {
            Some(index) => self.splice(index),
            None => self.out.put_slice(src),
        }
    }
}

impl ByteBufMut for SpliceBuf<'_> {
    fn offset(&self) -> usize {
        self.out.len()
    }

    fn seek(&mut self, offset: usize) {
        self.out.resize(offset, 0);
    }

    fn range(&mut self, r: std::ops::Range<usize>) -> &mut [u8] {
        &mut self.out[r]
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use tempfile::TempDir;

    use super::*;
    use crate::log::batch::{tests::encode_batch, validate_batches};
    use crate::log::{Log, LogConfig};

    /// A log of 40 batches, and regions of it of assorted sizes (one is 300 bytes: the
    /// length prefix of its records is a two-byte varint).
    pub(crate) fn regions_of(dir: &TempDir) -> Vec<FileRegion> {
        let mut log = Log::open(dir.path(), LogConfig::default(), 1_700_000_000_000).unwrap();
        for i in 0..40 {
            let ts: Vec<i64> = (0..1 + i % 5).collect();
            let bytes = encode_batch(&ts, 100 + usize::try_from(i).unwrap());
            log.append(validate_batches(&bytes, 1 << 20).unwrap(), 0, 1_700_000_000_000)
                .unwrap();
        }
        let snapshot = log.snapshot();
        [(0, 1), (3, 300), (10, 1 << 20), (39, 1)]
            .into_iter()
            .map(|(from, budget)| snapshot.read_region(from, 1_000, budget, true).unwrap().unwrap())
            .collect()
    }

    /// A response over two topics: partitions with regions, with records in memory, with
    /// none, with aborted transactions and with the tagged fields of flexible versions.
    pub(crate) fn response(records: &mut dyn FnMut(usize) -> Option<Bytes>) -> FetchResponse {
        let partition = |index: i32, records: Option<Bytes>| {
            PartitionData::default()
                .with_partition_index(index)
                .with_high_watermark(1_000 + i64::from(index))
                .with_last_stable_offset(900)
                .with_log_start_offset(3)
                .with_records(records)
        };
        let topic_a = FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("a")))
            .with_topic_id(uuid::Uuid::from_u128(7))
            .with_partitions(vec![
                partition(0, records(0)),
                partition(1, Some(Bytes::from_static(b"in memory"))),
                partition(2, records(1)).with_aborted_transactions(Some(vec![
                    AbortedTransaction::default()
                        .with_producer_id(ProducerId(5))
                        .with_first_offset(4),
                ])),
            ]);
        let topic_b = FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("b")))
            .with_partitions(vec![
                partition(0, None),
                partition(1, records(2)).with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(BrokerId(2))
                        .with_leader_epoch(9),
                ),
                partition(2, Some(Bytes::new())),
                partition(3, records(3)),
            ]);
        FetchResponse::default()
            .with_throttle_time_ms(3)
            .with_responses(vec![topic_a, topic_b])
            .with_node_endpoints(vec![
                NodeEndpoint::default()
                    .with_node_id(BrokerId(2))
                    .with_host(StrBytes::from_static_str("h"))
                    .with_port(9092),
            ])
    }

    #[test]
    fn a_spliced_frame_holds_the_bytes_of_the_frame_with_its_records_read() {
        let dir = TempDir::new().unwrap();
        let regions = regions_of(&dir);
        assert!(regions.iter().any(|r| r.len() >= 128 && r.len() < 16_384));
        for version in 4..=18 {
            let read: Vec<Bytes> = regions.iter().map(|r| Bytes::from(r.read().unwrap())).collect();
            let expected = crate::api::frame(42, version, &response(&mut |i| Some(read[i].clone()))).unwrap();
            let mut held = Regions::default();
            let mut placeholders: Vec<Bytes> = Vec::new();
            for region in &regions {
                placeholders.push(held.placeholder(region.clone()).ok().unwrap());
            }
            for (i, p) in placeholders.iter().enumerate() {
                assert_eq!(held.len_of(p), regions[i].len());
                assert!(held.get(p).is_some());
            }
            assert!(held.get(b"in memory").is_none() && held.get(&Bytes::new()).is_none());
            let spliced = frame(42, version, &response(&mut |i| Some(placeholders[i].clone())), held).unwrap();
            let files = spliced.pieces.iter().filter(|p| matches!(p, Piece::File(_))).count();
            assert_eq!(files, regions.len(), "v{version}");
            assert_eq!(spliced.len(), expected.len(), "v{version}");
            assert_eq!(spliced.read_all().unwrap(), expected.to_vec(), "v{version}");
        }
    }

    #[test]
    fn a_response_holds_at_most_max_regions_and_each_is_used_once() {
        let dir = TempDir::new().unwrap();
        let region = regions_of(&dir).remove(0);
        let mut held = Regions::default();
        for _ in 0..MAX_REGIONS {
            held.placeholder(region.clone()).ok().unwrap();
        }
        assert!(held.placeholder(region.clone()).is_err());
        // The same placeholder twice in one response is refused, not sent twice.
        let mut held = Regions::default();
        let placeholder = held.placeholder(region).ok().unwrap();
        let body = response(&mut |_| Some(placeholder.clone()));
        assert!(matches!(frame(1, 12, &body, held), Err(Reject::Encode(_))));
    }
}
