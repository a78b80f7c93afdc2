# Which test file runs in which pass: tests/tiers.txt, and nowhere else. Sourced by
# scripts/test.sh and the scripts/cluster-*.sh scripts from the repository root.
tiers=tests/tiers.txt
tier_passes=(suite runc14 crio cluster compat dra containerd22 crun arm64)
# The files marked for pass $1, in the order of tests/tiers.txt: a stem per line, with a name
# filter after it (`<stem> <filter>`) where the mark is `<pass>=<filter>`.
tier() {
  local stem passes mark
  local -a marks
  while read -r stem passes _ || [ -n "$stem" ]; do
    case $stem in '' | '#'*) continue ;; esac
    IFS=, read -ra marks <<<"$passes"
    for mark in "${marks[@]}"; do
      case $mark in
        "$1") echo "$stem" ;;
        "$1="*) echo "$stem ${mark#*=}" ;;
      esac
    done
  done <"$tiers"
}
# Runs pass $1's files with `cargo test -p devinject-tests --no-fail-fast` and the arguments
# after $1 (cargo's, then `--` and the test binaries'): the files marked `<pass>` together, each
# marked `<pass>=<filter>` on its own with only its tests whose names contain the filter. Fails
# when one of the runs does, or when a filtered run ran no test (cargo exits 0 on a filter that
# matches nothing: a renamed test would leave its pass empty and green), after all of them.
tier_test() {
  local pass=$1 stem filter rc=0 status ran log
  shift
  local -a cargo_args=() test_args=() whole=() line
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    cargo_args+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  test_args=("$@")
  while read -r stem filter; do
    if [ -z "$filter" ]; then
      whole+=("--test=$stem")
    else
      line=(cargo test -p devinject-tests --no-fail-fast "${cargo_args[@]}" "--test=$stem" --
        "$filter" "${test_args[@]}")
      echo "tiers: ${line[*]}"
      log=$(mktemp)
      # The run's output goes by as it runs and into $log, its status through a file: the
      # pipeline's own status is tee's (or, under pipefail, also cargo's, ending a set -e caller).
      { status=0; "${line[@]}" || status=$?; echo "$status" >"$log.status"; } | tee "$log"
      status=$(cat "$log.status")
      # Each test binary's summary: `test result: ok. N passed; M failed; ...`.
      ran=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed;.*/\1 \2/p' \
        "$log" | awk '{ n += $1 + $2 } END { print n + 0 }')
      rm -f "$log" "$log.status"
      [ "$status" -eq 0 ] || rc=$status
      if [ "$status" -eq 0 ] && [ "$ran" -eq 0 ]; then
        echo "tiers: the $pass pass ran no test of tests/tests/$stem.rs: $tiers marks it" \
          "$pass=$filter and none of its tests' names contains '$filter'" >&2
        rc=1
      fi
    fi
  done < <(tier "$pass")
  if [ ${#whole[@]} -gt 0 ]; then
    cargo test -p devinject-tests --no-fail-fast "${cargo_args[@]}" "${whole[@]}" -- \
      "${test_args[@]}" || rc=$?
  fi
  return "$rc"
}
# Before anything is built: every file of tests/tests/ in tests/tiers.txt once, every file there
# real, every pass one of tier_passes (its filter a part of a test's name), and no pass but
# compat empty (`cargo test` given no `--test` runs every file).
check_tiers() {
  local stem passes extra pass line=0 ok=true
  local -A seen=()
  local -a marked
  while read -r stem passes extra || [ -n "$stem" ]; do
    line=$((line + 1))
    case $stem in '' | '#'*) continue ;; esac
    if [ -z "$passes" ] || [ -n "$extra" ]; then
      echo "tiers: $tiers:$line: '$stem${passes:+ $passes}${extra:+ $extra}' is not" \
        "'<file stem> <pass>[,<pass>...]'" >&2
      ok=false
    fi
    if [ ! -f "tests/tests/$stem.rs" ]; then
      echo "tiers: $tiers:$line: tests/tests/$stem.rs does not exist" >&2
      ok=false
    fi
    if [ -n "${seen[$stem]:-}" ]; then
      echo "tiers: $tiers:$line: tests/tests/$stem.rs again (line ${seen[$stem]})" >&2
      ok=false
    fi
    seen[$stem]=$line
    IFS=, read -ra marked <<<"$passes"
    for pass in "${marked[@]}"; do
      case $pass in
        *=*)
          if ! [[ ${pass#*=} =~ ^[a-z0-9_]+$ ]]; then
            echo "tiers: $tiers:$line: tests/tests/$stem.rs: '$pass' filters by '${pass#*=}'," \
              "not by a part of a test's name ([a-z0-9_]+)" >&2
            ok=false
          fi
          case ${pass%%=*} in
            suite | compat)
              echo "tiers: $tiers:$line: tests/tests/$stem.rs: the $pass pass runs whole files" \
                "(give it no filter)" >&2
              ok=false ;;
          esac
          pass=${pass%%=*} ;;
      esac
      case " ${tier_passes[*]} " in
        *" $pass "*) ;;
        *) echo "tiers: $tiers:$line: tests/tests/$stem.rs: unknown pass '$pass'" \
          "(the passes: ${tier_passes[*]})" >&2
          ok=false ;;
      esac
    done
  done <"$tiers"
  for stem in tests/tests/*.rs; do
    stem=${stem#tests/tests/}
    stem=${stem%.rs}
    if [ -z "${seen[$stem]:-}" ]; then
      echo "tiers: tests/tests/$stem.rs is not in $tiers: add it with the passes it runs in" >&2
      ok=false
    fi
  done
  for pass in "${tier_passes[@]}"; do
    if [ "$pass" != compat ] && [ -z "$(tier "$pass")" ]; then
      echo "tiers: $tiers marks no file for the pass $pass" >&2
      ok=false
    fi
  done
  $ok
}
