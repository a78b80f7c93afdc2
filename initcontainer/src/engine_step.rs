//! The runtime-config half of an engine's step, shared by install (configure) and uninstall
//! (unconfigure).
//!
//! The change is first previewed as a dry run: that is the whole step for a dry run, and
//! otherwise it names every file the library will touch, so that each is saved in the step's
//! journal before the library writes it. When anything changed the engine is restarted or
//! reloaded, and a rollback of the step does it again.

use devinject_runtime_config::{
    configure, unconfigure, ChangeReport, ConfigureRequest, UnconfigureRequest,
};

use crate::activate::{activate, Outcome};
use crate::detect::Target;
use crate::error::{InstallError, Result};
use crate::journal::Tx;
use crate::options::{Layout, RestartMode};
use crate::steps::{self, StepCtx};

/// A runtime-config request an engine step carries out.
pub trait Change {
    /// Carries it out, or with `dry_run` only says what it would change.
    fn make(&self, dry_run: bool) -> devinject_runtime_config::Result<ChangeReport>;
}

impl Change for ConfigureRequest {
    fn make(&self, dry_run: bool) -> devinject_runtime_config::Result<ChangeReport> {
        configure(&ConfigureRequest {
            dry_run,
            ..self.clone()
        })
    }
}

impl Change for UnconfigureRequest {
    fn make(&self, dry_run: bool) -> devinject_runtime_config::Result<ChangeReport> {
        unconfigure(&UnconfigureRequest {
            dry_run,
            ..self.clone()
        })
    }
}

/// Makes `change` to `target`'s configuration within the step `cx`, reporting it there.
/// `record` updates the install record within the step's transaction after the change and
/// before the engine is activated.
pub fn apply(
    cx: &mut StepCtx<'_, '_>,
    layout: &Layout,
    target: &Target,
    restart: RestartMode,
    change: &impl Change,
    record: impl FnOnce(&mut Tx<'_>) -> Result<()>,
) -> Result<()> {
    let engine = target.engine;
    let preview = change.make(true).map_err(InstallError::runtime(engine))?;
    let Some(tx) = cx.tx.as_deref_mut() else {
        for c in &preview.changes {
            cx.report
                .changes
                .push(format!("would {} {}", c.action, c.path.display()));
        }
        cx.report.diff = preview.diff();
        cx.report.notes.extend(preview.notes.iter().cloned());
        if preview.changed() {
            if let Some(i) = preview.activation.instruction() {
                cx.report.activation = Some(Outcome::Needed(i));
            }
        }
        return Ok(());
    };

    // Save everything the library is about to touch, then let it work.
    let mut touched: Vec<_> = preview.changes.iter().map(|c| c.path.clone()).collect();
    touched.push(preview.state_file.clone());
    for path in &touched {
        steps::protect_engine_file(tx, layout, path)?;
    }
    let done = change.make(false).map_err(InstallError::runtime(engine))?;
    for c in &done.changes {
        cx.report
            .changes
            .push(format!("{} {}", c.action, c.path.display()));
    }
    cx.report.notes.extend(done.notes.iter().cloned());
    if done.changed() {
        tx.changed()?;
    }
    record(tx)?;

    if done.changed() {
        if restart != RestartMode::None {
            tx.activate_on_undo(target)?;
        }
        let outcome = activate(&mut *cx.ctl, layout, target, done.activation, restart)?;
        if matches!(outcome, Outcome::Done(_)) {
            tx.changed()?;
        }
        cx.report.activation = Some(outcome);
    }
    Ok(())
}
