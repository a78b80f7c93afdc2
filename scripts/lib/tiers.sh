# shellcheck shell=bash
# Which test file runs in which pass: tests/tiers.txt, and nowhere else. Sourced by
# scripts/test.sh and the scripts/cluster-*.sh scripts from the repository root.
#
# The files of tests/tests/ are grouped into a few test binaries, one folder each
# (tests/tests/<binary>/main.rs declares each file as a module), so that they link once; a pass
# still runs each file in a process of its own, one after the other, as when every file was a
# binary: `--test=<binary>` with the name filter `<module>::`. Two files of one binary never
# run at once, and a file's statics (a lock, a shared cluster) are its own.
tiers=tests/tiers.txt
tier_passes=(suite runc15 crio cluster compat dra containerd23 crun crun_all arm64 multiarch)
# The files marked for pass $1, in the order of tests/tiers.txt: `<binary> <module>` per line,
# with the name prefixes after them (`<binary> <module> <prefix>[+<prefix>...]`) where the mark
# is `<pass>=<prefix>[+<prefix>...]`.
tier() {
  local file passes mark
  local -a marks
  while read -r file passes _ || [ -n "$file" ]; do
    case $file in '' | '#'*) continue ;; esac
    IFS=, read -ra marks <<<"$passes"
    for mark in "${marks[@]}"; do
      case $mark in
        "$1") echo "${file%%/*} ${file#*/}" ;;
        "$1="*) echo "${file%%/*} ${file#*/} ${mark#*=}" ;;
      esac
    done
  done <"$tiers"
}
# Runs pass $1's files with `cargo test -p devinject-tests --no-fail-fast` and the arguments
# after $1 (cargo's, then `--` and the test binaries'), one file at a time: its binary, with the
# name filter `<module>::` (where it is marked `<pass>=<prefix>+<prefix>...`, the filters
# `<module>::<prefix>` ...: only its tests whose names begin with one of the prefixes, in one
# run). Fails when one of the runs does, or when a run ran no test (cargo exits 0 on a filter
# that matches nothing: a renamed test or module would leave its pass empty and green), after
# all of them.
tier_test() {
  local pass=$1 binary module prefix rc=0 status ran
  shift
  local -a cargo_args=() test_args=() filters prefixes
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    cargo_args+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  test_args=("$@")
  while read -r binary module prefix; do
    filters=("$module::")
    if [ -n "$prefix" ]; then
      IFS=+ read -ra prefixes <<<"$prefix"
      filters=("${prefixes[@]/#/$module::}")
    fi
    status=0
    test_counted cargo test -p devinject-tests --no-fail-fast "${cargo_args[@]}" "--test=$binary" \
      -- "${filters[@]}" "${test_args[@]}" || status=$?
    [ "$status" -eq 0 ] || rc=$status
    if [ "$status" -eq 0 ] && [ "$ran" -eq 0 ]; then
      echo "tiers: the $pass pass ran no test of tests/tests/$binary/$module.rs: no test's name" \
        "begins with ${filters[*]}${prefix:+ ($tiers marks it $pass=$prefix)}" >&2
      rc=1
    fi
  done < <(tier "$pass")
  return "$rc"
}
# test_counted COMMAND...: runs a `cargo test` command line, its output going by as it runs;
# its status is the command's, and `ran` says how many tests it ran (passed or failed), from
# each binary's summary, `test result: ok. N passed; M failed; ...` (cargo passes a filter that
# matches nothing: the caller fails a run of none).
test_counted() {
  local log status
  echo "tiers: $*"
  log=$(mktemp)
  # The output into $log too, the status through a file: the pipeline's own status is tee's
  # (or, under pipefail, also cargo's, ending a set -e caller).
  { status=0; "$@" </dev/null || status=$?; echo "$status" >"$log.status"; } | tee "$log"
  status=$(cat "$log.status")
  ran=$(sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed;.*/\1 \2/p' \
    "$log" | awk '{ n += $1 + $2 } END { print n + 0 }')
  rm -f "$log" "$log.status"
  return "$status"
}
# Before anything is built: every file of the binaries' folders in tests/tiers.txt once and
# declared by its binary's main.rs, every file there real, no file of tests/tests/ outside a
# binary's folder, no module's filter matching another module of its binary, every pass one of
# tier_passes (its prefix a part of a test's name), and no pass but compat empty.
check_tiers() {
  local file passes extra pass binary module other line=0 ok=true
  local -A seen=()
  local -a marked modules
  while read -r file passes extra || [ -n "$file" ]; do
    line=$((line + 1))
    case $file in '' | '#'*) continue ;; esac
    if [ -z "$passes" ] || [ -n "$extra" ] || [[ $file != */* ]]; then
      echo "tiers: $tiers:$line: '$file${passes:+ $passes}${extra:+ $extra}' is not" \
        "'<binary>/<file stem> <pass>[,<pass>...]'" >&2
      ok=false
    fi
    binary=${file%%/*}
    module=${file#*/}
    if [ ! -f "tests/tests/$file.rs" ]; then
      echo "tiers: $tiers:$line: tests/tests/$file.rs does not exist" >&2
      ok=false
    elif ! grep -qx "mod $module;" "tests/tests/$binary/main.rs" 2>/dev/null; then
      echo "tiers: $tiers:$line: tests/tests/$binary/main.rs does not declare \`mod $module;\`" >&2
      ok=false
    fi
    if [ -n "${seen[$file]:-}" ]; then
      echo "tiers: $tiers:$line: tests/tests/$file.rs again (line ${seen[$file]})" >&2
      ok=false
    fi
    seen[$file]=$line
    IFS=, read -ra marked <<<"$passes"
    for pass in "${marked[@]}"; do
      case $pass in
        *=*)
          if ! [[ ${pass#*=} =~ ^[a-z0-9_]+(\+[a-z0-9_]+)*$ ]]; then
            echo "tiers: $tiers:$line: tests/tests/$file.rs: '$pass' filters by '${pass#*=}'," \
              "not by beginnings of its tests' names ([a-z0-9_]+, joined by +)" >&2
            ok=false
          fi
          case ${pass%%=*} in
            suite | compat)
              echo "tiers: $tiers:$line: tests/tests/$file.rs: the $pass pass runs whole files" \
                "(give it no filter)" >&2
              ok=false ;;
          esac
          pass=${pass%%=*} ;;
      esac
      case " ${tier_passes[*]} " in
        *" $pass "*) ;;
        *) echo "tiers: $tiers:$line: tests/tests/$file.rs: unknown pass '$pass'" \
          "(the passes: ${tier_passes[*]})" >&2
          ok=false ;;
      esac
    done
  done <"$tiers"
  for file in tests/tests/*.rs; do
    [ -e "$file" ] || continue
    echo "tiers: $file is a test binary of its own: put it in one of the binaries' folders" \
      "(tests/tests/<binary>/, declared in its main.rs) and in $tiers" >&2
    ok=false
  done
  for file in tests/tests/*/*.rs; do
    [ -e "$file" ] || continue
    file=${file#tests/tests/}
    file=${file%.rs}
    [ "${file#*/}" = main ] && continue
    if [ -z "${seen[$file]:-}" ]; then
      echo "tiers: tests/tests/$file.rs is not in $tiers: add it with the passes it runs in" >&2
      ok=false
    fi
  done
  # A module's filter `<module>::` also matches a module whose name ends in `_<module>`.
  for binary in tests/tests/*/; do
    binary=${binary%/}
    binary=${binary#tests/tests/}
    mapfile -t modules < <(sed -n 's/^mod \([a-z0-9_]*\);$/\1/p' "tests/tests/$binary/main.rs")
    for module in "${modules[@]}"; do
      for other in "${modules[@]}"; do
        if [ "$other" != "$module" ] && [[ $other == *"$module" ]]; then
          echo "tiers: tests/tests/$binary: the filter '$module::' of one file would also run" \
            "the file $other: rename one of them" >&2
          ok=false
        fi
      done
    done
  done
  for pass in "${tier_passes[@]}"; do
    if [ "$pass" != compat ] && [ -z "$(tier "$pass")" ]; then
      echo "tiers: $tiers marks no file for the pass $pass" >&2
      ok=false
    fi
  done
  $ok
}
