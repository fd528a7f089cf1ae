//! Transactions across a cluster: the partitions of one transaction are led by different
//! brokers, the transactional id's coordinator is one of them and the group's coordinator
//! another. The coordinator writes the markers of its own partitions and sends WriteTxnMarkers
//! (key 27) to the other leaders (Kafka's `TransactionMarkerChannelManager`); a leader that
//! does not coordinate the transactional id verifies a transactional Produce with the
//! coordinator through AddPartitionsToTxn `verify_only` (KIP-890 part 1, Kafka's
//! `AddPartitionsToTxnManager`), or, for Produce v12+ and TxnOffsetCommit v5 (transaction
//! version 2, part 2), has the coordinator add the partition.
//!
//! Each test starts its own three-node cluster (`common::cluster`); a failing test prints the
//! tail of every node's log.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::cluster::{Cluster, POLL_REQUEST_TIMEOUT, try_call};
use common::*;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::Consumer;
use rdkafka::producer::{FutureRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const TRANSACTION_ABORTABLE: i16 = 120;
/// How long the setup steps (topics, coordinators) may take on a loaded machine.
const SETUP_WAIT: Duration = Duration::from_secs(30);

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Creates `name` with `partitions` partitions (RF 1) through node 1, retrying until the
/// quorum takes it, then waits until every node lists it with a leader per partition, all
/// agreeing; returns the leaders by partition.
async fn create_topic(cluster: &Cluster, name: &str, partitions: i32) -> Vec<i32> {
    let deadline = Instant::now() + SETUP_WAIT;
    let request = common::create_topic_request(name, partitions, 10_000);
    let mut attempts = Vec::new();
    loop {
        // 36: TOPIC_ALREADY_EXISTS, after an attempt that timed out but committed.
        match try_call(cluster.addr(1), 7, &request, Duration::from_secs(15)).await {
            Ok(resp) if matches!(resp.topics[0].error_code, 0 | 36) => break,
            other => attempts.push(format!("{other:?}")),
        }
        assert!(
            Instant::now() < deadline,
            "CreateTopics {name}: {attempts:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    loop {
        let mut views = BTreeMap::new();
        for id in cluster.ids() {
            views.insert(id, leaders_seen_by(cluster, id, name, partitions).await);
        }
        let first = views.values().next().cloned().unwrap();
        if let Ok(leaders) = &first
            && views.values().all(|v| v.as_ref() == Ok(leaders))
        {
            return leaders.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the nodes do not agree on {name}: {views:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The leader of each partition of `name` as node `id` lists it, if it lists them all.
async fn leaders_seen_by(cluster: &Cluster, id: i32, name: &str, partitions: i32) -> Result<Vec<i32>, String> {
    let resp = cluster.metadata(id, &[name]).await?;
    let t = resp
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name) && t.error_code == 0)
        .ok_or("not listed")?;
    let mut leaders = vec![-1; usize::try_from(partitions).unwrap()];
    for p in &t.partitions {
        let slot = leaders
            .get_mut(usize::try_from(p.partition_index).unwrap())
            .ok_or("an extra partition")?;
        *slot = p.leader_id.0;
    }
    match leaders.iter().all(|l| *l > 0) {
        true => Ok(leaders),
        false => Err(format!("leaders {leaders:?}")),
    }
}

/// The coordinator of each key (FindCoordinator v4, batched, KIP-699), asked until every key
/// has one: the first lookup creates the internal topic.
async fn coordinators(cluster: &Cluster, key_type: i8, keys: &[String]) -> BTreeMap<String, i32> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(keys.iter().map(|k| s(k)).collect());
    let deadline = Instant::now() + SETUP_WAIT;
    loop {
        let answer = try_call(cluster.addr(1), 4, &request, POLL_REQUEST_TIMEOUT).await;
        if let Ok(resp) = &answer
            && resp.coordinators.len() == keys.len()
            && resp.coordinators.iter().all(|c| c.error_code == 0)
        {
            return resp
                .coordinators
                .iter()
                .map(|c| (c.key.to_string(), c.node_id.0))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "FindCoordinator (key type {key_type}): {answer:?} (node logs follow)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A transactional id and a group whose coordinators are different nodes: (id, its
/// coordinator, group, its coordinator).
async fn txn_and_group_apart(cluster: &Cluster) -> (String, i32, String, i32) {
    let ids: Vec<String> = (0..8).map(|i| unique(&format!("txn{i}"))).collect();
    let groups: Vec<String> = (0..8).map(|i| unique(&format!("group{i}"))).collect();
    let txn_coordinators = coordinators(cluster, KEY_TYPE_TRANSACTION, &ids).await;
    let group_coordinators = coordinators(cluster, KEY_TYPE_GROUP, &groups).await;
    for (id, tc) in &txn_coordinators {
        if let Some((group, gc)) = group_coordinators.iter().find(|(_, gc)| *gc != tc) {
            return (id.clone(), *tc, group.clone(), *gc);
        }
    }
    panic!(
        "8 transactional ids and 8 groups, all coordinated by one node: {txn_coordinators:?} {group_coordinators:?}"
    );
}

/// (log end offset, last stable offset) of `name`/`partition`, asked of its leader.
async fn end_and_stable(cluster: &Cluster, leader: i32, name: &str, partition: i32) -> (i64, i64) {
    let mut offsets = [0i64; 2];
    for (isolation, offset) in offsets.iter_mut().enumerate() {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(i8::try_from(isolation).unwrap())
            .with_topics(vec![
                ListOffsetsTopic::default().with_name(topic(name)).with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_timestamp(-1),
                ]),
            ]);
        let resp = try_call(cluster.addr(leader), 5, &request, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            p.error_code, 0,
            "ListOffsets of {name}/{partition} at its leader {leader}"
        );
        *offset = p.offset;
    }
    (offsets[0], offsets[1])
}

/// Reads partitions `0..partitions` of `name` read_committed from the beginning until
/// `expected` records came, then one more second for any beyond: the values by partition.
fn read_committed(bootstrap: &str, name: &str, partitions: i32, expected: usize) -> BTreeMap<i32, Vec<String>> {
    let consumer = consumer(bootstrap, &[("isolation.level", "read_committed")]);
    assign(&consumer, name, &(0..partitions).collect::<Vec<_>>(), Offset::Beginning);
    let mut values: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    let mut count = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut settle: Option<Instant> = None;
    while settle.is_none_or(|s| Instant::now() < s) && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            values.entry(m.partition()).or_default().push(value);
            count += 1;
        }
        if count >= expected && settle.is_none() {
            settle = Some(Instant::now() + Duration::from_secs(1));
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_and_abort_across_brokers() {
    // Kafka's TransactionMarkerChannelManager: the coordinator sends each leader of the
    // transaction's partitions one WriteTxnMarkers; KIP-447's consume-transform-produce with
    // the group's offsets committed in the transaction (TxnOffsetCommit on the group's
    // coordinator, settled by the marker on its __consumer_offsets partition).
    let cluster = Cluster::start(3).await;
    let bootstrap = cluster.bootstrap();
    let (out, input) = (unique("txn-out"), unique("txn-in"));
    let leaders = create_topic(&cluster, &out, 6).await;
    let mut used = leaders.clone();
    used.sort();
    used.dedup();
    assert_eq!(
        used,
        [1, 2, 3],
        "6 partitions should be led by all 3 nodes: {leaders:?}"
    );
    create_topic(&cluster, &input, 6).await;
    let (txn_id, txn_coordinator, group, group_coordinator) = txn_and_group_apart(&cluster).await;
    println!(
        "{out} leaders {leaders:?}; transaction coordinator {txn_coordinator}, group coordinator {group_coordinator}"
    );

    // The input of the consume-transform-produce step: 3 records per partition.
    let plain = producer(&bootstrap, &[]);
    for p in 0..6 {
        for i in 0..3 {
            let value = format!("in-{p}-{i}");
            plain
                .send(
                    FutureRecord::<(), _>::to(&input).partition(p).payload(&value),
                    Duration::from_secs(30),
                )
                .await
                .unwrap_or_else(|(e, _)| panic!("{value}: {e}"));
        }
    }

    let timeout = Duration::from_secs(30);
    let producer = producer(
        &bootstrap,
        &[
            ("transactional.id", txn_id.as_str()),
            ("enable.idempotence", "true"),
            ("transaction.timeout.ms", "60000"),
        ],
    );
    producer.init_transactions(timeout).expect("init_transactions");
    let send_all = |prefix: &'static str, per_partition: usize| {
        let producer = &producer;
        let out = &out;
        async move {
            for p in 0..6 {
                for i in 0..per_partition {
                    let value = format!("{prefix}-{p}-{i}");
                    producer
                        .send(FutureRecord::<(), _>::to(out).partition(p).payload(&value), timeout)
                        .await
                        .unwrap_or_else(|(e, _)| panic!("{value}: {e}"));
                }
            }
        }
    };

    // 1. Committed: 5 records on every partition.
    producer.begin_transaction().unwrap();
    send_all("committed", 5).await;
    producer.commit_transaction(timeout).expect("commit");

    // 2. Aborted: 3 records on every partition and offsets for the group.
    let reader = consumer(&bootstrap, &[("group.id", group.as_str())]);
    let group_metadata = reader.group_metadata().expect("group metadata");
    producer.begin_transaction().unwrap();
    send_all("aborted", 3).await;
    let mut offsets = TopicPartitionList::new();
    for p in 0..6 {
        offsets.add_partition_offset(&input, p, Offset::Offset(100)).unwrap();
    }
    producer
        .send_offsets_to_transaction(&offsets, &group_metadata, timeout)
        .expect("send_offsets_to_transaction");
    producer.abort_transaction(timeout).expect("abort");

    // 3. Consume-transform-produce: every input record read, transformed into its partition of
    //    the output, the group's offsets committed with it.
    let (reader, inputs) = {
        let input = input.clone();
        tokio::task::spawn_blocking(move || {
            assign(&reader, &input, &(0..6).collect::<Vec<_>>(), Offset::Beginning);
            let mut inputs = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(30);
            while inputs.len() < 18 && Instant::now() < deadline {
                if let Some(m) = reader.poll(Duration::from_millis(100)) {
                    let m = m.expect("consume the input");
                    let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                    inputs.push((m.partition(), m.offset(), value));
                }
            }
            (reader, inputs)
        })
        .await
        .unwrap()
    };
    assert_eq!(inputs.len(), 18, "the input records: {inputs:?}");
    producer.begin_transaction().unwrap();
    let mut next = BTreeMap::new();
    for (p, offset, value) in &inputs {
        let transformed = format!("transformed-{value}");
        producer
            .send(
                FutureRecord::<(), _>::to(&out).partition(*p).payload(&transformed),
                timeout,
            )
            .await
            .unwrap_or_else(|(e, _)| panic!("{transformed}: {e}"));
        next.insert(*p, offset + 1);
    }
    let mut offsets = TopicPartitionList::new();
    for (p, offset) in &next {
        offsets
            .add_partition_offset(&input, *p, Offset::Offset(*offset))
            .unwrap();
    }
    producer
        .send_offsets_to_transaction(&offsets, &reader.group_metadata().unwrap(), timeout)
        .expect("send_offsets_to_transaction");
    producer
        .commit_transaction(timeout)
        .expect("commit the transformed records");

    // Every partition ended each transaction with one marker, and none is left open: the last
    // stable offset is the log end (EndTxn is answered once the markers are written).
    for (p, &leader) in (0..).zip(&leaders) {
        let (end, stable) = end_and_stable(&cluster, leader, &out, p).await;
        assert_eq!(
            (end, stable),
            (5 + 1 + 3 + 1 + 3 + 1, 14),
            "{out}/{p} on node {leader}: records and markers of 3 transactions, all ended"
        );
    }

    let expected: BTreeMap<i32, Vec<String>> = (0..6)
        .map(|p| {
            let committed = (0..5).map(|i| format!("committed-{p}-{i}"));
            let transformed = (0..3).map(|i| format!("transformed-in-{p}-{i}"));
            (p, committed.chain(transformed).collect())
        })
        .collect();
    let seen = {
        let (bootstrap, out) = (bootstrap.clone(), out.clone());
        tokio::task::spawn_blocking(move || read_committed(&bootstrap, &out, 6, 48))
            .await
            .unwrap()
    };
    assert_eq!(seen, expected, "read_committed sees exactly the committed records");

    // The group's offsets, on its own coordinator: the transformed step's, not the aborted
    // 100s, and stable (require_stable: nothing pending).
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(&input))
                .with_partition_indexes((0..6).collect()),
        ]));
    let resp = try_call(cluster.addr(group_coordinator), 7, &fetch, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(resp.error_code, 0, "OffsetFetch on node {group_coordinator}");
    let committed: BTreeMap<i32, (i16, i64)> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, (p.error_code, p.committed_offset)))
        .collect();
    let expected: BTreeMap<i32, (i16, i64)> = (0..6).map(|p| (p, (0, 3))).collect();
    assert_eq!(
        committed, expected,
        "group {group} on node {group_coordinator}, committed in a transaction coordinated by node {txn_coordinator}"
    );
}

