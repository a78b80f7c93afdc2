//! Finding a process's device cgroups from `/proc`.
//!
//! `/proc/<pid>/cgroup` names the cgroup per hierarchy (`5:devices:/docker/<id>` for the v1
//! devices controller, `0::/system.slice/docker-<id>.scope` for cgroup v2), relative to the
//! reader's cgroup namespace. `/proc/self/mountinfo` says where each hierarchy is mounted
//! in the reader's mount namespace and which subtree of it (the root field). The directory
//! is `<mount point>/<cgroup path minus mount root>`; the last matching mount wins (later
//! mounts shadow earlier ones), and it must exist. cgroupfs-style (`/docker/<id>`) and
//! systemd-style (`/system.slice/docker-<id>.scope`) paths arrive already resolved, so both
//! need no special handling.
//!
//! Reading `mountinfo` costs in proportion to the host's mounts: 0.05 ms with 22, 1.7 ms with
//! 1000 (a node running a hundred pods has that many), on every container start. So the
//! conventional places (`/sys/fs/cgroup/devices`, `/sys/fs/cgroup` or `/sys/fs/cgroup/unified`)
//! are tried first ([`conventional`]), and a directory found there is taken only when its
//! file system is a cgroup hierarchy of the right version (`statfs`) and its `cgroup.procs`
//! lists the process: proof that it is the process's cgroup, however the hierarchy is mounted.
//! Anything else falls back to `mountinfo`.
use std::fs;
use std::path::{Component, Path, PathBuf};

use devinject_mountinfo::Mount;
use nix::sys::statfs::{CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};

use crate::error::{CgroupError, Result};

/// The device cgroup directories of one process, as seen from this process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerCgroups {
    /// The v1 `devices` controller directory, when the process is in a devices cgroup
    /// below the root. The root devices cgroup allows every device, so a process there (for
    /// example a container whose runtime uses cgroup v2 on a hybrid host) has no v1
    /// restriction to lift.
    pub v1_devices: Option<PathBuf>,
    /// The cgroup v2 directory, when a cgroup2 file system is mounted.
    pub v2: Option<PathBuf>,
    /// True when the process is in the root cgroup v2 (of the reader's cgroup namespace).
    /// Programs there apply to every process below, so they are never the container's own.
    pub v2_is_root: bool,
}

/// Locates the device cgroups of `pid`, reading `<proc_root>/<pid>/cgroup` and
/// `<proc_root>/self/mountinfo`.
pub fn container_cgroups(proc_root: &Path, pid: i32) -> Result<ContainerCgroups> {
    container_cgroups_at(proc_root, None, pid)
}

/// [`container_cgroups`], trying the conventional mount points under `sys_cgroup` (normally
/// `/sys/fs/cgroup`) before `mountinfo`.
pub fn container_cgroups_at(
    proc_root: &Path,
    sys_cgroup: Option<&Path>,
    pid: i32,
) -> Result<ContainerCgroups> {
    if pid <= 0 {
        return Err(CgroupError::InvalidPid { pid });
    }
    let cgroup_file = proc_root.join(pid.to_string()).join("cgroup");
    let entries = parse_proc_cgroup(&cgroup_file, &read(&cgroup_file)?)?;
    if let Some(found) = sys_cgroup.and_then(|sys| conventional(sys, &entries, pid)) {
        return Ok(found);
    }
    let mountinfo_file = proc_root.join("self").join("mountinfo");
    let mounts = parse_mountinfo(&mountinfo_file, &read_bytes(&mountinfo_file)?)?;

    let unreachable = |hierarchy, cgroup: &str| CgroupError::Unreachable {
        pid,
        hierarchy,
        cgroup: cgroup.to_owned(),
        mountinfo: mountinfo_file.clone(),
    };

    let mut found = ContainerCgroups::default();

    if let Some(entry) = v1_devices_entry(&entries) {
        let dir = resolve(&mounts, &entry.path, |m| {
            m.fs_type == "cgroup" && m.has_super_option("devices")
        })
        .ok_or_else(|| unreachable("devices (cgroup v1)", &entry.path))?;
        found.v1_devices = Some(dir);
    }

    let v2_mounted = mounts.iter().any(|m| m.fs_type == "cgroup2");
    if let Some(entry) = v2_entry(&entries) {
        if v2_mounted {
            let dir = resolve(&mounts, &entry.path, |m| m.fs_type == "cgroup2")
                .ok_or_else(|| unreachable("cgroup v2", &entry.path))?;
            found.v2 = Some(dir);
            found.v2_is_root = entry.path == "/";
        }
    }
    Ok(found)
}

