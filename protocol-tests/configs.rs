//! Configuration and cluster APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
//! through librdkafka's admin client and raw frames (every version) on topics, brokers
//! (dynamic broker configs), broker loggers and groups; ListConfigResources; DescribeCluster,
//! DescribeLogDirs.

mod common;

use common::*;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ConfigSource, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

async fn create(raw: &mut Raw, name: &str) {
    let t = CreatableTopic::default()
        .with_name(topic(name))
        .with_num_partitions(2)
        .with_replication_factor(1);
    let resp = raw.call(7, &CreateTopicsRequest::default().with_topics(vec![t])).await;
    assert_eq!(resp.topics[0].error_code, 0);
}

fn describe(name: &str, keys: Option<&[&str]>) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default()
        .with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s(name))
                .with_configuration_keys(keys.map(|k| k.iter().map(|k| s(k)).collect())),
        ])
        .with_include_synonyms(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_admin_describes_and_alters_topic_configs() {
    let broker = TestBroker::start(&[("log.retention.ms", "86400000")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "conf").await;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    let opts = AdminOptions::new();

    let described = admin
        .describe_configs(&[ResourceSpecifier::Topic("conf")], &opts)
        .await
        .unwrap();
    let resource = described[0].as_ref().unwrap();
    let retention = resource.get("retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("86400000"));
    assert_eq!(
        retention.source,
        ConfigSource::StaticBroker,
        "set on the broker, not the topic"
    );
    let policy = resource.get("cleanup.policy").unwrap();
    assert_eq!(
        (policy.value.as_deref(), &policy.source),
        (Some("delete"), &ConfigSource::Default)
    );

    let change = AlterConfig::new(ResourceSpecifier::Topic("conf"))
        .set("retention.ms", "3600000")
        .set("cleanup.policy", "compact");
    let altered = admin.alter_configs(&[change], &opts).await.unwrap();
    assert!(altered[0].is_ok(), "{altered:?}");
    let described = admin
        .describe_configs(&[ResourceSpecifier::Topic("conf")], &opts)
        .await
        .unwrap();
    let resource = described[0].as_ref().unwrap();
    let retention = resource.get("retention.ms").unwrap();
    assert_eq!(
        (retention.value.as_deref(), &retention.source),
        (Some("3600000"), &ConfigSource::DynamicTopic)
    );
    assert_eq!(
        resource.get("cleanup.policy").unwrap().value.as_deref(),
        Some("compact")
    );

    // An invalid value changes nothing. (The rdkafka crate 0.39 reports every AlterConfigs
    // resource as Ok whatever its error code; the INVALID_CONFIG answer itself is checked with
    // raw frames below.)
    let bad = AlterConfig::new(ResourceSpecifier::Topic("conf")).set("retention.ms", "soon");
    admin.alter_configs(&[bad], &opts).await.unwrap();
    let described = admin
        .describe_configs(&[ResourceSpecifier::Topic("conf")], &opts)
        .await
        .unwrap();
    assert_eq!(
        described[0]
            .as_ref()
            .unwrap()
            .get("retention.ms")
            .unwrap()
            .value
            .as_deref(),
        Some("3600000")
    );

    // The broker's own configs are described, read-only.
    let described = admin
        .describe_configs(&[ResourceSpecifier::Broker(1)], &opts)
        .await
        .unwrap();
    let partitions = described[0].as_ref().unwrap().get("num.partitions").unwrap();
    assert_eq!(partitions.value.as_deref(), Some("1"));
    assert!(partitions.is_read_only);
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn config_apis_answer_every_version_with_kafkas_codes() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "t").await;
    for version in 1..=4 {
        let mut req = describe("t", None);
        if version >= 3 {
            req.include_documentation = true;
        }
        let resp = raw.call(version, &req).await;
        let r = &resp.results[0];
        assert_eq!(r.error_code, 0, "DescribeConfigs v{version}");
        let seg = r.configs.iter().find(|c| c.name.as_str() == "segment.bytes").unwrap();
        assert_eq!(seg.value.as_deref(), Some("1073741824"));
        assert!(!seg.synonyms.is_empty());
        if version >= 3 {
            assert_eq!(seg.config_type, 3, "INT");
            assert!(seg.documentation.is_some());
        }
    }
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let legacy = |key: &str, value: &str| {
        AlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_configs(vec![
                    AlterableConfig::default().with_name(s(key)).with_value(Some(s(value))),
                ]),
        ])
    };
    let refused = raw.call(1, &legacy("retention.ms", "soon")).await;
    assert_eq!(refused.responses[0].error_code, 40, "INVALID_CONFIG");
    assert!(
        refused.responses[0]
            .error_message
            .as_deref()
            .unwrap()
            .contains("retention.ms")
    );
    let only = raw.call(4, &describe("t", Some(&["retention.ms"]))).await;
    assert_eq!(only.results[0].configs.len(), 1);
    let unknown = raw.call(4, &describe("nope", None)).await;
    assert_eq!(unknown.results[0].error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");

    for version in 0..=2 {
        let req = AlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("t"))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(s("retention.bytes"))
                        .with_value(Some(s(&format!("{}", 1000 + version)))),
                ]),
        ]);
        assert_eq!(
            raw.call(version, &req).await.responses[0].error_code,
            0,
            "AlterConfigs v{version}"
        );
    }
    let value_of = |resp: &DescribeConfigsResponse, key: &str| {
        resp.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == key)
            .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
    };
    let resp = raw.call(4, &describe("t", None)).await;
    assert_eq!(value_of(&resp, "retention.bytes").as_deref(), Some("1002"));

    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource as IncResource, AlterableConfig as IncConfig,
    };
    let inc = |ops: Vec<(&str, i8, Option<&str>)>, validate_only: bool| {
        IncrementalAlterConfigsRequest::default()
            .with_resources(vec![
                IncResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s("t"))
                    .with_configs(
                        ops.into_iter()
                            .map(|(k, op, v)| {
                                IncConfig::default()
                                    .with_name(s(k))
                                    .with_config_operation(op)
                                    .with_value(v.map(s))
                            })
                            .collect(),
                    ),
            ])
            .with_validate_only(validate_only)
    };
    for version in 0..=1 {
        let resp = raw
            .call(version, &inc(vec![("segment.ms", 0, Some("60000"))], false))
            .await;
        assert_eq!(resp.responses[0].error_code, 0, "IncrementalAlterConfigs v{version}");
    }
    // APPEND to a list, DELETE an override, validate_only changes nothing.
    let resp = raw
        .call(
            1,
            &inc(
                vec![("cleanup.policy", 2, Some("compact")), ("retention.bytes", 1, None)],
                false,
            ),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw.call(4, &describe("t", None)).await;
    assert_eq!(value_of(&resp, "cleanup.policy").as_deref(), Some("delete,compact"));
    assert_eq!(
        value_of(&resp, "retention.bytes").as_deref(),
        Some("-1"),
        "back to the default"
    );
    let resp = raw.call(1, &inc(vec![("segment.ms", 0, Some("1234"))], true)).await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw.call(4, &describe("t", None)).await;
    assert_eq!(value_of(&resp, "segment.ms").as_deref(), Some("60000"), "validate_only");
    // Refusals: APPEND to a non-list, unknown key, bad value, duplicate key, broker change.
    let resp = raw.call(1, &inc(vec![("retention.ms", 2, Some("5"))], false)).await;
    assert_eq!(resp.responses[0].error_code, 40);
    let resp = raw.call(1, &inc(vec![("no.such", 0, Some("5"))], false)).await;
    assert_eq!(resp.responses[0].error_code, 40);
    assert!(
        resp.responses[0].error_message.as_deref().unwrap().contains("no.such"),
        "the key is named"
    );
    let resp = raw
        .call(1, &inc(vec![("min.cleanable.dirty.ratio", 0, Some("2.5"))], false))
        .await;
    assert_eq!(resp.responses[0].error_code, 40);
    assert!(
        resp.responses[0]
            .error_message
            .as_deref()
            .unwrap()
            .contains("min.cleanable.dirty.ratio")
    );
    let resp = raw
        .call(
            1,
            &inc(vec![("segment.ms", 0, Some("1")), ("segment.ms", 1, None)], false),
        )
        .await;
    assert_eq!(
        resp.responses[0].error_code, 42,
        "INVALID_REQUEST for a key listed twice"
    );
    let broker_change = IncrementalAlterConfigsRequest::default().with_resources(vec![
        IncResource::default()
            .with_resource_type(4)
            .with_resource_name(s("1"))
            .with_configs(vec![
                IncConfig::default()
                    .with_name(s("num.partitions"))
                    .with_value(Some(s("3"))),
            ]),
    ]);
    // A read-only broker key: Kafka's DynamicBrokerConfig.validateConfigs, INVALID_REQUEST.
    let refused = raw.call(1, &broker_change).await;
    assert_eq!(refused.responses[0].error_code, 42);
    assert_eq!(
        refused.responses[0].error_message.as_deref(),
        Some("Cannot update these configs dynamically: Set(num.partitions)")
    );
    broker.handle.shutdown().await;
}

