//! What the caller asks for: where things go, which engines, how to restart them.

use std::path::{Path, PathBuf};

use devinject_engine_config::{Engine, Mode};

use crate::fault::Fault;
use crate::host::HostRoot;

/// Default install prefix on the host.
pub const DEFAULT_PREFIX: &str = "/opt/devinject";
/// Default directory of the hook's host configuration and profiles on the host.
pub const DEFAULT_CONFIG_DIR: &str = "/etc/devinject";
/// Where the image keeps what it installs (`bin/`, `profiles/`).
pub const DEFAULT_PAYLOAD: &str = "/usr/share/devinject";
/// The kubelet's pod-resources socket, which the Kubernetes policy asks who was granted what.
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = devinject_hostconfig::DEFAULT_POD_RESOURCES_SOCKET;

/// How the engine is told about a configuration change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartMode {
    /// Through the host's systemd: `systemctl restart <unit>` (containerd, CRI-O, k3s, RKE2)
    /// or `systemctl reload docker`, run in the host's namespaces like
    /// `nsenter -t 1 -m -u -i -n -p systemctl ...`.
    Systemd,
    /// By signal: SIGHUP to dockerd (it re-reads daemon.json); SIGTERM to containerd, whose
    /// unit (`Restart=always`) starts it again, and the installer waits for its socket.
    Signal,
    /// Only report what is needed.
    None,
}

/// Which request policy the hook and shim apply (the host config's `policy` key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Only requests the device plugin granted are honoured, checked with the kubelet's
    /// pod-resources API at the given socket (host path).
    Kubernetes {
        /// The pod-resources socket.
        pod_resources_socket: PathBuf,
    },
    /// Every request is honoured (`policy = "env"`): hosts where whoever starts a container is
    /// trusted already (plain docker, podman).
    Env,
    /// Write no policy key: the hook's built-in default. Hooks with request policies default to
    /// `kubernetes`, which honours the requests of containers that are not Kubernetes
    /// containers; older hooks know no policy key at all.
    HookDefault,
}

/// The settings written into the hook's host configuration (`<config dir>/config.toml`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfigSettings {
    /// Request policy.
    pub policy: Policy,
    /// Root of the host's device nodes.
    pub dev_root: PathBuf,
    /// Root of sysfs.
    pub sys_root: PathBuf,
    /// Root under which driver files are found.
    pub driver_root: PathBuf,
    /// The host's static `ldconfig`; `None` for the hook's default.
    pub ldconfig: Option<PathBuf>,
    /// The real OCI runtime the shim hands over to; `None`: the engine flavour's runc (k3s and
    /// RKE2 ship their own) or the hook's search.
    pub oci_runtime: Option<PathBuf>,
    /// The hook's log filter.
    pub log_level: String,
}

impl Default for HostConfigSettings {
    fn default() -> Self {
        HostConfigSettings {
            policy: Policy::Kubernetes {
                pod_resources_socket: PathBuf::from(DEFAULT_POD_RESOURCES_SOCKET),
            },
            dev_root: PathBuf::from(devinject_devices::roots::DEV_ROOT),
            sys_root: PathBuf::from(devinject_devices::roots::SYS_ROOT),
            driver_root: PathBuf::from(devinject_devices::roots::DRIVER_ROOT),
            ldconfig: None,
            oci_runtime: None,
            log_level: "warn".to_string(),
        }
    }
}

/// Which engines to configure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineChoice {
    /// The one the node runs, found from sockets and config files (see [`crate::detect`]).
    Auto,
    /// These engines, which must be present.
    These(Vec<Engine>),
    /// None: install the files only.
    Skip,
}

/// Paths shared by install and uninstall.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The host's root.
    pub host: HostRoot,
    /// The host's `/proc` as this process sees it (with `hostPID: true`, the container's own
    /// `/proc`). Used to enter pid 1's namespaces and to find running containers.
    pub proc_root: PathBuf,
    /// Install prefix (host path).
    pub prefix: PathBuf,
    /// Directory of the host config and profiles (host path).
    pub config_dir: PathBuf,
    /// Override of the engine's main configuration file (host path); only with one engine.
    pub engine_config: Option<PathBuf>,
    /// Override of the engine's API socket (host path), for signal mode; only with one engine.
    pub engine_socket: Option<PathBuf>,
    /// dockerd's pid file (host path) for signal mode; `None`: `/run/docker.pid`, then
    /// `/var/run/docker.pid`.
    pub docker_pidfile: Option<PathBuf>,
    /// The systemd unit to restart instead of the flavour's usual one.
    pub restart_unit: Option<String>,
}

