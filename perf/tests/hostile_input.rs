//! Hostile input on the Edge's network surfaces, end to end (real
//! `iop-edge` process, both I/O drivers): every read has a limit or a
//! deadline, and bad input gets a typed refusal, never a hang or a crash.
//!
//! - node socket under mTLS: a stalled or partial TLS handshake is closed at
//!   the registration deadline; non-TLS bytes and an oversize TLS record are
//!   refused at once;
//! - node socket in plain mode: an oversize frame prefix is refused before
//!   any allocation (`frame_error`);
//! - ingress: a JSON body nested past serde_json's recursion limit is a
//!   400, and too many header lines a 431; the Edge keeps serving.

mod managed;
mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use managed::pki::{self, Ca};
use managed::{Edge, Scratch, chat, http, mock, start_edge};
use support::stack::{drivers, read_some};

fn yaml(mock: std::net::SocketAddr, extra: &str) -> String {
    format!(
        r#"
listen:
  ingress: 127.0.0.1:0
  nodes: 127.0.0.1:0
link:
  register_timeout_ms: 300
nodes:
  - id: node-a
    token: tok-a
    providers:
      - id: oa
        kind: openai_compat
        base_url: http://{mock}
        targets: [m]
model_groups:
  - name: m
    providers: [oa]
{extra}"#
    )
}

/// An mTLS Edge with a 300 ms registration deadline.
fn mtls_edge(dir: &Scratch, driver: framing::io_driver::IoDriver) -> Edge {
    let ca = Ca::new("iop hostile CA");
    let ca_pem = ca.write(&dir.0, "ca.pem");
    let edge_leaf = ca.edge(&dir.0);
    let mock = mock();
    let yaml = yaml(mock.local_addr(), &pki::edge_tls_yaml(&edge_leaf, &ca_pem));
    // The mock only has to outlive the config check: no run is served here.
    drop(mock);
    start_edge(&dir.0, &yaml, driver, "info")
}

/// Sends `bytes` to the node socket, then waits until the Edge closes the
/// connection; returns what the Edge sent back.
fn send_and_wait_for_close(edge: &Edge, bytes: &[u8]) -> Vec<u8> {
    let mut socket = TcpStream::connect(&edge.nodes).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.write_all(bytes).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match read_some(&mut socket, &mut buf) {
            Ok(0) => return answer,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return answer,
            Err(e) => panic!("the Edge did not close the connection: {e}"),
        }
    }
}

#[test]
fn a_stalled_or_partial_tls_handshake_is_closed_at_the_registration_deadline() {
    for driver in drivers() {
        let dir = Scratch::new("hostile-stall", driver);
        let edge = mtls_edge(&dir, driver);
        // Nothing at all, then the first bytes of a ClientHello record.
        for bytes in [&b""[..], &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01][..]] {
            let answer = send_and_wait_for_close(&edge, bytes);
            assert!(answer.is_empty(), "{answer:?}");
        }
        edge.log.wait_count("\"reason\":\"handshake_timeout\"", 2);
        assert!(!edge.log.contains("\"node_registered\""));
    }
}

#[test]
fn non_tls_bytes_and_an_oversize_tls_record_are_refused_at_once() {
    for driver in drivers() {
        let dir = Scratch::new("hostile-garbage", driver);
        let edge = mtls_edge(&dir, driver);
        // A plaintext HTTP request, and a handshake record claiming 64 KiB
        // (TLS allows 16 KiB + 2048): refused from its 5-byte header.
        let inputs: [&[u8]; 2] = [
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
            &[0x16, 0x03, 0x03, 0xff, 0xff, 0x01, 0x00],
        ];
        for bytes in inputs {
            send_and_wait_for_close(&edge, bytes);
        }
        edge.log.wait_count("\"reason\":\"protocol_error\"", 2);
        assert!(!edge.log.contains("handshake_timeout"));
    }
}

#[test]
fn an_oversize_frame_prefix_on_the_plain_node_socket_is_refused_before_allocation() {
    for driver in drivers() {
        let dir = Scratch::new("hostile-frame", driver);
        let mock = mock();
        let edge = start_edge(&dir.0, &yaml(mock.local_addr(), ""), driver, "info");
        // A 4 GiB length prefix: refused from the prefix, never reserved.
        send_and_wait_for_close(&edge, &[0xff, 0xff, 0xff, 0xff, 0x0a]);
        edge.log
            .wait_for(&["\"node_connection_closed\"", "\"reason\":\"frame_error\""]);
    }
}

#[test]
fn ingress_refuses_json_nested_past_the_limit_and_too_many_headers_then_keeps_serving() {
    for driver in drivers() {
        let dir = Scratch::new("hostile-ingress", driver);
        let mock = mock();
        let edge = start_edge(&dir.0, &yaml(mock.local_addr(), ""), driver, "info");
        // 100 000 levels of nesting in 200 KB (serde_json stops at 128).
        let deep = format!(
            r#"{{"model":"m","messages":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let response = http(edge.ingress, "POST", "/v1/chat/completions", "", &deep);
        assert!(response.starts_with("HTTP/1.1 400"), "{}", &response[..120]);
        assert!(response.contains("\"error\""), "{response}");

        let many: String = (0..100).map(|i| format!("x-h{i}: v\r\n")).collect();
        let response = chat(&edge, "m", &many);
        assert!(response.starts_with("HTTP/1.1 431"), "{response}");

        // Still serving.
        let healthz = http(edge.ingress, "GET", "/healthz", "", "");
        assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
    }
}
