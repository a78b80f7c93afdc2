//! `cdi generate` on a simulated host: a dev root with demo nodes made by mknod, a driver root
//! with a real shared library built by gcc, the shipped demo and kvm profiles. The output is
//! compared with `tests/golden-cdi/devinject.io-demo.json` (the host paths are host paths
//! because the simulated host is reached through the root prefix, as an installer would).
//! Needs root (mknod) and gcc; skipped otherwise (fails under `CI=true`).
//! `UPDATE_GOLDEN=1` rewrites the expected file.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::demo_values::{demo_values, DemoValues};
use devinject_cdi::{self as cdi, CdiRequest};
use devinject_engine_config::Action;
use devinject_tests::sim::{mknod, without_partitions};
use devinject_tests::skip::{require_binary, require_root};

fn sim_host(root: &Path) {
    fs::create_dir_all(root.join("dev/demo")).expect("mkdir dev");
    fs::create_dir_all(root.join("sys")).expect("mkdir sys");
    for (name, minor) in [("accel0", 237), ("accel1", 234), ("ctl", 200)] {
        mknod(&root.join("dev/demo").join(name), 10, minor, "0666").expect("mknod");
    }
    let lib = root.join("opt/devinject-demo/lib");
    fs::create_dir_all(&lib).expect("mkdir lib");
    let src = root.join("libdemo.c");
    fs::write(&src, "int demo_version(void) { return 1; }\n").expect("write c");
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libdemo.so.1", "-o"])
        .arg(lib.join("libdemo.so.1.0.0"))
        .arg(&src)
        .status()
        .expect("run gcc");
    assert!(status.success(), "gcc failed");
    let profiles = root.join("etc/devinject/profiles");
    fs::create_dir_all(&profiles).expect("mkdir profiles");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    for p in ["demo", "kvm"] {
        fs::copy(
            shipped.join(format!("{p}.toml")),
            profiles.join(format!("{p}.toml")),
        )
        .expect("copy profile");
    }
}

/// A temp dir holding [`sim_host`]; `None` (the test skips) without root, mknod or gcc.
fn simulated_host() -> Option<tempfile::TempDir> {
    if !(require_root() && require_binary("mknod") && require_binary("gcc")) {
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    sim_host(tmp.path());
    Some(tmp)
}

fn request(root: &Path) -> CdiRequest {
    CdiRequest {
        root: root.to_path_buf(),
        ..CdiRequest::default()
    }
}

#[test]
fn cdi_generate_writes_a_minimal_valid_spec_and_removes_stale_ones() {
    let Some(tmp) = simulated_host() else {
        return;
    };
    let root = tmp.path();
    let out = root.join("etc/cdi/devinject.io-demo.json");

    // Dry run: the diff, nothing written.
    let mut req = request(root);
    req.dry_run = true;
    let dry = cdi::generate(&req).expect("dry run");
    assert_eq!(dry.changes.len(), 1);
    assert!(!out.exists());

    req.dry_run = false;
    let report = cdi::generate(&req).expect("generate");
    assert_eq!(report.changes.len(), 1, "{:?}", report.changes);
    assert_eq!(report.changes[0].action, Action::Create);
    let kvm = report
        .profiles
        .iter()
        .find(|p| p.profile == "kvm")
        .expect("kvm");
    assert!(
        kvm.file.is_none(),
        "no kvm nodes under the simulated dev root"
    );
    let text = fs::read_to_string(&out).expect("spec");
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden-cdi/devinject.io-demo.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(
            !devinject_tests::skip::in_ci(),
            "UPDATE_GOLDEN rewrites the expected files: never under CI"
        );
        fs::create_dir_all(golden.parent().expect("dir")).expect("mkdir");
        fs::write(&golden, &text).expect("update golden");
    }
    assert_eq!(text, fs::read_to_string(&golden).expect("golden"));

    // Structure as CDI reads it.
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["cdiVersion"], "0.5.0", "device names start with a digit");
    assert_eq!(v["kind"], "devinject.io/demo");
    let names: Vec<_> = v["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(names, ["0", "1", "all"]);
    assert!(v["containerEdits"]["env"]
        .as_array()
        .expect("env")
        .iter()
        .all(|e| !e
            .as_str()
            .unwrap_or_default()
            .starts_with("DEMO_VISIBLE_DEVICES=")));

    // Again: nothing changes.
    assert!(cdi::generate(&request(root))
        .expect("again")
        .changes
        .is_empty());

    // accel0 goes away. CDI names are ids, never positions: `1` still names accel1, and nothing
    // names `0` any more, so a granted `devinject.io/demo=0` cannot resolve to another device.
    fs::remove_file(root.join("dev/demo/accel0")).expect("rm accel0");
    cdi::generate(&request(root)).expect("generate without accel0");
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&out).expect("spec")).expect("json");
    let devices = v["devices"].as_array().expect("devices");
    let names: Vec<_> = devices.iter().map(|d| d["name"].clone()).collect();
    assert_eq!(names, ["1", "all"]);
    assert_eq!(
        devices[0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/demo/accel1",
        "device 1 is accel1: {}",
        devices[0]
    );

    // The devices go away: the spec goes too.
    fs::remove_file(root.join("dev/demo/accel1")).expect("rm accel1");
    let gone = cdi::generate(&request(root)).expect("generate without devices");
    assert_eq!(gone.changes.len(), 1);
    assert_eq!(gone.changes[0].action, Action::Remove);
    assert!(!out.exists());
}

