//! Where containers' writable layers, bundles and runc's state live during the benchmark.
//!
//! On a node, bundles and runc's state are on a tmpfs (`/run/containerd/io.containerd.runtime.v2.task`,
//! `/run/docker/runtime-runc`; CRI-O's `/run/containers`) and overlay upper layers are on the
//! engine's disk. The benchmark mounts both afresh for each run, so that what else the machine's root
//! filesystem is going through (other builds creating and deleting files) does not show up in
//! the figures: ext4 skips recently deleted inodes when it allocates, and with heavy churn that
//! made each created file cost ~0.4 ms of kernel time (perf: `recently_deleted` under
//! `find_inode_bit`).
//! - bundles and runc state: a small tmpfs.
//! - layers: by default a new ext4 filesystem on a sparse loop image (real journal, real
//!   `fsync`), or a tmpfs, or a plain directory of the work dir.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// The filesystem of the upper layers (`--layers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayerFs {
    /// A fresh ext4 on a loop device.
    Ext4,
    Tmpfs,
    /// The work dir's own filesystem.
    Dir,
}

impl LayerFs {
    /// As written in the report.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Ext4 => "a fresh ext4 on a loop device",
            Self::Tmpfs => "tmpfs",
            Self::Dir => "the work dir's filesystem",
        }
    }
}

/// The mounted scratch filesystems, unmounted on drop.
#[derive(Debug)]
pub struct Scratch {
    /// Where upper layers go.
    pub layers: PathBuf,
    /// runc's `--root`.
    pub runc_root: PathBuf,
    /// Where bundles go.
    pub bundles: PathBuf,
    mounts: Vec<PathBuf>,
    image: Option<PathBuf>,
}

impl Scratch {
    /// A bundle named `slug` under [`Scratch::bundles`] with `template`'s spec, its rootfs at
    /// `<bundle>/rootfs` (where a start mounts its fresh overlay).
    pub fn bundle(
        &self,
        template: &devinject_tests::runc::Bundle,
        slug: &str,
    ) -> Result<devinject_tests::runc::Bundle> {
        let dir = self.bundles.join(slug);
        std::fs::create_dir_all(&dir)?;
        let mut bundle = devinject_tests::runc::Bundle {
            dir: dir.clone(),
            spec: template.spec.clone(),
        };
        bundle.spec["root"]["path"] = serde_json::json!(dir.join("rootfs"));
        Ok(bundle)
    }

    /// Mounts the scratch filesystems under `dir`.
    pub fn create(dir: &Path, fs: LayerFs) -> Result<Self> {
        let run_dir = dir.join("run");
        let mut s = Self {
            layers: dir.join("layers"),
            runc_root: run_dir.join("runc"),
            bundles: run_dir.join("bundles"),
            mounts: Vec::new(),
            image: None,
        };
        std::fs::create_dir_all(&s.layers)?;
        std::fs::create_dir_all(&run_dir)?;
        tmpfs(&run_dir, "size=256m")?;
        s.mounts.push(run_dir);
        std::fs::create_dir_all(&s.runc_root)?;
        std::fs::create_dir_all(&s.bundles)?;
        match fs {
            LayerFs::Dir => {}
            LayerFs::Tmpfs => {
                tmpfs(&s.layers, "size=2g")?;
                s.mounts.push(s.layers.clone());
            }
            LayerFs::Ext4 => {
                let image = dir.join("layers.ext4");
                // Sparse: only what is written takes space. One inode per 4 KiB: every start
                // creates a few hundred small files and none is deleted before the end.
                std::fs::File::create(&image)?.set_len(8 << 30)?;
                s.image = Some(image.clone());
                run(Command::new("mkfs.ext4")
                    .args(["-q", "-F", "-i", "4096", "-L", "devinject-bench"])
                    .arg(&image))
                .context("mkfs.ext4 (apt-get install e2fsprogs)")?;
                run(Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(&s.layers))
                .context("mount the layer filesystem on a loop device")?;
                s.mounts.push(s.layers.clone());
            }
        }
        Ok(s)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for m in self.mounts.iter().rev() {
            // A lazy unmount of a loop-mounted filesystem also frees the loop device.
            let _ = umount2(m, MntFlags::MNT_DETACH);
        }
        if let Some(image) = &self.image {
            let _ = std::fs::remove_file(image);
        }
    }
}

fn tmpfs(at: &Path, options: &str) -> Result<()> {
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options),
    )
    .with_context(|| format!("mount tmpfs at {}", at.display()))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
