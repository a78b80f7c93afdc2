#!/usr/bin/env bash
# The engine-path cluster tests on a containerd built from its Go module in place of CI's
# containerd 2.1 (Debian's): by default 2.3, containerd's long-term release, as scripts/test.sh
# runs them after the cluster tier; with `--release 2.4`, the newest release (not in CI). CDI
# through the CRI and NRI on it, and there `devinject-nri` serving user-namespaced pods
# (`hostUsers: false`), root and non-root (NRI applies device cgroup rules given without nodes
# from containerd 2.2 on), where containerd 2.1 is refused them by the plugin, naming the way out
# (docs/nri.md). Debian packages no containerd newer than 2.1 (scripts/containerd-build.sh,
# about 2 minutes of 2 cores the first time). Runs the files marked `containerd23` in
# tests/tiers.txt on Kubernetes 1.37 and runc 1.4, with the built containerd in place of the
# fetched containerd 2 (the other fetched releases as they are).
# Needs root, like the tier. Extra arguments go to cargo test (e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
scripts/install-deps.sh test
release=()
if [ "${1:-}" = --release ]; then
  release=(--release "${2:?usage: scripts/cluster-containerd.sh [--release 2.4] [cargo test arguments]}")
  shift 2
fi
containerd=$(scripts/containerd-build.sh "${release[@]}")
fetched=$(scripts/runtimes-fetch.sh)
DEVINJECT_KUBE_BIN=$(scripts/kube-module-build.sh)
DEVINJECT_RUNC=$(scripts/runc-build.sh)
DEVINJECT_CNI_BIN=$(scripts/cni-build.sh)
DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh)
# The fetched releases, containerd 2 replaced by the built one.
# shellcheck source=scripts/lib/runtimes-with.sh
. scripts/lib/runtimes-with.sh
DEVINJECT_RUNTIMES=$(runtimes_with_containerd "$fetched" "$containerd" "$PWD/target/runtimes-containerd-built")
export DEVINJECT_KUBE_BIN DEVINJECT_RUNC DEVINJECT_CNI_BIN DEVINJECT_RUNTIMES DEVINJECT_VENDOR_STACKS
# shellcheck source=scripts/lib/tiers.sh
. scripts/lib/tiers.sh
check_tiers
mapfile -t files < <(tier containerd23 | sed 's/ /\//; s/ /=/')
echo "cluster-containerd: ${files[*]} on $("$containerd/bin/containerd" --version) and $("$DEVINJECT_KUBE_BIN/kubelet" --version)"
cargo build --workspace --bins --quiet
tier_test containerd23 "$@"
