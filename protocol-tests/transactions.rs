//! Transaction APIs through raw frames (every advertised version of InitProducerId,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions,
//! ListTransactions and FindCoordinator's transaction key), then through a real transactional
//! client (librdkafka).

mod common;

use std::time::Duration;

use common::*;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::add_partitions_to_txn_response::AddPartitionsToTxnTopicResult;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const CONCURRENT_TRANSACTIONS: i16 = 51;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const PRODUCER_FENCED: i16 = 90;
const INVALID_TXN_STATE: i16 = 48;
const TRANSACTION_ABORTABLE: i16 = 120;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
const INVALID_REQUEST: i16 = 42;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn txn(text: &str) -> TransactionalId {
    TransactionalId(s(text))
}

async fn create(raw: &mut Raw, name: &str, partitions: i32) {
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    let resp = raw.call(7, &CreateTopicsRequest::default().with_topics(vec![t])).await;
    assert_eq!(resp.topics[0].error_code, 0);
}

async fn init(raw: &mut Raw, version: i16, id: Option<&str>, timeout_ms: i32) -> InitProducerIdResponse {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(id.map(txn))
        .with_transaction_timeout_ms(timeout_ms);
    raw.call(version, &req).await
}

/// InitProducerId until it stops answering CONCURRENT_TRANSACTIONS (a fenced transaction is
/// being aborted), as clients retry.
async fn init_retrying(raw: &mut Raw, version: i16, id: &str, timeout_ms: i32) -> (i64, i16) {
    for _ in 0..100 {
        let r = init(raw, version, Some(id), timeout_ms).await;
        if r.error_code == CONCURRENT_TRANSACTIONS {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert_eq!(r.error_code, 0, "InitProducerId v{version}");
        return (r.producer_id.0, r.producer_epoch);
    }
    panic!("InitProducerId kept answering CONCURRENT_TRANSACTIONS");
}

/// AddPartitionsToTxn at `version` (v4+: one batched transaction); one code per partition.
async fn add(
    raw: &mut Raw,
    version: i16,
    who: (&str, i64, i16),
    t: &str,
    partitions: &[i32],
    verify_only: bool,
) -> Vec<i16> {
    let (id, pid, epoch) = who;
    let topics = vec![
        AddPartitionsToTxnTopic::default()
            .with_name(topic(t))
            .with_partitions(partitions.to_vec()),
    ];
    let results: Vec<AddPartitionsToTxnTopicResult> = if version <= 3 {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn(id))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(topics);
        raw.call(version, &req).await.results_by_topic_v3_and_below
    } else {
        let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(txn(id))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_verify_only(verify_only)
                .with_topics(topics),
        ]);
        let resp = raw.call(version, &req).await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.results_by_transaction.len(), 1);
        resp.results_by_transaction.into_iter().next().unwrap().topic_results
    };
    results
        .iter()
        .flat_map(|t| t.results_by_partition.iter().map(|p| p.partition_error_code))
        .collect()
}

fn end_request(id: &str, pid: i64, epoch: i16, commit: bool) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(txn(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit)
}

async fn end(raw: &mut Raw, version: i16, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    raw.call(version, &end_request(id, pid, epoch, commit)).await.error_code
}

async fn describe(raw: &mut Raw, id: &str) -> describe_transactions_response::TransactionState {
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![txn(id)]);
    raw.call(0, &req).await.transaction_states.into_iter().next().unwrap()
}

async fn add_offsets(raw: &mut Raw, version: i16, id: &str, pid: i64, epoch: i16, group: &str) -> i16 {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(GroupId(s(group)));
    raw.call(version, &req).await.error_code
}

async fn txn_commit(raw: &mut Raw, version: i16, who: (&str, i64, i16), group: &str, t: &str, offset: i64) -> i16 {
    let (id, pid, epoch) = who;
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(txn(id))
        .with_group_id(GroupId(s(group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(topic(t))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1)
                        .with_committed_metadata(Some(s("m"))),
                ]),
        ]);
    let resp = raw.call(version, &req).await;
    resp.topics[0].partitions[0].error_code
}

async fn committed(raw: &mut Raw, group: &str, t: &str) -> i64 {
    let req = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(t))
                .with_partition_indexes(vec![0]),
        ]));
    let resp = raw.call(7, &req).await;
    resp.topics[0].partitions[0].committed_offset
}

/// OffsetFetch with require_stable (KIP-447): (partition error, offset).
async fn fetch_stable(raw: &mut Raw, version: i16, group: &str, t: &str) -> (i16, i64) {
    if version >= 8 {
        let req = OffsetFetchRequest::default()
            .with_require_stable(true)
            .with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(group)))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(topic(t))
                            .with_partition_indexes(vec![0]),
                    ])),
            ]);
        let resp = raw.call(version, &req).await;
        let p = &resp.groups[0].topics[0].partitions[0];
        return (p.error_code, p.committed_offset);
    }
    let req = OffsetFetchRequest::default()
        .with_require_stable(true)
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(t))
                .with_partition_indexes(vec![0]),
        ]));
    let resp = raw.call(version, &req).await;
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.committed_offset)
}

#[tokio::test]
async fn init_producer_id_without_transactional_id_hands_out_fresh_ids_at_every_version() {
    // Kafka's TransactionCoordinator.handleInitProducerId: no transactional id → a new producer
    // id at epoch 0, even for an idempotent producer's KIP-360 bump (v3+ with id and epoch).
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let mut seen = std::collections::HashSet::new();
    for version in 0..=5 {
        let r = init(&mut raw, version, None, 0).await;
        assert_eq!((r.error_code, r.producer_epoch), (0, 0), "v{version}");
        assert!(
            r.producer_id.0 >= 0 && seen.insert(r.producer_id.0),
            "v{version}: a new id"
        );
        if version >= 3 {
            let bump = InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(r.producer_id)
                .with_producer_epoch(3);
            let b = raw.call(version, &bump).await;
            assert_eq!((b.error_code, b.producer_epoch), (0, 0), "v{version} bump");
            assert!(seen.insert(b.producer_id.0), "v{version}: the bump gets a new id");
            // Both or neither.
            let half = InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(3);
            assert_eq!(raw.call(version, &half).await.error_code, INVALID_REQUEST, "v{version}");
        }
    }
}

