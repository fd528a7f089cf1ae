//! DescribeConfigs (key 32): a resource's configs with their values and sources.
//! v1 baseline here (synonyms, config source) · v2 same · v3 config type and documentation ·
//! v4 flexible. v0 was removed in Kafka 4.
//! TOPIC: every topic key; BROKER with a node id: every broker key, the dynamic ones writable;
//! BROKER with an empty name: the cluster-wide dynamic defaults set (Kafka lists only those);
//! BROKER_LOGGER: `root` and every module target with its level; GROUP: the group keys.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{DescribeConfigsResourceResult, DescribeConfigsResult};
use kafka_protocol::messages::*;

use super::*;
use crate::api::{Versions, message};
use crate::config::{BROKER_KEYS, GROUP_KEYS, TOPIC_KEYS, TopicKey};

pub const VERSIONS: Versions = Versions::new(ApiKey::DescribeConfigs, 1, 4);

/// What the request asks of every resource.
struct Asked<'a> {
    keys: Option<&'a BTreeSet<String>>,
    synonyms: bool,
    docs: bool,
    version: i16,
}

impl Asked<'_> {
    fn wants(&self, key: &str) -> bool {
        self.keys.is_none_or(|keys| keys.contains(key))
    }
}

/// Describes resource-level keys (topic or group): each one's override (`override_source`),
/// else the broker's value, with the broker synonyms below the override.
fn describe_keys(
    ctx: &Ctx,
    list: &[TopicKey],
    overrides: &BTreeMap<String, String>,
    override_source: i8,
    asked: &Asked,
) -> Vec<DescribeConfigsResourceResult> {
    let levels = BrokerLevels::new(ctx);
    let live = ctx.config.live();
    let mut out = Vec::new();
    for k in list.iter().filter(|k| asked.wants(k.name)) {
        let mut synonyms = Vec::new();
        if let Some(v) = overrides.get(k.name) {
            synonyms.push(
                describe_configs_response::DescribeConfigsSynonym::default()
                    .with_name(s(k.name))
                    .with_value(Some(s(v)))
                    .with_source(override_source),
            );
        }
        synonyms.extend(levels.synonyms(ctx, k.broker_key));
        let value = overrides
            .get(k.name)
            .cloned()
            .or_else(|| live.get(k.broker_key))
            .or_else(|| {
                k.broker_key
                    .is_empty()
                    .then(|| crate::config::group_key_default(k.name))
                    .flatten()
            })
            .unwrap_or_default();
        let source = synonyms.first().map_or(SOURCE_DEFAULT, |y| y.source);
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(s(k.name))
            .with_value(Some(s(&value)))
            .with_config_source(source);
        if asked.synonyms {
            entry.synonyms = synonyms;
        }
        if asked.version >= 3 {
            entry.config_type = k.kind as i8;
            if asked.docs {
                entry.documentation = Some(s(k.doc));
            }
        }
        out.push(entry);
    }
    out
}

/// Every topic key of a topic whose overrides are `overrides`, with its value and source as
/// DescribeConfigs gives them (CreateTopics v5+ answers these, as Kafka's
/// `resolveEffectiveTopicConfigs` does).
pub(crate) fn effective_topic_configs(
    ctx: &Ctx,
    overrides: &BTreeMap<String, String>,
) -> Vec<DescribeConfigsResourceResult> {
    let asked = Asked {
        keys: None,
        synonyms: false,
        docs: false,
        version: 0,
    };
    describe_keys(ctx, TOPIC_KEYS, overrides, SOURCE_DYNAMIC_TOPIC, &asked)
}

fn describe_topic(ctx: &Ctx, name: &str, asked: &Asked) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let image = ctx.controller.image();
    let topic = image
        .topic(name)
        .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
    Ok(describe_keys(
        ctx,
        TOPIC_KEYS,
        &topic.configs,
        SOURCE_DYNAMIC_TOPIC,
        asked,
    ))
}

fn describe_group(ctx: &Ctx, name: &str, asked: &Asked) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    super::alter::check_group_name(name)?;
    let overrides = super::alter::group_overrides(ctx, name);
    Ok(describe_keys(ctx, GROUP_KEYS, &overrides, SOURCE_GROUP, asked))
}

