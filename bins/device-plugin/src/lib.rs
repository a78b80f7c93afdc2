//! Kubernetes device plugin driven by devinject profiles.
//!
//! One daemon serves every selected profile as one extended resource, each on its own Unix
//! socket in the kubelet's device-plugins directory, speaking the kubelet's v1beta1 API
//! ([`api`]). How the parts connect:
//!
//! - [`daemon`] loads the profiles, starts the tasks below for each resource, supervises them and
//!   handles SIGTERM/SIGINT;
//! - [`source`] finds a profile's devices (`devinject_discovery::discover`) and says which paths to
//!   watch; [`health`] watches them with inotify, reads the devices' health attributes again on
//!   one timer for the daemon, and publishes an [`advertisement::Advertisement`] (devices,
//!   health, NUMA node, replica ids) on a `tokio::sync::watch` channel on every change;
//! - [`kubelet`] serves the [`service`] on a fresh socket, registers, and registers again when the
//!   kubelet restarts, the socket is removed or the `ListAndWatch` stream is lost;
//! - [`authority`] sits between the socket and the gRPC server: it makes the socket-path
//!   `:authority` of kubelets before 1.26 (and of C-core and Java gRPC clients) acceptable to it,
//!   on connections held to the bounds of `devinject_kubelet::connections`;
//! - [`service`] answers the kubelet: `ListAndWatch` from the channel, `Allocate` with
//!   [`allocate`] (env and annotations only, stateless), `GetPreferredAllocation` with
//!   [`preferred`] (topology-aware, pure);
//! - [`claim_holds`] reads the kubelet's pod-resources for the devices prepared DRA claims
//!   hold and marks them on the advertisements, so a node served by both paths never gives a
//!   device twice;
//! - [`error`] maps every refusal to a gRPC status in one place;
//! - [`metrics`] counts what the parts above do, for Prometheus; [`node_refusals`] counts the
//!   refusals the hook, the shim and the NRI plugin wrote to the node's decision log.
//!
//! Devices, kubelet restarts and the health a driver notifies arrive as inotify events; the one
//! timer reads health attributes, which sysfs raises no event for unless the driver calls
//! `sysfs_notify` (each profile's `discovery.health_interval_ms`, one read per device), and
//! `ListAndWatch` sends only when the advertisement changes.

pub mod advertisement;
pub mod allocate;
pub mod api;
pub mod claim_holds;
/// The `:authority` rewriter, in its own crate since the DRA driver serves the same kubelet.
pub use devinject_kubelet::authority;
pub mod daemon;
pub mod error;
pub mod health;
pub mod kubelet;
pub mod metrics;
pub mod node_refusals;
pub mod preferred;
pub mod resource;
pub mod service;
pub mod source;

pub use daemon::{run, DaemonConfig, DaemonError};
