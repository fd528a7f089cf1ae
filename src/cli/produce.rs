//! `sluice produce` and `sluice consume` (Kafka's console producer and consumer, kcat's -P and
//! -C): Produce and Fetch to each partition's leader (Metadata), record batches built and read
//! by `log::batch`, as the broker itself does.
//!
//! produce: one record per stdin line, acks=all; a key from `-k`, or from each line split at
//! `--key-separator`; the partition from `-p`, else Kafka's default partitioner (murmur2 of
//! the key; records without a key stick to one partition per request, rotating).
//!
//! consume: from the latest offset unless `--from-beginning`, `--offset N` or the committed
//! offsets of `--group`; stops after `-n COUNT` records, or with `--exit-at-end` once every
//! partition reached its high watermark (kcat's -e); otherwise it follows the topic until
//! interrupted, as kcat and kafka-console-consumer do.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchRequest, ProduceRequest};
use kafka_protocol::records::Compression;
use serde_json::json;

use super::CliError;
use super::client::{Client, Metadata, TopicInfo, kafka_result, topic_name};
use super::group;
use super::output::{Format, Progress, out};
use crate::log::batch::{BatchHeader, HEADER_LEN, decode_records_within, encode_records};

/// Records per Produce request, and their bytes at most (below Kafka's 1 MiB
/// `max.request.size`).
const PRODUCE_RECORDS_MAX: usize = 1000;
const PRODUCE_BYTES_MAX: usize = 512 << 10;
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// One Fetch: the wait for new records, and the bytes asked for in all and per partition.
const FETCH_WAIT_MS: i32 = 500;
const FETCH_BYTES_MAX: i32 = 16 << 20;
const FETCH_PARTITION_BYTES_MAX: i32 = 1 << 20;
/// The records of one fetched batch decompressed at most (Kafka's largest default batch is
/// 1 MiB; 32 times that).
const RECORDS_BYTES_MAX: usize = 32 << 20;
/// Retries after a leader moved or was not yet known, `RETRY_BACKOFF` apart.
const RETRIES_MAX: u32 = 20;
const RETRY_BACKOFF: Duration = Duration::from_millis(250);

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    /// The partition (default: Kafka's default partitioner).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// The key of every record.
    #[arg(short = 'k', long, conflicts_with = "key_separator")]
    key: Option<String>,
    /// Each line is KEY<SEP>VALUE (a line without it has no key).
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Print progress on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
}

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    #[arg(short = 't', long)]
    pub topic: String,
    /// One partition (default: all).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// Start at the log start offset.
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Start at this offset.
    #[arg(long)]
    offset: Option<i64>,
    /// Stop after COUNT records.
    #[arg(short = 'n', long = "count", value_name = "COUNT")]
    count: Option<u64>,
    /// Start at the group's committed offsets and commit the new positions at the end.
    #[arg(long)]
    group: Option<String>,
    /// Print KEY<TAB>VALUE.
    #[arg(long)]
    print_key: bool,
    /// Exit once every partition reached its high watermark (kcat's -e).
    #[arg(short = 'e', long)]
    exit_at_end: bool,
    /// Print progress on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
}

/// The topic's partitions and leaders, waiting out a leader election (LEADER_NOT_AVAILABLE).
async fn topic_metadata(client: &Client, topic: &str) -> Result<(Metadata, TopicInfo), CliError> {
    let mut tries = 0;
    loop {
        let metadata = client.metadata(Some(&[topic.to_string()])).await?;
        let info = metadata
            .topics
            .iter()
            .find(|t| t.name == topic)
            .cloned()
            .ok_or_else(|| CliError::Network("Metadata: an answer without the topic".into()))?;
        let leaderless = info.partitions.iter().any(|p| p.leader < 0);
        let retriable = info.error_code == 5 || (info.error_code == 0 && leaderless);
        if !retriable || tries >= RETRIES_MAX {
            kafka_result(info.error_code, Some(&format!("topic '{topic}'")))?;
            return Ok((metadata, info));
        }
        tries += 1;
        tokio::time::sleep(RETRY_BACKOFF).await;
    }
}

