//! `devinject-guest-checks DIR`: the checks the arm64 guest runs on its own kernel
//! (`scripts/arm64-guest.sh`, `tests/tests/arm64/arm64_guest.rs`), with the hook, the shim and the
//! guest's Debian runc, busybox and glibc. `DIR` holds `devinject-hook`, `devinject-runtime`,
//! `demo-use` (a program linked against the demo library by its soname), `cuda-smoke`,
//! `nvidia-root`, `libedgetpu.so.1.0` with `tpu-use`, and `libdemo-other.so.1.0.0`.
//!
//! Each applier in turn:
//! - the demo ([`devinject_harness::demo`]): the granted nodes open, the bound but ungranted one
//!   is refused by the kernel's cgroup device program, and `ldconfig -p` of the guest's glibc
//!   lists the injected library with this machine's flags;
//! - the library found by the cache: `demo-use` on the guest's glibc loads the injected library
//!   from the cache the applier wrote, which `LD_DEBUG=libs` shows;
//! - a hostile image's subset: the linker cache a link to a host file, a FIFO, or the library
//!   directory a link to a host directory. The host canary, and the host paths an escape would
//!   write, must be unchanged after each ([`devinject_harness::canary`]);
//! - NVIDIA's user space for this machine (`DIR/nvidia-root`) injected by the shipped nvidia
//!   profile on a simulated GPU node: `nvidia-smi` and `cuInit` (`DIR/cuda-smoke`) run and stop
//!   at the kernel;
//! - the shipped coral-edgetpu profile on a simulated Edge TPU node: a stand-in for Google's
//!   `libedgetpu.so.1`, in this machine's multiarch directory, found by ld.so in the cache;
//! - the demo library built for the other machine (`DIR/libdemo-other.so.1.0.0`) refused with a
//!   message naming both machines.
//!
//! Prints `guest-check: NAME: ok` or `guest-check: NAME: FAILED: WHY` per check, then
//! `guest-checks: N passed, M failed`; exits 1 when one failed, 2 when it could not run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{ensure, Context, Result};
use devinject_harness::canary::Canary;
use devinject_harness::demo::{self, Applier};
use devinject_harness::hostile::{fifo, link};
use devinject_harness::probe::Report;
use devinject_harness::runc::{container_id, describe, hook_failure, Bundle};
use devinject_harness::sim::{demo_host, demo_probe_args};
use devinject_harness::vendor_node::{coral_node, nvidia_node, APEX_MAJOR};

/// The dynamic loader and glibc's libraries the guest's programs link (`demo-use`, and
/// NVIDIA's libraries: libm, libdl, libpthread, librt), as Debian lays them out (the same path in
/// the container as on the host).
const GLIBC: [&str; 6] = if cfg!(target_arch = "aarch64") {
    [
        "/lib/ld-linux-aarch64.so.1",
        "/lib/aarch64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libm.so.6",
        "/lib/aarch64-linux-gnu/libdl.so.2",
        "/lib/aarch64-linux-gnu/libpthread.so.0",
        "/lib/aarch64-linux-gnu/librt.so.1",
    ]
} else {
    [
        "/lib64/ld-linux-x86-64.so.2",
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/lib/x86_64-linux-gnu/libdl.so.2",
        "/lib/x86_64-linux-gnu/libpthread.so.0",
        "/lib/x86_64-linux-gnu/librt.so.1",
    ]
};

/// Copies [`GLIBC`] and `programs` (into `/usr/bin`) into `rootfs`.
fn glibc_image(rootfs: &Path, programs: &[&Path]) -> Result<()> {
    for file in GLIBC.iter().map(Path::new) {
        let to = rootfs.join(file.strip_prefix("/")?);
        std::fs::create_dir_all(to.parent().context("a parent")?)?;
        std::fs::copy(file, &to).with_context(|| format!("copy {}", file.display()))?;
    }
    for program in programs {
        let name = program.file_name().context("a program's name")?;
        std::fs::copy(program, rootfs.join("usr/bin").join(name))
            .with_context(|| format!("copy {}", program.display()))?;
    }
    Ok(())
}

/// What `demo-use` prints when it ran with the demo library loaded.
const DEMO_USE_OUTPUT: &str = "demo_version 1";

