//! One way of starting a container (natively, through the hook, through the shim ...), timed.
//!
//! A [`Case`] is an OCI bundle plus the command that runs it. Every start mounts a fresh rootfs
//! ([`FreshRootfs`], its upper layer on the [`Scratch`] filesystem) and, for the shim, rewrites
//! the pristine `config.json` (the shim edits it in place); neither is timed. The timed part is `runc run` (or the shim in front of it) from spawn
//! to exit: create, hooks, start of `/bin/true`, its exit and runc's clean-up.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::host::{BenchHost, MAJOR, REQUEST_ENV};
use crate::overlay::FreshRootfs;
use crate::scratch::Scratch;
use devinject_tests::runc::{describe, Bundle};

/// How the container gets its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Devices, cgroup rules and read-only library mounts written in `config.json` by hand: the
    /// floor, what a runtime does with no devinject at all.
    Native,
    /// The request variable and `devinject-hook` as a createRuntime hook.
    Hook,
    /// As [`Variant::Hook`], with the hook run under `devinject-bench time`.
    HookTimed,
    /// The request variable, started through `devinject-runtime` in front of runc.
    Shim,
    /// As [`Variant::Shim`], but the shim execs `/bin/true` instead of runc, under
    /// `devinject-bench time`: the shim's own cost.
    ShimOnly,
    /// No request, plain runc.
    Plain,
    /// No request, through the shim.
    ShimNothing,
    /// The native edits, with a CDI spec's finish step as `devinject-ctl cdi generate` writes
    /// it, timed ([`Case::time_hook`]): what a CDI runtime runs.
    CdiFinish,
    /// As [`Variant::CdiFinish`], with the finish step of a spec from before it named the
    /// libraries (links and directories only: ldconfig rebuilds the cache).
    CdiFinishEarlier,
}

impl Variant {
    /// Directory name for its bundle.
    pub fn slug(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Hook => "hook",
            Self::HookTimed => "hook-timed",
            Self::Shim => "shim",
            Self::ShimOnly => "shim-only",
            Self::Plain => "runc",
            Self::ShimNothing => "shim-nothing",
            Self::CdiFinish => "cdi-finish",
            Self::CdiFinishEarlier => "cdi-finish-earlier",
        }
    }

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Hook => "hook",
            Self::HookTimed => "hook (timed)",
            Self::Shim => "shim",
            Self::ShimOnly => "shim only",
            Self::Plain => "runc",
            Self::ShimNothing => "shim, no request",
            Self::CdiFinish => "CDI finish step",
            Self::CdiFinishEarlier => "CDI finish step, earlier spec",
        }
    }
}

/// The binaries a case runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// runc (absolute).
    pub runc: PathBuf,
    /// `devinject-hook`.
    pub hook: PathBuf,
    /// `devinject-runtime`.
    pub shim: PathBuf,
    /// `devinject-ctl` (the CDI spec of row 14).
    pub ctl: PathBuf,
    /// This benchmark binary, for `time`.
    pub bench: PathBuf,
    /// The hook-only wrapper runtime (a test fixture), when built.
    pub hook_only_runtime: Option<PathBuf>,
}

/// What every case of one benchmark run shares.
#[derive(Debug)]
pub struct Setup {
    /// The bundle every case starts from; its rootfs is the pristine lower layer.
    pub template: Bundle,
    /// The binaries.
    pub bins: Binaries,
    /// Where upper layers and runc's state go.
    pub scratch: Scratch,
}

/// A bundle and how to start it.
#[derive(Debug)]
pub struct Case {
    /// What this case measures.
    pub variant: Variant,
    bundle: Bundle,
    lower: PathBuf,
    layers: PathBuf,
    runc_root: PathBuf,
    runtime: Vec<OsString>,
    rewrite: bool,
    /// The file `devinject-bench time` appends to ([`Variant::HookTimed`], [`Variant::ShimOnly`]).
    pub record: Option<PathBuf>,
}