/// Kafka's `Utils.murmur2`, as its default partitioner hashes keys.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let length = data.len();
    let mut h = SEED ^ (length as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The partition of a keyed record: `toPositive(murmur2(key)) % partitions`.
pub fn key_partition(key: &[u8], partitions: usize) -> i32 {
    let positive = murmur2(key) & 0x7fff_ffff;
    i32::try_from(positive as usize % partitions.max(1)).unwrap_or(0)
}

/// A record to produce: key, value, timestamp.
type Record = (Option<Bytes>, Option<Bytes>, i64);
/// A record fetched: offset, key, value.
type Fetched = (i64, Option<Bytes>, Option<Bytes>);

pub async fn produce(client: &Client, args: ProduceArgs, format: Format) -> Result<(), CliError> {
    let (mut metadata, mut info) = topic_metadata(client, &args.topic).await?;
    if let Some(p) = args.partition
        && !info.partitions.iter().any(|i| i.partition == p)
    {
        return Err(CliError::Kafka {
            code: kafka_protocol::error::ResponseError::UnknownTopicOrPartition.code(),
            message: format!("{}-{p}", args.topic),
        });
    }
    let version = client.version::<ProduceRequest>(12)?;
    let mut progress = Progress::new(args.progress);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut produced = 0u64;
    let mut sticky = 0usize;
    let mut done = false;
    while !done {
        let mut chunk: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
        let (mut count, mut bytes) = (0usize, 0usize);
        let now = crate::replica::now_ms();
        let unkeyed_partition = info
            .partitions
            .get(sticky % info.partitions.len().max(1))
            .map_or(0, |p| p.partition);
        sticky += 1;
        while count < PRODUCE_RECORDS_MAX && bytes < PRODUCE_BYTES_MAX {
            let Some(line) = lines.next() else {
                done = true;
                break;
            };
            let line = line.map_err(|e| CliError::Usage(format!("reading stdin: {e}")))?;
            let (key, value) = match (&args.key, &args.key_separator) {
                (Some(k), _) => (Some(k.clone()), line),
                (None, Some(sep)) => match line.split_once(sep.as_str()) {
                    Some((k, v)) => (Some(k.to_string()), v.to_string()),
                    None => (None, line),
                },
                (None, None) => (None, line),
            };
            let partition = match (args.partition, &key) {
                (Some(p), _) => p,
                (None, Some(k)) => key_partition(k.as_bytes(), info.partitions.len()),
                (None, None) => unkeyed_partition,
            };
            bytes += value.len() + key.as_ref().map_or(0, String::len);
            count += 1;
            chunk
                .entry(partition)
                .or_default()
                .push((key.map(Bytes::from), Some(Bytes::from(value)), now));
        }
        if chunk.is_empty() {
            break;
        }
        let mut tries = 0;
        while !chunk.is_empty() {
            let failed = send_chunk(client, &metadata, &args.topic, version, &chunk).await?;
            for (p, records) in &chunk {
                if !failed.contains_key(p) {
                    produced += records.len() as u64;
                }
            }
            chunk.retain(|p, _| failed.contains_key(p));
            if let Some((code, message)) = failed.values().next() {
                // A moved leader (NOT_LEADER_OR_FOLLOWER and kin) is retried on fresh metadata.
                let retriable =
                    kafka_protocol::error::ResponseError::try_from_code(*code).is_some_and(|e| e.is_retriable());
                if !retriable || tries >= RETRIES_MAX {
                    return Err(CliError::Kafka {
                        code: *code,
                        message: message.clone(),
                    });
                }
                tries += 1;
                tokio::time::sleep(RETRY_BACKOFF).await;
                (metadata, info) = topic_metadata(client, &args.topic).await?;
            }
        }
        progress.tick(|| format!("produced {produced} records"));
    }
    match format {
        Format::Json => out(&format!("{}\n", json!({"topic": args.topic, "produced": produced}))),
        Format::Table => out(&format!("produced {produced} records to {}\n", args.topic)),
    }
    Ok(())
}

/// One Produce per leader for the chunk's partitions; the partitions the brokers refused, with
/// their code and message.
async fn send_chunk(
    client: &Client,
    metadata: &Metadata,
    topic: &str,
    version: i16,
    chunk: &BTreeMap<i32, Vec<Record>>,
) -> Result<BTreeMap<i32, (i16, String)>, CliError> {
    let leaders = leaders(metadata, topic);
    let mut by_leader: BTreeMap<i32, Vec<PartitionProduceData>> = BTreeMap::new();
    let mut failed = BTreeMap::new();
    for (partition, records) in chunk {
        let batch = encode_records(records, Compression::None)
            .map_err(|e| CliError::Usage(format!("encoding records: {e}")))?;
        match leaders.get(partition) {
            Some(leader) if *leader >= 0 => by_leader.entry(*leader).or_default().push(
                PartitionProduceData::default()
                    .with_index(*partition)
                    .with_records(Some(batch)),
            ),
            _ => {
                failed.insert(*partition, (5, format!("{topic}-{partition} has no leader")));
            }
        }
    }
    for (leader, partitions) in by_leader {
        let Some(broker) = metadata.brokers.get(&leader) else {
            for p in &partitions {
                failed.insert(p.index, (5, format!("{topic}-{}: leader {leader} unknown", p.index)));
            }
            continue;
        };
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic_name(topic))
                    .with_partition_data(partitions),
            ]);
        let answer = client.send(broker, version, &request).await?;
        for t in &answer.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    let message = p.error_message.as_deref().unwrap_or("").to_string();
                    failed.insert(p.index, (p.error_code, format!("{topic}-{}: {message}", p.index)));
                }
            }
        }
    }
    Ok(failed)
}

