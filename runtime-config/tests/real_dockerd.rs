//! The daemon.json devinject-ctl writes, loaded by a real dockerd: after `configure --reload`
//! (SIGHUP) `docker info` lists the devinject runtime and `docker run --runtime devinject`
//! works; after `unconfigure --reload` daemon.json is byte-identical and the runtime is gone.
//! A private containerd and dockerd run in a temp dir with their own sockets; the system
//! daemons are never touched. Needs root, `containerd`, `ctr`, `dockerd` and `docker`; skipped
//! otherwise (fails under `CI=true`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::daemons::{self, Containerd, Daemon};

/// A dockerd on a private containerd.
struct Dockerd {
    daemon: Daemon,
    host: String,
    pidfile: PathBuf,
}

impl Dockerd {
    fn start(dir: &Path, containerd: &Containerd, config: &Path) -> Dockerd {
        let host = format!("unix://{}/d.sock", dir.display());
        let pidfile = dir.join("docker.pid");
        let mut cmd = Command::new("dockerd");
        cmd.args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .arg("--storage-driver=vfs")
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(&pidfile)
            .arg("-H")
            .arg(&host)
            .arg("--config-file")
            .arg(config)
            .arg("--containerd")
            .arg(&containerd.socket);
        let mut daemon = Daemon::start("dockerd", cmd, dir.join("dockerd.log"), dir);
        let log = daemon.log.clone();
        // `docker info` prints an empty answer while the daemon is not up; `docker version`
        // fails until the server answers.
        daemons::wait_for("dockerd to answer", &log, || {
            daemon.assert_running();
            let args = [
                "-H",
                host.as_str(),
                "version",
                "--format",
                "{{.Server.Version}}",
            ];
            daemons::output(Command::new("docker").args(args)).ok()
        });
        Dockerd {
            daemon,
            host,
            pidfile,
        }
    }

    fn docker(&self, args: &[&str]) -> Result<String, String> {
        daemons::output(Command::new("docker").arg("-H").arg(&self.host).args(args))
    }

    fn runtimes(&self) -> serde_json::Value {
        let text = self
            .docker(&["info", "--format", "{{json .Runtimes}}"])
            .expect("docker info");
        serde_json::from_str(text.trim()).expect("runtimes json")
    }
}

fn ctl(args: &[&str]) -> String {
    daemons::output(Command::new(env!("CARGO_BIN_EXE_devinject-ctl")).args(args))
        .unwrap_or_else(|e| panic!("devinject-ctl failed: {e}"))
}

#[test]
fn dockerd_reloads_the_devinject_runtime_and_runs_with_it() {
    if !daemons::prerequisites(&["containerd", "ctr", "dockerd", "docker"]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let ctd_dir = dir.join("ctd");
    std::fs::create_dir_all(&ctd_dir).expect("mkdir");
    std::fs::write(
        ctd_dir.join("config.toml"),
        format!(
            "version = 2\n{}",
            daemons::containerd_private_settings(&ctd_dir)
        ),
    )
    .expect("containerd config");
    let containerd = Containerd::start(&ctd_dir);

    // dockerd 20.10 writes its trust key to /etc/docker unless told otherwise; keep it here.
    // The key is an unknown key to devinject-ctl, which must keep it.
    let config = dir.join("daemon.json");
    let original = format!(
        "{{\n  \"deprecated-key-path\": \"{}/key.json\",\n  \"log-level\": \"info\",\n  \"runtimes\": {{\n    \"other\": {{\n      \"path\": \"/usr/sbin/runc\"\n    }}\n  }}\n}}\n",
        dir.display()
    );
    std::fs::write(&config, &original).expect("daemon.json");
    let dockerd = Dockerd::start(dir, &containerd, &config);
    assert!(dockerd.runtimes().get("devinject").is_none());

    let config_arg = config.to_str().expect("utf-8").to_string();
    let pid_arg = dockerd.pidfile.to_str().expect("utf-8").to_string();
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
    let log = dockerd.daemon.log.clone();
    let runtimes = daemons::wait_for("dockerd to list the devinject runtime", &log, || {
        let r = dockerd.runtimes();
        r.get("devinject").is_some().then_some(r)
    });
    assert_eq!(runtimes["devinject"]["path"], "/usr/sbin/runc");
    assert_eq!(runtimes["other"]["path"], "/usr/sbin/runc");

    // A container really starts through the runtime entry (runc stands in for the shim).
    match daemons::which("busybox") {
        Some(busybox) => {
            let rootfs = dir.join("rootfs");
            std::fs::create_dir_all(rootfs.join("bin")).expect("mkdir rootfs");
            std::fs::copy(&busybox, rootfs.join("bin/busybox")).expect("copy busybox");
            let tar = dir.join("rootfs.tar");
            daemons::output(
                Command::new("tar")
                    .arg("-C")
                    .arg(&rootfs)
                    .arg("-cf")
                    .arg(&tar)
                    .arg("."),
            )
            .expect("tar");
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
                .unwrap_or_else(|e| {
                    panic!("docker run: {e}\n--- dockerd log\n{}", daemons::tail(&log))
                });
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
    daemons::wait_for("dockerd to drop the devinject runtime", &log, || {
        dockerd.runtimes().get("devinject").is_none().then_some(())
    });
    drop(dockerd);
    drop(containerd);
}
