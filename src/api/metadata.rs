//! Metadata (key 3): brokers, controller, topics and their partitions.
//! v0 baseline (an empty topic list means all) · v1 controller id, is_internal, rack, null list
//! = all · v2 cluster id · v3 throttle · v4 allow_auto_topic_creation · v5 offline replicas ·
//! v7 leader epoch · v8 authorized operations · v9 flexible · v10 topic ids · v11 drops cluster
//! authorized operations · v12 lookup by topic id · v13 top-level error code.
//! Unknown topics are created when `auto.create.topics.enable` and the request allows it,
//! with `num.partitions` partitions.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{Ctx, Versions, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::cluster::{MetadataImage, TopicInfo};

pub const VERSIONS: Versions = Versions::new(ApiKey::Metadata, 0, 13);

/// Kafka's "not requested" value for authorized operations.
pub(crate) const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

pub async fn handle(ctx: &Ctx, req: MetadataRequest, version: i16) -> MetadataResponse {
    let with_operations = version >= 8 && req.include_topic_authorized_operations;
    // Each topic's operations for this principal, when asked (Kafka's "not requested" else).
    let operations = |name: &str| match with_operations {
        true => ctx.operations(ResourceType::Topic, name),
        false => OPERATIONS_NOT_REQUESTED,
    };
    let may_describe = |name: &str| ctx.authorize(Operation::Describe, ResourceType::Topic, name);
    let allow_create = version < 4 || req.allow_auto_topic_creation;

    let mut image = ctx.controller.image();
    let all = match &req.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let topics = match req.topics {
        // All topics: those the principal may not describe are left out, unnamed.
        _ if all => image
            .topics
            .values()
            .filter(|t| may_describe(&t.name))
            .map(|t| describe(ctx, &image, t, operations(&t.name), version))
            .collect(),
        None => Vec::new(),
        Some(list) => {
            // As Kafka decides: a request naming any topic id (v12+) looks every topic up by
            // id, each id once, and ignores names; the Java client sends an empty name, not a
            // null one, beside each id.
            let by_id = version >= 12 && list.iter().any(|t| !t.topic_id.is_nil());
            let mut seen_ids = std::collections::HashSet::new();
            let mut out = Vec::with_capacity(list.len());
            for wanted in list {
                if by_id && (wanted.topic_id.is_nil() || !seen_ids.insert(wanted.topic_id)) {
                    continue;
                }
                let name = if by_id { None } else { wanted.name };
                match name {
                    Some(name) => {
                        let name = name.0.to_string();
                        // Kafka checks DESCRIBE before existence, so that an unauthorized
                        // client does not learn which topics exist.
                        if !may_describe(&name) {
                            let code = ResponseError::TopicAuthorizationFailed.code();
                            out.push(error_topic(Some(&name), Uuid::nil(), code, operations(&name)));
                            continue;
                        }
                        if image.topic(&name).is_none() && allow_create && ctx.config.auto_create_topics_enable {
                            // Creating needs CREATE on the cluster or on the topic.
                            let may_create = ctx.authorize_cluster(Operation::Create)
                                || ctx.authorize(Operation::Create, ResourceType::Topic, &name);
                            let created = match may_create {
                                true => auto_create(ctx, &name),
                                false => Err(ResponseError::TopicAuthorizationFailed.code()),
                            };
                            match created {
                                Ok(()) => image = ctx.controller.image(),
                                Err(code) => {
                                    out.push(error_topic(Some(&name), Uuid::nil(), code, operations(&name)));
                                    continue;
                                }
                            }
                        }
                        match image.topic(&name) {
                            Some(t) => out.push(describe(ctx, &image, t, operations(&name), version)),
                            None => out.push(error_topic(
                                Some(&name),
                                Uuid::nil(),
                                ResponseError::UnknownTopicOrPartition.code(),
                                operations(&name),
                            )),
                        }
                    }
                    None => match image.topic_by_id(&wanted.topic_id) {
                        // Kafka: ids are not secret, so an unauthorized one is named as such.
                        Some(t) if !may_describe(&t.name) => out.push(error_topic(
                            None,
                            wanted.topic_id,
                            ResponseError::TopicAuthorizationFailed.code(),
                            operations(&t.name),
                        )),
                        Some(t) => out.push(describe(ctx, &image, t, operations(&t.name), version)),
                        None => out.push(error_topic(
                            None,
                            wanted.topic_id,
                            ResponseError::UnknownTopicId.code(),
                            OPERATIONS_NOT_REQUESTED,
                        )),
                    },
                }
            }
            out
        }
    };
    // The brokers clients may use: registered and not fenced (a single node: itself), each
    // at its endpoint on the listener this request came in on; one without it is left out.
    let brokers = image
        .live_brokers()
        .filter_map(|b| {
            let endpoint = b.endpoint(&ctx.listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(endpoint.host.clone()))
                    .with_port(endpoint.port)
                    .with_rack(b.rack.clone().map(StrBytes::from_string)),
            )
        })
        .collect();
    // Clients send admin requests to this id, so it must be a broker they know: a
    // controller-only leader is not one, and any broker forwards to it (Kafka's KRaft brokers
    // answer a random alive broker here for the same reason).
    let active = ctx.controller.active_controller();
    let controller_id = if active == -1 || image.live_brokers().any(|b| b.id == active) {
        active
    } else {
        ctx.config.node_id
    };
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(StrBytes::from_string(image.cluster_id.clone())))
        .with_controller_id(BrokerId(controller_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(
            // v8-v10 answer it when asked (v11 moved it to DescribeCluster).
            if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
                ctx.cluster_operations()
            } else {
                OPERATIONS_NOT_REQUESTED
            },
        )
}

