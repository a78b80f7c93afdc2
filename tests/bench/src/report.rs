//! The printed tables, in Markdown so they can go into docs/benchmarks.md as they are.

use std::fmt::Write;

use crate::cdi_finish::CdiFinishRow;
use crate::discovery::DiscoveryRow;
use crate::docker::DockerRow;
use crate::matrix::{MatrixRow, PassThrough};
use crate::startup::{Binary, Startup};
use crate::stats::{short, Samples};
use crate::storm::StormRow;

/// Where and how the figures were taken.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `uname -r`.
    pub kernel: String,
    /// `runc --version`, first line.
    pub runc: String,
    /// Online CPUs.
    pub cpus: usize,
    /// `/proc/loadavg` when the run started.
    pub load_before: String,
    /// `/proc/loadavg` when it ended.
    pub load_after: String,
    /// The command line.
    pub command: String,
    /// The filesystem of the upper layers.
    pub layers: String,
    /// Timed runs per figure.
    pub runs: usize,
    /// Untimed warm-up runs per figure.
    pub warmup: usize,
    /// The benchmark's nice value (its children inherit it).
    pub nice: i32,
}

/// Everything one benchmark run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The environment.
    pub env: Environment,
    /// Row 1.
    pub matrix: Vec<MatrixRow>,
    /// Row 2.
    pub pass_through: Option<PassThrough>,
    /// Row 3.
    pub docker: Option<DockerRow>,
    /// Row 5.
    pub discovery: Option<DiscoveryRow>,
    /// Row 9.
    pub storm: Vec<StormRow>,
    /// Row 11.
    pub startup: Option<Startup>,
    /// Row 14.
    pub cdi_finish: Vec<CdiFinishRow>,
}

/// The benchmark's targets (docs/benchmarks.md, "Targets").
pub mod targets {
    /// Hook end-to-end over native, at 8 devices and 64 libraries.
    pub const HOOK_RATIO: f64 = 1.15;
    /// The hook's own wall time, in milliseconds.
    pub const HOOK_OWN_MS: f64 = 5.0;
    /// Shim pass-through over plain runc.
    pub const SHIM_PASS_RATIO: f64 = 1.05;
    /// The hook's peak RSS, in MiB.
    pub const HOOK_RSS_MIB: f64 = 4.0;
    /// Per-start p99 in a storm of 50 over native's.
    pub const STORM_P99_RATIO: f64 = 1.10;
    /// The shim's own CPU for a container that asks for nothing, in milliseconds.
    pub const SHIM_NOTHING_CPU_MS: f64 = 0.3;
}

fn ratio(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else {
        format!("{v:.3}")
    }
}

fn ms(s: &Samples) -> f64 {
    s.median().as_secs_f64() * 1e3
}

