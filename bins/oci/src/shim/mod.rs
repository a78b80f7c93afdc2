//! The runtime shim `devinject-runtime`: the spec applier in front of runc or crun.
//!
//! On `create` and `run` it plans the container's requests, runs the profiles' prepare steps
//! ([`devinject_contained::prepare_step`]) and writes the plan into the bundle's `config.json` ([`spec_edit`]),
//! then execs the real runtime with the arguments it was given.
//! Every other command is exec'd at once. A container that asks for nothing has its bundle left
//! byte-for-byte untouched.

pub mod args;
pub mod runtime_log;
pub mod spec_edit;

/// The variable of the engine's environment that names the shim's configuration when it is
/// given no `--config` (containerd's `BinaryName` takes no arguments).
pub const CONFIG_ENV: &str = "DEVINJECT_CONFIG";

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use devinject_exit::ExitCode;
use devinject_hostconfig::{HostConfig, RUNTIME_CANDIDATES};

use crate::inject::layout;
use crate::oci::{read_spec_bytes, OciError, Spec};
use crate::refusal::Seen;
use args::ShimArgs;
use devinject_admission::admit::{Admission, AdmitError, Asked};
use devinject_contained::prepare_step::{self, PrepareStepError};
use spec_edit::SpecEditError;

/// Why the shim failed.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// Bad command line.
    #[error(transparent)]
    Args(#[from] args::ArgsError),
    /// `config.json` is unreadable or malformed.
    #[error(transparent)]
    Input(#[from] OciError),
    /// The requests were not admitted (profiles, policy, plan).
    #[error(transparent)]
    Admit(#[from] AdmitError),
    /// A profile's prepare step failed.
    #[error(transparent)]
    Prepare(#[from] PrepareStepError),
    /// The plan could not be written into the spec.
    #[error(transparent)]
    SpecEdit(#[from] SpecEditError),
    /// Writing `config.json` failed, or what is at its name is not a regular file.
    #[error(transparent)]
    Write(#[from] devinject_hostfs::HostFsError),
    /// No runtime to hand over to.
    #[error("no OCI runtime found at {candidates}: install runc or set `runtime` in the devinject config")]
    NoRuntime {
        /// Where we looked.
        candidates: String,
    },
    /// exec of the runtime failed.
    #[error("cannot exec the runtime {path}: {errno}")]
    Exec {
        /// The runtime.
        path: PathBuf,
        errno: nix::errno::Errno,
    },
}

impl ShimError {
    /// The documented exit code.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Args(_) => ExitCode::Usage,
            Self::NoRuntime { .. } => ExitCode::Config,
            Self::Input(e) => e.exit_code(),
            // Where the hook's applier refuses the same volume, with the same code.
            Self::SpecEdit(SpecEditError::NodeInVolume(_)) => ExitCode::Inject,
            Self::SpecEdit(_) | Self::Write(_) => ExitCode::Input,
            Self::Admit(e) => e.exit_code(),
            Self::Prepare(e) => e.exit_code(),
            Self::Exec { .. } => ExitCode::Internal,
        }
    }
}

/// What the shim did to the bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleEdit {
    /// Not a create/run, or nothing asked: untouched.
    Untouched,
    /// `config.json` was rewritten with these profile:device grants.
    Edited(Vec<String>),
}

/// Runs the shim: edits the bundle when needed, then execs the runtime. Returns only on error,
/// which the caller reports with [`runtime_log::report`]; what it learnt of the container by
/// then is in `seen`, for the decision log ([`crate::refusal`]).
pub fn run(args: &ShimArgs, config: &HostConfig, seen: &mut Seen) -> ShimError {
    let runtime = match resolve_runtime(args, config) {
        Ok(r) => r,
        Err(e) => return e,
    };
    if args.edits_bundle() {
        let bundle = args
            .bundle
            .clone()
            .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")));
        if let Err(e) = edit_bundle(&bundle, config, args.config.as_deref(), seen) {
            return e;
        }
    }
    exec(&runtime, args)
}

/// The runtime to exec: `--runtime`, else the config's `runtime`, else the first candidate path
/// that exists.
pub fn resolve_runtime(args: &ShimArgs, config: &HostConfig) -> Result<PathBuf, ShimError> {
    if let Some(r) = args.runtime.clone().or_else(|| config.runtime.clone()) {
        return Ok(r);
    }
    RUNTIME_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| ShimError::NoRuntime {
            candidates: RUNTIME_CANDIDATES.join(", "),
        })
}

/// Plans the bundle's container and rewrites its `config.json` (atomically) when it asked for
/// devices. `config_path` is passed on to the finish hook; the profiles the container asks for
/// go into `seen`.
pub fn edit_bundle(
    bundle: &Path,
    config: &HostConfig,
    config_path: Option<&Path>,
    seen: &mut Seen,
) -> Result<BundleEdit, ShimError> {
    let (path, what, bytes) = read_spec_bytes(bundle)?;
    // A spec whose text names no request variable and no annotation of ours has no env name
    // or annotation key that does: it asked for nothing, and is not even parsed.
    let in_text = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    let admission = Admission::from_config(config);
    let Some(profiles) = admission.may_be_asking(in_text)? else {
        return Ok(BundleEdit::Untouched);
    };
    let spec = Spec::parse(&bytes, &what)?;
    let asked = Asked::find(profiles, &spec);
    seen.asked(&asked, &spec.annotations);
    let Some(asked) = asked? else {
        return Ok(BundleEdit::Untouched);
    };
    // Where the rootfs is: looked up once the container asks for something, and only then.
    let rootfs = spec.rootfs(bundle)?;
    let Some(admitted) = admission.admit(asked, &spec, || layout::of_rootfs(&rootfs))? else {
        return Ok(BundleEdit::Untouched);
    };
    let plan = &admitted.plan;
    prepare_step::run_all(&plan.prepare)?;
    let mut value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| OciError::Parse {
            what: what.clone(),
            message: e.to_string(),
        })?;
    let hook = config
        .hook
        .clone()
        .unwrap_or_else(devinject_devices::default_hook_path);
    let request_envs = admitted.request_env_names();
    let access = if spec_edit::has_user_namespace(&value) {
        spec_edit::GroupAccess::OwnedCopies
    } else {
        spec_edit::GroupAccess::ProcessGroups
    };
    let finish = spec_edit::finish_hook(&hook, config_path, &plan.edits, access);
    spec_edit::apply(&mut value, &plan.edits, &request_envs, finish)?;
    let out = serde_json::to_vec(&value).map_err(|e| OciError::Parse {
        what: what.clone(),
        message: e.to_string(),
    })?;
    // Atomic (runc sees the old file or the new one), its mode and owner kept, only a regular
    // file with one link replaced; not synced: runtime state the engine makes anew after a crash.
    devinject_hostfs::atomic_write::write_for_this_boot(&path, &out, None)?;
    Ok(BundleEdit::Edited(plan.granted()))
}

fn exec(runtime: &Path, args: &ShimArgs) -> ShimError {
    let cstr = |b: &[u8]| CString::new(b).unwrap_or_default();
    let mut argv = vec![cstr(runtime.as_os_str().as_bytes())];
    argv.extend(args.runtime_args.iter().map(|a| cstr(a.as_bytes())));
    let prog = cstr(runtime.as_os_str().as_bytes());
    match nix::unistd::execv(&prog, &argv) {
        Err(errno) => ShimError::Exec {
            path: runtime.to_owned(),
            errno,
        },
        Ok(never) => match never {},
    }
}
