//! Soname links next to injected libraries (`libcuda.so.1 -> libcuda.so.580.95`).
//!
//! Made with `symlinkat` in the parent directory fd, so they work for images without a
//! glibc `ldconfig` (musl, distroless) too. An image's own file or link at that name is replaced,
//! as `ldconfig` would; a directory there is an error. The directory must be on the rootfs's own
//! mount ([`Rootfs::writable_dir`]).

use nix::errno::Errno;
use nix::fcntl::readlinkat;
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};

use devinject_devices::Symlink;

use super::at_name::{self, AtName};
use super::rootfs::{entry_at, split, Rootfs, RootfsError};
use super::InjectError;

/// Creates `link` in the rootfs.
pub fn create(root: &Rootfs, link: &Symlink) -> Result<(), InjectError> {
    let (parent, name) = split(&link.link)?;
    let dir = root.writable_dir(&parent)?;
    let rerr = |op, errno| {
        InjectError::Rootfs(RootfsError {
            op,
            path: link.link.clone(),
            errno,
        })
    };
    if link.target.contains('/') {
        return Err(rerr("link outside its directory from", Errno::EINVAL));
    }
    // The usual case, a name the image does not have: one call.
    match root.create(|| symlinkat(link.target.as_str(), &dir, name)) {
        Ok(()) => return Ok(()),
        Err(Errno::EEXIST) => {}
        Err(e) => return Err(rerr("symlink", e)),
    }
    let points_at_target = || readlinkat(&dir, name).is_ok_and(|t| t == *link.target);
    match at_name::for_link(entry_at(&dir, name, &link.link)?, points_at_target) {
        AtName::Make => {}
        AtName::Keep => return Ok(()),
        AtName::Refuse { op, errno } => return Err(rerr(op, errno)),
        AtName::Replace => {
            unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| rerr("replace", e))?;
        }
    }
    root.create(|| symlinkat(link.target.as_str(), &dir, name))
        .map_err(|e| rerr("symlink", e))
}
