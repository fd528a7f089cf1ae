//! Dynamic broker configs (KIP-226) for both alter APIs: checking a new layer as Kafka's
//! `ConfigAdminManager` and `DynamicBrokerConfig.validate` do, storing it in the metadata log
//! and making it live (the replica manager, applying the new image, hands the new defaults to every log).
//!
//! Kafka answers every refusal here with INVALID_REQUEST (KAFKA-13609 keeps that code for
//! compatibility): a non-dynamic key ("Cannot update these configs dynamically: Set(k)"), a
//! bad value ("Invalid value v for configuration k: ..."), a resource name that is not this
//! broker's id.

use std::collections::BTreeMap;

use super::*;
use crate::cluster::MetadataImage;

/// The layer a BROKER resource names: None for the cluster-wide default (empty name), else
/// this broker's (its node id; any other id is refused).
pub(super) fn layer_of(ctx: &Ctx, name: &str) -> Result<Option<i32>, Refusal> {
    if name.is_empty() {
        return Ok(None);
    }
    check_node_id(ctx, name)?;
    Ok(Some(ctx.config.node_id))
}

/// Checks a complete new layer against the image's other layer (Kafka's
/// `DynamicBrokerConfig.validateConfigs`, then the values through `BrokerConfig::with_dynamic`).
fn check_layer(
    ctx: &Ctx,
    image: &MetadataImage,
    node: Option<i32>,
    layer: &BTreeMap<String, String>,
) -> Result<(), Refusal> {
    let read_only: Vec<&str> = layer
        .keys()
        .map(String::as_str)
        .filter(|k| BrokerConfig::key_info(k).is_some_and(|k| !k.dynamic))
        .collect();
    if !read_only.is_empty() {
        return Err(Refusal::invalid_request(format!(
            "Cannot update these configs dynamically: {}",
            scala_set(read_only)
        )));
    }
    // Kafka's DynamicBrokerConfig.validateConfigs: some keys are one broker's own.
    if node.is_none() {
        let per_broker: Vec<&str> = layer
            .keys()
            .map(String::as_str)
            .filter(|k| crate::config::PER_BROKER_KEYS.contains(k))
            .collect();
        if !per_broker.is_empty() {
            return Err(Refusal::invalid_request(format!(
                "Cannot update these configs at default cluster level, broker id must be specified: {}",
                per_broker.join(",")
            )));
        }
    }
    // Kafka keeps unknown keys for plugins; Sluice has none, so an unknown key is a mistake.
    let unknown: Vec<&str> = layer
        .keys()
        .map(String::as_str)
        .filter(|k| BrokerConfig::key_info(k).is_none())
        .collect();
    if !unknown.is_empty() {
        return Err(Refusal::invalid_request(format!(
            "Unknown broker configs: {}",
            scala_set(unknown)
        )));
    }
    let (cluster_default, this_broker) = image.broker_config_layers(ctx.config.node_id);
    let result = match node {
        None => ctx.config.with_dynamic(layer, &this_broker),
        Some(_) => ctx.config.with_dynamic(&cluster_default, layer),
    };
    result.map(drop).map_err(|e| match layer.get(&e.key) {
        Some(value) => Refusal::invalid_request(format!(
            "Invalid value {value} for configuration {}: {}",
            e.key, e.reason
        )),
        None => Refusal::invalid_request(format!("Invalid dynamic configuration: {e}")),
    })
}

/// Makes a broker layer what `update` makes of the current one, once checked; unless
/// `validate_only`, stores it and applies it live.
pub(super) fn update_layer(
    ctx: &Ctx,
    node: Option<i32>,
    validate_only: bool,
    update: impl Fn(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, Refusal>,
) -> Result<(), Refusal> {
    let plan = |image: &MetadataImage, current: &BTreeMap<String, String>| {
        let layer = update(current)?;
        check_layer(ctx, image, node, &layer)?;
        // The controller's check, under the image the change is committed against.
        if let Some(why) = image.elr_config_refusal(node, current, &layer) {
            return Err(Refusal::new(ResponseError::InvalidConfig, why.to_string()));
        }
        Ok(layer)
    };
    if validate_only {
        let image = ctx.controller.image();
        let (cluster_default, this_broker) = image.broker_config_layers(ctx.config.node_id);
        let current = if node.is_none() { cluster_default } else { this_broker };
        return plan(&image, &current).map(drop);
    }
    ctx.controller.update_broker_configs(node, plan)?;
    // Stored: the change stands even if some partition (unrelated to it) failed to open. The
    // latest image, as the other handlers apply: a concurrent change may have followed ours.
    if let Err(e) = ctx.replicas.catch_up(&ctx.controller.image()) {
        tracing::warn!(error = %e, "applying the metadata image after a broker config change");
    }
    tracing::info!(
        layer = node.map_or("cluster default".to_string(), |n| format!("broker {n}")),
        "dynamic broker configs changed"
    );
    Ok(())
}

/// IncrementalAlterConfigs operations on a broker layer (Kafka's
/// `ConfigAdminManager.prepareIncrementalConfigs`): APPEND and SUBTRACT only on list keys.
pub(super) fn apply_ops(
    current: &BTreeMap<String, String>,
    ops: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
) -> Result<BTreeMap<String, String>, Refusal> {
    let mut layer = current.clone();
    for op in ops {
        let key = op.name.to_string();
        let value = op.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
        match op.config_operation {
            OP_SET => {
                layer.insert(key, value);
            }
            OP_DELETE => {
                layer.remove(&key);
            }
            OP_APPEND | OP_SUBTRACT => {
                let verb = if op.config_operation == OP_APPEND {
                    "append"
                } else {
                    "subtract"
                };
                let Some(info) = BrokerConfig::key_info(&key) else {
                    return Err(Refusal::new(
                        ResponseError::InvalidConfig,
                        format!("Unknown config name: {key}"),
                    ));
                };
                if info.kind != crate::config::ConfigType::List {
                    return Err(Refusal::new(
                        ResponseError::InvalidConfig,
                        format!("Config value {verb} is not allowed for config key: {key}"),
                    ));
                }
                let old = layer
                    .get(&key)
                    .cloned()
                    .or_else(|| BrokerConfig::default().get(&key))
                    .unwrap_or_default();
                let mut items: Vec<String> = old.split(',').filter(|i| !i.is_empty()).map(String::from).collect();
                for item in value.split(',') {
                    if op.config_operation == OP_APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                layer.insert(key, items.join(","));
            }
            other => {
                return Err(Refusal::invalid_request(format!("Unknown operations type {other}")));
            }
        }
    }
    Ok(layer)
}
