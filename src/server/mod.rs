//! Listeners and connections: length-prefixed frames in, responses out in request order.
//!
//! Each connection has a reader (frames → dispatch, in order) and a writer (answers, in the
//! same order) joined by a bounded channel of `queued.max.requests` entries: a client that
//! pipelines more than that, or does not read its answers, stops being read (back-pressure).
//! Broken framing (oversized or negative length, an unknown API key, an unsupported version, a
//! body that does not parse) closes the connection with one log line, as Kafka does. A
//! connection silent for `connections.max.idle.ms` with no request in flight is closed, also
//! in the middle of a frame. Each connection holds a `max.connections` slot until its task
//! ends, however it ends.
//!
//! A listener mapped to SSL (`crate::tls`) runs the TLS handshake first, in the connection's
//! task and within `tls::HANDSHAKE_TIMEOUT`: a client that fails it (a plaintext client, a
//! bad or missing certificate) is closed alone, with a debug line.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use kafka_protocol::messages::ApiKey;

use crate::api::{self, Ctx, Reject, Reply};
use crate::sasl::{Authenticator, ListenerSasl};

mod quickack;
mod sendfile;

use sendfile::ResponseSink;

/// The write buffer of a connection's replies: small answers are gathered in it and written a
/// few per syscall; larger ones go straight to the socket (`write_watched`).
const SOCKET_BUFFER_BYTES: usize = 256 * 1024;

/// The read buffer of a connection. Small frames (several pipelined requests, a frame's length
/// prefix) come through it, a few per syscall. A read of at least this many bytes, when the
/// buffer is empty, goes straight into the frame's own buffer (tokio's `BufReader` bypass), so
/// this also bounds what of a large frame is copied twice: at most its last bytes and the start
/// read with the previous frame. At 256 KiB a quarter of 1 MiB Produce frames' bytes took the
/// extra copy (3 % of the broker's CPU under acks=1 load).
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// Why a connection was closed by the broker.
#[derive(Debug)]
enum Close {
    NegativeLength(i32),
    FrameTooLarge {
        len: usize,
        max: usize,
    },
    /// A request whose decoding could take more of `queued.max.request.bytes` than there is
    /// (`api::request_memory`).
    DecodeTooLarge {
        key: i16,
        len: usize,
        charge: usize,
        max: usize,
    },
    Rejected(Reject),
    Io(std::io::Error),
    /// Nothing read or written for `connections.max.idle.ms` with no request being answered,
    /// or a response the peer has not taken any of for that long.
    Idle {
        max: Duration,
    },
    /// A SASL listener's connection sent a request other than ApiVersions and SASL before
    /// authenticating.
    Unauthenticated(ApiKey),
    /// The SASL exchange failed or went out of turn (answered first).
    Authentication(String),
    /// The SASL session outlived `connections.max.reauth.ms` without re-authenticating.
    SessionExpired(ApiKey),
}

impl std::fmt::Display for Close {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Close::NegativeLength(n) => write!(f, "negative frame length {n}"),
            Close::FrameTooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds socket.request.max.bytes {max}")
            }
            Close::DecodeTooLarge { key, len, charge, max } => write!(
                f,
                "a request of API key {key} and {len} bytes may take {charge} bytes once decoded, more than queued.max.request.bytes {max}"
            ),
            Close::Rejected(r) => write!(f, "{r}"),
            Close::Io(e) => write!(f, "i/o error: {e}"),
            Close::Idle { max } => write!(f, "idle for connections.max.idle.ms ({} ms)", max.as_millis()),
            Close::Unauthenticated(key) => write!(f, "{key:?} request before SASL authentication completed"),
            Close::Authentication(reason) => write!(f, "SASL authentication failed: {reason}"),
            Close::SessionExpired(key) => write!(
                f,
                "{key:?} request after the SASL session expired (connections.max.reauth.ms) without re-authentication"
            ),
        }
    }
}

/// A connection's place under `max.connections`. Dropping it gives the place back, so a
/// connection task that panics or is cancelled cannot leak it: the count only ever describes
/// live tasks.
#[derive(Debug)]
struct ConnectionSlot {
    open: Arc<AtomicUsize>,
}

impl ConnectionSlot {
    /// A slot when fewer than `max` are taken.
    fn acquire(open: &Arc<AtomicUsize>, max: usize) -> Option<ConnectionSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| ConnectionSlot { open: open.clone() })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts connections on every listener (each with the `Ctx` of its listener) until
/// `shutdown`. `max.connections` and `queued.max.request.bytes` count all listeners together,
/// as in Kafka.
pub async fn serve(listeners: Vec<Listening>, shutdown: CancellationToken, tracker: TaskTracker) {
    let open = Arc::new(AtomicUsize::new(0));
    let Some(Listening { ctx: first, .. }) = listeners.first() else {
        return;
    };
    // `queued.max.request.bytes`: one pool of request bytes for every connection.
    let request_memory = usize::try_from(first.config.queued_max_request_bytes)
        .ok()
        .map(|bytes| Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))));
    let accepting = TaskTracker::new();
    for listening in listeners {
        accepting.spawn(accept(
            listening,
            open.clone(),
            request_memory.clone(),
            shutdown.clone(),
            tracker.clone(),
        ));
    }
    accepting.close();
    accepting.wait().await;
}

/// One bound listener: its socket, the `Ctx` of its name, its TLS acceptor when it is an SSL
/// or SASL_SSL listener, its SASL settings when it is a SASL one.
pub struct Listening {
    pub listener: TcpListener,
    pub ctx: Arc<Ctx>,
    pub tls: Option<Arc<crate::tls::TlsListener>>,
    pub sasl: Option<Arc<ListenerSasl>>,
}

