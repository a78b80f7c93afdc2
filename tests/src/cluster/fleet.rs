//! Many simulated nodes on one control plane, for what the DRA driver costs the API server at
//! fleet size ([`Cluster::start_control_plane_only`]): each node is a Node object, created with
//! the status a kubelet would report (Ready, room for pods), and one `devinject-dra` process
//! publishing the demo devices of its own dev and sys roots (the driver files and profiles
//! shared). No kubelet runs: the driver publishes its slices without one (no kubelet registers
//! it, and nothing is prepared), so the scheduler allocates claims on these nodes and binds
//! their pods, which then stay Pending.
//!
//! What the simulation cannot show: the kubelet's own API traffic (node status, leases, its
//! deleting a restarted node's slices) and the prepare path; the node controller marks the
//! nodes unreachable after its grace period (no lease is renewed), which the pods here
//! tolerate.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use super::{Cluster, DRA_DRIVER, SLOW};
use crate::bins::bin;
use crate::daemons::{poll, Daemon};
use crate::kubelet::dra_process::node_dir_args;
use crate::sim::{demo_host, mknod, SimHost, ACCELS, CTL};

/// The profiles a fleet's nodes publish, each device with a sysfs health attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetProfile {
    /// The demo profile, its devices whole only.
    Plain,
    /// The demo profile as shipped: each device whole, in halves and in quarters, with the
    /// counters they share.
    Partitioned,
    /// The demo profile with `[capacity]`: each device shared by up to 4 claims.
    Capacity,
}

impl std::str::FromStr for FleetProfile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        [Self::Plain, Self::Partitioned, Self::Capacity]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("{s:?}: use plain, partitioned or capacity"))
    }
}

impl FleetProfile {
    /// The demo profile's text for this kind, from the shipped one, its health read every
    /// `health_ms` (`None`: the profile's default, 10 s).
    fn profile(self, shipped: &str, health_ms: Option<u64>) -> String {
        let whole = crate::sim::without_partitions(shipped);
        let interval = health_ms
            .map(|ms| format!("health_interval_ms = {ms}\n"))
            .unwrap_or_default();
        let health = |text: &str| {
            text.replacen(
                "[discovery]\n",
                &format!("[discovery]\nhealth_sysfs = \"class/demo/{{name}}/health\"\n{interval}"),
                1,
            )
        };
        match self {
            Self::Plain => health(&whole),
            Self::Partitioned => health(shipped),
            Self::Capacity => health(&whole) + "\n[capacity]\npods = 4\n",
        }
    }

    /// The name the benchmark's table gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Partitioned => "partitioned",
            Self::Capacity => "capacity",
        }
    }
}

/// One simulated node.
struct FleetNode {
    name: String,
    dir: PathBuf,
    driver: Daemon,
}

/// The simulated nodes of a fleet; their drivers are stopped on drop (the Node objects go with
/// the cluster), and the machine's inotify limit put back.
pub struct Fleet {
    nodes: Vec<FleetNode>,
    _limit: InotifyLimit,
    _shared: SimHost,
    _dir: tempfile::TempDir,
}

/// The machine's limit of inotify instances per user, where the fleet raised it: one user runs
/// every simulated node's driver, each with a few instances (its device watch, its CDI
/// directory's), where real nodes have a limit each. Past the default 128, a driver falls
/// back to reading its devices every 500 ms, a cost no real node has. Put back on drop.
struct InotifyLimit {
    before: Option<String>,
}

/// Where the kernel keeps it (inotify(7)).
const INOTIFY_INSTANCES: &str = "/proc/sys/fs/inotify/max_user_instances";

impl InotifyLimit {
    /// Raises the limit to `at_least` if it is lower.
    fn raise(at_least: u64) -> Result<Self> {
        let before = std::fs::read_to_string(INOTIFY_INSTANCES)
            .with_context(|| format!("read {INOTIFY_INSTANCES}"))?;
        if before.trim().parse::<u64>().is_ok_and(|n| n >= at_least) {
            return Ok(Self { before: None });
        }
        std::fs::write(INOTIFY_INSTANCES, at_least.to_string())
            .with_context(|| format!("raise {INOTIFY_INSTANCES} to {at_least}"))?;
        Ok(Self {
            before: Some(before),
        })
    }
}

impl Drop for InotifyLimit {
    fn drop(&mut self) {
        if let Some(before) = &self.before {
            let _ = std::fs::write(INOTIFY_INSTANCES, before.trim());
        }
    }
}

/// The name of simulated node `i`.
pub fn node_name(i: usize) -> String {
    format!("sim-{i:04}")
}

