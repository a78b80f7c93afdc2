//! `devinject-hook finish`: the createRuntime hook the shim adds for what it keeps out of the spec.
//!
//! The shim already put nodes and cgroup rules into `config.json`; this mounts the files
//! read-only (through the same fd-based applier as the hook, so a hostile or raced rootfs cannot
//! redirect them), makes the soname links and refreshes the linker cache, from explicit arguments
//! (no profile lookup, no request parsing: the shim did that once).
//!
//! A CDI spec carries the same step, but the runtime itself mounts the spec's libraries: it names
//! them with `--mounted-library`, so the linker cache lists them (written by the hook, as for the
//! shim) without mounting them a second time.
//!
//! For the NRI plugin, whose adjustment cannot add a group to the process, it also gives the
//! nodes named by `--group-node` (which the runtime made from `linux.devices`) to the process's
//! group when the process lacks theirs ([`crate::inject::nodes::regroup`]).

use std::io::Read;
use std::path::PathBuf;

use devinject_devices::{ContainerEdits, HookAction, Mount, MountKind, Symlink};
use devinject_hostconfig::HostConfig;

use crate::error::HookError;
use crate::inject::ldcache::Ldconfig;
use crate::inject::{self, Target};
use crate::oci::{read_bounded, OciError, Spec, State, MAX_STATE_BYTES};

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
    /// Container paths of `linux.devices` nodes to give to the process's group if it lacks
    /// theirs.
    pub group_nodes: Vec<PathBuf>,
}

impl FinishArgs {
    /// Parses `--mount HOST CONTAINER`, `--library HOST CONTAINER` (a mount the linker cache
    /// must list), `--mounted-library HOST CONTAINER` (a library the runtime mounted, for the
    /// cache only), `--link PATH=TARGET`, `--ldcache-dir DIR` and `--group-node PATH`,
    /// repeatable.
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
                other => return Err(format!("unknown finish argument {other:?}")),
            }
        }
        Ok(out)
    }
}

/// Runs the finish step for the container described by the state on `stdin`.
pub fn finish(
    config: &HostConfig,
    args: &FinishArgs,
    stdin: impl Read,
) -> Result<inject::Report, HookError> {
    let bytes = read_bounded(stdin, MAX_STATE_BYTES, "OCI state on stdin")?;
    let state = State::parse(&bytes)?;
    if state.status != "creating" || state.pid <= 0 {
        return Err(HookError::Stage {
            status: state.status,
        });
    }
    let spec = Spec::load(&state.bundle)?;
    let paths = args
        .links
        .iter()
        .map(|l| ("finish --link", &l.link))
        .chain(
            args.mounts
                .iter()
                .chain(&args.mounted_libraries)
                .flat_map(|m| {
                    [
                        ("finish --mount", &m.host_path),
                        ("finish --mount", &m.container_path),
                    ]
                }),
        )
        .chain(args.group_nodes.iter().map(|p| ("finish --group-node", p)));
    for (what, p) in paths {
        if !p.is_absolute() {
            return Err(HookError::Input(OciError::Invalid {
                what: what.into(),
                problem: format!("{} is not absolute", p.display()),
            }));
        }
    }
    let mut edits = ContainerEdits {
        mounts: args.mounts.clone(),
        ..ContainerEdits::default()
    };
    if !args.links.is_empty() {
        edits
            .hooks
            .push(HookAction::CreateSymlinks(args.links.clone()));
    }
    if !args.ldcache_dirs.is_empty() {
        edits.hooks.push(HookAction::UpdateLdcache {
            dirs: args.ldcache_dirs.clone(),
        });
    }
    let regroup = args
        .group_nodes
        .iter()
        .map(|p| spec.device_node(p))
        .collect::<Result<Vec<_>, _>>()?;
    let target = Target {
        pid: state.pid,
        rootfs: spec.rootfs(&state.bundle)?,
        bind_nodes: true,
        readonly_rootfs: spec.root.as_ref().is_some_and(|r| r.readonly),
        user: spec.process.as_ref().map(|p| p.user.clone()),
        regroup,
        mounted_libraries: args.mounted_libraries.clone(),
    };
    inject::apply(
        &target,
        &edits,
        config.mount_api,
        &Ldconfig::from_config(config),
    )
    .map_err(|source| HookError::Inject {
        id: state.id,
        source,
    })
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
    }
}
