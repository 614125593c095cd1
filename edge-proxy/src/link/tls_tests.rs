//! Identity parsing, handshake failure classes and the identity check at
//! registration, without sockets.

use std::io;

use proto::v1::{NodeConfigPayload, RegisterRejectReason, RegisterRequest};
use rcgen::{CertificateParams, KeyPair, SanType};
use rustls::CertificateError;

use super::*;
use crate::registry::NodeRegistry;

fn cert_with(sans: Vec<SanType>) -> Vec<u8> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = sans;
    let key = KeyPair::generate().unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.try_into().unwrap())
}

#[test]
fn identity_is_the_one_spiffe_node_uri() {
    let cert = cert_with(vec![
        SanType::DnsName("node-a.test".try_into().unwrap()),
        uri("spiffe://iop.test/node/node-a"),
    ]);
    assert_eq!(node_identity(&cert, "iop.test"), Ok("node-a".to_owned()));
    assert_eq!(
        node_identity(&cert, "other.test"),
        Err(TlsReject::WrongTrustDomain)
    );
}

#[test]
fn missing_ambiguous_or_malformed_identities_are_refused() {
    let cases = [
        vec![],
        vec![SanType::DnsName("node-a".try_into().unwrap())],
        vec![uri("https://iop.test/node/node-a")],
        vec![uri("spiffe://iop.test/workload/node-a")],
        vec![uri("spiffe://iop.test/node/")],
        vec![uri("spiffe://iop.test/node/a/b")],
        vec![uri("spiffe://iop.test")],
        vec![
            uri("spiffe://iop.test/node/node-a"),
            uri("spiffe://iop.test/node/node-b"),
        ],
    ];
    for sans in cases {
        let shown = format!("{sans:?}");
        assert_eq!(
            node_identity(&cert_with(sans), "iop.test"),
            Err(TlsReject::NoIdentity),
            "{shown}"
        );
    }
    assert_eq!(
        node_identity(b"not a certificate", "iop.test"),
        Err(TlsReject::NoIdentity)
    );
}

#[test]
fn handshake_failures_are_classified() {
    let wrap = |e: rustls::Error| io::Error::new(io::ErrorKind::InvalidData, e);
    let cases = [
        (
            rustls::Error::NoCertificatesPresented,
            TlsReject::NoClientCertificate,
        ),
        (
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            TlsReject::UntrustedCertificate,
        ),
        (
            rustls::Error::InvalidCertificate(CertificateError::Expired),
            TlsReject::ExpiredCertificate,
        ),
        (
            rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
            TlsReject::InvalidCertificate,
        ),
        (
            rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType),
            TlsReject::ProtocolError,
        ),
    ];
    for (error, reason) in cases {
        assert_eq!(TlsReject::classify(&wrap(error)), reason);
    }
    let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "eof");
    assert_eq!(TlsReject::classify(&eof), TlsReject::PeerClosed);
    assert_eq!(TlsReject::ProtocolError.as_str(), "protocol_error");
}

/// Two nodes, each known by its token.
struct Directory;

impl NodeDirectory for Directory {
    fn authenticate(&self, token: &str) -> Option<String> {
        match token {
            "tok-a" => Some("node-a".into()),
            "tok-b" => Some("node-b".into()),
            _ => None,
        }
    }

    fn build_payload(&self, _: &str, _: u32) -> Result<NodeConfigPayload, String> {
        Ok(NodeConfigPayload::default())
    }
}

fn register(
    registry: &NodeRegistry<Directory>,
    identity: Option<&str>,
    token: &str,
) -> Result<Accepted, Rejection> {
    let registrar = IdentityRegistrar {
        inner: ConnRegistrar {
            registry,
            home_core: 0,
            connected_since_unix_ms: 0,
        },
        identity,
        registry,
    };
    registrar.register(&RegisterRequest {
        token: token.into(),
        ..RegisterRequest::default()
    })
}

#[test]
fn a_token_for_another_node_is_refused_before_the_registry_sees_it() {
    let registry = NodeRegistry::new(Directory);
    let refused = register(&registry, Some("node-a"), "tok-b").unwrap_err();
    assert_eq!(refused.reason, RegisterRejectReason::IdentityMismatch);
    assert_eq!(refused.node_id.as_deref(), Some("node-b"));
    assert!(!refused.message.contains("tok-b"), "{}", refused.message);
    assert_eq!(registry.live_count(), 0);
    // node-b's first real registration is still its generation 1.
    let accepted = register(&registry, Some("node-b"), "tok-b").unwrap();
    assert_eq!(
        (accepted.node_id.as_str(), accepted.generation),
        ("node-b", 1)
    );
}

#[test]
fn matching_or_plain_registrations_go_through_and_unknown_tokens_stay_unknown() {
    let registry = NodeRegistry::new(Directory);
    assert_eq!(
        register(&registry, Some("node-a"), "tok-a")
            .unwrap()
            .generation,
        1
    );
    assert_eq!(register(&registry, None, "tok-b").unwrap().generation, 1);
    assert_eq!(
        register(&registry, Some("node-a"), "nope")
            .unwrap_err()
            .reason,
        RegisterRejectReason::UnknownToken
    );
}
