#!/usr/bin/env bash
# Mutation testing with cargo-mutants over the code that decides what a container gets: the
# request parser and planner (crates/core/devices/) and what they decide from (discovery and
# driver-file resolution, crates/host/discovery/), the request policy (crates/shared/admission/src/policy, and
# crates/host/contained/src/child.rs, which runs prepare programs) and the device cgroup rules (crates/host/cgroup/, and
# crates/core/device-rule/, the device-rule vocabulary it and the planner share).
# A mutant that survives is a change to that code no test notices: each one gets a test, or a
# written reason in docs/mutants.md.
#
# Usage: scripts/mutants.sh [focus|all]   (default: focus)
#   focus  crates/core/devices/src/request.rs, crates/core/devices/src/planner.rs, crates/shared/admission/src/policy and crates/host/contained/src/child.rs
#          (minutes)
#   all    the whole of crates/core/devices/, crates/host/discovery/, crates/shared/admission/src/policy, crates/host/contained/src/child.rs, crates/host/cgroup/ and crates/core/device-rule/ (hours
#          on 2 cores)
# Environment: JOBS (parallel mutants, default 1), OUT (default target/mutants).
# Needs root for the cgroup kernel tests; not part of scripts/test.sh (it is far too slow).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install --locked cargo-mutants
scope=${1:-focus}
out=${OUT:-target/mutants}
common=(--test-workspace=false --timeout 180 --jobs "${JOBS:-1}" --no-shuffle)
case "$scope" in
  focus)
    runs=(
      "devices:-p devinject-devices -f crates/core/devices/src/request.rs -f crates/core/devices/src/planner.rs"
      "policy:-p devinject-admission -p devinject-contained -f crates/shared/admission/src/policy/*.rs -f crates/host/contained/src/child.rs"
    ) ;;
  all)
    runs=(
      "devices:-p devinject-devices"
      "discovery:-p devinject-discovery"
      "policy:-p devinject-admission -p devinject-contained -f crates/shared/admission/src/policy/*.rs -f crates/host/contained/src/child.rs"
      # crates/core/device-rule/'s mutants are tested by its own unit tests.
      "cgroup:-p devinject-cgroup -p devinject-device-rule"
    ) ;;
  *) echo "usage: $0 [focus|all]" >&2; exit 2 ;;
esac
status=0
mkdir -p "$out"
for run in "${runs[@]}"; do
  name=${run%%:*}
  # The run's arguments are split into words on purpose; its globs are cargo-mutants' own.
  set -f
  # shellcheck disable=SC2086
  cargo mutants "${common[@]}" ${run#*:} -o "$out/$name" || status=$?
  set +f
done
echo "mutants: scope $scope"
for run in "${runs[@]}"; do
  name=${run%%:*}
  d="$out/$name/mutants.out"
  count() { if [ -s "$d/$1.txt" ]; then grep -c . "$d/$1.txt"; else echo 0; fi; }
  caught=$(count caught) missed=$(count missed) timeout=$(count timeout) unviable=$(count unviable)
  viable=$((caught + missed + timeout))
  score=$([ "$viable" -gt 0 ] && echo "$(( (caught + timeout) * 1000 / viable ))" || echo 0)
  printf '%-8s caught %4d  missed %4d  timeout %3d  unviable %4d  score %d.%d%%\n' \
    "$name" "$caught" "$missed" "$timeout" "$unviable" "$((score / 10))" "$((score % 10))"
  [ -s "$d/missed.txt" ] && sed 's/^/    missed: /' "$d/missed.txt"
done
# cargo-mutants exits 2 when mutants survive: the list above is the result, not a failure.
[ "$status" -le 2 ] || exit "$status"
