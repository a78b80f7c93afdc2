//! Booby-trapping a rootfs the way a hostile image, or a container sharing a volume with it,
//! would: links to host paths (absolute, climbing with `..`, chained, dangling, through procfs
//! magic links), FIFOs and device nodes where files belong, files where directories belong, and a
//! [`Swapper`] that keeps exchanging a directory with a link while containers start.
//!
//! Paths inside the rootfs are given container-absolute (`/usr/lib`); every helper first removes
//! whatever is at that name without following links.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
use nix::sys::stat::{mknod, Mode, SFlag};

/// The host path of container path `at` in `rootfs`.
pub fn host(rootfs: &Path, at: &str) -> PathBuf {
    rootfs.join(at.trim_start_matches('/'))
}

/// Removes whatever is at `path` (a tree, a file, a link: never what a link points to).
pub fn remove(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("lstat {}", path.display())),
        Ok(m) if m.is_dir() => {
            std::fs::remove_dir_all(path).with_context(|| format!("rm -r {}", path.display()))
        }
        Ok(_) => std::fs::remove_file(path).with_context(|| format!("rm {}", path.display())),
    }
}

fn replace(rootfs: &Path, at: &str) -> Result<PathBuf> {
    let p = host(rootfs, at);
    remove(&p)?;
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("mkdir {}", parent.display()))?;
    }
    Ok(p)
}

/// Makes `at` a symlink to `target` (taken verbatim: absolute, relative, anything).
pub fn link(rootfs: &Path, at: &str, target: impl AsRef<Path>) -> Result<()> {
    let p = replace(rootfs, at)?;
    std::os::unix::fs::symlink(target.as_ref(), &p)
        .with_context(|| format!("symlink {}", p.display()))
}

/// A relative link target for a link at container path `at` that climbs far above the root with
/// `..` and then descends to the absolute `target`: on the host, from the rootfs's real location,
/// it reaches `target` itself.
pub fn climb(at: &str, target: &Path) -> PathBuf {
    let mut s = "../".repeat(at.matches('/').count() + 24);
    s.push_str(target.to_string_lossy().trim_start_matches('/'));
    PathBuf::from(s)
}

/// Creates directory `host_path` (an absolute host path) inside `rootfs` too, so that an
/// absolute link to it resolves inside the rootfs when resolved as if the rootfs were `/`.
pub fn mirror(rootfs: &Path, host_path: &Path) -> Result<PathBuf> {
    let p = host(rootfs, &host_path.to_string_lossy());
    std::fs::create_dir_all(&p).with_context(|| format!("mkdir {}", p.display()))?;
    Ok(p)
}

/// Makes `at` a FIFO.
pub fn fifo(rootfs: &Path, at: &str) -> Result<()> {
    let p = replace(rootfs, at)?;
    nix::unistd::mkfifo(&p, Mode::from_bits_truncate(0o644))
        .with_context(|| format!("mkfifo {}", p.display()))
}

/// Makes `at` a char device node.
pub fn char_node(rootfs: &Path, at: &str, major: u64, minor: u64) -> Result<()> {
    let p = replace(rootfs, at)?;
    mknod(
        &p,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(major, minor),
    )
    .with_context(|| format!("mknod {}", p.display()))
}

/// Makes `at` an empty directory.
pub fn dir(rootfs: &Path, at: &str) -> Result<()> {
    let p = replace(rootfs, at)?;
    std::fs::create_dir(&p).with_context(|| format!("mkdir {}", p.display()))
}

/// Makes `at` a regular file holding `text`.
pub fn file(rootfs: &Path, at: &str, text: &str) -> Result<()> {
    let p = replace(rootfs, at)?;
    std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))
}

/// Keeps exchanging two names (`renameat2(RENAME_EXCHANGE)`, atomic) in a thread, e.g. a
/// directory of the rootfs and a link to a host directory, until stopped; then leaves them as
/// they were at the start.
#[derive(Debug)]
pub struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    handle: Option<JoinHandle<Result<()>>>,
}

impl Swapper {
    /// Starts exchanging `a` and `b`; both must exist.
    pub fn start(a: PathBuf, b: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), swaps.clone());
        let handle = std::thread::spawn(move || -> Result<()> {
            let mut count = 0u64;
            while !s.load(Ordering::Relaxed) || count % 2 == 1 {
                renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE)
                    .with_context(|| format!("exchange {} and {}", a.display(), b.display()))?;
                count += 1;
                n.store(count, Ordering::Relaxed);
                std::thread::yield_now();
            }
            Ok(())
        });
        Self {
            stop,
            swaps,
            handle: Some(handle),
        }
    }

    /// Exchanges so far.
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Relaxed)
    }

    /// Stops, restores the starting layout and returns the number of exchanges made.
    pub fn stop(mut self) -> Result<u64> {
        self.finish()
    }

    fn finish(&mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("swapper thread panicked")?;
        }
        Ok(self.swaps())
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn climbing_links_reach_the_host_path_from_the_real_location() {
        let t = tempfile::tempdir().unwrap();
        let rootfs = t.path().join("rootfs");
        let target = t.path().join("canary");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::create_dir_all(rootfs.join("usr")).unwrap();
        link(&rootfs, "/usr/lib", climb("/usr/lib", &target)).unwrap();
        assert_eq!(
            std::fs::canonicalize(rootfs.join("usr/lib")).unwrap(),
            std::fs::canonicalize(&target).unwrap()
        );
    }

    #[test]
    fn the_swapper_restores_the_layout() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::os::unix::fs::symlink("/nonexistent", &b).unwrap();
        let s = Swapper::start(a.clone(), b.clone());
        while s.swaps() < 3 {
            std::thread::yield_now();
        }
        assert!(s.stop().unwrap() >= 3);
        assert!(std::fs::symlink_metadata(&a).unwrap().is_dir());
        assert!(std::fs::symlink_metadata(&b).unwrap().is_symlink());
    }
}
