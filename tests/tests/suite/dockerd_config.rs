//! The daemon.json devinject-ctl writes, loaded by a real dockerd: after `configure --reload`
//! (SIGHUP) `docker info` lists the devinject runtime and `docker run --runtime devinject`
//! works; after `unconfigure --reload` daemon.json is byte-identical and the runtime is gone.
//! A private containerd and dockerd ([`devinject_tests::daemons`]) run in a temp dir with their
//! own sockets; the system daemons are never touched. Needs root, `containerd`, `ctr`, `dockerd`,
//! `docker` and the built `devinject-ctl`; skipped otherwise (fails under `CI=true`).

use std::process::Command;

use devinject_tests::bins::bin;
use devinject_tests::daemons::{self, poll, run_ok, short_tempdir, Containerd, Dockerd};
use devinject_tests::skip::{require_binary, require_root, which};

fn runtimes(dockerd: &Dockerd) -> serde_json::Value {
    let text = dockerd
        .docker(&["info", "--format", "{{json .Runtimes}}"])
        .expect("docker info");
    serde_json::from_str(text.trim()).expect("runtimes json")
}

fn ctl(args: &[&str]) -> String {
    let mut cmd = Command::new(bin("devinject-ctl"));
    cmd.args(args);
    run_ok(cmd).unwrap_or_else(|e| panic!("devinject-ctl failed: {e}"))
}

fn wait(dockerd: &Dockerd, what: &str, mut check: impl FnMut() -> bool) {
    poll(what, daemons::START_DEADLINE, || Ok(check().then_some(())))
        .unwrap_or_else(|e| panic!("{e}\n{}", dockerd.log_tail()));
}

#[test]
fn dockerd_reloads_the_devinject_runtime_and_runs_with_it() {
    if !(require_root()
        && require_binary("containerd")
        && require_binary("ctr")
        && require_binary("dockerd")
        && require_binary("docker"))
    {
        return;
    }
    let tmp = short_tempdir("dkcfg").expect("tempdir");
    let dir = tmp.path();
    let ctd_dir = dir.join("ctd");
    std::fs::create_dir_all(&ctd_dir).expect("mkdir");
    let ctd_config = ctd_dir.join("config.toml");
    std::fs::write(
        &ctd_config,
        format!(
            "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n{}",
            Containerd::private_settings(&ctd_dir)
        ),
    )
    .expect("containerd config");
    let containerd = Containerd::start(&ctd_dir, &ctd_config).expect("start containerd");

    // dockerd 20.10 writes its trust key to /etc/docker unless told otherwise; keep it here.
    // The key is an unknown key to devinject-ctl, which must keep it.
    let config = dir.join("daemon.json");
    let original = format!(
        "{{\n  \"deprecated-key-path\": \"{}/key.json\",\n  \"log-level\": \"info\",\n  \"runtimes\": {{\n    \"other\": {{\n      \"path\": \"/usr/sbin/runc\"\n    }}\n  }}\n}}\n",
        dir.display()
    );
    std::fs::write(&config, &original).expect("daemon.json");
    let dockerd = Dockerd::start(dir, &containerd, &config, &["--storage-driver=vfs"])
        .expect("start dockerd");
    assert!(runtimes(&dockerd).get("devinject").is_none());

    let config_arg = config.to_str().expect("utf-8").to_string();
    let pid_arg = dockerd.pidfile().to_str().expect("utf-8").to_string();
    let out = ctl(&[
        "runtime",
        "configure",
        "--runtime",
        "docker",
        "--config",
        &config_arg,
        "--shim-path",
        "/usr/sbin/runc",
        "--reload",
        "--docker-pidfile",
        &pid_arg,
    ]);
    assert!(out.contains("reloaded dockerd"), "{out}");
    wait(&dockerd, "dockerd to list the devinject runtime", || {
        runtimes(&dockerd).get("devinject").is_some()
    });
    let listed = runtimes(&dockerd);
    assert_eq!(listed["devinject"]["path"], "/usr/sbin/runc");
    assert_eq!(listed["other"]["path"], "/usr/sbin/runc");

    // A container really starts through the runtime entry (runc stands in for the shim).
    match which("busybox") {
        Some(busybox) => {
            let rootfs = dir.join("rootfs");
            std::fs::create_dir_all(rootfs.join("bin")).expect("mkdir rootfs");
            std::fs::copy(&busybox, rootfs.join("bin/busybox")).expect("copy busybox");
            let tar = dir.join("rootfs.tar");
            let mut tar_cmd = Command::new("tar");
            tar_cmd.arg("-C").arg(&rootfs).arg("-cf").arg(&tar).arg(".");
            run_ok(tar_cmd).expect("tar");
            dockerd
                .docker(&["import", tar.to_str().expect("utf-8"), "devinject-test:1"])
                .expect("import");
            let out = dockerd
                .docker(&[
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "--runtime",
                    "devinject",
                    "devinject-test:1",
                    "/bin/busybox",
                    "echo",
                    "ran-with-devinject",
                ])
                .unwrap_or_else(|e| panic!("docker run: {e}"));
            assert_eq!(out.trim(), "ran-with-devinject");
        }
        None => eprintln!("note: no busybox on PATH, not running a container"),
    }

    // Unconfigure and reload: daemon.json byte-identical, runtime gone.
    let out = ctl(&[
        "runtime",
        "unconfigure",
        "--runtime",
        "docker",
        "--config",
        &config_arg,
        "--reload",
        "--docker-pidfile",
        &pid_arg,
    ]);
    assert!(out.contains("reloaded dockerd"), "{out}");
    assert_eq!(std::fs::read_to_string(&config).expect("read"), original);
    wait(&dockerd, "dockerd to drop the devinject runtime", || {
        runtimes(&dockerd).get("devinject").is_none()
    });
    drop(dockerd);
    drop(containerd);
}
