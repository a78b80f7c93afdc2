//! The installer against fake host roots seeded with real containerd, CRI-O and docker
//! configuration files: install, re-install (no change, no restart), upgrade, uninstall
//! (byte-identical restore), k3s, running containers, and a failure injected at every point of
//! every step (the host is as it was before that step). Restarts go to a recording fake.

use crate::support;

use std::path::PathBuf;

use crate::support::{assert_same, FakeHost, Snapshot};
use devinject_engine_config::Engine;
use devinject_installer::activate::Recorder;
use devinject_installer::fault::{Fault, FaultAction};
use devinject_installer::options::Policy;
use devinject_installer::{
    install, uninstall, EngineChoice, InstallError, InstallOptions, RestartMode, UninstallOptions,
};

fn options(h: &FakeHost, engines: EngineChoice) -> InstallOptions {
    let mut o = InstallOptions::new(&h.root, &h.payload);
    o.engines = engines;
    o.host_config.policy = Policy::HookDefault;
    // Nothing of the test machine: an empty /proc.
    o.layout.proc_root = h.dir.path().join("proc");
    o
}

fn un_options(h: &FakeHost) -> UninstallOptions {
    let mut o = UninstallOptions::new(&h.root);
    o.layout.proc_root = h.dir.path().join("proc");
    o
}

fn ok<T>(r: Result<T, Box<devinject_installer::Failure>>) -> T {
    r.unwrap_or_else(|f| panic!("{f}"))
}

struct Case {
    golden: &'static str,
    engine: Engine,
    choice: EngineChoice,
    restart: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            golden: "containerd-1.6-default-shim",
            engine: Engine::Containerd,
            choice: EngineChoice::Auto,
            restart: "systemctl restart containerd",
        },
        Case {
            golden: "containerd-1.7-nvidia-default",
            engine: Engine::Containerd,
            choice: EngineChoice::Auto,
            restart: "systemctl restart containerd",
        },
        Case {
            golden: "containerd-2.x-v3-default",
            engine: Engine::Containerd,
            choice: EngineChoice::Auto,
            restart: "systemctl restart containerd",
        },
        Case {
            golden: "containerd-missing-config",
            engine: Engine::Containerd,
            choice: EngineChoice::These(vec![Engine::Containerd]),
            restart: "systemctl restart containerd",
        },
        Case {
            golden: "crio-shim-default",
            engine: Engine::Crio,
            choice: EngineChoice::Auto,
            restart: "systemctl restart crio",
        },
        Case {
            golden: "docker-nvidia-default",
            engine: Engine::Docker,
            choice: EngineChoice::Auto,
            restart: "systemctl reload docker",
        },
        Case {
            golden: "docker-missing",
            engine: Engine::Docker,
            choice: EngineChoice::These(vec![Engine::Docker]),
            restart: "systemctl reload docker",
        },
    ]
}

#[test]
fn install_reinstall_uninstall_round_trip_for_every_engine() {
    for case in cases() {
        let h = FakeHost::new(Some(case.golden));
        let before = h.snapshot();
        let mut ctl = Recorder::default();
        let opts = options(&h, case.choice.clone());

        let report = ok(install(&opts, &mut ctl));
        assert!(report.changed(), "{}: {report}", case.golden);
        assert_eq!(ctl.calls, vec![case.restart], "{}", case.golden);
        for b in devinject_installer::install::BINARIES {
            let p = h.path(&format!("/opt/devinject/bin/{b}"));
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(&p).expect("installed").permissions(),
            );
            assert_eq!(mode & 0o7777, 0o755, "{}: {b}", case.golden);
        }
        assert!(h.path("/etc/devinject/profiles/demo.toml").is_file());
        let config = h.read("/etc/devinject/config.toml");
        assert!(
            config.contains("profiles_dir = \"/etc/devinject/profiles\""),
            "{config}"
        );
        let step = format!("runtime-{}", case.engine);
        let rt = report
            .steps
            .iter()
            .find(|s| s.step == step)
            .expect("runtime step");
        assert!(
            rt.changes
                .iter()
                .any(|c| c.contains("create") || c.contains("modify")),
            "{}: {rt:?}",
            case.golden
        );
        let installed = h.snapshot();
        let shim_named = installed.iter().any(|(p, n)| {
            !p.starts_with("opt")
                && matches!(n, support::Node::File { bytes, .. }
                    if String::from_utf8_lossy(bytes).contains("/opt/devinject/bin/devinject-runtime"))
        });
        assert!(shim_named, "{}: no engine file names the shim", case.golden);

        // Re-install: nothing changes, nothing restarts.
        let again = ok(install(&opts, &mut ctl));
        assert!(!again.changed(), "{}: {again}", case.golden);
        assert_eq!(ctl.calls.len(), 1, "{}: {:?}", case.golden, ctl.calls);
        assert_same(&h.snapshot(), &installed, "re-install");

        // Uninstall: byte-identical host, and one more restart.
        let un = ok(uninstall(&un_options(&h), &mut ctl));
        assert!(un.left.is_empty(), "{un}");
        assert_eq!(
            ctl.calls,
            vec![case.restart, case.restart],
            "{}",
            case.golden
        );
        assert_same(&h.snapshot(), &before, case.golden);
    }
}

