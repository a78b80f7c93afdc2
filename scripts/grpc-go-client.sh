#!/usr/bin/env bash
# Builds the grpc-go client of the device plugin's interop test
# (tests/tests/suite/device_plugin_real_clients.rs) from tests/clients/go/device-plugin-client: a
# recent grpc-go (>= 1.52, which sends `localhost` as the HTTP/2 :authority for a unix socket,
# as kubelets from 1.26 do). Debian 12 has only grpc-go 1.33 and Go 1.19, so the Go toolchain
# and grpc-go with the sources it imports come from Debian 13's packages, through a private apt
# configuration whose sources are this machine's own with the suite changed
# (scripts/lib/private-apt.sh), unpacked (`dpkg-deb -x`), never installed. The build is in
# GOPATH mode over the unpacked /usr/share/gocode, offline; the messages are described by a
# FileDescriptorSet that Debian 12's protoc makes from the plugin's proto, embedded in the
# binary. Everything lands in one dir (DEVINJECT_GRPC_GO moves it):
#
#   target/grpc-go/bin/device-plugin-client
#   target/grpc-go/PACKAGES        the Debian packages it was built from, name=version
#
# Rebuilt only when the client's source, the proto or this script change. Prints the binary.
# With --if-built it builds nothing: it prints the binary when it is up to date, and fails
# otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${DEVINJECT_GRPC_GO:-$PWD/target/grpc-go}
suite=trixie
src=tests/clients/go/device-plugin-client/main.go
proto=bins/device-plugin/src/api/deviceplugin_v1beta1.proto
client=$dir/bin/device-plugin-client

stamp=$(cat "$src" "$proto" scripts/grpc-go-client.sh | sha256sum)
if [ -x "$client" ] && [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]; then
  echo "$client"
  exit 0
fi
[ "${1:-}" = --if-built ] && exit 1
[ -x /usr/bin/protoc ] || { echo "grpc-go-client: needs protoc (apt-get install protobuf-compiler; scripts/install-deps.sh test)" >&2; exit 1; }

# shellcheck source=scripts/lib/private-apt.sh
. scripts/lib/private-apt.sh
private_apt "$dir/apt" deb "$suite"
candidate() { apt-cache policy "$1" | sed -n 's/^ *Candidate: //p'; }
grpc=$(candidate golang-google-grpc-dev)
if [ -z "$grpc" ] || ! dpkg --compare-versions "$grpc" ge 1.52; then
  echo "grpc-go-client: $suite's golang-google-grpc-dev is ${grpc:-missing}, not >= 1.52" >&2
  exit 1
fi
# The suite's default Go, as a self-contained GOROOT (/usr/lib/go-1.NN) with its sources.
go=$(apt-cache depends golang-go | sed -n 's/^ *Depends: \(golang-1\.[0-9]*-go\)$/\1/p' | head -n1)
[ -n "$go" ] || { echo "grpc-go-client: no golang-1.NN-go behind $suite's golang-go" >&2; exit 1; }
# What the client imports, package by package (`go list -deps`): grpc-go, its HTTP/2 and
# syscall layers, the protobuf runtimes (grpc's binary log still uses github.com/golang/protobuf)
# and the status proto from genproto.
packages=("$go" "${go%-go}-src" golang-google-grpc-dev golang-golang-x-net-dev golang-golang-x-sys-dev
  golang-golang-x-text-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev
  golang-google-genproto-dev)
pinned=()
for p in "${packages[@]}"; do
  v=$(candidate "$p")
  [ -n "$v" ] || { echo "grpc-go-client: $suite has no $p" >&2; exit 1; }
  pinned+=("$p=$v")
done

# The unpacked packages, kept between builds while the same versions are wanted.
root=$dir/root
if [ "$(cat "$dir/PACKAGES" 2>/dev/null)" != "$(printf '%s\n' "${pinned[@]}")" ] || [ ! -d "$root" ]; then
  work=$dir/work
  rm -rf "$work" "$root.tmp" && mkdir -p "$work" "$root.tmp"
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download "${pinned[@]}")
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$root.tmp"; done
  rm -rf "$root" "$work"
  mv "$root.tmp" "$root"
  printf '%s\n' "${pinned[@]}" >"$dir/PACKAGES"
fi

# A GOPATH of its own holds the client's package; the packages' /usr/share/gocode holds the rest.
pkg=$dir/gopath/src/devinject.test/device-plugin-client
rm -rf "$pkg" && mkdir -p "$pkg" "$dir/bin"
cp "$src" "$pkg/main.go"
/usr/bin/protoc -I"$(dirname "$proto")" --descriptor_set_out="$pkg/deviceplugin_v1beta1.pb" "$proto"
series=${go#golang-}
goroot=$root/usr/lib/go-${series%-go}
echo "grpc-go-client: building the client on grpc-go $grpc with $(head -n1 "$goroot/VERSION")" >&2
(
  cd "$pkg"
  export GOROOT=$goroot GOPATH=$dir/gopath:$root/usr/share/gocode GOCACHE=$dir/gocache \
    GO111MODULE=off GOFLAGS= GOPROXY=off GOTOOLCHAIN=local GOENV=off GOTELEMETRY=off CGO_ENABLED=0
  "$goroot/bin/go" build -o "$client.tmp" .
)
mv "$client.tmp" "$client"
echo "$stamp" >"$dir/inputs.sha256"
echo "$client"
