//! The planner: (profile, discovered devices, request, host files, container layout) → plan.
//!
//! Pure: all I/O (discovery, host file resolution, looking at the rootfs) happens before, so the
//! decisions are unit-tested on plain values. Nothing beyond the request is ever planned: the
//! granted devices' own nodes, the kind's control nodes (only with at least one device), and the
//! kind's libraries, binaries and files (with any request but `void`).

use std::path::PathBuf;

use crate::capability::Capabilities;
use crate::driver_files::DriverFiles;
use crate::forward_compat::{major_of, ForwardCompat};
use crate::inventory::Inventory;
use crate::names::ProfileName;
use crate::node::DeviceNode;
use crate::plan::{ContainerEdits, EnvVar, Mount, MountKind, Plan, Symlink};
use crate::profile::{IdSource, LibraryNames, Profile};
use crate::request::{Request, RequestError, Resolve};

/// Where files go in this container's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLayout {
    /// The directory libraries are mounted into, e.g. `/usr/lib/x86_64-linux-gnu` on Debian
    /// images, `/usr/lib64` on RHEL-style ones.
    pub lib_dir: PathBuf,
}

impl Default for ContainerLayout {
    fn default() -> Self {
        Self {
            lib_dir: PathBuf::from("/usr/lib"),
        }
    }
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum PlanError {
    /// The request is invalid for this profile.
    #[error("profile {profile} ({env}): {source}")]
    Request {
        profile: ProfileName,
        /// The request variable, so the user knows what to fix.
        env: String,
        /// The problem.
        source: RequestError,
    },
    /// A device the kubelet granted is not there any more.
    #[error("device {item} of {resource} was granted but is gone (unplugged or failed since the kubelet allocated it; known ids are {known}): delete the pod so that it is scheduled again")]
    Gone {
        /// The profile's resource name.
        resource: String,
        /// The granted id.
        item: String,
        /// The discovered ids, comma-separated.
        known: String,
    },
}

/// Everything the planner looks at.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// The device kind.
    pub profile: &'a Profile,
    /// What discovery found.
    pub inventory: &'a Inventory,
    /// What the container asked for.
    pub request: &'a Request,
    /// How the request's items resolve to devices: [`Resolve::IdsOrPositions`] only for a
    /// request its caller wrote and may trust; the planner narrows it to ids when the profile's
    /// ids are numbers.
    pub resolve: Resolve,
    /// The kind's files on the host.
    pub driver_files: &'a DriverFiles,
    /// The parts of the driver the container chose: files tagged with another part are left
    /// out ([`crate::capability`]).
    pub capabilities: &'a Capabilities,
    /// Where files go in this image.
    pub layout: &'a ContainerLayout,
}

