//! The Node's HTTP/1.1 client to model servers, on the Node's monoio cores.
//!
//! Built from `framing`'s sans-IO codecs: [`write_request_head`] writes the
//! request head, [`parse_response_head`] parses the response head,
//! [`BodyDecoder`] removes the chunked coding. `reqwest` is for tests only;
//! this client is the data path.
//!
//! # Contract
//! - One [`ProviderClient`] per core (`!Send`; clones share the core's
//!   pool). [`ProviderClient::request`] sends one [`ProviderRequest`] and
//!   returns the final head as a [`ProviderResponse`] (interim 1xx heads are
//!   skipped); the body follows through [`ProviderResponse::next_chunk`].
//! - The request head carries `Host`, `Content-Length` (for any non-empty
//!   body and for methods that carry one) and `Connection: keep-alive`;
//!   caller fields with framing or hop-by-hop names are dropped. A body up
//!   to [`INLINE_BODY_MAX`] is copied behind the head and goes out in one
//!   write; a larger one is written after the head as is, never copied.
//! - Errors are typed ([`ProviderError`]) with a [`Side`] and
//!   [`ProviderError::is_retryable_before_send`] for failover.
//!
//! # HTTPS
//! - `https://` base URLs (port 443 by default) are served over rustls
//!   (`ring` provider), driven sans-IO on the same core as the link's TLS
//!   (`crate::tls_io`): a busy stream's socket reads take as much
//!   ciphertext as the plaintext they have room for. SNI and the
//!   certificate check use the URL's host (an IP literal is checked
//!   against the certificate's IP addresses); ALPN offers `http/1.1`.
//! - Trust comes from [`ProviderClientConfig::tls`]: by default the
//!   `webpki-roots` (Mozilla) roots; [`tls_client_config`] adds a PEM CA
//!   bundle for a private provider CA (`iop-node --provider-ca-file`, read
//!   once at start-up: a bad file stops the start with
//!   [`TlsConfigError`]). Each [`ProviderClient`] gets its own TLS
//!   session-resumption cache, so cores share no lock.
//! - The connect timeout covers the TCP connect and the handshake. A
//!   failed handshake is [`ProviderError::Tls`] (host, [`TlsFailure`],
//!   rustls' message; [`Side::Provider`], retryable before send). TLS
//!   errors after the handshake (a bad record, an alert) are
//!   [`ProviderError::Io`].
//! - A `close_notify`, and a TCP close without one, read as EOF: the body
//!   framing decides whether the body was complete, as with plain TCP.
//! - Zero copy ends at rustls: it decrypts into its own buffer and the
//!   plaintext is copied once into the receive buffer; from there chunks
//!   are slices as below.
//!
//! # Zero copy
//! Each read lands in the connection's receive buffer (`BytesMut`);
//! [`BodyDecoder`] splits body data off its front and freezes it, so every
//! chunk [`ProviderResponse::next_chunk`] returns is a refcounted slice of
//! the bytes the kernel wrote, ready to be a `ProviderTunnelFrame.body`.
//! A chunk is handed out the moment its bytes are read: nothing is
//! accumulated, so an SSE token leaves as soon as it arrives.
//!
//! The socket's own receive buffer is the kernel's to size (autotuning)
//! unless [`ProviderClientConfig::receive_buffer`] sets it: the caller reads
//! as its credit allows, so a provider faster than the client fills it.
//!
//! # Keep-alive pool (per core, per scheme, host and port)
//! - After the body's end, the connection is parked if the response allows
//!   keep-alive (`ResponseHead::keep_alive`: no `Connection: close`, not
//!   HTTP/1.0 without keep-alive, not close-delimited), no byte follows the
//!   body, and no read or write was abandoned half-way. Otherwise it is
//!   closed.
//! - At most [`PoolConfig::max_idle_per_host`] idle connections per origin
//!   (the oldest is dropped); one idle for [`PoolConfig::idle_timeout_ms`]
//!   is closed instead of reused. Idle times come from the client's
//!   [`ClockSource`] read by the driver; the [`pool`] logic itself takes
//!   `now_ms` as an input and reads no clock.
//! - **Stale connections, the one retry.** A server may close a keep-alive
//!   connection while it sits idle (RFC 9112 §9.3.1); our next request then
//!   races that close. On a *reused* connection, if the write fails, or the
//!   read ends (EOF or reset) before any response byte arrived, the request
//!   is sent once more on a fresh connection, whatever its method. The rule
//!   leans on RFC 9112 §9.6: a server closes only at a message boundary,
//!   without acting on a request it did not answer, so an idle close never
//!   means "processed". Nothing else is retried: not a fresh connection's
//!   failure, not an error after the first response byte, not a timeout,
//!   and never a second time.
//!
//! # Cancellation
//! Dropping a [`ProviderResponse`] before its body ended closes the
//! connection (it never goes back to the pool), so the provider sees the
//! client leave and can stop generating. Dropping the future of
//! [`ProviderClient::request`] or [`ProviderResponse::next_chunk`] mid-way
//! is safe: an abandoned read or write marks the connection unusable.
//!
//! # Timeouts
//! The connect ([`ProviderClientConfig::connect_timeout_ms`]) uses
//! `monoio::time::timeout`. Waits for the provider are not bounded here by
//! default: a run's or tunnel's stall watchdog (F21) runs from admission
//! with the provider's `response_stall_timeout_ms`, so it bounds a head
//! that never comes as it bounds a body's silences, and every other caller
//! (the health probe, the Node's Ollama commands) bounds its call itself.
//! A head bound of the client's own
//! ([`ProviderClientConfig::head_timeout_ms`], from the request's write
//! until the final head is parsed) is for a caller with neither.
//!
//! # Not done yet
//! - **TLS**: no client certificates (mTLS), no certificate pinning, no
//!   revocation checks (CRLs/OCSP); `close_notify` is not sent when a
//!   connection is closed (the TCP close is).
//! - **DNS**: a host that is not an IP literal is resolved with the blocking
//!   system resolver on the core; an async, cached resolver comes later.
//! - No request-body streaming, no `Expect: 100-continue`, no pipelining,
//!   no per-core timer-wheel integration for timeouts.

