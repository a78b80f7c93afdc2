//! From a pod as submitted to the pod as stored: each friendly resource name a container asks
//! for (`fpga.intel.com/arria10-nlb3`, a profile's `prepare.functions[].resource`) becomes the
//! resource the device plugin serves (`fpga.intel.com/port`), with the same quantity, and the
//! container gets the function's id in the profile's function variable (`INTEL_FPGA_FUNCTION`),
//! which the hook, the shim and the NRI plugin read (docs/prepare.md). The pod's annotation
//! [`FUNCTIONS_ANNOTATION`] records what was mapped, for people.
//!
//! Pure: the pod's JSON in, a JSON Patch (RFC 6902) or a refusal out.

use std::collections::BTreeMap;

use devinject_devices::ProfileSet;
use serde_json::{json, Map, Value};

/// The pod annotation recording the functions the webhook chose: `container=profile:function`,
/// comma-separated.
pub const FUNCTIONS_ANNOTATION: &str = "devinject.io/functions";

/// Why a pod is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A name in a friendly name's domain that nothing maps.
    #[error("container {container} asks for {name}, which is neither a device resource nor a function devinject knows: use one of {known}")]
    Unknown {
        container: String,
        /// The resource name.
        name: String,
        /// The names of that domain devinject knows, comma-separated.
        known: String,
    },
    /// Two names for one profile's devices in one container.
    #[error("container {container} asks for {first} and {second}, both devices of profile {profile}: a container gets one function per device kind, so ask for one of them")]
    Mixed {
        container: String,
        profile: String,
        /// One name.
        first: String,
        /// The other.
        second: String,
    },
    /// The container already names another function.
    #[error("container {container} asks for {name} (function {function}) but sets {env}={}: remove the variable", devinject_devices::Excerpt(.set))]
    Conflict {
        container: String,
        /// The friendly name.
        name: String,
        function: String,
        /// The function variable.
        env: String,
        /// What the container set.
        set: String,
    },
    /// Limits and requests of one name differ, which extended resources do not allow.
    #[error("container {container} asks for {name} with different limits and requests: extended resources need them equal")]
    Unequal { container: String, name: String },
    /// The object is not a pod as the API sends it.
    #[error("the object is not a pod: {0}")]
    NotAPod(String),
}

impl Refusal {
    /// The refusal's reason in `devinject_webhook_refusals_total` (a fixed vocabulary).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unknown { .. } => "unknown_resource",
            Self::Mixed { .. } => "mixed_functions",
            Self::Conflict { .. } => "variable_conflict",
            Self::Unequal { .. } => "unequal_limits",
            Self::NotAPod(_) => "not_a_pod",
        }
    }
}

/// A friendly name's meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Friendly {
    pub profile: String,
    /// The resource the device plugin serves.
    pub served: String,
    /// The function's id.
    pub function: String,
    /// The profile's function variable.
    pub env: String,
}

/// The friendly names of a set of profiles, and every name devinject knows per domain.
#[derive(Debug, Clone, Default)]
pub struct Table {
    friendly: BTreeMap<String, Friendly>,
    /// Each profile's names (resource and friendly) by resource name.
    profile_of: BTreeMap<String, String>,
}

impl Table {
    /// The table of `profiles`.
    pub fn new(profiles: &ProfileSet) -> Self {
        let mut t = Self::default();
        for p in profiles.iter() {
            for name in p.resource_names() {
                t.profile_of.insert(name.to_owned(), p.name.to_string());
            }
            for f in p.prepare.iter().flat_map(|s| &s.functions) {
                if let Some(name) = &f.resource {
                    t.friendly.insert(
                        name.clone(),
                        Friendly {
                            profile: p.name.to_string(),
                            served: p.resource.to_string(),
                            function: f.id.clone(),
                            env: p.function_env(),
                        },
                    );
                }
            }
        }
        t
    }

    /// How many friendly names there are.
    pub fn len(&self) -> usize {
        self.friendly.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.friendly.is_empty()
    }

