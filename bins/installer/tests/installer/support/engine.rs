//! A private containerd + dockerd for the image test, in a mount namespace of their own where
//! `/etc/devinject` and `/opt/devinject` are the fake host root's directories.
//!
//! The installer runs as a container of this dockerd with the fake host root mounted at
//! `/host`, and writes host paths (`/opt/devinject/bin/devinject-runtime` into daemon.json, the
//! hook config at `/etc/devinject/config.toml`, where the shim reads it). For the daemons to find
//! them without touching the real `/etc` and `/opt`, both daemons run in a private mount
//! namespace (`unshare -m --propagation private`) in which `/etc` and `/opt` are overlays of the
//! real ones (so a `devinject` directory can be added) with the fake root's `etc/devinject` and
//! `opt/devinject` bind-mounted there. Nothing leaves that namespace; it ends with the daemons.
//!
//! Sockets, state, data root and pid file live in a short temp dir (unix socket paths are
//! limited to 108 bytes). containerd's shim sockets under `/run/containerd/s/` are the one path
//! shared with the host's containerd (hard-coded in containerd 1.6); they only gain entries.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const READY: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);

/// The running pair.
pub struct Engine {
    containerd: Option<Child>,
    dockerd: Option<Child>,
    dir: PathBuf,
    /// `unix://...` of dockerd.
    pub host: String,
}

fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Engine {
    /// Starts the daemons under `dir` (short path) for the fake host root `root`, whose
    /// `etc/docker/daemon.json` is dockerd's config file and `run/docker.pid` its pid file.
    pub fn start(dir: &Path, root: &Path) -> Engine {
        for d in ["etc/devinject", "opt/devinject", "run", "etc/docker"] {
            fs::create_dir_all(root.join(d)).expect("mkdir in host root");
        }
        let ctd = dir.join("ctd");
        fs::create_dir_all(&ctd).expect("mkdir");
        let ctd_sock = ctd.join("c.sock");
        fs::write(
            ctd.join("config.toml"),
            format!(
                "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\n[grpc]\n  address = \"{d}/c.sock\"\n\n\
                 [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n",
                d = ctd.display()
            ),
        )
        .expect("containerd config");
        let script = format!(
            "set -e\n\
             for d in etc opt; do\n\
               mkdir -p {s}/$d-up/devinject {s}/$d-work\n\
               mount -t overlay overlay -o lowerdir=/$d,upperdir={s}/$d-up,workdir={s}/$d-work /$d\n\
               mount --bind {h}/$d/devinject /$d/devinject\n\
             done\n\
             exec \"$@\"\n",
            s = dir.display(),
            h = root.display()
        );
        let log = dir.join("containerd.log");
        let f = fs::File::create(&log).expect("log");
        let containerd = Command::new("unshare")
            .args([
                "-m",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                &script,
                "sh",
            ])
            .arg("containerd")
            .arg("--config")
            .arg(ctd.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("start containerd");
        let mut engine = Engine {
            containerd: Some(containerd),
            dockerd: None,
            dir: dir.to_path_buf(),
            host: format!("unix://{}/d.sock", dir.display()),
        };
        engine.wait("containerd", &log, |e| {
            Command::new("ctr")
                .arg("--address")
                .arg(&ctd_sock)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
                .then_some(())
                .or_else(|| {
                    e.assert_running();
                    None
                })
        });
        let pid = engine.containerd.as_ref().expect("containerd").id();
        let log = dir.join("dockerd.log");
        let f = fs::File::create(&log).expect("log");
        let dockerd = Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-m", "--"])
            .arg("dockerd")
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .arg("--storage-driver=vfs")
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(root.join("run/docker.pid"))
            .arg("-H")
            .arg(&engine.host)
            .arg("--config-file")
            .arg(root.join("etc/docker/daemon.json"))
            .arg("--containerd")
            .arg(&ctd_sock)
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f)
            .spawn()
            .expect("start dockerd");
        engine.dockerd = Some(dockerd);
        engine.wait("dockerd", &log, |e| {
            e.assert_running();
            e.docker_ok(&["version", "--format", "{{.Server.Version}}"])
                .ok()
                .map(|_| ())
        });
        engine
    }

    fn assert_running(&mut self) {
        for (name, child) in [
            ("containerd", &mut self.containerd),
            ("dockerd", &mut self.dockerd),
        ] {
            if let Some(c) = child {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!(
                        "{name} exited with {status}\n{}",
                        tail(&self.dir.join(format!("{name}.log")))
                    );
                }
            }
        }
    }

    /// Polls `check` until it answers (daemon readiness has no event to wait on from here).
    pub fn wait<T>(
        &mut self,
        what: &str,
        log: &Path,
        mut check: impl FnMut(&mut Self) -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = check(self) {
                return v;
            }
            assert!(
                start.elapsed() < READY,
                "timed out waiting for {what}\n{}",
                tail(log)
            );
            std::thread::sleep(POLL);
        }
    }

    /// Runs the docker CLI against this dockerd.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(&self.host)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run docker")
    }

    /// Runs the docker CLI, returning stdout on success and a description otherwise.
    pub fn docker_ok(&self, args: &[&str]) -> Result<String, String> {
        let out = self.docker(args);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "docker {}: {}\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The runtimes dockerd knows.
    pub fn runtimes(&self) -> serde_json::Value {
        let text = self
            .docker_ok(&["info", "--format", "{{json .Runtimes}}"])
            .expect("docker info");
        serde_json::from_str(text.trim()).expect("runtimes json")
    }

    /// The daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "--- dockerd log\n{}\n--- containerd log\n{}",
            tail(&self.dir.join("dockerd.log")),
            tail(&self.dir.join("containerd.log"))
        )
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        for child in [self.dockerd.take(), self.containerd.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            let start = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if start.elapsed() > Duration::from_secs(20) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(POLL),
                }
            }
        }
    }
}
