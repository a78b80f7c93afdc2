//! The same hostile images through NVIDIA's Container Toolkit 1.20.2 (`nvidia-container-runtime`
//! in `cdi` mode with the spec `nvidia-ctk cdi generate --mode=management` writes) and through
//! devinject's hook and shim, on the vendor-stack node (the real 535 user space,
//! [`nvidia_host`]). Each image is a busybox rootfs booby-trapped one way (docs/security.md's
//! matrix): a self-including `ld.so.conf`, the library directory linking to a host directory
//! (absolutely, through `/proc/1/root`), `LD_PRELOAD` in the process env naming a marker library
//! of the image, the linker cache a link to a host file or a FIFO, a FIFO `ld.so.conf`,
//! `/var/cache` or `/etc` through `/proc/1/root`, an `ld.so.conf` listing a host directory.
//!
//! Every run (create, start, wait) has a hard deadline ([`DEADLINE`]): past it the whole process
//! tree of the step is stopped and killed (runc, runc init, which makes a session of its own,
//! hooks, ldconfig: found through `/proc`'s parent links, not a process group or a cgroup) and
//! reaped (this process is a child subreaper), and the container is force-deleted with runc and
//! its cgroups removed. Per image and path the test records whether the runtime refused at
//! create (the message's first line), started the container (and whether the container got its
//! GPU node and `libcuda.so.1`), hung, or wrote or loaded anything outside the rootfs; it prints
//! the table (docs/security.md, "NVIDIA's toolkit on the same hostile images").
//!
//! devinject's outcomes are asserted strictly (never hung, nothing outside the rootfs written or
//! loaded, the pinned outcome per image); NVIDIA's are only recorded: each run must have ended
//! within the deadline or been killed there. Nothing may be left: no process, runc container,
//! cgroup, mount or host directory.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use devinject_tests::bins::bin;
use devinject_tests::cprog::{markers_in, preload_marker, shared_lib};
use devinject_tests::hostile::{fifo, file, link};
use devinject_tests::nvidia_toolkit::{toolkit, InstalledStacks};
use devinject_tests::runc::{container_id, hook_failure, runc_path, shim_command, Bundle};
use devinject_tests::skip::require_runc_demo;
use devinject_tests::vendor::{nvidia_host, stacks, VendorHost};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Each run's hard deadline: create, start and the container's run together.
const DEADLINE: Duration = Duration::from_secs(20);

/// What the container runs: which GPU files it got, and whether a host library is in its cache.
const SCRIPT: &str = "[ -c /dev/nvidia0 ] && echo 'gpu node'; \
    p=$(timeout 3 ldconfig -p 2>/dev/null | awk '/libcuda[.]so[.]1 /{ print $NF; exit }'); \
    [ -n \"$p\" ] && [ -e \"$p\" ] && echo \"gpu lib $p\"; \
    timeout 3 ldconfig -p 2>/dev/null | grep -q devinject-canary && echo 'host lib in cache'; \
    echo 'script end'";

/// The soname of the library in a host directory an `ld.so.conf` lists (image g).
const CANARY_LIB: &str = "libdevinject-canary.so.1";

/// Which runtime runs the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `nvidia-container-runtime` (cdi mode), `NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all`.
    Nvidia,
    /// runc with `devinject-hook` as a createRuntime hook.
    Hook,
    /// `devinject-runtime` in front of runc.
    Shim,
}

const ROUTES: [Route; 3] = [Route::Nvidia, Route::Hook, Route::Shim];

impl Route {
    fn column(self) -> &'static str {
        match self {
            Route::Nvidia => "NVIDIA runtime 1.20.2 (cdi)",
            Route::Hook => "devinject-hook",
            Route::Shim => "devinject-runtime (shim)",
        }
    }
}

/// The start of every host directory's name of this process's runs, in `/tmp`.
fn host_dir_prefix() -> String {
    format!("devinject-nvh-host-{}-", std::process::id())
}

/// The host side of one run: a fresh host directory (a trap's target, where a write or a marker
/// would land), removed on drop.
struct HostSide {
    dir: tempfile::TempDir,
}

impl HostSide {
    fn new(tag: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}{tag}-", host_dir_prefix()))
            .tempdir_in("/tmp")
            .unwrap();
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Everything below the directory, but the files the test put there before the run.
    fn new_entries(&self, planted: &BTreeSet<PathBuf>) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.path().to_owned()];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(p.clone());
                }
                if !planted.contains(&p) {
                    out.push(p.display().to_string());
                }
            }
        }
        out.sort();
        out
    }
}

