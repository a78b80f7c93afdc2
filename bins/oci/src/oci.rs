//! The parts of the OCI state and runtime spec the hook reads.
//!
//! Only the fields we use are parsed, and unknown fields are ignored, so a newer runtime spec
//! does not break the hook. Inputs are size-bounded before parsing: the state comes from the
//! runtime, but `config.json` carries user-controlled env and annotations.
//!
//! Why not the `oci-spec` crate's types (measured by `oci-parse-bench`, docs/benchmarks.md
//! section 12): its `Spec` models every field with closed enums, so a spec carrying a name the
//! crate does not know yet (a capability, a namespace type, an rlimit or a seccomp action that
//! a newer runtime or engine writes) fails to parse as a whole, and the hook or shim would fail
//! a container over fields it never reads; this parser accepts all four. It is also the slower
//! by 2.8-3.5x (oci-spec 0.10: 140 against 49 µs for docker's spec of a container with 8
//! devices and 64 libraries), paid on every start. The shim edits `config.json` as JSON
//! ([`crate::shim::spec_edit`]) for the same reason: a typed round trip would drop or reject
//! what it does not model.

use devinject_devices::{env_value, Excerpt};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use devinject_devices::{DeviceKind, DeviceNode};
use devinject_exit::ExitCode;
use serde::Deserialize;

/// The largest OCI state accepted on stdin.
pub const MAX_STATE_BYTES: u64 = 1 << 20;
/// The largest `config.json` accepted.
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

/// Why the state or spec could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Reading stdin or the file failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was being read.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The input is larger than we accept.
    #[error("{what} is larger than {limit} bytes")]
    TooLarge {
        /// What was being read.
        what: String,
        limit: u64,
    },
    /// The JSON is malformed or misses required fields.
    #[error("{what} is not valid: {}", Excerpt(.message))]
    Parse {
        /// What was being parsed.
        what: String,
        /// The parser's message.
        message: String,
    },
    /// A field has an unusable value.
    #[error("{what}: {problem}")]
    Invalid {
        /// What was being checked.
        what: String,
        problem: String,
    },
}

/// The OCI state a runtime passes to hooks on stdin.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// Runtime spec version.
    pub oci_version: String,
    /// Container id.
    pub id: String,
    /// `creating`, `created`, `running` or `stopped`.
    pub status: String,
    /// The container's init pid (host pid namespace in prestart/createRuntime).
    #[serde(default)]
    pub pid: i32,
    /// Absolute path of the bundle.
    pub bundle: PathBuf,
    /// crun's own field: the spec's `root.path` ([`crate::bundle`]).
    #[serde(default)]
    pub root: Option<PathBuf>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The parts of `config.json` we read.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Spec {
    /// `ociVersion`.
    #[serde(rename = "ociVersion", default)]
    pub oci_version: String,
    pub root: Option<Root>,
    pub process: Option<Process>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub linux: Option<Linux>,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct Root {
    /// Rootfs path, absolute or relative to the bundle.
    pub path: PathBuf,
    /// Read-only rootfs.
    #[serde(default)]
    pub readonly: bool,
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct Process {
    /// `KEY=value` entries.
    #[serde(default)]
    pub env: Vec<String>,
    /// `user`: who the process runs as.
    #[serde(default)]
    pub user: User,
}

/// `process.user` (ids as the container sees them).
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
    /// `additionalGids`.
    #[serde(default)]
    pub additional_gids: Vec<u32>,
}

impl OciError {
    /// The documented exit code: the runtime handed over a state or spec that is unreadable or
    /// malformed, for the hook and the shim alike.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::Input
    }
}

impl User {
    /// Whether this process lacks group `gid`: it runs as neither root nor a member.
    pub fn lacks_group(&self, gid: u32) -> bool {
        self.uid != 0 && self.gid != gid && !self.additional_gids.contains(&gid)
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct Linux {
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    /// Device nodes the runtime makes, as written: an entry is read only when asked for
    /// ([`Spec::device_node`]), so that a malformed list is reported by whoever edits it
    /// (the shim names `linux.devices`), not as a parse error of the whole file.
    #[serde(default)]
    pub devices: Option<serde_json::Value>,
}

/// One `linux.devices` entry.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LinuxDevice {
    /// Container path.
    pub path: PathBuf,
    /// `c`, `b`, `u` or `p`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Major number.
    #[serde(default)]
    pub major: i64,
    /// Minor number.
    #[serde(default)]
    pub minor: i64,
    /// File mode (permission bits).
    pub file_mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
}

/// One `linux.namespaces` entry.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Namespace {
    /// `pid`, `mount`, `user`, ...
    #[serde(rename = "type")]
    pub kind: String,
}

