//! Generates the NRI and ttrpc messages from our own .proto files (see proto/README.md).
//!
//! `protox` compiles the files in Rust, so a build needs no `protoc` on the machine. Messages
//! only: the services are served and called by hand over NRI's multiplexed socket.

use std::error::Error;

/// Every .proto the crate uses, listed explicitly.
const PROTOS: &[&str] = &["proto/nri.proto", "proto/ttrpc.proto"];

fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
