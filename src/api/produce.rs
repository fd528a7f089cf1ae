//! Produce (key 0): append record batches to partition leaders.
//! v3 baseline here (record batch v2, transactional id field) · v4 same · v5 log_start_offset in
//! the answer · v6-v7 same · v8 record errors (every invalid record named) and error message
//! (KIP-467) · v9 flexible · v10-v11 current leader / node endpoints tagged fields (left empty:
//! no leader moves on one node) · v12 same as v11 · v13 topics named by id instead of name in
//! the request and the answer (KIP-516; Kafka 4.1): an id the metadata image does not hold gets
//! UNKNOWN_TOPIC_ID, as a topic deleted and created again under its name gets a new id. Once
//! the id is resolved every version takes the same path (validation, idempotence, KIP-890
//! verification, record errors). Not served: magic 0/1 message sets.
//! acks 0 (no response), 1 (answered once written), -1 (answered when the records are durable
//! by the flush policy, fsynced by default; REQUEST_TIMED_OUT after `timeout_ms`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::error::{Error, Result};
use crate::log::{batch, validate_batches};
use crate::replica::Partition;

/// The record batch attributes' codec for zstd (KIP-110: Produce v7+ only).
const ZSTD_CODEC: i16 = 4;

pub const VERSIONS: Versions = Versions::new(ApiKey::Produce, 3, 13);

pub enum Outcome {
    /// acks=0: Kafka sends nothing back.
    NoResponse,
    Done(ProduceResponse),
    /// acks=all: the response once the appended records are durable.
    Wait(Pin<Box<dyn Future<Output = ProduceResponse> + Send>>),
}

struct Waiting {
    topic: usize,
    partition: usize,
    target: Arc<Partition>,
    last_offset: i64,
}

fn error_response(index: i32, code: i16, text: Option<String>, version: i16) -> PartitionProduceResponse {
    let mut p = PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code)
        .with_base_offset(-1);
    if version >= 8 {
        p.error_message = text.and_then(message);
    }
    p
}

