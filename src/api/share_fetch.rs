//! Share groups (KIP-932), records, served by `crate::share`.
//! ShareFetch (key 78): v1 baseline (v0 was Kafka 4.0's early access, removed in 4.1): acquires
//! records for a member, with acknowledgements of earlier ones carried along; MaxRecords,
//! BatchSize (a hint, not used). v2 (Kafka 4.2): ShareAcquireMode (KIP-1206: 0 batch-optimized,
//! MaxRecords may be exceeded to keep batches whole; 1 record-limit, never more than
//! MaxRecords), the RENEW acknowledge type (KIP-1222: the record stays acquired, its lock
//! started again) and IsRenewAck (a renew-only request: no fetching, every limit 0).
//! ShareAcknowledge (key 79): v1 baseline. v2: RENEW, IsRenewAck, and the lock duration in the
//! answer (AcquisitionLockTimeoutMs).
//! Both keep a share session per (group, member): epoch 0 opens it (no acknowledgements
//! allowed), -1 closes it (no fetching), any other must be the session's current epoch
//! (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND otherwise). Both answer
//! UNSUPPORTED_VERSION while `share.version` is finalized at 0.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch as AckLeader, NodeEndpoint as AckEndpoint, PartitionData as AckPartitionData,
    ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;

use super::leader_hints::LeaderHints;
use super::share_groups::share_groups_enabled;
use super::{Ctx, Versions, message};
use crate::acl::{Operation, ResourceType};
use crate::coordinator::consumer::Tp;
use crate::replica::Partition;
use crate::share::partition::{ACK_RENEW, Budget};
use crate::share::{FetchLimits, ShareError};

pub const FETCH_VERSIONS: Versions = Versions::new(ApiKey::ShareFetch, 1, 2);
pub const ACKNOWLEDGE_VERSIONS: Versions = Versions::new(ApiKey::ShareAcknowledge, 1, 2);

/// ShareAcquireMode 1 (KIP-1206): at most MaxRecords records, batches split if need be.
const ACQUIRE_RECORD_LIMIT: i8 = 1;

/// The longest a ShareFetch waits for records.
const WAIT_MS_MAX: u64 = 60_000;
/// `Errors.UNSUPPORTED_VERSION`'s default message.
const UNSUPPORTED_VERSION_TEXT: &str = "The version of API is not supported.";

