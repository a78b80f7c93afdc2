# shellcheck shell=bash
# runtimes_with_containerd FETCHED BUILT OUT: makes OUT the releases of FETCHED
# (scripts/runtimes-fetch.sh's dir), linked, with containerd 2 replaced by the release dir BUILT
# (scripts/containerd-build.sh's), for a DEVINJECT_RUNTIMES on which the cluster tests' nodes
# run the built containerd; prints OUT.
runtimes_with_containerd() {
  local fetched=$1 built=$2 out=$3 release
  rm -rf "$out" && mkdir -p "$out"
  for release in "$fetched"/*/; do
    release=${release%/}
    [ -d "$release/bin" ] || continue
    ln -s "$release" "$out/${release##*/}"
  done
  rm -f "$out/containerd-2"
  ln -s "$built" "$out/containerd-2"
  echo "$out"
}
