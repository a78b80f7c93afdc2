#!/usr/bin/env bash
# The whole test suite: lints, docs, unit tests and the integration tests against real runc,
# docker and containerd. Needs root for the runtime tests; under CI=true nothing may skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# The run in a mount namespace of its own, for the tests' tmpfs below.
# shellcheck source=scripts/lib/tests-tmpfs.sh
. scripts/lib/tests-tmpfs.sh
tests_namespace "$PWD/scripts/test.sh" "$@"
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
# What is built or fetched for the tests runs in the background from the start
# (scripts/lib/background.sh), each job waited for before the first test that needs it. The
# tests run at the normal priority; a job at nice 10 takes a tenth of the CPU they keep busy and
# all they leave idle; the jobs needed last (the arm64 tier, the fresh root) run at 19 on what is
# idle, most of it during the cluster tier, whose pods mostly wait.
# shellcheck source=scripts/lib/background.sh
. scripts/lib/background.sh
# shellcheck source=scripts/lib/runtimes-with.sh
. scripts/lib/runtimes-with.sh
logs=$PWD/target/background
mkdir -p "$logs"
BACKGROUND_COSTS=$logs/costs.tsv
BACKGROUND_STATUS=$logs/status
rm -rf "$BACKGROUND_COSTS" "$BACKGROUND_STATUS"
mkdir "$BACKGROUND_STATUS"
bg_jobs=()
trap 'end_background "${bg_jobs[@]}"; tests_tmpfs_end' EXIT
# The peers the suite runs beside (nice 5: mostly downloads, needed first, by the unit tests):
# - the newer containerd releases (1.7 and 2.x, tests/tests/suite/containerd_cdi.rs), unpacked from Debian
#   13's and unstable's packages into target/runtimes (scripts/runtimes-fetch.sh; seconds);
# - the grpc-go client (>= 1.52) of tests/tests/suite/device_plugin_real_clients.rs, built with Debian 13's
#   Go and grpc-go into target/grpc-go (scripts/grpc-go-client.sh; a minute the first time);
# - vendors' user-space driver stacks (Debian 12's NVIDIA 535, ROCm 5.2, Intel compute
#   runtime), pinned by scripts/vendor-stacks/packages.lock and unpacked into driver roots in a
#   cache outside the tree (scripts/vendor-stacks-fetch.sh; a minute the first time);
# - NVIDIA's Container Toolkit 1.20.2 (nvidia-container-runtime, nvidia-ctk, nvidia-cdi-hook),
#   the reference tests/tests/suite/vendor_nvidia_toolkit.rs compares the hook and the shim against on the
#   same driver root, built from its Go module into a cache outside the tree
#   (scripts/nvidia-toolkit-build.sh; about 45 s of 2 cores the first time).
peers=(runtimes-fetch grpc-go-client vendor-stacks-fetch nvidia-toolkit-build)
background 5 /dev/null "$logs/peers.err" bash -c "for s in ${peers[*]}; do scripts/\$s.sh >'$logs/'\$s || exit; done"
peers_job=$!
bg_jobs+=("$peers_job")
# helm (scripts/helm-build.sh; about six minutes of CPU the first time, then cached), for the
# chart's checks (bins/installer/tests/installer/manifests.rs, after the runc passes) and the
# cluster tier's helm install (tests/tests/cluster/cluster_helm.rs).
background 10 "$logs/helm" "$logs/helm.err" scripts/helm-build.sh
helm_job=$!
bg_jobs+=("$helm_job")
# CRIU 4.2.1, for the runc tier's checkpoint test (Debian 12's 3.17 cannot dump on today's
# kernels: scripts/criu-build.sh, under a minute of 2 cores the first time).
background 10 "$logs/criu" "$logs/criu.err" scripts/criu-build.sh
criu_job=$!
bg_jobs+=("$criu_job")
# runc 1.4 for the CRI-O tier and the cluster tier, and runc 1.5 (with libpathrs) for the runc
# tier's second pass, built from their Go modules (scripts/runc-build.sh; about two minutes of 2
# cores each the first time): where those run.
if $ci || $cluster; then
  background 10 /dev/null "$logs/runc.err" bash -c "scripts/runc-build.sh >'$logs/runc' && \
    scripts/runc-build.sh --release 1.5 >'$logs/runc15'"
  runc_job=$!
  bg_jobs+=("$runc_job")
  # containerd 2.3, for the files marked containerd23 after the cluster tier (Debian packages
  # none: scripts/containerd-build.sh, about two minutes of 2 cores the first time), on what
  # the other jobs leave idle.
  background 19 "$logs/containerd" "$logs/containerd.err" scripts/containerd-build.sh
  containerd_job=$!
  bg_jobs+=("$containerd_job")
  # crun 1.21, for the files marked crun after the cluster tier (Debian 12's 1.8.1 serves no
  # user-namespaced pod: scripts/crun-build.sh, under a minute of 2 cores the first time).
  background 19 "$logs/crun" "$logs/crun.err" scripts/crun-build.sh
  crun_job=$!
  bg_jobs+=("$crun_job")
