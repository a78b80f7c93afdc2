//! From a container's requests to one merged set of edits, shared by every path that admits a
//! container: the hook, the shim and the NRI plugin.
//!
//! For each profile, the request comes from our annotation (`devinject.io/<profile>.devices`,
//! written by the device plugin) or else from the profile's request variable in `process.env`.
//! Profiles nobody asked for cost nothing: no discovery, no file resolution.

use std::collections::BTreeMap;

use devinject_devices::{
    plan, prepare_runs, Capabilities, CapabilityError, ContainerEdits, ContainerLayout,
    FunctionError, FunctionRequest, HostRoots, Inventory, Plan, PlanError, PlanInput, PrepareRun,
    ProfileName, ProfileSet, Request, RequestError, Resolve,
};
use devinject_discovery::{discover, resolve_driver_parts, DiscoveryError, ResolveError};

/// Why a container's plan could not be made.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum ContainerPlanError {
    /// A request value is malformed.
    #[error("profile {profile}: {source} (from {origin})")]
    Request {
        profile: ProfileName,
        /// Where the value came from (env variable or annotation).
        origin: String,
        source: RequestError,
    },
    /// The request names devices that do not exist.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Devices could not be discovered.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Driver files could not be resolved.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// A function request cannot be honoured.
    #[error(transparent)]
    Function(#[from] FunctionError),
    /// The container chose a part of a driver its profile does not provide.
    #[error(transparent)]
    Capability(#[from] CapabilityError),
}

/// Where a container's request for one profile came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestSource {
    /// The profile whose devices are asked for.
    pub profile: ProfileName,
    /// `env NAME` or `annotation KEY`.
    pub origin: String,
    /// The raw value.
    pub value: String,
    /// How its items resolve to devices: ids only for an annotation, and for what the kubelet
    /// granted ([`Resolve::Granted`], set by the policy); a request variable the caller wrote
    /// may also name positions where the profile allows them.
    pub resolve: Resolve,
}

/// What the container asked for, per profile, before any device lookup.
pub fn find_requests<'a>(
    profiles: &ProfileSet,
    env: impl Fn(&str) -> Option<&'a str>,
    annotations: &BTreeMap<String, String>,
) -> Vec<RequestSource> {
    profiles
        .iter()
        .filter_map(|p| {
            let (origin, value, from_annotation) =
                annotation_or_env(&p.request_annotation(), p.request_env(), &env, annotations)?;
            Some(RequestSource {
                profile: p.name.clone(),
                origin,
                value,
                resolve: if from_annotation {
                    Resolve::Ids
                } else {
                    Resolve::IdsOrPositions
                },
            })
        })
        .collect()
}

/// The functions the container chose (docs/prepare.md), per profile, from our annotation
/// (`devinject.io/<profile>.function`) and the profile's function variable (`DEMO_FUNCTION`),
/// as [`FunctionRequest::choose`] decides: both set to different functions is an error.
pub fn find_functions<'a>(
    profiles: &ProfileSet,
    env: impl Fn(&str) -> Option<&'a str>,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<FunctionRequest>, FunctionError> {
    profiles
        .iter()
        .filter_map(|p| {
            let annotation = annotations
                .get(&p.function_annotation())
                .map(String::as_str);
            FunctionRequest::choose(p, annotation, env(&p.function_env())).transpose()
        })
        .collect()
}

/// The parts of each driver the container chose ([`devinject_devices::capability`]), for the
/// profiles that have groups; the others get every file.
pub type ChosenCapabilities = BTreeMap<ProfileName, Capabilities>;