#[test]
fn upgrade_replaces_changed_binaries_without_a_restart() {
    let h = FakeHost::new(Some("containerd-1.6-default-shim"));
    let mut ctl = Recorder::default();
    let opts = options(&h, EngineChoice::Auto);
    ok(install(&opts, &mut ctl));
    support::write_payload(&h.payload, "v2");
    let report = ok(install(&opts, &mut ctl));
    let payload = &report.steps[0];
    assert_eq!(payload.step, "payload");
    assert_eq!(
        payload.changes.len(),
        devinject_installer::install::BINARIES.len(),
        "{report}"
    );
    assert!(payload.changes.iter().all(|c| c.starts_with("replace ")));
    assert!(report.steps[1..].iter().all(|s| !s.changed()), "{report}");
    assert_eq!(
        ctl.calls.len(),
        1,
        "no restart for new binaries: {:?}",
        ctl.calls
    );
    assert!(h
        .read("/opt/devinject/bin/devinject-runtime")
        .contains("v2"));
}

#[test]
fn files_that_were_there_before_come_back_on_uninstall() {
    let h = FakeHost::new(Some("docker-nvidia-default"));
    h.write(
        "/etc/devinject/config.toml",
        "# written by hand\nlog_level = \"debug\"\n",
    );
    h.write("/etc/devinject/profiles/site.toml.disabled", "x");
    if nix::unistd::geteuid().is_root() {
        // Someone else's files: uninstall must bring their owner back too.
        for p in [
            "/etc/devinject/config.toml",
            "/etc/devinject/profiles/site.toml.disabled",
        ] {
            let (uid, gid) = support::SEEDED_OWNER;
            std::os::unix::fs::lchown(h.path(p), Some(uid), Some(gid)).expect("lchown");
        }
    }
    let before = h.snapshot();
    let mut ctl = Recorder::default();
    ok(install(&options(&h, EngineChoice::Auto), &mut ctl));
    assert!(h
        .read("/etc/devinject/config.toml")
        .starts_with(devinject_installer::host_config::MARKER));
    ok(uninstall(&un_options(&h), &mut ctl));
    assert_same(&h.snapshot(), &before, "pre-existing files");
}

#[test]
fn a_dry_run_writes_nothing_and_shows_the_diff() {
    let h = FakeHost::new(Some("containerd-1.7-nvidia-default"));
    let before = h.snapshot();
    let mut ctl = Recorder::default();
    let mut opts = options(&h, EngineChoice::Auto);
    opts.dry_run = true;
    let report = ok(install(&opts, &mut ctl));
    assert!(report.dry_run);
    let text = report.to_string();
    assert!(
        text.contains("would create /opt/devinject/bin/devinject-hook"),
        "{text}"
    );
    assert!(text.contains("99-devinject.toml"), "{text}");
    assert!(text.contains("ACTION NEEDED"), "{text}");
    assert!(ctl.calls.is_empty());
    assert_same(&h.snapshot(), &before, "dry run");
}

#[test]
fn restart_mode_none_configures_and_reports_the_restart() {
    let h = FakeHost::new(Some("crio-shim-default"));
    let mut ctl = Recorder::default();
    let mut opts = options(&h, EngineChoice::Auto);
    opts.restart = RestartMode::None;
    let report = ok(install(&opts, &mut ctl));
    assert!(ctl.calls.is_empty());
    assert_eq!(
        report.pending_activations(),
        vec!["crio needs a restart for devinject to take effect: systemctl restart crio"]
    );
    assert!(h.path("/etc/crio/crio.conf.d/99-devinject.conf").exists());
}

