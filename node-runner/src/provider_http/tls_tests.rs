//! HTTPS: the client against a rustls server on a std thread, with a test
//! CA and certificates made by `rcgen`, under both monoio drivers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rustls::{ServerConfig, ServerConnection, StreamOwned};

use super::conn::Connection;
use super::tests::each_driver;
use super::*;
use crate::test_ca::TestCa;

const PATIENCE: Duration = Duration::from_secs(5);

impl TestCa {
    /// A client trusting this CA (on top of the webpki roots).
    fn client(&self) -> ProviderClient {
        let tls = self.client_config();
        ProviderClient::new(ProviderClientConfig {
            tls,
            ..ProviderClientConfig::default()
        })
    }
}

type TlsStream = StreamOwned<ServerConnection, TcpStream>;

/// Runs `script` on a thread with a listener on the address `localhost`
/// resolves to first; the base URL names `localhost`, so SNI and the
/// certificate check use a host name.
fn serve<T: Send + 'static>(
    config: Arc<ServerConfig>,
    script: impl FnOnce(TcpListener, Arc<ServerConfig>) -> T + Send + 'static,
) -> (BaseUrl, JoinHandle<T>) {
    let local: SocketAddr = ("localhost", 0).to_socket_addrs().unwrap().next().unwrap();
    let listener = TcpListener::bind(local).unwrap();
    let port = listener.local_addr().unwrap().port();
    let base = BaseUrl::parse(&format!("https://localhost:{port}/v1")).unwrap();
    (base, std::thread::spawn(move || script(listener, config)))
}

/// Accepts one connection and completes the handshake.
fn accept_tls(listener: &TcpListener, config: &Arc<ServerConfig>) -> TlsStream {
    let (mut tcp, _) = listener.accept().unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = ServerConnection::new(Arc::clone(config)).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp).expect("handshake");
    }
    assert_eq!(tls.server_name(), Some("localhost"), "SNI is the host");
    assert_eq!(tls.alpn_protocol(), Some(&b"http/1.1"[..]));
    StreamOwned::new(tls, tcp)
}

/// Accepts one connection whose handshake must fail; returns the error.
fn accept_failing(listener: &TcpListener, config: &Arc<ServerConfig>) -> String {
    let (mut tcp, _) = listener.accept().unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = ServerConnection::new(Arc::clone(config)).unwrap();
    loop {
        match tls.complete_io(&mut tcp) {
            Err(error) => return error.to_string(),
            Ok((0, 0)) => return "client closed".to_owned(),
            Ok(_) => {}
        }
    }
}