/// `/proc/1/root<host>`: at createContainer time (and for any process in the container's pid
/// namespace before `pivot_root`) pid 1 is runc init, whose root is the host's `/`.
fn via_proc(host: &Path) -> String {
    format!("/proc/1/root{}", host.display())
}

/// Sets a trap in a rootfs (the first path), with the run's host directory (the second); returns
/// the host files it planted and the env to add.
type Trap = fn(&Path, &Path) -> (Vec<PathBuf>, Vec<String>);

/// One hostile image.
struct Image {
    /// Its row in the table.
    name: &'static str,
    /// Sets the trap in `rootfs`, with `host` the run's host directory; returns the files it
    /// planted on the host side (not counted as written by the run), and the env to add.
    trap: Trap,
    /// devinject's pinned outcome (hook and shim alike).
    ours: Expect,
}

/// devinject's pinned outcome.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Started with the GPU node and `libcuda.so.1` in the linker cache.
    Inject,
    /// Refused at create, the message naming all these.
    Refused(&'static [&'static str]),
}

/// The image's library directory, where NVIDIA's spec and devinject put the driver's libraries.
const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";

const NOWHERE: &str = "leads nowhere inside the rootfs: fix the image";
const THROUGH_PROC: &str = "loops or leads through /proc: fix the image";