impl Layout {
    /// The default layout for a host reachable at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout {
            host: HostRoot::new(root),
            proc_root: PathBuf::from("/proc"),
            prefix: PathBuf::from(DEFAULT_PREFIX),
            config_dir: PathBuf::from(DEFAULT_CONFIG_DIR),
            engine_config: None,
            engine_socket: None,
            docker_pidfile: None,
            restart_unit: None,
        }
    }

    /// `<prefix>/bin` (host path).
    pub fn bin_dir(&self) -> PathBuf {
        self.prefix.join("bin")
    }

    /// The shim's host path.
    pub fn shim_path(&self) -> PathBuf {
        self.bin_dir().join("devinject-runtime")
    }

    /// The hook's host path.
    pub fn hook_path(&self) -> PathBuf {
        self.bin_dir().join("devinject-hook")
    }

    /// The host config file (host path).
    pub fn host_config(&self) -> PathBuf {
        self.config_dir.join("config.toml")
    }

    /// The installed profiles directory (host path).
    pub fn profiles_dir(&self) -> PathBuf {
        self.config_dir.join("profiles")
    }

    /// The installer's own state directory (host path): the install record, the journal and
    /// the originals of files it replaced.
    pub fn state_dir(&self) -> PathBuf {
        self.prefix.join(".installer")
    }

    /// Opens a host path.
    pub fn access(&self, host: &Path) -> PathBuf {
        self.host.access(host)
    }
}

/// A request to install.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// Where things are.
    pub layout: Layout,
    /// Local directory holding `bin/` (the binaries to copy) and `profiles/`.
    pub payload: PathBuf,
    /// Local directory of profiles to install instead of `<payload>/profiles` (a ConfigMap).
    pub profiles: Option<PathBuf>,
    /// Engines to configure.
    pub engines: EngineChoice,
    /// Shim or hook; `None`: each engine's default (shim, hook for podman).
    pub mode: Option<Mode>,
    /// Make devinject the engine's default runtime.
    pub set_as_default: bool,
    /// The runtime entry / handler name (the RuntimeClass handler).
    pub runtime_name: String,
    /// How to activate configuration changes.
    pub restart: RestartMode,
    /// What goes into the host config.
    pub host_config: HostConfigSettings,
    /// Report what would change, write nothing.
    pub dry_run: bool,
    /// Testing aid: fail or abort at a given point.
    pub fault: Option<Fault>,
}

impl InstallOptions {
    /// Defaults for a host at `root` with the image's payload at `payload`.
    pub fn new(root: impl Into<PathBuf>, payload: impl Into<PathBuf>) -> Self {
        InstallOptions {
            layout: Layout::new(root),
            payload: payload.into(),
            profiles: None,
            engines: EngineChoice::Auto,
            mode: None,
            set_as_default: false,
            runtime_name: devinject_engine_config::request::DEFAULT_RUNTIME_NAME.to_string(),
            restart: RestartMode::Systemd,
            host_config: HostConfigSettings::default(),
            dry_run: false,
            fault: None,
        }
    }
}

/// A request to uninstall.
#[derive(Debug, Clone)]
pub struct UninstallOptions {
    /// Where things are.
    pub layout: Layout,
    /// Engines to unconfigure when there is no install record; with a record, the recorded ones.
    pub engines: EngineChoice,
    /// The runtime entry name, used only without an install record.
    pub runtime_name: String,
    /// How to activate configuration changes.
    pub restart: RestartMode,
    /// Report what would change, write nothing.
    pub dry_run: bool,
    /// Testing aid: fail or abort at a given point.
    pub fault: Option<Fault>,
    /// The DRA driver's directory under the kubelet's plugins directory (host path): its
    /// checkpoint and socket go, then the directory ([`DRA_PLUGIN_DIR`] unless told).
    pub dra_plugin_dir: PathBuf,
}

/// Where `devinject-dra` keeps its checkpoint and socket as `deploy/devinject-dra.yaml` runs
/// it: `<--plugins-dir>/<--driver>`.
pub const DRA_PLUGIN_DIR: &str = "/var/lib/kubelet/plugins/devinject.io";

impl UninstallOptions {
    /// Defaults for a host at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        UninstallOptions {
            layout: Layout::new(root),
            engines: EngineChoice::Auto,
            runtime_name: devinject_engine_config::request::DEFAULT_RUNTIME_NAME.to_string(),
            restart: RestartMode::Systemd,
            dry_run: false,
            fault: None,
            dra_plugin_dir: PathBuf::from(DRA_PLUGIN_DIR),
        }
    }
}
