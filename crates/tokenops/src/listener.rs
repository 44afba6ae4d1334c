//! The HTTP listener's guards against clients that hold connections without using them: at most
//! `max_connections` open at once (more wait in the kernel's backlog, so idle sockets cannot
//! use up the process's file descriptors, which the store needs too), and a connection whose
//! client sends nothing, or takes nothing of the response, for `idle` is closed.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

pub struct GuardedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    idle: Duration,
}

impl GuardedListener {
    pub fn new(inner: TcpListener, max_connections: usize, idle: Duration) -> Self {
        Self { inner, slots: Arc::new(Semaphore::new(max_connections)), idle }
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // Only a closed semaphore fails, and this one is never closed; waiting for a slot
        // before accepting is the bound.
        let slot = self.slots.clone().acquire_owned().await.ok();
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let deadline = Box::pin(tokio::time::sleep(self.idle));
        (GuardedStream { stream, _slot: slot, idle: self.idle, deadline }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// An accepted connection: it holds its slot until dropped, and a read or write that waits past
/// the idle deadline fails (`TimedOut`), which ends the connection.
pub struct GuardedStream {
    stream: TcpStream,
    _slot: Option<OwnedSemaphorePermit>,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl GuardedStream {
    /// Progress moves the deadline; waiting past it is the end.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.deadline.as_mut().reset(Instant::now() + self.idle);
                Poll::Ready(result)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent or took nothing for the idle limit",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.watch(cx, polled)
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
