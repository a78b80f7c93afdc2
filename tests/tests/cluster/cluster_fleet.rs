//! DRA at fleet size, at its smallest as a correctness check: 20 simulated nodes on a real
//! Kubernetes 1.37 control plane ([`devinject_tests::cluster::fleet`]: a Node object and one
//! `devinject-dra` each, no kubelet). The figures at 100 and more nodes come from
//! `devinject-cluster-bench --fleet` (docs/benchmarks.md, section 6f).
//!
//! - every node's pool is published, and nothing is written again while nothing changes;
//! - a device turning unhealthy on one node changes that node's slice alone, in one write, and
//!   its recovery in one more;
//! - 20 claims are allocated by the real scheduler on the simulated nodes, no device twice.
//!
//! What the simulation cannot show is in the harness's header (no kubelet: nothing is
//! prepared, and the kubelet's own API traffic is absent).

use std::collections::BTreeMap;
use std::time::Duration;

use devinject_tests::cluster::fleet::{
    apiserver_metrics, node_name, slice_writes, Fleet, FleetProfile,
};
use devinject_tests::cluster::{Cluster, DRA_DRIVER};
use serde_json::Value;

/// The simulated nodes.
const NODES: usize = 20;

/// Each of devinject's slices: name → (pool, resourceVersion).
fn slice_versions(c: &Cluster) -> BTreeMap<String, (String, String)> {
    let slices: Value = serde_json::from_str(
        &c.kubectl(&["get", "resourceslices", "-o", "json"])
            .expect("the slices"),
    )
    .expect("slices JSON");
    slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["spec"]["driver"] == DRA_DRIVER)
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                (
                    s["spec"]["pool"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    s["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                ),
            )
        })
        .collect()
}

/// The pools whose slices changed between `before` and `after`.
fn changed_pools(
    before: &BTreeMap<String, (String, String)>,
    after: &BTreeMap<String, (String, String)>,
) -> Vec<String> {
    let mut pools: Vec<String> = after
        .iter()
        .filter(|(name, now)| before.get(*name) != Some(*now))
        .map(|(_, (pool, _))| pool.clone())
        .collect();
    pools.dedup();
    pools
}

/// The slice writes the API server counted so far.
fn writes(c: &Cluster) -> f64 {
    slice_writes(&apiserver_metrics(c).expect("the API server's metrics"))
}

#[test]
fn twenty_simulated_nodes_publish_once_and_a_health_change_writes_its_slice_alone() {
    if !devinject_tests::cluster::ready() {
        return;
    }
    let c = Cluster::start_control_plane_only().expect("the control plane");
    // Health read every second: a few seconds show that reads finding nothing new write
    // nothing.
    let fleet =
        Fleet::start(&c, NODES, FleetProfile::Plain, Some(1000)).expect("the simulated nodes");
    fleet.apply_device_classes(&c).expect("the DeviceClasses");

    // Settled: nothing is written while nothing changes (the health schedule reads, and
    // applies nothing that is the same).
    std::thread::sleep(Duration::from_secs(2));
    let (settled, before) = (writes(&c), slice_versions(&c));
    assert_eq!(before.len(), NODES, "one slice per node's pool: {before:?}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(writes(&c), settled, "slices written while nothing changed");

    // One device of one node unhealthy: that node's slice alone, one write; and back.
    let (node, pool) = (3, format!("{}/demo", node_name(3)));
    fleet.set_health(node, 1, false).expect("write the health");
    fleet
        .wait_device(&c, node, "demo-1", Some(true))
        .unwrap_or_else(|e| panic!("{e:#}"));
    std::thread::sleep(Duration::from_secs(1));
    let after = slice_versions(&c);
    assert_eq!(changed_pools(&before, &after), std::slice::from_ref(&pool));
    assert_eq!(writes(&c) - settled, 1.0, "{}", fleet.driver_log(node));
    fleet.set_health(node, 1, true).expect("write the health");
    fleet
        .wait_device(&c, node, "demo-1", Some(false))
        .unwrap_or_else(|e| panic!("{e:#}"));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(changed_pools(&after, &slice_versions(&c)), [pool]);
    assert_eq!(writes(&c) - settled, 2.0, "{}", fleet.driver_log(node));

    // The real scheduler allocates claims on the simulated nodes, no device twice.
    let took = fleet
        .allocate(&c, "fleet", NODES)
        .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{NODES} claims allocated in {took:?}");
    let claims: Value = serde_json::from_str(
        &c.kubectl(&["get", "resourceclaims", "-o", "json"])
            .expect("the claims"),
    )
    .expect("claims JSON");
    let mut given: Vec<(String, String)> = claims["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|claim| {
            claim["status"]["allocation"]["devices"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|r| {
            (
                r["pool"].as_str().unwrap_or_default().to_owned(),
                r["device"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(given.len(), NODES, "{claims:#}");
    given.sort();
    given.dedup();
    assert_eq!(given.len(), NODES, "a device given twice: {given:?}");
}
