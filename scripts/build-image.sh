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

if [ "${NO_BUILD:-0}" != 1 ]; then
  TARGET_DIR="$target_dir" scripts/release-build.sh "$out" "${packages[@]}" >/dev/null
fi
[ "${ONLY_BUILD:-0}" = 1 ] && exit 0

stage="$target_dir/stage"
rm -rf "$stage"
mkdir -p "$stage/usr/bin" "$stage/usr/share/devinject/bin" "$stage/usr/share/devinject/profiles"
for b in "${bins[@]}"; do
  f="$out/$b"
  [ -x "$f" ] || { echo "build-image: $f is missing" >&2; exit 1; }
  # A FROM scratch image has no dynamic loader: refuse anything that asks for one.
  if head -c 4096 "$f" | grep -aq 'ld-linux'; then
    echo "build-image: $f is dynamically linked" >&2
    exit 1
  fi
  case "$b" in
    devinject-installer|devinject-device-plugin|devinject-nri|devinject-webhook|devinject-dra) install -m 0755 "$f" "$stage/usr/bin/$b" ;;
    *) install -m 0755 "$f" "$stage/usr/share/devinject/bin/$b" ;;
  esac
done
install -m 0644 profiles/*.toml "$stage/usr/share/devinject/profiles/"

# A context without BuildKit features: the legacy builder and BuildKit both build it.
$docker_cmd build --quiet -f bins/installer/Dockerfile -t "$tag" "$stage" >/dev/null
echo "$tag"
