#!/usr/bin/env bash
# Fetches the newer containerd releases the tests run beside the machine's own (Debian 12's 1.6,
# which has no CDI): Debian 13's containerd 1.7 (CDI and NRI built in, off by default) and Debian
# unstable's containerd 2.x (both on by default); and Debian unstable's docker 28 engine and CLI
# (beside Debian 12's 20.10; CDI on by default since 28.2). Each package comes through a private apt
# configuration whose sources are this machine's own with the suite changed
# (scripts/lib/private-apt.sh) and is unpacked (`dpkg-deb -x`), never installed: the system's
# containerd, docker and apt sources stay as they are. The binaries need only libc (2.34 for
# docker 28) and runc.
#
#   target/runtimes/containerd-<series>/bin/{containerd,containerd-shim-runc-v2,ctr}
#   target/runtimes/containerd-<series>/VERSION
#   target/runtimes/docker-28/bin/{dockerd,docker-proxy,docker}
#   target/runtimes/docker-28/VERSION
#
# for series 1.7 and 2 (DEVINJECT_RUNTIMES moves target/runtimes). Prints the runtimes dir.
# With --if-fetched it fetches nothing: it prints the dir when all are there, and fails
# otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${DEVINJECT_RUNTIMES:-$PWD/target/runtimes}
# series suite
releases=("1.7 trixie" "2 sid")
docker_series=28 docker_suite=sid
docker_bins=(dockerd docker-proxy docker)

complete() {
  local r series
  for r in "${releases[@]}"; do
    series=${r% *}
    for b in containerd containerd-shim-runc-v2 ctr; do
      [ -x "$dir/containerd-$series/bin/$b" ] || return 1
    done
  done
  for b in "${docker_bins[@]}"; do [ -x "$dir/docker-$docker_series/bin/$b" ] || return 1; done
}
if complete; then echo "$dir"; exit 0; fi
[ "${1:-}" = --if-fetched ] && exit 1

# shellcheck source=scripts/lib/private-apt.sh
. scripts/lib/private-apt.sh
for r in "${releases[@]}"; do
  series=${r% *} suite=${r#* }
  out=$dir/containerd-$series
  [ -x "$out/bin/ctr" ] && continue
  private_apt "$dir/apt-$suite" deb "$suite"
  version=$(apt-cache policy containerd | sed -n 's/^ *Candidate: //p')
  case $version in
    "$series".*) ;;
    *) echo "runtimes-fetch: $suite's containerd is ${version:-missing}, not $series.x" >&2; exit 1 ;;
  esac
  work=$dir/work-$suite
  rm -rf "$work" && mkdir -p "$work"
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download "containerd=$version")
  dpkg-deb -x "$work"/containerd_*.deb "$work/unpacked"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp/bin"
  install -m 0755 "$work"/unpacked/usr/bin/{containerd,containerd-shim-runc-v2,ctr} "$out.tmp/bin/"
  echo "$version" >"$out.tmp/VERSION"
  rm -rf "$out" "$work"
  mv "$out.tmp" "$out"
  echo "runtimes-fetch: containerd $version from $suite" >&2
done

# docker: the engine (docker.io: dockerd, docker-proxy) and the CLI (docker-cli), one version.
out=$dir/docker-$docker_series
if [ ! -x "$out/bin/docker" ]; then
  private_apt "$dir/apt-$docker_suite" deb "$docker_suite"
  version=$(apt-cache policy docker.io | sed -n 's/^ *Candidate: //p')
  cli=$(apt-cache policy docker-cli | sed -n 's/^ *Candidate: //p')
  case $version in
    "$docker_series".*) ;;
    *) echo "runtimes-fetch: $docker_suite's docker.io is ${version:-missing}, not $docker_series.x" >&2; exit 1 ;;
  esac
  [ "$cli" = "$version" ] ||
    { echo "runtimes-fetch: $docker_suite's docker-cli is ${cli:-missing}, not docker.io's $version" >&2; exit 1; }
  work=$dir/work-docker
  rm -rf "$work" && mkdir -p "$work"
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download "docker.io=$version" "docker-cli=$version")
  for deb in "$work"/docker.io_*.deb "$work"/docker-cli_*.deb; do dpkg-deb -x "$deb" "$work/unpacked"; done
  rm -rf "$out.tmp" && mkdir -p "$out.tmp/bin"
  install -m 0755 "$work"/unpacked/usr/sbin/{dockerd,docker-proxy} "$work/unpacked/usr/bin/docker" "$out.tmp/bin/"
  echo "$version" >"$out.tmp/VERSION"
  rm -rf "$out" "$work"
  mv "$out.tmp" "$out"
  echo "runtimes-fetch: docker $version from $docker_suite" >&2
fi
complete
echo "$dir"
