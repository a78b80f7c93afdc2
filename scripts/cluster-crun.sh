#!/usr/bin/env bash
# The CRI-O cluster tests on crun in place of runc: CRI-O's default runtime where distributions
# ship it, and the one whose idmapped mounts (crun 1.9 and later) user-namespaced pods need.
# Debian 12's crun (1.8.1) has none, so crun 1.21 is built from Debian 13's source package
# (scripts/crun-build.sh, under a minute the first time). Runs the files marked `crun` in
# tests/tiers.txt `crun_all` on Kubernetes 1.37 and CRI-O 1.36: every CRI-O path on crun, where
# scripts/test.sh runs the core marked `crun` after the cluster tier. Needs root, like the
# tier. Extra arguments go to cargo test (e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
scripts/install-deps.sh test
DEVINJECT_CRUN=$(scripts/crun-build.sh)
DEVINJECT_KUBE_BIN=$(scripts/kube-module-build.sh)
DEVINJECT_RUNC=$(scripts/runc-build.sh)
DEVINJECT_CRIO_BIN=$(scripts/crio-build.sh)
DEVINJECT_CNI_BIN=$(scripts/cni-build.sh)
DEVINJECT_RUNTIMES=$(scripts/runtimes-fetch.sh)
DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh)
export DEVINJECT_CRUN DEVINJECT_KUBE_BIN DEVINJECT_RUNC DEVINJECT_CRIO_BIN DEVINJECT_CNI_BIN \
  DEVINJECT_RUNTIMES DEVINJECT_VENDOR_STACKS
# shellcheck source=scripts/lib/tiers.sh
. scripts/lib/tiers.sh
check_tiers
mapfile -t files < <(tier crun_all | sed 's/ /\//; s/ /=/')
echo "cluster-crun: ${files[*]} on $("$DEVINJECT_CRUN" --version | sed -n 1p) and $("$DEVINJECT_KUBE_BIN/kubelet" --version)"
cargo build --workspace --bins --quiet
tier_test crun_all "$@"
