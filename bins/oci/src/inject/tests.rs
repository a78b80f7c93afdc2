//! The applier's decisions, on a recording host: which sources are detached trees or paths,
//! which nodes are bound or made and with which group, who writes the linker cache, and what a
//! read-only rootfs forgives. No root, no namespace, no mount.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use devinject_devices::{
    ContainerEdits, DeviceKind, DeviceNode, DeviceNumber, Mount, MountKind, Symlink,
};
use devinject_hostconfig::{CacheWriter, MountApi};

use super::*;

/// How a source was handed to the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Src {
    Tree,
    Path,
}

fn src(s: &Source) -> Src {
    match s {
        Source::Tree(_) => Src::Tree,
        Source::Path(..) => Src::Path,
    }
}

/// What the child was given, in a comparable form.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    /// Container path, how the node is bound (`None`: mknod) and its group.
    nodes: Vec<(PathBuf, Option<Src>, u32)>,
    regroup: Vec<(PathBuf, u32)>,
    host_devs: Vec<(u32, u32)>,
    files: Vec<(PathBuf, Src)>,
    links: usize,
    writable_etc: bool,
    /// Sonames the hook writes into the cache itself.
    cache: Option<Vec<String>>,
    userns_owner: Option<(u32, u32)>,
    shared_read_only: bool,
}

/// A host that records what it is asked and answers as told.
#[derive(Default)]
struct Recorder {
    /// Whether the kernel has the new mount API.
    no_new_api: bool,
    /// Whether the container has a user namespace of its own (`0 100000 65536`); otherwise a
    /// target that binds nodes is a rootless one.
    userns: bool,
    /// Whether a file (not a node) cannot be detached.
    file_not_detached: bool,
    /// What the child reports.
    outcome: RefCell<Option<ChildOutcome>>,
    /// Whether the child found the image's forward-compatibility libraries newer.
    compat_preferred: bool,
    /// Whether ldconfig fails.
    ldconfig_fails: bool,
    /// Whether the rootfs is a plain directory rather than a mount of its own.
    plain_rootfs: bool,
    /// Every call, by name.
    calls: RefCell<Vec<String>>,
    /// What each child was given.
    seen: RefCell<VecDeque<Seen>>,
    /// The paths asked for as trees, with the device each must be when one was decided.
    trees: RefCell<Vec<(PathBuf, MountAttrs, Option<DeviceNumber>)>>,
    /// The directories ldconfig was run over.
    ldconfig_dirs: RefCell<Vec<PathBuf>>,
    /// The owned copies of nodes made: container path, host uid and gid.
    owned: RefCell<Vec<(PathBuf, u32, u32)>>,
}

impl Recorder {
    fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }

    fn seen(&self) -> Seen {
        self.seen.borrow_mut().pop_front().expect("the child ran")
    }

    fn call(&self, name: &str) {
        self.calls.borrow_mut().push(name.to_owned());
    }
}

impl Privileged for Recorder {
    type Namespace = i32;

    fn mount_namespace(&self, pid: i32) -> Result<i32, InjectError> {
        self.call("mount_namespace");
        Ok(pid)
    }

    fn host_filesystems(&self) -> Result<Vec<(u32, u32)>, InjectError> {
        self.call("host_filesystems");
        Ok(vec![(0, 21), (8, 1)])
    }

    fn detach_tree(
        &self,
        host_path: &Path,
        attrs: MountAttrs,
        device: Option<DeviceNumber>,
    ) -> Result<Option<Source>, InjectError> {
        self.call("detach_tree");
        if self.no_new_api || (self.file_not_detached && attrs == MountAttrs::File) {
            return Ok(None);
        }
        self.trees
            .borrow_mut()
            .push((host_path.to_owned(), attrs, device));
        let fd = std::fs::File::open("/").expect("open /");
        Ok(Some(Source::Tree(fd.into())))
    }

