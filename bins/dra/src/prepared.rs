//! What the node service and the driver say to each other: a claim as the kubelet names it, and
//! the devices prepared for it. Both gRPC versions (`v1`, `v1beta1`) map to these types, so the
//! driver is written once.

use std::future::Future;
use std::time::{Duration, Instant};

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
    /// The allocation's share of a device shared by capacity, as the claim's allocation
    /// names it; `None` for a device allocated whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
}

/// When the kubelet stops waiting for a call's answer: every claim of the call must be
/// answered by then, a slow one with an error, so that the answers of the others arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// What the driver assumes when the kubelet sends no `grpc-timeout`: a little under the
    /// kubelet's own call timeout.
    pub const DEFAULT: Duration = Duration::from_secs(40);

    /// The deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// The deadline of a call whose `grpc-timeout` header is `header` (none: [`Self::DEFAULT`]),
    /// kept a tenth (at most a second) short of it so that the answer travels in time.
    pub fn of_call(header: Option<&str>) -> Self {
        let timeout = header.and_then(grpc_timeout).unwrap_or(Self::DEFAULT);
        let margin = (timeout / 10).min(Duration::from_secs(1));
        Self::after(timeout - margin)
    }

    /// When it passes.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// The time the call was given.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// `work`'s output, or `None` when the deadline comes first (`work` is then dropped).
    pub async fn run<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout_at(self.at.into(), work).await.ok()
    }
}

/// A `grpc-timeout` header's value (`<at most 8 digits><unit>`, unit one of `H M S m u n`).
fn grpc_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The driver behind the node service. Errors are the one-line text the kubelet shows in the
/// pod's events: they name the claim and the fix.
pub trait Claims: Send + Sync + 'static {
    /// Prepares `claim` by `deadline` (idempotent: a second call answers as the first did).
    fn prepare(
        &self,
        claim: ClaimRef,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Vec<PreparedDevice>, String>> + Send;
    /// Undoes [`Claims::prepare`] by `deadline` (idempotent: an unknown claim is already
    /// unprepared).
    fn unprepare(
        &self,
        claim: ClaimRef,
        deadline: Deadline,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_and_kept_short_of() {
        assert_eq!(grpc_timeout("45S"), Some(Duration::from_secs(45)));
        assert_eq!(grpc_timeout("44999m"), Some(Duration::from_millis(44999)));
        assert_eq!(grpc_timeout("2M"), Some(Duration::from_secs(120)));
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            assert_eq!(grpc_timeout(bad), None, "{bad}");
        }
        assert_eq!(
            Deadline::of_call(Some("45S")).budget(),
            Duration::from_secs(44)
        );
        assert_eq!(
            Deadline::of_call(Some("5S")).budget(),
            Duration::from_millis(4500)
        );
        assert_eq!(Deadline::of_call(None).budget(), Duration::from_secs(39));
    }
}
