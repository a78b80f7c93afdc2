#!/usr/bin/env bash
# The whole test suite: lints, docs, unit tests and the integration tests against real runc,
# docker and containerd. Needs root for the runtime tests; under CI=true nothing may skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# Which test file runs in which pass (tests/tiers.txt): tier and check_tiers.
# shellcheck source=scripts/lib/tiers.sh
. scripts/lib/tiers.sh
check_tiers || exit 1
# A cold run writes about 25 GB: target/ (debug and release builds, the image, runtimes) and the
# Go and cargo caches (Kubernetes, CRI-O, runc). Said up front, not found at a full disk later.
free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${free_gb:-0}" -lt 30 ]; then
  echo "test.sh: warning: $free_gb GB free on $(df -P . | awk 'NR == 2 { print $6 }'); a cold run needs about 25 GB: free some space first" >&2
fi
scripts/install-deps.sh test
# What the arm64 guest needs (the cross compiler, qemu), before the guest builds in the background.
scripts/install-deps.sh cross
ci=false
if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then ci=true; fi
cluster=$ci
[ "${DEVINJECT_CLUSTER:-}" = 1 ] && cluster=true
# The stack of today, built from Go modules into caches outside the tree, in the background at
# the lowest priority while the lints, the build and every other test run (about 15 minutes of 2
# cores the first time, then nothing); what needs them waits at the end:
# - CRI-O 1.36 with crictl and the CNI loopback plugin (scripts/crio-build.sh), for
#   tests/crio_cri.rs: always;
# - Kubernetes 1.37 and etcd 3.6 (scripts/kube-module-build.sh) for the cluster tier
#   (docs/testing.md, "The cluster tier"): where the cluster tier runs;
today_log=$PWD/target/today-build.log
mkdir -p target
# Its own session, so that an early exit ends the whole build (go and its compilers) with it.
setsid nice -n 19 bash -c "scripts/crio-build.sh >'$today_log.crio' && \
  if $cluster; then scripts/kube-module-build.sh >'$today_log.kube' && scripts/cni-build.sh >'$today_log.cni'; fi" \
  2>"$today_log" &
today_build=$!
# helm (scripts/helm-build.sh; about two minutes of 2 cores the first time, then cached), for the
# chart's checks in the unit tests (bins/installer/tests/manifests.rs) and the cluster tier's
# helm install (tests/tests/cluster_helm.rs): built beside the lints, waited for before the tests.
setsid nice -n 10 scripts/helm-build.sh >"$today_log.helm" 2>"$today_log.helm-err" &
helm_build=$!
# The image's binaries, in the background from the start, at the lowest priority, in this order:
# - the release binaries of this machine (scripts/build-image.sh with ONLY_BUILD=1; about two
#   minutes of 2 cores cold), which the installer's image test, the cluster tier's image and the
#   multi-arch image's amd64 half take: what idle time the lints and tests leave builds them
#   before the first of those would compile them in the foreground;
# - the arm64 guest (scripts/arm64-guest.sh build: Debian 12's arm64 kernel, runc, busybox and
#   glibc, pinned and unpacked into a cache outside the tree, and the hook and the shim
#   cross-built for aarch64 in the dev profile, into target/image-aarch64);
# - every shipped binary for aarch64 in the same dev build, the multi-arch image's arm64 half.
# The arm64 tier (the files marked arm64 in tests/tiers.txt) boots the guest and pulls the
# multi-arch image, assembled from both halves, at the end.
arm64_log=$today_log.arm64
# shellcheck source=scripts/lib/shipped.sh
. scripts/lib/shipped.sh
setsid nice -n 19 bash -c "{ ONLY_BUILD=1 scripts/build-image.sh >'$today_log.image' 2>&1 || true; } && \
  scripts/arm64-guest.sh build >'$arm64_log' && \
  PROFILE=dev ARCH=aarch64 TARGET_DIR=target/image-aarch64 scripts/release-build.sh target/image-aarch64/bin \
  ${packages[*]} >/dev/null" 2>"$arm64_log.err" &
arm64_build=$!
trap 'kill -- -"$today_build" -"$helm_build" -"$arm64_build" 2>/dev/null || true' EXIT
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
cargo build --workspace --bins --quiet
# The README's commands on a fresh Debian root (scripts/fresh-root-test.sh): under CI always;
# locally only with DEVINJECT_FRESH_ROOT=1 (it takes minutes the first time, and the network).
if $ci || [ "${DEVINJECT_FRESH_ROOT:-}" = 1 ]; then
  scripts/fresh-root-test.sh
else
  echo "test.sh: SKIPPED the fresh-root test (runs under CI=true, or with DEVINJECT_FRESH_ROOT=1)"
