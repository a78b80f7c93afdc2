//! What the caller asks for: which engine, which mode, which paths.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Default install path of the runtime shim (`devinject-runtime`).
pub const DEFAULT_SHIM_PATH: &str = "/usr/local/bin/devinject-runtime";
/// Default install path of the OCI hook (`devinject-hook`).
pub use devinject_devices::DEFAULT_HOOK_PATH;
/// Default name of the runtime entry / handler / RuntimeClass handler.
pub const DEFAULT_RUNTIME_NAME: &str = "devinject";
/// Annotation pattern containerd must pass through to the OCI spec, so that the hook and shim
/// see what the device plugin wrote (containerd drops other annotations).
pub const ANNOTATION_PATTERN: &str = "devinject.io/*";
/// Default hooks.d directory for CRI-O and podman hook files: the administrator's override
/// directory of oci-hooks(5), not the package-owned `/usr/share/containers/oci/hooks.d`.
pub const DEFAULT_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";

/// A container engine whose configuration devinject-ctl edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// containerd 1.6/1.7 (config version 2) and 2.x (config version 3), through its CRI plugin.
    Containerd,
    /// CRI-O.
    Crio,
    /// dockerd.
    Docker,
    /// podman (root).
    Podman,
}

impl Engine {
    /// All engines, for help texts and loops.
    pub const ALL: [Engine; 4] = [
        Engine::Containerd,
        Engine::Crio,
        Engine::Docker,
        Engine::Podman,
    ];

    /// The engine's name as used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Containerd => "containerd",
            Engine::Crio => "crio",
            Engine::Docker => "docker",
            Engine::Podman => "podman",
        }
    }

    /// The engine's main configuration file, as a host path.
    pub fn default_config(self) -> &'static str {
        match self {
            Engine::Containerd => "/etc/containerd/config.toml",
            Engine::Crio => "/etc/crio/crio.conf",
            Engine::Docker => "/etc/docker/daemon.json",
            Engine::Podman => "/etc/containers/containers.conf",
        }
    }

    /// The mode used when none is asked for: the runtime shim, which puts devices into the spec
    /// where later cgroup updates cannot remove them, except for podman, whose natural extension
    /// point is hooks.d.
    pub fn default_mode(self) -> Mode {
        match self {
            Engine::Podman => Mode::Hook,
            _ => Mode::Shim,
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How devinject is plugged into the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A runtime entry whose binary is `devinject-runtime`, which edits `config.json` on
    /// `create` and then runs runc.
    Shim,
    /// An OCI `createRuntime` hook running `devinject-hook`.
    Hook,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Shim => "shim",
            Mode::Hook => "hook",
        })
    }
}

/// Where the host's files are.
///
/// Paths written *into* configuration files are host paths (what the daemon sees); files are
/// read and written at `root` joined with the host path, so an installer running in a container
/// with the host's `/` mounted at `/host` passes `root = "/host"`, and tests pass a temp dir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// Prefix under which the host's filesystem is reachable; `/` on the host itself.
    pub root: PathBuf,
    /// The engine's main configuration file (host path); `None` for the engine's default.
    pub config: Option<PathBuf>,
    /// The hooks.d directory for CRI-O/podman hook files (host path); `None` for
    /// [`DEFAULT_HOOKS_DIR`].
    pub hooks_dir: Option<PathBuf>,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            root: PathBuf::from("/"),
            config: None,
            hooks_dir: None,
        }
    }
}

impl HostPaths {
    /// The host's `/` at `root`, with the engine's default configuration file and hooks.d
    /// directory.
    pub fn under_root(root: impl Into<PathBuf>) -> Self {
        HostPaths {
            root: root.into(),
            ..HostPaths::default()
        }
    }

    /// Where the host path `host` can be read and written by this process: every symlink on
    /// the way, absolute ones included, followed inside the root as the host follows it
    /// ([`devinject_hostfs::host_root`]). A configuration file kept elsewhere and linked into place
    /// (`/etc/docker/daemon.json -> /srv/node/daemon.json`) is read and replaced where it lives,
    /// and stays linked; a linked directory (`/etc/docker -> /srv/docker`) leads inside the root.
    pub fn access(&self, host: &Path) -> PathBuf {
        devinject_hostfs::host_root::resolve_in_root(&self.root, host)
    }

