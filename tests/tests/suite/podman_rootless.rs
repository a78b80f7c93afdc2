//! Rootless podman with the CDI specs `devinject-ctl cdi generate` writes, run by an
//! unprivileged user made for the test, and `devinject-ctl doctor --user` asked beforehand which
//! of those devices that user can use: the test holds doctor's answer to what the real engine
//! and kernel then do.
//!
//! A rootless engine has no devinject step at start: it binds the host's nodes into its user
//! namespace, where the kernel checks the user's host ids against each node's owner, group and
//! mode. The nodes are the real kvm, tun and fuse devices with the modes of a distribution's
//! udev rules, each reached another way ([`devinject_tests::rootless::HostNodes`], so the
//! machine's own nodes keep their modes):
//! - `/dev/net/tun` `0666 root:root`: through the bits for others;
//! - `/dev/fuse` `0660` owned by the user's primary group, which the engine maps to the
//!   container's gid 0;
//! - `/dev/kvm` `0660` owned by a supplementary group of the user, which runc drops when it
//!   sets the container's groups: doctor says so, and the container is refused the node.
//!
//! podman 4.3 (Debian 12's) reads CDI 0.5.0 and refuses a whole spec that carries
//! `additionalGids` (0.7.0), which a group-owned node adds: the specs are written with
//! `--cdi-version 0.5.0`, and the report says what was left out.
//!
//! Needs root, podman, conmon, runc, newuidmap (uidmap), useradd, unshare, nsenter and busybox;
//! skipped otherwise (fails under `CI=true`).

use std::path::Path;

use devinject_tests::podman::Podman;
use devinject_tests::rootless::{CreatedUser, HostNodes, NodeSpec, OPEN_EACH};
use devinject_tests::skip::{require_binary, require_root};

fn ready() -> bool {
    require_root()
        && require_binary("podman")
        && require_binary("conmon")
        && require_binary("runc")
        && require_binary("newuidmap")
        && require_binary("newgidmap")
        && require_binary("useradd")
        && require_binary("unshare")
        && require_binary("nsenter")
        && require_binary("runuser")
        && require_binary("/bin/busybox")
}

/// The three profiles, device, host path, and how doctor must rate the user's access.
const CASES: [(&str, &str, &str); 3] = [
    ("tun", "/dev/net/tun", "ok"),
    ("fuse", "/dev/fuse", "ok"),
    ("kvm", "/dev/kvm", "info"),
];

#[test]
fn rootless_podman_opens_what_doctor_says_the_user_can_open() {
    if !ready() {
        return;
    }
    let tmp = devinject_tests::runc::walkable_tempdir().expect("temp dir");
    let dir = tmp.path();
    let user = CreatedUser::create("rl", &dir.join("home")).expect("create the user");
    let nodes = HostNodes::start(
        &dir.join("nodes"),
        &[
            NodeSpec {
                host_path: "/dev/net/tun",
                major: 10,
                minor: 200,
                uid: 0,
                gid: 0,
                mode: 0o666,
            },
            NodeSpec {
                host_path: "/dev/fuse",
                major: 10,
                minor: 229,
                uid: 0,
                gid: user.gid,
                mode: 0o660,
            },
            NodeSpec {
                host_path: "/dev/kvm",
                major: 10,
                minor: 232,
                uid: 0,
                gid: user.group_gid,
                mode: 0o660,
            },
        ],
    )
    .expect("host nodes");

    let profiles: Vec<&str> = CASES.iter().map(|(p, _, _)| *p).collect();
    let (config, profiles_dir) = nodes.host_config(dir, &profiles).expect("host config");

    // The specs, fitted to the CDI podman 4.3 reads.
    let generated = nodes
        .cdi_generate(
            &profiles_dir,
            Path::new("/run/cdi"),
            &["--cdi-version", "0.5.0"],
        )
        .expect("cdi generate");
    for left in ["fuse: additionalGids", "kvm: additionalGids"] {
        assert!(generated.contains(left), "{left}\n{generated}");
    }

    // What doctor says the user can use.
    let ratings = nodes
        .access_ratings(&config, Path::new("/run/cdi"), &user.name)
        .expect("doctor --user");
    for (profile, _, severity) in CASES {
        let rating = ratings.get(profile).expect("an access finding");
        assert_eq!(rating.severity, severity, "{profile}: {}", rating.message);
    }
    assert!(
        ratings["kvm"].message.contains("supplementary group"),
        "{}",
        ratings["kvm"].message
    );

    // The same devices through rootless podman as that user, in the namespace.
    let xdg = dir.join("xdg");
    let storage = dir.join("podman");
    for d in [&xdg, &storage] {
        std::fs::create_dir_all(d).expect("mkdir");
        std::os::unix::fs::chown(d, Some(user.uid), Some(user.gid)).expect("chown");
    }
    let mut prefix = nodes.enter().expect("nsenter");
    prefix.extend(user.command_prefix(&[("XDG_RUNTIME_DIR", xdg.as_path())]));
    let podman = Podman::new(&storage, Path::new("/nonexistent/hooks.d"))
        .expect("podman")
        .behind(prefix);
    podman
        .import_busybox(&dir.join("rootfs"))
        .expect("import busybox as the user");
    let mut args = vec!["run", "--rm", "--network", "none"];
    let devices: Vec<String> = CASES
        .iter()
        .map(|(profile, _, _)| format!("devinject.io/{profile}=0"))
        .collect();
    for d in &devices {
        args.extend(["--device", d]);
    }
    args.extend([
        devinject_tests::podman::IMAGE,
        "/bin/sh",
        "-c",
        OPEN_EACH,
        "sh",
    ]);
    args.extend(CASES.iter().map(|(_, path, _)| *path));
    let out = podman.run(&args).expect("podman run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = format!(
        "{:?}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- cdi generate\n{generated}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{ctx}");
    for (profile, path, severity) in CASES {
        // Doctor's `ok` is a node the container opens; its `info` (a supplementary group)
        // one that runc's groups drop.
        let want = if severity == "ok" { "ok" } else { "denied" };
        assert!(
            stdout.lines().any(|l| l == format!("{path} {want}")),
            "{profile}: want {path} {want}\n{ctx}"
        );
    }
    drop(podman);
    drop(user);
    drop(nodes);
}
