//! The arm64 tier: the hook and the shim in an arm64 guest under qemu-system-aarch64.
//!
//! Each file is a module, run by scripts/test.sh in a process of its own with the filter
//! `<module>::` (scripts/lib/tiers.sh); tests/tiers.txt says in which passes.

mod arm64_guest;
mod image_multiarch;
