//! A test CA made by `rcgen` for the TLS tests: server configurations
//! with certificates it signs, and the product's provider client
//! configuration trusting it (`provider_http::tls_client_config`).

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, ServerConfig};

use crate::provider_http::tls_client_config;

/// A test CA, written to a PEM file, that signs server certificates.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    _dir: tempfile::TempDir,
    pem_file: PathBuf,
}

impl TestCa {
    /// A CA named `name`, its certificate written to a PEM file.
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let pem_file = dir.path().join("provider-ca.pem");
        std::fs::write(&pem_file, cert.pem()).unwrap();
        Self {
            issuer: Issuer::new(params, key),
            _dir: dir,
            pem_file,
        }
    }

    /// A server configuration with a certificate for `names` (DNS names or
    /// IP literals), ALPN `http/1.1`.
    pub(crate) fn server(&self, names: &[&str]) -> Arc<ServerConfig> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    /// The provider client configuration (`tls_client_config`) trusting
    /// this CA on top of the webpki roots.
    pub(crate) fn client_config(&self) -> Arc<ClientConfig> {
        tls_client_config(Some(&self.pem_file)).expect("CA file loads")
    }
}
