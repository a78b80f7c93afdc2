//! What someone else puts at one of the installer's own names on the host (the step journal, a
//! journal backup, the install record, an installed binary) is neither followed, opened, replaced
//! nor removed.
//!
//! Each case plants one object at one name of a fake host: a symlink to a canary outside the
//! host tree, a FIFO, a character device (`/dev/null`'s numbers) and a hard link to a canary
//! inside the tree; then runs the installer (or the uninstaller), which must end within a bound,
//! leave both canaries byte-identical and the planted object as it was, and fail naming the
//! path and what is there.
//!
//! Needs root (mknod); skipped otherwise (fails under `CI=true`).

use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use crate::support::FakeHost;
use devinject_installer::activate::Recorder;
use devinject_installer::options::Policy;
use devinject_installer::{install, uninstall, EngineChoice, InstallOptions, UninstallOptions};
use devinject_testkit::require_root;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};

/// Longer than any run that does not block.
const BOUND: Duration = Duration::from_secs(30);
const CANARY: &str = "canary: must stay byte-identical\n";
const GOLDEN: &str = "containerd-2.x-v3-default";

/// What is planted at the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planted {
    LinkToCanary,
    Fifo,
    CharDevice,
    HardLink,
}

const PLANTED: [Planted; 4] = [
    Planted::LinkToCanary,
    Planted::Fifo,
    Planted::CharDevice,
    Planted::HardLink,
];

impl Planted {
    /// The words the error uses for it.
    fn what(self) -> &'static str {
        match self {
            Planted::LinkToCanary => "is a symbolic link",
            Planted::Fifo => "is a FIFO",
            Planted::CharDevice => "is a character device",
            Planted::HardLink => "is a hard link",
        }
    }
}

