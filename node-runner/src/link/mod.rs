//! The Node's link to the Edge: the sans-IO [`session`], the connection
//! driver (`client`), and the reconnecting [`supervisor`]; the link
//! core's timers are a [`framing::timer::CoreTimers`].

mod client;
pub mod session;
pub mod supervisor;
pub mod tls;
mod transport;

pub use client::{ConnectionEnd, LinkClientConfig, run_connection};
pub use tls::{LinkTls, LinkTlsError, link_tls};