/// Reads one request (head and `Content-Length` body); empty at EOF.
fn read_request(stream: &mut impl Read) -> Vec<u8> {
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

/// Blocks until the client closes (EOF, with or without `close_notify`).
fn expect_client_close(stream: &mut TlsStream) {
    let mut rest = [0u8; 64];
    match stream.read(&mut rest) {
        Ok(0) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {}
        other => panic!("expected the client's close, got {other:?}"),
    }
}

/// Waits for the server thread without blocking the runtime (see
/// `tests::join`).
async fn join<T>(server: JoinHandle<T>) -> T {
    while !server.is_finished() {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
    server.join().expect("server script passed")
}

async fn drain(response: &mut ProviderResponse) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.next_chunk().await {
        body.extend_from_slice(&chunk?);
    }
    Ok(body)
}

#[test]
fn https_get_and_streamed_chunked_post() {
    each_driver(|| async {
        let ca = TestCa::new("IOP test CA");
        let (got_first, first_seen) = mpsc::channel::<()>();
        let (base, server) = serve(
            ca.server(&["localhost", "127.0.0.1", "::1"]),
            move |l, c| {
                let mut s = accept_tls(&l, &c);
                let get = read_request(&mut s);
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"ok\":1}\n")
                    .unwrap();
                let post = read_request(&mut s);
                s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .unwrap();
                s.write_all(b"5\r\nfirst\r\n").unwrap();
                // Chunk 2 only after the client holds chunk 1.
                first_seen
                    .recv_timeout(PATIENCE)
                    .expect("client saw chunk 1");
                s.write_all(b"6\r\nsecond\r\n0\r\n\r\n").unwrap();
                expect_client_close(&mut s);
                (get, post)
            },
        );
        let client = ca.client();
        let mut response = client
            .request(ProviderRequest::new("GET", base.clone(), "/models"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(drain(&mut response).await.unwrap(), b"{\"ok\":1}\n");
        drop(response); // holds the client's pool

        // A body larger than INLINE_BODY_MAX, in three slices, goes out
        // behind the head in one vectored write through rustls.
        let body: Vec<u8> = (0..INLINE_BODY_MAX * 3 + 7)
            .map(|i| (i % 251) as u8)
            .collect();
        let parts = [
            Bytes::copy_from_slice(&body[..5]),
            Bytes::copy_from_slice(&body[5..INLINE_BODY_MAX * 2]),
            Bytes::copy_from_slice(&body[INLINE_BODY_MAX * 2..]),
        ];
        let post = ProviderRequest::new("POST", base.clone(), "/chat/completions")
            .header("content-type", "application/json")
            .body(RequestBody::from_parts(parts));
        let mut response = client.request(post).await.unwrap();
        let first = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&first[..], b"first");
        got_first.send(()).unwrap();
        let second = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&second[..], b"second");
        assert!(response.next_chunk().await.is_none());
        assert_eq!(client.stats().connects, 1);
        drop(response);
        drop(client);
        let (get, post) = join(server).await;
        let port = base.port();
        assert_eq!(
            String::from_utf8(get).unwrap(),
            format!(
                "GET /v1/models HTTP/1.1\r\nHost: localhost:{port}\r\n\
                 Connection: keep-alive\r\n\r\n"
            )
        );
        assert!(post.starts_with(b"POST /v1/chat/completions HTTP/1.1\r\n"));
        assert!(post.ends_with(&body));
    });
}

#[test]
fn keep_alive_reuses_one_tls_connection() {
    each_driver(|| async {
        let ca = TestCa::new("IOP test CA");
        let (base, server) = serve(ca.server(&["localhost", "127.0.0.1", "::1"]), |l, c| {
            let mut s = accept_tls(&l, &c);
            for _ in 0..2 {
                read_request(&mut s);
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                    .unwrap();
            }
            // Both requests came on that one connection; nothing else
            // connected.
            l.set_nonblocking(true).unwrap();
            let second_accept = l.accept().map(|_| ()).map_err(|e| e.kind());
            assert_eq!(second_accept, Err(std::io::ErrorKind::WouldBlock));
            expect_client_close(&mut s);
        });
        let client = ca.client();
        for _ in 0..2 {
            let request = ProviderRequest::new("GET", base.clone(), "/health");
            let mut response = client.request(request).await.unwrap();
            assert_eq!(drain(&mut response).await.unwrap(), b"hello");
        }
        let stats = client.stats();
        assert_eq!((stats.connects, stats.reuses), (1, 1));
        assert_eq!(client.idle_connections(&base), 1);
        // A plain-http base to the same host and port is another origin.
        let plain = BaseUrl::parse(&format!("http://localhost:{}/v1", base.port())).unwrap();
        assert_eq!(client.idle_connections(&plain), 0);
        drop(client);
        join(server).await;
    });
}

