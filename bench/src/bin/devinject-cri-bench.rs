//! `devinject-cri-bench`: what each injection path costs a container start on containerd 1.7
//! (Debian 13's, from scripts/runtimes-fetch.sh), driven through CRI as the kubelet drives it.
//! One containerd with every path on: CDI, NRI and the `devinject` runtime entry. The same
//! container (`/bin/true`, the demo devices 0 and 1 and the demo library) is created, started
//! and waited for, in rounds that alternate the paths:
//!
//! - native: the nodes as CRI `devices` and the library as a read-only CRI mount, plain runc
//!   (what a device plugin's `DeviceSpec`s and mounts give; no linker cache), twice per round
//!   (an A/A pair: the noise of the machine);
//! - shim: the request variable, in a pod on the `devinject` runtime;
//! - CDI: the device plugin's `cdi.k8s.io/` annotation, plain runc;
//! - NRI: the request variable, plain runc, with `devinject-nri` connected (a second block of
//!   rounds, against its own native column: NRI asks the plugin about every container, those
//!   asking for nothing too, and that cost is in both of its columns).
//!
//! Prints a Markdown section on stdout. Binaries come from `DEVINJECT_BIN_DIR` (scripts/bench.sh
//! points it at the release build). Needs root. Figures are wall times: run on a quiet machine.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;
use devinject_benchmarks::stats::{short, Samples};
use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{Paths, ReleaseNode};
use devinject_tests::runtimes;
use devinject_tests::sim::LIB;

/// Rounds per block, unless `--rounds` says otherwise.
const ROUNDS: usize = 20;
/// Rounds run first and not counted (page cache, containerd's first-use costs).
const WARMUP: usize = 3;

fn spec(node: &ReleaseNode, path: &str) -> ContainerSpec {
    let mut s = ContainerSpec {
        name: format!("bench-{path}"),
        image: BUSYBOX.into(),
        command: vec!["/bin/true".into()],
        log_path: format!("{path}.log"),
        ..ContainerSpec::default()
    };
    match path {
        "native" | "native-again" => {
            for n in ["accel0", "accel1", "ctl"] {
                s.devices.push((
                    node.host.dev_root.join("demo").join(n),
                    PathBuf::from("/dev/demo").join(n),
                ));
            }
            let lib = node
                .host
                .driver_root
                .join("opt/devinject-demo/lib/libdemo.so.1.0.0");
            s.mounts.push((lib, PathBuf::from(LIB)));
        }
        "cdi" => {
            s.annotations.insert(
                "cdi.k8s.io/devinject_demo".into(),
                "devinject.io/demo=0,devinject.io/demo=1".into(),
            );
        }
        _ => s.env.push(("DEMO_VISIBLE_DEVICES".into(), "0,1".into())),
    }
    s
}

/// Runs `rounds` rounds of `paths` (each `(column, pod handler)`), alternating, each round
/// starting one path later than the one before (the first start of a round is the slower one);
/// the samples per path.
fn block(node: &mut ReleaseNode, paths: &[(&str, &str)], rounds: usize) -> Result<Vec<Samples>> {
    let mut pods = Vec::new();
    for (path, handler) in paths {
        pods.push(node.pod(&format!("bench-{path}"), handler)?);
    }
    let specs: Vec<ContainerSpec> = paths.iter().map(|(p, _)| spec(node, p)).collect();
    let mut samples = vec![Samples::default(); paths.len()];
    for round in 0..WARMUP + rounds {
        for k in 0..paths.len() {
            let i = (round + k) % paths.len();
            let ((pod, config), spec) = (&pods[i], &specs[i]);
            let start = Instant::now();
            match node.run(pod, config, spec)? {
                Ok((0, _)) => {}
                Ok((code, out)) => bail!("{} exited {code}: {out}", spec.name),
                Err(e) => bail!("{}: {e}", spec.name),
            }
            if round >= WARMUP {
                samples[i].push(start.elapsed());
            }
        }
    }
    for (pod, _) in &pods {
        node.cri.remove_pod(pod)?;
    }
    Ok(samples)
}

fn run(rounds: usize) -> Result<()> {
    let release = runtimes::containerd("1.7")
        .context("containerd 1.7 is not fetched (scripts/runtimes-fetch.sh)")?;
    let paths = Paths {
        cdi: true,
        nri: true,
        shim: true,
        accel_group: None,
        host_config: "policy = \"env\"".into(),
    };
    let mut node = ReleaseNode::start(&release, &paths)?;
    let first = block(
        &mut node,
        &[
            ("native", ""),
            ("shim", "devinject"),
            ("cdi", ""),
            ("native-again", ""),
        ],
        rounds,
    )?;
    node.start_nri_plugin()?;
    let second = block(&mut node, &[("native", ""), ("nri", "")], rounds)?;
    node.stop_nri_plugin();

    println!(
        "### Container start by injection path (containerd {})",
        release.version
    );
    println!();
    println!(
        "Create, start and exit of one container (`/bin/true`, demo devices 0 and 1 and the \
         demo library) through CRI, {rounds} rounds after {WARMUP} not counted, paths \
         alternating, each round starting with the next. Milliseconds: median [min–max]; ratio of medians to the native column \
         of the same block."
    );
    println!();
    println!("| path | ms | ratio to native |");
    println!("|---|---|---|");
    let rows = [
        ("native (CRI devices and mount)", &first[0], &first[0]),
        ("native again (A/A)", &first[3], &first[0]),
        ("runtime shim", &first[1], &first[0]),
        ("CDI (containerd injects)", &first[2], &first[0]),
        ("native, devinject-nri connected", &second[0], &first[0]),
        ("NRI plugin", &second[1], &second[0]),
    ];
    for (name, s, base) in rows {
        println!("| {name} | {} | {} |", s.ms(), short(s.ratio_to(base)));
    }
    Ok(())
}

/// Benchmark: what each injection path (CDI, NRI, the devinject runtime) costs a container start
/// on containerd 1.7, driven through CRI as the kubelet drives it, against the native path.
///
/// Prints a Markdown section on stdout; the figures are in docs/benchmarks.md. Binaries come
/// from DEVINJECT_BIN_DIR. Needs root and containerd 1.7 from scripts/runtimes-fetch.sh; run it
/// on a quiet machine, through scripts/bench.sh.
#[derive(Parser, Debug)]
#[command(name = "devinject-cri-bench")]
struct Cli {
    /// Rounds per block (each path once per round).
    #[arg(long, default_value_t = ROUNDS)]
    rounds: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.rounds == 0 {
        eprintln!("devinject-cri-bench: --rounds must be at least 1");
        return ExitCode::FAILURE;
    }
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("devinject-cri-bench: needs root");
        return ExitCode::FAILURE;
    }
    match run(cli.rounds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-cri-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