/// A transactional batch of one record from `pid` at `epoch`, first sequence `seq`.
fn txn_batch(pid: i64, epoch: i16, seq: i32) -> Bytes {
    let record = (Some(Bytes::from("k")), Some(Bytes::from("v")), 1_000);
    let mut b = sluice::log::batch::encode_records(&[record], kafka_protocol::records::Compression::None)
        .unwrap()
        .to_vec();
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&epoch.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let attributes = i16::from_be_bytes([b[21], b[22]]) | 0x10;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

/// InitProducerId `version` for transactional id `id` at its coordinator `coordinator`: the
/// producer id and epoch. The coordinator serves the id once it has loaded its new
/// `__transaction_state` partition; until then it answers NOT_COORDINATOR (16) or
/// COORDINATOR_LOAD_IN_PROGRESS (14), which clients retry, as this does.
async fn init_at(cluster: &Cluster, coordinator: i32, version: i16, id: &str) -> (i64, i16) {
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_transaction_timeout_ms(60_000);
    let deadline = Instant::now() + SETUP_WAIT;
    let resp = loop {
        let resp = try_call(cluster.addr(coordinator), version, &init, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        if !matches!(resp.error_code, 14 | 16) || Instant::now() >= deadline {
            break resp;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(resp.error_code, 0, "InitProducerId on the coordinator {coordinator}");
    (resp.producer_id.0, resp.producer_epoch)
}

/// EndTxn `version` of (transactional id, producer id, epoch) at `coordinator`.
async fn end_txn_at(
    cluster: &Cluster,
    coordinator: i32,
    version: i16,
    (id, pid, epoch): (&str, i64, i16),
    commit: bool,
) -> EndTxnResponse {
    let end = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(id)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    try_call(cluster.addr(coordinator), version, &end, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap()
}

/// A transactional Produce (acks=all) of `records` to `name`/`partition`, sent to node `to`:
/// the partition's code.
async fn produce_txn(
    cluster: &Cluster,
    to: i32,
    version: i16,
    id: &str,
    name: &str,
    partition: i32,
    records: Bytes,
) -> i16 {
    let request = ProduceRequest::default()
        .with_transactional_id(Some(TransactionalId(s(id))))
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic(name))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ]);
    let resp = try_call(cluster.addr(to), version, &request, Duration::from_secs(20))
        .await
        .unwrap();
    resp.responses[0].partition_responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_verifies_transactional_produce_with_the_coordinator_on_another_node() {
    // KIP-890 part 1 (Kafka's AddPartitionsToTxnManager): a partition's leader that is not the
    // transactional id's coordinator asks the coordinator (AddPartitionsToTxn verify_only)
    // before appending, and maps its answer as Produce does; the abort's marker then reaches
    // that leader by WriteTxnMarkers.
    let mut cluster = Cluster::start(3).await;
    let name = unique("verified");
    let leaders = create_topic(&cluster, &name, 3).await;
    let ids: Vec<String> = (0..4).map(|i| unique(&format!("verify{i}"))).collect();
    let found = coordinators(&cluster, KEY_TYPE_TRANSACTION, &ids).await;
    let (id, coordinator) = found.into_iter().next().unwrap();
    let (partition, leader) = (0..)
        .zip(leaders.iter().copied())
        .find(|(_, leader)| *leader != coordinator)
        .expect("3 partitions on 3 nodes: one is led elsewhere");
    println!("{id} coordinated by node {coordinator}; {name}/{partition} led by node {leader}");

    let (pid, epoch) = init_at(&cluster, coordinator, 4, &id).await;

    // Not in the transaction yet: refused, by the code each Produce version knows.
    for (version, code) in [(9, INVALID_TXN_STATE), (11, TRANSACTION_ABORTABLE)] {
        let c = produce_txn(
            &cluster,
            leader,
            version,
            &id,
            &name,
            partition,
            txn_batch(pid, epoch, 0),
        )
        .await;
        assert_eq!(c, code, "Produce v{version} outside the transaction, at node {leader}");
    }
    assert_eq!(
        end_and_stable(&cluster, leader, &name, partition).await,
        (0, 0),
        "nothing was written"
    );

    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s(&id)))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(topic(&name))
                .with_partitions(vec![partition]),
        ]);
    let resp = try_call(cluster.addr(coordinator), 3, &add, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );

    // A fenced epoch is refused as Kafka's Produce refuses it; the right one goes in.
    let c = produce_txn(&cluster, leader, 9, &id, &name, partition, txn_batch(pid, epoch + 1, 0)).await;
    assert_eq!(c, INVALID_PRODUCER_EPOCH, "an epoch the coordinator does not know");
    let c = produce_txn(&cluster, leader, 9, &id, &name, partition, txn_batch(pid, epoch, 0)).await;
    assert_eq!(
        c, 0,
        "in the transaction: verified by node {coordinator}, written at node {leader}"
    );
    assert_eq!(
        end_and_stable(&cluster, leader, &name, partition).await,
        (1, 0),
        "the open transaction holds the last stable offset"
    );

    let resp = end_txn_at(&cluster, coordinator, 3, (&id, pid, epoch), false).await;
    assert_eq!(resp.error_code, 0, "EndTxn (abort)");
    assert_eq!(
        end_and_stable(&cluster, leader, &name, partition).await,
        (2, 2),
        "the abort marker was written at node {leader}: the transaction is over"
    );
    let mut fetch = fetch_request(&name, 0, 1 << 20, 1 << 20).with_isolation_level(1);
    fetch.topics[0].partitions[0].partition = partition;
    let resp = try_call(cluster.addr(leader), 12, &fetch, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    let aborted = aborted_of(&resp.responses[0].partitions[0]);
    assert_eq!(
        aborted,
        [(pid, 0)],
        "read_committed fetch lists the aborted transaction"
    );

    // The coordinator gone: the leader cannot verify, and answers what producers retry.
    cluster.kill(coordinator);
    let c = produce_txn(&cluster, leader, 9, &id, &name, partition, txn_batch(pid, epoch, 1)).await;
    assert_eq!(c, NOT_ENOUGH_REPLICAS, "verification with an unreachable coordinator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_version_2_writes_are_added_by_the_coordinator_on_another_node() {
    // KIP-890 part 2 across brokers: a Produce v12 at a leader that is not the transactional
    // id's coordinator, and a TxnOffsetCommit v5 at a group coordinator that is not it either,
    // ask the transaction's coordinator to add their partitions (AddPartitionsToTxn v5, not
    // verify_only); the client sends neither AddPartitionsToTxn nor AddOffsetsToTxn. EndTxn v5
    // then settles both and bumps the epoch, which fences a late write at the leader.
    let cluster = Cluster::start(3).await;
    let (out, input) = (unique("tv2-out"), unique("tv2-in"));
    let leaders = create_topic(&cluster, &out, 3).await;
    create_topic(&cluster, &input, 1).await;
    let (id, coordinator, group, group_coordinator) = txn_and_group_apart(&cluster).await;
    let (partition, leader) = (0..)
        .zip(leaders.iter().copied())
        .find(|(_, leader)| *leader != coordinator)
        .expect("3 partitions on 3 nodes: one is led elsewhere");
    println!(
        "{id} coordinated by node {coordinator}, {group} by node {group_coordinator}; {out}/{partition} led by node {leader}"
    );
    let (pid, epoch) = init_at(&cluster, coordinator, 5, &id).await;

    let c = produce_txn(&cluster, leader, 12, &id, &out, partition, txn_batch(pid, epoch, 0)).await;
    assert_eq!(c, 0, "Produce v12 at node {leader}, added by node {coordinator}");
    let commit = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(&id)))
        .with_group_id(GroupId(s(&group)))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(topic(&input))
                .with_partitions(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(7)
                        .with_committed_leader_epoch(-1),
                ]),
        ]);
    // The group's coordinator may still be loading its new `__consumer_offsets` partition:
    // NOT_COORDINATOR (16) or COORDINATOR_LOAD_IN_PROGRESS (14), which clients retry.
    let deadline = Instant::now() + SETUP_WAIT;
    let code = loop {
        let resp = try_call(cluster.addr(group_coordinator), 5, &commit, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let code = resp.topics[0].partitions[0].error_code;
        if !matches!(code, 14 | 16) || Instant::now() >= deadline {
            break code;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(code, 0, "TxnOffsetCommit v5 at node {group_coordinator}");
    let describe = DescribeTransactionsRequest::default().with_transactional_ids(vec![TransactionalId(s(&id))]);
    let resp = try_call(cluster.addr(coordinator), 0, &describe, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    let state = &resp.transaction_states[0];
    let mut listed: Vec<(String, Vec<i32>)> = state
        .topics
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
        .collect();
    listed.sort();
    assert_eq!(state.transaction_state.as_str(), "Ongoing");
    assert!(
        listed.contains(&(out.clone(), vec![partition])) && listed.iter().any(|(t, _)| t == "__consumer_offsets"),
        "the output partition and the group's offsets partition are in the transaction: {listed:?}"
    );
    assert_eq!(end_and_stable(&cluster, leader, &out, partition).await, (1, 0));

    let resp = end_txn_at(&cluster, coordinator, 5, (&id, pid, epoch), true).await;
    assert_eq!((resp.error_code, resp.producer_epoch), (0, epoch + 1), "EndTxn v5");
    assert_eq!(
        end_and_stable(&cluster, leader, &out, partition).await,
        (2, 2),
        "the commit marker reached node {leader}"
    );
    let fetch = OffsetFetchRequest::default()
        .with_group_id(GroupId(s(&group)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic(&input))
                .with_partition_indexes(vec![0]),
        ]));
    let resp = try_call(cluster.addr(group_coordinator), 7, &fetch, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.committed_offset), (0, 7), "the offsets are committed");

    let c = produce_txn(&cluster, leader, 12, &id, &out, partition, txn_batch(pid, epoch, 1)).await;
    assert_eq!(c, INVALID_PRODUCER_EPOCH, "a late write of the ended transaction");
    assert_eq!(
        end_and_stable(&cluster, leader, &out, partition).await,
        (2, 2),
        "not written"
    );
}

