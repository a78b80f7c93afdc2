//! Discovery's integration tests, one binary: each file a module (nodes made with mknod, the
//! Jetson profile on a simulated Jetson, the shipped profiles).

mod discovery_mknod;
mod jetson_profile;
mod shipped_profiles;
