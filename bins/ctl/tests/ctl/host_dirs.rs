//! What someone else puts at one of devinject's own names in a host directory (a CDI spec, the
//! hooks.d file, a drop-in, the state file) is neither followed, opened, replaced nor removed, and
//! `--root DIR` (the DaemonSet's way) and `--root /` agree.
//!
//! Each case plants one object at our name: a symlink to a canary outside the host tree, a
//! symlink to a canary inside it, a FIFO, a character device (`/dev/null`'s numbers) and a hard
//! link to a canary. Each writer (`cdi generate`, `runtime configure` for CRI-O's drop-in and
//! state file and for podman's hooks.d file) runs twice, once through the root prefix and once
//! with the same tree named by its real paths from `/`, and must: end within a bound, leave every
//! canary byte-identical and the planted object as it was, and fail with the same error naming
//! the path and what is there. The `--watch` refresher keeps running, reports the path, and
//! writes the spec once the object is gone.
//!
//! Needs root (mknod); skipped otherwise (fails under `CI=true`).

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devinject_cdi::{self as cdi, CdiRequest};
use devinject_devices::HostRoots;
use devinject_engine_config::{configure, ConfigureRequest, Engine, HostPaths, Mode};
use devinject_tests::skip::require_root;
use nix::sys::stat::{makedev, mknod, Mode as NixMode, SFlag};

/// Longer than any run that does not block.
const BOUND: Duration = Duration::from_secs(20);
const KVM_PROFILE: &str =
    "name = \"kvm\"\nresource = \"devinject.io/kvm\"\n\n[discovery]\nnodes = [\"kvm\"]\n";
const CANARY: &str = "canary: must stay byte-identical\n";

/// What is planted at our name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planted {
    LinkOutside,
    LinkInside,
    Fifo,
    CharDevice,
    HardLink,
}

const PLANTED: [Planted; 5] = [
    Planted::LinkOutside,
    Planted::LinkInside,
    Planted::Fifo,
    Planted::CharDevice,
    Planted::HardLink,
];

impl Planted {
    /// The words the error uses for it.
    fn what(self) -> &'static str {
        match self {
            Planted::LinkOutside | Planted::LinkInside => "is a symbolic link",
            Planted::Fifo => "is a FIFO",
            Planted::CharDevice => "is a character device",
            Planted::HardLink => "is a hard link",
        }
    }
}

/// How the host tree is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    /// `--root DIR`, host paths inside it.
    Prefix,
    /// `--root /`, the tree named by its real paths.
    Host,
}

