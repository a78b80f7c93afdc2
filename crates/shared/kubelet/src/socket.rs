//! Binding a server's Unix socket in a directory the kubelet shares with other plugins
//! (`device-plugins/`, `plugins/`, `plugins_registry/`), under one rule for every server.
//!
//! The servers run as root. A socket left at the path by an earlier run is replaced; anything
//! else there (a symbolic link, a regular file, a directory, a FIFO) is refused and left alone:
//! following or deleting it would let whoever put it there make root remove a file or bind
//! somewhere else. The check is made with `lstat`, never following a link. A directory made for
//! the socket gets mode [`DIR_MODE`] (less the umask).
//!
//! [`remove_unserved`] removes a socket that no process listens on any more (its server was
//! killed and could not remove it), by the same care: a socket only, never followed, and only
//! the file that refused the connection.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;
use tracing::debug;

/// The mode of a socket directory [`bind`] creates.
pub const DIR_MODE: u32 = 0o750;

/// Why a socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The socket path has no parent directory (it is `/` or empty).
    #[error("socket path {path} has no parent directory; give an absolute path to a file")]
    NoParent {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket's directory could not be created.
    #[error("cannot create socket directory {dir}: {source}")]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// The socket path could not be inspected.
    #[error("cannot inspect socket path {path}: {source}")]
    Inspect {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// Something other than a socket is at the socket path.
    #[error(
        "{path} is a {kind}, not a socket: refusing to replace it; remove it yourself if it is \
         not needed, or configure another socket path"
    )]
    NotASocket {
        /// The socket path.
        path: PathBuf,
        /// What is there instead.
        kind: &'static str,
    },
    /// A stale socket could not be removed.
    #[error("cannot remove stale socket {path}: {source}")]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// Binding the socket failed.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
}

/// Prepares `path` (its parent directory made when missing, a stale socket removed, anything
/// else refused) and listens on it. Must be called within a tokio runtime.
pub fn bind(path: &Path) -> Result<UnixListener, BindError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && path.file_name().is_some() => dir,
        _ => {
            return Err(BindError::NoParent {
                path: path.to_owned(),
            })
        }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|source| BindError::CreateDir {
            dir: dir.to_owned(),
            source,
        })?;
    remove_stale(path)?;
    UnixListener::bind(path).map_err(|source| BindError::Bind {
        path: path.to_owned(),
        source,
    })
}

/// Removes a socket left at `path` by an earlier run; refuses anything else.
fn remove_stale(path: &Path) -> Result<(), BindError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(BindError::Inspect {
                path: path.to_owned(),
                source,
            })
        }
    };
    let file_type = meta.file_type();
    if !file_type.is_socket() {
        let kind = if file_type.is_symlink() {
            "symbolic link"
        } else if file_type.is_dir() {
            "directory"
        } else if file_type.is_file() {
            "regular file"
        } else {
            "special file"
        };
        return Err(BindError::NotASocket {
            path: path.to_owned(),
            kind,
        });
    }
    debug!(socket = %path.display(), "removing stale socket");
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        // Removed by someone else in between: the path is free, which is all we need.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(BindError::RemoveStale {
            path: path.to_owned(),
            source,
        }),
    }
}

/// How long [`remove_unserved`] waits for a connection before it takes the socket as served.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a socket nobody listens on could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// The socket path could not be inspected.
    #[error("cannot inspect socket path {path}: {source}")]
    Inspect {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
    /// The socket could not be removed.
    #[error("cannot remove unserved socket {path}: {source}")]
    Remove {
        /// The socket path.
        path: PathBuf,
        /// The system error.
        source: io::Error,
    },
}

