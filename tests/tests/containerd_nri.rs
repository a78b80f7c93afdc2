//! devinject as an NRI plugin (`devinject-nri`) on real containerd 1.7 (Debian 13's, NRI
//! enabled in its configuration) and 2.x (Debian unstable's, NRI on by default), driven through
//! their CRI API as the kubelet would. No devinject runtime entry and no CDI: the pod runs on
//! plain runc, the plugin registers over containerd's NRI socket and adjusts each container it
//! is asked about.
//!
//! - A container asking for devices 0 and 1 sees exactly those simulated devices with the
//!   host's numbers and mode, the un-granted `accel2` (bind-mounted in) denied by the cgroup,
//!   `accel3` absent, and the demo library read-only and in the linker cache (the finish hook).
//! - A container asking for nothing is left alone.
//! - A request naming a device that does not exist fails the creation with devinject's message.
//! - The plugin connects again after containerd restarts.
//!
//! The host configuration's request policy is `env` here (no kubelet); the `kubernetes` policy
//! on this path is the real kubelet's test. Needs root, runc, busybox, gcc, the built binaries
//! and the fetched releases (scripts/runtimes-fetch.sh); skipped otherwise (fails under
//! `CI=true`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use devinject_tests::bins::bin;
use devinject_tests::cri::{self, CgroupParent, ContainerSpec, Cri};
use devinject_tests::cri_node::{containerd_config, import_images, BUSYBOX};
use devinject_tests::daemons::{poll, short_tempdir, Containerd, Daemon};
use devinject_tests::probe::Report;
use devinject_tests::runtimes::{self, Release};
use devinject_tests::sim::{assert_demo_granted_0_1_in, demo_host, demo_probe_args, SimHost};
use devinject_tests::skip::{require, require_binary, require_root};

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

/// containerd with NRI on, the plugin registered, and a CRI client. Fields drop in order.
struct Rig {
    cri: Cri,
    plugin: Daemon,
    containerd: Containerd,
    cgroups: CgroupParent,
    host: SimHost,
    release: Release,
    config: PathBuf,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn start(release: &Release) -> Rig {
        let dir = short_tempdir("nri").expect("temp dir");
        let root = dir.path().to_owned();
        let host = demo_host(&root.join("sim"), &["demo"]).expect("simulated host");
        let runc = devinject_tests::skip::which("runc").expect("runc");
        host.write_config(&format!(
            "policy = \"env\"\nruntime = {runc:?}\nhook = {:?}",
            bin("devinject-hook")
        ))
        .expect("host config");
        let ctd_dir = root.join("ctd");
        std::fs::create_dir_all(&ctd_dir).expect("mkdir");
        let config = ctd_dir.join("config.toml");
        let nri = format!(
            "\n[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n  \
             socket_path = \"{d}/nri.sock\"\n  plugin_path = \"{d}/nri-plugins\"\n  \
             plugin_config_path = \"{d}/nri-conf\"\n",
            d = ctd_dir.display()
        );
        std::fs::write(&config, containerd_config(&ctd_dir) + &nri).expect("config");
        let containerd =
            Containerd::start_release(&ctd_dir, &config, &release.bin).expect("start containerd");
        let mut cri = Cri::connect(&containerd.socket()).expect("CRI client");
        cri.wait_ready()
            .unwrap_or_else(|e| panic!("{e:#}\n{}", containerd.log_tail()));
        import_images(&root, &containerd, &mut cri);
        let plugin = start_plugin(&root, &host);
        let name = root.file_name().expect("temp dir name").to_string_lossy();
        let mut rig = Rig {
            cri,
            plugin,
            containerd,
            cgroups: CgroupParent::new(&name),
            host,
            release: release.clone(),
            config,
            root,
            _dir: dir,
        };
        rig.wait_registered(1);
        rig
    }

