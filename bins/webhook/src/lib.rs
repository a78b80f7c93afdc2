//! `devinject-webhook`: a mutating admission webhook for friendly device names (docs/prepare.md).
//!
//! A pod asks for a function by a friendly resource name (`fpga.intel.com/arria10-nlb3`) that
//! a profile's `prepare.functions` table defines; the webhook rewrites it to the resource the
//! device plugin serves and names the function in the container's function variable, which the
//! hook, the shim and the NRI plugin check against what the kubelet granted before the profile's
//! prepare program loads it.
//!
//! - [`mutate`]: the pure pod rewrite (a JSON Patch) or a refusal with its message.
//! - [`review`]: the `admission.k8s.io/v1` AdmissionReview exchange.
//! - [`server`]: the HTTPS server (rustls, hyper).
//! - [`certs`]: the self-signed bootstrap (`devinject-webhook certs`).
//! - [`metrics`]: reviews by outcome and their latency, for Prometheus.

pub mod certs;
pub mod metrics;
pub mod mutate;
pub mod review;
pub mod server;
