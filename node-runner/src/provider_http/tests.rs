//! The client against a scripted std-socket server on a thread, under both
//! monoio drivers.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use framing::http::HeadLimits;
use framing::io_driver::IoDriver;
use framing::timer::{ClockSource, SharedManualClock};

use super::*;
use crate::runtime::block_on;

pub(super) const PATIENCE: Duration = Duration::from_secs(5);

/// Runs `test` on an epoll runtime, then on an io_uring runtime (set up as
/// the Node's are) when the kernel allows it.
pub(super) fn each_driver<Fut: Future<Output = ()>>(test: impl Fn() -> Fut) {
    block_on(IoDriver::Epoll, test()).expect("epoll runtime");
    if monoio::utils::detect_uring() {
        block_on(IoDriver::Uring, test()).expect("io_uring runtime");
    }
}

/// Runs `script` on a thread with a listener on a free loopback port.
pub(crate) fn serve<T: Send + 'static>(
    script: impl FnOnce(TcpListener) -> T + Send + 'static,
) -> (BaseUrl, JoinHandle<T>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = BaseUrl::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    (base, std::thread::spawn(move || script(listener)))
}

pub(crate) fn accept(listener: &TcpListener) -> TcpStream {
    let (stream, _) = listener.accept().unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream
}

/// Reads one request (head and `Content-Length` body); empty at EOF.
pub(crate) fn read_request(stream: &mut TcpStream) -> Vec<u8> {
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).unwrap() {
            0 => return data,
            _ => data.push(byte[0]),
        }
    }
    let head = String::from_utf8_lossy(&data).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
    let mut body = vec![0; len];
    stream.read_exact(&mut body).unwrap();
    data.extend_from_slice(&body);
    data
}

/// Blocks until the client closes its side (read returns 0).
pub(super) fn expect_client_close(stream: &mut TcpStream) {
    let mut rest = Vec::new();
    let n = stream
        .read_to_end(&mut rest)
        .expect("client closes in time");
    assert_eq!(n, 0, "no more bytes, just the close");
}

/// Waits for the server thread without blocking the runtime: io_uring
/// submits a dropped socket's close on the runtime's next turn, so a
/// blocking join would hide the close the server waits for.
pub(super) async fn join<T>(server: JoinHandle<T>) -> T {
    while !server.is_finished() {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    server.join().expect("server script passed")
}

pub(super) fn client() -> ProviderClient {
    ProviderClient::new(ProviderClientConfig::default())
}

pub(super) fn post(base: &BaseUrl, body: &'static str) -> ProviderRequest {
    ProviderRequest::new("POST", base.clone(), "/v1/chat/completions")
        .header("content-type", "application/json")
        .body(body)
}

pub(super) async fn drain(response: &mut ProviderResponse) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.next_chunk().await {
        body.extend_from_slice(&chunk?);
    }
    Ok(body)
}

pub(super) const OK_HELLO: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

#[test]
fn a_request_goes_to_the_provider_at_once() {
    // On io_uring a write through the ring is answered on a later turn of
    // the loop; with room in the socket a request goes at once
    // (`iovec::write_now`). Under epoll the driver writes first itself.
    each_driver(|| async {
        let (base, server) = serve(|l| read_request(&mut accept(&l)));
        let tls = default_tls_client_config();
        let mut conn = Connection::connect(&base, PATIENCE, &tls, None)
            .await
            .unwrap();
        let head = "POST /v1/chat/completions HTTP/1.1\r\ncontent-length: 7\r\n\r\n";
        let body = RequestBody::from(Bytes::from_static(b"{\"a\":1}"));
        let write = conn.write(Bytes::from_static(head.as_bytes()), body);
        let (written, waited) = crate::runtime::waited(write).await;
        written.unwrap();
        let uring = crate::runtime::on_uring();
        assert!(!(uring && waited), "the request waited for its turn");
        assert!(conn.is_clean());
        let got = join(server).await;
        assert_eq!(got, [head.as_bytes(), b"{\"a\":1}"].concat());
    });
}

