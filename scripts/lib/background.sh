# shellcheck shell=bash
# The background jobs of scripts/test.sh: builds and downloads that run while the lints and the
# tests do, each waited for just before the first test that needs it. Sourced from the
# repository root.
#
# Each job is a session of its own, so that an early exit ends its whole tree (`kill -- -PID`:
# go and its compilers, cargo and its rustc). Where the kernel groups CPU time by session
# (CONFIG_SCHED_AUTOGROUP, /proc/sys/kernel/sched_autogroup_enabled; sched(7), "The autogroup
# feature"), a new session is also a scheduling group of its own: CPU is shared between groups
# first, and a process's nice only counts inside its group. A `nice -n 19` build in a session of
# its own then takes as much CPU as all the tests together, and a latency-bound test (a cluster
# starting pods) runs at half speed beside it. So each job sets its group's nice as well.

# Where each job's cost is written when it ends, when set: a line per job, its seconds from the
# run's start to its end and the CPU (user and system) it and its children took
# (background_report prints them).
BACKGROUND_COSTS=${BACKGROUND_COSTS:-}
BACKGROUND_BEGAN=${BACKGROUND_BEGAN:-$(date +%s)}
# Where each job's exit status is written when it ends, when set: a file named by its session
# (its pid), for background_wait.
BACKGROUND_STATUS=${BACKGROUND_STATUS:-}

# background NICE OUT ERR COMMAND...: runs COMMAND at NICE (0 the tests' own, 19 only what the
# tests leave idle), its stdout to OUT and its stderr to ERR. $! is the job's session.
background() {
  local nice=$1 out=$2 err=$3
  shift 3
  # The group's nice is written by the session's leader itself: written from here, before the
  # child's setsid, it would set this script's group instead. The leader stays to write the
  # job's status and its cost (bash's `times`: its children's CPU, waited for).
  # shellcheck disable=SC2016 # the leader's script expands its own arguments
  setsid bash -c 'nice=$1 costs=$2 began=$3 statuses=$4; shift 4
    echo "$nice" >/proc/self/autogroup 2>/dev/null || true
    status=0
    nice -n "$nice" "$@" || status=$?
    if [ -n "$costs" ]; then
      # `times` in this shell: in the subshell of $(...) its children would be none.
      times >"$costs.$$"
      printf "%s\t%s\t%s\t%s\n" "$(($(date +%s) - began))" "$(sed -n 2p "$costs.$$")" "$status" "$*" >>"$costs"
      rm -f "$costs.$$"
    fi
    if [ -n "$statuses" ]; then
      echo "$status" >"$statuses/$$.new" && mv "$statuses/$$.new" "$statuses/$$"
    fi
    exit "$status"' background "$nice" "$BACKGROUND_COSTS" "$BACKGROUND_BEGAN" "$BACKGROUND_STATUS" "$@" >"$out" 2>"$err" &
}

# background_wait PID: waits for the job PID (a `background` session) and returns its status.
# Bash's `wait PID` alone is not enough: bash forgets a finished job's status once a new child
# of its gets the same pid ("wait: pid N is not a child of this shell"), and a run that starts
# tens of thousands of processes goes round pid_max (32768 by default; proc(5),
# /proc/sys/kernel/pid_max) more than once. The status the job's leader wrote stands instead.
background_wait() {
  local pid=$1 status=0
  wait "$pid" 2>/dev/null || status=$?
  if [ -n "$BACKGROUND_STATUS" ] && [ -s "$BACKGROUND_STATUS/$pid" ]; then
    status=$(cat "$BACKGROUND_STATUS/$pid")
  fi
  return "$status"
}

# background_report: the cost of each job that ended, from $BACKGROUND_COSTS: when it ended (in
# seconds from the run's start), its CPU (user, then system), its status and its command.
background_report() {
  [ -s "$BACKGROUND_COSTS" ] || return 0
  echo "background jobs: ended at (s), CPU user and system, status, command"
  sort -n "$BACKGROUND_COSTS" | sed 's/^/  /'
}

# end_background PID...: ends each job's whole session (the EXIT trap of scripts/test.sh).
end_background() {
  local pid
  for pid in "$@"; do kill -- -"$pid" 2>/dev/null || true; done
}
