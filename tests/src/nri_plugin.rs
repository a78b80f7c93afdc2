//! `devinject-nri` beside a test node's runtime: containerd's ([`crate::cri_release::ReleaseNode`])
//! or CRI-O's ([`crate::crio::CrioNode`]). Both nodes start it the same way, count its
//! registrations in its log the same way, and must give the same verdict on a prepare step slower
//! than the runtime's NRI request timeout: [`SlowPrepareRun::assert_kept`].

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use devinject_nri::session::REGISTERED;

use crate::bins::bin;
use crate::daemons::{poll, Daemon};
use crate::probe::Report;
use crate::sim::assert_demo_granted_0_1_in;

/// Starts the built `devinject-nri` on the runtime's NRI `socket` with the host configuration
/// `config`, logging to `log`, serving its metrics on a loopback port of its own ([`metrics`]).
/// It has not registered yet: [`wait_registered`].
pub fn start(socket: &Path, config: &Path, log: &Path) -> Result<Daemon> {
    let mut cmd = Command::new(bin("devinject-nri"));
    cmd.arg("--socket").arg(socket).arg("--config").arg(config);
    cmd.arg(crate::scrape::ANY_LOOPBACK_PORT);
    Daemon::start("devinject-nri", cmd, log)
}

/// Waits until the plugin logging to `log` has registered `times` times in all; the error
/// carries the end of its log.
pub fn wait_registered(log: &Path, times: usize) -> Result<()> {
    poll("devinject-nri to register", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        Ok((text.matches(REGISTERED).count() >= times).then_some(()))
    })
    .with_context(|| log_tail(log))
}

/// The `/metrics` of the plugin logging to `log`, scraped over TCP.
pub fn metrics(log: &Path) -> Result<String> {
    crate::scrape::from_log(&std::fs::read_to_string(log).unwrap_or_default())
}

/// The last lines of the plugin's log at `log`.
pub fn log_tail(log: &Path) -> String {
    crate::daemons::tail(log, 40)
}

/// What one run of the slow prepare case saw: a container whose prepare step takes longer than
/// the runtime's NRI request timeout, then at once a container asking for devices 0 and 1.
pub struct SlowPrepareRun<'a> {
    /// The runtime, for messages (`containerd 2`, `CRI-O`).
    pub runtime: &'a str,
    /// The runtime's setting for its request timeout, which the refusal must name.
    pub timeout_key: &'a str,
    /// How long the slow step's program runs, in seconds.
    pub step_seconds: u32,
    /// How long the slow container's run took.
    pub took: Duration,
    /// The slow container's outcome: its exit code and output, or its refusal.
    pub slow: &'a std::result::Result<(i32, String), String>,
    /// The next container's outcome.
    pub next: &'a std::result::Result<(i32, String), String>,
    /// The runtime's whole log.
    pub runtime_log: &'a str,
    /// The plugin's log.
    pub plugin_log: &'a str,
}

impl SlowPrepareRun<'_> {
    /// The slow container failed within the plugin's budget (1500 ms), naming the profile,
    /// device, function and the settings to raise; the runtime did not close the plugin (the NRI
    /// library's "closing plugin" / "connection to plugin" lines, in containerd and CRI-O
    /// alike), which registered once; and the next container got devices 0 and 1.
    pub fn assert_kept(&self) {
        let closed: Vec<&str> = self
            .runtime_log
            .lines()
            .filter(|l| l.contains("closing plugin") || l.contains("connection to plugin"))
            .collect();
        let seen = format!(
            "{}: the slow container ({} s prepare step) took {:?}: {:?}\n--- the next \
             container\n{:?}\n--- {} on the plugin\n{}\n--- plugin\n{}",
            self.runtime,
            self.step_seconds,
            self.took,
            self.slow,
            self.next,
            self.runtime,
            closed.join("\n"),
            self.plugin_log
        );
        let err = self.slow.as_ref().expect_err(&format!(
            "the slow prepare step must fail its own container\n{seen}"
        ));
        assert!(
            err.contains("profile demo for device 1 (function slow)")
                && err.contains("NRI request budget of 1500 ms")
                && err.contains(self.timeout_key)
                && err.contains("nri_request_budget_ms"),
            "{seen}"
        );
        assert!(self.took < Duration::from_secs(2), "{seen}");
        assert!(
            closed.is_empty(),
            "{} must keep the plugin\n{seen}",
            self.runtime
        );
        assert_eq!(self.plugin_log.matches(REGISTERED).count(), 1, "{seen}");
        let (code, output) = self.next.as_ref().unwrap_or_else(|e| panic!("{e}\n{seen}"));
        assert_eq!(*code, 0, "{seen}");
        assert_demo_granted_0_1_in(&Report::parse(output), &seen);
    }
}
