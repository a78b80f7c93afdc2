//! DRA on NVIDIA's real 535 user space (tests/tests/suite/vendor_nvidia.rs's node, as the node of a
//! real Kubernetes 1.37 cluster on containerd 2, `devinject-dra` its DRA driver): a pod's claim
//! of the `nvidia` DeviceClass gets the GPU, every part of the driver (a claim's spec, as a CDI
//! spec, cannot read the container's env), and the image's newer CUDA compat libcuda first in
//! the linker cache. Part of the cluster tier (scripts/test.sh).

use devinject_tests::cluster::dra::{claim_template, device_class, ready_for_dra};
use devinject_tests::cluster::{Cluster, DraBeside, NodeHost, Setup, Shape};
use devinject_tests::cri_node::BUSYBOX;
use devinject_tests::vendor::{
    assert_every_part, assert_stopped_at_the_kernel, nvidia_cluster_host, nvidia_engine_image,
    stacks, ENGINE_SCRIPT,
};

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
            image: nvidia_engine_image,
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
        command = serde_json::json!(["/bin/sh", "-c", ENGINE_SCRIPT]),
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
