//! `devinject-installer` (install, the default): options and the run.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use devinject_engine_config::Mode;
use devinject_installer::options::DEFAULT_POD_RESOURCES_SOCKET;
use devinject_installer::{HostConfigSettings, InstallOptions, Policy};

use crate::HostArgs;

/// How devinject is plugged into the engine.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// The runtime shim devinject-runtime (default; podman: hook).
    Shim,
    /// An OCI createRuntime hook.
    Hook,
}

/// Which request policy the hook applies.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PolicyArg {
    /// Kubernetes containers get only what the device plugin granted (checked with the
    /// kubelet's pod-resources API); other containers' requests are honoured.
    Kubernetes,
    /// Every request is honoured (hosts where whoever starts a container is trusted).
    Env,
    /// No policy key: the hook's built-in default.
    HookDefault,
}

/// Install options.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Directory holding bin/ (the binaries to install) and profiles/.
    #[arg(long, value_name = "DIR", default_value = devinject_installer::options::DEFAULT_PAYLOAD)]
    payload: PathBuf,
    /// Directory of profiles to install instead of <payload>/profiles (e.g. a ConfigMap).
    #[arg(long, value_name = "DIR")]
    profiles: Option<PathBuf>,
    /// shim (default) or hook.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Make devinject the engine's default runtime (the old default comes back on uninstall).
    #[arg(long)]
    set_as_default: bool,
    /// Request policy written into the host config.
    #[arg(long, value_enum, default_value = "kubernetes")]
    policy: PolicyArg,
    /// The kubelet's pod-resources socket (host path), for the kubernetes policy.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_POD_RESOURCES_SOCKET)]
    pod_resources_socket: PathBuf,
    /// Root of the host's device nodes, for the hook.
    #[arg(long, value_name = "DIR", default_value = "/dev")]
    dev_root: PathBuf,
    /// Root of sysfs, for the hook.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sys_root: PathBuf,
    /// Root under which driver files are found, for the hook.
    #[arg(long, value_name = "DIR", default_value = "/")]
    driver_root: PathBuf,
    /// The host's static ldconfig (default: the hook's, /sbin/ldconfig).
    #[arg(long, value_name = "PATH")]
    ldconfig: Option<PathBuf>,
    /// The OCI runtime the shim hands over to (default: k3s's/RKE2's runc there, else the
    /// hook's search of /usr/bin, /usr/sbin, /usr/local/bin, /usr/local/sbin).
    #[arg(long, value_name = "PATH")]
    oci_runtime: Option<PathBuf>,
    /// The hook's and shim's log filter.
    #[arg(long, value_name = "FILTER", default_value = "warn")]
    hook_log_level: String,
}

impl InstallArgs {
    /// The library's options.
    pub fn options(&self, host: &HostArgs) -> anyhow::Result<InstallOptions> {
        let mut o = InstallOptions::new(host.host_root.clone(), self.payload.clone());
        o.layout = host.layout()?;
        o.profiles = self.profiles.clone();
        o.engines = host.engines()?;
        o.mode = self.mode.map(|m| match m {
            ModeArg::Shim => Mode::Shim,
            ModeArg::Hook => Mode::Hook,
        });
        o.set_as_default = self.set_as_default;
        o.runtime_name = host.runtime_name.clone();
        o.restart = host.restart_mode();
        o.dry_run = host.dry_run;
        o.fault = host.fault()?;
        o.host_config = HostConfigSettings {
            policy: match self.policy {
                PolicyArg::Kubernetes => Policy::Kubernetes {
                    pod_resources_socket: self.pod_resources_socket.clone(),
                },
                PolicyArg::Env => Policy::Env,
                PolicyArg::HookDefault => Policy::HookDefault,
            },
            dev_root: self.dev_root.clone(),
            sys_root: self.sys_root.clone(),
            driver_root: self.driver_root.clone(),
            ldconfig: self.ldconfig.clone(),
            oci_runtime: self.oci_runtime.clone(),
            log_level: self.hook_log_level.clone(),
        };
        Ok(o)
    }
}
