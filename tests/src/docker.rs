//! A private docker engine for integration tests: its own `containerd` and `dockerd`, each with
//! its own root, state and unix socket in a short temp dir, never a host daemon or a default
//! socket.
//!
//! # Lifetime: one engine per test, torn down in `Drop`
//! Each test starts an [`Engine`] and drops it when it ends. A failing test unwinds, so `Drop`
//! runs then too: it removes the containers, stops dockerd then containerd (SIGTERM, bounded
//! wait, SIGKILL), kills any runc shim still serving our containerd (by pid), lazily unmounts
//! everything left under the temp dir, and removes it. Measured here, containerd is up in
//! ~0.05 s and dockerd answers `docker info` ~1 s after it starts, so a shared engine would save
//! little and would need a `static`, which Rust never drops: its daemons would outlive the test
//! binary. Independent engines also let the tests run in parallel. Only a test binary killed by
//! a signal skips `Drop`; its engines are then the `/tmp/dkXXXXXX` dirs (dockerd's pid is in
//! `docker.pid` there).
//!
//! # What is still shared with the host
//! Two paths are hard-coded in containerd 1.6 and dockerd 20.10 and cannot be moved; both only
//! gain per-daemon entries:
//! - `/run/containerd/s/`: shim sockets, named by a hash of our containerd's address;
//! - `/run/docker/plugins/`: dockerd's plugin discovery directory (only read).
//!
//! The trust key dockerd 20.10 would write to `/etc/docker/key.json` is redirected into the temp
//! dir (`deprecated-key-path` in daemon.json), and containerd's `opt` plugin directory
//! (`/opt/containerd` by default) too. Containers use docker's default cgroup parent `/docker`.
//!
//! Unix socket paths are limited to 108 bytes, so the temp dir is `/tmp/dkXXXXXX` whatever
//! `TMPDIR` says.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::runc::describe;

/// The tag under which [`Engine::import_busybox`] imports the test image.
pub const IMAGE: &str = "devinject-busybox:test";

/// How long the daemons get to become ready, and to stop, before the harness gives up. Generous:
/// the test machines have two cores and build in parallel.
const START_DEADLINE: Duration = Duration::from_secs(60);
const STOP_DEADLINE: Duration = Duration::from_secs(30);
const CLI_DEADLINE: Duration = Duration::from_secs(60);

/// An entry of daemon.json's `runtimes`: docker runs `path runtimeArgs... <runc args>`. dockerd
/// 20.10 does that with a wrapper script under `<data-root>/runtimes/` that expands the arguments
/// unquoted, so neither the path nor the arguments may contain spaces.
#[derive(Debug, Clone)]
pub struct RuntimeEntry {
    /// The name given to `docker run --runtime=<name>`.
    pub name: String,
    /// The runtime binary.
    pub path: PathBuf,
    /// Arguments put before runc's own.
    pub args: Vec<String>,
}

impl RuntimeEntry {
    /// A runtime named `name` running `path` with `args` first.
    pub fn new<S: AsRef<str>>(name: &str, path: &Path, args: &[S]) -> Self {
        Self {
            name: name.to_owned(),
            path: path.to_owned(),
            args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
        }
    }
}

/// A running private containerd + dockerd pair.
#[derive(Debug)]
pub struct Engine {
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    containerd: Option<Child>,
    dockerd: Option<Child>,
}

