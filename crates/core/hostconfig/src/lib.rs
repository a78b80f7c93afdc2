//! The host configuration file, `/etc/devinject/config.toml`: its keys, their defaults and
//! their validation, shared by everything that reads it (the hook and the runtime shim, the NRI
//! plugin, `devinject-ctl doctor`, the installer that writes it).
//!
//! Every key is optional; a missing file means all defaults. Unknown keys are errors so a typo
//! cannot silently change behaviour on a node.
//!
//! - [`HostConfig`]: the file, [`HostConfig::load`] and [`HostConfig::parse`], [`ConfigError`].
//! - [`policy`]: the request policy settings (`policy`, `non_kubernetes`, `on_denied`).
//! - [`inject`]: how the hook injects (`mount_api`, `ldcache`).
//! - `decision_log_dir`: where refused starts are recorded ([`HostConfig::decision_log`]).
//!
//! The settings are plain data: the hook turns them into what it runs (the pod-resources
//! client, the ldconfig child), so this crate links none of that. docs/hook.md lists the keys;
//! a test here checks the list against the parser.
#![warn(missing_docs)]

pub mod inject;
pub mod policy;

use std::path::{Path, PathBuf};

use devinject_devices::HostRoots;
use serde::Deserialize;

pub use inject::{CacheWriter, MountApi};
pub use policy::{NonKubernetes, OnDenied, PolicySettings, RequestPolicy};

/// Where the hook and shim read their configuration unless told otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/devinject/config.toml";

/// Why the host configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("config {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message with line and key.
        message: String,
    },
}

/// The host configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// Directory of device profiles.
    pub profiles_dir: PathBuf,
    /// Root of the host's device nodes.
    pub dev_root: PathBuf,
    /// Root of sysfs.
    pub sys_root: PathBuf,
    /// Root of procfs, where some drivers describe their devices (NVIDIA's
    /// `driver/nvidia/gpus/<bus>/information`).
    pub proc_root: PathBuf,
    /// Root under which driver libraries, binaries and files are found.
    pub driver_root: PathBuf,
    /// The host's `ldconfig`, run chrooted in the container to refresh its linker cache. It must
    /// be statically linked (Debian's and Fedora's are).
    pub ldconfig: PathBuf,
    /// Seconds ldconfig may run before it is killed and the container start fails. An image can
    /// make it wait forever (a FIFO as its `ld.so.conf`); keep this below the hook's `timeout`
    /// in the runtime so the user sees our message rather than the runtime's.
    pub ldconfig_timeout: u32,
    /// Who writes the container's linker cache: `builtin` (the hook adds the injected libraries
    /// to the image's cache itself, and runs ldconfig only for a cache it cannot read) or
    /// `ldconfig` (always run ldconfig, which also rescans every library directory the image
    /// configures).
    pub ldcache: CacheWriter,
    /// Mount API choice.
    pub mount_api: MountApi,
    /// Log filter for the hook's stderr (`warn`, `info`, `debug`, or a tracing filter).
    pub log_level: String,
    /// The real OCI runtime the shim hands over to. Unset: the first of
    /// [`RUNTIME_CANDIDATES`] that exists (found by path, never through `PATH`).
    pub runtime: Option<PathBuf>,
    /// The hook binary the shim wires in for soname links and the linker cache. Unset:
    /// `devinject-hook` next to the shim.
    pub hook: Option<PathBuf>,
    /// Which container requests are honoured (see docs/policy.md).
    pub policy: RequestPolicy,
    /// The kubelet's pod-resources socket, asked under the `kubernetes` policy.
    pub pod_resources_socket: PathBuf,
    /// How long the kubelet may take to answer, in milliseconds.
    pub pod_resources_timeout_ms: u64,
    /// Obsolete: `pod_resources_helper`, the helper program earlier releases executed to ask
    /// the kubelet; the hook and the shim now ask it themselves. Accepted, so that a config
    /// written for an earlier release still loads, and ignored; `devinject-ctl doctor` says to
    /// remove it.
    #[serde(rename = "pod_resources_helper")]
    pub obsolete_pod_resources_helper: Option<toml::Value>,
    /// Under the `kubernetes` policy: containers without CRI annotations.
    pub non_kubernetes: NonKubernetes,
    /// Under the `kubernetes` policy: requests the kubelet did not grant.
    pub on_denied: OnDenied,
    /// How long the NRI plugin may take to answer containerd about one container, prepare
    /// steps included, in milliseconds. containerd drops a plugin that answers later than its
    /// `plugin_request_timeout` (2 s by default) and creates containers without it: keep this
    /// safely below that setting (docs/nri.md, "The request budget"). When containerd sends its
    /// timeout, the plugin also stays within three quarters of it.
    pub nri_request_budget_ms: u64,
    /// The directory of the node's decision log, where the hook, the shim and the NRI plugin
    /// record each container start they refuse (`devinject-decision-log`), which the device
    /// plugin counts and `devinject-ctl doctor` shows. An absolute path; empty: no log.
    pub decision_log_dir: PathBuf,
}

