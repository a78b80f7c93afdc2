//! The sockets of our profiles' earlier processes in the device-plugins directory, removed at
//! start. Serving, dialling and removing one socket is `devinject_kubelet::serve` and
//! `devinject_kubelet::socket`'s part; what is ours here is how our sockets are named.

use std::path::Path;

use devinject_kubelet::socket::remove_unserved;
use tracing::{debug, info};

/// Removes the sockets of `profile`'s earlier processes from the device-plugins directory `dir`:
/// a plugin killed (SIGKILL, OOM) cannot remove its own, and each one stays beside the kubelet's
/// until the kubelet restarts. Only sockets named as ours (`devinject-<profile>-<stamp>.sock`)
/// that refuse a connection (no process listens on them) are removed
/// ([`devinject_kubelet::socket::remove_unserved`]); a live one, another profile's or anything
/// that is not a socket is left. Returns how many were removed.
pub async fn remove_stale(dir: &Path, profile: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let prefix = format!("devinject-{profile}-");
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(stamp) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".sock"))
        else {
            continue;
        };
        if stamp.is_empty() || !stamp.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let path = entry.path();
        match remove_unserved(&path).await {
            Ok(true) => {
                info!(socket = %path.display(), "removed the socket of an earlier plugin process");
                removed += 1;
            }
            Ok(false) => {}
            Err(error) => debug!(%error, "cannot remove the socket of an earlier plugin process"),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_our_profiles_sockets_nobody_listens_on_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n);
        // A killed process's socket: bound, never unlinked, nobody listening.
        drop(std::os::unix::net::UnixListener::bind(path("devinject-demo-1.sock")).unwrap());
        let _live = std::os::unix::net::UnixListener::bind(path("devinject-demo-2.sock")).unwrap();
        drop(std::os::unix::net::UnixListener::bind(path("devinject-kvm-3.sock")).unwrap());
        drop(std::os::unix::net::UnixListener::bind(path("kubelet.sock")).unwrap());
        std::fs::write(path("devinject-demo-4.sock"), "").unwrap();
        assert_eq!(remove_stale(dir.path(), "demo").await, 1);
        for (name, there) in [
            ("devinject-demo-1.sock", false),
            ("devinject-demo-2.sock", true),
            ("devinject-kvm-3.sock", true),
            ("kubelet.sock", true),
            ("devinject-demo-4.sock", true),
        ] {
            assert_eq!(path(name).exists(), there, "{name}");
        }
    }
}
