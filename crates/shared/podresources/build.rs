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
        // The client is devinject-grpc-unary: only the messages and, for test kubelets, the
        // server are generated.
        .build_client(false)
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(descriptors)?;
    Ok(())
}
