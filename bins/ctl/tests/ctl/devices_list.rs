//! `devinject-ctl devices list` on a simulated host ([`devinject_tests::sim::demo_host`]:
//! mknod'ed nodes under a temp dev root) with a second profile over the same nodes whose sysfs
//! attributes give NUMA nodes and health. The simulated host needs root (mknod) and gcc; the
//! cases without nodes run everywhere.

use std::path::Path;
use std::process::{Command, Output};

use devinject_tests::sim;
use devinject_tests::skip::{require_binary, require_root};

fn list(profiles: &Path, dev: &Path, sys: &Path, json: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"));
    cmd.args(["devices", "list", "--profiles-dir"])
        .arg(profiles)
        .arg("--dev-root")
        .arg(dev)
        .arg("--sys-root")
        .arg(sys);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("run devinject-ctl")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A profile over the demo nodes whose NUMA node and health come from sysfs.
const SIM: &str = r#"name = "sim"
resource = "devinject.io/sim"
[discovery]
nodes = ["demo/accel[0-9]*"]
id = "name"
numa_sysfs = "class/sim/{name}/numa_node"
health_sysfs = "class/sim/{name}/health"
"#;

#[test]
fn lists_ids_indices_nodes_numa_and_health() {
    if !(require_root() && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    std::fs::write(host.profiles_dir.join("sim.toml"), SIM).expect("profile");
    let sys = tmp.path().join("sys");
    for (i, (name, _, _)) in sim::ACCELS.iter().enumerate() {
        let dir = sys.join("class/sim").join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("numa_node"), format!("{}\n", i % 2)).expect("numa");
        let health = if i == 3 { "failed\n" } else { "ok\n" };
        std::fs::write(dir.join("health"), health).expect("health");
    }

    let out = list(&host.profiles_dir, &host.dev_root, &sys, false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "PROFILE  ID      INDEX  NODES                      NUMA  HEALTH"
    );
    assert_eq!(
        lines[1],
        "demo     0       0      /dev/demo/accel0 c 10:237  -     healthy"
    );
    assert_eq!(
        lines[4],
        "demo     3       3      /dev/demo/accel3 c 10:229  -     healthy"
    );
    assert_eq!(
        lines[5],
        "sim      accel0  0      /dev/demo/accel0 c 10:237  0     healthy"
    );
    assert_eq!(
        lines[6],
        "sim      accel1  1      /dev/demo/accel1 c 10:234  1     healthy"
    );
    assert_eq!(
        lines[8],
        "sim      accel3  3      /dev/demo/accel3 c 10:229  1     unhealthy"
    );
    assert_eq!(
        lines.last().copied(),
        Some("control nodes (with any device): demo: /dev/demo/ctl c 10:200")
    );

    let out = list(&host.profiles_dir, &host.dev_root, &sys, true);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let demo = &v["profiles"][0];
    assert_eq!(demo["profile"], "demo");
    assert_eq!(demo["request_env"], "DEMO_VISIBLE_DEVICES");
    assert_eq!(demo["devices"].as_array().expect("devices").len(), 4);
    let node = &demo["devices"][1]["nodes"][0];
    assert_eq!(node["path"], "/dev/demo/accel1");
    assert_eq!(
        node["host_path"],
        host.dev_root.join("demo/accel1").to_str().expect("utf-8")
    );
    assert_eq!(
        (
            node["type"].as_str(),
            node["major"].as_u64(),
            node["minor"].as_u64()
        ),
        (Some("c"), Some(10), Some(234))
    );
    assert_eq!(node["mode"], "0666");
    assert_eq!(demo["control_nodes"][0]["path"], "/dev/demo/ctl");
    let sim = &v["profiles"][1];
    assert_eq!(sim["devices"][3]["id"], "accel3");
    assert_eq!(sim["devices"][3]["numa_node"], 1);
    assert_eq!(sim["devices"][3]["health"], "unhealthy");
    assert!(sim.get("error").is_none());
}

#[test]
fn profiles_without_devices_and_broken_profiles() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let profiles = tmp.path().join("profiles");
    let dev = tmp.path().join("dev");
    std::fs::create_dir_all(&profiles).expect("mkdir");
    std::fs::create_dir_all(&dev).expect("mkdir");
    std::fs::copy(
        sim::shipped_profiles().join("kvm.toml"),
        profiles.join("kvm.toml"),
    )
    .expect("copy");
    let out = list(&profiles, &dev, &tmp.path().join("sys"), false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        stdout(&out).lines().nth(1),
        Some("kvm      -   -      no devices  -     -")
    );

    // A profile that does not load fails the listing, as it fails the hook and the shim.
    std::fs::write(profiles.join("bad.toml"), "name = \"bad\"\n").expect("write");
    let out = list(&profiles, &dev, &tmp.path().join("sys"), true);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml"), "{err}");
}