#[test]
fn a_failed_restart_puts_the_old_configuration_back_and_restarts_again() {
    let h = FakeHost::new(Some("containerd-1.6-default-shim"));
    // containerd does not come up with the new configuration, and does with the old one.
    let mut ctl = Recorder {
        systemctl_failures: 1,
        ..Recorder::default()
    };
    let opts = options(&h, EngineChoice::Auto);
    // The same host after the steps before the runtime step.
    let h2 = FakeHost::new(Some("containerd-1.6-default-shim"));
    ok(install(
        &options(&h2, EngineChoice::Skip),
        &mut Recorder::default(),
    ));

    let failure = install(&opts, &mut ctl).expect_err("restart fails");
    assert_eq!(failure.step, "runtime-containerd");
    assert!(
        matches!(failure.error, InstallError::Activate { .. }),
        "{}",
        failure.error
    );
    let text = failure.to_string();
    assert!(text.contains("it was undone"), "{text}");
    assert!(text.contains("previous configuration"), "{text}");
    assert_eq!(
        ctl.calls,
        vec![
            "systemctl restart containerd",
            "systemctl restart containerd"
        ]
    );
    // The engine's files are as before; the earlier steps stay done.
    assert_same(&h.snapshot(), &h2.snapshot(), "after a failed restart");
}

/// For each step and each point in it: a failure there leaves the host exactly as a failure at
/// the step's start, i.e. as it was before the step.
#[test]
fn a_failure_at_any_point_leaves_the_host_as_before_that_step() {
    for (golden, step) in [
        ("containerd-1.7-nvidia-default", "payload"),
        ("containerd-1.7-nvidia-default", "profiles"),
        ("containerd-1.7-nvidia-default", "host-config"),
        ("containerd-1.7-nvidia-default", "runtime-containerd"),
        ("docker-nvidia-default", "runtime-docker"),
        ("crio-shim-default", "runtime-crio"),
    ] {
        let at = |n: usize| -> (Result<(), String>, Snapshot, Vec<String>) {
            let h = FakeHost::new(Some(golden));
            let mut opts = options(&h, EngineChoice::Auto);
            opts.fault = Some(Fault {
                step: step.to_string(),
                after: n,
                action: FaultAction::Fail,
            });
            let mut ctl = Recorder::default();
            let r = install(&opts, &mut ctl).map(|_| ()).map_err(|f| {
                assert_eq!(f.step, step, "{f}");
                assert!(matches!(f.error, InstallError::Injected(_)), "{f}");
                f.to_string()
            });
            (r, h.snapshot(), ctl.calls)
        };
        let (r0, before_step, _) = at(0);
        assert!(r0.is_err(), "{golden} {step}:0 must fail");
        let mut n = 1;
        loop {
            let (r, snap, calls) = at(n);
            if r.is_ok() {
                break;
            }
            assert_same(&snap, &before_step, &format!("{golden} {step}:{n}"));
            if step.starts_with("runtime-") && calls.len() > 1 {
                // Failed after the restart: restarted again with the old configuration.
                assert_eq!(calls[0], calls[1], "{calls:?}");
            }
            n += 1;
        }
        assert!(n > 1, "{golden}: step {step} made no change");
    }
}

