//! Kafka-protocol requests from this broker to another: the transaction coordinator's
//! WriteTxnMarkers to the leaders of a transaction's partitions (Kafka's
//! `TransactionMarkerChannelManager`) and a partition leader's AddPartitionsToTxn `verify_only`
//! to a transactional id's coordinator (Kafka's `AddPartitionsToTxnManager`), sent to the
//! endpoint each broker registered on `inter.broker.listener.name` (`MetadataImage::brokers`).
//!
//! One request per connection at a time, answered before the connection is used again: the
//! callers already batch (one WriteTxnMarkers per broker and transaction end, one
//! AddPartitionsToTxn per producer of a Produce), so pipelining would buy little and would need
//! a reader task per connection. Each target broker has a small pool: at most
//! `connections_max` connections open (a caller beyond that waits for one, within its request
//! timeout), each put back after a clean exchange and dropped after any failure, so the next
//! call connects again. An idle connection is not reused once `idle_reuse_max` has passed
//! (below the peer's `connections.max.idle.ms`) or once the peer has closed it.
//!
//! Versions are fixed, with no ApiVersions round trip: both ends run Sluice of one release.
//! A peer that does not serve a version closes the connection (Kafka's answer to a request it
//! cannot parse), which the caller sees as NETWORK_EXCEPTION and retries.
//!
//! On a secured inter-broker listener (`cluster::peer`) each new connection does TLS and then,
//! on a SASL listener, SaslHandshake v1 and SaslAuthenticate v2 with this node's login before
//! its first request, as Kafka's brokers do; a refused login is `CallError::Authentication`.
//!
//! The peer's answer is untrusted input: its length is checked against `response_bytes_max`
//! before anything is allocated, the correlation id must match, and a frame that does not
//! decode exactly is an error, never a panic.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::Endpoint;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::BrokerInfo;
use super::peer::{DialSecurity, PeerStream};
use crate::sasl::client::SaslClient;

/// How long opening a connection may take (Kafka's `socket.connection.setup.timeout.ms` is
/// 10 s; a Produce waiting on a verification should fail over sooner).
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How long one call may take in all: waiting for a connection of the pool, connecting,
/// writing, the peer's work (a marker waits for its fsync) and reading the answer. Below the
/// clients' `request.timeout.ms` (30 s), so a Produce waiting on a verification gets its
/// retriable error before its client gives up on it.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;
/// The largest answer read. Both answers are a code per partition (about 10 bytes each plus
/// topic names): 8 MiB covers a transaction of several hundred thousand partitions.
pub const RESPONSE_BYTES_MAX: usize = 8 << 20;
/// Connections open to one broker at once; callers beyond wait.
pub const CONNECTIONS_PER_BROKER_MAX: usize = 8;
/// An idle connection older than this is closed rather than reused: Kafka's
/// `connections.max.idle.ms` defaults to 10 minutes, so the peer has not yet closed it.
pub const IDLE_REUSE_MS_MAX: u64 = 60_000;

/// The bounds of a `BrokerClient` (the constants above, shortened by tests).
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub response_bytes_max: usize,
    pub connections_per_broker_max: usize,
    pub idle_reuse_max: Duration,
}

impl Default for ClientLimits {
    fn default() -> ClientLimits {
        ClientLimits {
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS),
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS),
            response_bytes_max: RESPONSE_BYTES_MAX,
            connections_per_broker_max: CONNECTIONS_PER_BROKER_MAX,
            idle_reuse_max: Duration::from_millis(IDLE_REUSE_MS_MAX),
        }
    }
}

/// Why a call got no answer. Every case is retriable by the caller: nothing says the peer
/// refused the request itself (that is an error code inside the answer).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("broker {broker} has no usable endpoint {host}:{port}")]
    BadEndpoint { broker: i32, host: String, port: i32 },
    #[error("broker {broker} registered no listener {listener} (inter.broker.listener.name)")]
    NoListener { broker: i32, listener: String },
    #[error("connecting to broker {broker} at {addr}: {source}")]
    Connect {
        broker: i32,
        addr: String,
        source: std::io::Error,
    },
    #[error("broker {broker} at {addr}: no answer within {waited_ms} ms")]
    TimedOut { broker: i32, addr: String, waited_ms: u64 },
    #[error("broker {broker} at {addr}: {op}: {source}")]
    Io {
        broker: i32,
        addr: String,
        op: &'static str,
        source: std::io::Error,
    },
    #[error("broker {broker} at {addr} announced a {len}-byte answer (at most {max})")]
    FrameTooLarge {
        broker: i32,
        addr: String,
        len: i64,
        max: usize,
    },
    #[error("broker {broker} at {addr} sent an unreadable answer: {reason}")]
    Malformed { broker: i32, addr: String, reason: String },
    #[error("cannot encode the request: {0}")]
    Encode(String),
    #[error("broker {broker} at {addr} refused this node's login: {reason}")]
    Authentication { broker: i32, addr: String, reason: String },
}