/// One listener's accept loop.
async fn accept(
    listening: Listening,
    open: Arc<AtomicUsize>,
    request_memory: Option<Arc<Semaphore>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
) {
    let Listening {
        listener,
        ctx,
        tls,
        sasl,
    } = listening;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and similar: keep serving the others.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Dynamic (KIP-226): read at each accept. Lowering it closes no open connection.
        let max_connections = ctx.config.live().max_connections;
        let Some(slot) = ConnectionSlot::acquire(&open, max_connections) else {
            tracing::warn!(%peer, max = max_connections, "max.connections reached; closing new connection");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let counted = ctx.metrics.connection_opened(&ctx.listener);
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let request_memory = request_memory.clone();
        let tls = tls.clone();
        let sasl = sasl.clone();
        tracker.spawn(async move {
            // Moved into the task: released when the task ends, even by a panic or an abort.
            let _slot = slot;
            let _counted = counted;
            let conn = Conn {
                peer,
                ctx,
                sasl,
                request_memory,
                shutdown,
            };
            let served = match tls {
                None => {
                    let (read_half, write_half) = stream.into_split();
                    connection(read_half, write_half, conn).await
                }
                // Boxed: the TLS stream's state stays out of every plaintext connection's task.
                Some(tls) => match Box::pin(tls_connection(tls, stream, conn)).await {
                    Some(served) => served,
                    None => return,
                },
            };
            match served {
                Ok(()) => {}
                Err(Close::Io(e)) if is_disconnect(&e) => {}
                // Routine (Kafka's Selector logs it at debug): clients keep idle connections.
                Err(idle @ Close::Idle { .. }) => tracing::debug!(%peer, reason = %idle, "closing connection"),
                // Kafka's authenticator logs these at INFO: a wrong password is the client's.
                Err(auth @ (Close::Authentication(_) | Close::Unauthenticated(_) | Close::SessionExpired(_))) => {
                    tracing::info!(%peer, reason = %auth, "closing connection")
                }
                // Kafka logs this at INFO too: the producer learns of it by the close.
                Err(refused @ Close::Rejected(Reject::RefusedWithoutAcks(_))) => {
                    tracing::info!(%peer, reason = %refused, "closing connection")
                }
                Err(other) => tracing::warn!(%peer, reason = %other, "closing connection"),
            }
        });
    }
}

fn is_disconnect(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted
    )
}

/// When a connection was last active (bytes read or written) and how many of its requests
/// are being answered, shared by its reader and writer: Kafka's `connections.max.idle.ms`
/// counts from the last read or write, and a request still being answered (a long-polling
/// Fetch, a JoinGroup waiting for its group) is not idleness. A response waiting for the peer
/// to read is: the writer gives up on it after the same time without progress.
#[derive(Debug)]
struct Activity {
    /// `connections.max.idle.ms`; None: never closed for idleness (Kafka's -1).
    idle_max: Option<Duration>,
    start: Instant,
    /// Milliseconds from `start` to the last activity.
    last_ms: AtomicU64,
    /// Requests read whose response (or non-response, for acks=0) is not yet computed.
    in_flight: AtomicUsize,
}

