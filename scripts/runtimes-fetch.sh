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
#
# Pinned by version and checksum: scripts/runtimes.lock names each package's version, size and
# sha256 (from the suite's signed index); a .deb whose sha256 differs fails the fetch, and so
# does a version the suite no longer serves (unstable moves on): --update-lock pins what each
# suite serves today, then fetches it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${DEVINJECT_RUNTIMES:-$PWD/target/runtimes}
lock=scripts/runtimes.lock
fail() { echo "runtimes-fetch: $*" >&2; exit 1; }
mode=${1:-}
case $mode in
  "" | --if-fetched | --update-lock) ;;
  *) fail "usage: scripts/runtimes-fetch.sh [--if-fetched | --update-lock]" ;;
esac
# series suite
releases=("1.7 trixie" "2 sid")
docker_series=28 docker_suite=sid
docker_bins=(dockerd docker-proxy docker)

# shellcheck source=scripts/lib/private-apt.sh
. scripts/lib/private-apt.sh
if [ "$mode" = --update-lock ]; then
  {
    echo "# The packages of scripts/runtimes-fetch.sh, amd64: suite package version size sha256."
    echo "# Written by scripts/runtimes-fetch.sh --update-lock."
    for r in "${releases[@]}" "$docker_series $docker_suite"; do
      suite=${r#* }
      private_apt "$dir/apt-$suite" deb "$suite" >/dev/null
      case $r in
        "$docker_series $docker_suite") packages=(docker.io docker-cli) ;;
        *) packages=(containerd) ;;
      esac
      for p in "${packages[@]}"; do
        version=$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p')
        apt-cache show "$p=$version" | awk -v s="$suite" -v p="$p" -v v="$version" \
          '/^Size:/{z=$2} /^SHA256:/{h=$2} END{if (z && h) print s, p, v, z, h}'
      done
    done
  } >"$lock.tmp"
  [ "$(grep -vc '^#' "$lock.tmp")" -eq 4 ] || { rm -f "$lock.tmp"; fail "could not resolve every package; $lock is unchanged"; }
  mv "$lock.tmp" "$lock"
  rm -rf "$dir"/containerd-* "$dir/docker-$docker_series"
fi

# pinned SUITE PACKAGE: "version size sha256" of the lock's line.
pinned() {
  local line
  line=$(awk -v s="$1" -v p="$2" '$1 == s && $2 == p { print $3, $4, $5 }' "$lock")
  [[ $line =~ ^[^\ ]+\ [0-9]+\ [0-9a-f]{64}$ ]] ||
    fail "$lock pins no $2 from $1 as 'suite package version size sha256' (write it with scripts/runtimes-fetch.sh --update-lock)"
  echo "$line"
}

# Every package the fetch takes is pinned, checked here (in this shell: `pinned` runs in command
# substitutions below, where its failure would not end the script).
for r in "${releases[@]}"; do pinned "${r#* }" containerd >/dev/null; done
pinned "$docker_suite" docker.io >/dev/null
pinned "$docker_suite" docker-cli >/dev/null

# current DIR VERSION: the release in DIR is the pinned one.
current() { [ "$(cat "$1/VERSION" 2>/dev/null)" = "$2" ]; }

complete() {
  local r series suite
  for r in "${releases[@]}"; do
    series=${r% *} suite=${r#* }
    read -r version _ <<<"$(pinned "$suite" containerd)"
    current "$dir/containerd-$series" "$version" || return 1
    for b in containerd containerd-shim-runc-v2 ctr; do
      [ -x "$dir/containerd-$series/bin/$b" ] || return 1
    done
  done
  read -r version _ <<<"$(pinned "$docker_suite" docker.io)"
  current "$dir/docker-$docker_series" "$version" || return 1
  for b in "${docker_bins[@]}"; do [ -x "$dir/docker-$docker_series/bin/$b" ] || return 1; done
}
if complete; then echo "$dir"; exit 0; fi
[ "$mode" = --if-fetched ] && exit 1

# download SUITE WORK PACKAGE...: the pinned .debs of PACKAGEs from SUITE into WORK, each
# checked against the lock's sha256.
download() {
  local suite=$1 work=$2 p version sha got
  shift 2
  private_apt "$dir/apt-$suite" deb "$suite" >/dev/null
  rm -rf "$work" && mkdir -p "$work"
  for p in "$@"; do
    read -r version _ sha <<<"$(pinned "$suite" "$p")"
    [ -n "$(apt-cache show "$p=$version" 2>/dev/null)" ] ||
      fail "$suite serves no $p $version any more ($(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p') now): pin it with scripts/runtimes-fetch.sh --update-lock"
    (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download "$p=$version")
    got=$(sha256sum "$work/${p}_"*.deb | cut -d' ' -f1)
    [ "$got" = "$sha" ] ||
      fail "$p $version from $suite: the .deb's sha256 is $got, $lock says $sha (the archive's package differs from the pinned one: check why before pinning it with --update-lock)"
  done
}

for r in "${releases[@]}"; do
  series=${r% *} suite=${r#* }
  out=$dir/containerd-$series
  read -r version _ <<<"$(pinned "$suite" containerd)"
  current "$out" "$version" && [ -x "$out/bin/ctr" ] && continue
  work=$dir/work-$suite
  download "$suite" "$work" containerd
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
read -r version _ <<<"$(pinned "$docker_suite" docker.io)"
read -r cli _ <<<"$(pinned "$docker_suite" docker-cli)"
if ! current "$out" "$version" || [ ! -x "$out/bin/docker" ]; then
  case $version in
    "$docker_series".*) ;;
    *) fail "$lock pins docker.io $version, not $docker_series.x" ;;
  esac
  [ "$cli" = "$version" ] || fail "$lock pins docker-cli $cli, not docker.io's $version"
  work=$dir/work-docker
  download "$docker_suite" "$work" docker.io docker-cli
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
