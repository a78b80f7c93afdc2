//! Running a step inside a journal transaction, shared by install and uninstall.
//!
//! A step either commits or is rolled back whole; a rolled-back step that had restarted an
//! engine restarts it again, so the daemon runs with the configuration that is back on disk.

use std::fs::File;
use std::path::PathBuf;

use devinject_engine_config::{Activation, Engine};
use devinject_hostfs::atomic_write;
use nix::fcntl::{Flock, FlockArg};

use crate::activate::{self, HostControl, Outcome};
use crate::detect::Target;
use crate::error::{InstallError, Result};
use crate::fault::Fault;
use crate::journal::{Journal, Tx};
use crate::options::{Layout, RestartMode};
use crate::report::{describe, Failure, Report, StepReport};

/// What a step's body gets.
pub struct StepCtx<'t, 'j> {
    /// The transaction; `None` for a dry run.
    pub tx: Option<&'t mut Tx<'j>>,
    /// The step's report, filled by the body.
    pub report: &'t mut StepReport,
    /// Host control for restarts.
    pub ctl: &'t mut dyn HostControl,
}

/// What every step of one install or uninstall shares: the journal, the settings, and how a
/// rolled-back step restarts engines.
pub struct Runner<'a> {
    /// The journal steps run in, in the state directory.
    pub journal: Journal,
    /// Fault injection, for the interruption tests.
    pub fault: Option<&'a Fault>,
    /// Dry run: bodies get no transaction and nothing is written.
    pub dry_run: bool,
    /// Where things are installed.
    pub layout: &'a Layout,
    /// Whether and how engines are restarted.
    pub restart: RestartMode,
}

impl<'a> Runner<'a> {
    /// Steps for `layout`, journaled in its state directory.
    pub fn new(
        layout: &'a Layout,
        fault: Option<&'a Fault>,
        dry_run: bool,
        restart: RestartMode,
    ) -> Self {
        Runner {
            journal: Journal::new(&layout.host, &layout.state_dir()),
            fault,
            dry_run,
            layout,
            restart,
        }
    }

    /// Locks the state directory (see [`lock`]) and undoes a step an earlier run left half
    /// done, restarting or reloading the engines it had restarted; the recovery goes into
    /// `report`. Returns the lock and the directories created for it.
    pub fn lock_and_recover(
        &self,
        ctl: &mut dyn HostControl,
        report: &mut Report,
    ) -> std::result::Result<(Flock<File>, Vec<PathBuf>), Box<Failure>> {
        let (lock, created) = lock(self.layout).map_err(|e| early(report, e))?;
        match self.journal.recover() {
            Ok(Some(rec)) => {
                for n in reactivate(ctl, self.layout, &rec.activate, self.restart) {
                    tracing::warn!(note = %n, "after undoing an interrupted step");
                }
                report.recovered = Some(rec);
            }
            Ok(None) => {}
            Err(e) => return Err(early(report, e)),
        }
        Ok((lock, created))
    }

    /// Runs a step: commits it when `body` succeeds, rolls it back (and restarts engines it
    /// had restarted) when it fails. The step's report is appended to `report` either way.
    pub fn run(
        &self,
        report: &mut Report,
        ctl: &mut dyn HostControl,
        name: &str,
        body: impl FnOnce(StepCtx<'_, '_>) -> Result<()>,
    ) -> std::result::Result<(), Box<Failure>> {
        let mut sr = StepReport::new(name);
        if self.dry_run {
            let r = body(StepCtx {
                tx: None,
                report: &mut sr,
                ctl,
            });
            report.steps.push(sr);
            return r.map_err(|error| failure(report, name, error, Ok(Vec::new()), Vec::new()));
        }
        let mut tx = match self.journal.begin(name, self.fault) {
            Ok(tx) => tx,
            Err(error) => return Err(failure(report, name, error, Ok(Vec::new()), Vec::new())),
        };
        let result = body(StepCtx {
            tx: Some(&mut tx),
            report: &mut sr,
            ctl: &mut *ctl,
        });
        match result {
            Ok(()) => {
                report.steps.push(sr);
                tx.commit().map_err(|error| {
                    failure(
                        report,
                        name,
                        error,
                        Err("the step was done but its journal could not be removed".into()),
                        Vec::new(),
                    )
                })
            }
            Err(error) => {
                tracing::error!(step = name, error = %describe(&error), "step failed; undoing it");
                let (undone, notes) = match tx.rollback() {
                    Ok((paths, targets)) => {
                        let notes = reactivate(ctl, self.layout, &targets, self.restart);
                        (Ok(paths), notes)
                    }
                    Err(e) => (Err(describe(&e)), Vec::new()),
                };
                Err(failure(report, name, error, undone, notes))
            }
        }
    }
}

fn failure(
    report: &Report,
    step: &str,
    error: InstallError,
    undone: std::result::Result<Vec<PathBuf>, String>,
    notes: Vec<String>,
) -> Box<Failure> {
    Box::new(Failure {
        report: report.clone(),
        step: step.to_string(),
        error,
        undone,
        notes,
    })
}

/// A failure before any step ran: nothing was changed.
pub fn early(report: &Report, error: InstallError) -> Box<Failure> {
    failure(report, "prepare", error, Ok(Vec::new()), Vec::new())
}

/// The activation an engine needs after its configuration files changed.
pub fn activation_for(engine: Engine) -> Activation {
    match engine {
        Engine::Docker => Activation::Reload { service: "docker" },
        Engine::Podman => Activation::NextContainer,
        Engine::Containerd => Activation::Restart {
            service: "containerd",
        },
        Engine::Crio => Activation::Restart { service: "crio" },
    }
}

/// Restarts or reloads `targets` after their configuration went back; returns notes.
pub fn reactivate(
    ctl: &mut dyn HostControl,
    layout: &Layout,
    targets: &[Target],
    restart: RestartMode,
) -> Vec<String> {
    let mut notes = Vec::new();
    for t in targets {
        match activate::activate(ctl, layout, t, activation_for(t.engine), restart) {
            Ok(Outcome::Done(what)) => notes.push(format!(
                "{} was told to use its previous configuration again: {what}",
                t.describe()
            )),
            Ok(Outcome::Needed(what)) => notes.push(what),
            Ok(Outcome::NotNeeded) => {}
            Err(e) => notes.push(format!(
                "{} still runs with the configuration that was undone: {}",
                t.describe(),
                describe(&e)
            )),
        }
    }
    notes
}

/// Creates the state directory if needed and locks it (flock), so two installers never run on
/// one host at once; waits for another one to finish. Returns the lock and the directories
/// created (host paths, outermost first).
pub fn lock(layout: &Layout) -> Result<(Flock<File>, Vec<PathBuf>)> {
    let dir = layout.access(&layout.state_dir());
    let created = atomic_write::create_dirs(&dir).map_err(|e| InstallError::State {
        path: dir.clone(),
        message: e.to_string(),
    })?;
    let file = File::open(&dir).map_err(|e| InstallError::io("open", &dir, e))?;
    let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| {
        InstallError::io("lock", &dir, std::io::Error::from_raw_os_error(e as i32))
    })?;
    let created = created.iter().map(|d| layout.host.host_of(d)).collect();
    Ok((lock, created))
}