/// The default for `nri_request_budget_ms`: three quarters of containerd's default
/// `plugin_request_timeout` (2 s).
pub const DEFAULT_NRI_REQUEST_BUDGET_MS: u64 = 1500;

/// The largest `nri_request_budget_ms`: a prepare step's own longest deadline (5 minutes).
pub const MAX_NRI_REQUEST_BUDGET_MS: u64 = 300_000;

/// Where the kubelet serves the pod-resources API unless its root directory was moved: the
/// default for `pod_resources_socket`.
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The decision log's directory unless `decision_log_dir` says otherwise: on tmpfs, gone at
/// reboot.
pub const DEFAULT_DECISION_LOG_DIR: &str = "/run/devinject";

/// The default for `pod_resources_timeout_ms`: container creation waits at most this long.
pub const DEFAULT_POD_RESOURCES_TIMEOUT_MS: u64 = 2000;

/// Where the shim looks for runc when `runtime` is not set.
pub const RUNTIME_CANDIDATES: [&str; 4] = [
    "/usr/bin/runc",
    "/usr/sbin/runc",
    "/usr/local/bin/runc",
    "/usr/local/sbin/runc",
];

impl Default for HostConfig {
    fn default() -> Self {
        let roots = HostRoots::default();
        Self {
            profiles_dir: PathBuf::from(devinject_devices::profile_set::DEFAULT_PROFILES_DIR),
            dev_root: roots.dev_root,
            sys_root: roots.sys_root,
            proc_root: roots.proc_root,
            driver_root: roots.driver_root,
            ldconfig: PathBuf::from("/sbin/ldconfig"),
            ldconfig_timeout: 10,
            ldcache: CacheWriter::Builtin,
            mount_api: MountApi::Auto,
            log_level: "warn".into(),
            runtime: None,
            hook: None,
            policy: RequestPolicy::Kubernetes,
            pod_resources_socket: PathBuf::from(DEFAULT_POD_RESOURCES_SOCKET),
            pod_resources_timeout_ms: DEFAULT_POD_RESOURCES_TIMEOUT_MS,
            obsolete_pod_resources_helper: None,
            non_kubernetes: NonKubernetes::Env,
            on_denied: OnDenied::Fail,
            nri_request_budget_ms: DEFAULT_NRI_REQUEST_BUDGET_MS,
            decision_log_dir: PathBuf::from(DEFAULT_DECISION_LOG_DIR),
        }
    }
}