/// Appends synchronously (in request order) and returns the response or the wait for it.
pub fn handle(ctx: &Arc<Ctx>, req: ProduceRequest, version: i16) -> Outcome {
    let acks = req.acks;
    let image = ctx.controller.image();
    let now_ms = crate::replica::now_ms();
    let mut waits = Vec::new();
    let mut responses = Vec::with_capacity(req.topic_data.len());
    for (ti, topic) in req.topic_data.into_iter().enumerate() {
        // Kafka's KafkaApis.handleProduceRequest (KIP-516): from v13 the topic is named by id
        // only, and an id the metadata cache does not know is UNKNOWN_TOPIC_ID for each of its
        // partitions (the nil id included).
        let resolved = if version >= 13 {
            image.topic_by_id(&topic.topic_id).map(|t| t.name.clone())
        } else {
            Some(topic.name.0.to_string())
        };
        let unknown_id = resolved.is_none();
        let topic_info = resolved.as_deref().and_then(|name| image.topic(name));
        let name = resolved.unwrap_or_default(); // empty only for an unknown id, answered below
        let max_message_bytes = topic_info.map(|t| ctx.config.topic_log_config(&t.configs).max_message_bytes);
        // KIP-937: CreateTime timestamps must fall within these bounds of the broker's clock.
        let timestamp_bounds = topic_info.and_then(|t| {
            let get = |k: &str| {
                t.configs
                    .get(k)
                    .cloned()
                    .or_else(|| ctx.config.topic_default(k))
                    .and_then(|v| v.parse::<i64>().ok())
            };
            let log_append =
                ctx.config.topic_log_config(&t.configs).timestamp_type == crate::log::TimestampType::LogAppendTime;
            let (before, after) = (
                get("message.timestamp.before.max.ms")?,
                get("message.timestamp.after.max.ms")?,
            );
            (!log_append && (before != i64::MAX || after != i64::MAX)).then_some((before, after))
        });
        // compression.type other than `producer`: the broker recompresses (Kafka does too).
        let target_codec = topic_info.and_then(|t| {
            let codec = t
                .configs
                .get("compression.type")
                .cloned()
                .or_else(|| ctx.config.topic_default("compression.type"));
            match codec.as_deref().map(str::trim) {
                Some("uncompressed") => Some(0),
                Some("gzip") => Some(1),
                Some("snappy") => Some(2),
                Some("lz4") => Some(3),
                Some("zstd") => Some(4),
                _ => None,
            }
        });
        let compacted = topic_info.is_some_and(|t| {
            let policy = t
                .configs
                .get("cleanup.policy")
                .cloned()
                .or_else(|| ctx.config.topic_default("cleanup.policy"));
            policy.is_some_and(|p| p.split(',').any(|x| x.trim() == "compact"))
        });
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for (pi, data) in topic.partition_data.into_iter().enumerate() {
            let index = data.index;
            if !matches!(acks, -1..=1) {
                partitions.push(error_response(
                    index,
                    ResponseError::InvalidRequiredAcks.code(),
                    None,
                    version,
                ));
                continue;
            }
            if unknown_id {
                let text = format!("unknown topic id {}", topic.topic_id);
                partitions.push(error_response(
                    index,
                    ResponseError::UnknownTopicId.code(),
                    Some(text),
                    version,
                ));
                continue;
            }
            if name == crate::coordinator::OFFSETS_TOPIC
                || name == crate::coordinator::transactions::TRANSACTION_STATE_TOPIC
            {
                // Kafka: clients may not append to internal topics.
                let text = format!("cannot append to internal topic {name}");
                partitions.push(error_response(
                    index,
                    ResponseError::InvalidTopicException.code(),
                    Some(text),
                    version,
                ));
                continue;
            }
            let (Some(partition), Some(max_bytes)) = (ctx.replicas.get(&name, index), max_message_bytes) else {
                let text = format!("unknown topic or partition {name}-{index}");
                partitions.push(error_response(
                    index,
                    ResponseError::UnknownTopicOrPartition.code(),
                    Some(text),
                    version,
                ));
                continue;
            };
            let Some(records) = data.records else {
                let text = "no records".to_string();
                partitions.push(error_response(
                    index,
                    ResponseError::CorruptMessage.code(),
                    Some(text),
                    version,
                ));
                continue;
            };
            let batches = match validate_batches(&records, max_bytes) {
                Ok(batches) => batches,
                Err(e) => {
                    partitions.push(error_response(index, e.code(), Some(e.to_string()), version));
                    continue;
                }
            };
            // Kafka's ProduceRequest.validateRecords, per partition (KafkaApis): exactly one
            // batch, and no zstd before v7.
            let framing = match batches.as_slice() {
                [] => Some((
                    ResponseError::InvalidRecord,
                    format!(
                        "Produce requests with version {version} must have at least one record batch per partition"
                    ),
                )),
                [_] => None,
                _ => Some((
                    ResponseError::InvalidRecord,
                    format!(
                        "Produce requests with version {version} are only allowed to contain exactly one record batch per partition"
                    ),
                )),
            };
            let framing = framing.or_else(|| {
                (version < 7 && batches.iter().any(|b| batch::codec(b) == ZSTD_CODEC)).then(|| {
                    (
                        ResponseError::UnsupportedCompressionType,
                        format!("Produce requests with version {version} are not allowed to use ZStandard compression"),
                    )
                })
            });
            if let Some((code, text)) = framing {
                partitions.push(error_response(index, code.code(), Some(text), version));
                continue;
            }
            if compacted || timestamp_bounds.is_some() {
                let rules = RecordRules {
                    compacted,
                    timestamp_bounds,
                    now_ms,
                };
                let partition_name = format!("{name}-{index}");
                match invalid_records(
                    &batches,
                    &rules,
                    batch::records_bytes_cap(max_bytes),
                    &partition_name,
                    version >= 8,
                ) {
                    Ok(None) => {}
                    Ok(Some(refused)) => {
                        partitions.push(refused.into_response(index, version));
                        continue;
                    }
                    Err(e) => {
                        partitions.push(error_response(index, e.code(), Some(e.to_string()), version));
                        continue;
                    }
                }
            }
            // KIP-890 part 1: a transactional batch goes in only when its transaction holds the
            // partition (AddPartitionsToTxn came first), so no transaction is left hanging.
            if let Some(first) = batches.iter().find(|b| b.is_transactional()) {
                let verified = match req.transactional_id.as_deref() {
                    // Kafka refuses transactional records without a transactional id as an
                    // authorization failure of the (absent) id.
                    None => Err(ResponseError::TransactionalIdAuthorizationFailed.code()),
                    Some(id) => {
                        let tp = crate::replica::TopicPartition {
                            topic: name.clone(),
                            partition: index,
                        };
                        ctx.transactions
                            .verify_partitions(id, first.producer_id(), first.producer_epoch(), &[tp])
                            .and_then(|codes| match codes.first() {
                                Some(0) => Ok(()),
                                Some(c) => Err(*c),
                                None => Err(ResponseError::UnknownServerError.code()),
                            })
                            .map_err(|c| crate::coordinator::transactions::produce_verification_code(c, version))
                    }
                };
                if let Err(code) = verified {
                    let text = format!("transactional produce to {name}-{index} refused by the transaction's state");
                    partitions.push(error_response(index, code, Some(text), version));
                    continue;
                }
            }
            let batches = match target_codec {
                None => batches,
                Some(codec) => {
                    let partition_name = format!("{name}-{index}");
                    let recompressed: Result<Vec<_>, _> = batches
                        .into_iter()
                        .map(|b| {
                            if batch::codec(&b) == codec {
                                Ok(b)
                            } else {
                                batch::recompress(&b, codec, batch::records_bytes_cap(max_bytes))
                                    .map_err(|e| unreadable(e, &partition_name))
                            }
                        })
                        .collect();
                    match recompressed {
                        Ok(batches) => batches,
                        Err(e) => {
                            partitions.push(error_response(index, e.code(), Some(e.to_string()), version));
                            continue;
                        }
                    }
                }
            };
            let appended = partition.append(batches, acks == -1);
            match appended {
                Ok(info) => {
                    let mut p = PartitionProduceResponse::default()
                        .with_index(index)
                        .with_base_offset(info.base_offset)
                        .with_log_append_time_ms(info.log_append_time_ms);
                    if version >= 5 {
                        p.log_start_offset = partition.offsets().map(|o| o.log_start_offset).unwrap_or(-1);
                    }
                    if acks == -1 {
                        waits.push(Waiting {
                            topic: ti,
                            partition: pi,
                            target: partition,
                            last_offset: info.last_offset,
                        });
                    }
                    partitions.push(p);
                }
                Err(e) => {
                    tracing::debug!(partition = %format!("{name}-{index}"), error = %e, "produce refused");
                    partitions.push(error_response(index, e.code(), Some(e.to_string()), version));
                }
            }
        }
        let mut answer = TopicProduceResponse::default().with_partition_responses(partitions);
        if version >= 13 {
            answer.topic_id = topic.topic_id;
        } else {
            answer.name = topic.name;
        }
        responses.push(answer);
    }
    let response = ProduceResponse::default().with_responses(responses);
    if acks == 0 {
        return Outcome::NoResponse;
    }
    if waits.is_empty() {
        return Outcome::Done(response);
    }
    let timeout = Duration::from_millis(u64::try_from(req.timeout_ms).unwrap_or(0));
    Outcome::Wait(Box::pin(async move {
        let mut response = response;
        let deadline = tokio::time::Instant::now() + timeout;
        for w in waits {
            let done = tokio::time::timeout_at(deadline, w.target.wait_durable(w.last_offset)).await;
            let code = match done {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e.code(),
                Err(_) => ResponseError::RequestTimedOut.code(),
            };
            if let Some(p) = response
                .responses
                .get_mut(w.topic)
                .and_then(|t| t.partition_responses.get_mut(w.partition))
            {
                p.error_code = code;
                p.base_offset = -1;
            }
        }
        response
    }))
}

