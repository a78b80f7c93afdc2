//! What the node service and the driver say to each other: a claim as the kubelet names it, and
//! the devices prepared for it. Both gRPC versions (`v1`, `v1beta1`) map to these types, so the
//! driver is written once.

use std::future::Future;

/// A claim as the kubelet names it; the rest is read from the API server.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ClaimRef {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID: the key of every answer.
    pub uid: String,
}

/// One device prepared for a claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreparedDevice {
    /// The claim's requests this device was allocated for.
    pub request_names: Vec<String>,
    /// The device's pool.
    pub pool_name: String,
    /// The device's name in its pool.
    pub device_name: String,
    /// Fully qualified CDI device ids the runtime injects.
    pub cdi_device_ids: Vec<String>,
}

/// The driver behind the node service. Errors are the one-line text the kubelet shows in the
/// pod's events: they name the claim and the fix.
pub trait Claims: Send + Sync + 'static {
    /// Prepares `claim` (idempotent: a second call answers as the first did).
    fn prepare(
        &self,
        claim: ClaimRef,
    ) -> impl Future<Output = Result<Vec<PreparedDevice>, String>> + Send;
    /// Undoes [`Claims::prepare`] (idempotent: an unknown claim is already unprepared).
    fn unprepare(&self, claim: ClaimRef) -> impl Future<Output = Result<(), String>> + Send;
}
