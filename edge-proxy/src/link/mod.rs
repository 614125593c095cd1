//! The node socket: where Nodes dial in, register, and hold their one link.
//!
//! - [`session`]: the sans-IO state of one connection (registration,
//!   readiness, heartbeat, close), tested without sockets or clocks.
//! - `conn`: the driver of one connection (reader + writer tasks).
//! - `core`: one core's connections, timer wheel and ticker, and its inbox.
//! - [`streams`]: the streams (runs, commands) open on one connection.
//! - [`inbox`]: messages from any thread to the core that owns a node.
//! - [`tls`]: managed mode (F28): the mTLS handshake and the node's
//!   certificate identity, checked before registration.
//! - `transport`: plain TCP or TLS under one connection's reader and writer.
//!
//! Every core runs [`serve_core`] on its own `SO_REUSEPORT` listener, so the
//! kernel spreads node connections across cores; a connection then lives on
//! the core that accepted it (its home core) for its whole life.

mod conn;
mod core;
#[cfg(test)]
mod health_route_tests;
pub mod inbox;
#[cfg(test)]
mod open_tests;
pub mod session;
pub mod streams;
#[cfg(test)]
mod test_support;
pub mod tls;
mod transport;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use monoio::net::{ListenerOpts, TcpListener};

use self::core::Core;
use self::session::SessionConfig;
use crate::config::LinkSecurity;
use crate::events::EventBus;
use crate::registry::{NodeDirectory, NodeRegistry};
pub use framing::timer::ClockSource;

/// Node socket settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkServerConfig {
    /// Registration deadline and heartbeat timings.
    pub session: SessionConfig,
    /// Largest frame accepted from (and sent to) a node, in bytes.
    pub max_frame_len: usize,
    /// A request frame longer than this goes to a node that gathers pieces
    /// in pieces of this many bytes (`link.max_body_chunk`), so it does not
    /// hold the link whole (`framing::frame` pieces).
    pub piece_len: usize,
    /// Longest the per-core ticker sleeps between wheel polls with a manual
    /// clock (tests), in ms; with the production clock it sleeps until the
    /// next expiry.
    pub tick_ms: u64,
}

/// What every core's node socket shares.
#[derive(Debug)]
pub struct LinkShared<D> {
    /// Live nodes and their generations.
    pub registry: Arc<NodeRegistry<D>>,
    /// Lifecycle event subscribers.
    pub bus: EventBus,
    /// Settings.
    pub config: LinkServerConfig,
    /// The clock every core reads.
    pub clock: ClockSource,
    /// Plain TCP or mTLS (F28).
    pub security: LinkSecurity,
}

/// Binds a node-socket listener with `SO_REUSEPORT` (one per core).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind_with_config(addr, &ListenerOpts::new().reuse_port(true).reuse_addr(true))
}

/// Serves node connections accepted on `listener` on this core, forever.
/// Call from inside a monoio runtime (one per core).
pub async fn serve_core<D: NodeDirectory + 'static>(
    core_id: usize,
    listener: TcpListener,
    shared: Arc<LinkShared<D>>,
    inbox: tokio::sync::mpsc::UnboundedReceiver<inbox::CoreMsg>,
) {
    let core = Core::new(core_id, shared);
    monoio::spawn(Rc::clone(&core.timers).run(monoio::time::sleep));
    monoio::spawn(Rc::clone(&core).run_inbox(inbox));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                monoio::spawn(tls::serve(Rc::clone(&core), stream, peer));
            }
            Err(error) => {
                // Out of fds and the like: log, back off briefly, keep serving.
                tracing::warn!(core = core_id, %error, "node socket accept failed");
                monoio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}