impl Report {
    /// Renders the report.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let e = &self.env;
        let _ = writeln!(o, "## devinject benchmark\n");
        if cfg!(debug_assertions) {
            let _ = writeln!(
                o,
                "**Debug build: these figures say nothing about a release install.**\n"
            );
        }
        let _ = writeln!(o, "- command: `{}`", e.command);
        let _ = writeln!(
            o,
            "- kernel {}, {}, {} CPUs; {} timed runs per figure after {} warm-up runs; nice {}",
            e.kernel, e.runc, e.cpus, e.runs, e.warmup, e.nice
        );
        let _ = writeln!(
            o,
            "- load average (1, 5, 15 min) at start: {}; at end: {}",
            e.load_before, e.load_after
        );
        let _ = writeln!(
            o,
            "- each start on a fresh overlay rootfs, upper layer on {}; bundles and runc state on tmpfs",
            e.layers
        );
        let _ = writeln!(
            o,
            "- figures: median [min–max] in ms; ratios are of medians from the same run\n"
        );
        if !self.matrix.is_empty() {
            let _ = writeln!(
                o,
                "### 1. `runc run` of `/bin/true` with N devices and L libraries\n"
            );
            let _ = writeln!(
                o,
                "| N | L | native | hook | shim | hook/native | shim/native | hook alone | hook CPU | hook peak RSS MiB | shim alone | shim CPU | shim peak RSS MiB |"
            );
            let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
            for r in &self.matrix {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    r.devices,
                    r.libraries,
                    r.native.ms(),
                    r.hook.ms(),
                    r.shim.ms(),
                    ratio(r.hook.ratio_to(&r.native)),
                    ratio(r.shim.ratio_to(&r.native)),
                    r.hook_own.ms(),
                    short(ms(&r.hook_cpu)),
                    r.hook_rss,
                    r.shim_own.ms(),
                    short(ms(&r.shim_cpu)),
                    r.shim_rss,
                );
            }
            let _ = writeln!(o);
        }
        if let Some(p) = &self.pass_through {
            let _ = writeln!(o, "### 2. The shim on a container that asks for nothing\n");
            let _ = writeln!(
                o,
                "| runc | shim | shim/runc | runc again (A/A) | A/A ratio |\n|---|---|---|---|---|"
            );
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |\n",
                p.runc.ms(),
                p.shim.ms(),
                ratio(p.shim.ratio_to(&p.runc)),
                p.runc_again.ms(),
                ratio(p.runc_again.ratio_to(&p.runc)),
            );
        }
        if let Some(d) = &self.docker {
            let _ = writeln!(
                o,
                "### 3. `docker run --rm` of `/bin/true` (private dockerd)\n"
            );
            match d {
                DockerRow::NotMeasured(why) => {
                    let _ = writeln!(o, "{why}\n");
                }
                DockerRow::Measured(f) => {
                    let runs = f.variants.first().map_or(0, |(_, s)| s.len());
                    let _ = writeln!(
                        o,
                        "{} devices, {} libraries, {runs} runs of each, in turn:\n\n\
                         | variant | median [min–max] ms | / native |\n|---|---|---|",
                        f.devices, f.libraries
                    );
                    if let Some((_, native)) = f.variants.first() {
                        for (name, s) in &f.variants {
                            let _ = writeln!(
                                o,
                                "| {name} | {} | {} |",
                                s.ms(),
                                ratio(s.ratio_to(native))
                            );
                        }
                    }
                    let _ = writeln!(o);
                }
            }
        }
        if let Some(d) = &self.discovery {
            let _ = writeln!(
                o,
                "### 5. Discovery in-process, {} devices (one profile, {} libraries)\n",
                d.devices, d.libraries
            );
            let _ = writeln!(o, "| step | median [min–max] ms | p99 ms |\n|---|---|---|");
            for (name, s) in [
                ("load the profile", &d.load),
                ("discover", &d.discover),
                ("resolve host files", &d.resolve),
                ("discover + plan `all`", &d.discover_and_plan),
            ] {
                let _ = writeln!(
                    o,
                    "| {name} | {} | {} |",
                    s.ms(),
                    short(s.quantile(0.99).as_secs_f64() * 1e3)
                );
            }
            let _ = writeln!(o);
        }
        if !self.storm.is_empty() {
            o.push_str(&self.storm_table());
        }
        if let Some(s) = &self.startup {
            o.push_str(&startup_table(s));
        }
        if !self.cdi_finish.is_empty() {
            o.push_str(&cdi_finish_table(&self.cdi_finish));
        }
        o.push_str(&self.targets());
        o
    }

    fn storm_table(&self) -> String {
        let mut o = String::from(
            "### 9. Start storms: N `runc run` at once, one device, no library\n\n\
             | N | rounds | variant | per start median | p99 | batch median | median / native | p99 / native | batch / native |\n\
             |---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.storm {
            let [native, ..] = &r.per_start;
            let native_batch = &r.batch[0];
            let p99 = |s: &Samples| s.quantile(0.99).as_secs_f64() * 1e3;
            for (i, name) in ["native", "hook", "shim", "native again (A/A)"]
                .iter()
                .enumerate()
            {
                let (s, b) = (&r.per_start[i], &r.batch[i]);
                let _ = writeln!(
                    o,
                    "| {} | {} | {name} | {} | {} | {} | {} | {} | {} |",
                    r.parallel,
                    r.rounds,
                    short(ms(s)),
                    short(p99(s)),
                    short(ms(b)),
                    ratio(s.ratio_to(native)),
                    ratio(p99(s) / p99(native)),
                    ratio(b.ratio_to(native_batch)),
                );
            }
        }
        o.push('\n');
        o
    }

    fn targets(&self) -> String {
        let mut o = String::from("### Targets\n\n");
        fn line(o: &mut String, ok: bool, text: String) {
            let _ = writeln!(o, "- {} {text}", if ok { "met:" } else { "MISSED:" });
        }
        if let Some(r) = self
            .matrix
            .iter()
            .find(|r| r.devices == 8 && r.libraries == 64)
        {
            let q = r.hook.ratio_to(&r.native);
            line(
                &mut o,
                q <= targets::HOOK_RATIO,
                format!(
                    "hook/native at 8 devices + 64 libraries {q:.3} (target ≤ {})",
                    targets::HOOK_RATIO
                ),
            );
        }
        for r in self
            .matrix
            .iter()
            .filter(|r| r.devices == 8 && r.libraries == 64)
        {
            line(
                &mut o,
                ms(&r.hook_own) < targets::HOOK_OWN_MS,
                format!(
                    "hook's own wall time at 8 devices + 64 libraries {} ms, CPU {} ms (target < {} ms)",
                    short(ms(&r.hook_own)),
                    short(ms(&r.hook_cpu)),
                    targets::HOOK_OWN_MS
                ),
            );
        }
        let within: Vec<String> = self
            .matrix
            .iter()
            .filter(|r| ms(&r.hook_own) < targets::HOOK_OWN_MS)
            .map(|r| format!("N={} L={}", r.devices, r.libraries))
            .collect();
        if !self.matrix.is_empty() {
            let _ = writeln!(
                o,
                "- hook's own wall time under {} ms at: {}",
                targets::HOOK_OWN_MS,
                if within.is_empty() {
                    "none".to_owned()
                } else {
                    within.join(", ")
                }
            );
            let rss = self
                .matrix
                .iter()
                .map(|r| r.hook_rss.max())
                .max()
                .unwrap_or(0) as f64
                / 1024.0;
            line(
                &mut o,
                rss < targets::HOOK_RSS_MIB,
                format!(
                    "hook peak RSS, largest seen {rss:.2} MiB (target < {} MiB)",
                    targets::HOOK_RSS_MIB
                ),
            );
        }
        for r in self.storm.iter().filter(|r| r.parallel == 50) {
            let p99 = |s: &Samples| s.quantile(0.99).as_secs_f64();
            for (i, name) in [(1, "hook"), (2, "shim")] {
                let q = p99(&r.per_start[i]) / p99(&r.per_start[0]);
                line(
                    &mut o,
                    q <= targets::STORM_P99_RATIO,
                    format!(
                        "{name} per-start p99 in a storm of 50: {q:.3} of native (target ≤ {}; A/A {:.3})",
                        targets::STORM_P99_RATIO,
                        p99(&r.per_start[3]) / p99(&r.per_start[0])
                    ),
                );
            }
        }
        if let Some(s) = &self.startup {
            if let Some(shim) = s.rows.iter().find(|r| r.binary == Binary::Shim) {
                let own = ms(&shim.cpu) - ms(&s.floor);
                line(
                    &mut o,
                    own <= targets::SHIM_NOTHING_CPU_MS,
                    format!(
                        "the shim's own CPU for a container that asks for nothing {own:.2} ms (target ≤ {} ms)",
                        targets::SHIM_NOTHING_CPU_MS
                    ),
                );
            }
        }
        if let Some(p) = &self.pass_through {
            let q = p.shim.ratio_to(&p.runc);
            line(
                &mut o,
                q <= targets::SHIM_PASS_RATIO,
                format!(
                    "shim pass-through {q:.3} (target ≤ {})",
                    targets::SHIM_PASS_RATIO
                ),
            );
        }
        o
    }
}

