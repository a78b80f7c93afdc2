//! `devinject-cluster-bench`: what devinject costs on a real cluster (the test tier's
//! Kubernetes v1.20.2, [`devinject_tests::cluster`]), run by scripts/bench.sh when the
//! Kubernetes binaries are built. Prints a Markdown section on stdout:
//!
//! - pod created -> Ready, with one device through the devinject runtime, against the same pod
//!   with no device on plain runc, alternating, on the same cluster (both through `kubectl
//!   create` and `kubectl wait`, whose own cost is in both columns);
//! - the `kubernetes` policy's cost per container start: the pod-resources helper as the hook
//!   and the shim run it (fork, exec with an empty environment, `List` from the real kubelet,
//!   the answer), with 1 and with 100 pods on the node;
//! - kubelet restart -> plugin registered again, from the kubelet's "serving the registration
//!   socket" to its "got a registration request", as its own log stamps them.
//!
//! Binaries come from `DEVINJECT_BIN_DIR` (scripts/bench.sh points it at the release build).
//! Needs root. Figures are wall times: run it on a quiet machine.

use std::io::Write;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use devinject_tests::bench::stats::Samples;
use devinject_tests::bins::bin;
use devinject_tests::cluster::{Cluster, SLOW};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::daemons::poll;

/// Pod starts per variant.
const POD_RUNS: usize = 10;
/// Helper runs per node size.
const HELPER_RUNS: usize = 100;
/// Kubelet restarts.
const RESTARTS: usize = 3;

fn pod_yaml(name: &str, with_device: bool) -> String {
    let (class, limits) = if with_device {
        (
            "  runtimeClassName: devinject\n",
            "\n    resources: {limits: {devinject.io/demo: 1}}",
        )
    } else {
        ("", "")
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{class}  hostNetwork: true\n  \
         automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 0\n  containers:\n  \
         - name: main\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    \
         command: [/bin/sleep, '3600']{limits}\n"
    )
}

/// Creates pod `name` and waits until it is Ready; returns the time taken.
fn pod_start(c: &Cluster, name: &str, with_device: bool) -> Result<Duration> {
    let start = Instant::now();
    c.apply(&pod_yaml(name, with_device))?;
    c.kubectl(&[
        "wait",
        "--for=condition=Ready",
        &format!("pod/{name}"),
        "--timeout=120s",
    ])?;
    let took = start.elapsed();
    c.kubectl(&[
        "delete",
        "pod",
        name,
        "--grace-period=0",
        "--force",
        "--wait=true",
    ])?;
    Ok(took)
}

/// One run of the pod-resources helper as the policy runs it: its wall time, and its CPU (user
/// and system, from the rusage of reaped children).
fn helper_once(helper: &Path, socket: &Path, pod: &str) -> Result<(Duration, Duration)> {
    let cpu_before = children_cpu()?;
    let start = Instant::now();
    let out = Command::new(helper)
        .env_clear()
        .stdin(Stdio::null())
        .arg(format!("--socket={}", socket.display()))
        .arg("--timeout-ms=2000")
        .arg("--namespace=default")
        .arg(format!("--pod={pod}"))
        .arg("--container=main")
        .output()
        .context("run devinject-podresources")?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "devinject-podresources failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((took, children_cpu()? - cpu_before))
}

/// User plus system time of every child reaped so far.
fn children_cpu() -> Result<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_CHILDREN).context("getrusage")?;
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().try_into().unwrap_or(0))
            + Duration::from_micros(t.tv_usec().try_into().unwrap_or(0))
    };
    Ok(tv(u.user_time()) + tv(u.system_time()))
}

