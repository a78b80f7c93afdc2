//! OCI bundles run by the real runc, with the devinject hook wired in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

/// The variable naming the runc every runc-level test runs (docs/testing.md): unset, `runc` on
/// `PATH` (Debian's). scripts/test.sh sets it to the runc 1.5 of scripts/runc-build.sh for a
/// second run of the runc tier, and to its runc 1.4 for the CRI-O and cluster tiers.
pub const RUNC_ENV: &str = "DEVINJECT_RUNC";

/// An OCI bundle: `config.json` plus a busybox rootfs.
#[derive(Debug)]
pub struct Bundle {
    /// The bundle directory.
    pub dir: PathBuf,
    /// The spec being built.
    pub spec: Value,
}

/// A unique container id for this process.
pub fn container_id(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// How devinject is wired into runc ([`Bundle::run_via`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// runc with `devinject-hook` as a `createRuntime` hook.
    Hook,
    /// `devinject-runtime` (the shim) in front of runc.
    Shim,
}

/// One of devinject's appliers as a given binary (a build other than this workspace's, or one
/// run where the workspace is not: the arm64 guest's).
#[derive(Debug, Clone, Copy)]
pub enum Applier<'a> {
    /// The hook as runc's `createRuntime` hook (an absolute path: runc runs hooks from the
    /// bundle directory).
    Hook(&'a Path),
    /// The shim as the runtime in front of runc.
    Shim(&'a Path),
}

impl Bundle {
    /// Creates a bundle in `dir` with a busybox rootfs and runc's default spec, not a terminal,
    /// running `args`.
    pub fn new(dir: &Path, args: &[impl AsRef<str>]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        crate::rootfs::busybox(&dir.join("rootfs"))?;
        let spec = default_spec()?;
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&spec)?)?;
        let mut b = Self {
            dir: dir.to_owned(),
            spec,
        };
        b.spec["process"]["terminal"] = json!(false);
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        b.spec["process"]["args"] = json!(args);
        b.spec["root"]["readonly"] = json!(false);
        Ok(b)
    }

    /// Replaces the command the container runs.
    pub fn args(&mut self, args: &[&str]) -> &mut Self {
        self.spec["process"]["args"] = json!(args);
        self
    }

    /// Adds `KEY=value` to the process env.
    pub fn env(&mut self, kv: &str) -> &mut Self {
        self.spec["process"]["env"]
            .as_array_mut()
            .expect("env array")
            .push(json!(kv));
        self
    }

    /// Adds an annotation.
    pub fn annotation(&mut self, key: &str, value: &str) -> &mut Self {
        if self.spec.get("annotations").is_none() {
            self.spec["annotations"] = json!({});
        }
        self.spec["annotations"][key] = json!(value);
        self
    }

    /// Wires `hook` in at `stage` (`prestart` or `createRuntime`) with `--config config`.
    pub fn hook(&mut self, stage: &str, hook: &Path, config: &Path) -> &mut Self {
        self.push_hook(
            stage,
            json!({
                "path": hook,
                "args": ["devinject-hook", "--config", config],
                "env": [],
                "timeout": 30,
            }),
        )
    }

    /// Appends a raw hook `entry` (`path`, `args`, `env`, `timeout`) at `stage`.
    pub fn push_hook(&mut self, stage: &str, entry: Value) -> &mut Self {
        if self.spec.get("hooks").is_none() {
            self.spec["hooks"] = json!({});
        }
        let mut list = self.spec["hooks"][stage]
            .as_array()
            .cloned()
            .unwrap_or_default();
        list.push(entry);
        self.spec["hooks"][stage] = json!(list);
        self
    }

    /// The rootfs directory.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// Drops the spec's mount at `destination` (e.g. `/dev`, so the image's own /dev is used).
    pub fn remove_mount(&mut self, destination: &str) -> &mut Self {
        self.spec["mounts"]
            .as_array_mut()
            .expect("mounts array")
            .retain(|m| m["destination"] != destination);
        self
    }

    /// Bind-mounts a host device node into the container without granting it in the cgroup:
    /// the probe must then see it denied.
    pub fn bind_node(&mut self, host: &Path, container: &str) -> &mut Self {
        self.spec["mounts"]
            .as_array_mut()
            .expect("mounts array")
            .push(json!({
                "destination": container,
                "type": "bind",
                "source": host,
                "options": ["bind"],
            }));
        self
    }

    /// Gives the container a user namespace mapping container root to host `host_uid`.
    pub fn user_namespace(&mut self, host_uid: u32, size: u32) -> &mut Self {
        let ns = self.spec["linux"]["namespaces"]
            .as_array_mut()
            .expect("namespaces");
        ns.push(json!({"type": "user"}));
        let map = json!([{"containerID": 0, "hostID": host_uid, "size": size}]);
        self.spec["linux"]["uidMappings"] = map.clone();
        self.spec["linux"]["gidMappings"] = map;
        self
    }

    /// Writes `config.json`.
    pub fn write(&self) -> Result<()> {
        std::fs::write(
            self.dir.join("config.json"),
            serde_json::to_vec_pretty(&self.spec)?,
        )?;
        Ok(())
    }

    /// The `runc --root` this bundle's containers use.
    pub fn state_root(&self) -> PathBuf {
        self.dir.join("runc-state")
    }

    /// Runs `runc --root <state root> <args>`.
    pub fn runc(&self, args: &[&str]) -> Result<Output> {
        Command::new(runc_path())
            .arg("--root")
            .arg(self.state_root())
            .args(args)
            .output()
            .with_context(|| format!("runc {args:?}"))
    }

    /// Writes the spec and starts the container in the background (`runc run --detach`); the
    /// returned handle deletes it when dropped. The container's stdout and stderr, and runc's,
    /// go to `<bundle>/<id>.log`: a pipe would keep this call waiting for the container to exit.
    pub fn start_detached(&self, id: &str) -> Result<Detached<'_>> {
        self.write()?;
        let log_path = self.dir.join(format!("{id}.log"));
        let log = std::fs::File::create(&log_path).context("create the container log")?;
        let status = Command::new(runc_path())
            .arg("--root")
            .arg(self.state_root())
            .args(["run", "--detach", "--bundle"])
            .arg(&self.dir)
            .arg(id)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .context("runc run --detach")?;
        let running = Detached {
            bundle: self,
            id: id.to_owned(),
        };
        if !status.success() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!("runc run --detach {id}: {status}\n{log}");
        }
        Ok(running)
    }

    /// Writes the spec and runs the container to completion with `runc run`.
    pub fn run(&self, id: &str) -> Result<Output> {
        self.run_with(&[&runc_path()], id)
    }

    /// Runs the container to completion with devinject wired in by `via`, reading host config
    /// `config`: the hook as a `createRuntime` hook of runc, or the shim in front of runc.
    pub fn run_via(&mut self, via: Via, config: &Path, id: &str) -> Result<Output> {
        let (hook, shim);
        let applier = match via {
            Via::Hook => {
                hook = crate::bins::bin("devinject-hook");
                Applier::Hook(&hook)
            }
            Via::Shim => {
                shim = crate::bins::bin("devinject-runtime");
                Applier::Shim(&shim)
            }
        };
        self.run_applied(applier, config, id)
    }

    /// Runs the container to completion with `applier` (a given binary) reading host config
    /// `config`.
    pub fn run_applied(&mut self, applier: Applier<'_>, config: &Path, id: &str) -> Result<Output> {
        match applier {
            Applier::Hook(hook) => {
                self.hook("createRuntime", hook, config);
                self.run(id)
            }
            Applier::Shim(shim) => {
                let cmd = shim_command_of(shim, config, &runc_path());
                let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
                self.run_with(&cmd, id)
            }
        }
    }

    /// Like [`Bundle::run`], but through `runtime` (a command and its leading arguments, e.g. the
    /// shim with `--config`), which must accept runc's arguments.
    pub fn run_with(&self, runtime: &[&str], id: &str) -> Result<Output> {
        self.write()?;
        let state = self.state_root();
        let out = Command::new(runtime[0])
            .args(&runtime[1..])
            .arg("--root")
            .arg(&state)
            .args(["run", "--bundle"])
            .arg(&self.dir)
            .arg(id)
            .output()
            .context("runc run")?;
        // Leave nothing behind if runc failed half-way.
        let _ = Command::new(runc_path())
            .arg("--root")
            .arg(&state)
            .args(["delete", "--force", id])
            .output();
        Ok(out)
    }
}

