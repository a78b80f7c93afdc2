//! What the four long-running components (the device plugin, the NRI plugin, the webhook and
//! the DRA driver) share for Prometheus, and nothing else: each component's own metric
//! families live in its own `metrics` module.
//!
//! - [`accept_failures`]: failed `accept`s paced and logged at a bounded rate, for every server
//!   the components run;
//! - [`address`]: the `--metrics-address` flag (`off`, an IP, or an IP and a port) and each
//!   component's fixed default port;
//! - [`build_info`]: `devinject_build_info{component, version} 1`;
//! - [`endpoint`]: `GET /metrics` over plain HTTP on a thread of its own, every connection
//!   accepted as it comes, a cap on those open, each within its deadlines;
//! - [`labels`]: the outcome and reason label sets several components count by;
//! - [`text`]: a registry's text exposition.
//!
//! The metrics are those of the official `prometheus-client` crate, re-exported as
//! [`prometheus_client`] so that every component encodes with the same version.
//!
//! # Exposure
//! A binary given no flag binds loopback only: nothing is exposed that the manifests did not
//! ask for. The manifests bind the pod's own IP (the downward API's `status.podIP`), which the
//! pods' own network namespace holds (none of them is `hostNetwork`): Prometheus reaches it,
//! and nothing listens on the node's addresses. See docs/operations.md.
#![warn(missing_docs)]

pub mod accept_failures;
pub mod address;
pub mod build_info;
pub mod endpoint;
pub mod labels;
pub mod text;

pub use accept_failures::AcceptFailures;
pub use address::{AddressError, MetricsAddress};
pub use build_info::register_build_info;
pub use endpoint::{serve, serve_with, start, Endpoint, EndpointError, Limits};
pub use labels::{OutcomeLabels, ReasonLabels};
pub use prometheus_client;
pub use text::text_of;
