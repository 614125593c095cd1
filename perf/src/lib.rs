//! IOP's performance and test harness (not a product crate; `publish = false`).
//!
//! Owns the mock provider (binary `iop-mock-provider`), and later the
//! criterion benches of the whole stack, k6 scripts and the peer-comparison
//! harness.

pub mod mock_provider;