    fn id_maps(&self, target: &Target) -> Option<IdMaps> {
        let map = IdMap::parse("0 100000 65536\n");
        (self.userns && target.bind_nodes).then(|| IdMaps {
            uid: map.clone(),
            gid: map,
        })
    }

    fn owned_node(
        &self,
        node: &DeviceNode,
        uid: u32,
        gid: u32,
    ) -> Result<Option<Source>, InjectError> {
        self.call("owned_node");
        if self.no_new_api {
            return Ok(None);
        }
        self.owned
            .borrow_mut()
            .push((node.container_path.clone(), uid, gid));
        let fd = std::fs::File::open("/").expect("open /");
        Ok(Some(Source::Tree(fd.into())))
    }

    fn rootfs_is_own_mount(&self, _rootfs: &Path) -> Result<bool, InjectError> {
        Ok(!self.plain_rootfs)
    }

    fn in_container(&self, ns: &i32, work: Work<'_>) -> Result<ChildReport, InjectError> {
        self.call("in_container");
        assert_eq!(*ns, 4242, "the child joins the target's namespace");
        self.seen.borrow_mut().push_back(Seen {
            nodes: work
                .nodes
                .iter()
                .map(|(n, s, gid)| (n.container_path.clone(), s.as_ref().map(src), *gid))
                .collect(),
            regroup: work
                .regroup
                .iter()
                .map(|(n, gid)| (n.container_path.clone(), *gid))
                .collect(),
            host_devs: work.host_devs.clone(),
            files: work
                .files
                .iter()
                .map(|(p, s)| (p.to_path_buf(), src(s)))
                .collect(),
            links: work.links.len(),
            writable_etc: work.writable_etc,
            cache: work
                .cache
                .map(|libs| libs.iter().map(|l| l.soname.clone()).collect()),
            userns_owner: work.userns_owner,
            shared_read_only: work.shared_read_only,
        });
        Ok(self
            .outcome
            .borrow_mut()
            .take()
            .map_or(ChildOutcome::Done.into(), |outcome| ChildReport {
                outcome,
                compat_preferred: self.compat_preferred,
            }))
    }

    fn run_ldconfig(
        &self,
        ns: &i32,
        _rootfs: &Path,
        _ldconfig: &ldconfig::Ldconfig,
        dirs: &[PathBuf],
        compat: Option<&devinject_devices::ForwardCompat>,
    ) -> Result<(), InjectError> {
        self.call("run_ldconfig");
        assert_eq!(*ns, 4242);
        // The compat directory first, as ldconfig is given it.
        self.ldconfig_dirs
            .borrow_mut()
            .extend(compat.map(|fc| fc.dir.clone()));
        self.ldconfig_dirs.borrow_mut().extend_from_slice(dirs);
        if self.ldconfig_fails {
            return Err(InjectError::Ldconfig {
                output: "exit status 1".into(),
            });
        }
        Ok(())
    }
}

/// uid and gid 1000, no supplementary group.
fn user_1000() -> crate::oci::User {
    crate::oci::User {
        uid: 1000,
        gid: 1000,
        additional_gids: vec![],
    }
}

fn target() -> Target {
    Target {
        pid: 4242,
        rootfs: "/run/bundle/rootfs".into(),
        bind_nodes: false,
        readonly_rootfs: false,
        user: None,
        regroup: Vec::new(),
        mounted_libraries: Vec::new(),
    }
}

/// A char node `/dev/<name>`, mode 0660, group `gid`.
fn node(name: &str, gid: u32) -> DeviceNode {
    DeviceNode {
        host_path: PathBuf::from("/host/dev").join(name),
        container_path: PathBuf::from("/dev").join(name),
        kind: DeviceKind::Char,
        major: 240,
        minor: 0,
        mode: 0o660,
        uid: 0,
        gid,
    }
}

