#!/usr/bin/env bash
# Renders the kustomizations users apply without kustomize into plain manifests (for
# `kubectl apply -f`): deploy/base into deploy/devinject.yaml, deploy/overlays/nri into
# deploy/devinject-nri.yaml and deploy/overlays/webhook into deploy/devinject-webhook.yaml. Needs kubectl (kustomize is built in); scripts/check-manifests.py
# checks that both files are up to date.
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
render deploy/base deploy/devinject.yaml
render deploy/overlays/nri deploy/devinject-nri.yaml
render deploy/overlays/webhook deploy/devinject-webhook.yaml
