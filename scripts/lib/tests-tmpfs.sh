# shellcheck shell=bash
# The tests' temporary files on a tmpfs of their own, for scripts/test.sh. Sourced from the
# repository root.
#
# Most tests make their bundles, rootfs trees, canaries and daemons' state in temporary
# directories (TMPDIR), hundreds of small files and links per container. On this machine's ext4
# disk those metadata writes wait behind the journal commits that the runtimes' and the
# engines' fsyncs force: a busybox rootfs took 60 to 200 ms to lay out beside a runc start, and
# the hostile matrix's hook cases ran in 20.6 s there against 9.2 s on a tmpfs. The tmpfs is
# mounted in a mount namespace of the run's own (`tests_namespace`), so that it goes with the
# run whatever ends it, under /tmp (the tests plant links to /dev, /etc and /usr paths in their
# images: a temporary directory under one of those would be resolved through them), with a name
# short enough that the daemons' sockets below it fit in sun_path (tests/src/daemons.rs,
# short_tempdir).

# tests_namespace "$0" "$@": re-runs the calling script in a new mount namespace (once; as root
# only). Returns where it cannot (not root, DEVINJECT_TESTS_TMPFS=0, no unshare).
tests_namespace() {
  [ "${DEVINJECT_TESTS_TMPFS:-1}" = 0 ] && return 0
  [ -n "${DEVINJECT_TESTS_NAMESPACE:-}" ] && return 0
  [ "$(id -u)" = 0 ] && command -v unshare >/dev/null || return 0
  export DEVINJECT_TESTS_NAMESPACE=$$
  exec unshare --mount --propagation private -- "$@"
}

# tests_tmpfs: mounts a tmpfs on a new directory under /tmp and exports TMPDIR to it, in the
# namespace of tests_namespace (nothing outside it sees the mount); the directory is removed by
# tests_tmpfs_end. Without that namespace, says so and leaves TMPDIR as it is.
tests_tmpfs() {
  if [ -z "${DEVINJECT_TESTS_NAMESPACE:-}" ]; then
    echo "test.sh: the tests' temporary files stay on ${TMPDIR:-/tmp} (a tmpfs needs root and unshare; DEVINJECT_TESTS_TMPFS=0 asks for none)"
    return 0
  fi
  tests_tmp=$(mktemp -d /tmp/devinject.XXXXXX)
  # Half the memory at most, as the kernel's default; pages are only used as files are written.
  mount -t tmpfs -o mode=1777,size=50% devinject-tests "$tests_tmp"
  export TMPDIR=$tests_tmp
  echo "test.sh: the tests' temporary files on a tmpfs at $tests_tmp, seen only by this run"
}

# tests_tmpfs_end: unmounts the tests' tmpfs and removes its directory.
tests_tmpfs_end() {
  [ -n "${tests_tmp:-}" ] || return 0
  umount -l "$tests_tmp" 2>/dev/null || true
  rmdir "$tests_tmp" 2>/dev/null || true
}
