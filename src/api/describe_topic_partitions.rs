//! DescribeTopicPartitions (key 75, KIP-966): topics and their partitions, a page at a time,
//! what the Java AdminClient's `describeTopics` uses from Kafka 3.8 on.
//! v0 only (Kafka 4.1 serves v0): topics by name, all of them when none is named; at most
//! `response_partition_limit` partitions per answer (capped at Kafka's
//! `max.request.partition.size.limit` default), walked with `cursor` / `next_cursor`, as
//! Kafka's `DescribeTopicPartitionsRequestHandler` and
//! `KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse` do. No topic is created.
//! Eligible leader replicas (KIP-966) are always empty: there is no replication to elect from.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{ApiKey, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse};
use uuid::Uuid;

use super::metadata::{PartitionState, is_internal};
use super::{Ctx, Versions, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::cluster::{MetadataImage, TopicInfo, validate_topic_name};

pub const VERSIONS: Versions = Versions::new(ApiKey::DescribeTopicPartitions, 0, 0);

/// The most partitions one answer holds whatever the request asks: the default of Kafka's
/// `max.request.partition.size.limit`, which caps `response_partition_limit`.
const RESPONSE_PARTITIONS_MAX: i32 = 2000;

pub async fn handle(ctx: &Ctx, req: DescribeTopicPartitionsRequest, _version: i16) -> DescribeTopicPartitionsResponse {
    let image = ctx.controller.image();
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.as_str(), c.partition_index));
    // Topics sort before the cursor's are done; "" sorts before every name.
    let from = cursor.map_or("", |(name, _)| name);
    let fetch_all = req.topics.is_empty();
    let names: BTreeSet<&str> = if fetch_all {
        image
            .topics
            .keys()
            .map(String::as_str)
            .filter(|name| *name >= from)
            // Topics the principal may not describe are left out, unnamed.
            .filter(|name| ctx.authorize(Operation::Describe, ResourceType::Topic, name))
            .collect()
    } else {
        req.topics
            .iter()
            .map(|t| t.name.0.as_str())
            .filter(|name| *name >= from)
            .collect()
    };
    if let Some((cursor_name, _)) = cursor
        && !fetch_all
        && !names.contains(cursor_name)
    {
        // Kafka throws InvalidRequestException; its error response names every requested
        // topic with the code and nothing else.
        return DescribeTopicPartitionsResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(ResponseError::InvalidRequest.code())
                        .with_name(Some(t.name.clone()))
                })
                .collect(),
        );
    }
    let start_of = |name: &str| match cursor {
        Some((cursor_name, partition)) if cursor_name == name => partition,
        _ => 0,
    };
    let limit = RESPONSE_PARTITIONS_MAX.min(req.response_partition_limit);
    let access = Access {
        may_describe: &|name: &str| ctx.authorize(Operation::Describe, ResourceType::Topic, name),
        operations: &|name: &str| ctx.operations(ResourceType::Topic, name),
    };
    let (topics, next_cursor) = describe_page(&image, names, start_of, limit, !fetch_all, &access, |topic, index| {
        PartitionState::of(ctx, &image, topic, index)
    });
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

/// What the principal may see: whether it may describe a topic, and its authorized
/// operations on it.
struct Access<'a> {
    may_describe: &'a dyn Fn(&str) -> bool,
    operations: &'a dyn Fn(&str) -> i32,
}

