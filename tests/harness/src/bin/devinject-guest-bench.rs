//! `devinject-guest-bench ROUNDS DIR`: the start cost of a container through the hook and the
//! shim against plain runc, measured inside the arm64 guest (`scripts/arm64-guest.sh bench`),
//! where absolute times under emulation mean nothing and only ratios do. `DIR` holds
//! `devinject-hook` and `devinject-runtime`.
//!
//! Four variants start `/bin/true` in a busybox bundle, interleaved, their order rotated each
//! round: runc twice (the A/A pair, which shows the noise), the hook and the shim, both asked
//! for demo device 0 (a node, the library, the linker cache). Each start is `runc run` to the
//! container's exit, timed from outside. Prints `guest-bench: VARIANT: median M ms, ratio R` per
//! variant (R: the median over the first runc's).

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use devinject_harness::runc::{container_id, describe, runc_path, shim_command_of, Bundle};
use devinject_harness::sim::demo_host;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(Ok(rounds)), Some(dir)) = (args.next().map(|r| r.parse::<usize>()), args.next())
    else {
        eprintln!(
            "usage: devinject-guest-bench ROUNDS DIR (with devinject-hook, devinject-runtime)"
        );
        return ExitCode::from(2);
    };
    match bench(rounds.max(1), Path::new(&dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-guest-bench: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// How a variant starts its container.
enum Start {
    /// `runc run`, with whatever hooks the bundle has.
    Runc,
    /// The shim in front of runc.
    Shim(Vec<String>),
}

fn bench(rounds: usize, dir: &Path) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let host = demo_host(&tmp.path().join("host"), &["demo"])?;
    let bundle =
        |name: &str| -> Result<Bundle> { Bundle::new(&tmp.path().join(name), &["/bin/true"]) };
    let mut hook = bundle("hook")?;
    hook.env("DEMO_VISIBLE_DEVICES=0").hook(
        "createRuntime",
        &dir.join("devinject-hook"),
        &host.config,
    );
    let mut shim = bundle("shim")?;
    shim.env("DEMO_VISIBLE_DEVICES=0");
    let shim_cmd = shim_command_of(&dir.join("devinject-runtime"), &host.config, &runc_path());
    let mut variants: Vec<(&str, Bundle, Start, Vec<Duration>)> = vec![
        ("runc", bundle("runc-a")?, Start::Runc, Vec::new()),
        ("runc (A/A)", bundle("runc-b")?, Start::Runc, Vec::new()),
        ("hook", hook, Start::Runc, Vec::new()),
        ("shim", shim, Start::Shim(shim_cmd), Vec::new()),
    ];
    let start = |b: &Bundle, how: &Start| -> Result<Duration> {
        let id = container_id("bench");
        let t = Instant::now();
        let out = match how {
            Start::Runc => b.run(&id)?,
            Start::Shim(cmd) => {
                let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
                b.run_with(&cmd, &id)?
            }
        };
        let took = t.elapsed();
        ensure!(out.status.success(), "the start failed: {}", describe(&out));
        Ok(took)
    };
    // One start each first: the page cache and runc's first-run work are not the variants'.
    for (name, b, how, _) in &variants {
        start(b, how).with_context(|| format!("{name}'s warm-up start"))?;
    }
    let n = variants.len();
    for round in 0..rounds {
        for k in 0..n {
            let (name, b, how, times) = &mut variants[(round + k) % n];
            let took = start(b, how).with_context(|| format!("{name}, round {round}"))?;
            times.push(took);
        }
    }
    let base = median(&variants[0].3);
    for (name, _, _, times) in &variants {
        let m = median(times);
        println!(
            "guest-bench: {name}: median {:.1} ms, ratio {:.2} (n={})",
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() / base.as_secs_f64(),
            times.len()
        );
    }
    Ok(())
}

fn median(times: &[Duration]) -> Duration {
    let mut v = times.to_vec();
    v.sort();
    v[v.len() / 2]
}
