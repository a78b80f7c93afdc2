//! The vendor-stack tier: vendors' real user-space driver files, as Debian 12 packages them,
//! unpacked into driver roots by `scripts/vendor-stacks-fetch.sh` (`DEVINJECT_VENDOR_STACKS`
//! names the directory it prints), on a simulated node: device nodes with the driver's numbers
//! under a dev root, and the driver's procfs files (NVIDIA) or the sysfs the profiles match on
//! (AMD, Intel) under a proc or sys root. The kernel side is all that
//! is simulated: a vendor's tool in the container loads its real libraries and fails only where
//! it talks to the kernel.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::sim::{mknod, SimHost};
pub use devinject_harness::vendor_node::{
    nvidia_node, vendor_host, VendorHost, GPU0_BUS, GPU0_UUID,
};

/// The unpacked stacks (`DEVINJECT_VENDOR_STACKS`), or `None` after the skip rule said why.
pub fn stacks() -> Option<PathBuf> {
    let dir = std::env::var_os("DEVINJECT_VENDOR_STACKS").map(PathBuf::from);
    let usable = dir.as_ref().is_some_and(|d| d.join("nvidia").is_dir());
    if !devinject_testkit::require(
        usable,
        "needs the vendor stacks (DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh))",
    ) {
        return None;
    }
    dir
}

/// NVIDIA's nodes for one GPU and the driver's procfs files, with `stacks/nvidia` as driver
/// root and the shipped `profiles` ([`nvidia_node`]).
pub fn nvidia_host(dir: &Path, stacks: &Path, profiles: &[&str]) -> Result<VendorHost> {
    nvidia_node(dir, &stacks.join("nvidia"), profiles)
}

/// The CUDA program of `scripts/gpu-check.sh` (`scripts/gpu-check/cuda-smoke.c`): loads
/// `libcuda.so.1` as a CUDA application does (by soname, through the dynamic loader) and calls
/// `cuInit(0)`; with no GPU behind the nodes it prints `cuda-smoke: cuInit failed: <code>
/// <name>`, and `cuda-smoke: load failed: <why>` when the library is not there.
pub const CUDA_SMOKE_C: &str = include_str!("../../scripts/gpu-check/cuda-smoke.c");

/// A program that `dlopen`s each library named in its arguments by soname: prints `loaded
/// <soname>` or `not loaded <soname>: <why>` for each.
pub const DLOPEN_C: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        void *h = dlopen(argv[i], RTLD_NOW);
        if (h) printf("loaded %s\n", argv[i]);
        else printf("not loaded %s: %s\n", argv[i], dlerror());
    }
    return 0;
}
"#;

/// The number the simulated `/dev/kfd` has: kfd's major is dynamic, taken from the top of the
/// kernel's extended range here so that no driver answers it.
pub const KFD: (u32, u32) = (510, 0);

/// A GPU of a simulated node: its render node's number (`renderD<n>`, 226:n) and the PCI
/// function's attributes in sysfs.
struct DrmGpu {
    render: u32,
    bus: &'static str,
    vendor: &'static str,
    device: &'static str,
    numa_node: &'static str,
}

/// `gpus`' render nodes under `dir/dev/dri`, and their sysfs under `dir/sys` as the kernel lays
/// it out: the PCI function's attributes under `devices/`, `class/drm/renderD<n>` a link to the
/// node's directory below the function, whose `device` links back to it (the profiles read
/// `class/drm/{name}/device/vendor` through both links, as on a host). Returns the dev root.
fn drm_gpus(dir: &Path, gpus: &[DrmGpu]) -> Result<PathBuf> {
    let dev_root = dir.join("dev");
    std::fs::create_dir_all(dev_root.join("dri"))?;
    let sys = dir.join("sys");
    std::fs::create_dir_all(sys.join("class/drm"))?;
    for g in gpus {
        let node = format!("renderD{}", g.render);
        // DRM's fixed major; render nodes are minors 128 and up.
        mknod(&dev_root.join("dri").join(&node), 226, g.render, "0666")?;
        let function = sys.join("devices/pci0000:00/0000:00:01.0").join(g.bus);
        std::fs::create_dir_all(&function)?;
        for (attr, value) in [
            ("vendor", g.vendor),
            ("device", g.device),
            ("subsystem_vendor", g.vendor),
            ("subsystem_device", "0x0000"),
            ("numa_node", g.numa_node),
        ] {
            std::fs::write(function.join(attr), format!("{value}\n"))?;
        }
        let drm = function.join("drm").join(&node);
        std::fs::create_dir_all(&drm)?;
        std::os::unix::fs::symlink(format!("../../../{}", g.bus), drm.join("device"))?;
        std::os::unix::fs::symlink(
            format!("../../devices/pci0000:00/0000:00:01.0/{}/drm/{node}", g.bus),
            sys.join("class/drm").join(&node),
        )?;
    }
    Ok(dev_root)
}

