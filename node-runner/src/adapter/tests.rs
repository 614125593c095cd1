//! Parser and request-body tests (no I/O); the adapters against the mock
//! provider are in `perf/tests/adapters.rs`.