#[tokio::test]
async fn describe_cluster_and_log_dirs() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "sized").await;
    for version in 0..=2 {
        let resp = raw
            .call(
                version,
                &DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
            )
            .await;
        assert_eq!(resp.error_code, 0);
        assert_eq!(
            (resp.controller_id.0, resp.brokers.len()),
            (1, 1),
            "DescribeCluster v{version}"
        );
        assert_eq!(resp.brokers[0].port, broker.addr.port() as i32);
        assert!(!resp.cluster_id.is_empty());
    }
    let controllers = raw
        .call(1, &DescribeClusterRequest::default().with_endpoint_type(2))
        .await;
    assert_eq!(controllers.error_code, 115, "UNSUPPORTED_ENDPOINT_TYPE");
    // UnregisterBroker on a single node: itself (a Kafka broker registers again within a
    // heartbeat, and is still listed), or an id never registered, BROKER_ID_NOT_REGISTERED.
    let resp = raw
        .call(0, &UnregisterBrokerRequest::default().with_broker_id(BrokerId(1)))
        .await;
    assert_eq!(resp.error_code, 0);
    let resp = raw
        .call(0, &UnregisterBrokerRequest::default().with_broker_id(BrokerId(7)))
        .await;
    assert_eq!(
        (resp.error_code, resp.error_message.as_deref()),
        (102, Some("Broker ID 7 is not currently registered"))
    );
    let listed = raw.call(2, &DescribeClusterRequest::default()).await;
    assert_eq!(listed.brokers.len(), 1);
    for version in 1..=4 {
        let resp = raw
            .call(version, &DescribeLogDirsRequest::default().with_topics(None))
            .await;
        let dir = &resp.results[0];
        assert_eq!(dir.error_code, 0);
        let t = dir
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == "sized")
            .expect("the topic is listed");
        assert_eq!(t.partitions.len(), 2, "DescribeLogDirs v{version}");
        if version >= 4 {
            assert!(dir.total_bytes > 0 && dir.usable_bytes > 0);
        }
    }
    broker.handle.shutdown().await;
}

/// AlterReplicaLogDirs: a broker has one log directory, so moving a replica to it is done
/// at once (NONE, the files stay where they are); another path is LOG_DIR_NOT_FOUND, a
/// partition the broker does not host REPLICA_NOT_AVAILABLE, an unknown one
/// UNKNOWN_TOPIC_OR_PARTITION, and a topic too long for Kafka's future-log name
/// INVALID_TOPIC_EXCEPTION, as Kafka's ReplicaManager answers each.
#[tokio::test]
async fn alter_replica_log_dirs_to_the_one_directory() {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "moved").await;
    let long = "l".repeat(230);
    create(&mut raw, &long).await;
    let dir = raw
        .call(4, &DescribeLogDirsRequest::default().with_topics(None))
        .await
        .results[0]
        .log_dir
        .to_string();
    let move_to = |path: &str, topics: &[(&str, &[i32])]| {
        AlterReplicaLogDir::default().with_path(s(path)).with_topics(
            topics
                .iter()
                .map(|(t, p)| {
                    AlterReplicaLogDirTopic::default()
                        .with_name(topic(t))
                        .with_partitions(p.to_vec())
                })
                .collect(),
        )
    };
    for version in 1..=2 {
        let req = AlterReplicaLogDirsRequest::default().with_dirs(vec![
            move_to(
                &dir,
                &[("moved", &[0, 1, 2]), ("nothing-here", &[0]), (long.as_str(), &[0])],
            ),
            move_to("/no/such/dir", &[("moved", &[1])]),
        ]);
        let resp = raw.call(version, &req).await;
        let mut codes: Vec<(String, i32, i16)> = resp
            .results
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_name.0.to_string(), p.partition_index, p.error_code))
            })
            .collect();
        codes.sort();
        let mut expected = vec![
            (long.clone(), 0, 17),              // INVALID_TOPIC_EXCEPTION
            ("moved".to_string(), 0, 0),        // already there
            ("moved".to_string(), 1, 57),       // the later entry: LOG_DIR_NOT_FOUND
            ("moved".to_string(), 2, 3),        // no such partition
            ("nothing-here".to_string(), 0, 3), // UNKNOWN_TOPIC_OR_PARTITION
        ];
        expected.sort();
        assert_eq!(codes, expected, "AlterReplicaLogDirs v{version}");
    }
    // The records stay where they were, readable.
    let listed = raw.call(4, &DescribeLogDirsRequest::default().with_topics(None)).await;
    assert!(listed.results[0].topics.iter().any(|t| t.name.0.as_str() == "moved"));
    broker.handle.shutdown().await;
}

