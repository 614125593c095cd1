//! The mock provider's configuration: knob defaults and static facts.

use std::sync::Arc;

use super::knobs::Knobs;

/// How a mock provider instance behaves unless a request says otherwise.
#[derive(Debug, Clone)]
pub struct MockConfig {
    /// Knob defaults; each request may override them (see [`Knobs`]).
    pub knobs: Knobs,
    /// Model names listed by `GET /v1/models`, `GET /api/tags` and `GET /api/ps`
    /// (what the Node's exact-target health probe looks for). Generation
    /// routes accept any model and echo it back. The default lists
    /// `mock-model` and `m`, the short target the e2e stacks configure.
    pub models: Vec<String>,
    /// Whether `GET /health` starts out answering 503.
    pub unhealthy: bool,
    /// Serve `https://` with this certificate and key instead of plain
    /// HTTP (`None`, the default).
    pub tls: Option<MockTls>,
}

/// The mock's TLS server settings (rustls).
#[derive(Debug, Clone)]
pub struct MockTls(pub Arc<rustls::ServerConfig>);

impl MockTls {
    /// Settings from a PEM certificate chain (leaf first) and its PEM
    /// private key, ALPN `http/1.1`.
    pub fn from_pem_files(cert: &std::path::Path, key: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .with_context(|| format!("reading certificates from {}", cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("reading a private key from {}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .context("the certificate and key do not make a TLS server")?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self(Arc::new(config)))
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            knobs: Knobs::default(),
            models: vec!["mock-model".to_owned(), "m".to_owned()],
            unhealthy: false,
            tls: None,
        }
    }
}
