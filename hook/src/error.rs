//! The hook's error type and its mapping to exit codes.

use devinject_exit::ExitCode;

use crate::inject::InjectError;
use crate::oci::OciError;
use devinject_admission::admit::AdmitError;
use devinject_contained::prepare_step::PrepareStepError;

/// Everything that can make the hook fail.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The state or spec is malformed.
    #[error(transparent)]
    Input(#[from] OciError),
    /// The hook was configured at a stage where it cannot work.
    #[error("the hook ran with container status {status:?}: configure devinject-hook as a prestart or createRuntime hook")]
    Stage {
        /// The status in the state.
        status: String,
    },
    /// The requests were not admitted (profiles, policy, plan).
    #[error(transparent)]
    Admit(#[from] AdmitError),
    /// A profile's prepare step failed.
    #[error("preparing the devices of container {id} failed: {source}")]
    Prepare {
        /// The container id.
        id: String,
        /// The cause.
        source: PrepareStepError,
    },
    /// Injection into the container failed.
    #[error("injecting into container {id} failed: {source}")]
    Inject {
        /// The container id.
        id: String,
        /// The cause.
        source: InjectError,
    },
    /// Device cgroup rules could not be set.
    #[error("device cgroup rules for container {id} could not be set: {source}")]
    Cgroup {
        /// The container id.
        id: String,
        /// The cause.
        source: devinject_cgroup::CgroupError,
    },
}

impl HookError {
    /// The exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Input(e) => e.exit_code(),
            Self::Stage { .. } => ExitCode::Input,
            Self::Admit(e) => e.exit_code(),
            Self::Prepare { source, .. } => source.exit_code(),
            Self::Inject { .. } => ExitCode::Inject,
            Self::Cgroup { .. } => ExitCode::Cgroup,
        }
    }
}
