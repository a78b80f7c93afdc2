//! The `pathrs` crate's C API (`pathrs_*`, its `capi` feature) in one static archive: a
//! staticlib carries every exported symbol of the crates it links.
pub use pathrs;
