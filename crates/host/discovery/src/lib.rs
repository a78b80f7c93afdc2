//! What a profile finds on the host, read under the [`devinject_devices::HostRoots`]: the
//! host half of `devinject-devices`, which decides from what this crate reads and reads
//! nothing itself.
//!
//! The parts:
//! - [`profile_file`] reads one profile file through a descriptor that shows it is a regular
//!   file of bounded size, and [`profile_dir`] a directory of them into a
//!   [`devinject_devices::ProfileSet`].
//! - [`discover`](mod@discover) finds a profile's devices and control nodes: nodes matching
//!   its globs under the dev root, each read with [`node`]; their ids, NUMA nodes, health and
//!   attributes from sysfs ([`sysfs_attr`]); their places on the USB or PCI bus
//!   ([`bus_place`], over [`sysfs_device`]); their other ids from the driver's procfs files
//!   ([`alias`]).
//! - [`pci`] places a device on the PCI bus, for the DRA driver's standard attributes.
//! - The long-running components run discovery again on the inotify events [`watch`] names,
//!   and read the devices' health attributes again ([`health`]) on the schedule of
//!   [`devinject_devices::HealthSchedule`].
//! - [`driver_files`] resolves a profile's libraries, binaries and other files under the driver
//!   root, each library checked with [`elf_soname`] for the machine it is built for and its
//!   soname; [`elf_linkage`] tells a static program from one that names an interpreter, for the
//!   hook's `ldconfig` and `devinject-ctl doctor`.
//! - [`node`] also reads a node again at the finish step, refusing one that is no longer the
//!   device decided for the container.
//! - [`root_args`] (feature `root-args`): the `--dev-root`, `--sys-root`, `--proc-root` and
//!   `--driver-root` flags, one definition every discovering binary flattens into its command
//!   line.
#![warn(missing_docs)]

pub mod alias;
pub mod bus_place;
pub mod discover;
pub mod driver_files;
mod driver_glob;
pub mod elf_linkage;
pub mod elf_soname;
pub mod health;
pub mod node;
pub mod pci;
pub mod profile_dir;
pub mod profile_file;
#[cfg(feature = "root-args")]
pub mod root_args;
pub mod sysfs_attr;
pub mod sysfs_device;
pub mod watch;

pub use discover::{discover, DiscoveryError};
pub use driver_files::{resolve_driver_files, resolve_driver_parts, ResolveError};
pub use health::refresh_health;
pub use pci::pci_location;
pub use watch::{nearest_existing, watch_paths};
