#!/usr/bin/env bash
# The aarch64 build, checked on this x86_64 machine: cross-builds every shipped binary as it ships
# (scripts/release-build.sh with ARCH=aarch64: static glibc, the shim and the pod-resources helper
# on musl), checks that each is a static AArch64 executable that starts under qemu's user-mode
# emulation (`--version`), and that the aarch64 devinject-ctl discovers a simulated demo host
# exactly as this host's build does (`devices list --json`, byte for byte).
#
# What user-mode emulation cannot show: the hook's and the shim's work in the container's
# namespaces (qemu-user runs threads of its own, so setns(CLONE_NEWNS) fails with EINVAL, and
# Debian 12's qemu 7.2 has no openat2, which every fd-checked open uses). That needs an arm64
# kernel: scripts/arm64-guest.sh boots one (docs/testing.md, "arm64").
#
# Not in CI (a cold cross release build is about 7 minutes of 2 cores): docs/testing.md names it.
# Needs root (mknod). Usage: scripts/arm64-check.sh [OUT_DIR] (default target/arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/arm64}
scripts/install-deps.sh cross

# shellcheck source=scripts/lib/shipped.sh
. scripts/lib/shipped.sh
echo "arm64-check: cross-building the shipped binaries for aarch64 (scripts/release-build.sh)"
ARCH=aarch64 TARGET_DIR=${TARGET_DIR:-target/image-aarch64} scripts/release-build.sh "$out/bin" "${packages[@]}" >/dev/null

qemu=$(command -v qemu-aarch64-static)
fail=0
for name in "${bins[@]}"; do
  bin=$out/bin/$name
  [ -f "$bin" ] || { echo "arm64-check: $name was not built" >&2; fail=1; continue; }
  kind=$(file -b "$bin")
  case "$kind" in
    *"ARM aarch64"*"statically linked"* | *"ARM aarch64"*"static-pie linked"*) ;;
    *) echo "arm64-check: $name is not a static AArch64 executable: $kind" >&2; fail=1; continue ;;
  esac
  # The shim answers --version with runc's (it passes everything else on to runc).
  if ! "$qemu" "$bin" --version >/dev/null 2>"$out/$name.err"; then
    echo "arm64-check: $name --version failed under qemu-aarch64:" >&2
    sed 's/^/  /' "$out/$name.err" >&2
    fail=1
  fi
done
echo "arm64-check: ${#bins[@]} binaries checked as static aarch64 executables under qemu-aarch64"

# Discovery on a simulated demo host (two accelerators, the control node), by both builds.
sim=$(mktemp -d)
trap 'rm -rf "$sim"' EXIT
mkdir -p "$sim/dev/demo" "$sim/sys" "$sim/profiles"
mknod "$sim/dev/demo/accel0" c 240 0
mknod "$sim/dev/demo/accel1" c 240 1
mknod "$sim/dev/demo/ctl" c 240 255
cp profiles/demo.toml "$sim/profiles/"
cargo build --quiet -p devinject-ctl --bin devinject-ctl
list() {
  "$@" devices list --json --profiles-dir "$sim/profiles" --dev-root "$sim/dev" --sys-root "$sim/sys"
}
native=$(list target/debug/devinject-ctl)
emulated=$(list "$qemu" "$out/bin/devinject-ctl")
if [ "$native" != "$emulated" ] || ! grep -q '"major": 240' <<<"$native"; then
  echo "arm64-check: the aarch64 devinject-ctl discovers the demo host differently:" >&2
  diff <(echo "$native") <(echo "$emulated") >&2 || true
  fail=1
fi

# The unit tests of the crates whose work depends on the machine (ELF machines and sonames,
# driver files and library directories; the linker cache's flags and byte order; the cgroup
# device program's encoding), built for aarch64 and run under qemu-aarch64 as cargo's runner.
# Tests that need what user-mode emulation lacks (openat2, namespaces) are left out by name:
# the arm64 guest (scripts/arm64-guest.sh) runs those paths on an arm64 kernel.
echo "arm64-check: the machine-dependent crates' unit tests under qemu-aarch64"
upper=AARCH64_UNKNOWN_LINUX_GNU
emulated_tests() {
  env "CARGO_TARGET_${upper}_LINKER=aarch64-linux-gnu-gcc" CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    "CARGO_TARGET_${upper}_RUNNER=$qemu" RUSTFLAGS="-C target-feature=+crt-static" \
    cargo test --locked --quiet --target aarch64-unknown-linux-gnu \
    --target-dir "${TARGET_DIR:-target/image-aarch64}" "$@"
}
# The linker cache's writer, but its update of a rootfs (openat2, which qemu 7.2 lacks) and the
# test that reads this host's own libc (an x86-64 one here).
if ! emulated_tests -p devinject-devices -p devinject-discovery -p devinject-cgroup --lib ||
  ! emulated_tests -p devinject-oci --lib ld_so_cache -- --skip ld_so_cache::update --skip this_hosts_libc; then
  echo "arm64-check: a unit test failed under qemu-aarch64 (above)" >&2
  fail=1
fi
[ "$fail" = 0 ] && echo "arm64-check: passed"
exit "$fail"
