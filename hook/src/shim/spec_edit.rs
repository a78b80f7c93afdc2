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

use std::path::Path;

use devinject_devices::{ContainerEdits, NodeKind};
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

fn letter(kind: NodeKind) -> String {
    kind.letter().to_string()
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
    let mut node_binds = Vec::new();
    {
        let linux = object(spec, "linux", "linux")?;
        let devices = array(linux, "devices", "linux.devices")?;
        for n in &edits.device_nodes {
            let path = n.container_path.to_string_lossy().into_owned();
            let existing = devices
                .iter()
                .find(|d| d.get("path").and_then(Value::as_str) == Some(&path));
            if let Some(d) = existing {
                let same = d.get("type").and_then(Value::as_str) == Some(&letter(n.kind))
                    && d.get("major").and_then(Value::as_u64) == Some(u64::from(n.major))
                    && d.get("minor").and_then(Value::as_u64) == Some(u64::from(n.minor));
                if same {
                    continue;
                }
                return Err(SpecEditError::DeviceConflict {
                    path,
                    existing: format!("{} {}:{}", d["type"], d["major"], d["minor"]),
                    wanted: format!("{} {}:{}", n.kind.letter(), n.major, n.minor),
                });
            }
            if userns && n.host_path != n.container_path {
                // In a user namespace the runtime bind-mounts a `linux.devices` node from the
                // host path equal to its container path; ours lives elsewhere (dev_root).
                node_binds.push(n);
                continue;
            }
            devices.push(json!({
                "path": path,
                "type": letter(n.kind),
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
                "type": letter(r.kind),
                "major": r.major,
                "minor": r.minor,
                "access": r.access,
            });
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
    }
    if !node_binds.is_empty() {
        let root = spec.as_object_mut().ok_or(SpecEditError::Shape {
            field: "(root)",
            expected: "an object",
        })?;
        let mounts = array(root, "mounts", "mounts")?;
        for n in node_binds {
            let dest = n.container_path.to_string_lossy().into_owned();
            if !mounts
                .iter()
                .any(|m| m.get("destination").and_then(Value::as_str) == Some(&dest))
            {
                mounts.push(json!({
                    "destination": dest,
                    "type": "bind",
                    "source": n.host_path,
                    "options": ["bind", "nosuid", "noexec"],
                }));
            }
        }
    }
    {
        let process = object(spec, "process", "process")?;
        let env = array(process, "env", "process.env")?;
        for kv in &edits.env {
            let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
            let prefix = format!("{key}=");
            let has_key = |e: &Value| e.as_str().is_some_and(|s| s.starts_with(&prefix));
            match env.iter().position(has_key) {
                Some(i) if request_envs.contains(&key) => {
                    // The granted list replaces every copy the user set: the process would see
                    // the last one (runc sets them in order), and the planner read that one.
                    env[i] = json!(kv);
                    let mut seen = 0;
                    env.retain(|e| {
                        seen += usize::from(has_key(e));
                        !has_key(e) || seen == 1
                    });
                }
                Some(_) => {}
                None => env.push(json!(kv)),
            }
        }
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

fn has_user_namespace(spec: &Value) -> bool {
    spec.pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .is_some_and(|ns| ns.iter().any(|n| n.get("type") == Some(&json!("user"))))
}

/// The createRuntime hook entry that mounts the plan's files read-only, makes soname links and
/// refreshes the linker cache, or `None` when the plan has none of these. It gets an explicit
/// empty env: nothing of the container's (CVE-2025-23266 class).
pub fn finish_hook(hook: &Path, config: Option<&Path>, edits: &ContainerEdits) -> Option<Value> {
    if edits.mounts.is_empty() && edits.symlinks().is_empty() && edits.ldcache_dirs().is_empty() {
        return None;
    }
    let mut args = vec![json!("devinject-hook")];
    if let Some(c) = config {
        args.push(json!("--config"));
        args.push(json!(c));
    }
    args.push(json!("finish"));
    for m in &edits.mounts {
        args.push(json!("--mount"));
        args.push(json!(m.host_path));
        args.push(json!(m.container_path));
    }
    for l in edits.symlinks() {
        args.push(json!("--link"));
        args.push(json!(format!("{}={}", l.link.display(), l.target)));
    }
    for d in edits.ldcache_dirs() {
        args.push(json!("--ldcache-dir"));
        args.push(json!(d));
    }
    Some(json!({ "path": hook, "args": args, "env": [], "timeout": 30 }))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use devinject_devices::{CgroupRule, DeviceNode, HookAction, Mount, MountKind, Symlink};

    fn edits() -> ContainerEdits {
        let node = DeviceNode {
            host_path: PathBuf::from("/h/dev/demo/accel0"),
            container_path: PathBuf::from("/dev/demo/accel0"),
            kind: NodeKind::Char,
            major: 10,
            minor: 237,
            mode: 0o666,
            uid: 0,
            gid: 0,
        };
        ContainerEdits {
            env: vec![
                "DEMO_VISIBLE_DEVICES=0".into(),
                "DEMO_DRIVER_VERSION=1.0".into(),
                "KEEP=ours".into(),
            ],
            cgroup_rules: vec![CgroupRule::for_node(&node)],
            device_nodes: vec![node],
            mounts: vec![Mount {
                host_path: PathBuf::from("/h/lib/libdemo.so.1.0.0"),
                container_path: PathBuf::from("/usr/lib/libdemo.so.1.0.0"),
                kind: MountKind::Library,
            }],
            hooks: vec![
                HookAction::CreateSymlinks(vec![Symlink {
                    link: PathBuf::from("/usr/lib/libdemo.so.1"),
                    target: "libdemo.so.1.0.0".into(),
                }]),
                HookAction::UpdateLdcache {
                    dirs: vec![PathBuf::from("/usr/lib")],
                },
            ],
        }
    }

    const SPEC: &str = r#"{"ociVersion":"1.0.2","zzz":{"future":true},"process":{"env":["PATH=/bin","DEMO_VISIBLE_DEVICES= 0","KEEP=user"]},"root":{"path":"rootfs"},"mounts":[{"destination":"/proc","type":"proc"}],"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]},"namespaces":[]}}"#;

    #[test]
    fn applies_devices_rules_env_and_the_finish_hook_with_the_files() {
        let mut spec: Value = serde_json::from_str(SPEC).unwrap();
        let e = edits();
        let hook = finish_hook(Path::new("/opt/devinject/bin/devinject-hook"), None, &e);
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
                json!("--mount"),
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

    #[test]
    fn user_namespaces_get_nodes_from_elsewhere_as_bind_mounts() {
        let mut spec: Value = serde_json::from_str(
            r#"{"ociVersion":"1.0.2","mounts":[],"linux":{"namespaces":[{"type":"user"}]}}"#,
        )
        .unwrap();
        let mut e = edits();
        let mut same_path = e.device_nodes[0].clone();
        same_path.host_path = PathBuf::from("/dev/demo/ctl");
        same_path.container_path = PathBuf::from("/dev/demo/ctl");
        e.device_nodes.push(same_path);
        apply(&mut spec, &e, &[], None).unwrap();
        assert_eq!(
            spec["mounts"],
            json!([{
                "destination": "/dev/demo/accel0",
                "type": "bind",
                "source": "/h/dev/demo/accel0",
                "options": ["bind", "nosuid", "noexec"],
            }])
        );
        let devices = spec["linux"]["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1, "{devices:?}");
        assert_eq!(devices[0]["path"], "/dev/demo/ctl");
        assert_eq!(spec["linux"]["resources"]["devices"][0]["minor"], 237);
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
    fn applying_twice_changes_nothing() {
        let mut spec: Value = serde_json::from_str(SPEC).unwrap();
        let e = edits();
        let hook = finish_hook(Path::new("/hook"), None, &e);
        apply(&mut spec, &e, &["DEMO_VISIBLE_DEVICES"], hook.clone()).unwrap();
        let once = spec.clone();
        apply(&mut spec, &e, &["DEMO_VISIBLE_DEVICES"], hook).unwrap();
        assert_eq!(spec, once);
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
