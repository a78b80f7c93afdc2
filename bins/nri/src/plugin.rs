//! The plugin's service: what containerd calls over NRI. Only container creation does work;
//! it runs the same admission as the runtime shim ([`devinject_admission::admit`]: the container's
//! env and annotations, the host's request policy, the planner) and answers with the plan as an
//! adjustment ([`crate::adjust`]). A refusal fails the container's creation with the policy's
//! message, which the kubelet shows on the pod. The profiles' prepare steps run here, before the
//! answer ([`devinject_contained::prepare_step`]), within the request's budget ([`crate::budget`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use devinject_admission::admit::{asked_profiles, Admission, AdmitError, Container};
use devinject_admission::container_plan::ContainerPlanError;
use devinject_contained::prepare_step::{self, PrepareStepError};
use devinject_decision_log::{record_or_warn, Decision, EnginePath, Pod, Reason};
use devinject_devices::Excerpt;
use devinject_devices::{ContainerLayout, FinishArgs, GroupAccess, HookCommand};
use devinject_hostconfig::HostConfig;
use prost::Message;

use crate::adjust::{
    adjustment, has_user_namespace, refuse_nodes_in_volumes, AdjustError, RuntimeInfo,
};
use crate::api;
use crate::budget::{BudgetError, RequestBudget};
use crate::error::NriError;
use crate::metrics::{NriMetrics, Outcome};

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
pub(crate) const INVALID_ARGUMENT: i32 = 3;
/// gRPC's `PERMISSION_DENIED`.
const PERMISSION_DENIED: i32 = 7;
/// gRPC's `FAILED_PRECONDITION`.
const FAILED_PRECONDITION: i32 = 9;
/// gRPC's `UNIMPLEMENTED`.
const UNIMPLEMENTED: i32 = 12;
/// gRPC's `INTERNAL`.
pub(crate) const INTERNAL: i32 = 13;

