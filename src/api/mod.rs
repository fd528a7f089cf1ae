//! Request dispatch: the one table of supported API versions (`SUPPORTED`, read by dispatch,
//! ApiVersions and the compat-matrix check), decoding, the handler call, response framing.
//!
//! A handler maps a decoded request to a response. Most answer at once; Produce with acks=all
//! answers when its records are durable: it appends in request order (so pipelined produces on
//! one connection keep their order) and hands back a future for the wait, which the connection's
//! writer awaits in turn, keeping responses in request order.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod acls;
pub mod api_versions;
pub mod client_quotas;
pub mod cluster;
pub mod configs;
pub mod consumer_groups;
pub mod coordinator_routing;
pub mod delegation_tokens;
pub mod delete_records;
pub mod describe_producers;
pub mod describe_quorum;
pub mod describe_topic_partitions;
pub mod elect_leaders;
pub mod features;
pub mod fetch;
pub mod groups;
mod leader_hints;
pub mod list_config_resources;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod offsets;
pub mod produce;
pub mod raft_voters;
pub mod reassignments;
pub mod request_memory;
pub mod sasl;
pub mod scram_credentials;
pub mod share_fetch;
pub mod share_groups;
pub mod share_offsets;
pub mod share_state;
pub mod spliced;
pub mod topics;
pub mod transactions;
pub mod write_txn_markers;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::acl::{Authorizer, CLUSTER_NAME, Operation, ResourceType};
use crate::cluster::Controller;
use crate::config::BrokerConfig;
use crate::coordinator::GroupCoordinator;
use crate::coordinator::transactions::TransactionCoordinator;
use crate::replica::ReplicaManager;

/// What handlers may use: one per listener, the same but for `listener`.
#[derive(Clone)]
pub struct Ctx {
    /// The listener the connection came in on: brokers are named to its clients at their
    /// endpoints on this listener (Kafka answers Metadata per listener).
    pub listener: Arc<str>,
    /// Who the connection authenticated as (`User:<name>`), `sasl::ANONYMOUS` until then and
    /// on listeners without SASL.
    pub principal: Arc<str>,
    /// The client's address as ACLs name hosts (`10.0.0.7`); set per connection when the
    /// authorizer is on, else empty.
    pub host: Arc<str>,
    pub authorizer: Arc<Authorizer>,
    pub config: Arc<BrokerConfig>,
    pub controller: Arc<Controller>,
    pub replicas: Arc<ReplicaManager>,
    pub coordinator: Arc<GroupCoordinator>,
    pub transactions: Arc<TransactionCoordinator>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The rates of clients with quotas.
    pub quotas: Arc<crate::quota::QuotaManager>,
    /// The connection's appends not yet run: each connection gets its own (`server`).
    pub appends: Arc<produce::PendingAppends>,
    /// Share groups' partition-leader side (KIP-932).
    pub share: Arc<crate::share::ShareManager>,
    /// The connection's id for its share sessions (`server`; 0 outside a connection).
    pub connection: u64,
}

impl Ctx {
    /// Whether the connection's principal may do `operation` on the resource (always, without
    /// an authorizer).
    pub fn authorize(&self, operation: Operation, resource_type: ResourceType, name: &str) -> bool {
        !self.authorizer.enabled()
            || self.authorizer.authorize(
                &self.controller.image().acls,
                &self.principal,
                &self.host,
                operation,
                resource_type,
                name,
            )
    }

