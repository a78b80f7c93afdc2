//! A profile's prepare step (docs/prepare.md) on the real runc, through the hook and the shim: a
//! simulated FPGA whose prepare program "programs" a port by writing the function's id into a
//! sysfs-like file, which the container reads when it starts.
//!
//! - The program runs once per granted port, before the container's process, with exactly the
//!   documented environment (nothing of the container's or the runtime's); ungranted ports are
//!   untouched.
//! - A function the profile does not list, a function without the profile's devices, a program
//!   that fails and one that outlives its deadline each fail the start with devinject's message,
//!   and the container's process never runs; so does a function named differently by the
//!   annotation and the variable, and a huge function value is refused in a short message.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use devinject_devices::prepare_step::PREPARE_PATH;
use devinject_tests::runc::{container_id, describe, hook_failure, Bundle, Via};
use devinject_tests::sim::{demo_host, mknod, SimHost};
use devinject_tests::skip::require_runc_demo;
use serde_json::json;

/// The ports: name, major, minor (numbers that open without side effects).
const PORTS: [(&str, u32, u32); 3] = [("port0", 10, 237), ("port1", 10, 234), ("port2", 10, 235)];

/// What the container's process leaves when it runs.
const RAN: &str = "the container process ran";

/// A demo host with an `fpga-sim` profile: ports under `dev/fpga-sim`, a prepare program that
/// writes `sys/class/fpga-sim/portN/{env,function}` (failing for `broken`, hanging for `slow`;
/// leaving a detached sleeper for `detached`, and one holding its output as it hangs for `stuck`).
fn fpga_host(dir: &Path) -> (SimHost, PathBuf) {
    let host = demo_host(&dir.join("host"), &["demo"]).unwrap();
    let ports = host.dev_root.join("fpga-sim");
    std::fs::create_dir_all(&ports).unwrap();
    for (name, major, minor) in PORTS {
        mknod(&ports.join(name), major, minor, "0666").unwrap();
    }
    let sys = host.dir.join("sys/class/fpga-sim");
    std::fs::create_dir_all(&sys).unwrap();
    let program = host.dir.join("fpga-program");
    std::fs::write(
        &program,
        r#"#!/bin/sh
set -e
out="$1/port$DEVINJECT_DEVICE"
mkdir -p "$out"
/usr/bin/env | /bin/grep -v '^PWD=' | /usr/bin/sort > "$out/env"
case "$DEVINJECT_FUNCTION" in
  broken) echo "bitstream broken does not fit port$DEVINJECT_DEVICE" >&2; exit 3 ;;
  slow) exec /bin/sleep 30 ;;
  detached) setsid "$1/sleeper" 300 </dev/null >/dev/null 2>&1 & ;;
  stuck) setsid "$1/sleeper" 300 & exec /bin/sleep 30 ;;
esac
printf '%s' "$DEVINJECT_FUNCTION" > "$out/function"
"#,
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    // What `detached` and `stuck` leave behind: every process running it names the host's
    // directory in its command line.
    std::os::unix::fs::symlink("/bin/sleep", sys.join("sleeper")).unwrap();
    std::fs::write(
        host.profiles_dir.join("fpga-sim.toml"),
        format!(
            r#"name = "fpga-sim"
resource = "devinject.io/fpga-sim"
[discovery]
nodes = ["fpga-sim/port[0-9]*"]
[prepare]
command = ["{}", "{}"]
timeout_ms = 1500
[[prepare.functions]]
id = "nlb0"
[[prepare.functions]]
id = "nlb3"
resource = "devinject.io/fpga-sim-nlb3"
[[prepare.functions]]
id = "broken"
[[prepare.functions]]
id = "slow"
[[prepare.functions]]
id = "detached"
[[prepare.functions]]
id = "stuck"
"#,
            program.display(),
            sys.display()
        ),
    )
    .unwrap();
    (host, sys)
}

/// A bundle whose process prints the functions of ports 0 to 2 as it finds them at its start
/// (`-` for none), with `env` set, the sysfs-like directory bound read-only at `/sys-fpga`.
fn bundle(dir: &Path, sys: &Path, env: &[&str]) -> Bundle {
    let script = format!(
        "echo '{RAN}'; for p in 0 1 2; do cat /sys-fpga/port$p/function 2>/dev/null || printf -; echo; done"
    );
    let mut b = Bundle::new(&dir.join("bundle"), &["/bin/sh", "-c", &script]).unwrap();
    for e in env {
        b.env(e);
    }
    b.env("SECRET_OF_THE_CONTAINER=1");
    b.spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/sys-fpga",
        "type": "bind",
        "source": sys,
        "options": ["rbind", "ro"],
    }));
    b
}

const BOTH: [Via; 2] = [Via::Hook, Via::Shim];

/// One run: its temp dir (bind it, as `_t`, to keep the files), the host, its sysfs-like
/// directory, runc's output.
struct Ran {
    _t: tempfile::TempDir,
    host: SimHost,
    sys: PathBuf,
    out: std::process::Output,
}

