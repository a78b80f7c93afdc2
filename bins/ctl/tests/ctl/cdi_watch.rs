//! `devinject-ctl cdi generate --watch` as a real process on a simulated host (mknod'ed demo
//! nodes, a gcc-built library, real inotify): a node appearing, a node going, a profile edited,
//! a profile broken and repaired, a device directory created after the start (and removed and
//! made again), every device of a kind gone, and SIGTERM. Each change is polled for with a
//! generous deadline (no timing is asserted here; `cdi-watch-bench` measures the latency), and
//! the spec is parsed at every poll: a reader must never see a half-written spec, and each
//! refresh is a new file renamed into place. Needs root (mknod) and gcc; skipped otherwise
//! (fails under `CI=true`). The SIGINT test needs neither.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devinject_tests::sim;
use devinject_tests::skip::{require_binary, require_root};

const DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(10);

/// The watcher process, its stdout and stderr collected as they come; killed on drop.
struct Watcher {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(stream: impl Read + Send + 'static) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&text);
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let mut t = sink.lock().unwrap_or_else(|e| e.into_inner());
            t.push_str(&line);
            t.push('\n');
        }
    });
    (text, reader)
}

impl Watcher {
    fn start(args: &[&Path]) -> Watcher {
        let mut child = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
            .args(["cdi", "generate", "--watch"])
            .args(args)
            .env("DEVINJECT_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start devinject-ctl cdi generate --watch");
        let (stdout, out_reader) = collect(child.stdout.take().expect("stdout"));
        let (stderr, err_reader) = collect(child.stderr.take().expect("stderr"));
        Watcher {
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    fn logs(&self) -> String {
        let out = self.stdout.lock().unwrap_or_else(|e| e.into_inner());
        let err = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        format!("--- watcher stdout\n{out}\n--- watcher stderr\n{err}")
    }

    /// Waits until `cond` holds for the watcher's output.
    fn wait_output(&mut self, what: &str, cond: impl Fn(&str, &str) -> bool) {
        let start = Instant::now();
        loop {
            {
                let out = self.stdout.lock().unwrap_or_else(|e| e.into_inner());
                let err = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
                if cond(&out, &err) {
                    return;
                }
            }
            self.assert_running(what);
            assert!(
                start.elapsed() < DEADLINE,
                "{what}: not within {DEADLINE:?}\n{}",
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }

    fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("{what}: the watcher exited ({status})\n{}", self.logs());
        }
    }

    /// CPU time (user + system, clock ticks) the watcher has used so far.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("read /proc/<pid>/stat");
        // Fields after the command name, which is in parentheses and may hold spaces.
        let after = &stat[stat.rfind(')').expect("comm") + 2..];
        let fields: Vec<&str> = after.split(' ').collect();
        // utime and stime are fields 14 and 15 of proc(5), 12 and 13 after the state field.
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }

    fn signal_and_wait(&mut self, signal: nix::sys::signal::Signal) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal the watcher");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Its output ends with it: read to the end.
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "the watcher did not exit on {signal}\n{}",
                self.logs()
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One read of a spec: its JSON and its inode.
struct Seen {
    spec: serde_json::Value,
    inode: u64,
}

/// Polls `spec` until `cond` holds for it (`None`: the file is absent). Every read must parse:
/// the watcher replaces a spec by renaming a complete file over it.
fn wait_spec(
    watcher: &mut Watcher,
    spec: &Path,
    what: &str,
    cond: impl Fn(Option<&serde_json::Value>) -> bool,
) -> Option<Seen> {
    let start = Instant::now();
    loop {
        let seen = match std::fs::File::open(spec) {
            Ok(mut file) => {
                let inode = file.metadata().expect("stat spec").ino();
                let mut text = String::new();
                file.read_to_string(&mut text).expect("read spec");
                let spec = serde_json::from_str(&text).unwrap_or_else(|e| {
                    panic!(
                        "{what}: {} was read half-written ({e}):\n{text}",
                        spec.display()
                    )
                });
                Some(Seen { spec, inode })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => panic!("{what}: cannot read {}: {e}", spec.display()),
        };
        let value = seen.as_ref().map(|s| &s.spec);
        if cond(value) {
            return seen;
        }
        watcher.assert_running(what);
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: {} not refreshed within {DEADLINE:?}; it is now {}\n{}",
            spec.display(),
            value.map_or_else(|| "absent".to_string(), |v| v.to_string()),
            watcher.logs()
        );
        std::thread::sleep(POLL);
    }
}

/// Asserts that `next` is a new file, renamed over `previous`, not `previous` rewritten in
/// place (which a reader could see half-written).
fn assert_replaced(previous: &Option<Seen>, next: &Option<Seen>, what: &str) {
    if let (Some(p), Some(n)) = (previous, next) {
        assert_ne!(
            p.inode, n.inode,
            "{what}: the spec was rewritten in place, not replaced by a rename"
        );
    }
}

/// The spec's device names.
fn names(spec: Option<&serde_json::Value>) -> Vec<String> {
    spec.and_then(|s| s["devices"].as_array())
        .map(|d| {
            d.iter()
                .filter_map(|d| d["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn has_env(spec: Option<&serde_json::Value>, entry: &str) -> bool {
    spec.and_then(|s| s["containerEdits"]["env"].as_array())
        .is_some_and(|env| env.iter().any(|e| e == entry))
}

const LATE_PROFILE: &str = "name = \"late\"\nresource = \"devinject.io/late\"\n\
                            [discovery]\nnodes = [\"late/dev[0-9]*\"]\n";

#[test]
fn cdi_watch_refreshes_specs_on_node_profile_and_directory_changes() {
    if !(require_root() && require_binary("mknod") && require_binary("gcc")) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let host = sim::demo_host(tmp.path(), &["demo"]).expect("simulated host");
    std::fs::write(host.profiles_dir.join("late.toml"), LATE_PROFILE).expect("late profile");
    let out = tmp.path().join("cdi");
    let sys = tmp.path().join("sys");
    let mut watcher = Watcher::start(&[
        Path::new("--output"),
        &out,
        Path::new("--profiles-dir"),
        &host.profiles_dir,
        Path::new("--dev-root"),
        &host.dev_root,
        Path::new("--sys-root"),
        &sys,
        Path::new("--driver-root"),
        &host.driver_root,
    ]);
    let demo = out.join("devinject.io-demo.json");
    let late = out.join("devinject.io-late.json");
    let accel = |name: &str| host.dev_root.join("demo").join(name);

    let first = wait_spec(&mut watcher, &demo, "first generation", |s| {
        names(s) == ["0", "1", "2", "3", "all"]
    });
    assert!(!late.exists(), "no late/ directory, no late spec");

    // A node appears.
    sim::mknod(&accel("accel4"), 10, 183, "0666").expect("mknod accel4");
    let added = wait_spec(&mut watcher, &demo, "accel4 appeared", |s| {
        names(s) == ["0", "1", "2", "3", "4", "all"]
    });
    assert_replaced(&first, &added, "accel4 appeared");

    // A node goes.
    std::fs::remove_file(accel("accel0")).expect("rm accel0");
    let removed = wait_spec(&mut watcher, &demo, "accel0 removed", |s| {
        names(s) == ["1", "2", "3", "4", "all"]
    });
    assert_replaced(&added, &removed, "accel0 removed");

    // The profile is edited in place.
    let profile = host.profiles_dir.join("demo.toml");
    let text = std::fs::read_to_string(&profile).expect("read profile");
    let edited = text.replace(
        "DEMO_DRIVER_VERSION = \"1.0\"",
        "DEMO_DRIVER_VERSION = \"2.0\"",
    );
    assert_ne!(
        edited, text,
        "the shipped demo profile sets DEMO_DRIVER_VERSION"
    );
    std::fs::write(&profile, &edited).expect("edit profile");
    let edited = wait_spec(&mut watcher, &demo, "profile edited", |s| {
        has_env(s, "DEMO_DRIVER_VERSION=2.0")
    });
    assert_replaced(&removed, &edited, "profile edited");

    // A broken profile: a logged error naming the file and the fix; the spec stays.
    std::fs::write(&profile, "name = \"demo\"\nbogus = 1\n").expect("break profile");
    let shown = profile.display().to_string();
    watcher.wait_output("the broken profile is reported", |_, err| {
        err.lines().any(|l| {
            l.contains("ERROR")
                && l.contains(&shown)
                && l.contains("the previous specs stay: fix the file")
        })
    });
    let kept = wait_spec(&mut watcher, &demo, "spec kept", |s| s.is_some()).expect("spec");
    assert!(
        has_env(Some(&kept.spec), "DEMO_DRIVER_VERSION=2.0"),
        "{}",
        kept.spec
    );
    assert_eq!(names(Some(&kept.spec)), ["1", "2", "3", "4", "all"]);
    let repaired = text.replace(
        "DEMO_DRIVER_VERSION = \"1.0\"",
        "DEMO_DRIVER_VERSION = \"3.0\"",
    );
    std::fs::write(&profile, repaired).expect("repair profile");
    let repaired = wait_spec(&mut watcher, &demo, "profile repaired", |s| {
        has_env(s, "DEMO_DRIVER_VERSION=3.0")
    });
    assert_replaced(&Some(kept), &repaired, "profile repaired");

    // A device directory created after the start (a driver loading).
    std::fs::create_dir(host.dev_root.join("late")).expect("mkdir late");
    sim::mknod(&host.dev_root.join("late/dev0"), 10, 237, "0666").expect("mknod late/dev0");
    wait_spec(
        &mut watcher,
        &late,
        "late/dev0 appeared in a new directory",
        |s| names(s) == ["0", "all"],
    );

    // The directory is removed and made again: the new one is watched too.
    std::fs::remove_dir_all(host.dev_root.join("late")).expect("rm -r late");
    std::fs::create_dir(host.dev_root.join("late")).expect("mkdir late again");
    sim::mknod(&host.dev_root.join("late/dev1"), 10, 237, "0666").expect("mknod late/dev1");
    wait_spec(&mut watcher, &late, "late/ made again with dev1", |s| {
        names(s) == ["1", "all"]
    });
    sim::mknod(&host.dev_root.join("late/dev2"), 10, 234, "0666").expect("mknod late/dev2");
    wait_spec(&mut watcher, &late, "late/dev2 in the new directory", |s| {
        names(s) == ["1", "2", "all"]
    });

    // Every demo device goes: the spec goes.
    for name in ["accel1", "accel2", "accel3", "accel4"] {
        std::fs::remove_file(accel(name)).expect("rm accel");
    }
    wait_spec(&mut watcher, &demo, "every demo device removed", |s| {
        s.is_none()
    });

    // Idle: no busy loop (an idle watcher sleeps in poll(2)).
    let before = watcher.cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let used = watcher.cpu_ticks() - before;
    assert!(
        used <= 20,
        "the idle watcher used {used} clock ticks in 1 s\n{}",
        watcher.logs()
    );

    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .expect("list output")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains("devinject-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    let status = watcher.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(status.code(), Some(0), "{}", watcher.logs());
    assert!(late.exists(), "stopping leaves the specs as they are");
}

#[test]
fn cdi_watch_exits_cleanly_on_sigint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let profiles = tmp.path().join("profiles");
    std::fs::create_dir(&profiles).expect("mkdir profiles");
    let out: PathBuf = tmp.path().join("cdi");
    let mut watcher = Watcher::start(&[
        Path::new("--output"),
        &out,
        Path::new("--profiles-dir"),
        &profiles,
        Path::new("--dev-root"),
        tmp.path(),
    ]);
    // Ready once the first generation is reported: the signals are blocked by then.
    watcher.wait_output("the first generation", |out, _| {
        out.contains("CDI specs are up to date; nothing changed")
    });
    let status = watcher.signal_and_wait(nix::sys::signal::Signal::SIGINT);
    assert_eq!(status.code(), Some(0), "{}", watcher.logs());
    assert!(
        watcher.logs().contains("stop requested"),
        "{}",
        watcher.logs()
    );
}

#[test]
fn cdi_watch_refuses_dry_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
        .args(["cdi", "generate", "--watch", "--dry-run"])
        .output()
        .expect("run devinject-ctl");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
