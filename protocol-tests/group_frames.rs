//! Group and offset APIs through raw frames: every advertised version, and the error codes Kafka
//! gives for misuse (unknown members, wrong generations, bad protocols, oversized data).

mod common;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const BROKER: &[(&str, &str)] = &[("group.initial.rebalance.delay.ms", "0"), ("num.partitions", "2")];

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn gid(text: &str) -> GroupId {
    GroupId(s(text))
}

/// A consumer-protocol subscription (version 0) to `topics`, as the leader would decode it.
fn subscription(topics: &[&str]) -> Bytes {
    use kafka_protocol::protocol::Encodable;
    let sub = ConsumerProtocolSubscription::default().with_topics(topics.iter().map(|t| s(t)).collect());
    let mut buf = bytes::BytesMut::new();
    bytes::BufMut::put_i16(&mut buf, 0);
    sub.encode(&mut buf, 0).unwrap();
    buf.freeze()
}

fn join_request(group: &str, member: &str, protocols: &[&str], topics: &[&str]) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(gid(group))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(member))
        .with_protocol_type(s("consumer"))
        .with_protocols(
            protocols
                .iter()
                .map(|p| {
                    JoinGroupRequestProtocol::default()
                        .with_name(s(p))
                        .with_metadata(subscription(topics))
                })
                .collect(),
        )
}

/// Joins `group` as its single member at `version` (with the KIP-394 round trip from v4), syncs
/// and returns (member id, generation).
async fn join_alone(raw: &mut Raw, group: &str, version: i16, topics: &[&str]) -> (String, i32) {
    let mut resp = raw.call(version, &join_request(group, "", &["range"], topics)).await;
    if version >= 4 {
        assert_eq!(resp.error_code, 79, "MEMBER_ID_REQUIRED at v{version}");
        assert!(!resp.member_id.is_empty());
        let id = resp.member_id.to_string();
        resp = raw.call(version, &join_request(group, &id, &["range"], topics)).await;
    }
    assert_eq!(resp.error_code, 0, "JoinGroup v{version}");
    assert_eq!(resp.leader, resp.member_id, "the only member leads");
    assert_eq!(resp.members.len(), 1);
    let id = resp.member_id.to_string();
    let sync_version = version.min(5);
    let sync = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(resp.generation_id)
        .with_member_id(s(&id))
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(s(&id))
                .with_assignment(Bytes::from_static(b"mine")),
        ]);
    let synced = raw.call(sync_version, &sync).await;
    assert_eq!(
        (synced.error_code, synced.assignment.as_ref()),
        (0, &b"mine"[..]),
        "SyncGroup v{sync_version}"
    );
    (id, resp.generation_id)
}

