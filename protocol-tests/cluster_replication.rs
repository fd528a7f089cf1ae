//! Replication on three processes (issue 12): partitions with three replicas, followers that
//! copy their leader with Fetch requests carrying their replica id, an ISR the controller
//! commits, acks=all at the high watermark with `min.insync.replicas`, and leader election
//! from the ISR when a leader's node dies (Kafka's `ReplicaManager`, `Partition` and
//! `ReplicationControlManager`). The fault trials with a history checker are in
//! `replication.rs`; this file checks the protocol itself, through librdkafka and raw frames.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::{
    Cluster, POLL_REQUEST_TIMEOUT, consume_all, create, expected_values, list_latest, metadata_request, produce_all,
    try_call, wait_view,
};
use common::*;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{BrokerId, CreateTopicsRequest, FetchRequest, OffsetForLeaderEpochRequest};
use kafka_protocol::records::Compression;
use rdkafka::producer::FutureRecord;
use rdkafka::{Message, Offset};

const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const FENCED_LEADER_EPOCH: i16 = 74;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

/// Failure detection short enough for a test: a killed node is fenced within 3 s, a follower
/// that stops fetching leaves the ISR within 3 s.
const SETTINGS: &[(&str, &str)] = &[("replica.lag.time.max.ms", "3000")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_the_loss_of_each_leader_in_turn() {
    // Kafka's guarantee: a record acknowledged with acks=all is on every in-sync replica, so
    // a leader elected from the ISR holds it (KIP-101 epochs keep followers consistent).
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("replicated");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "2")]).await;
    let first = wait_view(&cluster, &name, 0, "led with all 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3 && v.replicas.len() == 3
    })
    .await;
    let mut offsets = produce_all(&cluster, &name, 0, 300).await;
    assert_eq!(
        offsets,
        (0..300).collect::<Vec<i64>>(),
        "offsets from 0, one per record"
    );

    // The leader dies: a follower from the ISR takes over at the next epoch, with every record.
    cluster.kill(first.leader);
    let second = wait_view(&cluster, &name, 0, "led by a survivor", |v| {
        v.leader > 0 && v.leader != first.leader && !v.isr.contains(&first.leader)
    })
    .await;
    assert!(second.leader_epoch > first.leader_epoch, "{first:?} then {second:?}");
    offsets.extend(produce_all(&cluster, &name, 300, 200).await);
    assert_eq!(consume_all(&cluster, &name, 500), expected_values(&offsets));

    // The old leader returns as a follower, catches up and rejoins the ISR.
    cluster.restart(first.leader).await;
    wait_view(&cluster, &name, 0, "back to 3 in sync", |v| v.isr.len() == 3).await;

    // Then the second leader dies: the returned node or the third one leads, with everything.
    cluster.kill(second.leader);
    let third = wait_view(&cluster, &name, 0, "led by another survivor", |v| {
        v.leader > 0 && v.leader != second.leader && !v.isr.contains(&second.leader)
    })
    .await;
    assert!(third.leader_epoch > second.leader_epoch, "{second:?} then {third:?}");
    offsets.extend(produce_all(&cluster, &name, 500, 100).await);
    assert_eq!(consume_all(&cluster, &name, 600), expected_values(&offsets));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_below_min_insync_replicas_is_refused_and_acks_1_is_not() {
    // Kafka's `Partition.appendRecordsToLeader`: acks=all with an ISR smaller than
    // min.insync.replicas gets NOT_ENOUGH_REPLICAS and nothing is written; acks=1 goes on.
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("min-isr");
    create(&cluster, &name, 1, 3, &[("min.insync.replicas", "3")]).await;
    let all_in = wait_view(&cluster, &name, 0, "all 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3
    })
    .await;
    let records = records_of(&[b"a"]);
    let mut raw = Raw::connect(cluster.addr(all_in.leader)).await;
    let resp = raw.call(9, &produce_request(&name, 0, records.clone(), -1)).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0, "{resp:?}");

    let follower = *all_in.replicas.iter().find(|r| **r != all_in.leader).unwrap();
    cluster.kill(follower);
    wait_view(&cluster, &name, 0, "down to 2 in sync", |v| v.isr.len() == 2).await;
    let before = latest_offset(&mut raw, &name).await;
    let resp = raw.call(9, &produce_request(&name, 0, records.clone(), -1)).await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, NOT_ENOUGH_REPLICAS,
        "{resp:?}"
    );
    assert_eq!(latest_offset(&mut raw, &name).await, before, "nothing written");
    let resp = raw.call(9, &produce_request(&name, 0, records, 1)).await;
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code, 0,
        "acks=1: {resp:?}"
    );
    // It lands right after the last acks=all record: the refused one took no offset.
    assert_eq!(resp.responses[0].partition_responses[0].base_offset, before, "{resp:?}");
    // Kafka's strict min ISR rule (3.7+, KIP-966): the high watermark (what ListOffsets
    // latest answers) stays while the ISR is under min.insync.replicas, so consumers do not
    // see the acks=1 record, though the follower in the ISR fetches it (every 500 ms at most).
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        assert_eq!(latest_offset(&mut raw, &name).await, before, "visible under min ISR");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The follower is back in the ISR: the high watermark passes the record.
    cluster.restart(follower).await;
    wait_view(&cluster, &name, 0, "all 3 in sync again", |v| v.isr.len() == 3).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while latest_offset(&mut raw, &name).await != before + 1 {
        assert!(Instant::now() < deadline, "the acks=1 record never became visible");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The eligible leader replicas (ELR) and last known ELR `node` reports for partition 0 of
/// `name` (DescribeTopicPartitions).
async fn elr_at(cluster: &Cluster, node: i32, name: &str) -> (Vec<i32>, Vec<i32>) {
    use kafka_protocol::messages::DescribeTopicPartitionsRequest;
    use kafka_protocol::messages::describe_topic_partitions_request::TopicRequest;
    let request = DescribeTopicPartitionsRequest::default()
        .with_topics(vec![TopicRequest::default().with_name(topic(name))])
        .with_response_partition_limit(10);
    let resp = try_call(cluster.addr(node), 0, &request, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("DescribeTopicPartitions at {node}: {e}"));
    let p = &resp.topics[0].partitions[0];
    let ids = |list: &Option<Vec<BrokerId>>| list.iter().flatten().map(|r| r.0).collect::<Vec<i32>>();
    (ids(&p.eligible_leader_replicas), ids(&p.last_known_elr))
}

/// `min.insync.replicas` and its source as broker `node` describes the cluster-wide broker
/// default (DescribeConfigs v4, BROKER ""), once it is set there (waits up to 10 s for
/// source 3, DYNAMIC_DEFAULT_BROKER_CONFIG).
async fn cluster_min_isr(cluster: &Cluster, node: i32) -> Option<(String, i8)> {
    use kafka_protocol::messages::DescribeConfigsRequest;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::protocol::StrBytes;
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_static_str(""))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("min.insync.replicas")])),
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = try_call(cluster.addr(node), 4, &request, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("DescribeConfigs at {node}: {e}"));
        let found = resp.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == "min.insync.replicas")
            .map(|c| (c.value.as_deref().unwrap_or_default().to_string(), c.config_source));
        if found.as_ref().is_some_and(|(_, source)| *source == 3) || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Partition 0's ELR and last known ELR as `sluice topic describe --format json` shows them,
