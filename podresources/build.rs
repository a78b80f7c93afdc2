//! Generates the kubelet pod-resources API (v1) from our own .proto.
//!
//! `protox` compiles the file in Rust, so a build needs no `protoc` on the machine.

use std::error::Error;

/// Every .proto the crate uses, listed explicitly.
const PROTOS: &[&str] = &["src/api/podresources_v1.proto"];

fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["src/api"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server side is for test kubelets; it costs the helper nothing it does not call.
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
