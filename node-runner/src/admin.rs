//! The Node's admin port: a tiny HTTP/1.1 responder for `GET /metrics`
//! (Prometheus text, [`crate::metrics`]) and `GET /healthz`.
//!
//! `iop-node --admin-addr HOST:PORT` (default `127.0.0.1:9100`, port 0
//! allowed, `off` disables it) binds it on the link core's runtime; the
//! start-up log event `admin_listening` names the bound address.
//!
//! # Contract
//! - `GET /metrics` → 200, `text/plain; version=0.0.4`, every Node metric
//!   (all closed label combinations, zeros included).
//! - `GET /healthz` → 200 `ok` while the process serves.
//! - `HEAD` of either: the same head, no body. A query string is ignored.
//! - Any other path → 404; another method → 405 with `allow: GET, HEAD`.
//! - A request with a body, a malformed head or one over
//!   [`MAX_HEAD_BYTES`] → 400 and the connection closes.
//! - Keep-alive per HTTP/1.1 (`connection: close` and HTTP/1.0 close);
//!   a connection idle for [`IDLE_TIMEOUT`] or slower than [`HEAD_TIMEOUT`]
//!   with its head is closed; at most [`MAX_CONNECTIONS`] are served at
//!   once (more are closed on accept).
//!
//! It never serves anything but these two documents: no run data, config,
//! provider body or credential is reachable from here.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use framing::http::{BodyFraming, HeadLimits, Method, RequestHead, Version, parse_request_head};
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};

use crate::metrics::NodeMetrics;
use crate::store::StoreHandle;

/// The default admin address.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9100";
/// Largest request head accepted.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// How long a connection may wait between requests.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request head may take to arrive once started.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 64;

/// Where the admin port listens, from `--admin-addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminAddr {
    /// `off`: no admin port.
    Off,
    /// Listen here (port 0: any free port).
    Listen(SocketAddr),
}

/// Why an `--admin-addr` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--admin-addr {0:?} is neither `off` nor an IP:PORT address")]
pub struct AdminAddrError(pub String);

impl std::str::FromStr for AdminAddr {
    type Err = AdminAddrError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "off" | "none" | "disabled" => Ok(Self::Off),
            addr => addr
                .parse()
                .map(Self::Listen)
                .map_err(|_| AdminAddrError(value.to_owned())),
        }
    }
}

/// What the admin port serves.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The metrics rendered by `/metrics`.
    pub metrics: &'static NodeMetrics,
    /// The run store's writer, whose counters `/metrics` lists too (none
    /// when the Node runs without a store, as in tests).
    pub store: Option<StoreHandle>,
}

impl AdminState {
    /// The `/metrics` document.
    pub fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        self.metrics.render(&mut out);
        if let Some(store) = &self.store {
            store.stats().render(&mut out);
        }
        out
    }
}

/// Serves the admin port on `listener` (a bound std listener, moved onto
/// this monoio runtime) until the runtime stops.
pub async fn serve(listener: std::net::TcpListener, state: AdminState) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let open = Rc::new(Cell::new(0usize));
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            // A transient accept error (EMFILE, aborted handshake): go on.
            monoio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if open.get() >= MAX_CONNECTIONS {
            drop(stream);
            continue;
        }
        open.set(open.get() + 1);
        let open = Rc::clone(&open);
        let state = state.clone();
        monoio::spawn(async move {
            let _ = serve_connection(stream, state).await;
            open.set(open.get() - 1);
        });
    }
}

/// Answers requests on one connection until it closes or must close.
async fn serve_connection(mut stream: TcpStream, state: AdminState) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(1024);
    let limits = HeadLimits {
        max_head_bytes: MAX_HEAD_BYTES,
        max_headers: 32,
    };
    loop {
        if buf.is_empty() {
            match monoio::time::timeout(IDLE_TIMEOUT, fill(&mut stream, &mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return Ok(()),
            }
        }
        let head = monoio::time::timeout(HEAD_TIMEOUT, async {
            loop {
                match parse_request_head(&mut buf, &limits) {
                    Ok(Some(head)) => return Ok(Some(head)),
                    Ok(None) => {}
                    Err(_) => return Err(()),
                }
                match fill(&mut stream, &mut buf).await {
                    Ok(n) if n > 0 => {}
                    _ => return Ok(None),
                }
            }
        })
        .await;
        let head = match head {
            Ok(Ok(Some(head))) => head,
            Ok(Ok(None)) | Err(_) => return Ok(()),
            Ok(Err(())) => {
                let reply = Reply::text(400, "Bad Request", "malformed request\n").closing();
                return write(&mut stream, reply, false).await;
            }
        };
        let reply = respond(&head, &state);
        let keep = reply.keep_alive && head.keep_alive();
        write(&mut stream, reply, keep).await?;
        if !keep {
            return Ok(());
        }
    }
}

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: &'static str,
    /// `content-type`.
    pub content_type: &'static str,
    /// Extra header lines (`name: value\r\n` each).
    pub extra: &'static str,
    /// Body (empty for `HEAD`; the length is still the document's).
    pub body: Bytes,
    /// The document's length.
    pub content_length: usize,
    /// Whether the connection may serve another request after this one.
    pub keep_alive: bool,
}

