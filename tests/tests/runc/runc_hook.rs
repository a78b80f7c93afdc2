//! The hook with the real runc on this host's cgroup setup (v1 devices controller here):
//! granted nodes exist with the host's type, numbers and mode and open; an un-granted node that is
//! present (bind-mounted) is denied by the cgroup; libraries are read-only and in the linker cache.

use std::path::Path;

use devinject_tests::bins::bin;
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::{container_id, describe, walkable_tempdir, Bundle};
use devinject_tests::sim::{assert_demo_granted_0_1, demo_host, demo_probe_args, LIB};
use devinject_tests::skip::require_runc_demo;

fn demo_bundle(
    dir: &Path,
    request: &str,
    stage: &str,
    extra_config: &str,
) -> (Bundle, Report, std::process::Output) {
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    if !extra_config.is_empty() {
        host.write_config(extra_config).unwrap();
    }
    let args = demo_probe_args();
    let mut b = Bundle::new(&dir.join("bundle"), &args).unwrap();
    b.env(&format!("DEMO_VISIBLE_DEVICES={request}"))
        .hook(stage, &bin("devinject-hook"), &host.config)
        // accel2 is present in the container but never granted.
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    let out = b.run(&container_id("hook")).unwrap();
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    (b, report, out)
}

#[test]
fn demo_two_devices_create_runtime() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (_, report, out) = demo_bundle(t.path(), "0,1", "createRuntime", "");
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);
}

#[test]
fn demo_two_devices_prestart_classic_mounts() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (_, report, out) = demo_bundle(t.path(), "1,0", "prestart", "mount_api = \"classic\"");
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);
}

#[test]
fn void_request_injects_nothing() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (_, report, out) = demo_bundle(t.path(), "void", "createRuntime", "");
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(report.node("/dev/demo/accel0").kind, "missing");
    assert!(!report.lib(LIB).present);
}

#[test]
fn unknown_device_fails_the_start_with_a_clear_message() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (_, report, out) = demo_bundle(t.path(), "0,9", "createRuntime", "");
    assert!(!out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown device \\\"9\\\"") || err.contains("unknown device \"9\""),
        "{err}"
    );
    assert!(err.contains("DEMO_VISIBLE_DEVICES"), "{err}");
    assert!(report.nodes.is_empty(), "the container must not have run");
}

#[test]
fn real_kvm_is_injected_and_fuse_is_not() {
    if !require_runc_demo()
        || !devinject_tests::skip::require(Path::new("/dev/kvm").exists(), "needs /dev/kvm")
    {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let config = devinject_tests::sim::real_host_config(t.path(), &["kvm", "fuse"]).unwrap();
    let args = probe_args(&["/dev/kvm", "/dev/fuse"], &[]);
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("KVM_VISIBLE_DEVICES=all")
        .hook("createRuntime", &bin("devinject-hook"), &config);
    let out = b.run(&container_id("kvm")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    Report::parse(&String::from_utf8_lossy(&out.stdout)).assert_kvm_only(&describe(&out));
}

/// The real `/dev/kvm` (`0600 root:root` here) for the root of a container with a user
/// namespace: bound as it is, the node would be seen owned by nobody and refused; the hook gives
/// a copy owned by the host id of the container's root.
#[test]
fn real_kvm_opens_for_the_root_of_a_user_namespace() {
    if !require_runc_demo()
        || !devinject_tests::skip::require(Path::new("/dev/kvm").exists(), "needs /dev/kvm")
    {
        return;
    }
    let t = walkable_tempdir().unwrap();
    let config = devinject_tests::sim::real_host_config(t.path(), &["kvm", "fuse"]).unwrap();
    let args = probe_args(&["/dev/kvm", "/dev/fuse"], &[]);
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("KVM_VISIBLE_DEVICES=all")
        .hook("createRuntime", &bin("devinject-hook"), &config)
        .user_namespace(100_000, 65_536);
    let out = b.run(&container_id("kvm-userns")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    Report::parse(&String::from_utf8_lossy(&out.stdout)).assert_kvm_only(&describe(&out));
}

/// In a user namespace mknod is refused and a node on the namespace's tmpfs would not work: the
/// hook makes each node on a tmpfs of its own, owned by the ids the namespace maps.
#[test]
fn user_namespace_gets_its_devices() {
    if !require_runc_demo() {
        return;
    }
    let t = walkable_tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    let args = demo_probe_args();
    let mut b = Bundle::new(&t.path().join("bundle"), &args).unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0,1")
        .hook("createRuntime", &bin("devinject-hook"), &host.config)
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2")
        .user_namespace(100_000, 65_536);
    let out = b.run(&container_id("userns")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
}

/// The linker cache's inode number in the bundle's rootfs (it changes whenever a cache is
/// written: ldconfig and the hook both replace it by a rename).
fn cache_inode(b: &Bundle) -> u64 {
    std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(b.dir.join("rootfs/etc/ld.so.cache")).unwrap(),
    )
}

#[test]
fn restart_on_the_same_rootfs_keeps_a_current_linker_cache() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (b, report, out) = demo_bundle(t.path(), "0,1", "createRuntime", "");
    assert!(out.status.success(), "{}", describe(&out));
    assert_demo_granted_0_1(&report, &out);
    // ldconfig wrote its cache on a private tmpfs over /dev: nothing of it is left there.
    let cache = "/dev/ld.so.cache";
    let mut args = demo_probe_args();
    args.insert(2, cache.to_owned());
    let mut b = b;
    b.spec["process"]["args"] = serde_json::json!(args);
    let first = cache_inode(&b);

    // Started again on its rootfs: links and cache are still right, and ldconfig does not run.
    let out = b.run(&container_id("again")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
    assert_eq!(report.node(cache).kind, "missing", "{}", describe(&out));
    assert_eq!(
        cache_inode(&b),
        first,
        "a current cache must not be rewritten"
    );

    // A cache that no longer lists the library is rebuilt.
    std::fs::write(b.dir.join("rootfs/etc/ld.so.cache"), b"stale").unwrap();
    let stale = cache_inode(&b);
    let out = b.run(&container_id("stale")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    assert_demo_granted_0_1(&report, &out);
    assert_ne!(cache_inode(&b), stale, "a stale cache must be rebuilt");
}