/// Edits with `nodes` and, when `library` is given, that host file mounted as
/// `/usr/lib/libdemo.so.1.2` with its soname link and the linker cache refreshed.
fn edits(nodes: Vec<DeviceNode>, library: Option<&Path>) -> ContainerEdits {
    let mut e = ContainerEdits {
        device_nodes: nodes,
        ..ContainerEdits::default()
    };
    if let Some(host) = library {
        e.mounts.push(Mount {
            host_path: host.to_owned(),
            container_path: "/usr/lib/libdemo.so.1.2".into(),
            kind: MountKind::Library,
        });
        e.symlinks.push(Symlink {
            link: "/usr/lib/libdemo.so.1".into(),
            target: "libdemo.so.1.2".into(),
        });
        e.ldcache_dirs.push("/usr/lib".into());
    }
    e
}

/// An ELF file of this host (the test binary), whose header the cache flags are read from.
fn elf() -> PathBuf {
    std::env::current_exe().expect("the test binary")
}

fn ldconfig(writer: CacheWriter) -> ldconfig::Ldconfig {
    ldconfig::Ldconfig {
        writer,
        path: "/sbin/ldconfig".into(),
        timeout_secs: 5,
    }
}

fn builtin() -> ldconfig::Ldconfig {
    ldconfig(CacheWriter::Builtin)
}

#[test]
fn nothing_to_do_touches_nothing() {
    let host = Recorder::default();
    let report = apply_on(
        &host,
        &target(),
        &ContainerEdits::default(),
        MountApi::Auto,
        &builtin(),
    )
    .unwrap();
    assert_eq!(report, Report::default());
    assert!(host.calls().is_empty(), "{:?}", host.calls());
}

#[test]
fn made_nodes_need_no_source_and_keep_their_group() {
    let host = Recorder::default();
    let e = edits(vec![node("demo0", 44)], None);
    let report = apply_on(&host, &target(), &e, MountApi::Auto, &builtin()).unwrap();
    // The host's filesystems go with the nodes: a node's directory off the rootfs's own mount
    // must be on none of them.
    assert_eq!(
        host.calls(),
        ["host_filesystems", "mount_namespace", "in_container"]
    );
    let seen = host.seen();
    assert_eq!(seen.nodes, [("/dev/demo0".into(), None, 44)]);
    assert_eq!(seen.host_devs, [(0, 21), (8, 1)]);
    assert_eq!(seen.userns_owner, None);
    assert!(!seen.writable_etc);
    assert_eq!(seen.cache, None);
    assert_eq!(report.nodes, 1);
    assert!(report.new_mount_api);
    assert!(!report.ldcache);
}

#[test]
fn bound_nodes_and_files_are_detached_trees_with_their_attributes() {
    let host = Recorder::default();
    let t = Target {
        bind_nodes: true,
        ..target()
    };
    let lib = elf();
    let e = edits(vec![node("demo0", 0)], Some(&lib));
    let report = apply_on(&host, &t, &e, MountApi::Auto, &builtin()).unwrap();
    let seen = host.seen();
    assert_eq!(seen.nodes, [("/dev/demo0".into(), Some(Src::Tree), 0)]);
    assert_eq!(seen.files, [("/usr/lib/libdemo.so.1.2".into(), Src::Tree)]);
    assert_eq!(
        seen.userns_owner, None,
        "rootless, no user namespace of its own"
    );
    assert_eq!(
        *host.trees.borrow(),
        [
            (
                "/host/dev/demo0".into(),
                MountAttrs::Device,
                Some(DeviceNumber::new(DeviceKind::Char, 240, 0))
            ),
            (lib, MountAttrs::File, None)
        ],
        "a bound node is checked against the device decided for it"
    );
    assert!(report.new_mount_api);
    assert_eq!((report.nodes, report.mounts, report.links), (1, 1, 1));
}