impl Activity {
    fn new(idle_max: Option<Duration>) -> Activity {
        Activity {
            idle_max,
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(elapsed, Ordering::AcqRel);
    }

    fn request_read(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// The writer has a request's response: the idle count restarts from here (touched first,
    /// so a reader that sees no request in flight also sees the new time).
    fn response_ready(&self) {
        self.touch();
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// `io` (a write), failing with `Close::Idle` when it makes no progress for the idle time.
    async fn watch<T>(&self, io: impl Future<Output = std::io::Result<T>>) -> Result<T, Close> {
        let done = match self.idle_max {
            None => io.await,
            Some(max) => tokio::time::timeout(max, io).await.map_err(|_| Close::Idle { max })?,
        };
        let done = done.map_err(Close::Io)?;
        self.touch();
        Ok(done)
    }

    /// When the connection becomes idle if nothing happens; None for never. With a request in
    /// flight, a full period from `now`: its response restarts the count anyway.
    fn deadline(&self, now: Instant) -> Option<Instant> {
        let max = self.idle_max?;
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return now.checked_add(max);
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        self.start.checked_add(last)?.checked_add(max)
    }
}

/// A connection of an SSL listener: the TLS handshake (bounded by `tls::HANDSHAKE_TIMEOUT`),
/// then `connection` over the TLS stream; None when the handshake failed or shutdown came
/// first (logged here).
async fn tls_connection(
    tls: Arc<crate::tls::TlsListener>,
    stream: tokio::net::TcpStream,
    mut conn: Conn,
) -> Option<Result<(), Close>> {
    let peer = conn.peer;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let handshake = tokio::select! {
        _ = conn.shutdown.cancelled() => return None,
        done = tokio::time::timeout(crate::tls::HANDSHAKE_TIMEOUT, tls.acceptor.accept(stream)) => done,
    };
    match handshake {
        Ok(Ok(stream)) => {
            // An SSL listener's principal: the client certificate's subject, mapped (Kafka's
            // DefaultKafkaPrincipalBuilder); none: User:ANONYMOUS.
            match tls.principal(stream.get_ref().1) {
                Ok(None) => {}
                Ok(Some(principal)) => {
                    conn.ctx = Arc::new(Ctx {
                        principal: Arc::from(principal.as_str()),
                        ..(*conn.ctx).clone()
                    })
                }
                Err(subject) => {
                    tracing::info!(%peer, ?subject, "no ssl.principal.mapping.rules rule applies to the client certificate; closing connection");
                    return None;
                }
            }
            let (read_half, write_half) = tokio::io::split(stream);
            Some(connection(quickack::QuickAck::new(read_half, fd), write_half, conn).await)
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed; closing connection");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "no TLS handshake within its time; closing connection");
            None
        }
    }
}

/// What a connection's task starts with besides its socket.
struct Conn {
    peer: SocketAddr,
    /// The listener's `Ctx`; replaced by one naming the principal once SASL authenticates.
    ctx: Arc<Ctx>,
    sasl: Option<Arc<ListenerSasl>>,
    request_memory: Option<Arc<Semaphore>>,
    shutdown: CancellationToken,
}

async fn connection<R, W>(read_half: R, write_half: W, conn: Conn) -> Result<(), Close>
where
    R: AsyncRead + Unpin + Send,
    W: ResponseSink,
{
    let Conn {
        peer,
        mut ctx,
        sasl,
        request_memory,
        shutdown,
    } = conn;
    // Ends the connection's share sessions when it ends, whatever way it ends.
    let share_sessions = ctx.share.connection();
    // The connection's own count of appends not yet run; ACLs name hosts by address.
    ctx = Arc::new(Ctx {
        appends: Default::default(),
        connection: share_sessions.id(),
        host: match ctx.authorizer.enabled() {
            true => Arc::from(crate::acl::host_of(peer.ip()).as_str()),
            false => ctx.host.clone(),
        },
        ..(*ctx).clone()
    });
    // A SASL listener's connection authenticates first; until then its frames are bounded by
    // sasl.server.max.receive.size.
    let mut auth = sasl.map(Authenticator::new);
    // Kafka's -1 (any negative value): never closed for idleness.
    let idle_max = u64::try_from(ctx.config.connections_max_idle_ms)
        .ok()
        .map(Duration::from_millis);
    let activity = Arc::new(Activity::new(idle_max));
    let mut frames = FrameReader {
        reader: BufReader::with_capacity(READ_BUFFER_BYTES, read_half),
        request_bytes_max: auth
            .as_ref()
            .map_or(ctx.config.socket_request_max_bytes, |a| a.settings().max_receive),
        activity: activity.clone(),
        memory: request_memory,
        memory_total: usize::try_from(ctx.config.queued_max_request_bytes).unwrap_or(0),
        held: None,
    };
    // Each reply travels with the request bytes it holds, released once it is written, and
    // with its times so far.
    let (tx, rx) = mpsc::channel::<Queued>(ctx.config.queued_max_requests);
    let writer = tokio::spawn(write_responses(rx, write_half, activity, Some(ctx.metrics.clone())));
    // Until when a client over its quota is not read (`quota`).
    let mut muted_until: Option<Instant> = None;
    let result = loop {
        if let Some(until) = muted_until.take() {
            tokio::select! {
                _ = shutdown.cancelled() => break Ok(()),
                _ = tx.closed() => break Ok(()),
                _ = tokio::time::sleep_until(until) => {}
            }
        }
        let frame = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            // The writer ended (the peer is gone, or not reading): its error is the reason.
            _ = tx.closed() => break Ok(()),
            frame = frames.read_frame() => frame,
        };
        let read_at = Instant::now();
        let mut body = match frame {
            Ok(Some(body)) => body,
            Ok(None) => break Ok(()),
            Err(close) => break Err(close),
        };
        // After a v0 SaslHandshake the tokens come bare, not as requests.
        if let Some(a) = auth.as_mut().filter(|a| a.expects_raw_token()) {
            frames.activity.request_read();
            let held = frames.held.take();
            let answer = api::sasl::raw_token(a, &ctx.controller.image(), &body);
            match sasl_answered(answer, held, &tx, &mut ctx, &mut frames).await {
                Ok(()) => continue,
                Err(close) => break close,
            }
        }
        let (key, header) = match api::parse_header(&mut body) {
            Ok(parsed) => parsed,
            Err(reject) => break Err(Close::Rejected(reject)),
        };
        tracing::trace!(%peer, ?key, version = header.request_api_version, "request");
        if let Some(a) = &auth {
            let sasl_request = matches!(key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate);
            if !a.authenticated() && !sasl_request && key != ApiKey::ApiVersions {
                break Err(Close::Unauthenticated(key));
            }
            if !sasl_request && a.expired(Instant::now()) {
                break Err(Close::SessionExpired(key));
            }
        }
        frames.activity.request_read();
        let held = frames.held.take();
        if let Some(a) = auth.as_mut()
            && matches!(key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
        {
            let answer = match api::sasl::handle(Some(a), &ctx.controller.image(), key, &header, body) {
                Ok(answer) => answer,
                Err(reject) => break Err(Close::Rejected(reject)),
            };
            match sasl_answered(answer, held, &tx, &mut ctx, &mut frames).await {
                Ok(()) => continue,
                Err(close) => break close,
            }
        }
        if key != ApiKey::Produce {
            // What this connection's Produce requests queued is written first.
            ctx.appends.idle().await;
        }
        let started = Instant::now();
        match api::dispatch(&ctx, key, header, body, peer).await {
            Ok(api::Dispatched { reply, throttle }) => {
                // KIP-219: the response goes out now, carrying the throttle time, and the
                // connection is not read until it has passed (a client that ignores it is
                // held back all the same).
                if !throttle.is_zero() {
                    muted_until = Some(started + throttle);
                }
                let timing = Timing {
                    key,
                    queue: started - read_at,
                    started,
                    handled: matches!(reply, Reply::Now(_)).then(Instant::now),
                };
                if tx.send((reply, held, Some(timing))).await.is_err() {
                    break Ok(()); // the writer failed: the peer is gone
                }
            }
            Err(reject) => break Err(Close::Rejected(reject)),
        }
    };
    // Let the writer answer everything already accepted, then close.
    drop(tx);
    match writer.await {
        Ok(Ok(())) => result,
        Ok(Err(close)) => result.and(Err(close)),
        Err(join) => result.and(Err(Close::Io(std::io::Error::other(join.to_string())))),
    }
}

/// Queues a SASL answer and does what follows it: a principal for later requests (and the
/// usual frame bound), or the close, the answer sent after the failure delay. `Err` holds the
/// loop's result when the connection ends.
async fn sasl_answered<R>(
    answer: api::sasl::Answer,
    held: Option<OwnedSemaphorePermit>,
    tx: &mpsc::Sender<Queued>,
    ctx: &mut Arc<Ctx>,
    frames: &mut FrameReader<R>,
) -> Result<(), Result<(), Close>> {
    use api::sasl::Then;
    let (reply, close) = match answer.then {
        Then::Continue => (Reply::Now(answer.frame), None),
        Then::Authenticated(principal) => {
            if *ctx.principal != *principal {
                *ctx = Arc::new(Ctx {
                    principal: Arc::from(principal.as_str()),
                    ..(**ctx).clone()
                });
            }
            frames.request_bytes_max = ctx.config.socket_request_max_bytes;
            (Reply::Now(answer.frame), None)
        }
        Then::Close { delay, reason } => {
            let frame = answer.frame;
            let reply = if delay.is_zero() {
                Reply::Now(frame)
            } else {
                // Kafka's delayed close: password guessing gets one answer per delay.
                Reply::Later(Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    frame
                }))
            };
            (reply, Some(Close::Authentication(reason)))
        }
    };
    if tx.send((reply, held, None)).await.is_err() {
        return Err(Ok(())); // the writer failed: the peer is gone
    }
    match close {
        None => Ok(()),
        Some(close) => Err(Err(close)),
    }
}

/// A reply on its way to the writer: the request bytes it holds, and its times (None for
/// SASL exchanges, which are not counted as requests).
type Queued = (Reply, Option<OwnedSemaphorePermit>, Option<Timing>);

/// A request's times as the reader knows them; the writer adds the rest and records them.
struct Timing {
    key: ApiKey,
    /// From the frame read whole to its dispatch.
    queue: Duration,
    started: Instant,
    /// When the response was ready; None while a `Reply::Later` is pending.
    handled: Option<Instant>,
}

/// Writes the responses in request order, flushing when no other is queued. Each write must
/// make progress within `connections.max.idle.ms`: a peer that stops reading is closed.
/// Requests' times are recorded in `metrics` once their responses are flushed.
async fn write_responses<W: ResponseSink>(
    mut rx: mpsc::Receiver<Queued>,
    out: W,
    activity: Arc<Activity>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
) -> Result<(), Close> {
    let mut out = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, out);
    // Written, not yet flushed: at most `queued.max.requests` of them (the channel's bound).
    let mut unflushed: Vec<(ApiKey, Duration, Duration, Instant)> = Vec::new();
    while let Some((reply, _request_bytes, timing)) = rx.recv().await {
        let frame = match reply {
            Reply::Now(frame) => frame,
            Reply::Later(mut pending) => match (&mut pending).now_or_never() {
                Some(frame) => frame,
                None => {
                    // This answer waits (acks=all until durable, a long-polling fetch): the
                    // ones already written go out first. A client that pipelines produces
                    // frees its in-flight window (5 requests for an idempotent producer) as
                    // each answer arrives, so holding them until this one is ready would
                    // shrink that window to the answers the flusher happens to batch.
                    activity.watch(out.flush()).await?;
                    record_times(metrics.as_deref(), &mut unflushed);
                    pending.await
                }
            },
            Reply::Spliced(spliced) => {
                write_spliced(&mut out, spliced, &activity).await?;
                None
            }
        };
        if let Some(t) = timing {
            let handled = t.handled.unwrap_or_else(Instant::now);
            unflushed.push((t.key, t.queue, handled - t.started, handled));
        }
        activity.response_ready();
        if let Some(bytes) = frame {
            write_watched(&mut out, &bytes, &activity).await?;
        }
        if rx.is_empty() {
            activity.watch(out.flush()).await?;
            record_times(metrics.as_deref(), &mut unflushed);
        }
    }
    activity.watch(out.flush()).await?;
    record_times(metrics.as_deref(), &mut unflushed);
    Ok(())
}

