//! A node on CRI-O instead of containerd ([`super::super::Shape::crio`]): CRI-O 1.36 in the
//! node's mount namespace, reading `/etc/crio/crio.conf` and the `crio.conf.d` drop-ins there
//! (the node's own `/etc/crio`, where the installer writes its drop-in), everything else it
//! keeps (vfs storage, run and state files, socket, the runc state, the CNI loopback network,
//! and where CNI's plugins are built a pod network for pods off the host network) in the
//! node's `crio` directory. Its images are loaded by a podman on the same storage.
//! Short image names (`devinject:0.1.0`, the examples' `busybox:1.36`) resolve as on the CRI-O
//! nodes users run: through a `registries.conf` whose one unqualified-search registry is
//! Docker Hub's (where the loaded images' names are), given to CRI-O by `--registries-conf`
//! (and an empty `--registries-conf-dir`: the machine's files are not read).
//!
//! Set up as users set up CRI-O: [`Setup::DaemonSet`] (nothing of devinject's; the manifests'
//! CRI-O overlay installs it), [`Setup::DaemonSetNri`] (NRI on its default socket, as CRI-O
//! 1.36 has it by default; the NRI manifests install the plugin) or [`Setup::Cdi`] (CRI-O's
//! CDI, on by default, reading the specs `devinject-ctl cdi generate` wrote).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::{set_allocate_mode, Node};
use crate::bins;
use crate::cluster::{pod_network, Setup, NRI_SOCKET};
use crate::cri::Cri;
use crate::cri_node::cdi_generate;
use crate::crio::{
    crio_config, crio_nri_settings, crun_binary, load_image, load_test_images, node_runtime,
    registries_args, registries_conf, write_root_files,
};
use crate::daemons::{run_ok, Daemon};
use crate::podman::Podman;
use crate::skip::which;

/// CRI-O's configuration file and drop-in directory, as the node's namespace sees them.
const CONFIG: &str = "/etc/crio/crio.conf";
const DROP_INS: &str = "/etc/crio/crio.conf.d";

impl Node {
    /// Everything CRI-O keeps but its configuration.
    fn crio_dir(&self) -> PathBuf {
        self.dir.join("crio")
    }

    /// The node's `/etc/crio`: `crio.conf` and the `crio.conf.d` drop-ins.
    pub fn crio_etc(&self) -> PathBuf {
        self.dir.join("node/etc-crio")
    }

    /// The node's `/etc/containers/oci/hooks.d` ([`super::OCI_HOOKS_DIR`]), where the installer
    /// writes the hook file in hook mode.
    pub fn oci_hooks_etc(&self) -> PathBuf {
        self.dir.join("node/etc-oci-hooks")
    }

    /// CRI-O's socket.
    pub(super) fn crio_socket(&self) -> PathBuf {
        self.crio_dir().join("crio.sock")
    }

    fn crio_hooks_dir(&self) -> PathBuf {
        self.crio_dir().join("hooks.d")
    }

