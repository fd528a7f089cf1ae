//! Cluster and storage descriptions.
//! DescribeCluster (key 60): v0 baseline: every live (registered, unfenced) broker of the
//! metadata image with its rack, and the active controller (a single node: itself; in a
//! cluster the quorum's leader, -1 while none is known) · v1 endpoint type (brokers; a
//! controller endpoint request gets UNSUPPORTED_ENDPOINT_TYPE: there is no separate
//! controller listener) · v2 `include_fenced_brokers` adds the fenced ones, `is_fenced` set.
//! DescribeLogDirs (key 35): v1 baseline here · v2 flexible · v3 top-level error code · v4
//! total and usable bytes of the directory · v5 whether it is cordoned (KIP-1066,
//! `cordoned.log.dirs`).
//! UnregisterBroker (key 64): v0. Removes a broker's registration through the metadata quorum
//! (ALTER on the cluster); BROKER_ID_NOT_REGISTERED for an id that is not registered.
//! AlterReplicaLogDirs (key 34): v1 baseline here (v0 removed in Kafka 4) · v2 flexible. A
//! broker has one log directory (`log.dirs`), so a replica can only be "moved" to where it
//! already is: NONE, with nothing to copy; any other path is LOG_DIR_NOT_FOUND, as Kafka
//! answers for a directory not in its configuration. A cordoned directory takes no replica:
//! INVALID_REPLICA_ASSIGNMENT (Kafka 4.3's "Log directory ... is cordoned").

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message, topic_name};
use crate::acl::Operation;

pub const DESCRIBE_CLUSTER_VERSIONS: Versions = Versions::new(ApiKey::DescribeCluster, 0, 2);
pub const DESCRIBE_LOG_DIRS_VERSIONS: Versions = Versions::new(ApiKey::DescribeLogDirs, 1, 5);
pub const ALTER_REPLICA_LOG_DIRS_VERSIONS: Versions = Versions::new(ApiKey::AlterReplicaLogDirs, 1, 2);
pub const UNREGISTER_BROKER_VERSIONS: Versions = Versions::new(ApiKey::UnregisterBroker, 0, 0);

const ENDPOINT_BROKERS: i8 = 1;

pub async fn describe_cluster(ctx: &Ctx, req: DescribeClusterRequest, version: i16) -> DescribeClusterResponse {
    let image = ctx.controller.image();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(image.cluster_id.clone()))
        .with_controller_id(BrokerId(ctx.controller.active_controller()));
    if version >= 1 && req.endpoint_type != ENDPOINT_BROKERS {
        return resp
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(message("only broker endpoints are served"));
    }
    // The request field exists from v2 only (false before).
    let include_fenced = version >= 2 && req.include_fenced_brokers;
    resp.brokers = image
        .brokers
        .values()
        .filter(|b| include_fenced || !b.fenced)
        .filter_map(|b| {
            // At its endpoint on this request's listener; one without it is left out.
            let endpoint = b.endpoint(&ctx.listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(endpoint.host.clone()))
                    .with_port(endpoint.port)
                    .with_rack(b.rack.clone().map(StrBytes::from_string))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    if req.include_cluster_authorized_operations {
        resp.cluster_authorized_operations = ctx.cluster_operations();
    }
    resp
}

/// (total, usable) bytes of the file system holding `path`, or -1s when unknown.
fn disk_space(path: &std::path::Path) -> (i64, i64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return (-1, -1);
    };
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct we own from a NUL-terminated path.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return (-1, -1);
    }
    let block = stat.f_frsize as i64;
    (stat.f_blocks as i64 * block, stat.f_bavail as i64 * block)
}

