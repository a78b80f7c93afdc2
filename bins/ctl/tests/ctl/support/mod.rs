//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod demo_values;
pub mod tree;