/// A fake host with a canary inside its tree and one outside it.
struct Host {
    fake: FakeHost,
    outside: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        let fake = FakeHost::new(Some(GOLDEN));
        fake.write("/etc/canary", CANARY);
        let outside = tempfile::tempdir().expect("tempdir");
        fs::write(outside.path().join("canary"), CANARY).expect("canary");
        Host { fake, outside }
    }

    fn plant(&self, host: &str, what: Planted) {
        let at = self.fake.path(host);
        fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        match what {
            Planted::LinkToCanary => {
                symlink(self.outside.path().join("canary"), &at).expect("symlink")
            }
            Planted::Fifo => {
                nix::unistd::mkfifo(&at, Mode::from_bits_truncate(0o644)).expect("mkfifo")
            }
            Planted::CharDevice => mknod(
                &at,
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o666),
                makedev(1, 3),
            )
            .expect("mknod"),
            Planted::HardLink => fs::hard_link(self.fake.path("/etc/canary"), &at).expect("link"),
        }
    }

    fn canary_inode(&self) -> u64 {
        fs::metadata(self.fake.path("/etc/canary"))
            .expect("canary")
            .ino()
    }

    /// What went wrong for `case`: a canary changed, or `host` no longer holds what was planted.
    fn damage(&self, host: &str, what: Planted, case: &str) -> Vec<String> {
        let mut problems = Vec::new();
        for canary in [
            self.fake.path("/etc/canary"),
            self.outside.path().join("canary"),
        ] {
            match fs::read_to_string(&canary) {
                Ok(text) if text == CANARY => {}
                other => problems.push(format!("{case}: {} changed: {other:?}", canary.display())),
            }
        }
        let at = self.fake.path(host);
        let kept = fs::symlink_metadata(&at).is_ok_and(|meta| match what {
            Planted::LinkToCanary => meta.file_type().is_symlink(),
            Planted::Fifo => meta.file_type().is_fifo(),
            Planted::CharDevice => {
                meta.file_type().is_char_device() && meta.rdev() == makedev(1, 3)
            }
            // Still one of the canary's names.
            Planted::HardLink => {
                meta.is_file() && meta.ino() == self.canary_inode() && meta.nlink() >= 2
            }
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

fn install_options(h: &FakeHost) -> InstallOptions {
    let mut o = InstallOptions::new(&h.root, &h.payload);
    o.engines = EngineChoice::Auto;
    o.host_config.policy = Policy::HookDefault;
    o.layout.proc_root = h.dir.path().join("proc");
    o
}

fn uninstall_options(h: &FakeHost) -> UninstallOptions {
    let mut o = UninstallOptions::new(&h.root);
    o.layout.proc_root = h.dir.path().join("proc");
    o
}

/// Runs `f` on a thread; an error saying so when it does not end within [`BOUND`] (a FIFO
/// opened for reading blocks for ever).
fn bounded(f: impl FnOnce() -> Result<(), String> + Send + 'static) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|_| Err(format!("BLOCKED: still running after {BOUND:?}")))
}

fn run_install(h: &Host) -> Result<(), String> {
    let opts = install_options(&h.fake);
    bounded(move || {
        install(&opts, &mut Recorder::default())
            .map(|_| ())
            .map_err(|f| f.to_string())
    })
}

fn run_uninstall(h: &Host) -> Result<(), String> {
    let opts = uninstall_options(&h.fake);
    bounded(move || {
        uninstall(&opts, &mut Recorder::default())
            .map(|_| ())
            .map_err(|f| f.to_string())
    })
}

/// Installs once, so that the record exists and an uninstall has work to do.
fn installed(h: &Host) {
    run_install(h).unwrap_or_else(|e| panic!("the first install: {e}"));
}

/// One case: the names planted at, what is run, and what happens first.
struct Case {
    names: &'static [&'static str],
    /// Before planting: `true` installs first.
    install_first: bool,
    run: fn(&Host) -> Result<(), String>,
    run_name: &'static str,
}

const STATE: &str = "/opt/devinject/.installer";

const CASES: [Case; 6] = [
    Case {
        names: &["/opt/devinject/.installer/journal.json"],
        install_first: false,
        run: run_install,
        run_name: "install",
    },
    Case {
        names: &["/opt/devinject/.installer/record.json"],
        install_first: false,
        run: run_install,
        run_name: "install",
    },
    Case {
        names: &["/opt/devinject/.installer/record.json"],
        install_first: true,
        run: run_uninstall,
        run_name: "uninstall",
    },
    // The backups a step saves (named by their place in the step's journal): the steps that
    // change a file that existed before the install write some of them.
    Case {
        names: &[
            "/opt/devinject/.installer/journal/0",
            "/opt/devinject/.installer/journal/1",
            "/opt/devinject/.installer/journal/2",
            "/opt/devinject/.installer/journal/3",
            "/opt/devinject/.installer/journal/4",
            "/opt/devinject/.installer/journal/5",
        ],
        install_first: false,
        run: run_install,
        run_name: "install",
    },
    Case {
        names: &["/opt/devinject/bin/devinject-hook"],
        install_first: false,
        run: run_install,
        run_name: "install",
    },
    Case {
        names: &["/opt/devinject/bin/devinject-hook"],
        install_first: true,
        run: run_uninstall,
        run_name: "uninstall",
    },
];

#[test]
fn nothing_at_the_installers_own_names_is_followed_opened_or_replaced() {
    if !require_root() {
        return;
    }
    let mut problems = Vec::new();
    for case in &CASES {
        for what in PLANTED {
            let label = format!("{}: {what:?} at {}", case.run_name, case.names.join(", "));
            let host = Host::new();
            if case.install_first {
                installed(&host);
            }
            for name in case.names {
                if case.install_first {
                    // The installed file (or the record) makes way for what is planted.
                    fs::remove_file(host.fake.path(name)).expect("remove");
                }
                host.plant(name, what);
            }
            let outcome = (case.run)(&host);
            for name in case.names {
                problems.extend(host.damage(name, what, &label));
            }
            let expected: Vec<String> = case
                .names
                .iter()
                .map(|name| format!("{} {}", host.fake.path(name).display(), what.what()))
                .collect();
            match &outcome {
                Err(e) if expected.iter().any(|x| e.contains(x)) && e.contains("remove it") => {}
                other => problems.push(format!(
                    "{label}: expected an error saying {expected:?}, got {other:?}"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The journal's backups go with the journal only as files it wrote: a FIFO left in the
/// backup directory is neither opened nor deleted by a later step's commit.
#[test]
fn a_fifo_in_the_journals_backup_directory_is_left_alone() {
    if !require_root() {
        return;
    }
    let host = Host::new();
    let at: PathBuf = host.fake.path(&format!("{STATE}/journal/stray"));
    fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
    nix::unistd::mkfifo(&at, Mode::from_bits_truncate(0o644)).expect("mkfifo");
    let outcome = run_install(&host);
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_fifo()),
        "{} was removed",
        at.display()
    );
    assert!(Path::new(&host.fake.path("/opt/devinject/bin/devinject-hook")).is_file());
}