#[tokio::test]
async fn every_group_api_version_answers() {
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    for version in 0..=6 {
        let req = if version >= 4 {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![s("a"), s("b")])
        } else {
            FindCoordinatorRequest::default().with_key(s("a"))
        };
        let resp = raw.call(version, &req).await;
        if version >= 4 {
            assert_eq!(resp.coordinators.len(), 2);
            assert!(
                resp.coordinators
                    .iter()
                    .all(|c| c.error_code == 0 && c.node_id.0 == 1 && c.port == broker.addr.port() as i32)
            );
        } else {
            assert_eq!(
                (resp.error_code, resp.node_id.0, resp.port),
                (0, 1, broker.addr.port() as i32),
                "v{version}"
            );
        }
    }
    let bad = raw
        .call(1, &FindCoordinatorRequest::default().with_key(s("a")).with_key_type(7))
        .await;
    assert_eq!(bad.error_code, 42, "INVALID_REQUEST for an unknown key type");

    for version in 0..=9 {
        let group = format!("g-v{version}");
        let (member, generation) = join_alone(&mut raw, &group, version, &["t"]).await;
        let hb_version = version.min(4);
        let hb = HeartbeatRequest::default()
            .with_group_id(gid(&group))
            .with_generation_id(generation)
            .with_member_id(s(&member));
        assert_eq!(raw.call(hb_version, &hb).await.error_code, 0, "Heartbeat v{hb_version}");
        let leave_version = version.min(5);
        let leave = if leave_version >= 3 {
            LeaveGroupRequest::default()
                .with_group_id(gid(&group))
                .with_members(vec![MemberIdentity::default().with_member_id(s(&member))])
        } else {
            LeaveGroupRequest::default()
                .with_group_id(gid(&group))
                .with_member_id(s(&member))
        };
        let left = raw.call(leave_version, &leave).await;
        assert_eq!(left.error_code, 0, "LeaveGroup v{leave_version}");
        if leave_version >= 3 {
            assert_eq!(left.members[0].error_code, 0);
        }
    }
    for version in 0..=5 {
        let resp = raw.call(version, &ListGroupsRequest::default()).await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.groups.len(), 10, "ListGroups v{version}");
        if version >= 4 {
            let empty = raw
                .call(
                    version,
                    &ListGroupsRequest::default().with_states_filter(vec![s("Stable")]),
                )
                .await;
            assert!(empty.groups.is_empty(), "every group is Empty after its member left");
            assert!(resp.groups.iter().all(|g| g.group_state.as_str() == "Empty"));
        }
    }
    for version in 0..=6 {
        let resp = raw
            .call(
                version,
                &DescribeGroupsRequest::default().with_groups(vec![gid("g-v3"), gid("nope")]),
            )
            .await;
        assert_eq!(
            (resp.groups[0].error_code, resp.groups[0].group_state.as_str()),
            (0, "Empty"),
            "v{version}"
        );
        if version >= 6 {
            assert_eq!(resp.groups[1].error_code, 69, "GROUP_ID_NOT_FOUND");
        } else {
            assert_eq!(resp.groups[1].group_state.as_str(), "Dead");
        }
    }
    for version in 0..=2 {
        let group = format!("g-v{version}");
        let resp = raw
            .call(
                version,
                &DeleteGroupsRequest::default().with_groups_names(vec![gid(&group)]),
            )
            .await;
        assert_eq!(resp.results[0].error_code, 0, "DeleteGroups v{version}");
    }
    broker.handle.shutdown().await;
}

fn commit(
    group: &str,
    member: &str,
    generation: i32,
    topic_name: &str,
    partition: i32,
    offset: i64,
    meta: &str,
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member))
        .with_retention_time_ms(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic(topic_name))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(-1)
                        .with_committed_metadata(Some(s(meta))),
                ]),
        ])
}

