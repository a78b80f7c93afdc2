//! The arm64 tier's core: devinject's aarch64 hook and shim on a real arm64 kernel, booted by
//! qemu-system-aarch64 under software emulation (`scripts/arm64-guest.sh`, which builds the guest
//! and names it in `DEVINJECT_ARM64_GUEST`). The guest runs `devinject-guest-checks` with Debian
//! 12's arm64 runc, busybox and glibc; this test reads its console.
//!
//! Every check is named here, so a check the guest stops running fails the test as a failed
//! one does. Seen failing with the linker cache's AArch64 flags replaced by x86-64's (the demo
//! and the cache lookup fail under both appliers, `ldconfig -p` printing `(libc6,x86-64)`), and
//! with the nvidia profile's aarch64 library directories taken out (the hook and the shim refuse:
//! `libnvidia-ml.so.1 not found`), with the "other machine's" library built for arm64 (the
//! container starts), and with the Edge TPU library put outside the default library directories
//! (coral-edgetpu's `tpu-use` cannot load it and exits 127).

use std::process::Command;

use devinject_testkit::require;

/// The checks `devinject-guest-checks` runs under each applier, in its order.
const CHECKS: [&str; 8] = [
    "demo",
    "library found by the cache",
    "hostile: the cache a link to a host file",
    "hostile: the cache a FIFO",
    "hostile: the library directory a link to a host directory",
    "nvidia: NVIDIA's user space, stopped at the kernel",
    "coral-edgetpu: the Edge TPU library of this machine",
    "a library for another machine refused",
];

#[test]
fn the_hook_and_the_shim_inject_on_an_arm64_kernel() {
    let dir = std::env::var_os("DEVINJECT_ARM64_GUEST").filter(|v| !v.is_empty());
    if !require(
        dir.is_some(),
        "needs DEVINJECT_ARM64_GUEST, the guest scripts/arm64-guest.sh builds (scripts/test.sh sets it)",
    ) {
        return;
    }
    let boot = std::path::PathBuf::from(dir.unwrap()).join("boot");
    let started = std::time::Instant::now();
    let out = Command::new(&boot)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", boot.display()));
    let console = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let whole = format!(
        "{} ({:?}, {} s), console:\n{console}\nstderr: {}",
        boot.display(),
        out.status,
        started.elapsed().as_secs(),
        String::from_utf8_lossy(&out.stderr)
    );
    let guest = console
        .lines()
        .find(|l| l.starts_with("guest: "))
        .unwrap_or_else(|| panic!("the guest's init never ran: {whole}"));
    assert!(
        guest.starts_with("guest: aarch64 "),
        "not an arm64 kernel: {guest}: {whole}"
    );
    for applier in ["hook", "shim"] {
        for check in CHECKS {
            let line = format!("guest-check: {applier}: {check}: ok");
            assert!(console.lines().any(|l| l == line), "want {line:?}: {whole}");
        }
    }
    assert!(
        console.contains("(libc6,AArch64) => /usr/lib/libdemo.so.1"),
        "ldconfig -p in the guest does not list the injected library as AArch64: {whole}"
    );
    assert!(
        console
            .lines()
            .any(|l| l == format!("guest-checks: {} passed, 0 failed", 2 * CHECKS.len())),
        "{whole}"
    );
    assert!(out.status.success(), "qemu did not end cleanly: {whole}");
}
