//! Committed offsets, served by `coordinator::GroupCoordinator`.
//! OffsetCommit (key 8): v2 baseline here (retention_time_ms accepted and ignored: retention is
//! the broker's `offsets.retention.minutes`, as in Kafka since KIP-211) · v3 throttle · v5 drops
//! retention time · v6 committed leader epoch · v7 instance id · v8 flexible · v9 member epoch
//! field (classic groups: the generation), GROUP_ID_NOT_FOUND for a group that does not exist
//! (ILLEGAL_GENERATION before), and the first version a KIP-848 member may commit with (older
//! ones: UNSUPPORTED_VERSION) · v10 topics named by id instead of name, in the request and the
//! answer (KIP-848; Kafka 4.1 ships it as its unstable latest version, 4.2 serves it): an id
//! the metadata image does not hold gets UNKNOWN_TOPIC_ID. Every version checks the topic and
//! partition before the group, as Kafka's `KafkaApis.handleOffsetCommitRequest`.
//! OffsetFetch (key 9): v1 baseline · v2 all topics (null list), top-level error · v3 throttle ·
//! v5 leader epoch · v6 flexible · v7 require_stable (a partition with an offset pending in an
//! open transaction answers UNSTABLE_OFFSET_COMMIT, KIP-447) · v8 batched groups · v9 member id
//! and epoch (classic groups: not checked) · v10 topics named by id (as OffsetCommit v10): an
//! unknown id gets UNKNOWN_TOPIC_ID and offset -1; asking for all topics lists only those the
//! image still holds, by id.
//! Not served: the topic id Kafka 4.1 stores with each commit (`OffsetCommitValue` v4) and
//! compares on fetch (KAFKA-19154: an offset committed under another id of the same name reads
//! as -1); `__consumer_offsets` keeps v3 values. A deleted topic's offsets are removed from
//! every group (`GroupCoordinator::on_topic_deleted`), so a topic created again under the name
//! starts without offsets either way.
//! OffsetDelete (key 47): v0.

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::coordinator_routing::{KeyKind, NOT_COORDINATOR, coordinator_here};
use super::groups::may_read_group;
use super::{Ctx, Versions, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::cluster::MetadataImage;
use crate::coordinator::CommitRequest;
use crate::coordinator::records::CommittedOffset;

pub const OFFSET_COMMIT_VERSIONS: Versions = Versions::new(ApiKey::OffsetCommit, 2, 10);
pub const OFFSET_FETCH_VERSIONS: Versions = Versions::new(ApiKey::OffsetFetch, 1, 10);
pub const OFFSET_DELETE_VERSIONS: Versions = Versions::new(ApiKey::OffsetDelete, 0, 0);

/// The first version of OffsetCommit and OffsetFetch that names topics by id (and no longer by
/// name), in the request and the answer.
const TOPIC_IDS_VERSION: i16 = 10;

/// An OffsetCommit answer, built as Kafka's `OffsetCommitResponse.Builder`: one entry per topic
/// (found by id from v10, by name before), each partition appended as it is settled, so the
/// partitions refused before the group coordinator come first, then what it answered.
struct CommitAnswer {
    by_id: bool,
    topics: Vec<OffsetCommitResponseTopic>,
    /// Where each topic's entry is: (id, "") from v10, (nil, name) before.
    entries: HashMap<(Uuid, String), usize>,
}

impl CommitAnswer {
    fn new(version: i16) -> CommitAnswer {
        CommitAnswer {
            by_id: version >= TOPIC_IDS_VERSION,
            topics: Vec::new(),
            entries: HashMap::new(),
        }
    }

    fn add(&mut self, topic: &OffsetCommitRequestTopic, partition_index: i32, code: i16) {
        let key = if self.by_id {
            (topic.topic_id, String::new())
        } else {
            (Uuid::nil(), topic.name.0.to_string())
        };
        let by_id = self.by_id;
        let topics = &mut self.topics;
        let at = *self.entries.entry(key).or_insert_with(|| {
            let entry = if by_id {
                OffsetCommitResponseTopic::default().with_topic_id(topic.topic_id)
            } else {
                OffsetCommitResponseTopic::default().with_name(topic.name.clone())
            };
            topics.push(entry);
            topics.len() - 1
        });
        topics[at].partitions.push(
            OffsetCommitResponsePartition::default()
                .with_partition_index(partition_index)
                .with_error_code(code),
        );
    }
}

pub async fn offset_commit(ctx: &Ctx, req: OffsetCommitRequest, version: i16) -> OffsetCommitResponse {
    let instance_id = if version >= 7 {
        req.group_instance_id.as_ref().map(|s| s.to_string())
    } else {
        None
    };
    let image = ctx.controller.image();
    let mut answer = CommitAnswer::new(version);
    if !may_read_group(ctx, &req.group_id.0) {
        // Kafka: READ on the group, else every partition refused so.
        for t in &req.topics {
            for p in &t.partitions {
                answer.add(t, p.partition_index, ResponseError::GroupAuthorizationFailed.code());
            }
        }
        return OffsetCommitResponse::default().with_topics(answer.topics);
    }
    let mut wanted: Vec<CommitRequest> = Vec::new();
    // (index of the request topic, partition) of each entry of `wanted`.
    let mut asked: Vec<(usize, i32)> = Vec::new();
    for (index, t) in req.topics.iter().enumerate() {
        // Kafka's KafkaApis.handleOffsetCommitRequest: the topic is resolved (from v10 by id,
        // through the metadata image) and each partition checked before the group coordinator
        // sees the request. What fails is answered here whatever the group would say (an
        // unknown id UNKNOWN_TOPIC_ID, an unknown name or partition UNKNOWN_TOPIC_OR_PARTITION);
        // the coordinator gets the rest.
        let (found, unknown) = if version >= TOPIC_IDS_VERSION {
            (image.topic_by_id(&t.topic_id), ResponseError::UnknownTopicId)
        } else {
            (image.topic(&t.name.0), ResponseError::UnknownTopicOrPartition)
        };
        // READ on the topic, checked after an id is resolved and before the name is looked up.
        let authorized = match (version >= TOPIC_IDS_VERSION, found) {
            (true, Some(info)) => ctx.authorize(Operation::Read, ResourceType::Topic, &info.name),
            (true, None) => true,
            (false, _) => ctx.authorize(Operation::Read, ResourceType::Topic, &t.name.0),
        };
        for p in &t.partitions {
            if !authorized {
                answer.add(t, p.partition_index, ResponseError::TopicAuthorizationFailed.code());
                continue;
            }
            let Some(info) = found else {
                answer.add(t, p.partition_index, unknown.code());
                continue;
            };
            if p.partition_index < 0 || p.partition_index >= info.partitions {
                answer.add(t, p.partition_index, ResponseError::UnknownTopicOrPartition.code());
                continue;
            }
            let epoch = if version >= 6 { p.committed_leader_epoch } else { -1 };
            wanted.push((
                info.name.clone(),
                p.partition_index,
                p.committed_offset,
                epoch,
                p.committed_metadata.as_ref().map(|m| m.to_string()),
            ));
            asked.push((index, p.partition_index));
        }
    }
    // Kafka does not call the coordinator when nothing is left: such a commit creates no group.
    if !wanted.is_empty() {
        // On a broker that does not coordinate the group, what passed the topic checks gets
        // the coordinator's NOT_COORDINATOR, as in Kafka.
        let codes = if coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
            ctx.coordinator
                .commit(
                    &req.group_id.0,
                    &req.member_id,
                    instance_id.as_deref(),
                    req.generation_id_or_member_epoch,
                    wanted,
                    version,
                )
                .await
        } else {
            vec![NOT_COORDINATOR; asked.len()]
        };
        debug_assert_eq!(codes.len(), asked.len(), "one code per committed partition");
        for (i, (index, partition_index)) in asked.into_iter().enumerate() {
            let code = codes
                .get(i)
                .copied()
                .unwrap_or(ResponseError::UnknownServerError.code());
            answer.add(&req.topics[index], partition_index, code);
        }
    }
    OffsetCommitResponse::default().with_topics(answer.topics)
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

fn may_describe(ctx: &Ctx, topic: &str) -> bool {
    ctx.authorize(Operation::Describe, ResourceType::Topic, topic)
}

/// A partition's fetch answer: TOPIC_AUTHORIZATION_FAILED and no offset for a topic the
/// principal may not describe (named in the request), else its commit and stability code.
fn fetched<'a>(
    ctx: &Ctx,
    group: &str,
    require_stable: bool,
    topic: &str,
    p: i32,
    c: Option<&'a CommittedOffset>,
) -> (Option<&'a CommittedOffset>, i16) {
    if !may_describe(ctx, topic) {
        return (None, ResponseError::TopicAuthorizationFailed.code());
    }
    let unstable = stability(ctx, group, require_stable, topic, p);
    match unstable {
        Some(code) => (None, code),
        None => (c, 0),
    }
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
            // Every committed topic the principal may describe (Kafka leaves the others out).
            for ((topic, p), c) in all.into_iter().filter(|((t, _), _)| may_describe(ctx, t)) {
                match out.last_mut() {
                    Some((t, parts)) if *t == topic => parts.push((p, Some(c))),
                    _ => out.push((topic, vec![(p, Some(c))])),
                }
            }
            out
        }
    }
}

