//! Share groups' start offsets, for administrators (KIP-932; `kafka-share-groups.sh
//! --describe --offsets`, `--reset-offsets`, `--delete-offsets`; the Java admin client's
//! listShareGroupOffsets, alterShareGroupOffsets and deleteShareGroupOffsets), served by the
//! group's coordinator from the share-partition states it stores (`crate::share`).
//! DescribeShareGroupOffsets (key 90): v0 baseline; all started partitions when no topics are
//! named; -1 for a partition the group never read. v1 (Kafka 4.2, KIP-1226): each partition's
//! lag, the records between the start offset and the high watermark whose delivery is not
//! complete (-1 for a partition never read); the high watermark is read here where this broker
//! leads the partition, else asked of its leader (ListOffsets).
//! AlterShareGroupOffsets (key 91): v0 baseline: new start offsets, nothing in flight; only
//! while the group has no members (NON_EMPTY_GROUP); creates an empty share group when none
//! exists yet.
//! DeleteShareGroupOffsets (key 92): v0 baseline: whole topics; the partitions start again
//! from `share.auto.offset.reset` when next read; only while the group has no members.
//! All three answer UNSUPPORTED_VERSION while `share.version` is finalized at 0.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::*;
use uuid::Uuid;

use super::coordinator_routing::{KeyKind, NOT_COORDINATOR, coordinator_here};
use super::share_groups::share_groups_enabled;
use super::{Ctx, Versions, message, topic_name};
use crate::acl::{Operation, ResourceType};

pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeShareGroupOffsets, 0, 1);

/// The ListOffsets version one broker asks another's high watermarks at.
const LIST_OFFSETS_VERSION: i16 = 9;
pub const ALTER_VERSIONS: Versions = Versions::new(ApiKey::AlterShareGroupOffsets, 0, 0);
pub const DELETE_VERSIONS: Versions = Versions::new(ApiKey::DeleteShareGroupOffsets, 0, 0);

const UNSUPPORTED_VERSION_TEXT: &str = "The version of API is not supported.";

/// The group-level refusal, in Kafka's order: the feature, the ACL, the coordinator.
fn refuse(ctx: &Ctx, group: &str, operation: Operation) -> Option<(i16, Option<&'static str>)> {
    if !share_groups_enabled(ctx) {
        return Some((ResponseError::UnsupportedVersion.code(), Some(UNSUPPORTED_VERSION_TEXT)));
    }
    if !ctx.authorize(operation, ResourceType::Group, group) {
        return Some((ResponseError::GroupAuthorizationFailed.code(), None));
    }
    if !coordinator_here(ctx, KeyKind::Group, group) {
        return Some((NOT_COORDINATOR, Some("this broker is not the group's coordinator")));
    }
    None
}

/// A topic of the request: its id and partition count, or the error its partitions get.
fn topic_of(ctx: &Ctx, name: &str, operation: Operation) -> Result<(Uuid, i32), i16> {
    let image = ctx.controller.image();
    let Some(topic) = image.topic(name) else {
        return Err(ResponseError::UnknownTopicOrPartition.code());
    };
    if !ctx.authorize(operation, ResourceType::Topic, name) {
        return Err(ResponseError::TopicAuthorizationFailed.code());
    }
    Ok((topic.id, topic.partitions))
}

