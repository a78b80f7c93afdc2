//! A real single-node Kubernetes cluster for tests: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and a kubelet (v1.20.2, built from Debian's source
//! package by scripts/kube-build.sh), the kubelet driving a private containerd over CRI with the
//! `devinject` runtime that `devinject-ctl` configures (or, with [`Setup::Cdi`], a containerd
//! release reading the CDI specs `devinject-ctl cdi generate` wrote, with no devinject runtime),
//! and the real `devinject-device-plugin`. Nothing is mocked; only the devices are simulated (a
//! [`SimHost`]).
//!
//! # How it fits on one machine
//! - Everything listens on 127.0.0.1, on free ports; certificates come from [`pki`].
//! - The kubelet 1.20 looks for device plugins in the constant `/var/lib/kubelet/device-plugins`,
//!   whatever its root dir. The node (containerd, its shims and runc, the kubelet, the device
//!   plugin) runs in a private mount namespace, held by a sleeping process, with a tmpfs on
//!   `/var/lib/kubelet`: the host's is never touched, a hostPath of the device-plugins directory
//!   means the kubelet's, and the kubelet can restart into the same namespace. The kubelet's
//!   root dir, and so the pod-resources socket the runtime's policy asks, is in the temp dir,
//!   visible from both sides.
//! - No CNI: pods use the host network; a placeholder network config (naming a plugin that does
//!   not exist, never called for host-network pods) lets the node become Ready.
//! - Pod logs are read from `/var/log/pods`, where containerd writes them: `kubectl logs` would
//!   need the apiserver to reach the loopback-only kubelet.
//! - The machine refuses negative `oom_score_adj`: the kubelet runs with `oomScoreAdj: 0` and
//!   containerd with `restrict_oom_score_adj`.
//!
//! [`Cluster`] tears everything down in `Drop`, also when a test fails: pods, the plugin, the
//! kubelet (its pod cgroups and mounts), the control plane, containerd, the temp dir.

use devinject_nri::session::REGISTERED;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::bins::bin;
use crate::cri::Cri;
use crate::cri_node::{
    cdi_generate, configure, containerd_cdi_config, containerd_config, containerd_nri_settings,
    containerd_nri_settings_on, import_images, nri_socket, CONTAINERD_NRI_OFF, HANDLER,
};
use crate::daemons::{
    output_within, poll, run_ok, short_tempdir, unmount_below, Containerd, Daemon,
};
use crate::sim::{demo_host, SimHost};
use crate::skip::{require, require_binary, require_root, which};

pub mod image;
pub mod install;
pub mod pki;

/// The Kubernetes release the tier runs.
pub const VERSION: &str = "v1.20.2";
/// The node's name.
pub const NODE: &str = "devinject-node";
/// How long the cluster may take to come up, or a pod to finish.
pub const SLOW: Duration = Duration::from_secs(120);

/// The directory holding kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, etcd
/// and kubectl: `DEVINJECT_KUBE_BIN`, or scripts/kube-build.sh's cache. `None` when they are not
/// all there.
pub fn kube_bin_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("DEVINJECT_KUBE_BIN") {
        Some(d) => PathBuf::from(d),
        None => {
            let cache = std::env::var_os("DEVINJECT_KUBE_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| Path::new(&h).join(".cache/devinject/kubernetes-1.20.2"))
                })?;
            cache.join("bin")
        }
    };
    [
        "kubelet",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "etcd",
        "kubectl",
    ]
    .iter()
    .all(|b| dir.join(b).is_file())
    .then_some(dir)
}

/// Whether this machine can run a cluster: root, containerd and ctr, runc, openssl, unshare,
/// nsenter, busybox, gcc and the Kubernetes binaries; each missing one is a loud skip (a failure
/// under CI).
pub fn ready() -> bool {
    require_root()
        && require_binary("containerd")
        && require_binary("ctr")
        && require_binary("runc")
        && require_binary("openssl")
        && require_binary("unshare")
        && require_binary("nsenter")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
        && require(
            kube_bin_dir().is_some(),
            "needs the Kubernetes v1.20.2 binaries (scripts/kube-build.sh)",
        )
}

