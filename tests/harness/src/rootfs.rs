//! A minimal busybox rootfs for real containers.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Host path of the static busybox (Debian's busybox-static).
pub const BUSYBOX: &str = "/bin/busybox";
/// Host path of the static ldconfig copied in, so `ldconfig -p` works in the container.
pub const LDCONFIG: &str = "/sbin/ldconfig";

/// Builds a busybox rootfs at `dir`: /bin with every applet linked to busybox, /sbin/ldconfig,
/// /etc with passwd and group, empty /dev /proc /sys /tmp, and the probe script at /probe.sh.
pub fn busybox(dir: &Path) -> Result<()> {
    for d in [
        "bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "usr/lib", "usr/bin", "root",
    ] {
        std::fs::create_dir_all(dir.join(d)).with_context(|| format!("mkdir {d}"))?;
    }
    std::fs::copy(BUSYBOX, dir.join("bin/busybox"))
        .context("copy busybox (apt-get install busybox-static)")?;
    let list = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .context("busybox --list")?;
    if !list.status.success() {
        bail!("busybox --list failed");
    }
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet == "busybox" || applet.is_empty() {
            continue;
        }
        let link = dir.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link)?;
        }
    }
    std::fs::copy(LDCONFIG, dir.join("sbin/ldconfig")).context("copy host ldconfig")?;
    std::fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    std::fs::write(dir.join("etc/group"), "root:x:0:\n")?;
    std::fs::write(dir.join("probe.sh"), crate::probe::SCRIPT)?;
    Ok(())
}
