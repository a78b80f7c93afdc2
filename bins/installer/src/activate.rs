//! Making a configuration change take effect: restart or reload the engine, only when its
//! configuration changed, in the way `--restart-mode` says.
//!
//! | engine | systemd | signal | none |
//! |---|---|---|---|
//! | docker | `systemctl reload docker` (its unit sends SIGHUP) | SIGHUP to the pid in `/run/docker.pid` | report |
//! | containerd | `systemctl restart containerd` | SIGTERM to the socket's owner, then wait until a new containerd answers on it | report |
//! | containerd (k3s, RKE2) | `systemctl restart k3s` / `k3s-agent` / `rke2-server` / `rke2-agent`, whichever is active | refused | report |
//! | CRI-O | `systemctl restart crio` | refused | report |
//!
//! containerd has no configuration reload; SIGTERM makes it exit cleanly (running containers
//! keep running under their shims) and its unit (`Restart=always` in containerd.service) starts
//! it again, which is what NVIDIA's installer relies on with SIGHUP, which containerd does not
//! handle either. CRI-O's unit restarts it only on failure, and k3s/RKE2 supervise their
//! containerd themselves, so signal mode refuses those rather than leave a node without its
//! runtime.
//!
//! systemctl runs in the host's mount, UTS, IPC and network namespaces (those of pid 1 in
//! `--proc-root`), as `nsenter -t 1 -m -u -i -n systemctl ...` would; that needs `hostPID: true`
//! and a privileged container.
//!
//! The privileged operations sit behind [`HostControl`], so the decisions are tested with a
//! recording fake.

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use devinject_engine_config::{Activation, Engine};
use nix::sched::CloneFlags;
use nix::sys::signal::Signal;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use nix::unistd::Pid;
use tracing::info;

use crate::detect::{Flavour, Target};
use crate::error::{InstallError, Result};
use crate::options::{Layout, RestartMode};

/// How long a restarted daemon may take to answer on its socket again.
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(120);

/// The privileged operations activation needs.
pub trait HostControl {
    /// Runs `systemctl <args>` in the host's namespaces; `Ok(true)` when it exits 0,
    /// `Ok(false)` when it fails (its stderr is logged), `Err` when it cannot run.
    fn systemctl(&mut self, args: &[&str]) -> Result<bool>;
    /// Sends `signal` to host pid `pid`.
    fn signal(&mut self, pid: i32, signal: Signal) -> Result<()>;
    /// The pid of the process serving the unix socket at `socket` (an access path), or `None`
    /// when nothing answers there.
    fn socket_owner(&mut self, socket: &Path) -> Option<i32>;
    /// Waits until a process other than `old` serves `socket`, or `timeout` passes.
    fn wait_for_new_owner(&mut self, socket: &Path, old: i32, timeout: Duration) -> Result<()>;
}

/// What activation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing needed.
    NotNeeded,
    /// Done; a description (`systemctl restart containerd`).
    Done(String),
    /// Needed but not done (`--restart-mode none`); the instruction for the user.
    Needed(String),
}