/// One page: the topics `names` (sorted) from the partition `start_of(name)` gives, until
/// `limit` partitions are listed; then the cursor of the first partition left out. A named
/// topic that does not exist is listed with its error when `report_unknown`, and costs no
/// partition of the limit. Kafka's `getTopicMetadataForDescribeTopicResponse`, including
/// what it does with a limit of zero (a cursor at the first topic) or below (nothing).
fn describe_page<'a>(
    image: &MetadataImage,
    names: impl IntoIterator<Item = &'a str>,
    start_of: impl Fn(&str) -> i32,
    limit: i32,
    report_unknown: bool,
    access: &Access<'_>,
    state_of: impl Fn(&TopicInfo, i32) -> PartitionState,
) -> (Vec<DescribeTopicPartitionsResponseTopic>, Option<Cursor>) {
    let mut topics = Vec::new();
    let mut remaining = i64::from(limit);
    for name in names {
        if remaining == 0 {
            // Every partition of the topics before fitted: the next answer starts here.
            return (topics, Some(cursor(name, 0)));
        }
        if remaining < 0 {
            continue;
        }
        if !(access.may_describe)(name) {
            // Named and not to be described: before its existence, which is not told.
            topics.push(
                DescribeTopicPartitionsResponseTopic::default()
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_name(Some(topic_name(name)))
                    .with_topic_id(Uuid::nil())
                    .with_topic_authorized_operations((access.operations)(name)),
            );
            continue;
        }
        let Some(topic) = image.topic(name) else {
            if report_unknown {
                topics.push(unknown_topic(name, (access.operations)(name)));
            }
            continue;
        };
        let (range, next) = partition_page(topic.partitions, start_of(name), remaining);
        let partitions: Vec<_> = range.map(|index| partition(index, state_of(topic, index))).collect();
        remaining -= i64::try_from(partitions.len()).unwrap_or(i64::MAX);
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(&topic.name)))
                .with_topic_id(topic.id)
                .with_is_internal(is_internal(&topic.name))
                .with_partitions(partitions)
                .with_topic_authorized_operations((access.operations)(name)),
        );
        if let Some(next) = next {
            return (topics, Some(cursor(name, next)));
        }
    }
    (topics, None)
}

/// The partitions of a topic of `count` listed from `start` when `room` more fit, and the
/// first one left out (Kafka's `getPartitionMetadataForDescribeTopicResponse`: indexes
/// outside the topic are skipped, a start past the end lists none). Computed in i64, where
/// Kafka's int sum could wrap for a cursor near i32::MAX.
fn partition_page(count: i32, start: i32, room: i64) -> (std::ops::Range<i32>, Option<i32>) {
    debug_assert!(room > 0);
    let upper = i64::from(count).min(i64::from(start) + room);
    let next = (upper < i64::from(count)).then(|| i32::try_from(upper).unwrap_or(i32::MIN));
    let upper = i32::try_from(upper).unwrap_or(i32::MIN);
    (start.max(0)..upper.max(start.max(0)), next)
}

fn partition(index: i32, state: PartitionState) -> DescribeTopicPartitionsResponsePartition {
    // Unlike Metadata, a partition without a live leader carries no error: leader -1 says it.
    DescribeTopicPartitionsResponsePartition::default()
        .with_partition_index(index)
        .with_leader_id(kafka_protocol::messages::BrokerId(state.leader))
        .with_leader_epoch(state.leader_epoch)
        .with_replica_nodes(state.replicas)
        .with_isr_nodes(state.isr)
        .with_eligible_leader_replicas(Some(state.elr))
        .with_last_known_elr(Some(state.last_known_elr))
        .with_offline_replicas(state.offline_replicas)
}

/// A named topic the image does not hold: INVALID_TOPIC_EXCEPTION when no topic could have
/// that name, else UNKNOWN_TOPIC_OR_PARTITION.
fn unknown_topic(name: &str, operations: i32) -> DescribeTopicPartitionsResponseTopic {
    let code = match validate_topic_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition.code(),
        Err(_) => ResponseError::InvalidTopicException.code(),
    };
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(code)
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
        .with_is_internal(is_internal(name))
        .with_topic_authorized_operations(operations)
}

