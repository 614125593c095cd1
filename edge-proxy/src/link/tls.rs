//! Managed mode on the node socket (F28): the mTLS handshake, the node's
//! workload identity, and the check that it matches the record its token
//! names — all before registration.
//!
//! ```text
//!  accept ─▶ TLS 1.3 handshake (≤ register_timeout_ms; client cert required,
//!            │                   verified by rustls-webpki against tls.client_ca)
//!            ├─ fail ─▶ log node_tls_rejected{reason}, close   (no session, no registry)
//!            ▼
//!        identity = the one `spiffe://<trust_domain>/node/<id>` URI SAN
//!            ├─ none / wrong trust domain ─▶ node_tls_rejected, close
//!            ▼
//!        session ─ RegisterRequest(token) ─▶ token's node == <id>?
//!            ├─ no ─▶ RegisterResponse(IDENTITY_MISMATCH), node_rejected (registry untouched)
//!            ▼
//!        registry.register (as in plain mode)
//! ```
//!
//! Rejection reasons are a closed set ([`TlsReject::as_str`]); the detail
//! logged next to it is rustls' or the identity check's text, never key
//! material or a token.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use framing::link::CloseReason;
use monoio::net::TcpStream;
use proto::v1::{RegisterRejectReason, RegisterRequest};
use rustls::{CertificateError, ServerConnection};

use super::conn::Conn;
use super::core::Core;
use super::session::{Accepted, Registrar, Rejection};
use super::transport::{LinkStream, handshake};
use crate::config::{LinkSecurity, NodeLinkTls};
use crate::registry::{ConnRegistrar, NodeDirectory, NodeRegistry};

/// Why a node connection was refused before registration (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsReject {
    /// The handshake did not finish within the registration deadline.
    HandshakeTimeout,
    /// The peer presented no client certificate.
    NoClientCertificate,
    /// The certificate does not chain to `tls.client_ca`.
    UntrustedCertificate,
    /// The certificate (or one in its chain) has expired or is not yet valid.
    ExpiredCertificate,
    /// The certificate is otherwise unusable (bad signature, wrong usage…).
    InvalidCertificate,
    /// No single `spiffe://<trust_domain>/node/<id>` URI SAN.
    NoIdentity,
    /// The identity's trust domain is not `tls.trust_domain`.
    WrongTrustDomain,
    /// The peer closed the connection mid-handshake.
    PeerClosed,
    /// Not TLS, or a TLS protocol failure.
    ProtocolError,
}

impl TlsReject {
    /// The stable snake_case name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HandshakeTimeout => "handshake_timeout",
            Self::NoClientCertificate => "no_client_certificate",
            Self::UntrustedCertificate => "untrusted_certificate",
            Self::ExpiredCertificate => "expired_certificate",
            Self::InvalidCertificate => "invalid_certificate",
            Self::NoIdentity => "no_identity",
            Self::WrongTrustDomain => "wrong_trust_domain",
            Self::PeerClosed => "peer_closed",
            Self::ProtocolError => "protocol_error",
        }
    }

    /// The reason for a failed handshake.
    pub fn classify(error: &std::io::Error) -> Self {
        let Some(rustls_error) = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        else {
            return match error.kind() {
                std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe => Self::PeerClosed,
                _ => Self::ProtocolError,
            };
        };
        match rustls_error {
            rustls::Error::NoCertificatesPresented => Self::NoClientCertificate,
            rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer | CertificateError::BadSignature,
            ) => Self::UntrustedCertificate,
            rustls::Error::InvalidCertificate(
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. },
            ) => Self::ExpiredCertificate,
            rustls::Error::InvalidCertificate(_) => Self::InvalidCertificate,
            _ => Self::ProtocolError,
        }
    }
}

/// The node id in `spiffe://<trust_domain>/node/<id>`, the one SPIFFE URI
/// SAN of the DER certificate `cert`.
///
/// # Errors
/// [`TlsReject::NoIdentity`] when the certificate has no SPIFFE URI SAN,
/// more than one, or one not of that shape; [`TlsReject::WrongTrustDomain`]
/// when its trust domain is not `trust_domain`.
pub fn node_identity(cert: &[u8], trust_domain: &str) -> Result<String, TlsReject> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert).map_err(|_| TlsReject::NoIdentity)?;
    let san = parsed
        .subject_alternative_name()
        .map_err(|_| TlsReject::NoIdentity)?
        .ok_or(TlsReject::NoIdentity)?;
    let mut spiffe = san
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) if uri.starts_with("spiffe://") => {
                Some(*uri)
            }
            _ => None,
        });
    let (Some(uri), None) = (spiffe.next(), spiffe.next()) else {
        return Err(TlsReject::NoIdentity);
    };
    let rest = &uri["spiffe://".len()..];
    let (domain, path) = rest.split_once('/').ok_or(TlsReject::NoIdentity)?;
    let id = path.strip_prefix("node/").ok_or(TlsReject::NoIdentity)?;
    if id.is_empty() || id.contains('/') || id.contains(['?', '#']) {
        return Err(TlsReject::NoIdentity);
    }
    if domain != trust_domain {
        return Err(TlsReject::WrongTrustDomain);
    }
    Ok(id.to_owned())
}

