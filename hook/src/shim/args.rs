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

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use std::os::unix::ffi::OsStringExt;

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    /// Arguments that are often flags, sometimes not UTF-8.
    fn arg() -> impl Strategy<Value = OsString> {
        prop_oneof![
            3 => prop_oneof![
                Just("--root"), Just("--log"), Just("--log-format"), Just("-log"), Just("--debug"),
                Just("--systemd-cgroup"), Just("create"), Just("run"), Just("start"),
                Just("--bundle"), Just("-b"), Just("--pid-file"), Just("--config"), Just("--runtime"),
            ]
            .prop_map(OsString::from),
            2 => "[-a-z=/.]{0,12}".prop_map(OsString::from),
            1 => vec(any::<u8>(), 0..8).prop_map(OsString::from_vec),
        ]
    }

    /// A runc-style command line: global flags, a command, its flags, an id.
    fn runc_line() -> impl Strategy<Value = (Vec<String>, String, Option<String>, Option<String>)> {
        (
            vec(
                prop_oneof![
                    "/[a-z]{1,6}".prop_map(|v| vec!["--root".to_owned(), v]),
                    "/[a-z]{1,6}\\.json".prop_map(|v| vec![format!("--log={v}")]),
                    Just(vec!["--log-format".to_owned(), "json".to_owned()]),
                    Just(vec!["--systemd-cgroup".to_owned()]),
                    Just(vec!["--debug".to_owned()]),
                ],
                0..4,
            ),
            prop_oneof![
                Just("create"),
                Just("run"),
                Just("start"),
                Just("delete"),
                Just("state")
            ],
            proptest::option::of("/[a-z]{1,8}"),
            proptest::option::of(prop_oneof![Just("--bundle"), Just("-b"), Just("--bundle=")]),
        )
            .prop_map(|(globals, cmd, bundle, style)| {
                let mut line: Vec<String> = globals.concat();
                line.push(cmd.to_owned());
                let mut expect_bundle = None;
                if let (Some(b), Some(style)) = (bundle, style) {
                    if style.ends_with('=') {
                        line.push(format!("{style}{b}"));
                    } else {
                        line.push(style.to_owned());
                        line.push(b.clone());
                    }
                    expect_bundle = Some(b);
                }
                line.push("--pid-file".into());
                line.push("/run/p.pid".into());
                line.push("ctr-id".into());
                // As with Go's flag package, the last one wins.
                let log = line
                    .iter()
                    .rev()
                    .find_map(|a| a.strip_prefix("--log=").map(str::to_owned));
                (line, cmd.to_owned(), expect_bundle, log)
            })
    }

    proptest! {
        #[test]
        fn never_panics_and_passes_the_rest_through(args in vec(arg(), 0..12)) {
            if let Ok(a) = ShimArgs::parse(args.clone()) {
                // Only our leading flags are removed; the runtime gets the rest verbatim.
                prop_assert!(args.ends_with(&a.runtime_args));
                let removed = args.len() - a.runtime_args.len();
                prop_assert!(removed % 2 == 0, "our flags take one value each");
                if removed == 0 {
                    prop_assert!(a.config.is_none() && a.runtime.is_none());
                }
                if a.bundle.is_some() {
                    prop_assert!(a.edits_bundle());
                }
            }
        }

        #[test]
        fn runc_lines_are_understood((line, cmd, bundle, log) in runc_line(), ours in any::<bool>()) {
            let mut args = Vec::new();
            if ours {
                args.extend(["--config", "/etc/devinject/config.toml"].map(String::from));
            }
            args.extend(line.iter().cloned());
            let a = ShimArgs::parse(args.iter().map(OsString::from)).unwrap();
            prop_assert_eq!(a.config.is_some(), ours);
            let line_os: Vec<OsString> = line.iter().map(OsString::from).collect();
            prop_assert_eq!(&a.runtime_args, &line_os);
            prop_assert_eq!(a.command.as_deref(), Some(cmd.as_str()));
            let edits = matches!(cmd.as_str(), "create" | "run");
            prop_assert_eq!(a.edits_bundle(), edits);
            if edits {
                prop_assert_eq!(a.bundle, bundle.map(PathBuf::from));
            } else {
                prop_assert_eq!(a.bundle, None);
            }
            prop_assert_eq!(a.log, log.map(PathBuf::from));
        }
    }
}