/// Writes `bytes` through the buffer: those of a large frame straight to the socket, as much
/// as it takes per write. Each write must make progress within the idle time, so a client that
/// reads a large response slowly is not taken for idle, and no write is cut to a fixed size (at
/// 256 KiB a 1 MiB Fetch answer took 4 `send`s or `sendfile`s, each waking the reader: 1.7x
/// the broker's CPU per GB read on loopback, either way).
async fn write_watched<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    bytes: &[u8],
    activity: &Activity,
) -> Result<(), Close> {
    let mut at = 0;
    while at < bytes.len() {
        match activity.watch(out.write(&bytes[at..])).await? {
            0 => return Err(Close::Io(std::io::ErrorKind::WriteZero.into())),
            n => at += n,
        }
    }
    Ok(())
}

/// Writes a response in pieces: its encoded bytes through the buffer, its records regions
/// with `sendfile` on a plaintext socket (the buffer flushed first), else read and written.
/// Each write or `sendfile` must make progress within the idle time. A region
/// whose segment was cut meanwhile (a follower's truncation) closes the connection: the bytes
/// sent may not be the ones located.
async fn write_spliced<W: ResponseSink>(
    out: &mut BufWriter<W>,
    spliced: api::spliced::Spliced,
    activity: &Activity,
) -> Result<(), Close> {
    use api::spliced::Piece;
    let cut = |region: &crate::log::FileRegion| {
        Close::Io(std::io::Error::other(format!(
            "{}: the segment was cut while its records were sent",
            region.failed(std::io::Error::other("truncated"))
        )))
    };
    for piece in spliced.pieces {
        match piece {
            Piece::Bytes(bytes) => write_watched(out, &bytes, activity).await?,
            Piece::File(region) => {
                if out.get_ref().socket().is_some() {
                    activity.watch(out.flush()).await?;
                    let mut at = 0;
                    while at < region.len() {
                        let socket = out.get_ref().socket().ok_or_else(|| cut(&region))?;
                        at += activity
                            .watch(sendfile::send_some(socket, &region, at, region.len() - at))
                            .await?;
                    }
                } else {
                    let bytes = region
                        .read()
                        .map_err(|e| Close::Io(std::io::Error::other(e.to_string())))?;
                    write_watched(out, &bytes, activity).await?;
                }
                if !region.unchanged() {
                    return Err(cut(&region));
                }
            }
        }
    }
    Ok(())
}

fn record_times(metrics: Option<&crate::metrics::Metrics>, unflushed: &mut Vec<(ApiKey, Duration, Duration, Instant)>) {
    let now = Instant::now();
    for (key, queue, local, handled) in unflushed.drain(..) {
        if let Some(m) = metrics {
            let send = now - handled;
            m.request_done(key, crate::metrics::RequestTimes { queue, local, send });
        }
    }
}

