//! DescribeProducers (key 61): the producers a partition knows, with their epoch, last
//! sequence and open transaction (Kafka's `kafka-transactions.sh describe-producers`).
//! v0 only (Kafka 4.1 serves v0).

use kafka_protocol::messages::describe_producers_response::{PartitionResponse, ProducerState, TopicResponse};
use kafka_protocol::messages::{ApiKey, DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::{Ctx, Versions, message};
use crate::acl::{Operation, ResourceType};

pub const VERSIONS: Versions = Versions::new(ApiKey::DescribeProducers, 0, 0);

pub async fn handle(ctx: &Ctx, req: DescribeProducersRequest, _version: i16) -> DescribeProducersResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let name = topic.name.0.to_string();
        let authorized = ctx.authorize(Operation::Read, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
        for index in topic.partition_indexes {
            let mut out = PartitionResponse::default().with_partition_index(index);
            let producers = match ctx.replicas.get(&name, index) {
                _ if !authorized => Err((
                    crate::error::Error::TopicAuthorizationFailed.code(),
                    crate::error::Error::TopicAuthorizationFailed.to_string(),
                )),
                None => Err((
                    super::absent_partition(ctx, &name, index),
                    format!("no replica of {name}-{index} here"),
                )),
                Some(p) => p.producers().map_err(|e| (e.code(), e.to_string())),
            };
            match producers {
                Ok(list) => {
                    out.active_producers = list
                        .into_iter()
                        .map(|(id, e)| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(id))
                                .with_producer_epoch(i32::from(e.epoch))
                                .with_last_sequence(e.last_seq())
                                .with_last_timestamp(e.last_timestamp)
                                .with_coordinator_epoch(e.coordinator_epoch)
                                .with_current_txn_start_offset(e.current_txn_first_offset.unwrap_or(-1))
                        })
                        .collect();
                }
                Err((code, text)) => {
                    out.error_code = code;
                    out.error_message = message(text);
                }
            }
            partitions.push(out);
        }
        topics.push(
            TopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}
