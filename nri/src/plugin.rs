//! The plugin's service: what containerd calls over NRI. Only container creation does work;
//! it runs the same admission as the runtime shim ([`devinject_hook::admit`]: the container's
//! env and annotations, the host's request policy, the planner) and answers with the plan as an
//! adjustment ([`crate::adjust`]). A refusal fails the container's creation with the policy's
//! message, which the kubelet shows on the pod. The profiles' prepare steps run here, before the
//! answer ([`devinject_hook::prepare_step`]).

use std::path::PathBuf;

use devinject_devices::ContainerLayout;
use devinject_hook::admit::{asked, Admission, AdmitError};
use devinject_hook::oci::env_value;
use devinject_hook::prepare_step::{self, PrepareStepError};
use devinject_hook::shim::spec_edit;
use devinject_hostconfig::HostConfig;
use prost::Message;

use crate::adjust::{adjustment, AdjustError};
use crate::api;
use crate::error::NriError;

/// NRI's plugin service.
pub const SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// The events the plugin subscribes to: container creation (`1 << (Event - 1)`).
pub const EVENTS: i32 = 1 << (api::Event::CreateContainer as i32 - 1);

/// A call's failure, as a ttrpc status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A gRPC status code.
    pub code: i32,
    /// The message containerd reports.
    pub message: String,
}

/// gRPC's `INVALID_ARGUMENT`.
const INVALID_ARGUMENT: i32 = 3;
/// gRPC's `PERMISSION_DENIED`.
const PERMISSION_DENIED: i32 = 7;
/// gRPC's `FAILED_PRECONDITION`.
const FAILED_PRECONDITION: i32 = 9;
/// gRPC's `UNIMPLEMENTED`.
const UNIMPLEMENTED: i32 = 12;

/// Why a container was not created.
#[derive(Debug, thiserror::Error)]
enum CreateError {
    #[error(transparent)]
    Admit(#[from] AdmitError),
    #[error(transparent)]
    Adjust(#[from] AdjustError),
    #[error(transparent)]
    Prepare(#[from] PrepareStepError),
}

/// The plugin: the host settings it admits containers under.
#[derive(Debug)]
pub struct Plugin {
    admission: Admission,
    config_path: Option<PathBuf>,
    hook: PathBuf,
}

impl Plugin {
    /// A plugin admitting under `config` (read from `config_path`, passed on to the finish
    /// hook).
    pub fn new(config: HostConfig, config_path: Option<PathBuf>) -> Self {
        let hook = config
            .hook
            .clone()
            .unwrap_or_else(devinject_hook::shim::default_hook_path);
        Self {
            admission: Admission::from_config(&config),
            config_path,
            hook,
        }
    }

    /// Answers `method` of the plugin service with the encoded response, or a failure.
    pub fn call(&self, service: &str, method: &str, payload: &[u8]) -> Result<Vec<u8>, Failure> {
        if service != SERVICE {
            return Err(Failure {
                code: UNIMPLEMENTED,
                message: format!("devinject-nri serves {SERVICE}, not {service}"),
            });
        }
        match method {
            "Configure" => {
                let req = decode::<api::ConfigureRequest>(payload, "ConfigureRequest")?;
                tracing::info!(
                    runtime = %req.runtime_name,
                    version = %req.runtime_version,
                    "configured by the runtime"
                );
                Ok(api::ConfigureResponse { events: EVENTS }.encode_to_vec())
            }
            "Synchronize" => Ok(api::SynchronizeResponse { more: false }.encode_to_vec()),
            "CreateContainer" => {
                let req = decode::<api::CreateContainerRequest>(payload, "CreateContainerRequest")?;
                let container = req.container.unwrap_or_default();
                let pod = req.pod.unwrap_or_default();
                match self.create_container(&container) {
                    Ok(adjust) => Ok(api::CreateContainerResponse { adjust }.encode_to_vec()),
                    Err(e) => {
                        tracing::warn!(
                            pod = %format!("{}/{}", pod.namespace, pod.name),
                            container = %container.name,
                            "refused: {e}"
                        );
                        Err(Failure {
                            code: match &e {
                                CreateError::Admit(AdmitError::Policy(_)) => PERMISSION_DENIED,
                                CreateError::Admit(AdmitError::Prepare(_)) => INVALID_ARGUMENT,
                                _ => FAILED_PRECONDITION,
                            },
                            message: format!("devinject: {e}"),
                        })
                    }
                }
            }
            // Shutdown and every event we did not subscribe to: an empty message is the
            // default of every response type.
            _ => Ok(Vec::new()),
        }
    }

    /// The adjustment for a container being created; `None` when it asked for nothing.
    fn create_container(
        &self,
        container: &api::Container,
    ) -> Result<Option<api::ContainerAdjustment>, CreateError> {
        let mentions = |needle: &str| {
            container.env.iter().any(|e| e.contains(needle))
                || container
                    .annotations
                    .iter()
                    .any(|(k, v)| k.contains(needle) || v.contains(needle))
        };
        let Some(profiles) = self.admission.may_be_asking(mentions)? else {
            return Ok(None);
        };
        let env = |name: &str| env_value(&container.env, name);
        let Some(asked) = asked(profiles, env, &container.annotations)? else {
            return Ok(None);
        };
        // The rootfs is not mounted yet when NRI asks: libraries go to the default layout's
        // directory, and the finish hook puts them in the linker cache there.
        let Some(plan) = asked.admit(
            &self.admission,
            &container.annotations,
            ContainerLayout::default,
        )?
        else {
            return Ok(None);
        };
        // Before the adjustment: a failed prepare step fails the creation with nothing done.
        prepare_step::run_all(&plan.prepare)?;
        let request_envs = asked.request_envs();
        let finish = spec_edit::finish_hook(
            &self.hook,
            self.config_path.as_deref(),
            &plan.edits,
            spec_edit::GroupAccess::NodeGroup,
        );
        let adjust = adjustment(container, &plan.edits, &request_envs, finish.as_ref())?;
        tracing::info!(
            container = %container.name,
            devices = %plan
                .plans
                .iter()
                .flat_map(|p| p.devices.iter().map(move |d| format!("{}:{d}", p.profile)))
                .collect::<Vec<_>>()
                .join(","),
            "injecting"
        );
        Ok(Some(adjust))
    }
}

fn decode<M: Message + Default>(payload: &[u8], what: &'static str) -> Result<M, Failure> {
    M::decode(payload).map_err(|source| Failure {
        code: INVALID_ARGUMENT,
        message: NriError::Decode { what, source }.to_string(),
    })
}
