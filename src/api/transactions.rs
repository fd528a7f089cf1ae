//! Producer ids and transactions, served by `coordinator::transactions::TransactionCoordinator`
//! (TxnOffsetCommit by the group coordinator). A broker that does not coordinate the
//! transactional id (TxnOffsetCommit: the group) answers NOT_COORDINATOR, except to an
//! InitProducerId without a transactional id, which any broker serves. Every version answers
//! PRODUCER_FENCED where Kafka does; versions older than KIP-588's get INVALID_PRODUCER_EPOCH
//! instead, as in Kafka.
//! InitProducerId (key 22): v0 baseline · v1 same · v2 flexible · v3 producer id and epoch
//! (KIP-360 bump) · v4 PRODUCER_FENCED · v5 same (KIP-890 marker version). Not served: v6 (2PC).
//! AddPartitionsToTxn (key 24): v0 baseline · v1 same · v2 PRODUCER_FENCED · v3 flexible ·
//! v4 batched transactions from brokers, verify_only (KIP-890 part 1), transaction version 2
//! when adding · v5 TRANSACTION_ABORTABLE.
//! AddOffsetsToTxn (key 25): v0 baseline · v2 PRODUCER_FENCED · v3 flexible · v4 same.
//! EndTxn (key 26): v0 baseline · v2 PRODUCER_FENCED · v3 flexible · v4 same · v5 transaction
//! version 2 (KIP-890 part 2): every end bumps the epoch, the answer carries the producer id
//! and epoch to go on with, an abort needs no partition.
//! TxnOffsetCommit (key 28): v0 baseline · v2 leader epoch · v3 member id, generation, instance
//! id (KIP-447), flexible · v4 TRANSACTION_ABORTABLE · v5 adds the offsets partition to the
//! transaction itself.
//! DescribeTransactions (key 65): v0. ListTransactions (key 66): v0 state and producer id
//! filters · v1 duration filter · v2 transactional id pattern (RE2 syntax, whole id).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::coordinator_routing::{KeyKind, NOT_COORDINATOR, coordinator_here};
use super::produce::Enrolment;
use super::{Ctx, Versions, topic_name};
use crate::acl::{Operation, ResourceType};
use crate::coordinator::records::partition_for;
use crate::coordinator::transactions::ListFilter;
use crate::coordinator::{CommitRequest, OFFSETS_TOPIC};
use crate::replica::{TopicPartition, now_ms};

pub const INIT_PRODUCER_ID_VERSIONS: Versions = Versions::new(ApiKey::InitProducerId, 0, 5);
pub const ADD_PARTITIONS_VERSIONS: Versions = Versions::new(ApiKey::AddPartitionsToTxn, 0, 5);
pub const ADD_OFFSETS_VERSIONS: Versions = Versions::new(ApiKey::AddOffsetsToTxn, 0, 4);
pub const END_TXN_VERSIONS: Versions = Versions::new(ApiKey::EndTxn, 0, 5);
pub const TXN_OFFSET_COMMIT_VERSIONS: Versions = Versions::new(ApiKey::TxnOffsetCommit, 0, 5);
pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeTransactions, 0, 0);
pub const LIST_VERSIONS: Versions = Versions::new(ApiKey::ListTransactions, 0, 2);

fn code(e: ResponseError) -> i16 {
    e.code()
}

/// KIP-588: clients older than `first_fenced_version` know INVALID_PRODUCER_EPOCH only.
fn fenced_for(c: i16, version: i16, first_fenced_version: i16) -> i16 {
    if c == code(ResponseError::ProducerFenced) && version < first_fenced_version {
        code(ResponseError::InvalidProducerEpoch)
    } else {
        c
    }
}

/// TRANSACTION_ABORTABLE is known from `first_version`; older clients get INVALID_TXN_STATE
/// (Kafka's `AddPartitionsToTxnManager` compatibility mapping).
fn abortable_for(c: i16, version: i16, first_version: i16) -> i16 {
    if c == code(ResponseError::TransactionAbortable) && version < first_version {
        code(ResponseError::InvalidTxnState)
    } else {
        c
    }
}

