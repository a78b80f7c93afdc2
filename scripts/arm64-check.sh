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
# Not in CI (a cold cross release build is about 25 minutes of 2 cores): docs/testing.md names it.
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
[ "$fail" = 0 ] && echo "arm64-check: passed"
exit "$fail"
