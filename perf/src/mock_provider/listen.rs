//! Listening: the accept loop, connection tasks, and the handles that start
//! and stop a mock provider — in-process on the caller's tokio runtime
//! ([`serve`], [`bind`]) or thread-per-core for the binary ([`serve_threads`]).
//!
//! Thread-per-core: each thread runs a current-thread runtime with its own
//! `SO_REUSEPORT` listener on the same address, so the kernel spreads
//! connections and a request never crosses threads (no futex/eventfd
//! wake-ups, which dominate a work-stealing runtime's profile at 50k req/s).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::config::MockConfig;
use super::cut::{ConnWatch, WatchedIo};
use super::server::{Ctx, handle};
use super::stats::Stats;

/// Listen backlog of each listener.
const BACKLOG: u32 = 4096;

/// A mock provider running on the caller's tokio runtime. Dropping the
/// handle stops it as [`MockServer::shutdown`] does, without waiting: keep it
/// alive for as long as the server is needed.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl MockServer {
    /// The bound address (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, handy for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The live counters (the same as `GET /mock/stats`).
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Stops accepting, drops every open connection, and waits for the
    /// accept loop to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Binds `addr` and serves the mock on the current tokio runtime.
pub async fn bind(addr: SocketAddr, config: MockConfig) -> io::Result<MockServer> {
    serve(TcpListener::bind(addr).await?, config)
}

/// Serves the mock on `listener`, spawning on the current tokio runtime
/// (must be called from inside one).
pub fn serve(listener: TcpListener, config: MockConfig) -> io::Result<MockServer> {
    let addr = listener.local_addr()?;
    let ctx = Ctx::new(config);
    let stats = ctx.stats.clone();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(accept_loop(listener, ctx, stop_rx));
    Ok(MockServer {
        addr,
        stats,
        stop,
        task,
    })
}

/// A thread-per-core mock provider (see the module docs). Dropping the
/// handle stops the threads without joining them.
#[derive(Debug)]
pub struct MockThreads {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl MockThreads {
    /// The bound address (resolves port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The live counters, shared by every thread.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Blocks until every thread ends (after [`MockThreads::shutdown`] from
    /// elsewhere, or a fatal error; for the binary: forever).
    pub fn join(self) {
        // Keep the stop signal alive while joining: dropping it stops the threads.
        let MockThreads { threads, stop, .. } = self;
        for t in threads {
            let _ = t.join();
        }
        drop(stop);
    }

    /// Stops every thread, dropping open connections, and joins them.
    pub fn shutdown(self) {
        let _ = self.stop.send(true);
        self.join();
    }
}

fn reuseport_listener(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG as i32)?;
    Ok(socket.into())
}

/// Serves the mock on `threads` threads, each with a current-thread tokio
/// runtime and its own `SO_REUSEPORT` listener on `addr` (port 0 picks one
/// free port for all). Needs no runtime from the caller.
pub fn serve_threads(
    addr: SocketAddr,
    config: MockConfig,
    threads: usize,
) -> io::Result<MockThreads> {
    // The first listener resolves port 0; the others join it.
    let first = reuseport_listener(addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..threads.max(1) {
        listeners.push(reuseport_listener(addr)?);
    }

    let ctx = Ctx::new(config);
    let stats = ctx.stats.clone();
    let (stop, stop_rx) = watch::channel(false);
    let mut handles = Vec::new();
    for (i, std_listener) in listeners.into_iter().enumerate() {
        let (ctx, stop_rx) = (ctx.clone(), stop_rx.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let h = thread::Builder::new()
            .name(format!("mock-provider-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    match TcpListener::from_std(std_listener) {
                        Ok(l) => accept_loop(l, ctx, stop_rx).await,
                        Err(e) => eprintln!("mock provider thread {i}: {e}"),
                    }
                });
            })?;
        handles.push(h);
    }
    Ok(MockThreads {
        addr,
        stats,
        stop,
        threads: handles,
    })
}

async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.changed() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(connection(stream, ctx.clone(), stop.clone()));
            }
            // Out of file descriptors and the like: back off instead of spinning.
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Decrements the open-connections gauge when the connection task ends.
struct OpenConn(Arc<Stats>);

impl Drop for OpenConn {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Relaxed);
    }
}

async fn connection(stream: TcpStream, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    Stats::bump(&ctx.stats.connections_total);
    Stats::bump(&ctx.stats.connections_open);
    let _open = OpenConn(ctx.stats.clone());
    let Some(tls) = ctx.config.tls.clone() else {
        return serve_http(stream, ctx, stop).await;
    };
    let accepted = tokio::select! {
        accepted = tokio_rustls::TlsAcceptor::from(tls.0).accept(stream) => accepted,
        _ = stop.changed() => return,
    };
    // A failed handshake is the client's to report; the mock just closes.
    if let Ok(stream) = accepted {
        serve_http(stream, ctx, stop).await;
    }
}

/// HTTP/1.1 on an accepted connection (plain TCP or TLS) until it closes
/// or the server stops.
async fn serve_http<T>(stream: T, ctx: Arc<Ctx>, mut stop: watch::Receiver<bool>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Streams report when this socket saw the client go (see `cut`).
    let watch = Arc::new(ConnWatch::default());
    let io = TokioIo::new(WatchedIo::new(stream, watch.clone()));
    let svc = service_fn(move |req| {
        let (ctx, watch) = (ctx.clone(), watch.clone());
        async move {
            let mut response = handle(ctx, req).await?;
            response.body_mut().attach(&watch);
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let conn = http1::Builder::new()
        .keep_alive(true)
        .writev(true)
        .header_read_timeout(None)
        .serve_connection(io, svc);
    tokio::select! {
        _ = conn => {}
        _ = stop.changed() => {}
    }
}
