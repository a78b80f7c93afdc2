//! `userns-bench`: what a user namespace costs a container start that gets devices.
//!
//! Run as root after `cargo build --release --workspace --bins` (`scripts/bench.sh userns`
//! does both): `userns-bench [--rounds 100] [--warmup 3]`. The host is the simulated demo host
//! (`devinject_tests::sim`) with its nodes given the mode of `/dev/kvm` (`0660 root:root`), so
//! that in a user namespace the hook and the shim make each node as a copy the container owns
//! (docs/security.md) where the initial namespace gets a plain `mknod`. Each round starts
//! `/bin/true` once on every path, in turn, each round one path further along, on a fresh
//! overlay rootfs whose upper layer is on a fresh ext4 (`devinject_bench::scratch`):
//!
//! - runc with no device in a user namespace (container ids 0-65535 as host 100000-165535),
//!   twice (the A/A pair), and in the initial namespace;
//! - `devinject-hook` as runc's createRuntime hook and the shim `devinject-runtime` in front of
//!   runc, asked for demo device 0 (its node, the control node, the library and the tool), in
//!   the user namespace and in the initial one;
//! - the machine's real `/dev/kvm` as a CDI engine gives it from the spec the real
//!   `devinject-ctl cdi generate` writes for the shipped kvm profile: its node as a
//!   `linux.devices` entry with its cgroup rule (which runc binds from the host in a user
//!   namespace, seen owned by nobody there), and the spec's hooks. Written without
//!   `--user-namespaces` the spec has none; written with it, each device runs
//!   `devinject-hook finish --node` (the copy the container owns in a user namespace, nothing
//!   in the initial one). In both namespaces: the difference is the price of serving
//!   user-namespaced containers from a CDI spec (the DRA driver's claim specs are written so).
//!
//! Every start is `create`, `start`, the wait for the container's end and `delete`. Per path:
//! start time and CPU (user + system of every process waited for) as medians, then what each
//! device path adds over the no-device start of its own namespace, as differences of medians
//! with 95% intervals from resampling the rounds. Prints Markdown. Exit codes: 0 measured, 1 the
//! benchmark failed, 2 not root or a prerequisite missing.

use std::os::unix::fs::PermissionsExt;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use devinject_bench::interval::difference_cell;
use devinject_bench::overlay::start_on_fresh_rootfs;
use devinject_bench::scratch::{LayerFs, Scratch};
use devinject_bench::stats::{children_cpu, short, Samples};
use devinject_tests::bins::bin;
use devinject_tests::runc::{runc_path, shim_command, Bundle};
use devinject_tests::sim::{demo_host, real_host_config, SimHost, ACCELS, CTL};
use serde_json::{json, Value};

/// Benchmark: container starts with devices in a user namespace against the same starts
/// without devices, and against the initial namespace.
///
/// Needs root, gcc (the demo library) and runc; run it through scripts/bench.sh
/// (`scripts/bench.sh userns`), on a quiet machine. Figures in docs/benchmarks.md, "User
/// namespaces".
#[derive(Parser, Debug)]
#[command(name = "userns-bench")]
struct Cli {
    /// Timed rounds (one start of every path each).
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Untimed rounds first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
}

/// The container's user namespace: container ids 0-65535 as these host ids.
const HOST_ID: u32 = 100_000;
const IDS: u32 = 65_536;

/// The paths, in the order of the first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    NoDevice {
        userns: bool,
    },
    NoDeviceAgain,
    Hook {
        userns: bool,
    },
    Shim {
        userns: bool,
    },
    /// Real kvm from a CDI spec, with each device's `finish --node` step (`copies`) or without.
    Cdi {
        userns: bool,
        copies: bool,
    },
}

const ROUTES: [Route; 11] = [
    Route::NoDevice { userns: true },
    Route::Hook { userns: true },
    Route::Shim { userns: true },
    Route::Cdi {
        userns: true,
        copies: false,
    },
    Route::Cdi {
        userns: true,
        copies: true,
    },
    Route::NoDevice { userns: false },
    Route::Hook { userns: false },
    Route::Shim { userns: false },
    Route::Cdi {
        userns: false,
        copies: false,
    },
    Route::Cdi {
        userns: false,
        copies: true,
    },
    Route::NoDeviceAgain,
];

impl Route {
    fn userns(self) -> bool {
        match self {
            Self::NoDevice { userns }
            | Self::Hook { userns }
            | Self::Shim { userns }
            | Self::Cdi { userns, .. } => userns,
            Self::NoDeviceAgain => true,
        }
    }

    fn name(self) -> String {
        let ns = if self.userns() {
            "user namespace"
        } else {
            "initial namespace"
        };
        match self {
            Self::NoDevice { .. } => format!("runc, no device, {ns}"),
            Self::NoDeviceAgain => format!("runc, no device, {ns}, again (A/A)"),
            Self::Hook { .. } => format!("devinject-hook, demo device 0, {ns}"),
            Self::Shim { .. } => format!("devinject-runtime (shim), demo device 0, {ns}"),
            Self::Cdi { copies: false, .. } => format!("CDI, real kvm, spec without copies, {ns}"),
            Self::Cdi { copies: true, .. } => {
                format!("CDI, real kvm, spec with `--user-namespaces`, {ns}")
            }
        }
    }

