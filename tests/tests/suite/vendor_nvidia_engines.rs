//! The nvidia profile on NVIDIA's real 535 user space (tests/tests/suite/vendor_nvidia.rs's node)
//! through the engine paths, on real containerd 2 driven through CRI as the kubelet drives it:
//! the CDI spec `devinject-ctl cdi generate` writes (containerd injects it; every part of the
//! driver, as a spec cannot read the container's env), and `devinject-nri` (which reads
//! `NVIDIA_DRIVER_CAPABILITIES` from the container as the hook does). In both, `nvidia-smi` and
//! `cuInit` run on the injected libraries and stop at the kernel, and the image's newer CUDA
//! compat libcuda comes first in the linker cache (the finish step's `--forward-compat`).
//! DRA on the same node: tests/tests/cluster/cluster_dra_nvidia.rs.

use std::collections::HashMap;
use std::path::Path;

use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{ready, Paths, ReleaseNode};
use devinject_tests::daemons::short_tempdir;
use devinject_tests::vendor::{
    assert_every_part, assert_stopped_at_the_kernel, nvidia_engine_image as image, nvidia_host,
    stacks, ENGINE_SCRIPT as SCRIPT,
};

/// Starts containerd 2 with `paths` on a fresh NVIDIA node, `None` when a peer is missing.
fn node(dir: &Path, cdi: bool, nri: bool) -> Option<ReleaseNode> {
    let stacks = stacks()?;
    let release = ready("2")?;
    let host = nvidia_host(&dir.join("host"), &stacks, &["nvidia"]).unwrap();
    let paths = Paths {
        cdi,
        nri,
        host_config: format!("policy = \"env\"\nproc_root = {:?}", host.proc_root),
        host: Some(host.sim_host()),
        image: Some(image),
        ..Paths::default()
    };
    let mut node = ReleaseNode::start(&release, &paths).unwrap_or_else(|e| panic!("{e:#}"));
    if nri {
        node.start_nri_plugin().unwrap_or_else(|e| panic!("{e:#}"));
    }
    Some(node)
}

fn run(
    node: &mut ReleaseNode,
    name: &str,
    env: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> (i32, String) {
    let (pod, config) = node.pod(name, "").unwrap_or_else(|e| panic!("{e:#}"));
    let spec = ContainerSpec {
        name: name.into(),
        image: BUSYBOX.into(),
        command: vec!["/bin/sh".into(), "-c".into(), SCRIPT.into()],
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        log_path: format!("{name}.log"),
        ..ContainerSpec::default()
    };
    node.run(&pod, &config, &spec)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn containerd_injects_the_cdi_spec_of_nvidias_real_driver() {
    let dir = short_tempdir("vcdi").unwrap();
    let Some(mut node) = node(dir.path(), true, false) else {
        return;
    };
    let (code, output) = run(
        &mut node,
        "cdi",
        &[],
        &[("cdi.k8s.io/devinject_nvidia", "devinject.io/nvidia=0")],
    );
    assert_eq!(code, 0, "{output}");
    assert_stopped_at_the_kernel(&output, "CDI");
    assert_every_part(&output);
    // Nothing asked: nothing injected.
    let (code, output) = run(&mut node, "plain", &[], &[]);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("smi exit 127"), "{output}");
    assert!(output.contains("load failed"), "{output}");
}

#[test]
fn the_nri_plugin_injects_the_parts_the_container_chose() {
    let dir = short_tempdir("vnri").unwrap();
    let Some(mut node) = node(dir.path(), false, true) else {
        return;
    };
    let (code, output) = run(
        &mut node,
        "default",
        &[("NVIDIA_VISIBLE_DEVICES", "0")],
        &[],
    );
    assert_eq!(code, 0, "{output}\n--- plugin\n{}", node.nri_log());
    assert_stopped_at_the_kernel(&output, "NRI, default parts");
    assert!(output.contains("loaded libnvidia-ml.so.1"), "{output}");
    assert!(
        output.contains("not loaded libnvidia-encode.so.1"),
        "{output}"
    );

    let (code, output) = run(
        &mut node,
        "video",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "0"),
            ("NVIDIA_DRIVER_CAPABILITIES", "compute,video"),
        ],
        &[],
    );
    assert_eq!(code, 0, "{output}\n--- plugin\n{}", node.nri_log());
    assert!(
        output.lines().any(|l| l == "loaded libnvidia-encode.so.1"),
        "{output}"
    );
    assert!(output.contains("not loaded libnvidia-ml.so.1"), "{output}");
    assert!(
        output.contains("smi exit 127"),
        "no utility, no nvidia-smi: {output}"
    );

    // Every part: an answer of about 5 KB, which containerd reads only in frames of at most
    // 4096 bytes (else it drops the plugin and creates the container without its devices).
    let (code, output) = run(
        &mut node,
        "all",
        &[
            ("NVIDIA_VISIBLE_DEVICES", "0"),
            ("NVIDIA_DRIVER_CAPABILITIES", "all"),
        ],
        &[],
    );
    assert_eq!(code, 0, "{output}\n--- plugin\n{}", node.nri_log());
    assert_stopped_at_the_kernel(&output, "NRI, every part");
    assert_every_part(&output);
    assert!(
        !node.nri_log().contains("closed the connection"),
        "{}",
        node.nri_log()
    );
}
