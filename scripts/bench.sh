#!/usr/bin/env bash
# Benchmarks: what devinject costs a container start, side by side with the native path
# (docs/benchmarks.md). Builds the release binaries once (the workspace's, the benchmarks of
# tests/bench/ among them), then, as root, runs devinject-bench (its arguments are passed on, e.g.
# `scripts/bench.sh --runs 100`), the device plugin's own
# benchmark, the device plugin's and the DRA driver's idle cost on a simulated node (idle-bench),
# the CDI watcher's refresh latency (cdi-watch-bench), the cost of parsing config.json
# (oci-parse-bench), each injection path on
# containerd 1.7 (devinject-cri-bench) when scripts/runtimes-fetch.sh has fetched it, and on
# containerd 2.3 when scripts/containerd-build.sh has built it too, and the
# real cluster's (devinject-cluster-bench, on Kubernetes 1.37 with containerd 2 and runc 1.4)
# when scripts/kube-module-build.sh and scripts/runc-build.sh have built them. Run
# it on a quiet machine: figures are wall times.
#
# `scripts/bench.sh nvidia-toolkit [--rounds N] [--warmup N]` runs only the comparison with
# NVIDIA's Container Toolkit (nvidia-toolkit-bench: NVIDIA's runtime in cdi mode, the hook and the
# shim on NVIDIA's real 535 user space, docs/benchmarks.md), fetching the driver stacks
# (scripts/vendor-stacks-fetch.sh) and building the toolkit (scripts/nvidia-toolkit-build.sh)
# first; the full run ends with it when both are already there.
#
# `scripts/bench.sh device-plugin` runs only the device plugin's own benchmark (row 4:
# start-up, Allocate, Allocate of healthy devices beside one whose node is a FIFO with an A/A
# pair, health changes, RSS).
#
# `scripts/bench.sh churn [--starts N] [--seed S]` runs only the soak (churn-soak, the churn of
# tests/tests/cluster/cluster_churn.rs run long: >= 1000 pod starts by default, on Kubernetes 1.37 with
# containerd 2, CRI-O 1.36 and runc 1.4, the shim, NRI and CDI, faults on a schedule) and writes its report
# (starts, faults of each kind, violations, the daemons' RSS, fds and threads first vs last,
# the metrics scrapes) to target/churn-report.txt; it exits 1 on any violation.
#
# `scripts/bench.sh userns [--rounds N] [--warmup N]` runs only the user namespace's price
# (userns-bench: the hook and the shim giving a demo device to a container in a user namespace
# and in the initial one, and the real kvm from a CDI spec with and without its node copies, each
# against runc with no device in the same namespace; the full run runs it too).
#
# `scripts/bench.sh arm64 [ROUNDS]` runs only the arm64 section: the hook's and the shim's start
# cost against runc's in the arm64 guest (scripts/arm64-guest.sh bench, an arm64 kernel under
# qemu-system-aarch64), ratios with an A/A pair, with the binaries as they ship (the release
# cross build is about 7 minutes of 2 cores cold), and each shipped binary's size per machine.
#
# `scripts/bench.sh servers [--rounds N] [--clients 1,8] ...` runs only the servers' section
# (servers-bench: the metrics endpoint and the webhook under well-behaved clients, scrapes or
# reviews per second and p50/p99, an A/A pair; then a scrape's p50/p99 beside 0, 100 and 1000
# idle connections, section 22, alone with `--only idle`; loopback only, tens of seconds; no
# root needed).
#
# `scripts/bench.sh fleet [SIZES]` runs only DRA at fleet size (devinject-cluster-bench --fleet,
# section 6f: simulated nodes on one Kubernetes 1.37 control plane, one devinject-dra each and no
# kubelet, at each comma-separated node count, 100,300 by default; the plain, partitioned and
# capacity demo profiles; about 15 minutes at the default sizes on 2 cores). Not in the full run.
#
# The binaries are built as they ship, by scripts/release-build.sh (as for the image, in
# target/image): release profile, static, the runtime shim and devinject-podresources against
# musl and the rest against glibc.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
section=all
if [ "${1:-}" = churn ]; then
  shift
  kube=$(scripts/kube-module-build.sh)
  runc14=$(scripts/runc-build.sh)
  runtimes=$(scripts/runtimes-fetch.sh)
  crio=$(scripts/crio-build.sh)
  out=$(scripts/release-build.sh target/image/bin --workspace)
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  report=target/churn-report.txt
  # One cluster at a time on this machine, as for the cluster tests.
  exec flock /tmp/devinject-cluster.lock env DEVINJECT_BIN_DIR="$out" DEVINJECT_KUBE_BIN="$kube" \
    DEVINJECT_RUNC="$runc14" DEVINJECT_RUNTIMES="$runtimes" DEVINJECT_CRIO_BIN="$crio" \
    "$out/churn-soak" --report "$report" "$@"
fi
if [ "${1:-}" = arm64 ]; then
  shift
  # shellcheck source=scripts/lib/shipped.sh
  . scripts/lib/shipped.sh
  native=$(scripts/release-build.sh target/image/bin "${packages[@]}")
  arm64=$(ARCH=aarch64 TARGET_DIR=target/image-aarch64 scripts/release-build.sh target/image-aarch64/release-bin \
    "${packages[@]}")
  echo "### arm64: the shipped binaries' sizes (bytes)"
  printf '%-26s %12s %12s\n' binary x86_64 aarch64
  for b in "${bins[@]}"; do
    printf '%-26s %12s %12s\n' "$b" "$(stat -c %s "$native/$b")" "$(stat -c %s "$arm64/$b")"
  done
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  PROFILE=release scripts/arm64-guest.sh bench "${1:-30}" | grep -E '^guest'
  exit
