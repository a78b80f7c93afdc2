//! The webhook's integration tests, one binary: each file a module (accept errors, bounds),
//! sharing `common`.

mod accept_errors;
mod bounds;
mod common;