#[tokio::test]
async fn transactional_init_bumps_the_epoch_and_checks_the_timeout_at_every_version() {
    let broker = TestBroker::start(&[("transaction.max.timeout.ms", "60000")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    for version in 0..=5 {
        let id = unique("init");
        let a = init(&mut raw, version, Some(&id), 10_000).await;
        assert_eq!((a.error_code, a.producer_epoch), (0, 0), "v{version}");
        let b = init(&mut raw, version, Some(&id), 10_000).await;
        assert_eq!(
            (b.error_code, b.producer_id, b.producer_epoch),
            (0, a.producer_id, 1),
            "v{version}"
        );
        let too_long = init(&mut raw, version, Some(&id), 60_001).await;
        assert_eq!(too_long.error_code, INVALID_TRANSACTION_TIMEOUT, "v{version}");
        assert_eq!(
            init(&mut raw, version, Some(""), 10_000).await.error_code,
            INVALID_REQUEST
        );
    }
}

#[tokio::test]
async fn find_coordinator_names_this_node_for_transactions_and_creates_the_topic() {
    let broker = TestBroker::start(&[("transaction.state.log.num.partitions", "3")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    // v0 has no key type (groups only).
    for version in 1..=6 {
        let mut req = FindCoordinatorRequest::default().with_key_type(1);
        if version >= 4 {
            req.coordinator_keys = vec![s("my-txn")];
        } else {
            req.key = s("my-txn");
        }
        let resp = raw.call(version, &req).await;
        let (code, port) = if version >= 4 {
            (resp.coordinators[0].error_code, resp.coordinators[0].port)
        } else {
            (resp.error_code, resp.port)
        };
        assert_eq!((code, port), (0, i32::from(broker.addr.port())), "v{version}");
    }
    let meta = raw
        .call(
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic("__transaction_state"))),
            ])),
        )
        .await;
    assert_eq!(meta.topics[0].error_code, 0);
    assert_eq!(meta.topics[0].partitions.len(), 3);
}

#[tokio::test]
async fn a_transaction_commits_and_end_txn_retries_are_answered_at_every_version() {
    // Kafka's endTransaction: a retried EndTxn with the same result succeeds, the other
    // result is INVALID_TXN_STATE; EndTxn with no transaction is INVALID_TXN_STATE.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "orders", 3).await;
    for version in 0..=5i16 {
        let end_version = version.min(4);
        let id = unique("commit");
        let (pid, epoch) = init_retrying(&mut raw, 3, &id, 60_000).await;
        assert_eq!(
            end(&mut raw, end_version, &id, pid, epoch, true).await,
            INVALID_TXN_STATE
        );
        assert_eq!(
            add(&mut raw, version, (&id, pid, epoch), "orders", &[0, 2], false).await,
            vec![0, 0]
        );
        let d = describe(&mut raw, &id).await;
        assert_eq!(d.transaction_state.as_str(), "Ongoing");
        assert_eq!(d.topics[0].partitions, vec![0, 2]);
        assert!(d.transaction_start_time_ms > 0);
        // Unknown partitions: nothing added, the rest not attempted.
        assert_eq!(
            add(&mut raw, version, (&id, pid, epoch), "orders", &[1, 9], false).await,
            vec![ResponseError::OperationNotAttempted.code(), 3]
        );
        let commit = version % 2 == 0;
        assert_eq!(
            end(&mut raw, end_version, &id, pid, epoch, commit).await,
            0,
            "v{version}"
        );
        let d = describe(&mut raw, &id).await;
        let expected = if commit { "CompleteCommit" } else { "CompleteAbort" };
        assert_eq!(d.transaction_state.as_str(), expected, "v{version}");
        assert!(d.topics.is_empty());
        assert_eq!(
            end(&mut raw, end_version, &id, pid, epoch, commit).await,
            0,
            "retry v{version}"
        );
        assert_eq!(
            end(&mut raw, end_version, &id, pid, epoch, !commit).await,
            INVALID_TXN_STATE
        );
        // Unknown ids and producers.
        assert_eq!(
            end(&mut raw, end_version, "no-such-txn", pid, epoch, true).await,
            INVALID_PRODUCER_ID_MAPPING
        );
        assert_eq!(
            add(&mut raw, version, (&id, pid + 1, epoch), "orders", &[0], false).await,
            vec![INVALID_PRODUCER_ID_MAPPING]
        );
    }
}