fi
if [ "${1:-}" = fleet ]; then
  shift
  kube=$(scripts/kube-module-build.sh)
  out=$(scripts/release-build.sh target/image/bin -p devinject-bench -p devinject-dra -p devinject-oci)
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  # One cluster at a time on this machine, as for the cluster tests.
  exec flock /tmp/devinject-cluster.lock env DEVINJECT_BIN_DIR="$out" DEVINJECT_KUBE_BIN="$kube" \
    "$out/devinject-cluster-bench" --fleet "${1:-100,300}"
fi
if [ "${1:-}" = servers ]; then
  shift
  out=$(scripts/release-build.sh target/image/bin -p devinject-bench)
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  exec "$out/servers-bench" "$@"
fi
if [ "${1:-}" = userns ]; then
  shift
  # devinject-ctl writes the CDI specs of the CDI rows.
  out=$(scripts/release-build.sh target/image/bin -p devinject-bench -p devinject-ctl)
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  exec env DEVINJECT_BIN_DIR="$out" "$out/userns-bench" "$@"
fi
if [ "${1:-}" = device-plugin ]; then
  # Row 4 alone: the device plugin's own benchmark, with Allocate beside a failing device.
  shift
  out=$(scripts/release-build.sh target/image/bin -p devinject-bench -p devinject-device-plugin)
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  exec env DEVINJECT_BIN_DIR="$out" "$out/device-plugin-bench" "$@"
fi
if [ "${1:-}" = nvidia-toolkit ]; then
  section=nvidia-toolkit
  shift
  DEVINJECT_VENDOR_STACKS=$(scripts/vendor-stacks-fetch.sh)
  DEVINJECT_NVIDIA_TOOLKIT=$(scripts/nvidia-toolkit-build.sh)
  out=$(scripts/release-build.sh target/image/bin -p devinject-bench)
else
  out=$(scripts/release-build.sh target/image/bin --workspace)
fi
# nvidia-toolkit-bench: the toolkit comparison, with the prerequisites it was given.
nvidia_toolkit() {
  echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
  DEVINJECT_BIN_DIR="$out" DEVINJECT_VENDOR_STACKS="$1" DEVINJECT_NVIDIA_TOOLKIT="$2" \
    "$out/nvidia-toolkit-bench" "${@:3}"
}
if [ "$section" = nvidia-toolkit ]; then
  nvidia_toolkit "$DEVINJECT_VENDOR_STACKS" "$DEVINJECT_NVIDIA_TOOLKIT" "$@"
  exit
fi
case " $* " in
  *" --help "* | *" -h "*) exec "$out/devinject-bench" "$@" ;;
esac
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
# Row 11 compares the shipped (musl) shim and helper with the same sources built against glibc.
glibc=$out/glibc
"$out/devinject-bench" --bin-dir "$out" --compare "glibc=$glibc" "$@"

echo
echo "### 4. The device plugin"
echo
if [ -x "$out/device-plugin-bench" ]; then
  DEVINJECT_BIN_DIR="$out" "$out/device-plugin-bench"
else
  echo "not measured: the device plugin's benchmark (device-plugin-bench) is not part of this build"
fi

echo
echo "### 6c. The device plugin and the DRA driver waiting on a simulated node"
echo
DEVINJECT_BIN_DIR="$out" "$out/idle-bench"

echo
DEVINJECT_BIN_DIR="$out" "$out/cdi-watch-bench"

echo
echo "### 19. The metrics endpoint and the webhook under well-behaved clients"
echo
"$out/servers-bench"

echo
echo "### 12. Reading config.json: the hook's own types against oci-spec"
echo
"$out/oci-parse-bench"

echo
if fetched=$(scripts/runtimes-fetch.sh --if-fetched); then
  DEVINJECT_BIN_DIR="$out" "$out/devinject-cri-bench"
  # The same paths on containerd 2.3, the long-term release, where scripts/containerd-build.sh
  # has built it: the fetched releases with containerd 2 replaced by the built one.
  if containerd23=$(scripts/containerd-build.sh --if-built); then
    # shellcheck source=scripts/lib/runtimes-with.sh
    . scripts/lib/runtimes-with.sh
    echo
    DEVINJECT_BIN_DIR="$out" \
      DEVINJECT_RUNTIMES=$(runtimes_with_containerd "$fetched" "$containerd23" "$PWD/target/runtimes-containerd-built") \
      "$out/devinject-cri-bench" --containerd 2
  else
    echo "not measured: the injection paths on containerd 2.3 (build it with scripts/containerd-build.sh)"
  fi
else
  echo "not measured: the injection paths on containerd 1.7 and 2.3 (fetch them with scripts/runtimes-fetch.sh)"
fi

echo
if kube=$(scripts/kube-module-build.sh --if-built) && runc14=$(scripts/runc-build.sh --if-built); then
  DEVINJECT_BIN_DIR="$out" DEVINJECT_KUBE_BIN="$kube" DEVINJECT_RUNC="$runc14" \
    "$out/devinject-cluster-bench" --compare "glibc=$glibc"
else
  echo "not measured: the real cluster (build it once with scripts/kube-module-build.sh and scripts/runc-build.sh)"
fi

echo
DEVINJECT_BIN_DIR="$out" "$out/userns-bench"

echo
if stacks=$(scripts/vendor-stacks-fetch.sh --if-fetched) && toolkit=$(scripts/nvidia-toolkit-build.sh --if-built); then
  nvidia_toolkit "$stacks" "$toolkit"
else
  echo "not measured: NVIDIA's Container Toolkit against devinject (run scripts/bench.sh nvidia-toolkit)"
fi