fn cdi_finish_table(rows: &[CdiFinishRow]) -> String {
    let mut o = String::from(
        "### 14. A CDI spec's finish step: `runc run` with the spec's nodes and mounts, one device\n\n\
         | L | native (no hook) | finish as written now | finish of an earlier spec (ldconfig) | now / native | earlier / native | finish CPU now | finish CPU earlier |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.libraries,
            r.native.ms(),
            r.current.ms(),
            r.earlier.ms(),
            ratio(r.current.ratio_to(&r.native)),
            ratio(r.earlier.ratio_to(&r.native)),
            r.current_cpu.ms(),
            r.earlier_cpu.ms(),
        );
    }
    o.push('\n');
    o
}

fn startup_table(s: &Startup) -> String {
    let mut o = String::from(
        "### 11. Start-up CPU (user + system) per run, from each reaped child's rusage\n\n\
         | binary | build | CPU median ms | p90 | minus `/bin/true` |\n\
         |---|---|---|---|---|\n",
    );
    let floor = ms(&s.floor);
    let _ = writeln!(
        o,
        "| `/bin/true` | – | {} | {} | – |",
        short(floor),
        short(s.floor.quantile(0.9).as_secs_f64() * 1e3)
    );
    for r in &s.rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} |",
            r.binary.label(),
            r.build,
            short(ms(&r.cpu)),
            short(r.cpu.quantile(0.9).as_secs_f64() * 1e3),
            // Only the shim runs `/bin/true` after itself.
            if r.binary == Binary::Shim {
                short(ms(&r.cpu) - floor)
            } else {
                "–".to_owned()
            },
        );
    }
    o.push('\n');
    o
}