#[test]
fn k3s_gets_a_template_its_runc_and_no_restart_loop() {
    let h = FakeHost::new(None);
    let generated = "\n# File generated by k3s. DO NOT EDIT. Use config.toml.tmpl instead.\nversion = 2\n\n\
        [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"/var/lib/rancher/k3s/agent/containerd\"\n\
        [plugins.\"io.containerd.grpc.v1.cri\"]\n  stream_server_address = \"127.0.0.1\"\n  stream_server_port = \"10010\"\n  enable_selinux = false\n  sandbox_image = \"rancher/mirrored-pause:3.6\"\n\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n  disable_snapshot_annotations = true\n\n\
        [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/var/lib/rancher/k3s/data/current/bin\"\n  conf_dir = \"/var/lib/rancher/k3s/agent/etc/cni/net.d\"\n\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n";
    let dir = "/var/lib/rancher/k3s/agent/etc/containerd";
    h.write(&format!("{dir}/config.toml"), generated);
    h.write("/var/lib/rancher/k3s/data/current/bin/runc", "");
    let before = h.snapshot();
    let mut ctl = Recorder {
        active_units: vec!["k3s".into()],
        ..Recorder::default()
    };
    let opts = options(&h, EngineChoice::Auto);
    ok(install(&opts, &mut ctl));
    assert_eq!(
        ctl.calls,
        vec!["systemctl is-active --quiet k3s", "systemctl restart k3s"]
    );
    let tpl = h.read(&format!("{dir}/config.toml.tmpl"));
    assert!(
        tpl.contains(&format!("imports = [\"{dir}/conf.d/*.toml\"]")),
        "{tpl}"
    );
    assert!(h.path(&format!("{dir}/conf.d/99-devinject.toml")).exists());
    assert!(h
        .read("/etc/devinject/config.toml")
        .contains("runtime = \"/var/lib/rancher/k3s/data/current/bin/runc\""));

    // k3s restarts and writes config.toml from the template: our imports line, then its base.
    let body = tpl
        .split_once("*/ -}}\n")
        .expect("template comment")
        .1
        .replace("{{ template \"base\" . }}\n", generated);
    h.write(&format!("{dir}/config.toml"), &body);
    let again = ok(install(&opts, &mut ctl));
    assert!(!again.changed(), "{again}");
    assert_eq!(ctl.calls.len(), 2, "no second restart: {:?}", ctl.calls);

    ok(uninstall(&un_options(&h), &mut ctl));
    assert!(!h.path(&format!("{dir}/config.toml.tmpl")).exists());
    assert!(!h.path(&format!("{dir}/conf.d")).exists());
    assert_eq!(
        ctl.calls.last().map(String::as_str),
        Some("systemctl restart k3s")
    );
    // k3s writes config.toml again from its own template at that restart.
    h.write(&format!("{dir}/config.toml"), generated);
    assert_same(&h.snapshot(), &before, "k3s after uninstall and restart");
}

#[test]
fn a_foreign_k3s_template_stops_the_install_before_any_change() {
    let h = FakeHost::new(None);
    let dir = "/var/lib/rancher/k3s/agent/etc/containerd";
    h.write(&format!("{dir}/config.toml"), "version = 2\n");
    h.write(
        &format!("{dir}/config.toml.tmpl"),
        "{{ template \"base\" . }}\n[plugins.x]\n",
    );
    let mut ctl = Recorder::default();
    let f = install(&options(&h, EngineChoice::Auto), &mut ctl).expect_err("refused");
    assert_eq!(f.step, "runtime-containerd");
    assert!(f.error.is_bad_input(), "{f}");
    assert!(f.to_string().contains("imports = ["), "{f}");
    assert!(!h.path(&format!("{dir}/conf.d")).exists());
}

#[test]
fn uninstall_leaves_the_shim_while_containers_run_through_it() {
    let h = FakeHost::new(Some("containerd-2.x-v3-default"));
    let before = h.snapshot();
    let mut ctl = Recorder::default();
    ok(install(&options(&h, EngineChoice::Auto), &mut ctl));
    let task = "/run/containerd/io.containerd.runtime.v2.task/k8s.io/0123abc";
    h.write(
        &format!("{task}/options.json"),
        "{\"binary_name\":\"/opt/devinject/bin/devinject-runtime\"}",
    );
    let un = ok(uninstall(&un_options(&h), &mut ctl));
    let left: Vec<PathBuf> = un.left.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(
        left,
        vec![
            PathBuf::from("/opt/devinject/bin/devinject-hook"),
            PathBuf::from("/opt/devinject/bin/devinject-runtime"),
            PathBuf::from("/etc/devinject/config.toml"),
        ]
    );
    assert!(un.left[0].1.contains("k8s.io/0123abc"), "{}", un.left[0].1);
    // The engine no longer uses devinject; the rest is gone.
    assert_eq!(
        h.read("/etc/containerd/config.toml"),
        std::fs::read_to_string(
            support::golden_before("containerd-2.x-v3-default").join("etc/containerd/config.toml")
        )
        .expect("golden")
    );
    assert!(!h.path("/etc/devinject/profiles").exists());
    assert!(!h.path("/opt/devinject/bin/devinject-ctl").exists());
    // Once the container is gone, a second uninstall finishes.
    std::fs::remove_dir_all(h.path("/run/containerd")).expect("rm");
    let un = ok(uninstall(&un_options(&h), &mut ctl));
    assert!(un.left.is_empty(), "{un}");
    assert_same(&h.snapshot(), &before, "after the second uninstall");
}

