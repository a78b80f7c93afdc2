//! Private containerd and dockerd instances for tests: their own root, state and sockets in a
//! temp dir, never the system daemons; stopped (and their mounts removed) on drop, also when a
//! test fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How long a daemon may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two readiness checks.
const POLL: Duration = Duration::from_millis(50);

/// Returns `true` when the test can run; otherwise prints why it is skipped and returns
/// `false`, or panics when `CI=true` (a CI run must never pass by skipping).
pub fn prerequisites(binaries: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    for bin in binaries {
        if which(bin).is_none() {
            missing.push(format!("`{bin}` on PATH"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let reason = format!("needs {}", missing.join(", "));
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("cannot run this test: {reason} (CI=true: skipping is a failure)");
    }
    eprintln!("SKIPPED: {reason}");
    false
}

/// The full path of `bin` on PATH.
pub fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

/// Waits until `check` returns `Some`, polling; panics with `what` and `log` after the timeout.
pub fn wait_for<T>(what: &str, log: &Path, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if start.elapsed() > READY_TIMEOUT {
            panic!("timed out waiting for {what}\n--- log\n{}", tail(log));
        }
        std::thread::sleep(POLL);
    }
}

/// The last lines of a log file.
pub fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Runs a command, returning stdout when it succeeds.
pub fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A daemon process that is stopped on drop.
pub struct Daemon {
    name: &'static str,
    child: Child,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// Mounts below this directory are removed after it stops.
    scratch: PathBuf,
}

impl Daemon {
    /// Starts `cmd`, logging to `log`.
    pub fn start(name: &'static str, mut cmd: Command, log: PathBuf, scratch: &Path) -> Daemon {
        let file = fs::File::create(&log).expect("create log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Daemon {
            name,
            child,
            log,
            scratch: scratch.to_path_buf(),
        }
    }

    /// Panics (with the log) when the daemon has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited with {status}\n--- log\n{}",
                self.name,
                tail(&self.log)
            );
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.child.id() as i32);
        if let Ok(None) = self.child.try_wait() {
            let _ = kill(pid, Signal::SIGTERM);
            let start = Instant::now();
            loop {
                match self.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if start.elapsed() > Duration::from_secs(20) => {
                        let _ = self.child.kill();
                        let _ = self.child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(POLL),
                }
            }
        }
        unmount_below(&self.scratch);
    }
}

/// Detaches every mount at or below `dir`, deepest first.
pub fn unmount_below(dir: &Path) {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A private containerd: config at `<dir>/config.toml` (written by the caller before
/// [`Containerd::start`]), socket `<dir>/c.sock`.
pub struct Containerd {
    /// The daemon.
    pub daemon: Daemon,
    /// Its gRPC socket.
    pub socket: PathBuf,
    /// Its main config file.
    pub config: PathBuf,
}

/// The settings that keep a test containerd away from the system one; put them first in the
/// test's config file.
pub fn containerd_private_settings(dir: &Path) -> String {
    format!(
        "root = \"{d}/root\"\nstate = \"{d}/state\"\n\n[grpc]\n  address = \"{d}/c.sock\"\n\n\
         [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n",
        d = dir.display()
    )
}

impl Containerd {
    /// Starts containerd on `<dir>/config.toml` and waits until it answers.
    pub fn start(dir: &Path) -> Containerd {
        let config = dir.join("config.toml");
        let socket = dir.join("c.sock");
        let mut cmd = Command::new("containerd");
        cmd.arg("--config").arg(&config);
        let mut daemon = Daemon::start("containerd", cmd, dir.join("containerd.log"), dir);
        let log = daemon.log.clone();
        wait_for("containerd to answer", &log, || {
            daemon.assert_running();
            output(
                Command::new("ctr")
                    .arg("--address")
                    .arg(&socket)
                    .arg("version"),
            )
            .ok()
        });
        Containerd {
            daemon,
            socket,
            config,
        }
    }

    /// `ctr plugins ls` output.
    pub fn plugins(&self) -> String {
        output(
            Command::new("ctr")
                .arg("--address")
                .arg(&self.socket)
                .args(["plugins", "ls"]),
        )
        .expect("ctr plugins ls")
    }
}

/// containerd's effective configuration for `config` (`containerd config dump`), parsed.
pub fn containerd_config_dump(config: &Path) -> toml_edit::DocumentMut {
    let text = output(
        Command::new("containerd")
            .arg("--config")
            .arg(config)
            .args(["config", "dump"]),
    )
    .expect("containerd config dump");
    text.parse().expect("config dump is TOML")
}
