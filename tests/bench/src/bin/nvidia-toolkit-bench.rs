//! `nvidia-toolkit-bench`: devinject against NVIDIA's Container Toolkit on NVIDIA's real 535 user
//! space (Debian 12's packages, `DEVINJECT_VENDOR_STACKS`) on a simulated node (mknod'ed
//! `/dev/nvidia*`, no kernel driver), the node of `tests/tests/suite/vendor_nvidia_toolkit.rs`.
//!
//! Run as root after `cargo build --release --workspace --bins` (scripts/bench.sh does both,
//! with `DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh)` and
//! `DEVINJECT_NVIDIA_TOOLKIT=$(scripts/nvidia-toolkit-build.sh)`): `nvidia-toolkit-bench
//! [--rounds 30] [--warmup 3]`. Each round starts `/bin/true` once on every path, in turn, each
//! round one path further along: plain runc with no device twice (the A/A pair), native (runc
//! given, in `config.json`, the device nodes and device rules the shim writes there and the
//! files its finish step mounts, as read-only bind mounts, nothing run at start: what runc
//! itself costs for the same injection, less the links and the linker cache),
//! `nvidia-container-runtime` in `cdi` mode with NVIDIA's management spec (`nvidia.com/gpu=all`:
//! every file of the driver), `devinject-hook` as runc's createRuntime hook and the shim
//! `devinject-runtime` in front of runc, both asked for GPU 0 with
//! `NVIDIA_DRIVER_CAPABILITIES=all` so that both sides inject the whole driver
//! (`--capabilities default` asks for the profile's default parts instead). Every start is
//! `create`, `start`, the wait for the container's end and `delete` through the path's runtime,
//! as containerd drives a runtime (NVIDIA's runtime injects on `create` only), on a fresh
//! overlay rootfs whose upper layer is on a fresh ext4 (`devinject_bench::scratch`).
//!
//! Per path: the start time (from spawning `create` until `start` returned) as median and p99,
//! the whole cycle, the CPU per cycle (user + system of every process waited for: the runtimes,
//! runc, the hooks and what they ran), the inodes each start left in its upper layer, and the
//! files the container sees injected (bind mounts beyond plain runc's, and `/dev/nvidia*`
//! nodes), from one untimed start; then what each path adds over native and over no device, in
//! CPU and start time, as differences of medians with 95% intervals. Prints Markdown. Exit
//! codes: 0 measured, 1 the benchmark failed, 2 not root or a prerequisite missing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;
use devinject_bench::interval::difference_cell;
use devinject_bench::overlay::start_on_fresh_rootfs;
use devinject_bench::scratch::{LayerFs, Scratch};
use devinject_bench::stats::{children_cpu, short, Samples};
use devinject_devices::{FinishInvocation, Mount};
use devinject_tests::bins::bin;
use devinject_tests::nvidia_toolkit::{InstalledStacks, Toolkit, TOOLKIT_ENV};
use devinject_tests::runc::{runc_path, shim_command, Bundle};
use devinject_tests::vendor::{nvidia_host, VendorHost};

/// Benchmark: container starts through NVIDIA's Container Toolkit (cdi mode), devinject's hook
/// and its shim, against plain runc, on NVIDIA's real 535 user space.
///
/// Needs root, DEVINJECT_VENDOR_STACKS and DEVINJECT_NVIDIA_TOOLKIT; run it through
/// scripts/bench.sh (`--only-nvidia-toolkit`), on a quiet machine. Figures in
/// docs/benchmarks.md, "NVIDIA's Container Toolkit".
#[derive(Parser, Debug)]
#[command(name = "nvidia-toolkit-bench")]
struct Cli {
    /// Timed rounds (one start of every path each).
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    /// Untimed rounds first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// The driver parts devinject's paths ask for: `all` (`NVIDIA_DRIVER_CAPABILITIES=all`, the
    /// whole driver, as NVIDIA's management spec injects) or `default` (no variable: the
    /// profile's default parts, what most containers ask for). NVIDIA's path is the same either
    /// way.
    #[arg(long, value_enum, default_value_t = Parts::All)]
    capabilities: Parts,
}

