//! Row 3: `docker run --device ... -v lib:lib:ro` against `docker run --runtime=devinject -e ...`
//! (the shim) and the hook-only wrapper runtime, on a private docker engine
//! ([`devinject_tests::docker::Engine`]: its own containerd and dockerd, never the host's daemon).
//!
//! Every `docker run --rm` of `/bin/true` is timed from the CLI's spawn to its exit: the API
//! call, containerd, the runc shim, runc (and devinject), the container's exit and its removal.
//! The variants take turns, and each is checked once with the probe first, as in row 1.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Result};

use crate::host::{BenchHost, REQUEST_ENV};
use crate::matrix::{check_probe, in_turn, Libraries};
use crate::start::Binaries;
use crate::stats::Samples;
use crate::Options;
use devinject_tests::docker::{Engine, RuntimeEntry, IMAGE};
use devinject_tests::probe::probe_args;
use devinject_tests::runc::describe;
use devinject_tests::skip::which;

/// The shim's runtime name.
const SHIM: &str = "devinject";
/// The shim with the bench profile's `library_names = "soname"`.
const SHIM_SONAME: &str = "devinject-soname";
/// The hook-only wrapper's runtime name.
const HOOK_ONLY: &str = "devinject-hook-only";
/// The hook-only wrapper with the bench profile's `library_names = "soname"`.
const HOOK_ONLY_SONAME: &str = "devinject-hook-only-soname";
/// runc itself, registered with an argument: dockerd 20.10 then runs it through the same
/// generated wrapper script as the runtimes above, which the default runtime does without.
const RUNC_WITH_ARGS: &str = "runc-with-args";

/// Row 3's figures.
#[derive(Debug, Clone)]
pub struct DockerFigures {
    pub devices: usize,
    pub libraries: usize,
    /// Each variant's name and samples, native first (what the others are divided by), with
    /// native again among them (the A/A pair that shows the noise).
    pub variants: Vec<(&'static str, Samples)>,
}

/// The outcome of row 3.
#[derive(Debug, Clone)]
pub enum DockerRow {
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
    let soname_config = arg(&host.soname_config);
    let mut runtimes = vec![
        RuntimeEntry::new(SHIM, &bins.shim, &["--config", &config, "--runtime", &runc]),
        RuntimeEntry::new(
            SHIM_SONAME,
            &bins.shim,
            &["--config", &soname_config, "--runtime", &runc],
        ),
        RuntimeEntry::new(RUNC_WITH_ARGS, &bins.runc, &["--debug=false"]),
    ];
    if let Some(wrapper) = &bins.hook_only_runtime {
        let hook = arg(&bins.hook);
        for (name, config) in [(HOOK_ONLY, &config), (HOOK_ONLY_SONAME, &soname_config)] {
            runtimes.push(RuntimeEntry::new(
                name,
                wrapper,
                &["--hook", &hook, "--config", config, "--runtime", &runc],
            ));
        }
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
        (
            "--device + -v :ro (native)",
            native.clone(),
            Libraries::Native,
        ),
        (
            "same, runc via dockerd's wrapper script",
            wrapped,
            Libraries::Native,
        ),
        (
            "--runtime=devinject (shim)",
            injected(SHIM),
            Libraries::Injected,
        ),
        (
            "shim, `library_names = \"soname\"`",
            injected(SHIM_SONAME),
            Libraries::InjectedBySoname,
        ),
        ("native again (A/A)", native, Libraries::Native),
    ];
    if bins.hook_only_runtime.is_some() {
        variants.push((
            "hook-only runtime",
            injected(HOOK_ONLY),
            Libraries::Injected,
        ));
        variants.push((
            "hook-only runtime, `library_names = \"soname\"`",
            injected(HOOK_ONLY_SONAME),
            Libraries::InjectedBySoname,
        ));
    }

    let nodes: Vec<&str> = host
        .nodes
        .iter()
        .map(|n| n.container_path.as_str())
        .collect();
    let libs = crate::matrix::probe_libs(host);
    let lib_refs: Vec<&str> = libs.iter().map(String::as_str).collect();
    for (name, args, expect) in &variants {
        let mut a: Vec<String> = args.clone();
        a.push(IMAGE.into());
        a.extend(probe_args(&nodes, &lib_refs));
        let out = engine.docker(&a.iter().map(String::as_str).collect::<Vec<_>>());
        if !out.status.success() {
            bail!("docker {name}: probe container failed: {}", describe(&out));
        }
        check_probe(name, &String::from_utf8_lossy(&out.stdout), host, *expect)?;
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
    Ok(DockerFigures {
        devices: host.nodes.len(),
        libraries: host.libs.len(),
        variants: variants
            .iter()
            .map(|(name, _, _)| *name)
            .zip(samples)
            .collect(),
    })
}
