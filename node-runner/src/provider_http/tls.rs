//! TLS for `https://` providers: the rustls client configuration (trust
//! roots, ALPN) and the mapping of handshake failures to
//! [`ProviderError::Tls`].
//!
//! rustls does all of the cryptography, with the `ring` provider (aws-lc-rs
//! would need cmake and nasm to build). Trust: the Mozilla roots of
//! `webpki-roots`, plus an optional PEM bundle so a private provider CA can
//! be trusted. ALPN offers `http/1.1` only.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{CertificateError, ClientConfig, RootCertStore};

use super::error::{ProviderError, TlsFailure};

/// Why [`tls_client_config`] could not build a configuration.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsConfigError {
    /// The CA file cannot be read.
    #[error("cannot read provider CA file {}: {message}", path.display())]
    ReadCaFile {
        /// The file.
        path: PathBuf,
        /// The I/O error kind.
        kind: io::ErrorKind,
        /// The I/O error text.
        message: String,
    },
    /// The CA file is not valid PEM.
    #[error("provider CA file {} is not valid PEM: {message}", path.display())]
    BadPem {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        message: String,
    },
    /// The CA file holds no `CERTIFICATE` section.
    #[error("provider CA file {} holds no PEM certificate", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A certificate in the CA file cannot be a trust anchor.
    #[error("provider CA file {} has an unusable certificate: {message}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// What rustls said.
        message: String,
    },
}

/// A client configuration trusting the `webpki-roots` (Mozilla) roots and,
/// when `extra_ca_pem` is given, every `CERTIFICATE` in that PEM file too
/// (other PEM sections are ignored). ALPN offers `http/1.1`; TLS 1.2 and
/// 1.3 with rustls' safe defaults.
///
/// Put the result in [`ProviderClientConfig::tls`](super::ProviderClientConfig::tls).
pub fn tls_client_config(extra_ca_pem: Option<&Path>) -> Result<Arc<ClientConfig>, TlsConfigError> {
    let Some(path) = extra_ca_pem else {
        return Ok(default_tls_client_config());
    };
    let pem = std::fs::read(path).map_err(|error| TlsConfigError::ReadCaFile {
        path: path.to_owned(),
        kind: error.kind(),
        message: error.to_string(),
    })?;
    let mut roots = webpki_roots();
    let mut added = 0usize;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|error| TlsConfigError::BadPem {
            path: path.to_owned(),
            message: error.to_string(),
        })?;
        roots
            .add(cert)
            .map_err(|error| TlsConfigError::BadCertificate {
                path: path.to_owned(),
                message: error.to_string(),
            })?;
        added += 1;
    }
    if added == 0 {
        return Err(TlsConfigError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(Arc::new(build(roots)))
}

/// The configuration with the `webpki-roots` only (the default of
/// [`ProviderClientConfig`](super::ProviderClientConfig)); built once per
/// process and shared.
pub fn default_tls_client_config() -> Arc<ClientConfig> {
    static DEFAULT: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    Arc::clone(DEFAULT.get_or_init(|| Arc::new(build(webpki_roots()))))
}

fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

fn build(roots: RootCertStore) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // The ring provider supports both default versions: cannot fail.
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// The typed error for a failed handshake with `host`.
pub(crate) fn handshake_error(host: &str, error: &io::Error) -> ProviderError {
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let (failure, message) = match rustls_error {
        Some(rustls_error) => (classify(rustls_error), rustls_error.to_string()),
        None => (TlsFailure::ConnectionLost, error.to_string()),
    };
    ProviderError::Tls {
        host: host.to_owned(),
        failure,
        message,
    }
}

/// The typed error for a rustls error outside I/O (a session that cannot
/// even start).
pub(crate) fn rustls_error(host: &str, error: &rustls::Error) -> ProviderError {
    ProviderError::Tls {
        host: host.to_owned(),
        failure: classify(error),
        message: error.to_string(),
    }
}

fn classify(error: &rustls::Error) -> TlsFailure {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            TlsFailure::UntrustedCertificate
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => TlsFailure::WrongHost,
        rustls::Error::InvalidCertificate(_) => TlsFailure::InvalidCertificate,
        _ => TlsFailure::Handshake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_offers_http11_and_is_shared() {
        let a = default_tls_client_config();
        assert_eq!(a.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(Arc::ptr_eq(&a, &default_tls_client_config()));
        assert!(Arc::ptr_eq(&a, &tls_client_config(None).unwrap()));
    }

    #[test]
    fn ca_file_errors_are_typed_and_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let err = tls_client_config(Some(&missing)).unwrap_err();
        assert!(matches!(
            err,
            TlsConfigError::ReadCaFile {
                kind: io::ErrorKind::NotFound,
                ..
            }
        ));
        assert!(err.to_string().contains("missing.pem"), "{err}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no pem here\n").unwrap();
        let err = tls_client_config(Some(&empty)).unwrap_err();
        assert_eq!(err, TlsConfigError::NoCertificate { path: empty });

        let junk = dir.path().join("junk.pem");
        std::fs::write(
            &junk,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = tls_client_config(Some(&junk)).unwrap_err();
        assert!(
            matches!(err, TlsConfigError::BadCertificate { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn handshake_errors_are_classified() {
        let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let cases = [
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                TlsFailure::UntrustedCertificate,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
                TlsFailure::WrongHost,
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::Expired),
                TlsFailure::InvalidCertificate,
            ),
            (rustls::Error::NoApplicationProtocol, TlsFailure::Handshake),
        ];
        for (error, failure) in cases {
            let typed = handshake_error("h.example", &wrap(error));
            assert!(
                matches!(&typed, ProviderError::Tls { host, failure: f, .. } if host == "h.example" && *f == failure),
                "{typed:?}"
            );
            assert!(typed.is_retryable_before_send());
        }
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "tls handshake eof");
        assert!(matches!(
            handshake_error("h", &eof),
            ProviderError::Tls {
                failure: TlsFailure::ConnectionLost,
                ..
            }
        ));
    }
}
