//! `devinject-nri`: devinject as an NRI plugin. containerd (1.7 with NRI enabled, 2.x by
//! default) asks the plugin about every container it creates; the plugin runs the same
//! admission as the runtime shim (request from env or annotation, the host's request policy,
//! the planner) and answers with the devices, env and finish hook as a container adjustment.
//! No runtime entry, no engine configuration edit, no restart: the plugin connects to the NRI
//! socket and is in; it stops and is out.
//!
//! - [`mux`]: NRI's two connections over one socket.
//! - [`framing`]: ttrpc messages on a connection; [`envelope`]: ttrpc's request and response.
//! - [`api`]: the NRI messages (our own subset of NRI's protocol, `proto/`).
//! - [`session`]: register, then serve, over one connection, each container on its own thread.
//! - [`plugin`]: what each call does; [`adjust`]: a plan as an adjustment.
//! - [`budget`]: how long a request may take (the runtime drops a plugin that is late).
//! - [`metrics`]: what the plugin answered, for Prometheus.

pub mod adjust;
pub mod budget;
pub mod error;
pub mod framing;
pub mod metrics;
pub mod mux;
pub mod plugin;
#[cfg(test)]
mod refusal_tests;
pub mod session;

/// NRI's messages (`proto/nri.proto`).
#[allow(missing_docs)]
pub mod api {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

/// ttrpc's envelopes (`proto/ttrpc.proto`).
#[allow(missing_docs)]
pub mod envelope {
    include!(concat!(env!("OUT_DIR"), "/ttrpc.rs"));
}

pub use error::NriError;
