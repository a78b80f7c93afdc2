//! The device profile: one strict TOML file per device kind.
//!
//! The file format is documented with a worked example in `docs/profiles.md`. Parsing rejects
//! unknown keys (so a typo is an error naming the file, line and key), and validation
//! checks what serde cannot: names, relative globs under the dev root, absolute host paths without
//! `..`, and exactly one of `soname`/`glob` per library.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::attribute_name::attribute_name_problem;
pub use crate::attribute_name::{DEVICE_ATTRIBUTES, MAX_ATTRIBUTE_NAME};
use crate::bus_select::{PciSelector, UsbSelector};
use crate::capability::CapabilitySpec;
use crate::capacity::Capacity;
use crate::forward_compat::ForwardCompatSpec;
use crate::names::{NameError, ProfileName, ResourceName};
use crate::partitions::Partitions;

/// How often a profile's health attributes are read when its `discovery.health_interval_ms`
/// is unset: the long-running components' schedule (the devices crate's `health` module).
pub const DEFAULT_HEALTH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read profile {path}: {source}")]
    Read {
        /// The profile file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid profile TOML (syntax, unknown key, wrong type).
    #[error("profile {path} is not valid: {message}")]
    Parse {
        /// The profile file.
        path: PathBuf,
        /// The parser's message, which carries the line, column and key.
        message: String,
    },
    /// A value is well-formed TOML but not acceptable.
    #[error("profile {path}: key `{key}` {problem}")]
    Invalid {
        /// The profile file.
        path: PathBuf,
        /// The offending key, dotted (`libraries[2].glob`).
        key: String,
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// The profile shares its devices (`replicas` > 1) and prepares them (`[prepare]`): one
    /// container's start would reprogram a device another container is using. Refused rather than
    /// allowed for the function already loaded, which would need durable per-device state on the
    /// node (docs/prepare.md, "Shared devices").
    #[error("profile {path}: keys `replicas` (= {replicas}) and `[prepare]` cannot be combined: a shared device is used by several containers at once, and each one's start would run the prepare program on it under the others: set `replicas = 1` or remove the `[prepare]` section")]
    SharedPrepare {
        /// The profile file.
        path: PathBuf,
        /// The profile's replica count.
        replicas: u32,
    },
    /// Something other than a regular file (after links) ends in `.toml` in a profiles
    /// directory: it is not opened.
    #[error("profile {path} is a {what}, not a regular file: devinject does not open it; remove it from the profiles directory or rename it so it does not end in .toml")]
    NotAFile {
        /// The profile path.
        path: PathBuf,
        /// What it is: "FIFO", "character device", ...
        what: &'static str,
    },
    /// The file name does not match the profile's `name`.
    #[error("profile {path} declares name {name:?}: rename the file to {name}.toml or fix `name`")]
    FileName {
        /// The profile file.
        path: PathBuf,
        /// The declared name.
        name: String,
    },
}

/// How the device plugin answers `Allocate` for this profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AllocateMode {
    /// `<NAME>_VISIBLE_DEVICES=<ids>` plus our annotations (the default).
    #[default]
    Envvar,
    /// CDI device names in `cdi.k8s.io/...` annotations.
    CdiAnnotations,
    /// CDI device names in the CRI `CDIDevices` field.
    CdiCri,
}

/// The name each injected library appears under in the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LibraryNames {
    /// Its own file name (`libcuda.so.580.95`) with a soname link next to it
    /// (`libcuda.so.1 -> libcuda.so.580.95`), as a distribution's `ldconfig` leaves a library
    /// directory (the default).
    #[default]
    File,
    /// Its soname alone: the mounted file is `libcuda.so.1`, with no link and no versioned name.
    /// One inode created per library instead of two; docs/profiles.md says what an image then
    /// does not see.
    Soname,
}

/// How a device's stable id is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IdSource {
    /// The number at the end of the node's name (`accel2` → `2`), or the device's position in
    /// discovery order when the name has none (`kvm` → `0`). Stable when another device goes.
    #[default]
    Index,
    /// The matched node's file name, e.g. `apex_0`.
    Name,
    /// The first line of the sysfs attribute named by `discovery.id_sysfs`.
    Sysfs,
    /// The device's value of the first of `discovery.aliases.keys` (NVIDIA's device plugin
    /// advertises `GPU UUID`); its index when its file does not say.
    Alias,
    /// The device's place on its bus ([`crate::bus_select::BusAddress`]): the USB port path
    /// (`2-1.4`) or the PCI function (`0000:01:00.0`). It survives a re-enumeration under
    /// another USB id or device number.
    Bus,
}

/// Other ids a device answers to, read from one file per device of `Key: value` lines (NVIDIA:
/// `/proc/driver/nvidia/gpus/<bus>/information`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AliasSpec {
    /// A glob of the files, relative to the proc root (`driver/nvidia/gpus/*/information`).
    pub files: String,
    /// The key whose value is the number ending the device's node name (`Device Minor`).
    pub device_key: String,
    /// The keys whose values the device also answers to (`GPU UUID`, `Bus Location`).
    pub keys: Vec<String>,
}

/// How devices are found.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySpec {
    /// Globs relative to the dev root; every matching char or block node is one device.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Globs relative to the dev root of the stable links users open a device by
    /// (`serial/by-id/*`, `serial/by-path/*`, `disk/by-id/*`): each match that is a symbolic
    /// link to one of a device's nodes gives that device one more node, at the link's path in
    /// the container, of the same type and numbers. At most [`MAX_LINK_GLOBS`].
    #[serde(default)]
    pub links: Vec<String>,
    /// Where each device's id comes from.
    #[serde(default)]
    pub id: IdSource,
    /// sysfs attribute (relative to the sys root) holding a stable id; `{name}` is the node's
    /// file name, `{n}` its trailing number.
    pub id_sysfs: Option<String>,
    /// sysfs attribute holding the device's NUMA node (`-1` means none).
    pub numa_sysfs: Option<String>,
    /// sysfs attribute whose content, when present, tells health: `0`/`bad`/`unhealthy` mean
    /// unhealthy, anything else healthy.
    pub health_sysfs: Option<String>,
    /// What the taint of an unhealthy device does in the DRA driver's ResourceSlice
    /// (docs/dra.md, "Health"): keep new claims off it, or also evict the pods whose claims
    /// hold it.
    /// Unset: `NoSchedule`. Only with `health_sysfs`.
    pub health_taint: Option<HealthTaint>,
    /// How often, in milliseconds, the long-running components read each device's
    /// `health_sysfs` again: sysfs tells a change only where the driver calls `sysfs_notify`
    /// (the health schedule). Unset: [`DEFAULT_HEALTH_INTERVAL`]. Only with
    /// `health_sysfs`; [`MIN_HEALTH_INTERVAL_MS`] to [`MAX_HEALTH_INTERVAL_MS`].
    pub health_interval_ms: Option<u64>,
    /// sysfs attributes a matched node must have, with their expected first line; other nodes are
    /// not devices of this kind (e.g. `"class/drm/{name}/device/vendor" = "0x1002"` keeps AMD
    /// render nodes only).
    #[serde(default)]
    pub require_sysfs: BTreeMap<String, String>,
    /// Attributes each device carries, by name, read from sysfs (the first line of the file;
    /// `{name}` and `{n}` as above), e.g. `vendor = "class/drm/{name}/device/vendor"`. The DRA
    /// driver publishes them in the ResourceSlice, where a claim's CEL selector can read them.
    /// A name is a C identifier of at most [`MAX_ATTRIBUTE_NAME`] characters, not one of
    /// [`DEVICE_ATTRIBUTES`].
    #[serde(default)]
    pub attributes_sysfs: BTreeMap<String, String>,
    /// Other ids each device answers to in requests ([`AliasSpec`]).
    pub aliases: Option<AliasSpec>,
    /// USB devices the profile chooses, by vendor and product id (and serial): a matched node
    /// that belongs to none of them is not a device of this kind ([`crate::bus_select`]).
    #[serde(default)]
    pub usb: Vec<UsbSelector>,
    /// PCI functions the profile chooses, by vendor, device and class, as `usb` does.
    #[serde(default)]
    pub pci: Vec<PciSelector>,
}

