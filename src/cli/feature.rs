//! `sluice feature`: the KIP-584 feature levels, as Kafka's `kafka-features.sh` shows and
//! changes them. `describe` reads ApiVersions (each feature's supported range, its finalized
//! level and the epoch of the levels); `upgrade`, `downgrade` and `disable` send UpdateFeatures,
//! which the broker hands to the metadata quorum: either every change is made or none.

use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiVersionsRequest, UpdateFeaturesRequest};
use serde_json::json;

use super::client::{Client, kafka_result, str_bytes};
use super::output::{Report, table};
use super::{CliError, key_value};

#[derive(clap::Subcommand, Debug)]
pub enum FeatureAction {
    /// Each feature's supported levels and the level it is finalized at (ApiVersions).
    Describe,
    /// Raise features to the levels given (UpdateFeatures).
    Upgrade {
        /// NAME=LEVEL, e.g. transaction.version=2; repeat for several.
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// Check the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Lower features to the levels given.
    Downgrade {
        /// NAME=LEVEL; repeat for several.
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// A downgrade that may lose metadata (Kafka's UNSAFE_DOWNGRADE).
        #[arg(long = "unsafe")]
        lossy: bool,
        /// Check the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Turn features off (level 0).
    Disable {
        /// A feature name; repeat for several.
        #[arg(long = "feature", value_name = "NAME", required = true)]
        features: Vec<String>,
        /// A downgrade that may lose metadata (Kafka's UNSAFE_DOWNGRADE).
        #[arg(long = "unsafe")]
        lossy: bool,
        /// Check the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
}

impl FeatureAction {
    pub fn describe(&self) -> String {
        match self {
            FeatureAction::Describe => "feature describe".into(),
            FeatureAction::Upgrade { .. } => "feature upgrade".into(),
            FeatureAction::Downgrade { .. } => "feature downgrade".into(),
            FeatureAction::Disable { .. } => "feature disable".into(),
        }
    }
}

/// Kafka's `FeatureUpdate.UpgradeType` codes.
const UPGRADE: i8 = 1;
const SAFE_DOWNGRADE: i8 = 2;
const UNSAFE_DOWNGRADE: i8 = 3;

pub async fn run(client: &Client, action: FeatureAction) -> Result<Report, CliError> {
    let (changes, kind, dry_run) = match action {
        FeatureAction::Describe => return describe(client).await,
        FeatureAction::Upgrade { features, dry_run } => (levels(&features)?, UPGRADE, dry_run),
        FeatureAction::Downgrade {
            features,
            lossy,
            dry_run,
        } => (levels(&features)?, downgrade(lossy), dry_run),
        FeatureAction::Disable {
            features,
            lossy,
            dry_run,
        } => (
            features.into_iter().map(|f| (f, 0)).collect(),
            downgrade(lossy),
            dry_run,
        ),
    };
    update(client, &changes, kind, dry_run).await
}

fn downgrade(lossy: bool) -> i8 {
    match lossy {
        true => UNSAFE_DOWNGRADE,
        false => SAFE_DOWNGRADE,
    }
}

fn levels(features: &[String]) -> Result<Vec<(String, i16)>, CliError> {
    features
        .iter()
        .map(|f| {
            let (name, level) = key_value("--feature", f)?;
            let level = level
                .trim()
                .parse::<i16>()
                .map_err(|_| CliError::Usage(format!("--feature {f}: the level must be a number")))?;
            Ok((name, level))
        })
        .collect()
}

async fn describe(client: &Client) -> Result<Report, CliError> {
    let version = client.version::<ApiVersionsRequest>(4)?;
    if version < 3 {
        return Err(CliError::Refused(
            "the broker reports no features (ApiVersions below v3)".into(),
        ));
    }
    let request = ApiVersionsRequest::default()
        .with_client_software_name(str_bytes("sluice-cli"))
        .with_client_software_version(str_bytes(env!("CARGO_PKG_VERSION")));
    let answer = client.admin(version, &request).await?;
    kafka_result(answer.error_code, None)?;
    let epoch = answer.finalized_features_epoch;
    // Every feature the broker supports, with its finalized level (0: not finalized, off).
    let rows: Vec<(String, i16, i16, i16)> = answer
        .supported_features
        .iter()
        .map(|s| {
            let finalized = answer
                .finalized_features
                .iter()
                .find(|f| f.name == s.name)
                .map_or(0, |f| f.max_version_level);
            (s.name.to_string(), s.min_version, s.max_version, finalized)
        })
        .collect();
    let text_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, min, max, level)| {
            vec![
                name.clone(),
                min.to_string(),
                max.to_string(),
                level.to_string(),
                epoch.to_string(),
            ]
        })
        .collect();
    Ok(Report {
        json: json!({
            "epoch": epoch,
            "features": rows.iter().map(|(name, min, max, level)| json!({
                "name": name, "supported_min": min, "supported_max": max, "finalized": level,
            })).collect::<Vec<_>>(),
        }),
        text: table(
            &["FEATURE", "SUPPORTED MIN", "SUPPORTED MAX", "FINALIZED", "EPOCH"],
            &text_rows,
        ),
    })
}

async fn update(client: &Client, changes: &[(String, i16)], kind: i8, dry_run: bool) -> Result<Report, CliError> {
    let version = client.version::<UpdateFeaturesRequest>(2)?;
    if dry_run && version < 1 {
        return Err(CliError::Refused(
            "the broker cannot check a change without making it (UpdateFeatures below v1)".into(),
        ));
    }
    let request = UpdateFeaturesRequest::default()
        .with_timeout_ms(60_000)
        .with_validate_only(dry_run)
        .with_feature_updates(
            changes
                .iter()
                .map(|(name, level)| {
                    let key = FeatureUpdateKey::default()
                        .with_feature(str_bytes(name))
                        .with_max_version_level(*level);
                    // v0 says only whether a downgrade is allowed; v1 names the type.
                    match version {
                        0 => key.with_allow_downgrade(kind != UPGRADE),
                        _ => key.with_upgrade_type(kind),
                    }
                })
                .collect(),
        );
    let answer = client.admin(version, &request).await?;
    kafka_result(answer.error_code, answer.error_message.as_deref())?;
    for result in &answer.results {
        kafka_result(result.error_code, result.error_message.as_deref())?;
    }
    let (done, can) = match kind {
        UPGRADE => ("was upgraded to", "can be upgraded to"),
        _ => ("was downgraded to", "can be downgraded to"),
    };
    let lines: Vec<String> = changes
        .iter()
        .map(|(name, level)| match (dry_run, *level) {
            (false, 0) => format!("{name} was disabled."),
            (true, 0) => format!("{name} can be disabled."),
            (false, level) => format!("{name} {done} {level}."),
            (true, level) => format!("{name} {can} {level}."),
        })
        .collect();
    Ok(Report {
        json: json!({
            "dry_run": dry_run,
            "features": changes.iter().map(|(name, level)| json!({"name": name, "level": level})).collect::<Vec<_>>(),
        }),
        text: lines.join("\n") + "\n",
    })
}
