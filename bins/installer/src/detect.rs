//! Which container engine the node runs, and where its files are.
//!
//! With `--runtime auto` the installer picks one engine, by this precedence (the first that
//! applies wins):
//! 1. k3s or RKE2: their generated containerd config exists
//!    (`/var/lib/rancher/{k3s,rke2}/agent/etc/containerd/config.toml`);
//! 2. the kubelet's `containerRuntimeEndpoint` (`/var/lib/kubelet/config.yaml`, or
//!    `--container-runtime-endpoint` in `/var/lib/kubelet/kubeadm-flags.env`) names CRI-O,
//!    containerd or cri-dockerd;
//! 3. a CRI-O socket (`/run/crio/crio.sock`);
//! 4. a containerd socket (`/run/containerd/containerd.sock`) with no docker socket;
//! 5. a docker socket (`/run/docker.sock`): a docker host, whose containerd is docker's;
//! 6. configuration files only (daemon stopped): CRI-O, then containerd, then docker.
//!
//! A docker host also has a containerd socket, which is why docker wins over a bare containerd
//! socket unless the kubelet says otherwise.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use devinject_engine_config::Engine;
use serde::{Deserialize, Serialize};

use crate::error::{InstallError, Result};
use crate::options::{EngineChoice, Layout};

/// Which distribution of the engine runs it: the paths and the unit differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// The engine's own packages: `/etc/<engine>`, unit named after the engine.
    Plain,
    /// k3s's embedded containerd.
    K3s,
    /// RKE2's embedded containerd.
    Rke2,
}

/// Where k3s keeps its containerd configuration.
pub const K3S_CONTAINERD_DIR: &str = "/var/lib/rancher/k3s/agent/etc/containerd";
/// Where RKE2 keeps its containerd configuration.
pub const RKE2_CONTAINERD_DIR: &str = "/var/lib/rancher/rke2/agent/etc/containerd";
/// The containerd socket of k3s and RKE2.
pub const K3S_CONTAINERD_SOCKET: &str = "/run/k3s/containerd/containerd.sock";
/// containerd's socket.
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// CRI-O's socket.
pub const CRIO_SOCKET: &str = "/run/crio/crio.sock";
/// dockerd's socket.
pub const DOCKER_SOCKET: &str = "/run/docker.sock";

/// One engine to configure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub engine: Engine,
    /// Its distribution.
    pub flavour: Flavour,
    /// Its main configuration file (host path).
    pub config: PathBuf,
    /// Its API socket (host path), when it has one.
    pub socket: Option<PathBuf>,
}

impl Target {
    /// The engine with its usual paths for `flavour`, or `config` when given.
    pub fn new(engine: Engine, flavour: Flavour, config: Option<PathBuf>) -> Target {
        let default_config = match (engine, flavour) {
            (Engine::Containerd, Flavour::K3s) => {
                PathBuf::from(K3S_CONTAINERD_DIR).join("config.toml")
            }
            (Engine::Containerd, Flavour::Rke2) => {
                PathBuf::from(RKE2_CONTAINERD_DIR).join("config.toml")
            }
            _ => PathBuf::from(engine.default_config()),
        };
        let socket = match (engine, flavour) {
            (Engine::Containerd, Flavour::Plain) => Some(CONTAINERD_SOCKET),
            (Engine::Containerd, _) => Some(K3S_CONTAINERD_SOCKET),
            (Engine::Crio, _) => Some(CRIO_SOCKET),
            (Engine::Docker, _) => Some(DOCKER_SOCKET),
            (Engine::Podman, _) => None,
        };
        Target {
            engine,
            flavour,
            config: config.unwrap_or(default_config),
            socket: socket.map(PathBuf::from),
        }
    }

