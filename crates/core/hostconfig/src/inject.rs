//! How the hook injects: the mount API it uses (`mount_api`) and who writes the container's
//! linker cache (`ldcache`). The hook's `inject` module acts on them.

use serde::Deserialize;

/// How injected files are mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MountApi {
    /// The new mount API (`open_tree` + `mount_setattr` + `move_mount`, Linux 5.12+) where the
    /// kernel has it, else the classic bind + remount.
    #[default]
    Auto,
    /// Always the classic `mount(MS_BIND)` then `MS_REMOUNT|MS_RDONLY`.
    Classic,
}

/// Who writes the container's linker cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheWriter {
    /// The hook itself, falling back to ldconfig for what it cannot merge.
    #[default]
    Builtin,
    /// Always the host's ldconfig, run chrooted in the container.
    Ldconfig,
}
