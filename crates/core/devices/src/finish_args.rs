//! The arguments of `devinject-hook finish`, the createRuntime step that the shim's spec, a CDI
//! spec and the NRI plugin's adjustment each carry: written by those three, read by the hook.
//! One type for both directions, so what a writer puts and what the hook reads cannot drift.

use std::path::PathBuf;

use crate::{ContainerEdits, DeviceNode, DeviceNumber, ForwardCompat, Mount, MountKind, Symlink};

/// What to finish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishArgs {
    /// Host files to mount read-only.
    pub mounts: Vec<Mount>,
    /// Libraries the runtime already mounted (a CDI spec's mounts): listed in the linker cache,
    /// not mounted.
    pub mounted_libraries: Vec<Mount>,
    /// Soname links to create.
    pub links: Vec<Symlink>,
    /// Directories for the linker cache.
    pub ldcache_dirs: Vec<PathBuf>,
    /// The image's newer driver libraries to prefer in the linker cache
    /// ([`crate::forward_compat`]).
    pub forward_compat: Option<ForwardCompat>,
    /// Container paths of `linux.devices` nodes to give to the process's group if it lacks
    /// theirs.
    pub group_nodes: Vec<PathBuf>,
    /// Device nodes the finish step gives the container as copies it owns: in a user namespace
    /// the runtime would bind the host node, which the namespace sees owned by nobody.
    pub nodes: Vec<DecidedNode>,
}

/// A node as the admission decided it: the host path it was found at and the device it was
/// then. The finish step makes a copy of that device, never of whatever the path leads to when
/// it runs: a stable link retargeted in between would otherwise hand the container another
/// device (devinject-discovery's `node::read_decided` refuses the mismatch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidedNode {
    /// The node on the host (a link to it, for a device's stable link).
    pub host_path: PathBuf,
    /// Its kind and numbers when decided.
    pub number: DeviceNumber,
}

impl DecidedNode {
    /// `node` as decided, found at `host_path` (the path the runtime's host sees it at).
    pub fn new(node: &DeviceNode, host_path: PathBuf) -> Self {
        Self {
            host_path,
            number: node.number(),
        }
    }
}

/// How a non-root process comes to use a granted node only its group may use
/// ([`DeviceNode::access_group`](crate::DeviceNode::access_group)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupAccess {
    /// The group is added to `process.user.additionalGids` (the shim edits the spec).
    ProcessGroups,
    /// The finish step gives the node the runtime made to the process's own group (NRI, whose
    /// adjustment cannot add a group to the process).
    NodeGroup,
    /// The container has a user namespace: the finish step makes every node, as a copy owned
    /// by the ids the namespace maps for its owner and the process's group.
    OwnedCopies,
}

impl FinishArgs {
    /// What is left to do after the runtime applied `edits` as the shim and NRI write them:
    /// mount the files read-only, make the soname links, refresh the linker cache and, with
    /// [`GroupAccess::NodeGroup`], give group-only nodes to the process's group, or with
    /// [`GroupAccess::OwnedCopies`], make every node as a copy the container owns.
    pub fn after_runtime(edits: &ContainerEdits, access: GroupAccess) -> Self {
        let granted = edits.device_nodes.iter();
        let (group_nodes, nodes) = match access {
            GroupAccess::ProcessGroups => (Vec::new(), Vec::new()),
            GroupAccess::NodeGroup => (
                granted
                    .filter(|n| n.access_group().is_some())
                    .map(|n| n.container_path.clone())
                    .collect(),
                Vec::new(),
            ),
            GroupAccess::OwnedCopies => (
                Vec::new(),
                granted
                    .map(|n| DecidedNode::new(n, n.host_path.clone()))
                    .collect(),
            ),
        };
        Self {
            mounts: edits.mounts.clone(),
            links: edits.symlinks.clone(),
            ldcache_dirs: edits.ldcache_dirs.clone(),
            forward_compat: edits.forward_compat.clone(),
            group_nodes,
            nodes,
            ..Self::default()
        }
    }

