#!/usr/bin/env bash
# Fetches three vendors' user-space driver stacks as Debian 12 packages them, each unpacked
# (`dpkg-deb -x`, never installed) into a driver root laid out like a host's /, for the tests
# that inject a vendor's driver files into containers from a driver root:
#
#   nvidia: the NVIDIA 535 driver's libraries, tools and ICD files (non-free; with contrib's
#           nvidia-persistenced and libnvidia-egl-gbm1), from /usr/lib/x86_64-linux-gnu/nvidia/current
#           and /usr/lib/nvidia/current as Debian ships them (the /usr/lib/x86_64-linux-gnu/lib*.so.1
#           and /usr/bin/nvidia-smi links a host has are made by update-alternatives, not here)
#   amd:    ROCm 5.2's rocminfo, rocm-smi and their libraries (libhsa-runtime64, libhsakmt,
#           librocm_smi64)
#   intel:  intel-opencl-icd with Intel's compiler libraries (libigc, libigdfcl, libigdgmm,
#           libopencl-clang), the level-zero loader, the OpenCL ICD loader and clinfo
#
# Each root holds only these vendors' own packages: glibc, libstdc++, LLVM, libdrm and the
# GL/EGL/Vulkan loaders are the system's and are not there. The packages are pinned in
# scripts/vendor-stacks/packages.lock, by version and sha256; a .deb whose sha256 differs from
# the lock fails the fetch. They come through a private apt configuration whose sources are this
# machine's own with contrib and non-free added (scripts/lib/private-apt.sh). The roots land
# outside the tree, reused by later runs:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/vendor-stacks-<stamp>/{nvidia,amd,intel}/
#   ${XDG_CACHE_HOME:-$HOME/.cache}/devinject/vendor-stacks-<stamp>/PACKAGES   vendor package=version
#
# where <stamp> follows the lock and this script: a dir is rebuilt only when they change (the
# .debs are kept in vendor-stacks-debs/ and fetched again only when missing or different). Prints
# the vendor-stacks-<stamp> dir.
#
#   scripts/vendor-stacks-fetch.sh               fetch (or reuse) the pinned packages
#   scripts/vendor-stacks-fetch.sh --if-fetched  fetch nothing: print the dir when it is there, fail otherwise
#   scripts/vendor-stacks-fetch.sh --update-lock pin what apt resolves today into the lock, then fetch
#
# Debian drops a superseded version from the archive at a point release or a security update:
# a pinned version that apt no longer has fails, naming the package, and --update-lock pins the
# current one.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=scripts/vendor-stacks/packages.lock
cache=${XDG_CACHE_HOME:-$HOME/.cache}/devinject
debs=$cache/vendor-stacks-debs
fail() { echo "vendor-stacks-fetch: $*" >&2; exit 1; }

vendors=(nvidia amd intel)
# Per vendor: the packages asked for; the source packages whose binary packages their
# dependencies (Depends, Pre-Depends) pull in too (anything else is the system's); and the
# version series a source must have ("source series").
#
# NVIDIA, as bookworm non-free has it at 535. Not there: nvidia-debugdump (in nvidia-driver-bin),
# libnvidia-opencl1 (libnvidia-opencl.so is in nvidia-opencl-icd), libnvidia-gpucomp (545+),
# firmware-nvidia-gsp (non-free-firmware, the kernel module's). Left out: nvidia-cuda-toolkit
# (84 MB, with a larger nvidia-cuda-dev), the kernel module packages, nvidia-settings (a GTK
# app), the glx-alternative-nvidia/nvidia-support packages of contrib (maintainer scripts and
# update-alternatives links only).
nvidia_packages=(
  libcuda1 libcudadebugger1 libnvidia-ptxjitcompiler1 libnvidia-nvvm4 libnvidia-ml1 nvidia-smi
  libnvidia-cfg1 libnvidia-allocator1 libnvidia-api1 nvidia-cuda-mps nvidia-driver-bin
  nvidia-persistenced nvidia-opencl-icd
  libnvcuvid1 libnvidia-encode1 libnvidia-opticalflow1 libnvidia-fbc1 libnvoptix1 libnvidia-ngx1
  libgl1-nvidia-glvnd-glx libglx-nvidia0 libegl-nvidia0 libgles-nvidia1 libgles-nvidia2
  libnvidia-eglcore libnvidia-glcore libnvidia-glvkspirv libnvidia-rtcore nvidia-vulkan-icd
  nvidia-egl-icd libnvidia-egl-wayland1 libnvidia-egl-gbm1 nvidia-vdpau-driver
  xserver-xorg-video-nvidia
)
nvidia_sources=(nvidia-graphics-drivers)
nvidia_series=("nvidia-graphics-drivers 535.")
amd_packages=(rocminfo rocm-smi librocm-smi64-1 libhsa-runtime64-1)
amd_sources=(rocm-smi-lib rocr-runtime rocminfo roct-thunk-interface)
amd_series=("rocm-smi-lib 5.2." "rocr-runtime 5.2." "rocminfo 5.2." "roct-thunk-interface 5.2.")
intel_packages=(intel-opencl-icd libze1 clinfo ocl-icd-libopencl1)
intel_sources=(intel-compute-runtime intel-graphics-compiler intel-gmmlib opencl-clang-14 level-zero)
intel_series=()
# A file each root must have once unpacked.
nvidia_expect=(libcuda.so.1 libnvidia-ml.so.1 nvidia-smi)
amd_expect=(libhsa-runtime64.so.1 librocm_smi64.so.1 rocminfo rocm-smi)
intel_expect=(libigdrcl.so libOpenCL.so.1 clinfo)

