#!/usr/bin/env bash
# Proves the README's two commands on a fresh machine, which this one is not: a clean Debian 12
# root (debootstrap --variant=minbase, from the mirror this machine's own apt sources name)
# holding only what a fresh machine holds (the Rust toolchain, gcc, python3, git), in which a
# fresh `git clone` of the commit under test
#   1. runs the README's first command, ./scripts/demo.sh, which must print `result: OK`;
#   2. runs the test command's install step, scripts/install-deps.sh test, which must succeed.
# The root is cached as a tarball under target/fresh-root/, so later runs set it up in seconds.
# Needs root. Uncommitted changes are not tested (a clone sees only commits).
#
# Usage: scripts/fresh-root-test.sh [--demo-only] [--keep]
#   FRESH_ROOT_DEMO_DEPS  overrides the demo's package list inside the root (to prove that the
#                         test fails when one is missing; see scripts/install-deps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
demo_only=0 keep=0
for a in "$@"; do
  case "$a" in
    --demo-only) demo_only=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--demo-only] [--keep]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "fresh-root-test: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
command -v debootstrap >/dev/null || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

# The mirror and suite this machine installs from (deb822 .sources or a one-line sources.list).
mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
  grep -v security | head -n1 || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "fresh-root-test: no Debian mirror in this machine's apt sources" >&2; exit 1; }
suite=bookworm

cache=$repo/target/fresh-root
tarball=$cache/$suite-minbase.tar
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  echo "fresh-root-test: debootstrap $suite (minbase) into a cache, once"
  build=$(mktemp -d /tmp/fresh-root-build.XXXXXX)
  debootstrap --variant=minbase "$suite" "$build" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
    tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  # What a fresh machine of this project has besides the Rust toolchain: gcc, python3, git.
  cp /etc/resolv.conf "$build/etc/resolv.conf"
  rm -f "$build/etc/apt/sources.list"
  cp -a /etc/apt/sources.list.d/. "$build/etc/apt/sources.list.d/"
  [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$build/etc/apt/sources.list"
  cp -a /etc/apt/apt.conf.d/. "$build/etc/apt/apt.conf.d/"
  printf '#!/bin/sh\nexit 101\n' >"$build/usr/sbin/policy-rc.d" && chmod +x "$build/usr/sbin/policy-rc.d"
  chroot "$build" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends gcc libc6-dev python3 git ca-certificates >/dev/null' \
    >>"$cache/debootstrap.log" 2>&1 || { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  tar -C "$build" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$build"
fi

root=$(mktemp -d /tmp/fresh-root.XXXXXX)
cleanup() {
  if [ "$keep" = 0 ]; then rm -rf "$root"; else echo "fresh-root-test: kept $root"; fi
}
trap cleanup EXIT
tar -C "$root" -xf "$tarball"
# The machine's network settings, as any of its processes gets them: name servers, and the
# certificate authorities it trusts (a TLS-inspecting proxy's among them, where there is one).
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"

# The toolchain as a fresh machine has it: rustup's toolchains read-only, its proxies and
# cargo's settings, and an empty registry cache (crates come from crates.io, as they would).
# rustup's and cargo's homes are where this machine's say (RUSTUP_HOME, CARGO_HOME), by default
# below $HOME.
rustup_home=${RUSTUP_HOME:-${HOME:-/root}/.rustup}
cargo_home=${CARGO_HOME:-${HOME:-/root}/.cargo}
mkdir -p "$root/root/.rustup" "$root/root/.cargo"
mkdir -p "$root/root/.cargo/bin"
cp -a "$(dirname "$(command -v rustup)")/." "$root/root/.cargo/bin/"
cp "$cargo_home"/config* "$root/root/.cargo/" 2>/dev/null || true
cp "$rustup_home/settings.toml" "$root/root/.rustup/"

# The commit under test, cloned as a user would.
commit=$(git -C "$repo" rev-parse HEAD)
git clone -q --no-local "$repo" "$root/src/devinject"
git -C "$root/src/devinject" checkout -q "$commit"
echo "fresh-root-test: testing commit $commit in $root (mirror from this machine's apt sources)"

deps_override=""
if [ -n "${FRESH_ROOT_DEMO_DEPS+set}" ]; then
  deps_override="DEVINJECT_DEMO_DEPS='$FRESH_ROOT_DEMO_DEPS'"
fi
steps='set -e; cd /src/devinject
start=$(date +%s)
'"$deps_override"' ./scripts/demo.sh 2>&1 | tee /tmp/demo.out
echo "fresh-root-test: clone to result in $(( $(date +%s) - start )) s"
grep -qx "result: OK" /tmp/demo.out'
if [ "$demo_only" = 0 ]; then
  steps="$steps
scripts/install-deps.sh test
echo 'fresh-root-test: scripts/install-deps.sh test: ok'"
fi

# A private mount namespace whose root *is* the fresh root (pivot_root, not chroot: a hook that
# joins a container's mount namespace gets that namespace's root, which under a chroot would be
# this machine's). Everything mounted for it goes away with it.
unshare -m sh -euc '
  root=$1 rustup_home=$2 steps=$3
  mount --make-rprivate /
  # The root must be a mount point, for pivot_root and for runc (it makes / a slave mount).
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mkdir -p "$root/root/.rustup/toolchains"
  mount --bind "$rustup_home/toolchains" "$root/root/.rustup/toolchains"
  mount -o remount,bind,ro "$root/root/.rustup/toolchains"
  mount -t tmpfs tmpfs "$root/tmp"
  cd "$root"
  mkdir -p .old-root
  pivot_root . .old-root
  cd /
  umount -l /.old-root
  rmdir /.old-root
  exec env -i HOME=/root PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUSTUP_HOME=/root/.rustup CARGO_HOME=/root/.cargo TERM=dumb LANG=C.UTF-8 \
    sh -c "$steps"
' fresh-root "$root" "$rustup_home" "$steps"
echo "fresh-root-test: passed"
