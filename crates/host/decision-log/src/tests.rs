//! The log as a whole: recording, rotation, concurrent writers, following and hostile objects
//! planted at its names.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::stat::Mode;

use super::*;

fn decision(container: &str, reason: Reason) -> Decision {
    Decision {
        time_unix_ms: 7,
        path: EnginePath::Hook,
        container: container.into(),
        profiles: vec!["demo".into()],
        reason,
        message: format!("devinject: refused {container}"),
        pod: None,
    }
}

fn containers(ds: &[Decision]) -> Vec<String> {
    ds.iter().map(|d| d.container.clone()).collect()
}

/// A directory made for the log, private as the log wants it.
fn log_dir() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    t
}

#[test]
fn recorded_decisions_come_back_newest_last() {
    let t = log_dir();
    let dir = t.path().join("log");
    assert!(
        last(&dir, 10).unwrap().is_empty(),
        "no directory: nothing yet"
    );
    for i in 0..5 {
        record(&dir, &decision(&format!("c{i}"), Reason::Policy)).unwrap();
    }
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let file = std::fs::metadata(dir.join(LOG_NAME)).unwrap();
    assert_eq!(file.permissions().mode() & 0o777, 0o600);
    assert_eq!(containers(&last(&dir, 3).unwrap()), ["c2", "c3", "c4"]);
    assert_eq!(last(&dir, 10).unwrap()[0], decision("c0", Reason::Policy));
}

#[test]
fn the_log_rotates_and_both_files_stay_bounded() {
    let t = log_dir();
    let dir = t.path();
    let big = "m".repeat(2000);
    let mut n = 0;
    while n < 3 * MAX_LOG_BYTES as usize / 2000 {
        let mut d = decision(&format!("c{n}"), Reason::Request);
        d.message = big.clone();
        record(dir, &d).unwrap();
        n += 1;
    }
    let log = std::fs::metadata(dir.join(LOG_NAME)).unwrap().len();
    let rotated = std::fs::metadata(dir.join(ROTATED_NAME)).unwrap().len();
    assert!(log <= MAX_LOG_BYTES, "{log}");
    assert!(
        rotated <= MAX_LOG_BYTES && rotated > MAX_LOG_BYTES / 2,
        "{rotated}"
    );
    // The newest is last, across both files.
    let tail = last(dir, 1000).unwrap();
    assert_eq!(tail.last().unwrap().container, format!("c{}", n - 1));
    let all = containers(&tail);
    let first: usize = all[0][1..].parse().unwrap();
    let expected: Vec<String> = (first..n).map(|i| format!("c{i}")).collect();
    assert_eq!(all, expected, "a gap or a duplicate across the rotation");
}

/// Lines of writers racing each other, threads and processes alike, are whole: each read back
/// as a decision, none lost, none torn, across rotations.
#[test]
fn concurrent_writers_never_interleave_their_lines() {
    let t = log_dir();
    let dir = t.path().to_owned();
    let writers = 8;
    let each = 400;
    let message = "x".repeat(1500);
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let dir = dir.clone();
            let message = message.clone();
            std::thread::spawn(move || {
                for i in 0..each {
                    let mut d = decision(&format!("w{w}-{i}"), Reason::Inject);
                    d.message = message.clone();
                    record(&dir, &d).unwrap();
                }
            })
        })
        .collect();
    let mut follower = Follower::from_start(&dir);
    let mut seen = Vec::new();
    for h in handles {
        while !h.is_finished() {
            seen.extend(follower.poll().unwrap());
        }
        h.join().unwrap();
    }
    seen.extend(follower.poll().unwrap());
    assert_eq!(follower.malformed(), 0, "a torn line");
    let both = [LOG_NAME, ROTATED_NAME].map(|n| std::fs::read(dir.join(n)).unwrap_or_default());
    for bytes in &both {
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let d = Decision::from_line(line).expect("every line a whole decision");
            assert_eq!(d.message, message);
        }
    }
    // 8 x 400 lines of ~1.6 KiB is 5 MiB: several rotations. The follower, polling meanwhile,
    // saw each decision at most once, in each writer's order.
    let mut per_writer = vec![Vec::new(); writers];
    for d in &seen {
        let (w, i) = d.container[1..].split_once('-').unwrap();
        per_writer[w.parse::<usize>().unwrap()].push(i.parse::<usize>().unwrap());
    }
    for list in &per_writer {
        assert!(
            list.windows(2).all(|p| p[0] < p[1]),
            "out of order or twice"
        );
    }
    assert!(
        seen.len() > writers * each / 2,
        "{} of {}",
        seen.len(),
        writers * each
    );
}

