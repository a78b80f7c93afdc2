//! cgroup v2: the runtime's device program is extended and swapped on the real kernel.

use std::path::Path;

use devinject_cgroup::ebpf::program::F_ALLOW_MULTI;
use devinject_cgroup::ebpf::{CgroupDir, DeviceProgram, Insn, Reg};
use devinject_cgroup::{grant, Access, CgroupError, DeviceKind, DeviceRule, V2Outcome};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serial_test::serial;

use crate::support::{
    assert_denied, assert_passed, private_mount_namespace, privileged, probe, rules, runc_like,
    Cgroup2, Mounted, ProcView, Resident, TestCgroup, Use,
};

const NULL: &str = "/dev/null";
const ZERO: &str = "/dev/zero";
const FULL: &str = "/dev/full";
const URANDOM: &str = "/dev/urandom";

/// What runc-like runtimes allow in these tests: null rwm, zero rw.
fn runtime_rules() -> Vec<DeviceRule> {
    rules(&["c 1:3 rwm", "c 1:5 rw"])
}

#[test]
#[serial]
fn runtime_program_is_replaced_atomically_and_grants_access() {
    if !privileged("runtime_program_is_replaced_atomically_and_grants_access") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let cg = TestCgroup::create_under(&v2.own);

    // Before any program: the baseline the program will change.
    assert_passed(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom, no program",
    );

    let old_id = cg.attach_runtime_program(&runtime_rules());
    let resident = Resident::start_in(&[&cg]);
    assert_denied(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom before grant",
    );
    assert_passed(
        probe(&[&cg], Path::new(NULL), Use::ReadWrite),
        "null before grant",
    );

    let view = ProcView::new();
    let report = grant(
        resident.pid_i32(),
        &rules(&["c 1:9 rw"]),
        &view.options_for(resident.pid()),
    )
    .expect("grant");

    let V2Outcome::Replaced {
        cgroup,
        programs,
        unreadable,
    } = &report.v2
    else {
        panic!("expected an atomic replacement, got {:?}", report.v2);
    };
    assert_eq!(cgroup, &cg.dir);
    assert!(unreadable.is_empty());
    assert_eq!(programs.len(), 1);
    assert_eq!(programs[0].old_id, old_id);
    assert_ne!(programs[0].new_id, old_id);
    assert_eq!(
        cg.programs(),
        vec![programs[0].new_id],
        "exactly the new program attached"
    );

    assert_passed(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom read after grant",
    );
    assert_passed(
        probe(&[&cg], Path::new(URANDOM), Use::ReadWrite),
        "urandom rw after grant",
    );
    assert_passed(
        probe(&[&cg], Path::new(NULL), Use::ReadWrite),
        "null after grant",
    );
    assert_passed(
        probe(&[&cg], Path::new(ZERO), Use::ReadWrite),
        "zero after grant",
    );
    assert_denied(
        probe(&[&cg], Path::new(FULL), Use::Read),
        "full was never allowed",
    );
    drop(resident);
}

#[test]
#[serial]
fn granted_access_is_exactly_what_was_asked() {
    if !privileged("granted_access_is_exactly_what_was_asked") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let nodes = Mounted::new("tmpfs", Some("mode=755"));
    let cg = TestCgroup::create_under(&v2.own);
    cg.attach_runtime_program(&runtime_rules());
    let resident = Resident::start_in(&[&cg]);

    let view = ProcView::new();
    let granted = [
        DeviceRule::new(DeviceKind::Char, 1, 9, Access::R),
        DeviceRule::new(DeviceKind::Char, 1, 7, Access::new(false, false, true)),
    ];
    grant(
        resident.pid_i32(),
        &granted,
        &view.options_for(resident.pid()),
    )
    .expect("grant");

    assert_passed(probe(&[&cg], Path::new(URANDOM), Use::Read), "urandom r");
    assert_denied(
        probe(&[&cg], Path::new(URANDOM), Use::Write),
        "urandom w not granted",
    );
    assert_denied(
        probe(&[&cg], Path::new(URANDOM), Use::ReadWrite),
        "urandom rw not granted",
    );
    let full = nodes.path().join("full");
    assert_passed(
        probe(&[&cg], &full, Use::Mknod(1, 7)),
        "mknod c 1:7 granted",
    );
    assert_denied(
        probe(&[&cg], Path::new(FULL), Use::Read),
        "full r not granted",
    );
    let urandom = nodes.path().join("urandom");
    assert_denied(
        probe(&[&cg], &urandom, Use::Mknod(1, 9)),
        "mknod c 1:9 not granted",
    );
    drop(resident);
}