/// Serves one accepted node connection: plain, or after a successful mTLS
/// handshake and identity check.
pub(crate) async fn serve<D: NodeDirectory + 'static>(
    core: Rc<Core<D>>,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    let accepted_at = core.timers.now();
    let tls = match &core.shared.security {
        LinkSecurity::Plaintext => {
            return Conn::serve(core, LinkStream::Plain(stream), peer, None, accepted_at).await;
        }
        LinkSecurity::Mtls(tls) => tls.clone(),
    };
    let deadline = Duration::from_millis(core.shared.config.session.register_timeout_ms.max(1));
    match monoio::time::timeout(deadline, accept(&mut stream, &tls)).await {
        Ok(Ok((session, node_id))) => {
            tracing::debug!(peer = %peer, node_id = %node_id, "node_tls_accepted");
            let link = LinkStream::Tls(stream, Box::new(session.into()));
            Conn::serve(core, link, peer, Some(node_id), accepted_at).await;
        }
        Ok(Err((reason, detail))) => log_reject(peer, reason, &detail),
        Err(_) => log_reject(
            peer,
            TlsReject::HandshakeTimeout,
            "no TLS handshake in time",
        ),
    }
}

fn log_reject(peer: SocketAddr, reason: TlsReject, detail: &str) {
    tracing::warn!(
        event = "node_tls_rejected",
        peer = %peer,
        reason = reason.as_str(),
        close = CloseReason::Rejected.as_str(),
        detail,
        "node_tls_rejected"
    );
}

/// The handshake and the identity check.
async fn accept(
    stream: &mut TcpStream,
    tls: &NodeLinkTls,
) -> Result<(ServerConnection, String), (TlsReject, String)> {
    let _ = stream.set_nodelay(true);
    let session = ServerConnection::new(Arc::clone(&tls.server))
        .map_err(|e| (TlsReject::ProtocolError, e.to_string()))?;
    let mut session = rustls::Connection::from(session);
    handshake(stream, &mut session)
        .await
        .map_err(|e| (TlsReject::classify(&e), e.to_string()))?;
    let rustls::Connection::Server(session) = session else {
        unreachable!("a server connection stays one");
    };
    let leaf = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or_else(|| {
            (
                TlsReject::NoClientCertificate,
                "no client certificate".to_owned(),
            )
        })?;
    let node_id = node_identity(leaf, &tls.trust_domain).map_err(|reason| {
        (
            reason,
            format!(
                "the certificate's identity must be spiffe://{}/node/<node id>",
                tls.trust_domain
            ),
        )
    })?;
    Ok((session, node_id))
}

/// The registry operations of a connection, refusing a registration whose
/// token names another node than the certificate's identity (when there is
/// one) before the registry sees it.
pub(crate) struct IdentityRegistrar<'a, D> {
    /// The plain registrar.
    pub(crate) inner: ConnRegistrar<'a, D>,
    /// The node id proven by the peer's certificate (mTLS only).
    pub(crate) identity: Option<&'a str>,
    /// The registry (its directory resolves the token).
    pub(crate) registry: &'a NodeRegistry<D>,
}

impl<D: NodeDirectory> Registrar for IdentityRegistrar<'_, D> {
    fn register(&self, request: &RegisterRequest) -> Result<Accepted, Rejection> {
        let claimed = self.identity.and_then(|identity| {
            Some((
                identity,
                self.registry.directory().authenticate(&request.token)?,
            ))
        });
        match claimed {
            Some((identity, node_id)) if node_id != identity => Err(Rejection {
                message: format!(
                    "the certificate identifies node {identity}, the token names another node"
                ),
                node_id: Some(node_id),
                reason: RegisterRejectReason::IdentityMismatch,
            }),
            _ => self.inner.register(request),
        }
    }

    fn ready(&self, node_id: &str, generation: u64) -> bool {
        self.inner.ready(node_id, generation)
    }

    fn draining(&self, node_id: &str, generation: u64) {
        self.inner.draining(node_id, generation);
    }

    fn release(&self, node_id: &str, generation: u64, reason: CloseReason) {
        self.inner.release(node_id, generation, reason);
    }
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