/// Plans one profile's edits. `Ok(None)` when the container asked for nothing of this kind.
pub fn plan(input: PlanInput<'_>) -> Result<Option<Plan>, PlanError> {
    let PlanInput {
        profile,
        inventory,
        request,
        resolve,
        driver_files,
        capabilities,
        layout,
    } = input;
    if !request.wants_anything() {
        return Ok(None);
    }
    // Index ids are numbers: a number is then always an id, never a position.
    let resolve = match (resolve, profile.discovery.id) {
        (Resolve::IdsOrPositions, IdSource::Index) => Resolve::Ids,
        (r, _) => r,
    };
    let selection = request
        .select(&inventory.devices, profile.replicas, resolve)
        .map_err(|source| match source {
            RequestError::Gone { item, known } => PlanError::Gone {
                resource: profile.resource_name().to_owned(),
                item,
                known,
            },
            source => PlanError::Request {
                profile: profile.name.clone(),
                env: profile.request_env.clone(),
                source,
            },
        })?;
    let mut edits = ContainerEdits::default();
    let devices: Vec<_> = selection
        .indices
        .iter()
        .map(|&i| &inventory.devices[i])
        .collect();
    for d in &devices {
        edits.device_nodes.extend(d.nodes.iter().cloned());
    }
    if !devices.is_empty() {
        for n in &inventory.control_nodes {
            if !edits
                .device_nodes
                .iter()
                .any(|m| m.container_path == n.container_path)
            {
                edits.device_nodes.push(n.clone());
            }
        }
    }
    edits.cgroup_rules = edits.device_nodes.iter().map(DeviceNode::rule).collect();
    edits.cgroup_rules.dedup();

    let mut links = Vec::new();
    let libraries: Vec<_> = driver_files
        .libraries
        .iter()
        .filter(|l| capabilities.includes(l.capability.as_deref()))
        .collect();
    for lib in &libraries {
        let name = match (&lib.soname, profile.library_names) {
            (Some(soname), LibraryNames::Soname) => soname,
            (Some(soname), LibraryNames::File) => {
                links.push(Symlink {
                    link: layout.lib_dir.join(soname),
                    target: lib.file_name.clone(),
                });
                &lib.file_name
            }
            (None, _) => &lib.file_name,
        };
        for extra in &lib.links {
            // To the soname, which names the file in either `library_names`.
            links.push(Symlink {
                link: layout.lib_dir.join(extra),
                target: lib.soname.clone().unwrap_or_else(|| lib.file_name.clone()),
            });
        }
        let dest = layout.lib_dir.join(name);
        // Two host files under one name (two versions of a soname found by a glob): the later
        // one is what the container gets, as with the later of two soname links.
        match edits.mounts.iter_mut().find(|m| m.container_path == dest) {
            Some(m) => m.host_path = lib.path.clone(),
            None => edits.mounts.push(Mount {
                host_path: lib.path.clone(),
                container_path: dest,
                kind: MountKind::Library,
            }),
        }
    }
    for (list, kind) in [
        (&driver_files.binaries, MountKind::Binary),
        (&driver_files.files, MountKind::File),
    ] {
        for f in list
            .iter()
            .filter(|f| capabilities.includes(f.capability.as_deref()))
        {
            edits.mounts.push(Mount {
                host_path: f.path.clone(),
                container_path: f.container_path.clone(),
                kind,
            });
        }
    }
    edits.symlinks = links;
    if !libraries.is_empty() {
        edits.ldcache_dirs = vec![layout.lib_dir.clone()];
    }
    edits.forward_compat = profile.forward_compat.as_ref().and_then(|spec| {
        let host_major = libraries
            .iter()
            .filter_map(|l| major_of(&l.file_name, &spec.library))
            .max()?;
        Some(ForwardCompat {
            dir: PathBuf::from(&spec.dir),
            library: spec.library.clone(),
            host_major,
        })
    });

    let ids: Vec<_> = devices.iter().map(|d| d.id.clone()).collect();
    let granted = if ids.is_empty() {
        "none".to_owned()
    } else {
        ids.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(",")
    };
    edits.env.push(EnvVar::new(&profile.request_env, granted));
    edits
        .env
        .extend(profile.env.iter().map(|(k, v)| EnvVar::new(k, v)));
    Ok(Some(Plan {
        profile: profile.name.clone(),
        devices: ids,
        edits,
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::driver_files::{DriverFile, DriverLibrary};
    use crate::inventory::Device;
    use crate::names::DeviceId;
    use crate::node::DeviceNode;
    use crate::DeviceKind;

    fn node(path: &str, minor: u32) -> DeviceNode {
        DeviceNode {
            host_path: PathBuf::from(format!("/host{path}")),
            container_path: PathBuf::from(path),
            kind: DeviceKind::Char,
            major: 240,
            minor,
            mode: 0o666,
            uid: 0,
            gid: 0,
        }
    }

    fn fixture() -> (Profile, Inventory, DriverFiles) {
        let profile = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\n[env]\nDEMO_DRIVER = \"1\"\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let devices = (0..3)
            .map(|i| Device {
                id: DeviceId::new(&i.to_string()).unwrap(),
                index: i,
                name: format!("accel{i}"),
                nodes: vec![node(&format!("/dev/demo/accel{i}"), i as u32)],
                numa_node: None,
                healthy: true,
                attributes: Default::default(),
                aliases: Vec::new(),
            })
            .collect();
        let inventory = Inventory {
            withdrawn: Vec::new(),
            devices,
            control_nodes: vec![node("/dev/demo/ctl", 99)],
        };
        let files = DriverFiles {
            libraries: vec![DriverLibrary {
                path: PathBuf::from("/opt/demo/lib/libdemo.so.1.0.0"),
                file_name: "libdemo.so.1.0.0".into(),
                soname: Some("libdemo.so.1".into()),
                capability: None,
                links: Vec::new(),
            }],
            binaries: vec![DriverFile {
                path: PathBuf::from("/opt/demo/bin/demo-smi"),
                container_path: PathBuf::from("/usr/bin/demo-smi"),
                capability: None,
            }],
            files: vec![],
        };
        (profile, inventory, files)
    }

    fn run(req: &str) -> Result<Option<Plan>, PlanError> {
        run_on(&[0, 1, 2], req, Resolve::Ids)
    }

    /// The container paths of a plan's device nodes, in order.
    fn node_paths(p: &Plan) -> Vec<PathBuf> {
        p.edits
            .device_nodes
            .iter()
            .map(|n| n.container_path.clone())
            .collect()
    }

    /// Plans `req` on a host whose demo devices are `accel<n>` for each of `present`.
    fn run_on(present: &[usize], req: &str, resolve: Resolve) -> Result<Option<Plan>, PlanError> {
        let (profile, mut inventory, files) = fixture();
        inventory
            .devices
            .retain(|d| present.contains(&d.id.as_str().parse().unwrap()));
        for (i, d) in inventory.devices.iter_mut().enumerate() {
            d.index = i;
        }
        let request = Request::parse(Some(req)).unwrap();
        let layout = ContainerLayout {
            lib_dir: PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        };
        plan(PlanInput {
            profile: &profile,
            inventory: &inventory,
            request: &request,
            resolve,
            driver_files: &files,
            capabilities: &Capabilities::All,
            layout: &layout,
        })
    }

    #[test]
    fn forward_compat_carries_the_host_major_of_the_injected_library_only() {
        let (mut profile, inventory, mut files) = fixture();
        let request = Request::parse(Some("0")).unwrap();
        let layout = ContainerLayout {
            lib_dir: PathBuf::from("/usr/lib"),
        };
        let planned = |profile: &Profile, files: &DriverFiles| {
            plan(PlanInput {
                profile,
                inventory: &inventory,
                request: &request,
                resolve: Resolve::Ids,
                driver_files: files,
                capabilities: &Capabilities::All,
                layout: &layout,
            })
            .unwrap()
            .unwrap()
            .edits
            .forward_compat
        };
        assert_eq!(planned(&profile, &files), None, "no [forward_compat]");
        profile.forward_compat = Some(crate::ForwardCompatSpec {
            dir: "/opt/demo/compat".into(),
            library: "libdemo.so".into(),
        });
        files.libraries[0].file_name = "libdemo.so.535.216.01".into();
        assert_eq!(
            planned(&profile, &files),
            Some(ForwardCompat {
                dir: PathBuf::from("/opt/demo/compat"),
                library: "libdemo.so".into(),
                host_major: 535
            })
        );
        // A host file whose name has no version: nothing to compare, nothing preferred.
        files.libraries[0].file_name = "libdemo.so.1".into();
        assert_eq!(planned(&profile, &files), None);
    }

    /// With accel1 gone, a container granted `1` must not get accel2 (position 1), which may be
    /// another pod's. Whoever wrote the request, a number is an id on an index-id profile.
    #[test]
    fn a_granted_device_that_is_gone_fails_and_never_selects_another() {
        let err = run_on(&[0, 2], "1", Resolve::Granted).unwrap_err();
        assert_eq!(
            err.to_string(),
            "device 1 of devinject.io/demo was granted but is gone (unplugged or failed since \
             the kubelet allocated it; known ids are 0, 2): delete the pod so that it is \
             scheduled again"
        );
        for resolve in [Resolve::Ids, Resolve::IdsOrPositions] {
            let err = run_on(&[0, 2], "1", resolve).unwrap_err();
            assert!(
                matches!(&err, PlanError::Request { source: RequestError::Unknown { item, .. }, .. } if item == "1"),
                "{resolve:?}: {err}"
            );
        }
        // The devices that are there still resolve by id, never by position.
        for resolve in [Resolve::Ids, Resolve::Granted, Resolve::IdsOrPositions] {
            let p = run_on(&[0, 2], "2,0", resolve).unwrap().unwrap();
            assert_eq!(
                node_paths(&p),
                ["/dev/demo/accel2", "/dev/demo/accel0", "/dev/demo/ctl"].map(PathBuf::from),
                "{resolve:?}"
            );
        }
    }

    #[test]
    fn void_plans_nothing() {
        assert_eq!(run("void").unwrap(), None);
        assert_eq!(run("").unwrap(), None);
    }

    #[test]
    fn two_devices_get_their_nodes_control_node_files_and_rules() {
        let p = run("2,0").unwrap().unwrap();
        assert_eq!(
            p.devices.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            ["2", "0"]
        );
        assert_eq!(
            node_paths(&p),
            ["/dev/demo/accel2", "/dev/demo/accel0", "/dev/demo/ctl"].map(PathBuf::from)
        );
        let rules: Vec<_> = p.edits.cgroup_rules.iter().map(|r| r.to_string()).collect();
        assert_eq!(rules, ["c 240:2 rwm", "c 240:0 rwm", "c 240:99 rwm"]);
        assert_eq!(
            p.edits.mounts[0].container_path,
            PathBuf::from("/usr/lib/x86_64-linux-gnu/libdemo.so.1.0.0")
        );
        assert_eq!(
            p.edits.mounts[1].container_path,
            PathBuf::from("/usr/bin/demo-smi")
        );
        assert_eq!(
            p.edits.symlinks,
            [Symlink {
                link: PathBuf::from("/usr/lib/x86_64-linux-gnu/libdemo.so.1"),
                target: "libdemo.so.1.0.0".into()
            }]
        );
        assert_eq!(
            p.edits.ldcache_dirs,
            [PathBuf::from("/usr/lib/x86_64-linux-gnu")]
        );
        assert_eq!(
            p.edits.env,
            [
                EnvVar::new("DEMO_VISIBLE_DEVICES", "2,0"),
                EnvVar::new("DEMO_DRIVER", "1")
            ]
        );
    }

    /// `library_names = "soname"`: each library is mounted under its soname, with no link and
    /// no versioned name; a library without a soname of its own keeps its file name; of two
    /// files with one soname the later is mounted, once.
    #[test]
    fn files_of_parts_the_container_did_not_choose_are_left_out() {
        let (profile, inventory, mut files) = fixture();
        files.libraries[0].capability = Some("compute".into());
        files.binaries[0].capability = Some("utility".into());
        files.files.push(DriverFile {
            path: PathBuf::from("/opt/demo/icd.json"),
            container_path: PathBuf::from("/etc/demo/icd.json"),
            capability: None,
        });
        let request = Request::parse(Some("0")).unwrap();
        let layout = ContainerLayout::default();
        let mounted = |capabilities: &Capabilities| {
            let p = plan(PlanInput {
                profile: &profile,
                inventory: &inventory,
                request: &request,
                resolve: Resolve::Ids,
                driver_files: &files,
                capabilities,
                layout: &layout,
            })
            .unwrap()
            .unwrap();
            let paths: Vec<_> = p
                .edits
                .mounts
                .iter()
                .map(|m| m.container_path.to_str().unwrap().to_owned())
                .collect();
            (paths, p.edits.ldcache_dirs.len(), p.edits.symlinks.len())
        };
        let utility = Capabilities::Only(["utility".to_owned()].into());
        assert_eq!(
            mounted(&utility),
            (
                vec!["/usr/bin/demo-smi".into(), "/etc/demo/icd.json".into()],
                0,
                0
            ),
            "no library chosen: no library, no soname link, no ldcache run"
        );
        let (all, ldcache, links) = mounted(&Capabilities::All);
        assert_eq!(all.len(), 3);
        assert_eq!((ldcache, links), (1, 1));
    }

    #[test]
    fn soname_names_mount_each_library_at_its_soname_without_a_link() {
        let (mut profile, inventory, mut files) = fixture();
        profile.library_names = LibraryNames::Soname;
        let lib = |path: &str, soname: Option<&str>| DriverLibrary {
            path: PathBuf::from(path),
            file_name: Path::new(path)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .into(),
            soname: soname.map(Into::into),
            capability: None,
            links: Vec::new(),
        };
        files.libraries.extend([
            lib("/opt/demo/lib/libplain.so", None),
            lib("/opt/demo/lib2/libdemo.so.1.0.1", Some("libdemo.so.1")),
        ]);
        let request = Request::parse(Some("0")).unwrap();
        let layout = ContainerLayout::default();
        let p = plan(PlanInput {
            profile: &profile,
            inventory: &inventory,
            request: &request,
            resolve: Resolve::Ids,
            driver_files: &files,
            capabilities: &Capabilities::All,
            layout: &layout,
        })
        .unwrap()
        .unwrap();
        let libs: Vec<_> = p
            .edits
            .mounts
            .iter()
            .filter(|m| m.kind == MountKind::Library)
            .map(|m| {
                (
                    m.host_path.to_str().unwrap(),
                    m.container_path.to_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            libs,
            [
                ("/opt/demo/lib2/libdemo.so.1.0.1", "/usr/lib/libdemo.so.1"),
                ("/opt/demo/lib/libplain.so", "/usr/lib/libplain.so"),
            ]
        );
        assert!(p.edits.symlinks.is_empty());
        assert_eq!(p.edits.ldcache_dirs, [PathBuf::from("/usr/lib")]);
    }

    #[test]
    fn ungranted_devices_never_appear() {
        let p = run("1").unwrap().unwrap();
        assert!(p
            .edits
            .device_nodes
            .iter()
            .all(|n| n.container_path != Path::new("/dev/demo/accel0")
                && n.container_path != Path::new("/dev/demo/accel2")));
        assert_eq!(p.edits.cgroup_rules.len(), 2);
    }

    #[test]
    fn none_brings_files_but_no_nodes() {
        let p = run("none").unwrap().unwrap();
        assert!(p.edits.device_nodes.is_empty());
        assert!(p.edits.cgroup_rules.is_empty());
        assert_eq!(p.edits.mounts.len(), 2);
        assert_eq!(p.edits.env[0], EnvVar::new("DEMO_VISIBLE_DEVICES", "none"));
    }

    #[test]
    fn all_selects_every_device() {
        let p = run("all").unwrap().unwrap();
        assert_eq!(p.devices.len(), 3);
    }

    #[test]
    fn bad_requests_name_profile_and_variable() {
        let err = run("0,5").unwrap_err().to_string();
        assert!(
            err.contains("demo") && err.contains("DEMO_VISIBLE_DEVICES") && err.contains("\"5\""),
            "{err}"
        );
    }

    #[test]
    fn merge_dedups_shared_parts() {
        let mut a = run("0").unwrap().unwrap().edits;
        let b = run("1").unwrap().unwrap().edits;
        a.merge(b);
        assert_eq!(a.device_nodes.len(), 3, "accel0, ctl, accel1");
        assert_eq!(a.mounts.len(), 2);
        assert_eq!(a.symlinks.len(), 1);
        assert_eq!(a.ldcache_dirs.len(), 1);
    }
}