/// The UNKNOWN_TOPIC_ID entry of a v10 fetch for an id the metadata image does not hold:
/// offset -1 for each partition asked (Kafka's `KafkaApis.fetchOffsetsForGroup`).
fn unknown_topic_id(topic: OffsetFetchRequestTopics) -> OffsetFetchResponseTopics {
    let partitions = topic
        .partition_indexes
        .into_iter()
        .map(|p| {
            OffsetFetchResponsePartitions::default()
                .with_partition_index(p)
                .with_committed_offset(-1)
                .with_error_code(ResponseError::UnknownTopicId.code())
        })
        .collect();
    OffsetFetchResponseTopics::default()
        .with_topic_id(topic.topic_id)
        .with_partitions(partitions)
}

/// One group of an OffsetFetch v8+.
fn fetch_group(
    ctx: &Ctx,
    image: &MetadataImage,
    g: OffsetFetchRequestGroup,
    require_stable: bool,
    version: i16,
) -> OffsetFetchResponseGroup {
    if !ctx.authorize(Operation::Describe, ResourceType::Group, &g.group_id.0) {
        return OffsetFetchResponseGroup::default()
            .with_group_id(g.group_id)
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    if !coordinator_here(ctx, KeyKind::Group, &g.group_id.0) {
        return OffsetFetchResponseGroup::default()
            .with_group_id(g.group_id)
            .with_error_code(NOT_COORDINATOR);
    }
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
    let by_id = version >= TOPIC_IDS_VERSION;
    // v10: each topic is named by id; Kafka's KafkaApis.fetchOffsetsForGroup resolves it through
    // the metadata image and answers an id it does not hold itself, after the topics the
    // coordinator answered.
    let mut unknown = Vec::new();
    let wanted = g.topics.map(|ts| {
        ts.into_iter()
            .filter_map(|t| {
                if !by_id {
                    return Some((t.name.0.to_string(), t.partition_indexes));
                }
                match image.topic_by_id(&t.topic_id) {
                    Some(info) => Some((info.name.clone(), t.partition_indexes)),
                    None => {
                        unknown.push(t);
                        None
                    }
                }
            })
            .collect()
    });
    let mut topics: Vec<OffsetFetchResponseTopics> = lookup(ctx, &g.group_id.0, wanted)
        .into_iter()
        .filter_map(|(topic, parts)| {
            // The same image resolved the requested ids, so a requested topic gets its id back.
            // Asked for all topics, Kafka leaves out one whose id it cannot find (a deleted
            // topic): a v10 entry cannot name it.
            let id = if by_id { Some(image.topic(&topic)?.id) } else { None };
            let partitions = parts
                .into_iter()
                .map(|(p, c)| {
                    let (c, code) = fetched(ctx, &g.group_id.0, require_stable, &topic, p, c.as_ref());
                    let (offset, epoch, metadata) = committed(c);
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(metadata))
                        .with_error_code(code)
                })
                .collect();
            let entry = match id {
                Some(id) => OffsetFetchResponseTopics::default().with_topic_id(id),
                None => OffsetFetchResponseTopics::default().with_name(topic_name(&topic)),
            };
            Some(entry.with_partitions(partitions))
        })
        .collect();
    topics.extend(unknown.into_iter().map(unknown_topic_id));
    OffsetFetchResponseGroup::default()
        .with_group_id(g.group_id)
        .with_topics(topics)
}

