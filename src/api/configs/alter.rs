//! AlterConfigs (key 33): replaces a resource's configs as a whole (keys left out go back to
//! their defaults). v0 baseline · v1 same · v2 flexible.
//! TOPIC and GROUP overrides, and BROKER dynamic configs (a layer replaced as a whole); like
//! Kafka, BROKER_LOGGER is refused (only IncrementalAlterConfigs changes log levels).

use std::collections::BTreeMap;

use kafka_protocol::messages::*;

use super::*;
use crate::api::{Versions, message};
use crate::config::validate_topic_config;

pub const VERSIONS: Versions = Versions::new(ApiKey::AlterConfigs, 0, 2);

/// Validates a complete override set and, unless `validate_only`, stores it and applies it live.
pub(super) fn replace_topic_configs(
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
    ctx.replicas.catch_up(&ctx.controller.image())?;
    Ok(())
}

/// Kafka has no "default group" resource: a GROUP resource names one group.
pub(super) fn check_group_name(name: &str) -> Result<(), Refusal> {
    if name.is_empty() {
        return Err(Refusal::invalid_request("Group name must not be empty"));
    }
    Ok(())
}

/// The group's overrides, or none. A group need not exist to be described or configured.
pub(super) fn group_overrides(ctx: &Ctx, name: &str) -> BTreeMap<String, String> {
    ctx.controller
        .image()
        .group_configs
        .get(name)
        .map(|c| (**c).clone())
        .unwrap_or_default()
}

/// Validates a group's complete override set and, unless `validate_only`, stores it.
pub(super) fn replace_group_configs(
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

fn alter_one(ctx: &Ctx, r: &alter_configs_request::AlterConfigsResource, validate_only: bool) -> Result<(), Refusal> {
    let nulls: Vec<&str> = r
        .configs
        .iter()
        .filter(|c| c.value.is_none())
        .map(|c| c.name.as_str())
        .collect();
    check_keys(r.configs.iter().map(|c| c.name.as_str()), &nulls)?;
    let whole: BTreeMap<String, String> = r
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_deref().unwrap_or_default().to_string()))
        .collect();
    match r.resource_type {
        RESOURCE_TOPIC => replace_topic_configs(ctx, &r.resource_name, whole, validate_only),
        RESOURCE_GROUP => replace_group_configs(ctx, &r.resource_name, whole, validate_only),
        RESOURCE_BROKER => {
            let node = super::broker::layer_of(ctx, &r.resource_name)?;
            super::broker::update_layer(ctx, node, validate_only, |_| Ok(whole.clone()))
        }
        // BROKER_LOGGER included: log levels change only through IncrementalAlterConfigs.
        other => Err(Refusal::invalid_request(format!("Unknown resource type {other}"))),
    }
}

pub async fn alter_configs(ctx: &Ctx, req: AlterConfigsRequest, _version: i16) -> AlterConfigsResponse {
    let repeated = repeated_resources(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    let responses = req
        .resources
        .iter()
        .map(|r| {
            let out = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let outcome = if repeated.contains(&(r.resource_type, r.resource_name.as_str())) {
                Err(Refusal::invalid_request(EACH_RESOURCE_ONCE))
            } else {
                authorized(ctx, r.resource_type, &r.resource_name, Operation::AlterConfigs)
                    .and_then(|()| alter_one(ctx, r, req.validate_only))
            };
            match outcome {
                Ok(()) => out,
                Err(refusal) => out
                    .with_error_code(refusal.code)
                    .with_error_message(message(refusal.message)),
            }
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}
