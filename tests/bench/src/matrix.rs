//! Rows 1 and 2: container start with N devices and L libraries, natively, through the hook and
//! through the shim; and the shim in front of a container that asks for nothing.
//!
//! The variants of one row are started in turn (native, hook, shim, hook timed, shim alone, then
//! again, each round starting one further: [`in_turn`]), so a slow spell on a shared machine hits
//! them all alike, after a few untimed warm-up rounds. Before any timing, each variant is started once with the probe as its process, which
//! checks that every device node and library really is there: a benchmark of a broken injection
//! would be meaningless.

use std::path::Path;

use anyhow::{bail, ensure, Result};

use crate::host::{BenchHost, HostFactory};
use crate::start::{Case, Setup, Variant};
use crate::stats::{Kib, Samples};
use crate::timer::read_records;
use crate::Options;
use devinject_tests::probe::{probe_args, Report};
use devinject_tests::runc::container_id;

/// The figures of one (N, L) row.
#[derive(Debug, Clone)]
pub struct MatrixRow {
    /// Devices injected.
    pub devices: usize,
    /// Libraries injected.
    pub libraries: usize,
    /// `runc run` with everything in `config.json`.
    pub native: Samples,
    /// `runc run` with the hook.
    pub hook: Samples,
    /// The shim in front of `runc run`.
    pub shim: Samples,
    /// The hook's own wall time.
    pub hook_own: Samples,
    /// The hook's own CPU time (with its children).
    pub hook_cpu: Samples,
    /// The hook's peak RSS.
    pub hook_rss: Kib,
    /// The shim's own wall time (planning and the `config.json` rewrite, then exec).
    pub shim_own: Samples,
    /// The shim's own CPU time.
    pub shim_cpu: Samples,
    /// The shim's peak RSS.
    pub shim_rss: Kib,
}

/// Row 2: the shim in front of a container that asks for nothing.
#[derive(Debug, Clone)]
pub struct PassThrough {
    /// Plain `runc run`.
    pub runc: Samples,
    /// The same through the shim.
    pub shim: Samples,
    /// Plain `runc run` again, from a second bundle: the A/A ratio shows what difference the
    /// machine's noise alone makes.
    pub runc_again: Samples,
}

/// The order of the variants in round `round`: each round starts one further, so that every
/// variant runs in every position equally often. (With a fixed order, whatever the previous
/// start left for the kernel to finish landed on the first variant of the next round: the A/A
/// pair of row 2 differed by 7% at 40 runs.)
pub fn in_turn(len: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..len).map(move |i| (i + round) % len)
}

/// The wall time, CPU time and peak RSS `devinject-bench time` recorded for the timed starts of
/// `case` (one record per start, the warm-up ones first).
pub(crate) fn own_figures(opts: &Options, case: &Case) -> Result<(Samples, Samples, Kib)> {
    let name = case.variant.name();
    let recs = read_records(case.record.as_deref().expect("timed case has a record"))?;
    ensure!(
        recs.len() == opts.warmup + opts.runs,
        "{name}: {} timing records for {} starts",
        recs.len(),
        opts.warmup + opts.runs
    );
    let (mut wall, mut cpu, mut rss) = (Samples::default(), Samples::default(), Kib::default());
    for r in recs.iter().skip(opts.warmup) {
        ensure!(r.code == 0, "{name} exited with {}", r.code);
        wall.push(r.wall);
        cpu.push(r.cpu);
        rss.push(r.max_rss_kib);
    }
    Ok((wall, cpu, rss))
}

/// Starts every case `opts.warmup` untimed then `opts.runs` timed times, the cases taking turns
/// ([`in_turn`]); the timed starts of each case.
pub(crate) fn timed_in_turn(opts: &Options, cases: &[&Case]) -> Result<Vec<Samples>> {
    let mut samples = vec![Samples::default(); cases.len()];
    for round in 0..opts.warmup + opts.runs {
        for i in in_turn(cases.len(), round) {
            let t = cases[i].start(&container_id("bench"))?;
            if round >= opts.warmup {
                samples[i].push(t);
            }
        }
    }
    Ok(samples)
}

/// Runs row 1 for every (N, L) in `opts`.
pub fn measure(
    opts: &Options,
    dir: &Path,
    setup: &Setup,
    factory: &HostFactory,
) -> Result<Vec<MatrixRow>> {
    let mut rows = Vec::new();
    for &n in &opts.devices {
        for &l in &opts.libraries {
            let host = factory.host(n, l)?;
            eprintln!("bench: {n} devices, {l} libraries");
            rows.push(row(opts, &dir.join(format!("{n}-{l}")), setup, &host)?);
        }
    }
    Ok(rows)
}

