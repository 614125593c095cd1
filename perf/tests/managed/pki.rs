//! Test PKI for the managed-mode tests: CAs and certificates made by
//! `rcgen` at test time (no checked-in keys), written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, SanType,
    date_time_ymd,
};

/// The trust domain of every test identity.
pub(crate) const TRUST_DOMAIN: &str = "iop.test";
/// The name in the Edge's certificate (and the node's `--edge-server-name`).
pub(crate) const EDGE_NAME: &str = "edge.iop.test";

/// A test CA.
pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A certificate and its key, as PEM files.
pub(crate) struct Leaf {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    /// The key's PEM text (a secret the tests look for in logs).
    pub(crate) key_pem: String,
}

impl Ca {
    /// A fresh self-signed CA.
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// Writes the CA certificate to `dir/<file>`.
    pub(crate) fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }

    /// The Edge's server certificate (DNS name [`EDGE_NAME`]).
    pub(crate) fn edge(&self, dir: &Path) -> Leaf {
        let mut params = CertificateParams::new(vec![EDGE_NAME.to_owned()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.leaf(params, dir, "edge")
    }

    /// A provider's server certificate for the IP address 127.0.0.1 (an
    /// `https://127.0.0.1:PORT` base URL).
    pub(crate) fn provider(&self, dir: &Path) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into())];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.leaf(params, dir, "provider")
    }

    /// A node certificate whose identity is `spiffe://<domain>/node/<id>`.
    pub(crate) fn node(&self, dir: &Path, domain: &str, id: &str) -> Leaf {
        self.node_with(dir, domain, id, false)
    }

    /// As [`node`](Self::node), valid only in 2020 when `expired`.
    pub(crate) fn node_with(&self, dir: &Path, domain: &str, id: &str, expired: bool) -> Leaf {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::URI(
            format!("spiffe://{domain}/node/{id}").try_into().unwrap(),
        )];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2020, 12, 31);
        }
        let name = format!(
            "node-{domain}-{id}{}",
            if expired { "-expired" } else { "" }
        );
        self.leaf(params, dir, &name)
    }

    fn leaf(&self, params: CertificateParams, dir: &Path, name: &str) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let cert_path = dir.join(format!("{name}.pem"));
        let key_path = dir.join(format!("{name}-key.pem"));
        let key_pem = key.serialize_pem();
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, &key_pem).unwrap();
        Leaf {
            cert: cert_path,
            key: key_path,
            key_pem,
        }
    }
}

/// The `tls:` section of an edge.yaml for mTLS with `edge` and `ca`.
pub(crate) fn edge_tls_yaml(edge: &Leaf, ca: &Path) -> String {
    format!(
        "tls:\n  mode: mtls\n  cert: {}\n  key: {}\n  client_ca: {}\n  trust_domain: {TRUST_DOMAIN}\n",
        edge.cert.display(),
        edge.key.display(),
        ca.display()
    )
}

/// The `iop-node` flags for mTLS with `node` and `ca`.
pub(crate) fn node_tls_args(node: &Leaf, ca: &Path) -> Vec<String> {
    vec![
        "--tls-ca".into(),
        ca.display().to_string(),
        "--tls-cert".into(),
        node.cert.display().to_string(),
        "--tls-key".into(),
        node.key.display().to_string(),
        "--edge-server-name".into(),
        EDGE_NAME.into(),
    ]
}
