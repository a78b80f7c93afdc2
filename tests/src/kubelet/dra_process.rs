//! The real `devinject-dra` binary run on a [`TestHost`] against a [`FakeApiServer`]: its
//! sockets, checkpoint and CDI specs under the host's temp directory, its log beside them, no
//! chroot. Found as the other binaries are ([`crate::bins`]), or at `DEVINJECT_DRA` (the
//! benchmarks measure another build that way).

use std::path::PathBuf;

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

impl DraProcess {
    /// Starts the driver on `host`'s profiles and roots against `api`, with `extra` arguments.
    pub fn spawn(host: &TestHost, api: &FakeApiServer, extra: &[&str]) -> Self {
        let binary = std::env::var_os("DEVINJECT_DRA")
            .map_or_else(|| crate::bins::bin("devinject-dra"), PathBuf::from);
        let log = host.path("dra.log");
        let log_file = std::fs::File::create(&log).expect("create the driver's log");
        for dir in ["plugins", "plugins_registry", "cdi"] {
            std::fs::create_dir_all(host.path(dir)).expect("create a driver directory");
        }
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
            .arg("--plugins-dir")
            .arg(host.path("plugins"))
            .arg("--registry-dir")
            .arg(host.path("plugins_registry"))
            .arg("--cdi-dir")
            .arg(host.path("cdi"))
            .arg("--pod-resources-socket")
            .arg(host.path("pod-resources/kubelet.sock"))
            .arg("--metrics-address=off")
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
