//! Managed mode on the node link (F28), end to end: the real `iop-edge` and
//! `iop-node` binaries with certificates from a test CA made by `rcgen`.
//! A valid node registers and serves a run; every bad identity is refused
//! before registration, with a clear reason in the Edge's log, and the
//! registry never allocates it a generation. Both I/O drivers.

mod managed;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use framing::frame::FrameEncoder;
use framing::io_driver::IoDriver;
use managed::pki::{self, Ca, EDGE_NAME, TRUST_DOMAIN};
use managed::{Edge, Node, Scratch, chat, mock, start_edge, start_node};
use proto::Envelope;
use proto::v1::{RegisterRequest, envelope::Msg};
use support::stack::drivers;

/// The test PKI and an mTLS Edge in front of the mock provider.
struct Managed {
    dir: Scratch,
    ca: Ca,
    ca_pem: std::path::PathBuf,
    edge: Edge,
    driver: IoDriver,
    _mock: perf::mock_provider::MockThreads,
}

fn yaml(mock: std::net::SocketAddr, tls: &str) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "3"}}
      - id: big
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
        headers: {{x-mock-tokens: "50000"}}
  - id: node-b
    token: tok-b
model_groups:
  - name: m
    providers: [oa]
  - name: big
    target: m
    providers: [big]
{tls}"#
    )
}

impl Managed {
    fn start(name: &str, driver: IoDriver) -> Self {
        let dir = Scratch::new(&format!("mtls-{name}"), driver);
        let ca = Ca::new("iop test CA");
        let ca_pem = ca.write(&dir.0, "ca.pem");
        let edge_cert = ca.edge(&dir.0);
        let mock = mock();
        let yaml = yaml(mock.local_addr(), &pki::edge_tls_yaml(&edge_cert, &ca_pem));
        let edge = start_edge(&dir.0, &yaml, driver, "info");
        Self {
            dir,
            ca,
            ca_pem,
            edge,
            driver,
            _mock: mock,
        }
    }

    /// `iop-node` with token `token` and the flags `args`.
    fn node(&self, token: &str, args: Vec<String>) -> Node {
        let data = self.dir.0.join(format!("data-{}", fastrand_name()));
        start_node(&self.edge, &data, token, &args, self.driver, "info")
    }

    /// `iop-node` presenting `leaf`, trusting the test CA.
    fn node_with(&self, token: &str, leaf: &pki::Leaf) -> Node {
        self.node(token, pki::node_tls_args(leaf, &self.ca_pem))
    }

    /// Waits for the Edge's `node_tls_rejected` line with `reason`.
    fn rejected(&self, reason: &str) -> String {
        self.edge
            .log
            .wait_for(&["\"node_tls_rejected\"", &format!("\"reason\":\"{reason}\"")])
    }

    /// The Edge never registered anything (no generation was allocated).
    fn assert_nothing_registered(&self) {
        assert!(
            !self.edge.log.contains("\"node_registered\""),
            "{}",
            self.edge.log.lines().join("\n")
        );
    }

    /// A valid node-a registers now as generation 1: the refused
    /// connections before it never reached the registry.
    fn assert_first_valid_registration_is_generation_1(&self) {
        let leaf = self.ca.node(&self.dir.0, TRUST_DOMAIN, "node-a");
        let _node = self.node_with("tok-a", &leaf);
        let line = self
            .edge
            .log
            .wait_for(&["\"node_registered\"", "\"node_id\":\"node-a\""]);
        assert!(line.contains("\"generation\":1"), "{line}");
    }
}

/// The body of a `transfer-encoding: chunked` response, de-chunked.
fn dechunk(response: &str) -> String {
    let head = response.split_once("\r\n\r\n").expect("a head").0;
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    support::stack::http_body(response)
}

fn fastrand_name() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn valid_mtls_node_registers_and_serves_a_run() {
    for driver in drivers() {
        let m = Managed::start("valid", driver);
        assert!(
            m.edge.started.contains("\"link_security\":\"mtls\""),
            "{}",
            m.edge.started
        );
        let leaf = m.ca.node(&m.dir.0, TRUST_DOMAIN, "node-a");
        let node = m.node_with("tok-a", &leaf);
        node.log
            .wait_for(&["\"node_starting\"", "\"link_security\":\"mtls\""]);
        node.log.wait_for(&["\"node_ready\""]);
        m.edge
            .log
            .wait_for(&["\"node_ready\"", "\"node_id\":\"node-a\""]);
        let response = chat(&m.edge, "m", "");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("\"choices\""), "{response}");
        assert!(!m.edge.log.contains("node_tls_rejected"));
    }
}

#[test]
fn a_large_stream_crosses_the_mtls_link_whole() {
    for driver in drivers() {
        let m = Managed::start("large", driver);
        let leaf = m.ca.node(&m.dir.0, TRUST_DOMAIN, "node-a");
        let node = m.node_with("tok-a", &leaf);
        node.log.wait_for(&["\"node_ready\""]);
        // Many TLS records each way, and writes past rustls' send buffer.
        let body = r#"{"model":"big","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let response = managed::http(m.edge.ingress, "POST", "/v1/chat/completions", "", body);
        assert!(response.starts_with("HTTP/1.1 200"), "{}", &response[..200]);
        assert!(response.len() > 1 << 20, "{} bytes", response.len());
        assert!(response.contains("data: [DONE]"), "the stream ended early");
        let body = dechunk(&response);
        let events = body.matches("\"chat.completion.chunk\"").count();
        assert!(events >= 50_000, "{events} events");
    }
}