#[test]
fn in_a_user_namespace_each_node_is_a_copy_owned_by_the_ids_the_container_maps() {
    let host = Recorder {
        userns: true,
        ..Recorder::default()
    };
    let t = Target {
        bind_nodes: true,
        user: Some(user_1000()),
        ..target()
    };
    // demo0 is for group 44 only, which the process lacks: its copy gets the process's group.
    // demo1 (0666) keeps group 44. Container ids map to 100000 + id.
    let open = DeviceNode {
        mode: 0o666,
        ..node("demo1", 44)
    };
    let lib = elf();
    let e = edits(vec![node("demo0", 44), open], Some(&lib));
    apply_on(&host, &t, &e, MountApi::Auto, &builtin()).unwrap();
    assert_eq!(
        *host.owned.borrow(),
        [
            ("/dev/demo0".into(), 100_000, 101_000),
            ("/dev/demo1".into(), 100_000, 100_044)
        ]
    );
    let seen = host.seen();
    let sources: Vec<_> = seen.nodes.iter().map(|(_, s, _)| *s).collect();
    assert_eq!(sources, [Some(Src::Tree), Some(Src::Tree)]);
    assert_eq!(
        *host.trees.borrow(),
        [(lib, MountAttrs::File, None)],
        "no host node bound"
    );
    assert_eq!(seen.userns_owner, Some((100_000, 100_000)));
}

#[test]
fn a_node_whose_owner_the_namespace_cannot_map_is_refused_unless_anyone_may_use_it() {
    let host = Recorder {
        userns: true,
        ..Recorder::default()
    };
    // The process's group, 70000, is beyond the 65536 ids the namespace maps.
    let t = Target {
        bind_nodes: true,
        user: Some(crate::oci::User {
            gid: 70_000,
            ..user_1000()
        }),
        ..target()
    };
    let err = apply_on(
        &host,
        &t,
        &edits(vec![node("demo0", 44)], None),
        MountApi::Auto,
        &builtin(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            InjectError::UnusableInUserNamespace {
                gid: 70_000,
                mode: 0o660,
                ..
            }
        ) && msg.contains("/host/dev/demo0")
            && msg.contains("not mapped")
            && msg.contains("gidMappings"),
        "{msg}"
    );
    assert!(!host.calls().contains(&"in_container".to_owned()));
    // A node anyone may use works bound as it is.
    let open = DeviceNode {
        mode: 0o666,
        uid: 70_000,
        ..node("demo1", 44)
    };
    apply_on(
        &host,
        &t,
        &edits(vec![open], None),
        MountApi::Auto,
        &builtin(),
    )
    .unwrap();
    assert_eq!(host.seen().nodes[0].1, Some(Src::Tree));
    assert_eq!(host.trees.borrow()[0].0, PathBuf::from("/host/dev/demo1"));
}

#[test]
fn without_the_new_api_a_user_namespace_is_refused_a_node_it_could_not_use() {
    for (no_new_api, api) in [(true, MountApi::Auto), (false, MountApi::Classic)] {
        let host = Recorder {
            userns: true,
            no_new_api,
            ..Recorder::default()
        };
        let t = Target {
            bind_nodes: true,
            ..target()
        };
        let e = edits(vec![node("demo0", 44)], None);
        let msg = apply_on(&host, &t, &e, api, &builtin())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("/host/dev/demo0") && msg.contains("mode 660"),
            "{msg}"
        );
        assert!(
            !host.calls().contains(&"in_container".to_owned()),
            "{api:?}"
        );
    }
}

#[test]
fn a_kernel_without_the_new_api_gets_paths_for_everything() {
    let host = Recorder {
        no_new_api: true,
        ..Recorder::default()
    };
    let t = Target {
        bind_nodes: true,
        ..target()
    };
    let e = edits(vec![node("demo0", 0), node("demo1", 0)], Some(&elf()));
    let report = apply_on(&host, &t, &e, MountApi::Auto, &builtin()).unwrap();
    let seen = host.seen();
    let bound: Vec<_> = seen.nodes.iter().map(|(_, s, _)| *s).collect();
    assert_eq!(bound, [Some(Src::Path), Some(Src::Path)]);
    assert_eq!(seen.files[0].1, Src::Path);
    assert!(!report.new_mount_api);
    // The first refusal ends the preparation: nothing more is asked of the kernel.
    let asked = host.calls().iter().filter(|c| *c == "detach_tree").count();
    assert_eq!(asked, 1);
}

