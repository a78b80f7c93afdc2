#!/usr/bin/env bash
# Builds helm from its Go module helm.sh/helm/v4 (as its Makefile builds it: static, CGO off,
# its version stamped in), for the chart's tests: `helm lint`, `helm template` against the
# kustomize overlays (scripts/check-manifests.py) and `helm install / upgrade / rollback /
# uninstall` on the cluster tier (tests/tests/cluster/cluster_helm.rs).
#
# Pinned by version and checksum: scripts/helm-build/go.mod requires the version, its go.sum
# holds the h1: checksum of helm's module and of every module it is built from, and the build
# runs with GOFLAGS=-mod=readonly, so a module whose content differs from go.sum fails the build.
# The binary lands outside the tree and is reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/helm-<version>/bin/helm
#
# Rebuilt only when go.mod, go.sum or this script change. Prints the bin dir. With --if-built
# it builds nothing: it prints the dir when the binary is up to date, and fails otherwise. With
# --refresh-sum it writes go.sum from what the proxy serves (after a version change).
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.3.1
module=scripts/helm-build
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/helm-$version
bin=$dir/bin
pkg=helm.sh/helm/v4
fail() { echo "helm-build: $*" >&2; exit 1; }

grep -q "^require $pkg v$version\$" "$module/go.mod" ||
  fail "$module/go.mod does not require $pkg v$version (change both together)"

# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
go_pinned_begin helm-build "$module" scripts/helm-build.sh "${1:-}" -- "$pkg/cmd/helm"
if go_pinned_current "$dir" "$bin/helm"; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1

go_at_least "$(sed -n 's/^go //p' "$module/go.mod")"

go_pinned_stage "$dir" "$module"
mkdir -p "$bin"
echo "helm-build: building helm $version with $(go env GOVERSION)" >&2
go_pinned_build "$dir" "$pkg v$version" -ldflags "-s -w -X $pkg/internal/version.version=v$version" \
  -o "$dir/module/out/helm" "$pkg/cmd/helm"
said=$("$dir/module/out/helm" version --template '{{.Version}}' 2>&1) ||
  fail "the built helm does not answer \`helm version\`: $said"
[ "$said" = "v$version" ] || fail "the built helm says it is $said, not v$version"
mv "$dir/module/out/helm" "$bin/helm"
go_pinned_done "$dir"
echo "$bin"