/// asking broker `node`.
fn cli_elr(cluster: &Cluster, node: i32, name: &str) -> (Vec<i32>, Vec<i32>) {
    let addr = cluster.addr(node).to_string();
    let out = std::process::Command::new(common::cluster::sluice_bin())
        .args(["topic", "describe", name, "-b", &addr, "--format", "json"])
        .output()
        .expect("run sluice topic describe");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let p = &doc["topics"][0]["partitions"][0];
    let ids = |key: &str| -> Vec<i32> {
        p[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} in {doc}"))
            .iter()
            .map(|v| i32::try_from(v.as_i64().unwrap()).unwrap())
            .collect()
    };
    (ids("elr"), ids("last_known_elr"))
}

/// One controller and three brokers (the quorum outlives them), and `name`: one partition,
/// 3 replicas, `min.insync.replicas` 2 and `configs`, all in sync. Its leader and followers.
async fn elr_cluster(name: &str, configs: &[(&str, &str)]) -> (Cluster, (i32, i32, i32)) {
    use common::cluster::Role;
    let roles = [Role::Controller, Role::Broker, Role::Broker, Role::Broker];
    let cluster = Cluster::start_roles(&roles, SETTINGS).await;
    let mut all = vec![("min.insync.replicas", "2")];
    all.extend_from_slice(configs);
    create(&cluster, name, 1, 3, &all).await;
    let all_in = wait_view(&cluster, name, 0, "all 3 in sync", |v| v.leader > 0 && v.isr.len() == 3).await;
    let leader = all_in.leader;
    let followers: Vec<i32> = all_in.replicas.iter().copied().filter(|r| *r != leader).collect();
    (cluster, (leader, followers[0], followers[1]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eligible_leader_replica_leads_once_every_in_sync_replica_is_gone() {
    // KIP-966, on by default as in Kafka 4.1. A follower that left the ISR while it was under
    // min.insync.replicas holds everything acknowledged (the high watermark stood still
    // since), so it may lead when the last in-sync replica is gone. Without it the partition
    // waits for that one replica. One controller and three brokers: the quorum outlives them.
    let name = unique("elr");
    let (mut cluster, (leader, first, second)) = elr_cluster(&name, &[]).await;
    // The active controller's duties wrote the static min.insync.replicas (1) as the cluster
    // default (Kafka's maybeGenerateElrSafetyRecords), which every broker reads.
    for node in [leader, first, second] {
        assert_eq!(cluster_min_isr(&cluster, node).await, Some(("1".to_string(), 3)));
    }
    let mut offsets = produce_all(&cluster, &name, 0, 50).await;

    // `first` goes while the ISR is above min ISR: it leaves the ISR and is not eligible.
    cluster.kill(first);
    wait_view(&cluster, &name, 0, "2 in sync", |v| v.isr.len() == 2).await;
    offsets.extend(produce_all(&cluster, &name, 50, 50).await);
    // `second` goes at min ISR: it becomes an eligible leader replica.
    cluster.kill(second);
    wait_view(&cluster, &name, 0, "the leader alone in sync", |v| {
        v.isr == vec![leader]
    })
    .await;
    assert_eq!(elr_at(&cluster, leader, &name).await, (vec![second], vec![]));
    // The leader goes too. `second` comes back alone, and leads.
    cluster.kill(leader);
    cluster.restart(second).await;
    let view = wait_view(&cluster, &name, 0, "led by the eligible replica", |v| {
        v.leader == second
    })
    .await;
    assert_eq!(view.isr, vec![second]);
    assert_eq!(
        elr_at(&cluster, second, &name).await,
        (vec![leader], vec![]),
        "the old leader is eligible in turn"
    );
    assert_eq!(
        cli_elr(&cluster, second, &name),
        (vec![leader], vec![]),
        "sluice topic describe"
    );
    // `first` catches up from it and joins the ISR; at min ISR the high watermark moves, and
    // every acknowledged record is there, at its offset.
    cluster.restart(first).await;
    wait_view(&cluster, &name, 0, "2 in sync", |v| v.isr.len() == 2).await;
    assert_eq!(
        elr_at(&cluster, second, &name).await,
        (vec![], vec![]),
        "at min ISR again"
    );
    assert_eq!(consume_all(&cluster, &name, offsets.len()), expected_values(&offsets));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_uncleanly_that_did_not_fsync_each_message_is_no_longer_eligible() {
    // KIP-966's other half (Kafka's handleBrokerUncleanShutdown): a replica that did not fsync
    // what it acknowledged (flush.messages above 1) may have lost it in a power cut, so a start
    // after an unclean stop takes it out of the eligible leader replicas. A clean stop (the
    // node's clean-shutdown marker) keeps it eligible. With the default flush policy a killed
    // replica stays eligible (the test above).
    let name = unique("elr-unclean");
    let (mut cluster, (leader, first, second)) = elr_cluster(&name, &[("flush.messages", "1000")]).await;
    cluster.kill(first);
    wait_view(&cluster, &name, 0, "2 in sync", |v| v.isr.len() == 2).await;
    let offsets = produce_all(&cluster, &name, 0, 50).await;
    // `second` is killed at min ISR: eligible, until it comes back from that unclean stop.
    cluster.kill(second);
    wait_view(&cluster, &name, 0, "the leader alone in sync", |v| {
        v.isr == vec![leader]
    })
    .await;
    assert_eq!(elr_at(&cluster, leader, &name).await, (vec![second], vec![]));
    // The leader stops cleanly (SIGTERM): the ISR empties into the ELR.
    cluster.terminate(leader).await;
    cluster.restart(second).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (elr, last_known) = elr_at(&cluster, second, &name).await;
        if !elr.contains(&second) && !last_known.contains(&second) {
            assert_eq!(elr, vec![leader], "the cleanly stopped leader stays eligible");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{second} is still eligible: {elr:?} {last_known:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let view = wait_view(&cluster, &name, 0, "the view", |_| true).await;
    assert_eq!(
        view.leader, -1,
        "{second} may lack what it acknowledged: it does not lead"
    );
    // The leader comes back from its clean stop and leads; nothing acknowledged is lost.
    cluster.restart(leader).await;
    wait_view(&cluster, &name, 0, "led by the cleanly stopped leader", |v| {
        v.leader == leader
    })
    .await;
    assert_eq!(consume_all(&cluster, &name, offsets.len()), expected_values(&offsets));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_has_not_applied_its_new_topic_yet_waits_for_it_rather_than_refusing() {
    // One node answers CreateTopics and Metadata once it has applied the topic; each leader
    // learns the commit a round trip later and opens its partitions after that. A producer
    // told of the topic goes to the leaders at once: refused there, its records would be
    // retried behind the requests pipelined after them (reordered, without idempotence; the
    // CI failure of librdkafka's 0041 on three nodes). Each leader waits for its metadata
    // instead, so every first produce succeeds.
    let cluster = Cluster::start_with(3, SETTINGS).await;
    let ids = cluster.ids();
    let mut raws = BTreeMap::new();
    for id in &ids {
        raws.insert(*id, Raw::connect(cluster.addr(*id)).await);
    }
    const PARTITIONS: i32 = 6;
    for round in 0..12 {
        // Each node creates in turn: the quorum's leader among them, which applies first.
        let via = ids[round % ids.len()];
        let name = unique(&format!("fresh-{round}"));
        let request = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(topic(&name))
                    .with_num_partitions(PARTITIONS)
                    .with_replication_factor(2),
            ])
            .with_timeout_ms(10_000);
        let raw = raws.get_mut(&via).unwrap();
        let resp = raw.call(5, &request).await;
        assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
        // What the creating node answers at once: each partition's leader, most of them on
        // the other two nodes.
        let meta = raw.call(12, &metadata_request(&[&name])).await;
        let mut leaders: Vec<(i32, i32)> = meta.topics[0]
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect();
        leaders.sort();
        assert_eq!(leaders.len(), PARTITIONS as usize, "{meta:?}");
        // Every leader gets its partitions' first records at once, one request per leader.
        let mut answers = Vec::new();
        for (id, raw) in raws.iter_mut() {
            let mine: Vec<i32> = leaders.iter().filter(|(_, l)| l == id).map(|(p, _)| *p).collect();
            if mine.is_empty() {
                continue;
            }
            let mut request = produce_request(&name, mine[0], records_of(&[b"first"]), 1);
            let template = request.topic_data[0].partition_data[0].clone();
            request.topic_data[0].partition_data = mine.iter().map(|p| template.clone().with_index(*p)).collect();
            let resp = raw.call(9, &request).await;
            for p in &resp.responses[0].partition_responses {
                answers.push((p.index, *id, p.error_code, p.base_offset));
            }
        }
        answers.sort();
        let expected: Vec<_> = leaders.iter().map(|(p, l)| (*p, *l, 0, 0)).collect();
        assert_eq!(
            answers, expected,
            "round {round}, created via {via}: (partition, leader, error, offset)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_leader_epochs_and_replica_fetches_are_checked_as_in_kafka() {
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("epochs");
    // Two replicas of three nodes: one node holds no replica.
    create(&cluster, &name, 1, 2, &[]).await;
    let v = wait_view(&cluster, &name, 0, "both in sync", |v| v.leader > 0 && v.isr.len() == 2).await;
    let follower = *v.replicas.iter().find(|r| **r != v.leader).unwrap();
    let outsider = *cluster.ids().iter().find(|id| !v.replicas.contains(id)).unwrap();
    let mut raw = Raw::connect(cluster.addr(v.leader)).await;
    for i in 0..3 {
        let resp = raw
            .call(
                9,
                &produce_request(&name, 0, records_of(&[format!("r{i}").as_bytes()]), -1),
            )
            .await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0, "{resp:?}");
    }

    // A consumer's fetch at the follower: before v11 NOT_LEADER_OR_FOLLOWER; from v11 (KIP-392,
    // the consumer says its rack) the follower serves it, up to the high watermark its leader
    // told it: all 3 records once that has reached it.
    let resp = try_call(
        cluster.addr(follower),
        10,
        &fetch_request(&name, 0, 1 << 20, 1 << 20),
        POLL_REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(resp.responses[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = try_call(
            cluster.addr(follower),
            12,
            &fetch_request(&name, 0, 1 << 20, 1 << 20),
            POLL_REQUEST_TIMEOUT,
        )
        .await
        .unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!((p.error_code, p.preferred_read_replica.0), (0, -1), "{resp:?}");
        assert!(p.high_watermark <= 3, "{resp:?}");
        if p.high_watermark == 3 {
            assert_eq!(count_records(p.records.as_ref().unwrap()), 3);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower's high watermark never reached 3: {resp:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The node without a replica still refuses it.
    let resp = try_call(
        cluster.addr(outsider),
        12,
        &fetch_request(&name, 0, 1 << 20, 1 << 20),
        POLL_REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(resp.responses[0].partitions[0].error_code, NOT_LEADER_OR_FOLLOWER);

    // OffsetForLeaderEpoch at the leader: its current epoch ends at the log end (3).
    let ask = |current: i32, epoch: i32| {
        OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(topic(&name))
                    .with_partitions(vec![
                        OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(current)
                            .with_leader_epoch(epoch),
                    ]),
            ])
    };
    let resp = raw.call(4, &ask(v.leader_epoch, v.leader_epoch)).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.leader_epoch, p.end_offset),
        (0, v.leader_epoch, 3),
        "{resp:?}"
    );
    let resp = raw.call(4, &ask(v.leader_epoch + 1, v.leader_epoch)).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, UNKNOWN_LEADER_EPOCH);
    // An epoch above every one the log knows is UNDEFINED (Kafka's `endOffsetFor`).
    let resp = raw.call(2, &ask(-1, v.leader_epoch + 5)).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.leader_epoch, p.end_offset), (0, -1, -1), "{resp:?}");

    // A replica fetch from a node that holds no replica: NOT_LEADER_OR_FOLLOWER, no records.
    let replica_fetch = |replica: i32, current_epoch: i32| {
        FetchRequest::default()
            // Before v15 the replica id is a field of its own (v15+: ReplicaState, with topic
            // ids, as the followers send it).
            .with_replica_id(BrokerId(replica))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default().with_topic(topic(&name)).with_partitions(
                vec![
                FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_current_leader_epoch(current_epoch)
                    .with_partition_max_bytes(1 << 20),
            ],
            )])
    };
    let resp = raw.call(12, &replica_fetch(outsider, v.leader_epoch)).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, NOT_LEADER_OR_FOLLOWER, "{resp:?}");
    assert!(p.records.as_ref().is_none_or(|r| r.is_empty()));

    // The leader's node stops: the follower leads at the next epoch, and a fetch naming the
    // old epoch is fenced there.
    cluster.kill(v.leader);
    let next = wait_view(&cluster, &name, 0, "led by the follower", |w| w.leader == follower).await;
    assert!(next.leader_epoch > v.leader_epoch);
    let mut stale = fetch_request(&name, 0, 1 << 20, 1 << 20);
    stale.topics[0].partitions[0].current_leader_epoch = v.leader_epoch;
    let resp = try_call(cluster.addr(follower), 12, &stale, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        resp.responses[0].partitions[0].error_code, FENCED_LEADER_EPOCH,
        "{resp:?}"
    );
    // The new leader serves the three records acknowledged by the old one.
    let mut fresh = fetch_request(&name, 0, 1 << 20, 1 << 20);
    fresh.topics[0].partitions[0].current_leader_epoch = next.leader_epoch;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = try_call(cluster.addr(follower), 12, &fresh, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let p = &resp.responses[0].partitions[0];
        // The new leader's high watermark reaches its log end once its ISR (itself) holds it.
        if p.error_code == 0 && p.high_watermark == 3 {
            assert_eq!(count_records(p.records.as_ref().unwrap()), 3);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new leader never served 3 records: {resp:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One uncompressed batch holding `values`.
fn records_of(values: &[&[u8]]) -> bytes::Bytes {
    use kafka_protocol::records::{Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(bytes::Bytes::copy_from_slice(v)),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// The records in a fetch answer's batches.
fn count_records(bytes: &bytes::Bytes) -> usize {
    use bytes::Buf;
    let mut buf = bytes.clone();
    let mut count = 0;
    while buf.has_remaining() {
        match kafka_protocol::records::RecordBatchDecoder::decode(&mut buf) {
            Ok(set) => count += set.records.len(),
            Err(_) => break,
        }
    }
    count
}

/// ElectLeaders (KIP-460) for partition 0 of `name`: type 0 preferred, 1 unclean.
fn election(name: &str, election_type: i8) -> kafka_protocol::messages::ElectLeadersRequest {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    kafka_protocol::messages::ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_topic_partitions(Some(vec![
            TopicPartitions::default()
                .with_topic(topic(name))
                .with_partitions(vec![0]),
        ]))
        .with_timeout_ms(10_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_leaders_moves_a_partition_back_to_its_preferred_replica() {
    // Kafka's ElectLeaders (KIP-460): a preferred election makes the first replica lead once
    // it is in sync again; asked again, ELECTION_NOT_NEEDED; an unclean election of a
    // partition that has a leader, likewise.
    const ELECTION_NOT_NEEDED: i16 = 84;
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("preferred");
    create(&cluster, &name, 1, 3, &[]).await;
    let v = wait_view(&cluster, &name, 0, "all 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3
    })
    .await;
    let preferred = v.replicas[0];
    assert_eq!(
        v.leader, preferred,
        "a new partition is led by its first replica: {v:?}"
    );
    cluster.kill(preferred);
    let moved = wait_view(&cluster, &name, 0, "led elsewhere", |w| {
        w.leader > 0 && w.leader != preferred
    })
    .await;
    cluster.restart(preferred).await;
    wait_view(&cluster, &name, 0, "back to 3 in sync", |w| w.isr.len() == 3).await;

    let elect = |election_type: i8| election(&name, election_type);
    let via = cluster.running()[0];
    let resp = try_call(cluster.addr(via), 2, &elect(0), Duration::from_secs(15))
        .await
        .unwrap();
    let result = &resp.replica_election_results[0].partition_result[0];
    assert_eq!((resp.error_code, result.error_code), (0, 0), "{resp:?}");
    let back = wait_view(&cluster, &name, 0, "led by its preferred replica", |w| {
        w.leader == preferred
    })
    .await;
    assert!(back.leader_epoch > moved.leader_epoch, "{moved:?} then {back:?}");
    let resp = try_call(cluster.addr(via), 2, &elect(0), Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(
        resp.replica_election_results[0].partition_result[0].error_code,
        ELECTION_NOT_NEEDED
    );
    let resp = try_call(cluster.addr(via), 1, &elect(1), Duration::from_secs(15))
        .await
        .unwrap();
    assert_eq!(
        resp.replica_election_results[0].partition_result[0].error_code,
        ELECTION_NOT_NEEDED
    );
    // Records written before and after the moves are all served by the preferred leader.
    let offsets = produce_all(&cluster, &name, 0, 50).await;
    assert_eq!(consume_all(&cluster, &name, 50), expected_values(&offsets));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_on_the_leader_reaches_its_followers() {
    // Kafka's followers raise their log start to the leader's (`maybeIncrementLogStartOffset`),
    // so records deleted on the leader stay deleted after it fails over.
    use kafka_protocol::messages::DeleteRecordsRequest;
    use kafka_protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("deleted");
    create(&cluster, &name, 1, 3, &[]).await;
    let v = wait_view(&cluster, &name, 0, "all 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3
    })
    .await;
    produce_all(&cluster, &name, 0, 10).await;
    let delete = DeleteRecordsRequest::default()
        .with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic(&name))
                .with_partitions(vec![
                    DeleteRecordsPartition::default().with_partition_index(0).with_offset(6),
                ]),
        ])
        .with_timeout_ms(10_000);
    let resp = try_call(cluster.addr(v.leader), 2, &delete, POLL_REQUEST_TIMEOUT)
        .await
        .unwrap();
    let p = &resp.topics[0].partitions[0];
    assert_eq!((p.error_code, p.low_watermark), (0, 6), "{resp:?}");
    // The followers learn the new log start at their next fetch (at most replica.fetch.wait.max.ms).
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Every node lists its replica in DescribeLogDirs, follower or leader, as Kafka's
    // `ReplicaManager.describeLogDirs` does (Kafka's Java admin client sums these per broker).
    use kafka_protocol::messages::DescribeLogDirsRequest;
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    let dirs = DescribeLogDirsRequest::default().with_topics(Some(vec![
        DescribableLogDirTopic::default()
            .with_topic(topic(&name))
            .with_partitions(vec![0]),
    ]));
    for id in cluster.ids() {
        let resp = try_call(cluster.addr(id), 4, &dirs, POLL_REQUEST_TIMEOUT)
            .await
            .unwrap();
        let listed: Vec<(i32, bool)> = resp.results[0]
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition_index, p.partition_size > 0)))
            .collect();
        assert_eq!(listed, vec![(0, true)], "node {id} (leader {}): {resp:?}", v.leader);
    }
    cluster.kill(v.leader);
    let next = wait_view(&cluster, &name, 0, "led by a survivor", |w| {
        w.leader > 0 && w.leader != v.leader
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut raw = Raw::connect(cluster.addr(next.leader)).await;
        // Offset 0 is below the log start now: OFFSET_OUT_OF_RANGE (1), naming the start.
        let resp = raw.call(12, &fetch_request(&name, 0, 1 << 20, 1 << 20)).await;
        let p = &resp.responses[0].partitions[0];
        if p.high_watermark == 10 {
            assert_eq!((p.error_code, p.log_start_offset), (1, 6), "{resp:?}");
            let resp = raw.call(12, &fetch_request(&name, 6, 1 << 20, 1 << 20)).await;
            let p = &resp.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "{resp:?}");
            assert_eq!(count_records(p.records.as_ref().unwrap()), 4);
            break;
        }
        assert!(Instant::now() < deadline, "the new leader never served: {resp:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_catches_up_from_its_leaders_cleaned_log() {
    // A compacted topic's leader cleans its log; a follower that was down meanwhile fetches
    // the cleaned batches (offset gaps, batches with fewer records than offsets) as Kafka's
    // followers do, rejoins the ISR, and can then lead with the latest value of every key.
    let mut cluster = Cluster::start_with(
        3,
        &[("replica.lag.time.max.ms", "3000"), ("log.cleaner.backoff.ms", "200")],
    )
    .await;
    let name = unique("compacted");
    let compact = [
        ("cleanup.policy", "compact"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "0"),
        ("segment.ms", "100"),
        ("min.insync.replicas", "1"),
    ];
    create(&cluster, &name, 1, 3, &compact).await;
    let v = wait_view(&cluster, &name, 0, "all 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3
    })
    .await;
    let follower = *v.replicas.iter().find(|r| **r != v.leader).unwrap();
    cluster.kill(follower);
    wait_view(&cluster, &name, 0, "down to 2 in sync", |w| w.isr.len() == 2).await;

    let producer = producer(&cluster.bootstrap(), &[("acks", "all"), ("linger.ms", "0")]);
    let mut latest = BTreeMap::new();
    for round in 0..20 {
        for key in 0..10 {
            let (k, value) = (format!("k{key}"), format!("k{key}-v{round}"));
            producer
                .send(
                    FutureRecord::to(&name).partition(0).key(&k).payload(&value),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
            latest.insert(k, value);
        }
        // segment.ms rolls the active segment at the next append: older rounds become cleanable.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // The leader cleans: fewer records than the 200 written are left below its log end.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut raw = Raw::connect(cluster.addr(v.leader)).await;
        let resp = raw.call(12, &fetch_request(&name, 0, 8 << 20, 8 << 20)).await;
        let left = count_records(resp.responses[0].partitions[0].records.as_ref().unwrap());
        if left < 150 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never cleaned: {left} records left"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    cluster.restart(follower).await;
    wait_view(&cluster, &name, 0, "back to 3 in sync", |w| w.isr.len() == 3).await;
    // The returned follower leads once the others are gone (the third is killed first, so the
    // election can only pick it).
    let third = *v.replicas.iter().find(|r| **r != v.leader && **r != follower).unwrap();
    cluster.kill(third);
    wait_view(&cluster, &name, 0, "without the third", |w| !w.isr.contains(&third)).await;
    cluster.kill(v.leader);
    // Two of three voters are down: the quorum cannot elect. Bring the third back, so the
    // controller elects the one live ISR member, the returned follower.
    cluster.restart(third).await;
    let now = wait_view(&cluster, &name, 0, "led by the returned follower", |w| {
        w.leader == follower
    })
    .await;
    assert!(now.leader_epoch > v.leader_epoch);
    let consumer = consumer(&cluster.bootstrap(), &[]);
    assign(&consumer, &name, &[0], Offset::Beginning);
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut last_offset = -1;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen != latest && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            assert!(
                m.offset() > last_offset,
                "offsets go up: {} after {last_offset}",
                m.offset()
            );
            last_offset = m.offset();
            let key = String::from_utf8_lossy(m.key().unwrap_or_default()).to_string();
            seen.insert(
                key,
                String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string(),
            );
        }
    }
    assert_eq!(seen, latest, "the latest value of every key");
}

/// KIP-392 with `replica.selector.class=RackAwareReplicaSelector` and a rack per broker: a
/// leader asked by a consumer in a follower's rack names that follower as the preferred read
/// replica (no records, at once); a consumer in the leader's rack, in a rack without a
/// replica, or without a rack reads from the leader; the follower serves the consumer; and
/// librdkafka with `client.rack` reads every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_are_sent_to_a_replica_in_their_rack() {
    let mut settings = SETTINGS.to_vec();
    settings.extend([
        ("broker.rack", "rack-{id}"),
        (
            "replica.selector.class",
            "org.apache.kafka.common.replica.RackAwareReplicaSelector",
        ),
    ]);
    let cluster = Cluster::start_with(3, &settings).await;
    let name = unique("racks");
    create(&cluster, &name, 1, 3, &[]).await;
    let v = wait_view(&cluster, &name, 0, "all in sync", |v| v.leader > 0 && v.isr.len() == 3).await;
    let mut raw = Raw::connect(cluster.addr(v.leader)).await;
    for i in 0..10 {
        let resp = raw
            .call(
                9,
                &produce_request(&name, 0, records_of(&[format!("r{i}").as_bytes()]), -1),
            )
            .await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0, "{resp:?}");
    }
    let follower = *v.replicas.iter().find(|r| **r != v.leader).unwrap();
    let from_rack = |rack: &str| fetch_request(&name, 0, 1 << 20, 1 << 20).with_rack_id(rack.to_string().into());
    // (error, preferred read replica, records) as the leader answers.
    let mut at_leader = async |rack: &str| {
        let resp = raw.call(12, &from_rack(rack)).await;
        let p = &resp.responses[0].partitions[0];
        (
            p.error_code,
            p.preferred_read_replica.0,
            count_records(p.records.as_ref().unwrap()),
            p.high_watermark,
        )
    };
    assert_eq!(
        at_leader(&format!("rack-{follower}")).await,
        (0, follower, 0, 10),
        "sent to the follower"
    );
    assert_eq!(
        at_leader(&format!("rack-{}", v.leader)).await,
        (0, -1, 10, 10),
        "the leader's rack"
    );
    assert_eq!(
        at_leader("rack-elsewhere").await,
        (0, -1, 10, 10),
        "no replica in the rack"
    );
    assert_eq!(at_leader("").await, (0, -1, 10, 10), "no rack");
    // The follower serves the consumer sent to it, once its high watermark has reached 10.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = try_call(
            cluster.addr(follower),
            12,
            &from_rack(&format!("rack-{follower}")),
            POLL_REQUEST_TIMEOUT,
        )
        .await
        .unwrap();
        let p = &resp.responses[0].partitions[0];
        assert_eq!((p.error_code, p.preferred_read_replica.0), (0, -1), "{resp:?}");
        if p.high_watermark == 10 {
            assert_eq!(count_records(p.records.as_ref().unwrap()), 10);
            break;
        }
        assert!(Instant::now() < deadline, "{resp:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // librdkafka in the follower's rack reads every record, in order, and its statistics
    // show it fetching the partition from the follower while the leader stays the leader.
    let rack = format!("rack-{follower}");
    let context = FetchedFrom::default();
    let consumer: rdkafka::consumer::BaseConsumer<FetchedFrom> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .set("group.id", "sluice-tests-assign-only")
        .set("enable.auto.commit", "false")
        .set("client.rack", &rack)
        .set("statistics.interval.ms", "100")
        .create_with_context(context.clone())
        .expect("consumer");
    {
        use rdkafka::consumer::Consumer;
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&name, 0, Offset::Beginning).unwrap();
        consumer.assign(&tpl).unwrap();
    }
    let mut values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while values.len() < 10 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        }
    }
    let expected: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    assert_eq!(values, expected);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        consumer.poll(Duration::from_millis(100));
        let seen = *context.0.lock().unwrap();
        if seen == Some((follower, v.leader)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "librdkafka fetches from {seen:?} (broker, leader), not {follower}"
        );
    }
}

