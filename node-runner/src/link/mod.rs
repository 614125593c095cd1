//! The Node's link to the Edge: the sans-IO [`session`], the connection
//! driver (`client`) and the reconnecting [`supervisor`].

mod client;
pub mod session;
pub mod supervisor;

pub use client::{ConnectionEnd, LinkClientConfig, run_connection};
