//! Share groups (KIP-932), membership, served by `coordinator::share`.
//! ShareGroupHeartbeat (key 76): v1 baseline (v0 was Kafka 4.0's early access, removed in 4.1);
//! members generate their own ids; SubscribedTopicNames only (no regex).
//! ShareGroupDescribe (key 77): v1 baseline.
//! Both answer UNSUPPORTED_VERSION while `share.version` is finalized at 0, as Kafka's
//! `isShareGroupProtocolEnabled`.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member, TopicPartitions as DescribedTopicPartitions,
};
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::consumer_groups::by_topic;
use super::coordinator_routing::{KeyKind, NOT_COORDINATOR, coordinator_here};
use super::groups::Caller;
use super::{Ctx, Versions, message, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::coordinator::consumer::Tp;
use crate::coordinator::share::{ASSIGNOR, ShareHeartbeatIn, invalid_heartbeat};

pub const HEARTBEAT_VERSIONS: Versions = Versions::new(ApiKey::ShareGroupHeartbeat, 1, 1);
pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::ShareGroupDescribe, 1, 1);

/// `Errors.UNSUPPORTED_VERSION`'s default message, which Kafka's error responses carry.
const UNSUPPORTED_VERSION_TEXT: &str = "The version of API is not supported.";

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Whether share groups are on: `share.version` finalized at 1 or more (Kafka's
/// `isShareGroupProtocolEnabled`).
pub fn share_groups_enabled(ctx: &Ctx) -> bool {
    ctx.controller.image().feature_level("share.version") >= 1
}

pub async fn heartbeat(
    ctx: &Ctx,
    caller: &Caller,
    req: ShareGroupHeartbeatRequest,
    _version: i16,
) -> ShareGroupHeartbeatResponse {
    let error = |code: ResponseError, text: Option<&str>| {
        ShareGroupHeartbeatResponse::default()
            .with_error_code(code.code())
            .with_error_message(text.and_then(message))
    };
    if !share_groups_enabled(ctx) {
        return error(ResponseError::UnsupportedVersion, Some(UNSUPPORTED_VERSION_TEXT));
    }
    // Kafka: READ on the group, DESCRIBE on every subscribed topic, then the request's form.
    if !super::groups::may_read_group(ctx, &req.group_id.0) {
        return error(ResponseError::GroupAuthorizationFailed, None);
    }
    if let Some(names) = &req.subscribed_topic_names
        && names
            .iter()
            .any(|n| !ctx.authorize(Operation::Describe, ResourceType::Topic, n))
    {
        return error(ResponseError::TopicAuthorizationFailed, None);
    }
    let input = ShareHeartbeatIn {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        rack_id: req.rack_id.map(|r| r.to_string()),
        subscribed: req
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        client_id: caller.client_id.clone(),
        client_host: format!("/{}", caller.peer.ip()),
    };
    if let Some(text) = invalid_heartbeat(&req.group_id.0, &input) {
        return error(ResponseError::InvalidRequest, Some(text));
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return ShareGroupHeartbeatResponse::default()
            .with_error_code(NOT_COORDINATOR)
            .with_error_message(message("this broker is not the group's coordinator"));
    }
    let out = ctx.coordinator.share_heartbeat(&req.group_id.0, input).await;
    let assignment = out.assignment.as_ref().map(|set| {
        let topic_partitions = by_topic(set)
            .into_iter()
            .map(|(id, partitions)| TopicPartitions::default().with_topic_id(id).with_partitions(partitions))
            .collect();
        Assignment::default().with_topic_partitions(topic_partitions)
    });
    ShareGroupHeartbeatResponse::default()
        .with_error_code(out.error)
        .with_error_message(out.message.as_deref().and_then(message))
        .with_member_id((!out.member_id.is_empty()).then(|| s(&out.member_id)))
        .with_member_epoch(out.member_epoch)
        .with_heartbeat_interval_ms(out.heartbeat_interval_ms)
        .with_assignment(assignment)
}

pub async fn describe(ctx: &Ctx, req: ShareGroupDescribeRequest, _version: i16) -> ShareGroupDescribeResponse {
    let error_row = |id: &GroupId, code: i16, text: Option<String>| {
        DescribedGroup::default()
            .with_group_id(id.clone())
            .with_error_code(code)
            .with_error_message(text.and_then(message))
    };
    if !share_groups_enabled(ctx) {
        let groups = req
            .group_ids
            .iter()
            .map(|id| {
                error_row(
                    id,
                    ResponseError::UnsupportedVersion.code(),
                    Some(UNSUPPORTED_VERSION_TEXT.into()),
                )
            })
            .collect();
        return ShareGroupDescribeResponse::default().with_groups(groups);
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
                return error_row(id, ResponseError::GroupAuthorizationFailed.code(), None);
            }
            if !coordinator_here(ctx, KeyKind::Group, &id.0) {
                return error_row(
                    id,
                    NOT_COORDINATOR,
                    Some("this broker is not the group's coordinator".into()),
                );
            }
            let described = ctx.coordinator.with_group(&id.0, |e| {
                let g = e.share.as_ref()?;
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        Member::default()
                            .with_member_id(s(&m.id))
                            .with_rack_id(m.rack_id.as_deref().map(s))
                            .with_member_epoch(m.epoch)
                            .with_client_id(s(&m.client_id))
                            .with_client_host(s(&m.client_host))
                            .with_subscribed_topic_names(m.subscribed.iter().map(|t| topic_name(t)).collect())
                            .with_assignment(names(&m.assigned))
                    })
                    .collect();
                Some(
                    DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_group_state(s(g.state_name()))
                        .with_group_epoch(g.epoch)
                        .with_assignment_epoch(g.assignment_epoch)
                        .with_assignor_name(s(ASSIGNOR))
                        .with_members(members),
                )
            });
            let mut d = match described {
                Some(Some(d)) => d,
                // Kafka's `shareGroup(groupId)`: a group of another type, or none.
                Some(None) => error_row(
                    id,
                    ResponseError::GroupIdNotFound.code(),
                    Some(format!("Group {} is not a share group.", id.0)),
                ),
                None => error_row(
                    id,
                    ResponseError::GroupIdNotFound.code(),
                    Some(format!("Group {} not found.", id.0)),
                ),
            };
            if req.include_authorized_operations && d.error_code == 0 {
                d.authorized_operations = ctx.operations(ResourceType::Group, &id.0);
            }
            d
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(groups)
}