/// The high watermark of each partition (the latest offset, as Kafka's lag takes it from a
/// read_uncommitted ListOffsets): read here where this broker leads the partition, asked of
/// its leader otherwise, one ListOffsets per leader. An error code where the leader is not
/// known or did not answer.
async fn high_watermarks(ctx: &Ctx, tps: &[(String, i32)]) -> BTreeMap<(String, i32), Result<i64, i16>> {
    let image = ctx.controller.image();
    let mut out = BTreeMap::new();
    let mut remote: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (topic, partition) in tps {
        let key = (topic.clone(), *partition);
        if let Some(p) = ctx.replicas.get(topic, *partition) {
            out.insert(key, p.offsets().map(|o| o.high_watermark).map_err(|e| e.code()));
            continue;
        }
        let leader = image.topic(topic).map_or(-1, |t| t.leader(*partition));
        if leader < 0 || leader == ctx.config.node_id || !image.is_live(leader) {
            out.insert(key, Err(ResponseError::LeaderNotAvailable.code()));
            continue;
        }
        remote
            .entry(leader)
            .or_default()
            .entry(topic.clone())
            .or_default()
            .push(*partition);
    }
    let calls = remote.into_iter().map(|(leader, topics)| {
        let broker = image.brokers.get(&leader).cloned();
        async move {
            let asked: Vec<(String, i32)> = topics
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
                .collect();
            let request = super::list_offsets::request_for(&topics, -1);
            let answer = match broker {
                None => Err(ResponseError::LeaderNotAvailable.code()),
                Some(b) => ctx
                    .share
                    .brokers()
                    .call(&b, LIST_OFFSETS_VERSION, &request)
                    .await
                    .map_err(|e| e.code()),
            };
            asked
                .into_iter()
                .map(|(t, p)| {
                    let found = answer.as_ref().map_err(|c| *c).and_then(|r| {
                        r.topics
                            .iter()
                            .filter(|x| x.name.as_str() == t)
                            .flat_map(|x| x.partitions.iter())
                            .find(|x| x.partition_index == p)
                            .map_or(Err(ResponseError::UnknownServerError.code()), |x| {
                                if x.error_code == 0 {
                                    Ok(x.offset)
                                } else {
                                    Err(x.error_code)
                                }
                            })
                    });
                    ((t, p), found)
                })
                .collect::<Vec<_>>()
        }
    });
    for answers in futures::future::join_all(calls).await {
        out.extend(answers);
    }
    out
}

/// KIP-1226's lag: the records from the start offset to the high watermark whose delivery is
/// not complete; never below 0 (a start offset reset past the high watermark has nothing to
/// deliver).
fn lag(high_watermark: i64, start: i64, complete: i64) -> i64 {
    high_watermark.saturating_sub(start).saturating_sub(complete).max(0)
}