/// What `tpu-use` prints when it ran with the libedgetpu stand-in loaded
/// (scripts/arm64-guest.sh builds both).
const TPU_USE_OUTPUT: &str = "edgetpu_version devinject stand-in";

/// This machine's multiarch library directory, where Debian-style packages (Google's
/// libedgetpu1-std among them) put their libraries.
const MULTIARCH_LIB: &str = if cfg!(target_arch = "aarch64") {
    "/usr/lib/aarch64-linux-gnu"
} else {
    "/usr/lib/x86_64-linux-gnu"
};

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!(
            "usage: devinject-guest-checks DIR (with devinject-hook, devinject-runtime, demo-use)"
        );
        return ExitCode::from(2);
    };
    let hook = dir.join("devinject-hook");
    let shim = dir.join("devinject-runtime");
    let program = dir.join("demo-use");
    let dir = &dir;
    let (mut passed, mut failed) = (0, 0);
    for applier in [Applier::Hook(&hook), Applier::Shim(&shim)] {
        let name = match applier {
            Applier::Hook(_) => "hook",
            Applier::Shim(_) => "shim",
        };
        let checks: [(&str, &dyn Fn() -> Result<()>); 8] = [
            ("demo", &|| {
                ensure!(
                    demo::run(applier)?,
                    "the demo's container saw what it must not"
                );
                Ok(())
            }),
            ("library found by the cache", &|| {
                library_by_cache(applier, &program)
            }),
            ("hostile: the cache a link to a host file", &|| {
                hostile(applier, Trap::CacheLinkToHost)
            }),
            ("hostile: the cache a FIFO", &|| {
                hostile(applier, Trap::CacheFifo)
            }),
            (
                "hostile: the library directory a link to a host directory",
                &|| hostile(applier, Trap::LibDirLinkToHost),
            ),
            (
                "nvidia: NVIDIA's user space, stopped at the kernel",
                &|| nvidia(applier, dir),
            ),
            (
                "coral-edgetpu: the Edge TPU library of this machine",
                &|| coral(applier, dir),
            ),
            ("a library for another machine refused", &|| {
                other_machine(applier, dir)
            }),
        ];
        for (check, run) in checks {
            match run() {
                Ok(()) => {
                    passed += 1;
                    println!("guest-check: {name}: {check}: ok");
                }
                Err(e) => {
                    failed += 1;
                    println!("guest-check: {name}: {check}: FAILED: {e:#}");
                }
            }
        }
    }
    println!("guest-checks: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `demo-use` in a container with the host's glibc and device 0: it must run, and ld.so must
/// have found the demo library in the cache (not by its search path).
fn library_by_cache(applier: Applier<'_>, program: &Path) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let host = demo_host(&tmp.path().join("host"), &["demo"])?;
    let mut bundle = Bundle::new(&tmp.path().join("bundle"), &["/usr/bin/demo-use"])?;
    glibc_image(&bundle.rootfs(), &[program])?;
    bundle.env("DEMO_VISIBLE_DEVICES=0").env("LD_DEBUG=libs");
    let out = bundle.run_applied(applier, &host.config, &container_id("guest"))?;
    ensure!(out.status.success(), "demo-use failed: {}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        stdout.contains(DEMO_USE_OUTPUT),
        "demo-use printed {stdout:?}, not {DEMO_USE_OUTPUT:?}"
    );
    found_in_cache(&String::from_utf8_lossy(&out.stderr), "libdemo.so.1")
}

/// Checks ld.so's `LD_DEBUG=libs` trace `stderr`: it must have found `soname` in the linker
/// cache (`/etc/ld.so.cache`), not by its search path.
fn found_in_cache(stderr: &str, soname: &str) -> Result<()> {
    // The trace for the library (each line `PID:\tTEXT`): `find library=SONAME [0];
    // searching`, then where it looked, up to an empty line.
    let lookup: Vec<&str> = stderr
        .lines()
        .map(|l| l.split_once(':').map_or(l, |(_, text)| text).trim())
        .skip_while(|l| !l.starts_with(&format!("find library={soname}")))
        .take_while(|l| !l.is_empty())
        .collect();
    let text = lookup.join("\n");
    ensure!(
        text.contains("search cache=/etc/ld.so.cache")
            && lookup
                .iter()
                .any(|l| l.starts_with("trying file=") && l.contains(soname))
            && !text.contains("search path="),
        "ld.so did not find {soname} in the cache:\n{text}\n(whole trace: {stderr})"
    );
    Ok(())
}

/// Runs `script` under `/bin/sh` with `env`, in an image of the host's glibc and `program`
/// (a bundle in `bundle_dir`), through `applier` on the host configuration `config`: the
/// container must succeed. Returns its output and [`describe`]'s account of it.
fn run_script(
    applier: Applier<'_>,
    config: &Path,
    bundle_dir: &Path,
    script: &str,
    program: &Path,
    env: &[&str],
) -> Result<(std::process::Output, String)> {
    let mut bundle = Bundle::new(bundle_dir, &["/bin/sh", "-c", script])?;
    glibc_image(&bundle.rootfs(), &[program])?;
    for e in env {
        bundle.env(e);
    }
    let out = bundle.run_applied(applier, config, &container_id("guest"))?;
    let full = describe(&out);
    ensure!(out.status.success(), "the container failed: {full}");
    Ok((out, full))
}

/// The shipped coral-edgetpu profile on an Edge TPU node of this machine (`coral_node`): the
/// stand-in for Google's `libedgetpu.so.1` (`DIR/libedgetpu.so.1.0`, built for this machine
/// with that soname) lies where Google's arm64 package puts it, the multiarch directory, with
/// its soname link. `tpu-use` (linked against it) must run and ld.so find the library in the
/// cache the applier wrote, and `/dev/apex_0` be there with the node's numbers.
fn coral(applier: Applier<'_>, dir: &Path) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let driver_root = tmp.path().join("driver");
    let lib_dir = driver_root.join(MULTIARCH_LIB.trim_start_matches('/'));
    std::fs::create_dir_all(&lib_dir)?;
    std::fs::copy(
        dir.join("libedgetpu.so.1.0"),
        lib_dir.join("libedgetpu.so.1.0"),
    )
    .context("copy the libedgetpu stand-in")?;
    std::os::unix::fs::symlink("libedgetpu.so.1.0", lib_dir.join("libedgetpu.so.1"))?;
    let node = coral_node(&tmp.path().join("host"), &driver_root, &["coral-edgetpu"])?;
    let (out, full) = run_script(
        applier,
        &node.config,
        &tmp.path().join("bundle"),
        "tpu-use && ls -ln /dev/apex_0",
        &dir.join("tpu-use"),
        &["CORAL_EDGETPU_VISIBLE_DEVICES=all", "LD_DEBUG=libs"],
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        stdout.contains(TPU_USE_OUTPUT),
        "tpu-use printed {stdout:?}, not {TPU_USE_OUTPUT:?}"
    );
    let apex = format!("{APEX_MAJOR},");
    ensure!(
        stdout
            .lines()
            .any(|l| l.starts_with('c') && l.contains(&apex) && l.ends_with("/dev/apex_0")),
        "no char node /dev/apex_0 with major {APEX_MAJOR}: {full}"
    );
    found_in_cache(&String::from_utf8_lossy(&out.stderr), "libedgetpu.so.1")
}

/// NVIDIA's 535 user space for this machine (`DIR/nvidia-root`: Debian 12's libcuda1,
/// libnvidia-ptxjitcompiler1, libnvidia-ml1 and nvidia-smi, unpacked) injected by the shipped
/// nvidia profile for GPU 0 of a simulated node: `nvidia-smi` and `cuInit` (`DIR/cuda-smoke`)
/// run on the injected driver and stop only where they talk to the kernel, which has no NVIDIA
/// driver behind the nodes.
fn nvidia(applier: Applier<'_>, dir: &Path) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let node = nvidia_node(
        &tmp.path().join("host"),
        &dir.join("nvidia-root"),
        &["nvidia"],
    )?;
    let (out, full) = run_script(
        applier,
        &node.config,
        &tmp.path().join("bundle"),
        "nvidia-smi -L; echo \"smi exit $?\"; cuda-smoke; ls /dev",
        &dir.join("cuda-smoke"),
        &[
            "NVIDIA_VISIBLE_DEVICES=0",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        ],
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in [
        "couldn't communicate with the NVIDIA driver",
        "cuda-smoke: cuInit failed: 100 CUDA_ERROR_NO_DEVICE",
        "nvidia0",
    ] {
        ensure!(
            stdout.lines().any(|l| l.contains(want)),
            "want {want:?}: {full}"
        );
    }
    Ok(())
}

/// The demo library built for the other machine (`DIR/libdemo-other.so.1.0.0`: x86-64 in the
/// arm64 guest) in the driver root: the start must be refused with a message that names the
/// file, its machine and this host's, never a container whose loader skips the library.
fn other_machine(applier: Applier<'_>, dir: &Path) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let host = demo_host(&tmp.path().join("host"), &["demo"])?;
    std::fs::copy(dir.join("libdemo-other.so.1.0.0"), host.demo_library())
        .context("copy the other machine's demo library")?;
    let mut bundle = Bundle::new(&tmp.path().join("bundle"), &demo_probe_args())?;
    bundle.env("DEMO_VISIBLE_DEVICES=0");
    let out = bundle.run_applied(applier, &host.config, &container_id("guest"))?;
    let full = describe(&out);
    ensure!(!out.status.success(), "the container started: {full}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (this, other) = if cfg!(target_arch = "aarch64") {
        ("AArch64", "x86-64")
    } else {
        ("x86-64", "AArch64")
    };
    let want = format!("is a library for {other}, which this {this} host does not run");
    ensure!(
        stderr.contains(&want) && stderr.contains("libdemo.so.1.0.0"),
        "want {want:?} naming libdemo.so.1.0.0: {full}"
    );
    Ok(())
}

/// A hostile image's trap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trap {
    /// `/etc/ld.so.cache` an absolute link to the host canary's cache.
    CacheLinkToHost,
    /// `/etc/ld.so.cache` a FIFO: never waited on, replaced.
    CacheFifo,
    /// `/usr/lib` an absolute link to the host canary's library directory.
    LibDirLinkToHost,
}

