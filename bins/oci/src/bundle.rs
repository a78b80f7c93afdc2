//! Where a hook finds the container's bundle: the state's `bundle`, or, from a crun that
//! passes its working directory there instead, the bundle the runtime was started with.
//!
//! crun fills a `prestart` or `createRuntime` hook's `bundle` with its working directory, which
//! is the bundle (it changes into it at `create`) except for a container with user-namespace
//! mappings and device nodes: crun 1.21 (Debian 13's) then passes `/`. Its state carries a field
//! of its own, `root` (the spec's `root.path`), which runc's has not. For such a state, and only
//! then, the bundle is the `--bundle` (or `-b`) argument of the hook's parent, which is the
//! runtime itself (crun runs its hooks as its own children): an absolute path whose
//! `config.json` names the same `root.path` the state does. The command line is the engine's,
//! never the container's, and is read bounded.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::oci::{read_bounded, OciError, Spec, State};

/// The longest runtime command line read: an engine's `create` has a few hundred bytes.
const MAX_CMDLINE_BYTES: u64 = 64 << 10;

/// The bundle of the container `state` describes, and its `config.json`.
pub fn load(state: &State) -> Result<(PathBuf, Spec), OciError> {
    let taken = |bundle: &Path| Ok((bundle.to_path_buf(), Spec::load(bundle)?));
    let Some(root) = state.root.as_deref() else {
        return taken(&state.bundle);
    };
    if state.bundle != Path::new("/") || Path::new("/config.json").exists() {
        return taken(&state.bundle);
    }
    let runtime = std::os::unix::process::parent_id();
    let what = format!("/proc/{runtime}/cmdline (the runtime that ran the hook)");
    let cmdline = std::fs::File::open(format!("/proc/{runtime}/cmdline"))
        .map_err(|source| OciError::Read {
            what: what.clone(),
            source,
        })
        .and_then(|f| read_bounded(f, MAX_CMDLINE_BYTES, &what))?;
    let unusable = |problem: String| OciError::Invalid {
        what: "OCI state on stdin".into(),
        problem: format!(
            "bundle is \"/\", which a crun passes for a container with user-namespace mappings \
             and devices, and {problem}: use a crun that passes the bundle (or runc)"
        ),
    };
    let bundle = bundle_argument(&cmdline)
        .ok_or_else(|| unusable(format!("{what} names no absolute --bundle")))?;
    let spec = Spec::load(&bundle)?;
    match spec.root.as_ref().map(|r| r.path.as_path()) {
        Some(path) if path == root => Ok((bundle, spec)),
        other => Err(unusable(format!(
            "the runtime's --bundle {} has root.path {:?}, not the state's {:?}",
            bundle.display(),
            other,
            root
        ))),
    }
}

/// The absolute bundle directory a runtime's NUL-separated command line names (`--bundle DIR`,
/// `--bundle=DIR`, `-b DIR`), the last one if several.
fn bundle_argument(cmdline: &[u8]) -> Option<PathBuf> {
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let mut found = None;
    for (i, arg) in args.iter().enumerate() {
        let value = match *arg {
            b"--bundle" | b"-b" => args.get(i + 1).copied(),
            a => a.strip_prefix(b"--bundle="),
        };
        if let Some(v) = value {
            found = Some(v);
        }
    }
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(found?));
    path.is_absolute().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_argument_is_read_in_each_form_and_only_when_absolute() {
        let cmd = |args: &[&str]| args.join("\0").into_bytes();
        for (args, want) in [
            (
                &["crun", "--root", "/r", "create", "--bundle", "/b/u", "id"][..],
                Some("/b/u"),
            ),
            (&["crun", "create", "--bundle=/b/v", "id"], Some("/b/v")),
            (&["crun", "create", "-b", "/b/w", "id"], Some("/b/w")),
            (&["crun", "create", "-b", "rel", "id"], None),
            (&["crun", "create", "id"], None),
            (&["crun", "create", "--bundle"], None),
        ] {
            assert_eq!(
                bundle_argument(&cmd(args)),
                want.map(PathBuf::from),
                "{args:?}"
            );
        }
    }

    fn state(json: &str) -> State {
        State::parse(json.as_bytes()).unwrap()
    }

    /// runc's state names its bundle, and so does crun's when it is not `/`: taken as it is.
    #[test]
    fn a_state_naming_its_bundle_is_taken_as_it_is() {
        let t = tempfile::tempdir().unwrap();
        let config = r#"{"ociVersion":"1.1.0","root":{"path":"rootfs"}}"#;
        std::fs::write(t.path().join("config.json"), config).unwrap();
        let bundle = t.path().display();
        for json in [
            format!(
                r#"{{"ociVersion":"1.2.1","id":"c","status":"creating","pid":4,"bundle":"{bundle}"}}"#
            ),
            format!(
                r#"{{"ociVersion":"1.0","id":"c","pid":4,"root":"other","bundle":"{bundle}","status":"created"}}"#
            ),
        ] {
            let (found, spec) = load(&state(&json)).unwrap();
            assert_eq!(found, t.path());
            assert_eq!(spec.root.unwrap().path, Path::new("rootfs"));
        }
        // runc's `/` is taken too: its missing config.json is the error, not the bundle.
        let runc =
            state(r#"{"ociVersion":"1.2.1","id":"c","status":"creating","pid":4,"bundle":"/"}"#);
        let err = load(&runc).unwrap_err().to_string();
        assert!(err.contains("/config.json"), "{err}");
    }

    /// crun's `/` with its `root`: the test runner, the hook's parent here, names no bundle,
    /// and the error says what crun did and the way out.
    #[test]
    fn crun_passing_the_root_directory_without_a_bundle_argument_is_named() {
        let crun = state(
            r#"{"ociVersion":"1.0","id":"c","pid":4,"root":"/var/r","bundle":"/","status":"created"}"#,
        );
        let err = load(&crun).unwrap_err().to_string();
        assert!(
            err.contains("bundle is \"/\"") && err.contains("names no absolute --bundle"),
            "{err}"
        );
    }
}
