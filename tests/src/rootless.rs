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

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bins::bin;
use crate::daemons::{behind, output_within, run_ok, Daemon, CLI_DEADLINE};

/// A container command reporting, for each path it is given, `<path> ok` or `<path> denied`
/// for a character device opened read-write, `<path> missing` for anything else (`<>` would
/// create a file). Run as `sh -c OPEN_EACH sh PATH...`.
pub const OPEN_EACH: &str = "for p in \"$@\"; do if [ ! -c \"$p\" ]; then echo \"$p missing\"; \
    elif (exec 3<>\"$p\") 2>/dev/null; then echo \"$p ok\"; else echo \"$p denied\"; fi; done";

/// One profile's `access for one user` finding from `devinject-ctl doctor --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rating {
    /// `ok`, `info`, `warning` or `error`.
    pub severity: String,
    /// What doctor said.
    pub message: String,
}

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

/// The id `getent DATABASE NAME` gives (`passwd` or `group`).
fn getent_id(database: &str, name: &str) -> Result<u32> {
    let mut cmd = Command::new("getent");
    cmd.args([database, name]);
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
        let mut useradd = Command::new("useradd");
        useradd
            .args(["--user-group", "--no-create-home", "--shell", "/bin/sh"])
            .arg("--home-dir")
            .arg(home)
            .args(["--groups", &group, &name]);
        if let Err(e) = run_ok(useradd) {
            let mut groupdel = Command::new("groupdel");
            groupdel.arg(&group);
            let _ = run_ok(groupdel);
            return Err(e.context("useradd"));
        }
        // From here on the user exists: an early return drops it, which deletes both.
        let mut user = CreatedUser {
            name: name.clone(),
            uid: u32::MAX,
            gid: u32::MAX,
            group: group.clone(),
            group_gid: u32::MAX,
            home: home.to_owned(),
        };
        user.uid = getent_id("passwd", &name)?;
        user.gid = getent_id("group", &name)?;
        user.group_gid = getent_id("group", &group)?;
        let subuid = std::fs::read_to_string("/etc/subuid").unwrap_or_default();
        if !subuid.lines().any(|l| l.starts_with(&format!("{name}:"))) {
            bail!("useradd gave {name} no subordinate uids (SUB_UID_COUNT in /etc/login.defs)");
        }
        std::fs::create_dir_all(home)?;
        std::os::unix::fs::chown(home, Some(user.uid), Some(user.gid))?;
        Ok(user)
    }

    /// The first of the user's subordinate uids and gids (`/etc/subuid`, `/etc/subgid`): what
    /// an engine remapping root to this user maps the container's root to.
    pub fn first_subordinate_ids(&self) -> Result<(u32, u32)> {
        let first = |file: &str| -> Result<u32> {
            let text = std::fs::read_to_string(file).with_context(|| format!("read {file}"))?;
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{}:", self.name)))
                .and_then(|rest| rest.split(':').next()?.parse().ok())
                .with_context(|| format!("no range of {} in {file}", self.name))
        };
        Ok((first("/etc/subuid")?, first("/etc/subgid")?))
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

    /// Kills every process of the user and waits (bounded) until none is left. Never root's:
    /// a user whose uid is not known yet (or is 0) has none of its own.
    pub fn kill_processes(&self) {
        if self.uid == 0 || self.uid == u32::MAX {
            return;
        }
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
        Ok(behind(&self.enter()?, program))
    }

    /// Copies the shipped `profiles` into `dir/profiles` and writes `dir/config.toml`, a host
    /// configuration naming them with a decision log of its own; returns both paths.
    pub fn host_config(&self, dir: &Path, profiles: &[&str]) -> Result<(PathBuf, PathBuf)> {
        let profiles_dir = dir.join("profiles");
        std::fs::create_dir_all(&profiles_dir)?;
        for profile in profiles {
            let name = format!("{profile}.toml");
            std::fs::copy(
                crate::sim::shipped_profiles().join(&name),
                profiles_dir.join(&name),
            )
            .with_context(|| format!("copy the shipped {name}"))?;
        }
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "profiles_dir = {profiles_dir:?}\ndecision_log_dir = {:?}\n",
                dir.join("log")
            ),
        )?;
        Ok((config, profiles_dir))
    }

    /// `devinject-ctl cdi generate` in the namespace (so the nodes are the ones bound here),
    /// writing to `output` the specs of the profiles in `profiles`, with `extra` arguments;
    /// returns its report.
    pub fn cdi_generate(&self, profiles: &Path, output: &Path, extra: &[&str]) -> Result<String> {
        let mut cmd = self.command(&bin("devinject-ctl"))?;
        cmd.args(["cdi", "generate", "--output"])
            .arg(output)
            .arg("--profiles-dir")
            .arg(profiles)
            .args(extra);
        run_ok(cmd).context("devinject-ctl cdi generate")
    }

    /// `devinject-ctl doctor --json --user USER` in the namespace, with the host configuration
    /// `config` and the specs in `cdi_dir`: each profile's access rating.
    pub fn access_ratings(
        &self,
        config: &Path,
        cdi_dir: &Path,
        user: &str,
    ) -> Result<BTreeMap<String, Rating>> {
        let mut cmd = self.command(&bin("devinject-ctl"))?;
        cmd.args(["doctor", "--json", "--refusals", "0", "--cdi-dir"])
            .arg(cdi_dir)
            .arg("--config")
            .arg(config)
            .args(["--user", user]);
        let out = output_within(cmd, CLI_DEADLINE)
            .context("devinject-ctl doctor did not finish in time")?
            .context("run devinject-ctl doctor")?;
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "doctor --json printed no JSON: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        Ok(report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["section"] == "access")
            .filter_map(|f| {
                Some((
                    f["subject"].as_str()?.to_owned(),
                    Rating {
                        severity: f["severity"].as_str()?.to_owned(),
                        message: f["message"].as_str().unwrap_or_default().to_owned(),
                    },
                ))
            })
            .collect())
    }
}
