//! Classic consumer group APIs, served by `coordinator::GroupCoordinator`.
//! FindCoordinator (key 10): v0 baseline · v1 key type, error message · v2 same · v3 flexible ·
//! v4 batched keys (KIP-699) · v5 same · v6 share-group key type (answered INVALID_REQUEST: no
//! share groups). A group (0) or transaction (1) key names the live leader of its partition of
//! `__consumer_offsets` or `__transaction_state` (COORDINATOR_NOT_AVAILABLE without one); every
//! group API on another broker answers NOT_COORDINATOR (`coordinator_routing`).
//! JoinGroup (key 11): v0 baseline (rebalance timeout = session timeout) · v1 rebalance timeout
//! · v2-v3 same · v4 MEMBER_ID_REQUIRED round trip (KIP-394) · v5 group.instance.id (KIP-345) ·
//! v6 flexible · v7 protocol type and name in answers · v8 reason · v9 skip_assignment (KIP-814).
//! SyncGroup (key 14): v0 baseline · v3 instance id · v4 flexible · v5 protocol type and name
//! (mandatory: INCONSISTENT_GROUP_PROTOCOL without them).
//! Heartbeat (key 12): v0 baseline · v3 instance id · v4 flexible.
//! LeaveGroup (key 13): v0 baseline · v3 batched members with instance ids · v4 flexible ·
//! v5 reason.
//! ListGroups (key 16): v0 baseline · v3 flexible · v4 state filter · v5 type filter.
//! DescribeGroups (key 15): v0 baseline · v3 authorized operations · v4 instance ids ·
//! v5 flexible · v6 error message, GROUP_ID_NOT_FOUND for unknown groups (KIP-1043).
//! DeleteGroups (key 42): v0 baseline · v2 flexible.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::coordinator_routing::{self as routing, KeyKind, NOT_COORDINATOR, coordinator_here};
use super::metadata::split_host_port;
use super::{Ctx, Versions, message};
use crate::acl::{Operation, ResourceType};
use crate::cluster::MetadataImage;
use crate::coordinator::group::{GroupState, JoinRequest};

pub const FIND_COORDINATOR_VERSIONS: Versions = Versions::new(ApiKey::FindCoordinator, 0, 6);
pub const JOIN_GROUP_VERSIONS: Versions = Versions::new(ApiKey::JoinGroup, 0, 9);
pub const SYNC_GROUP_VERSIONS: Versions = Versions::new(ApiKey::SyncGroup, 0, 5);
pub const HEARTBEAT_VERSIONS: Versions = Versions::new(ApiKey::Heartbeat, 0, 4);
pub const LEAVE_GROUP_VERSIONS: Versions = Versions::new(ApiKey::LeaveGroup, 0, 5);
pub const LIST_GROUPS_VERSIONS: Versions = Versions::new(ApiKey::ListGroups, 0, 5);
pub const DESCRIBE_GROUPS_VERSIONS: Versions = Versions::new(ApiKey::DescribeGroups, 0, 6);
pub const DELETE_GROUPS_VERSIONS: Versions = Versions::new(ApiKey::DeleteGroups, 0, 2);

