//! A private docker engine for integration tests: a [`Containerd`] and a [`Dockerd`] from
//! [`crate::daemons`] in one short temp dir (`/tmp/dkXXXXXX`), never a host daemon or a default
//! socket.
//!
//! # Lifetime: one engine per test, torn down in `Drop`
//! Each test starts an [`Engine`] and drops it when it ends. A failing test unwinds, so `Drop`
//! runs then too: it removes the containers, stops dockerd then containerd (see
//! [`crate::daemons`] for what that does), lazily unmounts everything left under the temp dir,
//! and removes it. Measured here, containerd is up in ~0.05 s and dockerd answers `docker info`
//! ~1 s after it starts, so a shared engine would save little and would need a `static`, which
//! Rust never drops: its daemons would outlive the test binary. Independent engines also let the
//! tests run in parallel. Containers use docker's default cgroup parent `/docker`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::daemons::{
    output_within, short_tempdir, unmount_below, Containerd, Dockerd, CLI_DEADLINE,
};
use crate::runc::describe;
use crate::runtimes::Release;

/// The tag under which [`Engine::import_busybox`] imports the test image.
pub const IMAGE: &str = "devinject-busybox:test";

/// An entry of daemon.json's `runtimes`: docker runs `path runtimeArgs... <runc args>`. dockerd
/// 20.10 does that with a wrapper script under `<data-root>/runtimes/` that expands the arguments
/// unquoted, so neither the path nor the arguments may contain spaces.
#[derive(Debug, Clone)]
pub struct RuntimeEntry {
    /// The name given to `docker run --runtime=<name>`.
    pub name: String,
    /// The runtime binary.
    pub path: PathBuf,
    /// Arguments put before runc's own.
    pub args: Vec<String>,
}

impl RuntimeEntry {
    /// A runtime named `name` running `path` with `args` first.
    pub fn new<S: AsRef<str>>(name: &str, path: &Path, args: &[S]) -> Self {
        Self {
            name: name.to_owned(),
            path: path.to_owned(),
            args: args.iter().map(|a| a.as_ref().to_owned()).collect(),
        }
    }
}

/// Which containerd and docker an [`Engine`] runs (`None`: the machine's), and what daemon.json
/// gets beyond the engine's own settings and `runtimes`.
#[derive(Debug, Clone, Default)]
pub struct EngineRelease {
    /// A fetched containerd ([`crate::runtimes::containerd`]).
    pub containerd: Option<Release>,
    /// A fetched docker ([`crate::runtimes::docker`]).
    pub docker: Option<Release>,
    /// More daemon.json settings (e.g. `cdi-spec-dirs`).
    pub daemon_json: serde_json::Map<String, serde_json::Value>,
    /// What containerd and dockerd run behind (e.g. `nsenter -t PID -m --`: the shims and runc
    /// then see that mount namespace, and the image mounts dockerd makes are in it); empty:
    /// directly.
    pub prefix: Vec<String>,
}

/// docker 28 and the containerd 2 it is packaged with, when fetched (`scripts/runtimes-fetch.sh`)
/// and root, runc, tar and busybox (for the image) are here; `None` after saying what is
/// missing ([`crate::skip`]).
pub fn release_28() -> Option<EngineRelease> {
    use crate::skip::{require, require_binary, require_root};
    let docker = crate::runtimes::docker("28");
    let containerd = crate::runtimes::containerd("2");
    let ok = require_root()
        && require_binary("runc")
        && require_binary("tar")
        && require_binary("/bin/busybox")
        && require(
            docker.is_some() && containerd.is_some(),
            "needs docker 28 and containerd 2 in target/runtimes (scripts/runtimes-fetch.sh)",
        );
    ok.then(|| EngineRelease {
        containerd,
        docker,
        ..EngineRelease::default()
    })
}

/// The devinject shim's runtime name in daemon.json ([`shim_runtime`]).
pub const SHIM: &str = "devinject";
/// The hook-only wrapper's runtime name in daemon.json ([`hook_only_runtime`]).
pub const HOOK_ONLY: &str = "devinject-hook-only";
/// The name under which [`runc_runtime`] registers the runc under test.
pub const RUNC_UNDER_TEST: &str = "runc-under-test";

