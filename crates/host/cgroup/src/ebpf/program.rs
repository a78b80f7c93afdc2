//! Safe handles for cgroup v2 device programs: load, open by id, read instructions, query,
//! attach, replace, detach. Thin typed wrappers over the crate's `sys` module that turn
//! errno values into [`CgroupError`]s naming the program, the cgroup and the bpf(2) command.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::resource::{setrlimit, Resource, RLIM_INFINITY};

use super::insn::Insn;
use crate::error::{CgroupError, Result};
use crate::sys;

/// `BPF_PROG_TYPE_CGROUP_DEVICE`.
pub const PROG_TYPE_CGROUP_DEVICE: u32 = 15;
/// `BPF_CGROUP_DEVICE` attach type.
pub const ATTACH_CGROUP_DEVICE: u32 = 6;
/// `BPF_F_ALLOW_OVERRIDE`: a descendant may replace this program with its own.
pub const F_ALLOW_OVERRIDE: u32 = 1;
/// `BPF_F_ALLOW_MULTI`: several programs per cgroup, all of which must allow.
pub const F_ALLOW_MULTI: u32 = 2;
/// `BPF_F_REPLACE`: swap `replace_bpf_fd` for the new program atomically (Linux 5.6).
pub const F_REPLACE: u32 = 4;
/// `BPF_F_QUERY_EFFECTIVE`: also list programs inherited from ancestors.
const F_QUERY_EFFECTIVE: u32 = 1;

/// License string of programs we load. The kernel uses it only to gate GPL-only helpers,
/// and our programs call no helpers at all (see [`super::prefix::check_extendable`]).
const LICENSE: &std::ffi::CStr = c"Apache-2.0";

/// Most of a verifier log kept in an error message (the failure is at the end).
const LOG_TAIL: usize = 8 * 1024;

/// An open cgroup v2 directory, the target of device program queries and attachments.
#[derive(Debug)]
pub struct CgroupDir {
    dir: File,
    path: PathBuf,
}

/// Programs attached directly to one cgroup, as `BPF_PROG_QUERY` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedPrograms {
    /// Program ids, in execution order.
    pub ids: Vec<u32>,
    /// The cgroup's attach flags for this type (`F_ALLOW_MULTI`, `F_ALLOW_OVERRIDE` or 0).
    pub flags: u32,
}

impl CgroupDir {
    /// Opens `path` as a directory.
    pub fn open(path: &Path) -> Result<Self> {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| CgroupError::OpenCgroup {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            dir,
            path: path.to_owned(),
        })
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Device programs attached to this cgroup itself.
    pub fn device_programs(&self) -> Result<AttachedPrograms> {
        let (ids, flags) = self.query(0)?;
        Ok(AttachedPrograms { ids, flags })
    }

    /// Device programs that run for this cgroup: its own and its ancestors'.
    pub fn effective_device_programs(&self) -> Result<Vec<u32>> {
        Ok(self.query(F_QUERY_EFFECTIVE)?.0)
    }

    fn query(&self, query_flags: u32) -> Result<(Vec<u32>, u32)> {
        // 64 is the kernel's per-cgroup limit (BPF_CGROUP_MAX_PROGS) but effective lists can
        // be longer; grow to the count the kernel reports on ENOSPC.
        let mut ids = vec![0u32; 64];
        for _ in 0..8 {
            match sys::prog_query(
                self.dir.as_fd(),
                ATTACH_CGROUP_DEVICE,
                query_flags,
                &mut ids,
            ) {
                Ok((count, flags)) => {
                    ids.truncate(count as usize);
                    return Ok((ids, flags));
                }
                Err((Errno::ENOSPC, count)) => {
                    let want = (count as usize).max(ids.len() * 2);
                    ids.resize(want, 0);
                }
                Err((errno, _)) => return Err(self.query_error(errno)),
            }
        }
        Err(self.query_error(Errno::ENOSPC))
    }

    fn query_error(&self, errno: Errno) -> CgroupError {
        CgroupError::QueryPrograms {
            path: self.path.clone(),
            source: io::Error::from(errno),
        }
    }
}

/// Result of [`DeviceProgram::replace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceOutcome {
    /// The new program took the old one's place atomically.
    Replaced,
    /// The kernel does not know `BPF_F_REPLACE` (EINVAL, Linux < 5.6); nothing changed.
    Unsupported,
}

/// A loaded `BPF_PROG_TYPE_CGROUP_DEVICE` program, held by an open fd.
#[derive(Debug)]
pub struct DeviceProgram {
    fd: OwnedFd,
    id: u32,
    name: String,
}

