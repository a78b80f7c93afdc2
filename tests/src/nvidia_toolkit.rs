//! NVIDIA's Container Toolkit 1.20.2, the reference the hook and the shim are compared against on
//! the vendor-stack node ([`crate::vendor`]): `nvidia-container-runtime` in `cdi` mode in front of
//! runc, with the spec `nvidia-ctk cdi generate --mode=management` writes for the node's dev root
//! and the unpacked 535 driver root, and `nvidia-cdi-hook` for the hooks that spec carries.
//! `scripts/nvidia-toolkit-build.sh` builds the binaries and prints their directory
//! (`DEVINJECT_NVIDIA_TOOLKIT`).
//!
//! NVIDIA's runtime injects only on `create` (`run` is passed through untouched), so containers
//! here go through [`cycle`]: create, start, wait, delete, each through the runtime under test,
//! as containerd drives a runtime.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::vendor::VendorHost;

/// The variable naming the directory `scripts/nvidia-toolkit-build.sh` prints.
pub const TOOLKIT_ENV: &str = "DEVINJECT_NVIDIA_TOOLKIT";

/// The built toolkit: a directory with `nvidia-container-runtime`, `nvidia-ctk` and
/// `nvidia-cdi-hook`.
#[derive(Debug, Clone)]
pub struct Toolkit {
    /// The bin directory.
    pub bin: PathBuf,
}

/// The toolkit of `DEVINJECT_NVIDIA_TOOLKIT`, or `None` after the skip rule said why.
pub fn toolkit() -> Option<Toolkit> {
    let bin = std::env::var_os(TOOLKIT_ENV).map(PathBuf::from);
    let usable = bin.as_ref().is_some_and(|b| {
        ["nvidia-container-runtime", "nvidia-ctk", "nvidia-cdi-hook"]
            .iter()
            .all(|n| b.join(n).is_file())
    });
    if !devinject_testkit::require(
        usable,
        "needs NVIDIA's Container Toolkit (DEVINJECT_NVIDIA_TOOLKIT=$(scripts/nvidia-toolkit-build.sh))",
    ) {
        return None;
    }
    bin.map(|bin| Toolkit { bin })
}

impl Toolkit {
    /// `nvidia-container-runtime`.
    pub fn runtime(&self) -> PathBuf {
        self.bin.join("nvidia-container-runtime")
    }

    /// `nvidia-ctk`.
    pub fn ctk(&self) -> PathBuf {
        self.bin.join("nvidia-ctk")
    }

    /// `nvidia-cdi-hook`.
    pub fn cdi_hook(&self) -> PathBuf {
        self.bin.join("nvidia-cdi-hook")
    }