/// A Node object as a kubelet would register it, Ready and with room for 110 pods.
fn node_object(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    \
         kubernetes.io/hostname: {name}\n    devinject.io/simulated: \"true\"\nstatus:\n  \
         capacity: {{cpu: \"64\", memory: 256Gi, pods: \"110\"}}\n  \
         allocatable: {{cpu: \"64\", memory: 256Gi, pods: \"110\"}}\n  conditions:\n  \
         - {{type: Ready, status: \"True\", reason: KubeletReady, message: simulated}}\n"
    )
}

impl Fleet {
    /// Makes `count` simulated nodes on `c`'s control plane publishing `profile`, its health
    /// read every `health_ms` (`None`: the default), and returns once the API server holds
    /// every node's slices.
    pub fn start(
        c: &Cluster,
        count: usize,
        profile: FleetProfile,
        health_ms: Option<u64>,
    ) -> Result<Self> {
        let limit = InotifyLimit::raise(128 + 8 * count as u64)?;
        let dir = crate::daemons::short_tempdir("fleet")?;
        let shared = demo_host(&dir.path().join("shared"), &["demo"])?;
        let shipped = std::fs::read_to_string(shared.profiles_dir.join("demo.toml"))?;
        std::fs::write(
            shared.profiles_dir.join("demo.toml"),
            profile.profile(&shipped, health_ms),
        )?;
        // The Node objects, in batches of one `kubectl create` each.
        for batch in (0..count).collect::<Vec<_>>().chunks(200) {
            let yaml: Vec<String> = batch.iter().map(|&i| node_object(&node_name(i))).collect();
            let file = dir.path().join("nodes.yaml");
            std::fs::write(&file, yaml.join("---\n"))?;
            c.kubectl(&["create", "-f", &file.display().to_string()])
                .context("create the simulated Node objects")?;
        }
        let mut nodes = Vec::with_capacity(count);
        for i in 0..count {
            let name = node_name(i);
            let node_dir = dir.path().join(&name);
            nodes.push(FleetNode {
                driver: start_driver(c, &shared, &name, &node_dir)?,
                name,
                dir: node_dir,
            });
        }
        let fleet = Self {
            nodes,
            _limit: limit,
            _shared: shared,
            _dir: dir,
        };
        fleet.wait_published(c)?;
        Ok(fleet)
    }

    /// Waits until every node's pool is in the API server with all its slices.
    fn wait_published(&self, c: &Cluster) -> Result<()> {
        let wanted = self.nodes.len();
        poll(
            &format!("the slices of {wanted} simulated nodes"),
            SLOW.max(Duration::from_secs(wanted as u64 / 4)),
            || {
                // A listing that fails or times out (thousands of slices on a machine the
                // starting drivers keep busy) is tried again.
                let pools = complete_pools(c).unwrap_or(0);
                Ok((pools >= wanted).then_some(()))
            },
        )
        .map_err(|e| {
            let logs: String = self
                .nodes
                .iter()
                .take(3)
                .map(|n| format!("--- {}\n{}\n", n.name, n.driver.log_tail()))
                .collect();
            e.context(logs)
        })
    }

    /// Applies the DeviceClasses of the fleet's profiles, as `devinject-dra device-classes`
    /// prints them.
    pub fn apply_device_classes(&self, c: &Cluster) -> Result<()> {
        let mut classes = Command::new(bin("devinject-dra"));
        classes
            .args(["device-classes", "--profiles-dir"])
            .arg(&self._shared.profiles_dir);
        let yaml = crate::daemons::run_ok(classes).context("devinject-dra device-classes")?;
        c.apply(&yaml).context("apply the DeviceClasses")?;
        Ok(())
    }

    /// Creates `count` pods named `<prefix>-<n>`, each holding a claim of one demo device made
    /// from a template of its own name, and waits until every claim is allocated (the pods are
    /// then bound; they stay Pending, no kubelet runs them); returns how long that took from
    /// the first pod's creation.
    pub fn allocate(&self, c: &Cluster, prefix: &str, count: usize) -> Result<Duration> {
        c.apply(&super::dra::demo_claim_template(prefix, 1))?;
        let pods: Vec<String> = (0..count)
            .map(|n| claimed_pod(&format!("{prefix}-{n}"), prefix))
            .collect();
        let started = std::time::Instant::now();
        c.apply(&pods.join("---\n"))?;
        poll(
            &format!("the {count} claims of pods {prefix}-* to be allocated"),
            SLOW.max(Duration::from_secs(count as u64)),
            || {
                let allocated = c.kubectl(&[
                    "get",
                    "resourceclaims",
                    "-o",
                    "jsonpath={range .items[?(@.status.allocation)]}{.metadata.name}{\"\\n\"}{end}",
                ])?;
                let mine = allocated
                    .lines()
                    .filter(|l| l.starts_with(&format!("{prefix}-")))
                    .count();
                Ok((mine >= count).then(|| started.elapsed()))
            },
        )
    }