/// AMD's nodes for two GPUs, `renderD128` and `renderD129` (226:128, 226:129; vendor 0x1002 in
/// sysfs, Navi 21 and MI210), and `/dev/kfd` ([`KFD`]), with `stacks/amd` (ROCm 5.2) as driver
/// root and the shipped `profiles`.
pub fn amd_host(dir: &Path, stacks: &Path, profiles: &[&str]) -> Result<VendorHost> {
    let dev_root = drm_gpus(
        dir,
        &[
            DrmGpu {
                render: 128,
                bus: "0000:03:00.0",
                vendor: "0x1002",
                device: "0x73bf",
                numa_node: "0",
            },
            DrmGpu {
                render: 129,
                bus: "0000:83:00.0",
                vendor: "0x1002",
                device: "0x740f",
                numa_node: "1",
            },
        ],
    )?;
    mknod(&dev_root.join("kfd"), KFD.0, KFD.1, "0666")?;
    let proc_root = dir.join("proc");
    std::fs::create_dir_all(&proc_root)?;
    vendor_host(dir, dev_root, proc_root, stacks.join("amd"), profiles)
}

/// An Intel GPU, `renderD128` (226:128; vendor 0x8086 in sysfs, an Arc A770), beside a render
/// node of another vendor's, `renderD129` (a virtio GPU, 0x1af4), with `stacks/intel` (the
/// compute runtime 22.43) as driver root and the shipped `profiles`.
pub fn intel_host(dir: &Path, stacks: &Path, profiles: &[&str]) -> Result<VendorHost> {
    let dev_root = drm_gpus(
        dir,
        &[
            DrmGpu {
                render: 128,
                bus: "0000:03:00.0",
                vendor: "0x8086",
                device: "0x56a0",
                numa_node: "-1",
            },
            DrmGpu {
                render: 129,
                bus: "0000:00:04.0",
                vendor: "0x1af4",
                device: "0x1050",
                numa_node: "-1",
            },
        ],
    )?;
    let proc_root = dir.join("proc");
    std::fs::create_dir_all(&proc_root)?;
    vendor_host(dir, dev_root, proc_root, stacks.join("intel"), profiles)
}

/// Installs `files` of a vendor's unpacked packages (paths under `driver_root`, a soname link
/// as a link) into the image at `rootfs`, at the paths the packages give them, with the host
/// libraries they link (glibc, libstdc++, libdrm, ...) at the host's paths: an image with the
/// vendor's packages installed. The vendor's own libraries they link must be among `files`.
pub fn install_in_image(rootfs: &Path, driver_root: &Path, files: &[&str]) -> Result<()> {
    let mut lib_path = Vec::new();
    for f in files {
        let rel = f.trim_start_matches('/');
        let (from, to) = (driver_root.join(rel), rootfs.join(rel));
        std::fs::create_dir_all(to.parent().context("a file's directory")?)?;
        let meta = std::fs::symlink_metadata(&from).with_context(|| format!("{f} in the stack"))?;
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else {
            std::fs::copy(&from, &to).with_context(|| format!("copy {f} into the image"))?;
        }
        let dir = from.parent().context("a file's directory")?.to_owned();
        if !lib_path.contains(&dir) {
            lib_path.push(dir);
        }
    }
    let lib_path = std::env::join_paths(&lib_path)?;
    for f in files {
        let from = driver_root.join(f.trim_start_matches('/'));
        if std::fs::symlink_metadata(&from)?.file_type().is_symlink() {
            continue;
        }
        let ldd = std::process::Command::new("ldd")
            .arg(&from)
            .env("LD_LIBRARY_PATH", &lib_path)
            .output()
            .context("run ldd")?;
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, `/lib64/ld-linux-x86-64.so.2
        // (0x...)`; the vendor's own (under the driver root) are installed above.
        for line in String::from_utf8_lossy(&ldd.stdout).lines() {
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            let Some(path) = path.filter(|p| p.starts_with('/')) else {
                continue;
            };
            if Path::new(path).starts_with(driver_root) {
                continue;
            }
            let dest = rootfs.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(dest.parent().context("a library's directory")?)?;
            std::fs::copy(path, &dest).with_context(|| format!("copy {path} into the image"))?;
        }
    }
    Ok(())
}