/// The writer a process of [`concurrent_processes_never_interleave_their_lines`] runs: this
/// test binary again, with the directory in [`CHILD_DIR`]; a no-op in a normal run.
#[test]
fn child_process_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let w = std::process::id();
    for i in 0..200 {
        let mut d = decision(&format!("p{w}-{i}"), Reason::Cgroup);
        d.message = "y".repeat(2000);
        record(Path::new(&dir), &d).unwrap();
    }
}

const CHILD_DIR: &str = "DECISION_LOG_TEST_CHILD_DIR";

/// Processes, not only threads: each appends through its own descriptor.
#[test]
fn concurrent_processes_never_interleave_their_lines() {
    let t = log_dir();
    let dir = t.path();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "tests::child_process_writer", "--test-threads=1"])
                .env(CHILD_DIR, dir)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let all = last(dir, usize::MAX).unwrap();
    let lines: usize = [LOG_NAME, ROTATED_NAME]
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap_or_default())
        .map(|b| {
            let lines = b.split(|c| *c == b'\n').filter(|l| !l.is_empty());
            lines
                .inspect(|l| assert!(Decision::from_line(l).is_some(), "a torn line"))
                .count()
        })
        .sum();
    assert_eq!(all.len(), lines);
    assert!(all.len() >= 200, "{}", all.len());
    assert!(all.iter().all(|d| d.message.len() == 2000));
}

/// Something other than a regular file at one of the log's names, or in place of its
/// directory, is refused at once, naming it: nothing followed, nothing opened, no hang.
#[test]
fn objects_planted_at_the_log_names_are_refused_without_hanging() {
    let outside = log_dir();
    let target = outside.path().join("target");
    std::fs::write(&target, "host file\n").unwrap();
    type Plant = fn(&Path, &Path);
    let plants: [(&str, Plant, &str); 4] = [
        (
            "fifo",
            |p, _| nix::unistd::mkfifo(p, Mode::from_bits_truncate(0o600)).unwrap(),
            "is a FIFO",
        ),
        (
            "symlink",
            |p, target| std::os::unix::fs::symlink(target, p).unwrap(),
            "is a symbolic link",
        ),
        (
            "hard link",
            |p, target| std::fs::hard_link(target, p).unwrap(),
            "has 2 links",
        ),
        (
            "directory",
            |p, _| std::fs::create_dir(p).unwrap(),
            "is a directory",
        ),
    ];
    for name in [LOG_NAME, ROTATED_NAME] {
        for (what, plant, expected) in plants {
            let t = log_dir();
            plant(&t.path().join(name), &target);
            let start = Instant::now();
            let mut errors = vec![last(t.path(), 5).unwrap_err().to_string()];
            if name == LOG_NAME {
                errors.push(
                    record(t.path(), &decision("c", Reason::Host))
                        .unwrap_err()
                        .to_string(),
                );
                errors.push(
                    Follower::from_start(t.path())
                        .poll()
                        .unwrap_err()
                        .to_string(),
                );
            }
            assert!(start.elapsed() < Duration::from_secs(5), "{what} hung");
            for e in errors {
                assert!(
                    e.contains(expected) && e.contains(name),
                    "{what} at {name}: {e}"
                );
            }
        }
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "host file\n");
}

#[test]
fn a_directory_that_is_a_link_or_shared_is_refused() {
    let t = log_dir();
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = record(&link, &decision("c", Reason::Host))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a symbolic link"), "{err}");
    assert!(last(&link, 1)
        .unwrap_err()
        .to_string()
        .contains("symbolic link"));
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
    let err = record(&real, &decision("c", Reason::Host))
        .unwrap_err()
        .to_string();
    assert!(err.contains("may be written by others"), "{err}");
    assert!(
        std::fs::read_dir(&real).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    let t = log_dir();
    let dir = t.path();
    record(dir, &decision("a", Reason::Policy)).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(LOG_NAME))
        .unwrap();
    std::io::Write::write_all(&mut f, b"garbage\n{\"half\":\n\xff\xfe\n").unwrap();
    record(dir, &decision("b", Reason::Policy)).unwrap();
    assert_eq!(containers(&last(dir, 10).unwrap()), ["a", "b"]);
    let mut follower = Follower::from_start(dir);
    assert_eq!(containers(&follower.poll().unwrap()), ["a", "b"]);
    assert_eq!(follower.malformed(), 3);
    // A line longer than any decision, with no newline yet, is skipped rather than waited on.
    std::io::Write::write_all(&mut f, &vec![b'z'; 3 * MAX_LINE_BYTES]).unwrap();
    assert!(follower.poll().unwrap().is_empty());
    assert_eq!(follower.malformed(), 4);
}

