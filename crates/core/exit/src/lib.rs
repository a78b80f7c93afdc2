//! The documented exit codes of `devinject-hook` and `devinject-runtime`, and the one line
//! they print.
//!
//! A runtime shows a failing hook's stderr to the user; the code lets scripts and tests tell the
//! classes apart. The codes are the hook binaries' contract with the tools around them, so they
//! live in this small crate: the hook maps its errors to them, and the installer words its own
//! errors with the same [`describe`] without linking the hook. Keep `docs/hook.md` in step with
//! this enum (a test here checks it).
#![warn(missing_docs)]

/// Why the hook or shim exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitCode {
    /// Done (or nothing to do).
    Success = 0,
    /// A bug or an unexpected failure.
    Internal = 1,
    /// Bad command line.
    Usage = 2,
    /// The host config or a profile is invalid.
    Config = 3,
    /// The OCI state or `config.json` is malformed, or the hook runs at the wrong stage.
    Input = 4,
    /// The container's request is invalid (unknown or duplicate id, malformed list).
    Request = 5,
    /// The host lacks a device or driver file the request needs.
    Host = 6,
    /// Creating nodes, mounts or links in the container failed.
    Inject = 7,
    /// Device cgroup rules could not be set.
    Cgroup = 8,
    /// The request is not allowed by the host policy.
    Policy = 9,
    /// A profile's prepare step failed (docs/prepare.md).
    Prepare = 10,
}

impl ExitCode {
    /// Every code, in order.
    pub fn all() -> Vec<Self> {
        std::iter::successors(Some(Self::Success), |c| c.next()).collect()
    }

    /// The code after this one. The match is exhaustive, so a new code must be placed here,
    /// and [`Self::all`] (which the docs are checked against) then includes it.
    fn next(self) -> Option<Self> {
        Some(match self {
            Self::Success => Self::Internal,
            Self::Internal => Self::Usage,
            Self::Usage => Self::Config,
            Self::Config => Self::Input,
            Self::Input => Self::Request,
            Self::Request => Self::Host,
            Self::Host => Self::Inject,
            Self::Inject => Self::Cgroup,
            Self::Cgroup => Self::Policy,
            Self::Policy => Self::Prepare,
            Self::Prepare => return None,
        })
    }

    /// The numeric code.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// An error and its causes on one line, each cause once (the first line a user sees).
pub fn describe(err: &dyn std::error::Error) -> String {
    let mut msg = err.to_string();
    let mut src = err.source();
    while let Some(s) = src {
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        src = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/hook.md's table lists exactly these codes, in order: a new code cannot go
    /// undocumented, nor a documented one stay after it is gone.
    #[test]
    fn docs_list_every_code() {
        let documented = devinject_testkit::docs::table_codes(
            include_str!("../../../../docs/hook.md"),
            "## Exit codes",
        );
        let codes: Vec<u8> = ExitCode::all().iter().map(|c| c.code()).collect();
        assert_eq!(documented, codes);
        // The codes are 0..=N without a gap.
        assert!(codes.iter().enumerate().all(|(i, c)| usize::from(*c) == i));
    }
}
