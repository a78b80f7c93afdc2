//! Row 11: the CPU a start spends in the binaries devinject runs for it before any work is done.
//!
//! The engine runs the runtime shim for every container, several times each (create, start,
//! state, kill, delete), and nearly always for one that asks for nothing; the request policy runs
//! the pod-resources helper for every Kubernetes container that asks for devices. What those runs
//! cost before they do anything useful is paid by every start, and in a start storm by all of
//! them at once on the same cores. So this row times, by CPU (user + system, from the rusage of
//! each reaped child: the rest of the machine inflates it far less than wall time):
//!
//! - `/bin/true`, the floor of any exec;
//! - the shim in front of `/bin/true` for a container that asks for nothing (its config, a look
//!   at the profiles, `config.json`, the exec of the runtime);
//! - the helper asked about a pod on a socket where no kubelet listens (its start-up, its async
//!   runtime, a refused connection, its error);
//!
//! each from the binaries under test and, when given, from a second directory (the same sources
//! built another way, e.g. against glibc where the shipped ones use musl), interleaved run by run
//! so that both see the same machine.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use devinject_podresources::Request;

use devinject_tests::runc::Bundle;

use crate::host::BenchHost;
use crate::stats::{children_cpu, Samples};

/// A binary of row 11.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// The shim for a container that asks for nothing, handing over to `/bin/true`.
    Shim,
    /// The helper asking a socket where no kubelet listens.
    Helper,
}

impl Binary {
    /// Its name in the table.
    pub fn label(self) -> &'static str {
        match self {
            Self::Shim => "shim, no request, in front of `/bin/true`",
            Self::Helper => "devinject-podresources, no kubelet listening",
        }
    }
}

/// One binary's figure.
#[derive(Debug, Clone)]
pub struct StartupRow {
    /// What ran.
    pub binary: Binary,
    /// Which build: `as shipped` or the compared directory.
    pub build: String,
    /// CPU per run.
    pub cpu: Samples,
}

/// Row 11.
#[derive(Debug, Clone, Default)]
pub struct Startup {
    /// `/bin/true` alone.
    pub floor: Samples,
    /// The shim and the helper, per build.
    pub rows: Vec<StartupRow>,
}

/// The binaries of one build.
#[derive(Debug, Clone)]
pub struct Build {
    /// Its name in the table.
    pub name: String,
    /// `devinject-runtime`.
    pub shim: PathBuf,
    /// `devinject-podresources`.
    pub helper: PathBuf,
}

impl Build {
    /// The build in `dir`, named `name`.
    pub fn in_dir(name: &str, dir: &Path) -> Result<Self> {
        Ok(Self {
            name: name.to_owned(),
            shim: crate::existing(dir.join("devinject-runtime"))?,
            helper: crate::existing(dir.join("devinject-podresources"))?,
        })
    }
}

/// Measures row 11 in `dir`: `runs` timed runs of each binary of each build after `warmup`.
pub fn measure(
    dir: &Path,
    host: &BenchHost,
    builds: &[Build],
    runs: usize,
    warmup: usize,
) -> Result<Startup> {
    std::fs::create_dir_all(dir)?;
    // A container that asks for nothing (no request variable, no annotation), with the spec
    // `runc spec` writes, as the shim reads it on every start.
    let bundle = Bundle::new(&dir.join("bundle"), &["/bin/true"])?;
    bundle.write()?;
    let bundle = bundle.dir;
    let true_bin = Path::new("/bin/true");
    let shim_args = |shim: &Path| -> Vec<OsString> {
        vec![
            shim.into(),
            "--config".into(),
            host.config.clone().into(),
            "--runtime".into(),
            true_bin.into(),
            "create".into(),
            "--bundle".into(),
            bundle.clone().into(),
            "startup".into(),
        ]
    };
    // Asks about a pod on a socket where nothing listens.
    let lookup = Request {
        socket: dir.join("no-kubelet.sock"),
        timeout: Duration::from_secs(1),
        namespace: "default".into(),
        pod: "startup".into(),
        container: "main".into(),
    };
    let helper_cmd = |helper: &Path| -> Vec<OsString> {
        let mut v = vec![helper.into()];
        v.extend(lookup.to_args());
        v
    };
    // Per build: the shim's command, the helper's, and whether each must succeed.
    let mut cmds: Vec<(Vec<OsString>, bool)> = vec![(vec![true_bin.into()], true)];
    for b in builds {
        cmds.push((shim_args(&b.shim), true));
        cmds.push((helper_cmd(&b.helper), false));
    }
    let mut samples = vec![Samples::default(); cmds.len()];
    for i in 0..warmup + runs {
        for (j, (cmd, must_succeed)) in cmds.iter().enumerate() {
            let cpu = cpu_of(cmd, *must_succeed)?;
            if i >= warmup {
                samples[j].push(cpu);
            }
        }
    }
    let mut samples = samples.into_iter();
    let floor = samples.next().unwrap_or_default();
    let mut rows = Vec::new();
    for b in builds {
        for binary in [Binary::Shim, Binary::Helper] {
            rows.push(StartupRow {
                binary,
                build: b.name.clone(),
                cpu: samples.next().unwrap_or_default(),
            });
        }
    }
    Ok(Startup { floor, rows })
}

/// Runs `cmd` to its end and returns the CPU (user + system) it used, from the rusage the
/// kernel adds to this process's children when it is reaped. The helper fails by design (no
/// kubelet); `must_succeed` is false for it, but it must still exit rather than die.
fn cpu_of(cmd: &[OsString], must_succeed: bool) -> Result<Duration> {
    let before = children_cpu()?;
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("run {}", Path::new(&cmd[0]).display()))?;
    let after = children_cpu()?;
    if status.code().is_none() || (must_succeed && !status.success()) {
        bail!(
            "{} ended with {status}: run it by hand with the same arguments to see why",
            Path::new(&cmd[0]).display()
        );
    }
    Ok(after.saturating_sub(before))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_burns_cpu_is_charged_for_it() {
        // A fixed amount of shell arithmetic (about 0.3 s of CPU here), not a span of wall time:
        // on a loaded machine a wall-time loop gets only a share of a core, so its CPU is no
        // floor. The figure must see at least 100 ms of it, and /bin/true far less.
        let busy: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            "i=0; while [ $i -lt 150000 ]; do i=$((i + 1)); done".into(),
        ];
        let burnt = cpu_of(&busy, true).unwrap();
        let idle = cpu_of(&["/bin/true".into()], true).unwrap();
        assert!(burnt >= Duration::from_millis(100), "{burnt:?}");
        assert!(idle < burnt / 4, "{idle:?} against {burnt:?}");
    }

    #[test]
    fn a_failure_where_success_is_needed_is_an_error() {
        let e = cpu_of(&["/bin/false".into()], true).unwrap_err();
        assert!(e.to_string().contains("/bin/false ended with"), "{e}");
        assert!(cpu_of(&["/bin/false".into()], false).is_ok());
    }
}
