//! The installer image, built with `scripts/build-image.sh` (real `docker build` of the FROM
//! scratch image with the static binaries) and run with real docker:
//! 1. against a host-root directory seeded with containerd's configuration: it installs,
//!    re-installs without a change, and uninstalls back to the identical tree;
//! 2. against the live private dockerd it runs on: it configures that dockerd (SIGHUP), after
//!    which `docker run --runtime=devinject -e DEMO_VISIBLE_DEVICES=0` gets simulated demo
//!    device 0 (right type, numbers and mode, opening) and its library, and not device 1; the
//!    image's device plugin serves the installed demo profile and the installer's probe sees
//!    it; the uninstall gives daemon.json back byte for byte and the runtime disappears.
//!
//! Needs root, containerd, ctr, dockerd, docker, unshare, nsenter, gcc, busybox and mknod, and
//! builds static binaries (the dev profile unless DEVINJECT_IMAGE_PROFILE says otherwise; minutes
//! the first time); skipped with a reason otherwise, and a
//! failure under `CI=true`.

use crate::support;

use std::path::Path;
use std::process::Command;

use crate::support::engine::Engine;
use crate::support::{assert_same, FakeHost};
use devinject_tests::{probe, rootfs, sim, skip};

const TAG: &str = "devinject-installer-test:latest";

fn prerequisites() -> bool {
    if !skip::require_root() {
        return false;
    }
    for bin in [
        "containerd",
        "ctr",
        "dockerd",
        "docker",
        "unshare",
        "nsenter",
        "gcc",
        "mknod",
        "tar",
    ] {
        if !skip::require_binary(bin) {
            return false;
        }
    }
    skip::require_binary(rootfs::BUSYBOX)
}

/// Builds the image into the engine with the documented script.
fn build_image(engine: &Engine) {
    let out = Command::new(support::repo().join("scripts/build-image.sh"))
        .arg(TAG)
        .env("DOCKER", format!("docker -H {}", engine.host))
        // The test proves the image works, not how fast release code is: an unoptimised static
        // build is several times quicker on a small CI machine. DEVINJECT_IMAGE_PROFILE=release
        // tests the shipped profile.
        .env(
            "PROFILE",
            std::env::var("DEVINJECT_IMAGE_PROFILE").unwrap_or_else(|_| "dev".into()),
        )
        .output()
        .expect("run scripts/build-image.sh");
    assert!(
        out.status.success(),
        "build-image.sh failed: {}\n{}{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        engine.logs()
    );
}

/// `docker run` of the installer image with `root` as the host root.
fn run_installer(engine: &Engine, root: &Path, docker_opts: &[&str], args: &[&str]) -> String {
    let volume = format!("{}:/host", root.display());
    let mut all = vec!["run", "--rm", "--network", "none", "-v", &volume];
    all.extend_from_slice(docker_opts);
    all.push(TAG);
    all.extend_from_slice(&["--host-root", "/host"]);
    all.extend_from_slice(args);
    engine
        .docker_ok(&all)
        .unwrap_or_else(|e| panic!("{e}\n{}", engine.logs()))
}

