//! Topic and broker configuration APIs.
//! DescribeConfigs (key 32): v1 baseline here (synonyms, config source) · v2 same · v3 config
//! type and documentation · v4 flexible.
//! AlterConfigs (key 33): v0 baseline (the resource's overrides are replaced as a whole) · v1
//! same · v2 flexible.
//! IncrementalAlterConfigs (key 44): v0 baseline (SET, DELETE, APPEND, SUBTRACT) · v1 flexible.
//! Topic changes go through the controller (metadata log) and take effect live; broker configs
//! are static (config.yaml and flags): they are described, and altering them is refused with
//! INVALID_CONFIG naming the key. GROUP resources (KIP-848 group configs: a consumer group's
//! `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`) are stored in the
//! metadata log like topic overrides and apply to the group's next heartbeats.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, Versions, message};
use crate::config::{BrokerConfig, ConfigType, GROUP_KEYS, TOPIC_KEYS, TopicKey, topic_key, validate_topic_config};
use crate::error::Error;

pub const DESCRIBE_VERSIONS: Versions = Versions::new(ApiKey::DescribeConfigs, 1, 4);
pub const ALTER_VERSIONS: Versions = Versions::new(ApiKey::AlterConfigs, 0, 2);
pub const INCREMENTAL_ALTER_VERSIONS: Versions = Versions::new(ApiKey::IncrementalAlterConfigs, 0, 1);

/// Kafka's ConfigResource types.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_GROUP: i8 = 32;
/// Kafka's ConfigSource codes.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_GROUP: i8 = 8;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A config problem in a request, answered per resource.
struct Refusal {
    code: i16,
    message: String,
}

impl Refusal {
    fn new(code: ResponseError, message: impl Into<String>) -> Refusal {
        Refusal {
            code: code.code(),
            message: message.into(),
        }
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Refusal {
        Refusal {
            code: e.code(),
            message: e.to_string(),
        }
    }
}

fn invalid_config(key: &str, reason: impl std::fmt::Display) -> Refusal {
    Refusal::new(ResponseError::InvalidConfig, format!("invalid config {key}: {reason}"))
}

/// The broker's value of a topic key's synonym, and whether an operator set it.
fn broker_synonym(config: &BrokerConfig, broker_key: &str) -> Option<(String, bool)> {
    let value = config.get(broker_key)?;
    let is_default = BrokerConfig::default().get(broker_key).as_deref() == Some(value.as_str());
    Some((value, !is_default))
}

/// Describes resource-level keys: each one's override (`override_source`), else the broker's
/// synonym when an operator set it, else the default.
#[allow(clippy::too_many_arguments)]
fn describe_keys(
    ctx: &Ctx,
    list: &[TopicKey],
    overrides: &BTreeMap<String, String>,
    override_source: i8,
    default_of: impl Fn(&TopicKey) -> String,
    keys: Option<&BTreeSet<String>>,
    synonyms: bool,
    docs: bool,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    let mut out = Vec::new();
    for k in list.iter().filter(|k| keys.is_none_or(|keys| keys.contains(k.name))) {
        let broker = broker_synonym(&ctx.config, k.broker_key);
        let default = default_of(k);
        let (value, source) = match (overrides.get(k.name), &broker) {
            (Some(v), _) => (v.clone(), override_source),
            (None, Some((v, true))) => (v.clone(), SOURCE_STATIC_BROKER),
            (None, _) => (default.clone(), SOURCE_DEFAULT),
        };
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(s(k.name))
            .with_value(Some(s(&value)))
            .with_config_source(source);
        if synonyms {
            let mut list = Vec::new();
            if let Some(v) = overrides.get(k.name) {
                list.push(
                    DescribeConfigsSynonym::default()
                        .with_name(s(k.name))
                        .with_value(Some(s(v)))
                        .with_source(override_source),
                );
            }
            if let Some((v, true)) = &broker {
                list.push(
                    DescribeConfigsSynonym::default()
                        .with_name(s(k.broker_key))
                        .with_value(Some(s(v)))
                        .with_source(SOURCE_STATIC_BROKER),
                );
            }
            list.push(
                DescribeConfigsSynonym::default()
                    .with_name(s(k.broker_key))
                    .with_value(Some(s(&default)))
                    .with_source(SOURCE_DEFAULT),
            );
            entry.synonyms = list;
        }
        if version >= 3 {
            entry.config_type = k.kind as i8;
            if docs {
                entry.documentation = Some(s(k.doc));
            }
        }
        out.push(entry);
    }
    out
}

fn describe_topic(
    ctx: &Ctx,
    name: &str,
    keys: Option<&BTreeSet<String>>,
    synonyms: bool,
    docs: bool,
    version: i16,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    let image = ctx.controller.image();
    let topic = image
        .topic(name)
        .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
    let default_of = |k: &TopicKey| ctx.config.topic_default(k.name).unwrap_or_default();
    Ok(describe_keys(
        ctx,
        TOPIC_KEYS,
        &topic.configs,
        SOURCE_DYNAMIC_TOPIC,
        default_of,
        keys,
        synonyms,
        docs,
        version,
    ))
}

/// Kafka has no "default group" resource: a GROUP resource names one group.
fn check_group_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            "a group resource needs a group id",
        ));
    }
    Ok(())
}

