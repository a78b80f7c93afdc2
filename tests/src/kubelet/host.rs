//! A simulated host in a temp directory: dev root, sys root, device-plugins dir, profiles.

use std::path::{Path, PathBuf};
use std::time::Duration;

use inotify::{Inotify, WatchMask};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use tokio_stream::StreamExt;

use super::within;

/// A temp directory laid out like the parts of a host the plugin looks at.
pub struct TestHost {
    tmp: tempfile::TempDir,
}

impl Default for TestHost {
    fn default() -> Self {
        Self::new()
    }
}

impl TestHost {
    /// Creates the directories.
    pub fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("di")
            .tempdir()
            .expect("create temp dir");
        for dir in ["dev", "sys", "kubelet", "profiles"] {
            std::fs::create_dir(tmp.path().join(dir)).expect("create host dir");
        }
        Self { tmp }
    }

    pub fn dev_root(&self) -> PathBuf {
        self.tmp.path().join("dev")
    }

    pub fn sys_root(&self) -> PathBuf {
        self.tmp.path().join("sys")
    }

    /// The device-plugins directory.
    pub fn kubelet_dir(&self) -> PathBuf {
        self.tmp.path().join("kubelet")
    }

    /// The profiles directory.
    pub fn profiles_dir(&self) -> PathBuf {
        self.tmp.path().join("profiles")
    }

    /// A scratch path for logs and the like.
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Makes a character device node `rel` (under the dev root) with the given numbers.
    pub fn mknod(&self, rel: &str, major: u64, minor: u64) {
        let path = self.dev_root().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create node dir");
        }
        mknod(
            &path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major, minor),
        )
        .unwrap_or_else(|e| panic!("mknod {}: {e}", path.display()));
    }

    /// Removes `rel` under the dev root.
    pub fn remove_node(&self, rel: &str) {
        let path = self.dev_root().join(rel);
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("rm {}: {e}", path.display()));
    }

    /// Writes a sysfs attribute `rel` under the sys root.
    pub fn write_sys(&self, rel: &str, content: &str) {
        let path = self.sys_root().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create sysfs dir");
        }
        std::fs::write(&path, content).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Writes `profiles/<name>.toml`.
    pub fn write_profile(&self, name: &str, text: &str) {
        let path = self.profiles_dir().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// File names of the plugin sockets in the device-plugins directory.
    pub fn plugin_sockets(&self) -> Vec<String> {
        sockets(&self.kubelet_dir())
            .into_iter()
            .filter(|n| n != "kubelet.sock")
            .collect()
    }
}

impl TestHost {
    /// Waits (on inotify, not a timer) until a plugin socket other than those in `known`
    /// exists, and returns its name.
    pub async fn wait_plugin_socket(&self, known: &[String], limit: Duration) -> String {
        let inotify = Inotify::init().expect("inotify");
        inotify
            .watches()
            .add(self.kubelet_dir(), WatchMask::CREATE | WatchMask::MOVED_TO)
            .expect("watch the device-plugins dir");
        let mut events = inotify
            .into_event_stream([0u8; 1024])
            .expect("inotify stream");
        within(limit, "a new plugin socket", async {
            loop {
                // Checked after the watch exists, so no creation is missed.
                if let Some(name) = self
                    .plugin_sockets()
                    .into_iter()
                    .find(|n| !known.contains(n))
                {
                    return name;
                }
                events.next().await;
            }
        })
        .await
    }
}

/// File names ending in `.sock` in `dir`, sorted.
pub fn sockets(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".sock"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A demo-like profile: devices `<name>/accelN` (ids are node names, so removing one node does
/// not renumber the others), a control node `<name>/ctl`, NUMA nodes and health from sysfs
/// under `class/<name>/accelN/`. `extra` lines are added at the top level.
pub fn profile(name: &str, extra: &str) -> String {
    format!(
        r#"name = "{name}"
resource = "devinject.io/{name}"
{extra}
[discovery]
nodes = ["{name}/accel[0-9]*"]
id = "name"
numa_sysfs = "class/{name}/{{name}}/device/numa_node"
health_sysfs = "class/{name}/{{name}}/device/health"
[[control_nodes]]
path = "{name}/ctl"
"#
    )
}

impl TestHost {
    /// Creates profile `name` (see [`profile`]) with `count` healthy devices, device `i` on
    /// NUMA node `numa(i)`, all as char 1:3 (`/dev/null`'s numbers, harmless).
    pub fn add_kind(&self, name: &str, extra: &str, count: usize, numa: impl Fn(usize) -> i64) {
        self.write_profile(name, &profile(name, extra));
        self.mknod(&format!("{name}/ctl"), 1, 3);
        for i in 0..count {
            self.add_device(name, i, numa(i));
        }
    }

    /// Adds device `i` of kind `name` with its sysfs attributes.
    pub fn add_device(&self, name: &str, i: usize, numa: i64) {
        self.write_sys(
            &format!("class/{name}/accel{i}/device/numa_node"),
            &format!("{numa}\n"),
        );
        self.write_sys(&format!("class/{name}/accel{i}/device/health"), "ok\n");
        self.mknod(&format!("{name}/accel{i}"), 1, 3);
    }
}
