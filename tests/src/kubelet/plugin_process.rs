//! The real `devinject-device-plugin` binary, built by cargo and run against a [`TestHost`].
//!
//! The binary lives in another package, so `CARGO_BIN_EXE_*` does not reach it. It is built
//! once per test process with `cargo build` (same profile as the tests, same target directory,
//! cheap when up to date), and located through cargo's JSON artifact messages, so it works with
//! any `CARGO_TARGET_DIR`. `DEVINJECT_DEVICE_PLUGIN` names a prebuilt binary instead, and
//! `DEVINJECT_BIN_DIR` a directory of prebuilt binaries (as for [`crate::bins`]).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::host::TestHost;
use super::within;

/// The plugin binary, built on first use.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(path) = std::env::var_os("DEVINJECT_DEVICE_PLUGIN") {
            return PathBuf::from(path);
        }
        if let Some(dir) = std::env::var_os("DEVINJECT_BIN_DIR") {
            return PathBuf::from(dir).join("devinject-device-plugin");
        }
        build()
    })
}

fn build() -> PathBuf {
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent");
    let mut command = std::process::Command::new(cargo);
    command
        .current_dir(workspace)
        .args([
            "build",
            "--quiet",
            "--package",
            "devinject-device-plugin",
            "--bin",
            "devinject-device-plugin",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let output = command.output().expect("run cargo build");
    assert!(
        output.status.success(),
        "cargo build of devinject-device-plugin failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact" && m["target"]["name"] == "devinject-device-plugin"
        })
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported no devinject-device-plugin executable")
}

/// A running plugin; killed on drop, its log printed if the test failed (or always, with
/// `DEVINJECT_TEST_LOGS` set).
pub struct PluginProcess {
    child: Child,
    log: PathBuf,
    /// When it was started.
    pub started: Instant,
}

impl PluginProcess {
    /// Starts the plugin against `host`, serving the profiles in `profiles` (every profile with
    /// devices when empty), with `extra` arguments.
    pub fn spawn(host: &TestHost, profiles: &[&str], extra: &[&str]) -> Self {
        let mut args: Vec<&str> = Vec::new();
        for profile in profiles {
            args.extend(["--profile", profile]);
        }
        args.extend(extra);
        Self::spawn_with(
            &host.kubelet_dir(),
            &host.profiles_dir(),
            &host.dev_root(),
            &host.sys_root(),
            &args,
        )
    }

    /// Starts the plugin with explicit directories and `extra` arguments; its log goes next to
    /// the device-plugins directory.
    pub fn spawn_with(
        kubelet_dir: &Path,
        profiles_dir: &Path,
        dev_root: &Path,
        sys_root: &Path,
        extra: &[&str],
    ) -> Self {
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let log = kubelet_dir.with_file_name(format!(
            "plugin-{}-{}.log",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let log_file = std::fs::File::create(&log).expect("create plugin log");
        let mut command = Command::new(binary());
        command
            .arg("--kubelet-dir")
            .arg(kubelet_dir)
            .arg("--profiles-dir")
            .arg(profiles_dir)
            .arg("--dev-root")
            .arg(dev_root)
            .arg("--sys-root")
            .arg(sys_root)
            .args(extra);
        logged_daemon(&mut command, log_file);
        let started = Instant::now();
        let child = command.spawn().expect("start devinject-device-plugin");
        Self {
            child,
            log,
            started,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("plugin still running")
    }

    /// Sends a signal.
    pub fn signal(&self, signal: Signal) {
        let pid = i32::try_from(self.pid()).expect("pid fits i32");
        kill(Pid::from_raw(pid), signal).expect("send signal to plugin");
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self, limit: Duration) -> ExitStatus {
        within(limit, "the plugin to exit", self.child.wait())
            .await
            .expect("wait for plugin")
    }

    /// What the plugin logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Resident memory in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/<pid>/status")
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("DEVINJECT_TEST_LOGS").is_some() {
            eprintln!("---- devinject-device-plugin log ----\n{}", self.log());
        }
    }
}

/// `command` set up as a daemon a test runs: its stderr into `log` at the level `RUST_LOG`
/// names (debug unless set), no stdin or stdout, killed when its handle is dropped.
pub(crate) fn logged_daemon(command: &mut Command, log: std::fs::File) -> &mut Command {
    command
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "debug".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
}
