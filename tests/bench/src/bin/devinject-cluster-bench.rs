//! `devinject-cluster-bench`: what devinject costs on a real cluster (the test tier's
//! Kubernetes, [`devinject_tests::cluster`]: 1.36 on containerd 2 and runc 1.4 as
//! scripts/bench.sh runs it), run by scripts/bench.sh when the Kubernetes binaries are built. Prints a Markdown section on stdout:
//!
//! - pod created -> Ready, with one device through the devinject runtime, against the same pod
//!   with no device on plain runc, alternating, on the same cluster (both through `kubectl
//!   create` and `kubectl wait`, whose own cost is in both columns);
//! - the `kubernetes` policy's cost per container start: the lookup the hook and the shim make
//!   in-process (`Get` from a kubelet >= 1.34 or `List` from an older one, the answer reduced
//!   to one container), with 1 and with 100 pods on the node, and again as an A/A pair; beside
//!   it, run by run, the same client through `devinject-podresources` executed as the policy
//!   once executed it (fork, exec with an empty environment), and another build of that tool
//!   with `--compare NAME=DIR`;
//! - kubelet restart -> plugin registered again, from the kubelet's "serving the registration
//!   socket" to its "got a registration request", as its own log stamps them;
//! - on a second cluster whose node runs `devinject-dra` (CDI on containerd 2, no device
//!   plugin): pod created -> Ready with one device through a ResourceClaimTemplate, against the
//!   same pod with no device and against itself (an A/A pair), alternating; and the driver's
//!   NodePrepareResources time, from its own log;
//! - a pod asking for the demo resource in its limits, through the device plugin and, on a node
//!   of the driver alone, through DRA (KEP-5004), each with its A/A pair.
//! - with `--fleet N,...`, DRA at fleet size: N simulated nodes on one control plane
//!   ([`devinject_tests::cluster::fleet`]: a Node object and one `devinject-dra` each, no
//!   kubelet), for the plain, partitioned and capacity demo profiles: the slices' bytes, the
//!   API server's ResourceSlice writes and watch traffic at start, idle, per health flap and per
//!   hot-plug, the scheduler's time to allocate 100 claims, and the drivers' and the API
//!   server's memory.
//!
//! Binaries come from `DEVINJECT_BIN_DIR` (scripts/bench.sh points it at the release build).
//! Needs root. Figures are wall times: run it on a quiet machine.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use devinject_admission::policy::kubelet::PodResources;
use devinject_admission::policy::GrantSource;
use devinject_bench::idle::Mark;
use devinject_bench::stats::{children_cpu, thread_cpu, Samples};
use devinject_kubelet::answer::{Answer, PodEntry, Rpc};
use devinject_podresources::Request;
use devinject_tests::bins::bin;
use devinject_tests::cluster::dra::demo_claim_template;
use devinject_tests::cluster::fleet::{
    apiserver_metrics, slice_watch_events, slice_write_bytes, slice_writes, Fleet, FleetProfile,
};
use devinject_tests::cluster::{Cluster, DraBeside, Setup, SLOW};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::daemons::poll;
use devinject_tests::sim::ACCELS;

/// Pod starts per variant.
const POD_RUNS: usize = 10;
/// Lookups per asker and node size.
const LOOKUPS: usize = 100;
/// The least time between two lookups. The kubelet (1.27 and later) rejects pod-resources
/// calls beyond 100 a second after a burst of 10 (`ResourceExhausted`, which the client
/// retries after a pause): lookups back to back measured that pause, 13 ms median on 1.36
/// against 1.3 ms for an unthrottled one. A node starts far fewer containers than that.
const LOOKUP_SPACING: Duration = Duration::from_millis(15);
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

/// Pod `name` on the default runtime holding a claim of one demo device from the template
/// [`DRA_TEMPLATE`].
fn dra_pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         automountServiceAccountToken: false\n  terminationGracePeriodSeconds: 0\n  \
         resourceClaims:\n  - name: demo\n    resourceClaimTemplateName: {DRA_TEMPLATE}\n  \
         containers:\n  - name: main\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    \
         command: [/bin/sleep, '3600']\n    resources:\n      claims:\n      - name: demo\n"
    )
}

/// Pod `name` on the default runtime asking for one demo device in its limits, which the
/// device plugin serves with a CDI device (no RuntimeClass: the engine injects the spec).
fn plugin_cdi_pod_yaml(name: &str) -> String {
    pod_yaml(name, true).replace("  runtimeClassName: devinject\n", "")
}

/// The ResourceClaimTemplate of the DRA pods: one device of the demo profile's class.
const DRA_TEMPLATE: &str = "one-demo";

