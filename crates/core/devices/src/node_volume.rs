//! Where the runtime will make a device node, read from the spec's mounts: a node must land on
//! the runtime's own `/dev` tmpfs (or the image's filesystem), never in a volume.
//!
//! # Why
//! On the spec path (the runtime shim writes `linux.devices`, NRI adjusts them) the runtime
//! itself makes the nodes, after the spec's mounts, by path. A volume the pod mounts over `/dev`
//! or `/dev/<dir>` (a host directory, an `emptyDir`) would then get a `0666` node of ours in a
//! host directory, where it outlives the container. The namespace applier checks the same through
//! its fds (`Rootfs::node_dir` in the hook); here the spec is all there is, and it says what the
//! runtime will mount.

use std::path::{Component, Path, PathBuf};

use crate::Excerpt;

/// One entry of the spec's `mounts`, as far as this rule reads it.
#[derive(Debug, Clone, Copy)]
pub struct SpecMount<'a> {
    /// The container path it is mounted at.
    pub destination: &'a str,
    /// `type` (empty when absent).
    pub kind: &'a str,
    /// Whether `options` holds `bind` or `rbind`.
    pub bind: bool,
}

impl<'a> SpecMount<'a> {
    /// The mount at `destination` of type `kind` (empty when absent) with `options`.
    pub fn new(
        destination: &'a str,
        kind: &'a str,
        options: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        Self {
            destination,
            kind,
            bind: options.into_iter().any(|o| o == "bind" || o == "rbind"),
        }
    }
}

/// A device node that a spec mount other than a fresh tmpfs would hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the spec mounts {what} at {mount}, where device node {node} would be made: devinject makes no device node in a volume (it would land in the volume's host directory); mount the volume elsewhere than /dev")]
pub struct NodeInVolume {
    /// The node's container path.
    pub node: PathBuf,
    /// The covering mount's destination.
    pub mount: String,
    /// What that mount is, in words.
    pub what: String,
}

/// Checks that no node of `nodes` (container paths) would be made in a volume: the last spec
/// mount (in order: a later one covers an earlier one) whose destination is the node's directory
/// or one of its ancestors must be a tmpfs that is not a bind; no such mount means the image's
/// own filesystem.
pub fn check<'a>(
    nodes: impl IntoIterator<Item = &'a Path>,
    mounts: &[SpecMount<'_>],
) -> Result<(), NodeInVolume> {
    for node in nodes {
        let Some(dir) = node.parent() else { continue };
        let dir = normal(dir);
        let covering = mounts
            .iter()
            .rev()
            .find(|m| dir.starts_with(normal(Path::new(m.destination))));
        let Some(m) = covering else { continue };
        if m.kind == "tmpfs" && !m.bind {
            continue;
        }
        let what = if m.bind || m.kind == "bind" {
            "a bind mount (a volume)".to_owned()
        } else if m.kind.is_empty() {
            "a mount of no type".to_owned()
        } else {
            format!("a {} mount", Excerpt(m.kind))
        };
        return Err(NodeInVolume {
            node: node.to_owned(),
            mount: Excerpt(m.destination).to_string(),
            what,
        });
    }
    Ok(())
}

/// [`check`] for the device nodes of `edits`, the ones the runtime makes.
pub fn check_edits(
    edits: &crate::ContainerEdits,
    mounts: &[SpecMount<'_>],
) -> Result<(), NodeInVolume> {
    check(
        edits
            .device_nodes
            .iter()
            .map(|n| n.container_path.as_path()),
        mounts,
    )
}

/// `path` as runc cleans a destination: absolute, without `.` and empty components; `..` kept
/// (it cannot climb above `/` and no spec of an engine has one).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV_TMPFS: SpecMount<'static> = SpecMount {
        destination: "/dev",
        kind: "tmpfs",
        bind: false,
    };

    fn bind(at: &'static str) -> SpecMount<'static> {
        SpecMount {
            destination: at,
            kind: "bind",
            bind: true,
        }
    }

    fn nodes() -> Vec<&'static Path> {
        vec![Path::new("/dev/demo/accel0"), Path::new("/dev/kvm")]
    }

    #[test]
    fn nodes_on_the_runtime_dev_tmpfs_or_the_image_are_fine() {
        check(nodes(), &[DEV_TMPFS]).unwrap();
        check(nodes(), &[]).unwrap();
        // A volume elsewhere, or one the /dev tmpfs mounted later covers, changes nothing.
        check(nodes(), &[bind("/data"), bind("/dev/demo"), DEV_TMPFS]).unwrap();
        check(nodes(), &[DEV_TMPFS, bind("/dev/shm"), bind("/dev/demox")]).unwrap();
    }

    #[test]
    fn a_volume_over_a_node_directory_is_refused_naming_both() {
        for (mounts, node, at) in [
            (
                vec![DEV_TMPFS, bind("/dev/demo")],
                "/dev/demo/accel0",
                "/dev/demo",
            ),
            (
                vec![DEV_TMPFS, bind("/dev/demo/")],
                "/dev/demo/accel0",
                "/dev/demo/",
            ),
            (vec![DEV_TMPFS, bind("/dev")], "/dev/demo/accel0", "/dev"),
            (
                vec![DEV_TMPFS, bind("//dev/./demo")],
                "/dev/demo/accel0",
                "//dev/./demo",
            ),
        ] {
            let err = check(nodes(), &mounts).unwrap_err();
            assert_eq!(err.node, Path::new(node));
            assert_eq!(err.mount, at);
            let text = err.to_string();
            assert!(text.contains("a bind mount (a volume)"), "{text}");
            assert!(text.contains("mount the volume elsewhere"), "{text}");
        }
    }

    #[test]
    fn a_tmpfs_that_is_a_bind_or_another_filesystem_is_refused() {
        let host_tmpfs = SpecMount {
            destination: "/dev",
            kind: "tmpfs",
            bind: true,
        };
        assert!(check(nodes(), &[host_tmpfs]).is_err());
        let devtmpfs = SpecMount {
            destination: "/dev",
            kind: "devtmpfs",
            bind: false,
        };
        let err = check(nodes(), &[devtmpfs]).unwrap_err();
        assert!(err.to_string().contains("a devtmpfs mount"), "{err}");
    }

    #[test]
    fn what_the_message_quotes_of_the_spec_is_bounded() {
        let kind = "y".repeat(100_000);
        let m = SpecMount {
            destination: "/dev",
            kind: &kind,
            bind: false,
        };
        let err = check([Path::new("/dev/kvm")], &[m]).unwrap_err();
        let text = err.to_string();
        assert!(text.len() < 1024, "{}", text.len());
        assert!(text.contains("(100000 bytes in all)"), "{text}");
    }
}
