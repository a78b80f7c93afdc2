//! The vendor-stack tier: vendors' real user-space driver files, as Debian 12 packages them,
//! unpacked into driver roots by `scripts/vendor-stacks-fetch.sh` (`DEVINJECT_VENDOR_STACKS`
//! names the directory it prints), on a simulated node: device nodes with the driver's numbers
//! under a dev root and the driver's procfs files under a proc root. The kernel side is all that
//! is simulated: a vendor's tool in the container loads its real libraries and fails only where
//! it talks to the kernel.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::sim::{mknod, shipped_profiles, write_config};

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

/// A simulated node whose driver root is one vendor's unpacked stack.
#[derive(Debug, Clone)]
pub struct VendorHost {
    /// Everything below.
    pub dir: PathBuf,
    /// The dev root with the vendor's nodes.
    pub dev_root: PathBuf,
    /// The proc root with the driver's files.
    pub proc_root: PathBuf,
    /// The driver root: the vendor's unpacked packages.
    pub driver_root: PathBuf,
    /// A profiles dir with the shipped profiles asked for.
    pub profiles_dir: PathBuf,
    /// The host config pointing at all of the above.
    pub config: PathBuf,
}

/// The UUID and bus id of the simulated GPU 0.
pub const GPU0_UUID: &str = "GPU-4a7d2c1e-9b3f-4e58-a6d0-1c2b3a4d5e6f";
/// Its PCI bus id.
pub const GPU0_BUS: &str = "0000:01:00.0";

/// NVIDIA's nodes for one GPU (`nvidia0`, 195:0) and the control nodes, and the driver's
/// `/proc/driver/nvidia/gpus/<bus>/information` for it, with `stacks/nvidia` as driver root and
/// the shipped `profiles`.
pub fn nvidia_host(dir: &Path, stacks: &Path, profiles: &[&str]) -> Result<VendorHost> {
    let dev_root = dir.join("dev");
    std::fs::create_dir_all(&dev_root)?;
    // 195 is the driver's fixed major; nvidia-uvm's is dynamic, any unused one will do here.
    for (name, major, minor) in [
        ("nvidia0", 195, 0),
        ("nvidiactl", 195, 255),
        ("nvidia-modeset", 195, 254),
        ("nvidia-uvm", 509, 0),
        ("nvidia-uvm-tools", 509, 1),
    ] {
        mknod(&dev_root.join(name), major, minor, "0666")?;
    }
    let proc_root = dir.join("proc");
    let gpu = proc_root.join("driver/nvidia/gpus").join(GPU0_BUS);
    std::fs::create_dir_all(&gpu)?;
    std::fs::write(
        gpu.join("information"),
        format!(
            "Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 140\nGPU UUID: \t {GPU0_UUID}\n\
             Video BIOS: \t 92.00.36.00.02\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n\
             DMA Mask: \t 0x7fffffffffff\nBus Location: \t {GPU0_BUS}\nDevice Minor: \t 0\n\
             GPU Excluded:\t No\n"
        ),
    )?;
    host(dir, dev_root, proc_root, stacks.join("nvidia"), profiles)
}

fn host(
    dir: &Path,
    dev_root: PathBuf,
    proc_root: PathBuf,
    driver_root: PathBuf,
    profiles: &[&str],
) -> Result<VendorHost> {
    let profiles_dir = dir.join("profiles");
    std::fs::create_dir_all(&profiles_dir)?;
    std::fs::create_dir_all(dir.join("sys"))?;
    for p in profiles {
        std::fs::copy(
            shipped_profiles().join(format!("{p}.toml")),
            profiles_dir.join(format!("{p}.toml")),
        )
        .with_context(|| format!("copy profile {p}"))?;
    }
    let config = dir.join("config.toml");
    write_config(
        &config,
        &profiles_dir,
        &dev_root,
        &driver_root,
        &dir.join("sys"),
        &format!("proc_root = {proc_root:?}"),
    )?;
    Ok(VendorHost {
        dir: dir.to_owned(),
        dev_root,
        proc_root,
        driver_root,
        profiles_dir,
        config,
    })
}

/// A program that loads `libcuda.so.1` as a CUDA application does (by soname, through the
/// dynamic loader) and calls `cuInit(0)`: prints `cuInit <code> <name>`, or `load failed:
/// <why>` when the library or a symbol is not there.
pub const CUINIT_C: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) { printf("load failed: %s\n", dlerror()); return 2; }
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*error_name)(int, const char **) = (int (*)(int, const char **))dlsym(cuda, "cuGetErrorName");
    if (!cu_init || !error_name) { printf("load failed: no cuInit\n"); return 3; }
    int r = cu_init(0);
    const char *name = "?";
    error_name(r, &name);
    printf("cuInit %d %s\n", r, name);
    return 0;
}
"#;

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
