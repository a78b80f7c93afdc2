//! A private podman for tests: its own storage (`vfs`), run and tmp dirs, file locks and
//! containers.conf in a temp dir, so neither the host's podman state nor its shared-memory
//! locks are touched. podman has no daemon; [`Podman`]'s `Drop` removes the containers and
//! unmounts what is left below its dir.
//!
//! One host path is still written: podman 4.3 keeps root's image blob-info cache (a digest
//! cache) in `/var/lib/containers/cache` whatever `--root` says.
//!
//! What podman needs on this kind of machine (Debian 12, podman 4.3.1, cgroup v1 hybrid, root
//! without `CAP_SYS_RESOURCE`):
//! - `runtime = "runc"`: crun 1.8.1 refuses hybrid cgroups ("cgroups in hybrid mode not
//!   supported, drop all controllers from cgroupv2"), `--cgroups=disabled` included;
//! - `default_ulimits = []`: podman's default for root sets RLIMIT_NOFILE to 1048576 and
//!   RLIMIT_NPROC higher than the hard limits here, and raising a hard limit needs
//!   `CAP_SYS_RESOURCE`, so runc's setrlimit fails with EPERM. `--ulimit host` does not help
//!   (podman 4.3 turns it into 1048576 as well); explicit lower limits would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};

use crate::daemons::{behind, output_within, run_ok, unmount_below, CLI_DEADLINE};
use crate::sim::{demo_probe_args, SimHost};
use crate::skip::{require_binary, require_root};

/// The image the tests run: a busybox rootfs (see [`Podman::import_busybox`]).
pub const IMAGE: &str = "localhost/devinject-busybox:test";

/// Whether podman tests can run here: root, podman with conmon and runc, busybox for the
/// image and gcc for the simulated host (see [`crate::skip`] for what a missing one does).
pub fn ready() -> bool {
    require_root()
        && require_binary("podman")
        && require_binary("conmon")
        && require_binary("runc")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
}

/// containers.conf for a private podman on this kind of machine (see the module docs).
pub const CONTAINERS_CONF: &str = r#"[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
lock_type = "file"
"#;

/// A private podman in a directory.
#[derive(Debug)]
pub struct Podman {
    dir: PathBuf,
    hooks_dir: PathBuf,
    /// What `podman` runs behind (e.g. `nsenter ... -- runuser -u USER -- env ...`).
    prefix: Vec<String>,
}

impl Podman {
    /// A podman keeping everything in `dir`, reading OCI hooks from `hooks_dir`.
    pub fn new(dir: &Path, hooks_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        std::fs::write(dir.join("containers.conf"), CONTAINERS_CONF)
            .context("write containers.conf")?;
        Ok(Self {
            dir: dir.to_owned(),
            hooks_dir: hooks_dir.to_owned(),
            prefix: Vec::new(),
        })
    }

    /// The same podman run behind `prefix`, which must end in `env` and its assignments
    /// (`nsenter ... -- runuser -u USER -- env -i HOME=...`, for a rootless podman): the
    /// configuration is passed as one more assignment.
    pub fn behind(mut self, prefix: Vec<String>) -> Self {
        self.prefix = prefix;
        self
    }

    /// `podman` with the private storage, run, tmp and hooks dirs and configuration.
    pub fn command(&self) -> Command {
        let mut cmd = if self.prefix.is_empty() {
            Command::new("podman")
        } else {
            let conf = format!(
                "CONTAINERS_CONF={}",
                self.dir.join("containers.conf").display()
            );
            let mut c = behind(&self.prefix, conf);
            c.arg("podman");
            c
        };
        cmd.env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.dir.join("run"))
            .arg("--tmpdir")
            .arg(self.dir.join("tmp"))
            .args(["--storage-driver", "vfs"])
            .arg("--hooks-dir")
            .arg(&self.hooks_dir)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `podman <args>` within the CLI deadline.
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = self.command();
        cmd.args(args);
        output_within(cmd, CLI_DEADLINE)
            .with_context(|| format!("podman {args:?} did not finish within {CLI_DEADLINE:?}"))?
            .context("run podman (apt-get install podman)")
    }

    /// Imports `rootfs` as the image `tag` (`podman import`, no registry).
    pub fn import(&self, rootfs: &Path, tag: &str) -> Result<()> {
        let tar = self.dir.join("rootfs.tar");
        let mut t = Command::new("tar");
        t.arg("-C").arg(rootfs).arg("-cf").arg(&tar).arg(".");
        run_ok(t).context("tar the rootfs")?;
        let out = self.run(&["import", tar.to_str().context("utf-8 path")?, tag])?;
        if !out.status.success() {
            bail!(
                "podman import failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Runs `command` in a throw-away [`IMAGE`] container without network, below the cgroup
    /// `parent`, with `flags` added to `podman run`.
    pub fn run_in_image(&self, parent: &str, flags: &[&str], command: &[String]) -> Result<Output> {
        let mut args = vec![
            "run",
            "--rm",
            "--network",
            "none",
            "--cgroup-parent",
            parent,
        ];
        args.extend(flags);
        args.push(IMAGE);
        args.extend(command.iter().map(String::as_str));
        self.run(&args)
    }

    /// Runs the demo probe (see [`Podman::run_in_image`]) with the simulated host's `accel2`
    /// bind-mounted in at `/dev/demo/accel2`, present but never granted.
    pub fn run_demo_probe(&self, parent: &str, host: &SimHost, flags: &[&str]) -> Result<Output> {
        let accel2 = host.dev_root.join("demo/accel2");
        let volume = format!(
            "{}:/dev/demo/accel2",
            accel2.to_str().context("utf-8 path")?
        );
        let mut all = vec!["--volume", &volume];
        all.extend(flags);
        self.run_in_image(parent, &all, &demo_probe_args())
    }

    /// Builds a busybox rootfs in `rootfs` and imports it as [`IMAGE`].
    pub fn import_busybox(&self, rootfs: &Path) -> Result<()> {
        crate::rootfs::busybox(rootfs).context("busybox rootfs")?;
        self.import(rootfs, IMAGE)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        match self.run(&["rm", "--all", "--force", "--time", "0"]) {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "warning: podman rm --all failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("warning: {e:#}"),
        }
        unmount_below(&self.dir);
    }
}