impl Case {
    /// Sets up `variant` for `host` in `dir`.
    pub fn new(variant: Variant, dir: &Path, setup: &Setup, host: &BenchHost) -> Result<Self> {
        let (template, bins) = (&setup.template, &setup.bins);
        std::fs::create_dir_all(dir)?;
        let mut bundle = Bundle {
            dir: dir.to_owned(),
            spec: template.spec.clone(),
        };
        bundle.spec["root"]["path"] = json!(dir.join("rootfs"));
        let shim = |runtime: &Path| -> Vec<OsString> {
            vec![
                bins.shim.clone().into(),
                "--config".into(),
                host.config.clone().into(),
                "--runtime".into(),
                runtime.into(),
            ]
        };
        let runc = vec![bins.runc.clone().into_os_string()];
        let request = format!("{REQUEST_ENV}=all");
        let record = dir.join("own.rec");
        let (runtime, rewrite) = match variant {
            Variant::Native => {
                bundle.env(&request);
                native_edits(&mut bundle.spec, host);
                (runc, false)
            }
            Variant::Hook => {
                bundle
                    .env(&request)
                    .hook("createRuntime", &bins.hook, &host.config);
                (runc, false)
            }
            Variant::HookTimed => {
                bundle.env(&request);
                let args = [
                    bins.hook.to_string_lossy().into_owned(),
                    "--config".into(),
                    host.config.to_string_lossy().into_owned(),
                ];
                timed_hook(&mut bundle.spec, bins, &record, &args);
                (runc, false)
            }
            // The hook comes from the CDI spec: [`Case::time_hook`].
            Variant::CdiFinish | Variant::CdiFinishEarlier => {
                native_edits(&mut bundle.spec, host);
                (runc, false)
            }
            Variant::Shim => {
                bundle.env(&request);
                (shim(&bins.runc), true)
            }
            Variant::ShimOnly => {
                bundle.env(&request);
                (
                    timed(&bins.bench, &record, shim(Path::new("/bin/true"))),
                    true,
                )
            }
            Variant::Plain => (runc, false),
            Variant::ShimNothing => (shim(&bins.runc), true),
        };
        bundle.write()?;
        Ok(Self {
            variant,
            bundle,
            lower: template.dir.join("rootfs"),
            layers: setup.scratch.layers.clone(),
            runc_root: setup.scratch.runc_root.clone(),
            runtime,
            rewrite,
            record: matches!(
                variant,
                Variant::HookTimed
                    | Variant::ShimOnly
                    | Variant::CdiFinish
                    | Variant::CdiFinishEarlier
            )
            .then_some(record),
        })
    }

    /// Makes `command` (a program and its arguments) the createRuntime hook, timed into this
    /// case's record.
    pub fn time_hook(&mut self, bins: &Binaries, command: &[String]) -> Result<()> {
        let Some(record) = &self.record else {
            bail!("{} keeps no timing record", self.variant.name());
        };
        timed_hook(&mut self.bundle.spec, bins, record, command);
        self.bundle.write()
    }

    /// Drops what `devinject-bench time` recorded so far (starts that are not to count).
    pub fn forget_records(&self) {
        if let Some(r) = &self.record {
            let _ = std::fs::remove_file(r);
        }
    }

    /// Starts the container once and returns the timed part.
    pub fn start(&self, id: &str) -> Result<Duration> {
        self.start_after(id, &Barrier::new(1)).map(|(_, d)| d)
    }

    /// Prepares the start, waits at `gate` (the other starts of a batch), then starts the
    /// container once; when the timed part began, and how long it took.
    pub fn start_after(&self, id: &str, gate: &Barrier) -> Result<(Instant, Duration)> {
        let (at, elapsed, out) = self.run(id, None, gate)?;
        if !out.status.success() {
            bail!("{} start failed: {}", self.variant.name(), describe(&out));
        }
        Ok((at, elapsed))
    }

    /// Starts the container once with `args` as its process and returns its output.
    pub fn run_args(&self, id: &str, args: &[String]) -> Result<Output> {
        Ok(self.run(id, Some(args), &Barrier::new(1))?.2)
    }

