#!/usr/bin/env bash
# Installs the host packages devinject's demo and tests use, only those missing.
# Usage: scripts/install-deps.sh [demo|test]   (default: test; the benchmark needs the test set)
set -euo pipefail
# DEVINJECT_DEMO_DEPS replaces the demo's list (scripts/fresh-root-test.sh drops a package with it
# to prove that its test fails without it).
# shellcheck disable=SC2206 # a list of package names
want=(${DEVINJECT_DEMO_DEPS:-runc busybox-static gcc e2fsprogs})
if [ "${1:-test}" = test ]; then
  # libc6-dev: headers and the static libc for the hostile tests' C helpers (tests/src/cprog.rs)
  # python3-venv: for the manifest check's kubernetes-validate (below). Its kustomize render
  # needs kubectl >= 1.24 (kustomize v4+), which Debian 12 does not package (its
  # kubernetes-client is 1.20); without one the check validates the files only and says so.
  # golang-go, openssl: the cluster tier's Kubernetes build (scripts/kube-build.sh) and certificates
  want+=(containerd docker.io crun protobuf-compiler iproute2 libc6-dev podman conmon python3-venv debootstrap
    golang-go openssl)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${missing[*]}; run as root (or apt-get install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python tools live in virtualenvs under target/, so the system Python stays untouched.
# venv DIR IMPORTS PACKAGE...: makes DIR with PACKAGEs unless python there can import IMPORTS.
venv() {
  local dir=$1 imports=$2
  shift 2
  if ! "$dir/bin/python" -c "import $imports" 2>/dev/null; then
    echo "install-deps: installing $* into $dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}

if [ "${1:-test}" = test ]; then
  target=$(cd "$(dirname "$0")/.." && pwd)/target
  # The manifest check (scripts/check-manifests.py) validates deploy/ against the Kubernetes
  # OpenAPI schemas with kubernetes-validate, which ships them (no network needed at check time).
  venv "${DEVINJECT_PY_VENV:-$target/manifest-venv}" 'kubernetes_validate, yaml' \
    'kubernetes-validate==1.37.0' 'PyYAML>=6'
  # A real gRPC client that is not built on our HTTP/2 stack, for the device plugin's interop
  # test (tests/tests/device_plugin_real_clients.rs): Python grpcio (gRPC C-core) sends the
  # socket path as the HTTP/2 :authority, as kubelets before 1.26 do.
  venv "${DEVINJECT_GRPC_VENV:-$target/grpc-venv}" 'grpc, grpc_tools' \
    'grpcio==1.66.2' 'grpcio-tools==1.66.2'
fi