/// Activates `activation` for `target`.
pub fn activate(
    ctl: &mut dyn HostControl,
    layout: &Layout,
    target: &Target,
    activation: Activation,
    mode: RestartMode,
) -> Result<Outcome> {
    let (action, unit_action) = match activation {
        Activation::None | Activation::NextContainer => return Ok(Outcome::NotNeeded),
        Activation::Restart { .. } => ("restart", "restart"),
        Activation::Reload { .. } => ("reload", "reload"),
    };
    let fail = |message: String| InstallError::Activate {
        engine: target.engine,
        action,
        message,
    };
    match mode {
        RestartMode::None => {
            let unit = layout
                .restart_unit
                .clone()
                .or_else(|| target.units().first().map(|u| u.to_string()))
                .unwrap_or_else(|| target.engine.to_string());
            Ok(Outcome::Needed(format!(
                "{} needs a {action} for devinject to take effect: systemctl {unit_action} {unit}",
                target.describe()
            )))
        }
        RestartMode::Systemd => {
            let unit = pick_unit(ctl, layout, target).map_err(fail)?;
            if ctl.systemctl(&[unit_action, &unit])? {
                info!(unit = %unit, action = unit_action, "activated through systemd");
                Ok(Outcome::Done(format!("systemctl {unit_action} {unit}")))
            } else {
                Err(fail(format!(
                    "`systemctl {unit_action} {unit}` failed; see `journalctl -u {unit}` on the node"
                )))
            }
        }
        RestartMode::Signal => match (target.engine, target.flavour, activation) {
            (Engine::Docker, _, _) => {
                let (pidfile, pid) = docker_pid(layout).map_err(fail)?;
                ctl.signal(pid, Signal::SIGHUP)?;
                info!(pid, "sent SIGHUP to dockerd");
                Ok(Outcome::Done(format!(
                    "SIGHUP to dockerd (pid {pid} from {})",
                    pidfile.display()
                )))
            }
            (Engine::Containerd, Flavour::Plain, Activation::Restart { .. }) => {
                let socket = target
                    .socket
                    .as_deref()
                    .map(|s| layout.host.access(s))
                    .ok_or_else(|| fail("it has no socket".into()))?;
                let pid = ctl.socket_owner(&socket).ok_or_else(|| {
                    fail(format!(
                        "nothing answers on {}; start containerd (the new configuration is in place)",
                        socket.display()
                    ))
                })?;
                ctl.signal(pid, Signal::SIGTERM)?;
                info!(
                    pid,
                    "sent SIGTERM to containerd; waiting for it to come back"
                );
                ctl.wait_for_new_owner(&socket, pid, RESTART_TIMEOUT)
                    .map_err(|e| {
                        fail(format!(
                            "{e}; containerd (pid {pid}) was stopped and did not come back: \
                             start it with `systemctl start containerd`"
                        ))
                    })?;
                Ok(Outcome::Done(format!(
                    "SIGTERM to containerd (pid {pid}); its unit started it again"
                )))
            }
            _ => Err(fail(format!(
                "--restart-mode signal cannot {action} {}: it has no reload signal and its \
                 supervisor may not start it again; use --restart-mode systemd (or none and \
                 restart it yourself)",
                target.describe()
            ))),
        },
    }
}

/// The unit to restart: `--restart-unit`, the only candidate, or the first active one.
fn pick_unit(
    ctl: &mut dyn HostControl,
    layout: &Layout,
    target: &Target,
) -> std::result::Result<String, String> {
    if let Some(u) = &layout.restart_unit {
        return Ok(u.clone());
    }
    match target.units() {
        [] => Err(format!("{} has no daemon to restart", target.engine)),
        [one] => Ok(one.to_string()),
        several => {
            for u in several {
                if ctl
                    .systemctl(&["is-active", "--quiet", u])
                    .map_err(|e| e.to_string())?
                {
                    return Ok(u.to_string());
                }
            }
            Err(format!(
                "none of the units {} is active; pass --restart-unit",
                several.join(", ")
            ))
        }
    }
}

