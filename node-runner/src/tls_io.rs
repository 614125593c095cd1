//! TLS over a monoio TCP socket, driven sans-IO through a
//! `rustls::Connection`: the handshake, a read of plaintext, and a flush
//! of the records rustls queued. The link to the Edge (F28) and `https://`
//! provider connections both run on these.
//!
//! ```text
//!   socket ──ciphertext──▶ CipherIn ──▶ rustls ──plaintext──▶ caller's buffer
//!   caller ──plaintext───▶ rustls (framing::tls::queue) ──▶ flush ──▶ socket
//! ```
//!
//! The record-layer steps are `framing::tls`, shared with the Edge; this
//! module only moves bytes between them and a socket. The session sits in
//! a `RefCell` borrowed only between awaits, never across one: the link's
//! reader and writer are separate tasks sharing one session, and dropping
//! either mid-way is then safe without `unsafe` (a split `monoio-rustls`
//! stream would alias one session through an `UnsafeCell`).
//!
//! The caller chooses how much ciphertext a socket read takes: the link a
//! fixed 64 KiB; a provider connection as much as the plaintext it has
//! room for, so a read of a large answer is as large as a plain one
//! (`monoio-rustls` read at most 16 KiB, one record, and an `https://`
//! tunnel sent frames eight times smaller than a plain one:
//! bench-results/profiles.md, round 55).

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;

use bytes::BytesMut;
use framing::tls::{self, CipherIn, Step};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use rustls::Connection;

use crate::iovec;

/// Runs a TLS handshake on `stream` to completion (no deadline: the caller
/// bounds it). Application data that arrives with the peer's last flight
/// stays buffered in the session. A failed step is `InvalidData` wrapping
/// rustls' error, after the alert rustls queued was sent; the peer closing
/// first is `UnexpectedEof`.
pub(crate) async fn handshake(stream: &mut TcpStream, session: &mut Connection) -> io::Result<()> {
    let mut cipher = Vec::with_capacity(HANDSHAKE_READ);
    let mut out = Vec::new();
    loop {
        out.clear();
        tls::gather(session, &mut out, usize::MAX)?;
        if !out.is_empty() {
            let (result, returned) = stream.write_all(out).await;
            out = returned;
            result?;
        }
        if !session.is_handshaking() {
            return Ok(());
        }
        cipher.clear();
        let (result, returned) = stream.read(cipher).await;
        cipher = returned;
        if result? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the connection during the TLS handshake",
            ));
        }
        if let Err(error) = tls::absorb_handshake(session, &cipher) {
            // Tell the peer why (the alert rustls queued), then fail.
            out.clear();
            if tls::gather(session, &mut out, usize::MAX).is_ok() && !out.is_empty() {
                let _ = stream.write_all(out).await;
            }
            return Err(error);
        }
    }
}

/// Ciphertext a handshake read takes at once: a server's whole flight
/// (certificates included) usually.
const HANDSHAKE_READ: usize = 16 * 1024;

/// Appends the plaintext that arrives to `buf`, after its bytes, at most
/// `room` bytes: what rustls already holds first, then what socket reads
/// of up to `cipher_read` bytes of ciphertext bring. Returns how many bytes
/// it appended; `Ok(0)` is the end of the stream, the peer's
/// `close_notify` or a TCP close without one (the caller's framing decides
/// whether a body was cut short).
///
/// Fewer than `room` bytes appended means rustls and `input` hold nothing
/// more: the next bytes must come from the socket.
pub(crate) async fn read<R: AsyncReadRent>(
    socket: &mut R,
    session: &RefCell<Connection>,
    input: &mut CipherIn,
    buf: &mut BytesMut,
    room: usize,
    cipher_read: usize,
) -> io::Result<usize> {
    let start = buf.len();
    loop {
        match input.step(&mut session.borrow_mut(), buf, start, room)? {
            Step::Done => return Ok(buf.len() - start),
            Step::Read => {}
        }
        let mut cipher = input.socket_buffer();
        cipher.reserve_exact(cipher_read);
        let (result, returned) = socket.read(cipher).await;
        input.read_into(returned);
        if result? == 0 {
            return Ok(0);
        }
    }
}

