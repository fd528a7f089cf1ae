//! Hostile bytes (issue 10, "Resource bounds"): a fuzzer over request decoding, record batch
//! validation and log recovery, and the broker process under a tight address-space limit
//! answering frames whose claimed lengths would need far more memory than it may map.
//!
//! The fuzzer is a seeded loop over `fastrand`, not proptest or cargo-fuzz: it runs on stable
//! inside `cargo test` for a time budget (about a second per target) that `protocol-tests/fuzz.sh`
//! stretches; it mutates valid encodings (where decoders break), for which kafka-protocol's
//! types offer no proptest strategies; and fastrand is in the tree already (through tempfile).
//! Each case draws from a generator seeded by (seed, case), and the fixed seed runs first, so a
//! failure is replayed by the seed and case it prints (`SLUICE_FUZZ_SEED`, `SLUICE_FUZZ_CASE`),
//! and the input it prints is small enough to stand in for shrinking.
//!
//! Environment: `SLUICE_FUZZ_MS`, the time per target after its fixed-seed cases (default
//! 1000); `SLUICE_FUZZ_SEED` (decimal or 0x-hex), only that seed; with `SLUICE_FUZZ_CASE`, only
//! its cases up to that one (the decode corpus grows from earlier cases).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use fastrand::Rng;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType as RecordTimestampType,
};
use sluice::api::{INTERNAL, SUPPORTED, decode_only, parse_header};
use sluice::log::batch::{self, STORED_RECORDS_BYTES_MAX, decode_records, encode_records, recompress, scan_records};
use sluice::log::{Log, LogConfig, validate_batches};

// ---------------------------------------------------------------------------------------------
// Heap accounting, in this test binary only: the bound a decode must keep is measured, not
// assumed. The broker itself runs on the system allocator.

struct CountingAllocator;

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    /// The case running on this thread, named by the allocator when a case asks for a block
    /// no input of the fuzzer's size can justify (it aborts there: the process could not
    /// survive the allocation to report it later).
    static CASE: Cell<(&'static str, u64, u64)> = const { Cell::new(("", 0, 0)) };
}

/// A single block larger than this while measuring means a claim was believed.
const SINGLE_BLOCK_BYTES_MAX: usize = 1 << 30;

fn note(delta: isize) {
    let _ = MEASURING.try_with(|m| {
        if m.get() {
            let live = LIVE.with(|l| {
                let live = l.get() + delta;
                l.set(live);
                live
            });
            PEAK.with(|p| p.set(p.get().max(live)));
        }
    });
}

