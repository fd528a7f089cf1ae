//! ElectLeaders (key 43): leader elections an admin asks for (`kafka-leader-election.sh`).
//! v0 preferred elections only · v1 election type (0 preferred, 1 unclean) and a top-level
//! error code · v2 flexible. A null partition list means every partition, and the answer then
//! leaves out those that needed no election (Kafka's `ReplicationControlManager`). The
//! elections are committed through the controller in one metadata record, whichever broker
//! receives the request.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::acl::Operation;

pub const VERSIONS: Versions = Versions::new(ApiKey::ElectLeaders, 0, 2);

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

pub async fn handle(ctx: &Ctx, req: ElectLeadersRequest, version: i16) -> ElectLeadersResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        // Kafka: ALTER on the cluster; every partition named gets the code too.
        let code = ResponseError::ClusterAuthorizationFailed.code();
        let results = req
            .topic_partitions
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| PartitionResult::default().with_partition_id(*p).with_error_code(code))
                    .collect();
                ReplicaElectionResult::default()
                    .with_topic(t.topic)
                    .with_partition_result(partitions)
            })
            .collect();
        return ElectLeadersResponse::default()
            .with_error_code(code)
            .with_replica_election_results(results);
    }
    let election_type = if version == 0 { PREFERRED } else { req.election_type };
    if election_type != PREFERRED && election_type != UNCLEAN {
        return ElectLeadersResponse::default().with_error_code(ResponseError::InvalidRequest.code());
    }
    let partitions = req.topic_partitions.map(|topics| {
        topics
            .into_iter()
            .flat_map(|t| {
                let name = t.topic.0.to_string();
                t.partitions.into_iter().map(move |p| (name.clone(), p))
            })
            .collect()
    });
    let outcomes = ctx
        .controller
        .elect_leaders(election_type == PREFERRED, partitions)
        .await;
    let mut results: Vec<ReplicaElectionResult> = Vec::new();
    for ((topic, partition), outcome) in outcomes {
        let result = match outcome {
            Ok(()) => PartitionResult::default().with_partition_id(partition),
            Err(e) => PartitionResult::default()
                .with_partition_id(partition)
                .with_error_code(e.code())
                .with_error_message(message(e.to_string())),
        };
        match results.iter_mut().find(|r| r.topic.0.as_str() == topic) {
            Some(r) => r.partition_result.push(result),
            None => results.push(
                ReplicaElectionResult::default()
                    .with_topic(TopicName(StrBytes::from_string(topic)))
                    .with_partition_result(vec![result]),
            ),
        }
    }
    ElectLeadersResponse::default().with_replica_election_results(results)
}