pub async fn describe_log_dirs(ctx: &Ctx, req: DescribeLogDirsRequest, version: i16) -> DescribeLogDirsResponse {
    if !ctx.authorize_cluster(Operation::Describe) {
        // Kafka: DESCRIBE on the cluster, else no directory (v3+ with the error code).
        return DescribeLogDirsResponse::default().with_error_code(match version >= 3 {
            true => ResponseError::ClusterAuthorizationFailed.code(),
            false => 0,
        });
    }
    if ctx.replicas.log_dir.is_offline() {
        // Kafka answers an offline log directory with KAFKA_STORAGE_ERROR and no replicas
        // (here: until a probe write succeeds; its replicas may still serve reads).
        return DescribeLogDirsResponse::default().with_results(vec![
            DescribeLogDirsResult::default()
                .with_error_code(ResponseError::KafkaStorageError.code())
                .with_log_dir(StrBytes::from_string(log_dir(ctx).display().to_string())),
        ]);
    }
    let image = ctx.controller.image();
    let wanted: Vec<(String, Vec<i32>)> = match req.topics {
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect(),
        None => image
            .topics
            .values()
            .map(|t| (t.name.clone(), (0..t.partitions).collect()))
            .collect(),
    };
    let topics = wanted
        .into_iter()
        .filter_map(|(name, partitions)| {
            // Every replica this node hosts, leader or follower; the others are left out, as
            // Kafka does.
            let found: Vec<DescribeLogDirsPartition> = partitions
                .into_iter()
                .filter_map(|p| {
                    let partition = ctx.replicas.hosted(&name, p)?;
                    let size = partition.size_bytes().ok()?;
                    Some(
                        DescribeLogDirsPartition::default()
                            .with_partition_index(p)
                            .with_partition_size(size as i64),
                    )
                })
                .collect();
            (!found.is_empty()).then(|| {
                DescribeLogDirsTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(found)
            })
        })
        .collect();
    let dir = log_dir(ctx);
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_topics(topics);
    if version >= 4 {
        let (total, usable) = disk_space(&dir);
        result.total_bytes = total;
        result.usable_bytes = usable;
    }
    if version >= 5 {
        result.is_cordoned = image.is_cordoned(ctx.config.node_id);
    }
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// The log directory as DescribeLogDirs names it: the data directory's canonical path.
fn log_dir(ctx: &Ctx) -> std::path::PathBuf {
    std::fs::canonicalize(&ctx.config.data_dir).unwrap_or_else(|_| ctx.config.data_dir.clone())
}

/// Whether `path` names this broker's log directory: as DescribeLogDirs reports it, or as
/// configured, made absolute (Kafka compares `File.getAbsolutePath`). Not resolved on disk:
/// another spelling of the same directory is not the configured one, as in Kafka.
fn is_log_dir(ctx: &Ctx, path: &str) -> bool {
    let configured = std::path::absolute(&ctx.config.data_dir).unwrap_or_else(|_| ctx.config.data_dir.clone());
    std::path::Path::new(path) == log_dir(ctx) || std::path::Path::new(path) == configured
}

/// Kafka moves a replica by writing a "future" log beside it, `<topic>-<partition>.<32 hex
/// digits>-future`, and refuses a topic whose such name would pass 255 bytes (KAFKA-4893).
fn future_dir_name_too_long(topic: &str, partition: i32) -> bool {
    format!("{topic}-{partition}").len() + 1 + 32 + "-future".len() > 255
}

pub async fn alter_replica_log_dirs(
    ctx: &Ctx,
    req: AlterReplicaLogDirsRequest,
    _version: i16,
) -> AlterReplicaLogDirsResponse {
    // Kafka: ALTER on the cluster, else every partition named gets the error.
    let authorized = ctx.authorize_cluster(Operation::Alter);
    // Kafka reads the request into a map by partition: one named under two directories is
    // answered once, for the last.
    let mut wanted: Vec<((String, i32), String)> = Vec::new();
    for dir in req.dirs {
        for topic in dir.topics {
            for partition in topic.partitions {
                let key = (topic.name.0.to_string(), partition);
                wanted.retain(|(k, _)| *k != key);
                wanted.push((key, dir.path.to_string()));
            }
        }
    }
    let cordoned = ctx.controller.image().is_cordoned(ctx.config.node_id);
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for ((topic, partition), path) in wanted {
        let code = if !authorized {
            ResponseError::ClusterAuthorizationFailed.code()
        } else if future_dir_name_too_long(&topic, partition) {
            ResponseError::InvalidTopicException.code()
        } else if !is_log_dir(ctx, &path) {
            ResponseError::LogDirNotFound.code()
        } else if cordoned {
            ResponseError::InvalidReplicaAssignment.code()
        } else if ctx.replicas.hosted(&topic, partition).is_some() {
            // Already in the one directory there is: nothing to move.
            0
        } else {
            // Kafka keeps REPLICA_NOT_AVAILABLE here for compatibility where other APIs answer
            // NOT_LEADER_OR_FOLLOWER (a partition on other brokers).
            match super::absent_partition(ctx, &topic, partition) {
                code if code == ResponseError::NotLeaderOrFollower.code() => ResponseError::ReplicaNotAvailable.code(),
                code => code,
            }
        };
        let result = AlterReplicaLogDirPartitionResult::default()
            .with_partition_index(partition)
            .with_error_code(code);
        match results.iter_mut().find(|t| t.topic_name.0.as_str() == topic) {
            Some(t) => t.partitions.push(result),
            None => results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(topic_name(&topic))
                    .with_partitions(vec![result]),
            ),
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}

pub async fn unregister_broker(ctx: &Ctx, req: UnregisterBrokerRequest, _version: i16) -> UnregisterBrokerResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        return UnregisterBrokerResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed."));
    }
    match ctx.controller.unregister_broker(req.broker_id.0).await {
        Ok(()) => UnregisterBrokerResponse::default(),
        Err(e) => UnregisterBrokerResponse::default()
            .with_error_code(e.code())
            .with_error_message(message(e)),
    }
}
