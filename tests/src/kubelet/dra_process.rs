//! The real `devinject-dra` binary run on a [`TestHost`] against a [`FakeApiServer`]: its
//! sockets, checkpoint and CDI specs under the host's temp directory, its log beside them, no
//! chroot. Found as the other binaries are ([`crate::bins`]), or at `DEVINJECT_DRA` (the
//! benchmarks measure another build that way).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::process::{Child, Command};

use super::fake_apiserver::FakeApiServer;
use super::host::TestHost;
use super::plugin_process::logged_daemon;

/// The node name the driver publishes for.
pub const NODE: &str = "node-a";

/// A running driver; killed on drop, its log printed if the test failed (or always, with
/// `DEVINJECT_TEST_LOGS` set).
pub struct DraProcess {
    child: Child,
    log: PathBuf,
}

/// The driver's own places under `dir`, made there, as its arguments: its plugin and
/// registration sockets (`plugins/`, `plugins_registry/`), its claim specs (`cdi/`), the
/// kubelet's pod-resources socket where a test may serve one (`pod-resources/kubelet.sock`),
/// and its metrics off.
pub fn node_dir_args(dir: &Path) -> std::io::Result<Vec<OsString>> {
    let mut args = Vec::new();
    for (flag, sub) in [
        ("--plugins-dir", "plugins"),
        ("--registry-dir", "plugins_registry"),
        ("--cdi-dir", "cdi"),
    ] {
        std::fs::create_dir_all(dir.join(sub))?;
        args.extend([flag.into(), dir.join(sub).into()]);
    }
    args.extend([
        "--pod-resources-socket".into(),
        dir.join("pod-resources/kubelet.sock").into(),
        "--metrics-address=off".into(),
    ]);
    Ok(args)
}

impl DraProcess {
    /// Starts the driver on `host`'s profiles and roots against `api`, with `extra` arguments.
    pub fn spawn(host: &TestHost, api: &FakeApiServer, extra: &[&str]) -> Self {
        let binary = std::env::var_os("DEVINJECT_DRA")
            .map_or_else(|| crate::bins::bin("devinject-dra"), PathBuf::from);
        let log = host.path("dra.log");
        let log_file = std::fs::File::create(&log).expect("create the driver's log");
        let dirs = node_dir_args(&host.path("")).expect("create the driver's directories");
        let mut command = Command::new(binary);
        command
            .arg(format!("--node-name={NODE}"))
            .arg("--kubeconfig")
            .arg(api.kubeconfig(&host.path("")))
            .arg("--profiles-dir")
            .arg(host.profiles_dir())
            .arg("--dev-root")
            .arg(host.dev_root())
            .arg("--sys-root")
            .arg(host.sys_root())
            .args(dirs)
            .args(extra);
        let child = logged_daemon(&mut command, log_file)
            .spawn()
            .expect("start devinject-dra");
        Self { child, log }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the driver still running")
    }

    /// What the driver logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DraProcess {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("DEVINJECT_TEST_LOGS").is_some() {
            eprintln!("---- devinject-dra log ----\n{}", self.log());
        }
    }
}
