//! A real Kubernetes cluster for tests: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and one or more nodes, each a kubelet (v1.37, built from its Go modules by
//! scripts/kube-module-build.sh; v1.20.2 for compatibility, from Debian's source package by
//! scripts/kube-build.sh) driving a private containerd over CRI with the `devinject`
//! runtime that `devinject-ctl` configures (or, with [`Setup::Cdi`], a containerd release reading
//! the CDI specs `devinject-ctl cdi generate` wrote, with no devinject runtime), and the real
//! `devinject-device-plugin`. Nothing is mocked; only the devices are simulated (a [`SimHost`]
//! per node).
//!
//! # How it fits on one machine
//! - Everything listens on 127.0.0.1, on free ports; certificates come from [`pki`].
//! - The kubelet 1.20 looks for device plugins in the constant `/var/lib/kubelet/device-plugins`,
//!   whatever its root dir. Each node (containerd, its shims and runc, the kubelet, the device
//!   plugin) runs in its own private mount namespace, held by a sleeping process, with a tmpfs on
//!   `/var/lib/kubelet`: the host's is never touched, a hostPath of the device-plugins directory
//!   means that node's kubelet's, and the kubelet can restart into the same namespace. The
//!   kubelet's root dir, and so the pod-resources socket the runtime's policy asks, is in the
//!   temp dir, visible from both sides. [`node`] says what else each node has of its own
//!   (`/var/log/pods`, ports, cgroup root, containerd).
//! - No CNI: pods use the host network; a placeholder network config (naming a plugin that does
//!   not exist, never called for host-network pods) lets a node become Ready.
//! - Pod logs are read from the node's own `/var/log/pods`, where its containerd writes them:
//!   `kubectl logs` would need the apiserver to reach the loopback-only kubelet.
//! - The machine refuses negative `oom_score_adj`: the kubelets run with `oomScoreAdj: 0` and
//!   containerd with `restrict_oom_score_adj`.
//! - The scheduler runs with its defaults, or with a configuration file such as the shipped
//!   bin-packing profile ([`Shape::scheduler_config`]).
//!
//! [`Cluster`] tears everything down in `Drop`, also when a test fails: pods, the plugins, the
//! kubelets (their pod cgroups and mounts), the control plane, containerd, the temp dir.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::cri::Cri;
use crate::cri_node::HANDLER;
use crate::daemons::{
    output_within, poll, run_ok, slash_tmp_tempdir, unmount_below, Containerd, Daemon,
};
use crate::sim::{SimHost, ACCELS};
use crate::skip::{require, require_binary, require_root};

pub mod dra;
pub mod fleet;
pub mod image;
pub mod install;
pub mod kubernetes;
pub mod node;
pub mod one_at_a_time;
pub mod pki;
pub mod pod_state;
pub mod userns;

pub use kubernetes::Kubernetes;
pub use node::Node;
pub use userns::{user_namespaced, user_namespaced_pods_ready};

/// The CNI plugins a node needs for pods off the host network (containerd runs `loopback` for
/// every such pod besides the network's own).
pub const CNI_PLUGINS: [&str; 3] = ["loopback", "ptp", "host-local"];

/// The CNI network of pods off the host network: a namespace of their own with `lo` and an
/// `eth0` of CNI's `ptp` plugin (a veth pair and a host route to the pod's address, both gone
/// with the pod; no bridge, no masquerading), since a CRI runtime needs an address to report
/// for the pod. Addresses come from `host-local`, its state in `ipam_dir`.
pub fn pod_network(ipam_dir: &Path) -> String {
    format!(
        r#"{{"cniVersion": "1.0.0", "name": "devinject-pods",
  "plugins": [{{"type": "ptp", "ipam": {{"type": "host-local",
    "ranges": [[{{"subnet": "10.244.0.0/24"}}]], "dataDir": "{}"}}}}]}}"#,
        ipam_dir.display()
    )
}

/// The directory holding [`CNI_PLUGINS`] (`DEVINJECT_CNI_BIN`, built by scripts/cni-build.sh):
/// with them a node's pods may leave the host network, each in a network namespace of its own
/// (a user-namespaced pod must: `hostUsers: false` excludes `hostNetwork`).
pub fn cni_plugins() -> Option<PathBuf> {
    std::env::var_os("DEVINJECT_CNI_BIN")
        .map(PathBuf::from)
        .filter(|dir| CNI_PLUGINS.iter().all(|p| dir.join(p).is_file()))
}

/// The first node's name; further nodes are `devinject-node-2`, `devinject-node-3`, ...
pub const NODE: &str = "devinject-node";
/// How long the cluster may take to come up, or a pod to finish.
pub const SLOW: Duration = Duration::from_secs(120);

/// Whether this machine can run a cluster: root, containerd and ctr, runc, openssl, unshare,
/// nsenter, busybox, gcc and the Kubernetes binaries, and for today's release containerd 2
/// (scripts/runtimes-fetch.sh); each missing one is a loud skip (a failure under CI).
pub fn ready() -> bool {
    let kubernetes = Kubernetes::find();
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
            kubernetes.is_some(),
            "needs the Kubernetes binaries (DEVINJECT_KUBE_BIN: scripts/kube-module-build.sh, \
             or the v1.20.2 of scripts/kube-build.sh)",
        )
        && require(
            kubernetes.is_some_and(|k| k.is_legacy()) || crate::runtimes::containerd("2").is_some(),
            "needs containerd 2 for Kubernetes >= 1.24 (scripts/runtimes-fetch.sh)",
        )
}