/// The read side of a connection: request frames, each body in a buffer of its own size
/// (filled without zeroing it first), every read bounded by the idle deadline.
struct FrameReader<R> {
    reader: R,
    /// `socket.request.max.bytes`.
    request_bytes_max: usize,
    activity: Arc<Activity>,
    /// `queued.max.request.bytes`, shared by all connections, and its size; None: no bound.
    memory: Option<Arc<Semaphore>>,
    memory_total: usize,
    /// The last frame's share of `memory`, for the caller to keep until it is answered.
    held: Option<OwnedSemaphorePermit>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads the next request frame; None on a clean end of stream between frames.
    async fn read_frame(&mut self) -> Result<Option<Bytes>, Close> {
        let mut prefix = [0u8; 4];
        let mut filled = 0;
        while filled < prefix.len() {
            let mut spare = &mut prefix[filled..];
            let limit = spare.len();
            match self.read_some(&mut spare, limit).await? {
                // An end of stream inside the prefix is still the peer leaving between frames.
                0 => return Ok(None),
                n => filled += n,
            }
        }
        // The length is the peer's claim: check it before allocating anything.
        let claimed = i32::from_be_bytes(prefix);
        let len = usize::try_from(claimed).map_err(|_| Close::NegativeLength(claimed))?;
        if len > self.request_bytes_max {
            return Err(Close::FrameTooLarge {
                len,
                max: self.request_bytes_max,
            });
        }
        // Reserved, not zeroed: the reads below write every byte before the body is used.
        let mut body = BytesMut::with_capacity(len);
        // The broker-wide budget first: with too many request bytes unanswered this connection
        // stops reading (back-pressure) until some are answered. Waiting is not idleness. What
        // a request is charged depends on its API (the key, the body's first two bytes, is read
        // first): its decoded form may be larger than its bytes. One charge per frame, taken
        // whole, so no connection waits for more while holding part of the pool (a Produce
        // request's second charge is below).
        self.held = None;
        if let Some(memory) = self.memory.clone() {
            while body.len() < len.min(2) {
                let want = len.min(2) - body.len();
                if self.read_some(&mut body, want).await? == 0 {
                    return Err(Close::Io(std::io::ErrorKind::UnexpectedEof.into()));
                }
            }
            let key = match body[..] {
                [a, b, ..] => i16::from_be_bytes([a, b]),
                _ => -1,
            };
            let charge = api::request_memory::charge(key, len);
            if charge > self.memory_total {
                return Err(Close::DecodeTooLarge {
                    key,
                    len,
                    charge,
                    max: self.memory_total,
                });
            }
            let permits = u32::try_from(charge).unwrap_or(u32::MAX);
            let permit = memory
                .acquire_many_owned(permits)
                .await
                .map_err(|_| Close::Io(std::io::Error::other("request memory pool closed")))?;
            self.activity.touch();
            self.held = Some(permit);
        }
        while body.len() < len {
            let want = len - body.len();
            if self.read_some(&mut body, want).await? == 0 {
                return Err(Close::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        if body.starts_with(&(ApiKey::Produce as i16).to_be_bytes()) {
            self.charge_produce(&body).await?;
        }
        Ok(Some(body.freeze()))
    }

    /// A Produce frame, read and charged its bytes, is charged what its partitions take
    /// decoded and answered (`api::request_memory::produce_extra`). Taken without waiting if
    /// the pool has it; if not, the first charge is given back and the whole taken at once, so
    /// that no connection waits while it holds part of the pool. Meanwhile this frame's bytes,
    /// at most `socket.request.max.bytes`, are held uncharged.
    async fn charge_produce(&mut self, body: &[u8]) -> Result<(), Close> {
        let (Some(memory), Some(held)) = (self.memory.clone(), self.held.as_mut()) else {
            return Ok(());
        };
        let extra = api::request_memory::produce_extra(body);
        if extra == 0 {
            return Ok(());
        }
        let charge = body.len().saturating_add(extra);
        if charge > self.memory_total {
            self.held = None;
            return Err(Close::DecodeTooLarge {
                key: ApiKey::Produce as i16,
                len: body.len(),
                charge,
                max: self.memory_total,
            });
        }
        let permits = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        if let Ok(more) = memory.clone().try_acquire_many_owned(permits(extra)) {
            held.merge(more);
            return Ok(());
        }
        self.held = None;
        let whole = memory
            .acquire_many_owned(permits(charge))
            .await
            .map_err(|_| Close::Io(std::io::Error::other("request memory pool closed")))?;
        self.activity.touch();
        self.held = Some(whole);
        Ok(())
    }

    /// One read of at most `limit` bytes into `buf` (0 at end of stream), or `Close::Idle` once
    /// the connection has been idle for `connections.max.idle.ms`.
    async fn read_some<B: BufMut>(&mut self, buf: &mut B, limit: usize) -> Result<usize, Close> {
        loop {
            // `take` bounds the read: a BytesMut would otherwise grow past the frame.
            let limit = u64::try_from(limit).unwrap_or(u64::MAX);
            let mut limited = (&mut self.reader).take(limit);
            let read = limited.read_buf(buf);
            let outcome = match self.activity.deadline(Instant::now()) {
                None => read.await,
                Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
                    Ok(outcome) => outcome,
                    Err(_elapsed) => {
                        // Dropping the read loses nothing (read_buf is cancel safe). The
                        // writer may have been active meanwhile, or a request be in flight.
                        let now = Instant::now();
                        match (self.activity.idle_max, self.activity.deadline(now)) {
                            (Some(max), Some(deadline)) if deadline <= now => return Err(Close::Idle { max }),
                            _ => continue,
                        }
                    }
                },
            };
            let n = outcome.map_err(Close::Io)?;
            if n > 0 {
                self.activity.touch();
            }
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn reader<R>(inner: R, idle_ms: Option<u64>) -> FrameReader<R> {
        FrameReader {
            reader: inner,
            request_bytes_max: 1024,
            activity: Arc::new(Activity::new(idle_ms.map(Duration::from_millis))),
            memory: None,
            memory_total: 0,
            held: None,
        }
    }

    #[tokio::test]
    async fn request_bytes_past_the_shared_budget_wait_until_earlier_ones_are_answered() {
        // queued.max.request.bytes = 100 shared by two connections: a's 80-byte request holds
        // its share until answered; b's 50-byte frame is not read until then.
        let memory = Arc::new(Semaphore::new(100));
        let (mut client_a, server_a) = tokio::io::duplex(256);
        let (mut client_b, server_b) = tokio::io::duplex(256);
        let mut a = reader(server_a, None);
        let mut b = reader(server_b, None);
        a.memory = Some(memory.clone());
        b.memory = Some(memory.clone());
        (a.memory_total, b.memory_total) = (100, 100);
        let frame = |n: usize| {
            let mut f = (n as u32).to_be_bytes().to_vec();
            f.resize(4 + n, 7);
            f
        };
        client_a.write_all(&frame(80)).await.unwrap();
        client_b.write_all(&frame(50)).await.unwrap();
        assert_eq!(a.read_frame().await.unwrap().unwrap().len(), 80);
        let held = a.held.take().expect("a holds its 80 bytes");
        assert_eq!(memory.available_permits(), 20);
        let waiting = tokio::spawn(async move { b.read_frame().await.map(|f| f.map(|f| f.len())) });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "b waits while a's request is unanswered");
        drop(held); // a's response written
        let got = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.unwrap(), Some(50));
    }

    /// A request other than Produce is charged what it may take once decoded: a Metadata
    /// request holds `DECODED_BYTES_PER_BYTE` times its size, and one that could never fit in
    /// the pool is refused before its body is read.
    #[tokio::test]
    async fn a_request_is_charged_its_decoded_size_and_refused_when_it_cannot_fit() {
        let per_byte = api::DECODED_BYTES_PER_BYTE;
        let memory = Arc::new(Semaphore::new(100 * per_byte));
        let (mut client, server) = tokio::io::duplex(4096);
        let mut frames = reader(server, None);
        frames.memory = Some(memory.clone());
        frames.memory_total = 100 * per_byte;
        let frame = |key: i16, n: usize| {
            let mut f = (n as u32).to_be_bytes().to_vec();
            f.extend_from_slice(&key.to_be_bytes());
            f.resize(4 + n, 0);
            f
        };
        // Metadata (key 3): 60 bytes hold 60 x per_byte of the pool until answered.
        client.write_all(&frame(3, 60)).await.unwrap();
        assert_eq!(frames.read_frame().await.unwrap().unwrap().len(), 60);
        assert_eq!(memory.available_permits(), 40 * per_byte);
        drop(frames.held.take());
        // Produce (key 0): its records stay slices of the frame, charged as they are.
        client.write_all(&frame(0, 60)).await.unwrap();
        assert_eq!(frames.read_frame().await.unwrap().unwrap().len(), 60);
        assert_eq!(memory.available_permits(), 100 * per_byte - 60);
        drop(frames.held.take());
        // 101 bytes of Metadata could take more than the whole pool.
        client.write_all(&frame(3, 101)).await.unwrap();
        let err = frames.read_frame().await.unwrap_err();
        assert!(matches!(err, Close::DecodeTooLarge { key: 3, len: 101, .. }), "{err}");
        assert_eq!(memory.available_permits(), 100 * per_byte);
    }

    /// A Produce frame is charged its bytes, then what its partitions take decoded. When the
    /// pool cannot give the second part, the reader gives back the first and waits for both.
    #[tokio::test]
    async fn a_produce_frame_is_charged_for_its_partitions_too() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{ProduceRequest, RequestHeader, TopicName};
        use kafka_protocol::protocol::{Encodable, StrBytes};
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(9)
            .encode(&mut body, 2)
            .unwrap();
        let partitions = (0..1000)
            .map(|i| PartitionProduceData::default().with_index(i))
            .collect();
        ProduceRequest::default()
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partition_data(partitions),
            ])
            .encode(&mut body, 9)
            .unwrap();
        let len = body.len();
        let extra = api::request_memory::produce_extra(&body);
        assert!(extra > 10 * len, "{extra} for {len} bytes");
        let mut frame = (len as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);