/// Creates pod `name` and waits until it is Ready; returns the time taken.
fn pod_start(c: &Cluster, name: &str, with_device: bool) -> Result<Duration> {
    let yaml = pod_yaml(name, with_device);
    pod_start_of(c, name, &yaml)
}

/// Creates pod `name` from `yaml` and waits until it is Ready; returns the time taken.
fn pod_start_of(c: &Cluster, name: &str, yaml: &str) -> Result<Duration> {
    let start = Instant::now();
    c.apply(yaml)?;
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

/// One run of `devinject-podresources` as the policy once executed it: its wall time, its CPU
/// (user and system, from the rusage of reaped children), and which RPC answered it.
fn tool_once(tool: &Path, socket: &Path, pod: &str) -> Result<(Duration, Duration, Rpc)> {
    let cpu_before = children_cpu()?;
    let start = Instant::now();
    let lookup = Request {
        socket: socket.to_owned(),
        timeout: Duration::from_secs(2),
        namespace: "default".into(),
        pod: pod.into(),
        container: "main".into(),
    };
    let out = Command::new(tool)
        .env_clear()
        .stdin(Stdio::null())
        .args(lookup.to_args())
        .output()
        .context("run devinject-podresources")?;
    let took = start.elapsed();
    if !out.status.success() {
        bail!(
            "devinject-podresources failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let cpu = children_cpu()? - cpu_before;
    let answer = Answer::parse(&out.stdout).with_context(|| {
        format!(
            "devinject-podresources printed no answer: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    Ok((took, cpu, answer.answered_by))
}

/// What asks the kubelet in a run.
#[derive(Debug, Clone)]
enum Asker {
    /// The policy's lookup, in this process, as the hook and the shim make it.
    Policy,
    /// `devinject-podresources` at this path, executed as the policy once executed it.
    Tool(PathBuf),
}

/// One lookup of the policy's, in this process: its wall time, this thread's CPU, the RPC.
fn policy_once(socket: &Path, pod: &str) -> Result<(Duration, Duration, Rpc)> {
    let kubelet = PodResources {
        socket: socket.to_owned(),
        timeout: Duration::from_secs(2),
    };
    let cpu_before = thread_cpu()?;
    let start = Instant::now();
    let answer = kubelet
        .lookup("default", pod, "main")
        .context("the policy's pod-resources lookup")?;
    let took = start.elapsed();
    let cpu = thread_cpu()? - cpu_before;
    if !matches!(&answer.pods[..], [PodEntry::Found { .. }]) {
        bail!("the kubelet lists no container main of pod {pod}: {answer:?}");
    }
    Ok((took, cpu, answer.answered_by))
}

/// Wall and CPU times of one asker's lookups, and the RPC that answered them.
#[derive(Debug, Clone, Default)]
struct Lookups {
    wall: Samples,
    cpu: Samples,
    answered_by: Option<Rpc>,
}

impl Lookups {
    fn rpc(&self) -> String {
        self.answered_by.map_or("?".to_owned(), |r| r.to_string())
    }
}

/// The wall and CPU times of each of `askers`, in turn, [`LOOKUPS`] times each.
fn lookups(c: &Cluster, pod: &str, askers: &[Asker]) -> Result<Vec<Lookups>> {
    let socket = c.in_node_ns("/var/lib/kubelet/pod-resources/kubelet.sock")?;
    let spaced = |asker: &Asker| {
        let began = Instant::now();
        let run = match asker {
            Asker::Policy => policy_once(&socket, pod),
            Asker::Tool(path) => tool_once(path, &socket, pod),
        };
        std::thread::sleep(LOOKUP_SPACING.saturating_sub(began.elapsed()));
        run
    };
    for asker in askers {
        for _ in 0..5 {
            spaced(asker)?;
        }
    }
    let mut out = vec![Lookups::default(); askers.len()];
    for _ in 0..LOOKUPS {
        for (asker, runs) in askers.iter().zip(&mut out) {
            let (w, c, rpc) = spaced(asker)?;
            runs.wall.push(w);
            runs.cpu.push(c);
            if runs.answered_by.is_some_and(|r| r != rpc) {
                bail!("{asker:?} was answered by both Get and List");
            }
            runs.answered_by = Some(rpc);
        }
    }
    Ok(out)
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

fn run(compare: Option<(String, PathBuf)>) -> Result<()> {
    // The policy's lookup, then the same again (an A/A pair: how far two runs of one thing
    // differ on this machine now); then the same client executed as a process, the shipped
    // tool and the compared build, whose rows say its name.
    let mut askers = vec![
        ("the policy's lookup in-process".to_owned(), Asker::Policy),
        (
            "the policy's lookup in-process, A/A: the same again".to_owned(),
            Asker::Policy,
        ),
        (
            "devinject-podresources executed (the policy before)".to_owned(),
            Asker::Tool(bin("devinject-podresources")),
        ),
    ];
    if let Some((name, dir)) = compare {
        let tool = dir.join("devinject-podresources");
        if !tool.is_file() {
            bail!("{} is not built (--compare)", tool.display());
        }
        askers.push((
            format!("devinject-podresources executed, {name} build"),
            Asker::Tool(tool),
        ));
    }
    let (names, askers): (Vec<String>, Vec<Asker>) = askers.into_iter().unzip();
    let mut c = Cluster::start()?;
    c.runtime_class()?;
    emit(&format!(
        "### 6. A real cluster (Kubernetes {}, one node)\n\n\
         | figure | runs | median ms | p99 ms | [min–max] ms |\n|---|---|---|---|---|",
        c.kubernetes().version()
    ));

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

    // The policy's lookups with 1 pod on the node, then with 100.
    c.apply(&pod_yaml("asker", true))?;
    c.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/asker",
        "--timeout=120s",
    ])?;
    let one = lookups(&c, "asker", &askers)?;
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
    let hundred = lookups(&c, "asker", &askers)?;
    for (i, name) in names.iter().enumerate() {
        for (pods, runs) in [("1 pod", &one[i]), ("100 pods", &hundred[i])] {
            emit(&row(
                &format!("{name} ({}), {pods} on the node", runs.rpc()),
                &runs.wall,
            ));
        }
        let cpu = match askers[i] {
            Asker::Policy => "this thread's CPU",
            Asker::Tool(_) => "its CPU (user + sys)",
        };
        for (pods, runs) in [("1 pod", &one[i]), ("100 pods", &hundred[i])] {
            emit(&row(&format!("{name}: {cpu}, {pods}"), &runs.cpu));
        }
    }
    c.kubectl(&[
        "delete",
        "pods",
        "--all",
        "--grace-period=0",
        "--force",
        "--wait=true",
    ])?;
    drop(c);
    dra()?;
    dra_prepare()?;
    dra_extended()?;
    idle()
}

/// A one-node cluster on containerd 2 running `devinject-dra` with `beside`, the shipped
/// DeviceClasses and the template [`DRA_TEMPLATE`] applied.
fn dra_cluster(beside: DraBeside) -> Result<Cluster> {
    let containerd = devinject_tests::runtimes::containerd("2")
        .context("containerd 2 (scripts/runtimes-fetch.sh)")?;
    let c = Cluster::start_with(Setup::Dra {
        containerd: containerd.bin,
        beside,
    })?;
    c.apply_dra_device_classes()?;
    c.apply(&demo_claim_template(DRA_TEMPLATE, 1))?;
    Ok(c)
}

/// The DRA rows: a cluster whose node runs `devinject-dra` and the device plugin (answering
/// with CDI devices), pods with a claim of one device against pods with none, against pods
/// asking the device plugin for one, and against themselves, alternating, after one untimed
/// start of each; then the driver's NodePrepareResources times from its log.
fn dra() -> Result<()> {
    let c = dra_cluster(DraBeside::DevicePlugin)?;
    pod_start(&c, "warm-plain", false)?;
    pod_start_of(&c, "warm-dra", &dra_pod_yaml("warm-dra"))?;
    pod_start_of(&c, "warm-plugin", &plugin_cdi_pod_yaml("warm-plugin"))?;
    let (mut plain, mut plugin, mut claimed, mut again) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    for i in 0..POD_RUNS {
        plain.push(pod_start(&c, &format!("plain-{i}"), false)?);
        let name = format!("plugin-{i}");
        plugin.push(pod_start_of(&c, &name, &plugin_cdi_pod_yaml(&name))?);
        let name = format!("dra-{i}");
        claimed.push(pod_start_of(&c, &name, &dra_pod_yaml(&name))?);
        let name = format!("dra-aa-{i}");
        again.push(pod_start_of(&c, &name, &dra_pod_yaml(&name))?);
    }
    emit(&format!(
        "\n### 6b. DRA on a real cluster (Kubernetes {}, one node, containerd 2, devinject-dra \
         beside the device plugin)\n\n\
         | figure | runs | median ms | p99 ms | [min–max] ms |\n|---|---|---|---|---|",
        c.kubernetes().version()
    ));
    emit(&row("pod created → Ready, plain runc, no device", &plain));
    emit(&row(
        "pod created → Ready, 1 device through the device plugin (CDI)",
        &plugin,
    ));
    emit(&row(
        "pod created → Ready, 1 device through a DRA claim",
        &claimed,
    ));
    emit(&row(
        "pod created → Ready, 1 device through a DRA claim, A/A: the same again",
        &again,
    ));
    let mut prepare = Samples::default();
    for took in prepare_times(&c.dra_log()) {
        prepare.push(took);
    }
    emit(&row(
        "devinject-dra NodePrepareResources (its log)",
        &prepare,
    ));
    let log = c.dra_log();
    for (field, what) in PREPARE_STEPS {
        let mut step = Samples::default();
        for took in prepare_step_times(&log, field) {
            step.push(took);
        }
        emit(&row(&format!("… of which {what}"), &step));
    }
    Ok(())
}

/// Section 6e: a pod asking for `devinject.io/demo: 1` in its limits, unchanged, on a node where
/// the device plugin serves it (the plugin beside the driver) and on one where DRA does (the
/// driver alone: the scheduler makes the pod a claim of the DeviceClass's
/// `extendedResourceName`, KEP-5004), each against itself (an A/A pair), and a claim-template
/// pod on the DRA node; two clusters of the same shape, one after the other, alternating within
/// each after one untimed start of each variant.
fn dra_extended() -> Result<()> {
    let limits = plugin_cdi_pod_yaml;
    let (mut plugin, mut plugin_again) = (Samples::default(), Samples::default());
    let c = dra_cluster(DraBeside::DevicePlugin)?;
    let version = c.kubernetes().version().to_string();
    pod_start_of(&c, "warm", &limits("warm"))?;
    for i in 0..POD_RUNS {
        let name = format!("plugin-{i}");
        plugin.push(pod_start_of(&c, &name, &limits(&name))?);
        let name = format!("plugin-aa-{i}");
        plugin_again.push(pod_start_of(&c, &name, &limits(&name))?);
    }
    drop(c);
    let (mut extended, mut extended_again, mut claimed) =
        (Samples::default(), Samples::default(), Samples::default());
    let c = dra_cluster(DraBeside::Nothing)?;
    pod_start_of(&c, "warm", &limits("warm"))?;
    pod_start_of(&c, "warm-claim", &dra_pod_yaml("warm-claim"))?;
    for i in 0..POD_RUNS {
        let name = format!("extended-{i}");
        extended.push(pod_start_of(&c, &name, &limits(&name))?);
        let name = format!("claim-{i}");
        claimed.push(pod_start_of(&c, &name, &dra_pod_yaml(&name))?);
        let name = format!("extended-aa-{i}");
        extended_again.push(pod_start_of(&c, &name, &limits(&name))?);
    }
    emit(&format!(
        "\n### 6e. The extended resource on each path (Kubernetes {version}, one node, containerd 2)\n\n\
         | figure | runs | median ms | p99 ms | [min–max] ms |\n|---|---|---|---|---|"
    ));
    emit(&row(
        "pod created → Ready, `devinject.io/demo: 1` in limits, device plugin (CDI)",
        &plugin,
    ));
    emit(&row("… A/A: the same again", &plugin_again));
    emit(&row(
        "pod created → Ready, `devinject.io/demo: 1` in limits, DRA (extendedResourceName)",
        &extended,
    ));
    emit(&row("… A/A: the same again", &extended_again));
    emit(&row(
        "pod created → Ready, a claim from a template, DRA",
        &claimed,
    ));
    Ok(())
}

/// The claims section 6f has the scheduler allocate on each simulated fleet.
const FLEET_CLAIMS: usize = 100;

/// What one simulated fleet measured (section 6f).
struct FleetRun {
    nodes: usize,
    profile: FleetProfile,
    slices: usize,
    slice_bytes: usize,
    published_in: Duration,
    start: Traffic,
    idle: Traffic,
    flap: Traffic,
    plug: Traffic,
    allocated_in: Duration,
    driver_rss: devinject_bench::stats::Kib,
    /// The drivers' CPU while idle, ms per second per driver.
    idle_cpu_ms: f64,
    apiserver_rss_kib: u64,
}

/// The API server's ResourceSlice traffic between two readings of its metrics.
#[derive(Debug, Clone, Copy, Default)]
struct Traffic {
    writes: f64,
    write_bytes: f64,
    watch_events: f64,
    watch_bytes: f64,
}

impl Traffic {
    fn read(c: &Cluster) -> Result<Self> {
        let m = apiserver_metrics(c)?;
        let (watch_events, watch_bytes) = slice_watch_events(&m);
        Ok(Self {
            writes: slice_writes(&m),
            write_bytes: slice_write_bytes(&m),
            watch_events,
            watch_bytes,
        })
    }

    fn since(self, before: Self) -> Self {
        Self {
            writes: self.writes - before.writes,
            write_bytes: self.write_bytes - before.write_bytes,
            watch_events: self.watch_events - before.watch_events,
            watch_bytes: self.watch_bytes - before.watch_bytes,
        }
    }

    /// `writes / KiB written / watch events / KiB sent to watchers`.
    fn cell(self) -> String {
        format!(
            "{:.0} / {:.1} / {:.0} / {:.1}",
            self.writes,
            self.write_bytes / 1024.0,
            self.watch_events,
            self.watch_bytes / 1024.0
        )
    }
}

/// The resident memory of process `pid` in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    devinject_tests::churn::procstat::sample(pid).map_or(0, |s| s.rss_kib)
}

/// One simulated fleet of `nodes` nodes publishing `profile`, on a control plane of its own.
fn fleet_run(nodes: usize, profile: FleetProfile) -> Result<FleetRun> {
    let c = Cluster::start_control_plane_only()?;
    let before = Traffic::read(&c)?;
    let started = Instant::now();
    let fleet = Fleet::start(&c, nodes, profile, None)?;
    let published_in = started.elapsed();
    fleet.apply_device_classes(&c)?;
    // What the drivers' start wrote, once the last write has been watched.
    std::thread::sleep(Duration::from_secs(3));
    let settled = Traffic::read(&c)?;
    let start = settled.since(before);
    // Steady state, nothing changing: one health read of every device (every 10 s).
    let cpu = || -> Duration {
        fleet
            .driver_pids()
            .into_iter()
            .filter_map(|pid| devinject_bench::idle::process_cpu(pid).ok())
            .sum()
    };
    let (used, idle_for) = (cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(10));
    let quiet = Traffic::read(&c)?;
    let idle_cpu_ms = cpu().saturating_sub(used).as_secs_f64() * 1000.0
        / idle_for.elapsed().as_secs_f64()
        / nodes as f64;
    let idle = quiet.since(settled);
    // One device of one node unhealthy, then healthy again.
    fleet.set_health(0, 1, false)?;
    fleet.wait_device(&c, 0, "demo-1", Some(true))?;
    fleet.set_health(0, 1, true)?;
    fleet.wait_device(&c, 0, "demo-1", Some(false))?;
    std::thread::sleep(Duration::from_secs(2));
    let flapped = Traffic::read(&c)?;
    let flap = flapped.since(quiet);
    // One device plugged into one node.
    fleet.plug(0, ACCELS.len())?;
    fleet.wait_device(&c, 0, &format!("demo-{}", ACCELS.len()), None)?;
    std::thread::sleep(Duration::from_secs(2));
    let plug = Traffic::read(&c)?.since(flapped);
    let slices: serde_json::Value =
        serde_json::from_str(&c.kubectl(&["get", "resourceslices", "-o", "json"])?)?;
    let ours: Vec<&serde_json::Value> = slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["spec"]["driver"] == devinject_tests::cluster::DRA_DRIVER)
        .collect();
    let slice_bytes = ours.iter().map(|s| s.to_string().len()).sum();
    let allocated_in = fleet.allocate(&c, "fleet", FLEET_CLAIMS.min(nodes * ACCELS.len()))?;
    let mut driver_rss = devinject_bench::stats::Kib::default();
    for pid in fleet.driver_pids() {
        driver_rss.push(rss_kib(pid));
    }
    Ok(FleetRun {
        nodes,
        profile,
        slices: ours.len(),
        slice_bytes,
        published_in,
        start,
        idle,
        flap,
        plug,
        allocated_in,
        driver_rss,
        idle_cpu_ms,
        apiserver_rss_kib: c.apiserver_pid().map_or(0, rss_kib),
    })
}

/// Section 6f: DRA at fleet size, simulated ([`devinject_tests::cluster::fleet`]): for each
/// node count of `sizes` and each kind of profile, what publishing costs the API server, what
/// one health flap and one hot-plug cost, how long the scheduler takes to allocate
/// [`FLEET_CLAIMS`] claims, and the memory of each driver and of the API server.
fn fleet(sizes: &[usize], profiles: &[FleetProfile]) -> Result<()> {
    let profiles = if profiles.is_empty() {
        &[
            FleetProfile::Plain,
            FleetProfile::Partitioned,
            FleetProfile::Capacity,
        ][..]
    } else {
        profiles
    };
    let version = devinject_tests::cluster::kubernetes::Kubernetes::find()
        .map(|k| k.version().to_owned())
        .unwrap_or_default();
    emit(&format!(
        "\n### 6f. DRA at fleet size, simulated (Kubernetes {version}, one control plane, no kubelet)\n\n\
         Traffic cells: ResourceSlice writes / KiB of request bodies / watch events sent / KiB sent \
         to watchers (the scheduler's watch and each driver's watch of its own slices).\n\n\
         | nodes | profile | slices | slice KiB | published in s | start traffic | idle 10 s | one health flap (down, up) | one hot-plug | {FLEET_CLAIMS} claims allocated in s | driver RSS MiB | driver CPU idle, ms/s | API server RSS MiB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|"
    ));
    for &nodes in sizes {
        for &profile in profiles {
            let r = fleet_run(nodes, profile)
                .with_context(|| format!("{nodes} simulated nodes, {}", profile.name()))?;
            emit(&format!(
                "| {} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {:.2} | {} | {:.2} | {:.0} |",
                r.nodes,
                r.profile.name(),
                r.slices,
                r.slice_bytes as f64 / 1024.0,
                r.published_in.as_secs_f64(),
                r.start.cell(),
                r.idle.cell(),
                r.flap.cell(),
                r.plug.cell(),
                r.allocated_in.as_secs_f64(),
                r.driver_rss,
                r.idle_cpu_ms,
                r.apiserver_rss_kib as f64 / 1024.0
            ));
        }
    }
    Ok(())
}

/// The devices per claim of section 6d: one, a few, and the most one claim can be allocated
/// (`resource.k8s.io/v1`'s `AllocationResultsMaxSize`).
const CLAIM_SIZES: [usize; 3] = [1, 8, 32];

/// The claims of each size section 6d prepares.
const PREPARE_RUNS: usize = 30;

/// A demo host with [`CLAIM_SIZES`]' largest number of accelerators, `demo/accel0..`, their
/// device numbers those of [`devinject_tests::sim::ACCELS`] in turn (discovery tells devices
/// apart by path, and a DRA slice by name).
fn many_demo_devices(dir: &Path) -> Result<devinject_tests::sim::SimHost> {
    devinject_tests::sim::demo_host_with_accels(dir, CLAIM_SIZES[2])
}

/// NodePrepareResources at 1, 8 and 32 devices per claim: one node of `devinject-dra` alone
/// with 32 demo devices; for each size, [`PREPARE_RUNS`] pods one after the other, each holding
/// a claim of that many devices from a template, started to Ready and deleted. The driver's
/// prepared lines give the time of each prepare and of its steps.
fn dra_prepare() -> Result<()> {
    let containerd = devinject_tests::runtimes::containerd("2")
        .context("containerd 2 (scripts/runtimes-fetch.sh)")?;
    let c = Cluster::start_shaped(
        Setup::Dra {
            containerd: containerd.bin,
            beside: DraBeside::Nothing,
        },
        &devinject_tests::cluster::Shape {
            node_host: Some(devinject_tests::cluster::NodeHost {
                make: many_demo_devices,
                image: |_| Ok(()),
            }),
            dra_devices: Some(CLAIM_SIZES[2]),
            ..devinject_tests::cluster::Shape::default()
        },
    )?;
    c.apply_dra_device_classes()?;
    emit(&format!(
        "\n### 6d. NodePrepareResources by devices per claim (Kubernetes {}, one node, \
         {PREPARE_RUNS} claims each)\n\n\
         | figure | runs | median ms | p99 ms | [min–max] ms |\n|---|---|---|---|---|",
        c.kubernetes().version()
    ));
    // The smallest size twice, the second pass the A/A pair of the first.
    let passes = [
        (CLAIM_SIZES[0], ""),
        (CLAIM_SIZES[0], ", A/A: the same again"),
        (CLAIM_SIZES[1], ""),
        (CLAIM_SIZES[2], ""),
    ];
    for (pass, (size, label)) in passes.into_iter().enumerate() {
        let template = format!("demo-{size}");
        c.apply(&demo_claim_template(&template, size as u32))?;
        let seen = c.dra_log().len();
        for i in 0..PREPARE_RUNS {
            let name = format!("claim-{pass}-{size}-{i}");
            pod_start_of(
                &c,
                &name,
                &dra_pod_yaml(&name).replace(DRA_TEMPLATE, &template),
            )?;
        }
        let log = c.dra_log();
        let lines = log.get(seen..).unwrap_or_default();
        let mut prepare = Samples::default();
        for took in prepare_times(lines) {
            prepare.push(took);
        }
        emit(&row(
            &format!("NodePrepareResources, {size} devices per claim{label}"),
            &prepare,
        ));
        for (field, what) in PREPARE_STEPS {
            let mut step = Samples::default();
            for took in prepare_step_times(lines, field) {
                step.push(took);
            }
            emit(&row(&format!("… of which {what}"), &step));
        }
    }
    Ok(())
}

/// The steps of a prepare the driver's prepared line times, and what each is.
const PREPARE_STEPS: [(&str, &str); 5] = [
    ("read_us", "the claim read from the API server"),
    (
        "plan_us",
        "the plan (discovery, driver files, the spec built)",
    ),
    ("run_us", "the prepare programs"),
    ("write_us", "the spec and metadata files written"),
    ("save_us", "the checkpoint saved"),
];

/// How long each idle window is measured.
const IDLE_WINDOW: Duration = Duration::from_secs(30);

/// Each long-running daemon's cost on a node where nothing changes: the device plugin and
/// `devinject-nri` on a node of [`Setup::Nri`] (both as processes, the demo devices
/// advertised), then `devinject-dra` alone on a node of [`Setup::Dra`] (its slices published);
/// after a settle, two windows of [`IDLE_WINDOW`] (the second an A/A of the first) of each:
/// CPU seconds per hour and wakeups per second (context switches of all its threads, voluntary
/// and not, from `/proc/<pid>/task/*/status`).
fn idle() -> Result<()> {
    let containerd = devinject_tests::runtimes::containerd("2")
        .context("containerd 2 (scripts/runtimes-fetch.sh)")?;
    let accels = devinject_tests::sim::ACCELS.len();
    let c = Cluster::start_with(Setup::Nri {
        containerd: containerd.bin.clone(),
    })?;
    c.wait_allocatable("devinject.io/demo", &accels.to_string())?;
    emit(&format!(
        "\n### 6c. Each daemon on an idle node (Kubernetes {}, one node, {} s windows)\n\n\
         | daemon | window | CPU s per hour | wakeups per s |\n|---|---|---|---|",
        c.kubernetes().version(),
        IDLE_WINDOW.as_secs()
    ));
    idle_windows(&[
        (
            "devinject-device-plugin",
            c.node().plugin_pid().context("the device plugin's pid")?,
        ),
        (
            "devinject-nri",
            c.node().nri_plugin_pid().context("devinject-nri's pid")?,
        ),
    ])?;
    drop(c);
    let c = Cluster::start_with(Setup::Dra {
        containerd: containerd.bin,
        beside: DraBeside::Nothing,
    })?;
    c.wait_resource_slices(accels)?;
    idle_windows(&[(
        "devinject-dra",
        c.node().dra_plugin_pid().context("the DRA driver's pid")?,
    )])
}

/// Two windows of [`IDLE_WINDOW`] over `daemons` (name, pid) at once, after a 5 s settle (the
/// start's registration, first publications and health streams): a row per daemon and window.
fn idle_windows(daemons: &[(&str, u32)]) -> Result<()> {
    std::thread::sleep(Duration::from_secs(5));
    let pids: Vec<u32> = daemons.iter().map(|&(_, pid)| pid).collect();
    let mut rows = Vec::new();
    for window in ["first", "second (A/A)"] {
        let mark = Mark::now(&pids)?;
        std::thread::sleep(IDLE_WINDOW);
        for ((name, _), cost) in daemons.iter().zip(mark.cost(&pids)?) {
            rows.push((*name, window, cost.cpu_per_hour, cost.wakeups_per_second));
        }
    }
    rows.sort_by_key(|r| r.0);
    for (name, window, cpu, wakeups) in rows {
        emit(&format!("| {name} | {window} | {cpu:.3} | {wakeups:.2} |"));
    }
    Ok(())
}

/// The `took_us` of every claim `devinject-dra` logs as prepared.
fn prepare_times(log: &str) -> Vec<Duration> {
    prepare_step_times(log, "took_us")
}

/// One field (`<name>=<microseconds>`) of each of the driver's prepared lines in `log`.
fn prepare_step_times(log: &str, field: &str) -> Vec<Duration> {
    log.lines()
        .filter(|l| l.contains(devinject_dra::driver::PREPARED))
        .filter_map(|l| l.split(&format!("{field}=")).nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(Duration::from_micros)
        .collect()
}

/// What the kubelet logs when its device plugin registration server is up again: 1.20 says
/// "Serving", 1.36 "Starting" (pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go, at -v=2).
const SERVING: [&str; 2] = [
    "Serving device plugin registration server",
    "Starting device plugin registration server",
];

/// From a kubelet log: the time from the registration server being up ([`SERVING`]) to the
/// plugin's "Got registration request", once both are there.
fn registration_latency(log: &str) -> Option<Duration> {
    // klog: `I1123 09:14:39.211457   19122 manager.go:278] ...`
    let stamp = |needles: &[&str]| -> Option<f64> {
        let line = log
            .lines()
            .find(|l| needles.iter().any(|n| l.contains(n)))?;
        let time = line.split_whitespace().nth(1)?;
        let mut parts = time.split(':');
        let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
        Some(
            h.parse::<f64>().ok()? * 3600.0
                + m.parse::<f64>().ok()? * 60.0
                + s.parse::<f64>().ok()?,
        )
    };
    let served = stamp(&SERVING)?;
    let registered = stamp(&["Got registration request from device plugin"])?;
    Some(Duration::from_secs_f64((registered - served).max(0.0)))
}

/// Prints one line of the report at once, so that a failure later keeps what was measured.
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Benchmark: what devinject costs on a real cluster: pod start to Ready with a device against
/// one without, the `kubernetes` policy's pod-resources lookup per container start, and the
/// device plugin's re-registration after a kubelet restart.
///
/// Prints a Markdown section on stdout; the figures are in docs/benchmarks.md. Binaries come
/// from DEVINJECT_BIN_DIR, Kubernetes from DEVINJECT_KUBE_BIN (scripts/kube-build.sh). Needs
/// root; run it on a quiet machine, through scripts/bench.sh.
#[derive(Parser, Debug)]
#[command(name = "devinject-cluster-bench")]
struct Cli {
    /// Another build of `devinject-podresources` to run alongside the shipped one, as NAME=DIR
    /// (scripts/bench.sh passes the glibc build of the tool it ships built against musl).
    #[arg(long, value_parser = devinject_bench::stats::name_and_dir)]
    compare: Option<(String, PathBuf)>,
    /// Only the DRA rows (section 6b).
    #[arg(long)]
    dra_only: bool,
    /// Only each daemon's idle cost (section 6c).
    #[arg(long)]
    idle: bool,
    /// Only NodePrepareResources at 1, 8 and 32 devices per claim (section 6d).
    #[arg(long)]
    dra_prepare: bool,
    /// Only the extended resource through the device plugin and through DRA (section 6e).
    #[arg(long)]
    dra_extended: bool,
    /// Only DRA at fleet size (section 6f), at these numbers of simulated nodes.
    #[arg(long, value_delimiter = ',')]
    fleet: Vec<usize>,
    /// With `--fleet`: only these profiles (plain, partitioned, capacity; all by default).
    #[arg(long, value_delimiter = ',')]
    fleet_profiles: Vec<FleetProfile>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = if !cli.fleet.is_empty() {
        fleet(&cli.fleet, &cli.fleet_profiles)
    } else if cli.idle {
        idle()
    } else if cli.dra_prepare {
        dra_prepare()
    } else if cli.dra_extended {
        dra_extended()
    } else if cli.dra_only {
        dra()
    } else {
        run(cli.compare)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-cluster-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_times_are_read_from_the_drivers_prepared_lines() {
        let log = "2026-11-25T19:16:26Z  INFO devinject_dra::driver: prepared claim=claim default/a (u) devices=1 took_us=1234\n\
                   2026-11-25T19:16:27Z  INFO devinject_dra::driver: unprepared claim=x specs=1\n\
                   2026-11-25T19:16:28Z  INFO devinject_dra::driver: prepared claim=claim default/b (v) devices=1 took_us=87 \n";
        assert_eq!(
            prepare_times(log),
            [Duration::from_micros(1234), Duration::from_micros(87)]
        );
        let steps = "2026-11-28T01:37:50Z  INFO devinject_dra::driver: prepared claim=claim default/c (w) devices=8 took_us=6730 read_us=2700 plan_us=540 run_us=0 write_us=220 save_us=1480\n";
        assert_eq!(
            prepare_step_times(steps, "read_us"),
            [Duration::from_micros(2700)]
        );
        assert_eq!(
            prepare_step_times(steps, "save_us"),
            [Duration::from_micros(1480)]
        );
        assert!(prepare_step_times(log, "read_us").is_empty());
    }

    #[test]
    fn registration_is_timed_from_the_server_line_of_either_release() {
        let got = "I1125 08:48:41.500000   12 server.go:161] \"Got registration request from \
                   device plugin with resource\" resourceName=\"devinject.io/demo\"";
        // As kubelet 1.20.2 and 1.36.3 each print it.
        for serving in [
            "Serving device plugin registration server on \\\"/var/lib/kubelet/device-plugins/kubelet.sock\\\"",
            "Starting device plugin registration server",
        ] {
            let log = format!("I1125 08:48:41.250000   12 server.go:87] \"{serving}\"\n{got}\n");
            assert_eq!(
                registration_latency(&log),
                Some(Duration::from_millis(250)),
                "{log}"
            );
        }
        assert_eq!(registration_latency(got), None);
    }
}
