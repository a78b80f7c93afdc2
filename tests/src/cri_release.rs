//! A node on a newer containerd release ([`crate::runtimes`]) driven through CRI as the kubelet
//! would, with whichever injection paths a test or benchmark wants on at once: CDI (the specs
//! `devinject-ctl cdi generate` writes), NRI (the socket `devinject-nri` connects to), and the
//! `devinject` runtime entry (the shim). Pods run on plain runc unless they name the
//! `devinject` handler. Used by tests/tests/suite/containerd_cdi.rs, tests/tests/suite/containerd_nri.rs and
//! `devinject-cri-bench`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use k8s_cri::v1::PodSandboxConfig;

use crate::bins::bin;
use crate::cri::{self, CgroupParent, ContainerSpec, Cri};
use crate::cri_node::{
    cdi_generate, configure_shim_env, containerd_cdi_config, containerd_config,
    containerd_nri_settings, import_images, nri_socket, CONTAINERD_NRI_OFF, SHIM_CONFIG_ENV,
};
use crate::daemons::{short_tempdir, Containerd, Daemon};
use crate::nri_plugin;
use crate::runtimes::Release;
use crate::sim::{demo_host, SimHost, ACCELS};
use crate::skip::{require, require_binary, require_root};

/// The fetched containerd `series` (`1.7`, `2`) when it and everything a [`ReleaseNode`] needs
/// are here (root, runc, busybox, gcc); `None` after saying what is missing (a failure under
/// CI).
pub fn ready(series: &str) -> Option<Release> {
    let release = crate::runtimes::containerd(series);
    (require_root()
        && require_binary("runc")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
        && require(
            release.is_some(),
            &format!("needs containerd {series} (scripts/runtimes-fetch.sh)"),
        ))
    .then(|| release.expect("checked"))
}

/// Which paths are on, and how the node's devices and host configuration look.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    /// CRI's CDI support, reading the specs written for the node's devices.
    pub cdi: bool,
    /// NRI, with its socket in the node's directory.
    pub nri: bool,
    /// The `devinject` runtime entry (the shim), written by `devinject-ctl`.
    pub shim: bool,
    /// The accelerators are `0660 root:<group>` (render-node-like) rather than `0666`.
    pub accel_group: Option<u32>,
    /// Added to the host configuration (e.g. `policy = "env"`).
    pub host_config: String,
    /// Another simulated host than the demo one (its roots, profiles and configuration file).
    pub host: Option<SimHost>,
    /// Adds to the test image's rootfs before it is archived (e.g. glibc and programs).
    pub image: Option<fn(&Path) -> Result<()>>,
}

/// The node. Fields drop in order: the CRI client (its pods), the plugin, containerd, the
/// pods' cgroups, then the files.
pub struct ReleaseNode {
    /// The CRI client.
    pub cri: Cri,
    nri_plugin: Option<Daemon>,
    pub containerd: Containerd,
    cgroups: CgroupParent,
    /// The simulated devices and the host configuration.
    pub host: SimHost,
    release: Release,
    config: PathBuf,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for ReleaseNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseNode")
            .field("root", &self.root)
            .finish()
    }
}

