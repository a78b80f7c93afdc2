//! Containers that still run through the shim.
//!
//! The engine calls the runtime binary again for a running container's `kill`, `delete` and
//! `state`: containerd's runc shim reads the binary from the container's `options.json`
//! (`binary_name`), CRI-O's conmon was started with `-r <runtime path>`. Removing
//! `devinject-runtime` (or the host config it reads on every call) while such containers exist
//! would leave them impossible to stop. Uninstall therefore looks for them:
//! - `options.json` files naming the shim under containerd's task directories (containerd,
//!   docker's containerd, k3s/RKE2);
//! - processes whose command line names the shim (conmon, or the shim itself mid-call), in
//!   `--proc-root`.

use std::path::{Path, PathBuf};

use crate::options::Layout;

/// containerd task directories (host paths): `<dir>/<namespace>/<container id>/options.json`.
pub const TASK_DIRS: [&str; 4] = [
    "/run/containerd/io.containerd.runtime.v2.task",
    "/run/k3s/containerd/io.containerd.runtime.v2.task",
    "/run/docker/containerd/daemon/io.containerd.runtime.v2.task",
    "/var/run/docker/containerd/daemon/io.containerd.runtime.v2.task",
];

/// A container (or process) still using the shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    /// A containerd task: namespace and container id.
    Task {
        /// containerd namespace (`k8s.io`, `moby`).
        namespace: String,
        /// Container id.
        id: String,
    },
    /// A process naming the shim on its command line.
    Process {
        pid: i32,
        /// Its command name.
        comm: String,
    },
}

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            User::Task { namespace, id } => write!(f, "container {namespace}/{id}"),
            User::Process { pid, comm } => write!(f, "process {pid} ({comm})"),
        }
    }
}

/// Who still uses the shim at host path `shim`.
pub fn users(layout: &Layout, shim: &Path) -> Vec<User> {
    let needle = shim.display().to_string();
    let mut found = Vec::new();
    let mut seen_dirs: Vec<PathBuf> = Vec::new();
    for dir in TASK_DIRS {
        let access = layout.host.access(Path::new(dir));
        // /var/run usually links to /run: do not count the same directory twice.
        let canonical = std::fs::canonicalize(&access).unwrap_or(access.clone());
        if seen_dirs.contains(&canonical) {
            continue;
        }
        seen_dirs.push(canonical);
        for ns in read_dir_names(&access) {
            for id in read_dir_names(&access.join(&ns)) {
                let options = access.join(&ns).join(&id).join("options.json");
                if std::fs::read_to_string(options).is_ok_and(|t| t.contains(&needle)) {
                    found.push(User::Task {
                        namespace: ns.clone(),
                        id,
                    });
                }
            }
        }
    }
    for name in read_dir_names(&layout.proc_root) {
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        let dir = layout.proc_root.join(&name);
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        if cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == needle.as_bytes())
        {
            let comm = std::fs::read_to_string(dir.join("comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            found.push(User::Process { pid, comm });
        }
    }
    found
}

fn read_dir_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tasks_and_processes_naming_the_shim() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut layout = Layout::new(dir.path().join("host"));
        layout.proc_root = dir.path().join("proc");
        let shim = Path::new("/opt/devinject/bin/devinject-runtime");
        assert!(users(&layout, shim).is_empty());
        let task = dir
            .path()
            .join("host/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc");
        std::fs::create_dir_all(&task).expect("mkdir");
        std::fs::write(
            task.join("options.json"),
            r#"{"binary_name":"/opt/devinject/bin/devinject-runtime","systemd_cgroup":true}"#,
        )
        .expect("write");
        let other = dir
            .path()
            .join("host/run/containerd/io.containerd.runtime.v2.task/k8s.io/def");
        std::fs::create_dir_all(&other).expect("mkdir");
        std::fs::write(other.join("options.json"), "{}").expect("write");
        let p = dir.path().join("proc/4242");
        std::fs::create_dir_all(&p).expect("mkdir");
        std::fs::write(
            p.join("cmdline"),
            b"/usr/bin/conmon\0-r\0/opt/devinject/bin/devinject-runtime\0-c\0x\0",
        )
        .expect("write");
        std::fs::write(p.join("comm"), "conmon\n").expect("write");
        assert_eq!(
            users(&layout, shim),
            vec![
                User::Task {
                    namespace: "k8s.io".into(),
                    id: "abc".into()
                },
                User::Process {
                    pid: 4242,
                    comm: "conmon".into()
                }
            ]
        );
    }
}
