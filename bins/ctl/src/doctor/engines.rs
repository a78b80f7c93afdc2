//! Container engines: installed (binary, socket), configured for devinject (read with the
//! engines' own detection), and whether what the configuration points at exists.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::doctor::cgroup::Cgroups;
use crate::doctor::{
    host_config, is_executable, is_socket, DoctorReport, DoctorRequest, Section, Severity,
};
use devinject_engine_config::engines::detection::{CgroupDriver, Integration};
use devinject_engine_config::engines::editor;
use devinject_engine_config::request::{Engine, Mode};

/// Where each engine's daemon binary and API socket are looked for.
pub fn engine_files(engine: Engine) -> (&'static str, &'static str) {
    match engine {
        Engine::Containerd => ("containerd", "/run/containerd/containerd.sock"),
        Engine::Crio => ("crio", "/run/crio/crio.sock"),
        Engine::Docker => ("dockerd", "/run/docker.sock"),
        Engine::Podman => ("podman", "/run/podman/podman.sock"),
    }
}

/// What doctor found out about one engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs, reason = "fields whose names say all a doc would")]
pub struct EngineState {
    pub engine: Engine,
    /// Its binary (host path), when installed.
    pub binary: Option<PathBuf>,
    /// Its API socket (host path), when present.
    pub socket: Option<PathBuf>,
    /// Where its configuration runs devinject.
    pub integrations: Vec<Integration>,
    /// The cgroup driver its configuration selects.
    pub driver: Option<CgroupDriver>,
}

impl EngineState {
    /// The binary or the socket is there.
    pub fn installed(&self) -> bool {
        self.binary.is_some() || self.socket.is_some()
    }
}

fn describe(i: &Integration) -> String {
    let what = match i.mode {
        Mode::Shim => format!("runtime {:?} runs the shim {}", i.name, i.binary.display()),
        Mode::Hook => format!("{} runs the hook {}", i.name, i.binary.display()),
    };
    let default = if i.default {
        " (the default runtime)"
    } else {
        ""
    };
    format!("{what}{default}, in {}", i.file.display())
}

/// Checks every engine; returns what was found, for the kubelet's checks.
pub fn check(
    req: &DoctorRequest,
    cgroups: &Cgroups,
    report: &mut DoctorReport,
) -> Vec<EngineState> {
    let paths = req.host_paths();
    let mut states = Vec::new();
    for engine in Engine::ALL {
        let (bin_name, socket) = engine_files(engine);
        let name = engine.name();
        let ed = editor(engine, &paths);
        let detected = ed.detect();
        let driver = ed.cgroup_driver().ok().flatten();
        let state = EngineState {
            engine,
            binary: req.find_binary(bin_name),
            socket: Some(PathBuf::from(socket)).filter(|s| is_socket(&req.access(s))),
            integrations: detected.as_ref().cloned().unwrap_or_default(),
            driver,
        };
        let mut where_ = Vec::new();
        if let Some(b) = &state.binary {
            where_.push(b.display().to_string());
        }
        if let Some(s) = &state.socket {
            where_.push(format!("socket {}", s.display()));
        }
        if let Some(d) = state.driver {
            where_.push(format!("{d} cgroup driver"));
        }
        let installed = where_.join(", ");
        match detected {
            Err(e) => report.add(
                Section::Engines,
                name,
                Severity::Error,
                format!("{name}: cannot read its configuration: {e}"),
                Some(format!(
                    "fix {} ({name} itself will not start like this either)",
                    ed.config().display()
                )),
            ),
            Ok(list) if list.is_empty() => {
                if state.installed() {
                    report.add(
                        Section::Engines,
                        name,
                        Severity::Warning,
                        format!("{name} ({installed}) is not configured for devinject"),
                        Some(format!("devinject-ctl runtime configure --runtime {name}")),
                    );
                } else {
                    report.add(
                        Section::Engines,
                        name,
                        Severity::Info,
                        format!("{name}: not installed"),
                        None,
                    );
                }
            }
            Ok(list) => {
                for i in &list {
                    check_integration(req, engine, &state, &installed, i, report);
                }
            }
        }
        if state.installed() && state.driver == Some(CgroupDriver::Systemd) && !cgroups.systemd_init
        {
            report.add(
                Section::Engines,
                name,
                Severity::Error,
                format!("{name} uses the systemd cgroup driver, but systemd is not init: its containers fail to start"),
                Some(format!("switch {name} to the cgroupfs driver in {}", ed.config().display())),
            );
        }
        states.push(state);
    }
    if !states.iter().any(|s| !s.integrations.is_empty()) {
        report.add(
            Section::Engines,
            "devinject",
            Severity::Error,
            "no container engine is configured for devinject: containers get no devices",
            Some(
                "devinject-ctl runtime configure --runtime containerd|crio|docker|podman"
                    .to_string(),
            ),
        );
    }
    states
}

fn check_integration(
    req: &DoctorRequest,
    engine: Engine,
    state: &EngineState,
    installed: &str,
    i: &Integration,
    report: &mut DoctorReport,
) {
    let name = engine.name();
    let summary = describe(i);
    let mut fine = true;
    if !is_executable(&req.access(&i.binary)) {
        fine = false;
        let effect = match i.mode {
            Mode::Shim => "containers run with this runtime fail to start",
            Mode::Hook => "every container fails to start",
        };
        report.add(
            Section::Engines,
            name,
            Severity::Error,
            format!("{name}: {summary}, but {} is not an executable file: {effect}", i.binary.display()),
            Some("install devinject's binaries there (devinject-installer), or configure again with --shim-path / --hook-path".to_string()),
        );
    }
    if let Some(config) = &i.config {
        match host_config::load(req, config) {
            Err(e) => {
                fine = false;
                report.add(
                    Section::Engines,
                    name,
                    Severity::Error,
                    format!("{name}: {summary}, with a host configuration that does not load: {e}"),
                    Some(format!("fix {}", config.display())),
                );
            }
            Ok(_) if req.host_config.as_deref() != Some(config.as_path()) => report.add(
                Section::Engines,
                name,
                Severity::Info,
                format!(
                    "{name}: the {} reads {}; this report checks {}",
                    i.mode,
                    config.display(),
                    req.host_config
                        .as_deref()
                        .unwrap_or(Path::new(devinject_hostconfig::DEFAULT_CONFIG_PATH))
                        .display()
                ),
                Some(format!(
                    "devinject-ctl doctor --config {}",
                    config.display()
                )),
            ),
            Ok(_) => {}
        }
    }
    for problem in &i.problems {
        fine = false;
        report.add(
            Section::Engines,
            name,
            Severity::Warning,
            format!("{name}: {summary}, but {problem}"),
            Some(format!("devinject-ctl runtime configure --runtime {name}")),
        );
    }
    if i.mode == Mode::Hook && state.driver == Some(CgroupDriver::Systemd) {
        fine = false;
        report.add(
            Section::Engines,
            name,
            Severity::Warning,
            format!(
                "{name}: {summary}, with the systemd cgroup driver: systemd owns the containers' \
                 device rules, so `systemctl daemon-reload` can take away what the hook granted"
            ),
            Some(format!(
                "devinject-ctl runtime configure --runtime {name} --mode shim (devices then live in the spec)"
            )),
        );
    }
    if !state.installed() {
        fine = false;
        report.add(
            Section::Engines,
            name,
            Severity::Warning,
            format!("{name}: {summary}, but {name} is not installed"),
            None,
        );
    }
    if fine {
        report.add(
            Section::Engines,
            name,
            Severity::Ok,
            format!("{name} ({installed}): {summary}"),
            None,
        );
    }
}
