//! Device profiles, request parsing and the injection planner: the decisions, made from values.
//! Nothing here reads the host; the devinject-discovery crate reads what these decide from.
//!
//! Everything devinject does starts from a [`profile::Profile`]: one TOML file per device kind
//! that says how to find the devices on a host and what a container needs to use them. The parts
//! connect like this:
//!
//! 1. [`profile`] parses and validates a profile's text (strict TOML, every mistake names file
//!    and key); [`profile_set`] holds a directory's profiles and refuses those that collide.
//! 2. Discovery (in devinject-discovery) finds a profile's devices under the [`HostRoots`] and
//!    returns them as an [`inventory::Inventory`] of [`node::DeviceNode`]s; [`bus_select`] is
//!    what its USB and PCI selectors say, [`pci`] the shape of a device's place on the PCI bus,
//!    [`node_name`] the `{name}`/`{n}` templates of a profile's sysfs paths, and [`health`] the
//!    schedule on which the long-running components read the devices' health again.
//! 3. Driver-file resolution (in devinject-discovery) finds the profile's libraries, binaries and
//!    other files on the host, as [`driver_files::DriverFiles`].
//! 4. [`request`] parses what a container asked for (`all`, `none`, `void`, a list of ids or
//!    indices) and selects devices from the inventory.
//! 5. [`planner`] turns all of that into a [`plan::Plan`]: a list of container edits in the shape
//!    of a CDI spec (device nodes, mounts, env, cgroup rules, hooks). The planner is pure.
//! 6. [`prepare_step`] plans the runs of a profile's prepare program, one per allocated device,
//!    with the function the container chose when the profile lists it.
//!
//! Every error that quotes a value a container wrote shows it through [`excerpt::Excerpt`],
//! bounded and escaped.
//!
//! The hook applies a plan inside the container's mount namespace, the runtime shim writes it into
//! `config.json`, and the CDI exporter writes it as a CDI spec.
#![warn(missing_docs)]

pub mod attribute_name;
pub mod bus_select;
pub mod capability;
pub mod capacity;
pub mod dra_names;
pub mod driver_files;
pub mod elf_machine;
pub mod env_merge;
pub mod excerpt;
pub mod finish_args;
pub mod finish_invocation;
pub mod forward_compat;
pub mod health;
pub mod inventory;
pub mod names;
pub mod node;
pub mod node_name;
pub mod node_volume;
pub mod partitions;
pub mod pci;
pub mod plan;
pub mod planner;
pub mod prepare_step;
pub mod profile;
pub mod profile_set;
pub mod request;
pub mod roots;

pub use capability::{Capabilities, CapabilityError, CapabilitySpec};
pub use capacity::{Amount, Capacity};
/// The device-rule vocabulary the plan is written in, shared with the cgroup crate.
pub use devinject_device_rule::{Access, DeviceKind, DeviceNumber, DeviceRule};
pub use driver_files::DriverFiles;
pub use env_merge::{env_edits, env_value, merge_env};
pub use excerpt::Excerpt;
pub use finish_args::{DecidedNode, FinishArgs, GroupAccess};
pub use finish_invocation::{
    default_hook_path, FinishInvocation, HookCommand, DEFAULT_HOOK_PATH, FINISH_TIMEOUT_SECS,
    HOOK_ARGV0,
};
pub use forward_compat::{ForwardCompat, ForwardCompatSpec};
pub use health::HealthSchedule;
pub use inventory::{Device, Inventory};
pub use names::{DeviceId, NameError, ProfileName, ResourceName, CDI_VENDOR};
pub use node::{access_groups, DeviceNode, NodeError};
pub use partitions::{Partition, Partitions};
pub use pci::PciLocation;
pub use plan::{ContainerEdits, EnvVar, Mount, MountKind, Plan, Symlink};
pub use planner::{plan, ContainerLayout, PlanError, PlanInput};
pub use prepare_step::{prepare_runs, FunctionError, FunctionRequest, PrepareRun};
pub use profile::{AllocateMode, HealthTaint, LibraryNames, Profile, ProfileError};
pub use profile_set::ProfileSet;
pub use request::{Request, RequestError, Resolve, Selection};
pub use roots::HostRoots;
