//! When a client cut a stream: the instant the mock's socket saw its peer
//! go, for cancellation-latency measurements.
//!
//! Every connection's socket is wrapped in a [`WatchedIo`] that stamps a
//! [`ConnWatch`] the first time the socket reports the peer gone: a read
//! that returns 0 bytes (FIN), or a read or write that fails (`ECONNRESET`,
//! `EPIPE`). hyper's HTTP/1 server keeps reading while it writes a
//! response (it looks for an EOF mid-message), so a peer's close is seen
//! the moment the kernel delivers it, not at the next token write.
//!
//! A streaming body holds its connection's watch; when a stream is dropped
//! unfinished (counted as `streams_client_gone`) it reports a [`StreamCut`]
//! to whoever called [`Stats::watch_cuts`](super::Stats::watch_cuts).
//!
//! ```no_run
//! # fn demo(mock: &perf::mock_provider::MockThreads) {
//! let cuts = mock.stats().watch_cuts();
//! // … a client opens a stream and closes its socket at `t0` …
//! # let t0 = std::time::Instant::now();
//! let cut = cuts.recv().unwrap();
//! let latency = cut.closed_at.unwrap_or(cut.dropped_at) - t0;
//! # let _ = latency; }
//! ```

use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A streaming response dropped before its end (the client went away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCut {
    /// When the connection's socket first reported its peer gone (a read
    /// of 0 bytes, or a failed read or write); `None` when the stream was
    /// dropped without the socket saying so (e.g. the mock shut down).
    pub closed_at: Option<Instant>,
    /// When the mock dropped the unfinished stream.
    pub dropped_at: Instant,
    /// Tokens the stream had sent before the cut.
    pub tokens_sent: u64,
}

/// One connection's record of its peer leaving (shared by the socket
/// wrapper and the streams served on it).
#[derive(Debug, Default)]
pub(crate) struct ConnWatch {
    peer_gone_at: OnceLock<Instant>,
}

impl ConnWatch {
    /// When the socket first reported the peer gone, if it did.
    pub(crate) fn peer_gone_at(&self) -> Option<Instant> {
        self.peer_gone_at.get().copied()
    }

    fn mark(&self) {
        // The first report wins; later ones are the same close.
        let _ = self.peer_gone_at.set(Instant::now());
    }
}

/// A socket that stamps its [`ConnWatch`] when the peer goes; otherwise
/// it forwards every call (vectored writes included) untouched.
#[derive(Debug)]
pub(crate) struct WatchedIo<T> {
    io: T,
    watch: Arc<ConnWatch>,
}

impl<T> WatchedIo<T> {
    /// Wraps `io`; its closes are recorded in `watch`.
    pub(crate) fn new(io: T, watch: Arc<ConnWatch>) -> Self {
        Self { io, watch }
    }

    fn seen<R>(&self, result: &Poll<io::Result<R>>) {
        if let Poll::Ready(Err(_)) = result {
            self.watch.mark();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let room = buf.remaining();
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && room > 0 && buf.filled().len() == before {
            self.watch.mark();
        }
        self.seen(&result);
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.seen(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.seen(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.io).poll_flush(cx);
        self.seen(&result);
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn a_read_of_zero_bytes_stamps_the_watch_once() {
        let (client, server) = tokio::io::duplex(64);
        let watch = Arc::new(ConnWatch::default());
        let mut io = WatchedIo::new(server, watch.clone());
        let mut client = client;
        client.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(io.read(&mut buf).await.unwrap(), 2);
        assert_eq!(watch.peer_gone_at(), None, "data is not a close");
        let before = Instant::now();
        drop(client);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        let first = watch.peer_gone_at().expect("EOF stamped");
        assert!(first >= before);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        assert_eq!(watch.peer_gone_at(), Some(first), "the first close wins");
    }

    #[tokio::test]
    async fn a_failed_write_stamps_the_watch() {
        let (client, server) = tokio::io::duplex(64);
        let watch = Arc::new(ConnWatch::default());
        let mut io = WatchedIo::new(server, watch.clone());
        drop(client);
        assert!(io.write_all(b"token").await.is_err(), "broken pipe");
        assert!(watch.peer_gone_at().is_some());
    }

    /// Over loopback: a client that closes mid-stream, while the mock waits
    /// minutes for its next token, is seen at once — from the read side.
    #[tokio::test]
    async fn a_client_close_mid_stream_is_seen_before_the_next_token() {
        use crate::mock_provider::{MockConfig, bind};
        let server = bind("127.0.0.1:0".parse().unwrap(), MockConfig::default())
            .await
            .unwrap();
        let cuts = server.stats().watch_cuts();
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nx-mock-tokens: 5\r\n\
             x-mock-delay-ms: 600000\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut client = tokio::net::TcpStream::connect(server.local_addr())
            .await
            .unwrap();
        client.write_all(request.as_bytes()).await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(6).any(|w| w == b"data: ") {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream ended before its first event");
            seen.extend_from_slice(&buf[..n]);
        }
        let closed = Instant::now();
        drop(client);
        let cut = tokio::task::spawn_blocking(move || {
            cuts.recv_timeout(std::time::Duration::from_secs(10))
        })
        .await
        .unwrap()
        .expect("the cut is reported long before the next token");
        let seen_at = cut.closed_at.expect("the socket saw the close");
        assert!(seen_at >= closed && cut.dropped_at >= seen_at);
        assert_eq!(cut.tokens_sent, 0, "only the role chunk went out");
        server.shutdown().await;
    }

    #[tokio::test]
    async fn an_empty_read_buffer_is_not_a_close() {
        let (_client, server) = tokio::io::duplex(64);
        let watch = Arc::new(ConnWatch::default());
        let mut io = WatchedIo::new(server, watch.clone());
        let mut empty = [0u8; 0];
        assert_eq!(io.read(&mut empty).await.unwrap(), 0);
        assert_eq!(watch.peer_gone_at(), None);
    }
}
