//! Generates the kubelet pod-resources API (v1) from our own .proto, with feature `client`
//! (without it the crate has no gRPC and this does nothing).
//!
//! `protox` compiles the file in Rust, so a build needs no `protoc` on the machine.

#[cfg(feature = "client")]
use std::error::Error;

/// Every .proto the crate uses, listed explicitly.
#[cfg(feature = "client")]
const PROTOS: &[&str] = &["src/api/podresources_v1.proto"];

#[cfg(not(feature = "client"))]
fn main() {}

#[cfg(feature = "client")]
fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["src/api"])?;
    tonic_prost_build::configure()
        // The client is the crate's own `grpc` module: only the messages and, for test kubelets, the
        // server are generated.
        .build_client(false)
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(descriptors)?;
    Ok(())
}