    /// `authorize` on the cluster resource.
    pub fn authorize_cluster(&self, operation: Operation) -> bool {
        self.authorize(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether the principal may do `operation` on some resource of the type.
    pub fn authorize_any(&self, operation: Operation, resource_type: ResourceType) -> bool {
        !self.authorizer.enabled()
            || self.authorizer.authorize_any(
                &self.controller.image().acls,
                &self.principal,
                &self.host,
                operation,
                resource_type,
            )
    }

    /// The cluster's authorized operations as Metadata v8-10 and DescribeCluster report them:
    /// Kafka's AuthHelper answers 0 to a principal that may not DESCRIBE the cluster.
    pub fn cluster_operations(&self) -> i32 {
        match self.authorize_cluster(Operation::Describe) {
            true => self.operations(ResourceType::Cluster, CLUSTER_NAME),
            false => 0,
        }
    }

    /// The resource's authorized operations as Kafka's bit field.
    pub fn operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        self.authorizer.operations(
            &self.controller.image().acls,
            &self.principal,
            &self.host,
            resource_type,
            name,
        )
    }
}

/// The versions of one API that Sluice serves, all fields honoured.
#[derive(Debug, Clone, Copy)]
pub struct Versions {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

impl Versions {
    pub const fn new(key: ApiKey, min: i16, max: i16) -> Versions {
        Versions { key, min, max }
    }
}

/// Every API served, from each handler's `VERSIONS`.
pub const SUPPORTED: &[Versions] = &[
    produce::VERSIONS,
    fetch::VERSIONS,
    list_offsets::VERSIONS,
    metadata::VERSIONS,
    api_versions::VERSIONS,
    topics::CREATE_TOPICS_VERSIONS,
    topics::DELETE_TOPICS_VERSIONS,
    topics::CREATE_PARTITIONS_VERSIONS,
    groups::FIND_COORDINATOR_VERSIONS,
    groups::JOIN_GROUP_VERSIONS,
    groups::SYNC_GROUP_VERSIONS,
    groups::HEARTBEAT_VERSIONS,
    groups::LEAVE_GROUP_VERSIONS,
    groups::LIST_GROUPS_VERSIONS,
    groups::DESCRIBE_GROUPS_VERSIONS,
    groups::DELETE_GROUPS_VERSIONS,
    offsets::OFFSET_COMMIT_VERSIONS,
    offsets::OFFSET_FETCH_VERSIONS,
    offsets::OFFSET_DELETE_VERSIONS,
    consumer_groups::HEARTBEAT_VERSIONS,
    consumer_groups::DESCRIBE_VERSIONS,
    share_groups::HEARTBEAT_VERSIONS,
    share_groups::DESCRIBE_VERSIONS,
    share_fetch::FETCH_VERSIONS,
    share_fetch::ACKNOWLEDGE_VERSIONS,
    share_offsets::DESCRIBE_VERSIONS,
    share_offsets::ALTER_VERSIONS,
    share_offsets::DELETE_VERSIONS,
    configs::DESCRIBE_VERSIONS,
    configs::ALTER_VERSIONS,
    configs::INCREMENTAL_ALTER_VERSIONS,
    list_config_resources::VERSIONS,
    cluster::DESCRIBE_CLUSTER_VERSIONS,
    cluster::DESCRIBE_LOG_DIRS_VERSIONS,
    cluster::ALTER_REPLICA_LOG_DIRS_VERSIONS,
    features::VERSIONS,
    cluster::UNREGISTER_BROKER_VERSIONS,
    delete_records::VERSIONS,
    transactions::INIT_PRODUCER_ID_VERSIONS,
    transactions::ADD_PARTITIONS_VERSIONS,
    transactions::ADD_OFFSETS_VERSIONS,
    transactions::END_TXN_VERSIONS,
    transactions::TXN_OFFSET_COMMIT_VERSIONS,
    transactions::DESCRIBE_VERSIONS,
    transactions::LIST_VERSIONS,
    describe_producers::VERSIONS,
    delegation_tokens::CREATE_VERSIONS,
    delegation_tokens::RENEW_VERSIONS,
    delegation_tokens::EXPIRE_VERSIONS,
    delegation_tokens::DESCRIBE_VERSIONS,
    offset_for_leader_epoch::VERSIONS,
    elect_leaders::VERSIONS,
    reassignments::ALTER_VERSIONS,
    reassignments::LIST_VERSIONS,
    write_txn_markers::VERSIONS,
    describe_quorum::VERSIONS,
    raft_voters::ADD_VERSIONS,
    raft_voters::REMOVE_VERSIONS,
    describe_topic_partitions::VERSIONS,
    sasl::HANDSHAKE_VERSIONS,
    sasl::AUTHENTICATE_VERSIONS,
    scram_credentials::DESCRIBE_VERSIONS,
    scram_credentials::ALTER_VERSIONS,
    acls::DESCRIBE_VERSIONS,
    acls::CREATE_VERSIONS,
    acls::DELETE_VERSIONS,
    client_quotas::DESCRIBE_VERSIONS,
    client_quotas::ALTER_VERSIONS,
];

/// APIs served between Sluice brokers only, and not advertised: ApiVersions does not list
/// them and compat-matrix.md says why.
pub const INTERNAL: &[Versions] = &[share_state::READ_VERSIONS, share_state::WRITE_VERSIONS];

pub use request_memory::DECODED_BYTES_PER_BYTE;

pub fn supported(key: ApiKey) -> Option<Versions> {
    SUPPORTED.iter().copied().find(|v| v.key as i16 == key as i16)
}

/// What dispatch serves: `SUPPORTED` and `INTERNAL`.
pub fn served(key: ApiKey) -> Option<Versions> {
    supported(key).or_else(|| INTERNAL.iter().copied().find(|v| v.key as i16 == key as i16))
}

/// A response frame (length prefix included), or None when the request gets no response
/// (Produce with acks=0).
pub type Frame = Option<Bytes>;
pub type Pending = Pin<Box<dyn Future<Output = Frame> + Send>>;

/// A handler's answer: ready now, or later (in request order).
pub enum Reply {
    Now(Frame),
    Later(Pending),
    /// A Fetch response with records sent from the log files (`spliced`).
    Spliced(spliced::Spliced),
}

/// Why a request cannot be answered and its connection must close (Kafka closes the connection
/// on a request it cannot parse: `InvalidRequestException` in `RequestContext.parseRequest`).
#[derive(Debug)]
pub enum Reject {
    UnknownApiKey(i16),
    UnsupportedVersion {
        key: ApiKey,
        version: i16,
    },
    Malformed {
        key: ApiKey,
        version: i16,
        reason: String,
    },
    Encode(String),
    /// An acks=0 Produce had partitions refused (their codes): no response is expected, so
    /// Kafka closes the connection.
    RefusedWithoutAcks(String),
}

/// "topic-0: NOT_LEADER_OR_FOLLOWER, ..." for an acks=0 Produce's refused partitions.
fn refusals(resp: &kafka_protocol::messages::ProduceResponse) -> String {
    let mut out = Vec::new();
    for t in &resp.responses {
        for p in t.partition_responses.iter().filter(|p| p.error_code != 0) {
            let topic = match t.name.is_empty() {
                true => t.topic_id.to_string(),
                false => t.name.to_string(),
            };
            out.push(format!(
                "{topic}-{}: {}",
                p.index,
                crate::metrics::error_name(p.error_code)
            ));
        }
    }
    out.join(", ")
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reject::UnknownApiKey(k) => write!(f, "unknown API key {k}"),
            Reject::UnsupportedVersion { key, version } => write!(f, "unsupported version {version} of {key:?}"),
            Reject::Malformed { key, version, reason } => write!(f, "malformed {key:?} v{version}: {reason}"),
            Reject::Encode(reason) => write!(f, "cannot encode the response: {reason}"),
            Reject::RefusedWithoutAcks(partitions) => {
                write!(f, "an acks=0 produce request was refused ({partitions})")
            }
        }
    }
}

