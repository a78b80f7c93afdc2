#!/usr/bin/env bash
# The arm64 guest: a real arm64 kernel (Debian 12's linux-image-arm64) booted by
# qemu-system-aarch64 under software emulation, with Debian 12's arm64 runc, busybox and glibc,
# and devinject's hook and shim cross-built for aarch64. It runs `devinject-guest-checks`
# (tests/harness/src/bin/devinject-guest-checks.rs): the demo through the hook and the shim with
# the arm64 kernel's cgroup v2 device program deciding, the injected library found by the arm64
# glibc's ld.so in the cache the hook wrote, a hostile image's subset, and Debian 12's arm64
# NVIDIA 535 user space injected by the shipped nvidia profile (nvidia-smi and cuInit stop at
# the kernel, which has no NVIDIA driver), and an x86-64 library refused with a clear message.
#
#   scripts/arm64-guest.sh build   fetch and build everything, print the guest dir (vmlinuz,
#                                  initrd.cpio, and `boot`, which boots it and prints its
#                                  console); tests/tests/arm64/arm64_guest.rs runs that
#   scripts/arm64-guest.sh run     build, then boot it here and print the guest's console
#   scripts/arm64-guest.sh bench [ROUNDS]  build, then boot it to run devinject-guest-bench
#                                  instead of the checks: the hook's and the shim's start cost
#                                  against runc's in the guest, as ratios with an A/A pair
#                                  (default 30 rounds)
#
# The packages are pinned by version and sha256 in scripts/arm64-guest/packages.lock and fetched
# through a private apt configuration with this machine's own sources, the arm64 architecture,
# and contrib and non-free added (scripts/lib/private-apt.sh): the machine's dpkg architectures
# are not touched. They are unpacked (`dpkg-deb -x`, never installed): no maintainer script
# runs, and the guest holds only what it runs. `--update-lock` pins what apt resolves today.
# The binaries are built with scripts/release-build.sh (ARCH=aarch64: static glibc, the shim on
# musl, as they ship) in the dev profile, into target/image-aarch64, where scripts/test.sh builds
# the multi-arch image's arm64 half too (about a minute and a half of 2 cores cold);
# PROFILE=release builds them as they ship (about 7 minutes cold).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-build}
lock=scripts/arm64-guest/packages.lock
cache=${XDG_CACHE_HOME:-$HOME/.cache}/devinject
debs=$cache/arm64-guest-debs
out=${ARM64_GUEST_DIR:-$PWD/target/arm64-guest}
fail() { echo "arm64-guest: $*" >&2; exit 1; }

# The packages of the guest: the kernel (its modules for the demo's device numbers), runc and
# what it links, busybox (the guest's init and shell, and the containers' rootfs), ldconfig. And
# of the NVIDIA driver root the guest injects from: Debian 12's arm64 NVIDIA 535 user space
# (non-free), the libraries cuInit loads and nvidia-smi.
kernel_meta=linux-image-arm64
packages=(runc libc6 libseccomp2 busybox-static libc-bin)
nvidia_packages=(libcuda1 libnvidia-ptxjitcompiler1 libnvidia-ml1 nvidia-smi)

scripts/install-deps.sh cross >&2

apt_arm64() {
  # shellcheck source=scripts/lib/private-apt.sh
  . scripts/lib/private-apt.sh
  local dir=$cache/arm64-guest-apt
  mkdir -p "$dir"
  private_apt "$dir" deb "" "contrib non-free" >/dev/null
  printf 'APT::Architecture "arm64";\nAPT::Architectures { "arm64"; };\n' >>"$APT_CONFIG"
  apt-get -qq -o APT::Sandbox::User=root update
}

