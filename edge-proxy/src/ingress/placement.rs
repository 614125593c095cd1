//! Which core serves an accepted client connection.
//!
//! Every core accepts on its own `SO_REUSEPORT` listener, so the kernel
//! spreads connections over the cores by a hash. But a request is relayed
//! through the core that owns its node's link: a connection served on any
//! other core sends each request's frames to that core and gets each answer
//! back from it, two cross-core wakeups a request. When every ready node's
//! link lives on one core (one node, the common small deployment), a
//! connection accepted elsewhere is handed to that core while it serves
//! fewer than the *slack* (`--link-core-slack`, default
//! [`DEFAULT_LINK_CORE_SLACK`]) client connections; past it, connections
//! stay where they were accepted and the other cores share the load.
//! 0 turns the hand-off off. The Node places runs the same way
//! (`node_runner::runs::cores`).
//!
//! A hand-off moves the socket itself (its descriptor) right after the
//! accept, before anything was read from it: the receiving core serves it
//! like one it accepted. If that core stopped taking them (a drain), the
//! accepting core serves it.

use std::future::Future;
use std::net::TcpStream as StdTcpStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use monoio::net::TcpStream;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Default most client connections a link core serves before connections
/// accepted on other cores stay there. 64, not 16: a client's keep-alive
/// pool is often that wide while only a few of its connections are busy at
/// once, and each one served elsewhere costs two cross-core wakeups a
/// request (an open loop at 5,000/s over 64 connections: the Edge's CPU a
/// request −15 %, `bench-results/profiles.md`, round 11).
pub const DEFAULT_LINK_CORE_SLACK: usize = 64;

/// Sockets handed to one core.
pub type Handoffs = UnboundedReceiver<StdTcpStream>;

/// Open client connections per core and the hand-off channels (see the
/// module docs).
#[derive(Debug)]
pub struct Placement {
    slack: usize,
    open: Vec<AtomicUsize>,
    handoff: Vec<UnboundedSender<StdTcpStream>>,
}

impl Placement {
    /// Placement over `cores` cores with `slack`, and each core's receiver of
    /// handed-off sockets, in core order.
    pub fn new(cores: usize, slack: usize) -> (Placement, Vec<Handoffs>) {
        let (handoff, receivers) = (0..cores).map(|_| unbounded_channel()).unzip();
        let placement = Placement {
            slack,
            open: (0..cores).map(|_| AtomicUsize::new(0)).collect(),
            handoff,
        };
        (placement, receivers)
    }

    /// The core a connection accepted on `here` should go to, if not `here`:
    /// `link_core()` (the one core every ready node's link lives on, asked
    /// only when the hand-off is on) while it serves fewer than the slack.
    pub fn hand_to(&self, here: usize, link_core: impl FnOnce() -> Option<usize>) -> Option<usize> {
        if self.slack == 0 {
            return None;
        }
        let there = link_core().filter(|&core| core != here)?;
        let open = self.open.get(there)?.load(Ordering::Relaxed);
        (open < self.slack).then_some(there)
    }

    /// Sends `stream` to core `to`; gives it back to serve here if that core
    /// no longer takes connections (it drains). In the rare race where it
    /// stopped after the check, the socket cannot always be taken back
    /// (re-registering it may fail): it is then closed, before any byte of
    /// it was read, and logged.
    pub fn hand_off(&self, to: usize, stream: TcpStream) -> Option<TcpStream> {
        let Some(sender) = self.handoff.get(to).filter(|s| !s.is_closed()) else {
            return Some(stream);
        };
        let returned = sender.send(into_std(stream)).err()?;
        match TcpStream::from_std(returned.0) {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(core = to, %error, "a client connection could not be taken back");
                None
            }
        }
    }

    /// Counts a connection served on `core` until the guard drops.
    pub fn serving(self: &std::sync::Arc<Self>, core: usize) -> Serving {
        if let Some(open) = self.open.get(core) {
            open.fetch_add(1, Ordering::Relaxed);
        }
        Serving {
            placement: std::sync::Arc::clone(self),
            core,
        }
    }

    /// Client connections `core` serves now.
    pub fn open(&self, core: usize) -> usize {
        self.open
            .get(core)
            .map_or(0, |open| open.load(Ordering::Relaxed))
    }
}

