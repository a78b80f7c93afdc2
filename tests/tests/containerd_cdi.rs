//! CDI consumed by the runtime itself, with no devinject runtime entry: `devinject-ctl cdi
//! generate` writes the specs, and containerd 1.7 (`enable_cdi = true`, Debian 13's) and 2.x
//! (CDI on by default, Debian unstable's), driven through their CRI API as the kubelet would,
//! inject the devices a container names in the annotation the device plugin returns in
//! `cdi-annotations` mode (`cdi.k8s.io/devinject_demo: devinject.io/demo=0,devinject.io/demo=1`).
//! The container runs on plain runc: only containerd's CDI support and the spec's
//! `createRuntime` hook (`devinject-hook finish`, for the linker cache) act on it.
//!
//! Each container must see exactly the named simulated devices with the host's numbers and
//! mode, the un-granted `accel2` (bind-mounted in) denied by the cgroup, `accel3` absent, and the
//! demo library read-only and in the linker cache.
//!
//! The releases come from scripts/runtimes-fetch.sh (run by scripts/test.sh); the machine's own
//! containerd 1.6 has no CDI. Needs root, runc, busybox, gcc and the built binaries; skipped
//! otherwise (fails under `CI=true`).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use devinject_tests::cri::{self, CgroupParent, ContainerSpec, Cri};
use devinject_tests::cri_node::{cdi_generate, containerd_cdi_config, import_images, BUSYBOX};
use devinject_tests::daemons::{short_tempdir, Containerd};
use devinject_tests::probe::Report;
use devinject_tests::runtimes::{self, Release};
use devinject_tests::sim::{
    assert_demo_granted_0_1_in, demo_host, demo_probe_args, SimHost, ACCELS,
};
use devinject_tests::skip::{require, require_binary, require_root};

/// The annotation the device plugin answers Allocate with in `cdi-annotations` mode for
/// devices 0 and 1 (plugin/src/allocate.rs).
const ANNOTATION: (&str, &str) = (
    "cdi.k8s.io/devinject_demo",
    "devinject.io/demo=0,devinject.io/demo=1",
);

fn ready(series: &str) -> Option<Release> {
    let release = runtimes::containerd(series);
    (require_root()
        && require_binary("runc")
        && require_binary("/bin/busybox")
        && require_binary("gcc")
        && require(
            release.is_some(),
            &format!("needs containerd {series} (scripts/runtimes-fetch.sh)"),
        ))
    .then(|| release.expect("checked"))
}

/// A containerd release with CDI on, reading the specs devinject-ctl wrote, and a CRI client.
/// Fields drop in order: pods first, then containerd, the pods' cgroup parent, then the files.
struct Rig {
    cri: Cri,
    containerd: Containerd,
    cgroups: CgroupParent,
    host: SimHost,
    logs: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// With `group`, the accelerators are `0660 root:<group>` (render-node-like) before the
    /// specs are written.
    fn start(release: &Release, group: Option<u32>) -> Rig {
        let dir = short_tempdir("cdi").expect("temp dir");
        let root = dir.path().to_owned();
        let host = demo_host(&root.join("sim"), &["demo"]).expect("simulated host");
        if let Some(gid) = group {
            for (name, _, _) in ACCELS {
                let node = host.dev_root.join("demo").join(name);
                std::os::unix::fs::chown(&node, Some(0), Some(gid)).expect("chown");
                std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o660))
                    .expect("chmod");
            }
        }
        let specs = root.join("cdi");
        let out = cdi_generate(&host, &specs).expect("devinject-ctl cdi generate");
        eprintln!("{out}");

        let ctd_dir = root.join("ctd");
        std::fs::create_dir_all(&ctd_dir).expect("mkdir");
        let config = ctd_dir.join("config.toml");
        std::fs::write(&config, containerd_cdi_config(&ctd_dir, &specs))
            .expect("containerd config");
        let containerd =
            Containerd::start_release(&ctd_dir, &config, &release.bin).expect("start containerd");
        let mut cri = Cri::connect(&containerd.socket()).expect("CRI client");
        let version = cri
            .wait_ready()
            .unwrap_or_else(|e| panic!("{e:#}\n{}", containerd.log_tail()));
        eprintln!(
            "containerd {} (package {}), CRI {}",
            version.runtime_version, release.version, version.runtime_api_version
        );
        import_images(&root, &containerd, &mut cri);
        let logs = root.join("logs");
        std::fs::create_dir_all(&logs).expect("mkdir logs");
        let name = root.file_name().expect("temp dir name").to_string_lossy();
        Rig {
            cri,
            containerd,
            cgroups: CgroupParent::new(&name),
            host,
            logs,
            _dir: dir,
        }
    }

    fn pod(&mut self, name: &str) -> (String, k8s_cri::v1::PodSandboxConfig) {
        let log_dir = self.logs.join(name);
        std::fs::create_dir_all(&log_dir).expect("mkdir");
        let config = cri::host_network_pod(name, &format!("uid-{name}"), &log_dir, &self.cgroups);
        // The default runtime: plain runc, nothing of devinject's.
        let id = self
            .cri
            .run_pod_sandbox(&config, "")
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        (id, config)
    }

    /// Runs `spec` in `pod` to its end; returns its exit code and output.
    fn run(
        &mut self,
        pod: &str,
        pod_config: &k8s_cri::v1::PodSandboxConfig,
        spec: &ContainerSpec,
    ) -> (i32, String) {
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
        let log = Path::new(&pod_config.log_directory).join(&spec.log_path);
        let output = cri::read_log(&log).expect("container log");
        self.cri.remove_container(&id).expect("remove container");
        (status.exit_code, output)
    }
}