/// Which driver parts devinject's paths ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Parts {
    /// `NVIDIA_DRIVER_CAPABILITIES=all`.
    All,
    /// No `NVIDIA_DRIVER_CAPABILITIES`: the profile's default parts.
    Default,
}

/// The paths, in the order of the first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    NoDevice,
    NoDeviceAgain,
    Native,
    Nvidia,
    Hook,
    Shim,
}

const ROUTES: [Route; 6] = [
    Route::NoDevice,
    Route::Native,
    Route::Nvidia,
    Route::Hook,
    Route::Shim,
    Route::NoDeviceAgain,
];

impl Route {
    fn name(self) -> &'static str {
        match self {
            Self::NoDevice => "runc, no device",
            Self::NoDeviceAgain => "runc, no device, again (A/A)",
            Self::Native => "native: runc, the same nodes and files in config.json",
            Self::Nvidia => "nvidia-container-runtime, cdi mode",
            Self::Hook => "devinject-hook",
            Self::Shim => "devinject-runtime (shim)",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Self::NoDevice => "no-device",
            Self::NoDeviceAgain => "no-device-again",
            Self::Native => "native",
            Self::Nvidia => "nvidia",
            Self::Hook => "hook",
            Self::Shim => "shim",
        }
    }
}

/// One path: its bundle (the spec is written again before every start: NVIDIA's runtime and
/// the shim rewrite it) and its runtime command.
struct Case {
    route: Route,
    bundle: Bundle,
    runtime: Vec<String>,
    started: Samples,
    total: Samples,
    cpu: Samples,
    inodes: Vec<usize>,
    injected: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !nix::unistd::geteuid().is_root() {
        eprintln!("nvidia-toolkit-bench: needs root (mknod, overlay mounts, runc)");
        return ExitCode::from(2);
    }
    let (Some(stacks), Some(toolkit)) = (
        std::env::var_os("DEVINJECT_VENDOR_STACKS").map(PathBuf::from),
        std::env::var_os(TOOLKIT_ENV).map(|b| Toolkit {
            bin: PathBuf::from(b),
        }),
    ) else {
        eprintln!(
            "nvidia-toolkit-bench: needs DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh) \
             and {TOOLKIT_ENV}=$(scripts/nvidia-toolkit-build.sh)"
        );
        return ExitCode::from(2);
    };
    match bench(&cli, &stacks, &toolkit) {
        Ok(table) => {
            print!("{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvidia-toolkit-bench: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn bench(cli: &Cli, stacks: &Path, toolkit: &Toolkit) -> Result<String> {
    let tmp = tempfile::Builder::new()
        .prefix("nvidia-toolkit-bench")
        .tempdir()?;
    let dir = std::fs::canonicalize(tmp.path())?;
    let installed = InstalledStacks::mount(&dir.join("stacks"), stacks)?;
    let host = nvidia_host(&dir.join("host"), &installed.dir, &["nvidia"])?;
    let spec_dir = dir.join("cdi");
    toolkit.generate_spec(&host, &spec_dir)?;
    let runc = runc_path();
    let config = toolkit.write_config(&dir.join("nvidia"), &spec_dir, Path::new(&runc))?;
    let scratch = Scratch::create(&dir.join("scratch"), LayerFs::Ext4)?;
    let template = Bundle::new(&dir.join("template"), &["/bin/true"])?;
    let lower = template.rootfs();

    let mut cases = ROUTES
        .iter()
        .map(|&route| {
            case(
                route,
                &scratch,
                &template,
                &host,
                toolkit,
                &config,
                &runc,
                cli.capabilities,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let edits = ShimEdits::read(&cases, &lower, &scratch)?;
    edits.give(
        &mut cases
            .iter_mut()
            .find(|c| c.route == Route::Native)
            .expect("the native case")
            .bundle,
    );
    // One untimed start each with a probe as the process: what the container sees injected.
    let probe =
        "echo mounts $(wc -l < /proc/self/mountinfo); echo nodes $(ls /dev | grep -c '^nvidia')";
    let mut seen = Vec::new();
    for c in &cases {
        let mut b = Bundle {
            dir: c.bundle.dir.clone(),
            spec: c.bundle.spec.clone(),
        };
        b.args(&["/bin/sh", "-c", probe]);
        let text = start(c, &b, &lower, &scratch, "probe")?.0;
        let field = |key: &str| -> Result<usize> {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .with_context(|| format!("{}: no `{key}` in {text}", c.route.name()))
        };
        seen.push((field("mounts ")?, field("nodes ")?));
    }
    let base_mounts = seen[0].0;
    for (c, (mounts, nodes)) in cases.iter_mut().zip(seen) {
        c.injected = mounts.saturating_sub(base_mounts) + nodes;
    }
    let n = cases.len();
    for round in 0..cli.warmup + cli.rounds {
        for k in 0..n {
            let c = &mut cases[(round + k) % n];
            let id = format!("r{round}");
            let cpu0 = children_cpu()?;
            let (_, started, total, inodes) = start(c, &c.bundle, &lower, &scratch, &id)?;
            let cpu = children_cpu()?.saturating_sub(cpu0);
            if round >= cli.warmup {
                c.started.push(started);
                c.total.push(total);
                c.cpu.push(cpu);
                c.inodes.push(inodes);
            }
        }
        eprintln!("nvidia-toolkit-bench: round {} done", round + 1);
    }
    Ok(render(cli, &cases, &runc))
}

/// Asks `bundle` for GPU 0 with `parts` of the driver, as devinject's paths do.
fn ask_gpu0(bundle: &mut Bundle, parts: Parts) -> &mut Bundle {
    bundle.env("NVIDIA_VISIBLE_DEVICES=0");
    if parts == Parts::All {
        bundle.env("NVIDIA_DRIVER_CAPABILITIES=all");
    }
    bundle
}

#[allow(clippy::too_many_arguments)]
fn case(
    route: Route,
    scratch: &Scratch,
    template: &Bundle,
    host: &VendorHost,
    toolkit: &Toolkit,
    config: &Path,
    runc: &str,
    parts: Parts,
) -> Result<Case> {
    let mut bundle = scratch.bundle(template, route.slug())?;
    let runtime = match route {
        Route::NoDevice | Route::NoDeviceAgain | Route::Native => vec![runc.to_owned()],
        Route::Nvidia => {
            bundle.env("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all");
            toolkit.runtime_command(config)
        }
        Route::Hook => {
            ask_gpu0(&mut bundle, parts).hook(
                "createRuntime",
                &bin("devinject-hook"),
                &host.config,
            );
            vec![runc.to_owned()]
        }
        Route::Shim => {
            ask_gpu0(&mut bundle, parts);
            shim_command(&host.config, runc)
        }
    };
    Ok(Case {
        route,
        bundle,
        runtime,
        started: Samples::default(),
        total: Samples::default(),
        cpu: Samples::default(),
        inodes: Vec::new(),
        injected: 0,
    })
}

/// What the shim asks for its request, read from `config.json` after one untimed start: the
/// device nodes and device rules it writes there, and the files its finish step mounts, which
/// the native case is given as read-only bind mounts in the spec. The finish step's soname
/// links and linker cache have no spec field, so native goes without them.
struct ShimEdits {
    nodes: serde_json::Value,
    rules: serde_json::Value,
    mounts: serde_json::Value,
}

impl ShimEdits {
    fn read(cases: &[Case], lower: &Path, scratch: &Scratch) -> Result<Self> {
        let shim = cases
            .iter()
            .find(|c| c.route == Route::Shim)
            .expect("the shim case");
        start(shim, &shim.bundle, lower, scratch, "edits")?;
        let path = shim.bundle.dir.join("config.json");
        let edited: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)
            .with_context(|| format!("read {}", path.display()))?;
        let nodes = edited["linux"]["devices"].clone();
        if nodes.as_array().is_none_or(Vec::is_empty) {
            bail!("the shim wrote no device nodes into {}", path.display());
        }
        let finish = edited["hooks"]
            .as_object()
            .into_iter()
            .flat_map(|stages| stages.values())
            .filter_map(serde_json::Value::as_array)
            .flatten()
            .filter_map(|hook| {
                let argv: Vec<String> = serde_json::from_value(hook["args"].clone()).ok()?;
                FinishInvocation::parse_argv(&argv).ok()
            })
            .map(|(_, args)| args)
            .next()
            .with_context(|| format!("no finish step in {}", path.display()))?;
        let mut mounts = edited["mounts"].as_array().cloned().unwrap_or_default();
        mounts.extend(finish.mounts.iter().map(|m| {
            serde_json::json!({
                "destination": m.container_path,
                "source": m.host_path,
                "type": "bind",
                "options": Mount::OPTIONS,
            })
        }));
        Ok(Self {
            nodes,
            rules: edited["linux"]["resources"]["devices"].clone(),
            mounts: serde_json::Value::Array(mounts),
        })
    }

    fn give(self, bundle: &mut Bundle) {
        bundle.spec["linux"]["devices"] = self.nodes;
        bundle.spec["linux"]["resources"]["devices"] = self.rules;
        bundle.spec["mounts"] = self.mounts;
    }
}

/// One start of `c` with the spec of `b`, on a fresh overlay (upper layer `scratch/<slug>-<id>`):
/// the container's output, the start time, the whole cycle, and the inodes left in the upper
/// layer.
fn start(
    c: &Case,
    b: &Bundle,
    lower: &Path,
    scratch: &Scratch,
    id: &str,
) -> Result<(String, Duration, Duration, usize)> {
    let name = format!("{}-{id}", c.route.slug());
    let (ran, layer) = start_on_fresh_rootfs(&c.runtime, b, lower, scratch, &name)
        .with_context(|| c.route.name())?;
    let inodes = count(&layer.join("upper"))?;
    Ok((ran.text, ran.started, ran.total, inodes))
}

/// Entries below `dir` (files, links, directories), not counting `dir`.
fn count(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let e = e?;
        n += 1;
        if e.file_type()?.is_dir() {
            n += count(&e.path())?;
        }
    }
    Ok(n)
}

fn render(cli: &Cli, cases: &[Case], runc: &str) -> String {
    let find = |route: Route| {
        cases
            .iter()
            .find(|c| c.route == route)
            .expect("every route has a case")
    };
    let (no_device, native, nvidia) = (
        find(Route::NoDevice),
        find(Route::Native),
        find(Route::Nvidia),
    );
    let ms = |d: Duration| short(d.as_secs_f64() * 1e3);
    let median = |v: &[usize]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let runc_version = std::process::Command::new(runc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_default();
    let mut t = format!(
        "### NVIDIA's Container Toolkit 1.20.2 against devinject, NVIDIA 535 (`nvidia-toolkit-bench`)\n\n\
         {} {runc_version}.\n\
         Start: spawn of `create` until `start` returned (ms). Cycle: create, start, wait, delete (ms).\n\
         CPU: user + system of every waited-for process per cycle (ms).\n\n\
         | path | start median | start p99 | start / runc | start / NVIDIA | cycle median | CPU median | CPU / NVIDIA | inodes in upper layer | files injected |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        devinject_bench::rounds_line(cli.rounds, cli.warmup),
    );
    for c in cases {
        t.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.3} | {} | {} | {:.3} | {} | {} |\n",
            c.route.name(),
            ms(c.started.median()),
            ms(c.started.quantile(0.99)),
            c.started.ratio_to(&no_device.started),
            c.started.ratio_to(&nvidia.started),
            ms(c.total.median()),
            ms(c.cpu.median()),
            c.cpu.ratio_to(&nvidia.cpu),
            median(&c.inodes),
            c.injected,
        ));
    }
    t.push_str(
        "\nWhat each path adds, median minus median (ms), with the 95% interval from resampling \
         the rounds:\n\n\
         | path | CPU over native | CPU over no device | start over native | start over no device |\n\
         |---|---|---|---|---|\n",
    );
    for c in cases.iter().filter(|c| c.route != Route::NoDevice) {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            c.route.name(),
            difference_cell(&c.cpu, &native.cpu),
            difference_cell(&c.cpu, &no_device.cpu),
            difference_cell(&c.started, &native.started),
            difference_cell(&c.started, &no_device.started),
        ));
    }
    t
}