impl DeviceProgram {
    /// Loads `insns` as a device program named `name` (truncated to 15 characters, characters
    /// other than ASCII letters, digits, `_` and `.` replaced by `_`). On failure the program
    /// is loaded again with the verifier log enabled and the log is put in the error.
    pub fn load(insns: &[Insn], name: &str) -> Result<Self> {
        let code = Insn::encode(insns);
        let obj_name = object_name(name);
        let first = sys::prog_load(PROG_TYPE_CGROUP_DEVICE, &code, LICENSE, obj_name, None);
        let fd = match first {
            Ok(fd) => fd,
            Err(Errno::EPERM) if raise_memlock() => {
                // Before Linux 5.11 programs are charged to RLIMIT_MEMLOCK; runc raises it too.
                sys::prog_load(PROG_TYPE_CGROUP_DEVICE, &code, LICENSE, obj_name, None)
                    .map_err(|errno| load_error(name, insns.len(), errno, &code, obj_name))?
            }
            Err(errno) => return Err(load_error(name, insns.len(), errno, &code, obj_name)),
        };
        let info = sys::prog_info(fd.as_fd(), None).map_err(|errno| CgroupError::ProgramInfo {
            id: 0,
            source: io::Error::from(errno),
        })?;
        Ok(Self {
            fd,
            id: info.id,
            name: info.name,
        })
    }

    /// Opens the program with id `id`; `None` when the kernel refuses with EPERM or EACCES
    /// (for example a program an LSM protects), which callers skip like runc does.
    pub fn open(id: u32) -> Result<Option<Self>> {
        let fd = match sys::prog_get_fd_by_id(id) {
            Ok(fd) => fd,
            Err(Errno::EPERM | Errno::EACCES) => return Ok(None),
            Err(errno) => {
                return Err(CgroupError::OpenProgram {
                    id,
                    source: io::Error::from(errno),
                })
            }
        };
        let info = sys::prog_info(fd.as_fd(), None).map_err(|errno| CgroupError::ProgramInfo {
            id,
            source: io::Error::from(errno),
        })?;
        Ok(Some(Self {
            fd,
            id,
            name: info.name,
        }))
    }

    /// The kernel's id for this program.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The program's name as the kernel stores it (at most 15 bytes).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program's translated instructions (`xlated_prog_insns`), read in two calls:
    /// length first, then the buffer. Fails with [`CgroupError::HiddenInstructions`] when the
    /// kernel withholds them.
    pub fn instructions(&self) -> Result<Vec<Insn>> {
        let info_error = |errno: Errno| CgroupError::ProgramInfo {
            id: self.id,
            source: io::Error::from(errno),
        };
        let info = sys::prog_info(self.fd.as_fd(), None).map_err(info_error)?;
        if info.xlated_len == 0 {
            return Err(CgroupError::HiddenInstructions { id: self.id });
        }
        let mut buf = vec![0u8; info.xlated_len as usize];
        let info = sys::prog_info(self.fd.as_fd(), Some(&mut buf)).map_err(info_error)?;
        if !info.xlated_copied {
            return Err(CgroupError::HiddenInstructions { id: self.id });
        }
        buf.truncate(info.xlated_len as usize);
        Insn::decode(&buf).ok_or_else(|| CgroupError::Unextendable {
            id: self.id,
            reason: format!(
                "the kernel returned {} bytes, not whole instructions",
                buf.len()
            ),
        })
    }

    /// Attaches this program to `cgroup` with `flags` (normally [`F_ALLOW_MULTI`]).
    pub fn attach(&self, cgroup: &CgroupDir, flags: u32) -> Result<()> {
        sys::prog_attach(
            cgroup.dir.as_fd(),
            self.fd.as_fd(),
            ATTACH_CGROUP_DEVICE,
            flags,
            None,
        )
        .map_err(|errno| CgroupError::AttachProgram {
            path: cgroup.path.clone(),
            id: self.id,
            source: io::Error::from(errno),
        })
    }

    /// Puts this program in the place of `old` on `cgroup` in one step
    /// (`BPF_F_ALLOW_MULTI | BPF_F_REPLACE`, `replace_bpf_fd` = `old`).
    pub fn replace(&self, cgroup: &CgroupDir, old: &DeviceProgram) -> Result<ReplaceOutcome> {
        match sys::prog_attach(
            cgroup.dir.as_fd(),
            self.fd.as_fd(),
            ATTACH_CGROUP_DEVICE,
            F_ALLOW_MULTI | F_REPLACE,
            Some(old.fd.as_fd()),
        ) {
            Ok(()) => Ok(ReplaceOutcome::Replaced),
            // Kernels before 5.6 reject the unknown flag and the non-zero replace_bpf_fd
            // (NVIDIA/libnvidia-container#151).
            Err(Errno::EINVAL) => Ok(ReplaceOutcome::Unsupported),
            Err(errno) => Err(CgroupError::ReplaceProgram {
                path: cgroup.path.clone(),
                old_id: old.id,
                new_id: self.id,
                source: io::Error::from(errno),
            }),
        }
    }