impl CallError {
    /// The Kafka code a caller reports for this failure: Kafka's NetworkClient turns a
    /// disconnection into NETWORK_EXCEPTION and an expired request into REQUEST_TIMED_OUT.
    pub fn code(&self) -> i16 {
        match self {
            CallError::TimedOut { .. } => ResponseError::RequestTimedOut,
            CallError::Encode(_) => ResponseError::UnknownServerError,
            CallError::Authentication { .. } => ResponseError::SaslAuthenticationFailed,
            CallError::BadEndpoint { .. }
            | CallError::NoListener { .. }
            | CallError::Connect { .. }
            | CallError::Io { .. }
            | CallError::FrameTooLarge { .. }
            | CallError::Malformed { .. } => ResponseError::NetworkException,
        }
        .code()
    }
}

/// The connections to one broker, at the endpoint they were opened to.
struct Pool {
    host: String,
    port: i32,
    /// One permit per connection that may be open (busy or idle).
    permits: Semaphore,
    /// Connections put back after a clean exchange, with when.
    idle: Mutex<Vec<(PeerStream, Instant)>>,
}

impl Pool {
    /// The most recently used idle connection that is still worth using, if any; the others
    /// found stale on the way are closed.
    fn take_idle(&self, reuse_max: Duration) -> Option<PeerStream> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((mut stream, since)) = idle.pop() {
            if since.elapsed() <= reuse_max && stream.still_open() {
                return Some(stream);
            }
        }
        None
    }

    fn put_idle(&self, stream: PeerStream) {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((stream, Instant::now()));
    }
}

/// Requests to other brokers, one connection pool per broker id.
pub struct BrokerClient {
    /// "sluice-broker-<node.id>": the request header's client id, so the peer's logs say who asked.
    client_id: StrBytes,
    /// `inter.broker.listener.name`: the registered endpoint dialled.
    listener: String,
    limits: ClientLimits,
    /// TLS and the SASL login of the inter-broker listener.
    security: Arc<DialSecurity>,
    /// One entry per broker id ever called (the brokers of the cluster); an entry is replaced
    /// when that broker registers again at another endpoint.
    pools: Mutex<HashMap<i32, Arc<Pool>>>,
    correlation_id: AtomicI32,
}

impl BrokerClient {
    /// The client of broker `node_id`, dialling the others' endpoints on `listener`, with the
    /// default limits.
    pub fn new(node_id: i32, listener: &str) -> BrokerClient {
        BrokerClient::with_limits(node_id, listener, ClientLimits::default())
    }

    /// The client of this node, dialling the inter-broker listener with its security
    /// (`cluster::peer`), within `limits`.
    pub fn for_config(config: &crate::config::BrokerConfig, limits: ClientLimits) -> BrokerClient {
        BrokerClient {
            security: DialSecurity::inter_broker_or_broken(config),
            ..BrokerClient::with_limits(config.node_id, &config.inter_broker_listener_name, limits)
        }
    }

    /// A client that is not a broker (the admin CLI): its own client id, dialling endpoints
    /// named `listener` with `security`.
    pub fn with_security(
        client_id: &str,
        listener: &str,
        limits: ClientLimits,
        security: Arc<DialSecurity>,
    ) -> BrokerClient {
        BrokerClient {
            client_id: StrBytes::from_string(client_id.to_string()),
            security,
            ..BrokerClient::with_limits(0, listener, limits)
        }
    }

    pub fn with_limits(node_id: i32, listener: &str, limits: ClientLimits) -> BrokerClient {
        debug_assert!(limits.connections_per_broker_max > 0, "a pool needs a connection");
        BrokerClient {
            client_id: StrBytes::from_string(format!("sluice-broker-{node_id}")),
            listener: listener.to_string(),
            limits,
            security: Arc::new(DialSecurity::plaintext(listener)),
            pools: Mutex::new(HashMap::new()),
            correlation_id: AtomicI32::new(0),
        }
    }

