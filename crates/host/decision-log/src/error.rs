//! Why the decision log could not be written or read.

use std::path::PathBuf;

/// An error of the decision log; every one names the path.
#[derive(Debug, thiserror::Error)]
pub enum DecisionLogError {
    /// A system call on the directory or a file failed.
    #[error("decision log: cannot {op} {path}: {source}")]
    Io {
        /// What was being done: "open", "create", "read", "append to", "rotate" ...
        op: &'static str,
        /// The directory or file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The directory is a symbolic link, or not a directory.
    #[error("decision log: {path} is a {what}, not a directory: devinject does not follow it; make it a directory or set decision_log_dir elsewhere")]
    NotADirectory {
        /// The directory.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// Another user than root (or this process's owner), or every user, may write in the
    /// directory, so it could plant entries or objects there.
    #[error("decision log: {path} (mode {mode:o}, owner {uid}) may be written by others: make it owned by root and not group- or world-writable")]
    DirectoryNotPrivate {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its owner.
        uid: u32,
    },
    /// A log file's name holds something other than a regular file.
    #[error("decision log: {path} is a {what}, not a regular file: devinject does not open it; remove it")]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What it is: "symbolic link", "FIFO", ...
        what: &'static str,
    },
    /// A log file has more than one name: a hard link to another file.
    #[error("decision log: {path} has {links} links: it is a hard link to another file, which devinject does not write or read; remove it")]
    HardLinked {
        /// The file.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
}

/// The decision log's result.
pub type Result<T, E = DecisionLogError> = std::result::Result<T, E>;