/// What Kafka's `LogValidator.validateRecord` checks of each produced record here.
struct RecordRules {
    /// cleanup.policy includes `compact`: every record needs a key.
    compacted: bool,
    /// (message.timestamp.before.max.ms, message.timestamp.after.max.ms) when CreateTime
    /// timestamps are bounded (KIP-937).
    timestamp_bounds: Option<(i64, i64)>,
    now_ms: i64,
}

/// A partition refused for the records of one batch that failed validation (KIP-467).
struct RefusedRecords {
    /// Kafka's `processRecordErrors`: INVALID_TIMESTAMP when any record's timestamp is out of
    /// bounds, else INVALID_RECORD.
    invalid_timestamp: bool,
    /// How many records were refused.
    count: usize,
    /// Every refused record, by its index in its batch, with Kafka's message; left empty when
    /// the answer cannot carry them (Produce v0-v7).
    named: Vec<BatchIndexAndErrorMessage>,
}

impl RefusedRecords {
    /// The partition's answer: Kafka's exception message at the top, the records below (v8+;
    /// older versions carry only the error code, which Kafka sends them unchanged).
    fn into_response(self, index: i32, version: i16) -> PartitionProduceResponse {
        let (code, text) = if self.invalid_timestamp {
            (
                ResponseError::InvalidTimestamp,
                "One or more records have been rejected due to invalid timestamp".to_string(),
            )
        } else {
            // Kafka's InvalidRecordException text, RecordError's toString included.
            let first: Vec<String> = self
                .named
                .iter()
                .take(3)
                .map(|e| {
                    let text = e.batch_index_error_message.as_deref().unwrap_or("null");
                    format!("RecordError(batchIndex={}, message='{text}')", e.batch_index)
                })
                .collect();
            (
                ResponseError::InvalidRecord,
                format!(
                    "One or more records have been rejected due to {} record errors in total, and only \
                     showing the first three errors at most: [{}]",
                    self.count,
                    first.join(", ")
                ),
            )
        };
        let mut p = error_response(index, code.code(), Some(text), version);
        if version >= 8 {
            p.record_errors = self.named;
        }
        p
    }
}

