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
use uuid::Uuid;

const BROKER: &[(&str, &str)] = &[
    ("group.initial.rebalance.delay.ms", "0"),
    ("num.partitions", "2"),
    // KIP-848 members joining back to back get their targets at once; the 1 s default of the
    // assignment interval (KIP-1263) has its own test, on the defaults.
    ("group.consumer.assignment.interval.ms", "0"),
];

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

/// A SyncGroup at `version`: from v5 with the protocol type and name the group chose
/// (mandatory there, KIP-559), from v3 with `instance`.
fn sync_request(version: i16, group: &str, member: &str, instance: Option<&str>, generation: i32) -> SyncGroupRequest {
    let mut req = SyncGroupRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(s(member));
    if version >= 3 {
        req.group_instance_id = instance.map(s);
    }
    if version >= 5 {
        req.protocol_type = Some(s("consumer"));
        req.protocol_name = Some(s("range"));
    }
    req
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
    let sync = sync_request(sync_version, group, &id, None, resp.generation_id).with_assignments(vec![
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
    // A generation for a group that does not exist: Kafka 4's OffsetMetadataManager answers
    // GROUP_ID_NOT_FOUND from v9 (this test asserted ILLEGAL_GENERATION at v9 before), and
    // ILLEGAL_GENERATION below.
    let resp = raw.call(9, &commit("nobody-home", "x", 3, "t", 0, 5, "")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 69, "GROUP_ID_NOT_FOUND");
    let resp = raw.call(8, &commit("nobody-home", "x", 3, "t", 0, 5, "")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 22, "ILLEGAL_GENERATION");

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

/// An OffsetCommit v10 (topics by id) of `(topic id, [(partition, offset)])`, metadata "by-id".
fn commit_by_id(group: &str, generation: i32, topics: &[(Uuid, &[(i32, i64)])]) -> OffsetCommitRequest {
    let topics = topics
        .iter()
        .map(|(id, partitions)| {
            OffsetCommitRequestTopic::default().with_topic_id(*id).with_partitions(
                partitions
                    .iter()
                    .map(|(p, offset)| {
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(*p)
                            .with_committed_offset(*offset)
                            .with_committed_metadata(Some(s("by-id")))
                    })
                    .collect(),
            )
        })
        .collect();
    OffsetCommitRequest::default()
        .with_group_id(gid(group))
        .with_generation_id_or_member_epoch(generation)
        .with_topics(topics)
}

/// An OffsetFetch v10 of one group: every topic (None), or `(topic id, partitions)`.
fn fetch_by_id(group: &str, topics: Option<&[(Uuid, &[i32])]>) -> OffsetFetchRequest {
    let topics = topics.map(|ts| {
        ts.iter()
            .map(|(id, partitions)| {
                OffsetFetchRequestTopics::default()
                    .with_topic_id(*id)
                    .with_partition_indexes(partitions.to_vec())
            })
            .collect()
    });
    OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(gid(group))
            .with_topics(topics),
    ])
}

/// Each topic of an OffsetCommit answer: (id, [(partition, code)]).
type CommitCodes = Vec<(Uuid, Vec<(i32, i16)>)>;

/// Each topic of an OffsetFetch answer: (id, [(partition, offset, code)]).
type Fetched = Vec<(Uuid, Vec<(i32, i64, i16)>)>;

/// The topics of an OffsetCommit v10 answer.
fn commit_codes(resp: &OffsetCommitResponse) -> CommitCodes {
    resp.topics
        .iter()
        .map(|t| {
            let partitions = t.partitions.iter().map(|p| (p.partition_index, p.error_code)).collect();
            (t.topic_id, partitions)
        })
        .collect()
}

/// The topics of the first group of an OffsetFetch v10 answer.
fn fetched(resp: &OffsetFetchResponse) -> Fetched {
    assert_eq!(resp.groups[0].error_code, 0, "group-level error");
    resp.groups[0]
        .topics
        .iter()
        .map(|t| {
            assert!(t.name.is_empty(), "a v10 answer names no topic");
            let partitions = t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset, p.error_code))
                .collect();
            (t.topic_id, partitions)
        })
        .collect()
}

