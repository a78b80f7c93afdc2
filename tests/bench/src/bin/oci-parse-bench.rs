//! `oci-parse-bench`: what reading `config.json` costs the hook and the shim with devinject's
//! own partial spec type (`devinject_oci::oci::Spec`) against the maintained `oci-spec` crate's
//! full one, and which of the specs that runtimes write today each of them accepts.
//!
//! The figures decide the choice recorded in bins/oci/src/oci.rs (docs/benchmarks.md, section 12).
//! Needs no root and no runtime: the specs are made here, shaped as docker writes them for a
//! container without devices and for one with devices and driver libraries.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use devinject_bench::stats::Samples;
use serde_json::{json, Value};

/// Benchmark: parsing `config.json` with devinject's partial spec type against `oci-spec`'s.
///
/// Prints a Markdown table on stdout (docs/benchmarks.md, section 12): the median time of one
/// parse for each spec shape, and whether each parser accepts specs carrying names newer than
/// the parser (a capability, a namespace, a seccomp action).
#[derive(Parser, Debug)]
#[command(name = "oci-parse-bench", version)]
struct Cli {
    /// Timed samples per figure; each sample is the mean of `--batch` parses.
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// Parses per sample.
    #[arg(long, default_value_t = 50)]
    batch: usize,
}

/// One spec shape, as bytes.
struct Shape {
    name: String,
    bytes: Vec<u8>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let samples = cli.samples.max(1);
    let batch = cli.batch.max(1);
    let shapes = [
        Shape {
            name: "docker, no devices or libraries".into(),
            bytes: to_bytes(&spec(0, 0)),
        },
        Shape {
            name: "docker, 8 devices + 64 libraries".into(),
            bytes: to_bytes(&spec(8, 64)),
        },
        Shape {
            name: "docker, 32 devices + 256 libraries".into(),
            bytes: to_bytes(&spec(32, 256)),
        },
    ];
    println!("| spec | bytes | devinject `Spec` µs | `oci-spec` µs | ratio |");
    println!("|---|---|---|---|---|");
    for shape in &shapes {
        let ours = time_parse(samples, batch, || {
            devinject_oci::oci::Spec::parse(black_box(&shape.bytes), "config.json").is_ok()
        });
        let theirs = time_parse(samples, batch, || {
            serde_json::from_slice::<oci_spec::runtime::Spec>(black_box(&shape.bytes)).is_ok()
        });
        let (Some(ours), Some(theirs)) = (ours, theirs) else {
            eprintln!("oci-parse-bench: a parser rejected {}", shape.name);
            return ExitCode::from(1);
        };
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.2} |",
            shape.name,
            shape.bytes.len(),
            ours,
            theirs,
            theirs / ours
        );
    }
    println!();
    println!("| spec carrying a name newer than the parser | devinject `Spec` | `oci-spec` |");
    println!("|---|---|---|");
    for (what, newer) in newer_names() {
        let bytes = to_bytes(&newer);
        let ours = devinject_oci::oci::Spec::parse(&bytes, "config.json").err();
        let theirs = serde_json::from_slice::<oci_spec::runtime::Spec>(&bytes).err();
        println!("| {what} | {} | {} |", verdict(ours), verdict(theirs));
    }
    ExitCode::SUCCESS
}

/// The median over `samples` of the mean time of `batch` calls of `parse`, in µs; `None` when
/// a call failed.
fn time_parse(samples: usize, batch: usize, parse: impl Fn() -> bool) -> Option<f64> {
    let mut times = Samples::default();
    for _ in 0..samples {
        let start = Instant::now();
        for _ in 0..batch {
            if !parse() {
                return None;
            }
        }
        let per_parse = start.elapsed().as_nanos() / batch as u128;
        times.push(Duration::from_nanos(
            u64::try_from(per_parse).unwrap_or(u64::MAX),
        ));
    }
    Some(times.median().as_secs_f64() * 1e6)
}

fn verdict(error: Option<impl std::fmt::Display>) -> String {
    match error {
        None => "accepted".into(),
        Some(e) => format!("rejected: {}", e.to_string().replace('|', "\\|")),
    }
}

fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(v).expect("a JSON value serializes")
}