fn leaders(metadata: &Metadata, topic: &str) -> BTreeMap<i32, i32> {
    metadata
        .topics
        .iter()
        .filter(|t| t.name == topic)
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.leader)))
        .collect()
}

pub async fn consume(client: &Client, args: ConsumeArgs, format: Format) -> Result<(), CliError> {
    let topic = args.topic.clone();
    let (mut metadata, info) = topic_metadata(client, &topic).await?;
    let chosen: BTreeSet<(String, i32)> = match args.partition {
        Some(p) if info.partitions.iter().any(|i| i.partition == p) => [(topic.clone(), p)].into(),
        Some(p) => {
            return Err(CliError::Kafka {
                code: kafka_protocol::error::ResponseError::UnknownTopicOrPartition.code(),
                message: format!("{topic}-{p}"),
            });
        }
        None => info.partitions.iter().map(|p| (topic.clone(), p.partition)).collect(),
    };
    let mut quiet = Progress::new(false);
    let committed = match &args.group {
        Some(g) => group::at_coordinator(client, g, |c| async move { group::committed(client, &c, g).await }).await?,
        None => BTreeMap::new(),
    };
    let earliest = group::list_offsets(client, &metadata, &chosen, -2, &mut quiet).await?;
    let latest = group::list_offsets(client, &metadata, &chosen, -1, &mut quiet).await?;
    let mut positions: BTreeMap<i32, i64> = BTreeMap::new();
    for tp in &chosen {
        let start = match (args.offset, committed.get(tp)) {
            (Some(o), _) => o,
            (None, Some(c)) => *c,
            (None, None) if args.from_beginning => earliest.get(tp).copied().unwrap_or(0),
            (None, None) => latest.get(tp).copied().unwrap_or(0),
        };
        positions.insert(tp.1, start);
    }
    let version = client.version::<FetchRequest>(12)?;
    let mut progress = Progress::new(args.progress);
    let mut consumed = 0u64;
    let mut at_end: BTreeMap<i32, bool> = BTreeMap::new();
    let mut json_records = Vec::new();
    let mut tries = 0;
    let stdout = std::io::stdout();
    'fetching: loop {
        if args.count.is_some_and(|n| consumed >= n) {
            break;
        }
        if args.exit_at_end && at_end.len() == positions.len() && at_end.values().all(|e| *e) {
            break;
        }
        let leaders = leaders(&metadata, &topic);
        let mut by_leader: BTreeMap<i32, Vec<FetchPartition>> = BTreeMap::new();
        for (p, offset) in &positions {
            by_leader
                .entry(leaders.get(p).copied().unwrap_or(-1))
                .or_default()
                .push(
                    FetchPartition::default()
                        .with_partition(*p)
                        .with_current_leader_epoch(-1)
                        .with_fetch_offset(*offset)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(FETCH_PARTITION_BYTES_MAX),
                );
        }
        let mut stale = false;
        for (leader, partitions) in by_leader {
            let Some(broker) = metadata.brokers.get(&leader) else {
                stale = true;
                continue;
            };
            let request = FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(FETCH_WAIT_MS)
                .with_min_bytes(1)
                .with_max_bytes(FETCH_BYTES_MAX)
                .with_isolation_level(0)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(vec![
                    FetchTopic::default()
                        .with_topic(topic_name(&topic))
                        .with_partitions(partitions),
                ]);
            let answer = client.send(broker, version, &request).await?;
            kafka_result(answer.error_code, None)?;
            for t in &answer.responses {
                for p in &t.partitions {
                    if p.error_code != 0 {
                        let retriable = kafka_protocol::error::ResponseError::try_from_code(p.error_code)
                            .is_some_and(|e| e.is_retriable());
                        if retriable && tries < RETRIES_MAX {
                            stale = true;
                            continue;
                        }
                        kafka_result(p.error_code, Some(&format!("{topic}-{}", p.partition_index)))?;
                    }
                    let Some(position) = positions.get_mut(&p.partition_index) else {
                        continue;
                    };
                    let records = p.records.clone().unwrap_or_default();
                    for (offset, key, value) in records_from(&records, position)? {
                        if args.count.is_some_and(|n| consumed >= n) {
                            // The records not printed are the next position (and commit).
                            *position = offset;
                            break 'fetching;
                        }
                        consumed += 1;
                        let text = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned());
                        match format {
                            Format::Json => json_records.push(json!({
                                "partition": p.partition_index, "offset": offset,
                                "key": text(&key), "value": text(&value),
                            })),
                            Format::Table => {
                                let mut out = stdout.lock();
                                let value = text(&value).unwrap_or_default();
                                let written = match args.print_key {
                                    true => writeln!(out, "{}\t{value}", text(&key).unwrap_or_default()),
                                    false => writeln!(out, "{value}"),
                                };
                                // A closed stdout (a pipe into `head`) ends the consume.
                                if written.is_err() {
                                    break 'fetching;
                                }
                            }
                        }
                    }
                    at_end.insert(p.partition_index, *position >= p.high_watermark);
                }
            }
        }
        let _ = stdout.lock().flush();
        progress.tick(|| format!("consumed {consumed} records"));
        if stale {
            // A partition without a (known) leader, or one that moved: new metadata, a
            // bounded number of times in a row.
            if tries >= RETRIES_MAX {
                return Err(CliError::Kafka {
                    code: kafka_protocol::error::ResponseError::LeaderNotAvailable.code(),
                    message: format!("{topic}: no reachable leader after {RETRIES_MAX} tries"),
                });
            }
            tries += 1;
            tokio::time::sleep(RETRY_BACKOFF).await;
            metadata = topic_metadata(client, &topic).await?.0;
        } else {
            tries = 0;
        }
    }
    if let Some(g) = &args.group {
        let offsets = positions.iter().map(|(p, o)| ((topic.clone(), *p), *o)).collect();
        let offsets = &offsets;
        group::at_coordinator(
            client,
            g,
            |c| async move { group::commit(client, &c, g, offsets).await },
        )
        .await?;
    }
    if format == Format::Json {
        out(&format!("{}\n", json!({"topic": topic, "records": json_records})));
    }
    Ok(())
}

