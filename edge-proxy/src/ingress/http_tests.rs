//! [`Responder`] on a real loopback socket.

use std::io::{ErrorKind, Read};
use std::task::Poll;
use std::time::Duration;

use super::*;
use crate::ingress::read_timer::{self, ReadTimers};

/// A connected pair: the Edge's end as a [`Responder`] and the client's as
/// a std socket.
async fn pair() -> (Responder, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (edge, _) = listener.accept().unwrap();
    // As monoio's own accept leaves it: a write the socket cannot take
    // waits in the runtime, not in the system call (epoll).
    edge.set_nonblocking(true).unwrap();
    let edge = TcpStream::from_std(edge).unwrap();
    let fd = edge.as_raw_fd();
    let (_read, write) = edge.into_split();
    (Responder::new(write, fd), client)
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
fn answers_go_out_at_once_while_the_client_has_room() {
    use crate::runtime::waited;
    // On io_uring a write through the ring is answered on a later turn of
    // the loop; while the client's socket has room an answer goes at once
    // (`iovec::write_now`). The epoll driver does so by itself once it
    // knows the socket is writable (not before its first wait).
    for driver in crate::runtime::drivers() {
        crate::runtime::block_on(driver, async move {
            let uring = driver == framing::io_driver::IoDriver::Uring;
            let (mut responder, mut client) = pair().await;
            let ((), waited_) = waited(responder.full(200, "text/plain", b"hi".to_vec())).await;
            assert!(!(uring && waited_), "a small answer waited for its turn");
            assert!(read_head(&mut client).starts_with(b"HTTP/1.1 200"));
            assert_eq!(read_exactly(&mut client, 2), b"hi");

            // A body larger than the socket and the client's buffers take:
            // what fits goes at once, the rest waits for room (through the
            // ring, on io_uring) as the client reads; every byte arrives,
            // in order.
            responder.start_stream(200, []).await;
            read_head(&mut client);
            let big: Vec<u8> = (0..32 << 20).map(|i| (i % 251) as u8).collect();
            let expected = [format!("{:x}\r\n", big.len()).as_bytes(), &big[..], b"\r\n"].concat();
            let reading = {
                let mut chunk = std::pin::pin!(responder.chunk(Bytes::from(big)));
                let first = std::future::poll_fn(|cx| Poll::Ready(chunk.as_mut().poll(cx))).await;
                assert!(first.is_pending(), "{driver:?}: 32 MiB went out at once");
                let reading = std::thread::spawn(move || {
                    let got = read_exactly(&mut client, expected.len());
                    assert!(got == expected, "bytes lost or out of order");
                    client
                });
                chunk.await;
                reading
            };
            let mut client = reading.join().unwrap();

            // Drained: at once again, on either driver.
            let ((), waited_) = waited(responder.chunk(Bytes::from_static(b"data: a\n\n"))).await;
            assert!(!waited_, "{driver:?}: a small chunk waited for its turn");
            let chunk = b"9\r\ndata: a\n\n\r\n";
            assert_eq!(read_exactly(&mut client, chunk.len()), chunk);
        })
        .unwrap();
    }
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

#[test]
fn a_sized_body_goes_under_its_length_and_one_that_does_not_add_up_is_cut() {
    crate::runtime::block_on(framing::io_driver::IoDriver::Epoll, async {
        let json = [(&b"content-type"[..], &b"application/json"[..])];
        // Adds up: the head carries the length, the body its bytes as they
        // are (corked or not), and the connection stays open.
        let (mut responder, mut client) = pair().await;
        responder.cork();
        let head = responder.sized_head(200, json, 7);
        responder.send_head(head).await;
        responder.chunk(Bytes::from_static(b"{\"a\":")).await;
        responder.chunk(Bytes::from_static(b"1}")).await;
        responder.finish().await;
        responder.uncork().await;
        let head = String::from_utf8(read_head(&mut client)).unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("content-length: 7\r\n"), "{head}");
        assert!(head.contains("connection: keep-alive\r\n"), "{head}");
        assert!(!head.contains("transfer-encoding"), "{head}");
        assert!(!head.contains("cache-control"), "{head}");
        assert_eq!(read_exactly(&mut client, 7), b"{\"a\":1}");
        assert!(!responder.close, "a whole body leaves the connection open");
        assert_eq!(responder.framing, Framing::Sized { left: 0 });

        // Short of it at the end: cut (the connection closes after it).
        let (mut short, _client) = pair().await;
        let head = short.sized_head(200, json, 7);
        short.send_head(head).await;
        short.chunk(Bytes::from_static(b"{}")).await;
        short.finish().await;
        assert!(short.close, "a short body is cut");

        // Past it: the bytes that would overrun are not written, and the
        // answer is cut.
        let (mut long, mut long_client) = pair().await;
        let head = long.sized_head(200, json, 3);
        long.send_head(head).await;
        long.chunk(Bytes::from_static(b"ab")).await;
        long.chunk(Bytes::from_static(b"cd")).await;
        long.chunk(Bytes::from_static(b"e")).await;
        long.finish().await;
        assert!(long.close, "an overrun is cut");
        drop(long);
        let head = read_head(&mut long_client);
        assert!(String::from_utf8_lossy(&head).contains("content-length: 3\r\n"));
        let mut rest = Vec::new();
        long_client.read_to_end(&mut rest).unwrap();
        assert_eq!(
            rest, b"ab",
            "nothing past the length, nor after the overrun"
        );

        // HTTP/1.0: the length, and the connection closes after it.
        let (mut old, mut old_client) = pair().await;
        old.http10 = true;
        let head = old.sized_head(200, json, 2);
        old.send_head(head).await;
        old.chunk(Bytes::from_static(b"{}")).await;
        let head = String::from_utf8(read_head(&mut old_client)).unwrap();
        assert!(
            head.contains("content-length: 2\r\nconnection: close\r\n"),
            "{head}"
        );
        assert!(old.close);
    })
    .unwrap();
}

#[test]
fn a_stream_gets_the_edges_hints_only_where_it_has_none_of_its_own() {
    crate::runtime::block_on(framing::io_driver::IoDriver::Epoll, async {
        let (mut responder, mut client) = pair().await;
        let own = [
            (&b"content-type"[..], &b"text/event-stream"[..]),
            (&b"Cache-Control"[..], &b"no-store"[..]),
        ];
        responder.start_stream(200, own).await;
        let head = String::from_utf8(read_head(&mut client)).unwrap();
        let lower = head.to_ascii_lowercase();
        assert_eq!(lower.matches("cache-control").count(), 1, "{head}");
        assert!(head.contains("Cache-Control: no-store\r\n"), "{head}");
        assert!(head.contains("x-accel-buffering: no\r\n"), "{head}");
        assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    })
    .unwrap();
}

/// Starts a stream, then waits for the client to leave, and says it saw it.
struct UntilGone(std::rc::Rc<std::cell::Cell<bool>>);

impl Handler for UntilGone {
    async fn handle(&self, _request: Box<Request>, responder: &mut Responder) {
        responder.start_stream(200, []).await;
        responder.gone().await;
        self.0.set(true);
    }
}

/// Answers `ok` whole.
struct Whole;

impl Handler for Whole {
    async fn handle(&self, _request: Box<Request>, responder: &mut Responder) {
        responder.full(200, "text/plain", b"ok".to_vec()).await;
    }
}

/// Serves one connection with `handler` on `driver` while `client` runs on
/// a thread of its own, and keeps the runtime running until the client is
/// done (a close can be the runtime's to run after the connection's task
/// ends); returns what `client` returned.
fn serve_one<T: Send + 'static>(
    driver: crate::runtime::IoDriver,
    handler: impl Handler + 'static,
    client: impl FnOnce(std::net::SocketAddr) -> T + Send + 'static,
) -> T {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || client(addr));
    let (edge, _) = listener.accept().unwrap();
    edge.set_nonblocking(true).unwrap();
    crate::runtime::block_on(driver, async {
        let edge = TcpStream::from_std(edge).unwrap();
        let timers = ReadTimers::new(&framing::timer::ClockSource::Coarse, read_timer::TICK_MS);
        monoio::spawn(std::rc::Rc::clone(&timers).run(monoio::time::sleep));
        serve(
            edge,
            IngressLimits::default(),
            std::rc::Rc::new(handler),
            &timers,
        )
        .await;
        while !client.is_finished() {
            monoio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .unwrap();
    client.join().unwrap()
}

/// Connects, sends `request`, and reads what comes back to the end of the
/// stream (`Err`: a reset, or nothing for 10 s).
fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    std::io::Write::write_all(&mut client, request).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut all = Vec::new();
    client.read_to_end(&mut all).map(|_| all)
}

#[test]
fn a_client_that_leaves_mid_answer_has_its_connection_closed() {
    for driver in crate::runtime::drivers() {
        let saw_gone = std::rc::Rc::new(std::cell::Cell::new(false));
        // The client half-closes mid-answer (the Edge reads its end) and
        // still reads: the Edge's close of a connection whose client left
        // (no shutdown of its own, a timer tick later) reaches it as the
        // end of the stream.
        let (head, end) = serve_one(driver, UntilGone(saw_gone.clone()), |addr| {
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut client, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            let head = read_head(&mut client);
            client.shutdown(std::net::Shutdown::Write).unwrap();
            client
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut rest = Vec::new();
            (head, client.read_to_end(&mut rest).map(|_| rest))
        });
        assert!(
            saw_gone.get(),
            "{driver:?}: the handler saw the client leave"
        );
        assert!(head.starts_with(b"HTTP/1.1 200"), "{driver:?}");
        // The stream's chunked body was cut: nothing after the head, then
        // the end of the stream (not a reset, not a timeout).
        assert_eq!(end.unwrap(), b"", "{driver:?}");
    }
}

#[test]
fn a_connection_ends_with_every_byte_of_its_last_answer_then_the_end_of_stream() {
    for driver in crate::runtime::drivers() {
        // The client asks the Edge to close after the answer.
        let all = serve_one(driver, Whole, |addr| {
            exchange(
                addr,
                b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            )
        });
        let all = String::from_utf8(all.unwrap()).unwrap();
        assert!(all.starts_with("HTTP/1.1 200"), "{driver:?}: {all}");
        assert!(all.ends_with("\r\n\r\nok"), "{driver:?}: {all}");
        // A keep-alive client that ends its side after an answer.
        let (answer, rest) = serve_one(driver, Whole, |addr| {
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut client, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            let head = read_head(&mut client);
            let body = read_exactly(&mut client, 2);
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            (
                [head, body].concat(),
                client.read_to_end(&mut rest).map(|_| rest),
            )
        });
        assert!(answer.ends_with(b"\r\n\r\nok"), "{driver:?}");
        assert_eq!(rest.unwrap(), b"", "{driver:?}");
    }
}

#[test]
fn a_head_may_end_only_where_it_holds_an_empty_line() {
    let ends: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
        b"GET / HTTP/1.1\nhost: x\n\n",
        b"GET / HTTP/1.1\r\nhost: x\n\r\n",
        b"GET / HTTP/1.1\r\nhost: x\r\n\n{}",
    ];
    for head in ends {
        assert!(may_end_a_head(head), "{:?}", String::from_utf8_lossy(head));
    }
    let not_yet: [&[u8]; 4] = [
        b"",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r",
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\n\r",
    ];
    for head in not_yet {
        assert!(!may_end_a_head(head), "{:?}", String::from_utf8_lossy(head));
    }
}
