//! The mock provider (being built).
