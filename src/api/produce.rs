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

use super::{Ctx, Versions, message};
use crate::replica::Partition;
use crate::replica::produce_validation::{ProduceRules, Refusal};

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
        let rules = topic_info.map(|t| ProduceRules::of_topic(&ctx.config, &t.configs));
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
            let (Some(partition), Some(rules)) = (ctx.replicas.get(&name, index), rules.as_ref()) else {
                let code = super::absent_partition(ctx, &name, index);
                let text = match code == ResponseError::NotLeaderOrFollower.code() {
                    true => format!("this broker is not the leader of {name}-{index}"),
                    false => format!("unknown topic or partition {name}-{index}"),
                };
                partitions.push(error_response(index, code, Some(text), version));
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
            let batches = match partition.validate_produce(&records, version, rules, now_ms) {
                Ok(batches) => batches,
                Err(refusal) => {
                    partitions.push(refusal_response(index, refusal, version));
                    continue;
                }
            };
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
            let batches = match partition.recompress(batches, rules) {
                Ok(batches) => batches,
                Err(refusal) => {
                    partitions.push(refusal_response(index, refusal, version));
                    continue;
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

/// The partition's answer to a refusal of the replica layer: the message from v8, and the
/// refused records (named by the replica layer only for v8+, KIP-467).
fn refusal_response(index: i32, refusal: Refusal, version: i16) -> PartitionProduceResponse {
    let mut p = error_response(index, refusal.code, Some(refusal.message), version);
    if version >= 8 {
        p.record_errors = refusal
            .record_errors
            .into_iter()
            .map(|e| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(e.batch_index)
                    .with_batch_index_error_message(Some(e.message))
            })
            .collect();
    }
    p
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::log::batch::encode_records;
    use crate::replica::TopicPartition;
    use crate::replica::produce_validation::validate;

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn before_v8_the_answer_is_the_code_alone_and_nothing_is_named() {
        let records: Vec<_> = [false, false, true]
            .iter()
            .map(|keyed| {
                (
                    keyed.then(|| Bytes::from_static(b"k")),
                    Some(Bytes::from_static(b"v")),
                    NOW,
                )
            })
            .collect();
        let records = encode_records(&records, Compression::None).unwrap();
        let rules = ProduceRules {
            max_message_bytes: 1_048_588,
            compacted: true,
            timestamp_bounds: None,
            target_codec: None,
        };
        let tp = TopicPartition {
            topic: "t".to_string(),
            partition: 4,
        };
        let refusal = validate(&records, 7, &rules, NOW, &tp).err().unwrap();
        assert!(refusal.record_errors.is_empty());
        let p = refusal_response(4, refusal, 7);
        assert_eq!(
            (p.index, p.error_code, p.base_offset),
            (4, ResponseError::InvalidRecord.code(), -1)
        );
        assert!(p.record_errors.is_empty());
        assert_eq!(p.error_message, None);
    }
}
