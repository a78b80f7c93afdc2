//! The hook on cgroup v2 with the real runc: runc attaches its own eBPF device filter, and the
//! hook must replace it atomically with one that also allows the granted nodes.
//!
//! v2 is obtained on this hybrid host by running runc in a private mount namespace with cgroup2
//! mounted over /sys/fs/cgroup (runc then uses its eBPF device filter, really enforced).

use std::path::Path;

use devinject_tests::bins::bin;
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::{
    cgroup_v2, container_id, describe, runc_path, sh_in_cgroup_v2, Bundle,
};
use devinject_tests::sim::{
    assert_demo_granted_0_1, demo_host, demo_probe_args, mknod, shipped_profiles, write_config,
};
use devinject_tests::skip::{require, require_binary, require_runc_demo};

fn ready() -> bool {
    require_runc_demo() && require_binary("unshare")
}

/// runc's own default devices must still work after our program replaced runc's.
const RUNC_DEFAULTS: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

#[test]
fn v2_demo_devices_granted_by_program_replacement() {
    if !ready() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let mut args = demo_probe_args();
    // Probe runc's defaults too: insert before the "--" that starts the library list.
    let split = args.iter().position(|a| a == "--").unwrap();
    for (i, d) in RUNC_DEFAULTS.iter().enumerate() {
        args.insert(split + i, d.to_string());
    }
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0,1")
        .hook("createRuntime", &bin("devinject-hook"), &host.config)
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    let prefix = cgroup_v2(&[&runc_path()]);
    let prefix_refs: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let out = b.run_with(&prefix_refs, &container_id("v2")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = Report::parse(&stdout);
    assert_demo_granted_0_1(&report, &out);
    for d in RUNC_DEFAULTS {
        assert_eq!(
            report.node(d).open,
            "ok",
            "{d} after replacement: {}",
            describe(&out)
        );
    }
}

#[test]
fn v2_real_kvm() {
    if !ready() || !require(Path::new("/dev/kvm").exists(), "needs /dev/kvm") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let profiles = t.path().join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::copy(
        shipped_profiles().join("kvm.toml"),
        profiles.join("kvm.toml"),
    )
    .unwrap();
    let config = t.path().join("config.toml");
    write_config(
        &config,
        &profiles,
        Path::new("/dev"),
        Path::new("/"),
        Path::new("/sys"),
        "",
    )
    .unwrap();
    let args = probe_args(&["/dev/kvm", "/dev/null"], &[]);
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("KVM_VISIBLE_DEVICES=all")
        .hook("createRuntime", &bin("devinject-hook"), &config);
    let prefix = cgroup_v2(&[&runc_path()]);
    let prefix_refs: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let out = b.run_with(&prefix_refs, &container_id("v2kvm")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let r = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(r.node("/dev/kvm").open, "ok", "{}", describe(&out));
    assert_eq!(r.node("/dev/null").open, "ok", "{}", describe(&out));
}

/// 16 nodes granted in one replacement. Majors 240-254 are reserved for local use and have no
/// driver here: opening a granted one gives ENXIO (the cgroup allowed it, no driver answered),
/// a denied one EPERM.
#[test]
fn v2_sixteen_devices_in_one_replacement() {
    if !ready() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dev = t.path().join("dev");
    std::fs::create_dir_all(dev.join("many")).unwrap();
    for i in 0..17u32 {
        mknod(&dev.join(format!("many/m{i}")), 240, i, "0666").unwrap();
    }
    let profiles = t.path().join("profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("many.toml"),
        "name = \"many\"\nresource = \"devinject.io/many\"\n[discovery]\nnodes = [\"many/m*\"]\n",
    )
    .unwrap();
    let config = t.path().join("config.toml");
    write_config(
        &config,
        &profiles,
        &dev,
        Path::new("/"),
        &t.path().join("sys"),
        "",
    )
    .unwrap();
    let nodes: Vec<String> = (0..17).map(|i| format!("/dev/many/m{i}")).collect();
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let args = probe_args(&node_refs, &[]);
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    let request: Vec<String> = (0..16).map(|i| i.to_string()).collect();
    b.env(&format!("MANY_VISIBLE_DEVICES={}", request.join(",")))
        .hook("createRuntime", &bin("devinject-hook"), &config)
        .bind_node(&dev.join("many/m16"), "/dev/many/m16");
    let prefix = cgroup_v2(&[&runc_path()]);
    let prefix_refs: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let out = b.run_with(&prefix_refs, &container_id("v2many")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let r = Report::parse(&String::from_utf8_lossy(&out.stdout));
    for i in 0..16 {
        let n = r.node(&format!("/dev/many/m{i}"));
        assert_eq!((n.major, n.minor), (240, i), "{}", describe(&out));
        assert!(
            n.open.contains("No_such_device"),
            "m{i} must pass the cgroup (ENXIO), got {}: {}",
            n.open,
            describe(&out)
        );
    }
    assert_eq!(r.node("/dev/many/m16").open, "EPERM", "{}", describe(&out));
}

/// What happens when runc re-applies the container's resources on v2 (`runc update`) after the
/// hook replaced its program: measured here and asserted, so a change in behaviour is noticed.
#[test]
fn v2_runc_update_after_hook_grant() {
    if !ready() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let mut b = Bundle::new(&t.path().join("bundle"), &["/bin/sleep", "60"]).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0")
        .hook("createRuntime", &bin("devinject-hook"), &host.config);
    b.write().unwrap();
    let id = container_id("v2upd");
    let state = b.dir.join("runc-state");
    let probe = "/bin/sh /probe.sh /dev/demo/accel0 /dev/null --";
    let script = format!(
        "R='{runc} --root {state}'; $R run -d --bundle {bundle} {id} >/dev/null 2>&1 </dev/null || exit 10; \
         echo BEFORE; $R exec {id} {probe}; \
         echo '{{}}' > {state}/empty.json; $R update -r {state}/empty.json {id} || echo update-failed; \
         echo AFTER; $R exec {id} {probe}; \
         $R kill {id} KILL; $R delete --force {id}",
        runc = runc_path(),
        state = state.display(),
        bundle = b.dir.display(),
    );
    let out = sh_in_cgroup_v2(&script).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let before = text.split("AFTER").next().unwrap_or_default();
    let after = text.split("AFTER").nth(1).unwrap_or_default();
    let rb = Report::parse(before);
    let ra = Report::parse(after);
    assert_eq!(rb.node("/dev/demo/accel0").open, "ok", "{}", describe(&out));
    assert_eq!(ra.node("/dev/null").open, "ok", "{}", describe(&out));
    // Measured with runc 1.1.5 and 1.4.3 on this host: `runc update` leaves the device program
    // alone (runc skips device rules on update), so the hook's replacement program survives and
    // the grant stays. What does wipe hook-made grants is a re-application from the spec by another
    // manager (systemd's own device program on daemon-reload with the systemd driver, a
    // re-created cgroup): the shim puts devices into config.json for that reason.
    assert_eq!(
        ra.node("/dev/demo/accel0").open,
        "ok",
        "runc update on v2 behaves differently than measured: {}",
        describe(&out)
    );
}
