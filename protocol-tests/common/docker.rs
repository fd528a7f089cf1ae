//! The three-node cluster of `docker/cluster.yml` under a Compose project of its own, for the
//! faults that need a node cut off from the others while its clients still reach it: each
//! node's clients come in on a published host port (the `clients` network), its brokers and
//! controllers on the `internal` network, which `cut` disconnects the node from.
//!
//! Runs only when `SLUICE_DOCKER_IMAGE` names a built image (protocol-tests/docker/cluster.sh
//! sets it after docker/build.sh); `up` returns None otherwise, and the test says it skipped.
//! Every command is bounded; the project and its volumes are removed on drop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{POLL_REQUEST_TIMEOUT, free_ports, metadata_request, try_call};

/// How long the nodes may take to list each other after `up`.
const READY_WAIT: Duration = Duration::from_secs(90);
/// `broker.session.timeout.ms` of the nodes: a node cut off loses its leaderships this soon.
pub const SESSION_TIMEOUT_MS: u64 = 3000;

pub struct DockerCluster {
    project: String,
    compose_file: PathBuf,
    ports: Vec<u16>,
    image: String,
    compose: Vec<String>,
}

/// Runs `program args` and returns its output, or why it did not succeed.
fn run(program: &str, args: &[&str], env: &[(String, String)]) -> Result<Output, String> {
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().map_err(|e| format!("{program} {args:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{program} {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl DockerCluster {
    /// Starts the cluster from `SLUICE_DOCKER_IMAGE` and waits until every node lists all
    /// three brokers; None when that variable is not set.
    pub async fn up() -> Option<DockerCluster> {
        let image = std::env::var("SLUICE_DOCKER_IMAGE").ok().filter(|i| !i.is_empty())?;
        let compose: Vec<String> = if run("docker", &["compose", "version"], &[]).is_ok() {
            vec!["docker".into(), "compose".into()]
        } else {
            vec!["docker-compose".into()]
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let cluster = DockerCluster {
            project: format!("sluicefault{}{nanos}", std::process::id()),
            compose_file: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docker/cluster.yml"),
            ports: free_ports(3),
            image,
            compose,
        };
        cluster.compose(&["up", "-d"]).expect("compose up");
        cluster.wait_ready().await;
        Some(cluster)
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("SLUICE_IMAGE".to_string(), self.image.clone()),
            ("SLUICE_ADVERTISE_HOST".to_string(), "127.0.0.1".to_string()),
            ("SLUICE_CLUSTER_VOLUME".to_string(), format!("{}_data", self.project)),
            ("SLUICE_SESSION_TIMEOUT_MS".to_string(), SESSION_TIMEOUT_MS.to_string()),
            ("RUST_LOG".to_string(), "info,openraft=warn".to_string()),
        ];
        for (i, port) in self.ports.iter().enumerate() {
            env.push((format!("SLUICE_PORT{}", i + 1), port.to_string()));
        }
        env
    }

    fn compose(&self, args: &[&str]) -> Result<Output, String> {
        let file = self.compose_file.display().to_string();
        let mut all: Vec<&str> = self.compose[1..].iter().map(String::as_str).collect();
        all.extend(["-p", &self.project, "-f", &file]);
        all.extend(args);
        run(&self.compose[0], &all, &self.env())
    }

    pub fn ids(&self) -> Vec<i32> {
        vec![1, 2, 3]
    }

    /// Node `id`'s published client address.
    pub fn addr(&self, id: i32) -> SocketAddr {
        let port = self.ports[usize::try_from(id - 1).unwrap()];
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    pub fn bootstrap(&self) -> String {
        self.ids()
            .iter()
            .map(|&id| self.addr(id).to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn container(&self, id: i32) -> String {
        let out = self.compose(&["ps", "-q", &format!("node{id}")]).expect("compose ps");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The network brokers and controllers speak on (Compose names it after the project).
    fn internal_network(&self) -> String {
        format!("{}_internal", self.project)
    }

    /// Disconnects node `id` from the internal network: it loses the other brokers and the
    /// quorum, its clients still reach it.
    pub fn cut(&self, id: i32) {
        run(
            "docker",
            &["network", "disconnect", &self.internal_network(), &self.container(id)],
            &[],
        )
        .expect("docker network disconnect");
    }

    /// Connects node `id` to the internal network again, under its alias there.
    pub fn heal(&self, id: i32) {
        let alias = format!("node{id}-internal");
        run(
            "docker",
            &[
                "network",
                "connect",
                "--alias",
                &alias,
                &self.internal_network(),
                &self.container(id),
            ],
            &[],
        )
        .expect("docker network connect");
    }

    /// Waits until every node lists the three brokers at their published ports.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let mut waiting = Vec::new();
            for id in self.ids() {
                match try_call(self.addr(id), 12, &metadata_request(&[]), POLL_REQUEST_TIMEOUT).await {
                    Ok(resp) if resp.brokers.len() == 3 => {}
                    Ok(resp) => waiting.push(format!("node{id} lists {} brokers", resp.brokers.len())),
                    Err(e) => waiting.push(format!("node{id}: {e}")),
                }
            }
            if waiting.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the docker cluster did not form within {READY_WAIT:?}: {waiting:?}\n{}",
                self.logs_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The last `lines` lines of each node's log.
    pub fn logs_tail(&self, lines: usize) -> String {
        match self.compose(&["logs", "--no-color", "--tail", &lines.to_string()]) {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(e) => e,
        }
    }
}

impl Drop for DockerCluster {
    fn drop(&mut self) {
        if let Err(e) = self.compose(&["down", "-v", "--remove-orphans"]) {
            eprintln!("removing the docker cluster {}: {e}", self.project);
        }
    }
}
