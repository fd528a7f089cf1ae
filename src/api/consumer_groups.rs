//! Next-generation consumer groups (KIP-848), served by `coordinator::consumer`.
//! ConsumerGroupHeartbeat (key 68): v0 baseline (the broker may generate member ids), static
//! members (instance ids, leave with epoch -2) · v1 members generate their own ids (KIP-1082);
//! SubscribedTopicRegex, resolved by the coordinator against the topics (RE2 syntax, whole
//! names), alone or with topic names.
//! ConsumerGroupDescribe (key 69): v0 baseline, with each member's regex · v1 member type.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopicPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::coordinator_routing::{KeyKind, NOT_COORDINATOR, coordinator_here};
use super::groups::Caller;
use super::{Ctx, Versions, message, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::coordinator::consumer::{HeartbeatIn, Tp};

pub const HEARTBEAT_VERSIONS: Versions = Versions::new(ApiKey::ConsumerGroupHeartbeat, 0, 1);
pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::ConsumerGroupDescribe, 0, 1);

/// ConsumerGroupDescribe's member type for members speaking this protocol (KIP-1099).
const MEMBER_TYPE_CONSUMER: i8 = 1;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

pub(super) fn by_topic(set: &BTreeSet<Tp>) -> BTreeMap<Uuid, Vec<i32>> {
    let mut out: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
    for (topic, p) in set {
        out.entry(*topic).or_default().push(*p);
    }
    out
}

pub async fn heartbeat(
    ctx: &Ctx,
    caller: &Caller,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
) -> ConsumerGroupHeartbeatResponse {
    let refuse = |text: &str| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(message(text))
            .with_member_epoch(-1)
    };
    // Kafka's isConsumerGroupProtocolEnabled, checked first: group.version 0 (UpdateFeatures)
    // turns the protocol off.
    if !protocol_enabled(ctx) {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code())
            .with_error_message(message(UNSUPPORTED_VERSION_TEXT));
    }
    if version >= 1 && req.member_id.is_empty() {
        return refuse("the member id must be set by the member (KIP-1082)");
    }
    // Kafka: READ on the group, and DESCRIBE on every topic subscribed by name.
    if !super::groups::may_read_group(ctx, &req.group_id.0) {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code())
            .with_member_epoch(-1);
    }
    if let Some(names) = &req.subscribed_topic_names
        && names
            .iter()
            .any(|n| !ctx.authorize(Operation::Describe, ResourceType::Topic, n))
    {
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
            .with_error_message(message("not authorized to describe every subscribed topic"))
            .with_member_epoch(-1);
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        // Kafka's GroupCoordinatorService answers the code and its message only.
        return ConsumerGroupHeartbeatResponse::default()
            .with_error_code(NOT_COORDINATOR)
            .with_error_message(message("this broker is not the group's coordinator"));
    }
    let owned = req.topic_partitions.map(|tps| {
        tps.into_iter()
            .flat_map(|t| t.partitions.into_iter().map(move |p| (t.topic_id, p)))
            .collect()
    });
    let input = HeartbeatIn {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.map(|i| i.to_string()),
        rack_id: req.rack_id.map(|r| r.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed: req
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        subscribed_regex: req.subscribed_topic_regex.map(|r| r.to_string()),
        server_assignor: req.server_assignor.map(|a| a.to_string()),
        owned,
        client_id: caller.client_id.clone(),
        client_host: format!("/{}", caller.peer.ip()),
    };
    let out = ctx.coordinator.consumer_heartbeat(&req.group_id.0, input).await;
    let assignment = out.assignment.as_ref().map(|set| {
        let topic_partitions = by_topic(set)
            .into_iter()
            .map(|(id, partitions)| TopicPartitions::default().with_topic_id(id).with_partitions(partitions))
            .collect();
        Assignment::default().with_topic_partitions(topic_partitions)
    });
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(out.error)
        .with_error_message(out.message.as_deref().and_then(message))
        .with_member_id(if out.member_id.is_empty() {
            None
        } else {
            Some(s(&out.member_id))
        })
        .with_member_epoch(out.member_epoch)
        .with_heartbeat_interval_ms(out.heartbeat_interval_ms)
        .with_assignment(assignment)
}

/// Whether the KIP-848 consumer group protocol is on: group.version 1 or more.
fn protocol_enabled(ctx: &Ctx) -> bool {
    ctx.controller.image().feature_level("group.version") >= 1
}

/// `Errors.UNSUPPORTED_VERSION`'s default message, which Kafka's error responses carry.
const UNSUPPORTED_VERSION_TEXT: &str = "The version of API is not supported.";

pub async fn describe(ctx: &Ctx, req: ConsumerGroupDescribeRequest, version: i16) -> ConsumerGroupDescribeResponse {
    if !protocol_enabled(ctx) {
        // Kafka: every group named gets UNSUPPORTED_VERSION.
        let groups = req
            .group_ids
            .iter()
            .map(|id| {
                DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(ResponseError::UnsupportedVersion.code())
            })
            .collect();
        return ConsumerGroupDescribeResponse::default().with_groups(groups);
    }
    let image = ctx.controller.image();
    let names = |set: &BTreeSet<Tp>| -> DescribedAssignment {
        let topic_partitions = by_topic(set)
            .into_iter()
            .map(|(id, partitions)| {
                let name = image.topic_by_id(&id).map(|t| t.name.clone()).unwrap_or_default();
                DescribedTopicPartitions::default()
                    .with_topic_id(id)
                    .with_topic_name(topic_name(&name))
                    .with_partitions(partitions)
            })
            .collect();
        DescribedAssignment::default().with_topic_partitions(topic_partitions)
    };
    let groups = req
        .group_ids
        .iter()
        .map(|id| {
            if !ctx.authorize(Operation::Describe, ResourceType::Group, &id.0) {
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            if !coordinator_here(ctx, KeyKind::Group, &id.0) {
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(NOT_COORDINATOR)
                    .with_error_message(message("this broker is not the group's coordinator"));
            }
            let described = ctx.coordinator.with_group(&id.0, |e| {
                let c = e.consumer.as_ref()?;
                let members = c
                    .members
                    .values()
                    .map(|m| {
                        let mut out = Member::default()
                            .with_member_id(s(&m.id))
                            .with_instance_id(m.instance_id.as_deref().map(s))
                            .with_rack_id(m.rack_id.as_deref().map(s))
                            .with_member_epoch(m.epoch)
                            .with_client_id(s(&m.client_id))
                            .with_client_host(s(&m.client_host))
                            .with_subscribed_topic_names(m.subscribed.iter().map(|t| topic_name(t)).collect())
                            .with_subscribed_topic_regex(m.subscribed_regex.as_deref().map(s))
                            .with_assignment(names(&m.assigned))
                            .with_target_assignment(names(&c.target_of(&m.id)));
                        if version >= 1 {
                            out.member_type = MEMBER_TYPE_CONSUMER;
                        }
                        out
                    })
                    .collect();
                Some(
                    DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_group_state(s(c.state().name()))
                        .with_group_epoch(c.epoch)
                        .with_assignment_epoch(c.assignment_epoch)
                        .with_assignor_name(s(&c.assignor))
                        .with_members(members),
                )
            });
            let mut d = described.flatten().unwrap_or_else(|| {
                DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(message(format!("group {} is not a consumer group", id.0)))
            });
            if req.include_authorized_operations {
                d.authorized_operations = ctx.operations(ResourceType::Group, &id.0);
            }
            d
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