/// Removes the socket at `path` if no process listens on it: a connection to it is refused.
/// Returns whether it was removed. A socket that accepts, or does not answer within
/// [`DIAL_TIMEOUT`], is served and kept; so is anything that is not a socket (a link is not
/// followed: what it points to is not ours to judge) and a socket that another file replaced
/// after the connection was refused.
pub async fn remove_unserved(path: &Path) -> Result<bool, RemoveError> {
    let identity = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => (meta.dev(), meta.ino()),
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(RemoveError::Inspect {
                path: path.to_owned(),
                source,
            })
        }
    };
    let dial = tokio::time::timeout(DIAL_TIMEOUT, tokio::net::UnixStream::connect(path)).await;
    let refused = matches!(&dial, Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused);
    if !refused {
        return Ok(false);
    }
    remove_if_same(path, identity)
}

/// A socket file's identity, its device and inode as `lstat` gives them: what a server or a
/// cleaner checks before it removes the file at a name that someone else may have taken since.
pub type Identity = (u64, u64);

/// Removes the socket at `path` if it is still the file `identity` names (the name not
/// followed): `Ok(true)` when removed, `Ok(false)` when it is gone or another file took the name.
pub fn remove_if_same(path: &Path, identity: Identity) -> Result<bool, RemoveError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() && (meta.dev(), meta.ino()) == identity => {}
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(RemoveError::Inspect {
                path: path.to_owned(),
                source,
            })
        }
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        // Removed by someone else in between.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(RemoveError::Remove {
            path: path.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_new_directory_made_0750() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("plugins");
        let path = dir.join("x.sock");
        drop(bind(&path).unwrap());
        // A socket nobody serves, as a killed server leaves it.
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket());
        let _again = bind(&path).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&dir).unwrap().permissions(),
        ) & 0o777;
        assert_eq!(mode & !DIR_MODE, 0, "mode {mode:o} grants more than 0750");
    }

    #[tokio::test]
    async fn anything_but_a_socket_at_the_path_is_refused_and_left_in_place() {
        let temp = tempfile::tempdir().unwrap();
        let target = temp.path().join("precious");
        std::fs::write(&target, "keep").unwrap();
        let link = temp.path().join("link.sock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let file = temp.path().join("file.sock");
        std::fs::write(&file, "data").unwrap();
        let dir = temp.path().join("dir.sock");
        std::fs::create_dir(&dir).unwrap();
        let fifo = temp.path().join("fifo.sock");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (path, kind) in [
            (&link, "symbolic link"),
            (&file, "regular file"),
            (&dir, "directory"),
            (&fifo, "special file"),
        ] {
            let err = bind(path).unwrap_err();
            assert!(
                matches!(&err, BindError::NotASocket { kind: k, .. } if *k == kind),
                "{err:?}"
            );
            assert!(err.to_string().contains("refusing to replace it"), "{err}");
            assert!(std::fs::symlink_metadata(path).is_ok(), "left in place");
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn a_path_without_a_parent_is_an_error() {
        let err = bind(Path::new("/")).unwrap_err();
        assert!(matches!(err, BindError::NoParent { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn only_a_socket_nobody_listens_on_is_removed() {
        let temp = tempfile::tempdir().unwrap();
        let path = |n: &str| temp.path().join(n);
        // A killed process's socket: bound, never unlinked, nobody listening.
        drop(std::os::unix::net::UnixListener::bind(path("dead.sock")).unwrap());
        let _live = std::os::unix::net::UnixListener::bind(path("live.sock")).unwrap();
        std::fs::write(path("file.sock"), "").unwrap();
        std::os::unix::fs::symlink(path("dead-target.sock"), path("link.sock")).unwrap();
        drop(std::os::unix::net::UnixListener::bind(path("dead-target.sock")).unwrap());
        for (name, removed) in [
            ("dead.sock", true),
            ("live.sock", false),
            ("file.sock", false),
            ("link.sock", false),
            ("missing.sock", false),
        ] {
            assert_eq!(
                remove_unserved(&path(name)).await.unwrap(),
                removed,
                "{name}"
            );
        }
        for (name, there) in [
            ("dead.sock", false),
            ("live.sock", true),
            ("file.sock", true),
            ("link.sock", true),
            ("dead-target.sock", true),
        ] {
            assert_eq!(
                std::fs::symlink_metadata(path(name)).is_ok(),
                there,
                "{name}"
            );
        }
    }
}
