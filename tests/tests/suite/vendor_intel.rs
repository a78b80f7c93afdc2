//! The intel-gpu profile against Intel's real compute runtime 22.43 (Debian 12's packages,
//! unpacked by `scripts/vendor-stacks-fetch.sh`) on a simulated node, through the hook and the
//! shim on the real runc. The profile injects the host's runtime with the render node: the
//! OpenCL ICD file and the `libigdrcl.so` it names, the Level Zero driver and the libraries they
//! load. The image carries the loaders and the tool, as an image with Debian's clinfo,
//! ocl-icd-libopencl1 and libze1 does: in the container clinfo's ICD loader finds the Intel ICD,
//! loads the runtime, and the runtime finds no GPU where the kernel has no i915.

use std::collections::BTreeSet;
use std::path::Path;

use devinject_devices::HostRoots;
use devinject_discovery::{profile_file, resolve_driver_files};
use devinject_tests::cprog::glibc_program;
use devinject_tests::runc::{container_id, describe, Via};
use devinject_tests::sim::shipped_profiles;
use devinject_tests::skip::require_runc_demo;
use devinject_tests::vendor::{
    bundle_with_bound_render_node, install_in_image, intel_host, stacks, Seen, VendorHost, DLOPEN_C,
};

/// What the image carries: clinfo, the OpenCL ICD loader and the Level Zero loader, as Debian's
/// clinfo, ocl-icd-libopencl1 and libze1 install them.
const LOADERS_IN_IMAGE: [&str; 5] = [
    "usr/bin/clinfo",
    "usr/lib/x86_64-linux-gnu/libOpenCL.so.1",
    "usr/lib/x86_64-linux-gnu/libOpenCL.so.1.0.0",
    "usr/lib/x86_64-linux-gnu/libze_loader.so.1",
    "usr/lib/x86_64-linux-gnu/libze_loader.so.1.8.0",
];

/// The OpenCL driver, where the ICD file of Debian's intel-opencl-icd names it.
const IGDRCL: &str = "/usr/lib/x86_64-linux-gnu/intel-opencl/libigdrcl.so";

#[test]
fn the_profile_finds_the_compute_runtime_in_the_packages() {
    let Some(stacks) = stacks() else { return };
    let profile = profile_file::load(&shipped_profiles().join("intel-gpu.toml")).unwrap();
    let roots = HostRoots {
        driver_root: stacks.join("intel"),
        ..HostRoots::default()
    };
    let files = resolve_driver_files(&profile, &roots).unwrap();
    let libraries: BTreeSet<String> = files
        .libraries
        .iter()
        .map(|l| l.soname.clone().unwrap_or(l.file_name.clone()))
        .collect();
    let want: BTreeSet<String> = [
        "libze_intel_gpu.so.1",
        "libigdgmm.so.12",
        "libigc.so.1",
        "libigdfcl.so.1",
        "libopencl-clang.so.14",
    ]
    .map(String::from)
    .into();
    assert_eq!(libraries, want);
    let others: BTreeSet<String> = files
        .binaries
        .iter()
        .chain(&files.files)
        .map(|f| f.container_path.display().to_string())
        .collect();
    let want: BTreeSet<String> = ["/etc/OpenCL/vendors/intel.icd", IGDRCL]
        .map(String::from)
        .into();
    assert_eq!(others, want);
    // The ICD file names the library where the profile puts it in the container.
    let icd = std::fs::read_to_string(stacks.join("intel/etc/OpenCL/vendors/intel.icd")).unwrap();
    assert_eq!(icd.trim(), IGDRCL);
}

/// Runs a container on `host` through `via`, asking for `request` (`INTEL_GPU_VISIBLE_DEVICES`
/// unset when `None`): clinfo, then clinfo again with the dynamic loader's trace of what it
/// loads, the ICD files, the dlopen program on the Level Zero driver and the compiler, and the
/// probe on both render nodes. `bind` names a render node bind-mounted in without a grant.
fn run(host: &VendorHost, dir: &Path, via: Via, request: Option<&str>, bind: Option<&str>) -> Seen {
    let mut b = bundle_with_bound_render_node(dir, host, bind).unwrap();
    let rootfs = b.rootfs();
    glibc_program(&rootfs, "dlopen-check", DLOPEN_C, &["-O2"]).unwrap();
    install_in_image(&rootfs, &host.driver_root, &LOADERS_IN_IMAGE).unwrap();
    let script = "clinfo; echo \"clinfo exit $?\"; \
        LD_DEBUG=files clinfo 2>&1 >/dev/null | grep -e 'calling init: .*libigd' -e 'libigdgmm.so.12 .*needed by'; \
        echo \"icd files: $(ls /etc/OpenCL/vendors)\"; cat /etc/OpenCL/vendors/*.icd; \
        dlopen-check libze_intel_gpu.so.1 libigdgmm.so.12 libigc.so.1; \
        /bin/sh /probe.sh /dev/dri/renderD128 /dev/dri/renderD129 --; \
        echo \"granted $INTEL_GPU_VISIBLE_DEVICES\"";
    b.args(&["/bin/sh", "-c", script]);
    if let Some(r) = request {
        b.env(&format!("INTEL_GPU_VISIBLE_DEVICES={r}"));
    }
    let out = b
        .run_via(via, &host.config, &container_id("intel"))
        .unwrap();
    Seen::new(out)
}

