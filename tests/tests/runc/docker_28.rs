//! docker 28 (Debian unstable's engine and CLI, on its containerd 2; scripts/runtimes-fetch.sh)
//! with each way devinject reaches a docker user:
//!
//! - **CDI by name, no setting**: docker >= 28.2 injects CDI devices named on
//!   `docker run --device devinject.io/<kind>=<id>` with nothing in daemon.json to turn it on; the
//!   spec is the one `devinject-ctl cdi generate` writes (here into a private directory given as
//!   `cdi-spec-dirs`, so no host directory is touched), and no devinject hook or shim is
//!   registered. The un-granted `accel2`, bind-mounted in, stays denied by the cgroup; the demo
//!   library is mounted and in the linker cache (written by the spec's `devinject-hook finish`
//!   hook, with no ldconfig to fall back to).
//! - **the runtime shim** (`--runtime=devinject`), and
//! - **the hook-only runtime** (`devinject-hook` as a `createRuntime` hook in front of runc),
//!   each granting exactly the requested demo devices.
//!
//! The runc behind every path is the runc under test (`DEVINJECT_RUNC`, so scripts/test.sh runs
//! this file on Debian's runc 1.1 and on runc 1.4). Needs root, the fetched docker 28 and
//! containerd 2, runc, busybox and the built binaries; skipped otherwise (fails under `CI=true`).

use std::process::Output;

use devinject_tests::cri_node::cdi_generate;
use devinject_tests::docker::{
    hook_only_runtime, release_28, runc_runtime, shim_runtime, Engine, EngineRelease, RuntimeEntry,
    HOOK_ONLY, IMAGE, RUNC_UNDER_TEST, SHIM,
};
use devinject_tests::probe::Report;
use devinject_tests::runc::describe;
use devinject_tests::runtimes::Release;
use devinject_tests::sim::{
    assert_demo_granted_0_1_in, demo_host, demo_probe_args, SimHost, NO_LDCONFIG,
};

/// A simulated demo host (no usable ldconfig) and a docker 28 engine with `runtimes` and the
/// daemon.json `settings`, with the busybox image imported. Fields drop in order: the engine
/// before the host's dir.
struct Rig {
    engine: Engine,
    host: SimHost,
    dir: tempfile::TempDir,
}

impl Rig {
    fn start(
        mut release: EngineRelease,
        runtimes: impl FnOnce(&SimHost) -> Vec<RuntimeEntry>,
        cdi: bool,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let host = demo_host(&dir.path().join("host"), &["demo"]).expect("simulated host");
        host.write_config(NO_LDCONFIG).expect("host config");
        if cdi {
            let specs = dir.path().join("cdi");
            let out = cdi_generate(&host, &specs).expect("devinject-ctl cdi generate");
            assert!(specs.join("devinject.io-demo.json").is_file(), "{out}");
            release
                .daemon_json
                .insert("cdi-spec-dirs".to_owned(), serde_json::json!([specs]));
        }
        let engine = Engine::start_release(&runtimes(&host), &[], &release).expect("docker 28");
        engine.import_busybox().expect("import busybox");
        Self { engine, host, dir }
    }

    /// Runs the demo probe with `flags`, `accel2` bind-mounted in; asserts that exactly devices 0
    /// and 1 (and the control node and library) are granted.
    fn assert_demo_granted(&self, flags: &[&str]) {
        let accel2 = format!(
            "{}:/dev/demo/accel2",
            self.host.dev_root.join("demo/accel2").display()
        );
        let probe = demo_probe_args();
        let mut args = vec!["run", "--rm", "-v", &accel2];
        args.extend(flags);
        args.push(IMAGE);
        args.extend(probe.iter().map(String::as_str));
        let out = self.engine.docker(&args);
        let ctx = self.context(&out);
        assert!(out.status.success(), "{ctx}");
        assert_demo_granted_0_1_in(&Report::parse(&String::from_utf8_lossy(&out.stdout)), &ctx);
    }

    fn context(&self, out: &Output) -> String {
        format!(
            "{}\n--- engine\n{}\n--- daemon.json\n{}",
            describe(out),
            self.engine.log_tails(),
            std::fs::read_to_string(self.engine.dir().join("daemon.json")).unwrap_or_default()
        )
    }
}

/// The version the engine reports: the fetched docker 28, not the machine's 20.10.
fn assert_engine_is(rig: &Rig, docker: &Release) {
    let server = rig
        .engine
        .docker_ok(&["version", "--format", "{{.Server.Version}}"])
        .expect("docker version");
    assert!(
        server.starts_with("28.") && docker.version.starts_with(&server),
        "the engine says {server}, the fetched docker is {}",
        docker.version
    );
}

#[test]
fn docker_28_injects_the_cdi_devices_cdi_generate_writes_with_no_setting() {
    let Some(release) = release_28() else { return };
    let docker = release.docker.clone().expect("docker");
    let rig = Rig::start(release, |_| vec![runc_runtime()], true);
    assert_engine_is(&rig, &docker);
    let runtime = format!("--runtime={RUNC_UNDER_TEST}");
    rig.assert_demo_granted(&[
        &runtime,
        "--device",
        "devinject.io/demo=0",
        "--device",
        "devinject.io/demo=1",
    ]);
    // A device the spec does not define is refused by docker before the container starts.
    let out = rig.engine.docker(&[
        "run",
        "--rm",
        &runtime,
        "--device",
        "devinject.io/demo=7",
        IMAGE,
        "true",
    ]);
    assert!(!out.status.success(), "{}", rig.context(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("devinject.io/demo=7"),
        "{}",
        rig.context(&out)
    );
    drop(rig.dir);
}

#[test]
fn docker_28_runs_the_devinject_shim() {
    let Some(release) = release_28() else { return };
    let rig = Rig::start(release, |host| vec![shim_runtime(&host.config)], false);
    let runtime = format!("--runtime={SHIM}");
    rig.assert_demo_granted(&[&runtime, "-e", "DEMO_VISIBLE_DEVICES=0,1"]);
}

#[test]
fn docker_28_runs_the_hook_only_runtime() {
    let Some(release) = release_28() else { return };
    let rig = Rig::start(release, |host| vec![hook_only_runtime(&host.config)], false);
    let runtime = format!("--runtime={HOOK_ONLY}");
    rig.assert_demo_granted(&[&runtime, "-e", "DEMO_VISIBLE_DEVICES=0,1"]);
}
