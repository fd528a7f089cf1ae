//! Topic administration through the controller: CreateTopics (key 19), DeleteTopics (key 20),
//! CreatePartitions (key 37).
//! CreateTopics: v2 baseline here (validate_only, error messages) · v3-v4 same · v5 flexible,
//! configs, partition count and replication factor in answers · v6 same · v7 topic ids.
//! DeleteTopics: v1 baseline (throttle) · v2-v3 same · v4 flexible · v5 error messages · v6
//! delete by topic id. CreatePartitions: v0 baseline · v1 same · v2 flexible · v3 same.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::{Ctx, Versions, message, topic_name};
use crate::cluster::{Controller, TopicInfo};
use crate::config::{TOPIC_KEYS, validate_topic_config};
use crate::error::Error;

pub const CREATE_TOPICS_VERSIONS: Versions = Versions::new(ApiKey::CreateTopics, 2, 7);
pub const DELETE_TOPICS_VERSIONS: Versions = Versions::new(ApiKey::DeleteTopics, 1, 6);
pub const CREATE_PARTITIONS_VERSIONS: Versions = Versions::new(ApiKey::CreatePartitions, 0, 3);

/// Kafka's ConfigSource codes for DescribeConfigs-style answers.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DEFAULT: i8 = 5;

fn reopen(ctx: &Ctx) -> Result<(), Error> {
    ctx.replicas.apply_image(&ctx.controller.image())
}

pub async fn create_topics(ctx: &Ctx, req: CreateTopicsRequest, version: i16) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    // Kafka answers a name listed twice with INVALID_REQUEST for each occurrence.
    let mut seen = BTreeMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_insert(0) += 1;
    }
    for topic in req.topics {
        let name = topic.name.0.to_string();
        let mut result = CreatableTopicResult::default().with_name(topic.name.clone());
        let outcome = if seen.get(&name).copied().unwrap_or(0) > 1 {
            Err(Error::InvalidRequest(format!("topic {name} is listed more than once")))
        } else {
            create_one(ctx, &name, &topic, req.validate_only)
        };
        match outcome {
            Ok((partitions, replication_factor, id, configs)) => {
                if version >= 5 {
                    result.num_partitions = partitions;
                    result.replication_factor = replication_factor;
                    result.configs = Some(describe_configs(ctx, &configs));
                }
                if version >= 7 {
                    result.topic_id = id;
                }
            }
            Err(e) => {
                result.error_code = e.code();
                result.error_message = message(&e);
                if version >= 5 {
                    result.num_partitions = -1;
                    result.replication_factor = -1;
                }
            }
        }
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}

type Created = (i32, i16, Uuid, BTreeMap<String, String>);

fn create_one(
    ctx: &Ctx,
    name: &str,
    topic: &kafka_protocol::messages::create_topics_request::CreatableTopic,
    validate_only: bool,
) -> Result<Created, Error> {
    let node = ctx.config.node_id;
    let mut configs = BTreeMap::new();
    for c in &topic.configs {
        let key = c.name.to_string();
        let Some(value) = c.value.as_ref().map(|v| v.to_string()) else {
            return Err(Error::InvalidConfig {
                key,
                reason: "null value".into(),
            });
        };
        validate_topic_config(&key, &value).map_err(|e| Error::InvalidConfig {
            key: e.key,
            reason: e.reason,
        })?;
        configs.insert(key, value);
    }
    let (partitions, replication_factor) = if topic.assignments.is_empty() {
        let partitions = if topic.num_partitions == -1 {
            ctx.config.num_partitions
        } else {
            topic.num_partitions
        };
        let rf = if topic.replication_factor == -1 {
            ctx.config.default_replication_factor
        } else {
            topic.replication_factor
        };
        (partitions, rf)
    } else {
        // A manual assignment: partitions 0..n each on existing nodes, and the counts unset.
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(Error::InvalidRequest(
                "both a replica assignment and a partition count or replication factor were given".into(),
            ));
        }
        let mut sorted: Vec<_> = topic.assignments.iter().collect();
        sorted.sort_by_key(|a| a.partition_index);
        for (i, a) in sorted.iter().enumerate() {
            if a.partition_index != i as i32 {
                return Err(Error::InvalidReplicaAssignment(
                    "partitions must be numbered 0..n without gaps".into(),
                ));
            }
            if a.broker_ids.is_empty() || a.broker_ids.iter().any(|b| b.0 != node) {
                return Err(Error::InvalidReplicaAssignment(format!(
                    "partition {} names a node that does not exist (only {node} does)",
                    a.partition_index
                )));
            }
            if a.broker_ids.len() > 1 {
                return Err(Error::InvalidReplicaAssignment(format!(
                    "partition {} lists a node twice",
                    a.partition_index
                )));
            }
        }
        (sorted.len() as i32, 1)
    };
    if validate_only {
        Controller::check_new_topic(
            &ctx.controller.image(),
            name,
            partitions,
            replication_factor,
            ctx.controller.node_count(),
        )?;
        return Ok((partitions, replication_factor, Uuid::nil(), configs));
    }
    let info: std::sync::Arc<TopicInfo> = ctx
        .controller
        .create_topic(name, partitions, replication_factor, configs)?;
    reopen(ctx)?;
    Ok((info.partitions, info.replication_factor, info.id, info.configs.clone()))
}

