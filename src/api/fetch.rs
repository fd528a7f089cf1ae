//! Fetch (key 1): read record batches from partition leaders, long-polling for new data.
//! v4 baseline here (isolation level, last stable offset, aborted transactions) · v5 log start
//! offset · v7 fetch sessions (KIP-227: we never create one, so every answer carries session id
//! 0 and clients keep sending full fetches) · v9 current leader epoch fencing · v11 rack id and
//! preferred read replica (KIP-392, below) · v12 flexible · v13 topic ids instead of names · v15
//! replica state · v16-v17 node endpoints and replica directory id (tagged) · KIP-951: a
//! partition answered NOT_LEADER_OR_FOLLOWER names its current leader (v12+) and the response
//! lists that leader's endpoint (v16+) ·
//! v18 the high watermark a follower knows, per partition (KIP-1166, Kafka 4.1): a tagged field
//! only replicas set (a consumer leaves it at its default, i64::MAX). Kafka 4.1 reads it only in
//! its KRaft quorum (KafkaRaftClient, KAFKA-14145); Sluice has no followers and ignores it, so
//! v18 answers as v17.
//! Waits are woken by the high watermark moving (never a sleep loop) and judged from file
//! positions, not by reading records again (Kafka's DelayedFetch). `max_bytes` is capped at
//! `fetch.max.bytes` and `min_bytes` at that cap (Kafka's KafkaApis.handleFetchRequest);
//! `partition_max_bytes` limits each partition within what is left, and KIP-74 returns the
//! first batch of the first non-empty partition whole even when larger. So one Fetch holds at
//! most `fetch.max.bytes` of records plus that one batch, however much it asks for.
//!
//! Follower fetching (KIP-392), as Kafka's ReplicaManager: a consumer's fetch from v11 (which
//! carries the consumer's `client.rack`) is served by any replica, a follower reading up to
//! the high watermark its leader told it; before v11 only the leader serves. With
//! `replica.selector.class` RackAwareReplicaSelector, a leader asked by a consumer in another
//! rack names a follower in the consumer's rack as `preferred_read_replica` (in the ISR,
//! holding the fetch offset, the furthest along), with no records and at once; the consumer
//! then fetches there.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint, PartitionData,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;
use uuid::Uuid;

use super::leader_hints::LeaderHints;
use super::spliced::Regions;
use super::{Ctx, Versions};
use crate::acl::{Operation, ResourceType};
use crate::config::ReplicaSelector;
use crate::error::Error;
use crate::replica::Partition;
use crate::replica::purgatory::DelayedFetch;
use std::sync::Arc;

pub const VERSIONS: Versions = Versions::new(ApiKey::Fetch, 4, 18);

/// The longest a fetch may wait for data; clients ask for far less (librdkafka 500 ms, Java
/// 500 ms), this only bounds a misbehaving one.
const FETCH_WAIT_MS_MAX: u64 = 60_000;
/// `isolation_level` 1 = READ_COMMITTED.
const READ_COMMITTED: i8 = 1;
/// A consumer's records of at least this many bytes are sent from the log file (`spliced`);
/// smaller ones are read into the response, which costs one write instead of a sendfile each.
const SPLICE_MIN_BYTES: usize = 16 << 10;

/// One requested partition, resolved.
struct Wanted {
    topic: usize,
    request: FetchPartition,
    partition: Result<Arc<Partition>, i16>,
    /// The replica the consumer should fetch this partition from instead (KIP-392).
    preferred: Option<i32>,
}