if [ "$mode" = --update-lock ]; then
  apt_arm64
  kernel=$(apt-cache depends "$kernel_meta" | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$/\1/p' | head -n1)
  [ -n "$kernel" ] || fail "apt names no kernel package for $kernel_meta"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  {
    echo "# scripts/arm64-guest.sh --update-lock: package version sha256 root (arm64, Debian 12;"
    echo "# root: guest, the guest's own files, or nvidia, the driver root it injects from)"
    for p in "$kernel" "${packages[@]}" "${nvidia_packages[@]}"; do
      v=$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p')
      [ -n "$v" ] && [ "$v" != "(none)" ] || fail "apt has no candidate for $p"
      (cd "$tmp" && apt-get -qq -o APT::Sandbox::User=root download "$p=$v")
      where=guest
      case " ${nvidia_packages[*]} " in *" $p "*) where=nvidia ;; esac
      echo "$p $v $(sha256sum "$tmp"/"${p}"_*.deb | cut -d' ' -f1) $where"
    done
  } >"$lock.new"
  mv "$lock.new" "$lock"
  echo "arm64-guest: pinned $(grep -vc '^#' "$lock") packages in $lock" >&2
  exit 0
fi
case $mode in build | run | bench) ;; *) fail "usage: scripts/arm64-guest.sh build|run|bench [ROUNDS]|--update-lock" ;; esac

