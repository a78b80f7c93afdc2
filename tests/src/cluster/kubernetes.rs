//! Which Kubernetes release the cluster tier runs, and what it needs that another does not.
//!
//! Two releases run the tier (docs/testing.md, "The cluster tier"):
//! - **v1.37**, the stack users run today, built from its Go modules by
//!   scripts/kube-module-build.sh, on containerd 2 (Debian unstable's, scripts/runtimes-fetch.sh)
//!   and the runc under test (`DEVINJECT_RUNC`): Kubernetes 1.36 and later support no containerd 1.x;
//! - **v1.20.2**, the compatibility release for what old kubelets do differently, built from
//!   Debian 12's source package by scripts/kube-build.sh, on the machine's containerd 1.6 (or the
//!   1.7 a test asks for).
//!
//! `DEVINJECT_KUBE_BIN` names the bin dir of the release to run (scripts/test.sh sets it for each
//! pass); unset, the 1.20.2 cache. The release is what its kubelet says it is.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The binaries every release's bin dir holds.
const BINARIES: [&str; 6] = [
    "kubelet",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "kubectl",
];

/// One Kubernetes release's binaries and version.
#[derive(Debug, Clone)]
pub struct Kubernetes {
    bin: PathBuf,
    version: String,
    minor: u32,
}

impl Kubernetes {
    /// The release in `DEVINJECT_KUBE_BIN`, or scripts/kube-build.sh's 1.20.2 cache; `None` when
    /// its binaries are not all there.
    pub fn find() -> Option<Self> {
        Self::at(&bin_dir()?).ok()
    }

    /// The release whose binaries are in `bin`, as its kubelet reports it.
    pub fn at(bin: &Path) -> Result<Self> {
        if let Some(missing) = BINARIES.iter().find(|b| !bin.join(b).is_file()) {
            bail!("{} has no {missing}", bin.display());
        }
        let out = Command::new(bin.join("kubelet"))
            .arg("--version")
            .output()
            .context("kubelet --version")?;
        let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let version = said
            .strip_prefix("Kubernetes ")
            .with_context(|| format!("kubelet --version said {said:?}"))?
            .to_owned();
        let minor = version
            .strip_prefix("v1.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|m| m.parse().ok())
            .with_context(|| format!("no v1.<minor> in {version:?}"))?;
        Ok(Self {
            bin: bin.to_owned(),
            version,
            minor,
        })
    }

    /// The path of its binary `name`.
    pub fn binary(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// Its version, `v1.<minor>.<patch>`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Its minor version.
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// Whether it is the compatibility release (before 1.24, which removed the insecure ports,
    /// the `--container-runtime` flag and dockershim).
    pub fn is_legacy(&self) -> bool {
        self.minor < 24
    }

    /// The kube-scheduler configuration API it reads (`v1` since 1.25; 1.20 knows `v1beta1`).
    pub fn scheduler_api(&self) -> &'static str {
        if self.minor >= 25 {
            "kubescheduler.config.k8s.io/v1"
        } else {
            "kubescheduler.config.k8s.io/v1beta1"
        }
    }
}

fn bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DEVINJECT_KUBE_BIN") {
        return Some(PathBuf::from(d));
    }
    let cache = std::env::var_os("DEVINJECT_KUBE_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| Path::new(&h).join(".cache/devinject/kubernetes-1.20.2"))
        })?;
    Some(cache.join("bin"))
}
