//! Fault injection, so tests can prove that a failure or a kill at any point leaves the host
//! consistent.
//!
//! A fault point is named `<step>:<n>`: `n = 0` is the start of the step (its journal is open,
//! nothing changed yet) and `n = k` comes right after the step's k-th change to the host (a
//! file written or removed, the engine configured, the engine restarted). The binary reads a
//! fault from `DEVINJECT_INSTALLER_FAULT=<step>:<n>[:abort]`: `fail` (the default) makes the
//! step return an error, which the installer rolls back like any other failure; `abort` ends the
//! process on the spot, as a kill would, leaving the journal for the next run to recover.

use std::fmt;

use crate::error::{InstallError, Result};

/// What happens at the fault point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// The step fails with [`InstallError::Injected`].
    Fail,
    /// The process aborts (SIGABRT), like a kill: nothing is rolled back in-process.
    Abort,
}

/// A fault to inject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The step's name: `payload`, `profiles`, `host-config`, `runtime-<engine>`,
    /// `unconfigure-<engine>`, `host-files`.
    pub step: String,
    /// After how many changes within the step.
    pub after: usize,
    /// Fail or abort.
    pub action: FaultAction,
}

impl Fault {
    /// Parses `<step>:<n>[:fail|:abort]`.
    pub fn parse(text: &str) -> Result<Fault> {
        let bad = || {
            InstallError::InvalidRequest(format!("fault {text:?} is not <step>:<n>[:fail|:abort]"))
        };
        let mut parts = text.rsplitn(3, ':').collect::<Vec<_>>();
        parts.reverse();
        let (step, after, action) = match parts.as_slice() {
            [step, n] => (*step, *n, FaultAction::Fail),
            [step, n, "fail"] => (*step, *n, FaultAction::Fail),
            [step, n, "abort"] => (*step, *n, FaultAction::Abort),
            // A step name may contain ':' only if the action is given; keep it simple.
            _ => return Err(bad()),
        };
        let after = after.parse().map_err(|_| bad())?;
        if step.is_empty() {
            return Err(bad());
        }
        Ok(Fault {
            step: step.to_string(),
            after,
            action,
        })
    }

    /// Triggers the fault when `step` has made `changes` changes and this is the point.
    pub fn check(fault: Option<&Fault>, step: &str, changes: usize) -> Result<()> {
        let Some(f) = fault else {
            return Ok(());
        };
        if f.step != step || f.after != changes {
            return Ok(());
        }
        match f.action {
            FaultAction::Fail => Err(InstallError::Injected(f.to_string())),
            FaultAction::Abort => {
                tracing::error!(fault = %f, "aborting at injected fault");
                std::process::abort()
            }
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.step, self.after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_triggers_only_at_its_point() {
        let f = Fault::parse("payload:2").expect("parse");
        assert_eq!(f.action, FaultAction::Fail);
        assert!(Fault::check(Some(&f), "payload", 1).is_ok());
        assert!(Fault::check(Some(&f), "profiles", 2).is_ok());
        let err = Fault::check(Some(&f), "payload", 2).expect_err("must fail");
        assert!(err.to_string().contains("payload:2"), "{err}");
        let a = Fault::parse("runtime-containerd:0:abort").expect("parse");
        assert_eq!(a.step, "runtime-containerd");
        assert_eq!(a.action, FaultAction::Abort);
        assert!(Fault::parse("payload").is_err());
        assert!(Fault::parse("payload:x").is_err());
        assert!(Fault::parse(":1").is_err());
        assert!(Fault::check(None, "payload", 0).is_ok());
    }
}
