//! Which devices one host user can open with no devinject step at start: a rootless engine
//! (podman run by that user, with the CDI specs `cdi generate` wrote), or the root of a user
//! namespace whose host id is that user (docker's `userns-remap` maps it to a subordinate id).
//!
//! There the engine binds the host's node into the container, and the kernel checks the
//! process's host ids against the node's owner, group and mode: a user namespace gives no more
//! than the host user has (user_namespaces(7), "Interaction of user namespaces and other types
//! of namespaces"; inode permission checks map ids, not rights). devinject's hook and shim give a
//! user-namespaced container its own copy of each node, owned by the ids the namespace maps
//! (docs/security.md), so this answer is about the paths without them.

use std::io::Read;
use std::path::Path;

use devinject_devices::{DeviceNode, Inventory, Profile};

use crate::doctor::{DoctorReport, DoctorRequest, Section, Severity};

/// The longest `/etc/passwd` or `/etc/group` read.
const MAX_ACCOUNTS_BYTES: u64 = 16 << 20;

/// Read and write: what an accelerator's node is opened for.
const READ_WRITE: u32 = 0o6;

/// A host user as the kernel checks it: its uid, its primary group and the groups it is a
/// member of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostUser {
    /// How the user was named on the command line (a name or a number).
    pub shown: String,
    /// The user id.
    pub uid: u32,
    /// The primary group, when `/etc/passwd` names the user.
    pub gid: Option<u32>,
    /// Supplementary groups, from the member lists of `/etc/group`.
    pub groups: Vec<u32>,
}

/// Why a user could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserError {
    /// The name is in no line of `/etc/passwd`.
    #[error("no user {name} in {passwd}: name the user as /etc/passwd does, or give its uid")]
    Unknown {
        /// The name given.
        name: String,
        /// The file read.
        passwd: String,
    },
    /// The part after `:` is not a number.
    #[error("{spec}: the group after ':' must be a numeric gid (e.g. 100000:100000)")]
    Gid {
        /// What was given.
        spec: String,
    },
    /// `/etc/passwd` could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
}

/// How a user reaches a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The host's root: permission checks pass.
    Root,
    /// The node's owner, through the owner bits.
    Owner,
    /// Through the node's group, which is the user's primary group.
    PrimaryGroup,
    /// Through the node's group, of which the user is a supplementary member: only where the
    /// engine keeps the user's supplementary groups.
    SupplementaryGroup,
    /// Through the bits for others.
    Others,
    /// Not at all.
    Denied,
}

impl Access {
    /// Whether the kernel lets the user open the node for reading and writing.
    pub fn allowed(self) -> bool {
        self != Access::Denied
    }
}

/// How `user` reaches `node`: the first class of the node's mode that applies, as the kernel
/// picks it (owner, else group, else others; a class that applies but lacks the bits denies).
pub fn access(node: &DeviceNode, user: &HostUser) -> Access {
    let bits = |shift: u32| (node.mode >> shift) & READ_WRITE == READ_WRITE;
    let (class, shift) = if user.uid == 0 {
        return Access::Root;
    } else if node.uid == user.uid {
        (Access::Owner, 6)
    } else if user.gid == Some(node.gid) {
        (Access::PrimaryGroup, 3)
    } else if user.groups.contains(&node.gid) {
        (Access::SupplementaryGroup, 3)
    } else {
        (Access::Others, 0)
    };
    if bits(shift) {
        class
    } else {
        Access::Denied
    }
}

/// The host's `/etc/passwd` and `/etc/group`, read once under the request's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accounts {
    passwd: String,
    group: String,
}

/// Reads `path` whole, bounded.
fn read_accounts(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_ACCOUNTS_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The lines of an accounts file, split into their `:` fields; lines of fewer than four fields
/// are not accounts.
fn entries(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() > 3)
}

/// The entry of `text` whose field `key` (0 for the name, 2 for the id) is `value`.
fn account<'a>(text: &'a str, key: usize, value: &str) -> Option<Vec<&'a str>> {
    entries(text).find(|f| f[key] == value)
}

impl Accounts {
    /// Reads both files under `req`'s root. A missing file is empty (a host without the user
    /// in it); an unreadable `/etc/passwd` is an error, an unreadable `/etc/group` leaves users
    /// with their primary group only.
    pub fn read(req: &DoctorRequest) -> Result<Self, UserError> {
        let passwd = match read_accounts(&req.access(Path::new("/etc/passwd"))) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(UserError::Read {
                    path: "/etc/passwd".into(),
                    message: e.to_string(),
                })
            }
        };
        let group = read_accounts(&req.access(Path::new("/etc/group"))).unwrap_or_default();
        Ok(Self { passwd, group })
    }
}