    /// Sets the health attribute of demo device `accel` (its index) on node `i`.
    pub fn set_health(&self, i: usize, accel: usize, healthy: bool) -> Result<()> {
        let file = health_file(&self.nodes[i].dir, accel);
        std::fs::write(&file, if healthy { "ok\n" } else { "bad\n" })
            .with_context(|| format!("write {}", file.display()))
    }

    /// Plugs demo device `accel` (its index, past [`ACCELS`]) into node `i`: its device node
    /// and its healthy attribute.
    pub fn plug(&self, i: usize, accel: usize) -> Result<()> {
        let (_, major, minor) = ACCELS[accel % ACCELS.len()];
        let dir = &self.nodes[i].dir;
        std::fs::create_dir_all(health_file(dir, accel).parent().expect("a parent"))?;
        std::fs::write(health_file(dir, accel), "ok\n")?;
        mknod(
            &dir.join(format!("dev/demo/accel{accel}")),
            major,
            minor,
            "0666",
        )
    }

    /// Waits until node `i`'s pool lists device `device`, tainted if `tainted` is `Some(true)`,
    /// untainted if `Some(false)`, either way if `None`.
    pub fn wait_device(
        &self,
        c: &Cluster,
        i: usize,
        device: &str,
        tainted: Option<bool>,
    ) -> Result<()> {
        let pool = format!("{}/demo", self.nodes[i].name);
        poll(
            &format!("device {device} in pool {pool}, tainted: {tainted:?}"),
            SLOW,
            || {
                let found = c
                    .dra_slice_devices()?
                    .into_iter()
                    .find(|(p, d)| *p == pool && d["name"] == device)
                    .map(|(_, d)| d["taints"].as_array().is_some_and(|t| !t.is_empty()));
                Ok(found
                    .filter(|now| tainted.is_none_or(|want| want == *now))
                    .map(|_| ()))
            },
        )
    }

    /// The drivers' process ids.
    pub fn driver_pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(|n| n.driver.pid()).collect()
    }

    /// Node `i`'s driver log.
    pub fn driver_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.nodes[i].driver.log()).unwrap_or_default()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // SIGTERM to all first, so that they exit together rather than one wait each.
        for n in &self.nodes {
            if let Some(pid) = n.driver.pid().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
        for n in &mut self.nodes {
            n.driver.stop();
        }
    }
}

