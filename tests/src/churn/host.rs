//! The churn nodes' simulated host: the demo accelerators, and `/dev/kvm` made with the host's
//! numbers under its dev root (its shipped profile, shared as [`super::pods::KVM`]'s
//! replicas), so that a granted one opens on the real kernel device inside the container and an
//! un-granted one is denied by the device cgroup.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cluster::NodeHost;
use crate::sim::{demo_host, mknod, SimHost};

use super::pods::KERNEL_DEVICES;

/// The cluster's node host for the churn ([`crate::cluster::Shape::node_host`]).
pub const NODE_HOST: NodeHost = NodeHost {
    make,
    image: plain_image,
};

fn make(dir: &Path) -> Result<SimHost> {
    let profiles: Vec<&str> = std::iter::once("demo")
        .chain(KERNEL_DEVICES.iter().map(|d| d.profile))
        .collect();
    let host = demo_host(dir, &profiles)?;
    for d in KERNEL_DEVICES {
        let path = host.dev_root.join(d.node);
        mknod(&path, d.major, d.minor, "0666").with_context(|| format!("{}", path.display()))?;
        if d.shared() {
            host.set_profile_key(d.profile, "replicas", &d.replicas.to_string())?;
        }
    }
    Ok(host)
}

/// The pods run the plain test image.
fn plain_image(_rootfs: &Path) -> Result<()> {
    Ok(())
}

/// The devices `devinject-dra` publishes for a churn node: the demo accelerators and every
/// replica of each kernel device (a shared device is a DRA device per share).
pub fn dra_devices() -> usize {
    crate::sim::ACCELS.len()
        + KERNEL_DEVICES
            .iter()
            .map(|d| d.replicas as usize)
            .sum::<usize>()
}