#[test]
fn plaintext_edge_and_node_say_so() {
    for driver in drivers() {
        let dir = Scratch::new("mtls-plain", driver);
        let mock = mock();
        let edge = start_edge(&dir.0, &yaml(mock.local_addr(), ""), driver, "info");
        assert!(
            edge.started.contains("\"link_security\":\"plaintext\""),
            "{}",
            edge.started
        );
        let node = start_node(&edge, &dir.0.join("data"), "tok-a", &[], driver, "info");
        node.log
            .wait_for(&["\"node_starting\"", "\"link_security\":\"plaintext\""]);
        node.log.wait_for(&["\"node_ready\""]);
        let response = chat(&edge, "m", "");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }
}

#[test]
fn a_client_without_a_certificate_is_rejected_before_registration() {
    for driver in drivers() {
        let m = Managed::start("nocert", driver);
        // A bare TLS client that trusts the Edge but has no certificate,
        // and sends a valid RegisterRequest right after its handshake.
        let ca = std::fs::read(&m.ca_pem).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(EDGE_NAME).unwrap();
        let session = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let socket = TcpStream::connect(&m.edge.nodes).unwrap();
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut tls = rustls::StreamOwned::new(session, socket);
        let frame = FrameEncoder::new(1 << 20)
            .encode(&Envelope {
                stream_id: 0,
                msg: Some(Msg::RegisterRequest(Box::new(RegisterRequest {
                    token: "tok-a".into(),
                    ..RegisterRequest::default()
                }))),
            })
            .unwrap();
        let _ = tls.write_all(&frame);
        let _ = tls.flush();
        let mut buf = [0u8; 256];
        let answer = loop {
            match tls.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        assert!(
            !matches!(answer, Ok(n) if n > 0),
            "the Edge answered a node without a certificate: {answer:?}"
        );
        let line = m.rejected("no_client_certificate");
        assert!(line.contains("\"close\":\"rejected\""), "{line}");
        m.assert_nothing_registered();
    }
}

#[test]
fn a_certificate_from_another_ca_is_rejected_before_registration() {
    for driver in drivers() {
        let m = Managed::start("wrongca", driver);
        let rogue = Ca::new("rogue CA");
        let leaf = rogue.node(&m.dir.0, TRUST_DOMAIN, "node-a");
        // The node trusts the real CA (so it accepts the Edge) but presents
        // a certificate the Edge's CA never signed.
        let node = m.node_with("tok-a", &leaf);
        m.rejected("untrusted_certificate");
        // TLS 1.3: the Node's side of the handshake is done before the Edge
        // has checked its certificate, so the Node sees the refusal as an
        // alert on its first read, before registration.
        node.log
            .wait_for(&["\"node_tls_failed\"", "\"reason\":\"refused_by_edge\""]);
        assert!(!node.log.contains("\"node_registered\""));
        m.assert_nothing_registered();
        drop(node);
        m.assert_first_valid_registration_is_generation_1();
    }
}

#[test]
fn an_expired_certificate_is_rejected_before_registration() {
    for driver in drivers() {
        let m = Managed::start("expired", driver);
        let leaf = m.ca.node_with(&m.dir.0, TRUST_DOMAIN, "node-a", true);
        let _node = m.node_with("tok-a", &leaf);
        m.rejected("expired_certificate");
        m.assert_nothing_registered();
    }
}

#[test]
fn an_identity_that_does_not_match_the_token_is_rejected_before_registration() {
    for driver in drivers() {
        let m = Managed::start("mismatch", driver);
        // node-b's certificate with node-a's token.
        let leaf = m.ca.node(&m.dir.0, TRUST_DOMAIN, "node-b");
        let node = m.node_with("tok-a", &leaf);
        let line = m
            .edge
            .log
            .wait_for(&["\"node_rejected\"", "\"reason\":\"identity_mismatch\""]);
        assert!(line.contains("\"node_id\":\"node-a\""), "{line}");
        node.log
            .wait_for(&["\"node_rejected\"", "\"reason\":\"identity_mismatch\""]);
        m.assert_nothing_registered();
        drop(node);
        m.assert_first_valid_registration_is_generation_1();
    }
}

#[test]
fn an_identity_in_another_trust_domain_is_rejected() {
    for driver in drivers() {
        let m = Managed::start("domain", driver);
        let leaf = m.ca.node(&m.dir.0, "other.test", "node-a");
        let _node = m.node_with("tok-a", &leaf);
        m.rejected("wrong_trust_domain");
        m.assert_nothing_registered();
    }
}

#[test]
fn a_plaintext_node_is_refused_by_an_mtls_edge() {
    for driver in drivers() {
        let m = Managed::start("plainnode", driver);
        let _node = m.node("tok-a", Vec::new());
        m.rejected("protocol_error");
        m.assert_nothing_registered();
    }
}

#[test]
fn the_node_refuses_an_edge_whose_certificate_names_another_host() {
    for driver in drivers() {
        let m = Managed::start("edgename", driver);
        let leaf = m.ca.node(&m.dir.0, TRUST_DOMAIN, "node-a");
        let mut args = pki::node_tls_args(&leaf, &m.ca_pem);
        *args.last_mut().unwrap() = "impostor.iop.test".into();
        let node = m.node("tok-a", args);
        node.log
            .wait_for(&["\"node_tls_failed\"", "\"reason\":\"wrong_edge_name\""]);
        m.assert_nothing_registered();
    }
}