fn result_code(r: Result<(), i16>) -> i16 {
    r.err().unwrap_or(0)
}

pub async fn init_producer_id(ctx: &Ctx, req: InitProducerIdRequest, version: i16) -> InitProducerIdResponse {
    let fail = |c: i16| {
        InitProducerIdResponse::default()
            .with_error_code(fenced_for(c, version, 4))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    // Kafka's KafkaApis.handleInitProducerIdRequest: both or neither.
    let expected = match (version >= 3, req.producer_id.0, req.producer_epoch) {
        (false, _, _) | (true, -1, -1) => None,
        (true, -1, _) | (true, _, -1) => return fail(code(ResponseError::InvalidRequest)),
        (true, pid, epoch) => Some((pid, epoch)),
    };
    let transactional_id = req.transactional_id.as_ref().map(|t| t.0.as_str());
    // Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on
    // the cluster or, since KIP-679, WRITE on some topic.
    match transactional_id {
        Some(id) if !ctx.authorize(Operation::Write, ResourceType::TransactionalId, id) => {
            return fail(code(ResponseError::TransactionalIdAuthorizationFailed));
        }
        None if !ctx.authorize_cluster(Operation::IdempotentWrite)
            && !ctx.authorize_any(Operation::Write, ResourceType::Topic) =>
        {
            return fail(code(ResponseError::ClusterAuthorizationFailed));
        }
        _ => {}
    }
    // Any broker hands out an idempotent producer id; a transactional id goes to its coordinator.
    if let Some(id) = transactional_id
        && !coordinator_here(ctx, KeyKind::Transaction, id)
    {
        return fail(NOT_COORDINATOR);
    }
    match ctx
        .transactions
        .init_producer_id(transactional_id, req.transaction_timeout_ms, expected)
        .await
    {
        Ok((producer_id, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Err(c) => fail(c),
    }
}

/// Partitions of one topic that the metadata knows, and those it does not.
fn known(ctx: &Ctx, topic: &str, partitions: &[i32]) -> (Vec<TopicPartition>, Vec<i32>) {
    let image = ctx.controller.image();
    let count = image.topic(topic).map_or(0, |t| t.partitions);
    let (ok, unknown): (Vec<i32>, Vec<i32>) = partitions.iter().partition(|p| **p >= 0 && **p < count);
    let ok = ok
        .into_iter()
        .map(|p| TopicPartition {
            topic: topic.to_string(),
            partition: p,
        })
        .collect();
    (ok, unknown)
}

fn topic_results(
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
    code_of: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(*p)
                        .with_partition_error_code(code_of(&t.name.0, *p))
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(partitions)
        })
        .collect()
}

/// One transaction of an AddPartitionsToTxn: per-partition codes.
async fn add_one(
    ctx: &Ctx,
    transactional_id: &str,
    producer_id: i64,
    producer_epoch: i16,
    verify_only: bool,
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    // Kafka: WRITE on the transactional id, then on each topic; with any topic refused
    // nothing is added.
    if !ctx.authorize(Operation::Write, ResourceType::TransactionalId, transactional_id) {
        return topic_results(topics, |_, _| code(ResponseError::TransactionalIdAuthorizationFailed));
    }
    let refused: Vec<&str> = topics
        .iter()
        .map(|t| t.name.0.as_str())
        .filter(|t| !ctx.authorize(Operation::Write, ResourceType::Topic, t))
        .collect();
    if !refused.is_empty() {
        return topic_results(topics, |t, _| match refused.contains(&t) {
            true => code(ResponseError::TopicAuthorizationFailed),
            false => code(ResponseError::OperationNotAttempted),
        });
    }
    if !coordinator_here(ctx, KeyKind::Transaction, transactional_id) {
        return topic_results(topics, |_, _| NOT_COORDINATOR);
    }
    let mut wanted = Vec::new();
    let mut unknown = Vec::new();
    for t in topics {
        let (ok, bad) = known(ctx, &t.name.0, &t.partitions);
        wanted.extend(ok);
        unknown.extend(bad.into_iter().map(|p| (t.name.0.to_string(), p)));
    }
    let adjust = |c: i16| abortable_for(fenced_for(c, version, 2), version, 5);
    if !unknown.is_empty() {
        // Kafka: nothing is added when any partition is unknown.
        return topic_results(topics, |t, p| {
            if unknown.iter().any(|(ut, up)| ut == t && *up == p) {
                code(ResponseError::UnknownTopicOrPartition)
            } else {
                code(ResponseError::OperationNotAttempted)
            }
        });
    }
    if verify_only {
        let verified = ctx
            .transactions
            .verify_partitions(transactional_id, producer_id, producer_epoch, &wanted);
        return topic_results(topics, |t, p| match &verified {
            Err(c) => adjust(*c),
            Ok(codes) => wanted
                .iter()
                .position(|w| w.topic == t && w.partition == p)
                .and_then(|i| codes.get(i).copied())
                .map_or(code(ResponseError::UnknownServerError), adjust),
        });
    }
    // AddPartitionsToTxn v4+ comes from a broker adding a Produce's partition for a client
    // of transaction version 2 (Kafka's `transactionVersionForAddPartitionsToTxn`).
    let c = result_code(
        ctx.transactions
            .add_partitions(transactional_id, producer_id, producer_epoch, &wanted, version >= 4)
            .await,
    );
    topic_results(topics, |_, _| adjust(c))
}

pub async fn add_partitions_to_txn(
    ctx: &Ctx,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        let results = add_one(
            ctx,
            &req.v3_and_below_transactional_id.0,
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
            false,
            &req.v3_and_below_topics,
            version,
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    if !ctx.authorize_cluster(Operation::ClusterAction) {
        // v4+ comes from brokers only (Kafka: CLUSTER_ACTION on the cluster).
        return AddPartitionsToTxnResponse::default().with_error_code(code(ResponseError::ClusterAuthorizationFailed));
    }
    let mut out = Vec::with_capacity(req.transactions.len());
    for t in &req.transactions {
        let results = add_one(
            ctx,
            &t.transactional_id.0,
            t.producer_id.0,
            t.producer_epoch,
            t.verify_only,
            &t.topics,
            version,
        )
        .await;
        out.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(results),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
}

/// The `__consumer_offsets` partition of a group.
fn offsets_partition(ctx: &Ctx, group_id: &str) -> TopicPartition {
    TopicPartition {
        topic: OFFSETS_TOPIC.to_string(),
        partition: partition_for(group_id, ctx.coordinator.offsets_partition_count()),
    }
}

pub async fn add_offsets_to_txn(ctx: &Ctx, req: AddOffsetsToTxnRequest, version: i16) -> AddOffsetsToTxnResponse {
    let c = if !ctx.authorize(Operation::Write, ResourceType::TransactionalId, &req.transactional_id.0) {
        code(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !super::groups::may_read_group(ctx, &req.group_id.0) {
        code(ResponseError::GroupAuthorizationFailed)
    } else if req.group_id.0.is_empty() {
        code(ResponseError::InvalidGroupId)
    } else if !coordinator_here(ctx, KeyKind::Transaction, &req.transactional_id.0) {
        NOT_COORDINATOR
    } else if ctx.coordinator.ensure_offsets_topic().is_err() {
        code(ResponseError::CoordinatorNotAvailable)
    } else {
        let tp = offsets_partition(ctx, &req.group_id.0);
        result_code(
            ctx.transactions
                .add_partitions(
                    &req.transactional_id.0,
                    req.producer_id.0,
                    req.producer_epoch,
                    &[tp],
                    false,
                )
                .await,
        )
    };
    AddOffsetsToTxnResponse::default().with_error_code(fenced_for(c, version, 2))
}

pub async fn end_txn(ctx: &Ctx, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let ended = if !ctx.authorize(Operation::Write, ResourceType::TransactionalId, &req.transactional_id.0) {
        Err(code(ResponseError::TransactionalIdAuthorizationFailed))
    } else if coordinator_here(ctx, KeyKind::Transaction, &req.transactional_id.0) {
        // v5: transaction version 2 (Kafka's `transactionVersionForEndTxn`).
        ctx.transactions
            .end_txn(
                &req.transactional_id.0,
                req.producer_id.0,
                req.producer_epoch,
                req.committed,
                version >= 5,
            )
            .await
    } else {
        Err(NOT_COORDINATOR)
    };
    let resp = EndTxnResponse::default();
    match ended {
        Ok((producer_id, epoch)) if version >= 5 => resp
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Ok(_) => resp,
        Err(c) => resp
            .with_error_code(fenced_for(c, version, 2))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    }
}

pub async fn txn_offset_commit(ctx: &Ctx, req: TxnOffsetCommitRequest, version: i16) -> TxnOffsetCommitResponse {
    let group = req.group_id.0.to_string();
    // Kafka: WRITE on the transactional id, READ on the group (each refusing every partition),
    // then READ on each topic (refusing its partitions; the others go on).
    let refused_whole = if !ctx.authorize(Operation::Write, ResourceType::TransactionalId, &req.transactional_id.0) {
        Some(code(ResponseError::TransactionalIdAuthorizationFailed))
    } else if !super::groups::may_read_group(ctx, &group) {
        Some(code(ResponseError::GroupAuthorizationFailed))
    } else {
        None
    };
    let readable: Vec<bool> = req
        .topics
        .iter()
        .map(|t| ctx.authorize(Operation::Read, ResourceType::Topic, &t.name.0))
        .collect();
    let mut wanted: Vec<CommitRequest> = Vec::new();
    for (t, _) in req.topics.iter().zip(&readable).filter(|(_, r)| **r) {
        for p in &t.partitions {
            let epoch = if version >= 2 { p.committed_leader_epoch } else { -1 };
            wanted.push((
                t.name.0.to_string(),
                p.partition_index,
                p.committed_offset,
                epoch,
                p.committed_metadata.as_ref().map(|m| m.to_string()),
            ));
        }
    }
    let (member_id, instance_id, generation) = if version >= 3 {
        (
            req.member_id.to_string(),
            req.group_instance_id.as_ref().map(|s| s.to_string()),
            req.generation_id,
        )
    } else {
        (String::new(), None, -1)
    };
    // KIP-890 part 1: the group's offsets partition must be in the transaction (added by
    // AddOffsetsToTxn); v5 clients (transaction version 2) leave it to the coordinator.
    // Kafka routes TxnOffsetCommit by its group: the group's coordinator answers it.
    let checked = if let Some(c) = refused_whole {
        Err(c)
    } else if group.is_empty() {
        Err(code(ResponseError::InvalidGroupId))
    } else if !coordinator_here(ctx, KeyKind::Group, &group) {
        Err(NOT_COORDINATOR)
    } else if ctx.coordinator.ensure_offsets_topic().is_err() {
        Err(code(ResponseError::CoordinatorNotAvailable))
    } else {
        let tp = offsets_partition(ctx, &group);
        // v5 (transaction version 2) adds the offsets partition to the transaction; before,
        // the client added it and the coordinator verifies that. Either way the transaction's
        // coordinator is asked, here or on another broker (AddPartitionsToTxn v5, as Kafka's
        // AddPartitionsToTxnManager).
        let how = match version >= 5 {
            true => Enrolment::Add,
            false => Enrolment::Verify,
        };
        super::produce::check_in_transaction(
            ctx,
            &req.transactional_id.0,
            req.producer_id.0,
            req.producer_epoch,
            std::slice::from_ref(&tp),
            how,
        )
        .await
        .and_then(|codes| match codes.first() {
            Some(0) => Ok(()),
            Some(c) => Err(*c),
            None => Err(code(ResponseError::UnknownServerError)),
        })
    };
    let codes = match checked {
        // Every topic refused: nothing for the coordinator (Kafka does not call it).
        Ok(()) if wanted.is_empty() => Vec::new(),
        Err(c) if refused_whole.is_some() => vec![c; req.topics.iter().map(|t| t.partitions.len()).sum()],
        Err(c) => {
            // Kafka's AddPartitionsToTxnManager mapping for TxnOffsetCommit.
            let c = if c == code(ResponseError::ProducerFenced) {
                code(ResponseError::InvalidProducerEpoch)
            } else if c == code(ResponseError::ConcurrentTransactions) {
                code(ResponseError::CoordinatorNotAvailable)
            } else {
                abortable_for(c, version, 4)
            };
            vec![c; wanted.len()]
        }
        Ok(()) => {
            ctx.coordinator
                .txn_commit(
                    &group,
                    req.producer_id.0,
                    req.producer_epoch,
                    &member_id,
                    instance_id.as_deref(),
                    generation,
                    wanted,
                )
                .await
        }
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .zip(readable)
        .map(|(t, readable)| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let c = match readable || refused_whole.is_some() {
                        true => codes.next().unwrap_or(code(ResponseError::UnknownServerError)),
                        false => code(ResponseError::TopicAuthorizationFailed),
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(c)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

pub async fn describe_transactions(
    ctx: &Ctx,
    req: DescribeTransactionsRequest,
    _version: i16,
) -> DescribeTransactionsResponse {
    let states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let described = if !ctx.authorize(Operation::Describe, ResourceType::TransactionalId, &id.0) {
                Err(code(ResponseError::TransactionalIdAuthorizationFailed))
            } else if coordinator_here(ctx, KeyKind::Transaction, &id.0) {
                ctx.transactions.describe(&id.0)
            } else {
                Err(NOT_COORDINATOR)
            };
            (id, described)
        })
        .map(|(id, described)| match described {
            Err(c) => TransactionState::default()
                .with_transactional_id(id)
                .with_error_code(c)
                .with_transaction_state(StrBytes::from_static_str(""))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            Ok(d) => {
                let mut topics: Vec<TopicData> = Vec::new();
                // Only the topics the principal may describe (Kafka).
                for tp in d
                    .partitions
                    .into_iter()
                    .filter(|tp| ctx.authorize(Operation::Describe, ResourceType::Topic, &tp.topic))
                {
                    match topics.last_mut() {
                        Some(t) if t.topic.0.as_str() == tp.topic => t.partitions.push(tp.partition),
                        _ => topics.push(
                            TopicData::default()
                                .with_topic(topic_name(&tp.topic))
                                .with_partitions(vec![tp.partition]),
                        ),
                    }
                }
                TransactionState::default()
                    .with_transactional_id(id)
                    .with_transaction_state(StrBytes::from_static_str(d.state.name()))
                    .with_transaction_timeout_ms(d.timeout_ms)
                    .with_transaction_start_time_ms(d.start_ms)
                    .with_producer_id(ProducerId(d.producer_id))
                    .with_producer_epoch(d.producer_epoch)
                    .with_topics(topics)
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

pub async fn list_transactions(ctx: &Ctx, req: ListTransactionsRequest, version: i16) -> ListTransactionsResponse {
    let filter = ListFilter {
        states: req.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        duration_ms: if version >= 1 { req.duration_filter } else { -1 },
        pattern: if version >= 2 {
            req.transactional_id_pattern.as_ref().map(|p| p.to_string())
        } else {
            None
        },
    };
    match ctx.transactions.list(&filter, now_ms()) {
        Err(c) => ListTransactionsResponse::default().with_error_code(c),
        Ok((listed, unknown)) => ListTransactionsResponse::default()
            .with_unknown_state_filters(unknown.into_iter().map(StrBytes::from_string).collect())
            .with_transaction_states(
                listed
                    .into_iter()
                    .filter(|(id, ..)| ctx.authorize(Operation::Describe, ResourceType::TransactionalId, id))
                    .map(|(id, pid, state)| {
                        ListedTransaction::default()
                            .with_transactional_id(TransactionalId(StrBytes::from_string(id)))
                            .with_producer_id(ProducerId(pid))
                            .with_transaction_state(StrBytes::from_static_str(state.name()))
                    })
                    .collect(),
            ),
    }
}
