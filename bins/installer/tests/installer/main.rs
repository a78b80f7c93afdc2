//! The installer's integration tests, one binary: each file a module (fake hosts, host control,
//! host directories, the image, an interrupted install, the manifests), sharing the fake hosts of
//! `support`.

mod fake_hosts;
mod host_control;
mod host_dirs;
mod image;
mod interrupted;
mod manifests;
mod support;
