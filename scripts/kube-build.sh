#!/usr/bin/env bash
# Builds the real Kubernetes components the cluster test tier runs (tests/src/cluster/): kubelet,
# kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 from Debian 12's
# `kubernetes` source package (its orig tarball is the whole upstream tree with vendor/), with
# Debian's Go in GOPATH mode; etcd and kubectl from Debian 12's binary packages, unpacked, never
# installed. Everything lands in one cache dir, reused by later runs:
#
#   ${DEVINJECT_KUBE_CACHE:-$HOME/.cache/devinject/kubernetes-1.20.2}/bin
#
# The packages come through a private apt configuration whose sources are this machine's own
# (same mirrors, suites, components and keys) with deb-src added: the machine's apt sources and
# package state are never touched. Prints the bin dir on success. With --if-built it builds
# nothing: it prints the bin dir when everything is there, and fails otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.20.2
cache=${DEVINJECT_KUBE_CACHE:-$HOME/.cache/devinject/kubernetes-$version}
bin=$cache/bin
servers=(kubelet kube-apiserver kube-controller-manager kube-scheduler)

complete() {
  for b in "${servers[@]}" etcd kubectl; do [ -x "$bin/$b" ] || return 1; done
}
if complete; then echo "$bin"; exit 0; fi
[ "${1:-}" = --if-built ] && exit 1
command -v go >/dev/null || { echo "kube-build: needs Go (apt-get install golang-go; scripts/install-deps.sh test)" >&2; exit 1; }
mkdir -p "$bin"

# A private apt: its own lists, cache, state and (empty) configuration parts; its sources are the
# machine's deb822 and one-line sources for this release's suites, each also as deb-src.
apt_dir=$cache/apt
mkdir -p "$apt_dir"/{lists/partial,cache/archives/partial,parts,sources.d,state}
python3 - "$apt_dir/sources.d/machine.sources" <<'PY'
import glob, re, sys
codename = dict(l.strip().split("=", 1) for l in open("/etc/os-release") if "=" in l)["VERSION_CODENAME"].strip('"')
stanzas = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for block in re.split(r"\n\s*\n", open(path).read()):
        fields = {}
        for line in block.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
        if fields.get("Enabled", "yes") == "no" or "URIs" not in fields:
            continue
        suites = [s for s in fields.get("Suites", "").split() if s.split("-")[0] == codename]
        if suites:
            fields["Suites"], fields["Types"] = " ".join(suites), "deb deb-src"
            stanzas.append(fields)
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        continue
    for line in lines:
        m = re.match(r"^deb\s+(\[[^]]*\]\s+)?(\S+)\s+(\S+)\s+(.+)$", line.strip())
        if m and m.group(3).split("-")[0] == codename:
            opts = dict(o.split("=", 1) for o in (m.group(1) or "").strip("[] \n").split() if "=" in o)
            f = {"Types": "deb deb-src", "URIs": m.group(2), "Suites": m.group(3), "Components": m.group(4)}
            if "signed-by" in opts:
                f["Signed-By"] = opts["signed-by"]
            stanzas.append(f)
if not stanzas:
    sys.exit("kube-build: no apt source for this release (%s) in /etc/apt" % codename)
with open(sys.argv[1], "w") as out:
    out.write("\n\n".join("\n".join(f"{k}: {v}" for k, v in s.items()) for s in stanzas) + "\n")
PY
cat >"$apt_dir/apt.conf" <<CONF
Dir::State "$apt_dir/state";
Dir::State::Lists "$apt_dir/lists";
Dir::State::status "/var/lib/dpkg/status";
Dir::Cache "$apt_dir/cache";
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "$apt_dir/sources.d";
Dir::Etc::Parts "$apt_dir/parts";
Acquire::Check-Valid-Until "false";
CONF
export APT_CONFIG=$apt_dir/apt.conf
apt-get -qq -o APT::Sandbox::User=root update
work=$cache/work
mkdir -p "$work"

# etcd and kubectl: the packages' binaries, unpacked.
if [ ! -x "$bin/etcd" ] || [ ! -x "$bin/kubectl" ]; then
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root download etcd-server kubernetes-client)
  for deb in "$work"/etcd-server_*.deb "$work"/kubernetes-client_*.deb; do
    dpkg-deb -x "$deb" "$work/unpacked"
  done
  install -m 0755 "$work/unpacked/usr/bin/etcd" "$work/unpacked/usr/bin/kubectl" "$bin/"
fi

# The source tree: the orig tarball only (the upstream tree; Debian's patches concern its own
# packaging of kubectl).
tree=$work/kubernetes
if [ ! -d "$tree/cmd/kubelet" ]; then
  (cd "$work" && apt-get -qq -o APT::Sandbox::User=root source --download-only kubernetes)
  orig=$(ls "$work"/kubernetes_*.orig.tar.* | head -n1)
  rm -rf "$tree.tmp" && mkdir -p "$tree.tmp"
  tar -C "$tree.tmp" --strip-components=1 -xf "$orig"
  mv "$tree.tmp" "$tree"
fi

export GOPATH=$cache/gopath GOCACHE=$cache/gocache GO111MODULE=off GOFLAGS= GOPROXY=off GOTOOLCHAIN=local
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$tree" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

# kube-apiserver needs the OpenAPI definitions upstream's make generates: the vendored
# openapi-gen over every package tagged `+k8s:openapi-gen=`, as build/root/Makefile.generated_files does.
openapi=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -s "$openapi" ]; then
  go build -o "$cache/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  inputs=$(grep -rl --include='*.go' -e '+k8s:openapi-gen=' pkg staging/src/k8s.io vendor/k8s.io 2>/dev/null \
    | xargs -n1 dirname | sort -u \
    | sed -e 's|^staging/src/||' -e 's|^vendor/||' -e 's|^pkg/|k8s.io/kubernetes/pkg/|' \
    | paste -sd, -)
  "$cache/openapi-gen" --go-header-file hack/boilerplate/boilerplate.generatego.txt \
    --input-dirs "$inputs" --output-base "$GOPATH/src" \
    --output-package k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    --report-filename /dev/null
fi

ver=k8s.io/kubernetes/vendor/k8s.io/component-base/version
cgo=k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version
ldflags="-s -w"
for pkg in $ver $cgo; do
  ldflags+=" -X $pkg.gitVersion=v$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=20 -X $pkg.gitTreeState=archive"
done
for b in "${servers[@]}"; do
  [ -x "$bin/$b" ] && continue
  echo "kube-build: building $b (minutes on a small machine)" >&2
  go build -ldflags "$ldflags" -o "$bin/$b.tmp" "./cmd/$b"
  mv "$bin/$b.tmp" "$bin/$b"
done
complete
echo "$bin"
