//! A container checkpointed and restored through the shim, on the real runc and CRIU
//! (scripts/criu-build.sh's 4.2.1: Debian 12's 3.17 cannot dump on today's kernels). `runc
//! restore` makes the container from its bundle as `create` does before CRIU puts the
//! checkpoint's processes in it, so the shim must admit and edit a restore's bundle: the
//! restored container gets its granted device again, bound where the checkpoint had it, and a
//! request it may not have is refused before runc runs (`runc_shim.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use devinject_tests::runc::{container_id, runc_path, shim_command, Bundle};
use devinject_tests::sim::demo_host;
use devinject_tests::skip::{require, require_runc_demo};

/// The environment variable naming the directory of the CRIU runc runs (`criu` in it).
const CRIU_ENV: &str = "DEVINJECT_CRIU";

/// The directory of scripts/criu-build.sh's `criu`, from [`CRIU_ENV`].
fn criu_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(CRIU_ENV).map(PathBuf::from);
    let found = dir.as_ref().is_some_and(|d| d.join("criu").is_file());
    require(
        found,
        &format!("needs CRIU 4.2 ({CRIU_ENV}=$(scripts/criu-build.sh))"),
    )
    .then(|| dir.expect("checked"))
}

/// `PATH` with `criu` first: runc runs `criu` from its `PATH`.
fn path_with(criu: &Path) -> OsString {
    let mut path = criu.as_os_str().to_owned();
    if let Some(rest) = std::env::var_os("PATH") {
        path.push(":");
        path.push(rest);
    }
    path
}

/// The shim in front of runc, its containers' state under one `--root`, every container it
/// made force-deleted when dropped (a failing test leaves none running).
struct Shim<'a> {
    /// The host configuration the shim reads.
    config: &'a Path,
    /// The directory of the `criu` runc runs.
    criu: PathBuf,
    /// runc's `--root`.
    state: PathBuf,
    /// runc's own messages (`--log`).
    log: PathBuf,
    /// CRIU's work directory (`--work-path`), where its logs are.
    work: PathBuf,
}

impl Shim<'_> {
    /// Runs `<shim> --log <log> --root <state> <args>`, the container's stdio on `/dev/null`
    /// (CRIU dumps no descriptor of a file outside the container's mounts); its error, with
    /// runc's and CRIU's logs, when it fails.
    fn run(&self, args: &[&dyn AsRef<std::ffi::OsStr>]) {
        let args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_owned()).collect();
        let cmd = shim_command(self.config, &runc_path());
        let status = Command::new(&cmd[0])
            .args(&cmd[1..])
            .arg("--log")
            .arg(&self.log)
            .arg("--root")
            .arg(&self.state)
            .args(&args)
            .env("PATH", path_with(&self.criu))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if !status.success() {
            let criu_log = |name: &str| {
                let text = std::fs::read_to_string(self.work.join(name)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            };
            panic!(
                "{args:?}: {status}\n{}\n--- dump.log\n{}\n--- restore.log\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default(),
                criu_log("dump.log"),
                criu_log("restore.log")
            );
        }
    }
}

impl Drop for Shim<'_> {
    fn drop(&mut self) {
        let runc = |args: &[&str]| {
            Command::new(runc_path())
                .arg("--root")
                .arg(&self.state)
                .args(args)
                .output()
        };
        if let Ok(list) = runc(&["list", "--quiet"]) {
            for id in String::from_utf8_lossy(&list.stdout).split_whitespace() {
                let _ = runc(&["delete", "--force", id]);
            }
        }
    }
}

/// The count the container's loop last wrote, once it is above `above`.
fn count_above(rootfs: &Path, above: u64) -> u64 {
    let start = Instant::now();
    loop {
        let count = std::fs::read_to_string(rootfs.join("count"))
            .ok()
            .and_then(|c| c.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if count > above {
            return count;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the container's count stayed at {count}, not above {above}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Rewrites the demo profile at `path` without its library and its tool: nodes and env only.
fn nodes_only(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let (head, rest) = text
        .split_once("[[libraries]]")
        .expect("the demo's libraries");
    let (_, tail) = rest.split_once("[env]").expect("the demo's env");
    std::fs::write(path, format!("{head}[env]{tail}")).unwrap();
}

#[test]
fn a_container_restored_through_the_shim_opens_its_granted_device_again() {
    if !require_runc_demo() {
        return;
    }
    let Some(criu) = criu_dir() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let host = demo_host(&t.path().join("host"), &["demo"]).unwrap();
    nodes_only(&host.profiles_dir.join("demo.toml"));
    // Counts each open of its device that succeeds, five a second.
    let mut b = Bundle::new(
        &t.path().join("bundle"),
        &[
            "/bin/sh",
            "-c",
            "i=0; while :; do if : < /dev/demo/accel0; then i=$((i+1)); echo $i > /count; fi; \
             sleep 0.2; done",
        ],
    )
    .unwrap();
    b.env("DEMO_VISIBLE_DEVICES=0");
    b.write().unwrap();
    // The spec the engine writes: the restored container's is made anew in the same way.
    let spec = std::fs::read(b.dir.join("config.json")).unwrap();
    let shim = Shim {
        config: &host.config,
        criu,
        state: t.path().join("state"),
        log: t.path().join("runc.log"),
        work: t.path().join("work"),
    };
    let images = t.path().join("images");
    let first = container_id("checkpointed");
    shim.run(&[&"run", &"--detach", &"--bundle", &b.dir, &first]);
    let before = count_above(&b.rootfs(), 2);
    shim.run(&[
        &"checkpoint",
        &"--image-path",
        &images,
        &"--work-path",
        &shim.work,
        &first,
    ]);
    let checkpointed = count_above(&b.rootfs(), 0);
    assert!(checkpointed >= before);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        count_above(&b.rootfs(), 0),
        checkpointed,
        "the checkpoint stopped the container"
    );
    std::fs::write(b.dir.join("config.json"), &spec).unwrap();
    shim.run(&[
        &"restore",
        &"--detach",
        &"--image-path",
        &images,
        &"--work-path",
        &shim.work,
        &"--bundle",
        &b.dir,
        &container_id("restored"),
    ]);
    // The restored loop goes on from where it stopped, opening its device again.
    let after = count_above(&b.rootfs(), checkpointed + 2);
    assert!(after > checkpointed + 2);
}