/// Pod `name`, holding a claim made from template `template`, for a simulated node: it
/// tolerates the taints the node controller puts on nodes whose kubelet never reports.
fn claimed_pod(name: &str, template: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         nodeSelector: {{devinject.io/simulated: \"true\"}}\n  \
         tolerations: [{{operator: Exists}}]\n  automountServiceAccountToken: false\n  \
         resourceClaims:\n  - name: demo\n    resourceClaimTemplateName: {template}\n  \
         containers:\n  - name: main\n    image: {}\n    resources:\n      claims:\n      \
         - name: demo\n",
        crate::cri_node::BUSYBOX
    )
}

/// The health attribute of demo device `accel` under node directory `dir`.
fn health_file(dir: &Path, accel: usize) -> PathBuf {
    dir.join(format!("sys/class/demo/accel{accel}/health"))
}

/// Starts node `name`'s driver on its own roots under `dir` (made here: the demo devices and
/// their healthy attributes), with `shared`'s profiles and driver files.
fn start_driver(c: &Cluster, shared: &SimHost, name: &str, dir: &Path) -> Result<Daemon> {
    std::fs::create_dir_all(dir.join("dev/demo"))?;
    for (accel, (file, major, minor)) in ACCELS.iter().enumerate() {
        mknod(&dir.join("dev/demo").join(file), *major, *minor, "0666")?;
        let health = health_file(dir, accel);
        std::fs::create_dir_all(health.parent().expect("a parent"))?;
        std::fs::write(&health, "ok\n")?;
    }
    let (ctl, major, minor) = CTL;
    mknod(&dir.join("dev/demo").join(ctl), major, minor, "0666")?;
    let mut cmd = Command::new(bin("devinject-dra"));
    cmd.arg(format!("--node-name={name}"))
        .arg("--kubeconfig")
        .arg(c.kubeconfig())
        .arg("--profiles-dir")
        .arg(&shared.profiles_dir)
        .arg("--dev-root")
        .arg(dir.join("dev"))
        .arg("--sys-root")
        .arg(dir.join("sys"))
        .arg("--driver-root")
        .arg(&shared.driver_root)
        .arg("--hook-path")
        .arg(bin("devinject-hook"))
        .arg("--hook-config")
        .arg(&shared.config)
        .args(node_dir_args(dir)?)
        .env("RUST_LOG", "info");
    Daemon::start("devinject-dra", cmd, &dir.join("dra.log"))
}

/// How many of devinject's pools the API server holds with all their slices.
fn complete_pools(c: &Cluster) -> Result<usize> {
    let slices: serde_json::Value = serde_json::from_str(&c.kubectl(&[
        "get",
        "resourceslices",
        "-o",
        "jsonpath={\"[\"}{range .items[*]}[\"{.spec.driver}\",\"{.spec.pool.name}\",{.spec.pool.resourceSliceCount}],{end}[]]",
    ])?)
    .context("parse the slices' pools")?;
    let mut pools: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for s in slices.as_array().into_iter().flatten() {
        if s[0] != DRA_DRIVER {
            continue;
        }
        let entry = pools
            .entry(s[1].as_str().unwrap_or_default().to_owned())
            .or_default();
        entry.0 += 1;
        entry.1 = s[2].as_i64().unwrap_or_default();
    }
    Ok(pools.values().filter(|(have, want)| have == want).count())
}

/// The sum of the API server's metric `name` over its series whose labels include every one of
/// `labels` (`key="value"`), from its `/metrics`.
pub fn apiserver_metric(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|want| rest.contains(want)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// The writes of ResourceSlices the API server counted in `metrics` (creates, updates,
/// patches, applies and deletes).
pub fn slice_writes(metrics: &str) -> f64 {
    ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
        .iter()
        .map(|verb| {
            apiserver_metric(
                metrics,
                "apiserver_request_total",
                &["resource=\"resourceslices\"", &format!("verb=\"{verb}\"")],
            )
        })
        .sum()
}

/// The bytes of ResourceSlice request bodies the API server counted in `metrics`.
pub fn slice_write_bytes(metrics: &str) -> f64 {
    apiserver_metric(
        metrics,
        "apiserver_request_body_size_bytes_sum",
        &["resource=\"resourceslices\""],
    )
}

/// The ResourceSlice watch events the API server sent, and their bytes, in `metrics`: what
/// every watcher (the scheduler, each driver's watch of its own) received.
pub fn slice_watch_events(metrics: &str) -> (f64, f64) {
    let kind = ["resource=\"resourceslices\""];
    (
        apiserver_metric(metrics, "apiserver_watch_events_total", &kind),
        apiserver_metric(metrics, "apiserver_watch_events_sizes_sum", &kind),
    )
}

/// The API server's `/metrics` now.
pub fn apiserver_metrics(c: &Cluster) -> Result<String> {
    c.kubectl(&["get", "--raw", "/metrics"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metric_is_summed_over_the_series_with_the_labels_asked() {
        let text = "# HELP x\n\
            apiserver_request_total{code=\"201\",group=\"resource.k8s.io\",resource=\"resourceslices\",verb=\"APPLY\"} 3\n\
            apiserver_request_total{code=\"200\",group=\"resource.k8s.io\",resource=\"resourceslices\",verb=\"APPLY\"} 4\n\
            apiserver_request_total{code=\"200\",group=\"\",resource=\"pods\",verb=\"APPLY\"} 100\n\
            apiserver_request_total_other{resource=\"resourceslices\"} 9\n";
        let sum = apiserver_metric(
            text,
            "apiserver_request_total",
            &["resource=\"resourceslices\"", "verb=\"APPLY\""],
        );
        assert_eq!(sum, 7.0);
        assert_eq!(apiserver_metric(text, "missing", &[]), 0.0);
    }

    #[test]
    fn each_profile_kind_is_the_demo_profile_with_its_sharing() {
        let shipped = std::fs::read_to_string(crate::sim::shipped_profiles().join("demo.toml"))
            .expect("the shipped demo profile");
        let plain = FleetProfile::Plain.profile(&shipped, None);
        assert!(plain.contains("health_sysfs") && !plain.contains("[partitions]"));
        assert!(!plain.contains("health_interval_ms"));
        assert!(FleetProfile::Plain
            .profile(&shipped, Some(1000))
            .contains("health_interval_ms = 1000\n"));
        assert!(FleetProfile::Partitioned
            .profile(&shipped, None)
            .contains("[partitions]"));
        assert!(FleetProfile::Capacity
            .profile(&shipped, None)
            .contains("[capacity]\npods = 4"));
    }
}