    /// The systemd units that may run the engine, most likely first.
    pub fn units(&self) -> &'static [&'static str] {
        match (self.engine, self.flavour) {
            (Engine::Containerd, Flavour::K3s) => &["k3s", "k3s-agent"],
            (Engine::Containerd, Flavour::Rke2) => &["rke2-server", "rke2-agent"],
            (Engine::Containerd, Flavour::Plain) => &["containerd"],
            (Engine::Crio, _) => &["crio"],
            (Engine::Docker, _) => &["docker"],
            (Engine::Podman, _) => &[],
        }
    }

    /// The runc the flavour ships, for the shim to hand over to (k3s and RKE2 bring their own;
    /// hosts running them often have none in /usr/bin).
    pub fn bundled_runc(&self) -> Option<&'static str> {
        match (self.engine, self.flavour) {
            (Engine::Containerd, Flavour::K3s) => {
                Some("/var/lib/rancher/k3s/data/current/bin/runc")
            }
            (Engine::Containerd, Flavour::Rke2) => Some("/var/lib/rancher/rke2/bin/runc"),
            _ => None,
        }
    }

    /// A short description for reports: `containerd (k3s)`.
    pub fn describe(&self) -> String {
        match self.flavour {
            Flavour::Plain => self.engine.to_string(),
            Flavour::K3s => format!("{} (k3s)", self.engine),
            Flavour::Rke2 => format!("{} (rke2)", self.engine),
        }
    }
}

/// What was found on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// k3s's containerd config exists.
    pub k3s: bool,
    /// RKE2's containerd config exists.
    pub rke2: bool,
    /// The kubelet's runtime endpoint, when configured.
    pub kubelet_endpoint: Option<String>,
    /// Sockets that exist: CRI-O, containerd, docker.
    pub crio_socket: bool,
    /// containerd's socket exists.
    pub containerd_socket: bool,
    /// docker's socket exists.
    pub docker_socket: bool,
    /// Config files that exist: CRI-O, containerd, docker.
    pub crio_config: bool,
    /// containerd's config exists.
    pub containerd_config: bool,
    /// docker's daemon.json exists.
    pub docker_config: bool,
}

impl Evidence {
    /// Looks at the host.
    pub fn gather(layout: &Layout) -> Evidence {
        let host = &layout.host;
        let exists = |p: &str| host.access(Path::new(p)).exists();
        let socket = |p: &str| {
            std::fs::metadata(host.access(Path::new(p))).is_ok_and(|m| m.file_type().is_socket())
        };
        Evidence {
            k3s: exists(&format!("{K3S_CONTAINERD_DIR}/config.toml")),
            rke2: exists(&format!("{RKE2_CONTAINERD_DIR}/config.toml")),
            kubelet_endpoint: kubelet_endpoint(layout),
            crio_socket: socket(CRIO_SOCKET),
            containerd_socket: socket(CONTAINERD_SOCKET),
            docker_socket: socket(DOCKER_SOCKET),
            crio_config: exists("/etc/crio/crio.conf") || exists("/etc/crio/crio.conf.d"),
            containerd_config: exists("/etc/containerd/config.toml"),
            docker_config: exists("/etc/docker/daemon.json"),
        }
    }

    /// The engine by the precedence in the module documentation, and why.
    pub fn choose(&self) -> Option<(Engine, Flavour, String)> {
        if self.k3s {
            return Some((
                Engine::Containerd,
                Flavour::K3s,
                "k3s's containerd config".into(),
            ));
        }
        if self.rke2 {
            return Some((
                Engine::Containerd,
                Flavour::Rke2,
                "RKE2's containerd config".into(),
            ));
        }
        if let Some(ep) = &self.kubelet_endpoint {
            let why = format!("the kubelet's runtime endpoint {ep}");
            if ep.contains("crio") {
                return Some((Engine::Crio, Flavour::Plain, why));
            }
            if ep.contains("cri-dockerd") || ep.contains("dockershim") {
                return Some((Engine::Docker, Flavour::Plain, why));
            }
            if ep.contains("containerd") {
                return Some((Engine::Containerd, Flavour::Plain, why));
            }
        }
        if self.crio_socket {
            return Some((
                Engine::Crio,
                Flavour::Plain,
                format!("socket {CRIO_SOCKET}"),
            ));
        }
        if self.containerd_socket && !self.docker_socket {
            return Some((
                Engine::Containerd,
                Flavour::Plain,
                format!("socket {CONTAINERD_SOCKET}"),
            ));
        }
        if self.docker_socket {
            return Some((
                Engine::Docker,
                Flavour::Plain,
                format!("socket {DOCKER_SOCKET}"),
            ));
        }
        if self.crio_config {
            return Some((Engine::Crio, Flavour::Plain, "/etc/crio".into()));
        }
        if self.containerd_config {
            return Some((
                Engine::Containerd,
                Flavour::Plain,
                "/etc/containerd/config.toml".into(),
            ));
        }
        if self.docker_config {
            return Some((
                Engine::Docker,
                Flavour::Plain,
                "/etc/docker/daemon.json".into(),
            ));
        }
        None
    }