#[test]
fn untrusted_certificate_is_a_typed_tls_error() {
    each_driver(|| async {
        let trusted = TestCa::new("IOP test CA");
        let stranger = TestCa::new("Someone else's CA");
        let (base, server) = serve(
            stranger.server(&["localhost", "127.0.0.1", "::1"]),
            |l, c| accept_failing(&l, &c),
        );
        let client = trusted.client();
        let request = ProviderRequest::new("GET", base, "/health");
        let error = client.request(request).await.unwrap_err();
        let ProviderError::Tls { host, failure, .. } = &error else {
            panic!("expected a TLS error, got {error:?}");
        };
        assert_eq!(
            (host.as_str(), *failure),
            ("localhost", TlsFailure::UntrustedCertificate)
        );
        assert_eq!(error.side(), Side::Provider);
        assert!(error.is_retryable_before_send());
        assert!(error.to_string().contains("localhost"), "{error}");
        join(server).await;
    });
}

#[test]
fn certificate_for_another_host_is_a_typed_tls_error() {
    each_driver(|| async {
        let ca = TestCa::new("IOP test CA");
        let (base, server) = serve(ca.server(&["other.example"]), |l, c| accept_failing(&l, &c));
        let client = ca.client();
        let request = ProviderRequest::new("GET", base, "/health");
        let error = client.request(request).await.unwrap_err();
        assert!(
            matches!(
                &error,
                ProviderError::Tls { host, failure: TlsFailure::WrongHost, .. } if host == "localhost"
            ),
            "{error:?}"
        );
        assert_eq!(client.stats().connects, 0);
        join(server).await;
    });
}

#[test]
fn close_notify_and_a_cut_stream_read_as_eof() {
    each_driver(|| async {
        let ca = TestCa::new("IOP test CA");
        let (base, server) = serve(ca.server(&["localhost", "127.0.0.1", "::1"]), |l, c| {
            // Close-delimited body ended by close_notify: complete.
            let mut s = accept_tls(&l, &c);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil close").unwrap();
            s.conn.send_close_notify();
            s.flush().unwrap();
            drop(s);
            // Content-Length body cut by a TCP close without close_notify.
            let mut s = accept_tls(&l, &c);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf!")
                .unwrap();
            s.flush().unwrap();
        });
        let client = ca.client();
        let request = ProviderRequest::new("GET", base.clone(), "/a");
        let mut response = client.request(request).await.unwrap();
        assert_eq!(drain(&mut response).await.unwrap(), b"until close");
        assert_eq!(client.idle_connections(&base), 0);
        let request = ProviderRequest::new("GET", base.clone(), "/b");
        let mut response = client.request(request).await.unwrap();
        assert_eq!(&response.next_chunk().await.unwrap().unwrap()[..], b"half!");
        assert_eq!(
            response.next_chunk().await.unwrap(),
            Err(ProviderError::BodyTruncated)
        );
        join(server).await;
    });
}

/// As over plain TCP (`buffer_tests`): a quiet https stream waits holding
/// neither a plaintext nor a ciphertext buffer, and is pooled so.
#[test]
fn an_idle_https_body_waits_without_buffers() {
    each_driver(|| async {
        let ca = TestCa::new("IOP test CA");
        let (release, released) = mpsc::channel::<()>();
        let config = ca.server(&["localhost", "127.0.0.1", "::1"]);
        let (base, server) = serve(config, move |l, c| {
            let mut s = accept_tls(&l, &c);
            read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello")
                .unwrap();
            s.flush().unwrap();
            released.recv_timeout(PATIENCE).unwrap();
            s.write_all(b"world").unwrap();
            s.flush().unwrap();
            expect_client_close(&mut s);
        });
        let client = ca.client();
        let request = ProviderRequest::new("GET", base.clone(), "/a");
        let mut response = client.request(request).await.unwrap();
        let hello = response.next_chunk().await.unwrap().unwrap();
        assert_eq!(&hello[..], b"hello");
        assert!(response.buffer_capacity().unwrap() > 0);
        let waited = monoio::time::timeout(Duration::from_millis(20), response.next_chunk()).await;
        assert!(waited.is_err(), "nothing to read yet");
        assert_eq!(response.buffer_capacity(), Some(0), "both buffers freed");
        drop(hello);
        release.send(()).unwrap();
        assert_eq!(&response.next_chunk().await.unwrap().unwrap()[..], b"world");
        assert!(response.next_chunk().await.is_none());
        assert_eq!(client.idle_connections(&base), 1);
        drop(response);
        drop(client);
        join(server).await;
    });
}