/// The group's overrides, or none. A group need not exist to be described or configured.
fn group_overrides(ctx: &Ctx, name: &str) -> BTreeMap<String, String> {
    ctx.controller
        .image()
        .group_configs
        .get(name)
        .map(|c| (**c).clone())
        .unwrap_or_default()
}

fn describe_group(
    ctx: &Ctx,
    name: &str,
    keys: Option<&BTreeSet<String>>,
    synonyms: bool,
    docs: bool,
    version: i16,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    check_group_name(name)?;
    let defaults = BrokerConfig::default();
    let default_of = |k: &TopicKey| defaults.get(k.broker_key).unwrap_or_default();
    Ok(describe_keys(
        ctx,
        GROUP_KEYS,
        &group_overrides(ctx, name),
        SOURCE_GROUP,
        default_of,
        keys,
        synonyms,
        docs,
        version,
    ))
}

/// Validates a group's complete override set and, unless `validate_only`, stores it.
fn replace_group_configs(
    ctx: &Ctx,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    check_group_name(name)?;
    ctx.config
        .validate_group_configs(&configs)
        .map_err(|e| invalid_config(&e.key, e.reason))?;
    if validate_only {
        return Ok(());
    }
    ctx.controller.set_group_configs(name, configs)?;
    Ok(())
}

fn broker_type(value: &str) -> ConfigType {
    if value == "true" || value == "false" {
        ConfigType::Boolean
    } else if value.parse::<i64>().is_ok() {
        ConfigType::Long
    } else {
        ConfigType::String
    }
}

fn describe_broker(
    ctx: &Ctx,
    name: &str,
    keys: Option<&BTreeSet<String>>,
    synonyms: bool,
    version: i16,
) -> Result<Vec<DescribeConfigsResourceResult>, Refusal> {
    if !name.is_empty() && name != ctx.config.node_id.to_string() {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("this is broker {}, not {name}", ctx.config.node_id),
        ));
    }
    let mut out = Vec::new();
    for key in BrokerConfig::KEYS
        .iter()
        .filter(|k| keys.is_none_or(|keys| keys.contains(**k)))
    {
        let Some((value, set)) = broker_synonym(&ctx.config, key) else {
            continue;
        };
        let source = if set { SOURCE_STATIC_BROKER } else { SOURCE_DEFAULT };
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(s(key))
            .with_value(Some(s(&value)))
            .with_config_source(source)
            .with_read_only(true);
        if synonyms {
            entry.synonyms = vec![
                DescribeConfigsSynonym::default()
                    .with_name(s(key))
                    .with_value(Some(s(&value)))
                    .with_source(source),
            ];
        }
        if version >= 3 {
            entry.config_type = broker_type(&value) as i8;
        }
        out.push(entry);
    }
    Ok(out)
}

