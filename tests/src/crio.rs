//! A CRI-O node driven through CRI as the kubelet would (CRI-O 1.36, built from its Go module by
//! scripts/crio-build.sh), with each injection path CRI-O users configure: CDI (on by default in
//! CRI-O; the specs `devinject-ctl cdi generate` writes, in `cdi_spec_dirs`), the hook through
//! hooks.d (`hooks_dir`), the shim as a runtime handler's `runtime_path`, and NRI (`[crio.nri]`,
//! with `devinject-nri` connecting to its `nri_listen` socket).
//!
//! Everything CRI-O keeps is in one temp dir: its configuration (`--config`, with an empty
//! `--config-dir`, so `/etc/crio` is never read), storage (`vfs`, shared with a private podman
//! that loads the test images into it), run and state files, socket, the runc state, the NRI
//! socket and plugin directories (never the host's `/var/run/nri`), and the CNI configuration (a
//! loopback network; pods use the host network). Pods' cgroups are below a
//! [`CgroupParent`] of the test's, managed by cgroupfs. conmon is Debian's; `pinns` and the
//! loopback plugin come with CRI-O's build. [`CrioNode`] stops the NRI plugin and CRI-O and
//! removes what they made when dropped, also when a test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use k8s_cri::v1::PodSandboxConfig;

use crate::bins::bin;
use crate::cri::{self, CgroupParent, ContainerSpec, Cri};
use crate::cri_node::{test_image_archives, PAUSE};
use crate::daemons::{short_tempdir, unmount_below, Daemon};
use crate::nri_plugin;
use crate::podman::Podman;
use crate::sim::{demo_host, SimHost};
use crate::skip::{require, require_binary, require_root, which};

/// The runtime handler the shim is registered under.
pub const SHIM_HANDLER: &str = "devinject";

/// CRI-O's `nri_plugin_request_timeout` on a node with NRI on: CRI-O 1.36's default (NRI
/// 0.11's `DefaultPluginRequestTimeout`), written out so the tests state what they run under.
pub const NRI_REQUEST_TIMEOUT: &str = "2s";

/// CRI-O's `nri_plugin_registration_timeout` on a node with NRI on: CRI-O 1.36's default.
pub const NRI_REGISTRATION_TIMEOUT: &str = "5s";

/// The environment variable naming a crun (scripts/crun-build.sh prints one) that the cluster
/// tier's CRI-O nodes run in place of the runc under test: as CRI-O's default runtime, and as
/// the runtime the shim is given.
pub const CRUN_ENV: &str = "DEVINJECT_CRUN";

/// The crun of [`CRUN_ENV`], when set.
pub fn crun_binary() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(CRUN_ENV).filter(|v| !v.is_empty())?);
    assert!(
        path.is_absolute() && path.is_file(),
        "{CRUN_ENV}={} is not an absolute path to a file (scripts/crun-build.sh prints one)",
        path.display()
    );
    Some(path)
}

/// The OCI runtime of the cluster tier's CRI-O nodes: [`crun_binary`], else the runc under
/// test.
pub fn node_runtime() -> Result<PathBuf> {
    crun_binary()
        .or_else(crate::runc::runc_binary)
        .context("no runc (DEVINJECT_RUNC, or runc on PATH)")
}

/// The CRI-O binaries (crio, pinns, the loopback plugin): `DEVINJECT_CRIO_BIN`, or
/// scripts/crio-build.sh's cache. `None` when they are not all there.
pub fn crio_bin_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("DEVINJECT_CRIO_BIN") {
        Some(d) => PathBuf::from(d),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
            cache.join("devinject/cri-o-1.36.3/bin")
        }
    };
    ["crio", "pinns", "loopback"]
        .iter()
        .all(|b| dir.join(b).is_file())
        .then_some(dir)
}

