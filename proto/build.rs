//! Compiles `proto/runtime.proto` with protox (a pure-Rust protobuf compiler,
//! so no system `protoc` is needed) and generates prost types with `bytes`
//! fields as `bytes::Bytes`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    let fds = protox::compile(["proto/runtime.proto"], ["proto"])?;
    prost_build::Config::new().bytes(["."]).compile_fds(fds)?;
    Ok(())
}