/// Kafka's member ids are `Uuid.toString()`: 22 characters of URL-safe base64 (16 bytes).
fn valid_member_id(id: &str) -> bool {
    id.len() == 22 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The checks both APIs make first, in Kafka's order: the feature, the group id, READ on the
/// group, the member id. The top-level error and its message, if one fails.
fn refuse(ctx: &Ctx, group: Option<&GroupId>, member: Option<&StrBytes>) -> Option<(i16, Option<&'static str>)> {
    if !share_groups_enabled(ctx) {
        return Some((ResponseError::UnsupportedVersion.code(), Some(UNSUPPORTED_VERSION_TEXT)));
    }
    let Some(group) = group.filter(|g| !g.0.is_empty()) else {
        return Some((ResponseError::InvalidRequest.code(), Some("The group id is missing.")));
    };
    if !super::groups::may_read_group(ctx, &group.0) {
        return Some((ResponseError::GroupAuthorizationFailed.code(), None));
    }
    if !member.is_some_and(|m| valid_member_id(m)) {
        return Some((ResponseError::InvalidRequest.code(), Some("Invalid member ID")));
    }
    None
}

/// A partition of the request, resolved to the replica led here or the error to answer.
fn resolve(ctx: &Ctx, tp: Tp) -> Result<Arc<Partition>, i16> {
    let image = ctx.controller.image();
    let Some(topic) = image.topic_by_id(&tp.0) else {
        return Err(ResponseError::UnknownTopicId.code());
    };
    if !ctx.authorize(Operation::Read, ResourceType::Topic, &topic.name) {
        return Err(ResponseError::TopicAuthorizationFailed.code());
    }
    ctx.replicas
        .get(&topic.name, tp.1)
        .ok_or_else(|| super::absent_partition(ctx, &topic.name, tp.1))
}

type AckBatches = Vec<(i64, i64, Vec<i8>)>;

/// Whether `version` accepts every acknowledge type of `batches`: RENEW only from v2 (a v1
/// request carrying one is refused, as Kafka refuses it, with INVALID_REQUEST).
fn types_allowed(version: i16, batches: &AckBatches) -> bool {
    version >= 2 || batches.iter().all(|(_, _, types)| !types.contains(&ACK_RENEW))
}

/// The v2 request checks of a ShareFetch: a known acquire mode, and a renew-only request
/// (IsRenewAck) asking for no records.
fn check_v2_fetch(req: &ShareFetchRequest, version: i16) -> Result<(), String> {
    if version < 2 {
        return Ok(());
    }
    if !(0..=ACQUIRE_RECORD_LIMIT).contains(&req.share_acquire_mode) {
        return Err(format!("Unknown share acquire mode id: {}", req.share_acquire_mode));
    }
    if req.is_renew_ack && (req.max_bytes != 0 || req.min_bytes != 0 || req.max_records != 0 || req.max_wait_ms != 0) {
        return Err(
            "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 in a ShareFetch with IsRenewAck.".to_string(),
        );
    }
    Ok(())
}

pub async fn share_fetch(ctx: &Ctx, req: ShareFetchRequest, version: i16) -> ShareFetchResponse {
    let top = |code: i16, text: Option<&str>| {
        ShareFetchResponse::default()
            .with_error_code(code)
            .with_error_message(text.and_then(message))
    };
    if let Some((code, text)) = refuse(ctx, req.group_id.as_ref(), req.member_id.as_ref()) {
        return top(code, text);
    }
    if let Err(text) = check_v2_fetch(&req, version) {
        return top(ResponseError::InvalidRequest.code(), Some(&text));
    }
    let group = req.group_id.as_ref().map(|g| g.0.to_string()).unwrap_or_default();
    let member = req.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default();
    let mut named: BTreeSet<Tp> = BTreeSet::new();
    let mut acks: BTreeMap<Tp, AckBatches> = BTreeMap::new();
    for topic in &req.topics {
        for p in &topic.partitions {
            let tp = (topic.topic_id, p.partition_index);
            named.insert(tp);
            if !p.acknowledgement_batches.is_empty() {
                let batches = acks.entry(tp).or_default();
                for b in &p.acknowledgement_batches {
                    batches.push((b.first_offset, b.last_offset, b.acknowledge_types.clone()));
                }
            }
        }
    }
    let forget: BTreeSet<Tp> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let share = &ctx.share;
    let epoch = req.share_session_epoch;
    // The session decides which partitions are fetched.
    let fetched: BTreeSet<Tp> = match epoch {
        0 => {
            if !acks.is_empty() {
                return top(
                    ResponseError::InvalidRequest.code(),
                    Some("Acknowledge data present in the initial ShareFetch request."),
                );
            }
            if let Err(code) = share.open_session(&group, &member, named.clone(), ctx.connection) {
                return top(code, None);
            }
            share.refresh(&group, &named);
            named.clone()
        }
        -1 => {
            if !share.has_session(&group, &member) {
                return top(ResponseError::ShareSessionNotFound.code(), None);
            }
            BTreeSet::new()
        }
        _ => match share.update_session(&group, &member, epoch, &named, &forget) {
            Ok(partitions) => partitions,
            Err(code) => {
                tracing::debug!(group, member, epoch, code, "ShareFetch refused");
                return top(code, None);
            }
        },
    };
    let settings = crate::share::group_settings(&ctx.config, &ctx.controller.image(), &group);
    let mut answers: BTreeMap<Tp, PartitionData> = BTreeMap::new();
    let mut resolved: BTreeMap<Tp, Arc<Partition>> = BTreeMap::new();
    for tp in fetched.iter().chain(acks.keys()) {
        if resolved.contains_key(tp) || answers.contains_key(tp) {
            continue;
        }
        match resolve(ctx, *tp) {
            Ok(p) => {
                resolved.insert(*tp, p);
            }
            Err(code) => {
                answers.insert(
                    *tp,
                    PartitionData::default()
                        .with_partition_index(tp.1)
                        .with_error_code(code),
                );
            }
        }
    }
    // Acknowledgements first, so that released records may be fetched again at once.
    for (tp, batches) in &acks {
        let Some(partition) = resolved.get(tp) else { continue };
        let answer = answers
            .entry(*tp)
            .or_insert_with(|| PartitionData::default().with_partition_index(tp.1));
        if !types_allowed(version, batches) {
            answer.acknowledge_error_code = ResponseError::InvalidRequest.code();
            continue;
        }
        if let Err(ShareError { code, message: text }) = share.acknowledge(&group, &member, partition, batches).await {
            answer.acknowledge_error_code = code;
            answer.acknowledge_error_message = text.and_then(message);
        }
    }
    if epoch == -1 {
        share.close_session(&group, &member);
    } else if !(version >= 2 && req.is_renew_ack) {
        let record_limit = version >= 2 && req.share_acquire_mode == ACQUIRE_RECORD_LIMIT;
        fetch_records(
            ctx,
            &req,
            record_limit,
            &group,
            &member,
            &fetched,
            &resolved,
            &mut answers,
        )
        .await;
    }
    // A new session's answer lists each of its partitions; a later one only those with
    // something to say.
    let mut responses: BTreeMap<uuid::Uuid, Vec<PartitionData>> = BTreeMap::new();
    for (tp, answer) in answers {
        let said = epoch == 0
            || answer.error_code != 0
            || answer.acknowledge_error_code != 0
            || answer.records.is_some()
            || acks.contains_key(&tp);
        if said {
            responses.entry(tp.0).or_default().push(answer);
        }
    }
    let mut response = ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(settings.lock_duration.as_millis()).unwrap_or(i32::MAX))
        .with_responses(
            responses
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        );
    point_fetch_to_leaders(ctx, &mut response);
    response
}

