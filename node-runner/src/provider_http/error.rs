//! Typed errors of the provider HTTP client, with the side that caused them
//! and whether the caller may retry elsewhere.

use std::fmt;
use std::io;

use framing::http::HttpError;

/// Which party an error is attributed to (pingora's "source"): failover and
/// provider health only count what the provider did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The Node itself (a request it could not encode).
    Node,
    /// The model server (connect, timeouts, framing, truncation).
    Provider,
}

/// Why a provider request failed.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The provider actively refused the TCP connection.
    #[error("provider refused the connection")]
    ConnectRefused,
    /// The TCP connection (or name resolution) failed otherwise.
    #[error("connecting to the provider failed ({kind:?}): {message}")]
    ConnectFailed {
        /// The I/O error kind.
        kind: io::ErrorKind,
        /// The I/O error text.
        message: String,
    },
    /// The connection did not complete within the connect timeout.
    #[error("connecting to the provider timed out after {after_ms} ms")]
    ConnectTimeout {
        /// The timeout that expired, in ms.
        after_ms: u64,
    },
    /// The TLS handshake with an `https` provider failed: its certificate
    /// is not trusted or not valid for the host, or the handshake itself
    /// broke. No byte of the request was sent.
    #[error("TLS handshake with provider host {host} failed: {failure}: {message}")]
    Tls {
        /// The host name (or IP literal) the certificate was checked for.
        host: String,
        /// What went wrong.
        failure: TlsFailure,
        /// rustls' (or the socket's) description.
        message: String,
    },
    /// The final response head did not arrive within the client's head
    /// timeout (set only by a caller with no bound of its own; see
    /// `ProviderClientConfig::head_timeout_ms`).
    #[error("provider response head timed out after {after_ms} ms")]
    HeadTimeout {
        /// The timeout that expired, in ms.
        after_ms: u64,
    },
    /// The response head exceeds the head limits (bytes or field count).
    #[error("provider response head too large: {0}")]
    HeadTooLarge(HttpError),
    /// The response head cannot be parsed.
    #[error("malformed provider response head: {0}")]
    MalformedHead(HttpError),
    /// The body framing (chunked coding) is broken.
    #[error("malformed provider response body: {0}")]
    MalformedBody(HttpError),
    /// The provider closed the connection before the body's end.
    #[error("provider closed the connection before the body was complete")]
    BodyTruncated,
    /// The provider closed the connection before sending any response byte.
    #[error("provider closed the connection before responding")]
    ClosedBeforeResponse,
    /// Reading or writing the socket failed after connecting.
    #[error("provider connection I/O failed ({kind:?}): {message}")]
    Io {
        /// The I/O error kind.
        kind: io::ErrorKind,
        /// The I/O error text.
        message: String,
    },
    /// An earlier `next_chunk` future on this response was dropped while
    /// its read was in flight: the body's position is lost and the
    /// connection was closed.
    #[error("a read of this response was cancelled mid-way")]
    Cancelled,
    /// The request itself cannot be encoded (bad method, target or header).
    #[error("invalid provider request: {0}")]
    InvalidRequest(HttpError),
}

impl ProviderError {
    /// Who caused it: [`Side::Node`] for a request the Node could not
    /// encode or a read it abandoned, [`Side::Provider`] for everything
    /// else.
    pub fn side(&self) -> Side {
        match self {
            Self::InvalidRequest(_) | Self::Cancelled => Side::Node,
            _ => Side::Provider,
        }
    }

    /// True when no byte of the request reached the provider, so the caller
    /// may send it again (to another target) whatever its method: only
    /// connect and TLS handshake failures. Everything after the first byte
    /// was written may have been processed and is not retryable by this
    /// rule.
    pub fn is_retryable_before_send(&self) -> bool {
        matches!(
            self,
            Self::ConnectRefused
                | Self::ConnectFailed { .. }
                | Self::ConnectTimeout { .. }
                | Self::Tls { .. }
        )
    }

    pub(crate) fn connect(error: &io::Error) -> Self {
        if error.kind() == io::ErrorKind::ConnectionRefused {
            Self::ConnectRefused
        } else {
            Self::ConnectFailed {
                kind: error.kind(),
                message: error.to_string(),
            }
        }
    }

    pub(crate) fn io(error: &io::Error) -> Self {
        Self::Io {
            kind: error.kind(),
            message: error.to_string(),
        }
    }

    pub(crate) fn head(error: HttpError) -> Self {
        match error {
            HttpError::HeadTooLarge { .. } | HttpError::TooManyHeaders { .. } => {
                Self::HeadTooLarge(error)
            }
            other => Self::MalformedHead(other),
        }
    }

    pub(crate) fn body(error: HttpError) -> Self {
        match error {
            HttpError::IncompleteBody => Self::BodyTruncated,
            other => Self::MalformedBody(other),
        }
    }
}

/// Why a TLS handshake failed ([`ProviderError::Tls`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlsFailure {
    /// The certificate chain does not lead to a trusted root (neither the
    /// built-in roots nor the extra CA file).
    UntrustedCertificate,
    /// The certificate is not valid for the host in the base URL.
    WrongHost,
    /// The certificate is unusable otherwise (expired, not yet valid,
    /// revoked, badly encoded, wrong purpose).
    InvalidCertificate,
    /// The handshake broke: an alert from the provider, no common protocol
    /// version, cipher suite or ALPN protocol, or a protocol violation.
    Handshake,
    /// The connection failed or closed during the handshake.
    ConnectionLost,
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UntrustedCertificate => "certificate not trusted",
            Self::WrongHost => "certificate not valid for this host",
            Self::InvalidCertificate => "invalid certificate",
            Self::Handshake => "handshake failed",
            Self::ConnectionLost => "connection lost during the handshake",
        })
    }
}
