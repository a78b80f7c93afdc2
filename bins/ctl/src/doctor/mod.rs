//! `devinject-ctl doctor`: one screen that tells a user what is wrong on this host.
//!
//! Each module checks one part and adds [`Finding`]s to the [`DoctorReport`], in screen order:
//! - [`cgroup`]: cgroup v1, v2 or hybrid, where the devices controller is, systemd or not as
//!   init and the cgroup driver each engine and the kubelet are set to;
//! - [`runtimes`]: runc and crun;
//! - [`engines`]: containerd, CRI-O, docker and podman (binary, socket), and whether each is
//!   configured for devinject, read with the engines' own detection
//!   ([`devinject_engine_config::engines::EngineEditor::detect`]) and checked against what it points at;
//! - [`host_config`]: `/etc/devinject/config.toml`, parsed exactly as the hook and shim parse it;
//! - [`profiles`], [`devices`], [`libraries`]: every profile loads, what discovery finds for it,
//!   and whether its driver files resolve;
//! - [`access`], with `--user`: which devices that host user can open with no devinject step at
//!   start (a rootless engine, a user namespace's root mapped to it), and why;
//! - [`cdi_specs`]: our CDI specs in the CDI directories are what `cdi generate` would write
//!   now (no device gone or missing, no stale content);
//! - [`ldconfig`]: the `ldconfig` the hook runs in containers exists and is statically linked;
//! - [`kubelet`]: the device-plugin registration socket and the pod-resources socket;
//! - [`refusals`]: the last container starts refused on this node, from the decision log.
//!
//! Every path is a host path read below [`DoctorRequest::root`], so an installer container (or a
//! test) can examine a host mounted elsewhere. [`text`] renders the report for a terminal; the
//! report itself serialises to JSON. Which findings are errors and which are warnings is
//! documented in docs/runtime-config.md.

pub mod access;
pub mod cdi_specs;
pub mod cgroup;
pub mod devices;
pub mod engines;
mod finding;
pub mod host_config;
pub mod kubelet;
pub mod ldconfig;
pub mod libraries;
pub mod profiles;
pub mod refusals;
pub mod runtimes;
pub mod text;

use std::path::{Path, PathBuf};

pub use finding::{DoctorReport, Finding, Section, Severity};

use devinject_engine_config::request::HostPaths;

/// Default kubelet root directory.
pub const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
/// Where doctor looks for binaries, in order (host paths).
pub const DEFAULT_BIN_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// What to examine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorRequest {
    /// Prefix under which the host's `/` is reachable.
    pub root: PathBuf,
    /// The host configuration file (host path); `None` for the default, which may be absent.
    pub host_config: Option<PathBuf>,
    /// The kubelet's root directory (host path).
    pub kubelet_dir: PathBuf,
    /// Directories searched for runtime and engine binaries (host paths).
    pub bin_dirs: Vec<PathBuf>,
    /// Directories holding CDI specs (host paths), checked for stale specs of ours.
    pub cdi_dirs: Vec<PathBuf>,
    /// How many of the last refused starts to show from the decision log (0: none).
    pub refusals: usize,
    /// A host user (name or uid) to tell which devices it can open ([`access`]).
    pub user: Option<String>,
}

impl Default for DoctorRequest {
    fn default() -> Self {
        DoctorRequest {
            root: PathBuf::from("/"),
            host_config: None,
            kubelet_dir: PathBuf::from(DEFAULT_KUBELET_DIR),
            bin_dirs: DEFAULT_BIN_DIRS.iter().map(PathBuf::from).collect(),
            cdi_dirs: cdi_specs::DEFAULT_CDI_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
            refusals: refusals::DEFAULT_COUNT,
            user: None,
        }
    }
}

impl DoctorRequest {
    /// The engines' view of the host's paths.
    pub fn host_paths(&self) -> HostPaths {
        HostPaths::under_root(self.root.clone())
    }

    /// Where the host path `host` is readable by this process.
    pub fn access(&self, host: &Path) -> PathBuf {
        self.host_paths().access(host)
    }

    /// `path` as the host sees it: without the root prefix.
    pub fn host_view(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.root) {
            Ok(rel) if self.root != Path::new("/") => Path::new("/").join(rel),
            _ => path.to_path_buf(),
        }
    }

    /// The first of [`DoctorRequest::bin_dirs`] holding an executable file `name` (host path).
    pub fn find_binary(&self, name: &str) -> Option<PathBuf> {
        self.bin_dirs
            .iter()
            .map(|d| d.join(name))
            .find(|p| is_executable(&self.access(p)))
    }
}

/// Whether `path` is a regular file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether `path` is a unix socket.
pub fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Examines the host.
pub fn run(req: &DoctorRequest) -> DoctorReport {
    let mut report = DoctorReport::default();
    let cgroups = cgroup::check(req, &mut report);
    runtimes::check(req, &mut report);
    let host = host_config::check(req, &mut report);
    let engines = engines::check(req, &cgroups, &mut report);
    let profiles = profiles::check(req, &host, &mut report);
    let found = devices::check(req, &host, &profiles, &mut report);
    if let Some(spec) = &req.user {
        access::check_named(req, spec, &found, &mut report);
    }
    let needs_ldconfig = libraries::check(req, &host, &found, &mut report);
    cdi_specs::check(req, &host, &profiles, &mut report);
    ldconfig::check(req, &host, needs_ldconfig, &mut report);
    kubelet::check(req, &cgroups, &engines, &mut report);
    refusals::check(req, &host, &mut report);
    report.findings.sort_by_key(|f| f.section);
    // Messages from the devices crate name paths as this process reaches them; show host paths.
    if req.root != Path::new("/") {
        let prefix = req.root.display().to_string();
        let prefix = prefix.trim_end_matches('/');
        for f in &mut report.findings {
            f.message = f.message.replace(prefix, "");
            f.fix = f.fix.as_ref().map(|x| x.replace(prefix, ""));
        }
    }
    report
}
