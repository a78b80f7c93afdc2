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

# libseccomp_headers: cgo can build against libseccomp (runc's and CRI-O's `seccomp` tag).
libseccomp_headers() {
  pkg-config --exists libseccomp 2>/dev/null ||
    fail "needs libseccomp's headers and pkg-config (apt-get install libseccomp-dev pkg-config; scripts/install-deps.sh test)"
}