/// A host tree with a canary inside it, and one outside it.
struct Host {
    tree: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let tree = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(tree.path().join("etc/devinject/profiles")).expect("mkdir");
        fs::create_dir_all(tree.path().join("dev")).expect("mkdir");
        fs::create_dir_all(tree.path().join("sys")).expect("mkdir");
        fs::write(
            tree.path().join("etc/devinject/profiles/kvm.toml"),
            KVM_PROFILE,
        )
        .expect("profile");
        mknod(
            &tree.path().join("dev/kvm"),
            SFlag::S_IFCHR,
            NixMode::from_bits_truncate(0o666),
            makedev(10, 232),
        )
        .expect("mknod kvm");
        fs::write(tree.path().join("etc/canary"), CANARY).expect("canary");
        fs::write(outside.path().join("canary"), CANARY).expect("canary");
        Host { tree, outside }
    }

    fn root(&self) -> &Path {
        self.tree.path()
    }

    /// The host path `host` as given to a writer reaching the tree as `root` says.
    fn host_path(&self, root: Root, host: &str) -> PathBuf {
        match root {
            Root::Prefix => PathBuf::from(host),
            Root::Host => self.root().join(host.trim_start_matches('/')),
        }
    }

    fn prefix(&self, root: Root) -> PathBuf {
        match root {
            Root::Prefix => self.root().to_path_buf(),
            Root::Host => PathBuf::from("/"),
        }
    }

    /// Plants `what` at host path `host` (its directory is made).
    fn plant(&self, root: Root, host: &str, what: Planted) {
        let at = self.root().join(host.trim_start_matches('/'));
        fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        match what {
            Planted::LinkOutside => {
                symlink(self.outside.path().join("canary"), &at).expect("symlink")
            }
            // The canary as the host names it: inside the root for `--root DIR`.
            Planted::LinkInside => {
                symlink(self.host_path(root, "/etc/canary"), &at).expect("symlink")
            }
            Planted::Fifo => {
                nix::unistd::mkfifo(&at, NixMode::from_bits_truncate(0o644)).expect("mkfifo")
            }
            Planted::CharDevice => mknod(
                &at,
                SFlag::S_IFCHR,
                NixMode::from_bits_truncate(0o666),
                makedev(1, 3),
            )
            .expect("mknod"),
            Planted::HardLink => fs::hard_link(self.root().join("etc/canary"), &at).expect("link"),
        }
    }

    /// What went wrong for `case`: a canary changed, or `host` no longer holds what was planted.
    fn damage(&self, host: &str, what: Planted, case: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for canary in [
            self.root().join("etc/canary"),
            self.outside.path().join("canary"),
        ] {
            match fs::read_to_string(&canary) {
                Ok(text) if text == CANARY => {}
                other => problems.push(format!("{case}: {} changed: {other:?}", canary.display())),
            }
        }
        // Nothing appeared where a followed link would have led inside the root.
        let followed = self
            .root()
            .join(self.outside.path().strip_prefix("/").expect("absolute"));
        if followed.exists() {
            problems.push(format!("{case}: {} was made", followed.display()));
        }
        let at = self.root().join(host.trim_start_matches('/'));
        let kept = fs::symlink_metadata(&at).is_ok_and(|meta| match what {
            Planted::LinkOutside | Planted::LinkInside => meta.file_type().is_symlink(),
            Planted::Fifo => meta.file_type().is_fifo(),
            Planted::CharDevice => {
                meta.file_type().is_char_device() && meta.rdev() == makedev(1, 3)
            }
            Planted::HardLink => meta.is_file() && meta.nlink() == 2,
        });
        if !kept {
            problems.push(format!(
                "{case}: {} was replaced or removed: {:?}",
                at.display(),
                fs::symlink_metadata(&at).map(|m| m.file_type())
            ));
        }
        problems
    }
}

/// Runs `f` on a thread; `None` when it does not end within [`BOUND`] (a FIFO opened for
/// reading blocks for ever).
fn bounded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND).ok()
}

fn cdi_request(host: &Host, root: Root) -> CdiRequest {
    CdiRequest {
        root: host.prefix(root),
        profiles_dir: host.host_path(root, "/etc/devinject/profiles"),
        roots: HostRoots {
            dev_root: host.host_path(root, "/dev"),
            sys_root: host.host_path(root, "/sys"),
            proc_root: host.host_path(root, "/proc"),
            driver_root: host.host_path(root, "/"),
        },
        output_dir: host.host_path(root, "/etc/cdi"),
        ..CdiRequest::default()
    }
}

const SPEC: &str = "/etc/cdi/devinject.io-kvm.json";

/// One writer: its name for messages, the host paths of our names it writes, and a run.
struct Writer {
    name: &'static str,
    ours: &'static [&'static str],
    run: fn(&Host, Root) -> Result<(), String>,
}

fn blocked() -> String {
    format!("BLOCKED: still running after {BOUND:?}")
}

fn run_cdi(host: &Host, root: Root) -> Result<(), String> {
    let req = cdi_request(host, root);
    bounded(move || cdi::generate(&req).map(|_| ()))
        .ok_or_else(blocked)?
        .map_err(|e| e.to_string())
}

