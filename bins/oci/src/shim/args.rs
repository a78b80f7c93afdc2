//! The shim's command line: our own optional flags first, then the runtime's, untouched.
//!
//! Engines call `<shim> [runtimeArgs...] [runtime global flags] <command> [command flags] <id>`
//! (docker puts daemon.json `runtimeArgs` first). We need the command, the bundle of
//! `create`, `run` and `restore`, and where the runtime logs, so errors reach the engine's user.
//!
//! The bundle decides which `config.json` we edit, so we must read it exactly as the runtime
//! will. runc parses with urfave/cli v1 over Go's `flag` package: a flag has one dash or two
//! (`-bundle`, `--b`), its value follows `=` or comes as the next argument (`-b=B`, `--bundle B`),
//! a boolean takes a value only after `=`, `--` ends the flags, and parsing stops at the first
//! argument that is not a flag. For the command's flags, urfave/cli first moves flags written
//! after the container id in front of it (`reorder_args`). crun (GNU argp) accepts the same
//! `--name value` and `--name=value` spellings that engines use. A spelling we cannot parse
//! as runc would (an unknown flag, a value missing, `-bVALUE`) is refused: the shim then fails
//! with that message rather than edit `./config.json` while runc runs another bundle.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// A runtime flag: its names (without dashes) and whether it takes a value.
#[derive(Debug, Clone, Copy)]
struct Flag {
    names: &'static [&'static str],
    value: bool,
}

const fn value(names: &'static [&'static str]) -> Flag {
    Flag { names, value: true }
}

const fn boolean(names: &'static [&'static str]) -> Flag {
    Flag {
        names,
        value: false,
    }
}

/// runc's global flags (1.1), with crun's `--log-level` and `--cgroup-manager`.
const GLOBAL_FLAGS: &[Flag] = &[
    boolean(&["debug"]),
    value(&["log"]),
    value(&["log-format"]),
    value(&["log-level"]),
    value(&["root"]),
    value(&["criu"]),
    boolean(&["systemd-cgroup"]),
    value(&["cgroup-manager"]),
    value(&["rootless"]),
    boolean(&["help", "h"]),
    boolean(&["version", "v"]),
];

/// The flags of runc's `create` and `run` (1.1; `pidfd-socket` from 1.2).
const CREATE_FLAGS: &[Flag] = &[
    value(&["bundle", "b"]),
    value(&["console-socket"]),
    value(&["pidfd-socket"]),
    value(&["pid-file"]),
    boolean(&["no-pivot"]),
    boolean(&["no-new-keyring"]),
    value(&["preserve-fds"]),
    boolean(&["detach", "d"]),
    boolean(&["keep"]),
    boolean(&["no-subreaper"]),
    boolean(&["help", "h"]),
];

/// The flags of runc's `restore` (1.4 and 1.5 have the same), which makes a container from its
/// bundle as `create` does and then has CRIU put a checkpoint's processes into it.
const RESTORE_FLAGS: &[Flag] = &[
    value(&["console-socket"]),
    value(&["image-path"]),
    value(&["work-path"]),
    boolean(&["tcp-established"]),
    boolean(&["ext-unix-sk"]),
    boolean(&["shell-job"]),
    boolean(&["file-locks"]),
    value(&["manage-cgroups-mode"]),
    value(&["bundle", "b"]),
    boolean(&["detach", "d"]),
    value(&["pid-file"]),
    boolean(&["no-subreaper"]),
    boolean(&["no-pivot"]),
    value(&["empty-ns"]),
    boolean(&["auto-dedup"]),
    boolean(&["lazy-pages"]),
    value(&["lsm-profile"]),
    value(&["lsm-mount-context"]),
    boolean(&["help", "h"]),
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
    /// The bundle of `create`, `run` or `restore` (`--bundle`/`-b`; the current directory when absent).
    pub bundle: Option<PathBuf>,
    /// The container id of `create`, `run` or `restore`.
    pub container_id: Option<String>,
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
    /// A runtime flag we do not know: we cannot tell whether it takes a value, so not where
    /// the bundle is.
    #[error("runtime flag {flag:?} ({place}) is not one runc knows: refusing to guess which bundle runc would use")]
    UnknownFlag {
        /// The argument.
        flag: String,
        /// Before the command, or the command's.
        place: &'static str,
    },
    /// A runtime flag that takes a value has none.
    #[error("runtime flag {0:?} needs a value")]
    RuntimeMissingValue(String),
    /// `create` and `run` take exactly one argument, the container id, as runc checks.
    #[error("runtime command {command} takes one container id after its flags, got {got:?}")]
    ContainerId {
        command: String,
        /// The arguments left after its flags.
        got: Vec<String>,
    },
    /// A boolean runtime flag with a value Go's `strconv.ParseBool` refuses.
    #[error("runtime flag {0:?} takes true or false")]
    BadBool(String),
}