#[test]
fn the_image_installs_on_a_host_root_and_on_a_live_dockerd() {
    if !prerequisites() {
        return;
    }
    // Short: unix socket paths are limited to 108 bytes.
    let tmp = tempfile::Builder::new()
        .prefix("dii")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let dir = tmp.path();
    let live_root = dir.join("host");
    std::fs::create_dir_all(live_root.join("etc/docker")).expect("mkdir");
    // dockerd 20.10 writes a trust key to /etc/docker unless told otherwise; the key is unknown
    // to devinject-ctl, which must keep it. dockerd re-reads `runtimes` on SIGHUP only when the
    // key is there (docs/uninstall.md), so the node already has one runtime of its own.
    let daemon_json = format!(
        "{{\n  \"deprecated-key-path\": \"{}/key.json\",\n  \"log-level\": \"info\",\n  \"runtimes\": {{\n    \"other\": {{\n      \"path\": \"/usr/sbin/runc\"\n    }}\n  }}\n}}\n",
        dir.display()
    );
    std::fs::write(live_root.join("etc/docker/daemon.json"), &daemon_json).expect("write");
    let engine = Engine::start(&dir.join("e"), &live_root);
    build_image(&engine);

    // 1. A host-root directory with containerd's configuration.
    let h = FakeHost::new(Some("containerd-1.7-nvidia-default"));
    let before = h.snapshot();
    let args = [
        "--runtime",
        "containerd",
        "--restart-mode",
        "none",
        "--policy",
        "hook-default",
    ];
    let out = run_installer(&engine, &h.root, &[], &args);
    assert!(out.contains("ACTION NEEDED"), "{out}");
    for b in devinject_installer::install::BINARIES {
        let p = h.path(&format!("/opt/devinject/bin/{b}"));
        let v = Command::new(&p).arg("--help").output();
        assert!(v.is_ok(), "{} does not run here: {v:?}", p.display());
    }
    assert!(h
        .read("/etc/containerd/conf.d/99-devinject.toml")
        .contains("/opt/devinject/bin/devinject-runtime"));
    let installed = h.snapshot();
    let out = run_installer(&engine, &h.root, &[], &args);
    assert!(out.contains("nothing changed"), "{out}");
    assert_same(&h.snapshot(), &installed, "re-install from the image");
    let mut un = vec!["--uninstall"];
    un.extend_from_slice(&args[..4]);
    run_installer(&engine, &h.root, &[], &un);
    assert_same(&h.snapshot(), &before, "uninstall from the image");

    // 2. The live dockerd, with a simulated demo device host.
    let sim_host = sim::demo_host(&dir.join("sim"), &[]).expect("demo host");
    let dev_root = sim_host.dev_root.display().to_string();
    let driver_root = sim_host.driver_root.display().to_string();
    let sys_root = dir.join("sim/sys").display().to_string();
    let args = [
        "--runtime",
        "docker",
        "--restart-mode",
        "signal",
        "--policy",
        "hook-default",
        "--dev-root",
        &dev_root,
        "--driver-root",
        &driver_root,
        "--sys-root",
        &sys_root,
        "--hook-log-level",
        "info",
    ];
    // --pid=host: the pid in the host's docker.pid must be signalled.
    let out = run_installer(&engine, &live_root, &["--pid", "host"], &args);
    assert!(out.contains("SIGHUP to dockerd"), "{out}");
    let mut e = engine;
    let log = dir.join("e/dockerd.log");
    e.wait("dockerd to list the devinject runtime", &log, |e| {
        e.runtimes().get("devinject").is_some().then_some(())
    });
    assert_eq!(
        e.runtimes()["devinject"]["path"],
        "/opt/devinject/bin/devinject-runtime"
    );

    // A busybox image with the probe.
    let rfs = dir.join("rootfs");
    rootfs::busybox(&rfs).expect("busybox rootfs");
    let tar = dir.join("rootfs.tar");
    let st = Command::new("tar")
        .arg("-C")
        .arg(&rfs)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .expect("tar");
    assert!(st.success());
    e.docker_ok(&[
        "import",
        tar.to_str().expect("utf-8"),
        "devinject-busybox:test",
    ])
    .expect("import");
    let nodes = ["/dev/demo/accel0", "/dev/demo/accel1", "/dev/demo/ctl"];
    let mut run = vec![
        "run",
        "--rm",
        "--network",
        "none",
        "--runtime=devinject",
        "-e",
        "DEMO_VISIBLE_DEVICES=0",
        "devinject-busybox:test",
    ];
    let cmd = probe::probe_args(&nodes, &[sim::LIB, sim::SONAME]);
    run.extend(cmd.iter().map(String::as_str));
    let out = e
        .docker_ok(&run)
        .unwrap_or_else(|err| panic!("{err}\n{}", e.logs()));
    let report = probe::Report::parse(&out);
    let (name, major, minor) = sim::ACCELS[0];
    let n = report.node("/dev/demo/accel0");
    assert_eq!(
        (n.kind.as_str(), n.major, n.minor),
        ("c", major, minor),
        "{name}: {out}"
    );
    assert_eq!(n.mode, "666", "{out}");
    assert_eq!(n.open, "ok", "granted device 0 must open: {out}");
    assert_eq!(report.node("/dev/demo/ctl").open, "ok", "{out}");
    assert_eq!(
        report.node("/dev/demo/accel1").kind,
        "missing",
        "device 1 was not asked for: {out}"
    );
    let lib = report.lib(sim::LIB);
    assert!(lib.present && lib.read_only, "{out}");
    assert!(report.lib(sim::SONAME).in_ldcache, "{out}");

    // Without the request variable the same runtime injects nothing.
    let mut plain = vec![
        "run",
        "--rm",
        "--network",
        "none",
        "--runtime=devinject",
        "devinject-busybox:test",
    ];
    plain.extend(cmd.iter().map(String::as_str));
    let out = e.docker_ok(&plain).expect("plain run");
    assert_eq!(
        probe::Report::parse(&out).node("/dev/demo/accel0").kind,
        "missing"
    );

    // The device plugin from the same image serves the installed demo profile, and the
    // installer's probe (the DaemonSet's liveness/readiness check) sees it; once the plugin
    // stops, its socket is gone and the probe fails.
    let kubelet_dir = dir.join("kubelet");
    std::fs::create_dir_all(&kubelet_dir).expect("mkdir");
    let id = e
        .docker_ok(&[
            "run",
            "-d",
            "--network",
            "none",
            "-v",
            &format!("{}:/var/lib/kubelet/device-plugins", kubelet_dir.display()),
            "-v",
            &format!("{}/etc/devinject:/etc/devinject:ro", live_root.display()),
            "-v",
            &format!("{dev_root}:/dev-sim:ro"),
            "--entrypoint",
            "/usr/bin/devinject-device-plugin",
            TAG,
            "--dev-root",
            "/dev-sim",
            "--profile",
            "demo",
        ])
        .unwrap_or_else(|err| panic!("{err}\n{}", e.logs()));
    let id = id.trim().to_string();
    let plugin_log = dir.join("e/dockerd.log");
    e.wait("the plugin's probe to pass", &plugin_log, |e| {
        let out = e.docker(&["exec", &id, "/usr/bin/devinject-installer", "probe"]);
        if !out.status.success() {
            let state = e
                .docker_ok(&["inspect", "--format", "{{.State.Status}}", &id])
                .unwrap_or_default();
            assert!(
                state.trim() == "running",
                "the plugin exited: {}",
                e.docker_ok(&["logs", &id]).unwrap_or_else(|x| x)
            );
        }
        out.status.success().then_some(())
    });
    let live = devinject_installer::probe::live_sockets(&kubelet_dir).expect("list");
    assert!(
        live.iter().any(|p| p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("devinject-demo-"))),
        "{live:?}"
    );
    e.docker_ok(&["stop", &id]).expect("stop the plugin");
    assert!(devinject_installer::probe::live_sockets(&kubelet_dir)
        .expect("list")
        .is_empty());
    let _ = e.docker(&["rm", &id]);

    // Uninstall from the image: daemon.json byte-identical, the runtime gone.
    let mut un = vec!["--uninstall"];
    un.extend_from_slice(&args[..4]);
    let out = run_installer(&e, &live_root, &["--pid", "host"], &un);
    assert!(out.contains("SIGHUP to dockerd"), "{out}");
    assert_eq!(
        std::fs::read_to_string(live_root.join("etc/docker/daemon.json")).expect("read"),
        daemon_json
    );
    e.wait("dockerd to drop the devinject runtime", &log, |e| {
        e.runtimes().get("devinject").is_none().then_some(())
    });
    assert!(!live_root.join("opt/devinject/bin").exists());
    assert!(!live_root.join("etc/devinject/config.toml").exists());
}