/// The demo profile's spec from plain values of a host below `/host`, with `req`'s options.
fn demo_spec(req: CdiRequest) -> cdi::CdiSpec {
    let DemoValues {
        profile,
        inventory,
        files,
    } = demo_values("/host");
    let req = CdiRequest {
        root: PathBuf::from("/host"),
        ..req
    };
    cdi::build_spec(&req, &profile, &inventory, &files)
        .expect("build")
        .expect("a spec")
}

#[test]
fn cdi_spec_from_plain_values_maps_host_paths_and_wires_the_finish_hook() {
    let spec = demo_spec(CdiRequest {
        hook_config: Some(PathBuf::from("/etc/devinject/alt.toml")),
        lib_dir: PathBuf::from("/usr/lib64"),
        ..CdiRequest::default()
    });
    // Host paths are the host's, without the root prefix; equal to the container path, so no
    // hostPath; the device name starts with a letter. The nodes are `0660` of group 44: the
    // group is added (CDI 0.7.0), for the nodes of each device and the control node.
    assert_eq!(spec.cdi_version, "0.7.0");
    assert_eq!(spec.devices[0].container_edits.additional_gids, [44]);
    assert_eq!(spec.container_edits.additional_gids, [44]);
    let dev = &spec.devices[0].container_edits.device_nodes[0];
    assert_eq!(
        (dev.path.as_str(), dev.host_path.as_deref()),
        ("/dev/demo/accel0", None)
    );
    assert_eq!((dev.file_mode, dev.gid), (0o660, 44));
    assert_eq!(spec.devices[1].name, "all");
    assert_eq!(spec.container_edits.device_nodes[0].path, "/dev/demo/ctl");
    assert_eq!(
        spec.container_edits.mounts[0].host_path,
        "/usr/lib/libdemo.so.1.0.0"
    );
    assert_eq!(
        spec.container_edits.mounts[0].container_path,
        "/usr/lib64/libdemo.so.1.0.0"
    );
    assert_eq!(spec.container_edits.env, ["DEMO_DRIVER=1"]);
    let hook = &spec.container_edits.hooks[0];
    assert_eq!(hook.hook_name, "createRuntime");
    assert_eq!(
        hook.args,
        [
            "devinject-hook",
            "--config",
            "/etc/devinject/alt.toml",
            "finish",
            // The runtime mounts the library: the hook only lists it in the cache, reading
            // its flags from the host file (the host's path, without the root prefix).
            "--mounted-library",
            "/usr/lib/libdemo.so.1.0.0",
            "/usr/lib64/libdemo.so.1.0.0",
            "--link",
            "/usr/lib64/libdemo.so.1=libdemo.so.1.0.0",
            "--ldcache-dir",
            "/usr/lib64",
        ]
    );
    assert!(hook.env.is_empty());
    cdi::validate(&spec).expect("valid");
}

