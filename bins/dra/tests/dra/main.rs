//! The DRA driver's integration tests, one binary: each file a module (the binary's start, claims
//! prepared by the driver against a stand-in API server).

mod binary_start;
mod driver_claims;
