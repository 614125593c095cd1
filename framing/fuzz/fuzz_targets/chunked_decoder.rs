//! Fuzzes framing::fuzzing::chunked_decoder (see its docs for the invariants checked).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| framing::fuzzing::chunked_decoder(data));
