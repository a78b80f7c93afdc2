//! Kubernetes device plugin driven by devinject profiles.

pub mod api;
