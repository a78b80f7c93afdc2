//! cgroup v1 and hybrid: `devices.allow` is written, and on hybrid hosts both the v1
//! controller and the v2 program must allow.

use std::fs;
use std::path::Path;

use devinject_cgroup::{grant, locate, CgroupOptions, V2Outcome};
use serial_test::serial;

use crate::support::{
    assert_denied, assert_probes, denied, grant_to, own_v1_devices_dir, passes, privileged, probe,
    rules, skip, Resident, TestCgroup, Use, V2Cgroup,
};

const NULL: &str = "/dev/null";
const URANDOM: &str = "/dev/urandom";

/// A v1 devices cgroup that denies everything but /dev/null, like a runtime's.
fn v1_runtime_cgroup(parent: &Path) -> TestCgroup {
    let cg = TestCgroup::create_under(parent);
    fs::write(cg.dir.join("devices.deny"), "a").expect("devices.deny a");
    fs::write(cg.dir.join("devices.allow"), "c 1:3 rwm").expect("devices.allow null");
    cg
}

#[test]
#[serial]
fn v1_devices_allow_is_written() {
    if !privileged("v1_devices_allow_is_written") {
        return;
    }
    let Some(parent) = own_v1_devices_dir() else {
        skip(
            "v1_devices_allow_is_written",
            "no cgroup v1 devices hierarchy mounted",
        );
        return;
    };
    let cg = v1_runtime_cgroup(&parent);
    let resident = Resident::start_in(&[&cg]);
    assert_probes(
        &[&cg],
        &[
            denied(URANDOM, Use::Read, "urandom before"),
            passes(NULL, Use::ReadWrite, "null before"),
        ],
    );

    let pid = resident.pid_i32();
    let report = grant(pid, &rules(&["c 1:9 rw"]), &CgroupOptions::default()).expect("grant");
    assert_eq!(report.v1.as_deref(), Some(cg.dir.as_path()));

    let list = fs::read_to_string(cg.dir.join("devices.list")).expect("devices.list");
    assert!(list.lines().any(|l| l == "c 1:9 rw"), "{list}");
    assert_probes(
        &[&cg],
        &[
            passes(URANDOM, Use::ReadWrite, "urandom after"),
            denied("/dev/full", Use::Read, "full never allowed"),
        ],
    );
    drop(resident);
}

#[test]
#[serial]
fn hybrid_host_needs_both_and_gets_both() {
    if !privileged("hybrid_host_needs_both_and_gets_both") {
        return;
    }
    let Some(parent) = own_v1_devices_dir() else {
        skip(
            "hybrid_host_needs_both_and_gets_both",
            "no cgroup v1 devices hierarchy mounted",
        );
        return;
    };
    let v2 = V2Cgroup::new();
    let v1_cg = v1_runtime_cgroup(&parent);
    let v2_cg = &v2.cg;
    // The v2 program already allows urandom; the v1 controller alone denies it.
    let old_id = v2_cg.attach_runtime_program(&rules(&["c 1:3 rwm", "c 1:9 rwm"]));
    let resident = Resident::start_in(&[&v1_cg, v2_cg]);
    let both = [&v1_cg, v2_cg];
    assert_denied(
        probe(&both, Path::new(URANDOM), Use::Read),
        "urandom: v2 allows, v1 denies",
    );

    let report = grant_to(&resident, &rules(&["c 1:9 rw", "c 1:8 r"]));
    assert_eq!(report.v1.as_deref(), Some(v1_cg.dir.as_path()));
    let V2Outcome::Replaced { programs, .. } = &report.v2 else {
        panic!("expected a v2 replacement, got {:?}", report.v2);
    };
    assert_eq!(programs[0].old_id, old_id);

    assert_probes(
        &both,
        &[
            passes(URANDOM, Use::ReadWrite, "urandom after"),
            // /dev/random: newly allowed on both.
            passes("/dev/random", Use::Read, "random after"),
            denied("/dev/random", Use::Write, "random w not granted"),
        ],
    );
    drop(resident);
}

/// At the conventional place, `/sys/fs/cgroup/devices` is taken when it is proven: a cgroup
/// file system with `devices.allow`, whose directory for the process lists it.
#[test]
#[serial]
fn the_conventional_devices_mount_is_taken_when_proven() {
    let name = "the_conventional_devices_mount_is_taken_when_proven";
    if !privileged(name) {
        return;
    }
    let sys = Path::new("/sys/fs/cgroup");
    let Some(parent) = own_v1_devices_dir().filter(|p| p.starts_with(sys.join("devices"))) else {
        skip(
            name,
            "no cgroup v1 devices hierarchy at /sys/fs/cgroup/devices",
        );
        return;
    };
    let cg = v1_runtime_cgroup(&parent);
    let resident = Resident::start_in(&[&cg]);
    let pid = resident.pid_i32();
    let file = Path::new("/proc").join(pid.to_string()).join("cgroup");
    let text = fs::read_to_string(&file).expect("read");
    // The devices line only: a v2 line would need cgroup2 at the conventional place too.
    let devices: String = text
        .lines()
        .filter(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "devices"))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let entries = locate::parse_proc_cgroup(&file, &devices).expect("parse");
    let found = locate::conventional(sys, &entries, pid).expect("proven");
    assert_eq!(found.v1_devices.as_deref(), Some(cg.dir.as_path()));
    drop(resident);
}
