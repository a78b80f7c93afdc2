//! A profile's prepare step, planned: which program runs for which device with which function
//! (docs/prepare.md). Data only; the hook and the shim run it before the container starts.
//!
//! What the program gets is decided here and nowhere else: the device's id and host nodes from
//! discovery, and a function only when it is one the profile lists. A container's choice of
//! function is one of those words or an error; it never reaches the program otherwise.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::excerpt::Excerpt;
use crate::inventory::Inventory;
use crate::names::{DeviceId, ProfileName};
use crate::profile::Profile;

/// Why a container's function request cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum FunctionError {
    /// The profile has no prepare step, so nothing could load a function.
    #[error("profile {profile} has no prepare step, so it loads no function: remove {origin}")]
    NoPrepare {
        profile: ProfileName,
        /// Where the function came from.
        origin: String,
    },
    /// The function is not one the profile lists.
    #[error("profile {profile} has no function {:?} (from {origin}): use one of {known}", Excerpt(.function))]
    Unknown {
        profile: ProfileName,
        /// What was asked for.
        function: String,
        /// Where it came from.
        origin: String,
        /// The profile's functions, comma-separated (`none` when it lists none).
        known: String,
    },
    /// A function was asked for devices the container does not get.
    #[error("{origin} asks for function {:?} of profile {profile}, but the container gets no {profile} device: request the devices too, or remove it", Excerpt(.function))]
    NoDevices {
        profile: ProfileName,
        /// What was asked for.
        function: String,
        /// Where it came from.
        origin: String,
    },
    /// The annotation and the variable name different functions: the device would get one and
    /// the process see the other.
    #[error(transparent)]
    Conflict(Box<FunctionConflict>),
}

/// A function named differently by a container's annotation and its variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile {profile}: annotation {annotation} asks for function {:?} but env {env} for {:?}: the device would get one and the process would see the other: set only one of them, or both to the same function", Excerpt(.annotation_value), Excerpt(.env_value))]
pub struct FunctionConflict {
    /// The profile whose function was chosen twice.
    pub profile: ProfileName,
    /// The annotation's key.
    pub annotation: String,
    /// The annotation's value.
    pub annotation_value: String,
    /// The variable's name.
    pub env: String,
    /// The variable's value.
    pub env_value: String,
}

/// A container's choice of function for one profile, as found in its annotations or env.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRequest {
    /// The profile whose function it chooses.
    pub profile: ProfileName,
    /// `annotation KEY` or `env NAME`.
    pub origin: String,
    /// The raw value.
    pub value: String,
}

impl FunctionRequest {
    /// The function a container chose for `profile`, from the value of its annotation
    /// (`devinject.io/<profile>.function`) and of its variable (`<NAME>_FUNCTION`): the one
    /// that is set, or either when both name the same function. Both set to different
    /// functions is [`FunctionError::Conflict`]: the annotation would choose what the device
    /// gets, while the process, whose env the hook cannot change, would read the variable.
    /// This is the one place the choice is made, for the hook, the shim and the NRI plugin.
    pub fn choose(
        profile: &Profile,
        annotation: Option<&str>,
        env: Option<&str>,
    ) -> Result<Option<Self>, FunctionError> {
        let (origin, value) = match (annotation, env) {
            (None, None) => return Ok(None),
            (Some(a), Some(e)) if a != e => {
                return Err(FunctionError::Conflict(Box::new(FunctionConflict {
                    profile: profile.name.clone(),
                    annotation: profile.function_annotation(),
                    annotation_value: a.to_owned(),
                    env: profile.function_env(),
                    env_value: e.to_owned(),
                })))
            }
            (Some(a), _) => (format!("annotation {}", profile.function_annotation()), a),
            (None, Some(e)) => (format!("env {}", profile.function_env()), e),
        };
        Ok(Some(Self {
            profile: profile.name.clone(),
            origin,
            value: value.to_owned(),
        }))
    }
}

/// One run of a profile's prepare program, for one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRun {
    /// The profile whose `[prepare]` program runs.
    pub profile: ProfileName,
    /// The device it runs for (the program sees it in `DEVINJECT_DEVICE`).
    pub device: DeviceId,
    /// The program's absolute host path.
    pub program: PathBuf,
    /// Its fixed arguments.
    pub args: Vec<OsString>,
    /// Its whole environment (`NAME=value`).
    pub env: Vec<OsString>,
    /// Its deadline.
    pub limit: Duration,
    /// The function it loads, if any.
    pub function: Option<String>,
}