    /// The flavour of `engine` on this host.
    pub fn flavour_of(&self, engine: Engine) -> Flavour {
        match engine {
            Engine::Containerd if self.k3s => Flavour::K3s,
            Engine::Containerd if self.rke2 => Flavour::Rke2,
            _ => Flavour::Plain,
        }
    }
}

/// The kubelet's container runtime endpoint, from its config file or kubeadm's flags file.
fn kubelet_endpoint(layout: &Layout) -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(layout.host.access(Path::new(p))).ok();
    if let Some(text) = read("/var/lib/kubelet/config.yaml") {
        for line in text.lines() {
            if let Some(v) = line.trim().strip_prefix("containerRuntimeEndpoint:") {
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                if !v.is_empty() {
                    return Some(v.to_string());
                }
            }
        }
    }
    if let Some(text) = read("/var/lib/kubelet/kubeadm-flags.env") {
        for word in text.split(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
            if let Some(v) = word.strip_prefix("--container-runtime-endpoint=") {
                return Some(v.to_string());
            }
        }
    }
    None
}

/// The engines to configure for `choice`, each with a reason for the report.
pub fn targets(layout: &Layout, choice: &EngineChoice) -> Result<Vec<(Target, String)>> {
    let evidence = Evidence::gather(layout);
    let list = match choice {
        EngineChoice::Skip => return Ok(Vec::new()),
        EngineChoice::Auto => {
            let Some((engine, flavour, why)) = evidence.choose() else {
                return Err(InstallError::Detect(format!(
                    "no container engine found under {}: looked for k3s/RKE2 containerd configs, \
                     the kubelet's runtime endpoint, the sockets {CRIO_SOCKET}, \
                     {CONTAINERD_SOCKET}, {DOCKER_SOCKET} and the config files in /etc; \
                     mount the host's runtime directories or pass --runtime",
                    layout.host.root().display()
                )));
            };
            vec![(engine, flavour, format!("detected from {why}"))]
        }
        EngineChoice::These(engines) => engines
            .iter()
            .map(|e| (*e, evidence.flavour_of(*e), "asked for".to_string()))
            .collect(),
    };
    if (layout.engine_config.is_some() || layout.engine_socket.is_some()) && list.len() > 1 {
        return Err(InstallError::InvalidRequest(
            "--runtime-config and --runtime-socket name one engine's file, but more than one \
             engine is configured"
                .into(),
        ));
    }
    Ok(list
        .into_iter()
        .map(|(engine, flavour, why)| {
            let mut t = Target::new(engine, flavour, layout.engine_config.clone());
            if let Some(s) = &layout.engine_socket {
                t.socket = Some(s.clone());
            }
            (t, why)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn layout(dir: &Path) -> Layout {
        Layout::new(dir)
    }

    fn touch(dir: &Path, p: &str) {
        let path = dir.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, "").expect("write");
    }

    fn sock(dir: &Path, p: &str) -> UnixListener {
        let path = dir.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        UnixListener::bind(path).expect("bind")
    }

    fn chosen(dir: &Path) -> Option<(Engine, Flavour)> {
        Evidence::gather(&layout(dir))
            .choose()
            .map(|(e, f, _)| (e, f))
    }

    #[test]
    fn precedence_follows_the_documented_order() {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path();
        assert_eq!(chosen(dir), None);
        touch(dir, "/etc/docker/daemon.json");
        assert_eq!(chosen(dir), Some((Engine::Docker, Flavour::Plain)));
        touch(dir, "/etc/containerd/config.toml");
        assert_eq!(chosen(dir), Some((Engine::Containerd, Flavour::Plain)));
        // A docker host has both sockets: docker wins.
        let _c = sock(dir, CONTAINERD_SOCKET);
        assert_eq!(chosen(dir), Some((Engine::Containerd, Flavour::Plain)));
        let _d = sock(dir, DOCKER_SOCKET);
        assert_eq!(chosen(dir), Some((Engine::Docker, Flavour::Plain)));
        // ...unless the kubelet talks to containerd.
        std::fs::create_dir_all(dir.join("var/lib/kubelet")).expect("mkdir");
        std::fs::write(
            dir.join("var/lib/kubelet/config.yaml"),
            "kind: KubeletConfiguration\ncontainerRuntimeEndpoint: \"unix:///run/containerd/containerd.sock\"\n",
        )
        .expect("write");
        assert_eq!(chosen(dir), Some((Engine::Containerd, Flavour::Plain)));
        touch(
            dir,
            "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        );
        assert_eq!(chosen(dir), Some((Engine::Containerd, Flavour::Rke2)));
        touch(dir, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml");
        assert_eq!(chosen(dir), Some((Engine::Containerd, Flavour::K3s)));
    }

    #[test]
    fn kubeadm_flags_name_crio() {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path();
        std::fs::create_dir_all(dir.join("var/lib/kubelet")).expect("mkdir");
        std::fs::write(
            dir.join("var/lib/kubelet/kubeadm-flags.env"),
            "KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///var/run/crio/crio.sock --pod-infra-container-image=x\"\n",
        )
        .expect("write");
        assert_eq!(chosen(dir), Some((Engine::Crio, Flavour::Plain)));
    }

    #[test]
    fn sockets_behind_a_var_run_symlink_are_found() {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path();
        std::fs::create_dir_all(dir.join("var")).expect("mkdir");
        std::os::unix::fs::symlink("/run", dir.join("var/run")).expect("symlink");
        let _s = sock(dir, CRIO_SOCKET);
        let e = Evidence::gather(&layout(dir));
        assert!(e.crio_socket);
    }

    #[test]
    fn targets_carry_flavour_paths_and_refuse_one_config_for_two_engines() {
        let d = tempfile::tempdir().expect("tempdir");
        let dir = d.path();
        touch(dir, "/var/lib/rancher/k3s/agent/etc/containerd/config.toml");
        let t = targets(
            &layout(dir),
            &EngineChoice::These(vec![Engine::Containerd, Engine::Docker]),
        )
        .expect("targets");
        assert_eq!(t[0].0.flavour, Flavour::K3s);
        assert_eq!(
            t[0].0.config,
            PathBuf::from("/var/lib/rancher/k3s/agent/etc/containerd/config.toml")
        );
        assert_eq!(t[0].0.units(), &["k3s", "k3s-agent"]);
        assert_eq!(t[1].0.config, PathBuf::from("/etc/docker/daemon.json"));
        let mut l = layout(dir);
        l.engine_config = Some(PathBuf::from("/x.toml"));
        assert!(targets(
            &l,
            &EngineChoice::These(vec![Engine::Containerd, Engine::Docker])
        )
        .is_err());
        let none = tempfile::tempdir().expect("tempdir");
        let err = targets(&layout(none.path()), &EngineChoice::Auto).expect_err("nothing");
        assert!(err.to_string().contains("--runtime"), "{err}");
    }
}
