//! One node of the test cluster: its private mount namespace, containerd (or CRI-O, in
//! `node/crio.rs`), kubelet, device plugin (and `devinject-nri` with [`Setup::Nri`]) and simulated
//! devices, all under its own directory.
//!
//! Nodes share the machine, so everything a kubelet would take for itself is made per node: the
//! mount namespace gives each its own `/var/lib/kubelet` (and so its own constant
//! `device-plugins` directory), `/var/log/pods`, `/etc/containerd`, `/etc/crio`,
//! `/etc/containers/oci/hooks.d`, `/etc/devinject` and `/opt`;
//! each kubelet has its own ports, node name and `cgroupRoot` (`/<node name>`, on every cgroup
//! hierarchy), so that the kubelets' `kubepods` trees never meet; each containerd has its own
//! root, state and socket.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use devinject_device_plugin::kubelet::lifecycle::REGISTERED as PLUGIN_REGISTERED;
use devinject_nri::session::REGISTERED;
use serde_json::Value;

use super::{
    free_port, DraBeside, Kubernetes, NodeHost, Setup, CDI_CRI_ALLOCATE_MODE, DEFAULT_CDI_DIR,
    KUBELET_ROOT, NRI_SOCKET, SLOW,
};
use crate::bins::bin;
use crate::cri::Cri;
use crate::cri_node::{
    cdi_generate, configure, containerd_cdi_config, containerd_config, containerd_nri_settings,
    containerd_nri_settings_on, import_images, nri_socket, CONTAINERD_NRI_OFF,
};
use crate::daemons::{poll, run_ok, Containerd, Daemon};
use crate::sim::{demo_host, SimHost, ACCELS};

mod crio;

/// The kubelet of a CRI-O node, as a command prefix run in the node's namespace: in a mount
/// namespace of its own that sees no huge page sizes. This machine's kernel has the hugetlb
/// controller but no v1 hierarchy of it, and CRI-O (which asks /proc/cgroups) passes the
/// kubelet's hugepage limits to runc, which then fails every container ("cannot set hugetlb
/// limit"); containerd ignores them by default (`disable_hugetlb_controller`). The sizes are
/// hidden from the kubelet alone: a mount over a sysfs directory that is not empty in CRI-O's
/// namespace would leave sysfs not fully visible there, and the kernel then refuses a
/// user-namespaced container its own sysfs (`EPERM`, `mount_too_revealing`). The new
/// namespace's mounts stay peers of the node's (`/var/lib/kubelet` is shared there), but its
/// `/sys` only receives.
const KUBELET_WITHOUT_HUGEPAGES: [&str; 7] = [
    "unshare",
    "--mount",
    "--propagation",
    "unchanged",
    "sh",
    "-c",
    "mount --make-rslave /sys && \
     mount -t tmpfs -o ro,mode=0755 devinject-node /sys/kernel/mm/hugepages && exec \"$0\" \"$@\"",
];

/// The administrator's hooks.d directory, which CRI-O reads when its `hooks_dir` names it.
pub const OCI_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";

/// The directories of the host that every node's namespace covers with its own (the cluster
/// makes them on the host where they are missing), and those `setup` adds: `/run/nri` for
/// NRI's socket, `/run/cdi` for the specs of the DRA driver's pod.
pub(super) fn host_mount_points(setup: &Setup) -> Vec<&'static str> {
    let mut dirs = vec![
        "/var/lib/kubelet",
        "/etc/containerd",
        "/etc/crio",
        OCI_HOOKS_DIR,
        "/etc/devinject",
        "/var/log/pods",
        "/var/log/containers",
    ];
    if manifests_run(setup) {
        dirs.push(CDI_REFRESHER_DIR);
    }
    dirs.extend(own_run_dir(setup));
    dirs
}

/// Whether the test applies the manifests on nodes of `setup` (the `DaemonSet` setups): their
/// pods then need what a systemd host gives them, shared mounts, and the node's own
/// [`CDI_REFRESHER_DIR`].
fn manifests_run(setup: &Setup) -> bool {
    matches!(
        setup,
        Setup::DaemonSet | Setup::DaemonSetNri { .. } | Setup::DaemonSetDra { .. }
    )
}

/// Where the manifests' CDI refresher writes its specs on a node, and containerd 2 reads them
/// by default: the node's own directory where the manifests run.
const CDI_REFRESHER_DIR: &str = "/etc/cdi";

/// The directory below `/run` the node namespace of `setup` has of its own (a DaemonSet's pod
/// writes there through a hostPath), if any.
fn own_run_dir(setup: &Setup) -> Option<&'static str> {
    match setup {
        Setup::DaemonSetNri { .. } => Some("/run/nri"),
        Setup::DaemonSetDra { .. } => Some("/run/cdi"),
        _ => None,
    }
}