    /// Parses `--mount HOST CONTAINER`, `--library HOST CONTAINER` (a mount the linker cache
    /// must list), `--mounted-library HOST CONTAINER` (a library the runtime mounted, for the
    /// cache only), `--link PATH=TARGET`, `--ldcache-dir DIR`, `--group-node PATH` and
    /// `--node HOST NUMBER` (the decided device, `c 10:232`), repeatable, and
    /// `--forward-compat DIR LIBRARY HOST_MAJOR` once.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut out = Self::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                flag @ ("--mount" | "--library" | "--mounted-library") => {
                    let (Some(host), Some(container)) = (it.next(), it.next()) else {
                        return Err(format!("{flag} needs HOST CONTAINER"));
                    };
                    let (list, kind) = match flag {
                        "--mount" => (&mut out.mounts, MountKind::File),
                        "--library" => (&mut out.mounts, MountKind::Library),
                        _ => (&mut out.mounted_libraries, MountKind::Library),
                    };
                    list.push(Mount {
                        host_path: PathBuf::from(host),
                        container_path: PathBuf::from(container),
                        kind,
                    });
                }
                "--link" => {
                    let v = it.next().ok_or("--link needs PATH=TARGET")?;
                    let (link, target) = v.split_once('=').ok_or("--link needs PATH=TARGET")?;
                    out.links.push(Symlink {
                        link: PathBuf::from(link),
                        target: target.to_owned(),
                    });
                }
                "--ldcache-dir" => {
                    out.ldcache_dirs.push(PathBuf::from(
                        it.next().ok_or("--ldcache-dir needs a directory")?,
                    ));
                }
                "--group-node" => {
                    out.group_nodes.push(PathBuf::from(
                        it.next().ok_or("--group-node needs a container path")?,
                    ));
                }
                "--node" => {
                    const USAGE: &str = "--node needs HOST NUMBER (the device decided, e.g. \"c 10:232\"); a spec written by an older devinject names none: write it again (devinject-ctl cdi generate, or delete the pod so that its claim is prepared again)";
                    let (Some(host), Some(number)) = (it.next(), it.next()) else {
                        return Err(USAGE.into());
                    };
                    let number = number
                        .parse()
                        .map_err(|e| format!("--node {host}: {e}: {USAGE}"))?;
                    out.nodes.push(DecidedNode {
                        host_path: PathBuf::from(host),
                        number,
                    });
                }
                "--forward-compat" => {
                    const USAGE: &str = "--forward-compat needs DIR LIBRARY HOST_MAJOR";
                    let (Some(dir), Some(library), Some(major)) = (it.next(), it.next(), it.next())
                    else {
                        return Err(USAGE.into());
                    };
                    if out.forward_compat.is_some() {
                        return Err("--forward-compat given twice".into());
                    }
                    out.forward_compat = Some(ForwardCompat {
                        dir: PathBuf::from(dir),
                        library: library.clone(),
                        host_major: major
                            .parse()
                            .map_err(|_| format!("{USAGE}: {major:?} is not a major version"))?,
                    });
                }
                other => return Err(format!("unknown finish argument {other:?}")),
            }
        }
        Ok(out)
    }

    /// The arguments that [`FinishArgs::parse`] reads back into `self`: `--mount` or
    /// `--library` per mount (by its kind), `--mounted-library`, `--link`, `--ldcache-dir`,
    /// `--group-node`, `--node`, `--forward-compat`, in that order. A path that is not UTF-8 is written lossily (an OCI hook's
    /// arguments are JSON strings); the hook then reports the file it cannot find.
    pub fn to_args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        let mut out = Vec::new();
        for m in &self.mounts {
            out.push(
                if m.kind == MountKind::Library {
                    "--library"
                } else {
                    "--mount"
                }
                .to_owned(),
            );
            out.extend([path(&m.host_path), path(&m.container_path)]);
        }
        for m in &self.mounted_libraries {
            out.push("--mounted-library".to_owned());
            out.extend([path(&m.host_path), path(&m.container_path)]);
        }
        for l in &self.links {
            out.push("--link".to_owned());
            out.push(format!("{}={}", l.link.to_string_lossy(), l.target));
        }
        for d in &self.ldcache_dirs {
            out.extend(["--ldcache-dir".to_owned(), path(d)]);
        }
        for g in &self.group_nodes {
            out.extend(["--group-node".to_owned(), path(g)]);
        }
        for n in &self.nodes {
            out.extend([
                "--node".to_owned(),
                path(&n.host_path),
                n.number.to_string(),
            ]);
        }
        if let Some(fc) = &self.forward_compat {
            out.extend([
                "--forward-compat".to_owned(),
                path(&fc.dir),
                fc.library.clone(),
                fc.host_major.to_string(),
            ]);
        }
        out
    }

    /// True when there is nothing to finish.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_links_and_dirs() {
        let a = FinishArgs::parse(&[
            "--mount".into(),
            "/h/libx.so.1.2".into(),
            "/usr/lib/libx.so.1.2".into(),
            "--link".into(),
            "/usr/lib/libx.so.1=libx.so.1.2".into(),
            "--ldcache-dir".into(),
            "/usr/lib".into(),
        ])
        .unwrap();
        assert_eq!(a.mounts[0].host_path, PathBuf::from("/h/libx.so.1.2"));
        assert_eq!(
            a.mounts[0].container_path,
            PathBuf::from("/usr/lib/libx.so.1.2")
        );
        assert_eq!(a.links[0].target, "libx.so.1.2");
        assert_eq!(a.mounts[0].kind, MountKind::File);
        assert!(FinishArgs::parse(&["--mount".into(), "/only-one".into()]).is_err());
        let l = FinishArgs::parse(&["--library".into(), "/h/a.so".into(), "/usr/lib/a.so".into()])
            .unwrap();
        assert_eq!(l.mounts[0].kind, MountKind::Library);
        assert!(FinishArgs::parse(&["--library".into(), "/only-one".into()]).is_err());
        let m = FinishArgs::parse(&[
            "--mounted-library".into(),
            "/h/a.so".into(),
            "/usr/lib/a.so".into(),
        ])
        .unwrap();
        assert!(
            m.mounts.is_empty(),
            "a mounted library is not mounted again"
        );
        assert_eq!(m.mounted_libraries[0].kind, MountKind::Library);
        assert_eq!(
            m.mounted_libraries[0].container_path,
            PathBuf::from("/usr/lib/a.so")
        );
        assert!(FinishArgs::parse(&["--mounted-library".into(), "/only-one".into()]).is_err());
        assert_eq!(a.ldcache_dirs, [PathBuf::from("/usr/lib")]);
        assert!(FinishArgs::parse(&["--link".into(), "nolink".into()]).is_err());
        assert!(FinishArgs::parse(&["--bogus".into()]).is_err());
        let g = FinishArgs::parse(&["--group-node".into(), "/dev/dri/renderD128".into()]).unwrap();
        assert_eq!(g.group_nodes, [PathBuf::from("/dev/dri/renderD128")]);
        assert!(FinishArgs::parse(&["--group-node".into()]).is_err());
        assert!(FinishArgs::parse(&["--node".into()]).is_err());
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        let lib = |h: &str, c: &str, kind| Mount {
            host_path: PathBuf::from(h),
            container_path: PathBuf::from(c),
            kind,
        };
        let args = FinishArgs {
            mounts: vec![
                lib("/h/libx.so.1.2", "/usr/lib/libx.so.1.2", MountKind::Library),
                lib("/h/tool", "/usr/bin/tool", MountKind::File),
            ],
            mounted_libraries: vec![lib(
                "/h/liby.so.3",
                "/usr/lib/liby.so.3",
                MountKind::Library,
            )],
            links: vec![Symlink {
                link: PathBuf::from("/usr/lib/libx.so.1"),
                target: "libx.so.1.2".into(),
            }],
            ldcache_dirs: vec![PathBuf::from("/usr/lib")],
            group_nodes: vec![PathBuf::from("/dev/dri/renderD128")],
            nodes: vec![DecidedNode {
                host_path: PathBuf::from("/host/dev/kvm"),
                number: DeviceNumber::new(crate::DeviceKind::Char, 10, 232),
            }],
            forward_compat: Some(ForwardCompat {
                dir: PathBuf::from("/usr/local/cuda/compat"),
                library: "libcuda.so".into(),
                host_major: 535,
            }),
        };
        let written = args.to_args();
        assert_eq!(FinishArgs::parse(&written), Ok(args));
        assert_eq!(
            &written[..3],
            ["--library", "/h/libx.so.1.2", "/usr/lib/libx.so.1.2"]
        );
        assert!(FinishArgs::default().to_args().is_empty());
        assert!(FinishArgs::default().is_empty());
    }

    /// A node copy names the device decided for it; a path alone (a spec an older devinject
    /// wrote) is refused with what to do, never read for whatever device it leads to now.
    #[test]
    fn a_node_is_given_with_its_decided_number_or_refused() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let one = FinishArgs::parse(&args(&["--node", "/dev/kvm", "c 10:232"])).unwrap();
        assert_eq!(
            one.nodes,
            [DecidedNode {
                host_path: PathBuf::from("/dev/kvm"),
                number: DeviceNumber::new(crate::DeviceKind::Char, 10, 232),
            }]
        );
        for bare in [
            &["--node", "/dev/kvm"][..],
            &["--node", "/dev/kvm", "--node", "/dev/net/tun"],
            &["--node", "/dev/kvm", "x 10:232"],
            &["--node", "/dev/kvm", "c 10"],
        ] {
            let err = FinishArgs::parse(&args(bare)).unwrap_err();
            assert!(
                err.contains("--node needs HOST NUMBER") && err.contains("write it again"),
                "{bare:?}: {err}"
            );
        }
    }

    #[test]
    fn forward_compat_is_given_once_with_a_numeric_major() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let once = ["--forward-compat", "/c", "libcuda.so", "535"];
        assert_eq!(
            FinishArgs::parse(&args(&once)).unwrap().forward_compat,
            Some(ForwardCompat {
                dir: PathBuf::from("/c"),
                library: "libcuda.so".into(),
                host_major: 535
            })
        );
        let twice = [once, once].concat();
        assert!(FinishArgs::parse(&args(&twice))
            .unwrap_err()
            .contains("twice"));
        let short = &once[..3];
        assert!(FinishArgs::parse(&args(short)).is_err());
        let word = ["--forward-compat", "/c", "libcuda.so", "new"];
        assert!(FinishArgs::parse(&args(&word))
            .unwrap_err()
            .contains("\"new\" is not a major version"));
    }
}