fi
# The stack of today, built from Go modules into caches outside the tree (about 15 minutes of 2
# cores the first time, then nothing):
# - CRI-O 1.36 with crictl and the CNI loopback plugin (scripts/crio-build.sh), for
#   tests/tests/crio/crio_cri.rs: always;
# - Kubernetes 1.37 and etcd 3.6 (scripts/kube-module-build.sh) and the CNI plugins
#   (scripts/cni-build.sh) for the cluster tier (docs/testing.md, "The cluster tier"): where the
#   cluster tier runs.
background 10 /dev/null "$logs/today.err" bash -c "scripts/crio-build.sh >'$logs/crio' && \
  if $cluster; then scripts/kube-module-build.sh >'$logs/kube' && scripts/cni-build.sh >'$logs/cni'; fi"
today_job=$!
bg_jobs+=("$today_job")
# The image's binaries for this machine (scripts/build-image.sh with ONLY_BUILD=1), which the
# installer's image test, the cluster tier's image and the multi-arch image's amd64 half take, at
# nice 5 (the unit tests' image test waits for them). In the dev profile, as the arm64 half
# (DEVINJECT_IMAGE_PROFILE=release for the profile that ships): the same code, the tests prove
# what the image does, and the release profile's link-time optimisation, a matter of size and
# speed that scripts/bench.sh measures, takes several times the CPU (docs/testing.md, "How a run
# spends its time").
export PROFILE=${DEVINJECT_IMAGE_PROFILE:-dev}
background 5 "$logs/image" "$logs/image.err" env ONLY_BUILD=1 scripts/build-image.sh
image_job=$!
bg_jobs+=("$image_job")
# The arm64 tier's piece (the files marked arm64 in tests/tiers.txt), at nice 19: the arm64 guest
# (scripts/arm64-guest.sh build: Debian 12's arm64 kernel, runc, busybox and glibc, pinned and
# unpacked into a cache outside the tree, and the hook and the shim cross-built for aarch64 in
# the profile above). The arm64 tier boots the guest at the end. The multi-arch image, whose
# arm64 half is every shipped binary cross-built, is scripts/image-multiarch.sh's
# (docs/testing.md).
background 19 "$logs/arm64" "$logs/arm64.err" scripts/arm64-guest.sh build
arm64_job=$!
bg_jobs+=("$arm64_job")
# The README's commands on a fresh Debian root (scripts/fresh-root-test.sh), at nice 19: under CI
# always; locally only with DEVINJECT_FRESH_ROOT=1 (it takes minutes the first time, and the
# network). Waited for at the end.
fresh_root=false
if $ci || [ "${DEVINJECT_FRESH_ROOT:-}" = 1 ]; then
  fresh_root=true
  background 19 "$logs/fresh-root" "$logs/fresh-root" scripts/fresh-root-test.sh
  fresh_root_job=$!
  bg_jobs+=("$fresh_root_job")