#[tokio::test]
async fn offset_commit_and_fetch_v10_name_topics_by_id() {
    // OffsetCommit and OffsetFetch v10 (KIP-848; Kafka's KafkaApis.handleOffsetCommitRequest and
    // fetchOffsetsForGroup): a topic is named by its id, resolved through the metadata image,
    // and echoed by id in the answer. An id the image does not hold (the nil id too) is
    // UNKNOWN_TOPIC_ID for each of its partitions, settled before the group coordinator is asked.
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    let t = topic_id_of(&mut raw, "t").await;
    let unknown = Uuid::new_v4();

    // Commit by id, fetch by id.
    let resp = raw.call(10, &commit_by_id("ids", -1, &[(t, &[(0, 7)])])).await;
    assert_eq!(commit_codes(&resp), vec![(t, vec![(0, 0)])]);
    assert!(resp.topics[0].name.is_empty(), "a v10 answer names no topic");
    let resp = raw.call(10, &fetch_by_id("ids", Some(&[(t, &[0, 1])]))).await;
    assert_eq!(fetched(&resp), vec![(t, vec![(0, 7, 0), (1, -1, 0)])]);
    assert_eq!(
        resp.groups[0].topics[0].partitions[0].metadata.as_deref(),
        Some("by-id")
    );

    // The same offsets through v9 names, both ways.
    let by_name = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(gid("ids"))
            .with_topics(Some(vec![
                OffsetFetchRequestTopics::default()
                    .with_name(topic("t"))
                    .with_partition_indexes(vec![0]),
            ])),
    ]);
    let resp = raw.call(9, &by_name).await;
    assert_eq!(
        resp.groups[0].topics[0].partitions[0].committed_offset, 7,
        "v9 reads the v10 commit"
    );
    let resp = raw.call(9, &commit("ids", "", -1, "t", 1, 11, "by-name")).await;
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);
    let resp = raw.call(10, &fetch_by_id("ids", Some(&[(t, &[1])]))).await;
    assert_eq!(fetched(&resp), vec![(t, vec![(1, 11, 0)])], "v10 reads the v9 commit");
    assert_eq!(
        resp.groups[0].topics[0].partitions[0].metadata.as_deref(),
        Some("by-name")
    );
    let resp = raw.call(10, &fetch_by_id("ids", None)).await;
    assert_eq!(
        fetched(&resp),
        vec![(t, vec![(0, 7, 0), (1, 11, 0)])],
        "all topics, by id"
    );

    // Unknown ids, and a partition the topic does not have, are refused before the coordinator
    // is asked; Kafka's answer builder lists them first, then the coordinator's codes in the
    // entry of their topic.
    let resp = raw
        .call(
            10,
            &commit_by_id(
                "ids",
                -1,
                &[
                    (t, &[(0, 8), (5, 1)]),
                    (unknown, &[(0, 1), (1, 1)]),
                    (Uuid::nil(), &[(0, 1)]),
                ],
            ),
        )
        .await;
    assert_eq!(
        commit_codes(&resp),
        vec![
            (t, vec![(5, UNKNOWN_TOPIC_OR_PARTITION), (0, 0)]),
            (unknown, vec![(0, UNKNOWN_TOPIC_ID), (1, UNKNOWN_TOPIC_ID)]),
            (Uuid::nil(), vec![(0, UNKNOWN_TOPIC_ID)]),
        ]
    );
    // Whatever the group: a generation for a group that does not exist is GROUP_ID_NOT_FOUND
    // for the known topic only; a commit naming only unknown ids never reaches the coordinator,
    // so it creates no group.
    let resp = raw
        .call(
            10,
            &commit_by_id("nobody-home", 3, &[(unknown, &[(0, 1)]), (t, &[(0, 1)])]),
        )
        .await;
    assert_eq!(
        commit_codes(&resp),
        vec![
            (unknown, vec![(0, UNKNOWN_TOPIC_ID)]),
            (t, vec![(0, GROUP_ID_NOT_FOUND)])
        ]
    );
    let resp = raw.call(10, &commit_by_id("ghost", -1, &[(unknown, &[(0, 1)])])).await;
    assert_eq!(commit_codes(&resp), vec![(unknown, vec![(0, UNKNOWN_TOPIC_ID)])]);
    let described = raw
        .call(6, &DescribeGroupsRequest::default().with_groups(vec![gid("ghost")]))
        .await;
    assert_eq!(
        described.groups[0].error_code, GROUP_ID_NOT_FOUND,
        "no group was created"
    );

    // OffsetFetch: an unknown id gets UNKNOWN_TOPIC_ID and offset -1 for each partition, after
    // the topics the coordinator answered.
    let resp = raw
        .call(10, &fetch_by_id("ids", Some(&[(unknown, &[0, 1]), (t, &[0])])))
        .await;
    assert_eq!(
        fetched(&resp),
        vec![
            (t, vec![(0, 8, 0)]),
            (unknown, vec![(0, -1, UNKNOWN_TOPIC_ID), (1, -1, UNKNOWN_TOPIC_ID)]),
        ]
    );

    // A deleted topic's id is unknown from then on, and its offsets leave every group (Kafka's
    // onPartitionsDeleted): asked for every topic, neither v10 nor v9 lists it, and a topic
    // created again under its name starts without offsets.
    let gone = topic_id_of(&mut raw, "gone").await;
    let resp = raw.call(10, &commit_by_id("ids", -1, &[(gone, &[(0, 3)])])).await;
    assert_eq!(commit_codes(&resp), vec![(gone, vec![(0, 0)])]);
    let deleted = raw
        .call(
            6,
            &DeleteTopicsRequest::default().with_topics(vec![
                kafka_protocol::messages::delete_topics_request::DeleteTopicState::default().with_topic_id(gone),
            ]),
        )
        .await;
    assert_eq!(deleted.responses[0].error_code, 0);
    let resp = raw.call(10, &commit_by_id("ids", -1, &[(gone, &[(0, 4)])])).await;
    assert_eq!(commit_codes(&resp), vec![(gone, vec![(0, UNKNOWN_TOPIC_ID)])]);
    let resp = raw.call(10, &fetch_by_id("ids", None)).await;
    assert_eq!(fetched(&resp), vec![(t, vec![(0, 8, 0), (1, 11, 0)])]);
    let all_by_name = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(gid("ids"))
            .with_topics(None),
    ]);
    let names: Vec<String> = raw.call(9, &all_by_name).await.groups[0]
        .topics
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, vec!["t"]);
    let again = topic_id_of(&mut raw, "gone").await;
    assert_ne!(again, gone);
    let resp = raw.call(10, &fetch_by_id("ids", Some(&[(again, &[0])]))).await;
    assert_eq!(fetched(&resp), vec![(again, vec![(0, -1, 0)])]);
    // And after a restart (the tombstones are in __consumer_offsets).
    let broker = broker.restart(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    let names: Vec<String> = raw.call(9, &all_by_name).await.groups[0]
        .topics
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, vec!["t"]);
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
    let sync = |member: &str, generation: i32| sync_request(5, "g", member, None, generation);
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
    let big = sync_request(5, "big", "", None, 0).with_assignments(vec![
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

// Kafka 4's order of checks for the member-bound group APIs (ClassicGroup.validateMember and
// validateOffsetCommit, OffsetMetadataManager.validateOffsetCommit and
// validateTransactionalOffsetCommit, GroupMetadataManager.classicGroupSync and
// classicGroupHeartbeat, ConsumerGroup.validateOffsetCommit): the member and its generation
// come before the group's rebalance state.

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const UNSUPPORTED_VERSION: i16 = 35;
const GROUP_ID_NOT_FOUND: i16 = 69;
const FENCED_INSTANCE_ID: i16 = 82;
const UNKNOWN_TOPIC_ID: i16 = 100;
const STALE_MEMBER_EPOCH: i16 = 113;

async fn create_topic_t(raw: &mut Raw) {
    raw.call(
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(topic("t"))),
        ])),
    )
    .await;
}