impl Reply {
    fn text(status: u16, reason: &'static str, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        Self {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            extra: "",
            content_length: body.len(),
            body,
            keep_alive: true,
        }
    }

    fn closing(mut self) -> Self {
        self.keep_alive = false;
        self
    }

    /// The response bytes: head and body.
    pub fn to_bytes(&self, keep_alive: bool) -> Vec<u8> {
        let connection = if keep_alive { "keep-alive" } else { "close" };
        let mut out = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: {connection}\r\n{}\r\n",
            self.status, self.reason, self.content_type, self.content_length, self.extra
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// The reply to `head` (see the module docs).
pub fn respond(head: &RequestHead, state: &AdminState) -> Reply {
    let mut reply = route(head, state);
    // HTTP/1.0 clients get `connection: close` (no keep-alive negotiation).
    if head.version() != Version::Http11 {
        reply.keep_alive = false;
    }
    reply
}

fn route(head: &RequestHead, state: &AdminState) -> Reply {
    if head.body() != BodyFraming::Empty {
        return Reply::text(400, "Bad Request", "admin requests take no body\n").closing();
    }
    let path = head.path();
    let path = path
        .iter()
        .position(|b| *b == b'?')
        .map_or(path, |q| &path[..q]);
    let method = head.method();
    if !matches!(path, b"/metrics" | b"/healthz") {
        return Reply::text(404, "Not Found", "not found\n");
    }
    if !matches!(method, Method::Get | Method::Head) {
        let mut r = Reply::text(405, "Method Not Allowed", "method not allowed\n");
        r.extra = "allow: GET, HEAD\r\n";
        return r;
    }
    let mut reply = if path == b"/metrics" {
        let mut r = Reply::text(200, "OK", state.render_metrics());
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r
    } else {
        Reply::text(200, "OK", "ok\n")
    };
    if method == Method::Head {
        reply.body = Bytes::new();
    }
    reply
}

/// Reads into `buf`'s spare capacity; `Ok(0)` at end of stream.
async fn fill(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    buf.reserve(1024);
    // Into the spare capacity: monoio reads into a `BytesMut` at its start.
    let owned = std::mem::take(buf);
    let (len, capacity) = (owned.len(), owned.capacity());
    let (result, returned) = stream.read(owned.slice_mut(len..capacity)).await;
    *buf = returned.into_inner();
    result
}

async fn write(stream: &mut TcpStream, reply: Reply, keep_alive: bool) -> std::io::Result<()> {
    let (result, _) = stream.write_all(reply.to_bytes(keep_alive)).await;
    result.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{STALLS_TOTAL, node_metrics};

    fn state() -> AdminState {
        AdminState {
            metrics: node_metrics(),
            store: None,
        }
    }

    fn reply(raw: &str) -> Reply {
        let mut buf = BytesMut::from(raw.as_bytes());
        let head = parse_request_head(&mut buf, &HeadLimits::DEFAULT)
            .unwrap()
            .unwrap();
        respond(&head, &state())
    }

    #[test]
    fn admin_addr_parses_off_and_addresses() {
        assert_eq!("off".parse(), Ok(AdminAddr::Off));
        assert_eq!(
            DEFAULT_ADMIN_ADDR.parse(),
            Ok(AdminAddr::Listen("127.0.0.1:9100".parse().unwrap()))
        );
        assert_eq!(
            "[::1]:0".parse(),
            Ok(AdminAddr::Listen("[::1]:0".parse().unwrap()))
        );
        assert!("localhost:9100".parse::<AdminAddr>().is_err());
        assert!("9100".parse::<AdminAddr>().is_err());
    }

    #[test]
    fn metrics_and_healthz_answer_get_and_head() {
        let r = reply("GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n");
        assert_eq!(r.status, 200);
        assert!(r.content_type.starts_with("text/plain; version=0.0.4"));
        let text = String::from_utf8(r.body.to_vec()).unwrap();
        assert!(text.contains(STALLS_TOTAL), "{text}");
        assert!(r.keep_alive);
        let head = reply("HEAD /metrics?x=1 HTTP/1.1\r\n\r\n");
        assert_eq!((head.status, head.body.len()), (200, 0));
        assert!(head.content_length > 0);
        let r = reply("GET /healthz HTTP/1.1\r\n\r\n");
        assert_eq!((r.status, &r.body[..]), (200, &b"ok\n"[..]));
        let bytes = String::from_utf8(r.to_bytes(true)).unwrap();
        assert!(bytes.starts_with("HTTP/1.1 200 OK\r\n"), "{bytes}");
        assert!(bytes.contains("content-length: 3\r\n"), "{bytes}");
        assert!(bytes.ends_with("\r\n\r\nok\n"), "{bytes}");
    }

    #[test]
    fn metrics_list_the_run_store_writer_when_there_is_one() {
        use crate::store::{RunStore, StoreConfig, StoreWriter, WriterConfig};
        let dir = tempfile::tempdir().unwrap();
        let store = RunStore::open(dir.path(), StoreConfig::default()).unwrap();
        let writer = StoreWriter::spawn(store, WriterConfig::default()).unwrap();
        let with_store = AdminState {
            store: Some(writer.handle()),
            ..state()
        };
        let text = with_store.render_metrics();
        assert!(text.contains(STALLS_TOTAL), "{text}");
        assert!(
            text.contains("iop_node_run_store_updates_total{outcome=\"dropped_full\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("iop_node_run_store_commits_total{result=\"ok\"} 0\n"));
        assert!(!state().render_metrics().contains("iop_node_run_store_"));
    }

    #[test]
    fn everything_else_is_refused() {
        assert_eq!(reply("GET / HTTP/1.1\r\n\r\n").status, 404);
        assert_eq!(reply("GET /metrics/x HTTP/1.1\r\n\r\n").status, 404);
        let r = reply("DELETE /metrics HTTP/1.1\r\n\r\n");
        assert_eq!((r.status, r.extra), (405, "allow: GET, HEAD\r\n"));
        let r = reply("POST /metrics HTTP/1.1\r\ncontent-length: 2\r\n\r\n");
        assert_eq!(r.status, 400);
        assert!(!r.keep_alive, "a body is never read: close");
        assert!(!reply("GET /healthz HTTP/1.0\r\n\r\n").keep_alive);
    }
}
