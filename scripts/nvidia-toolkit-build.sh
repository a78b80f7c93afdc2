#!/usr/bin/env bash
# Builds NVIDIA's Container Toolkit, the reference devinject is compared against (its OCI runtime
# shim, CDI generator and hooks): nvidia-container-runtime, nvidia-ctk, nvidia-cdi-hook and
# nvidia-container-runtime-hook from the Go module github.com/NVIDIA/nvidia-container-toolkit, as
# the toolkit's own Makefile builds its `cmd-%` targets: cgo (go-nvml and the toolkit's dxcore and
# cuda packages dlopen the driver's libraries, so the build needs gcc but no NVIDIA library or
# header), the Makefile's -extldflags that leave those symbols to be resolved at dlopen time, and
# the version set with -X .../internal/info.version (the module zip carries no VERSION file). No
# Debian 12 suite packages the toolkit.
#
# Pinned by version and checksum: scripts/nvidia-toolkit-build/go.mod requires the version, its
# go.sum holds the h1: checksum of the toolkit's module and of every module the four commands are
# built from, and the build runs with GOFLAGS=-mod=readonly, so a module whose content differs
# from go.sum fails the build. The modules come through Go's module proxy into Go's module cache.
# The binaries land outside the tree and are reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/nvidia-container-toolkit-<version>/bin/
#     {nvidia-container-runtime,nvidia-ctk,nvidia-cdi-hook,nvidia-container-runtime-hook}
#
# Rebuilt only when go.mod, go.sum or this script change. Prints the bin dir. With --if-built it
# builds nothing: it prints the dir when the binaries are up to date, and fails otherwise. With
# --refresh-sum it writes go.sum from what the proxy serves (after a version change).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.20.2
module=scripts/nvidia-toolkit-build
dir=${XDG_CACHE_HOME:-$HOME/.cache}/devinject/nvidia-container-toolkit-$version
bin=$dir/bin
pkg=github.com/NVIDIA/nvidia-container-toolkit
# command name, then the first line its --version prints.
cmds=(
  "nvidia-container-runtime:NVIDIA Container Runtime version $version"
  "nvidia-ctk:NVIDIA Container Toolkit CLI version $version"
  "nvidia-cdi-hook:NVIDIA CDI Hook version $version"
  "nvidia-container-runtime-hook:NVIDIA Container Runtime Hook version $version"
)
fail() { echo "nvidia-toolkit-build: $*" >&2; exit 1; }

grep -qx "require $pkg v$version" "$module/go.mod" ||
  fail "$module/go.mod does not require $pkg v$version (change both together)"

export GOTOOLCHAIN=local GOWORK=off
pkgs=()
for c in "${cmds[@]}"; do pkgs+=("$pkg/cmd/${c%%:*}"); done
if [ "${1:-}" = --refresh-sum ]; then
  (cd "$module" && GOFLAGS=-mod=mod go list -deps "${pkgs[@]}" >/dev/null) ||
    fail "go list of the toolkit's commands failed (see above)"
  echo "nvidia-toolkit-build: wrote $module/go.sum" >&2
  exit 0
fi

stamp=$(cat "$module/go.mod" "$module/go.sum" scripts/nvidia-toolkit-build.sh | sha256sum)
complete() {
  for c in "${cmds[@]}"; do [ -x "$bin/${c%%:*}" ] || return 1; done
  [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]
}
if complete; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1

# The Go the toolkit's go.mod asks for (`go 1.26.0`). GOTOOLCHAIN=local keeps go from fetching
# another toolchain.
# shellcheck source=scripts/lib/go-build.sh
. scripts/lib/go-build.sh
go_at_least 1.26.0
command -v gcc >/dev/null || fail "needs gcc for cgo (go-nvml) (apt-get install gcc)"

rm -rf "$dir/module" && mkdir -p "$bin" "$dir/module"
cp "$module/go.mod" "$module/go.sum" "$dir/module/"
echo "nvidia-toolkit-build: building the NVIDIA Container Toolkit $version with $(go env GOVERSION)" \
  "(a minute the first time)" >&2
(
  cd "$dir/module"
  export GOFLAGS=-mod=readonly CGO_ENABLED=1
  # go-nvml's nvml.h marks functions it still wraps as deprecated: quiet those warnings only.
  export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
  mkdir -p "$dir/module/out"
  go build -trimpath -o "$dir/module/out/" -ldflags "-s -w \
    '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy' \
    -X $pkg/internal/info.version=$version" "${pkgs[@]}"
) || fail "go build of $pkg v$version failed (see above; a checksum mismatch means a module differs from $module/go.sum)"

for c in "${cmds[@]}"; do
  name=${c%%:*} want=${c#*:}
  # nvidia-container-runtime --version goes on to load its config and run the low-level runtime's
  # --version: point it at a config file that does not exist (its defaults) and read line 1 only.
  said=$(NVIDIA_CTK_CONFIG_FILE_PATH="$dir/no-config.toml" "$dir/module/out/$name" --version \
    </dev/null 2>&1 | sed -n 1p) || true
  [ "$said" = "$want" ] || fail "the built $name says '$said', not '$want'"
done
for c in "${cmds[@]}"; do mv "$dir/module/out/${c%%:*}" "$bin/${c%%:*}"; done
echo "$stamp" >"$dir/inputs.sha256"
echo "$bin"
