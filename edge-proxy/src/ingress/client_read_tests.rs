//! [`ClientRead`] on real loopback sockets, with both I/O drivers: the
//! watching read is small and outlives the answer, bytes land in order
//! whoever stopped waiting for them, and a client's leaving reaches the
//! answer.

use std::io::Write as _;

use std::pin::pin;

use monoio::io::Splitable;

use super::*;

/// A connected pair: the Edge's read side and the client's std socket.
fn read_pair() -> (ClientRead, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (edge, _) = listener.accept().unwrap();
    // As the listener's sockets are: a read waits, it does not block.
    edge.set_nonblocking(true).unwrap();
    let edge = TcpStream::from_std(edge).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&edge);
    let (read, _write) = edge.into_split();
    (ClientRead::new(read, fd), client)
}

/// Runs `test` on a runtime of each I/O driver this kernel has.
fn on_each_driver<F: Future<Output = ()>>(test: impl Fn(crate::runtime::IoDriver) -> F) {
    for driver in crate::runtime::drivers() {
        crate::runtime::block_on(driver, test(driver)).unwrap();
    }
}

/// Resolves once `gone` is set; registers no waker, as `Responder::gone`.
async fn until(gone: &Cell<bool>) {
    poll_fn(|_| {
        if gone.get() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Fills until `len` bytes are buffered; the sizes of the reads.
async fn fill_to(reader: &mut ClientRead, len: usize) -> Vec<usize> {
    let mut reads = Vec::new();
    while reader.buf().len() < len {
        let n = reader.fill().await.unwrap();
        assert!(n > 0, "end of stream after {} bytes", reader.buf().len());
        reads.push(n);
    }
    reads
}

#[test]
fn the_watching_read_is_small_and_brings_the_next_request() {
    on_each_driver(|driver| async move {
        let (mut reader, mut client) = read_pair();
        client.write_all(b"first").unwrap();
        fill_to(&mut reader, 5).await;
        reader.buf().clear();
        let gone = Cell::new(false);
        reader.watching(&gone, pin!(async {})).await;
        assert!(!gone.get(), "{driver:?}");
        // The request's buffer is let go of; the watching read (64 B)
        // is still in flight after the answer.
        assert_eq!(reader.buf().capacity(), 0, "{driver:?}");
        assert!(reader.in_flight.is_some(), "{driver:?}");

        // The next request's first bytes come through that read.
        let next = [b'x'; 300];
        client.write_all(&next).unwrap();
        let reads = fill_to(&mut reader, next.len()).await;
        assert_eq!(reads[0], WATCH_READ, "{driver:?}: {reads:?}");
        assert_eq!(&reader.buf()[..], &next[..], "{driver:?}");
    });
}

#[test]
fn a_full_watching_read_takes_the_rest_at_once() {
    on_each_driver(|driver| async move {
        // The rest of a request already waiting: the read after the
        // watching one brings it all at its first poll (on io_uring a
        // `recv` taken at once: a ring read is never done before the ring
        // is entered).
        let (mut reader, mut client) = read_pair();
        let gone = Cell::new(false);
        reader.watching(&gone, pin!(async {})).await;
        let request: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&request).unwrap();
        assert!(!reader.watch_read_filled(), "{driver:?}: nothing read yet");
        assert_eq!(reader.fill().await.unwrap(), WATCH_READ, "{driver:?}");
        assert!(reader.watch_read_filled(), "{driver:?}");
        {
            let mut fill = pin!(reader.fill());
            let first = poll_fn(|cx| Poll::Ready(fill.as_mut().poll(cx))).await;
            let rest = request.len() - WATCH_READ;
            assert!(
                matches!(first, Poll::Ready(Ok(n)) if n == rest),
                "{driver:?}: {first:?}"
            );
        }
        assert_eq!(&reader.buf()[..], &request[..], "{driver:?}");
        assert!(!reader.watch_read_filled(), "{driver:?}: past 64 bytes");

        // Exactly a watching read's worth, then nothing: the next read
        // waits (through the runtime) and brings what comes later.
        reader.buf().clear();
        reader.watching(&gone, pin!(async {})).await;
        client.write_all(&request[..WATCH_READ]).unwrap();
        fill_to(&mut reader, WATCH_READ).await;
        {
            let mut fill = pin!(reader.fill());
            let first = poll_fn(|cx| Poll::Ready(fill.as_mut().poll(cx))).await;
            assert!(first.is_pending(), "{driver:?}: nothing was waiting");
            client.write_all(b"later").unwrap();
            assert_eq!(fill.await.unwrap(), 5, "{driver:?}");
        }
        assert_eq!(&reader.buf()[WATCH_READ..], b"later", "{driver:?}");

        // A full watching read, then the client leaves: the end of stream.
        reader.buf().clear();
        reader.watching(&gone, pin!(async {})).await;
        client.write_all(&request[..WATCH_READ]).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        fill_to(&mut reader, WATCH_READ).await;
        assert_eq!(reader.fill().await.unwrap(), 0, "{driver:?}");
        assert!(!gone.get(), "{driver:?}");
    });
}

#[test]
fn pipelined_bytes_are_kept_in_order_and_the_leaving_reaches_the_answer() {
    on_each_driver(|driver| async move {
        let (mut reader, mut client) = read_pair();
        // A pipelined request, then the client leaves: the answer sees
        // `gone` (it waits for nothing else), and every byte is kept.
        let pipelined: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&pipelined).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let gone = Cell::new(false);
        reader.watching(&gone, pin!(until(&gone))).await;
        assert!(gone.get(), "{driver:?}");
        assert!(
            reader.in_flight.is_none(),
            "{driver:?}: no read after the end"
        );
        assert_eq!(&reader.buf()[..], &pipelined[..], "{driver:?}");
        assert_eq!(reader.fill().await.unwrap(), 0, "{driver:?}");
    });
}

#[test]
fn a_wait_given_up_loses_no_bytes() {
    on_each_driver(|driver| async move {
        let (mut reader, mut client) = read_pair();
        // Bytes already buffered, then a fill that is dropped before
        // anything arrives (as when a timeout fires): its read goes on.
        reader.buf().extend_from_slice(b"head-");
        monoio::select! {
            biased;
            _ = reader.fill() => panic!("{driver:?}: nothing was sent"),
            () = async {} => {}
        }
        assert!(reader.in_flight.is_some(), "{driver:?}");
        client.write_all(b"rest").unwrap();
        fill_to(&mut reader, 9).await;
        assert_eq!(&reader.buf()[..], b"head-rest", "{driver:?}");

        // The same while watching with pipelined bytes waiting: the side
        // read's bytes are appended after them.
        let gone = Cell::new(false);
        reader.watching(&gone, pin!(async {})).await;
        client.write_all(b"+more").unwrap();
        fill_to(&mut reader, 14).await;
        assert_eq!(&reader.buf()[..], b"head-rest+more", "{driver:?}");
        assert!(!gone.get(), "{driver:?}");
    });
}

#[test]
fn a_client_far_ahead_is_not_read_further_while_it_is_answered() {
    on_each_driver(|driver| async move {
        let (mut reader, mut client) = read_pair();
        let ahead = vec![b'p'; PIPELINE_AHEAD_MAX + 10_000];
        client.write_all(&ahead).unwrap();
        fill_to(&mut reader, PIPELINE_AHEAD_MAX).await;
        let buffered = reader.buf().len();
        let gone = Cell::new(false);
        reader.watching(&gone, pin!(async {})).await;
        assert!(reader.in_flight.is_none(), "{driver:?}");
        assert_eq!(reader.buf().len(), buffered, "{driver:?}");
        assert!(!gone.get(), "{driver:?}");
    });
}

#[test]
fn a_reserved_body_lands_in_one_buffer_without_moving() {
    const LEN: usize = 300 * 1024;
    on_each_driver(|driver| async move {
        let (mut reader, mut client) = read_pair();
        let sender = std::thread::spawn(move || {
            let body: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
            for piece in body.chunks(37 * 1024) {
                client.write_all(piece).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            client
        });
        fill_to(&mut reader, 1).await;
        reader.reserve_total(LEN);
        let start = reader.buf().as_ptr();
        let reads = fill_to(&mut reader, LEN).await;
        assert_eq!(reader.buf().as_ptr(), start, "{driver:?}: the buffer moved");
        let body = reader.buf().split_to(LEN);
        assert!(
            body.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
            "{driver:?}: bytes out of order"
        );
        // Reads take what has arrived, not 4 KiB at a time.
        assert!(reads.len() < LEN / FULL_READ, "{driver:?}: {reads:?}");
        drop(sender.join().unwrap());
    });
}