/// The id of topic `name`, from Metadata v12 (which creates the topic when it is missing).
async fn topic_id_of(raw: &mut Raw, name: &str) -> Uuid {
    let resp = raw
        .call(
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(topic(name))),
            ])),
        )
        .await;
    assert_eq!(resp.topics[0].error_code, 0, "Metadata of {name}");
    resp.topics[0].topic_id
}

/// OffsetCommit of partition t-0 at `version` (the instance id from v7, the topic by id from
/// v10); the partition's code.
async fn commit_code(
    raw: &mut Raw,
    version: i16,
    group: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
) -> i16 {
    let mut req = commit(group, member, generation, "t", 0, 1, "");
    if version >= 7 {
        req.group_instance_id = instance.map(s);
    }
    if version >= 10 {
        req.topics[0].topic_id = topic_id_of(raw, "t").await;
    }
    raw.call(version, &req).await.topics[0].partitions[0].error_code
}

async fn heartbeat_code(
    raw: &mut Raw,
    version: i16,
    group: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
) -> i16 {
    let mut req = HeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_generation_id(generation)
        .with_member_id(s(member));
    if version >= 3 {
        req.group_instance_id = instance.map(s);
    }
    raw.call(version, &req).await.error_code
}

async fn sync_code(
    raw: &mut Raw,
    version: i16,
    group: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
) -> i16 {
    raw.call(version, &sync_request(version, group, member, instance, generation))
        .await
        .error_code
}

async fn group_state(raw: &mut Raw, group: &str) -> String {
    let resp = raw
        .call(5, &DescribeGroupsRequest::default().with_groups(vec![gid(group)]))
        .await;
    resp.groups[0].group_state.to_string()
}

/// The only member of `group` joins again with its own id: the join phase completes at once
/// and the group waits in CompletingRebalance for its SyncGroup. Returns the new generation.
async fn rejoin(raw: &mut Raw, group: &str, member: &str) -> i32 {
    let resp = raw.call(9, &join_request(group, member, &["range"], &["t"])).await;
    assert_eq!(resp.error_code, 0, "rejoin");
    assert_eq!(group_state(raw, group).await, "CompletingRebalance");
    resp.generation_id
}

/// A static member (KIP-345) of `group`, alone and synced: (member id, generation).
async fn join_static(raw: &mut Raw, group: &str, instance: &str) -> (String, i32) {
    let req = join_request(group, "", &["range"], &["t"]).with_group_instance_id(Some(s(instance)));
    let joined = raw.call(9, &req).await;
    assert_eq!(joined.error_code, 0, "static members get their id at once");
    let id = joined.member_id.to_string();
    let synced = raw
        .call(5, &sync_request(5, group, &id, Some(instance), joined.generation_id))
        .await;
    assert_eq!(synced.error_code, 0);
    (id, joined.generation_id)
}

