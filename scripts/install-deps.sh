#!/usr/bin/env bash
# Installs the host packages devinject's demo and tests use, only those missing.
# Usage: scripts/install-deps.sh [demo|test|cross]   (default: test; the benchmark needs the test
# set; cross: what scripts/release-build.sh needs to build for aarch64 here, and qemu's user mode
# that scripts/arm64-check.sh runs those binaries in)
set -euo pipefail
# DEVINJECT_DEMO_DEPS replaces the demo's list (scripts/fresh-root-test.sh drops a package with it
# to prove that its test fails without it).
# shellcheck disable=SC2206 # a list of package names
want=(${DEVINJECT_DEMO_DEPS:-runc busybox-static gcc e2fsprogs})
if [ "${1:-test}" = cross ]; then
  want=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static qemu-system-arm busybox-static)
fi
if [ "${1:-test}" = test ]; then
  # libc6-dev: headers and the static libc for the hostile tests' C helpers (tests/src/cprog.rs)
  # python3-venv: for the manifest check's kubernetes-validate (below). Its kustomize render
  # needs kubectl >= 1.24 (kustomize v4+), which Debian 12 does not package (its
  # kubernetes-client is 1.20); without one the check validates the files only and says so.
  # golang-go, openssl: the cluster tier's Kubernetes build (scripts/kube-build.sh) and certificates
  want+=(containerd docker.io crun protobuf-compiler iproute2 libc6-dev podman conmon python3-venv debootstrap
    golang-go openssl)
  # libseccomp-dev, pkg-config: runc 1.4's seccomp support, built with cgo (scripts/runc-build.sh)
  want+=(libseccomp-dev pkg-config)
  # libcap-dev: crun's capability support, built from its source package (scripts/crun-build.sh)
  want+=(libcap-dev)
  # CRIU 4.2's build, from its source package (scripts/criu-build.sh), for the runc tier's
  # checkpoint test: protobuf-c and its compiler, netlink, libnet, libaio, nftables, libbsd,
  # gnutls and libuuid headers
  want+=(libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler libnl-3-dev libnet1-dev libaio-dev
    libnftables-dev libbsd-dev libgnutls28-dev uuid-dev)
  # strace: the hook's lookup count for a fixed request (tests/tests/suite/vendor_nvidia.rs)
  want+=(strace)
  # uidmap: newuidmap and newgidmap, for rootless podman (tests/tests/suite/podman_rootless.rs)
  want+=(uidmap)
  # docker-registry (the CNCF distribution registry) and skopeo: the multi-arch image pushed to a
  # real registry and pulled by each engine (tests/tests/arm64/image_multiarch.rs)
  want+=(docker-registry skopeo)
  # The grpc-java client of the device plugin's interop test (tests/clients/java, built below):
  # the JDK, grpc-java and its stub generator, protobuf-java, and what grpc-java needs at run time
  # that its package does not depend on (guava, perfmark, gson). Debian builds Netty without its
  # epoll JNI library, so the Unix socket comes from junixsocket (its JNI library is packaged).
  # geronimo-annotation: javax.annotation.Generated, which the generated stubs carry.
  want+=(default-jdk-headless libgrpc-java protobuf-compiler-grpc-java-plugin libprotobuf-java libnetty-java
    libguava-java libperfmark-java libgoogle-gson-java libjunixsocket-java libgeronimo-annotation-1.3-spec-java)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing ${missing[*]}; run as root (or apt-get install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python tools live in virtualenvs under target/, so the system Python stays untouched.
# venv DIR IMPORTS PACKAGE...: makes DIR with PACKAGEs unless python there can import IMPORTS.
venv() {
  local dir=$1 imports=$2
  shift 2
  if ! "$dir/bin/python" -c "import $imports" 2>/dev/null; then
    echo "install-deps: installing $* into $dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
  fi
}

# java_client DIR ROOT: builds tests/clients/java/DevicePluginClient.java with stubs that protoc's
# grpc-java plugin makes from the device plugin's proto into DIR, and DIR/bin/device-plugin-client,
# which runs it on Debian's jars. Rebuilt only when the sources or the jar list change.
java_client() {
  local dir=$1 root=$2 jars=() j
  for j in grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub protobuf \
    guava perfmark-api gson netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-common \
    netty-handler netty-resolver netty-transport netty-transport-native-unix-common jctools-core \
    junixsocket-common; do
    jars+=("/usr/share/java/$j.jar")
  done
  local proto=$root/bins/device-plugin/src/api/deviceplugin_v1beta1.proto
  local src=$root/tests/clients/java/DevicePluginClient.java
  local stamp
  stamp=$({ cat "$proto" "$src"; echo "$dir ${jars[*]}"; } | sha256sum)
  if [ "$(cat "$dir/inputs.sha256" 2>/dev/null)" = "$stamp" ]; then
    return
  fi
  echo "install-deps: building the grpc-java client into $dir"
  local cp
  cp=$(IFS=:; echo "${jars[*]}")
  rm -rf "$dir"
  mkdir -p "$dir/stubs" "$dir/classes" "$dir/bin"
  # Debian's protoc, whose version is protobuf-java's (another on PATH may not be).
  /usr/bin/protoc -I"$(dirname "$proto")" --java_out="$dir/stubs" \
    --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin --grpc-java_out="$dir/stubs" "$proto"
  javac -nowarn -d "$dir/classes" -cp "$cp:/usr/share/java/geronimo-annotation-1.3-spec.jar" \
    "$dir"/stubs/v1beta1/*.java "$src"
  printf '#!/bin/sh\nexec java -cp %s DevicePluginClient "$@"\n' "'$dir/classes:$cp'" \
    >"$dir/bin/device-plugin-client"
  chmod +x "$dir/bin/device-plugin-client"
  echo "$stamp" >"$dir/inputs.sha256"
}

if [ "${1:-test}" = test ]; then
  target=$(cd "$(dirname "$0")/.." && pwd)/target
  # The manifest check (scripts/check-manifests.py) validates deploy/ against the Kubernetes
  # OpenAPI schemas with kubernetes-validate, which ships them (no network needed at check time).
  venv "${DEVINJECT_PY_VENV:-$target/manifest-venv}" 'kubernetes_validate, yaml' \
    'kubernetes-validate==1.37.0' 'PyYAML>=6'
  # A real gRPC client that is not built on our HTTP/2 stack, for the device plugin's interop
  # test (tests/tests/suite/device_plugin_real_clients.rs): Python grpcio (gRPC C-core) sends the
  # socket path as the HTTP/2 :authority, as kubelets before 1.26 do.
  venv "${DEVINJECT_GRPC_VENV:-$target/grpc-venv}" 'grpc, grpc_tools' \
    'grpcio==1.66.2' 'grpcio-tools==1.66.2'
  # The same test's grpc-java client, which sends the socket path as :authority too.
  java_client "${DEVINJECT_GRPC_JAVA:-$target/grpc-java}" "$(dirname "$target")"
fi
