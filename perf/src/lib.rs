//! IOP's performance and test harness (not a product crate; `publish = false`).
//!
//! Owns the mock provider (binary `iop-mock-provider`, module
//! [`mock_provider`]), and later the criterion benches of the whole stack,
//! k6 scripts and the peer-comparison harness.

#![warn(missing_docs)]

pub mod link_load;
pub mod mock_provider;