    /// The pool of `broker` at `endpoint`, created or replaced (its endpoint changed) as needed.
    fn pool(&self, broker: &BrokerInfo, endpoint: &Endpoint) -> Arc<Pool> {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        match pools.get(&broker.id) {
            Some(pool) if pool.host == endpoint.host && pool.port == endpoint.port => pool.clone(),
            _ => {
                let pool = Arc::new(Pool {
                    host: endpoint.host.clone(),
                    port: endpoint.port,
                    permits: Semaphore::new(self.limits.connections_per_broker_max),
                    idle: Mutex::new(Vec::new()),
                });
                pools.insert(broker.id, pool.clone());
                pool
            }
        }
    }

    /// Sends `request` at `version` to `broker` and returns its decoded answer, within
    /// `request_timeout` in all.
    pub async fn call<R: Request>(
        &self,
        broker: &BrokerInfo,
        version: i16,
        request: &R,
    ) -> Result<R::Response, CallError> {
        let correlation_id = self.correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = self.encode(version, correlation_id, request)?;
        let endpoint = broker.endpoint(&self.listener).ok_or_else(|| CallError::NoListener {
            broker: broker.id,
            listener: self.listener.clone(),
        })?;
        let pool = self.pool(broker, endpoint);
        let addr = format!("{}:{}", endpoint.host, endpoint.port);
        let deadline = Instant::now() + self.limits.request_timeout;
        let exchange = async {
            // The pool's semaphore is never closed; a closed one would mean no connection.
            let _permit = pool.permits.acquire().await.map_err(|_| CallError::BadEndpoint {
                broker: broker.id,
                host: endpoint.host.clone(),
                port: endpoint.port,
            })?;
            let mut stream = match pool.take_idle(self.limits.idle_reuse_max) {
                Some(stream) => stream,
                None => self.connect(broker.id, endpoint, &addr).await?,
            };
            let body = self.exchange(&mut stream, &frame, broker.id, &addr).await?;
            // Only a connection whose exchange ended cleanly goes back: after any failure its
            // state is unknown (a late answer could be read as the next one's).
            pool.put_idle(stream);
            Ok(body)
        };
        let body = tokio::time::timeout_at(deadline, exchange)
            .await
            .map_err(|_| CallError::TimedOut {
                broker: broker.id,
                addr: addr.clone(),
                waited_ms: u64::try_from(self.limits.request_timeout.as_millis()).unwrap_or(u64::MAX),
            })??;
        decode_response::<R>(body, version, correlation_id).map_err(|reason| CallError::Malformed {
            broker: broker.id,
            addr,
            reason,
        })
    }

    /// A request frame: length, header (with our client id), body.
    fn encode<R: Request>(&self, version: i16, correlation_id: i32, request: &R) -> Result<Bytes, CallError> {
        let key = ApiKey::try_from(R::KEY).map_err(|()| CallError::Encode(format!("unknown API key {}", R::KEY)))?;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::with_capacity(128);
        buf.put_i32(0);
        header
            .encode(&mut buf, key.request_header_version(version))
            .and_then(|()| request.encode(&mut buf, version))
            .map_err(|e| CallError::Encode(format!("{key:?} v{version}: {e}")))?;
        let len = i32::try_from(buf.len() - 4).map_err(|_| CallError::Encode("a request over 2 GiB".into()))?;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        Ok(buf.freeze())
    }

    async fn connect(&self, broker: i32, endpoint: &Endpoint, addr: &str) -> Result<PeerStream, CallError> {
        let port = u16::try_from(endpoint.port).map_err(|_| CallError::BadEndpoint {
            broker,
            host: endpoint.host.clone(),
            port: endpoint.port,
        })?;
        let mut stream = self
            .security
            .connect(&endpoint.host, port, self.limits.connect_timeout)
            .await
            .map_err(|source| CallError::Connect {
                broker,
                addr: addr.to_string(),
                source,
            })?;
        if let Some(login) = &self.security.sasl {
            self.log_in(&mut stream, SaslClient::new(login.clone()), broker, addr)
                .await?;
        }
        Ok(stream)
    }

