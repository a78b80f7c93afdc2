//! Private daemons for integration tests: a containerd (with or without its CRI plugin) and a
//! dockerd on top of it, each with its own root, state, sockets and log in a temp dir, never a
//! host daemon or a default socket. Every test that needs a daemon starts it through this module.
//!
//! # Lifetime: torn down in `Drop`
//! A [`Daemon`] is stopped when dropped (SIGTERM, a bounded wait, then SIGKILL), also when a test
//! fails and unwinds. A dropped [`Containerd`] then kills (by pid) the runc shims still
//! registered with its socket, which outlive containerd by design, and lazily unmounts
//! everything left below its directory (rootfs overlays, sandbox `/dev/shm`). Only a test binary
//! killed by a signal skips `Drop`; its daemons are then the `/tmp/<prefix>XXXXXX` dirs.
//!
//! # What is still shared with the host
//! Paths hard-coded in containerd 1.6 and dockerd 20.10 that cannot be moved; each only gains
//! per-daemon entries:
//! - `/run/containerd/s/`: shim sockets, named by a hash of our containerd's address;
//! - `/run/docker/plugins/`: dockerd's plugin discovery directory (only read).
//!
//! The trust key dockerd 20.10 would write to `/etc/docker/key.json` goes into the temp dir
//! ([`Dockerd::base_config`]), and containerd's `opt` plugin directory (`/opt/containerd` by
//! default) too ([`Containerd::private_settings`]).
//!
//! Unix socket paths are limited to 108 bytes, so temp dirs are made directly under `/tmp`
//! ([`short_tempdir`]) whatever `TMPDIR` says.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// How long a daemon gets to become ready. Generous: the test machines have two cores and build
/// in parallel.
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a daemon gets to exit after SIGTERM before it is killed.
pub const STOP_DEADLINE: Duration = Duration::from_secs(30);
/// How long one CLI call (`docker`, `ctr`) may take.
pub const CLI_DEADLINE: Duration = Duration::from_secs(60);

/// The longest temporary directory [`short_tempdir`] makes its directories in: the daemons'
/// sockets below them must stay within `sun_path`'s 108 bytes.
const SHORT_TMPDIR_MAX: usize = 24;

/// A temp dir named `<tmp>/<prefix>XXXXXX`, short enough for unix socket paths: `<tmp>` is
/// `TMPDIR` (scripts/test.sh's tmpfs, `/tmp/devinject.XXXXXX`) where it is at most
/// 24 bytes long, `/tmp` otherwise ([`slash_tmp_tempdir`]).
pub fn short_tempdir(prefix: &str) -> Result<tempfile::TempDir> {
    let tmp = std::env::temp_dir();
    if tmp.as_os_str().len() > SHORT_TMPDIR_MAX {
        return slash_tmp_tempdir(prefix);
    }
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&tmp)
        .with_context(|| format!("create a {}/{prefix}XXXXXX dir", tmp.display()))
}

/// A temp dir directly under `/tmp`, named `/tmp/<prefix>XXXXXX`: for trees whose paths must
/// be shorter still than [`short_tempdir`] allows.
pub fn slash_tmp_tempdir(prefix: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .with_context(|| format!("create a /tmp/{prefix}XXXXXX dir"))
}

/// Polls `check` until it returns `Some`, with a growing pause (20 ms up to 250 ms), until
/// `deadline`; the error names `what`.
pub fn poll<T>(
    what: &str,
    deadline: Duration,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            bail!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// Runs `cmd` to completion on a helper thread; `None` when it takes longer than `deadline`
/// (the process is then left to the daemon's teardown, which ends what it waits on).
pub fn output_within(mut cmd: Command, deadline: Duration) -> Option<std::io::Result<Output>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    rx.recv_timeout(deadline).ok()
}

