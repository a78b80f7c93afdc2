#!/usr/bin/env bash
# The whole test suite: lints, docs, unit tests and the integration tests against real runc,
# docker and containerd. Needs root for the runtime tests; under CI=true nothing may skip.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --quiet
cargo build --workspace --bins --quiet
cargo test --workspace --no-fail-fast
