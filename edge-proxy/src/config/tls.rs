//! `tls:` in `edge.yaml`: how the node socket is secured (F28).
//!
//! ```yaml
//! tls:
//!   mode: mtls                  # off (default) | mtls
//!   cert: /etc/iop/edge.pem     # the Edge's certificate chain (PEM)
//!   key: /etc/iop/edge-key.pem  # its private key (PEM, PKCS#8/PKCS#1/SEC1)
//!   client_ca: /etc/iop/ca.pem  # the CA(s) every node certificate must chain to
//!   trust_domain: iop.example   # node identities are spiffe://<trust_domain>/node/<id>
//! ```
//!
//! With `mode: mtls` the files are read and checked when the config loads,
//! so a missing or broken file stops the Edge at start with the field that
//! names it. The result is a ready rustls server configuration: TLS 1.3
//! only (both ends are IOP), a client certificate required and verified by
//! rustls-webpki against `client_ca`. No error message, `Debug` output or
//! log line ever shows key bytes: a bad key file is reported by path only.
//!
//! `mode: off` (or no `tls:` section) keeps the node socket plain TCP, for
//! unmanaged and development use; the Edge's start-up log says which is on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use serde::Deserialize;

use super::Issue;

/// The raw `tls:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub(crate) mode: Option<String>,
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) client_ca: Option<String>,
    pub(crate) trust_domain: Option<String>,
}

/// How the node socket is secured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LinkSecurity {
    /// Plain TCP: any peer with a valid node token may register.
    #[default]
    Plaintext,
    /// Mutual TLS: the Edge and every Node present CA-verified certificates,
    /// and a Node's identity must match the record its token names.
    Mtls(NodeLinkTls),
}

impl LinkSecurity {
    /// `mtls` or `plaintext`, as the start-up log and metrics say it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Mtls(_) => "mtls",
        }
    }
}

/// A checked `tls:` section with `mode: mtls`.
#[derive(Clone)]
pub struct NodeLinkTls {
    /// The Edge's certificate chain file.
    pub cert: PathBuf,
    /// The Edge's private key file.
    pub key: PathBuf,
    /// The CA bundle node certificates must chain to.
    pub client_ca: PathBuf,
    /// The SPIFFE trust domain of node identities.
    pub trust_domain: String,
    /// The rustls configuration built from the files.
    pub server: Arc<ServerConfig>,
}

impl PartialEq for NodeLinkTls {
    /// Same files and trust domain (the built configuration follows).
    fn eq(&self, other: &Self) -> bool {
        self.cert == other.cert
            && self.key == other.key
            && self.client_ca == other.client_ca
            && self.trust_domain == other.trust_domain
    }
}

impl Eq for NodeLinkTls {}

impl fmt::Debug for NodeLinkTls {
    /// Paths and trust domain only: never the key or the rustls internals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeLinkTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("client_ca", &self.client_ca)
            .field("trust_domain", &self.trust_domain)
            .finish_non_exhaustive()
    }
}

/// Checks `raw`; `Err` holds every broken rule, each naming its `tls.*` field.
pub(crate) fn validate(raw: RawTls) -> Result<LinkSecurity, Vec<Issue>> {
    let mut issues = Vec::new();
    let mut fail = |path: &str, message: String| {
        issues.push(Issue {
            path: path.to_owned(),
            message,
        });
    };
    match raw.mode.as_deref().unwrap_or("off") {
        "off" => {
            for (path, value) in [
                ("tls.cert", &raw.cert),
                ("tls.key", &raw.key),
                ("tls.client_ca", &raw.client_ca),
                ("tls.trust_domain", &raw.trust_domain),
            ] {
                if value.is_some() {
                    fail(path, "set, but tls.mode is off (set mode: mtls)".into());
                }
            }
            return if issues.is_empty() {
                Ok(LinkSecurity::Plaintext)
            } else {
                Err(issues)
            };
        }
        "mtls" => {}
        other => {
            fail("tls.mode", format!("{other:?} is not one of: off, mtls"));
            return Err(issues);
        }
    }
    let mut required = |path: &str, value: Option<String>| {
        if value.as_deref().is_none_or(str::is_empty) {
            fail(path, "required when tls.mode is mtls".into());
        }
        value.unwrap_or_default()
    };
    let cert = PathBuf::from(required("tls.cert", raw.cert));
    let key = PathBuf::from(required("tls.key", raw.key));
    let client_ca = PathBuf::from(required("tls.client_ca", raw.client_ca));
    let trust_domain = required("tls.trust_domain", raw.trust_domain);
    if !trust_domain.is_empty() && !is_trust_domain(&trust_domain) {
        fail(
            "tls.trust_domain",
            format!(
                "{trust_domain:?} is not a SPIFFE trust domain (lowercase letters, digits, '.', '-', '_')"
            ),
        );
    }
    if !issues.is_empty() {
        return Err(issues);
    }
    let chain = read_certs("tls.cert", &cert, &mut issues);
    let roots = read_certs("tls.client_ca", &client_ca, &mut issues);
    let private_key = read_key(&key, &mut issues);
    let (Some(chain), Some(roots), Some(private_key)) = (chain, roots, private_key) else {
        return Err(issues);
    };
    match server_config(chain, roots, private_key) {
        Ok(server) => Ok(LinkSecurity::Mtls(NodeLinkTls {
            cert,
            key,
            client_ca,
            trust_domain,
            server,
        })),
        Err((path, message)) => Err(vec![Issue {
            path: path.into(),
            message,
        }]),
    }
}

/// A SPIFFE trust domain: `[a-z0-9._-]+`.
pub fn is_trust_domain(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

fn read_certs(
    path_name: &str,
    path: &Path,
    issues: &mut Vec<Issue>,
) -> Option<Vec<CertificateDer<'static>>> {
    let mut fail = |message: String| {
        issues.push(Issue {
            path: path_name.to_owned(),
            message,
        });
        None
    };
    let pem = match std::fs::read(path) {
        Ok(pem) => pem,
        Err(error) => return fail(format!("cannot read {}: {error}", path.display())),
    };
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
    match certs {
        Ok(certs) if !certs.is_empty() => Some(certs),
        Ok(_) => fail(format!("{} holds no PEM certificate", path.display())),
        Err(error) => fail(format!("{} is not valid PEM: {error}", path.display())),
    }
}

fn read_key(path: &Path, issues: &mut Vec<Issue>) -> Option<PrivateKeyDer<'static>> {
    let message = match std::fs::read(path) {
        // The parser's message could quote the file: say only which file.
        Ok(pem) => match PrivateKeyDer::from_pem_slice(&pem) {
            Ok(key) => return Some(key),
            Err(_) => format!("{} holds no valid PEM private key", path.display()),
        },
        Err(error) => format!("cannot read {}: {error}", path.display()),
    };
    issues.push(Issue {
        path: "tls.key".into(),
        message,
    });
    None
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    ca: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, (&'static str, String)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in ca {
        roots
            .add(cert)
            .map_err(|e| ("tls.client_ca", format!("unusable CA certificate: {e}")))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| {
            (
                "tls.client_ca",
                format!("cannot verify clients with it: {e}"),
            )
        })?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ("tls.mode", format!("TLS 1.3 unavailable: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        // rustls checks that the key matches the certificate; its message
        // names no key material.
        .map_err(|e| ("tls.key", format!("does not fit tls.cert: {e}")))?;
    // One long-lived connection per node: session resumption buys nothing.
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
