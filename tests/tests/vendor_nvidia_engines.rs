//! The nvidia profile on NVIDIA's real 535 user space (tests/tests/vendor_nvidia.rs's node)
//! through the engine paths, on real containerd 2 driven through CRI as the kubelet drives it:
//! the CDI spec `devinject-ctl cdi generate` writes (containerd injects it; every part of the
//! driver, as a spec cannot read the container's env), and `devinject-nri` (which reads
//! `NVIDIA_DRIVER_CAPABILITIES` from the container as the hook does). In both, `nvidia-smi` and
//! `cuInit` run on the injected libraries and stop at the kernel, and the image's newer CUDA
//! compat libcuda comes first in the linker cache (the finish step's `--forward-compat`).
//! And through DRA on a real Kubernetes 1.36 cluster whose node is this one: a pod's claim of
//! the `nvidia` DeviceClass gets the GPU and every part of the driver, as a CDI spec does.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use devinject_tests::cluster::dra::{claim_template, device_class, ready_for_dra};
use devinject_tests::cluster::{Cluster, DraBeside, NodeHost, Setup, Shape};
use devinject_tests::cri::ContainerSpec;
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::cri_release::{ready, Paths, ReleaseNode};
use devinject_tests::daemons::short_tempdir;
use devinject_tests::sim::SimHost;
use devinject_tests::vendor::{compat_in_image, nvidia_host, nvidia_image, stacks, COMPAT_CUINIT};

/// What the container runs: nvidia-smi, cuInit through the linker cache (the image's compat
/// libcuda first) and past it (the host's, by the library directories), the dlopen check, its
/// nodes.
const SCRIPT: &str = "nvidia-smi -L; echo \"smi exit $?\"; cuda-smoke; \
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:/usr/lib:/lib cuda-smoke; \
    dlopen-check libnvidia-ml.so.1 libnvidia-encode.so.1 libEGL_nvidia.so.0; ls /dev";

/// The image: busybox, the programs and the glibc they and NVIDIA's tools link, and a CUDA
/// compat libcuda newer than the node's driver.
fn image(rootfs: &Path) -> anyhow::Result<()> {
    let stacks = std::env::var_os("DEVINJECT_VENDOR_STACKS").context("DEVINJECT_VENDOR_STACKS")?;
    nvidia_image(rootfs, &Path::new(&stacks).join("nvidia"))?;
    compat_in_image(rootfs, 999)?;
    Ok(())
}

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

/// Asserts NVIDIA's tools ran on the injected driver and stopped at the kernel, and that the
/// image's compat libcuda answered through the linker cache.
fn assert_stopped_at_the_kernel(output: &str, ctx: &str) {
    assert!(
        output.lines().any(|l| l == COMPAT_CUINIT),
        "{ctx}: the image's compat libcuda first:\n{output}"
    );
    assert!(
        output.contains("couldn't communicate with the NVIDIA driver"),
        "{ctx}:\n{output}"
    );
    assert!(
        output
            .lines()
            .any(|l| l == "cuda-smoke: cuInit failed: 100 CUDA_ERROR_NO_DEVICE"),
        "{ctx}:\n{output}"
    );
    assert!(output.lines().any(|l| l == "nvidia0"), "{ctx}:\n{output}");
}

/// Asserts the container had every part of the driver, as a spec that cannot read the
/// container's env gives: utility, video and graphics libraries loaded.
fn assert_every_part(output: &str) {
    for lib in [
        "libnvidia-ml.so.1",
        "libnvidia-encode.so.1",
        "libEGL_nvidia.so.0",
    ] {
        assert!(
            output.lines().any(|l| l == format!("loaded {lib}")),
            "{lib}:\n{output}"
        );
    }
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
    for lib in [
        "libnvidia-ml.so.1",
        "libnvidia-encode.so.1",
        "libEGL_nvidia.so.0",
    ] {
        assert!(
            output.lines().any(|l| l == format!("loaded {lib}")),
            "{lib}:\n{output}"
        );
    }
    assert!(
        !node.nri_log().contains("closed the connection"),
        "{}",
        node.nri_log()
    );
}

/// The cluster node: the NVIDIA node of the tests above.
fn nvidia_cluster_host(dir: &Path) -> anyhow::Result<SimHost> {
    let stacks = std::env::var_os("DEVINJECT_VENDOR_STACKS").context("DEVINJECT_VENDOR_STACKS")?;
    Ok(nvidia_host(dir, Path::new(&stacks), &["nvidia"])?.sim_host())
}

#[test]
fn a_dra_claim_on_nvidias_real_driver_gets_the_gpu_and_every_part() {
    if stacks().is_none() {
        return;
    }
    let Some(release) = ready_for_dra() else {
        return;
    };
    let shape = Shape {
        devices: 1,
        node_host: Some(NodeHost {
            make: nvidia_cluster_host,
            image,
        }),
        ..Shape::default()
    };
    let c = Cluster::start_shaped(
        Setup::Dra {
            containerd: release.bin,
            beside: DraBeside::Nothing,
        },
        &shape,
    )
    .unwrap_or_else(|e| panic!("cluster: {e:#}"));
    c.apply_dra_device_classes()
        .unwrap_or_else(|e| panic!("{e:#}"));
    c.apply(&claim_template("gpu", &device_class("nvidia"), 1))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cuda\nspec:\n  restartPolicy: Never\n  hostNetwork: true\n  \
         resourceClaims:\n  - name: gpu\n    resourceClaimTemplateName: gpu\n  containers:\n  \
         - name: c\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    command: {command}\n    \
         resources:\n      claims:\n      - name: gpu\n",
        command = serde_json::json!(["/bin/sh", "-c", SCRIPT]),
    );
    c.apply(&pod).unwrap_or_else(|e| panic!("{e:#}"));
    let phase = c
        .wait_pod_done("cuda")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", c.logs()));
    let output = c
        .container_log("cuda", "c")
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(phase, "Succeeded", "{output}\n{}", c.logs());
    assert_stopped_at_the_kernel(&output, "DRA");
    // A claim's spec carries every part, as a CDI spec does.
    assert_every_part(&output);
}
