//! The cluster tier: a real Kubernetes control plane and kubelets, each file on clusters of its
//! own (docs/testing.md, "The cluster tier").
//!
//! Each file is a module, run by scripts/test.sh in a process of its own with the filter
//! `<module>::` (scripts/lib/tiers.sh); tests/tiers.txt says in which passes.

mod cluster;
mod cluster_binpack;
mod cluster_churn;
mod cluster_crio;
mod cluster_dra;
mod cluster_dra_nvidia;
mod cluster_engine_paths;
mod cluster_fleet;
mod cluster_helm;
mod cluster_install;
mod cluster_install_dra;
mod cluster_install_nri;
mod cluster_install_webhook;
mod cluster_webhook;
