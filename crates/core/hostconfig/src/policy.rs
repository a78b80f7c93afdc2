//! The request policy settings: which container requests the hook and the runtime shim honour
//! (docs/policy.md). The hook's `policy` module applies them.

use serde::Deserialize;

/// Which requests the hook and shim honour (`policy` in the host config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RequestPolicy {
    /// Kubernetes containers get only what the kubelet granted them; other containers are
    /// handled by [`NonKubernetes`].
    #[default]
    Kubernetes,
    /// Every request is honoured: the caller is trusted (plain docker, podman, runc).
    Env,
}

/// Under the Kubernetes policy, what a container without CRI annotations gets
/// (`non_kubernetes` in the host config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum NonKubernetes {
    /// Its request is honoured as under the env policy: only root on the node starts such
    /// containers (`ctr run`, `nerdctl`, `docker run`).
    #[default]
    Env,
    /// Its request is refused: only the kubelet's containers get devices on this node.
    Refuse,
}

/// Under the Kubernetes policy, what happens to a request the kubelet did not grant
/// (`on_denied` in the host config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum OnDenied {
    /// The container fails to start, with a message saying why (exit code 9).
    #[default]
    Fail,
    /// The container starts without the devices; the refusal is logged as a warning. For
    /// clusters running images that set the request variable themselves (CUDA images set
    /// `NVIDIA_VISIBLE_DEVICES=all`).
    Ignore,
}

/// The policy part of the host config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicySettings {
    /// Which requests are honoured.
    pub policy: RequestPolicy,
    /// Containers without CRI annotations.
    pub non_kubernetes: NonKubernetes,
    /// Requests the kubelet did not grant.
    pub on_denied: OnDenied,
}
