//! Listeners and connections: length-prefixed frames in, responses out in request order.
//!
//! Each connection has a reader (frames → dispatch, in order) and a writer (answers, in the
//! same order) joined by a bounded channel of `queued.max.requests` entries: a client that
//! pipelines more than that, or does not read its answers, stops being read (back-pressure).
//! Broken framing (oversized or negative length, an unknown API key, an unsupported version, a
//! body that does not parse) closes the connection with one log line, as Kafka does.

// Input from the network or disk becomes an `Error`, never a panic.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, Ctx, Reject, Reply};

/// Socket buffer sizes for reads and writes; big enough for a produce batch in one syscall.
const SOCKET_BUFFER_BYTES: usize = 256 * 1024;

/// Why a connection was closed by the broker.
#[derive(Debug)]
enum Close {
    NegativeLength(i32),
    FrameTooLarge { len: usize, max: usize },
    Rejected(Reject),
    Io(std::io::Error),
}

impl std::fmt::Display for Close {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Close::NegativeLength(n) => write!(f, "negative frame length {n}"),
            Close::FrameTooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds socket.request.max.bytes {max}")
            }
            Close::Rejected(r) => write!(f, "{r}"),
            Close::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

/// Accepts connections until `shutdown`, then waits for them to finish.
pub async fn serve(listener: TcpListener, ctx: Arc<Ctx>, shutdown: CancellationToken, tracker: TaskTracker) {
    let open = Arc::new(AtomicUsize::new(0));
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
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if open.load(Ordering::Acquire) >= ctx.config.max_connections {
            tracing::warn!(%peer, max = ctx.config.max_connections, "max.connections reached; closing new connection");
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        open.fetch_add(1, Ordering::AcqRel);
        let ctx = ctx.clone();
        let shutdown = shutdown.clone();
        let open = open.clone();
        tracker.spawn(async move {
            if let Err(close) = connection(stream, peer, ctx, shutdown).await {
                match close {
                    Close::Io(e) if is_disconnect(&e) => {}
                    other => tracing::warn!(%peer, reason = %other, "closing connection"),
                }
            }
            open.fetch_sub(1, Ordering::AcqRel);
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

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
) -> Result<(), Close> {
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(SOCKET_BUFFER_BYTES, read_half);
    let (tx, mut rx) = mpsc::channel::<Reply>(ctx.config.queued_max_requests);
    let writer = tokio::spawn(async move {
        let mut out = BufWriter::with_capacity(SOCKET_BUFFER_BYTES, write_half);
        while let Some(reply) = rx.recv().await {
            let frame = match reply {
                Reply::Now(frame) => frame,
                Reply::Later(pending) => pending.await,
            };
            if let Some(bytes) = frame {
                out.write_all(&bytes).await?;
            }
            if rx.is_empty() {
                out.flush().await?;
            }
        }
        out.flush().await?;
        Ok::<(), std::io::Error>(())
    });
    let max = ctx.config.socket_request_max_bytes;
    let result = loop {
        let frame = tokio::select! {
            _ = shutdown.cancelled() => break Ok(()),
            frame = read_frame(&mut reader, max) => frame,
        };
        let mut body = match frame {
            Ok(Some(body)) => body,
            Ok(None) => break Ok(()),
            Err(close) => break Err(close),
        };
        let (key, header) = match api::parse_header(&mut body) {
            Ok(parsed) => parsed,
            Err(reject) => break Err(Close::Rejected(reject)),
        };
        tracing::trace!(%peer, ?key, version = header.request_api_version, "request");
        match api::dispatch(&ctx, key, header, body, peer).await {
            Ok(reply) => {
                if tx.send(reply).await.is_err() {
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
        Ok(Err(e)) => result.and(Err(Close::Io(e))),
        Err(join) => result.and(Err(Close::Io(std::io::Error::other(join.to_string())))),
    }
}

/// Reads the next request frame; None on a clean end of stream between frames.
async fn read_frame<R: AsyncReadExt + Unpin>(reader: &mut R, max: usize) -> Result<Option<Bytes>, Close> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Close::Io(e)),
    }
    // The length is the peer's claim: check it before allocating anything.
    let claimed = i32::from_be_bytes(prefix);
    let len = usize::try_from(claimed).map_err(|_| Close::NegativeLength(claimed))?;
    if len > max {
        return Err(Close::FrameTooLarge { len, max });
    }
    let mut body = BytesMut::zeroed(len);
    reader.read_exact(&mut body).await.map_err(Close::Io)?;
    Ok(Some(body.freeze()))
}