/// A file the kernel cannot detach once the nodes were: the trees made so far are dropped and
/// every source, the nodes' too, goes by path.
#[test]
fn a_file_that_cannot_be_detached_sends_every_source_by_path() {
    let host = Recorder {
        file_not_detached: true,
        ..Recorder::default()
    };
    let t = Target {
        bind_nodes: true,
        ..target()
    };
    let e = edits(vec![node("demo0", 0)], Some(&elf()));
    let report = apply_on(&host, &t, &e, MountApi::Auto, &builtin()).unwrap();
    let seen = host.seen();
    assert_eq!(seen.nodes[0].1, Some(Src::Path));
    assert_eq!(seen.files[0].1, Src::Path);
    assert!(!report.new_mount_api);
    let asked = host.calls().iter().filter(|c| *c == "detach_tree").count();
    assert_eq!(asked, 2, "the node's tree, then the file's refusal");
}

#[test]
fn the_classic_mount_api_asks_for_no_tree() {
    let host = Recorder::default();
    let t = Target {
        bind_nodes: true,
        ..target()
    };
    let e = edits(vec![node("demo0", 0)], Some(&elf()));
    let report = apply_on(&host, &t, &e, MountApi::Classic, &builtin()).unwrap();
    assert!(!host.calls().contains(&"detach_tree".to_owned()));
    assert_eq!(host.seen().nodes[0].1, Some(Src::Path));
    assert!(!report.new_mount_api);
}

#[test]
fn a_non_root_process_lacking_the_nodes_group_gets_the_node_in_its_own() {
    let host = Recorder::default();
    let t = Target {
        user: Some(user_1000()),
        ..target()
    };
    // demo0 is usable by group 44 only; demo1 (0666) by anyone: it keeps its group.
    let open = DeviceNode {
        mode: 0o666,
        ..node("demo1", 44)
    };
    let e = edits(vec![node("demo0", 44), open], None);
    apply_on(&host, &t, &e, MountApi::Auto, &builtin()).unwrap();
    let groups: Vec<_> = host.seen().nodes.iter().map(|(_, _, g)| *g).collect();
    assert_eq!(groups, [1000, 44]);
}

#[test]
fn nodes_to_regroup_come_with_the_hosts_filesystems() {
    let host = Recorder::default();
    let t = Target {
        user: Some(user_1000()),
        regroup: vec![node("render0", 44), node("member", 1000)],
        ..target()
    };
    let report = apply_on(
        &host,
        &t,
        &ContainerEdits::default(),
        MountApi::Auto,
        &builtin(),
    )
    .unwrap();
    assert_eq!(
        host.calls(),
        ["host_filesystems", "mount_namespace", "in_container"]
    );
    let seen = host.seen();
    // Only the node whose group the process lacks.
    assert_eq!(seen.regroup, [("/dev/render0".into(), 1000)]);
    assert_eq!(seen.host_devs, [(0, 21), (8, 1)]);
    assert_eq!(report.nodes, 0);
}

#[test]
fn the_hook_writes_the_cache_itself_and_ldconfig_does_not_run() {
    let host = Recorder {
        outcome: RefCell::new(Some(ChildOutcome::CacheWritten)),
        ..Recorder::default()
    };
    let e = edits(vec![], Some(&elf()));
    let report = apply_on(&host, &target(), &e, MountApi::Auto, &builtin()).unwrap();
    let seen = host.seen();
    assert_eq!(seen.cache, Some(vec!["libdemo.so.1".to_owned()]));
    assert!(seen.writable_etc);
    assert!(!host.calls().contains(&"run_ldconfig".to_owned()));
    assert!(report.ldcache && !report.ldconfig_ran && !report.ldcache_was_current);
}

