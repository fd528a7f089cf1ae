//! ApiVersions (key 18): the versions of every API this broker serves.
//! v0 baseline · v1 throttle time · v2 same · v3 flexible, client software name/version
//! (KIP-511; an invalid name or version gets INVALID_REQUEST) · v4 same as v3 (KIP-896 floor).
//! An unknown version gets a v0 response with UNSUPPORTED_VERSION and our range (KIP-511
//! fallback). No feature flags are advertised: the tagged fields stay empty, which old
//! librdkafka (2.0.2) needs.

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

pub async fn handle(_ctx: &Ctx, req: ApiVersionsRequest, version: i16) -> ApiVersionsResponse {
    // Kafka's KafkaApis.handleApiVersionsRequest: `!isValid` gets `getErrorResponse` with
    // INVALID_REQUEST, which lists no API (only UNSUPPORTED_VERSION lists ApiVersions' range).
    if version >= 3
        && !(is_valid_software_token(&req.client_software_name)
            && is_valid_software_token(&req.client_software_version))
    {
        return ApiVersionsResponse::default().with_error_code(ResponseError::InvalidRequest.code());
    }
    ApiVersionsResponse::default().with_api_keys(api_keys())
}

/// Kafka's `ApiVersionsRequest.isValid` pattern for the client software name and version,
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?` matched whole: ASCII letters and digits, with
/// `-` and `.` inside only; the empty string does not match.
fn is_valid_software_token(token: &str) -> bool {
    let bytes = token.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_names_and_versions_follow_kafkas_pattern() {
        // Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN, matched whole.
        for good in [
            "a",
            "7",
            "librdkafka",
            "apache-kafka-java",
            "3.9.0",
            "v2.3.0-RC1",
            "a.b-c.d",
        ] {
            assert!(is_valid_software_token(good), "{good:?}");
        }
        for bad in [
            "", "-", ".", "-a", "a-", "a.", ".a", "a b", "a_b", "é", "a/b", "a\n", "ünï",
        ] {
            assert!(!is_valid_software_token(bad), "{bad:?}");
        }
    }
}
