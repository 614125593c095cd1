//! The plain link's writer over a real loopback socket, under both I/O
//! drivers: writes go out at once while the socket has room, through the
//! runtime once it is full, and every byte arrives in order.

use framing::io_driver::IoDriver;
use monoio::net::TcpListener;

use super::*;
use crate::runtime::{block_on, waited};

#[test]
fn link_writes_go_out_at_once_while_the_socket_has_room() {
    // On io_uring a write is a ring operation, answered on a later turn of
    // the loop; while the socket has room the writer offers it at once
    // (`iovec::sent_now`). The epoll driver writes at once by itself once
    // it knows the socket is writable (not before its first wait).
    let mut drivers = vec![IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        drivers.push(IoDriver::Uring);
    }
    for driver in drivers {
        block_on(driver, async move {
            let uring = driver == IoDriver::Uring;
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let accepting = monoio::spawn(async move { listener.accept().await.unwrap().0 });
            let ours = TcpStream::connect(addr).await.unwrap();
            let theirs = accepting.await;
            limit_unsent(&ours).unwrap();
            let (_our_reader, mut writer) = LinkStream::Plain(ours).into_split();
            let (mut reader, _their_writer) = LinkStream::Plain(theirs).into_split();
            let small = || WriteSlices::from(vec![Bytes::from_static(b"frame")]);
            let (whole, waited_) = waited(writer.write_some(&mut small())).await;
            assert!(whole.unwrap(), "{driver:?}");
            assert!(!(uring && waited_), "a small write waited for its turn");

            // More than the socket takes: what fits goes at once, the rest
            // through the runtime while a reader drains the other end.
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
            });
            let mut slices = WriteSlices::from(vec![Bytes::from(big)]);
            let mut waits = Vec::new();
            while !slices.is_empty() {
                let (whole, waited_) = waited(writer.write_some(&mut slices)).await;
                whole.unwrap();
                waits.push(waited_);
            }
            draining.await;
            assert!(waits.len() >= 2, "{driver:?}: {waits:?}");
            if uring {
                // At once first; after a partial write, through the ring
                // until a write goes out whole.
                let expected: Vec<bool> = (0..waits.len()).map(|i| i > 0).collect();
                assert_eq!(waits, expected, "true = the write waited for its turn");
            }
            // Drained, and the last write went out whole: at once again.
            let (whole, waited_) = waited(writer.write_some(&mut small())).await;
            assert!(whole.unwrap(), "{driver:?}");
            assert!(!waited_, "{driver:?}: a small write waited for its turn");
        })
        .unwrap();
    }
}