    /// SaslHandshake v1, then SaslAuthenticate v2 until the exchange ends on both sides.
    async fn log_in(
        &self,
        stream: &mut PeerStream,
        mut client: SaslClient,
        broker: i32,
        addr: &str,
    ) -> Result<(), CallError> {
        let refused = |reason: String| CallError::Authentication {
            broker,
            addr: addr.to_string(),
            reason,
        };
        let malformed = |reason: String| CallError::Malformed {
            broker,
            addr: addr.to_string(),
            reason,
        };
        let mechanism = client.mechanism().name();
        let correlation_id = self.correlation_id.fetch_add(1, Ordering::Relaxed);
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
        let frame = self.encode(1, correlation_id, &handshake)?;
        let body = self.exchange(stream, &frame, broker, addr).await?;
        let answer = decode_response::<SaslHandshakeRequest>(body, 1, correlation_id).map_err(malformed)?;
        if answer.error_code != 0 {
            let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(refused(format!(
                "SaslHandshake {mechanism}: error {} (it offers {})",
                answer.error_code,
                offered.join(", ")
            )));
        }
        let mut message = client.start();
        loop {
            let correlation_id = self.correlation_id.fetch_add(1, Ordering::Relaxed);
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let frame = self.encode(2, correlation_id, &request)?;
            let body = self.exchange(stream, &frame, broker, addr).await?;
            let answer = decode_response::<SaslAuthenticateRequest>(body, 2, correlation_id).map_err(malformed)?;
            if answer.error_code != 0 {
                return Err(refused(format!(
                    "SaslAuthenticate {mechanism}: error {}: {}",
                    answer.error_code,
                    answer.error_message.as_deref().unwrap_or("")
                )));
            }
            match client.step(&answer.auth_bytes).map_err(refused)? {
                Some(next) => message = next,
                None => return Ok(()),
            }
        }
    }

    /// Writes one frame and reads one answer frame (its body).
    async fn exchange(
        &self,
        stream: &mut PeerStream,
        frame: &[u8],
        broker: i32,
        addr: &str,
    ) -> Result<Bytes, CallError> {
        let io = |op: &'static str| {
            move |source| CallError::Io {
                broker,
                addr: addr.to_string(),
                op,
                source,
            }
        };
        stream.write_all(frame).await.map_err(io("write the request"))?;
        let mut len = [0u8; 4];
        stream
            .read_exact(&mut len)
            .await
            .map_err(io("read the answer's length"))?;
        // The length is the peer's claim: check it before allocating anything.
        let claimed = i32::from_be_bytes(len);
        let len = usize::try_from(claimed)
            .ok()
            .filter(|len| *len <= self.limits.response_bytes_max)
            .ok_or(CallError::FrameTooLarge {
                broker,
                addr: addr.to_string(),
                len: i64::from(claimed),
                max: self.limits.response_bytes_max,
            })?;
        // Reserved, not zeroed: read_buf writes every byte before the body is used.
        let mut body = BytesMut::with_capacity(len);
        while body.len() < len {
            let want = u64::try_from(len - body.len()).unwrap_or(u64::MAX);
            let read = (&mut *stream)
                .take(want)
                .read_buf(&mut body)
                .await
                .map_err(io("read the answer"))?;
            if read == 0 {
                let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                return Err(io("read the answer")(eof));
            }
        }
        Ok(body.freeze())
    }
}