/// The response, and the regions its records placeholders stand for (see `spliced`).
pub async fn handle(ctx: &Ctx, req: FetchRequest, version: i16) -> (FetchResponse, Regions) {
    // KIP-227: epochs 0 (new session) and -1 (sessionless) are full fetches; anything else names
    // a session we never created.
    if req.session_epoch != 0 && req.session_epoch != -1 {
        let response = FetchResponse::default().with_error_code(ResponseError::FetchSessionIdNotFound.code());
        return (response, Regions::default());
    }
    // A follower's fetch (Kafka's replica id, from v15 in ReplicaState): it reads up to the
    // log end and its fetch offset tells the leader how far it holds the log.
    let replica = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let replica = (replica >= 0).then_some(replica);
    // Kafka: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic;
    // either way what is not allowed is TOPIC_AUTHORIZATION_FAILED.
    let follower_allowed = replica.is_some() && ctx.authorize_cluster(Operation::ClusterAction);
    // KIP-392: a consumer that says its rack (v11+) may fetch from a follower (Kafka's
    // `fetchOnlyFromLeader` is false for it).
    let any_replica = replica.is_none() && version >= 11;
    let image = ctx.controller.image();
    let mut topics = Vec::with_capacity(req.topics.len());
    let mut wanted = Vec::new();
    for topic in req.topics {
        let (name, id) = if version >= 13 {
            match image.topic_by_id(&topic.topic_id) {
                Some(t) => (Some(t.name.clone()), topic.topic_id),
                None => (None, topic.topic_id),
            }
        } else {
            (Some(topic.topic.0.to_string()), Uuid::nil())
        };
        let index = topics.len();
        let mut response = FetchableTopicResponse::default();
        if version >= 13 {
            response.topic_id = id;
        } else {
            response.topic = topic.topic;
        }
        topics.push(response);
        let authorized = name.as_ref().is_some_and(|name| match replica {
            Some(_) => follower_allowed,
            None => ctx.authorize(Operation::Read, ResourceType::Topic, name),
        });
        for p in topic.partitions {
            let partition = match &name {
                None => Err(ResponseError::UnknownTopicId.code()),
                Some(_) if !authorized => Err(ResponseError::TopicAuthorizationFailed.code()),
                Some(name) => match any_replica {
                    true => ctx.replicas.hosted(name, p.partition),
                    false => ctx.replicas.get(name, p.partition),
                }
                .ok_or_else(|| super::absent_partition(ctx, name, p.partition)),
            };
            wanted.push(Wanted {
                topic: index,
                request: p,
                partition,
                preferred: None,
            });
        }
    }

    if let Some(replica) = replica {
        follower_fetched(ctx, &mut wanted, replica, version);
    }
    let rack = req.rack_id.as_str();
    if any_replica && !rack.is_empty() && ctx.config.replica_selector == Some(ReplicaSelector::RackAware) {
        for w in &mut wanted {
            if let Ok(p) = &w.partition {
                w.preferred = preferred_read_replica(ctx, &image, p, w.request.fetch_offset, rack);
            }
        }
    }
    // Kafka answers at once when it names a preferred read replica.
    let redirected = wanted.iter().any(|w| w.preferred.is_some());

    let wait_ms = u64::try_from(req.max_wait_ms).unwrap_or(0).min(FETCH_WAIT_MS_MAX);
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    // The request's max_bytes is the client's claim: the broker reads and holds no more than
    // `fetch.max.bytes` for it (Kafka: `Math.min(fetchRequest.maxBytes, config.fetchMaxBytes)`,
    // and `fetchMinBytes = Math.min(fetchRequest.minBytes, fetchMaxBytes)`).
    let max_bytes = usize::try_from(req.max_bytes)
        .unwrap_or(0)
        .min(ctx.config.fetch_max_bytes);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0).min(max_bytes);
    let read_committed = req.isolation_level == READ_COMMITTED && replica.is_none();
    if replica.is_some() {
        return follower_read(ctx, version, topics, &wanted, max_bytes, min_bytes, deadline).await;
    }
    // Watch before reading so an append between the read and the wait is not missed.
    let mut delayed = DelayedFetch::new(min_bytes, read_committed);
    for w in &wanted {
        if let Ok(p) = &w.partition {
            delayed.watch(p.clone(), w.request.fetch_offset, w.request.partition_max_bytes);
        }
    }
    let consumer = Read::Consumer { read_committed };
    let mut regions = Regions::default();
    let (answers, bytes, any_error) = read_all(&wanted, max_bytes, consumer, version, &mut regions);
    if bytes >= min_bytes || any_error || redirected || delayed.is_empty() || Instant::now() >= deadline {
        return (respond(ctx, version, topics, &wanted, answers), regions);
    }
    // What was read is let go while waiting; the purgatory judges the wait from file
    // positions, and the records are read once more when it ends, however it ends.
    drop((answers, regions));
    delayed.complete(deadline).await;
    let mut regions = Regions::default();
    let (answers, _, _) = read_all(&wanted, max_bytes, consumer, version, &mut regions);
    (respond(ctx, version, topics, &wanted, answers), regions)
}

fn respond(
    ctx: &Ctx,
    version: i16,
    mut topics: Vec<FetchableTopicResponse>,
    wanted: &[Wanted],
    answers: Vec<PartitionData>,
) -> FetchResponse {
    for (w, answer) in wanted.iter().zip(answers) {
        topics[w.topic].partitions.push(answer);
    }
    let mut response = FetchResponse::default().with_responses(topics);
    if version >= 12 {
        point_to_leaders(&ctx.controller.image(), &ctx.listener, &mut response, version);
    }
    response
}

