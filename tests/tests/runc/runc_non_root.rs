//! Non-root containers and render-node-like devices (`0660 root:<group>`) on the real runc: the
//! process runs as uid 1000 with no supplementary groups.
//! - Through the runtime shim, the group is added to `process.user.additionalGids`: the granted
//!   nodes open; the un-granted accel2 (same owner and mode, bind-mounted in) stays denied by
//!   the cgroup.
//! - Through the hook, runc has read the process's groups before any hook runs, so the hook
//!   cannot add one: it makes the granted node with the host's mode and the process's own group
//!   instead (docs/hook.md). The granted nodes open; accel2, bind-mounted with the host's owner,
//!   stays refused by its file mode. A container that brings the group itself
//!   (`securityContext.supplementalGroups`) gets the host's owner unchanged.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use devinject_tests::bins::bin;
use devinject_tests::probe::Report;
use devinject_tests::runc::{container_id, describe, runc_path, shim_command, Bundle};
use devinject_tests::sim::{demo_host, demo_probe_args, SimHost, ACCELS};
use devinject_tests::skip::require_runc_demo;
use serde_json::json;

/// The group owning the accelerators.
const GROUP: u32 = 4242;

/// A demo host whose accelerators are `0660 root:GROUP`, and a bundle running the probe as
/// uid 1000 (gid 1000, `additional` groups), asking for devices 0 and 1, with accel2
/// bind-mounted.
fn setup(dir: &Path, additional: &[u32]) -> (SimHost, Bundle) {
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    for (name, _, _) in ACCELS {
        let node = host.dev_root.join("demo").join(name);
        std::os::unix::fs::chown(&node, Some(0), Some(GROUP)).unwrap();
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660)).unwrap();
    }
    let mut b = Bundle::new(&dir.join("bundle"), &demo_probe_args()).unwrap();
    b.spec["process"]["user"] = json!({"uid": 1000, "gid": 1000, "additionalGids": additional});
    b.env("DEMO_VISIBLE_DEVICES=0,1")
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    (host, b)
}

/// The probe's view of accel0, accel1 and accel2 as `(mode, open result)`.
fn opened(out: &std::process::Output) -> Vec<(String, String)> {
    let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
    ["accel0", "accel1", "accel2"]
        .iter()
        .map(|n| {
            let node = report.node(&format!("/dev/demo/{n}"));
            let open = if node.open.contains("Permission_denied") {
                "EACCES".to_owned()
            } else {
                node.open.clone()
            };
            (node.mode.clone(), open)
        })
        .collect()
}

fn expect(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(m, o)| (m.to_string(), o.to_string()))
        .collect()
}

#[test]
fn through_the_shim_a_non_root_process_gets_the_group_of_its_devices() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (host, b) = setup(t.path(), &[]);
    let cmd = shim_command(&host.config, &runc_path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b.run_with(&cmd, &container_id("nonroot-shim")).unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        opened(&out),
        expect(&[("660", "ok"), ("660", "ok"), ("660", "EPERM")]),
        "granted open as uid 1000; un-granted denied by the cgroup\n{}",
        describe(&out)
    );
}

#[test]
fn through_the_hook_a_non_root_process_gets_its_nodes_in_its_own_group() {
    if !require_runc_demo() {
        return;
    }
    for (additional, want) in [
        (&[][..], [("660", "ok"), ("660", "ok"), ("660", "EACCES")]),
        (
            &[GROUP][..],
            [("660", "ok"), ("660", "ok"), ("660", "EPERM")],
        ),
    ] {
        let t = tempfile::tempdir().unwrap();
        let (host, mut b) = setup(t.path(), additional);
        b.hook("createRuntime", &bin("devinject-hook"), &host.config);
        let out = b.run(&container_id("nonroot-hook")).unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        assert_eq!(
            opened(&out),
            expect(&want),
            "hook, additional groups {additional:?}\n{}",
            describe(&out)
        );
    }
}

/// In a user namespace (container ids 0-65535 as host 100000-165535) the host's nodes would be
/// seen owned by nobody. The hook gives each granted node as a copy owned by the ids the
/// namespace maps for the host's owner and the process's group (docs/security.md): the granted
/// nodes open for uid 1000, whether or not it has the group; accel2, bound by runc with the
/// host's owner, stays refused by its file mode.
#[test]
fn in_a_user_namespace_the_hook_gives_a_non_root_process_its_nodes() {
    if !require_runc_demo() {
        return;
    }
    for additional in [&[][..], &[GROUP][..]] {
        let t = tempfile::tempdir().unwrap();
        let (host, mut b) = setup(t.path(), additional);
        b.hook("createRuntime", &bin("devinject-hook"), &host.config)
            .user_namespace(100_000, 65_536);
        let out = b.run(&container_id("nonroot-userns")).unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        assert_eq!(
            opened(&out),
            expect(&[("660", "ok"), ("660", "ok"), ("660", "EACCES")]),
            "hook in a user namespace, additional groups {additional:?}\n{}",
            describe(&out)
        );
    }
}

/// The same through the runtime shim: in a user namespace it names the nodes for its finish
/// step, which makes copies the container owns, rather than `linux.devices` entries the runtime
/// would bind from the host (seen owned by nobody).
#[test]
fn in_a_user_namespace_the_shim_gives_a_non_root_process_its_nodes() {
    if !require_runc_demo() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (host, mut b) = setup(t.path(), &[]);
    b.user_namespace(100_000, 65_536);
    let cmd = shim_command(&host.config, &runc_path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let out = b
        .run_with(&cmd, &container_id("nonroot-shim-userns"))
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        opened(&out),
        expect(&[("660", "ok"), ("660", "ok"), ("660", "EACCES")]),
        "shim in a user namespace\n{}",
        describe(&out)
    );
}
