//! Configuration APIs: DescribeConfigs (`describe.rs`), AlterConfigs (`alter.rs`),
//! IncrementalAlterConfigs (`incremental.rs`), on four resource types:
//! - TOPIC (2): a topic's overrides, through the metadata log, applied live;
//! - BROKER (4): dynamic broker configs (KIP-226, `broker.rs`): the cluster-wide default
//!   (empty name) and this broker's own (its node id), through the metadata log, applied live;
//!   the other broker keys are read-only;
//! - BROKER_LOGGER (8): log levels by module target (KIP-412, `crate::verbosity`), not stored;
//! - GROUP (32): a consumer group's `consumer.session.timeout.ms` and
//!   `consumer.heartbeat.interval.ms` (KIP-848 group configs), through the metadata log, used
//!   from the group's next heartbeat.
//!
//! Values and sources are Kafka's (`ConfigHelper`): a key's synonyms are listed in precedence
//! order (topic or group override, this broker's dynamic value, the cluster default, the
//! static value, the default) and its source is the first one's.

mod alter;
mod broker;
mod describe;
mod incremental;

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsSynonym;
use kafka_protocol::protocol::StrBytes;

use super::Ctx;
use crate::acl::{Operation, ResourceType};
use crate::config::BrokerConfig;
use crate::error::Error;

pub use alter::{VERSIONS as ALTER_VERSIONS, alter_configs};
pub(crate) use describe::effective_topic_configs;
pub use describe::{VERSIONS as DESCRIBE_VERSIONS, describe_configs};
pub use incremental::{VERSIONS as INCREMENTAL_ALTER_VERSIONS, incremental_alter_configs};

/// Kafka's ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const RESOURCE_BROKER_LOGGER: i8 = 8;
pub const RESOURCE_CLIENT_METRICS: i8 = 16;
pub const RESOURCE_GROUP: i8 = 32;
/// Kafka's ConfigSource codes.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;
const SOURCE_DYNAMIC_BROKER_LOGGER: i8 = 6;
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

    fn invalid_request(message: impl Into<String>) -> Refusal {
        Refusal::new(ResponseError::InvalidRequest, message)
    }
}

/// Kafka's authorization of a config resource: `operation` (DESCRIBE_CONFIGS or
/// ALTER_CONFIGS) on the topic or group, or on the cluster for brokers, loggers and client
/// metrics; an unknown type is left to the handler's own refusal.
fn authorized(ctx: &Ctx, resource_type: i8, name: &str, operation: Operation) -> Result<(), Refusal> {
    let (allowed, code) = match resource_type {
        RESOURCE_TOPIC => (
            ctx.authorize(operation, ResourceType::Topic, name),
            ResponseError::TopicAuthorizationFailed,
        ),
        RESOURCE_GROUP => (
            ctx.authorize(operation, ResourceType::Group, name),
            ResponseError::GroupAuthorizationFailed,
        ),
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER | RESOURCE_CLIENT_METRICS => (
            ctx.authorize_cluster(operation),
            ResponseError::ClusterAuthorizationFailed,
        ),
        _ => return Ok(()),
    };
    match allowed {
        true => Ok(()),
        false => Err(Refusal::new(code, "Authorization failed.")),
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

/// Kafka's `ConfigAdminManager.preprocess` checks, for both alter APIs: a key listed twice,
/// a null value where one is needed (`nulls`: the keys sent without one).
fn check_keys<'a>(keys: impl IntoIterator<Item = &'a str>, nulls: &[&str]) -> Result<(), Refusal> {
    let mut seen = BTreeSet::new();
    if !keys.into_iter().all(|k| seen.insert(k)) {
        return Err(Refusal::invalid_request("Error due to duplicate config keys"));
    }
    if !nulls.is_empty() {
        return Err(Refusal::invalid_request(format!(
            "Null value not supported for : {}",
            nulls.join(", ")
        )));
    }
    Ok(())
}

/// The resources of an alter request that appear more than once (by type and name): Kafka
/// answers each of them INVALID_REQUEST.
fn repeated_resources<'a>(resources: impl IntoIterator<Item = (i8, &'a str)>) -> BTreeSet<(i8, &'a str)> {
    let mut seen = BTreeSet::new();
    resources.into_iter().filter(|r| !seen.insert(*r)).collect()
}

const EACH_RESOURCE_ONCE: &str = "Each resource must appear at most once.";

/// A Scala `Set` as Kafka's messages print it: `Set(a, b)`.
fn scala_set<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    format!("Set({})", names.into_iter().collect::<Vec<_>>().join(", "))
}

/// A node id in a resource name (Kafka's `validateResourceNameIsCurrentNodeId`).
fn check_node_id(ctx: &Ctx, name: &str) -> Result<(), Refusal> {
    let id: i32 = name
        .parse()
        .map_err(|_| Refusal::invalid_request(format!("Node id must be an integer, but it is: {name}")))?;
    if id != ctx.config.node_id {
        return Err(Refusal::invalid_request(format!(
            "Unexpected broker id, expected {}, but received {name}",
            ctx.config.node_id
        )));
    }
    Ok(())
}

/// A broker key's value at each level that sets it, in Kafka's precedence order
/// (`ConfigHelper.configSynonyms`): this broker's dynamic value, the cluster-wide default, the
/// static value, the default.
struct BrokerLevels {
    cluster_default: std::collections::BTreeMap<String, String>,
    this_broker: std::collections::BTreeMap<String, String>,
    defaults: BrokerConfig,
}

impl BrokerLevels {
    fn new(ctx: &Ctx) -> BrokerLevels {
        let (cluster_default, this_broker) = ctx.config.dynamic.layers();
        BrokerLevels {
            cluster_default,
            this_broker,
            defaults: BrokerConfig::default(),
        }
    }

    fn synonyms(&self, ctx: &Ctx, key: &str) -> Vec<DescribeConfigsSynonym> {
        let synonym = |value: String, source: i8| {
            DescribeConfigsSynonym::default()
                .with_name(s(key))
                .with_value(Some(StrBytes::from_string(value)))
                .with_source(source)
        };
        let mut out = Vec::new();
        if let Some(v) = self.this_broker.get(key) {
            out.push(synonym(v.clone(), SOURCE_DYNAMIC_BROKER));
        }
        if let Some(v) = self.cluster_default.get(key) {
            out.push(synonym(v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER));
        }
        if ctx.config.static_keys.contains(key)
            && let Some(v) = ctx.config.get(key)
        {
            out.push(synonym(v, SOURCE_STATIC_BROKER));
        }
        if let Some(v) = self.defaults.get(key) {
            out.push(synonym(v, SOURCE_DEFAULT));
        }
        out
    }
}