pub async fn offset_fetch(ctx: &Ctx, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    if version >= 8 {
        let image = ctx.controller.image();
        let groups = req
            .groups
            .into_iter()
            .map(|g| fetch_group(ctx, &image, g, req.require_stable, version))
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    if !ctx.authorize(Operation::Describe, ResourceType::Group, &req.group_id.0) {
        return refused_fetch(req, version, ResponseError::GroupAuthorizationFailed.code());
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return refused_fetch(req, version, NOT_COORDINATOR);
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
                    let require_stable = version >= 7 && req.require_stable;
                    let (c, code) = fetched(ctx, &req.group_id.0, require_stable, &topic, p, c.as_ref());
                    let (offset, epoch, metadata) = committed(c);
                    let mut out = OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_metadata(Some(metadata))
                        .with_error_code(code);
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

/// An OffsetFetch v1-v7 refused whole, NOT_COORDINATOR or GROUP_AUTHORIZATION_FAILED (Kafka's
/// `OffsetFetchRequest.getErrorResponse`): from v2 the top-level error and no topics; v1 has no
/// top-level error, so each partition asked carries it, with offset -1.
fn refused_fetch(req: OffsetFetchRequest, version: i16, code: i16) -> OffsetFetchResponse {
    if version >= 2 {
        return OffsetFetchResponse::default().with_error_code(code);
    }
    let topics = req
        .topics
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .into_iter()
                .map(|p| {
                    let (offset, _, metadata) = committed(None);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_metadata(Some(metadata))
                        .with_error_code(code)
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

pub async fn offset_delete(ctx: &Ctx, req: OffsetDeleteRequest, _version: i16) -> OffsetDeleteResponse {
    if !ctx.authorize(Operation::Delete, ResourceType::Group, &req.group_id.0) {
        return OffsetDeleteResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    if !coordinator_here(ctx, KeyKind::Group, &req.group_id.0) {
        return OffsetDeleteResponse::default().with_error_code(NOT_COORDINATOR);
    }
    let image = ctx.controller.image();
    let mut known = Vec::new();
    // Kafka: READ on each topic.
    let may_read = |t: &str| ctx.authorize(Operation::Read, ResourceType::Topic, t);
    for t in &req.topics {
        if may_read(&t.name.0) && image.topic(&t.name.0).is_some() {
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
            let authorized = may_read(&t.name.0);
            let exists = image.topic(&t.name.0).is_some();
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = if !authorized {
                        ResponseError::TopicAuthorizationFailed.code()
                    } else if exists {
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

#[cfg(test)]
mod tests {
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
    use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest};
    use kafka_protocol::protocol::{Decodable, Encodable};
    use uuid::Uuid;

    const ID: [u8; 16] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];

    /// The encoding at `version`, checked against its computed size.
    fn bytes_of(message: &impl Encodable, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).unwrap();
        assert_eq!(buf.len(), message.compute_size(version).unwrap(), "computed size");
        buf.freeze()
    }

    #[test]
    fn v10_requests_name_topics_by_id_on_the_wire() {
        // OffsetCommitRequest.json and OffsetFetchRequest.json (Kafka 4.1, KIP-848): from v10 a
        // topic is its 16-byte TopicId where v9 had its compact-string Name. Laid out by hand
        // from the schema, not by the codec under test.
        let mut commit = BytesMut::new();
        commit.put_slice(&[2, b'g']); // group_id
        commit.put_i32(-1); // generation_id_or_member_epoch
        commit.put_u8(1); // member_id ""
        commit.put_u8(0); // group_instance_id null
        commit.put_u8(2); // one topic
        commit.put_slice(&ID); // topic_id
        commit.put_u8(2); // one partition
        commit.put_i32(0); // partition_index
        commit.put_i64(42); // committed_offset
        commit.put_i32(-1); // committed_leader_epoch
        commit.put_slice(&[2, b'm']); // committed_metadata
        commit.put_slice(&[0, 0, 0]); // tagged fields: partition, topic, request
        let commit = commit.freeze();
        let req = OffsetCommitRequest::decode(&mut commit.clone(), 10).unwrap();
        let topic = &req.topics[0];
        assert_eq!(topic.topic_id, Uuid::from_bytes(ID));
        assert!(topic.name.is_empty(), "no name on the wire from v10");
        assert_eq!(
            (
                topic.partitions[0].committed_offset,
                topic.partitions[0].committed_metadata.as_deref()
            ),
            (42, Some("m"))
        );
        assert_eq!(bytes_of(&req, 10), commit);
        // The same request at v9 carries the name and no id.
        let at_v9 = bytes_of(&req, 9);
        assert_eq!(
            at_v9.len(),
            commit.len() - 16 + 1,
            "a 1-byte empty compact name instead"
        );

        let mut fetch = BytesMut::new();
        fetch.put_u8(2); // one group
        fetch.put_slice(&[2, b'g']); // group_id
        fetch.put_u8(0); // member_id null
        fetch.put_i32(-1); // member_epoch
        fetch.put_u8(2); // one topic
        fetch.put_slice(&ID); // topic_id
        fetch.put_u8(3); // two partition indexes
        fetch.put_i32(0);
        fetch.put_i32(1);
        fetch.put_slice(&[0, 0]); // tagged fields: topic, group
        fetch.put_u8(1); // require_stable
        fetch.put_u8(0); // tagged fields: request
        let fetch = fetch.freeze();
        let req = OffsetFetchRequest::decode(&mut fetch.clone(), 10).unwrap();
        let topics = req.groups[0].topics.as_ref().unwrap();
        assert_eq!(topics[0].topic_id, Uuid::from_bytes(ID));
        assert!(topics[0].name.is_empty());
        assert_eq!(topics[0].partition_indexes, vec![0, 1]);
        assert!(req.require_stable);
        assert_eq!(bytes_of(&req, 10), fetch);
        assert!(
            OffsetFetchRequest::decode(&mut fetch.clone(), 11).is_err(),
            "v11 is not defined"
        );
    }

    #[test]
    fn a_fetch_on_a_broker_that_is_not_the_coordinator_answers_by_version() {
        // Kafka's OffsetFetchRequest.getErrorResponse: v1 has no top-level error, so each
        // partition asked carries NOT_COORDINATOR; from v2 the top-level error alone.
        use kafka_protocol::messages::OffsetFetchResponse;
        use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
        let req = OffsetFetchRequest::default()
            .with_group_id(kafka_protocol::messages::GroupId(
                kafka_protocol::protocol::StrBytes::from_static_str("g"),
            ))
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(super::topic_name("t"))
                    .with_partition_indexes(vec![0, 1]),
            ]));
        for version in 1..8 {
            let resp = super::refused_fetch(req.clone(), version, super::NOT_COORDINATOR);
            let back = OffsetFetchResponse::decode(&mut bytes_of(&resp, version), version).unwrap();
            if version == 1 {
                let partitions = &back.topics[0].partitions;
                assert_eq!(partitions.len(), 2);
                assert!(
                    partitions
                        .iter()
                        .all(|p| p.error_code == 16 && p.committed_offset == -1)
                );
            } else {
                assert_eq!(back.error_code, 16, "v{version}");
                assert!(back.topics.is_empty(), "v{version}");
            }
        }
    }

    #[test]
    fn a_v10_commit_answer_names_its_topic_by_id_only() {
        // OffsetCommitResponse.json: Name is versions 0-9, TopicId 10+; a name left in the
        // entry is not written.
        let resp = OffsetCommitResponse::default().with_topics(vec![
            OffsetCommitResponseTopic::default()
                .with_name(super::topic_name("t"))
                .with_topic_id(Uuid::from_bytes(ID))
                .with_partitions(vec![OffsetCommitResponsePartition::default().with_error_code(100)]),
        ]);
        let mut expected = BytesMut::new();
        expected.put_i32(0); // throttle_time_ms
        expected.put_u8(2); // one topic
        expected.put_slice(&ID);
        expected.put_u8(2); // one partition
        expected.put_i32(0);
        expected.put_i16(100); // UNKNOWN_TOPIC_ID
        expected.put_slice(&[0, 0, 0]);
        assert_eq!(bytes_of(&resp, 10), expected.freeze());
    }
}