#[test]
fn uninstall_without_a_record_removes_only_what_is_recognisably_ours() {
    let h = FakeHost::new(Some("docker-nvidia-default"));
    let before = h.snapshot();
    let mut ctl = Recorder::default();
    ok(install(&options(&h, EngineChoice::Auto), &mut ctl));
    std::fs::remove_file(h.path("/opt/devinject/.installer/record.json")).expect("rm record");
    let un = ok(uninstall(&un_options(&h), &mut ctl));
    let text = un.to_string();
    assert!(
        text.contains("profiles in /etc/devinject/profiles are left"),
        "{text}"
    );
    // daemon.json is restored from the library's own state.
    assert_eq!(
        h.read("/etc/docker/daemon.json"),
        std::fs::read_to_string(
            support::golden_before("docker-nvidia-default").join("etc/docker/daemon.json")
        )
        .expect("golden")
    );
    assert!(!h.path("/opt/devinject").exists());
    assert!(!h.path("/etc/devinject/config.toml").exists());
    // Only the profiles remain of the install.
    let mut now = h.snapshot();
    now.retain(|p, _| !p.starts_with("etc/devinject"));
    let mut was = before.clone();
    was.retain(|p, _| !p.starts_with("etc/devinject"));
    assert_same(&now, &was, "without a record");
}

#[test]
fn the_kubernetes_policy_is_written_when_the_hook_knows_it() {
    let h = FakeHost::new(Some("containerd-1.6-default-shim"));
    let before = h.snapshot();
    let mut opts = options(&h, EngineChoice::Auto);
    opts.host_config.policy = Policy::Kubernetes {
        pod_resources_socket: PathBuf::from("/var/lib/kubelet/pod-resources/kubelet.sock"),
    };
    let mut ctl = Recorder::default();
    let text = devinject_installer::host_config::render(&opts.host_config, &opts.layout, &[]);
    match devinject_installer::host_config::validate(&text) {
        Ok(()) => {
            ok(install(&opts, &mut ctl));
            let c = h.read("/etc/devinject/config.toml");
            assert!(c.contains("policy = \"kubernetes\""), "{c}");
            assert!(c.contains("pod_resources_socket = "), "{c}");
        }
        Err(_) => {
            // This hook predates the policy keys: the install refuses before changing anything,
            // rather than break every container start.
            let f = install(&opts, &mut ctl).expect_err("refused");
            assert!(
                matches!(f.error, InstallError::HostConfigRejected { .. }),
                "{f}"
            );
            assert!(f.to_string().contains("policy"), "{f}");
            assert_same(&h.snapshot(), &before, "refused install");
        }
    }
}

#[test]
fn a_symlinked_engine_config_stays_linked_and_is_restored_through_the_link() {
    let golden = support::golden_before("docker-nvidia-default").join("etc/docker/daemon.json");
    let original = std::fs::read_to_string(&golden).expect("golden");
    let setup = || {
        let h = FakeHost::new(None);
        h.write("/srv/node/daemon.json", &original);
        std::fs::create_dir_all(h.path("/etc/docker")).expect("mkdir");
        std::os::unix::fs::symlink("/srv/node/daemon.json", h.path("/etc/docker/daemon.json"))
            .expect("symlink");
        h
    };
    // A failure right after the engine was configured puts the linked file back.
    let h = setup();
    let before = h.snapshot();
    let mut opts = options(&h, EngineChoice::Auto);
    opts.fault = Some(Fault {
        step: "runtime-docker".into(),
        after: 1,
        action: FaultAction::Fail,
    });
    let mut ctl = Recorder::default();
    install(&opts, &mut ctl).expect_err("injected");
    assert_eq!(h.read("/srv/node/daemon.json"), original);
    // Install and uninstall: the link stays a link, the file it points to comes back.
    let h = setup();
    ok(install(&options(&h, EngineChoice::Auto), &mut ctl));
    assert!(std::fs::symlink_metadata(h.path("/etc/docker/daemon.json"))
        .expect("lstat")
        .file_type()
        .is_symlink());
    assert!(h
        .read("/srv/node/daemon.json")
        .contains("devinject-runtime"));
    ok(uninstall(&un_options(&h), &mut ctl));
    let mut now = h.snapshot();
    let mut was = before;
    // Only the host's own directories differ between the two fresh hosts: none.
    now.retain(|p, _| !p.starts_with("opt/devinject"));
    was.retain(|p, _| !p.starts_with("opt/devinject"));
    assert_same(&now, &was, "linked daemon.json");
}

