//! Fuzzes framing::fuzzing::json_skip (see its docs for the invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| framing::fuzzing::json_skip(data));