# 1. The pinned packages, each checked against the lock, unpacked into the guest's root or the
#    NVIDIA driver root.
stamp=$(sha256sum <"$lock" | cut -c1-16)
unpacked=$cache/arm64-guest-$stamp
root=$unpacked/guest
if [ ! -f "$unpacked/.complete" ]; then
  mkdir -p "$debs"
  need=()
  while read -r p v sum _; do
    case $p in '' | '#'*) continue ;; esac
    f=$debs/${p}_${v//:/%3a}_arm64.deb
    if [ ! -f "$f" ] || [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$sum" ]; then need+=("$p=$v"); fi
  done <"$lock"
  if [ ${#need[@]} -gt 0 ]; then
    apt_arm64
    (cd "$debs" && apt-get -qq -o APT::Sandbox::User=root download "${need[@]}") ||
      fail "apt could not fetch ${need[*]}: Debian may have dropped a pinned version; scripts/arm64-guest.sh --update-lock pins today's"
  fi
  rm -rf "$unpacked"
  mkdir -p "$unpacked/guest" "$unpacked/nvidia"
  while read -r p v sum where; do
    case $p in '' | '#'*) continue ;; esac
    f=$debs/${p}_${v//:/%3a}_arm64.deb
    [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sum" ] || fail "$f does not match the sha256 in $lock"
    case $where in guest | nvidia) ;; *) fail "$lock: $p: the root '$where' is neither guest nor nvidia" ;; esac
    dpkg-deb -x "$f" "$unpacked/$where"
  done <"$lock"
  touch "$unpacked/.complete"
fi
kver=$(basename "$(ls -d "$root"/lib/modules/*)")

# 2. devinject for aarch64, and the demo library and a program linked against it, built by the
#    cross gcc from the demo's own source.
bin=$out/bin
mkdir -p "$bin"
PROFILE=${PROFILE:-dev} ARCH=aarch64 TARGET_DIR=${TARGET_DIR:-target/image-aarch64} \
  scripts/release-build.sh "$bin" -p devinject-oci -p devinject-harness >/dev/null
cc=aarch64-linux-gnu-gcc
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
sed -n 's/^pub const DEMO_LIBRARY_SOURCE: &str = "\(.*\)\\n";$/\1/p' tests/harness/src/sim.rs >"$src/libdemo.c"
[ -s "$src/libdemo.c" ] || fail "no DEMO_LIBRARY_SOURCE in tests/harness/src/sim.rs"
printf '#include <stdio.h>\nint demo_version(void);\nint main(void) { printf("demo_version %%d\\n", demo_version()); return 0; }\n' >"$src/demo-use.c"
$cc -shared -fPIC -Wl,-soname,libdemo.so.1 -o "$bin/libdemo.so.1.0.0" "$src/libdemo.c"
$cc -o "$bin/demo-use" "$src/demo-use.c" "$bin/libdemo.so.1.0.0"
$cc -O2 -o "$bin/cuda-smoke" scripts/gpu-check/cuda-smoke.c -ldl
# A stand-in for Google's libedgetpu.so.1 (libedgetpu1-std is not in Debian) with its soname and
# its C API's version call, and a program linked against it, for the coral-edgetpu profile.
printf 'const char *edgetpu_version(void) { return "devinject stand-in"; }\n' >"$src/edgetpu.c"
printf '#include <stdio.h>\nconst char *edgetpu_version(void);\nint main(void) { printf("edgetpu_version %%s\\n", edgetpu_version()); return 0; }\n' >"$src/tpu-use.c"
$cc -shared -fPIC -Wl,-soname,libedgetpu.so.1 -o "$bin/libedgetpu.so.1.0" "$src/edgetpu.c"
$cc -o "$bin/tpu-use" "$src/tpu-use.c" "$bin/libedgetpu.so.1.0"
# The same library for this (the other) machine, which the guest must refuse to inject.
gcc -shared -fPIC -Wl,-soname,libdemo.so.1 -o "$bin/libdemo-other.so.1.0.0" "$src/libdemo.c"

# 3. The initramfs: the packages' files (no docs, only the modules below), devinject's, and
#    the init.
img=$out/initrd
rm -rf "$img"
mkdir -p "$img"
(cd "$root" && tar --exclude=./boot --exclude=./lib/modules --exclude=./usr/share -cf - .) | (cd "$img" && tar -xf -)
# The kernel modules behind the demo's device numbers (loop-control, btrfs-control, autofs,
# fuse, the control node's tun), each after what it needs (their `depends=`; crc32c before
# libcrc32c, which allocates it at load), loaded by the init with insmod: Debian builds them as
# modules, and the guest has no modprobe to load them on first open.
modules=(crypto/crc32c_generic lib/libcrc32c arch/arm64/lib/xor-neon crypto/xor lib/raid6/raid6_pq
  lib/zstd/zstd_compress fs/btrfs/btrfs drivers/block/loop fs/autofs/autofs4 fs/fuse/fuse drivers/net/tun)
: >"$img/modules.order"
for m in "${modules[@]}"; do
  f=lib/modules/$kver/kernel/$m.ko
  [ -f "$root/$f" ] || fail "the kernel package has no $f"
  mkdir -p "$img/$(dirname "$f")"
  cp "$root/$f" "$img/$f"
  echo "/$f" >>"$img/modules.order"
done
mkdir -p "$img/devinject/profiles" "$img/newroot"
for b in devinject-hook devinject-runtime devinject-guest-checks devinject-guest-bench; do
  aarch64-linux-gnu-strip -o "$img/devinject/$b" "$bin/$b"
done
cp "$bin/libdemo.so.1.0.0" "$bin/libdemo-other.so.1.0.0" "$bin/demo-use" "$bin/cuda-smoke" \
  "$bin/libedgetpu.so.1.0" "$bin/tpu-use" "$img/devinject/"
cp profiles/demo.toml profiles/nvidia.toml profiles/coral-edgetpu.toml "$img/devinject/profiles/"
(cd "$unpacked/nvidia" && tar --exclude=./usr/share -cf - .) | (mkdir -p "$img/devinject/nvidia-root" && cd "$img/devinject/nvidia-root" && tar -xf -)
cp scripts/arm64-guest/init scripts/arm64-guest/checks "$img/"
chmod 0755 "$img/init" "$img/checks"
(cd "$img" && find . | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null) >"$out/initrd.cpio"
cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
grep -v '^#' "$lock" >"$out/PACKAGES"
# How to boot it: qemu's cortex-a72 (the `max` CPU's pointer authentication is slow to emulate),
# no network device (the guest needs none, and qemu's would want a boot ROM package); the init
# powers the machine off when the checks end, -no-reboot makes a panic end qemu too, and
# `timeout` bounds the whole boot (it takes about 20 s here).
# Its arguments are added to the kernel's command line (the init reads devinject.bench=ROUNDS).
cat >"$out/boot" <<BOOT
#!/bin/sh
exec timeout 600 qemu-system-aarch64 -M virt -cpu cortex-a72 -smp 2 -m 1536 -nographic -nic none \\
  -no-reboot -kernel '$out/vmlinuz' -initrd '$out/initrd.cpio' -append "console=ttyAMA0 rdinit=/init panic=-1 \$*"
BOOT
chmod 0755 "$out/boot"
if [ "$mode" = build ]; then
  echo "$out"
  exit 0
fi
if [ "$mode" = bench ]; then
  exec "$out/boot" "devinject.bench=${2:-30}"
fi
exec "$out/boot"
