//! `sluice topic` (Kafka's `kafka-topics` and the topic side of `kafka-configs`),
//! `sluice cluster describe` and `sluice cluster unregister` (Kafka's `kafka-cluster`).
//!
//! CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs and DescribeConfigs go
//! to any broker; Metadata lists partitions, leaders, replicas and ISR, DescribeTopicPartitions
//! the eligible leader replicas (KIP-966).

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, UnregisterBrokerRequest,
};
use serde_json::json;

use super::client::{Client, kafka_result, str_bytes, topic_name};
use super::output::{Report, ids, table};
use super::{CliError, key_value};

/// ConfigResource type TOPIC.
const RESOURCE_TOPIC: i8 = 2;
/// DescribeConfigs' DYNAMIC_TOPIC_CONFIG source: a value set on the topic itself.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
/// The timeout admin requests carry (Kafka's `default.api.timeout.ms` is 60 s, its tools' 30 s).
const ADMIN_TIMEOUT_MS: i32 = 30_000;

#[derive(clap::Subcommand, Debug)]
pub enum TopicAction {
    /// Create a topic (CreateTopics).
    Create {
        topic: String,
        /// Partitions (default: the broker's num.partitions).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replicas per partition (default: the broker's default.replication.factor).
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic config, KEY=VALUE (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
    },
    /// List topics (Metadata).
    List {
        /// Include internal topics (__consumer_offsets, __transaction_state).
        #[arg(long)]
        include_internal: bool,
    },
    /// Partitions, leaders, replicas, ISR, eligible leader replicas (KIP-966) and the topic's
    /// own configs (Metadata, DescribeTopicPartitions, DescribeConfigs).
    Describe {
        /// Topics to describe (default: every topic).
        topics: Vec<String>,
    },
    /// Delete topics (DeleteTopics).
    Delete {
        #[arg(required = true)]
        topics: Vec<String>,
    },
    /// Set or remove topic configs (IncrementalAlterConfigs).
    AlterConfig {
        topic: String,
        /// KEY=VALUE to set (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// KEY to remove, back to its default (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Raise a topic's partition count to a new total (CreatePartitions).
    AddPartitions {
        topic: String,
        /// The new total number of partitions.
        #[arg(long)]
        partitions: i32,
    },
}

impl TopicAction {
    /// "topic create orders": what the error line says failed.
    pub fn describe(&self) -> String {
        match self {
            TopicAction::Create { topic, .. } => format!("topic create {topic}"),
            TopicAction::List { .. } => "topic list".into(),
            TopicAction::Describe { topics } => format!("topic describe {}", topics.join(" ")).trim_end().to_string(),
            TopicAction::Delete { topics } => format!("topic delete {}", topics.join(" ")),
            TopicAction::AlterConfig { topic, .. } => format!("topic alter-config {topic}"),
            TopicAction::AddPartitions { topic, .. } => format!("topic add-partitions {topic}"),
        }
    }
}

pub async fn run(client: &Client, action: TopicAction) -> Result<Report, CliError> {
    match action {
        TopicAction::Create {
            topic,
            partitions,
            replication_factor,
            config,
        } => create(client, &topic, partitions, replication_factor, &config).await,
        TopicAction::List { include_internal } => list(client, include_internal).await,
        TopicAction::Describe { topics } => describe(client, &topics).await,
        TopicAction::Delete { topics } => delete(client, &topics).await,
        TopicAction::AlterConfig { topic, set, delete } => alter_config(client, &topic, &set, &delete).await,
        TopicAction::AddPartitions { topic, partitions } => add_partitions(client, &topic, partitions).await,
    }
}

async fn create(
    client: &Client,
    topic: &str,
    partitions: Option<i32>,
    replication_factor: Option<i16>,
    config: &[String],
) -> Result<Report, CliError> {
    let version = client.version::<CreateTopicsRequest>(7)?;
    if version < 4 && (partitions.is_none() || replication_factor.is_none()) {
        // The broker's defaults (-1) arrived with v4 (KIP-464).
        return Err(CliError::Usage(format!(
            "the broker speaks CreateTopics up to v{version}: give --partitions and --replication-factor"
        )));
    }
    let mut configs = Vec::with_capacity(config.len());
    for kv in config {
        let (k, v) = key_value("--config", kv)?;
        configs.push(
            CreatableTopicConfig::default()
                .with_name(str_bytes(&k))
                .with_value(Some(str_bytes(&v))),
        );
    }
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(topic_name(topic))
                .with_num_partitions(partitions.unwrap_or(-1))
                .with_replication_factor(replication_factor.unwrap_or(-1))
                .with_configs(configs),
        ])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let answer = client.admin(version, &request).await?;
    let result = answer
        .topics
        .first()
        .ok_or_else(|| CliError::Network("CreateTopics: an answer without the topic".into()))?;
    kafka_result(result.error_code, result.error_message.as_deref())?;
    // v5+ (KIP-525) says what the broker chose.
    let partitions = match version >= 5 {
        true => Some(result.num_partitions),
        false => partitions,
    };
    let replication_factor = match version >= 5 {
        true => Some(result.replication_factor),
        false => replication_factor,
    };
    Ok(Report {
        json: json!({"created": topic, "partitions": partitions, "replication_factor": replication_factor}),
        text: format!(
            "created topic {topic}{}\n",
            match (partitions, replication_factor) {
                (Some(p), Some(r)) => format!(" ({p} partitions, replication factor {r})"),
                _ => String::new(),
            }
        ),
    })
}

