#!/usr/bin/env bash
# Builds the devinject image: static binaries in a FROM scratch image (bins/installer/Dockerfile).
#
# Usage: scripts/build-image.sh [TAG]          (default: devinject:<workspace version>)
#
# The binaries are built by scripts/release-build.sh: static, against glibc, except the runtime
# shim and devinject-podresources, against musl (that script says why). Environment:
#   DOCKER      the docker command, e.g. "docker -H unix:///run/other.sock" (default: docker)
#   PROFILE     cargo profile: release (default) or dev (faster to build, bigger binaries)
#   TARGET_DIR  cargo target directory (default: target/image, apart from normal builds
#               because RUSTFLAGS differ)
#   NO_BUILD=1  only stage and `docker build` what TARGET_DIR already holds
#   ONLY_BUILD=1  only build the binaries into TARGET_DIR (no docker): what scripts/test.sh
#               does ahead, in the background, so that the cluster tier's image build finds them
#   PLATFORMS   the platforms of the image, e.g. linux/amd64,linux/arm64 (default: this
#               machine's, built by `docker build`). With another platform than this machine's,
#               no docker is needed: each platform's binaries are built for it (ARCH of
#               scripts/release-build.sh; TARGET_DIR-<arch> for another machine's), and the
#               image is written as an OCI image layout archive whose index has one manifest per
#               platform (scripts/lib/oci-image.py), TARGET_DIR/devinject-<version>.oci.tar,
#               which it prints. Push it with `skopeo copy --all oci-archive:FILE docker://REF`
#               (or `crane push --index` of the unpacked layout); docker, containerd and CRI-O
#               pull the half of their machine from the registry.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
tag=${1:-devinject:${version}}
docker_cmd=${DOCKER:-docker}
target_dir=${TARGET_DIR:-target/image}
out="$target_dir/bin"

# What ships: scripts/lib/shipped.sh.
# shellcheck source=scripts/lib/shipped.sh
. scripts/lib/shipped.sh

# stage BIN_DIR STAGE: lays the image's tree out at STAGE from the binaries in BIN_DIR.
stage() {
  local from=$1 to=$2 b f
  rm -rf "$to"
  mkdir -p "$to/usr/bin" "$to/usr/share/devinject/bin" "$to/usr/share/devinject/profiles"
  for b in "${bins[@]}"; do
    f="$from/$b"
    [ -x "$f" ] || { echo "build-image: $f is missing" >&2; exit 1; }
    # A FROM scratch image has no dynamic loader: refuse anything that asks for one.
    if head -c 4096 "$f" | grep -aq 'ld-linux'; then
      echo "build-image: $f is dynamically linked" >&2
      exit 1
    fi
    case "$b" in
      devinject-installer|devinject-device-plugin|devinject-nri|devinject-webhook|devinject-dra) install -m 0755 "$f" "$to/usr/bin/$b" ;;
      *) install -m 0755 "$f" "$to/usr/share/devinject/bin/$b" ;;
    esac
  done
  install -m 0644 profiles/*.toml "$to/usr/share/devinject/profiles/"
}

host_arch=$(uname -m)
oci_arch() {
  case $1 in x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) echo "$1" ;; esac
}
platforms=${PLATFORMS:-linux/$(oci_arch "$host_arch")}
if [ "$platforms" != "linux/$(oci_arch "$host_arch")" ]; then
  layers=()
  IFS=, read -ra wanted <<<"$platforms"
  for platform in "${wanted[@]}"; do
    case $platform in
      linux/amd64) arch=x86_64 ;;
      linux/arm64) arch=aarch64 ;;
      *) echo "build-image: the platform $platform is not one devinject builds (linux/amd64, linux/arm64)" >&2; exit 2 ;;
    esac
    dir=$target_dir
    [ "$arch" = "$host_arch" ] || dir=$target_dir-$arch
    if [ "${NO_BUILD:-0}" != 1 ]; then
      ARCH=$arch TARGET_DIR="$dir" scripts/release-build.sh "$dir/bin" "${packages[@]}" >/dev/null
    fi
    [ "${ONLY_BUILD:-0}" = 1 ] && continue
    stage "$dir/bin" "$dir/stage"
    layers+=("$platform=$dir/stage")
  done
  [ "${ONLY_BUILD:-0}" = 1 ] && exit 0
  archive=$target_dir/devinject-$version.oci.tar
  python3 scripts/lib/oci-image.py "$archive" bins/installer/Dockerfile "$tag" "${layers[@]}"
  echo "$archive"
  exit 0
fi

if [ "${NO_BUILD:-0}" != 1 ]; then
  TARGET_DIR="$target_dir" scripts/release-build.sh "$out" "${packages[@]}" >/dev/null
fi
[ "${ONLY_BUILD:-0}" = 1 ] && exit 0

stage "$out" "$target_dir/stage"
stage="$target_dir/stage"

# A context without BuildKit features: the legacy builder and BuildKit both build it.
$docker_cmd build --quiet -f bins/installer/Dockerfile -t "$tag" "$stage" >/dev/null
echo "$tag"