/// dockerd's pid file (access path) and pid.
fn docker_pid(layout: &Layout) -> std::result::Result<(PathBuf, i32), String> {
    let candidates: Vec<PathBuf> = match &layout.docker_pidfile {
        Some(p) => vec![p.clone()],
        None => vec![
            PathBuf::from("/run/docker.pid"),
            PathBuf::from("/var/run/docker.pid"),
        ],
    };
    for host in &candidates {
        let access = layout.host.access(host);
        let Ok(text) = std::fs::read_to_string(&access) else {
            continue;
        };
        let pid: i32 = text
            .trim()
            .parse()
            .map_err(|_| format!("{} holds {:?}, not a pid", host.display(), text.trim()))?;
        if pid <= 1 {
            return Err(format!("{} holds pid {pid}", host.display()));
        }
        return Ok((host.clone(), pid));
    }
    Err(format!(
        "no dockerd pid file at {}; is dockerd running? (or pass --docker-pidfile)",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The real host: systemctl in pid 1's namespaces, kill(2), SO_PEERCRED.
#[derive(Debug, Clone)]
pub struct System {
    /// The host's `/proc` as seen by this process.
    pub proc_root: PathBuf,
}

impl System {
    fn systemctl_path(&self) -> Result<PathBuf> {
        let host_root = self.proc_root.join("1/root");
        [
            "/usr/bin/systemctl",
            "/bin/systemctl",
            "/usr/sbin/systemctl",
        ]
        .iter()
        .map(PathBuf::from)
        .find(|p| host_root.join(p.strip_prefix("/").unwrap_or(p)).exists())
        .ok_or_else(|| {
            InstallError::InvalidRequest(format!(
                "no systemctl under {}: the pod needs hostPID: true (and the node systemd) \
                     for --restart-mode systemd",
                host_root.display()
            ))
        })
    }
}

impl System {
    /// Runs `program` (a path on the host) with `args` in the mount, UTS, IPC and network
    /// namespaces of pid 1 in `proc_root`, with an empty environment but a standard `PATH`.
    pub fn run_in_host(&self, program: &Path, args: &[&str]) -> Result<std::process::Output> {
        let mut namespaces = Vec::new();
        for (name, kind) in [
            ("ipc", CloneFlags::CLONE_NEWIPC),
            ("uts", CloneFlags::CLONE_NEWUTS),
            ("net", CloneFlags::CLONE_NEWNET),
            ("mnt", CloneFlags::CLONE_NEWNS),
        ] {
            let path = self.proc_root.join("1/ns").join(name);
            let fd = File::open(&path).map_err(|e| InstallError::io("open", &path, e))?;
            namespaces.push((fd.into(), kind));
        }
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdin(Stdio::null());
        crate::sys::enter_before_exec(&mut cmd, namespaces);
        cmd.output().map_err(|e| {
            InstallError::InvalidRequest(format!(
                "cannot run `{} {}` in the host's namespaces: {e}; the pod must be privileged \
                 with hostPID: true",
                program.display(),
                args.join(" ")
            ))
        })
    }
}

impl HostControl for System {
    fn systemctl(&mut self, args: &[&str]) -> Result<bool> {
        let program = self.systemctl_path()?;
        let out = self.run_in_host(&program, args)?;
        if !out.status.success() {
            tracing::warn!(
                command = %format!("systemctl {}", args.join(" ")),
                status = %out.status,
                stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                "systemctl failed"
            );
        }
        Ok(out.status.success())
    }

    fn signal(&mut self, pid: i32, signal: Signal) -> Result<()> {
        nix::sys::signal::kill(Pid::from_raw(pid), signal).map_err(|e| {
            InstallError::InvalidRequest(format!(
                "kill -{} {pid}: {e}; the pod needs hostPID: true",
                signal.as_str().trim_start_matches("SIG")
            ))
        })
    }

    fn socket_owner(&mut self, socket: &Path) -> Option<i32> {
        let stream = UnixStream::connect(socket).ok()?;
        let cred = getsockopt(&stream, PeerCredentials).ok()?;
        // A peer outside our pid namespace shows as pid 0.
        (cred.pid() > 0).then_some(cred.pid())
    }

    fn wait_for_new_owner(&mut self, socket: &Path, old: i32, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            if let Some(pid) = self.socket_owner(socket) {
                if pid != old {
                    return Ok(());
                }
            }
            if start.elapsed() > timeout {
                return Err(InstallError::InvalidRequest(format!(
                    "nothing new answered on {} within {}s",
                    socket.display(),
                    timeout.as_secs()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

/// A [`HostControl`] that records what it is asked and answers from a script; for tests.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    /// Every call, in order: `systemctl restart containerd`, `kill -HUP 42`, ...
    pub calls: Vec<String>,
    /// Units that `systemctl is-active` reports as active.
    pub active_units: Vec<String>,
    /// How many of the next systemctl calls (other than `is-active`) fail.
    pub systemctl_failures: usize,
    /// The pid [`HostControl::socket_owner`] reports.
    pub socket_pid: Option<i32>,
}

impl HostControl for Recorder {
    fn systemctl(&mut self, args: &[&str]) -> Result<bool> {
        self.calls.push(format!("systemctl {}", args.join(" ")));
        if args.first() == Some(&"is-active") {
            return Ok(args
                .last()
                .is_some_and(|u| self.active_units.iter().any(|a| a == u)));
        }
        if self.systemctl_failures > 0 {
            self.systemctl_failures -= 1;
            return Ok(false);
        }
        Ok(true)
    }

    fn signal(&mut self, pid: i32, signal: Signal) -> Result<()> {
        self.calls.push(format!("kill -{} {pid}", signal.as_str()));
        Ok(())
    }

    fn socket_owner(&mut self, socket: &Path) -> Option<i32> {
        self.calls.push(format!("owner {}", socket.display()));
        self.socket_pid
    }

    fn wait_for_new_owner(&mut self, socket: &Path, old: i32, _timeout: Duration) -> Result<()> {
        self.calls
            .push(format!("wait {} not {old}", socket.display()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESTART: Activation = Activation::Restart {
        service: "containerd",
    };
    const RELOAD: Activation = Activation::Reload { service: "docker" };

    fn layout(dir: &Path) -> Layout {
        Layout::new(dir)
    }

    #[test]
    fn nothing_happens_without_a_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Recorder::default();
        let t = Target::new(Engine::Containerd, Flavour::Plain, None);
        for mode in [RestartMode::Systemd, RestartMode::Signal, RestartMode::None] {
            let o = activate(&mut r, &layout(dir.path()), &t, Activation::None, mode)
                .expect("activate");
            assert_eq!(o, Outcome::NotNeeded);
        }
        assert!(r.calls.is_empty(), "{:?}", r.calls);
    }

    #[test]
    fn systemd_restarts_the_active_k3s_unit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Recorder {
            active_units: vec!["k3s-agent".into()],
            ..Recorder::default()
        };
        let t = Target::new(Engine::Containerd, Flavour::K3s, None);
        let o = activate(
            &mut r,
            &layout(dir.path()),
            &t,
            RESTART,
            RestartMode::Systemd,
        )
        .expect("activate");
        assert_eq!(o, Outcome::Done("systemctl restart k3s-agent".into()));
        assert_eq!(
            r.calls,
            vec![
                "systemctl is-active --quiet k3s",
                "systemctl is-active --quiet k3s-agent",
                "systemctl restart k3s-agent"
            ]
        );
    }

    #[test]
    fn systemd_failure_is_an_error_naming_the_unit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Recorder {
            systemctl_failures: 1,
            ..Recorder::default()
        };
        let t = Target::new(Engine::Crio, Flavour::Plain, None);
        let err = activate(
            &mut r,
            &layout(dir.path()),
            &t,
            RESTART,
            RestartMode::Systemd,
        )
        .expect_err("fails");
        assert!(err.to_string().contains("systemctl restart crio"), "{err}");
        let d = Target::new(Engine::Docker, Flavour::Plain, None);
        let mut ok = Recorder::default();
        activate(
            &mut ok,
            &layout(dir.path()),
            &d,
            RELOAD,
            RestartMode::Systemd,
        )
        .expect("reload");
        assert_eq!(ok.calls, vec!["systemctl reload docker"]);
    }

    #[test]
    fn signal_mode_hups_dockerd_and_restarts_containerd() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("var")).expect("mkdir");
        std::fs::create_dir_all(dir.path().join("run")).expect("mkdir");
        std::os::unix::fs::symlink("/run", dir.path().join("var/run")).expect("symlink");
        std::fs::write(dir.path().join("run/docker.pid"), "4242\n").expect("write");
        let mut r = Recorder {
            socket_pid: Some(77),
            ..Recorder::default()
        };
        let d = Target::new(Engine::Docker, Flavour::Plain, None);
        activate(&mut r, &layout(dir.path()), &d, RELOAD, RestartMode::Signal).expect("hup");
        assert_eq!(r.calls, vec!["kill -SIGHUP 4242"]);
        r.calls.clear();
        let c = Target::new(Engine::Containerd, Flavour::Plain, None);
        activate(
            &mut r,
            &layout(dir.path()),
            &c,
            RESTART,
            RestartMode::Signal,
        )
        .expect("term");
        let sock = dir.path().join("run/containerd/containerd.sock");
        assert_eq!(
            r.calls,
            vec![
                format!("owner {}", sock.display()),
                "kill -SIGTERM 77".to_string(),
                format!("wait {} not 77", sock.display()),
            ]
        );
        for refused in [
            Target::new(Engine::Crio, Flavour::Plain, None),
            Target::new(Engine::Containerd, Flavour::K3s, None),
        ] {
            let err = activate(
                &mut r,
                &layout(dir.path()),
                &refused,
                RESTART,
                RestartMode::Signal,
            )
            .expect_err("refused");
            assert!(err.to_string().contains("--restart-mode systemd"), "{err}");
        }
    }

    #[test]
    fn none_mode_only_reports() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut r = Recorder::default();
        let t = Target::new(Engine::Containerd, Flavour::Rke2, None);
        let o =
            activate(&mut r, &layout(dir.path()), &t, RESTART, RestartMode::None).expect("none");
        assert_eq!(
            o,
            Outcome::Needed(
                "containerd (rke2) needs a restart for devinject to take effect: systemctl restart rke2-server".into()
            )
        );
        assert!(r.calls.is_empty());
    }
}
