//! Why a profile's devices cannot be published: a device id that gives no DRA device name, or
//! one that collides with another's, and a pool past the driver's bound.

use crate::naming::NamingError;

/// Why a profile's devices cannot be published.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs, reason = "each field is named in the message")]
pub enum SliceError {
    /// A device could not be given a DRA name.
    #[error(transparent)]
    Naming(#[from] NamingError),
    /// More devices, shares and partitions included, than the driver publishes in one pool.
    #[error("profile {profile} on node {node}: {count} devices to publish (each share and partition counts), more than the {max} the driver publishes for one profile and node: narrow the profile's discovery.nodes, or lower its replicas or drop a shape from [partitions.shapes]")]
    TooManyDevices {
        profile: String,
        node: String,
        /// How many devices there are to publish.
        count: usize,
        /// [`super::MAX_DEVICES_PER_POOL`].
        max: usize,
    },
}

/// A `Result` with a [`SliceError`].
pub type Result<T> = std::result::Result<T, SliceError>;
