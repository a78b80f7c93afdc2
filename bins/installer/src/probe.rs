//! The device plugin's liveness and readiness probe, for an image without a shell.
//!
//! The plugin serves each resource on its own socket in the kubelet's device-plugins directory
//! (`devinject-<profile>-<stamp>.sock`) and registers it with the kubelet. The probe passes when
//! at least one such socket accepts a connection, i.e. a plugin server is up where the kubelet
//! looks for it. When the kubelet restarts it deletes every socket there; the plugin binds fresh
//! ones and registers again, so a failing probe means the plugin did not recover.

use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Prefix of the plugin's socket names.
pub const SOCKET_PREFIX: &str = "devinject-";

/// The plugin sockets in `dir` that accept a connection, sorted.
pub fn live_sockets(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(SOCKET_PREFIX) || !name.ends_with(".sock") {
            continue;
        }
        if !entry.file_type().is_ok_and(|t| t.is_socket()) {
            continue;
        }
        if UnixStream::connect(entry.path()).is_ok() {
            live.push(entry.path());
        }
    }
    live.sort();
    Ok(live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn only_listening_plugin_sockets_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(live_sockets(dir.path()).expect("probe").is_empty());
        let _kubelet = UnixListener::bind(dir.path().join("kubelet.sock")).expect("bind");
        let stale = dir.path().join("devinject-demo-1.sock");
        drop(UnixListener::bind(&stale).expect("bind"));
        assert!(stale.exists());
        assert!(live_sockets(dir.path()).expect("probe").is_empty());
        let live = dir.path().join("devinject-demo-2.sock");
        let _l = UnixListener::bind(&live).expect("bind");
        assert_eq!(live_sockets(dir.path()).expect("probe"), vec![live]);
        assert!(live_sockets(&dir.path().join("missing")).is_err());
    }
}
