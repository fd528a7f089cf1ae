//! ReadShareGroupState (key 84) and WriteShareGroupState (key 85), v0: between Sluice brokers
//! only, and not advertised. A share-partition's leader reads and stores the partition's state
//! with the group's coordinator (`crate::share`), which keeps it in `__consumer_offsets` beside
//! the group. Kafka keeps it in `__share_group_state` behind a share coordinator of its own
//! (FindCoordinator key type 2, not served); only the message formats are Kafka's. Needs
//! CLUSTER_ACTION on the cluster. A start offset of -1 is a partition the group never read
//! (or that was reset to start again); a write at a state epoch other than the stored one gets
//! FENCED_STATE_EPOCH (the partition was reset since the leader loaded it).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::read_share_group_state_response::{
    PartitionResult as ReadResult, ReadStateResult, StateBatch,
};
use kafka_protocol::messages::write_share_group_state_response::{PartitionResult as WriteResult, WriteStateResult};
use kafka_protocol::messages::*;

use super::coordinator_routing::{KeyKind, NOT_COORDINATOR, coordinator_here};
use super::{Ctx, Versions};
use crate::acl::Operation;
use crate::coordinator::StoredShareState;
use crate::share::partition::{Persisted, PersistedBatch};

pub const READ_VERSIONS: Versions = Versions::new(ApiKey::ReadShareGroupState, 0, 0);
pub const WRITE_VERSIONS: Versions = Versions::new(ApiKey::WriteShareGroupState, 0, 0);

/// The error every partition gets when the request cannot be served here.
fn refusal(ctx: &Ctx, group: &str) -> Option<i16> {
    if !ctx.authorize_cluster(Operation::ClusterAction) {
        return Some(ResponseError::ClusterAuthorizationFailed.code());
    }
    (!coordinator_here(ctx, KeyKind::Group, group)).then_some(NOT_COORDINATOR)
}

pub async fn read(ctx: &Ctx, req: ReadShareGroupStateRequest, _version: i16) -> ReadShareGroupStateResponse {
    let group = req.group_id.as_str();
    let refused = refusal(ctx, group);
    let results = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let answer = ReadResult::default().with_partition(p.partition);
                    let state = match refused {
                        Some(code) => Err(code),
                        None => ctx.coordinator.share_state(group, (t.topic_id, p.partition)),
                    };
                    match state {
                        Err(code) => answer.with_error_code(code),
                        Ok(StoredShareState { epoch, state: None }) => {
                            answer.with_state_epoch(epoch).with_start_offset(-1)
                        }
                        Ok(StoredShareState {
                            epoch,
                            state: Some(state),
                        }) => answer
                            .with_state_epoch(epoch)
                            .with_start_offset(state.start_offset)
                            .with_state_batches(
                                state
                                    .batches
                                    .iter()
                                    .map(|b| {
                                        StateBatch::default()
                                            .with_first_offset(b.first_offset)
                                            .with_last_offset(b.last_offset)
                                            .with_delivery_state(b.state)
                                            .with_delivery_count(b.delivery_count)
                                    })
                                    .collect(),
                            ),
                    }
                })
                .collect();
            ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    ReadShareGroupStateResponse::default().with_results(results)
}

pub async fn write(ctx: &Ctx, req: WriteShareGroupStateRequest, _version: i16) -> WriteShareGroupStateResponse {
    let group = req.group_id.as_str();
    let refused = refusal(ctx, group);
    let mut results = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let code = match refused {
                Some(code) => code,
                None if p.start_offset < 0 => ResponseError::InvalidRequest.code(),
                None => {
                    let state = Persisted {
                        start_offset: p.start_offset,
                        batches: p
                            .state_batches
                            .iter()
                            .map(|b| PersistedBatch {
                                first_offset: b.first_offset,
                                last_offset: b.last_offset,
                                state: b.delivery_state,
                                delivery_count: b.delivery_count,
                            })
                            .collect(),
                    };
                    match ctx
                        .coordinator
                        .write_share_state(group, (t.topic_id, p.partition), p.state_epoch, state)
                        .await
                    {
                        Ok(()) => 0,
                        Err(code) => code,
                    }
                }
            };
            partitions.push(WriteResult::default().with_partition(p.partition).with_error_code(code));
        }
        results.push(
            WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    WriteShareGroupStateResponse::default().with_results(results)
}