/// Why a container was not created.
#[derive(Debug, thiserror::Error)]
enum CreateError {
    #[error(transparent)]
    Admit(#[from] AdmitError),
    #[error(transparent)]
    Adjust(#[from] AdjustError),
    #[error(transparent)]
    Prepare(#[from] PrepareStepError),
    #[error(transparent)]
    Budget(#[from] BudgetError),
}

impl CreateError {
    /// Why the container was refused, classified once and said two ways: the label of
    /// `devinject_nri_refusals_total` (a fixed vocabulary, finer where the plugin knows more,
    /// e.g. `budget`, `busy`, `node_in_volume`) and the exit code's word the node's decision log
    /// records, the word the hook or the shim would have recorded for the same cause.
    fn refusal(&self) -> (&'static str, Reason) {
        match self {
            Self::Admit(AdmitError::Policy(_)) => ("policy", Reason::Policy),
            Self::Admit(AdmitError::Profiles(_)) => ("profiles", Reason::Config),
            Self::Admit(
                e @ AdmitError::Plan(
                    ContainerPlanError::Discovery(_) | ContainerPlanError::Resolve(_),
                ),
            ) => ("host", e.exit_code().into()),
            Self::Admit(e) => ("request", e.exit_code().into()),
            Self::Adjust(AdjustError::NodeInVolume(_)) => ("node_in_volume", Reason::Inject),
            Self::Adjust(AdjustError::UserNamespace { .. }) => ("user_namespace", Reason::Inject),
            Self::Prepare(e) => ("prepare_step", e.exit_code().into()),
            Self::Budget(BudgetError::Busy { .. }) => ("busy", Reason::Internal),
            Self::Budget(BudgetError::PrepareStep { .. }) => ("budget", Reason::Prepare),
            // Admission includes the kubelet's answer, which the message points at.
            Self::Budget(BudgetError::Admission { .. }) => ("budget", Reason::Policy),
        }
    }
}

/// The plugin: the host settings it admits containers under. Shared by the threads that
/// serve a session's requests ([`crate::session`]).
#[derive(Debug)]
pub struct Plugin {
    admission: Admission,
    /// The hook the finish step runs, with the configuration it reads.
    hook: HookCommand,
    budget: Duration,
    /// The runtime's request timeout in milliseconds, as its last `Configure` said (0: not
    /// said).
    runtime_timeout_ms: AtomicU64,
    /// What the runtime's last `Configure` said of itself.
    runtime: std::sync::Mutex<RuntimeInfo>,
    metrics: NriMetrics,
    /// The node's decision log, where each refusal is recorded (`decision_log_dir`).
    decision_log: Option<PathBuf>,
}

/// The container as containerd describes it to NRI.
impl Container for api::Container {
    fn env_entries(&self) -> &[String] {
        &self.env
    }

    fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }
}

impl Plugin {
    /// A plugin admitting under `config` (read from `config_path`, passed on to the finish
    /// hook).
    pub fn new(config: HostConfig, config_path: Option<PathBuf>) -> Self {
        let hook = config
            .hook
            .clone()
            .unwrap_or_else(devinject_devices::default_hook_path);
        // The configuration was read in this directory; the runtime runs the hook in another.
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        Self {
            admission: Admission::from_config(&config),
            hook: HookCommand::new(&hook, config_path.as_deref(), &cwd),
            budget: Duration::from_millis(config.nri_request_budget_ms),
            runtime_timeout_ms: AtomicU64::new(0),
            runtime: std::sync::Mutex::new(RuntimeInfo::default()),
            metrics: NriMetrics::default(),
            decision_log: config.decision_log().map(PathBuf::from),
        }
    }

    /// Where the plugin counts what it answers (registered for `/metrics` by the binary).
    pub fn metrics(&self) -> &NriMetrics {
        &self.metrics
    }

    /// The budget each request gets now.
    pub fn budget(&self) -> RequestBudget {
        let ms = self.runtime_timeout_ms.load(Ordering::Relaxed);
        RequestBudget {
            configured: self.budget,
            runtime_timeout: (ms > 0).then(|| Duration::from_millis(ms)),
        }
    }

    /// The failure of a request refused for its budget without `call`'s answer.
    pub fn refused(&self, error: BudgetError) -> Failure {
        tracing::warn!("refused: {error}");
        Failure {
            code: FAILED_PRECONDITION,
            message: format!("devinject: {error}"),
        }
    }

    /// Answers `method` of the plugin service with the encoded response, or a failure; the
    /// work a container's creation does (its prepare steps) ends by `deadline`.
    pub fn call(
        &self,
        service: &str,
        method: &str,
        payload: &[u8],
        deadline: Instant,
    ) -> Result<Vec<u8>, Failure> {
        if service != SERVICE {
            return Err(Failure {
                code: UNIMPLEMENTED,
                message: format!("devinject-nri serves {SERVICE}, not {service}"),
            });
        }
        match method {
            "Configure" => {
                let req = decode::<api::ConfigureRequest>(payload, "ConfigureRequest")?;
                let timeout_ms = u64::try_from(req.request_timeout).unwrap_or(0);
                self.runtime_timeout_ms.store(timeout_ms, Ordering::Relaxed);
                let budget = self.budget();
                let bounded = |s: &str| s.chars().take(64).collect::<String>();
                *self
                    .runtime
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = RuntimeInfo {
                    name: bounded(&req.runtime_name),
                    version: bounded(&req.runtime_version),
                    nri_version: bounded(&req.nri_version),
                };
                tracing::info!(
                    runtime = %req.runtime_name,
                    version = %req.runtime_version,
                    nri_version = %req.nri_version,
                    request_timeout_ms = timeout_ms,
                    budget_ms = budget.get().as_millis() as u64,
                    "configured by the runtime"
                );
                if budget.get() < budget.configured {
                    tracing::warn!(
                        "nri_request_budget_ms ({} ms) is more than three quarters of the runtime's NRI request timeout ({timeout_ms} ms): answering within {} ms",
                        budget.configured.as_millis(),
                        budget.get().as_millis()
                    );
                }
                Ok(api::ConfigureResponse { events: EVENTS }.encode_to_vec())
            }
            "Synchronize" => Ok(api::SynchronizeResponse { more: false }.encode_to_vec()),
            "CreateContainer" => self.create(payload, deadline).0,
            // Shutdown and every event we did not subscribe to: an empty message is the
            // default of every response type.
            _ => Ok(Vec::new()),
        }
    }

    /// Answers `CreateContainer` (its encoded `payload`), and says with what, for the metrics
    /// the session records once the answer is sent; the work ends by `deadline`.
    pub fn create(&self, payload: &[u8], deadline: Instant) -> (Result<Vec<u8>, Failure>, Outcome) {
        let req = match decode::<api::CreateContainerRequest>(payload, "CreateContainerRequest") {
            Ok(req) => req,
            Err(failure) => return (Err(failure), Outcome::Refused("malformed")),
        };
        let container = req.container.unwrap_or_default();
        let pod = req.pod.unwrap_or_default();
        let mut asking = Vec::new();
        match self.create_container(&container, deadline, &mut asking) {
            Ok(adjust) => {
                let outcome = if adjust.is_some() {
                    Outcome::Injected
                } else {
                    Outcome::Unchanged
                };
                let answer = api::CreateContainerResponse { adjust }.encode_to_vec();
                (Ok(answer), outcome)
            }
            Err(e) => {
                tracing::warn!(
                    pod = %format!("{}/{}", Excerpt(&pod.namespace), Excerpt(&pod.name)),
                    container = %Excerpt(&container.name),
                    "refused: {e}"
                );
                let failure = Failure {
                    code: match &e {
                        CreateError::Admit(AdmitError::Policy(_)) => PERMISSION_DENIED,
                        CreateError::Admit(AdmitError::Plan(_) | AdmitError::Chosen { .. }) => {
                            INVALID_ARGUMENT
                        }
                        _ => FAILED_PRECONDITION,
                    },
                    message: format!("devinject: {e}"),
                };
                let (label, logged) = e.refusal();
                let decision = Decision::now(
                    EnginePath::Nri,
                    container.id.clone(),
                    asking,
                    logged,
                    e.to_string(),
                )
                .of_pod(Pod::new(&pod.namespace, &pod.name, &pod.uid));
                record_or_warn(self.decision_log.as_deref(), &decision);
                (Err(failure), Outcome::Refused(label))
            }
        }
    }

    /// The adjustment for a container being created; `None` when it asked for nothing. The
    /// profiles it asks for go into `asking`, for the decision log when it is refused.
    fn create_container(
        &self,
        container: &api::Container,
        deadline: Instant,
        asking: &mut Vec<String>,
    ) -> Result<Option<api::ContainerAdjustment>, CreateError> {
        let asked = self.admission.asked(container);
        *asking = asked_profiles(&asked);
        let Some(asked) = asked? else {
            return Ok(None);
        };
        // The rootfs is not mounted yet when NRI asks: libraries go to the default layout's
        // directory, and the finish hook puts them in the linker cache there.
        let Some(admitted) = self
            .admission
            .admit(asked, container, ContainerLayout::default)?
        else {
            return Ok(None);
        };
        let plan = &admitted.plan;
        refuse_nodes_in_volumes(container, &plan.edits)?;
        // Before the adjustment: a failed prepare step fails the creation with nothing done.
        // Within the request's budget, so that a slow one fails its own container only and
        // containerd keeps the plugin.
        if !plan.prepare.is_empty() && Instant::now() >= deadline {
            return Err(BudgetError::Admission {
                budget: self.budget(),
            }
            .into());
        }
        prepare_step::run_all_by(&plan.prepare, deadline).map_err(|e| match e {
            PrepareStepError::OutOfTime { step, .. } => {
                CreateError::Budget(BudgetError::PrepareStep {
                    step,
                    budget: self.budget(),
                })
            }
            other => CreateError::Prepare(other),
        })?;
        let request_envs = admitted.request_env_names();
        let access = if has_user_namespace(container) {
            GroupAccess::OwnedCopies
        } else {
            GroupAccess::NodeGroup
        };
        let finish = self
            .hook
            .finish(FinishArgs::after_runtime(&plan.edits, access));
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let adjust = adjustment(
            container,
            &plan.edits,
            &request_envs,
            finish.as_ref(),
            &runtime,
        )?;
        tracing::info!(
            container = %Excerpt(&container.name),
            devices = %plan.granted().join(","),
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
