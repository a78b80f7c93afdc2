//! Real runc in cgroup v2 mode: the program runc generated is read back from the kernel,
//! extended and swapped, and the container can then open the granted node.
//!
//! runc switches to cgroup v2 when /sys/fs/cgroup is a cgroup2 mount, so the test mounts one
//! there in its private mount namespace (as the v2 tests do) and runs runc from that thread.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use devinject_cgroup::ebpf::CgroupDir;
use devinject_cgroup::{grant, Access, DeviceKind, DeviceRule, V2Outcome};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serial_test::serial;

use crate::support::{
    assert_denied, assert_passed, private_mount_namespace, privileged, skip, unique, Mounted,
    ProcView,
};

const FAKE_MAJOR: u32 = 3999;

/// A detached runc container, deleted on drop.
struct Container {
    id: String,
    state: tempfile::TempDir,
    cgroup: PathBuf,
    pid: i32,
}

impl Container {
    fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(self.state.path());
        cmd
    }

    /// Opens `path` read-write inside the container with the container's shell.
    fn open_rw(&self, path: &str) -> Result<(), String> {
        let out = self
            .runc()
            .args(["exec", &self.id, "/bin/sh", "-c", "exec 3<>\"$0\"", path])
            .stdin(Stdio::null())
            .output()
            .expect("runc exec");
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.runc().args(["delete", "--force", &self.id]).status();
        // runc removes the cgroup once the killed processes are gone; make sure it is.
        for _ in 0..200 {
            if !self.cgroup.exists() || fs::remove_dir(&self.cgroup).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

fn busybox() -> Option<PathBuf> {
    ["/usr/bin/busybox", "/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Writes a bundle whose rootfs is a static busybox, with `binds` (host node, container
/// path) bind-mounted in, and starts it detached under `cgroups_path`.
fn run_container(bundle: &Path, busybox: &Path, binds: &[(PathBuf, &str)]) -> Container {
    let rootfs = bundle.join("rootfs/bin");
    fs::create_dir_all(&rootfs).expect("mkdir rootfs");
    fs::copy(busybox, rootfs.join("busybox")).expect("copy busybox");
    std::os::unix::fs::symlink("busybox", rootfs.join("sh")).expect("symlink sh");

    let status = Command::new("runc")
        .args(["spec", "--bundle"])
        .arg(bundle)
        .status()
        .expect("runc spec");
    assert!(status.success(), "runc spec failed");
    let config_path = bundle.join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&config_path).expect("read config.json"))
            .expect("parse config.json");
    let id = unique("devinject-runc");
    let cgroups_path = format!("/{id}");
    config["process"]["terminal"] = false.into();
    config["process"]["args"] = serde_json::json!(["/bin/busybox", "sleep", "1000"]);
    config["linux"]["cgroupsPath"] = cgroups_path.clone().into();
    let mounts = config["mounts"].as_array_mut().expect("mounts array");
    for (source, destination) in binds {
        mounts.push(serde_json::json!({
            "destination": destination,
            "type": "bind",
            "source": source,
            "options": ["bind"],
        }));
    }
    fs::write(&config_path, config.to_string()).expect("write config.json");

    let state = tempfile::tempdir().expect("state dir");
    let pid_file = bundle.join("pid");
    // Not a pipe: the detached container inherits runc's stdio and would hold it open.
    let log_path = bundle.join("runc.log");
    let log = fs::File::create(&log_path).expect("create runc log");
    let status = Command::new("runc")
        .arg("--root")
        .arg(state.path())
        .args(["run", "--detach", "--bundle"])
        .arg(bundle)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .expect("runc run");
    let mut container = Container {
        id,
        state,
        cgroup: Path::new("/sys/fs/cgroup").join(&cgroups_path[1..]),
        pid: 0,
    };
    assert!(
        status.success(),
        "runc run failed: {}",
        fs::read_to_string(&log_path).unwrap_or_default()
    );
    container.pid = fs::read_to_string(&pid_file)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    container
}

#[test]
#[serial]
fn runc_program_is_extended_in_place() {
    let name = "runc_program_is_extended_in_place";
    if !privileged(name) {
        return;
    }
    let runc_works = Command::new("runc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runc_works {
        skip(name, "runc is not installed");
        return;
    }
    let Some(busybox) = busybox() else {
        skip(
            name,
            "a static busybox is needed for the container's rootfs",
        );
        return;
    };

    private_mount_namespace();
    let _cgroup2 = Mounted::at(Path::new("/sys/fs/cgroup"), "cgroup2", None);
    let nodes = Mounted::new("tmpfs", Some("mode=755"));
    for (file, minor) in [("granted", 0), ("ungranted", 1)] {
        mknod(
            &nodes.path().join(file),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(FAKE_MAJOR.into(), minor),
        )
        .expect("mknod test node");
    }
    let bundle = tempfile::tempdir().expect("bundle dir");
    let container = run_container(
        bundle.path(),
        &busybox,
        &[
            (nodes.path().join("granted"), "/dev/granted"),
            (nodes.path().join("ungranted"), "/dev/ungranted"),
        ],
    );

    let cgroup = CgroupDir::open(&container.cgroup).expect("container cgroup");
    let runc_programs = cgroup.device_programs().expect("query").ids;
    assert_eq!(runc_programs.len(), 1, "runc attaches one device program");
    assert_denied(container.open_rw("/dev/granted"), "granted node before");
    assert_passed(container.open_rw("/dev/null"), "runc default null before");

    let view = ProcView::new();
    let rule = DeviceRule::new(DeviceKind::Char, FAKE_MAJOR, 0, Access::RW);
    let report = grant(
        container.pid,
        &[rule],
        &view.options_for(container.pid as u32),
    )
    .expect("grant");
    assert_eq!(
        report.v1, None,
        "runc in v2 mode leaves v1 devices at the root"
    );
    let V2Outcome::Replaced { programs, .. } = &report.v2 else {
        panic!("expected an atomic replacement, got {:?}", report.v2);
    };
    assert_eq!(programs.len(), 1);
    assert_eq!(programs[0].old_id, runc_programs[0]);
    assert_eq!(
        cgroup.device_programs().expect("query").ids,
        vec![programs[0].new_id]
    );

    assert_passed(container.open_rw("/dev/granted"), "granted node after");
    assert_denied(container.open_rw("/dev/ungranted"), "ungranted node after");
    for default in [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ] {
        assert_passed(
            container.open_rw(default),
            &format!("runc default {default} after"),
        );
    }

    // What happens when the runtime re-applies its resources: with runc 1.1.5, `update`
    // with an empty resources file keeps the extended program (same id) and the access.
    let empty = bundle.path().join("resources.json");
    fs::write(&empty, "{}").expect("write resources.json");
    let status = container
        .runc()
        .args(["update", "--resources"])
        .arg(&empty)
        .arg(&container.id)
        .stdin(Stdio::null())
        .status()
        .expect("runc update");
    assert!(status.success(), "runc update failed");
    assert_eq!(
        cgroup.device_programs().expect("query").ids,
        vec![programs[0].new_id]
    );
    assert_passed(
        container.open_rw("/dev/granted"),
        "granted node after runc update",
    );
    drop(container);
}
