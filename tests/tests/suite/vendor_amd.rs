//! The amd profile against AMD's real ROCm 5.2 user space (Debian 12's packages, unpacked by
//! `scripts/vendor-stacks-fetch.sh`) on a simulated node, through the hook and the shim on the
//! real runc. The profile injects device nodes only, as AMD's container toolkit does: ROCm comes
//! with the image, so the test image carries rocminfo, libhsa-runtime64 and libhsakmt from the
//! packages. In the container they load and fail only at the kernel boundary; the container has
//! `/dev/kfd` and the render nodes it was granted, nothing else.

use std::path::Path;

use devinject_tests::cprog::glibc_program;
use devinject_tests::runc::{container_id, describe, Via};
use devinject_tests::skip::require_runc_demo;
use devinject_tests::vendor::{
    amd_host, bundle_with_bound_render_node, install_in_image, stacks, Seen, VendorHost,
    HSA_INIT_C, KFD,
};

/// What the image carries of ROCm: rocminfo and the HSA runtime with the thunk it links, as
/// Debian's rocminfo, libhsa-runtime64-1 and libhsakmt1 install them.
const ROCM_IN_IMAGE: [&str; 5] = [
    "usr/bin/rocminfo",
    "usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1",
    "usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1.5.0",
    "usr/lib/x86_64-linux-gnu/libhsakmt.so.1",
    "usr/lib/x86_64-linux-gnu/libhsakmt.so.1.0.6",
];

/// Runs a container on `host` through `via`, asking for `request` (`AMD_VISIBLE_DEVICES`
/// unset when `None`), its image with ROCm when `rocm`: rocminfo, the `hsa_init` program, then
/// the probe on `/dev/kfd` and both render nodes. `bind` names a render node bind-mounted in
/// without a grant.
fn run(
    host: &VendorHost,
    dir: &Path,
    via: Via,
    request: Option<&str>,
    rocm: bool,
    bind: Option<&str>,
) -> Seen {
    let mut b = bundle_with_bound_render_node(dir, host, bind).unwrap();
    let rootfs = b.rootfs();
    glibc_program(&rootfs, "hsa-init", HSA_INIT_C, &["-O2"]).unwrap();
    if rocm {
        install_in_image(&rootfs, &host.driver_root, &ROCM_IN_IMAGE).unwrap();
    }
    let script = "rocminfo; echo \"rocminfo exit $?\"; hsa-init; \
        /bin/sh /probe.sh /dev/kfd /dev/dri/renderD128 /dev/dri/renderD129 --; \
        echo \"granted $AMD_VISIBLE_DEVICES\"";
    b.args(&["/bin/sh", "-c", script]);
    if let Some(r) = request {
        b.env(&format!("AMD_VISIBLE_DEVICES={r}"));
    }
    let out = b.run_via(via, &host.config, &container_id("amd")).unwrap();
    Seen::new(out)
}

/// Asserts that `node` is there with the host's type, numbers and mode, and that opening it
/// got past the device cgroup to the kernel, where no driver answers (ENXIO; ENODEV, or a
/// real open, where the machine running the test has DRM devices of its own).
fn assert_granted(seen: &Seen, node: &str, (major, minor): (u32, u32), ctx: &str) {
    let n = seen.report.node(node);
    assert_eq!(
        (n.kind.as_str(), n.major, n.minor, n.mode.as_str()),
        ("c", major, minor, "666"),
        "{node}: {ctx}"
    );
    assert!(
        n.open == "ok"
            || n.open.ends_with("No_such_device_or_address")
            || n.open.ends_with("No_such_device"),
        "{node} must open as far as the kernel, not be refused by the device cgroup: {ctx}"
    );
}