/// [`ready`], and containerd `series` fetched (scripts/runtimes-fetch.sh) for the node.
pub fn ready_with_containerd(series: &str) -> Option<crate::runtimes::Release> {
    let release = crate::runtimes::containerd(series);
    (ready()
        && require(
            release.is_some(),
            &format!("needs containerd {series} (scripts/runtimes-fetch.sh)"),
        ))
    .then(|| release.expect("checked"))
}

/// A free TCP port on 127.0.0.1 (bound, then released).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(l.local_addr()?.port())
}

/// The running cluster. Fields drop in declaration order after [`Drop::drop`] has stopped the
/// processes in dependency order.
pub struct Cluster {
    plugin: Option<Daemon>,
    nri_plugin: Option<Daemon>,
    kubelet: Option<Daemon>,
    kubelet_command: Option<Command>,
    scheduler: Option<Daemon>,
    controller_manager: Option<Daemon>,
    apiserver: Option<Daemon>,
    etcd: Option<Daemon>,
    containerd: Option<Containerd>,
    /// The bin dir of the containerd release the node runs; `None`: the machine's.
    containerd_release: Option<PathBuf>,
    node_namespace: Option<Daemon>,
    /// Mount points made on the host for the node namespace, removed again when empty.
    mount_points: Vec<PathBuf>,
    /// What `/var/log/pods` held before the cluster: anything else there is its pods'.
    pod_logs_before: BTreeSet<PathBuf>,
    /// The simulated devices and the host configuration the runtime uses.
    pub host: SimHost,
    bin: PathBuf,
    kubeconfig: PathBuf,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

/// How devinject gets onto the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setup {
    /// The test's own: `devinject-ctl runtime configure` (shim mode) on the node's containerd
    /// with the freshly built binaries, the device plugin as a process, the demo profile's
    /// simulated devices.
    Ctl,
    /// As users install it: nothing on the node; the test applies the manifests, whose
    /// DaemonSet installs into the node's containerd and runs the plugin in a pod.
    DaemonSet,
    /// CDI, with nothing of devinject's in the runtime: the node's containerd is the release
    /// whose binaries are in `containerd` (1.7 or later, see [`crate::runtimes`]) with
    /// `enable_cdi` reading the specs `devinject-ctl cdi generate` wrote (their `createRuntime`
    /// hook is `devinject-hook finish`); pods run on its default runtime, plain runc; the device
    /// plugin runs as a process with the demo profile in `cdi-annotations` allocate mode, so
    /// that its Allocate answer is a `cdi.k8s.io/` annotation the kubelet passes to the CRI.
    Cdi {
        /// The containerd release's bin dir.
        containerd: PathBuf,
    },
    /// NRI, with nothing of devinject's in the runtime: the node's containerd is the release
    /// whose binaries are in `containerd` (1.7 or later) with NRI enabled, `devinject-nri` runs
    /// as a process on its socket under the `kubernetes` policy (asking this kubelet), and the
    /// device plugin in its default `envvar` mode; pods run on plain runc.
    Nri {
        /// The containerd release's bin dir.
        containerd: PathBuf,
    },
    /// As users install devinject through NRI: the node's containerd is the release whose
    /// binaries are in `containerd` (1.7 or later) with NRI enabled on its default socket,
    /// [`NRI_SOCKET`] (in the node's namespace, a directory of the test's), and nothing of
    /// devinject is on the node; the test applies the NRI manifests. The node's `/` is a shared
    /// mount, as on every systemd host: containerd gives a hostPath `HostToContainer`
    /// propagation only from a shared or slave mount.
    DaemonSetNri {
        /// The containerd release's bin dir.
        containerd: PathBuf,
    },
}

/// containerd's default NRI socket, where the node's containerd listens in
/// [`Setup::DaemonSetNri`] (in the node's namespace; the host's `/run/nri` is not touched).
pub const NRI_SOCKET: &str = "/var/run/nri/nri.sock";

/// The allocate mode [`Setup::Cdi`] gives the demo profile (docs/profiles.md).
pub const CDI_ALLOCATE_MODE: &str = "cdi-annotations";

/// The kubelet's root dir, in the node's namespace (its tmpfs).
pub const KUBELET_ROOT: &str = "/var/lib/kubelet";

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("root", &self.root).finish()
    }
}