#[test]
fn set_as_default_replaces_the_default_runtime_and_uninstall_brings_it_back() {
    let h = FakeHost::new(Some("docker-nvidia-default"));
    let before = h.snapshot();
    let mut opts = options(&h, EngineChoice::Auto);
    opts.set_as_default = true;
    let mut ctl = Recorder::default();
    ok(install(&opts, &mut ctl));
    let json: serde_json::Value =
        serde_json::from_str(&h.read("/etc/docker/daemon.json")).expect("json");
    assert_eq!(json["default-runtime"], "devinject");
    assert_eq!(
        json["runtimes"]["nvidia"]["path"],
        "nvidia-container-runtime"
    );
    ok(uninstall(&un_options(&h), &mut ctl));
    assert_same(&h.snapshot(), &before, "default runtime restored");
}

#[test]
fn rke2_gets_its_template_its_runc_and_its_unit() {
    let h = FakeHost::new(None);
    let dir = "/var/lib/rancher/rke2/agent/etc/containerd";
    h.write(
        &format!("{dir}/config.toml"),
        "# File generated by rke2. DO NOT EDIT. Use config.toml.tmpl instead.\nversion = 3\nroot = \"/var/lib/rancher/rke2/agent/containerd\"\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n",
    );
    h.write("/var/lib/rancher/rke2/bin/runc", "");
    let before = h.snapshot();
    let mut ctl = Recorder {
        active_units: vec!["rke2-agent".into()],
        ..Recorder::default()
    };
    ok(install(&options(&h, EngineChoice::Auto), &mut ctl));
    assert_eq!(
        ctl.calls.last().map(String::as_str),
        Some("systemctl restart rke2-agent")
    );
    // containerd 2 (config version 3) reads config-v3.toml.tmpl.
    let tpl = h.read(&format!("{dir}/config-v3.toml.tmpl"));
    assert!(tpl.contains("RKE2 writes config.toml"), "{tpl}");
    assert!(h
        .read("/etc/devinject/config.toml")
        .contains("runtime = \"/var/lib/rancher/rke2/bin/runc\""));
    ok(uninstall(&un_options(&h), &mut ctl));
    assert_same(&h.snapshot(), &before, "rke2 uninstall");
}

/// The host's absolute links (`/etc/docker -> /<dir>/docker`, `/opt -> /<dir>/opt`) are followed
/// inside `--host-root`, never from the installer's own `/`, where it would write elsewhere, report
/// success, and have uninstall act on the wrong files. The same absolute targets also exist outside
/// the fake host, as canaries that must stay untouched.
#[test]
fn absolute_links_on_the_host_are_followed_inside_the_host_root() {
    let golden = support::golden_before("docker-nvidia-default").join("etc/docker/daemon.json");
    let original = std::fs::read_to_string(&golden).expect("golden");
    let outside = tempfile::tempdir().expect("outside");
    let target = |p: &str| format!("{}/{p}", outside.path().display());
    // Outside the host root: what a naive join would reach.
    std::fs::create_dir_all(outside.path().join("docker")).expect("mkdir");
    std::fs::create_dir_all(outside.path().join("opt")).expect("mkdir");
    std::fs::write(
        outside.path().join("docker/daemon.json"),
        "{\"canary\": true}\n",
    )
    .expect("canary");
    let canaries = support::snapshot(outside.path());
    // Inside it: the same paths below the root, as the host sees them.
    let h = FakeHost::new(None);
    h.write(&format!("{}/daemon.json", target("docker")), &original);
    std::fs::create_dir_all(h.path(&target("opt"))).expect("mkdir");
    std::fs::create_dir_all(h.path("/etc")).expect("mkdir");
    std::os::unix::fs::symlink(target("docker"), h.path("/etc/docker")).expect("symlink");
    if std::fs::symlink_metadata(h.path("/opt")).is_ok() {
        std::fs::remove_dir_all(h.path("/opt")).expect("rm /opt");
    }
    std::os::unix::fs::symlink(target("opt"), h.path("/opt")).expect("symlink");
    let before = h.snapshot();

    let mut ctl = Recorder::default();
    ok(install(&options(&h, EngineChoice::Auto), &mut ctl));
    assert_same(
        &support::snapshot(outside.path()),
        &canaries,
        "outside the host root after install",
    );
    let configured = h.read(&format!("{}/daemon.json", target("docker")));
    assert!(configured.contains("devinject-runtime"), "{configured}");
    assert!(
        h.path(&format!("{}/devinject", target("opt"))).is_dir(),
        "the binaries go where the host's /opt leads"
    );

    ok(uninstall(&un_options(&h), &mut ctl));
    assert_same(
        &support::snapshot(outside.path()),
        &canaries,
        "outside the host root after uninstall",
    );
    let opt_devinject = format!("{}/devinject", target("opt"));
    let rel = opt_devinject.trim_start_matches('/').to_owned();
    let mut now = h.snapshot();
    let mut was = before;
    now.retain(|p, _| !p.starts_with(&rel));
    was.retain(|p, _| !p.starts_with(&rel));
    assert_same(&now, &was, "the host root after uninstall");
}