/// Reads the capability variable of each grouped profile the container asks devices or files
/// of (`requests`) from its env: a variable of a profile it does not ask for is not looked at,
/// so an image built for NVIDIA's toolkit that asks only for `/dev/kvm` is not refused for its
/// `NVIDIA_DRIVER_CAPABILITIES`. Only the container's own env chooses: the parts are the same
/// driver's files, which the granted devices already give access to, so no policy stands
/// between.
pub fn find_capabilities<'a>(
    profiles: &ProfileSet,
    env: impl Fn(&str) -> Option<&'a str>,
    requests: &[RequestSource],
) -> Result<ChosenCapabilities, CapabilityError> {
    let asked = |p: &ProfileName| {
        requests.iter().any(|r| {
            r.profile == *p && Request::parse(Some(&r.value)).is_ok_and(|req| req.wants_anything())
        })
    };
    profiles
        .iter()
        .filter_map(|p| {
            let spec = p.capabilities.as_ref().filter(|_| asked(&p.name))?;
            Some(
                Capabilities::chosen(&p.name, Some(spec), env(&spec.env))
                    .map(|c| (p.name.clone(), c)),
            )
        })
        .collect()
}

/// The value of annotation `key`, else of variable `var`: `(origin, value, from the
/// annotation)`, the origin worded for messages (`annotation KEY`, `env NAME`).
fn annotation_or_env<'a>(
    key: &str,
    var: &str,
    env: impl Fn(&str) -> Option<&'a str>,
    annotations: &BTreeMap<String, String>,
) -> Option<(String, String, bool)> {
    match annotations.get(key) {
        Some(v) => Some((format!("annotation {key}"), v.clone(), true)),
        None => env(var).map(|v| (format!("env {var}"), v.to_owned(), false)),
    }
}

/// Every profile's plan and the merged edits.
#[derive(Debug, Clone, Default)]
pub struct ContainerPlan {
    /// One plan per profile that was asked for.
    pub plans: Vec<Plan>,
    /// All edits merged.
    pub edits: ContainerEdits,
    /// The prepare program's runs, one per device of a profile that has one, to be done before
    /// the container starts.
    pub prepare: Vec<PrepareRun>,
}

impl ContainerPlan {
    /// What the container gets, as `profile:device` per device, in plan order: what every
    /// engine path logs and reports.
    pub fn granted(&self) -> Vec<String> {
        self.plans
            .iter()
            .flat_map(|p| p.devices.iter().map(move |d| format!("{}:{d}", p.profile)))
            .collect()
    }
}

/// Plans the container. `layout` is called at most once, and only when a profile injects files.
/// `Ok(None)` when nothing was asked for. A function for a profile none of whose devices the
/// container gets is an error, whatever else it asked for.
pub fn plan_container(
    roots: &HostRoots,
    profiles: &ProfileSet,
    requests: &[RequestSource],
    functions: &[FunctionRequest],
    capabilities: &ChosenCapabilities,
    layout: impl FnOnce() -> ContainerLayout,
) -> Result<Option<ContainerPlan>, ContainerPlanError> {
    // Parse every request before touching the host, so a bad value fails fast and cheaply.
    let mut parsed = Vec::new();
    for r in requests {
        let request =
            Request::parse(Some(&r.value)).map_err(|source| ContainerPlanError::Request {
                profile: r.profile.clone(),
                origin: r.origin.clone(),
                source,
            })?;
        if request.wants_anything() {
            parsed.push((r, request));
        }
    }
    if parsed.is_empty() {
        check_functions_have_devices(profiles, functions, &[])?;
        return Ok(None);
    }
    let mut layout = Some(layout);
    let mut layout_value: Option<ContainerLayout> = None;
    let mut out = ContainerPlan::default();
    for (source, request) in parsed {
        let Some(profile) = profiles.get(source.profile.as_str()) else {
            continue;
        };
        let inventory = discover(profile, roots)?;
        let parts = capabilities
            .get(&profile.name)
            .unwrap_or(&Capabilities::All);
        let driver_files = resolve_driver_parts(profile, roots, parts)?;
        let needs_layout = !driver_files.libraries.is_empty();
        if needs_layout && layout_value.is_none() {
            layout_value = layout.take().map(|f| f());
        }
        let default_layout = ContainerLayout::default();
        let l = layout_value.as_ref().unwrap_or(&default_layout);
        if let Some(p) = plan(PlanInput {
            profile,
            inventory: &inventory,
            request: &request,
            resolve: source.resolve,
            driver_files: &driver_files,
            capabilities: parts,
            layout: l,
        })? {
            tracing::info!(profile = %p.profile, devices = ?p.devices, origin = %source.origin, "planned");
            let function = functions.iter().find(|f| f.profile == p.profile);
            out.prepare
                .extend(prepare_runs(profile, &inventory, &p.devices, function)?);
            out.edits.merge(p.edits.clone());
            out.plans.push(p);
        }
    }
    check_functions_have_devices(profiles, functions, &out.plans)?;
    Ok(Some(out))
}