impl Cluster {
    /// Starts the whole cluster with the demo profile's devices, the runtime configured in
    /// shim mode with the `kubernetes` policy, and the device plugin registered; returns once
    /// the node is Ready and advertises the devices.
    pub fn start() -> Result<Self> {
        Self::start_with(Setup::Ctl)
    }

    /// Starts the cluster with devinject set up as `setup` says; with [`Setup::DaemonSet`] and
    /// [`Setup::DaemonSetNri`] it returns once the node is Ready, with nothing of devinject on
    /// it.
    pub fn start_with(setup: Setup) -> Result<Self> {
        let bin_dir = kube_bin_dir().context("the Kubernetes binaries (scripts/kube-build.sh)")?;
        let dir = short_tempdir("k8s")?;
        let root = dir.path().to_owned();
        let host = demo_host(&root.join("sim"), &["demo"])?;
        let mut c = Self {
            plugin: None,
            nri_plugin: None,
            kubelet: None,
            kubelet_command: None,
            scheduler: None,
            controller_manager: None,
            apiserver: None,
            etcd: None,
            containerd: None,
            containerd_release: None,
            node_namespace: None,
            mount_points: Vec::new(),
            pod_logs_before: pod_log_dirs(),
            host,
            bin: bin_dir,
            kubeconfig: root.join("kubeconfig"),
            root,
            _dir: dir,
        };
        c.start_control_plane()?;
        c.start_node(&setup)?;
        Ok(c)
    }

