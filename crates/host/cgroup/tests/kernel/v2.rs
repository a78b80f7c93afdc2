//! cgroup v2: the runtime's device program is extended and swapped on the real kernel.

use std::path::Path;

use devinject_cgroup::ebpf::program::F_ALLOW_MULTI;
use devinject_cgroup::ebpf::{CgroupDir, DeviceProgram, Insn, Reg};
use devinject_cgroup::{locate, Access, CgroupError, DeviceKind, DeviceRule, V2Outcome};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serial_test::serial;

use crate::support::{
    assert_denied, assert_passed, assert_probes, assert_same_dir, denied, grant_to, passes,
    private_mount_namespace, privileged, probe, rules, runc_like, Mounted, ProcView, Resident,
    TestCgroup, Use, V2Cgroup,
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
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;

    // Before any program: the baseline the program will change.
    assert_passed(
        probe(&[cg], Path::new(URANDOM), Use::Read),
        "urandom, no program",
    );

    let old_id = cg.attach_runtime_program(&runtime_rules());
    let resident = Resident::start_in(&[cg]);
    assert_probes(
        &[cg],
        &[
            denied(URANDOM, Use::Read, "urandom before grant"),
            passes(NULL, Use::ReadWrite, "null before grant"),
        ],
    );

    let report = grant_to(&resident, &rules(&["c 1:9 rw"]));

    let V2Outcome::Replaced {
        cgroup,
        programs,
        unreadable,
    } = &report.v2
    else {
        panic!("expected an atomic replacement, got {:?}", report.v2);
    };
    assert_same_dir(cgroup, &cg.dir);
    assert!(unreadable.is_empty());
    assert_eq!(programs.len(), 1);
    assert_eq!(programs[0].old_id, old_id);
    assert_ne!(programs[0].new_id, old_id);
    assert_eq!(
        cg.programs(),
        vec![programs[0].new_id],
        "exactly the new program attached"
    );

    assert_probes(
        &[cg],
        &[
            passes(URANDOM, Use::Read, "urandom read after grant"),
            passes(URANDOM, Use::ReadWrite, "urandom rw after grant"),
            passes(NULL, Use::ReadWrite, "null after grant"),
            passes(ZERO, Use::ReadWrite, "zero after grant"),
            denied(FULL, Use::Read, "full was never allowed"),
        ],
    );
    drop(resident);
}

#[test]
#[serial]
fn granted_access_is_exactly_what_was_asked() {
    if !privileged("granted_access_is_exactly_what_was_asked") {
        return;
    }
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;
    let nodes = Mounted::new("tmpfs", Some("mode=755"));
    cg.attach_runtime_program(&runtime_rules());
    let resident = Resident::start_in(&[cg]);

    let granted = [
        DeviceRule::new(DeviceKind::Char, 1, 9, Access::R),
        DeviceRule::new(DeviceKind::Char, 1, 7, Access::new(false, false, true)),
    ];
    grant_to(&resident, &granted);

    assert_probes(
        &[cg],
        &[
            passes(URANDOM, Use::Read, "urandom r"),
            denied(URANDOM, Use::Write, "urandom w not granted"),
            denied(URANDOM, Use::ReadWrite, "urandom rw not granted"),
            passes(
                nodes.path().join("full"),
                Use::Mknod(1, 7),
                "mknod c 1:7 granted",
            ),
            denied(FULL, Use::Read, "full r not granted"),
            denied(
                nodes.path().join("urandom"),
                Use::Mknod(1, 9),
                "mknod c 1:9 not granted",
            ),
        ],
    );
    drop(resident);
}

#[test]
#[serial]
fn no_program_attached_attaches_nothing() {
    if !privileged("no_program_attached_attaches_nothing") {
        return;
    }
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;
    let resident = Resident::start_in(&[cg]);

    let report = grant_to(&resident, &rules(&["c 1:9 rw"]));
    let V2Outcome::NoProgramAttached { cgroup } = &report.v2 else {
        panic!("expected no program attached, got {:?}", report.v2);
    };
    assert_same_dir(cgroup, &cg.dir);
    assert_eq!(
        report.v2,
        V2Outcome::NoProgramAttached {
            cgroup: cgroup.clone()
        }
    );
    assert!(cg.programs().is_empty(), "nothing attached");
    // Not restricted before, not restricted after: an ungranted device still opens.
    assert_passed(
        probe(&[cg], Path::new(FULL), Use::Read),
        "full without any program",
    );
    drop(resident);
}

/// Nodes `n0`..`n{count}` under `dir` with an unregistered major: past the device cgroup, open
/// fails with ENXIO.
fn fake_nodes(dir: &Path, major: u32, count: u32) {
    for minor in 0..count {
        mknod(
            &dir.join(format!("n{minor}")),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major.into(), minor.into()),
        )
        .expect("mknod test node");
    }
}

