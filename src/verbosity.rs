//! Log levels by target, changeable while the broker runs: Kafka's BROKER_LOGGER config
//! resource (KIP-412), mapped onto a reloadable `tracing_subscriber::EnvFilter`.
//!
//! Kafka's loggers are Java classes; Sluice's are its module targets (`sluice::log`,
//! `sluice::coordinator`, ...) and `root`, the level of everything else. A level set on a
//! target also applies below it (`sluice::log` covers `sluice::log::cleaner`), as the filter
//! does. Levels are Kafka's names (FATAL is tracing's error). Like Kafka's, changes are not
//! persisted: a restart goes back to `RUST_LOG`.
//!
//! (Not named `logging`: a filter target matches by string prefix, so `sluice::log` would then
//! cover this module too.)

// Input from the network becomes an error, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The logger standing for every target without a level of its own.
pub const ROOT_LOGGER: &str = "root";

/// Sluice's loggers: its module targets. `verbosity::tests` checks each one is a module.
pub const LOGGERS: &[&str] = &[
    "sluice",
    "sluice::api",
    "sluice::api::api_versions",
    "sluice::api::cluster",
    "sluice::api::configs",
    "sluice::api::consumer_groups",
    "sluice::api::delete_records",
    "sluice::api::describe_producers",
    "sluice::api::fetch",
    "sluice::api::groups",
    "sluice::api::list_config_resources",
    "sluice::api::list_offsets",
    "sluice::api::metadata",
    "sluice::api::offsets",
    "sluice::api::produce",
    "sluice::api::topics",
    "sluice::api::transactions",
    "sluice::cluster",
    "sluice::config",
    "sluice::coordinator",
    "sluice::coordinator::transactions",
    "sluice::log",
    "sluice::log::batch",
    "sluice::log::cleaner",
    "sluice::log::producer_state",
    "sluice::log::segment",
    "sluice::replica",
    "sluice::server",
    "sluice::verbosity",
];

/// Kafka's `LogLevelConfig.VALID_LOG_LEVELS`, sorted as `RuntimeLoggerManager` lists them.
pub const VALID_LEVELS: &[&str] = &["DEBUG", "ERROR", "FATAL", "INFO", "TRACE", "WARN"];

/// Why a logger change is refused; the handler picks the Kafka code.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// INVALID_CONFIG: `Logger x does not exist!`.
    UnknownLogger(String),
    /// INVALID_CONFIG: not one of `VALID_LEVELS`.
    InvalidLevel { logger: String, level: String },
    /// INVALID_REQUEST: the root logger always has a level.
    RemoveRoot,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::UnknownLogger(name) => write!(f, "Logger {name} does not exist!"),
            Refused::InvalidLevel { logger, level } => write!(
                f,
                "Cannot set the log level of {logger} to {level} as it is not a supported log level. \
                 Valid log levels are {}",
                VALID_LEVELS.join(", ")
            ),
            Refused::RemoveRoot => write!(f, "Removing the log level of the {ROOT_LOGGER} logger is not allowed"),
        }
    }
}

type Reload = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send>;

/// The levels in force and the handle that swaps the filter.
struct Levels {
    /// Start-up directives other than plain levels (spans, fields): kept as they are.
    extra: Vec<String>,
    /// The root level (Kafka's name).
    root: String,
    /// Levels set on targets (Kafka's names).
    targets: BTreeMap<String, String>,
    /// None until `install` (the tests' in-process brokers log nowhere).
    reload: Option<Reload>,
}

static LEVELS: LazyLock<Mutex<Levels>> = LazyLock::new(|| {
    Mutex::new(Levels {
        extra: Vec::new(),
        root: "INFO".into(),
        targets: BTreeMap::new(),
        reload: None,
    })
});

fn levels() -> std::sync::MutexGuard<'static, Levels> {
    LEVELS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Kafka level as an EnvFilter level.
fn filter_level(level: &str) -> &'static str {
    match level {
        "FATAL" | "ERROR" => "error",
        "WARN" => "warn",
        "DEBUG" => "debug",
        "TRACE" => "trace",
        "OFF" => "off",
        _ => "info",
    }
}

/// An EnvFilter level as Kafka names it.
fn kafka_level(level: &str) -> Option<&'static str> {
    Some(match level.to_ascii_lowercase().as_str() {
        "error" => "ERROR",
        "warn" => "WARN",
        "info" => "INFO",
        "debug" => "DEBUG",
        "trace" => "TRACE",
        "off" => "OFF",
        _ => return None,
    })
}

impl Levels {
    fn directives(&self) -> String {
        let mut all = self.extra.clone();
        all.push(filter_level(&self.root).to_string());
        all.extend(self.targets.iter().map(|(t, l)| format!("{t}={}", filter_level(l))));
        all.join(",")
    }

    fn reload(&self) {
        let Some(reload) = &self.reload else { return };
        match EnvFilter::builder().parse(self.directives()) {
            Ok(filter) => {
                if let Err(error) = reload(filter) {
                    tracing::error!(%error, "cannot reload the log filter");
                }
            }
            Err(error) => tracing::error!(%error, "cannot build the log filter"),
        }
    }

    /// The level that applies to `target`: the most specific target level whose name starts
    /// `target` (the filter's rule), else the root's.
    fn effective(&self, target: &str) -> String {
        self.targets
            .iter()
            .filter(|(t, _)| target.starts_with(t.as_str()))
            .max_by_key(|(t, _)| t.len())
            .map_or_else(|| self.root.clone(), |(_, l)| l.clone())
    }
}