/// The shortest `discovery.health_interval_ms`: one read per device at most ten times a second.
pub const MIN_HEALTH_INTERVAL_MS: u64 = 100;

/// The longest `discovery.health_interval_ms`: an hour.
pub const MAX_HEALTH_INTERVAL_MS: u64 = 3_600_000;

/// The most globs `discovery.links` may list.
pub const MAX_LINK_GLOBS: usize = 16;

/// The most `[[discovery.usb]]` or `[[discovery.pci]]` selectors a profile may list.
pub const MAX_BUS_SELECTORS: usize = 64;

/// The effect of the taint an unhealthy device carries in a DRA ResourceSlice, as Kubernetes
/// names it (`resource.k8s.io/v1` `DeviceTaint.effect`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum HealthTaint {
    /// No new claim is allocated the device unless it tolerates the taint; claims already
    /// holding it keep it.
    #[default]
    NoSchedule,
    /// As `NoSchedule`, and the pods of the claims holding the device are evicted (a device
    /// whose failure makes its users' results wrong rather than slow).
    NoExecute,
}

impl HealthTaint {
    /// The effect's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

/// The most `discovery.attributes_sysfs` a profile may name: the DRA API holds at most 32
/// attributes and capacities per device, and the driver publishes up to 8 of its own
/// ([`DEVICE_ATTRIBUTES`] but one and Kubernetes' three standard ones: a device carries
/// `replica` or `partition`, never both), or 7 and one capacity (a device shared by
/// `[capacity]` carries neither).
pub const MAX_SYSFS_ATTRIBUTES: usize = 24;

/// One extra node per device, or a control node shared by all devices of the kind.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Path relative to the dev root; for per-device nodes `{n}` and `{name}` are substituted.
    pub path: String,
    /// A missing optional node is skipped instead of failing.
    #[serde(default)]
    pub optional: bool,
}

/// A library to inject: by soname (searched in `library_dirs`) or by glob.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibrarySpec {
    /// A soname such as `libcuda.so.1`, looked up in the profile's `library_dirs`.
    pub soname: Option<String>,
    /// An absolute host glob such as `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*`.
    pub glob: Option<String>,
    /// A missing optional library is skipped instead of failing.
    #[serde(default)]
    pub optional: bool,
    /// The part of the driver it belongs to (one of `[capabilities].names`); untagged, it comes
    /// with every request.
    pub capability: Option<String>,
    /// Other names it answers to in the image's library directory, each a link to its soname
    /// (`libcuda.so`, which applications `dlopen` though it is a development name, as NVIDIA's
    /// toolkit makes it).
    #[serde(default)]
    pub links: Vec<String>,
}

/// A binary or other file to inject.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    /// Absolute host path; may be a glob.
    pub path: String,
    /// Where it goes in the container; binaries default to `/usr/bin/<name>`, files to their
    /// host path. Ending in `/`, a directory each match goes into under its own name.
    pub container_path: Option<String>,
    /// A missing optional file is skipped instead of failing.
    #[serde(default)]
    pub optional: bool,
    /// The part of the driver it belongs to (one of `[capabilities].names`); untagged, it comes
    /// with every request.
    pub capability: Option<String>,
}

/// A program run on the host for each allocated device before the container starts (loading
/// an FPGA function, resetting a device): docs/prepare.md.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrepareSpec {
    /// The program's absolute host path, then its fixed arguments. What it works on comes in its
    /// environment (`DEVINJECT_*`), never in its arguments.
    pub command: Vec<String>,
    /// How long one run may take before it is killed and the container fails.
    #[serde(default = "default_prepare_timeout_ms")]
    pub timeout_ms: u64,
    /// The functions a container may ask for; the program gets the chosen one's id.
    #[serde(default)]
    pub functions: Vec<FunctionSpec>,
    /// DRA only: the program runs when the scheduler allocates a claim the device, and the pod
    /// is bound to the node only once it succeeded (the devices' binding conditions); a
    /// failure sends the pod to another device or node (docs/prepare.md, "Before binding").
    /// Where the API server has no binding conditions, and on every other path, the program
    /// runs before the container starts, as without this key.
    #[serde(default)]
    pub before_binding: bool,
}

/// One function a prepare step can load.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionSpec {
    /// What a container asks for and the program gets: letters, digits, `.`, `_`, `-`.
    pub id: String,
    /// A friendly resource name a pod may ask for instead of the profile's resource (e.g.
    /// `fpga.intel.com/arria10-nlb3`): the admission webhook maps it to the profile's resource
    /// and this function.
    pub resource: Option<String>,
}

/// The default deadline of one prepare run.
pub const DEFAULT_PREPARE_TIMEOUT_MS: u64 = 30_000;

/// The longest deadline a prepare run may have (a runtime's own hook deadline is minutes).
pub const MAX_PREPARE_TIMEOUT_MS: u64 = 300_000;

/// The longest function id.
pub const MAX_FUNCTION_ID: usize = 128;

fn default_prepare_timeout_ms() -> u64 {
    DEFAULT_PREPARE_TIMEOUT_MS
}

/// The raw file layout, as deserialized.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    name: String,
    resource: String,
    #[serde(default)]
    description: String,
    request_env: Option<String>,
    #[serde(default = "one")]
    replicas: u32,
    #[serde(default)]
    allocate_mode: AllocateMode,
    #[serde(default)]
    discovery: DiscoverySpec,
    #[serde(default)]
    device_nodes: Vec<NodeSpec>,
    #[serde(default)]
    control_nodes: Vec<NodeSpec>,
    #[serde(default = "default_library_dirs")]
    library_dirs: Vec<String>,
    #[serde(default)]
    library_names: LibraryNames,
    #[serde(default)]
    libraries: Vec<LibrarySpec>,
    #[serde(default)]
    binaries: Vec<FileSpec>,
    #[serde(default)]
    files: Vec<FileSpec>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    capabilities: Option<CapabilitySpec>,
    forward_compat: Option<ForwardCompatSpec>,
    prepare: Option<PrepareSpec>,
    capacity: Option<BTreeMap<String, toml::Value>>,
    partitions: Option<crate::partitions::RawPartitions>,
}

fn one() -> u32 {
    1
}

/// Where sonames are searched when a profile does not say.
pub fn default_library_dirs() -> Vec<String> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ]
    .map(String::from)
    .to_vec()
}

/// The most devices one physical device may be shared as.
pub const MAX_REPLICAS: u32 = 1024;

/// A validated device profile.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The kind, e.g. `demo`.
    pub name: ProfileName,
    /// The Kubernetes extended resource, e.g. `devinject.io/demo`.
    pub resource: ResourceName,
    /// Free text for humans.
    pub description: String,
    /// The env variable a container sets to ask for devices.
    pub request_env: String,
    /// How many ids each physical device is advertised as (sharing).
    pub replicas: u32,
    /// How many DRA claims share each device, if they may ([`crate::capacity`]); the DRA
    /// driver then publishes each device once instead of once per replica.
    pub capacity: Option<Capacity>,
    /// The partitions each device can be used as besides whole, if any
    /// ([`crate::partitions`]); the DRA driver publishes them, the device plugin does not.
    pub partitions: Option<Partitions>,
    /// How the device plugin answers `Allocate`.
    pub allocate_mode: AllocateMode,
    /// How devices are found.
    pub discovery: DiscoverySpec,
    /// Extra nodes each device brings.
    pub device_nodes: Vec<NodeSpec>,
    /// Nodes every device of the kind needs.
    pub control_nodes: Vec<NodeSpec>,
    /// Where sonames are searched (absolute, under the driver root).
    pub library_dirs: Vec<String>,
    /// The name each library appears under in the container.
    pub library_names: LibraryNames,
    /// Libraries to inject.
    pub libraries: Vec<LibrarySpec>,
    /// Binaries to inject into `/usr/bin` unless placed elsewhere.
    pub binaries: Vec<FileSpec>,
    /// Other files to inject.
    pub files: Vec<FileSpec>,
    /// Env the container gets with any device of the kind.
    pub env: BTreeMap<String, String>,
    /// The parts of the driver a container chooses by a variable, if the profile has groups
    /// ([`crate::capability`]).
    pub capabilities: Option<CapabilitySpec>,
    /// Where an image keeps newer driver libraries to prefer to the host's, if the driver has
    /// such ([`crate::forward_compat`]).
    pub forward_compat: Option<ForwardCompatSpec>,
    /// The program run for each allocated device before the container starts, if any.
    pub prepare: Option<PrepareSpec>,
}

