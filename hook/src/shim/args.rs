//! The shim's command line: our own optional flags first, then the runtime's, untouched.
//!
//! Engines call `<shim> [runtimeArgs...] [runtime global flags] <command> [command flags] <id>`
//! (docker puts daemon.json `runtimeArgs` first). We only need to know the command, the bundle of
//! `create`/`run`, and where the runtime logs, so errors reach the engine's user.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// Global runtime flags (runc and crun) that take a value.
const VALUE_FLAGS: [&str; 7] = [
    "--root",
    "--log",
    "--log-format",
    "--criu",
    "--rootless",
    "--cgroup-manager",
    "--log-level",
];

/// The parsed command line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShimArgs {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--runtime PATH`.
    pub runtime: Option<PathBuf>,
    /// Everything else, passed to the runtime verbatim.
    pub runtime_args: Vec<OsString>,
    /// The runtime subcommand (`create`, `start`, `delete`, ...), if any.
    pub command: Option<String>,
    /// The bundle of `create`/`run` (`--bundle`/`-b`; the current directory when absent).
    pub bundle: Option<PathBuf>,
    /// The runtime's `--log` file.
    pub log: Option<PathBuf>,
    /// The runtime's `--log-format`.
    pub log_format: Option<String>,
}

/// Why the command line was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    /// One of our flags lacks its value.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
}

impl ShimArgs {
    /// Parses `args` (without argv\[0\]).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Self, ArgsError> {
        let mut it = args.into_iter().peekable();
        let mut out = Self::default();
        // Our flags, only at the front.
        loop {
            match it.peek().and_then(|a| a.to_str()) {
                Some("--config") => {
                    it.next();
                    out.config = Some(it.next().ok_or(ArgsError::MissingValue("--config"))?.into());
                }
                Some("--runtime") => {
                    it.next();
                    out.runtime = Some(
                        it.next()
                            .ok_or(ArgsError::MissingValue("--runtime"))?
                            .into(),
                    );
                }
                _ => break,
            }
        }
        out.runtime_args = it.collect();
        out.scan();
        Ok(out)
    }

    fn scan(&mut self) {
        let args = &self.runtime_args;
        let mut i = 0;
        // Global flags, then the command.
        while i < args.len() {
            let a = args[i].to_string_lossy();
            if !a.starts_with('-') {
                self.command = Some(a.into_owned());
                i += 1;
                break;
            }
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (a.clone().into_owned(), None),
            };
            let flag = normalise(&flag);
            if VALUE_FLAGS.contains(&flag.as_str()) {
                let value = match inline {
                    Some(v) => Some(v),
                    None => {
                        i += 1;
                        args.get(i).map(|v| v.to_string_lossy().into_owned())
                    }
                };
                match flag.as_str() {
                    "--log" => self.log = value.map(PathBuf::from),
                    "--log-format" => self.log_format = value,
                    _ => {}
                }
            }
            i += 1;
        }
        if !matches!(self.command.as_deref(), Some("create" | "run")) {
            return;
        }
        while i < args.len() {
            let a = args[i].to_string_lossy();
            if let Some(v) = a
                .strip_prefix("--bundle=")
                .or_else(|| a.strip_prefix("-b="))
            {
                self.bundle = Some(PathBuf::from(v));
            } else if a == "--bundle" || a == "-b" || a == "-bundle" {
                self.bundle = args.get(i + 1).map(PathBuf::from);
                i += 1;
            }
            i += 1;
        }
    }

    /// True for the commands whose bundle the shim edits.
    pub fn edits_bundle(&self) -> bool {
        matches!(self.command.as_deref(), Some("create" | "run"))
    }
}

/// Go's flag package accepts `-flag` as well as `--flag`.
fn normalise(flag: &str) -> String {
    if flag.starts_with("--") {
        flag.to_owned()
    } else {
        format!("-{flag}")
    }
}

/// Converts a list of `&str` into `OsString`s (tests, callers with literal args).
pub fn os_args(args: &[&str]) -> Vec<OsString> {
    args.iter().map(|a| OsStr::new(a).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_style_create() {
        let a = ShimArgs::parse(os_args(&[
            "--config",
            "/etc/devinject/config.toml",
            "--root",
            "/run/docker/runtime-runc/moby",
            "--log",
            "/run/x/log.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/run/b",
            "--pid-file",
            "/run/b/init.pid",
            "abc",
        ]))
        .unwrap();
        assert_eq!(a.config, Some(PathBuf::from("/etc/devinject/config.toml")));
        assert_eq!(a.command.as_deref(), Some("create"));
        assert_eq!(a.bundle, Some(PathBuf::from("/run/b")));
        assert_eq!(a.log, Some(PathBuf::from("/run/x/log.json")));
        assert_eq!(a.log_format.as_deref(), Some("json"));
        assert_eq!(
            a.runtime_args[0],
            OsString::from("--root"),
            "our flags are stripped"
        );
        assert!(a.edits_bundle());
    }

    #[test]
    fn inline_values_short_bundle_and_other_commands() {
        let a = ShimArgs::parse(os_args(&["--root=/r", "run", "-b", "/b", "id"])).unwrap();
        assert_eq!(
            (a.command.as_deref(), a.bundle.as_deref()),
            (Some("run"), Some("/b".as_ref()))
        );
        let a = ShimArgs::parse(os_args(&[
            "--runtime",
            "/usr/bin/crun",
            "delete",
            "--force",
            "id",
        ]))
        .unwrap();
        assert_eq!(a.runtime, Some(PathBuf::from("/usr/bin/crun")));
        assert_eq!(a.command.as_deref(), Some("delete"));
        assert!(!a.edits_bundle());
        let a = ShimArgs::parse(os_args(&["create", "id"])).unwrap();
        assert_eq!(a.bundle, None, "runc defaults to the current directory");
        assert_eq!(
            ShimArgs::parse(os_args(&["--config"])),
            Err(ArgsError::MissingValue("--config"))
        );
    }
}
