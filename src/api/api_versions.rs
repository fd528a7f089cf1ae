//! ApiVersions (key 18): the versions of every API this broker serves, and its features.
//! v0 baseline · v1 throttle time · v2 same · v3 flexible, client software name/version
//! (KIP-511; an invalid name or version gets INVALID_REQUEST), the KIP-584 features (tagged
//! fields) · v4 also lists supported features whose lowest level is 0, which v3 leaves out
//! (KAFKA-17011, KAFKA-17492: Java clients before 3.9 throw on a minimum of 0).
//! An unknown version gets a v0 response with UNSUPPORTED_VERSION and our range (KIP-511
//! fallback).
//!
//! Features: Kafka 4.1 (one combined node, default format) supports metadata.version 7-27,
//! kraft.version 0-1, transaction.version 0-2, group.version 0-1,
//! eligible.leader.replicas.version 0-1 and share.version 0-1, and finalizes metadata.version
//! 27 (4.1-IV1), transaction.version 2, group.version 1, eligible.leader.replicas.version 1 and
//! kraft.version 1 with --standalone (`BrokerFeatures.defaultSupportedFeatures`, each feature's
//! LATEST_PRODUCTION and bootstrap level). Sluice lists only what it does (`FEATURES`, with
//! group.version, transaction.version and eligible.leader.replicas.version as Kafka 4.1, and
//! share.version as 4.2): no KRaft quorum or metadata records in Kafka's format
//! (metadata.version, kraft.version).
//! librdkafka before 2.2 skips one byte too few of each tagged field (librdkafka #4278); the
//! misread stays inside the frame with these tags as with Kafka's, so it keeps the API table
//! (kcat 1.7.1 on librdkafka 2.0.2: `clients/test_kcat.sh`).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{Ctx, SUPPORTED, Versions};

pub const VERSIONS: Versions = Versions::new(ApiKey::ApiVersions, 0, 4);

/// A KIP-584 feature: the levels this broker can run at and the level it runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feature {
    /// Kafka's name for it (`GroupVersion.FEATURE_NAME`, ...).
    pub name: &'static str,
    pub min_level: i16,
    pub max_level: i16,
    /// The level in force. Level 0 is "off" and is not listed as finalized (Kafka's
    /// `ApiVersionsResponse.createFinalizedFeatureKeys`).
    pub finalized_level: i16,
}

/// The features Sluice serves, with Kafka's names and levels. `finalized_level` is the level a
/// cluster runs at until UpdateFeatures finalizes another (`MetadataImage::feature_level`).
pub const FEATURES: &[Feature] = &[
    // GroupVersion.GV_1: the KIP-848 consumer group protocol (ConsumerGroupHeartbeat and
    // ConsumerGroupDescribe, `consumer_groups.rs`).
    Feature {
        name: "group.version",
        min_level: 0,
        max_level: 1,
        finalized_level: 1,
    },
    // TransactionVersion.TV_2, as Kafka 4.1 finalizes on a new cluster: KIP-890 part 2. A Java
    // producer that sees 2 finalized sends no AddPartitionsToTxn or AddOffsetsToTxn; Produce
    // v12+ and TxnOffsetCommit v5 add their partitions to the transaction (`produce.rs`,
    // `Enrolment::Add`), and EndTxn v5 bumps the epoch at every end. Clients of level 1 or
    // older (librdkafka, kafka-python, Produce up to v11) keep the classic rules with their
    // request versions. Level 1: flexible __transaction_state records (TransactionLogValue v1).
    Feature {
        name: "transaction.version",
        min_level: 0,
        max_level: 2,
        finalized_level: 2,
    },
    // EligibleLeaderReplicasVersion.ELRV_1, as Kafka 4.1 finalizes on a new cluster: KIP-966's
    // eligible leader replicas (`MetadataImage::elect`, shown by DescribeTopicPartitions).
    // The strict min ISR rule holds at any level, as in Kafka (replica/leader.rs).
    Feature {
        name: "eligible.leader.replicas.version",
        min_level: 0,
        max_level: 1,
        finalized_level: 1,
    },
    // ShareVersion.SV_1: share groups (KIP-932, `share_groups.rs`, `share_fetch.rs`), on by
    // default as in Kafka 4.2 (4.1 shipped them as a preview, finalized at 0).
    Feature {
        name: "share.version",
        min_level: 0,
        max_level: 1,
        finalized_level: 1,
    },
];

