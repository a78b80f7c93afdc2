//! The churn nodes' simulated host: the demo accelerators, and `/dev/kvm` made with the host's
//! numbers under its dev root (its shipped profile, shared as [`super::pods::KVM`]'s
//! replicas on every path, DRA's included), so that a granted one opens on the real kernel device inside the container and an
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
            without_capacity(&host.profiles_dir.join(format!("{}.toml", d.profile)))?;
        }
    }
    Ok(host)
}

/// Drops the `[capacity]` table of the profile at `path` (the shipped kvm profile shares its
/// device by capacity through DRA): shared by its replicas alone, the device is a DRA device
/// per replica id, as on the other paths, and the churn's exclusivity checks hold for each.
fn without_capacity(path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut kept = Vec::new();
    let mut in_capacity = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_capacity = t == "[capacity]";
        }
        if !in_capacity {
            kept.push(line);
        }
    }
    std::fs::write(path, kept.join("\n") + "\n")
        .with_context(|| format!("write {}", path.display()))
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