/// [`ready`], and the node's containerd fetched (scripts/runtimes-fetch.sh): `series` on the
/// compatibility release, containerd 2 on today's ([`kubernetes`]).
pub fn ready_with_containerd(series: &str) -> Option<crate::runtimes::Release> {
    let series = match Kubernetes::find() {
        Some(k) if !k.is_legacy() => "2",
        _ => series,
    };
    let release = crate::runtimes::containerd(series);
    (ready()
        && require(
            release.is_some(),
            &format!("needs containerd {series} (scripts/runtimes-fetch.sh)"),
        ))
    .then(|| release.expect("checked"))
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(l.local_addr()?.port())
}

/// The running cluster. Fields drop in declaration order after [`Drop::drop`] has stopped the
/// processes in dependency order.
pub struct Cluster {
    /// The nodes, the first named [`NODE`].
    nodes: Vec<Node>,
    scheduler: Option<Daemon>,
    controller_manager: Option<Daemon>,
    apiserver: Option<Daemon>,
    etcd: Option<Daemon>,
    /// Mount points made on the host for the node namespaces, removed again when empty.
    mount_points: Vec<PathBuf>,
    kubernetes: Kubernetes,
    kubeconfig: PathBuf,
    /// The API server's port on 127.0.0.1 (0 until the control plane starts).
    api_port: u16,
    root: PathBuf,
    _dir: tempfile::TempDir,
    /// Dropped last, after the teardown: the next cluster of this process may start.
    _one: one_at_a_time::OneAtATime,
}

/// How many nodes the cluster has, how many demo devices each, and how its scheduler is set up.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The nodes, each with its own namespace, containerd, kubelet, plugin and devices.
    pub nodes: usize,
    /// The demo accelerators on each node: the first `devices` of [`ACCELS`] (with
    /// [`Shape::node_host`], the devices its host has, which a DRA cluster waits to see).
    pub devices: usize,
    /// A kube-scheduler configuration file (`kubescheduler.config.k8s.io/v1beta1`, the API of
    /// this release), used as it is but for `clientConnection.kubeconfig` and its insecure
    /// serving addresses, which become the test's (see [`scheduler_config`]); `None`: the
    /// scheduler's defaults.
    pub scheduler_config: Option<PathBuf>,
    /// The CRI-O bin dir (scripts/crio-build.sh): the nodes run CRI-O ([`node`]'s `crio`)
    /// instead of containerd, with [`Setup::DaemonSet`] or [`Setup::Cdi`]; `None`: containerd.
    pub crio: Option<PathBuf>,
    /// With [`Shape::crio`] and [`Cluster::start_per_node`]: the nodes (by index) that run
    /// CRI-O, the others containerd; empty: every node runs CRI-O.
    pub crio_nodes: Vec<usize>,
    /// Another node than the demo profile's: each node's simulated host made by this function
    /// in the directory given (a vendor's real user space, `crate::vendor`), and what it adds
    /// to the test image; `None`: the demo host and the plain test image.
    pub node_host: Option<NodeHost>,
    /// The devices each [`Setup::Dra`] node publishes, where that is not `devices` (a
    /// [`Shape::node_host`] with more profiles than the demo's, whose demo devices the device
    /// plugins of the other nodes advertise as `devices`); `None`: `devices`.
    pub dra_devices: Option<usize>,
    /// Feature gates the API server, the controller manager and the scheduler start with
    /// (`--feature-gates`, e.g. `DRAFractionalCapacityRange=true`); empty: their defaults.
    pub control_plane_gates: &'static str,
}

/// A node's simulated host other than the demo's ([`Shape::node_host`]).
#[derive(Debug, Clone, Copy)]
pub struct NodeHost {
    /// Makes the host in the directory given.
    pub make: fn(&Path) -> Result<SimHost>,
    /// Adds to the test image's rootfs what the pods run.
    pub image: fn(&Path) -> Result<()>,
}

/// `--feature-gates=<gates>` on a control-plane component, where there are any
/// ([`Shape::control_plane_gates`]).
fn with_gates(cmd: &mut Command, gates: &str) {
    if !gates.is_empty() {
        cmd.arg(format!("--feature-gates={gates}"));
    }
}