/// The epoch of the code's finalized levels (`finalized_features_epoch`). Clients keep the
/// features of the highest epoch they have seen (Java's `ApiVersions.update`), so it only
/// grows, and changes exactly when a finalized level of `FEATURES` does (a unit test pins the
/// pair). Kafka uses the metadata offset of its image; an UpdateFeatures sets it to this plus
/// the metadata offset of its record (`MetadataImage::finalized_features_epoch`). -1 would say
/// the levels are unknown.
pub const FINALIZED_FEATURES_EPOCH: i64 = 4;

/// Why this broker cannot run `name` at `level`, in the words of Kafka's
/// `QuorumFeatures.reasonNotSupported` (its VersionRange written `min-max`); None if it can.
/// A feature Sluice does not serve supports level 0 only: turning it off changes nothing.
pub fn level_not_supported(name: &str, level: i16) -> Option<String> {
    let (min, max) = FEATURES
        .iter()
        .find(|f| f.name == name)
        .map_or((0, 0), |f| (f.min_level, f.max_level));
    if (min..=max).contains(&level) {
        return None;
    }
    Some(match max {
        0 => "does not support this feature.".to_string(),
        _ if min == max => format!("only supports versions {min}"),
        _ => format!("only supports versions {min}-{max}"),
    })
}

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

pub async fn handle(ctx: &Ctx, req: ApiVersionsRequest, version: i16) -> ApiVersionsResponse {
    // Kafka's KafkaApis.handleApiVersionsRequest: `!isValid` gets `getErrorResponse` with
    // INVALID_REQUEST, which lists no API (only UNSUPPORTED_VERSION lists ApiVersions' range).
    if version >= 3
        && !(is_valid_software_token(&req.client_software_name)
            && is_valid_software_token(&req.client_software_version))
    {
        return ApiVersionsResponse::default().with_error_code(ResponseError::InvalidRequest.code());
    }
    let response = ApiVersionsResponse::default().with_api_keys(api_keys());
    if version < 3 {
        return response; // the features are tagged fields of v3+
    }
    // Kafka's ApiVersionsResponse.Builder with alterFeatureLevel0 = (version < 4).
    let image = ctx.controller.image();
    response
        .with_supported_features(supported_features(version))
        .with_finalized_features_epoch(image.finalized_features_epoch())
        .with_finalized_features(finalized_features(&image))
}

fn supported_features(version: i16) -> Vec<SupportedFeatureKey> {
    FEATURES
        .iter()
        .filter(|f| version >= 4 || f.min_level > 0)
        .map(|f| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(f.name))
                .with_min_version(f.min_level)
                .with_max_version(f.max_level)
        })
        .collect()
}

fn finalized_features(image: &crate::cluster::MetadataImage) -> Vec<FinalizedFeatureKey> {
    FEATURES
        .iter()
        .map(|f| (f.name, image.feature_level(f.name)))
        .filter(|(_, level)| *level > 0)
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect()
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
    fn the_finalized_features_change_only_with_their_epoch() {
        // A client keeps the features of the highest epoch it saw (Java's ApiVersions.update):
        // changing a finalized level without raising FINALIZED_FEATURES_EPOCH would leave
        // long-lived clients on the old levels. Update both together.
        let finalized: Vec<(&str, i16)> = FEATURES.iter().map(|f| (f.name, f.finalized_level)).collect();
        assert_eq!(
            (FINALIZED_FEATURES_EPOCH, finalized),
            (
                4,
                vec![
                    ("group.version", 1),
                    ("transaction.version", 2),
                    ("eligible.leader.replicas.version", 1),
                    ("share.version", 1)
                ]
            )
        );
        for f in FEATURES {
            assert!(
                f.min_level <= f.finalized_level && f.finalized_level <= f.max_level,
                "{f:?}"
            );
        }
    }

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