    fn slug(self) -> String {
        let ns = if self.userns() { "userns" } else { "initial" };
        match self {
            Self::NoDevice { .. } => format!("none-{ns}"),
            Self::NoDeviceAgain => "none-again".to_owned(),
            Self::Hook { .. } => format!("hook-{ns}"),
            Self::Shim { .. } => format!("shim-{ns}"),
            Self::Cdi { copies: false, .. } => format!("cdi-{ns}"),
            Self::Cdi { copies: true, .. } => format!("cdi-copies-{ns}"),
        }
    }
}

struct Case {
    route: Route,
    bundle: Bundle,
    runtime: Vec<String>,
    started: Samples,
    cpu: Samples,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    devinject_bench::main_as_root("userns-bench", "mknod, overlay mounts, runc", || {
        bench(&cli)
    })
}

fn bench(cli: &Cli) -> Result<String> {
    let tmp = tempfile::Builder::new().prefix("userns-bench").tempdir()?;
    let dir = std::fs::canonicalize(tmp.path())?;
    let host = demo_host(&dir.join("host"), &["demo"])?;
    for (name, _, _) in ACCELS.iter().chain(std::iter::once(&CTL)) {
        std::fs::set_permissions(
            host.dev_root.join("demo").join(name),
            std::fs::Permissions::from_mode(0o660),
        )?;
    }
    let kvm = KvmSpecs::generate(&dir.join("kvm"))?;
    let runc = runc_path();
    let scratch = Scratch::create(&dir.join("scratch"), LayerFs::Ext4)?;
    let template = Bundle::new(&dir.join("template"), &["/bin/true"])?;
    let lower = template.rootfs();
    let mut cases = ROUTES
        .iter()
        .map(|&route| case(route, &scratch, &template, &host, &kvm, &runc))
        .collect::<Result<Vec<_>>>()?;
    let n = cases.len();
    for round in 0..cli.warmup + cli.rounds {
        for k in 0..n {
            let c = &mut cases[(round + k) % n];
            let cpu0 = children_cpu()?;
            let name = format!("{}-r{round}", c.route.slug());
            let (ran, _) = start_on_fresh_rootfs(&c.runtime, &c.bundle, &lower, &scratch, &name)
                .with_context(|| c.route.name())?;
            let started = ran.started;
            let cpu = children_cpu()?.saturating_sub(cpu0);
            if round >= cli.warmup {
                c.started.push(started);
                c.cpu.push(cpu);
            }
        }
        eprintln!("userns-bench: round {} done", round + 1);
    }
    Ok(render(cli, &cases))
}

fn case(
    route: Route,
    scratch: &Scratch,
    template: &Bundle,
    host: &SimHost,
    kvm: &KvmSpecs,
    runc: &str,
) -> Result<Case> {
    let mut bundle = scratch.bundle(template, &route.slug())?;
    if route.userns() {
        bundle.user_namespace(HOST_ID, IDS);
    }
    let runtime = match route {
        Route::NoDevice { .. } | Route::NoDeviceAgain => vec![runc.to_owned()],
        Route::Hook { .. } => {
            bundle.env("DEMO_VISIBLE_DEVICES=0").hook(
                "createRuntime",
                &bin("devinject-hook"),
                &host.config,
            );
            vec![runc.to_owned()]
        }
        Route::Shim { .. } => {
            bundle.env("DEMO_VISIBLE_DEVICES=0");
            shim_command(&host.config, runc)
        }
        Route::Cdi { copies, .. } => {
            let spec = if copies { &kvm.copies } else { &kvm.plain };
            apply_cdi_device(&mut bundle, spec, "0")?;
            vec![runc.to_owned()]
        }
    };
    Ok(Case {
        route,
        bundle,
        runtime,
        started: Samples::default(),
        cpu: Samples::default(),
    })
}

/// The kvm profile's CDI specs as the real `devinject-ctl cdi generate` writes them for this
/// machine (dev root `/dev`), with and without `--user-namespaces`.
struct KvmSpecs {
    plain: Value,
    copies: Value,
}

