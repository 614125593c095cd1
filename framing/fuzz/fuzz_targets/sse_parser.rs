//! Fuzzes framing::fuzzing::sse_parser (see its docs for the invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| framing::fuzzing::sse_parser(data));
