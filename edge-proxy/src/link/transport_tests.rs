//! The link transport over real loopback sockets, under both I/O drivers:
//! over TLS, bytes arrive whole and in order across many records and past
//! rustls' send buffer, `close_notify` is a clean end, and a pending read
//! ends with the link's close signal; a heartbeat overtakes a batch the socket cannot take;
//! a busy plain link takes waiting bytes at once every other read, and
//! writes at once while its socket has room.

use std::sync::Arc;

use crate::runtime::{drivers, waited};
use bytes::{Bytes, BytesMut};
use framing::close::CloseSignal;
use framing::io_driver::IoDriver;
use monoio::net::{TcpListener, TcpStream};
use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use super::*;

/// A self-signed `edge.test` server and a client that trusts it.
fn configs() -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["edge.test".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der: CertificateDer<'static> = cert.der().clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

/// A connected (server, client) pair of TLS link streams.
async fn pair() -> (LinkStream, LinkStream) {
    let (server_config, client_config) = configs();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = monoio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut session = rustls::Connection::from(ServerConnection::new(server_config).unwrap());
        handshake(&mut tcp, &mut session).await.unwrap();
        LinkStream::Tls(tcp, Box::new(session))
    });
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("edge.test").unwrap();
    let mut session = rustls::Connection::from(ClientConnection::new(client_config, name).unwrap());
    handshake(&mut tcp, &mut session).await.unwrap();
    (server.await, LinkStream::Tls(tcp, Box::new(session)))
}

#[test]
fn bytes_cross_whole_and_in_order_then_close_notify_ends_the_stream() {
    for driver in drivers() {
        crate::runtime::block_on(driver, async {
            let (server, client) = pair().await;
            let (mut reader, _server_writer) = server.into_split();
            let (_client_reader, mut writer) = client.into_split();
            // 300 slices of 1 KiB .. 2.2 KiB: ~500 KiB, many records, and
            // more than rustls buffers before a flush.
            let slices: Vec<Bytes> = (0..300u32)
                .map(|i| {
                    let len = 1024 + (i as usize * 4);
                    Bytes::from((0..len).map(|j| (i as usize + j) as u8).collect::<Vec<_>>())
                })
                .collect();
            let expected: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
            let sending = monoio::spawn(async move {
                writer.write_all(slices).await.unwrap();
                writer.shutdown().await.unwrap();
            });
            let mut buf = BytesMut::new();
            loop {
                if buf.capacity() - buf.len() < 4096 {
                    buf.reserve(4096);
                }
                let (result, returned) = reader.read(buf).await;
                buf = returned;
                if result.unwrap() == 0 {
                    break;
                }
            }
            sending.await;
            assert_eq!(buf.len(), expected.len(), "{driver:?}");
            assert!(buf[..] == expected[..], "{driver:?}: bytes differ");
        })
        .unwrap();
    }
}

#[test]
fn a_pending_tls_read_ends_with_the_close_signal() {
    for driver in drivers() {
        crate::runtime::block_on(driver, async {
            let (server, _client) = pair().await;
            let (mut reader, _writer) = server.into_split();
            let close = CloseSignal::new();
            let signal = close.clone();
            // Runs once this task is parked in its read (no data is coming).
            monoio::spawn(async move { signal.signal() });
            let read = close.or_close(reader.read(BytesMut::with_capacity(4096)));
            assert!(read.await.is_none(), "{driver:?}: the signal ends the read");
        })
        .unwrap();
    }
}

/// A connected (server, client) pair of plain TCP link streams.
async fn plain_pair() -> (LinkStream, LinkStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = monoio::spawn(async move { listener.accept().await.unwrap().0 });
    let client = TcpStream::connect(addr).await.unwrap();
    (LinkStream::Plain(server.await), LinkStream::Plain(client))
}

