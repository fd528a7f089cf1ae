//! ListOffsets (key 2): the earliest, latest or at-timestamp offset of a partition.
//! v1 baseline (one offset per partition) · v2 isolation level · v4 leader epoch fencing and the
//! epoch in answers · v6 flexible · v7 max-timestamp spec (-3) · v8 earliest-local spec (-4: no
//! tiered storage, so the log start) · v9 latest-tiered spec (-5, KIP-1005: no tiered storage,
//! so no offset, -1, as Kafka answers for a topic without remote storage) · v10 timeout_ms
//! (nothing here waits for a remote tier) · v11 earliest-pending-upload spec (-6, KIP-1023, Kafka
//! 4.2: no tiered storage, so no offset, -1, as Kafka answers without remote storage).

use std::collections::BTreeMap;

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ApiKey, ListOffsetsRequest, ListOffsetsResponse};

use super::{Ctx, Versions};
use crate::acl::{Operation, ResourceType};
use crate::error::Error;
use crate::replica::Partition;

pub const VERSIONS: Versions = Versions::new(ApiKey::ListOffsets, 1, 11);

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;
const EARLIEST_PENDING_UPLOAD: i64 = -6;

/// A consumer's ListOffsets (replica id -1, read_uncommitted) for the same `timestamp` in
/// each partition of `topics`, as one broker sends another (the lag of
/// DescribeShareGroupOffsets) and the CLI sends a leader.
pub fn request_for(topics: &BTreeMap<String, Vec<i32>>, timestamp: i64) -> ListOffsetsRequest {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    ListOffsetsRequest::default().with_replica_id((-1).into()).with_topics(
        topics
            .iter()
            .map(|(t, ps)| {
                ListOffsetsTopic::default()
                    .with_name(super::topic_name(t))
                    .with_partitions(
                        ps.iter()
                            .map(|p| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(*p)
                                    .with_current_leader_epoch(-1)
                                    .with_timestamp(timestamp)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

pub async fn handle(ctx: &Ctx, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    // isolation_level 1 = READ_COMMITTED: "latest" is the last stable offset.
    let read_committed = req.isolation_level == 1;
    for topic in req.topics {
        let name = topic.name.0.to_string();
        let authorized = ctx.authorize(Operation::Describe, ResourceType::Topic, &name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let answer = match ctx.replicas.get(&name, p.partition_index) {
                _ if !authorized => Err(Error::TopicAuthorizationFailed),
                None if super::absent_partition(ctx, &name, p.partition_index)
                    == Error::NotLeader(String::new()).code() =>
                {
                    Err(Error::NotLeader(format!("{name}-{}", p.partition_index)))
                }
                None => Err(Error::UnknownTopicOrPartition(format!("{name}-{}", p.partition_index))),
                Some(partition) => lookup(&partition, p.timestamp, p.current_leader_epoch, read_committed, version),
            };
            let mut out = ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            match answer {
                Ok((offset, timestamp, epoch)) => {
                    out.offset = offset;
                    out.timestamp = timestamp;
                    if version >= 4 {
                        out.leader_epoch = epoch;
                    }
                }
                Err(e) => {
                    out.error_code = e.code();
                    out.offset = -1;
                    out.timestamp = -1;
                }
            }
            partitions.push(out);
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// (offset, timestamp, leader epoch) for one partition; offset -1 when none matches.
fn lookup(
    p: &Partition,
    spec: i64,
    current_leader_epoch: i32,
    read_committed: bool,
    version: i16,
) -> Result<(i64, i64, i32), Error> {
    if version >= 4 && current_leader_epoch >= 0 {
        if current_leader_epoch > p.leader_epoch() {
            return Err(Error::UnknownLeaderEpoch {
                asked: current_leader_epoch,
                current: p.leader_epoch(),
            });
        }
        if current_leader_epoch < p.leader_epoch() {
            return Err(Error::FencedLeaderEpoch {
                asked: current_leader_epoch,
                current: p.leader_epoch(),
            });
        }
    }
    let offsets = p.offsets()?;
    let epoch = p.leader_epoch();
    let none = (-1, -1, -1);
    Ok(match spec {
        // read_committed consumers see up to the last stable offset, others the high watermark.
        LATEST if read_committed => (offsets.last_stable_offset, -1, epoch),
        LATEST => (offsets.high_watermark, -1, epoch),
        EARLIEST | EARLIEST_LOCAL => (offsets.log_start_offset, -1, epoch),
        MAX_TIMESTAMP if version >= 7 => match p.max_timestamp()? {
            Some((timestamp, offset)) => (offset, timestamp, epoch),
            None => none,
        },
        LATEST_TIERED if version >= 9 => none,
        EARLIEST_PENDING_UPLOAD if version >= 11 => none,
        t if t >= 0 => match p.offset_for_timestamp(t)? {
            // Kafka's fetchOffsetByTimestamp: read_committed finds only offsets below the LSO.
            Some((offset, _)) if read_committed && offset >= offsets.last_stable_offset => none,
            Some((offset, timestamp)) => (offset, timestamp, epoch),
            None => none,
        },
        // A negative spec this version does not define: Kafka rejects it as a bad request.
        _ => {
            return Err(Error::InvalidRequest(format!(
                "timestamp spec {spec} is not defined in v{version}"
            )));
        }
    })
}
