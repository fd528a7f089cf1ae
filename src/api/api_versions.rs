//! ApiVersions (key 18): the versions of every API this broker serves.
//! v0 baseline · v1 throttle time · v2 same · v3 flexible, client software name/version
//! (KIP-511) · v4 same as v3 (KIP-896 floor). An unknown version gets a v0 response with
//! UNSUPPORTED_VERSION and our range (KIP-511 fallback). No feature flags are advertised: the
//! tagged fields stay empty, which old librdkafka (2.0.2) needs.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};

use super::{Ctx, SUPPORTED, Versions};

pub const VERSIONS: Versions = Versions::new(ApiKey::ApiVersions, 0, 4);

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|v| {
            ApiVersion::default()
                .with_api_key(v.key as i16)
                .with_min_version(v.min)
                .with_max_version(v.max)
        })
        .collect()
}

pub async fn handle(_ctx: &Ctx, _req: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// The KIP-511 answer to a version we do not know: like Kafka's
/// `ApiVersionsRequest.getErrorResponse`, only the ApiVersions range is listed.
pub fn unsupported() -> ApiVersionsResponse {
    let own = ApiVersion::default()
        .with_api_key(VERSIONS.key as i16)
        .with_min_version(VERSIONS.min)
        .with_max_version(VERSIONS.max);
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(vec![own])
}
