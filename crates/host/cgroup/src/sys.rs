//! Raw `bpf(2)` calls. The only module of this crate with `unsafe` code.
//!
//! Each command takes its own `#[repr(C)]` slice of `union bpf_attr` (layouts from
//! `include/uapi/linux/bpf.h`), zero-initialised so that fields unknown to older kernels read
//! as zero (the kernel's `CHECK_ATTR` rejects non-zero bytes past the last field it knows).
//! Errors come back as the raw errno; callers add what was being done.

use std::ffi::CStr;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;

const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_ATTACH: libc::c_int = 8;
const BPF_PROG_DETACH: libc::c_int = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_PROG_QUERY: libc::c_int = 16;

/// `BPF_OBJ_NAME_LEN`.
pub(crate) const OBJ_NAME_LEN: usize = 16;

/// `attr.prog_load` up to `expected_attach_type` (Linux 4.17; earlier kernels accept it
/// because the trailing fields are zero).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; OBJ_NAME_LEN],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `attr` for `BPF_PROG_ATTACH` / `BPF_PROG_DETACH` up to `replace_bpf_fd` (Linux 5.6).
#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// `attr.query` up to `prog_cnt`, padded to its 8-byte alignment with zero.
#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    pad: u32,
}

/// `attr` for `BPF_PROG_GET_FD_BY_ID`.
#[repr(C)]
#[derive(Default)]
struct GetIdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `attr.info` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `struct bpf_prog_info` up to `name` (Linux 4.15); the kernel fills in only as many bytes
/// as we pass in `info_len`.
#[repr(C)]
#[derive(Default)]
struct ProgInfoRaw {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; OBJ_NAME_LEN],
}

/// What `BPF_OBJ_GET_INFO_BY_FD` said about a program.
#[derive(Debug, Clone)]
pub(crate) struct ProgInfo {
    pub id: u32,
    pub name: String,
    /// Size of the translated instructions in bytes.
    pub xlated_len: u32,
    /// Whether the kernel copied instructions into the buffer (it withholds them from
    /// callers without `CAP_BPF`, and blinded programs from callers that may not see raw
    /// kernel addresses).
    pub xlated_copied: bool,
}

/// Issues `bpf(cmd, attr, sizeof *attr)`.
///
/// # Safety
/// Every pointer stored in `attr` must be valid for the accesses `cmd` makes through it
/// (reads or writes of the length stored next to it) for the duration of the call.
unsafe fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> Result<libc::c_long, Errno> {
    let size = size_of::<T>() as libc::c_uint;
    // SAFETY: bpf(2) reads (and for some commands writes back) at most `size` bytes at
    // `attr`, which is an exclusive borrow of exactly that many bytes. The pointers stored in
    // it are valid per this function's contract.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size) };
    Errno::result(ret)
}

/// Wraps an fd returned by a successful bpf(2) command.
fn owned_fd(ret: libc::c_long) -> Result<OwnedFd, Errno> {
    let fd = RawFd::try_from(ret).map_err(|_| Errno::EBADF)?;
    // SAFETY: bpf(2) (BPF_PROG_LOAD, BPF_PROG_GET_FD_BY_ID) returns a new file descriptor on
    // success (bpf(2) "RETURN VALUE"); nothing else owns it, so OwnedFd may close it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // Open file descriptors are never negative.
    u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX)
}

/// `BPF_PROG_LOAD` of `code` (encoded instructions) with `license`, `name` and, when `log`
/// is given, `log_level` 1 into it (the kernel NUL-terminates what it writes).
pub(crate) fn prog_load(
    prog_type: u32,
    code: &[u8],
    license: &CStr,
    name: [u8; OBJ_NAME_LEN],
    log: Option<&mut [u8]>,
) -> Result<OwnedFd, Errno> {
    let insn_cnt = u32::try_from(code.len() / 8).map_err(|_| Errno::E2BIG)?;
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        ..Default::default()
    };
    if let Some(log) = log {
        attr.log_level = 1;
        attr.log_size = u32::try_from(log.len()).map_err(|_| Errno::E2BIG)?;
        attr.log_buf = log.as_mut_ptr() as u64;
    }
    // SAFETY: `insns` points to `insn_cnt * 8` readable bytes of `code`, `license` to a
    // NUL-terminated string, and `log_buf` (when set) to `log_size` writable bytes of `log`;
    // all three borrows outlive the call (bpf(2), BPF_PROG_LOAD).
    let ret = unsafe { bpf(BPF_PROG_LOAD, &mut attr) }?;
    owned_fd(ret)
}