/// Encodes a response with its header into a length-prefixed frame.
pub fn frame<R: Encodable + HeaderVersion>(correlation_id: i32, version: i16, body: &R) -> Result<Bytes, Reject> {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header
        .encode(&mut buf, R::header_version(version))
        .and_then(|()| body.encode(&mut buf, version))
        .map_err(|e| Reject::Encode(e.to_string()))?;
    let len = i32::try_from(buf.len() - 4).map_err(|_| Reject::Encode("response over 2 GiB".into()))?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

fn decode<T: Decodable>(key: ApiKey, version: i16, body: &mut Bytes) -> Result<T, Reject> {
    let request = T::decode(body, version).map_err(|e| Reject::Malformed {
        key,
        version,
        reason: e.to_string(),
    })?;
    Ok(request)
}

/// Decodes a request body as `dispatch` does (the same `decode`, the same request type) and
/// drops it: the entry point of `protocol-tests/fuzz.rs`, which has no broker to hand it to.
pub fn decode_only(key: ApiKey, version: i16, body: &mut Bytes) -> Result<(), Reject> {
    use kafka_protocol::messages::*;
    macro_rules! as_ {
        ($request:ty) => {
            decode::<$request>(key, version, body).map(drop)
        };
    }
    match key {
        // An unknown version is answered without reading the body (KIP-511, see `dispatch`).
        ApiKey::ApiVersions if supported(key).is_none_or(|v| version < v.min || version > v.max) => Ok(()),
        ApiKey::ApiVersions => as_!(ApiVersionsRequest),
        ApiKey::Produce => as_!(ProduceRequest),
        ApiKey::Fetch => as_!(FetchRequest),
        ApiKey::ListOffsets => as_!(ListOffsetsRequest),
        ApiKey::Metadata => as_!(MetadataRequest),
        ApiKey::CreateTopics => as_!(CreateTopicsRequest),
        ApiKey::DeleteTopics => as_!(DeleteTopicsRequest),
        ApiKey::CreatePartitions => as_!(CreatePartitionsRequest),
        ApiKey::FindCoordinator => as_!(FindCoordinatorRequest),
        ApiKey::JoinGroup => as_!(JoinGroupRequest),
        ApiKey::SyncGroup => as_!(SyncGroupRequest),
        ApiKey::Heartbeat => as_!(HeartbeatRequest),
        ApiKey::LeaveGroup => as_!(LeaveGroupRequest),
        ApiKey::ListGroups => as_!(ListGroupsRequest),
        ApiKey::DescribeGroups => as_!(DescribeGroupsRequest),
        ApiKey::DeleteGroups => as_!(DeleteGroupsRequest),
        ApiKey::OffsetCommit => as_!(OffsetCommitRequest),
        ApiKey::OffsetFetch => as_!(OffsetFetchRequest),
        ApiKey::OffsetDelete => as_!(OffsetDeleteRequest),
        ApiKey::ConsumerGroupHeartbeat => as_!(ConsumerGroupHeartbeatRequest),
        ApiKey::ConsumerGroupDescribe => as_!(ConsumerGroupDescribeRequest),
        ApiKey::ShareGroupHeartbeat => as_!(ShareGroupHeartbeatRequest),
        ApiKey::ShareGroupDescribe => as_!(ShareGroupDescribeRequest),
        ApiKey::ShareFetch => as_!(ShareFetchRequest),
        ApiKey::ShareAcknowledge => as_!(ShareAcknowledgeRequest),
        ApiKey::ReadShareGroupState => as_!(ReadShareGroupStateRequest),
        ApiKey::DescribeShareGroupOffsets => as_!(DescribeShareGroupOffsetsRequest),
        ApiKey::AlterShareGroupOffsets => as_!(AlterShareGroupOffsetsRequest),
        ApiKey::DeleteShareGroupOffsets => as_!(DeleteShareGroupOffsetsRequest),
        ApiKey::WriteShareGroupState => as_!(WriteShareGroupStateRequest),
        ApiKey::DescribeConfigs => as_!(DescribeConfigsRequest),
        ApiKey::AlterConfigs => as_!(AlterConfigsRequest),
        ApiKey::IncrementalAlterConfigs => as_!(IncrementalAlterConfigsRequest),
        ApiKey::ListConfigResources => as_!(ListConfigResourcesRequest),
        ApiKey::DescribeCluster => as_!(DescribeClusterRequest),
        ApiKey::DescribeLogDirs => as_!(DescribeLogDirsRequest),
        ApiKey::AlterReplicaLogDirs => as_!(AlterReplicaLogDirsRequest),
        ApiKey::UpdateFeatures => as_!(UpdateFeaturesRequest),
        ApiKey::UnregisterBroker => as_!(UnregisterBrokerRequest),
        ApiKey::DeleteRecords => as_!(DeleteRecordsRequest),
        ApiKey::InitProducerId => as_!(InitProducerIdRequest),
        ApiKey::AddPartitionsToTxn => as_!(AddPartitionsToTxnRequest),
        ApiKey::AddOffsetsToTxn => as_!(AddOffsetsToTxnRequest),
        ApiKey::EndTxn => as_!(EndTxnRequest),
        ApiKey::TxnOffsetCommit => as_!(TxnOffsetCommitRequest),
        ApiKey::DescribeTransactions => as_!(DescribeTransactionsRequest),
        ApiKey::ListTransactions => as_!(ListTransactionsRequest),
        ApiKey::DescribeProducers => as_!(DescribeProducersRequest),
        ApiKey::CreateDelegationToken => as_!(CreateDelegationTokenRequest),
        ApiKey::RenewDelegationToken => as_!(RenewDelegationTokenRequest),
        ApiKey::ExpireDelegationToken => as_!(ExpireDelegationTokenRequest),
        ApiKey::DescribeDelegationToken => as_!(DescribeDelegationTokenRequest),
        ApiKey::OffsetForLeaderEpoch => as_!(OffsetForLeaderEpochRequest),
        ApiKey::ElectLeaders => as_!(ElectLeadersRequest),
        ApiKey::AlterPartitionReassignments => as_!(AlterPartitionReassignmentsRequest),
        ApiKey::ListPartitionReassignments => as_!(ListPartitionReassignmentsRequest),
        ApiKey::WriteTxnMarkers => as_!(WriteTxnMarkersRequest),
        ApiKey::DescribeQuorum => as_!(DescribeQuorumRequest),
        ApiKey::AddRaftVoter => as_!(AddRaftVoterRequest),
        ApiKey::RemoveRaftVoter => as_!(RemoveRaftVoterRequest),
        ApiKey::DescribeTopicPartitions => as_!(DescribeTopicPartitionsRequest),
        ApiKey::SaslHandshake => as_!(SaslHandshakeRequest),
        ApiKey::SaslAuthenticate => as_!(SaslAuthenticateRequest),
        ApiKey::DescribeUserScramCredentials => as_!(DescribeUserScramCredentialsRequest),
        ApiKey::AlterUserScramCredentials => as_!(AlterUserScramCredentialsRequest),
        ApiKey::DescribeAcls => as_!(DescribeAclsRequest),
        ApiKey::CreateAcls => as_!(CreateAclsRequest),
        ApiKey::DeleteAcls => as_!(DeleteAclsRequest),
        ApiKey::DescribeClientQuotas => as_!(DescribeClientQuotasRequest),
        ApiKey::AlterClientQuotas => as_!(AlterClientQuotasRequest),
        _ => Err(Reject::UnsupportedVersion { key, version }),
    }
}

/// Parses the request header: the key and version decide the header's own version.
pub fn parse_header(body: &mut Bytes) -> Result<(ApiKey, RequestHeader), Reject> {
    if body.len() < 4 {
        return Err(Reject::UnknownApiKey(-1));
    }
    let raw_key = i16::from_be_bytes([body[0], body[1]]);
    let version = i16::from_be_bytes([body[2], body[3]]);
    let key = ApiKey::try_from(raw_key).map_err(|_| Reject::UnknownApiKey(raw_key))?;
    // ApiVersions must be answered whatever its version (KIP-511), so its header is read as v1
    // (no tagged fields) when the version is unknown: the fallback response is v0.
    let header_version = match served(key) {
        Some(v) if version >= v.min && version <= v.max => key.request_header_version(version),
        _ if key == ApiKey::ApiVersions => 1,
        _ => return Err(Reject::UnsupportedVersion { key, version }),
    };
    let header = RequestHeader::decode(body, header_version).map_err(|e| Reject::Malformed {
        key,
        version,
        reason: e.to_string(),
    })?;
    Ok((key, header))
}

/// A request's answer, and how long its connection is not read again for the client's
/// quotas (`quota`; zero without one).
pub struct Dispatched {
    pub reply: Reply,
    pub throttle: std::time::Duration,
}

/// Who sent a request, for its quotas: the principal's user and the client id.
struct QuotaClient<'a> {
    quotas: &'a crate::quota::ClientQuotas,
    user: &'a str,
    client_id: &'a str,
}