/// KIP-848 group configs: a GROUP resource (type 32) carries a consumer group's own
/// `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`, validated against the
/// broker's `group.consumer.min/max.*` bounds, stored durably, and used by the group's heartbeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_configs_are_described_altered_validated_and_applied() {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource as IncResource, AlterableConfig as IncConfig,
    };
    const GROUP: i8 = 32;
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let describe_group = |name: &str| {
        DescribeConfigsRequest::default()
            .with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(GROUP)
                    .with_resource_name(s(name))
                    .with_configuration_keys(None),
            ])
            .with_include_synonyms(true)
    };
    let entry = |resp: &DescribeConfigsResponse, key: &str| {
        let c = resp.results[0]
            .configs
            .iter()
            .find(|c| c.name.as_str() == key)
            .unwrap_or_else(|| panic!("{key} described"));
        (
            c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
            c.config_source,
        )
    };
    let inc = |name: &str, ops: Vec<(&str, i8, Option<&str>)>, validate_only: bool| {
        IncrementalAlterConfigsRequest::default()
            .with_resources(vec![
                IncResource::default()
                    .with_resource_type(GROUP)
                    .with_resource_name(s(name))
                    .with_configs(
                        ops.into_iter()
                            .map(|(k, op, v)| {
                                IncConfig::default()
                                    .with_name(s(k))
                                    .with_config_operation(op)
                                    .with_value(v.map(s))
                            })
                            .collect(),
                    ),
            ])
            .with_validate_only(validate_only)
    };

    // Every DescribeConfigs version: a group without overrides shows the broker defaults
    // (DEFAULT_CONFIG); the group need not exist.
    for version in 1..=4 {
        let resp = raw.call(version, &describe_group("cg")).await;
        assert_eq!(resp.results[0].error_code, 0, "DescribeConfigs v{version}");
        assert_eq!(resp.results[0].resource_type, GROUP);
        assert_eq!(resp.results[0].configs.len(), 12);
        assert_eq!(entry(&resp, "consumer.session.timeout.ms"), ("45000".into(), 5));
        // KIP-1263 (Kafka 4.3): the broker's group.{consumer,share}.assignment.interval.ms.
        assert_eq!(entry(&resp, "consumer.assignment.interval.ms"), ("1000".into(), 5));
        assert_eq!(entry(&resp, "share.assignment.interval.ms"), ("1000".into(), 5));
        assert_eq!(entry(&resp, "consumer.heartbeat.interval.ms"), ("5000".into(), 5));
        // Share groups' keys (KIP-932): their broker defaults, and Kafka's defaults for the
        // two without a broker synonym.
        assert_eq!(entry(&resp, "share.session.timeout.ms"), ("45000".into(), 5));
        assert_eq!(entry(&resp, "share.heartbeat.interval.ms"), ("5000".into(), 5));
        assert_eq!(entry(&resp, "share.record.lock.duration.ms"), ("30000".into(), 5));
        assert_eq!(entry(&resp, "share.delivery.count.limit"), ("5".into(), 5));
        assert_eq!(entry(&resp, "share.partition.max.record.locks"), ("2000".into(), 5));
        assert_eq!(entry(&resp, "share.auto.offset.reset"), ("latest".into(), 5));
        assert_eq!(entry(&resp, "share.isolation.level"), ("read_uncommitted".into(), 5));
        assert_eq!(entry(&resp, "share.renew.acknowledge.enable"), ("true".into(), 5));
    }

    // Validation, each IncrementalAlterConfigs version: Kafka's GroupConfig rules, INVALID_CONFIG
    // (40) naming the key; an empty group name is INVALID_REQUEST (42).
    type Ops<'a> = Vec<(&'a str, i8, Option<&'a str>)>;
    let refusals: Vec<(&str, Ops, i16, &str)> = vec![
        (
            "cg",
            vec![("consumer.session.timeout.ms", 0, Some("30000"))],
            40,
            "consumer.session.timeout.ms",
        ),
        (
            "cg",
            vec![("consumer.session.timeout.ms", 0, Some("70000"))],
            40,
            "consumer.session.timeout.ms",
        ),
        (
            "cg",
            vec![("consumer.heartbeat.interval.ms", 0, Some("4000"))],
            40,
            "consumer.heartbeat.interval.ms",
        ),
        (
            "cg",
            vec![("consumer.heartbeat.interval.ms", 0, Some("16000"))],
            40,
            "consumer.heartbeat.interval.ms",
        ),
        // KIP-1263: within group.{consumer,share}.min/max.assignment.interval.ms (0, 15000).
        (
            "cg",
            vec![("consumer.assignment.interval.ms", 0, Some("15001"))],
            40,
            "group.consumer.max.assignment.interval.ms",
        ),
        (
            "cg",
            vec![("share.assignment.interval.ms", 0, Some("-1"))],
            40,
            "share.assignment.interval.ms",
        ),
        // KIP-1240: within group.share.min/max.delivery.count.limit (2, 10).
        (
            "cg",
            vec![("share.delivery.count.limit", 0, Some("1"))],
            40,
            "group.share.min.delivery.count.limit",
        ),
        (
            "cg",
            vec![("share.delivery.count.limit", 0, Some("11"))],
            40,
            "group.share.max.delivery.count.limit",
        ),
        // KIP-1240: within group.share.min/max.partition.max.record.locks (100, 4000).
        (
            "cg",
            vec![("share.partition.max.record.locks", 0, Some("99"))],
            40,
            "group.share.min.partition.max.record.locks",
        ),
        (
            "cg",
            vec![("share.partition.max.record.locks", 0, Some("4001"))],
            40,
            "group.share.max.partition.max.record.locks",
        ),
        (
            "cg",
            vec![("consumer.session.timeout.ms", 0, Some("soon"))],
            40,
            "consumer.session.timeout.ms",
        ),
        (
            "cg",
            vec![("session.timeout.ms", 0, Some("50000"))],
            40,
            "session.timeout.ms",
        ),
        (
            "cg",
            vec![("consumer.session.timeout.ms", 2, Some("50000"))],
            40,
            "consumer.session.timeout.ms",
        ),
        ("", vec![("consumer.session.timeout.ms", 0, Some("50000"))], 42, ""),
    ];
    for version in 0..=1 {
        for (name, ops, code, key) in &refusals {
            let resp = raw.call(version, &inc(name, ops.clone(), false)).await;
            let r = &resp.responses[0];
            assert_eq!(r.error_code, *code, "v{version} {ops:?}");
            assert!(
                r.error_message.as_deref().unwrap_or("").contains(key),
                "{:?}",
                r.error_message
            );
        }
    }
    // validate_only checks and stores nothing.
    let resp = raw
        .call(
            1,
            &inc("cg", vec![("consumer.session.timeout.ms", 0, Some("50000"))], true),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw.call(4, &describe_group("cg")).await;
    assert_eq!(entry(&resp, "consumer.session.timeout.ms"), ("45000".into(), 5));

    // SET: the override is described as GROUP_CONFIG (8), with its synonyms.
    let resp = raw
        .call(
            1,
            &inc(
                "cg",
                vec![
                    ("consumer.session.timeout.ms", 0, Some("50000")),
                    ("consumer.heartbeat.interval.ms", 0, Some("6000")),
                ],
                false,
            ),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    let resp = raw.call(4, &describe_group("cg")).await;
    assert_eq!(entry(&resp, "consumer.session.timeout.ms"), ("50000".into(), 8));
    assert_eq!(entry(&resp, "consumer.heartbeat.interval.ms"), ("6000".into(), 8));
    let session = resp.results[0]
        .configs
        .iter()
        .find(|c| c.name.as_str() == "consumer.session.timeout.ms")
        .unwrap();
    let synonyms: Vec<(String, i8)> = session
        .synonyms
        .iter()
        .map(|y| (y.name.to_string(), y.source))
        .collect();
    assert_eq!(
        synonyms,
        vec![
            ("consumer.session.timeout.ms".to_string(), 8),
            ("group.consumer.session.timeout.ms".to_string(), 5)
        ]
    );
    // The merged set is checked: a heartbeat interval at the session timeout is refused.
    let resp = raw
        .call(
            1,
            &inc("cg", vec![("consumer.session.timeout.ms", 0, Some("45000"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw
        .call(
            1,
            &inc(
                "cg2",
                vec![
                    ("consumer.session.timeout.ms", 0, Some("45000")),
                    ("consumer.heartbeat.interval.ms", 0, Some("15000")),
                ],
                false,
            ),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "15000 < 45000 is fine");

    // The group's heartbeat interval reaches its members (ConsumerGroupHeartbeat).
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s("cg")))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![]));
    let joined = raw.call(0, &join).await;
    assert_eq!(joined.error_code, 0, "{:?}", joined.error_message);
    assert_eq!(joined.heartbeat_interval_ms, 6000);

    // Legacy AlterConfigs, every version, replaces the whole set; DELETE goes back to defaults.
    for version in 0..=2 {
        let req = AlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(GROUP)
                .with_resource_name(s("cg"))
                .with_configs(vec![
                    AlterableConfig::default()
                        .with_name(s("consumer.heartbeat.interval.ms"))
                        .with_value(Some(s(&format!("{}", 7000 + version)))),
                ]),
        ]);
        let resp = raw.call(version, &req).await;
        assert_eq!(resp.responses[0].error_code, 0, "AlterConfigs v{version}");
        assert_eq!(resp.responses[0].resource_type, GROUP);
    }
    let resp = raw.call(4, &describe_group("cg")).await;
    assert_eq!(entry(&resp, "consumer.heartbeat.interval.ms"), ("7002".into(), 8));
    assert_eq!(entry(&resp, "consumer.session.timeout.ms"), ("45000".into(), 5));

    // Durable: the overrides come back after a restart.
    let broker = broker.restart(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let resp = raw.call(4, &describe_group("cg")).await;
    assert_eq!(entry(&resp, "consumer.heartbeat.interval.ms"), ("7002".into(), 8));
    let resp = raw
        .call(0, &inc("cg", vec![("consumer.heartbeat.interval.ms", 1, None)], false))
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw.call(4, &describe_group("cg")).await;
    assert_eq!(entry(&resp, "consumer.heartbeat.interval.ms"), ("5000".into(), 5));
}

// ---------------------------------------------------------------------------------------------
// Dynamic broker configs (KIP-226), broker loggers (KIP-412), ListConfigResources (KIP-1142).

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const GROUP_RESOURCE: i8 = 32;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;

fn describe_of(resource_type: i8, name: &str, keys: Option<&[&str]>) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default()
        .with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(name))
                .with_configuration_keys(keys.map(|k| k.iter().map(|k| s(k)).collect())),
        ])
        .with_include_synonyms(true)
}

