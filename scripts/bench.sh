#!/usr/bin/env bash
# Benchmarks: what devinject costs a container start, side by side with the native path
# (docs/benchmarks.md). Builds the release binaries once, then, as root, runs devinject-bench
# (its arguments are passed on, e.g. `scripts/bench.sh --runs 100`) and the device plugin's own
# benchmark when it is part of the build. Run it on a quiet machine: figures are wall times.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cargo build --release --workspace --bins --quiet
case " $* " in
  *" --help "* | *" -h "*) exec target/release/devinject-bench "$@" ;;
esac
echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs" >&2
target/release/devinject-bench "$@"

echo
echo "### 4. The device plugin"
echo
if [ -x target/release/device-plugin-bench ]; then
  target/release/device-plugin-bench
else
  echo "not measured: the device plugin's benchmark (device-plugin-bench) is not part of this build"
fi