#[tokio::test]
async fn a_second_producer_fences_the_first_and_aborts_its_transaction() {
    // Zombie fencing (KIP-98; Kafka's PrepareEpochFence): InitProducerId for a transactional id
    // whose transaction is ongoing aborts it with a bumped epoch and answers
    // CONCURRENT_TRANSACTIONS; the old epoch is then PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
    // before KIP-588's versions).
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "fenced", 1).await;
    for version in 0..=5i16 {
        let id = unique("zombie");
        let (pid, old) = init_retrying(&mut raw, 4, &id, 60_000).await;
        assert_eq!(add(&mut raw, 3, (&id, pid, old), "fenced", &[0], false).await, vec![0]);
        let r = init(&mut raw, version, Some(&id), 60_000).await;
        assert_eq!(r.error_code, CONCURRENT_TRANSACTIONS, "v{version}");
        let d = describe(&mut raw, &id).await;
        assert_eq!(
            (d.transaction_state.as_str(), d.producer_epoch),
            ("CompleteAbort", old + 1)
        );
        let (pid2, new) = init_retrying(&mut raw, version, &id, 60_000).await;
        assert_eq!((pid2, new), (pid, old + 2));
        let fenced = if version >= 2 {
            PRODUCER_FENCED
        } else {
            INVALID_PRODUCER_EPOCH
        };
        let add_version = version.min(5);
        assert_eq!(
            add(&mut raw, add_version, (&id, pid, old), "fenced", &[0], false).await,
            vec![fenced],
            "AddPartitionsToTxn v{add_version}"
        );
        assert_eq!(
            end(&mut raw, version.min(4), &id, pid, old, true).await,
            fenced,
            "EndTxn v{version}"
        );
        assert_eq!(add_offsets(&mut raw, version.min(4), &id, pid, old, "g").await, fenced);
        // The new producer works.
        assert_eq!(add(&mut raw, 3, (&id, pid, new), "fenced", &[0], false).await, vec![0]);
        assert_eq!(end(&mut raw, 3, &id, pid, new, true).await, 0);
    }
    // InitProducerId v3+ naming a fenced epoch is fenced too (KIP-360).
    let id = unique("kip360");
    let (pid, e0) = init_retrying(&mut raw, 4, &id, 60_000).await;
    let (_, e1) = init_retrying(&mut raw, 4, &id, 60_000).await;
    assert_eq!(e1, e0 + 1);
    let stale = InitProducerIdRequest::default()
        .with_transactional_id(Some(txn(&id)))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(e0);
    assert_eq!(raw.call(3, &stale).await.error_code, INVALID_PRODUCER_EPOCH);
    assert_eq!(raw.call(4, &stale).await.error_code, PRODUCER_FENCED);
}

#[tokio::test]
async fn end_txn_v5_bumps_the_epoch_at_every_end() {
    // KIP-890 part 2 (transaction version 2, Kafka's endTransaction for TV_2): each commit or
    // abort bumps the epoch and answers the producer id and epoch to go on with; a retry names
    // the epoch before the bump; an abort needs no partition; a commit of nothing is refused.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "tv2", 1).await;
    let id = unique("tv2");
    let (pid, e) = init_retrying(&mut raw, 5, &id, 60_000).await;
    // A broker adds the partition of a transaction-version-2 Produce (AddPartitionsToTxn v5).
    assert_eq!(add(&mut raw, 5, (&id, pid, e), "tv2", &[0], false).await, vec![0]);
    let call = |epoch: i16, commit: bool| {
        EndTxnRequest::default()
            .with_transactional_id(txn(&id))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit)
    };
    let r = raw.call(5, &call(e, true)).await;
    assert_eq!((r.error_code, r.producer_id.0, r.producer_epoch), (0, pid, e + 1));
    let d = describe(&mut raw, &id).await;
    assert_eq!(
        (d.transaction_state.as_str(), d.producer_epoch),
        ("CompleteCommit", e + 1)
    );
    let retry = raw.call(5, &call(e, true)).await;
    assert_eq!(
        (retry.error_code, retry.producer_id.0, retry.producer_epoch),
        (0, pid, e + 1)
    );
    assert_eq!(raw.call(5, &call(e, false)).await.error_code, INVALID_TXN_STATE);
    assert_eq!(
        raw.call(5, &call(e + 1, true)).await.error_code,
        INVALID_TXN_STATE,
        "nothing to commit"
    );
    let empty_abort = raw.call(5, &call(e + 1, false)).await;
    assert_eq!((empty_abort.error_code, empty_abort.producer_epoch), (0, e + 2));
    let fenced = raw.call(5, &call(e, true)).await;
    assert_eq!(
        (fenced.error_code, fenced.producer_id.0, fenced.producer_epoch),
        (PRODUCER_FENCED, -1, -1)
    );
    // The next transaction runs at the bumped epoch; EndTxn v4 keeps the classic rules.
    assert_eq!(add(&mut raw, 3, (&id, pid, e + 2), "tv2", &[0], false).await, vec![0]);
    assert_eq!(end(&mut raw, 4, &id, pid, e + 2, true).await, 0);
    assert_eq!(describe(&mut raw, &id).await.producer_epoch, e + 2);
}