/// Installs the global subscriber: formatted lines to `writer`, filtered by `directives`
/// (`RUST_LOG` syntax; "info" when they do not parse), reloadable through this module.
/// Returns false when a global subscriber was already installed.
pub fn install<W>(directives: &str, ansi: bool, writer: W) -> bool
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let mut levels = levels();
    let directives = if EnvFilter::builder().parse(directives).is_ok() {
        directives
    } else {
        "info"
    };
    levels.extra.clear();
    levels.targets.clear();
    levels.root = "INFO".into();
    for directive in directives.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match directive.split_once('=') {
            None if kafka_level(directive).is_some() => {
                levels.root = kafka_level(directive).unwrap_or("INFO").to_string();
            }
            Some((target, level)) if kafka_level(level).is_some() && !target.contains(['[', '{']) => {
                levels
                    .targets
                    .insert(target.to_string(), kafka_level(level).unwrap_or("INFO").to_string());
            }
            _ => levels.extra.push(directive.to_string()),
        }
    }
    let filter = EnvFilter::builder()
        .parse(levels.directives())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(writer))
        .try_init()
        .is_ok();
    if installed {
        levels.reload = Some(Box::new(move |filter| handle.reload(filter).map_err(|e| e.to_string())));
    }
    installed
}

/// Every logger with the level that applies to it: root first, then Sluice's targets and any
/// other target given a level.
pub fn loggers() -> Vec<(String, String)> {
    let levels = levels();
    let mut names: Vec<&str> = LOGGERS.to_vec();
    names.extend(
        levels
            .targets
            .keys()
            .map(String::as_str)
            .filter(|t| !LOGGERS.contains(t)),
    );
    names.sort_unstable();
    let mut out = vec![(ROOT_LOGGER.to_string(), levels.root.clone())];
    out.extend(names.into_iter().map(|n| (n.to_string(), levels.effective(n))));
    out
}

/// Whether `name` is a logger here (Kafka's `Log4jController.loggerExists`).
pub fn logger_exists(name: &str) -> bool {
    name == ROOT_LOGGER || LOGGERS.contains(&name) || levels().targets.contains_key(name)
}

/// Checks a SET (`Some(level)`) or DELETE (`None`) of a logger's level without applying it.
pub fn check(logger: &str, level: Option<&str>) -> Result<(), Refused> {
    if !logger_exists(logger) {
        return Err(Refused::UnknownLogger(logger.to_string()));
    }
    match level {
        Some(level) if !VALID_LEVELS.contains(&level) => Err(Refused::InvalidLevel {
            logger: logger.to_string(),
            level: level.to_string(),
        }),
        None if logger == ROOT_LOGGER => Err(Refused::RemoveRoot),
        _ => Ok(()),
    }
}

/// Applies checked changes together: SET (`Some(level)`) or DELETE (`None`, the logger
/// inherits again), then reloads the filter once.
pub fn apply(changes: &[(String, Option<String>)]) {
    let mut levels = levels();
    for (logger, level) in changes {
        match (logger.as_str(), level) {
            (ROOT_LOGGER, Some(level)) => levels.root = level.clone(),
            (ROOT_LOGGER, None) => {}
            (target, Some(level)) => {
                levels.targets.insert(target.to_string(), level.clone());
            }
            (target, None) => {
                levels.targets.remove(target);
            }
        }
        let level = level.as_deref().unwrap_or("(inherited)");
        tracing::warn!(%logger, level, "log level changed (BROKER_LOGGER)");
    }
    levels.reload();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_logger_is_a_module_of_the_crate() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for logger in LOGGERS.iter().filter(|l| **l != "sluice") {
            let path = logger.trim_start_matches("sluice::").replace("::", "/");
            let file = src.join(format!("{path}.rs"));
            let dir = src.join(&path).join("mod.rs");
            assert!(file.exists() || dir.exists(), "{logger} has no module");
        }
    }

    #[test]
    fn a_target_level_covers_the_targets_below_it() {
        let levels = Levels {
            extra: vec![],
            root: "WARN".into(),
            targets: BTreeMap::from([
                ("sluice::log".to_string(), "DEBUG".to_string()),
                ("sluice::log::cleaner".to_string(), "TRACE".to_string()),
            ]),
            reload: None,
        };
        assert_eq!(levels.effective("sluice::log::segment"), "DEBUG");
        assert_eq!(levels.effective("sluice::log::cleaner"), "TRACE");
        assert_eq!(levels.effective("sluice::replica"), "WARN");
        assert_eq!(levels.directives(), "warn,sluice::log=debug,sluice::log::cleaner=trace");
    }

    #[test]
    fn kafka_levels_are_checked_and_the_root_cannot_be_removed() {
        // KIP-412 (Kafka's RuntimeLoggerManager): FATAL..TRACE, case as written.
        assert!(check("sluice::log", Some("FATAL")).is_ok());
        assert!(matches!(
            check("sluice::log", Some("debug")),
            Err(Refused::InvalidLevel { .. })
        ));
        assert!(matches!(
            check("sluice::log", Some("OFF")),
            Err(Refused::InvalidLevel { .. })
        ));
        assert_eq!(
            check("kafka.server.KafkaApis", Some("INFO")),
            Err(Refused::UnknownLogger("kafka.server.KafkaApis".into()))
        );
        assert_eq!(check(ROOT_LOGGER, None), Err(Refused::RemoveRoot));
        assert!(check("sluice::log", None).is_ok());
        assert_eq!(filter_level("FATAL"), "error");
    }
}