    /// Writes the spec the start needs and mounts its fresh rootfs (not timed).
    fn prepare(&self, id: &str, args: Option<&[String]>) -> Result<FreshRootfs> {
        if let Some(args) = args {
            let mut b = Bundle {
                dir: self.bundle.dir.clone(),
                spec: self.bundle.spec.clone(),
            };
            b.spec["process"]["args"] = json!(args);
            b.write()?;
        } else if self.rewrite {
            self.bundle.write()?;
        }
        FreshRootfs::mount(
            &self.lower,
            &self.bundle.dir.join("rootfs"),
            &self.layers.join(id),
        )
    }

    fn run(
        &self,
        id: &str,
        args: Option<&[String]>,
        gate: &Barrier,
    ) -> Result<(Instant, Duration, Output)> {
        let prepared = self.prepare(id, args);
        // Every start of a batch passes the gate, a failed preparation too: the others wait.
        gate.wait();
        let rootfs = prepared?;
        let state = &self.runc_root;
        let mut cmd = Command::new(&self.runtime[0]);
        cmd.args(&self.runtime[1..])
            .arg("--root")
            .arg(state)
            .args(["run", "--bundle"])
            .arg(&self.bundle.dir)
            .arg(id)
            .stdin(Stdio::null());
        let start = Instant::now();
        let out = cmd.output()?;
        let elapsed = start.elapsed();
        if !out.status.success() {
            // Leave nothing behind if runc failed half-way.
            let _ = Command::new(&self.runtime[0])
                .arg("--root")
                .arg(state)
                .args(["delete", "--force", id])
                .output();
        }
        if args.is_some() {
            self.bundle.write()?;
        }
        rootfs.release()?;
        Ok((start, elapsed, out))
    }
}

/// `command` (a program and its arguments) run under `devinject-bench time`, appending to
/// `record`.
fn timed(
    bench: &Path,
    record: &Path,
    command: impl IntoIterator<Item = OsString>,
) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![
        bench.into(),
        "time".into(),
        "--record".into(),
        record.into(),
        "--".into(),
    ];
    v.extend(command);
    v
}

/// Makes `command` (a program and its arguments) the createRuntime hook of `spec`, run under
/// `devinject-bench time` appending to `record`, with an empty environment.
fn timed_hook(spec: &mut Value, bins: &Binaries, record: &Path, command: &[String]) {
    let mut args: Vec<String> = timed(&bins.bench, record, command.iter().map(OsString::from))
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // A hook's args start with argv[0].
    args[0] = "devinject-bench".into();
    spec["hooks"] = json!({ "createRuntime": [{
        "path": bins.bench, "args": args, "env": [], "timeout": 30,
    }]});
}

/// What the hook and the shim inject, written into the spec directly: device nodes, their cgroup
/// rules, and read-only library mounts (the same mount options the shim uses).
pub fn native_edits(spec: &mut Value, host: &BenchHost) {
    let devices: Vec<Value> = host
        .nodes
        .iter()
        .map(|n| {
            json!({"path": n.container_path, "type": "c", "major": MAJOR, "minor": n.minor,
                   "fileMode": 0o666, "uid": 0, "gid": 0})
        })
        .collect();
    spec["linux"]["devices"] = json!(devices);
    let rules = spec["linux"]["resources"]["devices"]
        .as_array_mut()
        .expect("runc spec has linux.resources.devices");
    for n in &host.nodes {
        rules.push(
            json!({"allow": true, "type": "c", "major": MAJOR, "minor": n.minor,
                          "access": "rwm"}),
        );
    }
    let mounts = spec["mounts"].as_array_mut().expect("runc spec has mounts");
    for l in &host.libs {
        mounts.push(json!({
            "destination": format!("/usr/lib/{}", l.file_name),
            "type": "bind",
            "source": l.host_path,
            "options": devinject_devices::Mount::OPTIONS,
        }));
    }
}
