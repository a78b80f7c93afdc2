#!/usr/bin/env bash
# Builds the crun the CRI-O tier runs a second time on (DEVINJECT_CRUN, docs/testing.md): crun
# 1.21 from Debian 13's source package, as its release tarball builds it (`./configure && make`,
# the generated sources included), with libcap and libseccomp, without systemd or CRIU (the test
# nodes use cgroupfs). Debian 12 packages crun 1.8.1, which cannot serve user-namespaced pods
# (idmapped mounts came in 1.9) and treats a memlock limit it may not raise as fatal for its eBPF
# device filter on cgroup v2, where later releases only try; Debian 13's crun binary needs
# glibc 2.38.
#
# Pinned by version and checksum: the orig tarball's SHA-256 below. It comes through a private apt
# configuration whose sources are this machine's own, for the suite trixie, deb-src only
# (scripts/lib/private-apt.sh): no mirror is written here, and the machine's apt state is never
# touched. The binary lands outside the tree and is reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/crun-<version>/crun
#
# Rebuilt only when this script changes. Prints the binary's path. With --if-built it builds
# nothing: it prints the path when the binary is up to date, and fails otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.21
orig_sha256=4bfb700e764a4804a4de3ecf07753f4c391005356d60356df65d80ae0914c486
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/crun-$version
crun=$dir/crun
fail() { echo "crun-build: $*" >&2; exit 1; }

stamp=$(sha256sum <scripts/crun-build.sh)
if [ -x "$crun" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "$crun"
  exit 0
fi
[ "${1:-}" = --if-built ] && exit 1
for header in sys/capability.h seccomp.h; do
  [ -e "/usr/include/$header" ] ||
    fail "needs /usr/include/$header (apt-get install libcap-dev libseccomp-dev; scripts/install-deps.sh test)"
done
command -v make >/dev/null && command -v gcc >/dev/null || fail "needs gcc and make (apt-get install build-essential)"

# shellcheck source=scripts/lib/private-apt.sh
. scripts/lib/private-apt.sh
work=$dir/work
rm -rf "$work" && mkdir -p "$work"
orig=crun_$version.orig.tar.gz
echo "crun-build: fetching $orig, building crun $version (under a minute)" >&2
debian_orig "$dir/apt" trixie crun "$orig" "$orig_sha256" "$work"
tar -C "$work" -xzf "$work/$orig"
src=$work/crun-$version
(
  cd "$src"
  ./configure --disable-systemd --disable-criu --enable-embedded-yajl --disable-dl >"$work/configure.log" 2>&1 ||
    { tail -n 30 "$work/configure.log" >&2; exit 1; }
  # The release tarball carries git-version.h's source, which only `make` of all copies.
  make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 30 "$work/make.log" >&2; exit 1; }
) || fail "building crun $version failed (the log's end is above; $work has the tree)"
said=$("$src/crun" --version) || fail "the built crun does not run: $said"
grep -qx "crun version $version" <<<"$(sed -n 1p <<<"$said")" || fail "the built crun says $(sed -n 1p <<<"$said")"
grep -q '+SECCOMP' <<<"$said" && grep -q '+CAP' <<<"$said" && grep -q '+EBPF' <<<"$said" ||
  fail "the built crun lacks seccomp, capabilities or eBPF: $(tail -n 1 <<<"$said")"
install -m 0755 "$src/crun" "$crun.tmp"
mv "$crun.tmp" "$crun"
rm -rf "$work"
echo "$stamp" >"$dir/inputs.sha256"
echo "$crun"