#[tokio::test]
async fn transaction_version_2_clients_send_neither_add_partitions_nor_add_offsets() {
    // KIP-890 part 2, as a Java 4.x producer runs it when ApiVersions finalizes
    // transaction.version 2: Produce v12+ puts the partition in the transaction (the broker
    // asks the coordinator to add it), TxnOffsetCommit v5 the group's offsets partition, and
    // EndTxn v5 bumps the epoch, so a late write of the ended transaction is fenced.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = unique("tv2-out");
    let input = unique("tv2-in");
    let group = unique("tv2-group");
    create(&mut raw, &t, 1).await;
    create(&mut raw, &input, 1).await;
    let id = unique("tv2-enrol");
    let (pid, e) = init_retrying(&mut raw, 5, &id, 60_000).await;
    // Up to v11 the client must add the partition itself: refused, nothing written.
    assert_eq!(
        produce_txn(&mut raw, 11, &id, &t, txn_batch(2, pid, e, 0)).await,
        TRANSACTION_ABORTABLE
    );
    assert_eq!(describe(&mut raw, &id).await.transaction_state.as_str(), "Empty");
    assert_eq!(produce_txn(&mut raw, 12, &id, &t, txn_batch(2, pid, e, 0)).await, 0); // 0-1
    let d = describe(&mut raw, &id).await;
    let listed: Vec<(String, Vec<i32>)> = d
        .topics
        .iter()
        .map(|x| (x.topic.0.to_string(), x.partitions.clone()))
        .collect();
    assert_eq!(
        (d.transaction_state.as_str(), listed),
        ("Ongoing", vec![(t.clone(), vec![0])])
    );
    // Later batches of the same transaction go in as well.
    assert_eq!(produce_txn(&mut raw, 12, &id, &t, txn_batch(1, pid, e, 2)).await, 0); // 2
    assert_eq!(txn_commit(&mut raw, 5, (&id, pid, e), &group, &input, 42).await, 0);
    assert_eq!(
        fetch_stable(&mut raw, 8, &group, &input).await.0,
        UNSTABLE_OFFSET_COMMIT,
        "the offsets wait for the commit"
    );
    let (bytes, hw, lso, _) = fetch_committed(&mut raw, 12, &t).await;
    assert_eq!((bytes, hw, lso), (0, 3, 0), "nothing is stable before the commit");
    let r = raw.call(5, &end_request(&id, pid, e, true)).await;
    assert_eq!((r.error_code, r.producer_id.0, r.producer_epoch), (0, pid, e + 1));
    let (bytes, hw, lso, aborted) = fetch_committed(&mut raw, 12, &t).await;
    assert!(bytes > 0);
    assert_eq!((hw, lso, aborted), (4, 4, vec![]), "3 records and the commit marker");
    assert_eq!(fetch_stable(&mut raw, 8, &group, &input).await, (0, 42));
    // A late batch of the ended transaction, at its old epoch: fenced, nothing written.
    assert_eq!(
        produce_txn(&mut raw, 12, &id, &t, txn_batch(1, pid, e, 3)).await,
        INVALID_PRODUCER_EPOCH
    );
    assert_eq!(
        txn_commit(&mut raw, 5, (&id, pid, e), &group, &input, 99).await,
        INVALID_PRODUCER_EPOCH
    );
    // The next transaction runs at the bumped epoch, its sequence from 0; aborted, its records
    // are listed as such and the offsets dropped.
    assert_eq!(produce_txn(&mut raw, 12, &id, &t, txn_batch(2, pid, e + 1, 0)).await, 0); // 4-5
    assert_eq!(txn_commit(&mut raw, 5, (&id, pid, e + 1), &group, &input, 50).await, 0);
    let r = raw.call(5, &end_request(&id, pid, e + 1, false)).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, e + 2));
    let (_, hw, lso, aborted) = fetch_committed(&mut raw, 12, &t).await;
    assert_eq!((hw, lso, aborted), (7, 7, vec![(pid, 4)]));
    assert_eq!(fetch_stable(&mut raw, 8, &group, &input).await, (0, 42));
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn a_late_version_2_marker_does_not_end_the_next_transaction() {
    // KIP-1228 (WriteTxnMarkers v2): under transaction version 2 the coordinator bumps the
    // epoch before it writes the markers, so a leader takes only a marker newer than the
    // producer's epoch there. A late copy of a marker, arriving once the producer's next
    // transaction (at that epoch) is open, is refused instead of ending it; a retry of a marker
    // already written is answered without writing it twice. Markers of transaction version 0
    // (what the admin client's abortTransaction sends) keep the old rule.
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = unique("tv2-late");
    create(&mut raw, &t, 1).await;
    let id = unique("tv2-late-id");
    let (pid, e) = init_retrying(&mut raw, 5, &id, 60_000).await;
    assert_eq!(produce_txn(&mut raw, 12, &id, &t, txn_batch(2, pid, e, 0)).await, 0); // 0-1
    let r = raw.call(5, &end_request(&id, pid, e, true)).await;
    assert_eq!((r.error_code, r.producer_epoch), (0, e + 1)); // the marker at 2, epoch e + 1
    let producers = raw
        .call(
            0,
            &DescribeProducersRequest::default().with_topics(vec![
                TopicRequest::default()
                    .with_name(topic(&t))
                    .with_partition_indexes(vec![0]),
            ]),
        )
        .await;
    let coordinator_epoch = producers.topics[0].partitions[0].active_producers[0].coordinator_epoch;
    let marker = |version: i8, epoch: i16, commit: bool| {
        WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_transaction_result(commit)
                .with_coordinator_epoch(coordinator_epoch)
                .with_transaction_version(version)
                .with_topics(vec![
                    WritableTxnMarkerTopic::default()
                        .with_name(topic(&t))
                        .with_partition_indexes(vec![0]),
                ]),
        ])
    };
    let code = |resp: WriteTxnMarkersResponse| resp.markers[0].topics[0].partitions[0].error_code;
    // The coordinator's marker again, as a retry whose answer was lost: answered, not written.
    assert_eq!(code(raw.call(2, &marker(2, e + 1, true)).await), 0);
    assert_eq!(
        latest_offset(&mut raw, &t).await,
        3,
        "records 0-1 and one commit marker"
    );
    // The next transaction, at epoch e + 1.
    assert_eq!(produce_txn(&mut raw, 12, &id, &t, txn_batch(2, pid, e + 1, 0)).await, 0); // 3-4
    // A late copy of the first transaction's marker: refused, the transaction stays open.
    assert_eq!(code(raw.call(2, &marker(2, e + 1, true)).await), INVALID_PRODUCER_EPOCH);
    let (_, hw, lso, _) = fetch_committed(&mut raw, 12, &t).await;
    assert_eq!(
        (hw, lso),
        (5, 3),
        "the open transaction still holds the last stable offset"
    );
    // A version 0 marker of the producer's epoch is taken, as abortTransaction needs.
    assert_eq!(code(raw.call(2, &marker(0, e + 1, false)).await), 0);
    let (_, hw, lso, aborted) = fetch_committed(&mut raw, 12, &t).await;
    assert_eq!((hw, lso, aborted), (6, 6, vec![(pid, 3)]));
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn verify_only_reports_partitions_outside_the_transaction() {
    // KIP-890 part 1: AddPartitionsToTxn v4+ verify_only adds nothing; a partition not in the
    // transaction is TRANSACTION_ABORTABLE from v5, INVALID_TXN_STATE at v4.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "verified", 2).await;
    let id = unique("verify");
    let (pid, epoch) = init_retrying(&mut raw, 4, &id, 60_000).await;
    assert_eq!(
        add(&mut raw, 3, (&id, pid, epoch), "verified", &[0], false).await,
        vec![0]
    );
    assert_eq!(
        add(&mut raw, 4, (&id, pid, epoch), "verified", &[0, 1], true).await,
        vec![0, INVALID_TXN_STATE]
    );
    assert_eq!(
        add(&mut raw, 5, (&id, pid, epoch), "verified", &[0, 1], true).await,
        vec![0, TRANSACTION_ABORTABLE]
    );
    assert_eq!(
        describe(&mut raw, &id).await.topics[0].partitions,
        vec![0],
        "nothing added"
    );
    assert_eq!(
        add(&mut raw, 5, (&id, pid, epoch + 1), "verified", &[0], true).await,
        vec![PRODUCER_FENCED]
    );
}