#[test]
fn libraries_the_runtime_mounted_are_cached_by_the_hook_and_not_mounted_again() {
    let host = Recorder {
        outcome: RefCell::new(Some(ChildOutcome::CacheWritten)),
        ..Recorder::default()
    };
    // What a CDI spec's finish hook names: the runtime made the mount, the hook the rest.
    let mut e = edits(vec![], Some(&elf()));
    let t = Target {
        mounted_libraries: std::mem::take(&mut e.mounts),
        ..target()
    };
    let report = apply_on(&host, &t, &e, MountApi::Auto, &builtin()).unwrap();
    let seen = host.seen();
    assert_eq!(seen.cache, Some(vec!["libdemo.so.1".to_owned()]));
    assert!(seen.files.is_empty(), "nothing mounted: {:?}", seen.files);
    assert!(host.trees.borrow().is_empty());
    assert!(!host.calls().contains(&"run_ldconfig".to_owned()));
    assert!(report.ldcache && !report.ldconfig_ran);
    assert_eq!((report.mounts, report.links), (0, 1));
}

#[test]
fn a_current_cache_is_reported_as_such() {
    let host = Recorder {
        outcome: RefCell::new(Some(ChildOutcome::CacheCurrent)),
        ..Recorder::default()
    };
    let e = edits(vec![], Some(&elf()));
    let report = apply_on(&host, &target(), &e, MountApi::Auto, &builtin()).unwrap();
    assert!(report.ldcache && report.ldcache_was_current && !report.ldconfig_ran);
}

#[test]
fn an_image_cache_the_hook_cannot_merge_is_left_to_ldconfig() {
    let host = Recorder {
        outcome: RefCell::new(Some(ChildOutcome::NeedsLdconfig("old format".into()))),
        ..Recorder::default()
    };
    let e = edits(vec![], Some(&elf()));
    let report = apply_on(&host, &target(), &e, MountApi::Auto, &builtin()).unwrap();
    assert_eq!(
        host.calls(),
        [
            "mount_namespace",
            "detach_tree",
            "in_container",
            "run_ldconfig"
        ]
    );
    assert_eq!(*host.ldconfig_dirs.borrow(), [PathBuf::from("/usr/lib")]);
    assert!(report.ldcache && report.ldconfig_ran);
}

#[test]
fn ldconfig_is_given_a_newer_compat_directory_first_and_an_older_one_not_at_all() {
    for preferred in [true, false] {
        let host = Recorder {
            outcome: RefCell::new(Some(ChildOutcome::NeedsLdconfig("old format".into()))),
            compat_preferred: preferred,
            ..Recorder::default()
        };
        let mut e = edits(vec![], Some(&elf()));
        e.forward_compat = Some(devinject_devices::ForwardCompat {
            dir: PathBuf::from("/usr/local/cuda/compat"),
            library: "libcuda.so".into(),
            host_major: 535,
        });
        apply_on(&host, &target(), &e, MountApi::Auto, &builtin()).unwrap();
        let want: &[&str] = if preferred {
            &["/usr/local/cuda/compat", "/usr/lib"]
        } else {
            &["/usr/lib"]
        };
        let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
        assert_eq!(*host.ldconfig_dirs.borrow(), want, "preferred: {preferred}");
    }
}

#[test]
fn a_library_without_readable_flags_is_left_to_ldconfig() {
    let host = Recorder::default();
    let not_elf = tempfile::NamedTempFile::new().unwrap();
    let e = edits(vec![], Some(not_elf.path()));
    let report = apply_on(&host, &target(), &e, MountApi::Auto, &builtin()).unwrap();
    assert_eq!(host.seen().cache, None, "the hook does not write the cache");
    assert!(report.ldconfig_ran);
}