        let total = 4 * (len + extra);
        let memory = Arc::new(Semaphore::new(total));
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut frames = reader(server, None);
        frames.request_bytes_max = 1 << 20;
        frames.memory = Some(memory.clone());
        frames.memory_total = total;
        client.write_all(&frame).await.unwrap();
        assert_eq!(frames.read_frame().await.unwrap().unwrap().len(), len);
        assert_eq!(memory.available_permits(), total - len - extra);
        drop(frames.held.take());

        // Another request holds all but the frame's bytes: the first charge fits, the second
        // does not, and the reader waits holding nothing.
        let other = memory.clone().acquire_many_owned((total - len) as u32).await.unwrap();
        client.write_all(&frame).await.unwrap();
        let waiting = tokio::spawn(async move {
            let got = frames.read_frame().await.map(|f| f.map(|f| f.len()));
            (got, frames.held.take().map(|p| p.num_permits()))
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        // The first charge was given back, and is the waiter's again: tokio's semaphore hands
        // freed permits to its first waiter as they come.
        assert_eq!(memory.available_permits(), 0);
        drop(other);
        let (got, held) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.unwrap(), Some(len));
        assert_eq!(held, Some(len + extra));

        // A pool smaller than the whole charge refuses the frame.
        let memory = Arc::new(Semaphore::new(len + extra - 1));
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut frames = reader(server, None);
        frames.request_bytes_max = 1 << 20;
        frames.memory = Some(memory.clone());
        frames.memory_total = len + extra - 1;
        client.write_all(&frame).await.unwrap();
        let err = frames.read_frame().await.unwrap_err();
        assert!(matches!(err, Close::DecodeTooLarge { key: 0, .. }), "{err}");
        assert_eq!(memory.available_permits(), len + extra - 1);
    }