    /// Waits until the plugin has registered `times` times.
    fn wait_registered(&mut self, times: usize) {
        let log = self.plugin.log().to_owned();
        poll("devinject-nri to register", Duration::from_secs(30), || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            Ok((text.matches("registered with the runtime").count() >= times).then_some(()))
        })
        .unwrap_or_else(|e| {
            panic!(
                "{e:#}\n--- plugin\n{}\n--- containerd\n{}",
                self.plugin.log_tail(),
                self.containerd.log_tail()
            )
        });
    }

    fn pod(&mut self, name: &str) -> (String, k8s_cri::v1::PodSandboxConfig) {
        let log_dir = self.root.join("logs").join(name);
        std::fs::create_dir_all(&log_dir).expect("mkdir");
        let config = cri::host_network_pod(name, &format!("uid-{name}"), &log_dir, &self.cgroups);
        let id = self
            .cri
            .run_pod_sandbox(&config, "")
            .unwrap_or_else(|e| panic!("{e:#}\n{}", self.containerd.log_tail()));
        (id, config)
    }

    /// Creates and runs `spec` in `pod` to its end: its exit code and output, or the creation's
    /// error.
    fn run(
        &mut self,
        pod: &str,
        pod_config: &k8s_cri::v1::PodSandboxConfig,
        spec: &ContainerSpec,
    ) -> Result<(i32, String), String> {
        let id = self
            .cri
            .create_container(pod, &spec.config(), pod_config)
            .map_err(|e| format!("{e:#}"))?;
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
        Ok((status.exit_code, output))
    }

    fn probe(&self, name: &str, request: Option<&str>) -> ContainerSpec {
        ContainerSpec {
            name: name.into(),
            image: BUSYBOX.into(),
            command: demo_probe_args(),
            env: request
                .map(|r| vec![("DEMO_VISIBLE_DEVICES".to_owned(), r.to_owned())])
                .unwrap_or_default(),
            mounts: vec![(
                self.host.dev_root.join("demo/accel2"),
                PathBuf::from("/dev/demo/accel2"),
            )],
            log_path: format!("{name}.log"),
            ..ContainerSpec::default()
        }
    }
}

fn start_plugin(root: &Path, host: &SimHost) -> Daemon {
    let mut cmd = std::process::Command::new(bin("devinject-nri"));
    cmd.arg("--socket")
        .arg(root.join("ctd/nri.sock"))
        .arg("--config")
        .arg(&host.config);
    Daemon::start("devinject-nri", cmd, &root.join("nri.log")).expect("start devinject-nri")
}

fn injects_through_nri(series: &str) {
    let Some(release) = ready(series) else {
        return;
    };
    let mut rig = Rig::start(&release);
    let (pod, config) = rig.pod("nri");

    let spec = rig.probe("granted", Some("0,1"));
    let (code, output) = rig
        .run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e}\n{}", rig.plugin.log_tail()));
    assert_eq!(code, 0, "probe exited {code}:\n{output}");
    assert_demo_granted_0_1_in(
        &Report::parse(&output),
        &format!(
            "containerd {series} via NRI\n--- output\n{output}\n--- plugin\n{}",
            rig.plugin.log_tail()
        ),
    );

    // Asked for nothing: no device, no library.
    let spec = rig.probe("nothing", None);
    let (code, output) = rig.run(&pod, &config, &spec).expect("runs");
    assert_eq!(code, 0, "{output}");
    let report = Report::parse(&output);
    assert_eq!(report.node("/dev/demo/accel0").kind, "missing", "{output}");
    assert!(!report.lib(devinject_tests::sim::LIB).present, "{output}");

    // A device that does not exist: the creation fails with devinject's message.
    let spec = rig.probe("bad", Some("9"));
    let err = rig
        .run(&pod, &config, &spec)
        .expect_err("a request for a missing device must fail the creation");
    assert!(err.contains("devinject") && err.contains('9'), "{err}");

    // containerd restarts: the plugin registers again and the next container is served.
    rig.cri.remove_pod(&pod).expect("remove pod");
    rig.containerd.daemon().stop();
    rig.containerd =
        Containerd::start_release(rig.containerd.dir(), &rig.config.clone(), &rig.release.bin)
            .expect("restart containerd");
    rig.cri = Cri::connect(&rig.containerd.socket()).expect("CRI client");
    rig.cri.wait_ready().expect("CRI ready");
    rig.wait_registered(2);
    let (pod, config) = rig.pod("nri-again");
    let spec = rig.probe("granted-again", Some("0,1"));
    let (code, output) = rig.run(&pod, &config, &spec).expect("runs");
    assert_eq!(code, 0, "{output}");
    assert_demo_granted_0_1_in(&Report::parse(&output), &output);
    rig.cri.remove_pod(&pod).expect("remove pod");
}

#[test]
fn containerd_1_7_injects_through_the_nri_plugin() {
    injects_through_nri("1.7");
}

#[test]
fn containerd_2_injects_through_the_nri_plugin() {
    injects_through_nri("2");
}