#[test]
fn content_length_body_is_a_slice_of_the_receive_buffer() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            let request = read_request(&mut s);
            s.write_all(OK_HELLO).unwrap();
            expect_client_close(&mut s);
            request
        });
        let client = client();
        let mut response = client.request(post(&base, "{\"a\":1}")).await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers().get("content-length"), Some(&b"5"[..]));
        let chunk = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&chunk[..], b"hello");
        // Zero copy: the chunk's bytes are where the socket read put them.
        let read = response.last_read().unwrap();
        let at = chunk.as_ptr() as usize;
        assert!(
            read.start <= at && at + chunk.len() <= read.end,
            "{read:?} vs {at}"
        );
        assert!(response.next_chunk().await.is_none());
        assert!(response.is_done());
        assert_eq!(client.idle_connections(&base), 1);
        drop(response); // holds the client's pool too
        drop(client); // closes the pooled connection
        let request = String::from_utf8(join(server).await).unwrap();
        let port = base.port();
        assert_eq!(
            request,
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                 Connection: keep-alive\r\nContent-Length: 7\r\n\
                 content-type: application/json\r\n\r\n{{\"a\":1}}"
            )
        );
    });
}

#[test]
fn chunked_body_comes_out_chunk_by_chunk_and_held_chunks_need_no_read() {
    each_driver(|| async {
        let (got_first, first_seen) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
                .unwrap();
            // Chunk 2 only after the client holds chunk 1: a client that
            // buffered would never get it.
            first_seen
                .recv_timeout(PATIENCE)
                .expect("client saw chunk 1");
            // Chunks 2 and 3 in one write; the end only when asked.
            s.write_all(b"6\r\nsecond\r\n5\r\nthird\r\n").unwrap();
            first_seen
                .recv_timeout(PATIENCE)
                .expect("client saw chunk 3");
            s.write_all(b"0\r\n\r\n").unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        let first = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&first[..], b"first");
        assert!(response.next_chunk_now().is_none(), "chunk 2 needs a read");
        got_first.send(()).unwrap();
        let second = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&second[..], b"second");
        // Chunk 3 came with chunk 2: held whole, it needs no read; the end
        // does.
        let third = response.next_chunk_now().expect("held").unwrap().unwrap();
        assert_eq!(&third[..], b"third");
        assert!(response.next_chunk_now().is_none(), "the end needs a read");
        got_first.send(()).unwrap();
        assert!(response.next_chunk().await.is_none());
        assert!(
            matches!(response.next_chunk_now(), Some(None)),
            "after the end, no read is needed to say so"
        );
        assert_eq!(client.idle_connections(&base), 1);
        drop(response); // holds the client's pool too
        drop(client);
        join(server).await;
    });
}

#[test]
fn close_delimited_body_ends_at_eof_and_is_not_pooled() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil ").unwrap();
            s.write_all(b"close").unwrap();
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(drain(&mut response).await.unwrap(), b"until close");
        assert_eq!(client.idle_connections(&base), 0);
        join(server).await;
    });
}

#[test]
fn keep_alive_reuses_one_connection_for_two_requests() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            let mut served = 0;
            while !read_request(&mut s).is_empty() {
                s.write_all(OK_HELLO).unwrap();
                served += 1;
            }
            served
        });
        let client = client();
        for _ in 0..2 {
            let mut response = client.request(post(&base, "{}")).await.unwrap();
            assert_eq!(drain(&mut response).await.unwrap(), b"hello");
        }
        let stats = client.stats();
        assert_eq!(
            (stats.connects, stats.reuses, stats.stale_retries),
            (1, 1, 0)
        );
        drop(client);
        assert_eq!(join(server).await, 2, "both requests on one connection");
    });
}

#[test]
fn connection_close_response_is_not_reused() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(drain(&mut response).await.unwrap(), b"ok");
        assert_eq!(client.idle_connections(&base), 0);
        // The server's read returns 0 while `client` is still alive.
        join(server).await;
    });
}

