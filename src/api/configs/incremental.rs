//! IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on a resource's
//! configs. v0 baseline · v1 flexible.
//! TOPIC and GROUP overrides; BROKER dynamic configs (the cluster-wide default or this
//! broker's layer); BROKER_LOGGER log levels (KIP-412: SET and DELETE only, applied at once,
//! not stored).

use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::*;

use super::alter::{check_group_name, group_overrides, replace_group_configs, replace_topic_configs};
use super::*;
use crate::api::{Versions, message};
use crate::config::{ConfigType, GROUP_KEYS, TopicKey, topic_key};
use crate::verbosity;

pub const VERSIONS: Versions = Versions::new(ApiKey::IncrementalAlterConfigs, 0, 1);

/// Applies IncrementalAlterConfigs operations to a topic's current overrides.
fn topic_ops(
    ctx: &Ctx,
    name: &str,
    ops: &[AlterableConfig],
) -> Result<std::collections::BTreeMap<String, String>, Refusal> {
    let image = ctx.controller.image();
    let topic = image
        .topic(name)
        .ok_or_else(|| Error::UnknownTopicOrPartition(name.to_string()))?;
    let lookup = |key: &str| topic_key(key).ok_or_else(|| invalid_config(key, "unknown topic config"));
    apply_ops(ctx, topic.configs.clone(), ops, lookup)
}

/// Applies IncrementalAlterConfigs operations to a group's current overrides.
fn group_ops(
    ctx: &Ctx,
    name: &str,
    ops: &[AlterableConfig],
) -> Result<std::collections::BTreeMap<String, String>, Refusal> {
    check_group_name(name)?;
    let lookup = |key: &str| {
        GROUP_KEYS
            .iter()
            .find(|k| k.name == key)
            .ok_or_else(|| invalid_config(key, "unknown group config"))
    };
    apply_ops(ctx, group_overrides(ctx, name), ops, lookup)
}

/// SET, DELETE, APPEND and SUBTRACT on a topic's or group's overrides; `lookup` names the
/// resource's keys.
fn apply_ops(
    ctx: &Ctx,
    mut configs: std::collections::BTreeMap<String, String>,
    ops: &[AlterableConfig],
    lookup: impl Fn(&str) -> Result<&'static TopicKey, Refusal>,
) -> Result<std::collections::BTreeMap<String, String>, Refusal> {
    for op in ops {
        let key = op.name.to_string();
        let k = lookup(&key)?;
        let value = op.value.as_ref().map(|v| v.to_string());
        match op.config_operation {
            OP_SET => {
                configs.insert(key, value.unwrap_or_default());
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
                return Err(Refusal::invalid_request(format!(
                    "unknown operation {other} for config {key}"
                )));
            }
        }
    }
    Ok(configs)
}

/// A BROKER_LOGGER resource (Kafka's `RuntimeLoggerManager`): the name is this broker's id;
/// every operation is checked before any applies.
fn alter_loggers(ctx: &Ctx, name: &str, ops: &[AlterableConfig], validate_only: bool) -> Result<(), Refusal> {
    let id: i32 = name
        .parse()
        .map_err(|_| Refusal::invalid_request(format!("Node id must be an integer, but it is: {name}")))?;
    if id != ctx.config.node_id {
        return Err(Refusal::invalid_request(format!(
            "Unexpected node id. Expected {}, but received {name}",
            ctx.config.node_id
        )));
    }
    let mut changes = Vec::with_capacity(ops.len());
    for op in ops {
        let logger = op.name.to_string();
        let level = match op.config_operation {
            OP_SET => Some(op.value.as_deref().unwrap_or_default().to_string()),
            OP_DELETE => None,
            OP_APPEND => {
                return Err(Refusal::invalid_request(
                    "APPEND operation is not allowed for the BROKER_LOGGER resource",
                ));
            }
            OP_SUBTRACT => {
                return Err(Refusal::invalid_request(
                    "SUBTRACT operation is not allowed for the BROKER_LOGGER resource",
                ));
            }
            other => {
                return Err(Refusal::invalid_request(format!(
                    "Unknown operation type {other} is not allowed for the BROKER_LOGGER resource"
                )));
            }
        };
        verbosity::check(&logger, level.as_deref()).map_err(|refused| {
            let code = match refused {
                verbosity::Refused::RemoveRoot => ResponseError::InvalidRequest,
                _ => ResponseError::InvalidConfig,
            };
            Refusal::new(code, refused.to_string())
        })?;
        changes.push((logger, level));
    }
    if !validate_only {
        verbosity::apply(&changes);
    }
    Ok(())
}

fn alter_one(ctx: &Ctx, r: &AlterConfigsResource, validate_only: bool) -> Result<(), Refusal> {
    let nulls: Vec<&str> = r
        .configs
        .iter()
        .filter(|c| c.config_operation != OP_DELETE && c.value.is_none())
        .map(|c| c.name.as_str())
        .collect();
    check_keys(r.configs.iter().map(|c| c.name.as_str()), &nulls)?;
    let name = r.resource_name.as_str();
    match r.resource_type {
        RESOURCE_TOPIC => {
            topic_ops(ctx, name, &r.configs).and_then(|c| replace_topic_configs(ctx, name, c, validate_only))
        }
        RESOURCE_GROUP => {
            group_ops(ctx, name, &r.configs).and_then(|c| replace_group_configs(ctx, name, c, validate_only))
        }
        RESOURCE_BROKER => {
            let node = super::broker::layer_of(ctx, name)?;
            super::broker::update_layer(ctx, node, validate_only, |current| {
                super::broker::apply_ops(current, &r.configs)
            })
        }
        RESOURCE_BROKER_LOGGER => alter_loggers(ctx, name, &r.configs, validate_only),
        other => Err(Refusal::invalid_request(format!("Unknown resource type {other}"))),
    }
}

pub async fn incremental_alter_configs(
    ctx: &Ctx,
    req: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let repeated = repeated_resources(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let responses = req
        .resources
        .iter()
        .map(|r| {
            let outcome = if repeated.contains(&(r.resource_type, r.resource_name.as_str())) {
                Err(Refusal::invalid_request(EACH_RESOURCE_ONCE))
            } else {
                authorized(ctx, r.resource_type, &r.resource_name, Operation::AlterConfigs)
                    .and_then(|()| alter_one(ctx, r, req.validate_only))
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
