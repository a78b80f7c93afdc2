#!/usr/bin/env bash
# Builds the runc releases the tests run beside Debian 12's 1.1.5 (DEVINJECT_RUNC, docs/testing.md)
# from the Go module github.com/opencontainers/runc, as runc's own Makefile builds `make runc`
# (cgo with libseccomp, -trimpath, PIE). Two releases are pinned:
#
#   (default)      scripts/runc-build      runc 1.4: the CRI-O tier's and the cluster tier's
#                                          nodes; tags `seccomp urfave_cli_no_docs`
#   --release 1.5  scripts/runc-build-1.5  runc 1.5: the runc tier's second pass; its Makefile's
#                                          default tags, `libpathrs` included
#
# runc 1.2 changed how /dev and its nodes are made, which the hostile tests pin; runc 1.5 resolves
# the paths it opens in the container's root through libpathrs (the Rust crate `pathrs`, built
# here as a static archive from crates.io: scripts/runc-build-1.5/libpathrs, pinned by its
# Cargo.lock) and drops its own device package for moby's.
#
# Pinned by version and checksum: each module's go.mod requires the version, its go.sum holds the
# h1: checksum of runc's module and of every module it is built from, and the build runs with
# GOFLAGS=-mod=readonly, so a module whose content differs from go.sum fails the build. The
# modules come through Go's module proxy into Go's module cache. The binary lands outside the
# tree and is reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/runc-<version>/runc
#
# Rebuilt only when the module's files or this script change. Prints the binary's path. With
# --if-built it builds nothing: it prints the path when the binary is up to date, and fails
# otherwise. With --refresh-sum it writes go.sum from what the proxy serves (after a version
# change).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
module=$(pinned_module runc-build scripts/runc-build "$@") || exit 1
if [ "${1:-}" = --release ]; then shift 2; fi
tags="seccomp urfave_cli_no_docs"
libpathrs=$module/libpathrs
[ -d "$libpathrs" ] && tags+=" libpathrs"
version=$(sed -n 's/^require github.com\/opencontainers\/runc v//p' "$module/go.mod")
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/runc-$version
runc=$dir/runc
fail() { echo "runc-build: $*" >&2; exit 1; }

[ -n "$version" ] || fail "$module/go.mod requires no github.com/opencontainers/runc version"
inputs=("$module/go.mod" "$module/go.sum" scripts/runc-build.sh)
[ -d "$libpathrs" ] && inputs+=("$libpathrs/Cargo.toml" "$libpathrs/Cargo.lock" "$libpathrs/src/lib.rs")
stamp=$(cat "${inputs[@]}" | sha256sum)
if [ "${1:-}" != --refresh-sum ] && [ -x "$runc" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "$runc"
  exit 0
fi
[ "${1:-}" = --if-built ] && exit 1

# The Go that runc's go.mod asks for (1.4: `go 1.24.0`, 1.5: `go 1.25.0`; Debian 12's 1.19 is too
# old), copied into the pinning module. GOTOOLCHAIN=local below keeps go from fetching another.
go_at_least_for "$module"
# cgo against libseccomp, as runc's seccomp build tag wants (scripts/install-deps.sh test).
libseccomp_headers

mkdir -p "$dir/module"
export GOTOOLCHAIN=local CGO_ENABLED=1 GOWORK=off
# libpathrs for cgo (`#cgo pkg-config: pathrs` in cyphar.com/go-pathrs): the static archive, the
# header the crate ships (include/pathrs.h) and a pkg-config file naming both, under $dir/libpathrs.
if [ -d "$libpathrs" ]; then
  command -v cargo >/dev/null || fail "needs cargo for libpathrs (https://rustup.rs)"
  echo "runc-build: building libpathrs from $libpathrs (under a minute the first time)" >&2
  CARGO_TARGET_DIR=$dir/libpathrs-target cargo build --quiet --release --locked \
    --manifest-path "$libpathrs/Cargo.toml" || fail "cargo build of $libpathrs failed (see above)"
  crate=$(cargo metadata --format-version 1 --locked --manifest-path "$libpathrs/Cargo.toml" |
    python3 -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "pathrs"))') ||
    fail "cargo metadata names no pathrs package in $libpathrs"
  pathrs_version=$(sed -n 's/.*"=\([0-9.]*\)".*/\1/p' "$libpathrs/Cargo.toml")
  mkdir -p "$dir/libpathrs/lib/pkgconfig" "$dir/libpathrs/include"
  cp "$dir/libpathrs-target/release/libpathrs.a" "$dir/libpathrs/lib/"
  cp "$(dirname "$crate")/include/pathrs.h" "$dir/libpathrs/include/"
  # What a Rust static archive needs of the system at link time besides libc.
  printf '%s\n' "Name: pathrs" "Description: libpathrs, static" "Version: $pathrs_version" \
    "Cflags: -I$dir/libpathrs/include" "Libs: -L$dir/libpathrs/lib -lpathrs -ldl -lpthread -lgcc_s" \
    >"$dir/libpathrs/lib/pkgconfig/pathrs.pc"
  export PKG_CONFIG_PATH=$dir/libpathrs/lib/pkgconfig
fi
if [ "${1:-}" = --refresh-sum ]; then
  (cd "$module" && GOFLAGS=-mod=mod go build -tags "$tags" -o /dev/null github.com/opencontainers/runc) ||
    fail "go build of runc v$version to refresh $module/go.sum failed (see above)"
  echo "runc-build: wrote $module/go.sum" >&2
  exit 0
fi
cp "$module/go.mod" "$module/go.sum" "$dir/module/"
echo "runc-build: building runc $version with $(go env GOVERSION) (a minute or two the first time)" >&2
(
  cd "$dir/module"
  GOFLAGS=-mod=readonly go build -trimpath -buildmode=pie -tags "$tags" -o "$runc.tmp" \
    github.com/opencontainers/runc
) || fail "go build of github.com/opencontainers/runc v$version failed (see above; a checksum mismatch means a module differs from $module/go.sum)"
# runc 1.4 embeds its VERSION file (main.go: `//go:embed VERSION`), which its Makefile no longer
# overrides with -X: the version printed is the module's own, checked here.
said=$("$runc.tmp" --version) || fail "the built $runc.tmp does not run: $said"
grep -qx "runc version $version" <<<"$said" || fail "the built runc says $(head -n1 <<<"$said"), not runc version $version"
grep -q '^libseccomp: ' <<<"$said" || fail "the built runc has no seccomp support: $(tr '\n' ' ' <<<"$said")"
if [ -d "$libpathrs" ]; then
  grep -qx "libpathrs: $pathrs_version" <<<"$said" || fail "the built runc has no libpathrs $pathrs_version: $(tr '\n' ' ' <<<"$said")"
fi
mv "$runc.tmp" "$runc"
echo "$stamp" >"$dir/inputs.sha256"
echo "$runc"
