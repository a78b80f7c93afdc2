//! `devinject-bounded-runc`: a test fixture between CRI-O and runc on a machine whose
//! capability bounding set lacks capabilities the kernel knows (this one withholds
//! `CAP_SYS_RESOURCE` even from root). CRI-O gives a privileged container every capability the
//! kernel knows (`cap_last_cap`), which runc then cannot grant ("unable to apply caps");
//! containerd gives it those of its own bounding set. On `create` and `run` this does as
//! containerd does, taking from each capability set of the bundle's config.json what the
//! caller's bounding set lacks, and execs the runtime (runc, or crun, which takes the same
//! arguments); nothing else changes.
//!
//! Usage: `devinject-bounded-runc --runtime PATH <runc args...>`

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use devinject_tests::runc_args::creating_bundle;
use serde_json::Value;

/// Capability names by number (`capability.h`), up to `CAP_CHECKPOINT_RESTORE`.
const CAPS: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

fn main() -> ExitCode {
    match run() {
        // `run` only returns on failure: on success it has become the runtime.
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-bounded-runc: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<()> {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.len() < 2 || args[0] != "--runtime" {
        bail!("usage: devinject-bounded-runc --runtime PATH <runc args...>");
    }
    let runtime = PathBuf::from(args.remove(1));
    args.remove(0);
    let strs: Vec<&str> = args.iter().map(|a| a.to_str().unwrap_or("")).collect();
    if let Some(bundle) = creating_bundle(&strs) {
        let status = std::fs::read_to_string("/proc/self/status").context("read status")?;
        bound(&bundle.join("config.json"), &withheld(&status)?)?;
    }
    let err = Command::new(&runtime).args(&args).exec();
    Err(err).with_context(|| format!("exec {}", runtime.display()))
}

/// The `CAP_` names of the capabilities the bounding set in `status` (`/proc/self/status`)
/// lacks.
fn withheld(status: &str) -> Result<Vec<String>> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .context("no CapBnd in /proc/self/status")?;
    let set = u64::from_str_radix(hex.trim(), 16).context("CapBnd")?;
    Ok(CAPS
        .iter()
        .enumerate()
        .filter(|(i, _)| set & (1 << i) == 0)
        .map(|(_, name)| format!("CAP_{name}"))
        .collect())
}

/// Takes `withheld` from every capability set of the spec at `spec_path` (atomically).
fn bound(spec_path: &Path, withheld: &[String]) -> Result<()> {
    if withheld.is_empty() {
        return Ok(());
    }
    let text = std::fs::read(spec_path).with_context(|| format!("read {}", spec_path.display()))?;
    let mut spec: Value =
        serde_json::from_slice(&text).with_context(|| format!("parse {}", spec_path.display()))?;
    if let Some(sets) = spec
        .pointer_mut("/process/capabilities")
        .and_then(Value::as_object_mut)
    {
        for set in sets.values_mut().filter_map(Value::as_array_mut) {
            set.retain(|c| !c.as_str().is_some_and(|c| withheld.iter().any(|w| w == c)));
        }
    }
    let tmp = spec_path.with_extension("json.devinject-tmp");
    std::fs::write(&tmp, serde_json::to_vec(&spec)?)
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, spec_path)
        .with_context(|| format!("rename {} to {}", tmp.display(), spec_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_the_bounding_set_lacks() {
        let status = "Name:\tx\nCapBnd:\t000001fffeffffff\n";
        assert_eq!(withheld(status).unwrap(), ["CAP_SYS_RESOURCE"]);
        assert!(withheld("CapBnd:\t000001ffffffffff\n").unwrap().is_empty());
        assert!(withheld("Name:\tx\n").is_err());
    }

    #[test]
    fn takes_the_withheld_from_every_set_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("config.json");
        std::fs::write(
            &spec,
            r#"{"process": {"capabilities": {"bounding": ["CAP_KILL", "CAP_SYS_RESOURCE"],
                "effective": ["CAP_SYS_RESOURCE"], "permitted": ["CAP_KILL"]}}, "root": {"path": "r"}}"#,
        )
        .unwrap();
        bound(&spec, &["CAP_SYS_RESOURCE".into()]).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&spec).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"process": {"capabilities": {"bounding": ["CAP_KILL"],
                "effective": [], "permitted": ["CAP_KILL"]}}, "root": {"path": "r"}})
        );
    }
}