/// The CRI-O bin dir when it and everything a [`CrioNode`] needs are here (root, runc, conmon,
/// podman, busybox, gcc); `None` after saying what is missing (a failure under CI).
pub fn ready() -> Option<PathBuf> {
    let bin = crio_bin_dir();
    (require_root()
        && require_binary("runc")
        && require_binary("conmon")
        && require_binary("podman")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
        && require(
            bin.is_some(),
            "needs CRI-O (scripts/crio-build.sh; DEVINJECT_CRIO_BIN)",
        ))
    .then(|| bin.expect("checked"))
}

/// Which paths are on; the hook and the shim are configured by `devinject-ctl runtime configure
/// --runtime crio` below a root of the node's, whose hooks.d and `crio.conf.d` CRI-O reads.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    /// The specs `devinject-ctl cdi generate` writes for the node's devices, in `cdi_spec_dirs`.
    pub cdi: bool,
    /// `--mode hook`: the hooks.d file, in CRI-O's `hooks_dir`.
    pub hook: bool,
    /// `--mode shim`: the drop-in naming the shim as the [`SHIM_HANDLER`] handler's
    /// `runtime_path`, in CRI-O's `--config-dir`.
    pub shim: bool,
    /// `[crio.nri]` enabled, its socket (`nri_listen`) and plugin directories in the node's
    /// directory; [`CrioNode::start_nri_plugin`] connects `devinject-nri` to it.
    pub nri: bool,
    /// Added to the host configuration (e.g. `ldconfig = ...`).
    pub host_config: String,
    /// A registry (`host:port`) CRI-O pulls from over plain HTTP, as a loopback test registry
    /// serves; `None`: no registry at all ([`registries_conf`]).
    pub plain_http_registry: Option<String>,
}

/// The node. Fields drop in order: the CRI client (its pods), the NRI plugin, CRI-O, the pods'
/// cgroups, what is still mounted below the directory, then the files.
pub struct CrioNode {
    /// The CRI client.
    pub cri: Cri,
    nri_plugin: Option<Daemon>,
    crio: Daemon,
    cgroups: CgroupParent,
    /// The simulated devices and the host configuration.
    pub host: SimHost,
    _mounts: Unmount,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

/// Unmounts everything below its directory when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        unmount_below(&self.0);
    }
}

impl std::fmt::Debug for CrioNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrioNode")
            .field("root", &self.root)
            .finish()
    }
}

