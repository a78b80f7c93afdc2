#!/usr/bin/env bash
# The whole test suite: lints, docs, unit tests and the integration tests against real runc,
# docker and containerd. Needs root for the runtime tests; under CI=true nothing may skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
cargo build --workspace --bins --quiet
# The README's commands on a fresh Debian root (scripts/fresh-root-test.sh): under CI always;
# locally only with DEVINJECT_FRESH_ROOT=1 (it takes minutes the first time, and the network).
if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ] || [ "${DEVINJECT_FRESH_ROOT:-}" = 1 ]; then
  scripts/fresh-root-test.sh
else
  echo "test.sh: SKIPPED the fresh-root test (runs under CI=true, or with DEVINJECT_FRESH_ROOT=1)"
fi
# The cluster tier's Kubernetes v1.20.2 (tests/cluster.rs), built once from Debian's source package
# into a cache outside the tree (scripts/kube-build.sh; minutes the first time): under CI always;
# locally only with DEVINJECT_CLUSTER=1, else the cluster tests skip and say so.
if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ] || [ "${DEVINJECT_CLUSTER:-}" = 1 ]; then
  DEVINJECT_KUBE_BIN=$(scripts/kube-build.sh)
  export DEVINJECT_KUBE_BIN
fi
# The newer containerd releases (1.7 and 2.x, tests/containerd_cdi.rs), unpacked from Debian 13's
# and unstable's packages into target/runtimes (scripts/runtimes-fetch.sh; seconds): always.
DEVINJECT_RUNTIMES=$(scripts/runtimes-fetch.sh)
export DEVINJECT_RUNTIMES
# The grpc-go client (>= 1.52) of tests/device_plugin_real_clients.rs, built with Debian 13's Go
# and grpc-go, unpacked into target/grpc-go (scripts/grpc-go-client.sh; a minute the first time,
# then cached): always.
DEVINJECT_GRPC_GO_CLIENT=$(scripts/grpc-go-client.sh)
export DEVINJECT_GRPC_GO_CLIENT
# Every skip is put on the record here (testkit/); under CI=true a skip is a failure.
export DEVINJECT_SKIP_LOG="$PWD/target/skipped-tests.txt"
rm -f "$DEVINJECT_SKIP_LOG"
status=0
cargo test --workspace --no-fail-fast || status=$?
# The runc tier again on runc 1.4 (docs/testing.md, "runc 1.4"), built from its Go module into a
# cache outside the tree (scripts/runc-build.sh; about two minutes the first time on 2 cores):
# under CI always; locally once scripts/runc-build.sh has built it. The docker case of the hostile
# matrix is left to the docker tier.
runc_tier=(runc_hook runc_shim runc_non_root runc_cgroup_v2 runc_prepare library_names hostile_rootfs docker_28
  hostile_matrix hostile_filesystems hostile_node_group)
if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then
  runc14=$(scripts/runc-build.sh)
else
  runc14=$(scripts/runc-build.sh --if-built) ||
    echo "test.sh: SKIPPED the runc tier on runc 1.4 (runs under CI=true, or after scripts/runc-build.sh)"
fi
if [ -n "${runc14:-}" ]; then
  echo "test.sh: the runc tier again on $("$runc14" --version | sed -n 1p) ($runc14)"
  DEVINJECT_RUNC=$runc14 cargo test -p devinject-tests --no-fail-fast "${runc_tier[@]/#/--test=}" \
    -- --skip docker_matrix_with_the_shim || status=$?
fi
if [ -s "$DEVINJECT_SKIP_LOG" ]; then
  echo "test.sh: $(wc -l <"$DEVINJECT_SKIP_LOG") tests skipped (they passed without running):"
  sort "$DEVINJECT_SKIP_LOG"
else
  echo "test.sh: no test skipped"
fi
exit "$status"
