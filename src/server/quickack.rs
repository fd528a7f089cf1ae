//! TCP_QUICKACK on the sockets of TLS connections, after every read that returned bytes.
//!
//! librdkafka writes a request over TLS as several records, one `SSL_write` per buffer
//! slice, and leaves Nagle on by default (`socket.nagle.disable=false`): a short record is
//! held back until the previous one is acknowledged. Linux, seeing a request/response
//! exchange, delays its ACKs (up to 40 ms), so the client waits for the ACK while we wait for
//! the rest of the request. Asking for a quick ACK after each read sends a pending ACK at
//! once (Linux clears the flag again by itself, hence every read). Plaintext requests go out
//! in one `sendmsg` and do not meet this.

use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// `inner`, a stream read from the socket `fd`, with a quick ACK asked for after each read.
pub(super) struct QuickAck<R> {
    inner: R,
    fd: RawFd,
}

impl<R> QuickAck<R> {
    /// `fd` must stay open as long as `inner` is read: the socket `inner` reads from.
    pub(super) fn new(inner: R, fd: RawFd) -> Self {
        QuickAck { inner, fd }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for QuickAck<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            quick_ack(self.fd);
        }
        polled
    }
}

/// Best effort: a failure (a socket already shut down) changes nothing for the connection.
fn quick_ack(fd: RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: `fd` is the connection's socket, owned by the stream being read (see `new`);
    // setsockopt reads `size_of::<c_int>()` bytes from a live local.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
