//! The spec applier: writes a plan into `config.json`, edited as generic JSON.
//!
//! Only the arrays we own grow; every other field, known or not, stays as it was (serde_json
//! with `preserve_order` keeps key order), so a newer runtime spec is not broken. Devices go into
//! both `linux.devices` and `linux.resources.devices`: the runtime then creates and allows them
//! itself, and re-applying the cgroup (`docker update`, `runc update`, systemd reloads) keeps them.
//!
//! Files (libraries, tools) are not spec mounts: their destinations are in directories the image
//! controls (`/usr/lib`, `/usr/bin`), and a runtime resolving them by path can be raced into
//! creating files on the host (runc before 1.1.14 creates a missing bind-mount target with
//! `os.MkdirAll` + `O_CREAT` on a path it resolved earlier: CVE-2024-45310; our
//! `hostile_race` test reproduces it with runc 1.1.5). The finish hook mounts them instead, with
//! the same fd-based applier as the hook (`openat2(RESOLVE_IN_ROOT)`, `move_mount` onto the fd),
//! together with the soname links and the linker cache. Device nodes stay in the spec: the
//! runtime creates them in its own `/dev` tmpfs, which the image cannot reach into.

use std::path::{Path, PathBuf};

pub use devinject_devices::GroupAccess;
use devinject_devices::{merge_env, ContainerEdits, FinishArgs, FinishInvocation, HookCommand};
use serde_json::{json, Map, Value};

/// Why the spec could not be edited.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecEditError {
    /// A field we must extend has the wrong JSON type.
    #[error("config.json field {field} is not {expected}")]
    Shape {
        /// Dotted field name.
        field: &'static str,
        /// The JSON type we need.
        expected: &'static str,
    },
    /// The container already has a different device at a path we would use.
    #[error("config.json already has device {path} as {existing}, but the request needs {wanted}: remove the --device flag or the request")]
    DeviceConflict {
        /// Container path.
        path: String,
        /// What is there.
        existing: String,
        /// What we need.
        wanted: String,
    },
    /// A node would be made by the runtime in a volume the spec mounts.
    #[error(transparent)]
    NodeInVolume(#[from] devinject_devices::node_volume::NodeInVolume),
}

fn object<'a>(
    v: &'a mut Value,
    key: &str,
    field: &'static str,
) -> Result<&'a mut Map<String, Value>, SpecEditError> {
    let map = v.as_object_mut().ok_or(SpecEditError::Shape {
        field,
        expected: "an object",
    })?;
    let entry = map.entry(key).or_insert_with(|| json!({}));
    if entry.is_null() {
        *entry = json!({});
    }
    entry.as_object_mut().ok_or(SpecEditError::Shape {
        field,
        expected: "an object",
    })
}

fn array<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<&'a mut Vec<Value>, SpecEditError> {
    let entry = map.entry(key).or_insert_with(|| json!([]));
    if entry.is_null() {
        *entry = json!([]);
    }
    entry.as_array_mut().ok_or(SpecEditError::Shape {
        field,
        expected: "an array",
    })
}

