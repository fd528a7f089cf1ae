//! ListConfigResources (key 74): the config resources a client may describe or alter.
//! v0 (KIP-714, then called ListClientMetricsResources) client-metrics subscriptions only:
//! Sluice has none, so the list is empty · v1 (KIP-1142, Kafka 4.1) a resource-type filter
//! (empty: every type) over topics, brokers, broker loggers, client metrics and groups.
//!
//! As Kafka's `KafkaApis.handleListConfigResources`: a type outside those five fails the whole
//! request with UNSUPPORTED_VERSION; resources come in type order GROUP (the groups with
//! configs of their own), CLIENT_METRICS, BROKER_LOGGER (this broker's id), BROKER (this
//! broker's id), TOPIC (every topic, internal ones included).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::configs::{
    RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC,
};
use super::{Ctx, Versions};
use crate::acl::Operation;

pub const VERSIONS: Versions = Versions::new(ApiKey::ListConfigResources, 0, 1);

/// The types v1 serves (Kafka's `ListConfigResourcesRequest.supportedResourceTypes`).
const SUPPORTED_TYPES: [i8; 5] = [
    RESOURCE_TOPIC,
    RESOURCE_BROKER,
    RESOURCE_BROKER_LOGGER,
    RESOURCE_CLIENT_METRICS,
    RESOURCE_GROUP,
];

pub async fn handle(ctx: &Ctx, req: ListConfigResourcesRequest, version: i16) -> ListConfigResourcesResponse {
    if !ctx.authorize_cluster(Operation::DescribeConfigs) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let wants = |t: i8| {
        if version == 0 {
            t == RESOURCE_CLIENT_METRICS
        } else {
            req.resource_types.is_empty() || req.resource_types.contains(&t)
        }
    };
    if req.resource_types.iter().any(|t| !SUPPORTED_TYPES.contains(t)) {
        return ListConfigResourcesResponse::default().with_error_code(ResponseError::UnsupportedVersion.code());
    }
    let resource = |name: String, resource_type: i8| {
        ConfigResource::default()
            .with_resource_name(StrBytes::from_string(name))
            .with_resource_type(if version >= 1 { resource_type } else { 0 })
    };
    let image = ctx.controller.image();
    let node = ctx.config.node_id.to_string();
    let mut out = Vec::new();
    if wants(RESOURCE_GROUP) {
        out.extend(image.group_configs.keys().map(|g| resource(g.clone(), RESOURCE_GROUP)));
    }
    // CLIENT_METRICS: no subscriptions exist here (KIP-714 telemetry is not served).
    if wants(RESOURCE_BROKER_LOGGER) {
        out.push(resource(node.clone(), RESOURCE_BROKER_LOGGER));
    }
    if wants(RESOURCE_BROKER) {
        out.push(resource(node, RESOURCE_BROKER));
    }
    if wants(RESOURCE_TOPIC) {
        out.extend(image.topics.keys().map(|t| resource(t.clone(), RESOURCE_TOPIC)));
    }
    ListConfigResourcesResponse::default().with_config_resources(out)
}