    #[tokio::test]
    async fn a_slot_is_released_when_its_task_panics_or_is_aborted() {
        let open = Arc::new(AtomicUsize::new(0));
        let panicking = ConnectionSlot::acquire(&open, 2).unwrap();
        let aborted = ConnectionSlot::acquire(&open, 2).unwrap();
        assert!(ConnectionSlot::acquire(&open, 2).is_none(), "max.connections 2 is full");

        let task = tokio::spawn(async move {
            let _slot = panicking;
            panic!("a connection task that panics");
        });
        assert!(task.await.unwrap_err().is_panic());
        let task = tokio::spawn(async move {
            let _slot = aborted;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());

        assert_eq!(open.load(Ordering::Acquire), 0);
        let again = [ConnectionSlot::acquire(&open, 2), ConnectionSlot::acquire(&open, 2)];
        assert!(again.iter().all(Option::is_some), "both slots are free again");
    }

    #[tokio::test]
    async fn frames_are_read_whole_from_pieces_and_pipelined_bytes() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut frames = reader(server, None);
        let writer = tokio::spawn(async move {
            // Two frames in one write, then a third in single bytes.
            client
                .write_all(&[0, 0, 0, 2, b'a', b'b', 0, 0, 0, 1, b'c'])
                .await
                .unwrap();
            for b in [0, 0, 0, 3, b'x', b'y', b'z'] {
                client.write_all(&[b]).await.unwrap();
            }
        });
        assert_eq!(frames.read_frame().await.unwrap().unwrap(), Bytes::from_static(b"ab"));
        assert_eq!(frames.read_frame().await.unwrap().unwrap(), Bytes::from_static(b"c"));
        assert_eq!(frames.read_frame().await.unwrap().unwrap(), Bytes::from_static(b"xyz"));
        writer.await.unwrap();
        assert!(frames.read_frame().await.unwrap().is_none(), "clean end between frames");
    }