fi
# The tests' temporary files on a tmpfs (scripts/lib/tests-tmpfs.sh: the disk's journal made
# each container's bundle dear), from here on: the background jobs keep the machine's /tmp (the
# fresh root's steps run where this one does not exist).
tests_tmpfs
# say WORDS...: a line of the run's log, with the minutes and seconds since the start.
say() { printf 'test.sh: [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
# wait_job NAME PID WHAT LOG...: waits for a background job; when it failed, says which script to
# run and the end of its logs, and the run fails.
status=0
wait_job() {
  local name=$1 pid=$2 what=$3 log
  shift 3
  say "waiting for $name"
  background_wait "$pid" && return 0
  say "$name failed ($what):" >&2
  for log in "$@"; do [ -s "$log" ] && tail -n 40 "$log" >&2; done
  status=1
  return 1
}
say "the lints, the docs and the build"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
cargo build --workspace --bins --quiet
# The compatibility release of the cluster tier, Kubernetes v1.20.2 (what old kubelets do
# differently: the socket path as `:authority`, `List` without `Get`), built from Debian's
# source package into a cache outside the tree (scripts/kube-build.sh; about seven minutes of 2
# cores the first time, all of it before the first test): only with DEVINJECT_KUBE_COMPAT=1.
# CI leaves it out to stay within its time; what it proved is kept by the real old gRPC
# clients of tests/tests/suite/device_plugin_real_clients.rs (the dialing) and by the pod-resources tests
# with `Get` switched off (`List`). See docs/testing.md.
compat_tier=()
if [ "${DEVINJECT_KUBE_COMPAT:-}" = 1 ]; then
  DEVINJECT_KUBE_BIN=$(scripts/kube-build.sh)
  export DEVINJECT_KUBE_BIN
  mapfile -t compat_tier < <(tier compat)
fi
if ! wait_job "fetching the suite's peers" "$peers_job" \
  "scripts/runtimes-fetch.sh, grpc-go-client.sh, vendor-stacks-fetch.sh, nvidia-toolkit-build.sh" "$logs/peers.err"; then
  exit 1
fi
cat "$logs/peers.err"
DEVINJECT_RUNTIMES=$(cat "$logs/runtimes-fetch")
DEVINJECT_GRPC_GO_CLIENT=$(cat "$logs/grpc-go-client")
DEVINJECT_VENDOR_STACKS=$(cat "$logs/vendor-stacks-fetch")
DEVINJECT_NVIDIA_TOOLKIT=$(cat "$logs/nvidia-toolkit-build")
export DEVINJECT_RUNTIMES DEVINJECT_GRPC_GO_CLIENT DEVINJECT_VENDOR_STACKS DEVINJECT_NVIDIA_TOOLKIT
# The versions the suite runs on: the machine's and those pinned by scripts/runtimes.lock.
first_line() { "$@" 2>&1 | sed -n 1p || true; }
say "the suite's engines: $(first_line runc --version), $(first_line containerd --version)," \
  "$(first_line dockerd --version); containerd $(cat "$DEVINJECT_RUNTIMES/containerd-1.7/VERSION")" \
  "and $(cat "$DEVINJECT_RUNTIMES/containerd-2/VERSION"), docker $(cat "$DEVINJECT_RUNTIMES/docker-28/VERSION")" \
  "(scripts/runtimes.lock)"
# Every skip is put on the record here (tests/testkit/); under CI=true a skip is a failure.
export DEVINJECT_SKIP_LOG="$PWD/target/skipped-tests.txt"
rm -f "$DEVINJECT_SKIP_LOG"
# The installer's tests that need a background job run after the suite, before the cluster
# tier, so that the unit tests never wait: the image test (the image's binaries; the cluster
# tier takes the same image) and the manifests' check (helm, which a cold run builds for minutes
# after the unit tests are ready).
late_tests=(image::the_image_installs_on_a_host_root_and_on_a_live_dockerd
  manifests::manifests_match_the_kubernetes_schemas_and_render)
say "the unit tests"
cargo test --workspace --exclude devinject-tests --no-fail-fast -- "${late_tests[@]/#/--skip=}" || status=$?
# The files marked suite in tests/tiers.txt, each in a process of its own, in the order there
# (with DEVINJECT_KUBE_COMPAT=1 then those marked compat, on 1.20: the device plugin as an old
# kubelet dials and lists it); CRI-O and the whole cluster tier on today's release run below.
if wait_job "building CRIU" "$criu_job" scripts/criu-build.sh "$logs/criu.err"; then
  DEVINJECT_CRIU=$(cat "$logs/criu")
  export DEVINJECT_CRIU
fi
say "the suite"
cargo test -p devinject-tests --no-fail-fast --lib --bins || status=$?
tier_test suite || status=$?
if [ ${#compat_tier[@]} -gt 0 ]; then
  tier_test compat || status=$?
fi
# The runc tier (the files marked runc15 in tests/tiers.txt) again on runc 1.5 (docs/testing.md,
# "runc 1.5"), built from its Go module into a cache outside the tree (scripts/runc-build.sh
# --release 1.5, in the background above, with runc 1.4 for the CRI-O and cluster tiers): under
# CI always; locally once scripts/runc-build.sh has built them. The docker case of the hostile
# matrix is left to the docker tier.
if $ci || $cluster; then
  wait_job "building runc 1.4 and 1.5" "$runc_job" "scripts/runc-build.sh [--release 1.5]" "$logs/runc.err" &&
    runc14=$(cat "$logs/runc") && runc15=$(cat "$logs/runc15")
else
  runc14=$(scripts/runc-build.sh --if-built) || true
  runc15=$(scripts/runc-build.sh --release 1.5 --if-built) ||
    echo "test.sh: SKIPPED the runc tier on runc 1.5 (runs under CI=true, or after scripts/runc-build.sh --release 1.5)"
fi
if [ -n "${runc15:-}" ]; then
  say "the runc tier again on $("$runc15" --version | sed -n 1p) ($runc15)"
  DEVINJECT_RUNC=$runc15 tier_test runc15 -- --skip docker_matrix_with_the_shim || status=$?
fi
if wait_job "building helm" "$helm_job" scripts/helm-build.sh "$logs/helm.err"; then
  DEVINJECT_HELM=$(cat "$logs/helm")/helm
  export DEVINJECT_HELM
fi
say "the installer's image and manifests tests"
late_status=0
test_counted cargo test -p devinject-installer --test installer -- --exact "${late_tests[@]}" || late_status=$?
if [ "$late_status" -ne 0 ]; then
  status=$late_status
elif [ "$ran" -ne ${#late_tests[@]} ]; then
  echo "test.sh: bins/installer/tests/installer/ ran $ran of ${late_tests[*]}" >&2
  status=1
fi
# CRI-O 1.36 on runc 1.4 (the files marked crio in tests/tiers.txt), and the whole cluster tier
# (marked cluster) on Kubernetes 1.37, its nodes on containerd 2 and runc 1.4
# (tests/src/cluster/kubernetes.rs), once the background build is done.
if wait_job "building the stack of today" "$today_job" \
  "scripts/crio-build.sh, scripts/kube-module-build.sh, scripts/cni-build.sh" "$logs/today.err"; then
  crio_bin=$(cat "$logs/crio")
  say "CRI-O on $("$crio_bin/crio" --version | sed -n 1p) and ${runc14:-runc}"
  DEVINJECT_CRIO_BIN=$crio_bin DEVINJECT_RUNC=${runc14:-} tier_test crio || status=$?
  if $cluster; then
    kube137=$(cat "$logs/kube")
    DEVINJECT_CNI_BIN=$(cat "$logs/cni")
    export DEVINJECT_CNI_BIN
    say "the cluster tier on $("$kube137/kubelet" --version) and $("$runc14" --version | sed -n 1p)"
    DEVINJECT_KUBE_BIN=$kube137 DEVINJECT_RUNC=$runc14 DEVINJECT_CRIO_BIN=$crio_bin tier_test cluster || status=$?
    # The files marked containerd23 again, their nodes on containerd 2.3 (the long-term
    # release; NRI applies device rules given without nodes, which user-namespaced pods need,
    # from 2.2 on: docs/nri.md) in place of Debian's 2.1; scripts/cluster-containerd.sh runs
    # this pass alone.
    if wait_job "building containerd 2.3" "$containerd_job" scripts/containerd-build.sh "$logs/containerd.err"; then
      runtimes_built=$(runtimes_with_containerd "$DEVINJECT_RUNTIMES" "$(cat "$logs/containerd")" \
        "$PWD/target/runtimes-containerd-built")
      say "the containerd 2.3 files on $("$runtimes_built/containerd-2/bin/containerd" --version)"
      DEVINJECT_RUNTIMES=$runtimes_built DEVINJECT_KUBE_BIN=$kube137 DEVINJECT_RUNC=$runc14 DEVINJECT_CRIO_BIN=$crio_bin \
        tier_test containerd23 || status=$?
    fi
    # The files marked crun again, their CRI-O nodes on crun (CRI-O's default runtime where
    # distributions ship it) in place of runc; scripts/cluster-crun.sh runs this pass alone.
    if wait_job "building crun" "$crun_job" scripts/crun-build.sh "$logs/crun.err"; then
      crun=$(cat "$logs/crun")
      say "the crun files on $("$crun" --version | sed -n 1p)"
      DEVINJECT_CRUN=$crun DEVINJECT_KUBE_BIN=$kube137 DEVINJECT_RUNC=$runc14 DEVINJECT_CRIO_BIN=$crio_bin \
        tier_test crun || status=$?
    fi
  else
    echo "test.sh: SKIPPED the cluster tier on Kubernetes 1.37 (runs under CI=true, or with DEVINJECT_CLUSTER=1)"
  fi
fi
# The image's binaries, built in the background for the installer's image test and the cluster
# tier, are waited for here where no test needed them (a run without the cluster tier).
wait_job "building this machine's image binaries" "$image_job" "ONLY_BUILD=1 scripts/build-image.sh" "$logs/image.err" || true
# The arm64 tier: the guest's kernel under qemu-system-aarch64 (about 20 s here).
if wait_job "building the arm64 guest" "$arm64_job" "scripts/arm64-guest.sh build" "$logs/arm64.err"; then
  say "the arm64 tier"
  DEVINJECT_ARM64_GUEST=$(cat "$logs/arm64") tier_test arm64 || status=$?
fi
if $fresh_root; then
  wait_job "the fresh-root test" "$fresh_root_job" scripts/fresh-root-test.sh "$logs/fresh-root" &&
    tail -n 1 "$logs/fresh-root"
else
  echo "test.sh: SKIPPED the fresh-root test (runs under CI=true, or with DEVINJECT_FRESH_ROOT=1)"
fi
background_report
# `times` in this shell: in the subshell of $(...) it would count nothing.
times >"$logs/times"
echo "test.sh: the run's own CPU, user and system, and its children's: $(tr '\n' ' ' <"$logs/times")"
if [ -s "$DEVINJECT_SKIP_LOG" ]; then
  echo "test.sh: $(wc -l <"$DEVINJECT_SKIP_LOG") tests skipped (they passed without running):"
  sort "$DEVINJECT_SKIP_LOG"
else
  echo "test.sh: no test skipped"
fi
exit "$status"