/// Reads at most `limit` bytes from `r`; more is an error, not a truncation.
pub fn read_bounded(r: impl Read, limit: u64, what: &str) -> Result<Vec<u8>, OciError> {
    read_bounded_sized(r, limit, 0, what)
}

/// [`read_bounded`] into a buffer made for `size` bytes (a file's length): one read, where
/// growing from empty took ten for a 4 KiB `config.json`.
fn read_bounded_sized(
    r: impl Read,
    limit: u64,
    size: u64,
    what: &str,
) -> Result<Vec<u8>, OciError> {
    // One byte more than the file: the read that finds its end needs room.
    let capacity = usize::try_from(size.min(limit).saturating_add(1)).unwrap_or(0);
    let mut buf = Vec::with_capacity(capacity);
    r.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|source| OciError::Read {
            what: what.to_owned(),
            source,
        })?;
    if buf.len() as u64 > limit {
        return Err(OciError::TooLarge {
            what: what.to_owned(),
            limit,
        });
    }
    Ok(buf)
}

impl State {
    /// Parses and checks the state a hook got on stdin.
    pub fn parse(bytes: &[u8]) -> Result<Self, OciError> {
        let what = "OCI state on stdin";
        let state: State = serde_json::from_slice(bytes).map_err(|e| OciError::Parse {
            what: what.into(),
            message: e.to_string(),
        })?;
        check_oci_version(&state.oci_version, what)?;
        if !state.bundle.is_absolute() {
            return Err(OciError::Invalid {
                what: what.into(),
                problem: format!("bundle {} is not an absolute path", state.bundle.display()),
            });
        }
        Ok(state)
    }

    /// Whether the container is between create and start, where the hook runs: status
    /// `creating`, as the runtime spec and runc pass it to `prestart` and `createRuntime` hooks,
    /// or `created`, as crun passes it to them; with the pid of its init process. A hook
    /// configured at `poststart` or `poststop` sees `running` or `stopped`.
    pub fn is_being_created(&self) -> bool {
        matches!(self.status.as_str(), "creating" | "created") && self.pid > 0
    }
}

/// Reads `<bundle>/config.json` (bounded); returns its path, a name for messages and its bytes.
pub fn read_spec_bytes(bundle: &Path) -> Result<(PathBuf, String, Vec<u8>), OciError> {
    let path = bundle.join("config.json");
    let what = path.display().to_string();
    let file = std::fs::File::open(&path).map_err(|source| OciError::Read {
        what: what.clone(),
        source,
    })?;
    let size = file.metadata().map_or(0, |m| m.len());
    let bytes = read_bounded_sized(file, MAX_SPEC_BYTES, size, &what)?;
    Ok((path, what, bytes))
}

/// The container as the shim reads it: its `config.json` alone.
impl devinject_admission::admit::Container for Spec {
    fn env_entries(&self) -> &[String] {
        self.process.as_ref().map_or(&[], |p| &p.env)
    }

    fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }
}

impl Spec {
    /// Reads and parses `<bundle>/config.json`.
    pub fn load(bundle: &Path) -> Result<Self, OciError> {
        let (_, what, bytes) = read_spec_bytes(bundle)?;
        Self::parse(&bytes, &what)
    }

    /// Parses spec bytes; `what` names the source in messages.
    pub fn parse(bytes: &[u8], what: &str) -> Result<Self, OciError> {
        let spec: Spec = serde_json::from_slice(bytes).map_err(|e| OciError::Parse {
            what: what.into(),
            message: e.to_string(),
        })?;
        check_oci_version(&spec.oci_version, what)?;
        Ok(spec)
    }

    /// The rootfs path, made absolute against the bundle.
    pub fn rootfs(&self, bundle: &Path) -> Result<PathBuf, OciError> {
        let root = self.root.as_ref().ok_or_else(|| OciError::Invalid {
            what: "config.json".into(),
            problem: "has no root.path".into(),
        })?;
        Ok(if root.path.is_absolute() {
            root.path.clone()
        } else {
            bundle.join(&root.path)
        })
    }

    /// The value of env variable `name` in `process.env` (the last one wins, as in execve).
    pub fn env(&self, name: &str) -> Option<&str> {
        env_value(&self.process.as_ref()?.env, name)
    }