pub async fn describe_configs(ctx: &Ctx, req: DescribeConfigsRequest, version: i16) -> DescribeConfigsResponse {
    let docs = version >= 3 && req.include_documentation;
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let keys: Option<BTreeSet<String>> =
                r.configuration_keys.map(|k| k.iter().map(|k| k.to_string()).collect());
            let described = match r.resource_type {
                RESOURCE_TOPIC => describe_topic(
                    ctx,
                    &r.resource_name,
                    keys.as_ref(),
                    req.include_synonyms,
                    docs,
                    version,
                ),
                RESOURCE_BROKER => describe_broker(ctx, &r.resource_name, keys.as_ref(), req.include_synonyms, version),
                RESOURCE_GROUP => describe_group(
                    ctx,
                    &r.resource_name,
                    keys.as_ref(),
                    req.include_synonyms,
                    docs,
                    version,
                ),
                other => Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not served"),
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

/// Validates a complete override set and, unless `validate_only`, stores it and applies it live.
fn replace_topic_configs(
    ctx: &Ctx,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), Refusal> {
    for (key, value) in &configs {
        validate_topic_config(key, value).map_err(|e| invalid_config(&e.key, e.reason))?;
    }
    if ctx.controller.image().topic(name).is_none() {
        return Err(Error::UnknownTopicOrPartition(name.to_string()).into());
    }
    if validate_only {
        return Ok(());
    }
    ctx.controller.set_topic_configs(name, configs)?;
    ctx.replicas.apply_image(&ctx.controller.image())?;
    Ok(())
}

fn refuse_broker_change(ctx: &Ctx, name: &str, keys: &[String]) -> Refusal {
    if !name.is_empty() && name != ctx.config.node_id.to_string() {
        return Refusal::new(
            ResponseError::InvalidRequest,
            format!("this is broker {}, not {name}", ctx.config.node_id),
        );
    }
    let key = keys.first().map(String::as_str).unwrap_or("");
    invalid_config(
        key,
        "broker configs are static here: set them in config.yaml or with --set",
    )
}

fn duplicates(keys: &[String]) -> Option<&String> {
    let mut seen = BTreeSet::new();
    keys.iter().find(|k| !seen.insert(k.as_str()))
}

fn alter_one(ctx: &Ctx, r: &alter_configs_request::AlterConfigsResource, validate_only: bool) -> Result<(), Refusal> {
    let keys: Vec<String> = r.configs.iter().map(|c| c.name.to_string()).collect();
    if let Some(dup) = duplicates(&keys) {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("config {dup} is listed twice"),
        ));
    }
    let whole = || -> Result<BTreeMap<String, String>, Refusal> {
        let mut configs = BTreeMap::new();
        for c in &r.configs {
            let Some(value) = &c.value else {
                return Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("null value for config {}", c.name),
                ));
            };
            configs.insert(c.name.to_string(), value.to_string());
        }
        Ok(configs)
    };
    match r.resource_type {
        RESOURCE_TOPIC => replace_topic_configs(ctx, &r.resource_name, whole()?, validate_only),
        RESOURCE_GROUP => replace_group_configs(ctx, &r.resource_name, whole()?, validate_only),
        RESOURCE_BROKER => Err(refuse_broker_change(ctx, &r.resource_name, &keys)),
        other => Err(Refusal::new(
            ResponseError::InvalidRequest,
            format!("resource type {other} is not served"),
        )),
    }
}

