#!/usr/bin/env bash
# Builds the real Kubernetes components the cluster test tier runs (tests/src/cluster/): kubelet,
# kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 from Debian 12's
# `kubernetes` source package (its orig tarball is the whole upstream tree with vendor/), with
# Debian's Go in GOPATH mode; etcd and kubectl from Debian 12's binary packages, unpacked, never
# installed. Everything lands in one cache dir, reused by later runs:
#
#   ${DEVINJECT_KUBE_CACHE:-$HOME/.cache/devinject/kubernetes-1.20.2}/bin
#
# The packages come through a private apt configuration whose sources are this machine's own
# (same mirrors, suites, components and keys) with deb-src added (scripts/lib/private-apt.sh):
# the machine's apt sources and package state are never touched. Prints the bin dir on success.
# With --if-built it builds nothing: it prints the bin dir when everything is there, and fails
# otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.20.2
cache=${DEVINJECT_KUBE_CACHE:-$HOME/.cache/devinject/kubernetes-$version}
bin=$cache/bin
servers=(kubelet kube-apiserver kube-controller-manager kube-scheduler)

# What the servers were built with beyond the orig tarball (see the reflect2 step below); a
# cache built without it is rebuilt.
fixes="reflect2 1.0.2"
complete() {
  for b in "${servers[@]}" etcd kubectl; do [ -x "$bin/$b" ] || return 1; done
  [ "$(cat "$bin/.fixes" 2>/dev/null)" = "$fixes" ]
}
if complete; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1
command -v go >/dev/null || { echo "kube-build: needs Go (apt-get install golang-go; scripts/install-deps.sh test)" >&2; exit 1; }
mkdir -p "$bin"

# The machine's own sources for this release, with deb-src (scripts/lib/private-apt.sh).
# shellcheck source=scripts/lib/private-apt.sh
. scripts/lib/private-apt.sh
private_apt "$cache/apt" "deb deb-src"
work=$cache/work
mkdir -p "$work"

# etcd and kubectl: the packages' binaries, unpacked.
if [ ! -x "$bin/etcd" ] || [ ! -x "$bin/kubectl" ]; then
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download etcd-server kubernetes-client)
  for deb in "$work"/etcd-server_*.deb "$work"/kubernetes-client_*.deb; do
    dpkg-deb -x "$deb" "$work/unpacked"
  done
  install -m 0755 "$work/unpacked/usr/bin/etcd" "$work/unpacked/usr/bin/kubectl" "$bin/"
fi

# The source tree: the orig tarball only (the upstream tree; Debian's patches concern its own
# packaging of kubectl).
tree=$work/kubernetes
if [ ! -d "$tree/cmd/kubelet" ]; then
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root source --download-only kubernetes)
  orig=$(ls "$work"/kubernetes_*.orig.tar.* | head -n1)
  rm -rf "$tree.tmp" && mkdir -p "$tree.tmp"
  tar -C "$tree.tmp" --strip-components=1 -xf "$orig"
  mv "$tree.tmp" "$tree"
fi

# The vendored github.com/modern-go/reflect2 v1.0.1 iterates maps in a way Go 1.18 broke: built
# with Debian 12's Go 1.19, the API server dies ("unexpected fault address", in
# json-iterator's sorted map encoder) on the first mutating webhook that returns a JSON patch
# (it encodes the patch for the audit annotation). v1.0.2 is the fix, which upstream took for
# Kubernetes 1.24; Debian 12 packages it, and it replaces the vendored copy here.
if [ "$(cat "$bin/.fixes" 2>/dev/null)" != "$fixes" ]; then
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download golang-github-modern-go-reflect2-dev)
  rm -rf "$work/reflect2" && dpkg-deb -x "$work"/golang-github-modern-go-reflect2-dev_*.deb "$work/reflect2"
  vendored=$tree/vendor/github.com/modern-go/reflect2
  rm -f "$vendored"/*.go
  cp "$work"/reflect2/usr/share/gocode/src/github.com/modern-go/reflect2/*.go "$vendored/"
  for b in "${servers[@]}"; do rm -f "$bin/$b"; done
fi

export GOPATH=$cache/gopath GOCACHE=$cache/gocache GO111MODULE=off GOFLAGS= GOPROXY=off GOTOOLCHAIN=local
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$tree" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

# kube-apiserver needs the OpenAPI definitions upstream's make generates: the vendored
# openapi-gen over every package tagged `+k8s:openapi-gen=`, as build/root/Makefile.generated_files does.
openapi=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -s "$openapi" ]; then
  go build -o "$cache/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  inputs=$(grep -rl --include='*.go' -e '+k8s:openapi-gen=' pkg staging/src/k8s.io vendor/k8s.io 2>/dev/null \
    | xargs -n1 dirname | sort -u \
    | sed -e 's|^staging/src/||' -e 's|^vendor/||' -e 's|^pkg/|k8s.io/kubernetes/pkg/|' \
    | paste -sd, -)
  "$cache/openapi-gen" --go-header-file hack/boilerplate/boilerplate.generatego.txt \
    --input-dirs "$inputs" --output-base "$GOPATH/src" \
    --output-package k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    --report-filename /dev/null
fi

ver=k8s.io/kubernetes/vendor/k8s.io/component-base/version
cgo=k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version
ldflags="-s -w"
for pkg in $ver $cgo; do
  ldflags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=20 -X $pkg.gitTreeState=archive"
done
for b in "${servers[@]}"; do
  [ -x "$bin/$b" ] && continue
  echo "kube-build: building $b (minutes on a small machine)" >&2
  go build -ldflags "$ldflags" -o "$bin/$b.tmp" "./cmd/$b"
  mv "$bin/$b.tmp" "$bin/$b"
done
echo "$fixes" >"$bin/.fixes"
complete
# Only bin/ is read from now on: the source tree, the Go build cache and the downloads are
# several GB that a later run never needs (it returns at the check above).
cd /
rm -rf "$work" "$GOPATH" "$GOCACHE" "$cache/openapi-gen"
echo "$bin"