/// librdkafka's statistics for partition 0 of the one topic: (the broker it fetches from, the
/// leader).
#[derive(Clone, Default)]
struct FetchedFrom(std::sync::Arc<std::sync::Mutex<Option<(i32, i32)>>>);

impl rdkafka::ClientContext for FetchedFrom {
    fn stats(&self, stats: rdkafka::Statistics) {
        for topic in stats.topics.values() {
            if let Some(p) = topic.partitions.get(&0) {
                *self.0.lock().unwrap() = Some((p.broker, p.leader));
            }
        }
    }
}

impl rdkafka::consumer::ConsumerContext for FetchedFrom {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_restarted_after_a_crash_answers_its_high_watermark_at_once() {
    // Kafka's replication-offset-checkpoint: a replicated partition starts from the high
    // watermark it had, not from its log start. Without it, after every node crashed, a
    // leader whose in-sync follower stays down answered ListOffsets(latest) with its log start
    // until that follower was fenced, and a consumer with librdkafka's default
    // auto.offset.reset=latest started there and read the whole log again. The session
    // timeout is a minute here, so the follower stays in the ISR for the whole test.
    let mut cluster = Cluster::start_with(
        3,
        &[
            ("replica.high.watermark.checkpoint.interval.ms", "100"),
            ("broker.session.timeout.ms", "60000"),
        ],
    )
    .await;
    let name = unique("hwm");
    create(&cluster, &name, 1, 3, &[]).await;
    let v = wait_view(&cluster, &name, 0, "all 3 in sync", |v| {
        v.leader > 0 && v.isr.len() == 3
    })
    .await;
    let offsets = produce_all(&cluster, &name, 0, 20).await;
    assert_eq!(offsets.last(), Some(&19));
    // Ten checkpoint intervals, then every node crashes; the leader and one follower return.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill_all();
    let down = *v.replicas.iter().find(|r| **r != v.leader).unwrap();
    let back: Vec<i32> = v.replicas.iter().copied().filter(|r| *r != down).collect();
    cluster.restart_some(&back).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let latest = loop {
        let answer = try_call(cluster.addr(v.leader), 7, &list_latest(&name, 0), POLL_REQUEST_TIMEOUT).await;
        if let Ok(resp) = answer {
            let p = &resp.topics[0].partitions[0];
            if p.error_code == 0 {
                break p.offset;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no ListOffsets answer from node {}",
            v.leader
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(latest, 20, "the leader's first answer after the crash");
    let view = cluster.partition_view(v.leader, &name, 0).await.unwrap();
    assert!(
        view.isr.contains(&down),
        "the follower left the ISR meanwhile: {view:?}"
    );
    // librdkafka's view (its auto.offset.reset=latest, the default, starts a consumer at the
    // high watermark it queries so).
    // Bootstrapped at the leader only: the node that stays down is still registered (not
    // fenced for a minute), and librdkafka may spend its timeout dialing it.
    use rdkafka::consumer::Consumer;
    let consumer = consumer(&cluster.addr(v.leader).to_string(), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let watermarks = loop {
        match consumer.fetch_watermarks(&name, 0, Duration::from_secs(10)) {
            Ok(watermarks) => break watermarks,
            Err(e) => assert!(Instant::now() < deadline, "fetch_watermarks: {e}"),
        }
    };
    assert_eq!(watermarks, (0, 20));
}

/// The ISR changes a full disk makes come from the full node's heartbeat alone (KIP-858's
/// offline log directory): the lag rule, 10 minutes here, never acts within these tests.
const NO_LAG_RULE: &[(&str, &str)] = &[("replica.lag.time.max.ms", "600000")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fills_hands_the_partition_over_and_rejoins_once_space_is_freed() {
    // Kafka stops a broker whose log directory fails, and the controller moves its partitions.
    // Sluice's node reports its log directory offline in its heartbeat: the controller moves
    // the leadership to another in-sync replica and keeps the full node out of the ISR while
    // the disk stays full (it holds every record at the handover, so without that it would be
    // taken back at once, and acks=all would wait for a node that cannot write). Its fetcher
    // waits rather than spins, its metadata quorum member waits for space rather than
    // stopping, and it rejoins the ISR once space is freed.
    use common::disk::{Tmpfs, fill_up, read_numbered, send_numbered};
    let mut cluster = Cluster::start_with(3, NO_LAG_RULE).await;
    let name = unique("spill");
    // A 40 MiB tmpfs.
    let Some((full, disk)) = led_from_a_disk_of_its_own(&mut cluster, &name, |dir| Tmpfs::mount_over(dir, 40)).await
    else {
        return;
    };

    // Full but for 1 MiB, then 6 MiB from the Java client's default producer.
    let pad = disk.path().join("pad");
    fill_up(&pad);
    let padded = std::fs::metadata(&pad).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&pad)
        .unwrap()
        .set_len(padded.saturating_sub(1 << 20))
        .unwrap();
    let producer = producer(
        &cluster.bootstrap(),
        &[
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "60000"),
        ],
    );
    let (acked, failed) = send_numbered(&producer, &name, 0, 600).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    let moved = wait_view(
        &cluster,
        &name,
        0,
        "led elsewhere, without the full node in its ISR",
        |w| w.leader > 0 && w.leader != full && !w.isr.contains(&full) && w.offline == [full],
    )
    .await;
    // A metadata change while the disk is full to the last page.
    fill_up(&disk.path().join("pad2"));
    let later = unique("later");
    create(&cluster, &later, 1, 2, &[]).await;
    // More acks=all records: answered without the full node, which stays out of the ISR.
    let (more, failed) = send_numbered(&producer, &name, 600, 100).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    let view = cluster.partition_view(moved.leader, &name, 0).await.unwrap();
    assert!(!view.isr.contains(&full), "{view:?}");
    // DescribeLogDirs names its directory with KAFKA_STORAGE_ERROR, as Kafka an offline one.
    let dirs = log_dirs_error(&cluster, full).await;
    assert_eq!(dirs, 56, "DescribeLogDirs of node {full}");

    // Space again: the node reports its directory online, catches up, rejoins the ISR and
    // sees the metadata made meanwhile.
    std::fs::remove_file(disk.path().join("pad2")).unwrap();
    std::fs::remove_file(&pad).unwrap();
    let back = wait_view(&cluster, &name, 0, "the full node back in the ISR", |w| {
        w.isr.contains(&full) && w.offline.is_empty()
    })
    .await;
    assert!(back.leader_epoch >= moved.leader_epoch, "{moved:?} then {back:?}");
    assert_eq!(log_dirs_error(&cluster, full).await, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.partition_view(full, &later, 0).await.is_err() {
        assert!(Instant::now() < deadline, "node {full} never saw topic {later}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every acknowledged record, once, also when the node that was full leads again.
    lead_again(&cluster, &name, full).await;
    let mut acked = acked;
    acked.extend(more);
    acked.sort();
    assert_eq!(read_numbered(&cluster.bootstrap(), &name, acked.len()), acked);
    drop(disk);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_quorum_goes_on_when_the_active_controllers_disk_fills() {
    // A voter's raft waits for space rather than stopping (raft/disk.rs). When that voter
    // leads the quorum, its raft stalls at its next write; the other two elect a leader
    // within an election timeout and go on committing. The proposal the stalled leader took
    // times out (REQUEST_TIMED_OUT, which admin clients retry); nothing else is refused. Once
    // space is freed the node catches up. (Kafka halts a controller whose metadata log
    // directory fails; the others elect a leader the same way.)
    use common::disk::{Tmpfs, fill_up};
    let mut cluster = Cluster::start_with(3, NO_LAG_RULE).await;
    cluster.stop_all().await;
    let mut disks = BTreeMap::new();
    for id in cluster.ids() {
        let Some(disk) = Tmpfs::mount_over(cluster.node(id).dir.path(), 64) else {
            return;
        };
        disks.insert(id, disk);
    }
    cluster.start_all().await;
    let full = cluster.controller().await;
    // A partition the controller leads.
    let led = unique("led");
    create(&cluster, &led, 3, 3, &[]).await;
    let mut led_partition = None;
    for p in 0..3 {
        let v = wait_view(&cluster, &led, p, "led", |v| v.leader > 0).await;
        if v.leader == full {
            led_partition = Some(p);
        }
    }
    let led_partition = led_partition.expect("the controller leads one of 3 partitions");
    fill_up(&disks[&full].path().join("pad"));
    let other = cluster.ids().into_iter().find(|id| *id != full).unwrap();
    // Enough records that the raft log's last page cannot take them all.
    let (mut created, mut timed_out) = (Vec::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(90);
    while created.len() < 30 {
        assert!(
            Instant::now() < deadline,
            "{} topics created, {timed_out} timed out",
            created.len()
        );
        let name = unique("afterfull");
        let request = CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(topic(&name))
                    .with_num_partitions(1)
                    .with_replication_factor(2),
            ])
            .with_timeout_ms(30_000);
        let answer = try_call(cluster.addr(other), 5, &request, Duration::from_secs(40))
            .await
            .unwrap();
        match answer.topics[0].error_code {
            0 => created.push(name),
            7 => timed_out += 1,
            code => panic!("CreateTopics answered {code}: {answer:?}"),
        }
    }
    assert!(timed_out <= 1, "{timed_out} CreateTopics timed out");
    let now = cluster.controller_seen_by(other).await.unwrap();
    assert_ne!(now, full, "node {full} still leads the quorum on a full disk");
    // Its raft waits for space, its image frozen: it does not name itself leader from it.
    let view = cluster.partition_view(full, &led, led_partition).await.unwrap();
    assert_eq!((view.leader, view.offline.clone()), (-1, vec![full]), "{view:?}");

    // Space again: the node's raft writes what it waited with, and it catches up.
    std::fs::remove_file(disks[&full].path().join("pad")).unwrap();
    let last = created.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.partition_view(full, last, 0).await.is_err() {
        assert!(Instant::now() < deadline, "node {full} never saw topic {last}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_view(&cluster, &led, led_partition, "led again as every node sees it", |v| {
        v.leader > 0
    })
    .await;
    drop(cluster);
    drop(disks);
}

/// The error code of node `node`'s one log directory in its DescribeLogDirs answer (v4).
async fn log_dirs_error(cluster: &Cluster, node: i32) -> i16 {
    let resp = try_call(
        cluster.addr(node),
        4,
        &kafka_protocol::messages::DescribeLogDirsRequest::default(),
        POLL_REQUEST_TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(resp.results.len(), 1, "{resp:?}");
    resp.results[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_does_not_wait_for_a_follower_whose_disk_is_full() {
    // A follower that cannot append what it fetches reports its log directory offline; the
    // controller takes it out of the ISR at once, so acks=all producers are answered by the
    // other two replicas instead of waiting replica.lag.time.max.ms (10 minutes here) for it.
    // It may not rejoin while its disk is full (INELIGIBLE_REPLICA), and rejoins once space
    // is freed.
    use common::disk::{Tmpfs, fill_up, read_numbered, send_numbered};
    let mut cluster = Cluster::start_with(3, NO_LAG_RULE).await;
    let name = unique("behind");
    let Some((node, disk)) = led_from_a_disk_of_its_own(&mut cluster, &name, |dir| Tmpfs::mount_over(dir, 40)).await
    else {
        return;
    };
    // Another replica leads (a restart moves the leadership); the node with its own disk
    // follows.
    cluster.terminate(node).await;
    wait_view(&cluster, &name, 0, "led elsewhere", |w| {
        w.leader > 0 && w.leader != node
    })
    .await;
    cluster.restart(node).await;
    wait_view(&cluster, &name, 0, "3 in sync, led by another", |w| {
        w.isr.len() == 3 && w.leader != node
    })
    .await;

    fill_up(&disk.path().join("pad"));
    let producer = producer(
        &cluster.bootstrap(),
        &[
            ("acks", "all"),
            ("linger.ms", "5"),
            // Far below the lag rule: only the log directory's report lets these through.
            ("message.timeout.ms", "30000"),
        ],
    );
    let (mut acked, failed) = send_numbered(&producer, &name, 0, 300).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    let out = wait_view(&cluster, &name, 0, "the full follower out of the ISR", |w| {
        !w.isr.contains(&node) && w.offline == [node]
    })
    .await;
    assert_ne!(out.leader, node);

    std::fs::remove_file(disk.path().join("pad")).unwrap();
    wait_view(&cluster, &name, 0, "the follower back in the ISR", |w| {
        w.isr.len() == 3 && w.offline.is_empty()
    })
    .await;
    let (more, failed) = send_numbered(&producer, &name, 300, 100).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    acked.extend(more);
    acked.sort();
    // Read from the follower that was full, as leader.
    lead_again(&cluster, &name, node).await;
    assert_eq!(read_numbered(&cluster.bootstrap(), &name, acked.len()), acked);
    drop(disk);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_disk_fails_stops_and_its_partitions_move_without_losing_an_acknowledged_record() {
    // Kafka halts a broker whose only log directory fails, and the controller moves its
    // partitions. Sluice's node stops (exit code 1) once its metadata log cannot be written:
    // it never serves a metadata image frozen at the failure (which would still name it the
    // leader of partitions moved away). Its partitions' leadership moves, and every record
    // acknowledged before and after the failure is kept.
    use common::disk::{Ext4, read_numbered, send_numbered};
    let mut cluster = Cluster::start_with(3, SETTINGS).await;
    let name = unique("dies");
    // An ext4 volume of 256 MiB on a loop device.
    let Some((bad, disk)) = led_from_a_disk_of_its_own(&mut cluster, &name, |dir| Ext4::mount_over(dir, 256)).await
    else {
        return;
    };

    let producer = producer(
        &cluster.bootstrap(),
        &[
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "90000"),
        ],
    );
    let (mut acked, failed) = send_numbered(&producer, &name, 0, 200).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);

    // The disk dies under the leader, with the producer still sending.
    disk.fail();
    let (after, failed) = send_numbered(&producer, &name, 200, 400).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    acked.extend(after);
    acked.sort();
    let status = cluster.wait_exit(bad, Duration::from_secs(60)).await;
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "node {bad} on a failed disk: {status:?} (None: still running)"
    );
    let moved = wait_view(&cluster, &name, 0, "led by a live node", |w| {
        w.leader > 0 && w.leader != bad && !w.isr.contains(&bad)
    })
    .await;
    let later = unique("later");
    create(&cluster, &later, 1, 2, &[]).await;

    // The disk is replaced (holding what reached it): the node starts, catches up, rejoins.
    disk.replace();
    cluster.restart(bad).await;
    let back = wait_view(&cluster, &name, 0, "the node back in the ISR", |w| w.isr.contains(&bad)).await;
    assert!(back.leader_epoch >= moved.leader_epoch, "{moved:?} then {back:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.partition_view(bad, &later, 0).await.is_err() {
        assert!(Instant::now() < deadline, "node {bad} never saw topic {later}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every acknowledged record, once, also when read from the node that failed.
    lead_again(&cluster, &name, bad).await;
    assert_eq!(read_numbered(&cluster.bootstrap(), &name, acked.len()), acked);
    drop(disk);
}

/// Creates `name` (one partition, 3 replicas, min.insync.replicas 2) and moves its preferred
/// leader's data directory onto the disk `mount` puts over it (a stopped node's directory);
/// returns that node, leading the partition again and in sync, and its disk. None where the
/// disk cannot be mounted.
async fn led_from_a_disk_of_its_own<D>(
    cluster: &mut Cluster,
    name: &str,
    mount: impl FnOnce(&std::path::Path) -> Option<D>,
) -> Option<(i32, D)> {
    create(cluster, name, 1, 3, &[("min.insync.replicas", "2")]).await;
    let v = wait_view(cluster, name, 0, "all 3 in sync", |v| v.leader > 0 && v.isr.len() == 3).await;
    let node = v.replicas[0];
    cluster.terminate(node).await;
    let dir = cluster.node(node).dir.path().to_path_buf();
    let disk = mount(&dir)?;
    cluster.restart(node).await;
    wait_view(cluster, name, 0, "back to 3 in sync", |w| w.isr.len() == 3).await;
    lead_again(cluster, name, node).await;
    Some((node, disk))
}

/// Has partition 0 of `name` led by its preferred replica `node` again (ElectLeaders).
async fn lead_again(cluster: &Cluster, name: &str, node: i32) {
    let via = cluster.running()[0];
    try_call(cluster.addr(via), 2, &election(name, 0), Duration::from_secs(15))
        .await
        .unwrap();
    wait_view(cluster, name, 0, "led by its preferred replica", |w| w.leader == node).await;
}
