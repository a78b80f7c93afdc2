//! Reading one profile file: through an fd that shows it is a regular file of bounded size
//! before a byte is read.
//!
//! # Why
//! Opened by path, a FIFO named `x.toml` in the profiles directory would block `cdi generate`, its
//! `--watch` refresher and every consumer of the directory in `open` for ever, and a device node
//! there would be opened (and read) by root. A profile may legitimately be a symlink an
//! administrator set (a ConfigMap's `..data` links, a profile kept elsewhere), so links are
//! followed; what they lead to is checked through the fd ([`devinject_hostfs::path_fd`]), and only a
//! regular file within [`MAX_PROFILE_BYTES`] is reopened and read. Anything else is [`ProfileFileError::NotAFile`], naming the path, what
//! it is and the fix, like any other bad profile.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use nix::sys::stat::SFlag;

use devinject_devices::{Profile, ProfileError};
use devinject_hostfs::path_fd::{Follow, PathFd, Reopen};

/// Why a profile file was not read; [`load`] turns it into a [`ProfileError`], whose words
/// these are.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum ProfileFileError {
    /// Opening, checking or reading it failed.
    #[error("cannot read profile {path}: {source}")]
    Read {
        /// The profile path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Something other than a regular file (after links).
    #[error("profile {path} is a {what}, not a regular file: devinject does not open it; remove it from the profiles directory or rename it so it does not end in .toml")]
    NotAFile {
        /// The profile path.
        path: PathBuf,
        /// What it is: "FIFO", "character device", ...
        what: &'static str,
    },
    /// Larger than [`MAX_PROFILE_BYTES`].
    #[error("profile {path} {}", too_large_problem(*size))]
    TooLarge {
        /// The profile path.
        path: PathBuf,
        size: u64,
    },
}

impl From<ProfileFileError> for ProfileError {
    fn from(e: ProfileFileError) -> Self {
        use ProfileFileError as F;
        match e {
            F::Read { path, source } => ProfileError::Read { path, source },
            F::NotAFile { path, what } => ProfileError::NotAFile { path, what },
            F::TooLarge { path, size } => ProfileError::Invalid {
                path,
                key: "(file)".into(),
                problem: too_large_problem(size),
            },
        }
    }
}

/// The largest profile read: real profiles are a few KiB.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// Reads, parses and validates a profile file. Links are followed; what they lead to must
/// be a regular file of bounded size, checked through the fd before it is read (the
/// module's [`read`]).
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    let text = read(path).map_err(ProfileError::from)?;
    let profile = Profile::parse(&text, path)?;
    if path.file_stem().and_then(|s| s.to_str()) != Some(profile.name.as_str()) {
        return Err(ProfileError::FileName {
            path: path.to_owned(),
            name: profile.name.to_string(),
        });
    }
    Ok(profile)
}

/// The text of the profile file at `path` (links followed), checked as the module says.
pub fn read(path: &Path) -> Result<String, ProfileFileError> {
    let err = |e: nix::errno::Errno| ProfileFileError::Read {
        path: path.to_owned(),
        source: std::io::Error::from(e),
    };
    let (file, size) = match open_if_regular(path).map_err(err)? {
        Ok(opened) => opened,
        Err(kind) => {
            return Err(ProfileFileError::NotAFile {
                path: path.to_owned(),
                what: devinject_hostfs::file_kind::name(kind),
            })
        }
    };
    if size > MAX_PROFILE_BYTES {
        return Err(too_large(path, size));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ProfileFileError::Read {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > MAX_PROFILE_BYTES {
        return Err(too_large(path, bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| ProfileFileError::Read {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

/// `path` (links followed) opened for reading, with its size, when it is a regular file; else
/// what it is: through [`devinject_hostfs::path_fd`], which opens nothing but a regular file. Profiles
/// are read so, and a driver's alias files ([`crate::alias`]).
pub(crate) fn open_if_regular(
    path: &Path,
) -> Result<Result<(File, u64), SFlag>, nix::errno::Errno> {
    let held = PathFd::at(None, path, Follow::Yes)?;
    if !held.is_regular() {
        return Ok(Err(devinject_hostfs::file_kind::of(held.stat())));
    }
    Ok(Ok((held.reopen(Reopen::Read)?, held.size())))
}

/// What is wrong with a profile file of `size` bytes, over [`MAX_PROFILE_BYTES`].
pub fn too_large_problem(size: u64) -> String {
    format!(
        "is {size} bytes, more than the {MAX_PROFILE_BYTES} a profile may have: \
         it is not a profile; move it out of the profiles directory"
    )
}

fn too_large(path: &Path, size: u64) -> ProfileFileError {
    ProfileFileError::TooLarge {
        path: path.to_owned(),
        size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_fifo_or_directory_is_refused_unopened_and_a_link_to_a_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.toml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let start = Instant::now();
        let err = read(&fifo).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        let msg = err.to_string();
        assert!(msg.contains("is a FIFO") && msg.contains("x.toml"), "{msg}");
        std::fs::create_dir(dir.path().join("d.toml")).unwrap();
        assert!(read(&dir.path().join("d.toml"))
            .unwrap_err()
            .to_string()
            .contains("is a directory"));
        std::fs::write(dir.path().join("real"), "name = \"x\"\n").unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("l.toml")).unwrap();
        assert_eq!(read(&dir.path().join("l.toml")).unwrap(), "name = \"x\"\n");
        std::os::unix::fs::symlink("x.toml", dir.path().join("lf.toml")).unwrap();
        assert!(read(&dir.path().join("lf.toml"))
            .unwrap_err()
            .to_string()
            .contains("is a FIFO"));
    }

    #[test]
    fn file_name_must_match() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.toml");
        std::fs::write(
            &path,
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\n",
        )
        .unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("demo.toml"), "{err}");
    }
}