/// Runs `cmd` within [`CLI_DEADLINE`] with stdin from `/dev/null`, requiring success; returns
/// stdout.
pub fn run_ok(mut cmd: Command) -> Result<String> {
    cmd.stdin(Stdio::null());
    let shown = format!("{cmd:?}");
    let out = output_within(cmd, CLI_DEADLINE)
        .with_context(|| format!("{shown} did not finish within {CLI_DEADLINE:?}"))?
        .with_context(|| format!("cannot run {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `program` run behind `prefix`, a command and its arguments that end by running the rest
/// (`nsenter -t PID -m --`, to run it in another mount namespace); empty: `program` itself.
pub fn behind(prefix: &[String], program: impl AsRef<std::ffi::OsStr>) -> Command {
    match prefix.split_first() {
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// The last `lines` lines of a log file.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A daemon process logging to a file, stopped on drop.
#[derive(Debug)]
pub struct Daemon {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` with stdout and stderr going to `log`.
    pub fn start(name: &'static str, mut cmd: Command, log: &Path) -> Result<Self> {
        let file = File::create(log).with_context(|| format!("create {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| {
                format!("run {name} (apt-get install it, or run scripts/install-deps.sh)")
            })?;
        Ok(Self {
            name,
            child: Some(child),
            log: log.to_owned(),
        })
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of its log, headed by its name.
    pub fn log_tail(&self) -> String {
        format!(
            "--- {} log (last lines)\n{}\n",
            self.name,
            tail(&self.log, 40)
        )
    }

    /// An error when the daemon has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self
            .child
            .as_mut()
            .map(Child::try_wait)
            .transpose()?
            .flatten()
        {
            bail!("{} exited ({status})\n{}", self.name, self.log_tail());
        }
        Ok(())
    }

    /// Polls `ready` until it says yes; fails early when the daemon exits, and after
    /// [`START_DEADLINE`], with the log.
    pub fn wait_ready(&mut self, what: &str, mut ready: impl FnMut() -> bool) -> Result<()> {
        let result = poll(what, START_DEADLINE, || {
            self.check_running()?;
            Ok(ready().then_some(()))
        });
        result.map_err(|e| e.context(self.log_tail()))
    }

    /// SIGKILL at once, as a crash or the OOM killer would: the daemon cleans up nothing.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, a bounded wait, then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
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
        eprintln!(
            "warning: {} ignored SIGTERM for {STOP_DEADLINE:?}; killing it",
            self.name
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private containerd in `dir`: root `dir/root`, state `dir/state`, socket
/// `dir/containerd.sock`, log `dir/containerd.log`, with a configuration file the caller writes
/// (starting with [`Containerd::private_settings`]).
#[derive(Debug)]
pub struct Containerd {
    daemon: Daemon,
    dir: PathBuf,
    config: PathBuf,
    /// The release's binaries (containerd, its runc shim, ctr), when not the machine's.
    bin: Option<PathBuf>,
}

impl Containerd {
    /// The socket of a containerd in `dir`.
    pub fn socket_in(dir: &Path) -> PathBuf {
        dir.join("containerd.sock")
    }

    /// The top-level settings (config version 2) that keep a containerd in `dir` away from the
    /// system's: root, state, sockets, no debug or metrics listener, the `opt` plugin's
    /// directory. Put them first in the file, before any table.
    pub fn private_settings(dir: &Path) -> String {
        let sock = Self::socket_in(dir);
        format!(
            "root = \"{root}\"\nstate = \"{state}\"\n\n[grpc]\n  address = \"{sock}\"\n\n\
             [ttrpc]\n  address = \"{sock}.ttrpc\"\n\n[debug]\n  address = \"\"\n\n\
             [metrics]\n  address = \"\"\n\n\
             [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{opt}\"\n",
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = sock.display(),
            opt = dir.join("opt").display(),
        )
    }

    /// Starts containerd on `config` and waits until `ctr version` answers.
    pub fn start(dir: &Path, config: &Path) -> Result<Self> {
        Self::start_via(dir, config, &[])
    }

    /// [`Containerd::start`] behind `prefix` (e.g. `nsenter -t PID -m --`, to run it in another
    /// mount namespace).
    pub fn start_via(dir: &Path, config: &Path, prefix: &[String]) -> Result<Self> {
        Self::start_release_via(dir, config, prefix, None)
    }

    /// [`Containerd::start`] of another release: containerd, its runc shim and ctr from `bin`
    /// (see [`crate::runtimes`]).
    pub fn start_release(dir: &Path, config: &Path, bin: &Path) -> Result<Self> {
        Self::start_release_via(dir, config, &[], Some(bin))
    }

    /// [`Containerd::start_release`] with `env` added to its environment (which its shims and
    /// runtimes inherit).
    pub fn start_release_env(
        dir: &Path,
        config: &Path,
        bin: &Path,
        env: &[(&str, &Path)],
    ) -> Result<Self> {
        Self::start_full(dir, config, &[], Some(bin), env)
    }

    /// The one way every containerd starts: behind `prefix` (empty: directly; see
    /// [`Containerd::start_via`]), from the release whose binaries are in `bin` (`None`: the
    /// machine's; see [`Containerd::start_release`]).
    pub fn start_release_via(
        dir: &Path,
        config: &Path,
        prefix: &[String],
        bin: Option<&Path>,
    ) -> Result<Self> {
        Self::start_full(dir, config, prefix, bin, &[])
    }

    fn start_full(
        dir: &Path,
        config: &Path,
        prefix: &[String],
        bin: Option<&Path>,
        env: &[(&str, &Path)],
    ) -> Result<Self> {
        let daemon = Self::spawn(dir, config, prefix, bin, env)?;
        Ok(Self {
            daemon,
            dir: dir.to_owned(),
            config: config.to_owned(),
            bin: bin.map(Path::to_owned),
        })
    }

    /// Stops the daemon alone (SIGTERM) and starts it again behind `prefix` on the same
    /// configuration, as an engine upgrade does: the shims, their containers and their mounts
    /// stay, and the new daemon takes them back. Returns once `ctr version` answers.
    pub fn restart_daemon(&mut self, prefix: &[String]) -> Result<()> {
        self.daemon.stop();
        let log = self.dir.join("containerd.log");
        let _ = std::fs::rename(&log, self.dir.join("containerd.log.1"));
        self.daemon = Self::spawn(&self.dir, &self.config, prefix, self.bin.as_deref(), &[])?;
        Ok(())
    }

    /// Starts the containerd process and waits until `ctr version` answers.
    fn spawn(
        dir: &Path,
        config: &Path,
        prefix: &[String],
        bin: Option<&Path>,
        env: &[(&str, &Path)],
    ) -> Result<Daemon> {
        let program = bin.map_or_else(|| PathBuf::from("containerd"), |b| b.join("containerd"));
        let mut cmd = behind(prefix, &program);
        cmd.arg("--config").arg(config);
        cmd.envs(env.iter().copied());
        if let Some(bin) = bin {
            // containerd finds its shim on PATH: the release's own first.
            let path = std::env::var_os("PATH").unwrap_or_default();
            let paths = std::iter::once(bin.to_owned()).chain(std::env::split_paths(&path));
            cmd.env("PATH", std::env::join_paths(paths).context("PATH")?);
        }
        let mut daemon = Daemon::start("containerd", cmd, &dir.join("containerd.log"))?;
        let sock = Self::socket_in(dir);
        daemon.wait_ready("containerd to answer `ctr version`", || {
            let mut v = ctd_ctr(bin, &sock);
            v.arg("version").stdout(Stdio::null()).stderr(Stdio::null());
            output_within(v, CLI_DEADLINE).is_some_and(|o| o.is_ok_and(|o| o.status.success()))
        })?;
        Ok(daemon)
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its gRPC socket.
    pub fn socket(&self) -> PathBuf {
        Self::socket_in(&self.dir)
    }

    /// Its `state` directory (task bundles live below it).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Its configuration file.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// Its pid (`None` once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The daemon (log, pid).
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        self.daemon.log_tail()
    }

    /// `ctr --address <socket>` (the release's own ctr).
    pub fn ctr(&self) -> Command {
        ctd_ctr(self.bin.as_deref(), &self.socket())
    }

    /// `ctr plugins ls`.
    pub fn plugins(&self) -> Result<String> {
        let mut cmd = self.ctr();
        cmd.args(["plugins", "ls"]);
        run_ok(cmd)
    }

    /// Imports an image archive into `namespace` (`ctr -n NS images import`), unpacked for the
    /// default snapshotter.
    pub fn import(&self, namespace: &str, archive: &Path) -> Result<()> {
        let mut cmd = self.ctr();
        cmd.args(["-n", namespace, "images", "import"]).arg(archive);
        run_ok(cmd).map(drop)
    }

    /// Stops the daemon, kills its leftover shims and unmounts what is left below its dir.
    pub fn stop(&mut self) {
        self.daemon.stop();
        kill_shims_of(&self.socket());
        unmount_below(&self.dir);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "containerd in {} at failure:\n{}",
                self.dir.display(),
                self.log_tail()
            );
        }
        self.stop();
    }
}

/// `ctr --address <socket>`, from `bin` or the machine's.
fn ctd_ctr(bin: Option<&Path>, socket: &Path) -> Command {
    let mut cmd = Command::new(bin.map_or_else(|| PathBuf::from("ctr"), |b| b.join("ctr")));
    cmd.arg("--address").arg(socket);
    cmd
}

/// containerd's effective configuration for `config` (`containerd config dump`), parsed.
pub fn containerd_config_dump(config: &Path) -> Result<toml_edit::DocumentMut> {
    let mut cmd = Command::new("containerd");
    cmd.arg("--config").arg(config).args(["config", "dump"]);
    let text = run_ok(cmd)?;
    text.parse().context("`containerd config dump` is not TOML")
}

/// A private dockerd in `dir` on a [`Containerd`]: data root `dir/data`, exec root `dir/exec`,
/// socket `dir/docker.sock`, pid file `dir/docker.pid`, log `dir/dockerd.log`.
#[derive(Debug)]
pub struct Dockerd {
    daemon: Daemon,
    dir: PathBuf,
    bin: Option<PathBuf>,
}

impl Dockerd {
    /// The daemon.json settings that keep dockerd's files in `dir`; add `runtimes` and the rest
    /// to it.
    pub fn base_config(dir: &Path) -> Value {
        // dockerd 20.10 writes a trust key to /etc/docker/key.json unless told otherwise.
        json!({ "deprecated-key-path": dir.join("key.json") })
    }

    /// Starts the machine's dockerd with daemon.json `config`, talking to `containerd`, with
    /// `extra_args` (e.g. `--storage-driver=vfs`), and waits until the server answers
    /// `docker version`.
    pub fn start(
        dir: &Path,
        containerd: &Containerd,
        config: &Path,
        extra_args: &[&str],
    ) -> Result<Self> {
        Self::start_release(dir, containerd, config, extra_args, None, &[])
    }

    /// [`Dockerd::start`] of another release: dockerd, docker-proxy and the docker CLI from `bin`
    /// (see [`crate::runtimes::docker`]); `None`: the machine's. dockerd runs behind `prefix`
    /// (e.g. `nsenter -t PID -m --`, to run it in another mount namespace); empty: directly.
    pub fn start_release(
        dir: &Path,
        containerd: &Containerd,
        config: &Path,
        extra_args: &[&str],
        bin: Option<&Path>,
        prefix: &[String],
    ) -> Result<Self> {
        let program = bin.map_or_else(|| PathBuf::from("dockerd"), |b| b.join("dockerd"));
        let mut cmd = behind(prefix, program);
        if let Some(bin) = bin {
            // dockerd finds docker-proxy on PATH: the release's own first.
            let path = std::env::var_os("PATH").unwrap_or_default();
            let paths = std::iter::once(bin.to_owned()).chain(std::env::split_paths(&path));
            cmd.env("PATH", std::env::join_paths(paths).context("PATH")?);
        }
        cmd.args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .args(extra_args)
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .arg("-H")
            .arg(format!("unix://{}", dir.join("docker.sock").display()))
            .arg("--containerd")
            .arg(containerd.socket())
            .arg("--config-file")
            .arg(config);
        let daemon = Daemon::start("dockerd", cmd, &dir.join("dockerd.log"))?;
        let mut d = Self {
            daemon,
            dir: dir.to_owned(),
            bin: bin.map(Path::to_owned),
        };
        let probe = d.clone_cli();
        d.daemon
            .wait_ready("dockerd to answer `docker version`", || {
                // `docker info` prints an empty answer while the daemon is not up; `docker version`
                // fails until the server answers.
                let mut v = probe.command();
                v.args(["version", "--format", "{{.Server.Version}}"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                output_within(v, CLI_DEADLINE).is_some_and(|o| o.is_ok_and(|o| o.status.success()))
            })?;
        Ok(d)
    }

    fn clone_cli(&self) -> DockerCli {
        DockerCli {
            dir: self.dir.clone(),
            bin: self.bin.clone(),
        }
    }

    /// Its API socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    /// Its pid file.
    pub fn pidfile(&self) -> PathBuf {
        self.dir.join("docker.pid")
    }

    /// Its `--exec-root`.
    pub fn exec_root(&self) -> PathBuf {
        self.dir.join("exec")
    }

    /// Its `--data-root`.
    pub fn data_root(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The daemon (log, pid).
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        self.daemon.log_tail()
    }

    /// The docker CLI talking to this daemon only (its own `-H` and `DOCKER_CONFIG`).
    pub fn command(&self) -> Command {
        self.clone_cli().command()
    }

    /// Runs `docker <args>` within [`CLI_DEADLINE`], requiring success; returns stdout.
    pub fn docker(&self, args: &[&str]) -> Result<String> {
        let mut cmd = self.command();
        cmd.args(args);
        run_ok(cmd).map_err(|e| e.context(self.log_tail()))
    }

    /// Stops the daemon.
    pub fn stop(&mut self) {
        self.daemon.stop();
    }
}

/// The docker CLI for a private dockerd.
#[derive(Debug, Clone)]
struct DockerCli {
    dir: PathBuf,
    /// The release's bin dir holding its `docker`; `None`: the machine's.
    bin: Option<PathBuf>,
}

impl DockerCli {
    fn command(&self) -> Command {
        let program = self
            .bin
            .as_ref()
            .map_or_else(|| PathBuf::from("docker"), |b| b.join("docker"));
        let mut cmd = Command::new(program);
        cmd.env("DOCKER_CONFIG", self.dir.join("cli"))
            .env_remove("DOCKER_HOST")
            .env_remove("DOCKER_CONTEXT")
            .env_remove("DOCKER_TLS_VERIFY")
            .env_remove("DOCKER_CERT_PATH")
            .arg("-H")
            .arg(format!("unix://{}", self.dir.join("docker.sock").display()))
            .stdin(Stdio::null());
        cmd
    }
}

/// Kills (by pid) the runc shims registered with the containerd at `socket`: they outlive
/// containerd by design, and removing the containers has normally already ended them.
pub fn kill_shims_of(socket: &Path) {
    let address = socket.to_string_lossy();
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

/// Lazily unmounts every mount at or below `dir`, deepest first.
pub fn unmount_below(dir: &Path) {
    let Ok(info) = std::fs::read("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = devinject_mountinfo::parse(&info)
        .filter_map(Result::ok)
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points.dedup();
    for p in points {
        if let Err(e) = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH) {
            eprintln!("warning: cannot unmount {}: {e}", p.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_paths() {
        use devinject_mountinfo::unescape;
        assert_eq!(unescape(r"/tmp/dk1/a\040b"), "/tmp/dk1/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/end\04"), r"/end\04");
    }

    #[test]
    fn poll_returns_the_value_or_times_out() {
        let mut n = 0;
        let v = poll("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            Ok((n >= 3).then_some(n))
        })
        .expect("reaches 3");
        assert_eq!(v, 3);
        let err =
            poll::<()>("never", Duration::from_millis(1), || Ok(None)).expect_err("times out");
        assert!(err.to_string().contains("never"), "{err}");
    }
}