/// A program that loads `libhsa-runtime64.so.1` as a ROCm application does (by soname) and
/// calls `hsa_init()`, which opens `/dev/kfd` and talks to the amdkfd driver: prints
/// `hsa_init 0x<status> <hsa_status_string>`, or `load failed: <why>`.
pub const HSA_INIT_C: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *hsa = dlopen("libhsa-runtime64.so.1", RTLD_NOW);
    if (!hsa) { printf("load failed: %s\n", dlerror()); return 2; }
    int (*init)(void) = (int (*)(void))dlsym(hsa, "hsa_init");
    int (*status_string)(int, const char **) = (int (*)(int, const char **))dlsym(hsa, "hsa_status_string");
    if (!init || !status_string) { printf("load failed: no hsa_init\n"); return 3; }
    int r = init();
    const char *s = "?";
    status_string(r, &s);
    printf("hsa_init 0x%x %s\n", r, s);
    return 0;
}
"#;

/// What one container of the vendor tier saw: its exit, its output (stdout then stderr) and the
/// probe's report, when it ran the probe.
pub struct Seen {
    /// The runtime's output, exit status included.
    pub out: std::process::Output,
    /// stdout, then stderr.
    pub text: String,
    /// The probe's report read from stdout (empty when the container ran no probe).
    pub report: crate::probe::Report,
}

impl Seen {
    /// What `out` shows.
    pub fn new(out: std::process::Output) -> Self {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let report = crate::probe::Report::parse(&stdout);
        Self { out, text, report }
    }

    /// True when a line of the output is `line` (blanks around it aside).
    pub fn has(&self, line: &str) -> bool {
        self.text.lines().any(|l| l.trim() == line)
    }

