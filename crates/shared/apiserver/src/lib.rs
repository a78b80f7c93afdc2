//! What a node component needs of the Kubernetes API server.
//!
//! - [`config`]: the client's configuration, from `--kubeconfig` or the pod's service account,
//!   with the token kept readable across a chroot and plain HTTP refused beyond loopback;
//! - [`pod_events`]: the refusals of the node's decision log as Events on their pods, so that
//!   `kubectl describe pod` says why a container did not start, rate-limited and bounded.
#![warn(missing_docs)]

pub mod config;
pub mod pod_events;

pub use config::{install_tls_provider, ApiClientError, ApiConfig};