#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    // Kafka's abortTimedOutTransactions: the coordinator bumps the epoch and aborts.
    let broker = TestBroker::start(&[("transaction.abort.timed.out.transaction.cleanup.interval.ms", "50")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "slow", 1).await;
    let id = unique("timeout");
    let (pid, epoch) = init_retrying(&mut raw, 4, &id, 300).await;
    assert_eq!(add(&mut raw, 3, (&id, pid, epoch), "slow", &[0], false).await, vec![0]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let d = describe(&mut raw, &id).await;
        if d.transaction_state.as_str() == "CompleteAbort" {
            assert_eq!(d.producer_epoch, epoch + 1);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {}",
            d.transaction_state.as_str()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(end(&mut raw, 3, &id, pid, epoch, true).await, PRODUCER_FENCED);
}

#[tokio::test]
async fn transactional_offsets_are_invisible_until_commit_and_dropped_on_abort() {
    // KIP-98: TxnOffsetCommit writes pending offsets; the commit marker makes them visible,
    // an abort drops them. They survive a restart the same way.
    let broker = TestBroker::start(&[("offsets.topic.num.partitions", "3")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "input", 1).await;
    for version in 0..=5i16 {
        let group = unique("txn-group");
        let id = unique("offsets");
        let (pid, epoch) = init_retrying(&mut raw, 4, &id, 60_000).await;
        if version < 5 {
            // KIP-890 part 1: the offsets partition must be in the transaction first.
            let expected = if version >= 4 {
                TRANSACTION_ABORTABLE
            } else {
                INVALID_TXN_STATE
            };
            assert_eq!(
                txn_commit(&mut raw, version, (&id, pid, epoch), &group, "input", 5).await,
                expected
            );
            assert_eq!(add_offsets(&mut raw, version.min(4), &id, pid, epoch, &group).await, 0);
        }
        assert_eq!(
            txn_commit(&mut raw, version, (&id, pid, epoch), &group, "input", 10).await,
            0,
            "v{version}"
        );
        assert_eq!(
            committed(&mut raw, &group, "input").await,
            -1,
            "pending until the commit"
        );
        assert_eq!(
            fetch_stable(&mut raw, 7, &group, "input").await,
            (88, -1),
            "UNSTABLE_OFFSET_COMMIT"
        );
        assert_eq!(fetch_stable(&mut raw, 8, &group, "input").await, (88, -1));
        assert_eq!(end(&mut raw, 3, &id, pid, epoch, true).await, 0);
        assert_eq!(committed(&mut raw, &group, "input").await, 10, "v{version}");
        assert_eq!(fetch_stable(&mut raw, 8, &group, "input").await, (0, 10));
        // An aborted commit is dropped.
        assert_eq!(add_offsets(&mut raw, 3, &id, pid, epoch, &group).await, 0);
        assert_eq!(
            txn_commit(&mut raw, version, (&id, pid, epoch), &group, "input", 20).await,
            0
        );
        assert_eq!(end(&mut raw, 3, &id, pid, epoch, false).await, 0);
        assert_eq!(committed(&mut raw, &group, "input").await, 10, "v{version}");
        // A fenced producer cannot commit offsets.
        let (_, new) = init_retrying(&mut raw, 4, &id, 60_000).await;
        assert_eq!(add_offsets(&mut raw, 3, &id, pid, new, &group).await, 0);
        assert_eq!(
            txn_commit(&mut raw, version, (&id, pid, epoch), &group, "input", 30).await,
            INVALID_PRODUCER_EPOCH
        );
        assert_eq!(end(&mut raw, 3, &id, pid, new, false).await, 0);
    }
    // A pending commit at restart stays pending, then is settled by its marker.
    let group = unique("restart-group");
    let id = unique("restart");
    let (pid, epoch) = init_retrying(&mut raw, 4, &id, 60_000).await;
    assert_eq!(add_offsets(&mut raw, 3, &id, pid, epoch, &group).await, 0);
    assert_eq!(txn_commit(&mut raw, 3, (&id, pid, epoch), &group, "input", 42).await, 0);
    drop(raw);
    let broker = broker.restart(&[("offsets.topic.num.partitions", "3")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(committed(&mut raw, &group, "input").await, -1);
    let d = describe(&mut raw, &id).await;
    assert_eq!(
        (d.transaction_state.as_str(), d.producer_id.0, d.producer_epoch),
        ("Ongoing", pid, epoch)
    );
    assert_eq!(end(&mut raw, 3, &id, pid, epoch, true).await, 0);
    assert_eq!(committed(&mut raw, &group, "input").await, 42);
    drop(raw);
    let broker = broker.restart(&[("offsets.topic.num.partitions", "3")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert_eq!(
        committed(&mut raw, &group, "input").await,
        42,
        "the commit marker was replayed"
    );
}

#[tokio::test]
async fn describe_and_list_transactions_filter_as_kafka_does() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "listed", 1).await;
    let ongoing = unique("list-ongoing");
    let empty = unique("list-empty");
    let (pid, epoch) = init_retrying(&mut raw, 4, &ongoing, 60_000).await;
    let (empty_pid, _) = init_retrying(&mut raw, 4, &empty, 60_000).await;
    assert_eq!(
        add(&mut raw, 3, (&ongoing, pid, epoch), "listed", &[0], false).await,
        vec![0]
    );

    let unknown = describe(&mut raw, "never-seen").await;
    assert_eq!(unknown.error_code, ResponseError::TransactionalIdNotFound.code());
    let d = describe(&mut raw, &ongoing).await;
    assert_eq!(
        (d.error_code, d.producer_id.0, d.transaction_timeout_ms),
        (0, pid, 60_000)
    );

    let ids = |r: &ListTransactionsResponse| -> Vec<String> {
        r.transaction_states
            .iter()
            .map(|t| t.transactional_id.0.to_string())
            .collect()
    };
    for version in 0..=2 {
        let all = raw.call(version, &ListTransactionsRequest::default()).await;
        assert!(ids(&all).contains(&ongoing) && ids(&all).contains(&empty), "v{version}");
        let only_ongoing = raw
            .call(
                version,
                &ListTransactionsRequest::default().with_state_filters(vec![s("Ongoing"), s("Nonsense")]),
            )
            .await;
        assert_eq!(ids(&only_ongoing), vec![ongoing.clone()], "v{version}");
        assert_eq!(only_ongoing.unknown_state_filters, vec![s("Nonsense")]);
        let by_pid = raw
            .call(
                version,
                &ListTransactionsRequest::default().with_producer_id_filters(vec![ProducerId(empty_pid)]),
            )
            .await;
        assert_eq!(ids(&by_pid), vec![empty.clone()], "v{version}");
        assert_eq!(by_pid.transaction_states[0].transaction_state.as_str(), "Empty");
    }
    // v1: only transactions running longer than the duration (Empty ones have no start, so
    // count as running forever, as in Kafka).
    let long = raw
        .call(
            1,
            &ListTransactionsRequest::default()
                .with_state_filters(vec![s("Ongoing")])
                .with_duration_filter(3_600_000),
        )
        .await;
    assert!(ids(&long).is_empty());
    // v2: a pattern matching the whole id.
    let pattern = format!("{}.*", &ongoing[..ongoing.len() - 2]);
    let by_pattern = raw
        .call(
            2,
            &ListTransactionsRequest::default().with_transactional_id_pattern(Some(s(&pattern))),
        )
        .await;
    assert_eq!(ids(&by_pattern), vec![ongoing.clone()]);
    let partial = raw
        .call(
            2,
            &ListTransactionsRequest::default().with_transactional_id_pattern(Some(s("list"))),
        )
        .await;
    assert!(ids(&partial).is_empty(), "a pattern must match the whole id");
    let bad = raw
        .call(
            2,
            &ListTransactionsRequest::default().with_transactional_id_pattern(Some(s("(unclosed"))),
        )
        .await;
    assert_eq!(bad.error_code, ResponseError::InvalidRegularExpression.code());
}

#[tokio::test]
async fn transaction_state_survives_a_restart() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "durable", 2).await;
    let id = unique("durable");
    let (pid, epoch) = init_retrying(&mut raw, 4, &id, 45_000).await;
    assert_eq!(
        add(&mut raw, 3, (&id, pid, epoch), "durable", &[1], false).await,
        vec![0]
    );
    drop(raw);
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let d = describe(&mut raw, &id).await;
    assert_eq!(
        (
            d.transaction_state.as_str(),
            d.producer_id.0,
            d.producer_epoch,
            d.transaction_timeout_ms
        ),
        ("Ongoing", pid, epoch, 45_000)
    );
    assert_eq!(d.topics[0].partitions, vec![1]);
    // A new producer instance fences the restored transaction.
    assert_eq!(
        init(&mut raw, 4, Some(&id), 45_000).await.error_code,
        CONCURRENT_TRANSACTIONS
    );
    let (pid2, epoch2) = init_retrying(&mut raw, 4, &id, 45_000).await;
    assert_eq!((pid2, epoch2), (pid, epoch + 2));
    // Producer ids are never reissued after a restart.
    let fresh = init(&mut raw, 4, None, 0).await;
    assert!(fresh.producer_id.0 != pid);
}

// Real clients: librdkafka's transactional producer and a read_committed consumer.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_commits_and_aborts_transactions_with_offsets() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{FutureRecord, Producer};
    use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

    let broker = TestBroker::start(&[("group.initial.rebalance.delay.ms", "0")]).await;
    let bootstrap = broker.bootstrap();
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "eos-out", 1).await;
    create(&mut raw, "eos-in", 1).await;
    let group = unique("eos-group");
    let producer = producer(
        &bootstrap,
        &[
            ("transactional.id", "sluice-eos"),
            ("enable.idempotence", "true"),
            ("transaction.timeout.ms", "60000"),
        ],
    );
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).expect("init_transactions");

    // A committed transaction, with offsets for the group.
    producer.begin_transaction().unwrap();
    for i in 0..5 {
        let value = format!("committed-{i}");
        producer
            .send(FutureRecord::<(), _>::to("eos-out").payload(&value), timeout)
            .await
            .expect("delivered");
    }
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("eos-in", 0, Offset::Offset(7)).unwrap();
    let meta_consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .create()
        .unwrap();
    let group_metadata = meta_consumer.group_metadata().unwrap();
    producer
        .send_offsets_to_transaction(&offsets, &group_metadata, timeout)
        .expect("send_offsets_to_transaction");
    producer.commit_transaction(timeout).expect("commit");

    // An aborted one.
    producer.begin_transaction().unwrap();
    for i in 0..3 {
        let value = format!("aborted-{i}");
        producer
            .send(FutureRecord::<(), _>::to("eos-out").payload(&value), timeout)
            .await
            .expect("delivered");
    }
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset("eos-in", 0, Offset::Offset(99)).unwrap();
    producer
        .send_offsets_to_transaction(&offsets, &group_metadata, timeout)
        .unwrap();
    producer.abort_transaction(timeout).expect("abort");

    // A last committed one, after the aborted records.
    producer.begin_transaction().unwrap();
    producer
        .send(FutureRecord::<(), _>::to("eos-out").payload("last"), timeout)
        .await
        .unwrap();
    producer.commit_transaction(timeout).unwrap();

    assert_eq!(
        committed(&mut raw, &group, "eos-in").await,
        7,
        "the aborted offset was dropped"
    );

    let consumer = consumer(&bootstrap, &[("isolation.level", "read_committed")]);
    assign(&consumer, "eos-out", &[0], Offset::Beginning);
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while values.len() < 6 && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            values.push(String::from_utf8(m.payload().unwrap().to_vec()).unwrap());
        }
    }
    let expected: Vec<String> = (0..5)
        .map(|i| format!("committed-{i}"))
        .chain(["last".to_string()])
        .collect();
    assert_eq!(values, expected, "read_committed sees committed records only");

    // A second producer with the same transactional.id fences the first.
    let zombie_killer = producer_with(&bootstrap, "sluice-eos");
    zombie_killer.init_transactions(timeout).unwrap();
    producer.begin_transaction().unwrap();
    let sent = producer
        .send(FutureRecord::<(), _>::to("eos-out").payload("zombie"), timeout)
        .await;
    let committed = producer.commit_transaction(timeout);
    assert!(sent.is_err() || committed.is_err(), "the fenced producer cannot commit");
}

