//! How this node dials another node on a secured listener: the inter-broker listener
//! (`inter.broker.listener.name`, by `broker_client`) and the controller listener (the metadata
//! quorum's transport, `raft::network`).
//!
//! - SSL and SASL_SSL: TLS with the listener's own keys (`tls::connector`: the peer's
//!   certificate checked against the listener's truststore and, by default, the host dialled;
//!   this node's keystore certificate shown to a peer that asks for one).
//! - SASL_PLAINTEXT and SASL_SSL: this node logs in by `sasl.mechanism.inter.broker.protocol`
//!   (or `sasl.mechanism.controller.protocol`) with the `username` and `password` of the
//!   listener's JAAS line for that mechanism (`sasl::client`). How the exchange travels is the
//!   caller's: Kafka's SaslHandshake and SaslAuthenticate between brokers, the quorum's own
//!   frames between controllers.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::config::{BrokerConfig, ConfigError, SASL_PLAINTEXT, SASL_SSL, SSL};
use crate::sasl::client::SaslLogin;

/// A connection to another node, in the clear or under TLS (either end).
pub enum PeerStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl PeerStream {
    pub fn tcp(&self) -> &TcpStream {
        match self {
            PeerStream::Plain(s) => s,
            PeerStream::Tls(s) => s.get_ref().0,
        }
    }

    /// Whether an idle connection can carry a request: nothing to read (an answer nobody asked
    /// for would be garbage) and no end of stream. Under TLS what arrived is first given to
    /// the TLS layer, which keeps its own records (session tickets) to itself.
    pub fn still_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        let mut buf = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        matches!(Pin::new(self).poll_read(&mut cx, &mut buf), Poll::Pending)
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_write(cx, data),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// How this node dials one listener of the others.
pub struct DialSecurity {
    pub listener: String,
    tls: Option<TlsConnector>,
    /// The login, on a SASL listener.
    pub sasl: Option<SaslLogin>,
    /// Why this listener cannot be dialled (its settings failed after start-up's check):
    /// every connect fails with it.
    broken: Option<String>,
}

impl std::fmt::Debug for DialSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DialSecurity")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

impl DialSecurity {
    /// PLAINTEXT.
    pub fn plaintext(listener: &str) -> DialSecurity {
        DialSecurity {
            listener: listener.to_string(),
            tls: None,
            sasl: None,
            broken: None,
        }
    }

    /// A client's own settings (the admin CLI's `--command-config`): TLS by `tls` when given,
    /// then the SASL `login` when given.
    pub fn client(listener: &str, tls: Option<TlsConnector>, sasl: Option<SaslLogin>) -> DialSecurity {
        DialSecurity {
            listener: listener.to_string(),
            tls,
            sasl,
            broken: None,
        }
    }

    /// Listener `listener` dialled by this node, logging in (on a SASL listener) by the
    /// mechanism `mechanism_key` holds.
    pub fn new(
        config: &BrokerConfig,
        listener: &str,
        mechanism_key: &'static str,
        mechanism: &str,
    ) -> Result<DialSecurity, ConfigError> {
        let protocol = config.security_protocol(listener).unwrap_or_default();
        let tls = match protocol {
            SSL | SASL_SSL => Some(crate::tls::connector(config, listener).map_err(|e| ConfigError {
                key: e.key.to_string(),
                reason: e.to_string(),
            })?),
            _ => None,
        };
        let sasl = match protocol {
            SASL_PLAINTEXT | SASL_SSL => Some(SaslLogin::from_config(config, listener, mechanism_key, mechanism)?),
            _ => None,
        };
        Ok(DialSecurity {
            listener: listener.to_string(),
            tls,
            sasl,
            broken: None,
        })
    }

    /// The inter-broker listener, as `broker_client` dials it.
    pub fn inter_broker(config: &BrokerConfig) -> Result<DialSecurity, ConfigError> {
        DialSecurity::new(
            config,
            &config.inter_broker_listener_name,
            "sasl.mechanism.inter.broker.protocol",
            &config.sasl_mechanism_inter_broker_protocol,
        )
    }

    /// `inter_broker`, or one whose every connect fails with the reason (settings that
    /// start-up accepted and that fail now, a file removed meanwhile).
    pub fn inter_broker_or_broken(config: &BrokerConfig) -> Arc<DialSecurity> {
        Arc::new(DialSecurity::inter_broker(config).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot dial the other brokers");
            DialSecurity {
                broken: Some(e.to_string()),
                ..DialSecurity::plaintext(&config.inter_broker_listener_name)
            }
        }))
    }

    /// TCP to `host:port`, then TLS on a TLS listener, within `limit`. The SASL login is the
    /// caller's (it speaks the peer's protocol).
    pub async fn connect(&self, host: &str, port: u16, limit: Duration) -> std::io::Result<PeerStream> {
        if let Some(reason) = &self.broken {
            return Err(std::io::Error::other(reason.clone()));
        }
        let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, format!("connecting to {host}:{port}"));
        let work = async {
            let stream = TcpStream::connect((host, port)).await?;
            // Requests are single frames waiting for their answer: no Nagle delay.
            stream.set_nodelay(true)?;
            match &self.tls {
                None => Ok(PeerStream::Plain(stream)),
                Some(connector) => {
                    let name = ServerName::try_from(host.to_string())
                        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
                    let tls = connector.connect(name, stream).await?;
                    Ok(PeerStream::Tls(Box::new(tokio_rustls::TlsStream::Client(tls))))
                }
            }
        };
        tokio::time::timeout(limit, work).await.map_err(|_| timed_out())?
    }

    /// `connect` to an address written `host:port` (IPv6 hosts in brackets).
    pub async fn connect_to(&self, address: &str, limit: Duration) -> std::io::Result<PeerStream> {
        let (host, port) = split_address(address).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{address} is not host:port"))
        })?;
        self.connect(host, port, limit).await
    }
}

/// `host:port` → (host, port), the brackets of an IPv6 host removed.
fn split_address(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    Some((host, port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split() {
        assert_eq!(split_address("127.0.0.1:9093"), Some(("127.0.0.1", 9093)));
        assert_eq!(split_address("[::1]:9093"), Some(("::1", 9093)));
        assert_eq!(split_address("kafka-1:x"), None);
        assert_eq!(split_address("nohost"), None);
    }
}