#[test]
fn dropping_the_response_mid_body_closes_the_connection() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n")
                .unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(&response.next_chunk().await.unwrap().unwrap()[..], b"one");
        drop(response);
        assert_eq!(client.idle_connections(&base), 0);
        join(server).await;
    });
}

#[test]
fn stale_idle_connection_is_retried_once_on_a_fresh_one() {
    each_driver(|| async {
        let (closed_tx, closed) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut first = accept(&l);
            read_request(&mut first);
            first.write_all(OK_HELLO).unwrap();
            // The server drops the idle keep-alive connection.
            drop(first);
            closed_tx.send(()).unwrap();
            let mut second = accept(&l);
            let request = read_request(&mut second);
            second.write_all(OK_HELLO).unwrap();
            expect_client_close(&mut second);
            request
        });
        let client = client();
        let mut response = client.request(post(&base, "{\"n\":1}")).await.unwrap();
        drain(&mut response).await.unwrap();
        assert_eq!(client.idle_connections(&base), 1);
        closed.recv_timeout(PATIENCE).unwrap();
        drop(response);
        let mut response = client.request(post(&base, "{\"n\":2}")).await.unwrap();
        assert_eq!(drain(&mut response).await.unwrap(), b"hello");
        let stats = client.stats();
        assert_eq!(
            (stats.connects, stats.reuses, stats.stale_retries),
            (2, 1, 1)
        );
        drop(response); // holds the client's pool too
        drop(client);
        let request = join(server).await;
        assert!(
            request.ends_with(b"{\"n\":2}"),
            "the retry carries the body"
        );
    });
}

#[test]
fn a_fresh_connection_closed_without_a_response_is_not_retried() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
        });
        let client = client();
        let error = client.request(post(&base, "{}")).await.unwrap_err();
        assert_eq!(error, ProviderError::ClosedBeforeResponse);
        assert!(!error.is_retryable_before_send());
        assert_eq!(error.side(), Side::Provider);
        let stats = client.stats();
        assert_eq!((stats.connects, stats.stale_retries), (1, 0));
        join(server).await;
    });
}

#[test]
fn truncated_body_is_a_typed_error() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                .unwrap();
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(
            drain(&mut response).await,
            Err(ProviderError::BodyTruncated)
        );
        assert!(
            response.next_chunk().await.is_none(),
            "nothing after the error"
        );
        assert_eq!(client.idle_connections(&base), 0);
        join(server).await;
    });
}

#[test]
fn malformed_and_oversized_heads_are_typed_errors() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 abc OK\r\n\r\n").unwrap();
            let mut s = accept(&l);
            read_request(&mut s);
            let big = format!("HTTP/1.1 200 OK\r\nx-big: {}\r\n\r\n", "a".repeat(2048));
            s.write_all(big.as_bytes()).unwrap();
        });
        let client = ProviderClient::new(ProviderClientConfig {
            head_limits: HeadLimits {
                max_head_bytes: 1024,
                ..HeadLimits::DEFAULT
            },
            ..ProviderClientConfig::default()
        });
        let error = client.request(post(&base, "{}")).await.unwrap_err();
        assert!(
            matches!(error, ProviderError::MalformedHead(_)),
            "{error:?}"
        );
        let error = client.request(post(&base, "{}")).await.unwrap_err();
        assert!(matches!(error, ProviderError::HeadTooLarge(_)), "{error:?}");
        join(server).await;
    });
}

#[test]
fn interim_1xx_heads_are_skipped() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            read_request(&mut s);
            s.write_all(
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n\
                  HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
            )
            .unwrap();
            expect_client_close(&mut s);
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(drain(&mut response).await.unwrap(), b"ok");
        drop(response); // holds the client's pool too
        drop(client);
        join(server).await;
    });
}

/// Runs and tunnels build their client from the default: its own head
/// bound must stay unset, or it would race their stall watchdog, and cut a
/// provider whose stall timeout is longer (a long non-streaming
/// completion's head comes when generation is done).
#[test]
fn the_default_client_leaves_the_head_wait_to_the_watchdog() {
    assert_eq!(ProviderClientConfig::default().head_timeout_ms, None);
}

