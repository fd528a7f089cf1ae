//! ACLs (issue 13): CreateAcls, DescribeAcls and DeleteAcls, and each API's checks, as raw
//! frames over a SASL_PLAINTEXT listener with the authorizer on (`super.users=User:admin`,
//! `allow.everyone.if.no.acl.found` at its default false). Each check names the Kafka code it
//! expects; "nothing leaks" means no data, no offsets and no topic names to a principal the
//! ACLs do not allow. kafka-python's ACL admin calls and confluent-kafka clients are in
//! `clients/test_acl.sh`.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";"#;
const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";

// Kafka's codes.
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const GROUP_AUTHORIZATION_FAILED: i16 = 30;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const INVALID_REQUEST: i16 = 42;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

// AclOperation, ResourceType, PatternType and AclPermissionType codes.
const ANY: i8 = 1;
const ALL: i8 = 2;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DESCRIBE: i8 = 8;
const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const CLUSTER: i8 = 4;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const MATCH: i8 = 2;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn settings(listeners: &str) -> Vec<(&str, &str)> {
    vec![
        ("listeners", listeners),
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", JAAS),
        ("authorizer.class.name", AUTHORIZER),
        ("super.users", "User:admin"),
        ("num.partitions", "1"),
    ]
}

/// The issue's example configuration on a port of its own (PLAINTEXT first, on port 0, for
/// the harness; it is User:ANONYMOUS there).
async fn start() -> (TestBroker, SocketAddr, String) {
    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let broker = TestBroker::start(&settings(&listeners)).await;
    (broker, SocketAddr::from(([127, 0, 0, 1], port)), listeners)
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn login(addr: SocketAddr, user: &str) -> Raw {
    let mut raw = Raw::connect(addr).await;
    let hs = raw
        .call(1, &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")))
        .await;
    assert_eq!(hs.error_code, 0);
    let token = format!("\0{user}\0{user}-secret");
    let resp = raw
        .call(
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        )
        .await;
    assert_eq!(resp.error_code, 0, "{user} logs in");
    raw
}

fn acl(rt: i8, name: &str, pattern: i8, principal: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

async fn create_acls(raw: &mut Raw, acls: Vec<AclCreation>) -> Vec<i16> {
    let resp = raw.call(3, &CreateAclsRequest::default().with_creations(acls)).await;
    resp.results.iter().map(|r| r.error_code).collect()
}

/// Matches every binding (the codec's defaults are empty strings, which match none).
fn any_filter() -> DescribeAclsRequest {
    DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(ANY)
        .with_pattern_type_filter(ANY)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

/// (resource type, name, pattern, principal, operation, permission) of each binding described.
async fn describe(
    raw: &mut Raw,
    version: i16,
    filter: DescribeAclsRequest,
) -> (i16, Vec<(i8, String, i8, String, i8, i8)>) {
    let resp = raw.call(version, &filter).await;
    let mut out = Vec::new();
    for r in &resp.resources {
        for a in &r.acls {
            out.push((
                r.resource_type,
                r.resource_name.to_string(),
                r.pattern_type,
                a.principal.to_string(),
                a.operation,
                a.permission_type,
            ));
        }
    }
    out.sort();
    (resp.error_code, out)
}

fn records() -> Bytes {
    let records = vec![(Some(Bytes::from("k")), Some(Bytes::from("v")), 1_700_000_000_000i64)];
    sluice::log::batch::encode_records(&records, Compression::None).unwrap()
}

async fn produce(raw: &mut Raw, topic_name: &str) -> i16 {
    let resp = raw.call(9, &produce_request(topic_name, 0, records(), -1)).await;
    resp.responses[0].partition_responses[0].error_code
}

async fn create_topic(raw: &mut Raw, name: &str) -> i16 {
    raw.call(7, &create_topic_request(name, 1, 10_000)).await.topics[0].error_code
}

/// Topic names and codes Metadata v12 answers: all topics (None) or those named.
async fn metadata(raw: &mut Raw, names: Option<&[&str]>) -> Vec<(String, i16)> {
    let topics = names.map(|n| {
        n.iter()
            .map(|t| MetadataRequestTopic::default().with_name(Some(topic(t))))
            .collect()
    });
    let req = MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false)
        .with_include_topic_authorized_operations(true);
    let resp = raw.call(12, &req).await;
    let mut out: Vec<(String, i16)> = resp
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect();
    out.sort();
    out
}

fn commit_request(group: &str, topic_name: &str) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic(topic_name))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ]),
        ])
}