/// The process's v1 devices cgroup, when below the root.
fn v1_devices_entry(entries: &[CgroupEntry]) -> Option<&CgroupEntry> {
    entries
        .iter()
        .find(|e| e.hierarchy != 0 && e.controllers.iter().any(|c| c == "devices") && e.path != "/")
}

/// The process's cgroup v2 entry.
fn v2_entry(entries: &[CgroupEntry]) -> Option<&CgroupEntry> {
    entries
        .iter()
        .find(|e| e.hierarchy == 0 && e.controllers.is_empty())
}

/// The cgroups of `pid` (its `/proc/<pid>/cgroup` `entries`) at the conventional mount points
/// under `sys` (see the module doc), or `None` when any of them is not there or not proven.
pub fn conventional(sys: &Path, entries: &[CgroupEntry], pid: i32) -> Option<ContainerCgroups> {
    let magic = |p: &Path| {
        nix::sys::statfs::statfs(p)
            .ok()
            .map(|s| s.filesystem_type())
    };
    let mut found = ContainerCgroups::default();
    if let Some(entry) = v1_devices_entry(entries) {
        let point = sys.join("devices");
        if magic(&point)? != CGROUP_SUPER_MAGIC || !point.join("devices.allow").is_file() {
            return None;
        }
        found.v1_devices = Some(member_dir(&point, &entry.path, pid)?);
    }
    if let Some(entry) = v2_entry(entries) {
        let point = [sys.to_owned(), sys.join("unified")]
            .into_iter()
            .find(|p| magic(p) == Some(CGROUP2_SUPER_MAGIC))?;
        found.v2 = Some(member_dir(&point, &entry.path, pid)?);
        found.v2_is_root = entry.path == "/";
    }
    Some(found)
}

/// `<point>/<cgroup>` when its `cgroup.procs` lists `pid`.
fn member_dir(point: &Path, cgroup: &str, pid: i32) -> Option<PathBuf> {
    let relative = Path::new(cgroup).strip_prefix("/").ok()?;
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    let dir = point.join(relative);
    let procs = fs::read_to_string(dir.join("cgroup.procs")).ok()?;
    let pid = pid.to_string();
    procs.lines().any(|l| l == pid).then_some(dir)
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|source| CgroupError::ReadProc {
        path: path.to_owned(),
        source,
    })
}

/// [`read`] for a file whose paths need not be UTF-8 (mountinfo).
fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|source| CgroupError::ReadProc {
        path: path.to_owned(),
        source,
    })
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-ID:controller-list:cgroup-path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupEntry {
    hierarchy: u32,
    controllers: Vec<String>,
    path: String,
}

/// Parses each non-empty line of `text` with `parse`; a line it rejects (`None`) is an error
/// naming `file` and the line.
fn parse_lines<T>(file: &Path, text: &str, parse: impl Fn(&str) -> Option<T>) -> Result<Vec<T>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(i, line)| {
            parse(line).ok_or_else(|| CgroupError::MalformedProc {
                path: file.to_owned(),
                line: i + 1,
                text: line.to_owned(),
            })
        })
        .collect()
}

/// The entries of `/proc/<pid>/cgroup` (`file`, holding `text`).
pub fn parse_proc_cgroup(file: &Path, text: &str) -> Result<Vec<CgroupEntry>> {
    parse_lines(file, text, |line| {
        // The path may itself contain ':', so split only twice.
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        Some(CgroupEntry {
            hierarchy: id.parse().ok()?,
            controllers: controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
            path: path.to_owned(),
        })
    })
}

