#!/usr/bin/env python3
"""Start cost of each path: create and start of a container, in interleaved rounds.

Each line of PATHS is `NAME BUNDLE RUNTIME...`: the runtime command a container of that path is
created with (`RUNTIME... create --bundle BUNDLE --pid-file F ID`, as an engine calls it); start
and delete go to RUNC. Per path it reports the median wall time of create plus start and the
median CPU per start: user and system time of every process of that start, the runtime and what
it runs (hooks, a shim's finish step), runc init and the container's own process (`true`). This
process is a child subreaper (prctl(2), PR_SET_CHILD_SUBREAPER), so the container's init, left
by `create`, is reaped here and its CPU, with that of the hooks runc init waited for, lands in
getrusage(RUSAGE_CHILDREN) like that of the runtime.

    start-cost.py ROUNDS RUNC STATE_DIR PATHS
"""
import ctypes
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PR_SET_CHILD_SUBREAPER = 36


def cpu_us():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) * 1e6


def reap_orphans():
    """Reaps whatever else was left to this process (a daemonized hook), so its CPU counts."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def one_start(name, bundle, runtime, runc, state, work, n):
    """Creates, starts and waits for one container; returns (wall µs, CPU µs or None)."""
    cid = f"t{name}-{n}"
    pid_file = os.path.join(work, f"{cid}.pid")
    # stderr to a file, not a pipe: the container's init inherits it and holds it open until
    # the container ends, so reading a pipe to its end would wait for that.
    err = open(os.path.join(work, "stderr"), "w+b")
    # No `timeout=`: subprocess then waits in sleeps of up to 50 ms, which the wall time would
    # count. An alarm bounds the start instead.
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": err}
    signal.alarm(60)
    before = cpu_us()
    t0 = time.monotonic()
    try:
        r = subprocess.run(runtime + ["create", "--bundle", bundle, "--pid-file", pid_file, cid], **quiet)
        if r.returncode == 0:
            r = subprocess.run([runc, "--root", state, "start", cid], **quiet)
        wall = (time.monotonic() - t0) * 1e6
        if r.returncode != 0:
            err.seek(0)
            sys.stderr.write(f"start-cost: {name}: {err.read().decode(errors='replace').strip()}\n")
            return None, None
        with open(pid_file) as f:
            pid = int(f.read().strip())
        try:
            os.waitpid(pid, 0)
            reap_orphans()
            cpu = cpu_us() - before
        except ChildProcessError:
            # Not reparented here (another subreaper above): wall time only.
            cpu = None
        return wall, cpu
    finally:
        signal.alarm(0)
        err.close()
        subprocess.run([runc, "--root", state, "delete", "--force", cid],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        reap_orphans()


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: start-cost.py ROUNDS RUNC STATE_DIR PATHS")
    rounds, runc, state, spec = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    paths = []
    with open(spec) as f:
        for line in f:
            if line.strip():
                name, bundle, *runtime = line.split()
                paths.append((name, bundle, runtime))
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("start-cost: a start took over 60 s"))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"start-cost: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
    walls = {name: [] for name, _, _ in paths}
    cpus = {name: [] for name, _, _ in paths}
    failed = 0
    n = 0
    with tempfile.TemporaryDirectory(prefix="start-cost.") as work:
        for r in range(rounds):
            for name, bundle, runtime in paths:
                n += 1
                wall, cpu = one_start(name, bundle, runtime, runc, state, work, n)
                if wall is None:
                    failed += 1
                    print(f"round {r}: {name} failed")
                    continue
                walls[name].append(wall)
                if cpu is not None:
                    cpus[name].append(cpu)

    def median(xs):
        return statistics.median(xs) if xs else None

    wall_m = {p: median(v) for p, v in walls.items()}
    cpu_m = {p: median(v) for p, v in cpus.items()}
    base, floor = wall_m.get("runc"), wall_m.get("floor")
    cpu_floor = cpu_m.get("floor")

    def cell(v, fmt):
        return "-" if v is None else fmt.format(v)

    print(f"{'path':<14} {'starts':>6} {'median ms':>10} {'/ runc':>7} {'/ floor':>8} "
          f"{'CPU ms':>8} {'CPU - floor':>12}")
    for name, _, _ in paths:
        w, c = wall_m[name], cpu_m[name]
        print(f"{name:<14} {len(walls[name]):>6} {cell(w and w / 1000, '{:.2f}'):>10} "
              f"{cell(w and base and w / base, '{:.3f}'):>7} {cell(w and floor and w / floor, '{:.3f}'):>8} "
              f"{cell(c and c / 1000, '{:.2f}'):>8} "
              f"{cell(None if c is None or cpu_floor is None else (c - cpu_floor) / 1000, '{:+.2f}'):>12}")
    print("wall: median of create + start; CPU: median per start of every process of it, "
          "the container's own included")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