impl Default for Shape {
    /// One node with all the demo accelerators, the default scheduler.
    fn default() -> Self {
        Self {
            nodes: 1,
            devices: ACCELS.len(),
            scheduler_config: None,
            crio: None,
            crio_nodes: Vec::new(),
            node_host: None,
            dra_devices: None,
            control_plane_gates: "",
        }
    }
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
    /// plugin runs as a process with the demo profile in `allocate_mode`: `cdi-annotations`
    /// ([`CDI_ALLOCATE_MODE`]), so that its Allocate answer is a `cdi.k8s.io/` annotation the
    /// kubelet passes to the CRI, or `cdi-cri`, so that it is the answer's `cdi_devices`, which a
    /// kubelet >= 1.28 passes as the container's CDI devices.
    Cdi {
        /// The containerd release's bin dir.
        containerd: PathBuf,
        /// The demo profile's `allocate_mode`.
        allocate_mode: &'static str,
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
    /// Dynamic Resource Allocation, with nothing of devinject's in the runtime: the node's
    /// containerd (or CRI-O, with [`Shape::crio`]) reads CDI specs from the node's
    /// [`Node::cdi_spec_dir`], which starts empty; `devinject-dra` runs as a process on each node
    /// with the cluster's kubeconfig, publishes the demo devices as ResourceSlices and writes a
    /// transient spec per prepared claim there. No device plugin runs; the test applies the
    /// DeviceClasses (`devinject-dra device-classes`). Pods run on plain runc.
    Dra {
        /// The containerd release's bin dir (ignored on CRI-O).
        containerd: PathBuf,
        /// What else serves the demo devices on the node (containerd only).
        beside: DraBeside,
    },
    /// As users install devinject as a DRA driver: the node's containerd 2 reads CDI specs from
    /// its default directory, `/var/run/cdi` (in the node's namespace, a directory of the
    /// test's: the host's is not touched), and nothing of devinject is on the node; the test
    /// applies the DRA manifests. The node's `/` is a shared mount, as for
    /// [`Setup::DaemonSetNri`].
    DaemonSetDra {
        /// The containerd release's bin dir.
        containerd: PathBuf,
    },
}

/// What serves the node beside `devinject-dra` in [`Setup::Dra`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraBeside {
    /// Nothing: DRA alone.
    Nothing,
    /// `devinject-nri` on containerd's NRI socket under the `kubernetes` policy, as
    /// [`Setup::Nri`] runs it: an engine path beside the DRA driver.
    Nri,
    /// The device plugin, answering with CDI devices (`cdi-cri`) from the specs
    /// `devinject-ctl cdi generate` wrote, as [`Setup::Cdi`] runs it: the device plugin path
    /// and the DRA path on one node, for the benchmark (the two hand out the same devices, so
    /// only one pod at a time may hold one).
    DevicePlugin,
}

/// containerd's default NRI socket, where the node's containerd listens in
/// [`Setup::DaemonSetNri`] (in the node's namespace; the host's `/run/nri` is not touched).
pub const NRI_SOCKET: &str = "/var/run/nri/nri.sock";

/// The allocate mode that makes the plugin answer with a CDI annotation (docs/profiles.md).
pub const CDI_ALLOCATE_MODE: &str = "cdi-annotations";
/// The allocate mode that makes the plugin answer with `cdi_devices` (docs/profiles.md).
pub const CDI_CRI_ALLOCATE_MODE: &str = "cdi-cri";

/// The annotation devinject's admission webhook puts on a pod it rewrote.
pub const WEBHOOK_ANNOTATION: &str = "devinject.io/functions";