impl QuotaClient<'_> {
    fn record(&self, ctx: &Ctx, kind: crate::quota::Kind, value: f64) -> std::time::Duration {
        ctx.quotas.record(self.quotas, kind, self.user, self.client_id, value)
    }
}

/// Decodes the body, runs the handler, frames the response; with client quotas set, measures
/// the request against them (`quota`): Produce's bytes, Fetch's bytes and the handler's time.
pub async fn dispatch(
    ctx: &Arc<Ctx>,
    key: ApiKey,
    header: RequestHeader,
    body: Bytes,
    peer: std::net::SocketAddr,
) -> Result<Dispatched, Reject> {
    let image = ctx.controller.image();
    if image.client_quotas.is_empty() {
        let reply = handle(ctx, key, header, body, peer, None).await?;
        return Ok(Dispatched {
            reply,
            throttle: std::time::Duration::ZERO,
        });
    }
    let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
    let client = QuotaClient {
        quotas: &image.client_quotas,
        user: crate::quota::user_of(&ctx.principal),
        client_id: &client_id,
    };
    let started = std::time::Instant::now();
    let mut throttle = std::time::Duration::ZERO;
    let reply = handle(ctx, key, header, body, peer, Some((&client, &mut throttle))).await?;
    // Kafka's request quota: handler time in percent of one thread (the part that runs now;
    // a Produce waiting for its replicas does not hold a thread). Brokers' own requests are
    // not measured.
    if !matches!(key, ApiKey::ApiVersions | ApiKey::WriteTxnMarkers) {
        let percent = started.elapsed().as_nanos() as f64 * 1e-7;
        throttle = throttle.max(client.record(ctx, crate::quota::Kind::Request, percent));
    }
    Ok(Dispatched { reply, throttle })
}

