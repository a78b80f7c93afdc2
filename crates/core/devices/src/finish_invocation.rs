//! How a runtime runs `devinject-hook`: the binary, the host configuration it reads, and for
//! the finish step its arguments, environment and timeout. The shim's `config.json`, a CDI spec
//! and the NRI plugin's adjustment each carry a [`FinishInvocation`]; hooks.d files and
//! containerd's hook-mode base spec carry the namespace applier's [`HookCommand`]. Each writer
//! renders this one value in its own format, so that what they write cannot drift apart. Pure: the
//! caller says which directory a relative configuration path is in.

use std::path::{Path, PathBuf};

use crate::FinishArgs;

/// Seconds a runtime gives the finish step before it kills it. Above the hook's default
/// `ldconfig_timeout` (10 s), so that a slow linker cache refresh is reported by the hook
/// itself, naming the cause, rather than by the runtime's kill.
pub const FINISH_TIMEOUT_SECS: u32 = 30;

/// `argv[0]` of every invocation. The hook does not read it; the doctor finds our hook entry in
/// a CDI spec by it.
pub const HOOK_ARGV0: &str = "devinject-hook";

/// The subcommand that runs the finish step.
const FINISH: &str = "finish";

/// Where `devinject-ctl` puts the hook in the files it writes (engine configuration, CDI specs)
/// unless told otherwise.
pub const DEFAULT_HOOK_PATH: &str = "/usr/local/bin/devinject-hook";

/// `devinject-hook` next to the running executable, where the installer puts the hook, the
/// shim and the NRI plugin's binary; used when the host config names no `hook`.
pub fn default_hook_path() -> PathBuf {
    std::env::current_exe()
        .map(|e| e.with_file_name(HOOK_ARGV0))
        .unwrap_or_else(|_| PathBuf::from("/opt/devinject/bin/devinject-hook"))
}

/// `devinject-hook [--config FILE]`: the binary and the host configuration it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    path: PathBuf,
    config: Option<PathBuf>,
}

impl HookCommand {
    /// The hook at `path`, reading `config` (the default configuration when `None`). A relative
    /// `config` is taken in `cwd`, the directory it was given in: the runtime runs the hook in
    /// a directory of its own choosing (runc: the bundle), where a relative path would name
    /// another file, one the container's bundle may hold.
    pub fn new(path: &Path, config: Option<&Path>, cwd: &Path) -> Self {
        Self {
            path: path.to_owned(),
            config: config.map(|c| cwd.join(c)),
        }
    }

    /// The hook binary.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration file, absolute when `cwd` was.
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// `devinject-hook [--config FILE]`: the namespace applier's argv, and the head of every
    /// other. A path that is not UTF-8 is written lossily (hook arguments are JSON strings).
    pub fn argv(&self) -> Vec<String> {
        let mut argv = vec![HOOK_ARGV0.to_owned()];
        if let Some(c) = &self.config {
            argv.extend(["--config".to_owned(), c.to_string_lossy().into_owned()]);
        }
        argv
    }

    /// The finish step with `args`; `None` when there is nothing to finish.
    pub fn finish(&self, args: FinishArgs) -> Option<FinishInvocation> {
        (!args.is_empty()).then(|| FinishInvocation {
            hook: self.clone(),
            args,
        })
    }
}

/// `devinject-hook [--config FILE] finish ARGS...` with an empty environment and
/// [`FINISH_TIMEOUT_SECS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishInvocation {
    /// The binary and its configuration.
    pub hook: HookCommand,
    /// What to finish.
    pub args: FinishArgs,
}

impl FinishInvocation {
    /// The hook binary.
    pub fn path(&self) -> &Path {
        self.hook.path()
    }

    /// The whole argv, `argv[0]` included.
    pub fn argv(&self) -> Vec<String> {
        let mut argv = self.hook.argv();
        argv.push(FINISH.to_owned());
        argv.extend(self.args.to_args());
        argv
    }

    /// The hook's environment: empty, nothing of the container's or the runtime's
    /// (CVE-2025-23266 class).
    pub fn env(&self) -> Vec<String> {
        Vec::new()
    }

    /// Seconds before the runtime kills the step.
    pub fn timeout_secs(&self) -> u32 {
        FINISH_TIMEOUT_SECS
    }

    /// Reads back what [`FinishInvocation::argv`] wrote: the configuration file and the
    /// arguments of `devinject-hook [--config FILE] finish ARGS...`.
    pub fn parse_argv(argv: &[String]) -> Result<(Option<PathBuf>, FinishArgs), String> {
        let rest = argv.get(1..).unwrap_or_default();
        let (config, rest) = match rest {
            [flag, file, rest @ ..] if flag == "--config" => (Some(PathBuf::from(file)), rest),
            _ => (None, rest),
        };
        match rest {
            [cmd, args @ ..] if cmd == FINISH => Ok((config, FinishArgs::parse(args)?)),
            _ => Err(format!(
                "{argv:?} is not a `{HOOK_ARGV0} {FINISH}` invocation"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Symlink;

    fn args() -> FinishArgs {
        FinishArgs {
            links: vec![Symlink {
                link: PathBuf::from("/usr/lib/libx.so.1"),
                target: "libx.so.1.2".into(),
            }],
            ldcache_dirs: vec![PathBuf::from("/usr/lib")],
            ..FinishArgs::default()
        }
    }

    #[test]
    fn a_relative_config_is_taken_in_the_directory_it_was_given_in() {
        let hook = Path::new("/opt/bin/devinject-hook");
        let relative = HookCommand::new(hook, Some(Path::new("c.toml")), Path::new("/srv"));
        assert_eq!(relative.config(), Some(Path::new("/srv/c.toml")));
        let absolute = HookCommand::new(hook, Some(Path::new("/etc/x.toml")), Path::new("/srv"));
        assert_eq!(absolute.config(), Some(Path::new("/etc/x.toml")));
        assert_eq!(
            absolute.argv(),
            ["devinject-hook", "--config", "/etc/x.toml"]
        );
        let default = HookCommand::new(hook, None, Path::new("/srv"));
        assert_eq!(default.argv(), ["devinject-hook"]);
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        for config in [None, Some(Path::new("/etc/x.toml"))] {
            let hook = HookCommand::new(Path::new("/h"), config, Path::new("/"));
            let inv = hook.finish(args()).expect("something to finish");
            assert_eq!(
                FinishInvocation::parse_argv(&inv.argv()),
                Ok((config.map(Path::to_owned), args()))
            );
            assert!(inv.env().is_empty());
            assert_eq!(inv.timeout_secs(), 30);
        }
        assert!(FinishInvocation::parse_argv(&["devinject-hook".into()]).is_err());
        assert!(FinishInvocation::parse_argv(&[]).is_err());
    }

    #[test]
    fn nothing_to_finish_is_no_invocation() {
        let hook = HookCommand::new(Path::new("/h"), None, Path::new("/"));
        assert_eq!(hook.finish(FinishArgs::default()), None);
    }
}
