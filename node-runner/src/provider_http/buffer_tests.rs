//! The receive buffer: an idle stream holds none, a handed-out chunk pins
//! only itself, and reads start small and grow while they fill (issue 8:
//! memory per quiet stream). Same scripted server as `tests`.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use super::conn::{READ_MIN, READ_RESERVE};
use super::tests::{
    OK_HELLO, PATIENCE, accept, client, drain, each_driver, expect_client_close, join, post,
    read_request, serve,
};
use super::{ProviderClient, ProviderClientConfig};
use crate::runtime::waited;

#[test]
fn an_idle_body_waits_without_a_receive_buffer() {
    each_driver(|| async {
        let (release, released) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
                .unwrap();
            released.recv_timeout(PATIENCE).unwrap();
            s.write_all(b"world").unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        let hello = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&hello[..], b"hello");
        assert!(response.buffer_capacity().unwrap() > 0);
        // The head was copied out: it does not pin the receive buffer.
        let read = response.last_read().unwrap();
        let field = response.headers().get("content-length").unwrap().as_ptr() as usize;
        assert!(!read.contains(&field), "{read:?} holds the head at {field}");
        // The stream idles: its wait holds no buffer, and dropping the
        // wait (no read in flight) leaves the response usable.
        let waited = monoio::time::timeout(Duration::from_millis(20), response.next_chunk()).await;
        assert!(waited.is_err(), "nothing to read yet");
        assert_eq!(response.buffer_capacity(), Some(0));
        drop(hello);
        release.send(()).unwrap();
        let world = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&world[..], b"world");
        assert!(response.next_chunk().await.is_none());
        // Pooled without a buffer.
        assert_eq!(client.idle_connections(&base), 1);
        drop(response);
        drop(client);
        join(server).await;
    });
}

#[test]
fn an_idle_chunked_body_pins_nothing_but_the_chunk_handed_out() {
    each_driver(|| async {
        let (release, released) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                  Transfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n",
            )
            .unwrap();
            released.recv_timeout(PATIENCE).unwrap();
            s.write_all(b"2\r\n\n\n\r\n0\r\n\r\n").unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        let first = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&first[..], b"data: ");
        let waited = monoio::time::timeout(Duration::from_millis(20), response.next_chunk()).await;
        assert!(waited.is_err(), "nothing to read yet");
        // Nothing in the response (head, buffer) shares the chunk's memory:
        // once the relay drops it, the idle stream holds no read buffer.
        assert!(first.is_unique());
        assert_eq!(response.buffer_capacity(), Some(0));
        release.send(()).unwrap();
        assert_eq!(drain(&mut response).await.unwrap(), b"\n\n");
        drop(response);
        drop(client);
        join(server).await;
    });
}

#[test]
fn reads_start_small_and_grow_while_they_fill() {
    each_driver(|| async {
        const REST: usize = 512 * 1024;
        let (release, released) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\nhello",
                5 + REST
            );
            s.write_all(head.as_bytes()).unwrap();
            released.recv_timeout(PATIENCE).unwrap();
            s.write_all(&vec![b'x'; REST]).unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        let hello = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&hello[..], b"hello");
        // A token-sized answer took a small buffer, not a full reservation.
        let first = response.last_read().unwrap();
        assert!(first.len() < READ_MIN, "{first:?}");
        assert!(
            response.buffer_capacity().unwrap() <= READ_MIN,
            "{:?}",
            response.buffer_capacity()
        );
        drop(hello);
        release.send(()).unwrap();
        // A burst: reads that fill double, up to READ_RESERVE (which
        // `BytesMut::reserve` may round up to twice its last capacity).
        let (mut seen, mut largest) = (0, 0);
        while seen < REST {
            let chunk = response.next_chunk().await.unwrap().unwrap();
            seen += chunk.len();
            largest = largest.max(chunk.len());
        }
        assert_eq!(seen, REST);
        assert!(
            (4 * READ_MIN..=2 * READ_RESERVE).contains(&largest),
            "{largest}"
        );
        drop(response);
        drop(client);
        join(server).await;
    });
}

/// With bytes waiting for every read: on io_uring, reads alternate between
/// waiting for their turn (`true`) and taking the bytes at once; on epoll
/// none waits.
fn assert_alternate(waits: &[bool], uring: bool) {
    if uring {
        let pairs: Vec<_> = waits.windows(2).collect();
        assert!(
            pairs.iter().all(|pair| pair[0] != pair[1]),
            "{waits:?}: true = the read waited for its turn"
        );
    } else {
        assert!(waits.iter().all(|waited| !waited), "{waits:?}");
    }
}

#[test]
fn a_busy_body_takes_waiting_bytes_at_once_every_other_read() {
    // On io_uring a read is a ring operation, answered on a later turn of
    // the loop; bytes known to be waiting are taken at once every other
    // read (`conn::recv_now`), so the stream still yields its turn. The
    // epoll driver reads at once whenever bytes wait.
    each_driver(|| async {
        const BODY: usize = 60 * 1024;
        let (written, wait_written) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(&vec![b'x'; BODY]).unwrap();
            written.send(()).unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        wait_written.recv_timeout(PATIENCE).unwrap();
        // The first piece came with the head's read (through the runtime),
        // which filled its room: every read after it finds bytes waiting.
        let mut seen = response.next_chunk().await.unwrap().unwrap().len();
        let mut waits = Vec::new();
        while seen < BODY {
            let (chunk, waited) = waited(response.next_chunk()).await;
            seen += chunk.unwrap().unwrap().len();
            waits.push(waited);
        }
        assert_eq!(seen, BODY);
        assert!(waits.len() >= 4, "{waits:?}: reads start at READ_MIN");
        assert_alternate(&waits, crate::runtime::on_uring());
        drop(response);
        drop(client);
        join(server).await;
    });
}

#[test]
fn a_receive_buffer_reaches_the_provider_socket() {
    // An odd size the kernel would not choose itself, under any
    // `net.core.rmem_max` (it caps the setting), so the value read back
    // is what the client set: twice the request (Linux keeps room for its
    // own bookkeeping).
    let rmem_max = crate::sockopt::receive_buffer_max().unwrap_or(212_992);
    let asked = usize::try_from(rmem_max - 1).unwrap().min(300_001);
    each_driver(|| async move {
        let (base, server) = serve(|l| {
            for _ in 0..2 {
                let mut s = accept(&l);
                read_request(&mut s);
                s.write_all(OK_HELLO).unwrap();
                expect_client_close(&mut s);
            }
        });
        let sized = ProviderClient::new(ProviderClientConfig {
            receive_buffer: Some(u32::try_from(asked).unwrap()),
            ..ProviderClientConfig::default()
        });
        let response = sized.request(post(&base, "{}")).await.unwrap();
        let set = response.socket_receive_buffer().unwrap().unwrap();
        assert_eq!(set, 2 * asked, "SO_RCVBUF as the kernel keeps it");
        drop(response);
        drop(sized);
        // The default leaves the kernel's own size (and its autotuning).
        let default = client();
        let response = default.request(post(&base, "{}")).await.unwrap();
        let kernel = response.socket_receive_buffer().unwrap().unwrap();
        assert_ne!(kernel, 2 * asked);
        drop(response);
        drop(default);
        join(server).await;
    });
}