// `deny`, not `forbid`: the one exception is the zero-timeout poll(2) that
// tells an idle connection from a busy one (`conn::readable_now`, with its
// SAFETY note and test).
#![deny(unsafe_code)]

#[cfg(test)]
mod buffer_tests;
mod conn;
mod error;
pub mod pool;
mod request;
mod response;
#[cfg(test)]
pub(crate) mod tests;
mod tls;
mod tls_stream;
#[cfg(test)]
mod tls_tests;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use framing::http::HeadLimits;
use framing::timer::{ClockSource, DriverClock};

pub use error::{ProviderError, Side, TlsFailure};
pub use pool::{PoolConfig, PoolKey};
pub use request::{BaseUrl, BaseUrlError, INLINE_BODY_MAX, ProviderRequest, RequestBody, Scheme};
pub use response::ProviderResponse;
pub use tls::{TlsConfigError, default_tls_client_config, tls_client_config};

use conn::Connection;
use pool::Pool;
use response::{HeadFailure, read_head};

#[cfg(doc)]
use framing::http::{BodyDecoder, parse_response_head, write_request_head};

/// Default [`ProviderClientConfig::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Settings of one core's client.
#[derive(Clone, Debug)]
pub struct ProviderClientConfig {
    /// Longest a TCP connect (plus, for `https`, the TLS handshake) may
    /// take, in ms.
    pub connect_timeout_ms: u64,
    /// Longest from sending the request to a parsed final head, in ms;
    /// `None` (the default): no bound of the client's own. Runs and
    /// tunnels leave it unset: their stall watchdog bounds the wait with
    /// the provider's own stall timeout (a non-streaming completion sends
    /// its head only when generation is done, which may take longer than
    /// any one bound fixed here), and a second timer would only race it.
    pub head_timeout_ms: Option<u64>,
    /// Keep-alive pool bounds.
    pub pool: PoolConfig,
    /// Bounds on a response head.
    pub head_limits: HeadLimits,
    /// The clock the pool's idle times are read from.
    pub clock: ClockSource,
    /// rustls settings for `https` providers: trust roots and ALPN. Build
    /// it with [`tls_client_config`] (the default is
    /// [`default_tls_client_config`]: `webpki-roots` only). Each client
    /// replaces its session-resumption store with a fresh in-memory one of
    /// its own.
    pub tls: Arc<rustls::ClientConfig>,
    /// `SO_RCVBUF` of each provider connection, in bytes; `None` (the
    /// default): the kernel sizes it and grows it as the reads keep up
    /// (receive autotuning). Setting it turns the autotuning off for the
    /// connection, and the kernel caps it at `net.core.rmem_max` (and
    /// doubles what it keeps, for its own bookkeeping). See
    /// `docs/operations.md`, "Sizing: a provider faster than its clients".
    pub receive_buffer: Option<u32>,
}

impl Default for ProviderClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            head_timeout_ms: None,
            pool: PoolConfig::default(),
            head_limits: HeadLimits::default(),
            clock: ClockSource::default(),
            tls: default_tls_client_config(),
            receive_buffer: None,
        }
    }
}

/// TLS sessions remembered per client for resumption.
const TLS_SESSIONS_PER_CLIENT: usize = 64;

/// Counters of one client, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Connections opened (TCP, and for `https` the TLS handshake done).
    pub connects: u64,
    /// Requests sent on a pooled connection.
    pub reuses: u64,
    /// Requests sent again after a stale pooled connection.
    pub stale_retries: u64,
}