fn refuse_oversized(size: usize) {
    if size > SINGLE_BLOCK_BYTES_MAX && MEASURING.try_with(Cell::get).unwrap_or(false) {
        let (target, seed, case) = CASE.with(Cell::get);
        // No allocation from here on: the message goes straight to stderr.
        let _ = writeln!(
            std::io::stderr(),
            "fuzz {target}: a {size}-byte block was asked for; replay: SLUICE_FUZZ_SEED={seed:#x} SLUICE_FUZZ_CASE={case}"
        );
        std::process::abort();
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// const-initialised thread-locals without destructors, so touching them never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        refuse_oversized(layout.size());
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            note(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        refuse_oversized(layout.size());
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            note(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        refuse_oversized(new_size);
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `f` and returns what it returned with the most heap bytes this thread held at once
/// meanwhile, above what it held before.
fn peak_heap<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    MEASURING.with(|m| m.set(true));
    let result = f();
    MEASURING.with(|m| m.set(false));
    (result, PEAK.with(Cell::get).max(0) as usize)
}

// ---------------------------------------------------------------------------------------------
// The loop: fixed seed, then random seeds for the time budget; a watchdog for hangs.

const FIXED_SEED: u64 = 0x5eed_0f51;
/// A case running longer than this is a hang (debug build, a loaded machine: generous).
const CASE_MS_MAX: u64 = 20_000;

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={text} is not a number")))
}

/// The generator of one case: every case of a seed is reachable without the ones before.
fn case_rng(seed: u64, case: u64) -> Rng {
    Rng::with_seed(seed ^ case.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Aborts the process, naming the case, when one case runs past `CASE_MS_MAX`: a hang in
/// `cargo test` would otherwise just sit there.
struct Watchdog {
    started_ms: Arc<AtomicU64>,
    case: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    clock: Instant,
}

impl Watchdog {
    fn start(target: &'static str, seed: u64) -> Watchdog {
        let (started_ms, case, done) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let clock = Instant::now();
        let watch = (started_ms.clone(), case.clone(), done.clone());
        std::thread::spawn(move || {
            let (started_ms, case, done) = watch;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let elapsed = (clock.elapsed().as_millis() as u64).saturating_sub(started_ms.load(Ordering::Relaxed));
                if elapsed > CASE_MS_MAX && !done.load(Ordering::Relaxed) {
                    let case = case.load(Ordering::Relaxed);
                    eprintln!(
                        "fuzz {target}: case hangs ({elapsed} ms); replay: SLUICE_FUZZ_SEED={seed:#x} SLUICE_FUZZ_CASE={case}"
                    );
                    std::process::abort();
                }
            }
        });
        Watchdog {
            started_ms,
            case,
            done,
            clock,
        }
    }

    fn case_starts(&self, case: u64) {
        self.case.store(case, Ordering::Relaxed);
        self.started_ms
            .store(self.clock.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Runs `one` on cases of the fixed seed (`fixed_cases` of them), then of a random seed until
/// the time budget is spent, or only what `SLUICE_FUZZ_SEED`/`SLUICE_FUZZ_CASE` ask for.
/// Returns the number of cases run.
fn fuzz(target: &'static str, fixed_cases: u64, mut one: impl FnMut(&mut Rng)) -> u64 {
    let budget = Duration::from_millis(env_u64("SLUICE_FUZZ_MS").unwrap_or(1000));
    let mut plans: Vec<(u64, Option<u64>)> = match (env_u64("SLUICE_FUZZ_SEED"), env_u64("SLUICE_FUZZ_CASE")) {
        (Some(seed), Some(case)) => vec![(seed, Some(case + 1))],
        (Some(seed), None) => vec![(seed, None)],
        (None, _) => vec![(FIXED_SEED, Some(fixed_cases)), (fastrand::u64(..), None)],
    };
    let mut total = 0;
    for (seed, cases) in plans.drain(..) {
        let watchdog = Watchdog::start(target, seed);
        let start = Instant::now();
        let mut case = 0;
        while cases.map_or(start.elapsed() < budget, |n| case < n) {
            CASE.with(|c| c.set((target, seed, case)));
            watchdog.case_starts(case);
            let mut rng = case_rng(seed, case);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| one(&mut rng))) {
                eprintln!("fuzz {target}: case failed; replay: SLUICE_FUZZ_SEED={seed:#x} SLUICE_FUZZ_CASE={case}");
                resume_unwind(panic);
            }
            case += 1;
        }
        eprintln!("fuzz {target}: seed {seed:#x}: {case} cases in {:?}", start.elapsed());
        total += case;
    }
    total
}

fn hex(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(600).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 600 {
        format!("{shown}... ({} bytes)", bytes.len())
    } else {
        shown
    }
}

// ---------------------------------------------------------------------------------------------
// Mutations, shared by the three targets.

/// Bytes a random generator rarely produces and decoders care about: zero (empty, null in
/// compact encodings), small counts, the sign bit, all ones (-1: null).
fn biased_byte(rng: &mut Rng) -> u8 {
    match rng.u8(0..20) {
        0..=7 => 0,
        8..=10 => rng.u8(1..=4),
        11..=12 => 0xff,
        13 => 0x80,
        14 => 0x7f,
        _ => rng.u8(..),
    }
}

fn biased_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| biased_byte(rng)).collect()
}

/// Lengths and counts on the edge: null, empty, one, the most a signed or unsigned field holds,
/// and the 2^31 claims that used to be allocated before being read.
const INTERESTING_I32: [i32; 10] = [-2, -1, 0, 1, 2, 127, 128, 0x7fff, i32::MAX, i32::MIN];
const INTERESTING_I16: [i16; 7] = [-2, -1, 0, 1, 2, i16::MAX, i16::MIN];
const INTERESTING_UVARINT: [u32; 8] = [0, 1, 2, 127, 128, 1 << 28, u32::MAX - 1, u32::MAX];

fn uvarint(mut v: u32) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// Applies one to four random edits to `input`; `other` is a donor for splicing.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..rng.usize(1..=4) {
        let len = input.len();
        let at = rng.usize(0..=len);
        match rng.u8(0..11) {
            0 if len > 0 => input[at.min(len - 1)] ^= 1 << rng.u8(0..8),
            1 if len > 0 => input[at.min(len - 1)] = biased_byte(rng),
            2 if len >= 2 => {
                let at = at.min(len - 2);
                let v = INTERESTING_I16[rng.usize(..INTERESTING_I16.len())];
                input[at..at + 2].copy_from_slice(&v.to_be_bytes());
            }
            3 if len >= 4 => {
                let at = at.min(len - 4);
                let v = INTERESTING_I32[rng.usize(..INTERESTING_I32.len())];
                input[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            4 => {
                let v = uvarint(INTERESTING_UVARINT[rng.usize(..INTERESTING_UVARINT.len())]);
                let end = (at + v.len()).min(len);
                input.splice(at..if rng.bool() { end } else { at }, v);
            }
            5 => input.truncate(at),
            6 => {
                let n = rng.usize(1..=16);
                let bytes = biased_bytes(rng, n);
                input.splice(at..at, bytes);
            }
            7 if len > 0 => {
                let end = (at + rng.usize(1..=16)).min(len);
                input.drain(at.min(len - 1)..end.max(at.min(len - 1)));
            }
            8 if len > 0 => {
                // Duplicate a range: repeated array elements, nested structures one level deeper.
                let from = rng.usize(0..len);
                let end = (from + rng.usize(1..=64)).min(len);
                let chunk = input[from..end].to_vec();
                input.splice(at..at, chunk);
            }
            9 if !other.is_empty() => {
                let from = rng.usize(0..other.len());
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
            _ => {
                let n = rng.usize(1..=8);
                let bytes = biased_bytes(rng, n);
                input.extend_from_slice(&bytes);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Target 1: request frames, through the server's decode path.

fn encode<R: Encodable>(request: &R, version: i16) -> Option<Vec<u8>> {
    let mut buf = BytesMut::new();
    request.encode(&mut buf, version).ok()?;
    Some(buf.to_vec())
}

macro_rules! default_bodies {
    ($($key:ident => $request:ty),* $(,)?) => {
        /// The default request of `key` at `version`: every API's simplest valid body.
        fn default_body(key: ApiKey, version: i16) -> Option<Vec<u8>> {
            match key {
                $(ApiKey::$key => encode(&<$request>::default(), version),)*
                _ => None,
            }
        }
    };
}

default_bodies! {
    Produce => ProduceRequest, Fetch => FetchRequest, ListOffsets => ListOffsetsRequest,
    Metadata => MetadataRequest, ApiVersions => ApiVersionsRequest, CreateTopics => CreateTopicsRequest,
    DeleteTopics => DeleteTopicsRequest, CreatePartitions => CreatePartitionsRequest,
    FindCoordinator => FindCoordinatorRequest, JoinGroup => JoinGroupRequest, SyncGroup => SyncGroupRequest,
    Heartbeat => HeartbeatRequest, LeaveGroup => LeaveGroupRequest, ListGroups => ListGroupsRequest,
    DescribeGroups => DescribeGroupsRequest, DeleteGroups => DeleteGroupsRequest,
    OffsetCommit => OffsetCommitRequest, OffsetFetch => OffsetFetchRequest, OffsetDelete => OffsetDeleteRequest,
    ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest, ConsumerGroupDescribe => ConsumerGroupDescribeRequest,
    DescribeConfigs => DescribeConfigsRequest, AlterConfigs => AlterConfigsRequest,
    IncrementalAlterConfigs => IncrementalAlterConfigsRequest, DescribeCluster => DescribeClusterRequest,
    DescribeLogDirs => DescribeLogDirsRequest, DeleteRecords => DeleteRecordsRequest,
    AlterReplicaLogDirs => AlterReplicaLogDirsRequest, UpdateFeatures => UpdateFeaturesRequest,
    UnregisterBroker => UnregisterBrokerRequest,
    InitProducerId => InitProducerIdRequest, AddPartitionsToTxn => AddPartitionsToTxnRequest,
    AddOffsetsToTxn => AddOffsetsToTxnRequest, EndTxn => EndTxnRequest, TxnOffsetCommit => TxnOffsetCommitRequest,
    DescribeTransactions => DescribeTransactionsRequest, ListTransactions => ListTransactionsRequest,
    DescribeProducers => DescribeProducersRequest, ListConfigResources => ListConfigResourcesRequest,
    DescribeQuorum => DescribeQuorumRequest, DescribeTopicPartitions => DescribeTopicPartitionsRequest,
    WriteTxnMarkers => WriteTxnMarkersRequest, OffsetForLeaderEpoch => OffsetForLeaderEpochRequest,
    ElectLeaders => ElectLeadersRequest, AlterPartitionReassignments => AlterPartitionReassignmentsRequest,
    ListPartitionReassignments => ListPartitionReassignmentsRequest,
    AddRaftVoter => AddRaftVoterRequest, RemoveRaftVoter => RemoveRaftVoterRequest,
    SaslHandshake => SaslHandshakeRequest, SaslAuthenticate => SaslAuthenticateRequest,
    DescribeUserScramCredentials => DescribeUserScramCredentialsRequest,
    AlterUserScramCredentials => AlterUserScramCredentialsRequest,
    DescribeAcls => DescribeAclsRequest, CreateAcls => CreateAclsRequest, DeleteAcls => DeleteAclsRequest,
    DescribeClientQuotas => DescribeClientQuotasRequest, AlterClientQuotas => AlterClientQuotasRequest,
    CreateDelegationToken => CreateDelegationTokenRequest, RenewDelegationToken => RenewDelegationTokenRequest,
    ExpireDelegationToken => ExpireDelegationTokenRequest,
    DescribeDelegationToken => DescribeDelegationTokenRequest,
    ShareGroupHeartbeat => ShareGroupHeartbeatRequest, ShareGroupDescribe => ShareGroupDescribeRequest,
    ShareFetch => ShareFetchRequest, ShareAcknowledge => ShareAcknowledgeRequest,
    DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest,
    AlterShareGroupOffsets => AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsets => DeleteShareGroupOffsetsRequest,
    ReadShareGroupState => ReadShareGroupStateRequest, WriteShareGroupState => WriteShareGroupStateRequest,
}

fn name(text: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(text))
}

/// Requests with nested arrays filled in, for the APIs whose bodies are deepest; a version
/// that cannot carry a field set here fails to encode and is left to the default body.
fn rich_bodies(key: ApiKey, version: i16) -> Vec<Vec<u8>> {
    let records = encode_records(
        &[
            (Some(Bytes::from_static(b"k")), Some(Bytes::from_static(b"v")), 1),
            (None, Some(Bytes::from_static(b"value")), 2),
        ],
        Compression::None,
    )
    .expect("encode records");
    let bodies = match key {
        ApiKey::Produce => vec![encode(
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(1000)
                .with_topic_data(vec![
                    TopicProduceData::default()
                        .with_name(name("t"))
                        .with_partition_data(vec![
                            PartitionProduceData::default()
                                .with_index(0)
                                .with_records(Some(records.clone())),
                            PartitionProduceData::default()
                                .with_index(1)
                                .with_records(Some(records)),
                        ]),
                ]),
            version,
        )],
        ApiKey::Fetch => {
            let partition = FetchPartition::default()
                .with_partition(3)
                .with_fetch_offset(7)
                .with_partition_max_bytes(1 << 20);
            let request = FetchRequest::default().with_max_bytes(1 << 20).with_topics(vec![
                FetchTopic::default()
                    .with_topic(name("t"))
                    .with_partitions(vec![partition.clone(), partition]),
            ]);
            vec![
                encode(&request, version),
                encode(
                    &request.with_forgotten_topics_data(vec![
                        ForgottenTopic::default()
                            .with_topic(name("f"))
                            .with_partitions(vec![1, 2]),
                    ]),
                    version,
                ),
            ]
        }
        ApiKey::Metadata => vec![encode(
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name("a"))),
                MetadataRequestTopic::default().with_name(Some(name("bb"))),
            ])),
            version,
        )],
        ApiKey::CreateTopics => vec![encode(
            &CreateTopicsRequest::default().with_timeout_ms(1000).with_topics(vec![
                CreatableTopic::default()
                    .with_name(name("t"))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_assignments(vec![
                        CreatableReplicaAssignment::default()
                            .with_partition_index(0)
                            .with_broker_ids(vec![BrokerId(1)]),
                    ])
                    .with_configs(vec![
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_static_str("cleanup.policy"))
                            .with_value(Some(StrBytes::from_static_str("compact"))),
                    ]),
            ]),
            version,
        )],
        ApiKey::OffsetCommit => vec![encode(
            &OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_topics(vec![
                    OffsetCommitRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(0)
                                .with_committed_offset(5)
                                .with_committed_metadata(Some(StrBytes::from_static_str("m"))),
                        ]),
                ]),
            version,
        )],
        ApiKey::JoinGroup => vec![encode(
            &JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_session_timeout_ms(10_000)
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![
                    JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str("range"))
                        .with_metadata(Bytes::from_static(&[0, 1, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 0])),
                ]),
            version,
        )],
        ApiKey::AlterPartitionReassignments => {
            use kafka_protocol::messages::alter_partition_reassignments_request::{
                ReassignablePartition, ReassignableTopic,
            };
            vec![encode(
                &AlterPartitionReassignmentsRequest::default()
                    .with_timeout_ms(1_000)
                    .with_topics(vec![ReassignableTopic::default().with_name(name("t")).with_partitions(
                        vec![
                        ReassignablePartition::default()
                            .with_partition_index(0)
                            .with_replicas(Some(vec![BrokerId(1), BrokerId(2)])),
                        ReassignablePartition::default().with_partition_index(1),
                    ],
                    )]),
                version,
            )]
        }
        _ => Vec::new(),
    };
    bodies.into_iter().flatten().collect()
}