/// A node of the cluster. Its processes are stopped by the cluster's teardown, in dependency
/// order with the control plane's: plugins and kubelet first, containerd and namespace last.
pub struct Node {
    name: String,
    /// Everything of the node's lives below this directory.
    dir: PathBuf,
    plugin: Option<Daemon>,
    /// The kubeconfig the device plugin posts Events through, for its restarts.
    plugin_kubeconfig: Option<PathBuf>,
    /// Where the running device plugin serves its metrics.
    plugin_metrics: Option<SocketAddr>,
    nri_plugin: Option<Daemon>,
    /// Where the running `devinject-nri` serves its metrics.
    nri_metrics: Option<SocketAddr>,
    dra_plugin: Option<Daemon>,
    /// How `devinject-dra` is started on this node ([`Setup::Dra`]), to start it again.
    dra_command: Option<Command>,
    kubelet: Option<Daemon>,
    kubelet_command: Option<Command>,
    containerd: Option<Containerd>,
    /// The bin dir of the containerd release the node runs; `None`: the machine's.
    containerd_release: Option<PathBuf>,
    crio: Option<Daemon>,
    /// The CRI-O bin dir of a node on CRI-O; `None`: the node runs containerd.
    crio_bin: Option<PathBuf>,
    /// What keeps the unified cgroup hierarchy free of controllers for crun
    /// ([`Node::hold_unified_controllers`]).
    unified_controllers: Option<crio::V1Hierarchies>,
    namespace: Option<Daemon>,
    /// Whether the node's cgroup root was made (and so is removed at teardown).
    cgroup_root_made: bool,
    /// The simulated devices and the host configuration the runtime uses.
    pub host: SimHost,
    /// What the node's host adds to the test image ([`NodeHost::image`]).
    image: Option<fn(&Path) -> Result<()>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .finish()
    }
}

impl Node {
    /// A node named `name` in `dir` (made), with the demo profile's first `devices` simulated
    /// accelerators (or the host `node_host` makes), on CRI-O from `crio_bin` or else on
    /// containerd; nothing runs yet.
    pub(super) fn new(
        name: &str,
        dir: PathBuf,
        devices: usize,
        crio_bin: Option<PathBuf>,
        node_host: Option<NodeHost>,
    ) -> Result<Self> {
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let host = match node_host {
            Some(h) => (h.make)(&dir.join("sim"))?,
            None => {
                let host = demo_host(&dir.join("sim"), &["demo"])?;
                for (accel, _, _) in ACCELS.iter().skip(devices) {
                    let path = host.dev_root.join("demo").join(accel);
                    std::fs::remove_file(&path)
                        .with_context(|| format!("remove {}", path.display()))?;
                }
                host
            }
        };
        Ok(Self {
            name: name.to_owned(),
            dir,
            plugin: None,
            plugin_kubeconfig: None,
            plugin_metrics: None,
            nri_plugin: None,
            nri_metrics: None,
            dra_plugin: None,
            dra_command: None,
            kubelet: None,
            kubelet_command: None,
            containerd: None,
            containerd_release: None,
            crio: None,
            crio_bin,
            unified_controllers: None,
            namespace: None,
            cgroup_root_made: false,
            host,
            image: node_host.map(|h| h.image),
        })
    }

    /// Where the node's hook, shim and NRI plugin record refusals: the host configuration's
    /// `decision_log_dir`, which `sim::write_config` puts beside it.
    pub fn decision_log_dir(&self) -> PathBuf {
        self.host
            .config
            .parent()
            .unwrap_or(Path::new("/"))
            .join("decisions")
    }

    /// The node's name (its kubelet's `--hostname-override`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's containerd configuration, at `/etc/containerd/config.toml` in its namespace.
    pub fn containerd_config(&self) -> PathBuf {
        self.dir.join("node/etc-containerd/config.toml")
    }

    /// The directory `devinject-ctl cdi generate` writes the specs into and containerd reads
    /// them from ([`Setup::Cdi`]).
    pub fn cdi_spec_dir(&self) -> PathBuf {
        self.dir.join("cdi")
    }

    /// The node's `/var/log/pods`, where its containerd writes the pods' output.
    pub fn pod_log_dir(&self) -> PathBuf {
        self.dir.join("node/log-pods")
    }

    /// The kubelet's `cgroupRoot`: the node's own top-level cgroup on every hierarchy.
    fn cgroup_root(&self) -> String {
        format!("/{}", self.name)
    }

    fn ctd_dir(&self) -> PathBuf {
        self.dir.join("ctd")
    }

    /// The node's containerd, started in its namespace from its release (or the machine's).
    fn start_containerd(&self) -> Result<Containerd> {
        Containerd::start_release_via(
            &self.ctd_dir(),
            &self.containerd_config(),
            &self.enter()?,
            self.containerd_release.as_deref(),
        )
    }

    /// Starts the node's namespace and containerd (set up as `setup` says, with the test
    /// images), then its kubelet, registering with the apiserver of `kubeconfig`.
    pub(super) fn start(
        &mut self,
        setup: &Setup,
        kubernetes: &Kubernetes,
        kubeconfig: &Path,
    ) -> Result<()> {
        if let Some(bin) = self.crio_bin.clone() {
            anyhow::ensure!(
                !kubernetes.is_legacy(),
                "a CRI-O node needs today's Kubernetes release"
            );
            self.write_crio_config(setup, &bin)?;
            self.start_namespace(setup)?;
            self.make_cgroup_root()?;
            self.unified_controllers = self.hold_unified_controllers()?;
            self.crio = Some(self.start_crio(&bin)?);
            return self.start_kubelet(kubernetes, kubeconfig, &self.crio_socket());
        }
        self.write_containerd_config(setup)?;
        if !kubernetes.is_legacy() {
            // Kubernetes 1.36 supports no containerd 1.x: every node of today's tier runs
            // containerd 2, whatever the setup would run on 1.20 ([`super::kubernetes`]).
            let release = crate::runtimes::containerd("2")
                .context("containerd 2 (scripts/runtimes-fetch.sh)")?;
            self.containerd_release = Some(release.bin);
        }
        self.start_namespace(setup)?;
        self.make_cgroup_root()?;
        let containerd = self.start_containerd()?;
        let mut cri = Cri::connect(&containerd.socket())?;
        cri.wait_ready()?;
        import_images(&self.dir, &containerd, &mut cri, self.image);
        drop(cri);
        let socket = containerd.socket();
        self.containerd = Some(containerd);
        self.start_kubelet(kubernetes, kubeconfig, &socket)
    }