/// A connected pair, TLS or plain: the server's writer, its unsent bytes
/// bounded as a link's are, and the client's reader; then the two halves
/// the test does not use, kept open.
async fn writer_and_reader(tls: bool) -> (LinkWriter, LinkReader, (LinkReader, LinkWriter)) {
    let (server, client) = if tls {
        pair().await
    } else {
        plain_pair().await
    };
    limit_unsent(server.tcp()).unwrap();
    let (server_reader, writer) = server.into_split();
    let (reader, client_writer) = client.into_split();
    (writer, reader, (server_reader, client_writer))
}

#[test]
fn a_heartbeat_overtakes_a_batch_the_socket_cannot_take_at_once() {
    use framing::frame::{FrameDecoder, FrameEncoder};
    use framing::write_batch::WriteBatch;
    use proto::Envelope;
    use proto::v1::HeartbeatPong;
    use proto::v1::envelope::Msg;

    for driver in drivers() {
        for tls in [false, true] {
            crate::runtime::block_on(driver, async move {
                let (mut writer, mut reader, _rest) = writer_and_reader(tls).await;
                // 256 body frames of 64 KiB: 16 MiB, far more than the
                // kernel takes before the peer reads.
                let mut encoder = FrameEncoder::new(1 << 20);
                let mut batch = WriteBatch::new();
                let frames = 256;
                for i in 0..frames {
                    let body = Bytes::from(vec![i as u8; 64 * 1024]);
                    batch.push(framing::link::Outgoing::Body(
                        encoder.encode_tunnel_body(1, body).unwrap(),
                    ));
                }
                let pong = encoder
                    .encode(&Envelope {
                        stream_id: 0,
                        msg: Some(Msg::HeartbeatPong(HeartbeatPong { seq: 7 })),
                    })
                    .unwrap();
                // The pong is queued before the writer starts; it goes out
                // after the first partial write, between two frames.
                let (urgent_tx, mut urgent) = local_sync::mpsc::unbounded::channel();
                urgent_tx.send(pong).unwrap();
                let mut slices = batch.take();
                let sending = monoio::spawn(async move {
                    writer
                        .write_overtaking(&mut slices, &mut urgent)
                        .await
                        .unwrap();
                    writer.shutdown().await.unwrap();
                });
                let mut decoder = FrameDecoder::new(1 << 20);
                let mut buf = BytesMut::new();
                let mut seen = Vec::new();
                loop {
                    if buf.capacity() - buf.len() < 64 * 1024 {
                        buf.reserve(256 * 1024);
                    }
                    let (result, returned) = reader.read(buf).await;
                    buf = returned;
                    // Every frame decodes: the pong went in at a boundary.
                    while let Some(envelope) = decoder.decode(&mut buf).unwrap() {
                        seen.push(matches!(envelope.msg, Some(Msg::HeartbeatPong(_))));
                    }
                    if result.unwrap() == 0 {
                        break;
                    }
                }
                sending.await;
                let context = format!("{driver:?}, tls {tls}");
                assert_eq!(seen.len(), frames + 1, "{context}: every frame arrived");
                let at = seen
                    .iter()
                    .position(|&pong| pong)
                    .expect("the pong arrived");
                assert!(
                    at < frames / 2,
                    "{context}: the pong came after {at} of {frames} body frames"
                );
            })
            .unwrap();
        }
    }
}

