//! Decompression bombs (issue 10): a few hundred KB of zstd or gzip whose records claim a GiB,
//! produced to each path that decompresses on Produce: a compacted topic (every record needs a
//! key), a topic with `compression.type` (recompression), a topic with
//! `message.timestamp.before.max.ms` (KIP-937 bounds). Each is refused with Kafka's code and
//! nothing appended, while the broker (in this process) decompresses at most the topic's
//! max.message.bytes of it: the test process's peak resident set stays far below the bomb.

mod common;

use std::io::Read;
use std::sync::OnceLock;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

/// Kafka's RECORD_TOO_LARGE: records past max.message.bytes.
const RECORD_TOO_LARGE: i16 = 10;
/// Kafka's INVALID_RECORD: `DefaultRecordBatch.RecordIterator` finds bytes after the declared
/// records ("Incorrect declared batch size, records still remaining in file").
const INVALID_RECORD: i16 = 87;
/// Zeros in a zstd bomb: 1 GiB.
const ZSTD_ZEROS: u64 = 1 << 30;
/// Zeros in a gzip bomb: 512 MiB (deflate tops out near 1:1032, so about 520 KB, within the
/// default max.message.bytes).
const GZIP_ZEROS: u64 = 512 << 20;
/// The peak resident set this test process may reach, bombs refused (about 25 MiB measured):
/// under a fifth of the smallest bomb.
const PEAK_RSS_KIB_MAX: u64 = 96 << 10;
/// The bomb tests run one at a time: their bound is on one broker's memory.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An uncompressed records section: `prefix`, `zeros` zero bytes, `suffix`.
struct Records {
    prefix: Vec<u8>,
    zeros: u64,
    suffix: Vec<u8>,
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// One record keyed `k` whose value is `zeros` zero bytes: well formed, only huge.
fn huge_value(zeros: u64) -> Records {
    let mut body = vec![0u8, 0, 0]; // attributes, timestamp delta, offset delta
    put_varint(&mut body, 1);
    body.push(b'k');
    put_varint(&mut body, zeros as i64);
    let mut prefix = Vec::new();
    put_varint(&mut prefix, (body.len() as u64 + zeros + 1) as i64);
    prefix.extend_from_slice(&body);
    Records {
        prefix,
        zeros,
        suffix: vec![0], // no headers
    }
}

/// One small keyed record, then `zeros` zero bytes that no record accounts for.
fn trailing_zeros(zeros: u64) -> Records {
    let mut record = huge_value(1);
    record.prefix.push(0);
    record.prefix.append(&mut record.suffix);
    Records {
        prefix: record.prefix,
        zeros,
        suffix: Vec::new(),
    }
}

/// `records` through zstd's streaming encoder: the test holds only the output.
fn zstd(records: &Records) -> Vec<u8> {
    let mut input = (&records.prefix[..])
        .chain(std::io::repeat(0).take(records.zeros))
        .chain(&records.suffix[..]);
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    std::io::copy(&mut input, &mut encoder).unwrap();
    encoder.finish().unwrap()
}

/// `records` as one gzip member. The zeros are deflated once, 1 MiB ending in a full flush (no
/// reference reaches before it), and that stretch repeated: deflating 512 MiB here would take a
/// debug build minutes. The trailer's CRC32 and size are those of the whole input.
fn gzip(records: &Records) -> Vec<u8> {
    use flate2::{Compress, Compression, Crc, FlushCompress, Status};
    const STRETCH: u64 = 1 << 20;
    assert_eq!(records.zeros % STRETCH, 0);
    fn deflate(c: &mut Compress, input: &[u8], flush: FlushCompress) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() / 64 + 1024);
        let start = c.total_in();
        loop {
            let used = (c.total_in() - start) as usize;
            let status = c.compress_vec(&input[used..], &mut out, flush).unwrap();
            let done = (c.total_in() - start) as usize == input.len() && out.len() < out.capacity();
            if status == Status::StreamEnd || (done && !matches!(flush, FlushCompress::Finish)) {
                return out;
            }
            out.reserve(64 << 10);
        }
    }
    let mut c = Compress::new(Compression::best(), false);
    let zeros = vec![0u8; STRETCH as usize];
    let mut crc = Crc::new();
    crc.update(&records.prefix);
    let mut stretch_crc = Crc::new();
    stretch_crc.update(&zeros);
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]; // gzip header, no name, no mtime
    out.extend(deflate(&mut c, &records.prefix, FlushCompress::Full));
    let stretch = deflate(&mut c, &zeros, FlushCompress::Full);
    for _ in 0..records.zeros / STRETCH {
        out.extend_from_slice(&stretch);
        crc.combine(&stretch_crc);
    }
    out.extend(deflate(&mut c, &records.suffix, FlushCompress::Finish));
    crc.update(&records.suffix);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    out.extend_from_slice(&crc.amount().to_le_bytes());
    out
}

