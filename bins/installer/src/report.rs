//! What an install or uninstall did, step by step, and how a failure is reported.

use std::fmt;
use std::path::PathBuf;

use crate::activate::Outcome;
use crate::error::InstallError;
use crate::journal::Recovery;

/// One step's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    /// The step's name (`payload`, `profiles`, `host-config`, `runtime-containerd`, ...).
    pub step: String,
    /// One line per change: `create /opt/devinject/bin/devinject-hook`.
    pub changes: Vec<String>,
    /// Remarks.
    pub notes: Vec<String>,
    /// For a dry run: the diffs of engine configuration files.
    pub diff: String,
    /// Restart or reload of an engine, when the step configured one.
    pub activation: Option<Outcome>,
}

impl StepReport {
    /// An empty report for `step`.
    pub fn new(step: &str) -> Self {
        StepReport {
            step: step.to_string(),
            ..StepReport::default()
        }
    }

    /// Whether the step changed the host.
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }
}

/// The result of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Nothing was written.
    pub dry_run: bool,
    /// A step an earlier, interrupted run left half done and that this run undid first.
    pub recovered: Option<Recovery>,
    /// The steps carried out, in order.
    pub steps: Vec<StepReport>,
    /// Uninstall: files left on the host on purpose, with the reason.
    pub left: Vec<(PathBuf, String)>,
}

impl Report {
    /// Whether any step changed the host.
    pub fn changed(&self) -> bool {
        self.steps.iter().any(StepReport::changed)
    }

    /// The activations still to be done by the user (`--restart-mode none`).
    pub fn pending_activations(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter_map(|s| match &s.activation {
                Some(Outcome::Needed(text)) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(r) = &self.recovered {
            writeln!(
                f,
                "recovered: an earlier run was interrupted during step {}; undid it ({} file(s) put back)",
                r.step,
                r.restored.len()
            )?;
        }
        for s in &self.steps {
            if s.changes.is_empty() && s.notes.is_empty() && s.activation.is_none() {
                writeln!(f, "{}: unchanged", s.step)?;
                continue;
            }
            writeln!(f, "{}:", s.step)?;
            for c in &s.changes {
                writeln!(f, "  {c}")?;
            }
            for n in &s.notes {
                writeln!(f, "  note: {n}")?;
            }
            if !s.diff.is_empty() {
                for line in s.diff.lines() {
                    writeln!(f, "  | {line}")?;
                }
            }
            match &s.activation {
                Some(Outcome::Done(what)) => writeln!(f, "  activated: {what}")?,
                Some(Outcome::Needed(what)) => writeln!(f, "  ACTION NEEDED: {what}")?,
                Some(Outcome::NotNeeded) | None => {}
            }
        }
        for (path, why) in &self.left {
            writeln!(f, "left on the host: {} ({why})", path.display())?;
        }
        if self.dry_run {
            writeln!(f, "dry run: nothing was written")?;
        } else if !self.changed() {
            writeln!(f, "nothing changed")?;
        }
        Ok(())
    }
}

/// A run that stopped at a failing step.
#[derive(Debug)]
pub struct Failure {
    /// What was done before the failing step (those steps stay done).
    pub report: Report,
    /// The failing step.
    pub step: String,
    /// Why it failed.
    pub error: InstallError,
    /// The paths the rollback put back, or why the rollback itself failed.
    pub undone: Result<Vec<PathBuf>, String>,
    /// Remarks about the rollback (an engine restarted again with its old configuration).
    pub notes: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "step {} failed: {}", self.step, describe(&self.error))?;
        match &self.undone {
            Ok(paths) if paths.is_empty() => writeln!(
                f,
                "it had changed nothing; the host is as it was before step {}",
                self.step
            )?,
            Ok(paths) => {
                writeln!(
                    f,
                    "it was undone; the host is as it was before step {} (put back: {})",
                    self.step,
                    paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )?;
            }
            Err(e) => writeln!(
                f,
                "undoing it failed too: {e}; the journal stays and the next run finishes the undo"
            )?,
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        let done: Vec<&str> = self
            .report
            .steps
            .iter()
            .filter(|s| s.changed())
            .map(|s| s.step.as_str())
            .collect();
        if done.is_empty() {
            writeln!(f, "no earlier step of this run changed anything")?;
        } else {
            writeln!(f, "done before it (and kept): {}", done.join(", "))?;
        }
        Ok(())
    }
}

/// An error and its causes on one line, each cause once: the hook's wording, so that both
/// binaries report a chain alike.
pub use devinject_exit::describe;
