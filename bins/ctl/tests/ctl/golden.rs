//! Golden tests: realistic engine configurations under `tests/golden/<case>/before`, configured
//! with a request, compared with `tests/golden/<case>/after`; then configured again (nothing may
//! change), and unconfigured (everything must be byte-identical to `before`, modes included).
//!
//! `UPDATE_GOLDEN=1 cargo test -p devinject-ctl --test ctl -- golden::` rewrites the `after` trees; review them by eye.

use std::path::{Path, PathBuf};

use crate::support::tree::{self, assert_same, is_state_file, snapshot};
use devinject_engine_config::{
    configure, unconfigure, ConfigureRequest, Engine, HostPaths, Mode, UnconfigureRequest,
};

struct Case {
    name: &'static str,
    engine: Engine,
    mode: Mode,
    set_as_default: bool,
    base_spec: Option<&'static str>,
    /// (relative path, mode) set after copying `before` (git keeps no modes).
    modes: &'static [(&'static str, u32)],
}

const fn case(name: &'static str, engine: Engine, mode: Mode, set_as_default: bool) -> Case {
    Case {
        name,
        engine,
        mode,
        set_as_default,
        base_spec: None,
        modes: &[],
    }
}

const CASES: &[Case] = &[
    case(
        "containerd-1.6-default-shim",
        Engine::Containerd,
        Mode::Shim,
        false,
    ),
    Case {
        base_spec: Some("/etc/devinject/ctr-oci-spec.json"),
        ..case(
            "containerd-1.6-default-hook",
            Engine::Containerd,
            Mode::Hook,
            false,
        )
    },
    case(
        "containerd-1.7-nvidia-default",
        Engine::Containerd,
        Mode::Shim,
        true,
    ),
    case(
        "containerd-2.x-v3-default",
        Engine::Containerd,
        Mode::Shim,
        true,
    ),
    case(
        "containerd-missing-config",
        Engine::Containerd,
        Mode::Shim,
        false,
    ),
    case("crio-shim-default", Engine::Crio, Mode::Shim, true),
    case("crio-hook", Engine::Crio, Mode::Hook, false),
    case("crio-hook-dir-listed", Engine::Crio, Mode::Hook, false),
    Case {
        modes: &[("etc/docker/daemon.json", 0o600)],
        ..case("docker-nvidia-default", Engine::Docker, Mode::Shim, true)
    },
    case("docker-missing", Engine::Docker, Mode::Shim, false),
    case("podman-hook", Engine::Podman, Mode::Hook, false),
    case("podman-shim-default", Engine::Podman, Mode::Shim, true),
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn request(case: &Case, root: &Path) -> ConfigureRequest {
    let mut req = ConfigureRequest::new(case.engine);
    req.mode = Some(case.mode);
    req.set_as_default = case.set_as_default;
    req.paths = HostPaths::under_root(root);
    req.base_spec = case.base_spec.map(PathBuf::from);
    // Never run the host's ctr from a golden test.
    req.ctr_path = PathBuf::from("/nonexistent/ctr");
    req
}

fn run_case(case: &Case) {
    let dir = golden_dir().join(case.name);
    let before_dir = dir.join("before");
    let after_dir = dir.join("after");
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    tree::copy_tree(&before_dir, root);
    for (rel, mode) in case.modes {
        std::fs::set_permissions(
            root.join(rel),
            std::os::unix::fs::PermissionsExt::from_mode(*mode),
        )
        .expect("chmod");
    }
    let before = snapshot(root, &|_| false);

    // A dry run reports the changes and writes nothing.
    let mut req = request(case, root);
    req.dry_run = true;
    let dry = configure(&req).expect("dry run");
    assert!(dry.changed(), "{}: dry run must report changes", case.name);
    assert!(
        dry.diff().contains("+++ b/"),
        "{}: dry run must show a diff",
        case.name
    );
    assert_same(
        &snapshot(root, &|_| false),
        &before,
        &format!("{}: dry run", case.name),
    );

    // Configure.
    req.dry_run = false;
    let report = configure(&req).expect("configure");
    assert!(
        report.changed(),
        "{}: configure must change something",
        case.name
    );
    assert_eq!(
        report.diff(),
        dry.diff(),
        "{}: dry run and real run differ",
        case.name
    );
    let after = snapshot(root, &|rel| is_state_file(rel));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(
            !devinject_tests::skip::in_ci(),
            "UPDATE_GOLDEN rewrites the expected files: never under CI"
        );
        let _ = std::fs::remove_dir_all(&after_dir);
        std::fs::create_dir_all(&after_dir).expect("mkdir after");
        tree::copy_tree(root, &after_dir);
        for (rel, _) in snapshot(&after_dir, &|_| false) {
            if is_state_file(&rel) {
                std::fs::remove_file(after_dir.join(rel)).expect("rm state");
            }
        }
    }
    let expected = snapshot(&after_dir, &|_| false);
    assert_same(&after, &expected, &format!("{}: configure", case.name));
    for (rel, mode) in case.modes {
        assert_eq!(
            tree::mode(&root.join(rel)),
            *mode,
            "{}: mode of {rel}",
            case.name
        );
    }

    // Configure again: nothing changes, not even the state file.
    let with_state = snapshot(root, &|_| false);
    let again = configure(&request(case, root)).expect("configure again");
    assert!(
        !again.changed(),
        "{}: second configure changed {:?}",
        case.name,
        again.changes
    );
    assert!(
        again.notes.iter().any(|n| n.contains("nothing changed")),
        "{}: second configure must say nothing changed: {:?}",
        case.name,
        again.notes
    );
    assert_same(
        &snapshot(root, &|_| false),
        &with_state,
        &format!("{}: idempotence", case.name),
    );

    // Unconfigure: byte-identical to before, modes included, no state file left.
    let mut unreq = UnconfigureRequest::new(case.engine);
    unreq.paths = req.paths.clone();
    unreq.dry_run = true;
    let undry = unconfigure(&unreq).expect("unconfigure dry run");
    assert!(undry.changed());
    assert_same(
        &snapshot(root, &|_| false),
        &with_state,
        &format!("{}: unconfigure dry run", case.name),
    );
    unreq.dry_run = false;
    let undone = unconfigure(&unreq).expect("unconfigure");
    assert!(undone.changed());
    assert_same(
        &snapshot(root, &|_| false),
        &before,
        &format!("{}: unconfigure", case.name),
    );
    for (rel, mode) in case.modes {
        assert_eq!(
            tree::mode(&root.join(rel)),
            *mode,
            "{}: restored mode of {rel}",
            case.name
        );
    }

    // Unconfigure again: nothing to do.
    let noop = unconfigure(&unreq).expect("unconfigure again");
    assert!(
        !noop.changed(),
        "{}: second unconfigure changed {:?}",
        case.name,
        noop.changes
    );
}

#[test]
fn golden_cases() {
    for case in CASES {
        run_case(case);
    }
}