async fn handle(
    ctx: &Arc<Ctx>,
    key: ApiKey,
    header: RequestHeader,
    mut body: Bytes,
    peer: std::net::SocketAddr,
    quota: Option<(&QuotaClient<'_>, &mut std::time::Duration)>,
) -> Result<Reply, Reject> {
    let version = header.request_api_version;
    let cid = header.correlation_id;
    let client_id = header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default();
    macro_rules! now {
        ($module:ident) => {
            now!($module::handle)
        };
        ($module:ident :: $handler:ident) => {{
            let req = decode(key, version, &mut body)?;
            let resp = $module::$handler(ctx, req, version).await;
            ctx.metrics.response_errors(key, &resp);
            Ok(Reply::Now(Some(frame(cid, version, &resp)?)))
        }};
    }
    // Topic administration under the client's controller mutation quota, if one applies: the
    // response carries its throttle time, and the connection waits it out.
    macro_rules! mutating {
        ($handler:ident, $strict_since:expr) => {{
            let req = decode(key, version, &mut body)?;
            let sender = quota.as_ref().map(|(c, _)| (c.quotas, c.user, c.client_id));
            let mut mutations = topics::MutationQuota::new(sender, version, $strict_since);
            let mut resp = topics::$handler(ctx, req, version, &mut mutations).await;
            let wait = mutations.throttle();
            if !wait.is_zero() {
                resp.throttle_time_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
                if let Some((_, throttle)) = quota {
                    *throttle = (*throttle).max(wait);
                }
            }
            ctx.metrics.response_errors(key, &resp);
            Ok(Reply::Now(Some(frame(cid, version, &resp)?)))
        }};
    }
    match key {
        ApiKey::ApiVersions => {
            let supported = api_versions::VERSIONS;
            if version > supported.max || version < supported.min {
                // KIP-511: a v0 response carrying UNSUPPORTED_VERSION and our range, so the
                // client can pick a version it shares.
                let resp = api_versions::unsupported();
                ctx.metrics.response_errors(key, &resp);
                return Ok(Reply::Now(Some(frame(cid, 0, &resp)?)));
            }
            now!(api_versions)
        }
        ApiKey::Metadata => now!(metadata),
        ApiKey::ListOffsets => now!(list_offsets),
        ApiKey::Fetch => {
            let req = decode(key, version, &mut body)?;
            let req: kafka_protocol::messages::FetchRequest = req;
            let follower = req.replica_id.0 >= 0 || req.replica_state.replica_id.0 >= 0;
            let (mut resp, mut regions) = fetch::handle(ctx, req, version).await;
            // Kafka's fetch quota: the response's bytes; a throttled client gets an empty
            // response (its bytes not counted) and the throttle time. Followers are exempt.
            if let Some((client, throttle)) = quota.filter(|_| !follower) {
                let bytes = crate::metrics::response_record_bytes(&resp, &regions) as f64;
                let t = client.record(ctx, crate::quota::Kind::Fetch, bytes);
                if !t.is_zero() {
                    ctx.quotas.unrecord(
                        client.quotas,
                        crate::quota::Kind::Fetch,
                        client.user,
                        client.client_id,
                        bytes,
                    );
                    resp.responses.clear();
                    regions = spliced::Regions::default();
                    resp.throttle_time_ms = i32::try_from(t.as_millis()).unwrap_or(i32::MAX);
                    *throttle = t;
                }
            }
            ctx.metrics
                .fetch_response(&ctx.controller.image(), follower, &resp, &regions);
            ctx.metrics.response_errors(key, &resp);
            if regions.is_empty() {
                Ok(Reply::Now(Some(frame(cid, version, &resp)?)))
            } else {
                Ok(Reply::Spliced(spliced::frame(cid, version, &resp, regions)?))
            }
        }
        // Strict controller mutation quotas from the versions whose clients know
        // THROTTLING_QUOTA_EXCEEDED (KIP-599), as Kafka's `newQuotaFor(request, strictSince)`.
        ApiKey::CreateTopics => mutating!(create_topics, 6),
        ApiKey::DeleteTopics => mutating!(delete_topics, 5),
        ApiKey::CreatePartitions => mutating!(create_partitions, 3),
        ApiKey::FindCoordinator => now!(groups::find_coordinator),
        ApiKey::JoinGroup => {
            let req = decode(key, version, &mut body)?;
            let caller = groups::Caller { client_id, peer };
            let resp = groups::join_group(ctx, &caller, req, version).await;
            ctx.metrics.response_errors(key, &resp);
            Ok(Reply::Now(Some(frame(cid, version, &resp)?)))
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let req = decode(key, version, &mut body)?;
            let caller = groups::Caller { client_id, peer };
            let resp = consumer_groups::heartbeat(ctx, &caller, req, version).await;
            ctx.metrics.response_errors(key, &resp);
            Ok(Reply::Now(Some(frame(cid, version, &resp)?)))
        }
        ApiKey::ConsumerGroupDescribe => now!(consumer_groups::describe),
        ApiKey::ShareGroupHeartbeat => {
            let req = decode(key, version, &mut body)?;
            let caller = groups::Caller { client_id, peer };
            let resp = share_groups::heartbeat(ctx, &caller, req, version).await;
            ctx.metrics.response_errors(key, &resp);
            Ok(Reply::Now(Some(frame(cid, version, &resp)?)))
        }
        ApiKey::ShareGroupDescribe => now!(share_groups::describe),
        ApiKey::ShareFetch => now!(share_fetch::share_fetch),
        ApiKey::ShareAcknowledge => now!(share_fetch::share_acknowledge),
        ApiKey::ReadShareGroupState => now!(share_state::read),
        ApiKey::DescribeShareGroupOffsets => now!(share_offsets::describe),
        ApiKey::AlterShareGroupOffsets => now!(share_offsets::alter),
        ApiKey::DeleteShareGroupOffsets => now!(share_offsets::delete),
        ApiKey::WriteShareGroupState => now!(share_state::write),
        ApiKey::DescribeConfigs => now!(configs::describe_configs),
        ApiKey::AlterConfigs => now!(configs::alter_configs),
        ApiKey::IncrementalAlterConfigs => now!(configs::incremental_alter_configs),
        ApiKey::ListConfigResources => now!(list_config_resources),
        ApiKey::DescribeCluster => now!(cluster::describe_cluster),
        ApiKey::DescribeLogDirs => now!(cluster::describe_log_dirs),
        ApiKey::AlterReplicaLogDirs => now!(cluster::alter_replica_log_dirs),
        ApiKey::UpdateFeatures => now!(features::update_features),
        ApiKey::UnregisterBroker => now!(cluster::unregister_broker),
        ApiKey::DeleteRecords => now!(delete_records),
        ApiKey::InitProducerId => now!(transactions::init_producer_id),
        ApiKey::AddPartitionsToTxn => now!(transactions::add_partitions_to_txn),
        ApiKey::AddOffsetsToTxn => now!(transactions::add_offsets_to_txn),
        ApiKey::EndTxn => now!(transactions::end_txn),
        ApiKey::TxnOffsetCommit => now!(transactions::txn_offset_commit),
        ApiKey::DescribeTransactions => now!(transactions::describe_transactions),
        ApiKey::ListTransactions => now!(transactions::list_transactions),
        ApiKey::DescribeProducers => now!(describe_producers),
        ApiKey::CreateDelegationToken => now!(delegation_tokens::create),
        ApiKey::RenewDelegationToken => now!(delegation_tokens::renew),
        ApiKey::ExpireDelegationToken => now!(delegation_tokens::expire),
        ApiKey::DescribeDelegationToken => now!(delegation_tokens::describe),
        ApiKey::OffsetForLeaderEpoch => now!(offset_for_leader_epoch),
        ApiKey::ElectLeaders => now!(elect_leaders),
        ApiKey::AlterPartitionReassignments => now!(reassignments::alter_partition_reassignments),
        ApiKey::ListPartitionReassignments => now!(reassignments::list_partition_reassignments),
        ApiKey::WriteTxnMarkers => now!(write_txn_markers),
        ApiKey::DescribeQuorum => now!(describe_quorum),
        ApiKey::AddRaftVoter => now!(raft_voters::add_raft_voter),
        ApiKey::RemoveRaftVoter => now!(raft_voters::remove_raft_voter),
        ApiKey::DescribeTopicPartitions => now!(describe_topic_partitions),
        ApiKey::DescribeUserScramCredentials => now!(scram_credentials::describe),
        ApiKey::AlterUserScramCredentials => now!(scram_credentials::alter),
        ApiKey::DescribeAcls => now!(acls::describe_acls),
        ApiKey::CreateAcls => now!(acls::create_acls),
        ApiKey::DeleteAcls => now!(acls::delete_acls),
        ApiKey::DescribeClientQuotas => now!(client_quotas::describe),
        ApiKey::AlterClientQuotas => now!(client_quotas::alter),
        // A connection of a SASL listener has its SASL requests answered by `server`, which
        // holds its state; here, on a listener without SASL: ILLEGAL_SASL_STATE.
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
            let answer = sasl::handle(None, &ctx.controller.image(), key, &header, body)?;
            Ok(Reply::Now(answer.frame))
        }
        ApiKey::SyncGroup => now!(groups::sync_group),
        ApiKey::Heartbeat => now!(groups::heartbeat),
        ApiKey::LeaveGroup => now!(groups::leave_group),
        ApiKey::ListGroups => now!(groups::list_groups),
        ApiKey::DescribeGroups => now!(groups::describe_groups),
        ApiKey::DeleteGroups => now!(groups::delete_groups),
        ApiKey::OffsetCommit => now!(offsets::offset_commit),
        ApiKey::OffsetFetch => now!(offsets::offset_fetch),
        ApiKey::OffsetDelete => now!(offsets::offset_delete),
        ApiKey::Produce => {
            // Kafka's produce quota: the request's bytes, counted whatever the outcome.
            let throttle = match quota {
                Some((client, throttle)) => {
                    *throttle = client.record(ctx, crate::quota::Kind::Produce, body.len() as f64);
                    i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX)
                }
                None => 0,
            };
            let req = decode(key, version, &mut body)?;
            Ok(match produce::handle(ctx, req, version).await {
                produce::Outcome::NoResponse => Reply::Now(None),
                produce::Outcome::Close(resp) => {
                    ctx.metrics.response_errors(key, &resp);
                    return Err(Reject::RefusedWithoutAcks(refusals(&resp)));
                }
                produce::Outcome::Done(mut resp) => {
                    resp.throttle_time_ms = throttle;
                    ctx.metrics.response_errors(key, &resp);
                    Reply::Now(Some(frame(cid, version, &resp)?))
                }
                produce::Outcome::Wait(fut) => {
                    let metrics = ctx.metrics.clone();
                    Reply::Later(Box::pin(async move {
                        let mut resp = fut.await;
                        resp.throttle_time_ms = throttle;
                        metrics.response_errors(key, &resp);
                        match frame(cid, version, &resp) {
                            Ok(bytes) => Some(bytes),
                            Err(e) => {
                                tracing::error!(error = %e, "dropping a produce response");
                                None
                            }
                        }
                    }))
                }
            })
        }
        _ => Err(Reject::UnsupportedVersion { key, version }),
    }
}