/// The CDI directory runtimes read by default and devinject-dra writes by default; in the
/// node's namespace with [`Setup::DaemonSetDra`].
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// The DRA driver name devinject's driver publishes under (its default).
pub const DRA_DRIVER: &str = "devinject.io";

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
        Self::start_shaped(setup, &Shape::default())
    }

    /// Starts the cluster as [`Cluster::start_with`] does, with `shape`'s nodes, devices and
    /// scheduler; returns once every node is Ready (and, where the test runs the device plugin,
    /// advertises its devices).
    pub fn start_shaped(setup: Setup, shape: &Shape) -> Result<Self> {
        let setups = vec![setup; shape.nodes];
        Self::start_nodes_as(&setups, shape)
    }

    /// Starts the cluster with one node per entry of `setups`, each set up as its entry says
    /// (e.g. one node on the shim and one on NRI), with `shape`'s devices and scheduler
    /// (`shape.nodes` is ignored); returns once every node is Ready and, where the test runs the
    /// device plugin, advertises its devices.
    pub fn start_per_node(setups: &[Setup], shape: &Shape) -> Result<Self> {
        Self::start_nodes_as(setups, shape)
    }

    /// Starts the control plane alone (etcd, API server, controller manager, scheduler), with
    /// no node: for nodes the test simulates itself ([`fleet`]).
    pub fn start_control_plane_only() -> Result<Self> {
        Self::start_nodes_as(&[], &Shape::default())
    }

    fn start_nodes_as(setups: &[Setup], shape: &Shape) -> Result<Self> {
        let kubernetes = Kubernetes::find().context(
            "the Kubernetes binaries (scripts/kube-module-build.sh or scripts/kube-build.sh)",
        )?;
        println!(
            "cluster: Kubernetes {} from {}",
            kubernetes.version(),
            kubernetes.binary("").display()
        );
        let one = one_at_a_time::OneAtATime::take();
        // Directly under /tmp, not in scripts/test.sh's tmpfs: a CRI-O node's storage run
        // root, four levels below, must stay within containers/storage's 50 bytes.
        let dir = slash_tmp_tempdir("k8s")?;
        let root = dir.path().to_owned();
        let mut c = Self {
            nodes: Vec::new(),
            scheduler: None,
            controller_manager: None,
            apiserver: None,
            etcd: None,
            mount_points: Vec::new(),
            kubernetes,
            kubeconfig: root.join("kubeconfig"),
            api_port: 0,
            root,
            _dir: dir,
            _one: one,
        };
        let started = std::time::Instant::now();
        c.start_control_plane(shape.scheduler_config.as_deref(), shape.control_plane_gates)?;
        let control_plane = started.elapsed();
        c.start_nodes(setups, shape)?;
        // What a cluster costs each test that starts one, in the log.
        println!(
            "cluster: up in {:.1?} (the control plane in {control_plane:.1?})",
            started.elapsed()
        );
        // The nodes as a user sees them, their runtime and its version included.
        println!(
            "$ kubectl get nodes -o wide\n{}",
            c.kubectl(&["get", "nodes", "-o", "wide"])?
        );
        Ok(c)
    }

    fn kube(&self, name: &str) -> PathBuf {
        self.kubernetes.binary(name)
    }

    /// The Kubernetes release it runs.
    pub fn kubernetes(&self) -> &Kubernetes {
        &self.kubernetes
    }

    fn start_control_plane(&mut self, scheduler_config: Option<&Path>, gates: &str) -> Result<()> {
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
        self.api_port = api_port;
        std::fs::write(&self.kubeconfig, pki::kubeconfig(&pki, &server))?;
        let p = |p: &Path| p.display().to_string();
        let mut api = Command::new(self.kube("kube-apiserver"));
        api.arg(format!("--etcd-servers={client}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={api_port}"))
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
            // No service proxy here: the API server reaches a webhook's Service through its
            // endpoints (a host-network pod's address) instead of its cluster IP.
            .arg("--enable-aggregator-routing=true")
            .arg("--allow-privileged=true");
        if self.kubernetes.is_legacy() {
            // Off by default since 1.20's successors, removed in 1.24.
            api.arg("--insecure-port=0");
        }
        with_gates(&mut api, gates);
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
        if self.kubernetes.is_legacy() {
            // The insecure port, removed in 1.24.
            cm.arg("--port=0");
        }
        with_gates(&mut cm, gates);
        self.controller_manager = Some(Daemon::start(
            "kube-controller-manager",
            cm,
            &self.root.join("controller-manager.log"),
        )?);
        self.start_scheduler(scheduler_config, gates)
    }

    /// Starts kube-scheduler, with `config` (see [`Shape::scheduler_config`]) or its defaults.
    /// With a file, 1.20 takes the insecure serving addresses from it and ignores `--port`
    /// (`ApplyToFromLoadedConfig`), and it elects a leader unless the file says otherwise.
    fn start_scheduler(&mut self, config: Option<&Path>, gates: &str) -> Result<()> {
        let mut sched = Command::new(self.kube("kube-scheduler"));
        sched.arg("--bind-address=127.0.0.1").arg("--secure-port=0");
        with_gates(&mut sched, gates);
        match config {
            Some(shipped) => {
                let text = std::fs::read_to_string(shipped)
                    .with_context(|| format!("read {}", shipped.display()))?;
                let file = self.root.join("scheduler-config.yaml");
                std::fs::write(
                    &file,
                    scheduler_config(
                        &text,
                        &self.kubeconfig,
                        match self.kubernetes.is_legacy() {
                            true => Some(free_port()?),
                            false => None,
                        },
                    ),
                )?;
                sched.arg(format!("--config={}", file.display()));
            }
            None => {
                sched
                    .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                    .arg("--leader-elect=false");
                if self.kubernetes.is_legacy() {
                    sched.arg("--port=0");
                }
            }
        }
        self.scheduler = Some(Daemon::start(
            "kube-scheduler",
            sched,
            &self.root.join("scheduler.log"),
        )?);
        Ok(())
    }

    /// Starts a node per entry of `setups` (their containerd and kubelet side by side), waits
    /// until they are Ready, then starts what each node's setup runs as processes on it.
    fn start_nodes(&mut self, setups: &[Setup], shape: &Shape) -> Result<()> {
        for setup in setups {
            self.make_mount_points(setup)?;
        }
        for (i, setup) in setups.iter().enumerate() {
            let name = match i {
                0 => NODE.to_owned(),
                _ => format!("{NODE}-{}", i + 1),
            };
            let node = Node::new(
                &name,
                self.root.join(&name),
                shape.devices,
                shape
                    .crio
                    .clone()
                    .filter(|_| shape.crio_nodes.is_empty() || shape.crio_nodes.contains(&i)),
                shape.node_host,
            )?;
            self.nodes.push(node);
            let node = self.nodes.last_mut().expect("just pushed");
            node.start(setup, &self.kubernetes, &self.kubeconfig)?;
        }
        if !setups.is_empty() {
            self.wait_node_ready()?;
        }
        let mut plugins = Vec::new();
        for (i, (node, setup)) in self.nodes.iter_mut().zip(setups).enumerate() {
            if matches!(
                setup,
                Setup::Ctl
                    | Setup::Cdi { .. }
                    | Setup::Nri { .. }
                    | Setup::Dra {
                        beside: DraBeside::DevicePlugin,
                        ..
                    }
            ) {
                node.start_plugin(&self.kubeconfig)?;
                plugins.push(i);
            }
        }
        self.wait_allocatable_on(&plugins, "devinject.io/demo", &shape.devices.to_string())?;
        for (node, setup) in self.nodes.iter_mut().zip(setups) {
            if matches!(
                setup,
                Setup::Nri { .. }
                    | Setup::Dra {
                        beside: DraBeside::Nri,
                        ..
                    }
            ) {
                node.start_nri_plugin()?;
            }
        }
        let dra = setups
            .iter()
            .filter(|s| matches!(s, Setup::Dra { .. }))
            .count();
        if dra > 0 {
            let kubeconfig = self.kubeconfig.clone();
            for (node, setup) in self.nodes.iter_mut().zip(setups) {
                if matches!(setup, Setup::Dra { .. }) {
                    node.start_dra_plugin(&kubeconfig)?;
                }
            }
            self.wait_resource_slices(shape.dra_devices.unwrap_or(shape.devices) * dra)?;
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

    /// Makes the host directories the node namespaces mount over ([`node::host_mount_points`])
    /// where they are missing, with their missing parents, and remembers each directory it
    /// made for the teardown (which removes them deepest first).
    fn make_mount_points(&mut self, setup: &Setup) -> Result<()> {
        for dir in node::host_mount_points(setup) {
            let missing: Vec<&Path> = Path::new(dir)
                .ancestors()
                .take_while(|d| !d.exists())
                .collect();
            for d in missing.into_iter().rev() {
                std::fs::create_dir(d).with_context(|| format!("mkdir {}", d.display()))?;
                self.mount_points.push(d.to_owned());
            }
        }
        Ok(())
    }

    /// Waits until the ResourceSlices of devinject's DRA driver list `devices` devices in all,
    /// partitions not counted ([`Cluster::resource_slice_devices`]).
    pub fn wait_resource_slices(&self, devices: usize) -> Result<()> {
        poll(
            &format!("ResourceSlices listing {devices} devices"),
            SLOW,
            || Ok((self.resource_slice_devices()?.len() == devices).then_some(())),
        )
        .map_err(|e| e.context(self.logs()))
    }

    /// The devices of devinject's DRA driver in the cluster's ResourceSlices, as
    /// `(pool, device name)`: those of [`Cluster::whole_dra_devices`].
    pub fn resource_slice_devices(&self) -> Result<Vec<(String, String)>> {
        Ok(self
            .whole_dra_devices()?
            .into_iter()
            .map(|(pool, d)| (pool, d["name"].as_str().unwrap_or_default().to_owned()))
            .collect())
    }

    /// [`Cluster::dra_slice_devices`] but the partitions of a partitioned profile's devices
    /// (those with the attribute `partition`, as the shipped demo profile publishes on 1.36 and
    /// later): each device or share once.
    pub fn whole_dra_devices(&self) -> Result<Vec<(String, Value)>> {
        let mut devices = self.dra_slice_devices()?;
        devices.retain(|(_, d)| d["attributes"][devinject_dra::slices::ATTR_PARTITION].is_null());
        Ok(devices)
    }

    /// Device `name` of devinject's DRA driver as a ResourceSlice holds it, if one does.
    pub fn resource_slice_device(&self, name: &str) -> Result<Option<Value>> {
        Ok(self
            .dra_slice_devices()?
            .into_iter()
            .map(|(_, d)| d)
            .find(|d| d["name"] == name))
    }

    /// The devices of devinject's DRA driver in the cluster's ResourceSlices, with their pools.
    pub fn dra_slice_devices(&self) -> Result<Vec<(String, Value)>> {
        let list: Value =
            serde_json::from_str(&self.kubectl(&["get", "resourceslices", "-o", "json"])?)
                .context("parse the ResourceSlices")?;
        let mut devices = Vec::new();
        for slice in list["items"].as_array().into_iter().flatten() {
            if slice["spec"]["driver"] != DRA_DRIVER {
                continue;
            }
            let pool = slice["spec"]["pool"]["name"].as_str().unwrap_or_default();
            for d in slice["spec"]["devices"].as_array().into_iter().flatten() {
                devices.push((pool.to_owned(), d.clone()));
            }
        }
        Ok(devices)
    }

    /// The nodes, the first named [`NODE`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The nodes, to inject faults into one (restart its kubelet, containerd or plugin).
    pub fn nodes_mut(&mut self) -> &mut [Node] {
        &mut self.nodes
    }

    /// The first node, the only one unless the [`Shape`] asked for more.
    pub fn node(&self) -> &Node {
        &self.nodes[0]
    }

    fn node_mut(&mut self) -> &mut Node {
        &mut self.nodes[0]
    }

    /// Restarts the first node's device plugin ([`Node::restart_plugin`]), which reads its
    /// profiles and devices at start.
    pub fn restart_plugin(&mut self) -> Result<()> {
        self.node_mut().restart_plugin()
    }

    /// Stops the first node's device plugin ([`Node::stop_plugin`]).
    pub fn stop_plugin(&mut self) {
        self.node_mut().stop_plugin()
    }

    /// The node named `name`.
    pub fn node_named(&self, name: &str) -> Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.name() == name)
            .with_context(|| format!("no node {name}"))
    }

    /// The node pod `name` was bound to (its `spec.nodeName`).
    pub fn node_of(&self, name: &str) -> Result<&Node> {
        let pod = self.pod(name)?;
        let node = pod["spec"]["nodeName"]
            .as_str()
            .with_context(|| format!("pod {name} is not bound to a node"))?;
        self.node_named(node)
    }

    /// The first node's simulated devices and host configuration.
    pub fn host(&self) -> &SimHost {
        &self.node().host
    }

    /// The first node's containerd configuration.
    pub fn containerd_config(&self) -> PathBuf {
        self.node().containerd_config()
    }

    /// The first node's CDI spec directory ([`Setup::Cdi`]).
    pub fn cdi_spec_dir(&self) -> PathBuf {
        self.node().cdi_spec_dir()
    }

    /// The first node's `devinject-dra` log ([`Setup::Dra`]).
    pub fn dra_log(&self) -> String {
        self.node().dra_log()
    }

    /// SIGKILLs the first node's DRA driver and starts it again ([`Node::restart_dra_plugin`]).
    pub fn restart_dra_plugin(&mut self) -> Result<()> {
        self.node_mut().restart_dra_plugin()
    }

    /// Stops the first node's DRA driver ([`Node::stop_dra_plugin`]).
    pub fn stop_dra_plugin(&mut self) {
        self.node_mut().stop_dra_plugin()
    }

    /// Restarts the first node's kubelet ([`Node::restart_kubelet`]).
    pub fn restart_kubelet(&mut self) -> Result<()> {
        self.node_mut().restart_kubelet()
    }

    /// Stops the first node's kubelet ([`Node::stop_kubelet`]).
    pub fn stop_kubelet(&mut self) {
        self.node_mut().stop_kubelet()
    }

    /// Starts the first node's stopped kubelet again ([`Node::start_kubelet_again`]).
    pub fn start_kubelet_again(&mut self) -> Result<()> {
        self.node_mut().start_kubelet_again()
    }

    /// Restarts the first node's CRI-O ([`Node::restart_crio`]).
    pub fn restart_crio(&mut self) -> Result<()> {
        self.node_mut().restart_crio()
    }

    /// Restarts the first node's containerd ([`Node::restart_containerd`]).
    pub fn restart_containerd(&mut self) -> Result<()> {
        self.node_mut().restart_containerd()
    }

    /// The pid of the first node's containerd ([`Node::containerd_pid`]).
    pub fn containerd_pid(&self) -> Option<u32> {
        self.node().containerd_pid()
    }

    /// The first node's containerd.
    pub fn node_containerd(&self) -> &Containerd {
        self.node()
            .containerd()
            .expect("the node's containerd runs")
    }

    /// A path as the first node's kubelet sees it.
    pub fn in_node_ns(&self, path: &str) -> Result<PathBuf> {
        self.node().in_node_ns(path)
    }

    /// The first node's current kubelet log.
    pub fn kubelet_log(&self) -> String {
        self.node().kubelet_log()
    }

    /// How many times the first node's device plugin has registered with its kubelet.
    pub fn plugin_registrations(&self) -> usize {
        self.node().plugin_registrations()
    }

    /// Waits until every node reports Ready.
    pub fn wait_node_ready(&mut self) -> Result<()> {
        for i in 0..self.nodes.len() {
            let name = self.nodes[i].name().to_owned();
            poll(&format!("node {name} to be Ready"), SLOW, || {
                self.nodes[i].check_kubelet()?;
                let ready = self
                    .kubectl(&[
                        "get",
                        "node",
                        &name,
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                    ])
                    .unwrap_or_default();
                Ok((ready == "True").then_some(()))
            })
            .map_err(|e| e.context(self.logs()))?;
        }
        Ok(())
    }

    /// Waits until every node's allocatable `resource` is `count`.
    pub fn wait_allocatable(&self, resource: &str, count: &str) -> Result<()> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        self.wait_allocatable_on(&all, resource, count)
    }

    /// Waits until the allocatable `resource` of each node in `nodes` (by index) is `count`.
    pub fn wait_allocatable_on(&self, nodes: &[usize], resource: &str, count: &str) -> Result<()> {
        let path = format!(
            "jsonpath={{.status.allocatable.{}}}",
            resource.replace('.', "\\.")
        );
        for node in nodes.iter().filter_map(|i| self.nodes.get(*i)) {
            poll(
                &format!("{resource} allocatable = {count} on {}", node.name()),
                SLOW,
                || {
                    let have = self
                        .kubectl(&["get", "node", node.name(), "-o", &path])
                        .unwrap_or_default();
                    Ok((have == count).then_some(()))
                },
            )
            .map_err(|e| e.context(self.logs()))?;
        }
        Ok(())
    }

    /// The API server's process id, while it runs.
    pub fn apiserver_pid(&self) -> Option<u32> {
        self.apiserver.as_ref().and_then(Daemon::pid)
    }

    /// The kubeconfig of the cluster's administrator.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
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

    /// Runs `helm args` (the helm of `DEVINJECT_HELM`, scripts/helm-build.sh) against this
    /// cluster, with helm's cache, configuration and data under the cluster's directory; its
    /// stdout, trimmed.
    pub fn helm(&self, args: &[&str]) -> Result<String> {
        let helm = std::env::var_os("DEVINJECT_HELM")
            .context("DEVINJECT_HELM names no helm (scripts/helm-build.sh builds one)")?;
        let mut cmd = Command::new(helm);
        for (var, dir) in [
            ("HELM_CACHE_HOME", "helm/cache"),
            ("HELM_CONFIG_HOME", "helm/config"),
            ("HELM_DATA_HOME", "helm/data"),
        ] {
            cmd.env(var, self.root.join(dir));
        }
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args(args);
        run_ok(cmd).map(|s| s.trim().to_owned())
    }

    /// The API server's port on 127.0.0.1, where a pod on the host network reaches it (there is
    /// no kube-proxy for the `kubernetes` Service's address).
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// Runs `kubectl args` authenticated by `token` alone (no client certificate); its stdout,
    /// trimmed.
    pub fn kubectl_with_token(&self, token: &str, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new(self.kube("kubectl"));
        cmd.arg("--kubeconfig=/dev/null")
            .arg(format!("--server=https://127.0.0.1:{}", self.api_port))
            .arg(format!(
                "--certificate-authority={}",
                self.root.join("pki").join("ca.crt").display()
            ))
            .arg(format!("--token={token}"))
            .args(args);
        run_ok(cmd).map(|s| s.trim().to_owned())
    }

    /// `kubectl apply` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String> {
        let file = self.root.join(format!("apply-{}.yaml", std::process::id()));
        std::fs::write(&file, yaml)?;
        self.kubectl(&["apply", "-f", &file.display().to_string()])
    }

    /// Creates pod `name` from `yaml` until devinject's admission webhook has rewritten it (the
    /// API server takes a moment to call a newly configured webhook): each try deletes the
    /// unmutated pod and applies it again. Returns the stored pod.
    pub fn apply_through_webhook(&self, name: &str, yaml: &str) -> Result<Value> {
        poll(&format!("the webhook to mutate pod {name}"), SLOW, || {
            let _ = self.kubectl(&["delete", "pod", name, "--ignore-not-found", "--wait=true"]);
            self.apply(yaml)?;
            let p = self.pod(name)?;
            Ok(p["metadata"]["annotations"][WEBHOOK_ANNOTATION]
                .is_string()
                .then_some(p))
        })
        .map_err(|e| e.context(self.logs()))
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
        .map_err(|e| self.pod_wait_failed(name, e))
    }

    /// A wait on pod `name` that failed (`e`), with where the pod stands first
    /// ([`pod_state::pod_state`]), then the cluster's logs.
    fn pod_wait_failed(&self, name: &str, e: anyhow::Error) -> anyhow::Error {
        let state = match self.pod(name) {
            Ok(pod) => pod_state::pod_state(&pod),
            Err(read) => format!("pod {name} could not be read: {read:#}"),
        };
        e.context(format!("{state}\n{}", self.logs()))
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
        .map_err(|e| self.pod_wait_failed(name, e))
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

    /// Waits until pod `name` in the default namespace has an Event of `reason` regarding it
    /// (that pod: its UID too, as `kubectl describe pod` asks), and returns its message.
    pub fn wait_pod_event(&self, name: &str, reason: &str) -> Result<String> {
        poll(&format!("an Event {reason} on pod {name}"), SLOW, || {
            let events = self.pod_events(name, reason)?;
            Ok(events
                .first()
                .and_then(|e| e["message"].as_str())
                .map(str::to_owned))
        })
        .map_err(|e| self.pod_wait_failed(name, e))
    }

    /// The Events (as `kubectl get events` lists them, `core/v1`) with reason `reason` regarding
    /// pod `name` of the default namespace, this pod and not an earlier one of its name.
    pub fn pod_events(&self, name: &str, reason: &str) -> Result<Vec<Value>> {
        let uid = self.pod(name)?["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let selector =
            format!("involvedObject.kind=Pod,involvedObject.name={name},involvedObject.uid={uid},reason={reason}");
        let text = self.kubectl(&["get", "events", "--field-selector", &selector, "-o", "json"])?;
        let events: Value = serde_json::from_str(&text).context("parse kubectl's events")?;
        Ok(events["items"].as_array().cloned().unwrap_or_default())
    }

    /// How many times the Events `events` say they happened: each one's `count` (a repeated
    /// Event the kubelet or a series counts), 1 where it has none.
    pub fn event_count(events: &[Value]) -> u64 {
        events
            .iter()
            .map(|e| e["count"].as_u64().unwrap_or(1))
            .sum()
    }

    /// The UIDs of the ResourceSlices devinject's DRA driver published for the cluster's node:
    /// new ones after a slice was deleted and published again.
    pub fn dra_slice_uids(&self) -> Result<std::collections::BTreeSet<String>> {
        let list: Value =
            serde_json::from_str(&self.kubectl(&["get", "resourceslices", "-o", "json"])?)
                .context("parse the ResourceSlices")?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["spec"]["driver"] == DRA_DRIVER)
            .filter_map(|s| s["metadata"]["uid"].as_str().map(str::to_owned))
            .collect())
    }

    /// The output of container `container` of pod `name` in the default namespace (see
    /// [`Cluster::pod_log`]).
    pub fn container_log(&self, name: &str, container: &str) -> Result<String> {
        self.pod_log(&self.pod(name)?, container)
    }

    /// The output of `container` of `pod` (its JSON, in any namespace): its latest CRI log in
    /// its node's `/var/log/pods`, where the kubelet has containerd write it.
    pub fn pod_log(&self, pod: &Value, container: &str) -> Result<String> {
        let meta = &pod["metadata"];
        let (namespace, name, uid) = (
            meta["namespace"].as_str().unwrap_or("default"),
            meta["name"].as_str().context("pod name")?,
            meta["uid"].as_str().context("pod uid")?,
        );
        let node = pod["spec"]["nodeName"]
            .as_str()
            .with_context(|| format!("pod {name} is not bound to a node"))?;
        let dir = self
            .node_named(node)?
            .pod_log_dir()
            .join(format!("{namespace}_{name}_{uid}"))
            .join(container);
        // `<restart count>.log`: the highest number is the latest start.
        let last = std::fs::read_dir(&dir)
            .with_context(|| format!("list {}", dir.display()))?
            .flatten()
            .filter_map(|e| {
                let n = e
                    .file_name()
                    .to_str()?
                    .strip_suffix(".log")?
                    .parse::<u64>()
                    .ok()?;
                Some((n, e.path()))
            })
            .max()
            .with_context(|| format!("no log in {}", dir.display()))?;
        crate::cri::read_log(&last.1)
    }

    /// The CRI status of container `container` of pod `name`, as its node's containerd reports
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
        Cri::connect(&self.node_of(name)?.cri_socket()?)?.container_status(id)
    }

    /// The device ids the kubelets' checkpoints say they allocated to `container` of the pod with
    /// `uid`, for `resource` (a pod is on one node: the others add nothing).
    pub fn allocated(&self, uid: &str, container: &str, resource: &str) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        for node in &self.nodes {
            ids.extend(node.allocated(uid, container, resource)?);
        }
        Ok(ids)
    }

    /// The last lines of every component's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for node in &self.nodes {
            s.push_str(&node.logs());
        }
        s.push_str("=== control plane\n");
        for d in [
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
        // Pods first, while the kubelets can still stop them.
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
        for node in &mut self.nodes {
            node.stop_daemons();
        }
        for d in [
            &mut self.scheduler,
            &mut self.controller_manager,
            &mut self.apiserver,
            &mut self.etcd,
        ] {
            if let Some(mut d) = d.take() {
                d.stop();
            }
        }
        for node in &mut self.nodes {
            node.stop_runtime();
        }
        unmount_below(&self.root);
        for node in &mut self.nodes {
            node.remove_cgroups();
        }
        for dir in self.mount_points.drain(..).rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The kube-scheduler configuration `shipped` made this cluster's: its
/// `clientConnection.kubeconfig` is `kubeconfig`, and, with `insecure_port` (1.20, which takes
/// its insecure serving from the file and not from `--port`; `v1` has none), its healthz and
/// metrics listen on 127.0.0.1:`port`. Each key must be in the file exactly once, so that nothing
/// else of it changes unseen.
pub fn scheduler_config(shipped: &str, kubeconfig: &Path, insecure_port: Option<u16>) -> String {
    let mut text = set_yaml_value(shipped, "kubeconfig", &kubeconfig.display().to_string());
    if let Some(port) = insecure_port {
        for key in ["healthzBindAddress", "metricsBindAddress"] {
            text = set_yaml_value(&text, key, &format!("127.0.0.1:{port}"));
        }
    }
    text
}

/// The shipped bin-packing scheduler configuration in the API `kubernetes` reads.
pub fn shipped_scheduler_config(kubernetes: &Kubernetes) -> PathBuf {
    let file = if kubernetes.scheduler_api().ends_with("/v1") {
        "deploy/scheduler/kube-scheduler-config.yaml"
    } else {
        "deploy/scheduler/kube-scheduler-config-v1beta1.yaml"
    };
    install::workspace_path(file)
}

/// `text` with the value of the one line whose key is `key` set to `value` (its indentation
/// kept); panics unless exactly one line has that key.
fn set_yaml_value(text: &str, key: &str, value: &str) -> String {
    let prefix = format!("{key}:");
    let is_key = |l: &str| l.trim_start().starts_with(&prefix);
    assert_eq!(
        text.lines().filter(|l| is_key(l)).count(),
        1,
        "the scheduler configuration must set {key} once"
    );
    let mut out = String::new();
    for line in text.lines() {
        if is_key(line) {
            let indent = &line[..line.len() - line.trim_start().len()];
            out.push_str(&format!("{indent}{key}: {value}"));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_configuration_gets_the_test_kubeconfig_and_port_and_nothing_else() {
        let shipped = "# note\nclientConnection:\n  kubeconfig: /etc/kubernetes/scheduler.conf\n\
                       healthzBindAddress: 127.0.0.1:10251\nmetricsBindAddress: 127.0.0.1:10251\n\
                       profiles:\n  - schedulerName: devinject-binpack\n";
        let out = scheduler_config(shipped, Path::new("/tmp/k/kubeconfig"), Some(4242));
        assert_eq!(
            out,
            "# note\nclientConnection:\n  kubeconfig: /tmp/k/kubeconfig\n\
             healthzBindAddress: 127.0.0.1:4242\nmetricsBindAddress: 127.0.0.1:4242\n\
             profiles:\n  - schedulerName: devinject-binpack\n"
        );
    }

    #[test]
    #[should_panic(expected = "must set healthzBindAddress once")]
    fn a_scheduler_configuration_without_its_serving_address_is_refused() {
        scheduler_config(
            "clientConnection:\n  kubeconfig: x\n",
            Path::new("/k"),
            Some(1),
        );
    }

    #[test]
    fn a_v1_scheduler_configuration_gets_only_the_test_kubeconfig() {
        let shipped = "apiVersion: kubescheduler.config.k8s.io/v1\nclientConnection:\n  \
                       kubeconfig: /etc/kubernetes/scheduler.conf\nprofiles: []\n";
        assert_eq!(
            scheduler_config(shipped, Path::new("/k"), None),
            shipped.replace("/etc/kubernetes/scheduler.conf", "/k")
        );
    }
}