type Ops<'a> = Vec<(&'a str, i8, Option<&'a str>)>;

fn incremental(resource_type: i8, name: &str, ops: Ops, validate_only: bool) -> IncrementalAlterConfigsRequest {
    use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    IncrementalAlterConfigsRequest::default()
        .with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(name))
                .with_configs(
                    ops.into_iter()
                        .map(|(k, op, v)| {
                            AlterableConfig::default()
                                .with_name(s(k))
                                .with_config_operation(op)
                                .with_value(v.map(s))
                        })
                        .collect(),
                ),
        ])
        .with_validate_only(validate_only)
}

fn legacy_alter(resource_type: i8, name: &str, configs: &[(&str, &str)]) -> AlterConfigsRequest {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    AlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| AlterableConfig::default().with_name(s(k)).with_value(Some(s(v))))
                    .collect(),
            ),
    ])
}

/// A described key: value, source, read-only, and its synonyms as (name, value, source).
type Described = (String, i8, bool, Vec<(String, String, i8)>);

fn described(resp: &DescribeConfigsResponse, key: &str) -> Described {
    let r = &resp.results[0];
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let c = r
        .configs
        .iter()
        .find(|c| c.name.as_str() == key)
        .unwrap_or_else(|| panic!("{key} is described"));
    (
        c.value.as_deref().unwrap_or_default().to_string(),
        c.config_source,
        c.read_only,
        c.synonyms
            .iter()
            .map(|y| {
                (
                    y.name.to_string(),
                    y.value.as_deref().unwrap_or_default().to_string(),
                    y.source,
                )
            })
            .collect(),
    )
}

fn synonym(name: &str, value: &str, source: i8) -> (String, String, i8) {
    (name.to_string(), value.to_string(), source)
}

