//! Putting one installer-owned file on the host, and taking it away again.
//!
//! [`put`] writes a file only when its bytes or mode differ (so a re-install changes nothing),
//! and the first time it replaces a file that was there before the installer, it saves that
//! file under `originals/` for [`take`] to put back.

use std::path::Path;

use devinject_hostfs::host_dir::Entry;

use crate::error::{InstallError, Result};
use crate::host::HostRoot;
use crate::journal::Tx;
use crate::record::{original_name, FileRole, InstalledFile, Record, RecordStore};

/// What [`put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// Already as wanted.
    Unchanged,
    Created,
    Replaced,
}

/// Reads host path `host` if something is there, with its mode: only a regular file with one
/// link; anything else at the name is refused unopened.
fn current(host_root: &HostRoot, host: &Path) -> Result<Option<(Vec<u8>, u32)>> {
    Ok(host_root
        .read(host)?
        .map(|(bytes, st)| (bytes, st.st_mode & 0o7777)))
}

/// Whether host path `host` holds `bytes` with `mode`.
pub fn is_current(host_root: &HostRoot, host: &Path, bytes: &[u8], mode: u32) -> Result<bool> {
    Ok(current(host_root, host)?.is_some_and(|(b, m)| b == bytes && m == mode))
}

/// Makes host path `host` hold `bytes` with `mode`, within step `tx`, recording it in `record`.
/// With `dry_run` nothing is written and the return value says what would happen.
#[allow(clippy::too_many_arguments)]
pub fn put(
    tx: Option<&mut Tx<'_>>,
    host_root: &HostRoot,
    store: &RecordStore,
    record: &mut Record,
    host: &Path,
    bytes: &[u8],
    mode: u32,
    role: FileRole,
) -> Result<Put> {
    let now = current(host_root, host)?;
    let outcome = match &now {
        Some((b, m)) if b == bytes && *m == mode => Put::Unchanged,
        Some(_) => Put::Replaced,
        None => Put::Created,
    };
    let Some(tx) = tx else {
        return Ok(outcome);
    };
    if record.file(host).is_none() {
        let (original, original_mode) = match &now {
            Some((b, m)) => {
                let name = original_name(host);
                tx.write(&store.original_path(&name), b, 0o600)?;
                (Some(name), Some(*m))
            }
            None => (None, None),
        };
        record.files.push(InstalledFile {
            path: host.to_path_buf(),
            role,
            original,
            original_mode,
        });
    }
    if outcome != Put::Unchanged {
        tx.write(host, bytes, mode)?;
    }
    Ok(outcome)
}

/// Removes the installed file `file` from the host within `tx`, putting back the original it
/// replaced, and drops it from `record`. Returns a line for the report, or `None` when there
/// was nothing to do.
pub fn take(
    tx: Option<&mut Tx<'_>>,
    host_root: &HostRoot,
    store: &RecordStore,
    record: &mut Record,
    file: &InstalledFile,
) -> Result<Option<String>> {
    let exists = !matches!(host_root.entry(&file.path)?, Entry::Missing);
    let line = match (&file.original, exists) {
        (Some(_), _) => Some(format!("restore {}", file.path.display())),
        (None, true) => Some(format!("remove {}", file.path.display())),
        (None, false) => None,
    };
    let Some(tx) = tx else {
        return Ok(line);
    };
    match &file.original {
        Some(name) => {
            let saved = store.original_path(name);
            let Some((bytes, _)) = host_root.read(&saved)? else {
                return Err(InstallError::State {
                    path: host_root.access(&saved),
                    message: format!("the saved original of {} is missing", file.path.display()),
                });
            };
            tx.write(&file.path, &bytes, file.original_mode.unwrap_or(0o644))?;
            tx.remove(&store.original_path(name))?;
        }
        None => tx.remove(&file.path)?,
    }
    record.files.retain(|f| f.path != file.path);
    Ok(line)
}