/// A busy https stream's reads grow as a plain one's do, past one TLS
/// record (16 KiB): each takes as much ciphertext as its room holds
/// plaintext. (Through `monoio-rustls` no read returned more than a
/// record, and a tunnel's frames were that small: profiles.md round 55.)
#[test]
fn busy_https_reads_grow_past_one_record() {
    each_driver(|| async {
        // Few enough bytes for the kernel to hold them all before the
        // first read: reads of 2, 4, 8 and 16 KiB fill, the next one takes
        // the remaining 30 KiB at once.
        const SENT: usize = 60 * 1024;
        let ca = TestCa::new("IOP test CA");
        let (written, was_written) = mpsc::channel::<()>();
        let config = ca.server(&["localhost", "127.0.0.1", "::1"]);
        let (base, server) = serve(config, move |l, c| {
            let mut s = accept_tls(&l, &c);
            s.write_all(&[b'x'; SENT]).unwrap();
            s.flush().unwrap();
            written.send(()).unwrap();
            expect_client_close(&mut s);
        });
        let tls = ca.client_config();
        let mut conn = Connection::connect(&base, PATIENCE, &tls, None)
            .await
            .unwrap();
        while was_written.try_recv().is_err() {
            monoio::time::sleep(Duration::from_millis(1)).await;
        }
        let (mut reads, mut waits) = (Vec::new(), Vec::new());
        while conn.buf.len() < SENT {
            let (n, waited) = crate::runtime::waited(conn.read_more()).await;
            let n = n.unwrap();
            assert_ne!(n, 0, "early EOF");
            reads.push(n);
            waits.push(waited);
        }
        assert!(conn.buf.iter().all(|&b| b == b'x'));
        assert_eq!(reads, [2048, 4096, 8192, 16384, SENT - 30 * 1024]);
        if crate::runtime::on_uring() {
            // The first read waits for readiness, then takes a record at
            // once; the next two come out of rustls; the fourth reads
            // through the ring (every other socket read), the fifth at
            // once (`TlsStream::read_now`).
            assert_eq!(
                waits,
                [true, false, false, true, false],
                "true = waited its turn"
            );
        }
        drop(conn);
        join(server).await;
    });
}

/// A read appends after the bytes not yet parsed (monoio reads at a
/// buffer's start unless given its spare part), over TCP and TLS.
#[test]
fn a_read_appends_to_unparsed_bytes() {
    each_driver(|| async {
        let ca = TestCa::new("IOP test CA");
        let config = ca.server(&["localhost", "127.0.0.1", "::1"]);
        let (base, server) = serve(config, |l, c| {
            let mut s = accept_tls(&l, &c);
            s.write_all(b"def").unwrap();
            expect_client_close(&mut s);
        });
        let tls = ca.client_config();
        let mut conn = Connection::connect(&base, PATIENCE, &tls, None)
            .await
            .unwrap();
        conn.buf.extend_from_slice(b"abc");
        while conn.buf.len() < 6 {
            assert_ne!(conn.read_more().await.unwrap(), 0, "early EOF");
        }
        assert_eq!(&conn.buf[..], b"abcdef");
        drop(conn);
        join(server).await;

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = BaseUrl::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"def").unwrap();
        });
        let mut conn = Connection::connect(&base, PATIENCE, &tls, None)
            .await
            .unwrap();
        conn.buf.extend_from_slice(b"abc");
        while conn.buf.len() < 6 {
            assert_ne!(conn.read_more().await.unwrap(), 0, "early EOF");
        }
        assert_eq!(&conn.buf[..], b"abcdef");
        join(server).await;
    });
}
