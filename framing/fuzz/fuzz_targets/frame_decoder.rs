//! Fuzzes the node-socket frame decoder; see `framing::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| framing::fuzzing::frame_decoder(data));
