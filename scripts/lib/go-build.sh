# shellcheck shell=bash
# What the scripts that build a pinned component from its Go modules (runc-build.sh,
# kube-module-build.sh, crio-build.sh, nvidia-toolkit-build.sh) check before a build. Each function calls the script's own
# `fail` with the reason and the fix.

# go_at_least VERSION: the `go` first on PATH is VERSION or newer (what a go.mod's `go` line asks;
# the scripts run with GOTOOLCHAIN=local, so go never fetches another toolchain).
go_at_least() {
  local need=$1 have
  command -v go >/dev/null || fail "needs Go >= $need on PATH (https://go.dev/dl)"
  have=$(go env GOVERSION | sed 's/^go//')
  [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" = "$need" ] ||
    fail "needs Go >= $need, found $(command -v go) at $have (put a newer Go first on PATH)"
}

# pinned_module NAME BASE [--release R ...]: prints the module dir that pins the build of
# scripts/NAME.sh: BASE, or BASE-R with `--release R`, a release pinned beside the default (it
# must have a go.mod). The caller then drops those two arguments.
pinned_module() {
  local name=$1 base=$2 module
  if [ "${3:-}" != --release ]; then
    echo "$base"
    return
  fi
  module=$base-${4:?usage: scripts/$name.sh [--release R] [--if-built|--refresh-sum]}
  [ -f "$module/go.mod" ] || { echo "$name: no $module/go.mod: release $4 is not pinned" >&2; return 1; }
  echo "$module"
}

# go_at_least_for MODULE: the `go` first on PATH is what MODULE's go.mod asks for, or newer (the
# pinning modules copy the `go` line of what they build).
go_at_least_for() {
  go_at_least "$(sed -n 's/^go //p' "$1/go.mod")"
}

# libseccomp_headers: cgo can build against libseccomp (runc's and CRI-O's `seccomp` tag).
libseccomp_headers() {
  pkg-config --exists libseccomp 2>/dev/null ||
    fail "needs libseccomp's headers and pkg-config (apt-get install libseccomp-dev pkg-config; scripts/install-deps.sh test)"
}

# The steps of a build pinned by a go.mod and go.sum of its own (cni-build.sh,
# containerd-build.sh, helm-build.sh), with the caller's `fail`:
#
#   go_pinned_begin NAME MODULE_DIR SCRIPT [--refresh-sum|--if-built] -- GO_LIST_ARGS...
#
# With --refresh-sum it writes MODULE_DIR/go.sum from what the proxy serves for the packages
# (`go list -deps GO_LIST_ARGS`) and exits. It sets `stamp` (the inputs' checksum: go.mod,
# go.sum and SCRIPT). The caller then asks `go_pinned_current BINARIES...` whether DIR holds
# these binaries built from these inputs; before building, `go_pinned_stage` copies the module
# files into DIR/module (with DIR/module/out for the binaries), `go_pinned_build` builds there,
# and after, `go_pinned_done DIR` records the stamp.
go_pinned_begin() {
  local name=$1 module=$2 script=$3 mode=$4
  shift 4
  [ "${1:-}" = -- ] && shift
  export GOTOOLCHAIN=local GOWORK=off
  if [ "$mode" = --refresh-sum ]; then
    (cd "$module" && GOFLAGS=-mod=mod go list -deps "$@" >/dev/null) ||
      fail "go list of the packages to build failed (see above)"
    echo "$name: wrote $module/go.sum" >&2
    exit 0
  fi
  stamp=$(cat "$module/go.mod" "$module/go.sum" "$script" | sha256sum)
}

# go_pinned_current DIR BINARIES...: every binary is there, built from the inputs of `stamp`.
go_pinned_current() {
  local dir=$1 b
  shift
  for b in "$@"; do [ -x "$b" ] || return 1; done
  [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]
}

# go_pinned_stage DIR MODULE_DIR: a fresh DIR/module with the pinned go.mod and go.sum.
go_pinned_stage() {
  rm -rf "$1/module" && mkdir -p "$1/module/out"
  cp "$2/go.mod" "$2/go.sum" "$1/module/"
}

# go_pinned_done DIR: records that DIR holds the build of `stamp`'s inputs.
go_pinned_done() {
  echo "$stamp" >"$1/inputs.sha256"
}

# go_pinned_build DIR WHAT GO_BUILD_ARGS...: `go build -trimpath GO_BUILD_ARGS` in DIR/module,
# static (CGO off) and from the pinned modules only (-mod=readonly: a module whose content
# differs from go.sum fails the build); a failure names WHAT.
go_pinned_build() {
  local dir=$1 what=$2
  shift 2
  (cd "$dir/module" && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -trimpath "$@") ||
    fail "go build of $what failed (see above; a checksum mismatch means a module differs from its go.sum)"
}
