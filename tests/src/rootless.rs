//! What a rootless engine test needs that the machine does not have: an unprivileged user with
//! subordinate ids to run the engine as ([`CreatedUser`]), and host device nodes with the modes
//! a distribution's udev rules give them ([`HostNodes`]), without changing the machine's own.
//!
//! The nodes are made with the real kernel's device numbers (so opening one reaches the real
//! driver) in a temp dir, and bound over the host's paths in a private mount namespace: a
//! rootless engine binds a device's host node at the container path, whatever a CDI spec's
//! `hostPath` says, so the namespace's `/dev/kvm` must be the node under test. `/run` is a
//! fresh tmpfs there, so the CDI specs a test writes to `/run/cdi` (podman 4.3 reads no other
//! directory besides `/etc/cdi`) are seen by nothing else on the machine.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::daemons::{run_ok, Daemon};

/// A user made for one test (`useradd`, which gives it subordinate uid and gid ranges in
/// `/etc/subuid` and `/etc/subgid`), a member of a supplementary group made with it. On drop
/// every process of the user is killed (a rootless podman leaves its pause process behind) and
/// both are deleted with their subordinate ranges.
#[derive(Debug)]
pub struct CreatedUser {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary group (a group of its own).
    pub gid: u32,
    /// The supplementary group's name.
    pub group: String,
    /// The supplementary group's gid.
    pub group_gid: u32,
    home: PathBuf,
}

/// The id `id -u NAME` or `getent group NAME` gives.
fn id_of(cmd: Command) -> Result<u32> {
    let out = run_ok(cmd)?;
    let field = out.trim().split(':').nth(2).unwrap_or(out.trim());
    field.parse().with_context(|| format!("not an id: {out:?}"))
}

impl CreatedUser {
    /// Creates the user `di<tag><pid>` with its home in `home` (which it owns), and the group
    /// `di<tag><pid>g` it is a member of.
    pub fn create(tag: &str, home: &Path) -> Result<Self> {
        let name = format!("di{tag}{}", std::process::id());
        let group = format!("{name}g");
        let mut groupadd = Command::new("groupadd");
        groupadd.arg(&group);
        run_ok(groupadd).context("groupadd (apt-get install passwd)")?;
        let mut user = CreatedUser {
            name: name.clone(),
            uid: 0,
            gid: 0,
            group: group.clone(),
            group_gid: 0,
            home: home.to_owned(),
        };
        let mut useradd = Command::new("useradd");
        useradd
            .args(["--user-group", "--no-create-home", "--shell", "/bin/sh"])
            .arg("--home-dir")
            .arg(home)
            .args(["--groups", &group, &name]);
        run_ok(useradd).context("useradd")?;
        let mut id = Command::new("getent");
        id.args(["passwd", &name]);
        user.uid = id_of(id)?;
        let mut id = Command::new("getent");
        id.args(["group", &name]);
        user.gid = id_of(id)?;
        let mut id = Command::new("getent");
        id.args(["group", &group]);
        user.group_gid = id_of(id)?;
        let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
        if !subuid.lines().any(|l| l.starts_with(&format!("{name}:"))) {
            bail!("useradd gave {name} no subordinate uids (SUB_UID_COUNT in /etc/login.defs)");
        }
        std::fs::create_dir_all(home)?;
        std::os::unix::fs::chown(home, Some(user.uid), Some(user.gid))?;
        Ok(user)
    }

    /// The pids of the user's processes.
    fn processes(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|ids| ids.split_whitespace().next()?.parse::<u32>().ok())
                        == Some(self.uid)
                })
            })
            .collect()
    }

    /// Kills every process of the user and waits (bounded) until none is left.
    pub fn kill_processes(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = self.processes();
            if left.is_empty() || Instant::now() > deadline {
                if !left.is_empty() {
                    eprintln!("warning: processes of {} left: {left:?}", self.name);
                }
                return;
            }
            for pid in left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `runuser` as this user with a bare environment but for `env` (`HOME` is the user's).
    pub fn command_prefix(&self, env: &[(&str, &Path)]) -> Vec<String> {
        let mut v: Vec<String> = ["runuser", "-u", &self.name, "--", "env", "-i"]
            .map(String::from)
            .into();
        v.push("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
        v.push(format!("HOME={}", self.home.display()));
        v.extend(env.iter().map(|(k, p)| format!("{k}={}", p.display())));
        v
    }
}

impl Drop for CreatedUser {
    fn drop(&mut self) {
        self.kill_processes();
        let mut userdel = Command::new("userdel");
        userdel.arg(&self.name);
        if let Err(e) = run_ok(userdel) {
            eprintln!("warning: userdel {}: {e:#}", self.name);
        }
        let mut groupdel = Command::new("groupdel");
        groupdel.arg(&self.group);
        if let Err(e) = run_ok(groupdel) {
            eprintln!("warning: groupdel {}: {e:#}", self.group);
        }
    }
}

/// A node to make: the real kernel's device, at a host path, with an owner, group and mode.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The host path it is bound over in the namespace (`/dev/kvm`).
    pub host_path: &'static str,
    /// Character device major and minor.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Permission bits.
    pub mode: u32,
}

/// A private mount namespace where the given nodes are at their host paths and `/run` is
/// empty; commands run in it through `nsenter`. Dropping it ends the holding process; the
/// namespace goes when its last process does.
#[derive(Debug)]
pub struct HostNodes {
    holder: Daemon,
    /// Where the nodes were made.
    pub dir: PathBuf,
}

impl HostNodes {
    /// Makes `nodes` in `dir` (which must be one every user may walk) and starts the namespace.
    pub fn start(dir: &Path, nodes: &[NodeSpec]) -> Result<Self> {
        use nix::sys::stat::{makedev, mknod, Mode, SFlag};
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        let mut script = String::from("set -e; mount -t tmpfs -o mode=0755 devinject-run /run; ");
        for (i, n) in nodes.iter().enumerate() {
            let made = dir.join(format!("node{i}"));
            mknod(
                &made,
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(n.mode),
                makedev(n.major, n.minor),
            )
            .with_context(|| format!("mknod {}", made.display()))?;
            std::os::unix::fs::chown(&made, Some(n.uid), Some(n.gid))?;
            std::fs::set_permissions(&made, std::fs::Permissions::from_mode(n.mode))?;
            script.push_str(&format!(
                "mount --bind {} {}; ",
                made.display(),
                n.host_path
            ));
        }
        script.push_str("mkdir /run/cdi; exec sleep infinity");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
        let mut holder = Daemon::start("host nodes namespace", cmd, &dir.join("ns.log"))?;
        let pid = holder.pid().context("holder pid")?;
        holder.wait_ready("the namespace's mounts", || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        })?;
        Ok(Self {
            holder,
            dir: dir.to_owned(),
        })
    }

    /// `nsenter` into the namespace, as a command prefix.
    pub fn enter(&self) -> Result<Vec<String>> {
        let pid = self.holder.pid().context("the namespace is not up")?;
        Ok(["nsenter", "-t", &pid.to_string(), "-m", "--"]
            .map(String::from)
            .into())
    }

    /// `program` with `args` run in the namespace.
    pub fn command(&self, program: &Path) -> Result<Command> {
        let prefix = self.enter()?;
        let mut cmd = Command::new(&prefix[0]);
        cmd.args(&prefix[1..]).arg(program);
        Ok(cmd)
    }
}