    /// The `linux.devices` entry at container path `path`, as a node (its host path is the
    /// container path: the runtime made it already).
    pub fn device_node(&self, path: &Path) -> Result<DeviceNode, OciError> {
        let invalid = |problem: String| OciError::Invalid {
            what: format!("linux.devices entry {}", path.display()),
            problem,
        };
        let entry = self
            .linux
            .as_ref()
            .and_then(|l| l.devices.as_ref())
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .find(|d| d.get("path").and_then(serde_json::Value::as_str) == path.to_str())
            .ok_or_else(|| invalid("config.json has none".into()))?;
        let d = LinuxDevice::deserialize(entry).map_err(|e| invalid(e.to_string()))?;
        // OCI's `u` is an unbuffered character device; `p` (a FIFO) is not a device.
        let kind = match d.kind.as_str() {
            "u" => DeviceKind::Char,
            other => DeviceKind::from_letter(other)
                .ok_or_else(|| invalid(format!("type {:?} is not a device", Excerpt(other))))?,
        };
        let number = |n: i64, what: &str| {
            u32::try_from(n).map_err(|_| invalid(format!("{what} number {n} is out of range")))
        };
        Ok(DeviceNode {
            host_path: d.path.clone(),
            container_path: d.path.clone(),
            kind,
            major: number(d.major, "major")?,
            minor: number(d.minor, "minor")?,
            mode: d.file_mode.unwrap_or(0o666) & 0o7777,
            uid: d.uid.unwrap_or(0),
            gid: d.gid.unwrap_or(0),
        })
    }

    /// True when the container gets its own user namespace.
    pub fn has_user_namespace(&self) -> bool {
        self.linux
            .as_ref()
            .is_some_and(|l| l.namespaces.iter().any(|n| n.kind == "user"))
    }
}