#[test]
fn head_timeout_and_refused_connect_are_typed() {
    each_driver(|| async {
        let (release, released) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            released.recv_timeout(PATIENCE).unwrap();
        });
        let client = ProviderClient::new(ProviderClientConfig {
            head_timeout_ms: Some(50),
            ..ProviderClientConfig::default()
        });
        let error = client.request(post(&base, "{}")).await.unwrap_err();
        assert_eq!(error, ProviderError::HeadTimeout { after_ms: 50 });
        assert!(!error.is_retryable_before_send());
        release.send(()).unwrap();
        join(server).await;

        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let closed = BaseUrl::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let error = client.request(post(&closed, "{}")).await.unwrap_err();
        assert_eq!(error, ProviderError::ConnectRefused);
        assert!(error.is_retryable_before_send());
    });
}

#[test]
fn idle_timeout_uses_the_clients_clock() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut connections = 0;
            for _ in 0..2 {
                let mut s = accept(&l);
                connections += 1;
                read_request(&mut s);
                s.write_all(OK_HELLO).unwrap();
                if connections == 2 {
                    expect_client_close(&mut s);
                }
            }
            connections
        });
        let clock = SharedManualClock::new(10_000);
        let client = ProviderClient::new(ProviderClientConfig {
            pool: PoolConfig {
                idle_timeout_ms: 1_000,
                ..PoolConfig::default()
            },
            clock: ClockSource::Manual(clock.clone()),
            ..ProviderClientConfig::default()
        });
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        drain(&mut response).await.unwrap();
        assert_eq!(client.idle_connections(&base), 1);
        clock.advance(1_000);
        drop(response);
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(drain(&mut response).await.unwrap(), b"hello");
        assert_eq!((client.stats().connects, client.stats().reuses), (2, 0));
        drop(response); // holds the client's pool too
        drop(client);
        assert_eq!(join(server).await, 2);
    });
}

#[test]
fn bodyless_response_releases_the_connection_at_once() {
    each_driver(|| async {
        let (base, server) = serve(|l| {
            let mut s = accept(&l);
            let mut served = 0;
            while !read_request(&mut s).is_empty() {
                s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
                served += 1;
            }
            served
        });
        let client = client();
        for _ in 0..2 {
            let response = client.request(post(&base, "{}")).await.unwrap();
            assert_eq!(response.status(), 204);
            assert!(response.is_done());
        }
        assert_eq!(client.stats().connects, 1);
        drop(client);
        assert_eq!(join(server).await, 2);
    });
}

#[test]
fn a_cancelled_read_poisons_the_response() {
    each_driver(|| async {
        let (release, released) = mpsc::channel::<()>();
        let (base, server) = serve(move |l| {
            let mut s = accept(&l);
            read_request(&mut s);
            // A partial size line stays in the receive buffer, so the next
            // read runs with the buffer in flight (an empty buffer would
            // only wait for readability, which is cancel-safe).
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n3")
                .unwrap();
            released.recv_timeout(PATIENCE).unwrap();
            let _ = s.write_all(b"\r\ntwo\r\n0\r\n\r\n");
        });
        let client = client();
        let mut response = client.request(post(&base, "{}")).await.unwrap();
        assert_eq!(&response.next_chunk().await.unwrap().unwrap()[..], b"one");
        let waited = monoio::time::timeout(Duration::from_millis(20), response.next_chunk()).await;
        assert!(waited.is_err(), "nothing to read yet");
        release.send(()).unwrap();
        let error = response.next_chunk().await.unwrap().unwrap_err();
        assert_eq!(error, ProviderError::Cancelled);
        assert_eq!(error.side(), Side::Node);
        assert!(response.next_chunk().await.is_none());
        assert_eq!(client.idle_connections(&base), 0);
        drop(response);
        join(server).await;
    });
}
