//! The suite on the machine's runc: containerd, docker and podman paths, the device plugin and
//! the pod-resources clients, the request policy, the decision log, hostile input and races, the
//! vendors' driver stacks, and the shape of the workspace.
//!
//! Each file is a module, run by scripts/test.sh in a process of its own with the filter
//! `<module>::` (scripts/lib/tiers.sh); tests/tiers.txt says in which passes.

mod containerd_cdi;
mod containerd_config;
mod containerd_cri;
mod containerd_events;
mod containerd_nri;
mod device_plugin;
mod device_plugin_real_clients;
mod device_plugin_runc;
mod docker_shim;
mod docker_userns_remap;
mod dockerd_config;
mod dra_driver;
mod hostile_concurrency;
mod hostile_env;
mod hostile_input;
mod hostile_orphans;
mod hostile_race;
mod module_graph;
mod podman_cdi;
mod podman_hooksd;
mod podman_rootless;
mod podresources_client;
mod podresources_helper;
mod podresources_threads;
mod runc_decision_log;
mod runc_policy;
mod vendor_amd;
mod vendor_intel;
mod vendor_nvidia;
mod vendor_nvidia_engines;
mod vendor_nvidia_hostile;
mod vendor_nvidia_toolkit;
