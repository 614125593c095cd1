//! TLS on the node link, sans-IO: the record-layer steps a link driver takes
//! around a `rustls::Connection` (F28).
//!
//! ```text
//!   socket ──ciphertext──▶ CipherIn ──▶ rustls ──▶ drain_plaintext ──▶ frame buffer
//!   frames ──plaintext───▶ queue ─────▶ rustls ──▶ send_queued ──────▶ socket
//!                                              └─▶ gather (the rest) ─▶ socket
//! ```
//!
//! rustls is itself sans-IO; these functions hold the loops both ends of
//! the link need so that the Edge and the Node drivers (each on its own
//! runtime code, DESIGN.md) only move bytes between these calls and their
//! sockets. Nothing here blocks or touches a socket.
//!
//! # Invariants
//! - [`feed_some`] (under [`CipherIn`]) stops handing rustls
//!   ciphertext once it holds more plaintext than it would take more
//!   beside, so rustls never refuses it; a `close_notify` ends the feed.
//! - [`queue`] hands rustls a write's slices at once: records are cut
//!   across them, not one (or more) a slice.
//! - [`send_queued`] writes rustls' records from its own buffers, never
//!   copied; only what the socket would not take at once is copied into a
//!   [`gather`] for a write that can wait.
//! - [`drain_plaintext`] appends after the buffer's current bytes (a
//!   partial frame is never overwritten), copying each plaintext byte once,
//!   and never more than it is asked for: [`CipherIn`] fills a read's room
//!   and no more, the rest waiting in rustls or as ciphertext.
//! - A failed handshake step ([`absorb_handshake`]) leaves the alert rustls
//!   queued for [`gather`], so the peer can be told why.

use std::io::{self, BufRead, IoSlice, Write};

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

/// Moves the plaintext rustls holds, up to `max` bytes, to the end of
/// `buf`; what is left stays in rustls for the next call.
///
/// Each of rustls' plaintext chunks is copied once, straight after `buf`'s
/// bytes: reading through `io::Read` would need the room zeroed first, and
/// zeroing the frame buffer's spare capacity a drain cost the Edge more
/// than decrypting (bench-results/profiles.md, round 31).
pub fn drain_plaintext(
    session: &mut Connection,
    buf: &mut BytesMut,
    max: usize,
) -> io::Result<Drained> {
    let mut reader = session.reader();
    let mut moved = 0;
    while moved < max {
        match reader.fill_buf() {
            Ok([]) => return Ok(Drained::CloseNotify),
            Ok(chunk) => {
                let n = chunk.len().min(max - moved);
                buf.extend_from_slice(&chunk[..n]);
                reader.consume(n);
                moved += n;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(Drained::More),
            Err(error) => return Err(error),
        }
    }
    Ok(Drained::More)
}

/// Plaintext rustls holds before it refuses more ciphertext (its received
/// plaintext limit, 16 KiB).
const PLAIN_HELD: usize = 16 * 1024;

/// Hands rustls ciphertext from `cipher` until it holds more than
/// `PLAIN_HELD` bytes of plaintext (past that it would refuse more) or
/// `cipher` is used up; returns how much it took. After the peer's
/// `close_notify` the rest is taken and ignored. A protocol error is
/// `InvalidData`.
pub fn feed_some(session: &mut Connection, cipher: &[u8]) -> io::Result<usize> {
    let mut rest = cipher;
    while !rest.is_empty() {
        let read = session.read_tls(&mut rest)?;
        let state = session
            .process_new_packets()
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        if read == 0 || state.peer_has_closed() {
            return Ok(cipher.len());
        }
        if state.plaintext_bytes_to_read() > PLAIN_HELD {
            break;
        }
    }
    Ok(cipher.len() - rest.len())
}

/// Ciphertext a link reads from its socket, and how much of it rustls has
/// taken: between two socket reads, a TLS link's reader.
///
/// [`step`](Self::step) fills a read's room with plaintext as a socket
/// read fills a plain link's: never past it (a frame buffer reserved for
/// the rest of a frame is not outgrown, and so not copied into a larger
/// one), the rest kept in rustls or in the ciphertext not yet handed over.
#[derive(Debug)]
pub struct CipherIn {
    cipher: Vec<u8>,
    fed: usize,
}

/// What [`CipherIn::step`] needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The read is done: its plaintext is in the buffer (none: the peer
    /// sent `close_notify`).
    Done,
    /// Nothing to hand over: read ciphertext from the socket
    /// ([`CipherIn::socket_buffer`]), then step again.
    Read,
}

