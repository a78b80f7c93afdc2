//! Fixtures: privilege checks, throw-away cgroups, a private cgroup2 mount, probe processes
//! that open device nodes from inside a cgroup, and a runc-shaped device program.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use devinject_cgroup::ebpf::program::F_ALLOW_MULTI;
use devinject_cgroup::ebpf::{CgroupDir, DeviceProgram, Insn, Reg};
use devinject_cgroup::{grant, CgroupOptions, DeviceRule, GrantReport};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// True when the test may run; otherwise skips by the one rule ([`devinject_testkit`]).
pub fn privileged(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    devinject_testkit::require(
        root,
        &format!("{test} needs root for bpf(2), mounts and cgroup writes"),
    )
}

/// Skips by the one rule ([`devinject_testkit`]): on the record locally, a failure under CI.
pub fn skip(test: &str, reason: &str) -> bool {
    devinject_testkit::require(false, &format!("{test}: {reason}"))
}

pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Asserts that `found` and `expected` are the same cgroup directory: the same inode, through
/// whichever mount of the hierarchy (`grant` may find cgroup v2 at `/sys/fs/cgroup/unified`
/// where a test mounted it elsewhere).
pub fn assert_same_dir(found: &Path, expected: &Path) {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &Path| {
        let m = fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
        (m.dev(), m.ino())
    };
    assert_eq!(
        id(found),
        id(expected),
        "{} is not the cgroup {}",
        found.display(),
        expected.display()
    );
}