#[tokio::test]
async fn offset_commit_checks_the_member_and_generation_before_the_rebalance_state() {
    // ClassicGroup.validateOffsetCommit (Kafka 4): dead group, commit without generation to an
    // empty group, member and generation, and only then CompletingRebalance.
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    create_topic_t(&mut raw).await;
    for version in 2..=10 {
        let group = format!("rejoin-v{version}");
        let (a, old) = join_alone(&mut raw, &group, 9, &["t"]).await;
        let new = rejoin(&mut raw, &group, &a).await;
        assert_eq!(new, old + 1);
        assert_eq!(
            commit_code(&mut raw, version, &group, &a, None, old).await,
            ILLEGAL_GENERATION,
            "v{version}: the old generation during the member's own rejoin"
        );
        assert_eq!(
            commit_code(&mut raw, version, &group, &a, None, new).await,
            REBALANCE_IN_PROGRESS,
            "v{version}: the new generation before its SyncGroup"
        );
        assert_eq!(
            commit_code(&mut raw, version, &group, "stranger", None, new).await,
            UNKNOWN_MEMBER_ID,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, &group, "", None, -1).await,
            UNKNOWN_MEMBER_ID,
            "v{version}: no member named while the group has one"
        );
        let synced = raw.call(5, &sync_request(5, &group, &a, None, new)).await;
        assert_eq!(synced.error_code, 0);
        assert_eq!(
            commit_code(&mut raw, version, &group, &a, None, new).await,
            0,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, &group, &a, None, old).await,
            ILLEGAL_GENERATION,
            "v{version}: Stable"
        );
        // The member leaves: the group is Empty and takes commits without generation, whatever
        // member id they name, and no others.
        let leave = LeaveGroupRequest::default()
            .with_group_id(gid(&group))
            .with_member_id(s(&a));
        assert_eq!(raw.call(0, &leave).await.error_code, 0);
        assert_eq!(
            commit_code(&mut raw, version, &group, "", None, -1).await,
            0,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, &group, "ghost", None, -1).await,
            0,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, &group, &a, None, new).await,
            UNKNOWN_MEMBER_ID,
            "v{version}: Empty"
        );
        // A group that does not exist: created by a commit without generation; otherwise
        // GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before.
        let missing = format!("missing-v{version}");
        let expected = if version >= 9 {
            GROUP_ID_NOT_FOUND
        } else {
            ILLEGAL_GENERATION
        };
        assert_eq!(
            commit_code(&mut raw, version, &missing, "x", None, 3).await,
            expected,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, &missing, "", None, -1).await,
            0,
            "v{version}"
        );
    }
    // Static members (v7+ name their instance): the instance id first, then the member id,
    // then the generation.
    let (id, generation) = join_static(&mut raw, "static", "inst").await;
    for version in 7..=10 {
        assert_eq!(
            commit_code(&mut raw, version, "static", "stranger", Some("inst"), generation + 5).await,
            FENCED_INSTANCE_ID,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, "static", &id, Some("other"), generation).await,
            UNKNOWN_MEMBER_ID,
            "v{version}: an instance id the group does not know"
        );
        assert_eq!(
            commit_code(&mut raw, version, "static", &id, Some("inst"), generation + 5).await,
            ILLEGAL_GENERATION,
            "v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, "static", &id, Some("inst"), generation).await,
            0,
            "v{version}"
        );
    }
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn heartbeat_and_sync_check_the_member_and_generation_before_the_state() {
    // GroupMetadataManager.classicGroupHeartbeat and classicGroupSync (Kafka 4).
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    create_topic_t(&mut raw).await;
    let (a, old) = join_alone(&mut raw, "hb", 9, &["t"]).await;
    // A second member's join (v3: no KIP-394 round trip) waits for `a` to rejoin.
    let mut other = Raw::connect(broker.addr).await;
    let second = tokio::spawn(async move { other.call(3, &join_request("hb", "", &["range"], &["t"])).await });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while group_state(&mut raw, "hb").await != "PreparingRebalance" {
        assert!(tokio::time::Instant::now() < deadline, "the second join never arrived");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for version in 0..=4 {
        assert_eq!(
            heartbeat_code(&mut raw, version, "hb", &a, None, old).await,
            REBALANCE_IN_PROGRESS,
            "Heartbeat v{version}: rejoin"
        );
        assert_eq!(
            heartbeat_code(&mut raw, version, "hb", &a, None, old - 1).await,
            ILLEGAL_GENERATION,
            "Heartbeat v{version}: a stale generation, whatever the state"
        );
        assert_eq!(
            heartbeat_code(&mut raw, version, "hb", "stranger", None, old - 1).await,
            UNKNOWN_MEMBER_ID,
            "Heartbeat v{version}: the member before the generation"
        );
        if version >= 3 {
            assert_eq!(
                heartbeat_code(&mut raw, version, "hb", &a, Some("nope"), old).await,
                UNKNOWN_MEMBER_ID,
                "Heartbeat v{version}: an instance id the group does not know"
            );
        }
    }
    for version in 0..=5 {
        assert_eq!(
            sync_code(&mut raw, version, "hb", &a, None, old).await,
            REBALANCE_IN_PROGRESS,
            "SyncGroup v{version}"
        );
        assert_eq!(
            sync_code(&mut raw, version, "hb", &a, None, old + 1).await,
            ILLEGAL_GENERATION,
            "SyncGroup v{version}"
        );
        assert_eq!(
            sync_code(&mut raw, version, "hb", "stranger", None, old + 1).await,
            UNKNOWN_MEMBER_ID,
            "SyncGroup v{version}: the member before the generation"
        );
        if version >= 3 {
            assert_eq!(
                sync_code(&mut raw, version, "hb", &a, Some("nope"), old).await,
                UNKNOWN_MEMBER_ID,
                "SyncGroup v{version}: an instance id the group does not know"
            );
        }
    }
    // v5: the generation before the protocol, the protocol before the state; a request
    // without protocol type or name is refused before anything else.
    let mismatched = sync_request(5, "hb", &a, None, old).with_protocol_name(Some(s("roundrobin")));
    assert_eq!(raw.call(5, &mismatched).await.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let mismatched = mismatched.with_generation_id(old + 1);
    assert_eq!(raw.call(5, &mismatched).await.error_code, ILLEGAL_GENERATION);
    let mismatched = mismatched.with_member_id(s("stranger"));
    assert_eq!(raw.call(5, &mismatched).await.error_code, UNKNOWN_MEMBER_ID);
    let bare = sync_request(5, "hb", &a, None, old).with_protocol_type(None);
    assert_eq!(raw.call(5, &bare).await.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let bare = sync_request(5, "no-such-group", "x", None, 1).with_protocol_name(None);
    assert_eq!(raw.call(5, &bare).await.error_code, INCONSISTENT_GROUP_PROTOCOL);

    // `a` rejoins: the join phase completes for both, the group waits for the leader's sync.
    let joined = raw.call(9, &join_request("hb", &a, &["range"], &["t"])).await;
    let b = second.await.unwrap();
    assert_eq!((joined.error_code, b.error_code), (0, 0));
    let new = joined.generation_id;
    assert_eq!(
        (new, b.generation_id, joined.leader.as_str()),
        (old + 1, new, a.as_str())
    );
    let b = b.member_id.to_string();
    assert_eq!(group_state(&mut raw, "hb").await, "CompletingRebalance");
    for version in 0..=4 {
        assert_eq!(
            heartbeat_code(&mut raw, version, "hb", &b, None, new).await,
            0,
            "Heartbeat v{version}: a member between its join and its sync"
        );
        assert_eq!(
            heartbeat_code(&mut raw, version, "hb", &a, None, old).await,
            ILLEGAL_GENERATION,
            "Heartbeat v{version}"
        );
    }
    for version in 0..=5 {
        assert_eq!(
            sync_code(&mut raw, version, "hb", &a, None, old).await,
            ILLEGAL_GENERATION,
            "SyncGroup v{version}"
        );
        assert_eq!(
            sync_code(&mut raw, version, "hb", "stranger", None, new).await,
            UNKNOWN_MEMBER_ID,
            "SyncGroup v{version}"
        );
    }
    let leader_sync = sync_request(5, "hb", &a, None, new).with_assignments(vec![
        SyncGroupRequestAssignment::default()
            .with_member_id(s(&a))
            .with_assignment(Bytes::from_static(b"A")),
        SyncGroupRequestAssignment::default()
            .with_member_id(s(&b))
            .with_assignment(Bytes::from_static(b"B")),
    ]);
    assert_eq!(raw.call(5, &leader_sync).await.assignment.as_ref(), b"A");
    assert_eq!(
        raw.call(3, &sync_request(3, "hb", &b, None, new))
            .await
            .assignment
            .as_ref(),
        b"B",
        "Stable: a follower's late sync gets its assignment"
    );

    // Both leave: an Empty group knows no member, whatever the request says.
    let leave = LeaveGroupRequest::default().with_group_id(gid("hb")).with_members(vec![
        MemberIdentity::default().with_member_id(s(&a)),
        MemberIdentity::default().with_member_id(s(&b)),
    ]);
    assert_eq!(raw.call(3, &leave).await.error_code, 0);
    for version in 0..=4 {
        assert_eq!(
            heartbeat_code(&mut raw, version, "hb", &a, None, new).await,
            UNKNOWN_MEMBER_ID,
            "Heartbeat v{version}: Empty"
        );
        assert_eq!(
            heartbeat_code(&mut raw, version, "nowhere", &a, None, new).await,
            UNKNOWN_MEMBER_ID,
            "Heartbeat v{version}: no such group"
        );
    }
    for version in 0..=5 {
        assert_eq!(
            sync_code(&mut raw, version, "hb", &a, None, new + 7).await,
            UNKNOWN_MEMBER_ID,
            "SyncGroup v{version}: Empty"
        );
        assert_eq!(
            sync_code(&mut raw, version, "nowhere", &a, None, new).await,
            UNKNOWN_MEMBER_ID,
            "SyncGroup v{version}: no such group"
        );
    }

    // Static members: the instance id before the member id and the generation.
    let (id, generation) = join_static(&mut raw, "static-hb", "inst").await;
    for version in 3..=4 {
        assert_eq!(
            heartbeat_code(&mut raw, version, "static-hb", "stranger", Some("inst"), generation + 5).await,
            FENCED_INSTANCE_ID,
            "Heartbeat v{version}"
        );
        assert_eq!(
            heartbeat_code(&mut raw, version, "static-hb", &id, Some("inst"), generation).await,
            0,
            "Heartbeat v{version}"
        );
    }
    for version in 3..=5 {
        assert_eq!(
            sync_code(&mut raw, version, "static-hb", "stranger", Some("inst"), generation + 5).await,
            FENCED_INSTANCE_ID,
            "SyncGroup v{version}"
        );
    }
    broker.handle.shutdown().await;
}

mod txn {
    //! A transactional producer's TxnOffsetCommit, by raw frames.
    use super::*;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };

    /// A producer of `id` with an open transaction that holds the offsets partitions of
    /// `groups` (AddOffsetsToTxn; TxnOffsetCommit v5 would add them itself).
    pub async fn begin(raw: &mut Raw, id: &str, groups: &[&str]) -> (i64, i16) {
        let init = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(id))))
            .with_transaction_timeout_ms(60_000);
        let resp = raw.call(4, &init).await;
        assert_eq!(resp.error_code, 0, "InitProducerId");
        let (pid, epoch) = (resp.producer_id.0, resp.producer_epoch);
        for group in groups {
            let add = AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(s(id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(gid(group));
            assert_eq!(raw.call(3, &add).await.error_code, 0, "AddOffsetsToTxn {group}");
        }
        (pid, epoch)
    }

    /// TxnOffsetCommit of t-0 at `version`; member, generation and instance id from v3.
    #[allow(clippy::too_many_arguments)]
    pub async fn commit_code(
        raw: &mut Raw,
        version: i16,
        producer: (&str, i64, i16),
        group: &str,
        member: &str,
        instance: Option<&str>,
        generation: i32,
    ) -> i16 {
        commit_partition_code(raw, version, producer, (group, member, instance, generation), 0).await
    }

    /// TxnOffsetCommit of t-`partition` at `version` by (group, member, instance, generation).
    pub async fn commit_partition_code(
        raw: &mut Raw,
        version: i16,
        producer: (&str, i64, i16),
        (group, member, instance, generation): (&str, &str, Option<&str>, i32),
        partition: i32,
    ) -> i16 {
        let (id, pid, epoch) = producer;
        let mut req = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s(id)))
            .with_group_id(gid(group))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(topic("t"))
                    .with_partitions(vec![
                        TxnOffsetCommitRequestPartition::default()
                            .with_partition_index(partition)
                            .with_committed_offset(1)
                            .with_committed_leader_epoch(-1),
                    ]),
            ]);
        if version >= 3 {
            req.member_id = s(member);
            req.group_instance_id = instance.map(s);
            req.generation_id = generation;
        }
        raw.call(version, &req).await.topics[0].partitions[0].error_code
    }

    pub async fn abort(raw: &mut Raw, producer: (&str, i64, i16)) {
        let (id, pid, epoch) = producer;
        let end = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(s(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(false);
        assert_eq!(raw.call(3, &end).await.error_code, 0, "EndTxn");
    }
}

#[tokio::test]
async fn txn_offset_commit_checks_the_member_and_generation_but_not_the_rebalance_state() {
    // OffsetMetadataManager.validateTransactionalOffsetCommit and ClassicGroup
    // .validateOffsetCommit with isTransactional (Kafka 4): v3+ name a member (KIP-447), which
    // is checked with its generation; the rebalance state is not.
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    create_topic_t(&mut raw).await;
    let (a, old) = join_alone(&mut raw, "txg", 9, &["t"]).await;
    let new = rejoin(&mut raw, "txg", &a).await;
    let (s_id, s_generation) = join_static(&mut raw, "txg-static", "inst").await;
    for version in 0..=5 {
        let id = format!("tx-v{version}");
        let missing = format!("txg-missing-v{version}");
        let (pid, epoch) = txn::begin(&mut raw, &id, &["txg", "txg-static", &missing]).await;
        let producer = (id.as_str(), pid, epoch);
        assert_eq!(
            txn::commit_code(&mut raw, version, producer, "txg", "", None, -1).await,
            0,
            "v{version}: naming no member is accepted even with members and mid-rebalance"
        );
        if version >= 3 {
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, "txg", &a, None, old).await,
                ILLEGAL_GENERATION,
                "v{version}: the old generation during the member's own rejoin"
            );
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, "txg", &a, None, new).await,
                0,
                "v{version}: CompletingRebalance does not matter to a transaction"
            );
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, "txg", "stranger", None, new).await,
                UNKNOWN_MEMBER_ID,
                "v{version}"
            );
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, "txg-static", "stranger", Some("inst"), 99).await,
                FENCED_INSTANCE_ID,
                "v{version}"
            );
            assert_eq!(
                txn::commit_code(
                    &mut raw,
                    version,
                    producer,
                    "txg-static",
                    &s_id,
                    Some("other"),
                    s_generation
                )
                .await,
                UNKNOWN_MEMBER_ID,
                "v{version}: an instance id the group does not know"
            );
            assert_eq!(
                txn::commit_code(
                    &mut raw,
                    version,
                    producer,
                    "txg-static",
                    &s_id,
                    Some("inst"),
                    s_generation
                )
                .await,
                0,
                "v{version}"
            );
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, &missing, "x", None, 3).await,
                ILLEGAL_GENERATION,
                "v{version}: a generation for a group that does not exist"
            );
        }
        assert_eq!(
            txn::commit_code(&mut raw, version, producer, &missing, "", None, -1).await,
            0,
            "v{version}: creates the group"
        );
        txn::abort(&mut raw, producer).await;
    }
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn a_consumer_group_checks_the_member_then_the_version_then_the_epoch() {
    // ConsumerGroup.validateOffsetCommit (Kafka 4, KIP-848): a member of the consumer protocol
    // must commit with OffsetCommit v9 or later; a wrong epoch is STALE_MEMBER_EPOCH there and
    // ILLEGAL_GENERATION in TxnOffsetCommit, which has no such code.
    use kafka_protocol::messages::ConsumerGroupHeartbeatRequest;
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    create_topic_t(&mut raw).await;
    let beat = |epoch: i32| {
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(gid("kc"))
            .with_member_id(s("m1"))
            .with_member_epoch(epoch)
            .with_rebalance_timeout_ms(30_000);
        if epoch == 0 {
            req.subscribed_topic_names = Some(vec![topic("t")]);
            req.topic_partitions = Some(vec![]);
        }
        req
    };
    let joined = raw.call(1, &beat(0)).await;
    assert_eq!((joined.error_code, joined.member_epoch), (0, 1));
    for version in 2..=8 {
        assert_eq!(
            commit_code(&mut raw, version, "kc", "m1", None, 1).await,
            UNSUPPORTED_VERSION,
            "OffsetCommit v{version}"
        );
        assert_eq!(
            commit_code(&mut raw, version, "kc", "ghost", None, 1).await,
            UNKNOWN_MEMBER_ID,
            "OffsetCommit v{version}: the member before the version"
        );
        assert_eq!(
            commit_code(&mut raw, version, "kc", "", None, -1).await,
            UNKNOWN_MEMBER_ID,
            "OffsetCommit v{version}: no member named while the group has one"
        );
    }
    for version in 9..=10 {
        for epoch in [0, 2] {
            assert_eq!(
                commit_code(&mut raw, version, "kc", "m1", None, epoch).await,
                STALE_MEMBER_EPOCH,
                "OffsetCommit v{version}: epoch {epoch}"
            );
        }
        assert_eq!(commit_code(&mut raw, version, "kc", "m1", None, 1).await, 0);
    }
    for version in 0..=5 {
        let id = format!("kc-tx-v{version}");
        let (pid, epoch) = txn::begin(&mut raw, &id, &["kc"]).await;
        let producer = (id.as_str(), pid, epoch);
        assert_eq!(
            txn::commit_code(&mut raw, version, producer, "kc", "", None, -1).await,
            0,
            "TxnOffsetCommit v{version}: naming no member"
        );
        if version >= 3 {
            for stale in [0, 2] {
                assert_eq!(
                    txn::commit_code(&mut raw, version, producer, "kc", "m1", None, stale).await,
                    ILLEGAL_GENERATION,
                    "TxnOffsetCommit v{version}: epoch {stale}"
                );
            }
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, "kc", "ghost", None, 1).await,
                UNKNOWN_MEMBER_ID,
                "TxnOffsetCommit v{version}"
            );
            assert_eq!(
                txn::commit_code(&mut raw, version, producer, "kc", "m1", None, 1).await,
                0,
                "TxnOffsetCommit v{version}"
            );
        }
        txn::abort(&mut raw, producer).await;
    }
    // Once the group has no members, a commit without epoch goes through whatever it names.
    let left = raw.call(1, &beat(-1)).await;
    assert_eq!(left.error_code, 0);
    assert_eq!(commit_code(&mut raw, 9, "kc", "m1", None, -1).await, 0);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn an_older_member_epoch_commits_the_partitions_held_since_then() {
    // KIP-1251 (Kafka 4.3's ConsumerGroup.validateOffsetCommit): a commit at an epoch older than
    // the member's passes for partitions it has held since that epoch, so a commit that raced the
    // heartbeat moving its epoch is not refused; one for a partition it gave up is, as is one at
    // a newer epoch. TxnOffsetCommit says ILLEGAL_GENERATION where OffsetCommit says
    // STALE_MEMBER_EPOCH.
    let broker = TestBroker::start(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    create_topic_t(&mut raw).await;
    let t = topic_id_of(&mut raw, "t").await;
    let beat = |member: &str, epoch: i32, owned: &[i32]| t_member_beat("ke", member, epoch, t, owned);
    let owned = |resp: &ConsumerGroupHeartbeatResponse| -> Vec<i32> {
        let mut p: Vec<i32> = resp
            .assignment
            .as_ref()
            .expect("an assignment")
            .topic_partitions
            .iter()
            .flat_map(|tp| tp.partitions.clone())
            .collect();
        p.sort_unstable();
        p
    };
    let a = raw.call(1, &beat("a", 0, &[])).await;
    assert_eq!((a.error_code, a.member_epoch, owned(&a)), (0, 1, vec![0, 1]));
    let b = raw.call(1, &beat("b", 0, &[])).await;
    assert_eq!((b.error_code, b.member_epoch), (0, 2));
    // a gives one partition up at epoch 1, then takes epoch 2 with the other.
    let told = raw.call(1, &beat("a", 1, &[0, 1])).await;
    let kept = owned(&told);
    assert_eq!((told.member_epoch, kept.len()), (1, 1), "{told:?}");
    let (kept, lost) = (kept[0], 1 - kept[0]);
    let moved = raw.call(1, &beat("a", 1, &[kept])).await;
    assert_eq!(moved.member_epoch, 2, "{moved:?}");
    for version in 9..=10 {
        let code = |resp: OffsetCommitResponse| resp.topics[0].partitions[0].error_code;
        let commit_at = |epoch: i32, partition: i32| {
            let mut req = commit("ke", "a", epoch, "t", partition, 5, "");
            if version >= 10 {
                req.topics[0].topic_id = t;
            }
            req
        };
        assert_eq!(
            code(raw.call(version, &commit_at(1, kept)).await),
            0,
            "v{version}: held since epoch 1"
        );
        assert_eq!(
            code(raw.call(version, &commit_at(1, lost)).await),
            STALE_MEMBER_EPOCH,
            "v{version}: given up"
        );
        assert_eq!(
            code(raw.call(version, &commit_at(0, kept)).await),
            STALE_MEMBER_EPOCH,
            "v{version}: before it was assigned"
        );
        assert_eq!(
            code(raw.call(version, &commit_at(3, kept)).await),
            STALE_MEMBER_EPOCH,
            "v{version}: newer"
        );
        assert_eq!(
            code(raw.call(version, &commit_at(2, lost)).await),
            0,
            "v{version}: its own epoch"
        );
    }
    let (pid, epoch) = txn::begin(&mut raw, "ke-tx", &["ke"]).await;
    let producer = ("ke-tx", pid, epoch);
    assert_eq!(
        txn::commit_partition_code(&mut raw, 5, producer, ("ke", "a", None, 1), kept).await,
        0,
        "TxnOffsetCommit: held since epoch 1"
    );
    assert_eq!(
        txn::commit_partition_code(&mut raw, 5, producer, ("ke", "a", None, 1), lost).await,
        ILLEGAL_GENERATION,
        "TxnOffsetCommit: given up"
    );
    txn::abort(&mut raw, producer).await;
    // The assignment epochs survive a restart.
    let broker = broker.restart(BROKER).await;
    let mut raw = Raw::connect(broker.addr).await;
    let code = raw.call(9, &commit("ke", "a", 1, "t", kept, 6, "")).await.topics[0].partitions[0].error_code;
    assert_eq!(code, 0, "after a restart: held since epoch 1");
    let code = raw.call(9, &commit("ke", "a", 1, "t", lost, 6, "")).await.topics[0].partitions[0].error_code;
    assert_eq!(code, STALE_MEMBER_EPOCH, "after a restart: given up");
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn a_group_assigns_at_most_once_per_assignment_interval() {
    // KIP-1263 (Kafka 4.3): on the broker's defaults (group.consumer.assignment.interval.ms
    // 1000) a member joining right after the group's first target gets nothing, at that
    // target's epoch, while the group is Assigning; the first heartbeat a second later computes
    // the next target. A group whose consumer.assignment.interval.ms is 0 assigns at once.
    use kafka_protocol::messages::ConsumerGroupDescribeRequest;
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let broker = TestBroker::start(&BROKER[..2]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create_topic_t(&mut raw).await;
    let t = topic_id_of(&mut raw, "t").await;
    let beat = |group: &str, member: &str, epoch: i32, owned: &[i32]| t_member_beat(group, member, epoch, t, owned);
    let count = |resp: &ConsumerGroupHeartbeatResponse| {
        resp.assignment
            .as_ref()
            .map(|a| a.topic_partitions.iter().map(|tp| tp.partitions.len()).sum::<usize>())
    };
    let describe = |group: &str| ConsumerGroupDescribeRequest::default().with_group_ids(vec![gid(group)]);

    let a = raw.call(1, &beat("paced", "a", 0, &[])).await;
    let first_target = std::time::Instant::now();
    assert_eq!((a.error_code, a.member_epoch, count(&a)), (0, 1, Some(2)));
    let b = raw.call(1, &beat("paced", "b", 0, &[])).await;
    assert_eq!((b.error_code, b.member_epoch, count(&b)), (0, 1, Some(0)), "{b:?}");
    let d = raw.call(1, &describe("paced")).await;
    let g = &d.groups[0];
    assert_eq!(
        (g.group_state.as_str(), g.group_epoch, g.assignment_epoch),
        ("Assigning", 2, 1)
    );
    let a = raw.call(1, &beat("paced", "a", 1, &[0, 1])).await;
    assert_eq!((a.member_epoch, count(&a)), (1, None), "a keeps both meanwhile");

    // IncrementalAlterConfigs SET of one key on a resource (type, name).
    let set = |kind: i8, name: &str, key: &str, value: &str| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(kind)
                .with_resource_name(s(name))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(s(key))
                        .with_config_operation(0)
                        .with_value(Some(s(value))),
                ]),
        ])
    };
    // A group of its own interval 0 assigns at each change.
    let eager = set(32, "eager", "consumer.assignment.interval.ms", "0");
    assert_eq!(raw.call(1, &eager).await.responses[0].error_code, 0);
    let a0 = raw.call(1, &beat("eager", "a", 0, &[])).await;
    assert_eq!((a0.member_epoch, count(&a0)), (1, Some(2)));
    let b0 = raw.call(1, &beat("eager", "b", 0, &[])).await;
    assert_eq!(b0.member_epoch, 2, "{b0:?}");

    // A second after the first target, a's heartbeat computes the next: it gives one up.
    tokio::time::sleep(std::time::Duration::from_millis(1_050).saturating_sub(first_target.elapsed())).await;
    let a = raw.call(1, &beat("paced", "a", 1, &[0, 1])).await;
    assert_eq!((a.member_epoch, count(&a)), (1, Some(1)), "{a:?}");
    let d = raw.call(1, &describe("paced")).await;
    assert_eq!((d.groups[0].group_epoch, d.groups[0].assignment_epoch), (2, 2));

    // The broker default is a dynamic broker config: set to 0 cluster-wide, a group without its
    // own value assigns at once from its next heartbeat; past the broker's max it is refused.
    let broker_default = |value: &str| set(4, "", "group.consumer.assignment.interval.ms", value);
    let refused = raw.call(1, &broker_default("15001")).await;
    // INVALID_REQUEST, naming the bound, as Kafka's broker config validation answers.
    assert_eq!(refused.responses[0].error_code, 42, "{refused:?}");
    assert!(format!("{:?}", refused.responses[0].error_message).contains("group.consumer.max.assignment.interval.ms"));
    assert_eq!(raw.call(1, &broker_default("0")).await.responses[0].error_code, 0);
    let a = raw.call(1, &beat("live", "a", 0, &[])).await;
    assert_eq!((a.member_epoch, count(&a)), (1, Some(2)));
    let b = raw.call(1, &beat("live", "b", 0, &[])).await;
    assert_eq!(b.member_epoch, 2, "{b:?}");
    broker.handle.shutdown().await;
}

/// A ConsumerGroupHeartbeat of `member` of `group` at `epoch`, owning `owned` of topic t (id
/// `t`); joining (epoch 0) it subscribes to t.
fn t_member_beat(group: &str, member: &str, epoch: i32, t: Uuid, owned: &[i32]) -> ConsumerGroupHeartbeatRequest {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(gid(group))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(30_000)
        .with_topic_partitions(Some(vec![
            TopicPartitions::default()
                .with_topic_id(t)
                .with_partitions(owned.to_vec()),
        ]));
    if epoch == 0 {
        req.subscribed_topic_names = Some(vec![topic("t")]);
    }
    req
}
