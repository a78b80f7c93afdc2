//! The CDI spec `devinject-ctl cdi generate` writes, consumed by a real CDI-capable engine:
//! podman 4.3 (which injects CDI devices natively since 4.1) runs a container with
//! `--device devinject.io/<kind>=0 --device devinject.io/<kind>=1` and no devinject hook or shim
//! at all; the container must see exactly those simulated devices (the un-granted `accel2`,
//! bind-mounted in, denied by the cgroup), the control node, and the demo library read-only
//! and in the linker cache (written by the spec's `devinject-hook finish` createRuntime hook
//! itself: the host configuration names no usable ldconfig).
//!
//! podman 4.3 reads CDI specs only from `/etc/cdi` and `/var/run/cdi` (no `cdi_spec_dirs` yet),
//! so the spec goes to `/var/run/cdi` for the length of the test, under a profile name unique to
//! the test (so concurrent runs never define the same CDI kind), and is removed on drop, with
//! the directory when the test created it. podman runs privately ([`devinject_tests::podman`]).
//! Needs root, podman, conmon, runc, busybox, gcc and the built binaries; skipped otherwise
//! (fails under `CI=true`).

use std::path::{Path, PathBuf};

use devinject_tests::bins::bin;
use devinject_tests::cri::CgroupParent;
use devinject_tests::cri_node::cdi_generate;
use devinject_tests::daemons::short_tempdir;
use devinject_tests::podman::{ready, Podman};
use devinject_tests::probe::Report;
use devinject_tests::rootless::{HostNodes, NodeSpec, OPEN_EACH};
use devinject_tests::sim::{self, assert_demo_granted_0_1_in, demo_host, NO_LDCONFIG};
use devinject_tests::skip::require_binary;

/// A CDI spec directory podman 4.3 reads.
const CDI_DIR: &str = "/var/run/cdi";

/// The spec file in the host's CDI directory, removed on drop (with the directory, when this
/// test created it and it is empty).
struct SpecFile {
    file: PathBuf,
    created_dir: bool,
}

impl Drop for SpecFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.file) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("warning: cannot remove {}: {e}", self.file.display());
            }
        }
        if self.created_dir {
            let _ = std::fs::remove_dir(CDI_DIR);
        }
    }
}

#[test]
fn podman_injects_the_cdi_spec_cdi_generate_writes() {
    if !ready() {
        return;
    }
    let tmp = short_tempdir("pcdi").expect("temp dir");
    let dir = tmp.path();
    let host = demo_host(&dir.join("sim"), &[]).expect("simulated host");
    // The spec's finish hook writes the linker cache itself (it is told which libraries podman
    // mounted): with no ldconfig to fall back to, a fall back fails the container.
    host.write_config(NO_LDCONFIG).expect("host config");
    // The shipped demo profile under a name unique to this test.
    let suffix = dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_ascii_lowercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "");
    let profile = format!("cdi-{suffix}");
    let text = std::fs::read_to_string(sim::shipped_profiles().join("demo.toml")).expect("demo");
    std::fs::write(
        host.profiles_dir.join(format!("{profile}.toml")),
        text.replace("name = \"demo\"", &format!("name = \"{profile}\""))
            .replace(
                "resource = \"devinject.io/demo\"",
                &format!("resource = \"devinject.io/{profile}\""),
            ),
    )
    .expect("write profile");

    let created_dir = !Path::new(CDI_DIR).exists();
    let spec = SpecFile {
        file: Path::new(CDI_DIR).join(format!("devinject.io-{profile}.json")),
        created_dir,
    };
    let out = cdi_generate(&host, Path::new(CDI_DIR)).expect("devinject-ctl cdi generate");
    assert!(spec.file.is_file(), "{out}");

    // No hooks.d hook: the devices come from CDI alone.
    let no_hooks = dir.join("no-hooks.d");
    std::fs::create_dir_all(&no_hooks).expect("mkdir");
    let podman = Podman::new(&dir.join("podman"), &no_hooks).expect("podman");
    let rootfs = dir.join("rootfs");
    podman.import_busybox(&rootfs).expect("import busybox");
    let cgroups = CgroupParent::new(&suffix);
    let cgroup_parent = cgroups.path();
    let dev0 = format!("devinject.io/{profile}=0");
    let dev1 = format!("devinject.io/{profile}=1");
    let out = podman
        .run_demo_probe(
            &cgroup_parent,
            &host,
            &["--device", &dev0, "--device", &dev1],
        )
        .expect("podman run");
    let ctx = format!(
        "{:?}\n--- stdout\n{}\n--- stderr\n{}\n--- spec\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&spec.file).unwrap_or_default()
    );
    assert!(out.status.success(), "{ctx}");
    assert_demo_granted_0_1_in(&Report::parse(&String::from_utf8_lossy(&out.stdout)), &ctx);
    drop(podman);
    drop(cgroups);
    drop(spec);
}

