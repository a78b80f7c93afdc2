//! What the DRA tests and the DRA benchmark put on a cluster started with [`Setup::Dra`]: the
//! DeviceClasses `devinject-dra` prints, and claim templates of the demo profile's class.
//!
//! [`Setup::Dra`]: super::Setup::Dra

use std::process::Command;

use anyhow::{Context, Result};

use super::{Cluster, DRA_DRIVER};
use crate::bins::bin;
use crate::daemons::run_ok;

/// containerd 2 and a Kubernetes release with DRA GA (1.34 or later): the containerd release,
/// or `None` (a skip, a failure under CI) when either is missing.
pub fn ready_for_dra() -> Option<crate::runtimes::Release> {
    let release = super::ready_with_containerd("2")?;
    let today = super::Kubernetes::find().is_some_and(|k| !k.is_legacy());
    crate::skip::require(
        today,
        "DRA needs Kubernetes >= 1.34 (DEVINJECT_KUBE_BIN: scripts/kube-module-build.sh)",
    )
    .then_some(release)
}

/// The DeviceClass `devinject-dra device-classes` prints for the demo profile.
pub const DEMO_CLASS: &str = "demo.devinject.io";

impl Cluster {
    /// Applies the DeviceClasses of the first node's profiles, as `devinject-dra
    /// device-classes` prints them (what the manifests ship).
    pub fn apply_dra_device_classes(&self) -> Result<()> {
        let mut classes = Command::new(bin("devinject-dra"));
        classes
            .args(["device-classes", "--profiles-dir"])
            .arg(&self.host().profiles_dir);
        let yaml = run_ok(classes).context("devinject-dra device-classes")?;
        self.apply(&yaml).context("apply the DeviceClasses")?;
        Ok(())
    }
}

/// The DeviceClass `devinject-dra device-classes` prints for `profile`.
pub fn device_class(profile: &str) -> String {
    format!("{profile}.{DRA_DRIVER}")
}

/// A ResourceClaimTemplate `name` asking for `count` devices of the DeviceClass `class`, in the
/// request `dev`.
pub fn claim_template(name: &str, class: &str, count: u32) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: {name}\n\
         spec:\n  spec:\n    devices:\n      requests:\n      - name: dev\n        exactly:\n          \
         deviceClassName: {class}\n          allocationMode: ExactCount\n          count: {count}\n"
    )
}

/// [`claim_template`] of [`DEMO_CLASS`].
pub fn demo_claim_template(name: &str, count: u32) -> String {
    claim_template(name, DEMO_CLASS, count)
}