/// A temp dir that the root of a user namespace, mapped to an unprivileged host uid, can walk
/// into (mode 0755): bundles for `user_namespace` containers go below it.
pub fn walkable_tempdir() -> Result<tempfile::TempDir> {
    let t = tempfile::tempdir()?;
    std::fs::set_permissions(
        t.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    Ok(t)
}

/// The runc the tests run, as an absolute path: `$DEVINJECT_RUNC` when set, else `runc` on
/// `PATH`; `None` when there is none. A `DEVINJECT_RUNC` that names no file is a mistake, not a
/// missing prerequisite: it panics rather than letting the tests skip or fall back to another
/// runc.
pub fn runc_binary() -> Option<PathBuf> {
    match std::env::var_os(RUNC_ENV).filter(|v| !v.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_absolute() && path.is_file(),
                "{RUNC_ENV}={} is not an absolute path to a file (scripts/runc-build.sh prints one)",
                path.display()
            );
            Some(path)
        }
        None => devinject_testkit::which("runc"),
    }
}

/// The version of [`runc_binary`] as `(major, minor, patch)`, from the first line of `runc
/// --version` (`runc version 1.4.3`), for the few expectations where runc's own behaviour
/// changed between releases (docs/testing.md, "runc 1.4"). Panics when it cannot be read.
pub fn runc_version() -> (u32, u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let runc = runc_path();
        let out = Command::new(&runc)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{runc} --version: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        parse_version(&text).unwrap_or_else(|| panic!("{runc} --version said {text:?}"))
    })
}

