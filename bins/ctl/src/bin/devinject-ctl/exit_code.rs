//! The documented exit codes of devinject-ctl (docs/runtime-config.md keeps the same table; a
//! test holds them in step).

use devinject_cdi::CdiError;
use devinject_ctl::device_list::DeviceListError;
use devinject_engine_config::RuntimeConfigError;
use devinject_hostfs::HostFsError;

/// Exit status of `devinject-ctl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Done (also when there was nothing to change).
    Success = 0,
    /// An unexpected failure.
    Failure = 1,
    /// Bad command line or a request the engine cannot carry out (clap also exits with 2).
    Usage = 2,
    /// A host configuration file is broken, unsupported or not ours; nothing was written.
    BadInput = 3,
    /// A filesystem or permission error.
    Io = 4,
    /// A helper command (`ctr oci spec`) or the daemon reload failed.
    External = 5,
    /// `doctor` found at least one error (with `--strict`, a warning).
    Broken = 6,
}

impl ExitCode {
    /// Every code, in order (for the test holding the docs in step).
    #[cfg(test)]
    pub const ALL: [Self; 7] = [
        Self::Success,
        Self::Failure,
        Self::Usage,
        Self::BadInput,
        Self::Io,
        Self::External,
        Self::Broken,
    ];

    /// The code for an error chain, from the library error at its root when there is one.
    pub fn of(err: &anyhow::Error) -> Self {
        if let Some(e) = err.downcast_ref::<CdiError>() {
            return Self::of_cdi(e);
        }
        if let Some(e) = err.downcast_ref::<HostFsError>() {
            return Self::of_host_file(e);
        }
        if err.downcast_ref::<DeviceListError>().is_some() {
            return ExitCode::BadInput;
        }
        match err.downcast_ref::<RuntimeConfigError>() {
            Some(RuntimeConfigError::HostFs(e)) => Self::of_host_file(e),
            Some(e) if e.is_bad_input() => ExitCode::BadInput,
            Some(RuntimeConfigError::Io { .. }) => ExitCode::Io,
            Some(RuntimeConfigError::InvalidRequest(_)) => ExitCode::Usage,
            Some(RuntimeConfigError::Command { .. } | RuntimeConfigError::Reload { .. }) => {
                ExitCode::External
            }
            _ if err.downcast_ref::<std::io::Error>().is_some() => ExitCode::Io,
            _ => ExitCode::Failure,
        }
    }

    fn of_cdi(err: &CdiError) -> Self {
        match err {
            CdiError::HostFs(e) => Self::of_host_file(e),
            e if e.is_bad_input() => ExitCode::BadInput,
            _ => ExitCode::Failure,
        }
    }

    fn of_host_file(err: &HostFsError) -> Self {
        if err.is_bad_input() {
            ExitCode::BadInput
        } else {
            ExitCode::Io
        }
    }
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/runtime-config.md's table lists exactly these codes, in order.
    #[test]
    fn docs_list_every_code() {
        let documented = devinject_testkit::docs::table_codes(
            include_str!("../../../../../docs/runtime-config.md"),
            "## Exit codes of devinject-ctl",
        );
        let codes: Vec<u8> = ExitCode::ALL.into_iter().map(|c| c as u8).collect();
        assert_eq!(documented, codes);
    }
}
