//! SCRAM credentials given to `sluice format --add-scram`, as Kafka's
//! `kafka-storage format --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'`.
//!
//! SCRAM between brokers needs a credential before any broker can log in to another, and a
//! cluster whose only listeners are SCRAM ones has no way to create the first one. Kafka writes
//! them into the metadata log's bootstrap snapshot; here `format` salts them (a fresh random
//! salt each, 4096 iterations unless `iterations=` says otherwise) and leaves them in
//! `bootstrap-scram.json` in the data directory, never the password. At start the node records
//! in the metadata log those whose user has no credential of that mechanism yet (on a cluster,
//! retrying until the quorum takes them), then removes the file, so a credential changed or
//! deleted later is not brought back by a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{Controller, ScramCredentialEntry};
use crate::error::{Error, Result};
use crate::sasl::scram::{ScramCredential, ScramMechanism};

pub const FILE: &str = "bootstrap-scram.json";

/// Kafka's bounds on SCRAM iterations (`ScramMechanism.minIterations`, and AlterUserScramCredentials'
/// upper bound).
const MIN_ITERATIONS: i32 = 4096;
const MAX_ITERATIONS: i32 = 16384;

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FILE)
}

/// One `--add-scram` value: `MECHANISM=[name=USER,password=PASSWORD(,iterations=N)]`, values
/// optionally in double quotes. Kafka's form with `salt=` and `saltedpassword=` is refused:
/// give the password.
pub fn parse(arg: &str) -> std::result::Result<ScramCredentialEntry, String> {
    let bad = |why: &str| format!("--add-scram {arg:?}: {why} (expected MECHANISM=[name=USER,password=PASSWORD])");
    let (mechanism, rest) = arg.split_once('=').ok_or_else(|| bad("no '='"))?;
    let mechanism = ScramMechanism::from_name(mechanism.trim())
        .ok_or_else(|| bad("the mechanism is SCRAM-SHA-256 or SCRAM-SHA-512"))?;
    let fields = rest
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| bad("the fields go in [...]"))?;
    let (mut name, mut password, mut iterations) = (None, None, MIN_ITERATIONS);
    for field in fields.split(',') {
        let (key, value) = field
            .split_once('=')
            .ok_or_else(|| bad(&format!("{field:?} is not KEY=VALUE")))?;
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        match key.trim() {
            "name" => name = Some(value.to_string()),
            "password" => password = Some(value.to_string()),
            "iterations" => {
                iterations = value
                    .parse()
                    .ok()
                    .filter(|n| (MIN_ITERATIONS..=MAX_ITERATIONS).contains(n))
                    .ok_or_else(|| bad(&format!("iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")))?
            }
            "salt" | "saltedpassword" => return Err(bad("salt and saltedpassword are not taken: give password")),
            other => return Err(bad(&format!("unknown field {other:?}"))),
        }
    }
    let name = name.filter(|n| !n.is_empty()).ok_or_else(|| bad("name is missing"))?;
    let password = password
        .filter(|p| !p.is_empty())
        .ok_or_else(|| bad("password is missing"))?;
    let salt = random_salt().map_err(|e| bad(&e))?;
    let credential = ScramCredential::from_password(mechanism, &password, &salt, iterations);
    Ok(ScramCredentialEntry::new(&name, mechanism, &credential))
}

/// 32 random bytes, as Kafka's `ScramFormatter.secureRandomBytes` makes them.
fn random_salt() -> std::result::Result<Vec<u8>, String> {
    use ring::rand::SecureRandom;
    let mut salt = vec![0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut salt)
        .map_err(|_| "no random source for the salt".to_string())?;
    Ok(salt)
}

/// Writes the credentials for the node's next start (replacing any not yet recorded: the last
/// `format` wins, as Kafka's format rewrites its bootstrap snapshot).
pub fn write(data_dir: &Path, entries: &[ScramCredentialEntry]) -> Result<()> {
    std::fs::create_dir_all(data_dir).map_err(|e| Error::storage("create directory", data_dir, e))?;
    let body = serde_json::to_vec_pretty(entries)
        .map_err(|e| Error::storage("encode", path(data_dir), std::io::Error::other(e)))?;
    crate::log::checkpoint::write_atomically(&path(data_dir), &body, true)
}

