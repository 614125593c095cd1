//! Fuzzes framing::fuzzing::http_request_head (see its docs for the invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| framing::fuzzing::http_request_head(data));