    fn kube(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    fn start_control_plane(&mut self) -> Result<()> {
        let pki = pki::make(&self.root.join("pki"))?;
        let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let mut etcd = Command::new(self.kube("etcd"));
        let client = format!("http://127.0.0.1:{etcd_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        etcd.arg("--name=devinject")
            .arg(format!("--data-dir={}", self.root.join("etcd").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=devinject={peer}"));
        self.etcd = Some(Daemon::start("etcd", etcd, &self.root.join("etcd.log"))?);

        let server = format!("https://127.0.0.1:{api_port}");
        std::fs::write(&self.kubeconfig, pki::kubeconfig(&pki, &server))?;
        let p = |p: &Path| p.display().to_string();
        let mut api = Command::new(self.kube("kube-apiserver"));
        api.arg(format!("--etcd-servers={client}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={api_port}"))
            .arg("--insecure-port=0")
            .arg("--advertise-address=127.0.0.1")
            .arg("--endpoint-reconciler-type=none")
            .arg(format!(
                "--cert-dir={}",
                self.root.join("apiserver-certs").display()
            ))
            .arg(format!("--tls-cert-file={}", p(&pki.server_cert)))
            .arg(format!("--tls-private-key-file={}", p(&pki.server_key)))
            .arg(format!("--client-ca-file={}", p(&pki.ca)))
            .arg(format!(
                "--kubelet-client-certificate={}",
                p(&pki.admin_cert)
            ))
            .arg(format!("--kubelet-client-key={}", p(&pki.admin_key)))
            .arg(format!(
                "--service-account-key-file={}",
                p(&pki.service_account_key)
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                p(&pki.service_account_key)
            ))
            .arg("--service-account-issuer=https://kubernetes.default.svc")
            .arg("--api-audiences=https://kubernetes.default.svc")
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg("--authorization-mode=Node,RBAC")
            .arg("--enable-admission-plugins=NodeRestriction")
            .arg("--allow-privileged=true");
        self.apiserver = Some(Daemon::start(
            "kube-apiserver",
            api,
            &self.root.join("apiserver.log"),
        )?);
        let kubectl = self.kubectl_command();
        self.apiserver.as_mut().expect("just started").wait_ready(
            "the apiserver's /readyz",
            || {
                let mut k = Command::new(kubectl.get_program());
                k.args(kubectl.get_args()).args(["get", "--raw=/readyz"]);
                output_within(k, Duration::from_secs(10))
                    .is_some_and(|o| o.is_ok_and(|o| o.status.success()))
            },
        )?;

        let mut cm = Command::new(self.kube("kube-controller-manager"));
        cm.arg(format!("--kubeconfig={}", p(&self.kubeconfig)))
            .arg("--bind-address=127.0.0.1")
            .arg("--port=0")
            .arg("--secure-port=0")
            .arg("--leader-elect=false")
            .arg(format!(
                "--cert-dir={}",
                self.root.join("cm-certs").display()
            ))
            .arg(format!(
                "--service-account-private-key-file={}",
                p(&pki.service_account_key)
            ))
            .arg(format!("--root-ca-file={}", p(&pki.ca)))
            .arg("--use-service-account-credentials=false");
        self.controller_manager = Some(Daemon::start(
            "kube-controller-manager",
            cm,
            &self.root.join("controller-manager.log"),
        )?);
        let mut sched = Command::new(self.kube("kube-scheduler"));
        sched
            .arg(format!("--kubeconfig={}", p(&self.kubeconfig)))
            .arg("--bind-address=127.0.0.1")
            .arg("--port=0")
            .arg("--secure-port=0")
            .arg("--leader-elect=false");
        self.scheduler = Some(Daemon::start(
            "kube-scheduler",
            sched,
            &self.root.join("scheduler.log"),
        )?);
        Ok(())
    }

    /// The node's containerd configuration, at `/etc/containerd/config.toml` in its namespace.
    pub fn containerd_config(&self) -> PathBuf {
        self.root.join("node/etc-containerd/config.toml")
    }

    /// The directory `devinject-ctl cdi generate` writes the specs into and containerd reads
    /// them from ([`Setup::Cdi`]).
    pub fn cdi_spec_dir(&self) -> PathBuf {
        self.root.join("cdi")
    }

    fn start_node(&mut self, setup: &Setup) -> Result<()> {
        let ctd_dir = self.root.join("ctd");
        let cni = ctd_dir.join("cni/conf");
        std::fs::create_dir_all(&cni)?;
        std::fs::write(
            cni.join("10-placeholder.conflist"),
            r#"{"cniVersion": "0.4.0", "name": "devinject-placeholder",
  "plugins": [{"type": "devinject-host-network-only"}]}"#,
        )?;
        let config = self.containerd_config();
        std::fs::create_dir_all(config.parent().expect("parent"))?;
        std::fs::create_dir_all(self.root.join("node/etc-devinject"))?;
        std::fs::create_dir_all(self.root.join("node/opt"))?;
        match setup {
            Setup::Cdi { containerd } => {
                set_allocate_mode(&self.host.profiles_dir.join("demo.toml"), CDI_ALLOCATE_MODE)?;
                let specs = self.cdi_spec_dir();
                cdi_generate(&self.host, &specs)?;
                let text = containerd_cdi_config(&ctd_dir, &specs) + CONTAINERD_NRI_OFF;
                std::fs::write(&config, text)?;
                self.containerd_release = Some(containerd.clone());
            }
            Setup::Nri { containerd } => {
                let text = containerd_config(&ctd_dir) + &containerd_nri_settings(&ctd_dir);
                std::fs::write(&config, text)?;
                self.containerd_release = Some(containerd.clone());
            }
            Setup::DaemonSetNri { containerd } => {
                let text = containerd_config(&ctd_dir)
                    + &containerd_nri_settings_on(&ctd_dir, Path::new(NRI_SOCKET));
                std::fs::write(&config, text)?;
                self.containerd_release = Some(containerd.clone());
            }
            Setup::Ctl | Setup::DaemonSet => {
                std::fs::write(&config, containerd_config(&ctd_dir))?;
            }
        }
        if matches!(setup, Setup::Ctl | Setup::Nri { .. }) {
            // The host configuration: the `kubernetes` policy asks this kubelet.
            let runc = which("runc").context("runc")?;
            self.host.write_config(&format!(
                "runtime = {:?}\nhook = {:?}\npod_resources_socket = \"{KUBELET_ROOT}/pod-resources/kubelet.sock\"",
                runc,
                bin("devinject-hook"),
            ))?;
        }
        if *setup == Setup::Ctl {
            configure(&self.root, &config, &self.host, "shim");
        }
        self.start_node_namespace(matches!(setup, Setup::DaemonSetNri { .. }))?;
        let containerd = Containerd::start_release_via(
            &ctd_dir,
            &config,
            &self.enter_node()?,
            self.containerd_release.as_deref(),
        )?;
        let mut cri = Cri::connect(&containerd.socket())?;
        cri.wait_ready()?;
        import_images(&self.root, &containerd, &mut cri);
        drop(cri);
        let socket = containerd.socket();
        self.containerd = Some(containerd);
        self.start_kubelet(&socket)?;
        self.wait_node_ready()?;
        if matches!(setup, Setup::Ctl | Setup::Cdi { .. } | Setup::Nri { .. }) {
            self.start_plugin()?;
            self.wait_allocatable("devinject.io/demo", "4")?;
        }
        if matches!(setup, Setup::Nri { .. }) {
            self.start_nri_plugin(&ctd_dir)?;
        }
        // Pods need the namespace's default service account, which the controller makes.
        poll("the default service account", SLOW, || {
            Ok(self
                .kubectl(&["get", "serviceaccount", "default"])
                .is_ok()
                .then_some(()))
        })?;
        Ok(())
    }

    fn start_kubelet(&mut self, containerd: &Path) -> Result<()> {
        let (port, healthz) = (free_port()?, free_port()?);
        let config = self.root.join("kubelet.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 address: 127.0.0.1\nport: {port}\nreadOnlyPort: 0\n\
                 healthzBindAddress: 127.0.0.1\nhealthzPort: {healthz}\n\
                 cgroupDriver: cgroupfs\nfailSwapOn: false\noomScoreAdj: 0\n\
                 authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: false}}\n\
                 authorization: {{mode: AlwaysAllow}}\n\
                 evictionHard: {{\"nodefs.available\": \"1%\", \"imagefs.available\": \"1%\", \"memory.available\": \"1Mi\"}}\n\
                 imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n\
                 resolvConf: /etc/resolv.conf\nserializeImagePulls: false\n\
                 volumePluginDir: {plugins}\n",
                plugins = self.root.join("volume-plugins").display(),
            ),
        )?;
        let mut cmd = self.in_node(&self.kube("kubelet"))?;
        cmd.arg(format!("--config={}", config.display()))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg("--container-runtime=remote")
            .arg(format!(
                "--container-runtime-endpoint=unix://{}",
                containerd.display()
            ))
            .arg(format!("--root-dir={KUBELET_ROOT}"))
            .arg(format!(
                "--cert-dir={}",
                self.root.join("kubelet-certs").display()
            ))
            .arg(format!("--hostname-override={NODE}"))
            .arg(format!(
                "--pod-infra-container-image={}",
                crate::cri_node::PAUSE
            ))
            .arg("--v=2");
        self.kubelet_command = Some(copy_command(&cmd));
        self.kubelet = Some(Daemon::start(
            "kubelet",
            cmd,
            &self.root.join("kubelet.log"),
        )?);
        Ok(())
    }

    /// Stops the kubelet and starts it again, as an upgrade or a crash would: it forgets its
    /// plugins (and deletes their sockets) and must take them back when they register again.
    pub fn restart_kubelet(&mut self) -> Result<()> {
        if let Some(mut k) = self.kubelet.take() {
            k.stop();
        }
        let cmd = copy_command(
            self.kubelet_command
                .as_ref()
                .context("no kubelet started")?,
        );
        let log = self.root.join("kubelet.log");
        let _ = std::fs::rename(&log, self.root.join("kubelet.log.1"));
        self.kubelet = Some(Daemon::start("kubelet", cmd, &log)?);
        Ok(())
    }

    /// Stops the node's containerd and starts it again on the same configuration, as an
    /// administrator does after the installer asked for it (`--restart-mode none`).
    pub fn restart_containerd(&mut self) -> Result<()> {
        if let Some(mut c) = self.containerd.take() {
            c.daemon().stop();
        }
        let log = self.root.join("ctd/containerd.log");
        let _ = std::fs::rename(&log, self.root.join("ctd/containerd.log.1"));
        let containerd = Containerd::start_release_via(
            &self.root.join("ctd"),
            &self.containerd_config(),
            &self.enter_node()?,
            self.containerd_release.as_deref(),
        )?;
        self.containerd = Some(containerd);
        Ok(())
    }

    /// The pid of the node's containerd: the same before and after a step proves the step did
    /// not restart it.
    pub fn containerd_pid(&self) -> Option<u32> {
        self.containerd.as_ref().and_then(Containerd::pid)
    }

    /// The node's containerd.
    pub fn node_containerd(&self) -> &Containerd {
        self.containerd
            .as_ref()
            .expect("the node's containerd runs")
    }

    /// The namespace the node runs in: a private mount namespace, held open by a sleeping
    /// process, where `/var/lib/kubelet` is a fresh tmpfs and `/opt`, `/etc/containerd` and
    /// `/etc/devinject` are the cluster's own directories: what the node writes there (the
    /// installer included) stays in the test. (`/opt` is on disk, not a tmpfs: files the
    /// installer copies there would be charged to its memory limit as unreclaimable.) With
    /// `nri`, `/run/nri` is the cluster's own too (containerd's default NRI socket is there),
    /// and the namespace's mounts are then made shared, as a systemd host's are, for the NRI
    /// pod's `HostToContainer` hostPath of `/`; they stay in the namespace, copies of the
    /// host's that are peers of nothing outside it.
    fn start_node_namespace(&mut self, nri: bool) -> Result<()> {
        let mut dirs = vec!["/var/lib/kubelet", "/etc/containerd", "/etc/devinject"];
        if nri {
            dirs.push("/run/nri");
            std::fs::create_dir_all(self.root.join("node/run-nri"))?;
        }
        for dir in dirs {
            if !Path::new(dir).exists() {
                std::fs::create_dir_all(dir).with_context(|| format!("mkdir {dir}"))?;
                self.mount_points.push(PathBuf::from(dir));
            }
        }
        let node = self.root.join("node");
        let mut script = String::from(
            "set -e; mount -t tmpfs -o mode=0755 devinject-node /var/lib/kubelet; \
             mount --bind \"$0/opt\" /opt; \
             mount --bind \"$0/etc-containerd\" /etc/containerd; \
             mount --bind \"$0/etc-devinject\" /etc/devinject; ",
        );
        if nri {
            script.push_str("mount --bind \"$0/run-nri\" /run/nri; mount --make-rshared /; ");
        }
        script.push_str("exec sleep infinity");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .arg(&node);
        let mut holder = Daemon::start("node namespace", cmd, &self.root.join("node-ns.log"))?;
        let pid = holder.pid().context("holder pid")?;
        // The script execs `sleep` once its last mount is made.
        holder.wait_ready("the node namespace's mounts", || {
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .is_ok_and(|m| m.lines().any(|l| l.contains(" /etc/devinject ")))
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
        })?;
        self.node_namespace = Some(holder);
        Ok(())
    }

    /// `nsenter` into the node's mount namespace, as a command prefix.
    fn enter_node(&self) -> Result<Vec<String>> {
        let pid = self
            .node_namespace
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
        let prefix = self.enter_node()?;
        let mut cmd = Command::new(&prefix[0]);
        cmd.args(&prefix[1..]).arg(program);
        Ok(cmd)
    }

    /// The kubelet's pid (its mount namespace holds the device-plugins directory).
    fn kubelet_pid(&self) -> Result<u32> {
        self.kubelet
            .as_ref()
            .and_then(Daemon::pid)
            .context("the kubelet is not running")
    }

    /// A path as the kubelet sees it.
    pub fn in_node_ns(&self, path: &str) -> Result<PathBuf> {
        Ok(PathBuf::from(format!("/proc/{}/root", self.kubelet_pid()?))
            .join(path.trim_start_matches('/')))
    }

    fn start_plugin(&mut self) -> Result<()> {
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
            .arg(self.host.dir.join("sys"));
        self.plugin = Some(Daemon::start(
            "devinject-device-plugin",
            cmd,
            &self.root.join("plugin.log"),
        )?);
        Ok(())
    }

    /// Starts `devinject-nri` in the node's namespace on the node containerd's NRI socket, and
    /// waits until it has registered.
    fn start_nri_plugin(&mut self, ctd_dir: &Path) -> Result<()> {
        let mut cmd = self.in_node(&bin("devinject-nri"))?;
        cmd.arg("--socket")
            .arg(nri_socket(ctd_dir))
            .arg("--config")
            .arg(&self.host.config);
        let log = self.root.join("nri.log");
        self.nri_plugin = Some(Daemon::start("devinject-nri", cmd, &log)?);
        poll("devinject-nri to register", SLOW, || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            Ok(text.contains(REGISTERED).then_some(()))
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Waits until the node reports Ready.
    pub fn wait_node_ready(&mut self) -> Result<()> {
        poll("the node to be Ready", SLOW, || {
            if let Some(k) = self.kubelet.as_mut() {
                k.check_running()?;
            }
            let ready = self
                .kubectl(&[
                    "get",
                    "node",
                    NODE,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                ])
                .unwrap_or_default();
            Ok((ready == "True").then_some(()))
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Waits until the node's allocatable `resource` is `count`.
    pub fn wait_allocatable(&self, resource: &str, count: &str) -> Result<()> {
        let path = format!(
            "jsonpath={{.status.allocatable.{}}}",
            resource.replace('.', "\\.")
        );
        poll(&format!("{resource} allocatable = {count}"), SLOW, || {
            let have = self
                .kubectl(&["get", "node", NODE, "-o", &path])
                .unwrap_or_default();
            Ok((have == count).then_some(()))
        })
        .map_err(|e| e.context(self.logs()))
    }

    fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(self.kube("kubectl"));
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        cmd
    }

    /// Runs `kubectl args`; its stdout, trimmed.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let mut cmd = self.kubectl_command();
        cmd.args(args);
        run_ok(cmd).map(|s| s.trim().to_owned())
    }

    /// `kubectl apply` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String> {
        let file = self.root.join(format!("apply-{}.yaml", std::process::id()));
        std::fs::write(&file, yaml)?;
        self.kubectl(&["apply", "-f", &file.display().to_string()])
    }

    /// The pod `name` in the default namespace, as JSON.
    pub fn pod(&self, name: &str) -> Result<Value> {
        let text = self.kubectl(&["get", "pod", name, "-o", "json"])?;
        serde_json::from_str(&text).context("parse kubectl's pod JSON")
    }

    /// Waits until pod `name` has ended (Succeeded or Failed); returns the phase.
    pub fn wait_pod_done(&self, name: &str) -> Result<String> {
        poll(&format!("pod {name} to finish"), SLOW, || {
            let phase = self.pod(name)?["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            Ok(matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase))
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Waits until `check` finds what it wants in pod `name`'s JSON.
    pub fn wait_pod<T>(
        &self,
        name: &str,
        what: &str,
        mut check: impl FnMut(&Value) -> Option<T>,
    ) -> Result<T> {
        poll(&format!("pod {name}: {what}"), SLOW, || {
            Ok(check(&self.pod(name)?))
        })
        .map_err(|e| e.context(self.logs()))
    }

    /// Waits until pod `name`'s main container is refused by devinject, and returns the refusal
    /// (the message of its waiting or terminated state, or of its last termination).
    pub fn wait_refusal(&self, name: &str) -> Result<String> {
        self.wait_pod(name, "a start refused by devinject", |pod| {
            let status = &pod["status"]["containerStatuses"][0];
            [
                &status["state"]["waiting"]["message"],
                &status["state"]["terminated"]["message"],
                &status["lastState"]["terminated"]["message"],
            ]
            .into_iter()
            .filter_map(Value::as_str)
            .find(|m| m.contains("devinject"))
            .map(str::to_owned)
        })
    }

    /// The output of container `container` of pod `name` (its CRI log under `/var/log/pods`).
    pub fn container_log(&self, name: &str, container: &str) -> Result<String> {
        let uid = self.pod(name)?["metadata"]["uid"]
            .as_str()
            .context("pod uid")?
            .to_owned();
        let dir = Path::new("/var/log/pods")
            .join(format!("default_{name}_{uid}"))
            .join(container);
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("list {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .collect();
        logs.sort();
        let last = logs
            .last()
            .with_context(|| format!("no log in {}", dir.display()))?;
        crate::cri::read_log(last)
    }

    /// The CRI status of container `container` of pod `name`, as the node's containerd reports
    /// it: its annotations are those the kubelet passed in CreateContainer, the device plugin's
    /// Allocate annotations included.
    pub fn cri_container_status(
        &self,
        name: &str,
        container: &str,
    ) -> Result<k8s_cri::v1::ContainerStatus> {
        let pod = self.pod(name)?;
        let id = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == container)
            .and_then(|s| s["containerID"].as_str())
            .with_context(|| format!("pod {name} has no container id for {container}"))?;
        // `containerd://<id>`
        let id = id.split_once("://").map_or(id, |(_, id)| id);
        let containerd = self
            .containerd
            .as_ref()
            .context("the node's containerd is not running")?;
        Cri::connect(&containerd.socket())?.container_status(id)
    }

    /// The device ids the kubelet's checkpoint says it allocated to `container` of the pod with
    /// `uid`, for `resource`.
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
                for per_numa in e["DeviceIDs"]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                {
                    ids.extend(
                        per_numa
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|i| i.as_str().map(str::to_owned)),
                    );
                }
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// The current kubelet's log (since its last start).
    pub fn kubelet_log(&self) -> String {
        std::fs::read_to_string(self.root.join("kubelet.log")).unwrap_or_default()
    }

    /// How many times the device plugin has registered with the kubelet (its log).
    pub fn plugin_registrations(&self) -> usize {
        std::fs::read_to_string(self.root.join("plugin.log"))
            .unwrap_or_default()
            .matches("registered with the kubelet")
            .count()
    }

    /// The last lines of every component's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for d in [
            &self.kubelet,
            &self.plugin,
            &self.nri_plugin,
            &self.apiserver,
            &self.scheduler,
            &self.controller_manager,
            &self.etcd,
        ]
        .into_iter()
        .flatten()
        {
            s.push_str(&d.log_tail());
        }
        if let Some(c) = &self.containerd {
            s.push_str(&c.log_tail());
        }
        s
    }

    /// The runtime handler pods name through their RuntimeClass.
    pub fn runtime_class(&self) -> Result<()> {
        self.apply(&format!(
            "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {HANDLER}\nhandler: {HANDLER}\n"
        ))
        .map(|_| ())
    }

    fn teardown(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "cluster in {} at failure:\n{}",
                self.root.display(),
                self.logs()
            );
        }
        // Pods first, while the kubelet can still stop them.
        let _ = self.kubectl(&[
            "delete",
            "pods",
            "--all",
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]);
        let _ = poll("the pods to go", Duration::from_secs(30), || {
            Ok(self
                .kubectl(&["get", "pods", "-o", "name"])
                .map(|s| s.is_empty())
                .unwrap_or(true)
                .then_some(()))
        });
        for d in [
            &mut self.nri_plugin,
            &mut self.plugin,
            &mut self.kubelet,
            &mut self.scheduler,
            &mut self.controller_manager,
            &mut self.apiserver,
            &mut self.etcd,
        ] {
            if let Some(mut d) = d.take() {
                d.stop();
            }
        }
        // The kubelet's pod sandboxes, if any outlived it.
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
        if let Some(mut holder) = self.node_namespace.take() {
            holder.stop();
        }
        unmount_below(&self.root);
        remove_pod_cgroups();
        for dir in self.mount_points.drain(..) {
            let _ = std::fs::remove_dir(dir);
        }
        // The pods' log directories, which the kubelet would have collected later.
        for dir in pod_log_dirs().difference(&self.pod_logs_before) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Sets the top-level `allocate_mode` of the profile at `path` to `mode`: any such line goes,
/// and the new one comes first, before the profile's tables.
fn set_allocate_mode(path: &Path, mode: &str) -> Result<()> {
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

/// The entries of `/var/log/pods` (the kubelet's constant pod log directory).
fn pod_log_dirs() -> BTreeSet<PathBuf> {
    std::fs::read_dir("/var/log/pods")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// Removes the kubelet's `kubepods` cgroups (deepest first) on every hierarchy.
fn remove_pod_cgroups() {
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for h in hierarchies.flatten() {
        let top = h.path().join("kubepods");
        if top.is_dir() {
            let mut dirs = Vec::new();
            collect_dirs(&top, &mut dirs);
            for d in dirs.iter().rev() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
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

impl Drop for Cluster {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// A copy of `cmd`'s program and arguments (a [`Command`] cannot be cloned).
fn copy_command(cmd: &Command) -> Command {
    let mut c = Command::new(cmd.get_program());
    c.args(cmd.get_args());
    c
}