/// The search path a prepare program gets: the host's system directories.
pub const PREPARE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The runs `profile`'s prepare step needs for `devices` (ids found in `inventory`), with
/// `function` checked against the profile. No prepare step and no function: no runs.
pub fn prepare_runs(
    profile: &Profile,
    inventory: &Inventory,
    devices: &[DeviceId],
    function: Option<&FunctionRequest>,
) -> Result<Vec<PrepareRun>, FunctionError> {
    let Some(spec) = &profile.prepare else {
        return match function {
            None => Ok(Vec::new()),
            Some(f) => Err(FunctionError::NoPrepare {
                profile: profile.name.clone(),
                origin: f.origin.clone(),
            }),
        };
    };
    let function = match function {
        None => None,
        Some(f) if devices.is_empty() => {
            return Err(FunctionError::NoDevices {
                profile: profile.name.clone(),
                function: f.value.clone(),
                origin: f.origin.clone(),
            })
        }
        Some(f) => match spec.functions.iter().find(|s| s.id == f.value) {
            Some(s) => Some(s.id.clone()),
            None => {
                let known: Vec<&str> = spec.functions.iter().map(|s| s.id.as_str()).collect();
                return Err(FunctionError::Unknown {
                    profile: profile.name.clone(),
                    function: f.value.clone(),
                    origin: f.origin.clone(),
                    known: if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    },
                });
            }
        },
    };
    let (program, args): (PathBuf, Vec<OsString>) = spec
        .command
        .split_first()
        .map(|(p, a)| (PathBuf::from(p), a.iter().map(OsString::from).collect()))
        .unwrap_or_default();
    let limit = Duration::from_millis(spec.timeout_ms);
    let runs = devices
        .iter()
        .map(|id| {
            let nodes: Vec<String> = inventory
                .by_id(id.as_str())
                .map(|d| {
                    d.nodes
                        .iter()
                        .map(|n| n.host_path.display().to_string())
                        .collect()
                })
                .unwrap_or_default();
            let mut env = vec![
                format!("PATH={PREPARE_PATH}"),
                format!("DEVINJECT_PROFILE={}", profile.name),
                format!("DEVINJECT_DEVICE={id}"),
                format!("DEVINJECT_DEVICE_NODES={}", nodes.join(":")),
            ];
            if let Some(f) = &function {
                env.push(format!("DEVINJECT_FUNCTION={f}"));
            }
            PrepareRun {
                profile: profile.name.clone(),
                device: id.clone(),
                program: program.clone(),
                args: args.clone(),
                env: env.into_iter().map(OsString::from).collect(),
                limit,
                function: function.clone(),
            }
        })
        .collect();
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::inventory::Device;
    use crate::node::DeviceNode;
    use crate::DeviceKind;

    const FPGA: &str = r#"