mode=${1:-}
case $mode in
  "" | --if-fetched | --update-lock) ;;
  *) fail "usage: scripts/vendor-stacks-fetch.sh [--if-fetched | --update-lock]" ;;
esac
[ "$(dpkg --print-architecture)" = amd64 ] ||
  fail "the lock pins amd64 packages; this machine is $(dpkg --print-architecture)"

apt_ready=
apt_setup() {
  [ -n "$apt_ready" ] && return
  # shellcheck source=scripts/lib/private-apt.sh
  . scripts/lib/private-apt.sh
  private_apt "$cache/vendor-stacks-apt" deb "" "contrib non-free"
  apt_ready=1
}

# get RECORD FIELD: a field of an apt-cache show record.
get() { sed -n "/^$2: /{s///p;q}" <<<"$1"; }

# resolve VENDOR: the lock's lines for the vendor: its packages and, from their dependencies,
# those of its sources, at apt's candidate versions.
resolve() {
  local vendor=$1 p r version src s deps
  local -n asked=${vendor}_packages sources=${vendor}_sources series=${vendor}_series
  local -A seen=()
  local queue=("${asked[@]}")
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    [ -n "${seen[$p]:-}" ] && continue
    seen[$p]=1
    r=$(apt-cache show --no-all-versions "$p" 2>/dev/null) && version=$(get "$r" Version) && [ -n "$version" ] ||
      fail "$vendor: apt has no $p (bookworm's main, contrib, non-free); take it out of ${vendor}_packages"
    src=$(get "$r" Source) src=${src%% *} src=${src:-$p}
    for s in "${series[@]}"; do
      [ "${s% *}" = "$src" ] || continue
      case $version in "${s#* }"*) ;; *) fail "$vendor: $p ($src) is $version, not ${s#* }x" ;; esac
    done
    echo "$vendor $p $version $(get "$r" Size) $(get "$r" SHA256)"
    # The first alternative of each dependency; of those, the ones built from the vendor's sources
    # (a purely virtual one has no record).
    mapfile -t deps < <(sed -n 's/^\(Pre-\)\{0,1\}Depends: //p' <<<"$r" | tr ',' '\n' |
      sed 's/|.*//; s/(.*//; s/:any//; s/ //g' | sort -u)
    [ ${#deps[@]} -gt 0 ] || continue
    while read -r dep src; do
      case " ${sources[*]} " in *" $src "*) queue+=("$dep") ;; esac
    done < <(apt-cache show --no-all-versions "${deps[@]}" 2>/dev/null |
      awk '/^Package: /{p=$2; s=$2} /^Source: /{s=$2} /^$/{if (p) print p, s; p=""} END{if (p) print p, s}')
  done | sort
}

if [ "$mode" = --update-lock ]; then
  apt_setup
  (
    echo "# Debian 12 (bookworm) packages of scripts/vendor-stacks-fetch.sh's driver roots, amd64:"
    echo "# vendor package version size sha256. Written by scripts/vendor-stacks-fetch.sh --update-lock."
    for v in "${vendors[@]}"; do resolve "$v" || exit 1; done
  ) >"$lock.tmp" || { rm -f "$lock.tmp"; fail "could not resolve the packages (see above); $lock is unchanged"; }
  mv "$lock.tmp" "$lock"
  echo "vendor-stacks-fetch: $lock: $(grep -vc '^#' "$lock") packages" >&2
fi

[ -f "$lock" ] || fail "no $lock (write it with scripts/vendor-stacks-fetch.sh --update-lock)"
stamp=$(cat "$lock" scripts/vendor-stacks-fetch.sh | sha256sum | cut -c1-16)
out=$cache/vendor-stacks-$stamp
if [ -f "$out/PACKAGES" ]; then
  echo "$out"
  exit 0