/// Auto-creation as Kafka does it on Metadata: default partitions and replication factor.
fn auto_create(ctx: &Ctx, name: &str) -> Result<(), i16> {
    match super::topics::create_and_open(
        ctx,
        name,
        ctx.config.num_partitions,
        ctx.config.default_replication_factor,
        None,
        Default::default(),
    ) {
        Ok(_) => Ok(()),
        // Another request created it meanwhile: fine. In a cluster the quorum's leader refuses
        // the second creation (`Error::Controller` with TOPIC_ALREADY_EXISTS), when two brokers
        // auto-create the same topic at once: also fine, not an error for the client.
        Err(e) if e.is_topic_already_exists() => Ok(()),
        Err(e) => {
            tracing::error!(topic = name, error = %e, "auto-creating a topic");
            Err(e.code())
        }
    }
}

/// Whether broker `id` has an endpoint on the listener of `ctx`.
fn has_listener(ctx: &Ctx, image: &MetadataImage, id: i32) -> bool {
    image
        .brokers
        .get(&id)
        .is_some_and(|b| b.endpoint(&ctx.listener).is_some())
}

fn describe(
    ctx: &Ctx,
    image: &MetadataImage,
    topic: &TopicInfo,
    operations: i32,
    version: i16,
) -> MetadataResponseTopic {
    let partitions = (0..topic.partitions)
        .map(|index| {
            let state = PartitionState::of(ctx, image, topic, index);
            let partition = MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_epoch(state.leader_epoch)
                .with_leader_id(BrokerId(state.leader))
                .with_replica_nodes(state.replicas)
                .with_isr_nodes(state.isr)
                .with_offline_replicas(state.offline_replicas);
            if state.leader < 0 {
                // Kafka's Metadata reports a partition without a live leader this way;
                // DescribeTopicPartitions lists it with no error.
                partition.with_error_code(ResponseError::LeaderNotAvailable.code())
            } else if !has_listener(ctx, image, state.leader) {
                // A leader this listener's clients cannot reach (Kafka's KRaftMetadataCache:
                // LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before).
                let code = if version >= 6 {
                    ResponseError::ListenerNotFound
                } else {
                    ResponseError::LeaderNotAvailable
                };
                partition.with_error_code(code.code()).with_leader_id(BrokerId(-1))
            } else {
                partition
            }
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&topic.name)))
        .with_topic_id(topic.id)
        .with_is_internal(is_internal(&topic.name))
        .with_partitions(partitions)
        .with_topic_authorized_operations(operations)
}

/// One partition as Metadata and DescribeTopicPartitions report it (Kafka's
/// `KRaftMetadataCache` builds both answers from the same partition registration).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PartitionState {
    /// The leader, or -1 when it is offline.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<BrokerId>,
    /// The replicas in sync with the leader, as the controller last committed them.
    pub isr: Vec<BrokerId>,
    pub offline_replicas: Vec<BrokerId>,
    /// KIP-966's eligible leader replicas and last known ELR (DescribeTopicPartitions only).
    pub elr: Vec<BrokerId>,
    pub last_known_elr: Vec<BrokerId>,
}

impl PartitionState {
    pub(crate) fn of(ctx: &Ctx, image: &MetadataImage, topic: &TopicInfo, index: i32) -> PartitionState {
        let replicas = topic.replicas(index);
        // A replica is offline when its broker is fenced (or gone), or, here, when its
        // storage failed, or while this node's metadata log waits for space on a full disk:
        // its image may be behind the quorum's, so it does not claim a leadership from it.
        let stalled = ctx.controller.quorum().is_some_and(|q| q.stalled());
        let offline = |r: i32| {
            !image.is_live(r) || (r == ctx.config.node_id && (stalled || ctx.replicas.is_offline(&topic.name, index)))
        };
        let registration = topic.registration(index);
        let leader = registration.leader;
        let leader_online = leader >= 0 && !offline(leader);
        PartitionState {
            leader: if leader_online { leader } else { -1 },
            leader_epoch: registration.leader_epoch,
            replicas: replicas.iter().map(|&r| BrokerId(r)).collect(),
            // The registration's ISR, as the controller committed it (Kafka reports it even
            // when the leader is offline).
            isr: registration.isr.iter().map(|&r| BrokerId(r)).collect(),
            // Also those on a log directory that failed (KIP-858), which may still lead when
            // no other replica is in sync: that leader serves reads.
            offline_replicas: replicas
                .iter()
                .filter(|&&r| offline(r) || image.is_log_dir_offline(r))
                .map(|&r| BrokerId(r))
                .collect(),
            elr: registration.elr.iter().map(|&r| BrokerId(r)).collect(),
            last_known_elr: registration.last_known_elr.iter().map(|&r| BrokerId(r)).collect(),
        }
    }
}

/// Whether clients are told `name` is an internal topic.
pub(crate) fn is_internal(name: &str) -> bool {
    name.starts_with("__")
}

fn error_topic(name: Option<&str>, id: Uuid, code: i16, operations: i32) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code)
        .with_name(name.map(topic_name))
        .with_topic_id(id)
        .with_topic_authorized_operations(operations)
}

/// Splits an advertised `HOST:PORT` (validated at start-up).
pub fn split_host_port(addr: &str) -> (String, i32) {
    match addr.rsplit_once(':') {
        Some((host, port)) => (
            host.trim_start_matches('[').trim_end_matches(']').to_string(),
            port.parse().unwrap_or(9092),
        ),
        None => (addr.to_string(), 9092),
    }
}