/// Fails for a function asked of a profile that got no plan: the container gets none of its
/// devices, so the function would load into nothing (or, were it kept, into a device granted
/// later to someone else).
fn check_functions_have_devices(
    profiles: &ProfileSet,
    functions: &[FunctionRequest],
    plans: &[Plan],
) -> Result<(), FunctionError> {
    for f in functions {
        if plans.iter().any(|p| p.profile == f.profile) {
            continue;
        }
        if let Some(profile) = profiles.get(f.profile.as_str()) {
            prepare_runs(profile, &Inventory::default(), &[], Some(f))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use devinject_devices::DeviceId;

    use super::*;

    fn plan(profile: &str, devices: &[&str]) -> Plan {
        Plan {
            profile: ProfileName::new(profile).unwrap(),
            devices: devices.iter().map(|d| DeviceId::new(d).unwrap()).collect(),
            edits: ContainerEdits::default(),
        }
    }

    #[test]
    fn capabilities_are_read_for_grouped_profiles_only() {
        let grouped = devinject_devices::Profile::parse(
            "name = \"gpu\"\nresource = \"a.io/gpu\"\n[discovery]\nnodes = [\"gpu*\"]\n\
             [capabilities]\nenv = \"GPU_CAPS\"\nnames = [\"compute\", \"video\"]\ndefault = [\"compute\"]\n",
            std::path::Path::new("gpu.toml"),
        )
        .unwrap();
        let plain = devinject_devices::Profile::parse(
            "name = \"kvm\"\nresource = \"a.io/kvm\"\n[discovery]\nnodes = [\"kvm\"]\n",
            std::path::Path::new("kvm.toml"),
        )
        .unwrap();
        let set =
            ProfileSet::from_profiles(vec![grouped, plain], std::path::Path::new("/p")).unwrap();
        let asking = |profile: &str, value: &str| RequestSource {
            profile: ProfileName::new(profile).unwrap(),
            origin: "env X".into(),
            value: value.into(),
            resolve: Resolve::Ids,
        };
        let gpu_and_kvm = [asking("gpu", "0"), asking("kvm", "all")];
        let chosen = |value: Option<&'static str>| {
            find_capabilities(
                &set,
                move |n| (n == "GPU_CAPS").then_some(value).flatten(),
                &gpu_and_kvm,
            )
        };
        let gpu = ProfileName::new("gpu").unwrap();
        let got = chosen(Some("video")).unwrap();
        assert_eq!(got.len(), 1, "the profile without groups is not in the map");
        assert_eq!(got[&gpu], Capabilities::Only(["video".to_owned()].into()));
        assert_eq!(
            chosen(None).unwrap()[&gpu],
            Capabilities::Only(["compute".to_owned()].into())
        );
        let e = chosen(Some("display")).unwrap_err();
        assert!(e.to_string().contains("GPU_CAPS=\"display\""), "{e}");
        // A container not asking for the gpu profile's devices: its variable is not read.
        for requests in [vec![asking("kvm", "all")], vec![asking("gpu", "void")]] {
            let got = find_capabilities(&set, |_| Some("display"), &requests).unwrap();
            assert!(got.is_empty(), "{requests:?}: {got:?}");
        }
    }

    #[test]
    fn granted_names_each_device_with_its_profile_in_plan_order() {
        let c = ContainerPlan {
            plans: vec![plan("demo", &["1", "0"]), plan("kvm", &["kvm"])],
            edits: ContainerEdits::default(),
            prepare: Vec::new(),
        };
        assert_eq!(c.granted(), ["demo:1", "demo:0", "kvm:kvm"]);
    }
}
