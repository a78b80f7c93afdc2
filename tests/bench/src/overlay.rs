//! A fresh rootfs for every container start, as an engine gives one.
//!
//! docker and containerd start each container on a new overlay mount over the image's layers. The
//! benchmark does the same: the pristine busybox rootfs is the lower layer and every start gets an
//! empty upper layer, so what one start writes into the rootfs (mount points, soname links, a
//! linker cache) is gone for the next. Mounting and unmounting are not timed.
//!
//! Upper layers are only unmounted after a start, never deleted during the run (they go with the
//! scratch filesystem at the end): ext4 skips recently deleted inodes when it allocates new ones
//! (`recently_deleted` in `find_inode_bit`), and deleting a hundred files per start made every
//! file a later start created cost ~0.4 ms of kernel time, measured with perf, instead of a few
//! microseconds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use devinject_tests::nvidia_toolkit::{cycle, Cycle};
use devinject_tests::runc::Bundle;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::scratch::Scratch;

/// One start of `bundle` (its spec written first) as container `name` through `runtime`, as an
/// engine drives a runtime ([`cycle`]), on a fresh overlay of `lower` whose upper layer is
/// `scratch/layers/<name>`: the cycle, once the container ran, and the upper layer's path.
pub fn start_on_fresh_rootfs(
    runtime: &[String],
    bundle: &Bundle,
    lower: &Path,
    scratch: &Scratch,
    name: &str,
) -> Result<(Cycle, PathBuf)> {
    bundle.write()?;
    let layer = scratch.layers.join(name);
    let rootfs = FreshRootfs::mount(lower, &bundle.dir.join("rootfs"), &layer)?;
    let ran = cycle(
        runtime,
        &scratch.runc_root,
        &bundle.dir,
        name,
        Duration::from_secs(60),
    );
    rootfs.release()?;
    let ran = ran?;
    if ran.failed.is_some() {
        bail!("{name} failed: {}", ran.text);
    }
    Ok((ran, layer))
}

/// An overlay of `lower` mounted at `merged`, unmounted on [`FreshRootfs::release`] or drop.
#[derive(Debug)]
pub struct FreshRootfs {
    merged: PathBuf,
    mounted: bool,
}

impl FreshRootfs {
    /// Mounts a fresh overlay of `lower` at `merged`, its upper and work dirs under `scratch`
    /// (a new directory, left in place).
    pub fn mount(lower: &Path, merged: &Path, scratch: &Path) -> Result<Self> {
        let (upper, work) = (scratch.join("upper"), scratch.join("work"));
        std::fs::create_dir_all(&upper)?;
        std::fs::create_dir_all(&work)?;
        std::fs::create_dir_all(merged)?;
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        );
        mount(
            Some("overlay"),
            merged,
            Some("overlay"),
            MsFlags::empty(),
            Some(data.as_str()),
        )
        .with_context(|| format!("mount overlay at {}", merged.display()))?;
        Ok(Self {
            merged: merged.to_owned(),
            mounted: true,
        })
    }

    /// Unmounts.
    pub fn release(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if !self.mounted {
            return Ok(());
        }
        self.mounted = false;
        umount2(&self.merged, MntFlags::MNT_DETACH)
            .with_context(|| format!("unmount {}", self.merged.display()))
    }
}

impl Drop for FreshRootfs {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}
