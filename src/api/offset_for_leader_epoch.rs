//! OffsetForLeaderEpoch (key 23): for each partition, the end offset of a leader epoch in the
//! leader's log (Kafka's `LeaderEpochFileCache.endOffsetFor`): the largest epoch at or below
//! the one asked and the offset where it ends (the log end for the latest epoch). A follower
//! that joins a new leader asks it for the end of its own latest epoch and truncates what lies
//! past it (KIP-101); a consumer asks it after a leader change to detect truncation (KIP-320).
//! v2 baseline (v0–1 removed in Kafka 4, KIP-896) · v2 current leader epoch fencing · v3
//! replica id · v4 flexible. Served by the leader only (NOT_LEADER_OR_FOLLOWER elsewhere, as
//! Kafka for every requester but its debugging consumer, replica id -2); an epoch older than
//! the log's first gets UNDEFINED_EPOCH (-1) and UNDEFINED_EPOCH_OFFSET (-1) with no error.

use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{ApiKey, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::{Ctx, Versions};
use crate::acl::{Operation, ResourceType};
use crate::error::Error;

pub const VERSIONS: Versions = Versions::new(ApiKey::OffsetForLeaderEpoch, 2, 4);

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: i64 = -1;

pub async fn handle(ctx: &Ctx, req: OffsetForLeaderEpochRequest, _version: i16) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    // Kafka: brokers (CLUSTER_ACTION) ask about any topic, consumers (KIP-320) about those
    // they may describe.
    let cluster_action = ctx.authorize_cluster(Operation::ClusterAction);
    for topic in req.topics {
        let name = topic.topic.0.to_string();
        let authorized = cluster_action || ctx.authorize(Operation::Describe, ResourceType::Topic, &name);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let answer = EpochEndOffset::default().with_partition(p.partition);
                if !authorized {
                    return answer
                        .with_error_code(Error::TopicAuthorizationFailed.code())
                        .with_leader_epoch(-1)
                        .with_end_offset(UNDEFINED);
                }
                let Some(partition) = ctx.replicas.get(&name, p.partition) else {
                    return answer
                        .with_error_code(super::absent_partition(ctx, &name, p.partition))
                        .with_leader_epoch(-1)
                        .with_end_offset(UNDEFINED);
                };
                match end_offset(&partition, p.current_leader_epoch, p.leader_epoch) {
                    Ok((epoch, end)) => answer.with_leader_epoch(epoch).with_end_offset(end),
                    Err(e) => answer
                        .with_error_code(e.code())
                        .with_leader_epoch(-1)
                        .with_end_offset(UNDEFINED),
                }
            })
            .collect();
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// The epoch fencing of KIP-320 (-1: the requester does not know the epoch), then the lookup.
fn end_offset(partition: &crate::replica::Partition, current: i32, asked: i32) -> Result<(i32, i64), Error> {
    partition.check_current_leader_epoch(current)?;
    Ok(partition.end_offset_for_epoch(asked)?.unwrap_or((-1, UNDEFINED)))
}