/// Gives the calling thread its own mount namespace with nothing propagating out.
pub fn private_mount_namespace() {
    // unshare(CLONE_NEWNS) also unshares this thread's fs_struct, which works in a
    // multi-threaded process (unlike setns).
    unshare(CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .expect("mount --make-rprivate /");
}

/// A file system mounted in the private namespace, unmounted on drop.
pub struct Mounted {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Mounted {
    /// Mounts on a new temporary directory.
    pub fn new(fstype: &str, data: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut mounted = Self::at(dir.path(), fstype, data);
        mounted._dir = Some(dir);
        mounted
    }

    /// Mounts over `path`.
    pub fn at(path: &Path, fstype: &str, data: Option<&str>) -> Self {
        mount(Some(fstype), path, Some(fstype), MsFlags::empty(), data)
            .unwrap_or_else(|e| panic!("mount -t {fstype} at {}: {e}", path.display()));
        Self {
            path: path.to_owned(),
            _dir: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = umount2(&self.path, MntFlags::MNT_DETACH);
    }
}

/// A proc root for the library whose `self` is this thread (the test thread has its own
/// mount namespace, which `/proc/self` of the process would not show).
pub struct ProcView {
    dir: tempfile::TempDir,
}

impl ProcView {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink("/proc/thread-self", dir.path().join("self")).expect("symlink");
        Self { dir }
    }

    /// Options pointing `grant` at this view, with `pid` visible.
    pub fn options_for(&self, pid: u32) -> CgroupOptions {
        let link = self.dir.path().join(pid.to_string());
        if !link.exists() {
            std::os::unix::fs::symlink(format!("/proc/{pid}"), link).expect("symlink");
        }
        CgroupOptions {
            proc_root: self.dir.path().to_owned(),
            ..CgroupOptions::default()
        }
    }
}

/// A cgroup directory created for one test, removed (after its processes) on drop.
pub struct TestCgroup {
    pub dir: PathBuf,
}

impl TestCgroup {
    pub fn create_under(parent: &Path) -> Self {
        let dir = parent.join(unique("devinject-test"));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self { dir }
    }

    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    pub fn add(&self, pid: u32) {
        fs::write(self.procs(), pid.to_string())
            .unwrap_or_else(|e| panic!("move {pid} into {}: {e}", self.dir.display()));
    }

    /// Ids of the device programs attached to this (v2) cgroup.
    pub fn programs(&self) -> Vec<u32> {
        CgroupDir::open(&self.dir)
            .and_then(|c| c.device_programs())
            .expect("query device programs")
            .ids
    }

    /// Loads a runc-shaped program allowing `rules` and attaches it like runc does.
    pub fn attach_runtime_program(&self, rules: &[DeviceRule]) -> u32 {
        self.attach_runtime_program_with_flags(rules, F_ALLOW_MULTI)
    }

    /// Loads a runc-shaped program allowing `rules` and attaches it with `flags`.
    pub fn attach_runtime_program_with_flags(&self, rules: &[DeviceRule], flags: u32) -> u32 {
        let program = DeviceProgram::load(&runc_like(rules), "runc_like").expect("load");
        let cgroup = CgroupDir::open(&self.dir).expect("open cgroup");
        program.attach(&cgroup, flags).expect("attach");
        program.id()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir(&self.dir) {
            let _ = writeln!(
                std::io::stderr(),
                "cannot remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// The v1 devices cgroup directory of this process, if the hierarchy is mounted. (Not via
/// the library's `locate`, which by design ignores the root devices cgroup.)
pub fn own_v1_devices_dir() -> Option<PathBuf> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").expect("read /proc/self/cgroup");
    let path = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "devices")
            .then(|| path.to_owned())
    })?;
    let text = fs::read("/proc/self/mountinfo").expect("read mountinfo");
    let mounts: Vec<_> = devinject_mountinfo::parse(&text)
        .filter_map(Result::ok)
        .collect();
    mounts.iter().rev().find_map(|m| {
        let is_devices = m.fs_type == "cgroup" && m.has_super_option("devices");
        let relative = Path::new(&path).strip_prefix(&m.root).ok()?;
        let dir = m.mount_point.join(relative);
        (is_devices && dir.is_dir()).then_some(dir)
    })
}

/// A cgroup2 mount in the private namespace and this thread's cgroup inside it.
pub struct Cgroup2 {
    /// Kept mounted for as long as the test uses `own`.
    _mount: Mounted,
    pub own: PathBuf,
}

impl Cgroup2 {
    pub fn mount() -> Self {
        let mount = Mounted::new("cgroup2", None);
        let text = fs::read_to_string("/proc/thread-self/cgroup").expect("read own cgroup");
        let path = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup v2 line");
        let own = mount.path().join(path.trim_start_matches('/'));
        Self { _mount: mount, own }
    }
}

/// A fresh test cgroup in a private cgroup2 mount, in this thread's own mount namespace (see
/// [`private_mount_namespace`]).
pub struct V2Cgroup {
    /// The test cgroup; declared first so that it is removed before the mount goes.
    pub cg: TestCgroup,
    _v2: Cgroup2,
}

impl V2Cgroup {
    pub fn new() -> Self {
        private_mount_namespace();
        let v2 = Cgroup2::mount();
        let cg = TestCgroup::create_under(&v2.own);
        Self { cg, _v2: v2 }
    }
}

/// A long-running process placed in cgroups: the container stand-in whose pid `grant` gets.
pub struct Resident {
    child: Child,
}

impl Resident {
    pub fn start_in(cgroups: &[&TestCgroup]) -> Self {
        let child = Command::new("sleep")
            .arg("infinity")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        for cgroup in cgroups {
            cgroup.add(child.id());
        }
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn pid_i32(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid fits i32")
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a probe uses a path.
#[derive(Debug, Clone, Copy)]
pub enum Use {
    Read,
    Write,
    ReadWrite,
    /// mknod(2) of a character device `major:minor` at the path.
    Mknod(u32, u32),
}

/// Runs a shell that first moves itself into `cgroups`, then opens (or mknods) `path`.
/// `Ok` on success, `Err(message)` with the shell's error text otherwise.
pub fn probe(cgroups: &[&TestCgroup], path: &Path, how: Use) -> Result<(), String> {
    let action = match how {
        Use::Read => "exec 3<\"$path\"".to_owned(),
        Use::Write => "exec 3>\"$path\"".to_owned(),
        Use::ReadWrite => "exec 3<>\"$path\"".to_owned(),
        Use::Mknod(major, minor) => format!("exec mknod \"$path\" c {major} {minor}"),
    };
    let script = format!(
        "path=$1; shift; for procs in \"$@\"; do echo $$ > \"$procs\" || exit 10; done; {action}"
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("probe")
        .arg(path)
        .args(cgroups.iter().map(|c| c.procs()))
        .stdin(Stdio::null())
        .output()
        .expect("run probe shell");
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0) => Ok(()),
        Some(10) => panic!("probe could not join its cgroups: {stderr}"),
        _ => Err(stderr),
    }
}

/// Grants `rules` to `resident`, reading /proc through this thread's [`ProcView`].
pub fn grant_to(resident: &Resident, rules: &[DeviceRule]) -> GrantReport {
    let view = ProcView::new();
    grant(resident.pid_i32(), rules, &view.options_for(resident.pid())).expect("grant")
}

/// What the device cgroup must make of a probe.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Let it through ([`assert_passed`]).
    Passed,
    /// Deny it ([`assert_denied`]).
    Denied,
}

/// One probe, what the device cgroup must make of it, and the name failures show.
pub struct ProbeCase<'a> {
    path: PathBuf,
    how: Use,
    verdict: Verdict,
    what: &'a str,
}

/// A probe of `path` the device cgroup must let through.
pub fn passes(path: impl AsRef<Path>, how: Use, what: &str) -> ProbeCase<'_> {
    ProbeCase {
        path: path.as_ref().to_owned(),
        how,
        verdict: Verdict::Passed,
        what,
    }
}

/// A probe of `path` the device cgroup must deny.
pub fn denied(path: impl AsRef<Path>, how: Use, what: &str) -> ProbeCase<'_> {
    ProbeCase {
        verdict: Verdict::Denied,
        ..passes(path, how, what)
    }
}