#[test]
fn rocm_in_the_image_runs_on_the_granted_gpu_and_stops_at_the_kernel() {
    let Some(stacks) = stacks() else { return };
    if !require_runc_demo() {
        return;
    }
    for via in [Via::Hook, Via::Shim] {
        let t = tempfile::tempdir().unwrap();
        let host = amd_host(&t.path().join("host"), &stacks, &["amd"]).unwrap();
        // The other GPU's node is bind-mounted in too, without a grant.
        let seen = run(
            &host,
            t.path(),
            via,
            Some("renderD128"),
            true,
            Some("renderD129"),
        );
        let ctx = format!("{via:?}: {}\n{}", describe(&seen.out), seen.text);
        assert!(seen.out.status.success(), "{ctx}");
        // rocminfo starts with its libraries loaded (a missing one would stop the loader
        // before main) and stops where it asks the kernel for amdgpu, which this one lacks.
        assert!(
            !seen.text.contains("error while loading shared libraries"),
            "{ctx}"
        );
        assert!(
            seen.text
                .contains("ROCk module is NOT loaded, possibly no GPU devices"),
            "{ctx}"
        );
        assert!(seen.has("rocminfo exit 1"), "{ctx}");
        // The HSA runtime loads by soname with its thunk and fails where it opens /dev/kfd.
        let init = seen
            .text
            .lines()
            .find(|l| l.starts_with("hsa_init "))
            .unwrap_or_else(|| panic!("hsa_init was not called: {ctx}"));
        assert!(
            init.starts_with("hsa_init 0x1008 HSA_STATUS_ERROR_OUT_OF_RESOURCES"),
            "{ctx}"
        );
        // The granted GPU and /dev/kfd, as on the host; the other GPU's node, mounted in
        // without a grant, is refused by the device cgroup.
        assert_granted(&seen, "/dev/kfd", KFD, &ctx);
        assert_granted(&seen, "/dev/dri/renderD128", (226, 128), &ctx);
        let other = seen.report.node("/dev/dri/renderD129");
        assert_eq!(
            (other.kind.as_str(), other.open.as_str()),
            ("c", "EPERM"),
            "{ctx}"
        );
        assert!(seen.has("granted renderD128"), "{ctx}");
    }
}

#[test]
fn every_gpu_brings_kfd_and_none_brings_rocm() {
    let Some(stacks) = stacks() else { return };
    if !require_runc_demo() {
        return;
    }
    for via in [Via::Hook, Via::Shim] {
        let t = tempfile::tempdir().unwrap();
        let host = amd_host(&t.path().join("host"), &stacks, &["amd"]).unwrap();

        // Both GPUs (the shim writes the granted ids), by name or by position.
        for (i, request) in ["all", "0,1"].into_iter().enumerate() {
            let seen = run(
                &host,
                &t.path().join(format!("all{i}")),
                via,
                Some(request),
                true,
                None,
            );
            let ctx = format!("{via:?}, {request}: {}\n{}", describe(&seen.out), seen.text);
            assert!(seen.out.status.success(), "{ctx}");
            assert_granted(&seen, "/dev/kfd", KFD, &ctx);
            assert_granted(&seen, "/dev/dri/renderD128", (226, 128), &ctx);
            assert_granted(&seen, "/dev/dri/renderD129", (226, 129), &ctx);
        }

        // The profile injects devices only: an image without ROCm has none with the GPU.
        let seen = run(
            &host,
            &t.path().join("bare"),
            via,
            Some("renderD129"),
            false,
            None,
        );
        let ctx = format!("{via:?}: {}\n{}", describe(&seen.out), seen.text);
        assert!(seen.out.status.success(), "{ctx}");
        assert_granted(&seen, "/dev/kfd", KFD, &ctx);
        assert_granted(&seen, "/dev/dri/renderD129", (226, 129), &ctx);
        assert_eq!(
            seen.report.node("/dev/dri/renderD128").kind,
            "missing",
            "{ctx}"
        );
        assert!(seen.has("rocminfo exit 127"), "no rocminfo: {ctx}");
        assert!(
            seen.text
                .contains("load failed: libhsa-runtime64.so.1: cannot open shared object file"),
            "no HSA runtime: {ctx}"
        );

        // No request, no GPU and no /dev/kfd.
        let seen = run(&host, &t.path().join("none"), via, None, true, None);
        let ctx = format!("{via:?}: {}\n{}", describe(&seen.out), seen.text);
        assert!(seen.out.status.success(), "{ctx}");
        for node in ["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"] {
            assert_eq!(seen.report.node(node).kind, "missing", "{node}: {ctx}");
        }
    }
}