async fn list(client: &Client, include_internal: bool) -> Result<Report, CliError> {
    let metadata = client.metadata(None).await?;
    let mut topics: Vec<_> = metadata
        .topics
        .iter()
        .filter(|t| include_internal || !t.internal)
        .map(|t| (t.name.clone(), t.partitions.len()))
        .collect();
    topics.sort();
    let rows: Vec<Vec<String>> = topics.iter().map(|(n, p)| vec![n.clone(), p.to_string()]).collect();
    Ok(Report {
        json: json!({"topics": topics.iter().map(|(n, p)| json!({"name": n, "partitions": p})).collect::<Vec<_>>()}),
        text: table(&["TOPIC", "PARTITIONS"], &rows),
    })
}

/// The configs set on each topic itself (DYNAMIC_TOPIC_CONFIG), as `kafka-topics --describe`
/// shows them.
async fn topic_configs(
    client: &Client,
    topics: &[String],
) -> Result<BTreeMap<String, BTreeMap<String, String>>, CliError> {
    let mut out = BTreeMap::new();
    if topics.is_empty() {
        return Ok(out);
    }
    let version = client.version::<DescribeConfigsRequest>(4)?;
    let request = DescribeConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|t| {
                DescribeConfigsResource::default()
                    .with_resource_type(RESOURCE_TOPIC)
                    .with_resource_name(str_bytes(t))
                    .with_configuration_keys(None)
            })
            .collect(),
    );
    let answer = client.admin(version, &request).await?;
    for result in answer.results {
        kafka_result(result.error_code, result.error_message.as_deref())?;
        let configs = result
            .configs
            .iter()
            .filter(|c| c.config_source == SOURCE_DYNAMIC_TOPIC)
            .map(|c| {
                let value = match c.is_sensitive {
                    true => "(sensitive)".to_string(),
                    false => c.value.as_deref().unwrap_or("").to_string(),
                };
                (c.name.to_string(), value)
            })
            .collect();
        out.insert(result.resource_name.to_string(), configs);
    }
    Ok(out)
}