    #[tokio::test]
    async fn a_frame_cut_short_or_claiming_too_much_closes() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(&[0, 0, 0, 9, 1, 2]).await.unwrap();
        drop(client);
        let err = reader(server, None).read_frame().await.unwrap_err();
        assert!(
            matches!(err, Close::Io(ref e) if e.kind() == std::io::ErrorKind::UnexpectedEof),
            "{err}"
        );

        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(&1025i32.to_be_bytes()).await.unwrap();
        let err = reader(server, None).read_frame().await.unwrap_err();
        assert!(matches!(err, Close::FrameTooLarge { len: 1025, max: 1024 }), "{err}");

        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(&(-1i32).to_be_bytes()).await.unwrap();
        let err = reader(server, None).read_frame().await.unwrap_err();
        assert!(matches!(err, Close::NegativeLength(-1)), "{err}");
    }

    // Real time, short periods: paused time needs tokio's `test-util` feature, not enabled in
    // this crate. Lower bounds are exact; upper bounds leave room for a loaded machine.
    const SLACK: Duration = Duration::from_secs(3);

    #[tokio::test]
    async fn a_large_response_read_slowly_is_idle_only_when_it_stops_moving() {
        // 512 KiB to a peer that takes 16 KiB every 40 ms (400 KB/s) through a 64 KiB pipe,
        // with an idle time of 200 ms: every write moves within it, the whole takes ~1.3 s.
        // (Written in fixed 256 KiB pieces, each had to pass within the idle time: 640 ms.)
        let (server, mut client) = tokio::io::duplex(64 << 10);
        let mut out = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, server);
        let activity = Activity::new(Some(Duration::from_millis(200)));
        let response: Vec<u8> = (0..512u32 << 10).map(|i| i as u8).collect();
        let slow = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 16 << 10];
            loop {
                tokio::time::sleep(Duration::from_millis(40)).await;
                match client.read(&mut chunk).await.unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&chunk[..n]),
                }
            }
        });
        write_watched(&mut out, &response, &activity).await.unwrap();
        out.flush().await.unwrap();
        drop(out);
        assert!(
            slow.await.unwrap() == response,
            "the response arrived whole and in order"
        );

        // A peer that stops reading: the write is idle after the idle time.
        let (server, _client) = tokio::io::duplex(64 << 10);
        let mut out = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, server);
        let start = Instant::now();
        let err = write_watched(&mut out, &response, &activity).await.unwrap_err();
        assert!(matches!(err, Close::Idle { .. }), "{err}");
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(start.elapsed() < Duration::from_millis(200) + SLACK);
    }

    #[tokio::test]
    async fn a_connection_silent_mid_frame_is_closed_after_the_idle_time() {
        // Kafka's connections.max.idle.ms: idleness counts from the last byte, wherever it
        // fell, so a peer that claimed a frame and went quiet cannot hold the connection.
        for sent in [&[0u8, 0][..], &[0, 0, 0, 9, 1][..]] {
            let (mut client, server) = tokio::io::duplex(64);
            let mut frames = reader(server, Some(200));
            client.write_all(sent).await.unwrap(); // half a length prefix, or a body begun
            let start = Instant::now();
            let err = frames.read_frame().await.unwrap_err();
            assert!(matches!(err, Close::Idle { .. }), "{err}");
            let waited = start.elapsed();
            assert!(
                waited >= Duration::from_millis(200) && waited < Duration::from_millis(200) + SLACK,
                "{waited:?}"
            );
        }
    }

    #[tokio::test]
    async fn bytes_keep_a_connection_open_and_a_request_in_flight_is_not_idleness() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut frames = reader(server, Some(1_000));
        let activity = frames.activity.clone();
        let writer = tokio::spawn(async move {
            // One byte every 300 ms: 1.8 s in all, never 1 s of silence.
            for b in [0, 0, 0, 2, b'o', b'k'] {
                tokio::time::sleep(Duration::from_millis(300)).await;
                client.write_all(&[b]).await.unwrap();
            }
            client
        });
        assert_eq!(frames.read_frame().await.unwrap().unwrap(), Bytes::from_static(b"ok"));
        let _client = writer.await.unwrap();

        // A request answered after longer than the idle time keeps the connection open, and
        // the idle time counts again from the answer.
        activity.request_read();
        let answered = tokio::spawn({
            let activity = activity.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                activity.response_ready();
            }
        });
        let start = Instant::now();
        let err = frames.read_frame().await.unwrap_err();
        assert!(matches!(err, Close::Idle { .. }), "{err}");
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(2_500) && waited < Duration::from_millis(2_500) + SLACK,
            "{waited:?}"
        );
        answered.await.unwrap();
    }

    #[tokio::test]
    async fn a_peer_that_does_not_read_its_responses_is_closed_after_the_idle_time() {
        let (client, server) = tokio::io::duplex(1024);
        let activity = Arc::new(Activity::new(Some(Duration::from_millis(200))));
        let (tx, rx) = mpsc::channel(4);
        let writer = tokio::spawn(write_responses(rx, server, activity.clone(), None));
        activity.request_read();
        tx.send((Reply::Now(Some(Bytes::from(vec![7u8; 1 << 20]))), None, None))
            .await
            .unwrap();
        let start = Instant::now();
        let err = writer.await.unwrap().unwrap_err();
        assert!(matches!(err, Close::Idle { .. }), "{err}");
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_millis(200) + SLACK,
            "{waited:?}"
        );
        assert!(tx.is_closed(), "the reader sees the writer gone");
        drop(client);
    }

    /// Pipelined acks=all produces: an answer already written goes out while the next one
    /// still waits for its fsync, so the client's in-flight window frees as early as it can.
    #[tokio::test]
    async fn an_answer_is_sent_while_the_next_one_still_waits() {
        let (mut client, server) = tokio::io::duplex(8 * 1024);
        let activity = Arc::new(Activity::new(Some(Duration::from_millis(30_000))));
        let (tx, rx) = mpsc::channel(4);
        let (durable, waiting) = tokio::sync::oneshot::channel::<()>();
        activity.request_read();
        tx.send((Reply::Now(Some(Bytes::from_static(b"first"))), None, None))
            .await
            .unwrap();
        activity.request_read();
        let later = Reply::Later(Box::pin(async move {
            waiting.await.ok();
            Some(Bytes::from_static(b"second"))
        }));
        tx.send((later, None, None)).await.unwrap();
        // Both are queued before the writer runs: it sees the second waiting behind the first.
        let writer = tokio::spawn(write_responses(rx, server, activity.clone(), None));
        let mut got = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got))
            .await
            .expect("the first answer was held back until the second was ready")
            .unwrap();
        assert_eq!(&got, b"first");
        durable.send(()).unwrap();
        drop(tx);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"second");
        writer.await.unwrap().unwrap();
    }

    /// A spliced Fetch response (records regions among encoded bytes) for `write_responses`,
    /// and the frame's bytes with the regions read.
    fn spliced_reply(dir: &tempfile::TempDir) -> (Reply, Vec<u8>) {
        use api::spliced::{self, Regions};
        let regions = spliced::tests::regions_of(dir);
        let mut held = Regions::default();
        let placeholders: Vec<Bytes> = regions.into_iter().map(|r| held.placeholder(r).ok().unwrap()).collect();
        let body = spliced::tests::response(&mut |i| Some(placeholders[i].clone()));
        let frame = spliced::frame(5, 17, &body, held).unwrap();
        let expected = frame.read_all().unwrap();
        (Reply::Spliced(frame), expected)
    }

    /// Through a stream without a socket (as TLS is) the regions are read and written.
    #[tokio::test]
    async fn a_spliced_response_is_written_whole_through_a_stream() {
        let dir = tempfile::TempDir::new().unwrap();
        let (reply, expected) = spliced_reply(&dir);
        let (mut client, server) = tokio::io::duplex(8 * 1024);
        let activity = Arc::new(Activity::new(Some(Duration::from_millis(5_000))));
        let (tx, rx) = mpsc::channel(4);
        let writer = tokio::spawn(write_responses(rx, server, activity.clone(), None));
        activity.request_read();
        tx.send((reply, None, None)).await.unwrap();
        tx.send((Reply::Now(Some(Bytes::from_static(b"next"))), None, None))
            .await
            .unwrap();
        drop(tx);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap().unwrap();
        assert_eq!(got.len(), expected.len() + 4);
        assert!(got[..expected.len()] == expected[..], "the frame differs");
        assert_eq!(&got[expected.len()..], b"next");
    }

    /// On a plaintext socket the regions go by sendfile, in order with the bytes around them.
    #[tokio::test]
    async fn a_spliced_response_is_sent_from_the_file_on_a_socket() {
        let dir = tempfile::TempDir::new().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (_read_half, write_half) = server.into_split();
        let activity = Arc::new(Activity::new(Some(Duration::from_millis(5_000))));
        let (tx, rx) = mpsc::channel(4);
        let writer = tokio::spawn(write_responses(rx, write_half, activity.clone(), None));
        activity.request_read();
        let mut expected = Vec::new();
        for _ in 0..3 {
            let (reply, bytes) = spliced_reply(&dir);
            expected.extend(bytes);
            tx.send((reply, None, None)).await.unwrap();
            tx.send((Reply::Now(Some(Bytes::from_static(b"between"))), None, None))
                .await
                .unwrap();
            expected.extend_from_slice(b"between");
        }
        drop(tx);
        writer.await.unwrap().unwrap();
        let mut got = vec![0; expected.len()];
        client.read_exact(&mut got).await.unwrap();
        assert!(got == expected, "the bytes differ");
    }

    #[tokio::test]
    async fn a_peer_reading_a_large_response_slowly_gets_all_of_it() {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let activity = Arc::new(Activity::new(Some(Duration::from_millis(1_000))));
        let (tx, rx) = mpsc::channel(4);
        let writer = tokio::spawn(write_responses(rx, server, activity.clone(), None));
        activity.request_read();
        let response = Bytes::from(vec![7u8; 2 * SOCKET_BUFFER_BYTES + 1]);
        tx.send((Reply::Now(Some(response.clone())), None, None)).await.unwrap();
        drop(tx);
        // 64 KiB every 100 ms: 1.3 s in all, longer than the idle time, never stalled that long.
        let mut received = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match client.read(&mut buf).await.unwrap() {
                0 => break,
                n => received.extend_from_slice(&buf[..n]),
            }
        }
        assert_eq!(received.len(), response.len());
        writer.await.unwrap().unwrap();
    }
}
