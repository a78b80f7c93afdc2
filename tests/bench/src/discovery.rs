//! Row 5: discovery and planning cost in-process, on a host with many devices.
//!
//! The `bench` profile is loaded once; each timed round then runs what the hook and the shim run
//! per container for it: [`discover()`] (glob the dev root, stat every node) and the planner on
//! request `all`. Host file resolution is timed on its own, as it depends on the library count,
//! not on the devices.

use std::time::Instant;

use anyhow::{Context, Result};
use devinject_devices::{plan, ContainerLayout, HostRoots, PlanInput, Request};
use devinject_discovery::{discover, profile_file, resolve_driver_files};

use crate::host::{BenchHost, PROFILE};
use crate::stats::Samples;
use crate::Options;

/// Discovery figures.
#[derive(Debug, Clone)]
pub struct DiscoveryRow {
    /// Devices on the host.
    pub devices: usize,
    /// Libraries in the profile.
    pub libraries: usize,
    /// Loading and validating the profile file.
    pub load: Samples,
    /// `discover` alone.
    pub discover: Samples,
    /// `resolve_driver_files` alone.
    pub resolve: Samples,
    /// `discover` + `plan` for `all`.
    pub discover_and_plan: Samples,
}

/// Measures discovery on `host`.
pub fn measure(opts: &Options, host: &BenchHost) -> Result<DiscoveryRow> {
    eprintln!("bench: discovery, {} devices", host.nodes.len());
    let path = host.profiles_dir.join(format!("{PROFILE}.toml"));
    let roots = HostRoots {
        dev_root: host.dev_root.clone(),
        sys_root: host.sys_root.clone(),
        proc_root: "/proc".into(),
        driver_root: host.driver_root.clone(),
    };
    let request = Request::parse(Some("all"))?;
    let layout = ContainerLayout::default();
    let rounds = opts.warmup + opts.runs.max(100);
    let mut row = DiscoveryRow {
        devices: host.nodes.len(),
        libraries: host.libs.len(),
        load: Samples::default(),
        discover: Samples::default(),
        resolve: Samples::default(),
        discover_and_plan: Samples::default(),
    };
    for round in 0..rounds {
        let keep = round >= opts.warmup;
        let t = Instant::now();
        let profile = profile_file::load(&path).context("load the bench profile")?;
        let load = t.elapsed();

        let t = Instant::now();
        let inventory = discover(&profile, &roots)?;
        let disc = t.elapsed();

        let t = Instant::now();
        let files = resolve_driver_files(&profile, &roots)?;
        let resolve = t.elapsed();

        let t = Instant::now();
        let inventory2 = discover(&profile, &roots)?;
        let planned = plan(PlanInput {
            profile: &profile,
            inventory: &inventory2,
            request: &request,
            resolve: devinject_devices::Resolve::Ids,
            driver_files: &files,
            capabilities: &devinject_devices::Capabilities::All,
            layout: &layout,
        })?
        .context("a plan for `all`")?;
        let both = t.elapsed();
        anyhow::ensure!(
            inventory.devices.len() == host.nodes.len()
                && planned.edits.device_nodes.len() == host.nodes.len(),
            "discovered {} of {} devices",
            inventory.devices.len(),
            host.nodes.len()
        );
        if keep {
            row.load.push(load);
            row.discover.push(disc);
            row.resolve.push(resolve);
            row.discover_and_plan.push(both);
        }
    }
    Ok(row)
}