/// Every topic key with its value and source, as CreateTopics v5+ reports them.
fn describe_configs(ctx: &Ctx, overrides: &BTreeMap<String, String>) -> Vec<CreatableTopicConfigs> {
    TOPIC_KEYS
        .iter()
        .filter_map(|k| {
            let key = &k.name;
            let (value, source) = match overrides.get(*key) {
                Some(v) => (v.clone(), SOURCE_DYNAMIC_TOPIC),
                None => (ctx.config.topic_default(key)?, SOURCE_DEFAULT),
            };
            Some(
                CreatableTopicConfigs::default()
                    .with_name(StrBytes::from_static_str(key))
                    .with_value(Some(StrBytes::from_string(value)))
                    .with_config_source(source),
            )
        })
        .collect()
}

pub async fn delete_topics(ctx: &Ctx, req: DeleteTopicsRequest, version: i16) -> DeleteTopicsResponse {
    // v6 names topics by name or id in `topics`; older versions list names.
    let wanted: Vec<(Option<String>, Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), Uuid::nil()))
            .collect()
    };
    let mut results = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let image = ctx.controller.image();
        let found = match (&name, id.is_nil()) {
            (Some(n), true) => image
                .topic(n)
                .cloned()
                .ok_or_else(|| Error::UnknownTopicOrPartition(n.clone())),
            (None, false) => image.topic_by_id(&id).cloned().ok_or(Error::UnknownTopicId(id)),
            _ => Err(Error::InvalidRequest(
                "give a topic name or a topic id, not both".into(),
            )),
        };
        let outcome = found.and_then(|topic| {
            ctx.controller.delete_topic(topic.id)?;
            reopen(ctx)?;
            Ok(topic)
        });
        let mut result = DeletableTopicResult::default();
        match outcome {
            Ok(topic) => {
                result.name = Some(topic_name(&topic.name));
                if version >= 6 {
                    result.topic_id = topic.id;
                }
            }
            Err(e) => {
                result.name = name.as_deref().map(topic_name);
                if version >= 6 {
                    result.topic_id = id;
                }
                result.error_code = e.code();
                if version >= 5 {
                    result.error_message = message(&e);
                }
            }
        }
        results.push(result);
    }
    DeleteTopicsResponse::default().with_responses(results)
}

pub async fn create_partitions(ctx: &Ctx, req: CreatePartitionsRequest, _version: i16) -> CreatePartitionsResponse {
    let node = ctx.config.node_id;
    let mut results = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let name = topic.name.0.to_string();
        let outcome = (|| {
            if let Some(assignments) = topic.assignments.as_ref().filter(|a| !a.is_empty()) {
                let current = ctx.controller.image().topic(&name).map_or(0, |t| t.partitions);
                let added = usize::try_from(topic.count - current).unwrap_or(0);
                if assignments.len() != added {
                    return Err(Error::InvalidReplicaAssignment(format!(
                        "{} assignments given for {added} new partitions",
                        assignments.len()
                    )));
                }
                if assignments
                    .iter()
                    .any(|a| a.broker_ids.len() != 1 || a.broker_ids[0].0 != node)
                {
                    return Err(Error::InvalidReplicaAssignment(format!("only node {node} exists")));
                }
            }
            ctx.controller
                .create_partitions(&name, topic.count, req.validate_only)?;
            if !req.validate_only {
                reopen(ctx)?;
            }
            Ok(())
        })();
        let mut result = CreatePartitionsTopicResult::default().with_name(topic.name);
        if let Err(e) = outcome {
            result.error_code = e.code();
            result.error_message = message(&e);
        }
        results.push(result);
    }
    CreatePartitionsResponse::default().with_results(results)
}
