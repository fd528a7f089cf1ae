//! Sluice: a message broker that speaks the Apache Kafka wire protocol.
//!
//! `Broker::start` runs a broker in the current tokio runtime (the binary and the tests use it);
//! see DESIGN.md for the module map.

pub mod api;
pub mod cluster;
pub mod config;
pub mod error;
pub mod log;
pub mod replica;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::Ctx;
use crate::cluster::Controller;
use crate::config::BrokerConfig;
use crate::replica::ReplicaManager;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Storage(#[from] error::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
}

/// A running broker.
pub struct BrokerHandle {
    /// The address the listener is bound to (useful with port 0).
    pub addr: SocketAddr,
    shutdown: CancellationToken,
    stopped: tokio::task::JoinHandle<()>,
}

impl BrokerHandle {
    /// Clean shutdown: stop accepting, answer what is in flight, flush, write checkpoints.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let _ = self.stopped.await;
    }
}

pub struct Broker;

impl Broker {
    /// Recovers the data directory and starts serving.
    pub async fn start(mut config: BrokerConfig) -> Result<BrokerHandle, StartError> {
        config.check()?;
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| error::Error::storage("create directory", &config.data_dir, e))?;
        let listener = TcpListener::bind(&config.listen)
            .await
            .map_err(|source| StartError::Listen { addr: config.listen.clone(), source })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen { addr: config.listen.clone(), source })?;
        if config.advertise.is_none() && (addr.port() != 0 || config.listen.ends_with(":0")) {
            // With an ephemeral port, clients must be told the real one.
            config.advertise = Some(addr.to_string());
        }
        let config = Arc::new(config);
        let controller = Arc::new(Controller::open(&config.data_dir, config.node_id)?);
        let replicas = Arc::new(ReplicaManager::new(config.clone()));
        replicas.remove_stray_dirs();
        replicas.apply_image(&controller.image())?;
        tracing::info!(%addr, advertised = config.advertised(), data_dir = %config.data_dir.display(), "sluice broker started");
        let ctx = Arc::new(Ctx { config: config.clone(), controller, replicas: replicas.clone() });
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let stopped = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                server::serve(listener, ctx, shutdown, tracker.clone()).await;
                tracker.close();
                let grace = Duration::from_millis(config.shutdown_timeout_ms);
                if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
                    tracing::warn!("connections still busy after shutdown.timeout.ms; closing anyway");
                }
                replicas.close_all();
                tracing::info!("sluice broker stopped cleanly");
            }
        });
        Ok(BrokerHandle { addr, shutdown, stopped })
    }
}
