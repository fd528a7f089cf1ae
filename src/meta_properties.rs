//! `meta.properties`: which node and which cluster a data directory belongs to (Kafka's
//! `MetaProperties`, version 1 as KRaft writes it: `version`, `node.id`, `cluster.id`).
//!
//! Written once the node knows its cluster's id, checked at every later start. It stops a node
//! from serving someone else's data: a data directory moved to a node with another `node.id`
//! (its partitions would be reported as led by a node that is gone), or a node whose metadata
//! log was wiped and that was pointed at another cluster's voters (it would join that cluster
//! with this cluster's partitions on disk). Kafka refuses both at start-up; so does Sluice.
//!
//! Beside it, the node's clean-shutdown marker: whether the last stop was clean, which the
//! broker's registration reports (eligible leader replicas, KIP-966).

// Input from disk becomes an error, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "meta.properties";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub node_id: i32,
    /// Empty until the cluster's id is known (a quorum records it after it first forms).
    pub cluster_id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("{op} {}: {source}", .path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {what}", .path.display())]
    Invalid { path: PathBuf, what: String },
    #[error(
        "{}: this data directory belongs to node {stored}, but node.id is {configured}; point node.id or log.dirs at the right one",
        .path.display()
    )]
    NodeId {
        path: PathBuf,
        stored: i32,
        configured: i32,
    },
    #[error(
        "{}: this data directory belongs to cluster {stored}, but the metadata names cluster {found}; a node cannot move between clusters with its data",
        .path.display()
    )]
    ClusterId {
        path: PathBuf,
        stored: String,
        found: String,
    },
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MetaError {
    let path = path.to_path_buf();
    move |source| MetaError::Io { op, path, source }
}

/// Reads `meta.properties` from `dir`; None when the directory has none yet.
pub fn read(dir: &Path) -> Result<Option<MetaProperties>, MetaError> {
    let path = dir.join(FILE_NAME);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", &path)(e)),
    };
    // Java's Properties format as Kafka writes it: `key=value` lines, `#` comments.
    let props: BTreeMap<&str, &str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.trim(), v.trim())))
        .collect();
    let invalid = |what: String| MetaError::Invalid {
        path: path.clone(),
        what,
    };
    match props.get("version") {
        Some(&"1") => {}
        other => {
            return Err(invalid(format!(
                "unsupported version {other:?} (Sluice reads version 1)"
            )));
        }
    }
    let node_id = props
        .get("node.id")
        .ok_or_else(|| invalid("no node.id".into()))?
        .parse::<i32>()
        .map_err(|e| invalid(format!("node.id: {e}")))?;
    let cluster_id = props.get("cluster.id").map_or(String::new(), |s| s.to_string());
    Ok(Some(MetaProperties { node_id, cluster_id }))
}

/// Writes `meta.properties` into `dir` atomically (a temporary file, fsynced, renamed over it,
/// and the directory fsynced).
pub fn write(dir: &Path, meta: &MetaProperties) -> Result<(), MetaError> {
    let path = dir.join(FILE_NAME);
    let tmp = dir.join(format!("{FILE_NAME}.tmp"));
    let mut text = String::from("#\n#Written by Sluice\n");
    if !meta.cluster_id.is_empty() {
        text.push_str(&format!("cluster.id={}\n", meta.cluster_id));
    }
    text.push_str(&format!("node.id={}\nversion=1\n", meta.node_id));
    let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
    file.write_all(text.as_bytes()).map_err(io("write", &tmp))?;
    file.sync_all().map_err(io("fsync", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("rename into place", &path))?;
    sync_dir(dir)
}

/// Makes `dir`'s entries (a file created, renamed or removed) durable.
fn sync_dir(dir: &Path) -> Result<(), MetaError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", dir))
}

/// The node's clean-shutdown marker (Kafka's `.kafka_cleanshutdown`): written last by a clean
/// stop, taken (read and removed) at the next start. A start without it follows a kill, a
/// crash or a power loss, which the broker's registration tells the controller.
pub const CLEAN_SHUTDOWN_FILE: &str = ".node-clean-shutdown";

