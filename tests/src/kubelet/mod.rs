//! A kubelet stand-in for device plugin tests, the simulated host it runs against, and the
//! DRA driver run on that host against an API server stand-in.
//!
//! - [`fake_kubelet`]: `Registration` server on a temp `kubelet.sock`; on `Register` it dials the
//!   plugin back, calls `GetDevicePluginOptions` and opens one `ListAndWatch` stream, as the
//!   kubelet does, and hands the connection to the test;
//! - [`host`]: a temp directory holding a dev root (nodes made with mknod), a sys root, the
//!   device-plugins directory and a profiles directory;
//! - [`plugin_process`]: builds and runs the real `devinject-device-plugin` binary;
//! - [`fake_apiserver`]: as much of an API server as the DRA driver needs without a cluster
//!   (empty lists, quiet watches, applies recorded);
//! - [`dra_process`]: runs the real `devinject-dra` binary on a [`host`] against it.
//!
//! Tests that need root use [`crate::skip`].

use std::future::Future;
use std::time::Duration;

pub mod dra_process;
pub mod fake_apiserver;
pub mod fake_kubelet;
pub mod host;
pub mod plugin_process;

/// Awaits `future`, panicking with `what` if it takes longer than `limit`. Tests wait for
/// readiness this way instead of sleeping.
pub async fn within<F: Future>(limit: Duration, what: &str, future: F) -> F::Output {
    match tokio::time::timeout(limit, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}
