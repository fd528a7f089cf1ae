//! Configuration and cluster APIs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
//! through librdkafka's admin client and raw frames (every version), DescribeCluster,
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
    assert_eq!(raw.call(1, &broker_change).await.responses[0].error_code, 40);
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
        assert_eq!(resp.results[0].configs.len(), 2);
        assert_eq!(entry(&resp, "consumer.session.timeout.ms"), ("45000".into(), 5));
        assert_eq!(entry(&resp, "consumer.heartbeat.interval.ms"), ("5000".into(), 5));
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
