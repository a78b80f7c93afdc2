//! What a container gets, decided once for every engine path: the runtime shim and the OCI hook
//! (from `config.json`), the NRI plugin (from containerd's view of the container), and next the
//! DRA driver each read the container their own way and render the decision their own way;
//! what was asked for, what the request policy allows and what gets planned is decided here.
//!
//! - [`admit`]: the two calls every engine path makes, given the container through the
//!   [`admit::Container`] trait: [`admit::Admission::asked`] (one rule for whether it mentions
//!   a request at all, then its requests and functions, found once) and
//!   [`admit::Admission::admit`] (the policy, then the plan).
//! - [`policy`]: which requests are honoured; under `kubernetes` only what the kubelet's
//!   pod-resources API says the device plugin granted that container.
//! - [`container_plan`]: a container's requests, found in its annotations and environment, to
//!   one merged plan of edits (discovery and file resolution only for the profiles asked for).
//!
//! Nothing here writes to the host or the container, or starts a process: the callers apply
//! the plan and run the prepare steps it lists.
#![warn(missing_docs)]

pub mod admit;
pub mod container_plan;
pub mod policy;
