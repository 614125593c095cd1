//! `tls:` validation: every rule names its field; files are checked at load;
//! no message shows key bytes.

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::*;
use crate::config::{ConfigError, EdgeConfig};

/// A CA and an Edge certificate signed by it, written as PEM files.
struct Files {
    dir: tempdir::Dir,
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    key_pem: String,
}

mod tempdir {
    /// A directory removed on drop (no extra crate for one test module).
    pub(super) struct Dir(pub(super) std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn files() -> Files {
    let dir = std::env::temp_dir().join(format!(
        "iop-edge-tls-{}-{}",
        std::process::id(),
        fastrand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["edge.test".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Files {
        cert: write("edge.pem", &cert.pem()),
        key: write("edge-key.pem", &key.serialize_pem()),
        ca: write("ca.pem", &ca_cert.pem()),
        key_pem: key.serialize_pem(),
        dir: tempdir::Dir(dir),
    }
}

fn fastrand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn raw(f: &Files) -> RawTls {
    RawTls {
        mode: Some("mtls".into()),
        cert: Some(f.cert.display().to_string()),
        key: Some(f.key.display().to_string()),
        client_ca: Some(f.ca.display().to_string()),
        trust_domain: Some("iop.test".into()),
    }
}

fn paths(issues: &[Issue]) -> Vec<&str> {
    issues.iter().map(|i| i.path.as_str()).collect()
}

#[test]
fn absent_or_off_is_plaintext() {
    assert_eq!(validate(RawTls::default()), Ok(LinkSecurity::Plaintext));
    let off = RawTls {
        mode: Some("off".into()),
        ..RawTls::default()
    };
    assert_eq!(validate(off), Ok(LinkSecurity::Plaintext));
    assert_eq!(LinkSecurity::Plaintext.as_str(), "plaintext");
}

#[test]
fn mtls_builds_a_server_config_from_the_files() {
    let f = files();
    let Ok(LinkSecurity::Mtls(tls)) = validate(raw(&f)) else {
        panic!("valid files must load");
    };
    assert_eq!(tls.trust_domain, "iop.test");
    let debug = format!("{tls:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    assert!(debug.contains("edge-key.pem"), "{debug}");
    assert_eq!(LinkSecurity::Mtls(tls).as_str(), "mtls");
}

#[test]
fn errors_name_the_field() {
    let bad_mode = RawTls {
        mode: Some("tls".into()),
        ..RawTls::default()
    };
    assert_eq!(paths(&validate(bad_mode).unwrap_err()), ["tls.mode"]);

    let missing = RawTls {
        mode: Some("mtls".into()),
        ..RawTls::default()
    };
    assert_eq!(
        paths(&validate(missing).unwrap_err()),
        ["tls.cert", "tls.key", "tls.client_ca", "tls.trust_domain"]
    );

    let stray = RawTls {
        cert: Some("x.pem".into()),
        ..RawTls::default()
    };
    assert_eq!(paths(&validate(stray).unwrap_err()), ["tls.cert"]);

    let f = files();
    let mut bad_domain = raw(&f);
    bad_domain.trust_domain = Some("IOP/Test".into());
    assert_eq!(
        paths(&validate(bad_domain).unwrap_err()),
        ["tls.trust_domain"]
    );

    let mut no_file = raw(&f);
    no_file.client_ca = Some(f.dir.0.join("nope.pem").display().to_string());
    let issues = validate(no_file).unwrap_err();
    assert_eq!(paths(&issues), ["tls.client_ca"]);
    assert!(issues[0].message.contains("nope.pem"), "{issues:?}");
}

#[test]
fn a_bad_key_is_reported_by_path_only() {
    let f = files();
    // A key that is not the certificate's: the PEM is fine, the pair is not.
    let other = f.dir.0.join("other-key.pem");
    std::fs::write(&other, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let mut mismatched = raw(&f);
    mismatched.key = Some(other.display().to_string());
    let issues = validate(mismatched).unwrap_err();
    assert_eq!(paths(&issues), ["tls.key"]);

    // A corrupted key file: its bytes never reach the message.
    let broken = f.dir.0.join("broken-key.pem");
    let corrupted = f.key_pem.replace("PRIVATE KEY", "PRIVATE KEE");
    std::fs::write(&broken, &corrupted).unwrap();
    let mut bad = raw(&f);
    bad.key = Some(broken.display().to_string());
    let issues = validate(bad).unwrap_err();
    assert_eq!(paths(&issues), ["tls.key"]);
    let body: String = f.key_pem.lines().nth(1).unwrap().to_owned();
    assert!(!issues[0].message.contains(&body), "{issues:?}");
}

#[test]
fn edge_yaml_tls_section_loads_and_errors_name_the_file() {
    let f = files();
    let yaml = format!(
        "nodes:\n  - id: n1\n    token: t\ntls:\n  mode: mtls\n  cert: {}\n  key: {}\n  client_ca: {}\n  trust_domain: iop.test\n",
        f.cert.display(),
        f.key.display(),
        f.ca.display()
    );
    let config = EdgeConfig::from_yaml_str(&yaml, "edge.yaml").unwrap();
    assert_eq!(config.link_security().as_str(), "mtls");

    let err = EdgeConfig::from_yaml_str(
        "nodes:\n  - id: n1\n    token: t\ntls:\n  mode: mtls\n",
        "edge.yaml",
    )
    .unwrap_err();
    assert!(matches!(err, ConfigError::Invalid { .. }));
    assert!(err.to_string().contains("edge.yaml"), "{err}");
    assert!(err.to_string().contains("tls.trust_domain"), "{err}");
    assert_eq!(
        EdgeConfig::embedded_default().link_security(),
        &LinkSecurity::Plaintext
    );
}