    /// Whether `name` is in the domain of a friendly name: such a name must be one devinject
    /// knows. (Other domains are other plugins' business.)
    fn guards(&self, name: &str) -> bool {
        let domain = |n: &str| n.split_once('/').map(|(d, _)| d.to_owned());
        let d = domain(name);
        d.is_some() && self.friendly.keys().any(|f| domain(f) == d)
    }

    fn known_in_domain_of(&self, name: &str) -> String {
        let domain = name.split_once('/').map_or("", |(d, _)| d);
        self.profile_of
            .keys()
            .filter(|n| n.split_once('/').is_some_and(|(d, _)| d == domain))
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The JSON Patch for `pod` (empty when nothing is to change), or why it is refused.
pub fn mutate(table: &Table, pod: &Value) -> Result<Vec<Value>, Refusal> {
    let mut patch = Vec::new();
    let mut chosen = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.pointer(&format!("/spec/{list}")) else {
            continue;
        };
        let containers = containers
            .as_array()
            .ok_or_else(|| Refusal::NotAPod(format!("spec.{list} is not a list")))?;
        for (i, c) in containers.iter().enumerate() {
            let at = format!("/spec/{list}/{i}");
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            let mapped = container(table, name, c)?;
            if let Some(m) = mapped {
                patch.push(json!({"op": "replace", "path": format!("{at}/resources"), "value": m.resources}));
                for (env, value) in &m.env {
                    if c.get("env").is_some_and(|e| e.is_array()) {
                        patch.push(json!({"op": "add", "path": format!("{at}/env/-"), "value": {"name": env, "value": value}}));
                    } else {
                        patch.push(json!({"op": "add", "path": format!("{at}/env"), "value": [{"name": env, "value": value}]}));
                    }
                }
                chosen.extend(m.chosen.iter().map(|(p, f)| format!("{name}={p}:{f}")));
            }
        }
    }
    if !chosen.is_empty() {
        let value = Value::String(chosen.join(","));
        if pod
            .pointer("/metadata/annotations")
            .is_some_and(Value::is_object)
        {
            patch.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", FUNCTIONS_ANNOTATION.replace('~', "~0").replace('/', "~1")), "value": value}));
        } else {
            patch.push(json!({"op": "add", "path": "/metadata/annotations", "value": {FUNCTIONS_ANNOTATION: value}}));
        }
    }
    Ok(patch)
}

/// One container's new resources, the function variables to add, and `(profile, function)`
/// pairs chosen.
struct Mapped {
    resources: Value,
    env: Vec<(String, String)>,
    chosen: Vec<(String, String)>,
}

fn container(table: &Table, name: &str, c: &Value) -> Result<Option<Mapped>, Refusal> {
    let resources = c.get("resources").cloned().unwrap_or(json!({}));
    let mut out = resources.clone();
    let mut by_profile: BTreeMap<String, String> = BTreeMap::new();
    let mut env = Vec::new();
    let mut chosen = Vec::new();
    let mut changed = false;
    let names: Vec<String> = ["limits", "requests"]
        .iter()
        .filter_map(|k| resources.get(*k).and_then(Value::as_object))
        .flat_map(|m| m.keys().cloned())
        .collect();
    for rname in names {
        let profile = table.profile_of.get(&rname);
        if profile.is_none() && table.guards(&rname) {
            return Err(Refusal::Unknown {
                container: name.to_owned(),
                known: table.known_in_domain_of(&rname),
                name: rname,
            });
        }
        let Some(profile) = profile else { continue };
        if let Some(first) = by_profile.get(profile) {
            if *first != rname {
                return Err(Refusal::Mixed {
                    container: name.to_owned(),
                    profile: profile.clone(),
                    first: first.clone(),
                    second: rname,
                });
            }
            continue;
        }
        by_profile.insert(profile.clone(), rname.clone());
        let Some(f) = table.friendly.get(&rname) else {
            continue;
        };
        let quantity = |k: &str| resources.get(k).and_then(|m| m.get(&rname)).cloned();
        let (limit, request) = (quantity("limits"), quantity("requests"));
        if let (Some(l), Some(r)) = (&limit, &request) {
            if l != r {
                return Err(Refusal::Unequal {
                    container: name.to_owned(),
                    name: rname,
                });
            }
        }
        for (k, q) in [("limits", limit), ("requests", request)] {
            if let Some(q) = q {
                let m = out
                    .get_mut(k)
                    .and_then(Value::as_object_mut)
                    .expect("the key came from this map");
                m.remove(&rname);
                m.insert(f.served.clone(), q);
            }
        }
        match env_value(c, &f.env) {
            Some(set) if set != f.function => {
                return Err(Refusal::Conflict {
                    container: name.to_owned(),
                    name: rname,
                    function: f.function.clone(),
                    env: f.env.clone(),
                    set,
                })
            }
            Some(_) => {}
            None => env.push((f.env.clone(), f.function.clone())),
        }
        chosen.push((f.profile.clone(), f.function.clone()));
        changed = true;
    }
    Ok(changed.then(|| Mapped {
        resources: sorted(out),
        env,
        chosen,
    }))
}

/// The container's own value of `env`, when it sets one as a plain value.
fn env_value(c: &Value, env: &str) -> Option<String> {
    c.get("env")?
        .as_array()?
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(env))
        .map(|e| {
            e.get("value")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        })
}

