//! The runc tier: the hook and the shim under the real runc (the machine's, then runc 1.5),
//! and the hostile images, filesystems and node groups they must refuse.
//!
//! Each file is a module, run by scripts/test.sh in a process of its own with the filter
//! `<module>::` (scripts/lib/tiers.sh); tests/tiers.txt says in which passes.

mod docker_28;
mod hostile_filesystems;
mod hostile_matrix;
mod hostile_node_group;
mod hostile_rootfs;
mod library_names;
mod runc_cgroup_v2;
mod runc_checkpoint;
mod runc_hook;
mod runc_non_root;
mod runc_prepare;
mod runc_shim;