    /// The dynamic loader's messages (`LD_DEBUG`, `<pid>: <message>`), their runs of blanks
    /// made one space.
    pub fn ld_debug(&self) -> Vec<String> {
        self.text
            .lines()
            .filter_map(|l| l.trim_start().split_once(':'))
            .filter(|(pid, _)| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
            .map(|(_, m)| m.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    }

    /// The line starting with `prefix`, its runs of blanks made one space.
    pub fn line(&self, prefix: &str) -> Option<String> {
        self.text
            .lines()
            .find(|l| l.starts_with(prefix))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

/// Adds to an image's `rootfs` what the NVIDIA tests run: the CUDA program ([`CUDA_SMOKE_C`],
/// as `cuda-smoke`), the dlopen program ([`DLOPEN_C`], as `dlopen-check`) and the glibc they and
/// `nvidia-smi` link (found beside `nvidia_root`, the unpacked NVIDIA packages; nvidia-smi loads
/// libnvidia-ml at run time, so glibc is all it links).
pub fn nvidia_image(rootfs: &Path, nvidia_root: &Path) -> Result<()> {
    crate::cprog::glibc_program(rootfs, "cuda-smoke", CUDA_SMOKE_C, &["-O2"])?;
    crate::cprog::glibc_program(rootfs, "dlopen-check", DLOPEN_C, &["-O2"])?;
    crate::cprog::copy_linked_libraries(
        rootfs,
        &nvidia_root.join("usr/lib/nvidia/current/nvidia-smi"),
    )?;
    Ok(())
}

/// A stand-in for NVIDIA's `cuda-compat` libcuda: the driver API cuda-smoke resolves, each call
/// failing with 999, whose name says which library answered.
const COMPAT_LIBCUDA_C: &str = r#"
int cuInit(void) { return 999; }
int cuGetErrorName(int e, const char **name) { *name = "IMAGE_COMPAT_LIBCUDA"; return 0; }
int cuDeviceGetCount(void) { return 999; }
int cuDeviceGet(void) { return 999; }
int cuDeviceGetName(void) { return 999; }
int cuCtxCreate_v2(void) { return 999; }
int cuModuleLoadData(void) { return 999; }
int cuModuleGetFunction(void) { return 999; }
int cuMemAlloc_v2(void) { return 999; }
int cuMemcpyHtoD_v2(void) { return 999; }
int cuMemcpyDtoH_v2(void) { return 999; }
int cuLaunchKernel(void) { return 999; }
int cuCtxSynchronize(void) { return 999; }
"#;

/// What cuda-smoke prints when the image's compat libcuda ([`compat_libcuda`]) answered.
pub const COMPAT_CUINIT: &str = "cuda-smoke: cuInit failed: 999 IMAGE_COMPAT_LIBCUDA";

/// Builds into `dir` a compat libcuda of driver `major` (`libcuda.so.<major>.23.08`, soname
/// `libcuda.so.1`, with its soname link), as NVIDIA's `cuda-compat` package lays it out.
pub fn compat_libcuda(dir: &Path, major: u32) -> Result<()> {
    let file = format!("libcuda.so.{major}.23.08");
    crate::cprog::shared_lib_from(dir, &file, "libcuda.so.1", COMPAT_LIBCUDA_C)?;
    std::os::unix::fs::symlink(&file, dir.join("libcuda.so.1"))?;
    Ok(())
}

/// Puts [`compat_libcuda`] of `major` in an image as CUDA images have it:
/// `/usr/local/cuda-12.3/compat`, behind the `/usr/local/cuda` link.
pub fn compat_in_image(rootfs: &Path, major: u32) -> Result<()> {
    compat_libcuda(&rootfs.join("usr/local/cuda-12.3/compat"), major)?;
    std::os::unix::fs::symlink("cuda-12.3", rootfs.join("usr/local/cuda"))?;
    Ok(())
}

/// A bundle under `dir` on `host`, with the render node `bind` (e.g. `renderD129`) bind-mounted
/// in without a grant when given: a device the container must not be able to open.
pub fn bundle_with_bound_render_node(
    dir: &Path,
    host: &VendorHost,
    bind: Option<&str>,
) -> Result<crate::runc::Bundle> {
    let mut b = crate::runc::Bundle::new(&dir.join("bundle"), &["/bin/true"])?;
    if let Some(node) = bind {
        b.bind_node(
            &host.dev_root.join("dri").join(node),
            &format!("/dev/dri/{node}"),
        );
    }
    Ok(b)
}

/// What a container on an engine path (CDI, NRI, DRA) runs: nvidia-smi, cuInit through the
/// linker cache (the image's compat libcuda first) and past it (the host's, by the library
/// directories), the dlopen check, its nodes.
pub const ENGINE_SCRIPT: &str = "nvidia-smi -L; echo \"smi exit $?\"; cuda-smoke; \
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:/usr/lib:/lib cuda-smoke; \
    dlopen-check libnvidia-ml.so.1 libnvidia-encode.so.1 libEGL_nvidia.so.0; ls /dev";

/// The engine paths' image: busybox, the programs and the glibc they and NVIDIA's tools link,
/// and a CUDA compat libcuda newer than the node's driver.
pub fn nvidia_engine_image(rootfs: &Path) -> Result<()> {
    let stacks = std::env::var_os("DEVINJECT_VENDOR_STACKS").context("DEVINJECT_VENDOR_STACKS")?;
    nvidia_image(rootfs, &Path::new(&stacks).join("nvidia"))?;
    compat_in_image(rootfs, 999)?;
    Ok(())
}

/// Asserts NVIDIA's tools ran on the injected driver and stopped at the kernel, and that the
/// image's compat libcuda answered through the linker cache.
pub fn assert_stopped_at_the_kernel(output: &str, ctx: &str) {
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
pub fn assert_every_part(output: &str) {
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

/// The NVIDIA node of [`nvidia_host`] as a cluster's node host.
pub fn nvidia_cluster_host(dir: &Path) -> Result<SimHost> {
    let stacks = std::env::var_os("DEVINJECT_VENDOR_STACKS").context("DEVINJECT_VENDOR_STACKS")?;
    Ok(nvidia_host(dir, Path::new(&stacks), &["nvidia"])?.sim_host())
}