#[tokio::test]
async fn acl_apis_create_describe_delete_and_survive_a_restart() {
    let (broker, sasl, _) = start().await;
    let mut admin = login(sasl, "admin").await;
    let codes = create_acls(
        &mut admin,
        vec![
            acl(TOPIC, "orders-", PREFIXED, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "orders-secret", LITERAL, "User:alice", ALL, DENY),
            acl(GROUP, "*", LITERAL, "User:alice", READ, ALLOW),
            // Kafka refuses these with INVALID_REQUEST, each on its own.
            acl(CLUSTER, "not-kafka-cluster", LITERAL, "User:alice", DESCRIBE, ALLOW),
            acl(TOPIC, "", LITERAL, "User:alice", READ, ALLOW),
            acl(TOPIC, "t", LITERAL, "alice", READ, ALLOW),
            acl(TOPIC, "t", MATCH, "User:alice", READ, ALLOW),
            acl(TOPIC, "t", LITERAL, "User:alice", ANY, ALLOW),
            acl(0, "t", LITERAL, "User:alice", READ, ALLOW),
        ],
    )
    .await;
    assert_eq!(codes, [0, 0, 0, 42, 42, 42, 42, 42, 42]);
    // The same binding again: accepted, stored once.
    assert_eq!(
        create_acls(&mut admin, vec![acl(GROUP, "*", LITERAL, "User:alice", READ, ALLOW)]).await,
        [0]
    );
    let expected = vec![
        (
            TOPIC,
            "orders-".to_string(),
            PREFIXED,
            "User:alice".to_string(),
            WRITE,
            ALLOW,
        ),
        (
            TOPIC,
            "orders-secret".to_string(),
            LITERAL,
            "User:alice".to_string(),
            ALL,
            DENY,
        ),
        (GROUP, "*".to_string(), LITERAL, "User:alice".to_string(), READ, ALLOW),
    ];
    let mut sorted = expected.clone();
    sorted.sort();
    for version in 1..=3 {
        assert_eq!(
            describe(&mut admin, version, any_filter()).await,
            (0, sorted.clone()),
            "v{version}"
        );
    }
    // MATCH: what applies to topic orders-secret (its literal and the prefix).
    let matching = any_filter()
        .with_resource_type_filter(TOPIC)
        .with_resource_name_filter(Some(s("orders-secret")))
        .with_pattern_type_filter(MATCH);
    let (code, found) = describe(&mut admin, 3, matching).await;
    assert_eq!((code, found.len()), (0, 2));
    // PREFIXED only, and by permission.
    let prefixed = any_filter().with_pattern_type_filter(PREFIXED);
    assert_eq!(describe(&mut admin, 3, prefixed).await.1, vec![expected[0].clone()]);
    let denies = any_filter().with_permission_type(DENY);
    assert_eq!(describe(&mut admin, 3, denies).await.1, vec![expected[1].clone()]);
    let unknown = any_filter().with_operation(0);
    assert_eq!(describe(&mut admin, 3, unknown).await.0, INVALID_REQUEST);

    // alice may not manage ACLs: CLUSTER_AUTHORIZATION_FAILED, and nothing is told.
    let mut alice = login(sasl, "alice").await;
    let (code, found) = describe(&mut alice, 3, any_filter()).await;
    assert_eq!((code, found.len()), (CLUSTER_AUTHORIZATION_FAILED, 0));
    assert_eq!(
        create_acls(&mut alice, vec![acl(TOPIC, "*", LITERAL, "User:alice", ALL, ALLOW)]).await,
        [CLUSTER_AUTHORIZATION_FAILED]
    );

    // The bindings are in the metadata log: they come back after a restart.
    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let broker = broker.restart(&settings(&listeners)).await;
    let sasl = SocketAddr::from(([127, 0, 0, 1], port));
    let mut admin = login(sasl, "admin").await;
    assert_eq!(describe(&mut admin, 3, any_filter()).await, (0, sorted.clone()));

    // DeleteAcls: each filter answers what it removed; a filter matching nothing, no error.
    let delete = DeleteAclsRequest::default().with_filters(vec![
        DeleteAclsFilter::default()
            .with_resource_name_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(TOPIC)
            .with_pattern_type_filter(ANY)
            .with_principal_filter(Some(s("User:alice")))
            .with_operation(ALL)
            .with_permission_type(ANY),
        DeleteAclsFilter::default()
            .with_resource_name_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(GROUP)
            .with_pattern_type_filter(ANY)
            .with_principal_filter(Some(s("User:nobody")))
            .with_operation(ANY)
            .with_permission_type(ANY),
    ]);
    let resp = admin.call(3, &delete).await;
    let removed: Vec<(i16, usize)> = resp
        .filter_results
        .iter()
        .map(|r| (r.error_code, r.matching_acls.len()))
        .collect();
    assert_eq!(removed, [(0, 1), (0, 0)]);
    assert_eq!(
        resp.filter_results[0].matching_acls[0].resource_name.as_str(),
        "orders-secret"
    );
    let (_, left) = describe(&mut admin, 1, any_filter()).await;
    assert_eq!(left.len(), 2);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn requests_are_checked_and_nothing_leaks() {
    let (broker, sasl, _) = start().await;
    let mut admin = login(sasl, "admin").await;
    // Super users bypass the ACLs: admin creates and writes with none naming it.
    for t in ["orders-1", "orders-secret", "private"] {
        assert_eq!(create_topic(&mut admin, t).await, 0, "{t}");
        assert_eq!(produce(&mut admin, t).await, 0, "{t}");
    }
    assert_eq!(
        create_acls(
            &mut admin,
            vec![
                acl(TOPIC, "orders-", PREFIXED, "User:alice", WRITE, ALLOW),
                acl(TOPIC, "orders-1", LITERAL, "User:alice", READ, ALLOW),
                acl(TOPIC, "orders-secret", LITERAL, "User:alice", ALL, DENY),
                acl(GROUP, "g-alice", LITERAL, "User:alice", READ, ALLOW),
            ],
        )
        .await,
        [0, 0, 0, 0]
    );

    // bob has no ACL: denied by default everywhere, and told no topic name.
    let mut bob = login(sasl, "bob").await;
    assert_eq!(metadata(&mut bob, None).await, []);
    assert_eq!(
        metadata(&mut bob, Some(&["private", "no-such-topic"])).await,
        [
            ("no-such-topic".to_string(), TOPIC_AUTHORIZATION_FAILED),
            ("private".to_string(), TOPIC_AUTHORIZATION_FAILED)
        ],
        "named topics: refused whether they exist or not"
    );
    assert_eq!(produce(&mut bob, "orders-1").await, TOPIC_AUTHORIZATION_FAILED);
    let fetched = bob.call(12, &fetch_request("orders-1", 0, 1 << 20, 1 << 20)).await;
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.error_code, TOPIC_AUTHORIZATION_FAILED);
    assert!(p.records.as_ref().is_none_or(|r| r.is_empty()), "no data");
    let listed = bob
        .call(
            8,
            &ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![
                    kafka_protocol::messages::list_offsets_request::ListOffsetsTopic::default()
                        .with_name(topic("orders-1"))
                        .with_partitions(vec![
                            kafka_protocol::messages::list_offsets_request::ListOffsetsPartition::default()
                                .with_timestamp(-1),
                        ]),
                ]),
        )
        .await;
    assert_eq!(listed.topics[0].partitions[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    assert_eq!(listed.topics[0].partitions[0].offset, -1);
    let commit = bob.call(9, &commit_request("g-bob", "orders-1")).await;
    assert_eq!(commit.topics[0].partitions[0].error_code, GROUP_AUTHORIZATION_FAILED);
    let find = bob
        .call(
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![s("g-bob")]),
        )
        .await;
    assert_eq!(find.coordinators[0].error_code, GROUP_AUTHORIZATION_FAILED);
    assert_eq!(create_topic(&mut bob, "bobs").await, TOPIC_AUTHORIZATION_FAILED);
    let deleted = bob
        .call(
            4,
            &DeleteTopicsRequest::default().with_topic_names(vec![topic("private")]),
        )
        .await;
    assert_eq!(deleted.responses[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    let configs = bob
        .call(
            4,
            &DescribeConfigsRequest::default().with_resources(vec![
                kafka_protocol::messages::describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("private")),
                kafka_protocol::messages::describe_configs_request::DescribeConfigsResource::default()
                    .with_resource_type(4)
                    .with_resource_name(s("1")),
            ]),
        )
        .await;
    let codes: Vec<(i16, usize)> = configs
        .results
        .iter()
        .map(|r| (r.error_code, r.configs.len()))
        .collect();
    assert_eq!(
        codes,
        [(TOPIC_AUTHORIZATION_FAILED, 0), (CLUSTER_AUTHORIZATION_FAILED, 0)]
    );
    // Moving replicas between log directories needs ALTER on the cluster: every partition named
    // gets the error.
    let moved = bob
        .call(
            2,
            &AlterReplicaLogDirsRequest::default().with_dirs(vec![
                kafka_protocol::messages::alter_replica_log_dirs_request::AlterReplicaLogDir::default()
                    .with_path(s("/anywhere"))
                    .with_topics(vec![
                        kafka_protocol::messages::alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                            .with_name(topic("private"))
                            .with_partitions(vec![0, 1]),
                    ]),
            ]),
        )
        .await;
    let codes: Vec<i16> = moved.results[0].partitions.iter().map(|p| p.error_code).collect();
    assert_eq!(codes, [CLUSTER_AUTHORIZATION_FAILED; 2]);
    // So does finalizing feature levels (UpdateFeatures): a top-level error, nothing changed.
    let features = bob
        .call(
            1,
            &UpdateFeaturesRequest::default().with_feature_updates(vec![
                kafka_protocol::messages::update_features_request::FeatureUpdateKey::default()
                    .with_feature(s("group.version"))
                    .with_max_version_level(0)
                    .with_upgrade_type(2),
            ]),
        )
        .await;
    assert_eq!(
        (features.error_code, features.results.len()),
        (CLUSTER_AUTHORIZATION_FAILED, 0)
    );
    let unregister = bob
        .call(0, &UnregisterBrokerRequest::default().with_broker_id(BrokerId(1)))
        .await;
    assert_eq!(unregister.error_code, CLUSTER_AUTHORIZATION_FAILED);
    // An idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    let init = bob
        .call(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000),
        )
        .await;
    assert_eq!(init.error_code, CLUSTER_AUTHORIZATION_FAILED);
    let init = bob
        .call(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s("bobs-txn"))))
                .with_transaction_timeout_ms(60_000),
        )
        .await;
    assert_eq!(init.error_code, TRANSACTIONAL_ID_AUTHORIZATION_FAILED);

    // alice: WRITE on the prefix, READ on orders-1 and its group; DENY ALL on orders-secret.
    let mut alice = login(sasl, "alice").await;
    assert_eq!(produce(&mut alice, "orders-1").await, 0);
    assert_eq!(
        produce(&mut alice, "orders-secret").await,
        TOPIC_AUTHORIZATION_FAILED,
        "DENY wins over the prefixed ALLOW"
    );
    assert_eq!(produce(&mut alice, "private").await, TOPIC_AUTHORIZATION_FAILED);
    // She describes what she may read or write (READ and WRITE imply DESCRIBE), nothing else.
    assert_eq!(metadata(&mut alice, None).await, [("orders-1".to_string(), 0)]);
    let resp = alice
        .call(
            12,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    MetadataRequestTopic::default().with_name(Some(topic("orders-1"))),
                ]))
                .with_include_topic_authorized_operations(true),
        )
        .await;
    assert_eq!(
        resp.topics[0].topic_authorized_operations,
        (1 << READ) | (1 << WRITE) | (1 << DESCRIBE),
        "READ, WRITE and DESCRIBE (implied)"
    );
    let fetched = alice.call(12, &fetch_request("orders-1", 0, 1 << 20, 1 << 20)).await;
    assert_eq!(fetched.responses[0].partitions[0].error_code, 0);
    assert!(
        fetched.responses[0].partitions[0]
            .records
            .as_ref()
            .is_some_and(|r| !r.is_empty())
    );
    let commit = alice.call(9, &commit_request("g-alice", "orders-1")).await;
    assert_eq!(commit.topics[0].partitions[0].error_code, 0);
    let commit = alice.call(9, &commit_request("g-alice", "private")).await;
    assert_eq!(commit.topics[0].partitions[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    // WRITE on a topic lets her be an idempotent producer (KIP-679).
    let init = alice
        .call(
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000),
        )
        .await;
    assert_eq!(init.error_code, 0);
    // The group's operations as DescribeGroups reports them.
    let groups = alice
        .call(
            5,
            &DescribeGroupsRequest::default()
                .with_groups(vec![GroupId(s("g-alice")), GroupId(s("g-bob"))])
                .with_include_authorized_operations(true),
        )
        .await;
    assert_eq!(groups.groups[0].authorized_operations, (1 << READ) | (1 << DESCRIBE));
    assert_eq!(groups.groups[1].error_code, GROUP_AUTHORIZATION_FAILED);
    let cluster = alice
        .call(
            1,
            &DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
        )
        .await;
    assert_eq!(cluster.cluster_authorized_operations, 0);
    // Kafka reports the cluster's operations only to who may DESCRIBE it.
    const IDEMPOTENT_WRITE: i8 = 12;
    let describe_cluster = DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
    let grant = |op| acl(CLUSTER, "kafka-cluster", LITERAL, "User:alice", op, ALLOW);
    assert_eq!(create_acls(&mut admin, vec![grant(IDEMPOTENT_WRITE)]).await, [0]);
    assert_eq!(alice.call(1, &describe_cluster).await.cluster_authorized_operations, 0);
    assert_eq!(create_acls(&mut admin, vec![grant(DESCRIBE)]).await, [0]);
    assert_eq!(
        alice.call(1, &describe_cluster).await.cluster_authorized_operations,
        (1 << DESCRIBE) | (1 << IDEMPOTENT_WRITE)
    );

    // Nothing alice and bob tried reached the log: admin still reads one record per topic
    // plus alice's one to orders-1.
    for (t, end) in [("orders-1", 2), ("orders-secret", 1), ("private", 1)] {
        assert_eq!(latest_offset(&mut admin, t).await, end, "{t}");
    }
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn allow_everyone_if_no_acl_found_opens_only_unnamed_resources() {
    let port = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{port}");
    let mut s_ = settings(&listeners);
    s_.push(("allow.everyone.if.no.acl.found", "true"));
    let broker = TestBroker::start(&s_).await;
    let sasl = SocketAddr::from(([127, 0, 0, 1], port));
    let mut admin = login(sasl, "admin").await;
    assert_eq!(create_topic(&mut admin, "open").await, 0);
    assert_eq!(create_topic(&mut admin, "closed").await, 0);
    assert_eq!(
        create_acls(
            &mut admin,
            vec![acl(TOPIC, "closed", LITERAL, "User:alice", WRITE, ALLOW)]
        )
        .await,
        [0]
    );
    let mut bob = login(sasl, "bob").await;
    assert_eq!(produce(&mut bob, "open").await, 0, "no ACL names it: open to everyone");
    assert_eq!(
        produce(&mut bob, "closed").await,
        TOPIC_AUTHORIZATION_FAILED,
        "an ACL names it: only what it allows"
    );
    broker.handle.shutdown().await;
}

/// An acks=0 Produce expects no answer, so a refusal can only be told by closing the connection,
/// as Kafka does (`KafkaApis.handleProduceRequest`); an accepted one leaves it open.
#[tokio::test]
async fn a_refused_acks_zero_produce_closes_the_connection() {
    let (_broker, sasl, _) = start().await;
    let mut admin = login(sasl, "admin").await;
    assert_eq!(create_topic(&mut admin, "quiet").await, 0);
    let acks0 = |raw: &mut Raw, topic_name: &str| raw.encode(9, &produce_request(topic_name, 0, records(), 0));

    // admin may write: the request gets no answer and the connection stays usable.
    let frame = acks0(&mut admin, "quiet");
    admin.send_bytes(&frame).await;
    let versions = admin.call(2, &ApiVersionsRequest::default()).await;
    assert_eq!(
        versions.error_code, 0,
        "the connection is still served after an accepted acks=0 produce"
    );

    // bob has no WRITE: TOPIC_AUTHORIZATION_FAILED, which acks=0 cannot carry.
    let mut bob = login(sasl, "bob").await;
    let frame = acks0(&mut bob, "quiet");
    bob.send_bytes(&frame).await;
    assert!(bob.is_closed().await, "a refused acks=0 produce closes the connection");

    // A partition that does not exist is refused alike.
    let mut admin = login(sasl, "admin").await;
    let frame = admin.encode(9, &produce_request("quiet", 99, records(), 0));
    admin.send_bytes(&frame).await;
    assert!(
        admin.is_closed().await,
        "acks=0 to an unknown partition closes the connection"
    );

    // Nothing of bob's reached the log: admin reads one record (its own) at offset 0.
    let mut admin = login(sasl, "admin").await;
    let list = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            list_offsets_request::ListOffsetsTopic::default()
                .with_name(topic("quiet"))
                .with_partitions(vec![
                    list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1),
                ]),
        ]);
    let offsets = admin.call(7, &list).await;
    assert_eq!(
        offsets.topics[0].partitions[0].offset, 1,
        "only admin's record was appended"
    );
}