impl HostUser {
    /// Resolves `spec` (a user name or a uid, then optionally `:GID`) with the host's accounts.
    /// A uid in no line of `/etc/passwd` (a subordinate id a user namespace maps to) is a user
    /// with no groups but the `GID` given: docker's `userns-remap` maps the container's root
    /// to the first subordinate uid and gid.
    pub fn resolve(accounts: &Accounts, spec: &str) -> Result<Self, UserError> {
        if let Some((user, gid)) = spec.split_once(':') {
            let gid = gid.parse::<u32>().map_err(|_| UserError::Gid {
                spec: spec.to_owned(),
            })?;
            let resolved = Self::resolve(accounts, user)?;
            return Ok(HostUser {
                shown: spec.to_owned(),
                gid: Some(gid),
                ..resolved
            });
        }
        let (uid, line) = match spec.parse::<u32>() {
            Ok(uid) => (uid, account(&accounts.passwd, 2, &uid.to_string())),
            Err(_) => {
                let f = account(&accounts.passwd, 0, spec).ok_or_else(|| UserError::Unknown {
                    name: spec.to_owned(),
                    passwd: "/etc/passwd".into(),
                })?;
                let uid = f[2].parse().map_err(|_| UserError::Read {
                    path: "/etc/passwd".into(),
                    message: format!("the uid of {spec} is not a number: {}", f[2]),
                })?;
                (uid, Some(f))
            }
        };
        let groups = match &line {
            Some(f) => entries(&accounts.group)
                .filter(|g| g[3].split(',').any(|m| m == f[0]))
                .filter_map(|g| g[2].parse().ok())
                .collect(),
            None => Vec::new(),
        };
        Ok(HostUser {
            shown: spec.to_owned(),
            uid,
            gid: line.and_then(|f| f[3].parse().ok()),
            groups,
        })
    }
}

/// A node as `owner:group mode`, with the group's name where `/etc/group` has it.
fn describe(node: &DeviceNode, group_names: &str) -> String {
    let group = account(group_names, 2, &node.gid.to_string())
        .map(|f| f[0].to_owned())
        .unwrap_or_else(|| node.gid.to_string());
    format!(
        "{} ({}:{} {:04o})",
        node.host_path.display(),
        node.uid,
        group,
        node.mode & 0o7777
    )
}

/// [`check`] for the user `spec` names (a name or a uid), resolved with the host's accounts; a
/// user that cannot be resolved is an error finding.
pub fn check_named(
    req: &DoctorRequest,
    spec: &str,
    found: &[(Profile, Inventory)],
    report: &mut DoctorReport,
) {
    let resolved = Accounts::read(req)
        .and_then(|accounts| HostUser::resolve(&accounts, spec).map(|user| (accounts, user)));
    match resolved {
        Ok((accounts, user)) => check(&accounts, &user, found, report),
        Err(e) => report.add(Section::Access, spec, Severity::Error, e.to_string(), None),
    }
}