impl Profile {
    /// Parses and validates profile text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ProfileError> {
        let raw: RawProfile = toml::from_str(text).map_err(|e| ProfileError::Parse {
            path: path.to_owned(),
            message: e.to_string().trim_end().replace('\n', " | "),
        })?;
        Self::validate(raw, path)
    }

    /// The Kubernetes resource name.
    pub fn resource_name(&self) -> &str {
        self.resource.as_str()
    }

    /// Whether each device goes to one container at a time (no `replicas` above 1, no
    /// `[capacity]`): a node serving the profile through both the device plugin and DRA must
    /// keep what one path gave from the other.
    pub fn exclusive(&self) -> bool {
        self.replicas <= 1 && self.capacity.is_none()
    }

    /// How often the long-running components read each device's health attribute again
    /// (`discovery.health_interval_ms`, else [`DEFAULT_HEALTH_INTERVAL`]);
    /// `None` when the profile has no health attribute.
    pub fn health_interval(&self) -> Option<std::time::Duration> {
        self.discovery.health_sysfs.as_ref()?;
        Some(
            self.discovery
                .health_interval_ms
                .map_or(DEFAULT_HEALTH_INTERVAL, std::time::Duration::from_millis),
        )
    }

    /// The env variable a container sets to ask for devices.
    pub fn request_env(&self) -> &str {
        &self.request_env
    }

    /// The annotation the device plugin writes with the granted ids; the hook reads it too.
    pub fn request_annotation(&self) -> String {
        format!("{}{}.devices", crate::plan::ANNOTATION_PREFIX, self.name)
    }

    /// Every resource name a pod may ask for this profile's devices by: its resource, then its
    /// functions' friendly names.
    pub fn resource_names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.resource.as_str()).chain(
            self.prepare
                .iter()
                .flat_map(|p| p.functions.iter().filter_map(|f| f.resource.as_deref())),
        )
    }

    /// The annotation naming the function the container's devices get (docs/prepare.md).
    pub fn function_annotation(&self) -> String {
        format!("{}{}.function", crate::plan::ANNOTATION_PREFIX, self.name)
    }

    /// The env variable naming the function the container's devices get, when no annotation
    /// does: `DEMO_FUNCTION` for `demo`.
    pub fn function_env(&self) -> String {
        self.name.env_stem() + FUNCTION_ENV_SUFFIX
    }

    fn validate(raw: RawProfile, path: &Path) -> Result<Self, ProfileError> {
        let invalid = |key: &str, problem: String| ProfileError::Invalid {
            path: path.to_owned(),
            key: key.to_owned(),
            problem,
        };
        let name_err = |key: &str, e: NameError| invalid(key, e.to_string());
        let name = ProfileName::new(&raw.name).map_err(|e| name_err("name", e))?;
        let resource = ResourceName::new(&raw.resource).map_err(|e| name_err("resource", e))?;
        let request_env = raw
            .request_env
            .clone()
            .unwrap_or_else(|| name.default_request_env());
        if !is_env_name(&request_env) {
            return Err(invalid(
                "request_env",
                format!("{request_env:?} is not an env variable name: use A-Z, 0-9 and '_'"),
            ));
        }
        if raw.replicas == 0 || raw.replicas > MAX_REPLICAS {
            return Err(invalid(
                "replicas",
                format!("is {}: use 1 to {MAX_REPLICAS}", raw.replicas),
            ));
        }
        if raw.discovery.nodes.is_empty() {
            return Err(invalid(
                "discovery.nodes",
                "is empty: list at least one glob under the dev root, e.g. [\"kvm\"]".into(),
            ));
        }
        for (i, g) in raw.discovery.nodes.iter().enumerate() {
            check_relative(g).map_err(|p| invalid(&format!("discovery.nodes[{i}]"), p))?;
            glob::Pattern::new(g)
                .map_err(|e| invalid(&format!("discovery.nodes[{i}]"), format!("bad glob: {e}")))?;
        }
        if raw.discovery.links.len() > MAX_LINK_GLOBS {
            return Err(invalid(
                "discovery.links",
                format!(
                    "lists {} globs, more than {MAX_LINK_GLOBS}: name the link directories, e.g. \"serial/by-id/*\"",
                    raw.discovery.links.len()
                ),
            ));
        }
        for (i, g) in raw.discovery.links.iter().enumerate() {
            check_relative(g).map_err(|p| invalid(&format!("discovery.links[{i}]"), p))?;
            glob::Pattern::new(g)
                .map_err(|e| invalid(&format!("discovery.links[{i}]"), format!("bad glob: {e}")))?;
        }
        if raw.discovery.id == IdSource::Sysfs && raw.discovery.id_sysfs.is_none() {
            return Err(invalid(
                "discovery.id",
                "is \"sysfs\" but discovery.id_sysfs is not set: name the attribute".into(),
            ));
        }
        match (&raw.discovery.aliases, raw.discovery.id) {
            (None, IdSource::Alias) => {
                return Err(invalid(
                    "discovery.id",
                    "is \"alias\" but [discovery.aliases] is not set: name the file and its keys"
                        .into(),
                ))
            }
            (Some(a), _) => {
                check_relative(&a.files).map_err(|p| invalid("discovery.aliases.files", p))?;
                glob::Pattern::new(&a.files)
                    .map_err(|e| invalid("discovery.aliases.files", format!("bad glob: {e}")))?;
                if a.keys.is_empty() {
                    return Err(invalid(
                        "discovery.aliases.keys",
                        "is empty: name at least one key, e.g. [\"GPU UUID\"]".into(),
                    ));
                }
                for (i, k) in std::iter::once(&a.device_key).chain(&a.keys).enumerate() {
                    if k.is_empty() || k.contains(':') || k.contains('\n') || k.trim() != k {
                        let key = if i == 0 {
                            "discovery.aliases.device_key".to_owned()
                        } else {
                            format!("discovery.aliases.keys[{}]", i - 1)
                        };
                        return Err(invalid(&key, format!("{k:?} is not a key of a `Key: value` line: no ':', no newline, no surrounding blanks")));
                    }
                }
            }
            (None, _) => {}
        }
        for (key, attr) in [
            ("discovery.id_sysfs", &raw.discovery.id_sysfs),
            ("discovery.numa_sysfs", &raw.discovery.numa_sysfs),
            ("discovery.health_sysfs", &raw.discovery.health_sysfs),
        ] {
            if let Some(a) = attr {
                check_relative(a).map_err(|p| invalid(key, p))?;
            }
        }
        if raw.discovery.health_taint.is_some() && raw.discovery.health_sysfs.is_none() {
            return Err(invalid(
                "discovery.health_taint",
                "is set but nothing tells the devices' health: set discovery.health_sysfs, or leave health_taint out".into(),
            ));
        }
        if let Some(ms) = raw.discovery.health_interval_ms {
            if raw.discovery.health_sysfs.is_none() {
                return Err(invalid(
                    "discovery.health_interval_ms",
                    "is set but there is no health attribute to read: set discovery.health_sysfs, or leave health_interval_ms out".into(),
                ));
            }
            if !(MIN_HEALTH_INTERVAL_MS..=MAX_HEALTH_INTERVAL_MS).contains(&ms) {
                return Err(invalid(
                    "discovery.health_interval_ms",
                    format!("is {ms}: use {MIN_HEALTH_INTERVAL_MS} to {MAX_HEALTH_INTERVAL_MS}"),
                ));
            }
        }
        for (key, count) in [
            ("discovery.usb", raw.discovery.usb.len()),
            ("discovery.pci", raw.discovery.pci.len()),
        ] {
            if count > MAX_BUS_SELECTORS {
                return Err(invalid(
                    key,
                    format!(
                        "lists {count} selectors, more than {MAX_BUS_SELECTORS}: split the profile"
                    ),
                ));
            }
        }
        for (i, sel) in raw.discovery.usb.iter().enumerate() {
            if let Some(problem) = sel.problem() {
                return Err(invalid(&format!("discovery.usb[{i}]"), problem));
            }
        }
        for (i, sel) in raw.discovery.pci.iter().enumerate() {
            if let Some(problem) = sel.problem() {
                return Err(invalid(&format!("discovery.pci[{i}]"), problem));
            }
        }
        for a in raw.discovery.require_sysfs.keys() {
            check_relative(a).map_err(|p| invalid(&format!("discovery.require_sysfs.{a}"), p))?;
        }
        if raw.discovery.attributes_sysfs.len() > MAX_SYSFS_ATTRIBUTES {
            return Err(invalid(
                "discovery.attributes_sysfs",
                format!(
                    "names {} attributes, more than the {MAX_SYSFS_ATTRIBUTES} a DRA device has room for: keep those claims select by",
                    raw.discovery.attributes_sysfs.len()
                ),
            ));
        }
        for (name, a) in &raw.discovery.attributes_sysfs {
            let key = format!("discovery.attributes_sysfs.{name}");
            if let Some(problem) = attribute_name_problem(name) {
                return Err(invalid(&key, problem));
            }
            check_relative(a).map_err(|p| invalid(&key, p))?;
        }
        for (list, key) in [
            (&raw.device_nodes, "device_nodes"),
            (&raw.control_nodes, "control_nodes"),
        ] {
            for (i, n) in list.iter().enumerate() {
                check_relative(&n.path).map_err(|p| invalid(&format!("{key}[{i}].path"), p))?;
            }
        }
        for (i, d) in raw.library_dirs.iter().enumerate() {
            check_absolute(d).map_err(|p| invalid(&format!("library_dirs[{i}]"), p))?;
        }
        for (i, lib) in raw.libraries.iter().enumerate() {
            let key = format!("libraries[{i}]");
            match (&lib.soname, &lib.glob) {
                (Some(s), None) => {
                    if s.is_empty() || s.contains('/') || !s.contains(".so") {
                        return Err(invalid(
                            &format!("{key}.soname"),
                            format!("{s:?} is not a soname: use a file name like libfoo.so.1"),
                        ));
                    }
                }
                (None, Some(g)) => {
                    check_absolute(g).map_err(|p| invalid(&format!("{key}.glob"), p))?;
                }
                _ => {
                    return Err(invalid(
                        &key,
                        "must set exactly one of `soname` and `glob`".into(),
                    ))
                }
            }
            // A name in the library directory: no `/`, and a library's (`.so`, so never `.`
            // or `..`).
            if let Some((j, l)) = lib
                .links
                .iter()
                .enumerate()
                .find(|(_, l)| l.contains('/') || !l.contains(".so"))
            {
                return Err(invalid(
                    &format!("{key}.links[{j}]"),
                    format!("{l:?} is not a library file name: use a name like libfoo.so"),
                ));
            }
        }
        for (list, key) in [(&raw.binaries, "binaries"), (&raw.files, "files")] {
            for (i, f) in list.iter().enumerate() {
                check_absolute(&f.path).map_err(|p| invalid(&format!("{key}[{i}].path"), p))?;
                if let Some(c) = &f.container_path {
                    check_absolute(c)
                        .map_err(|p| invalid(&format!("{key}[{i}].container_path"), p))?;
                }
            }
        }
        for k in raw.env.keys() {
            if !is_env_name(k) {
                return Err(invalid(
                    &format!("env.{k}"),
                    "is not an env variable name: use A-Z, a-z, 0-9 and '_'".into(),
                ));
            }
        }
        check_capabilities(&raw, &request_env).map_err(|(key, problem)| invalid(&key, problem))?;
        if let Some((key, problem)) = raw.forward_compat.as_ref().and_then(|f| f.problem()) {
            return Err(invalid(&format!("forward_compat.{key}"), problem));
        }
        let capacity = raw
            .capacity
            .as_ref()
            .map(Capacity::from_table)
            .transpose()
            .map_err(|(key, problem)| invalid(&key, problem))?;
        let partitions = raw
            .partitions
            .as_ref()
            .map(Partitions::from_raw)
            .transpose()
            .map_err(|(key, problem)| invalid(&key, problem))?;
        if let Some(p) = partitions.as_ref().filter(|p| !is_env_name(&p.env)) {
            return Err(invalid(
                "partitions.env",
                format!(
                    "{:?} is not an env variable name: use A-Z, a-z, 0-9 and '_'",
                    p.env
                ),
            ));
        }
        if partitions.is_some() {
            // A partitioned device is shared by the claims of its partitions already.
            let conflict = if capacity.is_some() {
                Some("`[capacity]`: a device shared by capacity cannot also be cut into partitions: remove `[capacity]` or `[partitions]`")
            } else if raw.replicas > 1 {
                Some("`replicas` > 1: a device shared by replicas cannot also be cut into partitions: remove `replicas` or `[partitions]`")
            } else if raw.prepare.is_some() {
                Some("`[prepare]`: the claims of two partitions use one device at once, and each one's prepare would run the program on it under the other: remove `[prepare]` or `[partitions]`")
            } else {
                None
            };
            if let Some(conflict) = conflict {
                return Err(invalid(
                    "partitions",
                    format!("cannot be combined with {conflict}"),
                ));
            }
        }
        if let Some(prepare) = &raw.prepare {
            check_prepare(prepare, &resource).map_err(|(key, problem)| invalid(&key, problem))?;
            if capacity.is_some() {
                return Err(invalid(
                    "capacity",
                    "cannot be combined with `[prepare]`: several claims use a shared device at once, and each one's prepare would run the program on it under the others: remove `[capacity]` or the `[prepare]` section".into(),
                ));
            }
            if raw.replicas > 1 {
                return Err(ProfileError::SharedPrepare {
                    path: path.to_owned(),
                    replicas: raw.replicas,
                });
            }
        }
        Ok(Self {
            name,
            resource,
            description: raw.description,
            request_env,
            replicas: raw.replicas,
            capacity,
            partitions,
            allocate_mode: raw.allocate_mode,
            discovery: raw.discovery,
            device_nodes: raw.device_nodes,
            control_nodes: raw.control_nodes,
            library_dirs: raw.library_dirs,
            library_names: raw.library_names,
            libraries: raw.libraries,
            binaries: raw.binaries,
            files: raw.files,
            env: raw.env,
            capabilities: raw.capabilities,
            forward_compat: raw.forward_compat,
            prepare: raw.prepare,
        })
    }
}