impl HostConfig {
    /// Loads `path`. A missing file at the default path means defaults; a missing file that was
    /// named explicitly is an error.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        let explicit = path.is_some();
        let path = path.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                return Ok(Self::default())
            }
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
        };
        Self::parse(&text, path)
    }

    /// Parses config text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().replace('\n', " | "),
        })?;
        if config.pod_resources_timeout_ms == 0 {
            return Err(ConfigError::Parse {
                path: path.to_owned(),
                message: "pod_resources_timeout_ms is 0: give the kubelet at least 1 ms (the default is 2000)".into(),
            });
        }
        if !(1..=MAX_NRI_REQUEST_BUDGET_MS).contains(&config.nri_request_budget_ms) {
            return Err(ConfigError::Parse {
                path: path.to_owned(),
                message: format!(
                    "nri_request_budget_ms is {}: give the NRI plugin 1 to {MAX_NRI_REQUEST_BUDGET_MS} ms, below containerd's plugin_request_timeout (the default is {DEFAULT_NRI_REQUEST_BUDGET_MS})",
                    config.nri_request_budget_ms
                ),
            });
        }
        if !config.decision_log_dir.as_os_str().is_empty() && !config.decision_log_dir.is_absolute()
        {
            return Err(ConfigError::Parse {
                path: path.to_owned(),
                message: format!(
                    "decision_log_dir is {:?}: give an absolute directory (the default is {}), or \"\" for no decision log",
                    config.decision_log_dir,
                    DEFAULT_DECISION_LOG_DIR
                ),
            });
        }
        Ok(config)
    }

    /// The decision log's directory; `None` when `decision_log_dir` is empty (no log).
    pub fn decision_log(&self) -> Option<&Path> {
        (!self.decision_log_dir.as_os_str().is_empty()).then_some(self.decision_log_dir.as_path())
    }

    /// The request policy settings.
    pub fn policy_settings(&self) -> PolicySettings {
        PolicySettings {
            policy: self.policy,
            non_kubernetes: self.non_kubernetes,
            on_denied: self.on_denied,
        }
    }

    /// The host roots discovery and resolution use.
    pub fn roots(&self) -> HostRoots {
        HostRoots {
            dev_root: self.dev_root.clone(),
            sys_root: self.sys_root.clone(),
            proc_root: self.proc_root.clone(),
            driver_root: self.driver_root.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/hook.md's configuration table lists exactly the keys the parser accepts (serde
    /// names them all when it refuses an unknown one).
    #[test]
    fn docs_list_every_key() {
        let err = HostConfig::parse("zz_not_a_key = 1\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        let expected = err
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("serde names the keys: {err}"));
        let mut accepted: Vec<&str> = expected
            .split(',')
            .map(|k| {
                k.trim()
                    .trim_matches(|c: char| c == '`' || !c.is_ascii_graphic())
            })
            .map(|k| k.split('`').next().unwrap_or(k))
            .filter(|k| !k.is_empty())
            .collect();
        accepted.sort_unstable();
        let docs = include_str!("../../../../docs/hook.md");
        let table = docs
            .split("## Configuration: `/etc/devinject/config.toml`")
            .nth(1)
            .expect("docs/hook.md has a Configuration section");
        let mut documented: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("| key"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('`').nth(1))
            .collect();
        documented.sort_unstable();
        assert_eq!(documented, accepted);
    }

    #[test]
    fn defaults_and_partial_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, "dev_root = \"/tmp/dev\"\n").unwrap();
        let c = HostConfig::load(Some(&p)).unwrap();
        assert_eq!(c.dev_root, PathBuf::from("/tmp/dev"));
        assert_eq!(c.profiles_dir, PathBuf::from("/etc/devinject/profiles"));
        assert_eq!(c.mount_api, MountApi::Auto);
    }

    #[test]
    fn typos_and_missing_explicit_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.toml");
        std::fs::write(&p, "dev_rot = \"/tmp/dev\"\n").unwrap();
        let err = HostConfig::load(Some(&p)).unwrap_err().to_string();
        assert!(
            err.contains("dev_rot") && err.contains("config.toml"),
            "{err}"
        );
        let err = HostConfig::load(Some(&dir.path().join("nope.toml"))).unwrap_err();
        assert!(err.to_string().contains("nope.toml"));
    }

    #[test]
    fn the_decision_log_is_on_tmpfs_by_default_can_be_turned_off_and_must_be_absolute() {
        let p = Path::new("c.toml");
        let c = HostConfig::parse("", p).unwrap();
        assert_eq!(c.decision_log(), Some(Path::new("/run/devinject")));
        let c = HostConfig::parse("decision_log_dir = \"/var/log/devinject\"\n", p).unwrap();
        assert_eq!(c.decision_log(), Some(Path::new("/var/log/devinject")));
        let c = HostConfig::parse("decision_log_dir = \"\"\n", p).unwrap();
        assert_eq!(c.decision_log(), None);
        let err = HostConfig::parse("decision_log_dir = \"run/x\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("decision_log_dir") && err.contains("absolute") && err.contains("c.toml"),
            "{err}"
        );
    }

    #[test]
    fn the_nri_request_budget_stays_below_containerds_default_timeout_and_is_bounded() {
        let p = Path::new("/c.toml");
        let c = HostConfig::parse("", p).unwrap();
        assert_eq!(c.nri_request_budget_ms, 1500, "under containerd's 2 s");
        let c = HostConfig::parse("nri_request_budget_ms = 45000\n", p).unwrap();
        assert_eq!(c.nri_request_budget_ms, 45_000);
        for bad in ["0", "300001"] {
            let err = HostConfig::parse(&format!("nri_request_budget_ms = {bad}\n"), p)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("nri_request_budget_ms")
                    && err.contains("plugin_request_timeout")
                    && err.contains("/c.toml"),
                "{err}"
            );
        }
    }

    #[test]
    fn policy_keys() {
        let p = Path::new("/c.toml");
        let c = HostConfig::parse("", p).unwrap();
        assert_eq!(c.policy, RequestPolicy::Kubernetes, "secure by default");
        assert_eq!(
            c.pod_resources_socket,
            PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock")
        );
        assert_eq!(c.non_kubernetes, NonKubernetes::Env);
        assert_eq!(c.on_denied, OnDenied::Fail);
        let c = HostConfig::parse(
            "policy = \"env\"\npod_resources_socket = \"/k/pr.sock\"\npod_resources_timeout_ms = 50\nnon_kubernetes = \"refuse\"\non_denied = \"ignore\"\n",
            p,
        )
        .unwrap();
        assert_eq!(c.policy, RequestPolicy::Env);
        assert_eq!(c.pod_resources_socket, Path::new("/k/pr.sock"));
        assert_eq!(c.pod_resources_timeout_ms, 50);
        assert_eq!(c.non_kubernetes, NonKubernetes::Refuse);
        assert_eq!(c.on_denied, OnDenied::Ignore);
        let err = HostConfig::parse("policy = \"kube\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("kube") && err.contains("policy"), "{err}");
        let err = HostConfig::parse("pod_resources_timeout_ms = 0\n", p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pod_resources_timeout_ms"), "{err}");
        // An earlier release's key still loads, whatever it holds, and changes nothing.
        for old in [
            "\"/opt/devinject/bin/devinject-podresources\"",
            "\"bin/devinject-podresources\"",
        ] {
            let c = HostConfig::parse(&format!("pod_resources_helper = {old}\n"), p).unwrap();
            assert!(c.obsolete_pod_resources_helper.is_some());
            assert_eq!(
                c.pod_resources_socket,
                HostConfig::default().pod_resources_socket
            );
        }
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    const PATH: &str = "/etc/devinject/config.toml";

    const KNOWN: [&str; 19] = [
        "ldcache",
        "profiles_dir",
        "dev_root",
        "sys_root",
        "proc_root",
        "driver_root",
        "ldconfig",
        "mount_api",
        "log_level",
        "runtime",
        "hook",
        "policy",
        "pod_resources_socket",
        "pod_resources_timeout_ms",
        "pod_resources_helper",
        "non_kubernetes",
        "on_denied",
        "nri_request_budget_ms",
        "decision_log_dir",
    ];

    fn quoted(s: &str) -> String {
        toml::Value::String(s.to_owned()).to_string()
    }

    /// `key = value` lines from the real keys with mostly right, sometimes wrong values.
    fn line() -> impl Strategy<Value = (&'static str, String)> {
        let path = prop_oneof!["/[a-z/]{0,16}", ".{0,10}"].prop_map(|s| quoted(&s));
        let word = prop_oneof![
            Just("\"auto\""),
            Just("\"classic\""),
            Just("\"kubernetes\""),
            Just("\"env\""),
            Just("\"refuse\""),
            Just("\"fail\""),
            Just("\"ignore\""),
            Just("\"\""),
            Just("1"),
        ]
        .prop_map(str::to_owned);
        let number = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            Just("\"2000\"".to_owned())
        ];
        prop_oneof![
            path.clone().prop_map(|v| ("profiles_dir", v)),
            path.clone().prop_map(|v| ("dev_root", v)),
            path.clone().prop_map(|v| ("sys_root", v)),
            path.clone().prop_map(|v| ("proc_root", v)),
            path.clone().prop_map(|v| ("driver_root", v)),
            path.clone().prop_map(|v| ("ldconfig", v)),
            path.clone().prop_map(|v| ("runtime", v)),
            path.clone().prop_map(|v| ("hook", v)),
            path.clone().prop_map(|v| ("pod_resources_helper", v)),
            path.clone().prop_map(|v| ("decision_log_dir", v)),
            path.prop_map(|v| ("pod_resources_socket", v)),
            word.clone().prop_map(|v| ("mount_api", v)),
            word.clone().prop_map(|v| ("policy", v)),
            word.clone().prop_map(|v| ("non_kubernetes", v)),
            word.clone().prop_map(|v| ("on_denied", v)),
            word.prop_map(|v| ("log_level", v)),
            number.prop_map(|v| ("pod_resources_timeout_ms", v)),
            "[a-z_]{1,10}"
                .prop_filter("not a real key", |k| !KNOWN.contains(&k.as_str()))
                .prop_map(|v| ("unknown", format!("{v} = 1"))),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in any::<String>()) {
            let _ = HostConfig::parse(&text, Path::new(PATH));
        }

        #[test]
        fn assembled_files_never_panic_and_errors_name_file_and_key(lines in vec(line(), 0..10)) {
            let mut text = String::new();
            let mut seen = std::collections::BTreeSet::new();
            let mut unknown = false;
            for (k, v) in &lines {
                if *k == "unknown" {
                    unknown = true;
                    text.push_str(v);
                    text.push('\n');
                } else if seen.insert(*k) {
                    text.push_str(&format!("{k} = {v}\n"));
                }
            }
            match HostConfig::parse(&text, Path::new(PATH)) {
                Ok(c) => {
                    prop_assert!(!unknown, "an unknown key was accepted: {}", text);
                    prop_assert!(c.pod_resources_timeout_ms > 0);
                }
                Err(e) => {
                    let msg = e.to_string();
                    prop_assert!(msg.contains(PATH), "{}", msg);
                    // The parser's message names the key (or the line) it stopped at.
                    prop_assert!(
                        msg.contains("line")
                            || msg.contains("pod_resources_timeout_ms")
                            || msg.contains("decision_log_dir"),
                        "{}",
                        msg
                    );
                }
            }
        }

        #[test]
        fn valid_files_keep_their_values(
            dev in "/[a-z]{1,8}",
            socket in "/[a-z]{1,8}/kubelet\\.sock",
            timeout in 1u64..100_000,
            policy in prop_oneof![Just("kubernetes"), Just("env")],
            non_k8s in prop_oneof![Just("env"), Just("refuse")],
            on_denied in prop_oneof![Just("fail"), Just("ignore")],
        ) {
            let text = format!(
                "dev_root = {}\npod_resources_socket = {}\npod_resources_timeout_ms = {timeout}\npolicy = \"{policy}\"\nnon_kubernetes = \"{non_k8s}\"\non_denied = \"{on_denied}\"\n",
                quoted(&dev),
                quoted(&socket),
            );
            let c = HostConfig::parse(&text, Path::new(PATH)).unwrap();
            prop_assert_eq!(c.dev_root, PathBuf::from(&dev));
            prop_assert_eq!(c.pod_resources_socket, PathBuf::from(&socket));
            prop_assert_eq!(c.pod_resources_timeout_ms, timeout);
            prop_assert_eq!(c.policy == RequestPolicy::Env, policy == "env");
            prop_assert_eq!(c.non_kubernetes == NonKubernetes::Refuse, non_k8s == "refuse");
            prop_assert_eq!(c.on_denied == OnDenied::Ignore, on_denied == "ignore");
            prop_assert_eq!(c.profiles_dir, HostConfig::default().profiles_dir);
        }

        #[test]
        fn unknown_keys_are_named(key in "[a-z][a-z_]{2,16}") {
            prop_assume!(!KNOWN.contains(&key.as_str()));
            let err = HostConfig::parse(&format!("{key} = \"x\"\n"), Path::new(PATH))
                .unwrap_err()
                .to_string();
            prop_assert!(err.contains(&key) && err.contains(PATH), "{}", err);
        }
    }
}
