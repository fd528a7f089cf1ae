//! DeleteRecords (key 21): move partitions' log start offsets forward.
//! v0 baseline · v1 same · v2 flexible. Offset -1 means the high watermark (Kafka's
//! `DeleteRecordsRequest.HIGH_WATERMARK`); an offset above it is OFFSET_OUT_OF_RANGE. The new
//! log start offset is checkpointed before the answer, so it survives a restart.

use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::*;

use super::{Ctx, Versions};
use crate::acl::{Operation, ResourceType};

pub const VERSIONS: Versions = Versions::new(ApiKey::DeleteRecords, 0, 2);

pub async fn handle(ctx: &Ctx, req: DeleteRecordsRequest, _version: i16) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        let authorized = ctx.authorize(Operation::Delete, ResourceType::Topic, &t.name.0);
        for p in &t.partitions {
            let out = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            partitions.push(match ctx.replicas.get(&t.name.0, p.partition_index) {
                _ if !authorized => out
                    .with_low_watermark(-1)
                    .with_error_code(crate::error::Error::TopicAuthorizationFailed.code()),
                None => out.with_low_watermark(-1).with_error_code(super::absent_partition(
                    ctx,
                    &t.name.0,
                    p.partition_index,
                )),
                Some(partition) => match partition.delete_records(p.offset).await {
                    Ok(low) => out.with_low_watermark(low),
                    Err(e) => out.with_low_watermark(-1).with_error_code(e.code()),
                },
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