#[test]
fn the_follower_returns_each_decision_once_across_rotations() {
    let t = log_dir();
    let dir = t.path();
    record(dir, &decision("before", Reason::Policy)).unwrap();
    let mut follower = Follower::new(dir);
    assert!(follower.poll().unwrap().is_empty(), "starts at the end");
    record(dir, &decision("one", Reason::Policy)).unwrap();
    assert_eq!(containers(&follower.poll().unwrap()), ["one"]);
    assert!(follower.poll().unwrap().is_empty());
    // Fill the log until it rotates, with a poll in the middle.
    let mut d = decision("", Reason::Prepare);
    d.message = "p".repeat(2000);
    let per_log = MAX_LOG_BYTES as usize / 2100 + 1;
    let mut seen = Vec::new();
    for i in 0..per_log + 10 {
        d.container = format!("r{i}");
        record(dir, &d).unwrap();
        if i == per_log / 2 {
            seen.extend(follower.poll().unwrap());
        }
    }
    assert!(std::fs::metadata(dir.join(ROTATED_NAME)).is_ok(), "rotated");
    seen.extend(follower.poll().unwrap());
    let expected: Vec<String> = (0..per_log + 10).map(|i| format!("r{i}")).collect();
    assert_eq!(containers(&seen), expected);
    // Two whole rotations between polls: the log in between is read from decisions.log.1.
    for i in 0..2 * per_log + 5 {
        d.container = format!("s{i}");
        record(dir, &d).unwrap();
    }
    assert!(std::fs::metadata(dir.join(LOG_NAME)).unwrap().len() < MAX_LOG_BYTES / 2);
    let expected: Vec<String> = (0..2 * per_log + 5).map(|i| format!("s{i}")).collect();
    assert_eq!(containers(&follower.poll().unwrap()), expected);
    assert_eq!(follower.malformed(), 0);
}

#[test]
fn the_follower_waits_for_a_directory_that_is_not_there_yet() {
    let t = log_dir();
    let dir = t.path().join("later");
    let mut follower = Follower::new(&dir);
    assert!(follower.poll().unwrap().is_empty());
    record(&dir, &decision("first", Reason::Config)).unwrap();
    assert_eq!(containers(&follower.poll().unwrap()), ["first"]);
}

/// The syscall `tid` of this process is blocked in, as `/proc` tells it: its number and its
/// first three arguments; `None` while it runs.
fn blocked_in(tid: i32) -> Option<(u64, [u64; 3])> {
    let text =
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap_or_default();
    let mut fields = text.split_whitespace();
    let nr = fields.next()?.parse().ok()?;
    let mut args = [0; 3];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.strip_prefix("0x")?, 16).ok()?;
    }
    Some((nr, args))
}

#[test]
fn a_watched_log_is_waited_for_with_no_timer() {
    /// Sends the thread's id at each look.
    struct Looks(std::sync::mpsc::Sender<i32>);
    impl watcher::Sink for Looks {
        fn looked(&mut self) {
            let _ = self.0.send(nix::unistd::gettid().as_raw());
        }
        fn read(&mut self, _: Vec<Decision>) {}
    }
    // The kernel's numbers of poll(fds, nfds, timeout) and ppoll(fds, nfds, tsp, ...) on this
    // machine: waiting with no timer is poll's timeout -1 or ppoll's null timespec.
    let (poll_nr, ppoll_nr) = match std::env::consts::ARCH {
        "x86_64" => (Some(7), 271),
        "aarch64" => (None, 73),
        arch => panic!("no syscall numbers for {arch}"),
    };
    let t = log_dir();
    record(t.path(), &decision("first", Reason::Config)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let watcher = watcher::Watcher::spawn(t.path(), Looks(tx)).unwrap();
    let tid = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a first look");
    let deadline = Instant::now() + Duration::from_secs(10);
    let (nr, args) = loop {
        if let Some(call) = blocked_in(tid).filter(|&(nr, _)| Some(nr) == poll_nr || nr == ppoll_nr)
        {
            break call;
        }
        assert!(
            Instant::now() < deadline,
            "the watcher's thread never waited in poll"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let forever = if Some(nr) == poll_nr {
        // An int: the register's low 32 bits.
        args[2] as u32 as i32 == -1
    } else {
        args[2] == 0
    };
    assert!(
        forever,
        "the watcher's thread waits with a timeout: syscall {nr}, arguments {args:x?}"
    );
    // And an event still wakes it.
    record(t.path(), &decision("second", Reason::Config)).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(tid));
    drop(watcher);
}