/// Writes out every TLS record rustls has queued. First straight from
/// rustls' buffers to the socket `fd`, one `sendmsg(2)` that does not wait
/// a call ([`iovec::SendNow`], on either driver): no copy. What the socket
/// does not take then goes gathered into `cipher`, up to `gather` bytes a
/// write, through the runtime, which waits for room. Returns whether the
/// socket took everything at once. `cipher` is scratch, kept for the next
/// flush.
pub(crate) async fn flush<W: AsyncWriteRent>(
    socket: &mut W,
    fd: RawFd,
    session: &RefCell<Connection>,
    cipher: &mut Vec<u8>,
    gather: usize,
) -> io::Result<bool> {
    if tls::send_queued(&mut session.borrow_mut(), &mut iovec::SendNow(fd))? {
        return Ok(true);
    }
    loop {
        let mut out = std::mem::take(cipher);
        out.clear();
        tls::gather(&mut session.borrow_mut(), &mut out, gather)?;
        if out.is_empty() {
            *cipher = out;
            return Ok(false);
        }
        let (result, returned) = socket.write_all(out).await;
        *cipher = returned;
        result?;
    }
}

#[cfg(test)]
mod tests {
    use framing::io_driver::IoDriver;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConnection, ServerConnection};

    use super::*;
    use crate::test_ca::TestCa;

    /// A client session (the provider client configuration) and a server
    /// session past their handshake, done in memory.
    fn sessions() -> (Connection, Connection) {
        let ca = TestCa::new("IOP test CA");
        let server = ca.server(&["provider.test"]);
        let client = ca.client_config();
        let name = ServerName::try_from("provider.test").unwrap();
        let mut client = Connection::Client(ClientConnection::new(client, name).unwrap());
        let mut server = Connection::Server(ServerConnection::new(server).unwrap());
        while client.is_handshaking() || server.is_handshaking() {
            let mut flight = Vec::new();
            tls::gather(&mut client, &mut flight, usize::MAX).unwrap();
            tls::absorb_handshake(&mut server, &flight).unwrap();
            flight.clear();
            tls::gather(&mut server, &mut flight, usize::MAX).unwrap();
            tls::absorb_handshake(&mut client, &flight).unwrap();
        }
        (client, server)
    }

    /// `message` as records from `from`, as the socket would carry them.
    fn records(from: &mut Connection, message: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut rest = message;
        while !rest.is_empty() {
            rest = &rest[tls::queue(from, &[rest]).unwrap()..];
            tls::gather(from, &mut wire, usize::MAX).unwrap();
        }
        wire
    }

    /// A read fills its room and no more, however the socket cuts the
    /// records; the rest waits for the next read; a short read means
    /// nothing is left but the socket; the socket's end is `Ok(0)`.
    #[test]
    fn a_read_fills_its_room_keeps_the_rest_and_ends_with_the_socket() {
        crate::runtime::block_on(IoDriver::Epoll, async {
            let (client, mut server) = sessions();
            let message: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
            let wire = records(&mut server, &message);
            // An in-memory socket: each read takes what its buffer holds.
            let mut socket: &[u8] = &wire;
            let session = RefCell::new(client);
            let mut input = CipherIn::with_capacity(0);
            let mut buf = BytesMut::from(&b"unparsed|"[..]);
            let rooms = [1, 5_000, 40_000, 70_000, 100_000];
            let cipher_reads = [17_000, 1_000, 64 * 1024];
            let mut turn = 0;
            loop {
                let room = rooms[turn % rooms.len()];
                let cipher_read = cipher_reads[turn % cipher_reads.len()];
                turn += 1;
                let before = buf.len();
                let n = read(
                    &mut socket,
                    &session,
                    &mut input,
                    &mut buf,
                    room,
                    cipher_read,
                )
                .await
                .unwrap();
                assert_eq!(n, buf.len() - before);
                assert!(n <= room, "{n} bytes for a room of {room}");
                if n == 0 {
                    break;
                }
                if n < room {
                    assert!(input.release(), "a short read left ciphertext behind");
                }
            }
            assert!(socket.is_empty());
            assert_eq!(&buf[..9], b"unparsed|", "appended after the bytes held");
            assert_eq!(&buf[9..], &message[..]);
        })
        .unwrap();
    }

    #[test]
    fn close_notify_reads_as_the_end() {
        crate::runtime::block_on(IoDriver::Epoll, async {
            let (client, mut server) = sessions();
            let mut wire = records(&mut server, b"last words");
            server.send_close_notify();
            tls::gather(&mut server, &mut wire, usize::MAX).unwrap();
            let mut socket: &[u8] = &wire;
            let session = RefCell::new(client);
            let mut input = CipherIn::with_capacity(1024);
            let mut buf = BytesMut::new();
            let n = read(&mut socket, &session, &mut input, &mut buf, 4096, 1024);
            assert_eq!(n.await.unwrap(), 10);
            let n = read(&mut socket, &session, &mut input, &mut buf, 4096, 1024);
            assert_eq!(n.await.unwrap(), 0);
            assert_eq!(&buf[..], b"last words");
        })
        .unwrap();
    }
}