#[test]
fn the_ldconfig_writer_always_runs_ldconfig() {
    let host = Recorder::default();
    let e = edits(vec![], Some(&elf()));
    let report = apply_on(
        &host,
        &target(),
        &e,
        MountApi::Auto,
        &ldconfig(CacheWriter::Ldconfig),
    )
    .unwrap();
    assert_eq!(host.seen().cache, None);
    assert!(report.ldconfig_ran);
}

#[test]
fn a_failed_ldconfig_fails_the_container_unless_its_rootfs_is_read_only() {
    let e = edits(vec![], Some(&elf()));
    let failing = || Recorder {
        ldconfig_fails: true,
        ..Recorder::default()
    };
    let writer = ldconfig(CacheWriter::Ldconfig);
    let err = apply_on(&failing(), &target(), &e, MountApi::Auto, &writer).unwrap_err();
    assert!(matches!(err, InjectError::Ldconfig { .. }), "{err}");

    let read_only = Target {
        readonly_rootfs: true,
        ..target()
    };
    let report = apply_on(&failing(), &read_only, &e, MountApi::Auto, &writer).unwrap();
    assert!(!report.ldcache && !report.ldconfig_ran);
    assert_eq!(report.mounts, 1, "the files are in place all the same");
}

/// A read-only rootfs that is a plain directory (an image several containers may run from) is
/// handed to the child as one to write nothing into, and no linker cache is planned or left to
/// ldconfig; a read-only rootfs that is a mount of its own (an engine's per-container layer) is
/// written as before.
#[test]
fn a_read_only_rootfs_shared_as_a_plain_directory_is_never_written() {
    let e = edits(vec![], Some(&elf()));
    let read_only = Target {
        readonly_rootfs: true,
        ..target()
    };
    for writer in [builtin(), ldconfig(CacheWriter::Ldconfig)] {
        let shared = Recorder {
            plain_rootfs: true,
            ..Recorder::default()
        };
        let report = apply_on(&shared, &read_only, &e, MountApi::Auto, &writer).unwrap();
        let seen = shared.seen();
        assert!(seen.shared_read_only);
        assert_eq!(seen.cache, None);
        assert!(!seen.writable_etc);
        assert!(!report.ldconfig_ran && !report.ldcache);
        assert!(!shared.calls().contains(&"run_ldconfig".to_owned()));

        let own = Recorder::default();
        apply_on(&own, &read_only, &e, MountApi::Auto, &writer).unwrap();
        let seen = own.seen();
        assert!(!seen.shared_read_only);
        assert!(seen.writable_etc);
    }
    // A writable rootfs is never taken for a shared read-only one, whatever it is mounted as.
    let plain = Recorder {
        plain_rootfs: true,
        ..Recorder::default()
    };
    apply_on(&plain, &target(), &e, MountApi::Auto, &builtin()).unwrap();
    assert!(!plain.seen().shared_read_only);
}

/// The real child, in this process's own mount namespace (joining it needs root): its outcome,
/// its error and its deadline come back typed.
#[test]
fn the_injection_child_reports_its_outcome_its_error_and_its_deadline() {
    if !devinject_testkit::require_root() {
        return;
    }
    let ns = privileged::System
        .mount_namespace(std::process::id() as i32)
        .unwrap();
    let limit = std::time::Duration::from_secs(20);
    let report = ChildReport {
        outcome: ChildOutcome::NeedsLdconfig("old format".into()),
        compat_preferred: true,
    };
    let sent = report.clone();
    let outcome = run_in_namespace(&ns, limit, move || Ok(sent)).unwrap();
    assert_eq!(outcome, report);

    let err =
        run_in_namespace(&ns, limit, || Err(InjectError::Child("no /dev".into()))).unwrap_err();
    assert_eq!(err.to_string(), "no /dev");

    let err = run_in_namespace(&ns, std::time::Duration::from_millis(300), || {
        std::thread::sleep(std::time::Duration::from_secs(30));
        Ok(ChildOutcome::Done.into())
    })
    .unwrap_err();
    assert!(matches!(err, InjectError::Timeout { .. }), "{err}");
}