#[test]
fn a_busy_link_takes_waiting_bytes_at_once_every_other_read() {
    // On io_uring a read is a ring operation, answered on a later turn of
    // the loop; after a read that filled its room, waiting bytes are taken
    // at once every other read (`recv_now`), so the reader still yields its
    // turn. The epoll driver reads at once whenever bytes wait.
    const ROOM: usize = 4096;
    for driver in drivers() {
        crate::runtime::block_on(driver, async move {
            let (server, client) = plain_pair().await;
            let (mut reader, _server_writer) = server.into_split();
            let (_client_reader, mut writer) = client.into_split();
            let sent: Vec<u8> = (0..8 * ROOM).map(|i| (i % 251) as u8).collect();
            writer
                .write_all(vec![Bytes::from(sent.clone())])
                .await
                .unwrap();
            // The first read waits for its turn and fills its room.
            let (result, mut buf) = reader.read(BytesMut::with_capacity(ROOM)).await;
            assert_eq!(result.unwrap(), buf.capacity(), "{driver:?}");
            let mut waits = Vec::new();
            while buf.len() < sent.len() {
                buf.reserve(ROOM);
                let ((result, returned), waited) = waited(reader.read(buf)).await;
                buf = returned;
                assert!(result.unwrap() > 0, "{driver:?}");
                waits.push(waited);
            }
            // Appended after what the buffer held, in order.
            assert_eq!(&buf[..], &sent[..], "{driver:?}");
            assert!(waits.len() >= 3, "{driver:?}: {waits:?}");
            if driver == IoDriver::Uring {
                // Every other read: at once right after the first.
                let expected: Vec<bool> = (0..waits.len()).map(|i| i % 2 == 1).collect();
                assert_eq!(waits, expected, "true = the read waited for its turn");
            } else {
                assert!(waits.iter().all(|waited| !waited), "{waits:?}");
            }
        })
        .unwrap();
    }
}

#[test]
fn link_writes_go_out_at_once_while_the_socket_has_room() {
    // On io_uring a write is a ring operation, answered on a later turn of
    // the loop; while the socket has room the writer offers it at once
    // (`iovec::sent_now`), plain or TLS. The epoll driver writes at once by
    // itself once it knows the socket is writable (not before its first
    // wait).
    for (driver, tls) in drivers().into_iter().flat_map(|d| [(d, false), (d, true)]) {
        crate::runtime::block_on(driver, async move {
            let (mut writer, mut reader, _rest) = writer_and_reader(tls).await;
            let small = || WriteSlices::from(vec![Bytes::from_static(b"frame")]);
            let (whole, waited_) = waited(writer.write_some(&mut small())).await;
            assert!(whole.unwrap(), "{driver:?}, tls {tls}");
            let uring = driver == IoDriver::Uring;
            assert!(
                !(uring && waited_),
                "tls {tls}: a small write waited for its turn"
            );

            // More than the socket takes: the first write takes what fits,
            // at once; the rest waits for room through the runtime while a
            // reader drains the other end.
            let big: Vec<u8> = (0..16 << 20).map(|i| (i % 251) as u8).collect();
            let expected = [&b"frame"[..], &big[..]].concat();
            let draining = monoio::spawn(async move {
                let mut buf = BytesMut::with_capacity(expected.len() + 4096);
                while buf.len() < expected.len() {
                    buf.reserve(64 * 1024);
                    let (result, returned) = reader.read(buf).await;
                    buf = returned;
                    assert!(result.unwrap() > 0, "the link ended early");
                }
                assert!(buf[..] == expected[..], "bytes lost or out of order");
                reader
            });
            let mut slices = WriteSlices::from(vec![Bytes::from(big)]);
            let mut waits = Vec::new();
            while !slices.is_empty() {
                let (whole, waited_) = waited(writer.write_some(&mut slices)).await;
                whole.unwrap();
                waits.push(waited_);
            }
            let mut reader = draining.await;
            assert!(waits.len() >= 2, "{driver:?}: {waits:?}");
            if uring && !tls {
                // At once first; after a partial write, through the ring
                // until a write goes out whole. (Under TLS each write is a
                // 64 KiB gather, each flush offered at once first.)
                let expected: Vec<bool> = (0..waits.len()).map(|i| i > 0).collect();
                assert_eq!(waits, expected, "true = the write waited for its turn");
            }

            // Drained, and the last write went out whole: at once again.
            let (whole, waited_) = waited(writer.write_some(&mut small())).await;
            assert!(whole.unwrap(), "{driver:?}, tls {tls}");
            assert!(
                !waited_,
                "{driver:?}, tls {tls}: a small write waited for its turn"
            );
            let (result, buf) = reader.read(BytesMut::with_capacity(64)).await;
            assert_eq!(result.unwrap(), 5, "{driver:?}, tls {tls}");
            assert_eq!(&buf[..], b"frame", "{driver:?}, tls {tls}");
        })
        .unwrap();
    }
}