fn images() -> Vec<Image> {
    vec![
        Image {
            name: "a1. `/etc/ld.so.conf` includes itself once",
            trap: |r, _| {
                file(r, "/etc/ld.so.conf", "include /etc/ld.so.conf\n").unwrap();
                (vec![], vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            // ldconfig recurses until it runs out of descriptors, then goes on: twice per level
            // that is 2^RLIMIT_NOFILE visits, each adding the directory line to its list.
            name: "a2. `/etc/ld.so.conf` includes itself twice, then lists a directory",
            trap: |r, _| {
                file(
                    r,
                    "/etc/ld.so.conf",
                    "include /etc/ld.so.conf\ninclude /etc/ld.so.conf\n/usr/lib\n",
                )
                .unwrap();
                (vec![], vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "b1. lib dir -> `/tmp/<host dir>` (absolute)",
            trap: |r, h| {
                link(r, LIB_DIR, h).unwrap();
                (vec![], vec![])
            },
            ours: Expect::Refused(&[LIB_DIR, NOWHERE]),
        },
        Image {
            name: "b2. lib dir -> `/proc/1/root/tmp/<host dir>`",
            trap: |r, h| {
                link(r, LIB_DIR, via_proc(h)).unwrap();
                (vec![], vec![])
            },
            ours: Expect::Refused(&[LIB_DIR, THROUGH_PROC]),
        },
        Image {
            name: "c. `LD_PRELOAD` (process env) = a marker library of the image",
            trap: |r, h| {
                let lib = r.join("preload/marker.so");
                preload_marker(&lib, h).unwrap();
                // Its host path too, so a host process would find it wherever it resolves.
                let env = format!("LD_PRELOAD={}:/preload/marker.so", lib.display());
                (vec![], vec![env])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "d1. `/etc/ld.so.cache` -> `/proc/1/root/tmp/<host dir>/ld.so.cache`",
            trap: |r, h| {
                let host_cache = h.join("ld.so.cache");
                std::fs::write(&host_cache, HOST_CACHE).unwrap();
                link(r, "/etc/ld.so.cache", via_proc(&host_cache)).unwrap();
                (vec![host_cache], vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "d2. `/etc/ld.so.cache` is a FIFO",
            trap: |r, _| {
                fifo(r, "/etc/ld.so.cache").unwrap();
                (vec![], vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "e. `/etc/ld.so.conf` is a FIFO",
            trap: |r, _| {
                fifo(r, "/etc/ld.so.conf").unwrap();
                (vec![], vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "f. `/var/cache` -> `/proc/1/root/tmp/<host dir>`",
            trap: |r, h| {
                link(r, "/var/cache", via_proc(h)).unwrap();
                (vec![], vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "g. `ld.so.conf` lists `/proc/1/root/tmp/<host dir>` (a host library)",
            trap: |r, h| {
                let lib = shared_lib(h, CANARY_LIB, CANARY_LIB).unwrap();
                let planted = std::fs::read_dir(h)
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .chain([lib])
                    .collect();
                file(r, "/etc/ld.so.conf", &format!("{}\n", via_proc(h))).unwrap();
                (planted, vec![])
            },
            ours: Expect::Inject,
        },
        Image {
            name: "h. `/etc` -> `/proc/1/root/tmp/<host dir>`",
            trap: |r, h| {
                link(r, "/etc", via_proc(h)).unwrap();
                (vec![], vec![])
            },
            ours: Expect::Refused(&["/etc in the container rootfs: ELOOP", THROUGH_PROC]),
        },
    ]
}

/// What image d1's host file holds; it must hold it still.
const HOST_CACHE: &str = "host linker cache: not the container's\n";

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// `create` failed: the message's first line.
    Refused(String),
    /// The container ran to its end.
    Started { node: bool, lib: bool },
    /// `start` failed after `create` succeeded.
    StartFailed(String),
    /// Past the deadline, in this step: killed.
    Hung(&'static str),
}

/// One run's record.
#[derive(Debug)]
struct Record {
    outcome: Outcome,
    /// Written or loaded outside the rootfs: host entries, host markers, host libraries in the
    /// container's cache, a changed host file.
    outside: Vec<String>,
    /// Markers left inside the rootfs (a process with the container's root loaded the library).
    inside: Vec<String>,
    /// Wall time of the run, kill and cleanup included.
    took: Duration,
    /// Everything the runtime and the container printed.
    text: String,
    /// What outlived the run's cleanup: runc containers, processes of its group, cgroups.
    left: Vec<String>,
}

impl Record {
    fn cell(&self) -> String {
        let mut s = match &self.outcome {
            Outcome::Refused(line) => format!("refused at create: `{}`", excerpt(line)),
            Outcome::Started { node, lib } => format!(
                "started; GPU node {}, `libcuda.so.1` {}",
                if *node { "yes" } else { "no" },
                if *lib { "yes" } else { "no" }
            ),
            Outcome::StartFailed(line) => format!("created, start failed: `{}`", excerpt(line)),
            Outcome::Hung(step) => {
                format!("**hung** in {step} (killed at {}s)", DEADLINE.as_secs())
            }
        };
        if !self.outside.is_empty() {
            s.push_str(&format!(
                "; **outside the rootfs**: {}",
                self.outside
                    .iter()
                    .map(|o| format!("`{}`", excerpt(o)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !self.inside.is_empty() {
            s.push_str(&format!(
                "; marker library loaded inside the container's root ({})",
                self.inside.len()
            ));
        }
        s
    }
}

/// A message shortened for a table cell, without `|` or backticks, log timestamps or this run's
/// container id.
fn excerpt(s: &str) -> String {
    let mut s = s.trim().replace('|', "/").replace('`', "'");
    // logrus's `time="..." ` and Go's log `2026/01/02 15:04:05 `.
    if s.starts_with("time=\"") {
        if let Some(at) = s.find("\" ") {
            s = s[at + 2..].to_owned();
        }
    }
    let b = s.as_bytes();
    if b.len() > 20 && b[4] == b'/' && b[7] == b'/' && b[13] == b':' && b[19] == b' ' {
        s = s[20..].to_owned();
    }
    let s = strip_ids(&s);
    let s = s.trim();
    if s.chars().count() > 260 {
        format!("{}...", s.chars().take(260).collect::<String>())
    } else {
        s.to_owned()
    }
}

/// `s` with every container id of this test ([`container_id`]`("nvhostile")`) as `<id>`.
fn strip_ids(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("nvhostile-") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + "nvhostile-".len()..];
        let n = tail
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(tail.len());
        out.push_str("<id>");
        rest = &tail[n..];
    }
    out.push_str(rest);
    out
}

/// The first line of a refusal: the hook's own line when runc quotes a failed hook, else the
/// first line that says error (or the first line).
fn first_line(text: &str) -> String {
    let out = std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(0),
        stdout: Vec::new(),
        stderr: text.as_bytes().to_vec(),
    };
    if let Some(f) = hook_failure(&out) {
        if let Some(l) = f.line("devinject") {
            return l;
        }
        if let Some(l) = f.stderr.split("\\n").map(str::trim).find(|l| !l.is_empty()) {
            return l.trim_end_matches('"').replace("\\\"", "\"");
        }
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| l.starts_with("devinject"))
        .or_else(|| {
            lines
                .iter()
                .find(|l| l.to_ascii_lowercase().contains("error"))
        })
        .or(lines.first())
        .map(|l| l.to_string())
        .unwrap_or_default()
}

/// Spawns `cmd` with stdout and stderr to `log`.
fn spawn(mut cmd: Command, log: &File) -> std::process::Child {
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log.try_clone().unwrap());
    cmd.spawn().unwrap()
}

/// `(pid, ppid, state)` of every process, from `/proc/<pid>/stat`.
fn processes() -> Vec<(i32, i32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        out.push((pid, ppid, state));
    }
    out
}

/// `/proc/<pid>/stat`'s `pid (comm) state`, or `None` when the process is gone.
fn describe_pid(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Kills `root` and every process below it, however detached (runc init makes a session of its
/// own; NVIDIA's hook re-executes itself for ldconfig): the tree is found through the parent
/// links in `/proc` and stopped (`SIGSTOP`: no more forks) until no new member turns up, then
/// `SIGKILL`ed. Returns its pids, for [`reap`].
fn kill_tree(root: i32) -> BTreeSet<i32> {
    let mut tree = BTreeSet::from([root]);
    let _ = kill(Pid::from_raw(root), Signal::SIGSTOP);
    loop {
        let new: Vec<i32> = processes()
            .into_iter()
            .filter(|(pid, ppid, _)| tree.contains(ppid) && !tree.contains(pid))
            .map(|(pid, _, _)| pid)
            .collect();
        if new.is_empty() {
            break;
        }
        for pid in new {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
            tree.insert(pid);
        }
    }
    for &pid in &tree {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    tree
}

/// Reaps `pids` (killed; this process, a child subreaper, inherits those whose parent died too)
/// for up to 5 s; returns those still there.
fn reap(pids: &BTreeSet<i32>) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        for &pid in pids {
            let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
        }
        let left: Vec<String> = pids.iter().filter_map(|&p| describe_pid(p)).collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` until `end`; past it, kills its whole tree into `killed`. The exit status
/// when it exited in time.
fn wait_until(
    child: &mut std::process::Child,
    end: Instant,
    killed: &mut BTreeSet<i32>,
) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if Instant::now() >= end {
            killed.extend(kill_tree(child.id() as i32));
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live processes whose parent is this process (orphans reparented to the subreaper).
fn my_children() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    processes()
        .into_iter()
        .filter(|&(_, ppid, state)| ppid == me && state != 'Z')
        .filter_map(|(pid, _, _)| describe_pid(pid).map(|d| (pid, d)))
        .collect()
}

/// Cgroup directories named `id` (runc's, below this process's cgroup or the root), up to six
/// levels deep.
fn cgroups_named(id: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if e.file_name() == id {
                out.push(e.path());
            }
            if depth < 5 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    out
}

/// Runs the bundle in `bundle_dir` as `id` through `runtime` with runc's state in `state`: create,
/// start, wait for the container's init (this process is a child subreaper), all within
/// [`DEADLINE`] from the start, killing the step's whole process tree past it; then force-deletes
/// the container with runc and removes the cgroups runc made for it. Returns the outcome, what the
/// runtime and the container printed, and what outlived the cleanup.
fn run_bounded(
    runtime: &[String],
    state: &Path,
    bundle_dir: &Path,
    id: &str,
) -> (Outcome, String, Vec<String>) {
    let end = Instant::now() + DEADLINE;
    let log_path = bundle_dir.join("run.log");
    let log = File::create(&log_path).unwrap();
    let pid_file = bundle_dir.join("init.pid");
    let command = |args: &[&str]| {
        let mut c = Command::new(&runtime[0]);
        c.args(&runtime[1..]).arg("--root").arg(state).args(args);
        c
    };
    let mut killed = BTreeSet::new();
    let mut create = command(&["create", "--bundle"]);
    create
        .arg(bundle_dir)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(id);
    let mut child = spawn(create, &log);
    let outcome = 'run: {
        match wait_until(&mut child, end, &mut killed) {
            None => break 'run Outcome::Hung("create"),
            Some(s) if !s.success() => {
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                break 'run Outcome::Refused(first_line(&text));
            }
            Some(_) => {}
        }
        let Some(init) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        else {
            break 'run Outcome::StartFailed("no pid file after create".into());
        };
        // From here the container's init is this process's child; it dies with the container.
        let mut start = spawn(command(&["start", id]), &log);
        let started = wait_until(&mut start, end, &mut killed);
        let outcome = match started {
            None => Some(Outcome::Hung("start")),
            Some(s) if !s.success() => {
                let text = std::fs::read_to_string(&log_path).unwrap_or_default();
                Some(Outcome::StartFailed(first_line(&text)))
            }
            Some(_) => None,
        };
        if let Some(outcome) = outcome {
            killed.extend(kill_tree(init));
            break 'run outcome;
        }
        loop {
            match waitpid(Pid::from_raw(init), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) if Instant::now() < end => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(WaitStatus::StillAlive) => {
                    killed.extend(kill_tree(init));
                    break 'run Outcome::Hung("the container");
                }
                _ => break,
            }
        }
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        Outcome::Started {
            node: text.lines().any(|l| l == "gpu node"),
            lib: text.lines().any(|l| l.starts_with("gpu lib ")),
        }
    };
    let mut left = reap(&killed);
    let _ = Command::new(runc_path())
        .arg("--root")
        .arg(state)
        .args(["delete", "--force", id])
        .output()
        .unwrap();
    // A create killed before runc saved its state leaves cgroups `delete` does not know of.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut cgroups = cgroups_named(id);
        if cgroups.is_empty() || Instant::now() >= until {
            break;
        }
        cgroups.sort_by_key(|c| std::cmp::Reverse(c.components().count()));
        for cg in cgroups {
            let _ = std::fs::remove_dir(&cg);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let list = Command::new(runc_path())
        .arg("--root")
        .arg(state)
        .args(["list", "-q"])
        .output()
        .unwrap();
    left.extend(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("runc container {l}")),
    );
    left.extend(cgroups_named(id).iter().map(|c| c.display().to_string()));
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    (outcome, text, left)
}

/// Everything one run needs of the node.
struct Node {
    host: VendorHost,
    nvidia: Vec<String>,
    /// `devinject-hook`, and the shim's command line: resolved (and checked fresh) up front.
    hook: PathBuf,
    shim: Vec<String>,
}

fn run_image(dir: &Path, node: &Node, image: &Image, index: usize, route: Route) -> Record {
    let side = HostSide::new(&format!("{index}-{route:?}"));
    let mut b = Bundle::new(
        &dir.join(format!("{index}-{route:?}")),
        &["/bin/sh", "-c", SCRIPT],
    )
    .unwrap();
    let rootfs = b.rootfs();
    let (planted, env) = (image.trap)(&rootfs, side.path());
    let mut planted: BTreeSet<PathBuf> = planted.into_iter().collect();
    // gcc's leftovers beside a planted library are planted too.
    if let Ok(rd) = std::fs::read_dir(side.path()) {
        planted.extend(rd.flatten().map(|e| e.path()));
    }
    for e in &env {
        b.env(e);
    }
    let runtime = match route {
        Route::Nvidia => {
            b.env("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all");
            node.nvidia.clone()
        }
        Route::Hook => {
            b.env("NVIDIA_VISIBLE_DEVICES=0")
                .env("NVIDIA_DRIVER_CAPABILITIES=all")
                .hook("createRuntime", &node.hook, &node.host.config);
            vec![runc_path()]
        }
        Route::Shim => {
            b.env("NVIDIA_VISIBLE_DEVICES=0")
                .env("NVIDIA_DRIVER_CAPABILITIES=all");
            node.shim.clone()
        }
    };
    b.write().unwrap();
    let begin = Instant::now();
    let id = container_id("nvhostile");
    let (outcome, text, left) = run_bounded(&runtime, &b.state_root(), &b.dir, &id);
    let took = begin.elapsed();
    // Messages name this run's directories: as placeholders, for a table that reads the same
    // every run.
    let outcome = match outcome {
        Outcome::Refused(line) => Outcome::Refused(
            line.replace(&*rootfs.to_string_lossy(), "<rootfs>")
                .replace(&*side.path().to_string_lossy(), "<host dir>"),
        ),
        other => other,
    };
    let mut outside = side.new_entries(&planted);
    if let Some(host_cache) = planted.iter().find(|p| p.ends_with("ld.so.cache")) {
        if std::fs::read_to_string(host_cache).ok().as_deref() != Some(HOST_CACHE) {
            outside.push(format!("{} changed", host_cache.display()));
        }
    }
    if text.lines().any(|l| l == "host lib in cache") {
        outside.push(format!("host {CANARY_LIB} in the container's cache"));
    }
    let inside = markers_in(&rootfs);
    // The markers of host processes are new entries of the host dir: named as such.
    for m in markers_in(side.path()) {
        outside.retain(|o| !m.starts_with(o.as_str()));
        outside.push(format!("host process loaded LD_PRELOAD: {m}"));
    }
    Record {
        outcome,
        outside,
        inside,
        took,
        text,
        left,
    }
}

fn mounts() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().nth(4).unwrap_or("").to_owned())
        .collect()
}

#[test]
fn hostile_images_through_nvidias_runtime_and_devinject() {
    let Some(stacks) = stacks() else { return };
    let Some(tk) = toolkit() else { return };
    if !require_runc_demo() {
        return;
    }
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let t = tempfile::tempdir().unwrap();
    let installed = InstalledStacks::mount(&t.path().join("stacks"), &stacks).unwrap();
    let host = nvidia_host(&t.path().join("host"), &installed.dir, &["nvidia"]).unwrap();
    let host_config = host.config.clone();
    let spec_dir = t.path().join("cdi");
    tk.generate_spec(&host, &spec_dir).unwrap();
    let config = tk
        .write_config(&t.path().join("nvidia"), &spec_dir, Path::new(&runc_path()))
        .unwrap();
    let node = Node {
        nvidia: tk.runtime_command(&config),
        host,
        hook: bin("devinject-hook"),
        shim: shim_command(&host_config, &runc_path()),
    };
    let mounts_before = mounts();
    let images = images();
    let begin = Instant::now();
    // The images in parallel (two of NVIDIA's runs may hang to the deadline); an image's three
    // runs one after the other.
    let records: Vec<Vec<Record>> = std::thread::scope(|s| {
        let handles: Vec<_> = images
            .iter()
            .enumerate()
            .map(|(i, image)| {
                let (dir, node) = (t.path(), &node);
                s.spawn(move || {
                    ROUTES
                        .iter()
                        .map(|&route| run_image(dir, node, image, i, route))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = begin.elapsed();

    // Nothing left behind: no process (killed and named if any), no mount.
    let left = my_children();
    for (pid, _) in &left {
        reap(&kill_tree(*pid));
    }
    let mounts_after = mounts();

    // The table.
    let mut table = format!(
        "| image | {} | {} | {} |\n|---|---|---|---|\n",
        Route::Nvidia.column(),
        Route::Hook.column(),
        Route::Shim.column()
    );
    for (image, recs) in images.iter().zip(&records) {
        table.push_str(&format!("| {} |", image.name));
        for r in recs {
            table.push_str(&format!(" {} |", r.cell()));
        }
        table.push('\n');
    }
    eprintln!("\n{table}\n(all runs in parallel by image: {wall:.1?})");

    for (image, recs) in images.iter().zip(&records) {
        for (route, r) in ROUTES.iter().zip(recs) {
            let ctx = format!(
                "{} via {route:?}: {:?} after {:.1?}\n{}",
                image.name, r.outcome, r.took, r.text
            );
            // Every run ended by the deadline, or was killed there (and its kill and cleanup were
            // quick).
            assert!(
                r.took < DEADLINE + Duration::from_secs(10),
                "the deadline did not hold: {ctx}"
            );
            assert!(r.left.is_empty(), "left behind: {:?}\n{ctx}", r.left);
            if *route == Route::Nvidia {
                continue;
            }
            assert!(
                !matches!(r.outcome, Outcome::Hung(_)),
                "devinject hung: {ctx}"
            );
            assert!(
                r.outside.is_empty(),
                "devinject wrote or loaded outside the rootfs: {:?}\n{ctx}",
                r.outside
            );
            assert!(
                r.inside.is_empty(),
                "a devinject helper loaded the image's LD_PRELOAD: {:?}\n{ctx}",
                r.inside
            );
            match image.ours {
                Expect::Inject => assert_eq!(
                    r.outcome,
                    Outcome::Started {
                        node: true,
                        lib: true
                    },
                    "{ctx}"
                ),
                Expect::Refused(texts) => {
                    let Outcome::Refused(line) = &r.outcome else {
                        panic!("expected a refusal naming {texts:?}: {ctx}");
                    };
                    for needle in texts {
                        assert!(line.contains(needle), "{needle:?} not in {line:?}: {ctx}");
                    }
                }
            }
        }
    }
    assert!(
        left.is_empty(),
        "processes outlived their runs (killed now): {left:?}"
    );
    let host_dirs: Vec<String> = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&host_dir_prefix()))
        .collect();
    assert!(host_dirs.is_empty(), "host directories left: {host_dirs:?}");
    let new_mounts: Vec<&String> = mounts_after.difference(&mounts_before).collect();
    assert!(new_mounts.is_empty(), "mounts left: {new_mounts:?}");
    drop(installed);
}