/// Checks the `[capabilities]` table and every entry's `capability` tag: a tag names a declared
/// part, and tags need the table. The error is the dotted key and the problem.
fn check_capabilities(raw: &RawProfile, request_env: &str) -> Result<(), (String, String)> {
    if let Some(spec) = &raw.capabilities {
        if let Some((key, problem)) = spec.problem() {
            return Err((format!("capabilities.{key}"), problem));
        }
        if !is_env_name(&spec.env) || spec.env == request_env {
            return Err((
                "capabilities.env".into(),
                format!(
                    "{:?} is not an env variable name other than the request variable {request_env}: use A-Z, 0-9 and '_'",
                    spec.env
                ),
            ));
        }
    }
    let tags = raw
        .libraries
        .iter()
        .enumerate()
        .map(|(i, l)| (format!("libraries[{i}]"), &l.capability))
        .chain(
            [("binaries", &raw.binaries), ("files", &raw.files)]
                .into_iter()
                .flat_map(|(key, list)| {
                    list.iter()
                        .enumerate()
                        .map(move |(i, f)| (format!("{key}[{i}]"), &f.capability))
                }),
        );
    for (key, tag) in tags {
        let Some(tag) = tag else { continue };
        match &raw.capabilities {
            Some(spec) if spec.declares(tag) => {}
            Some(spec) => {
                return Err((
                    format!("{key}.capability"),
                    format!(
                        "{tag:?} is not one of capabilities.names ({}): declare it or fix the tag",
                        spec.names.join(", ")
                    ),
                ))
            }
            None => {
                return Err((
                    format!("{key}.capability"),
                    format!("is {tag:?} but the profile has no [capabilities] table: declare the parts and their variable, or remove the tag"),
                ))
            }
        }
    }
    Ok(())
}