/// One flag as Go's `flag` package reads it.
enum Parsed<'a> {
    /// Not a flag: flag parsing stops here.
    NotFlag,
    /// `--`: flag parsing stops after it.
    End,
    /// A flag of `set`, and its value (`None` for booleans).
    Flag(&'static Flag, Option<&'a OsStr>),
}

/// Reads `args[i]` (and for a value flag written without `=`, `args[i + 1]`) as Go's `flag`
/// package does; returns what it is and how many arguments it used.
fn parse_one<'a>(
    args: &'a [OsString],
    i: usize,
    set: &'static [Flag],
    place: &'static str,
) -> Result<(Parsed<'a>, usize), ArgsError> {
    let arg = args[i].as_bytes();
    if arg.len() < 2 || arg[0] != b'-' {
        return Ok((Parsed::NotFlag, 0));
    }
    let body = if arg[1] == b'-' {
        if arg.len() == 2 {
            return Ok((Parsed::End, 1));
        }
        &arg[2..]
    } else {
        &arg[1..]
    };
    let shown = || String::from_utf8_lossy(arg).into_owned();
    if body.starts_with(b"-") || body.starts_with(b"=") {
        return Err(ArgsError::UnknownFlag {
            flag: shown(),
            place,
        });
    }
    let (name, inline) = match body.iter().position(|&b| b == b'=') {
        Some(eq) => (&body[..eq], Some(OsStr::from_bytes(&body[eq + 1..]))),
        None => (body, None),
    };
    let flag = set
        .iter()
        .find(|f| f.names.iter().any(|n| n.as_bytes() == name))
        .ok_or_else(|| ArgsError::UnknownFlag {
            flag: shown(),
            place,
        })?;
    if !flag.value {
        if let Some(v) = inline {
            let ok = [
                "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False",
            ];
            if !ok.iter().any(|o| OsStr::new(o) == v) {
                return Err(ArgsError::BadBool(shown()));
            }
        }
        return Ok((Parsed::Flag(flag, None), 1));
    }
    match inline {
        Some(v) => Ok((Parsed::Flag(flag, Some(v)), 1)),
        None => match args.get(i + 1) {
            Some(v) => Ok((Parsed::Flag(flag, Some(v.as_os_str())), 2)),
            None => Err(ArgsError::RuntimeMissingValue(shown())),
        },
    }
}

