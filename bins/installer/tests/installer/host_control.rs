//! The real [`System`] host control, as root:
//! - a command run "in the host" really runs in pid 1's namespaces (here: a process the test
//!   starts in new UTS and mount namespaces stands in for the host's pid 1);
//! - `--restart-mode signal` restarts a real containerd: the installer configures it, sends
//!   SIGTERM, and waits until a new containerd (started again by a supervisor loop, as systemd's
//!   `Restart=always` would) answers on the socket, with the new configuration loaded.
//!
//! Needs root, unshare, containerd and ctr; skipped with a reason otherwise (a failure under
//! `CI=true`).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::FakeHost;
use devinject_engine_config::Engine;
use devinject_installer::activate::{HostControl, System};
use devinject_installer::options::Policy;
use devinject_installer::{install, uninstall, EngineChoice, InstallOptions, RestartMode};
use devinject_tests::skip;

/// Kills and reaps a child on drop.
/// A child leading its own process group, killed with the whole group on drop: the supervisor
/// loop's containerd must not outlive the test.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn commands_run_in_the_namespaces_of_pid_1() {
    if !skip::require_root() || !skip::require_binary("unshare") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("marker");
    std::fs::create_dir_all(&marker).expect("mkdir");
    // The stand-in for the host's pid 1: its own hostname, and a tmpfs at `marker` with a file.
    let script = format!(
        "hostname devinject-ns-test && mount -t tmpfs tmpfs {m} && echo inside > {m}/seen && \
         touch {m}/ready && exec sleep 600",
        m = marker.display()
    );
    let child = Command::new("unshare")
        .args([
            "-u",
            "-m",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare");
    let pid = child.id();
    let _child = Reaped(child);
    let probe = Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(marker.join("ready").strip_prefix("/").expect("absolute"));
    wait_until("the namespaces to be set up", || probe.exists());
    // A proc root whose "1" is that process.
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(&proc_root).expect("mkdir");
    std::os::unix::fs::symlink(format!("/proc/{pid}"), proc_root.join("1")).expect("symlink");
    let system = System {
        proc_root: proc_root.clone(),
    };
    let out = system
        .run_in_host(Path::new("/bin/hostname"), &[])
        .expect("run hostname");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "devinject-ns-test"
    );
    let out = system
        .run_in_host(
            Path::new("/bin/cat"),
            &[marker.join("seen").to_str().expect("utf-8")],
        )
        .expect("run cat");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "inside");
    // This process is untouched: not its hostname, not its mounts.
    assert!(!marker.join("seen").exists());
    let mut s = system;
    // Signals and socket owners with the real calls.
    assert_eq!(s.socket_owner(&dir.path().join("nothing.sock")), None);
}

#[test]
fn signal_mode_restarts_a_real_containerd_with_the_new_configuration() {
    if !skip::require_root() {
        return;
    }
    for bin in ["containerd", "ctr", "sh"] {
        if !skip::require_binary(bin) {
            return;
        }
    }
    // The host root is `/`, as on a node, with every devinject and containerd path moved into a
    // temp dir by options: the containerd that runs reads the paths written into its
    // configuration, so they must be real.
    let h = FakeHost::new(None);
    let dir = tempfile::Builder::new()
        .prefix("dic")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let d = dir.path();
    let socket = d.join("c.sock");
    let config = format!(
        "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n\
         disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\n[grpc]\n  address = \"{s}\"\n\n\
         [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{d}/opt\"\n\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n",
        d = d.display(),
        s = socket.display()
    );
    let config_path = d.join("etc/containerd/config.toml");
    std::fs::create_dir_all(config_path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&config_path, &config).expect("write");
    // The supervisor: start containerd again whenever it exits, as containerd.service's
    // Restart=always does.
    let log = d.join("containerd.log");
    let supervisor = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while true; do containerd --config {} >>{} 2>&1; done",
            config_path.display(),
            log.display()
        ))
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("supervisor");
    let _supervisor = Reaped(supervisor);
    let answers = || {
        Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    wait_until("containerd to answer", answers);
    let mut ctl = System {
        proc_root: "/proc".into(),
    };
    let first = ctl.socket_owner(&socket).expect("containerd's pid");

    let mut opts = InstallOptions::new("/", &h.payload);
    opts.engines = EngineChoice::These(vec![Engine::Containerd]);
    opts.restart = RestartMode::Signal;
    opts.host_config.policy = Policy::HookDefault;
    opts.layout.proc_root = h.dir.path().join("proc");
    opts.layout.prefix = d.join("opt/devinject");
    opts.layout.config_dir = d.join("etc/devinject");
    opts.layout.engine_config = Some(config_path.clone());
    opts.layout.engine_socket = Some(socket.clone());
    let report = install(&opts, &mut ctl).unwrap_or_else(|f| {
        panic!(
            "{f}\n--- containerd log\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let text = report.to_string();
    assert!(
        text.contains(&format!("SIGTERM to containerd (pid {first})")),
        "{text}"
    );
    // Answering again, as a new process that read the new configuration (a containerd that
    // cannot parse its configuration does not start at all).
    assert!(answers());
    let second = ctl.socket_owner(&socket).expect("new pid");
    assert_ne!(first, second);
    // What it loaded: the main file imports devinject's drop-in, which holds the runtime.
    let dump = Command::new("containerd")
        .arg("--config")
        .arg(&config_path)
        .args(["config", "dump"])
        .output()
        .expect("config dump");
    let dump = String::from_utf8_lossy(&dump.stdout);
    let dropin = d.join("etc/containerd/conf.d/99-devinject.toml");
    assert!(dump.contains(&dropin.display().to_string()), "{dump}");
    let shim = d.join("opt/devinject/bin/devinject-runtime");
    assert!(std::fs::read_to_string(&dropin)
        .expect("drop-in")
        .contains(&format!("BinaryName = \"{}\"", shim.display())),);

    // Uninstall restarts it again, with the original file.
    let mut un = devinject_installer::UninstallOptions::new("/");
    un.restart = RestartMode::Signal;
    un.layout = opts.layout.clone();
    uninstall(&un, &mut ctl).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(std::fs::read_to_string(&config_path).expect("read"), config);
    assert!(answers());
    assert_ne!(ctl.socket_owner(&socket), Some(second));
}
