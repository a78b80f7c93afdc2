//! The runtime-config half of an engine's step, shared by install (configure) and uninstall
//! (unconfigure).
//!
//! A dry run asks the library for its report and diffs only. Otherwise the library makes its
//! changes through the step's journal ([`devinject_engine_config::host_writer::HostWriter`] on
//! [`Tx`]), which saves each file and directory before the library touches it: one pass, and a
//! failure or kill anywhere inside it is undone like any other change of the step. When
//! anything changed the engine is restarted or reloaded, and a rollback of the step does it
//! again.

use devinject_engine_config::host_writer::HostWriter;
use devinject_engine_config::{
    configure, configure_through, unconfigure, unconfigure_through, ChangeReport, ConfigureRequest,
    UnconfigureRequest,
};

use crate::activate::{activate, Outcome};
use crate::detect::Target;
use crate::error::{InstallError, Result};
use crate::journal::Tx;
use crate::options::{Layout, RestartMode};
use crate::steps::StepCtx;

/// A runtime-config request an engine step carries out.
pub trait Change {
    /// What it would change, writing nothing.
    fn preview(&self) -> devinject_engine_config::Result<ChangeReport>;

    /// Carries it out through `files`.
    fn make(&self, files: &mut dyn HostWriter) -> devinject_engine_config::Result<ChangeReport>;
}

impl Change for ConfigureRequest {
    fn preview(&self) -> devinject_engine_config::Result<ChangeReport> {
        configure(&ConfigureRequest {
            dry_run: true,
            ..self.clone()
        })
    }

    fn make(&self, files: &mut dyn HostWriter) -> devinject_engine_config::Result<ChangeReport> {
        configure_through(
            &ConfigureRequest {
                dry_run: false,
                ..self.clone()
            },
            files,
        )
    }
}

impl Change for UnconfigureRequest {
    fn preview(&self) -> devinject_engine_config::Result<ChangeReport> {
        unconfigure(&UnconfigureRequest {
            dry_run: true,
            ..self.clone()
        })
    }

    fn make(&self, files: &mut dyn HostWriter) -> devinject_engine_config::Result<ChangeReport> {
        unconfigure_through(
            &UnconfigureRequest {
                dry_run: false,
                ..self.clone()
            },
            files,
        )
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
    let Some(tx) = cx.tx.as_deref_mut() else {
        let preview = change.preview().map_err(InstallError::runtime(engine))?;
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

    let done = change.make(tx).map_err(InstallError::runtime(engine))?;
    for c in &done.changes {
        cx.report
            .changes
            .push(format!("{} {}", c.action, c.path.display()));
    }
    cx.report.notes.extend(done.notes.iter().cloned());
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