/// Accepts runtime-spec 1.x; anything else is refused rather than guessed at.
fn check_oci_version(v: &str, what: &str) -> Result<(), OciError> {
    if v.starts_with("1.") {
        Ok(())
    } else {
        Err(OciError::Invalid {
            what: what.into(),
            problem: format!(
                "ociVersion {:?} is not supported: devinject understands 1.x",
                Excerpt(v)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of the state and the spec are quoted escaped: ESC, a C1 control and a bidi
    /// override appear as their escapes, never as themselves.
    #[test]
    fn values_quoted_from_the_state_and_spec_are_escaped() {
        let state = r#"{"ociVersion":"2\u001b[2J\u0085\u202e","id":"c","status":"creating","pid":1,"bundle":"/b"}"#;
        let e = State::parse(state.as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains(r#"ociVersion "2\u{1b}[2J\u{85}\u{202e}" is not supported"#),
            "{e}"
        );
        let spec = r#"{"ociVersion":"1.1.0","linux":{"devices":[{"path":"/dev/x","type":"\u001b\u009b\u202e"}]}}"#;
        let s = Spec::parse(spec.as_bytes(), "t").unwrap();
        let e = s.device_node(Path::new("/dev/x")).unwrap_err().to_string();
        assert!(
            e.contains(r#"type "\u{1b}\u{9b}\u{202e}" is not a device"#),
            "{e}"
        );
        let bad = r#"{"ociVersion":"1.1.0","id":"c","status":"creating","pid":"\u001b\u0085\u202e","bundle":"/b"}"#;
        let e = State::parse(bad.as_bytes()).unwrap_err().to_string();
        for c in ['\u{1b}', '\u{85}', '\u{202e}'] {
            assert!(!e.contains(c), "{e:?}");
        }
    }

    #[test]
    fn reads_the_user_and_a_device_entry_as_a_node() {
        let s = Spec::parse(
            br#"{"ociVersion":"1.1.0","process":{"user":{"uid":1000,"gid":1000,"additionalGids":[44]}},
                "linux":{"devices":[{"path":"/dev/dri/renderD128","type":"c","major":226,"minor":128,"fileMode":8624,"gid":107},
                                    {"path":"/dev/p","type":"p"}]}}"#,
            "t",
        )
        .unwrap();
        let user = &s.process.as_ref().unwrap().user;
        assert!(user.lacks_group(107));
        assert!(!user.lacks_group(44) && !user.lacks_group(1000));
        assert!(!User::default().lacks_group(107), "root lacks nothing");
        let n = s.device_node(Path::new("/dev/dri/renderD128")).unwrap();
        assert_eq!(
            (n.kind, n.major, n.minor, n.mode, n.uid, n.gid),
            (DeviceKind::Char, 226, 128, 0o660, 0, 107)
        );
        let missing = s.device_node(Path::new("/dev/none")).unwrap_err();
        assert!(missing.to_string().contains("/dev/none"), "{missing}");
        let fifo = s.device_node(Path::new("/dev/p")).unwrap_err();
        assert!(fifo.to_string().contains("not a device"), "{fifo}");
        // A malformed list does not fail the parse: whoever edits it names it.
        let odd = Spec::parse(
            br#"{"ociVersion":"1.1.0","linux":{"devices":{"a":1}}}"#,
            "t",
        )
        .expect("parses");
        assert!(odd.device_node(Path::new("/dev/a")).is_err());
    }

    /// runc passes `creating` to a createRuntime hook, crun `created` (and its own `root`
    /// field); a hook at poststart or poststop, or a state without the init's pid, is not
    /// between create and start.
    #[test]
    fn a_container_is_being_created_in_runc_and_crun_states_only() {
        let runc = br#"{"ociVersion":"1.2.1","id":"c","status":"creating","pid":42,"bundle":"/b"}"#;
        let crun = br#"{"ociVersion":"1.0","id":"c","pid":42,"root":"/b/rootfs","bundle":"/b","status":"created","annotations":{}}"#;
        for bytes in [&runc[..], &crun[..]] {
            let state = State::parse(bytes).unwrap();
            assert!(state.is_being_created(), "{state:?}");
        }
        for (status, pid) in [
            ("running", 42),
            ("stopped", 42),
            ("creating", 0),
            ("created", -1),
        ] {
            let state = State::parse(
                format!(r#"{{"ociVersion":"1.0.2","id":"c","status":"{status}","pid":{pid},"bundle":"/b"}}"#)
                    .as_bytes(),
            )
            .unwrap();
            assert!(!state.is_being_created(), "{state:?}");
        }
    }

    #[test]
    fn parses_runc_state() {
        let s = State::parse(
            br#"{"ociVersion":"1.0.2-dev","id":"c1","status":"creating","pid":42,"bundle":"/b","annotations":{"a":"b"}}"#,
        )
        .unwrap();
        assert_eq!((s.pid, s.status.as_str()), (42, "creating"));
    }

    #[test]
    fn malformed_state_is_an_error() {
        for bad in [
            &b"{"[..],
            b"",
            b"garbage",
            br#"{"ociVersion":"1.0.0","id":"c","status":"creating","bundle":"rel"}"#,
            br#"{"ociVersion":"2.0.0","id":"c","status":"creating","bundle":"/b"}"#,
            br#"{"ociVersion":"1.0.0","id":"c","status":"creating"}"#,
        ] {
            assert!(
                State::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn bounded_reads_refuse_oversize_input() {
        let big = [b' '; 100];
        assert!(read_bounded(&big[..], 99, "x").is_err());
        assert_eq!(read_bounded(&big[..], 100, "x").unwrap().len(), 100);
        // A size hint that is wrong either way (a file that grew or shrank since its length was
        // read) changes neither the bytes nor the bound.
        for size in [0, 5, 100, 1000, u64::MAX] {
            assert!(read_bounded_sized(&big[..], 99, size, "x").is_err());
            assert_eq!(
                read_bounded_sized(&big[..], 100, size, "x").unwrap(),
                big.to_vec()
            );
        }
    }

    #[test]
    fn spec_env_rootfs_and_userns() {
        let s = Spec::parse(
            br#"{"ociVersion":"1.1.0","root":{"path":"rootfs"},"process":{"env":["A=1","DEMO_VISIBLE_DEVICES=0","DEMO_VISIBLE_DEVICES=1,2"]},"linux":{"namespaces":[{"type":"user"}]},"newField":{"x":1}}"#,
            "t",
        )
        .unwrap();
        assert_eq!(s.env("DEMO_VISIBLE_DEVICES"), Some("1,2"));
        assert_eq!(s.env("DEMO"), None);
        assert_eq!(
            s.rootfs(Path::new("/b")).unwrap(),
            PathBuf::from("/b/rootfs")
        );
        assert!(s.has_user_namespace());
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;

    /// A JSON value of any shape, small.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..4).prop_map(Value::Array),
                btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A value for `field`: usually the right type, sometimes anything.
    fn field(good: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Value>> {
        proptest::option::weighted(0.9, prop_oneof![8 => good, 1 => any_json()])
    }

    fn state_json() -> impl Strategy<Value = Value> {
        (
            field(
                prop_oneof!["1\\.[0-9]\\.[0-9]", "[0-9.a-z-]{0,8}"]
                    .prop_map(Value::String)
                    .boxed(),
            ),
            field(".{0,20}".prop_map(Value::String).boxed()),
            field(
                prop_oneof![Just("creating"), Just("created"), Just("running")]
                    .prop_map(|s| json!(s))
                    .boxed(),
            ),
            field(any::<i64>().prop_map(|n| json!(n)).boxed()),
            field(
                prop_oneof!["/[a-z/]{0,20}", "[a-z/.]{0,20}"]
                    .prop_map(Value::String)
                    .boxed(),
            ),
            field(
                btree_map(".{0,10}", ".{0,10}", 0..4)
                    .prop_map(|m| json!(m))
                    .boxed(),
            ),
            btree_map("[a-z]{1,8}", any_json(), 0..3),
        )
            .prop_map(|(v, id, status, pid, bundle, ann, extra)| {
                let mut o = serde_json::Map::new();
                for (k, val) in [
                    ("ociVersion", v),
                    ("id", id),
                    ("status", status),
                    ("pid", pid),
                    ("bundle", bundle),
                    ("annotations", ann),
                ] {
                    if let Some(val) = val {
                        o.insert(k.into(), val);
                    }
                }
                for (k, val) in extra {
                    o.entry(k).or_insert(val);
                }
                Value::Object(o)
            })
    }

    proptest! {
        #[test]
        fn state_parser_never_panics_on_bytes(bytes in vec(any::<u8>(), 0..256)) {
            let _ = State::parse(&bytes);
        }

        #[test]
        fn state_parser_checks_what_it_accepts(state in state_json()) {
            let bytes = serde_json::to_vec(&state).unwrap();
            match State::parse(&bytes) {
                Ok(s) => {
                    prop_assert!(s.oci_version.starts_with("1."));
                    prop_assert!(s.bundle.is_absolute());
                    prop_assert_eq!(json!(s.id), state["id"].clone());
                    prop_assert_eq!(json!(s.bundle), state["bundle"].clone());
                    if let Some(pid) = state.get("pid") {
                        prop_assert_eq!(json!(s.pid), pid.clone());
                    }
                }
                Err(OciError::Invalid { problem, .. }) => {
                    // The offending value is named.
                    let version = state["ociVersion"].as_str().unwrap_or_default();
                    let bundle = state["bundle"].as_str().unwrap_or_default();
                    prop_assert!(
                        problem.contains(&format!("{version:?}")) || problem.contains(bundle),
                        "{}", problem
                    );
                }
                Err(e) => prop_assert!(matches!(e, OciError::Parse { .. }), "{}", e),
            }
        }

        #[test]
        fn spec_parser_never_panics(bytes in vec(any::<u8>(), 0..256), spec in any_json()) {
            let _ = Spec::parse(&bytes, "t");
            let mut wrapped = json!({"ociVersion": "1.0.2"});
            if let Value::Object(m) = spec {
                for (k, v) in m {
                    wrapped[k] = v;
                }
            }
            if let Ok(s) = Spec::parse(&serde_json::to_vec(&wrapped).unwrap(), "t") {
                let _ = s.rootfs(Path::new("/b"));
                let _ = s.has_user_namespace();
                let _ = s.env("DEMO_VISIBLE_DEVICES");
            }
        }

        #[test]
        fn spec_env_is_the_last_exact_entry(
            env in vec(("(A|AB|A_B|B)", proptest::option::of("[a-z=]{0,4}")), 0..8),
            name in "(A|AB|A_B|B)",
        ) {
            let entries: Vec<String> = env
                .iter()
                .map(|(k, v)| v.as_ref().map_or(k.clone(), |v| format!("{k}={v}")))
                .collect();
            let spec = Spec::parse(
                &serde_json::to_vec(&json!({"ociVersion": "1.1.0", "process": {"env": entries}})).unwrap(),
                "t",
            )
            .unwrap();
            let expected = env
                .iter()
                .rev()
                .find(|(k, v)| k == &name && v.is_some())
                .and_then(|(_, v)| v.as_deref());
            prop_assert_eq!(spec.env(&name), expected);
        }

        #[test]
        fn rootfs_is_inside_the_bundle_when_relative(path in "[a-z]{1,8}(/[a-z]{1,8})?", abs in any::<bool>()) {
            let p = if abs { format!("/{path}") } else { path.clone() };
            let spec = Spec::parse(
                &serde_json::to_vec(&json!({"ociVersion": "1.1.0", "root": {"path": p}})).unwrap(),
                "t",
            )
            .unwrap();
            let root = spec.rootfs(Path::new("/bundle")).unwrap();
            if abs {
                prop_assert_eq!(root, PathBuf::from(format!("/{path}")));
            } else {
                prop_assert_eq!(root, Path::new("/bundle").join(&path));
            }
        }
    }
}
