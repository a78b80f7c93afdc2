//! Generates the kubelet device plugin API (v1beta1) from our own .proto.
//!
//! `protox` compiles the file in Rust, so a build needs no `protoc` on the machine.

use std::error::Error;

/// Every .proto the crate uses, listed explicitly.
const PROTOS: &[&str] = &["src/api/deviceplugin_v1beta1.proto"];

fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["src/api"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Ordered maps encode `envs` and `annotations` in key order, so the same Allocate answer
        // is the same bytes in the kubelet's checkpoint.
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
