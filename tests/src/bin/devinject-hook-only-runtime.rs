//! `devinject-hook-only-runtime`: a test fixture that lets a docker engine run the hook-only
//! path. Docker cannot register OCI hooks itself, so "legacy" runtime wrappers (such as
//! nvidia-container-runtime's legacy mode) add a hook to the bundle's config.json on `create`
//! and exec runc; the hook then grants the devices outside the spec. This does the same with
//! `devinject-hook` at `createRuntime`, and nothing else, so the docker tests can compare it with
//! the spec-editing shim `devinject-runtime`.
//!
//! Usage: `devinject-hook-only-runtime --hook PATH --config FILE --runtime PATH <runc args...>`

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use devinject_tests::runc_args::creating_bundle;
use serde_json::{json, Value};

fn main() -> ExitCode {
    match run() {
        // `run` only returns on failure: on success it has become runc.
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinject-hook-only-runtime: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<()> {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut hook = None;
    let mut config = None;
    let mut runtime = None;
    while let Some(flag) = args.first().and_then(|a| a.to_str()).map(str::to_owned) {
        let slot = match flag.as_str() {
            "--hook" => &mut hook,
            "--config" => &mut config,
            "--runtime" => &mut runtime,
            _ => break,
        };
        if args.len() < 2 {
            bail!("{flag} needs a value");
        }
        *slot = Some(PathBuf::from(args.remove(1)));
        args.remove(0);
    }
    let (Some(hook), Some(config), Some(runtime)) = (hook, config, runtime) else {
        bail!("usage: devinject-hook-only-runtime --hook PATH --config FILE --runtime PATH <runc args...>");
    };
    let strs: Vec<&str> = args.iter().map(|a| a.to_str().unwrap_or("")).collect();
    if let Some(bundle) = creating_bundle(&strs) {
        add_hook(&bundle.join("config.json"), &hook, &config)?;
    }
    let err = Command::new(&runtime).args(&args).exec();
    Err(err).with_context(|| format!("exec {}", runtime.display()))
}

/// Appends the hook to `hooks.createRuntime`, writing the file atomically.
fn add_hook(spec_path: &Path, hook: &Path, config: &Path) -> Result<()> {
    let text = std::fs::read(spec_path).with_context(|| format!("read {}", spec_path.display()))?;
    let mut spec: Value =
        serde_json::from_slice(&text).with_context(|| format!("parse {}", spec_path.display()))?;
    let entry = json!({
        "path": hook,
        "args": ["devinject-hook", "--config", config],
        "timeout": 30,
    });
    let hooks = spec
        .as_object_mut()
        .context("config.json is not an object")?
        .entry("hooks")
        .or_insert_with(|| json!({}));
    let stage = hooks
        .as_object_mut()
        .context("hooks is not an object")?
        .entry("createRuntime")
        .or_insert_with(|| json!([]));
    stage
        .as_array_mut()
        .context("hooks.createRuntime is not an array")?
        .push(entry);
    let tmp = spec_path.with_extension("json.devinject-tmp");
    std::fs::write(&tmp, serde_json::to_vec(&spec)?)
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, spec_path)
        .with_context(|| format!("rename {} to {}", tmp.display(), spec_path.display()))?;
    Ok(())
}
