//! TLS on the node link, sans-IO: the record-layer steps a link driver takes
//! around a `rustls::Connection` (F28).
//!
//! ```text
//!   socket ──ciphertext──▶ feed ──▶ rustls ──▶ drain_plaintext ──▶ frame buffer
//!   frames ──plaintext───▶ queue ─▶ rustls ──▶ gather ───────────▶ socket
//! ```
//!
//! rustls is itself sans-IO; these functions hold the loops both ends of
//! the link need so that the Edge and the Node drivers (each on its own
//! runtime code, DESIGN.md) only move bytes between these calls and their
//! sockets. Nothing here blocks or touches a socket.
//!
//! # Invariants
//! - [`feed`] drains plaintext as it goes, so rustls' bounded plaintext
//!   buffer never refuses ciphertext, and a `close_notify` ends the feed.
//! - [`drain_plaintext`] appends after the buffer's current bytes (a
//!   partial frame is never overwritten), copying each plaintext byte once.
//! - A failed handshake step ([`absorb_handshake`]) leaves the alert rustls
//!   queued for [`gather`], so the peer can be told why.

use std::io::{self, BufRead, Write};

use bytes::BytesMut;
use rustls::Connection;

/// What [`drain_plaintext`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// rustls has no more plaintext now: read more ciphertext.
    More,
    /// The peer sent `close_notify`: the stream has ended cleanly.
    CloseNotify,
}

/// Moves every decrypted byte rustls holds to the end of `buf`.
///
/// Each of rustls' plaintext chunks is copied once, straight after `buf`'s
/// bytes: reading through `io::Read` would need the room zeroed first, and
/// zeroing the frame buffer's spare capacity a drain cost the Edge more
/// than decrypting (bench-results/profiles.md, round 31).
pub fn drain_plaintext(session: &mut Connection, buf: &mut BytesMut) -> io::Result<Drained> {
    let mut reader = session.reader();
    loop {
        match reader.fill_buf() {
            Ok([]) => return Ok(Drained::CloseNotify),
            Ok(chunk) => {
                let n = chunk.len();
                buf.extend_from_slice(chunk);
                reader.consume(n);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(Drained::More),
            Err(error) => return Err(error),
        }
    }
}

/// Hands `cipher` (bytes read from the socket) to rustls, moving the
/// plaintext into `buf` as it goes. A protocol error is `InvalidData`.
pub fn feed(session: &mut Connection, mut cipher: &[u8], buf: &mut BytesMut) -> io::Result<()> {
    while !cipher.is_empty() {
        session.read_tls(&mut cipher)?;
        session
            .process_new_packets()
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        if drain_plaintext(session, buf)? == Drained::CloseNotify {
            return Ok(());
        }
    }
    Ok(())
}

/// Queues plaintext for encryption; returns how much rustls took. `0` for
/// a non-empty `plain` means its send buffer is full: [`gather`] and write
/// the ciphertext out, then queue the rest.
pub fn queue(session: &mut Connection, plain: &[u8]) -> io::Result<usize> {
    session.writer().write(plain)
}

/// Moves queued TLS records into `out` until none are left or `out` holds
/// `limit` bytes or more. An empty `out` afterwards means nothing to send.
pub fn gather(session: &mut Connection, out: &mut Vec<u8>, limit: usize) -> io::Result<()> {
    while session.wants_write() && out.len() < limit {
        session.write_tls(out)?;
    }
    Ok(())
}

/// One handshake step: hands `cipher` read during the handshake to rustls.
/// On error the handshake has failed (`InvalidData`); the alert rustls
/// queued for the peer is left for [`gather`].
pub fn absorb_handshake(session: &mut Connection, mut cipher: &[u8]) -> io::Result<()> {
    while !cipher.is_empty() {
        session.read_tls(&mut cipher)?;
        session
            .process_new_packets()
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

    use super::*;

    /// A client and a server session for "link.test", trusting one
    /// self-signed certificate made now.
    fn pair() -> (Connection, Connection) {
        pair_expecting("link.test")
    }

    /// As [`pair`], the client expecting the server to be `expected`.
    fn pair_expecting(expected: &'static str) -> (Connection, Connection) {
        let cert = rcgen::generate_simple_self_signed(vec!["link.test".to_owned()]).unwrap();
        let der = cert.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(der).unwrap();
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from(expected).unwrap();
        (
            Connection::Client(ClientConnection::new(Arc::new(client), name).unwrap()),
            Connection::Server(ServerConnection::new(Arc::new(server)).unwrap()),
        )
    }

    /// Everything `from` has queued, as the bytes a socket would carry.
    fn wire(from: &mut Connection) -> Vec<u8> {
        let mut out = Vec::new();
        gather(from, &mut out, usize::MAX).unwrap();
        out
    }

    fn handshake(client: &mut Connection, server: &mut Connection) {
        while client.is_handshaking() || server.is_handshaking() {
            let to_server = wire(client);
            absorb_handshake(server, &to_server).unwrap();
            let to_client = wire(server);
            absorb_handshake(client, &to_client).unwrap();
        }
    }

    #[test]
    fn a_handshake_then_frames_cross_whole_and_in_order() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        // More than rustls buffers at once: queue refuses, gather makes room.
        let message: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut rest = &message[..];
        let mut received = BytesMut::from(&b"partial frame|"[..]);
        while !rest.is_empty() {
            let n = queue(&mut client, rest).unwrap();
            rest = &rest[n..];
            let cipher = wire(&mut client);
            feed(&mut server, &cipher, &mut received).unwrap();
        }
        let cipher = wire(&mut client);
        feed(&mut server, &cipher, &mut received).unwrap();
        assert_eq!(
            &received[..14],
            b"partial frame|",
            "appended after the partial frame"
        );
        assert_eq!(&received[14..], &message[..]);
    }

    #[test]
    fn close_notify_ends_the_stream() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        queue(&mut server, b"last words").unwrap();
        server.send_close_notify();
        let cipher = wire(&mut server);
        let mut received = BytesMut::new();
        feed(&mut client, &cipher, &mut received).unwrap();
        assert_eq!(&received[..], b"last words");
        assert_eq!(
            drain_plaintext(&mut client, &mut received).unwrap(),
            Drained::CloseNotify
        );
    }

    #[test]
    fn a_failed_handshake_step_is_invalid_data_and_leaves_an_alert_to_send() {
        let (mut client, mut server) = pair_expecting("another.test");
        let hello = wire(&mut client);
        absorb_handshake(&mut server, &hello).unwrap();
        let flight = wire(&mut server);
        let error = absorb_handshake(&mut client, &flight).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(!wire(&mut client).is_empty(), "an alert for the peer");
    }

    #[test]
    fn garbage_after_the_handshake_is_invalid_data() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        let mut received = BytesMut::new();
        let error = feed(
            &mut server,
            &[0x17, 0x03, 0x03, 0x00, 0x03, 9, 9, 9],
            &mut received,
        )
        .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(received.is_empty());
    }
}