fi
# The compatibility release of the cluster tier, Kubernetes v1.20.2 (what old kubelets do
# differently: the socket path as `:authority`, `List` without `Get`), built from Debian's
# source package into a cache outside the tree (scripts/kube-build.sh; about seven minutes of 2
# cores the first time, all of it before the first test): only with DEVINJECT_KUBE_COMPAT=1.
# CI leaves it out to stay within its time; what it proved is kept by the real old gRPC
# clients of tests/device_plugin_real_clients.rs (the dialing) and by the pod-resources tests
# with `Get` switched off (`List`). See docs/testing.md.
compat_tier=()
if [ "${DEVINJECT_KUBE_COMPAT:-}" = 1 ]; then
  DEVINJECT_KUBE_BIN=$(scripts/kube-build.sh)
  export DEVINJECT_KUBE_BIN
  mapfile -t compat_tier < <(tier compat)
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
# Vendors' user-space driver stacks (Debian 12's NVIDIA 535, ROCm 5.2, Intel compute runtime),
# pinned by scripts/vendor-stacks/packages.lock and unpacked into driver roots in a cache outside
# the tree (scripts/vendor-stacks-fetch.sh; a minute the first time): always.
DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh)
export DEVINJECT_VENDOR_STACKS
# NVIDIA's Container Toolkit 1.20.2 (nvidia-container-runtime, nvidia-ctk, nvidia-cdi-hook), the
# reference tests/vendor_nvidia_toolkit.rs compares the hook and the shim against on the same
# driver root, built from its Go module into a cache outside the tree
# (scripts/nvidia-toolkit-build.sh; about 45 s of 2 cores the first time, then cached): always.
DEVINJECT_NVIDIA_TOOLKIT=$(scripts/nvidia-toolkit-build.sh)
export DEVINJECT_NVIDIA_TOOLKIT
# Every skip is put on the record here (tests/testkit/); under CI=true a skip is a failure.
export DEVINJECT_SKIP_LOG="$PWD/target/skipped-tests.txt"
rm -f "$DEVINJECT_SKIP_LOG"
status=0
if wait "$helm_build"; then
  DEVINJECT_HELM=$(cat "$today_log.helm")/helm
  export DEVINJECT_HELM
else
  echo "test.sh: building helm failed (scripts/helm-build.sh):" >&2
  tail -n 40 "$today_log.helm-err" >&2
  status=1
fi
# The files marked suite in tests/tiers.txt, in name order (with DEVINJECT_KUBE_COMPAT=1 also
# those marked compat, on 1.20: the device plugin as an old kubelet dials and lists it); CRI-O
# and the whole cluster tier on today's release run below.
mapfile -t suite < <(tier suite | sort)
cargo test --workspace --exclude devinject-tests --no-fail-fast || status=$?
cargo test -p devinject-tests --no-fail-fast --lib --bins "${suite[@]/#/--test=}" \
  "${compat_tier[@]/#/--test=}" || status=$?
# The runc tier (the files marked runc14 in tests/tiers.txt) again on runc 1.4 (docs/testing.md,
# "runc 1.4"), built from its Go module into a cache outside the tree (scripts/runc-build.sh;
# about two minutes the first time on 2 cores): under CI always; locally once
# scripts/runc-build.sh has built it. The docker case of the hostile matrix is left to the docker
# tier.
mapfile -t runc_tier < <(tier runc14)
if $ci || $cluster; then
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
# CRI-O 1.36 on runc 1.4 (the files marked crio in tests/tiers.txt), and the whole cluster tier
# (marked cluster) on Kubernetes 1.37, its nodes on containerd 2 and runc 1.4
# (tests/src/cluster/kubernetes.rs), once the background build is done.
mapfile -t crio_tier < <(tier crio)
mapfile -t cluster_tier < <(tier cluster)
if wait "$today_build"; then
  crio_bin=$(cat "$today_log.crio")
  echo "test.sh: CRI-O on $("$crio_bin/crio" --version | sed -n 1p) and ${runc14:-runc}"
  DEVINJECT_CRIO_BIN=$crio_bin DEVINJECT_RUNC=${runc14:-} cargo test -p devinject-tests --no-fail-fast \
    "${crio_tier[@]/#/--test=}" || status=$?
  if $cluster; then
    kube137=$(cat "$today_log.kube")
    DEVINJECT_CNI_BIN=$(cat "$today_log.cni")
    export DEVINJECT_CNI_BIN
    echo "test.sh: the cluster tier on $("$kube137/kubelet" --version) and $("$runc14" --version | sed -n 1p)"
    DEVINJECT_KUBE_BIN=$kube137 DEVINJECT_RUNC=$runc14 DEVINJECT_CRIO_BIN=$crio_bin cargo test -p devinject-tests --no-fail-fast \
      "${cluster_tier[@]/#/--test=}" || status=$?
  else
    echo "test.sh: SKIPPED the cluster tier on Kubernetes 1.37 (runs under CI=true, or with DEVINJECT_CLUSTER=1)"
  fi
else
  echo "test.sh: building the stack of today failed (scripts/crio-build.sh, scripts/kube-module-build.sh):" >&2
  tail -n 40 "$today_log" >&2
  status=1
fi
# The arm64 tier: the guest's kernel under qemu-system-aarch64 (about 20 s here), and the
# multi-arch image through a registry (pulled by docker, containerd and CRI-O): the release
# binaries of this machine and the dev build for aarch64, both built above.
mapfile -t arm64_tier < <(tier arm64)
if wait "$arm64_build" &&
  multiarch=$(NO_BUILD=1 PLATFORMS=linux/amd64,linux/arm64 scripts/build-image.sh 2>>"$arm64_log.err"); then
  DEVINJECT_ARM64_GUEST=$(cat "$arm64_log") DEVINJECT_MULTIARCH_IMAGE=$PWD/$multiarch \
    DEVINJECT_CRIO_BIN=${crio_bin:-} DEVINJECT_RUNC=${runc14:-} cargo test -p devinject-tests --no-fail-fast "${arm64_tier[@]/#/--test=}" || status=$?
else
  echo "test.sh: building the arm64 guest or the multi-arch image failed (scripts/arm64-guest.sh build, scripts/build-image.sh):" >&2
  tail -n 40 "$arm64_log.err" >&2
  status=1
fi
if [ -s "$DEVINJECT_SKIP_LOG" ]; then
  echo "test.sh: $(wc -l <"$DEVINJECT_SKIP_LOG") tests skipped (they passed without running):"
  sort "$DEVINJECT_SKIP_LOG"
else
  echo "test.sh: no test skipped"
fi
exit "$status"
