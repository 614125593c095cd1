//! Compiles `proto/runtime.proto` with protox (a pure-Rust protobuf compiler,
//! so no system `protoc` is needed) and generates prost types with `bytes`
//! fields as `bytes::Bytes`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    let fds = protox::compile(["proto/runtime.proto"], ["proto"])?;
    let mut config = prost_build::Config::new();
    config.bytes(["."]);
    // The envelope's large variants are boxed, so an `Envelope` is ~90
    // bytes, not ~300: every frame is moved by value through the decoder,
    // the session and the stream table, and those moves of the largest
    // variant's size were most of the Edge's memmove (bench-results/
    // profiles.md, round 14). A body frame, a window update and the
    // heartbeats stay inline.
    for variant in BOXED_VARIANTS {
        config.boxed(format!(".iop.runtime.v1.Envelope.msg.{variant}"));
    }
    // Inline, a tunnel batch (four frames' fields) would make every tunnel
    // frame, and so every envelope, 112 bytes instead of 72.
    config.boxed(".iop.runtime.v1.ProviderTunnelFrame.frame.batch");
    config.compile_fds(fds)?;
    Ok(())
}

/// The `Envelope.msg` variants generated as `Box<T>` (see `main`).
const BOXED_VARIANTS: [&str; 9] = [
    "register_request",
    "register_response",
    "run_request",
    "run_event",
    "cancel_request",
    "node_command_request",
    "node_command_response",
    "provider_tunnel_request",
    "node_config_update",
];
