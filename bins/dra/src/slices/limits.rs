//! The bounds on what one pool publishes: the API server's limits on one ResourceSlice (its
//! validation of `resource.k8s.io/v1`: devices and counter sets per slice, an object name's
//! length), which [`super::resource_slices`] cuts a pool to, and the driver's own bound on the
//! devices of one pool.

/// The most devices one ResourceSlice may hold (without taints or counters).
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// The most devices one ResourceSlice may hold when one of them has a taint or consumes
/// counters (the API's `ResourceSliceMaxDevicesWithAdvancedFeatures`).
pub const MAX_DEVICES_WITH_TAINTS: usize = 64;
/// The most devices the driver publishes in one pool (one profile on one node), shares and
/// partitions included: 16 slices of [`MAX_DEVICES_WITH_TAINTS`]. A bound on what one
/// profile's discovery makes the driver send, far above any node's devices.
pub const MAX_DEVICES_PER_POOL: usize = 16 * MAX_DEVICES_WITH_TAINTS;

/// The longest object name (a DNS subdomain).
pub(super) const MAX_NAME: usize = 253;

/// The most counter sets one slice may hold (the API's `ResourceSliceMaxCounterSets`): one per
/// partitioned device, so a pool of more devices has more counters' slices.
pub const MAX_COUNTER_SETS: usize = 8;