/// Topic name as the wire wants it.
pub fn topic_name(name: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(StrBytes::from_string(name.to_string()))
}

/// `Some(message)` for a response's error_message field.
pub fn message(text: impl std::fmt::Display) -> Option<StrBytes> {
    Some(StrBytes::from_string(text.to_string()))
}

/// The error for a partition this broker holds no replica of: NOT_LEADER_OR_FOLLOWER when
/// the topic has that partition on another broker (the client refreshes its metadata and
/// goes to the leader), else UNKNOWN_TOPIC_OR_PARTITION.
pub(crate) fn absent_partition(ctx: &Ctx, topic: &str, partition: i32) -> i16 {
    let image = ctx.controller.image();
    match image.topic(topic) {
        Some(t) if !t.replicas(partition).is_empty() && t.leader(partition) != ctx.config.node_id => {
            kafka_protocol::error::ResponseError::NotLeaderOrFollower.code()
        }
        _ => kafka_protocol::error::ResponseError::UnknownTopicOrPartition.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::Message;

    fn codec_range(key: ApiKey) -> (i16, i16) {
        let r = match key {
            ApiKey::Produce => ProduceRequest::VERSIONS,
            ApiKey::Fetch => FetchRequest::VERSIONS,
            ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS,
            ApiKey::Metadata => MetadataRequest::VERSIONS,
            ApiKey::ApiVersions => ApiVersionsRequest::VERSIONS,
            ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS,
            ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS,
            ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS,
            ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS,
            ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
            ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
            ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
            ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
            ApiKey::ListGroups => ListGroupsRequest::VERSIONS,
            ApiKey::DescribeGroups => DescribeGroupsRequest::VERSIONS,
            ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS,
            ApiKey::OffsetCommit => OffsetCommitRequest::VERSIONS,
            ApiKey::OffsetFetch => OffsetFetchRequest::VERSIONS,
            ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS,
            ApiKey::ConsumerGroupHeartbeat => ConsumerGroupHeartbeatRequest::VERSIONS,
            ApiKey::ConsumerGroupDescribe => ConsumerGroupDescribeRequest::VERSIONS,
            ApiKey::ShareGroupHeartbeat => ShareGroupHeartbeatRequest::VERSIONS,
            ApiKey::ShareGroupDescribe => ShareGroupDescribeRequest::VERSIONS,
            ApiKey::ShareFetch => ShareFetchRequest::VERSIONS,
            ApiKey::ShareAcknowledge => ShareAcknowledgeRequest::VERSIONS,
            ApiKey::ReadShareGroupState => ReadShareGroupStateRequest::VERSIONS,
            ApiKey::DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest::VERSIONS,
            ApiKey::AlterShareGroupOffsets => AlterShareGroupOffsetsRequest::VERSIONS,
            ApiKey::DeleteShareGroupOffsets => DeleteShareGroupOffsetsRequest::VERSIONS,
            ApiKey::WriteShareGroupState => WriteShareGroupStateRequest::VERSIONS,
            ApiKey::DescribeConfigs => DescribeConfigsRequest::VERSIONS,
            ApiKey::AlterConfigs => AlterConfigsRequest::VERSIONS,
            ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS,
            ApiKey::ListConfigResources => ListConfigResourcesRequest::VERSIONS,
            ApiKey::DescribeCluster => DescribeClusterRequest::VERSIONS,
            ApiKey::DescribeLogDirs => DescribeLogDirsRequest::VERSIONS,
            ApiKey::AlterReplicaLogDirs => AlterReplicaLogDirsRequest::VERSIONS,
            ApiKey::UpdateFeatures => UpdateFeaturesRequest::VERSIONS,
            ApiKey::UnregisterBroker => UnregisterBrokerRequest::VERSIONS,
            ApiKey::DeleteRecords => DeleteRecordsRequest::VERSIONS,
            ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS,
            ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::VERSIONS,
            ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::VERSIONS,
            ApiKey::EndTxn => EndTxnRequest::VERSIONS,
            ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::VERSIONS,
            ApiKey::DescribeTransactions => DescribeTransactionsRequest::VERSIONS,
            ApiKey::ListTransactions => ListTransactionsRequest::VERSIONS,
            ApiKey::DescribeProducers => DescribeProducersRequest::VERSIONS,
            ApiKey::CreateDelegationToken => CreateDelegationTokenRequest::VERSIONS,
            ApiKey::RenewDelegationToken => RenewDelegationTokenRequest::VERSIONS,
            ApiKey::ExpireDelegationToken => ExpireDelegationTokenRequest::VERSIONS,
            ApiKey::DescribeDelegationToken => DescribeDelegationTokenRequest::VERSIONS,
            ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::VERSIONS,
            ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS,
            ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::VERSIONS,
            ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::VERSIONS,
            ApiKey::WriteTxnMarkers => WriteTxnMarkersRequest::VERSIONS,
            ApiKey::DescribeQuorum => DescribeQuorumRequest::VERSIONS,
            ApiKey::AddRaftVoter => AddRaftVoterRequest::VERSIONS,
            ApiKey::RemoveRaftVoter => RemoveRaftVoterRequest::VERSIONS,
            ApiKey::DescribeTopicPartitions => DescribeTopicPartitionsRequest::VERSIONS,
            ApiKey::SaslHandshake => SaslHandshakeRequest::VERSIONS,
            ApiKey::SaslAuthenticate => SaslAuthenticateRequest::VERSIONS,
            ApiKey::DescribeUserScramCredentials => DescribeUserScramCredentialsRequest::VERSIONS,
            ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsRequest::VERSIONS,
            ApiKey::DescribeAcls => DescribeAclsRequest::VERSIONS,
            ApiKey::CreateAcls => CreateAclsRequest::VERSIONS,
            ApiKey::DeleteAcls => DeleteAclsRequest::VERSIONS,
            ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::VERSIONS,
            ApiKey::AlterClientQuotas => AlterClientQuotasRequest::VERSIONS,
            other => panic!("no codec range listed for {other:?}"),
        };
        (r.min, r.max)
    }

    #[test]
    fn supported_versions_are_within_the_codec() {
        for v in SUPPORTED {
            let (min, max) = codec_range(v.key);
            assert!(v.min >= min && v.max <= max && v.min <= v.max, "{:?}", v.key);
        }
    }

    #[test]
    fn compat_matrix_lists_exactly_the_supported_versions() {
        // Rows look like `| Produce (0) | 3–12 | ...`.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-matrix.md");
        let text = std::fs::read_to_string(path).unwrap();
        let mut listed = Vec::new();
        for line in text.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 3 {
                continue;
            }
            let (Some(open), Some(close)) = (cells[1].rfind('('), cells[1].rfind(')')) else {
                continue;
            };
            let Ok(key) = cells[1][open + 1..close].parse::<i16>() else {
                continue;
            };
            // `3–12`, or `0` for a single version.
            let (min, max) = cells[2].split_once('–').unwrap_or((cells[2], cells[2]));
            let (Ok(min), Ok(max)) = (min.parse::<i16>(), max.parse::<i16>()) else {
                continue;
            };
            listed.push((key, min, max));
        }
        let mut expected: Vec<(i16, i16, i16)> = SUPPORTED.iter().map(|v| (v.key as i16, v.min, v.max)).collect();
        expected.sort();
        listed.sort();
        assert_eq!(listed, expected, "compat-matrix.md and api::SUPPORTED disagree");
    }

    #[test]
    fn supported_has_one_row_per_key() {
        for (i, v) in SUPPORTED.iter().enumerate() {
            assert!(
                SUPPORTED[i + 1..].iter().all(|w| w.key as i16 != v.key as i16),
                "{:?}",
                v.key
            );
        }
    }
}