impl KvmSpecs {
    fn generate(dir: &std::path::Path) -> Result<Self> {
        if !std::path::Path::new("/dev/kvm").exists() {
            anyhow::bail!("needs /dev/kvm for the CDI rows");
        }
        let config = real_host_config(dir, &["kvm"])?;
        let spec = |name: &str, extra: &[&str]| -> Result<Value> {
            let out = dir.join(name);
            let mut cmd = std::process::Command::new(bin("devinject-ctl"));
            cmd.args(["cdi", "generate", "--output"])
                .arg(&out)
                .arg("--profiles-dir")
                .arg(dir.join("profiles"))
                .args([
                    "--dev-root",
                    "/dev",
                    "--sys-root",
                    "/sys",
                    "--driver-root",
                    "/",
                ])
                .arg("--hook-path")
                .arg(bin("devinject-hook"))
                .arg("--hook-config")
                .arg(&config)
                .args(extra);
            let done = cmd.output().context("run devinject-ctl cdi generate")?;
            if !done.status.success() {
                anyhow::bail!(
                    "devinject-ctl cdi generate: {}",
                    String::from_utf8_lossy(&done.stderr)
                );
            }
            let file = out.join("devinject.io-kvm.json");
            let text = std::fs::read(&file).with_context(|| format!("read {}", file.display()))?;
            Ok(serde_json::from_slice(&text)?)
        };
        Ok(Self {
            plain: spec("plain", &[])?,
            copies: spec("copies", &["--user-namespaces"])?,
        })
    }
}

/// Applies CDI device `name` of `spec` (with the spec's own edits) to `bundle`'s spec as an
/// engine does: each node a `linux.devices` entry with its cgroup rule, each hook at its stage.
fn apply_cdi_device(bundle: &mut Bundle, spec: &Value, name: &str) -> Result<()> {
    let device = spec["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == name))
        .with_context(|| format!("no CDI device {name} in {spec}"))?;
    for edits in [&spec["containerEdits"], &device["containerEdits"]] {
        for node in edits["deviceNodes"].as_array().into_iter().flatten() {
            push(
                &mut bundle.spec,
                &["linux", "devices"],
                json!({
                    "path": node["path"], "type": node["type"], "major": node["major"],
                    "minor": node["minor"], "fileMode": node["fileMode"],
                    "uid": node["uid"], "gid": node["gid"],
                }),
            );
            push(
                &mut bundle.spec,
                &["linux", "resources", "devices"],
                json!({"allow": true, "type": node["type"], "major": node["major"],
                       "minor": node["minor"], "access": node["permissions"]}),
            );
        }
        for hook in edits["hooks"].as_array().into_iter().flatten() {
            let stage = hook["hookName"].as_str().context("hookName")?;
            let mut entry = hook.clone();
            entry.as_object_mut().context("hook")?.remove("hookName");
            bundle.push_hook(stage, entry);
        }
    }
    Ok(())
}

/// Appends `value` to the array at `path` in `config`, making what is missing (indexing a
/// JSON value by a missing key inserts it).
fn push(config: &mut Value, path: &[&str], value: Value) {
    let mut at = config;
    for key in path {
        at = &mut at[*key];
    }
    if !at.is_array() {
        *at = json!([]);
    }
    at.as_array_mut().expect("an array").push(value);
}

fn render(cli: &Cli, cases: &[Case]) -> String {
    let ms = |d: Duration| short(d.as_secs_f64() * 1e3);
    let mut t = format!(
        "### A user namespace's price for a start with devices (`userns-bench`)\n\n\
         {}\n\
         Start: spawn of `create` until `start` returned (ms). CPU: user + system of every \
         waited-for process per cycle (ms).\n\n\
         | path | start median | CPU median |\n|---|---|---|\n",
        devinject_bench::rounds_line(cli.rounds, cli.warmup),
    );
    for c in cases {
        t.push_str(&format!(
            "| {} | {} | {} |\n",
            c.route.name(),
            ms(c.started.median()),
            ms(c.cpu.median())
        ));
    }
    let base = |userns: bool| {
        cases
            .iter()
            .find(|c| c.route == Route::NoDevice { userns })
            .expect("a no-device case in each namespace")
    };
    t.push_str(
        "\nWhat each path adds over runc with no device in the same namespace, median minus \
         median (ms), with the 95% interval from resampling the rounds:\n\n\
         | path | start | CPU |\n|---|---|---|\n",
    );
    for c in cases
        .iter()
        .filter(|c| !matches!(c.route, Route::NoDevice { .. }))
    {
        let b = base(c.route.userns());
        t.push_str(&format!(
            "| {} | {} | {} |\n",
            c.route.name(),
            difference_cell(&c.started, &b.started),
            difference_cell(&c.cpu, &b.cpu)
        ));
    }
    t.push_str(
        "\nThe price of a CDI spec's node copies (`--user-namespaces`): the spec with them minus \
         the spec without, in the same namespace (ms):\n\n\
         | namespace | start | CPU |\n|---|---|---|\n",
    );
    for userns in [true, false] {
        let cdi = |copies| {
            cases
                .iter()
                .find(|c| c.route == Route::Cdi { userns, copies })
                .expect("both CDI cases in each namespace")
        };
        let (with, without) = (cdi(true), cdi(false));
        t.push_str(&format!(
            "| {} | {} | {} |\n",
            if userns { "user" } else { "initial" },
            difference_cell(&with.started, &without.started),
            difference_cell(&with.cpu, &without.cpu)
        ));
    }
    t
}