/// Records that this node stopped cleanly: every partition closed and flushed.
pub fn mark_clean_shutdown(dir: &Path) -> Result<(), MetaError> {
    let path = dir.join(CLEAN_SHUTDOWN_FILE);
    let file = std::fs::File::create(&path).map_err(io("create", &path))?;
    file.sync_all().map_err(io("fsync", &path))?;
    sync_dir(dir)
}

/// Whether the last stop was clean, forgetting it (durably), so that a stop from now on counts
/// as unclean until it marks itself clean.
pub fn take_clean_shutdown(dir: &Path) -> Result<bool, MetaError> {
    let path = dir.join(CLEAN_SHUTDOWN_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => sync_dir(dir).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io("remove", &path)(e)),
    }
}

/// At start-up, before anything else touches the directory: refuses a directory another node
/// id wrote, and records this node's id in a directory that has no `meta.properties` yet.
pub fn check_node(dir: &Path, node_id: i32) -> Result<Option<MetaProperties>, MetaError> {
    match read(dir)? {
        Some(stored) if stored.node_id != node_id => Err(MetaError::NodeId {
            path: dir.join(FILE_NAME),
            stored: stored.node_id,
            configured: node_id,
        }),
        Some(stored) => Ok(Some(stored)),
        None => Ok(None),
    }
}

/// Once the cluster's id is known: refuses a directory written for another cluster, and
/// records the id when the directory has none yet.
pub fn check_cluster(dir: &Path, node_id: i32, cluster_id: &str) -> Result<(), MetaError> {
    if cluster_id.is_empty() {
        return Ok(());
    }
    match read(dir)? {
        Some(stored) if !stored.cluster_id.is_empty() && stored.cluster_id != cluster_id => Err(MetaError::ClusterId {
            path: dir.join(FILE_NAME),
            stored: stored.cluster_id,
            found: cluster_id.to_string(),
        }),
        Some(stored) if stored.cluster_id == cluster_id && stored.node_id == node_id => Ok(()),
        _ => write(
            dir,
            &MetaProperties {
                node_id,
                cluster_id: cluster_id.to_string(),
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_directory_remembers_its_node_and_cluster() {
        let dir = tempfile::TempDir::new().unwrap();
        assert_eq!(check_node(dir.path(), 1).unwrap(), None);
        // The cluster id is not known yet: nothing is written.
        check_cluster(dir.path(), 1, "").unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        check_cluster(dir.path(), 1, "abcdefghijklmnopqrstuv").unwrap();
        let stored = read(dir.path()).unwrap().unwrap();
        assert_eq!(stored.node_id, 1);
        assert_eq!(stored.cluster_id, "abcdefghijklmnopqrstuv");
        // The same node and cluster start again.
        check_node(dir.path(), 1).unwrap();
        check_cluster(dir.path(), 1, "abcdefghijklmnopqrstuv").unwrap();
    }

    #[test]
    fn another_node_id_or_cluster_is_refused() {
        let dir = tempfile::TempDir::new().unwrap();
        check_cluster(dir.path(), 1, "clusterA").unwrap();
        let e = check_node(dir.path(), 2).unwrap_err();
        assert!(
            matches!(
                e,
                MetaError::NodeId {
                    stored: 1,
                    configured: 2,
                    ..
                }
            ),
            "{e}"
        );
        let e = check_cluster(dir.path(), 1, "clusterB").unwrap_err();
        assert!(matches!(e, MetaError::ClusterId { .. }), "{e}");
        assert!(e.to_string().contains("clusterA") && e.to_string().contains("clusterB"));
        // Nothing was overwritten.
        assert_eq!(read(dir.path()).unwrap().unwrap().cluster_id, "clusterA");
    }

    #[test]
    fn kafkas_own_file_is_read() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(
            dir.path().join(FILE_NAME),
            "#\n#Tue Dec 01 06:00:00 UTC 2026\nnode.id=3\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAA\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n",
        )
        .unwrap();
        assert_eq!(
            read(dir.path()).unwrap(),
            Some(MetaProperties {
                node_id: 3,
                cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into()
            })
        );
        std::fs::write(dir.path().join(FILE_NAME), "version=0\nbroker.id=3\n").unwrap();
        assert!(matches!(read(dir.path()), Err(MetaError::Invalid { .. })));
    }
}
