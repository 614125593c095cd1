//! The Node's link to the Edge: the sans-IO [`session`], the connection
//! driver (`client`), the reconnecting [`supervisor`] and the link core's
//! timer wheel ([`timers`]).

mod client;
pub mod session;
pub mod supervisor;
pub mod timers;
pub mod tls;
mod transport;

pub use client::{ConnectionEnd, LinkClientConfig, run_connection};
pub use tls::{LinkTls, LinkTlsError, link_tls};