name = "fpga"
resource = "example.com/fpga"
[discovery]
nodes = ["port[0-9]*"]
[prepare]
command = ["/opt/fpga/bin/program", "--quiet"]
timeout_ms = 2500
[[prepare.functions]]
id = "nlb0"
[[prepare.functions]]
id = "nlb3"
resource = "example.com/fpga-nlb3"
"#;

    fn profile(text: &str) -> Profile {
        Profile::parse(text, Path::new("fpga.toml")).unwrap()
    }

    fn inventory() -> Inventory {
        let device = |n: u32| Device {
            id: DeviceId::new(&n.to_string()).unwrap(),
            index: n as usize,
            name: format!("port{n}"),
            nodes: vec![DeviceNode {
                host_path: PathBuf::from(format!("/dev/port{n}")),
                container_path: PathBuf::from(format!("/dev/port{n}")),
                kind: DeviceKind::Char,
                major: 240,
                minor: n,
                mode: 0o600,
                uid: 0,
                gid: 0,
            }],
            numa_node: None,
            healthy: true,
            attributes: Default::default(),
            aliases: Vec::new(),
        };
        Inventory {
            withdrawn: Vec::new(),
            devices: vec![device(0), device(2)],
            control_nodes: Vec::new(),
        }
    }

    fn ids(list: &[&str]) -> Vec<DeviceId> {
        list.iter().map(|i| DeviceId::new(i).unwrap()).collect()
    }

    fn asks(value: &str) -> FunctionRequest {
        FunctionRequest {
            profile: ProfileName::new("fpga").unwrap(),
            origin: "env FPGA_FUNCTION".into(),
            value: value.into(),
        }
    }

    #[test]
    fn one_run_per_device_with_exactly_its_environment() {
        let runs = prepare_runs(
            &profile(FPGA),
            &inventory(),
            &ids(&["2", "0"]),
            Some(&asks("nlb3")),
        )
        .unwrap();
        assert_eq!(runs.len(), 2);
        let r = &runs[0];
        assert_eq!(r.program, Path::new("/opt/fpga/bin/program"));
        assert_eq!(r.args, [OsString::from("--quiet")]);
        assert_eq!(r.limit, Duration::from_millis(2500));
        assert_eq!(r.device.as_str(), "2");
        assert_eq!(
            r.env,
            [
                format!("PATH={PREPARE_PATH}"),
                "DEVINJECT_PROFILE=fpga".into(),
                "DEVINJECT_DEVICE=2".into(),
                "DEVINJECT_DEVICE_NODES=/dev/port2".into(),
                "DEVINJECT_FUNCTION=nlb3".into(),
            ]
            .map(OsString::from)
        );
        assert_eq!(runs[1].device.as_str(), "0");
        // Without a function the program still runs, without DEVINJECT_FUNCTION.
        let runs = prepare_runs(&profile(FPGA), &inventory(), &ids(&["0"]), None).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].function, None);
        assert!(!runs[0]
            .env
            .iter()
            .any(|e| e.to_string_lossy().starts_with("DEVINJECT_FUNCTION=")));
    }

    #[test]
    fn a_function_is_one_the_profile_lists_for_devices_the_container_gets() {
        let p = profile(FPGA);
        let err =
            prepare_runs(&p, &inventory(), &ids(&["0"]), Some(&asks("nlb3; reboot"))).unwrap_err();
        assert!(matches!(err, FunctionError::Unknown { .. }), "{err}");
        assert!(err.to_string().contains("use one of nlb0, nlb3"), "{err}");
        let err = prepare_runs(&p, &inventory(), &[], Some(&asks("nlb0"))).unwrap_err();
        assert!(matches!(err, FunctionError::NoDevices { .. }), "{err}");
        assert!(err.to_string().contains("gets no fpga device"), "{err}");

        let plain = profile("name = \"fpga\"\nresource = \"example.com/fpga\"\n[discovery]\nnodes = [\"port[0-9]*\"]\n");
        assert_eq!(
            prepare_runs(&plain, &inventory(), &ids(&["0"]), None).unwrap(),
            []
        );
        let err =
            prepare_runs(&plain, &inventory(), &ids(&["0"]), Some(&asks("nlb0"))).unwrap_err();
        assert!(matches!(err, FunctionError::NoPrepare { .. }), "{err}");
        assert!(
            err.to_string().contains("remove env FPGA_FUNCTION"),
            "{err}"
        );
    }

    /// A 200 KiB function value is not echoed whole into the refusal: the message stays short,
    /// names the variable and gives the value's length.
    #[test]
    fn a_huge_function_value_gives_a_short_refusal_naming_the_variable() {
        let huge = "n".repeat(200 << 10);
        let p = profile(FPGA);
        for err in [
            prepare_runs(&p, &inventory(), &ids(&["0"]), Some(&asks(&huge))).unwrap_err(),
            prepare_runs(&p, &inventory(), &[], Some(&asks(&huge))).unwrap_err(),
            FunctionRequest::choose(&p, Some(&huge), Some(&format!("{huge}x"))).unwrap_err(),
        ] {
            let text = err.to_string();
            assert!(text.len() < 600, "{} bytes: {}", text.len(), &text[..600]);
            assert!(text.contains("FPGA_FUNCTION"), "{text}");
            assert!(text.contains("(204800 bytes in all)"), "{text}");
        }
    }

    /// With the function in both the annotation and the variable, the device would get the
    /// annotation's and the process see the variable's: the two must agree.
    #[test]
    fn the_annotation_and_the_variable_must_agree_on_the_function() {
        let p = profile(FPGA);
        let err = FunctionRequest::choose(&p, Some("nlb3"), Some("nlb0")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "profile fpga: annotation devinject.io/fpga.function asks for function \"nlb3\" but env FPGA_FUNCTION for \"nlb0\": the device would get one and the process would see the other: set only one of them, or both to the same function"
        );
        let chosen = |a, e| {
            FunctionRequest::choose(&p, a, e)
                .unwrap()
                .map(|f| (f.origin, f.value))
        };
        assert_eq!(
            chosen(Some("nlb3"), Some("nlb3")),
            Some((
                "annotation devinject.io/fpga.function".into(),
                "nlb3".into()
            ))
        );
        assert_eq!(
            chosen(Some("nlb3"), None),
            Some((
                "annotation devinject.io/fpga.function".into(),
                "nlb3".into()
            ))
        );
        assert_eq!(
            chosen(None, Some("nlb0")),
            Some(("env FPGA_FUNCTION".into(), "nlb0".into()))
        );
        assert_eq!(chosen(None, None), None);
    }

    #[test]
    fn a_prepare_step_without_functions_takes_none() {
        let p = profile(
            "name = \"fpga\"\nresource = \"example.com/fpga\"\n[discovery]\nnodes = [\"port[0-9]*\"]\n[prepare]\ncommand = [\"/bin/reset\"]\n",
        );
        assert_eq!(p.prepare.as_ref().unwrap().timeout_ms, 30_000);
        assert_eq!(
            prepare_runs(&p, &inventory(), &ids(&["0"]), None)
                .unwrap()
                .len(),
            1
        );
        let err = prepare_runs(&p, &inventory(), &ids(&["0"]), Some(&asks("x"))).unwrap_err();
        assert!(err.to_string().contains("use one of none"), "{err}");
    }
}
