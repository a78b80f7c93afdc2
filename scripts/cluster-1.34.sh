#!/usr/bin/env bash
# The DRA tests on Kubernetes 1.34, the oldest release serving resource.k8s.io/v1 (DRA's GA
# API), so that the driver and the manifests are proven at both ends of what docs/install.md
# claims; CI runs the whole tier on the newest release only (docs/testing.md, "The cluster
# tier"). Builds 1.34 the first time (scripts/kube-module-build.sh --release 1.34, about 15
# minutes of 2 cores), then runs the files marked `dra` in tests/tiers.txt on it, each node on
# containerd 2 and runc 1.4 as in CI. Needs root, like the tier. Extra arguments go to cargo test
# (e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
scripts/install-deps.sh test
DEVINJECT_KUBE_BIN=$(scripts/kube-module-build.sh --release 1.34)
DEVINJECT_RUNC=$(scripts/runc-build.sh)
DEVINJECT_CRIO_BIN=$(scripts/crio-build.sh)
DEVINJECT_RUNTIMES=$(scripts/runtimes-fetch.sh)
DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh)
# The user-namespaced pods run off the host network, on CNI's plugins.
DEVINJECT_CNI_BIN=$(scripts/cni-build.sh)
export DEVINJECT_KUBE_BIN DEVINJECT_RUNC DEVINJECT_CRIO_BIN DEVINJECT_RUNTIMES DEVINJECT_VENDOR_STACKS DEVINJECT_CNI_BIN
# shellcheck source=scripts/lib/tiers.sh
. scripts/lib/tiers.sh
check_tiers
mapfile -t files < <(tier dra | sed 's/ /\//; s/ /=/')
echo "cluster-1.34: ${files[*]} on $("$DEVINJECT_KUBE_BIN/kubelet" --version)"
cargo build --workspace --bins --quiet
tier_test dra "$@"