    /// Writes NVIDIA's management-mode spec for `host` (its dev root's nodes, its driver root)
    /// as `spec_dir/nvidia.json`: one device, `nvidia.com/gpu=all`. This mode needs no NVML, so
    /// it works on a node without a kernel driver.
    pub fn generate_spec(&self, host: &VendorHost, spec_dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(spec_dir)?;
        let spec = spec_dir.join("nvidia.json");
        // --dev-root names the directory above `dev/`.
        let dev_root = host
            .dev_root
            .parent()
            .context("the dev root's parent directory")?;
        let out = Command::new(self.ctk())
            .args(["cdi", "generate", "--mode=management"])
            .arg(format!("--driver-root={}", host.driver_root.display()))
            .arg(format!("--dev-root={}", dev_root.display()))
            .arg(format!(
                "--nvidia-cdi-hook-path={}",
                self.cdi_hook().display()
            ))
            .arg(format!("--output={}", spec.display()))
            .output()
            .context("run nvidia-ctk cdi generate")?;
        if !out.status.success() {
            bail!(
                "nvidia-ctk cdi generate: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(spec)
    }

    /// Writes the runtime's `config.toml` into `dir`: `cdi` mode, specs from `spec_dir`,
    /// handing over to `runc`, logging nowhere but the runtime's `--log`; returns its path.
    pub fn write_config(&self, dir: &Path, spec_dir: &Path, runc: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let config = dir.join("nvidia-container-runtime.toml");
        let text = format!(
            "[nvidia-container-runtime]\nlog-level = \"info\"\nmode = \"cdi\"\nruntimes = [{runc:?}]\n\n\
             [nvidia-container-runtime.modes.cdi]\nspec-dirs = [{spec_dir:?}]\n\
             default-kind = \"nvidia.com/gpu\"\nannotation-prefixes = [\"cdi.k8s.io/\"]\n\n\
             [nvidia-ctk]\npath = {ctk:?}\n",
            ctk = self.ctk(),
        );
        std::fs::write(&config, text).with_context(|| format!("write {}", config.display()))?;
        Ok(config)
    }

    /// The runtime command line with `config` (the runtime reads it from
    /// `NVIDIA_CTK_CONFIG_FILE_PATH`, through `env`): pass it to [`cycle`].
    pub fn runtime_command(&self, config: &Path) -> Vec<String> {
        vec![
            "/usr/bin/env".into(),
            format!("NVIDIA_CTK_CONFIG_FILE_PATH={}", config.display()),
            self.runtime().to_string_lossy().into_owned(),
        ]
    }
}

/// One container's way through a runtime: what it and the runtime wrote, and how long it took.
#[derive(Debug)]
pub struct Cycle {
    /// `create` failed: its output (the container never ran).
    pub failed: Option<Output>,
    /// The container's stdout and stderr, with the runtime's for `create` and `start`.
    pub text: String,
    /// From spawning `create` until `start` returned: the container's process is running.
    pub started: Duration,
    /// From spawning `create` until `delete` returned.
    pub total: Duration,
}

/// Runs the bundle in `bundle_dir` as container `id` through `runtime` (a command and its
/// leading arguments, taking runc's arguments), with runc's state in `state`: `create`, `start`,
/// waits for the container's process to end, `delete`. The wait: the container's stdout, a pipe
/// whose only writer the container holds, reaches end of file, then its init process (named by
/// `--pid-file`) is reaped: this process makes itself a child subreaper, so the init, orphaned
/// when `create` returns, becomes its child, as it becomes containerd's shim's. End of file alone
/// comes a moment before the process is gone, and `delete` then refuses a container still
/// running. `limit` bounds the wait: past it the container is killed and this fails.
pub fn cycle(
    runtime: &[String],
    state: &Path,
    bundle_dir: &Path,
    id: &str,
    limit: Duration,
) -> Result<Cycle> {
    let run = |args: &[&str]| -> Command {
        let mut c = Command::new(&runtime[0]);
        c.args(&runtime[1..]).arg("--root").arg(state).args(args);
        c
    };
    nix::sys::prctl::set_child_subreaper(true).context("become a child subreaper")?;
    let pid_file = state.join(format!("{id}.pid"));
    let (mut reader, writer) = std::io::pipe().context("pipe")?;
    let begin = Instant::now();
    let create = run(&["create", "--bundle"])
        .arg(bundle_dir)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().context("dup the pipe")?)
        .stderr(writer)
        .status()
        .context("spawn the runtime's create")?;
    if !create.success() {
        let mut text = String::new();
        reader.read_to_string(&mut text).ok();
        let _ = run(&["delete", "--force", id]).output();
        return Ok(Cycle {
            failed: Some(Output {
                status: create,
                stdout: Vec::new(),
                stderr: text.clone().into_bytes(),
            }),
            text,
            started: begin.elapsed(),
            total: begin.elapsed(),
        });
    }
    let start = run(&["start", id]).output().context("runtime start")?;
    let started = begin.elapsed();
    if !start.status.success() {
        let _ = run(&["delete", "--force", id]).output();
        bail!(
            "start {id}: {}",
            String::from_utf8_lossy(&start.stderr).trim()
        );
    }
    // The wait: read to end of file on a thread, bounded by `limit`.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let r = reader.read_to_end(&mut out).map(|_| out);
        let _ = tx.send(r);
    });
    let init = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .map(nix::unistd::Pid::from_raw);
    let out = match rx.recv_timeout(limit) {
        Ok(r) => r.context("read the container's output")?,
        Err(_) => {
            let _ = run(&["delete", "--force", id]).output();
            if let Some(pid) = init {
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            bail!("container {id} still running after {limit:?}");
        }
    };
    if let Some(pid) = init {
        nix::sys::wait::waitpid(pid, None)
            .with_context(|| format!("wait for container {id}'s init ({pid})"))?;
    }
    let delete = run(&["delete", id]).output().context("runtime delete")?;
    let total = begin.elapsed();
    if !delete.status.success() {
        let _ = run(&["delete", "--force", id]).output();
        bail!(
            "delete {id}: {}",
            String::from_utf8_lossy(&delete.stderr).trim()
        );
    }
    let mut text = String::from_utf8_lossy(&out).into_owned();
    text.push_str(&String::from_utf8_lossy(&start.stdout));
    text.push_str(&String::from_utf8_lossy(&start.stderr));
    Ok(Cycle {
        failed: None,
        text,
        started,
        total,
    })
}

/// The unpacked 535 packages as an installed Debian system has them: Debian ships `nvidia-smi`
/// and `nvidia-debugdump` in `/usr/lib/nvidia/current` and its maintainer scripts link
/// `/usr/bin/nvidia-smi` and `/usr/bin/nvidia-debugdump` to them with `update-alternatives`,
/// which `dpkg-deb -x` does not run. NVIDIA's generator finds binaries on `PATH`'s directories
/// only, so without the links its spec would carry no `nvidia-smi`. An overlay of the unpacked
/// root with those links (relative, as the alternatives resolve) at `dir/nvidia`, unmounted on
/// drop; `dir` stands in for the stacks directory ([`crate::vendor::nvidia_host`]).
#[derive(Debug)]
pub struct InstalledStacks {
    /// The stand-in stacks directory: its `nvidia` is the installed driver root.
    pub dir: PathBuf,
    merged: PathBuf,
}

/// The links Debian's alternatives make in `/usr/bin` (link, target relative to `/usr/bin`).
pub const ALTERNATIVES: [(&str, &str); 2] = [
    ("nvidia-smi", "../lib/nvidia/current/nvidia-smi"),
    ("nvidia-debugdump", "../lib/nvidia/current/nvidia-debugdump"),
];

impl InstalledStacks {
    /// Mounts the overlay of `stacks/nvidia` under `dir`.
    pub fn mount(dir: &Path, stacks: &Path) -> Result<Self> {
        let (upper, work, merged) = (dir.join("upper"), dir.join("work"), dir.join("nvidia"));
        for d in [&upper.join("usr/bin"), &work, &merged] {
            std::fs::create_dir_all(d)?;
        }
        for (link, target) in ALTERNATIVES {
            std::os::unix::fs::symlink(target, upper.join("usr/bin").join(link))?;
        }
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            stacks.join("nvidia").display(),
            upper.display(),
            work.display()
        );
        nix::mount::mount(
            Some("overlay"),
            &merged,
            Some("overlay"),
            nix::mount::MsFlags::empty(),
            Some(data.as_str()),
        )
        .with_context(|| format!("mount the installed driver root at {}", merged.display()))?;
        Ok(Self {
            dir: dir.to_owned(),
            merged,
        })
    }
}

impl Drop for InstalledStacks {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.merged, nix::mount::MntFlags::MNT_DETACH);
    }
}
