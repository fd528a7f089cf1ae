//! UpdateFeatures (key 57): v0 baseline (`allow_downgrade`) · v1 `upgrade_type` (1 upgrade, 2
//! safe downgrade, 3 unsafe downgrade) and `validate_only` · v2 no per-feature results.
//!
//! As Kafka 4.1's controller (`FeatureControlManager.updateFeatures`) answers: the request is
//! atomic. Each update is checked in turn: a known upgrade type, a level of at least 0, a level
//! this broker supports (Kafka's `QuorumFeatures.reasonNotSupported`: a feature Sluice does not
//! serve, such as metadata.version, supports level 0 only), and no downgrade asked as an
//! upgrade or upgrade asked as a downgrade. The first refusal fails the whole request with
//! INVALID_UPDATE_VERSION and nothing changes; otherwise every level is written in one
//! metadata record and ApiVersions reports it at once, with a higher
//! `finalized_features_epoch`. Needs ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED).
//!
//! What a level does here: group.version 0 turns the KIP-848 consumer group protocol off
//! (ConsumerGroupHeartbeat and ConsumerGroupDescribe answer UNSUPPORTED_VERSION, as Kafka's
//! `isConsumerGroupProtocolEnabled`); transaction.version is what clients read to choose their
//! transaction protocol (a Java producer seeing 2 uses KIP-890 part 2), while the broker keeps
//! serving every request version it advertises, as Kafka's does.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;

use super::api_versions::level_not_supported;
use super::{Ctx, Versions, message};
use crate::acl::Operation;

pub const VERSIONS: Versions = Versions::new(ApiKey::UpdateFeatures, 0, 2);

/// Kafka's `FeatureUpdate.UpgradeType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
    Unknown,
}

impl UpgradeType {
    /// v0 says only whether a downgrade is allowed (Kafka's `UpdateFeaturesRequest.getFeature`);
    /// v1 names the type.
    fn of(allow_downgrade: bool, code: i8, version: i16) -> UpgradeType {
        match (version, code) {
            (0, _) if allow_downgrade => UpgradeType::SafeDowngrade,
            (0, _) => UpgradeType::Upgrade,
            (_, 1) => UpgradeType::Upgrade,
            (_, 2) => UpgradeType::SafeDowngrade,
            (_, 3) => UpgradeType::UnsafeDowngrade,
            _ => UpgradeType::Unknown,
        }
    }
}

/// Kafka's `FeatureControlManager.updateFeature` checks, in its order: the refusal's message.
fn refusal(node: i32, current: i16, name: &str, level: i16, upgrade: UpgradeType) -> Option<String> {
    let reason = if upgrade == UpgradeType::Unknown {
        Some("The controller does not support the given upgrade type.".to_string())
    } else if level < 0 {
        Some("A feature version cannot be less than 0.".to_string())
    } else if let Some(reason) = level_not_supported(name, level) {
        Some(format!("Local controller {node} {reason}"))
    } else if level < current && upgrade == UpgradeType::Upgrade {
        Some(
            "Can't downgrade the version of this feature without setting the upgrade type to \
             either safe or unsafe downgrade."
                .to_string(),
        )
    } else if level > current && upgrade != UpgradeType::Upgrade {
        Some("Can't downgrade to a newer version.".to_string())
    } else {
        None
    };
    reason.map(|r| format!("Invalid update version {level} for feature {name}. {r}"))
}

pub async fn update_features(ctx: &Ctx, req: UpdateFeaturesRequest, version: i16) -> UpdateFeaturesResponse {
    if !ctx.authorize_cluster(Operation::Alter) {
        // Kafka's getErrorResponse: the top-level error, no per-feature results.
        return UpdateFeaturesResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("Cluster authorization failed."));
    }
    let image = ctx.controller.image();
    // Kafka reads the updates into a map: a feature named twice is updated to its last level.
    let updates: BTreeMap<String, (i16, UpgradeType)> = req
        .feature_updates
        .iter()
        .map(|u| {
            let upgrade = UpgradeType::of(u.allow_downgrade, u.upgrade_type, version);
            (u.feature.to_string(), (u.max_version_level, upgrade))
        })
        .collect();
    let failed = updates.iter().find_map(|(name, (level, upgrade))| {
        refusal(ctx.config.node_id, image.feature_level(name), name, *level, *upgrade)
    });
    let levels: BTreeMap<String, i16> = updates.into_iter().map(|(name, (level, _))| (name, level)).collect();
    let outcome = match failed {
        Some(reason) => Err((
            ResponseError::InvalidUpdateVersion.code(),
            format!("The update failed for all features since the following feature had an error: {reason}"),
        )),
        None if req.validate_only || levels.is_empty() => Ok(()),
        None => ctx
            .controller
            .update_features(levels, ctx.config.min_insync_replicas)
            .await
            .map_err(|e| (e.code(), e.to_string())),
    };
    match outcome {
        Err((code, text)) => UpdateFeaturesResponse::default()
            .with_error_code(code)
            .with_error_message(message(text)),
        Ok(()) => {
            let mut resp = UpdateFeaturesResponse::default();
            // Only v0-1 list each feature, and only when all succeeded.
            if version <= 1 {
                resp.results = req
                    .feature_updates
                    .iter()
                    .map(|u| {
                        UpdatableFeatureResult::default().with_feature(StrBytes::from_string(u.feature.to_string()))
                    })
                    .collect();
            }
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_follow_kafkas_order_and_words() {
        use UpgradeType::*;
        let r = |current, name, level, t| refusal(1, current, name, level, t);
        assert_eq!(r(2, "transaction.version", 1, SafeDowngrade), None);
        assert_eq!(
            r(2, "transaction.version", 2, Upgrade),
            None,
            "the same level is no downgrade"
        );
        assert_eq!(r(1, "transaction.version", 2, Upgrade), None);
        assert_eq!(
            r(0, "share.version", 0, Upgrade),
            None,
            "turning off an unserved feature"
        );
        assert_eq!(
            r(2, "transaction.version", 1, Unknown).as_deref(),
            Some(
                "Invalid update version 1 for feature transaction.version. The controller does not support the \
                 given upgrade type."
            )
        );
        assert_eq!(
            r(1, "group.version", -1, SafeDowngrade).as_deref(),
            Some("Invalid update version -1 for feature group.version. A feature version cannot be less than 0.")
        );
        assert_eq!(
            r(2, "transaction.version", 3, Upgrade).as_deref(),
            Some(
                "Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2"
            )
        );
        assert_eq!(
            r(0, "metadata.version", 27, Upgrade).as_deref(),
            Some(
                "Invalid update version 27 for feature metadata.version. Local controller 1 does not support this feature."
            )
        );
        assert!(
            r(2, "transaction.version", 0, Upgrade)
                .unwrap()
                .ends_with("without setting the upgrade type to either safe or unsafe downgrade.")
        );
        assert!(
            r(0, "group.version", 1, SafeDowngrade)
                .unwrap()
                .ends_with("Can't downgrade to a newer version.")
        );
    }

    #[test]
    fn version_0_reads_allow_downgrade_and_later_versions_the_type() {
        assert_eq!(UpgradeType::of(true, 1, 0), UpgradeType::SafeDowngrade);
        assert_eq!(UpgradeType::of(false, 3, 0), UpgradeType::Upgrade);
        assert_eq!(UpgradeType::of(true, 1, 1), UpgradeType::Upgrade);
        assert_eq!(UpgradeType::of(false, 3, 2), UpgradeType::UnsafeDowngrade);
        assert_eq!(UpgradeType::of(false, 0, 1), UpgradeType::Unknown);
    }
}
