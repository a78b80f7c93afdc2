//! The path the kubelet takes: a real containerd (1.6 here) configured by
//! `devinject-ctl runtime configure --runtime containerd`, driven through its CRI API
//! (RunPodSandbox with the `devinject` handler, CreateContainer, StartContainer), once with the
//! runtime shim (`--mode shim`, the real `devinject-runtime`) and once with the hook
//! (`--mode hook`, the real `devinject-hook` in the base spec). Each pod runs two probe
//! containers, one asking with `DEMO_VISIBLE_DEVICES=0,1`, one with the device plugin's
//! annotation `devinject.io/demo.devices: 0,1` (which reaches the spec only because the runtime
//! lists `devinject.io/*` in `container_annotations`). Each container must see exactly the
//! granted simulated devices, with the un-granted `accel2` (bind-mounted in) denied by the
//! cgroup, and the demo library read-only and in the linker cache. Forged requests are refused
//! on the same path: a container the kubelet granted nothing that sets the variable itself, and
//! a granted one asking for more than its grant, fail to start with the policy's message.
//!
//! Everything is private ([`devinject_tests::daemons`]): containerd's root, state, socket and
//! runc root live in a temp dir. Pods use the node's network namespace (no CNI). The CRI plugin
//! runs with `restrict_oom_score_adj = true`, since the pod sandbox asks for -998 and lowering a
//! score needs a privilege this machine does not grant. Images come from tars: a busybox rootfs
//! with the probe, and the same rootfs as the pause image, with `/bin/sleep infinity` as its
//! entrypoint. The shim takes its host configuration from `--config`, which containerd's
//! `BinaryName` cannot pass, so the shim path given to devinject-ctl is a two-line script that
//! execs the real binary with it.
//!
//! Needs root, containerd, ctr, runc, tar, sha256sum, busybox, gcc and the built binaries
//! (`cargo build --workspace --bins`); skipped otherwise (fails under `CI=true`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use devinject_tests::bins::bin;
use devinject_tests::cri::{self, CgroupParent, ContainerSpec, Cri};
use devinject_tests::cri_node::{configure, containerd_config, import_images, BUSYBOX, HANDLER};
use devinject_tests::daemons::{short_tempdir, Containerd};
use devinject_tests::podresources::{pod, FakeKubelet};
use devinject_tests::probe::Report;
use devinject_tests::sim::{assert_demo_granted_0_1_in, demo_host, demo_probe_args, SimHost};
use devinject_tests::skip::{require_binary, require_root, which};

