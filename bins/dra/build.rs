//! Generates the kubelet's plugin registration and DRA node service APIs from our own .proto
//! files (`src/api/README.md`). `protox` compiles them in Rust: a build needs no `protoc`.

use std::error::Error;

use prost_types::FileDescriptorProto;

/// Every .proto the crate uses, listed explicitly.
const PROTOS: &[&str] = &[
    "src/api/pluginregistration.proto",
    "src/api/dra_v1.proto",
    "src/api/dra_v1beta1.proto",
    "src/api/dra_health_v1.proto",
];

/// The health stream's contract, compiled a second time under its first package name: the
/// kubelet's `v1alpha1` and `v1` messages are the same fields (`src/api/README.md`).
const HEALTH_V1: &str = "dra_health_v1.proto";

fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let mut descriptors = protox::compile(PROTOS, ["src/api"])?;
    let v1alpha1 = descriptors
        .file
        .iter()
        .find(|f| f.name() == HEALTH_V1)
        .map(|f| renamed(f, "v1", "v1alpha1"))
        .ok_or("the health stream's descriptor is missing")?;
    descriptors.file.push(v1alpha1);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .btree_map(".")
        .compile_fds(descriptors)?;
    Ok(())
}

/// `file` with its package `from` renamed `to`, and every type it names in that package.
fn renamed(file: &FileDescriptorProto, from: &str, to: &str) -> FileDescriptorProto {
    let (old, new) = (format!(".{from}."), format!(".{to}."));
    let rename = |name: &mut Option<String>| {
        if let Some(rest) = name.as_deref().and_then(|n| n.strip_prefix(old.as_str())) {
            *name = Some(format!("{new}{rest}"));
        }
    };
    let mut out = file.clone();
    out.name = Some(file.name().replace(from, to));
    out.package = Some(to.to_owned());
    for message in &mut out.message_type {
        for field in &mut message.field {
            rename(&mut field.type_name);
        }
    }
    for service in &mut out.service {
        for method in &mut service.method {
            rename(&mut method.input_type);
            rename(&mut method.output_type);
        }
    }
    out
}