/// Adds, for each profile with devices, whether `user` can open every node a container asking
/// for one of them gets, and why.
pub fn check(
    accounts: &Accounts,
    user: &HostUser,
    found: &[(Profile, Inventory)],
    report: &mut DoctorReport,
) {
    let who = format!("user {} (uid {})", user.shown, user.uid);
    for (profile, inventory) in found {
        let name = profile.name.as_str();
        let Some(device) = inventory.devices.first() else {
            continue;
        };
        let nodes: Vec<(&DeviceNode, Access)> = device
            .nodes
            .iter()
            .chain(&inventory.control_nodes)
            .map(|n| (n, access(n, user)))
            .collect();
        let described = |keep: &dyn Fn(Access) -> bool| {
            nodes
                .iter()
                .filter(|(_, a)| keep(*a))
                .map(|(n, _)| describe(n, &accounts.group))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if nodes.iter().any(|(_, a)| !a.allowed()) {
            report.add(
                Section::Access,
                name,
                Severity::Warning,
                format!(
                    "{name}: {who} cannot read and write {} without devinject's hook or shim",
                    described(&|a| !a.allowed())
                ),
                Some(
                    "give the node to a group the user is in with a udev rule (GROUP=, MODE=\"0660\") \
                     and add the user to it, or start the container through devinject's hook or \
                     shim, which give a user-namespaced container a copy of the node it owns"
                        .to_string(),
                ),
            );
        } else if nodes.iter().any(|(_, a)| *a == Access::SupplementaryGroup) {
            report.add(
                Section::Access,
                name,
                Severity::Info,
                format!(
                    "{name}: {who} can read and write {} only through a supplementary group, which \
                     a rootless engine drops unless told to keep it",
                    described(&|a| a == Access::SupplementaryGroup)
                ),
                Some(
                    "podman: run with --group-add keep-groups (crun); docker with userns-remap: the \
                     remapped root is in no host group, so give the node's group to its subordinate \
                     id or use devinject's hook or shim"
                        .to_string(),
                ),
            );
        } else {
            let mut how: Vec<&str> = nodes
                .iter()
                .map(|(_, a)| match a {
                    Access::Root => "as root",
                    Access::Owner => "as the owner",
                    Access::PrimaryGroup => "through the user's primary group",
                    _ => "as any user may",
                })
                .collect();
            how.dedup();
            report.add(
                Section::Access,
                name,
                Severity::Ok,
                format!(
                    "{name}: {who} can read and write {} ({})",
                    described(&|_| true),
                    how.join(", ")
                ),
                None,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use devinject_devices::DeviceKind;

    use super::*;

    fn node(uid: u32, gid: u32, mode: u32) -> DeviceNode {
        DeviceNode {
            host_path: PathBuf::from("/dev/kvm"),
            container_path: PathBuf::from("/dev/kvm"),
            kind: DeviceKind::Char,
            major: 10,
            minor: 232,
            mode,
            uid,
            gid,
        }
    }

    fn user(uid: u32, gid: Option<u32>, groups: &[u32]) -> HostUser {
        HostUser {
            shown: uid.to_string(),
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    /// The kernel's order: the owner class decides for the owner even when the group or others
    /// would allow more, and a class that applies without the bits denies.
    #[test]
    fn the_first_class_that_applies_decides() {
        let kvm = node(0, 108, 0o660);
        assert_eq!(
            access(&kvm, &user(1000, Some(1000), &[108])),
            Access::SupplementaryGroup
        );
        assert_eq!(
            access(&kvm, &user(1000, Some(108), &[])),
            Access::PrimaryGroup
        );
        assert_eq!(access(&kvm, &user(1000, Some(1000), &[])), Access::Denied);
        assert_eq!(access(&kvm, &user(0, Some(0), &[])), Access::Root);
        assert_eq!(
            access(&node(0, 0, 0o666), &user(1000, None, &[])),
            Access::Others
        );
        assert_eq!(
            access(&node(1000, 0, 0o066), &user(1000, None, &[])),
            Access::Denied
        );
        assert_eq!(
            access(&node(1000, 0, 0o600), &user(1000, None, &[])),
            Access::Owner
        );
        assert_eq!(
            access(&node(0, 5, 0o606), &user(1000, None, &[5])),
            Access::Denied
        );
        assert_eq!(
            access(&node(0, 0, 0o664), &user(1000, None, &[])),
            Access::Denied
        );
    }

    fn host(passwd: &str, group: &str) -> (tempfile::TempDir, DoctorRequest) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("etc")).unwrap();
        std::fs::write(t.path().join("etc/passwd"), passwd).unwrap();
        std::fs::write(t.path().join("etc/group"), group).unwrap();
        let req = DoctorRequest {
            root: t.path().to_owned(),
            ..DoctorRequest::default()
        };
        (t, req)
    }

    #[test]
    fn a_user_is_resolved_by_name_or_uid_with_its_groups() {
        let (_t, req) = host(
            "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
            "root:x:0:\nkvm:x:108:bob,alice\nalice:x:1000:\nvideo:x:44:bob\n",
        );
        let accounts = Accounts::read(&req).unwrap();
        let alice = HostUser::resolve(&accounts, "alice").unwrap();
        assert_eq!(
            (alice.uid, alice.gid, alice.groups),
            (1000, Some(1000), vec![108])
        );
        let by_uid = HostUser::resolve(&accounts, "1000").unwrap();
        assert_eq!((by_uid.uid, by_uid.groups), (1000, vec![108]));
        let remapped = HostUser::resolve(&accounts, "165536").unwrap();
        assert_eq!(
            (remapped.uid, remapped.gid, remapped.groups),
            (165536, None, vec![])
        );
        // docker's remapped root: the first subordinate uid and gid.
        let with_gid = HostUser::resolve(&accounts, "165536:165536").unwrap();
        assert_eq!(
            (with_gid.uid, with_gid.gid, with_gid.groups),
            (165536, Some(165536), vec![])
        );
        let alice_gid = HostUser::resolve(&accounts, "alice:44").unwrap();
        assert_eq!((alice_gid.gid, alice_gid.groups), (Some(44), vec![108]));
        assert!(HostUser::resolve(&accounts, "165536:video")
            .unwrap_err()
            .to_string()
            .contains("numeric gid"));
        assert_eq!(
            HostUser::resolve(&accounts, "carol")
                .unwrap_err()
                .to_string(),
            "no user carol in /etc/passwd: name the user as /etc/passwd does, or give its uid"
        );
    }
}
