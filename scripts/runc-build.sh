#!/usr/bin/env bash
# Builds the runc the runc tier runs a second time with (DEVINJECT_RUNC, docs/testing.md): the
# newest runc 1.4 from its Go module github.com/opencontainers/runc, as runc's own Makefile
# builds `make runc` (cgo with libseccomp, tags `seccomp urfave_cli_no_docs`, -trimpath, PIE).
# Debian 12 packages runc 1.1.5 only; runc 1.2 changed how /dev and its nodes are made, which the
# hostile tests pin.
#
# Pinned by version and checksum: scripts/runc-build/go.mod requires the version, its go.sum holds
# the h1: checksum of runc's module and of every module it is built from, and the build runs with
# GOFLAGS=-mod=readonly, so a module whose content differs from go.sum fails the build. The
# modules come through Go's module proxy into Go's module cache. The binary lands outside the tree
# and is reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/runc-<version>/runc
#
# Rebuilt only when go.mod, go.sum or this script change. Prints the binary's path. With
# --if-built it builds nothing: it prints the path when the binary is up to date, and fails
# otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.4.3
module=scripts/runc-build
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/runc-$version
runc=$dir/runc
fail() { echo "runc-build: $*" >&2; exit 1; }

grep -qx "require github.com/opencontainers/runc v$version" "$module/go.mod" ||
  fail "$module/go.mod does not require runc v$version (change both together)"
stamp=$(cat "$module/go.mod" "$module/go.sum" scripts/runc-build.sh | sha256sum)
if [ -x "$runc" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "$runc"
  exit 0
fi
[ "${1:-}" = --if-built ] && exit 1

# The Go that runc's go.mod asks for (`go 1.24.0`; Debian 12's 1.19 is too old). GOTOOLCHAIN=local
# below keeps go from fetching another toolchain.
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
go_at_least 1.24.0
# cgo against libseccomp, as runc's seccomp build tag wants (scripts/install-deps.sh test).
libseccomp_headers

mkdir -p "$dir/module"
cp "$module/go.mod" "$module/go.sum" "$dir/module/"
echo "runc-build: building runc $version with $(go env GOVERSION) (a minute or two the first time)" >&2
(
  cd "$dir/module"
  export GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=1 GOWORK=off
  go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" -o "$runc.tmp" \
    github.com/opencontainers/runc
) || fail "go build of github.com/opencontainers/runc v$version failed (see above; a checksum mismatch means a module differs from $module/go.sum)"
# runc 1.4 embeds its VERSION file (main.go: `//go:embed VERSION`), which its Makefile no longer
# overrides with -X: the version printed is the module's own, checked here.
said=$("$runc.tmp" --version) || fail "the built $runc.tmp does not run: $said"
grep -qx "runc version $version" <<<"$said" || fail "the built runc says $(head -n1 <<<"$said"), not runc version $version"
grep -q '^libseccomp: ' <<<"$said" || fail "the built runc has no seccomp support: $(tr '\n' ' ' <<<"$said")"
mv "$runc.tmp" "$runc"
echo "$stamp" >"$dir/inputs.sha256"
echo "$runc"