    /// CRI-O's configuration as `setup` wants it, and the test images in its storage.
    pub(super) fn write_crio_config(&mut self, setup: &Setup, bin: &Path) -> Result<()> {
        let root = self.crio_dir();
        let hooks = self.crio_hooks_dir();
        let specs = self.cdi_spec_dir();
        for dir in [&root, &hooks, &specs, &self.crio_etc().join("crio.conf.d")] {
            std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        }
        match setup {
            // DRA: the spec directory starts empty; devinject-dra writes a spec per claim.
            Setup::DaemonSet | Setup::DaemonSetNri { .. } | Setup::Dra { .. } => {}
            Setup::Cdi { allocate_mode, .. } => {
                set_allocate_mode(&self.host.profiles_dir, allocate_mode)?;
                cdi_generate(&self.host, &specs)?;
            }
            other => {
                bail!("a CRI-O node of the cluster tier runs the DaemonSets, CDI or DRA, not {other:?}")
            }
        }
        write_root_files(&root, &registries_conf(&["docker.io"], None))?;
        // With CNI's plugins built, pods may leave the host network ([`pod_network`]): its
        // configuration sorts before the loopback one, so CRI-O takes it as the default.
        let cni_bin = crate::cluster::cni_plugins();
        if cni_bin.is_some() {
            std::fs::write(
                root.join("cni/05-pods.conflist"),
                pod_network(&root.join("cni-ipam")),
            )?;
        }
        // CRI-O's default runtime: runc, or crun ([`node_runtime`]), through
        // `devinject-bounded-runc` (which see), as a script because CRI-O gives a runtime no
        // arguments of its own.
        let runc = root.join("bounded-runc");
        std::fs::write(
            &runc,
            format!(
                "#!/bin/sh\nexec '{}' --runtime '{}' \"$@\"\n",
                bins::bin("devinject-bounded-runc").display(),
                node_runtime()?.display()
            ),
        )?;
        std::fs::set_permissions(&runc, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        let conmon = which("conmon").context("conmon")?;
        let mut text = crio_config(
            &root,
            bin,
            &runc,
            &conmon,
            &hooks,
            &specs,
            cni_bin.as_deref(),
        );
        text += &match setup {
            Setup::DaemonSetNri { .. } => {
                for d in ["nri-plugins", "nri-conf"] {
                    std::fs::create_dir_all(root.join(d))?;
                }
                crio_nri_settings(&root, Path::new(NRI_SOCKET))
            }
            _ => "\n[crio.nri]\nenable_nri = false\n".to_owned(),
        };
        let config = self.crio_etc().join("crio.conf");
        std::fs::write(&config, text).with_context(|| format!("write {}", config.display()))?;
        load_test_images(&root, &hooks)
    }

    /// On a node whose CRI-O runs crun, on a hybrid host: a process holding a cgroup v1
    /// hierarchy of each controller the unified hierarchy offers, so that it offers none while
    /// the node runs. crun refuses a hybrid host whose unified hierarchy has controllers ("drop
    /// all controllers from cgroupv2"), and this machine's hugetlb has no v1 hierarchy, which
    /// hosts of the v1 layout give it. A controller belongs to one hierarchy at a time: it leaves
    /// the unified one while mounted as v1 and returns when the holder's private mount
    /// namespace, where alone the mounts are, ends. Nothing is mounted where the host or the
    /// node would see it, so no cgroup is ever made there. A controller the unified root
    /// enables for its children (dockerd does, for its `docker` cgroup) cannot move (`EBUSY`):
    /// it is disabled there first, and enabled again when [`V1Hierarchies`] is dropped.
    pub(super) fn hold_unified_controllers(&self) -> Result<Option<V1Hierarchies>> {
        let controllers = match crun_binary() {
            Some(_) => std::fs::read_to_string(unified("cgroup.controllers")).unwrap_or_default(),
            None => return Ok(None),
        };
        let controllers: Vec<String> = controllers.split_whitespace().map(String::from).collect();
        if controllers.is_empty() {
            return Ok(None);
        }
        let subtree = unified("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
        let mut held = V1Hierarchies {
            holder: None,
            controllers: controllers.clone(),
            reenable: Vec::new(),
        };
        for c in controllers
            .iter()
            .filter(|c| enabled.split_whitespace().any(|e| e == c.as_str()))
        {
            std::fs::write(&subtree, format!("-{c}"))
                .with_context(|| format!("disable {c} in {}", subtree.display()))?;
            held.reenable.push(c.clone());
        }
        // A controller just disabled in the unified root, or just let go by the hierarchy of
        // an earlier node, is released asynchronously (its cgroups go offline after an RCU
        // grace period): until then it is busy. Each mount is tried for up to 10 s.
        let dir = self.dir.join("v1-hierarchies");
        let mut script = String::from("set -e; ");
        for c in &controllers {
            std::fs::create_dir_all(dir.join(c))?;
            script.push_str(&format!(
                "n=0; until mount -t cgroup -o {c} devinject-node-{c} \"$0/{c}\"; do \
                 n=$((n + 1)); [ $n -lt 100 ] || exit 32; sleep 0.1; done; "
            ));
        }
        script.push_str("exec sleep infinity");
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .arg(&dir);
        let mut holder = Daemon::start(
            "v1 hierarchies for crun",
            cmd,
            &self.dir.join("v1-hierarchies.log"),
        )?;
        holder
            .wait_ready("the unified hierarchy to offer no controller", || {
                std::fs::read_to_string(unified("cgroup.controllers"))
                    .is_ok_and(|c| c.trim().is_empty())
            })
            .with_context(|| format!("mounting {controllers:?} as cgroup v1 hierarchies"))?;
        held.holder = Some(holder);
        Ok(Some(held))
    }

    /// Loads the docker-save `archive` into CRI-O's storage.
    pub fn crio_load(&self, archive: &Path) -> Result<()> {
        load_image(&self.crio_podman()?, archive)
    }

    /// A podman on CRI-O's storage (`tag`, `images`).
    pub fn crio_podman(&self) -> Result<Podman> {
        Podman::new(&self.crio_dir(), &self.crio_hooks_dir())
    }

    /// Starts CRI-O from `bin` in the node's namespace and waits until it answers CRI.
    pub(super) fn start_crio(&self, bin: &Path) -> Result<Daemon> {
        let mut cmd = self.in_node(&bin.join("crio"))?;
        cmd.args(["--config", CONFIG, "--config-dir", DROP_INS])
            .args(registries_args(&self.crio_dir()));
        let mut crio = Daemon::start("crio", cmd, &self.crio_dir().join("crio.log"))?;
        let socket = self.crio_socket();
        crio.wait_ready("CRI-O's socket", || socket.exists())?;
        Cri::connect(&socket)?
            .wait_ready()
            .with_context(|| crio.log_tail())?;
        Ok(crio)
    }

    /// Stops the node's CRI-O and starts it again on the same configuration, as an
    /// administrator does after the installer asked for it (`--restart-mode none`); the
    /// containers it ran go on under their conmon.
    pub fn restart_crio(&mut self) -> Result<()> {
        let bin = self.crio_bin.clone().context("the node runs no CRI-O")?;
        if let Some(mut c) = self.crio.take() {
            c.stop();
        }
        let log = self.crio_dir().join("crio.log");
        let _ = std::fs::rename(&log, self.crio_dir().join("crio.log.1"));
        self.crio = Some(self.start_crio(&bin)?);
        Ok(())
    }

    /// The pid of the node's CRI-O.
    pub fn crio_pid(&self) -> Option<u32> {
        self.crio.as_ref().and_then(Daemon::pid)
    }

    /// Removes the pods CRI-O still runs (`crictl rmp --all --force`), then stops it.
    pub(super) fn stop_crio(&mut self) {
        if let (Some(_), Some(bin)) = (&self.crio, &self.crio_bin) {
            let mut rmp = std::process::Command::new(bin.join("crictl"));
            rmp.arg("--runtime-endpoint")
                .arg(format!("unix://{}", self.crio_socket().display()))
                .args(["rmp", "--all", "--force"]);
            let _ = run_ok(rmp);
        }
        if let Some(mut c) = self.crio.take() {
            c.stop();
        }
    }
}

/// File `name` of the root of a hybrid host's unified cgroup hierarchy.
fn unified(name: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup/unified").join(name)
}

/// What [`Node::hold_unified_controllers`] changed: the process holding the v1 hierarchies, and
/// the controllers the unified root enabled for its children before.
pub(super) struct V1Hierarchies {
    holder: Option<Daemon>,
    controllers: Vec<String>,
    reenable: Vec<String>,
}

/// Ends the holder and, once its controllers are back in the unified hierarchy (so that the
/// next node finds them there), enables there what was enabled before: at the node's
/// teardown, or when mounting failed.
impl Drop for V1Hierarchies {
    fn drop(&mut self) {
        if let Some(mut holder) = self.holder.take() {
            holder.stop();
        }
        let _ = crate::daemons::poll(
            "the controllers back in the unified hierarchy",
            crate::cluster::SLOW,
            || {
                let offered = std::fs::read_to_string(unified("cgroup.controllers"))?;
                Ok(self
                    .controllers
                    .iter()
                    .all(|c| offered.split_whitespace().any(|o| o == c))
                    .then_some(()))
            },
        );
        // Offered again is not yet free to enable (the v1 hierarchy's root goes asynchronously).
        for c in std::mem::take(&mut self.reenable) {
            let _ = crate::daemons::poll(
                &format!("{c} enabled again in the unified root"),
                std::time::Duration::from_secs(10),
                || Ok(std::fs::write(unified("cgroup.subtree_control"), format!("+{c}")).ok()),
            );
        }
    }
}