/// Runs the demo probe for device 0 in an image with `trap` set: the container must start and
/// see device 0 and the library, or (the library directory's link) the applier must refuse with
/// its exit code and the path; the canary must be unchanged either way.
fn hostile(applier: Applier<'_>, trap: Trap) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let host = demo_host(&tmp.path().join("host"), &["demo"])?;
    let canary = Canary::new(&tmp.path().join("canary"))?;
    let mut bundle = Bundle::new(&tmp.path().join("bundle"), &demo_probe_args())?;
    bundle.env("DEMO_VISIBLE_DEVICES=0");
    let rootfs = bundle.rootfs();
    match trap {
        Trap::CacheLinkToHost => link(&rootfs, "/etc/ld.so.cache", canary.path("etc/ld.so.cache"))?,
        Trap::CacheFifo => fifo(&rootfs, "/etc/ld.so.cache")?,
        Trap::LibDirLinkToHost => link(&rootfs, "/usr/lib", canary.path("usr/lib"))?,
    }
    let guard = canary.guard();
    let out = bundle.run_applied(applier, &host.config, &container_id("guest"))?;
    let full = describe(&out);
    if trap == Trap::LibDirLinkToHost {
        ensure!(!out.status.success(), "the container started: {full}");
        let f = hook_failure(&out).with_context(|| format!("no hook failure: {full}"))?;
        let line = f.line("devinject: ").unwrap_or_default();
        ensure!(
            f.code == 7 && line.contains("/usr/lib in the container rootfs: ENOENT"),
            "want exit 7 naming /usr/lib, got {} {line:?}: {full}",
            f.code
        );
    } else {
        ensure!(out.status.success(), "must start: {full}");
        let report = Report::parse(&String::from_utf8_lossy(&out.stdout));
        let n = report.node("/dev/demo/accel0");
        ensure!(
            (n.kind.as_str(), n.open.as_str()) == ("c", "ok"),
            "device 0: {n:?}: {full}"
        );
        let lib = report.lib("/usr/lib/libdemo.so.1.0.0");
        ensure!(lib.present && lib.read_only, "library: {lib:?}: {full}");
    }
    let changes = guard.changes();
    ensure!(
        changes.is_empty(),
        "the host changed:\n  {}",
        changes.join("\n  ")
    );
    Ok(())
}