/// `library_names = "soname"`: the spec mounts the library under its soname and its finish step
/// names that mount and no link, so the hook's cache entry is the soname's own file.
/// A relative `--config` is written absolute in the CDI spec: the runtime runs the hook in the
/// bundle directory, where a relative path names another file.
#[test]
fn a_relative_hook_config_is_written_absolute_in_the_cdi_spec() {
    let spec = demo_spec(CdiRequest {
        hook_config: Some(PathBuf::from("conf/alt.toml")),
        ..CdiRequest::default()
    });
    let cwd = std::env::current_dir().expect("cwd");
    assert_eq!(
        spec.container_edits.hooks[0].args[1..3],
        [
            "--config".to_owned(),
            cwd.join("conf/alt.toml").display().to_string()
        ]
    );
}

/// The finish step is one value rendered four ways; the shim's `config.json` entry, the CDI hook
/// and the NRI hook carry the same path, argv, env and timeout, each argv reads back to the same
/// arguments, and the hooks.d file runs the same binary with the same configuration.
#[test]
fn every_rendering_of_the_finish_step_carries_the_same_invocation() {
    use devinject_devices::{
        FinishArgs, FinishInvocation, HookCommand, Mount, MountKind, Symlink, FINISH_TIMEOUT_SECS,
    };
    let args = FinishArgs {
        mounts: vec![Mount {
            host_path: PathBuf::from("/h/libx.so.1.2"),
            container_path: PathBuf::from("/usr/lib/libx.so.1.2"),
            kind: MountKind::Library,
        }],
        links: vec![Symlink {
            link: PathBuf::from("/usr/lib/libx.so.1"),
            target: "libx.so.1.2".into(),
        }],
        ldcache_dirs: vec![PathBuf::from("/usr/lib")],
        group_nodes: vec![PathBuf::from("/dev/dri/renderD128")],
        ..FinishArgs::default()
    };
    let hook = HookCommand::new(
        Path::new("/opt/devinject/bin/devinject-hook"),
        Some(Path::new("conf.toml")),
        Path::new("/etc/devinject"),
    );
    let finish = hook.finish(args.clone()).expect("something to finish");
    let config = Some(PathBuf::from("/etc/devinject/conf.toml"));

    let oci = devinject_oci::shim::spec_edit::oci_hook(&finish);
    let cdi = serde_json::to_value(cdi::CdiHook::create_runtime(&finish)).expect("json");
    let nri = devinject_nri::adjust::hook(&finish);
    let nri = serde_json::json!({
        "path": nri.path,
        "args": nri.args,
        "env": nri.env,
        "timeout": nri.timeout.map(|t| t.value),
    });
    for (name, rendered) in [("oci", &oci), ("cdi", &cdi), ("nri", &nri)] {
        assert_eq!(
            rendered["path"], "/opt/devinject/bin/devinject-hook",
            "{name}"
        );
        assert_eq!(rendered["args"], serde_json::json!(finish.argv()), "{name}");
        assert_eq!(rendered["env"], serde_json::json!([]), "{name}");
        assert_eq!(rendered["timeout"], FINISH_TIMEOUT_SECS, "{name}");
        let argv: Vec<String> = serde_json::from_value(rendered["args"].clone()).expect("argv");
        assert_eq!(
            FinishInvocation::parse_argv(&argv),
            Ok((config.clone(), args.clone())),
            "{name}"
        );
    }
    assert_eq!(cdi["hookName"], "createRuntime");

    let hooks_d: serde_json::Value = serde_json::from_str(
        &devinject_engine_config::engines::hooksd::hook_json(&finish.hook),
    )
    .expect("json");
    assert_eq!(hooks_d["hook"]["path"], oci["path"]);
    assert_eq!(
        hooks_d["hook"]["args"],
        serde_json::json!(["devinject-hook", "--config", "/etc/devinject/conf.toml"]),
        "the applier: the finish step's argv up to `finish`"
    );
    assert_eq!(
        hooks_d["hook"]["args"].as_array().expect("args")[..],
        oci["args"].as_array().expect("args")[..3]
    );
}

