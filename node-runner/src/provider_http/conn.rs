//! One connection to a provider: the transport, its receive buffer, and the
//! cancel-safety flag.
//!
//! The transport is an enum so HTTPS slots in as a second variant
//! (`Tls(monoio_rustls::ClientTlsStream<TcpStream>)`) with the same
//! `read`/`write` calls; nothing above this module knows which it is.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;

use super::error::ProviderError;
use super::request::BaseUrl;

/// Bytes reserved in the receive buffer before each read.
pub(crate) const READ_RESERVE: usize = 16 * 1024;

/// The byte stream under HTTP.
#[derive(Debug)]
enum Transport {
    /// Plain TCP (`http://`).
    Plain(TcpStream),
}

/// A connection and what has been read from it but not yet handed out.
#[derive(Debug)]
pub(crate) struct Connection {
    io: Transport,
    /// Received bytes not yet parsed or handed out.
    pub(crate) buf: BytesMut,
    /// True when this connection served a response before (came from the
    /// pool): only then is an early EOF a stale-connection symptom.
    pub(crate) reused: bool,
    /// True while a read or write is in flight. If the future doing it is
    /// dropped, it stays true: the buffer went with the operation and the
    /// framing position is lost, so the connection must never be reused.
    busy: bool,
    /// Addresses of the bytes the last read put in `buf` (for the
    /// zero-copy tests: a body chunk must point into such a range).
    pub(crate) last_read: Range<usize>,
}

impl Connection {
    /// Resolves the base's host (a literal IP needs no lookup) and connects
    /// within `timeout`.
    pub(crate) async fn connect(base: &BaseUrl, timeout: Duration) -> Result<Self, ProviderError> {
        let addr = resolve(base).map_err(|e| ProviderError::connect(&e))?;
        let stream = match monoio::time::timeout(timeout, TcpStream::connect_addr(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(ProviderError::connect(&error)),
            Err(_) => {
                return Err(ProviderError::ConnectTimeout {
                    after_ms: timeout.as_millis() as u64,
                });
            }
        };
        let _ = stream.set_nodelay(true);
        Ok(Self {
            io: Transport::Plain(stream),
            buf: BytesMut::with_capacity(READ_RESERVE),
            reused: false,
            busy: false,
            last_read: 0..0,
        })
    }

    /// Whether the connection is in a known framing position (no operation
    /// was abandoned half-way).
    pub(crate) fn is_clean(&self) -> bool {
        !self.busy
    }

    /// Writes `head` then `body` (skipped when empty), each in full.
    pub(crate) async fn write(&mut self, head: Bytes, body: Bytes) -> io::Result<()> {
        self.busy = true;
        let Transport::Plain(stream) = &mut self.io;
        let (result, _) = stream.write_all(head).await;
        result?;
        if !body.is_empty() {
            let (result, _) = stream.write_all(body).await;
            result?;
        }
        self.busy = false;
        Ok(())
    }

    /// Reads once into the spare capacity of `buf`; `Ok(0)` is EOF.
    pub(crate) async fn read_more(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_RESERVE / 4 {
            self.buf.reserve(READ_RESERVE);
        }
        self.busy = true;
        let buf = std::mem::take(&mut self.buf);
        let start = buf.as_ptr() as usize + buf.len();
        let Transport::Plain(stream) = &mut self.io;
        let (result, buf) = stream.read(buf).await;
        self.buf = buf;
        self.busy = false;
        let n = result?;
        self.last_read = start..start + n;
        Ok(n)
    }
}

fn resolve(base: &BaseUrl) -> io::Result<SocketAddr> {
    let host = base.connect_host();
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, base.port()));
    }
    // Blocking lookup via the system resolver: see "Not done" in the module
    // docs.
    (host, base.port())
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "host has no address"))
}