async fn describe(client: &Client, topics: &[String]) -> Result<Report, CliError> {
    let metadata = client.metadata((!topics.is_empty()).then_some(topics)).await?;
    let mut described = metadata.topics.clone();
    if topics.is_empty() {
        described.retain(|t| !t.internal);
    }
    described.sort_by(|a, b| a.name.cmp(&b.name));
    for topic in &described {
        kafka_result(topic.error_code, Some(&format!("topic '{}'", topic.name)))?;
    }
    let names: Vec<String> = described.iter().map(|t| t.name.clone()).collect();
    let configs = topic_configs(client, &names).await?;
    let eligible = client.eligible_leaders(&names).await?;
    let elr_of = |topic: &str, partition: i32| {
        eligible
            .get(&(topic.to_string(), partition))
            .cloned()
            .unwrap_or_default()
    };
    let mut text = String::new();
    let mut json_topics = Vec::new();
    for topic in &described {
        let own = configs.get(&topic.name).cloned().unwrap_or_default();
        let replication_factor = topic.partitions.first().map_or(0, |p| p.replicas.len());
        let shown: Vec<String> = own.iter().map(|(k, v)| format!("{k}={v}")).collect();
        text.push_str(&format!(
            "Topic: {}\tPartitionCount: {}\tReplicationFactor: {replication_factor}\tConfigs: {}\n",
            topic.name,
            topic.partitions.len(),
            shown.join(",")
        ));
        let rows: Vec<Vec<String>> = topic
            .partitions
            .iter()
            .map(|p| {
                let (elr, last_known_elr) = elr_of(&topic.name, p.partition);
                vec![
                    p.partition.to_string(),
                    match p.leader {
                        -1 => "none".into(),
                        l => l.to_string(),
                    },
                    ids(&p.replicas),
                    ids(&p.isr),
                    ids(&elr),
                    ids(&last_known_elr),
                ]
            })
            .collect();
        text.push_str(&table(
            &["PARTITION", "LEADER", "REPLICAS", "ISR", "ELR", "LAST-KNOWN-ELR"],
            &rows,
        ));
        json_topics.push(json!({
            "name": topic.name,
            "internal": topic.internal,
            "partitions": topic.partitions.iter().map(|p| {
                let (elr, last_known_elr) = elr_of(&topic.name, p.partition);
                json!({
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": p.replicas,
                    "isr": p.isr,
                    "elr": elr,
                    "last_known_elr": last_known_elr,
                    "error": (p.error_code != 0).then(|| crate::metrics::error_name(p.error_code)),
                })
            }).collect::<Vec<_>>(),
            "configs": own,
        }));
    }
    Ok(Report {
        json: json!({ "topics": json_topics }),
        text,
    })
}

async fn delete(client: &Client, topics: &[String]) -> Result<Report, CliError> {
    let version = client.version::<DeleteTopicsRequest>(6)?;
    let mut request = DeleteTopicsRequest::default().with_timeout_ms(ADMIN_TIMEOUT_MS);
    // v6 (KIP-516) names topics in a struct that may carry an id instead.
    request = match version >= 6 {
        true => request.with_topics(
            topics
                .iter()
                .map(|t| DeleteTopicState::default().with_name(Some(topic_name(t))))
                .collect(),
        ),
        false => request.with_topic_names(topics.iter().map(|t| topic_name(t)).collect()),
    };
    let answer = client.admin(version, &request).await?;
    for result in &answer.responses {
        kafka_result(result.error_code, result.error_message.as_deref())?;
    }
    Ok(Report {
        json: json!({ "deleted": topics }),
        text: topics.iter().map(|t| format!("deleted topic {t}\n")).collect(),
    })
}

async fn alter_config(client: &Client, topic: &str, set: &[String], delete: &[String]) -> Result<Report, CliError> {
    if set.is_empty() && delete.is_empty() {
        return Err(CliError::Usage("give --set KEY=VALUE or --delete KEY".into()));
    }
    let version = client.version::<IncrementalAlterConfigsRequest>(1)?;
    let mut configs = Vec::new();
    let mut changes = serde_json::Map::new();
    for kv in set {
        let (k, v) = key_value("--set", kv)?;
        changes.insert(k.clone(), json!(v));
        configs.push(
            AlterableConfig::default()
                .with_name(str_bytes(&k))
                .with_config_operation(OP_SET)
                .with_value(Some(str_bytes(&v))),
        );
    }
    for k in delete {
        changes.insert(k.clone(), serde_json::Value::Null);
        configs.push(
            AlterableConfig::default()
                .with_name(str_bytes(k))
                .with_config_operation(OP_DELETE)
                .with_value(None),
        );
    }
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(str_bytes(topic))
            .with_configs(configs),
    ]);
    let answer = client.admin(version, &request).await?;
    for result in &answer.responses {
        kafka_result(result.error_code, result.error_message.as_deref())?;
    }
    Ok(Report {
        json: json!({ "topic": topic, "changed": changes }),
        text: format!("altered configs of topic {topic}\n"),
    })
}