/// Probes every case from inside `cgroups` and asserts its verdict.
pub fn assert_probes(cgroups: &[&TestCgroup], cases: &[ProbeCase<'_>]) {
    for case in cases {
        let result = probe(cgroups, &case.path, case.how);
        match case.verdict {
            Verdict::Passed => assert_passed(result, case.what),
            Verdict::Denied => assert_denied(result, case.what),
        }
    }
}

/// Asserts the probe was denied by the device cgroup (EPERM).
pub fn assert_denied(result: Result<(), String>, what: &str) {
    match result {
        Err(msg) if msg.contains("Operation not permitted") => {}
        other => panic!("{what}: expected EPERM, got {other:?}"),
    }
}

/// Asserts the cgroup let the probe through: success, or ENXIO from a node without a driver.
pub fn assert_passed(result: Result<(), String>, what: &str) {
    match result {
        Ok(()) => {}
        Err(msg) if msg.contains("No such device or address") => {}
        Err(msg) => panic!("{what}: expected the device cgroup to allow, got {msg:?}"),
    }
}

/// A program shaped like runc's generated filter (libcontainer/cgroups/devices): decode the
/// context into R2-R5, then per rule compare type, access (with R1 as scratch), major and
/// minor; default deny.
pub fn runc_like(rules: &[DeviceRule]) -> Vec<Insn> {
    let mut p = vec![
        Insn::load_u32(Reg::R2, Reg::R1, 0),
        Insn::and32_imm(Reg::R2, 0xffff),
        Insn::load_u32(Reg::R3, Reg::R1, 0),
        Insn::rsh32_imm(Reg::R3, 16),
        Insn::load_u32(Reg::R4, Reg::R1, 4),
        Insn::load_u32(Reg::R5, Reg::R1, 8),
    ];
    for rule in rules {
        let mask = rule.access.bpf_mask() as i32;
        let mut block = vec![Insn::jne_imm(Reg::R2, rule.kind.bpf_type() as i32, 0)];
        if mask != 7 {
            block.push(Insn::mov32_reg(Reg::R1, Reg::R3));
            block.push(Insn::and32_imm(Reg::R1, mask));
            block.push(Insn::jne_reg(Reg::R1, Reg::R3, 0));
        }
        block.push(Insn::jne_imm(Reg::R4, rule.major as i32, 0));
        block.push(Insn::jne_imm(Reg::R5, rule.minor as i32, 0));
        block.push(Insn::mov32_imm(Reg::R0, 1));
        block.push(Insn::exit());
        let len = block.len();
        for (i, insn) in block.iter_mut().enumerate() {
            if insn.code & 0x07 == 0x05 && *insn != Insn::exit() {
                insn.off = (len - i - 1) as i16;
            }
        }
        p.extend(block);
    }
    p.push(Insn::mov32_imm(Reg::R0, 0));
    p.push(Insn::exit());
    p
}

/// Parses rule texts.
pub fn rules(text: &[&str]) -> Vec<DeviceRule> {
    text.iter()
        .map(|t| t.parse().expect("valid rule"))
        .collect()
}