/// Inputs known to decode for one (key, version) the broker serves; grows with the mutants
/// that decode, so later cases reach deeper structures than the seeds.
struct Api {
    key: ApiKey,
    version: i16,
    corpus: Vec<Vec<u8>>,
}

const CORPUS_MAX: usize = 48;

fn served_apis() -> Vec<Api> {
    let mut apis = Vec::new();
    // What dispatch serves: the advertised APIs and those between brokers only.
    for v in SUPPORTED.iter().chain(INTERNAL) {
        for version in v.min..=v.max {
            let mut corpus = rich_bodies(v.key, version);
            corpus.extend(default_body(v.key, version));
            assert!(!corpus.is_empty(), "no body encodes for {:?} v{version}", v.key);
            apis.push(Api {
                key: v.key,
                version,
                corpus,
            });
        }
    }
    apis
}

fn request_header(key: ApiKey, version: i16, correlation_id: i32) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("sluice-fuzz")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, key.request_header_version(version))
        .expect("encode header");
    buf.to_vec()
}

/// The server's path for a frame's body (length prefix removed): the header, then the body
/// by key and version. Ok: the bytes of the body the request took.
fn decode_frame(frame: &[u8]) -> Result<usize, sluice::api::Reject> {
    let mut body = Bytes::copy_from_slice(frame);
    let (key, header) = parse_header(&mut body)?;
    let before = body.len();
    decode_only(key, header.request_api_version, &mut body)?;
    Ok(before - body.len())
}