/// How every function variable ends.
pub const FUNCTION_ENV_SUFFIX: &str = "_FUNCTION";

/// Checks a prepare step: an absolute program, a bounded deadline, function ids that are plain
/// words, friendly resources that are resource names, each once. The error is the dotted key and
/// the problem.
fn check_prepare(p: &PrepareSpec, own: &ResourceName) -> Result<(), (String, String)> {
    let Some(program) = p.command.first() else {
        return Err((
            "prepare.command".into(),
            "is empty: give the program's absolute path, then its arguments".into(),
        ));
    };
    check_absolute(program).map_err(|e| ("prepare.command[0]".to_owned(), e))?;
    if let Some(i) = p.command.iter().position(|a| a.contains('\0')) {
        return Err((
            format!("prepare.command[{i}]"),
            "contains a NUL byte, which no command line can carry".into(),
        ));
    }
    if p.timeout_ms == 0 || p.timeout_ms > MAX_PREPARE_TIMEOUT_MS {
        return Err((
            "prepare.timeout_ms".into(),
            format!("is {}: use 1 to {MAX_PREPARE_TIMEOUT_MS}", p.timeout_ms),
        ));
    }
    for (i, f) in p.functions.iter().enumerate() {
        let key = |field: &str| format!("prepare.functions[{i}].{field}");
        if !is_function_id(&f.id) {
            return Err((key("id"), format!("{:?} is not a function id: use 1 to {MAX_FUNCTION_ID} letters, digits, '.', '_' or '-'", f.id)));
        }
        if p.functions[..i].iter().any(|g| g.id == f.id) {
            return Err((key("id"), format!("{:?} is listed twice", f.id)));
        }
        if let Some(r) = &f.resource {
            ResourceName::new(r).map_err(|e| (key("resource"), e.to_string()))?;
            if r == own.as_str()
                || p.functions[..i]
                    .iter()
                    .any(|g| g.resource.as_ref() == Some(r))
            {
                return Err((key("resource"), format!("{r:?} is already the profile's resource or another function's: give each function its own name")));
            }
        }
    }
    Ok(())
}

/// True for a function id: 1 to [`MAX_FUNCTION_ID`] ASCII letters, digits, `.`, `_`, `-`.
pub fn is_function_id(s: &str) -> bool {
    (1..=MAX_FUNCTION_ID).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// True for a POSIX-style env variable name.
pub fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_relative(p: &str) -> Result<(), String> {
    let path = Path::new(p);
    if p.is_empty() || path.is_absolute() {
        return Err(format!(
            "{p:?} must be a relative path (it is joined to a root)"
        ));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("{p:?} must not contain `..`"));
    }
    Ok(())
}