/// The records of a Fetch answer at or after `*position`, which moves past every whole batch
/// read (control batches included); a partial batch at the end is left for the next fetch.
fn records_from(records: &Bytes, position: &mut i64) -> Result<Vec<Fetched>, CliError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = records.get(at..at + HEADER_LEN) {
        let header = BatchHeader::parse(head).map_err(|e| CliError::Network(format!("Fetch: {e}")))?;
        let Some(end) = at.checked_add(header.size).filter(|end| *end <= records.len()) else {
            break;
        };
        let batch = records.slice(at..end);
        at = end;
        let next = header.last_offset() + 1;
        if next <= *position {
            continue;
        }
        let set =
            decode_records_within(&batch, RECORDS_BYTES_MAX).map_err(|e| CliError::Network(format!("Fetch: {e}")))?;
        for record in set.records {
            if record.control || record.offset < *position {
                continue;
            }
            out.push((record.offset, record.key, record.value));
        }
        *position = next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka() {
        // Kafka's UtilsTest.testMurmur2 vectors.
        let cases: [(&[u8], i32); 3] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
        ];
        for (data, expected) in cases {
            assert_eq!(murmur2(data) as i32, expected, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn records_are_read_past_the_position_and_a_partial_batch_waits() {
        let one = encode_records(
            &[
                (None, Some(Bytes::from_static(b"a")), 0),
                (None, Some(Bytes::from_static(b"b")), 0),
            ],
            Compression::None,
        )
        .unwrap();
        let mut both = one.to_vec();
        both.extend_from_slice(&one[..20]);
        let mut position = 1;
        let read = records_from(&Bytes::from(both), &mut position).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].0, 1);
        assert_eq!(position, 2);
    }
}