fi
[ "$mode" = --if-fetched ] && exit 1

# The lock: one package a line.
entries=()
while read -r vendor p version size sha rest; do
  case $vendor in "" | "#"*) continue ;; esac
  case " ${vendors[*]} " in *" $vendor "*) ;; *) fail "$lock: unknown vendor '$vendor' (line for $p)" ;; esac
  [[ $sha =~ ^[0-9a-f]{64}$ && $size =~ ^[0-9]+$ && -z $rest ]] ||
    fail "$lock: the line for $p is not 'vendor package version size sha256'"
  entries+=("$vendor $p $version $size $sha")
done <"$lock"
[ ${#entries[@]} -gt 0 ] || fail "$lock pins no package (write it with scripts/vendor-stacks-fetch.sh --update-lock)"

# The .debs: kept ones whose sha256 is the lock's, the others downloaded and checked.
mkdir -p "$debs"
deb() { echo "$debs/${2}_$3.deb"; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
missing=()
for e in "${entries[@]}"; do
  read -r vendor p version size sha <<<"$e"
  f=$(deb "$vendor" "$p" "$version")
  [ -f "$f" ] && [ "$(sha_of "$f")" = "$sha" ] && continue
  rm -f "$f"
  missing+=("$p=$version")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt_setup
  for pv in "${missing[@]}"; do
    [ -n "$(apt-cache show "$pv" 2>/dev/null)" ] ||
      fail "apt has no ${pv%%=*} ${pv#*=} (no longer in the archive: Debian drops superseded versions; or never was): pin today's with scripts/vendor-stacks-fetch.sh --update-lock"
  done
  echo "vendor-stacks-fetch: downloading ${#missing[@]} packages" >&2
  partial=$debs/partial
  rm -rf "$partial" && mkdir -p "$partial"
  (cd "$partial" && apt-get -qq -o APT::Sandbox::User=root download "${missing[@]}") ||
    fail "apt-get download of ${missing[*]} failed (see above)"
  for pv in "${missing[@]}"; do
    got=("$partial/${pv%%=*}_"*.deb)
    [ -f "${got[0]}" ] || fail "apt-get download left no .deb of ${pv%%=*}"
    mv "${got[0]}" "$(deb - "${pv%%=*}" "${pv#*=}")"
  done
  rm -rf "$partial"
  for e in "${entries[@]}"; do
    read -r vendor p version size sha <<<"$e"
    got=$(sha_of "$(deb "$vendor" "$p" "$version")")
    [ "$got" = "$sha" ] ||
      fail "$p $version ($vendor): the .deb's sha256 is $got, $lock says $sha (the archive's package differs from the pinned one: check why, then pin it with scripts/vendor-stacks-fetch.sh --update-lock)"
  done
fi

# The roots.
rm -rf "$out.tmp"
for v in "${vendors[@]}"; do mkdir -p "$out.tmp/$v"; done
for e in "${entries[@]}"; do
  read -r vendor p version size sha <<<"$e"
  dpkg-deb -x "$(deb "$vendor" "$p" "$version")" "$out.tmp/$vendor" || fail "dpkg-deb -x of $p $version failed"
  echo "$vendor $p=$version" >>"$out.tmp/PACKAGES.tmp"
done
check_root() {
  local -n expect=${1}_expect
  local name
  for name in "${expect[@]}"; do
    [ -n "$(find "$out.tmp/$1" -name "$name" -print -quit)" ] ||
      fail "the $1 root has no $name once unpacked (did the lock lose a package? scripts/vendor-stacks-fetch.sh --update-lock)"
  done
}
for v in "${vendors[@]}"; do check_root "$v"; done
mv "$out.tmp/PACKAGES.tmp" "$out.tmp/PACKAGES"
rm -rf "$out"
mv "$out.tmp" "$out"
# Older roots and .debs the lock no longer pins: hundreds of MB each.
for d in "$cache"/vendor-stacks-[0-9a-f]*; do
  [[ $d =~ /vendor-stacks-[0-9a-f]{16}(\.tmp)?$ ]] && [ "$d" != "$out" ] && rm -rf "$d"
done
for f in "$debs"/*.deb; do
  keep=
  for e in "${entries[@]}"; do
    read -r vendor p version size sha <<<"$e"
    [ "$f" = "$(deb "$vendor" "$p" "$version")" ] && keep=1 && break
  done
  [ -n "$keep" ] || rm -f "$f"
done
echo "vendor-stacks-fetch: $(du -sh "$out" | cut -f1) in $out ($(for v in "${vendors[@]}"; do printf '%s %s, ' "$v" "$(du -sh "$out/$v" | cut -f1)"; done | sed 's/, $//'))" >&2
echo "$out"