impl CrioNode {
    /// Starts CRI-O from `bin` with `paths` on and the demo profile's simulated devices, with the
    /// test images in its storage.
    pub fn start(bin: &Path, paths: &Paths) -> Result<Self> {
        let dir = short_tempdir("crio")?;
        let root = dir.path().to_owned();
        let host = demo_host(&root.join("sim"), &["demo"])?;
        let runc = crate::runc::runc_binary().context("runc")?;
        host.write_config(&format!(
            "runtime = {runc:?}\nhook = {:?}\n{}",
            bin_path("devinject-hook"),
            paths.host_config
        ))?;
        let specs = root.join("cdi");
        std::fs::create_dir_all(&specs)?;
        if paths.cdi {
            eprintln!("{}", crate::cri_node::cdi_generate(&host, &specs)?);
        }
        // The host's engine configuration as devinject-ctl writes it, below a root of the node's.
        let etc = root.join("host");
        let hooks = etc.join("etc/containers/oci/hooks.d");
        let drop_ins = etc.join("etc/crio/crio.conf.d");
        std::fs::create_dir_all(&hooks)?;
        std::fs::create_dir_all(&drop_ins)?;
        if paths.hook {
            configure(
                &etc,
                &["--mode", "hook", "--hook-path", &bin_path("devinject-hook")],
                &host,
            )?;
        }
        if paths.shim {
            // CRI-O gives a runtime no arguments of its own: a wrapper passes the configuration,
            // as /etc/devinject/config.toml would be found on a real node.
            let wrapper = root.join("devinject-runtime");
            std::fs::write(
                &wrapper,
                format!(
                    "#!/bin/sh\nexec '{}' --config '{}' \"$@\"\n",
                    bin_path("devinject-runtime"),
                    host.config.display()
                ),
            )?;
            std::fs::set_permissions(
                &wrapper,
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )?;
            configure(
                &etc,
                &["--mode", "shim", "--shim-path", path_str(&wrapper)?],
                &host,
            )?;
        }
        let conmon = which("conmon").context("conmon")?;
        let config = root.join("crio.conf");
        let mut text = crio_config(&root, bin, &runc, &conmon, &hooks, &specs, None);
        if paths.nri {
            for d in ["nri-plugins", "nri-conf"] {
                std::fs::create_dir_all(root.join(d))?;
            }
            text += &crio_nri_settings(&root, &nri_socket(&root));
        } else {
            text += "\n[crio.nri]\nenable_nri = false\n";
        }
        std::fs::write(&config, text)?;
        write_root_files(
            &root,
            &registries_conf(&[], paths.plain_http_registry.as_deref()),
        )?;
        load_test_images(&root, &hooks)?;

        // The shim's drop-in is read as CRI-O reads it on a node. The hook's only names the
        // host's hooks.d directories (paths outside the temp root), so CRI-O is pointed at the
        // temp root's hooks.d by the main configuration and reads no drop-in.
        let config_dir = if paths.shim {
            drop_ins
        } else {
            let empty = root.join("no-drop-ins");
            std::fs::create_dir_all(&empty)?;
            empty
        };
        let mut cmd = Command::new(bin.join("crio"));
        cmd.arg("--config")
            .arg(&config)
            .arg("--config-dir")
            .arg(&config_dir)
            .args(registries_args(&root));
        let mut crio = Daemon::start("crio", cmd, &root.join("crio.log"))?;
        let socket = root.join("crio.sock");
        crio.wait_ready("CRI-O's socket", || socket.exists())?;
        let mut cri = Cri::connect(&socket)?;
        cri.wait_ready().with_context(|| crio.log_tail())?;
        let name = root
            .file_name()
            .context("temp dir name")?
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            cri,
            nri_plugin: None,
            crio,
            cgroups: CgroupParent::new(&name),
            host,
            _mounts: Unmount(root.clone()),
            root,
            _dir: dir,
        })
    }

    /// Runs a host-network pod `name` with runtime `handler` (`""`: plain runc).
    pub fn pod(&mut self, name: &str, handler: &str) -> Result<(String, PodSandboxConfig)> {
        cri::run_pod(&mut self.cri, &self.root, &self.cgroups, name, handler)
            .with_context(|| self.crio.log_tail())
    }

    /// Creates `spec` in `pod`, starts it and waits for its end ([`cri::run_to_exit`]).
    pub fn run(
        &mut self,
        pod: &str,
        pod_config: &PodSandboxConfig,
        spec: &ContainerSpec,
    ) -> Result<std::result::Result<(i32, String), String>> {
        cri::run_to_exit(&mut self.cri, pod, pod_config, spec).with_context(|| self.crio.log_tail())
    }

    /// The last lines of CRI-O's log.
    pub fn log_tail(&self) -> String {
        self.crio.log_tail()
    }

    /// CRI-O's whole log so far.
    pub fn crio_log(&self) -> String {
        std::fs::read_to_string(self.crio.log()).unwrap_or_default()
    }

    /// Starts `devinject-nri` on the node's NRI socket (`nri_listen`; [`Paths::nri`] must be
    /// on) and waits until it has registered with CRI-O.
    pub fn start_nri_plugin(&mut self) -> Result<()> {
        self.nri_plugin = Some(nri_plugin::start(
            &nri_socket(&self.root),
            &self.host.config,
            &self.root.join("nri.log"),
        )?);
        self.wait_nri_registered(1)
    }

    /// Waits until `devinject-nri` has registered `times` times in all.
    pub fn wait_nri_registered(&mut self, times: usize) -> Result<()> {
        nri_plugin::wait_registered(&self.root.join("nri.log"), times)
            .with_context(|| format!("--- crio\n{}", self.crio.log_tail()))
    }

    /// The last lines of `devinject-nri`'s log.
    pub fn nri_log(&self) -> String {
        nri_plugin::log_tail(&self.root.join("nri.log"))
    }
}