pub async fn alter_configs(ctx: &Ctx, req: AlterConfigsRequest, _version: i16) -> AlterConfigsResponse {
    let responses = req
        .resources
        .iter()
        .map(|r| {
            let out = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            match alter_one(ctx, r, req.validate_only) {
                Ok(()) => out,
                Err(refusal) => out
                    .with_error_code(refusal.code)
                    .with_error_message(message(refusal.message)),
            }
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

/// Applies IncrementalAlterConfigs operations to a topic's current overrides.
fn incremental(
    ctx: &Ctx,
    name: &str,
    ops: &[incremental_alter_configs_request::AlterableConfig],
) -> Result<BTreeMap<String, String>, Refusal> {
    let image = ctx.controller.image();
    let topic = image
        .topic(name)
        .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
    let lookup = |key: &str| topic_key(key).ok_or_else(|| invalid_config(key, "unknown topic config"));
    apply_ops(ctx, topic.configs.clone(), ops, lookup)
}

/// Applies IncrementalAlterConfigs operations to a group's current overrides.
fn incremental_group(
    ctx: &Ctx,
    name: &str,
    ops: &[incremental_alter_configs_request::AlterableConfig],
) -> Result<BTreeMap<String, String>, Refusal> {
    check_group_name(name)?;
    let lookup = |key: &str| {
        GROUP_KEYS
            .iter()
            .find(|k| k.name == key)
            .ok_or_else(|| invalid_config(key, "unknown group config"))
    };
    apply_ops(ctx, group_overrides(ctx, name), ops, lookup)
}

/// SET, DELETE, APPEND and SUBTRACT on a resource's overrides; `lookup` names the resource's
/// keys.
fn apply_ops(
    ctx: &Ctx,
    mut configs: BTreeMap<String, String>,
    ops: &[incremental_alter_configs_request::AlterableConfig],
    lookup: impl Fn(&str) -> Result<&'static TopicKey, Refusal>,
) -> Result<BTreeMap<String, String>, Refusal> {
    for op in ops {
        let key = op.name.to_string();
        let k = lookup(&key)?;
        let value = op.value.as_ref().map(|v| v.to_string());
        match op.config_operation {
            OP_SET => {
                let value = value.ok_or_else(|| {
                    Refusal::new(ResponseError::InvalidRequest, format!("null value for config {key}"))
                })?;
                configs.insert(key, value);
            }
            OP_DELETE => {
                configs.remove(&key);
            }
            OP_APPEND | OP_SUBTRACT => {
                if k.kind != ConfigType::List {
                    return Err(invalid_config(&key, "APPEND and SUBTRACT apply only to list configs"));
                }
                let current = configs
                    .get(&key)
                    .cloned()
                    .or_else(|| ctx.config.topic_default(&key))
                    .unwrap_or_default();
                let mut items: Vec<String> = current
                    .split(',')
                    .map(str::trim)
                    .filter(|i| !i.is_empty())
                    .map(String::from)
                    .collect();
                for item in value
                    .unwrap_or_default()
                    .split(',')
                    .map(str::trim)
                    .filter(|i| !i.is_empty())
                {
                    if op.config_operation == OP_APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                configs.insert(key, items.join(","));
            }
            other => {
                return Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("unknown operation {other} for config {key}"),
                ));
            }
        }
    }
    Ok(configs)
}

pub async fn incremental_alter_configs(
    ctx: &Ctx,
    req: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let responses = req
        .resources
        .iter()
        .map(|r| {
            let keys: Vec<String> = r.configs.iter().map(|c| c.name.to_string()).collect();
            let outcome = if let Some(dup) = duplicates(&keys) {
                Err(Refusal::new(
                    ResponseError::InvalidRequest,
                    format!("config {dup} is listed twice"),
                ))
            } else {
                match r.resource_type {
                    RESOURCE_TOPIC => incremental(ctx, &r.resource_name, &r.configs)
                        .and_then(|configs| replace_topic_configs(ctx, &r.resource_name, configs, req.validate_only)),
                    RESOURCE_GROUP => incremental_group(ctx, &r.resource_name, &r.configs)
                        .and_then(|configs| replace_group_configs(ctx, &r.resource_name, configs, req.validate_only)),
                    RESOURCE_BROKER => Err(refuse_broker_change(ctx, &r.resource_name, &keys)),
                    other => Err(Refusal::new(
                        ResponseError::InvalidRequest,
                        format!("resource type {other} is not served"),
                    )),
                }
            };
            let out = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            match outcome {
                Ok(()) => out,
                Err(refusal) => out
                    .with_error_code(refusal.code)
                    .with_error_message(message(refusal.message)),
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
