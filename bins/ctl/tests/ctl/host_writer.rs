//! Configure and unconfigure change the host only through the `HostWriter` they are given: a
//! layer that records and does nothing leaves the host untouched, and a layer that records and
//! passes the change on sees every file and directory that differs afterwards. The installer's
//! journal relies on this to save each path before the library changes it.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::support::tree::{assert_same, snapshot, Snapshot};
use devinject_engine_config::host_writer::{Direct, HostWriter};
use devinject_engine_config::{
    configure_through, unconfigure_through, ConfigureRequest, Engine, HostPaths, Mode,
    UnconfigureRequest,
};

/// Every change asked for, by host path; passed on to the host when `direct` is set.
struct Recorder<'a> {
    direct: Option<Direct<'a>>,
    changed: BTreeSet<PathBuf>,
}

impl<'a> Recorder<'a> {
    fn new(direct: Option<Direct<'a>>) -> Self {
        Recorder {
            direct,
            changed: BTreeSet::new(),
        }
    }
}

impl HostWriter for Recorder<'_> {
    fn write(
        &mut self,
        host: &Path,
        bytes: &[u8],
        mode: Option<u32>,
    ) -> devinject_engine_config::Result<()> {
        self.changed.insert(host.to_path_buf());
        match &mut self.direct {
            Some(d) => d.write(host, bytes, mode),
            None => Ok(()),
        }
    }

    fn remove(&mut self, host: &Path) -> devinject_engine_config::Result<()> {
        self.changed.insert(host.to_path_buf());
        match &mut self.direct {
            Some(d) => d.remove(host),
            None => Ok(()),
        }
    }

    fn create_dirs(&mut self, host: &Path) -> devinject_engine_config::Result<Vec<PathBuf>> {
        match &mut self.direct {
            Some(d) => {
                let made = d.create_dirs(host)?;
                self.changed.extend(made.iter().cloned());
                Ok(made)
            }
            None => {
                self.changed.insert(host.to_path_buf());
                Ok(Vec::new())
            }
        }
    }

    fn remove_empty_dir(&mut self, host: &Path) -> devinject_engine_config::Result<bool> {
        self.changed.insert(host.to_path_buf());
        match &mut self.direct {
            Some(d) => d.remove_empty_dir(host),
            None => Ok(false),
        }
    }
}

/// The host paths whose presence or content differs between two snapshots.
fn differing(a: &Snapshot, b: &Snapshot) -> BTreeSet<PathBuf> {
    a.keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Path::new("/").join(k))
        .collect()
}

/// A host per engine, with the engine's own configuration where it has one.
fn host(engine: Engine) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let put = |rel: &str, text: &str| {
        let p = tmp.path().join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    };
    match engine {
        Engine::Docker => put("etc/docker/daemon.json", "{\n  \"debug\": true\n}\n"),
        Engine::Containerd => put(
            "etc/containerd/config.toml",
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n",
        ),
        Engine::Crio | Engine::Podman => {}
    }
    tmp
}

const ENGINES: [Engine; 4] = [
    Engine::Docker,
    Engine::Containerd,
    Engine::Crio,
    Engine::Podman,
];

/// A configure of `engine` on the host at `paths` (podman has hook mode only).
fn request(engine: Engine, paths: &HostPaths) -> ConfigureRequest {
    let mut req = ConfigureRequest::new(engine);
    req.paths = paths.clone();
    if engine == Engine::Podman {
        req.mode = Some(Mode::Hook);
    }
    req
}

#[test]
fn a_layer_that_does_nothing_leaves_the_host_untouched() {
    for engine in ENGINES {
        let tmp = host(engine);
        let before = snapshot(tmp.path(), &|_| false);
        let req = request(engine, &HostPaths::under_root(tmp.path()));
        let mut nothing = Recorder::new(None);
        let report = configure_through(&req, &mut nothing).expect("configure");
        assert!(
            report.changed(),
            "{engine}: a first configure changes files"
        );
        assert_same(
            &snapshot(tmp.path(), &|_| false),
            &before,
            &format!("{engine}: configure through a layer that writes nothing"),
        );
        for change in &report.changes {
            assert!(
                nothing.changed.contains(&change.path),
                "{engine}: {} was reported but not asked of the layer",
                change.path.display()
            );
        }
        assert!(
            nothing.changed.contains(&report.state_file),
            "{engine}: the state file goes through the layer too"
        );
    }
}

#[test]
fn every_change_on_the_host_went_through_the_layer() {
    for engine in ENGINES {
        let tmp = host(engine);
        let paths = HostPaths::under_root(tmp.path());
        let before = snapshot(tmp.path(), &|_| false);
        let req = request(engine, &paths);
        let mut seen = Recorder::new(Some(Direct::new(&paths)));
        configure_through(&req, &mut seen).expect("configure");
        let configured = snapshot(tmp.path(), &|_| false);
        let changed = differing(&before, &configured);
        assert!(!changed.is_empty(), "{engine}: configure changed nothing");
        let missed: Vec<_> = changed.difference(&seen.changed).collect();
        assert!(
            missed.is_empty(),
            "{engine}: changed without the layer: {missed:?}"
        );

        let mut unreq = UnconfigureRequest::new(engine);
        unreq.paths = paths.clone();
        let mut seen = Recorder::new(Some(Direct::new(&paths)));
        unconfigure_through(&unreq, &mut seen).expect("unconfigure");
        let after = snapshot(tmp.path(), &|_| false);
        let missed: Vec<_> = differing(&configured, &after)
            .difference(&seen.changed)
            .cloned()
            .collect();
        assert!(
            missed.is_empty(),
            "{engine}: unconfigure changed without the layer: {missed:?}"
        );
        assert_same(&after, &before, &format!("{engine}: round trip"));
    }
}
