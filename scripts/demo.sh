#!/usr/bin/env bash
# The main job: build devinject, then run a real runc container that asks for two simulated
# `demo` accelerators and print what it sees. Needs root (mknod, runc). Installs runc,
# busybox-static and gcc with apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh demo
cargo build --quiet -p devinject-oci -p devinject-harness --bins
exec "$PWD/target/debug/devinject-demo" "$PWD/target/debug/devinject-hook"