/// A delegation token for another owner needs CREATE_TOKENS on that user (Kafka checks it
/// before tokens being disabled): DELEGATION_TOKEN_AUTHORIZATION_FAILED without the ACL,
/// DELEGATION_TOKEN_AUTH_DISABLED with it and for oneself (Sluice issues no tokens).
#[tokio::test]
async fn a_token_for_another_owner_needs_create_tokens_on_that_user() {
    const USER: i8 = 7;
    const CREATE_TOKENS: i8 = 13;
    let (_broker, sasl, _) = start().await;
    let mut alice = login(sasl, "alice").await;
    let ask = |owner: Option<&str>| {
        let req = CreateDelegationTokenRequest::default().with_max_lifetime_ms(-1);
        match owner {
            Some(o) => req
                .with_owner_principal_type(Some(s("User")))
                .with_owner_principal_name(Some(s(o))),
            None => req,
        }
    };
    let code = alice.call(3, &ask(Some("bob"))).await.error_code;
    assert_eq!(code, 65, "for bob without CREATE_TOKENS on User:bob");
    assert_eq!(alice.call(3, &ask(None)).await.error_code, 61, "for herself");
    let mut admin = login(sasl, "admin").await;
    let granted = create_acls(
        &mut admin,
        vec![acl(USER, "User:bob", LITERAL, "User:alice", CREATE_TOKENS, ALLOW)],
    )
    .await;
    assert_eq!(granted, [0]);
    let code = alice.call(3, &ask(Some("bob"))).await.error_code;
    assert_eq!(code, 61, "for bob with CREATE_TOKENS on User:bob: tokens are disabled");
}

