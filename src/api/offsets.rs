//! Committed offsets, served by `coordinator::GroupCoordinator`.
//! OffsetCommit (key 8): v2 baseline here (retention_time_ms accepted and ignored: retention is
//! the broker's `offsets.retention.minutes`, as in Kafka since KIP-211) · v3 throttle · v5 drops
//! retention time · v6 committed leader epoch · v7 instance id · v8 flexible · v9 member epoch
//! field (classic groups: the generation), GROUP_ID_NOT_FOUND for a group that does not exist
//! (ILLEGAL_GENERATION before), and the only version a KIP-848 member may commit with (older
//! ones: UNSUPPORTED_VERSION). Not served: v10 (topic ids).
//! OffsetFetch (key 9): v1 baseline · v2 all topics (null list), top-level error · v3 throttle ·
//! v5 leader epoch · v6 flexible · v7 require_stable (a partition with an offset pending in an
//! open transaction answers UNSTABLE_OFFSET_COMMIT, KIP-447) · v8 batched groups · v9 member id
//! and epoch (classic groups: not checked).
//! Not served: v10 (topic ids).
//! OffsetDelete (key 47): v0.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, topic_name};
use crate::coordinator::CommitRequest;
use crate::coordinator::records::CommittedOffset;

pub const OFFSET_COMMIT_VERSIONS: Versions = Versions::new(ApiKey::OffsetCommit, 2, 9);
pub const OFFSET_FETCH_VERSIONS: Versions = Versions::new(ApiKey::OffsetFetch, 1, 9);
pub const OFFSET_DELETE_VERSIONS: Versions = Versions::new(ApiKey::OffsetDelete, 0, 0);

pub async fn offset_commit(ctx: &Ctx, req: OffsetCommitRequest, version: i16) -> OffsetCommitResponse {
    let instance_id = if version >= 7 {
        req.group_instance_id.as_ref().map(|s| s.to_string())
    } else {
        None
    };
    let mut wanted: Vec<CommitRequest> = Vec::new();
    for t in &req.topics {
        for p in &t.partitions {
            let epoch = if version >= 6 { p.committed_leader_epoch } else { -1 };
            wanted.push((
                t.name.0.to_string(),
                p.partition_index,
                p.committed_offset,
                epoch,
                p.committed_metadata.as_ref().map(|m| m.to_string()),
            ));
        }
    }
    let codes = ctx
        .coordinator
        .commit(
            &req.group_id.0,
            &req.member_id,
            instance_id.as_deref(),
            req.generation_id_or_member_epoch,
            wanted,
            version,
        )
        .await;
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or(ResponseError::UnknownServerError.code()))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// What a fetch reports for one partition: the commit, or offset -1 and empty metadata.
fn committed(c: Option<&CommittedOffset>) -> (i64, i32, StrBytes) {
    match c {
        Some(c) => (c.offset, c.leader_epoch, StrBytes::from_string(c.metadata.clone())),
        None => (-1, -1, StrBytes::from_static_str("")),
    }
}

/// (topic, partitions) a fetch asks for, or None for every committed partition.
type Wanted = Option<Vec<(String, Vec<i32>)>>;

/// Per topic, each partition with its commit if any.
type Found = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

/// The partition-level code of a fetch: with `require_stable` (v7+), an offset a transaction
/// still holds pending is UNSTABLE_OFFSET_COMMIT and no offset (Kafka's
/// `OffsetMetadataManager.fetchOffsets`); the client retries.
fn stability(ctx: &Ctx, group: &str, require_stable: bool, topic: &str, partition: i32) -> Option<i16> {
    (require_stable && ctx.coordinator.has_pending_txn_offset(group, topic, partition))
        .then(|| ResponseError::UnstableOffsetCommit.code())
}

fn lookup(ctx: &Ctx, group: &str, wanted: Wanted) -> Found {
    let all = ctx.coordinator.fetch_offsets(group);
    match wanted {
        Some(list) => list
            .into_iter()
            .map(|(topic, parts)| {
                let found = parts
                    .into_iter()
                    .map(|p| (p, all.get(&(topic.clone(), p)).cloned()))
                    .collect();
                (topic, found)
            })
            .collect(),
        None => {
            let mut out: Found = Vec::new();
            for ((topic, p), c) in all {
                match out.last_mut() {
                    Some((t, parts)) if *t == topic => parts.push((p, Some(c))),
                    _ => out.push((topic, vec![(p, Some(c))])),
                }
            }
            out
        }
    }
}

pub async fn offset_fetch(ctx: &Ctx, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                // v9 (KIP-848): a member of a consumer group names itself and its epoch.
                if version >= 9
                    && let Some(member) = g.member_id.as_ref()
                    && let Err(code) = ctx
                        .coordinator
                        .validate_fetch_member(&g.group_id.0, member, g.member_epoch)
                {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code);
                }
                let wanted = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let topics = lookup(ctx, &g.group_id.0, wanted)
                    .into_iter()
                    .map(|(topic, parts)| {
                        let partitions = parts
                            .into_iter()
                            .map(|(p, c)| {
                                let unstable = stability(ctx, &g.group_id.0, req.require_stable, &topic, p);
                                let c = if unstable.is_some() { None } else { c };
                                let (offset, epoch, metadata) = committed(c.as_ref());
                                OffsetFetchResponsePartitions::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(offset)
                                    .with_committed_leader_epoch(epoch)
                                    .with_metadata(Some(metadata))
                                    .with_error_code(unstable.unwrap_or(0))
                            })
                            .collect();
                        OffsetFetchResponseTopics::default()
                            .with_name(topic_name(&topic))
                            .with_partitions(partitions)
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let topics = lookup(ctx, &req.group_id.0, wanted)
        .into_iter()
        .map(|(topic, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(p, c)| {
                    let unstable = if version >= 7 {
                        stability(ctx, &req.group_id.0, req.require_stable, &topic, p)
                    } else {
                        None
                    };
                    let c = if unstable.is_some() { None } else { c };
                    let (offset, epoch, metadata) = committed(c.as_ref());
                    let mut out = OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_metadata(Some(metadata))
                        .with_error_code(unstable.unwrap_or(0));
                    if version >= 5 {
                        out.committed_leader_epoch = epoch;
                    }
                    out
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(topic_name(&topic))
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

pub async fn offset_delete(ctx: &Ctx, req: OffsetDeleteRequest, _version: i16) -> OffsetDeleteResponse {
    let image = ctx.controller.image();
    let mut known = Vec::new();
    for t in &req.topics {
        if image.topic(&t.name.0).is_some() {
            known.extend(t.partitions.iter().map(|p| (t.name.0.to_string(), p.partition_index)));
        }
    }
    let codes = match ctx.coordinator.delete_offsets(&req.group_id.0, &known).await {
        Ok(codes) => codes,
        Err(code) => return OffsetDeleteResponse::default().with_error_code(code),
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let exists = image.topic(&t.name.0).is_some();
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = if exists {
                        codes.next().unwrap_or(ResponseError::UnknownServerError.code())
                    } else {
                        ResponseError::UnknownTopicOrPartition.code()
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
