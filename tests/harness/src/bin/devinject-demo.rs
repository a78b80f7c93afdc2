//! `devinject-demo`: a real runc container asks for two simulated `demo` accelerators and
//! reports what it sees. Run through `scripts/demo.sh`, which installs runc and busybox first.
//!
//! Exits non-zero when what the container sees is not what devinject promises.

use std::process::ExitCode;

use anyhow::{Context, Result};
use devinject_harness::probe::Report;
use devinject_harness::runc::{container_id, describe, Bundle};
use devinject_harness::sim::{demo_host, ACCELS, CTL};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("devinject-demo: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool> {
    // runc runs hooks from the bundle directory: the hook path must be absolute.
    let hook = match std::env::args().nth(1) {
        Some(p) => std::fs::canonicalize(&p).with_context(|| format!("hook binary {p}"))?,
        None => std::env::current_exe()?.with_file_name("devinject-hook"),
    };
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
        .hook("createRuntime", &hook, &host.config)
        .bind_node(&host.dev_root.join("demo/accel2"), "/dev/demo/accel2");
    println!("devinject demo: runc container with DEMO_VISIBLE_DEVICES=0,1 (hook: createRuntime)");
    println!(
        "  simulated host: {} (4 accelerators + control node, libdemo.so.1)",
        host.dir.display()
    );
    let out = bundle.run(&container_id("demo"))?;
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
        .any(|l| l.contains("libdemo.so.1 ") && l.contains("=>"));
    println!(
        "\nresult: {}",
        if ok { "OK" } else { "UNEXPECTED (see above)" }
    );
    Ok(ok)
}