/// KIP-392 with transactions: a follower serves read_committed consumers from its own log's
/// producer state, as the leader does. While a transaction is open, the follower's last
/// stable offset stays at its first record and read_committed gets nothing there; once the
/// transaction is aborted, the follower's answer lists it with the marker below its last
/// stable offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_serves_read_committed_consumers_from_its_own_transaction_state() {
    let cluster = Cluster::start(3).await;
    let name = unique("txn_follower");
    let mut request = common::create_topic_request(&name, 1, 10_000);
    request.topics[0].replication_factor = 3;
    let resp = try_call(cluster.addr(1), 7, &request, Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    let v = common::cluster::wait_view(&cluster, &name, 0, "all in sync", |v| v.leader > 0 && v.isr.len() == 3).await;
    let follower = *v.replicas.iter().find(|r| **r != v.leader).unwrap();
    let id = unique("txn-follower");
    let coordinator = coordinators(&cluster, KEY_TYPE_TRANSACTION, std::slice::from_ref(&id)).await[&id];
    let (pid, epoch) = init_at(&cluster, coordinator, 5, &id).await;
    // Produce v12: the leader adds the partition to the transaction (KIP-890 part 2).
    let c = produce_txn(&cluster, v.leader, 12, &id, &name, 0, txn_batch(pid, epoch, 0)).await;
    assert_eq!(c, 0, "the transactional record, at the leader {}", v.leader);
    let at_follower = async |isolation: i8| {
        let fetch = fetch_request(&name, 0, 1 << 20, 1 << 20).with_isolation_level(isolation);
        let resp = try_call(cluster.addr(follower), 12, &fetch, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "{resp:?}");
        FollowerRead {
            high_watermark: p.high_watermark,
            last_stable_offset: p.last_stable_offset,
            bytes: p.records.as_ref().map_or(0, |r| r.len()),
            aborted: aborted_of(p),
        }
    };
    let until = async |isolation: i8, what: &str, ok: &dyn Fn(&FollowerRead) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = at_follower(isolation).await;
            if ok(&seen) {
                return seen;
            }
            assert!(Instant::now() < deadline, "{what} at follower {follower}: {seen:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let open = until(0, "the record under the high watermark", &|s| s.high_watermark == 1).await;
    assert!(
        open.bytes > 0,
        "read_uncommitted reads the open transaction's record: {open:?}"
    );
    let held = at_follower(1).await;
    assert_eq!(
        (held.high_watermark, held.last_stable_offset, held.bytes),
        (1, 0, 0),
        "read_committed stops at the open transaction"
    );

    let resp = end_txn_at(&cluster, coordinator, 5, (&id, pid, epoch), false).await;
    assert_eq!(resp.error_code, 0, "EndTxn (abort)");
    let ended = until(1, "the abort marker under the last stable offset", &|s| {
        s.last_stable_offset == 2
    })
    .await;
    assert_eq!(ended.high_watermark, 2, "{ended:?}");
    assert!(
        ended.bytes > 0,
        "read_committed reads the aborted record and the marker: {ended:?}"
    );
    assert_eq!(ended.aborted, [(pid, 0)], "the follower lists the aborted transaction");
}

/// What a consumer's fetch of one partition answered.
#[derive(Debug)]
struct FollowerRead {
    high_watermark: i64,
    last_stable_offset: i64,
    bytes: usize,
    aborted: Vec<(i64, i64)>,
}

/// The aborted transactions a fetch answer lists: (producer id, first offset).
fn aborted_of(p: &kafka_protocol::messages::fetch_response::PartitionData) -> Vec<(i64, i64)> {
    p.aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect()
}