/// Runs `env`'s container through `via` on a fresh FPGA host.
fn run(via: Via, env: &[&str], tag: &str) -> Ran {
    let t = tempfile::tempdir().unwrap();
    let (host, sys) = fpga_host(t.path());
    let mut b = bundle(t.path(), &sys, env);
    let out = b.run_via(via, &host.config, &container_id(tag)).unwrap();
    Ran {
        _t: t,
        host,
        sys,
        out,
    }
}

/// How a failed start ended: the exit code of the hook or the shim, and devinject's line.
fn refusal(via: Via, out: &std::process::Output) -> (Option<i32>, Option<String>) {
    match via {
        Via::Hook => {
            let failure = hook_failure(out).expect("the hook must fail");
            (Some(failure.code), failure.line("devinject: "))
        }
        Via::Shim => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = stderr
                .lines()
                .find(|l| l.starts_with("devinject"))
                .map(str::to_owned);
            (out.status.code(), line)
        }
    }
}

/// The ports' function files, `-` where there is none.
fn programmed(sys: &Path) -> Vec<String> {
    (0..3)
        .map(|p| {
            std::fs::read_to_string(sys.join(format!("port{p}/function")))
                .unwrap_or_else(|_| "-".into())
        })
        .collect()
}

#[test]
fn granted_ports_are_programmed_before_the_container_starts() {
    if !require_runc_demo() {
        return;
    }
    for via in BOTH {
        let Ran { _t, host, sys, out } = run(
            via,
            &["FPGA_SIM_VISIBLE_DEVICES=0,2", "FPGA_SIM_FUNCTION=nlb3"],
            "prepare-ok",
        );
        let ctx = format!("{via:?}\n{}", describe(&out));
        assert!(out.status.success(), "{ctx}");
        // What the container saw at its start: the function on ports 0 and 2 only.
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.lines().collect::<Vec<_>>(),
            [RAN, "nlb3", "-", "nlb3"],
            "{ctx}"
        );
        assert_eq!(programmed(&sys), ["nlb3", "-", "nlb3"], "{ctx}");
        // Exactly the documented environment.
        let env = std::fs::read_to_string(sys.join("port2/env")).unwrap();
        assert_eq!(
            env.lines().collect::<Vec<_>>(),
            [
                "DEVINJECT_DEVICE=2".to_owned(),
                format!(
                    "DEVINJECT_DEVICE_NODES={}",
                    host.dev_root.join("fpga-sim/port2").display()
                ),
                "DEVINJECT_FUNCTION=nlb3".into(),
                "DEVINJECT_PROFILE=fpga-sim".into(),
                format!("PATH={PREPARE_PATH}"),
            ],
            "{ctx}"
        );
    }
}

#[test]
fn without_a_function_the_program_still_runs_for_each_port() {
    if !require_runc_demo() {
        return;
    }
    for via in BOTH {
        let Ran { _t, sys, out, .. } = run(via, &["FPGA_SIM_VISIBLE_DEVICES=1"], "prepare-plain");
        let ctx = format!("{via:?}\n{}", describe(&out));
        assert!(out.status.success(), "{ctx}");
        let env = std::fs::read_to_string(sys.join("port1/env")).unwrap();
        assert!(env.contains("DEVINJECT_DEVICE=1\n"), "{env}\n{ctx}");
        assert!(!env.contains("DEVINJECT_FUNCTION"), "{env}\n{ctx}");
        assert!(
            !sys.join("port0").exists() && !sys.join("port2").exists(),
            "{ctx}"
        );
    }
}

#[test]
fn bad_functions_and_failing_programs_fail_the_start() {
    if !require_runc_demo() {
        return;
    }
    // The request's environment, devinject's message, its exit code (docs/hook.md), the case.
    let cases: [(&[&str], &str, i32, &str); 4] = [
        (
            &["FPGA_SIM_VISIBLE_DEVICES=0", "FPGA_SIM_FUNCTION=nlb9"],
            "profile fpga-sim has no function \"nlb9\" (from env FPGA_SIM_FUNCTION): use one of nlb0, nlb3, broken, slow, detached, stuck",
            5,
            "unknown",
        ),
        (
            &["DEMO_VISIBLE_DEVICES=0", "FPGA_SIM_FUNCTION=nlb0"],
            "env FPGA_SIM_FUNCTION asks for function \"nlb0\" of profile fpga-sim, but the container gets no fpga-sim device",
            5,
            "no devices",
        ),
        (
            &["FPGA_SIM_VISIBLE_DEVICES=2", "FPGA_SIM_FUNCTION=broken"],
            "of profile fpga-sim for device 2 (function broken) failed (exit code 3): bitstream broken does not fit port2",
            10,
            "failing",
        ),
        (
            &["FPGA_SIM_VISIBLE_DEVICES=0", "FPGA_SIM_FUNCTION=slow"],
            "of profile fpga-sim for device 0 (function slow): it did not finish within 1500 ms and was killed",
            10,
            "slow",
        ),
    ];
    for via in BOTH {
        for (env, message, code, what) in cases {
            let Ran { _t, sys, out, .. } = run(via, env, "prepare-bad");
            let ctx = format!("{via:?}, {what}\n{}", describe(&out));
            let (got_code, said) = refusal(via, &out);
            assert_eq!(got_code, Some(code), "{ctx}");
            assert!(
                said.as_deref().unwrap_or_default().contains(message),
                "{said:?}\n{ctx}"
            );
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains(RAN),
                "the container's process must not run\n{ctx}"
            );
            assert_eq!(programmed(&sys), ["-", "-", "-"], "{ctx}");
        }
    }
}