/// `(major, minor, patch)` from `runc version X.Y.Z[-suffix]` on the first line.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.lines().next()?.strip_prefix("runc version ")?;
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next()?.parse().ok();
    Some((next()?, next()?, next()?))
}

/// [`runc_binary`] as a string, for command lines (the shim is given it with `--runtime`).
pub fn runc_path() -> String {
    runc_binary()
        .expect("runc on PATH (apt-get install runc), or DEVINJECT_RUNC")
        .to_string_lossy()
        .into_owned()
}

/// The default spec of [`runc_path`] (`runc spec`), asked once per process: a bundle is made
/// for each of a test file's hundreds of containers (the hostile matrix alone makes over a
/// thousand), and each `runc spec` costs about 20 ms.
fn default_spec() -> Result<Value> {
    static SPECS: Mutex<BTreeMap<String, Value>> = Mutex::new(BTreeMap::new());
    let runc = runc_path();
    let mut specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(spec) = specs.get(&runc) {
        return Ok(spec.clone());
    }
    let dir = tempfile::tempdir()?;
    let out = Command::new(&runc)
        .arg("spec")
        .current_dir(dir.path())
        .output()
        .context("runc spec (apt-get install runc)")?;
    if !out.status.success() {
        bail!("runc spec: {}", String::from_utf8_lossy(&out.stderr));
    }
    let spec: Value = serde_json::from_slice(&std::fs::read(dir.path().join("config.json"))?)?;
    specs.insert(runc, spec.clone());
    Ok(spec)
}

/// The command line of the shim `devinject-runtime` with host config `config`, handing over to
/// `runtime`; pass it to [`Bundle::run_with`].
pub fn shim_command(config: &Path, runtime: &str) -> Vec<String> {
    shim_command_of(&crate::bins::bin("devinject-runtime"), config, runtime)
}

/// [`shim_command`] of the shim binary at `shim`.
pub fn shim_command_of(shim: &Path, config: &Path, runtime: &str) -> Vec<String> {
    vec![
        shim.to_string_lossy().into_owned(),
        "--config".into(),
        config.to_string_lossy().into_owned(),
        "--runtime".into(),
        runtime.to_owned(),
    ]
}

/// A failed hook as runc reports it: `error running hook #N: exit status CODE, stdout: ...,
/// stderr: ...` (runc 1.1), or `error running createRuntime hook #N: ...` (runc 1.2 on names
/// the hook's stage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// The hook's exit status.
    pub code: i32,
    /// The hook's stderr as runc quoted it (with `\n` and `\"` escapes).
    pub stderr: String,
}

impl HookFailure {
    /// The line of the hook's stderr that starts with `prefix` (e.g. `devinject: `), unquoted.
    pub fn line(&self, prefix: &str) -> Option<String> {
        self.stderr
            .split("\\n")
            .map(|l| l.trim_start())
            .find(|l| l.starts_with(prefix))
            .map(|l| l.trim_end_matches(['"', '\n']).replace("\\\"", "\""))
    }
}

