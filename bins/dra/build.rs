//! Generates the kubelet's plugin registration and DRA node service APIs from our own .proto
//! files (`src/api/README.md`). `protox` compiles them in Rust: a build needs no `protoc`.

use std::error::Error;

/// Every .proto the crate uses, listed explicitly.
const PROTOS: &[&str] = &[
    "src/api/pluginregistration.proto",
    "src/api/dra_v1.proto",
    "src/api/dra_v1beta1.proto",
    "src/api/dra_health_v1.proto",
    "src/api/dra_health_v1alpha1.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(PROTOS, ["src/api"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}
