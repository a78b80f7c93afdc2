//! Errors a device plugin RPC can answer with, and their one mapping to gRPC status codes.

use tonic::{Code, Status};

/// Why a `DevicePlugin` RPC was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// A request named a device id this plugin does not advertise.
    #[error("resource {resource}: unknown device id {id:?}")]
    UnknownDevice {
        /// The extended resource.
        resource: String,
        /// The id as received.
        id: String,
    },
    /// A request named the same device id twice.
    #[error("resource {resource}: device id {id:?} requested twice")]
    DuplicateDevice {
        /// The extended resource.
        resource: String,
        /// The repeated id.
        id: String,
    },
    /// A container request without any device id.
    #[error("resource {resource}: container request {index} has no device ids")]
    EmptyRequest {
        /// The extended resource.
        resource: String,
        /// The position of the container request.
        index: usize,
    },
    /// A preferred-allocation size that cannot be met.
    #[error(
        "resource {resource}: allocation size {size} is not between 1 and the {available} \
         available devices"
    )]
    BadAllocationSize {
        /// The extended resource.
        resource: String,
        /// The requested size.
        size: i64,
        /// How many devices were offered.
        available: usize,
    },
    /// A device a prepared DRA claim holds (the kubelet chose it before the plugin listed it
    /// unhealthy).
    #[error("resource {resource}: device {id:?} is held by DRA claim {claim}; the container gets it once that claim's pod ends")]
    HeldByClaim {
        /// The extended resource.
        resource: String,
        /// The id as received.
        id: String,
        /// The claim, `<namespace>/<name>`.
        claim: String,
    },
    /// The plugin is stopping and no longer hands out devices.
    #[error("resource {resource}: the device plugin is shutting down")]
    ShuttingDown {
        /// The extended resource.
        resource: String,
    },
}

impl PluginError {
    /// The refusal's label in `devinject_device_plugin_allocation_refusals_total`: a fixed
    /// vocabulary, never the id a request carried.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownDevice { .. } => "unknown_device",
            Self::DuplicateDevice { .. } => "duplicate_device",
            Self::EmptyRequest { .. } => "empty_request",
            Self::BadAllocationSize { .. } => "bad_allocation_size",
            Self::HeldByClaim { .. } => "held_by_claim",
            Self::ShuttingDown { .. } => "shutting_down",
        }
    }
}

/// The one place plugin errors become gRPC statuses.
impl From<PluginError> for Status {
    fn from(err: PluginError) -> Self {
        let code = match err {
            PluginError::UnknownDevice { .. }
            | PluginError::DuplicateDevice { .. }
            | PluginError::EmptyRequest { .. }
            | PluginError::BadAllocationSize { .. } => Code::InvalidArgument,
            PluginError::HeldByClaim { .. } => Code::FailedPrecondition,
            PluginError::ShuttingDown { .. } => Code::Unavailable,
        };
        Status::new(code, err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_ids_are_invalid_argument_and_name_the_id() {
        let status = Status::from(PluginError::UnknownDevice {
            resource: "devinject.io/demo".into(),
            id: "7".into(),
        });
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "resource devinject.io/demo: unknown device id \"7\""
        );
    }

    #[test]
    fn shutting_down_is_unavailable() {
        let status = Status::from(PluginError::ShuttingDown {
            resource: "devinject.io/demo".into(),
        });
        assert_eq!(status.code(), Code::Unavailable);
    }
}
