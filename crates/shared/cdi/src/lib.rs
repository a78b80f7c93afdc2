//! CDI export (`devinject-ctl cdi generate`): one Container Device Interface spec per profile
//! with devices on this host, so that engines that inject CDI devices natively (containerd >=
//! 1.7, CRI-O >= 1.24, podman >= 4.1, docker >= 25) need neither the shim nor the hook for
//! nodes and mounts.
//!
//! The spec is the planner's plan for "all devices", split the way CDI applies edits:
//! - `kind` is `devinject.io/<profile>` (our vendor prefix, so it never collides with a
//!   vendor's own specs for the same hardware);
//! - one device per discovered device, named by its id, carrying its own nodes, plus `all`;
//! - spec-level `containerEdits` (applied once whenever any device of the kind is injected): the
//!   control nodes, the read-only mounts of libraries, binaries and files, the profile's env,
//!   and — when libraries are injected — a `createRuntime` hook running `devinject-hook finish`
//!   for the soname links and the linker cache, as the runtime shim wires it (the libraries named
//!   `--mounted-library`: the runtime mounts them, the hook only lists them in the cache).
//!
//! The request variable (`<NAME>_VISIBLE_DEVICES`) is deliberately not set: it would make a
//! container started through the shim or hook as well ask for the devices again.
//!
//! `cdiVersion` is the lowest version that holds what the spec uses (runtimes reject specs whose
//! version is newer than they know, and CDI rejects specs using a field newer than their
//! version): 0.3.0, or 0.5.0 when a device name starts with a digit or a node's host path differs
//! from its container path, or 0.6.0 when the kind's class contains a dot, or 0.7.0 when an edit
//! has `additionalGids`. An engine whose CDI parser is older refuses the whole spec, so
//! `CdiRequest::newest_version` (`cdi generate --cdi-version`) fits each spec to what the engine
//! reads ([`version::fit`]).
//!
//! `additionalGids`: a node only its group may use (`0660 root:render`) adds that group, so a
//! container running as a non-root user with no supplementary groups can open what it was
//! given.
//!
//! The parts: [`spec`] (the types written), [`request`] (what to export, where the host is),
//! [`build`] (a profile's plan as a spec), [`version`] and [`mod@validate`] (the lowest
//! `cdiVersion`, CDI's parser rules), [`mod@generate`] (a spec file per profile, written through
//! `devinject-hostfs`), [`watch`] (`--watch`: refreshed on every change, inotify). The DRA
//! driver renders each claim's spec through [`build_spec`] as well.
//!
//! Our own types, not the maintained `container-device-interface` crate's: its spec types keep
//! their fields crate-private (a spec is built by parsing JSON, not from values), it links a
//! JSON-schema validator, YAML and regex engines and a CLI parser into the DRA driver and
//! `devinject-ctl`, and it computes the minimum version through `unwrap`s on version strings.
//! The tests read every spec we write with that crate (its parser and schema), so the two
//! cannot drift apart unseen.
#![warn(missing_docs)]

pub mod build;
pub mod error;
pub mod generate;
pub mod request;
pub mod spec;
pub mod validate;
pub mod version;
pub mod watch;

pub use build::build_spec;
pub use error::{CdiError, Result};
pub use generate::{file_name, generate, CdiReport, ProfileOutcome, PREPARE_NOT_EXPORTED};
pub use request::{CdiRequest, DEFAULT_OUTPUT_DIR, DEFAULT_PROFILES_DIR};
pub use spec::{CdiDevice, CdiDeviceNode, CdiEdits, CdiHook, CdiMount, CdiSpec};
pub use validate::validate;
pub use version::{fit, min_version, CdiVersion, VersionError};