/// A container with a user namespace (`--uidmap`, its root the host's 100000) asking podman for
/// the CDI device `devinject.io/kvm=0`, the real kvm device as this machine has it
/// (`0600 root:root`): runc binds the host's node, which the namespace sees owned by nobody, so
/// the container is refused it; with the specs of `cdi generate --user-namespaces`, each device's
/// `devinject-hook finish --node` gives the container its own copy, owned by the ids it maps,
/// and it opens. The node and the spec directory are the test's own, in a private mount
/// namespace ([`HostNodes`]).
#[test]
fn cdi_user_namespaces_give_a_user_namespaced_container_its_own_copy_of_each_node() {
    if !(ready() && require_binary("unshare") && require_binary("nsenter")) {
        return;
    }
    let tmp = devinject_tests::runc::walkable_tempdir().expect("temp dir");
    let dir = tmp.path();
    let nodes = HostNodes::start(
        &dir.join("nodes"),
        &[NodeSpec {
            host_path: "/dev/kvm",
            major: 10,
            minor: 232,
            uid: 0,
            gid: 0,
            mode: 0o600,
        }],
    )
    .expect("host nodes");
    let (config, profiles) = nodes.host_config(dir, &["kvm"]).expect("host config");
    let hook = bin("devinject-hook");
    let mut prefix = nodes.enter().expect("nsenter");
    prefix.push("env".into());
    let no_hooks = dir.join("no-hooks.d");
    std::fs::create_dir_all(&no_hooks).expect("mkdir");
    let podman = Podman::new(&dir.join("podman"), &no_hooks)
        .expect("podman")
        .behind(prefix);
    podman
        .import_busybox(&dir.join("rootfs"))
        .expect("import busybox");
    let cgroups = CgroupParent::new("pcdi-userns");
    let open_kvm = |user_namespace: bool| {
        let mut flags = vec!["--device", "devinject.io/kvm=0"];
        if user_namespace {
            flags.extend(["--uidmap", "0:100000:65536", "--gidmap", "0:100000:65536"]);
        }
        let command = ["/bin/sh", "-c", OPEN_EACH, "sh", "/dev/kvm"].map(String::from);
        let out = podman
            .run_in_image(&cgroups.path(), &flags, &command)
            .expect("podman run");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let ctx = format!(
            "{:?}\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{ctx}");
        (stdout, ctx)
    };
    let generate = |extra: &[&str]| {
        let mut args = vec!["--cdi-version", "0.5.0", "--hook-path"];
        let hook = hook.to_str().expect("utf-8");
        let config = config.to_str().expect("utf-8");
        args.extend([hook, "--hook-config", config]);
        args.extend(extra);
        nodes
            .cdi_generate(&profiles, Path::new("/run/cdi"), &args)
            .expect("cdi generate")
    };

    // The spec as written by default: the host's node, bound, seen owned by nobody.
    generate(&[]);
    let (out, ctx) = open_kvm(true);
    assert!(out.lines().any(|l| l == "/dev/kvm denied"), "{ctx}");

    // With --user-namespaces: the container's own copy; a container without a user namespace
    // keeps the node the runtime made.
    let report = generate(&["--user-namespaces"]);
    for user_namespace in [true, false] {
        let (out, ctx) = open_kvm(user_namespace);
        assert!(
            out.lines().any(|l| l == "/dev/kvm ok"),
            "user namespace {user_namespace}: {ctx}\n--- cdi generate\n{report}"
        );
    }
    drop(podman);
    drop(cgroups);
    drop(nodes);
}
