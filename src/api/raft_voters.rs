//! AddRaftVoter (key 80) and RemoveRaftVoter (key 81), KIP-853: the voters of a dynamic
//! metadata quorum (`controller.quorum.bootstrap.servers`), as `kafka-metadata-quorum.sh
//! add-controller` / `remove-controller` and the AdminClient's `addRaftVoter` /
//! `removeRaftVoter` send them. v0 only, as Kafka 4.x. Whichever node receives one has the
//! quorum's leader do it (Kafka's brokers forward them to the active controller).
//!
//! - AddRaftVoter: the node must already follow the metadata log as an observer (a controller
//!   started with the bootstrap servers asks the leader for that by itself) and have caught up
//!   with what the leader committed. Errors: DUPLICATE_VOTER (a voter already),
//!   REQUEST_TIMED_OUT (not following, or not caught up, within the request's timeout, or
//!   another change of voters in progress), INVALID_REQUEST (a broker-only node, or no
//!   listener named), INCONSISTENT_CLUSTER_ID.
//! - RemoveRaftVoter: VOTER_NOT_FOUND for a node that is not a voter, INVALID_REQUEST for the
//!   last voter. A removed voter that keeps running follows the log as an observer.
//! - A static quorum (`controller.quorum.voters`) or a single node: UNSUPPORTED_VERSION, as
//!   Kafka answers when kraft.version is 0.
//!
//! The voter's directory id and listeners are not checked against the node: Sluice tells
//! voters apart by node id, and dials each at the controller listener it joined with.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, ApiKey, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::acl::Operation;

pub const ADD_VERSIONS: Versions = Versions::new(ApiKey::AddRaftVoter, 0, 0);
pub const REMOVE_VERSIONS: Versions = Versions::new(ApiKey::RemoveRaftVoter, 0, 0);

pub async fn add_raft_voter(ctx: &Ctx, req: AddRaftVoterRequest, _version: i16) -> AddRaftVoterResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        return AddRaftVoterResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed.".to_string()));
    }
    if req.listeners.is_empty() {
        return AddRaftVoterResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(message("the new voter names no listener".to_string()));
    }
    let (code, text) = change(ctx, req.cluster_id.as_ref(), req.voter_id, true).await;
    AddRaftVoterResponse::default()
        .with_error_code(code)
        .with_error_message(text)
}

pub async fn remove_raft_voter(ctx: &Ctx, req: RemoveRaftVoterRequest, _version: i16) -> RemoveRaftVoterResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        return RemoveRaftVoterResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed.".to_string()));
    }
    let (code, text) = change(ctx, req.cluster_id.as_ref(), req.voter_id, false).await;
    RemoveRaftVoterResponse::default()
        .with_error_code(code)
        .with_error_message(text)
}

/// Adds (`add`) or removes voter `voter`: the error code and message of the answer.
async fn change(ctx: &Ctx, cluster_id: Option<&StrBytes>, voter: i32, add: bool) -> (i16, Option<StrBytes>) {
    let refuse = |code: ResponseError, text: String| (code.code(), message(text));
    let quorum = match ctx.controller.quorum() {
        Some(quorum) if quorum.is_dynamic() => quorum,
        _ => {
            return refuse(
                ResponseError::UnsupportedVersion,
                "the metadata quorum's voters are static (controller.quorum.voters, or a single node); \
                 a dynamic quorum uses controller.quorum.bootstrap.servers"
                    .into(),
            );
        }
    };
    let image = ctx.controller.image();
    if let Some(asked) = cluster_id
        && asked.as_str() != image.cluster_id
    {
        return refuse(
            ResponseError::InconsistentClusterId,
            format!("cluster id {asked} is not this cluster's ({})", image.cluster_id),
        );
    }
    let Ok(node) = u64::try_from(voter) else {
        return refuse(ResponseError::InvalidRequest, format!("voter id {voter} is negative"));
    };
    match quorum.change_voters(node, add).await {
        Ok(()) => (0, None),
        Err(e) => (e.code(), message(e.to_string())),
    }
}
