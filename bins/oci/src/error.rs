//! The hook's error type and its mapping to exit codes.

use devinject_devices::Excerpt;
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
    #[error("the hook ran with container status {:?}: configure devinject-hook as a prestart or createRuntime hook", Excerpt(.status))]
    Stage {
        /// The status in the state.
        status: String,
    },
    /// The requests were not admitted (profiles, policy, plan).
    #[error(transparent)]
    Admit(#[from] AdmitError),
    /// A profile's prepare step failed.
    #[error("preparing the devices of container {} failed: {source}", Excerpt(.id))]
    Prepare {
        /// The container id.
        id: String,
        source: PrepareStepError,
    },
    /// Injection into the container failed.
    #[error("injecting into container {} failed: {source}", Excerpt(.id))]
    Inject {
        /// The container id.
        id: String,
        source: InjectError,
    },
    /// Device cgroup rules could not be set.
    #[error("device cgroup rules for container {} could not be set: {source}", Excerpt(.id))]
    Cgroup {
        /// The container id.
        id: String,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::InjectError;

    /// What a terminal or a log viewer would act on: C0 and C1 controls (ESC, CSI, NEL) and the
    /// bidi controls that reorder what is shown.
    fn acting(text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| {
                c.is_control()
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
            })
            .collect()
    }

    /// A container id or status the runtime passes on is quoted escaped and bounded in every
    /// message of ours: the escapes, byte for byte, and none of the characters themselves.
    #[test]
    fn a_container_s_values_are_escaped_in_messages() {
        let id = "c\u{1b}[2J\u{9b}31m\u{85}\u{202e}gpj.exe";
        let shown = r#"c\u{1b}[2J\u{9b}31m\u{85}\u{202e}gpj.exe"#;
        let inject = HookError::Inject {
            id: id.into(),
            source: InjectError::Timeout { secs: 60 },
        };
        let stage = HookError::Stage { status: id.into() };
        let long = HookError::Inject {
            id: "\u{202e}".repeat(1000),
            source: InjectError::Timeout { secs: 60 },
        };
        for (e, want) in [
            (
                &inject,
                format!("injecting into container {shown} failed: "),
            ),
            (&stage, format!("container status \"{shown}\": configure")),
            (&long, "(3000 bytes in all)".to_owned()),
        ] {
            let text = e.to_string();
            assert!(text.contains(&want), "{text}");
            assert_eq!(acting(&text), [], "{text}");
        }
        assert!(long.to_string().len() < 600, "{long}");
    }
}