impl Engine {
    /// Starts containerd and dockerd with `runtimes` registered, and waits until dockerd answers.
    pub fn start(runtimes: &[RuntimeEntry]) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("dk")
            .tempdir_in("/tmp")
            .context("create the engine's temp dir under /tmp")?;
        let root = dir.path().to_owned();
        // From here on, an early return drops the half-started engine, which tears it down.
        let mut engine = Self {
            dir: Some(dir),
            root,
            containerd: None,
            dockerd: None,
        };
        engine.start_containerd()?;
        engine.start_dockerd(runtimes)?;
        Ok(engine)
    }

    /// The engine's temp dir.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// containerd's gRPC socket.
    pub fn containerd_socket(&self) -> PathBuf {
        self.root.join("ctd.sock")
    }

    /// dockerd's API socket.
    pub fn docker_socket(&self) -> PathBuf {
        self.root.join("docker.sock")
    }

    /// dockerd's `--exec-root`.
    pub fn exec_root(&self) -> PathBuf {
        self.root.join("exec")
    }

    /// dockerd's `--data-root`.
    pub fn data_root(&self) -> PathBuf {
        self.root.join("data")
    }

    /// The `runc --root` holding the state of the running container `id`. dockerd passes the
    /// containerd shim a root under its exec root (`<exec-root>/runtime-runc` for every runtime
    /// in dockerd 20.10, whatever the runtime's name) and the shim adds the namespace, `moby`;
    /// this looks for the container's `state.json` rather than trusting one layout.
    pub fn runc_root(&self, id: &str) -> Result<PathBuf> {
        let exec = self.exec_root();
        let entries =
            std::fs::read_dir(&exec).with_context(|| format!("list {}", exec.display()))?;
        for entry in entries.flatten() {
            let root = entry.path().join("moby");
            if root.join(id).join("state.json").is_file() {
                return Ok(root);
            }
        }
        bail!("no runc state for {id} under {}/*/moby", exec.display())
    }

    /// The OCI bundle's `config.json` of the created container `id`, as the runtime left it.
    pub fn bundle_config(&self, id: &str) -> PathBuf {
        self.root
            .join("ctd/state/io.containerd.runtime.v2.task/moby")
            .join(id)
            .join("config.json")
    }

    /// The docker CLI talking to this engine only (its own `-H` and `DOCKER_CONFIG`).
    pub fn docker_command(&self) -> Command {
        let mut cmd = Command::new("docker");
        cmd.env("DOCKER_CONFIG", self.root.join("cli"))
            .env_remove("DOCKER_HOST")
            .env_remove("DOCKER_CONTEXT")
            .env_remove("DOCKER_TLS_VERIFY")
            .env_remove("DOCKER_CERT_PATH")
            .arg("-H")
            .arg(format!("unix://{}", self.docker_socket().display()))
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `docker <args>` against this engine, bounded by a deadline (a wedged daemon fails
    /// the test instead of hanging it).
    pub fn docker(&self, args: &[&str]) -> Output {
        let mut cmd = self.docker_command();
        cmd.args(args);
        match output_within(cmd, CLI_DEADLINE) {
            Some(Ok(out)) => out,
            Some(Err(e)) => panic!("cannot run docker {args:?}: {e} (apt-get install docker.io)"),
            None => panic!(
                "docker {args:?} did not finish within {CLI_DEADLINE:?}\n{}",
                self.log_tails()
            ),
        }
    }

    /// Runs `docker <args>`, requiring success; returns stdout, trimmed.
    pub fn docker_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.docker(args);
        if !out.status.success() {
            bail!("docker {args:?} failed: {}", describe(&out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Imports a busybox rootfs (see [`crate::rootfs::busybox`], with `/probe.sh`) as [`IMAGE`]:
    /// `tar -C rootfs -c . | docker import - IMAGE`, no registry involved.
    pub fn import_busybox(&self) -> Result<()> {
        let rootfs = self.root.join("image-rootfs");
        crate::rootfs::busybox(&rootfs)?;
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .context("run tar")?;
        let tar_out = tar.stdout.take().context("tar stdout")?;
        let mut import = self.docker_command();
        import.args(["import", "-", IMAGE]).stdin(tar_out);
        let out = output_within(import, CLI_DEADLINE)
            .context("docker import did not finish in time")?
            .context("run docker import")?;
        let tar_status = tar.wait().context("wait for tar")?;
        if !tar_status.success() || !out.status.success() {
            bail!(
                "import of {IMAGE} failed (tar {tar_status}): {}",
                describe(&out)
            );
        }
        Ok(())
    }

    /// The container's init pid on the host (`docker inspect .State.Pid`).
    pub fn pid(&self, id: &str) -> Result<u32> {
        let pid = self.docker_ok(&["inspect", "--format", "{{.State.Pid}}", id])?;
        pid.parse().with_context(|| format!("pid of {id}: {pid:?}"))
    }

    /// The host directory of `controller`'s cgroup holding container `id` (v1 layout, or the
    /// unified hierarchy when the controller has no v1 mount).
    pub fn cgroup_dir(&self, id: &str, controller: &str) -> Result<PathBuf> {
        let pid = self.pid(id)?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .with_context(|| format!("read /proc/{pid}/cgroup"))?;
        let mut unified = None;
        for line in text.lines() {
            let mut f = line.splitn(3, ':');
            let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if ctrls.split(',').any(|c| c == controller) {
                return Ok(Path::new("/sys/fs/cgroup").join(controller).join(rel));
            }
            if ctrls.is_empty() {
                unified = Some(Path::new("/sys/fs/cgroup").join(rel));
            }
        }
        unified.with_context(|| format!("no {controller} cgroup for {id} in /proc/{pid}/cgroup"))
    }

    /// The last lines of dockerd's and containerd's logs, for failure messages.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        for name in ["dockerd.log", "containerd.log"] {
            let text = std::fs::read_to_string(self.root.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(30);
            s.push_str(&format!(
                "--- {name} (last lines)\n{}\n",
                lines[from..].join("\n")
            ));
        }
        s
    }

    fn start_containerd(&mut self) -> Result<()> {
        let r = &self.root;
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
# The CRI plugin is not needed by dockerd and slows the start.
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
"#,
            root = r.join("ctd/root").display(),
            state = r.join("ctd/state").display(),
            sock = self.containerd_socket().display(),
            opt = r.join("ctd/opt").display(),
        );
        let path = r.join("containerd.toml");
        std::fs::write(&path, config).context("write containerd.toml")?;
        let log =
            std::fs::File::create(r.join("containerd.log")).context("create containerd.log")?;
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("run containerd (apt-get install containerd)")?;
        self.containerd = Some(child);
        self.wait_ready("containerd", |e| Ok(e.containerd_socket().exists()))
    }

    fn start_dockerd(&mut self, runtimes: &[RuntimeEntry]) -> Result<()> {
        let r = self.root.clone();
        let mut rts = serde_json::Map::new();
        for rt in runtimes {
            rts.insert(
                rt.name.clone(),
                json!({"path": rt.path, "runtimeArgs": rt.args}),
            );
        }
        let daemon_json: Value = json!({
            "runtimes": rts,
            // dockerd 20.10 writes a trust key to /etc/docker/key.json unless told otherwise.
            "deprecated-key-path": r.join("key.json"),
        });
        let config = r.join("daemon.json");
        std::fs::write(&config, serde_json::to_vec_pretty(&daemon_json)?)
            .context("write daemon.json")?;
        let log = std::fs::File::create(r.join("dockerd.log")).context("create dockerd.log")?;
        let child = Command::new("dockerd")
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .arg("--data-root")
            .arg(self.data_root())
            .arg("--exec-root")
            .arg(self.exec_root())
            .arg("--pidfile")
            .arg(r.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", self.docker_socket().display()))
            .arg("--containerd")
            .arg(self.containerd_socket())
            .arg("--config-file")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("run dockerd (apt-get install docker.io)")?;
        self.dockerd = Some(child);
        self.wait_ready("dockerd", |e| {
            let mut info = e.docker_command();
            info.args(["info", "--format", "{{.ServerVersion}}"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            Ok(info
                .status()
                .context("run docker (apt-get install docker.io)")?
                .success())
        })
    }

    /// Polls `ready` until it says yes, failing early when a daemon exits and after
    /// [`START_DEADLINE`].
    fn wait_ready(&mut self, what: &str, ready: impl Fn(&Self) -> Result<bool>) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(20);
        loop {
            if ready(self)? {
                return Ok(());
            }
            let mut exited = None;
            for (name, child) in [
                ("containerd", &mut self.containerd),
                ("dockerd", &mut self.dockerd),
            ] {
                if let Some(st) = child.as_mut().map(Child::try_wait).transpose()?.flatten() {
                    exited = Some((name, st));
                }
            }
            if let Some((name, st)) = exited {
                bail!(
                    "{name} exited ({st}) before {what} was ready\n{}",
                    self.log_tails()
                );
            }
            if start.elapsed() > START_DEADLINE {
                bail!(
                    "{what} not ready after {START_DEADLINE:?}\n{}",
                    self.log_tails()
                );
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    fn teardown(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "docker engine in {} at failure:\n{}",
                self.root.display(),
                self.log_tails()
            );
        }
        if self
            .dockerd
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        {
            let mut ps = self.docker_command();
            ps.args(["ps", "-aq"]);
            if let Some(Ok(out)) = output_within(ps, CLI_DEADLINE) {
                let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                if !ids.is_empty() {
                    let mut rm = self.docker_command();
                    rm.args(["rm", "--force"]).args(&ids);
                    if output_within(rm, CLI_DEADLINE).is_none() {
                        eprintln!("warning: docker rm --force {ids:?} did not finish in time");
                    }
                }
            }
        }
        stop(self.dockerd.take(), "dockerd");
        stop(self.containerd.take(), "containerd");
        self.kill_orphan_shims();
        self.unmount_all();
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                eprintln!("warning: cannot remove {}: {e}", self.root.display());
            }
        }
    }

    /// Kills (by pid) runc shims still registered with our containerd: they outlive containerd
    /// by design, and `docker rm --force` has normally already ended them.
    fn kill_orphan_shims(&self) {
        let address = self.containerd_socket();
        let address = address.to_string_lossy();
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in procs.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let is_ours = args
                .first()
                .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"))
                && args
                    .windows(2)
                    .any(|w| w[0] == b"-address" && w[1] == address.as_bytes());
            if is_ours {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    /// Lazily unmounts every mount under the temp dir, deepest first (overlay rootfs, shm, the
    /// containerd snapshotter's mounts), so the dir can be removed.
    fn unmount_all(&self) {
        let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let prefix = format!("{}/", self.root.display());
        let mut points: Vec<String> = info
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(unescape_mountinfo)
            .filter(|p| p.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        points.dedup();
        for p in points {
            let ok = Command::new("umount")
                .args(["-l", &p])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("warning: cannot unmount {p}");
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// SIGTERM, a bounded wait, then SIGKILL.
fn stop(child: Option<Child>, name: &str) {
    let Some(mut child) = child else {
        return;
    };
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let start = Instant::now();
    while start.elapsed() < STOP_DEADLINE {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("warning: {name} ignored SIGTERM for {STOP_DEADLINE:?}; killing it");
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `cmd` to completion on a helper thread; `None` when it takes longer than `deadline` (the
/// process is then left to the daemon's teardown, which ends what it waits on).
fn output_within(mut cmd: Command, deadline: Duration) -> Option<std::io::Result<Output>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    rx.recv_timeout(deadline).ok()
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(unescape_mountinfo(r"/tmp/dk1/a\040b"), "/tmp/dk1/a b");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/end\04"), r"/end\04");
    }
}