/// The records of the first batch with any invalid record (None when every record is valid).
/// Like Kafka's `LogValidator`, a record is named by its index within its batch, fails on its
/// key before its timestamp, and validation stops after the first batch with an invalid record
/// (Kafka refuses several batches per partition outright, so this only differs from it there).
/// Each batch is decompressed once and walked without materialising records; with `name` false
/// (Produce v0-v7) nothing is allocated per record. A batch whose records do not fit is `InvalidRecord`;
/// one whose records decompress past `records_bytes_max` (`batch::records_bytes_cap`) is
/// `RecordsTooLarge`, found once that many bytes are out (a few KB of zstd can claim gigabytes).
fn invalid_records(
    batches: &[crate::log::ValidBatch],
    rules: &RecordRules,
    records_bytes_max: usize,
    partition: &str,
    name: bool,
) -> Result<Option<RefusedRecords>> {
    // Kafka's texts (LogValidator.validateKey / validateTimestamp). The keyless one is the same
    // for every record, so the records share one copy.
    let keyless = message(format!(
        "Compacted topic cannot accept message without key in topic partition {partition}"
    ));
    let bounds = rules
        .timestamp_bounds
        .map(|(before, after)| (rules.now_ms.saturating_sub(before), rules.now_ms.saturating_add(after)));
    for batch in batches {
        let mut refused = RefusedRecords {
            invalid_timestamp: false,
            count: 0,
            named: Vec::new(),
        };
        let mut batch_index = 0i32;
        batch::scan_records(batch.bytes(), records_bytes_max, |record| {
            // -1 is Kafka's NO_TIMESTAMP, never out of bounds.
            let out_of_bounds = bounds
                .filter(|(low, high)| record.timestamp != -1 && (record.timestamp < *low || record.timestamp > *high));
            if rules.compacted && !record.has_key {
                refused.count += 1;
                if name {
                    refused.named.push(named(batch_index, keyless.clone()));
                }
            } else if let Some((low, high)) = out_of_bounds {
                refused.count += 1;
                refused.invalid_timestamp = true;
                if name {
                    let (timestamp, offset) = (record.timestamp, record.offset);
                    let text = message(format!(
                        "Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp \
                         should be within [{low}, {high}]"
                    ));
                    refused.named.push(named(batch_index, text));
                }
            }
            batch_index = batch_index.saturating_add(1);
        })
        .map_err(|e| unreadable(e, partition))?;
        if refused.count > 0 {
            return Ok(Some(refused));
        }
    }
    Ok(None)
}

