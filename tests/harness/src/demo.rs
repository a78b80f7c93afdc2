//! The demo: a real runc container asks for two simulated `demo` accelerators, and what it sees
//! is printed and checked against what devinject promises. Run by `devinject-demo` (the README's
//! main command, through the hook) and by `devinject-guest-checks` (through the hook and the
//! shim, in the arm64 guest).

use anyhow::{Context, Result};

use crate::probe::Report;
pub use crate::runc::Applier;
use crate::runc::{container_id, describe, Bundle};
use crate::sim::{demo_host, ACCELS, CTL};

/// The flags `ldconfig -p` prints for a library of this machine: ld.so takes a cache entry only
/// with its own (glibc's `_DL_CACHE_DEFAULT_ID`), so the demo checks the injected library's.
pub const LDCONFIG_FLAGS: &str = if cfg!(target_arch = "aarch64") {
    "(libc6,AArch64)"
} else {
    "(libc6,x86-64)"
};

/// Runs the demo with `applier` under a temporary directory, printing what the container sees;
/// `Ok(false)` when that is not what devinject promises.
pub fn run(applier: Applier<'_>) -> Result<bool> {
    let tmp = tempfile::Builder::new()
        .prefix("devinject-demo-")
        .tempdir()?;
    let host = demo_host(&tmp.path().join("host"), &["demo"]).context("simulated host")?;
    let lib = "/usr/lib/libdemo.so.1.0.0";
    let mut nodes: Vec<String> = ACCELS
        .iter()
        .map(|(n, _, _)| format!("/dev/demo/{n}"))
        .collect();
    nodes.push(format!("/dev/demo/{}", CTL.0));
    let script = format!(
        "/bin/sh /probe.sh {} -- {lib}; echo '--- ldconfig -p | grep libdemo'; ldconfig -p | grep libdemo; echo '--- demo-smi (injected binary)'; demo-smi",
        nodes.join(" ")
    );
    let mut bundle = Bundle::new(&tmp.path().join("bundle"), &["/bin/sh", "-c", &script])?;
    bundle
        .env("DEMO_VISIBLE_DEVICES=0,1")
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    match applier {
        Applier::Hook(_) => println!(
            "devinject demo: runc container with DEMO_VISIBLE_DEVICES=0,1 (hook: createRuntime)"
        ),
        Applier::Shim(shim) => println!(
            "devinject demo: runc container with DEMO_VISIBLE_DEVICES=0,1 (runtime: {})",
            shim.display()
        ),
    }
    println!(
        "  simulated host: {} (4 accelerators + control node, libdemo.so.1)",
        host.dir.display()
    );
    let out = bundle.run_applied(applier, &host.config, &container_id("demo"))?;
    if !out.status.success() {
        println!("{}", describe(&out));
        return Ok(false);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = Report::parse(&stdout);
    println!("\nwhat the container sees:");
    let mut ok = true;
    for (path, n) in &report.nodes {
        let role = match path.rsplit('/').next() {
            Some("accel0") | Some("accel1") => "granted",
            Some("ctl") => "control node, comes with any device",
            Some("accel2") => "NOT granted, bind-mounted by the demo to prove the cgroup denies it",
            _ => "NOT granted",
        };
        if n.kind == "missing" {
            println!("  {path:<20} absent                              ({role})");
            ok &= role == "NOT granted";
        } else {
            println!(
                "  {path:<20} {} {:>3}:{:<4} mode {}  open: {:<6} ({role})",
                if n.kind == "c" { "char" } else { "blk " },
                n.major,
                n.minor,
                n.mode,
                n.open
            );
            ok &= if role.starts_with("NOT") {
                n.open == "EPERM"
            } else {
                n.open == "ok"
            };
        }
    }
    if let Some(l) = report.libs.get(lib) {
        println!(
            "  {lib:<20} present={} read-only={}",
            l.present, l.read_only
        );
        ok &= l.present && l.read_only;
    }
    let tail: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("---"))
        .collect();
    for l in &tail {
        println!("  {l}");
    }
    ok &= tail
        .iter()
        .any(|l| l.contains("libdemo.so.1 ") && l.contains(LDCONFIG_FLAGS) && l.contains("=>"));
    println!(
        "\nresult: {}",
        if ok { "OK" } else { "UNEXPECTED (see above)" }
    );
    Ok(ok)
}