/// Who sent a request: JoinGroup records the client id and host of each member.
pub struct Caller {
    pub client_id: String,
    pub peer: SocketAddr,
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn opt(text: Option<&StrBytes>) -> Option<String> {
    text.map(|t| t.to_string())
}

const GROUP_AUTHORIZATION_FAILED: i16 = ResponseError::GroupAuthorizationFailed.code();

/// Whether the principal may READ the group: what joining, syncing, heartbeating, leaving
/// and committing need (Kafka).
pub(super) fn may_read_group(ctx: &Ctx, group: &str) -> bool {
    ctx.authorize(Operation::Read, ResourceType::Group, group)
}

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// What FindCoordinator answers for one key: its coordinator (id, host, port), or an error
/// code with its message.
type Found = Result<(i32, String, i32), (i16, &'static str)>;

/// The coordinator of one key, once its internal topic is known to exist (`error` 0).
fn coordinator_of(ctx: &Ctx, image: &MetadataImage, kind: Option<KeyKind>, error: i16, key: &str) -> Found {
    let Some(kind) = kind else {
        return Err((ResponseError::InvalidRequest.code(), "unsupported key type"));
    };
    // Kafka: DESCRIBE on the group or transactional id.
    match kind {
        KeyKind::Group if !ctx.authorize(Operation::Describe, ResourceType::Group, key) => {
            return Err((GROUP_AUTHORIZATION_FAILED, "Group authorization failed."));
        }
        KeyKind::Transaction if !ctx.authorize(Operation::Describe, ResourceType::TransactionalId, key) => {
            return Err((
                ResponseError::TransactionalIdAuthorizationFailed.code(),
                "Transactional Id authorization failed.",
            ));
        }
        _ => {}
    }
    if error != 0 {
        return Err((error, "the coordinator is not available"));
    }
    match routing::locate(image, kind, key) {
        routing::Coordinator::Broker(b) => match b.endpoint(&ctx.listener) {
            Some(endpoint) => Ok((b.id, endpoint.host.clone(), endpoint.port)),
            // Kafka answers so when the coordinator has no endpoint on this listener.
            None => Err((
                ResponseError::CoordinatorNotAvailable.code(),
                "the coordinator has no endpoint on this listener",
            )),
        },
        // `ensure_*` just created the topic, so this image lags it: this node serves the key,
        // as before the topic existed.
        routing::Coordinator::NotCreated => match image
            .brokers
            .get(&ctx.config.node_id)
            .and_then(|b| b.endpoint(&ctx.listener))
        {
            Some(endpoint) => Ok((ctx.config.node_id, endpoint.host.clone(), endpoint.port)),
            None => {
                let (host, port) = split_host_port(ctx.config.advertised());
                Ok((ctx.config.node_id, host, port))
            }
        },
        routing::Coordinator::Unavailable => Err((
            ResponseError::CoordinatorNotAvailable.code(),
            "the coordinator's partition has no live leader",
        )),
    }
}

pub async fn find_coordinator(ctx: &Ctx, req: FindCoordinatorRequest, version: i16) -> FindCoordinatorResponse {
    let kind = match req.key_type {
        KEY_TYPE_GROUP => Some(KeyKind::Group),
        KEY_TYPE_TRANSACTION => Some(KeyKind::Transaction),
        _ => None,
    };
    // Kafka creates the offsets topic when a group coordinator is first looked up, and
    // `__transaction_state` when a transaction coordinator is.
    let ensured = match kind {
        Some(KeyKind::Group) => ctx.coordinator.ensure_offsets_topic(),
        Some(KeyKind::Transaction) => ctx.transactions.ensure_topic(),
        None => Ok(()),
    };
    if let (Err(e), Some(kind)) = (&ensured, kind) {
        tracing::warn!(topic = kind.topic(), error = %e, "the coordinator's internal topic is not available");
    }
    let ready = ensured.is_ok();
    let error = if ready {
        0
    } else {
        ResponseError::CoordinatorNotAvailable.code()
    };
    // Read after `ensure_*`: the image then holds the topic it may have created.
    let image = ctx.controller.image();
    if version >= 4 {
        // KIP-699: each key its own coordinator.
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|key| {
                let c = Coordinator::default().with_key(key.clone());
                match coordinator_of(ctx, &image, kind, error, key) {
                    Ok((id, host, port)) => c.with_node_id(BrokerId(id)).with_host(s(&host)).with_port(port),
                    Err((code, text)) => c
                        .with_error_code(code)
                        .with_node_id(BrokerId(-1))
                        .with_host(s(""))
                        .with_port(-1)
                        .with_error_message(message(text)),
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match coordinator_of(ctx, &image, kind, error, &req.key) {
        Ok((id, host, port)) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(id))
            .with_host(s(&host))
            .with_port(port),
        Err((code, text)) => {
            let mut resp = FindCoordinatorResponse::default()
                .with_error_code(code)
                .with_node_id(BrokerId(-1))
                .with_host(s(""))
                .with_port(-1);
            if version >= 1 {
                resp.error_message = message(text);
            }
            resp
        }
    }
}

/// A JoinGroup refused before the coordinator (Kafka's `JoinGroupRequest.getErrorResponse`): no
/// generation, no member id; the protocol name is nullable only from v7.
fn join_refused(code: i16, version: i16) -> JoinGroupResponse {
    let mut resp = JoinGroupResponse::default()
        .with_error_code(code)
        .with_generation_id(-1);
    resp.protocol_name = if version >= 7 { None } else { Some(s("")) };
    resp
}

pub async fn join_group(ctx: &Ctx, caller: &Caller, req: JoinGroupRequest, version: i16) -> JoinGroupResponse {
    if !may_read_group(ctx, &req.group_id.0) {
        return join_refused(GROUP_AUTHORIZATION_FAILED, version);
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return join_refused(NOT_COORDINATOR, version);
    }
    let session_timeout = Duration::from_millis(u64::try_from(req.session_timeout_ms).unwrap_or(0));
    let rebalance_timeout = if version == 0 {
        session_timeout
    } else {
        Duration::from_millis(u64::try_from(req.rebalance_timeout_ms).unwrap_or(0))
    };
    let instance_id = if version >= 5 {
        opt(req.group_instance_id.as_ref())
    } else {
        None
    };
    let join = JoinRequest {
        member_id: req.member_id.to_string(),
        require_known_member_id: version >= 4 && instance_id.is_none(),
        instance_id,
        client_id: caller.client_id.clone(),
        client_host: format!("/{}", caller.peer.ip()),
        session_timeout,
        rebalance_timeout,
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
    };
    let result = ctx.coordinator.join(&req.group_id.0, join).await;
    let members = result
        .members
        .into_iter()
        .map(|(id, instance, metadata)| {
            let mut m = JoinGroupResponseMember::default()
                .with_member_id(s(&id))
                .with_metadata(metadata);
            if version >= 5 {
                m.group_instance_id = instance.as_deref().map(s);
            }
            m
        })
        .collect();
    let mut resp = JoinGroupResponse::default()
        .with_error_code(result.error)
        .with_generation_id(result.generation)
        .with_leader(s(&result.leader))
        .with_member_id(s(&result.member_id))
        .with_members(members);
    if version >= 7 {
        resp.protocol_type = result.protocol_type.as_deref().map(s);
        resp.protocol_name = result.protocol.as_deref().map(s);
    } else {
        // Not nullable before v7.
        resp.protocol_name = Some(s(result.protocol.as_deref().unwrap_or("")));
    }
    if version >= 9 {
        resp.skip_assignment = result.skip_assignment;
    }
    resp
}

pub async fn sync_group(ctx: &Ctx, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
    // KIP-559: from v5 both are mandatory; Kafka's `KafkaApis.handleSyncGroupRequest` refuses a
    // request without them before looking at the group.
    if version >= 5 && (req.protocol_type.is_none() || req.protocol_name.is_none()) {
        return SyncGroupResponse::default().with_error_code(ResponseError::InconsistentGroupProtocol.code());
    }
    if !may_read_group(ctx, &req.group_id.0) {
        return SyncGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return SyncGroupResponse::default().with_error_code(NOT_COORDINATOR);
    }
    let instance_id = if version >= 3 {
        opt(req.group_instance_id.as_ref())
    } else {
        None
    };
    let assignments: Vec<(String, Bytes)> = req
        .assignments
        .iter()
        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
        .collect();
    let result = ctx
        .coordinator
        .sync(
            &req.group_id.0,
            &req.member_id,
            instance_id.as_deref(),
            req.generation_id,
            opt(req.protocol_type.as_ref()).as_deref(),
            opt(req.protocol_name.as_ref()).as_deref(),
            assignments,
        )
        .await;
    let mut resp = SyncGroupResponse::default()
        .with_error_code(result.error)
        .with_assignment(result.assignment);
    if version >= 5 {
        resp.protocol_type = result.protocol_type.as_deref().map(s);
        resp.protocol_name = result.protocol.as_deref().map(s);
    }
    resp
}

pub async fn heartbeat(ctx: &Ctx, req: HeartbeatRequest, version: i16) -> HeartbeatResponse {
    if !may_read_group(ctx, &req.group_id.0) {
        return HeartbeatResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return HeartbeatResponse::default().with_error_code(NOT_COORDINATOR);
    }
    let instance_id = if version >= 3 {
        opt(req.group_instance_id.as_ref())
    } else {
        None
    };
    let code = ctx.coordinator.heartbeat(
        &req.group_id.0,
        &req.member_id,
        instance_id.as_deref(),
        req.generation_id,
    );
    HeartbeatResponse::default().with_error_code(code)
}

pub async fn leave_group(ctx: &Ctx, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    // Every version: a top-level error and no member entries, as the coordinator's own refusals.
    if !may_read_group(ctx, &req.group_id.0) {
        return LeaveGroupResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return LeaveGroupResponse::default().with_error_code(NOT_COORDINATOR);
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| (m.member_id.to_string(), opt(m.group_instance_id.as_ref())))
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    match ctx.coordinator.leave(&req.group_id.0, &members).await {
        Err(code) => LeaveGroupResponse::default().with_error_code(code),
        Ok(codes) if version < 3 => LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(0)),
        Ok(codes) => {
            let members = members
                .iter()
                .zip(codes)
                .map(|((m, i), code)| {
                    MemberResponse::default()
                        .with_member_id(s(m))
                        .with_group_instance_id(i.as_deref().map(s))
                        .with_error_code(code)
                })
                .collect();
            LeaveGroupResponse::default().with_members(members)
        }
    }
}

pub async fn list_groups(ctx: &Ctx, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    // Kafka: DESCRIBE on the cluster lists every group, else those the principal may describe.
    let all = ctx.authorize_cluster(Operation::Describe);
    let groups = ctx
        .coordinator
        .list()
        .into_iter()
        .filter(|(id, ..)| all || ctx.authorize(Operation::Describe, ResourceType::Group, id))
        .filter(|(_, _, state, _)| states.is_empty() || states.contains(&state.to_lowercase()))
        .filter(|(_, _, _, kind)| types.is_empty() || types.iter().any(|t| t == kind))
        .map(|(id, protocol_type, state, kind)| {
            let mut g = ListedGroup::default()
                .with_group_id(GroupId(s(&id)))
                .with_protocol_type(s(&protocol_type));
            if version >= 4 {
                g.group_state = s(state);
            }
            if version >= 5 {
                g.group_type = s(kind);
            }
            g
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub async fn describe_groups(ctx: &Ctx, req: DescribeGroupsRequest, version: i16) -> DescribeGroupsResponse {
    let groups = req
        .groups
        .iter()
        .map(|id| {
            if !ctx.authorize(Operation::Describe, ResourceType::Group, &id.0) {
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(GROUP_AUTHORIZATION_FAILED);
            }
            if !coordinator_here(ctx, KeyKind::Group, &id.0) {
                // Kafka's DescribeGroupsResponse.groupError: the code, empty fields.
                return DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(NOT_COORDINATOR);
            }
            let described = ctx.coordinator.with_group(&id.0, |e| {
                if e.consumer.is_some() || e.share.is_some() {
                    // Kafka: DescribeGroups only describes classic groups.
                    return None;
                }
                let g = &e.group;
                let stable = g.state == GroupState::Stable;
                let protocol = g.protocol.clone().unwrap_or_default();
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        let mut d = DescribedGroupMember::default()
                            .with_member_id(s(&m.id))
                            .with_client_id(s(&m.client_id))
                            .with_client_host(s(&m.client_host));
                        if version >= 4 {
                            d.group_instance_id = m.instance_id.as_deref().map(s);
                        }
                        // Kafka includes metadata and assignment once the group is stable.
                        if stable {
                            d.member_metadata = m
                                .protocols
                                .iter()
                                .find(|(n, _)| *n == protocol)
                                .map(|(_, b)| b.clone())
                                .unwrap_or_default();
                            d.member_assignment = m.assignment.clone();
                        }
                        d
                    })
                    .collect();
                let d = DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_group_state(s(g.state.name()))
                    .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or("")))
                    .with_protocol_data(s(&protocol))
                    .with_members(members);
                Some(d)
            });
            let mut d = described.flatten().unwrap_or_else(|| {
                if version >= 6 {
                    DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(message(format!("group {} not found", id.0)))
                } else {
                    DescribedGroup::default()
                        .with_group_id(id.clone())
                        .with_group_state(s("Dead"))
                }
            });
            if version >= 3 && req.include_authorized_operations {
                d.authorized_operations = ctx.operations(ResourceType::Group, &id.0);
            }
            d
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub async fn delete_groups(ctx: &Ctx, req: DeleteGroupsRequest, _version: i16) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for id in req.groups_names {
        let code = if !ctx.authorize(Operation::Delete, ResourceType::Group, &id.0) {
            GROUP_AUTHORIZATION_FAILED
        } else if coordinator_here(ctx, KeyKind::Group, &id.0) {
            ctx.coordinator.delete_group(&id.0).await
        } else {
            NOT_COORDINATOR
        };
        results.push(DeletableGroupResult::default().with_group_id(id).with_error_code(code));
    }
    DeleteGroupsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;

    #[test]
    fn a_join_refused_before_the_coordinator_encodes_at_every_version() {
        // JoinGroupResponse.json: ProtocolName is nullable from v7 only; before, an absent one
        // would not encode at all.
        for version in JOIN_GROUP_VERSIONS.min..=JOIN_GROUP_VERSIONS.max {
            let mut buf = bytes::BytesMut::new();
            join_refused(NOT_COORDINATOR, version)
                .encode(&mut buf, version)
                .unwrap();
            let back = JoinGroupResponse::decode(&mut buf.freeze(), version).unwrap();
            assert_eq!((back.error_code, back.generation_id), (16, -1), "v{version}");
            assert!(back.member_id.is_empty() && back.members.is_empty(), "v{version}");
        }
    }
}
