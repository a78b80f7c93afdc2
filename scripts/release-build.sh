#!/usr/bin/env bash
# Builds the binaries as they ship and gathers them in one folder, which it prints; used by
# scripts/build-image.sh (the image) and scripts/bench.sh (the figures are those of what ships).
#
# Usage: scripts/release-build.sh DIR CARGO_SELECTION...   e.g. `DIR --workspace`, `DIR -p devinject-oci`
# (the hook, the shim and devinject-podresources are built whatever the selection, each package
# on its own; the glibc builds of the shim and the helper go to DIR/glibc)
#
#   - Every binary: statically linked against glibc (`-C target-feature=+crt-static`) for the
#     host's own target triple, so a FROM scratch image needs no loader and no musl toolchain.
#   - The binaries a container start executes, except the hook, are linked against musl
#     instead: the runtime shim (`devinject-runtime`), which the engine runs for every container,
#     several times each (create, start, state, kill, delete), almost always for one that asks
#     for nothing; and `devinject-podresources`, which the request policy executed before it
#     made the same call in-process (built the same way, so that it measures as it did).
#     Static glibc spends a few hundred microseconds
#     before `main` probing the CPU's caches with `cpuid` (`init_cacheinfo`), an instruction that
#     traps to the hypervisor on a virtual machine, which is what most nodes are; musl does no
#     such probing (docs/benchmarks.md, "Start-up of the shim and the helper").
#     The hook stays on glibc: it does the injection's real work (the linker cache, many
#     libraries), where glibc's allocator and string functions are the faster.
#
# Environment: PROFILE (release, the default, or dev: no optimisation, stripped), TARGET_DIR
# (default target/image: apart from normal builds, because RUSTFLAGS differ), ARCH (the machine to
# build for: this host's, the default, or aarch64 on an x86_64 host: cross-built with Debian's
# gcc-aarch64-linux-gnu and libc6-dev-arm64-cross as the linker and the C compiler of build scripts,
# which scripts/install-deps.sh installs with `cross`; the same static glibc and musl builds).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/release-build.sh DIR CARGO_SELECTION...}
shift
[ $# -gt 0 ] || { echo "release-build: say what to build (--workspace, -p PACKAGE ...)" >&2; exit 2; }
profile=${PROFILE:-release}
# A build started from a test must see the environment a build started from a shell sees.
# `cargo test` gives its test binaries the package's CARGO_MANIFEST_DIR, CARGO_PKG_*, OUT_DIR
# and the like, and build scripts that watch them (`rerun-if-env-changed`: ring's watches
# CARGO_MANIFEST_DIR, CARGO_PKG_NAME and OUT_DIR) run again when they differ, and with them every
# crate above: ring's rebuilt the TLS users (the device plugin, the DRA driver, the webhook), in
# release minutes of 2 cores, each time a test's build followed a shell's.
for v in $(compgen -e); do
  case $v in
    CARGO_MANIFEST_* | CARGO_PKG_* | CARGO_CRATE_NAME | CARGO_BIN_NAME | CARGO_BIN_EXE_* | \
      CARGO_PRIMARY_PACKAGE | CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR | OUT_DIR) unset "$v" ;;
  esac
done
target_dir=${TARGET_DIR:-target/image}
host=$(rustc -vV | sed -n 's/^host: //p')
arch=${ARCH:-${host%%-*}}
triple=$arch-unknown-linux-gnu
musl=$arch-unknown-linux-musl
if [ "$arch" != "${host%%-*}" ]; then
  # Cross-building: the target's gcc links (and compiles any C a build script builds).
  cross=$arch-linux-gnu
  if ! command -v "$cross-gcc" >/dev/null; then
    echo "release-build: building for $arch needs the cross compiler $cross-gcc: scripts/install-deps.sh cross (Debian: gcc-$cross libc6-dev-${arch/aarch64/arm64}-cross)" >&2
    exit 1
  fi
  for t in "$triple" "$musl"; do
    upper=$(echo "$t" | tr 'a-z-' 'A-Z_')
    export "CARGO_TARGET_${upper}_LINKER=$cross-gcc" "CC_${t//-/_}=$cross-gcc" "AR_${t//-/_}=$cross-ar"
  done
fi
case "$profile" in
  dev)
    sub=debug
    # Stripped as release builds are: unstripped, the dev binaries are three times larger, and
    # the installer, which reads its payload into memory, goes past its container's limit.
    export CARGO_PROFILE_DEV_STRIP=true
    ;;
  *) sub=$profile ;;
esac

for t in "$triple" "$musl"; do
  [ -d "$(rustc --print sysroot)/lib/rustlib/$t" ] && continue
  if ! command -v rustup >/dev/null; then
    echo "release-build: the Rust standard library for $t is missing and there is no rustup to add it: install it with your toolchain" >&2
    exit 1
  fi
  echo "release-build: adding the Rust target $t" >&2
  rustup target add "$t" >&2
done

# What each build produced, from cargo's own report (the target dir also holds binaries of
# earlier builds, of other sources, which must not be taken for this one's).
built=$(mktemp)
trap 'rm -f "$built"' EXIT
build() {
  cargo build --locked --quiet --message-format=json-render-diagnostics --profile "$profile" \
    --target-dir "$target_dir" "$@" >> "$built"
}
executables() {
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' "$built" | sort -u
}

RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" build --target "$triple" --bins "$@"
# The binaries run for every container start (the hook and the shim from devinject-oci), and
# devinject-podresources with them, are built again, each package on its own: built with the rest, cargo
# unifies every member's features into theirs (regex's Unicode tables, nix's socket module,
# ...), which made the shipped hook 3.38 MB against 2.87 MB built alone and its peak RSS about
# 0.5 MiB higher (docs/benchmarks.md, section 13).
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" build --target "$triple" -p devinject-oci --bins
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" build --target "$triple" -p devinject-podresources \
  --bins
musl_bins=(devinject-runtime devinject-podresources)
build --target "$musl" -p devinject-oci --bin=devinject-runtime
build --target "$musl" -p devinject-podresources --bins

# One folder with every binary this run built: hard links (cargo replaces its outputs, so a later
# build never changes what an earlier link points at), the musl builds in place of glibc's, and
# the glibc builds of those in DIR/glibc, for the benchmarks to compare.
mkdir -p "$dir/glibc"
executables | grep -F "/$triple/$sub/" | while read -r exe; do ln -f "$exe" "$dir/"; done
for b in "${musl_bins[@]}"; do
  ln -f "$dir/$b" "$dir/glibc/$b"
  ln -f "$target_dir/$musl/$sub/$b" "$dir/$b"
done
echo "$dir"