/// A magic-2 batch of one record (CRC32C correct, timestamps now) whose records section is
/// `section`, compressed with `codec`.
fn batch(codec: i16, section: &[u8]) -> Bytes {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut b = vec![0u8; 61];
    b[16] = 2; // magic
    b[21..23].copy_from_slice(&codec.to_be_bytes());
    b[27..35].copy_from_slice(&now_ms.to_be_bytes()); // baseTimestamp
    b[35..43].copy_from_slice(&now_ms.to_be_bytes()); // maxTimestamp
    b[43..51].copy_from_slice(&(-1i64).to_be_bytes()); // producerId
    b[51..53].copy_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    b[53..57].copy_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    b[57..61].copy_from_slice(&1i32.to_be_bytes()); // recordsCount (lastOffsetDelta 0)
    b.extend_from_slice(section);
    let length = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// A bomb, what it is, and Kafka's answer to it.
struct Bomb {
    name: &'static str,
    batch: Bytes,
    code: i16,
}

/// The four bombs, built once for every test of this file.
fn bombs() -> &'static [Bomb] {
    static BOMBS: OnceLock<Vec<Bomb>> = OnceLock::new();
    BOMBS.get_or_init(|| {
        let bombs = vec![
            Bomb {
                name: "zstd, one 1 GiB value",
                batch: batch(4, &zstd(&huge_value(ZSTD_ZEROS))),
                code: RECORD_TOO_LARGE,
            },
            Bomb {
                name: "zstd, 1 GiB after the record",
                batch: batch(4, &zstd(&trailing_zeros(ZSTD_ZEROS))),
                code: INVALID_RECORD,
            },
            Bomb {
                name: "gzip, one 512 MiB value",
                batch: batch(1, &gzip(&huge_value(GZIP_ZEROS))),
                code: RECORD_TOO_LARGE,
            },
            Bomb {
                name: "gzip, 512 MiB after the record",
                batch: batch(1, &gzip(&trailing_zeros(GZIP_ZEROS))),
                code: INVALID_RECORD,
            },
        ];
        for bomb in &bombs {
            assert!(bomb.batch.len() < 1 << 20, "{}: {} bytes", bomb.name, bomb.batch.len());
        }
        bombs
    })
}

async fn create(raw: &mut Raw, name: &str, configs: &[(&str, &str)]) {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(configs);
    let request = CreateTopicsRequest::default()
        .with_topics(vec![t])
        .with_timeout_ms(5000);
    let resp = raw.call(7, &request).await;
    assert_eq!(resp.topics[0].error_code, 0, "create {name}");
}

/// The peak resident set of this process (the broker's too: it runs in it), in KiB.
fn vm_hwm_kib() -> u64 {
    proc_status_kib("self", "VmHWM").unwrap()
}

/// Produces every bomb to a topic created with `configs`: each refused with its code, nothing
/// appended, the broker answering on, its memory a fraction of one bomb.
async fn every_bomb_is_refused(configs: &[(&str, &str)]) {
    // VmHWM is the whole test process's: two of these brokers at once would be measured
    // together (97 MiB measured so at 76fd742, 99-258 MiB once the binary grew, depending on
    // how the two overlapped, against about 63 MiB for one at a time).
    let _turn = ONE_AT_A_TIME.lock().await;
    let bombs = bombs();
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let name = unique("bombs");
    create(&mut raw, &name, configs).await;
    for bomb in bombs {
        let resp = raw.call(9, &produce_request(&name, 0, bomb.batch.clone(), -1)).await;
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!(
            (p.error_code, p.base_offset),
            (bomb.code, -1),
            "{configs:?}, {}: {:?}",
            bomb.name,
            p.error_message
        );
        assert_eq!(
            latest_offset(&mut raw, &name).await,
            0,
            "{}: nothing appended",
            bomb.name
        );
    }
    // Still serving, and still accepting a sane batch on the same topic.
    let sane = sluice::log::batch::encode_records(
        &[(Some(Bytes::from("k")), Some(Bytes::from("v")), now_ms())],
        kafka_protocol::records::Compression::Zstd,
    )
    .unwrap();
    let resp = raw.call(9, &produce_request(&name, 0, sane, -1)).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    let peak = vm_hwm_kib();
    assert!(peak < PEAK_RSS_KIB_MAX, "{configs:?}: peak resident set {peak} KiB");
    broker.handle.shutdown().await;
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn the_gzip_bomb_builder_makes_one_valid_member() {
    // What the bombs would be to a reader without a bound: checked on a small one.
    for records in [huge_value(4 << 20), trailing_zeros(4 << 20)] {
        let compressed = gzip(&records);
        let mut whole = Vec::new();
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_end(&mut whole)
            .unwrap();
        let expected_len = records.prefix.len() + (4 << 20) + records.suffix.len();
        assert_eq!(whole.len(), expected_len);
        assert!(whole.starts_with(&records.prefix) && whole.ends_with(&records.suffix));
        assert!(
            whole[records.prefix.len()..expected_len - records.suffix.len()]
                .iter()
                .all(|b| *b == 0)
        );
    }
}

#[tokio::test]
async fn bombs_to_a_compacted_topic_are_refused_within_max_message_bytes() {
    // Kafka's LogValidator reads every record of a compacted topic for its key.
    every_bomb_is_refused(&[("cleanup.policy", "compact")]).await;
}

#[tokio::test]
async fn bombs_to_a_recompressing_topic_are_refused_within_max_message_bytes() {
    // compression.type other than the batch's: Kafka's LogValidator decompresses to recompress.
    every_bomb_is_refused(&[("compression.type", "lz4")]).await;
}

#[tokio::test]
async fn bombs_to_a_topic_bounding_timestamps_are_refused_within_max_message_bytes() {
    // KIP-937: every record's timestamp is checked against the broker's clock.
    every_bomb_is_refused(&[("message.timestamp.before.max.ms", "3600000")]).await;
}