/// With the function in both the annotation and the variable, the device would get the annotation's
/// and the process see the variable's. Both set and different fail the start naming both, before
/// anything is programmed; both set to the same function start.
#[test]
fn an_annotation_and_a_variable_naming_different_functions_fail_the_start() {
    if !require_runc_demo() {
        return;
    }
    for via in BOTH {
        for (variable, fails) in [("nlb0", true), ("nlb3", false)] {
            let t = tempfile::tempdir().unwrap();
            let (host, sys) = fpga_host(t.path());
            let function_env = format!("FPGA_SIM_FUNCTION={variable}");
            let mut b = bundle(
                t.path(),
                &sys,
                &["FPGA_SIM_VISIBLE_DEVICES=0", function_env.as_str()],
            );
            b.annotation("devinject.io/fpga-sim.function", "nlb3");
            let out = b
                .run_via(via, &host.config, &container_id("prepare-both"))
                .unwrap();
            let ctx = format!("{via:?}, variable {variable}\n{}", describe(&out));
            if !fails {
                assert!(out.status.success(), "{ctx}");
                assert_eq!(programmed(&sys), ["nlb3", "-", "-"], "{ctx}");
                continue;
            }
            let (code, said) = refusal(via, &out);
            assert_eq!(code, Some(5), "{ctx}");
            let said = said.unwrap_or_default();
            assert!(
                said.contains("annotation devinject.io/fpga-sim.function asks for function \"nlb3\" but env FPGA_SIM_FUNCTION for \"nlb0\""),
                "{said}\n{ctx}"
            );
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains(RAN),
                "the container's process must not run\n{ctx}"
            );
            assert_eq!(programmed(&sys), ["-", "-", "-"], "{ctx}");
        }
    }
}

/// A 200 KiB function value is not echoed whole into the refusal that the engine's user reads: it
/// is refused in a few hundred bytes that still name the variable.
#[test]
fn a_huge_function_value_is_refused_in_a_short_message() {
    if !require_runc_demo() {
        return;
    }
    let huge = format!("FPGA_SIM_FUNCTION={}", "n".repeat(200 << 10));
    for via in BOTH {
        let Ran { _t, sys, out, .. } = run(
            via,
            &["FPGA_SIM_VISIBLE_DEVICES=0", huge.as_str()],
            "prepare-huge",
        );
        let (code, said) = refusal(via, &out);
        let said = said.unwrap_or_default();
        let ctx = format!("{via:?}: {} bytes of stderr", out.stderr.len());
        assert_eq!(code, Some(5), "{ctx}");
        assert!(said.len() < 400, "{} bytes: {ctx}", said.len());
        assert!(
            said.contains("has no function \"nnnn")
                && said.contains("(from env FPGA_SIM_FUNCTION)"),
            "{said}\n{ctx}"
        );
        assert!(out.stderr.len() < 4096, "{ctx}");
        assert_eq!(programmed(&sys), ["-", "-", "-"], "{ctx}");
    }
}

/// The host processes whose command line names `marker`, killed (so that a failing test leaves
/// nothing behind), as `pid: command line`.
fn survivors(marker: &Path) -> Vec<String> {
    let found = devinject_testkit::processes::naming(marker.as_os_str().as_encoded_bytes());
    for (pid, _) in &found {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    found
        .into_iter()
        .map(|(pid, cmdline)| format!("{pid}: {cmdline}"))
        .collect()
}

/// Nothing a prepare program starts outlives the start, however it detaches (`setsid`, with or
/// without its output): not when the program exits at once (the start succeeds), not when it hangs
/// and is killed at its deadline (the start fails).
#[test]
fn nothing_a_prepare_program_starts_outlives_the_start() {
    if !require_runc_demo() {
        return;
    }
    for via in BOTH {
        for (function, starts) in [("detached", true), ("stuck", false)] {
            let env = format!("FPGA_SIM_FUNCTION={function}");
            let Ran { _t, host, out, .. } = run(
                via,
                &["FPGA_SIM_VISIBLE_DEVICES=0", &env],
                "prepare-detached",
            );
            let left = survivors(&host.dir);
            let ctx = format!("{via:?}, {function}\n{}", describe(&out));
            assert_eq!(out.status.success(), starts, "{ctx}");
            assert_eq!(left, Vec::<String>::new(), "left on the host\n{ctx}");
        }
    }
}