/// The NRI socket of a node in `root` with [`Paths::nri`] on.
fn nri_socket(root: &Path) -> PathBuf {
    root.join("nri.sock")
}

/// `[crio.nri]` on: `socket`, which externally started plugins connect to, the directories of
/// pre-installed plugins and their configuration (empty) below `root`, and the timeouts at
/// CRI-O's defaults.
pub(crate) fn crio_nri_settings(root: &Path, socket: &Path) -> String {
    format!(
        "\n[crio.nri]\nenable_nri = true\nnri_listen = \"{socket}\"\n\
         nri_plugin_dir = \"{d}/nri-plugins\"\nnri_plugin_config_dir = \"{d}/nri-conf\"\n\
         nri_disable_connections = false\n\
         nri_plugin_registration_timeout = \"{NRI_REGISTRATION_TIMEOUT}\"\n\
         nri_plugin_request_timeout = \"{NRI_REQUEST_TIMEOUT}\"\n",
        socket = socket.display(),
        d = root.display(),
    )
}

fn bin_path(name: &str) -> String {
    bin(name).display().to_string()
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().context("utf-8 path")
}

/// `devinject-ctl runtime configure --runtime crio <args>` below `etc` (a host root of the
/// node's), with `host`'s configuration for the hook.
fn configure(etc: &Path, args: &[&str], host: &SimHost) -> Result<()> {
    let mut cmd = Command::new(bin("devinject-ctl"));
    cmd.args(["runtime", "configure", "--runtime", "crio", "--root"])
        .arg(etc)
        .arg("--hook-config")
        .arg(&host.config)
        .args(args);
    let out =
        crate::daemons::run_ok(cmd).context("devinject-ctl runtime configure --runtime crio")?;
    eprintln!("{out}");
    Ok(())
}

/// A `registries.conf` (containers-registries.conf(5), version 2) whose unqualified-search
/// registries are `search`, with `plain_http` (`host:port`) marked `insecure`: pulled from over
/// HTTP, as a loopback registry serves.
pub fn registries_conf(search: &[&str], plain_http: Option<&str>) -> String {
    let search: Vec<String> = search.iter().map(|r| format!("{r:?}")).collect();
    let mut text = format!("unqualified-search-registries = [{}]\n", search.join(", "));
    if !search.is_empty() {
        text += "short-name-mode = \"enforcing\"\n";
    }
    if let Some(location) = plain_http {
        text += &format!("\n[[registry]]\nlocation = {location:?}\ninsecure = true\n");
    }
    text
}

/// CRI-O's flags naming the registries configuration [`write_root_files`] wrote below `root`
/// (and its drop-in directory, empty), so the machine's `/etc/containers` is not read.
pub(crate) fn registries_args(root: &Path) -> [std::ffi::OsString; 4] {
    [
        "--registries-conf".into(),
        root.join("registries.conf").into(),
        "--registries-conf-dir".into(),
        root.join("registries.conf.d").into(),
    ]
}