fn producer_with(bootstrap: &str, transactional_id: &str) -> rdkafka::producer::FutureProducer {
    producer(
        bootstrap,
        &[("transactional.id", transactional_id), ("enable.idempotence", "true")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_empty_transactions_commit_and_abort() {
    // librdkafka 0103's do_test_empty_txn: transactions with nothing produced, with and without
    // offsets, end cleanly.
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::Producer;
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};

    let broker = TestBroker::start(&[("group.initial.rebalance.delay.ms", "0")]).await;
    let bootstrap = broker.bootstrap();
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "empty-in", 1).await;
    let group = unique("empty-group");
    let producer = producer_with(&bootstrap, &unique("empty-txn"));
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    let meta_consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .create()
        .unwrap();
    let group_metadata = meta_consumer.group_metadata().unwrap();
    for (send_offsets, commit) in [(false, true), (false, false), (true, true), (true, false)] {
        producer.begin_transaction().unwrap();
        if send_offsets {
            let mut offsets = TopicPartitionList::new();
            offsets
                .add_partition_offset("empty-in", 0, Offset::Offset(if commit { 3 } else { 4 }))
                .unwrap();
            producer
                .send_offsets_to_transaction(&offsets, &group_metadata, timeout)
                .unwrap();
        }
        let ended = if commit {
            producer.commit_transaction(timeout)
        } else {
            producer.abort_transaction(timeout)
        };
        ended.unwrap_or_else(|e| panic!("offsets {send_offsets}, commit {commit}: {e}"));
    }
    assert_eq!(committed(&mut raw, &group, "empty-in").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_a_fenced_producer_can_neither_produce_nor_commit() {
    // librdkafka 0103's do_test_fenced_txn: a second producer with the same transactional.id
    // aborts the first one's open transaction; the first gets a fatal fenced error.
    use rdkafka::producer::{FutureRecord, Producer};
    use rdkafka::{Message, Offset};

    let broker = TestBroker::start(&[]).await;
    let bootstrap = broker.bootstrap();
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "fence-out", 1).await;
    let id = unique("fence-txn");
    let timeout = Duration::from_secs(30);
    let first = producer_with(&bootstrap, &id);
    first.init_transactions(timeout).unwrap();
    first.begin_transaction().unwrap();
    first
        .send(FutureRecord::<(), _>::to("fence-out").payload("zombie"), timeout)
        .await
        .unwrap();

    let second = producer_with(&bootstrap, &id);
    second.init_transactions(timeout).unwrap();
    let d = describe(&mut raw, &id).await;
    assert_eq!(
        d.transaction_state.as_str(),
        "Empty",
        "the zombie's transaction was aborted"
    );

    let produced = first
        .send(
            FutureRecord::<(), _>::to("fence-out").payload("late"),
            Duration::from_secs(5),
        )
        .await;
    let committed = first.commit_transaction(Duration::from_secs(10));
    assert!(produced.is_err() || committed.is_err(), "the zombie is fenced");
    assert!(committed.is_err());

    second.begin_transaction().unwrap();
    second
        .send(FutureRecord::<(), _>::to("fence-out").payload("good"), timeout)
        .await
        .unwrap();
    second.commit_transaction(timeout).unwrap();

    let consumer = consumer(&bootstrap, &[("isolation.level", "read_committed")]);
    assign(&consumer, "fence-out", &[0], Offset::Beginning);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut values = Vec::new();
    while !values.contains(&"good".to_string()) && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            values.push(String::from_utf8(m.unwrap().payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(values, vec!["good".to_string()], "nothing of the zombie is visible");
}

#[tokio::test]
async fn transaction_state_survives_kill_9() {
    // Every __transaction_state write is durable before it is answered: after kill -9 the
    // ongoing transaction is there, and the next producer instance fences and aborts it.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let broker = BrokerProcess::spawn(dir.path(), port, &[]);
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "k9", 1).await;
    let committed_id = unique("k9-done");
    let (cpid, cepoch) = init_retrying(&mut raw, 4, &committed_id, 60_000).await;
    assert_eq!(
        add(&mut raw, 3, (&committed_id, cpid, cepoch), "k9", &[0], false).await,
        vec![0]
    );
    assert_eq!(end(&mut raw, 3, &committed_id, cpid, cepoch, true).await, 0);
    let id = unique("k9-open");
    let (pid, epoch) = init_retrying(&mut raw, 4, &id, 60_000).await;
    assert_eq!(add(&mut raw, 3, (&id, pid, epoch), "k9", &[0], false).await, vec![0]);
    drop(raw);
    broker.kill9();

    let broker = BrokerProcess::spawn(dir.path(), port, &[]);
    let mut raw = Raw::connect(broker.addr).await;
    let done = describe(&mut raw, &committed_id).await;
    assert_eq!(done.transaction_state.as_str(), "CompleteCommit");
    assert_eq!(
        end(&mut raw, 3, &committed_id, cpid, cepoch, true).await,
        0,
        "a retried EndTxn"
    );
    let open = describe(&mut raw, &id).await;
    assert_eq!(
        (open.transaction_state.as_str(), open.producer_id.0, open.producer_epoch),
        ("Ongoing", pid, epoch)
    );
    assert_eq!(
        init(&mut raw, 4, Some(&id), 60_000).await.error_code,
        CONCURRENT_TRANSACTIONS
    );
    assert_eq!(init_retrying(&mut raw, 4, &id, 60_000).await, (pid, epoch + 2));
    let fresh = init(&mut raw, 4, None, 0).await;
    assert!(
        fresh.producer_id.0 != pid && fresh.producer_id.0 != cpid,
        "ids are never reissued"
    );
    broker.kill9();
}

/// A batch of `count` records from producer `pid` at `epoch`, first sequence `seq`,
/// transactional.
fn txn_batch(count: usize, pid: i64, epoch: i16, seq: i32) -> bytes::Bytes {
    let records: Vec<(Option<bytes::Bytes>, Option<bytes::Bytes>, i64)> = (0..count)
        .map(|i| {
            (
                Some(bytes::Bytes::from(format!("k{i}"))),
                Some(bytes::Bytes::from("v")),
                1000,
            )
        })
        .collect();
    let mut b = sluice::log::batch::encode_records(&records, kafka_protocol::records::Compression::None)
        .unwrap()
        .to_vec();
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let attributes = i16::from_be_bytes([b[21], b[22]]) | 0x10;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes::Bytes::from(b)
}

async fn produce_txn(raw: &mut Raw, version: i16, id: &str, t: &str, records: bytes::Bytes) -> i16 {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let req = ProduceRequest::default()
        .with_transactional_id(Some(txn(id)))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic(t))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    raw.call(version, &req).await.responses[0].partition_responses[0].error_code
}

/// (records bytes, high watermark, last stable offset, aborted (producer id, first offset)).
async fn fetch_committed(raw: &mut Raw, version: i16, t: &str) -> (usize, i64, i64, Vec<(i64, i64)>) {
    let req = fetch_request(t, 0, 1 << 20, 1 << 20).with_isolation_level(1);
    let resp = raw.call(version, &req).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let aborted = p
        .aborted_transactions
        .as_ref()
        .map(|a| a.iter().map(|x| (x.producer_id.0, x.first_offset)).collect())
        .unwrap_or_default();
    (
        p.records.as_ref().map_or(0, |r| r.len()),
        p.high_watermark,
        p.last_stable_offset,
        aborted,
    )
}

async fn latest_committed(raw: &mut Raw, t: &str) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(1)
        .with_topics(vec![ListOffsetsTopic::default().with_name(topic(t)).with_partitions(
            vec![
                ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1),
            ],
        )]);
    raw.call(5, &req).await.topics[0].partitions[0].offset
}