fn run_configure(host: &Host, root: Root, engine: Engine, mode: Mode) -> Result<(), String> {
    let mut req = ConfigureRequest::new(engine);
    req.mode = Some(mode);
    req.paths = HostPaths {
        root: host.prefix(root),
        config: Some(host.host_path(root, engine.default_config())),
        hooks_dir: Some(host.host_path(root, "/etc/containers/oci/hooks.d")),
    };
    bounded(move || configure(&req).map(|_| ()))
        .ok_or_else(blocked)?
        .map_err(|e| e.to_string())
}

const WRITERS: [Writer; 3] = [
    Writer {
        name: "cdi generate",
        ours: &[SPEC],
        run: run_cdi,
    },
    Writer {
        name: "configure crio (drop-in, state file)",
        ours: &[
            "/etc/crio/crio.conf.d/99-devinject.conf",
            "/etc/crio/.crio.conf.devinject-state",
        ],
        run: |h, r| run_configure(h, r, Engine::Crio, Mode::Shim),
    },
    Writer {
        name: "configure podman (hooks.d file)",
        ours: &["/etc/containers/oci/hooks.d/devinject.json"],
        run: |h, r| run_configure(h, r, Engine::Podman, Mode::Hook),
    },
];

#[test]
fn nothing_at_our_names_in_host_directories_is_followed_opened_or_replaced() {
    if !require_root() {
        return;
    }
    let mut problems = Vec::new();
    for writer in &WRITERS {
        for name in writer.ours {
            for what in PLANTED {
                let mut outcomes = Vec::new();
                for root in [Root::Prefix, Root::Host] {
                    let case = format!("{}: {what:?} at {name}, {root:?}", writer.name);
                    let host = Host::new();
                    host.plant(root, name, what);
                    let outcome = (writer.run)(&host, root);
                    problems.extend(host.damage(name, what, &case));
                    let shown = host.root().join(name.trim_start_matches('/'));
                    let expected = format!("{} {}", shown.display(), what.what());
                    match &outcome {
                        Err(e) if e.contains(&expected) && e.contains("remove it") => {}
                        other => problems.push(format!(
                            "{case}: expected an error saying {expected:?}, got {other:?}"
                        )),
                    }
                    // The same words whichever root: only the tree's place differs.
                    outcomes.push(
                        format!("{outcome:?}")
                            .replace(&host.root().display().to_string(), "<host>"),
                    );
                }
                if outcomes[0] != outcomes[1] {
                    problems.push(format!(
                        "{}: {what:?} at {name}: --root DIR and --root / disagree: {} / {}",
                        writer.name, outcomes[0], outcomes[1]
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The watcher's stderr, collected as it comes; killed on drop.
struct Watcher {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Watcher {
    fn start(root: &Path) -> Watcher {
        let mut child = Command::new(env!("CARGO_BIN_EXE_devinject-ctl"))
            .args(["cdi", "generate", "--watch", "--root"])
            .arg(root)
            .env("DEVINJECT_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start devinject-ctl cdi generate --watch");
        let stream = child.stderr.take().expect("stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let mut t = sink.lock().unwrap_or_else(|e| e.into_inner());
                t.push_str(&line);
                t.push('\n');
            }
        });
        Watcher { child, stderr }
    }

    fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            let text = self
                .stderr
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            panic!("{what}: the watcher exited ({status})\n{text}");
        }
    }

    fn wait(&mut self, what: &str, cond: impl Fn(&str) -> bool) {
        let start = Instant::now();
        loop {
            let text = self
                .stderr
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if cond(&text) {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("{what}: the watcher exited ({status})\n{text}");
            }
            assert!(
                start.elapsed() < BOUND,
                "{what}: not within {BOUND:?}\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_cdi_refresher_reports_a_fifo_at_its_spec_name_and_keeps_running() {
    if !require_root() {
        return;
    }
    let host = Host::new();
    host.plant(Root::Prefix, SPEC, Planted::Fifo);
    let spec = host.root().join(SPEC.trim_start_matches('/'));
    let mut watcher = Watcher::start(host.root());
    let reported = format!("{} is a FIFO", spec.display());
    watcher.wait("the FIFO is reported", |err| err.contains(&reported));
    let damage = host.damage(SPEC, Planted::Fifo, "watch");
    assert!(damage.is_empty(), "{}", damage.join("\n"));

    // Gone: the refresher, still running, writes the spec.
    fs::remove_file(&spec).expect("remove the FIFO");
    let start = Instant::now();
    while !fs::symlink_metadata(&spec).is_ok_and(|m| m.is_file())
        || !fs::read_to_string(&spec).is_ok_and(|t| t.contains("devinject.io/kvm"))
    {
        watcher.assert_running("the spec is written once the FIFO is gone");
        assert!(start.elapsed() < BOUND, "no spec within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What can be put into the profiles directory under a profile's name.
const PROFILE_PLANTS: [(&str, Planted); 3] = [
    ("x.toml", Planted::Fifo),
    ("x.toml", Planted::CharDevice),
    // An administrator's (relative) link is followed: what it leads to is checked.
    ("y.toml", Planted::LinkInside),
];

#[test]
fn a_fifo_or_device_named_like_a_profile_is_refused_unopened() {
    if !require_root() {
        return;
    }
    let mut problems = Vec::new();
    for (name, what) in PROFILE_PLANTS {
        for root in [Root::Prefix, Root::Host] {
            let case = format!("cdi generate: {what:?} at profiles/{name}, {root:?}");
            let host = Host::new();
            let host_name = format!("/etc/devinject/profiles/{name}");
            let shown = host.root().join(host_name.trim_start_matches('/'));
            // The link leads to a FIFO beside the canary.
            let expected = if what == Planted::LinkInside {
                nix::unistd::mkfifo(
                    &host.root().join("etc/fifo"),
                    NixMode::from_bits_truncate(0o644),
                )
                .expect("mkfifo");
                symlink("../../fifo", &shown).expect("symlink");
                format!("{} is a FIFO", shown.display())
            } else {
                host.plant(root, &host_name, what);
                format!("{} {}", shown.display(), what.what())
            };
            let outcome = run_cdi(&host, root);
            match &outcome {
                Err(e) if e.contains(&expected) && e.contains("profiles directory") => {}
                other => problems.push(format!(
                    "{case}: expected an error saying {expected:?}, got {other:?}"
                )),
            }
            if fs::read_to_string(host.root().join("etc/canary"))
                .ok()
                .as_deref()
                != Some(CANARY)
            {
                problems.push(format!("{case}: the canary changed"));
            }
            if host.root().join(SPEC.trim_start_matches('/')).exists() {
                problems.push(format!("{case}: a spec was written"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_cdi_refresher_reports_a_fifo_named_like_a_profile_and_keeps_running() {
    if !require_root() {
        return;
    }
    let host = Host::new();
    let fifo = host.root().join("etc/devinject/profiles/x.toml");
    host.plant(
        Root::Prefix,
        "/etc/devinject/profiles/x.toml",
        Planted::Fifo,
    );
    let mut watcher = Watcher::start(host.root());
    let reported = format!("{} is a FIFO", fifo.display());
    watcher.wait("the FIFO is reported", |err| err.contains(&reported));
    // The watcher's own look at the profiles names it too, not only the refresh.
    watcher.wait("the watcher says the profile is not watched", |err| {
        err.contains("profile not loaded") && err.contains(&fifo.display().to_string())
    });
    let spec = host.root().join(SPEC.trim_start_matches('/'));
    assert!(
        !spec.exists(),
        "a spec was written beside a refused profile"
    );

    // Gone: the refresher, still running, writes the spec.
    fs::remove_file(&fifo).expect("remove the FIFO");
    let start = Instant::now();
    while !fs::read_to_string(&spec).is_ok_and(|t| t.contains("devinject.io/kvm")) {
        watcher.assert_running("the spec is written once the FIFO is gone");
        assert!(start.elapsed() < BOUND, "no spec within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
