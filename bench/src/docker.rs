//! Row 3: `docker run --device ... -v lib:lib:ro` against `docker run --runtime=devinject -e ...`
//! (the shim) and the hook-only wrapper runtime, on a private docker engine
//! ([`devinject_tests::docker::Engine`]: its own containerd and dockerd, never the host's daemon).
//!
//! Every `docker run --rm` of `/bin/true` is timed from the CLI's spawn to its exit: the API
//! call, containerd, the runc shim, runc (and devinject), the container's exit and its removal.
//! The variants take turns, and each is checked once with the probe first, as in row 1.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::host::{BenchHost, REQUEST_ENV};
use crate::matrix::{check_probe, in_turn};
use crate::start::Binaries;
use crate::stats::Samples;
use crate::Options;
use devinject_tests::docker::{Engine, RuntimeEntry, IMAGE};
use devinject_tests::probe::probe_args;
use devinject_tests::runc::describe;
use devinject_tests::skip::which;

/// The shim's runtime name.
const SHIM: &str = "devinject";
/// The hook-only wrapper's runtime name.
const HOOK_ONLY: &str = "devinject-hook-only";
/// runc itself, registered with an argument: dockerd 20.10 then runs it through the same
/// generated wrapper script as the runtimes above, which the default runtime does without.
const RUNC_WITH_ARGS: &str = "runc-with-args";

/// Row 3's figures.
#[derive(Debug, Clone)]
pub struct DockerFigures {
    /// Devices.
    pub devices: usize,
    /// Libraries.
    pub libraries: usize,
    /// `--device` and `-v ...:ro` flags.
    pub native: Samples,
    /// The same flags, with runc registered with an argument (`--debug=false`), so that dockerd
    /// starts it through its wrapper script as it does the shim: isolates that script's cost.
    pub native_wrapped: Samples,
    /// `--runtime=devinject -e ...`.
    pub shim: Samples,
    /// The hook-only wrapper runtime, when built.
    pub hook: Option<Samples>,
    /// `native` again, in its own turn: the A/A pair that shows the noise.
    pub native_again: Samples,
}

/// The outcome of row 3.
#[derive(Debug, Clone)]
pub enum DockerRow {
    /// Measured.
    Measured(DockerFigures),
    /// Why the row was not measured.
    NotMeasured(String),
}

/// Measures row 3 on `host`, or says why it could not.
pub fn measure(opts: &Options, host: &BenchHost, bins: &Binaries) -> DockerRow {
    let missing: Vec<&str> = [
        "containerd",
        "containerd-shim-runc-v2",
        "dockerd",
        "docker",
        "tar",
    ]
    .into_iter()
    .filter(|b| which(b).is_none())
    .collect();
    if !missing.is_empty() {
        return DockerRow::NotMeasured(format!(
            "not measured: {} not installed (scripts/install-deps.sh test installs them)",
            missing.join(", ")
        ));
    }
    eprintln!(
        "bench: docker, {} devices, {} libraries",
        host.nodes.len(),
        host.libs.len()
    );
    match run(opts, host, bins) {
        Ok(f) => DockerRow::Measured(f),
        Err(e) => DockerRow::NotMeasured(format!("not measured: the docker run failed: {e:#}")),
    }
}

fn arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn run(opts: &Options, host: &BenchHost, bins: &Binaries) -> Result<DockerFigures> {
    let runc = arg(&bins.runc);
    let config = arg(&host.config);
    let mut runtimes = vec![
        RuntimeEntry::new(SHIM, &bins.shim, &["--config", &config, "--runtime", &runc]),
        RuntimeEntry::new(RUNC_WITH_ARGS, &bins.runc, &["--debug=false"]),
    ];
    if let Some(wrapper) = &bins.hook_only_runtime {
        let hook = arg(&bins.hook);
        runtimes.push(RuntimeEntry::new(
            HOOK_ONLY,
            wrapper,
            &["--hook", &hook, "--config", &config, "--runtime", &runc],
        ));
    }
    let engine = Engine::start(&runtimes)?;
    engine.import_busybox()?;

    let mut native: Vec<String> = vec!["run".into(), "--rm".into()];
    for n in &host.nodes {
        native.push("--device".into());
        native.push(format!("{}:{}", n.host_path.display(), n.container_path));
    }
    for l in &host.libs {
        native.push("-v".into());
        native.push(format!(
            "{}:/usr/lib/{}:ro",
            l.host_path.display(),
            l.file_name
        ));
    }
    let request = format!("{REQUEST_ENV}=all");
    let injected = |runtime: &str| -> Vec<String> {
        [
            "run",
            "--rm",
            &format!("--runtime={runtime}"),
            "-e",
            &request,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let mut wrapped = native.clone();
    wrapped.insert(2, format!("--runtime={RUNC_WITH_ARGS}"));
    let mut variants = vec![
        ("native", native.clone(), false),
        ("native, wrapped", wrapped, false),
        ("shim", injected(SHIM), true),
        ("native again", native, false),
    ];
    if bins.hook_only_runtime.is_some() {
        variants.push(("hook", injected(HOOK_ONLY), true));
    }

    let nodes: Vec<&str> = host
        .nodes
        .iter()
        .map(|n| n.container_path.as_str())
        .collect();
    let libs = crate::matrix::probe_libs(host);
    let lib_refs: Vec<&str> = libs.iter().map(String::as_str).collect();
    for (name, args, injects) in &variants {
        let mut a: Vec<String> = args.clone();
        a.push(IMAGE.into());
        a.extend(probe_args(&nodes, &lib_refs));
        let out = engine.docker(&a.iter().map(String::as_str).collect::<Vec<_>>());
        if !out.status.success() {
            bail!("docker {name}: probe container failed: {}", describe(&out));
        }
        check_probe(name, &String::from_utf8_lossy(&out.stdout), host, *injects)?;
    }

    let mut samples = vec![Samples::default(); variants.len()];
    for round in 0..opts.warmup + opts.docker_runs {
        for i in in_turn(variants.len(), round) {
            let ((name, args, _), s) = (&variants[i], &mut samples[i]);
            let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
            a.extend([IMAGE, "/bin/true"]);
            let start = Instant::now();
            let out = engine.docker(&a);
            let t = start.elapsed();
            if !out.status.success() {
                bail!("docker run ({name}) failed: {}", describe(&out));
            }
            if round >= opts.warmup {
                s.push(t);
            }
        }
    }
    let mut it = samples.into_iter();
    Ok(DockerFigures {
        devices: host.nodes.len(),
        libraries: host.libs.len(),
        native: it.next().context("native samples")?,
        native_wrapped: it.next().context("wrapped native samples")?,
        shim: it.next().context("shim samples")?,
        native_again: it.next().context("native again samples")?,
        hook: it.next(),
    })
}
