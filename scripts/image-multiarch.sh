#!/usr/bin/env bash
# The multi-arch image's test: builds the image for linux/amd64 and linux/arm64 (every shipped
# binary, the arm64 half cross-built: several minutes of 2 cores the first time), then runs the
# files marked `multiarch` in tests/tiers.txt, which push the OCI image layout to a real
# registry and pull each half through docker, containerd and CRI-O. Not in scripts/test.sh: the
# arm64 half's build is CPU a CI run spends on its tests, and the image's assembly changes only
# with scripts/build-image.sh and scripts/lib/oci-image.py; run it after a change to either
# (docs/testing.md). Needs root. PROFILE (dev, the default here, or release) is the image's
# profile. Extra arguments go to cargo test (e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
export PROFILE=${PROFILE:-dev}
scripts/install-deps.sh test
scripts/install-deps.sh cross
DEVINJECT_RUNC=$(scripts/runc-build.sh)
DEVINJECT_CRIO_BIN=$(scripts/crio-build.sh)
DEVINJECT_RUNTIMES=$(scripts/runtimes-fetch.sh)
DEVINJECT_MULTIARCH_IMAGE=$PWD/$(PLATFORMS=linux/amd64,linux/arm64 scripts/build-image.sh)
export DEVINJECT_RUNC DEVINJECT_CRIO_BIN DEVINJECT_RUNTIMES DEVINJECT_MULTIARCH_IMAGE
# shellcheck source=scripts/lib/tiers.sh
. scripts/lib/tiers.sh
check_tiers
cargo build --workspace --bins --quiet
tier_test multiarch "$@"