/// The heap a decode may hold for a frame of `len` bytes: a constant for the decoder's own
/// needs (error messages, small maps) plus a multiple of the frame, because a decoded element
/// can be larger in memory than on the wire (a Metadata v1 topic of a null name is 2 bytes
/// there and 72 in memory). The multiple is the one the server charges a request against
/// `queued.max.request.bytes` (`api::DECODED_BYTES_PER_BYTE`), so this test is what keeps
/// that charge true. Claimed lengths must not count: before the patched decoder, a 20-byte
/// frame asked for 150 GB here.
const DECODE_HEAP_BYTES_BASE: usize = 16 * 1024;
const DECODE_HEAP_BYTES_PER_BYTE: usize = sluice::api::DECODED_BYTES_PER_BYTE;

fn decode_heap_bound(len: usize) -> usize {
    DECODE_HEAP_BYTES_BASE + DECODE_HEAP_BYTES_PER_BYTE * len
}

#[derive(Default)]
struct DecodeStats {
    decoded: u64,
    refused: u64,
    /// The most heap per input byte beyond the base, over all cases.
    worst_per_byte: f64,
    most_heap: usize,
    largest_input: usize,
}

fn decode_case(rng: &mut Rng, apis: &mut [Api], stats: &mut DecodeStats) {
    let which = rng.usize(..apis.len());
    let api = &apis[which];
    let header = request_header(api.key, api.version, rng.i32(..));
    let (body, whole_frame) = match rng.u8(0..10) {
        // Random bytes after a valid header: decoders meet structures no seed had.
        0 => {
            let n = rng.usize(0..256);
            (biased_bytes(rng, n), false)
        }
        // The header mutated too: parse_header meets unknown keys, versions, header fields.
        1 => {
            let mut frame = header.clone();
            frame.extend_from_slice(&api.corpus[rng.usize(..api.corpus.len())]);
            let other = &api.corpus[rng.usize(..api.corpus.len())];
            mutate(rng, &mut frame, other);
            (frame, true)
        }
        _ => {
            let mut body = api.corpus[rng.usize(..api.corpus.len())].clone();
            let other = &api.corpus[rng.usize(..api.corpus.len())];
            mutate(rng, &mut body, other);
            (body, false)
        }
    };
    let frame = if whole_frame {
        body.clone()
    } else {
        [header.as_slice(), &body].concat()
    };
    let started = Instant::now();
    let (result, peak) = peak_heap(|| decode_frame(&frame));
    let elapsed = started.elapsed();
    let (key, version) = (api.key, api.version);
    if key == ApiKey::Produce {
        let charged = produce_charge(&frame);
        assert!(
            peak <= charged,
            "Produce v{version}: {} bytes held {peak} bytes of heap, charged {charged}: {}",
            frame.len(),
            hex(&frame)
        );
    }
    assert!(
        peak <= decode_heap_bound(frame.len()),
        "{key:?} v{version}: {} bytes held {peak} bytes of heap: {}",
        frame.len(),
        hex(&frame)
    );
    assert!(
        elapsed < Duration::from_secs(2),
        "{key:?} v{version}: decoding took {elapsed:?}: {}",
        hex(&frame)
    );
    let per_byte = peak.saturating_sub(DECODE_HEAP_BYTES_BASE) as f64 / frame.len().max(1) as f64;
    stats.worst_per_byte = stats.worst_per_byte.max(per_byte);
    stats.most_heap = stats.most_heap.max(peak);
    stats.largest_input = stats.largest_input.max(frame.len());
    match result {
        Ok(used) => {
            stats.decoded += 1;
            if !whole_frame {
                let api = &mut apis[which];
                let kept = body[..used].to_vec();
                if api.corpus.len() < CORPUS_MAX {
                    api.corpus.push(kept);
                } else {
                    let slot = rng.usize(..CORPUS_MAX);
                    api.corpus[slot] = kept;
                }
            }
        }
        Err(_) => stats.refused += 1,
    }
}

#[test]
fn no_request_frame_panics_hangs_or_allocates_beyond_its_size() {
    let mut apis = served_apis();
    let mut stats = DecodeStats::default();
    // The seeds themselves decode: the fuzzer starts from what the server accepts.
    for api in &apis {
        for body in &api.corpus {
            let frame = [request_header(api.key, api.version, 1).as_slice(), body].concat();
            let used = decode_frame(&frame).unwrap_or_else(|e| panic!("seed of {:?} v{}: {e}", api.key, api.version));
            assert_eq!(
                used,
                body.len(),
                "{:?} v{} left bytes of its own encoding",
                api.key,
                api.version
            );
        }
    }
    let cases = fuzz("frames", 20 * apis.len() as u64, |rng| {
        decode_case(rng, &mut apis, &mut stats)
    });
    eprintln!(
        "fuzz frames: {cases} cases over {} key-versions: {} decoded, {} refused; heap at most {} bytes, {:.0} per input byte past the base (bound {DECODE_HEAP_BYTES_PER_BYTE}); largest input {} bytes",
        apis.len(),
        stats.decoded,
        stats.refused,
        stats.most_heap,
        stats.worst_per_byte,
        stats.largest_input
    );
    assert!(stats.decoded > 0 && stats.refused > 0);
}

/// Decodes `body` as API `key` at `version`, whole, and checks the heap it held against the
/// decoding bound; prints the bytes held per byte of frame, labelled `what`.
fn decodes_within_the_bound(key: ApiKey, version: i16, body: &[u8], what: &str) {
    let frame = [request_header(key, version, 1).as_slice(), body].concat();
    let (result, peak) = peak_heap(|| decode_frame(&frame));
    assert_eq!(result.expect("decodes"), body.len(), "{key:?} v{version}");
    let per_byte = peak as f64 / frame.len() as f64;
    eprintln!(
        "{key:?} v{version}: {what}, {} bytes, held {peak} bytes decoding ({per_byte:.1} per byte)",
        frame.len()
    );
    assert!(
        peak <= decode_heap_bound(frame.len()),
        "{key:?} v{version}: {peak} bytes for {}",
        frame.len()
    );
}

/// What `queued.max.request.bytes` charges a Produce frame (header included, no length):
/// its bytes, then its partitions' decoded cost (`request_memory::produce_extra`), and the
/// small constant every decode is allowed.
fn produce_charge(frame: &[u8]) -> usize {
    DECODE_HEAP_BYTES_BASE
        + sluice::api::request_memory::charge(ApiKey::Produce as i16, frame.len())
        + sluice::api::request_memory::produce_extra(frame)
}

