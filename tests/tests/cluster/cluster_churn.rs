//! Churn with faults on a real cluster ([`devinject_tests::churn`]): four nodes, one on the
//! runtime shim (the `devinject` RuntimeClass) and one on `devinject-nri`, both containerd 2,
//! one on CRI-O injecting the CDI specs the plugin's answers name, each with the real device
//! plugin, and one on `devinject-dra` (containerd 2 injecting its claims' specs); each with
//! four demo devices and `/dev/kvm` shared as three replicas (as KubeVirt shares it). On the
//! DRA node pods ask through ResourceClaimTemplates. Pods are created and deleted continuously, four at a time, each asking for 0–2 demo
//! devices and, one time in two, a kvm replica, on a random path (the
//! seed is printed; `DEVINJECT_CHURN_SEED` repeats a mix), every tenth forging the request
//! variable (on each path in turn; on the CDI path with a CDI annotation on the pod too).
//!
//! Faults, each at least twice (`DEVINJECT_CHURN_STARTS` > 150 runs more rounds: one per 75
//! starts), one at a time, spread over the run and the nodes:
//! - the device plugin SIGKILLed and started again (shim node: the NRI node's plugin lives
//!   through the run, so its growth is measured);
//! - the kubelet restarted (it deletes the plugin sockets; the plugin registers again);
//! - containerd restarted under running containers (the shims stay; `devinject-nri`
//!   registers again), on the shim and NRI nodes in turn;
//! - CRI-O restarted under running containers (their conmon stays), on the CDI node;
//! - a demo device node unplugged for a few seconds and made again;
//! - a pod allocating past its 32 MiB limit right after its start, OOM-killed;
//! - `/var/run/cdi`, the CDI directory the node's containerd 2 reads by default, a full 64 KiB
//!   tmpfs for a few seconds (neither path writes CDI specs: the fault holds that a start does
//!   not depend on it);
//! - the kubelet's pod-resources socket moved away for a few seconds (a pod asking a device
//!   is started in the window: the policy cannot ask, so it must refuse, never guess);
//! - the DRA node's kubelet restarted (it deletes the node's ResourceSlices: the driver must
//!   publish them again, and a claim made at once must be allocated and start);
//! - the DRA node's claim specs wiped while a claimed pod runs, whose container is killed:
//!   the driver must put the specs back, the container start again with its devices, and a new
//!   claim be prepared.
//!
//! After every start, from inside the container: exactly the granted devices (the kubelet's
//! checkpoint: as many ids of each resource as asked) with the host's numbers, opening; its
//! own node of every other device denied by the device cgroup (EPERM); the control node and
//! the library exactly with a demo grant. Across the running pods of a node: never one
//! exclusive device, nor one replica id, in two of them, by the checkpoint and by what each
//! probe saw (on the DRA node the allocated ResourceClaims stand for the checkpoint); kvm's
//! replicas held by two pods at once at least once. A forger is refused with devinject's
//! message (shim, NRI) or runs with nothing (CDI, DRA: the engine injects only what the
//! kubelet passed). A pod that met no fault must start. At the end, once every pod is deleted: no leaked CDI spec, pod or task mount, stale
//! device-plugin socket, pod cgroup or device entry, stray process, temp file or task bundle
//! (the list: [`devinject_tests::churn::leaks::CHECKED`]; containerd's own shims that lived
//! through a containerd restart and stay after their pod are reported apart); the NRI node's
//! device plugin and `devinject-nri` within bounds of their first reading (RSS, fds, threads
//! from `/proc`).
//!
//! Needs what `cluster_engine_paths.rs` needs and CRI-O (scripts/crio-build.sh); skipped
//! otherwise, a failure under CI. One cluster at a time.

use devinject_tests::churn::pods::EnginePath;
use devinject_tests::churn::{ready, run, Settings};

#[test]
fn pods_churning_through_faults_get_exactly_their_devices_and_leave_nothing_behind() {
    let Some(peers) = ready() else {
        return;
    };
    let settings = Settings::from_env();
    let outcome = run(&settings, &peers).unwrap_or_else(|e| panic!("churn: {e:#}"));
    let report = outcome.report();
    println!("{report}");
    assert!(
        outcome.violations.is_empty(),
        "{} invariant violations:\n{report}",
        outcome.violations.len()
    );
    assert!(
        outcome.total_starts() >= settings.starts,
        "only {} starts:\n{report}",
        outcome.total_starts()
    );
    for kind in devinject_tests::churn::faults::FaultKind::ALL {
        let n = outcome.faults.get(kind.name()).copied().unwrap_or(0);
        assert!(n >= 2, "{} injected {n} times:\n{report}", kind.name());
    }
    assert!(
        outcome.oom_killed >= 2,
        "the kernel OOM-killed {} pods:\n{report}",
        outcome.oom_killed
    );
    assert!(
        outcome.forgers_refused.len() == EnginePath::ALL.len(),
        "forgers refused or given nothing on every path:\n{report}"
    );
    assert!(
        outcome.most_sharing >= 2,
        "kvm, a shared device, was never held by two pods at once:\n{report}"
    );
}