#[test]
fn a_profile_naming_libraries_by_soname_mounts_them_there_and_links_nothing() {
    let DemoValues {
        mut profile,
        inventory,
        files,
    } = demo_values("/host");
    profile.library_names = devinject_devices::LibraryNames::Soname;
    let req = CdiRequest {
        root: PathBuf::from("/host"),
        lib_dir: PathBuf::from("/usr/lib64"),
        ..CdiRequest::default()
    };
    let spec = cdi::build_spec(&req, &profile, &inventory, &files)
        .expect("build")
        .expect("a spec");
    let mount = &spec.container_edits.mounts[0];
    assert_eq!(
        (mount.host_path.as_str(), mount.container_path.as_str()),
        ("/usr/lib/libdemo.so.1.0.0", "/usr/lib64/libdemo.so.1")
    );
    assert_eq!(
        spec.container_edits.hooks[0].args[1..],
        [
            "finish",
            "--mounted-library",
            "/usr/lib/libdemo.so.1.0.0",
            "/usr/lib64/libdemo.so.1",
            "--ldcache-dir",
            "/usr/lib64",
        ]
    );
    cdi::validate(&spec).expect("valid");
}

#[test]
fn a_profile_with_a_prepare_step_is_not_exported_and_its_old_spec_goes() {
    let Some(tmp) = simulated_host() else {
        return;
    };
    let root = tmp.path();
    let out = root.join("etc/cdi/devinject.io-demo.json");
    cdi::generate(&request(root)).expect("generate");
    assert!(out.exists());

    // The profile gains a prepare step: a spec would start the devices unprepared.
    let profile = root.join("etc/devinject/profiles/demo.toml");
    let mut text = without_partitions(&fs::read_to_string(&profile).expect("profile"));
    text.push_str("\n[prepare]\ncommand = [\"/bin/true\"]\n");
    fs::write(&profile, text).expect("write profile");
    let report = cdi::generate(&request(root)).expect("generate");
    let demo = report
        .profiles
        .iter()
        .find(|p| p.profile == "demo")
        .expect("demo");
    assert_eq!((demo.devices, demo.file.as_ref()), (2, None));
    assert_eq!(
        demo.not_exported.as_deref(),
        Some(cdi::PREPARE_NOT_EXPORTED)
    );
    assert_eq!(report.changes.len(), 1, "{:?}", report.changes);
    assert_eq!(report.changes[0].action, Action::Remove);
    assert!(!out.exists());
}

#[test]
fn a_profile_whose_discovery_fails_is_withdrawn_alone() {
    let Some(tmp) = simulated_host() else {
        return;
    };
    let root = tmp.path();
    // A second kind of the same nodes whose required control node is not there (a driver
    // half loaded), written once with the node present so that it has a spec to lose.
    let profiles = root.join("etc/devinject/profiles");
    fs::write(
        profiles.join("half.toml"),
        "name = \"half\"\nresource = \"devinject.io/half\"\n[discovery]\n\
         nodes = [\"demo/accel[0-9]*\"]\n[[control_nodes]]\npath = \"demo/half-ctl\"\n",
    )
    .expect("write profile");
    mknod(&root.join("dev/demo/half-ctl"), 10, 201, "0666").expect("mknod");
    cdi::generate(&request(root)).expect("generate with every node there");
    let half = root.join("etc/cdi/devinject.io-half.json");
    assert!(half.exists());
    fs::remove_file(root.join("dev/demo/half-ctl")).expect("rm the control node");

    let report = cdi::generate(&request(root)).expect("the others are still generated");
    let outcome = |name: &str| {
        report
            .profiles
            .iter()
            .find(|p| p.profile == name)
            .unwrap_or_else(|| panic!("{name} reported"))
            .clone()
    };
    let withdrawn = outcome("half");
    let why = withdrawn.withdrawn.expect("half is withdrawn");
    assert!(why.contains("half-ctl"), "the reason names the node: {why}");
    assert_eq!((withdrawn.devices, withdrawn.file), (0, None));
    assert!(!half.exists(), "its stale spec is removed");
    let demo = outcome("demo");
    assert_eq!((demo.devices, demo.withdrawn), (2, None));
    assert!(root.join("etc/cdi/devinject.io-demo.json").exists());
}
