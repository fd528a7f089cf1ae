//! Produce (key 0): append record batches to partition leaders.
//! v3 baseline here (record batch v2, transactional id field) · v4 same · v5 log_start_offset in
//! the answer · v6-v7 same · v8 record errors and error message (KIP-467) · v9 flexible ·
//! v10-v11 current leader / node endpoints tagged fields (left empty: no leader moves on one
//! node) · v12 same as v11. Not served: v13 (topic ids), magic 0/1 message sets.
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

use super::{Ctx, Versions, message};
use crate::log::{batch, validate_batches};
use crate::replica::Partition;

pub const VERSIONS: Versions = Versions::new(ApiKey::Produce, 3, 12);

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

/// A partition refused for one record (KIP-467: from v8 the record is named); nothing of the
/// partition's batches is appended.
fn record_error(index: i32, code: ResponseError, record: i32, text: String, version: i16) -> PartitionProduceResponse {
    let mut p = error_response(index, code.code(), Some(text.clone()), version);
    if version >= 8 {
        p.record_errors = vec![
            BatchIndexAndErrorMessage::default()
                .with_batch_index(record)
                .with_batch_index_error_message(message(text)),
        ];
    }
    p
}

/// Appends synchronously (in request order) and returns the response or the wait for it.
pub fn handle(ctx: &Arc<Ctx>, req: ProduceRequest, version: i16) -> Outcome {
    let acks = req.acks;
    let image = ctx.controller.image();
    let mut waits = Vec::new();
    let mut responses = Vec::with_capacity(req.topic_data.len());
    for (ti, topic) in req.topic_data.into_iter().enumerate() {
        let name = topic.name.0.to_string();
        let topic_info = image.topic(&name);
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
            if let Some((before, after)) = timestamp_bounds
                && let Some((record, timestamp)) = first_out_of_bounds(&batches, before, after)
            {
                let text = format!("timestamp {timestamp} of a record in {name}-{index} is outside the topic's bounds");
                partitions.push(record_error(
                    index,
                    ResponseError::InvalidTimestamp,
                    record,
                    text,
                    version,
                ));
                continue;
            }
            if compacted && let Some(record) = first_keyless_record(&batches) {
                let text = format!("compacted topic cannot accept a record without a key in {name}-{index}");
                partitions.push(record_error(index, ResponseError::InvalidRecord, record, text, version));
                continue;
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
                    let recompressed: Result<Vec<_>, _> = batches
                        .into_iter()
                        .map(|b| {
                            if batch::codec(&b) == codec {
                                Ok(b)
                            } else {
                                batch::recompress(&b, codec, max_bytes)
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
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partitions),
        );
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

/// The index (across the request's batches) of the first record without a key, if any; a batch
/// that cannot be decoded counts as keyless (it would be refused anyway).
fn first_keyless_record(batches: &[crate::log::ValidBatch]) -> Option<i32> {
    let mut index = 0i32;
    for batch in batches {
        let Ok(set) = batch::decode_records(batch.bytes()) else {
            return Some(index);
        };
        for record in &set.records {
            if record.key.is_none() {
                return Some(index);
            }
            index += 1;
        }
    }
    None
}

/// The index and timestamp of the first record whose timestamp is more than `before` ms in the
/// past or `after` ms in the future (message.timestamp.before/after.max.ms, KIP-937).
fn first_out_of_bounds(batches: &[crate::log::ValidBatch], before: i64, after: i64) -> Option<(i32, i64)> {
    let now = crate::replica::now_ms();
    let (low, high) = (now.saturating_sub(before), now.saturating_add(after));
    let mut index = 0i32;
    for batch in batches {
        let Ok(set) = batch::decode_records(batch.bytes()) else {
            return Some((index, -1));
        };
        for record in &set.records {
            if record.timestamp < low || record.timestamp > high {
                return Some((index, record.timestamp));
            }
            index += 1;
        }
    }
    None
}