fn check_absolute(p: &str) -> Result<(), String> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(format!("{p:?} must be an absolute path"));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(format!("{p:?} must not contain `..`"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &str = r#"
name = "demo"
resource = "devinject.io/demo"
[discovery]
nodes = ["demo/accel*"]
[[control_nodes]]
path = "demo/ctl"
[[libraries]]
glob = "/opt/demo/lib/libdemo.so.*"
[env]
DEMO_DRIVER = "1"
"#;

    fn parse(text: &str) -> Result<Profile, ProfileError> {
        Profile::parse(text, Path::new("/p/demo.toml"))
    }

    #[test]
    fn capability_tags_name_declared_parts_of_a_table_with_its_own_variable() {
        let with = |table: &str, tag: &str| {
            parse(&DEMO.replace(
                "glob = \"/opt/demo/lib/libdemo.so.*\"",
                &format!("glob = \"/opt/demo/lib/libdemo.so.*\"\ncapability = {tag:?}\n{table}"),
            ))
        };
        let table = "[capabilities]\nenv = \"DEMO_CAPS\"\nnames = [\"compute\", \"video\"]\ndefault = [\"compute\"]";
        let p = with(table, "video").unwrap();
        assert_eq!(p.capabilities.unwrap().env, "DEMO_CAPS");
        assert_eq!(p.libraries[0].capability.as_deref(), Some("video"));
        for (table, tag, key) in [
            (table, "graphics", "libraries[0].capability"),
            ("", "video", "libraries[0].capability"),
            (
                "[capabilities]\nenv = \"DEMO_VISIBLE_DEVICES\"\nnames = [\"video\"]",
                "video",
                "capabilities.env",
            ),
            (
                "[capabilities]\nenv = \"DEMO_CAPS\"\nnames = [\"video\"]\ndefault = [\"compute\"]",
                "video",
                "capabilities.default[0]",
            ),
        ] {
            let e = with(table, tag).unwrap_err().to_string();
            assert!(e.contains(&format!("key `{key}`")), "{table} / {tag}: {e}");
        }
    }

    #[test]
    fn a_librarys_links_are_plain_library_names() {
        let with = |links: &str| {
            parse(&DEMO.replace(
                "glob = \"/opt/demo/lib/libdemo.so.*\"",
                &format!("glob = \"/opt/demo/lib/libdemo.so.*\"\nlinks = {links}"),
            ))
        };
        assert_eq!(
            with("[\"libdemo.so\"]").unwrap().libraries[0].links,
            ["libdemo.so"]
        );
        for bad in ["[\"../libdemo.so\"]", "[\"\"]", "[\"demo\"]"] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("key `libraries[0].links[0]`"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_attribute_name_must_be_a_short_identifier_of_its_own() {
        let with = |name: &str| {
            Profile::parse(
                &format!(
                    "name = \"x\"\nresource = \"a.io/x\"\n[discovery]\nnodes = [\"x\"]\n\
                     [discovery.attributes_sysfs]\n{name} = \"class/x/{{name}}/vendor\"\n"
                ),
                Path::new("x.toml"),
            )
        };
        assert!(with("vendor").is_ok());
        assert!(with("pci_device_2").is_ok());
        for (bad, says) in [
            ("\"2vendor\"", "C identifier"),
            ("\"ven-dor\"", "C identifier"),
            (&"a".repeat(33), "at most 32"),
            ("id", "every device carries"),
            ("numaNode", "every device carries"),
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(
                e.contains("discovery.attributes_sysfs") && e.contains(says),
                "{bad}: {e}"
            );
        }
        let e = Profile::parse(
            "name = \"x\"\nresource = \"a.io/x\"\n[discovery]\nnodes = [\"x\"]\n\
             [discovery.attributes_sysfs]\nvendor = \"../etc/shadow\"\n",
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("discovery.attributes_sysfs.vendor"), "{e}");
    }

    #[test]
    fn parses_demo_with_defaults() {
        let p = parse(DEMO).unwrap();
        assert_eq!(p.name.as_str(), "demo");
        assert_eq!(p.request_env(), "DEMO_VISIBLE_DEVICES");
        assert_eq!(p.replicas, 1);
        assert_eq!(p.allocate_mode, AllocateMode::Envvar);
        assert_eq!(p.discovery.id, IdSource::Index);
        assert_eq!(p.library_dirs, default_library_dirs());
        assert_eq!(p.request_annotation(), "devinject.io/demo.devices");
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let err = parse(&DEMO.replace("[env]", "libraryz = 1\n[env]"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/p/demo.toml"), "{err}");
        assert!(err.contains("libraryz"), "{err}");
        assert!(err.contains("line"), "{err}");
    }

    #[test]
    fn unknown_nested_key_is_rejected() {
        let err = parse(&DEMO.replace("path = \"demo/ctl\"", "path = \"demo/ctl\"\nopt = true"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("opt"), "{err}");
    }

    #[test]
    fn validation_errors_name_the_key() {
        let cases = [
            (
                DEMO.replace("demo/accel*", "/dev/accel*"),
                "discovery.nodes[0]",
            ),
            (
                DEMO.replace("demo/accel*", "../accel*"),
                "discovery.nodes[0]",
            ),
            (
                DEMO.replace("glob = \"/opt", "glob = \"opt"),
                "libraries[0].glob",
            ),
            (
                DEMO.replace("glob = \"/opt/demo/lib/libdemo.so.*\"", "optional = true"),
                "libraries[0]",
            ),
            (soname(""), "libraries[0].soname"),
            (soname("lib/libdemo.so.1"), "libraries[0].soname"),
            (soname("libdemo"), "libraries[0].soname"),
            (DEMO.replace("devinject.io/demo", "demo"), "resource"),
            (DEMO.replace("name = \"demo\"", "name = \"Demo\""), "name"),
            (format!("replicas = 0\n{DEMO}"), "replicas"),
            (format!("request_env = \"9X\"\n{DEMO}"), "request_env"),
            (DEMO.replace("DEMO_DRIVER", "\"A-B\""), "env.A-B"),
            (
                DEMO.replace("nodes = [\"demo/accel*\"]", "nodes = []"),
                "discovery.nodes",
            ),
            (
                DEMO.replace(
                    "nodes = [\"demo/accel*\"]",
                    "nodes = [\"x\"]\nid = \"sysfs\"",
                ),
                "discovery.id",
            ),
            (prepare("command = []"), "prepare.command"),
            (prepare("command = [\"bin/program\"]"), "prepare.command[0]"),
            (prepare("command = [\"/bin/p\", \"a\\u0000b\"]"), "prepare.command[1]"),
            (prepare("command = [\"/bin/p\"]\ntimeout_ms = 0"), "prepare.timeout_ms"),
            (prepare("command = [\"/bin/p\"]\ntimeout_ms = 300001"), "prepare.timeout_ms"),
            (
                prepare("command = [\"/bin/p\"]\nfunctions = [{ id = \"a b\" }]"),
                "prepare.functions[0].id",
            ),
            (
                prepare(&format!("command = [\"/bin/p\"]\nfunctions = [{{ id = \"{}\" }}]", "x".repeat(129))),
                "prepare.functions[0].id",
            ),
            (
                prepare("command = [\"/bin/p\"]\nfunctions = [{ id = \"a\" }, { id = \"a\" }]"),
                "prepare.functions[1].id",
            ),
            (
                prepare("command = [\"/bin/p\"]\nfunctions = [{ id = \"a\", resource = \"nlb\" }]"),
                "prepare.functions[0].resource",
            ),
            (
                prepare("command = [\"/bin/p\"]\nfunctions = [{ id = \"a\", resource = \"devinject.io/demo\" }]"),
                "prepare.functions[0].resource",
            ),
            (
                prepare("command = [\"/bin/p\"]\nfunctions = [{ id = \"a\", resource = \"x.io/f\" }, { id = \"b\", resource = \"x.io/f\" }]"),
                "prepare.functions[1].resource",
            ),
        ];
        for (text, key) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{key}`")),
                "expected key {key}: {err}"
            );
        }
    }

    /// docs/profiles.md's key table names every top-level key the parser accepts, and no other.
    #[test]
    fn docs_list_every_top_level_key() {
        let err = parse("zz_not_a_key = 1\n").unwrap_err().to_string();
        let expected = err
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("serde names the keys: {err}"));
        let mut accepted: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        accepted.sort_unstable();
        let docs = include_str!("../../../../docs/profiles.md");
        let table = docs.split("## Keys").nth(1).expect("a Keys section");
        let mut documented: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("| key"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .filter_map(|l| l.split('|').nth(1))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .map(|key| key.split('.').next().unwrap_or(key))
            .collect();
        documented.sort_unstable();
        documented.dedup();
        assert_eq!(documented, accepted);
    }

    /// The demo profile with its library named by `soname` instead of a glob.
    fn soname(soname: &str) -> String {
        DEMO.replace(
            "glob = \"/opt/demo/lib/libdemo.so.*\"",
            &format!("soname = {soname:?}"),
        )
    }

    #[test]
    fn library_names_are_file_unless_soname_is_asked_for() {
        assert_eq!(parse(DEMO).unwrap().library_names, LibraryNames::File);
        let with = |v: &str| parse(&format!("library_names = {v:?}\n{DEMO}"));
        assert_eq!(with("soname").unwrap().library_names, LibraryNames::Soname);
        assert_eq!(with("file").unwrap().library_names, LibraryNames::File);
        let err = with("sonames").unwrap_err().to_string();
        assert!(
            err.contains("library_names") && err.contains("soname"),
            "{err}"
        );
    }

    #[test]
    fn a_soname_is_a_file_name_with_so_in_it() {
        let p = parse(&soname("libdemo.so.1")).unwrap();
        assert_eq!(p.libraries[0].soname.as_deref(), Some("libdemo.so.1"));
    }

    /// Without `library_dirs`, sonames are searched in the multiarch directories first, then
    /// the 64-bit ones, then the plain ones.
    #[test]
    fn the_default_library_dirs() {
        assert_eq!(
            default_library_dirs(),
            [
                "/usr/lib/x86_64-linux-gnu",
                "/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu",
                "/lib/aarch64-linux-gnu",
                "/usr/lib64",
                "/lib64",
                "/usr/lib",
                "/lib",
            ]
        );
    }

    /// The demo profile with a prepare step of `body`.
    fn prepare(body: &str) -> String {
        format!("{DEMO}\n[prepare]\n{body}\n")
    }

    #[test]
    fn a_prepare_step_at_its_bounds_is_accepted() {
        let id = "x".repeat(128);
        let p = parse(&prepare(&format!(
            "command = [\"/opt/p\", \"--all\"]\ntimeout_ms = 300000\nfunctions = [{{ id = \"{id}\" }}, {{ id = \"a.b_c-1\", resource = \"x.io/f\" }}]"
        )))
        .unwrap();
        let spec = p.prepare.unwrap();
        assert_eq!(spec.command, ["/opt/p", "--all"]);
        assert_eq!(spec.timeout_ms, MAX_PREPARE_TIMEOUT_MS);
        assert_eq!(spec.functions[0].id, id);
        assert_eq!(spec.functions[1].resource.as_deref(), Some("x.io/f"));
        let p = parse(&prepare("command = [\"/opt/p\"]\ntimeout_ms = 1")).unwrap();
        assert_eq!(p.prepare.as_ref().unwrap().timeout_ms, 1);
        assert_eq!(p.function_env(), "DEMO_FUNCTION");
        assert_eq!(p.function_annotation(), "devinject.io/demo.function");
    }

    /// With a shared device, pod B's start would load its function into the physical device pod A
    /// is using. Such a profile does not load, naming the file, both keys and the fix; a prepare
    /// step with one replica, and replicas without one, still load.
    #[test]
    fn more_sysfs_attributes_than_a_dra_device_holds_are_refused() {
        let attrs = |n: usize| {
            (0..n)
                .map(|i| format!("a{i} = \"class/x/{{name}}/a{i}\"\n"))
                .collect::<String>()
        };
        let text = |n: usize| {
            format!(
                "name = \"x\"\nresource = \"devinject.io/x\"\n[discovery]\nnodes = [\"x[0-9]\"]\n\
                 [discovery.attributes_sysfs]\n{}",
                attrs(n)
            )
        };
        Profile::parse(&text(MAX_SYSFS_ATTRIBUTES), Path::new("x.toml")).unwrap();
        let e = Profile::parse(&text(MAX_SYSFS_ATTRIBUTES + 1), Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("discovery.attributes_sysfs") && e.contains("25 attributes"),
            "{e}"
        );
    }

    #[test]
    fn a_health_interval_needs_a_health_attribute_and_a_bounded_value() {
        let base = "name = \"x\"\nresource = \"x.io/x\"\n[discovery]\nnodes = [\"x*\"]\n";
        let with = |extra: &str| parse(&format!("{base}{extra}"));
        let attr = "health_sysfs = \"class/x/{name}/health\"\n";
        assert_eq!(
            with(attr).unwrap().health_interval(),
            Some(DEFAULT_HEALTH_INTERVAL)
        );
        assert_eq!(
            with(&format!("{attr}health_interval_ms = 250\n"))
                .unwrap()
                .health_interval(),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(with("").unwrap().health_interval(), None);
        let e = with("health_interval_ms = 250\n").unwrap_err().to_string();
        assert!(
            e.contains("discovery.health_interval_ms") && e.contains("health_sysfs"),
            "{e}"
        );
        for bad in [0, MIN_HEALTH_INTERVAL_MS - 1, MAX_HEALTH_INTERVAL_MS + 1] {
            let e = with(&format!("{attr}health_interval_ms = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("discovery.health_interval_ms") && e.contains(&bad.to_string()),
                "{e}"
            );
        }
    }

    #[test]
    fn a_health_taint_needs_a_health_attribute_and_names_an_effect() {
        let base =
            "name = \"x\"\nresource = \"devinject.io/x\"\n[discovery]\nnodes = [\"x[0-9]\"]\n";
        let p = Profile::parse(
            &format!(
                "{base}health_sysfs = \"class/x/{{name}}/health\"\nhealth_taint = \"NoExecute\"\n"
            ),
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(p.discovery.health_taint, Some(HealthTaint::NoExecute));
        let e = Profile::parse(
            &format!("{base}health_taint = \"NoExecute\"\n"),
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("discovery.health_taint") && e.contains("health_sysfs"),
            "{e}"
        );
        let e = Profile::parse(
            &format!("{base}health_sysfs = \"h\"\nhealth_taint = \"PreferNoSchedule\"\n"),
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("PreferNoSchedule") || e.contains("health_taint"),
            "{e}"
        );
    }

    #[test]
    fn partitions_are_read_and_refused_beside_other_sharing() {
        const TABLE: &str =
            "[partitions]\nunits = 4\nenv = \"DEMO_PARTITION\"\n[partitions.shapes]\nhalf = 2\n";
        let p = parse(&format!("{DEMO}{TABLE}")).unwrap();
        let parts = p.partitions.unwrap();
        assert_eq!((parts.units, parts.env.as_str()), (4, "DEMO_PARTITION"));
        assert_eq!(parse(DEMO).unwrap().partitions, None);
        let err = parse(&format!("{DEMO}{TABLE}half = 3\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("half"), "{err}");
        let err = parse(&format!(
            "{DEMO}[partitions]\nunits = 4\nenv = \"E\"\n[partitions.shapes]\nthird = 3\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`partitions.shapes.third`") && err.contains("divides"),
            "{err}"
        );
        for (other, words) in [
            (
                "[capacity]\npods = 4\n",
                "remove `[capacity]` or `[partitions]`",
            ),
            (
                "[prepare]\ncommand = [\"/opt/p\"]\n",
                "remove `[prepare]` or `[partitions]`",
            ),
        ] {
            let err = parse(&format!("{DEMO}{other}{TABLE}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("`partitions`") && err.contains(words), "{err}");
        }
        let err = parse(&format!(
            "{DEMO}{}",
            TABLE.replace("DEMO_PARTITION", "DEMO-PARTITION")
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`partitions.env`") && err.contains("not an env variable name"),
            "{err}"
        );
        let replicas = DEMO.replacen("[discovery]", "replicas = 2\n[discovery]", 1);
        let err = parse(&format!("{replicas}{TABLE}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("remove `replicas` or `[partitions]`"), "{err}");
    }

    #[test]
    fn a_capacity_shares_a_device_and_cannot_be_combined_with_a_prepare_step() {
        let p = parse(&format!("{DEMO}[capacity]\npods = 4\n")).unwrap();
        assert_eq!(
            p.capacity,
            Some(Capacity {
                name: "pods".into(),
                value: crate::capacity::Amount(4000),
                step: crate::capacity::Amount::ONE,
                default: crate::capacity::Amount::ONE,
            })
        );
        assert_eq!(parse(DEMO).unwrap().capacity, None);
        let err = parse(&format!("{DEMO}[capacity]\npods = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`capacity.pods`") && err.contains("use 2 to"),
            "{err}"
        );
        let prepared = format!(
            "{}\n[capacity]\npods = 4\n",
            prepare("command = [\"/opt/p\"]")
        );
        let err = parse(&prepared).unwrap_err().to_string();
        assert!(
            err.contains("`capacity`")
                && err.contains("remove `[capacity]` or the `[prepare]` section"),
            "{err}"
        );
    }

    #[test]
    fn a_shared_device_with_a_prepare_step_does_not_load() {
        let shared = format!(
            "replicas = 2\n{}",
            prepare("command = [\"/opt/p\"]\nfunctions = [{ id = \"nlb3\" }]")
        );
        let err = parse(&shared).unwrap_err();
        assert!(
            matches!(err, ProfileError::SharedPrepare { replicas: 2, .. }),
            "{err}"
        );
        let text = err.to_string();
        for needle in [
            "/p/demo.toml",
            "`replicas` (= 2)",
            "`[prepare]`",
            "set `replicas = 1` or remove the `[prepare]` section",
        ] {
            assert!(text.contains(needle), "{needle:?} missing: {text}");
        }
        assert!(parse(&format!(
            "replicas = 1\n{}",
            prepare("command = [\"/opt/p\"]")
        ))
        .is_ok());
        assert!(parse(&format!("replicas = 2\n{DEMO}")).is_ok());
    }
}

#[cfg(test)]
mod props {
    //! Property tests (`PROPTEST_CASES` sets the number of cases; 256 by default).

    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;

    use super::*;

    fn parse(text: &str) -> Result<Profile, ProfileError> {
        Profile::parse(text, Path::new("/p/x.toml"))
    }

    /// A TOML string value, escaped.
    fn quoted(s: &str) -> String {
        toml::Value::String(s.to_owned()).to_string()
    }

    /// Values that are sometimes right and often wrong, for any string key.
    fn any_str() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9-]{0,10}",
            "[a-z]{1,5}\\.io/[a-z]{1,5}",
            "/[a-z0-9/*._-]{0,20}",
            "[a-z0-9/*._-]{0,20}",
            "\\.\\./[a-z]{1,5}",
            any::<String>(),
        ]
    }

    /// Mostly `good`, sometimes anything.
    fn mostly(good: &'static str) -> impl Strategy<Value = String> {
        prop_oneof![9 => good.prop_map(|s: String| s), 1 => any_str()]
    }

    fn toml_list(items: &[String]) -> String {
        let quoted: Vec<String> = items.iter().map(|s| quoted(s)).collect();
        format!("[{}]", quoted.join(", "))
    }

    /// A profile document: every key with mostly valid, sometimes arbitrary values, optional
    /// keys present or not, the odd unknown key or wrongly typed value.
    fn document() -> impl Strategy<Value = String> {
        let head = (
            mostly("[a-z][a-z0-9]{0,8}"),
            mostly("[a-z]{1,5}\\.io/[a-z]{1,5}"),
            proptest::option::of(mostly("[A-Z][A-Z0-9_]{0,8}")),
            proptest::option::of(prop_oneof![
                4 => (1u32..=MAX_REPLICAS).prop_map(|n| n.to_string()),
                1 => any::<i64>().prop_map(|n| n.to_string()),
                1 => any_str().prop_map(|s| quoted(&s)),
            ]),
            proptest::option::of(prop_oneof![
                Just("\"envvar\""),
                Just("\"cdi-annotations\""),
                Just("\"cdi-cri\""),
                Just("\"cdi\""),
                Just("3"),
            ]),
            proptest::option::of(vec(mostly("/[a-z]{1,6}(/[a-z0-9_-]{1,6})?"), 0..3)),
            proptest::option::of(("[a-z_]{1,8}", any::<i32>())),
        );
        let discovery = (
            vec(mostly("[a-z]{1,6}(/[a-z]{1,6})?[*]?"), 0..3),
            prop_oneof![4 => Just("index"), 2 => Just("name"), 2 => Just("sysfs"), 1 => Just("uuid")],
            proptest::option::of(mostly("class/[a-z]{1,6}/\\{name\\}/[a-z]{1,6}")),
            proptest::option::of(mostly("class/[a-z]{1,6}/\\{n\\}/numa_node")),
            btree_map(
                mostly("class/[a-z]{1,6}/\\{name\\}/vendor"),
                any_str(),
                0..2,
            ),
        );
        let node = mostly("[a-z]{1,6}(/[a-z0-9{}]{1,6})?")
            .prop_map(|p| format!("path = {}\n", quoted(&p)))
            .boxed();
        let library = prop_oneof![
            3 => mostly("lib[a-z]{1,6}\\.so\\.[0-9]").prop_map(|s| format!("soname = {}\n", quoted(&s))),
            3 => mostly("/usr/lib/[a-z]{1,6}\\.so\\.\\*").prop_map(|g| format!("glob = {}\n", quoted(&g))),
            1 => Just("soname = \"libx.so.1\"\nglob = \"/x\"\n".to_owned()),
            1 => Just("optional = true\n".to_owned()),
        ];
        let file = (
            mostly("/opt/[a-z]{1,6}/[a-z]{1,6}"),
            proptest::option::of(mostly("/usr/bin/[a-z]{1,6}")),
        )
            .prop_map(|(p, c)| {
                let mut t = format!("path = {}\n", quoted(&p));
                if let Some(c) = c {
                    t.push_str(&format!("container_path = {}\n", quoted(&c)));
                }
                t
            })
            .boxed();
        let tables = (
            vec(node.clone(), 0..3),
            vec(node, 0..2),
            vec(library, 0..3),
            vec(file.clone(), 0..2),
            vec(file, 0..2),
        );
        let env = btree_map(mostly("[A-Z_][A-Z0-9_]{0,8}"), any_str(), 0..3);
        (head, discovery, tables, env).prop_map(|(head, discovery, tables, env)| {
            let (name, resource, request_env, replicas, mode, dirs, unknown) = head;
            let mut doc = format!(
                "name = {}\nresource = {}\n",
                quoted(&name),
                quoted(&resource)
            );
            if let Some(v) = request_env {
                doc.push_str(&format!("request_env = {}\n", quoted(&v)));
            }
            if let Some(v) = replicas {
                doc.push_str(&format!("replicas = {v}\n"));
            }
            if let Some(v) = mode {
                doc.push_str(&format!("allocate_mode = {v}\n"));
            }
            if let Some(v) = dirs {
                doc.push_str(&format!("library_dirs = {}\n", toml_list(&v)));
            }
            if let Some((k, v)) = unknown {
                doc.push_str(&format!("{k} = {v}\n"));
            }
            let (nodes, id, id_sysfs, numa, require) = discovery;
            doc.push_str(&format!(
                "[discovery]\nnodes = {}\nid = {}\n",
                toml_list(&nodes),
                quoted(id)
            ));
            if let Some(v) = id_sysfs {
                doc.push_str(&format!("id_sysfs = {}\n", quoted(&v)));
            }
            if let Some(v) = numa {
                doc.push_str(&format!("numa_sysfs = {}\n", quoted(&v)));
            }
            doc.push_str("[discovery.require_sysfs]\n");
            for (k, v) in require {
                doc.push_str(&format!("{} = {}\n", quoted(&k), quoted(&v)));
            }
            let (device_nodes, control_nodes, libraries, binaries, files) = tables;
            for (table, entries) in [
                ("device_nodes", device_nodes),
                ("control_nodes", control_nodes),
                ("libraries", libraries),
                ("binaries", binaries),
                ("files", files),
            ] {
                for e in entries {
                    doc.push_str(&format!("[[{table}]]\n{e}"));
                }
            }
            doc.push_str("[env]\n");
            for (k, v) in env {
                doc.push_str(&format!("{} = {}\n", quoted(&k), quoted(&v)));
            }
            doc
        })
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in any::<String>()) {
            let _ = parse(&s);
        }

        #[test]
        fn assembled_documents_never_panic_and_errors_name_the_file(doc in document()) {
            match parse(&doc) {
                Err(e) => prop_assert!(e.to_string().contains("/p/x.toml"), "{}", e),
                // Whatever passed validation is usable: names and paths as checked.
                Ok(p) => {
                    prop_assert!(ProfileName::new(p.name.as_str()).is_ok());
                    prop_assert!(p.discovery.nodes.iter().all(|n| check_relative(n).is_ok()));
                    prop_assert!(p.library_dirs.iter().all(|d| check_absolute(d).is_ok()));
                    prop_assert!(is_env_name(p.request_env()));
                }
            }
        }

        #[test]
        fn valid_profiles_keep_their_values(
            name in "[a-z][a-z0-9]{0,10}",
            domain in "[a-z]{1,8}\\.(io|com|org)",
            replicas in 1u32..=MAX_REPLICAS,
            nodes in vec("[a-z]{1,6}(/[a-z]{1,6})?[*]?", 1..4),
            env in btree_map("[A-Z][A-Z0-9_]{0,8}", "[ -~]{0,12}", 0..4),
        ) {
            let nodes_toml: Vec<String> = nodes.iter().map(|n| quoted(n)).collect();
            let mut doc = format!(
                "name = {}\nresource = {}\nreplicas = {replicas}\n[discovery]\nnodes = [{}]\n[env]\n",
                quoted(&name),
                quoted(&format!("{domain}/{name}")),
                nodes_toml.join(", "),
            );
            for (k, v) in &env {
                doc.push_str(&format!("{k} = {}\n", quoted(v)));
            }
            let p = parse(&doc).unwrap();
            prop_assert_eq!(p.name.as_str(), name.as_str());
            prop_assert_eq!(p.resource_name(), format!("{domain}/{name}"));
            prop_assert_eq!(p.replicas, replicas);
            prop_assert_eq!(&p.discovery.nodes, &nodes);
            prop_assert_eq!(&p.env, &env);
            prop_assert_eq!(p.request_env(), format!("{}_VISIBLE_DEVICES", name.to_ascii_uppercase()));
        }

        #[test]
        fn unknown_keys_are_named(key in "[a-z][a-z_]{2,12}") {
            let known = [
                "name", "resource", "description", "request_env", "replicas", "allocate_mode",
                "discovery", "device_nodes", "control_nodes", "library_dirs", "library_names", "libraries",
                "binaries", "files", "env",
            ];
            prop_assume!(!known.contains(&key.as_str()));
            let doc = format!("{key} = 1\nname = \"x\"\nresource = \"a.io/x\"\n[discovery]\nnodes = [\"x\"]\n");
            let err = parse(&doc).unwrap_err().to_string();
            prop_assert!(err.contains(&key) && err.contains("/p/x.toml"), "{}", err);
        }

        #[test]
        fn bad_paths_name_their_key(bad in prop_oneof!["\\.\\./[a-z]{1,5}", "[a-z]{1,5}/\\.\\./[a-z]{1,5}", "/[a-z]{1,5}"], which in 0usize..3) {
            let (key, doc) = match which {
                0 => ("discovery.nodes[0]", format!("name = \"x\"\nresource = \"a.io/x\"\n[discovery]\nnodes = [{}]\n", quoted(&bad))),
                1 => ("control_nodes[0].path", format!("name = \"x\"\nresource = \"a.io/x\"\n[discovery]\nnodes = [\"x\"]\n[[control_nodes]]\npath = {}\n", quoted(&bad))),
                _ => ("discovery.id_sysfs", format!("name = \"x\"\nresource = \"a.io/x\"\n[discovery]\nnodes = [\"x\"]\nid_sysfs = {}\n", quoted(&bad))),
            };
            let err = parse(&doc).unwrap_err().to_string();
            prop_assert!(err.contains(&format!("`{key}`")) && err.contains(&format!("{bad:?}")), "{}", err);
        }
    }
}