async fn committed_at_timestamp(raw: &mut Raw, t: &str, timestamp: i64) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(1)
        .with_topics(vec![ListOffsetsTopic::default().with_name(topic(t)).with_partitions(
            vec![
                ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(timestamp),
            ],
        )]);
    raw.call(5, &req).await.topics[0].partitions[0].offset
}

#[tokio::test]
async fn read_committed_stops_at_the_last_stable_offset_and_lists_aborted_transactions() {
    // Kafka: the LSO (UnifiedLog.lastStableOffset), FetchResponse.aborted_transactions,
    // ListOffsets with READ_COMMITTED; KIP-890 part 1 for the refused produce.
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = unique("lso");
    create(&mut raw, &t, 1).await;
    let id = unique("lso-txn");
    let (pid, epoch) = init_retrying(&mut raw, 4, &id, 60_000).await;
    // Not yet added to the transaction: refused (INVALID_TXN_STATE up to v10,
    // TRANSACTION_ABORTABLE from v11), nothing written.
    assert_eq!(
        produce_txn(&mut raw, 9, &id, &t, txn_batch(2, pid, epoch, 0)).await,
        INVALID_TXN_STATE
    );
    assert_eq!(
        produce_txn(&mut raw, 11, &id, &t, txn_batch(2, pid, epoch, 0)).await,
        TRANSACTION_ABORTABLE
    );
    assert_eq!(add(&mut raw, 3, (&id, pid, epoch), &t, &[0], false).await, vec![0]);
    assert_eq!(produce_txn(&mut raw, 9, &id, &t, txn_batch(2, pid, epoch, 0)).await, 0); // offsets 0-1
    for version in [4, 7, 12] {
        let (bytes, hw, lso, _) = fetch_committed(&mut raw, version, &t).await;
        assert_eq!((bytes, hw, lso), (0, 2, 0), "v{version}: nothing is stable yet");
    }
    assert_eq!(latest_committed(&mut raw, &t).await, 0);
    // By timestamp (the records carry 1000), read_committed finds nothing below the LSO yet.
    assert_eq!(committed_at_timestamp(&mut raw, &t, 0).await, -1);
    assert_eq!(end(&mut raw, 3, &id, pid, epoch, false).await, 0); // abort marker at 2
    assert_eq!(committed_at_timestamp(&mut raw, &t, 0).await, 0);
    for version in [4, 7, 12] {
        let (bytes, hw, lso, aborted) = fetch_committed(&mut raw, version, &t).await;
        assert!(bytes > 0, "v{version}");
        assert_eq!((hw, lso), (3, 3), "v{version}");
        assert_eq!(aborted, vec![(pid, 0)], "v{version}");
    }
    assert_eq!(latest_committed(&mut raw, &t).await, 3);
    // The aborted transaction is still listed after a restart (the .txnindex).
    drop(raw);
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let (_, _, lso, aborted) = fetch_committed(&mut raw, 12, &t).await;
    assert_eq!((lso, aborted), (3, vec![(pid, 0)]));
}
