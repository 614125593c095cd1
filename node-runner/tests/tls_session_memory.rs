//! What a quiet `https://` provider connection's TLS session keeps in memory.
//!
//! A tunnel or run waiting on a provider over `https://` (a long prefill)
//! holds that connection's rustls session for as long as it waits; at
//! 10,000 such streams the sessions are most of the Node's memory
//! (`bench-results/README.md`, the 10k idle row). The Node frees its own
//! read buffers while a TLS connection is quiet (`provider_http::tls_stream`);
//! what is left is the session, and this test counts it: the product's
//! client configuration (`tls_client_config`), a handshake, a request and
//! its answer read in full, then every byte the session still holds,
//! counted by this binary's allocator. A change that kept more (a buffer
//! held across a quiet spell, a rustls upgrade that grows the session)
//! fails here instead of in a 10k ramp.
//!
//! Its own test binary: it installs framing's counting global allocator.

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConnection, Connection, ServerConfig, ServerConnection};

// framing's counting allocator, with what each thread holds (`live`).
#[path = "../../framing/tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::live;

/// The most a quiet session may hold. rustls 0.23.46 with the ring
/// provider keeps 7,977 bytes in 11 allocations: the session itself
/// (1,168 bytes, inline in the Node's `TlsStream`), its 4 KiB record
/// buffer (rustls keeps it at 4 KiB once it has read), a 560-byte record
/// key each way (the same size for every cipher suite), ~1.4 KB of key
/// schedule and state, two queues' 96 bytes each and the negotiated ALPN
/// name. An answer left unread in the session (2 KiB here) fails it.
const QUIET_SESSION_MAX: isize = 9 * 1024;

/// Sessions counted together (the figure is their mean).
const SESSIONS: usize = 50;

/// Moves what `from` has to send into `to`, as a socket would.
fn carry(from: &mut Connection, to: &mut Connection) {
    let mut wire = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut wire).unwrap();
    }
    let mut wire = &wire[..];
    while !wire.is_empty() {
        to.read_tls(&mut wire).unwrap();
        to.process_new_packets().unwrap();
    }
}

/// A server for `provider.test` and the Node's client configuration
/// trusting it (through the CA file, as `--provider-ca-file` does).
fn configs(dir: &std::path::Path) -> (Arc<rustls::ClientConfig>, Arc<ServerConfig>) {
    let cert = rcgen::generate_simple_self_signed(vec!["provider.test".to_owned()]).unwrap();
    let pem = dir.join("provider-ca.pem");
    std::fs::write(&pem, cert.cert.pem()).unwrap();
    let client = node_runner::provider_http::tls_client_config(Some(&pem)).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    (client, Arc::new(server))
}

/// A client session after its handshake, one request and its answer read
/// in full: a connection whose stream now waits on the provider.
fn quiet_session(
    client: &Arc<rustls::ClientConfig>,
    server: &Arc<ServerConfig>,
) -> Box<Connection> {
    let name = "provider.test".try_into().unwrap();
    let mut client = Connection::Client(ClientConnection::new(Arc::clone(client), name).unwrap());
    let mut server = Connection::Server(ServerConnection::new(Arc::clone(server)).unwrap());
    while client.is_handshaking() || server.is_handshaking() {
        carry(&mut client, &mut server);
        carry(&mut server, &mut client);
    }
    let mut buf = vec![0u8; 16 * 1024];
    client.writer().write_all(&[b'q'; 300]).unwrap();
    carry(&mut client, &mut server);
    assert_eq!(server.reader().read(&mut buf).unwrap(), 300);
    server.writer().write_all(&[b'a'; 2048]).unwrap();
    carry(&mut server, &mut client);
    assert_eq!(client.reader().read(&mut buf).unwrap(), 2048);
    assert!(!client.wants_write(), "nothing left to send");
    Box::new(client)
}

#[test]
fn a_quiet_provider_session_holds_under_9_kib() {
    let dir = tempfile::tempdir().unwrap();
    let (client, server) = configs(dir.path());
    let mut sessions: Vec<Box<Connection>> = (0..SESSIONS)
        .map(|_| quiet_session(&client, &server))
        .collect();
    // What the configurations keep (resumption tickets) stays when the
    // sessions go, and so does the list's own buffer (`clear`): only the
    // sessions' own memory is counted.
    let (bytes_held, blocks_held) = live();
    sessions.clear();
    let (bytes_after, blocks_after) = live();
    let per_session = (bytes_held - bytes_after) / SESSIONS as isize;
    let blocks = (blocks_held - blocks_after) as f64 / SESSIONS as f64;
    eprintln!("a quiet provider TLS session holds {per_session} bytes in {blocks:.1} allocations");
    assert!(
        per_session > 1024,
        "the count saw the sessions ({per_session} bytes each)"
    );
    assert!(
        per_session <= QUIET_SESSION_MAX,
        "a quiet session holds {per_session} bytes, over {QUIET_SESSION_MAX}: \
         10,000 quiet https streams would need {} MB of TLS state",
        per_session * 10_000 / 1_000_000
    );
}