/// KIP-951: each partition answered NOT_LEADER_OR_FOLLOWER gets its current leader and epoch
/// (v12+), and from v16 the response lists those leaders' endpoints.
fn point_to_leaders(image: &crate::cluster::MetadataImage, listener: &str, response: &mut FetchResponse, version: i16) {
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    let mut hints = LeaderHints::new(image);
    for topic in &mut response.responses {
        let Some(info) = hints.topic(version >= 13, &topic.topic_id, topic.topic.0.as_str()) else {
            continue;
        };
        for p in topic.partitions.iter_mut().filter(|p| p.error_code == not_leader) {
            if let Some((leader, epoch)) = hints.leader_of(info, p.partition_index) {
                p.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader))
                    .with_leader_epoch(epoch);
            }
        }
    }
    if version >= 16 {
        response.node_endpoints = hints
            .endpoints(listener)
            .map(|(b, endpoint)| {
                NodeEndpoint::default()
                    .with_node_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(endpoint.host.clone()))
                    .with_port(endpoint.port)
                    .with_rack(b.rack.clone().map(StrBytes::from_string))
            })
            .collect();
    }
}

/// The leader's side of a follower's fetch, before anything is read (Kafka's
/// `updateFollowerFetchState`): each partition records how far the follower holds its log,
/// which may move the high watermark and complete waiting acks=all produces; a follower that
/// caught up is proposed for the ISR. An offset past the log end is not counted (the read
/// answers OFFSET_OUT_OF_RANGE); a replica id that is not a replica of the partition gets
/// NOT_LEADER_OR_FOLLOWER and no records (Kafka's `updateFollowerFetchState`).
fn follower_fetched(ctx: &Ctx, wanted: &mut [Wanted], replica: i32, version: i16) {
    let eligible = ctx.controller.image().is_live(replica);
    for w in wanted {
        let Ok(p) = &w.partition else { continue };
        if check_leader_epoch(p, &w.request, version).is_err() {
            continue;
        }
        if p.offsets().is_ok_and(|o| w.request.fetch_offset > o.log_end_offset) {
            continue;
        }
        match p.follower_fetched(replica, w.request.fetch_offset, eligible) {
            Ok(fetched) => {
                if let Some(proposal) = fetched.expand_isr {
                    ctx.replicas.propose_isr(p.clone(), proposal);
                }
            }
            Err(e) => {
                tracing::debug!(partition = %p.tp, replica, error = %e, "follower fetch refused");
                w.partition = Err(e.code());
            }
        }
    }
}

/// A follower's read: up to the log end; when nothing is there yet, it waits (up to the
/// request's wait) for any of its partitions' log end to move, then reads once more. Its
/// records go by sendfile as a consumer's do (`Regions`).
async fn follower_read(
    ctx: &Ctx,
    version: i16,
    topics: Vec<FetchableTopicResponse>,
    wanted: &[Wanted],
    max_bytes: usize,
    min_bytes: usize,
    deadline: Instant,
) -> (FetchResponse, Regions) {
    let mut ends: Vec<_> = wanted
        .iter()
        .filter_map(|w| w.partition.as_ref().ok().map(|p| p.log_end_watch()))
        .collect();
    let mut regions = Regions::default();
    let (answers, bytes, any_error) = read_all(wanted, max_bytes, Read::Follower, version, &mut regions);
    if bytes >= min_bytes.max(1) || any_error || ends.is_empty() || Instant::now() >= deadline {
        return (respond(ctx, version, topics, wanted, answers), regions);
    }
    drop((answers, regions));
    let moved = futures::future::select_all(ends.iter_mut().map(|rx| Box::pin(rx.changed())));
    let _ = tokio::time::timeout_at(deadline, moved).await;
    let mut regions = Regions::default();
    let (answers, _, _) = read_all(wanted, max_bytes, Read::Follower, version, &mut regions);
    (respond(ctx, version, topics, wanted, answers), regions)
}

/// Whom a read is for.
#[derive(Clone, Copy)]
enum Read {
    /// A consumer: up to the high watermark, or for read_committed the last stable offset.
    Consumer { read_committed: bool },
    /// A follower: up to the log end.
    Follower,
}

