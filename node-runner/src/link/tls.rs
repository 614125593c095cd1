//! Managed mode on the Node's link (F28): the Node presents its certificate
//! (whose `spiffe://<trust-domain>/node/<node-id>` URI SAN is its identity)
//! and verifies the Edge's: chained to `--tls-ca` and valid for
//! `--edge-server-name`.
//!
//! rustls does the cryptography (the `ring` provider, TLS 1.3 only: both
//! ends are IOP) and rustls-webpki the certificate checks. Without these
//! flags the link is plain TCP (unmanaged/dev), and the Node's start-up log
//! says which is on (`link_security`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore};

/// The Node's mTLS settings for its link.
#[derive(Clone)]
pub struct LinkTls {
    /// The rustls configuration (roots, client certificate and key).
    pub config: Arc<ClientConfig>,
    /// The name the Edge's certificate must be valid for.
    pub server_name: ServerName<'static>,
}

impl std::fmt::Debug for LinkTls {
    /// The server name only: never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkTls")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Why [`link_tls`] could not build the settings. Messages name the flag
/// and the file, never key bytes.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkTlsError {
    /// A file cannot be read.
    #[error("{flag}: cannot read {}: {message}", path.display())]
    Read {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error text.
        message: String,
    },
    /// A file holds no usable PEM certificate.
    #[error("{flag}: {} holds no valid PEM certificate", path.display())]
    NoCertificate {
        /// The flag that named the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The key file holds no usable PEM private key.
    #[error("--tls-key: {} holds no valid PEM private key", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// `--edge-server-name` is not a DNS name or IP address.
    #[error("--edge-server-name: {name:?} is not a DNS name or IP address")]
    ServerName {
        /// What was given.
        name: String,
    },
    /// rustls refused the combination (a key that does not fit the
    /// certificate, an unusable CA).
    #[error("{flag}: {message}")]
    Rejected {
        /// The flag at fault.
        flag: &'static str,
        /// What rustls said.
        message: String,
    },
}

/// The link's mTLS settings from PEM files: trust `ca`, present `cert`
/// (a chain, leaf first) with `key`, and expect the Edge's certificate to be
/// valid for `server_name`.
///
/// # Errors
/// [`LinkTlsError`], naming the flag and the file.
pub fn link_tls(
    ca: &Path,
    cert: &Path,
    key: &Path,
    server_name: &str,
) -> Result<LinkTls, LinkTlsError> {
    let server_name =
        ServerName::try_from(server_name.to_owned()).map_err(|_| LinkTlsError::ServerName {
            name: server_name.to_owned(),
        })?;
    let mut roots = RootCertStore::empty();
    for anchor in read_certs("--tls-ca", ca)? {
        roots.add(anchor).map_err(|e| LinkTlsError::Rejected {
            flag: "--tls-ca",
            message: format!("unusable CA certificate: {e}"),
        })?;
    }
    let chain = read_certs("--tls-cert", cert)?;
    let pem = read("--tls-key", key)?;
    // The parser's message could quote the file: say only which file.
    let key_der = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|_| LinkTlsError::NoKey { path: key.into() })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| LinkTlsError::Rejected {
            flag: "--tls-ca",
            message: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key_der)
        .map_err(|e| LinkTlsError::Rejected {
            flag: "--tls-key",
            message: format!("does not fit --tls-cert: {e}"),
        })?;
    Ok(LinkTls {
        config: Arc::new(config),
        server_name,
    })
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, LinkTlsError> {
    std::fs::read(path).map_err(|e| LinkTlsError::Read {
        flag,
        path: path.into(),
        message: e.to_string(),
    })
}

fn read_certs(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, LinkTlsError> {
    let pem = read(flag, path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|_| LinkTlsError::NoCertificate {
            flag,
            path: path.into(),
        })?;
    if certs.is_empty() {
        return Err(LinkTlsError::NoCertificate {
            flag,
            path: path.into(),
        });
    }
    Ok(certs)
}

/// A fresh client session for one connection.
pub(crate) fn session(tls: &LinkTls) -> io::Result<rustls::Connection> {
    ClientConnection::new(Arc::clone(&tls.config), tls.server_name.clone())
        .map(rustls::Connection::from)
        .map_err(io::Error::other)
}

/// Whether `error` is a TLS failure (rustls' error inside an I/O error).
pub(crate) fn is_tls_error(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
}

/// The closed-set name of a failed link handshake, for the log.
pub fn handshake_failure(error: &io::Error) -> &'static str {
    let Some(rustls_error) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return "peer_closed";
    };
    match rustls_error {
        rustls::Error::AlertReceived(_) => "refused_by_edge",
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "untrusted_edge_certificate"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "wrong_edge_name",
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "expired_edge_certificate",
        rustls::Error::InvalidCertificate(_) => "invalid_edge_certificate",
        _ => "protocol_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_files_are_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = link_tls(&missing, &missing, &missing, "edge.test").unwrap_err();
        assert!(matches!(
            err,
            LinkTlsError::Read {
                flag: "--tls-ca",
                ..
            }
        ));
        assert!(err.to_string().contains("missing.pem"), "{err}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing\n").unwrap();
        let err = link_tls(&empty, &empty, &empty, "edge.test").unwrap_err();
        assert!(matches!(
            err,
            LinkTlsError::NoCertificate {
                flag: "--tls-ca",
                ..
            }
        ));

        let err = link_tls(&empty, &empty, &empty, "not a name!").unwrap_err();
        assert!(matches!(err, LinkTlsError::ServerName { .. }), "{err}");
    }

    #[test]
    fn failures_have_closed_set_names() {
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        assert_eq!(
            handshake_failure(&wrap(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))),
            "untrusted_edge_certificate"
        );
        assert_eq!(
            handshake_failure(&wrap(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName
            ))),
            "wrong_edge_name"
        );
        assert_eq!(
            handshake_failure(&wrap(rustls::Error::AlertReceived(
                rustls::AlertDescription::BadCertificate
            ))),
            "refused_by_edge"
        );
        assert_eq!(
            handshake_failure(&io::Error::from(io::ErrorKind::UnexpectedEof)),
            "peer_closed"
        );
        assert!(is_tls_error(&wrap(rustls::Error::DecryptError)));
        assert!(!is_tls_error(&io::Error::from(io::ErrorKind::BrokenPipe)));
    }
}
