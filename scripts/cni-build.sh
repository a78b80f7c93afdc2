#!/usr/bin/env bash
# Builds the CNI plugins a cluster-tier node needs for pods off the host network (a pod with
# `hostUsers: false` cannot use the host network): `loopback` (containerd sets up every pod's
# `lo` with it), `ptp` (a veth pair to the pod and a host route, both removed with the pod) and
# `host-local` (addresses, its state in the node's dir), from the Go module
# github.com/containernetworking/plugins, as its build script builds them (static, CGO off).
# tests/src/cluster/node.rs writes the network config.
#
# Pinned by version and checksum: scripts/cni-build/go.mod requires the version, its go.sum holds
# the h1: checksum of the plugins' module and of every module they are built from, and the build
# runs with GOFLAGS=-mod=readonly, so a module whose content differs from go.sum fails the build.
# The modules come through Go's module proxy into Go's module cache. The binaries land outside
# the tree and are reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/cni-plugins-<version>/bin/{loopback,ptp,host-local}
#
# Rebuilt only when go.mod, go.sum or this script change (about 25 s of 2 cores the first time).
# Prints the bin dir. With --if-built it builds nothing: it prints the dir when the binaries are
# up to date, and fails otherwise. With --refresh-sum it writes go.sum from what the proxy serves
# (after a version change).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.9.1
module=scripts/cni-build
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/cni-plugins-$version
bin=$dir/bin
pkg=github.com/containernetworking/plugins
plugins=(main/loopback main/ptp ipam/host-local)
fail() { echo "cni-build: $*" >&2; exit 1; }

grep -qx "require $pkg v$version" "$module/go.mod" ||
  fail "$module/go.mod does not require $pkg v$version (change both together)"

pkgs=()
for p in "${plugins[@]}"; do pkgs+=("$pkg/plugins/$p"); done
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
go_pinned_begin cni-build "$module" scripts/cni-build.sh "${1:-}" -- "${pkgs[@]}"
binaries=()
for p in "${plugins[@]}"; do binaries+=("$bin/${p##*/}"); done
if go_pinned_current "$dir" "${binaries[@]}"; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1

# The Go the plugins' go.mod asks for. GOTOOLCHAIN=local keeps go from fetching another one.
go_at_least 1.24.2

go_pinned_stage "$dir" "$module"
mkdir -p "$bin"
echo "cni-build: building the CNI plugins $version with $(go env GOVERSION)" >&2
go_pinned_build "$dir" "$pkg v$version" \
  -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v$version" \
  -o "$dir/module/out/" "${pkgs[@]}"
for p in "${plugins[@]}"; do
  name=${p##*/}
  said=$(CNI_COMMAND=VERSION "$dir/module/out/$name" 2>&1) ||
    fail "the built $name does not answer CNI's VERSION command: $said"
  mv "$dir/module/out/$name" "$bin/$name"
done
go_pinned_done "$dir"
echo "$bin"