/// The error for a batch whose records cannot be read. Kafka's record iterator
/// (`DefaultRecordBatch.RecordIterator`) throws InvalidRecordException at a record that does not
/// fit and at bytes left after the declared count: the non-retriable INVALID_RECORD, not the
/// retriable CORRUPT_MESSAGE. Records past max.message.bytes stay `RecordsTooLarge`
/// (RECORD_TOO_LARGE, also non-retriable), so a client does not resend a bomb.
fn unreadable(e: Error, partition: &str) -> Error {
    match e {
        Error::CorruptBatch(text) => Error::InvalidRecord(format!("{text} in topic partition {partition}")),
        other => other,
    }
}

/// One RecordError of the answer.
fn named(batch_index: i32, text: Option<StrBytes>) -> BatchIndexAndErrorMessage {
    BatchIndexAndErrorMessage::default()
        .with_batch_index(batch_index)
        .with_batch_index_error_message(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::log::batch::encode_records;

    const NOW: i64 = 1_700_000_000_000;
    /// max.message.bytes of the tests (Kafka's default).
    const MAX: usize = 1_048_588;

    /// One validated batch per element of `batches`, each (key?, timestamp) per record.
    fn batches(batches: &[&[(bool, i64)]]) -> Vec<crate::log::ValidBatch> {
        let mut all = BytesMut::new();
        for records in batches {
            let records: Vec<_> = records
                .iter()
                .enumerate()
                .map(|(i, (keyed, timestamp))| {
                    let key = keyed.then(|| Bytes::from(format!("k{i}")));
                    (key, Some(Bytes::from_static(b"v")), *timestamp)
                })
                .collect();
            all.extend_from_slice(&encode_records(&records, Compression::None).unwrap());
        }
        validate_batches(&all.freeze(), 1 << 20).unwrap()
    }

    fn rules(compacted: bool, timestamp_bounds: Option<(i64, i64)>) -> RecordRules {
        RecordRules {
            compacted,
            timestamp_bounds,
            now_ms: NOW,
        }
    }

    fn indexes(refused: &RefusedRecords) -> Vec<i32> {
        refused.named.iter().map(|e| e.batch_index).collect()
    }

    #[test]
    fn every_keyless_record_is_named_by_its_index_in_the_batch() {
        // Kafka's LogValidator.validateKey, one RecordError per keyless record (KIP-467).
        let b = batches(&[&[(true, NOW), (false, NOW), (true, NOW), (false, NOW), (false, NOW)]]);
        let refused = invalid_records(&b, &rules(true, None), MAX, "t-0", true)
            .unwrap()
            .unwrap();
        assert_eq!(indexes(&refused), [1, 3, 4]);
        assert!(!refused.invalid_timestamp);
        let text = refused.named[0].batch_index_error_message.as_deref();
        assert_eq!(
            text,
            Some("Compacted topic cannot accept message without key in topic partition t-0")
        );
        assert!(
            invalid_records(&b, &rules(false, None), MAX, "t-0", true)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_record_fails_on_its_key_before_its_timestamp_and_any_timestamp_error_sets_the_code() {
        // Kafka's validateRecord: validateKey first, validateTimestamp only for a keyed record;
        // processRecordErrors answers INVALID_TIMESTAMP when any error is a timestamp's.
        let bounds = Some((1_000, 1_000));
        let b = batches(&[&[(false, 5), (true, 5), (true, NOW), (true, -1), (true, NOW + 1_001)]]);
        let refused = invalid_records(&b, &rules(true, bounds), MAX, "t-0", true)
            .unwrap()
            .unwrap();
        assert_eq!(indexes(&refused), [0, 1, 4], "-1 (NO_TIMESTAMP) is never out of bounds");
        assert!(refused.invalid_timestamp);
        assert!(
            refused.named[0]
                .batch_index_error_message
                .as_deref()
                .unwrap()
                .starts_with("Compacted")
        );
        assert_eq!(
            refused.named[1].batch_index_error_message.as_deref(),
            Some(
                "Timestamp 5 of message with offset 1 is out of range. The timestamp should be within \
                 [1699999999000, 1700000001000]"
            )
        );
        let p = refused.into_response(0, 8);
        assert_eq!(p.error_code, ResponseError::InvalidTimestamp.code());
        assert_eq!(p.record_errors.len(), 3);
    }

    #[test]
    fn indexes_restart_in_each_batch_and_only_the_first_refused_batch_is_named() {
        // LogValidator numbers records within their batch and throws after the first batch with
        // record errors.
        let b = batches(&[
            &[(true, NOW), (true, NOW)],
            &[(true, NOW), (false, NOW), (true, NOW), (false, NOW)],
            &[(false, NOW)],
        ]);
        let refused = invalid_records(&b, &rules(true, None), MAX, "t-0", true)
            .unwrap()
            .unwrap();
        assert_eq!(indexes(&refused), [1, 3]);
    }

    #[test]
    fn a_record_that_does_not_fit_refuses_the_partition_as_invalid() {
        let good = encode_records(&[(None, Some(Bytes::from_static(b"v")), NOW)], Compression::None).unwrap();
        let mut bad = BytesMut::from(&good[..]);
        bad[batch::HEADER_LEN] = 0x7e; // the record claims 63 bytes
        let crc = crc32c::crc32c(&bad[batch::ATTRIBUTES..]);
        bad[batch::CRC..batch::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let b = validate_batches(&bad.freeze(), 1 << 20).unwrap();
        let err = invalid_records(&b, &rules(true, None), MAX, "t-0", true).err().unwrap();
        assert_eq!(err.code(), ResponseError::InvalidRecord.code(), "{err}");
    }

    #[test]
    fn before_v8_the_answer_is_the_code_alone_and_nothing_is_named() {
        let b = batches(&[&[(false, NOW), (false, NOW), (true, NOW)]]);
        let refused = invalid_records(&b, &rules(true, None), MAX, "t-0", false)
            .unwrap()
            .unwrap();
        assert_eq!((refused.count, refused.named.len()), (2, 0));
        let p = refused.into_response(4, 7);
        assert_eq!(
            (p.index, p.error_code, p.base_offset),
            (4, ResponseError::InvalidRecord.code(), -1)
        );
        assert!(p.record_errors.is_empty());
        assert_eq!(p.error_message, None);
    }

    #[test]
    fn the_invalid_record_summary_counts_every_error_and_shows_three() {
        // Kafka's processRecordErrors message for InvalidRecordException.
        let b = batches(&[&[(false, NOW); 5]]);
        let p = invalid_records(&b, &rules(true, None), MAX, "t-0", true)
            .unwrap()
            .unwrap()
            .into_response(0, 12);
        let record = "message='Compacted topic cannot accept message without key in topic partition t-0'";
        assert_eq!(
            p.error_message.as_deref(),
            Some(
                format!(
                    "One or more records have been rejected due to 5 record errors in total, and only showing \
                     the first three errors at most: [RecordError(batchIndex=0, {record}), \
                     RecordError(batchIndex=1, {record}), RecordError(batchIndex=2, {record})]"
                )
                .as_str()
            )
        );
        assert_eq!(p.record_errors.len(), 5);
    }
}
