//! devinject's DRA driver: a kubelet plugin for Dynamic Resource Allocation (`resource.k8s.io/v1`)
//! driven by the same profiles as the device plugin. It publishes the discovered devices as
//! ResourceSlices, and prepares an allocated claim by writing a transient CDI spec with the
//! planner's edits (docs/dra.md).
#![warn(missing_docs)]

pub mod api;
pub mod binding;
pub mod checkpoint;
pub mod claim;
pub mod claim_spec;
pub mod claim_status;
pub mod device_metadata;
pub mod device_watch;
pub mod driver;
pub mod health;
pub mod metrics;
pub mod naming;
pub mod node_service;
pub mod plugin_holds;
pub mod prepared;
pub mod registration;
pub mod serve;
pub mod slices;
pub mod taint_rules;
pub mod watch_log;