/// The runc behind the devinject runtimes: `DEVINJECT_RUNC` or Debian's (docker's own `runc`
/// runtime stays docker's).
pub fn runc_path() -> PathBuf {
    crate::runc::runc_binary().expect("runc on PATH")
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// The shim `devinject-runtime` registered as [`SHIM`], with the host config `config` and the
/// runc under test by path.
pub fn shim_runtime(config: &Path) -> RuntimeEntry {
    RuntimeEntry::new(
        SHIM,
        &crate::bins::bin("devinject-runtime"),
        &[
            "--config".to_owned(),
            path_str(config),
            "--runtime".to_owned(),
            path_str(&runc_path()),
        ],
    )
}

/// The hook-only wrapper (`devinject-hook` added as a `createRuntime` hook in front of the runc
/// under test, the way legacy runtime wrappers do it) registered as [`HOOK_ONLY`].
pub fn hook_only_runtime(config: &Path) -> RuntimeEntry {
    RuntimeEntry::new(
        HOOK_ONLY,
        &crate::bins::bin("devinject-hook-only-runtime"),
        &[
            "--hook".to_owned(),
            path_str(&crate::bins::bin("devinject-hook")),
            "--config".to_owned(),
            path_str(config),
            "--runtime".to_owned(),
            path_str(&runc_path()),
        ],
    )
}

/// The runc under test with nothing of devinject in front, registered as [`RUNC_UNDER_TEST`]
/// (docker's own `runc` is whatever runc is on PATH).
pub fn runc_runtime() -> RuntimeEntry {
    RuntimeEntry::new(RUNC_UNDER_TEST, &runc_path(), &[] as &[&str])
}

/// A running private containerd + dockerd pair.
#[derive(Debug)]
pub struct Engine {
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
    containerd: Option<Containerd>,
    dockerd: Option<Dockerd>,
}

impl Engine {
    /// Starts containerd and dockerd with `runtimes` registered, and waits until dockerd answers.
    pub fn start(runtimes: &[RuntimeEntry]) -> Result<Self> {
        Self::start_with(runtimes, &[])
    }

    /// [`Engine::start`] with more dockerd arguments (e.g. `--storage-driver=vfs`).
    pub fn start_with(runtimes: &[RuntimeEntry], dockerd_args: &[&str]) -> Result<Self> {
        Self::start_release(runtimes, dockerd_args, &EngineRelease::default())
    }

    /// [`Engine::start_with`] on the containerd and docker of `release`, with its daemon.json
    /// settings.
    pub fn start_release(
        runtimes: &[RuntimeEntry],
        dockerd_args: &[&str],
        release: &EngineRelease,
    ) -> Result<Self> {
        let dir = short_tempdir("dk")?;
        let root = dir.path().to_owned();
        // From here on, an early return drops the half-started engine, which tears it down.
        let mut engine = Self {
            dir: Some(dir),
            root,
            containerd: None,
            dockerd: None,
        };
        let ctd_dir = engine.root.join("ctd");
        std::fs::create_dir_all(&ctd_dir).context("create the containerd dir")?;
        let config = ctd_dir.join("config.toml");
        // The CRI plugin is not needed by dockerd and slows the start.
        let text = format!(
            "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n{}",
            Containerd::private_settings(&ctd_dir)
        );
        std::fs::write(&config, text).context("write containerd's config")?;
        let containerd_bin = release.containerd.as_ref().map(|r| r.bin.as_path());
        let containerd = engine.containerd.insert(Containerd::start_release_via(
            &ctd_dir,
            &config,
            &release.prefix,
            containerd_bin,
        )?);

        let mut rts = serde_json::Map::new();
        for rt in runtimes {
            rts.insert(
                rt.name.clone(),
                json!({"path": rt.path, "runtimeArgs": rt.args}),
            );
        }
        let mut daemon_json = Dockerd::base_config(&engine.root);
        daemon_json["runtimes"] = rts.into();
        for (key, value) in &release.daemon_json {
            daemon_json[key] = value.clone();
        }
        let daemon_config = engine.root.join("daemon.json");
        std::fs::write(&daemon_config, serde_json::to_vec_pretty(&daemon_json)?)
            .context("write daemon.json")?;
        let docker_bin = release.docker.as_ref().map(|r| r.bin.as_path());
        let dockerd = Dockerd::start_release(
            &engine.root,
            containerd,
            &daemon_config,
            dockerd_args,
            docker_bin,
            &release.prefix,
        )?;
        engine.dockerd = Some(dockerd);
        Ok(engine)
    }

    fn dockerd(&self) -> &Dockerd {
        self.dockerd
            .as_ref()
            .expect("dockerd runs while the engine lives")
    }

    /// The engine's temp dir.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// containerd's gRPC socket.
    pub fn containerd_socket(&self) -> PathBuf {
        Containerd::socket_in(&self.root.join("ctd"))
    }

    /// dockerd's API socket.
    pub fn docker_socket(&self) -> PathBuf {
        self.dockerd().socket()
    }

    /// dockerd's `--exec-root`.
    pub fn exec_root(&self) -> PathBuf {
        self.dockerd().exec_root()
    }

    /// dockerd's `--data-root`.
    pub fn data_root(&self) -> PathBuf {
        self.dockerd().data_root()
    }

    /// The `runc --root` holding the state of the running container `id`. dockerd passes the
    /// containerd shim a root under its exec root (`<exec-root>/runtime-runc` for every runtime
    /// in dockerd 20.10, whatever the runtime's name) and the shim adds the namespace, `moby`;
    /// this looks for the container's `state.json` rather than trusting one layout.
    pub fn runc_root(&self, id: &str) -> Result<PathBuf> {
        let exec = self.exec_root();
        let entries =
            std::fs::read_dir(&exec).with_context(|| format!("list {}", exec.display()))?;
        for entry in entries.flatten() {
            let root = entry.path().join("moby");
            if root.join(id).join("state.json").is_file() {
                return Ok(root);
            }
        }
        bail!("no runc state for {id} under {}/*/moby", exec.display())
    }

    /// The OCI bundle's `config.json` of the created container `id`, as the runtime left it.
    pub fn bundle_config(&self, id: &str) -> PathBuf {
        self.root
            .join("ctd/state/io.containerd.runtime.v2.task/moby")
            .join(id)
            .join("config.json")
    }

    /// The docker CLI talking to this engine only (its own `-H` and `DOCKER_CONFIG`).
    pub fn docker_command(&self) -> Command {
        self.dockerd().command()
    }

    /// Runs `docker <args>` against this engine, bounded by a deadline (a wedged daemon fails
    /// the test instead of hanging it).
    pub fn docker(&self, args: &[&str]) -> Output {
        let mut cmd = self.docker_command();
        cmd.args(args);
        match output_within(cmd, CLI_DEADLINE) {
            Some(Ok(out)) => out,
            Some(Err(e)) => panic!("cannot run docker {args:?}: {e} (apt-get install docker.io)"),
            None => panic!(
                "docker {args:?} did not finish within {CLI_DEADLINE:?}\n{}",
                self.log_tails()
            ),
        }
    }

    /// Runs `docker <args>`, requiring success; returns stdout, trimmed.
    pub fn docker_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.docker(args);
        if !out.status.success() {
            bail!("docker {args:?} failed: {}", describe(&out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Imports a busybox rootfs (see [`crate::rootfs::busybox`], with `/probe.sh`) as [`IMAGE`].
    pub fn import_busybox(&self) -> Result<()> {
        let rootfs = self.root.join("image-rootfs");
        crate::rootfs::busybox(&rootfs)?;
        self.import(&rootfs, IMAGE)
    }

    /// Imports the directory `rootfs` as image `tag`: `tar -C rootfs -c . | docker import - tag`,
    /// no registry involved. Device nodes, FIFOs and links are kept as they are (tar skips
    /// sockets).
    pub fn import(&self, rootfs: &Path, tag: &str) -> Result<()> {
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(rootfs)
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("run tar")?;
        let tar_out = tar.stdout.take().context("tar stdout")?;
        let mut import = self.docker_command();
        import.args(["import", "-", tag]).stdin(tar_out);
        let out = output_within(import, CLI_DEADLINE)
            .context("docker import did not finish in time")?
            .context("run docker import")?;
        let tar_status = tar.wait().context("wait for tar")?;
        if !tar_status.success() || !out.status.success() {
            bail!(
                "import of {tag} failed (tar {tar_status}): {}",
                describe(&out)
            );
        }
        Ok(())
    }

    /// The directory holding the root filesystem of the created container `id` on the `vfs`
    /// storage driver (a plain copy of the image, there before the container starts).
    pub fn vfs_rootfs(&self, id: &str) -> Result<PathBuf> {
        let data = self.data_root();
        let mount_id_file = data
            .join("image/vfs/layerdb/mounts")
            .join(id)
            .join("mount-id");
        let mount_id = std::fs::read_to_string(&mount_id_file)
            .with_context(|| format!("read {} (is the engine on vfs?)", mount_id_file.display()))?;
        Ok(data.join("vfs/dir").join(mount_id.trim()))
    }

    /// The container's init pid on the host (`docker inspect .State.Pid`).
    pub fn pid(&self, id: &str) -> Result<u32> {
        let pid = self.docker_ok(&["inspect", "--format", "{{.State.Pid}}", id])?;
        pid.parse().with_context(|| format!("pid of {id}: {pid:?}"))
    }

    /// The host directory of `controller`'s cgroup holding container `id` (v1 layout, or the
    /// unified hierarchy when the controller has no v1 mount).
    pub fn cgroup_dir(&self, id: &str, controller: &str) -> Result<PathBuf> {
        let pid = self.pid(id)?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .with_context(|| format!("read /proc/{pid}/cgroup"))?;
        let mut unified = None;
        for line in text.lines() {
            let mut f = line.splitn(3, ':');
            let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let rel = path.trim_start_matches('/');
            if ctrls.split(',').any(|c| c == controller) {
                return Ok(Path::new("/sys/fs/cgroup").join(controller).join(rel));
            }
            if ctrls.is_empty() {
                unified = Some(Path::new("/sys/fs/cgroup").join(rel));
            }
        }
        unified.with_context(|| format!("no {controller} cgroup for {id} in /proc/{pid}/cgroup"))
    }

    /// The last lines of dockerd's and containerd's logs, for failure messages.
    pub fn log_tails(&self) -> String {
        let mut s = String::new();
        if let Some(d) = &self.dockerd {
            s.push_str(&d.log_tail());
        }
        if let Some(c) = &self.containerd {
            s.push_str(&c.log_tail());
        }
        s
    }

    fn teardown(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "docker engine in {} at failure:\n{}",
                self.root.display(),
                self.log_tails()
            );
        }
        let running = self
            .dockerd
            .as_mut()
            .is_some_and(|d| d.daemon().check_running().is_ok());
        if running {
            self.remove_containers();
        }
        if let Some(mut d) = self.dockerd.take() {
            d.stop();
        }
        if let Some(mut c) = self.containerd.take() {
            c.stop();
        }
        unmount_below(&self.root);
        if let Some(dir) = self.dir.take() {
            if let Err(e) = dir.close() {
                eprintln!("warning: cannot remove {}: {e}", self.root.display());
            }
        }
    }

    fn remove_containers(&self) {
        let mut ps = self.docker_command();
        ps.args(["ps", "-aq"]);
        let Some(Ok(out)) = output_within(ps, CLI_DEADLINE) else {
            return;
        };
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if ids.is_empty() {
            return;
        }
        let mut rm = self.docker_command();
        rm.args(["rm", "--force"]).args(&ids);
        if output_within(rm, CLI_DEADLINE).is_none() {
            eprintln!("warning: docker rm --force {ids:?} did not finish in time");
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.teardown();
    }
}