impl CipherIn {
    /// A reader whose socket reads take at most `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            cipher: Vec::with_capacity(capacity),
            fed: 0,
        }
    }

    /// Appends plaintext to `buf` until `room` bytes past `start` (where
    /// the read's bytes begin) are filled, or nothing more is at hand with
    /// some already appended, or the peer has closed.
    pub fn step(
        &mut self,
        session: &mut Connection,
        buf: &mut BytesMut,
        start: usize,
        room: usize,
    ) -> io::Result<Step> {
        loop {
            let got = buf.len() - start;
            let drained = drain_plaintext(session, buf, room.saturating_sub(got))?;
            let got = buf.len() - start;
            if got >= room || drained == Drained::CloseNotify {
                return Ok(Step::Done);
            }
            if self.fed < self.cipher.len() {
                self.fed += feed_some(session, &self.cipher[self.fed..])?;
            } else if got > 0 {
                return Ok(Step::Done);
            } else {
                return Ok(Step::Read);
            }
        }
    }

    /// The ciphertext buffer, emptied, for the next socket read (after
    /// [`Step::Read`]: everything in it was handed over).
    pub fn socket_buffer(&mut self) -> Vec<u8> {
        let mut cipher = std::mem::take(&mut self.cipher);
        cipher.clear();
        self.fed = 0;
        cipher
    }

    /// Takes back the buffer of a socket read, with what it read.
    pub fn read_into(&mut self, cipher: Vec<u8>) {
        self.cipher = cipher;
        self.fed = 0;
    }

    /// Whether the last socket read filled the buffer it was given: the
    /// socket likely holds more (a reader that appended less than its room
    /// may read on at once).
    pub fn last_read_filled(&self) -> bool {
        !self.cipher.is_empty() && self.cipher.len() == self.cipher.capacity()
    }

    /// The ciphertext buffer's capacity: what this reader holds in memory.
    pub fn capacity(&self) -> usize {
        self.cipher.capacity()
    }

    /// Frees the ciphertext buffer if rustls has taken all of it (a reader
    /// about to wait on a quiet socket need not hold one); returns whether
    /// it did. The next [`socket_buffer`](Self::socket_buffer) is then
    /// empty, without capacity: the caller reserves what it reads.
    pub fn release(&mut self) -> bool {
        if self.fed < self.cipher.len() {
            return false;
        }
        self.cipher = Vec::new();
        self.fed = 0;
        true
    }
}

/// Most slices handed to rustls at once by [`queue`].
const QUEUE_SLICES: usize = 64;

/// Queues the bytes of `slices`, in order, for encryption; returns how many
/// rustls took, from the first slice on (it may stop inside one). rustls
/// cuts records across the slices, so a frame's header and its body, or
/// several frames, share a record: one slice at a time, every slice (a
/// 10-byte header too) was a record of its own, with its own AEAD call
/// and 22 bytes of overhead. At most `QUEUE_SLICES` slices a call. `0`
/// for non-empty slices means rustls' send buffer is full: [`gather`] and
/// write the ciphertext out, then queue the rest.
pub fn queue<B: AsRef<[u8]>>(session: &mut Connection, slices: &[B]) -> io::Result<usize> {
    let mut io = [IoSlice::new(&[]); QUEUE_SLICES];
    let count = slices.len().min(QUEUE_SLICES);
    for (to, from) in io.iter_mut().zip(slices) {
        *to = IoSlice::new(from.as_ref());
    }
    session.writer().write_vectored(&io[..count])
}

/// Moves queued TLS records into `out` until none are left or `out` holds
/// `limit` bytes or more. An empty `out` afterwards means nothing to send.
pub fn gather(session: &mut Connection, out: &mut Vec<u8>, limit: usize) -> io::Result<()> {
    while session.wants_write() && out.len() < limit {
        session.write_tls(out)?;
    }
    Ok(())
}

/// Hands the TLS records rustls has queued to `socket` as they lie in
/// rustls' own buffers: one vectored write of up to 64 records a call, no
/// copy into a gather. Stops when none are left, when `socket` takes
/// nothing (`Ok(0)` or `WouldBlock`), or after a write it took only part
/// of (the next would find it full). Returns whether none are left; the
/// rest, if any, goes out through [`gather`] and a write that can wait.
/// `socket`'s other errors are returned.
pub fn send_queued<W: Write>(session: &mut Connection, socket: &mut W) -> io::Result<bool> {
    let mut socket = Counting {
        inner: socket,
        offered: 0,
    };
    while session.wants_write() {
        match session.write_tls(&mut socket) {
            Ok(n) if n > 0 && n == socket.offered => {}
            Ok(_) => break,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
            Err(error) => return Err(error),
        }
    }
    Ok(!session.wants_write())
}

