# Which test file runs in which pass: tests/tiers.txt, and nowhere else. Sourced by
# scripts/test.sh and scripts/cluster-1.34.sh from the repository root.
tiers=tests/tiers.txt
tier_passes=(suite runc14 crio cluster compat dra containerd22 crun arm64)
# The stems of the files marked for pass $1, in the order of tests/tiers.txt.
tier() {
  local stem passes
  while read -r stem passes _ || [ -n "$stem" ]; do
    case $stem in '' | '#'*) continue ;; esac
    case ",$passes," in *",$1,"*) echo "$stem" ;; esac
  done <"$tiers"
}
# Before anything is built: every file of tests/tests/ in tests/tiers.txt once, every file there
# real, every pass one of tier_passes, and no pass but compat empty (`cargo test` given no
# `--test` runs every file).
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
