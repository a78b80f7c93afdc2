#!/usr/bin/env bash
# Builds containerd 2.3, containerd's long-term release (containerd, containerd-shim-runc-v2,
# ctr), from its Go module github.com/containerd/containerd/v2, static (CGO off; the btrfs,
# devmapper and zfs snapshotters left out, as a node on overlayfs needs none of them). Debian
# packages no containerd newer than 2.1; 2.2 was the first release whose NRI applies device
# cgroup rules given without nodes, which the NRI plugin needs for user-namespaced pods
# (docs/nri.md); scripts/cluster-containerd.sh runs the engine-path cluster tests on it.
#
# Pinned by version and checksum: scripts/containerd-build/go.mod requires the version, its
# go.sum holds the h1: checksum of containerd's module and of every module it is built from, and
# the build runs with GOFLAGS=-mod=readonly, so a module whose content differs from go.sum fails
# the build. The modules come through Go's module proxy into Go's module cache. The binaries land
# outside the tree, laid out like a release of scripts/runtimes-fetch.sh, and are reused:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/containerd-<version>/bin/{containerd,containerd-shim-runc-v2,ctr}
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/containerd-<version>/VERSION
#
# With --release 2.4 it builds the newest release instead, pinned the same way by
# scripts/containerd-build-2.4/ (not in CI: `scripts/cluster-containerd.sh --release 2.4` runs
# the engine-path cluster tests on it).
#
# Rebuilt only when go.mod, go.sum or this script change (about 2 minutes of 2 cores the first
# time). Prints the release dir. With --if-built it builds nothing: it prints the dir when the
# binaries are up to date, and fails otherwise. With --refresh-sum it writes go.sum from what the
# proxy serves (after a version change).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
module=$(pinned_module containerd-build scripts/containerd-build "$@") || exit 1
if [ "${1:-}" = --release ]; then shift 2; fi
pkg=github.com/containerd/containerd/v2
version=$(sed -n "s|^require $pkg v||p" "$module/go.mod")
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/containerd-$version
bin=$dir/bin
commands=(containerd containerd-shim-runc-v2 ctr)
fail() { echo "containerd-build: $*" >&2; exit 1; }

[ -n "$version" ] || fail "$module/go.mod requires no $pkg version"

tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs"
pkgs=()
for c in "${commands[@]}"; do pkgs+=("$pkg/cmd/$c"); done
go_pinned_begin containerd-build "$module" scripts/containerd-build.sh "${1:-}" -- -tags "$tags" "${pkgs[@]}"
binaries=()
for c in "${commands[@]}"; do binaries+=("$bin/$c"); done
if go_pinned_current "$dir" "${binaries[@]}"; then echo "$dir"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1

# The Go containerd's go.mod asks for, copied into the pinning module. GOTOOLCHAIN=local keeps go
# from fetching another one.
go_at_least_for "$module"

go_pinned_stage "$dir" "$module"
mkdir -p "$bin"
echo "containerd-build: building containerd $version with $(go env GOVERSION)" >&2
go_pinned_build "$dir" "$pkg v$version" -tags "$tags" \
  -ldflags "-s -w -X $pkg/version.Version=v$version -X $pkg/version.Package=$pkg" \
  -o "$dir/module/out/" "${pkgs[@]}"
said=$("$dir/module/out/containerd" --version 2>&1) ||
  fail "the built containerd does not answer --version: $said"
case $said in
  *" v$version"*) ;;
  *) fail "the built containerd says '$said', not v$version" ;;
esac
for c in "${commands[@]}"; do mv "$dir/module/out/$c" "$bin/$c"; done
echo "$version" >"$dir/VERSION"
go_pinned_done "$dir"
echo "$dir"