#[test]
#[serial]
fn no_program_attached_attaches_nothing() {
    if !privileged("no_program_attached_attaches_nothing") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let cg = TestCgroup::create_under(&v2.own);
    let resident = Resident::start_in(&[&cg]);

    let view = ProcView::new();
    let report = grant(
        resident.pid_i32(),
        &rules(&["c 1:9 rw"]),
        &view.options_for(resident.pid()),
    )
    .expect("grant");
    assert_eq!(
        report.v2,
        V2Outcome::NoProgramAttached {
            cgroup: cg.dir.clone()
        }
    );
    assert!(cg.programs().is_empty(), "nothing attached");
    // Not restricted before, not restricted after: an ungranted device still opens.
    assert_passed(
        probe(&[&cg], Path::new(FULL), Use::Read),
        "full without any program",
    );
    drop(resident);
}

#[test]
#[serial]
fn sixteen_rules_in_one_replacement() {
    if !privileged("sixteen_rules_in_one_replacement") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let nodes = Mounted::new("tmpfs", Some("mode=755"));
    let cg = TestCgroup::create_under(&v2.own);

    // Nodes with an unregistered major: past the device cgroup, open fails with ENXIO.
    let major = 3999;
    let mut granted = vec![DeviceRule::new(DeviceKind::Char, 1, 9, Access::RW)];
    for minor in 0..15 {
        let path = nodes.path().join(format!("n{minor}"));
        mknod(
            &path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major.into(), minor.into()),
        )
        .expect("mknod test node");
        granted.push(DeviceRule::new(DeviceKind::Char, major, minor, Access::RW));
    }
    let ungranted = nodes.path().join("n15");
    mknod(
        &ungranted,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(major.into(), 15),
    )
    .expect("mknod test node");
    assert_eq!(granted.len(), 16);

    let old_id = cg.attach_runtime_program(&runtime_rules());
    let resident = Resident::start_in(&[&cg]);
    for minor in 0..15 {
        let path = nodes.path().join(format!("n{minor}"));
        assert_denied(
            probe(&[&cg], &path, Use::ReadWrite),
            &format!("n{minor} before"),
        );
    }

    let view = ProcView::new();
    let report = grant(
        resident.pid_i32(),
        &granted,
        &view.options_for(resident.pid()),
    )
    .expect("grant");
    let swaps = report.v2.swaps();
    assert!(
        matches!(report.v2, V2Outcome::Replaced { .. }),
        "{:?}",
        report.v2
    );
    assert_eq!(swaps.len(), 1, "one replacement for all sixteen rules");
    assert_eq!(swaps[0].old_id, old_id);
    assert_eq!(cg.programs(), vec![swaps[0].new_id]);

    for minor in 0..15 {
        let path = nodes.path().join(format!("n{minor}"));
        assert_passed(
            probe(&[&cg], &path, Use::ReadWrite),
            &format!("n{minor} after"),
        );
    }
    assert_passed(
        probe(&[&cg], Path::new(URANDOM), Use::ReadWrite),
        "urandom after",
    );
    assert_denied(probe(&[&cg], &ungranted, Use::Read), "n15 was not granted");
    assert_passed(probe(&[&cg], Path::new(NULL), Use::ReadWrite), "null after");
    drop(resident);
}