/// Acquires records in each fetched partition led here, under the request's byte and record
/// budgets; when none was acquired anywhere, waits (up to the request's wait) for records to
/// arrive or be released, and tries again.
#[allow(clippy::too_many_arguments)]
async fn fetch_records(
    ctx: &Ctx,
    req: &ShareFetchRequest,
    record_limit: bool,
    group: &str,
    member: &str,
    fetched: &BTreeSet<Tp>,
    resolved: &BTreeMap<Tp, Arc<Partition>>,
    answers: &mut BTreeMap<Tp, PartitionData>,
) {
    let wait = Duration::from_millis(u64::try_from(req.max_wait_ms).unwrap_or(0).min(WAIT_MS_MAX));
    let deadline = Instant::now() + wait;
    let max_bytes = usize::try_from(req.max_bytes)
        .unwrap_or(0)
        .min(ctx.config.fetch_max_bytes);
    let max_records = match usize::try_from(req.max_records) {
        Ok(n) if n > 0 => n,
        _ => usize::MAX,
    };
    let targets: Vec<(Tp, Arc<Partition>)> = fetched
        .iter()
        .filter_map(|tp| resolved.get(tp).map(|p| (*tp, p.clone())))
        .collect();
    for (tp, _) in &targets {
        answers
            .entry(*tp)
            .or_insert_with(|| PartitionData::default().with_partition_index(tp.1));
    }
    loop {
        // Watch before reading, so that an append between the read and the wait is seen.
        let mut moved: Vec<_> = targets.iter().map(|(_, p)| p.subscribe()).collect();
        let mut released = ctx.share.released();
        let mut bytes_left = max_bytes;
        let mut records_left = max_records;
        let mut any = false;
        for (tp, partition) in &targets {
            if bytes_left == 0 || records_left == 0 {
                break;
            }
            let limits = FetchLimits {
                max_bytes: bytes_left,
                records: Budget {
                    max_records: records_left,
                    exact: record_limit,
                },
            };
            let Some(answer) = answers.get_mut(tp) else { continue };
            match ctx.share.fetch(group, member, partition, limits).await {
                Ok(got) if !got.acquired.is_empty() => {
                    any = true;
                    let count: i64 = got
                        .acquired
                        .iter()
                        .map(|a| a.last_offset.saturating_sub(a.first_offset).saturating_add(1))
                        .sum();
                    records_left = records_left.saturating_sub(usize::try_from(count).unwrap_or(usize::MAX));
                    bytes_left = bytes_left.saturating_sub(got.records.as_ref().map_or(0, |r| r.len()));
                    answer.records = got.records;
                    answer.acquired_records = got
                        .acquired
                        .iter()
                        .map(|a| {
                            AcquiredRecords::default()
                                .with_first_offset(a.first_offset)
                                .with_last_offset(a.last_offset)
                                .with_delivery_count(a.delivery_count)
                        })
                        .collect();
                }
                Ok(_) => {}
                Err(ShareError { code, message: text }) => {
                    any = true;
                    answer.error_code = code;
                    answer.error_message = text.and_then(message);
                }
            }
        }
        let now = Instant::now();
        if any || targets.is_empty() || now >= deadline {
            return;
        }
        // Wake at the request's deadline, when records arrive or are released, or when a lock
        // expires (its records become available again).
        let tps: Vec<Tp> = targets.iter().map(|(tp, _)| *tp).collect();
        let wake = ctx
            .share
            .next_lock_deadline(group, &tps)
            .map(Instant::from_std)
            .map_or(deadline, |d| d.min(deadline))
            .max(now + Duration::from_millis(1));
        let appended = futures::future::select_all(moved.iter_mut().map(|rx| Box::pin(rx.changed())));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = appended => {}
            _ = released.changed() => {}
        }
    }
}

/// KIP-951 hints for the partitions answered NOT_LEADER_OR_FOLLOWER: each one's live leader
/// and its epoch, and the endpoints of those leaders as (id, host, port, rack).
struct Hints {
    leaders: BTreeMap<Tp, (i32, i32)>,
    endpoints: Vec<(i32, StrBytes, i32, Option<StrBytes>)>,
}