#[test]
#[serial]
fn sixteen_rules_in_one_replacement() {
    if !privileged("sixteen_rules_in_one_replacement") {
        return;
    }
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;
    let nodes = Mounted::new("tmpfs", Some("mode=755"));

    // n0..n14 are granted, n15 is not.
    let major = 3999;
    fake_nodes(nodes.path(), major, 16);
    let mut granted = vec![DeviceRule::new(DeviceKind::Char, 1, 9, Access::RW)];
    granted
        .extend((0..15).map(|minor| DeviceRule::new(DeviceKind::Char, major, minor, Access::RW)));
    assert_eq!(granted.len(), 16);
    let old_id = cg.attach_runtime_program(&runtime_rules());
    let resident = Resident::start_in(&[cg]);
    for minor in 0..15 {
        let path = nodes.path().join(format!("n{minor}"));
        assert_denied(
            probe(&[cg], &path, Use::ReadWrite),
            &format!("n{minor} before"),
        );
    }

    let report = grant_to(&resident, &granted);
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
            probe(&[cg], &path, Use::ReadWrite),
            &format!("n{minor} after"),
        );
    }
    assert_probes(
        &[cg],
        &[
            passes(URANDOM, Use::ReadWrite, "urandom after"),
            denied(nodes.path().join("n15"), Use::Read, "n15 was not granted"),
            passes(NULL, Use::ReadWrite, "null after"),
        ],
    );
    drop(resident);
}

#[test]
#[serial]
fn every_attached_program_is_extended() {
    if !privileged("every_attached_program_is_extended") {
        return;
    }
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;
    // Two programs, as with systemd's next to the runtime's: both must allow.
    let first = cg.attach_runtime_program(&runtime_rules());
    let second = cg.attach_runtime_program(&rules(&["c 1:3 rwm"]));
    let resident = Resident::start_in(&[cg]);
    assert_denied(
        probe(&[cg], Path::new(URANDOM), Use::Read),
        "urandom before",
    );

    let report = grant_to(&resident, &rules(&["c 1:9 r"]));
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

    // The second program never allowed zero; its extension still does not.
    assert_probes(
        &[cg],
        &[
            passes(URANDOM, Use::Read, "urandom after"),
            denied(ZERO, Use::Read, "zero (denied by the second)"),
        ],
    );
    drop(resident);
}

#[test]
#[serial]
fn single_program_mode_is_swapped_too() {
    if !privileged("single_program_mode_is_swapped_too") {
        return;
    }
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;
    // Attached without BPF_F_ALLOW_MULTI, as older runtimes did: the cgroup holds one program.
    let old_id = cg.attach_runtime_program_with_flags(&runtime_rules(), 0);
    let resident = Resident::start_in(&[cg]);
    assert_denied(
        probe(&[cg], Path::new(URANDOM), Use::Read),
        "urandom before",
    );

    let report = grant_to(&resident, &rules(&["c 1:9 rw"]));
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
    assert_probes(
        &[cg],
        &[
            passes(URANDOM, Use::Read, "urandom after"),
            passes(NULL, Use::ReadWrite, "null after"),
        ],
    );
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
    let v2 = V2Cgroup::new();
    let cg = &v2.cg;
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

/// A program attached to a parent cgroup filters its child too without being attached there:
/// the effective list (`BPF_F_QUERY_EFFECTIVE`) has it, the attached list does not.
#[test]
#[serial]
fn an_ancestors_program_is_effective_not_attached() {
    if !privileged("an_ancestors_program_is_effective_not_attached") {
        return;
    }
    let v2 = V2Cgroup::new();
    let id = v2.cg.attach_runtime_program(&runtime_rules());
    let child = TestCgroup::create_under(&v2.cg.dir);
    let cgroup = CgroupDir::open(&child.dir).expect("open");
    assert!(cgroup.device_programs().expect("query").ids.is_empty());
    let effective = cgroup.effective_device_programs().expect("query");
    assert!(effective.contains(&id), "{effective:?} lacks {id}");
    let parents = CgroupDir::open(&v2.cg.dir)
        .and_then(|c| c.effective_device_programs())
        .expect("query");
    assert_eq!(
        effective, parents,
        "the child inherits exactly its parent's"
    );
}

/// The conventional places (cgroup2 over `/sys/fs/cgroup`, as on a cgroup v2 host) give the
/// same directory as `mountinfo`, and only for a process the directory's `cgroup.procs` lists.
#[test]
#[serial]
fn conventional_mount_points_agree_with_mountinfo() {
    if !privileged("conventional_mount_points_agree_with_mountinfo") {
        return;
    }
    private_mount_namespace();
    let sys = Path::new("/sys/fs/cgroup");
    let _v2 = Mounted::at(sys, "cgroup2", None);
    let text = std::fs::read_to_string("/proc/thread-self/cgroup").expect("own cgroup");
    let own = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup v2 line");
    let cg = TestCgroup::create_under(&sys.join(own.trim_start_matches('/')));
    let resident = Resident::start_in(&[&cg]);
    let view = ProcView::new();
    let opts = view.options_for(resident.pid());
    let pid = resident.pid_i32();
    let file = opts.proc_root.join(pid.to_string()).join("cgroup");
    let entries =
        locate::parse_proc_cgroup(&file, &std::fs::read_to_string(&file).expect("read")).unwrap();

    let fast = locate::conventional(sys, &entries, pid).expect("found at /sys/fs/cgroup");
    let slow = locate::container_cgroups(&opts.proc_root, pid).expect("found by mountinfo");
    assert_eq!(fast, slow);
    assert_eq!(fast.v2.as_deref(), Some(cg.dir.as_path()));
    assert!(!fast.v2_is_root);

    // Another process's entries: its directory does not list this pid, so nothing is proven.
    let me = std::fs::read_to_string("/proc/thread-self/cgroup").expect("own cgroup");
    let mine = locate::parse_proc_cgroup(&file, &me).unwrap();
    assert_eq!(locate::conventional(sys, &mine, pid), None);
    drop(resident);
}
