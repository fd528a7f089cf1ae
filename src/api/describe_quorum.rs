//! DescribeQuorum (key 55, KIP-595): the metadata quorum as its leader sees it, for
//! `kafka-metadata-quorum.sh` and the AdminClient's `describeMetadataQuorum`: partition 0 of
//! `__cluster_metadata`, its leader and epoch (the raft term), high watermark (what the quorum
//! committed) and each voter's log end offset.
//! v0 baseline · v1 each voter's last fetch and last caught-up timestamps · v2 (KIP-853) error
//! messages, replica directory ids and `nodes`, each voter's controller listener.
//!
//! Broker-only nodes (raft learners) are listed as observers, with the log end offset the
//! leader knows them to hold.
//!
//! Offsets are raft log indexes (openraft's first entry is index 0); a log end offset and the
//! high watermark are the offset after the last entry, as Kafka's. Not known here (-1): a
//! follower's fetch and caught-up times (openraft reports only how far each voter matches).
//! Directory ids are Kafka's "none" (the zero uuid): voters are not told apart by directory.
//!
//! Kafka's brokers forward this request to the active controller, whose raft client answers
//! when it leads and says NOT_LEADER_OR_FOLLOWER when it does not. Here the leader answers;
//! another node forwards the request once to the leader's client listener (a controller-only
//! leader has none: its metrics are asked over the controller listener), and says
//! NOT_LEADER_OR_FOLLOWER, naming the leader it knows, when that fails.
//!
//! A single node is its own controller: one voter (itself) leading epoch 1, whose high
//! watermark and log end offset are its metadata log's record count. It has no controller
//! listener, so v2 lists it with none, as Kafka lists a voter whose endpoints it does not know.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
use kafka_protocol::messages::{ApiKey, BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use kafka_protocol::protocol::StrBytes;
use openraft::{BasicNode, RaftMetrics};
use uuid::Uuid;

use super::{Ctx, Versions, message, topic_name};
use crate::acl::Operation;

pub const VERSIONS: Versions = Versions::new(ApiKey::DescribeQuorum, 0, 2);

/// The metadata log's topic, the one partition a DescribeQuorum may ask about.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The leader epoch a single node reports: the first epoch of a quorum of one.
const SINGLE_NODE_EPOCH: i32 = 1;
/// The listener `nodes` names when `controller.listener.names` is empty (Kafka's default).
const CONTROLLER_LISTENER_DEFAULT: &str = "CONTROLLER";
/// Tag of the field a forwarding node adds to the request (no Kafka field uses it), so the
/// node it reaches answers itself instead of forwarding again: two nodes that each believe
/// the other leads cannot pass a request back and forth.
pub const FORWARDED_TAG: i32 = 0x534c_0001;

pub async fn handle(ctx: &Ctx, req: DescribeQuorumRequest, version: i16) -> DescribeQuorumResponse {
    if !ctx.authorize_cluster(Operation::Describe) {
        return DescribeQuorumResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed."));
    }
    if !asks_for_the_metadata_partition(&req) {
        return partition_errors(&req, ResponseError::UnknownTopicOrPartition.code());
    }
    let listener = ctx
        .config
        .controller_listener_names
        .first()
        .map_or(CONTROLLER_LISTENER_DEFAULT, String::as_str);
    let now_ms = crate::replica::now_ms();
    let Some(quorum) = ctx.controller.quorum() else {
        let view = LeaderView::single_node(ctx.config.node_id, ctx.controller.image().offset);
        return answer(&view, version, now_ms, listener);
    };
    // A copy: the watch is not held across the awaits below.
    let metrics = quorum.metrics().borrow().clone();
    if metrics.current_leader == Some(metrics.id) {
        let committed = quorum.committed_index().await;
        return answer(
            &LeaderView::from_metrics(&metrics, committed),
            version,
            now_ms,
            listener,
        );
    }
    let leader = metrics.current_leader.and_then(|id| i32::try_from(id).ok());
    let epoch = epoch_of(metrics.current_term);
    if let Some(leader) = leader
        && !req.unknown_tagged_fields.contains_key(&FORWARDED_TAG)
    {
        match ctx.controller.image().brokers.get(&leader).cloned() {
            Some(broker) => match forward(ctx, &broker, req, version).await {
                Ok(resp) => return resp,
                Err(e) => tracing::debug!(leader, error = %e, "DescribeQuorum: forwarding to the quorum leader failed"),
            },
            // A controller-only leader: asked over the controller listener instead.
            None => {
                if let Some((metrics, committed)) = quorum.leader_metrics().await {
                    return answer(
                        &LeaderView::from_metrics(&metrics, committed),
                        version,
                        now_ms,
                        listener,
                    );
                }
                tracing::debug!(
                    leader,
                    "DescribeQuorum: the controller-only quorum leader did not answer"
                )
            }
        }
    }
    not_leader(ctx.config.node_id, leader, epoch)
}

/// Kafka's `hasValidTopicPartition`: exactly one topic, the metadata log's, with exactly its
/// partition 0.
fn asks_for_the_metadata_partition(req: &DescribeQuorumRequest) -> bool {
    matches!(req.topics.as_slice(), [topic]
        if topic.topic_name.0.as_str() == METADATA_TOPIC
            && matches!(topic.partitions.as_slice(), [p] if p.partition_index == 0))
}

/// Kafka's `getPartitionLevelErrorResponse`: every partition asked about, with `code`.
fn partition_errors(req: &DescribeQuorumRequest, code: i16) -> DescribeQuorumResponse {
    let topics = req
        .topics
        .iter()
        .map(|topic| {
            TopicData::default()
                .with_topic_name(topic.topic_name.clone())
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeQuorumResponse::default().with_topics(topics)
}

/// This node does not lead the quorum (Kafka's `singletonErrorResponse`), with the leader and
/// epoch it knows (-1: none), which Kafka leaves out.
fn not_leader(node_id: i32, leader: Option<i32>, epoch: i32) -> DescribeQuorumResponse {
    let text = match leader {
        Some(leader) => format!("node {node_id} does not lead the metadata quorum; node {leader} does"),
        None => format!("node {node_id} does not lead the metadata quorum and knows no leader"),
    };
    let partition = PartitionData::default()
        .with_error_code(ResponseError::NotLeaderOrFollower.code())
        .with_error_message(message(text))
        .with_leader_id(BrokerId(leader.unwrap_or(-1)))
        .with_leader_epoch(if leader.is_some() { epoch } else { -1 })
        .with_high_watermark(-1);
    DescribeQuorumResponse::default().with_topics(vec![metadata_topic(partition)])
}

fn metadata_topic(partition: PartitionData) -> TopicData {
    TopicData::default()
        .with_topic_name(topic_name(METADATA_TOPIC))
        .with_partitions(vec![partition.with_partition_index(0)])
}

/// A raft term as a Kafka leader epoch.
fn epoch_of(term: u64) -> i32 {
    i32::try_from(term).unwrap_or(i32::MAX)
}

/// The quorum as its leader knows it.
#[derive(Debug, Clone, PartialEq)]
struct LeaderView {
    leader: i32,
    epoch: i32,
    /// -1 until the leader knows what is committed.
    high_watermark: i64,
    /// By id.
    voters: Vec<Voter>,
    /// The broker-only nodes (raft learners), Kafka's observers; no controller listener.
    observers: Vec<Voter>,
}

#[derive(Debug, Clone, PartialEq)]
struct Voter {
    id: i32,
    /// -1 when unknown.
    log_end_offset: i64,
    /// Its controller listener (host, port), when known.
    controller: Option<(String, u16)>,
}

impl LeaderView {
    fn single_node(node_id: i32, image_offset: i64) -> LeaderView {
        LeaderView {
            leader: node_id,
            epoch: SINGLE_NODE_EPOCH,
            high_watermark: image_offset,
            voters: vec![Voter {
                id: node_id,
                log_end_offset: image_offset,
                controller: None,
            }],
            observers: Vec::new(),
        }
    }

    /// From the leader's metrics: each voter's log end offset is the entry after the last one
    /// the leader knows it holds (`replication`), the leader's own its last log index.
    fn from_metrics(metrics: &RaftMetrics<u64, BasicNode>, committed: Option<u64>) -> LeaderView {
        let next_offset = |index: u64| i64::try_from(index).map_or(i64::MAX, |i| i.saturating_add(1));
        let membership = metrics.membership_config.membership();
        let replica = |id: u64| {
            let matched = metrics
                .replication
                .as_ref()
                .and_then(|replication| replication.get(&id).copied().flatten());
            let log_end_offset = match matched {
                Some(log_id) => next_offset(log_id.index),
                None if id == metrics.id => metrics.last_log_index.map_or(-1, next_offset),
                None => -1,
            };
            Some(Voter {
                id: i32::try_from(id).ok()?,
                log_end_offset,
                controller: membership.get_node(&id).and_then(|node| host_port(&node.addr)),
            })
        };
        LeaderView {
            leader: i32::try_from(metrics.id).unwrap_or(-1),
            epoch: epoch_of(metrics.current_term),
            high_watermark: committed.map_or(-1, next_offset),
            voters: membership.voter_ids().filter_map(replica).collect(),
            observers: membership.learner_ids().filter_map(replica).collect(),
        }
    }
}

/// `host:port` (a bracketed IPv6 host too) as written in `controller.quorum.voters`.
fn host_port(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

/// The leader's answer (Kafka's `RaftUtil.singletonDescribeQuorumResponse`): its own
/// timestamps are `now_ms`, the others' unknown; v2 lists each voter's controller listener.
fn answer(view: &LeaderView, version: i16, now_ms: i64, listener: &str) -> DescribeQuorumResponse {
    let state = |voter: &Voter| {
        let at = if voter.id == view.leader { now_ms } else { -1 };
        ReplicaState::default()
            .with_replica_id(BrokerId(voter.id))
            .with_replica_directory_id(Uuid::nil())
            .with_log_end_offset(voter.log_end_offset)
            .with_last_fetch_timestamp(at)
            .with_last_caught_up_timestamp(at)
    };
    let partition = PartitionData::default()
        .with_leader_id(BrokerId(view.leader))
        .with_leader_epoch(view.epoch)
        .with_high_watermark(view.high_watermark)
        .with_current_voters(view.voters.iter().map(state).collect())
        .with_observers(view.observers.iter().map(state).collect());
    let mut resp = DescribeQuorumResponse::default().with_topics(vec![metadata_topic(partition)]);
    if version >= 2 {
        resp.nodes = view
            .voters
            .iter()
            .map(|voter| {
                let listeners = voter.controller.iter().map(|(host, port)| {
                    Listener::default()
                        .with_name(StrBytes::from_string(listener.to_string()))
                        .with_host(StrBytes::from_string(host.clone()))
                        .with_port(*port)
                });
                Node::default()
                    .with_node_id(BrokerId(voter.id))
                    .with_listeners(listeners.collect())
            })
            .collect();
    }
    resp
}

/// Sends `req` to `broker` (the quorum's leader), marked as forwarded, through the broker
/// client the other inter-broker requests use.
async fn forward(
    ctx: &Ctx,
    broker: &crate::cluster::BrokerInfo,
    mut req: DescribeQuorumRequest,
    version: i16,
) -> Result<DescribeQuorumResponse, String> {
    req.unknown_tagged_fields.insert(FORWARDED_TAG, Bytes::new());
    ctx.transactions
        .markers()
        .broker_client()
        .call(broker, version, &req)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_quorum_request::{PartitionData as AskedPartition, TopicData as AskedTopic};

    fn request(topics: &[(&str, &[i32])]) -> DescribeQuorumRequest {
        DescribeQuorumRequest::default().with_topics(
            topics
                .iter()
                .map(|(name, partitions)| {
                    AskedTopic::default().with_topic_name(topic_name(name)).with_partitions(
                        partitions
                            .iter()
                            .map(|&p| AskedPartition::default().with_partition_index(p))
                            .collect(),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn only_partition_0_of_the_metadata_topic_alone_is_described() {
        // KafkaRaftClient.handleDescribeQuorumRequest: hasValidTopicPartition.
        assert!(asks_for_the_metadata_partition(&request(&[(METADATA_TOPIC, &[0])])));
        for wrong in [
            request(&[]),
            request(&[(METADATA_TOPIC, &[1])]),
            request(&[(METADATA_TOPIC, &[0, 0])]),
            request(&[("other", &[0])]),
            request(&[(METADATA_TOPIC, &[0]), ("other", &[0])]),
        ] {
            assert!(!asks_for_the_metadata_partition(&wrong), "{wrong:?}");
            let resp = partition_errors(&wrong, 3);
            let asked: usize = wrong.topics.iter().map(|t| t.partitions.len()).sum();
            let answered: Vec<i16> = resp
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect();
            assert_eq!(answered, vec![3; asked]);
        }
    }

    #[test]
    fn the_leader_reports_its_own_times_as_now_and_the_others_as_unknown() {
        // RaftUtil.toReplicaState: the leader's timestamps are the current time.
        let view = LeaderView {
            leader: 2,
            epoch: 7,
            high_watermark: 40,
            voters: vec![
                Voter {
                    id: 1,
                    log_end_offset: 38,
                    controller: Some(("h1".into(), 9093)),
                },
                Voter {
                    id: 2,
                    log_end_offset: 41,
                    controller: Some(("h2".into(), 9093)),
                },
                Voter {
                    id: 3,
                    log_end_offset: -1,
                    controller: None,
                },
            ],
            observers: Vec::new(),
        };
        let resp = answer(&view, 2, 1234, "CONTROLLER");
        let p = &resp.topics[0].partitions[0];
        assert_eq!((p.leader_id.0, p.leader_epoch, p.high_watermark), (2, 7, 40));
        let times: Vec<(i32, i64, i64)> = p
            .current_voters
            .iter()
            .map(|v| (v.replica_id.0, v.log_end_offset, v.last_fetch_timestamp))
            .collect();
        assert_eq!(times, vec![(1, 38, -1), (2, 41, 1234), (3, -1, -1)]);
        /// A node's id and its listeners' (name, host, port).
        type NodeListeners = (i32, Vec<(String, String, u16)>);
        let nodes: Vec<NodeListeners> = resp
            .nodes
            .iter()
            .map(|n| {
                let listeners = n
                    .listeners
                    .iter()
                    .map(|l| (l.name.to_string(), l.host.to_string(), l.port))
                    .collect();
                (n.node_id.0, listeners)
            })
            .collect();
        assert_eq!(
            nodes,
            vec![
                (1, vec![("CONTROLLER".into(), "h1".into(), 9093)]),
                (2, vec![("CONTROLLER".into(), "h2".into(), 9093)]),
                (3, vec![]),
            ]
        );
        assert!(answer(&view, 1, 1234, "CONTROLLER").nodes.is_empty());
    }

    #[test]
    fn controller_addresses_parse_with_and_without_brackets() {
        assert_eq!(host_port("10.0.0.1:9093"), Some(("10.0.0.1".into(), 9093)));
        assert_eq!(host_port("[::1]:9093"), Some(("::1".into(), 9093)));
        assert_eq!(host_port("nohost"), None);
        assert_eq!(host_port("h:99999"), None);
    }
}
