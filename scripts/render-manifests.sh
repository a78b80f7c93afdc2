#!/usr/bin/env bash
# Renders the kustomizations users apply without kustomize into plain manifests (for
# `kubectl apply -f`): deploy/base into deploy/devinject.yaml, deploy/overlays/nri into
# deploy/devinject-nri.yaml, deploy/overlays/webhook into deploy/devinject-webhook.yaml and
# deploy/overlays/dra into deploy/devinject-dra.yaml, after writing the DRA overlay's
# DeviceClasses (deploy/overlays/dra/deviceclasses.yaml) with `devinject-dra device-classes`
# from deploy/base/profiles. Needs kubectl (kustomize is built in) and cargo;
# scripts/check-manifests.py checks that the rendered files are up to date, and the dra crate's
# tests that the DeviceClasses are.
set -euo pipefail
cd "$(dirname "$0")/.."
render() {
  local kdir=$1 out=$2
  {
    echo "# Rendered from $kdir by scripts/render-manifests.sh; do not edit by hand."
    kubectl kustomize "$kdir"
  } > "$out"
  echo "wrote $out"
}
{
  echo "# Written by scripts/render-manifests.sh (devinject-dra device-classes --profiles-dir deploy/base/profiles); do not edit by hand."
  cargo run --quiet -p devinject-dra -- device-classes --profiles-dir deploy/base/profiles
} > deploy/overlays/dra/deviceclasses.yaml
echo "wrote deploy/overlays/dra/deviceclasses.yaml"
render deploy/base deploy/devinject.yaml
render deploy/overlays/nri deploy/devinject-nri.yaml
render deploy/overlays/webhook deploy/devinject-webhook.yaml
render deploy/overlays/dra deploy/devinject-dra.yaml