#[tokio::test]
async fn offset_commit_and_fetch_at_every_version() {
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    // Auto-create the topic (2 partitions) through Metadata.
    raw.call(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(topic("t"))),
        ])),
    )
    .await;
    for version in 2..=9 {
        // Standalone consumers commit with generation -1 and no member id.
        let resp = raw
            .call(version, &commit("solo", "", -1, "t", 0, 100 + version as i64, "meta"))
            .await;
        assert_eq!(resp.topics[0].partitions[0].error_code, 0, "OffsetCommit v{version}");
    }
    for version in 1..=7 {
        let req = OffsetFetchRequest::default()
            .with_group_id(gid("solo"))
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(topic("t"))
                    .with_partition_indexes(vec![0, 1]),
            ]));
        let resp = raw.call(version, &req).await;
        let p = &resp.topics[0].partitions;
        assert_eq!(
            (p[0].committed_offset, p[0].metadata.as_deref()),
            (109, Some("meta")),
            "OffsetFetch v{version}"
        );
        assert_eq!(p[1].committed_offset, -1, "nothing committed on partition 1");
    }
    for version in 8..=9 {
        let req = OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(gid("solo"))
                .with_topics(None),
            OffsetFetchRequestGroup::default()
                .with_group_id(gid("other"))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopics::default()
                        .with_name(topic("t"))
                        .with_partition_indexes(vec![1]),
                ])),
        ]);
        let resp = raw.call(version, &req).await;
        assert_eq!(resp.groups.len(), 2);
        assert_eq!(
            resp.groups[0].topics[0].partitions[0].committed_offset, 109,
            "all topics of solo"
        );
        assert_eq!(resp.groups[1].topics[0].partitions[0].committed_offset, -1);
    }
    // Misuse.
    let resp = raw.call(9, &commit("solo", "", -1, "missing", 0, 1, "")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    let resp = raw.call(9, &commit("solo", "", -1, "t", 0, 1, &"m".repeat(5000))).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 12, "OFFSET_METADATA_TOO_LARGE");
    let (member, generation) = join_alone(&mut raw, "members", 9, &["t"]).await;
    let resp = raw
        .call(9, &commit("members", &member, generation + 1, "t", 0, 5, ""))
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 22, "ILLEGAL_GENERATION");
    let resp = raw
        .call(9, &commit("members", "stranger", generation, "t", 0, 5, ""))
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 25, "UNKNOWN_MEMBER_ID");
    let resp = raw
        .call(9, &commit("members", &member, generation, "t", 0, 5, ""))
        .await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    let resp = raw.call(9, &commit("nobody-home", "x", 3, "t", 0, 5, "")).await;
    assert_eq!(
        resp.topics[0].partitions[0].error_code, 22,
        "a generation for a group that does not exist"
    );

    // OffsetDelete: refused while a member subscribes to the topic, allowed otherwise.
    let del = |group: &str| {
        OffsetDeleteRequest::default()
            .with_group_id(gid(group))
            .with_topics(vec![
                OffsetDeleteRequestTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![OffsetDeleteRequestPartition::default().with_partition_index(0)]),
            ])
    };
    let resp = raw.call(0, &del("members")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 86, "GROUP_SUBSCRIBED_TO_TOPIC");
    let resp = raw.call(0, &del("solo")).await;
    assert_eq!((resp.error_code, resp.topics[0].partitions[0].error_code), (0, 0));
    let resp = raw.call(0, &del("never")).await;
    assert_eq!(resp.error_code, 69, "GROUP_ID_NOT_FOUND");
    let fetch = OffsetFetchRequest::default()
        .with_group_id(gid("solo"))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(topic("t"))
                .with_partition_indexes(vec![0]),
        ]));
    assert_eq!(
        raw.call(7, &fetch).await.topics[0].partitions[0].committed_offset,
        -1,
        "deleted"
    );
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn join_and_sync_misuse_gets_kafkas_error_codes() {
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    let resp = raw.call(9, &join_request("", "", &["range"], &["t"])).await;
    assert_eq!(resp.error_code, 24, "INVALID_GROUP_ID");
    let resp = raw.call(9, &join_request("g", "", &[], &["t"])).await;
    assert_eq!(
        resp.error_code, 23,
        "INCONSISTENT_GROUP_PROTOCOL for an empty protocol list"
    );
    let resp = raw
        .call(
            9,
            &join_request("g", "", &["range"], &["t"]).with_session_timeout_ms(10),
        )
        .await;
    assert_eq!(resp.error_code, 26, "INVALID_SESSION_TIMEOUT");
    let resp = raw
        .call(9, &join_request("g", "never-issued", &["range"], &["t"]))
        .await;
    assert_eq!(resp.error_code, 25, "UNKNOWN_MEMBER_ID");

    let (member, generation) = join_alone(&mut raw, "g", 9, &["t"]).await;
    // A second member with a protocol the group does not share.
    let resp = raw.call(5, &join_request("g", "", &["sticky"], &["t"])).await;
    assert_eq!(resp.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");
    let sync = |member: &str, generation: i32| {
        SyncGroupRequest::default()
            .with_group_id(gid("g"))
            .with_generation_id(generation)
            .with_member_id(s(member))
    };
    assert_eq!(
        raw.call(5, &sync(&member, generation + 5)).await.error_code,
        22,
        "ILLEGAL_GENERATION"
    );
    assert_eq!(
        raw.call(5, &sync("stranger", generation)).await.error_code,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    assert_eq!(
        raw.call(5, &sync(&member, generation)).await.assignment.as_ref(),
        b"mine",
        "stable: same assignment"
    );
    let hb = |member: &str, generation: i32| {
        HeartbeatRequest::default()
            .with_group_id(gid("g"))
            .with_generation_id(generation)
            .with_member_id(s(member))
    };
    assert_eq!(raw.call(4, &hb(&member, generation - 1)).await.error_code, 22);
    assert_eq!(raw.call(4, &hb("stranger", generation)).await.error_code, 25);
    assert_eq!(
        raw.call(4, &HeartbeatRequest::default().with_group_id(gid("unknown")))
            .await
            .error_code,
        25
    );

    // Static membership: a second join claiming the instance id with a stale member id is fenced.
    let mut static_join = join_request("s", "", &["range"], &["t"]).with_group_instance_id(Some(s("inst")));
    let first = raw.call(9, &static_join).await;
    assert_eq!(first.error_code, 0, "static members get their id at once");
    static_join.member_id = s("someone-else");
    assert_eq!(raw.call(9, &static_join).await.error_code, 82, "FENCED_INSTANCE_ID");

    // An assignment too large to store is refused as Kafka does (UNKNOWN_SERVER_ERROR).
    let big = SyncGroupRequest::default()
        .with_group_id(gid("big"))
        .with_assignments(vec![
            SyncGroupRequestAssignment::default().with_assignment(Bytes::from(vec![0u8; 2_000_000])),
        ]);
    let mut resp = raw.call(9, &join_request("big", "", &["range"], &["t"])).await;
    resp = raw
        .call(9, &join_request("big", &resp.member_id, &["range"], &["t"]))
        .await;
    let mut big = big
        .with_generation_id(resp.generation_id)
        .with_member_id(resp.member_id.clone());
    big.assignments[0].member_id = resp.member_id.clone();
    assert_eq!(raw.call(5, &big).await.error_code, -1, "UNKNOWN_SERVER_ERROR");
    // The broker keeps serving the connection and other groups.
    assert_eq!(raw.call(4, &hb(&member, generation)).await.error_code, 0);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn consumer_group_heartbeat_versions_and_protocol_mixing() {
    // KIP-848 on the wire: join (epoch 0), fencing, leave (epoch -1); a group is either
    // classic or consumer, and Kafka's errors when a member of the other protocol knocks.
    use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    raw.call(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(topic("t"))),
        ])),
    )
    .await;
    let beat = |group: &str, member: &str, epoch: i32, subscribe: bool| {
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(gid(group))
            .with_member_id(s(member))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(30_000);
        if subscribe {
            req.subscribed_topic_names = Some(vec![topic("t")]);
            req.topic_partitions = Some(vec![]);
        }
        req
    };
    // v0: the broker names the member.
    let joined = raw.call(0, &beat("cg0", "", 0, true)).await;
    assert_eq!((joined.error_code, joined.member_epoch), (0, 1));
    let member = joined.member_id.clone().unwrap().to_string();
    let assigned: usize = joined
        .assignment
        .unwrap()
        .topic_partitions
        .iter()
        .map(|t| t.partitions.len())
        .sum();
    assert_eq!(assigned, 2, "the only member gets both partitions");
    // v1: the member names itself (KIP-1082); an empty id is refused.
    assert_eq!(
        raw.call(1, &beat("cg1", "", 0, true)).await.error_code,
        42,
        "INVALID_REQUEST"
    );
    let joined1 = raw.call(1, &beat("cg1", "my-own-id", 0, true)).await;
    assert_eq!(
        (joined1.error_code, joined1.member_id.as_deref()),
        (0, Some("my-own-id"))
    );
    // Joining without a subscription, a stale epoch, an unknown member, an unknown assignor.
    assert_eq!(raw.call(1, &beat("cg1", "x", 0, false)).await.error_code, 42);
    assert_eq!(
        raw.call(1, &beat("cg0", &member, 9, false)).await.error_code,
        110,
        "FENCED_MEMBER_EPOCH"
    );
    assert_eq!(
        raw.call(1, &beat("cg0", "ghost", 1, false)).await.error_code,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    let mut odd = beat("cg2", "m", 0, true);
    odd.server_assignor = Some(s("nope"));
    assert_eq!(raw.call(1, &odd).await.error_code, 112, "UNSUPPORTED_ASSIGNOR");
    // The steady heartbeat, and commits checked against the member epoch.
    let steady = raw.call(1, &beat("cg0", &member, 1, false)).await;
    assert_eq!((steady.error_code, steady.member_epoch), (0, 1));
    let resp = raw.call(9, &commit("cg0", &member, 0, "t", 0, 3, "")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 113, "STALE_MEMBER_EPOCH");
    let resp = raw.call(9, &commit("cg0", &member, 1, "t", 0, 3, "")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    // Mixing: a classic member cannot join a consumer group with members...
    let resp = raw.call(9, &join_request("cg0", "", &["range"], &["t"])).await;
    assert_eq!(resp.error_code, 23, "INCONSISTENT_GROUP_PROTOCOL");
    // ...and a consumer member cannot take over a classic group with members.
    join_alone(&mut raw, "classic", 9, &["t"]).await;
    assert_eq!(
        raw.call(1, &beat("classic", "m", 0, true)).await.error_code,
        69,
        "GROUP_ID_NOT_FOUND"
    );
    // ListGroups tells the two kinds apart.
    let listed = raw
        .call(5, &ListGroupsRequest::default().with_types_filter(vec![s("consumer")]))
        .await;
    let names: Vec<&str> = listed.groups.iter().map(|g| g.group_id.0.as_str()).collect();
    assert!(names.contains(&"cg0") && !names.contains(&"classic"), "{names:?}");
    // Leaving (epoch -1) empties the group, which a classic member may then take over.
    let left = raw.call(1, &beat("cg0", &member, -1, false)).await;
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    let resp = raw.call(3, &join_request("cg0", "", &["range"], &["t"])).await;
    assert_eq!(resp.error_code, 0, "an empty consumer group converts to classic");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn a_consumer_group_survives_a_broker_restart() {
    // The group's members, epochs and partitions are in __consumer_offsets: after a restart a
    // member's heartbeat at its epoch goes on as before, with the same partitions.
    use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    raw.call(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(topic("t"))),
        ])),
    )
    .await;
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(gid("durable"))
        .with_member_id(s("member-1"))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic("t")]))
        .with_topic_partitions(Some(vec![]));
    let joined = raw.call(1, &join).await;
    assert_eq!((joined.error_code, joined.member_epoch), (0, 1));
    let assigned: Vec<i32> = joined.assignment.unwrap().topic_partitions[0].partitions.clone();
    assert_eq!(assigned.len(), 2);

    let broker = broker.restart(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    let beat = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(gid("durable"))
        .with_member_id(s("member-1"))
        .with_member_epoch(1);
    let after = raw.call(1, &beat).await;
    assert_eq!(
        (after.error_code, after.member_epoch),
        (0, 1),
        "the member is still known at its epoch"
    );
    let described = raw
        .call(
            1,
            &kafka_protocol::messages::ConsumerGroupDescribeRequest::default().with_group_ids(vec![gid("durable")]),
        )
        .await;
    let g = &described.groups[0];
    assert_eq!((g.error_code, g.members.len()), (0, 1));
    assert_eq!(
        g.members[0].assignment.topic_partitions[0].partitions, assigned,
        "same partitions"
    );
    broker.handle.shutdown().await;
}
