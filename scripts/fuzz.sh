#!/usr/bin/env bash
# Long fuzzing runs (not part of scripts/test.sh).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   cargo-fuzz: each target for SECONDS (default 600)
#   scripts/fuzz.sh props [CASES]           the property tests with CASES cases (default 100000)
#
# cargo-fuzz needs the nightly toolchain and `cargo install cargo-fuzz`. Corpora grow under
# tests/fuzz/corpus/<target> (ignored by git) and start from tests/fuzz/seeds/<target> and, for profiles,
# the shipped profiles/. Crashes land in tests/fuzz/artifacts/<target>/; a summary of executions per
# target is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = props ]; then
  cases=${2:-100000}
  echo "fuzz: property tests with PROPTEST_CASES=$cases"
  PROPTEST_CASES=$cases cargo test --release --workspace --lib props
  exit
fi

secs=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(oci_state oci_spec profile request host_config spec_edit shim_args ebpf_prefix ld_so_cache)
fi
cd tests/fuzz
summary=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  seeds=("seeds/$t")
  [ "$t" = profile ] && seeds=(../../profiles)
  [ -d "${seeds[0]}" ] || seeds=()
  log="corpus/$t.log"
  echo "fuzz: $t for ${secs}s"
  status=ok
  cargo +nightly fuzz run "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$secs" -print_final_stats=1 >"$log" 2>&1 || status=CRASH
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo '?')
  summary+=("$(printf '%-12s %8ss %14s execs  %s' "$t" "$secs" "$runs" "$status")")
  [ "$status" = ok ] || tail -40 "$log"
done
printf '%s\n' "${summary[@]}"