/// A Produce request's records stay slices of the frame, so it is charged its bytes and then
/// its partitions. Its densest decoded form, partitions without records (8 bytes each before
/// v9, 6 from it, about 100 in memory), is charged at least what it holds decoding, and stays
/// within the decoding bound every other API is held to.
#[test]
fn a_produce_request_of_empty_partitions_decodes_within_the_bound() {
    for version in [3, 9, 13] {
        let partitions: Vec<PartitionProduceData> = (0..20_000)
            .map(|i| PartitionProduceData::default().with_index(i))
            .collect();
        let topic = if version >= 13 {
            TopicProduceData::default().with_topic_id(uuid::Uuid::from_u128(7))
        } else {
            TopicProduceData::default().with_name(name("t"))
        };
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(1000)
            .with_topic_data(vec![topic.with_partition_data(partitions)]);
        let body = encode(&request, version).expect("encode");
        decodes_within_the_bound(ApiKey::Produce, version, &body, "20,000 partitions without records");
        let frame = [request_header(ApiKey::Produce, version, 1).as_slice(), &body].concat();
        let (_, peak) = peak_heap(|| decode_frame(&frame));
        let charged = produce_charge(&frame);
        eprintln!("Produce v{version}: charged {charged} bytes for {peak} held decoding");
        assert!(peak <= charged, "Produce v{version}: held {peak}, charged {charged}");
    }
}

/// The densest request any API decodes, by the same measure: Metadata v1 to v3 topics named
/// null, 2 bytes each on the wire and a `MetadataRequestTopic` in memory, with a Vec's growth
/// on top. It is what `DECODED_BYTES_PER_BYTE` is sized from, so this test fails first if a
/// kafka-protocol upgrade makes decoded requests larger.
#[test]
fn the_densest_metadata_request_decodes_within_the_charged_bound() {
    let topics = 100_000usize;
    let mut body = (topics as i32).to_be_bytes().to_vec();
    body.extend(std::iter::repeat_n(0xffu8, 2 * topics));
    for version in [1, 2, 3] {
        decodes_within_the_bound(ApiKey::Metadata, version, &body, "100,000 topics named null");
    }
}

#[test]
fn a_claimed_count_beyond_the_frame_is_refused_before_allocating() {
    // Kafka's generated readers: "Tried to allocate a collection of size N, but there are only
    // M bytes remaining." Metadata v1 (int32 count) and v12 (compact, unsigned varint) claiming
    // 2^31 - 1 and 2^32 - 2 topics in a frame that ends there.
    let v1 = [request_header(ApiKey::Metadata, 1, 1), i32::MAX.to_be_bytes().to_vec()].concat();
    let v12 = [request_header(ApiKey::Metadata, 12, 1), uvarint(u32::MAX)].concat();
    for frame in [v1, v12] {
        let (result, peak) = peak_heap(|| decode_frame(&frame));
        let reason = match result {
            Err(sluice::api::Reject::Malformed { reason, .. }) => reason,
            other => panic!("expected a malformed request, got {other:?}"),
        };
        assert!(reason.contains("Tried to allocate a collection of size"), "{reason}");
        assert!(
            peak < 64 * 1024,
            "{peak} bytes of heap for a {}-byte frame",
            frame.len()
        );
    }
    // A claim the frame can hold is reserved for at most the bytes left: 64 KiB of 0xfe (a
    // negative name length: each element fails at once) claim 65536 topics of 72 bytes each.
    let mut frame = request_header(ApiKey::Metadata, 1, 1);
    frame.extend_from_slice(&65_536i32.to_be_bytes());
    frame.extend(std::iter::repeat_n(0xfeu8, 65_536));
    let (result, peak) = peak_heap(|| decode_frame(&frame));
    assert!(result.is_err());
    // The frame's copy (decode_frame's, as the server's read buffer) and the reservation.
    assert!(
        peak <= 2 * frame.len() + 4096,
        "{peak} bytes of heap for a {}-byte frame",
        frame.len()
    );
}

#[test]
fn a_large_well_formed_request_costs_a_bounded_multiple_of_its_size() {
    // The decoded form of a request is larger than its bytes, by a factor the types set, not
    // the peer: 32768 topics of a null name (2 bytes each) in Metadata v1.
    let mut frame = request_header(ApiKey::Metadata, 1, 1);
    frame.extend_from_slice(&32_768i32.to_be_bytes());
    frame.extend(std::iter::repeat_n(0xffu8, 65_536));
    let (result, peak) = peak_heap(|| decode_frame(&frame));
    assert_eq!(
        result.expect("decodes"),
        frame.len() - request_header(ApiKey::Metadata, 1, 1).len()
    );
    assert!(
        peak <= decode_heap_bound(frame.len()),
        "{peak} bytes of heap for a {}-byte frame",
        frame.len()
    );
    eprintln!("{peak} bytes of heap for a {}-byte frame", frame.len());
}

#[test]
fn a_record_claiming_billions_of_headers_is_refused_before_allocating() {
    // Record headers (kafka-protocol's IndexMap::with_capacity) and the record count of a
    // batch (Vec::reserve) were sized from the claim; a stored batch needs only a valid CRC.
    let mut batch = encode_records(&[(Some(Bytes::from_static(b"k")), None, 1)], Compression::None)
        .expect("encode")
        .to_vec();
    // The record's last byte is its header count (0): claim i32::MAX instead (a zigzag varint
    // four bytes longer), and lengthen the record (its first byte, also a zigzag varint).
    let last = batch.len() - 1;
    assert_eq!(batch[last], 0);
    batch.truncate(last);
    batch.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
    let record_length = batch[batch::HEADER_LEN] / 2;
    assert!(record_length + 4 < 64, "a one-byte length");
    batch[batch::HEADER_LEN] = (record_length + 4) * 2;
    let batch_length = (batch.len() - batch::LOG_OVERHEAD) as i32;
    batch[8..12].copy_from_slice(&batch_length.to_be_bytes());
    fix_frame(&mut batch);
    let batch = Bytes::from(batch);
    let mut raw = batch.clone();
    let (result, peak) = peak_heap(|| kafka_protocol::records::RecordBatchDecoder::decode(&mut raw));
    let error = result.expect_err("a record claiming 2^31 headers").to_string();
    assert!(error.contains("Tried to allocate"), "{error}");
    assert!(peak < 64 * 1024, "{peak} bytes of heap");
    assert!(decode_records(&batch).is_err());
}

// ---------------------------------------------------------------------------------------------
// Target 2: record batches, through produce's validation.