/// The mounts of a mountinfo `file` holding `text`; the first line that does not parse is
/// an error naming `file` and the line.
fn parse_mountinfo(file: &Path, text: &[u8]) -> Result<Vec<Mount>> {
    devinject_mountinfo::parse(text)
        .map(|mount| {
            mount.map_err(|e| CgroupError::MalformedProc {
                path: file.to_owned(),
                line: e.line(),
                text: e.text().to_owned(),
            })
        })
        .collect()
}

/// The directory for `cgroup` under the last mount that `matches`, contains it and exists.
fn resolve(mounts: &[Mount], cgroup: &str, matches: impl Fn(&Mount) -> bool) -> Option<PathBuf> {
    let cgroup = Path::new(cgroup);
    // A path with `..` lies outside our cgroup namespace: no mount of ours reaches it.
    if !cgroup.is_absolute() || cgroup.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    mounts.iter().rev().filter(|m| matches(m)).find_map(|m| {
        let relative = cgroup.strip_prefix(&m.root).ok()?;
        let dir = if relative.as_os_str().is_empty() {
            m.mount_point.clone()
        } else {
            m.mount_point.join(relative)
        };
        dir.is_dir().then_some(dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / {ROOT}/sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
36 31 0:33 / {ROOT}/sys/fs/cgroup/devices rw,nosuid shared:14 - cgroup cgroup rw,devices
37 31 0:34 / {ROOT}/sys/fs/cgroup/cpu,cpuacct rw shared:15 - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / {ROOT}/sys/fs/cgroup/unified rw,nosuid shared:19 - cgroup2 cgroup2 rw,nsdelegate
";

    /// A fake proc tree plus cgroup directories under one temp dir.
    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new(cgroup: &str, mountinfo: &str, dirs: &[&str]) -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let root = dir.path().to_str().expect("utf-8 temp path").to_owned();
            fs::create_dir_all(dir.path().join("proc/42")).expect("mkdir");
            fs::create_dir_all(dir.path().join("proc/self")).expect("mkdir");
            fs::write(dir.path().join("proc/42/cgroup"), cgroup).expect("write");
            fs::write(
                dir.path().join("proc/self/mountinfo"),
                mountinfo.replace("{ROOT}", &root),
            )
            .expect("write");
            for d in dirs {
                fs::create_dir_all(dir.path().join(d)).expect("mkdir");
            }
            Self { dir }
        }

        fn proc(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }
    }

    #[test]
    fn hybrid_host_with_cgroupfs_paths_finds_both() {
        let tree = Tree::new(
            "12:devices:/docker/abc\n3:cpu,cpuacct:/docker/abc\n\
             1:name=systemd:/docker/abc\n0::/docker/abc\n",
            HYBRID_MOUNTS,
            &[
                "sys/fs/cgroup/devices/docker/abc",
                "sys/fs/cgroup/unified/docker/abc",
            ],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(
            found,
            ContainerCgroups {
                v1_devices: Some(tree.path("sys/fs/cgroup/devices/docker/abc")),
                v2: Some(tree.path("sys/fs/cgroup/unified/docker/abc")),
                v2_is_root: false,
            }
        );
    }

    /// On a v1 host the container's cgroup has the same path in every hierarchy: the devices
    /// one is found by its `devices` super option, not as any v1 mount holding the path.
    #[test]
    fn the_devices_hierarchy_is_told_from_the_other_v1_ones() {
        let tree = Tree::new(
            "12:devices:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/docker/abc\n",
            HYBRID_MOUNTS,
            &[
                "sys/fs/cgroup/devices/docker/abc",
                "sys/fs/cgroup/cpu,cpuacct/docker/abc",
                "sys/fs/cgroup/unified/docker/abc",
            ],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(
            found.v1_devices,
            Some(tree.path("sys/fs/cgroup/devices/docker/abc"))
        );
    }

    /// A directory that only looks like the devices hierarchy (a `devices.allow` file, the
    /// process in `cgroup.procs`) on a file system that is not cgroup's proves nothing:
    /// mountinfo decides.
    #[test]
    fn a_lookalike_conventional_devices_dir_is_not_taken() {
        let tree = Tree::new(
            "12:devices:/docker/abc\n",
            HYBRID_MOUNTS,
            &[
                "sys/fs/cgroup/devices/docker/abc",
                "lookalike/devices/docker/abc",
            ],
        );
        fs::write(tree.path("lookalike/devices/devices.allow"), "").expect("write");
        fs::write(
            tree.path("lookalike/devices/docker/abc/cgroup.procs"),
            "42\n",
        )
        .expect("write");
        let found =
            container_cgroups_at(&tree.proc(), Some(&tree.path("lookalike")), 42).expect("located");
        assert_eq!(
            found.v1_devices,
            Some(tree.path("sys/fs/cgroup/devices/docker/abc"))
        );
    }

    #[test]
    fn unified_host_with_systemd_slice() {
        let path = "/system.slice/docker-0123abcd.scope";
        let tree = Tree::new(
            &format!("0::{path}\n"),
            "30 1 0:26 / {ROOT}/sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
            &["sys/fs/cgroup/system.slice/docker-0123abcd.scope"],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(found.v1_devices, None);
        assert_eq!(
            found.v2,
            Some(tree.path("sys/fs/cgroup/system.slice/docker-0123abcd.scope"))
        );
    }

    #[test]
    fn kubepods_path_with_colons_in_the_cgroup_path() {
        let path = "/kubepods.slice/kubepods-pod1.slice/cri-containerd:abc.scope";
        let tree = Tree::new(
            &format!("0::{path}\n"),
            "30 1 0:26 / {ROOT}/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            &["sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd:abc.scope"],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert!(found.v2.expect("v2").ends_with("cri-containerd:abc.scope"));
    }

    #[test]
    fn pure_v1_host_reports_v2_not_mounted() {
        let mounts: String = HYBRID_MOUNTS
            .lines()
            .filter(|l| !l.contains("cgroup2"))
            .map(|l| format!("{l}\n"))
            .collect();
        let tree = Tree::new(
            "12:devices:/docker/abc\n0::/\n",
            &mounts,
            &["sys/fs/cgroup/devices/docker/abc"],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert!(found.v1_devices.is_some());
        assert_eq!(found.v2, None);
        assert!(!found.v2_is_root);
    }

    #[test]
    fn root_devices_cgroup_is_not_a_restriction() {
        // runc in cgroup v2 mode on a hybrid host: the v1 devices line stays at the root, and
        // the v1 hierarchy may be shadowed by a cgroup2 mount on /sys/fs/cgroup.
        let mounts = "\
36 31 0:33 / {ROOT}/sys/fs/cgroup/devices rw - cgroup cgroup rw,devices
60 1 0:38 / {ROOT}/sys/fs/cgroup rw - cgroup2 cgroup2 rw
";
        let tree = Tree::new("5:devices:/\n0::/ctr\n", mounts, &["sys/fs/cgroup/ctr"]);
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(found.v1_devices, None);
        assert_eq!(found.v2, Some(tree.path("sys/fs/cgroup/ctr")));
    }

    #[test]
    fn v2_root_cgroup_is_flagged() {
        let tree = Tree::new("0::/\n", HYBRID_MOUNTS, &["sys/fs/cgroup/unified"]);
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(found.v2, Some(tree.path("sys/fs/cgroup/unified")));
        assert!(found.v2_is_root);
    }

    #[test]
    fn last_mount_wins_and_its_root_is_stripped() {
        // A nested setup: the host hierarchy is mounted, then a bind of the container's
        // subtree (root field /docker/abc) over another place.
        let mounts = "\
30 1 0:26 / {ROOT}/host rw - cgroup2 cgroup2 rw
50 1 0:26 /docker/abc {ROOT}/inner rw - cgroup2 cgroup2 rw
";
        let tree = Tree::new(
            "0::/docker/abc/sub\n",
            mounts,
            &["host/docker/abc/sub", "inner/sub"],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(found.v2, Some(tree.path("inner/sub")));
    }

    #[test]
    fn falls_back_to_an_earlier_mount_when_the_last_does_not_contain_the_cgroup() {
        let mounts = "\
30 1 0:26 / {ROOT}/host rw - cgroup2 cgroup2 rw
50 1 0:26 /other {ROOT}/inner rw - cgroup2 cgroup2 rw
";
        let tree = Tree::new("0::/docker/abc\n", mounts, &["host/docker/abc", "inner"]);
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(found.v2, Some(tree.path("host/docker/abc")));
    }

    #[test]
    fn root_prefix_matches_whole_components_only() {
        let mounts = "50 1 0:26 /dock {ROOT}/inner rw - cgroup2 cgroup2 rw\n";
        let tree = Tree::new("0::/docker/abc\n", mounts, &["inner/er/abc"]);
        let err = container_cgroups(&tree.proc(), 42).expect_err("unreachable");
        assert!(matches!(err, CgroupError::Unreachable { .. }), "{err}");
    }

    #[test]
    fn missing_directory_is_an_error_naming_pid_and_cgroup() {
        let tree = Tree::new("12:devices:/docker/gone\n0::/\n", HYBRID_MOUNTS, &[]);
        let err = container_cgroups(&tree.proc(), 42)
            .expect_err("dir missing")
            .to_string();
        assert!(
            err.contains("pid 42") && err.contains("/docker/gone"),
            "{err}"
        );
        assert!(err.contains("devices"), "{err}");
    }

    #[test]
    fn parent_dir_components_are_outside_our_namespace() {
        // `/../escape` would lead from the mount point to a directory that exists.
        for cgroup in ["/../../escape", "/../escape"] {
            let tree = Tree::new(
                &format!("0::{cgroup}\n"),
                "30 1 0:26 / {ROOT}/cg rw - cgroup2 cgroup2 rw\n",
                &["cg", "escape"],
            );
            assert!(tree.path("cg").join("..").join("escape").is_dir());
            assert!(container_cgroups(&tree.proc(), 42).is_err(), "{cgroup}");
        }
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        use devinject_mountinfo::unescape;

        assert_eq!(unescape(r"/mnt/with\040space"), "/mnt/with space");
        assert_eq!(unescape(r"/a\134b\011c"), "/a\\b\tc");
        assert_eq!(unescape(r"/trailing\04"), r"/trailing\04");
        let tree = Tree::new(
            "0::/c\n",
            "30 1 0:26 / {ROOT}/cg\\040root rw - cgroup2 cgroup2 rw\n",
            &["cg root/c"],
        );
        let found = container_cgroups(&tree.proc(), 42).expect("located");
        assert_eq!(found.v2, Some(tree.path("cg root/c")));
    }

    #[test]
    fn malformed_files_name_file_and_line() {
        let tree = Tree::new("0::/\nnot a cgroup line\n", HYBRID_MOUNTS, &[]);
        let err = container_cgroups(&tree.proc(), 42)
            .expect_err("malformed")
            .to_string();
        assert!(err.contains("line 2") && err.contains("42/cgroup"), "{err}");

        let tree = Tree::new("0::/\n", "1 2 3\n", &[]);
        let err = container_cgroups(&tree.proc(), 42)
            .expect_err("malformed")
            .to_string();
        assert!(err.contains("mountinfo"), "{err}");

        // Too few fields on either side of the separator.
        for line in [
            "36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup",
            "36 31 / /sys/fs/cgroup/devices - cgroup cgroup rw,devices",
        ] {
            let tree = Tree::new("0::/\n", &format!("{line}\n"), &[]);
            let err = container_cgroups(&tree.proc(), 42)
                .expect_err(line)
                .to_string();
            assert!(err.contains("mountinfo") && err.contains("line 1"), "{err}");
        }
    }

    #[test]
    fn missing_process_and_bad_pid() {
        let tree = Tree::new("0::/\n", HYBRID_MOUNTS, &[]);
        let err = container_cgroups(&tree.proc(), 7)
            .expect_err("no such pid")
            .to_string();
        assert!(err.contains("/7/cgroup"), "{err}");
        assert!(matches!(
            container_cgroups(&tree.proc(), 0),
            Err(CgroupError::InvalidPid { pid: 0 })
        ));
    }
}
