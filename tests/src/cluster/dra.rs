//! What the DRA tests and the DRA benchmark put on a cluster started with [`Setup::Dra`]: the
//! DeviceClasses `devinject-dra` prints, and claim templates of the demo profile's class.
//!
//! [`Setup::Dra`]: super::Setup::Dra

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

use super::{Cluster, DRA_DRIVER};
use crate::bins::bin;
use crate::daemons::run_ok;

/// containerd 2 and a Kubernetes release with DRA GA (1.34 or later): the containerd release,
/// or `None` (a skip, a failure under CI) when either is missing.
pub fn ready_for_dra() -> Option<crate::runtimes::Release> {
    let release = super::ready_with_containerd("2")?;
    let today = super::Kubernetes::find().is_some_and(|k| !k.is_legacy());
    crate::skip::require(
        today,
        "DRA needs Kubernetes >= 1.34 (DEVINJECT_KUBE_BIN: scripts/kube-module-build.sh)",
    )
    .then_some(release)
}

/// The DeviceClass `devinject-dra device-classes` prints for the demo profile.
pub const DEMO_CLASS: &str = "demo.devinject.io";

impl Cluster {
    /// Whether this release turns on what DRA gained after its GA core (Kubernetes 1.36 made
    /// each beta and on by default, its `kube_features.go`): device taints
    /// (`DRADeviceTaints`), the devices' health in the pods' status (`ResourceHealthStatus`),
    /// DeviceClasses serving extended resources (`DRAExtendedResource`) and binding conditions
    /// (`DRADeviceBindingConditions`). Off on 1.34 and 1.35, where the driver leaves unhealthy
    /// devices out of its slices.
    pub fn dra_beyond_ga(&self) -> bool {
        self.kubernetes().minor() >= 36
    }

    /// Applies the DeviceClasses of the first node's profiles, as `devinject-dra
    /// device-classes` prints them (what the manifests ship).
    pub fn apply_dra_device_classes(&self) -> Result<()> {
        let mut classes = Command::new(bin("devinject-dra"));
        classes
            .args(["device-classes", "--profiles-dir"])
            .arg(&self.host().profiles_dir);
        let yaml = run_ok(classes).context("devinject-dra device-classes")?;
        self.apply(&yaml).context("apply the DeviceClasses")?;
        Ok(())
    }
}

/// The DeviceClass `devinject-dra device-classes` prints for `profile`.
pub fn device_class(profile: &str) -> String {
    format!("{profile}.{DRA_DRIVER}")
}

/// A ResourceClaimTemplate `name` asking for `count` devices of the DeviceClass `class`, in the
/// request `dev`.
pub fn claim_template(name: &str, class: &str, count: u32) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: {name}\n\
         spec:\n  spec:\n    devices:\n      requests:\n      - name: dev\n        exactly:\n          \
         deviceClassName: {class}\n          allocationMode: ExactCount\n          count: {count}\n"
    )
}

/// [`claim_template`] of [`DEMO_CLASS`].
pub fn demo_claim_template(name: &str, count: u32) -> String {
    claim_template(name, DEMO_CLASS, count)
}

/// A function of the demo profile whose prepare program hangs (far beyond any deadline the
/// kubelet gives a call) until it is killed: see [`add_hanging_function`].
pub struct HangingFunction {
    /// The function's id, for a claim's opaque `function` parameter.
    pub id: &'static str,
    /// One line is appended to it each time the program starts hanging.
    runs: PathBuf,
    /// The link to `sleep` the program execs into, so its processes can be told apart.
    sleeper: PathBuf,
}

impl HangingFunction {
    /// How many times the program has started hanging.
    pub fn runs(&self) -> usize {
        std::fs::read_to_string(&self.runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// The pids of its hanging processes now (they run in the node's PID namespaces, which the
    /// host's `/proc` shows).
    pub fn running(&self) -> Vec<u32> {
        let wanted = [self.sleeper.as_os_str().as_encoded_bytes(), b"\0"].concat();
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let pid = e.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
                cmdline.starts_with(&wanted).then_some(pid)
            })
            .collect()
    }

    /// SIGKILLs its hanging processes, so none outlives the test.
    pub fn kill(&self) {
        for pid in self.running() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Adds [`HangingFunction`] `hang` to `host`'s demo profile, whose prepare step
/// [`crate::sim::add_demo_prepare_step`] has written: the profile's command becomes a wrapper
/// that, for `hang`, records its start and sleeps ten minutes, and runs the profile's program
/// for every other function; the step's own limit is raised to 300 s (the most a profile may
/// set), so what ends a hanging run is the deadline of the kubelet's call. The driver reads its
/// profiles at start.
pub fn add_hanging_function(host: &crate::sim::SimHost) -> Result<HangingFunction> {
    use std::os::unix::fs::PermissionsExt;
    let profile = host.profiles_dir.join("demo.toml");
    let text = std::fs::read_to_string(&profile).context("read the demo profile")?;
    let program = host.dir.join("demo-program");
    let command = format!("command = [\"{}\"", program.display());
    anyhow::ensure!(
        text.contains(&command) && text.contains("timeout_ms = 5000"),
        "the demo profile has no prepare step of add_demo_prepare_step:\n{text}"
    );
    let hanging = HangingFunction {
        id: "hang",
        runs: host.dir.join("hang-runs"),
        sleeper: host.dir.join("hang-sleep"),
    };
    std::os::unix::fs::symlink("/bin/sleep", &hanging.sleeper).context("the sleep link")?;
    let wrapper = host.dir.join("demo-program-hanging");
    // Written and closed before any run: a file open for writing cannot be executed.
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ \"$DEVINJECT_FUNCTION\" != {id} ] || {{ echo started >> {runs}; exec {sleeper} 600; }}\n\
             exec {program} \"$@\"\n",
            id = hanging.id,
            runs = hanging.runs.display(),
            sleeper = hanging.sleeper.display(),
            program = program.display(),
        ),
    )
    .context("the wrapper")?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    let text = text
        .replace(&command, &format!("command = [\"{}\"", wrapper.display()))
        .replace("timeout_ms = 5000", "timeout_ms = 300000")
        + &format!("[[prepare.functions]]\nid = \"{}\"\n", hanging.id);
    std::fs::write(&profile, text).context("write the demo profile")?;
    Ok(hanging)
}
