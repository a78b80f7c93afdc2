//! The hook's own unsafe code: the new mount API syscalls that nix does not wrap, and `statx`
//! for a mount root. Forking and the descriptor syscalls around it are `devinject-contained`'s.
//!
//! Each function is a thin, checked wrapper; callers get `nix::Result` and owned fds.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

/// `open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)`: a detached copy of
/// the mount of the file `fd` refers to, which can later be attached in another mount namespace.
pub fn open_tree_clone(fd: impl AsFd) -> nix::Result<OwnedFd> {
    let empty: &CStr = c"";
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as u32;
    // SAFETY: open_tree(2) takes a dirfd, a NUL-terminated path and flags; `empty` is a valid
    // C string that outlives the call, and the fd is borrowed for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_fd().as_raw_fd(),
            empty.as_ptr(),
            flags,
        )
    };
    let raw = Errno::result(ret)?;
    // SAFETY: on success open_tree(2) returns a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {attr_set})` on a detached tree.
pub fn mount_setattr(fd: impl AsFd, attr_set: u64) -> nix::Result<()> {
    mount_setattr_flags(fd, attr_set, 0)
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, {attr_set})`: the mount `fd` is the root
/// of, and every mount below it.
pub fn mount_setattr_recursive(fd: impl AsFd, attr_set: u64) -> nix::Result<()> {
    mount_setattr_flags(fd, attr_set, libc::AT_RECURSIVE as u32)
}

fn mount_setattr_flags(fd: impl AsFd, attr_set: u64, flags: u32) -> nix::Result<()> {
    let empty: &CStr = c"";
    let mut attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr(2) reads `size` bytes of a `struct mount_attr`; we pass a pointer to
    // a fully initialised one and its exact size. The path is a valid empty C string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_fd().as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH as u32 | flags,
            &mut attr as *mut libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// `move_mount(from, "", to, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attaches the detached tree
/// `from` on top of the file `to` refers to.
pub fn move_mount(from: impl AsFd, to: impl AsFd) -> nix::Result<()> {
    let empty: &CStr = c"";
    let flags = libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH;
    // SAFETY: move_mount(2) takes two dirfd/path pairs and flags; both fds are borrowed for the
    // call and both paths are the same valid empty C string.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_fd().as_raw_fd(),
            empty.as_ptr(),
            to.as_fd().as_raw_fd(),
            empty.as_ptr(),
            flags,
        )
    };
    Errno::result(ret).map(drop)
}

/// Whether `fd` names the root of a mount (`statx` `STATX_ATTR_MOUNT_ROOT`, Linux 5.8). `None`
/// when the kernel does not report the attribute.
pub fn is_mount_root(fd: impl AsFd) -> nix::Result<Option<bool>> {
    let empty: &CStr = c"";
    let mut buf = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: statx(2) fills at most one `struct statx` at `buf`, which is a zeroed buffer of
    // exactly that type; the fd is borrowed for the call and the path is a valid empty C string
    // (AT_EMPTY_PATH: the fd itself is looked at).
    let ret = unsafe {
        libc::statx(
            fd.as_fd().as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
            buf.as_mut_ptr(),
        )
    };
    Errno::result(ret)?;
    // SAFETY: statx returned success, so the kernel wrote the struct; it was zeroed before, so
    // every field is initialised either way.
    let st = unsafe { buf.assume_init() };
    let attr = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok((st.stx_attributes_mask & attr != 0).then_some(st.stx_attributes & attr != 0))
}

/// A new tmpfs, not attached anywhere: `fsopen("tmpfs")`, each `(key, value)` of `options` set
/// with `FSCONFIG_SET_STRING`, then `fsmount` with `attr_flags` (`MOUNT_ATTR_*`). The fd is the
/// root of the detached mount: files can be made in it, and [`move_mount`] attaches it.
pub fn tmpfs_detached(options: &[(&CStr, &CStr)], attr_flags: u64) -> nix::Result<OwnedFd> {
    let fstype: &CStr = c"tmpfs";
    // SAFETY: fsopen(2) takes a NUL-terminated file system name and flags; `fstype` is a valid C
    // string that outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), libc::FSOPEN_CLOEXEC) };
    let raw = Errno::result(ret)?;
    // SAFETY: on success fsopen(2) returns a new file descriptor that nothing else owns.
    let fs = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    for (key, value) in options {
        // SAFETY: fsconfig(2) with FSCONFIG_SET_STRING reads two NUL-terminated strings, both
        // valid C strings borrowed for the call; the fd is borrowed too.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                libc::FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        Errno::result(ret)?;
    }
    // SAFETY: fsconfig(2) with FSCONFIG_CMD_CREATE takes no key or value (both NULL, aux 0).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    Errno::result(ret)?;
    // SAFETY: fsmount(2) takes the configured context's fd, flags and mount attributes; the fd
    // is borrowed for the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            attr_flags,
        )
    };
    let raw = Errno::result(ret)?;
    // SAFETY: on success fsmount(2) returns a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}