pub async fn describe(
    ctx: &Ctx,
    req: DescribeShareGroupOffsetsRequest,
    version: i16,
) -> DescribeShareGroupOffsetsResponse {
    let image = ctx.controller.image();
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in &req.groups {
        let group = g.group_id.as_str();
        let mut out = DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
        if let Some((code, text)) = refuse(ctx, group, Operation::Describe) {
            groups.push(out.with_error_code(code).with_error_message(text.and_then(message)));
            continue;
        }
        // The partitions asked about, or every partition the group started.
        let mut refused: Vec<(String, Uuid, i32, i16)> = Vec::new();
        let asked: Option<Vec<(Uuid, i32)>> = g.topics.as_ref().map(|topics| {
            let mut tps = Vec::new();
            for t in topics {
                match topic_of(ctx, t.topic_name.as_str(), Operation::Describe) {
                    Ok((id, _)) => tps.extend(t.partitions.iter().map(|p| (id, *p))),
                    Err(code) => refused.extend(
                        t.partitions
                            .iter()
                            .map(|p| (t.topic_name.to_string(), Uuid::nil(), *p, code)),
                    ),
                }
            }
            tps
        });
        let offsets = match ctx.coordinator.share_offsets(group, asked.as_deref()) {
            Ok(offsets) => offsets,
            Err(code) => {
                groups.push(out.with_error_code(code));
                continue;
            }
        };
        let mut by_topic: BTreeMap<(String, Uuid), Vec<DescribeShareGroupOffsetsResponsePartition>> = BTreeMap::new();
        let mut rows = Vec::with_capacity(offsets.len());
        for ((id, partition), start, complete) in offsets {
            let Some(t) = image.topic_by_id(&id) else { continue };
            if asked.is_none() && !ctx.authorize(Operation::Describe, ResourceType::Topic, &t.name) {
                continue;
            }
            rows.push((t.name.clone(), id, partition, start, complete));
        }
        // The lag needs each started partition's high watermark (v1 only).
        let started: Vec<(String, i32)> = rows
            .iter()
            .filter(|r| version >= 1 && r.3 >= 0 && r.4 >= 0)
            .map(|r| (r.0.clone(), r.2))
            .collect();
        let watermarks = if started.is_empty() {
            BTreeMap::new()
        } else {
            high_watermarks(ctx, &started).await
        };
        for (name, id, partition, start, complete) in rows {
            let mut answer = DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(partition)
                .with_start_offset(start)
                .with_leader_epoch(-1);
            match watermarks.get(&(name.clone(), partition)) {
                Some(Ok(hw)) => answer.lag = lag(*hw, start, complete),
                Some(Err(code)) => answer.error_code = *code,
                None => {}
            }
            by_topic.entry((name, id)).or_default().push(answer);
        }
        for (name, id, partition, code) in refused {
            by_topic.entry((name, id)).or_default().push(
                DescribeShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(partition)
                    .with_start_offset(-1)
                    .with_leader_epoch(-1)
                    .with_error_code(code),
            );
        }
        out.topics = by_topic
            .into_iter()
            .map(|((name, id), partitions)| {
                DescribeShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(topic_name(&name))
                    .with_topic_id(id)
                    .with_partitions(partitions)
            })
            .collect();
        groups.push(out);
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

/// A topic of AlterShareGroupOffsets: its name, id and each partition's error code.
type TopicAnswer = (String, Uuid, Vec<(i32, i16)>);

/// The message of a refused reset: Kafka names NON_EMPTY_GROUP's reason.
fn reset_refusal(code: i16) -> Option<kafka_protocol::protocol::StrBytes> {
    (code == ResponseError::NonEmptyGroup.code()).then(|| "The group is not empty.".into())
}

pub async fn alter(ctx: &Ctx, req: AlterShareGroupOffsetsRequest, _version: i16) -> AlterShareGroupOffsetsResponse {
    let group = req.group_id.as_str();
    if let Some((code, text)) = refuse(ctx, group, Operation::Read) {
        return AlterShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(text.and_then(message));
    }
    // Each partition's answer, and the resets of those that may be reset.
    let mut answers: Vec<TopicAnswer> = Vec::new();
    let mut resets = Vec::new();
    for t in &req.topics {
        let (id, codes) = match topic_of(ctx, t.topic_name.as_str(), Operation::Read) {
            Err(code) => (
                Uuid::nil(),
                t.partitions.iter().map(|p| (p.partition_index, code)).collect(),
            ),
            Ok((id, count)) => {
                let codes = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let code = if !(0..count).contains(&p.partition_index) {
                            ResponseError::UnknownTopicOrPartition.code()
                        } else if p.start_offset < 0 {
                            ResponseError::InvalidRequest.code()
                        } else {
                            resets.push(((id, p.partition_index), Some(p.start_offset)));
                            0
                        };
                        (p.partition_index, code)
                    })
                    .collect();
                (id, codes)
            }
        };
        answers.push((t.topic_name.to_string(), id, codes));
    }
    if let Err(code) = ctx.coordinator.reset_share_offsets(group, resets, true).await {
        return AlterShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(reset_refusal(code));
    }
    let responses = answers
        .into_iter()
        .map(|(name, id, codes)| {
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(topic_name(&name))
                .with_topic_id(id)
                .with_partitions(
                    codes
                        .into_iter()
                        .map(|(p, code)| {
                            AlterShareGroupOffsetsResponsePartition::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

pub async fn delete(ctx: &Ctx, req: DeleteShareGroupOffsetsRequest, _version: i16) -> DeleteShareGroupOffsetsResponse {
    let group = req.group_id.as_str();
    if let Some((code, text)) = refuse(ctx, group, Operation::Delete) {
        return DeleteShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(text.and_then(message));
    }
    let mut answers = Vec::new();
    let mut resets = Vec::new();
    for t in &req.topics {
        match topic_of(ctx, t.topic_name.as_str(), Operation::Read) {
            Err(code) => answers.push((t.topic_name.to_string(), Uuid::nil(), code)),
            Ok((id, count)) => {
                resets.extend((0..count).map(|p| ((id, p), None)));
                answers.push((t.topic_name.to_string(), id, 0));
            }
        }
    }
    if let Err(code) = ctx.coordinator.reset_share_offsets(group, resets, false).await {
        return DeleteShareGroupOffsetsResponse::default()
            .with_error_code(code)
            .with_error_message(reset_refusal(code));
    }
    let responses = answers
        .into_iter()
        .map(|(name, id, code)| {
            DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(topic_name(&name))
                .with_topic_id(id)
                .with_error_code(code)
        })
        .collect();
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::lag;

    #[test]
    fn lag_leaves_out_completed_deliveries_and_is_never_negative() {
        assert_eq!(lag(100, 40, 10), 50);
        assert_eq!(lag(100, 100, 0), 0);
        assert_eq!(lag(100, 120, 0), 0);
        assert_eq!(lag(i64::MAX, -1, 0), i64::MAX);
    }
}