/// A writer that remembers how many bytes its last write was offered, so
/// [`send_queued`] can tell a partial write from a whole one.
struct Counting<'a, W> {
    inner: &'a mut W,
    offered: usize,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.offered = buf.len();
        self.inner.write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.offered = bufs.iter().map(|b| b.len()).sum();
        self.inner.write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
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

    /// Hands all of `cipher` to rustls, moving the plaintext into `buf` as
    /// it goes (the transports read through [`CipherIn`]; the tests feed
    /// whole wires).
    fn feed(session: &mut Connection, mut cipher: &[u8], buf: &mut BytesMut) -> io::Result<()> {
        while !cipher.is_empty() {
            let fed = feed_some(session, cipher)?;
            cipher = &cipher[fed..];
            if drain_plaintext(session, buf, usize::MAX)? == Drained::CloseNotify {
                return Ok(());
            }
        }
        Ok(())
    }

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
            let n = queue(&mut client, &[rest]).unwrap();
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
    fn slices_share_records_and_cross_whole_and_in_order() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        // A frame's header and body, and a second small frame: one record.
        let small: [&[u8]; 3] = [b"header", b"body of the first frame", b"second"];
        let total: usize = small.iter().map(|s| s.len()).sum();
        assert_eq!(queue(&mut client, &small).unwrap(), total);
        let cipher = wire(&mut client);
        // TLS 1.3: a 5-byte header, the content type and a 16-byte tag.
        assert_eq!(cipher.len(), total + 22, "one record for the three");
        let mut received = BytesMut::new();
        feed(&mut server, &cipher, &mut received).unwrap();
        assert_eq!(&received[..], &small.concat()[..]);

        // More slices than a call takes and more bytes than rustls buffers:
        // each call takes a prefix, cut anywhere, and the rest follows.
        let slices: Vec<Vec<u8>> = (0..100u32)
            .map(|i| (0..(i * 97 % 9_000 + 1)).map(|j| (i + j) as u8).collect())
            .collect();
        let mut rest: Vec<&[u8]> = slices.iter().map(Vec::as_slice).collect();
        let mut received = BytesMut::new();
        while !rest.is_empty() {
            let mut n = queue(&mut client, &rest).unwrap();
            assert!(n > 0, "rustls took nothing with its buffer drained");
            while n > 0 {
                let taken = n.min(rest[0].len());
                rest[0] = &rest[0][taken..];
                n -= taken;
                if rest[0].is_empty() {
                    rest.remove(0);
                }
            }
            let cipher = wire(&mut client);
            feed(&mut server, &cipher, &mut received).unwrap();
        }
        assert_eq!(&received[..], &slices.concat()[..]);
    }

    #[test]
    fn a_reader_fills_each_room_and_no_more_then_sees_close_notify() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        let message: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let mut wire_bytes = Vec::new();
        let mut rest = &message[..];
        while !rest.is_empty() {
            let n = queue(&mut client, &[rest]).unwrap();
            rest = &rest[n..];
            wire_bytes.extend(wire(&mut client));
        }
        client.send_close_notify();
        wire_bytes.extend(wire(&mut client));

        // Socket reads of uneven sizes, rooms from one byte to more than a
        // socket read brings.
        let mut socket = &wire_bytes[..];
        let mut reader = CipherIn::with_capacity(64 * 1024);
        let mut received = BytesMut::from(&b"partial frame|"[..]);
        let rooms = [1, 100, 4096, 20_000, 70_000, 16_384, 7];
        let reads = [5, 70_000, 17_000, 300, 64 * 1024];
        let (mut turn, mut read_turn) = (0, 0);
        loop {
            let start = received.len();
            let room = rooms[turn % rooms.len()];
            turn += 1;
            let step = reader
                .step(&mut server, &mut received, start, room)
                .unwrap();
            let got = received.len() - start;
            assert!(got <= room, "{got} bytes for a room of {room}");
            match step {
                Step::Done if got == 0 => break,
                Step::Done => assert!(got > 0),
                Step::Read => {
                    assert_eq!(got, 0);
                    let mut cipher = reader.socket_buffer();
                    let n = reads[read_turn % reads.len()].min(socket.len());
                    read_turn += 1;
                    assert!(n > 0, "the reader asked for more after close_notify");
                    cipher.extend_from_slice(&socket[..n]);
                    socket = &socket[n..];
                    reader.read_into(cipher);
                }
            }
        }
        assert_eq!(&received[..14], b"partial frame|");
        assert_eq!(&received[14..], &message[..]);
    }

    #[test]
    fn a_reader_frees_its_buffer_only_when_rustls_took_all_of_it() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        // More than rustls holds decrypted at once (16 KiB): a small room
        // leaves ciphertext not yet handed over.
        let message: Vec<u8> = (0..40_000u32).map(|i| (i % 249) as u8).collect();
        let mut cipher = Vec::new();
        let mut rest = &message[..];
        while !rest.is_empty() {
            rest = &rest[queue(&mut client, &[rest]).unwrap()..];
            cipher.extend(wire(&mut client));
        }
        let mut reader = CipherIn::with_capacity(1024);
        let mut received = BytesMut::new();
        assert_eq!(
            reader.step(&mut server, &mut received, 0, 100).unwrap(),
            Step::Read
        );
        let mut buffer = reader.socket_buffer();
        buffer.extend_from_slice(&cipher);
        reader.read_into(buffer);
        assert_eq!(
            reader.step(&mut server, &mut received, 0, 100).unwrap(),
            Step::Done
        );
        assert!(!reader.release(), "ciphertext is left to hand over");
        assert_eq!(
            reader
                .step(&mut server, &mut received, 100, message.len())
                .unwrap(),
            Step::Done
        );
        assert_eq!(&received[..], &message[..]);
        assert!(reader.release(), "everything was handed over");
        assert_eq!(reader.capacity(), 0, "freed");
    }

    /// A socket that takes at most `room` bytes in all, then says
    /// `WouldBlock`; it keeps what it took and counts its writes.
    struct Socket {
        room: usize,
        took: Vec<u8>,
        writes: usize,
    }

    impl Write for Socket {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.write_vectored(&[IoSlice::new(buf)])
        }

        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            self.writes += 1;
            if self.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let before = self.took.len();
            for buf in bufs {
                let n = buf.len().min(self.room - (self.took.len() - before));
                self.took.extend_from_slice(&buf[..n]);
            }
            let n = self.took.len() - before;
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn queued_records_go_to_the_socket_as_they_lie_and_the_rest_by_gather() {
        let message: Vec<u8> = (0..60_000u32).map(|i| (i % 247) as u8).collect();
        // Room for everything; for part of one write; for nothing.
        for room in [usize::MAX, 10_000, 0] {
            let (mut client, mut server) = pair();
            handshake(&mut client, &mut server);
            assert_eq!(queue(&mut client, &[&message[..]]).unwrap(), message.len());
            let mut socket = Socket {
                room,
                took: Vec::new(),
                writes: 0,
            };
            let all_sent = send_queued(&mut client, &mut socket).unwrap();
            assert_eq!(all_sent, room == usize::MAX, "room {room}");
            assert_eq!(all_sent, !client.wants_write(), "room {room}");
            // One vectored write of every record (fewer than 64): a
            // socket that took part of it, or none, is not tried again.
            assert_eq!(socket.writes, 1, "room {room}");
            if room != usize::MAX {
                assert_eq!(socket.took.len(), room, "took all the room it had");
            }
            let mut bytes = socket.took;
            bytes.extend(wire(&mut client));
            let mut received = BytesMut::new();
            feed(&mut server, &bytes, &mut received).unwrap();
            assert_eq!(&received[..], &message[..], "room {room}");
        }
    }

    #[test]
    fn a_socket_error_is_returned_and_the_records_kept() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        queue(&mut client, &[&b"kept"[..]]).unwrap();
        let error = send_queued(&mut client, &mut Broken).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        let mut received = BytesMut::new();
        feed(&mut server, &wire(&mut client), &mut received).unwrap();
        assert_eq!(&received[..], b"kept");
    }

    #[test]
    fn close_notify_ends_the_stream() {
        let (mut client, mut server) = pair();
        handshake(&mut client, &mut server);
        queue(&mut server, &[&b"last words"[..]]).unwrap();
        server.send_close_notify();
        let cipher = wire(&mut server);
        let mut received = BytesMut::new();
        feed(&mut client, &cipher, &mut received).unwrap();
        assert_eq!(&received[..], b"last words");
        assert_eq!(
            drain_plaintext(&mut client, &mut received, usize::MAX).unwrap(),
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