/// The failed hook in runc's output, if a hook failed.
pub fn hook_failure(out: &Output) -> Option<HookFailure> {
    let text = String::from_utf8_lossy(&out.stderr);
    let rest = hook_error(&text)?;
    let status = rest.find("exit status ")? + "exit status ".len();
    let digits: String = rest[status..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let stderr = rest
        .find("stderr: ")
        .map(|i| rest[i + "stderr: ".len()..].to_owned())
        .unwrap_or_default();
    Some(HookFailure {
        code: digits.parse().ok()?,
        stderr,
    })
}

/// The text from runc's `error running [STAGE ]hook #` on, if it has one.
fn hook_error(text: &str) -> Option<&str> {
    const LEAD: &str = "error running ";
    text.match_indices(LEAD).find_map(|(at, _)| {
        let after = &text[at + LEAD.len()..];
        let stage_len = after
            .find(|c: char| !c.is_ascii_alphanumeric())
            .filter(|&n| after[n..].starts_with(" hook #"))
            .map_or(0, |n| n + 1);
        after[stage_len..]
            .starts_with("hook #")
            .then_some(&text[at..])
    })
}

/// A container started by [`Bundle::start_detached`]; force-deleted on drop.
#[derive(Debug)]
pub struct Detached<'a> {
    bundle: &'a Bundle,
    id: String,
}

impl Detached<'_> {
    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs `args` in the container with `runc exec`.
    pub fn exec(&self, args: &[&str]) -> Result<Output> {
        let mut a = vec!["exec", self.id.as_str()];
        a.extend_from_slice(args);
        self.bundle.runc(&a)
    }

    /// Runs `runc update <flags> <id>`.
    pub fn update(&self, flags: &[&str]) -> Result<Output> {
        let mut a = vec!["update"];
        a.extend_from_slice(flags);
        a.push(&self.id);
        self.bundle.runc(&a)
    }
}

impl Drop for Detached<'_> {
    fn drop(&mut self) {
        let _ = self.bundle.runc(&["delete", "--force", &self.id]);
    }
}

/// Shell run by [`cgroup_v2`]: a private mount namespace with cgroup2 mounted over
/// `/sys/fs/cgroup`, so runc takes its cgroup v2 path (an eBPF device filter) on a hybrid host.
const V2_SHELL: &str =
    "mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && exec \"$@\"";

/// A command prefix for [`Bundle::run_with`] that runs `runtime` (plus its leading args) on
/// cgroup v2: `unshare -m` + a cgroup2 mount over `/sys/fs/cgroup`.
pub fn cgroup_v2(runtime: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["unshare", "-m", "--", "/bin/sh", "-c", V2_SHELL, "sh"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(runtime.iter().map(|s| s.to_string()));
    v
}

/// Runs a shell script inside the cgroup v2 namespace of [`cgroup_v2`] (for multi-step runc
/// sequences such as run -d, exec, update).
pub fn sh_in_cgroup_v2(script: &str) -> Result<Output> {
    let full =
        format!("mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && {script}");
    Command::new("unshare")
        .args(["-m", "--", "/bin/sh", "-c", &full])
        .output()
        .context("unshare")
}

/// Formats a process output for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{ExitStatus, Output};

    use super::{hook_failure, parse_version};

    #[test]
    fn runc_versions_are_read_from_the_first_line() {
        let debian = "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\n";
        assert_eq!(parse_version(debian), Some((1, 1, 5)));
        assert_eq!(
            parse_version("runc version 1.4.3\nspec: 1.3.0\n"),
            Some((1, 4, 3))
        );
        assert_eq!(parse_version("runc version 1.2.0-rc.1\n"), Some((1, 2, 0)));
        assert_eq!(parse_version("crun version 1.8.1\n"), None);
    }

    fn failed(stderr: &str) -> Output {
        Output {
            status: ExitStatus::from_raw(256),
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_hook_failure_is_read_as_runc_1_1_words_it() {
        let out = failed(
            "msg=\"container_linux.go:380: starting container process caused: error running \
             hook #0: exit status 7, stdout: , stderr: devinject: no\\n\"",
        );
        let f = hook_failure(&out).expect("a hook failure");
        assert_eq!(f.code, 7);
        assert_eq!(f.line("devinject: ").as_deref(), Some("devinject: no"));
    }

    #[test]
    fn a_hook_failure_is_read_as_runc_1_2_and_later_word_it_with_the_stage() {
        let out = failed(
            "msg=\"runc run failed: unable to start container process: error during container \
             init: error running createRuntime hook #0: exit status 9, stdout: , stderr: \
             devinject: refused\\n\"",
        );
        let f = hook_failure(&out).expect("a hook failure");
        assert_eq!(f.code, 9);
        assert_eq!(f.line("devinject: ").as_deref(), Some("devinject: refused"));
    }

    #[test]
    fn other_errors_are_no_hook_failure() {
        assert_eq!(
            hook_failure(&failed("error running the container: x")),
            None
        );
        assert_eq!(hook_failure(&failed("exit status 1")), None);
    }
}
