//! [`Responder`] on a real loopback socket.

use std::io::{ErrorKind, Read};
use std::time::Duration;

use super::*;

/// A connected pair: the Edge's end as a [`Responder`] and the client's as
/// a std socket.
async fn pair() -> (Responder, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (edge, _) = listener.accept().unwrap();
    let edge = TcpStream::from_std(edge).unwrap();
    let (_read, write) = edge.into_split();
    (Responder::new(write), client)
}

/// Reads exactly `len` bytes (blocking, with a deadline).
fn read_exactly(client: &mut std::net::TcpStream, len: usize) -> Vec<u8> {
    client.set_nonblocking(false).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = vec![0; len];
    let mut at = 0;
    while at < len {
        match client.read(&mut got[at..]) {
            Ok(0) => panic!("closed after {at} of {len} bytes"),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    got
}

/// Writes a head, one chunk and the end, corked or not.
async fn answer(responder: &mut Responder) {
    responder
        .start_stream(200, [(&b"content-type"[..], &b"text/event-stream"[..])])
        .await;
    responder.chunk(Bytes::from_static(b"data: a\n\n")).await;
    responder.finish().await;
}

#[test]
fn body_pieces_written_while_corked_leave_as_one_chunk() {
    crate::runtime::block_on(framing::io_driver::IoDriver::Epoll, async {
        let (mut corked, mut client) = pair().await;
        corked.cork();
        corked
            .start_stream(200, [(&b"content-type"[..], &b"text/event-stream"[..])])
            .await;
        let pieces = [&b"data: a"[..], b"bc\n\n", b"data: [DONE]\n\n"];
        let slices: Vec<Bytes> = pieces.iter().map(|p| Bytes::from_static(p)).collect();
        for slice in &slices {
            corked.chunk(slice.clone()).await;
        }
        corked.finish().await;
        corked.uncork().await;
        let body = b"19\r\ndata: abc\n\ndata: [DONE]\n\n\r\n0\r\n\r\n";
        let head = read_head(&mut client);
        assert!(head.starts_with(b"HTTP/1.1 200"));
        assert_eq!(read_exactly(&mut client, body.len()), body);
        // A chunk gathered, then one written uncorked: each is framed.
        let (mut responder, mut client) = pair().await;
        responder.start_stream(200, []).await;
        read_head(&mut client);
        responder.cork();
        responder.chunk(slices[0].clone()).await;
        responder.chunk(slices[1].clone()).await;
        responder.uncork().await;
        responder.chunk(slices[2].clone()).await;
        let body = b"b\r\ndata: abc\n\n\r\ne\r\ndata: [DONE]\n\n\r\n";
        assert_eq!(read_exactly(&mut client, body.len()), body);
    })
    .unwrap();
}

/// Reads a response head, up to and with its empty line.
fn read_head(client: &mut std::net::TcpStream) -> Vec<u8> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.extend(read_exactly(client, 1));
    }
    head
}

#[test]
fn corked_writes_leave_together_and_byte_for_byte_as_uncorked() {
    crate::runtime::block_on(framing::io_driver::IoDriver::Epoll, async {
        let (mut plain, mut plain_client) = pair().await;
        answer(&mut plain).await;
        let (mut corked, mut corked_client) = pair().await;
        corked.cork();
        answer(&mut corked).await;
        assert!(corked.corked_len() > 0);
        // Nothing reached the socket while corked.
        corked_client.set_nonblocking(true).unwrap();
        let mut probe = [0u8; 1];
        let early = corked_client.read(&mut probe);
        assert!(
            matches!(&early, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "a corked write reached the client: {early:?}"
        );
        corked.uncork().await;
        assert_eq!(corked.corked_len(), 0);
        // What the plain responder wrote, piece by piece, is exactly what the
        // corked one wrote in one go.
        let mut expected = Vec::new();
        plain_client.set_nonblocking(false).unwrap();
        plain_client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match plain_client.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    expected.extend_from_slice(&buf[..n]);
                    if expected.ends_with(b"0\r\n\r\n") {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        assert!(expected.starts_with(b"HTTP/1.1 200"));
        let got = read_exactly(&mut corked_client, expected.len());
        assert_eq!(got, expected);
        // Uncorked again: the next write goes straight out.
        corked.chunk(Bytes::from_static(b"x")).await;
        assert_eq!(read_exactly(&mut corked_client, 6), b"1\r\nx\r\n");
    })
    .unwrap();
}