impl ReleaseNode {
    /// Starts containerd `release` with `paths` on and the demo profile's simulated devices.
    pub fn start(release: &Release, paths: &Paths) -> Result<Self> {
        let dir = short_tempdir("rel")?;
        let root = dir.path().to_owned();
        let host = match &paths.host {
            Some(h) => h.clone(),
            None => demo_host(&root.join("sim"), &["demo"])?,
        };
        if let Some(gid) = paths.accel_group {
            for (name, _, _) in ACCELS {
                let node = host.dev_root.join("demo").join(name);
                std::os::unix::fs::chown(&node, Some(0), Some(gid))?;
                std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660))?;
            }
        }
        let runc = crate::runc::runc_binary().context("runc")?;
        host.write_config(&format!(
            "runtime = {runc:?}\nhook = {:?}\n{}",
            bin("devinject-hook"),
            paths.host_config
        ))?;
        let ctd = root.join("ctd");
        std::fs::create_dir_all(&ctd)?;
        let config = ctd.join("config.toml");
        let mut text = if paths.cdi {
            let specs = root.join("cdi");
            eprintln!("{}", cdi_generate(&host, &specs)?);
            containerd_cdi_config(&ctd, &specs)
        } else {
            containerd_config(&ctd)
        };
        text.push_str(&if paths.nri {
            containerd_nri_settings(&ctd)
        } else {
            CONTAINERD_NRI_OFF.to_owned()
        });
        std::fs::write(&config, text)?;
        // The shim's entry names the built binary itself, its configuration passed the way an
        // engine without runtime arguments passes it: containerd's environment.
        if paths.shim {
            configure_shim_env(&config);
        }
        let containerd = Containerd::start_release_env(
            &ctd,
            &config,
            &release.bin,
            &[(SHIM_CONFIG_ENV, host.config.as_path())],
        )?;
        let mut cri = Cri::connect(&containerd.socket())?;
        cri.wait_ready().with_context(|| containerd.log_tail())?;
        import_images(&root, &containerd, &mut cri, paths.image);
        let name = root
            .file_name()
            .context("temp dir name")?
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            cri,
            nri_plugin: None,
            containerd,
            cgroups: CgroupParent::new(&name),
            host,
            release: release.clone(),
            config,
            root,
            _dir: dir,
        })
    }

    /// Starts `devinject-nri` on the node's NRI socket and waits until it has registered.
    pub fn start_nri_plugin(&mut self) -> Result<()> {
        self.nri_plugin = Some(nri_plugin::start(
            &nri_socket(&self.root.join("ctd")),
            &self.host.config,
            &self.root.join("nri.log"),
        )?);
        self.wait_nri_registered(1)
    }

    /// Stops `devinject-nri`: containerd forgets it, and adjusts nothing any more.
    pub fn stop_nri_plugin(&mut self) {
        if let Some(mut p) = self.nri_plugin.take() {
            p.stop();
        }
    }

    /// Waits until `devinject-nri` has registered `times` times in all.
    pub fn wait_nri_registered(&mut self, times: usize) -> Result<()> {
        nri_plugin::wait_registered(&self.root.join("nri.log"), times)
            .with_context(|| format!("--- containerd\n{}", self.containerd.log_tail()))
    }

    /// `devinject-nri`'s `/metrics`, scraped over TCP.
    pub fn nri_metrics(&self) -> Result<String> {
        nri_plugin::metrics(&self.root.join("nri.log"))
    }

    /// The last lines of `devinject-nri`'s log.
    pub fn nri_log(&self) -> String {
        nri_plugin::log_tail(&self.root.join("nri.log"))
    }

    /// Stops containerd and starts it again on the same configuration.
    pub fn restart_containerd(&mut self) -> Result<()> {
        self.containerd.daemon().stop();
        let dir = self.containerd.dir().to_owned();
        self.containerd = Containerd::start_release(&dir, &self.config, &self.release.bin)?;
        self.cri = Cri::connect(&self.containerd.socket())?;
        self.cri.wait_ready()?;
        Ok(())
    }

    /// Runs a host-network pod `name` with runtime `handler` (`""`: plain runc).
    pub fn pod(&mut self, name: &str, handler: &str) -> Result<(String, PodSandboxConfig)> {
        cri::run_pod(&mut self.cri, &self.root, &self.cgroups, name, handler)
            .with_context(|| self.containerd.log_tail())
    }

    /// Creates `spec` in `pod`, starts it and waits for its end ([`cri::run_to_exit`]).
    pub fn run(
        &mut self,
        pod: &str,
        pod_config: &PodSandboxConfig,
        spec: &ContainerSpec,
    ) -> Result<std::result::Result<(i32, String), String>> {
        cri::run_to_exit(&mut self.cri, pod, pod_config, spec)
            .with_context(|| self.containerd.log_tail())
    }
}
