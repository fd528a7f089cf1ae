//! Sending a log file's bytes to a plaintext TCP socket with `sendfile(2)` (the records of a
//! spliced Fetch response, `api::spliced`): the kernel passes page-cache pages to the socket
//! without copying them through the broker.

use std::io::{self, ErrorKind};
use std::os::fd::AsRawFd;

use tokio::io::{AsyncWrite, DuplexStream, Interest, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;

use crate::log::FileRegion;

/// The write side of a connection, and the plaintext socket under it if any.
pub(super) trait ResponseSink: AsyncWrite + Unpin + Send + 'static {
    /// The socket `sendfile` can write to; None when bytes must go through the stream (TLS).
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl ResponseSink for OwnedWriteHalf {
    fn socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

/// A TLS stream's write side: its bytes are encrypted by the stream.
impl<T: AsyncWrite + Send + 'static> ResponseSink for WriteHalf<T> {}

impl ResponseSink for DuplexStream {}

/// Sends what the socket takes of the `len` bytes of `region` from `at` bytes into it, in one
/// `sendfile` once the socket is writable: how many bytes went (at least one).
pub(super) async fn send_some(socket: &TcpStream, region: &FileRegion, at: usize, len: usize) -> io::Result<usize> {
    let (file, start) = region.file();
    let mut offset = libc::off_t::try_from(start + at as u64).map_err(|_| io::Error::other("region past off_t"))?;
    loop {
        socket.writable().await?;
        let sent = socket.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the call (the socket and the file are
            // borrowed), and `offset` is a valid off_t the kernel advances.
            let n = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut offset, len) };
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
        match sent {
            Ok(0) if len > 0 => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the log file ended inside the region being sent",
                ));
            }
            Ok(n) => return Ok(n.min(len)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
