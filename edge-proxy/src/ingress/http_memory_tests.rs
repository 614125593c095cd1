//! What a long answer keeps of its connection: the request's own copies,
//! and a small watcher read (see the module docs of `ingress::http`).

use std::io::Write as _;

use super::*;

fn limits(max_head_bytes: usize) -> HeadLimits {
    HeadLimits {
        max_head_bytes,
        ..HeadLimits::default()
    }
}

/// `parse_head_owned` answers exactly as `parse_request_head` on the same
/// bytes, and consumes the same bytes.
#[test]
fn an_owned_head_parses_as_the_buffer_would() {
    let inputs: [&[u8]; 7] = [
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{}",
        b"GET / HTTP/1.1\r\nhost: a\r\n\r\nGET /next HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\nhost: a\n\n{\"a\":\"\r\n\r\n\"}",
        b"GET / HTTP/1.1\r\nhost: a\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nx-long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
        b"GET / HTTP/1.1\r\nhost: a\r\nx-long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        b"BAD\x01 / HTTP/1.1\r\n\r\n",
    ];
    for input in inputs {
        for limit in [48, 4096] {
            let limits = limits(limit);
            let mut plain = BytesMut::from(input);
            let mut owned = BytesMut::from(input);
            let expected = parse_request_head(&mut plain, &limits);
            let got = parse_head_owned(&mut owned, &limits);
            let shown = String::from_utf8_lossy(input);
            assert_eq!(
                format!("{got:?}"),
                format!("{expected:?}"),
                "{shown:?} at {limit}"
            );
            assert_eq!(owned, plain, "{shown:?} at {limit}: bytes left");
        }
    }
}

#[test]
fn an_owned_head_and_small_body_pin_no_read_buffer() {
    let input = b"POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{}";
    let mut buf = BytesMut::with_capacity(4096);
    buf.extend_from_slice(input);
    let buffer = buf.as_ptr() as usize..buf.as_ptr() as usize + 4096;
    let head = parse_head_owned(&mut buf, &limits(4096)).unwrap().unwrap();
    assert_eq!(head.path(), b"/v1/x");
    assert!(!buffer.contains(&(head.path().as_ptr() as usize)));
    assert_eq!(&buf[..], b"{}", "the body stays to be read");
}

/// A connected pair: the Edge's read half and the client's std socket.
async fn read_pair() -> (OwnedReadHalf<TcpStream>, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (edge, _) = listener.accept().unwrap();
    let edge = TcpStream::from_std(edge).unwrap();
    let (read, _write) = edge.into_split();
    (read, client)
}

/// What `watch` gives back: the read half, the buffer, whether the client left.
type Watched = (OwnedReadHalf<TcpStream>, BytesMut, bool);

fn watching(
    read: OwnedReadHalf<TcpStream>,
    buf: BytesMut,
) -> (Canceller, Rc<Cell<bool>>, monoio::task::JoinHandle<Watched>) {
    let canceller = Canceller::new();
    let stopping = Rc::new(Cell::new(false));
    let (gone_tx, _gone_rx) = local_sync::oneshot::channel();
    let watcher = monoio::spawn(watch(
        read,
        buf,
        canceller.handle(),
        Rc::clone(&stopping),
        Rc::new(Cell::new(false)),
        gone_tx,
    ));
    (canceller, stopping, watcher)
}

fn drivers() -> Vec<crate::runtime::IoDriver> {
    let mut drivers = vec![crate::runtime::IoDriver::Epoll];
    if monoio::utils::detect_uring() {
        drivers.push(crate::runtime::IoDriver::Uring);
    }
    drivers
}

#[test]
fn an_idle_client_is_watched_with_a_small_read_and_pipelined_bytes_are_kept() {
    for driver in drivers() {
        crate::runtime::block_on(driver, async {
            let (read, mut client) = read_pair().await;
            // The request's emptied buffer is let go of for a small one.
            let (canceller, stopping, watcher) = watching(read, BytesMut::with_capacity(4096));
            stopping.set(true);
            drop(canceller.cancel());
            let (read, buf, left) = watcher.await;
            assert!(!left, "{driver:?}");
            assert!(buf.is_empty());
            assert!(
                buf.capacity() <= WATCH_READ,
                "{driver:?}: {}",
                buf.capacity()
            );

            // Pipelined bytes are kept whole, however small the first
            // read; the client's end of stream is seen after them.
            let next = [b'x'; 300];
            client.write_all(&next).unwrap();
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let (_canceller, _stopping, watcher) = watching(read, buf);
            let (_read, buf, left) = watcher.await;
            assert!(left, "{driver:?}");
            assert_eq!(&buf[..], &next[..], "{driver:?}");
        })
        .unwrap();
    }
}
