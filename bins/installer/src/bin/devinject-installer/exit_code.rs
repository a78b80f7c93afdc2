//! The documented exit codes of `devinject-installer` (docs/install.md keeps the same table; a
//! test holds them in step).

use devinject_installer::InstallError;

/// Why the installer exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    /// Done, or nothing to do (an activation left to the user is printed as ACTION NEEDED).
    Success = 0,
    /// An unexpected failure (or an injected fault).
    Internal = 1,
    /// Bad command line or request.
    Usage = 2,
    /// A host file, profile or template is broken, unsupported or not devinject's, or no
    /// engine was found: the failing step changed nothing; fix the file and run again.
    BadInput = 3,
    /// A filesystem or permission error; the failing step was undone.
    System = 4,
    /// Restarting or reloading the engine failed; its configuration change was undone.
    Activation = 5,
    /// `probe`: no device plugin socket answers.
    ProbeFailed = 6,
}

impl ExitCode {
    /// Every code, in order (for the test holding the docs in step).
    #[cfg(test)]
    pub const ALL: [Self; 7] = [
        Self::Success,
        Self::Internal,
        Self::Usage,
        Self::BadInput,
        Self::System,
        Self::Activation,
        Self::ProbeFailed,
    ];

    /// The code for a failed install or uninstall.
    pub fn for_error(err: &InstallError) -> ExitCode {
        match err {
            e if e.is_bad_input() => ExitCode::BadInput,
            InstallError::Detect(_) => ExitCode::BadInput,
            InstallError::Activate { .. } => ExitCode::Activation,
            InstallError::InvalidRequest(_) => ExitCode::Usage,
            InstallError::Io { .. } | InstallError::Locked { .. } => ExitCode::System,
            InstallError::RuntimeConfig { .. } => ExitCode::System,
            _ => ExitCode::Internal,
        }
    }

    /// As a process exit code.
    pub fn into_process(self) -> std::process::ExitCode {
        std::process::ExitCode::from(self as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/install.md's table lists exactly these codes, in order.
    #[test]
    fn docs_list_every_code() {
        let documented = devinject_testkit::docs::table_codes(
            include_str!("../../../../../docs/install.md"),
            "### Exit codes",
        );
        let codes: Vec<u8> = ExitCode::ALL.into_iter().map(|c| c as u8).collect();
        assert_eq!(documented, codes);
    }
}