/// The DRA overlay's node: the installer put the files there (no engine), and `devinject-dra`
/// kept its checkpoint and socket in its directory under the kubelet's plugins directory.
/// Uninstall leaves nothing of that once no claim is prepared; while one is, the checkpoint
/// stays (a driver installed again needs it to unprepare the claim) and the report says why;
/// a link at the checkpoint's name is refused, never followed.
#[test]
fn uninstall_takes_the_dra_driver_s_checkpoint_socket_and_directory() {
    const DIR: &str = "/var/lib/kubelet/plugins/devinject.io";
    let h = FakeHost::new(Some("containerd-2.x-v3-default"));
    std::fs::create_dir_all(h.path("/var/lib/kubelet/plugins")).expect("mkdir");
    let before = h.snapshot();
    let mut ctl = Recorder::default();
    ok(install(&options(&h, EngineChoice::Skip), &mut ctl));
    std::fs::create_dir_all(h.path(DIR)).expect("mkdir");
    let checkpoint = format!("{DIR}/checkpoint.json");
    h.write(
        &checkpoint,
        r#"{"version":1,"claims":{"u1":{"claim":{"namespace":"a","name":"b","uid":"u1"},"profiles":["kvm"],"spec_files":[],"devices":[]}}}"#,
    );
    // A driver killed without removing its socket.
    let socket =
        std::os::unix::net::UnixListener::bind(h.path(&format!("{DIR}/dra.sock"))).expect("bind");
    drop(socket);

    // A claim still prepared: the checkpoint stays, and why.
    let un = ok(uninstall(&un_options(&h), &mut ctl));
    assert_eq!(
        un.left.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        [PathBuf::from(&checkpoint)],
        "{un}"
    );
    assert!(un.left[0].1.contains("1 claim(s) still prepared"), "{un}");
    assert!(h.path(&checkpoint).exists());

    // A link at its name, to a host file: refused, naming it; the file is untouched.
    h.write("/etc/precious", "keep\n");
    std::fs::remove_file(h.path(&checkpoint)).expect("rm");
    std::os::unix::fs::symlink("/etc/precious", h.path(&checkpoint)).expect("symlink");
    let refused = uninstall(&un_options(&h), &mut ctl).expect_err("a link is refused");
    assert!(refused.to_string().contains(&checkpoint), "{refused}");
    assert_eq!(h.read("/etc/precious"), "keep\n");
    std::fs::remove_file(h.path(&checkpoint)).expect("rm");
    std::fs::remove_file(h.path("/etc/precious")).expect("rm");

    // The claim unprepared (its device metadata files gone with it): nothing of ours is left.
    std::fs::create_dir_all(h.path(&format!("{DIR}/metadata"))).expect("mkdir");
    h.write(&checkpoint, r#"{"version":1,"claims":{}}"#);
    let un = ok(uninstall(&un_options(&h), &mut ctl));
    assert!(un.left.is_empty(), "{un}");
    assert!(!h.path(DIR).exists(), "{un}");
    assert_same(&h.snapshot(), &before, "after the uninstall");
}
