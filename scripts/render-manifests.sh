#!/usr/bin/env bash
# Renders deploy/base into the plain manifest deploy/devinject.yaml (for `kubectl apply -f`
# without kustomize). Needs kubectl (kustomize is built in); scripts/check-manifests.py checks
# that the file is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# Rendered from deploy/base by scripts/render-manifests.sh; do not edit by hand."
  kubectl kustomize deploy/base
} > deploy/devinject.yaml
echo "wrote deploy/devinject.yaml"