/// The dynamic loader's trace of clinfo loading the Intel ICD: the library the ICD file names,
/// with the gmmlib it links from the image's library directory, both initialised.
const ICD_LOADED: [&str; 3] = [
    "file=libigdgmm.so.12 [0]; needed by /usr/lib/x86_64-linux-gnu/intel-opencl/libigdrcl.so [0]",
    "calling init: /usr/lib/x86_64-linux-gnu/libigdgmm.so.12",
    "calling init: /usr/lib/x86_64-linux-gnu/intel-opencl/libigdrcl.so",
];

#[test]
fn clinfo_finds_the_injected_intel_icd_and_stops_at_the_kernel() {
    let Some(stacks) = stacks() else { return };
    if !require_runc_demo() {
        return;
    }
    for via in [Via::Hook, Via::Shim] {
        let t = tempfile::tempdir().unwrap();
        let host = intel_host(&t.path().join("host"), &stacks, &["intel-gpu"]).unwrap();
        // The other vendor's render node is bind-mounted in too, without a grant.
        let seen = run(&host, t.path(), via, Some("all"), Some("renderD129"));
        let ctx = format!("{via:?}: {}\n{}", describe(&seen.out), seen.text);
        assert!(seen.out.status.success(), "{ctx}");
        assert!(
            !seen.text.contains("error while loading shared libraries"),
            "{ctx}"
        );
        // The ICD loader reads the injected ICD file and loads the runtime it names; the runtime
        // finds no GPU it can open (no i915 behind the render node) and offers no platform.
        assert!(seen.has("icd files: intel.icd"), "{ctx}");
        assert!(seen.has(IGDRCL), "{ctx}");
        let traced = seen.ld_debug();
        for line in ICD_LOADED {
            assert!(traced.iter().any(|l| l == line), "{line}: {ctx}");
        }
        assert_eq!(
            seen.line("Number of platforms").as_deref(),
            Some("Number of platforms 0"),
            "{ctx}"
        );
        assert!(seen.has("clinfo exit 0"), "{ctx}");
        // Level Zero's driver loads by soname with what it links. The compiler is there too,
        // needing the LLVM 14 that Debian links it to, which this image does not carry.
        assert!(seen.has("loaded libze_intel_gpu.so.1"), "{ctx}");
        assert!(seen.has("loaded libigdgmm.so.12"), "{ctx}");
        assert!(
            seen.text.contains(
                "not loaded libigc.so.1: libLLVMSPIRVLib.so.14: cannot open shared object file"
            ),
            "{ctx}"
        );
        // `all` is the Intel GPU alone: the virtio GPU's node is no device of the profile, and
        // mounted in without a grant it is refused by the device cgroup.
        let gpu = seen.report.node("/dev/dri/renderD128");
        assert_eq!(
            (gpu.kind.as_str(), gpu.major, gpu.minor, gpu.mode.as_str()),
            ("c", 226, 128, "666"),
            "{ctx}"
        );
        assert!(
            gpu.open == "ok"
                || gpu.open.ends_with("No_such_device_or_address")
                || gpu.open.ends_with("No_such_device"),
            "the GPU must open as far as the kernel: {ctx}"
        );
        let other = seen.report.node("/dev/dri/renderD129");
        assert_eq!(
            (other.kind.as_str(), other.open.as_str()),
            ("c", "EPERM"),
            "{ctx}"
        );
        // The shim writes the granted ids; a hook cannot change the env.
        let granted = if via == Via::Shim {
            "renderD128"
        } else {
            "all"
        };
        assert!(seen.has(&format!("granted {granted}")), "{ctx}");
    }
}

#[test]
fn the_runtime_comes_with_the_request_only() {
    let Some(stacks) = stacks() else { return };
    if !require_runc_demo() {
        return;
    }
    for via in [Via::Hook, Via::Shim] {
        let t = tempfile::tempdir().unwrap();
        let host = intel_host(&t.path().join("host"), &stacks, &["intel-gpu"]).unwrap();

        // Not asking for the GPU: the image's loaders find no Intel ICD and no driver.
        let seen = run(&host, &t.path().join("unasked"), via, None, None);
        let ctx = format!("{via:?}: {}\n{}", describe(&seen.out), seen.text);
        assert!(seen.out.status.success(), "{ctx}");
        assert!(seen.has("icd files:"), "{ctx}");
        assert!(!seen.text.contains("libigdrcl"), "{ctx}");
        assert_eq!(
            seen.line("Number of platforms").as_deref(),
            Some("Number of platforms 0"),
            "{ctx}"
        );
        assert!(
            seen.text.contains(
                "not loaded libze_intel_gpu.so.1: libze_intel_gpu.so.1: cannot open shared object file"
            ),
            "{ctx}"
        );
        assert_eq!(
            seen.report.node("/dev/dri/renderD128").kind,
            "missing",
            "{ctx}"
        );

        // `none`: the runtime without a GPU, as for every request.
        let seen = run(&host, &t.path().join("none"), via, Some("none"), None);
        let ctx = format!("{via:?}: {}\n{}", describe(&seen.out), seen.text);
        assert!(seen.out.status.success(), "{ctx}");
        assert!(seen.has("icd files: intel.icd"), "{ctx}");
        assert!(seen.has("loaded libze_intel_gpu.so.1"), "{ctx}");
        assert_eq!(
            seen.report.node("/dev/dri/renderD128").kind,
            "missing",
            "{ctx}"
        );
    }
}