/// A `config.json` as docker writes it for a container given `devices` device nodes and
/// `libraries` read-only bind mounts.
fn spec(devices: usize, libraries: usize) -> Value {
    let caps = [
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_FSETID",
        "CAP_FOWNER",
        "CAP_MKNOD",
        "CAP_NET_RAW",
        "CAP_SETGID",
        "CAP_SETUID",
        "CAP_SETFCAP",
        "CAP_SETPCAP",
        "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT",
        "CAP_KILL",
        "CAP_AUDIT_WRITE",
    ];
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
    ];
    mounts.extend((0..libraries).map(|i| {
        json!({
            "destination": format!("/usr/lib/x86_64-linux-gnu/libdemo{i}.so.1"),
            "type": "bind",
            "source": format!("/usr/lib/x86_64-linux-gnu/libdemo{i}.so.1"),
            "options": ["rbind", "ro", "rprivate"]
        })
    }));
    let nodes: Vec<Value> = (0..devices)
        .map(|i| {
            json!({"path": format!("/dev/demo{i}"), "type": "c", "major": 240, "minor": i,
                   "fileMode": 8630, "uid": 0, "gid": 0})
        })
        .collect();
    let mut rules = vec![json!({"allow": false, "access": "rwm"})];
    rules.extend(
        (0..devices).map(
            |i| json!({"allow": true, "type": "c", "major": 240, "minor": i, "access": "rwm"}),
        ),
    );
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0, "additionalGids": [0, 1, 2, 3, 4, 6, 10, 11, 20, 26, 27]},
            "args": ["/bin/sh", "-c", "true"],
            "env": (0..24).map(|i| format!("VAR_{i}=value-{i}")).chain(
                ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
                 "HOSTNAME=0123456789ab".to_owned(),
                 "DEMO_VISIBLE_DEVICES=all".to_owned()]).collect::<Vec<_>>(),
            "cwd": "/",
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576, "soft": 1048576}],
            "apparmorProfile": "docker-default",
            "oomScoreAdj": 0
        },
        "root": {"path": "/var/lib/docker/overlay2/0123456789abcdef/merged"},
        "hostname": "0123456789ab",
        "mounts": mounts,
        "hooks": {"createRuntime": [{"path": "/usr/bin/devinject-hook", "args": ["devinject-hook"]}]},
        "annotations": {"org.opencontainers.image.stopSignal": "SIGTERM", "io.devinject.demo": "0,1"},
        "linux": {
            "sysctl": {"net.ipv4.ip_unprivileged_port_start": "0"},
            "resources": {"devices": rules, "memory": {}, "cpu": {"shares": 0}, "blockIO": {}},
            "cgroupsPath": "/docker/0123456789abcdef",
            "namespaces": [{"type": "mount"}, {"type": "network"}, {"type": "uts"}, {"type": "pid"}, {"type": "ipc"}, {"type": "cgroup"}],
            "devices": nodes,
            "maskedPaths": ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
        }
    })
}

/// Specs carrying names a runtime newer than the parser can write: the runtime passes through
/// what the user or the engine asked for, whether or not the parser knows it.
fn newer_names() -> Vec<(&'static str, Value)> {
    let with = |pointer: &str, value: Value| {
        let mut v = spec(1, 1);
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer has a parent");
        v.pointer_mut(parent)
            .and_then(Value::as_object_mut)
            .expect("the base spec has the parent object")
            .insert(key.to_owned(), value);
        v
    };
    vec![
        (
            "a capability added after the parser (`CAP_NEW_41`)",
            with(
                "/process/capabilities/bounding",
                json!(["CAP_CHOWN", "CAP_NEW_41"]),
            ),
        ),
        (
            "a namespace type added after the parser (`newns`)",
            with(
                "/linux/namespaces",
                json!([{"type": "mount"}, {"type": "newns"}]),
            ),
        ),
        (
            "an rlimit the parser does not list (`RLIMIT_NEW`)",
            with(
                "/process/rlimits",
                json!([{"type": "RLIMIT_NEW", "hard": 1, "soft": 1}]),
            ),
        ),
        (
            "a seccomp action added after the parser (`SCMP_ACT_NEW`)",
            with(
                "/linux/seccomp",
                json!({"defaultAction": "SCMP_ACT_NEW", "syscalls": []}),
            ),
        ),
    ]
}