/// A BROKER resource (Kafka's `ConfigHelper.describeConfigs`): with this broker's id, every
/// broker key as it applies now; with an empty name, the cluster-wide dynamic defaults set,
/// each with only its DYNAMIC_DEFAULT_BROKER_CONFIG synonym.
fn describe_broker(ctx: &Ctx, name: &str, asked: &Asked) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let levels = BrokerLevels::new(ctx);
    let live = ctx.config.live();
    let entry = |key: &str, value: String, synonyms: Vec<_>| {
        let info = BrokerConfig::key_info(key);
        let source = synonyms.first().map_or(
            SOURCE_DEFAULT,
            |y: &describe_configs_response::DescribeConfigsSynonym| y.source,
        );
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(s(key))
            .with_value(Some(s(&value)))
            .with_config_source(source)
            .with_read_only(!info.is_some_and(|k| k.dynamic));
        if asked.synonyms {
            entry.synonyms = synonyms;
        }
        if asked.version >= 3 {
            entry.config_type = info.map_or(0, |k| k.kind as i8);
            if asked.docs {
                entry.documentation = info.map(|k| s(k.doc));
            }
        }
        entry
    };
    if name.is_empty() {
        return Ok(levels
            .cluster_default
            .iter()
            .filter(|(key, _)| asked.wants(key))
            .map(|(key, value)| {
                let synonyms = levels
                    .synonyms(ctx, key)
                    .into_iter()
                    .filter(|y| y.source == SOURCE_DYNAMIC_DEFAULT_BROKER)
                    .collect();
                entry(key, value.clone(), synonyms)
            })
            .collect());
    }
    let id: i32 = name
        .parse()
        .map_err(|_| Refusal::invalid_request(format!("Broker id must be an integer, but it is: {name}")))?;
    if id != ctx.config.node_id {
        return Err(Refusal::invalid_request(format!(
            "Unexpected broker id, expected {} or empty string, but received {name}",
            ctx.config.node_id
        )));
    }
    Ok(BROKER_KEYS
        .iter()
        .filter(|k| asked.wants(k.name))
        .map(|k| {
            entry(
                k.name,
                live.get(k.name).unwrap_or_default(),
                levels.synonyms(ctx, k.name),
            )
        })
        .collect())
}

/// A BROKER_LOGGER resource (Kafka's `ConfigHelper`): every logger and its level, source
/// DYNAMIC_BROKER_LOGGER_CONFIG, writable, without synonyms or type.
fn describe_broker_logger(ctx: &Ctx, name: &str, asked: &Asked) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    if name.is_empty() {
        return Err(Refusal::invalid_request("Broker id must not be empty"));
    }
    let id: i32 = name
        .parse()
        .map_err(|_| Refusal::invalid_request(format!("Broker id must be an integer, but it is: {name}")))?;
    if id != ctx.config.node_id {
        return Err(Refusal::invalid_request(format!(
            "Unexpected broker id, expected {} but received {name}",
            ctx.config.node_id
        )));
    }
    Ok(crate::verbosity::loggers()
        .into_iter()
        .filter(|(logger, _)| asked.wants(logger))
        .map(|(logger, level)| {
            DescribeConfigsResourceResult::default()
                .with_name(s(&logger))
                .with_value(Some(s(&level)))
                .with_config_source(SOURCE_DYNAMIC_BROKER_LOGGER)
                .with_read_only(false)
        })
        .collect())
}

pub async fn describe_configs(ctx: &Ctx, req: DescribeConfigsRequest, version: i16) -> DescribeConfigsResponse {
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let keys: Option<BTreeSet<String>> =
                r.configuration_keys.map(|k| k.iter().map(|k| k.to_string()).collect());
            let asked = Asked {
                keys: keys.as_ref(),
                synonyms: req.include_synonyms,
                docs: version >= 3 && req.include_documentation,
                version,
            };
            let allowed = authorized(ctx, r.resource_type, &r.resource_name, Operation::DescribeConfigs);
            let described = match r.resource_type {
                _ if allowed.is_err() => allowed.map(|()| Vec::new()),
                RESOURCE_TOPIC => describe_topic(ctx, &r.resource_name, &asked),
                RESOURCE_BROKER => describe_broker(ctx, &r.resource_name, &asked),
                RESOURCE_BROKER_LOGGER => describe_broker_logger(ctx, &r.resource_name, &asked),
                RESOURCE_GROUP => describe_group(ctx, &r.resource_name, &asked),
                other => Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("Unexpected resource type {other} for resource {}", r.resource_name),
                )),
            };
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            match described {
                Ok(configs) => result.with_configs(configs),
                Err(refusal) => result
                    .with_error_code(refusal.code)
                    .with_error_message(message(refusal.message)),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