    /// containerd's configuration as `setup` wants it (and, where the test sets devinject up
    /// itself, the host configuration and `devinject-ctl runtime configure`), with the
    /// placeholder CNI config that lets the node become Ready.
    fn write_containerd_config(&mut self, setup: &Setup) -> Result<()> {
        let ctd_dir = self.ctd_dir();
        let cni = ctd_dir.join("cni/conf");
        std::fs::create_dir_all(&cni)?;
        match crate::cluster::cni_plugins() {
            Some(plugins) => {
                let bin = ctd_dir.join("cni/bin");
                std::fs::create_dir_all(&bin)?;
                for plugin in crate::cluster::CNI_PLUGINS {
                    std::fs::copy(plugins.join(plugin), bin.join(plugin))
                        .with_context(|| format!("copy the CNI plugin {plugin}"))?;
                }
                std::fs::write(
                    cni.join("10-pods.conflist"),
                    crate::cluster::pod_network(&ctd_dir.join("cni/ipam")),
                )?;
            }
            None => std::fs::write(
                cni.join("10-placeholder.conflist"),
                r#"{"cniVersion": "0.4.0", "name": "devinject-placeholder",
  "plugins": [{"type": "devinject-host-network-only"}]}"#,
            )?,
        }
        let config = self.containerd_config();
        std::fs::create_dir_all(config.parent().expect("parent"))?;
        std::fs::create_dir_all(self.dir.join("node/etc-devinject"))?;
        std::fs::create_dir_all(self.dir.join("node/opt"))?;
        let text = match setup {
            Setup::Cdi {
                containerd,
                allocate_mode,
            } => {
                set_allocate_mode(&self.host.profiles_dir, allocate_mode)?;
                let specs = self.cdi_spec_dir();
                cdi_generate(&self.host, &specs)?;
                self.containerd_release = Some(containerd.clone());
                containerd_cdi_config(&ctd_dir, &specs) + CONTAINERD_NRI_OFF
            }
            Setup::Nri { containerd } => {
                self.containerd_release = Some(containerd.clone());
                containerd_config(&ctd_dir) + &containerd_nri_settings(&ctd_dir)
            }
            Setup::DaemonSetNri { containerd } => {
                self.containerd_release = Some(containerd.clone());
                containerd_config(&ctd_dir)
                    + &containerd_nri_settings_on(&ctd_dir, Path::new(NRI_SOCKET))
            }
            Setup::DaemonSetDra { containerd } => {
                self.containerd_release = Some(containerd.clone());
                containerd_cdi_config(&ctd_dir, Path::new(DEFAULT_CDI_DIR)) + CONTAINERD_NRI_OFF
            }
            Setup::Dra { containerd, beside } => {
                let specs = self.cdi_spec_dir();
                std::fs::create_dir_all(&specs)
                    .with_context(|| format!("mkdir {}", specs.display()))?;
                if *beside == DraBeside::DevicePlugin {
                    set_allocate_mode(&self.host.profiles_dir, CDI_CRI_ALLOCATE_MODE)?;
                    cdi_generate(&self.host, &specs)?;
                }
                self.containerd_release = Some(containerd.clone());
                containerd_cdi_config(&ctd_dir, &specs)
                    + &if *beside == DraBeside::Nri {
                        containerd_nri_settings(&ctd_dir)
                    } else {
                        CONTAINERD_NRI_OFF.to_owned()
                    }
            }
            Setup::Ctl | Setup::DaemonSet => containerd_config(&ctd_dir),
        };
        std::fs::write(&config, text)?;
        if matches!(
            setup,
            Setup::Ctl
                | Setup::Nri { .. }
                | Setup::Dra {
                    beside: DraBeside::Nri,
                    ..
                }
        ) {
            // The host configuration: the `kubernetes` policy asks this node's kubelet.
            let runc = crate::runc::runc_binary().context("runc")?;
            self.host.write_config(&format!(
                "runtime = {:?}\nhook = {:?}\npod_resources_socket = \"{KUBELET_ROOT}/pod-resources/kubelet.sock\"",
                runc,
                bin("devinject-hook"),
            ))?;
        }
        if *setup == Setup::Ctl {
            configure(&self.dir, &config, &self.host, "shim");
        }
        Ok(())
    }

    fn start_kubelet(
        &mut self,
        kubernetes: &Kubernetes,
        kubeconfig: &Path,
        runtime: &Path,
    ) -> Result<()> {
        let (port, healthz) = (free_port()?, free_port()?);
        let config = self.dir.join("kubelet.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 address: 127.0.0.1\nport: {port}\nreadOnlyPort: 0\n\
                 healthzBindAddress: 127.0.0.1\nhealthzPort: {healthz}\n\
                 cgroupDriver: cgroupfs\ncgroupRoot: {cgroup_root}\nfailSwapOn: false\noomScoreAdj: 0\n\
                 authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: false}}\n\
                 authorization: {{mode: AlwaysAllow}}\n\
                 evictionHard: {{\"nodefs.available\": \"1%\", \"imagefs.available\": \"1%\", \"memory.available\": \"1Mi\"}}\n\
                 imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n\
                 resolvConf: /etc/resolv.conf\nserializeImagePulls: false\n\
                 nodeStatusUpdateFrequency: {status_every}\nnodeStatusReportFrequency: 5m\n\
                 volumePluginDir: {plugins}\n{today}",
                cgroup_root = self.cgroup_root(),
                // The kubelet puts a device plugin's devices (and their health) into the
                // node's allocatable at its next node status update, every 10 s by default:
                // each registration (a cluster's start, a plugin or kubelet restart) waited up
                // to that long. Every second here; the status is still written only when it
                // changed or after the report period, its default here (a period of update set
                // alone becomes the report period too: a write a second per node).
                status_every = "1s",
                plugins = self.dir.join("volume-plugins").display(),
                today = if kubernetes.is_legacy() {
                    String::new()
                } else {
                    // The endpoint moved into the file (1.27); the machine's cgroups are v1,
                    // which 1.35's kubelet refuses unless told (KEP-5573).
                    format!(
                        "containerRuntimeEndpoint: unix://{}\nfailCgroupV1: false\n",
                        runtime.display()
                    )
                },
            ),
        )?;
        let mut prefix = self.enter()?;
        if self.crio_bin.is_some() {
            prefix.extend(KUBELET_WITHOUT_HUGEPAGES.map(String::from));
        }
        let mut cmd = crate::daemons::behind(&prefix, kubernetes.binary("kubelet"));
        cmd.arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()));
        if kubernetes.is_legacy() {
            cmd.arg("--container-runtime=remote")
                .arg(format!(
                    "--container-runtime-endpoint=unix://{}",
                    runtime.display()
                ))
                // Since 1.27 the runtime's own setting (containerd's `sandbox_image`) says it.
                .arg(format!(
                    "--pod-infra-container-image={}",
                    crate::cri_node::PAUSE
                ));
        }
        cmd.arg(format!("--root-dir={KUBELET_ROOT}"))
            .arg(format!(
                "--cert-dir={}",
                self.dir.join("kubelet-certs").display()
            ))
            .arg(format!("--hostname-override={}", self.name))
            .arg("--v=2");
        self.kubelet_command = Some(copy_command(&cmd));
        self.kubelet = Some(Daemon::start("kubelet", cmd, &self.kubelet_log_path())?);
        Ok(())
    }

    fn kubelet_log_path(&self) -> PathBuf {
        self.dir.join("kubelet.log")
    }

    /// Stops the kubelet and starts it again, as an upgrade or a crash would: it forgets its
    /// plugins (and deletes their sockets) and must take them back when they register again.
    pub fn restart_kubelet(&mut self) -> Result<()> {
        self.stop_kubelet();
        self.start_kubelet_again()
    }

    /// Stops the kubelet, leaving the node's pods, containers and plugins as they are: what the
    /// scheduler binds to the node meanwhile waits for [`Self::start_kubelet_again`] (the node
    /// stays Ready until the node controller's grace period, 50 s, runs out).
    pub fn stop_kubelet(&mut self) {
        if let Some(mut k) = self.kubelet.take() {
            k.stop();
        }
    }

    /// Starts the kubelet stopped by [`Self::stop_kubelet`] again, on the same command line.
    pub fn start_kubelet_again(&mut self) -> Result<()> {
        let cmd = copy_command(
            self.kubelet_command
                .as_ref()
                .context("no kubelet started")?,
        );
        let log = self.kubelet_log_path();
        let _ = std::fs::rename(&log, self.dir.join("kubelet.log.1"));
        self.kubelet = Some(Daemon::start("kubelet", cmd, &log)?);
        Ok(())
    }

    /// An error when the kubelet has exited.
    pub(super) fn check_kubelet(&mut self) -> Result<()> {
        match self.kubelet.as_mut() {
            Some(k) => k.check_running(),
            None => Ok(()),
        }
    }

    /// Stops the node's containerd and starts it again on the same configuration, as an
    /// administrator does after the installer asked for it (`--restart-mode none`).
    pub fn restart_containerd(&mut self) -> Result<()> {
        if let Some(mut c) = self.containerd.take() {
            c.daemon().stop();
        }
        let log = self.ctd_dir().join("containerd.log");
        let _ = std::fs::rename(&log, self.ctd_dir().join("containerd.log.1"));
        let containerd = self.start_containerd()?;
        self.containerd = Some(containerd);
        Ok(())
    }

    /// Stops the node's containerd daemon alone and starts it again on the same configuration,
    /// as an engine upgrade on a real node does: the shims and their containers keep running
    /// and the new containerd takes them back ([`Containerd::restart_daemon`]).
    /// [`Node::restart_containerd`] stops the shims too.
    pub fn restart_containerd_keeping_tasks(&mut self) -> Result<()> {
        let prefix = self.enter()?;
        self.containerd
            .as_mut()
            .context("the node's containerd is not running")?
            .restart_daemon(&prefix)
    }

    /// SIGKILLs the device plugin (no cleanup of its own: its socket stays) and starts it
    /// again, as a crash and the DaemonSet's restart would; returns once the new process has
    /// registered with the kubelet.
    pub fn restart_plugin(&mut self) -> Result<()> {
        if let Some(mut d) = self.plugin.take() {
            d.kill();
        }
        let kubeconfig = self
            .plugin_kubeconfig
            .clone()
            .context("the device plugin never started")?;
        self.start_plugin(&kubeconfig)?;
        poll("the restarted device plugin to register", SLOW, || {
            Ok((self.plugin_registrations() >= 1).then_some(()))
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Stops the device plugin as its DaemonSet's pod deletion does (SIGTERM: it withdraws its
    /// devices and removes its socket), so that the kubelet sees it gone;
    /// [`Self::restart_plugin`] starts it again.
    pub fn stop_plugin(&mut self) {
        if let Some(mut d) = self.plugin.take() {
            d.stop();
        }
    }

    /// The device plugin's pid, while it runs (it is exec'ed by `nsenter`, so this is the
    /// plugin itself).
    pub fn plugin_pid(&self) -> Option<u32> {
        self.plugin.as_ref().and_then(Daemon::pid)
    }

    /// `devinject-nri`'s pid, while it runs ([`Setup::Nri`]).
    pub fn nri_plugin_pid(&self) -> Option<u32> {
        self.nri_plugin.as_ref().and_then(Daemon::pid)
    }

    /// `devinject-dra`'s pid, while it runs ([`Setup::Dra`]).
    pub fn dra_plugin_pid(&self) -> Option<u32> {
        self.dra_plugin.as_ref().and_then(Daemon::pid)
    }

    /// How often the kubelet has told `devinject-dra` that it registered (its current log).
    pub fn dra_registrations(&self) -> usize {
        self.dra_log()
            .matches(devinject_dra::registration::REGISTERED)
            .count()
    }

    /// Where the device plugin serves its metrics, while it runs.
    pub fn plugin_metrics(&self) -> Option<SocketAddr> {
        self.plugin_pid().and(self.plugin_metrics)
    }

    /// Where `devinject-nri` serves its metrics, while it runs.
    pub fn nri_metrics(&self) -> Option<SocketAddr> {
        self.nri_plugin_pid().and(self.nri_metrics)
    }

    /// How many times `devinject-nri` has registered with containerd (its log): one more after
    /// each containerd restart.
    pub fn nri_registrations(&self) -> usize {
        std::fs::read_to_string(self.dir.join("nri.log"))
            .unwrap_or_default()
            .matches(REGISTERED)
            .count()
    }

    /// The pid of the process holding the node's mount namespace: every daemon of the node
    /// shares its `/proc/<pid>/ns/mnt`.
    pub fn namespace_pid(&self) -> Option<u32> {
        self.namespace.as_ref().and_then(Daemon::pid)
    }

    /// `program` as a command run in the node's mount namespace.
    pub fn command_in_node(&self, program: &Path) -> Result<Command> {
        self.in_node(program)
    }

    /// The pid of the node's containerd: the same before and after a step proves the step did
    /// not restart it.
    pub fn containerd_pid(&self) -> Option<u32> {
        self.containerd.as_ref().and_then(Containerd::pid)
    }

    /// The socket of the node's runtime, CRI-O's or containerd's.
    pub fn cri_socket(&self) -> Result<PathBuf> {
        match self.crio_bin {
            Some(_) => Ok(self.crio_socket()),
            None => Ok(self.containerd()?.socket()),
        }
    }

    /// The node's containerd.
    pub fn containerd(&self) -> Result<&Containerd> {
        self.containerd
            .as_ref()
            .with_context(|| format!("the containerd of {} is not running", self.name))
    }

    /// The namespace the node runs in: a private mount namespace, held open by a sleeping
    /// process, where `/var/lib/kubelet` is a fresh tmpfs and `/opt`, `/etc/containerd`,
    /// `/etc/crio`, `/etc/containers/oci/hooks.d`, `/etc/devinject`, `/var/log/pods` and
    /// `/var/log/containers` are the node's own directories: what the node writes there (the installer included) stays in the test, and
    /// no kubelet collects another node's pod logs. (`/opt` is on disk, not a tmpfs: files the
    /// installer copies there would be charged to its memory limit as unreclaimable.) With
    /// [`Setup::DaemonSetNri`], `/run/nri` is the node's own too (containerd's default NRI
    /// socket is there), with [`Setup::DaemonSetDra`] `/run/cdi` (where `/var/run/cdi`, the
    /// default CDI directory, leads). Where the manifests run (the `DaemonSet` setups)
    /// `/etc/cdi` is the node's own too (the CDI refresher's), and the namespace's mounts are
    /// made shared, as a systemd host's are, for the pods' `HostToContainer` hostPath of `/`;
    /// they stay in the namespace, copies of the host's that are peers of nothing outside it.
    fn start_namespace(&mut self, setup: &Setup) -> Result<()> {
        let node = self.dir.join("node");
        for dir in [
            "log-pods",
            "log-containers",
            "run-own",
            "etc-crio",
            "etc-oci-hooks",
            "etc-containerd",
            "etc-devinject",
            "etc-cdi",
            "opt",
        ] {
            std::fs::create_dir_all(node.join(dir))?;
        }
        let mut script = String::from(
            "set -e; mount -t tmpfs -o mode=0755 devinject-node /var/lib/kubelet; \
             mount --bind \"$0/opt\" /opt; \
             mount --bind \"$0/etc-containerd\" /etc/containerd; \
             mount --bind \"$0/etc-crio\" /etc/crio; \
             mount --bind \"$0/etc-oci-hooks\" /etc/containers/oci/hooks.d; \
             mount --bind \"$0/log-pods\" /var/log/pods; \
             mount --bind \"$0/log-containers\" /var/log/containers; \
             mount --bind \"$0/etc-devinject\" /etc/devinject; ",
        );
        if let Some(dir) = own_run_dir(setup) {
            script.push_str(&format!("mount --bind \"$0/run-own\" {dir}; "));
        }
        if manifests_run(setup) {
            script.push_str(&format!(
                "mount --bind \"$0/etc-cdi\" {CDI_REFRESHER_DIR}; mount --make-rshared /; "
            ));
        }
        if self.crio_bin.is_some() {
            // The kubelet runs in a namespace below this one ([`KUBELET_WITHOUT_HUGEPAGES`]);
            // the volumes it mounts for pods must reach CRI-O here.
            script.push_str("mount --make-shared /var/lib/kubelet; ");
        }
        script.push_str("exec sleep infinity");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .arg(&node);
        let mut holder = Daemon::start("node namespace", cmd, &self.dir.join("node-ns.log"))?;
        let pid = holder.pid().context("holder pid")?;
        // The script execs `sleep` once its last mount is made.
        holder.wait_ready("the node namespace's mounts", || {
            std::fs::read(format!("/proc/{pid}/mountinfo")).is_ok_and(|m| {
                devinject_mountinfo::parse(&m)
                    .filter_map(Result::ok)
                    .any(|mount| mount.mount_point.as_os_str() == "/etc/devinject")
            }) && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "sleep")
        })?;
        self.namespace = Some(holder);
        Ok(())
    }

    /// `nsenter` into the node's mount namespace, as a command prefix.
    fn enter(&self) -> Result<Vec<String>> {
        let pid = self
            .namespace
            .as_ref()
            .and_then(Daemon::pid)
            .context("the node namespace is not up")?;
        Ok(vec![
            "nsenter".into(),
            "-t".into(),
            pid.to_string(),
            "-m".into(),
            "--".into(),
        ])
    }

    /// `program` run in the node's mount namespace.
    fn in_node(&self, program: &Path) -> Result<Command> {
        Ok(crate::daemons::behind(&self.enter()?, program))
    }

    /// The kubelet's pid (its mount namespace holds the device-plugins directory).
    fn kubelet_pid(&self) -> Result<u32> {
        self.kubelet
            .as_ref()
            .and_then(Daemon::pid)
            .context("the kubelet is not running")
    }

    /// A path as the node's kubelet sees it.
    pub fn in_node_ns(&self, path: &str) -> Result<PathBuf> {
        Ok(PathBuf::from(format!("/proc/{}/root", self.kubelet_pid()?))
            .join(path.trim_start_matches('/')))
    }

    /// Starts the device plugin in the node's namespace, once the kubelet's registration socket
    /// is there; it posts the node's refusals as Events on their pods through `kubeconfig`.
    pub(super) fn start_plugin(&mut self, kubeconfig: &Path) -> Result<()> {
        let registration = self.in_node_ns("/var/lib/kubelet/device-plugins/kubelet.sock")?;
        self.kubelet
            .as_mut()
            .expect("started")
            .wait_ready("the kubelet's registration socket", || {
                registration.exists()
            })?;
        let mut cmd = self.in_node(&bin("devinject-device-plugin"))?;
        cmd.arg("--profiles-dir")
            .arg(&self.host.profiles_dir)
            .arg("--dev-root")
            .arg(&self.host.dev_root)
            .arg("--sys-root")
            .arg(self.host.dir.join("sys"))
            // The node's decision log, where its hook, shim and NRI plugin record refusals
            // (the host config's `decision_log_dir`, see `sim::write_config`).
            .arg("--decision-log-dir")
            .arg(self.decision_log_dir())
            .arg("--pod-events")
            .arg("--node-name")
            .arg(&self.name)
            .arg("--kubeconfig")
            .arg(kubeconfig);
        self.plugin_kubeconfig = Some(kubeconfig.to_owned());
        let metrics = metrics_address()?;
        cmd.arg("--metrics-address").arg(metrics.to_string());
        self.plugin_metrics = Some(metrics);
        self.plugin = Some(Daemon::start(
            "devinject-device-plugin",
            cmd,
            &self.dir.join("plugin.log"),
        )?);
        Ok(())
    }

    /// Starts `devinject-nri` in the node's namespace on the node containerd's NRI socket, and
    /// waits until it has registered.
    pub(super) fn start_nri_plugin(&mut self) -> Result<()> {
        let mut cmd = self.in_node(&bin("devinject-nri"))?;
        cmd.arg("--socket")
            .arg(nri_socket(&self.ctd_dir()))
            .arg("--config")
            .arg(&self.host.config);
        let metrics = metrics_address()?;
        cmd.arg("--metrics-address").arg(metrics.to_string());
        self.nri_metrics = Some(metrics);
        let log = self.dir.join("nri.log");
        self.nri_plugin = Some(Daemon::start("devinject-nri", cmd, &log)?);
        poll("devinject-nri to register", SLOW, || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            Ok(text.contains(REGISTERED).then_some(()))
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Starts `devinject-dra` in the node's namespace with the cluster's `kubeconfig`, once the
    /// kubelet's plugin registry is there; it registers with the kubelet and publishes the
    /// node's devices.
    pub(super) fn start_dra_plugin(&mut self, kubeconfig: &Path) -> Result<()> {
        let registry = self.in_node_ns(&format!("{KUBELET_ROOT}/plugins_registry"))?;
        self.kubelet
            .as_mut()
            .expect("started")
            .wait_ready("the kubelet's plugin registry", || registry.is_dir())?;
        let mut cmd = self.in_node(&bin("devinject-dra"))?;
        cmd.arg("--node-name")
            .arg(&self.name)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--profiles-dir")
            .arg(&self.host.profiles_dir)
            .arg("--dev-root")
            .arg(&self.host.dev_root)
            .arg("--sys-root")
            .arg(self.host.dir.join("sys"))
            .arg("--driver-root")
            .arg(&self.host.driver_root)
            .arg("--hook-path")
            .arg(bin("devinject-hook"))
            .arg("--hook-config")
            .arg(&self.host.config)
            .arg("--cdi-dir")
            .arg(self.cdi_spec_dir())
            // The node's refusals as Events on their pods, as the manifests run it.
            .arg("--pod-events")
            .arg("--decision-log-dir")
            .arg(self.decision_log_dir())
            // Its metrics on a loopback port of its own, logged (crate::scrape).
            .arg(crate::scrape::ANY_LOOPBACK_PORT)
            .env("RUST_LOG", "devinject_dra=debug,info");
        self.dra_command = Some(copy_command(&cmd));
        self.dra_plugin = Some(Daemon::start("devinject-dra", cmd, &self.dra_log_path())?);
        self.wait_dra_registered(1)
    }

    fn dra_log_path(&self) -> PathBuf {
        self.dir.join("dra.log")
    }

    /// `devinject-dra`'s log ([`Setup::Dra`]; empty when it never ran).
    pub fn dra_log(&self) -> String {
        std::fs::read_to_string(self.dra_log_path()).unwrap_or_default()
    }

    /// Waits until the kubelet has told `devinject-dra` `times` times in all that it registered
    /// (its log).
    fn wait_dra_registered(&self, times: usize) -> Result<()> {
        poll("the kubelet to register devinject-dra", SLOW, || {
            let log = std::fs::read_to_string(self.dra_log_path()).unwrap_or_default();
            Ok(
                (log.matches(devinject_dra::registration::REGISTERED).count() >= times)
                    .then_some(()),
            )
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Stops `devinject-dra` as its DaemonSet's pod deletion does (SIGTERM).
    pub fn stop_dra_plugin(&mut self) {
        if let Some(mut d) = self.dra_plugin.take() {
            d.stop();
        }
    }

    /// Kills `devinject-dra` (SIGKILL: no cleanup of its own) and starts it again, as a crash
    /// and the DaemonSet's restart would; returns once the kubelet has registered it again.
    pub fn restart_dra_plugin(&mut self) -> Result<()> {
        if let Some(mut d) = self.dra_plugin.take() {
            d.kill();
        }
        let cmd = copy_command(
            self.dra_command
                .as_ref()
                .context("devinject-dra never ran")?,
        );
        // A new log: the registration counted is the new process's.
        self.dra_plugin = Some(Daemon::start("devinject-dra", cmd, &self.dra_log_path())?);
        self.wait_dra_registered(1)
    }

    /// The device ids the node's kubelet checkpoint says it allocated to `container` of the pod
    /// with `uid`, for `resource`.
    pub fn allocated(&self, uid: &str, container: &str, resource: &str) -> Result<Vec<String>> {
        let path =
            self.in_node_ns("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")?;
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
        let v: Value = serde_json::from_str(&text).context("parse the kubelet's checkpoint")?;
        let mut ids = Vec::new();
        for e in v["Data"]["PodDeviceEntries"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if e["PodUID"] == uid
                && e["ContainerName"] == container
                && e["ResourceName"] == resource
            {
                ids.extend(entry_device_ids(e));
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// The current kubelet's log (since its last start).
    pub fn kubelet_log(&self) -> String {
        std::fs::read_to_string(self.kubelet_log_path()).unwrap_or_default()
    }

    /// The lines of the node's kubelet and containerd logs, the ones a restart set aside
    /// first, that contain one of `needles`: at most `max`, the first ones.
    pub fn log_lines_with(&self, needles: &[&str], max: usize) -> Vec<String> {
        let logs = [
            self.dir.join("kubelet.log.1"),
            self.kubelet_log_path(),
            self.ctd_dir().join("containerd.log.1"),
            self.ctd_dir().join("containerd.log"),
        ];
        logs.iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .flat_map(|text| {
                text.lines()
                    .filter(|l| needles.iter().any(|n| l.contains(n)))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .take(max)
            .collect()
    }

    /// How many times the device plugin has registered with the kubelet (its log).
    pub fn plugin_registrations(&self) -> usize {
        std::fs::read_to_string(self.dir.join("plugin.log"))
            .unwrap_or_default()
            .matches(PLUGIN_REGISTERED)
            .count()
    }

    /// The last lines of the node's logs, headed by its name, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = format!("=== node {} in {}\n", self.name, self.dir.display());
        for d in [
            &self.kubelet,
            &self.plugin,
            &self.nri_plugin,
            &self.dra_plugin,
        ]
        .into_iter()
        .flatten()
        {
            s.push_str(&d.log_tail());
        }
        if let Some(c) = &self.containerd {
            s.push_str(&c.log_tail());
        }
        if let Some(c) = &self.crio {
            s.push_str(&c.log_tail());
        }
        s
    }

    /// Stops the plugins and the kubelet (its pods should be gone by then).
    pub(super) fn stop_daemons(&mut self) {
        for d in [
            &mut self.dra_plugin,
            &mut self.nri_plugin,
            &mut self.plugin,
            &mut self.kubelet,
        ] {
            if let Some(mut d) = d.take() {
                d.stop();
            }
        }
    }

    /// Kills the pod sandboxes that outlived the kubelet, stops containerd and the namespace,
    /// and removes the node's cgroups.
    pub(super) fn stop_runtime(&mut self) {
        if let Some(c) = &self.containerd {
            let mut ls = c.ctr();
            ls.args(["-n", "k8s.io", "tasks", "ls", "-q"]);
            if let Ok(tasks) = run_ok(ls) {
                for t in tasks.lines() {
                    let mut kill = c.ctr();
                    kill.args(["-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", t]);
                    let _ = run_ok(kill);
                }
            }
        }
        self.containerd = None;
        self.stop_crio();
        // Dropped: the holder ends and the unified root's controllers are enabled again.
        self.unified_controllers = None;
        if let Some(mut holder) = self.namespace.take() {
            holder.stop();
        }
    }

    /// Makes the node's cgroup root on every cgroup v1 hierarchy (the kubelet refuses a
    /// `cgroupRoot` that does not exist), its cpuset filled from the top one's (a v1 cpuset
    /// starts empty).
    fn make_cgroup_root(&mut self) -> Result<()> {
        let root = self.cgroup_root();
        for top in cgroup_hierarchies() {
            let dir = top.join(root.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
            self.cgroup_root_made = true;
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(value) = std::fs::read_to_string(top.join(file)) {
                    std::fs::write(dir.join(file), value.trim())
                        .with_context(|| format!("write {}", dir.join(file).display()))?;
                }
            }
        }
        Ok(())
    }

    /// Removes the node's cgroups (its `kubepods` tree, deepest first, then its root) on every
    /// hierarchy.
    pub(super) fn remove_cgroups(&mut self) {
        if !self.cgroup_root_made {
            return;
        }
        let root = self.cgroup_root();
        for top in cgroup_hierarchies() {
            let dir = top.join(root.trim_start_matches('/'));
            if dir.is_dir() {
                let mut dirs = Vec::new();
                collect_dirs(&dir, &mut dirs);
                for d in dirs.iter().rev() {
                    let _ = std::fs::remove_dir(d);
                }
            }
        }
    }
}

/// The mounted cgroup v1 hierarchies (and, on a hybrid host, the unified one).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

/// Sets `allocate_mode` in every profile of `profiles_dir`: a node answers every resource one
/// way.
pub(super) fn set_allocate_mode(profiles_dir: &Path, mode: &str) -> Result<()> {
    let entries = std::fs::read_dir(profiles_dir)
        .with_context(|| format!("read {}", profiles_dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            set_profile_allocate_mode(&path, mode)?;
        }
    }
    Ok(())
}

/// Sets the top-level `allocate_mode` of the profile at `path` to `mode`: any such line goes,
/// and the new one comes first, before the profile's tables.
fn set_profile_allocate_mode(path: &Path, mode: &str) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut out = format!("allocate_mode = \"{mode}\"\n");
    for line in text
        .lines()
        .filter(|l| !l.trim_start().starts_with("allocate_mode"))
    {
        out.push_str(line);
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("write {}", path.display()))
}

/// A `--metrics-address` for a node's daemon: `127.0.0.1:<free port>`, each node's daemons on
/// a port of their own (the default port is one per machine, and two nodes' plugins share this
/// machine).
fn metrics_address() -> Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], free_port()?)))
}

/// The device ids of one entry of the kubelet checkpoint's `PodDeviceEntries`, over every NUMA
/// node.
pub fn entry_device_ids(entry: &Value) -> impl Iterator<Item = String> + '_ {
    entry["DeviceIDs"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|per_numa| per_numa.as_array().into_iter().flatten())
        .filter_map(|i| i.as_str().map(str::to_owned))
}

/// A copy of `cmd`'s program and arguments (a [`Command`] cannot be cloned).
fn copy_command(cmd: &Command) -> Command {
    let mut c = Command::new(cmd.get_program());
    c.args(cmd.get_args());
    c
}
