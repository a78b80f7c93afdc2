//! Detection reads back what configure wrote, for every engine and mode, the way the engine
//! reads it (imports, drop-ins, hooks directories); and finds entries written by hand.

use std::fs;
use std::path::{Path, PathBuf};

use devinject_engine_config::engines::{self, detection::Integration};
use devinject_engine_config::{
    configure, unconfigure, ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest,
};

fn detect(engine: Engine, root: &Path) -> Vec<Integration> {
    engines::editor(engine, &HostPaths::under_root(root))
        .detect()
        .expect("detect")
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(&p, text).expect("write");
}

#[test]
fn configure_then_detect_finds_the_entry_for_every_engine_and_mode() {
    let cases = [
        (Engine::Containerd, Mode::Shim, true),
        (Engine::Containerd, Mode::Hook, false),
        (Engine::Crio, Mode::Shim, true),
        (Engine::Crio, Mode::Hook, false),
        (Engine::Docker, Mode::Shim, true),
        (Engine::Podman, Mode::Shim, true),
        (Engine::Podman, Mode::Hook, false),
    ];
    for (engine, mode, default) in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        assert!(
            detect(engine, root).is_empty(),
            "{engine} {mode}: empty host"
        );
        write(root, "base.json", "{\"ociVersion\": \"1.0.2\"}\n");
        let mut req = ConfigureRequest::new(engine);
        req.paths = HostPaths::under_root(root);
        req.mode = Some(mode);
        req.set_as_default = default;
        req.base_spec = Some(PathBuf::from("/base.json"));
        req.hook_config = Some(PathBuf::from("/etc/devinject/other.toml"));
        configure(&req).unwrap_or_else(|e| panic!("{engine} {mode}: {e}"));

        let found = detect(engine, root);
        assert_eq!(found.len(), 1, "{engine} {mode}: {found:#?}");
        let i = &found[0];
        assert_eq!(i.mode, mode, "{engine}");
        assert_eq!(i.default, default, "{engine} {mode}");
        assert!(i.problems.is_empty(), "{engine} {mode}: {:?}", i.problems);
        match mode {
            Mode::Shim => {
                assert_eq!(i.binary, PathBuf::from("/usr/local/bin/devinject-runtime"));
                assert_eq!(i.name, "devinject");
            }
            Mode::Hook => {
                assert_eq!(i.binary, PathBuf::from("/usr/local/bin/devinject-hook"));
                assert_eq!(
                    i.config,
                    Some(PathBuf::from("/etc/devinject/other.toml")),
                    "{engine}"
                );
            }
        }

        let mut un = UnconfigureRequest::new(engine);
        un.paths = HostPaths::under_root(root);
        unconfigure(&un).expect("unconfigure");
        assert!(
            detect(engine, root).is_empty(),
            "{engine} {mode}: after unconfigure"
        );
    }
}

#[test]
fn hand_written_entries_are_found_with_their_problems() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(
        root,
        "etc/containerd/config.toml",
        "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"gpu\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu]\n  runtime_type = \"io.containerd.runc.v2\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpu.options]\n  BinaryName = \"/opt/bin/devinject-runtime\"\n",
    );
    let found = detect(Engine::Containerd, root);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].name, "gpu");
    assert!(found[0].default);
    assert!(
        found[0].problems[0].contains("container_annotations"),
        "{:?}",
        found[0].problems
    );

    write(
        root,
        "etc/docker/daemon.json",
        "{\"runtimes\": {\"di\": {\"path\": \"/opt/devinject-runtime\", \"runtimeArgs\": [\"--config\", \"/c.toml\"]}}}",
    );
    let found = detect(Engine::Docker, root);
    assert_eq!(found[0].config, Some(PathBuf::from("/c.toml")));
    assert!(!found[0].default);

    // CRI-O reads only /usr/share/containers/oci/hooks.d unless hooks_dir says otherwise.
    let hook = "{\"version\":\"1.0.0\",\"hook\":{\"path\":\"/bin/devinject-hook\"},\"when\":{\"always\":true},\"stages\":[\"poststop\"]}";
    write(root, "etc/containers/oci/hooks.d/devinject.json", hook);
    assert!(detect(Engine::Crio, root).is_empty());
    let podman = detect(Engine::Podman, root);
    assert_eq!(podman.len(), 1, "root podman reads both directories");
    assert!(podman[0].problems[0].contains("stages"), "{podman:#?}");
}