/// Decodes an answer frame's body: the header's correlation id must be ours, and the body must
/// decode to its last byte.
fn decode_response<R: Request>(mut body: Bytes, version: i16, correlation_id: i32) -> Result<R::Response, String> {
    let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
        .map_err(|e| format!("response header: {e}"))?;
    if header.correlation_id != correlation_id {
        return Err(format!(
            "correlation id {} answers request {correlation_id}",
            header.correlation_id
        ));
    }
    let response = R::Response::decode(&mut body, version).map_err(|e| format!("v{version} body: {e}"))?;
    if body.has_remaining() {
        return Err(format!("{} bytes after the v{version} body", body.remaining()));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    fn markers_request() -> WriteTxnMarkersRequest {
        WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(7))
                .with_producer_epoch(3)
                .with_transaction_result(true)
                .with_coordinator_epoch(1)
                .with_topics(vec![
                    WritableTxnMarkerTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_partition_indexes(vec![0, 4]),
                ]),
        ])
    }

    fn markers_response(producer_id: i64, partitions: &[i32]) -> WriteTxnMarkersResponse {
        WriteTxnMarkersResponse::default().with_markers(vec![
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(producer_id))
                .with_topics(vec![
                    WritableTxnMarkerTopicResult::default()
                        .with_name(TopicName(StrBytes::from_static_str("t")))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|p| WritableTxnMarkerPartitionResult::default().with_partition_index(*p))
                                .collect(),
                        ),
                ]),
        ])
    }

    fn short_limits() -> ClientLimits {
        ClientLimits {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_millis(500),
            response_bytes_max: 4096,
            connections_per_broker_max: 2,
            idle_reuse_max: Duration::from_secs(60),
        }
    }

    /// Reads one request frame: its header and body.
    async fn read_request(stream: &mut TcpStream) -> Option<(RequestHeader, Bytes)> {
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).await.ok()?;
        let mut body = vec![0u8; usize::try_from(i32::from_be_bytes(len)).unwrap()];
        stream.read_exact(&mut body).await.ok()?;
        let mut body = Bytes::from(body);
        let key = ApiKey::try_from(i16::from_be_bytes([body[0], body[1]])).unwrap();
        let version = i16::from_be_bytes([body[2], body[3]]);
        let header = RequestHeader::decode(&mut body, key.request_header_version(version)).unwrap();
        Some((header, body))
    }

    /// Writes `body` after a response header for `correlation_id`, as a frame.
    async fn answer(stream: &mut TcpStream, correlation_id: i32, body: &WriteTxnMarkersResponse) {
        let mut buf = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut buf, WriteTxnMarkersResponse::header_version(1))
            .unwrap();
        body.encode(&mut buf, 1).unwrap();
        let mut frame = (i32::try_from(buf.len()).unwrap()).to_be_bytes().to_vec();
        frame.extend_from_slice(&buf);
        stream.write_all(&frame).await.unwrap();
    }

    async fn bind() -> (TcpListener, BrokerInfo) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = i32::from(listener.local_addr().unwrap().port());
        (listener, BrokerInfo::new(2, "127.0.0.1", port))
    }

    #[tokio::test]
    async fn a_request_is_answered_and_its_connection_reused() {
        let (listener, broker) = bind().await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let server = tokio::spawn({
            let accepted = accepted.clone();
            async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                accepted.fetch_add(1, Ordering::SeqCst);
                while let Some((header, mut body)) = read_request(&mut stream).await {
                    // Kafka's request header: the API, its version, our client id.
                    assert_eq!(
                        (header.request_api_key, header.request_api_version),
                        (ApiKey::WriteTxnMarkers as i16, 1)
                    );
                    assert_eq!(header.client_id.as_deref(), Some("sluice-broker-1"));
                    let req = WriteTxnMarkersRequest::decode(&mut body, 1).unwrap();
                    assert_eq!(req, markers_request());
                    answer(&mut stream, header.correlation_id, &markers_response(7, &[0, 4])).await;
                }
            }
        });
        let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
        for _ in 0..3 {
            let resp = client.call(&broker, 1, &markers_request()).await.unwrap();
            assert_eq!(resp, markers_response(7, &[0, 4]));
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for three calls");
        drop(client);
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_the_peer_closed_is_not_reused() {
        let (listener, broker) = bind().await;
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(async move {
            // The first connection answers once and is closed (the peer's idle timeout).
            let (mut stream, _) = listener.accept().await.unwrap();
            let (header, _) = read_request(&mut stream).await.unwrap();
            answer(&mut stream, header.correlation_id, &markers_response(7, &[0])).await;
            drop(stream);
            closed_tx.send(()).unwrap();
            let (mut stream, _) = listener.accept().await.unwrap();
            let (header, _) = read_request(&mut stream).await.unwrap();
            answer(&mut stream, header.correlation_id, &markers_response(7, &[4])).await;
        });
        let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
        client.call(&broker, 1, &markers_request()).await.unwrap();
        closed_rx.await.unwrap();
        let resp = client.call(&broker, 1, &markers_request()).await.unwrap();
        assert_eq!(resp, markers_response(7, &[4]), "answered on a new connection");
        server.await.unwrap();
    }

    /// A server answering every request with `reply(correlation id)` as one raw frame body.
    async fn raw_server(reply: impl Fn(i32) -> Vec<u8> + Send + 'static) -> BrokerInfo {
        let (listener, broker) = bind().await;
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                while let Some((header, _)) = read_request(&mut stream).await {
                    let body = reply(header.correlation_id);
                    let mut frame = i32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
                    frame.extend_from_slice(&body);
                    if stream.write_all(&frame).await.is_err() {
                        break;
                    }
                }
            }
        });
        broker
    }

    #[tokio::test]
    async fn garbage_answers_are_errors_and_never_panics() {
        // Random bodies after a correct correlation id, at every length up to 64 bytes: the
        // decoder must refuse or accept, and an accepted one must have used every byte.
        let seed = fastrand::u64(..);
        println!("seed {seed}");
        let rng = Arc::new(Mutex::new(fastrand::Rng::with_seed(seed)));
        let broker = raw_server({
            let rng = rng.clone();
            move |cid| {
                let mut rng = rng.lock().unwrap();
                let len = rng.usize(0..64);
                let mut body = cid.to_be_bytes().to_vec();
                body.extend((0..len).map(|_| rng.u8(..)));
                body
            }
        })
        .await;
        let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
        for _ in 0..300 {
            match client.call(&broker, 1, &markers_request()).await {
                Ok(_) | Err(CallError::Malformed { .. }) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
    }

    #[tokio::test]
    async fn a_wrong_correlation_id_or_trailing_bytes_are_refused() {
        let good = {
            let mut buf = BytesMut::new();
            ResponseHeader::default().encode(&mut buf, 1).unwrap();
            markers_response(7, &[0]).encode(&mut buf, 1).unwrap();
            buf.freeze()
        };
        let wrong_cid = raw_server({
            let good = good.clone();
            move |cid| {
                let mut body = good.to_vec();
                body[..4].copy_from_slice(&(cid + 1).to_be_bytes());
                body
            }
        })
        .await;
        let trailing = raw_server(move |cid| {
            let mut body = good.to_vec();
            body[..4].copy_from_slice(&cid.to_be_bytes());
            body.push(0);
            body
        })
        .await;
        let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
        for broker in [wrong_cid, trailing] {
            let err = client.call(&broker, 1, &markers_request()).await.unwrap_err();
            assert!(matches!(err, CallError::Malformed { .. }), "{err}");
            assert_eq!(err.code(), ResponseError::NetworkException.code());
        }
    }

    #[tokio::test]
    async fn an_oversized_or_negative_length_is_refused_before_reading() {
        for claimed in [4097i32, -1, i32::MAX] {
            let (listener, broker) = bind().await;
            tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                read_request(&mut stream).await.unwrap();
                stream.write_all(&claimed.to_be_bytes()).await.unwrap();
                // Keep the connection open: the client must not wait for the claimed bytes.
                let _ = read_request(&mut stream).await;
            });
            let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
            let err = client.call(&broker, 1, &markers_request()).await.unwrap_err();
            assert!(matches!(err, CallError::FrameTooLarge { .. }), "{claimed}: {err}");
        }
    }

    #[tokio::test]
    async fn a_silent_peer_times_out_and_a_closed_port_is_a_network_error() {
        let (listener, broker) = bind().await;
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            // Reads the request, never answers.
            let _ = read_request(&mut stream).await;
            let _ = read_request(&mut stream).await;
        });
        let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
        let started = std::time::Instant::now();
        let err = client.call(&broker, 1, &markers_request()).await.unwrap_err();
        assert!(matches!(err, CallError::TimedOut { .. }), "{err}");
        assert_eq!(err.code(), ResponseError::RequestTimedOut.code());
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

        // A port nobody listens on any more.
        let (listener, closed) = bind().await;
        drop(listener);
        let err = client.call(&closed, 1, &markers_request()).await.unwrap_err();
        assert!(matches!(err, CallError::Connect { .. }), "{err}");
        assert_eq!(err.code(), ResponseError::NetworkException.code());
    }

    #[tokio::test]
    async fn a_broker_registered_again_elsewhere_gets_a_new_pool() {
        let client = BrokerClient::with_limits(1, "PLAINTEXT", short_limits());
        let pool = |port| {
            let broker = BrokerInfo::new(2, "127.0.0.1", port);
            client.pool(&broker, &broker.endpoints[0])
        };
        let first = pool(9000);
        let same = pool(9000);
        let moved = pool(9001);
        assert!(Arc::ptr_eq(&first, &same));
        assert!(!Arc::ptr_eq(&first, &moved));
        assert_eq!(client.pools.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_broker_without_the_inter_broker_listener_is_not_dialled() {
        let client = BrokerClient::with_limits(1, "INTERNAL", short_limits());
        let err = client
            .call(&BrokerInfo::new(2, "127.0.0.1", 9000), 1, &markers_request())
            .await
            .unwrap_err();
        assert!(matches!(err, CallError::NoListener { broker: 2, .. }), "{err}");
        assert_eq!(err.code(), ResponseError::NetworkException.code());
    }
}
