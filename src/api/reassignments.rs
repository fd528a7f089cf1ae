//! AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46): moving
//! replicas (KIP-455; `kafka-reassign-partitions.sh`, `Admin.alterPartitionReassignments`).
//!
//! AlterPartitionReassignments: v0 a target replica list per partition, or null to cancel
//! the reassignment under way · v1 `allow_replication_factor_change` (KIP-860; false
//! refuses a target of another size with INVALID_REPLICATION_FACTOR), echoed in the
//! response. Every change of one request is committed through the controller in one metadata
//! record, whichever broker receives it; the answer comes once it is committed, not once
//! the replicas have moved: the reassignment completes when the ISR change that brings its
//! last target replica in sync is committed (`cluster::MetadataImage::partition_change`).
//! A `timeout_ms` that runs out first (or is not positive) answers REQUEST_TIMED_OUT for
//! the request and every partition, as Kafka's controller does when a deadline passes; the
//! change may still be committed. A commit that fails answers its code (NOT_CONTROLLER when
//! the quorum has no leader) the same way.
//!
//! ListPartitionReassignments: v0 the reassignments under way (replicas, adding and removing
//! replicas), of every topic (null) or of the partitions named; unknown topics and
//! partitions, and partitions not being reassigned, are left out, as in Kafka.

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::{Ctx, Versions, message, topic_name};
use crate::acl::Operation;
use crate::error::Error;

pub const ALTER_VERSIONS: Versions = Versions::new(ApiKey::AlterPartitionReassignments, 0, 1);
pub const LIST_VERSIONS: Versions = Versions::new(ApiKey::ListPartitionReassignments, 0, 0);

pub async fn alter_partition_reassignments(
    ctx: &Ctx,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
) -> AlterPartitionReassignmentsResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed."));
    }
    // Before v1 the field is absent and a change of factor is allowed (Kafka's default).
    let allow_factor_change = version < 1 || req.allow_replication_factor_change;
    let wanted: Vec<(String, i32, Option<Vec<i32>>)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let target = p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
                (t.name.0.to_string(), p.partition_index, target)
            })
        })
        .collect();
    let outcomes = match u64::try_from(req.timeout_ms) {
        Ok(ms) if ms > 0 => {
            let asked = ctx
                .controller
                .alter_partition_reassignments(&wanted, allow_factor_change);
            match tokio::time::timeout(Duration::from_millis(ms), asked).await {
                Ok(outcomes) => outcomes,
                Err(_) => Err(timed_out(req.timeout_ms)),
            }
        }
        _ => Err(timed_out(req.timeout_ms)),
    };
    // Kafka answers null messages where nothing failed.
    let response = AlterPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_allow_replication_factor_change(allow_factor_change);
    let (outcomes, request_error) = match outcomes {
        Ok(outcomes) => (outcomes.into_iter().map(|o| o.err()).collect(), None),
        // Kafka's `getErrorResponse`: the request's error, repeated for every partition.
        Err(e) => {
            let (code, text) = (e.code(), e.to_string());
            let each: Vec<Option<Error>> = (0..wanted.len())
                .map(|_| {
                    Some(Error::Controller {
                        code,
                        message: text.clone(),
                    })
                })
                .collect();
            (each, Some(e))
        }
    };
    let mut outcomes = outcomes.into_iter();
    let responses = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let result = ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_message(None);
                    match outcomes.next().flatten() {
                        None => result,
                        Some(e) => result
                            .with_error_code(e.code())
                            .with_error_message(message(e.to_string())),
                    }
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    let response = response.with_responses(responses);
    match request_error {
        None => response,
        Some(e) => response
            .with_error_code(e.code())
            .with_error_message(message(e.to_string())),
    }
}

/// The request's deadline passed before its changes were committed.
fn timed_out(timeout_ms: i32) -> Error {
    Error::Controller {
        code: ResponseError::RequestTimedOut.code(),
        message: format!("the reassignments were not committed within timeout_ms {timeout_ms}"),
    }
}

pub async fn list_partition_reassignments(
    ctx: &Ctx,
    req: ListPartitionReassignmentsRequest,
    _version: i16,
) -> ListPartitionReassignmentsResponse {
    if !ctx.authorize_cluster(Operation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed."));
    }
    let asked: Option<Vec<(String, Vec<i32>)>> = req.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let brokers = |ids: &[i32]| ids.iter().map(|&r| BrokerId(r)).collect::<Vec<_>>();
    let topics = ctx
        .controller
        .list_partition_reassignments(asked.as_deref())
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|ongoing| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(ongoing.partition)
                        .with_replicas(brokers(&ongoing.replicas))
                        .with_adding_replicas(brokers(&ongoing.adding_replicas))
                        .with_removing_replicas(brokers(&ongoing.removing_replicas))
                })
                .collect();
            OngoingTopicReassignment::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    ListPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_topics(topics)
}