#[derive(Debug)]
pub(crate) struct Inner {
    config: ProviderClientConfig,
    pool: RefCell<Pool<Connection>>,
    clock: DriverClock,
    connects: Cell<u64>,
    reuses: Cell<u64>,
    stale_retries: Cell<u64>,
}

/// One core's provider HTTP/1.1 client with its keep-alive pool. Cheap to
/// clone (the clones share the pool); not `Send`.
#[derive(Clone, Debug)]
pub struct ProviderClient {
    inner: Rc<Inner>,
}

impl ProviderClient {
    /// A client with an empty pool. Call inside a monoio runtime with the
    /// timer enabled.
    pub fn new(mut config: ProviderClientConfig) -> Self {
        // A session cache of this core's own: the shared default one sits
        // behind a mutex all cores would take on every handshake.
        let mut tls = rustls::ClientConfig::clone(&config.tls);
        tls.resumption = rustls::client::Resumption::in_memory_sessions(TLS_SESSIONS_PER_CLIENT);
        config.tls = Arc::new(tls);
        let inner = Inner {
            pool: RefCell::new(Pool::new(config.pool)),
            clock: DriverClock::new(&config.clock),
            config,
            connects: Cell::new(0),
            reuses: Cell::new(0),
            stale_retries: Cell::new(0),
        };
        Self {
            inner: Rc::new(inner),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            connects: self.inner.connects.get(),
            reuses: self.inner.reuses.get(),
            stale_retries: self.inner.stale_retries.get(),
        }
    }

    /// Idle pooled connections to `base`'s origin.
    pub fn idle_connections(&self, base: &BaseUrl) -> usize {
        self.inner.pool.borrow().idle_count(&base.pool_key())
    }

    /// Sends `request` and returns once the final response head is parsed.
    /// See the module docs for the pool, the retry rule and timeouts.
    pub async fn request(
        &self,
        request: ProviderRequest,
    ) -> Result<ProviderResponse, ProviderError> {
        let (head, body) = request.encode()?;
        let head = head.freeze();
        let key = request.base.pool_key();
        let head_request = request.is_head();
        let now = self.inner.clock.refresh();
        let pooled = self.inner.pool.borrow_mut().checkout(&key, now);
        if let Some(conn) = pooled {
            self.inner.reuses.set(self.inner.reuses.get() + 1);
            match self
                .exchange(conn, head.clone(), body.clone(), head_request)
                .await
            {
                Ok((head, conn)) => {
                    return Ok(ProviderResponse::new(
                        head,
                        conn,
                        key,
                        Rc::clone(&self.inner),
                    ));
                }
                Err(HeadFailure::NothingReceived(error)) => {
                    tracing::debug!(host = %key.host, port = key.port, %error, "stale pooled connection; retrying once on a fresh one");
                    self.inner
                        .stale_retries
                        .set(self.inner.stale_retries.get() + 1);
                }
                Err(HeadFailure::Failed(error)) => return Err(error),
            }
        }
        let timeout = Duration::from_millis(self.inner.config.connect_timeout_ms);
        let config = &self.inner.config;
        let conn =
            Connection::connect(&request.base, timeout, &config.tls, config.receive_buffer).await?;
        self.inner.connects.set(self.inner.connects.get() + 1);
        match self.exchange(conn, head, body, head_request).await {
            Ok((head, conn)) => Ok(ProviderResponse::new(
                head,
                conn,
                key,
                Rc::clone(&self.inner),
            )),
            Err(HeadFailure::NothingReceived(error) | HeadFailure::Failed(error)) => Err(error),
        }
    }

    /// Writes the request on `conn` and reads the final head within the
    /// head timeout. `NothingReceived` only on a reused connection.
    async fn exchange(
        &self,
        mut conn: Connection,
        head: bytes::Bytes,
        body: RequestBody,
        head_request: bool,
    ) -> Result<(framing::http::ResponseHead, Connection), HeadFailure> {
        let reused = conn.reused;
        let retryable = |error| {
            if reused {
                HeadFailure::NothingReceived(error)
            } else {
                HeadFailure::Failed(error)
            }
        };
        if let Err(error) = conn.write(head, body).await {
            return Err(retryable(ProviderError::io(&error)));
        }
        let read = read_head(&mut conn, &self.inner, head_request);
        let read = match self.inner.config.head_timeout_ms {
            None => read.await,
            // Boxed, like the connect's: monoio's timer would align every
            // provider call's future to 128 bytes (see
            // `conn::Connection::connect`).
            Some(after_ms) => {
                Box::pin(monoio::time::timeout(Duration::from_millis(after_ms), read))
                    .await
                    .unwrap_or(Err(HeadFailure::Failed(ProviderError::HeadTimeout {
                        after_ms,
                    })))
            }
        };
        match read {
            Ok(head) => Ok((head, conn)),
            Err(HeadFailure::NothingReceived(error)) => Err(retryable(error)),
            Err(failed) => Err(failed),
        }
    }
}
