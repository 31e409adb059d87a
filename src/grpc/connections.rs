//! At most `--max-connections` client connections are served at once: at the
//! limit the listener stops accepting, and new connections wait in the kernel's
//! backlog until one closes. Each connection holds its HTTP/2 state and what its
//! window lets a client send ahead of the service's reading, so their number
//! bounds what connections hold.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

/// Bytes a client may send on one connection, and on one call, before the
/// service reads them (HTTP/2's flow-control windows; hyper's own default is
/// 1 MiB each). A call waiting for room in the memory budget leaves its
/// request unread here.
pub const CONNECTION_WINDOW: u32 = 128 * 1024;
pub const STREAM_WINDOW: u32 = 64 * 1024;

/// The connections `incoming` accepts, at most `max` open at once.
pub fn capped(
    incoming: TcpIncoming,
    max: usize,
) -> impl Stream<Item = io::Result<Connection>> + Send + 'static {
    let open = Arc::new(Semaphore::new(max));
    futures::stream::unfold((incoming, open), |(mut incoming, open)| async move {
        // Never closed: a place always comes.
        let place = open.clone().acquire_owned().await.ok()?;
        let accepted = incoming.next().await?;
        let connection = accepted.map(|stream| Connection {
            stream,
            _place: place,
        });
        Some((connection, (incoming, open)))
    })
}

/// A client connection, holding its place until it closes.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