/// urfave/cli v1.22's `reorderArgs` (the version runc vendors): flags written after positional
/// arguments are moved in front of them, each with the argument after it when it was written
/// without `=` and that argument is not itself one of the command's flags, whatever it starts
/// with (`--pid-file --config`, `--console-socket --`); a `--` that is not such a value stops the
/// reordering.
fn reorder_args(args: &[OsString], set: &'static [Flag]) -> Vec<OsString> {
    // urfave/cli's `argIsFlag`: up to two leading dashes off, up to the first `=`, a known name.
    let is_flag = |a: &OsStr| {
        let b = a.as_bytes();
        if b.len() < 2 || b[0] != b'-' || b == b"--" {
            return false;
        }
        let body = b.strip_prefix(b"--").unwrap_or(b);
        let body = body.strip_prefix(b"-").unwrap_or(body);
        let name = body.split(|&c| c == b'=').next().unwrap_or(body);
        set.iter()
            .any(|f| f.names.iter().any(|n| n.as_bytes() == name))
    };
    let (mut flags, mut rest) = (Vec::new(), Vec::new());
    let mut may_be_value = false;
    for (i, a) in args.iter().enumerate() {
        if may_be_value && !is_flag(a) {
            may_be_value = false;
            flags.push(a.clone());
        } else if a == "--" {
            rest.extend_from_slice(&args[i..]);
            break;
        } else if is_flag(a) {
            flags.push(a.clone());
            may_be_value = !a.as_bytes().contains(&b'=');
        } else {
            rest.push(a.clone());
        }
    }
    flags.extend(rest);
    flags
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
        out.scan()?;
        Ok(out)
    }

    fn scan(&mut self) -> Result<(), ArgsError> {
        let args = self.runtime_args.clone();
        // Global flags, up to the first argument that is not one: the command.
        let mut i = 0;
        while i < args.len() {
            let (parsed, used) = parse_one(&args, i, GLOBAL_FLAGS, "before the command")?;
            match parsed {
                Parsed::NotFlag => break,
                Parsed::End => {
                    i += used;
                    break;
                }
                Parsed::Flag(flag, v) => {
                    let v = v.map(OsStr::to_owned);
                    match flag.names[0] {
                        "log" => self.log = v.map(PathBuf::from),
                        "log-format" => self.log_format = v.map(|v| v.to_string_lossy().into()),
                        _ => {}
                    }
                }
            }
            i += used;
        }
        let Some(command) = args.get(i) else {
            return Ok(());
        };
        self.command = Some(command.to_string_lossy().into_owned());
        let (flags, place) = match command.to_str() {
            Some("create" | "run") => (CREATE_FLAGS, "of create/run"),
            Some("restore") => (RESTORE_FLAGS, "of restore"),
            _ => return Ok(()),
        };
        let rest = reorder_args(&args[i + 1..], flags);
        let mut j = 0;
        while j < rest.len() {
            let (parsed, used) = parse_one(&rest, j, flags, place)?;
            match parsed {
                Parsed::NotFlag => break,
                Parsed::End => {
                    j += used;
                    break;
                }
                Parsed::Flag(flag, v) => {
                    if flag.names[0] == "bundle" {
                        self.bundle = v.map(PathBuf::from);
                    }
                }
            }
            j += used;
        }
        if rest.len() != j + 1 {
            return Err(ArgsError::ContainerId {
                command: command.to_string_lossy().into_owned(),
                got: rest[j..]
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
            });
        }
        self.container_id = Some(rest[j].to_string_lossy().into_owned());
        Ok(())
    }

    /// True for the commands whose bundle the shim edits: those that make a container from it.
    /// A restored container is made from the engine's new spec, not the checkpoint's (containerd
    /// builds it from the create request and drops the archive's CDI annotations), so it is
    /// admitted as a created one is: its granted devices bound again where CRIU expects them,
    /// and nothing an archive or a request names without a grant.
    pub fn edits_bundle(&self) -> bool {
        matches!(self.command.as_deref(), Some("create" | "run" | "restore"))
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
        assert_eq!(a.container_id.as_deref(), Some("abc"));
        assert_eq!(a.log, Some(PathBuf::from("/run/x/log.json")));
        assert_eq!(a.log_format.as_deref(), Some("json"));
        assert_eq!(
            a.runtime_args[0],
            OsString::from("--root"),
            "our flags are stripped"
        );
        assert!(a.edits_bundle());
    }

    /// Every spelling runc's flag library accepts names the bundle runc uses; what it would refuse,
    /// or what we cannot read as it does, is refused.
    #[test]
    fn every_runc_spelling_of_the_bundle() {
        let bundle = |line: &[&str]| ShimArgs::parse(os_args(line)).map(|a| a.bundle);
        let b = Ok(Some(PathBuf::from("/b")));
        for line in [
            &["create", "--bundle", "/b", "id"][..],
            &["create", "--bundle=/b", "id"],
            &["create", "-bundle", "/b", "id"],
            &["create", "-bundle=/b", "id"],
            &["create", "-b", "/b", "id"],
            &["create", "-b=/b", "id"],
            &["create", "--b", "/b", "id"],
            &["create", "--b=/b", "id"],
            &[
                "--root", "/r", "-log=/l", "--debug", "create", "-b", "/b", "id",
            ],
            &[
                "-debug=true",
                "--systemd-cgroup=false",
                "run",
                "-d",
                "-b=/b",
                "id",
            ],
            &["create", "--no-pivot", "--pid-file", "/p", "-b", "/b", "id"],
            // urfave/cli moves flags written after the id in front of it.
            &["create", "id", "--bundle", "/b"],
            &["create", "id", "-b=/b"],
            // The last one wins, as in Go's flag package.
            &["create", "-b", "/a", "--bundle=/b", "id"],
        ] {
            assert_eq!(bundle(line), b, "{line:?}");
        }
        for line in [&["create", "id"][..], &["create", "--", "-b"]] {
            assert_eq!(bundle(line), Ok(None), "{line:?}");
        }
        let refused = |line: &[&str]| ShimArgs::parse(os_args(line)).unwrap_err();
        for (line, err) in [
            (
                &["create", "-b/b", "id"][..],
                ArgsError::UnknownFlag {
                    flag: "-b/b".into(),
                    place: "of create/run",
                },
            ),
            (
                &["--unknown", "x", "create", "-b", "/b", "id"],
                ArgsError::UnknownFlag {
                    flag: "--unknown".into(),
                    place: "before the command",
                },
            ),
            (
                &["create", "---bundle", "/b", "id"],
                ArgsError::UnknownFlag {
                    flag: "---bundle".into(),
                    place: "of create/run",
                },
            ),
            // urfave/cli moves `-b` in front of the id, which becomes its value: no id is left.
            (
                &["create", "id", "-b"],
                ArgsError::ContainerId {
                    command: "create".into(),
                    got: vec![],
                },
            ),
            // Flag parsing stops at the id once a boolean precedes it (urfave/cli quirk): runc
            // sees `-b /b` as more arguments and fails; we must not edit /b either.
            (
                &["create", "--no-pivot", "id", "-b", "/b"],
                ArgsError::ContainerId {
                    command: "create".into(),
                    got: vec!["id".into(), "-b".into(), "/b".into()],
                },
            ),
            (
                &["create", "-b", "/b"],
                ArgsError::ContainerId {
                    command: "create".into(),
                    got: vec![],
                },
            ),
            (&["--root"], ArgsError::RuntimeMissingValue("--root".into())),
            (
                &["--debug=maybe", "create", "id"],
                ArgsError::BadBool("--debug=maybe".into()),
            ),
        ] {
            assert_eq!(refused(line), err, "{line:?}");
        }
        // Commands whose bundle we do not edit are not parsed past the command.
        assert!(ShimArgs::parse(os_args(&["delete", "--force", "--whatever", "id"])).is_ok());
    }

    /// runc runs `create --pid-file --config --bundle B --console-socket --runtime ID` with bundle
    /// B, and so must the shim. A flag that takes a value takes the next argument, whatever it
    /// starts with; urfave/cli moves it along with its flag unless it is one of the command's
    /// flags. Each line here was run through runc 1.1.5, which failed with `chdir /b` (the bundle
    /// it chose), or else as noted.
    #[test]
    fn a_flag_value_may_begin_with_a_dash() {
        let parsed = |line: &[&str]| ShimArgs::parse(os_args(line));
        for line in [
            &[
                "create",
                "--pid-file",
                "--config",
                "--bundle",
                "/b",
                "--console-socket",
                "--runtime",
                "id",
            ][..],
            &["create", "--pid-file", "-x", "-b", "/b", "id"],
            &["create", "--pid-file=--x", "-b", "/b", "id"],
            &["create", "id", "--pid-file", "--config", "--bundle", "/b"],
            // After a flag, `--` is its value, not the end of the flags.
            &["create", "id", "--pid-file", "--", "--bundle", "/b"],
            &["create", "--pid-file", "--", "--bundle", "/b", "id"],
            // `-b` is a flag of create: it is not moved as a value, but Go's flag package still
            // gives it to `--console-socket`, and `--bundle /b` follows.
            &["create", "--console-socket", "-b", "--bundle", "/b", "id"],
        ] {
            let a = parsed(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(a.bundle, Some(PathBuf::from("/b")), "{line:?}");
        }
        // Global flags: `runc --log --debug create ...` logs to a file named `--debug`.
        let a = parsed(&["--log", "--debug", "create", "-b", "/b", "id"]).unwrap();
        assert_eq!(
            (a.log, a.bundle),
            (Some(PathBuf::from("--debug")), Some(PathBuf::from("/b")))
        );
        // A boolean before the id still stops flag parsing there (runc: "requires exactly 1
        // argument(s)"), even though urfave/cli moved the id along as if it were a value.
        assert_eq!(
            parsed(&["create", "--no-pivot", "id", "-b", "/b"]).unwrap_err(),
            ArgsError::ContainerId {
                command: "create".into(),
                got: vec!["id".into(), "-b".into(), "/b".into()],
            }
        );
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

    #[test]
    fn restore_is_read_with_its_own_flags_and_edits_its_bundle() {
        // As containerd's runc shim calls it to restore a checkpoint.
        let a = ShimArgs::parse(os_args(&[
            "--root",
            "/run/containerd/runc/k8s.io",
            "restore",
            "--image-path",
            "/var/lib/ckpt/checkpoint",
            "--work-path",
            "/var/lib/ckpt/work",
            "--tcp-established",
            "--detach",
            "--empty-ns",
            "network",
            "--bundle",
            "/b",
            "--pid-file",
            "/b/init.pid",
            "id",
        ]))
        .unwrap();
        assert_eq!(a.command.as_deref(), Some("restore"));
        assert_eq!(a.bundle.as_deref(), Some("/b".as_ref()));
        assert_eq!(a.container_id.as_deref(), Some("id"));
        assert!(a.edits_bundle());
        // A create flag restore does not take is not guessed at.
        assert!(matches!(
            ShimArgs::parse(os_args(&["restore", "--preserve-fds", "3", "id"])),
            Err(ArgsError::UnknownFlag {
                place: "of restore",
                ..
            })
        ));
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
                Just("--systemd-cgroup"), Just("create"), Just("run"), Just("restore"), Just("start"),
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
                Just("restore"),
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
            let edits = matches!(cmd.as_str(), "create" | "run" | "restore");
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
