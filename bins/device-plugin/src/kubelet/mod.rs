//! Everything that talks to the kubelet about one resource, apart from the gRPC service itself.
//!
//! - [`socket`]: the sockets our profiles' earlier processes left, removed at start (serving and
//!   dialling a socket is `devinject_kubelet::serve`);
//! - [`registration`]: the `Register` call to `kubelet.sock`;
//! - [`watch`]: inotify on the device-plugins directory (kubelet restarts, removed sockets);
//! - [`lifecycle`]: per resource, serve a fresh socket, register, and start over whenever the
//!   kubelet restarts, the socket is removed or the `ListAndWatch` stream is lost.

pub mod lifecycle;
pub mod registration;
pub mod socket;
pub mod watch;
