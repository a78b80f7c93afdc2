#!/usr/bin/env bash
# Builds the CRIU the runc tier's checkpoint test runs (DEVINJECT_CRIU, docs/testing.md): CRIU
# 4.2.1 from Debian's source package (forky's), as its release tarball builds it (`make criu`),
# without its documentation. Debian 12 packages CRIU 3.17.1, which cannot dump on the kernels
# of today: its `criu check` stops at "vdso: Unexpected rt vDSO area bounds" (kernel 6.18).
#
# Pinned by version and checksum: the orig tarball's SHA-256 below. It comes through a private apt
# configuration whose sources are this machine's own, for the suite forky, deb-src only
# (scripts/lib/private-apt.sh): no mirror is written here, and the machine's apt state is never
# touched. The binary lands outside the tree and is reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/criu-<version>/criu
#
# runc runs `criu` from its PATH: the tests put this directory first in it. Rebuilt only when
# this script changes. Prints the directory. With --if-built it builds nothing: it prints the
# directory when the binary is up to date, and fails otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.2.1
orig_sha256=29ec0ee09e296479fe7048c80980e8ef1d0684d0b0204c2b101dfea19f6725b9
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/criu-$version
fail() { echo "criu-build: $*" >&2; exit 1; }

stamp=$(sha256sum <scripts/criu-build.sh)
if [ -x "$dir/criu" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir"
  exit 0
fi
[ "${1:-}" = --if-built ] && exit 1
for header in google/protobuf-c/protobuf-c.h libnl3/netlink/netlink.h libnet.h libaio.h \
  nftables/libnftables.h bsd/string.h sys/capability.h gnutls/gnutls.h uuid/uuid.h; do
  [ -e "/usr/include/$header" ] ||
    fail "needs /usr/include/$header (its -dev package: scripts/install-deps.sh test)"
done
for tool in make gcc protoc-c pkg-config; do
  command -v "$tool" >/dev/null || fail "needs $tool (scripts/install-deps.sh test)"
done

# shellcheck source=scripts/lib/private-apt.sh
. scripts/lib/private-apt.sh
work=$dir/work
rm -rf "$work" && mkdir -p "$work"
orig=criu_$version.orig.tar.xz
echo "criu-build: fetching $orig, building CRIU $version (under a minute)" >&2
debian_orig "$dir/apt" forky criu "$orig" "$orig_sha256" "$work"
tar -C "$work" -xJf "$work/$orig"
src=$work/criu-$version
make -C "$src" -j"$(nproc)" criu >"$work/make.log" 2>&1 ||
  { tail -n 30 "$work/make.log" >&2; fail "building CRIU $version failed (the log's end is above; $work has the tree)"; }
said=$("$src/criu/criu" --version) || fail "the built criu does not run: $said"
grep -q "^Version: $version\$" <<<"$said" || fail "the built criu says $(sed -n 1p <<<"$said")"
# What it needs of the kernel, checked once here rather than in the middle of a test.
"$src/criu/criu" check >"$work/check.log" 2>&1 ||
  { cat "$work/check.log" >&2; fail "CRIU $version cannot checkpoint on this kernel ($(uname -r)): criu check failed"; }
install -m 0755 "$src/criu/criu" "$dir/criu.tmp"
mv "$dir/criu.tmp" "$dir/criu"
rm -rf "$work"
echo "$stamp" >"$dir/inputs.sha256"
echo "$dir"