fn row(opts: &Options, dir: &Path, setup: &Setup, host: &BenchHost) -> Result<MatrixRow> {
    let order = [
        Variant::Native,
        Variant::Hook,
        Variant::Shim,
        Variant::HookTimed,
        Variant::ShimOnly,
    ];
    let cases = order
        .iter()
        .map(|&v| Case::new(v, &dir.join(v.slug()), setup, host))
        .collect::<Result<Vec<_>>>()?;
    for c in &cases {
        if c.variant == Variant::ShimOnly {
            c.forget_records();
        } else {
            verify(c, host)?;
        }
    }
    let samples = timed_in_turn(opts, &cases.iter().collect::<Vec<_>>())?;
    let own = |v: Variant| -> Result<(Samples, Samples, Kib)> {
        own_figures(opts, cases.iter().find(|c| c.variant == v).expect("case"))
    };
    let (hook_own, hook_cpu, hook_rss) = own(Variant::HookTimed)?;
    let (shim_own, shim_cpu, shim_rss) = own(Variant::ShimOnly)?;
    let mut it = samples.into_iter();
    let mut next = || it.next().expect("one sample set per case");
    Ok(MatrixRow {
        devices: host.nodes.len(),
        libraries: host.libs.len(),
        native: next(),
        hook: next(),
        shim: next(),
        hook_own,
        hook_cpu,
        hook_rss,
        shim_own,
        shim_cpu,
        shim_rss,
    })
}

/// The library paths the probe checks: each library file and its soname link.
pub fn probe_libs(host: &BenchHost) -> Vec<String> {
    let mut libs = Vec::new();
    for l in &host.libs {
        libs.push(format!("/usr/lib/{}", l.file_name));
        libs.push(format!("/usr/lib/{}", l.soname));
    }
    libs
}

/// Starts `case` once with the probe and checks what it reports (its timing record, if any,
/// is removed after: only timed starts count).
pub(crate) fn verify(case: &Case, host: &BenchHost) -> Result<()> {
    let nodes: Vec<&str> = host
        .nodes
        .iter()
        .map(|n| n.container_path.as_str())
        .collect();
    let libs = probe_libs(host);
    let lib_refs: Vec<&str> = libs.iter().map(String::as_str).collect();
    let out = case.run_args(&container_id("verify"), &probe_args(&nodes, &lib_refs))?;
    if !out.status.success() {
        bail!(
            "{}: probe container failed: {}",
            case.variant.name(),
            devinject_tests::runc::describe(&out)
        );
    }
    case.forget_records();
    let expect = if case.variant == Variant::Native {
        Libraries::Native
    } else {
        Libraries::Injected
    };
    check_probe(
        case.variant.name(),
        &String::from_utf8_lossy(&out.stdout),
        host,
        expect,
    )
}

/// What a variant's container must show of the libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libraries {
    /// Each mounted read-only under its file name (`-v` as native passes it).
    Native,
    /// Each under its file name, its soname linked and in the linker cache.
    Injected,
    /// Each under its soname alone, in the linker cache (`library_names = "soname"`).
    InjectedBySoname,
}

/// Checks a probe report: every node with its numbers, and every library as `expect` says.
pub fn check_probe(name: &str, stdout: &str, host: &BenchHost, expect: Libraries) -> Result<()> {
    let report = Report::parse(stdout);
    for n in &host.nodes {
        let r = report.nodes.get(&n.container_path);
        ensure!(
            r.is_some_and(|r| r.kind == "c" && r.major == crate::host::MAJOR && r.minor == n.minor),
            "{name}: node {} wrong or missing: {r:?}",
            n.container_path
        );
    }
    for l in &host.libs {
        let file = report.libs.get(&format!("/usr/lib/{}", l.file_name));
        let soname = report.libs.get(&format!("/usr/lib/{}", l.soname));
        if expect == Libraries::InjectedBySoname {
            ensure!(
                soname.is_some_and(|r| r.present && r.read_only && r.in_ldcache),
                "{name}: library {} not mounted read-only or not in the linker cache: {soname:?}",
                l.soname
            );
            ensure!(
                file.is_some_and(|r| !r.present),
                "{name}: {} is there beside its soname: {file:?}",
                l.file_name
            );
            continue;
        }
        ensure!(
            file.is_some_and(|r| r.present && r.read_only),
            "{name}: library {} not mounted read-only: {file:?}",
            l.file_name
        );
        if expect == Libraries::Injected {
            ensure!(
                soname.is_some_and(|r| r.present && r.in_ldcache),
                "{name}: soname {} not linked or not in the linker cache: {soname:?}",
                l.soname
            );
        }
    }
    Ok(())
}

/// Runs row 2 on `host` (its profiles are installed; the container asks for none).
pub fn pass_through(
    opts: &Options,
    dir: &Path,
    setup: &Setup,
    host: &BenchHost,
) -> Result<PassThrough> {
    eprintln!("bench: shim pass-through");
    let runc = Case::new(
        Variant::Plain,
        &dir.join(Variant::Plain.slug()),
        setup,
        host,
    )?;
    let shim = Case::new(
        Variant::ShimNothing,
        &dir.join(Variant::ShimNothing.slug()),
        setup,
        host,
    )?;
    let again = Case::new(Variant::Plain, &dir.join("runc-again"), setup, host)?;
    let cases = [&runc, &shim, &again];
    let samples = timed_in_turn(opts, &cases)?;
    let mut it = samples.into_iter();
    let mut next = || it.next().expect("one sample set per case");
    Ok(PassThrough {
        runc: next(),
        shim: next(),
        runc_again: next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_takes_every_position_in_turn() {
        let rounds: Vec<Vec<usize>> = (0..3).map(|r| in_turn(3, r).collect()).collect();
        assert_eq!(rounds, [[0, 1, 2], [1, 2, 0], [2, 0, 1]]);
    }
}