/// `BPF_PROG_GET_FD_BY_ID`.
pub(crate) fn prog_get_fd_by_id(id: u32) -> Result<OwnedFd, Errno> {
    let mut attr = GetIdAttr {
        prog_id: id,
        ..Default::default()
    };
    // SAFETY: this command's attr holds no pointers.
    let ret = unsafe { bpf(BPF_PROG_GET_FD_BY_ID, &mut attr) }?;
    owned_fd(ret)
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program; copies translated instructions into `xlated` when
/// given (up to its length).
pub(crate) fn prog_info(
    prog: BorrowedFd<'_>,
    xlated: Option<&mut [u8]>,
) -> Result<ProgInfo, Errno> {
    let mut info = ProgInfoRaw::default();
    let buffer = xlated.map(|buf| (buf.as_mut_ptr() as u64, buf.len()));
    if let Some((ptr, len)) = buffer {
        info.xlated_prog_len = u32::try_from(len).map_err(|_| Errno::E2BIG)?;
        info.xlated_prog_insns = ptr;
    }
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(prog),
        info_len: size_of::<ProgInfoRaw>() as u32,
        info: &mut info as *mut ProgInfoRaw as u64,
    };
    // SAFETY: `info` points to `info_len` writable bytes of the local `info`; inside it,
    // `xlated_prog_insns` (when set) points to `xlated_prog_len` writable bytes of `xlated`,
    // and the other buffer pointers are zero with zero lengths, so the kernel writes nothing
    // through them (bpf(2), BPF_OBJ_GET_INFO_BY_FD).
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    let name_len = info
        .name
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(OBJ_NAME_LEN);
    Ok(ProgInfo {
        id: info.id,
        name: String::from_utf8_lossy(&info.name[..name_len]).into_owned(),
        xlated_len: info.xlated_prog_len,
        // The kernel zeroes the pointer when it withholds the instructions.
        xlated_copied: buffer.is_some() && info.xlated_prog_insns != 0,
    })
}

/// `BPF_PROG_QUERY`: fills `ids` and returns `(count, attach_flags)`. With too small a
/// buffer the kernel fails with `ENOSPC` and the count is returned in the error's place.
pub(crate) fn prog_query(
    target: BorrowedFd<'_>,
    attach_type: u32,
    query_flags: u32,
    ids: &mut [u32],
) -> Result<(u32, u32), (Errno, u32)> {
    let mut attr = QueryAttr {
        target_fd: fd_u32(target),
        attach_type,
        query_flags,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: u32::try_from(ids.len()).map_err(|_| (Errno::E2BIG, 0))?,
        ..Default::default()
    };
    // SAFETY: `prog_ids` points to `prog_cnt` writable u32 slots of `ids`, the only buffer
    // the kernel writes through (bpf(2), BPF_PROG_QUERY).
    match unsafe { bpf(BPF_PROG_QUERY, &mut attr) } {
        Ok(_) => Ok((attr.prog_cnt, attr.attach_flags)),
        Err(e) => Err((e, attr.prog_cnt)),
    }
}

/// `BPF_PROG_ATTACH` of `prog` to `target`, replacing `replace` atomically when given
/// (`flags` must then include `BPF_F_REPLACE`).
pub(crate) fn prog_attach(
    target: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
    flags: u32,
    replace: Option<BorrowedFd<'_>>,
) -> Result<(), Errno> {
    let mut attr = AttachAttr {
        target_fd: fd_u32(target),
        attach_bpf_fd: fd_u32(prog),
        attach_type,
        attach_flags: flags,
        replace_bpf_fd: replace.map(fd_u32).unwrap_or(0),
    };
    // SAFETY: this command's attr holds file descriptors, no pointers.
    unsafe { bpf(BPF_PROG_ATTACH, &mut attr) }.map(drop)
}

/// `BPF_PROG_DETACH` of `prog` from `target`.
pub(crate) fn prog_detach(
    target: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
) -> Result<(), Errno> {
    let mut attr = AttachAttr {
        target_fd: fd_u32(target),
        attach_bpf_fd: fd_u32(prog),
        attach_type,
        ..Default::default()
    };
    // SAFETY: this command's attr holds file descriptors, no pointers.
    unsafe { bpf(BPF_PROG_DETACH, &mut attr) }.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_layouts_match_linux_bpf_h() {
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(size_of::<AttachAttr>(), 20);
        assert_eq!(size_of::<QueryAttr>(), 32);
        assert_eq!(std::mem::offset_of!(QueryAttr, prog_ids), 16);
        assert_eq!(std::mem::offset_of!(QueryAttr, prog_cnt), 24);
        assert_eq!(size_of::<GetIdAttr>(), 12);
        assert_eq!(size_of::<InfoAttr>(), 16);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, xlated_prog_len), 20);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, xlated_prog_insns), 32);
        assert_eq!(std::mem::offset_of!(ProgInfoRaw, name), 64);
        assert_eq!(size_of::<ProgInfoRaw>(), 80);
    }
}
