//! Every spec `cdi generate` writes, read by the maintained CDI library
//! (`container-device-interface`, a port of CDI's own Go package with CDI's published JSON
//! schema built in), as a runtime loads it: it must parse (unknown fields are refused), pass
//! the library's validation (schema, names, edits, and a declared `cdiVersion` at least what
//! the fields used need), and declare exactly the lowest version the library computes: CDI's
//! rule, and what keeps older runtimes able to read the spec.
//!
//! Cases: the checked-in golden spec; specs built from plain values (control nodes, hooks,
//! mounts, env; world-usable and group-only nodes, host paths equal to or different from the
//! container's); and every spec `cdi generate` writes for a simulated host
//! ([`devinject_tests::sim::demo_host`]: mknod'ed nodes and a gcc-built library, so that case
//! needs root and is skipped otherwise).

use std::path::{Path, PathBuf};

use crate::support::demo_values::{demo_values, DemoValues};
use container_device_interface::spec::{parse_spec, read_spec};
use container_device_interface::version::minimum_required_version;
use devinject_cdi::{self as cdi, CdiRequest};
use devinject_tests::sim;
use devinject_tests::skip::{require_binary, require_root};
use serde_json::{json, Value};

/// What the library says of the spec `text`: `Err` with its reason when it refuses the spec,
/// else the lowest version it computes.
fn library_verdict(text: &str) -> Result<String, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spec.json");
    std::fs::write(&path, text).expect("write spec");
    read_spec(&path, 0).map_err(|e| format!("{e:#}"))?;
    let raw = parse_spec(&path).map_err(|e| format!("{e:#}"))?;
    Ok(minimum_required_version(&raw)
        .map_err(|e| format!("{e:#}"))?
        .to_string())
}

/// Asserts the library accepts `spec` and that it declares the library's lowest version.
fn assert_accepted_at_lowest_version(spec: &Value, what: &str) {
    let text = serde_json::to_string_pretty(spec).expect("json");
    match library_verdict(&text) {
        Ok(lowest) => assert_eq!(
            spec["cdiVersion"], lowest,
            "{what}: declares {} where the lowest that holds it is {lowest}\n{text}",
            spec["cdiVersion"]
        ),
        Err(why) => panic!("{what}: the CDI library refuses it: {why}\n{text}"),
    }
}

fn built(root: &str, mode: u32, gid: u32) -> Value {
    let DemoValues {
        profile,
        mut inventory,
        files,
    } = demo_values(root);
    for n in inventory
        .devices
        .iter_mut()
        .flat_map(|d| d.nodes.iter_mut())
        .chain(inventory.control_nodes.iter_mut())
    {
        (n.mode, n.gid) = (mode, gid);
    }
    let req = CdiRequest {
        root: PathBuf::from(if root.is_empty() { "/" } else { root }),
        ..CdiRequest::default()
    };
    let spec = cdi::build_spec(&req, &profile, &inventory, &files)
        .expect("build")
        .expect("a spec");
    serde_json::to_value(&spec).expect("serialise")
}

#[test]
fn the_golden_spec_is_read_by_the_cdi_library() {
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden-cdi/devinject.io-demo.json");
    let spec: Value =
        serde_json::from_slice(&std::fs::read(&golden).expect("golden")).expect("json");
    assert_accepted_at_lowest_version(&spec, "the golden demo spec");
}

#[test]
fn built_specs_declare_the_lowest_version_the_library_computes() {
    // Each has a library's mount, and a mount's type needs 0.4.0.
    for (root, mode, gid, version) in [
        ("", 0o666, 0, "0.4.0"),
        ("/host", 0o666, 0, "0.4.0"),
        ("", 0o660, 0, "0.4.0"),
        ("", 0o660, 44, "0.7.0"),
        ("/host", 0o640, 107, "0.7.0"),
    ] {
        let spec = built(root, mode, gid);
        let what = format!("root {root:?}, nodes {mode:o} gid {gid}");
        assert!(
            spec["containerEdits"]["hooks"].is_array(),
            "{what}: {spec:#}"
        );
        assert!(
            spec["containerEdits"]["mounts"].is_array(),
            "{what}: {spec:#}"
        );
        assert_eq!(spec["cdiVersion"], version, "{what}: {spec:#}");
        assert_accepted_at_lowest_version(&spec, &what);
    }
}