/// Applies `edits` to `spec`. `request_envs` are the request variables whose values we may
/// overwrite with the canonical granted list; other env keys the user set are kept. `finish` is
/// the createRuntime hook entry for links and the linker cache, when one is needed.
pub fn apply(
    spec: &mut Value,
    edits: &ContainerEdits,
    request_envs: &[&str],
    finish: Option<Value>,
) -> Result<(), SpecEditError> {
    let userns = has_user_namespace(spec);
    check_node_volumes(spec, edits)?;
    {
        let linux = object(spec, "linux", "linux")?;
        let devices = array(linux, "devices", "linux.devices")?;
        for n in &edits.device_nodes {
            let path = n.container_path.to_string_lossy().into_owned();
            let existing = devices
                .iter()
                .find(|d| d.get("path").and_then(Value::as_str) == Some(&path));
            if let Some(d) = existing {
                let same = d.get("type").and_then(Value::as_str) == Some(n.kind.as_str())
                    && d.get("major").and_then(Value::as_u64) == Some(u64::from(n.major))
                    && d.get("minor").and_then(Value::as_u64) == Some(u64::from(n.minor));
                if same {
                    continue;
                }
                return Err(SpecEditError::DeviceConflict {
                    path,
                    existing: format!(
                        "{} {}:{}",
                        d.get("type").and_then(Value::as_str).unwrap_or("?"),
                        d["major"],
                        d["minor"]
                    ),
                    wanted: format!("{} {}:{}", n.kind, n.major, n.minor),
                });
            }
            if userns {
                // In a user namespace the runtime would bind the host node, which the namespace
                // sees owned by nobody: the finish step makes a copy the container owns
                // (`GroupAccess::OwnedCopies`).
                continue;
            }
            devices.push(json!({
                "path": path,
                "type": n.kind.as_str(),
                "major": n.major,
                "minor": n.minor,
                "fileMode": n.mode,
                "uid": n.uid,
                "gid": n.gid,
            }));
        }
        let linux_value = spec.get_mut("linux").ok_or(SpecEditError::Shape {
            field: "linux",
            expected: "an object",
        })?;
        let resources = object(linux_value, "resources", "linux.resources")?;
        let rules = array(resources, "devices", "linux.resources.devices")?;
        for r in &edits.cgroup_rules {
            let rule = json!({
                "allow": true,
                "type": r.kind.as_str(),
                "major": r.major,
                "minor": r.minor,
                "access": r.access.to_string(),
            });
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    // A non-root process needs the groups that own group-only nodes. Not in a user namespace:
    // there the host's gid may not be mapped, and setgroups would fail the start; the finish
    // step gives each node's copy the process's own group instead.
    let gids = edits.additional_gids();
    if !gids.is_empty() && !userns {
        object(spec, "process", "process")?;
        let process = spec.get_mut("process").ok_or(SpecEditError::Shape {
            field: "process",
            expected: "an object",
        })?;
        let user = object(process, "user", "process.user")?;
        let list = array(user, "additionalGids", "process.user.additionalGids")?;
        for gid in gids {
            if !list.iter().any(|g| g.as_u64() == Some(u64::from(gid))) {
                list.push(json!(gid));
            }
        }
    }
    {
        let process = object(spec, "process", "process")?;
        let env = array(process, "env", "process.env")?;
        merge_env(
            env,
            Value::as_str,
            |var| json!(var.entry()),
            &edits.env,
            request_envs,
        );
    }
    if let Some(hook) = finish {
        let hooks = object(spec, "hooks", "hooks")?;
        let list = array(hooks, "createRuntime", "hooks.createRuntime")?;
        if !list.contains(&hook) {
            list.push(hook);
        }
    }
    Ok(())
}

/// Refuses nodes the runtime would make in a volume the spec mounts (see
/// [`devinject_devices::node_volume`]); a spec whose `mounts` are not entries of that shape says
/// nothing, and is left to the runtime's own checks.
fn check_node_volumes(spec: &Value, edits: &ContainerEdits) -> Result<(), SpecEditError> {
    use devinject_devices::node_volume::{check_edits, SpecMount};
    let Some(mounts) = spec.get("mounts").and_then(Value::as_array) else {
        return Ok(());
    };
    let mounts: Vec<SpecMount<'_>> = mounts
        .iter()
        .filter_map(|m| {
            let options = m.get("options").and_then(Value::as_array);
            Some(SpecMount::new(
                m.get("destination")?.as_str()?,
                m.get("type").and_then(Value::as_str).unwrap_or(""),
                options.into_iter().flatten().filter_map(Value::as_str),
            ))
        })
        .collect();
    check_edits(edits, &mounts)?;
    Ok(())
}

/// Whether `spec` gives the container a user namespace of its own.
pub fn has_user_namespace(spec: &Value) -> bool {
    spec.pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .is_some_and(|ns| ns.iter().any(|n| n.get("type") == Some(&json!("user"))))
}

/// The createRuntime hook entry that mounts the plan's files read-only, makes soname links,
/// refreshes the linker cache and, with [`GroupAccess::NodeGroup`], gives group-only nodes to
/// the process's group; `None` when there is none of these to do. A relative `config` is taken
/// in this process's working directory, where it was read.
pub fn finish_hook(
    hook: &Path,
    config: Option<&Path>,
    edits: &ContainerEdits,
    access: GroupAccess,
) -> Option<Value> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    HookCommand::new(hook, config, &cwd)
        .finish(FinishArgs::after_runtime(edits, access))
        .as_ref()
        .map(oci_hook)
}

/// `finish` as an OCI runtime spec hook entry (`path`, `args`, `env`, `timeout`).
pub fn oci_hook(finish: &FinishInvocation) -> Value {
    json!({
        "path": finish.path(),
        "args": finish.argv(),
        "env": finish.env(),
        "timeout": finish.timeout_secs(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use devinject_devices::{DeviceKind, DeviceNode, EnvVar, Mount, MountKind, Symlink};

    pub(super) fn edits() -> ContainerEdits {
        let node = DeviceNode {
            host_path: PathBuf::from("/h/dev/demo/accel0"),
            container_path: PathBuf::from("/dev/demo/accel0"),
            kind: DeviceKind::Char,
            major: 10,
            minor: 237,
            mode: 0o666,
            uid: 0,
            gid: 0,
        };
        ContainerEdits {
            env: vec![
                EnvVar::new("DEMO_VISIBLE_DEVICES", "0"),
                EnvVar::new("DEMO_DRIVER_VERSION", "1.0"),
                EnvVar::new("KEEP", "ours"),
            ],
            cgroup_rules: vec![node.rule()],
            device_nodes: vec![node],
            mounts: vec![Mount {
                host_path: PathBuf::from("/h/lib/libdemo.so.1.0.0"),
                container_path: PathBuf::from("/usr/lib/libdemo.so.1.0.0"),
                kind: MountKind::Library,
            }],
            symlinks: vec![Symlink {
                link: PathBuf::from("/usr/lib/libdemo.so.1"),
                target: "libdemo.so.1.0.0".into(),
            }],
            ldcache_dirs: vec![PathBuf::from("/usr/lib")],
            forward_compat: None,
        }
    }

    const SPEC: &str = r#"{"ociVersion":"1.0.2","zzz":{"future":true},"process":{"env":["PATH=/bin","DEMO_VISIBLE_DEVICES= 0","KEEP=user"]},"root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc"}],"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[]}}"#;

    #[test]
    fn applies_devices_rules_env_and_the_finish_hook_with_the_files() {
        let mut spec: Value = serde_json::from_str(SPEC).unwrap();
        let e = edits();
        let hook = finish_hook(
            Path::new("/opt/devinject/bin/devinject-hook"),
            None,
            &e,
            GroupAccess::ProcessGroups,
        );
        apply(&mut spec, &e, &["DEMO_VISIBLE_DEVICES"], hook).unwrap();
        assert_eq!(spec["linux"]["devices"][0]["path"], "/dev/demo/accel0");
        assert_eq!(spec["linux"]["devices"][0]["fileMode"], 0o666);
        assert_eq!(
            spec["linux"]["resources"]["devices"][1],
            json!({"allow":true,"type":"c","major":10,"minor":237,"access":"rwm"})
        );
        assert_eq!(
            spec["linux"]["resources"]["devices"][0]["allow"], false,
            "the runtime's deny-all stays first"
        );
        assert_eq!(
            spec["mounts"],
            json!([{"destination":"/proc","type":"proc"}]),
            "files are mounted by the finish hook, never by the runtime"
        );
        let env: Vec<&str> = spec["process"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            env,
            [
                "PATH=/bin",
                "DEMO_VISIBLE_DEVICES=0",
                "KEEP=user",
                "DEMO_DRIVER_VERSION=1.0"
            ]
        );
        let args = &spec["hooks"]["createRuntime"][0]["args"];
        assert_eq!(args[1], "finish");
        assert_eq!(
            args.as_array().unwrap()[2..5],
            [
                json!("--library"),
                json!("/h/lib/libdemo.so.1.0.0"),
                json!("/usr/lib/libdemo.so.1.0.0")
            ]
        );
        assert_eq!(args[6], "/usr/lib/libdemo.so.1=libdemo.so.1.0.0");
        assert_eq!(spec["hooks"]["createRuntime"][0]["env"], json!([]));
        // Unknown fields and key order survive.
        let text = serde_json::to_string(&spec).unwrap();
        assert!(
            text.starts_with(r#"{"ociVersion":"1.0.2","zzz":{"future":true},"process""#),
            "{text}"
        );
    }

    /// In a user namespace the runtime would bind each node from the host, seen owned by nobody:
    /// the spec names none of them (the finish step makes copies the container owns), only
    /// their cgroup rules, and the finish hook names every node's host path with the device
    /// decided for it, which the step makes (and checks the path against) at createRuntime.
    #[test]
    fn in_a_user_namespace_nodes_are_left_to_the_finish_step() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","mounts":[],"linux":{"namespaces":[{"type":"user"}]}}"#,
        )
        .unwrap();
        assert!(has_user_namespace(&spec));
        let mut e = edits();
        let mut same_path = e.device_nodes[0].clone();
        same_path.host_path = PathBuf::from("/dev/demo/ctl");
        same_path.container_path = PathBuf::from("/dev/demo/ctl");
        e.device_nodes.push(same_path);
        let hook = finish_hook(Path::new("/hook"), None, &e, GroupAccess::OwnedCopies);
        apply(&mut spec, &e, &[], hook).unwrap();
        assert_eq!(spec["mounts"], json!([]));
        assert_eq!(spec["linux"]["devices"], json!([]));
        assert_eq!(spec["linux"]["resources"]["devices"][0]["minor"], 237);
        let args = spec["hooks"]["createRuntime"][0]["args"]
            .as_array()
            .unwrap();
        let nodes: Vec<(&str, &str)> = args
            .windows(3)
            .filter(|w| w[0] == "--node")
            .filter_map(|w| w[1].as_str().zip(w[2].as_str()))
            .collect();
        assert_eq!(
            nodes,
            [
                ("/h/dev/demo/accel0", "c 10:237"),
                ("/dev/demo/ctl", "c 10:237")
            ]
        );
    }

    /// Two render-like nodes of group 107 and one of group 44, next to a world-usable one.
    fn group_owned_edits() -> ContainerEdits {
        let mut e = edits();
        for (i, (mode, gid)) in [(0o660, 107), (0o660, 107), (0o640, 44)]
            .into_iter()
            .enumerate()
        {
            let mut n = e.device_nodes[0].clone();
            n.container_path = PathBuf::from(format!("/dev/dri/renderD{}", 128 + i));
            n.host_path = n.container_path.clone();
            (n.mode, n.gid) = (mode, gid);
            e.device_nodes.push(n);
        }
        e
    }

    #[test]
    fn group_owned_nodes_add_their_groups_once_to_the_user_it_already_has() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000,"additionalGids":[44]}}}"#,
        )
        .unwrap();
        let e = group_owned_edits();
        apply(&mut spec, &e, &[], None).unwrap();
        assert_eq!(
            spec["process"]["user"],
            json!({"uid": 1000, "gid": 1000, "additionalGids": [44, 107]})
        );
        let once = spec.clone();
        apply(&mut spec, &e, &[], None).unwrap();
        assert_eq!(spec, once, "applying twice adds nothing");

        // World-usable nodes add no group.
        let mut plain: Value = serde_json::from_str(SPEC).unwrap();
        apply(&mut plain, &edits(), &[], None).unwrap();
        assert!(plain["process"].get("user").is_none(), "{plain}");
    }

    #[test]
    fn in_a_user_namespace_no_host_group_is_added() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","process":{"user":{"uid":1000,"gid":1000}},"linux":{"namespaces":[{"type":"user"}]}}"#,
        )
        .unwrap();
        apply(&mut spec, &group_owned_edits(), &[], None).unwrap();
        assert_eq!(spec["process"]["user"], json!({"uid": 1000, "gid": 1000}));
    }

    /// Regression: only the first copy of a request variable was rewritten to the granted list;
    /// a later copy, the one the process sees, kept what the user wrote.
    #[test]
    fn duplicate_request_variables_kept_the_users_last_copy() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","process":{"env":["DEMO_VISIBLE_DEVICES=0","A=1","DEMO_VISIBLE_DEVICES=all","DEMO_VISIBLE_DEVICES=1"]}}"#,
        )
        .unwrap();
        apply(&mut spec, &edits(), &["DEMO_VISIBLE_DEVICES"], None).unwrap();
        assert_eq!(
            spec["process"]["env"],
            json!([
                "DEMO_VISIBLE_DEVICES=0",
                "A=1",
                "DEMO_DRIVER_VERSION=1.0",
                "KEEP=ours"
            ])
        );
    }

    #[test]
    fn for_nri_the_finish_hook_names_the_group_only_nodes() {
        let mut e = ContainerEdits {
            device_nodes: edits().device_nodes,
            ..ContainerEdits::default()
        };
        let hook = Path::new("/hook");
        assert!(
            finish_hook(hook, None, &e, GroupAccess::NodeGroup).is_none(),
            "a world-usable node needs no finish step"
        );
        let mut render = e.device_nodes[0].clone();
        render.container_path = PathBuf::from("/dev/dri/renderD128");
        render.mode = 0o660;
        render.gid = 107;
        e.device_nodes.push(render);
        assert!(finish_hook(hook, None, &e, GroupAccess::ProcessGroups).is_none());
        let h = finish_hook(hook, None, &e, GroupAccess::NodeGroup).unwrap();
        let relative = finish_hook(hook, Some(Path::new("c.toml")), &e, GroupAccess::NodeGroup);
        assert_eq!(
            relative.unwrap()["args"][2],
            json!(std::env::current_dir().unwrap().join("c.toml")),
            "a relative --config is made absolute for the hook"
        );
        let args: Vec<&str> = h["args"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(
            args,
            [
                "devinject-hook",
                "finish",
                "--group-node",
                "/dev/dri/renderD128"
            ]
        );
    }

    #[test]
    fn applying_twice_changes_nothing() {
        let mut spec: Value = serde_json::from_str(SPEC).unwrap();
        let e = edits();
        let hook = finish_hook(Path::new("/hook"), None, &e, GroupAccess::ProcessGroups);
        apply(&mut spec, &e, &["DEMO_VISIBLE_DEVICES"], hook.clone()).unwrap();
        let once = spec.clone();
        apply(&mut spec, &e, &["DEMO_VISIBLE_DEVICES"], hook).unwrap();
        assert_eq!(spec, once);
    }

    #[test]
    fn device_conflict_message_shows_the_type_unquoted() {
        // Found by the property tests: the existing type was printed as JSON, `"c" 1:3`.
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","linux":{"devices":[{"path":"/dev/demo/accel0","type":"c","major":1,"minor":3}]}}"#,
        )
        .unwrap();
        let err = apply(&mut spec, &edits(), &[], None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("as c 1:3, but the request needs c 10:237"),
            "{err}"
        );
    }

    #[test]
    fn conflicting_device_and_bad_shapes_are_errors() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","linux":{"devices":[{"path":"/dev/demo/accel0","type":"c","major":1,"minor":3}]}}"#,
        )
        .unwrap();
        let err = apply(&mut spec, &edits(), &[], None).unwrap_err();
        assert!(matches!(err, SpecEditError::DeviceConflict { .. }), "{err}");
        let mut spec: Value =
            serde_json::from_str(r#"{"ociVersion":"1.0.2","process":{"env":{}}}"#).unwrap();
        let err = apply(&mut spec, &edits(), &[], None).unwrap_err();
        assert_eq!(
            err,
            SpecEditError::Shape {
                field: "process.env",
                expected: "an array"
            }
        );
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default): for any
    //! spec and any plan, `apply` never panics; when it succeeds, applying again changes
    //! nothing, every field it does not own is kept as it was, the arrays it extends keep
    //! their old entries in front, and every edit is in the result.

    use std::path::PathBuf;

    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;
    use devinject_devices::{DeviceKind, DeviceNode, EnvVar, Mount, MountKind, Symlink};

    const REQUEST_ENV: &str = "DEMO_VISIBLE_DEVICES";

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z/=]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..3).prop_map(Value::Array),
                btree_map("[a-z]{1,6}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// `good` most of the time, any JSON (often the wrong type) otherwise, or absent.
    fn slot(good: BoxedStrategy<Value>) -> impl Strategy<Value = Option<Value>> {
        proptest::option::weighted(0.8, prop_oneof![6 => good, 1 => any_json()])
    }

    fn object(pairs: Vec<(&str, Option<Value>)>, extra: Vec<(String, Value)>) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in extra {
            m.insert(k, v);
        }
        for (k, v) in pairs {
            if let Some(v) = v {
                m.insert(k.to_owned(), v);
            }
        }
        Value::Object(m)
    }

    fn device_entry() -> impl Strategy<Value = Value> {
        ("/dev/x[0-3]", prop_oneof![Just("c"), Just("b")], 0u32..3, 0u32..3).prop_map(
            |(path, t, major, minor)| json!({"path": path, "type": t, "major": major, "minor": minor}),
        )
    }

    fn extras() -> impl Strategy<Value = Vec<(String, Value)>> {
        vec(("z[a-z]{0,5}", any_json()), 0..3)
    }

    /// A runtime spec: the fields `apply` touches, mostly well-formed, plus unknown fields.
    fn spec() -> impl Strategy<Value = Value> {
        let env = vec(
            prop_oneof![
                "(DEMO_VISIBLE_DEVICES|KEEP|A)=[a-z0-9,]{0,4}".prop_map(|s| json!(s)),
                any_json(),
            ],
            0..4,
        )
        .prop_map(Value::Array)
        .boxed();
        let process = (slot(env), extras())
            .prop_map(|(env, extra)| object(vec![("env", env)], extra))
            .boxed();
        let rules = vec(prop_oneof![device_entry(), any_json()], 0..3)
            .prop_map(Value::Array)
            .boxed();
        let resources = (slot(rules), extras())
            .prop_map(|(d, extra)| object(vec![("devices", d)], extra))
            .boxed();
        let devices = vec(prop_oneof![device_entry(), any_json()], 0..3)
            .prop_map(Value::Array)
            .boxed();
        let linux = (slot(devices), slot(resources), extras())
            .prop_map(|(d, r, extra)| object(vec![("devices", d), ("resources", r)], extra))
            .boxed();
        let mounts = vec(
            prop_oneof![
                "/usr/lib/m[0-3]".prop_map(|d| json!({"destination": d, "type": "bind"})),
                any_json(),
            ],
            0..3,
        )
        .prop_map(Value::Array)
        .boxed();
        let hooks = (
            slot(vec(any_json(), 0..2).prop_map(Value::Array).boxed()),
            extras(),
        )
            .prop_map(|(c, extra)| object(vec![("createRuntime", c)], extra))
            .boxed();
        (
            slot(process),
            slot(linux),
            slot(mounts),
            slot(hooks),
            extras(),
        )
            .prop_map(|(process, linux, mounts, hooks, extra)| {
                let mut extra = extra;
                extra.push(("ociVersion".into(), json!("1.0.2")));
                object(
                    vec![
                        ("process", process),
                        ("linux", linux),
                        ("mounts", mounts),
                        ("hooks", hooks),
                    ],
                    extra,
                )
            })
    }

    fn edits() -> impl Strategy<Value = ContainerEdits> {
        let node = ("/dev/x[0-3]", any::<bool>(), 0u32..3, 0u32..3).prop_map(
            |(path, char, major, minor)| DeviceNode {
                host_path: PathBuf::from(format!("/host{path}")),
                container_path: PathBuf::from(path),
                kind: if char {
                    DeviceKind::Char
                } else {
                    DeviceKind::Block
                },
                major,
                minor,
                mode: 0o666,
                uid: 0,
                gid: 0,
            },
        );
        let mount = "/usr/lib/m[0-3]".prop_map(|d| Mount {
            host_path: PathBuf::from(format!("/host{d}")),
            container_path: PathBuf::from(d),
            kind: MountKind::Library,
        });
        (
            vec(
                ("DEMO_VISIBLE_DEVICES|KEEP|NEW", "[a-z0-9,]{0,4}")
                    .prop_map(|(k, v)| EnvVar::new(k, v)),
                0..4,
            ),
            vec(node, 0..4),
            vec(mount, 0..3),
            any::<bool>(),
        )
            .prop_map(|(env, device_nodes, mounts, links)| ContainerEdits {
                env,
                cgroup_rules: device_nodes.iter().map(DeviceNode::rule).collect(),
                device_nodes,
                mounts,
                symlinks: if links {
                    vec![Symlink {
                        link: PathBuf::from("/usr/lib/libx.so.1"),
                        target: "libx.so.1.0".into(),
                    }]
                } else {
                    vec![]
                },
                ldcache_dirs: if links {
                    vec![PathBuf::from("/usr/lib")]
                } else {
                    vec![]
                },
                forward_compat: None,
            })
    }

    /// `new` keeps `old`'s entries in front.
    fn keeps_prefix(old: &Value, new: &Value) -> bool {
        match (old.as_array(), new.as_array()) {
            (Some(o), Some(n)) => n.starts_with(o),
            _ => old == new || old.is_null(),
        }
    }

    /// Every key of `old` except `owned` is unchanged in `new`.
    fn keeps_others(old: &Value, new: &Value, owned: &[&str]) -> Result<(), String> {
        let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
            // Untouched, or a null that became the object the edits needed.
            return if old == new || old.is_null() {
                Ok(())
            } else {
                Err(format!("{old} became {new}"))
            };
        };
        for (k, v) in o {
            if !owned.contains(&k.as_str()) && n.get(k) != Some(v) {
                return Err(format!("{k}: {v} became {:?}", n.get(k)));
            }
        }
        Ok(())
    }

    /// Whether `original` and `e` explain `err` without asking `apply`: a field of the wrong
    /// JSON type, or two different devices at one path.
    fn refusal_is_justified(original: &Value, e: &ContainerEdits, err: &SpecEditError) -> bool {
        match err {
            SpecEditError::Shape { field, expected } => {
                let v = field
                    .split('.')
                    .try_fold(original, |v, k| v.get(k))
                    .unwrap_or(&Value::Null);
                let right = match *expected {
                    "an object" => v.is_object(),
                    "an array" => v.is_array(),
                    _ => false,
                };
                !v.is_null() && !right
            }
            SpecEditError::DeviceConflict { path, .. } => {
                let mut seen: Vec<(String, u64, u64)> = original
                    .pointer("/linux/devices")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|d| d.get("path").and_then(Value::as_str) == Some(path))
                    .map(|d| {
                        let kind = d.get("type").and_then(Value::as_str).unwrap_or("?");
                        let num = |k: &str| d.get(k).and_then(Value::as_u64).unwrap_or(u64::MAX);
                        (kind.to_owned(), num("major"), num("minor"))
                    })
                    .collect();
                for n in e
                    .device_nodes
                    .iter()
                    .filter(|n| n.container_path.to_str() == Some(path))
                {
                    seen.push((n.kind.to_string(), u64::from(n.major), u64::from(n.minor)));
                }
                seen.iter().any(|s| *s != seen[0])
            }
            SpecEditError::NodeInVolume(v) => {
                let covers = |m: &Value| {
                    m.get("destination")
                        .and_then(Value::as_str)
                        .is_some_and(|d| v.node.parent().is_some_and(|p| p.starts_with(d)))
                };
                let mounts = original.get("mounts").and_then(Value::as_array);
                e.device_nodes.iter().any(|n| n.container_path == v.node)
                    && mounts.is_some_and(|ms| ms.iter().any(covers))
            }
        }
    }

    proptest! {
        #[test]
        fn apply_is_safe_idempotent_and_keeps_what_it_does_not_own(
            original in spec(),
            e in edits(),
        ) {
            let hook = finish_hook(Path::new("/opt/devinject/bin/devinject-hook"), None, &e, GroupAccess::ProcessGroups);
            let mut once = original.clone();
            if let Err(err) = apply(&mut once, &e, &[REQUEST_ENV], hook.clone()) {
                // A refusal must be one the input explains, or this case would check nothing.
                prop_assert!(refusal_is_justified(&original, &e, &err), "unjustified: {}", err);
                return Ok(());
            }
            // Idempotent.
            let mut twice = once.clone();
            apply(&mut twice, &e, &[REQUEST_ENV], hook.clone()).unwrap();
            prop_assert_eq!(&twice, &once);

            // Unknown and unowned fields kept, owned arrays only grow at the end.
            let null = Value::Null;
            let at = |v: &Value, path: &[&str]| -> Value {
                path.iter().fold(v, |v, k| v.get(*k).unwrap_or(&null)).clone()
            };
            keeps_others(&original, &once, &["linux", "mounts", "process", "hooks"]).map_err(TestCaseError::fail)?;
            keeps_others(&at(&original, &["linux"]), &at(&once, &["linux"]), &["devices", "resources"]).map_err(TestCaseError::fail)?;
            keeps_others(&at(&original, &["linux", "resources"]), &at(&once, &["linux", "resources"]), &["devices"]).map_err(TestCaseError::fail)?;
            keeps_others(&at(&original, &["process"]), &at(&once, &["process"]), &["env"]).map_err(TestCaseError::fail)?;
            keeps_others(&at(&original, &["hooks"]), &at(&once, &["hooks"]), &["createRuntime"]).map_err(TestCaseError::fail)?;
            for path in [
                &["linux", "devices"][..],
                &["linux", "resources", "devices"],
                &["mounts"],
                &["hooks", "createRuntime"],
            ] {
                prop_assert!(keeps_prefix(&at(&original, path), &at(&once, path)), "{:?}", path);
            }
            // process.env: old entries stay in place; only the request variable may change, and
            // when the edits set it, its later copies go (the granted list replaces every copy
            // the user set).
            let old_env = at(&original, &["process", "env"]);
            let new_env = at(&once, &["process", "env"]);
            if let Some(old_env) = old_env.as_array() {
                let new_env = new_env.as_array().unwrap();
                let is_request =
                    |v: &Value| v.as_str().is_some_and(|s| s.starts_with("DEMO_VISIBLE_DEVICES="));
                let granted = e.env.iter().any(|v| v.name == "DEMO_VISIBLE_DEVICES");
                let mut seen = false;
                let old_env: Vec<&Value> = old_env
                    .iter()
                    .filter(|v| {
                        let later_copy = granted && is_request(v) && seen;
                        seen |= is_request(v);
                        !later_copy
                    })
                    .collect();
                prop_assert!(new_env.len() >= old_env.len());
                for (o, n) in old_env.iter().zip(new_env) {
                    prop_assert!(*o == n || is_request(o), "{} became {}", o, n);
                }
            }

            // Every edit is there.
            let devices = at(&once, &["linux", "devices"]);
            for n in &e.device_nodes {
                let path = n.container_path.to_str().unwrap();
                prop_assert!(devices.as_array().unwrap().iter().any(|d| d["path"] == path
                    && d["major"] == n.major
                    && d["minor"] == n.minor));
            }
            let rules = at(&once, &["linux", "resources", "devices"]);
            for r in &e.cgroup_rules {
                prop_assert!(rules.as_array().unwrap().iter().any(|x| x["allow"] == true
                    && x["major"] == r.major
                    && x["minor"] == r.minor));
            }
            // Files are mounted by the finish hook (fd-based, not runc's path-based spec mounts).
            for m in &e.mounts {
                let dest = json!(m.container_path);
                let args = hook.as_ref().map(|h| h["args"].clone()).unwrap_or(Value::Null);
                prop_assert!(args.as_array().is_some_and(|a| a.contains(&dest)), "{:?} not in {}", dest, args);
            }
            let env = at(&once, &["process", "env"]);
            for var in &e.env {
                let key = format!("{}=", var.name);
                prop_assert!(env.as_array().unwrap().iter().any(|x| x.as_str().is_some_and(|s| s.starts_with(&key))));
            }
            if let Some(h) = hook {
                prop_assert!(at(&once, &["hooks", "createRuntime"]).as_array().unwrap().contains(&h));
            }
        }

        #[test]
        fn shape_errors_name_the_field(
            bad in prop_oneof![Just(json!(1)), Just(json!("x")), Just(json!({"a": 1})), Just(json!(true))],
            at in 0usize..4,
        ) {
            // An object is what `linux` should be: use a number there instead. (`mounts` is
            // only extended for device binds in user namespaces: files go through the finish hook.)
            let bad = if at == 3 && bad.is_object() { json!(1) } else { bad };
            let (mut spec, field) = match at {
                0 => (json!({"linux": {"devices": bad}}), "linux.devices"),
                1 => (json!({"linux": {"resources": {"devices": bad}}}), "linux.resources.devices"),
                2 => (json!({"process": {"env": bad}}), "process.env"),
                _ => (json!({"linux": bad}), "linux"),
            };
            let err = apply(&mut spec, &super::tests::edits(), &[], None).unwrap_err();
            prop_assert!(
                err.to_string().contains(&format!("field {field} is not")),
                "{}", err
            );
        }
    }
}