#[test]
#[serial]
fn every_attached_program_is_extended() {
    if !privileged("every_attached_program_is_extended") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let cg = TestCgroup::create_under(&v2.own);
    // Two programs, as with systemd's next to the runtime's: both must allow.
    let first = cg.attach_runtime_program(&runtime_rules());
    let second = cg.attach_runtime_program(&rules(&["c 1:3 rwm"]));
    let resident = Resident::start_in(&[&cg]);
    assert_denied(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom before",
    );

    let view = ProcView::new();
    let report = grant(
        resident.pid_i32(),
        &rules(&["c 1:9 r"]),
        &view.options_for(resident.pid()),
    )
    .expect("grant");
    let swaps = report.v2.swaps();
    assert_eq!(
        swaps.iter().map(|s| s.old_id).collect::<Vec<_>>(),
        vec![first, second]
    );
    let mut attached = cg.programs();
    attached.sort_unstable();
    let mut new_ids: Vec<u32> = swaps.iter().map(|s| s.new_id).collect();
    new_ids.sort_unstable();
    assert_eq!(attached, new_ids);

    assert_passed(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom after",
    );
    // The second program never allowed zero; its extension still does not.
    assert_denied(
        probe(&[&cg], Path::new(ZERO), Use::Read),
        "zero (denied by the second)",
    );
    drop(resident);
}

#[test]
#[serial]
fn single_program_mode_is_swapped_too() {
    if !privileged("single_program_mode_is_swapped_too") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let cg = TestCgroup::create_under(&v2.own);
    // Attached without BPF_F_ALLOW_MULTI, as older runtimes did: the cgroup holds one program.
    let old_id = cg.attach_runtime_program_with_flags(&runtime_rules(), 0);
    let resident = Resident::start_in(&[&cg]);
    assert_denied(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom before",
    );

    let view = ProcView::new();
    let report = grant(
        resident.pid_i32(),
        &rules(&["c 1:9 rw"]),
        &view.options_for(resident.pid()),
    )
    .expect("grant");
    let swaps = report.v2.swaps();
    assert!(
        matches!(report.v2, V2Outcome::Replaced { .. }),
        "{:?}",
        report.v2
    );
    assert_eq!(swaps.len(), 1);
    assert_eq!(swaps[0].old_id, old_id);
    let cgroup = CgroupDir::open(&cg.dir).expect("open");
    let attached = cgroup.device_programs().expect("query");
    assert_eq!(attached.ids, vec![swaps[0].new_id]);
    assert_eq!(attached.flags, 0, "attach mode unchanged");
    assert_passed(
        probe(&[&cg], Path::new(URANDOM), Use::Read),
        "urandom after",
    );
    assert_passed(probe(&[&cg], Path::new(NULL), Use::ReadWrite), "null after");
    drop(resident);
}

#[test]
#[serial]
fn dumped_instructions_are_the_loaded_ones() {
    if !privileged("dumped_instructions_are_the_loaded_ones") {
        return;
    }
    let code = runc_like(&runtime_rules());
    let program = DeviceProgram::load(&code, "dump_check").expect("load");
    assert_eq!(program.name(), "dump_check");
    let reopened = DeviceProgram::open(program.id())
        .expect("open by id")
        .expect("permitted");
    assert_eq!(reopened.instructions().expect("dump"), code);
}

#[test]
#[serial]
fn verifier_rejection_carries_the_log() {
    if !privileged("verifier_rejection_carries_the_log") {
        return;
    }
    // Returns R0 without ever setting it.
    let bad = [Insn::mov64_imm(Reg::R2, 0), Insn::exit()];
    let err = DeviceProgram::load(&bad, "bad").expect_err("verifier must reject");
    let text = err.to_string();
    assert!(matches!(err, CgroupError::LoadProgram { .. }), "{text}");
    assert!(
        text.contains("BPF_PROG_LOAD") && text.contains("R0"),
        "{text}"
    );
}

#[test]
#[serial]
fn query_and_detach_round_trip() {
    if !privileged("query_and_detach_round_trip") {
        return;
    }
    private_mount_namespace();
    let v2 = Cgroup2::mount();
    let cg = TestCgroup::create_under(&v2.own);
    let cgroup = CgroupDir::open(&cg.dir).expect("open");
    let program = DeviceProgram::load(&runc_like(&runtime_rules()), "detach_check").expect("load");
    program.attach(&cgroup, F_ALLOW_MULTI).expect("attach");
    let attached = cgroup.device_programs().expect("query");
    assert_eq!(attached.ids, vec![program.id()]);
    assert_eq!(attached.flags, F_ALLOW_MULTI);
    assert!(cgroup
        .effective_device_programs()
        .expect("query")
        .contains(&program.id()));
    program.detach(&cgroup).expect("detach");
    assert!(cgroup.device_programs().expect("query").ids.is_empty());
}