    /// The host path of the file behind host path `host`: every link on the way, the final one
    /// included, followed inside the root ([`HostPaths::access`]). Used only for the engine's
    /// own configuration file, which an administrator may link into place; our own names are
    /// never resolved this way.
    pub fn behind_links(&self, host: &Path) -> PathBuf {
        self.host_of(&self.access(host))
    }

    /// Reads the file at host path `host` (its final name not followed; see
    /// [`devinject_hostfs::host_dir`]); `None` when there is none.
    pub fn read(
        &self,
        host: &Path,
        whose: devinject_hostfs::host_dir::Name,
    ) -> crate::Result<Option<String>> {
        Ok(devinject_hostfs::host_dir::read(&self.root, host, whose)?)
    }

    /// The host path of `access`, a path below the root (the inverse of [`HostPaths::access`]
    /// for a path with no link on the way).
    pub fn host_of(&self, access: &Path) -> PathBuf {
        devinject_hostfs::host_root::host_path_of(&self.root, access)
    }

    /// The engine's main configuration file (host path).
    pub fn config_for(&self, engine: Engine) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(|| PathBuf::from(engine.default_config()))
    }

    /// The hooks.d directory (host path).
    pub fn hooks_dir(&self) -> PathBuf {
        self.hooks_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_HOOKS_DIR))
    }
}

/// A request to configure one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigureRequest {
    /// The engine to configure.
    pub engine: Engine,
    /// Shim or hook; `None` for [`Engine::default_mode`].
    pub mode: Option<Mode>,
    /// Make devinject the engine's default runtime (the old default is restored by
    /// [`crate::unconfigure`]).
    pub set_as_default: bool,
    /// Compute and report the changes (with diffs) but write nothing.
    pub dry_run: bool,
    /// Host paths.
    pub paths: HostPaths,
    /// Host path of `devinject-runtime`.
    pub shim_path: PathBuf,
    /// Host path of `devinject-hook`.
    pub hook_path: PathBuf,
    /// Hook mode: the host configuration file the hook is run with (`--config`), when not
    /// `/etc/devinject/config.toml`.
    pub hook_config: Option<PathBuf>,
    /// Name of the runtime entry (containerd runtime, CRI-O handler, docker runtime).
    pub runtime_name: String,
    /// containerd hook mode: an OCI spec (host path) to start the base spec from. `None`: the
    /// copied runtime's own `base_runtime_spec`, else the output of `ctr oci spec`.
    pub base_spec: Option<PathBuf>,
    /// containerd hook mode: the `ctr` binary used to print containerd's default spec.
    pub ctr_path: PathBuf,
}

impl ConfigureRequest {
    /// A request with the default paths, mode and names for `engine`.
    pub fn new(engine: Engine) -> Self {
        ConfigureRequest {
            engine,
            mode: None,
            set_as_default: false,
            dry_run: false,
            paths: HostPaths::default(),
            shim_path: PathBuf::from(DEFAULT_SHIM_PATH),
            hook_path: PathBuf::from(DEFAULT_HOOK_PATH),
            hook_config: None,
            runtime_name: DEFAULT_RUNTIME_NAME.to_string(),
            base_spec: None,
            ctr_path: PathBuf::from("ctr"),
        }
    }

    /// The effective mode.
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or_else(|| self.engine.default_mode())
    }
}

/// A request to undo [`crate::configure`] for one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct UnconfigureRequest {
    pub engine: Engine,
    /// Report (with diffs) but write nothing.
    pub dry_run: bool,
    /// Host paths; must be the same as when configuring.
    pub paths: HostPaths,
    /// Name of the runtime entry, used only when no state file exists.
    pub runtime_name: String,
    /// Host path of `devinject-hook`, used only when no state file exists (to recognise our
    /// hooks.d file).
    pub hook_path: PathBuf,
}

impl UnconfigureRequest {
    /// A request with the default paths for `engine`.
    pub fn new(engine: Engine) -> Self {
        UnconfigureRequest {
            engine,
            dry_run: false,
            paths: HostPaths::default(),
            runtime_name: DEFAULT_RUNTIME_NAME.to_string(),
            hook_path: PathBuf::from(DEFAULT_HOOK_PATH),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_joins_root_and_host_path() {
        let p = HostPaths::under_root("/host");
        assert_eq!(
            p.access(Path::new("/etc/containerd/config.toml")),
            PathBuf::from("/host/etc/containerd/config.toml")
        );
        assert_eq!(
            HostPaths::default().access(Path::new("/etc/x")),
            PathBuf::from("/etc/x")
        );
    }
}