/// With `user_namespaces`, every device (and `all`) runs the finish step with `--node` for its
/// own nodes, the control nodes go with the spec's finish step, and the library reads it.
#[test]
fn specs_for_user_namespaces_name_each_device_s_nodes_for_its_copies() {
    let DemoValues {
        profile,
        inventory,
        files,
    } = demo_values("");
    let req = CdiRequest {
        user_namespaces: true,
        ..CdiRequest::default()
    };
    let spec = cdi::build_spec(&req, &profile, &inventory, &files)
        .expect("build")
        .expect("a spec");
    let spec = serde_json::to_value(&spec).expect("serialise");
    assert_accepted_at_lowest_version(&spec, "a spec for user namespaces");
    let nodes_of = |hooks: &Value| -> Vec<String> {
        hooks
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|h| {
                let args: Vec<&str> = h["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                args.windows(2)
                    .filter(|w| w[0] == "--node")
                    .map(|w| w[1].to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let devices = spec["devices"].as_array().expect("devices");
    let mut every = Vec::new();
    for d in devices.iter().filter(|d| d["name"] != "all") {
        let own: Vec<String> = d["containerEdits"]["deviceNodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                n["hostPath"]
                    .as_str()
                    .or(n["path"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(nodes_of(&d["containerEdits"]["hooks"]), own, "{d:#}");
        every.extend(own);
    }
    let all = devices.iter().find(|d| d["name"] == "all").expect("all");
    assert_eq!(nodes_of(&all["containerEdits"]["hooks"]), every, "{all:#}");
    let control: Vec<String> = inventory
        .control_nodes
        .iter()
        .map(|n| n.host_path.display().to_string())
        .collect();
    assert!(!control.is_empty());
    assert_eq!(
        nodes_of(&spec["containerEdits"]["hooks"]),
        control,
        "{spec:#}"
    );

    // Without the option, no finish step names a node.
    let plain = serde_json::to_value(
        cdi::build_spec(&CdiRequest::default(), &profile, &inventory, &files)
            .expect("build")
            .expect("a spec"),
    )
    .expect("serialise");
    assert!(!plain.to_string().contains("--node"), "{plain:#}");
}

#[test]
fn group_only_nodes_add_their_group_where_the_node_is() {
    let spec = built("", 0o660, 44);
    assert_eq!(spec["containerEdits"]["additionalGids"], json!([44]), "ctl");
    for d in spec["devices"].as_array().expect("devices") {
        assert_eq!(d["containerEdits"]["additionalGids"], json!([44]), "{d}");
    }
    // The root group is never handed out.
    let root_group = built("", 0o660, 0);
    assert!(
        root_group.to_string().find("additionalGids").is_none(),
        "{root_group:#}"
    );
}

/// The check above can fail: the library refuses a spec that declares less than it uses.
#[test]
fn the_library_refuses_a_spec_declaring_too_low_a_version() {
    let mut spec = built("", 0o660, 44);
    spec["cdiVersion"] = json!("0.6.0");
    let text = serde_json::to_string(&spec).expect("json");
    let why = library_verdict(&text).expect_err("0.6.0 cannot hold additionalGids");
    assert!(why.contains("0.7.0"), "{why}");
    // A field spelled otherwise than CDI's (the spec's prose says `additionalGIDs`, its JSON
    // `additionalGids`) is refused, as runtimes refuse it.
    spec["cdiVersion"] = json!("0.7.0");
    let edits = spec["containerEdits"].as_object_mut().expect("edits");
    let gids = edits.remove("additionalGids").expect("gids");
    edits.insert("additionalGIDs".into(), gids);
    assert!(
        library_verdict(&serde_json::to_string(&spec).expect("json")).is_err(),
        "an unknown field is refused"
    );
}

#[test]
fn cdi_generate_on_a_simulated_host_writes_specs_the_library_reads() {
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
            proc_root: tmp.path().join("proc"),
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
        assert_accepted_at_lowest_version(&spec, &file.display().to_string());
    }
}