/// The helper's wall times and CPU times.
fn helper_runs(c: &Cluster, pod: &str) -> Result<(Samples, Samples)> {
    let helper = bin("devinject-podresources");
    let socket = c.in_node_ns("/var/lib/kubelet/pod-resources/kubelet.sock")?;
    for _ in 0..5 {
        helper_once(&helper, &socket, pod)?;
    }
    let (mut wall, mut cpu) = (Samples::default(), Samples::default());
    for _ in 0..HELPER_RUNS {
        let (w, c) = helper_once(&helper, &socket, pod)?;
        wall.push(w);
        cpu.push(c);
    }
    Ok((wall, cpu))
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn row(name: &str, s: &Samples) -> String {
    format!(
        "| {name} | {} | {} | {} [{}–{}] |",
        s.len(),
        ms(s.median()),
        ms(s.quantile(0.99)),
        ms(s.min()),
        ms(s.max())
    )
}

fn run() -> Result<()> {
    let mut c = Cluster::start()?;
    c.runtime_class()?;
    emit(
        "### 6. A real cluster (Kubernetes v1.20.2, containerd 1.6, one node)\n\n\
         | figure | runs | median ms | p99 ms | [min–max] ms |\n|---|---|---|---|---|",
    );

    // Kubelet restart -> the plugin registered again (first, on a node with no pods): from the
    // kubelet's own log, which stamps both ends to the microsecond.
    let mut rereg = Samples::default();
    for _ in 0..RESTARTS {
        c.restart_kubelet()?;
        let took = poll("the plugin to register again", SLOW, || {
            Ok(registration_latency(&c.kubelet_log()))
        })
        .map_err(|e| e.context(c.logs()))?;
        rereg.push(took);
        c.wait_node_ready()?;
    }
    emit(&row(
        "kubelet serving kubelet.sock again → plugin registration request",
        &rereg,
    ));

    // Pod start, alternating, after one untimed start of each.
    pod_start(&c, "warm-plain", false)?;
    pod_start(&c, "warm-device", true)?;
    let (mut plain, mut device) = (Samples::default(), Samples::default());
    for i in 0..POD_RUNS {
        plain.push(pod_start(&c, &format!("plain-{i}"), false)?);
        device.push(pod_start(&c, &format!("device-{i}"), true)?);
    }
    emit(&row("pod created → Ready, plain runc, no device", &plain));
    emit(&row(
        "pod created → Ready, devinject runtime, 1 device",
        &device,
    ));

    // The policy's helper with 1 pod, then with 100.
    c.apply(&pod_yaml("asker", true))?;
    c.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/asker",
        "--timeout=120s",
    ])?;
    let one = helper_runs(&c, "asker")?;
    let mut list = String::new();
    for i in 0..99 {
        list += &pod_yaml(&format!("filler-{i}"), false);
        list += "---\n";
    }
    c.apply(&list)?;
    poll("100 pods running", SLOW * 5, || {
        let running = c
            .kubectl(&[
                "get",
                "pods",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ])?
            .lines()
            .count();
        Ok((running >= 100).then_some(()))
    })?;
    let hundred = helper_runs(&c, "asker")?;
    emit(&row(
        "policy helper (exec + List), 1 pod on the node",
        &one.0,
    ));
    emit(&row(
        "policy helper (exec + List), 100 pods on the node",
        &hundred.0,
    ));
    emit(&row("policy helper's CPU (user + sys), 1 pod", &one.1));
    emit(&row(
        "policy helper's CPU (user + sys), 100 pods",
        &hundred.1,
    ));
    c.kubectl(&[
        "delete",
        "pods",
        "--all",
        "--grace-period=0",
        "--force",
        "--wait=true",
    ])?;

    Ok(())
}

/// From a kubelet log: the time from "Serving device plugin registration server" to the
/// plugin's "Got registration request", once both are there.
fn registration_latency(log: &str) -> Option<Duration> {
    // klog: `I1123 09:14:39.211457   19122 manager.go:278] ...`
    let stamp = |needle: &str| -> Option<f64> {
        let line = log.lines().find(|l| l.contains(needle))?;
        let time = line.split_whitespace().nth(1)?;
        let mut parts = time.split(':');
        let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
        Some(
            h.parse::<f64>().ok()? * 3600.0
                + m.parse::<f64>().ok()? * 60.0
                + s.parse::<f64>().ok()?,
        )
    };
    let served = stamp("Serving device plugin registration server")?;
    let registered = stamp("Got registration request from device plugin")?;
    Some(Duration::from_secs_f64((registered - served).max(0.0)))
}

/// Prints one line of the report at once, so that a failure later keeps what was measured.
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-cluster-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}