async fn add_partitions(client: &Client, topic: &str, partitions: i32) -> Result<Report, CliError> {
    let version = client.version::<CreatePartitionsRequest>(3)?;
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(partitions)
                .with_assignments(None),
        ])
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let answer = client.admin(version, &request).await?;
    for result in &answer.results {
        kafka_result(result.error_code, result.error_message.as_deref())?;
    }
    Ok(Report {
        json: json!({ "topic": topic, "partitions": partitions }),
        text: format!("topic {topic} now has {partitions} partitions\n"),
    })
}

/// `sluice cluster describe`: DescribeCluster (KIP-700) where the broker serves it, else
/// Metadata.
/// `cluster unregister`: as Kafka's `kafka-cluster.sh unregister`.
pub async fn unregister_broker(client: &Client, id: i32) -> Result<Report, CliError> {
    let version = client.version::<UnregisterBrokerRequest>(0)?;
    let answer = client
        .admin(
            version,
            &UnregisterBrokerRequest::default().with_broker_id(kafka_protocol::messages::BrokerId(id)),
        )
        .await?;
    kafka_result(answer.error_code, answer.error_message.as_deref())?;
    Ok(Report {
        json: json!({ "unregistered": id }),
        text: format!("Broker {id} is no longer registered.\n"),
    })
}

pub async fn describe_cluster(client: &Client) -> Result<Report, CliError> {
    let (cluster_id, controller, brokers) = match client.version::<DescribeClusterRequest>(1) {
        Ok(version) => {
            let answer = client.admin(version, &DescribeClusterRequest::default()).await?;
            kafka_result(answer.error_code, answer.error_message.as_deref())?;
            let brokers: Vec<(i32, String, i32, Option<String>)> = answer
                .brokers
                .iter()
                .map(|b| {
                    (
                        b.broker_id.0,
                        b.host.to_string(),
                        b.port,
                        b.rack.as_ref().map(|r| r.to_string()),
                    )
                })
                .collect();
            (Some(answer.cluster_id.to_string()), answer.controller_id.0, brokers)
        }
        Err(_) => {
            let metadata = client.metadata(Some(&[])).await?;
            let brokers = metadata
                .brokers
                .values()
                .map(|b| {
                    let endpoint = b.endpoints.first();
                    (
                        b.id,
                        endpoint.map(|e| e.host.clone()).unwrap_or_default(),
                        endpoint.map_or(0, |e| e.port),
                        b.rack.clone(),
                    )
                })
                .collect();
            (metadata.cluster_id, metadata.controller_id, brokers)
        }
    };
    let mut brokers = brokers;
    brokers.sort();
    let rows: Vec<Vec<String>> = brokers
        .iter()
        .map(|(id, host, port, rack)| {
            vec![
                id.to_string(),
                host.clone(),
                port.to_string(),
                rack.clone().unwrap_or_default(),
            ]
        })
        .collect();
    Ok(Report {
        json: json!({
            "cluster_id": cluster_id,
            "controller": controller,
            "brokers": brokers.iter().map(|(id, host, port, rack)| json!({"id": id, "host": host, "port": port, "rack": rack})).collect::<Vec<_>>(),
        }),
        text: format!(
            "Cluster ID: {}\nController: {controller}\n{}",
            cluster_id.as_deref().unwrap_or("(none)"),
            table(&["BROKER", "HOST", "PORT", "RACK"], &rows)
        ),
    })
}
