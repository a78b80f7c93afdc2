#!/usr/bin/env bash
# Builds CRI-O, the second node runtime the product is specified for, as its users run it with
# Kubernetes 1.36: crio v1.36 from the Go module github.com/cri-o/cri-o (cgo with Debian 12's
# libseccomp; the build tags of CRI-O's Makefile for what Debian 12 lacks: no ostree, no btrfs
# headers, OpenPGP in Go instead of gpgme), its `pinns` helper (C, from the same module's
# pinns/src, static, as its Makefile builds it), crictl from sigs.k8s.io/cri-tools, and the CNI
# loopback plugin from github.com/containernetworking/plugins. conmon is Debian 12's (the
# package podman already needs). No Debian suite packages CRI-O.
#
# Pinned by version and checksum: scripts/crio-build/{crio,crictl,cni}/go.mod require the
# versions, their go.sum files hold the h1: checksum of every module each build reads, and the
# builds run with GOFLAGS=-mod=readonly. The binaries land outside the tree and are reused:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/cri-o-<version>/bin/{crio,pinns,crictl,loopback}
#
# Rebuilt only when a go.mod, go.sum or this script change. Prints the bin dir. With --if-built it
# builds nothing: it prints the dir when the binaries are up to date, and fails otherwise. With
# --refresh-sum it writes the go.sum files from what the proxy serves (after a version change).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.36.3
crictl_version=1.36.0
cni_version=1.9.1
modules=scripts/crio-build
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/cri-o-$version
bin=$dir/bin
tags="containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs seccomp"
fail() { echo "crio-build: $*" >&2; exit 1; }

grep -qx "require github.com/cri-o/cri-o v$version" "$modules/crio/go.mod" ||
  fail "$modules/crio/go.mod does not require cri-o v$version (change both together)"
grep -qx "require sigs.k8s.io/cri-tools v$crictl_version" "$modules/crictl/go.mod" ||
  fail "$modules/crictl/go.mod does not require cri-tools v$crictl_version (change both together)"
grep -qx "require github.com/containernetworking/plugins v$cni_version" "$modules/cni/go.mod" ||
  fail "$modules/cni/go.mod does not require the CNI plugins v$cni_version (change both together)"

export GOTOOLCHAIN=local GOWORK=off
if [ "${1:-}" = --refresh-sum ]; then
  (cd "$modules/crio" && GOFLAGS=-mod=mod go list -deps -tags "$tags" github.com/cri-o/cri-o/cmd/crio >/dev/null)
  (cd "$modules/crictl" && GOFLAGS=-mod=mod go list -deps sigs.k8s.io/cri-tools/cmd/crictl >/dev/null)
  (cd "$modules/cni" && GOFLAGS=-mod=mod go list -deps github.com/containernetworking/plugins/plugins/main/loopback >/dev/null)
  echo "crio-build: wrote the go.sum files under $modules" >&2
  exit 0
fi

stamp=$(cat "$modules"/*/go.mod "$modules"/*/go.sum scripts/crio-build.sh | sha256sum)
complete() {
  for b in crio pinns crictl loopback; do [ -x "$bin/$b" ] || return 1; done
  [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]
}
if complete; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1

# The Go the go.mod files ask for (CRI-O's `go 1.26.3`).
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
go_at_least 1.26.3
libseccomp_headers
command -v gcc >/dev/null || fail "needs gcc for pinns (apt-get install gcc)"

rm -rf "$dir/modules" && mkdir -p "$bin" "$dir/modules"
cp -r "$modules"/crio "$modules"/crictl "$modules"/cni "$dir/modules/"
echo "crio-build: building CRI-O $version, crictl $crictl_version and CNI loopback $cni_version" \
  "with $(go env GOVERSION) (a few minutes the first time)" >&2
export GOFLAGS=-mod=readonly
(cd "$dir/modules/crio" && CGO_ENABLED=1 go build -trimpath -tags "$tags" -ldflags "-s -w" \
  -o "$bin/crio.tmp" github.com/cri-o/cri-o/cmd/crio) ||
  fail "go build of cri-o v$version failed (see above; a checksum mismatch means a module differs from its go.sum)"
(cd "$dir/modules/crictl" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
  -X sigs.k8s.io/cri-tools/pkg/version.Version=v$crictl_version" \
  -o "$bin/crictl.tmp" sigs.k8s.io/cri-tools/cmd/crictl) || fail "go build of crictl v$crictl_version failed"
(cd "$dir/modules/cni" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
  -o "$bin/loopback.tmp" github.com/containernetworking/plugins/plugins/main/loopback) ||
  fail "go build of the CNI loopback plugin v$cni_version failed"
# pinns: the module's own C sources, checked by go.sum like the rest of it.
src=$(cd "$dir/modules/crio" && go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)/pinns/src
[ -f "$src/pinns.c" ] || fail "no pinns sources in $src"
gcc -std=c99 -Os -Wall -Wextra -static -o "$bin/pinns.tmp" "$src"/*.c || fail "cannot build pinns from $src"

said=$("$bin/crio.tmp" --version | sed -n 1p) || fail "the built crio does not run: $said"
[ "$said" = "crio version $version" ] || fail "the built crio says $said, not crio version $version"
said=$("$bin/crictl.tmp" --version) || fail "the built crictl does not run: $said"
[ "$said" = "crictl version v$crictl_version" ] || fail "the built crictl says $said"
for b in crio crictl loopback pinns; do mv "$bin/$b.tmp" "$bin/$b"; done
echo "$stamp" >"$dir/inputs.sha256"
echo "$bin"