/// The files below `root` that [`crio_config`] and [`registries_args`] name: the CNI
/// configuration (a loopback network; pods use the host network), an image policy that accepts
/// the test's images, and `registries` as the registries configuration, with its drop-in
/// directory empty.
pub(crate) fn write_root_files(root: &Path, registries: &str) -> Result<()> {
    let cni = root.join("cni");
    std::fs::create_dir_all(&cni)?;
    std::fs::write(
        cni.join("10-loopback.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "devinject-loopback", "plugins": [{"type": "loopback"}]}"#,
    )?;
    std::fs::write(
        root.join("policy.json"),
        r#"{"default": [{"type": "insecureAcceptAnything"}]}"#,
    )?;
    std::fs::create_dir_all(root.join("registries.conf.d"))?;
    std::fs::write(root.join("registries.conf"), registries)?;
    Ok(())
}

/// Loads the docker-save `archive` with `podman`, which must be on the storage of a CRI-O:
/// `Podman::new(root, ..)` for a CRI-O whose root is `root` has the same root (`storage`), run
/// root (`run`) and driver (`vfs`).
pub(crate) fn load_image(podman: &Podman, archive: &Path) -> Result<()> {
    let out = podman.run(&["load", "--input", path_str(archive)?])?;
    if !out.status.success() {
        bail!(
            "podman load {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The test images ([`test_image_archives`]) into the storage of the CRI-O whose root is
/// `root`.
pub(crate) fn load_test_images(root: &Path, hooks: &Path) -> Result<()> {
    let podman = Podman::new(root, hooks)?;
    for (_, archive) in test_image_archives(root, None)? {
        load_image(&podman, &archive)?;
    }
    Ok(())
}

/// CRI-O's main configuration: every path in `root`, the runc under test as the default runtime,
/// cgroupfs, the hooks and CDI directories, no metrics or infra container, CNI plugins from
/// `bin` (the loopback one) and `cni_bin`; `[crio.nri]` is added by the caller.
pub(crate) fn crio_config(
    root: &Path,
    bin: &Path,
    runc: &Path,
    conmon: &Path,
    hooks: &Path,
    specs: &Path,
    cni_bin: Option<&Path>,
) -> String {
    let d = root.display();
    let runtime = |name: &str, path: &Path| {
        format!(
            "[crio.runtime.runtimes.{name}]\nruntime_path = \"{}\"\nruntime_type = \"oci\"\n\
             runtime_root = \"{d}/runc\"\nmonitor_path = \"{}\"\nmonitor_cgroup = \"pod\"\n\n",
            path.display(),
            conmon.display()
        )
    };
    let mut text = format!(
        "[crio]\nroot = \"{d}/storage\"\nrunroot = \"{d}/run\"\nstorage_driver = \"vfs\"\n\
         log_dir = \"{d}/pod-logs\"\nversion_file = \"{d}/state/version\"\n\
         version_file_persist = \"{d}/lib/version\"\nclean_shutdown_file = \"{d}/lib/clean.shutdown\"\n\n\
         [crio.api]\nlisten = \"{d}/crio.sock\"\nstream_address = \"127.0.0.1\"\nstream_port = \"0\"\n\n\
         [crio.runtime]\ndefault_runtime = \"runc\"\ncgroup_manager = \"cgroupfs\"\n\
         hooks_dir = [\"{hooks}\"]\ncdi_spec_dirs = [\"{specs}\"]\n\
         container_exits_dir = \"{d}/exits\"\ncontainer_attach_socket_dir = \"{d}/attach\"\n\
         namespaces_dir = \"{d}/ns\"\npinns_path = \"{pinns}\"\ndrop_infra_ctr = true\n\n",
        hooks = hooks.display(),
        specs = specs.display(),
        pinns = bin.join("pinns").display(),
    );
    text += &runtime("runc", runc);
    text += &format!(
        "[crio.image]\npause_image = \"{PAUSE}\"\nsignature_policy = \"{d}/policy.json\"\n\n\
         [crio.network]\nnetwork_dir = \"{d}/cni\"\nplugin_dirs = [{plugins}]\n\n\
         [crio.metrics]\nenable_metrics = false\n",
        plugins = std::iter::once(bin)
            .chain(cni_bin)
            .map(|dir| format!("{:?}", dir.display().to_string()))
            .collect::<Vec<_>>()
            .join(", "),
    );
    text
}
