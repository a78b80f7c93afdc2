//! The crate's error type. Every message names what was being done and to what (path, pid,
//! program id, bpf(2) command); the OS error is the `source`.

use std::io;
use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = CgroupError> = std::result::Result<T, E>;

/// Why device access could not be granted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    /// A rule did not parse or cannot be expressed to the kernel.
    #[error(transparent)]
    Rule(#[from] devinject_device_rule::RuleError),

    /// The pid is not a process id.
    #[error("invalid container pid {pid}: must be positive")]
    InvalidPid {
        /// The pid given.
        pid: i32,
    },

    /// A file under the proc root could not be read.
    #[error("read {path}")]
    ReadProc {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A line of `/proc/<pid>/cgroup` or `/proc/self/mountinfo` did not parse.
    #[error("malformed line {line} of {path}: {text:?}")]
    MalformedProc {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },

    /// The container's cgroup is not visible through any mount of its hierarchy here.
    #[error(
        "container pid {pid}: {hierarchy} cgroup {cgroup} is not reachable through any mount \
         listed in {mountinfo} (cgroup namespace or mount namespace mismatch?)"
    )]
    Unreachable {
        /// The container process.
        pid: i32,
        /// `devices (cgroup v1)` or `cgroup v2`.
        hierarchy: &'static str,
        /// The cgroup path from `/proc/<pid>/cgroup`.
        cgroup: String,
        /// The mount table consulted.
        mountinfo: PathBuf,
    },

    /// Writing a rule to a v1 `devices.allow` failed.
    #[error("write device rule \"{rule}\" to {path}")]
    WriteDevicesAllow {
        /// The `devices.allow` file.
        path: PathBuf,
        /// The rule line.
        rule: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A cgroup v2 directory could not be opened.
    #[error("open cgroup directory {path}")]
    OpenCgroup {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `BPF_PROG_QUERY` failed.
    #[error("query device programs attached to {path} (BPF_PROG_QUERY)")]
    QueryPrograms {
        /// The cgroup directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `BPF_PROG_GET_FD_BY_ID` failed.
    #[error("open device program {id} (BPF_PROG_GET_FD_BY_ID)")]
    OpenProgram {
        /// The program id.
        id: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `BPF_OBJ_GET_INFO_BY_FD` failed.
    #[error("read information about device program {id} (BPF_OBJ_GET_INFO_BY_FD)")]
    ProgramInfo {
        /// The program id (0 when not yet known).
        id: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The kernel returned no instructions for a program.
    #[error(
        "device program {id} returned no instructions: the kernel withholds them when \
         net.core.bpf_jit_harden=2 blinds constants or when the caller lacks CAP_BPF or \
         CAP_SYS_ADMIN; set net.core.bpf_jit_harden to 0 or 1 (sysctl), or list the devices in \
         the container spec instead"
    )]
    HiddenInstructions {
        /// The program id.
        id: u32,
    },

    /// A program's instructions cannot be loaded again with a prefix.
    #[error("device program {id} cannot be extended: {reason}")]
    Unextendable {
        /// The program id.
        id: u32,
        /// What makes it impossible.
        reason: String,
    },

    /// Programs are attached but none of them could be opened.
    #[error(
        "none of the device programs attached to {path} can be opened (ids {ids:?}, permission \
         denied); the devices cannot be granted"
    )]
    NoReadableProgram {
        /// The cgroup directory.
        path: PathBuf,
        /// The program ids.
        ids: Vec<u32>,
    },

    /// `BPF_PROG_LOAD` failed.
    #[error(
        "load device program {name} ({insns} instructions) (BPF_PROG_LOAD); verifier log:\n{log}"
    )]
    LoadProgram {
        /// What was loaded, e.g. `extended copy of program 42`.
        name: String,
        /// Number of instructions.
        insns: usize,
        /// The verifier log (possibly shortened), or a note that none was produced.
        log: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Atomic replacement with `BPF_F_REPLACE` failed.
    #[error(
        "replace device program {old_id} with {new_id} on {path} \
         (BPF_PROG_ATTACH with BPF_F_REPLACE)"
    )]
    ReplaceProgram {
        /// The cgroup directory.
        path: PathBuf,
        /// The runtime's program.
        old_id: u32,
        /// The extended program.
        new_id: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `BPF_PROG_ATTACH` failed.
    #[error("attach device program {id} to {path} (BPF_PROG_ATTACH)")]
    AttachProgram {
        /// The cgroup directory.
        path: PathBuf,
        /// The program id.
        id: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// `BPF_PROG_DETACH` failed.
    #[error("detach device program {id} from {path} (BPF_PROG_DETACH)")]
    DetachProgram {
        /// The cgroup directory.
        path: PathBuf,
        /// The program id.
        id: u32,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
