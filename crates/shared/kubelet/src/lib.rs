//! What devinject's programs share with the kubelet: asking it what a container was granted, and
//! serving it on a Unix socket.
//!
//! - [`answer`]: what the request policy learns about one container, and what
//!   `devinject-podresources` (bins/podresources) prints (plain serde, no gRPC). Always built.
//! - [`grpc`] and [`pod_resources`] (feature `client`): one blocking gRPC unary call with no
//!   async runtime, and the pod-resources client the hook, the shim, the NRI plugin and
//!   `devinject-podresources` make it with.
//! - [`serve`], [`socket`], [`connections`] and [`authority`] (feature `serve`): the device
//!   plugin's and the DRA driver's gRPC servers. [`serve`] runs one on a kubelet-facing socket
//!   and removes the socket when it stops; [`socket`] binds it under one rule and removes a
//!   socket nobody listens on; [`connections`] bounds the connections served on it (a cap, a
//!   deadline for the HTTP/2 preface, keepalive); [`authority`] serves clients that send the
//!   socket path as the HTTP/2 `:authority`. Behind a feature so the hook links no tokio.
#![warn(missing_docs)]

pub mod answer;

#[cfg(feature = "client")]
pub mod grpc;
#[cfg(feature = "client")]
pub mod pod_resources;

#[cfg(feature = "serve")]
pub mod authority;
#[cfg(feature = "serve")]
pub mod connections;
#[cfg(feature = "serve")]
pub mod serve;
#[cfg(feature = "serve")]
pub mod socket;