fn hints(ctx: &Ctx, not_leader: impl Iterator<Item = Tp>) -> Hints {
    let image = ctx.controller.image();
    let mut hints = LeaderHints::new(&image);
    let mut leaders = BTreeMap::new();
    for (topic_id, partition) in not_leader {
        let Some(info) = hints.topic(true, &topic_id, "") else {
            continue;
        };
        if let Some(leader) = hints.leader_of(info, partition) {
            leaders.insert((topic_id, partition), leader);
        }
    }
    let endpoints = hints
        .endpoints(&ctx.listener)
        .map(|(b, endpoint)| {
            (
                b.id,
                StrBytes::from_string(endpoint.host.clone()),
                endpoint.port,
                b.rack.clone().map(StrBytes::from_string),
            )
        })
        .collect();
    Hints { leaders, endpoints }
}

fn point_fetch_to_leaders(ctx: &Ctx, response: &mut ShareFetchResponse) {
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let hints = hints(
        ctx,
        response.responses.iter().flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == not_leader)
                .map(|p| (t.topic_id, p.partition_index))
        }),
    );
    for topic in &mut response.responses {
        for p in &mut topic.partitions {
            if let Some((leader, epoch)) = hints.leaders.get(&(topic.topic_id, p.partition_index)) {
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(*leader)
                    .with_leader_epoch(*epoch);
            }
        }
    }
    response.node_endpoints = hints
        .endpoints
        .into_iter()
        .map(|(id, host, port, rack)| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(host)
                .with_port(port)
                .with_rack(rack)
        })
        .collect();
}

pub async fn share_acknowledge(ctx: &Ctx, req: ShareAcknowledgeRequest, version: i16) -> ShareAcknowledgeResponse {
    let top = |code: i16, text: Option<&str>| {
        ShareAcknowledgeResponse::default()
            .with_error_code(code)
            .with_error_message(text.and_then(message))
    };
    if let Some((code, text)) = refuse(ctx, req.group_id.as_ref(), req.member_id.as_ref()) {
        return top(code, text);
    }
    let group = req.group_id.as_ref().map(|g| g.0.to_string()).unwrap_or_default();
    let member = req.member_id.as_ref().map(|m| m.to_string()).unwrap_or_default();
    if let Err(code) = ctx.share.acknowledge_session(&group, &member, req.share_session_epoch) {
        return top(code, None);
    }
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in &req.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let tp = (topic.topic_id, p.partition_index);
            let batches: AckBatches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect();
            let mut answer = AckPartitionData::default().with_partition_index(p.partition_index);
            match resolve(ctx, tp) {
                Err(code) => answer.error_code = code,
                Ok(_) if !types_allowed(version, &batches) => answer.error_code = ResponseError::InvalidRequest.code(),
                Ok(partition) => {
                    if let Err(ShareError { code, message: text }) =
                        ctx.share.acknowledge(&group, &member, &partition, &batches).await
                    {
                        answer.error_code = code;
                        answer.error_message = text.and_then(message);
                    }
                }
            }
            partitions.push(answer);
        }
        topics.push(
            ShareAcknowledgeTopicResponse::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    if req.share_session_epoch == -1 {
        ctx.share.close_session(&group, &member);
    }
    let settings = crate::share::group_settings(&ctx.config, &ctx.controller.image(), &group);
    let mut response = ShareAcknowledgeResponse::default()
        .with_acquisition_lock_timeout_ms(i32::try_from(settings.lock_duration.as_millis()).unwrap_or(i32::MAX))
        .with_responses(topics);
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let hints = hints(
        ctx,
        response.responses.iter().flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == not_leader)
                .map(|p| (t.topic_id, p.partition_index))
        }),
    );
    for topic in &mut response.responses {
        for p in &mut topic.partitions {
            if let Some((leader, epoch)) = hints.leaders.get(&(topic.topic_id, p.partition_index)) {
                p.current_leader = AckLeader::default().with_leader_id(*leader).with_leader_epoch(*epoch);
            }
        }
    }
    response.node_endpoints = hints
        .endpoints
        .into_iter()
        .map(|(id, host, port, rack)| {
            AckEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(host)
                .with_port(port)
                .with_rack(rack)
        })
        .collect();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_kafka_uuids() {
        assert!(valid_member_id("AAAAAAAAAAAAAAAAAAAAAA"));
        assert!(valid_member_id("x-_9aZ0000000000000000"));
        assert!(!valid_member_id(""));
        assert!(!valid_member_id("not-a-uuid"));
        assert!(!valid_member_id("AAAAAAAAAAAAAAAAAAAAA="));
    }
}