/// Reads every partition once under the response and partition byte budgets: `max_bytes`
/// (already capped at `fetch.max.bytes`) is shared across the partitions in request order, so
/// the records held at once never exceed it, plus the one KIP-74 batch of the first non-empty
/// partition.
fn read_all(
    wanted: &[Wanted],
    max_bytes: usize,
    read: Read,
    version: i16,
    regions: &mut Regions,
) -> (Vec<PartitionData>, usize, bool) {
    let mut remaining = max_bytes;
    let mut total = 0usize;
    let mut any_error = false;
    let mut answers = Vec::with_capacity(wanted.len());
    for w in wanted {
        let index = w.request.partition;
        let answer = match &w.partition {
            Err(code) => {
                any_error = true;
                error_data(index, *code, None)
            }
            // KIP-392: no records, the leader's offsets, and where to fetch instead.
            Ok(p) if let Some(replica) = w.preferred => {
                error_data(index, 0, p.offsets().ok()).with_preferred_read_replica(BrokerId(replica))
            }
            Ok(p) => match read_one(p, &w.request, remaining, total == 0, read, version, regions) {
                Ok((data, len)) => {
                    total += len;
                    remaining = remaining.saturating_sub(len);
                    data
                }
                Err(e) => {
                    any_error = true;
                    error_data(index, e.code(), p.offsets().ok())
                }
            },
        };
        answers.push(answer);
    }
    (answers, total, any_error)
}

/// One partition's answer and the bytes of its records.
fn read_one(
    p: &Partition,
    req: &FetchPartition,
    remaining: usize,
    first: bool,
    read: Read,
    version: i16,
    regions: &mut Regions,
) -> Result<(PartitionData, usize), Error> {
    check_leader_epoch(p, req, version)?;
    let limit = usize::try_from(req.partition_max_bytes).unwrap_or(0).min(remaining);
    let read = match read {
        Read::Consumer { read_committed } => p.read_region_with(req.fetch_offset, limit, first, read_committed)?,
        Read::Follower => p.read_region_for_follower(req.fetch_offset, limit, first)?,
    };
    let records = match read.records {
        None => Bytes::new(),
        // Small reads are read now: one write beats a sendfile per partition.
        Some(region) if region.len() < SPLICE_MIN_BYTES => Bytes::from(region.read()?),
        Some(region) => match regions.placeholder(region) {
            Ok(placeholder) => placeholder,
            Err(region) => Bytes::from(region.read()?),
        },
    };
    let len = regions.len_of(&records);
    let aborted = read.aborted.map(|list| {
        list.into_iter()
            .map(|a| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(a.producer_id))
                    .with_first_offset(a.first_offset)
            })
            .collect()
    });
    let data = PartitionData::default()
        .with_partition_index(req.partition)
        .with_high_watermark(read.high_watermark)
        .with_last_stable_offset(read.last_stable_offset)
        .with_log_start_offset(read.log_start_offset)
        .with_aborted_transactions(aborted)
        .with_records(Some(records));
    Ok((data, len))
}

/// Kafka's RackAwareReplicaSelector, on a leader: the replica in the consumer's `rack` the
/// consumer should fetch from, or None for the leader itself. The leader is chosen when it is
/// in that rack or no replica is; otherwise the in-sync follower there that holds
/// `fetch_offset`, is live and has an endpoint on this listener, the furthest along (then the
/// most recently caught up: Kafka's `ReplicaView.comparator`).
fn preferred_read_replica(
    ctx: &Ctx,
    image: &crate::cluster::MetadataImage,
    p: &Partition,
    fetch_offset: i64,
    rack: &str,
) -> Option<i32> {
    if !p.is_leader() {
        return None;
    }
    let in_rack = |id: i32| {
        image
            .brokers
            .get(&id)
            .is_some_and(|b| !b.fenced && b.rack.as_deref() == Some(rack) && b.endpoint(&ctx.listener).is_some())
    };
    if in_rack(ctx.config.node_id) {
        return None;
    }
    p.read_replica_candidates(fetch_offset)
        .into_iter()
        .filter(|(id, _)| in_rack(*id))
        .max_by(|(a, pa), (b, pb)| {
            (pa.log_end, pa.last_caught_up_ms)
                .cmp(&(pb.log_end, pb.last_caught_up_ms))
                .then(b.cmp(a))
        })
        .map(|(id, _)| id)
}

/// Kafka's leader epoch fencing (KIP-320): a newer epoch than ours means our metadata is
/// behind; an older one means the client's is.
fn check_leader_epoch(p: &Partition, req: &FetchPartition, version: i16) -> Result<(), Error> {
    if version < 9 {
        return Ok(());
    }
    p.check_current_leader_epoch(req.current_leader_epoch)
}

/// A partition answer carrying an error, with the partition's offsets when it exists.
fn error_data(index: i32, code: i16, offsets: Option<crate::replica::PartitionOffsets>) -> PartitionData {
    let (hw, lso, start) = offsets.map_or((-1, -1, -1), |o| {
        (o.high_watermark, o.last_stable_offset, o.log_start_offset)
    });
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(code)
        .with_high_watermark(hw)
        .with_last_stable_offset(lso)
        .with_log_start_offset(start)
        .with_records(Some(bytes::Bytes::new()))
}
