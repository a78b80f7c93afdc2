//! The real [`GrantSource`]: the kubelet's pod-resources API, asked in-process with
//! `devinject-podresources`' blocking client, only when a Kubernetes container asks for devices.
//!
//! The client is one gRPC unary call per RPC on a connection of its own (no async runtime, no
//! thread, every descriptor closed when it returns), `Get` falling back to `List`, all under
//! `pod_resources_timeout_ms`. The hook and the shim once executed the client as a helper
//! process (`devinject-podresources`, now a tool for asking by hand) so as not to link it;
//! measured at 100 pods, starting that process cost as much as the call itself
//! (docs/benchmarks.md, section 6, "The policy's lookup in-process"), and the client starts nothing of its own,
//! so it is linked.

use std::path::PathBuf;
use std::time::Duration;

use devinject_hostconfig::HostConfig;
use devinject_kubelet::answer::Answer;
use devinject_kubelet::pod_resources::{answer, PodResourcesClient, PodResourcesError};

use super::GrantSource;

/// The kubelet's pod-resources API on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResources {
    /// The kubelet's socket.
    pub socket: PathBuf,
    /// How long the kubelet may take for the whole lookup.
    pub timeout: Duration,
}

impl PodResources {
    /// The socket and deadline the host config names (`pod_resources_socket`,
    /// `pod_resources_timeout_ms`). Nothing is dialled until a lookup.
    pub fn from_config(config: &HostConfig) -> Self {
        Self {
            socket: config.pod_resources_socket.clone(),
            timeout: Duration::from_millis(config.pod_resources_timeout_ms),
        }
    }
}

impl GrantSource for PodResources {
    fn lookup(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<Answer, PodResourcesError> {
        let started = std::time::Instant::now();
        let lookup = PodResourcesClient::new(&self.socket, self.timeout).pod(namespace, pod)?;
        tracing::debug!(
            socket = %self.socket.display(),
            rpc = %lookup.answered_by,
            elapsed_us = started.elapsed().as_micros() as u64,
            "the kubelet answered"
        );
        Ok(answer::for_container(&lookup, container))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn built_from_the_host_config() {
        let p = Path::new("/c.toml");
        let c = HostConfig::parse(
            "pod_resources_socket = \"/k/pr.sock\"\npod_resources_timeout_ms = 50\n",
            p,
        )
        .unwrap();
        let k = PodResources::from_config(&c);
        assert_eq!(k.socket, Path::new("/k/pr.sock"));
        assert_eq!(k.timeout, Duration::from_millis(50));
    }

    /// Failures are the client's, named with the socket and the fix.
    #[test]
    fn a_missing_socket_is_named() {
        let t = tempfile::tempdir().unwrap();
        let socket = t.path().join("kubelet.sock");
        let k = PodResources {
            socket: socket.clone(),
            timeout: Duration::from_millis(100),
        };
        let err = k.lookup("ml", "trainer", "main").unwrap_err();
        assert!(
            matches!(err, PodResourcesError::SocketMissing { .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&socket.display().to_string()) && text.contains("pod_resources_socket"),
            "{text}"
        );
    }
}
