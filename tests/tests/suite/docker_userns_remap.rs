//! docker 28 with `userns-remap`: every container's root is a subordinate id of the remap user
//! on the host, and docker binds the host's nodes into the container's user namespace, where
//! the kernel checks those ids against each node's owner, group and mode. `devinject-ctl doctor
//! --user UID:GID` (the remapped root's ids) says beforehand which devices such a container can
//! open, and the test holds that answer to what the real engine and kernel do with the CDI
//! devices `cdi generate` wrote.
//!
//! The nodes are the real tun, fuse and kvm devices, made with chosen modes and bound over
//! `/dev` in a private mount namespace containerd runs in
//! ([`devinject_tests::rootless::HostNodes`]; runc binds the node at the container path):
//! - `/dev/net/tun` `0666 root:root`: opens, through the bits for others;
//! - `/dev/fuse` `0660` of the remapped root's group: opens, through that group;
//! - `/dev/kvm` `0660` of a group the remapped root is not in: refused.
//!
//! Through devinject's runtime shim instead, the remapped root opens `/dev/kvm` too: the shim
//! gives a user-namespaced container its own copy of each node, owned by the ids it maps.
//!
//! Needs root, the fetched docker 28 and containerd 2, runc, useradd, unshare, nsenter and
//! busybox; skipped otherwise (fails under `CI=true`).

use devinject_tests::docker::{
    release_28, runc_runtime, shim_runtime, Engine, EngineRelease, IMAGE, RUNC_UNDER_TEST, SHIM,
};
use devinject_tests::rootless::{CreatedUser, HostNodes, NodeSpec, OPEN_EACH};
use devinject_tests::skip::require_binary;

/// docker 28 (see [`release_28`]), and what making the user and the namespace takes.
fn ready() -> Option<EngineRelease> {
    let release = release_28()?;
    (require_binary("useradd") && require_binary("unshare") && require_binary("nsenter"))
        .then_some(release)
}

#[test]
fn userns_remap_opens_what_doctor_says_the_remapped_root_can_open() {
    let Some(mut release) = ready() else { return };
    let tmp = devinject_tests::runc::walkable_tempdir().expect("temp dir");
    let dir = tmp.path();
    let user = CreatedUser::create("ur", &dir.join("home")).expect("create the remap user");
    let (root_uid, root_gid) = user.first_subordinate_ids().expect("subordinate ids");
    let cases = [
        ("tun", "/dev/net/tun", 200, root_gid, 0o666, "ok"),
        ("fuse", "/dev/fuse", 229, root_gid, 0o660, "ok"),
        ("kvm", "/dev/kvm", 232, user.group_gid, 0o660, "warning"),
    ];
    let nodes = HostNodes::start(
        &dir.join("nodes"),
        &cases.map(|(_, host_path, minor, gid, mode, _)| NodeSpec {
            host_path,
            major: 10,
            minor,
            uid: 0,
            gid,
            mode,
        }),
    )
    .expect("host nodes");
    let profiles: Vec<&str> = cases.iter().map(|(p, ..)| *p).collect();
    let (config, profiles_dir) = nodes.host_config(dir, &profiles).expect("host config");
    let specs = dir.join("cdi");
    let generated = nodes
        .cdi_generate(&profiles_dir, &specs, &[])
        .expect("cdi generate");
    let ratings = nodes
        .access_ratings(&config, &specs, &format!("{root_uid}:{root_gid}"))
        .expect("doctor --user");
    for (profile, .., severity) in cases {
        let rating = ratings.get(profile).expect("an access finding");
        assert_eq!(rating.severity, severity, "{profile}: {}", rating.message);
    }

    release
        .daemon_json
        .insert("cdi-spec-dirs".to_owned(), serde_json::json!([specs]));
    release
        .daemon_json
        .insert("userns-remap".to_owned(), serde_json::json!(user.name));
    release.prefix = nodes.enter().expect("nsenter");
    let engine = Engine::start_release(&[runc_runtime(), shim_runtime(&config)], &[], &release)
        .expect("docker 28");
    engine.import_busybox().expect("import busybox");
    let runtime = format!("--runtime={RUNC_UNDER_TEST}");
    let mut args = vec!["run", "--rm", "--network", "none", runtime.as_str()];
    let devices: Vec<String> = cases
        .iter()
        .map(|(profile, ..)| format!("devinject.io/{profile}=0"))
        .collect();
    for d in &devices {
        args.extend(["--device", d]);
    }
    args.extend([IMAGE, "/bin/sh", "-c", OPEN_EACH, "sh"]);
    args.extend(cases.iter().map(|(_, path, ..)| *path));
    let out = engine.docker(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- cdi generate\n{generated}\n--- engine\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        engine.log_tails()
    );
    assert!(out.status.success(), "{ctx}");
    for (profile, path, .., severity) in cases {
        let want = if severity == "ok" { "ok" } else { "denied" };
        assert!(
            stdout.lines().any(|l| l == format!("{path} {want}")),
            "{profile}: want {path} {want}\n{ctx}"
        );
    }

    // Through devinject's shim, the remapped root gets its own copy of each node, owned by the
    // ids the namespace maps: kvm, whose host node it cannot open, opens for it.
    let shim = format!("--runtime={SHIM}");
    let out = engine.docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        &shim,
        "-e",
        "KVM_VISIBLE_DEVICES=all",
        IMAGE,
        "/bin/sh",
        "-c",
        OPEN_EACH,
        "sh",
        "/dev/kvm",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- engine\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        engine.log_tails()
    );
    assert!(out.status.success(), "{ctx}");
    assert!(stdout.lines().any(|l| l == "/dev/kvm ok"), "{ctx}");
    drop(engine);
    drop(user);
    drop(nodes);
}
