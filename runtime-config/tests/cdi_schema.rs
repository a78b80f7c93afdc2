//! `cdi generate` output validated against a JSON Schema of CDI spec files written from the
//! published CDI specification (`tests/schema/`, see its README): the checked-in golden spec,
//! a spec built from plain values (hooks, mounts, env, control nodes), and every spec `cdi
//! generate` writes for a simulated host ([`devinject_tests::sim::demo_host`]: mknod'ed nodes
//! and a gcc-built library, so that case needs root and is skipped otherwise). The schema is
//! checked to reject what CDI's parser rejects, so a passing spec means something.

mod support;

use std::path::{Path, PathBuf};

use devinject_runtime_config::cdi::{self, CdiRequest};
use devinject_tests::sim;
use devinject_tests::skip::{require_binary, require_root};
use serde_json::{json, Value};
use support::demo_values::{demo_values, DemoValues};

fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schema/cdi-spec.schema.json");
    let schema: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read schema")).expect("schema json");
    jsonschema::validator_for(&schema).expect("a valid JSON Schema")
}

fn assert_valid(v: &jsonschema::Validator, spec: &Value, what: &str) {
    let errors: Vec<String> = v
        .iter_errors(spec)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} is not a valid CDI spec: {errors:#?}\n{spec:#}"
    );
}

#[test]
fn the_golden_spec_is_valid() {
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden-cdi/devinject.io-demo.json");
    let spec: Value =
        serde_json::from_slice(&std::fs::read(&golden).expect("golden")).expect("json");
    assert_valid(&validator(), &spec, "the golden demo spec");
}

#[test]
fn a_spec_with_hooks_mounts_env_and_control_nodes_is_valid() {
    let DemoValues {
        profile,
        inventory,
        files,
    } = demo_values("");
    let spec = cdi::build_spec(&CdiRequest::default(), &profile, &inventory, &files)
        .expect("build")
        .expect("a spec");
    let value = serde_json::to_value(&spec).expect("serialise");
    assert!(value["containerEdits"]["hooks"].is_array(), "{value:#}");
    assert!(value["containerEdits"]["mounts"].is_array(), "{value:#}");
    assert_valid(&validator(), &value, "the built spec");
}

#[test]
fn the_schema_rejects_what_cdi_rejects() {
    let v = validator();
    let good = json!({
        "cdiVersion": "0.5.0",
        "kind": "devinject.io/demo",
        "devices": [{ "name": "0", "containerEdits": { "deviceNodes": [{ "path": "/dev/x" }] } }],
    });
    assert!(v.is_valid(&good));
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut s = good.clone();
        f(&mut s);
        s
    };
    let cases = [
        (
            "unknown top-level field",
            broken(&|s| s["vendor"] = json!("x")),
        ),
        (
            "unknown version",
            broken(&|s| s["cdiVersion"] = json!("0.2.0")),
        ),
        (
            "kind without class",
            broken(&|s| s["kind"] = json!("devinject.io")),
        ),
        ("no devices", broken(&|s| s["devices"] = json!([]))),
        (
            "bad device name",
            broken(&|s| s["devices"][0]["name"] = json!("-x")),
        ),
        (
            "device without edits",
            broken(&|s| {
                s["devices"][0]
                    .as_object_mut()
                    .expect("object")
                    .remove("containerEdits");
            }),
        ),
        (
            "relative node path",
            broken(&|s| {
                s["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = json!("dev/x")
            }),
        ),
        (
            "unknown node type",
            broken(&|s| s["devices"][0]["containerEdits"]["deviceNodes"][0]["type"] = json!("x")),
        ),
        (
            "unknown hook stage",
            broken(&|s| {
                s["containerEdits"] =
                    json!({ "hooks": [{ "hookName": "prestop", "path": "/bin/h" }] })
            }),
        ),
        (
            "env without =",
            broken(&|s| s["containerEdits"] = json!({ "env": ["NAME"] })),
        ),
        (
            "unknown edit",
            broken(&|s| s["containerEdits"] = json!({ "devices": [] })),
        ),
    ];
    for (what, spec) in cases {
        assert!(!v.is_valid(&spec), "{what} must be rejected: {spec:#}");
    }
}

#[test]
fn cdi_generate_on_a_simulated_host_writes_valid_specs() {
    if !(require_root() && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo", "kvm"]).expect("simulated host");
    let output = tmp.path().join("cdi");
    let report = cdi::generate(&CdiRequest {
        profiles_dir: host.profiles_dir.clone(),
        roots: devinject_devices::HostRoots {
            dev_root: host.dev_root.clone(),
            sys_root: tmp.path().join("sys"),
            driver_root: host.driver_root.clone(),
        },
        output_dir: output.clone(),
        hook_config: Some(host.config.clone()),
        ..CdiRequest::default()
    })
    .expect("cdi generate");
    let written: Vec<&PathBuf> = report
        .profiles
        .iter()
        .filter_map(|p| p.file.as_ref())
        .collect();
    assert_eq!(written, [&output.join("devinject.io-demo.json")]);
    let v = validator();
    for file in written {
        let spec: Value =
            serde_json::from_slice(&std::fs::read(file).expect("spec")).expect("json");
        assert_eq!(
            spec["devices"].as_array().expect("devices").len(),
            5,
            "4 devices and all"
        );
        assert!(
            spec["containerEdits"]["hooks"][0]["args"]
                .as_array()
                .expect("hook args")
                .contains(&json!("finish")),
            "{spec:#}"
        );
        assert_valid(&v, &spec, &file.display().to_string());
    }
}