/// The credentials `format` left that are not recorded yet (empty: none).
pub fn pending(data_dir: &Path) -> Result<Vec<ScramCredentialEntry>> {
    let path = path(data_dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::storage("parse", &path, std::io::Error::new(std::io::ErrorKind::InvalidData, e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::storage("read", &path, e)),
    }
}

fn remove(data_dir: &Path) -> Result<()> {
    let path = path(data_dir);
    match std::fs::remove_file(&path) {
        Ok(()) => crate::log::checkpoint::sync_dir(data_dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::storage("remove", &path, e)),
    }
}

/// Records the pending credentials and removes the file. On a single node this is one local
/// append (`retry` false: its error is returned); on a cluster the quorum may not have a
/// leader yet, so it is tried again every second until it succeeds or `stop` is cancelled.
pub async fn apply(
    controller: Arc<Controller>,
    data_dir: PathBuf,
    entries: Vec<ScramCredentialEntry>,
    retry: bool,
    stop: tokio_util::sync::CancellationToken,
) -> Result<()> {
    loop {
        match controller.bootstrap_scram_credentials(&entries).await {
            Ok(()) => {
                let users: Vec<String> = entries
                    .iter()
                    .map(|e| format!("{} ({})", e.user, e.mechanism))
                    .collect();
                tracing::info!(credentials = ?users, "recorded the SCRAM credentials of sluice format --add-scram");
                if let Err(e) = remove(&data_dir) {
                    tracing::warn!(error = %e, "could not remove {FILE}; its credentials are recorded");
                }
                return Ok(());
            }
            Err(e) if !retry => return Err(e),
            Err(e) => {
                tracing::info!(error = %e, "SCRAM credentials of sluice format --add-scram not recorded yet; retrying")
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kafkas_form() {
        let e = parse("SCRAM-SHA-256=[name=alice,password=alice-secret]").unwrap();
        assert_eq!(
            (e.user.as_str(), e.mechanism.as_str(), e.iterations),
            ("alice", "SCRAM-SHA-256", 4096)
        );
        let e = parse(r#"SCRAM-SHA-512=[name="bob",password="a,b",iterations=8192]"#);
        // A quoted value may not hold a comma: Kafka's parser splits on it too.
        assert!(e.is_err());
        let e = parse(r#"SCRAM-SHA-512=[name="bob",password="pw",iterations=8192]"#).unwrap();
        assert_eq!(
            (e.user.as_str(), e.mechanism.as_str(), e.iterations),
            ("bob", "SCRAM-SHA-512", 8192)
        );
    }

    #[test]
    fn the_stored_credential_verifies_the_password() {
        let e = parse("SCRAM-SHA-256=[name=alice,password=alice-secret]").unwrap();
        use base64::Engine;
        let salt = base64::engine::general_purpose::STANDARD.decode(&e.salt).unwrap();
        let again = ScramCredential::from_password(ScramMechanism::Sha256, "alice-secret", &salt, 4096);
        assert_eq!(ScramCredentialEntry::new("alice", ScramMechanism::Sha256, &again), e);
        let wrong = ScramCredential::from_password(ScramMechanism::Sha256, "guess", &salt, 4096);
        assert_ne!(ScramCredentialEntry::new("alice", ScramMechanism::Sha256, &wrong), e);
    }

    #[test]
    fn refuses_what_it_cannot_take() {
        for bad in [
            "SCRAM-SHA-1=[name=a,password=b]",
            "SCRAM-SHA-256=name=a,password=b",
            "SCRAM-SHA-256=[name=a]",
            "SCRAM-SHA-256=[password=b]",
            "SCRAM-SHA-256=[name=a,password=b,iterations=10]",
            "SCRAM-SHA-256=[name=a,salt=c2FsdA==,saltedpassword=eA==]",
            "SCRAM-SHA-256=[name=a,password=b,colour=red]",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn write_pending_remove() {
        let dir = tempfile::tempdir().unwrap();
        assert!(pending(dir.path()).unwrap().is_empty());
        let e = parse("SCRAM-SHA-256=[name=alice,password=alice-secret]").unwrap();
        write(dir.path(), std::slice::from_ref(&e)).unwrap();
        assert_eq!(pending(dir.path()).unwrap(), vec![e]);
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!text.contains("alice-secret"), "the password is not stored");
        remove(dir.path()).unwrap();
        assert!(pending(dir.path()).unwrap().is_empty());
    }
}