/// Share groups (KIP-932) under ACLs, as Kafka's `KafkaApis` checks them: READ on the group
/// (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, AlterShareGroupOffsets), DESCRIBE
/// (ShareGroupDescribe, DescribeShareGroupOffsets), DELETE (DeleteShareGroupOffsets); READ on
/// the topics fetched, DESCRIBE on those subscribed; CLUSTER_ACTION for the share-state APIs
/// brokers call on each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_apis_need_their_acls() {
    use kafka_protocol::messages::read_share_group_state_request::{PartitionData, ReadStateData};
    use kafka_protocol::messages::share_fetch_request::{FetchPartition, FetchTopic};
    let (_broker, sasl, _) = start().await;
    let mut admin = login(sasl, "admin").await;
    assert_eq!(create_topic(&mut admin, "queue").await, 0);
    let md = admin
        .call(
            12,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(topic("queue"))),
            ])),
        )
        .await;
    let topic_id = md.topics[0].topic_id;
    let member = "AAAAAAAAAAAAAAAAAAAAAA";
    let heartbeat = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("sg")))
        .with_member_id(s(member))
        .with_subscribed_topic_names(Some(vec![topic("queue")]));
    let fetch = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(s("sg"))))
        .with_member_id(Some(s(member)))
        .with_max_bytes(1 << 20)
        .with_max_records(10)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![FetchPartition::default()]),
        ]);
    let describe = ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("sg"))]);
    let offsets = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default(
        )
        .with_group_id(GroupId(s("sg"))),
    ]);
    let alter = AlterShareGroupOffsetsRequest::default().with_group_id(GroupId(s("sg")));
    let delete = DeleteShareGroupOffsetsRequest::default().with_group_id(GroupId(s("sg")));
    let read_state = ReadShareGroupStateRequest::default()
        .with_group_id(s("sg"))
        .with_topics(vec![
            ReadStateData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![PartitionData::default()]),
        ]);

    // alice has no ACL.
    let mut alice = login(sasl, "alice").await;
    assert_eq!(alice.call(1, &heartbeat).await.error_code, GROUP_AUTHORIZATION_FAILED);
    assert_eq!(alice.call(1, &fetch).await.error_code, GROUP_AUTHORIZATION_FAILED);
    assert_eq!(
        alice.call(1, &describe).await.groups[0].error_code,
        GROUP_AUTHORIZATION_FAILED
    );
    assert_eq!(
        alice.call(0, &offsets).await.groups[0].error_code,
        GROUP_AUTHORIZATION_FAILED
    );
    assert_eq!(alice.call(0, &alter).await.error_code, GROUP_AUTHORIZATION_FAILED);
    assert_eq!(alice.call(0, &delete).await.error_code, GROUP_AUTHORIZATION_FAILED);
    let r = alice.call(0, &read_state).await;
    assert_eq!(r.results[0].partitions[0].error_code, CLUSTER_AUTHORIZATION_FAILED);

    // READ on the group only: the subscribed and fetched topic is refused.
    assert_eq!(
        create_acls(&mut admin, vec![acl(GROUP, "sg", LITERAL, "User:alice", READ, ALLOW)]).await,
        [0]
    );
    assert_eq!(alice.call(1, &heartbeat).await.error_code, TOPIC_AUTHORIZATION_FAILED);
    let r = alice.call(1, &fetch).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(r.responses[0].partitions[0].error_code, TOPIC_AUTHORIZATION_FAILED);
    assert!(
        r.responses[0].partitions[0]
            .records
            .as_ref()
            .is_none_or(|b| b.is_empty())
    );
    // READ on the group implies DESCRIBE: describing is allowed now.
    assert_eq!(
        alice.call(1, &describe).await.groups[0].error_code,
        69,
        "GROUP_ID_NOT_FOUND"
    );

    // And READ on the topic: the member joins and fetches.
    assert_eq!(
        create_acls(
            &mut admin,
            vec![acl(TOPIC, "queue", LITERAL, "User:alice", READ, ALLOW)]
        )
        .await,
        [0]
    );
    let joined = alice.call(1, &heartbeat).await;
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    let r = alice.call(1, &fetch.clone().with_share_session_epoch(0)).await;
    assert_eq!((r.error_code, r.responses[0].partitions[0].error_code), (0, 0));
}