/// Rewrites batchLength and the CRC32C of each batch framed in `bytes`, so mutations reach the
/// checks behind the CRC: a producer can send any bytes with a valid CRC.
fn fix_frame(bytes: &mut [u8]) {
    let mut pos = 0;
    while pos + batch::HEADER_LEN <= bytes.len() {
        let claimed = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
        let size = usize::try_from(claimed)
            .ok()
            .map(|c| c + batch::LOG_OVERHEAD)
            .filter(|s| (batch::HEADER_LEN..=bytes.len() - pos).contains(s))
            .unwrap_or(bytes.len() - pos);
        let length = (size - batch::LOG_OVERHEAD) as i32;
        bytes[pos + 8..pos + 12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[pos + 21..pos + size]);
        bytes[pos + 17..pos + 21].copy_from_slice(&crc.to_be_bytes());
        pos += size;
    }
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

fn random_records(rng: &mut Rng) -> Vec<(Option<Bytes>, Option<Bytes>, i64)> {
    (0..rng.usize(1..6))
        .map(|i| {
            let field = |rng: &mut Rng| {
                (rng.u8(..4) != 0).then(|| {
                    let n = rng.usize(0..40);
                    Bytes::from(biased_bytes(rng, n))
                })
            };
            (field(rng), field(rng), 1_700_000_000_000 + i as i64)
        })
        .collect()
}

/// A batch of records with headers, which `encode_records` does not write.
fn batch_with_headers(rng: &mut Rng, compression: Compression) -> Vec<u8> {
    let records: Vec<Record> = (0..rng.i64(1..4))
        .map(|i| {
            let mut headers = kafka_protocol::indexmap::IndexMap::new();
            for h in 0..rng.usize(0..3) {
                headers.insert(StrBytes::from_string(format!("h{h}")), Some(Bytes::from_static(b"x")));
            }
            Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: RecordTimestampType::Creation,
                offset: i,
                sequence: -1,
                timestamp: 1_700_000_000_000 + i,
                key: Some(Bytes::from_static(b"key")),
                value: Some(Bytes::from_static(b"value")),
                headers,
                delete_horizon: false,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode batch");
    buf.to_vec()
}

fn seed_batches(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..rng.usize(1..=2) {
        let codec = CODECS[rng.usize(..CODECS.len())];
        let one = if rng.bool() {
            encode_records(&random_records(rng), codec).expect("encode").to_vec()
        } else {
            batch_with_headers(rng, codec)
        };
        bytes.extend_from_slice(&one);
    }
    bytes
}

#[derive(Default)]
struct BatchStats {
    valid: u64,
    refused: u64,
    scanned: u64,
}

fn batch_case(rng: &mut Rng, stats: &mut BatchStats) {
    let mut bytes = if rng.u8(..20) == 0 {
        let n = rng.usize(0..200);
        biased_bytes(rng, n)
    } else {
        seed_batches(rng)
    };
    let other = seed_batches(rng);
    mutate(rng, &mut bytes, &other);
    if rng.u8(..4) != 0 {
        fix_frame(&mut bytes);
    }
    let max_message_bytes = [1 << 20, bytes.len(), 100][rng.usize(..3)];
    let input = Bytes::from(bytes);
    let started = Instant::now();
    let ((), peak) = peak_heap(|| match validate_batches(&input, max_message_bytes) {
        Err(_) => stats.refused += 1,
        Ok(batches) => {
            stats.valid += 1;
            assert_eq!(
                batches.iter().map(|b| b.size()).sum::<usize>(),
                input.len(),
                "batches cover the input"
            );
            for b in &batches {
                assert!(b.offset_count() >= 1 && b.records_count() >= 0);
                let mut records = 0i64;
                if scan_records(b.bytes(), max_message_bytes, |_| records += 1).is_ok() {
                    stats.scanned += 1;
                    assert_eq!(
                        records,
                        i64::from(b.records_count()),
                        "scan_records visits every record"
                    );
                }
                let _ = decode_records(b.bytes());
                if rng.u8(..8) == 0 {
                    let _ = recompress(b, rng.i16(0..=4), max_message_bytes);
                }
            }
        }
    });
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(2),
        "validation took {elapsed:?}: {}",
        hex(&input)
    );
    // Decompression may expand, within the bound produce applies (max.message.bytes), and what
    // a stored batch decompresses to (STORED_RECORDS_BYTES_MAX) for decode_records.
    let bound = 64 * 1024 + 200 * input.len() + 4 * (STORED_RECORDS_BYTES_MAX + max_message_bytes);
    assert!(
        peak <= bound,
        "{} bytes held {peak} bytes of heap: {}",
        input.len(),
        hex(&input)
    );
}

#[test]
fn arbitrary_record_batches_are_refused_or_validated_without_panics_or_hangs() {
    let mut stats = BatchStats::default();
    let cases = fuzz("batches", 2000, |rng| batch_case(rng, &mut stats));
    eprintln!(
        "fuzz batches: {cases} cases: {} valid ({} scanned), {} refused",
        stats.valid, stats.scanned, stats.refused
    );
    assert!(stats.valid > 0 && stats.refused > 0);
}

/// Found by `fuzz.sh`: a batch whose base offset and first timestamp sit at `i64::MAX` puts its
/// second record's past it. Decoding, scanning and recompressing it must not panic (they did in
/// builds with overflow checks); the records' offsets and timestamps wrap, as Kafka's Java
/// `DefaultRecord` computes them, and survive a recompression unchanged.
#[test]
fn a_batch_whose_deltas_pass_i64_max_decodes_and_recompresses_without_panicking() {
    let records = vec![
        (None, Some(Bytes::from_static(b"first")), NOW),
        (None, Some(Bytes::from_static(b"second")), NOW + 1),
    ];
    for codec in [Compression::None, Compression::Gzip] {
        let mut bytes = encode_records(&records, codec).expect("encode").to_vec();
        bytes[0..8].copy_from_slice(&i64::MAX.to_be_bytes()); // base offset
        bytes[27..35].copy_from_slice(&i64::MAX.to_be_bytes()); // first timestamp
        fix_frame(&mut bytes);
        let input = Bytes::from(bytes);
        let Ok(batches) = validate_batches(&input, 1 << 20) else {
            continue; // refused with an error: as good as validated
        };
        for b in &batches {
            let mut seen = 0;
            scan_records(b.bytes(), 1 << 20, |_| seen += 1).expect("scan");
            assert_eq!(seen, 2);
            let decoded = decode_records(b.bytes()).expect("decode");
            let at: Vec<(i64, i64)> = decoded.records.iter().map(|r| (r.offset, r.timestamp)).collect();
            assert_eq!(at, [(i64::MAX, i64::MAX), (i64::MIN, i64::MIN)], "{codec:?}");
            for target in 0..=4 {
                if let Ok(again) = recompress(b, target, 1 << 20) {
                    let redecoded = decode_records(again.bytes()).expect("decode recompressed");
                    let again_at: Vec<(i64, i64)> = redecoded.records.iter().map(|r| (r.offset, r.timestamp)).collect();
                    assert_eq!(again_at, at, "{codec:?} recompressed to {target}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Target 3: log recovery from damaged files.

const NOW: i64 = 1_700_000_000_000;

/// The files of a log directory after a crash (no clean-shutdown marker), and its settings.
#[derive(Clone)]
struct LogFiles {
    files: BTreeMap<String, Vec<u8>>,
    config: LogConfig,
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 700,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

/// Logs to damage: one segment, and several small segments with sparse indexes.
fn base_logs() -> Vec<LogFiles> {
    let mut rng = Rng::with_seed(FIXED_SEED);
    let mut logs = Vec::new();
    for config in [LogConfig::default(), small_segments()] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut log = Log::open(dir.path(), config.clone(), NOW).expect("open");
        for i in 0..12 {
            let codec = if i % 3 == 0 {
                CODECS[rng.usize(..CODECS.len())]
            } else {
                Compression::None
            };
            let bytes = encode_records(&random_records(&mut rng), codec).expect("encode");
            let batches = validate_batches(&bytes, 1 << 20).expect("valid");
            log.append(batches, 0, NOW).expect("append");
        }
        log.flush_handle().sync().expect("sync");
        drop(log); // a crash: no clean-shutdown marker, nothing below the recovery point trusted
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir.path()).expect("read dir").flatten() {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            files.insert(file_name, std::fs::read(entry.path()).expect("read"));
        }
        // Recovery from the first segment: every batch is validated.
        files.remove("recovery-point-offset-checkpoint");
        logs.push(LogFiles { files, config });
    }
    logs
}

/// The `.log` files in offset order.
fn segment_logs(files: &BTreeMap<String, Vec<u8>>) -> Vec<(&String, &Vec<u8>)> {
    files.iter().filter(|(name, _)| name.ends_with(".log")).collect()
}

/// Where each whole batch of `log` ends.
fn batch_ends(log: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut pos = 0;
    while pos + batch::LOG_OVERHEAD <= log.len() {
        let length = i32::from_be_bytes(log[pos + 8..pos + 12].try_into().unwrap());
        let end = pos + batch::LOG_OVERHEAD + usize::try_from(length).unwrap();
        if end > log.len() {
            break;
        }
        ends.push(end);
        pos = end;
    }
    ends
}

/// The batches recovery must keep: every byte before the first damaged one, in log order, as
/// whole batches (recovery may cut a torn tail only). A segment cut anywhere, even after its
/// last whole batch, ends the log: Kafka's `LogLoader.recoverLog` deletes the segments after
/// one it truncated, and so does `Log::open`.
fn intact_prefix(before: &LogFiles, after: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let mut kept = Vec::new();
    for (name, original) in segment_logs(&before.files) {
        let damaged = after.get(name).map_or(&[][..], Vec::as_slice);
        let same = original.iter().zip(damaged).take_while(|(a, b)| a == b).count();
        let whole = batch_ends(original)
            .into_iter()
            .take_while(|end| *end <= same)
            .last()
            .unwrap_or(0);
        kept.extend_from_slice(&original[..whole]);
        if damaged != original.as_slice() {
            break;
        }
    }
    kept
}

/// Every batch from the log start to the log end, read through the log's own indexes.
fn read_all(log: &Log) -> Vec<u8> {
    let (mut offset, end) = (log.log_start_offset(), log.log_end_offset());
    let mut all = Vec::new();
    while offset < end {
        let bytes = log.read(offset, end, 1 << 30, true).expect("read a recovered log");
        let batches = validate_batches(&bytes, 1 << 30).expect("recovered batches are valid");
        let first = &batches[0];
        assert!(
            first.base_offset() <= offset && offset < first.base_offset() + first.offset_count(),
            "a read from {offset} starts at batch {}",
            first.base_offset()
        );
        for b in &batches {
            assert_eq!(b.base_offset(), offset, "offsets are contiguous");
            offset += b.offset_count();
        }
        all.extend_from_slice(&bytes);
    }
    assert_eq!(offset, end);
    all
}

#[derive(Default)]
struct RecoveryStats {
    opened: u64,
    truncated: u64,
    refused: u64,
}

fn recovery_case(rng: &mut Rng, bases: &[LogFiles], stats: &mut RecoveryStats) {
    let base = &bases[rng.usize(..bases.len())];
    let mut files = base.files.clone();
    // Which files to damage: mostly segments, also indexes, snapshots and checkpoints.
    let names: Vec<String> = files.keys().cloned().collect();
    let mut survival_applies = true;
    let mut checkpoint_damaged = false;
    let mut damaged = Vec::new();
    for _ in 0..rng.usize(1..=3) {
        let name = match rng.u8(..10) {
            0..=4 => segment_logs(&files)
                .get(rng.usize(..segment_logs(&files).len()))
                .map(|(n, _)| (*n).clone()),
            5..=7 => names
                .iter()
                .filter(|n| n.ends_with("index"))
                .nth(rng.usize(..4))
                .cloned(),
            _ => Some(names[rng.usize(..names.len())].clone()),
        };
        let Some(name) = name.or_else(|| Some(names[rng.usize(..names.len())].clone())) else {
            continue;
        };
        damaged.push(name.clone());
        let bytes = files.entry(name.clone()).or_default();
        match rng.u8(..10) {
            0 => bytes.truncate(rng.usize(0..=bytes.len())),
            1 => {
                *bytes = {
                    let n = rng.usize(0..300);
                    biased_bytes(rng, n)
                }
            }
            _ => {
                let donor = bytes.clone();
                mutate(rng, bytes, &donor);
            }
        }
        let is_segment_data = [".log", ".index", ".timeindex", ".txnindex", ".snapshot"]
            .iter()
            .any(|e| name.ends_with(e));
        if !is_segment_data {
            // A checkpoint says where the log starts or what is durable: believed, so data
            // below a damaged log-start checkpoint may go, and a checkpoint that does not parse
            // may fail the open, as in Kafka.
            checkpoint_damaged = true;
            survival_applies = false;
        }
    }
    if rng.u8(..10) == 0 {
        // A stray segment at a random base offset: what follows an offset gap is dropped.
        let stray = format!("{:020}.log", rng.u64(0..40));
        let n = rng.usize(0..200);
        files.insert(stray, biased_bytes(rng, n));
        survival_applies = false;
    }
    let clean = rng.u8(..8) == 0;
    if clean {
        // After a clean shutdown the files are trusted, not scanned: damaged data may be
        // served or refused, but nothing may panic.
        files.insert(".clean-shutdown".into(), Vec::new());
    }
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, bytes) in &files {
        std::fs::write(dir.path().join(name), bytes).expect("write");
    }
    let opened = Log::open(dir.path(), base.config.clone(), NOW);
    let mut log = match opened {
        Ok(log) => log,
        Err(e) => {
            assert!(
                clean || checkpoint_damaged,
                "recovery failed on damaged segment files: {e}"
            );
            stats.refused += 1;
            return;
        }
    };
    stats.opened += 1;
    if clean {
        let (mut offset, end) = (log.log_start_offset(), log.log_end_offset());
        for _ in 0..64 {
            match log.read(offset, end, 1 << 20, true) {
                Ok(bytes) if !bytes.is_empty() => match batch::end_offset(&bytes) {
                    Some(next) if next > offset => offset = next,
                    _ => break,
                },
                _ => break,
            }
        }
        return;
    }
    // Recovery only cuts: each segment left is a prefix of the file it was.
    for entry in std::fs::read_dir(dir.path()).expect("read dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".log") {
            let now = std::fs::read(entry.path()).expect("read");
            let before = files.get(&name).expect("recovery creates no segment with data");
            assert!(before.starts_with(&now), "{name} was rewritten, not truncated");
        }
    }
    let all = read_all(&log);
    if survival_applies {
        let kept = intact_prefix(base, &files);
        assert!(
            all.starts_with(&kept),
            "recovery lost intact batches: kept {} of {} bytes (damaged: {damaged:?})",
            all.len().min(kept.len()),
            kept.len()
        );
        if all.len() < segment_logs(&base.files).iter().map(|(_, b)| b.len()).sum::<usize>() {
            stats.truncated += 1;
        }
    }
    // The recovered log takes appends at its end.
    let end = log.log_end_offset();
    let bytes = encode_records(&random_records(rng), Compression::None).expect("encode");
    let info = log
        .append(validate_batches(&bytes, 1 << 20).expect("valid"), 0, NOW)
        .expect("append after recovery");
    assert_eq!(info.base_offset, end);
}

#[test]
fn recovery_from_damaged_files_keeps_the_intact_prefix_and_never_panics() {
    let bases = base_logs();
    assert!(segment_logs(&bases[1].files).len() >= 3, "the small-segment log rolled");
    let mut stats = RecoveryStats::default();
    let cases = fuzz("recovery", 200, |rng| recovery_case(rng, &bases, &mut stats));
    eprintln!(
        "fuzz recovery: {cases} cases: {} opened ({} truncated), {} refused",
        stats.opened, stats.truncated, stats.refused
    );
    assert!(stats.opened > 0 && stats.truncated > 0);
}

// ---------------------------------------------------------------------------------------------
// The broker process under an address-space limit.

/// Address space the broker may map: room for its threads' stacks, allocator arenas and a
/// few requests, and far less than any claim below would take if it were believed.
const ADDRESS_SPACE_BYTES: u64 = 1 << 30;

struct LimitedBroker {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for LimitedBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A broker under RLIMIT_AS of `address_space_bytes`, with `settings` (`--set` arguments).
fn spawn_limited(address_space_bytes: u64, settings: &[&str]) -> LimitedBroker {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let port = common::free_port();
    let bin = std::env::var("SLUICE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_string());
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(settings.iter().flat_map(|kv| ["--set", kv]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .env("RUST_LOG", "warn");
    let limit = libc::rlimit {
        rlim_cur: address_space_bytes,
        rlim_max: address_space_bytes,
    };
    // SAFETY: setrlimit is async-signal-safe and touches only the struct it is given, which
    // the closure owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let child = cmd.spawn().expect("spawn sluice");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut broker = LimitedBroker { child, addr, _dir: dir };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            broker.child.try_wait().unwrap().is_none(),
            "the broker exited under the limit before listening"
        );
        assert!(Instant::now() < deadline, "the broker did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    broker
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(body);
    frame
}

/// Sends `frame` on a new connection; true when the broker closed it without an answer.
fn closes_connection(addr: std::net::SocketAddr, frame: &[u8]) -> bool {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // Closed before the whole frame was read: the rest cannot be sent.
    if let Err(e) = stream.write_all(frame) {
        return matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        );
    }
    let mut buf = [0u8; 4];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }
}

/// ApiVersions v0 on a new connection: the broker still answers.
fn answers_api_versions(addr: std::net::SocketAddr) -> bool {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream
        .write_all(&framed(&request_header(ApiKey::ApiVersions, 0, 42)))
        .expect("send");
    let mut head = [0u8; 8];
    stream.read_exact(&mut head).is_ok() && i32::from_be_bytes(head[4..8].try_into().unwrap()) == 42
}

#[test]
fn a_broker_under_an_address_space_limit_closes_connections_claiming_huge_collections() {
    // Before the patched decoder each frame here made the broker reserve what its count
    // claimed; the old allocator workaround (MAP_NORESERVE) takes address space too, so under
    // RLIMIT_AS the process aborted on the first frame.
    let topic_bytes = std::mem::size_of::<MetadataRequestTopic>() as u64;
    // No request-memory pool: the decoder alone meets the claims (the pool's charge would
    // refuse the 24 MiB frame below before reading it; that is checked at the end).
    let broker = spawn_limited(ADDRESS_SPACE_BYTES, &["queued.max.request.bytes=-1"]);
    let request =
        |key: ApiKey, version: i16, rest: &[u8]| framed(&[request_header(key, version, 1).as_slice(), rest].concat());
    // Fetch v4 before its topics: replica id -1, max wait, min bytes, max bytes, isolation level.
    let mut fetch = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0];
    fetch.extend_from_slice(&i32::MAX.to_be_bytes());
    // A claim the frame can hold: 24 MiB claiming as many topics, each failing at once (0xfefe
    // is a negative name length). Reserved in full it would take more than the whole limit;
    // the decoder reserves at most the bytes left in the frame.
    let claimed: usize = 24 << 20;
    assert!(claimed as u64 * topic_bytes > ADDRESS_SPACE_BYTES);
    let mut wide = (claimed as i32).to_be_bytes().to_vec();
    wide.extend(std::iter::repeat_n(0xfeu8, claimed));
    let frames = [
        (
            "Metadata v1, 2^31 - 1 topics",
            request(ApiKey::Metadata, 1, &i32::MAX.to_be_bytes()),
        ),
        (
            "Metadata v12, 2^32 - 2 topics",
            request(ApiKey::Metadata, 12, &[0, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        ),
        ("Fetch v4, 2^31 - 1 topics", request(ApiKey::Fetch, 4, &fetch)),
        (
            "Metadata v1, 24 MiB of claimed topics",
            request(ApiKey::Metadata, 1, &wide),
        ),
    ];
    assert!(i32::MAX as u64 * topic_bytes > 100 * ADDRESS_SPACE_BYTES);
    let mut broker = broker;
    for (what, frame) in &frames {
        assert!(
            closes_connection(broker.addr, frame),
            "{what}: answered instead of closed"
        );
        assert!(
            answers_api_versions(broker.addr),
            "{what}: the broker stopped answering"
        );
        assert!(broker.child.try_wait().unwrap().is_none(), "{what}: the broker exited");
    }
    drop(broker);
    // With the default pool (1 GiB) the 24 MiB Metadata frame is charged 80 times its bytes,
    // more than the pool: refused once its API key is read, the broker answering on.
    let pooled = spawn_limited(ADDRESS_SPACE_BYTES, &[]);
    let (what, frame) = &frames[3];
    assert!(
        closes_connection(pooled.addr, frame),
        "{what}: answered instead of closed"
    );
    assert!(
        answers_api_versions(pooled.addr),
        "{what}: the broker stopped answering"
    );
}
