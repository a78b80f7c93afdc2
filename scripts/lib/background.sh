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

# background NICE OUT ERR COMMAND...: runs COMMAND at NICE (0 the tests' own, 19 only what the
# tests leave idle), its stdout to OUT and its stderr to ERR. $! is the job's session.
background() {
  local nice=$1 out=$2 err=$3
  shift 3
  # The group's nice is written by the session's leader itself: written from here, before the
  # child's setsid, it would set this script's group instead.
  setsid bash -c 'nice=$1; shift
    echo "$nice" >/proc/self/autogroup 2>/dev/null || true
    exec nice -n "$nice" "$@"' background "$nice" "$@" >"$out" 2>"$err" &
}

# end_background PID...: ends each job's whole session (the EXIT trap of scripts/test.sh).
end_background() {
  local pid
  for pid in "$@"; do kill -- -"$pid" 2>/dev/null || true; done
}
