//! CRI-O through its CRI API on runc 1.4.
//!
//! Each file is a module, run by scripts/test.sh in a process of its own with the filter
//! `<module>::` (scripts/lib/tiers.sh); tests/tiers.txt says in which passes.

mod crio_cri;
