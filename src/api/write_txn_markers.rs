//! WriteTxnMarkers (key 27): broker to broker. A transaction coordinator ending a transaction
//! sends each leader of the transaction's partitions one request carrying the commit or abort
//! marker for its partitions (Kafka's `TransactionMarkerChannelManager`,
//! `coordinator::transactions::MarkerWriter` here); the leader writes them as the coordinator
//! writes markers to the partitions it hosts itself (`MarkerWriter::write_hosted`: append, wait
//! until durable, then settle the transaction's offsets in a `__consumer_offsets` partition)
//! and answers per partition.
//! v1 baseline, flexible (v0 was removed in Kafka 4.0, KIP-896). v2 (Kafka 4.2, KIP-1228) carries
//! each marker's transaction version: under 2 a partition takes only a marker newer than the
//! producer's epoch there (`Log::append_marker`); the admin client's abortTransaction sends 0.
//! A partition not hosted here gets NOT_LEADER_OR_FOLLOWER when the metadata places it on
//! another broker, else UNKNOWN_TOPIC_OR_PARTITION, as Produce answers; Kafka answers
//! UNKNOWN_TOPIC_OR_PARTITION to both, and its coordinator retries either. A stale coordinator
//! gets TRANSACTION_COORDINATOR_FENCED from the partition's producer state.
//! Not checked: CLUSTER_ACTION authorization (no ACLs), so any client may write markers.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{ApiKey, WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use super::{Ctx, Versions, absent_partition};
use crate::acl::Operation;
use crate::coordinator::transactions::TxnMarker;
use crate::replica::Partition;

pub const VERSIONS: Versions = Versions::new(ApiKey::WriteTxnMarkers, 1, 2);

/// Every marker of the request is written concurrently (their fsyncs overlap); the answer
/// comes when all are durable or failed.
pub async fn handle(ctx: &Ctx, req: WriteTxnMarkersRequest, _version: i16) -> WriteTxnMarkersResponse {
    if !ctx.authorize_cluster(Operation::ClusterAction) {
        // Only brokers write markers (Kafka: CLUSTER_ACTION on the cluster).
        return WriteTxnMarkersResponse::default().with_markers(req.markers.iter().map(refused).collect());
    }
    let markers = futures::future::join_all(req.markers.iter().map(|m| write_one(ctx, m))).await;
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// A marker refused: each of its partitions CLUSTER_AUTHORIZATION_FAILED.
fn refused(m: &WritableTxnMarker) -> WritableTxnMarkerResult {
    let code = ResponseError::ClusterAuthorizationFailed.code();
    let topics = m
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|p| {
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(*p)
                        .with_error_code(code)
                })
                .collect();
            WritableTxnMarkerTopicResult::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    WritableTxnMarkerResult::default()
        .with_producer_id(m.producer_id)
        .with_topics(topics)
}

/// One marker on its partitions: those hosted here written, the others answered at once.
async fn write_one(ctx: &Ctx, m: &WritableTxnMarker) -> WritableTxnMarkerResult {
    let marker = TxnMarker {
        producer_id: m.producer_id.0,
        producer_epoch: m.producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        commit: m.transaction_result,
        // 0 below v2, as Kafka reads an absent field.
        transaction_version: m.transaction_version,
    };
    // Each partition's code by (topic, partition) position, filled in as it is known.
    let mut codes: Vec<Vec<i16>> = Vec::with_capacity(m.topics.len());
    let mut hosted: Vec<((usize, usize), Arc<Partition>)> = Vec::new();
    for (ti, topic) in m.topics.iter().enumerate() {
        let mut topic_codes = Vec::with_capacity(topic.partition_indexes.len());
        for (pi, index) in topic.partition_indexes.iter().enumerate() {
            match ctx.replicas.get(&topic.name.0, *index) {
                Some(partition) => {
                    hosted.push(((ti, pi), partition));
                    topic_codes.push(ResponseError::UnknownServerError.code()); // until written
                }
                None => topic_codes.push(absent_partition(ctx, &topic.name.0, *index)),
            }
        }
        codes.push(topic_codes);
    }
    let (positions, partitions): (Vec<(usize, usize)>, Vec<Arc<Partition>>) = hosted.into_iter().unzip();
    let written = ctx.transactions.markers().write_hosted(marker, partitions).await;
    for ((ti, pi), result) in positions.into_iter().zip(written) {
        if let Some(c) = codes.get_mut(ti).and_then(|t| t.get_mut(pi)) {
            *c = result.err().unwrap_or(0);
        }
    }
    let topics = m
        .topics
        .iter()
        .zip(codes)
        .map(|(topic, codes)| {
            let partitions = topic
                .partition_indexes
                .iter()
                .zip(codes)
                .map(|(index, code)| {
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(*index)
                        .with_error_code(code)
                })
                .collect();
            WritableTxnMarkerTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    WritableTxnMarkerResult::default()
        .with_producer_id(m.producer_id)
        .with_topics(topics)
}