fn ready() -> bool {
    require_root()
        && require_binary("containerd")
        && require_binary("containerd-shim-runc-v2")
        && require_binary("ctr")
        && require_binary("runc")
        && require_binary("tar")
        && require_binary("sha256sum")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A private containerd with the CRI plugin, configured by devinject-ctl, images imported, and
/// a CRI client. Fields drop in order: pods first, then containerd, the pods' cgroup parent,
/// then the files.
struct Rig {
    _kubelet: FakeKubelet,
    cri: Cri,
    containerd: Containerd,
    cgroups: CgroupParent,
    host: SimHost,
    logs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn start(mode: &str) -> Rig {
        let dir = short_tempdir("cri").expect("temp dir");
        let root = dir.path().to_owned();
        let host = demo_host(&root.join("sim"), &["demo"]).expect("simulated host");
        // The shim needs runc by path and the hook for the linker-cache step.
        let runc = which("runc").expect("runc");
        // The kubelet's pod-resources API, granting this pod's probe containers devices 0 and 1:
        // the host config keeps the default `kubernetes` policy, so CRI containers get only what
        // the kubelet says was granted (docs/policy.md).
        let socket = root.join("podres.sock");
        let granted: &[(&str, &[&str])] = &[("devinject.io/demo", &["0", "1"])];
        let kubelet = FakeKubelet::start(
            &socket,
            vec![pod(
                "default",
                &format!("devinject-{mode}"),
                &[
                    ("probe-env", granted),
                    ("probe-annotation", granted),
                    ("forger", &[]),
                ],
            )],
        )
        .expect("pod-resources server");
        host.write_config(&format!(
            "runtime = {:?}\nhook = {:?}\npod_resources_socket = {:?}",
            path_str(&runc),
            path_str(&bin("devinject-hook")),
            path_str(&socket)
        ))
        .expect("host config");

        let ctd_dir = root.join("ctd");
        std::fs::create_dir_all(&ctd_dir).expect("mkdir");
        let config = ctd_dir.join("config.toml");
        std::fs::write(&config, containerd_config(&ctd_dir)).expect("containerd config");
        configure(&root, &config, &host, mode);

        let containerd = Containerd::start(&ctd_dir, &config).expect("start containerd");
        let mut cri = Cri::connect(&containerd.socket()).expect("CRI client");
        cri.wait_ready()
            .unwrap_or_else(|e| panic!("{e:#}\n{}", containerd.log_tail()));
        import_images(&root, &containerd, &mut cri, None);
        let logs = root.join("logs");
        std::fs::create_dir_all(&logs).expect("mkdir logs");
        let name = root.file_name().expect("temp dir name").to_string_lossy();
        Rig {
            _kubelet: kubelet,
            cri,
            containerd,
            cgroups: CgroupParent::new(&name),
            host,
            logs,
            _dir: dir,
        }
    }

    /// Runs the probe in a new container of `pod`, asking for devices 0 and 1 by env or
    /// annotation, with accel2 bind-mounted but not granted; returns the probe's report.
    fn probe(&mut self, pod: &str, pod_config: &k8s_cri::v1::PodSandboxConfig, by: &str) -> Report {
        let mut spec = ContainerSpec {
            name: format!("probe-{by}"),
            image: BUSYBOX.into(),
            command: demo_probe_args(),
            mounts: vec![(
                self.host.dev_root.join("demo/accel2"),
                PathBuf::from("/dev/demo/accel2"),
            )],
            log_path: format!("probe-{by}.log"),
            ..ContainerSpec::default()
        };
        match by {
            "env" => spec.env.push(("DEMO_VISIBLE_DEVICES".into(), "0,1".into())),
            _ => {
                spec.annotations =
                    HashMap::from([("devinject.io/demo.devices".into(), "0,1".into())]);
            }
        }
        let id = self
            .cri
            .create_container(pod, &spec.config(), pod_config)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        self.cri
            .start_container(&id)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        let status = self
            .cri
            .wait_exited(&id, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        let log = pod_config.log_directory.clone();
        let output = cri::read_log(&Path::new(&log).join(&spec.log_path)).expect("container log");
        assert_eq!(
            status.exit_code, 0,
            "probe ({by}) exited {}: {}\n--- output\n{output}",
            status.exit_code, status.message
        );
        self.cri.remove_container(&id).expect("remove container");
        let report = Report::parse(&output);
        assert_demo_granted_0_1_in(&report, &format!("request by {by}\n--- output\n{output}"));
        report
    }

    /// Starts container `name` of `pod` with `env`; the start must fail, and the error the
    /// kubelet would see is returned.
    fn refused(
        &mut self,
        pod: &str,
        pod_config: &k8s_cri::v1::PodSandboxConfig,
        name: &str,
        env: (&str, &str),
    ) -> String {
        let spec = ContainerSpec {
            name: name.into(),
            image: BUSYBOX.into(),
            command: demo_probe_args(),
            env: vec![(env.0.into(), env.1.into())],
            log_path: format!("{name}.log"),
            ..ContainerSpec::default()
        };
        let id = self
            .cri
            .create_container(pod, &spec.config(), pod_config)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        let err = match self.cri.start_container(&id) {
            Ok(()) => panic!(
                "{name} asking {}={} started: the policy must refuse it\n{}",
                env.0,
                env.1,
                self.containerd.log_tail()
            ),
            Err(e) => format!("{e:#}"),
        };
        self.cri.remove_container(&id).expect("remove container");
        err
    }

    fn pod(&mut self, name: &str) -> (String, k8s_cri::v1::PodSandboxConfig) {
        let log_dir = self.logs.join(name);
        std::fs::create_dir_all(&log_dir).expect("mkdir");
        let config = cri::host_network_pod(name, &format!("uid-{name}"), &log_dir, &self.cgroups);
        let id = self
            .cri
            .run_pod_sandbox(&config, HANDLER)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        (id, config)
    }
}

fn run_both_forms(mode: &str) {
    if !ready() {
        return;
    }
    let mut rig = Rig::start(mode);
    let (pod, config) = rig.pod(&format!("devinject-{mode}"));
    rig.probe(&pod, &config, "env");
    rig.probe(&pod, &config, "annotation");
    // Forged requests through the CRI, as the kubelet would start them: a container the kubelet
    // granted nothing that sets the variable itself, and a granted one asking for more.
    for (name, value, needles) in [
        (
            "forger",
            "all",
            &[
                "demo devices refused",
                "granted it none of devinject.io/demo",
                "instead of setting DEMO_VISIBLE_DEVICES yourself",
            ][..],
        ),
        (
            "probe-env",
            "0,1,2",
            &["demo devices refused", "asks for 0, 1, 2"][..],
        ),
    ] {
        let err = rig.refused(&pod, &config, name, ("DEMO_VISIBLE_DEVICES", value));
        let err = err.replace("\\\"", "\"");
        for n in needles {
            assert!(err.contains(n), "{mode}, {name}: {n:?} in {err}");
        }
    }
    rig.cri.remove_pod(&pod).expect("remove pod");
}

#[test]
fn cri_pod_with_the_shim_sees_exactly_its_devices() {
    run_both_forms("shim");
}

#[test]
fn cri_pod_with_the_hook_sees_exactly_its_devices() {
    run_both_forms("hook");
}