fn cursor(name: &str, partition_index: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(topic_name(name))
        .with_partition_index(partition_index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn image_with(topics: &[(&str, i32)]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for &(name, partitions) in topics {
            let info = TopicInfo {
                name: name.to_string(),
                id: Uuid::new_v4(),
                partitions,
                replication_factor: 1,
                configs: BTreeMap::new(),
                leader_epoch: 0,
                assignments: vec![vec![1]; usize::try_from(partitions).unwrap()],
                registrations: Default::default(),
            };
            image.topics.insert(name.to_string(), Arc::new(info));
        }
        image
    }

    fn state(topic: &TopicInfo, index: i32) -> PartitionState {
        PartitionState {
            leader: topic.leader(index),
            leader_epoch: topic.leader_epoch,
            replicas: vec![kafka_protocol::messages::BrokerId(topic.leader(index))],
            isr: vec![kafka_protocol::messages::BrokerId(topic.leader(index))],
            offline_replicas: Vec::new(),
            elr: Vec::new(),
            last_known_elr: Vec::new(),
        }
    }

    /// A topic of a page: its name, error code and the partitions listed.
    type Listed = (String, i16, Vec<i32>);

    /// The topics of a page, and its next cursor.
    fn page(
        image: &MetadataImage,
        names: &[&str],
        cursor_at: Option<(&str, i32)>,
        limit: i32,
    ) -> (Vec<Listed>, Option<(String, i32)>) {
        let start_of = |name: &str| match cursor_at {
            Some((c, p)) if c == name => p,
            _ => 0,
        };
        let open = Access {
            may_describe: &|_: &str| true,
            operations: &|_: &str| 0,
        };
        let (topics, next) = describe_page(image, names.iter().copied(), start_of, limit, true, &open, state);
        (
            topics
                .into_iter()
                .map(|t| {
                    let name = t.name.map(|n| n.0.to_string()).unwrap_or_default();
                    let indexes = t.partitions.iter().map(|p| p.partition_index).collect();
                    (name, t.error_code, indexes)
                })
                .collect(),
            next.map(|c| (c.topic_name.0.to_string(), c.partition_index)),
        )
    }

    #[test]
    fn a_topic_cut_by_the_limit_leaves_a_cursor_at_its_first_partition_left_out() {
        // KRaftMetadataCache.getPartitionMetadataForDescribeTopicResponse: nextIndex.
        let image = image_with(&[("a", 3), ("b", 2)]);
        let (topics, next) = page(&image, &["a", "b"], None, 2);
        assert_eq!(topics, vec![("a".into(), 0, vec![0, 1])]);
        assert_eq!(next, Some(("a".into(), 2)));
        let (topics, next) = page(&image, &["a", "b"], Some(("a", 2)), 2);
        assert_eq!(topics, vec![("a".into(), 0, vec![2]), ("b".into(), 0, vec![0])]);
        assert_eq!(next, Some(("b".into(), 1)));
    }

    #[test]
    fn a_limit_used_up_exactly_points_the_cursor_at_the_next_topic() {
        // getTopicMetadataForDescribeTopicResponse: remaining == 0 sets (next topic, 0).
        let image = image_with(&[("a", 3), ("b", 2)]);
        let (topics, next) = page(&image, &["a", "b"], None, 3);
        assert_eq!(topics, vec![("a".into(), 0, vec![0, 1, 2])]);
        assert_eq!(next, Some(("b".into(), 0)));
        let (topics, next) = page(&image, &["a", "b"], None, 5);
        assert_eq!(topics.len(), 2);
        assert_eq!(next, None);
    }

    #[test]
    fn zero_and_negative_limits_answer_as_kafka_does() {
        let image = image_with(&[("a", 3)]);
        assert_eq!(page(&image, &["a"], None, 0), (vec![], Some(("a".into(), 0))));
        assert_eq!(page(&image, &["a", "zz"], None, -1), (vec![], None));
    }

    #[test]
    fn unknown_topics_are_listed_with_their_error_and_cost_no_partition() {
        let image = image_with(&[("b", 1)]);
        let (topics, next) = page(&image, &["a", "b", "bad name"], None, 1);
        assert_eq!(
            topics,
            vec![
                ("a".into(), ResponseError::UnknownTopicOrPartition.code(), vec![]),
                ("b".into(), 0, vec![0]),
            ]
        );
        // The limit is used up by b, so the cursor points at the topic after it.
        assert_eq!(next, Some(("bad name".into(), 0)));
        let (topics, _) = page(&image, &["bad name"], None, 1);
        assert_eq!(
            topics,
            vec![("bad name".into(), ResponseError::InvalidTopicException.code(), vec![])]
        );
    }

    #[test]
    fn cursor_partitions_outside_the_topic_are_skipped() {
        let image = image_with(&[("a", 3), ("b", 1)]);
        // Past the end: the topic is listed without partitions and the page goes on.
        let (topics, next) = page(&image, &["a", "b"], Some(("a", 7)), 5);
        assert_eq!(topics, vec![("a".into(), 0, vec![]), ("b".into(), 0, vec![0])]);
        assert_eq!(next, None);
        // Below zero: the indexes below zero take room but list nothing.
        let (topics, next) = page(&image, &["a"], Some(("a", -1)), 2);
        assert_eq!(topics, vec![("a".into(), 0, vec![0])]);
        assert_eq!(next, Some(("a".into(), 1)));
        // Near i32::MAX: no overflow.
        let (topics, next) = page(&image, &["a"], Some(("a", i32::MAX)), 2000);
        assert_eq!(topics, vec![("a".into(), 0, vec![])]);
        assert_eq!(next, None);
    }
}
