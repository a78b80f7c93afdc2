//! Simulated nodes of real vendors' driver stacks: the device nodes with the driver's numbers
//! under a dev root and the driver's procfs files under a proc root, with a driver root of the
//! vendor's unpacked packages. The kernel side is all that is simulated. Used by the vendor
//! tier (`tests/src/vendor.rs`) and by the arm64 guest's checks.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::sim::{copy_profiles, mknod, write_config, SimHost};

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

impl VendorHost {
    /// The node as the CRI and cluster harnesses take a host (its proc root is in the host
    /// configuration).
    pub fn sim_host(&self) -> SimHost {
        SimHost {
            dir: self.dir.clone(),
            dev_root: self.dev_root.clone(),
            driver_root: self.driver_root.clone(),
            profiles_dir: self.profiles_dir.clone(),
            config: self.config.clone(),
        }
    }
}

/// The UUID and bus id of the simulated GPU 0.
pub const GPU0_UUID: &str = "GPU-4a7d2c1e-9b3f-4e58-a6d0-1c2b3a4d5e6f";
/// Its PCI bus id.
pub const GPU0_BUS: &str = "0000:01:00.0";

/// NVIDIA's nodes for one GPU (`nvidia0`, 195:0) and the control nodes, and the driver's
/// `/proc/driver/nvidia/gpus/<bus>/information` for it, with `driver_root` (NVIDIA's unpacked
/// packages) and the shipped `profiles`.
pub fn nvidia_node(dir: &Path, driver_root: &Path, profiles: &[&str]) -> Result<VendorHost> {
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
    vendor_host(dir, dev_root, proc_root, driver_root.to_owned(), profiles)
}

/// A simulated node: the host config of `dir` with these roots and the shipped `profiles`.
pub fn vendor_host(
    dir: &Path,
    dev_root: PathBuf,
    proc_root: PathBuf,
    driver_root: PathBuf,
    profiles: &[&str],
) -> Result<VendorHost> {
    let profiles_dir = dir.join("profiles");
    std::fs::create_dir_all(&profiles_dir)?;
    std::fs::create_dir_all(dir.join("sys"))?;
    copy_profiles(&profiles_dir, profiles)?;
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

/// The character major the simulated Edge TPU's node gets: the apex driver's is dynamic, and
/// 120 is in the range Linux's devices.txt reserves for local use, so no real driver has it.
pub const APEX_MAJOR: u32 = 120;

/// A Coral Edge TPU on PCIe as the gasket and apex drivers show it: `/dev/apex_0` and
/// `/sys/class/apex/apex_0` with the driver's status and the PCI ids of Google's Edge TPU
/// (1ac1:089a), with `driver_root` (where `libedgetpu.so.1` lies) and the shipped `profiles`.
pub fn coral_node(dir: &Path, driver_root: &Path, profiles: &[&str]) -> Result<VendorHost> {
    let dev_root = dir.join("dev");
    std::fs::create_dir_all(&dev_root)?;
    mknod(&dev_root.join("apex_0"), APEX_MAJOR, 0, "0660")?;
    let host = vendor_host(
        dir,
        dev_root,
        dir.join("proc"),
        driver_root.to_owned(),
        profiles,
    )?;
    let apex = dir.join("sys/class/apex/apex_0");
    std::fs::create_dir_all(apex.join("device"))?;
    for (file, value) in [
        ("status", "ALIVE"),
        ("device/numa_node", "-1"),
        ("device/vendor", "0x1ac1"),
        ("device/device", "0x089a"),
    ] {
        std::fs::write(apex.join(file), format!("{value}\n"))?;
    }
    Ok(host)
}