/// The probe container asking for devices 0 and 1 through the plugin's annotation, with
/// accel2 bind-mounted but not granted.
fn probe(rig: &Rig, user: Option<(i64, i64)>) -> ContainerSpec {
    ContainerSpec {
        name: "probe".into(),
        image: BUSYBOX.into(),
        command: demo_probe_args(),
        annotations: HashMap::from([(ANNOTATION.0.into(), ANNOTATION.1.into())]),
        mounts: vec![(
            rig.host.dev_root.join("demo/accel2"),
            PathBuf::from("/dev/demo/accel2"),
        )],
        log_path: "probe.log".into(),
        user,
        ..ContainerSpec::default()
    }
}

fn devices_injected_by(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let mut rig = Rig::start(&release, None);
    let (pod, config) = rig.pod("cdi");
    let spec = probe(&rig, None);
    let (code, output) = rig.run(&pod, &config, &spec);
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    assert_demo_granted_0_1_in(
        &Report::parse(&output),
        &format!("containerd {series} via CDI\n--- output\n{output}"),
    );
    rig.cri.remove_pod(&pod).expect("remove pod");
}

#[test]
fn containerd_1_7_injects_the_cdi_devices_the_plugin_names() {
    devices_injected_by("1.7");
}

#[test]
fn containerd_2_injects_the_cdi_devices_the_plugin_names() {
    devices_injected_by("2");
}

/// A container running as uid 1000 with no supplementary groups opens its granted devices,
/// whose nodes are `0660 root:4242`: the spec's `additionalGids` adds the group. The un-granted
/// accel2 (same owner and mode, bind-mounted in) stays denied by the cgroup.
fn non_root_opens_group_owned_devices_through(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let mut rig = Rig::start(&release, Some(GROUP));
    let (pod, config) = rig.pod("cdi-user");
    let spec = probe(&rig, Some((1000, 1000)));
    let (code, output) = rig.run(&pod, &config, &spec);
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    let report = Report::parse(&output);
    for (name, major, minor) in [ACCELS[0], ACCELS[1]] {
        let n = report.node(&format!("/dev/demo/{name}"));
        assert_eq!(
            (
                n.kind.as_str(),
                n.major,
                n.minor,
                n.mode.as_str(),
                n.open.as_str()
            ),
            ("c", major, minor, "660", "ok"),
            "{name}, granted, opens as uid 1000:\n{output}"
        );
    }
    assert_eq!(
        report.node("/dev/demo/accel2").open,
        "EPERM",
        "un-granted accel2 is denied:\n{output}"
    );
    assert_eq!(report.node("/dev/demo/accel3").kind, "missing", "{output}");
    rig.cri.remove_pod(&pod).expect("remove pod");
}

/// The group of the render-node-like accelerators.
const GROUP: u32 = 4242;

#[test]
fn containerd_1_7_gives_a_non_root_container_the_group_of_its_devices() {
    non_root_opens_group_owned_devices_through("1.7");
}

#[test]
fn containerd_2_gives_a_non_root_container_the_group_of_its_devices() {
    non_root_opens_group_owned_devices_through("2");
}