/// `v` with its maps' keys in order, so that a patch reads the same on every run.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<_, _>>(),
            )
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use devinject_devices::Profile;

    use super::*;

    const FPGA: &str = r#"
name = "intel-fpga"
resource = "fpga.intel.com/port"
[discovery]
nodes = ["dfl-port.[0-9]*"]
[prepare]
command = ["/opt/fpga/program"]
[[prepare.functions]]
id = "nlb0-id"
resource = "fpga.intel.com/arria10-nlb0"
[[prepare.functions]]
id = "nlb3-id"
resource = "fpga.intel.com/arria10-nlb3"
"#;

    fn table() -> Table {
        let fpga = Profile::parse(FPGA, Path::new("intel-fpga.toml")).unwrap();
        let kvm = Profile::parse(
            "name = \"kvm\"\nresource = \"devinject.io/kvm\"\n[discovery]\nnodes = [\"kvm\"]\n",
            Path::new("kvm.toml"),
        )
        .unwrap();
        Table::new(&ProfileSet::from_profiles(vec![fpga, kvm], Path::new("/p")).unwrap())
    }

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    /// Applies the patch the simple way the API server would, for the ops `mutate` makes.
    fn apply(mut v: Value, patch: &[Value]) -> Value {
        for op in patch {
            let path = op["path"].as_str().unwrap();
            let value = op["value"].clone();
            let (parent, last) = path.rsplit_once('/').unwrap();
            let last = last.replace("~1", "/").replace("~0", "~");
            let target = v.pointer_mut(parent).unwrap();
            match (op["op"].as_str().unwrap(), target) {
                ("add", Value::Array(a)) if last == "-" => a.push(value),
                (_, Value::Object(m)) => {
                    m.insert(last, value);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        v
    }

    #[test]
    fn a_friendly_name_becomes_the_served_resource_and_the_function_variable() {
        let p = pod(json!([
            {"name": "main", "resources": {"limits": {"fpga.intel.com/arria10-nlb3": "2", "cpu": "1"}, "requests": {"fpga.intel.com/arria10-nlb3": "2"}}, "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "resources": {"limits": {"devinject.io/kvm": "1"}}},
        ]));
        let patch = mutate(&table(), &p).unwrap();
        let out = apply(p, &patch);
        let main = &out["spec"]["containers"][0];
        assert_eq!(
            main["resources"],
            json!({"limits": {"cpu": "1", "fpga.intel.com/port": "2"}, "requests": {"fpga.intel.com/port": "2"}})
        );
        assert_eq!(
            main["env"],
            json!([{"name": "A", "value": "1"}, {"name": "INTEL_FPGA_FUNCTION", "value": "nlb3-id"}])
        );
        // The other container is left alone.
        assert_eq!(
            out["spec"]["containers"][1],
            json!({"name": "side", "resources": {"limits": {"devinject.io/kvm": "1"}}})
        );
        assert_eq!(
            out["metadata"]["annotations"][FUNCTIONS_ANNOTATION],
            "main=intel-fpga:nlb3-id"
        );
    }

    #[test]
    fn init_containers_too_and_an_existing_annotation_map_is_kept() {
        let mut p = pod(json!([{"name": "main"}]));
        p["metadata"]["annotations"] = json!({"x": "y"});
        p["spec"]["initContainers"] = json!([{"name": "load", "resources": {"limits": {"fpga.intel.com/arria10-nlb0": "1"}}}]);
        let out = apply(p.clone(), &mutate(&table(), &p).unwrap());
        assert_eq!(
            out["spec"]["initContainers"][0],
            json!({"name": "load", "resources": {"limits": {"fpga.intel.com/port": "1"}}, "env": [{"name": "INTEL_FPGA_FUNCTION", "value": "nlb0-id"}]})
        );
        assert_eq!(
            out["metadata"]["annotations"],
            json!({"x": "y", FUNCTIONS_ANNOTATION: "load=intel-fpga:nlb0-id"})
        );
    }

    #[test]
    fn pods_without_friendly_names_are_untouched() {
        for p in [
            pod(json!([{"name": "a"}])),
            pod(
                json!([{"name": "a", "resources": {"limits": {"fpga.intel.com/port": "1", "nvidia.com/gpu": "1", "example.com/x": "1"}}}]),
            ),
            json!({"metadata": {}, "spec": {}}),
        ] {
            assert_eq!(mutate(&table(), &p).unwrap(), Vec::<Value>::new(), "{p}");
        }
    }

    #[test]
    fn refusals_name_the_container_and_the_fix() {
        let cases = [
            (
                json!([{"name": "m", "resources": {"limits": {"fpga.intel.com/arria10-nlb9": "1"}}}]),
                "container m asks for fpga.intel.com/arria10-nlb9, which is neither a device resource nor a function devinject knows: use one of fpga.intel.com/arria10-nlb0, fpga.intel.com/arria10-nlb3, fpga.intel.com/port",
            ),
            (
                json!([{"name": "m", "resources": {"limits": {"fpga.intel.com/arria10-nlb0": "1", "fpga.intel.com/arria10-nlb3": "1"}}}]),
                "container m asks for fpga.intel.com/arria10-nlb0 and fpga.intel.com/arria10-nlb3, both devices of profile intel-fpga",
            ),
            (
                json!([{"name": "m", "resources": {"limits": {"fpga.intel.com/arria10-nlb0": "1", "fpga.intel.com/port": "1"}}}]),
                "both devices of profile intel-fpga",
            ),
            (
                json!([{"name": "m", "env": [{"name": "INTEL_FPGA_FUNCTION", "value": "nlb0-id"}], "resources": {"limits": {"fpga.intel.com/arria10-nlb3": "1"}}}]),
                "container m asks for fpga.intel.com/arria10-nlb3 (function nlb3-id) but sets INTEL_FPGA_FUNCTION=nlb0-id: remove the variable",
            ),
            (
                json!([{"name": "m", "resources": {"limits": {"fpga.intel.com/arria10-nlb3": "1"}, "requests": {"fpga.intel.com/arria10-nlb3": "2"}}}]),
                "different limits and requests",
            ),
            (json!({"not": "a list"}), "spec.containers is not a list"),
        ];
        for (containers, message) in cases {
            let err = mutate(&table(), &pod(containers.clone())).unwrap_err();
            assert!(err.to_string().contains(message), "{containers}: {err}");
        }
        // The same variable with the same function is fine.
        let p = pod(
            json!([{"name": "m", "env": [{"name": "INTEL_FPGA_FUNCTION", "value": "nlb3-id"}], "resources": {"limits": {"fpga.intel.com/arria10-nlb3": "1"}}}]),
        );
        let out = apply(p.clone(), &mutate(&table(), &p).unwrap());
        assert_eq!(
            out["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
