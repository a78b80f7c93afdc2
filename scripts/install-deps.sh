#!/usr/bin/env bash
# Installs the host packages devinject's demo and tests use, only those missing.
# Usage: scripts/install-deps.sh [demo|test]   (default: test)
set -euo pipefail
want=(runc busybox-static gcc)
if [ "${1:-test}" = test ]; then
  # libc6-dev: headers and the static libc for the hostile tests' C helpers (tests/src/cprog.rs)
  want+=(containerd docker.io crun protobuf-compiler iproute2 libc6-dev podman conmon)
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