/// KIP-226 (Kafka's DynamicBrokerConfig, ConfigHelper, ConfigAdminManager): dynamic broker
/// configs at the cluster-default (empty name) and per-broker levels, in every version of the
/// three APIs; sources and synonyms in Kafka's precedence order for the broker and for topics
/// without an override; Kafka's refusals; the layers survive a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_broker_configs_in_every_version_with_kafkas_sources_and_across_a_restart() {
    let broker = TestBroker::start(&[("log.retention.ms", "86400000")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "dyn").await;

    // IncrementalAlterConfigs v0 sets the cluster default, v1 this broker's value.
    let resp = raw
        .call(
            0,
            &incremental(BROKER, "", vec![("log.retention.ms", SET, Some("3600000"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    assert_eq!(resp.responses[0].resource_type, BROKER);
    let resp = raw
        .call(
            1,
            &incremental(BROKER, "1", vec![("log.retention.ms", SET, Some("7200000"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);

    let all_levels = vec![
        synonym("log.retention.ms", "7200000", 2),
        synonym("log.retention.ms", "3600000", 3),
        synonym("log.retention.ms", "86400000", 4),
        synonym("log.retention.ms", "604800000", 5),
    ];
    for version in 1..=4 {
        let mut req = describe_of(BROKER, "1", None);
        req.include_documentation = version >= 3;
        let resp = raw.call(version, &req).await;
        let (value, source, read_only, synonyms) = described(&resp, "log.retention.ms");
        assert_eq!((value.as_str(), source, read_only), ("7200000", 2, false), "v{version}");
        assert_eq!(
            synonyms, all_levels,
            "v{version}: DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT"
        );
        let (_, source, read_only, _) = described(&resp, "num.partitions");
        assert_eq!((source, read_only), (5, true), "a static key is read-only");
        if version >= 3 {
            let c = resp.results[0]
                .configs
                .iter()
                .find(|c| c.name.as_str() == "log.retention.ms")
                .unwrap();
            assert_eq!(c.config_type, 5, "LONG");
            assert!(c.documentation.is_some());
        }
        // The cluster-wide resource lists only the dynamic defaults set: ours, and the
        // min.insync.replicas that eligible leader replicas need (Kafka 4's
        // maybeGenerateElrSafetyRecords writes the static value on a new cluster).
        let resp = raw.call(version, &describe_of(BROKER, "", None)).await;
        assert_eq!(resp.results[0].configs.len(), 2, "v{version}");
        let (value, source, read_only, _) = described(&resp, "min.insync.replicas");
        assert_eq!((value.as_str(), source, read_only), ("1", 3, false));
        let (value, source, read_only, synonyms) = described(&resp, "log.retention.ms");
        assert_eq!((value.as_str(), source, read_only), ("3600000", 3, false));
        assert_eq!(synonyms, vec![synonym("log.retention.ms", "3600000", 3)]);
        // A topic without an override takes the broker's value, with the broker's synonyms.
        let resp = raw
            .call(version, &describe_of(TOPIC, "dyn", Some(&["retention.ms"])))
            .await;
        let (value, source, _, synonyms) = described(&resp, "retention.ms");
        assert_eq!((value.as_str(), source), ("7200000", 2), "v{version}");
        assert_eq!(synonyms, all_levels);
    }

    // AlterConfigs replaces a layer whole, every version: the cluster default loses
    // log.retention.ms. Losing min.insync.replicas too is refused while eligible leader
    // replicas are on, as by Kafka 4's controller.
    for version in 0..=2 {
        let resp = raw
            .call(version, &legacy_alter(BROKER, "", &[("log.retention.bytes", "5")]))
            .await;
        assert_eq!(resp.responses[0].error_code, 40, "AlterConfigs v{version}");
        assert_eq!(
            resp.responses[0].error_message.as_deref(),
            Some("Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
        );
        let value = format!("{}", 1_000_000 + i32::from(version));
        let resp = raw
            .call(
                version,
                &legacy_alter(
                    BROKER,
                    "",
                    &[("log.retention.bytes", &value), ("min.insync.replicas", "1")],
                ),
            )
            .await;
        assert_eq!(
            resp.responses[0].error_code, 0,
            "AlterConfigs v{version}: {:?}",
            resp.responses[0].error_message
        );
    }
    let resp = raw
        .call(
            4,
            &describe_of(BROKER, "1", Some(&["log.retention.ms", "log.retention.bytes"])),
        )
        .await;
    assert_eq!(
        described(&resp, "log.retention.ms").3,
        vec![
            synonym("log.retention.ms", "7200000", 2),
            synonym("log.retention.ms", "86400000", 4),
            synonym("log.retention.ms", "604800000", 5)
        ]
    );
    assert_eq!(described(&resp, "log.retention.bytes").0, "1000002");
    assert_eq!(described(&resp, "log.retention.bytes").1, 3);

    // DELETE falls back to the next level; APPEND works on a list key from its default.
    let resp = raw
        .call(
            1,
            &incremental(BROKER, "1", vec![("log.retention.ms", DELETE, None)], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw
        .call(
            1,
            &incremental(BROKER, "", vec![("log.cleanup.policy", APPEND, Some("compact"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    let resp = raw.call(4, &describe_of(BROKER, "1", None)).await;
    assert_eq!(described(&resp, "log.retention.ms").0, "86400000");
    assert_eq!(described(&resp, "log.retention.ms").1, 4, "STATIC_BROKER_CONFIG again");
    let resp = raw.call(4, &describe_of(TOPIC, "dyn", Some(&["cleanup.policy"]))).await;
    let (value, source, _, _) = described(&resp, "cleanup.policy");
    assert_eq!((value.as_str(), source), ("delete,compact", 3));
    // validate_only changes nothing.
    let resp = raw
        .call(
            1,
            &incremental(BROKER, "", vec![("log.retention.bytes", SET, Some("5"))], true),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let resp = raw
        .call(4, &describe_of(BROKER, "", Some(&["log.retention.bytes"])))
        .await;
    assert_eq!(described(&resp, "log.retention.bytes").0, "1000002");

    // Refusals, as Kafka words them, in both alter APIs and every version.
    let refusals: Vec<(&str, Ops, i16, &str)> = vec![
        (
            "",
            vec![("num.partitions", SET, Some("3"))],
            42,
            "Cannot update these configs dynamically: Set(num.partitions)",
        ),
        (
            "1",
            vec![("log.dirs", SET, Some("/x")), ("node.id", SET, Some("2"))],
            42,
            "Cannot update these configs dynamically: Set(log.dirs, node.id)",
        ),
        (
            "2",
            vec![("log.retention.ms", SET, Some("1"))],
            42,
            "Unexpected broker id, expected 1, but received 2",
        ),
        (
            "one",
            vec![("log.retention.ms", SET, Some("1"))],
            42,
            "Node id must be an integer, but it is: one",
        ),
        (
            "",
            vec![("log.retention.ms", SET, Some("soon"))],
            42,
            "Invalid value soon for configuration log.retention.ms",
        ),
        ("", vec![("no.such.config", SET, Some("1"))], 42, "no.such.config"),
        (
            "",
            vec![("message.max.bytes", SET, Some("200000000"))],
            42,
            "socket.request.max.bytes",
        ),
        (
            "",
            vec![("log.retention.ms", SET, None)],
            42,
            "Null value not supported for : log.retention.ms",
        ),
        // Kafka 4's controller, while eligible leader replicas are on: every leader and the
        // controller must read one minimum.
        (
            "1",
            vec![("min.insync.replicas", SET, Some("2"))],
            40,
            "Broker-level min.insync.replicas cannot be altered while ELR is enabled.",
        ),
        (
            "",
            vec![("min.insync.replicas", DELETE, None)],
            40,
            "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.",
        ),
    ];
    for version in 0..=1 {
        for (name, ops, code, text) in &refusals {
            let resp = raw.call(version, &incremental(BROKER, name, ops.clone(), false)).await;
            let r = &resp.responses[0];
            assert_eq!(r.error_code, *code, "v{version} {ops:?}");
            assert!(
                r.error_message.as_deref().unwrap_or("").contains(text),
                "{:?}",
                r.error_message
            );
        }
    }
    for version in 0..=2 {
        let resp = raw
            .call(version, &legacy_alter(BROKER, "", &[("num.partitions", "3")]))
            .await;
        assert_eq!(resp.responses[0].error_code, 42);
        assert_eq!(
            resp.responses[0].error_message.as_deref(),
            Some("Cannot update these configs dynamically: Set(num.partitions)")
        );
    }
    let resp = raw
        .call(
            1,
            &incremental(BROKER, "", vec![("log.retention.ms", APPEND, Some("1"))], false),
        )
        .await;
    assert_eq!(
        resp.responses[0].error_code, 40,
        "APPEND to a non-list key: INVALID_CONFIG"
    );
    // The same resource twice: both refused.
    let mut twice = legacy_alter(BROKER, "", &[("log.retention.ms", "1")]);
    twice.resources.push(twice.resources[0].clone());
    let resp = raw.call(2, &twice).await;
    for r in &resp.responses {
        assert_eq!(r.error_code, 42);
        assert_eq!(
            r.error_message.as_deref(),
            Some("Each resource must appear at most once.")
        );
    }
    let resp = raw.call(4, &describe_of(BROKER, "2", None)).await;
    assert_eq!(resp.results[0].error_code, 42);
    assert_eq!(
        resp.results[0].error_message.as_deref(),
        Some("Unexpected broker id, expected 1 or empty string, but received 2")
    );
    // Nothing refused was stored.
    let resp = raw.call(4, &describe_of(BROKER, "", None)).await;
    let keys: Vec<&str> = resp.results[0].configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        keys,
        vec!["log.cleanup.policy", "log.retention.bytes", "min.insync.replicas"]
    );

    // Durable: the layers come back after a restart, with the static config of the new start.
    let broker = broker.restart(&[("log.retention.ms", "86400000")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let resp = raw.call(4, &describe_of(BROKER, "1", None)).await;
    assert_eq!(described(&resp, "log.retention.bytes").0, "1000002");
    assert_eq!(described(&resp, "log.cleanup.policy").0, "delete,compact");
    assert_eq!(described(&resp, "log.cleanup.policy").1, 3);
    let resp = raw
        .call(4, &describe_of(TOPIC, "dyn", Some(&["retention.bytes"])))
        .await;
    assert_eq!(described(&resp, "retention.bytes").0, "1000002");
    broker.handle.shutdown().await;
}

/// The log start offset of partition 0 of `name` (ListOffsets earliest).
async fn earliest(raw: &mut Raw, name: &str) -> i64 {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default().with_name(topic(name)).with_partitions(vec![
                ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-2),
            ]),
        ]);
    raw.call(10, &req).await.topics[0].partitions[0].offset
}

/// KIP-226: a dynamic default reaches every log at once, topics with their own override
/// excepted (Kafka's DynamicLogConfig.reconfigure): a lowered message.max.bytes refuses
/// larger batches with RECORD_TOO_LARGE, a lowered log.segment.bytes rolls an open log, and a
/// lowered log.retention.ms deletes old segments at the next retention check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_broker_defaults_reach_every_topic_without_an_override_live() {
    use kafka_protocol::records::Compression;
    let broker = TestBroker::start(&[("log.retention.check.interval.ms", "100")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "plain").await;
    let t = CreatableTopic::default()
        .with_name(topic("own"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![
            create_topics_request::CreatableTopicConfig::default()
                .with_name(s("max.message.bytes"))
                .with_value(Some(s("1000000"))),
            create_topics_request::CreatableTopicConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("604800000"))),
        ]);
    let resp = raw.call(7, &CreateTopicsRequest::default().with_topics(vec![t])).await;
    assert_eq!(resp.topics[0].error_code, 0);
    let now_ms = sluice::replica::now_ms();
    let batch = |n: usize| {
        let records: Vec<(Option<bytes::Bytes>, Option<bytes::Bytes>, i64)> = (0..n)
            .map(|i| {
                (
                    Some(bytes::Bytes::from(format!("k{i}"))),
                    Some(bytes::Bytes::from(vec![b'v'; 1000])),
                    now_ms,
                )
            })
            .collect();
        sluice::log::batch::encode_records(&records, Compression::None).unwrap()
    };
    let produce = |name: &str, n: usize| produce_request(name, 0, batch(n), -1);
    let code = |resp: &ProduceResponse| resp.responses[0].partition_responses[0].error_code;
    assert_eq!(code(&raw.call(9, &produce("plain", 3)).await), 0);

    let resp = raw
        .call(
            1,
            &incremental(BROKER, "", vec![("message.max.bytes", SET, Some("2000"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    assert_eq!(code(&raw.call(9, &produce("plain", 3)).await), 10, "RECORD_TOO_LARGE");
    assert_eq!(
        code(&raw.call(9, &produce("plain", 1)).await),
        0,
        "a batch within the new bound"
    );
    assert_eq!(
        code(&raw.call(9, &produce("own", 3)).await),
        0,
        "the topic's own max.message.bytes wins"
    );

    // A smaller log.segment.bytes reaches the open log of "plain": the next batches roll.
    let dir = broker.dir.path().join("plain-0");
    let before = segment_files(&dir).len();
    let resp = raw
        .call(
            1,
            &incremental(BROKER, "", vec![("log.segment.bytes", SET, Some("1024"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    for _ in 0..3 {
        assert_eq!(code(&raw.call(9, &produce("plain", 1)).await), 0);
    }
    assert!(
        segment_files(&dir).len() >= before + 2,
        "the live segment size rolled the log"
    );

    // Retention: a week keeps everything; a lowered default deletes "plain"'s segments only.
    for _ in 0..5 {
        assert_eq!(code(&raw.call(9, &produce("own", 1)).await), 0);
    }
    let plain_end = latest_offset(&mut raw, "plain").await;
    assert_eq!(earliest(&mut raw, "plain").await, 0);
    let resp = raw
        .call(
            0,
            &incremental(BROKER, "1", vec![("log.retention.ms", SET, Some("1"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while earliest(&mut raw, "plain").await < plain_end {
        assert!(
            std::time::Instant::now() < deadline,
            "the dynamic log.retention.ms did not apply"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        earliest(&mut raw, "own").await,
        0,
        "retention.ms of its own keeps the topic's records"
    );
    broker.handle.shutdown().await;
}

/// KIP-966 as Kafka 4's controller keeps it safe (`ConfigurationControlManager`): while eligible
/// leader replicas are on, one `min.insync.replicas` holds for the whole cluster. A new node
/// writes its static value as the cluster default; a broker's own cannot be set and the
/// cluster's cannot be removed; turning the feature on again writes what it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eligible_leader_replicas_keep_one_min_insync_replicas_for_the_cluster() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    let broker = TestBroker::start(&[("min.insync.replicas", "2")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "pinned").await;
    let min_isr = |resp: &DescribeConfigsResponse| {
        let (value, source, _, _) = described(resp, "min.insync.replicas");
        (value, source)
    };
    // The static value, written once as the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG),
    // is what every level reads.
    let resp = raw.call(4, &describe_of(BROKER, "", None)).await;
    assert_eq!(min_isr(&resp), ("2".to_string(), 3));
    let resp = raw
        .call(4, &describe_of(BROKER, "1", Some(&["min.insync.replicas"])))
        .await;
    assert_eq!(min_isr(&resp), ("2".to_string(), 3));
    let resp = raw
        .call(4, &describe_of(TOPIC, "pinned", Some(&["min.insync.replicas"])))
        .await;
    assert_eq!(min_isr(&resp), ("2".to_string(), 3));
    // CreateTopics v5+ answers each key's source as DescribeConfigs does (Kafka's
    // resolveEffectiveTopicConfigs), not DEFAULT_CONFIG for every key not overridden.
    use kafka_protocol::messages::create_topics_request::CreatableTopicConfig;
    let t = CreatableTopic::default()
        .with_name(topic("created"))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![
            CreatableTopicConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("1000"))),
        ]);
    let resp = raw.call(7, &CreateTopicsRequest::default().with_topics(vec![t])).await;
    let configs = resp.topics[0].configs.as_ref().expect("v5+ lists the configs");
    let source = |key: &str| {
        let c = configs.iter().find(|c| c.name.as_str() == key).unwrap();
        (c.value.as_deref().unwrap_or_default().to_string(), c.config_source)
    };
    assert_eq!(source("min.insync.replicas"), ("2".to_string(), 3));
    assert_eq!(source("retention.ms"), ("1000".to_string(), 1));
    assert_eq!(source("segment.bytes"), ("1073741824".to_string(), 5));

    let alter = |name: &'static str, op: i8, value: Option<&'static str>| {
        incremental(BROKER, name, vec![("min.insync.replicas", op, value)], false)
    };
    let answer = |resp: &IncrementalAlterConfigsResponse| {
        let r = &resp.responses[0];
        (r.error_code, r.error_message.as_deref().unwrap_or_default().to_string())
    };
    let broker_level = "Broker-level min.insync.replicas cannot be altered while ELR is enabled.";
    let cluster_level = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.";
    assert_eq!(
        answer(&raw.call(1, &alter("1", SET, Some("3"))).await),
        (40, broker_level.to_string())
    );
    assert_eq!(
        answer(&raw.call(1, &alter("", DELETE, None)).await),
        (40, cluster_level.to_string())
    );
    // Changing the cluster's value is allowed.
    assert_eq!(answer(&raw.call(1, &alter("", SET, Some("1"))).await).0, 0);

    let features = |level: i16, upgrade_type: i8| {
        UpdateFeaturesRequest::default().with_feature_updates(vec![
            FeatureUpdateKey::default()
                .with_feature(s("eligible.leader.replicas.version"))
                .with_max_version_level(level)
                .with_upgrade_type(upgrade_type),
        ])
    };
    // Off, both are allowed.
    let resp = raw.call(1, &features(0, 2)).await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    assert_eq!(answer(&raw.call(1, &alter("1", SET, Some("3"))).await).0, 0);
    assert_eq!(answer(&raw.call(1, &alter("", DELETE, None)).await).0, 0);
    let resp = raw
        .call(4, &describe_of(BROKER, "1", Some(&["min.insync.replicas"])))
        .await;
    assert_eq!(min_isr(&resp), ("3".to_string(), 2), "DYNAMIC_BROKER_CONFIG");

    // On again: the broker's own value goes, and the static one is the cluster's again.
    let resp = raw.call(1, &features(1, 1)).await;
    assert_eq!(resp.error_code, 0, "{:?}", resp.error_message);
    let resp = raw.call(4, &describe_of(BROKER, "", None)).await;
    assert_eq!(min_isr(&resp), ("2".to_string(), 3));
    let resp = raw
        .call(4, &describe_of(BROKER, "1", Some(&["min.insync.replicas"])))
        .await;
    assert_eq!(min_isr(&resp), ("2".to_string(), 3));
    assert_eq!(
        answer(&raw.call(1, &alter("1", SET, Some("3"))).await),
        (40, broker_level.to_string())
    );

    // Stored: a restart with another static value keeps the cluster's.
    let broker = broker.restart(&[("min.insync.replicas", "1")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let resp = raw
        .call(4, &describe_of(TOPIC, "pinned", Some(&["min.insync.replicas"])))
        .await;
    assert_eq!(min_isr(&resp), ("2".to_string(), 3));
    broker.handle.shutdown().await;
}

/// KIP-412 (Kafka's RuntimeLoggerManager and ConfigHelper): BROKER_LOGGER lists loggers and
/// levels (source DYNAMIC_BROKER_LOGGER_CONFIG); IncrementalAlterConfigs sets and removes a
/// level at once, the filter follows; refusals as Kafka's. Not stored: nothing to restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_logger_levels_are_described_and_changed_at_runtime() {
    // The process-wide subscriber, as `sluice serve` installs it, writing nowhere.
    sluice::verbosity::install("info", false, std::io::sink);
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    let target_enabled = |level| match level {
        "TRACE" => tracing::enabled!(target: "sluice::replica", tracing::Level::TRACE),
        "WARN" => tracing::enabled!(target: "sluice::replica", tracing::Level::WARN),
        _ => tracing::enabled!(target: "sluice::replica", tracing::Level::ERROR),
    };
    for version in 1..=4 {
        let resp = raw.call(version, &describe_of(BROKER_LOGGER, "1", None)).await;
        let r = &resp.results[0];
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        assert_eq!(r.configs[0].name.as_str(), "root");
        let (value, source, read_only, synonyms) = described(&resp, "sluice::replica");
        assert_eq!((value.as_str(), source, read_only), ("INFO", 6, false), "v{version}");
        assert!(synonyms.is_empty());
    }
    assert!(!target_enabled("TRACE"));

    for version in 0..=1 {
        let resp = raw
            .call(
                version,
                &incremental(BROKER_LOGGER, "1", vec![("sluice::replica", SET, Some("TRACE"))], false),
            )
            .await;
        assert_eq!(resp.responses[0].error_code, 0, "{:?}", resp.responses[0].error_message);
    }
    let resp = raw
        .call(
            4,
            &describe_of(BROKER_LOGGER, "1", Some(&["sluice::replica", "sluice::log"])),
        )
        .await;
    assert_eq!(resp.results[0].configs.len(), 2, "the key filter applies");
    assert_eq!(described(&resp, "sluice::replica").0, "TRACE");
    assert_eq!(described(&resp, "sluice::log").0, "INFO");
    assert!(target_enabled("TRACE"), "the filter was reloaded");

    // FATAL is tracing's error level; DELETE goes back to the root's level.
    let resp = raw
        .call(
            1,
            &incremental(BROKER_LOGGER, "1", vec![("sluice::replica", SET, Some("FATAL"))], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert_eq!(
        described(
            &raw.call(4, &describe_of(BROKER_LOGGER, "1", None)).await,
            "sluice::replica"
        )
        .0,
        "FATAL"
    );
    assert!(target_enabled("ERROR") && !target_enabled("WARN"));
    let resp = raw
        .call(
            1,
            &incremental(BROKER_LOGGER, "1", vec![("sluice::replica", DELETE, None)], true),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert!(!target_enabled("WARN"), "validate_only changes nothing");
    let resp = raw
        .call(
            1,
            &incremental(BROKER_LOGGER, "1", vec![("sluice::replica", DELETE, None)], false),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    assert_eq!(
        described(
            &raw.call(4, &describe_of(BROKER_LOGGER, "1", None)).await,
            "sluice::replica"
        )
        .0,
        "INFO"
    );
    assert!(target_enabled("WARN") && !target_enabled("TRACE"));

    let refusals: Vec<(&str, Ops, i16, &str)> = vec![
        (
            "1",
            vec![("kafka.server.KafkaApis", SET, Some("DEBUG"))],
            40,
            "Logger kafka.server.KafkaApis does not exist!",
        ),
        (
            "1",
            vec![("sluice::log", SET, Some("LOUD"))],
            40,
            "Cannot set the log level of sluice::log to LOUD as it is not a supported log level. \
             Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN",
        ),
        (
            "1",
            vec![("root", DELETE, None)],
            42,
            "Removing the log level of the root logger is not allowed",
        ),
        (
            "1",
            vec![("root", APPEND, Some("INFO"))],
            42,
            "APPEND operation is not allowed for the BROKER_LOGGER resource",
        ),
        (
            "2",
            vec![("root", SET, Some("INFO"))],
            42,
            "Unexpected node id. Expected 1, but received 2",
        ),
        (
            "",
            vec![("root", SET, Some("INFO"))],
            42,
            "Node id must be an integer, but it is: ",
        ),
        // Checked whole: the valid first change is not applied either.
        (
            "1",
            vec![("sluice::replica", SET, Some("TRACE")), ("nope", SET, Some("INFO"))],
            40,
            "Logger nope does not exist!",
        ),
    ];
    for (name, ops, code, text) in refusals {
        let resp = raw.call(1, &incremental(BROKER_LOGGER, name, ops.clone(), false)).await;
        let r = &resp.responses[0];
        assert_eq!(r.error_code, code, "{ops:?}");
        assert_eq!(r.error_message.as_deref(), Some(text));
    }
    assert!(!target_enabled("TRACE"));
    // AlterConfigs does not serve loggers (Kafka: only IncrementalAlterConfigs does).
    let resp = raw
        .call(2, &legacy_alter(BROKER_LOGGER, "1", &[("root", "DEBUG")]))
        .await;
    assert_eq!(resp.responses[0].error_code, 42);
    assert_eq!(
        resp.responses[0].error_message.as_deref(),
        Some("Unknown resource type 8")
    );
    let resp = raw.call(4, &describe_of(BROKER_LOGGER, "", None)).await;
    assert_eq!(resp.results[0].error_code, 42);
    assert_eq!(
        resp.results[0].error_message.as_deref(),
        Some("Broker id must not be empty")
    );
    broker.handle.shutdown().await;
}

/// KIP-1142 (Kafka 4.1's KafkaApis.handleListConfigResources): v0 lists client-metrics
/// subscriptions only (none here); v1 filters by type (empty: all), in Kafka's type order, and
/// a type outside TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP fails the request with
/// UNSUPPORTED_VERSION.
#[tokio::test]
async fn list_config_resources_in_every_version() {
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "listed").await;
    let resp = raw
        .call(
            1,
            &incremental(
                GROUP_RESOURCE,
                "configured",
                vec![("consumer.session.timeout.ms", SET, Some("50000"))],
                false,
            ),
        )
        .await;
    assert_eq!(resp.responses[0].error_code, 0);
    let list = |types: Vec<i8>| ListConfigResourcesRequest::default().with_resource_types(types);
    let names = |resp: &ListConfigResourcesResponse| -> Vec<(i8, String)> {
        resp.config_resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.to_string()))
            .collect()
    };

    let v0 = raw.call(0, &list(vec![])).await;
    assert_eq!(
        (v0.error_code, v0.config_resources.len()),
        (0, 0),
        "no client-metrics subscriptions"
    );

    let all = raw.call(1, &list(vec![])).await;
    assert_eq!(all.error_code, 0);
    let all = names(&all);
    assert_eq!(
        all[..3],
        [
            (GROUP_RESOURCE, "configured".to_string()),
            (BROKER_LOGGER, "1".to_string()),
            (BROKER, "1".to_string()),
        ]
    );
    assert!(all[3..].iter().all(|(t, _)| *t == TOPIC));
    assert!(all.contains(&(TOPIC, "listed".to_string())));

    let topics = names(&raw.call(1, &list(vec![TOPIC])).await);
    assert_eq!(topics, all[3..].to_vec());
    let brokers = names(&raw.call(1, &list(vec![BROKER, BROKER_LOGGER])).await);
    assert_eq!(
        brokers,
        vec![(BROKER_LOGGER, "1".to_string()), (BROKER, "1".to_string())],
        "Kafka's order, not the request's"
    );
    assert!(
        names(&raw.call(1, &list(vec![16])).await).is_empty(),
        "CLIENT_METRICS: none"
    );
    for unsupported in [vec![3], vec![TOPIC, 99]] {
        let resp = raw.call(1, &list(unsupported.clone())).await;
        assert_eq!(resp.error_code, 35, "UNSUPPORTED_VERSION for {unsupported:?}");
        assert!(resp.config_resources.is_empty());
    }
    broker.handle.shutdown().await;
}

/// librdkafka's admin client on a BROKER resource: AlterConfigs sets a dynamic config of
/// broker 1, DescribeConfigs reports it as DYNAMIC_BROKER_CONFIG and writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_admin_alters_and_describes_dynamic_broker_configs() {
    let broker = TestBroker::start(&[]).await;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .unwrap();
    let opts = AdminOptions::new();
    let change = AlterConfig::new(ResourceSpecifier::Broker(1))
        .set("log.retention.ms", "3600000")
        .set("log.cleaner.backoff.ms", "5000");
    let altered = admin.alter_configs(&[change], &opts).await.unwrap();
    assert!(altered[0].is_ok(), "{altered:?}");
    let described = admin
        .describe_configs(&[ResourceSpecifier::Broker(1)], &opts)
        .await
        .unwrap();
    let resource = described[0].as_ref().unwrap();
    let retention = resource.get("log.retention.ms").unwrap();
    assert_eq!(
        (retention.value.as_deref(), &retention.source, retention.is_read_only),
        (Some("3600000"), &ConfigSource::DynamicBroker, false)
    );
    let backoff = resource.get("log.cleaner.backoff.ms").unwrap();
    assert_eq!(backoff.value.as_deref(), Some("5000"));
    let bytes = resource.get("log.retention.bytes").unwrap();
    assert_eq!((&bytes.source, bytes.is_read_only), (&ConfigSource::Default, false));
    assert!(resource.get("num.partitions").unwrap().is_read_only);
    // A topic's retention.ms follows the broker's.
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "follows").await;
    let described = admin
        .describe_configs(&[ResourceSpecifier::Topic("follows")], &opts)
        .await
        .unwrap();
    let retention = described[0].as_ref().unwrap().get("retention.ms").unwrap();
    assert_eq!(
        (retention.value.as_deref(), &retention.source),
        (Some("3600000"), &ConfigSource::DynamicBroker)
    );
    broker.handle.shutdown().await;
}

/// The broker's one log directory as DescribeLogDirs at `version` describes it.
async fn dirs(
    raw: &mut Raw,
    version: i16,
) -> kafka_protocol::messages::describe_log_dirs_response::DescribeLogDirsResult {
    let req = DescribeLogDirsRequest::default().with_topics(None);
    raw.call(version, &req).await.results[0].clone()
}

/// IncrementalAlterConfigs v1 of `ops` on BROKER `name`: its error code and message.
async fn alter(raw: &mut Raw, ops: Ops<'_>, name: &str) -> (i16, String) {
    let r = raw.call(1, &incremental(BROKER, name, ops, false)).await.responses[0].clone();
    (r.error_code, r.error_message.map(|m| m.to_string()).unwrap_or_default())
}

/// KIP-1066 (Kafka 4.3): `cordoned.log.dirs`, per broker, statically or at runtime. A cordoned
/// log directory takes no new replica: a new topic gets INVALID_REPLICATION_FACTOR with Kafka's
/// message, AlterReplicaLogDirs into it INVALID_REPLICA_ASSIGNMENT, and DescribeLogDirs v5
/// says so; what it holds keeps being served. The cluster-wide default may not set it, and an
/// entry must be the broker's log directory or `*`. The dynamic value overrides the static one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_log_dir_takes_no_new_replicas() {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{AlterReplicaLogDir, AlterReplicaLogDirTopic};
    let broker = TestBroker::start(&[]).await;
    let mut raw = Raw::connect(broker.addr).await;
    create(&mut raw, "before").await;
    let dir = dirs(&mut raw, 5).await;
    assert!(!dir.is_cordoned);
    let log_dir = dir.log_dir.to_string();
    // Refused: the cluster-wide default, and an entry that is not the log directory.
    let (code, text) = alter(&mut raw, vec![("cordoned.log.dirs", SET, Some("*"))], "").await;
    assert_eq!(code, 42, "{text}");
    assert!(
        text.contains(
            "Cannot update these configs at default cluster level, broker id must be specified: cordoned.log.dirs"
        ),
        "{text}"
    );
    let (code, text) = alter(&mut raw, vec![("cordoned.log.dirs", SET, Some("/elsewhere"))], "1").await;
    assert_eq!(code, 42, "{text}");
    assert!(
        text.contains("Invalid entry in cordoned.log.dirs: /elsewhere."),
        "{text}"
    );
    // Cordoned by its path.
    assert_eq!(
        alter(&mut raw, vec![("cordoned.log.dirs", SET, Some(&log_dir))], "1")
            .await
            .0,
        0
    );
    assert!(dirs(&mut raw, 5).await.is_cordoned);
    assert!(!dirs(&mut raw, 4).await.is_cordoned, "no such field before v5");
    let resp = raw.call(7, &create_topic_request("after", 1, 10_000)).await;
    let t = &resp.topics[0];
    assert_eq!(t.error_code, 38, "INVALID_REPLICATION_FACTOR");
    assert!(
        t.error_message
            .as_deref()
            .is_some_and(|m| m.contains("some brokers have all their log directories cordoned")),
        "{:?}",
        t.error_message
    );
    let moved = raw
        .call(
            2,
            &AlterReplicaLogDirsRequest::default().with_dirs(vec![
                AlterReplicaLogDir::default().with_path(s(&log_dir)).with_topics(vec![
                    AlterReplicaLogDirTopic::default()
                        .with_name(topic("before"))
                        .with_partitions(vec![0]),
                ]),
            ]),
        )
        .await;
    assert_eq!(
        moved.results[0].partitions[0].error_code, 39,
        "INVALID_REPLICA_ASSIGNMENT"
    );
    // What it holds is still served.
    let still = vec![(
        None,
        Some(bytes::Bytes::from_static(b"still")),
        sluice::replica::now_ms(),
    )];
    let records = sluice::log::batch::encode_records(&still, kafka_protocol::records::Compression::None).unwrap();
    let produced = raw.call(9, &produce_request("before", 0, records, -1)).await;
    assert_eq!(produced.responses[0].partition_responses[0].error_code, 0);
    // Uncordoned: a new topic is created.
    assert_eq!(
        alter(&mut raw, vec![("cordoned.log.dirs", DELETE, None)], "1").await.0,
        0
    );
    assert!(!dirs(&mut raw, 5).await.is_cordoned);
    assert_eq!(
        raw.call(7, &create_topic_request("after", 1, 10_000)).await.topics[0].error_code,
        0
    );

    // Static, with `*`; a dynamic empty value overrides it.
    drop(raw);
    let broker = broker.restart(&[("cordoned.log.dirs", "*")]).await;
    let mut raw = Raw::connect(broker.addr).await;
    assert!(dirs(&mut raw, 5).await.is_cordoned);
    let described = raw
        .call(4, &describe_of(BROKER, "1", Some(&["cordoned.log.dirs"])))
        .await;
    let value = described.results[0].configs[0].value.as_ref().map(|v| v.to_string());
    assert_eq!(value.as_deref(), Some("*"));
    assert_eq!(
        raw.call(7, &create_topic_request("later", 1, 10_000)).await.topics[0].error_code,
        38
    );
    assert_eq!(
        alter(&mut raw, vec![("cordoned.log.dirs", SET, Some(""))], "1").await.0,
        0
    );
    assert!(!dirs(&mut raw, 5).await.is_cordoned);
    assert_eq!(
        raw.call(7, &create_topic_request("later", 1, 10_000)).await.topics[0].error_code,
        0
    );
    broker.handle.shutdown().await;
}