    /// Detaches this program from `cgroup`.
    pub fn detach(&self, cgroup: &CgroupDir) -> Result<()> {
        sys::prog_detach(cgroup.dir.as_fd(), self.fd.as_fd(), ATTACH_CGROUP_DEVICE).map_err(
            |errno| CgroupError::DetachProgram {
                path: cgroup.path.clone(),
                id: self.id,
                source: io::Error::from(errno),
            },
        )
    }
}

/// `BPF_OBJ_NAME_LEN`-sized, NUL-terminated name the kernel accepts.
fn object_name(name: &str) -> [u8; sys::OBJ_NAME_LEN] {
    let mut out = [0u8; sys::OBJ_NAME_LEN];
    for (slot, b) in out.iter_mut().zip(name.bytes().take(sys::OBJ_NAME_LEN - 1)) {
        *slot = if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' {
            b
        } else {
            b'_'
        };
    }
    out
}

/// Raises RLIMIT_MEMLOCK to unlimited; false when not permitted.
fn raise_memlock() -> bool {
    match setrlimit(Resource::RLIMIT_MEMLOCK, RLIM_INFINITY, RLIM_INFINITY) {
        Ok(()) => true,
        Err(errno) => {
            tracing::debug!(%errno, "cannot raise RLIMIT_MEMLOCK");
            false
        }
    }
}

/// Builds the load error, loading once more with `log_level` 1 to capture the verifier log.
fn load_error(
    name: &str,
    insns: usize,
    errno: Errno,
    code: &[u8],
    obj_name: [u8; sys::OBJ_NAME_LEN],
) -> CgroupError {
    let mut log = vec![0u8; 1 << 20];
    let log = match sys::prog_load(
        PROG_TYPE_CGROUP_DEVICE,
        code,
        LICENSE,
        obj_name,
        Some(&mut log),
    ) {
        // Loaded with the log on: the first failure was transient; report it anyway.
        Ok(_) => "(none: the program loaded when retried with the verifier log enabled)".to_owned(),
        Err(_) => verifier_log_tail(&log),
    };
    CgroupError::LoadProgram {
        name: name.to_owned(),
        insns,
        log,
        source: io::Error::from(errno),
    }
}

fn verifier_log_tail(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..end]);
    let text = text.trim_end();
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    if text.len() <= LOG_TAIL {
        return text.to_owned();
    }
    let mut start = text.len() - LOG_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_truncated_and_sanitised() {
        assert_eq!(&object_name("devinject")[..10], b"devinject\0");
        let long = object_name("a-very-long-program-name");
        assert_eq!(&long[..15], b"a_very_long_pro");
        assert_eq!(long[15], 0);
        assert_eq!(
            &object_name("runc.v2_x")[..10],
            b"runc.v2_x\0",
            "'.' and '_' kept"
        );
    }

    #[test]
    fn verifier_log_keeps_the_end() {
        assert_eq!(verifier_log_tail(b"\0\0"), "(empty)");
        assert_eq!(verifier_log_tail(b"R0 !read_ok\n\0junk"), "R0 !read_ok");
        let long = format!("{}last line", "x".repeat(3 * LOG_TAIL));
        let tail = verifier_log_tail(long.as_bytes());
        assert!(tail.starts_with("...") && tail.ends_with("last line"));
        assert!(tail.len() <= LOG_TAIL + 3);
        // 8 KiB are kept whole; one byte more and the start goes.
        let whole = "y".repeat(8 << 10);
        assert_eq!(verifier_log_tail(whole.as_bytes()), whole);
        let over = format!("z{whole}");
        assert_eq!(verifier_log_tail(over.as_bytes()), format!("...{whole}"));
        // A cut inside a character moves forward to the next one.
        let rest = "y".repeat((8 << 10) - 1);
        let split = format!("a\u{e9}{rest}");
        assert_eq!(verifier_log_tail(split.as_bytes()), format!("...{rest}"));
    }

    #[test]
    fn a_cgroup_dir_must_be_a_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cgroup.procs");
        std::fs::write(&file, "").expect("write");
        let err = CgroupDir::open(&file).expect_err("a regular file");
        assert!(matches!(err, CgroupError::OpenCgroup { .. }), "{err}");
        assert!(CgroupDir::open(dir.path()).is_ok());
    }
}
