#!/usr/bin/env bash
# Builds the Kubernetes the cluster tier runs on (docs/testing.md, "The cluster tier"): kubelet,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl from the Go module
# k8s.io/kubernetes, and etcd 3.6 from go.etcd.io/etcd/server/v3. Debian has no kubelet after
# 1.20 and no etcd newer than 3.4. Two releases are pinned:
#
#   (default)       scripts/kube-module       the release of today (1.37), the whole tier in CI
#   --release 1.34  scripts/kube-module-1.34  the oldest with resource.k8s.io/v1, for
#                                             scripts/cluster-1.34.sh (the DRA tests)
#
# Pinned by version and checksum: each module's go.mod requires the Kubernetes version and
# points every staging module (k8s.io/api, client-go, kubelet, ...) at the release published with
# it; scripts/etcd-module/go.mod requires etcd. Their go.sum files hold the h1: checksum of every
# module the build reads, and the build runs with GOFLAGS=-mod=readonly, so a module whose content
# differs fails. The modules come through Go's module proxy into Go's module cache. The binaries
# land outside the tree and are reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/kubernetes-<version>/bin
#
# Rebuilt only when a go.mod, go.sum or this script change. Prints the bin dir. With --if-built it
# builds nothing: it prints the dir when the binaries are up to date, and fails otherwise. With
# --refresh-sum it writes the go.sum files from what the proxy serves (after a version change).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
kube_module=$(pinned_module kube-module-build scripts/kube-module "$@") || exit 1
if [ "${1:-}" = --release ]; then shift 2; fi
version=$(sed -n 's/^require k8s.io\/kubernetes v//p' "$kube_module/go.mod")
etcd_version=3.6.16
etcd_module=scripts/etcd-module
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/kubernetes-$version
bin=$dir/bin
commands=(kubelet kube-apiserver kube-controller-manager kube-scheduler kubectl)
fail() { echo "kube-module-build: $*" >&2; exit 1; }

[ -n "$version" ] || fail "$kube_module/go.mod requires no k8s.io/kubernetes version"
grep -qx "require go.etcd.io/etcd/server/v3 v$etcd_version" "$etcd_module/go.mod" ||
  fail "$etcd_module/go.mod does not require etcd v$etcd_version (change both together)"
staging=v0.${version#1.}
if grep -E '=> k8s.io/[a-z0-9-]+ v' "$kube_module/go.mod" | grep -qv " $staging\$"; then
  fail "$kube_module/go.mod replaces a staging module with another release than $staging"
fi

export GOTOOLCHAIN=local GOWORK=off
if [ "${1:-}" = --refresh-sum ]; then
  for c in "${commands[@]}"; do (cd "$kube_module" && GOFLAGS=-mod=mod go list -deps "k8s.io/kubernetes/cmd/$c" >/dev/null); done
  (cd "$etcd_module" && GOFLAGS=-mod=mod go list -deps go.etcd.io/etcd/server/v3 >/dev/null)
  echo "kube-module-build: wrote $kube_module/go.sum and $etcd_module/go.sum" >&2
  exit 0
fi

stamp=$(cat "$kube_module/go.mod" "$kube_module/go.sum" "$etcd_module/go.mod" "$etcd_module/go.sum" \
  scripts/kube-module-build.sh | sha256sum)
complete() {
  for c in "${commands[@]}" etcd; do [ -x "$bin/$c" ] || return 1; done
  [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]
}
if complete; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1

# The Go both go.mod files ask for (`go 1.26.0`). GOTOOLCHAIN=local keeps go from fetching another.
go_at_least 1.26.0

mkdir -p "$bin" "$dir/kube-module" "$dir/etcd-module"
cp "$kube_module/go.mod" "$kube_module/go.sum" "$dir/kube-module/"
cp "$etcd_module/go.mod" "$etcd_module/go.sum" "$dir/etcd-module/"
echo "kube-module-build: building Kubernetes $version and etcd $etcd_version with $(go env GOVERSION)" \
  "(about 20 minutes of 2 cores the first time)" >&2
export GOFLAGS=-mod=readonly CGO_ENABLED=0
# The version the components report (and the apiserver's compatibility version is derived from):
# what Kubernetes' own build stamps through hack/lib/version.sh.
pkg=k8s.io/component-base/version
minor=${version#1.}
minor=${minor%%.*}
ldflags="-s -w -X $pkg.gitVersion=v$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=v$version"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
for c in "${commands[@]}"; do
  (cd "$dir/kube-module" && go build -trimpath -tags "selinux notest grpcnotrace" -ldflags "$ldflags" \
    -o "$bin/$c.tmp" "k8s.io/kubernetes/cmd/$c") ||
    fail "go build of k8s.io/kubernetes/cmd/$c v$version failed (see above; a checksum mismatch means a module differs from $kube_module/go.sum)"
  mv "$bin/$c.tmp" "$bin/$c"
done
(cd "$dir/etcd-module" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3) ||
  fail "go build of etcd v$etcd_version failed (see above)"
mv "$bin/etcd.tmp" "$bin/etcd"

said=$("$bin/kubelet" --version) || fail "the built kubelet does not run: $said"
[ "$said" = "Kubernetes v$version" ] || fail "the built kubelet says $said, not Kubernetes v$version"
said=$("$bin/etcd" --version | sed -n 1p) || fail "the built etcd does not run: $said"
[ "$said" = "etcd Version: $etcd_version" ] || fail "the built etcd says $said, not etcd Version: $etcd_version"
echo "$stamp" >"$dir/inputs.sha256"
echo "$bin"