/// One served connection, counted on its core while it lives.
#[derive(Debug)]
pub struct Serving {
    placement: std::sync::Arc<Placement>,
    core: usize,
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(open) = self.placement.open.get(self.core) {
            open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A connection's task: its future (boxed: a wrapping block would lay it
/// out twice) and its count on the core.
#[derive(Debug)]
pub struct Counted<F> {
    connection: Pin<Box<F>>,
    _serving: Serving,
}

impl<F: Future<Output = ()>> Counted<F> {
    /// `connection`, counted by `serving` until it ends or is dropped.
    pub fn new(connection: F, serving: Serving) -> Self {
        Counted {
            connection: Box::pin(connection),
            _serving: serving,
        }
    }
}

impl<F: Future<Output = ()>> Future for Counted<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.connection.as_mut().poll(cx)
    }
}

/// The socket of `stream` as a std stream, for another core's runtime.
#[allow(unsafe_code)] // taking over a descriptor; see the SAFETY note
fn into_std(stream: TcpStream) -> StdTcpStream {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let fd = stream.into_raw_fd();
    // SAFETY: `into_raw_fd` gave up `stream`'s ownership of the open
    // descriptor `fd` (monoio no longer tracks or closes it), so the std
    // stream is its one owner. Exercised by `a_handed_off_socket_is_served_by_the_other_runtime`.
    unsafe { StdTcpStream::from_raw_fd(fd) }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;

    use super::*;
    use crate::runtime::{IoDriver, block_on};

    #[test]
    fn connections_go_to_the_link_core_within_the_slack() {
        let (placement, _receivers) = Placement::new(2, 2);
        let placement = Arc::new(placement);
        assert_eq!(placement.hand_to(0, || Some(1)), Some(1));
        assert_eq!(placement.hand_to(1, || Some(1)), None, "already there");
        assert_eq!(placement.hand_to(0, || None), None, "no one link core");
        assert_eq!(placement.hand_to(0, || Some(7)), None, "no such core");
        let first = placement.serving(1);
        let second = placement.serving(1);
        assert_eq!(placement.open(1), 2);
        assert_eq!(placement.hand_to(0, || Some(1)), None, "the slack is used");
        drop(first);
        assert_eq!(placement.hand_to(0, || Some(1)), Some(1));
        drop(second);
        assert_eq!(placement.open(1), 0);
        let (off, _receivers) = Placement::new(2, 0);
        assert_eq!(off.hand_to(0, || Some(1)), None, "slack 0: off");
    }

    /// A socket accepted on one runtime is moved to another, which reads
    /// and writes it; a core that stopped taking sockets gives it back.
    #[test]
    fn a_handed_off_socket_is_served_by_the_other_runtime() {
        for driver in [IoDriver::Epoll, IoDriver::Uring] {
            if driver == IoDriver::Uring && !monoio::utils::detect_uring() {
                continue;
            }
            let (placement, mut receivers) = Placement::new(2, 16);
            let mut core1 = receivers.pop().expect("core 1's receiver");
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let client = std::thread::spawn(move || {
                let mut client = std::net::TcpStream::connect(addr).unwrap();
                client.write_all(b"ping").unwrap();
                let mut answer = [0u8; 4];
                client.read_exact(&mut answer).unwrap();
                answer
            });
            block_on(driver, async {
                let listener = monoio::net::TcpListener::from_std(listener).unwrap();
                let (accepted, _) = listener.accept().await.unwrap();
                assert!(placement.hand_off(1, accepted).is_none(), "core 1 takes it");
            })
            .unwrap();
            let moved = core1.try_recv().expect("the socket reached core 1");
            let served = std::thread::spawn(move || {
                block_on(driver, async move {
                    use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
                    let mut stream = TcpStream::from_std(moved).unwrap();
                    let (read, ping) = stream.read_exact(vec![0u8; 4]).await;
                    read.unwrap();
                    assert_eq!(ping, b"ping");
                    stream.write_all(b"pong").await.0.unwrap();
                })
                .unwrap();
            });
            served.join().unwrap();
            assert_eq!(&client.join().unwrap(), b"pong");

            // Core 1 stopped taking sockets: the accepting core keeps it.
            drop(core1);
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let _client = std::net::TcpStream::connect(addr).unwrap();
            block_on(driver, async {
                let listener = monoio::net::TcpListener::from_std(listener).unwrap();
                let (accepted, _) = listener.accept().await.unwrap();
                assert!(placement.hand_off(1, accepted).is_some(), "given back");
            })
            .unwrap();
        }
    }
}
